use super::*;
use crate::mpi::tests::harness::{Pat, World, tight_config};

/// Rank 1 receives part of a stream from 0 and 2, moves while frames are
/// in flight both ways and messages wait unreceived, and the rest arrives
/// once, in order, with the right data (the harness checks every delivery).
#[test]
fn a_rank_moved_mid_stream_loses_and_duplicates_nothing() {
    let mut w = mid_stream();
    assert!(w.move_rank(1), "rank 1 is quiet: nothing posted, its sends completed");
    for i in 6..9 {
        w.send(0, 1, 0, i, 40, false);
        w.send(1, 2, 0, i, 20, false);
    }
    assert!(w.move_rank(1), "and moves again");
    w.finish();
    assert_eq!(w.moves, 2);
}

/// Three ranks, rank 1 receiving part of a stream from 0 and 2 and
/// sending to 0, with messages waiting unreceived at rank 1 and frames in
/// flight both ways.
fn mid_stream() -> World {
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
    w
}

/// The `saved_engine` fuzz seeds: rank 1's state mid-stream, with frames
/// not yet acknowledged and messages not yet received, alone and as an
/// engine file. `P2PMP_WRITE_SEEDS=1` writes them to fuzz/corpus/saved_engine/.
#[test]
fn a_mid_stream_state_carries_its_frames_and_messages() {
    let saved = mid_stream().save(1).expect("rank 1 is quiet");
    assert!(!saved.unacked.is_empty() && !saved.unexpected.is_empty(), "{saved:?}");
    let bytes = saved.encode();
    assert_eq!(SavedEngine::decode(&bytes, bytes.len()), Ok(saved));
    let header =
        crate::ckpt::EngineHeader { job: crate::job::JobId(crate::id::Id::hash("seed")), epoch: 3, next_ctx: 2 };
    let file = [header.encode(), bytes.clone()].concat();
    if std::env::var_os("P2PMP_WRITE_SEEDS").is_some() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/saved_engine");
        std::fs::write(dir.join("mid-stream"), &bytes).unwrap();
        std::fs::write(dir.join("engine-file-mid-stream"), &file).unwrap();
    }
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

/// Saved messages charged other than the engine charges, beyond a peer's
/// credit, numbered beyond what arrived, or counters near overflow are refused
/// (they panicked or broke the credit bound before).
#[test]
fn a_saved_state_with_forged_charges_or_counters_is_refused() {
    let config = tight_config();
    let base = MpiEngine::new(config.clone(), 1, 2).unwrap().save().unwrap();
    let with = |seq: u64, data: &[u8], charge: u64, recv_next: u64| {
        let mut s = base.clone();
        s.peers[0].recv_next = recv_next;
        let held = SavedHeld::Eager { data: Bytes::copy_from_slice(data), charge };
        s.unexpected.push(SavedMessage { comm: 0, src: 0, tag: 0, seq, held });
        s
    };
    let fair = config.charge(3);
    assert!(MpiEngine::restore(config.clone(), 1, 2, with(1, b"abc", fair, 2)).is_ok());
    for (what, s) in [
        ("a forged charge", with(1, b"abc", u64::MAX, 2)),
        ("a charge other than the engine's", with(1, b"abc", fair + 1, 2)),
        ("a message that never arrived", with(2, b"abc", fair, 2)),
        (
            "over the credit window",
            with(1, &vec![7; config.eager_window as usize], config.charge(config.eager_window as usize), 2),
        ),
    ] {
        let e = MpiEngine::restore(config.clone(), 1, 2, s).unwrap_err();
        assert!(matches!(e, SaveError::Malformed(_)), "{what}: {e}");
    }
    let mut near = base.clone();
    near.peers[0].granted = u64::MAX - 1;
    assert!(MpiEngine::restore(config, 1, 2, near).is_err(), "a counter near overflow");
}
