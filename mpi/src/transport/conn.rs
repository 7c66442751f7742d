//! One connection to a peer rank, over TCP or shared memory: its byte source,
//! its decoder, the bytes waiting to be written, and the few things done to
//! every TCP socket.

use std::collections::VecDeque;
use std::io;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mio::net::TcpStream;
use p2pmp_core::local::RankHello;
use p2pmp_core::mpi::{MpiEngine, MpiMsg};
use p2pmp_core::wire::vectored::write_queue;
use p2pmp_core::wire::{FrameDecoder, decode_envelope};
use tracing::{debug, warn};

use super::shm::{ShmIo, ShmSetup};
use crate::sock::{self, Wait};

/// At most this many queued parts go into one vectored write.
const IOV: usize = 32;

/// Bytes taken from a shared-memory ring per read.
const RING_READ: usize = 256 << 10;

/// What carries a connection's bytes.
#[derive(Debug)]
pub(super) enum Io {
    /// A TCP connection; `connecting` until established.
    Tcp { stream: TcpStream, connecting: bool },
    /// A shared-memory link being set up over its Unix socket.
    ShmSetup(Box<ShmSetup>),
    /// A shared-memory link.
    Shm(Box<ShmIo>),
}

/// One connection to a peer rank, either opened by us or accepted.
#[derive(Debug)]
pub(super) struct Conn {
    pub(super) io: Io,
    pub(super) dec: FrameDecoder,
    /// Bytes waiting for the socket or ring, in order (header and payload parts).
    pub(super) tx: VecDeque<Bytes>,
    /// The peer: known from the start on connections we opened, from the hello
    /// on accepted ones.
    pub(super) rank: Option<u32>,
    pub(super) accepted: bool,
}

impl Conn {
    pub(super) fn new(io: Io, rank: Option<u32>, accepted: bool) -> Self {
        Conn { io, dec: FrameDecoder::default(), tx: VecDeque::new(), rank, accepted }
    }

    /// Whether the connection is still being set up (no frames move yet).
    pub(super) fn setting_up(&self) -> bool {
        matches!(self.io, Io::Tcp { connecting: true, .. } | Io::ShmSetup(_))
    }

    /// The mio source of its readiness events.
    pub(super) fn source(&mut self) -> &mut dyn mio::event::Source {
        match &mut self.io {
            Io::Tcp { stream, .. } => stream,
            Io::ShmSetup(s) => &mut s.sock,
            Io::Shm(s) => &mut s.sock,
        }
    }

    /// Reads once into the decoder (the first read waiting as `wait` says; a
    /// ring never waits): (bytes read, room offered), 0 bytes at end of stream;
    /// `WouldBlock` when nothing is there.
    pub(super) fn recv(&mut self, wait: Wait) -> io::Result<(usize, usize)> {
        match &mut self.io {
            Io::Tcp { stream, .. } => sock::recv_spare(stream, self.dec.buffer_mut(), wait),
            Io::Shm(s) => s.recv(self.dec.buffer_mut(), RING_READ),
            Io::ShmSetup(_) => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// Writes as much of `tx` as the socket or ring takes, without waiting.
    pub(super) fn write_tx(&mut self) -> io::Result<()> {
        let written = match &mut self.io {
            Io::Tcp { stream, connecting: false } => {
                write_queue::<IOV>(&mut self.tx, |iov| sock::send_vectored(stream, iov))
            }
            Io::Shm(s) => write_queue::<IOV>(&mut self.tx, |iov| s.send(iov)),
            _ => return Ok(()),
        };
        written.map(drop)
    }

    /// Whether a TCP connection attempt finished: `None` while it still runs,
    /// else its outcome.
    pub(super) fn connect_outcome(&self) -> Option<Result<(), String>> {
        let Io::Tcp { stream, connecting: true } = &self.io else { return Some(Ok(())) };
        match stream.take_error() {
            Ok(Some(e)) | Err(e) => return Some(Err(e.to_string())),
            Ok(None) => {}
        }
        match stream.peer_addr() {
            Ok(_) => Some(Ok(())),
            Err(e) if e.kind() == io::ErrorKind::NotConnected => None,
            Err(e) => Some(Err(e.to_string())),
        }
    }
}

/// What every TCP data socket gets once connected: no Nagle delay, blocking
/// mode with bounded reads (the poll loop passes `MSG_DONTWAIT`; a rank waiting
/// for one peer sleeps in `recv`), silent peers detected, lost segments
/// retransmitted soon.
pub(super) fn configure(stream: &TcpStream, direct_max: Duration, failure_timeout: Duration) -> io::Result<()> {
    stream.set_nodelay(true)?;
    sock::blocking_with_timeout(stream, direct_max)?;
    sock::fail_silent_peers_after(stream, failure_timeout)?;
    sock::quick_retransmit(stream);
    Ok(())
}

/// Hands every whole frame buffered in `conn` to the engine; false to drop the
/// connection (a bad hello or malformed bytes).
pub(super) fn decode_frames(conn: &mut Conn, engine: &mut MpiEngine, now: Instant, job: &[u8], me: u32) -> bool {
    loop {
        let frame = match conn.dec.decode() {
            Ok(Some(f)) => f,
            Ok(None) => return true,
            Err(e) => {
                warn!(%e, "bad frame; dropping the connection");
                return false;
            }
        };
        match conn.rank {
            Some(from) => match decode_envelope::<MpiMsg>(frame) {
                Ok(env) => engine.handle_envelope(now, from, env),
                Err(e) => {
                    warn!(from, %e, "bad envelope; dropping the connection");
                    return false;
                }
            },
            None => match decode_envelope::<RankHello>(frame) {
                Ok(env) if hello_ok(&env.body, job, me, engine.size()) => conn.rank = Some(env.body.from_rank),
                other => {
                    debug!(?other, "hello refused");
                    return false;
                }
            },
        }
    }
}

/// Whether a hello comes from another rank of our job and means us.
pub(super) fn hello_ok(h: &RankHello, job: &[u8], me: u32, size: u32) -> bool {
    h.job == job && h.to_rank == me && h.from_rank < size && h.from_rank != me
}
