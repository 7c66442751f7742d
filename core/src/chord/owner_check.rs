//! Owner checks: a lookup's answer is confirmed by the named owner itself.
//!
//! The last hop names its successor as the key's owner, from its own successor
//! pointer; under churn that pointer lags (a node joined between, or the successor
//! has just left or failed). Before an application lookup or a query reports an
//! owner named by another node, the asking node asks that owner for its
//! predecessor (one round trip, counted in [`ChordStats::owner_checks`], not in
//! the hops): if the key lies at or before the predecessor, the predecessor is
//! closer and is checked in turn; if the owner does not answer (twice: a message
//! may be lost) or is out of the ring, the next live node of the namer's successor
//! list is. An owner that names itself, or a
//! predecessor we cannot ask, is taken at its word.
//!
//! [`ChordStats::owner_checks`]: super::ChordStats::owner_checks

use std::time::Instant;

use super::lookup::LookupState;
use super::msg::{ChordMsg, Peer};
use super::node::ChordNode;
use super::requests::Waiting;

/// Most owner checks one lookup makes.
const MAX_CHECKS: u8 = 4;

impl ChordNode {
    /// The route named `owner` (`named_by` said so): report it, or check it first.
    pub(super) fn owner_named(&mut self, now: Instant, state: Box<LookupState>, owner: Peer, named_by: Peer) {
        let unchecked = owner.addr == self.me.addr || owner.addr == named_by.addr || !state.checks_owner();
        if unchecked || state.checks >= MAX_CHECKS || now >= state.deadline() {
            return self.lookup_done(now, *state, Ok(owner));
        }
        self.check_owner(now, state, owner, named_by, true);
    }

    /// Asks `owner` for its predecessor; `retry` once more if no answer comes.
    pub(super) fn check_owner(
        &mut self,
        now: Instant,
        mut state: Box<LookupState>,
        owner: Peer,
        named_by: Peer,
        retry: bool,
    ) {
        if now >= state.deadline() {
            return self.lookup_done(now, *state, Ok(owner));
        }
        state.checks += 1;
        self.stats.owner_checks += 1;
        let traffic = state.traffic();
        let what = Waiting::Check { state, owner, named_by, retry };
        self.request(now, owner.addr, ChordMsg::GetPredecessor, what, traffic);
    }

    /// The named owner's predecessor: if the key lies at or before it, it is closer.
    pub(super) fn on_owner_check(&mut self, now: Instant, state: Box<LookupState>, owner: Peer, pred: Option<Peer>) {
        match pred {
            Some(p) if !state.key().in_half_open(p.id, owner.id) && !state.has_failed(p.addr) => {
                self.owner_named(now, state, p, owner)
            }
            _ => self.lookup_done(now, *state, Ok(owner)),
        }
    }

    /// The named owner did not answer (the caller blamed it): the next node of the
    /// namer's successor list is the owner, if any is alive.
    pub(super) fn owner_check_failed(
        &mut self,
        now: Instant,
        mut state: Box<LookupState>,
        owner: Peer,
        named_by: Peer,
    ) {
        state.fail(owner.addr);
        if named_by.addr != self.me.addr {
            let traffic = state.traffic();
            let what = Waiting::Recover { state, named_by };
            return self.request(now, named_by.addr, ChordMsg::GetPredecessor, what, traffic);
        }
        let next = self.succs.iter().copied().find(|s| !state.has_failed(s.addr));
        match next {
            Some(s) => self.owner_named(now, state, s, self.me),
            None => self.ask_next(now, state),
        }
    }

    /// The namer's successor list, after its named owner failed a check.
    pub(super) fn on_recover(&mut self, now: Instant, state: Box<LookupState>, named_by: Peer, successors: Vec<Peer>) {
        match successors.into_iter().find(|s| !state.has_failed(s.addr) && s.addr != self.me.addr) {
            Some(s) => self.owner_named(now, state, s, named_by),
            None => self.ask_next(now, state),
        }
    }
}
