//! Each job's sandbox on an executor: its own user, its limits, its cgroup.
//!
//! - **User.** When jobd runs as root, each job runs as a user of its own: a
//!   numeric uid (and gid) from a fixed range, [`UID_BASE`] onwards, never an
//!   account: nothing is written to `/etc/passwd`, a job start costs no
//!   `useradd`, and a daemon killed -9 leaves no account behind (the kernel
//!   needs only the number). A uid is claimed with a lock on a file of
//!   [`LOCK_DIR`] ([`claim_uid`]), so daemons sharing a kernel (several on a
//!   host, or hosts in network namespaces) never give one uid to two jobs; a
//!   daemon that dies drops its locks with it. The job
//!   directory is given to that user with mode 0700, the node's directory is
//!   0711 (no listing) and the file cache 0700, so no job reads another's
//!   files. A staged executable hard-linked from the cache stays root's (mode
//!   0755): the job cannot rewrite the cached program. When the job ends,
//!   every process left with its uid is killed and the uid is free again.
//!   Not root: jobs run as the daemon's user, said once in the log.
//! - **Limits** ([`Limits`]): rlimits set on each process before it runs; a
//!   job file may ask for less (`<limit>memory_mb=512</limit>`), never more.
//! - **cgroups v2** ([`cgroup`]) where this host offers the memory and pids
//!   controllers: one cgroup per job; otherwise rlimits alone.
//! - **Disk**: the job directory's use, walked every second on the file
//!   worker ([`Sandbox::over_quota`]).
//!
//! Processes start gated ([`crate::procs`]): the daemon sets their limits and
//! cgroup, then lets them exec the program, so nothing runs unconfined.

mod cgroup;
mod limits;

use std::collections::BTreeMap;
use std::fs::DirBuilder;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use p2pmp_core::job::description::{MAX_JOB_FILE, STAGED_JOB_FILE};
use p2pmp_core::job::{JobDescription, JobId};
use tracing::{info, warn};

pub use limits::Limits;
pub(crate) use limits::{Resource, apply as apply_rlimits};

/// The first uid (and gid) given to jobs.
pub const UID_BASE: u32 = 1_900_000_000;
/// How many uids jobs may have (on one host, at once).
pub const UIDS: u32 = 65_536;
/// Where the uid lock files are.
pub const LOCK_DIR: &str = "/run/p2pmp-jobd";
/// Most directory entries walked when measuring a job directory.
const MAX_WALK: usize = 1_000_000;

/// How a job runs, for one process start.
#[derive(Debug, Clone)]
pub(crate) struct Jail {
    /// The job's own uid (= gid), when jobs get one.
    pub(crate) uid: Option<u32>,
    pub(crate) rlimits: Vec<(Resource, u64, u64)>,
    /// The job's cgroup's `cgroup.procs`.
    pub(crate) cgroup: Option<PathBuf>,
}

/// One job's sandbox, made when its first process starts.
#[derive(Debug)]
struct JobBox {
    job: JobId,
    /// The node's limits, lowered to what the job asked for.
    limits: Limits,
    uid: Option<u32>,
    /// Held while the job runs: the uid is this job's alone.
    _uid_lock: Option<std::fs::File>,
    cgroup: Option<PathBuf>,
    /// Killed for its disk use already.
    over: bool,
}

/// Every job sandbox of one daemon (owned by its file worker).
#[derive(Debug)]
pub(crate) struct Sandbox {
    limits: Limits,
    /// Whether jobs get users of their own.
    uids: bool,
    cgroups: Option<cgroup::Tree>,
    /// By job directory.
    jobs: BTreeMap<String, JobBox>,
    /// The uid given last: the next job takes the next free one after it,
    /// so a uid just released (and anything of it still dying) rests a while.
    last_uid: u32,
    /// Where uids are claimed.
    lock_dir: PathBuf,
}

/// Why `dir` (and every directory above it) cannot be passed through by
/// other users, if it cannot.
fn closed_ancestor(dir: &Path) -> Option<PathBuf> {
    dir.ancestors().find(|d| std::fs::metadata(d).map(|m| m.mode() & 0o001 == 0).unwrap_or(true)).map(Path::to_path_buf)
}

