//! Link state: how one rank reaches each of its peers, as a sans-IO machine.
//!
//! The [`MpiEngine`] numbers, acknowledges and resends frames; [`Links`] decides
//! when a peer is reachable, when to look its address up again, when to connect,
//! how long to back off, and when to give up. The driver owns the sockets and the
//! node connection and only does what [`Links::poll_action`] asks:
//!
//! - [`LinkAction::Resolve`]: ask the local node for the addresses registered
//!   under the peer's process key; the answer comes back as
//!   [`Links::handle_resolved`] (never wait for it inside progress);
//! - [`LinkAction::Connect`]: start a connection to one address, over shared
//!   memory or TCP ([`Path`]); the outcome comes back as
//!   [`Links::handle_connected`] or [`Links::handle_connect_failed`];
//! - [`LinkAction::Abort`]: give the attempt in progress up (it timed out, or
//!   the peer was heard on its own connection): close the connection being
//!   made, or forget the resolve asked (its answer, if it ever comes, is not
//!   passed on);
//! - [`LinkAction::UseInbound`]: send on the connection the peer opened to us;
//! - [`LinkAction::Failed`]: the first attempt failed: drop the frames held for
//!   the peer (the engine, told the link is down, resends them after a reconnect);
//! - [`LinkAction::GiveUp`]: the peer stayed unreachable with frames waiting for
//!   [`LinkConfig::unreachable_after`]: the rank cannot go on.
//!
//! Other inputs: [`Links::on_transmit`] (the engine has a frame for a peer),
//! [`Links::handle_closed`] (the connection frames went out on broke),
//! [`Links::handle_heard`] / [`Links::handle_inbound_closed`] (a connection the
//! peer's frames arrive on exists / closed), [`Links::start_closing`] and
//! [`Links::handle_timeout`]. Timers (an attempt's deadline, a reconnect's
//! back-off) sit in a [`TimerTable`] per link; [`Links::poll_timeout`] is their
//! minimum.
//!
//! # Rules
//! - **Lazy.** A link opens when the engine first has a frame for the peer; while
//!   the first attempt runs its frames wait in the driver ([`Route::Hold`]).
//! - **One connection per pair.** A peer that already sends to us is answered on
//!   its connection ([`LinkAction::UseInbound`]) instead of a second one. When
//!   both opened one at once, the higher rank moves to the lower rank's
//!   ([`Links::move_to_inbound`]), so that a reply carries TCP's
//!   acknowledgement of the request.
//! - **Newest registration first.** A resolve may return several addresses (a
//!   moved rank's old one may linger); they are tried last to first, each within
//!   [`LinkConfig::connect_timeout`].
//! - **Shared memory on one host, TCP otherwise.** An address on this rank's
//!   own host ([`LinkConfig::same_host`]) is tried over shared memory first and,
//!   if that fails for any reason, over TCP. The path is chosen afresh at every
//!   attempt, so a peer that moves to another host is reached over TCP after
//!   the break, and over shared memory again once it is back.
//! - **Back-off.** A failed link is retried after a [`Backoff`] doubling from
//!   [`LinkConfig::min_backoff`] to [`LinkConfig::max_backoff`]; a link that broke
//!   is retried at once (the peer may have moved). A peer heard on its own
//!   connection ends the back-off, or an attempt under way, at once: its
//!   connection carries the link ([`Links::handle_heard`]).
//! - **Only while wanted.** A down link is retried while the engine wants it
//!   ([`MpiEngine::wants_link`]: frames unacknowledged, or acknowledgements and
//!   credit the peer may lack).
//! - **Ack-only give-up.** A retry that fails while only acknowledgements are
//!   owed stops the retries until the peer is heard from again, the engine has
//!   frames for it, or closing starts: the peer most likely exited.
//! - **Closing.** [`Links::start_closing`] gives every peer one more attempt at
//!   once, and failures then are evidence for the engine's closing rules
//!   ([`MpiEngine::handle_unreachable`]); a closing rank never gives up.

