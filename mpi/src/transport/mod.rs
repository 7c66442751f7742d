//! The data path: a minimal mio loop run on the calling thread.
//!
//! Each rank listens on an ephemeral port of its host's address (`P2PMP_HOST`). A connection carries frames
//! both ways: frames for rank `r` (data, acknowledgements, clear-to-send) go out
//! on the connection `r` already sends to us on, or else on one this rank opens
//! to `r`. One connection per pair means a reply carries TCP's acknowledgement of
//! the request, so a message costs one TCP segment instead of a segment and a
//! bare ACK. Frames for one rank use one connection at a time, switching only
//! after a break (the engine resends by sequence number) or, when both ranks
//! opened one at once, to the lower rank's once nothing is unacknowledged
//! (`Transport::answer_on_one`). A connection
//! starts with a [`RankHello`] from the side that opened it; the acceptor checks
//! it and then hands every frame to the engine as coming from that rank.
//!
//! When to connect, to which address, how long to back off and when to give
//! up is the link machine's ([`Links`], in core); this loop only carries out
//! its actions and reports back. A rank's address comes from the local node
//! (its process key, resolved through the overlay): the request goes out on
//! the node connection and its answer arrives as an event of this loop, and a
//! connection is opened without waiting (its outcome is an event too), so
//! nothing inside progress waits for the node or a peer's listener.
//!
//! A TCP link between hosts is encrypted and authenticated (Noise XX, see
//! `secure`): each rank registers a fresh public key with its address, a
//! dialer expects the key registered where it dials, and an acceptor takes a
//! hello only with a key the named rank registered. `P2PMP_ENCRYPT` says
//! which links: `auto` (between hosts), `always` or `never`.
//!
//! Ranks of one host talk through shared memory instead (see `shm`, and
//! `rings` for the transport's side of it): a link there is a connection
//! like a TCP one, with rings for its bytes, and the link machine falls back
//! to TCP whenever it cannot be had. `P2PMP_SHM=0` turns shared memory off.
//!
//! Sockets stay in blocking mode with a receive timeout ([`DIRECT_MAX`]); the poll
//! loop reads and writes with `MSG_DONTWAIT`, and a rank waiting for one peer may
//! sleep in `recv` on that peer's socket ([`Transport::read_direct`]). A rank
//! waiting on shared memory checks the rings without any system call, and
//! before it sleeps asks its peers to ring its doorbell (an eventfd in the poll
//! set) at their next bytes ([`Transport::before_sleep`]).
//!
//! The node connection also carries checkpoints: the node may ask for one
//! unasked ([`LocalReply::CheckpointWanted`], or [`LocalReply::MoveWanted`]:
//! a checkpoint after which this rank moves; noticed when the poll loop reads
//! the node's replies, so the data path pays nothing while none comes), and the
//! rank reports each checkpoint and recovery ([`Transport::report`]).

mod census;
mod conn;
#[cfg(feature = "fault-injection")]
mod fault;
mod rings;
mod secure;
mod shm;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use mio::net::{TcpListener, TcpStream, UnixListener};
use mio::{Events, Interest, Poll, Token};
use p2pmp_core::id::Id;
use p2pmp_core::local::{Endpoint, LocalReply, LocalRequest, PUSH_ID, RankHello, process_key};
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::mpi::{LinkAction, LinkConfig, Links, MpiEngine, Path, Route, Transmit, TransmitRef};
use p2pmp_core::secure::SecureChannel;
use p2pmp_core::wire::{DEFAULT_MAX_FRAME, Envelope, HeaderPrefix, encode_frame_parts};
use tracing::{debug, warn};

use self::census::Census;
use self::conn::{Conn, Decoded, Io, decode_frames};
use self::secure::Keys;
pub(crate) use self::shm::NeedsCore;
use crate::env::RankEnv;
use crate::error::{Error, Result};
use crate::node_client::{self, NodeClient};
use crate::sock::Wait;

const LISTENER: Token = Token(usize::MAX);
const NODE: Token = Token(usize::MAX - 1);
const SHM_LISTENER: Token = Token(usize::MAX - 2);
const DOORBELL: Token = Token(usize::MAX - 3);
/// While shared-memory links exist, a poll that must not wait asks the kernel
/// about sockets at most this often (the rings are looked at every time).
const ZERO_POLL_EVERY: Duration = Duration::from_micros(20);
/// Longest a direct (blocking) read of one peer's connection sleeps: the receive
/// timeout of every data socket. Other sockets, timers and reconnects wait at
/// most this long while a rank sleeps on one peer.
pub(crate) const DIRECT_MAX: Duration = Duration::from_millis(10);
/// A direct read of one peer looks at every socket first (without waiting)
/// when the kernel was last asked longer ago than this, so that neither a
/// steady stream from one peer nor a wait on it starves the others (answers
/// of the node, connections set up, a peer that reconnected elsewhere).
const POLL_EVERY: Duration = Duration::from_micros(500);
/// After an `accept` failed for want of resources (a descriptor, most
/// often: the job's `open_files` limit), how long until it is tried again.
/// The listeners are edge-triggered: without a retry, the connections left
/// in the backlog would wait for the next one to arrive.
const ACCEPT_RETRY: Duration = Duration::from_millis(20);
/// Most bytes an accepted encrypted connection may send while the key it
/// authenticated with is being checked against its claimed rank's.
const CLAIM_MAX: usize = 4 << 20;

