//! The processes a daemon runs: started (by the file worker, in order after
//! their files) in their job directory with the documented environment, then
//! owned by the daemon's event loop ([`Procs`]): output streamed to the node,
//! killed on request, and killed with the daemon (`PR_SET_PDEATHSIG`, so even
//! `kill -9` of the daemon leaves no rank behind).
//!
//! The death signal, the job's user, its limits and its cgroup
//! ([`crate::sandbox`]) must be set inside the new process, between its
//! creation and the exec of the program. Where util-linux's `setpriv
//! --pdeathsig` is found (checked once: it runs `true`), the daemon starts a
//! gated shell ([`GATE`]) that execs `setpriv` (death signal, job's user and
//! no groups) which execs the program; the limits and cgroup are set on the
//! gated shell from outside. Nothing runs in the child before exec, so the
//! standard library starts it with `posix_spawn` (a vfork: the daemon's page
//! tables are not copied). Without `setpriv`, a `pre_exec` hook does it all,
//! which forces a `fork`: measured here 8-23 ms per process in a busy daemon
//! (page tables copied, then every page its threads write copied again until
//! the exec) against 0.3-1.8 ms.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use p2pmp_adapters::Remote;
use p2pmp_core::job::description::NODE_ENV_PREFIX;
use p2pmp_core::job::{JobId, STREAM_WINDOW, Stream};
use p2pmp_core::node::{DaemonNode, NodeCommand};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{Semaphore, oneshot};
use tracing::{debug, warn};

use crate::files;
use crate::sandbox::{self, Jail};

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
    tell: Tell,
    live: BTreeMap<(JobId, u32), Live>,
    /// Processes handed to the file worker and not started yet, with whether
    /// a kill came meanwhile: such a process is stopped as soon as it starts
    /// (a job failing while its ranks start left one running before).
    starting: BTreeMap<(JobId, u32), bool>,
    /// Processes that ended, reported by their tasks (to leave the table).
    ended_tx: async_channel::Sender<(JobId, u32)>,
    ended: async_channel::Receiver<(JobId, u32)>,
}

/// Where the processes' output and exits go: the node (a channel in tests).
#[derive(Clone)]
pub(crate) struct Tell(Arc<dyn Fn(NodeCommand) + Send + Sync>);

impl Tell {
    pub(crate) fn node(remote: Remote<DaemonNode>) -> Self {
        Tell(Arc::new(move |cmd| {
            let _ = remote.post(cmd);
        }))
    }

    fn send(&self, cmd: NodeCommand) {
        (self.0)(cmd)
    }
}

impl std::fmt::Debug for Tell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tell")
    }
}

