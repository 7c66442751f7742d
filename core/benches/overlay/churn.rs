//! `--churn`: the classic ramp-up / steady / ramp-down experiment.
//!
//! Nodes start at a steady rate; then, for a while, nodes start and stop in equal
//! numbers; then they stop (half leave gracefully, half crash) until a quarter
//! remain. Lookups of random keys run throughout, and each answer is judged
//! against the true owner as of the tick it arrived in (the owner at the start or
//! at the end of that 100 ms tick: ownership may move within it). A lookup whose asking node itself
//! left or crashed before an answer came has nobody to answer: it is counted apart
//! (`asker gone`) and left out of the success rate.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use p2pmp_core::id::Id;
use p2pmp_core::overlay::{OverlayCommand, OverlayEvent};
use p2pmp_core::sim::{Liveness, NodeIdx, Sim};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::args::Args;
use crate::net;
use crate::overlays::BenchOverlay;

const TICK: Duration = Duration::from_millis(100);
const BUCKET_S: f64 = 10.0;

#[derive(Default, Clone)]
struct Bucket {
    live: usize,
    issued: usize,
    ok: usize,
    wrong: usize,
    failed: usize,
    /// Lookups whose asking node left or crashed before an answer came.
    asker_gone: usize,
    hops: u64,
}

impl Bucket {
    /// Lookups that could be answered: all but those whose asker went away.
    fn answerable(&self) -> usize {
        self.issued - self.asker_gone
    }
}

struct Run<O: BenchOverlay> {
    sim: Sim<O>,
    cfg: O::Config,
    /// The truth at the end of the last tick.
    truth: O::Truth,
    rng: Pcg64Mcg,
    seed: u64,
    spawned: usize,
    joined: Vec<NodeIdx>,
    leaving: Vec<NodeIdx>,
    /// token -> (key, bucket of issue, asking node)
    outstanding: BTreeMap<u64, (Id, usize, NodeIdx)>,
    next_token: u64,
    buckets: Vec<Bucket>,
}

impl<O: BenchOverlay> Run<O> {
    fn bucket(&self) -> usize {
        (self.sim.elapsed().as_secs_f64() / BUCKET_S) as usize
    }

    fn bucket_mut(&mut self, b: usize) -> &mut Bucket {
        if self.buckets.len() <= b {
            self.buckets.resize(b + 1, Bucket::default());
        }
        &mut self.buckets[b]
    }

    fn add(&mut self) {
        let live: Vec<NodeIdx> = self.joined.iter().copied().filter(|&i| self.sim.node(i).joined()).collect();
        let i = self.spawned;
        self.spawned += 1;
        let idx = net::spawn(&mut self.sim, &self.cfg, i, None, &live, &mut self.rng, self.seed);
        self.joined.push(idx);
    }

    fn remove(&mut self, graceful: bool) {
        if self.joined.len() <= 2 {
            return;
        }
        let k = self.rng.random_range(0..self.joined.len());
        let idx = self.joined.swap_remove(k);
        if graceful {
            if self.sim.command(idx, OverlayCommand::Leave).is_ok() {
                self.leaving.push(idx);
            }
        } else {
            self.sim.crash(idx);
        }
    }

    fn lookup(&mut self) {
        let candidates: Vec<NodeIdx> = self.joined.iter().copied().filter(|&i| self.sim.node(i).joined()).collect();
        if candidates.is_empty() {
            return;
        }
        let src = candidates[self.rng.random_range(0..candidates.len())];
        let key = net::random_key(&mut self.rng);
        let token = self.next_token;
        self.next_token += 1;
        let b = self.bucket();
        self.bucket_mut(b).issued += 1;
        self.outstanding.insert(token, (key, b, src));
        self.sim.command(src, OverlayCommand::Lookup { token, key }).expect("a joined node takes lookups");
    }

