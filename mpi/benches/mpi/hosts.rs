//! Ping-pong between two hosts: a two-host namespace cluster
//! (`p2pmp_tests::cluster`, a jobd on each, one slot each) runs the p2pmp
//! ping-pong (and its window of 64 sends) as a two-rank job, one rank per
//! host, encrypted as by default between hosts (`p2pmp`) and again with
//! encryption off (`p2pmp_plain`), and, beside them, a raw TCP ping-pong
//! between a process on each of the same two hosts, blocking (`raw_tcp`) and
//! busy-polling (`raw_tcp_spin`), and MPICH over TCP between them (hydra started
//! on host 0, its proxy on host 1 through a launcher that enters host 1's
//! namespace instead of ssh). The raw rows also take the window between the
//! same processes, plain and (`raw_aead`, `raw_aead_spin`) sealed as
//! p2pmp's ranks seal it (see `tcp_window.rs`). All but
//! MPICH take turns over three rounds and give their medians.

use std::time::{Duration, Instant};

use p2pmp_tests::cluster::{Cluster, unavailable};

use crate::{SIZES, iters, raw, run, size_label, tcp_window, window_floor};

/// One measured figure: (section, row, system, key, value).
pub(crate) type Figure = (&'static str, String, &'static str, String, Result<f64, String>);

/// Every figure of the two-host rows (with the reason where there is none).
/// `mpich`: the directory of the MPICH-built programs, if built.
pub(crate) fn pingpong(quick: bool, limit: Duration, mpich: Result<&std::path::Path, String>) -> Vec<Figure> {
    let got: Vec<(&'static str, Figures)> = match measure(quick, limit, mpich) {
        Ok(v) => v,
        Err(why) => {
            let all = |s| (s, SIZES.iter().map(|z| (*z, Err(why.clone()))).chain([(WIN, Err(why.clone()))]).collect());
            let window_only = |s| (s, vec![(WIN, Err(why.clone()))]);
            let mut v: Vec<_> = ["p2pmp", "p2pmp_plain", "raw_tcp", "raw_tcp_spin", "mpich_tcp"].map(all).into();
            v.extend(["raw_aead", "raw_aead_spin"].map(window_only));
            v
        }
    };
    let mut out = Vec::new();
    for (system, figures) in got {
        let (win, figures): (Figures, Figures) = figures.into_iter().partition(|f| f.0 == WIN);
        for (_, v) in win {
            out.push(("hosts_bw", "window 64 x 1 MiB".into(), system, "hosts_win_1mib_mbps".into(), v));
        }
        for (size, lat) in figures {
            let l = size_label(size);
            let row = format!("{size} B");
            out.push(("hosts_lat", row.clone(), system, format!("hosts_lat_{l}_us"), lat.clone()));
            out.push(("hosts_bw", row, system, format!("hosts_bw_{l}_mbps"), lat.map(|us| size as f64 / us)));
        }
    }
    out
}

type Figures = Vec<(usize, Result<f64, String>)>;

/// Rounds of the two-host rows (MPICH's runs in the first only: it takes
/// longest).
const ROUNDS: usize = 3;

/// Per size (and the window: the keys of the first round), the median of
/// the rounds that gave a figure, else the first reason.
fn median_of(rounds: &[Figures]) -> Figures {
    let keys: Vec<usize> = rounds.first().map(|r| r.iter().map(|f| f.0).collect()).unwrap_or_default();
    crate::median_by_key(rounds, keys)
}

/// The size under which a window figure travels among the ping-pong ones.
const WIN: usize = usize::MAX;

/// Per size, the `pp` figures of a run's lines (or why not), and its `win`.
fn figures_of(lines: &[String], why: &str) -> Figures {
    let v = run::values(lines, "pp");
    let win = run::values(lines, "win").first().and_then(|x| x.get(1).copied());
    SIZES
        .iter()
        .map(|&z| (z, v.iter().find(|x| x.len() >= 2 && x[0] as usize == z).map(|x| x[1])))
        .chain([(WIN, win)])
        .map(|(z, f)| (z, f.ok_or_else(|| why.to_string())))
        .collect()
}