/// Sends what the process writes on `stream` to the node, as long as the
/// submitter keeps up: each chunk spends credit, and with none left the pipe is
/// not read (the process then blocks on its writes) until more arrives. A
/// stopped process (closed credit) sends nothing more.
async fn pump_output(
    tell: Tell,
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
                tell.send(NodeCommand::ProcessOutput { job, rank, stream, data });
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
fn runnable(mut program: &std::fs::File) -> Result<(), String> {
    let mut head = [0u8; 256];
    let n = std::io::Read::read(&mut program, &mut head).map_err(|e| e.to_string())?;
    match interpreter(&head[..n])? {
        Some(interp) if interp.is_empty() || !Path::new(&interp).is_file() => {
            Err(format!("its interpreter {interp:?} (the #! line) does not exist on this node"))
        }
        _ => Ok(()),
    }
}

/// Whether `head`, the first bytes of a file, starts a program: a `#!`
/// script (`Some` of its interpreter) or an ELF executable (`None`).
pub fn interpreter(head: &[u8]) -> Result<Option<String>, String> {
    if let Some(line) = head.strip_prefix(b"#!") {
        let line = line.split(|b| *b == b'\n').next().unwrap_or_default();
        let text = String::from_utf8_lossy(line);
        return Ok(Some(text.split_whitespace().next().unwrap_or_default().to_owned()));
    }
    if !head.starts_with(b"\x7fELF") {
        return Err("not an executable: neither a #! script nor an ELF program".into());
    }
    Ok(None)
}

impl Procs {
    pub(crate) fn new(tell: Tell) -> Self {
        setpriv(); // found now, not on the first job's critical path
        let (ended_tx, ended) = async_channel::unbounded();
        Procs { tell, live: BTreeMap::new(), starting: BTreeMap::new(), ended_tx, ended }
    }

    /// A process about to be started by the file worker (then [`Procs::adopt`]).
    pub(crate) fn starting(&mut self, job: JobId, rank: u32) {
        self.starting.insert((job, rank), false);
    }

    /// A process the worker started (or could not): its output and exit go to the node.
    /// One killed while it was starting is stopped at once.
    pub(crate) fn adopt(&mut self, s: Spawn, child: std::io::Result<tokio::process::Child>) {
        let (job, rank) = (s.job, s.rank);
        let killed = self.starting.remove(&(job, rank)).unwrap_or(false);
        let tell = self.tell.clone();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => {
                warn!(program = s.program, %e, "cannot start a process");
                let data = Bytes::from(format!("p2pmp: cannot start {}: {e}\n", s.program));
                tell.send(NodeCommand::ProcessOutput { job, rank, stream: Stream::Stderr, data });
                tell.send(NodeCommand::ProcessExited { job, rank, code: 127 });
                return;
            }
        };
        let (kill, kill_rx) = oneshot::channel();
        let credit = Arc::new(Semaphore::new(STREAM_WINDOW as usize));
        self.live.insert((job, rank), Live { kill, credit: credit.clone() });
        let ended = self.ended_tx.clone();
        let pump = |stream, r: Box<dyn AsyncRead + Send + Unpin>| {
            tokio::spawn(pump_output(tell.clone(), job, rank, stream, credit.clone(), r))
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
            tell.send(NodeCommand::ProcessExited { job, rank, code });
        });
        if killed {
            self.kill(job, rank);
        }
    }

    /// The next process that ended (for [`Procs::forget`]).
    pub(crate) async fn ended(&self) -> Option<(JobId, u32)> {
        self.ended.recv().await.ok()
    }

    /// An ended process leaves the table.
    pub(crate) fn forget(&mut self, key: (JobId, u32)) {
        self.live.remove(&key);
    }

    /// Stops a process (its exit is reported as usual), or one still
    /// starting as soon as it starts.
    pub(crate) fn kill(&mut self, job: JobId, rank: u32) {
        if let Some(p) = self.live.remove(&(job, rank)) {
            p.stop();
        } else if let Some(killed) = self.starting.get_mut(&(job, rank)) {
            *killed = true;
        }
    }

    /// Stops every process of `job`; the lowest rank's stderr gets `why` first.
    pub(crate) fn kill_job(&mut self, job: JobId, why: &str) {
        let ranks: Vec<u32> = self.live.range((job, 0)..=(job, u32::MAX)).map(|(k, _)| k.1).collect();
        let starting: Vec<u32> = self.starting.range((job, 0)..=(job, u32::MAX)).map(|(k, _)| k.1).collect();
        if let Some(&rank) = ranks.first() {
            let data = Bytes::from(format!("p2pmp: {why}\n"));
            self.tell.send(NodeCommand::ProcessOutput { job, rank, stream: Stream::Stderr, data });
        }
        for rank in ranks.into_iter().chain(starting) {
            self.kill(job, rank);
        }
    }

    /// Stops every process, those still starting as they start.
    pub(crate) fn kill_all(&mut self) {
        std::mem::take(&mut self.live).into_values().for_each(Live::stop);
        self.starting.values_mut().for_each(|killed| *killed = true);
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

/// The shell script a process starts through when `setpriv` is used: it
/// waits (still the daemon's user) for one line on its stdin, the gate,
/// before it execs `setpriv`, which drops to the job's user and execs the
/// program. Meanwhile the daemon sets its limits and cgroup (a process of its
/// own user, so no `CAP_SYS_RESOURCE` is needed), and nothing of the program
/// runs unconfined. A daemon that dies first closes the gate: `read` fails
/// and nothing runs. The program's stdin is then at its end, like /dev/null.
const GATE: &str = "read -r _ && exec \"$@\"";

/// The command that starts `s` in `jail`: through the gate and `setpriv`
/// when there is one (see [`GATE`]), else the program itself, confined in
/// the child before its exec.
fn command(s: &Spawn, jail: &Jail, setpriv: Option<&Path>) -> std::io::Result<tokio::process::Command> {
    // The node's variables (the only names a job may not set) and the job file's.
    let (node_env, job_env): (Vec<_>, Vec<_>) = s.env.iter().partition(|(k, _)| k.starts_with(NODE_ENV_PREFIX));
    let mut cmd = match setpriv {
        Some(setpriv) => {
            let mut cmd = tokio::process::Command::new("/bin/sh");
            cmd.args(["-c", GATE, "p2pmp-gate"]).arg(setpriv).args(["--pdeathsig", "KILL"]);
            if let Some(uid) = jail.uid {
                cmd.arg(format!("--reuid={uid}")).arg(format!("--regid={uid}")).arg("--clear-groups");
            }
            cmd.arg("--");
            // The gate and setpriv run as the daemon's user: the job's own
            // variables (LD_PRELOAD, say) only reach what runs as the job's,
            // through env(1) after the drop.
            if !job_env.is_empty() {
                if s.program.contains('=') {
                    return Err(std::io::Error::other(format!(
                        "{}: a program whose path has '=' cannot be given <env> variables",
                        s.program
                    )));
                }
                cmd.args(["env", "--"]).args(job_env.iter().map(|(k, v)| format!("{k}={v}")));
            }
            cmd.arg(&s.program);
            cmd
        }
        None => {
            let mut cmd = tokio::process::Command::new(&s.program);
            let confine = InChild::new(jail)?;
            // SAFETY: `InChild::enter` makes only async-signal-safe system
            // calls on memory prepared before the fork.
            unsafe { cmd.pre_exec(move || confine.enter()) };
            cmd
        }
    };
    cmd.args(&s.args)
        .current_dir(&s.dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
        .env("HOME", &s.dir)
        .envs(node_env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if setpriv.is_none() {
        // Without the gate, exec comes after the drop in `InChild::enter`.
        cmd.envs(job_env.iter().map(|(k, v)| (k, v)));
    }
    Ok(cmd)
}

/// Starts the process of `s` in `jail` (on the file worker's thread, inside
/// the event loop's runtime, after every file staged before it was written).
pub(crate) fn start(s: &Spawn, jail: &Jail) -> std::io::Result<tokio::process::Child> {
    // Opened without following a link: a job's process may have swapped the
    // program for a link to a file of the daemon's before another rank starts.
    let program = files::open_regular(&s.program).map_err(|e| std::io::Error::other(format!("{}: {e}", s.program)))?;
    runnable(&program).map_err(std::io::Error::other)?;
    program.set_permissions(std::fs::Permissions::from_mode(0o755))?;
    drop(program);
    let setpriv = setpriv();
    let mut cmd = command(s, jail, setpriv)?;
    // No file is open for writing while the new process is made (see
    // `files::no_writers`). A fork elsewhere in the process (not ours) may
    // still lend a descriptor for a moment: ETXTBSY is tried again. Through
    // the gate the program is exec'd after the spawn returned (and the lock
    // was released): a failure there shows as setpriv's exit code and message.
    let mut tries = 0;
    let (mut child, gate) = loop {
        let gate = match setpriv {
            Some(_) => {
                let (r, w) = gate_pipe()?;
                cmd.stdin(Stdio::from(r));
                Some(w)
            }
            None => None,
        };
        let spawned = {
            let _no_writers = files::no_writers();
            cmd.spawn()
        };
        match spawned {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            Err(e) => return Err(e),
            Ok(child) => break (child, gate),
        }
    };
    if let Some(gate) = gate {
        if let Err(e) = confine(&child, jail).and_then(|()| open_gate(gate)) {
            let _ = child.start_kill();
            return Err(std::io::Error::other(format!("cannot confine the process: {e}")));
        }
    }
    Ok(child)
}

/// Without `setpriv`: what the new process does to itself between fork and
/// exec, in this order (limits and cgroup while still the daemon's user,
/// then the job's user), with everything it needs prepared beforehand.
struct InChild {
    rlimits: Vec<(sandbox::Resource, libc::rlimit)>,
    cgroup: Option<std::ffi::CString>,
    uid: Option<libc::uid_t>,
}

impl InChild {
    fn new(jail: &Jail) -> std::io::Result<InChild> {
        let rlimits = jail.rlimits.iter().map(|&(r, soft, hard)| (r, libc::rlimit { rlim_cur: soft, rlim_max: hard }));
        let cgroup = jail.cgroup.as_ref().map(|p| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()));
        Ok(InChild {
            rlimits: rlimits.collect(),
            cgroup: cgroup.transpose().map_err(std::io::Error::other)?,
            uid: jail.uid,
        })
    }

    /// Runs in the child: only async-signal-safe calls, no allocation.
    fn enter(&self) -> std::io::Result<()> {
        let check = |r: libc::c_int| if r == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) };
        // SAFETY: plain system calls on values prepared before the fork.
        unsafe {
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL))?;
            for (resource, lim) in &self.rlimits {
                check(libc::setrlimit(*resource, lim))?;
            }
            if let Some(procs) = &self.cgroup {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
                if written != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(uid) = self.uid {
                check(libc::setgroups(0, std::ptr::null()))?;
                check(libc::setresgid(uid, uid, uid))?;
                check(libc::setresuid(uid, uid, uid))?;
            }
        }
        Ok(())
    }
}

