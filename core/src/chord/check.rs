//! The checker's view of a simulated Chord network: global knowledge that no node
//! has, used only to judge results (tests, benchmarks, the status page), never to
//! build a node's state.
//!
//! Not to be confused with `owner_check` (a node confirming a lookup's owner, part of
//! the protocol) or `ChordNode::check_invariants` (one node's own consistency).

use crate::id::Id;
use crate::machine::NodeAddr;
use crate::sim::{Liveness, NodeIdx, Sim};

use super::ChordNode;

/// The true ring: every live, joined node sorted by id.
#[derive(Debug, Clone)]
pub struct RingTruth {
    ring: Vec<(Id, NodeAddr)>,
}

/// How far the nodes' views are from the truth.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingReport {
    /// Live joined nodes.
    pub nodes: usize,
    /// Nodes whose successor is not the true one.
    pub wrong_successors: usize,
    /// Nodes whose predecessor is not the true one.
    pub wrong_predecessors: usize,
    /// Finger runs checked.
    pub fingers: usize,
    /// Finger runs whose node is not the true finger.
    pub wrong_fingers: usize,
}

impl RingReport {
    /// Every successor and predecessor is right.
    pub fn ring_ok(&self) -> bool {
        self.wrong_successors == 0 && self.wrong_predecessors == 0
    }

    /// The ring is right and so is every finger.
    pub fn converged(&self) -> bool {
        self.ring_ok() && self.wrong_fingers == 0
    }
}

/// The live nodes of `sim` that have joined, in index order.
fn joined_nodes(sim: &Sim<ChordNode>) -> impl Iterator<Item = &ChordNode> {
    sim.alive().map(|idx| sim.node(idx)).filter(|n| n.is_joined())
}

impl RingTruth {
    /// The truth over every live node of `sim` that has joined.
    pub fn of(sim: &Sim<ChordNode>) -> Self {
        let mut ring: Vec<(Id, NodeAddr)> = joined_nodes(sim).map(|n| (n.id(), n.me().addr)).collect();
        ring.sort_unstable();
        RingTruth { ring }
    }

    /// The ring these nodes would form (ids from their addresses): what a
    /// converged network of them looks like.
    pub fn of_addrs(addrs: impl IntoIterator<Item = NodeAddr>) -> Self {
        let mut ring: Vec<(Id, NodeAddr)> = addrs.into_iter().map(|a| (a.id(), a)).collect();
        ring.sort_unstable();
        ring.dedup();
        RingTruth { ring }
    }

    /// Every node, in id order.
    pub fn nodes(&self) -> &[(Id, NodeAddr)] {
        &self.ring
    }

    /// Number of nodes in the ring.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// Whether the ring is empty.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// The node responsible for `key`: the first id at or after it, wrapping.
    ///
    /// # Panics
    /// On an empty ring.
    pub fn owner(&self, key: Id) -> (Id, NodeAddr) {
        assert!(!self.ring.is_empty(), "owner of a key in an empty ring");
        let i = self.ring.partition_point(|(id, _)| *id < key);
        self.ring[i % self.ring.len()]
    }

    /// The true successor of node `id` (itself when alone).
    pub fn successor(&self, id: Id) -> (Id, NodeAddr) {
        self.owner(id.wrapping_add(Id::pow2(0)))
    }

    /// The true predecessor of node `id` (itself when alone).
    pub fn predecessor(&self, id: Id) -> (Id, NodeAddr) {
        let i = self.ring.partition_point(|(x, _)| *x < id);
        self.ring[(i + self.ring.len() - 1) % self.ring.len()]
    }

    /// Compares every live joined node's view with the truth. With `fingers`,
    /// checks the first and last index of each finger run too (O(N log N)).
    pub fn check(&self, sim: &Sim<ChordNode>, fingers: bool) -> RingReport {
        let mut r = RingReport { nodes: self.ring.len(), ..RingReport::default() };
        for n in joined_nodes(sim) {
            self.check_node(n, fingers, &mut r);
        }
        r
    }

    /// Whether every live joined node's successor, predecessor and fingers are the
    /// true ones: what `check(sim, true).converged()` says, but it stops at the
    /// first node that is wrong, so asking while a large network converges is cheap.
    pub fn converged(&self, sim: &Sim<ChordNode>) -> bool {
        joined_nodes(sim).all(|n| {
            let mut r = RingReport::default();
            self.check_node(n, true, &mut r);
            r.converged()
        })
    }

    fn check_node(&self, n: &ChordNode, fingers: bool, r: &mut RingReport) {
        if n.successor().id != self.successor(n.id()).0 {
            r.wrong_successors += 1;
        }
        let true_pred = self.predecessor(n.id()).0;
        // Alone, a node has no predecessor or itself: both are right.
        let pred_ok = match n.predecessor() {
            Some(p) => p.id == true_pred,
            None => true_pred == n.id(),
        };
        if !pred_ok {
            r.wrong_predecessors += 1;
        }
        if fingers {
            self.check_fingers(n, r);
        }
    }

    fn check_fingers(&self, n: &ChordNode, r: &mut RingReport) {
        let runs = n.fingers();
        for (k, (from, peer)) in runs.iter().enumerate() {
            let last = runs.get(k + 1).map_or(159, |(next, _)| u32::from(*next) - 1);
            r.fingers += 1;
            // A node never points a finger at itself: a run may go on over the
            // indices whose true finger is the node itself (they wrap past it).
            let owner = |i: u32| self.owner(n.id().add_pow2(i)).0;
            let ok = owner(u32::from(*from)) == peer.id && [peer.id, n.id()].contains(&owner(last));
            if !ok {
                r.wrong_fingers += 1;
            }
        }
    }

    /// Indices of live nodes in `sim`, in id order (for scenarios that pick
    /// consecutive nodes).
    pub fn in_id_order(sim: &Sim<ChordNode>) -> Vec<NodeIdx> {
        let mut v: Vec<(Id, NodeIdx)> =
            sim.alive().filter(|&i| sim.liveness(i) == Liveness::Alive).map(|i| (sim.node(i).id(), i)).collect();
        v.sort_unstable();
        v.into_iter().map(|(_, i)| i).collect()
    }
}
