//! A real `jobd` under a flood from many connections, measured from outside:
//! its resident set (VmRSS of /proc/PID/status), what the flooders saw, and
//! the time of a normal job submitted during the flood against the same job
//! without it. Shared by the flood bench (60 s) and the flood test (a few s).
//!
//! The flooded daemon is not alone: an honest second daemon (its peer, on
//! 127.0.0.1) joins it first, and the normal job has one rank on each, so the
//! job also measures that the flood does not disturb an honest peer.
//!
//! `FLOOD_JOBD_CONFIG=FILE` starts both daemons with that configuration file
//! (e.g. a `[peers]` table that turns the limits off, to compare).
//!
//! Every flooding connection binds its own loopback source address
//! (127.66.x.y), as if from its own host: a ban hits the offender, not the
//! others. Roles, by connection number modulo 5:
//! - `junk`: random bytes, reconnecting when cut off;
//! - `oversize`: a length prefix of 2 GiB, or a valid hello then 16 MiB + 1;
//! - `valid`: a valid hello, then valid Chord pings as fast as the socket
//!   takes them, never reading the replies;
//! - `half_open`: 16 connections at a time that send half a length prefix and
//!   then nothing;
//! - `churn`: connect and drop, as fast as possible (thousands).
//!
//! The daemons' links are Noise channels (see `jobd/README.md`): the flooders
//! do not handshake, so every role but churn is plaintext a daemon refuses at
//! its first bytes; `valid` is then what a peer without a key can do. A flood of
//! authenticated frames (a flooder that completes the handshake) is not in
//! this harness; the driver's unit tests cover the frame and reply budgets.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use p2pmp_core::chord::ChordMsg;
use p2pmp_core::job::JobDescription;
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::node::NodeMsg;
use p2pmp_core::node::control::{JobPhase, ToolReply, ToolRequest};
use p2pmp_core::overlay::OverlayKind;
use p2pmp_core::wire::{Envelope, Hello, encode_frame};
use p2pmp_jobd::Client;

/// What to run.
#[derive(Debug, Clone)]
pub(crate) struct Opts {
    /// How long the flood lasts.
    pub(crate) flood: Duration,
    /// Flooding connections (threads), at least 5 (one per role).
    pub(crate) conns: usize,
}

pub(crate) const ROLES: [&str; 5] = ["junk", "oversize", "valid", "half_open", "churn"];

/// What the flooders of one role saw.
#[derive(Debug, Default)]
pub(crate) struct RoleCount {
    /// Connections tried.
    pub(crate) tried: AtomicU64,
    /// Taken: the daemon sent its hello.
    pub(crate) accepted: AtomicU64,
    /// Closed by the daemon before it said anything (refused).
    pub(crate) refused: AtomicU64,
    /// Connects that failed outright.
    pub(crate) failed: AtomicU64,
    /// Bytes the flooders wrote.
    pub(crate) bytes: AtomicU64,
}

/// The measurements of one run.
#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) opts: Opts,
    pub(crate) rss_before_kib: u64,
    pub(crate) rss_peak_kib: u64,
    pub(crate) rss_after_kib: u64,
    /// (ms since the flood began, KiB), every 100 ms.
    pub(crate) rss_samples: Vec<(u64, u64)>,
    pub(crate) job_alone: Duration,
    /// `None`: the job did not complete (with why).
    pub(crate) job_flooded: Result<Duration, String>,
    pub(crate) roles: Vec<(&'static str, RoleCount)>,
    /// The daemon answered its control socket after the flood.
    pub(crate) alive_after: bool,
    /// The nodes the flooded daemon knew after the flood (2: its honest peer too).
    pub(crate) nodes_after: usize,
    /// Lines of the daemon's log: cut-offs that started a ban (warn), and
    /// refusals it logged (once per ban).
    pub(crate) log_bans: usize,
    pub(crate) log_refusals: usize,
    /// The daemon's own count at its stop: `accepted refused cut_off`.
    pub(crate) daemon_counts: Option<(u64, u64, u64)>,
    pub(crate) log: PathBuf,
}

