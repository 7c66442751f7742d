//! What the benchmark needs of each overlay beyond [`Overlay`]: its checker (the
//! truth with global knowledge), its hop theory, and how a joiner picks a contact.

use p2pmp_core::can::check::CanTruth;
use p2pmp_core::can::{CanConfig, CanMsg, CanNode};
use p2pmp_core::chord::check::RingTruth;
use p2pmp_core::chord::{ChordConfig, ChordMsg, ChordNode};
use p2pmp_core::id::Id;
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::overlay::Overlay;
use p2pmp_core::sim::Sim;

/// An overlay as the benchmark drives it.
pub(crate) trait BenchOverlay: Overlay + 'static {
    /// The checker's view of a network.
    type Truth;

    /// `chord` or `can`, as in the JSON.
    const NAME: &'static str;
    /// Whether a network is built with [`BenchOverlay::build_contact`].
    const NEAR_CONTACT: bool = false;

    /// The node configuration for a run (`dims` for CAN; routes sized for `n`).
    fn config(dims: usize, n: usize) -> Self::Config;
    /// Mean lookup hops the theory expects at `n` nodes.
    fn theory(dims: usize, n: usize) -> f64;
    /// How the theory reads, for tables and plots.
    fn theory_label(dims: usize) -> String;

    fn truth(sim: &Sim<Self>) -> Self::Truth;
    /// Live joined nodes.
    fn truth_len(t: &Self::Truth) -> usize;
    /// The true owner of `key`.
    fn owner(t: &Self::Truth, key: Id) -> Option<Id>;
    /// Whether every node's routing state is the true one.
    fn converged(t: &Self::Truth, sim: &Sim<Self>) -> bool;
    /// Whether the part of the routing state that makes lookups right is (Chord:
    /// successors and predecessors, fingers aside; CAN: zones and neighbours, all
    /// of its routing state).
    fn correct(t: &Self::Truth, sim: &Sim<Self>) -> bool;
    /// The checker's full report, for messages.
    fn report(t: &Self::Truth, sim: &Sim<Self>) -> String;

    /// A contact for a node built with `cfg` and `seed` when the network is
    /// built (not during churn): `None` picks a random joined node.
    fn build_contact(_t: &Self::Truth, _cfg: &Self::Config, _seed: u64) -> Option<NodeAddr> {
        None
    }

    /// Messages sent so far by kind, summed over every node, largest first.
    fn kinds(sim: &Sim<Self>) -> Vec<(&'static str, u64)>;

    /// Joins per virtual second when building `n` nodes, unless set on the command line.
    fn join_rate(_cfg: &Self::Config, n: usize) -> usize {
        crate::net::default_join_rate(n)
    }

    /// Round trips besides the hops that checked an owner (Chord's `verify`).
    fn owner_checks(_sim: &Sim<Self>) -> Option<u64> {
        None
    }
}

