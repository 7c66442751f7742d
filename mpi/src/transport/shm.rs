//! Shared-memory links between ranks of one host, as connections of the poll
//! loop.
//!
//! Every rank listens on an abstract Unix socket named after its process key
//! (`p2pmp-<key>`: the job id and the rank, which its peers know), so ranks of
//! one job on one host find each other without any file, and ranks in other
//! network namespaces (other hosts of the test cluster) cannot. The link
//! machine asks for shared memory when a peer's registered address is on this
//! rank's host. The connecting rank creates a sealed memfd segment (one ring
//! per direction) and sends it with its eventfd doorbell and a [`RankHello`];
//! the other rank checks the hello and the segment and answers with a hello and
//! its own doorbell. The Unix socket then stays open and silent: its end is
//! how each side learns that the other is gone. Frames then move through the
//! rings exactly as over TCP (the same frame codec); a producer rings the
//! consumer's doorbell only when the consumer said it was going to sleep, and a
//! consumer rings a producer waiting for room.
//!
//! Anything that fails here (no such socket, a refused hello, a bad segment, a
//! corrupt ring) ends the link, and the link machine falls back to TCP.

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::SocketAddr as UnixAddr;

use bytes::BytesMut;
use mio::net::{UnixListener, UnixStream};
use p2pmp_core::id::Id;
use p2pmp_core::local::RankHello;
use p2pmp_core::wire::{DEFAULT_MAX_FRAME, Envelope, FrameDecoder, decode_envelope, encode_frame};

use super::conn::hello_ok;
use crate::shm::ring::{Consumer, Producer};
use crate::shm::segment::{self, Segment};

/// The abstract socket a rank with process key `key` listens on.
fn socket_addr(key: Id) -> io::Result<UnixAddr> {
    UnixAddr::from_abstract_name(format!("p2pmp-{key}"))
}

/// Listens for shared-memory links to the rank with process key `key`. A
/// peer probing for the name ([`present`]) holds it for a moment: tries again
/// for up to 20 ms.
pub(super) fn listen(key: Id) -> io::Result<UnixListener> {
    let addr = socket_addr(key)?;
    let mut tries = 0;
    loop {
        match UnixListener::bind_addr(&addr) {
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && tries < 200 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
            other => return other,
        }
    }
}

/// Whether the rank with process key `key` runs on this host (in this
/// network namespace): its socket name is taken. Probes by binding the name
/// for a moment, so the peer sees no connection.
pub(super) fn present(key: Id) -> bool {
    let Ok(addr) = socket_addr(key) else { return false };
    matches!(std::os::unix::net::UnixListener::bind_addr(&addr), Err(e) if e.kind() == io::ErrorKind::AddrInUse)
}

/// Bytes of each ring of a world of `size` ranks: 512 KiB up to 128 ranks,
/// less for larger worlds (64 MiB per rank in all), never below 64 KiB.
///
/// Not more: every page of a link's rings is allocated and zeroed as the
/// link is set up (see `Segment::map`), about 2.2 us a page here (some 0.7
/// ms for a pair of 512 KiB rings), and a link holds them for as long as it
/// lives. When pages were allocated by the first messages that reached them
/// instead, 2 MiB rings made a 2-rank Alltoall of 64 KiB take 73 us a call
/// over its first 50 calls against 26 with 512 KiB, and an 8-rank Allreduce
/// of 64 KiB 934 against 330 us; a ring that stays in the core's cache also
/// copies faster (1 MiB ping-pong: 224 and 215 us against 189 and 171, 4
/// MiB: 1161 and 826 against 726 and 623).
pub(super) fn ring_capacity(size: u32) -> usize {
    let per_peer = ((64usize << 20) / size.max(1) as usize).max(1);
    // The power of two at or below: a world of 129 to 255 ranks gets 256 KiB.
    (1usize << per_peer.ilog2()).clamp(64 << 10, 512 << 10)
}

fn invalid(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

/// Whether a shared-memory peer may need the core this rank runs on (see
/// [`ShmIo::shares_core`]), the surer reason last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum NeedsCore {
    No,
    /// We rang its doorbell and have not heard from it since.
    Woken,
    /// It last said it runs on this core.
    SameCore,
}

/// A shared-memory link being set up.
#[derive(Debug)]
pub(in crate::transport) struct ShmSetup {
    pub(super) sock: UnixStream,
    /// The connector's segment, waiting for the acceptor's answer (`None` on
    /// the accepting side).
    seg: Option<Segment>,
    /// The peer the connector means to reach.
    peer: Option<u32>,
    dec: FrameDecoder,
    fds: Vec<OwnedFd>,
}

