//! The limits every job's processes run under: the node's maxima, from the
//! configuration (`[limits]`) and `jobd --limit KEY=VALUE`.

use anyhow::{Context, bail};
use serde::Deserialize;

/// What one job may use on this node; 0 is no limit.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// CPU time of each process, in seconds (`RLIMIT_CPU`: SIGXCPU, then SIGKILL 5 s later).
    pub cpu_s: u64,
    /// Memory, in MiB: `memory.max` of the job's cgroup under cgroups v2, else
    /// each process's address space (`RLIMIT_AS`).
    pub memory_mb: u64,
    /// Open files of each process (`RLIMIT_NOFILE`).
    pub open_files: u64,
    /// Processes and threads of the job (`pids.max` under cgroups v2, and
    /// `RLIMIT_NPROC` of the job's own user; not applied when jobs run as the
    /// daemon's user, whose other processes would count).
    pub processes: u64,
    /// Largest file a process may write, in MiB (`RLIMIT_FSIZE`: SIGXFSZ).
    pub file_size_mb: u64,
    /// Disk the job directory may use, in MiB, checked every second while the
    /// job runs: a job over it is killed, with a message saying so.
    pub disk_mb: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { cpu_s: 0, memory_mb: 0, open_files: 4096, processes: 1024, file_size_mb: 16 << 10, disk_mb: 16 << 10 }
    }
}

/// The keys of [`Limits`], for `--limit` and its message.
const KEYS: &str = "cpu_s, memory_mb, open_files, processes, file_size_mb, disk_mb";

impl Limits {
    /// Sets one limit from `KEY=VALUE` (`jobd --limit memory_mb=512`).
    pub fn set(&mut self, kv: &str) -> anyhow::Result<()> {
        let Some((key, value)) = kv.split_once('=') else { bail!("--limit {kv:?}: expected KEY=VALUE ({KEYS})") };
        let value: u64 = value.trim().parse().with_context(|| format!("--limit {kv:?}: not a whole number"))?;
        let Some(slot) = self.slot(key.trim()) else { bail!("--limit {key:?}: unknown (one of {KEYS})") };
        *slot = value;
        Ok(())
    }

    fn slot(&mut self, key: &str) -> Option<&mut u64> {
        Some(match key {
            "cpu_s" => &mut self.cpu_s,
            "memory_mb" => &mut self.memory_mb,
            "open_files" => &mut self.open_files,
            "processes" => &mut self.processes,
            "file_size_mb" => &mut self.file_size_mb,
            "disk_mb" => &mut self.disk_mb,
            _ => return None,
        })
    }

    /// These limits, lowered to what a job asked for (`<limit>` in its job
    /// file); a job never gets more than the node allows.
    pub(crate) fn lowered(&self, asked: &[(String, u64)]) -> Limits {
        let mut l = self.clone();
        for (key, want) in asked {
            if let Some(slot) = l.slot(key) {
                *slot = if *slot == 0 { *want } else { (*slot).min(*want) };
            }
        }
        l
    }

    /// The resource limits a process gets (resource, soft, hard): memory only
    /// when no cgroup holds it, processes only for a job's own user.
    pub(crate) fn rlimits(&self, own_user: bool, cgroup: bool) -> Vec<(Resource, u64, u64)> {
        let mib = |m: u64| m.saturating_mul(1 << 20);
        let mut out = vec![(libc::RLIMIT_CORE, 0, 0)];
        let mut add = |r, v: u64, extra: u64| {
            if v > 0 {
                out.push((r, v, v.saturating_add(extra)));
            }
        };
        add(libc::RLIMIT_CPU, self.cpu_s, 5);
        if !cgroup {
            add(libc::RLIMIT_AS, mib(self.memory_mb), 0);
        }
        add(libc::RLIMIT_NOFILE, self.open_files, 0);
        if own_user {
            add(libc::RLIMIT_NPROC, self.processes, 0);
        }
        add(libc::RLIMIT_FSIZE, mib(self.file_size_mb), 0);
        out
    }

    /// One line for the log.
    pub(crate) fn describe(&self) -> String {
        let v = |n: u64, unit: &str| if n == 0 { "unlimited".to_owned() } else { format!("{n}{unit}") };
        format!(
            "cpu {}, memory {}, open files {}, processes {}, file size {}, disk {}",
            v(self.cpu_s, " s"),
            v(self.memory_mb, " MiB"),
            v(self.open_files, ""),
            v(self.processes, ""),
            v(self.file_size_mb, " MiB"),
            v(self.disk_mb, " MiB")
        )
    }
}

/// A resource of `setrlimit`/`prlimit`.
pub(crate) type Resource = libc::__rlimit_resource_t;

/// Sets `pid`'s limits (the daemon may lower any process's; root may do it
/// to another user's).
pub(crate) fn apply(pid: u32, rlimits: &[(Resource, u64, u64)]) -> std::io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(std::io::Error::other)?;
    for &(resource, soft, hard) in rlimits {
        let lim = libc::rlimit { rlim_cur: soft, rlim_max: hard };
        // SAFETY: `lim` is a valid rlimit for the call; the old value is not asked for.
        if unsafe { libc::prlimit(pid, resource, &lim, std::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_from_flags_and_toml() {
        let mut l = Limits::default();
        l.set("memory_mb=256").unwrap();
        l.set(" cpu_s = 10").unwrap();
        assert_eq!((l.memory_mb, l.cpu_s), (256, 10));
        assert!(l.set("memory=1").unwrap_err().to_string().contains("unknown"));
        assert!(l.set("memory_mb").unwrap_err().to_string().contains("KEY=VALUE"));
        assert!(l.set("memory_mb=lots").is_err());
        let t: Limits = toml::from_str("disk_mb = 5\nfile_size_mb = 0\n").unwrap();
        assert_eq!((t.disk_mb, t.file_size_mb, t.open_files), (5, 0, 4096));
        assert!(toml::from_str::<Limits>("disk = 5").is_err());
        let r = l.rlimits(false, false);
        assert!(r.contains(&(libc::RLIMIT_AS, 256 << 20, 256 << 20)) && r.contains(&(libc::RLIMIT_CPU, 10, 15)));
        assert!(!r.iter().any(|x| x.0 == libc::RLIMIT_NPROC), "processes counted only for a job's own user");
        let r = l.rlimits(true, true);
        assert!(r.iter().any(|x| x.0 == libc::RLIMIT_NPROC) && !r.iter().any(|x| x.0 == libc::RLIMIT_AS));
        assert!(l.describe().contains("memory 256 MiB") && l.describe().contains("file size 16384 MiB"));
        let asked = [("memory_mb".to_owned(), 1024), ("cpu_s".to_owned(), 5), ("open_files".to_owned(), 64)];
        let job = Limits { cpu_s: 0, ..l.clone() }.lowered(&asked);
        assert_eq!((job.memory_mb, job.cpu_s, job.open_files), (256, 5, 64), "never above the node's");
    }
}
