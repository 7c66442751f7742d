//! Chord invariants over random schedules of joins, leaves, crashes and
//! registrations, run in the deterministic simulator with every message going
//! through the real codec. The checker (`RingTruth`) has global knowledge; the
//! nodes learn only from messages.
//!
//! The normal suite runs 256 fixed schedules per property (a few seconds). The
//! opt-in slow search draws fresh schedules:
//! `PROPTEST_RNG_SEED=random PROPTEST_CASES=2000 cargo test -p p2pmp-tests --test
//! chord_invariants` (about 20 s for the first property, 100 s for the second;
//! repeat it, each run draws new schedules; `PROPTEST_RNG_SEED=N` replays a set).
//! A failure prints the whole scenario, seed included; proptest also records it in
//! `chord_invariants.proptest-regressions`, but a found schedule belongs here as a
//! named test (`regression_*`, or `limitation_*` with `#[ignore]` and the reason
//! when it is beyond what the protocol promises); `-- --ignored` runs those.

mod schedule;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use p2pmp_core::chord::check::RingTruth;
use p2pmp_core::chord::{ChordConfig, ChordNode};
use p2pmp_core::id::Id;
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::overlay::{OverlayCommand, OverlayEvent};
use p2pmp_core::sim::{Liveness, NetConfig, NodeIdx, Sim, SimConfig};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;
use schedule::{Op, Pick, arb_op};

/// Quiet time within which the ring must be exact again (stabilize runs every second).
const QUIET_LIMIT: Duration = Duration::from_secs(60);
/// The shortest quiet period: five stabilization rounds.
const MIN_QUIET: Duration = Duration::from_secs(5);
const TTL: Duration = Duration::from_secs(3600);
/// A registration this old has reached its owner and replicas.
const SETTLE: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
struct Scenario {
    seed: u64,
    initial: usize,
    report_failures: bool,
    ops: Vec<Op>,
}

fn arb_scenario() -> impl Strategy<Value = Scenario> {
    (any::<u64>(), 1usize..10, any::<bool>(), proptest::collection::vec(arb_op(), 0..24))
        .prop_map(|(seed, initial, report_failures, ops)| Scenario { seed, initial, report_failures, ops })
}

/// A simulated network plus the bookkeeping the checks need.
struct World {
    sim: Sim<ChordNode>,
    spawned: usize,
    seed: u64,
    /// Nodes asked to leave, retired once they report `Left`.
    leaving: BTreeMap<NodeIdx, Instant>,
    /// Nodes that finished a graceful leave, and when they were asked to.
    left: BTreeMap<NodeIdx, Instant>,
    /// Each node's bootstrap contacts.
    contacts: BTreeMap<NodeIdx, Vec<NodeIdx>>,
    /// name -> (value, registering node, when)
    registered: BTreeMap<String, BTreeSet<(String, NodeIdx, Instant)>>,
}

impl World {
    fn new(seed: u64, report_failures: bool) -> Self {
        let net = NetConfig { report_failures, ..NetConfig::default() };
        World {
            sim: Sim::new(SimConfig { seed, net, codec_roundtrip: true }, Instant::now()),
            spawned: 0,
            seed,
            leaving: BTreeMap::new(),
            left: BTreeMap::new(),
            registered: BTreeMap::new(),
            contacts: BTreeMap::new(),
        }
    }

    fn live(&self) -> Vec<NodeIdx> {
        self.sim.alive().filter(|i| !self.leaving.contains_key(i)).collect()
    }

    fn joined(&self) -> Vec<NodeIdx> {
        self.live().into_iter().filter(|&i| self.sim.node(i).is_joined()).collect()
    }

    fn spawn(&mut self, contact: Option<NodeIdx>) -> NodeIdx {
        let i = self.spawned;
        self.spawned += 1;
        let bootstrap: Vec<NodeAddr> = contact.map(|c| self.sim.addr(c)).into_iter().collect();
        let addr = NodeAddr::loopback(i as u32, 7000);
        let node = ChordNode::new(ChordConfig::default(), addr, bootstrap, self.sim.now(), self.seed ^ i as u64);
        let idx = self.sim.add_node(node);
        self.contacts.insert(idx, contact.into_iter().collect());
        idx
    }

    /// Whether every other live node still knows a live successor once `victim` crashes.
    fn survivable(&self, victim: NodeIdx) -> bool {
        let victim_addr = self.sim.addr(victim);
        self.live().into_iter().filter(|&n| n != victim && self.sim.node(n).is_joined()).all(|n| {
            self.sim.node(n).successor_list().iter().any(|p| {
                p.addr != victim_addr && self.sim.lookup_addr(p.addr).is_some_and(|i| !self.leaving.contains_key(&i))
            })
        })
    }

