//! `p2pjob demo`: an embedded network, the bundled example jobs, timings, and a
//! clean exit.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use p2pmp_core::job::JobDescription;
use p2pmp_core::node::control::{JobPhase, ToolReply, ToolRequest};
use p2pmp_jobd::Client;
use serde_json::json;

use crate::follow::{End, Show, StopRules, follow, phase_name};

const FACTOR_N: u64 = 4_611_686_039_902_224_373;
/// Candidates per rank between two agreements in the C factor (its default of
/// 500 is a messaging stress test, not a demo).
const FACTOR_C_BLOCK: u64 = 1 << 20;

struct Row {
    name: String,
    ranks: u32,
    end: End,
}

fn run_job(control: std::net::SocketAddr, xml: String, base: &Path, ranks: u32, json: bool) -> anyhow::Result<End> {
    let mut c = Client::connect(control)?.with_key(crate::signer()?);
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let base_dir = base.to_string_lossy().into_owned();
    let id = c.send(ToolRequest::Submit { nonce, xml, base_dir, watch: true })?;
    follow(&mut c, id, None, Some(ranks), Show { json, output: !json, progress: !json }, StopRules::default())
}

/// What `p2pjob demo` was asked for.
#[derive(Debug)]
pub(crate) struct Tour {
    pub(crate) nodes: usize,
    pub(crate) loops: u64,
    /// Where the status page should listen.
    pub(crate) http: String,
    /// Stay up after the jobs until Ctrl-C.
    pub(crate) keep: bool,
    /// The overlay the nodes form and, for CAN, its dimensions.
    pub(crate) shape: (p2pmp_jobd::Overlay, u8),
}

/// `want` when it can be bound now, else a free loopback port.
fn page_addr(want: &str) -> anyhow::Result<String> {
    let cfg = p2pmp_jobd::Config { http: Some(want.to_owned()), ..p2pmp_jobd::Config::default() };
    let addr = cfg.http_addr()?.expect("http is set");
    Ok(if std::net::TcpListener::bind(addr).is_ok() { addr.to_string() } else { "127.0.0.1:0".to_owned() })
}

