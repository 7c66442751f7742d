//! The rank's side of the local node protocol: a blocking request/reply
//! connection to `P2PMP_NODE`. Control traffic only, never on the data path.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::BytesMut;
use p2pmp_core::id::Id;
use p2pmp_core::local::{LocalReply, LocalRequest};
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::wire::{DEFAULT_MAX_FRAME, Envelope, FrameDecoder, decode_envelope, encode_frame};

use crate::error::{Error, Result};

/// A connection to the local node. The node keeps this process's registration
/// alive while the connection is open.
#[derive(Debug)]
pub(crate) struct NodeClient {
    stream: TcpStream,
    dec: FrameDecoder,
    me: Id,
    my_addr: NodeAddr,
    next_id: u64,
}

impl NodeClient {
    /// Connects to the node at `node`; `me`/`my_addr` stamp the envelopes.
    pub(crate) fn connect(node: SocketAddr, me: Id, my_addr: NodeAddr) -> Result<Self> {
        let stream = TcpStream::connect_timeout(&node, Duration::from_secs(10))
            .map_err(|e| Error::Node(format!("cannot reach the local node at {node}: {e}")))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(NodeClient { stream, dec: FrameDecoder::default(), me, my_addr, next_id: 0 })
    }

    /// Sends `req` and waits for its reply.
    pub(crate) fn call(&mut self, req: LocalRequest) -> Result<LocalReply> {
        self.next_id += 1;
        let id = self.next_id;
        let mut buf = BytesMut::new();
        encode_frame(&Envelope::new(self.me, self.my_addr, id, req), &mut buf, DEFAULT_MAX_FRAME)?;
        self.stream.write_all(&buf)?;
        let mut chunk = [0u8; 4096];
        loop {
            while let Some(frame) = self.dec.decode()? {
                let env: Envelope<LocalReply> = decode_envelope(frame)?;
                if env.request_id == id {
                    return Ok(env.body);
                }
            }
            let n = match self.stream.read(&mut chunk) {
                // A signal the program handles is no error.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => other?,
            };
            if n == 0 {
                return Err(Error::Node("the local node closed the connection".into()));
            }
            self.dec.push(&chunk[..n]);
        }
    }

    /// Registers `key` at our listening address.
    pub(crate) fn register(&mut self, key: Id) -> Result<()> {
        match self.call(LocalRequest::Register { key, addr: self.my_addr })? {
            LocalReply::Registered { .. } => Ok(()),
            other => Err(Error::Node(format!("register refused: {other:?}"))),
        }
    }

    /// Every address registered under `key` (empty when none yet).
    pub(crate) fn resolve(&mut self, key: Id) -> Result<Vec<NodeAddr>> {
        match self.call(LocalRequest::Resolve { key })? {
            LocalReply::Resolved { addrs, .. } => Ok(addrs),
            LocalReply::Failed { error } => Err(Error::Node(format!("resolve failed: {error}"))),
            other => Err(Error::Node(format!("unexpected reply {other:?}"))),
        }
    }

    /// Stamps later requests (and registrations) with `addr`, where we listen now.
    pub(crate) fn set_addr(&mut self, addr: NodeAddr) {
        self.my_addr = addr;
    }

    /// Withdraws our registration of `key`.
    pub(crate) fn unregister(&mut self, key: Id) -> Result<()> {
        self.call(LocalRequest::Unregister { key, addr: self.my_addr }).map(|_| ())
    }
}