/// What shared memory needs on this rank's side.
#[derive(Debug)]
struct Local {
    listener: UnixListener,
    bell: OwnedFd,
    /// Bytes of each ring this rank creates.
    cap: usize,
    /// Whether this rank opens shared-memory links (`P2PMP_SHM=0`: no; it
    /// still accepts them, and its socket still says it is here).
    open_links: bool,
    /// This job's ranks found on this host, and when to count them again.
    census: Census,
    /// How far a count of a large job goes: one more rank than the cores.
    enough: u32,
}

impl Local {
    /// Listens for links from ranks of this host, unless the socket cannot be
    /// had (then everything goes over TCP).
    fn start(poll: &Poll, key: Id, size: u32) -> Option<Local> {
        let made = (|| -> io::Result<Local> {
            let mut listener = shm::listen(key)?;
            let bell = crate::shm::segment::doorbell()?;
            poll.registry().register(&mut listener, SHM_LISTENER, Interest::READABLE)?;
            poll.registry().register(&mut mio::unix::SourceFd(&bell.as_raw_fd()), DOORBELL, Interest::READABLE)?;
            let open_links = !std::env::var("P2PMP_SHM").is_ok_and(|v| v.trim() == "0");
            let enough = crate::progress::usable_cores() + 1;
            Ok(Local { listener, bell, cap: shm::ring_capacity(size), open_links, census: Census::new(), enough })
        })();
        made.map_err(|e| warn!(%e, "no shared memory: everything goes over TCP")).ok()
    }
}

/// The time for work that may not need it: read from the clock when first
/// asked for (then kept: pass it on by reference), or given. A send on an
/// open link, with no link to set up and no write failing, never asks: on
/// a virtual machine a clock read costs about as much as the rest of a
/// small send.
#[derive(Debug)]
pub(crate) struct LazyNow(Option<Instant>);

impl LazyNow {
    /// Not read yet.
    pub(crate) const UNREAD: LazyNow = LazyNow(None);

    /// The time given, or read now (and kept).
    pub(crate) fn get(&mut self) -> Instant {
        *self.0.get_or_insert_with(Instant::now)
    }
}

impl From<Instant> for LazyNow {
    fn from(now: Instant) -> Self {
        LazyNow(Some(now))
    }
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
    /// The node connection failed: every resolve fails with this.
    node_failed: Option<String>,
    /// Resolves waiting for the node's answer: request id -> peer.
    resolves: BTreeMap<u64, u32>,
    /// Resolves checking the key of connections that claim a rank: request
    /// id -> the rank claimed.
    verifies: BTreeMap<u64, u32>,
    /// This rank's Noise key and what it knows of its peers'.
    keys: Keys,
    /// When to connect, back off, give up: the link machine.
    links: Links,
    /// The connection (slot) frames for each rank go out on.
    out: Vec<Option<usize>>,
    /// The connection being opened to each rank.
    attempt: Vec<Option<usize>>,
    /// Frames (header, payload) for each rank held while its first connection
    /// is being opened.
    held: Vec<VecDeque<(Bytes, Bytes)>>,
    /// Connections by slot (the slot is the poll token).
    conns: Vec<Option<Conn>>,
    /// The connection each rank's frames last arrived on.
    heard_on: Vec<Option<usize>>,
    /// Connections whose queue may have bytes to write.
    dirty: Vec<usize>,
    /// What the last poll found ready (reused, so polling allocates nothing).
    ready: Vec<Ready>,
    /// Replies of the node read in the last poll (reused).
    replies: Vec<(u64, LocalReply)>,
    /// The newest checkpoint request the node sent (0: none).
    checkpoint_wanted: u64,
    /// The newest request the node sent to move this rank alone (0: none).
    move_wanted: u64,
    /// A peer stayed unreachable too long (reported by the next call that can).
    gave_up: Option<Error>,
    /// A peer silent this long breaks its connection (`P2PMP_FAILURE_TIMEOUT_MS`).
    failure_timeout: Duration,
    /// Shared memory: where peers of this host reach us, and our doorbell.
    local: Option<Local>,
    /// The job's turn round the cores (from its id): where its first rank on
    /// a host has its home (see `place_here`).
    turn: u32,
    /// Slots of the established shared-memory links.
    shm_slots: Vec<usize>,
    /// When the kernel was last asked about sockets.
    last_poll: Instant,
    /// `last_poll + POLL_EVERY`: from then on a direct read asks the kernel first.
    poll_due: Instant,
    /// Bytes handed to sockets and rings after waiting for room (a waiting
    /// sender's progress, as bytes read are a receiver's).
    written: u64,
    /// When the listeners are to be accepted from again, after an `accept`
    /// failed with connections left waiting ([`ACCEPT_RETRY`]).
    accept_again: Option<Instant>,
    /// The start of every header this rank writes (its version, key and address).
    prefix: HeaderPrefix,
    /// Where each frame's header is encoded (reused: a small frame written
    /// straight into a ring allocates nothing).
    head: BytesMut,
    #[cfg(feature = "fault-injection")]
    faults: fault::Faults,
}