/// Sets a gated process's limits and cgroup.
fn confine(child: &tokio::process::Child, jail: &Jail) -> std::io::Result<()> {
    let pid = child.id().ok_or_else(|| std::io::Error::other("the process is gone"))?;
    sandbox::apply_rlimits(pid, &jail.rlimits)?;
    if let Some(procs) = &jail.cgroup {
        std::fs::write(procs, pid.to_string())?;
    }
    Ok(())
}

/// A pipe for the gate (both ends close-on-exec): the reading end, and the
/// writing end as a file.
fn gate_pipe() -> std::io::Result<(std::os::fd::OwnedFd, std::fs::File)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made by pipe2 and are owned by nothing else.
    unsafe { Ok((std::os::fd::OwnedFd::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1]))) }
}

fn open_gate(mut gate: std::fs::File) -> std::io::Result<()> {
    std::io::Write::write_all(&mut gate, b"go\n")
}

/// Kills every process of `uid` (a job's own user, when its job ended):
/// `kill -KILL -1` as that user reaches exactly those. Tried `tries` times,
/// as a process may be forking while it is killed.
pub(crate) fn kill_user(uid: u32, tries: u32) {
    for i in 0..tries {
        let mut cmd = match setpriv() {
            Some(setpriv) => {
                let mut cmd = std::process::Command::new(setpriv);
                cmd.arg(format!("--reuid={uid}")).arg(format!("--regid={uid}")).arg("--clear-groups").arg("/bin/sh");
                cmd
            }
            None => {
                let mut cmd = std::process::Command::new("/bin/sh");
                cmd.uid(uid).gid(uid);
                cmd
            }
        };
        let killed =
            cmd.args(["-c", "kill -KILL -1"]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status();
        if let Err(e) = killed {
            warn!(uid, %e, "cannot kill what a job left running");
            return;
        }
        if i + 1 < tries {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_variables_reach_only_what_runs_as_its_user() {
        let env = [("P2PMP_RANK", "0"), ("LD_PRELOAD", "x.so"), ("GREETING", "a b=c")];
        let s = Spawn {
            job: JobId(p2pmp_core::id::Id::ZERO),
            rank: 0,
            dir: "/tmp".into(),
            program: "/tmp/prog".into(),
            args: vec!["arg".into()],
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        let jail = Jail { uid: Some(1_900_000_001), rlimits: Vec::new(), cgroup: None };
        let set = |c: &tokio::process::Command| -> Vec<String> {
            c.as_std().get_envs().filter_map(|(k, v)| Some(format!("{}={}", k.to_str()?, v?.to_str()?))).collect()
        };
        // Through the gate: the shell and setpriv, as the daemon's user, see the node's variables only.
        let gated = command(&s, &jail, Some(Path::new("/usr/bin/setpriv"))).unwrap();
        let args: Vec<_> = gated.as_std().get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert!(set(&gated).contains(&"P2PMP_RANK=0".to_owned()), "{:?}", set(&gated));
        assert!(!set(&gated).iter().any(|v| v.starts_with("LD_PRELOAD") || v.starts_with("GREETING")));
        let after = args.iter().position(|a| a == "--reuid=1900000001").expect("the drop");
        let tail = ["env", "--", "LD_PRELOAD=x.so", "GREETING=a b=c", "/tmp/prog", "arg"].map(String::from);
        assert_eq!(args[args.len() - tail.len()..], tail, "env(1) after the drop: {args:?}");
        assert!(after < args.len() - tail.len());
        // Without it, the program's exec comes after the drop: its variables go to that exec.
        let direct = command(&s, &jail, None).unwrap();
        assert!(
            ["P2PMP_RANK=0", "LD_PRELOAD=x.so", "GREETING=a b=c"].iter().all(|v| set(&direct).contains(&v.to_string()))
        );
        let odd = Spawn { program: "/tmp/a=b".into(), ..s };
        assert!(
            command(&odd, &jail, Some(Path::new("/usr/bin/setpriv"))).is_err(),
            "env(1) would read it as a variable"
        );
    }

    #[test]
    fn what_cannot_run_is_said_before_it_is_started() {
        let dir = std::env::temp_dir().join(format!("p2pmp-runnable-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, data: &[u8]| {
            let p = dir.join(name);
            std::fs::write(&p, data).unwrap();
            p
        };
        let check = |p: &Path| files::open_regular(&p.to_string_lossy()).and_then(|f| runnable(&f));
        assert_eq!(check(&write("ok.sh", b"#!/bin/sh\necho hi\n")), Ok(()));
        let bad = check(&write("py.sh", b"#!/no/such/python3 -u\nprint(1)\n")).unwrap_err();
        assert!(bad.contains("\"/no/such/python3\"") && bad.contains("does not exist"), "{bad}");
        let text = check(&write("notes.txt", b"just text\n")).unwrap_err();
        assert!(text.contains("neither a #! script nor an ELF program"), "{text}");
        assert_eq!(check(Path::new("/usr/bin/true")), Ok(()));
        assert!(check(&dir).unwrap_err().contains("not a regular file"));
        assert!(check(&dir.join("missing")).unwrap_err().contains("No such file"));
        std::os::unix::fs::symlink("/usr/bin/true", dir.join("link")).unwrap();
        assert!(check(&dir.join("link")).unwrap_err().contains("symbolic link"), "links are not followed");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A kill that reaches a process while the file worker is still starting
    /// it stops it as soon as it starts (it ran on after its job had failed).
    #[test]
    fn a_process_killed_while_it_starts_is_stopped_once_started() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let tell = Tell(Arc::new(move |cmd| {
            let _ = tx.send(cmd);
        }));
        let job = JobId(p2pmp_core::id::Id::hash_parts([b"killed while starting".as_slice()]));
        let spawn = |rank| Spawn { job, rank, dir: "/".into(), program: "sleep".into(), args: vec![], env: vec![] };
        let sleeper = || tokio::process::Command::new("sleep").arg("60").kill_on_drop(true).spawn();
        let exits = rt.block_on(async {
            let mut procs = Procs::new(tell);
            procs.starting(job, 0);
            procs.starting(job, 1);
            procs.kill_job(job, "the job failed");
            procs.starting(job, 2);
            procs.adopt(spawn(0), sleeper());
            procs.adopt(spawn(1), sleeper());
            procs.adopt(spawn(2), sleeper());
            let mut exits = Vec::new();
            let limit = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
            while exits.len() < 2 && tokio::time::Instant::now() < limit {
                if let Some(key) = tokio::time::timeout_at(limit, procs.ended()).await.ok().flatten() {
                    procs.forget(key);
                    exits.push(key.1);
                }
            }
            assert_eq!(procs.running(), 1, "rank 2, started after the kill, runs on");
            procs.kill_all();
            exits
        });
        assert_eq!(exits.len(), 2, "ranks 0 and 1 stopped at once, not after sleep's 60 s");
        let mut killed: Vec<_> = rx
            .try_iter()
            .filter_map(|c| match c {
                NodeCommand::ProcessExited { rank, code, .. } => Some((rank, code)),
                _ => None,
            })
            .collect();
        killed.sort_unstable();
        assert_eq!(killed, [(0, -9), (1, -9)], "their exits are reported as killed");
    }
}