impl Sandbox {
    /// Detects what this host allows and prepares the node's directory
    /// `node_dir` (the daemon on `port`); logs what is in use.
    pub(crate) fn new(limits: Limits, own_users: bool, node_dir: &Path, port: u16) -> Sandbox {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let mut uids = false;
        let lock_dir = PathBuf::from(LOCK_DIR);
        if let Err(e) = std::fs::create_dir_all(node_dir.join("cache")) {
            warn!(dir = %node_dir.display(), %e, "cannot make the node's directory");
        }
        if root && own_users {
            let _ = std::fs::set_permissions(node_dir, std::fs::Permissions::from_mode(0o711));
            let _ = std::fs::set_permissions(node_dir.join("cache"), std::fs::Permissions::from_mode(0o700));
            // The work directory itself may be ours to open up; above it, nothing is changed.
            if let Some(work) = node_dir.parent() {
                if let Ok(m) = std::fs::metadata(work) {
                    let _ = std::fs::set_permissions(work, std::fs::Permissions::from_mode(m.mode() | 0o111));
                }
            }
            match closed_ancestor(node_dir) {
                Some(d) => warn!(
                    dir = %d.display(),
                    "jobs run as the daemon's user (root!): other users cannot pass through this directory, \
                     so a job's own user could not reach its job directory; choose a work_dir under /var/tmp or /tmp"
                ),
                None => match DirBuilder::new().recursive(true).mode(0o700).create(&lock_dir) {
                    Ok(()) => uids = true,
                    Err(e) => {
                        warn!(dir = LOCK_DIR, %e, "jobs run as the daemon's user (root!): no place to claim uids")
                    }
                },
            }
        }
        let cgroups = if root {
            match cgroup::Tree::detect(port) {
                Ok(t) => {
                    info!(subtree = %t.root().display(), "cgroups v2: a cgroup per job (memory.max, pids.max)");
                    Some(t)
                }
                Err(why) => {
                    info!("cgroups v2 not used: {why}; rlimits only");
                    None
                }
            }
        } else {
            None
        };
        // Daemons of one host start their search at different places.
        let last_uid = UID_BASE + (u32::from(port).wrapping_mul(2_654_435_761) ^ std::process::id()) % UIDS;
        let sb = Sandbox { limits, uids, cgroups, jobs: BTreeMap::new(), last_uid, lock_dir };
        match (sb.uids, root) {
            (true, _) => info!(
                first = UID_BASE,
                count = UIDS,
                "each job runs as a user of its own (uid = gid, no account, claimed in {LOCK_DIR})"
            ),
            (false, true) if !own_users => warn!("jobs run as the daemon's user, root (per_job_user = false)"),
            (false, true) => {}
            (false, false) => info!("not root: jobs run as the daemon's user"),
        }
        info!(limits = %sb.limits.describe(), mechanism = sb.mechanism(), "job limits");
        sb
    }

    /// What confines jobs here, in words (for the log and the advert).
    pub(crate) fn mechanism(&self) -> &'static str {
        match (self.uids, self.cgroups.is_some()) {
            (true, true) => "own user, rlimits, cgroups v2",
            (true, false) => "own user, rlimits",
            (false, true) => "rlimits, cgroups v2",
            (false, false) => "rlimits",
        }
    }

    /// Tags the node advertises for its sandbox (`sandbox-user`, `cgroup2`).
    pub(crate) fn tags(&self) -> Vec<String> {
        let mut t = Vec::new();
        if self.uids {
            t.push("sandbox-user".to_owned());
        }
        if self.cgroups.is_some() {
            t.push("cgroup2".to_owned());
        }
        t
    }

    /// The jail for a process of `job` in `dir`: the job's box is made by its
    /// first process (a user, the directory given to it, a cgroup).
    pub(crate) fn prepare(&mut self, job: JobId, dir: &str) -> std::io::Result<Jail> {
        if !self.jobs.contains_key(dir) {
            let b = self.make_box(job, dir)?;
            self.jobs.insert(dir.to_owned(), b);
        }
        let b = &self.jobs[dir];
        let rlimits = b.limits.rlimits(b.uid.is_some(), b.cgroup.is_some());
        Ok(Jail { uid: b.uid, rlimits, cgroup: b.cgroup.clone() })
    }

    fn make_box(&mut self, job: JobId, dir: &str) -> std::io::Result<JobBox> {
        let limits = self.limits.lowered(&asked_limits(Path::new(dir)));
        let (uid, uid_lock) = if self.uids {
            let (uid, lock) = claim_uid(&self.lock_dir, self.last_uid + 1)?;
            self.last_uid = uid;
            // Whatever a job of a daemon killed -9 left with this uid goes first.
            crate::procs::kill_user(uid, 1);
            give_dir(Path::new(dir), uid)?;
            (Some(uid), Some(lock))
        } else {
            (None, None)
        };
        let cgroup = match &self.cgroups {
            None => None,
            Some(t) => Some(t.create(&format!("job-{job}"), limits.memory_mb, limits.processes)?),
        };
        Ok(JobBox { job, limits, uid, _uid_lock: uid_lock, cgroup, over: false })
    }

    /// The job in `dir` ended (its directory goes): whatever it left running
    /// is killed, its cgroup removed, its user free again.
    pub(crate) fn release(&mut self, dir: &str) {
        let Some(b) = self.jobs.remove(dir) else { return };
        if let Some(procs) = &b.cgroup {
            cgroup::Tree::remove(procs);
        }
        if let Some(uid) = b.uid {
            crate::procs::kill_user(uid, 3);
        }
        // Dropping `b` releases the uid's lock.
    }

    /// Jobs whose directory uses more than the disk limit, with the message
    /// they fail with (each job once).
    pub(crate) fn over_quota(&mut self) -> Vec<(JobId, String)> {
        let mut over = Vec::new();
        for (dir, b) in self.jobs.iter_mut().filter(|(_, b)| !b.over && b.limits.disk_mb > 0) {
            let limit = b.limits.disk_mb.saturating_mul(1 << 20);
            let used = disk_used(Path::new(dir));
            if used > limit {
                b.over = true;
                let message = format!("job directory used {}, over the {} limit", gib_or_mib(used), gib_or_mib(limit));
                over.push((b.job, message));
            }
        }
        over
    }
}

