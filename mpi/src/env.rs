//! The environment the node gives each process it starts (DESIGN "Local node protocol").

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::error::{Error, Result};

/// Job id (hex), rank, size and the local node's control address.
pub const JOB_VAR: &str = "P2PMP_JOB";
/// This process's rank.
pub const RANK_VAR: &str = "P2PMP_RANK";
/// Number of ranks.
pub const SIZE_VAR: &str = "P2PMP_SIZE";
/// The local node's control address (`127.0.0.1:port`).
pub const NODE_VAR: &str = "P2PMP_NODE";
/// The address of the host the node runs on: ranks listen there (optional;
/// loopback when unset, as for ranks of one machine).
pub const HOST_VAR: &str = "P2PMP_HOST";
/// How long a peer rank may stay silent before its connection counts as
/// broken, in milliseconds (optional; [`DEFAULT_FAILURE_TIMEOUT`]).
pub const FAILURE_TIMEOUT_VAR: &str = "P2PMP_FAILURE_TIMEOUT_MS";
/// Which rank-to-rank TCP links are encrypted: `auto` (the default: those
/// between hosts), `always` (every one, on one host too) or `never`.
pub const ENCRYPT_VAR: &str = "P2PMP_ENCRYPT";
/// The failure timeout when the node does not give one.
pub const DEFAULT_FAILURE_TIMEOUT: Duration = Duration::from_secs(10);

/// What `init` reads from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankEnv {
    /// Job id bytes (decoded from hex).
    pub job: Vec<u8>,
    pub rank: u32,
    pub size: u32,
    /// The local node's control address.
    pub node: SocketAddr,
    /// Where this rank listens: its host's address (`P2PMP_HOST`), loopback by default.
    pub host: IpAddr,
    /// How long a silent peer is waited for (`P2PMP_FAILURE_TIMEOUT_MS`).
    pub failure_timeout: Duration,
    /// Which links are encrypted (`P2PMP_ENCRYPT`).
    pub encrypt: Encrypt,
}

/// Which TCP links between ranks are encrypted and authenticated (Noise XX,
/// keys registered in the overlay with the ranks' addresses). Shared-memory
/// links never leave the host and are never encrypted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encrypt {
    /// Links to and from other hosts; a link within the host may be either.
    #[default]
    Auto,
    /// Every TCP link, within the host too.
    Always,
    /// None (a peer of another host that requires encryption refuses us).
    Never,
}

impl Encrypt {
    /// Reads `auto`, `always`/`1`/`on` or `never`/`0`/`off`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Ok(Encrypt::Auto),
            "always" | "1" | "on" | "yes" => Ok(Encrypt::Always),
            "never" | "0" | "off" | "no" => Ok(Encrypt::Never),
            other => Err(format!("{other:?}: want auto, always or never")),
        }
    }

    /// Whether a link between this rank's host address `host` and `peer` is
    /// encrypted: opened by us, or required of a peer connecting from `peer`.
    pub fn wanted(self, host: IpAddr, peer: IpAddr) -> bool {
        match self {
            Encrypt::Auto => peer != host && !(peer.is_loopback() && host.is_loopback()),
            Encrypt::Always => true,
            Encrypt::Never => false,
        }
    }
}

impl RankEnv {
    /// Whether none of the four variables is set (`is_set` says of one): a
    /// process started alone.
    pub fn none_set(is_set: impl Fn(&str) -> bool) -> bool {
        ![JOB_VAR, RANK_VAR, SIZE_VAR, NODE_VAR].iter().any(|k| is_set(k))
    }

    /// Reads the four variables of the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the four variables through `get` (for tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let var = |name: &'static str| {
            get(name).ok_or_else(|| Error::Env { var: name, problem: "not set, while others of P2PMP_JOB, _RANK, _SIZE and _NODE are (start ranks with p2pmp-launch, or set none to run alone as one rank)".into() })
        };
        let bad = |var: &'static str, problem: String| Error::Env { var, problem };
        let job = parse_hex(&var(JOB_VAR)?).map_err(|p| bad(JOB_VAR, p))?;
        let rank: u32 = var(RANK_VAR)?.trim().parse().map_err(|e| bad(RANK_VAR, format!("{e}")))?;
        let size: u32 = var(SIZE_VAR)?.trim().parse().map_err(|e| bad(SIZE_VAR, format!("{e}")))?;
        if size == 0 || rank >= size {
            return Err(bad(RANK_VAR, format!("rank {rank} not below size {size}")));
        }
        let node = var(NODE_VAR)?.trim().parse().map_err(|e| bad(NODE_VAR, format!("{e} (want ip:port)")))?;
        let host = match get(HOST_VAR) {
            Some(h) => h.trim().parse().map_err(|e| bad(HOST_VAR, format!("{e} (want an IP address)")))?,
            None => IpAddr::V4(Ipv4Addr::LOCALHOST),
        };
        let failure_timeout = match get(FAILURE_TIMEOUT_VAR) {
            Some(ms) => Duration::from_millis(
                ms.trim().parse::<u64>().map_err(|e| bad(FAILURE_TIMEOUT_VAR, format!("{e} (want milliseconds)")))?,
            ),
            None => DEFAULT_FAILURE_TIMEOUT,
        };
        let encrypt =
            get(ENCRYPT_VAR).map_or(Ok(Encrypt::Auto), |v| Encrypt::parse(&v)).map_err(|p| bad(ENCRYPT_VAR, p))?;
        Ok(RankEnv { job, rank, size, node, host, failure_timeout, encrypt })
    }
}

