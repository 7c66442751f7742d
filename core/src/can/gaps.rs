//! Gaps: space next to a node's zones that no neighbour it knows covers.
//!
//! Every other heartbeat a node checks that the known zones cover the region just
//! outside each face of its own. A point left uncovered means a neighbour nobody
//! told it of (zones moved on both sides of it at once), or space whose owner
//! failed and is not taken over yet. The node routes to the point (from a node it
//! knew, if it has no neighbour left): an owner found is probed and becomes a
//! neighbour, and a conflict with it comes to light (see `table`).
//!
//! Space nobody owns is never claimed from here: a node that cannot find the
//! owner of a point next to it cannot tell a hole from a part of the network it
//! has lost touch with, and claiming would make that split permanent (two
//! networks, each sure it covers the whole space). Takeovers alone fill holes.

use std::time::Instant;

use rand::Rng;

use super::node::CanNode;
use super::route::Purpose;
use super::zone::Zone;

impl CanNode {
    /// Looks for uncovered space next to our zones, routes to it, and claims it
    /// once it has stayed uncovered long enough.
    pub(crate) fn discover_gaps(&mut self, now: Instant) {
        if self.discovering || self.leaving.is_some() || self.zones.is_empty() || !self.joined() {
            return;
        }
        let known: Vec<Zone> =
            self.table.iter().flat_map(|n| n.info.zones.iter().copied()).chain(self.zones.iter().copied()).collect();
        let gap = self.zones.iter().find_map(|z| {
            (0..self.dims()).find_map(|k| {
                [false, true].into_iter().find_map(|up| z.face(k, up).and_then(|r| r.uncovered_point(&known)))
            })
        });
        let Some(target) = gap else { return };
        self.discovering = true;
        // Our neighbours all lie farther from the point than we do (it touches our
        // zone), so a route through them has to come round the far side; every
        // other try starts from a node we heard from that is not a neighbour (route
        // askers come from all over), from which the point may be near.
        let via = if self.table.iter().next().is_none() || self.discover_failures % 2 == 0 {
            let outside: Vec<_> = self
                .known
                .iter()
                .chain(&self.bootstrap)
                .copied()
                .filter(|a| !self.is_dead(*a, now) && self.table.get(*a).is_none())
                .collect();
            let pick = if outside.is_empty() { None } else { Some(outside[self.rng.random_range(0..outside.len())]) };
            pick.or_else(|| self.known.last().copied())
        } else {
            None
        };
        self.start_route_via(now, target, Purpose::Discover, via);
    }
}
