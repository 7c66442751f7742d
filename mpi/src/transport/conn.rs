//! One TCP connection to a peer rank: its socket, its decoder, the bytes
//! waiting to be written, and the few things done to every such socket.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use mio::net::TcpStream;
use p2pmp_core::local::RankHello;
use p2pmp_core::mpi::{MpiEngine, MpiMsg};
use p2pmp_core::wire::{FrameDecoder, decode_envelope};
use tracing::{debug, warn};

use crate::sock;

/// One connection to a peer rank, either opened by us or accepted.
#[derive(Debug)]
pub(super) struct Conn {
    pub(super) stream: TcpStream,
    pub(super) dec: FrameDecoder,
    /// Bytes waiting for the socket, in order (header and payload parts).
    pub(super) tx: VecDeque<Bytes>,
    /// The peer: known from the start on connections we opened, from the hello
    /// on accepted ones.
    pub(super) rank: Option<u32>,
    pub(super) accepted: bool,
    /// A connection we opened that is not established yet.
    pub(super) connecting: bool,
}

impl Conn {
    pub(super) fn new(stream: TcpStream, rank: Option<u32>, accepted: bool, connecting: bool) -> Self {
        Conn { stream, dec: FrameDecoder::default(), tx: VecDeque::new(), rank, accepted, connecting }
    }

    /// Whether a connection attempt finished: `None` while it still runs,
    /// else its outcome.
    pub(super) fn connect_outcome(&self) -> Option<Result<(), String>> {
        match self.stream.take_error() {
            Ok(Some(e)) | Err(e) => return Some(Err(e.to_string())),
            Ok(None) => {}
        }
        match self.stream.peer_addr() {
            Ok(_) => Some(Ok(())),
            Err(e) if e.kind() == io::ErrorKind::NotConnected => None,
            Err(e) => Some(Err(e.to_string())),
        }
    }
}

/// What every data socket gets once connected: no Nagle delay, blocking mode
/// with bounded reads (the poll loop passes `MSG_DONTWAIT`; a rank waiting for
/// one peer sleeps in `recv`), silent peers detected, lost segments retransmitted
/// soon.
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
                Ok(env)
                    if env.body.job == job
                        && env.body.to_rank == me
                        && env.body.from_rank < engine.size()
                        && env.body.from_rank != me =>
                {
                    conn.rank = Some(env.body.from_rank);
                }
                other => {
                    debug!(?other, "hello refused");
                    return false;
                }
            },
        }
    }
}

/// Writes as much of `tx` as the socket takes, vectored, without waiting.
pub(super) fn write_queue(stream: &TcpStream, tx: &mut VecDeque<Bytes>) -> io::Result<()> {
    const IOV: usize = 32;
    while !tx.is_empty() {
        let mut iov = [IoSlice::new(&[]); IOV];
        let mut k = 0;
        for b in tx.iter().take(IOV) {
            iov[k] = IoSlice::new(b);
            k += 1;
        }
        match sock::send_vectored(stream, &iov[..k]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(mut n) => {
                while n > 0 {
                    let front = tx.front_mut().expect("wrote no more than queued");
                    if n >= front.len() {
                        n -= front.len();
                        tx.pop_front();
                    } else {
                        front.advance(n);
                        n = 0;
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
