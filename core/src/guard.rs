//! Policy against hostile peers, pure: which inbound connections to admit, how
//! fast one connection may send, and how long a source that misbehaved is
//! refused. The adapters' driver and shells apply it (every runtime the same
//! way); nothing here reads a clock: `now` comes in with every call.
//!
//! - [`TokenBucket`]: a rate with a burst, for frames per second (a connection
//!   over it is cut off) and bytes per second (a connection over it is read no
//!   more until it is back under: TCP pushes back on the sender).
//! - [`Admission`]: caps on open inbound connections in total and per source
//!   address, and bans: a source cut off for misbehaving (malformed bytes, a
//!   flood, no hello) is refused for [`GuardConfig::ban_min`], doubling per
//!   repeat offence up to [`GuardConfig::ban_max`]. A refusal says whether it is
//!   the first of its ban, so the adapter logs once per offender, not per try.
//!   The adapter spares an address it shares with a peer in good standing
//!   (nodes of one host, or behind one NAT): the offending connection is still
//!   cut, but no ban starts ([`Admission::punish_unless`]).

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::time::Backoff;

const NANOS: u128 = 1_000_000_000;

/// The knobs of [`Admission`] and of the per-connection buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardConfig {
    /// Most inbound connections open at once.
    pub max_conns: usize,
    /// Most inbound connections open at once from one source address.
    pub max_conns_per_ip: usize,
    /// Frames a connection may send per second on average...
    pub frames_per_s: u64,
    /// ...and at once; beyond that it is cut off and its source banned.
    pub frame_burst: u64,
    /// Bytes a connection may send per second on average...
    pub bytes_per_s: u64,
    /// ...and at once; beyond that it is not read until it is back under.
    pub byte_burst: u64,
    /// Bytes of unfinished frames all connections together may hold; past it the
    /// connection holding the most is cut off.
    pub max_buffered: usize,
    /// Bytes queued for sending to all connections together; past it the
    /// connection with the most queued (a peer that asks and never reads) is cut off.
    pub max_queued: usize,
    /// First ban of a source that misbehaved.
    pub ban_min: Duration,
    /// Longest ban (a repeat offence doubles the last one).
    pub ban_max: Duration,
}

impl Default for GuardConfig {
    fn default() -> Self {
        GuardConfig {
            max_conns: 1024,
            max_conns_per_ip: 128,
            frames_per_s: 20_000,
            frame_burst: 40_000,
            bytes_per_s: 128 << 20,
            byte_burst: 32 << 20,
            max_buffered: 256 << 20,
            max_queued: 256 << 20,
            ban_min: Duration::from_secs(10),
            ban_max: Duration::from_secs(600),
        }
    }
}

/// A token bucket: `rate` tokens per second, at most `burst` saved up. Starts full.
/// Tokens are kept in billionths so any rate refills exactly, without floats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBucket {
    rate: u64,
    burst: u64,
    /// Billionths of a token; negative while in debt (see [`TokenBucket::charge`]).
    level: i128,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket. A rate of 0 means unlimited.
    pub fn new(rate: u64, burst: u64, now: Instant) -> Self {
        TokenBucket { rate, burst, level: i128::from(burst) * NANOS as i128, last: now }
    }

    fn refill(&mut self, now: Instant) {
        // Time never runs backwards for a bucket: an earlier `now` refills nothing.
        let dt = now.saturating_duration_since(self.last).as_nanos();
        self.last = self.last.max(now);
        let add = dt.saturating_mul(u128::from(self.rate));
        let cap = i128::from(self.burst) * NANOS as i128;
        self.level = self.level.saturating_add(i128::try_from(add).unwrap_or(i128::MAX)).min(cap);
    }

    /// Takes `n` tokens if there are that many: `false` (and nothing taken) if not.
    pub fn try_take(&mut self, now: Instant, n: u64) -> bool {
        if self.rate == 0 {
            return true;
        }
        self.refill(now);
        let need = i128::from(n) * NANOS as i128;
        if self.level >= need {
            self.level -= need;
            true
        } else {
            false
        }
    }

    /// Takes `n` tokens whether there are that many or not, and says how long
    /// the taker must pause to be back under the rate (zero: no pause).
    pub fn charge(&mut self, now: Instant, n: u64) -> Duration {
        if self.rate == 0 {
            return Duration::ZERO;
        }
        self.refill(now);
        self.level = self.level.saturating_sub(i128::from(n) * NANOS as i128);
        if self.level >= 0 {
            return Duration::ZERO;
        }
        let nanos = (-self.level) as u128 / u128::from(self.rate);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// Why an inbound connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its source misbehaved and is banned until `until`; `first` on the first
    /// refusal of this ban (log that one only).
    Banned { until: Instant, first: bool },
    /// `open` inbound connections are open already.
    Full { open: usize },
    /// `open` inbound connections from this source are open already.
    FullForSource { open: usize },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Banned { .. } => f.write_str("source banned for misbehaving"),
            Refusal::Full { open } => write!(f, "{open} inbound connections open (the maximum)"),
            Refusal::FullForSource { open } => write!(f, "{open} connections open from this source (the maximum)"),
        }
    }
}

