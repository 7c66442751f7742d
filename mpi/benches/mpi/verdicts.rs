//! The targets of issue #17, judged from one run's figures: each line gives
//! p2pmp's figure, the reference's, their ratio and the verdict (`n/a` with
//! the missing key when a figure is missing).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::figure;

/// One target: p2pmp's key, the reference (a key, or the best of several),
/// and the bound on their ratio.
struct Target {
    what: String,
    ours: String,
    theirs: Vec<String>,
    /// Scale of the reference (the ideal factoring time is half the 1-rank one).
    scale: f64,
    /// At most this ratio (`true`), or at least (`false`).
    at_most: bool,
    bound: f64,
    /// Higher figures are better (bandwidth): the best reference is the largest.
    higher_better: bool,
}

/// The factoring targets' K, and the keys of their 8-rank and 1-rank rows.
const FACTOR_ROWS: [(u64, &str, &str); 2] =
    [(10_000, "factor_8_k10000_s", "factor_1_k10000_s"), (500, "factor_8_s", "factor_1_s")];

fn t(what: impl Into<String>, ours: &str, theirs: &[&str], at_most: bool, bound: f64) -> Target {
    Target {
        what: what.into(),
        ours: ours.into(),
        theirs: theirs.iter().map(|s| s.to_string()).collect(),
        scale: 1.0,
        at_most,
        bound,
        higher_better: !at_most,
    }
}

