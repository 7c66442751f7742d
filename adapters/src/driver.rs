//! The synchronous pump between one [`Machine`] and its TCP connections, written
//! once for every runtime. It never touches a socket or a clock: shells report
//! bytes, closures and `now`, and carry out the [`IoRequest`]s it emits.
//!
//! Links are encrypted and authenticated by default (Noise XX, see
//! [`p2pmp_core::secure`]): each connection runs the handshake before its hello,
//! and the hello's address is bound to the handshake's key (`bind`).
//!
//! Drain contract: every `on_*` input feeds the machine and then drains
//! `poll_action` to `None` (frames go to the tx queues, events to
//! [`Driver::poll_event`]); afterwards the shell reads [`Driver::next_deadline`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use p2pmp_core::guard::{Admission, GuardConfig, GuardStats, Refusal, TokenBucket};
use p2pmp_core::machine::{Action, Machine, NodeAddr};
use p2pmp_core::overlay::OverlayKind;
use p2pmp_core::secure::{SecureChannel, SecureRng, StaticKey};
use p2pmp_core::time::Backoff;
use p2pmp_core::wire::{self, DEFAULT_MAX_FRAME, Envelope, Hello, WireError};
use tracing::{debug, info, trace, warn};

use crate::peers::{Conn, ConnId, Redial, ZERO_COPY_MIN};

mod bind;

/// Largest frame accepted before a connection's hello (a hello is ~60 bytes).
const HELLO_MAX_FRAME: usize = 1024;
/// Send failures reported to the machine per input before the rest wait a turn.
const MAX_FAILURES_PER_INPUT: usize = 256;
/// Messages a machine may send itself per input before the rest wait a turn.
const MAX_LOOPBACK: usize = 10_000;
/// A send queue longer than this makes the driver check the guard's bound on
/// all queues together (cheap checks for short queues, the sum when it matters).
const QUEUE_CHECK: usize = 1 << 20;

/// Knobs of a [`Driver`].
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// Peers whose hello carries another network id are dropped.
    pub network_id: u64,
    /// The overlay this node runs, if any: peers running another are dropped
    /// with a message saying so.
    pub overlay: Option<OverlayKind>,
    /// Largest frame sent or accepted (length prefix excluded).
    pub max_frame: usize,
    /// Most bytes queued for one connection; a message past it fails to send.
    pub max_tx_bytes: usize,
    /// A connection whose hello has not arrived by then is dropped.
    pub hello_timeout: Duration,
    /// First reconnect back-off after a failure; doubles per failure.
    pub backoff_min: Duration,
    /// Longest reconnect back-off.
    pub backoff_max: Duration,
    /// Against hostile peers: caps on inbound connections (in total and per
    /// source), frames and bytes per second per connection, bans.
    pub guard: GuardConfig,
    /// This node's static key: every connection is a Noise channel authenticated
    /// by it, and a peer's address is bound to its key. `None` sends plain TCP
    /// (for measurements only; such a node cannot talk to encrypting ones).
    pub noise: Option<StaticKey>,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            network_id: 0,
            overlay: None,
            max_frame: DEFAULT_MAX_FRAME,
            max_tx_bytes: 8 << 20,
            hello_timeout: Duration::from_secs(5),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            guard: GuardConfig::default(),
            noise: Some(random_key()),
        }
    }
}

/// Socket work the shell must carry out for the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum IoRequest {
    /// Open a TCP connection to `addr`; answer with [`Driver::on_connected`] or
    /// [`Driver::on_connect_failed`].
    Connect { conn: ConnId, addr: SocketAddr },
    /// Close the socket of `conn` (the driver has already forgotten it).
    Close { conn: ConnId },
}

/// A fresh static key from the operating system's randomness.
pub fn random_key() -> StaticKey {
    StaticKey::generate(&mut SecureRng::from_seed(os_seed()))
}

/// 32 bytes from the operating system's randomness.
pub fn os_seed() -> [u8; 32] {
    let mut seed = [0u8; 32];
    // Linux's getrandom(2) does not fail once the pool is initialised at boot.
    getrandom::fill(&mut seed).expect("operating system randomness");
    seed
}