use std::collections::{BTreeSet, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::MpiEngine;
use crate::machine::NodeAddr;
use crate::time::{Backoff, TimerKey, TimerTable};

/// Tunables of [`Links`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkConfig {
    /// First back-off after a failure (default 1 ms).
    pub min_backoff: Duration,
    /// Longest back-off (default 200 ms).
    pub max_backoff: Duration,
    /// How long one connection attempt may take (default 2 s).
    pub connect_timeout: Duration,
    /// How long the node may take to answer a resolve (default 30 s).
    pub resolve_timeout: Duration,
    /// How long a peer with frames waiting may stay unreachable before the rank
    /// gives up (default 60 s; never while closing).
    pub unreachable_after: Duration,
    /// The address of this rank's host, when shared memory may be used: peers
    /// registered there are on this host (default: none, TCP only).
    pub same_host: Option<IpAddr>,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            min_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(200),
            connect_timeout: Duration::from_secs(2),
            resolve_timeout: Duration::from_secs(30),
            unreachable_after: Duration::from_secs(60),
            same_host: None,
        }
    }
}

/// What the driver is asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum LinkAction {
    /// Look up the addresses registered under `peer`'s process key; answer with
    /// [`Links::handle_resolved`].
    Resolve { peer: u32 },
    /// Open a connection to `addr` for `peer` over `path` (its hello first);
    /// answer with [`Links::handle_connected`] or [`Links::handle_connect_failed`].
    Connect { peer: u32, addr: NodeAddr, path: Path },
    /// Abandon the attempt to reach `peer` in progress (it timed out, or the
    /// peer was heard on its own connection): the connection being made, or
    /// the resolve asked.
    Abort { peer: u32 },
    /// Send `peer`'s frames on the connection its frames arrive on.
    UseInbound { peer: u32 },
    /// The first attempt to reach `peer` failed: drop the frames held for it.
    Failed { peer: u32 },
    /// `peer` stayed unreachable too long with frames waiting.
    GiveUp { peer: u32, why: String },
}

/// How a link carries frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Path {
    /// Rings in memory shared by two ranks of one host.
    Shm,
    /// A TCP connection.
    Tcp,
}

/// Where a frame the engine emitted goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Route {
    /// A link is open: write it.
    Send,
    /// The first attempt runs: keep it, in order, until
    /// [`Links::handle_connected`] or [`LinkAction::UseInbound`] (then write)
    /// or [`LinkAction::Failed`] (drop).
    Hold,
    /// The link is down and the engine knows: drop it (the engine resends).
    Drop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    /// The attempt in progress (resolve or connect) times out.
    Attempt,
    /// The back-off after a failure ends.
    Retry,
}

impl TimerKey for Timer {
    const COUNT: usize = 2;
    const ALL: &'static [Timer] = &[Timer::Attempt, Timer::Retry];
    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Attempt {
    None,
    Resolving,
    /// Trying `addrs[next]` over `path`; the newest registration is last,
    /// tried first.
    Connecting {
        addrs: Vec<NodeAddr>,
        next: usize,
        path: Path,
    },
}

/// One peer's link.
#[derive(Debug, Clone)]
struct Link {
    /// Frames go out on a connection.
    open: bool,
    attempt: Attempt,
    /// The peer's frames arrive on a connection we may answer on.
    inbound: bool,
    /// How the open link (or the latest one) carries frames.
    path: Path,
    /// Whether the engine believes frames for the peer can be sent.
    engine_up: bool,
    backoff: Backoff,
    down_since: Option<Instant>,
    /// The peer was heard while this link was open: it works (until then a
    /// connection that closes is a failed attempt, not a break).
    heard_while_open: bool,
    /// A retry while only acknowledgements were owed failed: no more until the
    /// peer is heard from, the engine has frames for it, or closing starts.
    ack_only_gave_up: bool,
    timers: TimerTable<Timer>,
    /// Why the latest attempt failed.
    why: String,
}

impl Link {
    fn new() -> Self {
        Link {
            open: false,
            attempt: Attempt::None,
            inbound: false,
            path: Path::Tcp,
            engine_up: true,
            backoff: Backoff::default(),
            down_since: None,
            heard_while_open: false,
            ack_only_gave_up: false,
            timers: TimerTable::default(),
            why: String::new(),
        }
    }

