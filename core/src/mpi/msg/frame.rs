//! An engine frame's header written and read without serde: the same bytes
//! as [`wire::encode_frame_head_prefixed`] and [`wire::decode_after_prefix`]
//! with an [`MpiMsg`] body and request id 0 (every engine frame), the two
//! varints taken as the single bytes they always are there.

use bytes::{BufMut, Bytes, BytesMut};

use super::MpiMsg;
use super::form::MAX_LEN;
use crate::wire::{self, HeaderPrefix, LEN_PREFIX, WireError};

impl MpiMsg {
    /// Appends the length prefix and header of the frame of `self` from the
    /// sender `prefix` was made for, with a payload of `payload_len` bytes to
    /// follow: `wire::encode_frame_head_prefixed(prefix, 0, self, ..)`. On
    /// error `out` is unchanged.
    pub fn encode_frame_head(
        &self,
        prefix: &HeaderPrefix,
        payload_len: usize,
        out: &mut BytesMut,
        max_frame: usize,
    ) -> Result<(), WireError> {
        let mut form = [0; MAX_LEN];
        let n = self.put(&mut form);
        let head = prefix.as_bytes().len() + 2 + n;
        let len = wire::frame_len(head + payload_len, max_frame)?;
        out.reserve(LEN_PREFIX + head);
        out.put_u32(len);
        out.extend_from_slice(prefix.as_bytes());
        // Request id 0 and the form's length (under 128): a byte each.
        out.extend_from_slice(&[0, n as u8]);
        out.extend_from_slice(&form[..n]);
        Ok(())
    }

    /// `wire::decode_after_prefix::<MpiMsg>(frame, prefix)`: the request
    /// id, message and payload of `frame` if it starts with `prefix`. Read
    /// in place when the request id and the form's length are a byte each
    /// and the form is good; anything else (and any error) goes the serde
    /// way.
    pub fn decode_after_prefix(
        frame: &Bytes,
        prefix: &HeaderPrefix,
    ) -> Result<Option<(u64, MpiMsg, Bytes)>, WireError> {
        if let Some((id, msg, payload)) = MpiMsg::read_after_prefix(frame, prefix) {
            return Ok(Some((id, msg, frame.slice(frame.len() - payload.len()..))));
        }
        wire::decode_after_prefix(frame, prefix)
    }

    /// The in-place part of [`MpiMsg::decode_after_prefix`] on borrowed
    /// bytes: the request id, message and payload of `frame` when it starts
    /// with `prefix`, the request id and the form's length are a byte each
    /// and the form is good; `None` for anything else (which only the serde
    /// way can read or refuse).
    pub fn read_after_prefix<'a>(frame: &'a [u8], prefix: &HeaderPrefix) -> Option<(u64, MpiMsg, &'a [u8])> {
        let Some([id @ 0..0x80, n @ 0..0x80, rest @ ..]) = frame.strip_prefix(prefix.as_bytes()) else { return None };
        let (form, payload) = rest.split_at_checked(usize::from(*n))?;
        let msg = MpiMsg::take(form).ok()?;
        Some((u64::from(*id), msg, payload))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::id::Id;
    use crate::machine::NodeAddr;
    use crate::mpi::msg::form::tests::near_forms;
    use crate::mpi::tests::arb_msg;

    /// What may follow a sender part: mostly a request id (one byte, or an
    /// overlong or longer varint), a length near the form's, a form or
    /// nearly one, and a payload; else any bytes.
    fn near_tails() -> impl Strategy<Value = Vec<u8>> {
        let id = prop_oneof![
            8 => (0u8..0x80).prop_map(|b| vec![b]),
            1 => Just(vec![0x80, 0x00]),
            1 => Just(vec![0x81, 0x01]),
            1 => Just(vec![0x80]),
        ];
        let near = (id, near_forms(), -1i64..=1, proptest::collection::vec(any::<u8>(), 0..8)).prop_map(
            |(mut tail, form, off, payload)| {
                tail.push((form.len() as i64 + off).clamp(0, 0xff) as u8);
                tail.extend(form);
                tail.extend(payload);
                tail
            },
        );
        prop_oneof![4 => near, 1 => proptest::collection::vec(any::<u8>(), 0..60)]
    }

    fn prefix(port: u16) -> HeaderPrefix {
        HeaderPrefix::new(&Id::hash("rank"), &NodeAddr::loopback(7, port)).unwrap()
    }

    proptest! {
        /// The header is the serde one's bytes, refused alike when too big;
        /// the frame reads back as serde reads it, payload and all.
        #[test]
        fn a_frame_is_the_serde_frame_and_reads_back_alike(
            m in arb_msg(),
            payload in proptest::collection::vec(any::<u8>(), 0..40),
            max in 0usize..200,
        ) {
            let p = prefix(9000);
            let (mut fast, mut slow) = (BytesMut::from(&b"x"[..]), BytesMut::from(&b"x"[..]));
            let a = m.encode_frame_head(&p, payload.len(), &mut fast, max);
            let b = wire::encode_frame_head_prefixed(&p, 0, &m, payload.len(), &mut slow, max);
            prop_assert_eq!(a.is_ok(), b.is_ok());
            prop_assert_eq!(&fast, &slow);
            if a.is_err() {
                return Ok(());
            }
            fast.extend_from_slice(&payload);
            let frame = fast.freeze().slice(1 + LEN_PREFIX..);
            let got = MpiMsg::decode_after_prefix(&frame, &p).unwrap();
            prop_assert_eq!(&got, &wire::decode_after_prefix::<MpiMsg>(&frame, &p).unwrap());
            prop_assert_eq!(got, Some((0, m, Bytes::from(payload))));
            prop_assert_eq!(MpiMsg::decode_after_prefix(&frame, &prefix(9001)).unwrap(), None);
        }

        /// Whatever follows a sender part, both ways read it alike: the same
        /// request id, message and payload, or the same error.
        #[test]
        fn any_bytes_after_the_sender_part_read_alike(tail in near_tails()) {
            let p = prefix(9000);
            let frame = Bytes::from([p.as_bytes(), &tail].concat());
            prop_assert_eq!(MpiMsg::decode_after_prefix(&frame, &p), wire::decode_after_prefix::<MpiMsg>(&frame, &p));
        }
    }
}
