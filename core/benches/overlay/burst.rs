//! `--burst K`: recovery after a burst of joins.
//!
//! A network of `--nodes` is built and left to converge; then K new nodes start
//! at the same instant, each joining through a random member. The run measures
//! the virtual time until every newcomer has joined, until the routing state that
//! makes lookups right is exact again (Chord: successors and predecessors; CAN:
//! zones and neighbour tables), and until every node's whole routing state is
//! exact (Chord's fingers too). Lookups from random members run throughout, 10%
//! of N a second, each judged against the truth as of the tick it is answered in.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use p2pmp_core::id::Id;
use p2pmp_core::overlay::{OverlayCommand, OverlayEvent};
use p2pmp_core::sim::NodeIdx;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::args::Args;
use crate::net;
use crate::overlays::BenchOverlay;

const TICK: Duration = Duration::from_millis(100);
/// Longest wait for the network to settle after the burst.
const LIMIT: Duration = Duration::from_secs(600);

pub(crate) fn run<O: BenchOverlay>(args: &Args, k: usize) -> Result<(), String> {
    let wall = Instant::now();
    let n = args.nodes;
    let cfg = O::config(args.dims, n + k);
    let (mut sim, build) = net::build::<O>(&cfg, n, args.seed, args.join_rate, !args.quiet)?;
    let members: Vec<NodeIdx> = sim.alive().collect();
    let mut rng = Pcg64Mcg::seed_from_u64(args.seed ^ 0xb025_7000);
    let start = sim.now();
    let sent_before = sim.stats().sent;
    let newcomers: Vec<NodeIdx> =
        (0..k).map(|j| net::spawn(&mut sim, &cfg, n + j, None, &members, &mut rng, args.seed)).collect();
    let per_tick = ((n as f64 / 10.0).max(10.0) * TICK.as_secs_f64()).max(1.0);
    let mut outstanding: BTreeMap<u64, Id> = BTreeMap::new();
    let (mut issued, mut ok, mut wrong, mut failed, mut hops) = (0usize, 0usize, 0usize, 0usize, 0u64);
    let mut truth = O::truth(&sim);
    let (mut all_joined, mut correct, mut converged) = (None, None, None);
    let mut acc = 0.0;
    while converged.is_none() && sim.now() - start < LIMIT {
        acc += per_tick;
        while acc >= 1.0 {
            acc -= 1.0;
            let src = members[rng.random_range(0..members.len())];
            let key = net::random_key(&mut rng);
            let token = issued as u64;
            issued += 1;
            outstanding.insert(token, key);
            sim.command(src, OverlayCommand::Lookup { token, key }).expect("a member takes lookups");
        }
        sim.run_for(TICK);
        let now_truth = O::truth(&sim);
        while let Some(e) = sim.poll_event() {
            if let OverlayEvent::LookupDone { token, result, .. } = e.event {
                let Some(key) = outstanding.remove(&token) else { continue };
                match result {
                    Ok(r) if [O::owner(&now_truth, key), O::owner(&truth, key)].contains(&Some(r.owner_id)) => {
                        ok += 1;
                        hops += u64::from(r.hops);
                    }
                    Ok(_) => wrong += 1,
                    Err(_) => failed += 1,
                }
            }
        }
        truth = now_truth;
        let t = (sim.now() - start).as_secs_f64();
        if all_joined.is_none() && newcomers.iter().all(|&i| sim.node(i).joined()) {
            all_joined = Some(t);
        }
        if all_joined.is_some() && O::truth_len(&truth) == n + k {
            if correct.is_none() && O::correct(&truth, &sim) {
                correct = Some(t);
            }
            if O::converged(&truth, &sim) {
                converged = Some(t);
            }
        }
    }
    let settle = (sim.now() - start).as_secs_f64();
    let msgs_per_node_s = (sim.stats().sent - sent_before) as f64 / (n + k) as f64 / settle.max(0.1);
    let judged = ok + wrong + failed;
    let success = ok as f64 / judged.max(1) as f64;
    let fmt = |t: Option<f64>| t.map_or("null".into(), |t| format!("{t:.1}"));
    println!();
    println!("{}: {k} joins at once into a converged network of {n}, seed {}", crate::label::<O>(args.dims), args.seed);
    println!(
        "{:>12} {:>14} {:>14} {:>14} {:>9} {:>9} {:>9} {:>12}",
        "overlay", "all joined s", "lookups ok s", "converged s", "lookups", "success", "mean hops", "msgs/node/s"
    );
    println!(
        "{:>12} {:>14} {:>14} {:>14} {:>9} {:>8.2}% {:>9.2} {:>12.1}",
        crate::label::<O>(args.dims),
        fmt(all_joined),
        fmt(correct),
        fmt(converged),
        judged,
        100.0 * success,
        hops as f64 / ok.max(1) as f64,
        msgs_per_node_s
    );
    println!(
        "(virtual seconds after the burst; lookups ok: the state that makes lookups right is exact again; converged: all of the routing state; build {:.1}s wall, whole run {:.1}s wall)",
        build.wall_s,
        wall.elapsed().as_secs_f64()
    );
    let json = format!(
        "{{\"overlay\":\"{}\",\"dims\":{},\"mode\":\"burst\",\"nodes\":{n},\"burst\":{k},\"seed\":{},\"all_joined_s\":{},\"correct_s\":{},\"converged_s\":{},\"lookups\":{judged},\"success_rate\":{success:.6},\"wrong_owner\":{wrong},\"failed\":{failed},\"mean_hops\":{:.4},\"msgs_per_node_s\":{msgs_per_node_s:.3}}}",
        O::NAME,
        crate::dims_json::<O>(args.dims),
        args.seed,
        fmt(all_joined),
        fmt(correct),
        fmt(converged),
        hops as f64 / ok.max(1) as f64,
    );
    let path = std::path::Path::new(&args.out).join(format!(
        "overlay-{}-burst-{n}+{k}-seed{}.json",
        crate::file_label::<O>(args.dims),
        args.seed
    ));
    std::fs::write(&path, &json).map_err(|e| format!("writing {}: {e}", path.display()))?;
    eprintln!("data written to {}", path.display());
    if converged.is_none() {
        return Err(format!("not converged within {LIMIT:?} of the burst"));
    }
    println!("{json}");
    Ok(())
}