pub(crate) fn run(tour: Tour, json: bool) -> anyhow::Result<i32> {
    let Tour { nodes, loops, .. } = tour;
    // The C programs are compiled into `out`, made only then; an interrupt is
    // watched once the network exists (one watcher removes both directories).
    let out = std::env::temp_dir().join(format!("p2pmp-demo-{}", std::process::id()));
    let programs = crate::programs::find(&out)?;
    let (ring, factor) = (&programs.ring, &programs.factor);
    let t0 = Instant::now();
    if !json {
        println!("== starting {nodes} nodes on 127.0.0.1");
    }
    let page = page_addr(&tour.http)?;
    let net = crate::local_net(nodes, crate::local_slots(8, nodes), tour.shape, |c| {
        if c.bootstrap.is_empty() {
            c.http = Some(page.clone());
        }
    })?;
    let url = net.http_addr().map(|a| format!("http://{a}/")).unwrap_or_default();
    if !json {
        let overlay = if tour.shape.0 == p2pmp_jobd::Overlay::Can { "the CAN zones" } else { "the Chord ring" };
        println!("== status page: {url} (the nodes, {overlay} and the jobs, live)");
    }
    let formed = net.wait_formed(Duration::from_secs(30), |seen| {
        if !json {
            println!("   overlay lists {seen}/{nodes} node(s) after {:.0} ms", t0.elapsed().as_secs_f64() * 1000.0);
        }
    });
    if !formed {
        bail!("the overlay did not form within 30 s");
    }
    let formed_ms = t0.elapsed().as_secs_f64() * 1000.0;
    if !json {
        println!("== nodes, found through the overlay");
        let mut c = Client::connect(net.control())?;
        if let ToolReply::Nodes { nodes } = c.call(ToolRequest::Nodes, Duration::from_secs(10))? {
            crate::print_nodes(&nodes, false);
        }
    }
    std::fs::create_dir_all(&out)?;
    let dirs = vec![out.clone(), net.dir().to_path_buf()];
    if tour.keep {
        crate::interrupt::on_interrupt(dirs, "stopped; the embedded network is gone", 0);
    } else {
        crate::interrupt::cleanup_on_interrupt(dirs);
    }
    let mut rows = Vec::new();
    let mut jobs: Vec<(String, JobDescription)> = vec![
        (
            format!("mpi_ring {loops} (8 ranks)"),
            JobDescription::run(ring.to_string_lossy(), vec![loops.to_string()], 8),
        ),
        ("factor (1 rank)".into(), factor_job(factor, 1)),
        ("factor (8 ranks)".into(), factor_job(factor, 8)),
    ];
    match &programs.c {
        Ok((ring_c, factor_c)) => {
            let ring = JobDescription::run(ring_c.to_string_lossy(), vec![loops.to_string()], 8);
            jobs.push((format!("C ring {loops} (8 ranks)"), ring));
            let args = vec![FACTOR_N.to_string(), FACTOR_C_BLOCK.to_string()];
            jobs.push(("C factor (8 ranks)".into(), JobDescription::run(factor_c.to_string_lossy(), args, 8)));
        }
        Err(why) if !json => println!("== the C versions are skipped: {why}"),
        Err(_) => {}
    }
    jobs.push(("/bin/true (8 ranks)".into(), JobDescription::run("/bin/true", Vec::new(), 8)));
    let mut failed = false;
    for (name, desc) in jobs {
        if !json {
            println!("== job: {name}");
        }
        let ranks = desc.processes;
        let end = run_job(net.control(), desc.to_xml(), &out, ranks, json)?;
        if !json {
            let why = end.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default();
            println!("   {}{why}", phase_name(end.phase));
        }
        failed |= end.phase != JobPhase::Done;
        rows.push(Row { name, ranks, end });
    }
    let result = std::fs::read_to_string(out.join("factors.txt")).unwrap_or_default();
    if !json {
        print_results(&rows, &result);
    }
    let summary = |shutdown_ms: Option<f64>| {
        let v: Vec<_> = rows
            .iter()
            .map(|r| {
                json!({"job": r.name, "ranks": r.ranks, "phase": phase_name(r.end.phase),
                "all_running_ms": r.end.all_running.map(|d| d.as_secs_f64() * 1000.0),
                "total_ms": r.end.total.as_secs_f64() * 1000.0, "stdout_rank0": r.end.stdout0.trim()})
            })
            .collect();
        json!({"nodes": nodes, "formed_ms": formed_ms, "jobs": v, "shutdown_ms": shutdown_ms, "status_page": url})
    };
    if tour.keep {
        if json {
            println!("{}", summary(None));
        } else {
            println!(
                "== the network stays up (--keep): {url}; `p2pjob --node {}` talks to it; Ctrl-C stops it",
                net.control()
            );
        }
        loop {
            std::thread::park();
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    let stop = Instant::now();
    drop(net);
    let stop_ms = stop.elapsed().as_secs_f64() * 1000.0;
    if json {
        println!("{}", summary(Some(stop_ms)));
    } else {
        println!(
            "== overlay formed in {formed_ms:.0} ms; all {nodes} nodes left and every file was removed in {stop_ms:.0} ms"
        );
    }
    Ok(if failed { 1 } else { 0 })
}

/// The table of how each job went, and the factors that came back.
fn print_results(rows: &[Row], factors: &str) {
    println!("== results");
    println!("{:<26} {:>5} {:>8} {:>14} {:>10}  rank 0 said", "job", "ranks", "state", "all running ms", "total ms");
    for r in rows {
        let running = r.end.all_running.map_or("-".into(), |d| format!("{:.0}", d.as_secs_f64() * 1000.0));
        println!(
            "{:<26} {:>5} {:>8} {:>14} {:>10.0}  {}",
            r.name,
            r.ranks,
            phase_name(r.end.phase),
            running,
            r.end.total.as_secs_f64() * 1000.0,
            r.end.stdout0.lines().last().unwrap_or("")
        );
    }
    if !factors.is_empty() {
        println!("factors.txt came back: {}", factors.trim());
    }
}

fn factor_job(factor: &Path, ranks: u32) -> JobDescription {
    let mut d = JobDescription::run(factor.to_string_lossy(), vec![FACTOR_N.to_string()], ranks);
    d.outputfiles.push("factors.txt".into());
    d
}
