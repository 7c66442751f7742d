//! The data path: a minimal mio loop run on the calling thread.
//!
//! Each rank listens on an ephemeral port of its host's address (`P2PMP_HOST`). A connection carries frames
//! both ways: frames for rank `r` (data, acknowledgements, clear-to-send) go out
//! on the connection `r` already sends to us on, or else on one this rank opens
//! to `r`. One connection per pair means a reply carries TCP's acknowledgement of
//! the request, so a message costs one TCP segment instead of a segment and a
//! bare ACK. Frames for one rank use one connection at a time (switching only
//! after a break, when the engine resends by sequence number). A connection
//! starts with a [`RankHello`] from the side that opened it; the acceptor checks
//! it and then hands every frame to the engine as coming from that rank.
//!
//! A rank's address comes from the local node (its process key, resolved through
//! the overlay). When the connection frames for a rank go out on breaks, the
//! engine is told (`handle_disconnected`); while it wants the link (unacknowledged
//! frames, or acknowledgements and credit the peer may lack) the key is resolved
//! again, the connection reopened, and `handle_reconnected` makes the engine
//! resend exactly what the peer has not acknowledged.
//!
//! Sockets stay in blocking mode with a receive timeout ([`DIRECT_MAX`]); the poll
//! loop reads and writes with `MSG_DONTWAIT`, and a rank waiting for one peer may
//! sleep in `recv` on that peer's socket ([`Transport::read_direct`]).

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::{IpAddr, SocketAddr};
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
/// Longest a direct (blocking) read of one peer's connection sleeps: the receive
/// timeout of every data socket. Other sockets, timers and reconnects wait at
/// most this long while a rank sleeps on one peer.
pub(crate) const DIRECT_MAX: Duration = Duration::from_millis(10);
/// Every this many blocking direct reads, the poll loop looks at every socket
/// first (without waiting), so a steady stream from one peer starves no other.
const POLL_EVERY: u32 = 64;
/// How long a rank with frames waiting may stay unreachable.
const UNREACHABLE_AFTER: Duration = Duration::from_secs(60);
const MAX_BACKOFF: Duration = Duration::from_millis(200);

/// How frames reach one peer rank, and its reconnect state.
#[derive(Debug)]
struct OutPeer {
    /// The connection (slot) frames for this rank go out on.
    conn: Option<usize>,
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

/// One connection to a peer rank, either opened by us or accepted.
#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    dec: FrameDecoder,
    /// Bytes waiting for the socket, in order (header and payload parts).
    tx: VecDeque<Bytes>,
    /// The peer: known from the start on connections we opened, from the hello
    /// on accepted ones.
    rank: Option<u32>,
    accepted: bool,
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
    /// Connections by slot (the slot is the poll token).
    conns: Vec<Option<Conn>>,
    /// The connection each rank's frames last arrived on.
    heard_on: Vec<Option<usize>>,
    /// Blocking direct reads so far (every [`POLL_EVERY`]-th polls first).
    direct_reads: u32,
    /// Connections whose queue may have bytes to write.
    dirty: Vec<usize>,
    /// Ready tokens of the last poll (reused, so polling allocates nothing).
    ready: Vec<(Token, bool, bool)>,
    /// Stop reconnecting (finalize).
    pub(crate) closing: bool,
    /// A peer silent this long breaks its connection (`P2PMP_FAILURE_TIMEOUT_MS`).
    failure_timeout: Duration,
    /// Fault injection for tests (`P2PMP_FAULT_DROP_EVERY=n`): every n-th frame
    /// is lost with its connection (frames queued before it are written first).
    drop_every: Option<u64>,
    frames: u64,
    /// Fault injection (`P2PMP_FAULT_MOVE=rank:n`): this rank moves to a new port
    /// after its n-th frame, as a migrated process would.
    move_at: Option<u64>,
}

