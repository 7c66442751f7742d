//! Transparent checkpointing needs a working CRIU. The daemon looks once, at
//! start: `criu check` run with a deadline. What it finds is advertised as the
//! resource attribute `criu=yes|no` (so a job can require `criu=yes`) and said
//! in the start-up log in words. p2pmp does not checkpoint programs through
//! CRIU yet: programs use the checkpoint API (`p2pmp.h`); this is the probe the
//! transparent path will need, and it says plainly where it would not work
//! (Debian 12's criu 3.17 fails `criu check` on this project's test kernel).

use std::fmt;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// What `criu check` said on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Criu {
    /// Installed, and `criu check` passes.
    Works,
    /// No `criu` program on the PATH.
    Missing,
    /// Installed, but `criu check` fails (why, in its words).
    Broken(String),
}

/// How long `criu check` may take.
const CHECK_DEADLINE: Duration = Duration::from_secs(10);

impl Criu {
    /// This host's CRIU, probed once per process.
    pub fn probe() -> &'static Criu {
        static FOUND: OnceLock<Criu> = OnceLock::new();
        FOUND.get_or_init(|| {
            let mut cmd = Command::new("criu");
            cmd.arg("check");
            Self::check(cmd)
        })
    }

    /// Runs `cmd` (a `criu check`) and reads its verdict.
    fn check(mut cmd: Command) -> Criu {
        let child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Criu::Missing,
            Err(e) => return Criu::Broken(format!("cannot run criu: {e}")),
        };
        let deadline = Instant::now() + CHECK_DEADLINE;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Criu::Broken(format!("`criu check` did not finish in {} s", CHECK_DEADLINE.as_secs()));
                }
                Err(e) => return Criu::Broken(e.to_string()),
            }
        };
        if status.success() {
            return Criu::Works;
        }
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read;
            let _ = e.by_ref().take(4096).read_to_string(&mut err);
        }
        let first = err.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("no message").to_owned();
        Criu::Broken(format!("`criu check` failed ({status}): {first}"))
    }

    /// The resource attribute's value: `yes` or `no`.
    pub fn attribute(&self) -> &'static str {
        match self {
            Criu::Works => "yes",
            Criu::Missing | Criu::Broken(_) => "no",
        }
    }
}

impl fmt::Display for Criu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Criu::Works => f.write_str("criu works (`criu check` passes)"),
            Criu::Missing => f.write_str(
                "criu is not installed: programs that do not call the checkpoint API (p2pmp.h) cannot be \
                 checkpointed or migrated on this node",
            ),
            Criu::Broken(why) => write!(
                f,
                "criu is installed but unusable here ({why}): programs that do not call the checkpoint API \
                 (p2pmp.h) cannot be checkpointed or migrated on this node"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_a_failing_and_a_working_check_are_told_apart() {
        assert_eq!(Criu::check(Command::new("/nonexistent/criu")), Criu::Missing);
        let mut fails = Command::new("sh");
        fails.args(["-c", "echo 'Error (criu/cr-check.c:1): kernel too old' >&2; exit 1"]);
        let broken = Criu::check(fails);
        assert!(matches!(&broken, Criu::Broken(why) if why.contains("kernel too old")), "{broken:?}");
        assert_eq!(broken.attribute(), "no");
        assert!(broken.to_string().contains("unusable here"));
        assert_eq!(Criu::check(Command::new("true")), Criu::Works);
        assert_eq!(Criu::Works.attribute(), "yes");
        assert!(Criu::Missing.to_string().contains("not installed"));
    }
}
