//! The Chord node: state, the `Machine` impl, timers, requests, join, failure and leave.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use super::ChordConfig;
use super::finger::FingerTable;
use super::lookup::Purpose;
use super::msg::{ChordMsg, Peer, Step};
use super::registry::Registry;
use super::requests::{NoAnswer, Outstanding, Waiting};
use crate::id::Id;
use crate::machine::{Action, Machine, NodeAddr};
use crate::overlay::{CommandError, IdMismatch, OverlayCommand, OverlayError, OverlayEvent};
use crate::time::{TimerKey, TimerTable};
use crate::wire::Envelope;

/// Consecutive timeouts after which the successor or predecessor counts as failed.
pub(super) const STRIKES: u8 = 2;
/// Most peers remembered for a rejoin.
pub(super) const MAX_REJOIN: usize = 16;
/// Most nodes remembered as counting on this one (see `ChordNode::dependents`).
pub(super) const MAX_DEPENDENTS: usize = 16;

/// The node's timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timer {
    /// Ask the successor for its predecessor, then notify it.
    Stabilize,
    /// Refresh the next finger.
    FixFingers,
    /// Ping the predecessor.
    CheckPredecessor,
    /// The earliest outstanding request deadline.
    Requests,
    /// Re-register this node's own registrations.
    Refresh,
    /// Drop expired stored registrations.
    Expire,
    /// Next round of join attempts.
    Join,
}

impl TimerKey for Timer {
    const COUNT: usize = 7;
    const ALL: &'static [Timer] = &[
        Timer::Stabilize,
        Timer::FixFingers,
        Timer::CheckPredecessor,
        Timer::Requests,
        Timer::Refresh,
        Timer::Expire,
        Timer::Join,
    ];
    fn index(self) -> usize {
        self as usize
    }
}

/// Where the node stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Phase {
    /// Looking for its place through the bootstrap list.
    Joining {
        /// Index of the contact being tried.
        contact: usize,
        /// Wait before the next round once every contact failed.
        backoff: Duration,
        /// `Disconnected` was already reported for this episode.
        reported: bool,
    },
    /// Part of a ring (possibly alone).
    Joined,
    /// Left gracefully; the node is inert.
    Left,
}

/// Who a sent message is for, in the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Traffic {
    /// Keeping the ring (stabilize, fingers, pings, replication, refreshes, join, leave).
    Maintenance,
    /// Serving a command of the application (lookups, queries, first registrations).
    User,
    /// Answering a peer's request.
    Reply,
}

/// Counters, for benchmarks and checkers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChordStats {
    /// Messages sent in all.
    pub sent: u64,
    /// Messages sent, by [`ChordMsg::kind`].
    pub sent_by_kind: [u64; ChordMsg::KINDS],
    /// Messages originated to keep the ring (stabilize, notify, fingers, pings,
    /// replication, refreshes, join, leave).
    pub maintenance_sent: u64,
    /// Messages originated for application commands.
    pub user_sent: u64,
    /// Replies to peers' requests.
    pub replies_sent: u64,
    /// Messages received.
    pub received: u64,
    /// Messages dropped: nonsensical in the current state, unknown request id, bad content.
    pub dropped: u64,
    /// Requests that got no answer in time or could not be sent.
    pub request_failures: u64,
    /// Application lookups answered with an owner.
    pub lookups_ok: u64,
    /// Application lookups that failed.
    pub lookups_failed: u64,
    /// Sum of the hops of the successful application lookups.
    pub lookup_hops: u64,
    /// Owner checks sent by lookups and queries (one round trip each, not hops;
    /// see `owner_check`).
    pub owner_checks: u64,
}

