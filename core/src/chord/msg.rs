//! Chord's wire messages. postcard encodes variants by index: append only, never reorder.
//!
//! Requests carry a non-zero `request_id` in their envelope and the reply echoes it;
//! one-way messages (notify, register, leave notices, key transfer) carry 0. The
//! sender's id and address always come from the envelope, never from the body.

use serde::{Deserialize, Serialize};

use crate::id::Id;
pub use crate::overlay::{Entry, Peer};

/// A hop's answer to [`ChordMsg::FindSuccessor`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Step {
    /// The key belongs to `owner` (the answering node itself, or its successor).
    Done { owner: Peer },
    /// Ask one of these next, best first: the answering node's fingers that most
    /// closely precede the key.
    Next { candidates: Vec<Peer> },
}

/// Every message Chord nodes exchange.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChordMsg {
    /// Request: one step of an iterative lookup of `key`.
    FindSuccessor { key: Id },
    /// Reply to [`ChordMsg::FindSuccessor`].
    FindSuccessorReply(Step),
    /// Request (stabilize): your predecessor and successor list, please.
    GetPredecessor,
    /// Reply to [`ChordMsg::GetPredecessor`].
    Predecessor { predecessor: Option<Peer>, successors: Vec<Peer> },
    /// One-way: the sender thinks it might be the receiver's predecessor.
    Notify,
    /// Request: are you alive?
    Ping,
    /// Reply to [`ChordMsg::Ping`].
    Pong,
    /// One-way: store `entry`. `replicas` more copies go down the successor list
    /// (the owner receives `replicas = r - 1`, each replica forwards one less).
    Register { entry: Entry, replicas: u8 },
    /// Request: every live value under `name`.
    Query { name: String },
    /// Reply to [`ChordMsg::Query`].
    QueryResult { values: Vec<String> },
    /// One-way to the leaving node's predecessor: here is my successor list, take
    /// it in my place.
    LeavingToPredecessor { successors: Vec<Peer> },
    /// One-way to the leaving node's successor: here is my predecessor, take it in
    /// my place.
    LeavingToSuccessor { predecessor: Option<Peer> },
    /// One-way: copies of registrations the sender owns, kept by the receiver as
    /// their replica.
    KeyTransfer { entries: Vec<Entry> },
    /// Request: your successor list, please.
    GetSuccessorList,
    /// Reply to [`ChordMsg::GetSuccessorList`].
    SuccessorList { successors: Vec<Peer> },
    /// Request: your finger table, please (a node that just joined starts from its
    /// successor's, which is nearly its own).
    GetFingers,
    /// Reply to [`ChordMsg::GetFingers`]: runs of equal fingers as (first index, node).
    Fingers { fingers: Vec<(u8, Peer)> },
    /// One-way to the sender's former predecessor: the sender adopted `predecessor`,
    /// which lies between the two, so it is the receiver's better successor (what
    /// the receiver's next stabilize would learn, a period sooner).
    NewPredecessor { predecessor: Peer },
    /// Reply to a [`ChordMsg::Register`] sent as a request (non-zero request id) by
    /// the registering node: the owner stored it. Replica copies are one-way.
    Registered,
    /// Reply to a [`ChordMsg::Register`] request that reached a node whose range
    /// (predecessor, itself] does not hold the key (the registrant's lookup was
    /// stale): nothing stored, look the owner up again.
    NotOwner,
    /// Reply to any request that reached a node not part of a ring (it lost every
    /// contact and is joining again): alive, but it cannot answer. The asker routes
    /// around it without counting it dead; a node that stabilizes with it as its
    /// successor is where it joins back.
    NotJoined,
    /// One-way: registrations the sender hands over (it leaves, or its range
    /// shrank), meant for their owner as the sender sees it. The receiver keeps
    /// them and passes those it does not own on towards their owner (ahead to its
    /// successor, behind to its predecessor), at most `hops` more times: the
    /// sender's view may be stale.
    Handover { entries: Vec<Entry>, hops: u8 },
    /// One-way to the sender's successor: the sender's range grew back to `after`
    /// (it had no predecessor, say its predecessor failed): copy it the entries you
    /// hold in (`after`, sender], the replicas of the range it now owns.
    Pull { after: Id },
}

impl ChordMsg {
    /// Number of variants, for per-kind counters.
    pub const KINDS: usize = 23;

    /// This variant's index (its postcard tag), below [`ChordMsg::KINDS`].
    pub fn kind(&self) -> usize {
        match self {
            ChordMsg::FindSuccessor { .. } => 0,
            ChordMsg::FindSuccessorReply(_) => 1,
            ChordMsg::GetPredecessor => 2,
            ChordMsg::Predecessor { .. } => 3,
            ChordMsg::Notify => 4,
            ChordMsg::Ping => 5,
            ChordMsg::Pong => 6,
            ChordMsg::Register { .. } => 7,
            ChordMsg::Query { .. } => 8,
            ChordMsg::QueryResult { .. } => 9,
            ChordMsg::LeavingToPredecessor { .. } => 10,
            ChordMsg::LeavingToSuccessor { .. } => 11,
            ChordMsg::KeyTransfer { .. } => 12,
            ChordMsg::GetSuccessorList => 13,
            ChordMsg::SuccessorList { .. } => 14,
            ChordMsg::GetFingers => 15,
            ChordMsg::Fingers { .. } => 16,
            ChordMsg::NewPredecessor { .. } => 17,
            ChordMsg::Registered => 18,
            ChordMsg::NotOwner => 19,
            ChordMsg::NotJoined => 20,
            ChordMsg::Handover { .. } => 21,
            ChordMsg::Pull { .. } => 22,
        }
    }
}
