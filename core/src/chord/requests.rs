//! Outstanding requests: what each waits for, their ids and deadlines, and what
//! the node does when one gets no useful answer.

use std::time::Instant;

use super::lookup::LookupState;
use super::msg::{ChordMsg, Peer};
use super::node::{ChordNode, Timer, Traffic};
use crate::machine::NodeAddr;
use crate::overlay::store::QueryState;

/// What an outstanding request waits for.
#[derive(Debug)]
pub(super) enum Waiting {
    /// One hop of a lookup.
    Hop(Box<LookupState>),
    /// The predecessor of the owner a lookup's route named (see `owner_check`).
    Check { state: Box<LookupState>, owner: Peer, named_by: Peer, retry: bool },
    /// The successor list of the node that named an owner which failed its check.
    Recover { state: Box<LookupState>, named_by: Peer },
    /// The successor's predecessor (stabilize).
    Stabilize,
    /// The predecessor's pong.
    PingPredecessor,
    /// A query's values from the key's owner.
    Query(Box<QueryState>),
    /// The successor list of a node that still has this (joining) node as its
    /// successor: the join goes on from there.
    JoinBehind,
    /// The successor list of the node the join lookup named: it confirms the join.
    /// If it does not answer, the next of `fallback` (nearest first) is asked.
    SuccessorList { fallback: Vec<Peer> },
    /// The predecessor of finger `index`'s node, to check the finger still holds.
    FingerCheck { index: u32, node: Peer },
    /// The successor's fingers, right after joining.
    Fingers,
    /// The owner's confirmation that it stored one of our own registrations.
    Register { name: String, value: String },
}

/// One outstanding request.
pub(super) type Pending = crate::overlay::requests::Pending<Waiting>;

impl Waiting {
    /// The deadline of the lookup or query the request serves, if any: no answer
    /// is waited for past it.
    fn deadline(&self) -> Option<Instant> {
        match self {
            Waiting::Hop(s) | Waiting::Check { state: s, .. } | Waiting::Recover { state: s, .. } => Some(s.deadline()),
            Waiting::Query(q) => Some(q.deadline),
            _ => None,
        }
    }
}

/// The requests a node has outstanding, by request id, and the id the next one gets.
///
/// Invariants ([`Outstanding::check_invariants`]): request ids are non-zero (0
/// marks a one-way message) and distinct.
#[derive(Debug)]
pub(super) struct Outstanding {
    pending: crate::overlay::requests::Requests<Waiting>,
    /// The id of the next request; never 0.
    next_id: u64,
}

impl Outstanding {
    /// No request yet; the first gets id `first` (made non-zero).
    pub(super) fn new(first: u64) -> Self {
        Outstanding { pending: Default::default(), next_id: first.max(1) }
    }

    /// Remembers a request to `to`, answered by `deadline`; returns its id.
    pub(super) fn insert(&mut self, to: NodeAddr, deadline: Instant, what: Waiting) -> u64 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        self.pending.insert(id, Pending { to, deadline, what });
        id
    }

    /// Takes request `id` if it went to `from` and `fits` the reply.
    pub(super) fn take_reply(&mut self, id: u64, from: NodeAddr, fits: fn(&Waiting) -> bool) -> Option<Pending> {
        match self.pending.get(&id) {
            Some(p) if p.to == from && fits(&p.what) => self.pending.remove(&id),
            _ => None,
        }
    }

    /// Takes request `id` if it went to `from`, whatever it waits for.
    pub(super) fn take_from(&mut self, id: u64, from: NodeAddr) -> Option<Pending> {
        self.take_reply(id, from, |_| true)
    }

    /// Takes request `id`.
    pub(super) fn remove(&mut self, id: u64) -> Option<Pending> {
        self.pending.remove(&id)
    }

    /// Ids of the requests whose deadline has come, oldest first.
    pub(super) fn ids_due(&self, now: Instant) -> Vec<u64> {
        self.pending.ids_where(|p| p.deadline <= now)
    }

    /// Ids of the requests to `addr`, oldest first.
    pub(super) fn ids_to(&self, addr: NodeAddr) -> Vec<u64> {
        self.pending.ids_where(|p| p.to == addr)
    }

    /// Ids of the requests to `addr` that `what` fits, oldest first.
    pub(super) fn ids_to_where(&self, addr: NodeAddr, what: fn(&Waiting) -> bool) -> Vec<u64> {
        self.pending.ids_where(|p| p.to == addr && what(&p.what))
    }

    /// Whether a request to `addr` that `what` fits is outstanding.
    pub(super) fn any_to(&self, addr: NodeAddr, what: fn(&Waiting) -> bool) -> bool {
        self.pending.any(|p| p.to == addr && what(&p.what))
    }

    /// Whether any outstanding request fits `what`.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(super) fn any(&self, what: impl Fn(&Waiting) -> bool) -> bool {
        self.pending.any(|p| what(&p.what))
    }

    /// The earliest deadline.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.pending.next_deadline()
    }

    /// Forgets every request (graceful leave).
    pub(super) fn clear(&mut self) {
        self.pending.clear();
    }

    /// Every outstanding request as (id, where it went), oldest first.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(super) fn list(&self) -> Vec<(u64, NodeAddr)> {
        self.pending.ids_where(|_| true).into_iter().filter_map(|id| Some((id, self.pending.get(&id)?.to))).collect()
    }

    /// The oldest request's id, for tests.
    #[cfg(test)]
    pub(super) fn first_id(&self) -> Option<u64> {
        self.pending.first_id()
    }

    /// Panics if an invariant (see the type's docs) does not hold.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(super) fn check_invariants(&self) {
        let mut ids: Vec<u64> = self.list().into_iter().map(|(id, _)| id).collect();
        assert!(ids.iter().all(|id| *id != 0), "a request with id 0");
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n, "two requests share an id");
        assert_ne!(self.next_id, 0, "the next request id is 0");
    }
}

