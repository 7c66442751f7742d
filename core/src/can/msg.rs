//! CAN's wire messages. postcard encodes variants by index: append only, never reorder.
//!
//! Requests carry a non-zero `request_id` in their envelope and the reply echoes it;
//! one-way messages carry 0. The sender's id and address always come from the
//! envelope; a [`NodeInfo`] describing the sender itself must name the sender.

use serde::{Deserialize, Serialize};

use super::zone::{Point, Zone};
pub use crate::overlay::{Entry, Peer};

/// What a node owns, as of one of its versions: a node's zones change only with a
/// new version, so of two descriptions of one node the higher version is current.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// The node.
    pub peer: Peer,
    /// Bumped by the node with every change of its zones.
    pub version: u64,
    /// Its zones (usually one; more after a takeover). Empty: it owns nothing.
    pub zones: Vec<Zone>,
}

/// A hop's answer to [`CanMsg::Route`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RouteStep {
    /// The answering node owns the target point.
    Done,
    /// Ask one of these next, best (closest to the target) first: the answering
    /// node's neighbours.
    Next { candidates: Vec<NodeInfo> },
}

/// Every message CAN nodes exchange.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CanMsg {
    /// Request: one hop of an iterative route to `target`.
    Route { target: Point },
    /// Reply to [`CanMsg::Route`].
    RouteReply(RouteStep),
    /// Request to the owner of `point`: split your zone there and give me the half
    /// holding it. `dims` is the joiner's configured dimensions.
    Join { point: Point, dims: u8 },
    /// Reply to [`CanMsg::Join`]: the joiner's zone, the registrations in it, and
    /// the nodes abutting it as the owner knows them (the owner included).
    JoinAccept { zone: Zone, neighbours: Vec<NodeInfo>, entries: Vec<Entry> },
    /// Reply to [`CanMsg::Join`] from a network of another number of dimensions.
    WrongDims { dims: u8 },
    /// Reply: not now (a zone hand-off is under way here); try again shortly.
    Busy,
    /// Reply: the point or zone in question is not (or no longer) the sender's.
    NotOwner,
    /// One-way, to every neighbour every heartbeat period: the sender's zones, and
    /// now and then its whole neighbour table (for discovery and takeovers).
    Heartbeat { info: NodeInfo, neighbours: Option<Vec<NodeInfo>> },
    /// One-way: the sender's zones changed (or it tells a node that wrongly counts
    /// it as a neighbour what it owns).
    Update { info: NodeInfo },
    /// Request: here is what I own; what do you own? (To a node heard of second
    /// hand, or a new neighbour.)
    Probe { info: NodeInfo },
    /// Reply to [`CanMsg::Probe`], with the replier's neighbours that abut the
    /// prober's zones (what the prober may have missed while zones moved).
    ProbeReply { info: NodeInfo, neighbours: Vec<NodeInfo> },
    /// Request: take `zone` over, with its registrations and the nodes abutting it.
    /// The receiver merges it with its buddy zone, or, freed for the sender by a
    /// pair search, takes it as it is.
    Handoff { zone: Zone, entries: Vec<Entry>, neighbours: Vec<NodeInfo> },
    /// Reply to [`CanMsg::Handoff`]: taken; the receiver's zones now.
    Accepted { info: NodeInfo },
    /// Request of a leaving node whose buddy zone is split further: find two
    /// buddies among the leaves inside `region`, merge them and come take my zone.
    FindPair { region: Zone },
    /// Reply to [`CanMsg::FindPair`]: I handed my zone to its buddy and am free:
    /// hand me yours.
    Freed,
    /// Reply to [`CanMsg::FindPair`]: my buddy is split too; look in `region` (my
    /// buddy) through these nodes.
    Deeper { region: Zone, candidates: Vec<NodeInfo> },
    /// Reply: the zones moved meanwhile; start over.
    Retry,
    /// One-way: the sender took over the zones of `dead` (which stopped answering)
    /// and owns what `info` says.
    Claim { info: NodeInfo, dead: Peer },
    /// One-way: the sender leaves without handing its zones over; treat it as
    /// failed now (its neighbours take its zones over).
    Gone,
    /// Request to the owner of the name's point: store `entry` and copy it to your
    /// neighbours.
    Register { entry: Entry },
    /// Reply to [`CanMsg::Register`]: stored.
    Registered,
    /// Request: every live value under `name`.
    Query { name: String },
    /// Reply to [`CanMsg::Query`].
    QueryResult { values: Vec<String> },
    /// One-way: copies of registrations the sender owns, kept by its neighbours so
    /// that whoever takes its zone over after a crash has them.
    Replicate { entries: Vec<Entry> },
    /// Reply to any request that reached a node not part of a network (joining,
    /// or rejoining): alive, but it cannot answer.
    NotJoined,
    /// Reply to [`CanMsg::Join`]: a neighbour of the owner has a larger zone; ask
    /// `to` to split it instead, at `point` (inside that zone). Keeps zones near
    /// equal (CAN's uniform partitioning), and routes near (d/4)·N^(1/d) hops.
    JoinElsewhere { to: Peer, point: Point },
}

impl CanMsg {
    /// Number of variants, for per-kind counters.
    pub const KINDS: usize = 26;

    /// Short names by [`CanMsg::kind`], for reports.
    pub const KIND_NAMES: [&'static str; CanMsg::KINDS] = [
        "Route",
        "RouteReply",
        "Join",
        "JoinAccept",
        "WrongDims",
        "Busy",
        "NotOwner",
        "Heartbeat",
        "Update",
        "Probe",
        "ProbeReply",
        "Handoff",
        "Accepted",
        "FindPair",
        "Freed",
        "Deeper",
        "Retry",
        "Claim",
        "Gone",
        "Register",
        "Registered",
        "Query",
        "QueryResult",
        "Replicate",
        "NotJoined",
        "JoinElsewhere",
    ];

    /// This variant's index (its postcard tag), below [`CanMsg::KINDS`].
    pub fn kind(&self) -> usize {
        match self {
            CanMsg::Route { .. } => 0,
            CanMsg::RouteReply(_) => 1,
            CanMsg::Join { .. } => 2,
            CanMsg::JoinAccept { .. } => 3,
            CanMsg::WrongDims { .. } => 4,
            CanMsg::Busy => 5,
            CanMsg::NotOwner => 6,
            CanMsg::Heartbeat { .. } => 7,
            CanMsg::Update { .. } => 8,
            CanMsg::Probe { .. } => 9,
            CanMsg::ProbeReply { .. } => 10,
            CanMsg::Handoff { .. } => 11,
            CanMsg::Accepted { .. } => 12,
            CanMsg::FindPair { .. } => 13,
            CanMsg::Freed => 14,
            CanMsg::Deeper { .. } => 15,
            CanMsg::Retry => 16,
            CanMsg::Claim { .. } => 17,
            CanMsg::Gone => 18,
            CanMsg::Register { .. } => 19,
            CanMsg::Registered => 20,
            CanMsg::Query { .. } => 21,
            CanMsg::QueryResult { .. } => 22,
            CanMsg::Replicate { .. } => 23,
            CanMsg::NotJoined => 24,
            CanMsg::JoinElsewhere { .. } => 25,
        }
    }
}
