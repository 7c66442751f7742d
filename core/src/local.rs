//! The local node protocol: what a process asks the node it runs on, and the hello
//! that opens every rank-to-rank connection.
//!
//! A rank never joins the overlay itself. Over its node's control address
//! (`P2PMP_NODE`) it sends [`LocalRequest`]s in [`crate::wire::Envelope`]s, one
//! frame each, and gets one [`LocalReply`] per request with the same
//! `request_id`. The node maps them onto the overlay: a registration becomes
//! `OverlayCommand::Register { name: key.to_string(), value: addr, ttl }` (kept
//! refreshed while the process lives), a resolution `OverlayCommand::Query`.
//! A rank that encrypts its links registers an [`Endpoint`] (its address and
//! the public half of its Noise key) with [`LocalRequest::RegisterKeyed`] and
//! resolves its peers' endpoints with [`LocalRequest::ResolveKeyed`], so a
//! rank dialing another knows which key must answer there, and a rank accepting
//! one knows which keys the claimed rank registered.
//!
//! Checkpoints: a rank reports each one it writes ([`LocalRequest::Checkpointed`])
//! and each recovery ([`LocalRequest::Recovered`]); the node keeps them for
//! `p2pjob status`. The one message the node sends unasked is
//! [`LocalReply::CheckpointWanted`] (`request_id` 0, which no request has):
//! `p2pjob checkpoint` wants a cut at the rank's next safe point. A node knows
//! which rank a connection serves from the process key the rank registers.
//!
//! postcard encodes variants by index: every enum here is append-only.

use serde::{Deserialize, Serialize};

use crate::ckpt::{CheckpointInfo, RecoveryInfo};
use crate::id::Id;
use crate::machine::NodeAddr;
use crate::secure::PublicKey;

/// The `request_id` of what a node sends a rank unasked (requests count from 1).
pub const PUSH_ID: u64 = 0;

/// The key a process is registered under: SHA-1 of its job id bytes followed by
/// its rank as 4 big-endian bytes.
pub fn process_key(job: &[u8], rank: u32) -> Id {
    Id::hash_parts([job, &rank.to_be_bytes()[..]])
}

/// What a process asks its node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LocalRequest {
    /// Register process key `key` at `addr` (where the process listens) and keep the
    /// registration alive until [`LocalRequest::Unregister`] or the connection ends.
    Register { key: Id, addr: NodeAddr },
    /// Every address currently registered under `key`, looked up through the overlay.
    Resolve { key: Id },
    /// Withdraw the registration of `key` at `addr` (with or without a public key).
    Unregister { key: Id, addr: NodeAddr },
    /// Register process key `key` at `addr` with the public key `public` its
    /// connections authenticate with; kept like [`LocalRequest::Register`].
    RegisterKeyed { key: Id, addr: NodeAddr, public: PublicKey },
    /// Every endpoint currently registered under `key`, with its public key
    /// when it registered one; answered with [`LocalReply::ResolvedKeyed`].
    ResolveKeyed { key: Id },
    /// This rank wrote checkpoint `ckpt`; the cut covers every
    /// [`LocalReply::CheckpointWanted`] up to `request` (0: none).
    Checkpointed { ckpt: CheckpointInfo, request: u64 },
    /// This rank resumed from a checkpoint.
    Recovered { recovery: RecoveryInfo },
}

/// Where a process listens, and the public key its connections authenticate
/// with, if it registered one. Its text form (the value registered in the
/// overlay) is the address, then a space and 64 hex digits when keyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// The listening address.
    pub addr: NodeAddr,
    /// The static key of the process's Noise handshakes.
    pub key: Option<PublicKey>,
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.key {
            Some(k) => write!(f, "{} {k}", self.addr),
            None => write!(f, "{}", self.addr),
        }
    }
}

impl std::str::FromStr for Endpoint {
    type Err = ();

    /// Parses the overlay value of a registration (an address, or an address
    /// and a key); `Err` for anything else.
    fn from_str(s: &str) -> Result<Self, ()> {
        let (addr, key) = match s.split_once(' ') {
            Some((addr, key)) => (addr, Some(PublicKey::from_hex(key).ok_or(())?)),
            None => (s, None),
        };
        Ok(Endpoint { addr: addr.parse().map_err(drop)?, key })
    }
}