/// Counters, for logs and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DriverStats {
    pub frames_in: u64,
    pub frames_out: u64,
    pub send_failures: u64,
    pub peers_dropped: u64,
    /// Inbound connections admitted, refused, and cut off for misbehaving.
    pub guard: GuardStats,
}

/// Drives one machine over any number of connections. See the module docs.
pub struct Driver<M: Machine> {
    machine: M,
    cfg: DriverConfig,
    /// Our hello, encoded once; every connection starts with it.
    hello: Bytes,
    conns: BTreeMap<ConnId, Conn>,
    /// The connection messages to a peer's listen address go through.
    by_peer: BTreeMap<NodeAddr, ConnId>,
    backoff: BTreeMap<NodeAddr, Redial>,
    next_conn: u64,
    io: VecDeque<IoRequest>,
    writable: VecDeque<ConnId>,
    events: VecDeque<M::Event>,
    loopback: VecDeque<Envelope<M::Body>>,
    /// Peers to report to `handle_send_failed` once the current drain is over.
    failed: BTreeSet<NodeAddr>,
    last_now: Option<Instant>,
    stats: DriverStats,
    admission: Admission,
    /// Bytes of unfinished frames all connections hold (bounded by the guard).
    buffered: usize,
    /// Seeds every handshake's ephemeral key.
    rng: SecureRng,
    /// Keys found at the addresses this node dialed.
    pins: bind::Pins,
}