/// The verdicts, as text for the report.
pub(crate) fn report(fig: &BTreeMap<String, f64>, quick: bool) -> String {
    let loops = if quick { 2000 } else { 20000 };
    let raw_bw = ["raw_tcp_bw_1mib_mbps", "raw_tcp_spin_bw_1mib_mbps", "raw_shm_bw_1mib_mbps"];
    let raw_hosts_bw = ["raw_tcp_hosts_bw_1mib_mbps", "raw_tcp_spin_hosts_bw_1mib_mbps"];
    let mut targets = vec![
        t("8 B latency, one host, vs MPICH default", "p2pmp_lat_8b_us", &["mpich_default_lat_8b_us"], true, 2.0),
        t(
            "8 B latency, two hosts, vs MPICH over TCP there",
            "p2pmp_hosts_lat_8b_us",
            &["mpich_tcp_hosts_lat_8b_us"],
            true,
            1.0,
        ),
        t("1 MiB ping-pong bandwidth vs the best raw row", "p2pmp_bw_1mib_mbps", &raw_bw, false, 0.9),
        t("1 MiB window of 64 vs the best raw row", "p2pmp_win_1mib_mbps", &raw_bw, false, 0.9),
        t(
            "1 MiB bandwidth, two hosts, vs the best raw TCP row there",
            "p2pmp_hosts_bw_1mib_mbps",
            &raw_hosts_bw,
            false,
            0.9,
        ),
        t(
            "1 MiB window of 64, two hosts, vs the best raw TCP row there",
            "p2pmp_hosts_win_1mib_mbps",
            &raw_hosts_bw,
            false,
            0.9,
        ),
    ];
    for (op, size) in
        [("allreduce", "8b"), ("allreduce", "64kib"), ("bcast", "8b"), ("bcast", "64kib"), ("barrier", "8b")]
    {
        let key = format!("{op}_{size}_8_us");
        targets.push(t(
            format!("{op} {size}, 8 ranks, vs Open MPI default"),
            &format!("p2pmp_{key}"),
            &[&format!("openmpi_default_{key}")],
            true,
            1.0,
        ));
    }
    for (n, bound) in [(8, 1.0), (2, 1.5)] {
        let key = format!("ring_{n}x{loops}_s");
        let what = format!("ring {n} x {loops} vs Open MPI default");
        targets.push(t(what, &format!("p2pmp_{key}"), &[&format!("openmpi_default_{key}")], true, bound));
    }
    for (k, eight, one) in FACTOR_ROWS {
        let mut f = t(
            format!("factoring, 8 ranks, K={k}, vs the ideal (1 rank / 2 cores)"),
            &format!("p2pmp_{eight}"),
            &[&format!("p2pmp_{one}")],
            true,
            1.25,
        );
        f.scale = 0.5;
        targets.push(f);
    }
    let mut out = String::from("\ntargets (ratio = p2pmp / reference):\n");
    for tg in &targets {
        let refs: Vec<f64> = tg.theirs.iter().filter_map(|k| fig.get(k).copied()).collect();
        let best = if tg.higher_better {
            refs.iter().copied().reduce(f64::max)
        } else {
            refs.iter().copied().reduce(f64::min)
        };
        let line = match (fig.get(&tg.ours), best) {
            (Some(&ours), Some(r)) => {
                let ratio = ours / (r * tg.scale);
                let ok = if tg.at_most { ratio <= tg.bound } else { ratio >= tg.bound };
                let cmp = if tg.at_most { "<=" } else { ">=" };
                format!(
                    "{} / {} = {ratio:.2} (target {cmp} {}) {}",
                    figure(ours),
                    figure(r * tg.scale),
                    tg.bound,
                    if ok { "ok" } else { "MISSED" }
                )
            }
            (None, _) => format!("n/a (no {})", tg.ours),
            (_, None) => format!("n/a (no {})", tg.theirs.join(" / ")),
        };
        let _ = writeln!(out, "  {:<62} {line}", tg.what);
    }
    let _ = writeln!(out, "  the factoring's floor on this machine (raw shared memory, yielding; no target):");
    for (k, eight, one) in FACTOR_ROWS {
        let line = match (fig.get(&format!("raw_shm_yield_{eight}")), fig.get(&format!("p2pmp_{one}"))) {
            (Some(&raw), Some(&one)) => {
                format!("{} / {} = {:.2} x the ideal", figure(raw), figure(one / 2.0), raw / (one / 2.0))
            }
            _ => "n/a".into(),
        };
        let _ = writeln!(out, "    8 ranks, K={k}: {line}");
    }
    let _ = writeln!(
        out,
        "  the window's floor on this machine (raw shared memory: a 512 KiB ring into 64 buffers; no target):"
    );
    let line = match (fig.get("p2pmp_win_1mib_mbps"), fig.get("raw_shm_win_1mib_mbps")) {
        (Some(&ours), Some(&raw)) => format!("{} / {} = {:.2}", figure(ours), figure(raw), ours / raw),
        _ => "n/a".into(),
    };
    let _ = writeln!(out, "    1 MiB window of 64, one host: {line}");
    let _ = writeln!(
        out,
        "  the two-host window against a raw TCP window (the best of blocking and busy-polling; no target):"
    );
    for (what, ours, raws) in [
        ("unencrypted", "p2pmp_plain", ["raw_tcp", "raw_tcp_spin"]),
        ("sealed as p2pmp seals it", "p2pmp", ["raw_aead", "raw_aead_spin"]),
    ] {
        let raw = raws.iter().filter_map(|r| fig.get(&format!("{r}_hosts_win_1mib_mbps")).copied()).reduce(f64::max);
        let line = match (fig.get(&format!("{ours}_hosts_win_1mib_mbps")), raw) {
            (Some(&ours), Some(raw)) => format!("{} / {} = {:.2}", figure(ours), figure(raw), ours / raw),
            _ => "n/a".into(),
        };
        let _ = writeln!(out, "    {what}: {line}");
    }
    let _ = writeln!(out, "  beside a CPU hog on each core, and after a pause (reported, no target):");
    for key in ["hog_lat_8b_us", "hog_ring_2x2000_s", "pause_median_us", "pause_worst_us"] {
        let cells: Vec<String> = ["p2pmp", "mpich_default", "openmpi_default"]
            .iter()
            .map(|s| {
                fig.get(&format!("{s}_{key}")).map_or_else(|| format!("{s} n/a"), |&v| format!("{s} {}", figure(v)))
            })
            .collect();
        let _ = writeln!(out, "    {key}: {}", cells.join(", "));
    }
    out
}