fn measure(
    quick: bool,
    limit: Duration,
    mpich: Result<&std::path::Path, String>,
) -> Result<Vec<(&'static str, Figures)>, String> {
    if let Some(why) = unavailable() {
        return Err(format!("skipped: {why}"));
    }
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let c = start_cluster(2, "mpi-bench", &[])?;
    let me_s = me.to_string_lossy().into_owned();
    let p2pmp = |plain: bool| -> Figures {
        let mut args = vec!["run", "-n", "2", me_s.as_str(), "pingpong"];
        args.extend(quick.then_some("quick"));
        args.extend(plain.then_some("plain"));
        let started = Instant::now();
        let out = c.p2pjob(0, &args, limit);
        let lines: Vec<String> = out.stdout.lines().filter_map(|l| l.strip_prefix("[0] ").map(str::to_owned)).collect();
        let why = if out.ok { "failed: no figure".into() } else { format!("failed: {}", out.stderr.trim()) };
        let how = if plain { "unencrypted" } else { "encrypted" };
        let figures = figures_of(&lines, &why);
        let of = |k: usize| {
            figures.iter().find(|f| f.0 == k).and_then(|f| f.1.as_ref().ok()).map_or("-".into(), |v| crate::figure(*v))
        };
        eprintln!(
            "  hosts     p2pmp ping-pong over the bridge ({how}) took {:.1} s: 8 B {} us, window {} MB/s",
            started.elapsed().as_secs_f64(),
            of(8),
            of(WIN)
        );
        for stats in out.stdout.lines().filter(|l| l.contains("] stats rank ")) {
            eprintln!("  hosts       {stats}");
        }
        figures
    };
    let window =
        |spin: bool, aead: bool| (WIN, raw_window(&c, &me, (0, 1), (window_floor::rounds(quick), spin, aead), limit));
    // The busy-polling ping-pong with the quick counts, as on one host: it
    // collapses on a loaded machine.
    let raw = |spin: bool| -> Figures {
        let pp = SIZES.iter().map(|&z| (z, raw_hosts(&c, &me, (0, 1), z, iters(z, quick || spin), spin, limit)));
        pp.chain([window(spin, false)]).collect()
    };
    // Every system in turn, three rounds: on this machine the rows between
    // namespaces drift by 2x from one minute to the next.
    // MPICH's in the first round only (it takes longest).
    let mut mpich = Some(mpich);
    let mut rounds: Vec<[Figures; 6]> = Vec::new();
    let mut mpich_figures = Vec::new();
    for _ in 0..ROUNDS {
        let (encrypted, plain) = (p2pmp(false), p2pmp(true));
        let (raw, raw_spin) = (raw(false), raw(true));
        rounds.push([encrypted, plain, raw, raw_spin, vec![window(false, true)], vec![window(true, true)]]);
        mpich_figures = match mpich.take() {
            Some(Ok(dir)) => mpich_between(&c, dir, quick, limit),
            Some(Err(why)) => figures_of(&[], &why),
            None => continue,
        };
    }
    let [encrypted, plain, raw, raw_spin, aead, aead_spin] =
        std::array::from_fn(|i| median_of(&rounds.iter().map(|r| r[i].clone()).collect::<Vec<_>>()));
    let mpich = mpich_figures;
    Ok(vec![
        ("p2pmp", encrypted),
        ("p2pmp_plain", plain),
        ("raw_tcp", raw),
        ("raw_tcp_spin", raw_spin),
        ("raw_aead", aead),
        ("raw_aead_spin", aead_spin),
        ("mpich_tcp", mpich),
    ])
}

/// MPICH's ping-pong over TCP between hosts 0 and 1: hydra's `mpirun` on
/// host 0, its "ssh" a script entering the named host's namespace.
fn mpich_between(c: &Cluster, dir: &std::path::Path, quick: bool, limit: Duration) -> Figures {
    let (a, b) = (c.hosts[0].ip.to_string(), c.hosts[1].ip.to_string());
    let script = c.dir.join("hydra-launcher.sh");
    let body = format!(
        "#!/bin/sh\n# hydra's ssh: [-x] HOST COMMAND\nwhile [ \"${{1#-}}\" != \"$1\" ]; do shift; done\nhost=$1; shift\ncase $host in\n  {a}) ns={} ;;\n  {b}) ns={} ;;\n  *) echo \"unknown host $host\" >&2; exit 1 ;;\nesac\nexec nsenter --net=$ns -- sh -c \"$*\"\n",
        c.hosts[0].netns_path(),
        c.hosts[1].netns_path()
    );
    let made = std::fs::write(&script, body).and_then(|()| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
    });
    if let Err(e) = made {
        return figures_of(&[], &format!("failed: {e}"));
    }
    let mut cmd = c.hosts[0].command("mpirun.mpich");
    cmd.args(["-launcher", "ssh", "-launcher-exec"])
        .arg(&script)
        .args(["-localhost", &a, "-hosts", &format!("{a},{b}"), "-n", "2", "-ppn", "1"])
        .arg(dir.join("pingpong"))
        .args(if quick { &["quick"][..] } else { &[][..] })
        .env("UCX_TLS", "tcp")
        .env("UCX_NET_DEVICES", "eth0")
        .env("MPIR_CVAR_NOLOCAL", "1");
    match run::run_limited(cmd, limit) {
        Ok(lines) => figures_of(&lines, "failed: no figure"),
        Err(f) => figures_of(&f.partial, &f.why),
    }
}

