//! The CAN node: state, the `Machine` impl, timers, requests and the input dispatch.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use super::CanConfig;
use super::msg::{CanMsg, NodeInfo, Peer};
use super::route::{Purpose, RouteState};
use super::table::Table;
use super::takeover::Takeover;
use super::zone::{Point, Zone};
use crate::id::Id;
use crate::machine::{Action, Machine, NodeAddr};
use crate::overlay::requests::Requests;
use crate::overlay::store::{OwnRegs, QueryState, Store};
use crate::overlay::{CommandError, OverlayCommand, OverlayError, OverlayEvent};
use crate::time::{TimerKey, TimerTable};
use crate::wire::Envelope;

/// Most peers remembered for a rejoin.
pub(crate) const MAX_REJOIN: usize = 16;
/// Most entries of a node list or zone list taken from a peer; longer ones are cut.
pub(crate) const MAX_LIST: usize = 256;

/// The node's timers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Send heartbeats and judge silent neighbours.
    Heartbeat,
    /// The earliest outstanding request deadline.
    Requests,
    /// Re-register this node's own registrations.
    Refresh,
    /// Drop expired stored registrations.
    Expire,
    /// Next join attempt.
    Join,
    /// The earliest takeover round due.
    Takeover,
    /// Next step of a graceful leave.
    Leave,
    /// A freed node stops waiting for the zone it was freed for.
    Reserve,
}

impl TimerKey for Timer {
    const COUNT: usize = 8;
    const ALL: &'static [Timer] = &[
        Timer::Heartbeat,
        Timer::Requests,
        Timer::Refresh,
        Timer::Expire,
        Timer::Join,
        Timer::Takeover,
        Timer::Leave,
        Timer::Reserve,
    ];
    fn index(self) -> usize {
        self as usize
    }
}

/// Where the node stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Looking for its place through the bootstrap list (or remembered peers).
    Joining {
        /// Index of the contact being tried.
        contact: usize,
        /// Wait before the next round once every contact failed.
        backoff: Duration,
        /// `Disconnected` was already reported for this episode.
        reported: bool,
    },
    /// Part of a network (possibly alone).
    Joined,
    /// Left gracefully; the node is inert.
    Left,
}

/// Why a zone is being handed to another node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Give {
    /// This node leaves: to the buddy's owner, or to a node freed for it.
    Leave,
    /// A pair search found this zone and its buddy: this node frees itself for
    /// `leaver`, answering its `FindPair` request `request_id` once done.
    Pair { leaver: NodeAddr, request_id: u64 },
}

/// What an outstanding request waits for.
#[derive(Debug)]
pub(crate) enum Waiting {
    /// One hop of a route.
    Hop(Box<RouteState>),
    /// The owner's answer to our join (after `redirects` to larger zones).
    Join { redirects: u8 },
    /// A probed node's zones.
    Probe,
    /// The receiver's acceptance of a zone we handed it (given up already; taken
    /// back if it does not come, and its `neighbours` with it).
    Handoff { zone: Zone, purpose: Give, neighbours: Vec<NodeInfo> },
    /// One step of the pair search for our leaving `zone`.
    FindPair { zone: Zone },
    /// The owner's confirmation that it stored one of our own registrations.
    Register { name: String, value: String },
    /// A query's values from the name's owner.
    Query(Box<QueryState>),
}

/// One outstanding request.
pub(crate) type Pending = crate::overlay::requests::Pending<Waiting>;

/// Who a sent message is for, in the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Traffic {
    /// Keeping the overlay (heartbeats, probes, joins, hand-offs, takeovers, replicas, refreshes).
    Maintenance,
    /// Serving a command of the application (lookups, queries, first registrations).
    User,
    /// Answering a peer's request.
    Reply,
}

/// A leave in progress.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Leaving {
    /// Past this, the node stops trying to hand its zones over and just goes
    /// (its neighbours take them over, as after a crash).
    pub(crate) give_up_at: Instant,
    /// A step (a hand-off or a pair search) is outstanding.
    pub(crate) busy: bool,
}

/// A node that freed itself for a leaving node and waits for its zone.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reservation {
    pub(crate) leaver: NodeAddr,
    pub(crate) until: Instant,
}

