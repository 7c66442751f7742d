//! The messages MPI engines exchange. Each travels in a fixed binary form
//! (see [`form`]): kinds are numbered, append only, never renumber.

mod form;
mod frame;

/// The reliability header of every sequenced message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SeqHdr {
    /// This frame's sequence number in the sender's stream to the receiver, from 1.
    pub seq: u64,
    /// Cumulative acknowledgement: every frame of the receiver's stream to the
    /// sender up to and including this sequence number arrived (0: none yet).
    pub ack: u64,
    /// Cumulative eager credit the sender grants the receiver, in bytes.
    pub credit: u64,
}

/// One MPI engine message. Data rides as the envelope's raw payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpiMsg {
    /// A whole message; payload = its data.
    Eager { hdr: SeqHdr, comm: u32, tag: i32 },
    /// Request to send `len` bytes; identified by its own `hdr.seq`. No payload.
    Rts { hdr: SeqHdr, comm: u32, tag: i32, len: u64 },
    /// Clear to send the rendezvous message whose request had sequence number
    /// `rts_seq` (in the stream from the receiver of this Cts). No payload.
    Cts { hdr: SeqHdr, rts_seq: u64 },
    /// Bytes `offset..offset + payload.len()` of rendezvous message `rts_seq`.
    Data { hdr: SeqHdr, rts_seq: u64, offset: u64 },
    /// A stand-alone acknowledgement and credit grant (not sequenced). No payload.
    Ack { ack: u64, credit: u64 },
    /// Cancel my message whose Eager or Rts had sequence number `seq` (in the
    /// stream from the sender of this request) if no receive took it yet. No payload.
    CancelReq { hdr: SeqHdr, seq: u64 },
    /// The answer to a [`MpiMsg::CancelReq`] for message `seq`. No payload.
    CancelAns { hdr: SeqHdr, seq: u64, cancelled: bool },
}

impl MpiMsg {
    /// The reliability header, for every variant but [`MpiMsg::Ack`].
    pub fn hdr(&self) -> Option<&SeqHdr> {
        match self {
            MpiMsg::Eager { hdr, .. }
            | MpiMsg::Rts { hdr, .. }
            | MpiMsg::Cts { hdr, .. }
            | MpiMsg::Data { hdr, .. }
            | MpiMsg::CancelReq { hdr, .. }
            | MpiMsg::CancelAns { hdr, .. } => Some(hdr),
            MpiMsg::Ack { .. } => None,
        }
    }

    pub(crate) fn hdr_mut(&mut self) -> Option<&mut SeqHdr> {
        match self {
            MpiMsg::Eager { hdr, .. }
            | MpiMsg::Rts { hdr, .. }
            | MpiMsg::Cts { hdr, .. }
            | MpiMsg::Data { hdr, .. }
            | MpiMsg::CancelReq { hdr, .. }
            | MpiMsg::CancelAns { hdr, .. } => Some(hdr),
            MpiMsg::Ack { .. } => None,
        }
    }

    /// Whether this variant carries data as payload.
    pub fn carries_payload(&self) -> bool {
        matches!(self, MpiMsg::Eager { .. } | MpiMsg::Data { .. })
    }
}
