//! The daemon's configuration (a TOML file, overridden by flags) and the
//! resources it detects on its own.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use p2pmp_core::can::CanConfig;
use p2pmp_core::guard::GuardConfig;
use p2pmp_core::job::Resources;
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::node::DaemonConfig;
use p2pmp_core::overlay::OverlayKind;
use serde::Deserialize;
use std::time::Duration;

/// Which overlay the daemon joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Overlay {
    /// Chord.
    #[default]
    Chord,
    /// CAN, in `dims` dimensions.
    Can,
}

impl std::str::FromStr for Overlay {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "chord" => Ok(Overlay::Chord),
            "can" => Ok(Overlay::Can),
            _ => Err(format!("unknown overlay {s:?} (chord or can)")),
        }
    }
}

/// Default overlay listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7400";
/// Default control address (`p2pjob` looks here unless told otherwise).
pub const DEFAULT_CONTROL: &str = "127.0.0.1:7420";

/// Everything a daemon is told.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Overlay address to listen on (and advertise, unless `advertise` is set).
    pub listen: SocketAddr,
    /// The address other hosts reach this node at (`ip` or `ip:port`; the port
    /// defaults to the one listened on): needed when `listen` is `0.0.0.0`, or
    /// on a host with several interfaces. Ranks of jobs listen on its IP.
    pub advertise: Option<String>,
    /// Control socket (always loopback: the local node protocol and `p2pjob`).
    pub control: SocketAddr,
    /// Nodes to join through; empty starts a new network.
    pub bootstrap: Vec<SocketAddr>,
    /// `chord` or `can`.
    pub overlay: Overlay,
    /// CAN's dimensions (1 to 8); every node of a network must agree.
    pub dims: u8,
    /// Where job directories go.
    pub work_dir: PathBuf,
    /// Process slots offered (default: the number of cores).
    pub slots: Option<u32>,
    /// Tags advertised besides os and arch.
    pub tags: Vec<String>,
    /// `error`, `warn`, `info`, `debug` or `trace`.
    pub log_level: String,
    /// Overlay maintenance period in milliseconds (stabilize, fix fingers).
    pub stabilize_ms: u64,
    /// How often a peer with business (a job's submitter or executors) is sent
    /// a heartbeat, in milliseconds.
    pub heartbeat_ms: u64,
    /// How long such a peer may stay silent before its jobs fail, in milliseconds.
    pub failure_timeout_ms: u64,
    /// How long a finished job (status, exit codes, output) is kept, in seconds.
    pub retention_s: u64,
    /// Serve the status page here (`PORT` alone is loopback, `127.0.0.1:PORT`);
    /// off when unset.
    pub http: Option<String>,
    /// Limits on every job's processes and directory (`[limits]`).
    pub limits: crate::sandbox::Limits,
    /// When the daemon runs as root, each job runs as a user of its own
    /// (default); false runs them as root, said loudly in the log.
    pub per_job_user: bool,
    /// Limits against hostile peers (the `[peers]` table).
    pub peers: PeerLimits,
    /// Keys whose jobs run here (text form `ed25519:...`, see `p2pjob whoami`).
    pub allow: Vec<String>,
    /// A file of more such keys, one a line (`#` comments), re-read when it changes.
    pub allow_file: Option<PathBuf>,
    /// Run jobs of any key (needed on a non-loopback address without an allow-list).
    pub allow_any: bool,
    /// Keys that may kill and inspect any job this node holds.
    pub admin: Vec<String>,
    /// Test hook (feature `test-hooks`, never in a release build): this node
    /// stages a signed job's files as it reads them, unchecked against the
    /// signature, as a dishonest node would; executors must refuse them.
    #[cfg(feature = "test-hooks")]
    #[serde(skip)]
    pub forward_unchecked: bool,
}

/// The node's periods and timeouts (see [`Config::timing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub heartbeat_period: Duration,
    pub failure_timeout: Duration,
    pub retention: Duration,
    pub stabilize_period: Duration,
}

/// Longest period or timeout a configuration may set (a day); longer ones
/// would overflow the clock arithmetic of the node's timers.
const MAX_PERIOD_MS: u64 = 86_400_000;
/// Longest retention of finished jobs (a year).
const MAX_RETENTION_S: u64 = 365 * 86_400;