impl Transport {
    /// Listens on an ephemeral port of the host's address (`env.host`, where
    /// the node runs, so ranks of other hosts reach it) and registers there,
    /// with a fresh public key, with the node.
    pub(crate) fn start(env: &RankEnv) -> Result<Self> {
        let RankEnv { ref job, rank, size, node, host, failure_timeout, encrypt } = *env;
        let job = job.clone();
        let poll = Poll::new()?;
        let mut listener = TcpListener::bind(SocketAddr::new(host, 0))
            .map_err(|e| Error::Env { var: crate::env::HOST_VAR, problem: format!("cannot listen on {host}: {e}") })?;
        poll.registry().register(&mut listener, LISTENER, Interest::READABLE)?;
        let addr = NodeAddr(listener.local_addr()?);
        let key = process_key(&job, rank);
        let keys = Keys::new(encrypt, host, size);
        // Listening for shared-memory links before registering: a peer that
        // finds our address at once must find the socket too, or it falls
        // back to TCP for good.
        let local = Local::start(&poll, key, size);
        let now = Instant::now();
        let mut node = NodeClient::connect(node, key, addr)?;
        node.register(keys.register(key, addr))?;
        poll.registry().register(&mut node.stream, NODE, Interest::READABLE | Interest::WRITABLE)?;
        debug!(rank, %addr, %key, "registered");
        let n = size as usize;
        let same_host = local.as_ref().filter(|l| l.open_links).map(|_| host);
        let config = LinkConfig { same_host, ..LinkConfig::default() };
        let prefix = HeaderPrefix::new(&key, &addr).map_err(|e| Error::Invalid(format!("own header: {e}")))?;
        let turn = census::job_turn(&job);
        Ok(Transport {
            poll,
            events: Events::with_capacity(256),
            listener,
            addr,
            key,
            job,
            rank,
            node,
            node_failed: None,
            resolves: BTreeMap::new(),
            verifies: BTreeMap::new(),
            keys,
            links: Links::new(config, rank, size),
            out: vec![None; n],
            attempt: vec![None; n],
            held: vec![VecDeque::new(); n],
            conns: Vec::new(),
            heard_on: vec![None; n],
            dirty: Vec::new(),
            ready: Vec::with_capacity(256),
            replies: Vec::new(),
            checkpoint_wanted: 0,
            move_wanted: 0,
            gave_up: None,
            failure_timeout,
            turn,
            local,
            shm_slots: Vec::new(),
            last_poll: now,
            poll_due: now + POLL_EVERY,
            written: 0,
            accept_again: None,
            head: BytesMut::new(),
            prefix,
            #[cfg(feature = "fault-injection")]
            faults: fault::Faults::from_env(rank),
        })
    }

    /// Moves every frame the engine has into the connections and writes what the
    /// sockets take.
    pub(crate) fn pump(&mut self, engine: &mut MpiEngine, now: impl Into<LazyNow>) -> Result<()> {
        let mut now = now.into();
        while let Some(t) = engine.poll_transmit_ref() {
            // An open link takes the frame whenever it comes, straight from
            // the engine's copy (no reference of our own unless it is queued).
            // Not while link actions wait: they run first (see `enqueue`),
            // and need the engine this frame borrows. Fault injection (the
            // mpi_launch tests' builds) takes the owned path every time.
            if self.links.is_open(t.to) && !self.links.has_action() && !cfg!(feature = "fault-injection") {
                self.route_frame(Route::Send, t);
                continue;
            }
            let t = t.to_transmit();
            self.enqueue(engine, &mut now, t);
        }
        self.settle(engine, now)
    }

    fn enqueue(&mut self, engine: &mut MpiEngine, now: &mut LazyNow, t: Transmit) {
        let to = t.to;
        // An open link takes the frame whenever it comes.
        let route = if self.links.is_open(to) { Route::Send } else { self.links.on_transmit(now.get(), to, engine) };
        if route == Route::Drop {
            return; // the engine keeps it and resends after the reconnect
        }
        // A link that opens on the spot (the peer's own connection) is set up now.
        self.apply_links_now(engine, now);
        #[cfg(feature = "fault-injection")]
        if route == Route::Send && self.inject(engine, now.get(), to) == fault::Inject::Drop {
            return;
        }
        self.route_frame(route, TransmitRef { to, msg: t.msg, payload: &t.payload });
    }

    /// Encodes frame `t` and hands it to its peer's connection (`Send`) or
    /// holds it until the first connection is up (`Hold`).
    fn route_frame(&mut self, route: Route, t: TransmitRef<'_>) {
        let head = &mut self.head;
        head.clear();
        // The frame of `t.into_envelope(self.key, self.addr)`, our part of it
        // encoded once. Invariant: the engine's frames fit the wire maximum
        // (MpiConfig::validate).
        t.msg
            .encode_frame_head(&self.prefix, t.payload.len(), head, DEFAULT_MAX_FRAME)
            .expect("engine frame fits a wire frame");
        let slot = match (route, self.out[t.to as usize]) {
            (Route::Send, Some(slot)) => slot,
            // Held until the first connection is up (or dropped if it fails).
            (Route::Hold, _) => {
                self.held[t.to as usize].push_back(conn::queued_parts(head, t.payload));
                return;
            }
            // The link broke just now (a fault): the engine resends.
            _ => return,
        };
        let conn = self.conns[slot].as_mut().expect("out[to] names an open connection");
        if conn.put_frame(head, t.payload) {
            self.mark_dirty(slot);
        }
    }

    /// Connection `slot` may have bytes to write: the next flush writes them.
    fn mark_dirty(&mut self, slot: usize) {
        if !self.dirty.contains(&slot) {
            self.dirty.push(slot);
        }
    }

    /// Carries out the link machine's actions, then writes what the
    /// connections hold.
    fn settle(&mut self, engine: &mut MpiEngine, now: impl Into<LazyNow>) -> Result<()> {
        let mut now = now.into();
        self.apply_links(engine, &mut now)?;
        self.flush_dirty(engine, &mut now);
        Ok(())
    }

    /// Writes what the connections marked dirty hold (checked inline: this
    /// runs after every frame and read, and almost always finds none).
    #[inline]
    fn flush_dirty(&mut self, engine: &mut MpiEngine, now: &mut LazyNow) {
        if !self.dirty.is_empty() {
            self.flush_dirty_slots(engine, now);
        }
    }

