//! The jobs this node is deputy for: a job's submitting node names, among the
//! nodes running its ranks, two that take the job over if it dies, in turn
//! ([`JobMsg::Guard`], see [`crate::job::Guarded`]). Each deputy keeps what it
//! was told (the placement, the job file and signature), the job's files
//! (read back from its own copy of the job directory, each checked against
//! the digest it was staged with, so the job can be placed anew: a restart
//! after a lost node), a copy of the job's output as the submitting node
//! takes it (its logs, in the job's log directory here) and of every
//! checkpoint file it keeps (in the job's cut directory here, each checked
//! against its digest, dropped when the submitting node drops its own), and
//! watches the submitting node. It copies the job's output files too, as
//! the submitting node receives them (into `adopted-JOB` under the work
//! directory).
//!
//! When the job ends, the submitting node tells its deputy how
//! ([`JobMsg::Ended`]) before it tells the job's nodes: the deputy then holds
//! the ended job as the submitting node does, with its copies of the output
//! and output files, and registers its key, so the results wait in the
//! network, at two nodes, until `retention` after the end: `p2pjob wait` or
//! `status` from any node finds them while either node lives.
//!
//! Once that node is lost (a send to it fails, or nothing was heard from it
//! for the failure timeout), or hands the job over as it stops gracefully
//! ([`JobMsg::HandOver`], see `held`), the first deputy holds
//! the job as if submitted here: it adopts the executors, collects the rest
//! of the output, output files and exits (output files into `adopted-JOB`
//! under the work directory), registers the job's key so `p2pjob wait` or
//! `status` from any node finds it here with all its output, and names a
//! deputy of its own. The ranks run on, or, when ranks were lost too, the
//! job restarts by its `<restart>` rule from the newest cut kept whole here.
//! The second deputy watches the first too, and takes the job over in its
//! stead when the first is lost and the submitting node lost or handing
//! the job over (the two lost at once: a host and the rank next to it);
//! a node stopping takes nothing over and keeps no record, and tells the
//! job's other deputies so ([`JobMsg::DeputyStopping`]): those behind it
//! do not wait for it. When the first takes over, the second
//! hears it (the job's [`JobMsg::Adopt`], then its [`JobMsg::Guard`]) and
//! answers to it from then on.
//! What was in flight to the dead node is lost with it. There is no fencing:
//! a deputy that loses its connection to a submitting node that still runs,
//! or is cut off from it, takes the job over all the same, and the two hold
//! it side by side.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use bytes::Bytes;
use sha1::{Digest, Sha1};

use super::held::output_file_name;
use super::{DaemonNode, NodeEvent, NodeMsg, join};
use crate::id::Id;
use crate::job::{FileData, Guarded, JobDescription, JobEnd, JobHistory, JobId, JobMsg, Replica, Stream};
use crate::machine::NodeAddr;

/// Most jobs one node is deputy for (one per rank it runs, at most).
const MAX_GUARDED: usize = 1024;

/// Most output files copied for one job.
const MAX_OUTPUT_COPIES: usize = 4096;

/// A job this node may take over.
#[derive(Debug)]
struct Deputy {
    /// The job's submitting node.
    holder: NodeAddr,
    /// The deputies before this one, who take the job over first.
    ahead: Vec<NodeAddr>,
    /// Of the holder and `ahead`, those found lost (and not heard since).
    lost: BTreeSet<NodeAddr>,
    /// Of the holder and `ahead`, those stopping: the holder handed the job
    /// over ([`JobMsg::HandOver`]), a deputy takes nothing over
    /// ([`JobMsg::DeputyStopping`]); both may still be heard from while
    /// their ranks move off.
    stopping: BTreeSet<NodeAddr>,
    job: Guarded,
    /// The job file.
    xml: Bytes,
    /// Bytes of each rank's stdout and stderr copied into the job's logs here.
    logs: BTreeMap<(u32, Stream), u64>,
    /// Output files copied here, by path: the length each will have.
    outputs: BTreeMap<String, u64>,
    /// The job's staged files being read back (name, digest as staged), and
    /// those read and found whole, by number.
    reading: BTreeMap<u32, (String, Id)>,
    files: BTreeMap<u32, (String, Bytes, Id)>,
    /// The job's ranks.
    size: u32,
    /// Copies of checkpoint files on their way in, by rank and epoch: the
    /// hash so far, bytes received, their length and digest.
    arriving: BTreeMap<(u32, u64), (Sha1, u64, u64, Id)>,
    /// Files kept whole, by epoch: the run that wrote them, their ranks.
    cuts: BTreeMap<u64, (JobId, BTreeSet<u32>)>,
}

