//! Clients of a daemon's control socket: [`Client`] blocks (`p2pjob`),
//! [`AsyncClient`] runs on tokio (the status page).

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
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(3)).with_context(|| {
            format!(
                "no jobd answers at {addr} (start one with `jobd`, name a running one with --node or \
                     $P2PJOB_NODE, or run without one: `p2pjob run --local 4 -n 4 PROGRAM`)"
            )
        })?;
        stream.set_nodelay(true)?;
        (&stream).write_all(TOOL_PREFACE)?;
        let me = NodeAddr(stream.local_addr()?);
        Ok(Client { stream, dec: FrameDecoder::default(), me, next_id: 0 })
    }

    /// Sends a request; its replies carry the returned request id.
    pub fn send(&mut self, req: ToolRequest) -> anyhow::Result<u64> {
        self.next_id += 1;
        self.stream.write_all(&request_frame(self.me, self.next_id, req)?)?;
        Ok(self.next_id)
    }

    /// The next reply to a tool request (waits up to `timeout`, forever with `None`).
    pub fn next(&mut self, timeout: Option<Duration>) -> anyhow::Result<(u64, ToolReply, Bytes)> {
        self.stream.set_read_timeout(timeout)?;
        let mut chunk = [0u8; 64 * 1024];
        loop {
            if let Some(reply) = next_reply(&mut self.dec)? {
                return Ok(reply);
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

/// The frame of request `id` from `me`.
fn request_frame(me: NodeAddr, id: u64, req: ToolRequest) -> anyhow::Result<BytesMut> {
    let env = Envelope::new(Id::hash(me.to_string()), me, id, req);
    let mut buf = BytesMut::new();
    encode_frame(&env, &mut buf, DEFAULT_MAX_FRAME)?;
    Ok(buf)
}

/// The next whole reply in `dec`: request id, reply, payload.
fn next_reply(dec: &mut FrameDecoder) -> anyhow::Result<Option<(u64, ToolReply, Bytes)>> {
    let Some(frame) = dec.decode()? else { return Ok(None) };
    let env: Envelope<ToolReply> = decode_envelope(frame)?;
    Ok(Some((env.request_id, env.body, env.payload)))
}

/// The same connection for async code (the status page): requests go out
/// at once, replies of every request come back in order on one stream.
#[derive(Debug)]
pub struct AsyncClient {
    stream: tokio::net::TcpStream,
    dec: FrameDecoder,
    buf: Vec<u8>,
    me: NodeAddr,
    next_id: u64,
}

impl AsyncClient {
    /// Connects to the control socket at `addr`.
    pub async fn connect(addr: SocketAddr) -> anyhow::Result<AsyncClient> {
        use tokio::io::AsyncWriteExt;
        let connect = tokio::net::TcpStream::connect(addr);
        let mut stream = tokio::time::timeout(Duration::from_secs(3), connect)
            .await
            .map_err(anyhow::Error::from)
            .and_then(|r| r.map_err(anyhow::Error::from))
            .with_context(|| format!("no jobd answers at {addr}"))?;
        stream.set_nodelay(true)?;
        stream.write_all(TOOL_PREFACE).await?;
        let me = NodeAddr(stream.local_addr()?);
        Ok(AsyncClient { stream, dec: FrameDecoder::default(), buf: vec![0; 64 * 1024], me, next_id: 0 })
    }

    /// Sends a request; its replies carry the returned request id.
    pub async fn send(&mut self, req: ToolRequest) -> anyhow::Result<u64> {
        use tokio::io::AsyncWriteExt;
        self.next_id += 1;
        self.stream.write_all(&request_frame(self.me, self.next_id, req)?).await?;
        Ok(self.next_id)
    }

    /// The next reply to any request. Cancel-safe: a reply half read stays
    /// buffered for the next call.
    pub async fn next(&mut self) -> anyhow::Result<(u64, ToolReply, Bytes)> {
        use tokio::io::AsyncReadExt;
        loop {
            if let Some(reply) = next_reply(&mut self.dec)? {
                return Ok(reply);
            }
            let n = self.stream.read(&mut self.buf).await.context("reading from jobd")?;
            if n == 0 {
                bail!("jobd closed the connection");
            }
            self.dec.push(&self.buf[..n]);
        }
    }
}
