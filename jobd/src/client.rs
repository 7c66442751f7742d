//! Clients of a daemon's control socket: [`Client`] blocks (`p2pjob`),
//! [`AsyncClient`] runs on tokio (the status page). Both frame requests and
//! decode replies with [`Calls`], as a rank's client of its node does.
//!
//! Requests about a job (submit, kill, status of one job, output, watch) go out
//! signed ([`ToolRequest::sign`]) with the client's key: the one given with
//! `with_key`, else the user's key file ([`crate::keys::chosen_path`], made on
//! first use). A submit's job signature covers every file the job stages, read
//! and hashed here, as the user running the client ([`sign`]).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use p2pmp_core::auth::SecretKey;
use p2pmp_core::job::StagedFile;
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::node::control::{TOOL_PREFACE, ToolReply, ToolRequest};
use p2pmp_core::wire::Calls;

/// One connection to a daemon's control socket.
#[derive(Debug)]
pub struct Client {
    stream: TcpStream,
    calls: Calls<ToolRequest, ToolReply>,
    key: Option<SecretKey>,
    /// Whether any reply came yet (a close before one may be a wrong port).
    answered: bool,
    /// The daemon's control address, as asked for.
    addr: SocketAddr,
}

/// `req` as it goes out: signed with `key` (loaded first if `None`) when it is
/// about a job.
fn seal(req: ToolRequest, key: &mut Option<SecretKey>) -> anyhow::Result<ToolRequest> {
    if !req.about_a_job() {
        return Ok(req);
    }
    let secret = match key {
        Some(k) => k,
        None => {
            let path = crate::keys::chosen_path(None);
            let (k, made) = crate::keys::load_or_create(&path)?;
            if made {
                eprintln!("p2pjob: created your key in {} ({}); `p2pjob whoami` prints it", path.display(), k.public());
            }
            key.insert(k)
        }
    };
    sign_now(req, secret)
}

/// `req` signed with `secret` now, with a random nonce (see [`sign`]).
pub fn sign_now(req: ToolRequest, secret: &SecretKey) -> anyhow::Result<ToolRequest> {
    let unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let mut nonce = [0u8; 8];
    getrandom::fill(&mut nonce).map_err(|e| anyhow::anyhow!("no randomness from the OS: {e}"))?;
    let ms = u64::try_from(unix.as_millis()).unwrap_or(u64::MAX);
    sign(req, secret, ms, u64::from_le_bytes(nonce))
}

/// `req` signed with `secret`, stamped `unix_ms`, with `nonce`. A submit's job
/// signature covers its job file and every file it stages
/// ([`ToolRequest::staged_sources`]), each read and hashed here, as the user
/// running this: the daemon, which reads them again to stage them, cannot
/// send others unnoticed. A file that cannot be read fails the submit.
pub fn sign(req: ToolRequest, secret: &SecretKey, unix_ms: u64, nonce: u64) -> anyhow::Result<ToolRequest> {
    let staged = req
        .staged_sources()
        .into_iter()
        .map(|src| {
            let (total, digest) = crate::files::digest_file(&src.path).with_context(|| {
                format!("cannot read {} to sign the job (a job's signature covers every file it stages)", src.path)
            })?;
            Ok(src.read_as(total, digest))
        })
        .collect::<anyhow::Result<Vec<StagedFile>>>()?;
    Ok(req.sign(secret, unix_ms, nonce, staged))
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
        Ok(Client { stream, calls: Calls::new(me.id(), me), key: None, answered: false, addr })
    }

    /// Signs with `key` instead of the user's key file.
    pub fn with_key(mut self, key: SecretKey) -> Client {
        self.key = Some(key);
        self
    }

    /// Sends a request (signed if it is about a job); its replies carry the
    /// returned request id.
    pub fn send(&mut self, req: ToolRequest) -> anyhow::Result<u64> {
        let req = seal(req, &mut self.key)?;
        self.send_as_is(req)
    }

    /// Sends a request exactly as given (unsigned, or signed by the caller).
    pub fn send_as_is(&mut self, req: ToolRequest) -> anyhow::Result<u64> {
        let (id, frame) = self.calls.request(req)?;
        self.stream.write_all(&frame)?;
        Ok(id)
    }

    /// The next reply to a tool request (waits up to `timeout`, forever with `None`).
    pub fn next(&mut self, timeout: Option<Duration>) -> anyhow::Result<(u64, ToolReply, Bytes)> {
        self.stream.set_read_timeout(timeout)?;
        let mut chunk = [0u8; 64 * 1024];
        loop {
            if let Some(reply) = self.calls.next_reply()? {
                self.answered = true;
                return Ok(reply);
            }
            let n = match self.stream.read(&mut chunk) {
                // A signal (a child of embedded daemons exiting) is no error.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => other.context("reading from jobd")?,
            };
            if n == 0 && !self.answered {
                bail!(
                    "closed before any answer: is {} a jobd's control address (--control, 127.0.0.1:7420 by \
                     default), not its overlay one?",
                    self.addr
                );
            }
            if n == 0 {
                bail!("jobd closed the connection");
            }
            self.calls.decoder().push(&chunk[..n]);
        }
    }

    /// Sends a request exactly as given and waits for its first reply; any
    /// failure to get one is an error reply.
    pub fn call_as_is(&mut self, req: ToolRequest) -> ToolReply {
        let got = self.send_as_is(req).and_then(|id| {
            loop {
                let (rid, reply, _) = self.next(Some(Duration::from_secs(10)))?;
                if rid == id {
                    return Ok(reply);
                }
            }
        });
        got.unwrap_or_else(|e| ToolReply::Error { message: format!("{e:#}") })
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

/// The same connection for async code (the status page): requests go out
/// at once, replies of every request come back in order on one stream.
#[derive(Debug)]
pub struct AsyncClient {
    stream: tokio::net::TcpStream,
    calls: Calls<ToolRequest, ToolReply>,
    buf: Vec<u8>,
    key: Option<SecretKey>,
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
        Ok(AsyncClient { stream, calls: Calls::new(me.id(), me), buf: vec![0; 64 * 1024], key: None })
    }

    /// Sends a request (signed if it is about a job); its replies carry the
    /// returned request id.
    pub async fn send(&mut self, req: ToolRequest) -> anyhow::Result<u64> {
        use tokio::io::AsyncWriteExt;
        let req = seal(req, &mut self.key)?;
        let (id, frame) = self.calls.request(req)?;
        self.stream.write_all(&frame).await?;
        Ok(id)
    }

    /// The next reply to any request. Cancel-safe: a reply half read stays
    /// buffered for the next call.
    pub async fn next(&mut self) -> anyhow::Result<(u64, ToolReply, Bytes)> {
        use tokio::io::AsyncReadExt;
        loop {
            if let Some(reply) = self.calls.next_reply()? {
                return Ok(reply);
            }
            let n = self.stream.read(&mut self.buf).await.context("reading from jobd")?;
            if n == 0 {
                bail!("jobd closed the connection");
            }
            self.calls.decoder().push(&self.buf[..n]);
        }
    }
}
