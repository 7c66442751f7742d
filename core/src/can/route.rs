//! Greedy routing by torus distance, iterative: the asking node contacts each hop
//! itself.
//!
//! A hop that owns the target answers `Done`; any other answers with its
//! neighbours closest to the target. The asking node keeps the best candidates it
//! has heard of, ordered by their zones' squared torus distance to the target, and
//! always asks the closest one not yet asked: with exact neighbour tables that is
//! the next zone on the greedy path (some neighbour is always strictly closer), and
//! a hop that does not answer is routed around through the next best, which may be
//! no closer (CAN's way around a dead neighbour). Hops count the nodes asked, so a
//! route from the owner's neighbour takes 1 and one from the owner itself 0: the
//! number of zone boundaries crossed, as in the CAN paper's (d/4)·N^(1/d).

use std::time::Instant;

use super::msg::{CanMsg, NodeInfo, Peer, RouteStep};
use super::node::{CanNode, MAX_LIST, Traffic, Waiting};
use super::zone::Point;
use crate::id::Id;
use crate::machine::NodeAddr;
use crate::overlay::{LookupResult, OverlayError, OverlayEvent, Token};

/// Candidates a hop returns, and candidates a route keeps in reserve.
const REPLY_CANDIDATES: usize = 4;
const KEPT_CANDIDATES: usize = 8;
/// Nodes a route remembers having asked, as 32-bit hashes of their addresses (a
/// route turns away from the greedy path only around a hop that did not answer or
/// a stale table, but in one dimension it may then walk a long way back).
const KEPT_ASKED: usize = 4096;

/// Why a route runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// An application `Lookup` of `key`.
    User { token: Token, key: Id },
    /// Finding the owner of this node's join point.
    Join,
    /// Storing (or refreshing) a registration at the key's owner.
    Register { name: String, value: String, ttl_ms: u64 },
    /// Finding where to send a query.
    Query { token: Token, name: String, attempt: u8, deadline: Instant },
    /// Finding who owns a point just outside our zone that no neighbour we know covers.
    Discover,
}

/// One route in flight.
#[derive(Debug)]
pub(crate) struct RouteState {
    target: Point,
    purpose: Purpose,
    hops: u32,
    deadline: Instant,
    /// Nodes to ask, closest first, with their squared distance to the target.
    candidates: Vec<(u128, Peer)>,
    /// Nodes asked so far (the latest [`KEPT_ASKED`]), as hashes of their addresses.
    asked: Vec<u32>,
}

impl RouteState {
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    fn traffic(&self) -> Traffic {
        match self.purpose {
            Purpose::User { .. } | Purpose::Query { .. } => Traffic::User,
            _ => Traffic::Maintenance,
        }
    }

    /// Adds a candidate unless asked already; keeps the closest.
    fn offer(&mut self, dist: u128, peer: Peer) {
        if self.asked.contains(&peer_hash(&peer)) || self.candidates.iter().any(|(_, p)| p.addr == peer.addr) {
            return;
        }
        let at = self.candidates.partition_point(|(d, p)| (*d, p.id) < (dist, peer.id));
        self.candidates.insert(at, (dist, peer));
        self.candidates.truncate(KEPT_CANDIDATES);
    }
}

