//! Every `CanMsg` variant survives the whole frame path; tags and bytes are pinned.

use proptest::prelude::*;

use super::super::msg::{CanMsg, Entry, NodeInfo, Peer, RouteStep};
use super::super::zone::{Point, Zone};
use crate::id::Id;
use crate::machine::NodeAddr;
use crate::wire::{DEFAULT_MAX_FRAME, Envelope};

fn arb_peer() -> impl Strategy<Value = Peer> {
    (any::<u32>(), any::<u16>()).prop_map(|(n, p)| Peer::from_addr(NodeAddr::loopback(n, p)))
}

fn arb_point(dims: usize) -> impl Strategy<Value = Point> {
    proptest::collection::vec(any::<u32>(), dims).prop_map(|c| Point::new(&c).unwrap())
}

fn arb_zone(dims: usize) -> impl Strategy<Value = Zone> {
    (arb_point(dims), 0..=32 * dims).prop_map(|(p, depth)| Zone::containing(&p, depth))
}

fn arb_info() -> impl Strategy<Value = NodeInfo> {
    (arb_peer(), any::<u64>(), proptest::collection::vec(arb_zone(2), 0..3))
        .prop_map(|(peer, version, zones)| NodeInfo { peer, version, zones })
}

fn arb_infos() -> impl Strategy<Value = Vec<NodeInfo>> {
    proptest::collection::vec(arb_info(), 0..5)
}

fn arb_entry() -> impl Strategy<Value = Entry> {
    (".{0,20}", ".{0,20}", any::<u64>()).prop_map(|(name, value, ttl_ms)| Entry { name, value, ttl_ms })
}

fn arb_entries() -> impl Strategy<Value = Vec<Entry>> {
    proptest::collection::vec(arb_entry(), 0..4)
}

fn arb_msg() -> impl Strategy<Value = CanMsg> {
    prop_oneof![
        (1usize..=8).prop_flat_map(arb_point).prop_map(|target| CanMsg::Route { target }),
        Just(CanMsg::RouteReply(RouteStep::Done)),
        arb_infos().prop_map(|candidates| CanMsg::RouteReply(RouteStep::Next { candidates })),
        (arb_point(3), any::<u8>()).prop_map(|(point, dims)| CanMsg::Join { point, dims }),
        (arb_zone(2), arb_infos(), arb_entries()).prop_map(|(zone, neighbours, entries)| CanMsg::JoinAccept {
            zone,
            neighbours,
            entries
        }),
        any::<u8>().prop_map(|dims| CanMsg::WrongDims { dims }),
        Just(CanMsg::Busy),
        Just(CanMsg::NotOwner),
        (arb_info(), proptest::option::of(arb_infos()))
            .prop_map(|(info, neighbours)| CanMsg::Heartbeat { info, neighbours }),
        arb_info().prop_map(|info| CanMsg::Update { info }),
        arb_info().prop_map(|info| CanMsg::Probe { info }),
        (arb_info(), arb_infos()).prop_map(|(info, neighbours)| CanMsg::ProbeReply { info, neighbours }),
        (arb_zone(4), arb_entries(), arb_infos()).prop_map(|(zone, entries, neighbours)| CanMsg::Handoff {
            zone,
            entries,
            neighbours
        }),
        arb_info().prop_map(|info| CanMsg::Accepted { info }),
        arb_zone(8).prop_map(|region| CanMsg::FindPair { region }),
        Just(CanMsg::Freed),
        (arb_zone(2), arb_infos()).prop_map(|(region, candidates)| CanMsg::Deeper { region, candidates }),
        Just(CanMsg::Retry),
        (arb_info(), arb_peer()).prop_map(|(info, dead)| CanMsg::Claim { info, dead }),
        Just(CanMsg::Gone),
        arb_entry().prop_map(|entry| CanMsg::Register { entry }),
        Just(CanMsg::Registered),
        ".{0,20}".prop_map(|name| CanMsg::Query { name }),
        proptest::collection::vec(".{0,10}", 0..4).prop_map(|values| CanMsg::QueryResult { values }),
        arb_entries().prop_map(|entries| CanMsg::Replicate { entries }),
        Just(CanMsg::NotJoined),
        (arb_peer(), arb_point(2)).prop_map(|(to, point)| CanMsg::JoinElsewhere { to, point }),
    ]
}