impl Transport {
    /// Listens on an ephemeral port of `host` (the address of the host the node
    /// runs on, so ranks of other hosts reach it) and registers with the node.
    pub(crate) fn start(
        job: Vec<u8>,
        rank: u32,
        size: u32,
        node: SocketAddr,
        host: IpAddr,
        failure_timeout: Duration,
    ) -> Result<Self> {
        let poll = Poll::new()?;
        let mut listener = TcpListener::bind(SocketAddr::new(host, 0))
            .map_err(|e| Error::Env { var: crate::env::HOST_VAR, problem: format!("cannot listen on {host}: {e}") })?;
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
            conns: Vec::new(),
            heard_on: vec![None; size as usize],
            direct_reads: 0,
            dirty: Vec::new(),
            ready: Vec::with_capacity(256),
            closing: false,
            failure_timeout,
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
            if let Err(why) = self.open(to) {
                debug!(to, %why, "connect failed");
                self.out[to as usize].connect_failed = true;
                self.mark_down(engine, now, to);
                return;
            }
        }
        self.frames += 1;
        if self.move_at == Some(self.frames) {
            if let Err(e) = self.move_listener(engine, now) {
                warn!(%e, "fault injection: moving to a new port failed");
            }
        }
        let Some(slot) = self.out[to as usize].conn else { return }; // broken by the move
        if self.drop_every.is_some_and(|n| self.frames % n == 0) {
            // Fault injection: what was queued before goes out, this frame (and
            // whatever the kernel did not take) dies with the connection.
            debug!(to, "fault injection: dropping the connection");
            if let Some(c) = self.conns[slot].as_mut() {
                let _ = write_queue(&c.stream, &mut c.tx);
            }
            self.close_conn(engine, now, slot);
            return;
        }
        let env: Envelope<MpiMsg> = t.into_envelope(self.key, self.addr);
        // Invariant: the engine's frames fit the wire maximum (MpiConfig::validate).
        let (head, payload) = encode_frame_parts(&env, DEFAULT_MAX_FRAME).expect("engine frame fits a wire frame");
        let conn = self.conns[slot].as_mut().expect("out[to].conn names an open connection");
        conn.tx.push_back(head.freeze());
        if !payload.is_empty() {
            conn.tx.push_back(payload);
        }
        if !self.dirty.contains(&slot) {
            self.dirty.push(slot);
        }
    }

    fn flush_dirty(&mut self, engine: &mut MpiEngine, now: Instant) {
        while let Some(slot) = self.dirty.pop() {
            let Some(conn) = self.conns[slot].as_mut() else { continue };
            if let Err(e) = write_queue(&conn.stream, &mut conn.tx) {
                debug!(slot, %e, "write failed");
                self.close_conn(engine, now, slot);
            }
        }
    }

    /// Picks the connection frames for `to` go out on: the one `to` sends to us
    /// on, else a new one.
    fn open(&mut self, to: u32) -> Result<(), String> {
        match self.heard_on[to as usize] {
            Some(slot) => {
                self.out[to as usize].conn = Some(slot);
                Ok(())
            }
            None => self.connect(to),
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
                    sock::blocking_with_timeout(&s, DIRECT_MAX).map_err(|e| e.to_string())?;
                    sock::fail_silent_peers_after(&s, self.failure_timeout).map_err(|e| e.to_string())?;
                    sock::quick_retransmit(&s);
                    let hello = RankHello { job: self.job.clone(), from_rank: self.rank, to_rank: to };
                    let (head, _) =
                        encode_frame_parts(&Envelope::new(self.key, self.addr, 0, hello), DEFAULT_MAX_FRAME)
                            .map_err(|e| e.to_string())?;
                    let slot = self.add_conn(TcpStream::from_std(s), Some(to), false).map_err(|e| e.to_string())?;
                    self.conns[slot].as_mut().expect("just added").tx.push_back(head.freeze());
                    self.out[to as usize].conn = Some(slot);
                    if !self.dirty.contains(&slot) {
                        self.dirty.push(slot);
                    }
                    debug!(to, addr = %a, "connected");
                    return Ok(());
                }
                Err(e) => last_err = format!("{a}: {e}"),
            }
        }
        Err(last_err)
    }

    /// Registers a connection in a free slot.
    fn add_conn(&mut self, mut stream: TcpStream, rank: Option<u32>, accepted: bool) -> io::Result<usize> {
        let slot = match self.conns.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        self.poll.registry().register(&mut stream, Token(slot), Interest::READABLE | Interest::WRITABLE)?;
        self.conns[slot] = Some(Conn { stream, dec: FrameDecoder::default(), tx: VecDeque::new(), rank, accepted });
        Ok(slot)
    }

    /// Closes connection `slot`; if frames for its rank went out on it, the
    /// engine is told and a reconnect is due at once (the peer may have moved).
    fn close_conn(&mut self, engine: &mut MpiEngine, now: Instant, slot: usize) {
        let Some(mut c) = self.conns[slot].take() else { return };
        let _ = self.poll.registry().deregister(&mut c.stream);
        debug!(rank = ?c.rank, accepted = c.accepted, "connection closed");
        let Some(r) = c.rank else { return };
        if self.heard_on[r as usize] == Some(slot) {
            self.heard_on[r as usize] = None;
        }
        if self.out[r as usize].conn == Some(slot) {
            self.out[r as usize].conn = None;
            self.mark_down(engine, now, r);
            self.out[r as usize].retry_at = now;
        }
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
            match self.open(to) {
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
        self.conns.iter().flatten().all(|c| c.tx.is_empty())
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
        let mut ready = std::mem::take(&mut self.ready);
        ready.clear();
        ready.extend(self.events.iter().map(|e| (e.token(), e.is_readable() || e.is_error(), e.is_writable())));
        for &(token, readable, writable) in &ready {
            if token == LISTENER {
                self.accept_all()?;
                continue;
            }
            if readable {
                self.read_conn(engine, token.0, Wait::No);
            }
            if writable && self.conns.get(token.0).is_some_and(Option::is_some) && !self.dirty.contains(&token.0) {
                self.dirty.push(token.0);
            }
        }
        self.ready = ready;
        self.flush_dirty(engine, Instant::now());
        Ok(true)
    }

    fn accept_all(&mut self) -> Result<()> {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nodelay(true)?;
                    sock::blocking_with_timeout(&stream, DIRECT_MAX)?;
                    sock::fail_silent_peers_after(&stream, self.failure_timeout)?;
                    sock::quick_retransmit(&stream);
                    self.add_conn(stream, None, true)?;
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

    /// Reads rank `from`'s connection directly, without `epoll`: [`Wait::No`] to
    /// spin on it, [`Wait::Block`] to sleep in `recv` until its next bytes (at
    /// most [`DIRECT_MAX`]). `None` when `from` has sent nothing yet, or
    /// (blocking) when bytes wait to be written: then only the poll loop can make
    /// progress. Every [`POLL_EVERY`]-th blocking read polls every socket first
    /// without waiting, and returns if that found anything. Otherwise, whether
    /// anything happened.
    pub(crate) fn read_direct(&mut self, engine: &mut MpiEngine, from: u32, wait: Wait) -> Result<Option<bool>> {
        let Some(slot) = self.heard_on.get(from as usize).copied().flatten() else { return Ok(None) };
        if wait == Wait::Block {
            if !self.tx_empty() {
                return Ok(None);
            }
            self.direct_reads = self.direct_reads.wrapping_add(1);
            if self.direct_reads % POLL_EVERY == 0 && self.poll_io(engine, Some(Duration::ZERO))? {
                return Ok(Some(true));
            }
        }
        Ok(Some(self.read_conn(engine, slot, wait)))
    }

    /// Reads everything available on connection `slot` (the first read waiting
    /// as `wait` says) and hands whole frames to the engine; closes it at end of
    /// stream or on bad input. Whether anything happened.
    fn read_conn(&mut self, engine: &mut MpiEngine, slot: usize, mut wait: Wait) -> bool {
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else { return false };
        let mut got = false;
        let keep = loop {
            match sock::recv_spare(&conn.stream, conn.dec.buffer_mut(), wait) {
                Ok((0, _)) => break false,
                Ok((n, room)) => {
                    got = true;
                    wait = Wait::No;
                    if !decode_frames(conn, engine, Instant::now(), &self.job, self.rank) {
                        break false;
                    }
                    if let Some(r) = conn.rank {
                        // Heard from: worth reconnecting to for acks again.
                        self.out[r as usize].ack_only_gave_up = false;
                        self.heard_on[r as usize] = Some(slot);
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
            self.close_conn(engine, Instant::now(), slot);
            return true;
        }
        got
    }

    /// Listens on a new port and registers it, then closes the old listener and
    /// every accepted connection: peers find the new address through the node and
    /// reconnect, and their engines resend what we had not acknowledged.
    fn move_listener(&mut self, engine: &mut MpiEngine, now: Instant) -> Result<()> {
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
        for slot in 0..self.conns.len() {
            if self.conns[slot].as_ref().is_some_and(|c| c.accepted) {
                self.close_conn(engine, now, slot);
            }
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
fn decode_frames(conn: &mut Conn, engine: &mut MpiEngine, now: Instant, job: &[u8], me: u32) -> bool {
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
fn write_queue(stream: &TcpStream, tx: &mut VecDeque<Bytes>) -> io::Result<()> {
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