    #[inline(never)]
    fn flush_dirty_slots(&mut self, engine: &mut MpiEngine, now: &mut LazyNow) {
        while let Some(slot) = self.dirty.pop() {
            let Some(conn) = self.conns[slot].as_mut() else { continue };
            match conn.write_tx() {
                Ok(n) => self.written = self.written.wrapping_add(n as u64),
                Err(e) => {
                    debug!(slot, %e, "write failed");
                    self.close_conn(engine, now.get(), slot);
                }
            }
        }
    }

    /// Carries out the link machine's actions; an error when a peer stayed
    /// unreachable too long.
    fn apply_links(&mut self, engine: &mut MpiEngine, now: &mut LazyNow) -> Result<()> {
        self.apply_links_now(engine, now);
        self.gave_up.take().map_or(Ok(()), Err)
    }

    /// [`Transport::apply_links`] where no error can be returned: a give-up is
    /// kept for the next one to report. (Checked inline: there is almost
    /// never an action, and the call that carries one out costs more than
    /// the rest of a look at an idle ring.)
    #[inline]
    fn apply_links_now(&mut self, engine: &mut MpiEngine, now: &mut LazyNow) {
        if self.links.has_action() {
            self.apply_link_actions(engine, now);
        }
    }

    #[inline(never)]
    fn apply_link_actions(&mut self, engine: &mut MpiEngine, now: &mut LazyNow) {
        while let Some(a) = self.links.poll_action() {
            if let Some(e) = self.apply(engine, now.get(), a) {
                self.gave_up.get_or_insert(e);
            }
        }
    }

    fn apply(&mut self, engine: &mut MpiEngine, now: Instant, a: LinkAction) -> Option<Error> {
        match a {
            LinkAction::Resolve { peer } => match self.ask_resolve(engine, now, peer) {
                Ok(id) => drop(self.resolves.insert(id, peer)),
                Err(why) => self.links.handle_resolved(now, peer, Err(why), engine),
            },
            LinkAction::Connect { peer, addr, path } => {
                let started = match path {
                    Path::Tcp => self.connect(peer, addr.0),
                    Path::Shm => self.connect_shm(peer),
                };
                match started {
                    Ok(slot) => self.attempt[peer as usize] = Some(slot),
                    Err(e) => self.links.handle_connect_failed(now, peer, e.to_string(), engine),
                }
            }
            LinkAction::Abort { peer } => {
                if let Some(slot) = self.attempt[peer as usize].take() {
                    self.drop_conn(slot);
                }
                self.resolves.retain(|_, p| *p != peer);
            }
            LinkAction::UseInbound { peer } => match self.heard_on[peer as usize] {
                Some(slot) => self.set_out(peer, slot),
                // The peer's connection closed before it was taken: the frames
                // held for the first attempt go (the engine resends them once
                // the link is back), and the link is down.
                None => {
                    self.held[peer as usize].clear();
                    self.links.handle_closed(now, peer, engine);
                }
            },
            LinkAction::Failed { peer } => self.held[peer as usize].clear(),
            LinkAction::GiveUp { peer, why } => return Some(Error::Unreachable { rank: peer, why }),
        }
        None
    }

    /// Starts a connection to `peer` at `at` without waiting for it.
    fn connect(&mut self, peer: u32, at: SocketAddr) -> io::Result<usize> {
        let stream = TcpStream::connect(at)?;
        debug!(to = peer, %at, "connecting");
        self.add_conn(Io::Tcp { stream, connecting: true }, Some(peer), false)
    }

    /// A connection we opened became writable or failed: established (hello
    /// first, then the frames held), failed (the next address), or not yet.
    fn on_connect_ready(&mut self, engine: &mut MpiEngine, now: Instant, slot: usize) {
        let Some(c) = self.conns[slot].as_mut() else { return };
        let Some(outcome) = c.connect_outcome() else { return };
        // Invariant: connections we open know their rank from the start.
        let peer = c.rank.expect("an opened connection knows its peer");
        if self.attempt[peer as usize] == Some(slot) {
            self.attempt[peer as usize] = None;
        }
        let outcome = outcome.and_then(|()| {
            let Io::Tcp { stream, connecting } = &mut c.io else { return Err("not a TCP connection".into()) };
            conn::configure(stream, DIRECT_MAX, self.failure_timeout).map_err(|e| e.to_string())?;
            let at = stream.peer_addr().map_err(|e| e.to_string())?;
            let hello = RankHello { job: self.job.clone(), from_rank: self.rank, to_rank: peer };
            let (head, _) = encode_frame_parts(&Envelope::new(self.key, self.addr, 0, hello), DEFAULT_MAX_FRAME)
                .map_err(|e| e.to_string())?;
            *connecting = false;
            if self.keys.wanted(at.ip()) {
                let want = self.keys.at(at).ok_or_else(|| format!("no key registered at {at}: cannot encrypt"))?;
                c.encrypt(&mut self.keys, want);
            }
            c.push_frame(head.freeze(), Bytes::new());
            Ok(())
        });
        match outcome {
            Ok(()) if self.links.handle_connected(now, peer, engine) => {
                let encrypted = self.conns[slot].as_ref().is_some_and(|c| c.secure.is_some());
                debug!(to = peer, encrypted, "connected");
                self.set_out(peer, slot);
            }
            Ok(()) => self.drop_conn(slot),
            Err(why) => {
                self.drop_conn(slot);
                self.links.handle_connect_failed(now, peer, why, engine);
            }
        }
    }

