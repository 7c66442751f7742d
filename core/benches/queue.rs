//! The job queue at scale, in the deterministic simulator: `--nodes` daemon
//! nodes (default 200, 4 slots each; Chord, heartbeats, the job protocol, all
//! real) and `--jobs` jobs of `--ranks` ranks (default 2,000 of 4) submitted
//! through random nodes over the first minute, each rank running `--run-s`
//! virtual seconds (default 10). Far more is asked than fits at once, so nearly
//! every job waits. Reports virtual time to finish them all against the ideal
//! (every slot busy all the time), throughput, how long jobs waited, the messages
//! the jobs cost (total minus the same network idle for as long), and the
//! simulator's own CPU time. A table, then one JSON line.
//!
//! Then what waiting costs: on a second network of as many nodes, every slot is
//! taken by jobs that run until the end, `--waiting` more jobs (default 10) are
//! submitted and wait, and the messages of a minute with them waiting are
//! compared with a minute of the full network before they came: the difference,
//! per waiting job and second, is what a queued job costs.
//!
//! Run: `cargo bench -p p2pmp-core --bench queue [-- --nodes 200 --jobs 2000 --ranks 4 --run-s 10 --waiting 10]`.

use std::time::{Duration, Instant};

use p2pmp_core::job::{JobDescription, Resources};
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::node::control::{JobPhase, ToolReply, ToolRequest};
use p2pmp_core::node::sim_shell::SimShell;
use p2pmp_core::node::{DaemonConfig, DaemonNode, NodeCommand};
use p2pmp_core::sim::{Sim, SimConfig};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn network(nodes: u32, t0: Instant) -> Sim<DaemonNode> {
    let mut sim = Sim::new(SimConfig::default(), t0);
    let res = Resources {
        os: "linux".into(),
        arch: "x86_64".into(),
        cores: 4,
        mem_mb: 8192,
        slots: 4,
        ..Resources::default()
    };
    for i in 0..nodes {
        let addr = NodeAddr::loopback(1 + i, 7000);
        let mut cfg = DaemonConfig::new(res.clone(), "127.0.0.1:9", "/w", u64::from(i));
        if i > 0 {
            cfg.bootstrap = vec![NodeAddr::loopback(1 + i / 2, 7000)];
        }
        sim.add_node(DaemonNode::new(cfg, addr, t0));
        sim.run_for(Duration::from_millis(20));
    }
    sim.run_for(Duration::from_secs(30));
    sim
}

fn main() {
    let nodes = arg("--nodes", 200) as u32;
    let jobs = arg("--jobs", 2000) as usize;
    let ranks = arg("--ranks", 4) as u32;
    let run = Duration::from_secs(arg("--run-s", 10));
    let cpu0 = Instant::now();
    let t0 = Instant::now();
    let mut sim = network(nodes, t0);
    let mut shell = SimShell::new(Some(run));
    // Idle traffic over the span the jobs will take, measured first on its own.
    let ideal = Duration::from_secs_f64(jobs as f64 * f64::from(ranks) * run.as_secs_f64() / f64::from(nodes * 4));
    let before = sim.stats().sent;
    shell.run(&mut sim, Duration::from_secs(60), |_| false);
    let idle_per_s = (sim.stats().sent - before) as f64 / 60.0;
    // Submissions over the first minute, through random nodes (a fixed sequence).
    let xml = JobDescription::run("/bin/prog", vec![], ranks).to_xml();
    let start = sim.now();
    let sent0 = sim.stats().sent;
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..jobs {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let node = (x % u64::from(nodes)) as usize;
        let req = ToolRequest::Submit { nonce: i as u64, xml: xml.clone(), base_dir: "/h".into(), watch: true };
        sim.command(node, NodeCommand::Tool { conn: i as u64 + 1, request_id: 1, req }).expect("a live node");
        shell.run(&mut sim, Duration::from_secs(60) / jobs as u32, |_| false);
    }
    let over = |s: &SimShell| s.replies.iter().filter(|r| matches!(r.2, ToolReply::Finished { .. })).count() >= jobs;
    shell.run(&mut sim, ideal * 20 + Duration::from_secs(600), over);
    let span = sim.now() - start;
    let sent = sim.stats().sent - sent0;
    let job_msgs = sent as f64 - idle_per_s * span.as_secs_f64();
    let done =
        shell.replies.iter().filter(|r| matches!(r.2, ToolReply::Finished { phase: JobPhase::Done, .. })).count();
    let failed =
        shell.replies.iter().filter(|r| matches!(r.2, ToolReply::Finished { phase: JobPhase::Failed, .. })).count();
    let queued = shell
        .replies
        .iter()
        .filter(|r| matches!(r.2, ToolReply::Queued { .. }))
        .map(|r| r.1)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let cpu = cpu0.elapsed().as_secs_f64();
    println!("{nodes} nodes x 4 slots, {jobs} jobs x {ranks} ranks, {} s each, submitted over 60 s", run.as_secs());
    println!("| figure | value |\n|---|---|");
    println!("| jobs done / failed | {done} / {failed} |");
    println!("| jobs told they wait | {queued} |");
    println!("| virtual time to finish all | {:.1} s |", span.as_secs_f64());
    // Submissions take a minute: the last one cannot end before it is in and ran.
    let bound = ideal.max(Duration::from_secs(60) + run);
    println!("| lower bound (every slot busy, or the last job submitted and run) | {:.1} s |", bound.as_secs_f64());
    println!("| ratio to the lower bound | {:.3} |", span.as_secs_f64() / bound.as_secs_f64());
    println!("| throughput | {:.2} jobs/s |", done as f64 / span.as_secs_f64());
    println!("| messages per job (beyond an idle network) | {:.1} |", job_msgs / jobs as f64);
    println!("| idle network | {:.1} messages/s ({:.2} per node) |", idle_per_s, idle_per_s / f64::from(nodes));
    println!("| simulator CPU time | {cpu:.1} s ({} events) |", sim.stats().events);
    println!(
        "{{\"nodes\": {nodes}, \"jobs\": {jobs}, \"ranks\": {ranks}, \"run_s\": {}, \"done\": {done}, \"failed\": {failed}, \
         \"virtual_s\": {:.3}, \"bound_s\": {:.3}, \"msgs_per_job\": {:.2}, \"cpu_s\": {cpu:.2}}}",
        run.as_secs(),
        span.as_secs_f64(),
        bound.as_secs_f64(),
        job_msgs / jobs as f64
    );
    waiting_cost(nodes, arg("--waiting", 10) as usize);
}

