//! Placement, all or nothing, through the nodes' queues.
//!
//! 1. **Candidates.** The nodes whose `res:any` line meets every requirement
//!    (and that every narrowing query named). When their slots in all, idle,
//!    are fewer than the job's ranks, the job can never run: it fails at once.
//! 2. **Wait.** The job asks the best candidates (most free slots said, least
//!    loaded, lowest address; at most [`MAX_WANTED`], and enough to hold the
//!    job) to queue it ([`JobMsg::Want`] with its priority). Each node grants
//!    its free slots to the jobs waiting there, earliest first, and says so
//!    ([`JobMsg::Grant`]); it takes a grant back when an earlier job arrives.
//!    The job holds nothing else while it waits and asks nothing: grants come
//!    as slots free up.
//! 3. **Offer** once the grants add up to every rank: each granting node gets
//!    an offer for as many ranks as it granted (most grants first), the others
//!    an [`JobMsg::Unwant`]. A node that refuses (its grant went to an earlier
//!    job meanwhile) or does not answer makes the job give back everything it
//!    holds ([`JobMsg::Kill`] before anything started) and wait again, so two
//!    jobs that each need most of the slots never hold half each.

use std::collections::BinaryHeap;

use super::*;

/// Most nodes one job waits at.
pub(super) const MAX_WANTED: usize = 32;
/// Once the grants cover the job, how long it waits for the nodes that have
/// not answered yet, so that its ranks spread over every node that can take
/// them rather than the first to answer.
pub(super) const BID_GRACE: Duration = Duration::from_millis(100);

impl Submission {
    /// Every query answered: the candidates, then the wait.
    pub(super) fn resolve(&mut self, now: Instant) {
        for (addr, node) in self.candidates() {
            self.nodes.insert(addr, node);
        }
        if self.fits() {
            self.enqueue(now);
        }
    }

    /// Once a job taken over has its queries answered: the nodes matching
    /// every requirement it does not know yet are candidates for its ranks
    /// to move to.
    pub(super) fn learn_candidates(&mut self) {
        for (addr, node) in self.candidates() {
            self.nodes.entry(addr).or_insert(node);
        }
    }

    /// The nodes the answered queries list as meeting every requirement,
    /// not lost before (and the count per requirement, for a job that does
    /// not fit).
    fn candidates(&mut self) -> Vec<(NodeAddr, Node)> {
        let mut all: BTreeMap<NodeAddr, Resources> = BTreeMap::new();
        let mut narrowed: BTreeMap<String, BTreeSet<NodeAddr>> = BTreeMap::new();
        for q in &self.queries {
            let values = q.values.as_deref().unwrap_or_default();
            if q.name == ANY_NAME {
                for (addr, res) in values.iter().filter_map(|v| Resources::parse_any_value(v).ok()) {
                    // A node seen twice (a line it replaced, not yet withdrawn
                    // everywhere): the newest line, or else the fewer free slots.
                    let keep = all.get(&addr).is_none_or(|old| {
                        (old.generation, std::cmp::Reverse(old.slots)) < (res.generation, std::cmp::Reverse(res.slots))
                    });
                    if keep {
                        all.insert(addr, res);
                    }
                }
            } else {
                narrowed.insert(q.name.clone(), values.iter().filter_map(|v| v.trim().parse().ok()).collect());
            }
        }
        self.per_requirement = per_requirement_counts(&self.desc.requirements, &all, &narrowed);
        let mut found = Vec::new();
        for (addr, res) in all {
            let listed =
                |r: &Requirement| r.query_name().is_none_or(|n| narrowed.get(&n).is_some_and(|s| s.contains(&addr)));
            // Lines of older nodes carry only free slots; newer ones their total too.
            let total = res.slots_total.max(res.slots);
            let lost_before = self.lost_nodes.contains(&addr);
            if total > 0 && !lost_before && self.desc.requirements.iter().all(|r| r.matches(&res) && listed(r)) {
                found.push((addr, Node::candidate(total, res.slots.min(total), res.load_milli.unwrap_or(0))));
            }
        }
        found
    }

    /// Whether the open candidates, idle, have slots enough; fails the job if not.
    fn fits(&mut self) -> bool {
        let open = self.nodes.values().filter(|n| !n.closed);
        let slots: u64 = open.clone().map(|n| u64::from(n.slots)).sum();
        if slots >= u64::from(self.desc.processes) {
            return true;
        }
        let err = SubmitError::NotEnoughCandidates {
            needed: self.desc.processes,
            slots,
            nodes: open.count(),
            rejected: self.closed,
            per_requirement: self.per_requirement.clone(),
        };
        // Nodes that refused the submitter's key say so first.
        let err = match self.refusals.is_empty() {
            true => err,
            false => SubmitError::Refused { reasons: self.refusals.clone(), cause: Box::new(err) },
        };
        self.fail(err);
        false
    }