    /// Frames for `peer` go out on connection `slot` from now on, those held first.
    fn set_out(&mut self, peer: u32, slot: usize) {
        self.out[peer as usize] = Some(slot);
        let held = std::mem::take(&mut self.held[peer as usize]);
        if let Some(c) = self.conns[slot].as_mut() {
            for (head, payload) in held {
                c.push_frame(head, payload);
            }
        }
        self.mark_dirty(slot);
    }

    /// Registers a connection in a free slot.
    fn add_conn(&mut self, io: Io, rank: Option<u32>, accepted: bool) -> io::Result<usize> {
        let slot = match self.conns.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        let mut c = Conn::new(io, rank, accepted);
        let interest = match c.io {
            Io::Tcp { .. } => Interest::READABLE | Interest::WRITABLE,
            _ => Interest::READABLE,
        };
        self.poll.registry().register(c.source(), Token(slot), interest)?;
        self.conns[slot] = Some(c);
        Ok(slot)
    }

    /// Closes connection `slot` without telling anyone (an attempt abandoned).
    fn drop_conn(&mut self, slot: usize) {
        if let Some(mut c) = self.conns[slot].take() {
            let _ = self.poll.registry().deregister(c.source());
            self.shm_slots.retain(|&s| s != slot);
        }
    }

    /// Closes connection `slot`; if frames for its rank went out on it, the
    /// link machine is told (the engine stops sending and a reconnect is due).
    fn close_conn(&mut self, engine: &mut MpiEngine, now: Instant, slot: usize) {
        let Some(mut c) = self.conns[slot].take() else { return };
        let _ = self.poll.registry().deregister(c.source());
        self.shm_slots.retain(|&s| s != slot);
        debug!(rank = ?c.rank, accepted = c.accepted, "connection closed");
        let Some(r) = c.rank else { return };
        if c.setting_up() {
            if self.attempt[r as usize] == Some(slot) {
                self.attempt[r as usize] = None;
                self.links.handle_connect_failed(now, r, "closed".into(), engine);
            }
            return;
        }
        if self.heard_on[r as usize] == Some(slot) {
            self.heard_on[r as usize] = None;
            self.links.handle_inbound_closed(r);
        }
        if self.out[r as usize] == Some(slot) {
            self.out[r as usize] = None;
            self.links.handle_closed(now, r, engine);
        }
    }

    /// Time passed and input arrived: the link machine reconnects, moves on
    /// from slow attempts, or gives up.
    pub(crate) fn retry_due(&mut self, engine: &mut MpiEngine, now: Instant) -> Result<()> {
        self.links.handle_timeout(now, engine);
        self.settle(engine, now)
    }

    /// Finalize starts: peers given up on before get one more attempt now, so
    /// the engine learns whether they are gone (only failures seen while
    /// closing count as evidence).
    pub(crate) fn start_closing(&mut self, now: Instant) {
        self.links.start_closing(now);
    }

    /// The link machine's next deadline (an attempt's, or a reconnect's).
    pub(crate) fn next_retry(&self, engine: &MpiEngine) -> Option<Instant> {
        self.links.poll_timeout(engine).into_iter().chain(self.accept_again).min()
    }

    /// This job's ranks on this host, this one included, as last counted (by
    /// their shared-memory sockets; counted again as `Census` says, at most
    /// as far as matters in a large job: one more than the cores). 1 without
    /// shared memory.
    pub(crate) fn local_ranks(&mut self, now: Instant) -> u32 {
        let size = self.size();
        let Some(l) = self.local.as_ref() else { return 1 };
        if l.census.here < size {
            // Every peer linked over shared memory is here: known at once,
            // before the next count.
            if 1 + self.shm_slots.len() as u32 > l.census.here {
                let rank = |&slot: &usize| self.conns.get(slot).and_then(Option::as_ref).and_then(|c| c.rank);
                let mut peers: Vec<u32> = self.shm_slots.iter().filter_map(rank).collect();
                peers.sort_unstable();
                peers.dedup();
                let linked = (1 + peers.len() as u32).min(size);
                if let Some(l) = self.local.as_mut() {
                    l.census.at_least(linked);
                }
            }
        }
        let Some(l) = self.local.as_mut() else { return 1 };
        if l.census.due(now, size) {
            let job = &self.job;
            let (here, below) = census::count_here(size, self.rank, l.enough, |r| shm::present(process_key(job, r)));
            l.census.counted(now, here, below);
        }
        l.census.here
    }

    /// This rank's place among this host's ranks of the job: those found
    /// below it at the last count, plus the job's turn (so that two jobs on
    /// one host do not both start at the first core). `None` before the
    /// first count, and in a job too large to count them all (see
    /// `census::count_here`).
    pub(crate) fn place_here(&self) -> Option<u32> {
        Some(self.local.as_ref()?.census.below? + self.turn)
    }

    /// Whether the count of this host's ranks of the job has settled (see
    /// `Census::settled`): until then, ranks still starting are missing.
    pub(crate) fn census_settled(&self) -> bool {
        self.local.as_ref().is_some_and(|l| l.census.settled(self.size()))
    }

    /// The job's ranks.
    fn size(&self) -> u32 {
        self.heard_on.len() as u32
    }

    /// Connections to peers open now (not counting one whose hello has not
    /// named its rank yet).
    pub(crate) fn links_open(&self) -> u64 {
        self.conns.iter().flatten().filter(|c| c.rank.is_some()).count() as u64
    }

    /// Doorbells rung for shared-memory peers on the links open now.
    pub(crate) fn bells_rung(&self) -> u64 {
        let rung = |c: &Conn| if let Io::Shm(s) = &c.io { s.rung } else { 0 };
        self.conns.iter().flatten().map(rung).sum()
    }

