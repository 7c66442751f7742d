//! Fuzz logic of the daemon's own parsers, compiled and replayed by the normal
//! test suite like `p2pmp_core::fuzzing`; the cargo-fuzz target under `fuzz/`
//! is a one-line shim over it.

use crate::config::Config;

/// A configuration file (any bytes) through the TOML reader and the checks
/// the daemon makes before it starts: nothing panics, and a file that passes
/// the checks yields addresses and limits without overflowing anything.
pub fn config_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(cfg) = toml::from_str::<Config>(text) else { return };
    if cfg.check().is_err() {
        return;
    }
    let bound = std::net::SocketAddr::from(([127, 0, 0, 1], 7400));
    let advertised = cfg.advertised(bound).expect("checked");
    assert!(!advertised.ip().is_unspecified());
    let g = cfg.peers.guard();
    assert!(g.ban_min <= g.ban_max && g.max_conns >= 1);
    let timing = cfg.timing();
    assert!(timing.failure_timeout >= timing.heartbeat_period);
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Replays the committed corpus of the `config_toml` target.
    #[test]
    fn committed_corpus_replays_without_panic() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/config_toml");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display())) {
            super::config_toml(&std::fs::read(entry.unwrap().path()).unwrap());
            n += 1;
        }
        assert!(n > 0, "corpus config_toml is empty");
    }
}