/// Lower-case hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes of an even-length hex string of at most 128 digits.
pub fn parse_hex(s: &str) -> Result<Vec<u8>, String> {
    let s = s.trim();
    if s.is_empty() || s.len() % 2 != 0 || s.len() > 128 || !s.is_ascii() {
        return Err(format!("want an even number (2..=128) of hex digits, got {s:?}"));
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| format!("{s:?}: {e}"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_alone_only_with_none_of_the_four_variables() {
        assert!(RankEnv::none_set(|k| k == HOST_VAR || k == ENCRYPT_VAR), "the optional ones do not count");
        for k in [JOB_VAR, RANK_VAR, SIZE_VAR, NODE_VAR] {
            assert!(!RankEnv::none_set(|v| v == k), "{k} alone is a launch gone wrong");
        }
    }

    #[test]
    fn reads_a_good_environment_and_refuses_bad_ones() {
        let with_host = |job: &str, rank: &str, size: &str, node: &str, host: Option<&str>| {
            let (job, rank, size, node) = (job.to_string(), rank.to_string(), size.to_string(), node.to_string());
            let host = host.map(str::to_string);
            RankEnv::from_lookup(move |k| match k {
                JOB_VAR => Some(job.clone()),
                RANK_VAR => Some(rank.clone()),
                SIZE_VAR => Some(size.clone()),
                NODE_VAR => Some(node.clone()),
                HOST_VAR => host.clone(),
                _ => None,
            })
        };
        let env = |job: &str, rank: &str, size: &str, node: &str| with_host(job, rank, size, node, None);
        let ok = env("00ff", "1", "4", "127.0.0.1:9").unwrap();
        let node = "127.0.0.1:9".parse().unwrap();
        let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let failure_timeout = DEFAULT_FAILURE_TIMEOUT;
        let encrypt = Encrypt::Auto;
        assert_eq!(ok, RankEnv { job: vec![0, 255], rank: 1, size: 4, node, host: loopback, failure_timeout, encrypt });
        let there = with_host("00ff", "1", "4", "127.0.0.1:9", Some("198.18.0.7")).unwrap();
        assert_eq!(there.host, "198.18.0.7".parse::<IpAddr>().unwrap());
        assert!(with_host("00ff", "1", "4", "127.0.0.1:9", Some("somewhere")).is_err());
        assert!(env("0f0", "1", "4", "127.0.0.1:9").is_err());
        assert!(env("zz", "1", "4", "127.0.0.1:9").is_err());
        assert!(env("00", "4", "4", "127.0.0.1:9").is_err());
        assert!(env("00", "0", "4", "nowhere").is_err());
        assert!(RankEnv::from_lookup(|_| None).is_err());
        assert_eq!(parse_hex(&to_hex(&[1, 2, 254])).unwrap(), vec![1, 2, 254]);
    }

    #[test]
    fn encryption_is_between_hosts_by_default_and_a_bad_value_is_refused() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let (a, b, lo) = (ip("198.18.0.1"), ip("198.18.0.2"), ip("127.0.0.1"));
        assert!(Encrypt::Auto.wanted(a, b));
        assert!(!Encrypt::Auto.wanted(a, a));
        assert!(!Encrypt::Auto.wanted(lo, ip("127.0.0.2")));
        assert!(Encrypt::Always.wanted(lo, lo));
        assert!(!Encrypt::Never.wanted(a, b));
        assert_eq!(Encrypt::parse(" Always "), Ok(Encrypt::Always));
        assert_eq!(Encrypt::parse("0"), Ok(Encrypt::Never));
        assert!(Encrypt::parse("sometimes").is_err());
        let env = RankEnv::from_lookup(|k| match k {
            JOB_VAR => Some("00ff".into()),
            RANK_VAR => Some("0".into()),
            SIZE_VAR => Some("2".into()),
            NODE_VAR => Some("127.0.0.1:9".into()),
            ENCRYPT_VAR => Some("maybe".into()),
            _ => None,
        });
        assert!(matches!(env, Err(Error::Env { var: ENCRYPT_VAR, .. })));
    }
}