    /// The count of bytes written after waiting for room so far (it moves
    /// when a waiting sender makes progress).
    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    /// Whether every outgoing queue is empty (all handed to the kernel).
    pub(crate) fn tx_empty(&self) -> bool {
        self.conns.iter().flatten().all(|c| !c.tx_pending())
    }

    /// Waits up to `timeout` for socket readiness and handles what is ready.
    /// Returns whether anything happened.
    /// `now`: the time when called (a wait that sleeps reads the clock again).
    pub(crate) fn poll_io(&mut self, engine: &mut MpiEngine, timeout: Option<Duration>, now: Instant) -> Result<bool> {
        let rings = self.service_shm(engine, now);
        if timeout == Some(Duration::ZERO) && !self.shm_slots.is_empty() {
            // Spinning on the rings: the sockets only now and then, and more
            // rarely while the rings keep bringing bytes, but never not at
            // all (a long stream from one peer must not starve the sockets,
            // the node's answers and writes waiting).
            let since = now.duration_since(self.last_poll);
            if since < ZERO_POLL_EVERY || (rings && since < POLL_EVERY) {
                self.settle(engine, now)?;
                return Ok(rings);
            }
        }
        if self.accept_again.is_some_and(|at| at <= now) {
            self.accept_again = None;
            self.accept_all(now);
            self.accept_shm(now);
        }
        // A ring had bytes (or closed: a reconnect may be due now): what came
        // is handled before any sleep.
        let timeout = if rings { Some(Duration::ZERO) } else { timeout };
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(true),
            Err(e) => return Err(e.into()),
        }
        let now = if timeout == Some(Duration::ZERO) { now } else { Instant::now() };
        self.last_poll = now;
        self.poll_due = now + POLL_EVERY;
        if self.events.is_empty() {
            if rings {
                self.settle(engine, now)?;
            }
            return Ok(rings);
        }
        let mut ready = std::mem::take(&mut self.ready);
        ready.clear();
        ready.extend(self.events.iter().map(Ready::of));
        for &r in &ready {
            match r.token {
                LISTENER => self.accept_all(now),
                NODE => self.node_ready(engine, now),
                SHM_LISTENER => self.accept_shm(now),
                DOORBELL => {
                    if let Some(l) = &self.local {
                        crate::shm::segment::drain_bell(l.bell.as_raw_fd());
                    }
                    self.service_shm(engine, now);
                }
                Token(slot) => match self.conns.get_mut(slot).and_then(Option::as_mut).map(|c| &mut c.io) {
                    None => {}
                    Some(Io::Tcp { connecting: true, .. }) => self.on_connect_ready(engine, now, slot),
                    Some(Io::ShmSetup(_)) => self.on_shm_setup(engine, now, slot),
                    Some(Io::Shm(s)) => {
                        s.check_closed();
                        self.read_conn(engine, slot, Wait::No, now);
                    }
                    Some(Io::Tcp { .. }) => self.on_tcp_ready(engine, slot, r, now),
                },
            }
        }