/// An established shared-memory link.
#[derive(Debug)]
pub(in crate::transport) struct ShmIo {
    pub(super) sock: UnixStream,
    tx: Producer,
    rx: Consumer,
    peer_bell: OwnedFd,
    /// The peer closed its end: what is left in the ring is the last of it.
    pub(super) eof: bool,
    /// Doorbells rung for the peer so far.
    pub(super) rung: u64,
    /// We rang the peer's doorbell and have not heard from it since: it may
    /// still wait for a core, and the kernel often queues a task it wakes on
    /// the waker's core.
    woke: bool,
    /// Keeps the rings mapped (dropped after them).
    _seg: Segment,
}

/// What a set-up step came to.
#[derive(Debug)]
pub(super) enum Setup {
    /// Waiting for more from the peer.
    Pending,
    /// The link is up, with this peer.
    Done(Box<ShmIo>, u32),
}

/// Who is asking: the hello fields and our doorbell.
#[derive(Debug, Clone, Copy)]
pub(super) struct Me<'a> {
    pub(super) job: &'a [u8],
    pub(super) rank: u32,
    pub(super) size: u32,
    pub(super) key: Id,
    pub(super) addr: p2pmp_core::machine::NodeAddr,
    pub(super) bell: RawFd,
}

fn hello_frame(me: &Me<'_>, to: u32) -> io::Result<BytesMut> {
    let hello = RankHello { job: me.job.to_vec(), from_rank: me.rank, to_rank: to };
    let mut buf = BytesMut::new();
    encode_frame(&Envelope::new(me.key, me.addr, 0, hello), &mut buf, DEFAULT_MAX_FRAME)
        .map_err(|e| invalid(e.to_string()))?;
    Ok(buf)
}

/// Sends a whole small frame with descriptors, or fails (a Unix socket with
/// room takes a few hundred bytes at once).
fn send_all(sock: &UnixStream, frame: &[u8], fds: &[RawFd]) -> io::Result<()> {
    match segment::send_with_fds(sock.as_raw_fd(), frame, fds)? {
        n if n == frame.len() => Ok(()),
        _ => Err(invalid("the hello did not fit the socket")),
    }
}

impl ShmSetup {
    /// Starts a link to `peer` (process key `peer_key`): connects to its
    /// socket, creates the segment and sends the hello with it. Fails at once
    /// when the peer has no such socket here.
    pub(super) fn connect(me: &Me<'_>, peer: u32, peer_key: Id, cap: usize) -> io::Result<ShmSetup> {
        let sock = UnixStream::connect_addr(&socket_addr(peer_key)?)?;
        let seg = Segment::create(cap, me.rank, peer)?;
        send_all(&sock, &hello_frame(me, peer)?, &[seg.raw_fd(), me.bell])?;
        Ok(ShmSetup { sock, seg: Some(seg), peer: Some(peer), dec: FrameDecoder::default(), fds: Vec::new() })
    }

    /// The accepting side of a link, before the peer's hello.
    pub(super) fn accepted(sock: UnixStream) -> ShmSetup {
        ShmSetup { sock, seg: None, peer: None, dec: FrameDecoder::default(), fds: Vec::new() }
    }

    /// The rank this side is connecting to (`None` when accepting).
    pub(super) fn peer(&self) -> Option<u32> {
        self.peer
    }

