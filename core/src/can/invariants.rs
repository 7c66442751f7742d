//! What must hold of one CAN node after every input, checked by the fuzzer and
//! the tests (the network-wide properties, which need every node's state, are in
//! [`super::check`]).

use super::node::{CanNode, MAX_REJOIN, Phase};

impl CanNode {
    /// Panics if an invariant does not hold: the zones it owns are of the
    /// network's dimensions, sorted and pairwise disjoint; the neighbour table is
    /// sorted by address without repeats, never names this node, and holds zones
    /// of the network's dimensions only; the lists of remembered peers stay
    /// bounded; the store keeps its limit; a node that left owns nothing and
    /// waits for nothing.
    pub(crate) fn check_invariants(&self) {
        let (me, dims) = (self.me.addr, self.cfg.dims);
        for (k, z) in self.zones.iter().enumerate() {
            assert_eq!(z.dims(), dims, "an own zone of {} dimensions", z.dims());
            if let Some(next) = self.zones.get(k + 1) {
                assert!(z < next, "own zones not sorted or repeated: {z:?}, {next:?}");
            }
            assert!(self.zones[..k].iter().all(|o| !o.intersects(z)), "own zones overlap: {z:?}");
        }
        let addrs: Vec<_> = self.table.iter().map(|n| n.info.peer.addr).collect();
        assert!(addrs.windows(2).all(|w| w[0] < w[1]), "the neighbour table is not sorted by address");
        assert!(!addrs.contains(&me), "the neighbour table names this node");
        for n in self.table.iter() {
            assert!(n.info.zones.iter().all(|z| z.dims() == dims), "a neighbour's zone of other dimensions");
        }
        assert!(self.known.len() <= MAX_REJOIN, "{} peers remembered", self.known.len());
        assert!(self.rejoin.len() <= MAX_REJOIN, "{} peers remembered to rejoin", self.rejoin.len());
        let stored = self.store.len();
        assert!(stored <= self.cfg.limits.total, "{stored} values stored, limit {}", self.cfg.limits.total);
        if self.phase == Phase::Left {
            assert!(self.zones.is_empty(), "a node that left owns zones");
        }
    }
}
