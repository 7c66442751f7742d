//! Ping-pong between two hosts: a two-host namespace cluster
//! (`p2pmp_tests::cluster`, a jobd on each, one slot each) runs the p2pmp
//! ping-pong as a two-rank job, one rank per host, and, beside it, a raw
//! blocking TCP ping-pong between a process on each of the same two hosts.

use std::time::{Duration, Instant};

use p2pmp_tests::cluster::{Cluster, unavailable};

use crate::{SIZES, iters, raw, run, size_label};

/// One measured figure: (section, row, system, key, value).
pub(crate) type Figure = (&'static str, String, &'static str, String, Result<f64, String>);

/// Every figure of the two-host rows (with the reason where there is none).
pub(crate) fn pingpong(quick: bool, limit: Duration) -> Vec<Figure> {
    let got: Vec<(&'static str, Figures)> = match measure(quick, limit) {
        Ok(v) => v,
        Err(why) => ["p2pmp", "raw_tcp"].map(|s| (s, SIZES.iter().map(|z| (*z, Err(why.clone()))).collect())).into(),
    };
    let mut out = Vec::new();
    for (system, figures) in got {
        for (size, lat) in figures {
            let l = size_label(size);
            let row = format!("{size} B");
            out.push(("hosts_lat", row.clone(), system, format!("hosts_lat_{l}_us"), lat.clone()));
            out.push(("hosts_bw", row, system, format!("hosts_bw_{l}_mbps"), lat.map(|us| size as f64 / us)));
        }
    }
    out
}

type Figures = Vec<(usize, Result<f64, String>)>;

fn measure(quick: bool, limit: Duration) -> Result<Vec<(&'static str, Figures)>, String> {
    if let Some(why) = unavailable() {
        return Err(format!("skipped: {why}"));
    }
    p2pmp_tests::cargo_build(&["-p", "p2pmp-jobd", "--bins"]);
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut c = Cluster::new(2, "mpi-bench");
    c.start_all(&["--slots", "1", "--stabilize-ms", "200", "--log-level", "warn"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.p2pjob(0, &["nodes"], Duration::from_secs(20)).stdout.lines().filter(|l| l.starts_with("198.18.")).count()
        < 2
    {
        if Instant::now() > deadline {
            return Err("failed: the two hosts' overlay did not form".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let me_s = me.to_string_lossy().into_owned();
    let mut args = vec!["run", "-n", "2", me_s.as_str(), "pingpong"];
    if quick {
        args.push("quick");
    }
    let started = Instant::now();
    let out = c.p2pjob(0, &args, limit);
    let p2pmp: Figures = {
        let lines: Vec<String> = out.stdout.lines().filter_map(|l| l.strip_prefix("[0] ").map(str::to_owned)).collect();
        let v = run::values(&lines, "pp");
        let why = if out.ok { "failed: no figure".into() } else { format!("failed: {}", out.stderr.trim()) };
        SIZES
            .iter()
            .map(|&z| {
                (z, v.iter().find(|x| x.len() >= 2 && x[0] as usize == z).map(|x| x[1]).ok_or_else(|| why.clone()))
            })
            .collect()
    };
    eprintln!("  hosts     p2pmp ping-pong over the bridge took {:.1} s", started.elapsed().as_secs_f64());
    let raw: Figures = SIZES.iter().map(|&z| (z, raw_between(&c, &me, z, iters(z, quick)))).collect();
    Ok(vec![("p2pmp", p2pmp), ("raw_tcp", raw)])
}

/// A raw blocking ping-pong of `n` x 5 messages of `size` bytes: the timing
/// process on host 0, the echo on host 1.
fn raw_between(c: &Cluster, me: &std::path::Path, size: usize, n: usize) -> Result<f64, String> {
    let at = std::net::SocketAddr::from((c.hosts[0].ip, 7500));
    let timer = c.hosts[0]
        .command(me)
        .env(raw::CLIENT_VAR, format!("{at} {size} {n}"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let echo = c.hosts[1].command(me).env(raw::ECHO_VAR, format!("{at} {size} {} block", 5 * n)).status();
    let out = timer.wait_with_output().map_err(|e| e.to_string())?;
    match echo {
        Ok(st) if st.success() => {}
        other => return Err(format!("failed: echo {other:?}")),
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().nth(2).and_then(|v| v.parse().ok()).ok_or_else(|| format!("failed: timer said {text:?}"))
}