/// The `[peers]` table: what one peer (or local process) may ask of the daemon
/// before it is cut off. Every key is optional; the defaults suit a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PeerLimits {
    /// Most open inbound overlay connections (and, apart, local control ones).
    pub max_conns: usize,
    /// Most open inbound overlay connections from one IP address.
    pub max_conns_per_ip: usize,
    /// Frames (messages) a connection may send per second on average...
    pub frames_per_s: u64,
    /// ...and at once; past it the connection is cut off and its address banned.
    pub frame_burst: u64,
    /// MiB a connection may send per second; past it the daemon reads it no faster.
    pub mib_per_s: u64,
    /// MiB of unfinished frames all peers together may hold; past it the peer
    /// holding the most is cut off.
    pub max_buffered_mib: usize,
    /// MiB queued for sending to all peers together; past it the peer with the
    /// most queued (one that asks and never reads) is cut off.
    pub max_queued_mib: usize,
    /// Seconds an address that misbehaved (malformed bytes, a flood, no hello)
    /// is refused the first time; doubled per repeat offence...
    pub ban_s: u64,
    /// ...up to this many.
    pub ban_max_s: u64,
}

impl Default for PeerLimits {
    fn default() -> Self {
        let g = GuardConfig::default();
        PeerLimits {
            max_conns: g.max_conns,
            max_conns_per_ip: g.max_conns_per_ip,
            frames_per_s: g.frames_per_s,
            frame_burst: g.frame_burst,
            mib_per_s: g.bytes_per_s >> 20,
            max_buffered_mib: g.max_buffered >> 20,
            max_queued_mib: g.max_queued >> 20,
            ban_s: g.ban_min.as_secs(),
            ban_max_s: g.ban_max.as_secs(),
        }
    }
}

impl PeerLimits {
    /// The adapters' guard with these limits (a byte burst of a quarter second).
    pub fn guard(&self) -> GuardConfig {
        let bytes_per_s = self.mib_per_s.saturating_mul(1 << 20);
        GuardConfig {
            max_conns: self.max_conns,
            max_conns_per_ip: self.max_conns_per_ip,
            frames_per_s: self.frames_per_s,
            frame_burst: self.frame_burst.max(1),
            bytes_per_s,
            byte_burst: (bytes_per_s / 4).max(1 << 20),
            max_buffered: self.max_buffered_mib.saturating_mul(1 << 20),
            max_queued: self.max_queued_mib.saturating_mul(1 << 20),
            ban_min: Duration::from_secs(self.ban_s),
            ban_max: Duration::from_secs(self.ban_max_s.max(self.ban_s)),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: DEFAULT_LISTEN.parse().expect("a valid literal address"),
            advertise: None,
            control: DEFAULT_CONTROL.parse().expect("a valid literal address"),
            bootstrap: Vec::new(),
            overlay: Overlay::Chord,
            dims: 2,
            work_dir: std::env::temp_dir().join("p2pmp-jobd"),
            slots: None,
            tags: Vec::new(),
            log_level: "info".into(),
            stabilize_ms: 1000,
            heartbeat_ms: 1000,
            failure_timeout_ms: 10_000,
            retention_s: 3600,
            http: None,
            limits: crate::sandbox::Limits::default(),
            per_job_user: true,
            peers: PeerLimits::default(),
            allow: Vec::new(),
            allow_file: None,
            allow_any: false,
            admin: Vec::new(),
            #[cfg(feature = "test-hooks")]
            forward_unchecked: false,
        }
    }
}

