//! The descriptors the daemon's connection caps need: a peer that opens
//! connections until `accept` fails with "too many open files" would starve
//! job processes and files of descriptors, so the caps must fit under the
//! process's limit with room to spare.

use p2pmp_core::guard::GuardConfig;
use tracing::{info, warn};

/// Descriptors kept for everything but connections: job pipes, files, listeners.
const RESERVE: u64 = 256;

/// Raises this process's soft descriptor limit to its hard limit, then lowers
/// `guard.max_conns` if overlay plus local connections could still exceed it.
pub(crate) fn fit_descriptors(mut guard: GuardConfig) -> GuardConfig {
    let Some(limit) = raise_nofile() else { return guard };
    // Overlay and local connections are capped apart: two caps under one limit.
    let room = usize::try_from(limit.saturating_sub(RESERVE) / 2).unwrap_or(usize::MAX).max(16);
    if guard.max_conns > room {
        warn!(limit, max_conns = guard.max_conns, room, "descriptor limit too low for limits.max_conns: lowering it");
        guard.max_conns = room;
    }
    guard
}

/// The soft RLIMIT_NOFILE after raising it to the hard one.
fn raise_nofile() -> Option<u64> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return None;
    }
    if r.rlim_cur < r.rlim_max {
        let raised = libc::rlimit { rlim_cur: r.rlim_max, rlim_max: r.rlim_max };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            info!(from = r.rlim_cur, to = r.rlim_max, "raised the open-file limit");
            r = raised;
        }
    }
    Some(r.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_fit_under_the_descriptor_limit() {
        let huge = GuardConfig { max_conns: usize::MAX / 4, ..GuardConfig::default() };
        let fitted = fit_descriptors(huge);
        let limit = raise_nofile().expect("Linux has RLIMIT_NOFILE");
        assert!(
            2 * fitted.max_conns as u64 + RESERVE <= limit.max(2 * 16 + RESERVE),
            "{} under {limit}",
            fitted.max_conns
        );
        let small = GuardConfig { max_conns: 10, ..GuardConfig::default() };
        assert_eq!(fit_descriptors(small.clone()), small, "caps that fit are kept");
    }
}
