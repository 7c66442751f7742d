//! The data path: a minimal mio loop run on the calling thread.
//!
//! Each rank listens on an ephemeral loopback port. Connections are one-way and
//! persistent: frames for rank `r` (data, acknowledgements, clear-to-send) go out
//! on the connection this rank opened to `r`; frames from `r` arrive on the one
//! `r` opened to us. A connection starts with a [`RankHello`]; the acceptor checks
//! it and then hands every frame to the engine as coming from that rank.
//!
//! A rank's address comes from the local node (its process key, resolved through
//! the overlay). When an outgoing connection breaks, the engine is told
//! (`handle_disconnected`); while it wants the link (unacknowledged frames, or
//! acknowledgements and credit the peer may lack) the key is resolved again, the connection reopened, and `handle_reconnected`
//! makes the engine resend exactly what the peer has not acknowledged.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use p2pmp_core::id::Id;
use p2pmp_core::local::{RankHello, process_key};
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::mpi::{MpiEngine, MpiMsg, Transmit};
use p2pmp_core::wire::{DEFAULT_MAX_FRAME, Envelope, FrameDecoder, decode_envelope, encode_frame_parts};
use tracing::{debug, warn};

use crate::error::{Error, Result};
use crate::node::NodeClient;
use crate::sock::{self, Wait};

const LISTENER: Token = Token(usize::MAX);
/// Tokens of accepted connections start here; below are outgoing ones, by rank.
const IN_BASE: usize = 1 << 32;
/// Longest a direct (blocking) read of one peer's connection sleeps: the receive
/// timeout of inbound sockets. Other sockets, timers and reconnects wait at most
/// this long while a rank sleeps on one peer.
pub(crate) const DIRECT_MAX: Duration = Duration::from_millis(10);
/// Every this many blocking direct reads, the poll loop looks at every socket
/// first (without waiting), so a steady stream from one peer starves no other.
const POLL_EVERY: u32 = 64;
/// How long a rank with frames waiting may stay unreachable.
const UNREACHABLE_AFTER: Duration = Duration::from_secs(60);
const MAX_BACKOFF: Duration = Duration::from_millis(200);

/// Our connection to one peer rank, and its reconnect state.
#[derive(Debug)]
struct OutPeer {
    conn: Option<OutConn>,
    /// Whether the engine believes frames for this rank can be sent.
    engine_up: bool,
    retry_at: Instant,
    backoff: Duration,
    down_since: Option<Instant>,
    /// A reconnect only for acknowledgements failed: no more tries until the
    /// peer is heard from or we have frames for it.
    ack_only_gave_up: bool,
    /// The last attempt to (re)connect failed: the peer is gone or has not
    /// registered its new address yet.
    connect_failed: bool,
}

#[derive(Debug)]
struct OutConn {
    stream: TcpStream,
    /// Bytes waiting for the socket, in order (header and payload parts).
    tx: VecDeque<Bytes>,
}

#[derive(Debug)]
struct InConn {
    stream: TcpStream,
    dec: FrameDecoder,
    /// Set by the hello.
    rank: Option<u32>,
}

/// Sockets, connections and the local node client of one rank.
#[derive(Debug)]
pub(crate) struct Transport {
    poll: Poll,
    events: Events,
    listener: TcpListener,
    pub(crate) addr: NodeAddr,
    pub(crate) key: Id,
    job: Vec<u8>,
    rank: u32,
    node: NodeClient,
    out: Vec<OutPeer>,
    inbound: Vec<Option<InConn>>,
    /// The inbound slot of each rank's newest connection (set by its hello).
    in_by_rank: Vec<Option<usize>>,
    /// Blocking direct reads so far (every [`POLL_EVERY`]-th polls first).
    direct_reads: u32,
    /// Ranks whose outgoing queue may have bytes to write.
    dirty: Vec<u32>,
    /// Ready tokens of the last poll (reused, so polling allocates nothing).
    ready: Vec<(Token, bool, bool)>,
    /// Stop reconnecting (finalize).
    pub(crate) closing: bool,
    /// Fault injection for tests (`P2PMP_FAULT_DROP_EVERY=n`): every n-th frame
    /// is lost with its connection (frames queued before it are written first).
    drop_every: Option<u64>,
    frames: u64,
    /// Fault injection (`P2PMP_FAULT_MOVE=rank:n`): this rank moves to a new port
    /// after its n-th frame, as a migrated process would.
    move_at: Option<u64>,
}

