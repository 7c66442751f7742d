//! The per-process MPI engine: message matching plus the eager and rendezvous
//! protocols, as a sans-IO state machine.
//!
//! One [`MpiEngine`] runs per MPI process (rank). Peers are ranks (`u32`); the engine
//! knows nothing of sockets or addresses. The library drives it:
//!
//! - inputs: [`MpiEngine::handle_message`] (a frame arrived from rank `r`),
//!   [`MpiEngine::handle_disconnected`] / [`MpiEngine::handle_reconnected`] (the
//!   connection to `r` broke / is back), [`MpiEngine::handle_timeout`];
//! - application calls: [`MpiEngine::isend`], [`MpiEngine::irecv`],
//!   [`MpiEngine::iprobe`], [`MpiEngine::cancel`], [`MpiEngine::cancel_send`],
//!   [`MpiEngine::release`] (non-blocking only: blocking calls spin the engine in
//!   the library);
//! - outputs: [`MpiEngine::poll_transmit`] (frames for rank `r`; or
//!   [`MpiEngine::poll_transmit_ref`], the payload borrowed, for a driver that
//!   writes the frame at once), [`MpiEngine::poll_completion`] (finished
//!   requests), [`MpiEngine::poll_timeout`].
//!
//! The calls that start requests ([`MpiEngine::isend`], [`MpiEngine::issend`],
//! [`MpiEngine::irecv`]) take `now`, as [`MpiEngine::handle_message`] and
//! [`MpiEngine::handle_timeout`] do. After any input or application call, drain
//! `poll_transmit` and `poll_completion` to `None`, then read `poll_timeout`.
//! Neither the engine nor the link machine is a [`crate::machine::Machine`],
//! so ranks do not run in [`crate::sim`]; the [`crate::machine`] docs say why.
//!
//! Beside it, [`Links`] (see `link`) keeps the state of the rank's connections to
//! its peers: when to resolve a peer's address, connect, back off, reconnect and
//! give up. The driver carries out its actions and tells the engine nothing
//! itself: the link machine reports breaks and reconnects to the engine.
//!
//! ```
//! use std::time::Instant;
//! use bytes::Bytes;
//! use p2pmp_core::mpi::{ANY_TAG, Completion, MpiConfig, MpiEngine};
//!
//! let now = Instant::now();
//! let mut r0 = MpiEngine::new(MpiConfig::default(), 0, 2).unwrap();
//! let mut r1 = MpiEngine::new(MpiConfig::default(), 1, 2).unwrap();
//! let recv = r1.irecv(now, 0, Some(0), ANY_TAG).unwrap();
//! r0.isend(0, 1, 42, Bytes::from_static(b"hello")).unwrap();
//! // The driver: encode each Transmit (`into_envelope` + `wire::encode_frame`),
//! // write it to rank `to`, decode at the other end and hand it in.
//! while let Some(t) = r0.poll_transmit() {
//!     r1.handle_message(now, 0, t.msg, t.payload);
//! }
//! match r1.poll_completion() {
//!     Some(Completion::Recv { req, status, data }) => {
//!         assert_eq!((req, status.source, status.tag, &data[..]), (recv, 0, 42, &b"hello"[..]));
//!     }
//!     other => panic!("{other:?}"),
//! }
//! ```
//!
//! # Protocols
//! - **Matching.** Posted receives and unexpected messages are matched on
//!   (communicator, source, tag) with [`ANY_SOURCE`] / [`ANY_TAG`]. An arriving message
//!   takes the earliest-posted matching receive; a new receive takes the
//!   earliest-arrived matching message. Every message between one pair travels in one
//!   sequenced stream, so messages from one sender never overtake each other.
//! - **Eager** ([`MpiMsg::Eager`]) up to [`MpiConfig::eager_threshold`] bytes, if the
//!   receiver granted enough credit; otherwise **rendezvous**: [`MpiMsg::Rts`], then
//!   [`MpiMsg::Cts`] once a matching receive is posted, then [`MpiMsg::Data`] chunks.
//! - **Credit.** Each receiver grants each sender [`MpiConfig::eager_window`] bytes
//!   (an eager message costs its length plus [`MpiConfig::eager_msg_overhead`]); credit
//!   comes back as messages are consumed. A sender out of credit falls back to
//!   rendezvous, so nothing waits on credit, nothing is dropped, and the payload bytes
//!   buffered as unexpected stay below `eager_window` per peer.
//! - **Reliability.** Every message except [`MpiMsg::Ack`] carries a per-peer sequence
//!   number and a cumulative acknowledgement. After a reconnect exactly the
//!   unacknowledged messages are resent; duplicates are discarded by sequence number.
//! - **Cancel.** A receive not matched yet is withdrawn at once; a send asks its
//!   receiver ([`MpiMsg::CancelReq`] / [`MpiMsg::CancelAns`]), which takes the
//!   message back only while no receive took it (see `cancel`).
//! - **Leaving.** After [`MpiEngine::start_closing`] acknowledgements go out at once;
//!   [`MpiEngine::may_leave`] holds once every peer has everything from us or is
//!   known to be gone, on evidence gathered while closing (see `closing`).
//!
//! # Limits
//! - The buffer bound covers eager data. A request to send waiting as unexpected
//!   holds only its header; their number is bounded by the sender's outstanding
//!   sends, as MPI progress rules require (they may not wait on credit).
//! - Receives with wildcards, and receives matching against unexpected messages with
//!   a wildcard, scan in order (linear in the entries before the match); exact
//!   matches are a hash lookup.
//! - Sequence state lives only in memory: a peer restarted without its engine state
//!   (no checkpoint) cannot rejoin the streams.
//! - Truncation (a receive buffer shorter than the message) is the library's
//!   check: the engine delivers the whole message.

