//! Cancelling sends (MPI-1 §3.8.4): a send may be taken back as long as no
//! receive took its message.
//!
//! The message may already sit in the receiver's unexpected queue (an eager
//! message, or the request of a rendezvous one), so only the receiver can
//! decide: the sender asks with a [`MpiMsg::CancelReq`] naming the sequence
//! number of the message's frame, the receiver removes the message if it is
//! still unexpected (giving back its credit) and answers with a
//! [`MpiMsg::CancelAns`]. Both ride the ordinary sequenced stream, so the
//! request arrives after the message it names and the answer after anything
//! the receiver sent before it (a clear-to-send for that very message comes
//! first, and its data then goes as usual: the answer is "not cancelled").
//! To itself a rank decides at once.
//!
//! The application releases a send ([`MpiEngine::release`]) once it no longer
//! needs it (waited, freed): only unreleased sends can be cancelled.

use std::time::Instant;

use super::msg::{MpiMsg, SeqHdr};
use super::queues::{Held, Origin};
use super::{Completion, MpiEngine, Payload, RequestId};

impl MpiEngine {
    /// Tries to take back send `req`. A [`Completion::CancelAnswer`] follows,
    /// at once to this rank or for a released or unknown request (not
    /// cancelled), else when the receiver answered.
    pub fn cancel_send(&mut self, req: RequestId) {
        let Some(&(dest, seq)) = self.sent.get(&req) else {
            self.completions.push_back(Completion::CancelAnswer { req, cancelled: false });
            return;
        };
        if dest == self.rank {
            let cancelled = self.unexpected.remove_origin(dest, Origin::Local { send: req }).is_some();
            self.completions.push_back(Completion::CancelAnswer { req, cancelled });
            return;
        }
        if self.cancelling.insert((dest, seq), req).is_none() {
            self.push_frame(dest, MpiMsg::CancelReq { hdr: SeqHdr::default(), seq }, Payload::new());
        }
    }

    /// The application is done with request `req` (it was waited for or freed):
    /// it can no longer be cancelled.
    pub fn release(&mut self, req: RequestId) {
        self.sent.remove(&req);
    }

    /// Sends not yet released (what [`MpiEngine::release`] keeps bounded).
    pub fn unreleased_sends(&self) -> usize {
        self.sent.len()
    }

    /// `from` asks to take back its message `seq`.
    pub(super) fn on_cancel_req(&mut self, now: Instant, from: u32, seq: u64) {
        let cancelled = match self.unexpected.remove_origin(from, Origin::Peer { seq }) {
            Some(u) => {
                if let Held::Eager { charge, .. } = u.held {
                    self.peers[from as usize].buffered -= charge;
                    self.return_credit(Some(now), from, charge);
                }
                true
            }
            None => false,
        };
        self.push_frame(from, MpiMsg::CancelAns { hdr: SeqHdr::default(), seq, cancelled }, Payload::new());
    }

    /// `from` answered our request to take back message `seq`.
    pub(super) fn on_cancel_ans(&mut self, from: u32, seq: u64, cancelled: bool) {
        let Some(req) = self.cancelling.remove(&(from, seq)) else {
            self.stats.bad_input += 1;
            return;
        };
        if cancelled {
            // A rendezvous message taken back: its data never goes.
            self.peers[from as usize].rdv_out.remove(&seq);
        }
        self.completions.push_back(Completion::CancelAnswer { req, cancelled });
    }
}