/// A cluster of `n` hosts with a jobd and one slot on each (`extra` flags
/// beside), once the overlay lists them all (jobd built first).
pub(crate) fn start_cluster(n: usize, tag: &str, extra: &[&str]) -> Result<Cluster, String> {
    p2pmp_tests::cargo_build(&[]);
    let mut c = Cluster::new(n, tag);
    let flags: Vec<&str> = ["--slots", "1", "--stabilize-ms", "200", "--log-level", "warn"]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    c.start_all(&flags);
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.p2pjob(0, &["nodes"], Duration::from_secs(20)).stdout.lines().filter(|l| l.starts_with("198.18.")).count()
        < n
    {
        if Instant::now() > deadline {
            return Err("failed: the hosts' overlay did not form".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(c)
}

/// A raw ping-pong of `n` x 5 messages of `size` bytes, blocking or
/// busy-polling (`spin`): the timing process on host `a`, the echo on host
/// `b`; the median half round trip in µs.
pub(crate) fn raw_hosts(
    c: &Cluster,
    me: &std::path::Path,
    (a, b): (usize, usize),
    size: usize,
    n: usize,
    spin: bool,
    limit: Duration,
) -> Result<f64, String> {
    let at = std::net::SocketAddr::from((c.hosts[a].ip, 7500));
    let how = if spin { "spin" } else { "block" };
    let mut timer = c.hosts[a].command(me);
    timer.env(raw::CLIENT_VAR, format!("{at} {size} {n} {how}"));
    let mut echo = c.hosts[b].command(me);
    echo.env(raw::ECHO_VAR, format!("{at} {size} {} {how}", 5 * n));
    let lines = raw_pair(timer, echo, limit)?;
    run::values(&lines, "rawpp").first().and_then(|v| v.get(1).copied()).ok_or_else(|| "failed: no figure".into())
}

/// The raw window of `tcp_window.rs`, `windows` windows a repetition, plain
/// or sealed (`aead`), blocking or busy-polling (`spin`): the receiver on
/// host `b`, the timing sender on host `a`; the median MB/s.
pub(crate) fn raw_window(
    c: &Cluster,
    me: &std::path::Path,
    (a, b): (usize, usize),
    (windows, spin, aead): (u64, bool, bool),
    limit: Duration,
) -> Result<f64, String> {
    let at = std::net::SocketAddr::from((c.hosts[b].ip, 7501));
    let mut receiver = c.hosts[b].command(me);
    receiver.env(tcp_window::RECV_VAR, tcp_window::spec(at, tcp_window::REPS * windows, spin, aead));
    let mut sender = c.hosts[a].command(me);
    sender.env(tcp_window::SEND_VAR, tcp_window::spec(at, windows, spin, aead));
    let lines = raw_pair(receiver, sender, limit)?;
    run::values(&lines, "rawwin").first().and_then(|v| v.first().copied()).ok_or_else(|| "failed: no figure".into())
}

/// Runs a raw row's two sides, each killed past `limit`: `listener`
/// (started first) and `caller` (which tries to connect for a few seconds).
/// The lines both printed, or both outcomes when either failed (a caller
/// that failed leaves the listener in `accept` until its limit).
fn raw_pair(
    listener: std::process::Command,
    caller: std::process::Command,
    limit: Duration,
) -> Result<Vec<String>, String> {
    let listening = std::thread::spawn(move || run::run_limited(listener, limit));
    let called = run::run_limited(caller, limit);
    let listened =
        listening.join().unwrap_or_else(|_| Err(run::Failed { why: "panicked".into(), partial: Vec::new() }));
    match (listened, called) {
        (Ok(l), Ok(c)) => Ok([l, c].concat()),
        (l, c) => {
            let outcome = |r: &run::RunResult| r.as_ref().err().map_or_else(|| "ok".to_string(), |f| f.why.clone());
            Err(format!("failed: listener {}; caller {}", outcome(&l), outcome(&c)))
        }
    }
}