/// A chunk of a checkpoint file, as [`JobMsg::CheckpointFile`] carries it.
#[derive(Debug, Clone, Copy)]
pub(super) struct CutChunk {
    pub(super) rank: u32,
    pub(super) epoch: u64,
    pub(super) offset: u64,
    pub(super) total: u64,
    pub(super) digest: Id,
}

/// The jobs this node is deputy for, by job id.
#[derive(Debug, Default)]
pub(super) struct Guards {
    jobs: BTreeMap<JobId, Deputy>,
}

impl Guards {
    /// The nodes watched: the submitting nodes, and the deputies ahead of
    /// this one.
    pub(super) fn holders(&self) -> impl Iterator<Item = NodeAddr> + '_ {
        self.jobs.values().flat_map(|d| std::iter::once(d.holder).chain(d.ahead.iter().copied()))
    }

    /// Something came from `node`: it is not lost.
    pub(super) fn heard_from(&mut self, node: NodeAddr) {
        for d in self.jobs.values_mut() {
            d.lost.remove(&node);
        }
    }
}

impl DaemonNode {
    /// `from`, which submitted job `g.job`, names `deputies`: this node is
    /// one when it runs ranks of the job's current run `g.wire` and is not
    /// stopping; otherwise it keeps no record of the job (a restart or a
    /// move placed it anew).
    pub(super) fn on_guard(&mut self, from: NodeAddr, g: Guarded, deputies: &[NodeAddr], xml: Bytes) {
        let named =
            deputies.iter().position(|d| *d == self.addr).filter(|_| !self.left && self.exec.runs_for(g.wire, from));
        let Some(ahead) = named.map(|i| deputies[..i].to_vec()) else {
            // From its submitting node, or from a deputy ahead of this one
            // that took the job over and does not count on this node (it
            // names others, or this node runs no rank of the job any more,
            // or it is stopping).
            if self.guards.jobs.get(&g.job).is_some_and(|d| d.holder == from || d.ahead.contains(&from)) {
                self.drop_guard(g.job);
            }
            return;
        };
        let guards = &mut self.guards.jobs;
        let room = guards.len() < MAX_GUARDED;
        match guards.get_mut(&g.job) {
            // Told again (a restart, a move, a takeover): the copies go on,
            // and a node found lost stays so until heard from.
            Some(d) => {
                d.lost.retain(|n| ahead.contains(n));
                let same_holder = d.holder == from;
                d.stopping.retain(|n| ahead.contains(n) || (same_holder && *n == from));
                (d.holder, d.ahead, d.job, d.xml) = (from, ahead, g, xml);
            }
            None if room => {
                let Ok(parsed) = JobDescription::parse(&xml) else { return };
                let (id, wire, size) = (g.job, g.wire, parsed.job.processes);
                let (logs, outputs) = (BTreeMap::new(), BTreeMap::new());
                let (reading, files) = (BTreeMap::new(), BTreeMap::new());
                let (arriving, cuts) = (BTreeMap::new(), BTreeMap::new());
                let (holder, lost, stopping) = (from, BTreeSet::new(), BTreeSet::new());
                let d = Deputy {
                    holder,
                    ahead,
                    lost,
                    stopping,
                    job: g,
                    xml,
                    logs,
                    outputs,
                    reading,
                    files,
                    size,
                    arriving,
                    cuts,
                };
                guards.insert(id, d);
                self.read_job_files(id, wire);
            }
            None => {}
        }
    }

