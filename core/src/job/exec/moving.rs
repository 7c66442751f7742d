//! A rank that moves alone (`p2pjob migrate`), on the executor's side: both
//! the node it leaves and the node it moves to.
//!
//! - **Leaving.** [`JobMsg::Move`] names a rank running here and the
//!   checkpoint request whose cut it moves at; the rank is told over its
//!   control connection ([`ExecEvent::AskMove`]). After that cut it saves its
//!   engine in [`ckpt::engine_file_name`] and exits with
//!   [`ckpt::MOVED_EXIT`]: its output files are read and go out as an
//!   exit's do (the submitter carries them to its new node), the engine
//!   file is read, and once the rank's output and checkpoint files being
//!   read have gone out whole, the submitter gets [`JobMsg::Moved`]
//!   carrying it instead of an exit. Every
//!   file of a cut answering the move goes to the submitter, whether the
//!   rank left at the first or a later one, and even when its report comes
//!   after the exit (the control connection stays linked until it closes,
//!   so then the file follows [`JobMsg::Moved`]). The slot is free. An exit
//!   with any other code, or of a rank not asked to move, is an exit.
//! - **Arriving.** A rank offered here to take a moved rank's place is
//!   staged like a rank of a restarted job ([`JobMsg::Resume`], its
//!   checkpoint file) and gets the engine ([`JobMsg::ResumeEngine`]), written
//!   beside it; the output files it had written are staged too
//!   ([`JobMsg::CarriedFiles`], numbered from [`CARRIED_FILES`], each
//!   checked against its digest like any staged file). It starts with
//!   `P2PMP_RESUME_ENGINE` naming the engine file, so it goes on from the
//!   cut with the others, who never stopped, in a job directory as it left
//!   it.

use bytes::Bytes;

use super::{ExecEvent, ExecJob, Execution, RankRun};
use crate::ckpt::{self, MAX_ENGINE_FILE, MAX_SHIPPED_FILE, MOVED_EXIT};
use crate::job::msg::{JobMsg, StagedFile};
use crate::job::{CARRIED_FILES, JobId, MAX_STAGED_FILES};

/// A rank asked to move alone.
#[derive(Debug)]
pub(super) struct Moving {
    /// The checkpoint request whose cut it moves at.
    request: u64,
    /// It exited to move: its engine file as read (empty when it could not
    /// be), `None` while being read.
    engine: Option<Bytes>,
    left: bool,
    /// [`JobMsg::Moved`] went out (the entry stays: a report of the cut it
    /// left at may still come, and its file must still go).
    sent: bool,
}

/// Whether `rank`'s file of a cut covering checkpoint request `request`
/// goes to the submitter because the rank moves at it (the other ranks'
/// files of that cut stay): every such cut's, since the rank leaves after
/// the first it is quiet at, which may not be the first to answer it.
pub(super) fn ships_for_move(j: &ExecJob, rank: u32, request: u64) -> bool {
    j.moving.get(&rank).is_some_and(|m| request >= m.request)
}

/// Whether staged file `f` is an output file a moved rank placed here
/// carries, as announced.
pub(super) fn is_carried_file(j: &ExecJob, f: &StagedFile) -> bool {
    j.carried.get(&f.file) == Some(f)
}

impl Execution {
    /// The submitter asks `rank` of `job` to move at the cut answering `request`.
    pub(super) fn on_move(&mut self, job: JobId, rank: u32, request: u64) -> Option<()> {
        let j = self.jobs.get_mut(&job)?;
        if !matches!(j.ranks.get(&rank), Some(RankRun::Running { .. })) {
            return None;
        }
        j.moving.insert(rank, Moving { request, engine: None, left: false, sent: false });
        let conn = self.links.iter().find(|(_, l)| **l == (job, rank)).map(|(c, _)| *c);
        // A rank not linked yet is not reached: the move runs out its time
        // at the submitter.
        if let Some(conn) = conn {
            self.event(ExecEvent::AskMove { conn, job, rank, request });
        }
        Some(())
    }

