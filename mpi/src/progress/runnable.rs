//! How many tasks the machine has ready to run right now: the scheduler's
//! own count, the fourth field of `/proc/loadavg` (`running/total`), which is
//! the instantaneous figure behind the load averages. More of them than the
//! machine has CPUs online means other work competes for the core a polling
//! rank would burn. (The count is the whole machine's, so it is held against
//! every CPU online, not against the CPUs this process may use: a job kept to
//! a few CPUs of a big machine must not take the others' work for its own.)

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// How often a waiting rank looks (one `pread` of a short line).
const EVERY: Duration = Duration::from_millis(5);

/// The machine's count of runnable tasks, read now and then.
#[derive(Debug)]
pub(super) struct Runnable {
    /// `/proc/loadavg`, kept open (`None` where there is none).
    file: Option<File>,
    /// When the next look is due.
    next: Option<Instant>,
    /// The machine's CPUs online.
    cpus: u32,
}

impl Runnable {
    pub(super) fn open() -> Self {
        // SAFETY: sysconf(3) only reads a system setting.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        let cpus = u32::try_from(online).ok().filter(|&n| n > 0).unwrap_or(1);
        Runnable { file: File::open("/proc/loadavg").ok(), next: None, cpus }
    }

    /// Whether `n` runnable tasks are more than the machine's CPUs.
    pub(super) fn crowded(&self, n: u32) -> bool {
        n > self.cpus
    }

    /// The count at `now`, if a look is due (at most every [`EVERY`]) and
    /// the count can be read.
    pub(super) fn sample(&mut self, now: Instant) -> Option<u32> {
        if self.next.is_some_and(|t| now < t) {
            return None;
        }
        self.next = Some(now + EVERY);
        let mut line = [0u8; 128];
        let n = self.file.as_ref()?.read_at(&mut line, 0).ok()?;
        parse(&line[..n])
    }
}

/// The running count of a `/proc/loadavg` line (`0.52 0.58 0.59 3/467 8871`).
fn parse(line: &[u8]) -> Option<u32> {
    let field = std::str::from_utf8(line).ok()?.split_ascii_whitespace().nth(3)?;
    field.split_once('/')?.0.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_count_is_the_fourth_fields_numerator() {
        assert_eq!(parse(b"0.52 0.58 0.59 3/467 8871\n"), Some(3));
        assert_eq!(parse(b"12.00 9.10 4.00 17/2048 1\n"), Some(17));
        for bad in [&b""[..], b"0.52 0.58 0.59", b"0.52 0.58 0.59 x/467 1", b"0.52 0.58 0.59 3 1", b"\xff\xfe"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn looks_at_most_every_few_milliseconds() {
        let mut r = Runnable::open();
        let t = Instant::now();
        let first = r.sample(t);
        if cfg!(target_os = "linux") {
            assert!(first.is_some_and(|n| n >= 1), "this test's own thread runs: {first:?}");
        }
        assert_eq!(r.sample(t + EVERY / 2), None, "not due yet");
        assert!(!r.crowded(r.cpus) && r.crowded(r.cpus + 1), "crowded above the CPUs online");
        if cfg!(target_os = "linux") {
            assert!(r.sample(t + EVERY).is_some(), "due again");
        }
    }
}