/// A Chord node as a sans-IO machine.
///
/// It composes the state of each concern: the ring itself (phase, predecessor,
/// successor list, strikes, peers to rejoin through, dependents) here; the finger
/// table with its fix-fingers pass (`FingerTable`), the stored and own
/// registrations (`Registry`) and the outstanding requests (`Outstanding`) in
/// types of their own, which keep their fields private and their own invariants.
#[derive(Debug)]
pub struct ChordNode {
    pub(super) cfg: ChordConfig,
    pub(super) me: Peer,
    /// Contacts to join through, own address removed.
    pub(super) bootstrap: Vec<NodeAddr>,
    /// Peers known when every contact seemed lost, tried after the bootstrap list
    /// (and, by a node without one, to merge back from a ring of one). Usually empty.
    pub(super) rejoin: Vec<NodeAddr>,
    /// Wait before the next merge attempt of a node alone with `rejoin` contacts.
    pub(super) merge_backoff: Duration,
    pub(super) phase: Phase,
    pub(super) pred: Option<Peer>,
    /// Successor list, nearest first, without this node. Empty while joined: alone.
    pub(super) succs: Vec<Peer>,
    /// The finger table and its fix-fingers pass.
    pub(super) fingers: FingerTable,
    pub(super) stabilize_busy: bool,
    pub(super) ping_busy: bool,
    /// Nodes that recently counted on this node as their successor without being
    /// its predecessor: joiners it answered "I am your successor", and notifiers it
    /// did not adopt (their view is behind). A graceful leave must hand them on
    /// too, or a node whose only live contact leaves is stranded. (peer, forget after).
    pub(super) dependents: Vec<(Peer, Instant)>,
    /// Consecutive timeouts of the successor and of the predecessor.
    pub(super) succ_strikes: u8,
    pub(super) pred_strikes: u8,
    /// Outstanding requests.
    pub(super) requests: Outstanding,
    pub(super) timers: TimerTable<Timer>,
    pub(super) actions: VecDeque<Action<ChordMsg, OverlayEvent>>,
    /// Stored and own registrations.
    pub(super) registry: Registry,
    pub(super) rng: Pcg64Mcg,
    pub(super) stats: ChordStats,
}

impl ChordNode {
    /// A node listening at `addr` (its id is `addr.id()`). With no bootstrap contact
    /// other than itself it creates a ring alone and reports `Joined` at once;
    /// otherwise it starts joining through `bootstrap`, in order. Drain
    /// [`Machine::poll_action`] after construction as after any input.
    pub fn new(config: ChordConfig, addr: NodeAddr, bootstrap: Vec<NodeAddr>, now: Instant, seed: u64) -> Self {
        let mut rng = Pcg64Mcg::seed_from_u64(seed);
        let first_request = u64::from(rng.random::<u32>()) + 1;
        let mut bootstrap = bootstrap;
        bootstrap.retain(|a| *a != addr);
        bootstrap.dedup();
        let backoff = config.join_backoff_min;
        let config_backoff = backoff;
        let mut node = ChordNode {
            cfg: config,
            me: Peer::from_addr(addr),
            bootstrap,
            rejoin: Vec::new(),
            merge_backoff: config_backoff,
            phase: Phase::Joining { contact: 0, backoff, reported: false },
            pred: None,
            succs: Vec::new(),
            fingers: FingerTable::default(),
            stabilize_busy: false,
            ping_busy: false,
            dependents: Vec::new(),
            succ_strikes: 0,
            pred_strikes: 0,
            requests: Outstanding::new(first_request),
            timers: TimerTable::default(),
            actions: VecDeque::new(),
            registry: Registry::default(),
            rng,
            stats: ChordStats::default(),
        };
        if node.bootstrap.is_empty() {
            node.become_joined(now);
        } else {
            node.join_attempt(now);
        }
        node.rearm_requests();
        node
    }

    // ---- getters -------------------------------------------------------------------

    /// This node's id.
    pub fn id(&self) -> Id {
        self.me.id
    }

    /// This node as a peer (id and address).
    pub fn me(&self) -> Peer {
        self.me
    }

    /// The successor (this node itself when alone or not joined).
    pub fn successor(&self) -> Peer {
        self.succs.first().copied().unwrap_or(self.me)
    }

    /// The predecessor, if known.
    pub fn predecessor(&self) -> Option<Peer> {
        self.pred
    }

    /// The successor list, nearest first (empty when alone).
    pub fn successor_list(&self) -> &[Peer] {
        &self.succs
    }