    /// `rank` exited with `code`: whether it left to move (then its engine
    /// file is being read, and its exit is not reported).
    pub(super) fn left_to_move(&mut self, job: JobId, rank: u32, code: i32) -> bool {
        let Some(m) = self.jobs.get_mut(&job).and_then(|j| j.moving.get_mut(&rank)) else { return false };
        if code != MOVED_EXIT || m.left {
            return false;
        }
        m.left = true;
        let name = ckpt::engine_file_name(rank);
        self.event(ExecEvent::ReadOutputFile { job, rank, name });
        true
    }

    /// Whether `name`, just read, is the engine file of a rank that left to
    /// move: then it is kept to go with [`JobMsg::Moved`].
    pub(super) fn engine_read(&mut self, job: JobId, rank: u32, name: &str, data: &Result<Bytes, String>) -> bool {
        let Some(m) = self.jobs.get_mut(&job).and_then(|j| j.moving.get_mut(&rank)) else { return false };
        if !m.left || m.engine.is_some() || name != ckpt::engine_file_name(rank) {
            return false;
        }
        let fits = |b: &Bytes| b.len() as u64 <= MAX_ENGINE_FILE;
        m.engine = Some(data.as_ref().ok().filter(|b| fits(b)).cloned().unwrap_or_default());
        if m.engine.as_ref().is_some_and(Bytes::is_empty) {
            tracing::warn!(%job, rank, "the engine of a moving rank could not be read: {data:?}");
        }
        true
    }

    /// For a rank that left to move, once its engine is read and its
    /// checkpoint file has gone out: the [`JobMsg::Moved`] that stands for
    /// its exit. `None` for any other rank; `Some(None)` while not yet.
    pub(super) fn moved_message(&mut self, job: JobId, rank: u32) -> Option<Option<(JobMsg, Bytes)>> {
        let j = self.jobs.get_mut(&job)?;
        let reading = j.ckpt_reads.keys().any(|(r, _)| *r == rank);
        let m = j.moving.get_mut(&rank).filter(|m| m.left)?;
        let Some(engine) = m.engine.clone().filter(|_| !reading && !m.sent) else { return Some(None) };
        m.sent = true;
        let request = m.request;
        tracing::info!(%job, rank, request, "rank moves alone: {} engine bytes", engine.len());
        Some(Some((JobMsg::Moved { job, rank, request }, engine)))
    }

    /// The engine `rank`, placed here, resumes with: written beside its
    /// checkpoint before it starts.
    pub(super) fn on_resume_engine(&mut self, job: JobId, rank: u32, payload: Bytes) -> Option<()> {
        let j = self.jobs.get_mut(&job)?;
        let placed = j.ranks.get(&rank) == Some(&RankRun::Waiting);
        if !placed || j.resume.is_none() || payload.is_empty() || payload.len() as u64 > MAX_ENGINE_FILE {
            return None;
        }
        j.engines.insert(rank);
        let name = ckpt::engine_file_name(rank);
        self.event(ExecEvent::WriteFile { job, name, offset: 0, data: payload });
        Some(())
    }

    /// The output files `rank`, placed here to resume with a moved rank's
    /// engine, carries: staged before the job counts as staged.
    pub(super) fn on_carried_files(&mut self, job: JobId, rank: u32, files: Vec<StagedFile>) -> Option<()> {
        let j = self.jobs.get_mut(&job).filter(|j| j.engines.contains(&rank) && j.staged.is_none())?;
        let numbers = CARRIED_FILES..CARRIED_FILES + MAX_STAGED_FILES;
        let usable =
            |f: &StagedFile| numbers.contains(&f.file) && super::plain_name(&f.name) && f.total <= MAX_SHIPPED_FILE;
        if files.len() > MAX_STAGED_FILES as usize || !files.iter().all(usable) {
            return None;
        }
        j.carried.extend(files.into_iter().map(|f| (f.file, f)));
        Some(())
    }

    /// The environment that makes `rank` resume with the engine it carried.
    pub(super) fn engine_env(&self, job: JobId, rank: u32) -> Option<(String, String)> {
        let carried = self.jobs.get(&job).is_some_and(|j| j.engines.contains(&rank));
        carried.then(|| ("P2PMP_RESUME_ENGINE".to_owned(), ckpt::engine_file_name(rank)))
    }
}

#[cfg(test)]
mod tests;
