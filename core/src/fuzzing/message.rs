//! Every message type's decoder, one at a time: the first byte picks the body
//! type, the rest is one frame body. What decodes must encode again and decode
//! to the same envelope (so a message a node accepts is one it could have sent).

use std::fmt::Debug;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::wire::{DEFAULT_MAX_FRAME, Goodbye, Hello, decode_envelope, round_trip};

/// The body types on the wire, in selector order (append only: the committed
/// corpus files start with these numbers).
pub const MESSAGE_TYPES: [&str; 12] = [
    "Hello",
    "Goodbye",
    "ChordMsg",
    "CanMsg",
    "MpiMsg",
    "LocalRequest",
    "LocalReply",
    "RankHello",
    "JobMsg",
    "NodeMsg",
    "ToolRequest",
    "ToolReply",
];

/// One frame body through the decoder of the type `data[0]` selects. `true`
/// when it decoded (and survived the round trip).
pub fn message(data: &[u8]) -> bool {
    let Some((&which, body)) = data.split_first() else { return false };
    let frame = Bytes::copy_from_slice(body);
    match usize::from(which) % MESSAGE_TYPES.len() {
        0 => again::<Hello>(frame),
        1 => again::<Goodbye>(frame),
        2 => again::<crate::chord::ChordMsg>(frame),
        3 => again::<crate::can::CanMsg>(frame),
        4 => again::<crate::mpi::MpiMsg>(frame),
        5 => again::<crate::local::LocalRequest>(frame),
        6 => again::<crate::local::LocalReply>(frame),
        7 => again::<crate::local::RankHello>(frame),
        8 => again::<crate::job::JobMsg>(frame),
        9 => again::<crate::node::NodeMsg>(frame),
        10 => again::<crate::node::control::ToolRequest>(frame),
        _ => again::<crate::node::control::ToolReply>(frame),
    }
}

fn again<B: Serialize + DeserializeOwned + PartialEq + Debug>(frame: Bytes) -> bool {
    let len = frame.len();
    let Ok(env) = decode_envelope::<B>(frame) else { return false };
    assert!(env.payload.len() <= len, "payload longer than its frame");
    // A body that decoded from at most `len` bytes encodes to no more than the
    // frame maximum; if it does not, that is the codec's bug.
    let back = round_trip(&env, DEFAULT_MAX_FRAME).expect("a decoded message encodes again");
    assert_eq!(back, env, "decode(encode(m)) != m");
    true
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::*;
    use crate::id::Id;
    use crate::machine::NodeAddr;
    use crate::wire::{Envelope, encode_frame};

    fn seed<B: Serialize>(which: u8, body: B) -> Vec<u8> {
        let me = NodeAddr::loopback(1, 7400);
        let mut buf = BytesMut::new();
        encode_frame(&Envelope::new(me.id(), me, 3, body), &mut buf, DEFAULT_MAX_FRAME).unwrap();
        let mut out = vec![which];
        out.extend_from_slice(&buf[crate::wire::LEN_PREFIX..]);
        out
    }

    /// One message of most types, as the seed corpus of the `message` target.
    pub(super) fn seeds() -> Vec<(&'static str, Vec<u8>)> {
        let me = NodeAddr::loopback(1, 7400);
        let key = Id::hash("k");
        let job = crate::job::JobId(key);
        let ckpt = crate::ckpt::CheckpointInfo { epoch: 1, unix_ms: 1 << 40, stored_bytes: 300, raw_bytes: 900 };
        let cut = crate::ckpt::CutInfo::of([&ckpt]);
        vec![
            ("hello", seed(0, Hello { network_id: 0, listen: me, overlay: None })),
            ("goodbye", seed(1, Goodbye::Leaving)),
            ("chord_find", seed(2, crate::chord::ChordMsg::FindSuccessor { key })),
            ("mpi_ack", seed(4, crate::mpi::MpiMsg::Ack { ack: 7, credit: 1 << 20 })),
            ("local_resolve", seed(5, crate::local::LocalRequest::Resolve { key })),
            ("local_registered", seed(6, crate::local::LocalReply::Registered { key })),
            ("rank_hello", seed(7, crate::local::RankHello { job: b"job".to_vec(), from_rank: 1, to_rank: 2 })),
            ("node_heartbeat", seed(9, crate::node::NodeMsg::Heartbeat { running: vec![] })),
            ("tool_nodes", seed(10, crate::node::control::ToolRequest::Nodes)),
            ("tool_values", seed(11, crate::node::control::ToolReply::Values { values: vec!["v".into()] })),
            ("local_checkpointed", seed(5, crate::local::LocalRequest::Checkpointed { ckpt, request: 1 })),
            ("local_checkpoint_wanted", seed(6, crate::local::LocalReply::CheckpointWanted { request: 1 })),
            ("job_checkpointed", seed(8, crate::job::JobMsg::Checkpointed { job, rank: 1, ckpt, request: 1 })),
            ("tool_checkpoint", seed(10, crate::node::control::ToolRequest::Checkpoint { job })),
            ("tool_checkpoint_taken", seed(11, crate::node::control::ToolReply::CheckpointTaken { job, cut })),
        ]
    }

    /// The seeds decode through the type their first byte names (so the
    /// selector is what the corpus says), and nothing decodes as every type.
    /// `P2PMP_WRITE_SEEDS=1` writes them to fuzz/corpus/message/.
    #[test]
    fn each_seed_decodes_as_its_own_type() {
        for (name, bytes) in seeds() {
            assert!(message(&bytes), "{name} does not decode");
        }
        assert!(!message(&[2, 0xff, 0xff, 0xff]), "junk is no ChordMsg");
        assert!(!message(&[]));
        if std::env::var_os("P2PMP_WRITE_SEEDS").is_some() {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/message");
            std::fs::create_dir_all(&dir).unwrap();
            for (name, bytes) in seeds() {
                std::fs::write(dir.join(name), bytes).unwrap();
            }
        }
    }
}
