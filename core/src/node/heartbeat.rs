//! Silent failures: a host that is paused or cut off sends no reset, so a node
//! waiting on it would wait forever. Every `period` a node sends
//! [`NodeMsg::Heartbeat`] to each peer it has business with (the executors of
//! the jobs it submitted, the submitters of the jobs it runs, the nodes it
//! forwards requests to or streams output to); any message from a peer counts
//! as hearing from it. A peer not heard from for `timeout` is gone: its jobs fail
//! with a message naming it, and it is watched afresh (with a full timeout) if
//! there is business with it again.
//!
//! A heartbeat also lists the jobs its sender runs for the receiver. A node that
//! was cut off long enough for its submitter to fail the job, and then comes
//! back, hears from the submitter again (the overlay talks to it) but would
//! never learn that the job is gone: the submitter answers such a list with a
//! kill of every job it no longer runs there.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{DaemonNode, NodeMsg, Timer};
use crate::job::{JobId, JobMsg};
use crate::machine::{Action, NodeAddr};
use crate::wire::Envelope;

/// When each watched peer was last heard from.
#[derive(Debug)]
pub(super) struct Liveness {
    period: Duration,
    timeout: Duration,
    heard: BTreeMap<NodeAddr, Instant>,
}

impl Liveness {
    pub(super) fn new(period: Duration, timeout: Duration) -> Self {
        Liveness { period: period.max(Duration::from_millis(1)), timeout, heard: BTreeMap::new() }
    }

    /// How long it takes at most to find a peer lost by its silence.
    pub(super) fn detection(&self) -> Duration {
        self.timeout + self.period
    }

    /// A message from `peer` arrived.
    pub(super) fn heard(&mut self, peer: NodeAddr, now: Instant) {
        if let Some(t) = self.heard.get_mut(&peer) {
            *t = (*t).max(now);
        }
    }

    /// One round: `watched` are the peers with business now. Returns the peers to
    /// send a heartbeat and the silent ones (no longer watched), with how long
    /// they were silent. Peers no longer watched are forgotten.
    fn tick(&mut self, now: Instant, watched: &BTreeSet<NodeAddr>) -> (Vec<NodeAddr>, Vec<(NodeAddr, Duration)>) {
        self.heard.retain(|p, _| watched.contains(p));
        let (mut beat, mut silent) = (Vec::new(), Vec::new());
        for &p in watched {
            let last = *self.heard.entry(p).or_insert(now);
            let quiet = now.saturating_duration_since(last);
            if quiet > self.timeout {
                self.heard.remove(&p);
                silent.push((p, quiet));
            } else {
                beat.push(p);
            }
        }
        (beat, silent)
    }
}

impl DaemonNode {
    /// Every peer this node has business with right now.
    fn watched(&self) -> BTreeSet<NodeAddr> {
        let mut w = self.submitter.peers();
        w.extend(self.exec.submitters());
        w.extend(self.forward_targets());
        w.extend(self.remote_clients());
        w.extend(self.guards.holders());
        w.remove(&self.addr);
        w
    }

    pub(super) fn heartbeat(&mut self, now: Instant) {
        let watched = self.watched();
        let (beat, silent) = self.liveness.tick(now, &watched);
        for peer in beat {
            let running = self.exec.jobs_of(peer).collect();
            self.send(peer, NodeMsg::Heartbeat { running }, Bytes::new());
        }
        for (peer, quiet) in silent {
            tracing::info!(%peer, ?quiet, "a peer stopped answering");
            self.peer_gone(now, peer, Some(quiet));
        }
        self.timers.set(Timer::Heartbeat, now + self.liveness.period);
    }
}

impl DaemonNode {
    /// `from` says it runs `running` for this node: kill what is not so here.
    pub(super) fn check_running(&mut self, from: NodeAddr, running: Vec<JobId>) {
        for job in running.into_iter().take(MAX_LISTED) {
            if !self.submitter.runs_on(job, from) {
                tracing::info!(%job, node = %from, "killing a job this node no longer runs there");
                let kill = Envelope::new(self.addr.id(), self.addr, 0, NodeMsg::Job(JobMsg::Kill { job }));
                self.actions.push_back(Action::Send { to: from, msg: kill });
            }
        }
    }
}

/// Most jobs of one heartbeat looked at (a node runs a job per slot at most).
const MAX_LISTED: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_silent_only_past_the_timeout_and_watched_afresh_after() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut l = Liveness::new(s(1), s(10));
        let (a, b) = (NodeAddr::loopback(1, 1), NodeAddr::loopback(2, 1));
        let both: BTreeSet<NodeAddr> = [a, b].into();
        assert_eq!(l.tick(t0, &both), (vec![a, b], vec![]));
        l.heard(a, t0 + s(9));
        assert_eq!(l.tick(t0 + s(10), &both), (vec![a, b], vec![]), "exactly the timeout is not past it");
        assert_eq!(l.tick(t0 + s(11), &both), (vec![a], vec![(b, s(11))]));
        // b is watched afresh: a full timeout again.
        assert_eq!(l.tick(t0 + s(12), &both), (vec![a, b], vec![]));
        // A peer no longer watched is forgotten, and a message from it ignored.
        assert_eq!(l.tick(t0 + s(13), &[a].into()), (vec![a], vec![]));
        l.heard(b, t0 + s(30));
        assert_eq!(l.tick(t0 + s(30), &both), (vec![b], vec![(a, s(21))]));
    }
}
