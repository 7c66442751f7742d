//! Per-peer reliability and flow control: sequence numbers, cumulative
//! acknowledgements, the unacknowledged-frame store and eager credit.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use super::msg::{MpiMsg, SeqHdr};
use super::{MpiConfig, Payload, RequestId};

/// A frame kept until the peer acknowledges it.
#[derive(Debug, Clone)]
pub(crate) struct Unacked {
    pub(crate) msg: MpiMsg,
    pub(crate) payload: Payload,
}

impl Unacked {
    fn seq(&self) -> u64 {
        // Invariant: only sequenced messages are stored.
        self.msg.hdr().expect("stored frames are sequenced").seq
    }
}

/// A rendezvous send waiting for its clear-to-send.
#[derive(Debug, Clone)]
pub(crate) struct PendingRdv {
    pub(crate) req: RequestId,
    pub(crate) data: Bytes,
}

/// Everything the engine keeps about one peer rank.
#[derive(Debug)]
pub(crate) struct Peer {
    /// Whether frames can be sent now (between disconnect and reconnect they wait).
    pub(crate) up: bool,

    // --- our stream to the peer
    /// Sequence number of the next frame we send.
    pub(crate) next_seq: u64,
    /// Sent (or queued) frames the peer has not acknowledged, in sequence order.
    pub(crate) unacked: VecDeque<Unacked>,
    /// Cumulative credit the peer granted us.
    pub(crate) credit_limit: u64,
    /// Cumulative credit our eager messages used.
    pub(crate) charged: u64,
    /// Rendezvous sends waiting for a Cts, by their Rts sequence number.
    pub(crate) rdv_out: BTreeMap<u64, PendingRdv>,

    // --- the peer's stream to us
    /// Sequence number of the next frame we accept.
    pub(crate) recv_next: u64,
    /// The last acknowledgement we sent.
    pub(crate) ack_sent: u64,
    /// Frames and payload bytes accepted since the last acknowledgement.
    pub(crate) since_ack_msgs: u32,
    pub(crate) since_ack_bytes: u64,
    /// Cumulative credit granted to the peer, and the last value we told it.
    pub(crate) granted: u64,
    pub(crate) announced: u64,
    /// Credit held by this peer's eager messages in our unexpected queue.
    pub(crate) buffered: u64,
    /// Whether the peer is in the engine's immediate / delayed ack lists.
    pub(crate) in_ack_now: bool,
    pub(crate) in_ack_later: bool,

    // --- leaving
    /// Whether any frame from the peer ever arrived (so it existed and was
    /// reachable).
    pub(crate) heard: bool,
    /// Since when attempts to reach the peer fail, while closing.
    pub(crate) unreachable_since: Option<std::time::Instant>,
}

impl Peer {
    pub(crate) fn new(config: &MpiConfig) -> Self {
        Peer {
            up: true,
            next_seq: 1,
            unacked: VecDeque::new(),
            credit_limit: config.eager_window,
            charged: 0,
            rdv_out: BTreeMap::new(),
            recv_next: 1,
            ack_sent: 0,
            since_ack_msgs: 0,
            since_ack_bytes: 0,
            granted: config.eager_window,
            announced: config.eager_window,
            buffered: 0,
            in_ack_now: false,
            in_ack_later: false,
            heard: false,
            unreachable_since: None,
        }
    }

    /// Stores a new frame in our stream, giving it the next sequence number.
    pub(crate) fn push(&mut self, mut msg: MpiMsg, payload: Payload) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        // Invariant: callers only push sequenced variants.
        msg.hdr_mut().expect("sequenced message").seq = seq;
        self.unacked.push_back(Unacked { msg, payload });
        seq
    }

    /// Where stored frame `seq` is in `unacked`; `None` if it was
    /// acknowledged meanwhile.
    pub(crate) fn index_of(&self, seq: u64) -> Option<usize> {
        let first = self.unacked.front()?.seq();
        usize::try_from(seq.checked_sub(first)?).ok().filter(|&i| i < self.unacked.len())
    }

    /// The stored frame at `i` (from [`Peer::index_of`]; one out of range
    /// panics) with fresh acknowledgement and credit, recording them as told;
    /// its payload borrowed.
    pub(crate) fn frame(&mut self, i: usize) -> (MpiMsg, &Payload) {
        let mut msg = self.unacked[i].msg;
        let hdr = self.stamp();
        let h = msg.hdr_mut().expect("sequenced message");
        h.ack = hdr.ack;
        h.credit = hdr.credit;
        (msg, &self.unacked[i].payload)
    }

    /// The current acknowledgement and credit, recorded as told.
    pub(crate) fn stamp(&mut self) -> SeqHdr {
        self.ack_sent = self.recv_next - 1;
        self.announced = self.granted;
        self.since_ack_msgs = 0;
        self.since_ack_bytes = 0;
        SeqHdr { seq: 0, ack: self.ack_sent, credit: self.granted }
    }

    /// Whether the peer lacks our latest acknowledgement or credit.
    pub(crate) fn needs_ack(&self) -> bool {
        self.recv_next - 1 > self.ack_sent || self.granted > self.announced
    }

    /// Whether an acknowledgement should go out now rather than after a delay.
    pub(crate) fn ack_urgent(&self, config: &MpiConfig) -> bool {
        self.since_ack_msgs >= config.ack_every_msgs
            || self.since_ack_bytes >= config.ack_every_bytes
            || self.granted - self.announced >= (config.eager_window / 2).max(1)
    }

    /// Applies the peer's cumulative acknowledgement and credit. False if the
    /// acknowledgement covers frames we never sent (then nothing is applied).
    pub(crate) fn on_ack(&mut self, ack: u64, credit: u64) -> bool {
        if ack >= self.next_seq {
            return false;
        }
        while self.unacked.front().is_some_and(|u| u.seq() <= ack) {
            self.unacked.pop_front();
        }
        self.credit_limit = self.credit_limit.max(credit);
        true
    }

    /// Eager credit left.
    pub(crate) fn credit_left(&self) -> u64 {
        self.credit_limit.saturating_sub(self.charged)
    }

    /// Sequence numbers of every unacknowledged frame, oldest first.
    pub(crate) fn unacked_seqs(&self) -> impl Iterator<Item = u64> + '_ {
        self.unacked.iter().map(Unacked::seq)
    }
}
