//! A blocking client of a daemon's control socket, for `p2pjob`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::{Bytes, BytesMut};
use p2pmp_core::id::Id;
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::node::control::{TOOL_PREFACE, ToolReply, ToolRequest};
use p2pmp_core::wire::{DEFAULT_MAX_FRAME, Envelope, FrameDecoder, decode_envelope, encode_frame};

/// One connection to a daemon's control socket.
#[derive(Debug)]
pub struct Client {
    stream: TcpStream,
    dec: FrameDecoder,
    me: NodeAddr,
    next_id: u64,
}

impl Client {
    /// Connects to the control socket at `addr`.
    pub fn connect(addr: SocketAddr) -> anyhow::Result<Client> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(3))
            .with_context(|| format!("no jobd answers at {addr} (start one, or use --local N)"))?;
        stream.set_nodelay(true)?;
        (&stream).write_all(TOOL_PREFACE)?;
        let me = NodeAddr(stream.local_addr()?);
        Ok(Client { stream, dec: FrameDecoder::default(), me, next_id: 0 })
    }

    /// Sends a request; its replies carry the returned request id.
    pub fn send(&mut self, req: ToolRequest) -> anyhow::Result<u64> {
        self.next_id += 1;
        let env = Envelope::new(Id::hash(self.me.to_string()), self.me, self.next_id, req);
        let mut buf = BytesMut::new();
        encode_frame(&env, &mut buf, DEFAULT_MAX_FRAME)?;
        self.stream.write_all(&buf)?;
        Ok(self.next_id)
    }

    /// The next reply to a tool request (waits up to `timeout`, forever with `None`).
    pub fn next(&mut self, timeout: Option<Duration>) -> anyhow::Result<(u64, ToolReply, Bytes)> {
        self.stream.set_read_timeout(timeout)?;
        let mut chunk = [0u8; 64 * 1024];
        loop {
            if let Some(frame) = self.dec.decode()? {
                let env: Envelope<ToolReply> = decode_envelope(frame)?;
                return Ok((env.request_id, env.body, env.payload));
            }
            let n = match self.stream.read(&mut chunk) {
                // A signal (a child of embedded daemons exiting) is no error.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => other.context("reading from jobd")?,
            };
            if n == 0 {
                bail!("jobd closed the connection");
            }
            self.dec.push(&chunk[..n]);
        }
    }

    /// Sends a request and waits for its first reply.
    pub fn call(&mut self, req: ToolRequest, timeout: Duration) -> anyhow::Result<ToolReply> {
        let id = self.send(req)?;
        loop {
            let (rid, reply, _) = self.next(Some(timeout))?;
            if rid == id {
                return Ok(reply);
            }
        }
    }
}