impl Config {
    /// Reads a TOML configuration file.
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Refuses what cannot run.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.overlay == Overlay::Can && !(1..=8).contains(&self.dims) {
            bail!("dims must be 1 to 8, not {}", self.dims);
        }
        if !self.control.ip().is_loopback() {
            bail!("the control socket must be on a loopback address, not {}", self.control);
        }
        if self.slots == Some(0) {
            bail!("slots must be at least 1");
        }
        // The node adds one attribute of its own (`criu`) to the line.
        let most = p2pmp_core::job::requirements::MAX_RESOURCE_ITEMS - 1;
        if self.tags.len() > most {
            bail!("at most {most} tags, not {}", self.tags.len());
        }
        self.advertised(self.listen)?;
        self.http_addr()?;
        crate::allow::parse_keys(&self.allow, "allowed key")?;
        crate::allow::parse_keys(&self.admin, "admin key")?;
        if let Some(f) = &self.allow_file {
            crate::allow::read_allow_file(f)?;
        }
        let listed = !self.allow.is_empty() || self.allow_file.is_some();
        if !(listed || self.allow_any || self.listen.ip().is_loopback()) {
            bail!(
                "refusing to start: listening on {} (not loopback) with no allow-list; name the keys whose jobs run \
                 here with --allow KEY, --allow-file PATH or `allow = [...]` in the config, or accept every key \
                 with --allow-any",
                self.listen
            );
        }
        for (key, ms) in [
            ("stabilize_ms", self.stabilize_ms),
            ("heartbeat_ms", self.heartbeat_ms),
            ("failure_timeout_ms", self.failure_timeout_ms),
        ] {
            if ms > MAX_PERIOD_MS {
                bail!("{key} must be at most {MAX_PERIOD_MS} (a day), not {ms}");
            }
        }
        if self.retention_s > MAX_RETENTION_S {
            bail!("retention_s must be at most {MAX_RETENTION_S} (a year), not {}", self.retention_s);
        }
        let l = &self.peers;
        if l.ban_s > MAX_PERIOD_MS / 1000 || l.ban_max_s > MAX_PERIOD_MS / 1000 {
            bail!("peers: ban_s and ban_max_s must be at most {} (a day)", MAX_PERIOD_MS / 1000);
        }
        if l.max_conns == 0 || l.max_conns_per_ip == 0 {
            bail!("peers: max_conns and max_conns_per_ip must be at least 1");
        }
        if l.max_buffered_mib < 16 {
            bail!("peers: max_buffered_mib must be at least 16 (one frame of the largest kind)");
        }
        if l.max_queued_mib < 128 {
            bail!("peers: max_queued_mib must be at least 128 (what one peer connection may have queued)");
        }
        Ok(())
    }

    /// Where the status page listens, if it is on: `http` as `ip:port`, or a
    /// port alone on loopback.
    pub fn http_addr(&self) -> anyhow::Result<Option<SocketAddr>> {
        let Some(h) = self.http.as_deref().map(str::trim) else { return Ok(None) };
        if let Ok(port) = h.parse::<u16>() {
            return Ok(Some(SocketAddr::from(([127, 0, 0, 1], port))));
        }
        match h.parse() {
            Ok(addr) => Ok(Some(addr)),
            Err(_) => bail!("http {h:?} is neither a port nor ip:port (e.g. 7480 or 127.0.0.1:7480)"),
        }
    }

    /// The overlay address this node advertises, given the address its listener
    /// got (`bound`: the port of `listen = ...:0` is known only once bound).
    pub fn advertised(&self, bound: SocketAddr) -> anyhow::Result<SocketAddr> {
        let addr = match self.advertise.as_deref().map(str::trim) {
            None => bound,
            Some(a) => match (a.parse::<SocketAddr>(), a.parse::<IpAddr>()) {
                (Ok(sa), _) if sa.port() == 0 => SocketAddr::new(sa.ip(), bound.port()),
                (Ok(sa), _) => sa,
                (_, Ok(ip)) => SocketAddr::new(ip, bound.port()),
                _ => bail!("advertise {a:?} is neither an IP address nor ip:port"),
            },
        };
        if addr.ip().is_unspecified() {
            bail!(
                "listening on {} needs an address to advertise (--advertise ADDR: where other hosts reach this one)",
                self.listen
            );
        }
        Ok(addr)
    }

    /// The node's configuration: advertised at `overlay`, its control socket at
    /// `control`, job directories under `work_dir`.
    pub fn daemon_config(&self, overlay: SocketAddr, control: SocketAddr, work_dir: &Path) -> DaemonConfig {
        let seed = u64::from(overlay.port()) << 32 | u64::from(std::process::id());
        let mut dc = DaemonConfig::new(self.resources(), control.to_string(), work_dir.to_string_lossy(), seed);
        dc.bootstrap = self.bootstrap.iter().map(|a| NodeAddr(*a)).collect();
        #[cfg(feature = "test-hooks")]
        {
            dc.submit.forward_unchecked = self.forward_unchecked;
        }
        let t = self.timing();
        dc.heartbeat_period = t.heartbeat_period;
        dc.failure_timeout = t.failure_timeout;
        dc.retention = t.retention;
        // Grows across restarts at one address: this run's lines outrank the last's.
        let unix_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        dc.generation_base = u64::try_from(unix_ms).unwrap_or(u64::MAX >> 24) << 20;
        dc.unix_ms = u64::try_from(unix_ms).unwrap_or(0);
        let stab = t.stabilize_period;
        dc.chord.stabilize_period = stab;
        dc.chord.fix_fingers_period = stab;
        dc.chord.check_predecessor_period = stab * 2;
        dc.chord.join_backoff_min = stab.min(Duration::from_secs(1));
        dc.chord.join_backoff_max = (stab * 8).min(Duration::from_secs(8));
        if self.overlay == Overlay::Can {
            // CAN's heartbeats at the maintenance period, failures found in 3.5 of them.
            dc.can = Some(CanConfig {
                dims: usize::from(self.dims),
                heartbeat_period: stab,
                dead_after: stab * 7 / 2,
                takeover_delay: stab * 3 / 10,
                join_backoff_min: dc.chord.join_backoff_min,
                join_backoff_max: dc.chord.join_backoff_max,
                ..CanConfig::default()
            });
        }
        dc
    }

    /// The periods and timeouts of the node, from the `_ms` and `_s` keys
    /// (floors applied; [`Config::check`] has bounded them from above).
    pub fn timing(&self) -> Timing {
        Timing {
            heartbeat_period: Duration::from_millis(self.heartbeat_ms.max(10)),
            failure_timeout: Duration::from_millis(self.failure_timeout_ms.max(self.heartbeat_ms.saturating_mul(2))),
            retention: Duration::from_secs(self.retention_s),
            stabilize_period: Duration::from_millis(self.stabilize_ms.max(10)),
        }
    }

    /// The overlay this node runs, as announced in every connection's hello.
    pub fn overlay_kind(&self) -> OverlayKind {
        match self.overlay {
            Overlay::Chord => OverlayKind::Chord,
            Overlay::Can => OverlayKind::Can { dims: self.dims },
        }
    }

    /// The resources this node advertises: detected, plus configured slots and tags.
    pub fn resources(&self) -> Resources {
        let mut r = detect();
        if let Some(s) = self.slots {
            r.slots = s;
        }
        r.tags = self.tags.iter().cloned().collect::<BTreeSet<_>>();
        // Whether this host could checkpoint programs transparently (see `criu`).
        r.extra.insert("criu".to_owned(), crate::criu::Criu::probe().attribute().to_owned());
        r
    }
}

