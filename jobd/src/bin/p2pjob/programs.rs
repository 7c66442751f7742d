//! The demo's programs: the Rust examples (`mpi_ring` of p2pmp-mpi, `factor` of
//! this crate) next to this binary, and the C versions of both (tests/c, built
//! with `p2pmpicc` against libp2pmpi) when a C compiler is present. What is
//! missing is built with cargo first.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, anyhow, bail};

const RING_C: &str = include_str!("../../../../tests/c/ring.c");
const FACTOR_C: &str = include_str!("../../../../tests/c/factor.c");

/// The bundled programs.
pub(crate) struct Programs {
    pub(crate) ring: PathBuf,
    pub(crate) factor: PathBuf,
    /// The C ring and factor, or why there are none.
    pub(crate) c: Result<(PathBuf, PathBuf), String>,
}

/// `cargo build [--release] ARGS` of this workspace, announced on stderr.
fn cargo_build(args: &[&str], release: bool) -> anyhow::Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let profile = if release { " --release" } else { "" };
    eprintln!(
        "building {} (cargo build{profile}) ...",
        args.iter().filter(|a| !a.starts_with('-')).cloned().collect::<Vec<_>>().join(" ")
    );
    let mut cmd = Command::new(cargo);
    cmd.arg("build").arg("--manifest-path").arg(&manifest).args(args);
    if release {
        cmd.arg("--release");
    }
    let st = cmd.status().context("running cargo")?;
    if !st.success() {
        bail!("cargo build {} failed", args.join(" "));
    }
    Ok(())
}

/// Finds (building when missing) the programs; C ones are compiled into `out`.
pub(crate) fn find(out: &Path) -> anyhow::Result<Programs> {
    let exe = std::env::current_exe()?;
    let bin_dir = exe.parent().ok_or_else(|| anyhow!("no directory for {}", exe.display()))?;
    let release = exe.components().any(|c| c.as_os_str() == "release");
    let examples = bin_dir.join("examples");
    let (ring, factor) = (examples.join("mpi_ring"), examples.join("factor"));
    if !ring.is_file() || !factor.is_file() {
        let args = ["-p", "p2pmp-mpi", "-p", "p2pmp-jobd", "--example", "mpi_ring", "--example", "factor"];
        cargo_build(&args, release)?;
        if !ring.is_file() || !factor.is_file() {
            bail!("could not build the example programs into {}", examples.display());
        }
    }
    let c = c_programs(bin_dir, out, release);
    Ok(Programs { ring, factor, c })
}

/// The C ring and factor built with `p2pmpicc` into `out`, or why not.
fn c_programs(bin_dir: &Path, out: &Path, release: bool) -> Result<(PathBuf, PathBuf), String> {
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let found = Command::new(&cc).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    if !found.is_ok_and(|s| s.success()) {
        return Err(format!("no C compiler ({} --version failed)", cc.to_string_lossy()));
    }
    let wrapper = bin_dir.join("p2pmpicc");
    if !wrapper.is_file() || !bin_dir.join("libp2pmpi.so").is_file() {
        cargo_build(&["-p", "p2pmp-capi"], release).map_err(|e| format!("{e:#}"))?;
    }
    std::fs::create_dir_all(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let build = |name: &str, src: &str| -> Result<PathBuf, String> {
        let (source, program) = (out.join(format!("{name}.c")), out.join(format!("c_{name}")));
        std::fs::write(&source, src).map_err(|e| format!("writing {}: {e}", source.display()))?;
        match Command::new(&wrapper).arg("-O2").arg(&source).arg("-o").arg(&program).status() {
            Ok(s) if s.success() => Ok(program),
            Ok(s) => Err(format!("p2pmpicc {name}.c failed ({s})")),
            Err(e) => Err(format!("running {}: {e}", wrapper.display())),
        }
    };
    Ok((build("ring", RING_C)?, build("factor", FACTOR_C)?))
}
