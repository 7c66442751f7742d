//! What the overlay invariant tests share: random schedules of joins, leaves,
//! crashes, registrations and quiet time, and the proptest configuration (fixed
//! seeds by default, a search on demand).

use proptest::prelude::*;
use proptest::test_runner::RngSeed;

/// Cases per property: `PROPTEST_CASES`, or 256.
pub(crate) fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
}

/// The normal suite runs the same schedules every time (CI must not depend on
/// luck); `PROPTEST_RNG_SEED=N` picks another set, `PROPTEST_RNG_SEED=random` a
/// fresh one, for longer searches together with `PROPTEST_CASES`.
pub(crate) fn config(default_seed: u64) -> ProptestConfig {
    let rng_seed = match std::env::var("PROPTEST_RNG_SEED").ok().as_deref() {
        Some("random") => RngSeed::Random,
        Some(v) => RngSeed::Fixed(v.parse().unwrap_or(default_seed)),
        None => RngSeed::Fixed(default_seed),
    };
    ProptestConfig { cases: cases(), rng_seed, ..ProptestConfig::default() }
}

/// Picks one of `len` candidates (shrinks towards the first).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pick(pub(crate) u64);

impl Pick {
    pub(crate) fn index(self, len: usize) -> usize {
        ((u128::from(self.0) * len as u128) >> 64) as usize
    }
}

/// One step of a schedule.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    Join { contact: Pick },
    Leave(Pick),
    Crash(Pick),
    Register { node: Pick, name: u8 },
    Run { ms: u16 },
}

pub(crate) fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => any::<u64>().prop_map(Pick).prop_map(|contact| Op::Join { contact }),
        1 => any::<u64>().prop_map(Pick).prop_map(Op::Leave),
        1 => any::<u64>().prop_map(Pick).prop_map(Op::Crash),
        3 => (any::<u64>().prop_map(Pick), 0u8..6).prop_map(|(node, name)| Op::Register { node, name }),
        2 => (1u16..5000).prop_map(|ms| Op::Run { ms }),
    ]
}
