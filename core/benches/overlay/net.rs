//! Building a converged network and measuring lookups on it.

use std::time::{Duration, Instant};

use p2pmp_core::id::Id;
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::overlay::{OverlayCommand, OverlayEvent};
use p2pmp_core::sim::{NetConfig, NodeIdx, Sim, SimConfig};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::overlays::BenchOverlay;
use crate::phases::{PhaseRow, PhaseStart};

/// Longest virtual time a network may take to converge after the last join.
const CONVERGE_LIMIT: Duration = Duration::from_secs(900);
/// How often convergence is judged.
const CONVERGE_STEP: Duration = Duration::from_secs(1);
/// Quiet window over which maintenance traffic is measured.
const MAINTENANCE_WINDOW: Duration = Duration::from_secs(20);
/// Most hops the lookups of one measurement may take in all (expected): long
/// routes (CAN in one dimension at 100,000 nodes: 25,000 hops each) get fewer
/// lookups.
const HOP_BUDGET: f64 = 20e6;

pub(crate) struct BuildReport {
    pub(crate) nodes: usize,
    pub(crate) seed: u64,
    pub(crate) converge_virtual_s: f64,
    pub(crate) maintenance_per_node_s: f64,
    /// Distinct nodes in each node's routing state, on average.
    pub(crate) routing_entries: f64,
    pub(crate) events: u64,
    pub(crate) wall_s: f64,
    /// Where the time went: joining, converging, the maintenance window.
    pub(crate) phases: Vec<PhaseRow>,
}

#[derive(Default)]
pub(crate) struct LookupReport {
    pub(crate) issued: usize,
    pub(crate) ok: usize,
    pub(crate) failed: usize,
    pub(crate) wrong_owner: usize,
    pub(crate) mean_hops: f64,
    pub(crate) p50: u32,
    pub(crate) p99: u32,
    pub(crate) max: u32,
    pub(crate) events: u64,
    pub(crate) wall_s: f64,
    pub(crate) phase: Option<PhaseRow>,
}

impl LookupReport {
    pub(crate) fn success_rate(&self) -> f64 {
        if self.issued == 0 { 1.0 } else { self.ok as f64 / self.issued as f64 }
    }
}

pub(crate) fn sim_config(seed: u64) -> SimConfig {
    SimConfig { seed, net: NetConfig::default(), codec_roundtrip: false }
}

/// The address of the `i`th simulated node (loopback range; no packet leaves the process).
pub(crate) fn addr(i: usize) -> NodeAddr {
    NodeAddr::loopback(i as u32, 4000)
}

/// The seed of the `i`th node of a run.
pub(crate) fn node_seed(seed: u64, i: usize) -> u64 {
    seed ^ (i as u64).wrapping_mul(0x9e37)
}

/// A new node joining through `contact`, or through one random node of `contacts`.
pub(crate) fn spawn<O: BenchOverlay>(
    sim: &mut Sim<O>,
    cfg: &O::Config,
    i: usize,
    contact: Option<NodeAddr>,
    contacts: &[NodeIdx],
    rng: &mut Pcg64Mcg,
    seed: u64,
) -> NodeIdx {
    let bootstrap = match contact {
        Some(c) => vec![c],
        None if contacts.is_empty() => Vec::new(),
        None => vec![sim.addr(contacts[rng.random_range(0..contacts.len())])],
    };
    let node = O::create(cfg.clone(), addr(i), bootstrap, sim.now(), node_seed(seed, i));
    sim.add_node(node)
}

/// Joins per virtual second when building `n` nodes, unless set on the command line.
/// Measured on the simulator's events: at 10,000 nodes N/10 costs fewer than N/50
/// or N/5 (the join phase shrinks more than convergence grows); at 100,000 nodes
/// 10,000 joins a second leave 48 s of convergence (119 M events) where 2,000
/// leave 20 s (108 M events), hence the cap.
pub(crate) fn default_join_rate(n: usize) -> usize {
    (n / 10).clamp(10, 2_000)
}

