//! The rendezvous protocol: request-to-send, clear-to-send, data.
//!
//! The Rts is matched like an eager message (it holds the message's place in the
//! stream, so ordering is kept); the data moves only once a receive took it.

use bytes::BytesMut;

use super::engine::MpiEngine;
use super::flow::PendingRdv;
use super::msg::{MpiMsg, SeqHdr};
use super::queues::{Held, Key, Origin, Unexpected};
use super::{Completion, Payload, RequestId, Status};

/// Largest up-front reservation for reassembling a multi-chunk message; beyond it
/// the buffer grows as data arrives, so a peer's claimed length allocates nothing.
const MAX_RESERVE: u64 = 64 << 20;

/// A matched rendezvous receive waiting for its data.
#[derive(Debug)]
pub(crate) struct Awaiting {
    req: RequestId,
    status: Status,
    got: u64,
    buf: BytesMut,
}

impl MpiEngine {
    /// Sends the Rts of a rendezvous message and keeps its data until the Cts.
    pub(super) fn start_rendezvous(&mut self, req: RequestId, dest: u32, comm: u32, tag: i32, data: Payload) {
        let data = data.into_bytes();
        self.stats.rendezvous_sent += 1;
        let len = data.len() as u64;
        self.push_frame(dest, MpiMsg::Rts { hdr: SeqHdr::default(), comm, tag, len }, Payload::new());
        let p = &mut self.peers[dest as usize];
        // Invariant: push_frame just gave the Rts the stream's latest number.
        let rts_seq = p.next_seq - 1;
        p.rdv_out.insert(rts_seq, PendingRdv { req, data });
        self.sent.insert(req, (dest, rts_seq));
    }

    /// An Rts arrived in stream order: matched now, or held as unexpected.
    pub(super) fn on_rts(&mut self, from: u32, comm: u32, tag: i32, rts_seq: u64, len: u64) {
        let key = Key { comm, src: from, tag };
        match self.posted.take_match(&key) {
            Some(req) => self.clear_to_send(req, key, rts_seq, len),
            None => self.unexpected.push(Unexpected {
                key,
                held: Held::Rts { rts_seq, len },
                origin: Origin::Peer { seq: rts_seq },
            }),
        }
    }

    /// Receive `req` took the rendezvous message `rts_seq`: ask for its data.
    pub(super) fn clear_to_send(&mut self, req: RequestId, key: Key, rts_seq: u64, len: u64) {
        self.push_frame(key.src, MpiMsg::Cts { hdr: SeqHdr::default(), rts_seq }, Payload::new());
        let status = Status { source: key.src, tag: key.tag, count: len as usize };
        self.awaiting.insert((key.src, rts_seq), Awaiting { req, status, got: 0, buf: BytesMut::new() });
    }

    /// The receiver cleared our rendezvous message `rts_seq`: send its data in
    /// chunks (zero-copy slices) and complete the send.
    pub(super) fn on_cts(&mut self, from: u32, rts_seq: u64) {
        let Some(PendingRdv { req, data }) = self.peers[from as usize].rdv_out.remove(&rts_seq) else {
            self.stats.bad_input += 1;
            return;
        };
        let chunk = self.config.data_chunk;
        let mut offset = 0;
        loop {
            let end = (offset + chunk).min(data.len());
            let msg = MpiMsg::Data { hdr: SeqHdr::default(), rts_seq, offset: offset as u64 };
            self.push_frame(from, msg, data.slice(offset..end).into());
            offset = end;
            if offset >= data.len() {
                break;
            }
        }
        self.completions.push_back(Completion::Send { req });
    }

    /// A chunk of rendezvous message `rts_seq` from `from` arrived (chunks come in
    /// stream order). A single-chunk message is delivered without a copy.
    pub(super) fn on_data(&mut self, from: u32, rts_seq: u64, offset: u64, payload: Payload) {
        let Some(a) = self.awaiting.get_mut(&(from, rts_seq)) else {
            self.stats.bad_input += 1;
            return;
        };
        let len = a.status.count as u64;
        let n = payload.len() as u64;
        if offset != a.got || offset + n > len {
            self.stats.bad_input += 1;
            return;
        }
        let data = if a.got == 0 && n == len {
            payload
        } else {
            if a.buf.capacity() == 0 {
                a.buf.reserve(len.min(MAX_RESERVE) as usize);
            }
            a.buf.extend_from_slice(&payload);
            a.got += n;
            if a.got < len {
                return;
            }
            a.buf.split().freeze().into()
        };
        // Invariant: `a` was found under this key just above.
        let a = self.awaiting.remove(&(from, rts_seq)).expect("awaiting receive");
        self.completions.push_back(Completion::Recv { req: a.req, status: a.status, data });
    }
}
