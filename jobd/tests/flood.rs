//! The flood bench's harness, short: a real jobd flooded for 4 s from 100
//! connections (junk, oversized prefixes, valid frames never read, half-open,
//! churn) survives, stays under a memory bound, bans the offenders (once in its
//! log per ban), keeps its honest peer, and a normal job submitted meanwhile
//! (a rank on each daemon) completes.

#[path = "../benches/flood/harness.rs"]
mod harness;

use std::time::Duration;

/// Growth of the daemon's RSS the flood may cause at most.
const RSS_BOUND_MIB: u64 = 256;

#[test]
fn a_flooded_daemon_survives_stays_bounded_and_runs_a_job() {
    let r = harness::run(harness::Opts { flood: Duration::from_secs(4), conns: 100 });
    let table = r.table();
    eprintln!("{table}");
    assert_eq!(r.json()["alive_after"], r.alive_after, "the JSON carries the figures");
    assert!(r.alive_after, "the daemon stopped answering\n{table}");
    assert_eq!(r.nodes_after, 2, "the honest peer was cut off\n{table}");
    assert!(r.job_flooded.is_ok(), "the job did not complete\n{table}");
    assert!(r.rss_peak_kib < r.rss_before_kib + (RSS_BOUND_MIB << 10), "RSS over the bound\n{table}");
    let count = |role: &str, f: fn(&harness::RoleCount) -> u64| {
        r.roles.iter().find(|(n, _)| *n == role).map_or(0, |(_, c)| f(c))
    };
    use std::sync::atomic::Ordering::Relaxed;
    for role in ["junk", "oversize", "valid"] {
        assert!(count(role, |c| c.refused.load(Relaxed)) > 0, "{role}: its source was never refused\n{table}");
    }
    let (_, refused, cut_off) = r.daemon_counts.expect("the daemon logged its counts as it stopped");
    assert!(cut_off >= 20 && refused > 0, "offenders cut off and refused\n{table}");
    assert!(r.log_bans <= cut_off as usize && r.log_bans <= 100, "one warning per ban, not per connection\n{table}");
}
