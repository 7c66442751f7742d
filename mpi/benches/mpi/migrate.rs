//! `--migrate`: how long `p2pjob migrate` takes to move a rank with 1.5 MB,
//! 16 MB and 256 MB of protected state (quick: 1.5 and 16) between hosts of a
//! namespace cluster (three hosts, a jobd and one slot on each, the job
//! submitted on host 0, its two ranks on two hosts), from the request to the
//! rank having resumed alone on the third host (it reports its recovery to
//! its node, which the job's node shows in `p2pjob status`; the other rank
//! never stops), beside the time a raw TCP transfer takes to move the same
//! bytes once between two of the hosts. The state is an xorshift stream
//! (incompressible: zstd stores it as is), so the figure is the worst case;
//! the checkpoint travels twice (the rank's node to the job's node, then to
//! the node it resumes on) and is written and read at each.

use std::time::{Duration, Instant};

use p2pmp_tests::cluster::{Cluster, unavailable};

use crate::Results;

/// Each row: its name, its JSON label, the protected bytes per rank.
const STATES: [(&str, &str, u64); 3] =
    [("1.5 MB", "1_5mb", 1_500_000), ("16 MB", "16mb", 16_000_000), ("256 MB", "256mb", 256_000_000)];

pub(crate) fn section(res: &mut Results, quick: bool) {
    let rows = if quick { &STATES[..2] } else { &STATES[..] };
    match measure(rows) {
        Ok(figures) => {
            for ((row, label, _), (migrate, copy)) in rows.iter().zip(figures) {
                res.put("migrate", row, "p2pmp", &format!("migrate_{label}_s"), migrate.clone());
                res.put("migrate", row, "raw_tcp", &format!("copy_{label}_s"), copy.clone());
                let ratio = migrate.and_then(|m| copy.map(|c| m / c));
                res.put("migrate", row, "ratio", &format!("migrate_over_copy_{label}"), ratio);
            }
        }
        Err(why) => {
            for (row, label, _) in rows {
                res.put("migrate", row, "p2pmp", &format!("migrate_{label}_s"), Err(why.clone()));
            }
        }
    }
}

/// A row's migration and copy times.
type Row = (Result<f64, String>, Result<f64, String>);

fn measure(rows: &[(&'static str, &'static str, u64)]) -> Result<Vec<Row>, String> {
    if let Some(why) = unavailable() {
        return Err(format!("skipped: {why}"));
    }
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let c = crate::hosts::start_cluster(3, "mpi-bench-migrate", &["--heartbeat-ms", "250"])?;
    let mut out = Vec::new();
    for &(row, _, bytes) in rows {
        let migrate = migrate_once(&c, &me, bytes);
        eprintln!("  migrate   {row:<22} {migrate:?}");
        out.push((migrate, copy_once(&c, &me, bytes)));
    }
    Ok(out)
}

/// Submits the `state` job, waits until both ranks can be asked, then times
/// `p2pjob migrate JOB 1` until rank 1 has resumed on another node (and rank
/// 0 has not: nothing rolls back); the job is killed after.
fn migrate_once(c: &Cluster, me: &std::path::Path, bytes: u64) -> Result<f64, String> {
    let xml = format!(
        "<?xml version=\"1.0\"?>\n<p2pjob>\n  <executable>{}</executable>\n  <arguments>state {bytes} 100000000</arguments>\n  \
         <processes>2</processes>\n  <requirement>linux</requirement>\n</p2pjob>\n",
        me.display()
    );
    let job = c.dir.join(format!("state-{bytes}.xml"));
    std::fs::write(&job, xml).map_err(|e| e.to_string())?;
    let sub = c.p2pjob(0, &["submit", &job.to_string_lossy()], Duration::from_secs(20));
    if !sub.ok {
        return Err(format!("failed: submit: {}", sub.stderr.trim()));
    }
    let id = sub.stdout.trim().to_owned();
    let result = (|| {
        let until = Instant::now() + Duration::from_secs(120);
        // Running, and far enough in that both ranks are connected to their nodes.
        loop {
            let st = c.p2pjob(0, &["status", &id], Duration::from_secs(20)).stdout;
            if st.contains("2 running") {
                break;
            }
            if Instant::now() > until {
                return Err(format!("failed: never running: {st}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_secs(1));
        let t0 = Instant::now();
        let m = c.p2pjob(2, &["migrate", &id, "1"], Duration::from_secs(300));
        if !m.ok {
            return Err(format!("failed: migrate: {}", m.stderr.trim()));
        }
        if !m.stdout.contains("the other ranks went on") {
            return Err(format!("failed: the job rolled back: {}", m.stdout.trim()));
        }
        loop {
            let st = c.p2pjob(0, &["status", &id], Duration::from_secs(20)).stdout;
            if st.matches("recovered from epoch").count() >= 1 {
                return Ok(t0.elapsed().as_secs_f64());
            }
            if Instant::now() > until + Duration::from_secs(300) {
                return Err(format!("failed: never resumed: {st}"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    })();
    let _ = c.p2pjob(0, &["kill", &id], Duration::from_secs(20));
    result
}

/// One raw blocking TCP transfer of `bytes` from host 1 to host 2 and back
/// (five times, the median), halved: the time to copy the bytes once
/// between two hosts.
fn copy_once(c: &Cluster, me: &std::path::Path, bytes: u64) -> Result<f64, String> {
    let size = usize::try_from(bytes).map_err(|e| e.to_string())?;
    Ok(crate::hosts::raw_hosts(c, me, (1, 2), size, 1, false, std::time::Duration::from_secs(120))? / 1e6)
}