    /// Whether every registration of a live node that `victim` holds is held by
    /// another live node too. Three copies tolerate two losses; crashing the last
    /// holder loses the entry until the registrant's next refresh (TTL/3), whatever
    /// the protocol does, so the scenario does not do that (as with successors).
    fn keeps_registrations(&self, victim: NodeIdx) -> bool {
        let holders = |name: &str, value: &String| {
            self.live()
                .into_iter()
                .filter(|&i| self.sim.node(i).stored_values(name).contains(value))
                .collect::<Vec<_>>()
        };
        self.registered.iter().all(|(name, regs)| {
            regs.iter().filter(|(_, owner, _)| self.sim.alive().any(|a| a == *owner)).all(|(value, _, _)| {
                let h = holders(name, value);
                !h.contains(&victim) || h.len() > 1
            })
        })
    }

    /// A node that never joined and whose every contact is gone cannot join: by
    /// design it keeps retrying and never creates a second ring. Such a node is
    /// outside the network, so the scenario takes it away before judging.
    fn drop_stranded(&mut self) {
        let stranded: Vec<NodeIdx> = self
            .live()
            .into_iter()
            .filter(|&i| !self.sim.node(i).is_joined())
            .filter(|i| {
                let cs = &self.contacts[i];
                !cs.is_empty()
                    && cs.iter().all(|c| self.sim.liveness(*c) != Liveness::Alive || self.leaving.contains_key(c))
            })
            .collect();
        for i in stranded {
            self.sim.crash(i);
        }
    }

    fn run_for(&mut self, d: Duration) {
        self.sim.run_for(d);
        self.retire_left();
    }

    fn retire_left(&mut self) {
        while let Some(e) = self.sim.poll_event() {
            if e.event == OverlayEvent::Left {
                if let Some(asked) = self.leaving.remove(&e.node) {
                    self.sim.retire(e.node);
                    self.left.insert(e.node, asked);
                }
            }
        }
    }

    fn apply(&mut self, op: &Op, crashes_left: &mut usize) {
        match op {
            Op::Join { contact } => {
                let joined = self.joined();
                let c = (!joined.is_empty()).then(|| joined[contact.index(joined.len())]);
                self.spawn(c);
            }
            Op::Leave(k) => {
                let live = self.joined();
                if live.len() <= 2 {
                    return;
                }
                let victim = live[k.index(live.len())];
                self.sim.command(victim, OverlayCommand::Leave).expect("a live node can leave");
                self.leaving.insert(victim, self.sim.now());
            }
            Op::Crash(k) => {
                // The tolerance Chord promises (r - 1 crashes) rests on every node knowing
                // another live successor, and every registration having another live
                // copy: crash only nodes whose loss leaves that true.
                let live: Vec<NodeIdx> =
                    self.joined().into_iter().filter(|&v| self.survivable(v) && self.keeps_registrations(v)).collect();
                if live.len() <= 2 || *crashes_left == 0 {
                    return;
                }
                *crashes_left -= 1;
                self.sim.crash(live[k.index(live.len())]);
            }
            Op::Register { node, name } => {
                let live = self.joined();
                if live.is_empty() {
                    return;
                }
                let n = live[node.index(live.len())];
                let (name, value) = (format!("svc-{name}"), format!("node{n}"));
                let cmd = OverlayCommand::Register { name: name.clone(), value: value.clone(), ttl: TTL };
                self.sim.command(n, cmd).expect("register is accepted");
                self.registered.entry(name).or_default().insert((value, n, self.sim.now()));
            }
            Op::Run { ms } => self.run_for(Duration::from_millis(u64::from(*ms))),
        }
    }

    /// Runs until every leave finished and the ring is exact, for at most the limit.
    fn quiesce(&mut self) -> bool {
        self.drop_stranded();
        // A few stabilization rounds at least: a registration that missed its owner
        // while the ring was moving is retried after one round.
        self.run_for(MIN_QUIET);
        let deadline = self.sim.now() + QUIET_LIMIT;
        loop {
            self.run_for(Duration::from_millis(500));
            let ok = self.leaving.is_empty() && {
                let truth = RingTruth::of(&self.sim);
                let live = self.live().len();
                truth.len() == live && truth.check(&self.sim, false).ring_ok()
            };
            if ok {
                return true;
            }
            if self.sim.now() >= deadline {
                return false;
            }
        }
    }

