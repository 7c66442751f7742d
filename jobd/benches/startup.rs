//! Job start-up: time from submit to every rank running, and to results back,
//! for 1, 2, 4 and 8 ranks of a trivial MPI program (init, barrier, finalize) on
//! an embedded network of 8 daemons, beside `mpirun.mpich -n N` and
//! `mpirun.openmpi -n N` of the same program in C (built with their `mpicc`).
//! p2pmp is measured twice: cold (a program no node has seen: each run stages a
//! fresh copy, made unique by a trailing nonce, to every node) and warm (the
//! same program again: the nodes' file caches hold it, only the job file
//! travels). Medians of 5 runs. A table for people, then one JSON line for
//! scripts; a missing or timed-out reference is null, with the reason in the table.
//!
//! Then 8 ranks spread over 4 hosts of a namespace cluster (as root; skipped
//! with the reason otherwise), cold and warm.
//!
//! Run: `cargo bench -p p2pmp-jobd --bench startup`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use p2pmp_core::job::JobDescription;
use p2pmp_core::node::control::{JobPhase, ToolReply, ToolRequest};
use p2pmp_jobd::Client;
use p2pmp_jobd::embedded::EmbeddedNet;

const RUNS: usize = 5;
const SIZES: [u32; 4] = [1, 2, 4, 8];
const HELLO_C: &str = "#include <mpi.h>\n#include <stdio.h>\nint main(int c, char **v) { int r, s; MPI_Init(&c, &v);\n\
MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &s); MPI_Barrier(MPI_COMM_WORLD);\n\
if (r == 0) printf(\"hello %d\\n\", s); MPI_Finalize(); return 0; }\n";

/// A reference MPI: name, its mpirun, extra mpirun flags, the built program.
type Reference = (&'static str, &'static str, Vec<&'static str>, Result<PathBuf, String>);

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn hello_p2pmp() -> PathBuf {
    let exe = std::env::current_exe().expect("bench path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps").to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-q", "-p", "p2pmp-jobd", "--example", "mpi_hello"]);
    if profile_dir.ends_with("release") {
        cmd.arg("--release");
    }
    assert!(cmd.status().expect("cargo").success(), "building mpi_hello failed");
    profile_dir.join("examples/mpi_hello")
}

/// One p2pmp run: (ms to all running, ms to results back).
fn p2pmp_once(net: &EmbeddedNet, prog: &Path, n: u32, dir: &Path) -> Result<(f64, f64), String> {
    let mut c = Client::connect(net.control()).map_err(|e| e.to_string())?;
    let xml = JobDescription::run(prog.to_string_lossy(), Vec::new(), n).to_xml();
    let nonce = Instant::now().elapsed().as_nanos() as u64 ^ rand_nonce();
    let t0 = Instant::now();
    let id = c
        .send(ToolRequest::Submit { nonce, xml, base_dir: dir.to_string_lossy().into(), watch: true })
        .map_err(|e| e.to_string())?;
    let (mut started, mut running) = (0, None);
    loop {
        let (rid, reply, _) = c.next(Some(Duration::from_secs(60))).map_err(|e| format!("{e:#}"))?;
        if rid != id {
            continue;
        }
        match reply {
            ToolReply::Started { .. } => {
                started += 1;
                if started == n {
                    running = Some(t0.elapsed().as_secs_f64() * 1000.0);
                }
            }
            ToolReply::Error { message } => return Err(message),
            ToolReply::Finished { phase: JobPhase::Done, .. } => {
                return Ok((running.unwrap_or(f64::NAN), t0.elapsed().as_secs_f64() * 1000.0));
            }
            ToolReply::Finished { error, .. } => return Err(error.unwrap_or_default()),
            _ => {}
        }
    }
}

fn rand_nonce() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// Compiles the C program with `mpicc`, or says why not.
fn build_c(mpicc: &str, out: &Path) -> Result<(), String> {
    let src = out.with_extension("c");
    std::fs::write(&src, HELLO_C).map_err(|e| e.to_string())?;
    let st = Command::new(mpicc).arg("-O2").arg("-o").arg(out).arg(&src).stderr(Stdio::null()).status();
    match st {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("{mpicc} failed ({s})")),
        Err(e) => Err(format!("{mpicc}: {e}")),
    }
}

