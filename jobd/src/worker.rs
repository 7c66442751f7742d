//! A daemon's file work, on a thread of its own so the event loop never
//! blocks: staged and output files read, chunks written, files copied and
//! removed, logs replayed, and processes started. Work is done in the order it
//! was asked for (a process starts only after every file staged before it is
//! written); results go back to the node as commands ([`Remote::post`]), and
//! started processes to the event loop, which owns them. The worker owns the
//! jobs' sandboxes ([`Sandbox`]): made at a job's first process start, measured
//! on [`Work::CheckQuota`], released when the job directory goes.

use std::sync::mpsc;

use p2pmp_adapters::Remote;
use p2pmp_core::job::JobId;
use p2pmp_core::node::{DaemonNode, LogFile, NodeCommand};
use tracing::warn;

use crate::files;
use crate::procs::{self, Spawn};
use crate::sandbox::Sandbox;

/// Bytes of a kept log file per replayed chunk.
const REPLAY_PIECE: usize = 256 << 10;

/// One piece of work.
#[derive(Debug)]
pub(crate) enum Work {
    ReadFile {
        job: JobId,
        file: u32,
        path: String,
    },
    WriteFile {
        path: String,
        offset: u64,
        data: bytes::Bytes,
    },
    ReadOutputFile {
        job: JobId,
        rank: u32,
        name: String,
        path: String,
    },
    CopyFile {
        from: String,
        to: String,
        link: bool,
    },
    RemoveFile {
        path: String,
    },
    RemoveDir {
        path: String,
    },
    VerifyFiles {
        job: JobId,
        files: Vec<(String, u64)>,
    },
    Replay {
        replay: u64,
        files: Vec<LogFile>,
    },
    Spawn(Spawn),
    /// Measure the directories of running jobs against the disk limit.
    CheckQuota,
}

/// What the worker hands the event loop.
#[derive(Debug)]
pub(crate) enum Report {
    /// A process the worker started (or could not).
    Started(Box<(Spawn, std::io::Result<tokio::process::Child>)>),
    /// A job went over its disk limit: its processes go, with this message.
    OverQuota { job: JobId, message: String },
}

/// The handle the event loop keeps: work in, in order.
#[derive(Debug, Clone)]
pub(crate) struct Worker {
    tx: mpsc::Sender<Work>,
}

impl Worker {
    /// Starts the worker thread. Processes are started inside `rt` (the event
    /// loop's runtime) and handed back on `started`.
    pub(crate) fn start(
        name: String,
        remote: Remote<DaemonNode>,
        rt: tokio::runtime::Handle,
        started: async_channel::Sender<Report>,
        mut sandbox: Sandbox,
    ) -> std::io::Result<Worker> {
        let (tx, rx) = mpsc::channel::<Work>();
        std::thread::Builder::new().name(name).spawn(move || {
            let _rt = rt.enter();
            for work in rx {
                run(&remote, &started, &mut sandbox, work);
            }
        })?;
        Ok(Worker { tx })
    }

    /// Queues `work`; false once the worker is gone.
    pub(crate) fn send(&self, work: Work) -> bool {
        self.tx.send(work).is_ok()
    }
}

fn post(remote: &Remote<DaemonNode>, cmd: NodeCommand) {
    let _ = remote.post(cmd);
}

fn run(remote: &Remote<DaemonNode>, started: &async_channel::Sender<Report>, sandbox: &mut Sandbox, work: Work) {
    match work {
        Work::ReadFile { job, file, path } => {
            post(remote, NodeCommand::FileRead { job, file, data: files::read_hashed(&path) });
        }
        Work::WriteFile { path, offset, data } => {
            if let Err(e) = files::write_at(&path, offset, &data) {
                warn!(path, %e, "cannot write a file");
            }
        }
        Work::ReadOutputFile { job, rank, name, path } => {
            let data = files::read_output(&path);
            if let Err(why) = &data {
                warn!(%job, rank, path, why, "an output file is not returned");
            }
            post(remote, NodeCommand::OutputFileRead { job, rank, name, data });
        }
        Work::CopyFile { from, to, link } => {
            if let Err(e) = files::copy(&from, &to, link) {
                warn!(from, to, %e, "cannot copy a file");
            }
        }
        Work::RemoveFile { path } => {
            if let Err(e) = std::fs::remove_file(&path).or_else(files::missing_is_fine) {
                warn!(path, %e, "cannot remove a file");
            }
        }
        Work::RemoveDir { path } => {
            sandbox.release(&path);
            files::remove_dir(&path);
        }
        Work::VerifyFiles { job, files } => {
            let bad = files.into_iter().filter_map(|(path, len)| files::not_whole(&path, len)).collect();
            post(remote, NodeCommand::FilesVerified { job, bad });
        }
        Work::Replay { replay, files } => {
            for f in files {
                files::read_pieces(&f.path, f.len, REPLAY_PIECE, |offset, data| {
                    let (rank, stream) = (f.rank, f.stream);
                    post(remote, NodeCommand::Replayed { replay, rank, stream, offset, data });
                });
            }
            post(remote, NodeCommand::ReplayDone { replay });
        }
        Work::Spawn(s) => {
            let child = sandbox.prepare(s.job, &s.dir).and_then(|jail| procs::start(&s, &jail));
            let _ = started.send_blocking(Report::Started(Box::new((s, child))));
        }
        Work::CheckQuota => {
            for (job, message) in sandbox.over_quota() {
                warn!(%job, message, "killing a job over its disk limit");
                let _ = started.send_blocking(Report::OverQuota { job, message });
            }
        }
    }
}