/// OS, architecture, cores and memory of this machine; one slot per core.
pub fn detect() -> Resources {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    Resources {
        os: std::env::consts::OS.to_owned(),
        arch: std::env::consts::ARCH.to_owned(),
        cores,
        mem_mb: mem_mb().unwrap_or(0),
        slots: cores,
        ..Resources::default()
    }
}

/// The one-minute load average (thousandths) and available memory (MiB) now.
pub fn host_stats() -> Option<(u32, u64)> {
    let load = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mem = std::fs::read_to_string("/proc/meminfo").ok()?;
    Some((parse_loadavg(&load)?, meminfo_mb(&mem, "MemAvailable:")?))
}

fn parse_loadavg(text: &str) -> Option<u32> {
    let first: f64 = text.split_whitespace().next()?.parse().ok()?;
    (first.is_finite() && first >= 0.0).then(|| (first * 1000.0).round().min(f64::from(u32::MAX)) as u32)
}

/// `MemTotal` of /proc/meminfo, in MiB.
fn mem_mb() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo(&text)
}

fn parse_meminfo(text: &str) -> Option<u64> {
    meminfo_mb(text, "MemTotal:")
}

fn meminfo_mb(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_toml_and_meminfo() {
        let c: Config =
            toml::from_str("listen = \"127.0.0.1:9000\"\nslots = 3\ntags = [\"gpu\"]\noverlay = \"can\"\n").unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.slots, Some(3));
        assert_eq!((c.overlay, c.dims), (Overlay::Can, 2));
        c.check().unwrap();
        let flat = Config { dims: 0, ..c };
        assert!(flat.check().unwrap_err().to_string().contains("dims must be 1 to 8"));
        assert!(toml::from_str::<Config>("nonsense = 1").is_err());
        let any = Config { listen: "0.0.0.0:7400".parse().unwrap(), ..Config::default() };
        assert!(any.check().unwrap_err().to_string().contains("--advertise"), "0.0.0.0 alone cannot be advertised");
        let bound: SocketAddr = "0.0.0.0:7401".parse().unwrap();
        let ip = Config { advertise: Some("198.18.0.5".into()), ..any.clone() };
        assert_eq!(ip.advertised(bound).unwrap(), "198.18.0.5:7401".parse().unwrap());
        let full = Config { advertise: Some("198.18.0.5:9000".into()), ..any.clone() };
        assert_eq!(full.advertised(bound).unwrap(), "198.18.0.5:9000".parse().unwrap());
        let bad = Config { advertise: Some("nowhere".into()), ..any.clone() };
        assert!(bad.check().is_err());
        let open = Config { advertise: Some("198.18.0.5".into()), ..any };
        assert!(open.check().unwrap_err().to_string().contains("no allow-list"), "off loopback, someone must be named");
        let key = p2pmp_core::auth::SecretKey::from_seed([7; 32]).public().to_string();
        let file = std::env::temp_dir().join(format!("p2pmp-config-keys-{}", std::process::id()));
        std::fs::write(&file, format!("{key}\n")).unwrap();
        let listed = Config { allow: vec![key.clone()], ..open.clone() };
        let filed = Config { allow_file: Some(file.clone()), ..open.clone() };
        let anyone = Config { allow_any: true, ..open.clone() };
        assert!(listed.check().is_ok() && filed.check().is_ok() && anyone.check().is_ok());
        // Bad keys and a missing allow-file are refused here, before the daemon starts.
        let bad = Config { allow: vec!["ed25519:00".into()], ..open };
        assert!(format!("{:#}", bad.check().unwrap_err()).contains("allowed key"));
        let bad_admin = Config { admin: vec![key.to_uppercase()], ..Config::default() };
        assert!(format!("{:#}", bad_admin.check().unwrap_err()).contains("admin key"));
        std::fs::remove_file(&file).unwrap();
        assert!(format!("{:#}", filed.check().unwrap_err()).contains("allow-file"), "a missing allow-file");
        let page = |h: &str| Config { http: Some(h.into()), ..Config::default() }.http_addr();
        assert_eq!(page("7480").unwrap(), Some("127.0.0.1:7480".parse().unwrap()), "a port alone is loopback");
        assert_eq!(page("0.0.0.0:80").unwrap(), Some("0.0.0.0:80".parse().unwrap()));
        assert!(page("localhost").unwrap_err().to_string().contains("neither a port"));
        assert_eq!(Config::default().http_addr().unwrap(), None, "off unless asked for");
        let c: Config = toml::from_str("http = \"127.0.0.1:8080\"\n").unwrap();
        assert_eq!(c.http_addr().unwrap().map(|a| a.port()), Some(8080));
        let lim: Config = toml::from_str("[peers]\nmax_conns_per_ip = 4\nmib_per_s = 2\nban_s = 30\n").unwrap();
        let g = lim.peers.guard();
        assert_eq!((g.max_conns_per_ip, g.bytes_per_s, g.ban_min.as_secs()), (4, 2 << 20, 30));
        assert_eq!(g.max_conns, GuardConfig::default().max_conns, "unset keys keep their defaults");
        assert_eq!(PeerLimits::default().guard(), GuardConfig { byte_burst: 32 << 20, ..GuardConfig::default() });
        assert!(toml::from_str::<Config>("[peers]\nmax_con = 1\n").is_err(), "a misspelt limit is refused");
        let slow: Config = toml::from_str(&format!("heartbeat_ms = {}\n", u64::MAX)).unwrap();
        assert!(slow.check().unwrap_err().to_string().contains("at most"), "a period that overflows timers is refused");
        assert_eq!(slow.timing().failure_timeout, Duration::from_millis(u64::MAX), "and computing it does not panic");
        let long: Config = toml::from_str("retention_s = 99999999999\n").unwrap();
        assert!(long.check().is_err());
        let closed = Config { peers: PeerLimits { max_conns_per_ip: 0, ..PeerLimits::default() }, ..Config::default() };
        assert!(closed.check().unwrap_err().to_string().contains("at least 1"));
        assert_eq!(parse_meminfo("MemTotal:       24576000 kB\nMemFree: 1 kB\n"), Some(24000));
        assert_eq!(meminfo_mb("MemTotal: 2048 kB\nMemAvailable:  1048576 kB\n", "MemAvailable:"), Some(1024));
        assert_eq!(parse_loadavg("0.52 0.58 0.59 1/163 5512\n"), Some(520));
        assert_eq!(parse_loadavg("nan 0 0"), None);
        assert!(host_stats().is_some(), "this is Linux: /proc is there");
        let many = Config { tags: (0..64).map(|i| format!("t{i}")).collect(), ..Config::default() };
        assert!(many.check().unwrap_err().to_string().contains("at most 63 tags"));
        let r = Config { tags: vec!["gpu".into()], ..Config::default() }.resources();
        assert!(r.has_tag("gpu") && r.cores >= 1 && r.slots >= 1);
        assert_eq!(r.extra.get("criu").map(String::as_str), Some(crate::criu::Criu::probe().attribute()));
    }
}
