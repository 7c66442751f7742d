//! The envelope every message travels in, and its encoding.

use bytes::{BufMut, Bytes, BytesMut};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::frame::LEN_PREFIX;
use super::{PROTOCOL_VERSION, WireError};
use crate::id::Id;
use crate::machine::NodeAddr;

/// One message: who sent it, which request it belongs to, a typed body and an
/// optional raw payload that never passes through serde.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope<B> {
    /// The sender's protocol version ([`PROTOCOL_VERSION`] on anything decoded).
    pub version: u16,
    /// The sender's id (node id or process key).
    pub sender: Id,
    /// Where the sender listens.
    pub sender_addr: NodeAddr,
    /// Correlates replies with requests; 0 for one-way messages.
    pub request_id: u64,
    /// The typed message.
    pub body: B,
    /// Raw bytes after the header (MPI data, file chunks), shared zero-copy.
    pub payload: Bytes,
}

impl<B> Envelope<B> {
    /// An envelope at the current protocol version with no payload.
    pub fn new(sender: Id, sender_addr: NodeAddr, request_id: u64, body: B) -> Self {
        Envelope { version: PROTOCOL_VERSION, sender, sender_addr, request_id, body, payload: Bytes::new() }
    }

    /// The same envelope carrying `payload` after its header.
    pub fn with_payload(mut self, payload: Bytes) -> Self {
        self.payload = payload;
        self
    }

    /// The same envelope with its body turned into another by `f` (a machine's
    /// message wrapped into a composite's union body, or taken out of it).
    pub fn map<C>(self, f: impl FnOnce(B) -> C) -> Envelope<C> {
        let Envelope { version, sender, sender_addr, request_id, body, payload } = self;
        Envelope { version, sender, sender_addr, request_id, body: f(body), payload }
    }

    /// The body, and the envelope around it (its body taken out).
    pub fn split(self) -> (B, Envelope<()>) {
        let Envelope { version, sender, sender_addr, request_id, body, payload } = self;
        (body, Envelope { version, sender, sender_addr, request_id, body: (), payload })
    }
}

#[derive(Serialize)]
struct HeaderRef<'a, B> {
    version: u16,
    sender: &'a Id,
    sender_addr: &'a NodeAddr,
    request_id: u64,
    body: &'a B,
}

#[derive(Deserialize)]
struct HeaderRest<B> {
    sender: Id,
    sender_addr: NodeAddr,
    request_id: u64,
    body: B,
}

/// Encodes the length prefix and header into a fresh buffer and returns it with
/// the payload, so a driver can write both with one vectored write and no copy.
pub fn encode_frame_parts<B: Serialize>(env: &Envelope<B>, max_frame: usize) -> Result<(BytesMut, Bytes), WireError> {
    let mut head = BytesMut::with_capacity(64);
    encode_frame_head(env, &mut head, max_frame)?;
    Ok((head, env.payload.clone()))
}

/// Appends a frame's length prefix and header to `out` (a buffer the caller
/// reuses), leaving out the payload, which must follow them on the wire. On
/// error `out` is unchanged.
pub fn encode_frame_head<B: Serialize>(
    env: &Envelope<B>,
    out: &mut BytesMut,
    max_frame: usize,
) -> Result<(), WireError> {
    let header = HeaderRef {
        version: env.version,
        sender: &env.sender,
        sender_addr: &env.sender_addr,
        request_id: env.request_id,
        body: &env.body,
    };
    append_head(out, env.payload.len(), max_frame, |out| put_postcard(&header, out))
}

/// Appends a whole frame (prefix, header, payload) to `out`. On error `out` is unchanged.
pub fn encode_frame<B: Serialize>(env: &Envelope<B>, out: &mut BytesMut, max_frame: usize) -> Result<(), WireError> {
    encode_frame_head(env, out, max_frame)?;
    out.extend_from_slice(&env.payload);
    Ok(())
}

/// The part of a header that is the same on every frame one sender writes
/// (version, sender id and address), encoded once: postcard encodes a struct
/// as its fields one after the other, so a header is this followed by the
/// request id and the body (see [`encode_frame_head_prefixed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderPrefix(Vec<u8>);

impl HeaderPrefix {
    /// The prefix of every envelope [`Envelope::new`] makes for this sender.
    pub fn new(sender: &Id, sender_addr: &NodeAddr) -> Result<Self, WireError> {
        Ok(HeaderPrefix(postcard::to_allocvec(&(PROTOCOL_VERSION, sender, sender_addr))?))
    }

    /// The prefix of the frames `env`'s sender writes at this protocol
    /// version (`env.version` is not looked at: a decoded envelope has this
    /// one). See [`decode_after_prefix`].
    pub fn of<B>(env: &Envelope<B>) -> Result<Self, WireError> {
        Self::new(&env.sender, &env.sender_addr)
    }

