//! A message's bytes as the engine holds them: a small message's in place,
//! a larger one's shared.
//!
//! A message of a few bytes in a `Bytes` costs an allocation, an atomic
//! reference count and a free on each side of the link: the sender's copy,
//! kept until acknowledged, and the receiver's, kept until the application
//! takes it. A [`Payload`] of up to [`Payload::INLINE`] bytes made by
//! [`Payload::copy_from_slice`] carries them in place instead, and moves with
//! the frame or completion that holds it.

use std::fmt;
use std::ops::{Deref, RangeFrom};

use bytes::Bytes;

/// The bytes of a message: up to [`Payload::INLINE`] held in place when
/// copied in ([`Payload::copy_from_slice`]), else a shared [`Bytes`] (never
/// copied by the engine).
#[derive(Clone)]
pub struct Payload(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, buf: [u8; Payload::INLINE] },
    Shared(Bytes),
}

const _: () = assert!(Payload::INLINE <= u8::MAX as usize, "the length is kept in a u8");

impl Payload {
    /// The most bytes a payload holds in place: as many as leave it no
    /// larger than a `Bytes` (32 bytes on a 64-bit target), so a frame or
    /// completion that carries one moves no more bytes than before (larger
    /// values moved through the queues cost more than the allocation saved).
    pub const INLINE: usize = 23;

    /// No bytes.
    pub const fn new() -> Payload {
        Payload(Repr::Shared(Bytes::new()))
    }

    /// A copy of `bytes`: in place if they fit, else in a new shared buffer.
    pub fn copy_from_slice(bytes: &[u8]) -> Payload {
        if bytes.len() > Self::INLINE {
            return Payload(Repr::Shared(Bytes::copy_from_slice(bytes)));
        }
        let mut buf = [0; Self::INLINE];
        buf[..bytes.len()].copy_from_slice(bytes);
        Payload(Repr::Inline { len: bytes.len() as u8, buf })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, buf } => &buf[..usize::from(*len)],
            Repr::Shared(b) => b,
        }
    }

    /// The bytes as a `Bytes`: the shared buffer itself, or a copy of the
    /// ones held in place.
    pub fn into_bytes(self) -> Bytes {
        match self.0 {
            Repr::Inline { .. } => Bytes::copy_from_slice(self.as_slice()),
            Repr::Shared(b) => b,
        }
    }

    /// The bytes from `range.start` on, sharing the buffer where there is one.
    ///
    /// # Panics
    /// If the range starts past the end.
    pub fn slice_from(&self, range: RangeFrom<usize>) -> Bytes {
        match &self.0 {
            Repr::Inline { .. } => Bytes::copy_from_slice(&self.as_slice()[range]),
            Repr::Shared(b) => b.slice(range),
        }
    }
}

impl Default for Payload {
    fn default() -> Self {
        Payload::new()
    }
}

impl Deref for Payload {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

/// Shares the buffer (a small one too: the caller chose to share it).
impl From<Bytes> for Payload {
    fn from(b: Bytes) -> Self {
        Payload(Repr::Shared(b))
    }
}

impl From<&'static [u8]> for Payload {
    fn from(b: &'static [u8]) -> Self {
        Payload(Repr::Shared(Bytes::from_static(b)))
    }
}

impl From<Vec<u8>> for Payload {
    fn from(v: Vec<u8>) -> Self {
        Payload(Repr::Shared(Bytes::from(v)))
    }
}

impl From<Payload> for Bytes {
    fn from(p: Payload) -> Self {
        p.into_bytes()
    }
}

/// Equal when the bytes are, however they are held.
impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Payload {}

impl PartialEq<[u8]> for Payload {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<Bytes> for Payload {
    fn eq(&self, other: &Bytes) -> bool {
        self.as_slice() == other.as_ref()
    }
}

impl PartialEq<Payload> for Bytes {
    fn eq(&self, other: &Payload) -> bool {
        self.as_ref() == other.as_slice()
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&Bytes::copy_from_slice(self.as_slice()), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_copies_are_held_in_place_and_all_read_back_alike() {
        for n in [0, 1, 8, Payload::INLINE, Payload::INLINE + 1, 1000] {
            let src: Vec<u8> = (0..n).map(|i| i as u8).collect();
            let p = Payload::copy_from_slice(&src);
            assert_eq!(matches!(p.0, Repr::Inline { .. }), n <= Payload::INLINE, "{n} bytes");
            assert_eq!(&p[..], &src[..]);
            assert_eq!(p.len(), n);
            assert_eq!(p, Payload::from(Bytes::from(src.clone())), "equal however held");
            assert_eq!(p.clone().into_bytes(), Bytes::from(src.clone()));
            for at in [0, n / 2, n] {
                assert_eq!(p.slice_from(at..), src[at..]);
            }
        }
    }

    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_payload_takes_no_more_room_than_a_bytes() {
        // Moved with every frame and completion; the variant's tag lives in
        // a niche of `Bytes`.
        assert_eq!(std::mem::size_of::<Payload>(), std::mem::size_of::<Bytes>());
    }

    #[test]
    fn shared_bytes_stay_shared_whatever_their_size() {
        let b = Bytes::from_static(b"tiny");
        let p = Payload::from(b.clone());
        assert!(matches!(&p.0, Repr::Shared(s) if s.as_ptr() == b.as_ptr()));
        assert_eq!(p.into_bytes().as_ptr(), b.as_ptr(), "given back without a copy");
    }
}
