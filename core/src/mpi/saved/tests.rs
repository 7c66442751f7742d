use super::*;
use crate::mpi::tests::harness::{Pat, World, tight_config};

/// Rank 1 receives part of a stream from 0 and 2, moves while frames are
/// in flight both ways and messages wait unreceived, and the rest arrives
/// once, in order, with the right data (the harness checks every delivery).
#[test]
fn a_rank_moved_mid_stream_loses_and_duplicates_nothing() {
    let mut w = World::new(3, tight_config());
    let any = Pat { comm: 0, src: None, tag: None };
    for i in 0..6 {
        w.send(0, 1, 0, i, 40, false);
        w.send(2, 1, 0, i, 200, false);
        w.send(1, 0, 0, i, 30, false);
    }
    w.deliver(0, 4);
    w.deliver(1, 3);
    w.recv(1, any);
    w.deliver(0, 100);
    assert!(w.engines[1].unexpected_len() > 0, "messages wait unreceived across the move");
    assert!(w.move_rank(1), "rank 1 is quiet: nothing posted, its sends completed");
    for i in 6..9 {
        w.send(0, 1, 0, i, 40, false);
        w.send(1, 2, 0, i, 20, false);
    }
    assert!(w.move_rank(1), "and moves again");
    w.finish();
    assert_eq!(w.moves, 2);
}

#[test]
fn a_busy_engine_is_not_saved_and_a_bad_state_is_not_restored() {
    let mut w = World::new(2, tight_config());
    w.recv(0, Pat { comm: 0, src: None, tag: None });
    assert_eq!(w.engines[0].save(), Err(SaveError::NotQuiet("receives are posted")));
    w.send(1, 0, 0, 0, 400, false);
    assert_eq!(w.engines[1].save(), Err(SaveError::NotQuiet("a rendezvous is under way")));
    w.finish();

    let e = MpiEngine::new(tight_config(), 1, 3).unwrap();
    let saved = e.save().unwrap();
    let other = MpiEngine::restore(tight_config(), 2, 3, saved.clone()).unwrap_err();
    assert!(matches!(other, SaveError::Other { rank: 1, want_rank: 2, .. }), "{other}");
    let bytes = saved.encode();
    assert!(SavedEngine::decode(&bytes, bytes.len() - 1).is_err(), "over the bound");
    assert!(SavedEngine::decode(&bytes[..bytes.len() - 1], bytes.len()).is_err(), "cut short");
    let mut gap = saved.clone();
    gap.unacked.push(SavedFrame {
        to: 0,
        msg: MpiMsg::Eager { hdr: crate::mpi::SeqHdr { seq: 5, ack: 0, credit: 0 }, comm: 0, tag: 0 },
        payload: Bytes::new(),
    });
    let e = MpiEngine::restore(tight_config(), 1, 3, gap).unwrap_err();
    assert!(matches!(e, SaveError::Malformed(_)), "{e}");
    let mut own = saved;
    own.unexpected.push(SavedMessage { comm: 0, src: 1, tag: 0, seq: 1, held: SavedHeld::Rts { rts_seq: 1, len: 9 } });
    assert!(MpiEngine::restore(tight_config(), 1, 3, own).is_err(), "a message from itself");
}
