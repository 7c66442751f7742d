//! Length-prefixed framing over a byte stream.

use bytes::{Buf, Bytes, BytesMut};

use super::WireError;

/// Bytes of the big-endian length prefix.
pub const LEN_PREFIX: usize = 4;
/// Default largest frame (prefix excluded): 16 MiB.
pub const DEFAULT_MAX_FRAME: usize = 16 << 20;

/// Splits a byte stream into frames. Partial input stays buffered until the rest
/// arrives; a length prefix over the maximum is rejected before anything is
/// allocated for it.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: BytesMut,
    max_frame: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME)
    }
}

impl FrameDecoder {
    /// A decoder accepting frames of at most `max_frame` bytes.
    pub fn new(max_frame: usize) -> Self {
        FrameDecoder { buf: BytesMut::new(), max_frame }
    }

    /// The largest frame accepted.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// Appends received bytes.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The receive buffer, for drivers that read straight into it.
    pub fn buffer_mut(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// The frame whose length prefix is buffered: its length (prefix
    /// excluded) and the bytes still to come (0 once it is whole); `None`
    /// before a whole prefix is here.
    /// (A length over the limit is given as it is: [`FrameDecoder::decode`]
    /// refuses it.)
    pub fn pending(&self) -> Option<(usize, usize)> {
        let len = self.prefix_len()?;
        Some((len, (LEN_PREFIX + len).saturating_sub(self.buf.len())))
    }

    /// The length the buffered prefix gives, once a whole prefix is here.
    fn prefix_len(&self) -> Option<usize> {
        self.buf.first_chunk::<LEN_PREFIX>().map(|p| u32::from_be_bytes(*p) as usize)
    }

    /// Bytes buffered but not yet returned as a frame.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Reads the next frame where it lies, if it is whole and at most `max`
    /// bytes: `read` gets it (without its prefix) and says whether it took
    /// it; a frame taken is dropped from the buffer, any other stays for
    /// [`FrameDecoder::decode`]. `Ok(None)` when no frame is whole yet, the
    /// next is larger, or `read` left it; a length over the decoder's limit
    /// is an error, as there.
    pub fn take_small<R>(&mut self, max: usize, read: impl FnOnce(&[u8]) -> Option<R>) -> Result<Option<R>, WireError> {
        let Some(len) = self.next_len()? else { return Ok(None) };
        let Some(frame) = self.buf.get(LEN_PREFIX..LEN_PREFIX + len).filter(|_| len <= max) else { return Ok(None) };
        let got = read(frame);
        if got.is_some() {
            self.buf.advance(LEN_PREFIX + len);
        }
        Ok(got)
    }

    /// The length the next frame's prefix gives, once the prefix is here; an
    /// error over the decoder's limit.
    fn next_len(&self) -> Result<Option<usize>, WireError> {
        let Some(len) = self.prefix_len() else { return Ok(None) };
        if len > self.max_frame {
            return Err(WireError::FrameTooLarge { len: len as u64, max: self.max_frame });
        }
        Ok(Some(len))
    }

    /// The next complete frame (without its prefix), `Ok(None)` while incomplete.
    ///
    /// An error is final: the stream cannot be resynchronised, so the caller drops it.
    pub fn decode(&mut self) -> Result<Option<Bytes>, WireError> {
        let Some(len) = self.next_len()? else { return Ok(None) };
        let total = LEN_PREFIX + len;
        if self.buf.len() < total {
            // Room for the rest of this frame only: bounded by max_frame.
            self.buf.reserve(total - self.buf.len());
            return Ok(None);
        }
        self.buf.advance(LEN_PREFIX);
        Ok(Some(self.buf.split_to(len).freeze()))
    }

    /// Call at end of stream: an error if a frame was cut short.
    pub fn finish(&self) -> Result<(), WireError> {
        if self.buf.is_empty() { Ok(()) } else { Err(WireError::Truncated { buffered: self.buf.len() }) }
    }
}
