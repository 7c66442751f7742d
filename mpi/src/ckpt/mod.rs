//! Application-level checkpoints: protected regions saved at safe points
//! ([`World::snapshot`]) and filled back in when a process resumes
//! ([`World::recover`]), in the style of FTI and VeloC, with the original
//! system's pre-checkpoint, post-checkpoint and restart hooks.
//!
//! A snapshot is a collective: every rank calls it the same number of times.
//! Most calls cost an increment and a comparison: the ranks agree whether a
//! checkpoint is due (the job's interval, `P2PMP_CHECKPOINT_MS`, has passed on
//! some rank) only every `stride` calls, one small allreduce, and the stride
//! grows (at most doubling at each agreement) until that agreement costs about
//! 1% of the time between agreements, but never so far that a tenth of the
//! interval passes between two of them on any rank: the largest stride some
//! rank wants for its cost, within the smallest any rank allows for the
//! interval. Each rank measures the time between the starts of two agreements,
//! which a rank running late (preempted as the last agreement ended, say)
//! cannot make look short: from their ends, such a rank once saw its calls
//! take microseconds, asked for a stride of 1,023, and a job with a 50 ms
//! interval on a loaded machine took no checkpoint in 300 ms.
//!
//! A checkpoint is also due when the node asked for one (`p2pjob checkpoint`:
//! a numbered request pushed over the rank's node connection, see
//! `crate::transport`): the agreement carries the newest request any rank has
//! seen, and the cut taken answers every request up to it, so a request that
//! reaches some ranks after the cut takes no second one. Each rank reports
//! every checkpoint it writes and every recovery to its node, which keeps them
//! for `p2pjob status`.
//!
//! When one is due, each rank waits until every message it sent has been taken
//! in by its receiver, then the ranks check together that no message is in
//! flight or waiting unreceived and no request is pending anywhere (the cut is
//! then empty of messages, so the files of one epoch are a consistent state of
//! the whole job); if some rank is not there yet, the checkpoint is taken at the
//! next agreement instead. Each rank writes `rank-R.E.ckpt` (the format of
//! [`p2pmp_core::ckpt`], compressed with zstd unless `P2PMP_CHECKPOINT_CODEC`
//! says `gzip` or `none`) into `P2PMP_CHECKPOINT_DIR` (default `checkpoints`
//! in the job directory); once every rank has written epoch E, the files of
//! older epochs are removed.
//!
//! A process started with `P2PMP_RESTART` (the path of its checkpoint file, or
//! of a directory of the job's checkpoints: then this rank's file of the newest
//! epoch every rank has) resumes: [`World::recover`] checks the file (digest,
//! job: `P2PMP_RESTART_JOB` when set, as a node sets it when a restarted job
//! resumes from a cut of its earlier run, rank, size), fills
//! every protected region from it (each must be protected again with the size
//! it had), runs the restart hooks and returns true. The library state it
//! carries is the snapshot count, the epoch and the agreement stride, so the
//! resumed ranks agree on checkpoints as before. Rolling a whole job back to one
//! epoch is consistent because that epoch's cut holds no message. One rank
//! moving while the others go on also carries its engine across (the
//! `moving` module: `rank-R.E.engine` beside the checkpoint).

mod codec;
mod moving;
mod store;

pub use codec::{compress, decompress};
pub use moving::{MOVED_EXIT, RESUME_ENGINE_VAR, engine_path};
pub(crate) use moving::{fault_move_cuts, resumed};
pub use p2pmp_core::ckpt::Codec;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use p2pmp_core::ckpt::{Body, CheckpointInfo, Header, RecoveryInfo, Region};
use p2pmp_core::id::{ID_BYTES, Id};
use p2pmp_core::job::JobId;
use p2pmp_core::local::LocalRequest;

use crate::error::{Error, Result};
use crate::pod::Op;
use crate::world::{COMM_COLL, World};