/// Why the node could not do what was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[non_exhaustive]
pub enum LocalError {
    /// The overlay did not answer in time.
    #[error("the overlay did not answer in time")]
    Timeout,
    /// The node is not connected to an overlay.
    #[error("the node is not connected to an overlay")]
    NotConnected,
    /// The node refused the request (malformed or not allowed).
    #[error("the node refused the request")]
    Refused,
}

/// The node's answer to one [`LocalRequest`] (same envelope `request_id`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LocalReply {
    /// The registration is in place.
    Registered { key: Id },
    /// Every live address of `key`; empty when nothing is registered (yet).
    Resolved { key: Id, addrs: Vec<NodeAddr> },
    /// The registration is withdrawn.
    Unregistered { key: Id },
    /// The request failed.
    Failed { error: LocalError },
    /// Every live endpoint of `key`; empty when nothing is registered (yet).
    ResolvedKeyed { key: Id, endpoints: Vec<Endpoint> },
    /// A report ([`LocalRequest::Checkpointed`], [`LocalRequest::Recovered`]) is kept.
    Noted,
    /// Sent unasked (with [`PUSH_ID`]): take a checkpoint at the next safe
    /// point. `request` numbers the job's checkpoint requests, from 1; a cut
    /// covering it (or a later one) answers it.
    CheckpointWanted { request: u64 },
    /// Sent unasked (with [`PUSH_ID`]): as [`LocalReply::CheckpointWanted`],
    /// and after the cut answering `request` this rank moves alone: it saves
    /// its engine ([`crate::ckpt::engine_file_name`]) and exits with
    /// [`crate::ckpt::MOVED_EXIT`]; its node starts it elsewhere from that
    /// cut, and the other ranks go on.
    MoveWanted { request: u64 },
}

