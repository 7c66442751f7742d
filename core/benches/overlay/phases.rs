//! Where a run's time goes: virtual time, wall time, CPU time and simulator work
//! per phase (joining, converging, the maintenance window, lookups), and the
//! messages sent by kind. Printed on stderr with the progress lines.

use std::time::Instant;

use p2pmp_core::machine::Machine;
use p2pmp_core::sim::{Sim, SimStats};

use crate::overlays::BenchOverlay;

/// A snapshot taken when a phase starts.
pub(crate) struct PhaseStart {
    name: &'static str,
    wall: Instant,
    cpu_s: Option<f64>,
    virtual_s: f64,
    stats: SimStats,
}

/// One finished phase.
pub(crate) struct PhaseRow {
    name: &'static str,
    virtual_s: f64,
    wall_s: f64,
    cpu_s: Option<f64>,
    stats: SimStats,
}

impl PhaseStart {
    pub(crate) fn new<M: Machine>(name: &'static str, sim: &Sim<M>) -> Self {
        PhaseStart {
            name,
            wall: Instant::now(),
            cpu_s: cpu_seconds(),
            virtual_s: sim.elapsed().as_secs_f64(),
            stats: sim.stats(),
        }
    }

    pub(crate) fn finish<M: Machine>(self, sim: &Sim<M>) -> PhaseRow {
        let s = sim.stats();
        let b = self.stats;
        PhaseRow {
            name: self.name,
            virtual_s: sim.elapsed().as_secs_f64() - self.virtual_s,
            wall_s: self.wall.elapsed().as_secs_f64(),
            cpu_s: cpu_seconds().zip(self.cpu_s).map(|(now, then)| now - then),
            stats: SimStats {
                events: s.events - b.events,
                sent: s.sent - b.sent,
                delivered: s.delivered - b.delivered,
                lost: s.lost - b.lost,
                failed: s.failed - b.failed,
                timeouts: s.timeouts - b.timeouts,
            },
        }
    }
}

/// Prints the phases as a table on stderr.
pub(crate) fn print<'a>(rows: impl IntoIterator<Item = &'a PhaseRow>) {
    eprintln!(
        "  {:<11} {:>9} {:>8} {:>8} {:>12} {:>12} {:>12} {:>9}",
        "phase", "virtual s", "wall s", "cpu s", "events", "msgs sent", "timeouts", "µs/event"
    );
    for r in rows {
        let cpu = r.cpu_s.map_or("?".into(), |c| format!("{c:.1}"));
        let per = r
            .cpu_s
            .filter(|_| r.stats.events > 0)
            .map_or("?".into(), |c| format!("{:.2}", c * 1e6 / r.stats.events as f64));
        eprintln!(
            "  {:<11} {:>9.1} {:>8.1} {:>8} {:>12} {:>12} {:>12} {:>9}",
            r.name, r.virtual_s, r.wall_s, cpu, r.stats.events, r.stats.sent, r.stats.timeouts, per
        );
    }
}

/// Prints every node's messages sent so far, summed by kind, largest first.
pub(crate) fn print_kinds<O: BenchOverlay>(sim: &Sim<O>) {
    let kinds = O::kinds(sim);
    let total: u64 = kinds.iter().map(|(_, n)| n).sum();
    let line: Vec<String> =
        kinds.iter().map(|(k, n)| format!("{k}={:.1}%", 100.0 * *n as f64 / total.max(1) as f64)).collect();
    eprintln!("  messages sent by kind ({total} in all): {}", line.join(" "));
}

/// User plus system CPU time of this process, from /proc (Linux only).
pub(crate) fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start after ')'.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 here.
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}