/// The job's checkpoint interval in milliseconds (set by the node from the
/// job file's `<checkpoint>`); absent: only on request.
pub const INTERVAL_VAR: &str = "P2PMP_CHECKPOINT_MS";
/// Set when the process resumes: the path of its checkpoint file.
pub const RESTART_VAR: &str = "P2PMP_RESTART";
/// Set with [`RESTART_VAR`] when the checkpoint was written by another run
/// of the job (a restart places the job again under a new id): that run's id.
pub const RESTART_JOB_VAR: &str = "P2PMP_RESTART_JOB";
/// Where checkpoint files go (default `checkpoints`, in the job directory).
pub const DIR_VAR: &str = "P2PMP_CHECKPOINT_DIR";
/// How checkpoint bodies are compressed: `zstd` (default), `gzip` or `none`.
pub const CODEC_VAR: &str = "P2PMP_CHECKPOINT_CODEC";

/// Most bytes of library state a checkpoint file may carry.
const MAX_STATE: u64 = 4096;
/// The agreement's target share of the time between two agreements.
const AGREEMENT_SHARE: u32 = 100;
/// Largest stride between agreements.
const MAX_STRIDE: u64 = 1 << 20;

/// A program's hook, run before or after a checkpoint, or on restart.
pub type Hook = Box<dyn FnMut()>;

/// What the checkpoints of this process have cost so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CheckpointStats {
    /// Snapshot calls.
    pub calls: u64,
    /// Agreements run (one small allreduce each).
    pub agreements: u64,
    /// Checkpoints written (the last one's epoch).
    pub epoch: u64,
    /// Checkpoints that were due but put off because a message was in flight.
    pub deferred: u64,
    /// The last file's size, and the bytes it protected before compression.
    pub last_file_bytes: u64,
    pub last_raw_bytes: u64,
    /// Time spent writing checkpoints (waiting for the cut, compressing, writing).
    pub writing: Duration,
    /// The current stride between agreements.
    pub stride: u64,
}

/// A region the program protected.
#[derive(Debug, Clone, Copy)]
struct Protected {
    ptr: *mut u8,
    len: usize,
}

/// The checkpoint state of one process.
pub(crate) struct Checkpointer {
    job: JobId,
    /// The job id the checkpoint resumed from must carry.
    restart_job: JobId,
    regions: BTreeMap<u32, Protected>,
    pre: Vec<Hook>,
    post: Vec<Hook>,
    restart: Vec<Hook>,
    every: Option<Duration>,
    dir: PathBuf,
    codec: Codec,
    restart_from: Option<PathBuf>,
    next_due: Option<Instant>,
    requested: bool,
    /// The newest of the node's checkpoint requests a cut answered.
    served: u64,
    stats: CheckpointStats,
    /// When the last agreement started, and the call count then.
    last_agreement: Option<(Instant, u64)>,
    /// How long the last agreement took.
    agreement_cost: Duration,
    /// The cut of the engine this process resumed with (see `moving`):
    /// the checkpoint it recovers from must be of the same.
    engine_epoch: Option<u64>,
    /// The cuts after which this rank moves alone (see `moving`).
    pub(crate) move_at: std::collections::BTreeSet<u64>,
}