/// Messages per second that jobs cost while they wait on a full network.
fn waiting_cost(nodes: u32, waiting: usize) {
    let mut sim = network(nodes, Instant::now());
    let mut shell = SimShell::new(None);
    let submit = |sim: &mut Sim<DaemonNode>, i: usize| {
        let xml = JobDescription::run("/bin/prog", vec![], 4).to_xml();
        let req = ToolRequest::Submit { nonce: i as u64, xml, base_dir: "/h".into(), watch: true };
        let node = i % nodes as usize;
        sim.command(node, NodeCommand::Tool { conn: i as u64 + 1, request_id: 1, req }).expect("a live node");
    };
    // One job of 4 ranks per node's 4 slots: the network is full.
    for i in 0..nodes as usize {
        submit(&mut sim, i);
        shell.run(&mut sim, Duration::from_millis(50), |_| false);
    }
    shell.run(&mut sim, Duration::from_secs(30), |_| false);
    let minute = Duration::from_secs(60);
    let before = sim.stats().sent;
    shell.run(&mut sim, minute, |_| false);
    let full = sim.stats().sent - before;
    for i in 0..waiting {
        submit(&mut sim, nodes as usize + i);
    }
    shell.run(&mut sim, Duration::from_secs(10), |_| false);
    let late = |conn: u64| conn > u64::from(nodes);
    let told = shell.replies.iter().filter(|r| late(r.1) && matches!(r.2, ToolReply::Queued { .. })).map(|r| r.1);
    let queued = told.collect::<std::collections::BTreeSet<_>>().len();
    let before = sim.stats().sent;
    shell.run(&mut sim, minute, |_| false);
    let with = sim.stats().sent - before;
    let per_job_s = (with as f64 - full as f64) / 60.0 / waiting as f64;
    println!("\n{nodes} nodes, every slot taken; {waiting} more jobs of 4 ranks wait ({queued} told they wait)");
    println!("| figure | value |\n|---|---|");
    println!("| full network, a minute | {full} messages ({:.1}/s) |", full as f64 / 60.0);
    println!("| the same with the jobs waiting | {with} messages ({:.1}/s) |", with as f64 / 60.0);
    println!("| a waiting job costs | {per_job_s:.2} messages/s |");
    println!(
        "{{\"waiting\": {waiting}, \"queued\": {queued}, \"full_msgs_min\": {full}, \"with_msgs_min\": {with}, \"per_job_s\": {per_job_s:.3}}}"
    );
}
