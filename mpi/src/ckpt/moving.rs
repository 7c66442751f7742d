//! A rank that moves alone while the others go on: at a cut, after every
//! rank has written its file and passed the barrier that ends it, the moving
//! rank saves its engine (per-peer sequence numbers and credit, the frames
//! its peers have not acknowledged, the messages it received and no receive
//! took: [`p2pmp_core::mpi::SavedEngine`]; its header names the job and the
//! cut) beside its checkpoint as `rank-R.engine`, and exits with
//! [`MOVED_EXIT`]. Nothing is received or
//! acknowledged after the save. The process started in its place with
//! `P2PMP_RESTART` (that checkpoint) and `P2PMP_RESUME_ENGINE` (that file,
//! which names the job and the cut: both must be the checkpoint's) restores
//! the engine before it talks, registers its new address, and goes
//! on from the cut: its peers, whose connection to the old process broke,
//! look it up again and resend what it never acknowledged; it resends what
//! they lack; duplicates are dropped by sequence number. The other ranks do
//! not roll back.
//!
//! A rank that is not quiet at the cut (sends the program has not waited
//! for, a rendezvous under way) does not move and says why on stderr.
//! A peer that finishes meanwhile waits for the new process in
//! `MPI_Finalize`'s barrier, so it never takes the moved rank for gone.
//! Communicators other than the world's and `MPI_COMM_SELF` live in the
//! program's memory: a program that moves a rank must not hold any (the
//! context counter is carried, so new ones agree).
//!
//! What asks a rank to move is its node (`p2pjob migrate`: a
//! [`LocalReply::MoveWanted`](p2pmp_core::local::LocalReply::MoveWanted)
//! pushed over the rank's node connection, which also asks for the cut; the
//! rank moves after the first cut answering it), which ships the engine and
//! the checkpoint to the node the rank moves to; or the tests' fault
//! injection (`P2PMP_FAULT_MOVE_CUT=rank:epoch[,...]`, feature
//! `fault-injection`), when the `p2pmp-launch` tool starts the replacement.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};

use p2pmp_core::ckpt::EngineHeader;
use p2pmp_core::job::JobId;
use p2pmp_core::mpi::{MpiConfig, MpiEngine, SavedEngine};

use super::Checkpointer;
use crate::error::{Error, Result};
use crate::world::World;

/// Set when the process takes the place of a rank that moved: the path of
/// the engine file it saved.
pub const RESUME_ENGINE_VAR: &str = "P2PMP_RESUME_ENGINE";
/// The exit status of a process whose rank moved away (`EX_TEMPFAIL`).
pub const MOVED_EXIT: i32 = p2pmp_core::ckpt::MOVED_EXIT;
/// Largest engine file read back (frames and unreceived messages are
/// bounded by the eager credit, rendezvous data by the cut's quiet rule).
const MAX_FILE: u64 = 1 << 30;

/// The engine file of `rank` in `dir` (one at a time: the process that
/// takes the rank's place removes it once read).
pub fn engine_path(dir: &Path, rank: u32) -> PathBuf {
    dir.join(p2pmp_core::ckpt::engine_file_name(rank))
}

/// The engine saved in `path` by a run of `job`, restored for `rank` of
/// `size`, with the world's context counter and the cut's epoch.
fn read(path: &Path, job: JobId, config: MpiConfig, rank: u32, size: u32) -> Result<(MpiEngine, u32, u64)> {
    let bad = |why: String| Error::Checkpoint(format!("{}: {why}", path.display()));
    let mut bytes = Vec::new();
    File::open(path).and_then(|f| f.take(MAX_FILE + 1).read_to_end(&mut bytes)).map_err(|e| bad(e.to_string()))?;
    let header = EngineHeader::decode(&bytes).filter(|_| bytes.len() as u64 <= MAX_FILE);
    let Some((EngineHeader { job: theirs, epoch, next_ctx }, saved)) = header else {
        return Err(bad("not an engine file of this library".into()));
    };
    if theirs != job {
        return Err(bad(format!("the engine of job {theirs}, this is job {job}")));
    }
    let saved = SavedEngine::decode(saved, saved.len()).map_err(|e| bad(e.to_string()))?;
    let engine = MpiEngine::restore(config, rank, size, saved).map_err(|e| bad(e.to_string()))?;
    Ok((engine, next_ctx.max(2), epoch))
}

/// The engine this process resumes with when it takes a moved rank's
/// place ([`RESUME_ENGINE_VAR`]), else `None`; its cut's epoch is noted in
/// `ckpt`, which `recover` holds the checkpoint to. The file is removed
/// once read (it is this process's state now).
pub(crate) fn resumed(
    ckpt: &mut Checkpointer,
    config: &MpiConfig,
    rank: u32,
    size: u32,
) -> Result<Option<(MpiEngine, u32)>> {
    let Some(p) = std::env::var_os(RESUME_ENGINE_VAR).filter(|p| !p.is_empty()) else { return Ok(None) };
    let (engine, next_ctx, epoch) = read(Path::new(&p), ckpt.restart_job, config.clone(), rank, size)?;
    ckpt.engine_epoch = Some(epoch);
    let _ = fs::remove_file(&p);
    Ok(Some((engine, next_ctx)))
}