    /// Reads the files of job `id` (run `wire`) back from its directory here:
    /// the executable and input files, as staged (the job file came along).
    fn read_job_files(&mut self, id: JobId, wire: JobId) {
        let dir = self.job_dir(wire);
        let staged: Vec<(u32, String, Id)> = (1..crate::job::MAX_STAGED_FILES)
            .map_while(|file| self.exec.staged_file(wire, file).map(|(name, digest)| (file, name.to_owned(), digest)))
            .collect();
        let Some(d) = self.guards.jobs.get_mut(&id) else { return };
        let reads: Vec<NodeEvent> = staged
            .into_iter()
            .map(|(file, name, digest)| {
                let path = join(&dir, &name);
                d.reading.insert(file, (name, digest));
                NodeEvent::ReadFile { job: id, file, path }
            })
            .collect();
        reads.into_iter().for_each(|e| self.event(e));
    }

    /// The shell read file `file` of job `id`: kept when this node is its
    /// deputy and the file is as it was staged; `false` when it is not.
    pub(super) fn deputy_file_read(&mut self, id: JobId, file: u32, data: &Result<FileData, String>) -> bool {
        let Some(d) = self.guards.jobs.get_mut(&id) else { return false };
        let Some((name, digest)) = d.reading.remove(&file) else { return true };
        match data {
            Ok(f) if f.digest == digest => {
                d.files.insert(file, (name, f.bytes.clone(), digest));
            }
            // A rank rewrote it, or it is gone: the job cannot be placed anew.
            Ok(_) => tracing::info!(%id, file, name, "a job file changed since it was staged: not kept"),
            Err(why) => tracing::info!(%id, file, name, why, "a job file could not be read back"),
        }
        true
    }

    /// Output of job `wire` from the node that submitted it: copied into the
    /// job's logs when this node is its deputy; `false` when it is not.
    pub(super) fn copy_output(&mut self, from: NodeAddr, wire: JobId, rank: u32, stream: Stream, data: &Bytes) -> bool {
        let Some(id) = self.guarded(from, wire) else { return false };
        let path = self.log_path(id, rank, stream);
        let Some(d) = self.guards.jobs.get_mut(&id) else { return false };
        let len = d.logs.entry((rank, stream)).or_default();
        let offset = *len;
        *len += data.len() as u64;
        self.event(NodeEvent::WriteFile { path, offset, data: data.clone() });
        true
    }

    /// A chunk of output file `name` of `rank` of job `wire`, at `offset` of
    /// `total` bytes, from the node that submitted it: copied into the job's
    /// output directory here when this node is its deputy; `false` when it
    /// is not.
    pub(super) fn copy_output_file(
        &mut self,
        from: NodeAddr,
        wire: JobId,
        (rank, name): (u32, &str),
        (offset, total): (u64, u64),
        data: &Bytes,
    ) -> bool {
        let Some(id) = self.guarded(from, wire) else { return false };
        let size = self.guards.jobs.get(&id).map_or(0, |d| d.size);
        let Some(file) = output_file_name(size, rank, name).filter(|_| rank < size) else { return true };
        let path = join(&self.adopted_dir(id), &file);
        let Some(d) = self.guards.jobs.get_mut(&id) else { return true };
        if d.outputs.len() >= MAX_OUTPUT_COPIES && !d.outputs.contains_key(&path) {
            return true;
        }
        d.outputs.insert(path.clone(), total);
        self.event(NodeEvent::WriteFile { path, offset, data: data.clone() });
        true
    }

    /// A chunk of a checkpoint file of job `wire` from the node that
    /// submitted it: kept when this node is its deputy; `false` when it is not.
    pub(super) fn copy_checkpoint(&mut self, from: NodeAddr, wire: JobId, c: CutChunk, data: &Bytes) -> bool {
        let Some(id) = self.guarded(from, wire) else { return false };
        let path = self.cut_path(id, c.rank, c.epoch);
        let Some(d) = self.guards.jobs.get_mut(&id) else { return false };
        let key = (c.rank, c.epoch);
        if c.offset == 0 && c.rank < d.size && (d.arriving.len() < 2 * d.size as usize || d.arriving.contains_key(&key))
        {
            d.arriving.insert(key, (Sha1::new(), 0, c.total, c.digest));
        }
        let Some(a) = d.arriving.get_mut(&key).filter(|a| a.1 == c.offset && a.2 == c.total && a.3 == c.digest) else {
            return true;
        };
        if a.1 + data.len() as u64 > a.2 {
            return true;
        }
        a.0.update(data);
        a.1 += data.len() as u64;
        self.event(NodeEvent::WriteFile { path: path.clone(), offset: c.offset, data: data.clone() });
        let Some(d) = self.guards.jobs.get_mut(&id) else { return true };
        if d.arriving.get(&key).is_some_and(|a| a.1 >= a.2) {
            let Some((hasher, ..)) = d.arriving.remove(&key) else { return true };
            if Id::from_bytes(hasher.finalize().into()) == c.digest {
                let cut = d.cuts.entry(c.epoch).or_insert_with(|| (wire, BTreeSet::new()));
                if cut.0 != wire {
                    // An earlier run's cut of the same number: not part of this one.
                    *cut = (wire, BTreeSet::new());
                }
                cut.1.insert(c.rank);
            } else {
                self.event(NodeEvent::RemoveFile { path });
            }
        }
        true
    }