/// A 32-bit hash of a node, for a route's memory of the nodes it asked (the first
/// bytes of its id, SHA-1 of its address).
fn peer_hash(p: &Peer) -> u32 {
    let b = p.id.as_bytes();
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// The squared distance from `target` to the nearest zone of `info`.
fn distance(info: &NodeInfo, target: &Point) -> Option<u128> {
    info.zones.iter().map(|z| z.dist2(target)).min()
}

impl CanNode {
    /// The neighbours closest to `target`, closest first (ties by id).
    fn closest_neighbours(&self, target: &Point, n: usize) -> Vec<(u128, NodeInfo)> {
        let mut v: Vec<(u128, NodeInfo)> =
            self.table.iter().filter_map(|nb| distance(&nb.info, target).map(|d| (d, nb.info.clone()))).collect();
        v.sort_by_key(|(d, i)| (*d, i.peer.id));
        v.truncate(n);
        v
    }

    /// Starts a route to `target` from this node's own table (a joining node's
    /// from its contact instead).
    pub(crate) fn start_route(&mut self, now: Instant, target: Point, purpose: Purpose) {
        self.start_route_via(now, target, purpose, None);
    }

    pub(crate) fn start_route_via(&mut self, now: Instant, target: Point, purpose: Purpose, via: Option<NodeAddr>) {
        let deadline = match &purpose {
            Purpose::Query { deadline, .. } => *deadline,
            _ => now + self.cfg.lookup_timeout,
        };
        let mut state =
            Box::new(RouteState { target, purpose, hops: 0, deadline, candidates: Vec::new(), asked: Vec::new() });
        if self.joined() && self.owns_point(&target) {
            return self.route_done(now, *state, Ok(self.me));
        }
        if let Some(addr) = via {
            if state.purpose == Purpose::Discover {
                // From there alone: our own neighbours lead back to where we stand.
                state.candidates.push((u128::MAX, Peer::from_addr(addr)));
                return self.ask_next(now, state);
            }
            state.candidates.push((0, Peer::from_addr(addr)));
        }
        for (d, info) in self.closest_neighbours(&target, KEPT_CANDIDATES) {
            state.offer(d, info.peer);
        }
        self.ask_next(now, state);
    }

    /// Asks the closest remaining candidate, or gives up.
    fn ask_next(&mut self, now: Instant, mut state: Box<RouteState>) {
        if state.hops >= self.cfg.max_hops {
            return self.route_done(now, *state, Err(OverlayError::HopBudget));
        }
        if now >= state.deadline || state.candidates.is_empty() {
            return self.route_done(now, *state, Err(OverlayError::Timeout));
        }
        let (_, next) = state.candidates.remove(0);
        state.hops += 1;
        if state.asked.len() >= KEPT_ASKED {
            state.asked.remove(0);
        }
        state.asked.push(peer_hash(&next));
        let traffic = state.traffic();
        let target = state.target;
        self.request(now, next.addr, CanMsg::Route { target }, Waiting::Hop(state), traffic);
    }

    /// A hop's question: do we own `target`, or who is closer?
    pub(crate) fn on_route(&mut self, from: Peer, rid: u64, target: Point) {
        if target.dims() != self.dims() {
            // A node of another network shape (joining, say): tell it ours.
            let dims = self.dims() as u8;
            return self.send(from.addr, rid, CanMsg::WrongDims { dims }, Traffic::Reply);
        }
        if self.table.get(from.addr).is_none() && self.known.last() != Some(&from.addr) {
            // Routes come from all over: a node far away, to route from when our
            // neighbours are cut off with us (see `gaps`).
            self.remember(from.addr);
        }
        let step = if self.owns_point(&target) {
            RouteStep::Done
        } else {
            let candidates = self.closest_neighbours(&target, REPLY_CANDIDATES).into_iter().map(|(_, i)| i).collect();
            RouteStep::Next { candidates }
        };
        self.send(from.addr, rid, CanMsg::RouteReply(step), Traffic::Reply);
    }

    /// A hop answered.
    pub(crate) fn on_route_reply(&mut self, now: Instant, from: Peer, rid: u64, step: RouteStep) {
        let Some(p) = self.take_pending(rid, from.addr, |w| matches!(w, Waiting::Hop(_))) else { return };
        let Waiting::Hop(mut state) = p.what else { return };
        match step {
            RouteStep::Done => self.route_done(now, *state, Ok(from)),
            RouteStep::Next { candidates } => {
                if candidates.len() > MAX_LIST {
                    self.drop_input();
                }
                for info in candidates.into_iter().take(MAX_LIST) {
                    let addr = info.peer.addr;
                    // Nodes thought failed are not skipped: one that rejoined is the
                    // owner, and a failed one costs only a timeout.
                    if addr == self.me.addr || !self.sane_zones(&info.zones) {
                        continue;
                    }
                    if let Some(d) = distance(&info, &state.target) {
                        state.offer(d, info.peer);
                    }
                }
                self.ask_next(now, state);
            }
        }
    }

    /// A hop did not answer: route around it.
    pub(crate) fn hop_failed(&mut self, now: Instant, _to: NodeAddr, state: Box<RouteState>) {
        self.ask_next(now, state);
    }

    fn route_done(&mut self, now: Instant, state: RouteState, result: Result<Peer, OverlayError>) {
        let RouteState { purpose, hops, .. } = state;
        match purpose {
            Purpose::User { token, key } => {
                let result = result.map(|owner| {
                    self.stats.lookups_ok += 1;
                    self.stats.lookup_hops += u64::from(hops);
                    LookupResult { owner_id: owner.id, owner: owner.addr, hops }
                });
                if result.is_err() {
                    self.stats.lookups_failed += 1;
                }
                self.event(OverlayEvent::LookupDone { token, key, result });
            }
            Purpose::Join => self.join_done(now, result),
            Purpose::Register { name, value, ttl_ms } => match result {
                Ok(owner) => self.register_at(now, owner, name, value, ttl_ms),
                Err(_) => self.retry_registration(now, &name, &value),
            },
            Purpose::Query { token, name, attempt, deadline } => match result {
                Ok(owner) => self.query_at(now, owner, token, name, attempt, deadline),
                Err(e) => self.event(OverlayEvent::QueryDone { token, name, result: Err(e) }),
            },
            Purpose::Discover => {
                self.discovering = false;
                if result.is_err() {
                    self.discover_failures = self.discover_failures.saturating_add(1);
                } else {
                    self.discover_failures = 0;
                }
                if let Ok(owner) = result
                    && owner.addr != self.me.addr
                    && self.table.get(owner.addr).is_none()
                {
                    self.probe(now, owner.addr);
                }
            }
        }
    }
}