proptest! {
    #[test]
    fn every_variant_round_trips(msg in arb_msg(), sender in arb_peer(), rid in any::<u64>()) {
        let env = Envelope::new(sender.id, sender.addr, rid, msg);
        prop_assert_eq!(crate::wire::round_trip(&env, DEFAULT_MAX_FRAME).unwrap(), env);
    }

    #[test]
    fn random_bytes_never_panic_the_decoder(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        crate::fuzzing::can_node(&data);
    }
}

fn a(n: u32) -> NodeAddr {
    NodeAddr::loopback(n, 7000)
}

/// One message of every kind, in tag order.
fn one_of_each() -> Vec<CanMsg> {
    let zone = Zone::new(1, &[1 << 31, 0]).unwrap();
    let info = NodeInfo { peer: Peer::from_addr(a(1)), version: 3, zones: vec![zone] };
    let entry = Entry { name: "n".into(), value: "v".into(), ttl_ms: 1000 };
    let point = Point::new(&[1, 2]).unwrap();
    vec![
        CanMsg::Route { target: point },
        CanMsg::RouteReply(RouteStep::Done),
        CanMsg::Join { point, dims: 2 },
        CanMsg::JoinAccept { zone, neighbours: vec![info.clone()], entries: vec![entry.clone()] },
        CanMsg::WrongDims { dims: 3 },
        CanMsg::Busy,
        CanMsg::NotOwner,
        CanMsg::Heartbeat { info: info.clone(), neighbours: None },
        CanMsg::Update { info: info.clone() },
        CanMsg::Probe { info: info.clone() },
        CanMsg::ProbeReply { info: info.clone(), neighbours: vec![] },
        CanMsg::Handoff { zone, entries: vec![], neighbours: vec![] },
        CanMsg::Accepted { info: info.clone() },
        CanMsg::FindPair { region: zone },
        CanMsg::Freed,
        CanMsg::Deeper { region: zone, candidates: vec![] },
        CanMsg::Retry,
        CanMsg::Claim { info, dead: Peer::from_addr(a(2)) },
        CanMsg::Gone,
        CanMsg::Register { entry: entry.clone() },
        CanMsg::Registered,
        CanMsg::Query { name: "n".into() },
        CanMsg::QueryResult { values: vec!["v".into()] },
        CanMsg::Replicate { entries: vec![entry] },
        CanMsg::NotJoined,
        CanMsg::JoinElsewhere { to: Peer::from_addr(a(3)), point },
    ]
}

#[test]
fn variant_tags_are_pinned() {
    let msgs = one_of_each();
    assert_eq!(msgs.len(), CanMsg::KINDS);
    for (i, m) in msgs.iter().enumerate() {
        let bytes = postcard::to_allocvec(m).unwrap();
        assert_eq!(usize::from(bytes[0]), i, "{m:?}");
        assert_eq!(m.kind(), i);
    }
}

#[test]
fn golden_bytes() {
    // postcard: variant index, then fields in order; a zone is (depth, corner).
    let zone = Zone::new(1, &[1 << 31, 0]).unwrap();
    let hex = |m: &CanMsg| postcard::to_allocvec(m).unwrap().iter().map(|b| format!("{b:02x}")).collect::<String>();
    assert_eq!(hex(&CanMsg::Route { target: Point::new(&[1, 300]).unwrap() }), "000201ac02");
    assert_eq!(hex(&CanMsg::FindPair { region: zone }), "0d010280808080080 0".replace(' ', ""));
    assert_eq!(hex(&CanMsg::Join { point: Point::new(&[5]).unwrap(), dims: 1 }), "02010501");
    let entry = Entry { name: "a".into(), value: "b".into(), ttl_ms: 128 };
    assert_eq!(hex(&CanMsg::Register { entry }), "130161016280 01".replace(' ', ""));
    let info = NodeInfo { peer: Peer { id: Id::ZERO, addr: a(0) }, version: 2, zones: vec![Zone::root(1)] };
    let mut want = String::from("08");
    want += &"00".repeat(20); // id
    want += "007f000001d836"; // V4 127.0.0.1, port 7000 (varint)
    want += "0201000100"; // version 2, one zone: depth 0, corner [0]
    assert_eq!(hex(&CanMsg::Update { info }), want);
    // A zone that is no zone of the split tree does not decode.
    let bad = [0x0d, 0x01, 0x02, 0x01, 0x00]; // depth 1, corner (1, 0): not aligned
    assert!(postcard::from_bytes::<CanMsg>(&bad).is_err());
}