/// Joins `n` nodes at a steady rate, then runs until every node's routing state
/// is right (judged by the overlay's checker).
pub(crate) fn build<O: BenchOverlay>(
    cfg: &O::Config,
    n: usize,
    seed: u64,
    join_rate: Option<usize>,
    progress: bool,
) -> Result<(Sim<O>, BuildReport), String> {
    let wall = Instant::now();
    let mut sim = Sim::new(sim_config(seed), Instant::now());
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    let rate = join_rate.unwrap_or_else(|| O::join_rate(cfg, n));
    let gap = Duration::from_secs(1) / u32::try_from(rate).unwrap_or(u32::MAX);
    let mut joined: Vec<NodeIdx> = Vec::with_capacity(n);
    // Whether each node is in `joined` (a node reports `Joined` again after a rejoin).
    let mut counted: Vec<bool> = Vec::with_capacity(n);
    let mut phases = Vec::new();
    let phase = PhaseStart::new("join", &sim);
    // The truth a joiner's contact is chosen from, refreshed every virtual second.
    let mut truth: Option<(O::Truth, Duration)> = None;
    for i in 0..n {
        let stale = truth.as_ref().is_none_or(|(_, at)| sim.elapsed() >= *at + Duration::from_secs(1));
        if O::NEAR_CONTACT && stale && !joined.is_empty() {
            truth = Some((O::truth(&sim), sim.elapsed()));
        }
        let contact = truth.as_ref().and_then(|(t, _)| O::build_contact(t, cfg, node_seed(seed, i)));
        spawn(&mut sim, cfg, i, contact, &joined, &mut rng, seed);
        counted.push(false);
        sim.run_for(gap);
        // Joined nodes become contacts for the next joiners.
        while let Some(e) = sim.poll_event() {
            if matches!(e.event, OverlayEvent::Joined) && !counted[e.node] && sim.node(e.node).joined() {
                counted[e.node] = true;
                joined.push(e.node);
            }
        }
        if progress && (i + 1) % 10_000 == 0 {
            eprintln!(
                "  joined {}/{n} (virtual {:.0}s, wall {:.1}s)",
                i + 1,
                sim.elapsed().as_secs_f64(),
                wall.elapsed().as_secs_f64()
            );
        }
    }
    let last_join = sim.elapsed();
    phases.push(phase.finish(&sim));
    let phase = PhaseStart::new("converge", &sim);
    let debug = std::env::var_os("OVERLAY_DEBUG").is_some();
    loop {
        let truth = O::truth(&sim);
        if O::truth_len(&truth) == n && O::converged(&truth, &sim) {
            break;
        }
        if debug {
            eprintln!("  t+{:.0}s {}", (sim.elapsed() - last_join).as_secs_f64(), O::report(&truth, &sim));
        }
        if sim.elapsed() - last_join > CONVERGE_LIMIT {
            if debug {
                for i in sim.alive().filter(|&i| !sim.node(i).joined()).take(3) {
                    let d = format!("{:?}", sim.node(i));
                    eprintln!("  not joined: node {i}: {}", &d[..d.len().min(3000)]);
                }
            }
            let report = O::report(&truth, &sim);
            return Err(format!("{n} nodes did not converge within {CONVERGE_LIMIT:?} of the last join: {report}"));
        }
        sim.run_for(CONVERGE_STEP);
        sim.clear_events();
    }
    let converge_virtual_s = (sim.elapsed() - last_join).as_secs_f64();
    if progress {
        eprintln!(
            "  {n} nodes converged {converge_virtual_s:.0} virtual s after the last join (wall {:.1}s)",
            wall.elapsed().as_secs_f64()
        );
    }
    phases.push(phase.finish(&sim));
    let phase = PhaseStart::new("maintain", &sim);
    let before = sim.stats().sent;
    sim.run_for(MAINTENANCE_WINDOW);
    sim.clear_events();
    let maintenance = (sim.stats().sent - before) as f64 / n as f64 / MAINTENANCE_WINDOW.as_secs_f64();
    phases.push(phase.finish(&sim));
    let routing_entries = sim.alive().map(|i| sim.node(i).routing_entries()).sum::<usize>() as f64 / n as f64;
    let report = BuildReport {
        nodes: n,
        seed,
        converge_virtual_s,
        maintenance_per_node_s: maintenance,
        routing_entries,
        events: sim.stats().events,
        wall_s: wall.elapsed().as_secs_f64(),
        phases,
    };
    Ok((sim, report))
}

/// A random 160-bit key.
pub(crate) fn random_key(rng: &mut Pcg64Mcg) -> Id {
    let mut b = [0u8; 20];
    rng.fill(&mut b[..]);
    Id::from_bytes(b)
}

/// How many of `wanted` lookups to run when each takes about `hops`: all of them
/// unless they would take more than [`HOP_BUDGET`] hops in all (never fewer than 500).
pub(crate) fn lookup_count(wanted: usize, hops: f64) -> usize {
    wanted.min(((HOP_BUDGET / hops.max(1.0)) as usize).max(500))
}

/// `count` lookups of random keys from random live nodes, all issued at once;
/// each answer is judged against the true owner.
pub(crate) fn lookups<O: BenchOverlay>(sim: &mut Sim<O>, count: usize, seed: u64, progress: bool) -> LookupReport {
    let wall = Instant::now();
    let phase = PhaseStart::new("lookups", sim);
    let events_before = sim.stats().events;
    let truth = O::truth(sim);
    let alive: Vec<NodeIdx> = sim.alive().collect();
    let mut rng = Pcg64Mcg::seed_from_u64(seed ^ 0x1007_cafe);
    let mut keys = Vec::with_capacity(count);
    for token in 0..count {
        let key = random_key(&mut rng);
        keys.push(key);
        let src = alive[rng.random_range(0..alive.len())];
        sim.command(src, OverlayCommand::Lookup { token: token as u64, key }).expect("a joined node takes lookups");
    }
    let mut r = LookupReport { issued: count, ..LookupReport::default() };
    let mut hops: Vec<u32> = Vec::with_capacity(count);
    // Long enough for the slowest route the configuration allows.
    let deadline = sim.now() + Duration::from_secs(3600);
    while r.ok + r.failed + r.wrong_owner < count && sim.now() < deadline {
        sim.run_for(Duration::from_millis(100));
        while let Some(e) = sim.poll_event() {
            if let OverlayEvent::LookupDone { token, result, .. } = e.event {
                match result {
                    Ok(res) if Some(res.owner_id) == O::owner(&truth, keys[token as usize]) => {
                        r.ok += 1;
                        hops.push(res.hops);
                    }
                    Ok(_) => r.wrong_owner += 1,
                    Err(_) => r.failed += 1,
                }
            }
        }
    }
    r.failed += count - (r.ok + r.failed + r.wrong_owner); // never answered
    hops.sort_unstable();
    if !hops.is_empty() {
        r.mean_hops = hops.iter().map(|&h| f64::from(h)).sum::<f64>() / hops.len() as f64;
        r.p50 = hops[hops.len() / 2];
        r.p99 = hops[(hops.len() * 99 / 100).min(hops.len() - 1)];
        r.max = *hops.last().expect("non-empty");
    }
    r.events = sim.stats().events - events_before;
    r.wall_s = wall.elapsed().as_secs_f64();
    r.phase = Some(phase.finish(sim));
    if progress {
        eprintln!("  {count} lookups answered in {:.1}s wall", r.wall_s);
    }
    r
}
