//! One connection to a peer rank, over TCP or shared memory: its byte source,
//! its Noise channel when encrypted, its decoder, the bytes waiting to be
//! written, and the few things done to every TCP socket.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use mio::net::TcpStream;
use p2pmp_core::local::RankHello;
use p2pmp_core::mpi::{MpiEngine, MpiMsg, Payload};
use p2pmp_core::secure::{MAX_PLAIN_RECORD, PublicKey, SecureChannel};
use p2pmp_core::wire::vectored::{consume, write_queue};
use p2pmp_core::wire::{FrameDecoder, HeaderPrefix, WireError, decode_envelope};
use tracing::{debug, warn};

use super::secure::{Keys, starts_handshake};
use super::shm::{ShmIo, ShmSetup};
use crate::pod::SMALL_PAYLOAD;
use crate::sock::{self, Wait};

/// At most this many queued parts go into one vectored write.
const IOV: usize = 32;

/// Most bytes taken from a shared-memory ring by one read (see [`Conn::recv`]).
const RING_READ: usize = 256 << 10;
/// Frames longer than a first read are read, after it, to their end and no
/// further (see [`Conn::recv`]); smaller ones many at a time.
const LARGE_FRAME: usize = 64 << 10;
/// Bytes taken from a ring by a read at a frame's start: a message of up to
/// 64 KiB whole, with its length prefix and header (under 100 bytes: the
/// sender part with an IPv6 address is the largest), as a second pass for
/// the last bytes cost a 4 KiB ping-pong 19%; or many small frames; or the
/// start of a larger one (copied again once as the decoder makes room for
/// the rest).
const FIRST_READ: usize = LARGE_FRAME + 256;

/// Plaintext of the first record sealed after the queue of an encrypted link
/// ran dry; each next record is twice as big, up to the largest Noise allows.
/// Records are sealed only as the socket takes them, so the peer decrypts one
/// while we encrypt the next: a small first one starts it early.
const FIRST_RECORD: usize = 16 << 10;

/// What carries a connection's bytes.
#[derive(Debug)]
pub(super) enum Io {
    /// A TCP connection; `connecting` until established.
    Tcp { stream: TcpStream, connecting: bool },
    /// A shared-memory link being set up over its Unix socket.
    ShmSetup(Box<ShmSetup>),
    /// A shared-memory link.
    Shm(Box<ShmIo>),
}

/// One connection to a peer rank, either opened by us or accepted.
#[derive(Debug)]
pub(super) struct Conn {
    pub(super) io: Io,
    pub(super) dec: FrameDecoder,
    /// Bytes waiting for the socket or ring, in order (header and payload parts;
    /// on an encrypted link, sealed records).
    pub(super) tx: VecDeque<Bytes>,
    /// On an open encrypted link: frames (header and payload parts) to seal
    /// after `tx`, a record at a time as the socket takes them.
    plain: VecDeque<Bytes>,
    /// Where records are sealed (a buffer reused once the socket took them).
    sealed: BytesMut,
    /// Plaintext bytes of the next record sealed from `plain`.
    record: usize,
    /// The peer: known from the start on connections we opened, from the hello
    /// on accepted ones (on an encrypted one, once its key is vouched for).
    pub(super) rank: Option<u32>,
    pub(super) accepted: bool,
    /// The Noise channel every byte passes on an encrypted TCP link.
    pub(super) secure: Option<SecureChannel>,
    /// An accepted TCP connection whose first bytes are not in yet: whether
    /// it must be encrypted (they say whether it is).
    pub(super) sniff: Option<bool>,
    /// Bytes read before the sniff (an encrypted link reads into its channel's buffer).
    raw: BytesMut,
    /// On a link we dialed: the key registered at the address, which must
    /// answer the handshake.
    pub(super) expect: Option<PublicKey>,
    /// On an accepted encrypted link: the rank its hello names, waiting for
    /// its key to be vouched for (its frames wait in the decoder).
    pub(super) claimed: Option<u32>,
    /// The poll said the peer closed its end or the connection failed: read
    /// to the end of stream (or the error), a short read does not drain it.
    pub(super) hung_up: bool,
    /// The sender part of the peer's hello, or of its last frame decoded
    /// whole: skipped rather than decoded on the frames that start with it
    /// (all of them).
    peer_prefix: Option<HeaderPrefix>,
}