/// Counters, for benchmarks and checkers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CanStats {
    /// Messages sent in all.
    pub sent: u64,
    /// Messages sent, by [`CanMsg::kind`].
    pub sent_by_kind: [u64; CanMsg::KINDS],
    /// Messages originated to keep the overlay.
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
    /// Zones this node took over from failed neighbours.
    pub takeovers: u64,
    /// Zones (or parts) this node gave up because another node owned them too.
    pub conflicts: u64,
    /// Zones handed to another node (leaving, or freeing itself for a leaver).
    pub handoffs: u64,
    /// Times the node lost every zone and joined again.
    pub rejoins: u64,
}

/// A CAN node as a sans-IO machine.
#[derive(Debug)]
pub struct CanNode {
    pub(crate) cfg: CanConfig,
    pub(crate) me: Peer,
    /// Contacts to join through, own address removed.
    pub(crate) bootstrap: Vec<NodeAddr>,
    /// Peers known when the node lost its zones, tried after the bootstrap list.
    pub(crate) rejoin: Vec<NodeAddr>,
    pub(crate) phase: Phase,
    /// Where this node asks to join (drawn anew for every join).
    pub(crate) join_point: Point,
    /// Where the next join route starts, if not at the current contact: the owner
    /// that just turned the join away (it is next to the point).
    pub(crate) join_via: Option<NodeAddr>,
    /// The zones this node owns, sorted.
    pub(crate) zones: Vec<Zone>,
    /// Bumped with every change of `zones`.
    pub(crate) version: u64,
    pub(crate) table: Table,
    pub(crate) takeovers: Vec<Takeover>,
    /// Nodes found failed or gone (not taken back from hearsay), until when.
    pub(crate) dead: Vec<(NodeAddr, Instant)>,
    /// Nodes that answered a probe while joining: probed again at the given time,
    /// at most a few times each (the count).
    pub(crate) reprobe: Vec<(NodeAddr, Instant, u8)>,
    pub(crate) leaving: Option<Leaving>,
    pub(crate) reserved: Option<Reservation>,
    /// Heartbeats sent so far (every `list_every`th carries the neighbour table).
    pub(crate) beats: u32,
    /// The table changed since the last heartbeat: the next one carries it.
    pub(crate) list_dirty: bool,
    /// A route looks for the owner of a point next to us that no neighbour covers.
    pub(crate) discovering: bool,
    /// Discovery routes in a row that found no owner.
    pub(crate) discover_failures: u32,
    /// Nodes heard from lately, newest last: where a node whose every neighbour
    /// went routes from to find its new ones.
    pub(crate) known: Vec<NodeAddr>,
    pub(crate) pending: Requests<Waiting>,
    pub(crate) next_request: u64,
    pub(crate) timers: TimerTable<Timer>,
    pub(crate) actions: VecDeque<Action<CanMsg, OverlayEvent>>,
    pub(crate) store: Store,
    /// This node's own registrations, refreshed until unregistered.
    pub(crate) own: OwnRegs,
    pub(crate) rng: Pcg64Mcg,
    pub(crate) stats: CanStats,
}

impl CanNode {
    /// A node listening at `addr` (its id is `addr.id()`). With no bootstrap contact
    /// other than itself it owns the whole space at once and reports `Joined`;
    /// otherwise it joins through `bootstrap`, in order. Drain
    /// [`Machine::poll_action`] after construction as after any input.
    ///
    /// # Panics
    /// If `config.dims` is not in 1..=8 (a configuration bug).
    pub fn new(config: CanConfig, addr: NodeAddr, bootstrap: Vec<NodeAddr>, now: Instant, seed: u64) -> Self {
        assert!((1..=super::MAX_DIMS).contains(&config.dims), "CAN dimensions must be 1..=8, got {}", config.dims);
        let mut rng = Pcg64Mcg::seed_from_u64(seed);
        let first_request = rng.random::<u64>() | 1;
        let join_point = random_point(&mut rng, config.dims);
        let mut bootstrap = bootstrap;
        bootstrap.retain(|a| *a != addr);
        bootstrap.dedup();
        let backoff = config.join_backoff_min;
        let mut node = CanNode {
            cfg: config,
            me: Peer::from_addr(addr),
            bootstrap,
            rejoin: Vec::new(),
            phase: Phase::Joining { contact: 0, backoff, reported: false },
            join_point,
            join_via: None,
            zones: Vec::new(),
            version: 0,
            table: Table::default(),
            takeovers: Vec::new(),
            dead: Vec::new(),
            reprobe: Vec::new(),
            leaving: None,
            reserved: None,
            beats: 0,
            list_dirty: false,
            discovering: false,
            discover_failures: 0,
            known: Vec::new(),
            pending: Requests::default(),
            next_request: first_request,
            timers: TimerTable::default(),
            actions: VecDeque::new(),
            store: Store::default(),
            own: OwnRegs::default(),
            rng,
            stats: CanStats::default(),
        };
        if node.bootstrap.is_empty() {
            let root = Zone::root(node.cfg.dims);
            node.become_joined(now, vec![root]);
        } else {
            node.join_attempt(now);
        }
        node.finish_input(now);
        node
    }

