//! The fixed binary form an [`MpiMsg`] travels in (on every link, and in a
//! saved engine): a kind byte, then the fields as little-endian integers,
//! written and read at fixed offsets. It goes to serde as one byte string,
//! so in postcard (the only format it is written in) it is a length byte
//! and these bytes. serde's own form of the enum (a varint per field, each
//! through the serializer) cost about half the encoding and decoding of a
//! small message's header.

use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

use super::{MpiMsg, SeqHdr};

/// The longest form (an Rts or a Data).
pub(super) const MAX_LEN: usize = 1 + HDR_LEN + 16;
/// A [`SeqHdr`]: three u64.
const HDR_LEN: usize = 24;

const EAGER: u8 = 0;
const RTS: u8 = 1;
const CTS: u8 = 2;
const DATA: u8 = 3;
const ACK: u8 = 4;
const CANCEL_REQ: u8 = 5;
const CANCEL_ANS: u8 = 6;

/// Why bytes are not an [`MpiMsg`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FormError {
    Empty,
    UnknownKind(u8),
    /// Too short or too long for its kind.
    Length {
        kind: u8,
        len: usize,
    },
    NotABool(u8),
}

impl std::fmt::Display for FormError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FormError::Empty => write!(f, "an MPI message of no bytes"),
            FormError::UnknownKind(k) => write!(f, "unknown MPI message kind {k}"),
            FormError::Length { kind, len } => write!(f, "{len} bytes for an MPI message of kind {kind}"),
            FormError::NotABool(b) => write!(f, "{b} where 0 or 1 was expected"),
        }
    }
}

/// Where the fields are written.
struct Put<'a> {
    buf: &'a mut [u8; MAX_LEN],
    at: usize,
}

impl Put<'_> {
    fn bytes<const N: usize>(&mut self, b: [u8; N]) {
        self.buf[self.at..self.at + N].copy_from_slice(&b);
        self.at += N;
    }

    fn u64(&mut self, v: u64) {
        self.bytes(v.to_le_bytes());
    }

    fn hdr(&mut self, kind: u8, h: SeqHdr) {
        self.bytes([kind]);
        self.u64(h.seq);
        self.u64(h.ack);
        self.u64(h.credit);
    }
}

/// Where the fields are read from: the bytes after the kind, of exactly the
/// kind's length (checked before any field is read).
struct Take<'a>(&'a [u8]);

impl Take<'_> {
    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        // Invariant: each kind reads exactly the length `take` checked.
        let (b, rest) = self.0.split_first_chunk::<N>().expect("the form's length was checked");
        self.0 = rest;
        *b
    }

    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.bytes())
    }

    fn hdr(&mut self) -> SeqHdr {
        SeqHdr { seq: self.u64(), ack: self.u64(), credit: self.u64() }
    }
}

/// Bytes after the kind byte of each kind.
fn body_len(kind: u8) -> Option<usize> {
    Some(match kind {
        EAGER => HDR_LEN + 4 + 4,
        RTS => HDR_LEN + 4 + 4 + 8,
        CTS | CANCEL_REQ => HDR_LEN + 8,
        DATA => HDR_LEN + 8 + 8,
        ACK => 8 + 8,
        CANCEL_ANS => HDR_LEN + 8 + 1,
        _ => return None,
    })
}

impl MpiMsg {
    /// Writes the fixed form into `buf`; its length.
    pub(super) fn put(&self, buf: &mut [u8; MAX_LEN]) -> usize {
        let mut w = Put { buf, at: 0 };
        match *self {
            MpiMsg::Eager { hdr, comm, tag } => {
                w.hdr(EAGER, hdr);
                w.bytes(comm.to_le_bytes());
                w.bytes(tag.to_le_bytes());
            }
            MpiMsg::Rts { hdr, comm, tag, len } => {
                w.hdr(RTS, hdr);
                w.bytes(comm.to_le_bytes());
                w.bytes(tag.to_le_bytes());
                w.u64(len);
            }
            MpiMsg::Cts { hdr, rts_seq } => {
                w.hdr(CTS, hdr);
                w.u64(rts_seq);
            }
            MpiMsg::Data { hdr, rts_seq, offset } => {
                w.hdr(DATA, hdr);
                w.u64(rts_seq);
                w.u64(offset);
            }
            MpiMsg::Ack { ack, credit } => {
                w.bytes([ACK]);
                w.u64(ack);
                w.u64(credit);
            }
            MpiMsg::CancelReq { hdr, seq } => {
                w.hdr(CANCEL_REQ, hdr);
                w.u64(seq);
            }
            MpiMsg::CancelAns { hdr, seq, cancelled } => {
                w.hdr(CANCEL_ANS, hdr);
                w.u64(seq);
                w.bytes([u8::from(cancelled)]);
            }
        }
        w.at
    }