/// What decoding a connection's buffered frames came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decoded {
    /// Every whole frame went to the engine (or waits for a key check).
    Keep,
    /// Bad bytes or a bad hello: drop the connection.
    Drop,
    /// An encrypted hello named this rank with a key not known to be its:
    /// resolve the rank, then check again.
    Verify(u32),
}

impl Conn {
    pub(super) fn new(io: Io, rank: Option<u32>, accepted: bool) -> Self {
        Conn {
            io,
            dec: FrameDecoder::default(),
            tx: VecDeque::new(),
            plain: VecDeque::new(),
            sealed: BytesMut::new(),
            record: FIRST_RECORD,
            rank,
            accepted,
            secure: None,
            sniff: None,
            raw: BytesMut::new(),
            expect: None,
            claimed: None,
            hung_up: false,
            peer_prefix: None,
        }
    }

    /// Encrypts a link we dialed: the handshake's first message goes first,
    /// and `expect` must answer it.
    pub(super) fn encrypt(&mut self, keys: &mut Keys, expect: PublicKey) {
        let mut first = BytesMut::new();
        self.secure = Some(keys.initiator(&mut first));
        self.expect = Some(expect);
        self.tx.push_front(first.freeze());
    }

    /// Queues one encoded frame: as it is, or on an encrypted link to be sealed
    /// as the socket takes it (while the handshake runs, kept by the channel to
    /// go with it).
    pub(super) fn push_frame(&mut self, head: Bytes, payload: Bytes) {
        let queue = match &mut self.secure {
            None => &mut self.tx,
            Some(ch) if ch.is_open() => &mut self.plain,
            Some(ch) => {
                // A channel fails only on bad input, and the connection is closed
                // at once then; a frame queued on it would be resent by the engine
                // anyway.
                if let Err(e) = ch.seal_frame(&head, &payload, &mut BytesMut::new()) {
                    debug!(%e, "frame not sealed");
                }
                return;
            }
        };
        queue.push_back(head);
        if !payload.is_empty() {
            queue.push_back(payload);
        }
    }

    /// Sends one encoded frame (`head` is taken, leaving it empty): on a
    /// shared-memory link with nothing queued, straight into the ring, and
    /// what does not fit is queued; elsewhere queued as [`Conn::push_frame`]
    /// does. Whether anything was queued (then the link needs a write).
    /// The payload is borrowed: written into a ring at once, it needs no
    /// reference of its own; a frame queued (as every one on TCP) is queued
    /// as [`queued_parts`] gives it.
    pub(super) fn put_frame(&mut self, head: &mut BytesMut, payload: &Payload) -> bool {
        if let (Io::Shm(s), true, None) = (&mut self.io, self.tx.is_empty(), &self.secure) {
            // A broken ring takes nothing: the queued frame meets the error
            // again at the next write, which closes the link.
            let n = s.send(&[IoSlice::new(head), IoSlice::new(payload)]).unwrap_or(0);
            let h = head.len();
            if n >= h {
                head.clear();
                if n == h + payload.len() {
                    return false;
                }
                self.tx.push_back(payload.slice_from(n - h..));
                return true;
            }
            let _ = head.split_to(n);
        }
        let (head, payload) = queued_parts(head, payload);
        self.push_frame(head, payload);
        true
    }

    /// Whether bytes wait to be written (sealed or not yet).
    pub(super) fn tx_pending(&self) -> bool {
        !self.tx.is_empty() || !self.plain.is_empty()
    }

