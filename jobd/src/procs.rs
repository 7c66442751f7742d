//! The processes a daemon runs: started (by the file worker, in order after
//! their files) in their job directory with the documented environment, then
//! owned by the daemon's event loop ([`Procs`]): output streamed to the node,
//! killed on request, and killed with the daemon (`PR_SET_PDEATHSIG`, so even
//! `kill -9` of the daemon leaves no rank behind).
//!
//! The death signal must be set inside the new process, between its creation
//! and the exec of the program. Where util-linux's `setpriv --pdeathsig` is
//! found (checked once: it runs `true`), the daemon starts `setpriv`, which sets
//! it and execs the program; then nothing runs in the child before exec, so the
//! standard library starts it with `posix_spawn` (a vfork: the daemon's page
//! tables are not copied). Without it, a `pre_exec` hook sets it, which forces a
//! `fork`: measured here 8-23 ms per process in a busy daemon (page tables
//! copied, then every page its threads write copied again until the exec)
//! against 0.3-1.8 ms.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use p2pmp_adapters::Remote;
use p2pmp_core::job::{JobId, STREAM_WINDOW, Stream};
use p2pmp_core::node::{DaemonNode, NodeCommand};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{Semaphore, oneshot};
use tracing::{debug, warn};

use crate::files;

/// A running process: how to stop it, and its output credit (bytes of stdout
/// and stderr it may still send; see [`p2pmp_core::job::STREAM_WINDOW`]).
#[derive(Debug)]
struct Live {
    kill: oneshot::Sender<()>,
    credit: Arc<Semaphore>,
}

impl Live {
    /// Stops the process; output it has not sent yet is dropped.
    fn stop(self) {
        self.credit.close();
        let _ = self.kill.send(());
    }
}

/// What one process is started with.
#[derive(Debug)]
pub(crate) struct Spawn {
    pub(crate) job: JobId,
    pub(crate) rank: u32,
    pub(crate) dir: String,
    pub(crate) program: String,
    pub(crate) args: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
}

/// Every process of one daemon, owned by its event loop.
#[derive(Debug)]
pub(crate) struct Procs {
    remote: Remote<DaemonNode>,
    live: BTreeMap<(JobId, u32), Live>,
    /// Processes that ended, reported by their tasks (to leave the table).
    ended_tx: async_channel::Sender<(JobId, u32)>,
    ended: async_channel::Receiver<(JobId, u32)>,
}

fn tell(remote: &Remote<DaemonNode>, cmd: NodeCommand) {
    let _ = remote.post(cmd);
}

/// Sends what the process writes on `stream` to the node, as long as the
/// submitter keeps up: each chunk spends credit, and with none left the pipe is
/// not read (the process then blocks on its writes) until more arrives. A
/// stopped process (closed credit) sends nothing more.
async fn pump_output(
    remote: Remote<DaemonNode>,
    job: JobId,
    rank: u32,
    stream: Stream,
    credit: Arc<Semaphore>,
    mut r: impl AsyncRead + Unpin,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                // n <= 64 KiB, well within u32 and the window.
                let Ok(permits) = credit.acquire_many(n as u32).await else { return };
                permits.forget();
                let data = Bytes::copy_from_slice(&buf[..n]);
                tell(&remote, NodeCommand::ProcessOutput { job, rank, stream, data });
            }
        }
    }
}