mod cancel;
mod closing;
mod config;
mod engine;
mod flow;
pub mod link;
mod msg;
mod payload;
mod queues;
mod rendezvous;
mod saved;

pub use closing::GONE_GRACE;
pub use config::MpiConfig;
pub use engine::MpiEngine;
pub use link::{LinkAction, LinkConfig, Links, Path, Route};
pub use msg::{MpiMsg, SeqHdr};
pub use payload::Payload;
pub use saved::{SaveError, SavedEngine};

use thiserror::Error;

use crate::id::Id;
use crate::machine::NodeAddr;
use crate::wire::Envelope;

/// Wildcard source for [`MpiEngine::irecv`] and [`MpiEngine::iprobe`].
pub const ANY_SOURCE: Option<u32> = None;
/// Wildcard tag for [`MpiEngine::irecv`] and [`MpiEngine::iprobe`].
pub const ANY_TAG: Option<i32> = None;

/// Handle of a non-blocking send or receive, unique within one engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// What a receive or probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// The sending rank.
    pub source: u32,
    /// The message tag.
    pub tag: i32,
    /// Length of the message in bytes.
    pub count: usize,
}

/// A finished request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// The send buffer is no longer needed by the application (eager: at once;
    /// rendezvous: once the data was handed to the transport).
    Send { req: RequestId },
    /// A message was received.
    Recv { req: RequestId, status: Status, data: Payload },
    /// The request was cancelled by [`MpiEngine::cancel`].
    Cancelled { req: RequestId },
    /// The answer to [`MpiEngine::cancel_send`]: whether the message was taken
    /// back before any receive took it (then the send never completes as
    /// [`Completion::Send`] if it had not already).
    CancelAnswer { req: RequestId, cancelled: bool },
}

impl Completion {
    /// The request this completion finishes.
    pub fn req(&self) -> RequestId {
        match self {
            Completion::Send { req }
            | Completion::Recv { req, .. }
            | Completion::Cancelled { req }
            | Completion::CancelAnswer { req, .. } => *req,
        }
    }
}

/// A frame for rank `to`: header `msg`, raw `payload` (a small one held in
/// place, a larger one shared, never copied).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Transmit {
    /// The destination rank.
    pub to: u32,
    /// The typed header.
    pub msg: MpiMsg,
    /// Message data, carried after the postcard header.
    pub payload: Payload,
}

/// A frame for rank `to` as [`MpiEngine::poll_transmit_ref`] gives it: the
/// payload borrowed from the engine's own copy. Polled, it was stamped with
/// the latest acknowledgement and taken off the queue: a sequenced frame
/// dropped unsent goes out again only as a resend (a stand-alone
/// acknowledgement, never).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct TransmitRef<'a> {
    /// The destination rank.
    pub to: u32,
    /// The typed header.
    pub msg: MpiMsg,
    /// Message data, carried after the postcard header.
    pub payload: &'a Payload,
}

impl TransmitRef<'_> {
    /// The frame with a reference of its own to the payload.
    pub fn to_transmit(&self) -> Transmit {
        Transmit { to: self.to, msg: self.msg, payload: self.payload.clone() }
    }
}

impl Transmit {
    /// Wraps the frame in a wire envelope stamped with the sender's identity.
    pub fn into_envelope(self, sender: Id, sender_addr: NodeAddr) -> Envelope<MpiMsg> {
        Envelope::new(sender, sender_addr, 0, self.msg).with_payload(self.payload.into_bytes())
    }
}

/// API misuse. Never caused by peer input.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum MpiError {
    /// A rank outside `0..size`.
    #[error("rank {rank} is not in a world of {size}")]
    InvalidRank { rank: u32, size: u32 },
    /// Tags are non-negative.
    #[error("invalid tag {0}: tags are non-negative")]
    InvalidTag(i32),
    /// The configuration cannot work.
    #[error("invalid MPI configuration: {0}")]
    InvalidConfig(&'static str),
}

/// Counters of what the engine did and what it refused. Bad peer input is dropped
/// and counted here, never an error.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MpiStats {
    /// Eager messages sent.
    pub eager_sent: u64,
    /// Rendezvous messages started.
    pub rendezvous_sent: u64,
    /// Small messages sent by rendezvous because credit was short.
    pub credit_fallbacks: u64,
    /// Frames resent after a reconnect.
    pub resent: u64,
    /// Stand-alone acknowledgements sent.
    pub acks_sent: u64,
    /// Frames with an already delivered sequence number, discarded.
    pub duplicates: u64,
    /// Frames whose sequence number skips ahead, discarded.
    pub future_seq: u64,
    /// Other bad peer input, discarded: unknown sender, acknowledgement of an unsent
    /// sequence number, unknown rendezvous id, misplaced payload, credit overrun.
    pub bad_input: u64,
}

#[cfg(test)]
mod tests;
