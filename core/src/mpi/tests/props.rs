//! Random interleavings of sends, receives, probes, cancels (of receives and of
//! sends), deliveries across links, connection breaks and reconnects, and
//! ranks moving to a new process (their engine saved and restored), checked
//! against the reference model.

use proptest::prelude::*;

use super::harness::{Pat, World, tight_config};

#[derive(Debug, Clone)]
enum Op {
    Send { from: usize, to: usize, comm: u32, tag: i32, len: usize, sync: bool },
    Recv { at: usize, pat: Pat },
    Probe { at: usize, pat: Pat },
    Cancel { at: usize, nth: usize },
    CancelSend { nth: usize },
    Deliver { pick: usize, k: usize },
    Break { a: usize, b: usize },
    Reconnect { a: usize, b: usize },
    Lose { a: usize, b: usize, k: usize },
    Tick { ms: u64 },
    Move { at: usize },
}

fn arb_len() -> impl Strategy<Value = usize> {
    // Around the 128-byte eager threshold and the 100-byte chunk of tight_config.
    prop_oneof![3 => 0..=16usize, 3 => 17..=140usize, 2 => 141..=420usize]
}

fn arb_pat(n: usize) -> impl Strategy<Value = Pat> {
    (0..2u32, prop::option::weighted(0.6, 0..n as u32), prop::option::weighted(0.6, 0..3i32))
        .prop_map(|(comm, src, tag)| Pat { comm, src, tag })
}

fn arb_op(n: usize, breaks: u32) -> impl Strategy<Value = Op> {
    let r = 0..n;
    prop_oneof![
        6 => (r.clone(), r.clone(), 0..2u32, 0..3i32, arb_len(), prop::bool::weighted(0.2))
            .prop_map(|(from, to, comm, tag, len, sync)| Op::Send { from, to, comm, tag, len, sync }),
        5 => (r.clone(), arb_pat(n)).prop_map(|(at, pat)| Op::Recv { at, pat }),
        2 => (r.clone(), arb_pat(n)).prop_map(|(at, pat)| Op::Probe { at, pat }),
        1 => (r.clone(), any::<usize>()).prop_map(|(at, nth)| Op::Cancel { at, nth }),
        1 => any::<usize>().prop_map(|nth| Op::CancelSend { nth }),
        10 => (any::<usize>(), 1..6usize).prop_map(|(pick, k)| Op::Deliver { pick, k }),
        breaks => (r.clone(), r.clone()).prop_map(|(a, b)| Op::Break { a, b }),
        breaks => (r.clone(), r.clone()).prop_map(|(a, b)| Op::Reconnect { a, b }),
        breaks / 2 => (r.clone(), r.clone(), 1..4usize).prop_map(|(a, b, k)| Op::Lose { a, b, k }),
        // Nested: prop_oneof! takes at most ten arms before it refuses a weight of 0.
        1 + breaks => prop_oneof![
            1 => (0..3u64).prop_map(|ms| Op::Tick { ms }),
            breaks => r.prop_map(|at| Op::Move { at }),
        ],
    ]
}

fn arb_scenario(breaks: u32) -> impl Strategy<Value = (usize, Vec<Op>)> {
    (2..=4usize).prop_flat_map(move |n| (Just(n), prop::collection::vec(arb_op(n, breaks), 1..200)))
}

/// Several senders flood rank 0 with eager-sized messages while it rarely posts a
/// receive: credit runs out, senders fall back to rendezvous, and the receiver's
/// unexpected buffer must stay within its bound.
fn arb_flood() -> impl Strategy<Value = (usize, Vec<Op>)> {
    (2..=4usize).prop_flat_map(|n| {
        let op = prop_oneof![
            8 => (1..n, 0..2i32, 0..=128usize).prop_map(|(from, tag, len)| Op::Send { from, to: 0, comm: 0, tag, len, sync: false }),
            1 => (prop::option::of(0..n as u32), prop::option::of(0..2i32))
                .prop_map(|(src, tag)| Op::Recv { at: 0, pat: Pat { comm: 0, src, tag } }),
            8 => (any::<usize>(), 1..6usize).prop_map(|(pick, k)| Op::Deliver { pick, k }),
            1 => (0..n, 0..n).prop_map(|(a, b)| Op::Reconnect { a, b }),
            1 => (0..3u64).prop_map(|ms| Op::Tick { ms }),
        ];
        (Just(n), prop::collection::vec(op, 1..150))
    })
}

fn run(n: usize, ops: &[Op]) {
    let mut w = World::new(n, tight_config());
    for op in ops {
        match *op {
            Op::Send { from, to, comm, tag, len, sync } => w.send(from, to, comm, tag, len, sync),
            Op::Recv { at, pat } => w.recv(at, pat),
            Op::Probe { at, pat } => w.probe(at, pat),
            Op::Cancel { at, nth } => w.cancel(at, nth),
            Op::CancelSend { nth } => w.cancel_send(nth),
            Op::Deliver { pick, k } => w.deliver(pick, k),
            Op::Break { a, b } => w.break_link(a, b),
            Op::Reconnect { a, b } => w.reconnect(a, b),
            Op::Lose { a, b, k } => w.lose(a, b, k),
            Op::Tick { ms } => w.tick(ms),
            Op::Move { at } => {
                w.move_rank(at);
            }
        }
    }
    w.finish();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every message is delivered exactly once, to the receive the reference model
    /// picks, with the right data; probes and cancels agree with the model; the
    /// unexpected buffer stays within its bound; everything ends acknowledged.
    #[test]
    fn engines_match_the_reference_model(s in arb_scenario(1)) {
        run(s.0, &s.1);
    }

    /// The same, with connections breaking (and silently dying) often, and
    /// ranks moving whenever they are quiet.
    #[test]
    fn reconnects_lose_and_duplicate_nothing(s in arb_scenario(4)) {
        run(s.0, &s.1);
    }

    /// A slow receiver is never flooded: credit bounds its unexpected buffer and
    /// nothing is dropped.
    #[test]
    fn a_slow_receiver_is_never_flooded(s in arb_flood()) {
        run(s.0, &s.1);
    }
}