    /// Nothing to watch: open, or idle with the engine up.
    fn settled(&self) -> bool {
        self.engine_up && self.attempt == Attempt::None
    }
}

/// The links of one rank to every peer.
#[derive(Debug, Clone)]
pub struct Links {
    config: LinkConfig,
    rank: u32,
    links: Vec<Link>,
    /// Peers whose link is not settled (down, or an attempt running): the only
    /// ones timers and retries concern.
    unsettled: BTreeSet<u32>,
    closing: bool,
    actions: VecDeque<LinkAction>,
}

impl Links {
    /// The links of rank `rank` in a world of `size`; none is open yet.
    pub fn new(config: LinkConfig, rank: u32, size: u32) -> Self {
        Links {
            config,
            rank,
            links: (0..size).map(|_| Link::new()).collect(),
            unsettled: BTreeSet::new(),
            closing: false,
            actions: VecDeque::new(),
        }
    }

    // ----- getters

    /// Whether frames for `peer` go out on a connection now.
    pub fn is_open(&self, peer: u32) -> bool {
        self.links.get(peer as usize).is_some_and(|l| l.open)
    }

    /// Whether the engine was told `peer`'s link is down and not yet back.
    pub fn is_down(&self, peer: u32) -> bool {
        self.links.get(peer as usize).is_some_and(|l| !l.engine_up)
    }

    /// Whether an attempt to reach `peer` (resolve or connect) is in progress.
    pub fn is_attempting(&self, peer: u32) -> bool {
        self.links.get(peer as usize).is_some_and(|l| l.attempt != Attempt::None)
    }

    /// How `peer`'s open link (or its latest one) carries frames.
    pub fn path(&self, peer: u32) -> Option<Path> {
        self.links.get(peer as usize).map(|l| l.path)
    }

    /// The back-off the next failure of `peer` would extend.
    pub fn backoff(&self, peer: u32) -> Duration {
        self.links.get(peer as usize).map_or(Duration::ZERO, |l| l.backoff.wait())
    }

    /// Whether every link is settled: none down, no attempt running (then no
    /// answer from the node or a listener is awaited).
    pub fn is_settled(&self) -> bool {
        self.unsettled.is_empty()
    }

    /// Whether [`Links::start_closing`] was called.
    pub fn is_closing(&self) -> bool {
        self.closing
    }

    // ----- inputs

    /// The engine emitted a frame for `peer`: where it goes. Starts the first
    /// attempt if no link is open.
    pub fn on_transmit(&mut self, now: Instant, peer: u32, engine: &mut MpiEngine) -> Route {
        let Some(l) = self.links.get(peer as usize) else { return Route::Drop };
        if l.open {
            return Route::Send;
        }
        if !l.engine_up {
            return Route::Drop;
        }
        if l.attempt == Attempt::None {
            self.start_attempt(now, peer, engine);
        }
        if self.links[peer as usize].open { Route::Send } else { Route::Hold }
    }

    /// The node answered [`LinkAction::Resolve`] for `peer`: every address
    /// registered under its key (oldest first), or why it could not tell. An
    /// answer nobody waits for any more is ignored.
    pub fn handle_resolved(
        &mut self,
        now: Instant,
        peer: u32,
        answer: Result<Vec<NodeAddr>, String>,
        engine: &mut MpiEngine,
    ) {
        if self.links.get(peer as usize).is_none_or(|l| l.attempt != Attempt::Resolving) {
            return;
        }
        match answer {
            Ok(addrs) if !addrs.is_empty() => {
                let next = addrs.len() - 1;
                let (addr, path) = (addrs[next], self.first_path(addrs[next]));
                let l = &mut self.links[peer as usize];
                l.attempt = Attempt::Connecting { addrs, next, path };
                l.timers.set(Timer::Attempt, now + self.config.connect_timeout);
                self.actions.push_back(LinkAction::Connect { peer, addr, path });
            }
            Ok(_) => self.fail(now, peer, "not registered (yet)".into(), engine),
            Err(why) => self.fail(now, peer, why, engine),
        }
    }

