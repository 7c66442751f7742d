//! The executor's side of output files: read once a rank exits, then sent back
//! to the submitter in chunks under a window (the same [`Outbox`] staging uses),
//! acknowledged with [`JobMsg::OutputAck`]. A rank's [`JobMsg::Exit`] follows the
//! last chunk of its files, so the submitter has every file when it sees the exit.
//! Checkpoint files shipped to the submitter ([`super::ckpt`]) share the window.

use bytes::Bytes;
use sha1::{Digest, Sha1};

use super::{Execution, RankRun};
use crate::id::Id;
use crate::job::JobId;
use crate::job::msg::JobMsg;
use crate::job::outbox::{Outbox, Piece};

/// What a file on its way back is.
#[derive(Debug)]
pub(super) enum Shipped {
    /// The output file of this name.
    Output(String),
    /// The rank's checkpoint file of this epoch.
    Checkpoint(u64),
}

/// One output file read and on its way back.
#[derive(Debug)]
struct OutFile {
    rank: u32,
    what: Shipped,
    /// Emptied once the last chunk has gone out.
    data: Bytes,
    total: u64,
    digest: Id,
    /// The last chunk (or the one empty chunk of an empty file) has gone out.
    sent: bool,
}

/// A job's output files going back, and how much of them is in flight.
#[derive(Debug, Default)]
pub(super) struct Outgoing {
    files: Vec<OutFile>,
    out: Outbox,
}

impl Outgoing {
    /// Whether every file of `rank` has gone out whole.
    fn all_sent(&self, rank: u32) -> bool {
        self.files.iter().filter(|f| f.rank == rank).all(|f| f.sent)
    }

    /// Whether a checkpoint file of `rank` is still going out.
    pub(super) fn shipping_checkpoint(&self, rank: u32) -> bool {
        self.files.iter().any(|f| f.rank == rank && !f.sent && matches!(f.what, Shipped::Checkpoint(_)))
    }
}

impl Execution {
    /// The driver read (or failed to read) output file `name` of `rank`. A missing file
    /// is not sent; the rank's exit follows once every file is answered and sent.
    /// A checkpoint file read to be shipped ([`super::ckpt`]) comes back the same way.
    pub fn handle_output_file(&mut self, job: JobId, rank: u32, name: &str, data: Result<Bytes, String>) {
        if self.engine_read(job, rank, name, &data) {
            return self.maybe_exit(job, rank);
        }
        let Some(j) = self.jobs.get_mut(&job) else { return };
        let what = if j.pending_reads.get_mut(&rank).is_some_and(|p| p.remove(name)) {
            Shipped::Output(name.to_owned())
        } else if let Some(epoch) = j.ckpt_reads.remove(&(rank, name.to_owned())) {
            Shipped::Checkpoint(epoch)
        } else {
            return;
        };
        // A killed job sends no files: nobody would acknowledge them.
        if let (Ok(data), false) = (data, j.killed) {
            let digest = Id::from_bytes(Sha1::digest(&data).into());
            let file = OutFile { rank, what, total: data.len() as u64, data, digest, sent: false };
            j.outgoing.out.push(j.outgoing.files.len() as u32);
            j.outgoing.files.push(file);
        }
        self.pump_output(job);
    }

    /// The submitter has consumed `consumed` bytes of this job's output files.
    pub(super) fn on_output_ack(&mut self, job: JobId, consumed: u64) -> Option<()> {
        let j = self.jobs.get_mut(&job)?;
        j.outgoing.out.ack(consumed);
        self.pump_output(job);
        Some(())
    }

    /// Sends what the window allows, then the exit of every rank whose files are out.
    pub(super) fn pump_output(&mut self, job: JobId) {
        let (window, chunk) = (self.config.output_window as u64, self.config.chunk_size);
        let Some(j) = self.jobs.get_mut(&job) else { return };
        let to = j.submitter;
        let mut sends = Vec::new();
        let o = &mut j.outgoing;
        loop {
            let files = &o.files;
            let piece = o.out.next(window, chunk, |f| files.get(f as usize).map_or(0, |f| f.data.len()));
            let Some(Piece::Chunk { file, start, end }) = piece else { break };
            // The outbox only names files pushed above.
            let f = &mut o.files[file as usize];
            let (rank, offset, total, digest) = (f.rank, start as u64, f.total, f.digest);
            let msg = match &f.what {
                Shipped::Output(name) => JobMsg::OutputFile { job, rank, name: name.clone(), offset, total, digest },
                Shipped::Checkpoint(epoch) => {
                    JobMsg::CheckpointFile { job, rank, epoch: *epoch, offset, total, digest }
                }
            };
            sends.push((msg, f.data.slice(start..end)));
            if end >= f.data.len() {
                (f.data, f.sent) = (Bytes::new(), true);
            }
        }
        let collecting: Vec<u32> =
            j.ranks.iter().filter(|(_, r)| matches!(r, RankRun::Collecting(_))).map(|(k, _)| *k).collect();
        for (msg, payload) in sends {
            self.send(to, msg, payload);
        }
        for rank in collecting {
            self.maybe_exit(job, rank);
        }
    }

    /// `rank` exits once every output file is answered and sent (a rank that
    /// left to move, once its checkpoint file and engine are: see `moving`).
    pub(super) fn maybe_exit(&mut self, job: JobId, rank: u32) {
        let Some(j) = self.jobs.get(&job) else { return };
        let Some(RankRun::Collecting(code)) = j.ranks.get(&rank).copied() else { return };
        if j.pending_reads.get(&rank).is_some_and(|p| !p.is_empty()) || !j.outgoing.all_sent(rank) {
            return;
        }
        let (msg, payload) = match self.moved_message(job, rank) {
            Some(None) => return,
            Some(Some(moved)) => moved,
            None => (JobMsg::Exit { job, rank, code }, Bytes::new()),
        };
        let Some(j) = self.jobs.get_mut(&job) else { return };
        j.pending_reads.remove(&rank);
        j.ranks.insert(rank, RankRun::Exited(code));
        let to = j.submitter;
        let over = j.killed && j.ranks.values().all(|r| matches!(r, RankRun::Exited(_)));
        // A rank exiting again for an adopting submitter freed its slot before.
        let again = j.reexit.remove(&rank);
        self.send(to, msg, payload);
        if !again {
            self.release(1);
        }
        if over {
            self.drop_job(job);
        }
    }
}