    /// Every live node looks up its own id, its successor's id and `extra` random keys;
    /// returns the lookups whose answer is not the true owner.
    fn wrong_lookups(&mut self, extra: usize) -> Vec<String> {
        let truth = RingTruth::of(&self.sim);
        let mut keys = BTreeMap::new();
        let mut token = 0u64;
        for n in self.live() {
            let me = self.sim.node(n).id();
            let mut ks = vec![me, me.wrapping_add(Id::pow2(0)), truth.successor(me).0];
            ks.extend((0..extra).map(|j| Id::hash(format!("{}-{n}-{j}", self.seed))));
            for key in ks {
                token += 1;
                keys.insert(token, (n, key));
                self.sim.command(n, OverlayCommand::Lookup { token, key }).expect("lookup accepted");
            }
        }
        let mut wrong = Vec::new();
        let deadline = self.sim.now() + Duration::from_secs(30);
        while !keys.is_empty() && self.sim.now() < deadline {
            self.sim.run_for(Duration::from_millis(100));
            while let Some(e) = self.sim.poll_event() {
                if let OverlayEvent::LookupDone { token, result, .. } = e.event {
                    let Some((n, key)) = keys.remove(&token) else { continue };
                    let want = truth.owner(key);
                    match result {
                        Ok(r) if r.owner_id == want.0 => {}
                        other => wrong.push(format!("node {n} key {key}: got {other:?}, owner is {}", want.1)),
                    }
                }
            }
        }
        wrong.extend(keys.values().map(|(n, k)| format!("node {n} key {k}: no answer")));
        wrong
    }

    /// Queries every registered name from a live node; returns what is missing.
    fn missing_registrations(&mut self) -> Vec<String> {
        let live = self.live();
        let names: Vec<String> = self.registered.keys().cloned().collect();
        let mut pending = BTreeMap::new();
        for (t, name) in names.iter().enumerate() {
            let from = live[t % live.len()];
            pending.insert(t as u64, name.clone());
            self.sim.command(from, OverlayCommand::Query { token: t as u64, name: name.clone() }).expect("query");
        }
        let mut missing = Vec::new();
        let deadline = self.sim.now() + Duration::from_secs(30);
        while !pending.is_empty() && self.sim.now() < deadline {
            self.sim.run_for(Duration::from_millis(100));
            while let Some(e) = self.sim.poll_event() {
                if let OverlayEvent::QueryDone { token, result, .. } = e.event {
                    let Some(name) = pending.remove(&token) else { continue };
                    let got: BTreeSet<String> = result.unwrap_or_default().into_iter().collect();
                    for (value, owner, at) in &self.registered[&name] {
                        // Alive and refreshing, or stored (a few rounds old) before its
                        // registrant left gracefully: the leave must hand it over.
                        let stored_before_leave = self.left.get(owner).is_some_and(|left| *left - *at >= SETTLE);
                        let must = self.sim.alive().any(|a| a == *owner) || stored_before_leave;
                        if must && !got.contains(value) {
                            let holders: Vec<NodeIdx> = self
                                .sim
                                .alive()
                                .filter(|&i| self.sim.node(i).stored_values(&name).contains(value))
                                .collect();
                            let truth = RingTruth::of(&self.sim);
                            let owner_addr = truth.owner(Id::hash(&name)).1;
                            missing.push(format!(
                                "{name}={value} (registered by node {owner}; true owner {owner_addr:?} = node {:?}; stored at nodes {holders:?})",
                                self.sim.lookup_addr(owner_addr)
                            ));
                        }
                    }
                }
            }
        }
        missing.extend(pending.values().map(|n| format!("query {n}: no answer")));
        missing
    }
}

/// The first property's body: runs one scenario and judges the result.
fn check_recovery(s: &Scenario) -> Result<(), TestCaseError> {
    let mut w = World::new(s.seed, s.report_failures);
    w.spawn(None);
    for _ in 1..s.initial {
        w.run_for(Duration::from_millis(300));
        let joined = w.joined();
        let c = joined[(s.seed as usize) % joined.len()];
        w.spawn(Some(c));
    }
    let mut crashes_left = ChordConfig::default().successors - 1;
    for op in &s.ops {
        w.apply(op, &mut crashes_left);
    }
    prop_assert!(
        w.quiesce(),
        "ring not exact after {QUIET_LIMIT:?} of quiet: {:?}",
        RingTruth::of(&w.sim).check(&w.sim, false)
    );
    let wrong = w.wrong_lookups(3);
    prop_assert!(wrong.is_empty(), "wrong lookups: {wrong:#?}");
    let missing = w.missing_registrations();
    prop_assert!(missing.is_empty(), "missing registrations: {missing:#?}");
    Ok(())
}