    /// Seals the next record from `plain` into `tx`: whether there was one.
    fn seal_next(&mut self) -> io::Result<bool> {
        let Some(ch) = &mut self.secure else { return Ok(false) };
        if self.plain.is_empty() {
            return Ok(false);
        }
        let mut parts = [&[][..]; IOV];
        let (mut k, mut len) = (0, 0);
        for chunk in self.plain.iter().take(IOV) {
            let take = chunk.len().min(self.record - len);
            parts[k] = &chunk[..take];
            (k, len) = (k + 1, len + take);
            if len == self.record {
                break;
            }
        }
        ch.seal_vectored(&parts[..k], &mut self.sealed).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        self.tx.push_back(self.sealed.split().freeze());
        consume(&mut self.plain, len);
        self.record = if self.plain.is_empty() { FIRST_RECORD } else { (2 * self.record).min(MAX_PLAIN_RECORD) };
        Ok(true)
    }

    /// Whether the connection is still being set up (no frames move yet).
    pub(super) fn setting_up(&self) -> bool {
        matches!(self.io, Io::Tcp { connecting: true, .. } | Io::ShmSetup(_))
    }

    /// The mio source of its readiness events.
    pub(super) fn source(&mut self) -> &mut dyn mio::event::Source {
        match &mut self.io {
            Io::Tcp { stream, .. } => stream,
            Io::ShmSetup(s) => &mut s.sock,
            Io::Shm(s) => &mut s.sock,
        }
    }

