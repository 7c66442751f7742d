//! Random scenarios (joins, crashes, leaves, lookups) and random peer input, with
//! the ring invariants checked once the dust settles.

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{RngSeed, TestCaseError};

use super::*;

#[derive(Debug, Clone)]
enum Op {
    /// A new node joins through the `n`th live node.
    Join(usize),
    /// The `n`th live node crashes (silently or refusing connections).
    Crash(usize, bool),
    /// The `n`th live node leaves gracefully.
    Leave(usize),
    /// The `n`th live node looks up a key.
    Lookup(usize, u64),
    /// Time passes.
    Run(u64),
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<usize>().prop_map(Op::Join),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(n, s)| Op::Crash(n, s)),
        1 => any::<usize>().prop_map(Op::Leave),
        2 => (any::<usize>(), any::<u64>()).prop_map(|(n, k)| Op::Lookup(n, k)),
        2 => (10u64..3000).prop_map(Op::Run),
    ]
}

fn live(net: &Net) -> Vec<usize> {
    net.up().collect()
}

/// Plays `ops` with `loss_pct`% of messages lost (random stream `seed`), then
/// heals the network: the ring must become exact, fingers true, lookups right.
fn run_scenario(ops: Vec<Op>, loss_pct: u8, seed: u64) -> Result<(), TestCaseError> {
    let mut net = Net::new(ChordConfig::default());
    net.loss = f64::from(loss_pct) / 100.0;
    net.lcg = seed;
    net.add(vec![]);
    let mut departures = 0;
    for op in ops {
        let up = live(&net);
        match op {
            Op::Join(k) => {
                let contact = up[k % up.len()];
                net.add(vec![addr(contact)]);
            }
            Op::Crash(k, silent) if up.len() > 2 && departures < 6 => {
                departures += 1;
                net.crash(up[k % up.len()], if silent { Health::Silent } else { Health::Refusing });
            }
            Op::Leave(k) if up.len() > 2 && departures < 6 => {
                departures += 1;
                net.command(up[k % up.len()], OverlayCommand::Leave);
            }
            Op::Lookup(k, key) => {
                net.command(
                    up[k % up.len()],
                    OverlayCommand::Lookup { token: key % 1_000_000, key: Id::hash(key.to_le_bytes()) },
                );
            }
            Op::Run(ms) => net.run_for(Duration::from_millis(ms)),
            _ => {}
        }
        net.run_for(Duration::from_millis(100));
    }
    // The network heals; the ring must follow.
    net.loss = 0.0;
    net.converge(Duration::from_secs(120));
    net.run_for(Duration::from_secs(40));
    prop_assert_eq!(net.finger_errors(), 0);
    let joined: Vec<usize> = live(&net).into_iter().filter(|&i| net.nodes[i].is_joined()).collect();
    for (t, &from) in joined.iter().enumerate() {
        let key = Id::hash(format!("final{t}"));
        net.command(from, OverlayCommand::Lookup { token: 1_000_000 + t as u64, key });
    }
    net.run_for(Duration::from_secs(6));
    for (_, e) in std::mem::take(&mut net.events) {
        if let OverlayEvent::LookupDone { token, key, result } = e {
            if token >= 1_000_000 {
                prop_assert_eq!(result.unwrap().owner, net.owner(key).addr);
            }
        }
    }
    Ok(())
}

/// 48 fixed cases by default (the suite must not depend on luck);
/// `PROPTEST_CASES=n` and `PROPTEST_RNG_SEED=<u64>` for a longer hunt through
/// other schedules. A schedule found so becomes a named test below.
fn scenario_config() -> ProptestConfig {
    let mut c = ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    };
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        c.rng_seed = RngSeed::Fixed(0x00c4_07d5);
    }
    c
}

proptest! {
    #![proptest_config(scenario_config())]

    #[test]
    fn random_scenarios_converge_to_one_correct_ring(
        ops in proptest::collection::vec(arb_op(), 1..40),
        loss_pct in prop_oneof![Just(0u8), 1u8..15],
        seed in any::<u64>(),
    ) {
        run_scenario(ops, loss_pct, seed)?;
    }

    #[test]
    fn random_peer_input_never_panics_and_the_ring_heals(
        msgs in proptest::collection::vec((0usize..4, super::wire::arb_msg(), 0u8..3, any::<u64>(), any::<bool>()), 1..40),
    ) {
        let mut net = Net::build(ChordConfig::default(), 4, Duration::from_millis(50));
        net.converge(Duration::from_secs(20));
        for (to, body, rid_kind, rid, from_member) in msgs {
            // From a member (so ids check out) or from a stranger; with request id 0,
            // a random one, or one the receiver is actually waiting for.
            let sender = if from_member { net.nodes[(to + 1) % 4].me() } else { Peer::from_addr(addr(99)) };
            let rid = match rid_kind {
                0 => 0,
                1 => rid,
                _ => net.nodes[to].requests.first_id().unwrap_or(rid),
            };
            let now = net.now;
            net.nodes[to].handle_message(now, Envelope::new(sender.id, sender.addr, rid, body));
            net.after(to);
            net.run_for(Duration::from_millis(20));
        }
        net.converge(Duration::from_secs(60));
    }
}

/// Found by the random search: with 11% loss, a chain of joiners (127.0.0.13
/// through .12 through .7, each still joining when the next asked it) took
/// 125 s after the loss stopped to be whole, each waiting out a 30 s back-off
/// after its contact joined (the back-off is capped at 8 s now).
#[test]
fn regression_a_joiner_whose_contact_departs_under_loss_still_joins() {
    use Op::*;
    let ops = vec![
        Join(0),
        Lookup(0, 389560256310585),
        Lookup(10714068827415282438, 2210303892056250148),
        Join(10740144746168841295),
        Lookup(12981832057106141810, 11905245876100679237),
        Join(10745500602600061593),
        Join(3641249791139075533),
        Lookup(5554752140577024531, 9161180180916241662),
        Join(15330462288124935222),
        Lookup(7544635755917979618, 18390695129779110624),
        Join(12112137082369326380),
        Run(79),
        Join(4750426448127094173),
        Join(15602727875214022834),
        Run(2858),
        Join(948221751578787651),
        Leave(7530172343777699568),
        Crash(12958980367219564949, true),
        Join(17189881133973905950),
        Join(6119551908907680039),
        Join(7963629321421921359),
    ];
    run_scenario(ops, 11, 4508101064109828640).unwrap();
}