/// Why a request got no useful answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NoAnswer {
    /// Nothing came back in time, or the message could not be sent.
    Silent,
    /// The peer answered [`ChordMsg::NotJoined`]: alive, but out of the ring.
    NotJoined,
}

impl ChordNode {
    /// Sends a request and remembers what its answer is for.
    pub(super) fn request(&mut self, now: Instant, to: NodeAddr, body: ChordMsg, what: Waiting, traffic: Traffic) {
        let mut deadline = now + self.cfg.request_timeout;
        // A lookup's or query's own deadline caps the wait for any one answer.
        if let Some(d) = what.deadline() {
            deadline = deadline.min(d);
        }
        let id = self.requests.insert(to, deadline, what);
        self.send(to, id, body, traffic);
    }

    /// Sets the requests' timer to the earliest deadline.
    pub(super) fn rearm_requests(&mut self) {
        match self.requests.next_deadline() {
            Some(t) => self.timers.set(Timer::Requests, t),
            None => self.timers.clear(Timer::Requests),
        }
    }

    /// Takes the request `id` if it went to `from` and `fits` the reply.
    /// Anything else is a reply nobody asked for: dropped and counted.
    pub(super) fn take_pending(&mut self, id: u64, from: NodeAddr, fits: fn(&Waiting) -> bool) -> Option<Pending> {
        let taken = self.requests.take_reply(id, from, fits);
        if taken.is_none() {
            self.drop_input();
        }
        taken
    }

    /// Fails every request whose deadline has come.
    pub(super) fn expire_requests(&mut self, now: Instant) {
        let due = self.requests.ids_due(now);
        self.fail_requests(now, due, NoAnswer::Silent);
    }

    /// Fails every outstanding request to `addr` at once (it left: no answer comes).
    pub(super) fn abandon_requests_to(&mut self, now: Instant, addr: NodeAddr) {
        let ids = self.requests.ids_to(addr);
        self.fail_requests(now, ids, NoAnswer::Silent);
    }

    /// Fails the requests `ids` still outstanding, in order: failing one may
    /// settle or add others.
    pub(super) fn fail_requests(&mut self, now: Instant, ids: Vec<u64>, why: NoAnswer) {
        for id in ids {
            if let Some(p) = self.requests.remove(id) {
                self.request_failed(now, p, why);
            }
        }
    }

    pub(super) fn request_failed(&mut self, now: Instant, p: Pending, why: NoAnswer) {
        self.stats.request_failures += 1;
        match p.what {
            Waiting::Hop(state) => {
                if now < state.deadline() {
                    // Out of time is the lookup's fault, not the hop's.
                    self.blame(now, p.to, why);
                }
                self.hop_failed(now, p.to, state);
            }
            Waiting::Check { state, owner, named_by, retry } => {
                if retry && why == NoAnswer::Silent {
                    // A lost message is not a failed owner: ask once more.
                    return self.check_owner(now, state, owner, named_by, false);
                }
                if now < state.deadline() {
                    self.blame(now, p.to, why);
                }
                self.owner_check_failed(now, state, owner, named_by);
            }
            Waiting::Recover { state, .. } => {
                if now < state.deadline() {
                    self.blame(now, p.to, why);
                }
                self.hop_failed(now, p.to, state);
            }
            Waiting::Stabilize => {
                self.stabilize_busy = false;
                self.blame(now, p.to, why);
            }
            Waiting::PingPredecessor => {
                self.ping_busy = false;
                self.blame(now, p.to, why);
            }
            Waiting::Query(q) => {
                if now < q.deadline {
                    self.blame(now, p.to, why);
                }
                self.query_failed(now, *q);
            }
            Waiting::FingerCheck { .. } => {
                self.fingers.idle();
                self.blame(now, p.to, why);
            }
            Waiting::SuccessorList { fallback } => self.confirm_join_with(now, fallback),
            Waiting::JoinBehind => self.join_failed(now),
            Waiting::Fingers => {}
            Waiting::Register { name, value } => {
                self.blame(now, p.to, why);
                self.retry_registration(now, &name, &value);
            }
        }
    }

    fn blame(&mut self, now: Instant, addr: NodeAddr, why: NoAnswer) {
        match why {
            NoAnswer::Silent => self.peer_silent(now, addr),
            NoAnswer::NotJoined => self.peer_not_joined(now, addr),
        }
    }
}
