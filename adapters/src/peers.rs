//! Per-connection state the [`crate::Driver`] keeps: who is at the other end, the
//! frame decoder of the receive side, and the bounded queue of the send side.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::IpAddr;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use p2pmp_core::guard::TokenBucket;
use p2pmp_core::id::Id;
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::secure::{SecureChannel, SecureError};
use p2pmp_core::time::Backoff;
use p2pmp_core::wire::FrameDecoder;

use p2pmp_core::wire::vectored;

/// Names one connection for as long as it lives; never reused by a driver.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct ConnId(pub u64);

impl std::fmt::Display for ConnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "c{}", self.0)
    }
}

/// Payloads at least this long are queued as their own chunk (zero-copy, written
/// with a vectored write); shorter frames are coalesced into one buffer.
pub(crate) const ZERO_COPY_MIN: usize = 16 * 1024;
/// At most this many slices go into one vectored write.
const MAX_IOV: usize = 64;

/// The send side of one connection: whole frames, in order, bounded by the driver.
#[derive(Debug, Default)]
pub(crate) struct TxQueue {
    chunks: VecDeque<Bytes>,
    /// Small frames coalesced since the last seal.
    acc: BytesMut,
    /// Bytes queued, handed out but not yet confirmed written included.
    queued: usize,
    /// Bytes handed out by [`TxQueue::take`] and not yet confirmed.
    in_flight: usize,
}

impl TxQueue {
    pub(crate) fn queued(&self) -> usize {
        self.queued
    }

    /// Bytes waiting to be handed out or written (in-flight bytes excluded).
    pub(crate) fn waiting(&self) -> usize {
        self.queued - self.in_flight
    }

    /// Appends an encoded frame head and its (possibly empty) payload.
    pub(crate) fn push(&mut self, head: &[u8], payload: Bytes) {
        self.queued += head.len() + payload.len();
        self.acc.extend_from_slice(head);
        if payload.len() >= ZERO_COPY_MIN {
            self.seal();
            self.chunks.push_back(payload);
        } else {
            self.acc.extend_from_slice(&payload);
        }
    }

    fn seal(&mut self) {
        if !self.acc.is_empty() {
            self.chunks.push_back(self.acc.split().freeze());
        }
    }

    /// Hands every waiting chunk to an asynchronous writer; confirm with [`TxQueue::done`].
    pub(crate) fn take(&mut self) -> Vec<Bytes> {
        self.seal();
        let out: Vec<Bytes> = self.chunks.drain(..).collect();
        self.in_flight += out.iter().map(Bytes::len).sum::<usize>();
        out
    }

    /// `n` handed-out bytes were written.
    pub(crate) fn done(&mut self, n: usize) {
        let n = n.min(self.in_flight);
        self.in_flight -= n;
        self.queued -= n;
    }

    /// Writes waiting chunks to `w` with vectored writes until the queue is empty
    /// (`Ok(true)`) or `w` would block (`Ok(false)`).
    pub(crate) fn write_to(&mut self, w: &mut impl Write) -> io::Result<bool> {
        debug_assert_eq!(self.in_flight, 0, "one queue is written one way");
        self.seal();
        let queued = &mut self.queued;
        vectored::write_queue::<MAX_IOV>(&mut self.chunks, |iov| {
            let n = w.write_vectored(iov)?;
            *queued -= n;
            Ok(n)
        })
    }
}

/// One TCP connection, outbound (dialed to a peer's listen address) or inbound
/// (from a source address).
#[derive(Debug)]
pub(crate) struct Conn {
    /// The peer's listen address: known when dialing, learnt from its hello otherwise.
    pub(crate) peer: Option<NodeAddr>,
    pub(crate) outbound: bool,
    /// The TCP connection is up (inbound ones always are).
    pub(crate) connected: bool,
    /// The peer's hello arrived and was accepted.
    pub(crate) hello_seen: bool,
    /// The address and id the peer's hello bound this connection to: every
    /// envelope on it must name them as its sender.
    pub(crate) bound: Option<(NodeAddr, Id)>,
    /// Dropped if no hello arrives by then.
    pub(crate) hello_deadline: Instant,
    pub(crate) decoder: FrameDecoder,
    /// The Noise channel, when links are encrypted: every byte in and out passes it.
    pub(crate) secure: Option<SecureChannel>,
    pub(crate) tx: TxQueue,
    /// Queued in the driver's writable list and not yet polled.
    pub(crate) tx_notified: bool,
    /// The machine sent something through it (so losing it is worth reporting).
    pub(crate) used: bool,
    /// Where an inbound connection came from (what admission counted and bans).
    pub(crate) source: Option<IpAddr>,
    /// Frames it may still send before it counts as a flood.
    pub(crate) frames: TokenBucket,
    /// Dialed only to learn which key answers at `peer` (see the driver's
    /// address binding); its loss is nobody's send failure.
    pub(crate) probe: bool,
}