    /// The point a node built with `seed` first asks to join at (benchmarks use it
    /// to enter a large network near its place).
    pub fn first_join_point(dims: usize, seed: u64) -> Point {
        let mut rng = Pcg64Mcg::seed_from_u64(seed);
        let _ = rng.random::<u64>();
        random_point(&mut rng, dims)
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

    /// The zones this node owns, sorted (empty while joining).
    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }

    /// The node's neighbours as it knows them, by address.
    pub fn neighbours(&self) -> Vec<NodeInfo> {
        self.table.infos()
    }

    /// True once the node is part of a network (and until it leaves or loses its zones).
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
        self.store.peek(name)
    }

    /// Number of values stored here (replicas included).
    pub fn stored_len(&self) -> usize {
        self.store.len()
    }

    /// The counters.
    pub fn stats(&self) -> &CanStats {
        &self.stats
    }

    /// The configuration.
    pub fn config(&self) -> &CanConfig {
        &self.cfg
    }

    /// This node's own description, as it sends it.
    pub fn info(&self) -> NodeInfo {
        NodeInfo { peer: self.me, version: self.version, zones: self.zones.clone() }
    }

    // ---- plumbing ------------------------------------------------------------------

    pub(crate) fn joined(&self) -> bool {
        self.phase == Phase::Joined
    }

    pub(crate) fn dims(&self) -> usize {
        self.cfg.dims
    }

    /// Whether `p` lies in one of this node's zones.
    pub(crate) fn owns_point(&self, p: &Point) -> bool {
        self.zones.iter().any(|z| z.contains(p))
    }

    /// Whether the registration key `key` lies in one of this node's zones.
    pub(crate) fn owns_key(&self, key: Id) -> bool {
        self.owns_point(&Point::of_key(key, self.dims()))
    }

    pub(crate) fn send(&mut self, to: NodeAddr, request_id: u64, body: CanMsg, traffic: Traffic) {
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

    /// Sends a request and remembers what its answer is for, waiting up to `wait`
    /// (capped by a route's or query's own deadline).
    pub(crate) fn request_for(
        &mut self,
        now: Instant,
        to: NodeAddr,
        body: CanMsg,
        what: Waiting,
        traffic: Traffic,
        wait: Duration,
    ) {
        let id = self.next_request;
        self.next_request = self.next_request.wrapping_add(1).max(1);
        let mut deadline = now + wait;
        match &what {
            Waiting::Hop(s) => deadline = deadline.min(s.deadline()),
            Waiting::Query(q) => deadline = deadline.min(q.deadline),
            _ => {}
        }
        self.pending.insert(id, Pending { to, deadline, what });
        self.send(to, id, body, traffic);
    }

    /// A request with the usual reply timeout.
    pub(crate) fn request(&mut self, now: Instant, to: NodeAddr, body: CanMsg, what: Waiting, traffic: Traffic) {
        self.request_for(now, to, body, what, traffic, self.cfg.request_timeout);
    }

    pub(crate) fn event(&mut self, e: OverlayEvent) {
        self.actions.push_back(Action::Event(e));
    }

    pub(crate) fn drop_input(&mut self) {
        self.stats.dropped += 1;
    }

    /// `d` scaled by a random factor in [0.9, 1.1], so nodes do not tick in lockstep.
    pub(crate) fn jitter(&mut self, d: Duration) -> Duration {
        d.mul_f64(self.rng.random_range(0.9..1.1))
    }

    /// Takes the request `id` if it went to `from` and `fits` the reply.
    pub(crate) fn take_pending(&mut self, id: u64, from: NodeAddr, fits: fn(&Waiting) -> bool) -> Option<Pending> {
        match self.pending.get(&id) {
            Some(p) if p.to == from && fits(&p.what) => self.pending.remove(&id),
            _ => {
                self.drop_input();
                None
            }
        }
    }

    fn expire_requests(&mut self, now: Instant) {
        for id in self.pending.ids_where(|p| p.deadline <= now) {
            if let Some(p) = self.pending.remove(&id) {
                self.request_failed(now, p);
            }
        }
    }

    /// A request got no useful answer: it timed out, the peer could not be reached,
    /// or it answered that it cannot serve it.
    pub(crate) fn request_failed(&mut self, now: Instant, p: Pending) {
        self.stats.request_failures += 1;
        match p.what {
            Waiting::Hop(state) => self.hop_failed(now, p.to, state),
            Waiting::Join { .. } => self.join_failed(now),
            Waiting::Probe => self.probe_failed(now, p.to),
            Waiting::Handoff { zone, purpose, neighbours } => self.handoff_failed(now, zone, purpose, neighbours),
            Waiting::FindPair { .. } => self.leave_retry(now),
            Waiting::Register { name, value } => self.retry_registration(now, &name, &value),
            Waiting::Query(q) => self.query_failed(now, *q),
        }
    }

    /// Everything an input may have left to do: copies for new neighbours, a node
    /// left without zones, the request timer.
    pub(crate) fn finish_input(&mut self, now: Instant) {
        if self.joined()
            && self.zones.is_empty()
            && self.reserved.is_none()
            && self.leaving.is_none()
            && !self.pending.any(|p| matches!(p.what, Waiting::Handoff { .. }))
        {
            self.lost_zones(now);
        }
        self.sync_replicas(now);
        match self.pending.next_deadline() {
            Some(t) => self.timers.set(Timer::Requests, t),
            None => self.timers.clear(Timer::Requests),
        }
    }

    fn on_timer(&mut self, now: Instant, t: Timer) {
        match t {
            Timer::Heartbeat => self.heartbeat_tick(now),
            Timer::Requests => self.expire_requests(now),
            Timer::Refresh => self.refresh_tick(now),
            Timer::Expire => self.expire_tick(now),
            Timer::Join => self.join_attempt(now),
            Timer::Takeover => self.takeover_tick(now),
            Timer::Leave => self.leave_step(now),
            Timer::Reserve => self.reservation_expired(now),
        }
    }

    /// Whether a self-description in a message really describes its sender and fits
    /// this network.
    pub(crate) fn sane(&self, info: &NodeInfo, from: NodeAddr) -> bool {
        info.peer.addr == from && self.sane_zones(&info.zones)
    }

    /// Zones of this network's dimensions, a bounded number of them.
    pub(crate) fn sane_zones(&self, zones: &[Zone]) -> bool {
        zones.len() <= MAX_LIST && zones.iter().all(|z| z.dims() == self.dims())
    }

    fn dispatch(&mut self, now: Instant, env: Envelope<CanMsg>) {
        let from = Peer { id: env.sender, addr: env.sender_addr };
        let rid = env.request_id;
        let is_request = matches!(
            env.body,
            CanMsg::Route { .. }
                | CanMsg::Probe { .. }
                | CanMsg::Handoff { .. }
                | CanMsg::FindPair { .. }
                | CanMsg::Register { .. }
                | CanMsg::Query { .. }
        );
        if is_request && (rid == 0 || !self.joined()) {
            if rid != 0 {
                self.send(from.addr, rid, CanMsg::NotJoined, Traffic::Reply);
            }
            return self.drop_input();
        }
        match env.body {
            CanMsg::Route { target } => self.on_route(from, rid, target),
            CanMsg::RouteReply(step) => self.on_route_reply(now, from, rid, step),
            CanMsg::Join { point, dims } => self.on_join(now, from, rid, point, dims),
            CanMsg::JoinAccept { zone, neighbours, entries } => {
                self.on_join_accept(now, from, rid, zone, neighbours, entries)
            }
            CanMsg::WrongDims { dims } => self.on_wrong_dims(now, from, rid, dims),
            CanMsg::Busy | CanMsg::NotOwner | CanMsg::Retry | CanMsg::NotJoined => {
                self.on_refusal(now, from, rid, env.body)
            }
            CanMsg::Heartbeat { info, neighbours } => self.on_heartbeat(now, from, info, neighbours),
            CanMsg::Update { info } => self.on_update(now, from, info),
            CanMsg::Probe { info } => self.on_probe(now, from, rid, info),
            CanMsg::ProbeReply { info, neighbours } => self.on_probe_reply(now, from, rid, info, neighbours),
            CanMsg::Handoff { zone, entries, neighbours } => self.on_handoff(now, from, rid, zone, entries, neighbours),
            CanMsg::Accepted { info } => self.on_accepted(now, from, rid, info),
            CanMsg::FindPair { region } => self.on_find_pair(now, from, rid, region),
            CanMsg::Freed => self.on_freed(now, from, rid),
            CanMsg::Deeper { region, candidates } => self.on_deeper(now, from, rid, region, candidates),
            CanMsg::Claim { info, dead } => self.on_claim(now, from, info, dead),
            CanMsg::Gone => self.on_gone(now, from),
            CanMsg::Register { entry } => self.on_register(now, from, rid, entry),
            CanMsg::Registered => {
                let _ = self.take_pending(rid, from.addr, |w| matches!(w, Waiting::Register { .. }));
            }
            CanMsg::Query { name } => {
                let values = self.store.values(&name, now);
                self.send(from.addr, rid, CanMsg::QueryResult { values }, Traffic::Reply);
            }
            CanMsg::QueryResult { values } => self.on_query_result(from, rid, values),
            CanMsg::Replicate { entries } => self.on_replicate(now, from, entries),
            CanMsg::JoinElsewhere { to, point } => self.on_join_elsewhere(now, from, rid, to, point),
        }
    }

    /// A reply that refuses a request: the request failed, and whoever waited on
    /// it decides what next.
    fn on_refusal(&mut self, now: Instant, from: Peer, rid: u64, body: CanMsg) {
        let Some(p) = self.take_pending(rid, from.addr, |_| true) else { return };
        match (body, &p.what) {
            // The owner moved on (its zone was split or handed on), or it is busy
            // handing a zone over: look again shortly.
            (CanMsg::NotOwner | CanMsg::Busy, Waiting::Join { .. }) => self.join_retry(now, from.addr),
            // Alive but still joining (or rejoining): ask again shortly, or two
            // new neighbours that probed each other too early never meet.
            (CanMsg::NotJoined, Waiting::Probe) => self.probe_later(now, from.addr),
            _ => self.request_failed(now, p),
        }
    }
}