fn kinds_of<const K: usize>(
    names: &[&'static str],
    counts: impl Iterator<Item = [u64; K]>,
) -> Vec<(&'static str, u64)> {
    let mut by_kind = [0u64; K];
    for c in counts {
        for (k, n) in c.iter().enumerate() {
            by_kind[k] += n;
        }
    }
    let mut v: Vec<(&'static str, u64)> = by_kind.into_iter().enumerate().map(|(k, n)| (names[k], n)).collect();
    v.retain(|(_, n)| *n > 0);
    v.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    v
}

/// Short names of [`ChordMsg`] kinds, by [`ChordMsg::kind`].
const CHORD_KINDS: [&str; ChordMsg::KINDS] = [
    "FindSucc",
    "FindSuccReply",
    "GetPred",
    "Pred",
    "Notify",
    "Ping",
    "Pong",
    "Register",
    "Query",
    "QueryResult",
    "LeavingToPred",
    "LeavingToSucc",
    "KeyTransfer",
    "GetSuccList",
    "SuccList",
    "GetFingers",
    "Fingers",
    "NewPred",
    "Registered",
    "NotOwner",
    "NotJoined",
    "Handover",
    "Pull",
];

impl BenchOverlay for ChordNode {
    type Truth = RingTruth;
    const NAME: &'static str = "chord";

    fn config(_dims: usize, _n: usize) -> ChordConfig {
        ChordConfig::default()
    }

    fn theory(_dims: usize, n: usize) -> f64 {
        0.5 * (n as f64).log2()
    }

    fn theory_label(_dims: usize) -> String {
        "0.5log2 N".into()
    }

    fn truth(sim: &Sim<Self>) -> RingTruth {
        RingTruth::of(sim)
    }

    fn truth_len(t: &RingTruth) -> usize {
        t.len()
    }

    fn owner(t: &RingTruth, key: Id) -> Option<Id> {
        (!t.is_empty()).then(|| t.owner(key).0)
    }

    fn converged(t: &RingTruth, sim: &Sim<Self>) -> bool {
        t.converged(sim)
    }

    fn correct(t: &RingTruth, sim: &Sim<Self>) -> bool {
        t.check(sim, false).ring_ok()
    }

    fn report(t: &RingTruth, sim: &Sim<Self>) -> String {
        format!("{:?}", t.check(sim, true))
    }

    fn kinds(sim: &Sim<Self>) -> Vec<(&'static str, u64)> {
        kinds_of(&CHORD_KINDS, (0..sim.len()).map(|i| sim.node(i).stats().sent_by_kind))
    }

    fn owner_checks(sim: &Sim<Self>) -> Option<u64> {
        Some((0..sim.len()).map(|i| sim.node(i).stats().owner_checks).sum())
    }
}

impl BenchOverlay for CanNode {
    type Truth = CanTruth;
    const NAME: &'static str = "can";
    const NEAR_CONTACT: bool = true;

    /// Routes of (d/4)·N^(1/d) hops need a budget and a deadline to match: four
    /// times the mean, and 150 ms a hop (a round trip is at most 100 ms here).
    fn config(dims: usize, n: usize) -> CanConfig {
        let hops = (4.0 * Self::theory(dims, n)).ceil() as u32 + 64;
        let d = CanConfig::default();
        CanConfig {
            dims,
            max_hops: hops.max(d.max_hops),
            lookup_timeout: d.lookup_timeout.max(std::time::Duration::from_millis(150) * hops),
            ..d
        }
    }

    fn theory(dims: usize, n: usize) -> f64 {
        dims as f64 / 4.0 * (n as f64).powf(1.0 / dims as f64)
    }

    fn theory_label(dims: usize) -> String {
        format!("({dims}/4)N^(1/{dims})")
    }

    fn truth(sim: &Sim<Self>) -> CanTruth {
        CanTruth::of(sim)
    }

    fn truth_len(t: &CanTruth) -> usize {
        t.len()
    }

    fn owner(t: &CanTruth, key: Id) -> Option<Id> {
        t.owner_of_key(key).map(|o| o.0)
    }

    fn converged(t: &CanTruth, sim: &Sim<Self>) -> bool {
        t.converged(sim)
    }

    fn correct(t: &CanTruth, sim: &Sim<Self>) -> bool {
        t.converged(sim)
    }

    fn report(t: &CanTruth, sim: &Sim<Self>) -> String {
        format!("{:?}", t.check(sim))
    }

    /// The owner of the joiner's point: at 100,000 nodes a route from a random
    /// contact would take up to N/4 hops in one dimension, per join. Joining is
    /// not what is measured; the routing state it leaves is the same.
    fn build_contact(t: &CanTruth, cfg: &CanConfig, seed: u64) -> Option<NodeAddr> {
        t.owner(&CanNode::first_join_point(cfg.dims, seed)).map(|o| o.1)
    }

    fn kinds(sim: &Sim<Self>) -> Vec<(&'static str, u64)> {
        kinds_of(&CanMsg::KIND_NAMES, (0..sim.len()).map(|i| sim.node(i).stats().sent_by_kind))
    }

    /// At most 100 a second in one dimension: there a node has two neighbours, and
    /// joins racing on both sides of one can leave two abutting nodes unaware of
    /// each other for long (each repair is a route around the ring).
    fn join_rate(cfg: &CanConfig, n: usize) -> usize {
        let rate = crate::net::default_join_rate(n);
        if cfg.dims == 1 { rate.min(100) } else { rate }
    }
}