/// `target/` of the running bench or test.
pub(crate) fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("own path");
    exe.ancestors().nth(3).expect("target/<profile>/deps/<exe>").to_path_buf()
}

/// VmRSS of `pid` in KiB (0 once it is gone).
pub(crate) fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

struct Jobd {
    child: Child,
    control: SocketAddr,
    overlay: SocketAddr,
    dir: PathBuf,
}

impl Drop for Jobd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A jobd with one slot, joining `bootstrap` if given.
fn start_jobd(log: &Path, name: &str, bootstrap: Option<SocketAddr>) -> Jobd {
    let dir = std::env::temp_dir().join(format!("p2pmp-flood-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("work dir");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_jobd"));
    if let Some(b) = bootstrap {
        cmd.arg("--bootstrap").arg(b.to_string());
    }
    // Other limits for a comparison (e.g. all off), for both daemons.
    if let Some(config) = std::env::var_os("FLOOD_JOBD_CONFIG") {
        cmd.arg("--config").arg(config);
    }
    let mut child = cmd
        .args(["--listen", "127.0.0.1:0", "--control", "127.0.0.1:0", "--print-addr", "--slots", "1"])
        .args(["--stabilize-ms", "200", "--log-level", "info", "--work-dir"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).expect("log file"))
        .spawn()
        .expect("starting jobd");
    let mut out = child.stdout.take().expect("piped");
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while out.read(&mut b).unwrap_or(0) == 1 && b[0] != b'\n' {
        line.push(b[0]);
    }
    let line = String::from_utf8_lossy(&line).into_owned();
    let words: Vec<&str> = line.split_whitespace().collect();
    let (Some(control), Some(overlay)) = (words.get(1), words.get(3)) else {
        panic!("jobd printed {line:?}; its log: {}", std::fs::read_to_string(log).unwrap_or_default())
    };
    Jobd { child, control: control.parse().expect("control"), overlay: overlay.parse().expect("overlay"), dir }
}

/// The nodes `control`'s daemon knows (0 if it does not answer).
fn nodes(control: SocketAddr) -> usize {
    let ask = || -> anyhow::Result<usize> {
        let mut c = Client::connect(control)?;
        let id = c.send(ToolRequest::Nodes)?;
        loop {
            if let (rid, ToolReply::Nodes { nodes }, _) = c.next(Some(Duration::from_secs(10)))?
                && rid == id
            {
                return Ok(nodes.len());
            }
        }
    };
    ask().unwrap_or(0)
}

/// Runs the normal job (2 ranks of `sh` counting to 30000, one per daemon) to its end.
fn run_job(control: SocketAddr, dir: &Path, nonce: u64) -> Result<Duration, String> {
    let t0 = Instant::now();
    let mut c = Client::connect(control).map_err(|e| format!("{e:#}"))?;
    let script = "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done; echo counted $i";
    let xml = JobDescription::run("/bin/sh", vec!["-c".into(), script.into()], 2).to_xml();
    let base_dir = dir.to_string_lossy().into_owned();
    let id = c.send(ToolRequest::Submit { nonce, xml, base_dir, watch: true }).map_err(|e| format!("{e:#}"))?;
    loop {
        match c.next(Some(Duration::from_secs(120))).map_err(|e| format!("{e:#}"))? {
            (rid, ToolReply::Finished { phase, error, .. }, _) if rid == id => {
                return if phase == JobPhase::Done { Ok(t0.elapsed()) } else { Err(format!("{phase:?} {error:?}")) };
            }
            (rid, ToolReply::Error { message }, _) if rid == id => return Err(message),
            _ => {}
        }
    }
}

fn source(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 66, (i / 250) as u8, (i % 250 + 1) as u8))
}

