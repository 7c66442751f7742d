//! The C test programs of `tests/c/`, compiled with `p2pmpicc` (the system C
//! compiler over libp2pmpi) for the tests that run them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The checkpointing C ring (`tests/c/ckpt.c`), built once per test binary
/// into `target/<profile>/<into>`: its path, or `None` without a C compiler
/// (said on stderr, see [`build`]).
pub fn ckpt_ring(into: &str) -> Option<String> {
    static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    built_once(&DIR, into, "ckpt")
}

/// The factoring program with a safe point every round
/// (`tests/c/factor_ckpt.c`), as [`ckpt_ring`].
pub fn ckpt_factor(into: &str) -> Option<String> {
    static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    built_once(&DIR, into, "factor_ckpt")
}

/// Program `name`, built into `dir` on the first call.
fn built_once(dir: &std::sync::OnceLock<Option<PathBuf>>, into: &str, name: &str) -> Option<String> {
    let dir = dir.get_or_init(|| build(into, &[name])).as_ref()?;
    Some(dir.join(name).to_string_lossy().into_owned())
}

/// Builds libp2pmpi and `p2pmpicc` (in the test binary's profile), then
/// compiles each of `programs` (`tests/c/NAME.c`) into `target/<profile>/<into>/NAME`
/// with warnings as errors: that directory, or `None` without a C compiler
/// (`$CC`, else `cc`), said on stderr so the caller can skip.
///
/// # Panics
/// If a build or a compilation fails.
pub fn build(into: &str, programs: &[&str]) -> Option<PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if Command::new(&cc).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
        eprintln!("no C compiler ({cc}): the tests of C programs are skipped");
        return None;
    }
    let dir = crate::cargo_build(&[]);
    let out = dir.join(into);
    std::fs::create_dir_all(&out).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("c");
    for p in programs {
        let st = Command::new(dir.join("p2pmpicc"))
            .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-O1"])
            .arg(src.join(format!("{p}.c")))
            .arg("-o")
            .arg(out.join(p))
            .status()
            .expect("running p2pmpicc");
        assert!(st.success(), "p2pmpicc {p}.c failed");
    }
    Some(out)
}
