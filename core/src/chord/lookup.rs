//! Iterative lookups and fix-fingers.
//!
//! The asking node contacts each hop itself: it asks the closest preceding finger
//! it knows, which answers either "my successor (or I) own the key" or with its own
//! closest preceding fingers. A hop that times out or cannot be reached is routed
//! around through the next-best candidate. Hops count the remote nodes asked; a node
//! that finds the owner in its own table (itself or its successor) answers with 0.

use std::time::Instant;

use super::msg::{ChordMsg, Peer, Step};
use super::node::{ChordNode, Traffic};
use super::requests::Waiting;
use crate::id::Id;
use crate::machine::NodeAddr;
use crate::overlay::{OverlayError, OverlayEvent, Token};

/// Candidates a hop returns, and candidates a lookup keeps in reserve.
const REPLY_CANDIDATES: usize = 3;
const KEPT_CANDIDATES: usize = 8;
/// Nodes a lookup remembers as failed.
const KEPT_FAILED: usize = 16;

/// Why a lookup runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Purpose {
    /// An application `Lookup`.
    User { token: Token },
    /// Finding this node's successor through a bootstrap contact.
    Join,
    /// Refreshing finger `index`.
    Finger { index: u32 },
    /// Storing (or refreshing) a registration at the key's owner.
    Register { name: String, value: String, ttl_ms: u64 },
    /// Finding where to send a query.
    Query { token: Token, name: String, attempt: u8, deadline: Instant },
}

/// One lookup in flight.
#[derive(Debug)]
pub(super) struct LookupState {
    key: Id,
    purpose: Purpose,
    hops: u32,
    deadline: Instant,
    /// Nodes to ask, best (closest preceding the key) first.
    candidates: Vec<Peer>,
    /// Nodes that did not answer.
    failed: Vec<NodeAddr>,
    /// The successor list was already drawn on once candidates ran out.
    fell_back: bool,
    /// Owner checks made (see `owner_check`).
    pub(super) checks: u8,
}

impl LookupState {
    pub(super) fn new(key: Id, purpose: Purpose, deadline: Instant, candidates: Vec<Peer>) -> Self {
        LookupState { key, purpose, hops: 0, deadline, candidates, failed: Vec::new(), fell_back: false, checks: 0 }
    }

    pub(super) fn deadline(&self) -> Instant {
        self.deadline
    }

    pub(super) fn key(&self) -> Id {
        self.key
    }

    /// Whether an owner named by another node is checked before it is reported:
    /// for the application's lookups and queries, where a stale answer is wrong.
    pub(super) fn checks_owner(&self) -> bool {
        matches!(self.purpose, Purpose::User { .. } | Purpose::Query { .. })
    }

    pub(super) fn traffic(&self) -> Traffic {
        match self.purpose {
            Purpose::User { .. } | Purpose::Query { .. } => Traffic::User,
            _ => Traffic::Maintenance,
        }
    }

    pub(super) fn has_failed(&self, addr: NodeAddr) -> bool {
        self.failed.contains(&addr)
    }

    /// Remembers a node that did not answer and drops it from the candidates.
    pub(super) fn fail(&mut self, addr: NodeAddr) {
        if self.failed.len() < KEPT_FAILED {
            self.failed.push(addr);
        }
        self.candidates.retain(|p| p.addr != addr);
    }

    /// Adds candidates after `asked` (they must make progress towards the key), best first.
    fn merge(&mut self, own: Id, asked: Id, new: Vec<Peer>) {
        let key = self.key;
        for p in new {
            if p.id.in_open(asked, key)
                && p.id != own
                && !self.failed.contains(&p.addr)
                && !self.candidates.contains(&p)
            {
                self.candidates.push(p);
            }
        }
        self.candidates.sort_by_key(|p| p.id.distance_to(key));
        self.candidates.truncate(KEPT_CANDIDATES);
    }
}

impl ChordNode {
    /// What this node knows about `key`: its owner, or better nodes to ask.
    pub(super) fn local_step(&self, key: Id) -> Step {
        let Some(&succ) = self.succs.first() else { return Step::Done { owner: self.me } };
        if self.pred.is_some_and(|p| key.in_half_open(p.id, self.me.id)) {
            return Step::Done { owner: self.me };
        }
        if key.in_half_open(self.me.id, succ.id) {
            return Step::Done { owner: succ };
        }
        let mut candidates = self.fingers.closest_preceding(self.me.id, key, REPLY_CANDIDATES);
        if candidates.is_empty() {
            // key ∉ (me, succ], so succ precedes it.
            candidates.push(succ);
        }
        Step::Next { candidates }
    }