    /// Reads what the peer sent and moves the set-up on; an error ends it.
    pub(super) fn advance(mut self: Box<Self>, me: &Me<'_>) -> io::Result<(Setup, Option<Box<Self>>)> {
        loop {
            match segment::recv_with_fds(self.sock.as_raw_fd(), self.dec.buffer_mut(), &mut self.fds) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let Some(frame) = self.dec.decode().map_err(|e| invalid(e.to_string()))? else {
            return Ok((Setup::Pending, Some(self)));
        };
        let hello = decode_envelope::<RankHello>(frame).map_err(|e| invalid(e.to_string()))?.body;
        if !hello_ok(&hello, me.job, me.rank, me.size) {
            return Err(invalid("hello refused"));
        }
        let from = hello.from_rank;
        let mut fds = std::mem::take(&mut self.fds).into_iter();
        let (seg, peer_bell) = match (self.seg.take(), self.peer) {
            // Connecting: the answer carries the peer's doorbell.
            (Some(seg), Some(peer)) if from == peer && fds.len() == 1 => (seg, fds.next()),
            // Accepting: the hello carries the segment and the doorbell.
            (None, None) if fds.len() == 2 => {
                let seg = Segment::open(fds.next().expect("two descriptors"), from, me.rank, ring_capacity(me.size))?;
                send_all(&self.sock, &hello_frame(me, from)?, &[me.bell])?;
                (seg, fds.next())
            }
            _ => return Err(invalid("unexpected shared-memory hello")),
        };
        let peer_bell = peer_bell.expect("counted above");
        let (tx, rx) = seg.ends(self.peer.is_some()).map_err(|e| invalid(e.to_string()))?;
        let io = ShmIo { sock: self.sock, tx, rx, peer_bell, eof: false, rung: 0, woke: false, _seg: seg };
        Ok((Setup::Done(Box::new(io), from), None))
    }
}

impl ShmIo {
    /// Copies what the ring holds (at most `max` bytes) into `buf`: (bytes,
    /// room), with room above bytes (the ring is drained); `WouldBlock` when
    /// empty, 0 bytes once empty after the peer closed.
    pub(super) fn recv(&mut self, buf: &mut BytesMut, max: usize) -> io::Result<(usize, usize)> {
        match self.rx.read_into(buf, max) {
            Ok(0) if self.eof => Ok((0, 1)),
            Ok(0) => Err(io::ErrorKind::WouldBlock.into()),
            Ok(n) => {
                self.woke = false;
                if self.rx.must_wake() {
                    self.ring();
                }
                Ok((n, n + 1))
            }
            Err(e) => Err(invalid(e.to_string())),
        }
    }

    /// Copies as much of `iov` into the ring as fits; `WouldBlock` when full.
    pub(super) fn send(&mut self, iov: &[IoSlice<'_>]) -> io::Result<usize> {
        match self.tx.write(iov) {
            Ok(0) => Err(io::ErrorKind::WouldBlock.into()),
            Ok(n) => {
                if self.tx.must_wake() {
                    self.ring();
                }
                Ok(n)
            }
            Err(e) => Err(invalid(e.to_string())),
        }
    }

    /// Rings the peer's doorbell (a system call: kept off the path of a
    /// message to a peer awake).
    #[cold]
    #[inline(never)]
    fn ring(&mut self) {
        self.rung += 1;
        self.woke = true;
        segment::ring_bell(self.peer_bell.as_raw_fd());
    }

    /// Whether the peer may need the core this rank runs on (`core`), so
    /// that polling for it would only keep it waiting: it last said it runs
    /// on this core, or we woke it and have not heard from it since (said
    /// once a wake-up: the caller gives it the core once). Tells the peer our
    /// core in turn.
    pub(super) fn shares_core(&mut self, core: u32) -> NeedsCore {
        self.tx.say_core(Some(core));
        let woke = std::mem::take(&mut self.woke);
        if self.rx.peer_core() == Some(core) {
            NeedsCore::SameCore
        } else if woke {
            NeedsCore::Woken
        } else {
            NeedsCore::No
        }
    }

    /// Whether a read may find something: bytes in the ring (one load), or
    /// the peer's end once it closed.
    pub(super) fn has_input(&self) -> bool {
        self.rx.has_data() || self.eof
    }

    /// About to sleep: asks the peer to ring us for its next bytes (and for
    /// room, if we have bytes waiting). False when there is something to do
    /// now instead (then nothing was asked).
    pub(super) fn begin_sleep(&mut self, tx_waiting: bool) -> bool {
        if !self.rx.begin_sleep() {
            return false;
        }
        if tx_waiting && !self.tx.begin_wait().unwrap_or(false) {
            self.rx.end_sleep();
            return false;
        }
        true
    }

    /// Tells the peer the core this rank runs on now, or none (asleep).
    pub(super) fn say_core(&mut self, core: Option<u32>) {
        self.tx.say_core(core);
    }

    /// Awake again.
    pub(super) fn end_sleep(&mut self) {
        self.rx.end_sleep();
        self.tx.end_wait();
    }

    /// Looks at the silent Unix socket after a readiness event: the peer
    /// closed it (or broke the protocol by writing to it).
    pub(super) fn check_closed(&mut self) {
        let mut b = [0u8; 1];
        // SAFETY: recv(2) writes at most one byte into `b`.
        let n = unsafe { libc::recv(self.sock.as_raw_fd(), b.as_mut_ptr().cast(), 1, libc::MSG_DONTWAIT) };
        if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
            self.eof = true;
        }
    }
}