/// Counters of [`Admission`], for logs and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GuardStats {
    /// Inbound connections admitted.
    pub accepted: u64,
    /// Inbound connections refused (any reason).
    pub refused: u64,
    /// Connections cut off for misbehaving.
    pub cut_off: u64,
}

#[derive(Debug, Clone, Copy)]
struct Ban {
    until: Instant,
    backoff: Backoff,
    refused: u64,
}

/// Most sources remembered as banned; past it the ban ending first is forgotten.
const MAX_BANS: usize = 65_536;

/// Which inbound connections to take: caps and bans, by source address.
#[derive(Debug, Clone)]
pub struct Admission {
    cfg: GuardConfig,
    open: usize,
    per_ip: BTreeMap<IpAddr, usize>,
    bans: BTreeMap<IpAddr, Ban>,
    stats: GuardStats,
}

impl Admission {
    pub fn new(cfg: GuardConfig) -> Self {
        Admission { cfg, open: 0, per_ip: BTreeMap::new(), bans: BTreeMap::new(), stats: GuardStats::default() }
    }

    pub fn config(&self) -> &GuardConfig {
        &self.cfg
    }

    pub fn stats(&self) -> GuardStats {
        self.stats
    }

    /// Inbound connections open now.
    pub fn open(&self) -> usize {
        self.open
    }

    /// A connection from `ip` arrived: admitted (counted open until
    /// [`Admission::release`]) or refused.
    pub fn admit(&mut self, now: Instant, ip: IpAddr) -> Result<(), Refusal> {
        let res = self.check(now, ip);
        match res {
            Ok(()) => {
                self.open += 1;
                *self.per_ip.entry(ip).or_default() += 1;
                self.stats.accepted += 1;
            }
            Err(_) => self.stats.refused += 1,
        }
        res
    }

    fn check(&mut self, now: Instant, ip: IpAddr) -> Result<(), Refusal> {
        if let Some(ban) = self.bans.get_mut(&ip)
            && ban.until > now
        {
            ban.refused += 1;
            return Err(Refusal::Banned { until: ban.until, first: ban.refused == 1 });
        }
        if self.open >= self.cfg.max_conns {
            return Err(Refusal::Full { open: self.open });
        }
        let from = self.per_ip.get(&ip).copied().unwrap_or(0);
        if from >= self.cfg.max_conns_per_ip {
            return Err(Refusal::FullForSource { open: from });
        }
        Ok(())
    }

    /// An admitted connection from `ip` closed.
    pub fn release(&mut self, ip: IpAddr) {
        if let Some(n) = self.per_ip.get_mut(&ip) {
            *n -= 1;
            self.open -= 1;
            if *n == 0 {
                self.per_ip.remove(&ip);
            }
        }
    }

    /// A connection from `ip` misbehaved and was cut off: bans the source, for
    /// longer if it was banned before (and the last ban ended less than
    /// `ban_max` ago). Returns the length of the ban it starts, or `None` when
    /// the source is banned already (several connections of one source cut off
    /// together make one offence, logged once).
    pub fn punish(&mut self, now: Instant, ip: IpAddr) -> Option<Duration> {
        self.stats.cut_off += 1;
        self.forget_old(now);
        let (min, max) = (self.cfg.ban_min, self.cfg.ban_max);
        let ban = self.bans.entry(ip).or_insert(Ban { until: now, backoff: Backoff::default(), refused: 0 });
        if ban.until > now {
            return None;
        }
        let wait = ban.backoff.fail(min, max);
        ban.until = now + wait;
        ban.refused = 0;
        Some(wait)
    }

    /// [`Admission::punish`], unless `spare`: then the cut is counted and no
    /// ban starts (the adapter spares addresses it shares with honest peers).
    pub fn punish_unless(&mut self, now: Instant, ip: IpAddr, spare: bool) -> Option<Duration> {
        if spare {
            self.stats.cut_off += 1;
            return None;
        }
        self.punish(now, ip)
    }

    /// Whether `ip` is banned now.
    pub fn is_banned(&self, now: Instant, ip: IpAddr) -> bool {
        self.bans.get(&ip).is_some_and(|b| b.until > now)
    }