/// A connection from `from` to `to`, or `None` (counted as failed).
fn connect(from: IpAddr, to: SocketAddr, c: &RoleCount) -> Option<TcpStream> {
    c.tried.fetch_add(1, Ordering::Relaxed);
    match connect_from(from, to) {
        Ok(s) => Some(s),
        Err(_) => {
            c.failed.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(10));
            None
        }
    }
}

/// `connect(2)` from a chosen source address (std has no bind-then-connect).
fn connect_from(from: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    let (IpAddr::V4(src), SocketAddr::V4(dst)) = (from, to) else {
        return Err(std::io::Error::other("IPv4 only"));
    };
    // SAFETY: a fresh socket owned by the TcpStream made from it below (or
    // closed on error); the sockaddrs are plain values that outlive the calls.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let sa = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from(ip).to_be() },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let s = sa(src, 0);
        if libc::bind(fd, (&raw const s).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let d = sa(*dst.ip(), dst.port());
        if libc::connect(fd, (&raw const d).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stream)
    }
}

/// Whether the daemon took the connection: it closes one it refuses at once
/// and without a word; one it took stays open (on a plain link it sends its
/// hello; on an encrypted one it waits for the dialer's first handshake
/// message, so silence for a moment means taken).
fn taken(s: &mut TcpStream, c: &RoleCount) -> bool {
    let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
    let mut b = [0u8; 64];
    let ok = match s.read(&mut b) {
        Ok(n) => n > 0,
        Err(e) => matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
    };
    if ok { &c.accepted } else { &c.refused }.fetch_add(1, Ordering::Relaxed);
    ok
}

fn hello(listen: NodeAddr) -> BytesMut {
    let mut b = BytesMut::new();
    let env = Envelope::new(listen.id(), listen, 0, Hello { network_id: 0, listen, overlay: Some(OverlayKind::Chord) });
    encode_frame(&env, &mut b, 1024).expect("a hello fits");
    b
}

/// Writes `data`, counting it; false once the daemon is gone from this connection.
fn send(s: &mut TcpStream, data: &[u8], c: &RoleCount) -> bool {
    let ok = s.write_all(data).is_ok();
    if ok {
        c.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
    }
    ok
}

/// Waits for the daemon to close `s` (or `stop`).
fn until_closed(s: &mut TcpStream, stop: &AtomicBool) {
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    let mut b = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        match s.read(&mut b) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

fn flooder(i: usize, to: SocketAddr, c: &RoleCount, stop: &AtomicBool) {
    let from = source(i);
    let me = NodeAddr(SocketAddr::new(from, 7400));
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ i as u64;
    let mut junk = vec![0u8; 4096];
    let mut pings = BytesMut::new();
    for _ in 0..256 {
        let env = Envelope::new(me.id(), me, 0, NodeMsg::Chord(ChordMsg::Ping));
        encode_frame(&env, &mut pings, 1024).expect("a ping fits");
    }
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        round += 1;
        match ROLES[i % ROLES.len()] {
            "junk" => {
                let Some(mut s) = connect(from, to, c) else { continue };
                for b in junk.iter_mut() {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    *b = rng as u8;
                }
                if taken(&mut s, c) {
                    send(&mut s, &junk, c);
                    until_closed(&mut s, stop);
                }
            }
            "oversize" => {
                let Some(mut s) = connect(from, to, c) else { continue };
                if taken(&mut s, c) {
                    let mut b = if round % 2 == 0 { hello(me).to_vec() } else { Vec::new() };
                    let len: u32 = if round % 2 == 0 { (16 << 20) + 1 } else { 1 << 31 };
                    b.extend(len.to_be_bytes());
                    b.extend([0u8; 1024]);
                    send(&mut s, &b, c);
                    until_closed(&mut s, stop);
                }
            }
            "valid" => {
                let Some(mut s) = connect(from, to, c) else { continue };
                if taken(&mut s, c) && send(&mut s, &hello(me), c) {
                    let _ = s.set_write_timeout(Some(Duration::from_millis(500)));
                    while !stop.load(Ordering::Relaxed) {
                        match s.write(&pings) {
                            Ok(n) => {
                                c.bytes.fetch_add(n as u64, Ordering::Relaxed);
                            }
                            Err(e)
                                if matches!(
                                    e.kind(),
                                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                                ) => {}
                            Err(_) => break,
                        }
                    }
                }
            }
            "half_open" => {
                let mut held: Vec<TcpStream> = Vec::new();
                for _ in 0..16 {
                    if let Some(mut s) = connect(from, to, c)
                        && taken(&mut s, c)
                        && send(&mut s, &[0, 0], c)
                    {
                        held.push(s);
                    }
                }
                for mut s in held {
                    until_closed(&mut s, stop);
                }
                if !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            // churn: open and drop at once, without waiting for anything.
            _ => drop(connect(from, to, c)),
        }
    }
}

/// The log without its colour codes (`ESC [ ... m`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|&c| c == 'm');
        } else {
            out.push(c);
        }
    }
    out
}

