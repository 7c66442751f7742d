//! `p2pjob demo`: an embedded network, the bundled example jobs, timings, and a
//! clean exit.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use p2pmp_core::job::JobDescription;
use p2pmp_core::node::control::{JobPhase, ToolReply, ToolRequest};
use p2pmp_jobd::Client;
use p2pmp_jobd::local::LocalNet;
use serde_json::json;

use crate::follow::{End, Show, follow, phase_name};

const FACTOR_N: u64 = 4_611_686_039_902_224_373;

/// The example programs: next to this binary, else built with cargo.
fn programs() -> anyhow::Result<(PathBuf, PathBuf)> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().ok_or_else(|| anyhow!("no directory for {}", exe.display()))?.join("examples");
    let (ring, factor) = (dir.join("mpi_ring"), dir.join("factor"));
    if ring.is_file() && factor.is_file() {
        return Ok((ring, factor));
    }
    let release = exe.components().any(|c| c.as_os_str() == "release");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    eprintln!("building the example programs (cargo build{} --examples) ...", if release { " --release" } else { "" });
    let mut cmd = std::process::Command::new(cargo);
    cmd.arg("build").arg("--manifest-path").arg(&manifest);
    cmd.args(["-p", "p2pmp-mpi", "-p", "p2pmp-jobd", "--example", "mpi_ring", "--example", "factor"]);
    if release {
        cmd.arg("--release");
    }
    let st = cmd.status().context("running cargo to build the example programs")?;
    if !st.success() || !ring.is_file() || !factor.is_file() {
        bail!("could not build the example programs into {}", dir.display());
    }
    Ok((ring, factor))
}

struct Row {
    name: String,
    ranks: u32,
    end: End,
}

fn run_job(control: std::net::SocketAddr, xml: String, base: &Path, ranks: u32, json: bool) -> anyhow::Result<End> {
    let mut c = Client::connect(control)?;
    let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let base_dir = base.to_string_lossy().into_owned();
    let id = c.send(ToolRequest::Submit { nonce, xml, base_dir, watch: true })?;
    follow(&mut c, id, Some(ranks), Show { json, output: !json, progress: !json })
}

pub(crate) fn run(nodes: usize, loops: u64, json: bool) -> anyhow::Result<i32> {
    let (ring, factor) = programs()?;
    let t0 = Instant::now();
    if !json {
        println!("== starting {nodes} nodes on 127.0.0.1");
    }
    let net = LocalNet::start(nodes, crate::local_slots(8, nodes))?;
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
    let out = std::env::temp_dir().join(format!("p2pmp-demo-{}", std::process::id()));
    std::fs::create_dir_all(&out)?;
    crate::cleanup_on_interrupt(vec![out.clone(), net.dir().to_path_buf()]);
    let mut rows = Vec::new();
    let jobs: Vec<(String, JobDescription)> = vec![
        (
            format!("mpi_ring {loops} (8 ranks)"),
            JobDescription::run(ring.to_string_lossy(), vec![loops.to_string()], 8),
        ),
        ("factor (1 rank)".into(), factor_job(&factor, 1)),
        ("factor (8 ranks)".into(), factor_job(&factor, 8)),
        ("/bin/true (8 ranks)".into(), JobDescription::run("/bin/true", Vec::new(), 8)),
    ];
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
    let _ = std::fs::remove_dir_all(&out);
    let stop = Instant::now();
    drop(net);
    let stop_ms = stop.elapsed().as_secs_f64() * 1000.0;
    if json {
        let v: Vec<_> = rows
            .iter()
            .map(|r| {
                json!({"job": r.name, "ranks": r.ranks, "phase": phase_name(r.end.phase),
                "all_running_ms": r.end.all_running.map(|d| d.as_secs_f64() * 1000.0),
                "total_ms": r.end.total.as_secs_f64() * 1000.0, "stdout_rank0": r.end.stdout0.trim()})
            })
            .collect();
        println!("{}", json!({"nodes": nodes, "formed_ms": formed_ms, "jobs": v, "shutdown_ms": stop_ms}));
    } else {
        println!("== results");
        println!(
            "{:<26} {:>5} {:>8} {:>14} {:>10}  rank 0 said",
            "job", "ranks", "state", "all running ms", "total ms"
        );
        for r in &rows {
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
        if !result.is_empty() {
            println!("factors.txt came back: {}", result.trim());
        }
        println!(
            "== overlay formed in {formed_ms:.0} ms; all {nodes} nodes left and every file was removed in {stop_ms:.0} ms"
        );
    }
    Ok(if failed { 1 } else { 0 })
}

fn factor_job(factor: &Path, ranks: u32) -> JobDescription {
    let mut d = JobDescription::run(factor.to_string_lossy(), vec![FACTOR_N.to_string()], ranks);
    d.outputfiles.push("factors.txt".into());
    d
}