/// An absolute path to a `setpriv` that sets the parent-death signal and execs
/// (util-linux 2.33 and later), found on `PATH` and tried once per process.
fn setpriv() -> Option<&'static Path> {
    static SETPRIV: OnceLock<Option<PathBuf>> = OnceLock::new();
    SETPRIV
        .get_or_init(|| {
            let path = std::env::var_os("PATH")?;
            let found = std::env::split_paths(&path).map(|d| d.join("setpriv")).find(|p| p.is_file())?;
            let found = found.canonicalize().ok()?;
            let works = std::process::Command::new(&found)
                .args(["--pdeathsig", "KILL", "--", "true"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            debug!(setpriv = %found.display(), works, "parent-death signal through setpriv");
            works.then_some(found)
        })
        .as_deref()
}

/// Why `program` cannot be run, found before it is started: through `setpriv`
/// an exec failure would only show as setpriv's exit code.
fn runnable(program: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(program).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mut head = [0u8; 256];
    let n = std::fs::File::open(program)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
        .map_err(|e| e.to_string())?;
    let head = &head[..n];
    if let Some(line) = head.strip_prefix(b"#!") {
        let line = line.split(|b| *b == b'\n').next().unwrap_or_default();
        let text = String::from_utf8_lossy(line);
        let interp = text.split_whitespace().next().unwrap_or_default();
        if interp.is_empty() || !Path::new(interp).is_file() {
            return Err(format!("its interpreter {interp:?} (the #! line) does not exist on this node"));
        }
        return Ok(());
    }
    if !head.starts_with(b"\x7fELF") {
        return Err("not an executable: neither a #! script nor an ELF program".into());
    }
    Ok(())
}

impl Procs {
    pub(crate) fn new(remote: Remote<DaemonNode>) -> Self {
        setpriv(); // found now, not on the first job's critical path
        let (ended_tx, ended) = async_channel::unbounded();
        Procs { remote, live: BTreeMap::new(), ended_tx, ended }
    }

    /// A process the worker started (or could not): its output and exit go to the node.
    pub(crate) fn adopt(&mut self, s: Spawn, child: std::io::Result<tokio::process::Child>) {
        let (job, rank) = (s.job, s.rank);
        let remote = self.remote.clone();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => {
                warn!(program = s.program, %e, "cannot start a process");
                let data = Bytes::from(format!("p2pmp: cannot start {}: {e}\n", s.program));
                tell(&remote, NodeCommand::ProcessOutput { job, rank, stream: Stream::Stderr, data });
                tell(&remote, NodeCommand::ProcessExited { job, rank, code: 127 });
                return;
            }
        };
        let (kill, kill_rx) = oneshot::channel();
        let credit = Arc::new(Semaphore::new(STREAM_WINDOW as usize));
        self.live.insert((job, rank), Live { kill, credit: credit.clone() });
        let ended = self.ended_tx.clone();
        let pump = |stream, r: Box<dyn AsyncRead + Send + Unpin>| {
            tokio::spawn(pump_output(remote.clone(), job, rank, stream, credit.clone(), r))
        };
        let out = child.stdout.take().map(|o| pump(Stream::Stdout, Box::new(o)));
        let err = child.stderr.take().map(|e| pump(Stream::Stderr, Box::new(e)));
        tokio::spawn(async move {
            let status = tokio::select! {
                st = child.wait() => st,
                _ = kill_rx => {
                    let _ = child.start_kill();
                    child.wait().await
                }
            };
            for t in [out, err].into_iter().flatten() {
                let _ = t.await;
            }
            let _ = ended.send((job, rank)).await;
            let code = match status {
                Ok(st) => st.code().unwrap_or_else(|| -st.signal().unwrap_or(9)),
                Err(_) => -9,
            };
            debug!(%job, rank, code, "process exited");
            tell(&remote, NodeCommand::ProcessExited { job, rank, code });
        });
    }

    /// The next process that ended (for [`Procs::forget`]).
    pub(crate) async fn ended(&self) -> Option<(JobId, u32)> {
        self.ended.recv().await.ok()
    }

    /// An ended process leaves the table.
    pub(crate) fn forget(&mut self, key: (JobId, u32)) {
        self.live.remove(&key);
    }

    /// Stops a process (its exit is reported as usual).
    pub(crate) fn kill(&mut self, job: JobId, rank: u32) {
        if let Some(p) = self.live.remove(&(job, rank)) {
            p.stop();
        }
    }

    /// Stops every process.
    pub(crate) fn kill_all(&mut self) {
        std::mem::take(&mut self.live).into_values().for_each(Live::stop);
    }

    /// The submitter has `bytes` more of process (`job`, `rank`)'s output.
    pub(crate) fn credit(&self, job: JobId, rank: u32, bytes: u64) {
        if let Some(p) = self.live.get(&(job, rank)) {
            // The executor never grants more than was sent: at most a window.
            p.credit.add_permits(bytes.min(STREAM_WINDOW) as usize);
        }
    }

    /// Processes still running.
    pub(crate) fn running(&self) -> usize {
        self.live.len()
    }
}

/// Starts the process of `s` (on the file worker's thread, inside the event
/// loop's runtime, after every file staged before it was written).
pub(crate) fn start(s: &Spawn) -> std::io::Result<tokio::process::Child> {
    runnable(Path::new(&s.program)).map_err(std::io::Error::other)?;
    let mut perm = std::fs::metadata(&s.program)?.permissions();
    perm.set_mode(0o755);
    std::fs::set_permissions(&s.program, perm)?;
    let mut cmd = match setpriv() {
        Some(setpriv) => {
            let mut cmd = tokio::process::Command::new(setpriv);
            cmd.args(["--pdeathsig", "KILL", "--"]).arg(&s.program);
            cmd
        }
        None => {
            let mut cmd = tokio::process::Command::new(&s.program);
            // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            cmd
        }
    };
    cmd.args(&s.args)
        .current_dir(&s.dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
        .env("HOME", &s.dir)
        .envs(s.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // No file is open for writing while the new process is made (see
    // `files::no_writers`). A fork elsewhere in the process (not ours) may
    // still lend a descriptor for a moment: ETXTBSY is tried again. Through
    // `setpriv` the program is exec'd after the spawn returned (and the lock
    // was released): a failure there shows as setpriv's exit code and message.
    let mut tries = 0;
    loop {
        let spawned = {
            let _no_writers = files::no_writers();
            cmd.spawn()
        };
        match spawned {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_cannot_run_is_said_before_it_is_started() {
        let dir = std::env::temp_dir().join(format!("p2pmp-runnable-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, data: &[u8]| {
            let p = dir.join(name);
            std::fs::write(&p, data).unwrap();
            p
        };
        assert_eq!(runnable(&write("ok.sh", b"#!/bin/sh\necho hi\n")), Ok(()));
        let bad = runnable(&write("py.sh", b"#!/no/such/python3 -u\nprint(1)\n")).unwrap_err();
        assert!(bad.contains("\"/no/such/python3\"") && bad.contains("does not exist"), "{bad}");
        let text = runnable(&write("notes.txt", b"just text\n")).unwrap_err();
        assert!(text.contains("neither a #! script nor an ELF program"), "{text}");
        assert_eq!(runnable(Path::new("/bin/true")), Ok(()));
        assert!(runnable(&dir).unwrap_err().contains("not a regular file"));
        assert!(runnable(&dir.join("missing")).unwrap_err().contains("No such file"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