    /// Waits at the best open candidates (see the module docs).
    fn enqueue(&mut self, now: Instant) {
        use std::cmp::Reverse;
        self.phase = Phase::Queued;
        // Ties (every node equally free, as on an idle network) go by a hash of
        // the job and the node: jobs submitted together then wait at different
        // nodes instead of all at the lowest addresses.
        let job = self.job;
        let spread = |a: &NodeAddr| Id::hash_parts([job.0.as_bytes(), a.to_string().as_bytes()]);
        let mut order: Vec<(Reverse<u32>, u32, Id, NodeAddr, u32)> = self
            .nodes
            .iter()
            .filter(|(_, n)| !n.closed)
            .map(|(a, n)| (Reverse(n.free_hint), n.load_milli / 250, spread(a), *a, n.slots))
            .collect();
        order.sort();
        // The node a migrating rank goes to is waited at first.
        if let Some((_, to)) = self.toward {
            if let Some(i) = order.iter().position(|o| o.3 == to) {
                order[..=i].rotate_right(1);
            }
        }
        let (mut chosen, mut slots) = (Vec::new(), 0u64);
        for (_, _, _, addr, n) in order {
            if chosen.len() >= MAX_WANTED && slots >= u64::from(self.desc.processes) {
                break;
            }
            chosen.push(addr);
            slots += u64::from(n);
        }
        let (job, ranks, priority) = (self.wire, self.desc.processes, self.priority);
        for to in chosen {
            if let Some(n) = self.nodes.get_mut(&to) {
                (n.wanted, n.granted, n.ahead, n.answered) = (true, 0, 0, false);
            }
            self.send(to, JobMsg::Want { job, ranks, priority }, Bytes::new());
        }
        self.try_offer(now);
    }

    /// A node holds `slots` for this job, with `ahead` jobs before it there.
    pub(super) fn on_grant(&mut self, now: Instant, from: NodeAddr, slots: u32, ahead: u32) -> Option<()> {
        let n = self.nodes.get_mut(&from).filter(|n| n.wanted && !n.closed)?;
        (n.granted, n.ahead, n.answered) = (slots.min(n.slots), ahead, true);
        if self.phase == Phase::Queued {
            self.try_offer(now);
        }
        Some(())
    }

    /// Slots held for the job at the nodes it waits at.
    fn granted(&self) -> u64 {
        self.nodes.values().filter(|n| n.wanted && !n.closed).map(|n| u64::from(n.granted)).sum()
    }

    /// Offers every rank once the grants cover them all (and every node it
    /// waits at answered, or [`BID_GRACE`] passed).
    pub(super) fn try_offer(&mut self, now: Instant) {
        use std::cmp::Reverse;
        // Nothing is offered before every file is read (and, for a signed
        // job, found to be the file signed): see `handle_file_read`.
        if self.phase != Phase::Queued || self.files.iter().any(Option::is_none) || self.reading_cut() {
            return;
        }
        let all_answered = self.nodes.values().filter(|n| n.wanted && !n.closed).all(|n| n.answered);
        let grace_over = all_answered || self.bid_deadline.is_some_and(|d| d <= now);
        if !grace_over {
            // Let the other nodes answer: to spread the ranks, or (if the
            // grants do not cover the job yet) before saying it waits.
            let grace = if self.toward_pending() { super::migrate::TOWARD_GRACE } else { BID_GRACE };
            self.bid_deadline.get_or_insert(now + grace);
            return;
        }
        self.bid_deadline = None;
        if self.granted() < self.unplaced.len() as u64 {
            return self.report_waiting();
        }
        // A node a rank is moving off last (used only when no other has
        // room), then most grants first, ties to the least loaded, then the
        // lowest address.
        let mut offers: BTreeMap<NodeAddr, Vec<u32>> = BTreeMap::new();
        self.place_toward(&mut offers);
        let avoid = &self.avoid;
        let mut heap: BinaryHeap<(bool, u32, Reverse<u32>, Reverse<NodeAddr>)> = self
            .nodes
            .iter()
            .map(|(a, n)| (a, n, offers.get(a).map_or(0, |r| r.len() as u32)))
            .filter(|(_, n, taken)| n.wanted && !n.closed && n.granted > *taken)
            .map(|(a, n, taken)| (!avoid.contains(a), n.granted - taken, Reverse(n.load_milli), Reverse(*a)))
            .collect();
        while let Some(&rank) = self.unplaced.first() {
            let Some((other, left, load, Reverse(addr))) = heap.pop() else { break };
            self.unplaced.remove(&rank);
            offers.entry(addr).or_default().push(rank);
            if left > 1 {
                heap.push((other, left - 1, load, Reverse(addr)));
            }
        }
        self.phase = Phase::Placing;
        self.waiting = None;
        let job = self.wire;
        let waiting_at: Vec<NodeAddr> = self.nodes.iter().filter(|(_, n)| n.wanted).map(|(a, _)| *a).collect();
        for to in waiting_at {
            if let Some(n) = self.nodes.get_mut(&to) {
                (n.wanted, n.granted) = (false, 0);
            }
            // An offer takes the node's grant; the others are given back.
            if !offers.contains_key(&to) {
                self.send(to, JobMsg::Unwant { job }, Bytes::new());
            }
        }
        let digest = self.files[0].as_ref().map(|f| f.2).unwrap_or_default();
        for (to, ranks) in offers {
            if let Some(n) = self.nodes.get_mut(&to) {
                n.offer = Some((ranks.clone(), now + self.config.offer_timeout));
            }
            let size = self.desc.processes;
            let msg = match &self.auth {
                Some(auth) => JobMsg::SignedOffer { job, ranks, size, digest, auth: auth.clone() },
                None => JobMsg::Offer { job, ranks, size, digest },
            };
            self.send(to, msg, Bytes::new());
        }
    }

