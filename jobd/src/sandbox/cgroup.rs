//! cgroups v2, where this host offers them: one cgroup per job under a
//! `p2pmp-<port>` subtree beside the daemon's own cgroup, with `memory.max`
//! and `pids.max`; a job's processes are moved in before they run, and the
//! whole cgroup is killed (`cgroup.kill`) and removed when the job ends.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The controllers a job's cgroup needs.
const NEEDED: [&str; 2] = ["memory", "pids"];

/// The daemon's subtree of cgroups.
#[derive(Debug)]
pub(crate) struct Tree {
    root: PathBuf,
}

/// Where the unified (v2) hierarchy is mounted, from `/proc/self/mountinfo`.
fn mount_point(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let point = left.split_whitespace().nth(4)?;
        (right.split_whitespace().next() == Some("cgroup2")).then(|| PathBuf::from(point))
    })
}

/// This process's cgroup in the unified hierarchy, from `/proc/self/cgroup`.
fn own_cgroup(cgroup: &str) -> Option<&str> {
    cgroup.lines().find_map(|l| l.strip_prefix("0::"))
}

fn enable(dir: &Path) -> std::io::Result<()> {
    std::fs::write(dir.join("cgroup.subtree_control"), "+memory +pids")
}

impl Tree {
    /// The subtree for the daemon on `port`, made ready, or why there is none.
    pub(crate) fn detect(port: u16) -> Result<Tree, String> {
        let info = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
        let mount = mount_point(&info).ok_or("no cgroup2 file system is mounted")?;
        let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("/proc/self/cgroup: {e}"))?;
        let own = own_cgroup(&own).ok_or("this process is in no cgroup v2")?.trim().trim_start_matches('/');
        let base = mount.join(own);
        let offered = std::fs::read_to_string(base.join("cgroup.controllers")).unwrap_or_default();
        let missing: Vec<_> = NEEDED.iter().filter(|c| !offered.split_whitespace().any(|o| o == **c)).collect();
        if !missing.is_empty() {
            return Err(format!(
                "cgroup2 at {} lacks the {missing:?} controller(s) (offered: {:?}; bound to cgroups v1?)",
                base.display(),
                offered.trim()
            ));
        }
        enable(&base).map_err(|e| {
            format!("cannot enable memory and pids below {} ({e}; run jobd in a delegated cgroup)", base.display())
        })?;
        let root = base.join(format!("p2pmp-{port}"));
        std::fs::create_dir(&root)
            .or_else(|e| if e.kind() == std::io::ErrorKind::AlreadyExists { Ok(()) } else { Err(e) })
            .and_then(|()| enable(&root))
            .map_err(|e| format!("cannot make {}: {e}", root.display()))?;
        Ok(Tree { root })
    }

    /// Where the subtree is.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// A new cgroup `name` with these limits (0: none); its `cgroup.procs`.
    pub(crate) fn create(&self, name: &str, memory_mb: u64, processes: u64) -> std::io::Result<PathBuf> {
        let dir = self.root.join(name);
        std::fs::create_dir(&dir)?;
        if memory_mb > 0 {
            std::fs::write(dir.join("memory.max"), (memory_mb << 20).to_string())?;
            // Swap would let a job past its memory: none.
            let _ = std::fs::write(dir.join("memory.swap.max"), "0");
        }
        if processes > 0 {
            std::fs::write(dir.join("pids.max"), processes.to_string())?;
        }
        Ok(dir.join("cgroup.procs"))
    }

    /// Kills every process left in the cgroup whose `cgroup.procs` this is, and removes it.
    pub(crate) fn remove(procs: &Path) {
        let Some(dir) = procs.parent() else { return };
        let _ = std::fs::write(dir.join("cgroup.kill"), "1");
        for _ in 0..200 {
            if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        tracing::warn!(cgroup = %dir.display(), "cannot remove a job's cgroup");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_unified_hierarchy_and_our_place_in_it() {
        let info = "25 1 0:22 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
                    30 25 0:26 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(mount_point(info), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(mount_point("25 1 0:22 / /sys/fs/cgroup rw - cgroup cgroup rw,memory\n"), None);
        assert_eq!(own_cgroup("4:memory:/x\n0::/system.slice/jobd.service\n"), Some("/system.slice/jobd.service"));
        assert_eq!(own_cgroup("4:memory:/x\n"), None);
    }
}
