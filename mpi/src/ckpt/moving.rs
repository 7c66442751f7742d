//! A rank that moves alone while the others go on: at a cut, after every
//! rank has written its file and passed the barrier that ends it, the moving
//! rank saves its engine (per-peer sequence numbers and credit, the frames
//! its peers have not acknowledged, the messages it received and no receive
//! took: [`p2pmp_core::mpi::SavedEngine`]) beside its checkpoint as
//! `rank-R.E.engine`, and exits with [`MOVED_EXIT`]. Nothing is received or
//! acknowledged after the save. The process started in its place with
//! `P2PMP_RESTART` (that checkpoint) and `P2PMP_RESUME_ENGINE` (that file)
//! restores the engine before it talks, registers its new address, and goes
//! on from the cut: its peers, whose connection to the old process broke,
//! look it up again and resend what it never acknowledged; it resends what
//! they lack; duplicates are dropped by sequence number. The other ranks do
//! not roll back.
//!
//! A rank that is not quiet at the cut (sends the program has not waited
//! for, a rendezvous under way) does not move and says why on stderr.
//! Communicators other than the world's and `MPI_COMM_SELF` live in the
//! program's memory: a program that moves a rank must not hold any (the
//! context counter is carried, so new ones agree).
//!
//! What asks a rank to move is, for now, the tests' fault injection
//! (`P2PMP_FAULT_MOVE_CUT=rank:epoch[,...]`, feature `fault-injection`); the
//! `p2pmp-launch` tool starts the replacement. The daemons do not yet: a
//! `p2pjob migrate` rolls the whole job back to the cut.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use p2pmp_core::mpi::{MpiConfig, MpiEngine, SavedEngine};

use crate::error::{Error, Result};
use crate::world::World;

/// Set when the process takes the place of a rank that moved: the path of
/// the engine file it saved.
pub const RESUME_ENGINE_VAR: &str = "P2PMP_RESUME_ENGINE";
/// The exit status of a process whose rank moved away (`EX_TEMPFAIL`).
pub const MOVED_EXIT: i32 = 75;
/// The first bytes of an engine file.
const MAGIC: &[u8; 4] = b"P2PE";
/// Largest engine file read back (frames and unreceived messages are
/// bounded by the eager credit, rendezvous data by the cut's quiet rule).
const MAX_FILE: u64 = 1 << 30;

/// The engine file of `rank` at the cut of `epoch`, in `dir`.
pub fn engine_path(dir: &Path, rank: u32, epoch: u64) -> PathBuf {
    dir.join(format!("rank-{rank}.{epoch}.engine"))
}

/// The engine saved in `path` and the world's context counter, restored for
/// `rank` of `size`.
fn read(path: &Path, config: MpiConfig, rank: u32, size: u32) -> Result<(MpiEngine, u32)> {
    let bad = |why: String| Error::Checkpoint(format!("{}: {why}", path.display()));
    let mut bytes = Vec::new();
    File::open(path).and_then(|f| f.take(MAX_FILE + 1).read_to_end(&mut bytes)).map_err(|e| bad(e.to_string()))?;
    let body = match bytes.strip_prefix(MAGIC.as_slice()) {
        Some(rest) if rest.len() >= 4 && bytes.len() as u64 <= MAX_FILE => rest,
        _ => return Err(bad("not an engine file of this library".into())),
    };
    let (ctx, saved) = body.split_at(4);
    let next_ctx = u32::from_le_bytes([ctx[0], ctx[1], ctx[2], ctx[3]]);
    let saved = SavedEngine::decode(saved, saved.len()).map_err(|e| bad(e.to_string()))?;
    let engine = MpiEngine::restore(config, rank, size, saved).map_err(|e| bad(e.to_string()))?;
    Ok((engine, next_ctx.max(2)))
}

/// The engine this process resumes with when it takes a moved rank's
/// place ([`RESUME_ENGINE_VAR`]), else `None`.
pub(crate) fn resumed(config: &MpiConfig, rank: u32, size: u32) -> Result<Option<(MpiEngine, u32)>> {
    match std::env::var_os(RESUME_ENGINE_VAR).filter(|p| !p.is_empty()) {
        None => Ok(None),
        Some(p) => read(Path::new(&p), config.clone(), rank, size).map(Some),
    }
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
    /// then, saves its engine and exits ([`MOVED_EXIT`]); a rank that is
    /// not quiet stays and says why.
    pub(super) fn move_after_cut(&mut self, epoch: u64) -> Result<()> {
        if !self.ckpt.move_at.contains(&epoch) {
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
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&self.next_ctx.to_le_bytes());
        bytes.extend_from_slice(&saved.encode());
        let path = engine_path(&self.ckpt.dir, self.rank(), epoch);
        let tmp = path.with_extension("engine.tmp");
        let mut f = File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        File::open(&self.ckpt.dir)?.sync_all()?;
        let (frames, messages) = saved.counts();
        eprintln!(
            "p2pmp: rank {} moves at checkpoint {epoch}: {frames} frame(s) unacknowledged, {messages} message(s) unreceived saved in {}",
            self.rank(),
            path.display()
        );
        std::process::exit(MOVED_EXIT)
    }
}