    /// `node` refused, stalled or went before anything started: everything the
    /// job holds is given back and it waits again (without `node` if `close`).
    pub(super) fn retreat(&mut self, now: Instant, node: NodeAddr, close: bool) {
        if close {
            self.close(node);
        }
        let job = self.wire;
        let holding: Vec<NodeAddr> =
            self.nodes.iter().filter(|(_, n)| !n.accepted.is_empty() || n.offer.is_some()).map(|(a, _)| *a).collect();
        for to in holding {
            if let Some(n) = self.nodes.get_mut(&to) {
                (n.accepted, n.offer, n.stage) = (Vec::new(), None, Stage::NotSent);
            }
            if !(close && to == node) {
                self.send(to, JobMsg::Kill { job }, Bytes::new());
            }
        }
        for r in &mut self.ranks {
            r.node = None;
        }
        self.unplaced = (0..self.desc.processes).collect();
        if self.fits() {
            self.enqueue(now);
        }
    }

    /// A candidate is gone while the job waits: it waits at the others.
    pub(super) fn drop_candidate(&mut self, now: Instant, node: NodeAddr) {
        if self.nodes.get(&node).is_none_or(|n| n.closed) {
            return;
        }
        self.close(node);
        if self.fits() && self.phase == Phase::Queued {
            // The nodes it waited at may no longer hold it all: wait at more.
            let waiting: u64 = self.nodes.values().filter(|n| n.wanted && !n.closed).map(|n| u64::from(n.slots)).sum();
            if waiting < u64::from(self.desc.processes) {
                self.enqueue(now);
            } else {
                self.try_offer(now);
            }
        }
    }

    /// No more offers to `addr`.
    fn close(&mut self, addr: NodeAddr) {
        let Some(n) = self.nodes.get_mut(&addr) else { return };
        if !n.closed {
            (n.closed, n.wanted, n.granted) = (true, false, 0);
            self.closed += 1;
        }
    }

    /// Why the job waits, while it does: "waiting for 4 slot(s) on nodes
    /// matching linux; 2 held for it, 1 job(s) ahead".
    pub fn waiting_reason(&self) -> Option<String> {
        if self.phase > Phase::Queued {
            return None;
        }
        let reqs: Vec<String> = self.desc.requirements.iter().map(ToString::to_string).collect();
        let ahead = self.nodes.values().filter(|n| n.wanted && !n.closed).map(|n| n.ahead).min().unwrap_or(0);
        Some(format!(
            "waiting for {} slot(s) on nodes matching {}; {} held for it, {ahead} job(s) ahead",
            self.desc.processes,
            reqs.join(" and "),
            self.granted()
        ))
    }

    /// Tells the watchers why the job waits, when that changed.
    fn report_waiting(&mut self) {
        let reason = self.waiting_reason();
        if reason.is_some() && reason != self.waiting {
            self.waiting.clone_from(&reason);
            let reason = reason.unwrap_or_default();
            self.event(SubmitEvent::Queued { job: self.job, reason });
        }
    }
}