/// The cuts at which the tests' fault injection moves `rank`
/// (`P2PMP_FAULT_MOVE_CUT=rank:epoch[,rank:epoch...]`).
#[cfg(feature = "fault-injection")]
pub(crate) fn fault_move_cuts(rank: u32) -> BTreeSet<u64> {
    let v = std::env::var("P2PMP_FAULT_MOVE_CUT").unwrap_or_default();
    let pair =
        |p: &str| Some((p.split_once(':')?.0.trim().parse::<u32>().ok()?, p.split_once(':')?.1.trim().parse().ok()?));
    let cuts: BTreeSet<u64> = v.split(',').filter_map(pair).filter(|(r, _)| *r == rank).map(|(_, e)| e).collect();
    if !cuts.is_empty() {
        eprintln!("p2pmp: rank {rank}: fault injection: moves at checkpoint(s) {cuts:?}");
    }
    cuts
}

#[cfg(not(feature = "fault-injection"))]
pub(crate) fn fault_move_cuts(_rank: u32) -> BTreeSet<u64> {
    BTreeSet::new()
}

impl World {
    /// Called at the end of the cut of `epoch`: when this rank is to move
    /// then (the fault injection names the cut, or the cut answers the
    /// node's move request), saves its engine and exits ([`MOVED_EXIT`]); a
    /// rank that is not quiet stays and says why (and tries again at the
    /// next cut, when its node asked).
    pub(super) fn move_after_cut(&mut self, epoch: u64) -> Result<()> {
        let asked = self.net.move_wanted();
        if !(self.ckpt.move_at.contains(&epoch) || (asked > 0 && asked <= self.ckpt.served)) {
            return Ok(());
        }
        let saved = match (self.done.is_empty() && self.cancels.is_empty(), self.engine.save()) {
            (true, Ok(saved)) => saved,
            (quiet, saved) => {
                let why = saved.err().filter(|_| quiet).map_or("requests are not waited for".into(), |e| e.to_string());
                eprintln!("p2pmp: rank {} does not move: {why}", self.rank());
                return Ok(());
            }
        };
        let mut bytes = EngineHeader { job: self.ckpt.job, epoch, next_ctx: self.next_ctx }.encode();
        bytes.extend_from_slice(&saved.encode());
        let path = engine_path(&self.ckpt.dir, self.rank());
        super::store::write_atomic(&self.ckpt.dir, &path, &bytes)?;
        let (frames, messages) = saved.counts();
        eprintln!(
            "p2pmp: rank {} moves at checkpoint {epoch}: {frames} frame(s) unacknowledged, {messages} message(s) unreceived saved in {}",
            self.rank(),
            path.display()
        );
        crate::exit::exit_on_purpose(MOVED_EXIT)
    }
}

#[cfg(test)]
mod tests {
    use p2pmp_core::id::Id;

    use super::*;

    /// An engine file is taken only for its own job and rank; anything else
    /// (another job's, cut short, not one at all) is a clear error.
    #[test]
    fn an_engine_file_is_taken_only_for_its_job() {
        let dir = std::env::temp_dir().join(format!("p2pmp-engine-file-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let (job, other) = (JobId(Id::hash_parts([b"a".as_slice()])), JobId(Id::hash_parts([b"b".as_slice()])));
        let config = MpiConfig::default();
        let saved = MpiEngine::new(config.clone(), 1, 2).unwrap().save().unwrap().encode();
        let file = |name: &str, of: JobId, body: &[u8]| {
            let mut bytes = EngineHeader { job: of, epoch: 7, next_ctx: 5 }.encode();
            bytes.extend_from_slice(body);
            let p = dir.join(name);
            fs::write(&p, bytes).unwrap();
            p
        };
        let (_, ctx, epoch) = read(&file("good", job, &saved), job, config.clone(), 1, 2).unwrap();
        assert_eq!((ctx, epoch), (5, 7));
        let e = read(&file("theirs", other, &saved), job, config.clone(), 1, 2).unwrap_err().to_string();
        assert!(e.contains(&format!("the engine of job {other}")), "{e}");
        let e = read(&file("short", job, &saved[..saved.len() - 1]), job, config.clone(), 1, 2).unwrap_err();
        assert!(e.to_string().contains("malformed"), "{e}");
        let e = read(&file("rank", job, &saved), job, config.clone(), 0, 2).unwrap_err();
        assert!(e.to_string().contains("rank 1 of 2"), "{e}");
        fs::write(dir.join("junk"), b"P2P").unwrap();
        assert!(read(&dir.join("junk"), job, config, 1, 2).unwrap_err().to_string().contains("not an engine file"));
        let _ = fs::remove_dir_all(&dir);
    }
}