impl Conn {
    pub(crate) fn new(
        peer: Option<NodeAddr>,
        source: Option<IpAddr>,
        hello_deadline: Instant,
        hello_max: usize,
        frames: TokenBucket,
    ) -> Self {
        let outbound = source.is_none();
        Conn {
            peer,
            outbound,
            connected: !outbound,
            hello_seen: false,
            bound: None,
            hello_deadline,
            decoder: FrameDecoder::new(hello_max),
            secure: None,
            tx: TxQueue::default(),
            tx_notified: false,
            used: false,
            source,
            frames,
            probe: false,
        }
    }

    /// The address of the other end: the source of an inbound connection, the
    /// dialed address's of an outbound one.
    pub(crate) fn ip(&self) -> Option<IpAddr> {
        self.source.or(self.peer.map(|p| p.0.ip()))
    }

    /// Turns encryption on for a new connection: `channel` was just built, and
    /// `first` is what it wants sent before anything else (the initiator's first
    /// handshake message; empty for a responder).
    pub(crate) fn secure(&mut self, channel: SecureChannel, first: BytesMut) {
        debug_assert_eq!(self.tx.queued(), 0, "encryption starts before the first byte");
        self.secure = Some(channel);
        if !first.is_empty() {
            self.tx.push(&[], first.freeze());
        }
    }

    /// Bytes queued for sending, those waiting for the handshake included.
    pub(crate) fn queued(&self) -> usize {
        self.tx.queued() + self.secure.as_ref().map_or(0, SecureChannel::early)
    }

    /// Queues one encoded frame: as it is on a plain connection, sealed on a
    /// secure one (during the handshake, the channel keeps it to send with it).
    pub(crate) fn push_frame(&mut self, head: &[u8], payload: Bytes) {
        match &mut self.secure {
            None => self.tx.push(head, payload),
            Some(ch) => {
                let mut out = BytesMut::new();
                // A connection whose channel broke is dropped at once by the
                // driver, so a frame is never sealed on it.
                ch.seal_frame(head, &payload, &mut out).expect("sealing on a channel that has not failed");
                if !out.is_empty() {
                    self.tx.push(&[], out.freeze());
                }
            }
        }
    }

    /// Takes bytes read from the socket: decrypted (answering the handshake) on a
    /// secure connection, as they are otherwise; either way they end in the frame
    /// decoder. `Ok(true)` when new bytes were queued for sending.
    pub(crate) fn take_in(&mut self, data: &[u8]) -> Result<bool, SecureError> {
        let Some(ch) = &mut self.secure else {
            self.decoder.push(data);
            return Ok(false);
        };
        let mut out = BytesMut::new();
        ch.on_bytes(data, self.decoder.buffer_mut(), &mut out)?;
        let queued = !out.is_empty();
        if queued {
            self.tx.push(&[], out.freeze());
        }
        Ok(queued)
    }

    /// After the hello, accept frames up to `max_frame`, keeping what is buffered.
    pub(crate) fn open_decoder(&mut self, max_frame: usize) {
        let mut dec = FrameDecoder::new(max_frame);
        dec.push(self.decoder.buffer_mut());
        self.decoder = dec;
    }
}

/// Reconnect back-off for one peer address: sends fail at once until `until`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Redial {
    pub(crate) backoff: Backoff,
    pub(crate) until: Instant,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::IoSlice;

    /// A writer that accepts at most `limit` bytes per call, then blocks after `calls`.
    struct Trickle {
        out: Vec<u8>,
        limit: usize,
        calls: usize,
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.calls == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.calls -= 1;
            let n = buf.len().min(self.limit);
            self.out.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            let first = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| &b[..]);
            self.write(first)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn partial_writes_resume_where_they_stopped() {
        let mut q = TxQueue::default();
        q.push(b"head1", Bytes::from_static(b"small"));
        let big = Bytes::from(vec![7u8; ZERO_COPY_MIN]);
        q.push(b"head2", big.clone());
        q.push(b"head3", Bytes::new());
        let total = q.queued();
        let mut w = Trickle { out: Vec::new(), limit: 3, calls: 2 };
        assert!(!q.write_to(&mut w).unwrap(), "would block");
        assert_eq!(q.queued(), total - 6);
        w.calls = usize::MAX;
        w.limit = 1000;
        assert!(q.write_to(&mut w).unwrap());
        assert_eq!(q.queued(), 0);
        let mut want = b"head1smallhead2".to_vec();
        want.extend_from_slice(&big);
        want.extend_from_slice(b"head3");
        assert_eq!(w.out, want);
    }

    #[test]
    fn taken_bytes_count_until_confirmed() {
        let mut q = TxQueue::default();
        q.push(b"abc", Bytes::new());
        let chunks = q.take();
        assert_eq!(chunks.concat(), b"abc");
        assert_eq!((q.queued(), q.waiting()), (3, 0));
        q.push(b"de", Bytes::new());
        assert_eq!((q.queued(), q.waiting()), (5, 2));
        q.done(3);
        assert_eq!((q.queued(), q.waiting()), (2, 2));
    }
}
