//! Every `ChordMsg` variant survives the whole frame path.

use proptest::prelude::*;

use super::super::{Entry, Step};
use super::*;
use crate::wire::DEFAULT_MAX_FRAME;

fn round_trip(env: &Envelope<ChordMsg>) -> Envelope<ChordMsg> {
    crate::wire::round_trip(env, DEFAULT_MAX_FRAME).unwrap()
}

fn arb_id() -> impl Strategy<Value = Id> {
    any::<[u8; 20]>().prop_map(Id::from_bytes)
}

fn arb_addr() -> impl Strategy<Value = NodeAddr> {
    prop_oneof![
        (any::<u32>(), any::<u16>()).prop_map(|(n, p)| NodeAddr::loopback(n, p)),
        (any::<[u16; 8]>(), any::<u16>()).prop_map(|(ip, p)| NodeAddr(std::net::SocketAddr::new(ip.into(), p))),
    ]
}

fn arb_peer() -> impl Strategy<Value = Peer> {
    (arb_id(), arb_addr()).prop_map(|(id, addr)| Peer { id, addr })
}

fn arb_peers() -> impl Strategy<Value = Vec<Peer>> {
    proptest::collection::vec(arb_peer(), 0..10)
}

fn arb_entry() -> impl Strategy<Value = Entry> {
    (".{0,40}", ".{0,40}", any::<u64>()).prop_map(|(name, value, ttl_ms)| Entry { name, value, ttl_ms })
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        arb_peer().prop_map(|owner| Step::Done { owner }),
        arb_peers().prop_map(|candidates| Step::Next { candidates })
    ]
}

pub(super) fn arb_msg() -> impl Strategy<Value = ChordMsg> {
    prop_oneof![
        arb_id().prop_map(|key| ChordMsg::FindSuccessor { key }),
        arb_step().prop_map(ChordMsg::FindSuccessorReply),
        Just(ChordMsg::GetPredecessor),
        (proptest::option::of(arb_peer()), arb_peers())
            .prop_map(|(predecessor, successors)| ChordMsg::Predecessor { predecessor, successors }),
        Just(ChordMsg::Notify),
        Just(ChordMsg::Ping),
        Just(ChordMsg::Pong),
        (arb_entry(), any::<u8>()).prop_map(|(entry, replicas)| ChordMsg::Register { entry, replicas }),
        ".{0,40}".prop_map(|name| ChordMsg::Query { name }),
        proptest::collection::vec(".{0,20}", 0..8).prop_map(|values| ChordMsg::QueryResult { values }),
        arb_peers().prop_map(|successors| ChordMsg::LeavingToPredecessor { successors }),
        proptest::option::of(arb_peer()).prop_map(|predecessor| ChordMsg::LeavingToSuccessor { predecessor }),
        proptest::collection::vec(arb_entry(), 0..6).prop_map(|entries| ChordMsg::KeyTransfer { entries }),
        (proptest::collection::vec(arb_entry(), 0..6), any::<u8>())
            .prop_map(|(entries, hops)| ChordMsg::Handover { entries, hops }),
        Just(ChordMsg::GetSuccessorList),
        arb_peers().prop_map(|successors| ChordMsg::SuccessorList { successors }),
        Just(ChordMsg::GetFingers),
        arb_peer().prop_map(|predecessor| ChordMsg::NewPredecessor { predecessor }),
        Just(ChordMsg::Registered),
        Just(ChordMsg::NotOwner),
        Just(ChordMsg::NotJoined),
        arb_id().prop_map(|after| ChordMsg::Pull { after }),
        proptest::collection::vec((any::<u8>(), arb_peer()), 0..20).prop_map(|fingers| ChordMsg::Fingers { fingers }),
    ]
}

proptest! {
    #[test]
    fn every_variant_round_trips(msg in arb_msg(), sender in arb_peer(), rid in any::<u64>()) {
        let env = Envelope::new(sender.id, sender.addr, rid, msg);
        prop_assert_eq!(round_trip(&env), env);
    }

    #[test]
    fn random_frames_never_panic_the_decoder(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        crate::fuzzing::envelope(&data);
    }
}

#[test]
fn variant_tags_are_pinned() {
    // postcard writes the variant index first: `kind()` must match it, and neither may change.
    let msgs = [
        ChordMsg::FindSuccessor { key: Id::ZERO },
        ChordMsg::FindSuccessorReply(Step::Next { candidates: vec![] }),
        ChordMsg::GetPredecessor,
        ChordMsg::Predecessor { predecessor: None, successors: vec![] },
        ChordMsg::Notify,
        ChordMsg::Ping,
        ChordMsg::Pong,
        ChordMsg::Register { entry: Entry { name: String::new(), value: String::new(), ttl_ms: 0 }, replicas: 0 },
        ChordMsg::Query { name: String::new() },
        ChordMsg::QueryResult { values: vec![] },
        ChordMsg::LeavingToPredecessor { successors: vec![] },
        ChordMsg::LeavingToSuccessor { predecessor: None },
        ChordMsg::KeyTransfer { entries: vec![] },
        ChordMsg::GetSuccessorList,
        ChordMsg::SuccessorList { successors: vec![] },
        ChordMsg::GetFingers,
        ChordMsg::Fingers { fingers: vec![] },
        ChordMsg::NewPredecessor { predecessor: Peer::from_addr(addr(1)) },
        ChordMsg::Registered,
        ChordMsg::NotOwner,
        ChordMsg::NotJoined,
        ChordMsg::Handover { entries: vec![], hops: 0 },
        ChordMsg::Pull { after: Id::ZERO },
    ];
    assert_eq!(msgs.len(), ChordMsg::KINDS);
    for (i, m) in msgs.iter().enumerate() {
        let bytes = postcard::to_allocvec(m).unwrap();
        assert_eq!(usize::from(bytes[0]), i);
        assert_eq!(m.kind(), i);
    }
}