    /// Reads once into the decoder (the first read waiting as `wait` says; a
    /// ring never waits): (bytes read, room offered), 0 bytes at end of stream;
    /// `WouldBlock` when nothing is there.
    /// On an encrypted link the bytes pass the channel first (a handshake
    /// answer is queued in `tx`); a bad handshake or record, a key other than
    /// the one expected, or a plain link where one must be encrypted is an
    /// `InvalidData` error.
    pub(super) fn recv(&mut self, wait: Wait, keys: &mut Keys) -> io::Result<(usize, usize)> {
        match &mut self.io {
            Io::Tcp { stream, .. } if self.secure.is_none() && self.sniff.is_none() => {
                sock::recv_spare(stream, self.dec.buffer_mut(), wait)
            }
            Io::Tcp { stream, .. } => {
                let buf = match &mut self.secure {
                    Some(ch) => ch.read_buffer(),
                    None => &mut self.raw,
                };
                let got = sock::recv_spare(stream, buf, wait)?;
                self.take_raw(keys).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                Ok(got)
            }
            Io::Shm(s) => {
                // A large frame is read into the room the decoder makes for
                // all of it once it has the prefix, and no further: else what
                // a read took before, or past the frame's end, is copied again
                // as the buffer grows. So a read at a frame's start (or with
                // only part of a prefix) takes no more than FIRST_READ. (A
                // read while a small frame is pending may still run into a
                // large one behind it.)
                let max = if self.dec.buffered() == 0 {
                    FIRST_READ
                } else {
                    match self.dec.pending() {
                        Some((len, rest)) if len >= LARGE_FRAME && rest > 0 => rest.min(RING_READ),
                        Some(_) => RING_READ,
                        None => FIRST_READ,
                    }
                };
                s.recv(self.dec.buffer_mut(), max)
            }
            Io::ShmSetup(_) => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// Moves the raw bytes read through the sniff and the channel into the decoder.
    fn take_raw(&mut self, keys: &mut Keys) -> Result<(), String> {
        if let Some(required) = self.sniff {
            if self.raw.len() < 2 {
                return Ok(());
            }
            self.sniff = None;
            let raw = std::mem::take(&mut self.raw);
            if starts_handshake(&raw) {
                // From now on reads go straight into the channel's buffer.
                let mut ch = keys.responder();
                ch.read_buffer().extend_from_slice(&raw);
                self.secure = Some(ch);
            } else if required {
                return Err("a plain connection from another host: encryption is required".into());
            } else {
                // And from now on straight into the decoder's.
                self.dec.buffer_mut().extend_from_slice(&raw);
                return Ok(());
            }
        }
        let Some(ch) = &mut self.secure else { return Ok(()) };
        let mut out = BytesMut::new();
        let opened = ch.on_read(self.dec.buffer_mut(), &mut out).map_err(|e| e.to_string())?;
        // Checked before the answer goes out: the initiator's answer carries
        // its hello and first frames, for the expected key only.
        if let (true, Some(want), Some(got)) = (opened, self.expect, ch.remote_key())
            && want != got
        {
            return Err(format!("rank {:?} answered with key {got}, not the {want} registered there", self.rank));
        }
        if !out.is_empty() {
            self.tx.push_back(out.freeze());
        }
        Ok(())
    }

    /// Writes as much of `tx` as the socket or ring takes, without waiting; on
    /// an encrypted link, then seals and writes the frames waiting in `plain`,
    /// a record at a time, until the socket takes no more. Returns the bytes
    /// written.
    pub(super) fn write_tx(&mut self) -> io::Result<usize> {
        let mut written = 0;
        let mut counted = |n: io::Result<usize>| {
            if let Ok(n) = n {
                written += n;
            }
            n
        };
        loop {
            let all = match &mut self.io {
                Io::Tcp { stream, connecting: false } => {
                    write_queue::<IOV>(&mut self.tx, |iov| counted(sock::send_vectored(stream, iov)))?
                }
                Io::Shm(s) => write_queue::<IOV>(&mut self.tx, |iov| counted(s.send(iov)))?,
                _ => return Ok(written),
            };
            if !all || !self.seal_next()? {
                return Ok(written);
            }
        }
    }

    /// Whether a TCP connection attempt finished: `None` while it still runs,
    /// else its outcome.
    pub(super) fn connect_outcome(&self) -> Option<Result<(), String>> {
        let Io::Tcp { stream, connecting: true } = &self.io else { return Some(Ok(())) };
        match stream.take_error() {
            Ok(Some(e)) | Err(e) => return Some(Err(e.to_string())),
            Ok(None) => {}
        }
        match stream.peer_addr() {
            Ok(_) => Some(Ok(())),
            Err(e) if e.kind() == io::ErrorKind::NotConnected => None,
            Err(e) => Some(Err(e.to_string())),
        }
    }
}

/// What every TCP data socket gets once connected: no Nagle delay, blocking
/// mode with bounded reads (the poll loop passes `MSG_DONTWAIT`; a rank waiting
/// for one peer sleeps in `recv`), silent peers detected, lost segments
/// retransmitted soon.
pub(super) fn configure(stream: &TcpStream, direct_max: Duration, failure_timeout: Duration) -> io::Result<()> {
    stream.set_nodelay(true)?;
    sock::blocking_with_timeout(stream, direct_max)?;
    sock::fail_silent_peers_after(stream, failure_timeout)?;
    sock::quick_retransmit(stream);
    Ok(())
}

/// Hands every whole frame buffered in `conn` to the engine. The hello of an
/// encrypted connection counts only with a key `keys` vouches for as the
/// named rank's; until then the frames wait.
pub(super) fn decode_frames(
    conn: &mut Conn,
    engine: &mut MpiEngine,
    now: Instant,
    (job, me): (&[u8], u32),
    keys: &Keys,
) -> Decoded {
    if conn.claimed.is_some() {
        return Decoded::Keep;
    }
    loop {
        if let (Some(from), Some(prefix)) = (conn.rank, conn.peer_prefix.as_ref()) {
            match read_small(&mut conn.dec, prefix) {
                Ok(Some((msg, payload))) => {
                    engine.handle_message(now, from, msg, payload);
                    continue;
                }
                Ok(None) => {}
                Err(e) => return bad_frame(&e),
            }
        }
        let frame = match conn.dec.decode() {
            Ok(Some(f)) => f,
            Ok(None) => return Decoded::Keep,
            Err(e) => return bad_frame(&e),
        };
        match conn.rank {
            Some(from) => {
                if let Err(e) = hand_over(&mut conn.peer_prefix, engine, now, from, frame) {
                    warn!(from, %e, "bad envelope; dropping the connection");
                    return Decoded::Drop;
                }
            }
            None => match decode_envelope::<RankHello>(frame) {
                Ok(env) if hello_ok(&env.body, job, me, engine.size()) => {
                    let from = env.body.from_rank;
                    // The peer's frames after it start as it does.
                    conn.peer_prefix = HeaderPrefix::of(&env).ok();
                    match conn.secure.as_ref().map(SecureChannel::remote_key) {
                        None => conn.rank = Some(from),
                        Some(Some(key)) if keys.vouches(from, key) => conn.rank = Some(from),
                        Some(Some(_)) => {
                            conn.claimed = Some(from);
                            return Decoded::Verify(from);
                        }
                        // A hello arrives only on an open channel.
                        Some(None) => return Decoded::Drop,
                    }
                }
                other => {
                    debug!(?other, "hello refused");
                    return Decoded::Drop;
                }
            },
        }
    }
}

/// The parts a frame is queued as (`head` is taken, leaving it empty): a
/// small payload (up to [`SMALL_PAYLOAD`] bytes, however it is held) copied
/// after the head, in one buffer; a larger one shared, not copied.
pub(super) fn queued_parts(head: &mut BytesMut, payload: &Payload) -> (Bytes, Bytes) {
    if payload.len() <= SMALL_PAYLOAD {
        head.extend_from_slice(payload);
        (head.split().freeze(), Bytes::new())
    } else {
        (head.split().freeze(), payload.clone().into_bytes())
    }
}

/// A frame that cannot be read: the connection is dropped.
fn bad_frame(e: &WireError) -> Decoded {
    warn!(%e, "bad frame; dropping the connection");
    Decoded::Drop
}

/// Frames up to this many bytes are looked at where they lie in the
/// decoder's buffer (see [`read_small`]): a sender part (41 bytes at most,
/// over IPv6), the request id and the message's length (a byte each), the
/// message (41 bytes at most) and a payload of up to 64. A larger frame only
/// goes the usual way.
const SMALL_FRAME: usize = 160;

/// The next frame if it is small and its payload too (up to
/// [`SMALL_PAYLOAD`] bytes), read where it lies and dropped from the buffer:
/// its message and a copy of its payload (held in place, without an
/// allocation, up to [`Payload::INLINE`] bytes). Such a frame is not split
/// off the decoder's buffer: a split shares the buffer through an atomic
/// reference count, taken and given back three times a message (the frame,
/// the payload sliced from it, the frame dropped) besides the receiver's drop
/// of the payload; a copy of a few bytes is cheaper. `None`: no whole frame,
/// or one to decode the usual way.
fn read_small(dec: &mut FrameDecoder, prefix: &HeaderPrefix) -> Result<Option<(MpiMsg, Payload)>, WireError> {
    dec.take_small(SMALL_FRAME, |frame| {
        let (_, msg, payload) = MpiMsg::read_after_prefix(frame, prefix)?;
        (payload.len() <= SMALL_PAYLOAD).then(|| (msg, crate::pod::payload_of(payload)))
    })
}

/// Hands `frame` of rank `from` to the engine. The sender part of the
/// header (the same on every frame of a peer) is compared with `prefix`,
/// the peer's (from its hello, or its last frame decoded whole), and
/// skipped; a frame whose header starts otherwise (the first on a link we
/// opened) is decoded whole, and its sender part is `prefix` from then on.
fn hand_over(
    prefix: &mut Option<HeaderPrefix>,
    engine: &mut MpiEngine,
    now: Instant,
    from: u32,
    frame: Bytes,
) -> Result<(), WireError> {
    if let Some(p) = prefix.as_ref() {
        if let Some((_, body, payload)) = MpiMsg::decode_after_prefix(&frame, p)? {
            engine.handle_message(now, from, body, payload);
            return Ok(());
        }
    }
    let env = decode_envelope::<MpiMsg>(frame)?;
    *prefix = HeaderPrefix::of(&env).ok();
    engine.handle_envelope(now, from, env);
    Ok(())
}

/// Whether a hello comes from another rank of our job and means us.
pub(super) fn hello_ok(h: &RankHello, job: &[u8], me: u32, size: u32) -> bool {
    h.job == job && h.to_rank == me && h.from_rank < size && h.from_rank != me
}

#[cfg(test)]
mod tests {
    use p2pmp_core::id::Id;
    use p2pmp_core::machine::NodeAddr;
    use p2pmp_core::secure::RECORD_OVERHEAD;
    use p2pmp_core::wire::DEFAULT_MAX_FRAME;

    use super::*;
    use crate::env::Encrypt;

    /// An idle TCP connection, for a `Conn` whose bytes the test moves itself.
    fn tcp() -> Io {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        Io::Tcp { stream: TcpStream::from_std(s), connecting: true }
    }

    /// Moves what `from` sealed into `to`'s channel (and through it to `to`'s
    /// decoder), as a socket would.
    fn carry(from: &mut Conn, to: &mut Conn, keys: &mut Keys) -> Vec<usize> {
        let mut sizes = Vec::new();
        while from.tx_pending() {
            if from.tx.is_empty() {
                from.seal_next().unwrap();
            }
            let chunk = from.tx.pop_front().unwrap();
            sizes.push(chunk.len());
            to.secure.as_mut().unwrap().read_buffer().extend_from_slice(&chunk);
            to.take_raw(keys).unwrap();
        }
        sizes
    }

    /// The sender part of rank 1 at `port`.
    fn at(port: u16) -> HeaderPrefix {
        HeaderPrefix::new(&Id::hash("rank 1"), &NodeAddr::loopback(1, port)).unwrap()
    }

    /// The frames of messages of `sizes` bytes (tag `i`, filled with `i`)
    /// from rank 1's engine to rank 0, frame `i` with sender part `prefix(i)`.
    fn frames(sizes: &[usize], prefix: impl Fn(usize) -> HeaderPrefix) -> Vec<u8> {
        let mut sender = MpiEngine::new(Default::default(), 1, 2).unwrap();
        for (i, &n) in sizes.iter().enumerate() {
            sender.isend(0, 0, i as i32, Bytes::from(vec![i as u8; n])).unwrap();
        }
        let mut out = BytesMut::new();
        let mut i = 0;
        while let Some(t) = sender.poll_transmit() {
            t.msg.encode_frame_head(&prefix(i), t.payload.len(), &mut out, DEFAULT_MAX_FRAME).unwrap();
            out.extend_from_slice(&t.payload);
            i += 1;
        }
        assert_eq!(i, sizes.len(), "a frame a message");
        out.to_vec()
    }

    #[test]
    fn small_frames_read_in_place_and_the_others_reach_the_engine_alike_and_in_order() {
        // Payloads about the inline limit and a large one; from frame 5 on,
        // the sender part of another address: that small frame is decoded
        // whole, and its sender part is the one read in place from then on.
        let inline = SMALL_PAYLOAD;
        let sizes = [0, 8, inline, inline + 1, 1000, 8, inline, 0];
        let stream = frames(&sizes, |i| if i < 5 { at(9000) } else { at(9001) });
        let mut conn = Conn::new(tcp(), Some(1), false);
        conn.peer_prefix = Some(at(9000));
        let mut engine = MpiEngine::new(Default::default(), 0, 2).unwrap();
        let keys = Keys::new(Encrypt::Never, "127.0.0.1".parse().unwrap(), 2);
        let now = Instant::now();
        // In two parts, the cut inside the last frame.
        let cut = stream.len() - 3;
        for part in [&stream[..cut], &stream[cut..]] {
            conn.dec.push(part);
            assert!(matches!(decode_frames(&mut conn, &mut engine, now, (b"job", 0), &keys), Decoded::Keep));
        }
        assert_eq!(conn.dec.buffered(), 0, "every frame taken");
        assert_eq!(conn.peer_prefix.as_ref().map(HeaderPrefix::as_bytes), Some(at(9001).as_bytes()));
        for tag in 0..sizes.len() as i32 {
            engine.irecv(now, 0, Some(1), Some(tag)).unwrap();
        }
        let mut got = Vec::new();
        while let Some(c) = engine.poll_completion() {
            if let p2pmp_core::mpi::Completion::Recv { status, data, .. } = c {
                got.push((status.tag, data.to_vec()));
            }
        }
        let want: Vec<_> = sizes.iter().enumerate().map(|(i, &n)| (i as i32, vec![i as u8; n])).collect();
        assert_eq!(got, want);
        // None handled twice (the engine would drop it as a duplicate) or skipped.
        let s = engine.stats();
        assert_eq!((s.bad_input, s.duplicates, s.future_seq), (0, 0, 0));
    }

    #[test]
    fn a_frame_queued_on_tcp_carries_a_small_payload_after_its_head_and_shares_a_large_one() {
        let mut conn = Conn::new(tcp(), Some(1), false);
        let large = Bytes::from(vec![3u8; 1000]);
        let payloads = [
            Payload::copy_from_slice(&[1; 8]),
            Payload::from(Bytes::from_static(&[2; SMALL_PAYLOAD])),
            Payload::new(),
            Payload::from(large.clone()),
        ];
        let mut want = Vec::new();
        for (i, p) in payloads.iter().enumerate() {
            let mut head = BytesMut::from(&[0xf0 | i as u8; 5][..]);
            want.extend_from_slice(&head);
            want.extend_from_slice(p);
            assert!(conn.put_frame(&mut head, p), "queued: the link needs a write");
            assert!(head.is_empty(), "the head is taken");
        }
        let queued: Vec<Bytes> = conn.tx.iter().cloned().collect();
        assert_eq!(queued.concat(), want, "every byte, in order");
        assert_eq!(queued.len(), 5, "a part a frame, and the large payload its own");
        assert_eq!(queued[4].as_ptr(), large.as_ptr(), "the large payload shared, not copied");
    }

    #[test]
    fn only_a_small_frame_of_the_known_sender_with_an_inline_payload_is_read_in_place() {
        let inline = SMALL_PAYLOAD;
        for (size, port, taken) in [(0, 9000, true), (inline, 9000, true), (inline + 1, 9000, false), (8, 9001, false)]
        {
            let stream = frames(&[size], |_| at(port));
            let mut dec = FrameDecoder::default();
            dec.push(&stream);
            let got = read_small(&mut dec, &at(9000)).unwrap();
            assert_eq!(
                got.as_ref().map(|(_, p)| p.to_vec()),
                taken.then(|| vec![0u8; size]),
                "{size} B from port {port}"
            );
            assert_eq!(
                dec.buffered(),
                if taken { 0 } else { stream.len() },
                "{size} B from port {port}: dropped if taken"
            );
        }
    }

    #[test]
    fn frames_are_sealed_a_record_at_a_time_growing_and_arrive_whole() {
        let ip = "127.0.0.1".parse().unwrap();
        let (mut ka, mut kb) = (Keys::new(Encrypt::Always, ip, 2), Keys::new(Encrypt::Always, ip, 2));
        let (mut a, mut b) = (Conn::new(tcp(), Some(1), false), Conn::new(tcp(), None, true));
        let mut first = BytesMut::new();
        a.secure = Some(ka.initiator(&mut first));
        b.secure = Some(kb.responder());
        a.tx.push_back(first.freeze());
        // During the handshake a frame waits in the channel, and rides with it.
        a.push_frame(Bytes::from_static(b"hello"), Bytes::new());
        for _ in 0..2 {
            carry(&mut a, &mut b, &mut kb);
            carry(&mut b, &mut a, &mut ka);
        }
        assert!(a.secure.as_ref().unwrap().is_open() && b.secure.as_ref().unwrap().is_open());
        let payload: Bytes = (0..300_000u32).map(|i| i as u8).collect::<Vec<u8>>().into();
        a.push_frame(Bytes::from_static(b"head"), payload.clone());
        a.push_frame(Bytes::from_static(b"tail"), Bytes::new());
        assert_eq!(a.tx.len(), 0, "nothing sealed before the socket asks");
        let sizes = carry(&mut a, &mut b, &mut kb);
        let o = RECORD_OVERHEAD;
        assert_eq!(&sizes[..4], &[FIRST_RECORD + o, 2 * FIRST_RECORD + o, MAX_PLAIN_RECORD + o, MAX_PLAIN_RECORD + o]);
        assert_eq!(a.record, FIRST_RECORD, "a drained queue starts small again");
        let want = [&b"hello"[..], b"head", &payload, b"tail"].concat();
        assert_eq!(&b.dec.buffer_mut()[..], &want[..]);
    }
}