    /// Forgets bans over for `ban_max` (a later offence starts at `ban_min`
    /// again), and, past [`MAX_BANS`], the ones ending first.
    fn forget_old(&mut self, now: Instant) {
        let max = self.cfg.ban_max;
        self.bans.retain(|_, b| b.until + max > now);
        while self.bans.len() >= MAX_BANS {
            // The loop runs only on a non-empty map.
            let first = self.bans.iter().min_by_key(|(_, b)| b.until).map(|(ip, _)| *ip).expect("not empty");
            self.bans.remove(&first);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_bucket_spends_its_burst_then_refills_at_its_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(100, 10, t0);
        assert!((0..10).all(|_| b.try_take(t0, 1)), "the burst at once");
        assert!(!b.try_take(t0, 1), "then nothing");
        assert!(!b.try_take(t0 + ms(9), 1), "0.9 of a token after 9 ms");
        assert!(b.try_take(t0 + ms(10), 1), "one token per 10 ms");
        assert!(!b.try_take(t0 + ms(10), 1));
        assert!(b.try_take(t0 + ms(10_000), 10), "refilled to the burst...");
        assert!(!b.try_take(t0 + ms(10_000), 1), "...and no more");
        assert!(!b.try_take(t0 + ms(5), 1), "time going back refills nothing");
        let mut free = TokenBucket::new(0, 0, t0);
        assert!(free.try_take(t0, u64::MAX) && free.charge(t0, u64::MAX).is_zero(), "rate 0 is unlimited");
    }

    #[test]
    fn a_charge_over_the_bucket_says_how_long_to_pause() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1000, 1000, t0);
        assert_eq!(b.charge(t0, 1000), Duration::ZERO);
        assert_eq!(b.charge(t0, 500), ms(500), "500 bytes of debt at 1000/s");
        assert_eq!(b.charge(t0 + ms(500), 0), Duration::ZERO, "paid off");
        assert!(!b.try_take(t0 + ms(500), 1));
    }

    #[test]
    fn caps_count_open_connections_in_total_and_per_source() {
        let t0 = Instant::now();
        let cfg = GuardConfig { max_conns: 3, max_conns_per_ip: 2, ..GuardConfig::default() };
        let mut a = Admission::new(cfg);
        let (x, y, z): (IpAddr, IpAddr, IpAddr) =
            ("198.18.0.1".parse().unwrap(), "198.18.0.2".parse().unwrap(), "198.18.0.3".parse().unwrap());
        assert_eq!((a.admit(t0, x), a.admit(t0, x)), (Ok(()), Ok(())));
        assert_eq!(a.admit(t0, x), Err(Refusal::FullForSource { open: 2 }));
        assert_eq!(a.admit(t0, y), Ok(()));
        assert_eq!(a.admit(t0, z), Err(Refusal::Full { open: 3 }));
        a.release(x);
        assert_eq!(a.admit(t0, z), Ok(()), "a closed connection frees its place");
        a.release("198.18.0.9".parse().unwrap());
        assert_eq!(a.open(), 3, "releasing what was never admitted changes nothing");
        assert_eq!(a.stats(), GuardStats { accepted: 4, refused: 2, cut_off: 0 });
    }

    #[test]
    fn a_misbehaving_source_is_banned_for_longer_each_time_and_others_are_not() {
        let t0 = Instant::now();
        let cfg = GuardConfig { ban_min: ms(100), ban_max: ms(1000), ..GuardConfig::default() };
        let mut a = Admission::new(cfg);
        let (bad, good): (IpAddr, IpAddr) = ("198.18.0.66".parse().unwrap(), "198.18.0.7".parse().unwrap());
        assert_eq!(a.punish(t0, bad), Some(ms(100)));
        assert_eq!(a.punish(t0 + ms(50), bad), None, "a second cut during the ban is the same offence");
        assert_eq!(a.admit(t0 + ms(10), bad), Err(Refusal::Banned { until: t0 + ms(100), first: true }));
        assert_eq!(a.admit(t0 + ms(20), bad), Err(Refusal::Banned { until: t0 + ms(100), first: false }));
        assert_eq!(a.admit(t0 + ms(20), good), Ok(()), "another source is not disturbed");
        assert_eq!(a.admit(t0 + ms(100), bad), Ok(()), "the ban is over");
        assert_eq!(a.punish(t0 + ms(200), bad), Some(ms(200)), "a repeat offence doubles it");
        assert!(a.is_banned(t0 + ms(399), bad) && !a.is_banned(t0 + ms(400), bad));
        assert_eq!(a.punish(t0 + ms(5000), bad), Some(ms(100)), "forgiven after ban_max of good behaviour");
        assert_eq!(a.stats().cut_off, 4);
    }
}