        self.ready = ready;
        self.settle(engine, now)?;
        Ok(true)
    }

    /// The node connection is ready: write what waits, hand resolve answers to
    /// the link machine. A broken node connection fails every resolve.
    fn node_ready(&mut self, engine: &mut MpiEngine, now: Instant) {
        if self.node_failed.is_some() {
            return;
        }
        let mut replies = std::mem::take(&mut self.replies);
        let res = self.node.flush().map_err(Error::from).and_then(|()| self.node.read_replies(&mut replies));
        for (id, reply) in replies.drain(..) {
            match (id, &reply) {
                (PUSH_ID, LocalReply::CheckpointWanted { request }) => {
                    self.checkpoint_wanted = self.checkpoint_wanted.max(*request);
                    continue;
                }
                // A move is asked with its cut.
                (PUSH_ID, LocalReply::MoveWanted { request }) => {
                    self.checkpoint_wanted = self.checkpoint_wanted.max(*request);
                    self.move_wanted = self.move_wanted.max(*request);
                    continue;
                }
                _ => {}
            }
            let found = node_client::resolved(reply);
            if let Some(peer) = self.resolves.remove(&id) {
                if let Ok(endpoints) = &found {
                    self.keys.learn(peer, endpoints);
                }
                self.links.handle_resolved(now, peer, found.map(addrs), engine);
            } else if let Some(rank) = self.verifies.remove(&id) {
                self.verified(engine, now, rank, found);
            }
        }
        self.replies = replies;
        if let Err(e) = res {
            self.node_lost(engine, now, e.to_string());
        }
    }

    /// The node connection failed (seen reading it, or asking it): every
    /// resolve and key check waiting for an answer fails now, and every
    /// later one at once.
    fn node_lost(&mut self, engine: &mut MpiEngine, now: Instant, why: String) {
        if self.node_failed.is_none() {
            warn!(%why, "the local node connection failed");
            let _ = self.poll.registry().deregister(&mut self.node.stream);
            self.node_failed = Some(why.clone());
        }
        for (_, peer) in std::mem::take(&mut self.resolves) {
            self.links.handle_resolved(now, peer, Err(why.clone()), engine);
        }
        for (_, rank) in std::mem::take(&mut self.verifies) {
            self.verified(engine, now, rank, Err(why.clone()));
        }
    }

    /// Asks the node for the endpoints `rank` registered: the request's id, or
    /// why the node cannot be asked (then it is lost: see `node_lost`).
    fn ask_resolve(&mut self, engine: &mut MpiEngine, now: Instant, rank: u32) -> std::result::Result<u64, String> {
        let asked = match &self.node_failed {
            Some(why) => Err(why.clone()),
            None => {
                let req = LocalRequest::ResolveKeyed { key: process_key(&self.job, rank) };
                self.node.request(req).map_err(|e| e.to_string())
            }
        };
        if let Err(why) = &asked {
            self.node_lost(engine, now, why.clone());
        }
        asked
    }

    /// Checks the key of connections claiming `rank`: asks the node for the
    /// keys it registered (once at a time per rank).
    fn verify(&mut self, engine: &mut MpiEngine, now: Instant, rank: u32) {
        if self.verifies.values().any(|&r| r == rank) {
            return;
        }
        match self.ask_resolve(engine, now, rank) {
            Ok(id) => drop(self.verifies.insert(id, rank)),
            Err(why) => self.verified(engine, now, rank, Err(why)),
        }
    }

    /// The keys `rank` registered came (or could not be had): each connection
    /// claiming it goes on if its key is one of them, and is dropped if not.
    fn verified(&mut self, engine: &mut MpiEngine, now: Instant, rank: u32, found: Result<Vec<Endpoint>, String>) {
        if let Ok(endpoints) = &found {
            self.keys.learn(rank, endpoints);
        }
        for slot in 0..self.conns.len() {
            let Some(c) = self.conns[slot].as_mut().filter(|c| c.claimed == Some(rank)) else { continue };
            let key = c.secure.as_ref().and_then(SecureChannel::remote_key);
            if key.is_some_and(|k| self.keys.vouches(rank, k)) {
                c.claimed = None;
                c.rank = Some(rank);
                if self.deliver(engine, now, slot) {
                    self.read_conn(engine, slot, Wait::No, now);
                } else {
                    self.close_conn(engine, now, slot);
                }
            } else {
                match &found {
                    Ok(_) => warn!(rank, ?key, "a connection claimed a rank with a key it did not register: dropped"),
                    Err(why) => debug!(rank, %why, "cannot check a connection's key: dropped"),
                }
                self.close_conn(engine, now, slot);
            }
        }
    }

    fn on_tcp_ready(&mut self, engine: &mut MpiEngine, slot: usize, ready: Ready, now: Instant) {
        if ready.closed {
            if let Some(c) = self.conns[slot].as_mut() {
                c.hung_up = true;
            }
        }
        if ready.readable {
            self.read_conn(engine, slot, Wait::No, now);
        }
        if ready.writable && self.conns.get(slot).is_some_and(Option::is_some) {
            self.mark_dirty(slot);
        }
    }

    fn accept_all(&mut self, now: Instant) {
        loop {
            match self.listener.accept() {
                Ok((stream, from)) => {
                    // A connection that cannot be set up is dropped (its peer
                    // dials again); the others, and the rest of the poll's
                    // events, go on.
                    let added = conn::configure(&stream, DIRECT_MAX, self.failure_timeout)
                        .and_then(|()| self.add_conn(Io::Tcp { stream, connecting: false }, None, true));
                    match added {
                        Ok(slot) => {
                            if let Some(c) = self.conns[slot].as_mut() {
                                c.sniff = Some(self.keys.wanted(from.ip()));
                            }
                        }
                        Err(e) => warn!(%e, %from, "cannot take a connection: dropped"),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    warn!(%e, "accept failed: tried again shortly");
                    self.accept_again = Some(now + ACCEPT_RETRY);
                    return;
                }
            }
        }
    }

    /// Reads rank `from`'s connection directly, without `epoll`: [`Wait::No`] to
    /// spin on it, [`Wait::Block`] to sleep in `recv` until its next bytes (at
    /// most [`DIRECT_MAX`]). `None` when `from` has sent nothing yet, or when
    /// bytes wait to be written: then only the poll loop can make progress.
    /// When the kernel was last asked about every socket [`POLL_EVERY`] ago or
    /// longer, it is asked first (without waiting), and this returns if that
    /// found anything. Otherwise, whether anything happened.
    pub(crate) fn read_direct(
        &mut self,
        engine: &mut MpiEngine,
        from: u32,
        wait: Wait,
        now: Instant,
    ) -> Result<Option<bool>> {
        let Some(slot) = self.heard_on.get(from as usize).copied().flatten() else { return Ok(None) };
        // A ring cannot be slept on, and while links are being set up the
        // answers come as events of the poll loop: it sleeps then.
        if wait == Wait::Block && (self.shm_slots.contains(&slot) || !self.links.is_settled()) {
            return Ok(None);
        }
        // Bytes waiting to be written move only on the poll loop's writable
        // events: with any queued, reading one socket directly would starve them
        // (a rendezvous exchange both ways then crawled, a chunk per sleep).
        if !self.tx_empty() {
            return Ok(None);
        }
        if now >= self.poll_due && self.poll_io(engine, Some(Duration::ZERO), now)? {
            return Ok(Some(true));
        }
        if wait == Wait::Block {
            // Asleep in `recv`, this rank holds no core: its shared-memory
            // peers are told so, as before a sleep in `epoll`.
            self.say_core(None);
        }
        let got = self.read_conn(engine, slot, wait, now);
        self.settle(engine, now)?;
        Ok(Some(got))
    }

    /// Reads everything available on connection `slot` (the first read waiting
    /// as `wait` says) and hands whole frames to the engine; closes it at end of
    /// stream or on bad input. Whether anything happened.
    fn read_conn(&mut self, engine: &mut MpiEngine, slot: usize, mut wait: Wait, now: Instant) -> bool {
        let mut got = false;
        let keep = loop {
            let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else { return got };
            if conn.claimed.is_some() && conn.dec.buffered() >= CLAIM_MAX {
                break true; // read on once its key is vouched for
            }
            let hung_up = conn.hung_up;
            match conn.recv(wait, &mut self.keys) {
                Ok((0, _)) => break false,
                Ok((n, room)) => {
                    got = true;
                    wait = Wait::No;
                    if !self.deliver(engine, now, slot) {
                        break false;
                    }
                    // A short read drained the socket: readiness is edge-triggered,
                    // so later bytes raise a new event; skip the EAGAIN read.
                    // Not once the peer hung up: its end of stream (or error)
                    // came with the bytes and raises no event of its own.
                    if n < room && !hung_up {
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
                Err(e) => {
                    if e.kind() == io::ErrorKind::InvalidData {
                        warn!(%e, "dropping a connection");
                    }
                    break false;
                }
            }
        };
        if !keep {
            self.close_conn(engine, now, slot);
            return true;
        }
        // A handshake answer may be waiting to go out.
        if self.conns[slot].as_ref().is_some_and(Conn::tx_pending) {
            self.mark_dirty(slot);
        }
        got
    }

    /// Hands the whole frames buffered on `slot` to the engine (asking for a
    /// key check when an encrypted hello needs one); false to drop it.
    fn deliver(&mut self, engine: &mut MpiEngine, now: Instant, slot: usize) -> bool {
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else { return false };
        match decode_frames(conn, engine, now, (&self.job, self.rank), &self.keys) {
            Decoded::Drop => return false,
            Decoded::Verify(rank) => self.verify(engine, now, rank),
            Decoded::Keep => {}
        }
        if let Some(r) = self.conns.get(slot).and_then(Option::as_ref).and_then(|c| c.rank) {
            self.heard_on[r as usize] = Some(slot);
            // The peer's own connection, not the one our attempt opened.
            let theirs = self.attempt[r as usize] != Some(slot);
            self.links.handle_heard(now, r, theirs, engine);
            self.answer_on_one(engine, now, r, slot);
        }
        true
    }

    /// Frames from `r` came on `slot` while ours go out on another connection:
    /// both sides opened one at once. Ours move to `slot` when the link
    /// machine says (see [`Links::move_to_inbound`]) and nothing is left to
    /// write on the old one, which is then closed: nothing of ours but a
    /// cumulative acknowledgement (taken in any order) can be in flight on
    /// it, and `r` sends on its own, so its end of stream only wakes `r` if
    /// it sleeps reading it. Not while either connection is still being set
    /// up (an encrypted one's handshake holds frames of its own), nor onto a
    /// connection the peer already closed. Over TCP, two connections cost a
    /// segment a message more: the acknowledgement of a request no longer
    /// rides on its reply (8 B ping-pong over loopback, 8.7 us against 5.4).
    fn answer_on_one(&mut self, engine: &mut MpiEngine, now: Instant, r: u32, slot: usize) {
        let Some(old) = self.out[r as usize].filter(|&o| o != slot) else { return };
        let (Some(Some(new)), Some(Some(ours))) = (self.conns.get(slot), self.conns.get(old)) else { return };
        let alike = matches!((&new.io, &ours.io), (Io::Tcp { .. }, Io::Tcp { .. }) | (Io::Shm(_), Io::Shm(_)));
        let set_up = |c: &Conn| !c.setting_up() && c.secure.as_ref().is_none_or(SecureChannel::is_open);
        let both_ready = set_up(new) && set_up(ours) && !new.hung_up;
        if new.accepted
            && !ours.accepted
            && alike
            && both_ready
            && !ours.tx_pending()
            && self.links.move_to_inbound(r, engine)
        {
            debug!(to = r, "both sides opened a connection: answering on the peer's");
            self.out[r as usize] = Some(slot);
            self.close_conn(engine, now, old);
        }
    }

    /// The newest checkpoint request the node sent this rank (0: none yet).
    pub(crate) fn checkpoint_wanted(&self) -> u64 {
        self.checkpoint_wanted
    }

    /// The newest request the node sent to move this rank alone (0: none):
    /// the rank moves after the first cut answering it (see `ckpt`).
    pub(crate) fn move_wanted(&self) -> u64 {
        self.move_wanted
    }

    /// Tells the node of a checkpoint or a recovery, without waiting (best
    /// effort: a node that cannot be told only misses it in its status).
    pub(crate) fn report(&mut self, req: LocalRequest) {
        if self.node_failed.is_none() {
            if let Err(e) = self.node.request(req) {
                debug!(%e, "cannot report to the node");
            }
        }
    }

    /// Tells the node we are gone (best effort).
    pub(crate) fn unregister(&mut self) {
        if self.node_failed.is_none() {
            let _ = self.node.unregister(self.key);
        }
    }
}

/// What one poll event says of its token.
#[derive(Debug, Clone, Copy)]
struct Ready {
    token: Token,
    /// Bytes to read, or an error to collect by reading.
    readable: bool,
    writable: bool,
    /// The peer closed its end, or the connection failed.
    closed: bool,
}

impl Ready {
    fn of(e: &mio::event::Event) -> Ready {
        Ready {
            token: e.token(),
            readable: e.is_readable() || e.is_error(),
            writable: e.is_writable(),
            closed: e.is_read_closed() || e.is_error(),
        }
    }
}

/// The addresses of resolved endpoints.
fn addrs(endpoints: Vec<Endpoint>) -> Vec<NodeAddr> {
    endpoints.into_iter().map(|e| e.addr).collect()
}