    /// Advances one tick and judges each answer against the truth as of that tick.
    fn tick(&mut self) {
        self.sim.run_for(TICK);
        let truth = O::truth(&self.sim);
        let b = self.bucket();
        let live = self.sim.alive().count();
        self.bucket_mut(b).live = live;
        let events: Vec<_> = std::iter::from_fn(|| self.sim.poll_event()).collect();
        for e in events {
            match e.event {
                OverlayEvent::LookupDone { token, result, .. } => {
                    let Some((key, b, _)) = self.outstanding.remove(&token) else { continue };
                    let right = result.as_ref().is_ok_and(|r| {
                        Some(r.owner_id) == O::owner(&truth, key) || Some(r.owner_id) == O::owner(&self.truth, key)
                    });
                    let bucket = self.bucket_mut(b);
                    match result {
                        Ok(r) if right => {
                            bucket.ok += 1;
                            bucket.hops += u64::from(r.hops);
                        }
                        Ok(_) => bucket.wrong += 1,
                        Err(_) => bucket.failed += 1,
                    }
                }
                OverlayEvent::Left => {
                    if let Some(p) = self.leaving.iter().position(|&i| i == e.node) {
                        self.sim.retire(self.leaving.swap_remove(p));
                    }
                }
                _ => {}
            }
        }
        self.truth = truth;
    }
}

pub(crate) fn run<O: BenchOverlay>(args: &Args) -> Result<(), String> {
    let wall = Instant::now();
    let n = args.nodes.max(8);
    let sim = Sim::new(net::sim_config(args.seed), Instant::now());
    let truth = O::truth(&sim);
    let mut run = Run {
        cfg: O::config(args.dims, n),
        truth,
        sim,
        rng: Pcg64Mcg::seed_from_u64(args.seed),
        seed: args.seed,
        spawned: 0,
        joined: Vec::new(),
        leaving: Vec::new(),
        outstanding: BTreeMap::new(),
        next_token: 0,
        buckets: Vec::new(),
    };
    let per_tick = |per_s: f64| per_s * TICK.as_secs_f64();
    let ramp = per_tick((n as f64 / 50.0).max(2.0)); // joins or departures per tick while ramping
    let churn = per_tick((n as f64 / 200.0).max(0.5)); // joins and departures per tick in the steady phase
    let lookups = per_tick((n as f64 / 10.0).max(10.0));
    let steady_ticks = (60.0 / TICK.as_secs_f64()) as usize;
    let (mut acc_add, mut acc_rm, mut acc_look) = (0.0f64, 0.0f64, 0.0f64);
    let mut phase_ends = Vec::new();
    let mut tick_with = |run: &mut Run<O>, add: f64, rm: f64| {
        acc_add += add;
        acc_rm += rm;
        acc_look += lookups;
        while acc_add >= 1.0 {
            run.add();
            acc_add -= 1.0;
        }
        while acc_rm >= 1.0 {
            let graceful = run.rng.random_bool(0.5);
            run.remove(graceful);
            acc_rm -= 1.0;
        }
        while acc_look >= 1.0 {
            run.lookup();
            acc_look -= 1.0;
        }
        run.tick();
    };
    // Ramp-up.
    while run.spawned < n {
        tick_with(&mut run, ramp, 0.0);
    }
    phase_ends.push(("ramp-up", run.sim.elapsed().as_secs_f64()));
    for _ in 0..steady_ticks {
        tick_with(&mut run, churn, churn);
    }
    phase_ends.push(("steady churn", run.sim.elapsed().as_secs_f64()));
    while run.joined.len() > n / 4 {
        tick_with(&mut run, 0.0, ramp);
    }
    phase_ends.push(("ramp-down", run.sim.elapsed().as_secs_f64()));
    // Let the last lookups finish.
    for _ in 0..(30.0 / TICK.as_secs_f64()) as usize {
        run.tick();
    }
    let gone: Vec<usize> = run
        .outstanding
        .values()
        .filter(|(_, _, src)| run.sim.liveness(*src) != Liveness::Alive || run.sim.node(*src).left())
        .map(|(_, b, _)| *b)
        .collect();
    for b in gone {
        run.buckets[b].asker_gone += 1;
    }
    report(args, &run, &phase_ends, wall)
}

