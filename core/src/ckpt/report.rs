//! What ranks tell of their checkpoints, and what the nodes keep of it: the
//! last checkpoint each rank wrote and every recovery it made. A rank reports
//! to its node over the local node protocol ([`crate::local::LocalRequest`]),
//! the executor passes it on to the node holding the job
//! ([`crate::job::JobMsg`]), and `p2pjob status` shows it
//! ([`crate::node::control::RankStatus`]).
//!
//! Times are wall-clock stamps (ms since the Unix epoch) taken by the rank:
//! data carried through, never read by a machine.

use serde::{Deserialize, Serialize};

/// Most recoveries kept per rank (the newest; older ones are counted only).
pub const MAX_RECOVERIES: usize = 32;

/// One checkpoint a rank wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointInfo {
    /// The job's snapshot number (every rank of one cut writes the same).
    pub epoch: u64,
    /// When it was written, in ms since the Unix epoch (the rank's clock).
    pub unix_ms: u64,
    /// Bytes of the file as stored (compressed, header included).
    pub stored_bytes: u64,
    /// Bytes the program protected (before compression).
    pub raw_bytes: u64,
}

/// One resumption of a rank from a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryInfo {
    /// The epoch it resumed from.
    pub epoch: u64,
    /// When, in ms since the Unix epoch (the rank's clock).
    pub unix_ms: u64,
}

/// One coordinated checkpoint of a job (a cut), summed over the ranks that
/// wrote it: what `p2pjob checkpoint` reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CutInfo {
    /// The epoch (the newest of the ranks', which agree for one cut).
    pub epoch: u64,
    /// When the last rank wrote its file, in ms since the Unix epoch.
    pub unix_ms: u64,
    /// Bytes stored, every rank's file together.
    pub stored_bytes: u64,
    /// Bytes protected, every rank together.
    pub raw_bytes: u64,
    /// Ranks whose files these are.
    pub ranks: u32,
}

impl CutInfo {
    /// The cut the ranks' checkpoints `files` form.
    pub fn of<'a>(files: impl IntoIterator<Item = &'a CheckpointInfo>) -> CutInfo {
        files.into_iter().fold(CutInfo::default(), |c, f| CutInfo {
            epoch: c.epoch.max(f.epoch),
            unix_ms: c.unix_ms.max(f.unix_ms),
            stored_bytes: c.stored_bytes.saturating_add(f.stored_bytes),
            raw_bytes: c.raw_bytes.saturating_add(f.raw_bytes),
            ranks: c.ranks + 1,
        })
    }
}

/// What a node keeps of one rank's checkpoints.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankCheckpoints {
    /// The last checkpoint it wrote, if any.
    pub last: Option<CheckpointInfo>,
    /// Its recoveries, oldest first (the newest [`MAX_RECOVERIES`]).
    pub recoveries: Vec<RecoveryInfo>,
    /// Recoveries in all, those no longer listed included.
    pub recovered: u32,
}

impl RankCheckpoints {
    /// The rank wrote `c`: it is the last one now.
    pub fn written(&mut self, c: CheckpointInfo) {
        self.last = Some(c);
    }

    /// The rank resumed from a checkpoint.
    pub fn recovered(&mut self, r: RecoveryInfo) {
        if self.recoveries.len() >= MAX_RECOVERIES {
            self.recoveries.remove(0);
        }
        self.recoveries.push(r);
        self.recovered = self.recovered.saturating_add(1);
    }

    /// Whether nothing was reported.
    pub fn is_empty(&self) -> bool {
        self.last.is_none() && self.recovered == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_checkpoint_wins_and_recoveries_are_kept_up_to_the_cap() {
        let mut r = RankCheckpoints::default();
        assert!(r.is_empty());
        let c = |epoch| CheckpointInfo { epoch, unix_ms: 10 * epoch, stored_bytes: 7, raw_bytes: 9 };
        r.written(c(2));
        r.written(c(1));
        assert_eq!(r.last, Some(c(1)), "after a roll-back an older epoch is the last one");
        for epoch in 0..MAX_RECOVERIES as u64 + 3 {
            r.recovered(RecoveryInfo { epoch, unix_ms: epoch });
        }
        assert_eq!(r.recoveries.len(), MAX_RECOVERIES);
        assert_eq!(r.recoveries[0].epoch, 3, "the oldest went");
        assert_eq!(r.recovered, MAX_RECOVERIES as u32 + 3);
        assert!(!r.is_empty());
    }

    #[test]
    fn a_cut_sums_its_files() {
        let a = CheckpointInfo { epoch: 3, unix_ms: 100, stored_bytes: 10, raw_bytes: 40 };
        let b = CheckpointInfo { epoch: 3, unix_ms: 120, stored_bytes: 12, raw_bytes: 40 };
        let cut = CutInfo::of([&a, &b]);
        assert_eq!(cut, CutInfo { epoch: 3, unix_ms: 120, stored_bytes: 22, raw_bytes: 80, ranks: 2 });
        assert_eq!(CutInfo::of([]), CutInfo::default());
    }
}