const DEFAULT_RNG_SEED: u64 = 0x00c0_ffee_c40d;

/// Regression (found by a 3,000-case search, seed 8576653464638379146): a node
/// crashes and another leaves at the same instant while five nodes form their
/// ring. The leaver hands its successor the crashed node; the successor loses
/// every contact and rejoins, and a member that still counts on it used to drop
/// it for not answering, until every node was unjoined. Now a rejoining node
/// answers `NotJoined`, the member keeps it as a last-resort successor, and its
/// stabilize request tells the rejoining node where to join back.
#[test]
fn regression_crash_and_leave_while_forming() {
    let s = Scenario {
        seed: 8576653464638379146,
        initial: 5,
        report_failures: true,
        ops: vec![Op::Crash(Pick(0)), Op::Leave(Pick(0)), Op::Register { node: Pick(0), name: 0 }],
    };
    check_recovery(&s).unwrap();
}

/// Regression (found with `PROPTEST_RNG_SEED=1`): joins only, then a registration
/// while the ring is still forming. The handover from the first owner went on to
/// a node that had just adopted a newer predecessor (the true owner); it stored
/// the entry as a replica and nothing reached the owner. Now a handover that
/// arrives from ahead with keys behind the receiver's range walks back to its
/// predecessor.
#[test]
fn regression_registration_reaches_a_concurrent_joiner() {
    let j = |p: u64| Op::Join { contact: Pick(p) };
    let s = Scenario {
        seed: 9933923813110642413,
        initial: 4,
        report_failures: false,
        ops: vec![
            j(0),
            Op::Run { ms: 233 },
            j(0),
            j(0),
            j(3689348814741910324),
            j(11068046444225730970),
            j(0),
            j(14757395258967641293),
            Op::Register { node: Pick(3689348814741910324), name: 1 },
        ],
    };
    check_recovery(&s).unwrap();
}

/// Known limitation (random search, `PROPTEST_RNG_SEED=random`): two crashes, a
/// join, then two neighbours (nodes 0 and 2) leave at the same instant, all
/// within 1.3 s of four joins, before the ring has formed. Nodes 4 and 5 had
/// joined but no member had adopted them yet, and the crashes took the nodes that
/// would have. Node 0 knew node 6 (its predecessor) but not 4 or 5; node 2 knew
/// node 5 (a finger) and handed its notice to node 0, which was leaving too.
/// Afterwards node 6 knows only departed nodes and nodes 4 and 5 know only each
/// other and departed nodes: no protocol working from messages can join the two
/// pieces. Kept to show it; run with `--ignored`.
#[test]
#[ignore = "beyond repair by messages: the leavers were the only link between the two pieces (see doc comment)"]
fn limitation_two_crashes_a_join_and_two_leaves_while_forming() {
    let j = Op::Join { contact: Pick(0) };
    let s = Scenario {
        seed: 8143760525790831803,
        initial: 2,
        report_failures: false,
        ops: vec![
            j.clone(),
            j.clone(),
            j.clone(),
            j.clone(),
            Op::Run { ms: 1234 },
            Op::Crash(Pick(3074457345618258603)),
            Op::Run { ms: 809 },
            Op::Crash(Pick(7378697629483820647)),
            j,
            Op::Run { ms: 498 },
            Op::Leave(Pick(0)),
            Op::Leave(Pick(0)),
        ],
    };
    check_recovery(&s).unwrap();
}

/// Regression (random search): three leaves at the same instant, right after
/// seven nodes joined one by one.
#[test]
fn regression_three_leaves_at_once_while_forming() {
    let s = Scenario {
        seed: 3888180978528649825,
        initial: 7,
        report_failures: false,
        ops: vec![Op::Leave(Pick(0)), Op::Leave(Pick(0)), Op::Leave(Pick(4611686018427387904))],
    };
    check_recovery(&s).unwrap();
}

/// Regression (fixed-seed suite, while joins were made to notify first): a
/// registration, then a leave, while a node joins.
#[test]
fn regression_register_and_leave_while_a_node_joins() {
    let s = Scenario {
        seed: 12389053521576906575,
        initial: 4,
        report_failures: false,
        ops: vec![
            Op::Join { contact: Pick(6148914691236517206) },
            Op::Register { node: Pick(6148914691236517206), name: 0 },
            Op::Run { ms: 102 },
            Op::Leave(Pick(0)),
        ],
    };
    check_recovery(&s).unwrap();
}

