//! The rank's side of the local node protocol: a framed request/reply
//! connection to `P2PMP_NODE` ([`Calls`] frames the requests and decodes the
//! replies). Control traffic only, never on the data path.
//!
//! Inside progress nothing waits for the node: [`NodeClient::request`] queues a
//! request and returns its id, the poll loop writes it ([`NodeClient::flush`])
//! and reads the replies ([`NodeClient::read_replies`]) when the socket is
//! ready. Only start-up and shutdown, outside progress, wait for an answer
//! ([`NodeClient::call`]).

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::Duration;

use bytes::Bytes;
use mio::net::TcpStream;
use p2pmp_core::id::Id;
use p2pmp_core::local::{Endpoint, LocalReply, LocalRequest};
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::wire::Calls;
use p2pmp_core::wire::vectored::write_queue;

use crate::error::{Error, Result};
use crate::sock::{self, Wait};

/// How long a blocking call waits for the node's answer.
const CALL_WAIT: Duration = Duration::from_secs(30);

/// A connection to the local node. The node keeps this process's registration
/// alive while the connection is open.
#[derive(Debug)]
pub(crate) struct NodeClient {
    pub(crate) stream: TcpStream,
    calls: Calls<LocalRequest, LocalReply>,
    tx: VecDeque<Bytes>,
    /// Replies read while a blocking call waited for its own.
    stash: Vec<(u64, LocalReply)>,
}

impl NodeClient {
    /// Connects to the node at `node`; `me`/`my_addr` stamp the envelopes.
    pub(crate) fn connect(node: SocketAddr, me: Id, my_addr: NodeAddr) -> Result<Self> {
        let stream = std::net::TcpStream::connect_timeout(&node, Duration::from_secs(10))
            .map_err(|e| Error::Node(format!("cannot reach the local node at {node}: {e}")))?;
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        let stream = TcpStream::from_std(stream);
        Ok(NodeClient { stream, calls: Calls::new(me, my_addr), tx: VecDeque::new(), stash: Vec::new() })
    }

    /// Queues `req` and writes what the socket takes now: its request id.
    pub(crate) fn request(&mut self, req: LocalRequest) -> Result<u64> {
        let (id, frame) = self.calls.request(req)?;
        self.tx.push_back(frame.freeze());
        self.flush()?;
        Ok(id)
    }

    /// Writes queued requests without waiting.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        let stream = &self.stream;
        write_queue::<8>(&mut self.tx, |iov| sock::send_vectored(stream, iov)).map(drop)
    }

    /// Reads what the node sent, without waiting, and appends every whole reply
    /// to `out` (request id, reply). An error when the node closed the
    /// connection or sent malformed bytes.
    pub(crate) fn read_replies(&mut self, out: &mut Vec<(u64, LocalReply)>) -> Result<()> {
        out.append(&mut self.stash);
        loop {
            match sock::recv_spare(&self.stream, self.calls.decoder().buffer_mut(), Wait::No) {
                Ok((0, _)) => return Err(Error::Node("the local node closed the connection".into())),
                Ok(_) => {
                    while let Some((id, reply, _)) = self.calls.next_reply()? {
                        out.push((id, reply));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Sends `req` and waits for its reply (start-up and shutdown only: never
    /// inside progress). Other replies read meanwhile are kept for
    /// [`NodeClient::read_replies`].
    pub(crate) fn call(&mut self, req: LocalRequest) -> Result<LocalReply> {
        let id = self.request(req)?;
        let deadline = std::time::Instant::now() + CALL_WAIT;
        let mut got = Vec::new();
        loop {
            let now = std::time::Instant::now();
            if now >= deadline {
                return Err(Error::Node("the local node did not answer in time".into()));
            }
            let events = if self.tx.is_empty() { libc::POLLIN } else { libc::POLLIN | libc::POLLOUT };
            sock::wait_fd(self.stream.as_raw_fd(), events, deadline - now)?;
            self.flush()?;
            self.read_replies(&mut got)?;
            if let Some(i) = got.iter().position(|(rid, _)| *rid == id) {
                let (_, reply) = got.remove(i);
                self.stash.append(&mut got);
                return Ok(reply);
            }
        }
    }

    /// Registers a process key (`req`, a registration) and waits for the answer.
    pub(crate) fn register(&mut self, req: LocalRequest) -> Result<()> {
        match self.call(req)? {
            LocalReply::Registered { .. } => Ok(()),
            other => Err(Error::Node(format!("register refused: {other:?}"))),
        }
    }

    /// Stamps later requests with `addr`, where we listen now.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn set_addr(&mut self, addr: NodeAddr) {
        self.calls.set_addr(addr);
    }

    /// Where we listen, as the node was told.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn addr(&self) -> NodeAddr {
        self.calls.addr()
    }

    /// Withdraws our registration of `key`.
    pub(crate) fn unregister(&mut self, key: Id) -> Result<()> {
        let addr = self.calls.addr();
        self.call(LocalRequest::Unregister { key, addr }).map(|_| ())
    }
}

/// What a reply to a resolve says: the endpoints, or why there are none.
pub(crate) fn resolved(reply: LocalReply) -> Result<Vec<Endpoint>, String> {
    match reply {
        LocalReply::ResolvedKeyed { endpoints, .. } => Ok(endpoints),
        LocalReply::Resolved { addrs, .. } => Ok(addrs.into_iter().map(|addr| Endpoint { addr, key: None }).collect()),
        LocalReply::Failed { error } => Err(format!("resolve failed: {error}")),
        other => Err(format!("unexpected reply {other:?}")),
    }
}