    /// The node that submitted job `wire` no longer keeps `rank`'s file of
    /// `epoch`: nor does its deputy.
    pub(super) fn drop_checkpoint_copy(&mut self, from: NodeAddr, wire: JobId, rank: u32, epoch: u64) {
        let Some(id) = self.guarded(from, wire) else { return };
        let path = self.cut_path(id, rank, epoch);
        let Some(d) = self.guards.jobs.get_mut(&id) else { return };
        d.arriving.remove(&(rank, epoch));
        if let Some(cut) = d.cuts.get_mut(&epoch) {
            cut.1.remove(&rank);
            if cut.1.is_empty() {
                d.cuts.remove(&epoch);
            }
        }
        self.event(NodeEvent::RemoveFile { path });
    }

    /// Job `wire`, which `from` submitted, ended so: when this node is its
    /// deputy it holds the ended job from now on, with the output and
    /// output files it copied, for `wait` and `status` from any node.
    pub(super) fn keep_results(&mut self, now: Instant, from: NodeAddr, id: JobId, end: JobEnd, history: JobHistory) {
        if self.left || self.guards.jobs.get(&id).is_none_or(|d| d.holder != from) {
            return;
        }
        let Some(d) = self.guards.jobs.remove(&id) else { return };
        if !d.cuts.is_empty() || !d.arriving.is_empty() {
            let path = self.cut_dir(id);
            self.event(NodeEvent::RemoveDir { path });
        }
        let Ok(parsed) = JobDescription::parse(&d.xml) else { return };
        let codes = match &end {
            JobEnd::Done { codes } => codes.clone(),
            JobEnd::Failed { .. } | JobEnd::Killed => Vec::new(),
        };
        let owner = d.job.auth.as_ref().map(|a| a.key);
        if !self.submitter.keep_ended(now, (d.job, parsed.job), (&codes, history)) {
            return;
        }
        let base_dir = self.adopted_dir(id);
        self.hold(now, id, base_dir, d.size, owner);
        self.adopt_copies(id, d.logs, d.outputs);
        self.finished(now, id, end);
    }

    /// The job this node is deputy for that `holder` runs as `wire`.
    fn guarded(&self, holder: NodeAddr, wire: JobId) -> Option<JobId> {
        self.guards.jobs.iter().find(|(_, d)| d.holder == holder && d.job.wire == wire).map(|(id, _)| *id)
    }

    /// Where job `id` is held when this node took it over or kept its results.
    fn adopted_dir(&self, id: JobId) -> String {
        format!("{}/adopted-{id}", self.work_dir.trim_end_matches('/'))
    }

    /// Stopping: deputy for no job any more (the jobs name others once this
    /// node's executor says it leaves).
    pub(super) fn drop_guards(&mut self) {
        let ids: Vec<JobId> = self.guards.jobs.keys().copied().collect();
        for id in ids {
            self.drop_guard(id);
        }
    }

    /// No longer deputy for `id`: its copies of the output, the output
    /// files and the cuts go too.
    fn drop_guard(&mut self, id: JobId) {
        let Some(d) = self.guards.jobs.remove(&id) else { return };
        if !d.logs.is_empty() {
            let path = self.log_dir(id);
            self.event(NodeEvent::RemoveDir { path });
        }
        if !d.outputs.is_empty() {
            let path = self.adopted_dir(id);
            self.event(NodeEvent::RemoveDir { path });
        }
        if !d.cuts.is_empty() || !d.arriving.is_empty() {
            let path = self.cut_dir(id);
            self.event(NodeEvent::RemoveDir { path });
        }
    }