impl std::fmt::Debug for Checkpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpointer")
            .field("regions", &self.regions.len())
            .field("every", &self.every)
            .field("dir", &self.dir)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Checkpointer {
    /// Reads the checkpoint variables through `get`.
    pub(crate) fn from_lookup(job: &[u8], get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let bytes: [u8; ID_BYTES] = job.try_into().unwrap_or([0; ID_BYTES]);
        let every = match get(INTERVAL_VAR) {
            None => None,
            Some(ms) => {
                let ms: u64 =
                    ms.trim().parse().map_err(|e| Error::Env { var: INTERVAL_VAR, problem: format!("{e}") })?;
                Some(Duration::from_millis(ms)).filter(|d| !d.is_zero())
            }
        };
        let job = JobId(Id::from_bytes(bytes));
        let restart_job = match get(RESTART_JOB_VAR) {
            None => job,
            Some(hex) => {
                let id = crate::parse_hex(&hex).and_then(|b| {
                    <[u8; ID_BYTES]>::try_from(b).map_err(|b| format!("{} bytes, a job id has {ID_BYTES}", b.len()))
                });
                JobId(Id::from_bytes(id.map_err(|problem| Error::Env { var: RESTART_JOB_VAR, problem })?))
            }
        };
        Ok(Checkpointer {
            job,
            restart_job,
            regions: BTreeMap::new(),
            pre: Vec::new(),
            post: Vec::new(),
            restart: Vec::new(),
            every,
            dir: get(DIR_VAR).map_or_else(|| PathBuf::from("checkpoints"), PathBuf::from),
            codec: store::codec_from(get(CODEC_VAR).as_deref())?,
            restart_from: get(RESTART_VAR).filter(|p| !p.is_empty()).map(PathBuf::from),
            next_due: None,
            requested: false,
            served: 0,
            stats: CheckpointStats { stride: 1, ..CheckpointStats::default() },
            last_agreement: None,
            agreement_cost: Duration::ZERO,
            engine_epoch: None,
            move_at: std::collections::BTreeSet::new(),
        })
    }

    fn protected_bytes(&self) -> u64 {
        self.regions.values().map(|r| r.len as u64).sum()
    }

    /// The library state a file of `epoch` carries: calls, epoch, stride.
    fn state(&self, epoch: u64) -> Bytes {
        let mut s = Vec::with_capacity(24);
        for v in [self.stats.calls, epoch, self.stats.stride] {
            s.extend_from_slice(&v.to_le_bytes());
        }
        Bytes::from(s)
    }

    /// The strides this rank would like, agreement starting at `now`: for an
    /// agreement costing about 1/[`AGREEMENT_SHARE`] of the time between
    /// agreements, and at most (for ten agreements an interval).
    fn wanted_stride(&self, now: Instant) -> (u64, u64) {
        let Some((at, calls)) = self.last_agreement else { return (1, MAX_STRIDE) };
        let per_call = now.saturating_duration_since(at).as_nanos() / u128::from((self.stats.calls - calls).max(1));
        let per_call = per_call.max(1);
        let wanted = self.agreement_cost.as_nanos() * u128::from(AGREEMENT_SHARE) / per_call;
        let most = self.every.map_or(u128::from(MAX_STRIDE), |every| every.as_nanos() / 10 / per_call);
        let clamp = |s: u128| s.clamp(1, u128::from(MAX_STRIDE)) as u64;
        (clamp(wanted), clamp(most))
    }

    /// The stride after an agreement: the largest any rank wants, within the
    /// smallest any allows and twice the stride so far.
    fn agreed_stride(&self, wanted: u64, most: u64) -> u64 {
        wanted.min(most).min(self.stats.stride.saturating_mul(2)).clamp(1, MAX_STRIDE)
    }

    fn set_state(&mut self, state: &[u8]) -> Result<()> {
        let word = |i: usize| state.get(i * 8..i * 8 + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
        match (state.len(), word(0), word(1), word(2)) {
            (24, Some(calls), Some(epoch), Some(stride)) if (1..=MAX_STRIDE).contains(&stride) => {
                self.stats.calls = calls;
                self.stats.epoch = epoch;
                self.stats.stride = stride;
                Ok(())
            }
            _ => Err(Error::Checkpoint("library state of the checkpoint is malformed".into())),
        }
    }
}

impl World {
    /// Adds (or updates) region `id`: its `bytes` bytes at `ptr` are saved with
    /// every checkpoint and filled back in by [`World::recover`].
    ///
    /// # Safety
    /// `ptr` must stay valid for reads and writes of `bytes` bytes, and not be
    /// used by anything else during [`World::snapshot`] and [`World::recover`],
    /// until the region is unprotected or the world finalised.
    pub unsafe fn protect(&mut self, id: u32, ptr: *mut u8, bytes: usize) -> Result<()> {
        if ptr.is_null() {
            // Even an empty region is copied through its pointer, which must not be null.
            return Err(Error::Invalid(format!("region {id}: null pointer ({bytes} bytes)")));
        }
        self.ckpt.regions.insert(id, Protected { ptr, len: bytes });
        Ok(())
    }

    /// Removes region `id` from the checkpoints.
    pub fn unprotect(&mut self, id: u32) -> Result<()> {
        match self.ckpt.regions.remove(&id) {
            Some(_) => Ok(()),
            None => Err(Error::Invalid(format!("region {id} is not protected"))),
        }
    }

    /// Runs `f` before every checkpoint this process takes.
    pub fn on_preckpt(&mut self, f: Hook) {
        self.ckpt.pre.push(f);
    }

    /// Runs `f` after every checkpoint this process takes.
    pub fn on_postckpt(&mut self, f: Hook) {
        self.ckpt.post.push(f);
    }

    /// Runs `f` when this process resumes from a checkpoint ([`World::recover`]).
    pub fn on_restart(&mut self, f: Hook) {
        self.ckpt.restart.push(f);
    }

    /// Asks for a checkpoint at the next agreement, due or not.
    pub fn request_checkpoint(&mut self) {
        self.ckpt.requested = true;
    }

    /// What checkpointing has cost this process.
    pub fn checkpoint_stats(&self) -> &CheckpointStats {
        &self.ckpt.stats
    }

    /// When this process resumes from a checkpoint (`P2PMP_RESTART`), fills every
    /// protected region from it, restores the library's snapshot state, runs the
    /// restart hooks and returns true; otherwise returns false. Call it after
    /// init and the `protect` calls.
    pub fn recover(&mut self) -> Result<bool> {
        let Some(given) = self.ckpt.restart_from.take() else { return Ok(false) };
        let path = store::restart_file(&given, self.rank(), self.size())?;
        let max_raw = 4 + 12 * self.ckpt.regions.len() as u64 + self.ckpt.protected_bytes() + 8 + MAX_STATE;
        let (header, body) = store::read(&path, max_raw)?;
        let whose = (header.job, header.rank, header.size);
        if whose != (self.ckpt.restart_job, self.rank(), self.size()) {
            return Err(Error::Checkpoint(format!(
                "{}: checkpoint of job {} rank {} of {}, this is job {} rank {} of {}",
                path.display(),
                header.job,
                header.rank,
                header.size,
                self.ckpt.restart_job,
                self.rank(),
                self.size()
            )));
        }
        if self.ckpt.engine_epoch.is_some_and(|e| e != header.epoch) {
            return Err(Error::Checkpoint(format!(
                "{}: checkpoint {}, the engine resumed is of checkpoint {}",
                path.display(),
                header.epoch,
                self.ckpt.engine_epoch.unwrap_or_default()
            )));
        }
        let saved: BTreeMap<u32, &Region> = body.regions.iter().map(|r| (r.id, r)).collect();
        let ids = |m: Vec<u32>| m.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        if saved.keys().ne(self.ckpt.regions.keys()) {
            return Err(Error::Checkpoint(format!(
                "{}: the checkpoint holds regions [{}], the program protected [{}]",
                path.display(),
                ids(saved.keys().copied().collect()),
                ids(self.ckpt.regions.keys().copied().collect())
            )));
        }
        for (id, p) in &self.ckpt.regions {
            let data = &saved[id].data;
            if data.len() != p.len {
                return Err(Error::Checkpoint(format!(
                    "{}: region {id} was saved with {} bytes, is protected with {}",
                    path.display(),
                    data.len(),
                    p.len
                )));
            }
        }
        self.ckpt.set_state(&body.state)?;
        for (id, p) in &self.ckpt.regions {
            // SAFETY: `protect`'s contract: valid for `len` bytes, not in use.
            unsafe { std::ptr::copy_nonoverlapping(saved[id].data.as_ptr(), p.ptr, p.len) };
        }
        self.ckpt.next_due = None;
        run(&mut self.ckpt.restart);
        let recovery = RecoveryInfo { epoch: header.epoch, unix_ms: unix_ms() };
        self.net.report(LocalRequest::Recovered { recovery });
        Ok(true)
    }

    /// A safe point: every rank calls it the same number of times. Takes the
    /// job's coordinated checkpoint when one is due or was asked for (see the
    /// module docs); otherwise returns at once.
    pub fn snapshot(&mut self) -> Result<()> {
        let c = &mut self.ckpt;
        c.stats.calls += 1;
        if c.stats.calls % c.stats.stride != 0 {
            return Ok(());
        }
        let start = Instant::now();
        if let (None, Some(every)) = (c.next_due, c.every) {
            c.next_due = Some(start + every);
        }
        // The node's newest request: a cut answers it unless one already did.
        // A rank asked to move that is still here wants a cut to leave after
        // (the cut answering the move was taken before it was asked, or it
        // was not quiet then).
        let asked = self.net.checkpoint_wanted();
        let moving = self.net.move_wanted();
        let stays = moving > 0 && moving <= c.served;
        let due = u64::from(c.requested || c.next_due.is_some_and(|t| start >= t) || asked > c.served || stays);
        let (wanted, most) = c.wanted_stride(start);
        // One maximum for all four: the smallest `most` as the largest complement.
        let agreed = self.allreduce(&[due, wanted, asked, u64::MAX - most], Op::Max)?;
        let c = &mut self.ckpt;
        let end = Instant::now();
        c.stats.agreements += 1;
        c.stats.stride = c.agreed_stride(agreed[1], u64::MAX - agreed[3]);
        c.agreement_cost = end - start;
        c.last_agreement = Some((start, c.stats.calls));
        if agreed[0] == 0 {
            return Ok(());
        }
        if self.checkpoint_now(agreed[2])? {
            let c = &mut self.ckpt;
            c.requested = false;
            c.next_due = c.every.map(|e| Instant::now() + e);
            c.stats.writing += end.elapsed();
        } else {
            self.ckpt.stats.deferred += 1;
        }
        Ok(())
    }

    /// Waits for the cut; when every rank got there, writes this rank's file
    /// (answering the node's checkpoint requests up to `asked`), reports it to
    /// the node and returns true (false: someone had a message in flight, try
    /// again).
    fn checkpoint_now(&mut self, asked: u64) -> Result<bool> {
        let me = self.rank();
        let size = self.size();
        // Every message this rank sent taken in by its receiver.
        self.progress_until(None, |w| (0..size).all(|p| p == me || w.engine.unacked_len(p) == 0))?;
        // The next allreduce's messages may already be here: collective
        // traffic is consumed by the collectives themselves.
        let idle = self.engine.posted_len() == 0
            && self.engine.unexpected_besides(COMM_COLL) == 0
            && self.engine.rendezvous_in_progress() == 0
            && self.done.is_empty();
        let busy = self.allreduce(&[u64::from(!idle)], Op::Max)?;
        if busy[0] != 0 {
            return Ok(false);
        }
        run(&mut self.ckpt.pre);
        let c = &mut self.ckpt;
        let epoch = c.stats.epoch + 1;
        let regions = c
            .regions
            .iter()
            // SAFETY: `protect`'s contract: valid for `len` bytes, not in use.
            .map(|(&id, p)| Region {
                id,
                data: Bytes::copy_from_slice(unsafe { std::slice::from_raw_parts(p.ptr, p.len) }),
            })
            .collect();
        let body = Body { regions, state: c.state(epoch) };
        let header = Header { codec: c.codec, job: c.job, rank: me, size, epoch, raw_len: 0 };
        c.stats.last_file_bytes = store::write(&c.dir, header, &body)?;
        c.stats.last_raw_bytes = c.protected_bytes();
        c.stats.epoch = epoch;
        c.served = c.served.max(asked);
        let ckpt = CheckpointInfo {
            epoch,
            unix_ms: unix_ms(),
            stored_bytes: c.stats.last_file_bytes,
            raw_bytes: c.stats.last_raw_bytes,
        };
        let request = c.served;
        run(&mut c.post);
        self.net.report(LocalRequest::Checkpointed { ckpt, request });
        // Every rank has epoch `epoch` on disk: the older ones can go.
        self.barrier()?;
        store::drop_older(&self.ckpt.dir, me, epoch);
        self.move_after_cut(epoch)?;
        Ok(true)
    }
}

/// The wall clock now, in ms since the Unix epoch (what reports to the node carry).
fn unix_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

fn run(hooks: &mut [Hook]) {
    for h in hooks {
        h();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_of_another_run_is_expected_only_when_the_node_names_it() {
        let job = [3u8; ID_BYTES];
        let mine = Checkpointer::from_lookup(&job, |_| None).unwrap();
        assert_eq!(mine.restart_job, mine.job);
        let run = "ab".repeat(ID_BYTES);
        let resumed =
            Checkpointer::from_lookup(&job, |k| (k == RESTART_JOB_VAR).then(|| run.clone())).expect("a job id");
        assert_eq!(resumed.restart_job.to_string(), run);
        assert_eq!(resumed.job, JobId(Id::from_bytes(job)));
        for bad in ["", "ab", "zz".repeat(ID_BYTES).as_str()] {
            let e = Checkpointer::from_lookup(&job, |k| (k == RESTART_JOB_VAR).then(|| bad.to_owned())).unwrap_err();
            assert!(e.to_string().contains(RESTART_JOB_VAR), "{e}");
        }
    }

    /// The stride never lets a tenth of the interval pass between agreements
    /// on any rank, whatever another rank's cost asks for, and grows at most
    /// twofold an agreement. Before, the largest stride any rank wanted was
    /// taken: a rank preempted as an agreement ended measured its next call
    /// from that end, saw microseconds, and asked for 1,023 (the C ring of
    /// `c_abi` beside two CPU hogs: 0 checkpoints in 300 ms at a 50 ms interval).
    #[test]
    fn a_rank_whose_calls_look_short_cannot_stretch_the_interval() {
        let every = |k: &str| (k == INTERVAL_VAR).then(|| "50".to_owned());
        let mut c = Checkpointer::from_lookup(&[1u8; ID_BYTES], every).unwrap();
        let t0 = Instant::now();
        // Calls of 1 ms from one agreement's start to the next's, agreements
        // of 100 us: 10 calls wanted for the cost, at most 5 for the interval.
        (c.stats.calls, c.last_agreement, c.agreement_cost) = (20, Some((t0, 10)), Duration::from_micros(100));
        assert_eq!(c.wanted_stride(t0 + Duration::from_millis(10)), (10, 5));
        c.stats.stride = 4;
        assert_eq!(c.agreed_stride(1023, 5), 5, "the smallest limit of any rank holds");
        c.stats.stride = 1;
        assert_eq!(c.agreed_stride(1023, MAX_STRIDE), 2, "twice the stride so far at most");
        assert_eq!(c.agreed_stride(0, MAX_STRIDE), 1);
        let no_interval = Checkpointer::from_lookup(&[1u8; ID_BYTES], |_| None).unwrap();
        assert_eq!(no_interval.wanted_stride(t0), (1, MAX_STRIDE), "before any agreement");
    }
}