    /// The message whose fixed form is exactly `b`.
    pub(super) fn take(b: &[u8]) -> Result<MpiMsg, FormError> {
        let (&kind, rest) = b.split_first().ok_or(FormError::Empty)?;
        let want = body_len(kind).ok_or(FormError::UnknownKind(kind))?;
        if rest.len() != want {
            return Err(FormError::Length { kind, len: b.len() });
        }
        let mut r = Take(rest);
        Ok(match kind {
            EAGER => {
                MpiMsg::Eager { hdr: r.hdr(), comm: u32::from_le_bytes(r.bytes()), tag: i32::from_le_bytes(r.bytes()) }
            }
            RTS => MpiMsg::Rts {
                hdr: r.hdr(),
                comm: u32::from_le_bytes(r.bytes()),
                tag: i32::from_le_bytes(r.bytes()),
                len: r.u64(),
            },
            CTS => MpiMsg::Cts { hdr: r.hdr(), rts_seq: r.u64() },
            DATA => MpiMsg::Data { hdr: r.hdr(), rts_seq: r.u64(), offset: r.u64() },
            ACK => MpiMsg::Ack { ack: r.u64(), credit: r.u64() },
            CANCEL_REQ => MpiMsg::CancelReq { hdr: r.hdr(), seq: r.u64() },
            CANCEL_ANS => {
                let (hdr, seq) = (r.hdr(), r.u64());
                let cancelled = match r.bytes::<1>() {
                    [0] => false,
                    [1] => true,
                    [b] => return Err(FormError::NotABool(b)),
                };
                MpiMsg::CancelAns { hdr, seq, cancelled }
            }
            _ => return Err(FormError::UnknownKind(kind)),
        })
    }
}

impl Serialize for MpiMsg {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut buf = [0; MAX_LEN];
        let n = self.put(&mut buf);
        s.serialize_bytes(&buf[..n])
    }
}

impl<'de> Deserialize<'de> for MpiMsg {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_bytes(FormVisitor)
    }
}

struct FormVisitor;

impl de::Visitor<'_> for FormVisitor {
    type Value = MpiMsg;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an MPI message in its fixed form")
    }

    fn visit_bytes<E: de::Error>(self, b: &[u8]) -> Result<MpiMsg, E> {
        MpiMsg::take(b).map_err(E::custom)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::mpi::tests::arb_msg;

    proptest! {
        /// Every message comes back as it went, in a form of its kind's
        /// length, and through postcard as that form after a length byte.
        #[test]
        fn every_message_comes_back_from_its_form(m in arb_msg()) {
            let mut buf = [0; MAX_LEN];
            let n = m.put(&mut buf);
            prop_assert_eq!(Some(n - 1), body_len(buf[0]));
            prop_assert_eq!(MpiMsg::take(&buf[..n]), Ok(m));
            let enc = postcard::to_allocvec(&m).unwrap();
            prop_assert_eq!(enc[0] as usize, n);
            prop_assert_eq!(&enc[1..], &buf[..n]);
            prop_assert_eq!(postcard::from_bytes::<MpiMsg>(&enc).unwrap(), m);
        }

        /// Any bytes are a message or an error, never a panic; a message
        /// read from them writes them back exactly. The bytes are mostly a
        /// kind (and one past the last) with about its length.
        #[test]
        fn any_bytes_are_a_message_that_writes_them_back_or_an_error(b in near_forms()) {
            if let Ok(m) = MpiMsg::take(&b) {
                let mut buf = [0; MAX_LEN];
                let n = m.put(&mut buf);
                prop_assert_eq!(&buf[..n], &b[..]);
            }
        }
    }

    /// Bytes that are often a form or nearly one: a kind up to one past
    /// the last, a body of its length give or take a byte, or any bytes.
    pub(in crate::mpi) fn near_forms() -> impl Strategy<Value = Vec<u8>> {
        let near = (0..=CANCEL_ANS + 1, -1i64..=1, proptest::collection::vec(any::<u8>(), MAX_LEN)).prop_map(
            |(kind, off, body)| {
                let len = body_len(kind).map_or(8, |l| l as i64 + off) as usize;
                let mut b = vec![kind];
                b.extend_from_slice(&body[..len.min(MAX_LEN)]);
                if kind == CANCEL_ANS && off == 0 {
                    b[len] %= 3; // the flag: 0, 1, or not a flag
                }
                b
            },
        );
        prop_oneof![4 => near, 1 => proptest::collection::vec(any::<u8>(), 0..60)]
    }

    #[test]
    fn the_longest_form_has_room_for_every_kind() {
        assert_eq!(MAX_LEN, 1 + (0..=u8::MAX).filter_map(body_len).max().unwrap());
    }

    #[test]
    fn a_wrong_kind_length_or_flag_is_refused_by_name() {
        assert_eq!(MpiMsg::take(&[]), Err(FormError::Empty));
        assert_eq!(MpiMsg::take(&[7; 41]), Err(FormError::UnknownKind(7)));
        assert_eq!(MpiMsg::take(&[ACK; 16]), Err(FormError::Length { kind: ACK, len: 16 }));
        let mut ans = [0u8; 34];
        ans[0] = CANCEL_ANS;
        ans[33] = 2;
        assert_eq!(MpiMsg::take(&ans), Err(FormError::NotABool(2)));
        ans[33] = 1;
        assert!(matches!(MpiMsg::take(&ans), Ok(MpiMsg::CancelAns { cancelled: true, .. })));
    }
}