    /// Node `gone` is lost: take over every job this node is deputy for
    /// whose submitting node, and every deputy ahead of this one, are lost.
    pub(super) fn take_over(&mut self, now: Instant, gone: NodeAddr) {
        for d in self.guards.jobs.values_mut() {
            if d.holder == gone || d.ahead.contains(&gone) {
                d.lost.insert(gone);
            }
        }
        self.take_over_orphans(now, gone);
    }

    /// `from`, stopping, hands over its run `wire` of a job this node is
    /// deputy for: taken over as if `from` were lost (at once when this node
    /// is the first deputy; the others wait for the first, as ever).
    pub(super) fn on_hand_over(&mut self, now: Instant, from: NodeAddr, wire: JobId) {
        let Some(d) = self.guarded(from, wire).and_then(|id| self.guards.jobs.get_mut(&id)) else { return };
        d.stopping.insert(from);
        tracing::info!(job = %d.job.job, node = %from, "a job's submitting node is stopping and hands it over");
        self.take_over_orphans(now, from);
    }

    /// `from`, a deputy of run `wire` ahead of this one, is stopping: it
    /// takes nothing over, so this node does not wait for it (taking the job
    /// over now if its holder is lost or handed it over).
    pub(super) fn on_deputy_stopping(&mut self, now: Instant, from: NodeAddr, wire: JobId) {
        let mine = self.guards.jobs.values_mut().filter(|d| d.job.wire == wire && d.ahead.contains(&from));
        let mut any = false;
        for d in mine {
            any |= d.stopping.insert(from);
        }
        if any {
            self.take_over_orphans(now, from);
        }
    }

    /// Stopping: tells the other deputies of every job this node is a
    /// deputy of that it takes nothing over.
    pub(super) fn tell_co_deputies(&mut self) {
        let jobs: Vec<(JobId, Vec<NodeAddr>)> = self.exec.deputy_of().collect();
        for (job, others) in jobs {
            for to in others {
                self.send(to, NodeMsg::Job(JobMsg::DeputyStopping { job }), Bytes::new());
            }
        }
    }

    /// Takes over every job this node is deputy for whose submitting node,
    /// and every deputy ahead of this one, are lost (the last news: `gone`);
    /// none while this node is stopping (the deputies after it take them).
    fn take_over_orphans(&mut self, now: Instant, gone: NodeAddr) {
        if self.left {
            return;
        }
        let orphan = |d: &Deputy| {
            let gone = |n: &NodeAddr| d.lost.contains(n) || d.stopping.contains(n);
            gone(&d.holder) && d.ahead.iter().all(gone)
        };
        let mine: Vec<JobId> = self.guards.jobs.iter().filter(|(_, d)| orphan(d)).map(|(id, _)| *id).collect();
        for id in mine {
            let Some(Deputy { holder, ahead, job, xml, logs, outputs, files, cuts, size, .. }) =
                self.guards.jobs.remove(&id)
            else {
                continue;
            };
            let Ok(parsed) = JobDescription::parse(&xml) else { continue };
            let owner = job.auth.as_ref().map(|a| a.key);
            // The job's signature is this node's to offer again here too
            // (its ranks here may have been stopped already by a restart of
            // the node it takes the job over from).
            if let Some(nonce) = job.auth.as_ref().map(|a| a.manifest.nonce) {
                for from in std::iter::once(holder).chain(ahead) {
                    self.job_replay.hand_over(nonce, &from, self.addr);
                }
            }
            let cuts = cuts
                .into_iter()
                .filter(|(_, (_, ranks))| ranks.len() == size as usize)
                .map(|(epoch, (wire, ranks))| (epoch, wire, ranks))
                .collect();
            let kept = Replica { files: files.into_iter().collect(), cuts };
            if !self.submitter.adopt(now, job, parsed.job, kept) {
                continue;
            }
            tracing::warn!(%id, node = %gone, "took over a job: its submitting node was lost or handed it over");
            let base_dir = self.adopted_dir(id);
            self.hold(now, id, base_dir, size, owner);
            self.adopt_copies(id, logs, outputs);
        }
    }
}