/// Known limitation, found by a random search (`PROPTEST_RNG_SEED=random`, after
/// 1,070 passing cases): three leaves and three crashes of nine nodes at once,
/// while the ring forms. The two surviving members (nodes 4 and 7) each lose
/// every other contact and start rejoining; each then knows only the other, which
/// answers `NotJoined`, and a node with a bootstrap list never creates a ring of
/// its own (only the ring's creator does, and it crashed). Breaking that tie (the
/// lower id of two rejoining former members re-creating the ring, and merging later
/// if the old ring turns out to live on) is not implemented. Run with `--ignored`.
#[test]
#[ignore = "known limitation: every survivor is rejoining and none may create a ring (see doc comment)"]
fn limitation_three_leaves_and_three_crashes_while_forming() {
    let s = Scenario {
        seed: 14107464232113137435,
        initial: 9,
        report_failures: true,
        ops: vec![
            Op::Leave(Pick(2305843009213693952)),
            Op::Crash(Pick(5270498306774157605)),
            Op::Crash(Pick(0)),
            Op::Crash(Pick(0)),
            Op::Leave(Pick(9223372036854775808)),
            Op::Leave(Pick(0)),
            Op::Join { contact: Pick(0) },
        ],
    };
    check_recovery(&s).unwrap();
}

/// Known limitation, found by a random search (after 1,894 passing cases): 1.5 s
/// into forming a ring of six, a crash, a registration, and two leaves 13 ms
/// apart. The owner (node 0) stores and acknowledges the registration; its
/// replica copies and, when it leaves 13 ms later, its handover go to the only
/// successors it knows yet: node 2, which left at the same moment, and node 1,
/// which had just crashed. No live node ever receives the entry, and the
/// registrant, acknowledged, refreshes only after TTL/3 (20 minutes here).
/// (Tried: leavers passing late registrations on, and handing over to every
/// known successor; neither reaches a live node here.) Run with `--ignored`.
#[test]
#[ignore = "known limitation: every holder the owner knew crashed or left at once (see doc comment)"]
fn limitation_registration_handed_only_to_departing_nodes() {
    let s = Scenario {
        seed: 0,
        initial: 6,
        report_failures: false,
        ops: vec![
            Op::Crash(Pick(3689348814741910324)),
            Op::Register { node: Pick(9223372036854775808), name: 2 },
            Op::Leave(Pick(4611686018427387904)),
            Op::Run { ms: 13 },
            Op::Leave(Pick(0)),
        ],
    };
    check_recovery(&s).unwrap();
}

proptest! {
    #![proptest_config(schedule::config(DEFAULT_RNG_SEED))]

    /// After a quiet period the ring is exact, every lookup from every node finds the
    /// true owner, and no registration of a live (or gracefully departed) node is missing.
    #[test]
    fn ring_lookups_and_registrations_recover(s in arb_scenario()) {
        check_recovery(&s)?;
    }

    /// With successor lists of length r, crashing fewer than r consecutive nodes at
    /// once never disconnects the ring.
    #[test]
    fn fewer_than_r_consecutive_crashes_never_disconnect(
        seed in any::<u64>(),
        n in 10usize..24,
        start in any::<Index>(),
        k in 1usize..8,
        report_failures in any::<bool>(),
    ) {
        let r = ChordConfig::default().successors;
        prop_assume!(k < r);
        let mut w = World::new(seed, report_failures);
        w.spawn(None);
        for i in 1..n {
            w.run_for(Duration::from_millis(200));
            let joined = w.joined();
            w.spawn(Some(joined[i % joined.len()]));
        }
        prop_assert!(w.quiesce(), "initial ring did not converge");
        // Let successor lists fill up before the crash.
        w.run_for(Duration::from_secs(10));
        let order = RingTruth::in_id_order(&w.sim);
        let first = start.index(order.len());
        for j in 0..k {
            w.sim.crash(order[(first + j) % order.len()]);
        }
        prop_assert!(w.quiesce(), "ring not repaired after {k} consecutive crashes: {:?}", RingTruth::of(&w.sim).check(&w.sim, false));
        let wrong = w.wrong_lookups(2);
        prop_assert!(wrong.is_empty(), "wrong lookups: {wrong:#?}");
    }
}