    /// Starts a lookup of `key` from this node's own table.
    pub(super) fn start_lookup(&mut self, now: Instant, key: Id, purpose: Purpose) {
        let deadline = match &purpose {
            Purpose::Query { deadline, .. } => *deadline,
            _ => now + self.cfg.lookup_timeout,
        };
        let mut state = Box::new(LookupState::new(key, purpose, deadline, Vec::new()));
        match self.local_step(key) {
            Step::Done { owner } => self.owner_named(now, state, owner, self.me),
            Step::Next { candidates } => {
                state.merge(self.me.id, self.me.id, candidates);
                self.ask_next(now, state);
            }
        }
    }

    /// Asks the best remaining candidate, or gives up.
    pub(super) fn ask_next(&mut self, now: Instant, mut state: Box<LookupState>) {
        if state.hops >= self.cfg.max_hops {
            return self.lookup_done(now, *state, Err(OverlayError::HopBudget));
        }
        if now >= state.deadline {
            return self.lookup_done(now, *state, Err(OverlayError::Timeout));
        }
        if state.candidates.is_empty() {
            // Fall back on this node's successor list: still preceding the key, still alive.
            if self.joined() && !state.fell_back {
                state.fell_back = true;
                let key = state.key;
                let alts: Vec<Peer> = self.succs.iter().copied().filter(|p| p.id.in_open(self.me.id, key)).collect();
                state.merge(self.me.id, self.me.id, alts);
            }
            if state.candidates.is_empty() {
                return self.lookup_done(now, *state, Err(OverlayError::Timeout));
            }
        }
        let next = state.candidates.remove(0);
        state.hops += 1;
        let traffic = state.traffic();
        let key = state.key;
        self.request(now, next.addr, ChordMsg::FindSuccessor { key }, Waiting::Hop(state), traffic);
    }

    /// A hop answered.
    pub(super) fn on_step(&mut self, now: Instant, from: Peer, rid: u64, step: Step) {
        let Some(p) = self.take_pending(rid, from.addr, |w| matches!(w, Waiting::Hop(_))) else { return };
        let Waiting::Hop(mut state) = p.what else { return };
        match step {
            Step::Done { owner } if owner.addr == self.me.addr && state.purpose == Purpose::Join => {
                // `from` still has us as its successor (we dropped out of its ring):
                // our place is right after it; its list names who follows.
                if self.joined() {
                    return self.lookup_done(now, *state, Ok(owner));
                }
                self.request(now, from.addr, ChordMsg::GetSuccessorList, Waiting::JoinBehind, Traffic::Maintenance);
            }
            Step::Done { owner } => self.owner_named(now, state, owner, from),
            Step::Next { candidates } => {
                if candidates.len() > KEPT_CANDIDATES {
                    self.drop_input();
                }
                let candidates = candidates.into_iter().take(KEPT_CANDIDATES).collect();
                state.merge(self.me.id, from.id, candidates);
                self.ask_next(now, state);
            }
        }
    }

    /// A hop did not answer (the caller blamed it already): route around it.
    pub(super) fn hop_failed(&mut self, now: Instant, to: NodeAddr, mut state: Box<LookupState>) {
        state.fail(to);
        self.ask_next(now, state);
    }

    pub(super) fn lookup_done(&mut self, now: Instant, state: LookupState, result: Result<Peer, OverlayError>) {
        let LookupState { key, purpose, hops, .. } = state;
        match purpose {
            Purpose::User { token } => {
                let result = result.map(|owner| {
                    self.stats.lookups_ok += 1;
                    self.stats.lookup_hops += u64::from(hops);
                    crate::overlay::LookupResult { owner_id: owner.id, owner: owner.addr, hops }
                });
                if result.is_err() {
                    self.stats.lookups_failed += 1;
                }
                self.event(OverlayEvent::LookupDone { token, key, result });
            }
            Purpose::Join => self.join_done(now, result),
            Purpose::Finger { index } => self.finger_done(now, index, result),
            Purpose::Register { name, value, ttl_ms } => match result {
                Ok(owner) => self.register_at(now, owner, name, value, ttl_ms),
                Err(_) => self.retry_registration(now, &name, &value),
            },
            Purpose::Query { token, name, attempt, deadline } => match result {
                Ok(owner) => self.query_at(now, owner, token, name, attempt, deadline),
                Err(e) => self.event(OverlayEvent::QueryDone { token, name, result: Err(e) }),
            },
        }
    }
}