    /// The distinct fingers as `(first finger index, node)`, by index.
    pub fn fingers(&self) -> &[(u8, Peer)] {
        self.fingers.runs()
    }

    /// True once the node is part of a ring (and until it leaves or loses every contact).
    pub fn is_joined(&self) -> bool {
        self.phase == Phase::Joined
    }

    /// True after a graceful leave.
    pub fn has_left(&self) -> bool {
        self.phase == Phase::Left
    }

    /// Every value stored here under `name` (replicas included), expired ones too
    /// until the next sweep; sorted.
    pub fn stored_values(&self, name: &str) -> Vec<String> {
        self.registry.peek(name)
    }

    /// Number of values stored here (replicas included).
    pub fn stored_len(&self) -> usize {
        self.registry.len()
    }

    /// The counters.
    pub fn stats(&self) -> &ChordStats {
        &self.stats
    }

    /// The configuration.
    pub fn config(&self) -> &ChordConfig {
        &self.cfg
    }

    /// Every outstanding request as (request id, where it went), oldest first:
    /// fuzzers answer them.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn outstanding(&self) -> Vec<(u64, NodeAddr)> {
        self.requests.list()
    }

    /// Panics if one of the node's invariants does not hold after an input: the
    /// successor list is at most r long, without this node or a repeat; this node
    /// is not its own predecessor; a joining node has no successor; the peers it
    /// remembers are bounded; the requests' timer is their earliest deadline, and a
    /// stabilize or ping marked in flight is; a node that left keeps nothing; and
    /// the finger table, the registry and the requests keep their own.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn check_invariants(&self) {
        let me = self.me.addr;
        assert!(self.succs.len() <= self.cfg.successors, "{} successors", self.succs.len());
        for (k, p) in self.succs.iter().enumerate() {
            assert!(p.addr != me, "the successor list names this node");
            assert!(self.succs[..k].iter().all(|q| q.addr != p.addr), "{} twice in the successor list", p.addr);
        }
        assert!(self.pred.is_none_or(|p| p.addr != me), "this node is its own predecessor");
        assert!(self.dependents.len() <= MAX_DEPENDENTS, "{} dependents", self.dependents.len());
        assert!(self.rejoin.len() <= MAX_REJOIN, "{} peers remembered to rejoin", self.rejoin.len());
        self.fingers.check_invariants(me);
        self.registry.check_invariants(&self.cfg.limits);
        self.requests.check_invariants();
        assert_eq!(self.timers.get(Timer::Requests), self.requests.next_deadline(), "requests' timer");
        match self.phase {
            Phase::Joining { .. } => assert!(self.succs.is_empty(), "a joining node with successors"),
            Phase::Joined => {
                assert!(!self.stabilize_busy || self.requests.any(|w| matches!(w, Waiting::Stabilize)));
                assert!(!self.ping_busy || self.requests.any(|w| matches!(w, Waiting::PingPredecessor)));
            }
            Phase::Left => {
                assert!(self.timers.next().is_none(), "a node that left has a timer");
                assert!(self.requests.next_deadline().is_none(), "a node that left waits for answers");
                assert!(self.succs.is_empty() && self.pred.is_none() && self.fingers.runs().is_empty());
                assert!(self.registry.len() == 0 && !self.registry.has_own(), "a node that left keeps registrations");
            }
        }
    }

    // ---- plumbing ------------------------------------------------------------------

    pub(super) fn joined(&self) -> bool {
        self.phase == Phase::Joined
    }

    pub(super) fn send(&mut self, to: NodeAddr, request_id: u64, body: ChordMsg, traffic: Traffic) {
        self.stats.sent += 1;
        self.stats.sent_by_kind[body.kind()] += 1;
        match traffic {
            Traffic::Maintenance => self.stats.maintenance_sent += 1,
            Traffic::User => self.stats.user_sent += 1,
            Traffic::Reply => self.stats.replies_sent += 1,
        }
        let msg = Envelope::new(self.me.id, self.me.addr, request_id, body);
        self.actions.push_back(Action::Send { to, msg });
    }

    pub(super) fn event(&mut self, e: OverlayEvent) {
        self.actions.push_back(Action::Event(e));
    }

    pub(super) fn drop_input(&mut self) {
        self.stats.dropped += 1;
    }

    /// `d` scaled by a random factor in [0.9, 1.1], so nodes do not tick in lockstep.
    pub(super) fn jitter(&mut self, d: Duration) -> Duration {
        d.mul_f64(self.rng.random_range(0.9..1.1))
    }

    fn on_timer(&mut self, now: Instant, t: Timer) {
        match t {
            Timer::Stabilize => self.stabilize_tick(now),
            Timer::FixFingers => self.fix_fingers_tick(now),
            Timer::CheckPredecessor => self.check_predecessor_tick(now),
            Timer::Requests => self.expire_requests(now),
            Timer::Refresh => self.refresh_tick(now),
            Timer::Expire => self.expire_tick(now),
            Timer::Join => self.join_attempt(now),
        }
    }

    /// The sender of `env`, as its envelope names it. Its id is checked against its
    /// address ([`Peer::checked`]) here, once, for the messages by which this node
    /// takes the sender into its ring on its word: a notify (from anyone but the
    /// current predecessor, which was taken in already) and the leave notices.
    /// Other senders are answered or matched by address, and hashing the address of
    /// every message would cost more than the check is worth.
    fn sender(&self, env: &Envelope<ChordMsg>) -> Result<Peer, IdMismatch> {
        let claimed = Peer { id: env.sender, addr: env.sender_addr };
        match env.body {
            ChordMsg::Notify if self.pred == Some(claimed) => Ok(claimed),
            ChordMsg::Notify | ChordMsg::LeavingToPredecessor { .. } | ChordMsg::LeavingToSuccessor { .. } => {
                Peer::checked(claimed.id, claimed.addr)
            }
            _ => Ok(claimed),
        }
    }

    fn dispatch(&mut self, now: Instant, env: Envelope<ChordMsg>) {
        let from = match self.sender(&env) {
            Ok(from) => from,
            Err(e) => {
                tracing::debug!(%e, "message dropped");
                return self.drop_input();
            }
        };
        let rid = env.request_id;
        let is_request = matches!(
            env.body,
            ChordMsg::FindSuccessor { .. }
                | ChordMsg::GetPredecessor
                | ChordMsg::Ping
                | ChordMsg::Query { .. }
                | ChordMsg::GetSuccessorList
                | ChordMsg::GetFingers
        );
        if is_request && (rid == 0 || !self.joined()) {
            if rid != 0 {
                self.send(from.addr, rid, ChordMsg::NotJoined, Traffic::Reply);
            }
            match env.body {
                // A member stabilizing with us as its successor: our place is right
                // after it, so join there (its list names who follows).
                ChordMsg::GetPredecessor if rid != 0 => self.join_behind_member(now, from.addr),
                // Any other member that still counts on us: a contact to rejoin through.
                _ if rid != 0 => self.rejoin_hint(now, from.addr),
                _ => {}
            }
            return self.drop_input();
        }
        match env.body {
            ChordMsg::FindSuccessor { key } => {
                let step = self.local_step(key);
                if key == from.id && step == (Step::Done { owner: self.me }) {
                    self.remember_dependent(now, from);
                }
                self.send(from.addr, rid, ChordMsg::FindSuccessorReply(step), Traffic::Reply);
            }
            ChordMsg::FindSuccessorReply(step) => self.on_step(now, from, rid, step),
            ChordMsg::GetPredecessor => {
                let body = ChordMsg::Predecessor { predecessor: self.pred, successors: self.succs.clone() };
                self.send(from.addr, rid, body, Traffic::Reply);
            }
            ChordMsg::Predecessor { predecessor, successors } => {
                let fits = |w: &Waiting| {
                    matches!(
                        w,
                        Waiting::Stabilize
                            | Waiting::FingerCheck { .. }
                            | Waiting::Check { .. }
                            | Waiting::Recover { .. }
                    )
                };
                match self.take_pending(rid, from.addr, fits).map(|p| p.what) {
                    Some(Waiting::Stabilize) => self.on_predecessor(now, from, predecessor, successors),
                    Some(Waiting::FingerCheck { index, node }) => self.on_finger_check(now, index, node, predecessor),
                    Some(Waiting::Check { state, owner, .. }) => self.on_owner_check(now, state, owner, predecessor),
                    Some(Waiting::Recover { state, named_by }) => self.on_recover(now, state, named_by, successors),
                    _ => {}
                }
            }
            ChordMsg::Notify => self.on_notify(now, from),
            ChordMsg::NewPredecessor { predecessor } => self.on_new_predecessor(now, from, predecessor),
            ChordMsg::Ping => self.send(from.addr, rid, ChordMsg::Pong, Traffic::Reply),
            ChordMsg::Pong => {
                if self.take_pending(rid, from.addr, |w| matches!(w, Waiting::PingPredecessor)).is_some() {
                    self.ping_busy = false;
                    self.pred_strikes = 0;
                }
            }
            ChordMsg::Register { entry, replicas } => {
                if rid != 0 && !self.joined() {
                    self.send(from.addr, rid, ChordMsg::NotJoined, Traffic::Reply);
                    return self.drop_input();
                }
                if rid != 0 && replicas > 0 && self.joined() && !self.owns(Id::hash(&entry.name)) {
                    // The registrant's lookup was stale: storing it here would hide it
                    // from queries until its next refresh, so let it look again.
                    return self.send(from.addr, rid, ChordMsg::NotOwner, Traffic::Reply);
                }
                self.on_register(now, entry, replicas);
                if rid != 0 && self.joined() {
                    self.send(from.addr, rid, ChordMsg::Registered, Traffic::Reply);
                }
            }
            ChordMsg::Registered => {
                let _ = self.take_pending(rid, from.addr, |w| matches!(w, Waiting::Register { .. }));
            }
            ChordMsg::NotOwner => {
                let fits = |w: &Waiting| matches!(w, Waiting::Register { .. });
                if let Some(Waiting::Register { name, value }) = self.take_pending(rid, from.addr, fits).map(|p| p.what)
                {
                    self.retry_registration(now, &name, &value);
                }
            }
            ChordMsg::Query { name } => {
                let values = self.registry.values(&name, now);
                self.send(from.addr, rid, ChordMsg::QueryResult { values }, Traffic::Reply);
            }
            ChordMsg::QueryResult { values } => self.on_query_result(from, rid, values),
            ChordMsg::LeavingToPredecessor { successors } => self.on_leaving_successor(now, from, successors),
            ChordMsg::LeavingToSuccessor { predecessor } => self.on_leaving_predecessor(now, from, predecessor),
            ChordMsg::KeyTransfer { entries } => self.on_entries(now, from, entries, 0),
            ChordMsg::Handover { entries, hops } => self.on_entries(now, from, entries, hops),
            ChordMsg::Pull { after } => self.on_pull(now, from, after),
            ChordMsg::GetSuccessorList => {
                // Only a joining node asks this, to confirm us as its successor: if we
                // leave before its first stabilize, it must hear of it.
                self.remember_dependent(now, from);
                let body = ChordMsg::SuccessorList { successors: self.succs.clone() };
                self.send(from.addr, rid, body, Traffic::Reply);
            }
            ChordMsg::GetFingers => {
                let fingers = self.fingers.runs().to_vec();
                self.send(from.addr, rid, ChordMsg::Fingers { fingers }, Traffic::Reply);
            }
            ChordMsg::Fingers { fingers } => {
                if self.take_pending(rid, from.addr, |w| matches!(w, Waiting::Fingers)).is_some() {
                    self.adopt_fingers(fingers);
                }
            }
            ChordMsg::NotJoined => match self.requests.take_from(rid, from.addr) {
                Some(p) => self.request_failed(now, p, NoAnswer::NotJoined),
                None => self.drop_input(),
            },
            ChordMsg::SuccessorList { successors } => {
                let fits = |w: &Waiting| matches!(w, Waiting::SuccessorList { .. } | Waiting::JoinBehind);
                match self.take_pending(rid, from.addr, fits).map(|p| p.what) {
                    Some(Waiting::SuccessorList { .. }) => self.join_confirmed(now, from, successors),
                    Some(Waiting::JoinBehind) => self.join_behind(now, from, successors),
                    _ => {}
                }
            }
        }
    }
}