    /// The encoded prefix.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The request id, body and payload of `frame` (as returned by
/// [`super::FrameDecoder::decode`]) if its header starts with `prefix`:
/// [`decode_envelope`] without decoding a sender known to the caller (a
/// link's peer writes the same prefix on every frame). `None` for a frame
/// with another prefix (decode it whole). The payload is a zero-copy slice
/// of `frame`.
pub fn decode_after_prefix<B: DeserializeOwned>(
    frame: &Bytes,
    prefix: &HeaderPrefix,
) -> Result<Option<(u64, B, Bytes)>, WireError> {
    let Some(rest) = frame.strip_prefix(prefix.0.as_slice()) else { return Ok(None) };
    let ((request_id, body), tail) = postcard::take_from_bytes::<(u64, B)>(rest)?;
    let payload = frame.slice(frame.len() - tail.len()..);
    Ok(Some((request_id, body, payload)))
}

/// [`encode_frame_head`] of `Envelope::new(sender, sender_addr, request_id,
/// body)` with a payload of `payload_len` bytes, `prefix` made for that
/// sender: the same bytes, without encoding the sender each time.
pub fn encode_frame_head_prefixed<B: Serialize>(
    prefix: &HeaderPrefix,
    request_id: u64,
    body: &B,
    payload_len: usize,
    out: &mut BytesMut,
    max_frame: usize,
) -> Result<(), WireError> {
    append_head(out, payload_len, max_frame, |out| {
        out.extend_from_slice(&prefix.0);
        put_postcard(&(request_id, body), out)
    })
}

/// Appends a length prefix, then what `write` puts after it (the header),
/// and sets the prefix to the frame's length with a payload of `payload_len`
/// bytes to follow. On error `out` is unchanged.
fn append_head(
    out: &mut BytesMut,
    payload_len: usize,
    max_frame: usize,
    write: impl FnOnce(&mut BytesMut) -> Result<(), WireError>,
) -> Result<(), WireError> {
    let start = out.len();
    out.put_u32(0); // back-patched
    let res = write(out).and_then(|()| {
        let len = out.len() - start - LEN_PREFIX + payload_len;
        patch_len(out, start, len, max_frame)
    });
    if res.is_err() {
        out.truncate(start);
    }
    res
}

/// Appends `value`, postcard-encoded. Most headers are small: serialized on
/// the stack and copied once (a byte at a time through `Extend` costs more
/// than the rest of a small MPI frame's encoding); larger ones go through
/// `Extend`.
fn put_postcard<T: Serialize>(value: &T, out: &mut BytesMut) -> Result<(), WireError> {
    let mut small = [0u8; SMALL_HEADER];
    match postcard::to_slice(value, &mut small) {
        Ok(bytes) => out.extend_from_slice(bytes),
        Err(postcard::Error::SerializeBufferFull) => {
            postcard::to_extend(value, BytesWriter(out))?;
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// Headers up to this many bytes are serialized on the stack first.
const SMALL_HEADER: usize = 256;

fn patch_len(buf: &mut BytesMut, at: usize, len: usize, max_frame: usize) -> Result<(), WireError> {
    buf[at..at + LEN_PREFIX].copy_from_slice(&frame_len(len, max_frame)?.to_be_bytes());
    Ok(())
}

/// The length prefix of a frame of `len` bytes (prefix excluded), if one
/// that long may be sent.
pub(crate) fn frame_len(len: usize, max_frame: usize) -> Result<u32, WireError> {
    u32::try_from(len)
        .ok()
        .filter(|_| len <= max_frame)
        .ok_or(WireError::FrameTooLarge { len: len as u64, max: max_frame })
}

/// `Extend<u8>` over a borrowed buffer, for postcard's `to_extend`.
struct BytesWriter<'a>(&'a mut BytesMut);

impl Extend<u8> for BytesWriter<'_> {
    fn extend<I: IntoIterator<Item = u8>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

/// Encodes `env` as one frame and decodes it again, as a sender and a receiver
/// would: the simulator runs every message through it, and tests pin the format
/// with it.
pub fn round_trip<B: Serialize + DeserializeOwned>(
    env: &Envelope<B>,
    max_frame: usize,
) -> Result<Envelope<B>, WireError> {
    let mut buf = BytesMut::new();
    encode_frame(env, &mut buf, max_frame)?;
    let mut dec = super::FrameDecoder::new(max_frame);
    dec.push(&buf);
    let frame = dec.decode()?.ok_or(WireError::Truncated { buffered: dec.buffered() })?;
    dec.finish()?;
    decode_envelope(frame)
}

/// Decodes one frame (as returned by [`super::FrameDecoder::decode`]) into an
/// envelope. The version is checked before anything else; the payload is a
/// zero-copy slice of `frame`.
pub fn decode_envelope<B: DeserializeOwned>(frame: Bytes) -> Result<Envelope<B>, WireError> {
    let (version, rest) = postcard::take_from_bytes::<u16>(&frame)?;
    if version != PROTOCOL_VERSION {
        return Err(WireError::WrongVersion { got: version, expected: PROTOCOL_VERSION });
    }
    let (h, tail) = postcard::take_from_bytes::<HeaderRest<B>>(rest)?;
    let payload = frame.slice(frame.len() - tail.len()..);
    Ok(Envelope {
        version,
        sender: h.sender,
        sender_addr: h.sender_addr,
        request_id: h.request_id,
        body: h.body,
        payload,
    })
}
