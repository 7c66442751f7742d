//! The checker's view of a simulated CAN: global knowledge that no node has, used
//! only to judge results (tests, benchmarks), never to build a node's state.

use std::collections::{BTreeMap, BTreeSet};

use super::zone::{Point, Region, Zone, volumes_sum_to_one};
use super::{CanNode, MAX_DIMS};
use crate::id::Id;
use crate::machine::NodeAddr;
use crate::sim::Sim;

/// Every zone of the live joined nodes of a simulation, with its owners.
#[derive(Debug, Clone)]
pub struct CanTruth {
    dims: usize,
    /// Zone -> its owners (one, when all is well).
    zones: BTreeMap<Zone, Vec<(Id, NodeAddr)>>,
    /// Node -> its zones.
    nodes: BTreeMap<NodeAddr, (Id, Vec<Zone>)>,
    max_depth: usize,
}

/// How far the nodes' state is from the truth.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CanReport {
    /// Live joined nodes.
    pub nodes: usize,
    /// Zones owned in all.
    pub zones: usize,
    /// Zones owned by more than one node.
    pub multi_owned: usize,
    /// Pairs of distinct zones that overlap.
    pub overlaps: usize,
    /// Whether the zones' volumes sum to the whole space.
    pub volume_whole: bool,
    /// Nodes whose neighbour table is not exactly the nodes abutting them, each
    /// described with its current zones.
    pub wrong_tables: usize,
    /// Neighbours missing from tables, in all.
    pub missing_neighbours: usize,
    /// Table entries that are no neighbours (or stale descriptions), in all.
    pub extra_neighbours: usize,
    /// Neighbour table entries in all (the routing state).
    pub table_entries: usize,
}

impl CanReport {
    /// The zones tile the space: no overlap, one owner each, volumes summing to one.
    pub fn tiling_ok(&self) -> bool {
        self.multi_owned == 0 && self.overlaps == 0 && self.volume_whole
    }

    /// The tiling is right and so is every neighbour table.
    pub fn converged(&self) -> bool {
        self.tiling_ok() && self.wrong_tables == 0
    }
}

/// The live nodes of `sim` that have joined.
fn joined_nodes(sim: &Sim<CanNode>) -> impl Iterator<Item = &CanNode> {
    sim.alive().map(|idx| sim.node(idx)).filter(|n| n.is_joined())
}

impl CanTruth {
    /// The truth over every live node of `sim` that has joined.
    pub fn of(sim: &Sim<CanNode>) -> Self {
        let mut t = CanTruth { dims: 0, zones: BTreeMap::new(), nodes: BTreeMap::new(), max_depth: 0 };
        for n in joined_nodes(sim) {
            t.dims = n.config().dims;
            for z in n.zones() {
                t.zones.entry(*z).or_default().push((n.id(), n.me().addr));
                t.max_depth = t.max_depth.max(z.depth());
            }
            t.nodes.insert(n.me().addr, (n.id(), n.zones().to_vec()));
        }
        t
    }

    /// Number of live joined nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Every zone, in order.
    pub fn zones(&self) -> impl Iterator<Item = &Zone> {
        self.zones.keys()
    }

    /// The owner of point `p` (the first, if several): the zone of the split tree
    /// holding it that someone owns.
    pub fn owner(&self, p: &Point) -> Option<(Id, NodeAddr)> {
        if self.dims == 0 || p.dims() != self.dims {
            return None;
        }
        let mut z = Zone::root(self.dims);
        loop {
            if let Some(owners) = self.zones.get(&z) {
                return owners.first().copied();
            }
            if z.depth() >= self.max_depth {
                return None;
            }
            let (a, b) = z.halves()?;
            z = if a.contains(p) { a } else { b };
        }
    }

    /// The owner of registration key `key`.
    pub fn owner_of_key(&self, key: Id) -> Option<(Id, NodeAddr)> {
        if self.dims == 0 {
            return None;
        }
        self.owner(&Point::of_key(key, self.dims))
    }

    /// The zones that meet `r`, found down the split tree.
    fn meeting(&self, r: &Region, out: &mut BTreeSet<Zone>) {
        let mut stack = vec![Zone::root(self.dims)];
        while let Some(z) = stack.pop() {
            if !z.meets(r) {
                continue;
            }
            if self.zones.contains_key(&z) {
                out.insert(z);
            } else if z.depth() < self.max_depth
                && let Some((a, b)) = z.halves()
            {
                stack.push(a);
                stack.push(b);
            }
        }
    }

    /// The nodes whose zones abut `addr`'s, by address.
    pub fn true_neighbours(&self, addr: NodeAddr) -> BTreeSet<NodeAddr> {
        let mut found = BTreeSet::new();
        let Some((_, zones)) = self.nodes.get(&addr) else { return BTreeSet::new() };
        for z in zones {
            for k in 0..self.dims.min(MAX_DIMS) {
                for upper in [false, true] {
                    if let Some(r) = z.face(k, upper) {
                        self.meeting(&r, &mut found);
                    }
                }
            }
        }
        let mut out = BTreeSet::new();
        for z in found {
            for (_, a) in &self.zones[&z] {
                if *a != addr {
                    out.insert(*a);
                }
            }
        }
        out
    }

    /// Compares the tiling and every live joined node's table with the truth.
    pub fn check(&self, sim: &Sim<CanNode>) -> CanReport {
        let mut r = self.check_tiling();
        for n in joined_nodes(sim) {
            self.check_node(n, &mut r);
        }
        r
    }

    /// The tiling part of [`CanTruth::check`].
    pub fn check_tiling(&self) -> CanReport {
        let mut r = CanReport { nodes: self.nodes.len(), ..CanReport::default() };
        let all: Vec<Zone> = self.zones.keys().copied().collect();
        r.zones = self.zones.values().map(Vec::len).sum();
        r.multi_owned = self.zones.values().filter(|o| o.len() > 1).count();
        // Zones of one tree overlap only when one holds the other: look up each
        // zone's ancestors.
        for z in &all {
            let mut p = z.parent();
            while let Some(a) = p {
                if self.zones.contains_key(&a) {
                    r.overlaps += 1;
                }
                p = a.parent();
            }
        }
        r.volume_whole = !all.is_empty() && volumes_sum_to_one(&all);
        r
    }

    fn check_node(&self, n: &CanNode, r: &mut CanReport) {
        let want = self.true_neighbours(n.me().addr);
        let table = n.neighbours();
        r.table_entries += table.len();
        let mut wrong = false;
        for info in &table {
            let current = self.nodes.get(&info.peer.addr).map(|(_, z)| z);
            if !want.contains(&info.peer.addr) || current != Some(&info.zones) {
                r.extra_neighbours += 1;
                wrong = true;
            }
        }
        for a in &want {
            if !table.iter().any(|i| i.peer.addr == *a) {
                r.missing_neighbours += 1;
                wrong = true;
            }
        }
        if wrong {
            r.wrong_tables += 1;
        }
    }

    /// Whether the tiling and every table are right; stops at the first wrong
    /// node, so asking while a large network converges is cheap.
    pub fn converged(&self, sim: &Sim<CanNode>) -> bool {
        if !self.check_tiling().tiling_ok() {
            return false;
        }
        joined_nodes(sim).all(|n| {
            let mut r = CanReport::default();
            self.check_node(n, &mut r);
            r.wrong_tables == 0
        })
    }
}