impl Machine for ChordNode {
    type Body = ChordMsg;
    type Command = OverlayCommand;
    type Event = OverlayEvent;
    type CmdError = CommandError;

    fn addr(&self) -> NodeAddr {
        self.me.addr
    }

    fn handle_message(&mut self, now: Instant, msg: Envelope<ChordMsg>) {
        self.stats.received += 1;
        if self.phase == Phase::Left || msg.sender_addr == self.me.addr {
            return self.drop_input();
        }
        self.dispatch(now, msg);
        self.sync_replicas(now);
        self.rearm_requests();
    }

    fn handle_send_failed(&mut self, now: Instant, to: NodeAddr) {
        if self.phase == Phase::Left {
            return;
        }
        let ids = self.requests.ids_to(to);
        self.peer_failed(now, to);
        self.fail_requests(now, ids, NoAnswer::Silent);
        self.sync_replicas(now);
        self.rearm_requests();
    }

    fn handle_command(&mut self, now: Instant, cmd: OverlayCommand) -> Result<(), CommandError> {
        if self.phase == Phase::Left {
            return Err(CommandError::Left);
        }
        match cmd {
            OverlayCommand::Lookup { token, key } => {
                if !self.joined() {
                    self.stats.lookups_failed += 1;
                    let result = Err(OverlayError::NotConnected);
                    self.event(OverlayEvent::LookupDone { token, key, result });
                } else {
                    self.start_lookup(now, key, Purpose::User { token });
                }
            }
            OverlayCommand::Register { name, value, ttl } => self.register(now, name, value, ttl)?,
            OverlayCommand::Unregister { name, value } => self.unregister(now, name, value),
            OverlayCommand::Query { token, name } => self.query(now, token, name)?,
            OverlayCommand::Leave => self.leave(now),
        }
        self.rearm_requests();
        Ok(())
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.phase == Phase::Left {
            return;
        }
        for t in self.timers.take_expired(now) {
            self.on_timer(now, t);
        }
        self.sync_replicas(now);
        self.rearm_requests();
    }