    /// The connection [`LinkAction::Connect`] asked for is established. False
    /// when no attempt to `peer` was in progress: the driver closes it.
    pub fn handle_connected(&mut self, now: Instant, peer: u32, engine: &mut MpiEngine) -> bool {
        let Some(l) = self.links.get_mut(peer as usize) else { return false };
        let Attempt::Connecting { path, .. } = l.attempt else { return false };
        l.path = path;
        self.opened(now, peer, engine);
        true
    }

    /// The connection attempt to `peer` failed (`why`): the same address over
    /// TCP if shared memory failed, else the next address, or the attempt
    /// fails. Ignored when no attempt was in progress.
    pub fn handle_connect_failed(&mut self, now: Instant, peer: u32, why: String, engine: &mut MpiEngine) {
        let same_host = self.config.same_host;
        let Some(l) = self.links.get_mut(peer as usize) else { return };
        let Attempt::Connecting { addrs, next, path } = &mut l.attempt else { return };
        let why = format!("{} ({path:?}): {why}", addrs[*next]);
        if *path == Path::Shm {
            *path = Path::Tcp;
        } else if *next == 0 {
            self.fail(now, peer, why, engine);
            return;
        } else {
            *next -= 1;
            *path = first_path(same_host, addrs[*next]);
        }
        let (addr, path) = (addrs[*next], *path);
        l.why = why;
        l.timers.set(Timer::Attempt, now + self.config.connect_timeout);
        self.actions.push_back(LinkAction::Connect { peer, addr, path });
    }

    /// The connection `peer`'s frames went out on broke: the engine stops
    /// sending, and a reconnect is due at once (the peer may have moved).
    /// A connection that closes before the peer was heard on the open link
    /// (it took the connection, then refused the link: a key it would not
    /// vouch for, encryption it requires) failed instead: the reconnect
    /// backs off, and frames that wait [`LinkConfig::unreachable_after`]
    /// give up, as after refused connects.
    pub fn handle_closed(&mut self, now: Instant, peer: u32, engine: &mut MpiEngine) {
        let Some(l) = self.links.get_mut(peer as usize) else { return };
        if !l.open {
            return;
        }
        l.open = false;
        if std::mem::take(&mut l.heard_while_open) {
            l.backoff.reset();
            l.down_since = None;
            self.mark_down(now, peer, engine);
            self.links[peer as usize].timers.set(Timer::Retry, now);
            return;
        }
        l.why = "the connection closed before the peer said anything on it".into();
        self.mark_down(now, peer, engine);
        self.give_up_if_too_long(now, peer, engine);
    }

    /// Frames from `peer` arrived on a connection (ours, or its own:
    /// `theirs`): we may answer on it, and it is worth reconnecting to for
    /// acknowledgements again; an open link to it works, and a link not open
    /// takes the peer's own connection at once.
    pub fn handle_heard(&mut self, now: Instant, peer: u32, theirs: bool, engine: &mut MpiEngine) {
        let Some(l) = self.links.get_mut(peer as usize) else { return };
        l.inbound = true;
        l.ack_only_gave_up = false;
        if l.open {
            l.heard_while_open = true;
            l.backoff.reset();
            l.down_since = None;
            return;
        }
        // An attempt still under way (its resolve or connect not yet
        // answered) or waiting out its back-off gives way to this connection,
        // and the frames held for the peer go out on it now, not at the
        // peer's next look: a rank that finished a barrier on the peer's
        // message could otherwise return with its own still held, leaving
        // the peer in the barrier until this rank's next MPI call.
        let attempting = l.attempt != Attempt::None;
        if theirs && (attempting || l.timers.get(Timer::Retry).is_some()) {
            if attempting {
                self.actions.push_back(LinkAction::Abort { peer });
            }
            self.start_attempt(now, peer, engine);
        }
    }

    /// Frames from `peer` arrived on the connection `peer` opened while
    /// ours to it carries our frames (both sides opened one at once): whether
    /// to move ours to the peer's connection now, so that one connection
    /// carries both ways. The lower rank's connection is the one kept, so
    /// only the higher rank moves, and only with nothing of ours
    /// unacknowledged: nothing still in flight on the old connection can
    /// then arrive after what goes on the new one (the engine drops a frame
    /// ahead of its turn, to be resent after a break that never comes).
    pub fn move_to_inbound(&self, peer: u32, engine: &MpiEngine) -> bool {
        peer < self.rank && engine.unacked_len(peer) == 0 && self.links.get(peer as usize).is_some_and(|l| l.open)
    }