/// Runs the whole measurement.
pub(crate) fn run(opts: Opts) -> Report {
    let target = target_dir();
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let log = target.join(format!("flood-{stamp}-{}-jobd.log", std::process::id()));
    let mut jobd = start_jobd(&log, "flooded", None);
    let peer_log = target.join(format!("flood-{stamp}-{}-peer.log", std::process::id()));
    let peer = start_jobd(&peer_log, "peer", Some(jobd.overlay));
    let formed = Instant::now() + Duration::from_secs(30);
    while nodes(jobd.control) < 2 || nodes(peer.control) < 2 {
        assert!(Instant::now() < formed, "the two daemons did not form a network");
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = jobd.child.id();
    let dir = jobd.dir.join("jobs");
    std::fs::create_dir_all(&dir).expect("job dir");
    // Without the flood: the best of three (the first warms the daemon up).
    let job_alone = (0..3)
        .map(|n| run_job(jobd.control, &dir, n).expect("the job runs without a flood"))
        .min()
        .expect("three runs");
    std::thread::sleep(Duration::from_millis(500));
    let rss_before_kib = rss_kib(pid);
    let roles: Vec<(&'static str, RoleCount)> = ROLES.iter().map(|r| (*r, RoleCount::default())).collect();
    let roles = Arc::new(roles);
    let stop = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(Mutex::new(Vec::new()));
    let t0 = Instant::now();
    let sampler = {
        let (stop, samples) = (stop.clone(), samples.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let kib = rss_kib(pid);
                samples.lock().expect("sampler").push((t0.elapsed().as_millis() as u64, kib));
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let overlay = jobd.overlay;
    let threads: Vec<_> = (0..opts.conns.max(ROLES.len()))
        .map(|i| {
            let (roles, stop) = (roles.clone(), stop.clone());
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || flooder(i, overlay, &roles[i % ROLES.len()].1, &stop))
                .expect("flood thread")
        })
        .collect();
    // The normal job, a third into the flood.
    std::thread::sleep(opts.flood / 3);
    let job_flooded = run_job(jobd.control, &dir, 99);
    let rest = opts.flood.saturating_sub(t0.elapsed());
    std::thread::sleep(rest);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    let _ = sampler.join();
    std::thread::sleep(Duration::from_secs(2));
    let rss_after_kib = rss_kib(pid);
    let nodes_after = nodes(jobd.control);
    let alive_after = nodes_after > 0;
    // SIGTERM: the daemon logs its counts as it stops.
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(15);
    while jobd.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = strip_ansi(&std::fs::read_to_string(&log).unwrap_or_default());
    let daemon_counts = text.lines().find(|l| l.contains("inbound overlay totals")).and_then(|l| {
        let num =
            |key: &str| l.split(key).nth(1)?.split(|c: char| !c.is_ascii_digit()).find(|s| !s.is_empty())?.parse().ok();
        Some((num("accepted=")?, num("refused=")?, num("cut_off=")?))
    });
    let samples = std::mem::take(&mut *samples.lock().expect("sampler"));
    let rss_peak_kib = samples.iter().map(|s| s.1).max().unwrap_or(0).max(rss_after_kib);
    drop(jobd);
    drop(peer);
    let roles = Arc::try_unwrap(roles).expect("threads joined");
    Report {
        opts,
        rss_before_kib,
        rss_peak_kib,
        rss_after_kib,
        rss_samples: samples,
        job_alone,
        job_flooded,
        roles,
        alive_after,
        nodes_after,
        log_bans: text.lines().filter(|l| l.contains("cutting off") && l.contains("WARN")).count(),
        log_refusals: text.lines().filter(|l| l.contains("refusing connections")).count(),
        daemon_counts,
        log,
    }
}

impl Report {
    /// The table for people.
    pub(crate) fn table(&self) -> String {
        let mib = |k: u64| k as f64 / 1024.0;
        let mut t = format!(
            "flood of {:?} from {} connections\n\
             | jobd RSS | MiB |\n|---|---|\n| before | {:.1} |\n| peak | {:.1} |\n| after | {:.1} |\n\n\
             | role | connections tried | taken | refused | connect failed | MiB sent |\n|---|---|---|---|---|---|\n",
            self.opts.flood,
            self.opts.conns,
            mib(self.rss_before_kib),
            mib(self.rss_peak_kib),
            mib(self.rss_after_kib)
        );
        for (name, c) in &self.roles {
            let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
            t += &format!(
                "| {name} | {} | {} | {} | {} | {:.1} |\n",
                g(&c.tried),
                g(&c.accepted),
                g(&c.refused),
                g(&c.failed),
                g(&c.bytes) as f64 / f64::from(1 << 20)
            );
        }
        let flooded = match &self.job_flooded {
            Ok(d) => format!("{:.0} ms", d.as_secs_f64() * 1e3),
            Err(e) => format!("FAILED: {e}"),
        };
        t += &format!(
            "\njob (a rank on each daemon) alone {:.0} ms, during the flood {flooded}\n\
             daemon alive after: {} (knows {} nodes); its count (accepted, refused, cut off): {:?}\n\
             log: {} bans started (one warning each), {} refusal lines ({})\n",
            self.job_alone.as_secs_f64() * 1e3,
            self.alive_after,
            self.nodes_after,
            self.daemon_counts,
            self.log_bans,
            self.log_refusals,
            self.log.display()
        );
        t
    }

    /// The data, as one JSON document.
    pub(crate) fn json(&self) -> serde_json::Value {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        serde_json::json!({
            "flood_s": self.opts.flood.as_secs_f64(),
            "conns": self.opts.conns,
            "rss_kib": { "before": self.rss_before_kib, "peak": self.rss_peak_kib, "after": self.rss_after_kib },
            "rss_samples_ms_kib": self.rss_samples,
            "job_alone_ms": self.job_alone.as_secs_f64() * 1e3,
            "job_flooded_ms": self.job_flooded.as_ref().ok().map(|d| d.as_secs_f64() * 1e3),
            "job_flooded_error": self.job_flooded.as_ref().err(),
            "roles": self.roles.iter().map(|(n, c)| serde_json::json!({
                "role": n, "tried": g(&c.tried), "taken": g(&c.accepted), "refused": g(&c.refused),
                "connect_failed": g(&c.failed), "bytes_sent": g(&c.bytes),
            })).collect::<Vec<_>>(),
            "alive_after": self.alive_after,
            "nodes_after": self.nodes_after,
            "daemon_accepted_refused_cut_off": self.daemon_counts,
            "log_bans": self.log_bans,
            "log_refusals": self.log_refusals,
        })
    }
}
