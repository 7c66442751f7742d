//! A daemon's file work, on a thread of its own so the event loop never
//! blocks: staged and output files read, chunks written, files copied and
//! removed, logs replayed, and processes started. Work is done in the order it
//! was asked for (a process starts only after every file staged before it is
//! written); results go back to the node as commands ([`Remote::post`]), and
//! started processes to the event loop, which owns them.

use std::sync::mpsc;

use p2pmp_adapters::Remote;
use p2pmp_core::job::JobId;
use p2pmp_core::node::{DaemonNode, LogFile, NodeCommand};
use tracing::warn;

use crate::files;
use crate::procs::{self, Spawn};

/// Bytes of a kept log file per replayed chunk.
const REPLAY_PIECE: usize = 256 << 10;

/// One piece of work.
#[derive(Debug)]
pub(crate) enum Work {
    ReadFile { job: JobId, file: u32, path: String },
    WriteFile { path: String, offset: u64, data: bytes::Bytes },
    ReadOutputFile { job: JobId, rank: u32, name: String, path: String },
    CopyFile { from: String, to: String, link: bool },
    RemoveFile { path: String },
    RemoveDir { path: String },
    VerifyFiles { job: JobId, files: Vec<(String, u64)> },
    Replay { replay: u64, files: Vec<LogFile> },
    Spawn(Spawn),
}

/// A process the worker started (or could not), for the event loop.
pub(crate) type Started = (Spawn, std::io::Result<tokio::process::Child>);

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
        started: async_channel::Sender<Started>,
    ) -> std::io::Result<Worker> {
        let (tx, rx) = mpsc::channel::<Work>();
        std::thread::Builder::new().name(name).spawn(move || {
            let _rt = rt.enter();
            for work in rx {
                run(&remote, &started, work);
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

fn run(remote: &Remote<DaemonNode>, started: &async_channel::Sender<Started>, work: Work) {
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
            post(remote, NodeCommand::OutputFileRead { job, rank, name, data: files::read(&path) });
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
        Work::RemoveDir { path } => files::remove_dir(&path),
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
            let child = procs::start(&s);
            let _ = started.send_blocking((s, child));
        }
    }
}