    /// The connection `peer`'s frames arrived on closed.
    pub fn handle_inbound_closed(&mut self, peer: u32) {
        if let Some(l) = self.links.get_mut(peer as usize) {
            l.inbound = false;
        }
    }

    /// Finalize starts: peers given up on get one more attempt now, and a
    /// closing rank never gives up.
    pub fn start_closing(&mut self, now: Instant) {
        self.closing = true;
        for l in &mut self.links {
            l.ack_only_gave_up = false;
            if l.timers.get(Timer::Retry).is_some_and(|t| t > now) {
                l.timers.set(Timer::Retry, now);
            }
        }
    }

    /// Time passed: attempts that took too long move on, and down links the
    /// engine wants are retried once their back-off ended. Call it after every
    /// round of input (the engine's wishes change with it); spurious calls are
    /// harmless.
    pub fn handle_timeout(&mut self, now: Instant, engine: &mut MpiEngine) {
        if self.unsettled.is_empty() {
            return;
        }
        let peers: Vec<u32> = self.unsettled.iter().copied().collect();
        for peer in peers {
            let l = &mut self.links[peer as usize];
            if l.timers.get(Timer::Attempt).is_some_and(|t| t <= now) {
                l.timers.clear(Timer::Attempt);
                let resolving = l.attempt == Attempt::Resolving;
                let connecting = matches!(l.attempt, Attempt::Connecting { .. });
                if resolving {
                    self.actions.push_back(LinkAction::Abort { peer });
                    self.fail(now, peer, "the node did not answer in time".into(), engine);
                } else if connecting {
                    self.actions.push_back(LinkAction::Abort { peer });
                    self.handle_connect_failed(now, peer, "timed out".into(), engine);
                }
            }
            if self.wants_retry(peer, engine)
                && self.links[peer as usize].timers.get(Timer::Retry).is_none_or(|t| t <= now)
            {
                self.start_attempt(now, peer, engine);
            }
        }
    }

    // ----- outputs

    /// The next thing to do, or `None` once drained.
    pub fn poll_action(&mut self) -> Option<LinkAction> {
        self.actions.pop_front()
    }

    /// Whether [`Links::poll_action`] has anything (a check cheaper than the
    /// call when, as almost always, nothing is to do).
    pub fn has_action(&self) -> bool {
        !self.actions.is_empty()
    }

    /// When [`Links::handle_timeout`] should next be called: the earliest
    /// attempt deadline, or end of a back-off the engine waits for.
    pub fn poll_timeout(&self, engine: &MpiEngine) -> Option<Instant> {
        self.unsettled
            .iter()
            .filter_map(|&peer| {
                let l = &self.links[peer as usize];
                let retry = l.timers.get(Timer::Retry).filter(|_| self.wants_retry(peer, engine));
                [l.timers.get(Timer::Attempt), retry].into_iter().flatten().min()
            })
            .min()
    }

    // ----- internals

    /// The path tried first to reach `addr`.
    fn first_path(&self, addr: NodeAddr) -> Path {
        first_path(self.config.same_host, addr)
    }

    /// Whether `peer` is down and should be reconnected now or later: the engine
    /// wants the link, and it carries frames or we have not given up on it.
    fn wants_retry(&self, peer: u32, engine: &MpiEngine) -> bool {
        let l = &self.links[peer as usize];
        !l.engine_up
            && !l.open
            && l.attempt == Attempt::None
            && engine.wants_link(peer)
            && (!l.ack_only_gave_up || engine.unacked_len(peer) > 0)
    }

    fn settle(&mut self, peer: u32) {
        if self.links[peer as usize].settled() {
            self.unsettled.remove(&peer);
        } else {
            self.unsettled.insert(peer);
        }
    }