fn report<O: BenchOverlay>(args: &Args, run: &Run<O>, phases: &[(&str, f64)], wall: Instant) -> Result<(), String> {
    println!();
    println!("{} under churn, {} nodes at the peak, seed {}", crate::label::<O>(args.dims), args.nodes, args.seed);
    for (name, end) in phases {
        println!("  {name:<13} ends at {end:>6.1} virtual s");
    }
    println!(
        "{:>7} {:>6} {:>7} {:>7} {:>6} {:>7} {:>7} {:>7} {:>9} {:>9}",
        "t (s)", "live", "issued", "ok", "wrong", "failed", "silent", "gone", "success", "mean hops"
    );
    let mut rows = Vec::new();
    let mut total = Bucket::default();
    for (i, b) in run.buckets.iter().enumerate() {
        if b.issued == 0 {
            continue;
        }
        let answered_ok = b.ok as f64 / b.answerable().max(1) as f64;
        let silent = b.answerable() - b.ok - b.wrong - b.failed;
        let hops = if b.ok > 0 { b.hops as f64 / b.ok as f64 } else { 0.0 };
        let t = i as f64 * BUCKET_S;
        println!(
            "{:>7.0} {:>6} {:>7} {:>7} {:>6} {:>7} {:>7} {:>7} {:>8.2}% {:>9.2}",
            t,
            b.live,
            b.issued,
            b.ok,
            b.wrong,
            b.failed,
            silent,
            b.asker_gone,
            100.0 * answered_ok,
            hops
        );
        rows.push((t, 100.0 * answered_ok, hops, b.live));
        total.issued += b.issued;
        total.ok += b.ok;
        total.wrong += b.wrong;
        total.failed += b.failed;
        total.asker_gone += b.asker_gone;
        total.hops += b.hops;
    }
    let success = total.ok as f64 / total.answerable().max(1) as f64;
    let checks_per_lookup = O::owner_checks(&run.sim).map(|c| c as f64 / total.issued.max(1) as f64);
    let checks_text = checks_per_lookup.map_or("no".into(), |c| format!("{c:.2}"));
    let checks_json = checks_per_lookup.map_or("null".into(), |c| format!("{c:.4}"));
    let min_bucket = rows.iter().map(|r| r.1).fold(100.0, f64::min);
    println!(
        "overall: {} lookups ({} whose asker went away), {:.3}% of the rest right, {} wrong owner, {} failed; worst bucket {:.2}%; {} owner checks per lookup (round trips besides the hops); wall {:.1}s",
        total.issued,
        total.asker_gone,
        100.0 * success,
        total.wrong,
        total.failed,
        min_bucket,
        checks_text,
        wall.elapsed().as_secs_f64()
    );
    let series: Vec<String> = rows
        .iter()
        .map(|(t, s, h, l)| format!("{{\"t\":{t},\"success_pct\":{s:.3},\"mean_hops\":{h:.3},\"live\":{l}}}"))
        .collect();
    let json = format!(
        "{{\"overlay\":\"{}\",\"dims\":{},\"mode\":\"churn\",\"nodes\":{},\"seed\":{},\"lookups\":{},\"success_rate\":{:.6},\"wrong_owner\":{},\"failed\":{},\"asker_gone\":{},\"owner_checks_per_lookup\":{},\"mean_hops\":{:.4},\"worst_bucket_success_pct\":{:.3},\"series\":[{}]}}",
        O::NAME,
        crate::dims_json::<O>(args.dims),
        args.nodes,
        args.seed,
        total.issued,
        success,
        total.wrong,
        total.failed,
        total.asker_gone,
        checks_json,
        total.hops as f64 / total.ok.max(1) as f64,
        min_bucket,
        series.join(",")
    );
    let path = std::path::Path::new(&args.out).join(format!(
        "overlay-{}-churn-{}-seed{}.json",
        crate::file_label::<O>(args.dims),
        args.nodes,
        args.seed
    ));
    std::fs::write(&path, &json).map_err(|e| format!("writing {}: {e}", path.display()))?;
    eprintln!("data written to {}", path.display());
    if let Some(p) = &args.plot {
        crate::plot::churn(p, &crate::label::<O>(args.dims), &rows)?;
        eprintln!("plot written to {p}");
    }
    println!("{json}");
    Ok(())
}