/// One mpirun: ms until it exits (timeout 60 s).
fn mpirun_once(mpirun: &str, pre: &[&str], n: u32, prog: &Path) -> Result<f64, String> {
    let t0 = Instant::now();
    let mut child = Command::new(mpirun)
        .args(pre)
        .arg("-n")
        .arg(n.to_string())
        .arg(prog)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{mpirun}: {e}"))?;
    let deadline = t0 + Duration::from_secs(60);
    loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            return if st.success() { Ok(t0.elapsed().as_secs_f64() * 1000.0) } else { Err(format!("exit {st}")) };
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err("timeout (60 s)".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A copy of `prog` no node has seen: the same program with a unique trailing
/// nonce (ELF ignores bytes past its sections), so its digest is new.
fn fresh_copy(prog: &Path, dir: &Path, nonce: usize) -> PathBuf {
    let mut bytes = std::fs::read(prog).expect("read the program");
    bytes.extend_from_slice(format!("p2pmp-startup-nonce-{nonce}-{}", rand_nonce()).as_bytes());
    let path = dir.join(format!("mpi_hello_cold_{nonce}"));
    std::fs::write(&path, bytes).expect("write a fresh copy");
    let mut perm = std::fs::metadata(&path).expect("metadata").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&path, perm).expect("chmod");
    path
}

/// Medians of `RUNS` p2pmp runs, each with the program `prog(i)` gives; `None`
/// (the reason on stderr) unless every run succeeded.
fn p2pmp_median(net: &EmbeddedNet, n: u32, dir: &Path, prog: impl Fn(usize) -> PathBuf) -> (Option<f64>, Option<f64>) {
    let runs: Vec<Result<(f64, f64), String>> = (0..RUNS).map(|i| p2pmp_once(net, &prog(i), n, dir)).collect();
    let ok: Vec<(f64, f64)> = runs.iter().filter_map(|r| r.as_ref().ok().copied()).collect();
    if ok.len() == RUNS {
        (Some(median(ok.iter().map(|r| r.0).collect())), Some(median(ok.iter().map(|r| r.1).collect())))
    } else {
        let why = runs.iter().find_map(|r| r.as_ref().err().cloned()).unwrap_or_default();
        eprintln!("p2pmp -n {n}: {why}");
        (None, None)
    }
}

fn main() {
    let dir = std::env::temp_dir().join(format!("p2pmp-startup-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let hello = hello_p2pmp();
    let net = EmbeddedNet::start(8, 2).expect("8 local daemons");
    assert!(net.wait_formed(Duration::from_secs(30), |_| {}), "the overlay did not form");
    let refs: Vec<Reference> = vec![
        (
            "mpich",
            "mpirun.mpich",
            vec![],
            build_c("mpicc.mpich", &dir.join("hello_mpich")).map(|()| dir.join("hello_mpich")),
        ),
        (
            "openmpi",
            "mpirun.openmpi",
            vec!["--allow-run-as-root", "--oversubscribe"],
            build_c("mpicc.openmpi", &dir.join("hello_ompi")).map(|()| dir.join("hello_ompi")),
        ),
    ];
    let mb = std::fs::metadata(&hello).map_or(0.0, |m| m.len() as f64 / 1e6);
    println!("program: {} ({mb:.1} MB, staged to every node that runs a rank)", hello.display());
    let mut json = Vec::new();
    println!(
        "{:>5}  {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "ranks", "cold run ms", "cold done ms", "warm run ms", "warm done ms", "mpich ms", "openmpi ms"
    );
    for n in SIZES {
        let (cold_run, cold_done) = p2pmp_median(&net, n, &dir, |i| fresh_copy(&hello, &dir, n as usize * 100 + i));
        // Warm: the first run of this program fills the caches it reaches; then measure.
        let _ = p2pmp_once(&net, &hello, n, &dir);
        let (warm_run, warm_done) = p2pmp_median(&net, n, &dir, |_| hello.clone());
        let mut cells = Vec::new();
        let mut ref_ms = Vec::new();
        for (name, mpirun, pre, prog) in &refs {
            let r = match prog {
                Ok(p) => {
                    (0..RUNS).map(|_| mpirun_once(mpirun, pre, n, p)).collect::<Result<Vec<f64>, String>>().map(median)
                }
                Err(e) => Err(e.clone()),
            };
            match &r {
                Ok(ms) => cells.push(format!("{ms:.1}")),
                Err(e) => cells.push(format!("- ({e})")),
            }
            ref_ms.push((*name, r.ok()));
        }
        let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1}"));
        println!(
            "{n:>5}  {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}",
            f(cold_run),
            f(cold_done),
            f(warm_run),
            f(warm_done),
            cells[0],
            cells[1]
        );
        let j = |v: Option<f64>| v.map_or("null".into(), |v| format!("{v:.2}"));
        json.push(format!("\"p2pmp_tcp_startup_running_{n}_ms\": {}", j(cold_run)));
        json.push(format!("\"p2pmp_tcp_startup_results_{n}_ms\": {}", j(cold_done)));
        json.push(format!("\"p2pmp_tcp_startup_warm_running_{n}_ms\": {}", j(warm_run)));
        json.push(format!("\"p2pmp_tcp_startup_warm_results_{n}_ms\": {}", j(warm_done)));
        for (name, v) in ref_ms {
            json.push(format!("\"{name}_default_startup_{n}_ms\": {}", j(v)));
        }
    }
    drop(net);
    let j = |v: Option<f64>| v.map_or("null".into(), |v| format!("{v:.2}"));
    match hosts_row(&hello, &dir) {
        Ok([cold_run, cold_done, warm_run, warm_done]) => {
            println!(
                "8 ranks over 4 hosts (namespaces, 2 slots each): cold {cold_run:.1} / {cold_done:.1} ms, \
                 warm {warm_run:.1} / {warm_done:.1} ms (all running / results back)"
            );
            for (k, v) in
                [("running", cold_run), ("results", cold_done), ("warm_running", warm_run), ("warm_results", warm_done)]
            {
                json.push(format!("\"p2pmp_tcp_startup_{k}_8_on_4_hosts_ms\": {}", j(Some(v))));
            }
        }
        Err(why) => {
            println!("8 ranks over 4 hosts: - ({why})");
            for k in ["running", "results", "warm_running", "warm_results"] {
                json.push(format!("\"p2pmp_tcp_startup_{k}_8_on_4_hosts_ms\": null"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("{{{}}}", json.join(", "));
}

/// 8 ranks spread over 4 hosts of a namespace cluster (a jobd on each, 2 slots):
/// medians of cold and warm runs, ms to all running and to results back, as
/// `p2pjob --json run` on host 0 reports them.
fn hosts_row(hello: &Path, dir: &Path) -> Result<[f64; 4], String> {
    use p2pmp_tests::cluster::{Cluster, unavailable};
    if let Some(why) = unavailable() {
        return Err(format!("skipped: {why}"));
    }
    p2pmp_tests::cargo_build(&[]);
    let mut c = Cluster::new(4, "startup-bench");
    c.start_all(&["--slots", "2", "--stabilize-ms", "200", "--log-level", "warn"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.p2pjob(0, &["nodes"], Duration::from_secs(20)).stdout.lines().filter(|l| l.starts_with("198.18.")).count()
        < 4
    {
        if Instant::now() > deadline {
            return Err("the 4 hosts' overlay did not form".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let once = |prog: &Path| -> Result<(f64, f64), String> {
        let out = c.p2pjob(0, &["--json", "run", "-n", "8", &prog.to_string_lossy()], Duration::from_secs(60));
        let last = out.stdout.lines().last().unwrap_or_default().to_owned();
        let v: serde_json::Value = serde_json::from_str(&last).map_err(|e| format!("{e}: {last:?} {}", out.stderr))?;
        match (v["phase"].as_str(), v["all_running_ms"].as_f64(), v["total_ms"].as_f64()) {
            (Some("done"), Some(run), Some(total)) => Ok((run, total)),
            _ => Err(format!("run failed: {last}")),
        }
    };
    let medians = |runs: Vec<(f64, f64)>| {
        (median(runs.iter().map(|r| r.0).collect()), median(runs.iter().map(|r| r.1).collect()))
    };
    let cold: Vec<(f64, f64)> = (0..RUNS).map(|i| once(&fresh_copy(hello, dir, 900 + i))).collect::<Result<_, _>>()?;
    once(hello)?; // fills the hosts' caches
    let warm: Vec<(f64, f64)> = (0..RUNS).map(|_| once(hello)).collect::<Result<_, _>>()?;
    let ((a, b), (w, x)) = (medians(cold), medians(warm));
    Ok([a, b, w, x])
}