impl Transport {
    /// Listens on an ephemeral loopback port and registers with the node.
    pub(crate) fn start(job: Vec<u8>, rank: u32, size: u32, node: SocketAddr) -> Result<Self> {
        let poll = Poll::new()?;
        let mut listener = TcpListener::bind("127.0.0.1:0".parse().expect("literal address"))?;
        poll.registry().register(&mut listener, LISTENER, Interest::READABLE)?;
        let addr = NodeAddr(listener.local_addr()?);
        let key = process_key(&job, rank);
        let mut node = NodeClient::connect(node, key, addr)?;
        node.register(key)?;
        let now = Instant::now();
        let out = (0..size)
            .map(|_| OutPeer {
                conn: None,
                engine_up: true,
                retry_at: now,
                backoff: Duration::ZERO,
                down_since: None,
                ack_only_gave_up: false,
                connect_failed: false,
            })
            .collect();
        debug!(rank, %addr, %key, "registered");
        Ok(Transport {
            poll,
            events: Events::with_capacity(256),
            listener,
            addr,
            key,
            job,
            rank,
            node,
            out,
            inbound: Vec::new(),
            in_by_rank: vec![None; size as usize],
            direct_reads: 0,
            dirty: Vec::new(),
            ready: Vec::with_capacity(256),
            closing: false,
            drop_every: std::env::var("P2PMP_FAULT_DROP_EVERY").ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0),
            frames: 0,
            move_at: std::env::var("P2PMP_FAULT_MOVE").ok().and_then(|v| {
                let (r, n) = v.split_once(':')?;
                (r.trim().parse::<u32>().ok()? == rank).then(|| n.trim().parse().ok()).flatten()
            }),
        })
    }

    /// Moves every frame the engine has into the connections and writes what the
    /// sockets take.
    pub(crate) fn pump(&mut self, engine: &mut MpiEngine, now: Instant) -> Result<()> {
        while let Some(t) = engine.poll_transmit() {
            self.enqueue(engine, now, t);
        }
        self.flush_dirty(engine, now);
        Ok(())
    }

    fn enqueue(&mut self, engine: &mut MpiEngine, now: Instant, t: Transmit) {
        let to = t.to;
        if self.out[to as usize].conn.is_none() {
            if !self.out[to as usize].engine_up {
                return; // the engine keeps it and resends after the reconnect
            }
            if let Err(why) = self.connect(to) {
                debug!(to, %why, "connect failed");
                self.out[to as usize].connect_failed = true;
                self.mark_down(engine, now, to);
                return;
            }
        }
        self.frames += 1;
        if self.move_at == Some(self.frames) {
            if let Err(e) = self.move_listener() {
                warn!(%e, "fault injection: moving to a new port failed");
            }
        }
        if self.drop_every.is_some_and(|n| self.frames % n == 0) {
            // Fault injection: what was queued before goes out, this frame (and
            // whatever the kernel did not take) dies with the connection.
            debug!(to, "fault injection: dropping the connection");
            if let Some(conn) = self.out[to as usize].conn.as_mut() {
                let _ = write_queue(&mut conn.stream, &mut conn.tx);
            }
            self.break_out(engine, now, to);
            return;
        }
        let env: Envelope<MpiMsg> = t.into_envelope(self.key, self.addr);
        // Invariant: the engine's frames fit the wire maximum (MpiConfig::validate).
        let (head, payload) = encode_frame_parts(&env, DEFAULT_MAX_FRAME).expect("engine frame fits a wire frame");
        let conn = self.out[to as usize].conn.as_mut().expect("connected above");
        conn.tx.push_back(head.freeze());
        if !payload.is_empty() {
            conn.tx.push_back(payload);
        }
        if !self.dirty.contains(&to) {
            self.dirty.push(to);
        }
    }

    fn flush_dirty(&mut self, engine: &mut MpiEngine, now: Instant) {
        while let Some(to) = self.dirty.pop() {
            let Some(conn) = self.out[to as usize].conn.as_mut() else { continue };
            if let Err(e) = write_queue(&mut conn.stream, &mut conn.tx) {
                debug!(to, %e, "write failed");
                self.break_out(engine, now, to);
            }
        }
    }

    /// Resolves `to` through the node and opens a connection, hello queued.
    fn connect(&mut self, to: u32) -> Result<(), String> {
        let addrs = self.node.resolve(process_key(&self.job, to)).map_err(|e| e.to_string())?;
        if addrs.is_empty() {
            return Err("not registered (yet)".into());
        }
        // The newest registration is most likely last.
        let mut last_err = String::new();
        for a in addrs.iter().rev() {
            match std::net::TcpStream::connect_timeout(&a.0, Duration::from_secs(2)) {
                Ok(s) => {
                    s.set_nodelay(true).map_err(|e| e.to_string())?;
                    s.set_nonblocking(true).map_err(|e| e.to_string())?;
                    let mut stream = TcpStream::from_std(s);
                    self.poll
                        .registry()
                        .register(&mut stream, Token(to as usize), Interest::READABLE | Interest::WRITABLE)
                        .map_err(|e| e.to_string())?;
                    let hello = RankHello { job: self.job.clone(), from_rank: self.rank, to_rank: to };
                    let (head, _) =
                        encode_frame_parts(&Envelope::new(self.key, self.addr, 0, hello), DEFAULT_MAX_FRAME)
                            .map_err(|e| e.to_string())?;
                    let mut tx = VecDeque::new();
                    tx.push_back(head.freeze());
                    self.out[to as usize].conn = Some(OutConn { stream, tx });
                    if !self.dirty.contains(&to) {
                        self.dirty.push(to);
                    }
                    debug!(to, addr = %a, "connected");
                    return Ok(());
                }
                Err(e) => last_err = format!("{a}: {e}"),
            }
        }
        Err(last_err)
    }

    /// The engine stops sending to `to` until a reconnect.
    fn mark_down(&mut self, engine: &mut MpiEngine, now: Instant, to: u32) {
        let p = &mut self.out[to as usize];
        if p.engine_up {
            p.engine_up = false;
            // Invariant: `to` is a valid peer rank (it came from the engine).
            engine.handle_disconnected(to).expect("valid peer");
        }
        p.backoff = (p.backoff * 2).clamp(Duration::from_millis(1), MAX_BACKOFF);
        p.retry_at = now + p.backoff;
        p.down_since.get_or_insert(now);
    }

    /// The outgoing connection to `to` broke.
    fn break_out(&mut self, engine: &mut MpiEngine, now: Instant, to: u32) {
        if let Some(mut c) = self.out[to as usize].conn.take() {
            let _ = self.poll.registry().deregister(&mut c.stream);
        }
        self.mark_down(engine, now, to);
        // Try again at once: the peer may have moved already.
        self.out[to as usize].retry_at = now;
    }

    /// Whether `to` is down and should be reconnected now or later: the engine
    /// wants the link, and it carries frames or we have not given up on it.
    fn wants_retry(&self, engine: &MpiEngine, to: u32) -> bool {
        let p = &self.out[to as usize];
        !p.engine_up && p.conn.is_none() && engine.wants_link(to) && (!p.ack_only_gave_up || engine.unacked_len(to) > 0)
    }

    /// Reconnects ranks that are down while the engine wants the link.
    pub(crate) fn retry_due(&mut self, engine: &mut MpiEngine, now: Instant) -> Result<()> {
        for to in 0..self.out.len() as u32 {
            if !self.wants_retry(engine, to) || self.out[to as usize].retry_at > now {
                continue;
            }
            match self.connect(to) {
                Ok(()) => {
                    let p = &mut self.out[to as usize];
                    p.engine_up = true;
                    p.backoff = Duration::ZERO;
                    p.down_since = None;
                    p.ack_only_gave_up = false;
                    p.connect_failed = false;
                    engine.handle_reconnected(to).expect("valid peer");
                    debug!(to, "reconnected");
                }
                Err(why) => {
                    self.out[to as usize].connect_failed = true;
                    if engine.unacked_len(to) == 0 {
                        // Only acknowledgements are owed: the peer most likely
                        // exited. Wait until it is heard from again.
                        debug!(to, %why, "peer unreachable with only acks owed");
                        self.out[to as usize].ack_only_gave_up = true;
                        continue;
                    }
                    let since = self.out[to as usize].down_since.unwrap_or(now);
                    if !self.closing && now.duration_since(since) > UNREACHABLE_AFTER {
                        return Err(Error::Unreachable { rank: to, why });
                    }
                    self.mark_down(engine, now, to);
                }
            }
        }
        Ok(())
    }

    /// The earliest reconnect attempt due, if any rank waits for one.
    pub(crate) fn next_retry(&self, engine: &MpiEngine) -> Option<Instant> {
        (0..self.out.len() as u32)
            .filter(|&to| self.wants_retry(engine, to))
            .map(|to| self.out[to as usize].retry_at)
            .min()
    }

    /// Whether every outgoing queue is empty (all handed to the kernel).
    pub(crate) fn tx_empty(&self) -> bool {
        self.out.iter().all(|p| p.conn.as_ref().is_none_or(|c| c.tx.is_empty()))
    }

    /// Whether `to` looks gone: no connection, and the last attempt to open one
    /// failed.
    pub(crate) fn unreachable(&self, to: u32) -> bool {
        let p = &self.out[to as usize];
        p.conn.is_none() && p.connect_failed
    }

    /// Waits up to `timeout` for socket readiness and handles what is ready.
    /// Returns whether anything happened.
    pub(crate) fn poll_io(&mut self, engine: &mut MpiEngine, timeout: Option<Duration>) -> Result<bool> {
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(true),
            Err(e) => return Err(e.into()),
        }
        if self.events.is_empty() {
            return Ok(false);
        }
        let now = Instant::now();
        let mut ready = std::mem::take(&mut self.ready);
        ready.clear();
        ready.extend(self.events.iter().map(|e| (e.token(), e.is_readable() || e.is_error(), e.is_writable())));
        for &(token, readable, writable) in &ready {
            if token == LISTENER {
                self.accept_all()?;
            } else if token.0 >= IN_BASE {
                self.read_in(engine, token.0 - IN_BASE, Wait::No);
            } else {
                let to = token.0 as u32;
                if readable && self.out_closed(to) {
                    self.break_out(engine, now, to);
                } else if writable && !self.dirty.contains(&to) {
                    self.dirty.push(to);
                }
            }
        }
        self.ready = ready;
        self.flush_dirty(engine, now);
        Ok(true)
    }

    /// Readable on an outgoing connection means the peer closed it (it never
    /// sends on it) or sent something it should not have.
    fn out_closed(&mut self, to: u32) -> bool {
        let Some(c) = self.out[to as usize].conn.as_mut() else { return false };
        let mut b = [0u8; 64];
        match c.stream.read(&mut b) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => false,
            Ok(n) => {
                if n > 0 {
                    warn!(to, "peer sent on our outgoing connection; dropping it");
                }
                true
            }
            Err(_) => true,
        }
    }

    fn accept_all(&mut self) -> Result<()> {
        loop {
            match self.listener.accept() {
                Ok((mut stream, _)) => {
                    stream.set_nodelay(true)?;
                    sock::blocking_with_timeout(&stream, DIRECT_MAX)?;
                    let slot = match self.inbound.iter().position(Option::is_none) {
                        Some(i) => i,
                        None => {
                            self.inbound.push(None);
                            self.inbound.len() - 1
                        }
                    };
                    self.poll.registry().register(&mut stream, Token(IN_BASE + slot), Interest::READABLE)?;
                    self.inbound[slot] = Some(InConn { stream, dec: FrameDecoder::default(), rank: None });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    warn!(%e, "accept failed");
                    return Ok(());
                }
            }
        }
    }

    /// Reads rank `from`'s inbound connection directly, without `epoll`:
    /// [`Wait::No`] to spin on it, [`Wait::Block`] to sleep in `recv` until its
    /// next bytes (at most [`DIRECT_MAX`]). `None` when there is no such
    /// connection yet, or (blocking) when bytes wait to be written: then only the
    /// poll loop can make progress. Every [`POLL_EVERY`]-th blocking read polls
    /// every socket first without waiting, and returns if that found anything.
    /// Otherwise, whether any bytes came.
    pub(crate) fn read_direct(&mut self, engine: &mut MpiEngine, from: u32, wait: Wait) -> Result<Option<bool>> {
        let Some(slot) = self.in_by_rank.get(from as usize).copied().flatten() else { return Ok(None) };
        if wait == Wait::Block {
            if !self.tx_empty() {
                return Ok(None);
            }
            self.direct_reads = self.direct_reads.wrapping_add(1);
            if self.direct_reads % POLL_EVERY == 0 && self.poll_io(engine, Some(Duration::ZERO))? {
                return Ok(Some(true));
            }
        }
        Ok(Some(self.read_in(engine, slot, wait)))
    }

    /// Reads everything available on inbound connection `slot` (the first read
    /// waiting as `wait` says) and hands whole frames to the engine; closes it at
    /// end of stream or on bad input. Whether anything happened.
    fn read_in(&mut self, engine: &mut MpiEngine, slot: usize, mut wait: Wait) -> bool {
        let Some(conn) = self.inbound.get_mut(slot).and_then(Option::as_mut) else { return false };
        let mut got = false;
        let keep = loop {
            match sock::recv_spare(&conn.stream, conn.dec.buffer_mut(), wait) {
                Ok((0, _)) => break false,
                Ok((n, room)) => {
                    got = true;
                    wait = Wait::No;
                    let had_rank = conn.rank.is_some();
                    if !decode_frames(conn, engine, Instant::now(), &self.job, self.rank) {
                        break false;
                    }
                    if let Some(r) = conn.rank {
                        // Heard from: worth reconnecting to for acks again.
                        self.out[r as usize].ack_only_gave_up = false;
                        if !had_rank {
                            self.in_by_rank[r as usize] = Some(slot);
                        }
                    }
                    // A short read drained the socket: readiness is edge-triggered,
                    // so later bytes raise a new event; skip the EAGAIN read.
                    if n < room {
                        break true;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break true,
                // A signal: a blocking read returns to let the caller look around.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    if wait == Wait::Block {
                        break true;
                    }
                }
                Err(_) => break false,
            }
        };
        if !keep {
            self.close_in(slot);
            return true;
        }
        got
    }

    fn close_in(&mut self, slot: usize) {
        if let Some(mut c) = self.inbound[slot].take() {
            let _ = self.poll.registry().deregister(&mut c.stream);
            if let Some(r) = c.rank {
                if self.in_by_rank[r as usize] == Some(slot) {
                    self.in_by_rank[r as usize] = None;
                }
            }
            debug!(rank = ?c.rank, "inbound connection closed");
        }
    }

    /// Listens on a new port and registers it, then closes the old listener and
    /// every inbound connection: peers find the new address through the node and
    /// reconnect, and their engines resend what we had not acknowledged.
    pub(crate) fn move_listener(&mut self) -> Result<()> {
        let mut listener = TcpListener::bind("127.0.0.1:0".parse().expect("literal address"))?;
        let addr = NodeAddr(listener.local_addr()?);
        let old = self.addr;
        self.node.set_addr(addr);
        self.node.register(self.key)?;
        self.node.set_addr(old);
        let _ = self.node.unregister(self.key);
        self.node.set_addr(addr);
        self.poll.registry().deregister(&mut self.listener)?;
        self.poll.registry().register(&mut listener, LISTENER, Interest::READABLE)?;
        self.listener = listener;
        self.addr = addr;
        for slot in 0..self.inbound.len() {
            self.close_in(slot);
        }
        debug!(rank = self.rank, from = %old, to = %addr, "moved to a new port");
        Ok(())
    }

    /// Tells the node we are gone (best effort).
    pub(crate) fn unregister(&mut self) {
        let _ = self.node.unregister(self.key);
    }
}

/// Hands every whole frame buffered in `conn` to the engine; false to drop the
/// connection (a bad hello or malformed bytes).
fn decode_frames(conn: &mut InConn, engine: &mut MpiEngine, now: Instant, job: &[u8], me: u32) -> bool {
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

/// Writes as much of `tx` as the socket takes, vectored.
fn write_queue(stream: &mut TcpStream, tx: &mut VecDeque<Bytes>) -> io::Result<()> {
    const IOV: usize = 32;
    while !tx.is_empty() {
        let mut iov = [IoSlice::new(&[]); IOV];
        let mut k = 0;
        for b in tx.iter().take(IOV) {
            iov[k] = IoSlice::new(b);
            k += 1;
        }
        match stream.write_vectored(&iov[..k]) {
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
