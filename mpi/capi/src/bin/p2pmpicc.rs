//! `p2pmpicc`: compiles and links C programs against libp2pmpi, like `mpicc`.
//!
//! `p2pmpicc ring.c -o ring` runs `$CC ring.c -o ring -I<include> -L<lib>
//! -lp2pmpi -Wl,-rpath,<lib>` (no link flags with `-c`, `-E`, `-S` or `-M`).
//! `-show` prints the command instead; `--help` explains. The compiler is
//! `$P2PMPI_CC`, else `$CC`, else `cc`; the header directory `$P2PMPI_INCLUDE`,
//! else `include/` beside this program, else the source tree's `mpi/include`;
//! the library directory `$P2PMPI_LIBDIR`, else this program's directory (where
//! cargo puts `libp2pmpi.so`).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const HELP: &str = "\
p2pmpicc: the C compiler wrapper of p2pmp's MPI library (libp2pmpi)

usage: p2pmpicc [-show] COMPILER-ARGS...
  e.g. p2pmpicc -O2 ring.c -o ring, then: p2pjob run --local 4 -n 4 ./ring

Adds -I<dir of mpi.h> and, when linking, -L<lib dir> -lp2pmpi -Wl,-rpath,<lib dir>.
  -show       print the compiler command instead of running it
  --help      this text
environment: P2PMPI_CC or CC (compiler, default cc), P2PMPI_INCLUDE, P2PMPI_LIBDIR";

/// The header and library directories.
struct Dirs {
    include: PathBuf,
    lib: PathBuf,
}

fn dirs() -> Result<Dirs, String> {
    let exe_dir = std::env::current_exe()
        .map_err(|e| format!("cannot locate p2pmpicc itself: {e}"))?
        .parent()
        .map(Path::to_path_buf)
        .ok_or("p2pmpicc has no parent directory")?;
    let include = std::env::var_os("P2PMPI_INCLUDE").map(PathBuf::from).unwrap_or_else(|| {
        let beside = exe_dir.join("include");
        if beside.join("mpi.h").is_file() { beside } else { Path::new(env!("CARGO_MANIFEST_DIR")).join("../include") }
    });
    let lib = std::env::var_os("P2PMPI_LIBDIR").map_or(exe_dir, PathBuf::from);
    if !include.join("mpi.h").is_file() {
        return Err(format!("no mpi.h in {} (set P2PMPI_INCLUDE)", include.display()));
    }
    Ok(Dirs { include, lib })
}

/// Whether the arguments only compile or preprocess (nothing to link).
fn compile_only(args: &[OsString]) -> bool {
    args.iter().any(|a| matches!(a.to_str(), Some("-c" | "-E" | "-S" | "-M" | "-MM")))
}

/// The compiler command for `args`.
fn command(args: Vec<OsString>, d: &Dirs) -> Result<Command, String> {
    let cc = std::env::var_os("P2PMPI_CC").or_else(|| std::env::var_os("CC")).unwrap_or_else(|| "cc".into());
    let mut cmd = Command::new(cc);
    let link = !compile_only(&args);
    cmd.arg(format!("-I{}", d.include.display())).args(args);
    if link {
        if !d.lib.join("libp2pmpi.so").is_file() && !d.lib.join("libp2pmpi.a").is_file() {
            return Err(format!(
                "no libp2pmpi in {} (build it: cargo build -p p2pmp-capi; or set P2PMPI_LIBDIR)",
                d.lib.display()
            ));
        }
        let lib = d.lib.display();
        cmd.args([format!("-L{lib}"), "-lp2pmpi".into(), format!("-Wl,-rpath,{lib}")]);
    }
    Ok(cmd)
}

fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args.is_empty() || args.iter().any(|a| a == "--help" || a == "-help") {
        println!("{HELP}");
        return if args.is_empty() { ExitCode::from(2) } else { ExitCode::SUCCESS };
    }
    let show = args.iter().any(|a| a == "-show" || a == "--show");
    args.retain(|a| a != "-show" && a != "--show");
    let cmd = dirs().and_then(|d| command(args, &d));
    let mut cmd = match cmd {
        Ok(c) => c,
        Err(e) => {
            eprintln!("p2pmpicc: {e}");
            return ExitCode::from(2);
        }
    };
    if show {
        let words: Vec<String> = std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|w| w.to_string_lossy().into_owned())
            .collect();
        println!("{}", words.join(" "));
        return ExitCode::SUCCESS;
    }
    let err = cmd.exec();
    eprintln!("p2pmpicc: cannot run {}: {err}", cmd.get_program().to_string_lossy());
    ExitCode::from(127)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_flags_follow_the_arguments_unless_only_compiling() {
        let tmp = std::env::temp_dir().join(format!("p2pmpicc-test-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::write(tmp.join("libp2pmpi.so"), b"").unwrap();
        let d = Dirs { include: PathBuf::from("/inc"), lib: tmp.clone() };
        let words = |args: &[&str]| -> Vec<String> {
            let c = command(args.iter().map(OsString::from).collect(), &d).unwrap();
            c.get_args().map(|a| a.to_string_lossy().into_owned()).collect()
        };
        let lib = tmp.display();
        assert_eq!(
            words(&["ring.c", "-o", "ring"]),
            ["-I/inc", "ring.c", "-o", "ring", &format!("-L{lib}"), "-lp2pmpi", &format!("-Wl,-rpath,{lib}")]
        );
        assert_eq!(words(&["-c", "ring.c"]), ["-I/inc", "-c", "ring.c"]);
        std::fs::remove_dir_all(&tmp).unwrap();
        let missing = Dirs { include: PathBuf::from("/inc"), lib: tmp };
        assert!(command(vec!["x.c".into()], &missing).unwrap_err().contains("no libp2pmpi"));
    }
}
