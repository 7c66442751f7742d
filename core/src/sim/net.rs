//! The simulated network: per-link latency, loss and partitions, all seeded.

use std::collections::BTreeSet;
use std::time::Duration;

use rand::Rng;
use rand_pcg::Pcg64Mcg;

/// How the simulated network behaves.
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// Lower bound of the one-way latency of a link.
    pub latency_min: Duration,
    /// Upper bound of the one-way latency of a link. Each ordered pair of nodes
    /// gets a fixed latency drawn uniformly from `[latency_min, latency_max]`, so a
    /// link delivers in order, like a TCP connection.
    pub latency_max: Duration,
    /// Probability that a message is lost silently (0.0 ..= 1.0).
    pub loss: f64,
    /// Report a send to a crashed or unknown node back to the sender as a failed
    /// send (a refused or reset TCP connection). When false such messages vanish
    /// and the sender learns only from its own timeouts.
    pub report_failures: bool,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            latency_min: Duration::from_millis(5),
            latency_max: Duration::from_millis(50),
            loss: 0.0,
            report_failures: true,
        }
    }
}

/// The seeded model behind [`super::Sim`]: decides each message's fate.
#[derive(Debug)]
pub(crate) struct Net {
    config: NetConfig,
    seed: u64,
    rng: Pcg64Mcg,
    cut: BTreeSet<(usize, usize)>,
}

/// What happens to one message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    Arrive(Duration),
    Lost,
}

impl Net {
    pub(crate) fn new(config: NetConfig, seed: u64) -> Self {
        let rng = Pcg64Mcg::new(u128::from(seed) << 64 | 0x5851_f42d_4c95_7f2d);
        Net { config, seed, rng, cut: BTreeSet::new() }
    }

    pub(crate) fn config(&self) -> &NetConfig {
        &self.config
    }

    /// The fixed one-way latency of link `from -> to`: a hash of the pair and the
    /// seed, so it costs no memory per link and never changes during a run.
    pub(crate) fn latency(&self, from: usize, to: usize) -> Duration {
        let lo = self.config.latency_min.as_nanos() as u64;
        let hi = self.config.latency_max.as_nanos() as u64;
        if hi <= lo {
            return self.config.latency_min;
        }
        let h = mix(self.seed ^ mix((from as u64) << 32 ^ to as u64));
        Duration::from_nanos(lo + h % (hi - lo + 1))
    }

    pub(crate) fn fate(&mut self, from: usize, to: usize) -> Fate {
        if self.cut.contains(&ordered(from, to)) {
            return Fate::Lost;
        }
        if self.config.loss > 0.0 && self.rng.random_bool(self.config.loss.clamp(0.0, 1.0)) {
            return Fate::Lost;
        }
        Fate::Arrive(self.latency(from, to))
    }

    pub(crate) fn partition(&mut self, a: usize, b: usize) {
        self.cut.insert(ordered(a, b));
    }

    pub(crate) fn heal(&mut self) {
        self.cut.clear();
    }
}

fn ordered(a: usize, b: usize) -> (usize, usize) {
    if a <= b { (a, b) } else { (b, a) }
}

/// SplitMix64's finaliser: a cheap, well-spread 64-bit hash.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_is_fixed_per_link_and_within_bounds() {
        let cfg = NetConfig::default();
        let net = Net::new(cfg.clone(), 7);
        for a in 0..50 {
            for b in 0..50 {
                let l = net.latency(a, b);
                assert!(l >= cfg.latency_min && l <= cfg.latency_max);
                assert_eq!(l, net.latency(a, b));
            }
        }
        let spread: BTreeSet<_> = (0..100).map(|b| net.latency(0, b)).collect();
        assert!(spread.len() > 50, "latencies are spread, got {}", spread.len());
    }

    #[test]
    fn loss_rate_matches_config_and_partitions_cut_both_ways() {
        let mut net = Net::new(NetConfig { loss: 0.25, ..NetConfig::default() }, 1);
        let lost = (0..10_000).filter(|_| net.fate(0, 1) == Fate::Lost).count();
        assert!((2_200..2_800).contains(&lost), "lost {lost} of 10000 at p=0.25");
        let mut net = Net::new(NetConfig::default(), 1);
        net.partition(3, 1);
        assert_eq!(net.fate(1, 3), Fate::Lost);
        assert_eq!(net.fate(3, 1), Fate::Lost);
        assert!(matches!(net.fate(1, 2), Fate::Arrive(_)));
        net.heal();
        assert!(matches!(net.fate(1, 3), Fate::Arrive(_)));
    }
}