/// A uniformly random point of `dims` dimensions.
pub(crate) fn random_point(rng: &mut Pcg64Mcg, dims: usize) -> Point {
    let coords: Vec<u32> = (0..dims).map(|_| rng.random()).collect();
    Point::new(&coords).expect("dims is 1..=8")
}

impl Machine for CanNode {
    type Body = CanMsg;
    type Command = OverlayCommand;
    type Event = OverlayEvent;
    type CmdError = CommandError;

    fn addr(&self) -> NodeAddr {
        self.me.addr
    }

    fn handle_message(&mut self, now: Instant, msg: Envelope<CanMsg>) {
        self.stats.received += 1;
        if self.phase == Phase::Left || msg.sender_addr == self.me.addr {
            return self.drop_input();
        }
        self.dispatch(now, msg);
        self.finish_input(now);
    }

    fn handle_send_failed(&mut self, now: Instant, to: NodeAddr) {
        if self.phase == Phase::Left {
            return;
        }
        let ids = self.pending.ids_where(|p| p.to == to);
        // A refused connection: the process is gone.
        self.peer_failed(now, to);
        for id in ids {
            if let Some(p) = self.pending.remove(&id) {
                self.request_failed(now, p);
            }
        }
        self.finish_input(now);
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
                    let target = Point::of_key(key, self.dims());
                    self.start_route(now, target, Purpose::User { token, key });
                }
            }
            OverlayCommand::Register { name, value, ttl } => self.register(now, name, value, ttl)?,
            OverlayCommand::Unregister { name, value } => self.unregister(now, name, value),
            OverlayCommand::Query { token, name } => self.query(now, token, name)?,
            OverlayCommand::Leave => self.leave(now),
        }
        self.finish_input(now);
        Ok(())
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.phase == Phase::Left {
            return;
        }
        for t in self.timers.take_expired(now) {
            self.on_timer(now, t);
        }
        self.finish_input(now);
    }

    fn poll_action(&mut self) -> Option<Action<CanMsg, OverlayEvent>> {
        self.actions.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }
}

impl crate::overlay::Overlay for CanNode {
    type Config = CanConfig;

    fn create(config: CanConfig, addr: NodeAddr, bootstrap: Vec<NodeAddr>, now: Instant, seed: u64) -> Self {
        CanNode::new(config, addr, bootstrap, now, seed)
    }

    fn kind(&self) -> crate::overlay::OverlayKind {
        crate::overlay::OverlayKind::Can { dims: self.cfg.dims as u8 }
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
        self.table.iter().count()
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