    fn start_attempt(&mut self, now: Instant, peer: u32, engine: &mut MpiEngine) {
        let l = &mut self.links[peer as usize];
        l.timers.clear(Timer::Retry);
        if l.inbound {
            self.actions.push_back(LinkAction::UseInbound { peer });
            self.opened(now, peer, engine);
            return;
        }
        l.attempt = Attempt::Resolving;
        l.timers.set(Timer::Attempt, now + self.config.resolve_timeout);
        self.unsettled.insert(peer);
        self.actions.push_back(LinkAction::Resolve { peer });
    }

    /// A link to `peer` is open: a down engine learns it is back and resends.
    fn opened(&mut self, _now: Instant, peer: u32, engine: &mut MpiEngine) {
        let l = &mut self.links[peer as usize];
        l.open = true;
        l.attempt = Attempt::None;
        l.timers.clear(Timer::Attempt);
        l.timers.clear(Timer::Retry);
        // The back-off and the time down end once the peer is heard on it
        // (`handle_heard`): a peer that takes connections and then refuses
        // the link must not be redialled at once forever.
        l.heard_while_open = l.inbound;
        if l.inbound {
            l.backoff.reset();
            l.down_since = None;
        }
        l.ack_only_gave_up = false;
        if !l.engine_up {
            l.engine_up = true;
            // Invariant: links exist only for ranks of the engine's world, and
            // never for the rank itself (the engine sends nothing to itself).
            engine.handle_reconnected(peer).expect("valid peer");
        }
        self.settle(peer);
    }

    /// The attempt to reach `peer` failed.
    fn fail(&mut self, now: Instant, peer: u32, why: String, engine: &mut MpiEngine) {
        let l = &mut self.links[peer as usize];
        l.attempt = Attempt::None;
        l.timers.clear(Timer::Attempt);
        l.why = why;
        // While closing this is evidence the peer left (the engine decides what
        // it proves).
        engine.handle_unreachable(now, peer);
        if l.engine_up {
            // The first attempt: the frames held for it are dropped; the
            // engine resends them after a reconnect.
            self.actions.push_back(LinkAction::Failed { peer });
            self.mark_down(now, peer, engine);
            return;
        }
        if engine.unacked_len(peer) == 0 {
            // Only acknowledgements are owed: the peer most likely exited.
            // Wait until it is heard from again.
            // The retry timer stays due, so that frames for the peer, once
            // there, are tried at once.
            l.ack_only_gave_up = true;
            l.timers.set(Timer::Retry, now);
            self.settle(peer);
            return;
        }
        self.give_up_if_too_long(now, peer, engine);
        self.mark_down(now, peer, engine);
    }

    /// Frames for `peer` waited too long for a link: the rank gives up (never
    /// while closing).
    fn give_up_if_too_long(&mut self, now: Instant, peer: u32, engine: &MpiEngine) {
        let l = &self.links[peer as usize];
        let since = l.down_since.unwrap_or(now);
        let waiting = engine.unacked_len(peer) > 0;
        if waiting && !self.closing && now.saturating_duration_since(since) > self.config.unreachable_after {
            self.actions.push_back(LinkAction::GiveUp { peer, why: l.why.clone() });
        }
    }

    /// The engine stops sending to `peer` until a reconnect, which waits for
    /// the back-off.
    fn mark_down(&mut self, now: Instant, peer: u32, engine: &mut MpiEngine) {
        let l = &mut self.links[peer as usize];
        if l.engine_up {
            l.engine_up = false;
            // Invariant: as in `opened`.
            engine.handle_disconnected(peer).expect("valid peer");
        }
        let wait = l.backoff.fail(self.config.min_backoff, self.config.max_backoff);
        l.timers.set(Timer::Retry, now + wait);
        l.down_since.get_or_insert(now);
        self.settle(peer);
    }

    /// This rank's own number (links to it never open).
    pub fn rank(&self) -> u32 {
        self.rank
    }
}

/// Shared memory for an address on this host (when allowed), else TCP.
fn first_path(same_host: Option<IpAddr>, addr: NodeAddr) -> Path {
    if same_host == Some(addr.0.ip()) { Path::Shm } else { Path::Tcp }
}

#[cfg(test)]
mod tests;