    fn poll_action(&mut self) -> Option<Action<ChordMsg, OverlayEvent>> {
        self.actions.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }
}

impl crate::overlay::Overlay for ChordNode {
    type Config = ChordConfig;

    fn create(config: ChordConfig, addr: NodeAddr, bootstrap: Vec<NodeAddr>, now: Instant, seed: u64) -> Self {
        ChordNode::new(config, addr, bootstrap, now, seed)
    }

    fn kind(&self) -> crate::overlay::OverlayKind {
        crate::overlay::OverlayKind::Chord
    }

    fn node_id(&self) -> Id {
        self.me.id
    }

    fn joined(&self) -> bool {
        self.is_joined()
    }

    fn left(&self) -> bool {
        self.has_left()
    }

    fn stored(&self, name: &str) -> Vec<String> {
        self.stored_values(name)
    }

    fn routing_entries(&self) -> usize {
        let mut peers: Vec<NodeAddr> = self.succs.iter().chain(self.pred.iter()).map(|p| p.addr).collect();
        peers.extend(self.fingers.runs().iter().map(|(_, p)| p.addr));
        peers.sort();
        peers.dedup();
        peers.len()
    }

    fn traffic(&self) -> crate::overlay::OverlayTraffic {
        let s = &self.stats;
        crate::overlay::OverlayTraffic {
            sent: s.sent,
            maintenance: s.maintenance_sent,
            user: s.user_sent,
            replies: s.replies_sent,
            lookups_ok: s.lookups_ok,
            lookup_hops: s.lookup_hops,
            lookups_failed: s.lookups_failed,
        }
    }
}
