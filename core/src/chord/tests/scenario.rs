//! Random scenarios (joins, crashes, leaves, lookups) and random peer input, with
//! the ring invariants checked once the dust settles.

use std::time::Duration;

use proptest::prelude::*;

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

proptest! {
    // 48 cases by default; PROPTEST_CASES=n for a longer hunt.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_scenarios_converge_to_one_correct_ring(
        ops in proptest::collection::vec(arb_op(), 1..40),
        loss_pct in prop_oneof![Just(0u8), 1u8..15],
        seed in any::<u64>(),
    ) {
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
                    net.command(up[k % up.len()], OverlayCommand::Lookup { token: key % 1_000_000, key: Id::hash(key.to_le_bytes()) });
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
                _ => net.nodes[to].pending.first_id().unwrap_or(rid),
            };
            let now = net.now;
            net.nodes[to].handle_message(now, Envelope::new(sender.id, sender.addr, rid, body));
            net.after(to);
            net.run_for(Duration::from_millis(20));
        }
        net.converge(Duration::from_secs(60));
    }
}