/// Claims the first uid from `from` on (wrapping within the range) whose lock
/// file in `dir` no one holds; the lock is held while the file stays open.
fn claim_uid(dir: &Path, from: u32) -> std::io::Result<(u32, std::fs::File)> {
    use std::os::fd::AsRawFd;
    let start = from.saturating_sub(UID_BASE) % UIDS;
    for i in 0..UIDS {
        let uid = UID_BASE + (start + i) % UIDS;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(dir.join(format!("uid-{uid}")))?;
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok((uid, f));
        }
    }
    Err(std::io::Error::other(format!("all {UIDS} job users of this host are busy")))
}

/// The limits the job in `dir` asked for in its job file (staged there as
/// `job.xml` before any of its processes ran); none if it cannot be read.
fn asked_limits(dir: &Path) -> Vec<(String, u64)> {
    let path = dir.join(STAGED_JOB_FILE);
    let Ok(mut f) = crate::files::open_regular(&path.to_string_lossy()) else { return Vec::new() };
    let mut xml = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::io::Read::take(&mut f, MAX_JOB_FILE as u64 + 1), &mut xml);
    JobDescription::parse(&xml).map(|p| p.job.limits).unwrap_or_default()
}

/// `bytes` as `1.2 GiB` or `345 MiB`.
fn gib_or_mib(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

/// Gives job directory `dir` and the files in it to `uid`, mode 0700. A file
/// with other links (the executable, hard-linked from the cache) stays the
/// daemon's: the job may run it, not rewrite it. Links are never followed.
fn give_dir(dir: &Path, uid: u32) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_file() && meta.nlink() > 1 {
            continue;
        }
        std::os::unix::fs::lchown(entry.path(), Some(uid), Some(uid))?;
    }
    std::os::unix::fs::lchown(dir, Some(uid), Some(uid))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Bytes of disk the tree at `dir` takes (allocated blocks), links not followed.
pub(crate) fn disk_used(dir: &Path) -> u64 {
    let mut total = 0u64;
    let mut todo = vec![dir.to_path_buf()];
    let mut seen = 0usize;
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            seen += 1;
            if seen > MAX_WALK {
                return total;
            }
            let Ok(m) = e.metadata() else { continue };
            total = total.saturating_add(m.blocks().saturating_mul(512));
            if m.is_dir() {
                todo.push(e.path());
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uid_is_claimed_by_one_holder_at_a_time_and_free_again_when_dropped() {
        let dir = std::env::temp_dir().join(format!("p2pmp-uids-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, lock_a) = claim_uid(&dir, UID_BASE + 5).unwrap();
        let (b, _lock_b) = claim_uid(&dir, UID_BASE + 5).unwrap();
        assert_eq!((a, b), (UID_BASE + 5, UID_BASE + 6), "a held uid is skipped");
        let (last, _) = claim_uid(&dir, UID_BASE + UIDS - 1).unwrap();
        assert_eq!(last, UID_BASE + UIDS - 1);
        drop(lock_a);
        assert_eq!(claim_uid(&dir, UID_BASE + 5).unwrap().0, UID_BASE + 5, "free again once dropped");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn disk_use_counts_blocks_in_subdirectories_and_not_through_links() {
        let dir = std::env::temp_dir().join(format!("p2pmp-du-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("a"), vec![1u8; 1 << 20]).unwrap();
        std::fs::write(dir.join("sub/b"), vec![1u8; 2 << 20]).unwrap();
        std::os::unix::fs::symlink("/usr", dir.join("link")).unwrap();
        let used = disk_used(&dir);
        assert!((3 << 20..4 << 20).contains(&used), "{used}");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(gib_or_mib(1288490189), "1.2 GiB");
        assert_eq!(gib_or_mib(40 << 20), "40 MiB");
    }
}