impl<M: Machine> fmt::Debug for Driver<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("addr", &self.machine.addr())
            .field("conns", &self.conns.len())
            .field("peers", &self.by_peer.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<M: Machine> Driver<M> {
    /// Takes over `machine` (already constructed) and drains what it queued at birth.
    pub fn new(machine: M, cfg: DriverConfig, now: Instant) -> Self {
        let me = machine.addr();
        let hello =
            Envelope::new(me.id(), me, 0, Hello { network_id: cfg.network_id, listen: me, overlay: cfg.overlay });
        let mut head = BytesMut::new();
        // A hello is a few dozen bytes, far below any frame limit.
        wire::encode_frame(&hello, &mut head, HELLO_MAX_FRAME).expect("hello fits a frame");
        let admission = Admission::new(cfg.guard.clone());
        let mut d = Driver {
            machine,
            cfg,
            hello: head.freeze(),
            conns: BTreeMap::new(),
            by_peer: BTreeMap::new(),
            backoff: BTreeMap::new(),
            next_conn: 0,
            io: VecDeque::new(),
            writable: VecDeque::new(),
            events: VecDeque::new(),
            loopback: VecDeque::new(),
            failed: BTreeSet::new(),
            last_now: None,
            stats: DriverStats::default(),
            admission,
            buffered: 0,
            rng: SecureRng::from_seed(os_seed()),
            pins: bind::Pins::default(),
        };
        d.pump(now);
        d
    }

    /// The machine, for read-only inspection (state reports, tests).
    pub fn machine(&self) -> &M {
        &self.machine
    }

    /// Where this node listens.
    pub fn addr(&self) -> NodeAddr {
        self.machine.addr()
    }

    pub fn stats(&self) -> DriverStats {
        DriverStats { guard: self.admission.stats(), ..self.stats }
    }

    /// The policy against hostile peers (shells pace their reads by its byte rate).
    pub fn guard(&self) -> &GuardConfig {
        &self.cfg.guard
    }

    /// Bytes of unfinished frames held for all connections together.
    pub fn buffered(&self) -> usize {
        self.buffered
    }

    /// Whether `conn` is still known (a shell drops sockets the driver forgot).
    pub fn is_open(&self, conn: ConnId) -> bool {
        self.conns.contains_key(&conn)
    }

    /// Number of live connections.
    pub fn conn_count(&self) -> usize {
        self.conns.len()
    }

    // ----- inputs from the shell -------------------------------------------------

    /// A peer connected to us from `remote`. `None`: refused (too many
    /// connections, or from a source banned for misbehaving), the shell
    /// closes the socket.
    pub fn on_accepted(&mut self, now: Instant, remote: SocketAddr) -> Option<ConnId> {
        if let Err(why) = self.admission.admit(now, remote.ip()) {
            match why {
                Refusal::Banned { first: true, .. } => info!(%remote, "refusing connections: {why}"),
                _ => debug!(%remote, "refusing connection: {why}"),
            }
            return None;
        }
        let conn = self.new_conn(now, None, Some(remote.ip()));
        debug!(%conn, %remote, "accepted");
        self.notify_writable(conn);
        Some(conn)
    }

    /// The connection dialed for `conn` is up.
    pub fn on_connected(&mut self, _now: Instant, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.connected = true;
            trace!(%conn, peer = ?c.peer, "connected");
            self.notify_writable(conn);
        }
    }

    /// The connection dialed for `conn` could not be opened.
    pub fn on_connect_failed(&mut self, now: Instant, conn: ConnId, err: &io::Error) {
        self.drop_conn(now, conn, format_args!("connect failed: {err}"), false);
        self.pump(now);
    }

    /// Bytes arrived on `conn`.
    pub fn on_bytes(&mut self, now: Instant, conn: ConnId, data: &[u8]) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        let before = c.decoder.buffered();
        let taken = c.take_in(data);
        self.buffered += c.decoder.buffered() - before;
        match taken {
            Ok(true) => self.notify_writable(conn),
            Ok(false) => {}
            Err(e) => return self.misbehaved(now, conn, &e),
        }
        loop {
            let Some(c) = self.conns.get_mut(&conn) else { return };
            let before = c.decoder.buffered();
            let decoded = c.decoder.decode();
            self.buffered -= before - c.decoder.buffered();
            let frame = match decoded {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return self.misbehaved(now, conn, &e),
            };
            if !c.frames.try_take(now, 1) {
                let g = &self.cfg.guard;
                let why = format!("flooding: over {} frames at once, {} a second", g.frame_burst, g.frames_per_s);
                return self.misbehaved(now, conn, &why);
            }
            if !c.hello_seen {
                if let Err(why) = self.on_hello(now, conn, frame) {
                    return self.misbehaved(now, conn, &why);
                }
                continue;
            }
            match wire::decode_envelope::<M::Body>(frame) {
                Ok(env) if c.bound != Some((env.sender_addr, env.sender)) => {
                    let why = format!(
                        "sent a message as {} (id {}) on a connection bound to {:?}",
                        env.sender_addr, env.sender, c.bound
                    );
                    return self.misbehaved(now, conn, &why);
                }
                Ok(env) => {
                    self.stats.frames_in += 1;
                    self.machine.handle_message(now, env);
                    self.pump(now);
                }
                Err(e) => return self.misbehaved(now, conn, &e),
            }
        }
        if self.buffered > self.cfg.guard.max_buffered {
            self.shed_buffers(now);
        }
    }

    /// Unfinished frames hold more than the guard allows: cuts off the
    /// connections holding the most until back under it.
    fn shed_buffers(&mut self, now: Instant) {
        while self.buffered > self.cfg.guard.max_buffered {
            let Some((conn, held)) = self.conns.iter().map(|(&id, c)| (id, c.decoder.buffered())).max_by_key(|x| x.1)
            else {
                return;
            };
            let why = format!("holding {held} bytes of an unfinished frame while all peers hold {}", self.buffered);
            self.misbehaved(now, conn, &why);
        }
    }

    /// The peer closed `conn`, or reading or writing it failed.
    pub fn on_closed(&mut self, now: Instant, conn: ConnId, why: impl fmt::Display) {
        let Some(c) = self.conns.get(&conn) else { return };
        let why = match c.decoder.finish() {
            Err(e) => format!("{why} ({e})"),
            Ok(()) => why.to_string(),
        };
        self.drop_conn(now, conn, format_args!("{why}"), false);
        self.pump(now);
    }

    /// Time passed: fires the machine's timers and the hello deadlines.
    pub fn on_timeout(&mut self, now: Instant) {
        let late: Vec<ConnId> =
            self.conns.iter().filter(|(_, c)| !c.hello_seen && c.hello_deadline <= now).map(|(&id, _)| id).collect();
        let limit = self.cfg.hello_timeout;
        for conn in late {
            self.drop_conn(now, conn, format_args!("peer misbehaved: no hello within {limit:?}"), true);
        }
        if self.machine.poll_timeout().is_some_and(|t| t <= now) {
            self.machine.handle_timeout(now);
        }
        self.pump(now);
    }

    /// The application asks the machine for something.
    pub fn on_command(&mut self, now: Instant, cmd: M::Command) -> Result<(), M::CmdError> {
        let res = self.machine.handle_command(now, cmd);
        self.pump(now);
        res
    }

    /// Drains the machine. Every `on_*` already does; calling it again is harmless.
    pub fn flush(&mut self, now: Instant) {
        self.pump(now);
    }

    // ----- outputs to the shell --------------------------------------------------

    /// When [`Driver::on_timeout`] should next be called.
    pub fn next_deadline(&self) -> Option<Instant> {
        let hello = self.conns.values().filter(|c| !c.hello_seen).map(|c| c.hello_deadline).min();
        let pending = if self.loopback.is_empty() && self.failed.is_empty() { None } else { self.last_now };
        [self.machine.poll_timeout(), hello, pending].into_iter().flatten().min()
    }

    /// The next connect or close the shell must carry out.
    pub fn poll_io(&mut self) -> Option<IoRequest> {
        self.io.pop_front()
    }

    /// A connected connection that has new bytes to send.
    pub fn poll_writable(&mut self) -> Option<ConnId> {
        while let Some(conn) = self.writable.pop_front() {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.tx_notified = false;
                if c.connected && c.tx.waiting() > 0 {
                    return Some(conn);
                }
            }
        }
        None
    }

    /// What the machine reported to the application.
    pub fn poll_event(&mut self) -> Option<M::Event> {
        self.events.pop_front()
    }

    /// Nothing is queued for sending on any connection.
    pub fn tx_idle(&self) -> bool {
        self.conns.values().all(|c| c.queued() == 0)
    }

    /// Bytes queued for writing on `conn` (zero for unknown connections; frames
    /// waiting for the handshake to finish are not counted until it has).
    pub fn tx_pending(&self, conn: ConnId) -> usize {
        self.conns.get(&conn).map_or(0, |c| c.tx.queued())
    }

    /// For readiness-based shells: writes what is queued for `conn` into `w`.
    /// `Ok(true)` when everything went out, `Ok(false)` when `w` would block; an
    /// `Err` means the connection is broken (report it with [`Driver::on_closed`]).
    pub fn write_tx(&mut self, conn: ConnId, w: &mut impl io::Write) -> io::Result<bool> {
        match self.conns.get_mut(&conn) {
            Some(c) if c.connected => c.tx.write_to(w),
            _ => Ok(true),
        }
    }

    /// For completion-based shells: hands out every queued chunk of `conn` for
    /// one vectored write; confirm with [`Driver::on_tx_done`].
    pub fn take_tx(&mut self, conn: ConnId) -> Vec<Bytes> {
        match self.conns.get_mut(&conn) {
            Some(c) if c.connected => c.tx.take(),
            _ => Vec::new(),
        }
    }

    /// `n` bytes handed out by [`Driver::take_tx`] were written.
    pub fn on_tx_done(&mut self, conn: ConnId, n: usize) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.tx.done(n);
        }
    }

    // ----- internals -------------------------------------------------------------

    /// A new connection: outbound to `peer`, or inbound from `source`.
    fn new_conn(&mut self, now: Instant, peer: Option<NodeAddr>, source: Option<std::net::IpAddr>) -> ConnId {
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        let g = &self.cfg.guard;
        let frames = TokenBucket::new(g.frames_per_s, g.frame_burst, now);
        let mut c = Conn::new(peer, source, now + self.cfg.hello_timeout, HELLO_MAX_FRAME, frames);
        if let Some(key) = &self.cfg.noise {
            let mut first = BytesMut::new();
            let seed = self.rng.seed();
            let ch = if c.outbound {
                SecureChannel::initiator(key, seed, &mut first)
            } else {
                SecureChannel::responder(key, seed)
            };
            c.secure(ch, first);
        }
        c.push_frame(&self.hello, Bytes::new());
        self.conns.insert(conn, c);
        conn
    }

    fn notify_writable(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn)
            && !c.tx_notified
        {
            c.tx_notified = true;
            self.writable.push_back(conn);
        }
    }

    /// The first frame of every connection: the peer's hello.
    fn on_hello(&mut self, now: Instant, conn: ConnId, frame: Bytes) -> Result<(), String> {
        let env = wire::decode_envelope::<Hello>(frame).map_err(|e| format!("bad hello: {e}"))?;
        let hello = env.body;
        if hello.network_id != self.cfg.network_id {
            return Err(format!("wrong network id {} (ours {})", hello.network_id, self.cfg.network_id));
        }
        if let (Some(ours), Some(theirs)) = (self.cfg.overlay, hello.overlay)
            && ours != theirs
        {
            return Err(format!(
                "{} runs {theirs} and this node {ours}: a network runs one overlay, refused",
                hello.listen
            ));
        }
        self.bind(now, conn, hello.listen)?;
        if self.conns.get(&conn).is_some_and(|c| c.probe) {
            self.drop_conn(now, conn, format_args!("probe answered"), false);
            return Ok(());
        }
        let max_frame = self.cfg.max_frame;
        // The caller found `conn` a moment ago.
        let c = self.conns.get_mut(&conn).expect("conn exists");
        c.hello_seen = true;
        c.bound = Some((hello.listen, hello.listen.id()));
        c.open_decoder(max_frame);
        if c.outbound {
            if c.peer != Some(hello.listen) {
                debug!(%conn, dialed = ?c.peer, listen = %hello.listen, "peer listens elsewhere than dialed");
            }
            if let Some(p) = c.peer {
                self.backoff.remove(&p);
            }
        } else {
            c.peer = Some(hello.listen);
            self.by_peer.entry(hello.listen).or_insert(conn);
        }
        debug!(%conn, peer = %hello.listen, "hello");
        Ok(())
    }

    /// Binds `conn` to the address its hello claims (see `bind`), or says why not.
    fn bind(&mut self, now: Instant, conn: ConnId, listen: NodeAddr) -> Result<(), String> {
        // The caller found `conn` a moment ago.
        let c = self.conns.get(&conn).expect("conn exists");
        if let Some(source) = c.source
            && !bind::same_host(source, listen.0.ip())
        {
            return Err(format!("claims to listen at {listen} but connects from {source}"));
        }
        let key = match &c.secure {
            None => return Ok(()),
            Some(ch) => ch.remote_key().ok_or("a hello before the handshake authenticated the peer")?,
        };
        if c.outbound && c.peer == Some(listen) {
            self.pins.learn(listen, key);
            // Whoever else claimed this address with another key lied.
            let liars: Vec<ConnId> = self
                .conns
                .iter()
                .filter(|&(&id, o)| {
                    id != conn
                        && o.bound.is_some_and(|(a, _)| a == listen)
                        && o.secure.as_ref().and_then(SecureChannel::remote_key) != Some(key)
                })
                .map(|(&id, _)| id)
                .collect();
            for liar in liars {
                self.stats.peers_dropped += 1;
                let why = format_args!("peer misbehaved: claimed {listen}, which answers with another key");
                self.drop_conn(now, liar, why, true);
            }
            return Ok(());
        }
        if c.outbound {
            return Ok(());
        }
        let pinned = self.pins.get(listen);
        if pinned != Some(key) {
            self.probe(now, listen);
        }
        match pinned {
            Some(pinned) if pinned != key => Err(format!("claims {listen}, whose key is {pinned}, with key {key}")),
            _ => Ok(()),
        }
    }

    /// Dials `addr` only to learn which key answers there (the answer pins it,
    /// and drops whoever claimed `addr` with another key), unless a connection
    /// we opened to it is open or under way (it pins, or pinned, the same way).
    /// The probe carries no messages and closes once it has its answer.
    fn probe(&mut self, now: Instant, addr: NodeAddr) {
        let dialed = self.conns.values().any(|c| c.outbound && c.peer == Some(addr));
        if dialed || self.backoff.get(&addr).is_some_and(|b| b.until > now) {
            return;
        }
        let conn = self.new_conn(now, Some(addr), None);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.probe = true;
        }
        self.io.push_back(IoRequest::Connect { conn, addr: addr.0 });
        debug!(%conn, %addr, "probing which key answers");
    }

    /// Opens a connection to `to` and routes messages for it through it.
    fn dial(&mut self, now: Instant, to: NodeAddr) -> ConnId {
        let conn = self.new_conn(now, Some(to), None);
        self.by_peer.insert(to, conn);
        self.io.push_back(IoRequest::Connect { conn, addr: to.0 });
        debug!(%conn, %to, "dialing");
        conn
    }

    fn misbehaved(&mut self, now: Instant, conn: ConnId, why: &dyn fmt::Display) {
        self.cut_off(now, conn, why);
        self.pump(now);
    }

    /// Drops `conn` for what its peer did, without draining the machine (safe
    /// in the middle of a drain; the peer is reported by the next one).
    fn cut_off(&mut self, now: Instant, conn: ConnId, why: &dyn fmt::Display) {
        self.stats.peers_dropped += 1;
        self.drop_conn(now, conn, format_args!("peer misbehaved: {why}"), true);
    }

    /// Everything queued for sending is over the guard's bound: cuts off the
    /// connections with the most queued (peers that ask and never read) until under.
    fn shed_queues(&mut self, now: Instant) {
        let mut total: usize = self.conns.values().map(|c| c.tx.queued()).sum();
        while total > self.cfg.guard.max_queued {
            let Some((conn, queued)) = self.conns.iter().map(|(&id, c)| (id, c.tx.queued())).max_by_key(|x| x.1) else {
                return;
            };
            total -= queued;
            let why = format!("not reading: {queued} bytes queued for it, {} for all peers", total + queued);
            self.cut_off(now, conn, &why);
        }
    }

    /// Forgets `conn`; reports its peer as unreachable if we dialed it or sent
    /// through it. `misbehaved`: cut off for what the peer did, which bans an
    /// inbound connection's source (logged when the ban starts, once per source
    /// and ban, not once per connection or frame).
    fn drop_conn(&mut self, now: Instant, conn: ConnId, why: fmt::Arguments<'_>, misbehaved: bool) {
        let Some(c) = self.conns.remove(&conn) else { return };
        self.buffered -= c.decoder.buffered();
        match (misbehaved, c.source) {
            (true, Some(ip)) => {
                self.admission.release(ip);
                // An address shared with a peer in good standing (several nodes
                // on one host, or behind one NAT) is not banned: the offending
                // connection is cut, the honest ones keep being served.
                let shared = self.conns.values().any(|o| o.hello_seen && o.ip() == Some(ip));
                match (shared, self.admission.punish_unless(now, ip, shared)) {
                    (_, Some(ban)) => warn!(%conn, source = %ip, "cutting off: {why}; refusing {ip} for {ban:?}"),
                    (true, None) => {
                        warn!(%conn, source = %ip, "cutting off: {why} (not banning {ip}: a peer in good standing shares it)")
                    }
                    (false, None) => debug!(%conn, source = %ip, "cutting off: {why}"),
                }
            }
            (true, None) => warn!(%conn, peer = ?c.peer, "dropping connection: {why}"),
            (false, source) => {
                if let Some(ip) = source {
                    self.admission.release(ip);
                }
                debug!(%conn, peer = ?c.peer, "connection closed: {why}");
            }
        }
        self.io.push_back(IoRequest::Close { conn });
        let Some(peer) = c.peer else { return };
        if c.outbound && !c.hello_seen {
            let r = self.backoff.entry(peer).or_insert(Redial { backoff: Backoff::default(), until: now });
            r.until = now + r.backoff.fail(self.cfg.backoff_min, self.cfg.backoff_max);
        }
        if self.by_peer.get(&peer) == Some(&conn) {
            self.by_peer.remove(&peer);
            // Another connection with the same peer (simultaneous dials) takes over.
            let other = self.conns.iter().find(|(_, o)| o.peer == Some(peer) && o.hello_seen).map(|(&id, _)| id);
            match other {
                Some(o) => {
                    self.by_peer.insert(peer, o);
                }
                None if c.used || (c.outbound && !c.probe) => {
                    self.failed.insert(peer);
                }
                None => {}
            }
        }
    }

    /// Drains the machine, then feeds back messages to itself and send failures
    /// one at a time (draining after each), until quiet or out of budget.
    fn pump(&mut self, now: Instant) {
        self.last_now = Some(now);
        let mut loopback_budget = MAX_LOOPBACK;
        let mut failure_budget = MAX_FAILURES_PER_INPUT;
        loop {
            while let Some(action) = self.machine.poll_action() {
                match action {
                    Action::Send { to, msg } => self.send(now, to, msg),
                    Action::Event(e) => self.events.push_back(e),
                }
            }
            if loopback_budget > 0
                && let Some(env) = self.loopback.pop_front()
            {
                loopback_budget -= 1;
                self.machine.handle_message(now, env);
                continue;
            }
            if failure_budget > 0
                && let Some(to) = self.failed.pop_first()
            {
                failure_budget -= 1;
                self.stats.send_failures += 1;
                self.machine.handle_send_failed(now, to);
                continue;
            }
            break;
        }
        if !self.loopback.is_empty() || !self.failed.is_empty() {
            // Left for the next input: next_deadline reports `now`.
            debug!(failed = self.failed.len(), loopback = self.loopback.len(), "pump budget spent");
        }
    }

    fn send(&mut self, now: Instant, to: NodeAddr, msg: Envelope<M::Body>) {
        if to == self.machine.addr() {
            self.loopback.push_back(msg);
            return;
        }
        let conn = match self.by_peer.get(&to) {
            Some(&c) => c,
            None => {
                if self.backoff.get(&to).is_some_and(|b| b.until > now) {
                    trace!(%to, "in reconnect back-off");
                    self.failed.insert(to);
                    return;
                }
                self.dial(now, to)
            }
        };
        // `by_peer` only names live connections.
        let c = self.conns.get_mut(&conn).expect("by_peer names a live conn");
        match encode(&msg, self.cfg.max_frame) {
            Ok((head, payload)) if c.queued() + head.len() + payload.len() <= self.cfg.max_tx_bytes => {
                c.push_frame(&head, payload);
                c.used = true;
                self.stats.frames_out += 1;
                let long = c.tx.queued() > QUEUE_CHECK;
                if c.connected {
                    self.notify_writable(conn);
                }
                if long {
                    self.shed_queues(now);
                }
            }
            Ok(_) => {
                warn!(%to, queued = c.queued(), "send queue full, message dropped");
                self.failed.insert(to);
            }
            Err(e) => {
                warn!(%to, "message not sent: {e}");
                self.failed.insert(to);
            }
        }
    }
}

fn encode<B: serde::Serialize>(msg: &Envelope<B>, max_frame: usize) -> Result<(BytesMut, Bytes), WireError> {
    if msg.payload.len() >= ZERO_COPY_MIN {
        wire::encode_frame_parts(msg, max_frame)
    } else {
        let mut head = BytesMut::with_capacity(64 + msg.payload.len());
        wire::encode_frame(msg, &mut head, max_frame)?;
        Ok((head, Bytes::new()))
    }
}

#[cfg(test)]
mod tests;