/// The first frame on every connection between two ranks: who connects. The
/// acceptor checks `job` and `to_rank` and drops the connection on a mismatch (a
/// stale address may now belong to another process).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankHello {
    /// Job id bytes (as in `P2PMP_JOB`).
    pub job: Vec<u8>,
    /// The connecting rank.
    pub from_rank: u32,
    /// The rank the connector means to reach.
    pub to_rank: u32,
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use proptest::prelude::*;

    use super::*;
    use crate::wire::{DEFAULT_MAX_FRAME, Envelope, encode_frame};

    fn round_trip<B>(env: &Envelope<B>) -> Envelope<B>
    where
        B: Serialize + serde::de::DeserializeOwned,
    {
        crate::wire::round_trip(env, DEFAULT_MAX_FRAME).unwrap()
    }

    fn arb_id() -> impl Strategy<Value = Id> {
        any::<[u8; 20]>().prop_map(Id::from_bytes)
    }

    fn arb_addr() -> impl Strategy<Value = NodeAddr> {
        (any::<u32>(), any::<u16>()).prop_map(|(n, p)| NodeAddr::loopback(n, p))
    }

    fn arb_request() -> impl Strategy<Value = LocalRequest> {
        prop_oneof![
            (arb_id(), arb_addr()).prop_map(|(key, addr)| LocalRequest::Register { key, addr }),
            arb_id().prop_map(|key| LocalRequest::Resolve { key }),
            (arb_id(), arb_addr()).prop_map(|(key, addr)| LocalRequest::Unregister { key, addr }),
            (arb_id(), arb_addr(), any::<[u8; 32]>()).prop_map(|(key, addr, k)| LocalRequest::RegisterKeyed {
                key,
                addr,
                public: PublicKey(k)
            }),
            arb_id().prop_map(|key| LocalRequest::ResolveKeyed { key }),
            (any::<[u64; 4]>(), any::<u64>()).prop_map(|([epoch, unix_ms, stored_bytes, raw_bytes], request)| {
                LocalRequest::Checkpointed { ckpt: CheckpointInfo { epoch, unix_ms, stored_bytes, raw_bytes }, request }
            }),
            (any::<u64>(), any::<u64>())
                .prop_map(|(epoch, unix_ms)| LocalRequest::Recovered { recovery: RecoveryInfo { epoch, unix_ms } }),
        ]
    }

    fn arb_reply() -> impl Strategy<Value = LocalReply> {
        prop_oneof![
            arb_id().prop_map(|key| LocalReply::Registered { key }),
            (arb_id(), proptest::collection::vec(arb_addr(), 0..5))
                .prop_map(|(key, addrs)| LocalReply::Resolved { key, addrs }),
            arb_id().prop_map(|key| LocalReply::Unregistered { key }),
            prop_oneof![Just(LocalError::Timeout), Just(LocalError::NotConnected), Just(LocalError::Refused)]
                .prop_map(|error| LocalReply::Failed { error }),
            (arb_id(), proptest::collection::vec(arb_endpoint(), 0..5))
                .prop_map(|(key, endpoints)| LocalReply::ResolvedKeyed { key, endpoints }),
            Just(LocalReply::Noted),
            any::<u64>().prop_map(|request| LocalReply::CheckpointWanted { request }),
            any::<u64>().prop_map(|request| LocalReply::MoveWanted { request }),
        ]
    }

    fn arb_endpoint() -> impl Strategy<Value = Endpoint> {
        (arb_addr(), proptest::option::of(any::<[u8; 32]>()))
            .prop_map(|(addr, key)| Endpoint { addr, key: key.map(PublicKey) })
    }

    fn env<B: std::fmt::Debug>(body: impl Strategy<Value = B>) -> impl Strategy<Value = Envelope<B>> {
        (arb_id(), arb_addr(), any::<u64>(), body).prop_map(|(s, a, r, b)| Envelope::new(s, a, r, b))
    }

    #[test]
    fn process_key_is_sha1_of_job_then_rank() {
        let k = process_key(b"job", 7);
        assert_eq!(k, Id::hash(b"job\0\0\0\x07"));
        assert_ne!(k, process_key(b"job", 8));
        assert_ne!(k, process_key(b"jo", 7));
    }

    #[test]
    fn golden_resolve_request() {
        let e = Envelope::new(
            Id::ZERO,
            NodeAddr("127.0.0.1:80".parse().unwrap()),
            3,
            LocalRequest::Resolve { key: Id::MAX },
        );
        let mut buf = bytes::BytesMut::new();
        encode_frame(&e, &mut buf, DEFAULT_MAX_FRAME).unwrap();
        let mut want = vec![0, 0, 0, 49, 2]; // len, version 2
        want.extend([0u8; 20]);
        want.extend([0, 127, 0, 0, 1, 80]);
        want.extend([3, 1]); // request id, variant Resolve
        want.extend([0xffu8; 20]);
        assert_eq!(&buf[..], &want[..]);
    }

    /// postcard numbers variants by position: the checkpoint messages come
    /// after every older one (the keyed registration's among them).
    #[test]
    fn golden_checkpoint_messages() {
        let ckpt = CheckpointInfo { epoch: 2, unix_ms: 3, stored_bytes: 4, raw_bytes: 5 };
        let req = postcard::to_allocvec(&LocalRequest::Checkpointed { ckpt, request: 1 }).unwrap();
        assert_eq!(req, [5, 2, 3, 4, 5, 1]);
        let rec = LocalRequest::Recovered { recovery: RecoveryInfo { epoch: 2, unix_ms: 0x80 } };
        assert_eq!(postcard::to_allocvec(&rec).unwrap(), [6, 2, 0x80, 1]);
        assert_eq!(postcard::to_allocvec(&LocalReply::Noted).unwrap(), [5]);
        assert_eq!(postcard::to_allocvec(&LocalReply::CheckpointWanted { request: 9 }).unwrap(), [6, 9]);
        assert_eq!(postcard::to_allocvec(&LocalReply::MoveWanted { request: 9 }).unwrap(), [7, 9]);
    }

    proptest! {
        #[test]
        fn requests_round_trip(e in env(arb_request())) {
            prop_assert_eq!(round_trip(&e), e);
        }

        #[test]
        fn replies_round_trip(e in env(arb_reply())) {
            prop_assert_eq!(round_trip(&e), e);
        }

        #[test]
        fn an_endpoint_reads_back_from_its_text(e in arb_endpoint()) {
            prop_assert_eq!(e.to_string().parse::<Endpoint>(), Ok(e));
        }

        #[test]
        fn endpoint_text_never_panics(s in ".{0,120}") {
            let _ = s.parse::<Endpoint>();
        }

        #[test]
        fn hellos_round_trip(
            e in env((proptest::collection::vec(any::<u8>(), 0..40), any::<u32>(), any::<u32>())
                .prop_map(|(job, from_rank, to_rank)| RankHello { job, from_rank, to_rank })),
            payload in proptest::collection::vec(any::<u8>(), 0..20),
        ) {
            let e = e.with_payload(Bytes::from(payload));
            prop_assert_eq!(round_trip(&e), e);
        }
    }
}
