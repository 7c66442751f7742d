use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::*;
use crate::id::Id;
use crate::machine::NodeAddr;
use crate::overlay::OverlayKind;

/// Encodes then decodes one envelope through the whole frame path.
fn rt<B: Serialize + DeserializeOwned>(env: &Envelope<B>) -> Envelope<B> {
    round_trip(env, DEFAULT_MAX_FRAME).unwrap()
}

fn env<B>(body: B) -> Envelope<B> {
    Envelope::new(Id::hash("sender"), NodeAddr::loopback(1, 4000), 7, body)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Sample {
    Small(u8),
    Text(String),
    Many(Vec<u64>),
}

fn arb_addr() -> impl Strategy<Value = NodeAddr> {
    (any::<u32>(), any::<u16>()).prop_map(|(n, p)| NodeAddr::loopback(n, p))
}

fn arb_hello() -> impl Strategy<Value = Hello> {
    let kind = prop_oneof![
        Just(None),
        Just(Some(OverlayKind::Chord)),
        any::<u8>().prop_map(|dims| Some(OverlayKind::Can { dims }))
    ];
    (any::<u64>(), arb_addr(), kind).prop_map(|(network_id, listen, overlay)| Hello { network_id, listen, overlay })
}

fn arb_goodbye() -> impl Strategy<Value = Goodbye> {
    prop_oneof![Just(Goodbye::Leaving), Just(Goodbye::ProtocolError), Just(Goodbye::WrongNetwork)]
}

fn arb_envelope<B: std::fmt::Debug>(body: impl Strategy<Value = B>) -> impl Strategy<Value = Envelope<B>> {
    (any::<[u8; 20]>(), arb_addr(), any::<u64>(), body, proptest::collection::vec(any::<u8>(), 0..300))
        .prop_map(|(s, a, r, b, p)| Envelope::new(Id::from_bytes(s), a, r, b).with_payload(Bytes::from(p)))
}

#[test]
fn golden_bytes_pin_the_format() {
    let e = Envelope::new(Id::ZERO, NodeAddr("127.0.0.1:80".parse().unwrap()), 1, Goodbye::WrongNetwork)
        .with_payload(Bytes::from_static(b"xy"));
    let mut buf = BytesMut::new();
    encode_frame(&e, &mut buf, DEFAULT_MAX_FRAME).unwrap();
    let mut want = vec![0, 0, 0, 31, 2]; // len, version 2
    want.extend([0u8; 20]); // sender
    want.extend([0, 127, 0, 0, 1, 80]); // SocketAddr::V4, ip, port varint
    want.extend([1, 2]); // request id, Goodbye variant 2
    want.extend(b"xy");
    assert_eq!(&buf[..], &want[..]);
}

#[test]
fn payload_is_a_zero_copy_slice_of_the_frame() {
    let e = env(Sample::Small(3)).with_payload(Bytes::from(vec![9u8; 1000]));
    let mut buf = BytesMut::new();
    encode_frame(&e, &mut buf, DEFAULT_MAX_FRAME).unwrap();
    let mut dec = FrameDecoder::default();
    dec.push(&buf);
    let frame = dec.decode().unwrap().unwrap();
    let start = frame.as_ptr() as usize;
    let got: Envelope<Sample> = decode_envelope(frame.clone()).unwrap();
    let p = got.payload.as_ptr() as usize;
    assert!(p >= start && p + got.payload.len() <= start + frame.len(), "payload points into the frame");
    assert_eq!(got, e);
}

#[test]
fn parts_encoding_equals_whole_encoding() {
    let e = env(Sample::Text("hi".into())).with_payload(Bytes::from_static(b"payload"));
    let mut whole = BytesMut::new();
    encode_frame(&e, &mut whole, DEFAULT_MAX_FRAME).unwrap();
    let (head, payload) = encode_frame_parts(&e, DEFAULT_MAX_FRAME).unwrap();
    assert_eq!([&head[..], &payload[..]].concat(), &whole[..]);
}

#[test]
fn heads_appended_to_a_reused_buffer_equal_whole_encodings_small_and_large() {
    // A small header is serialized on the stack, a large one through Extend.
    for body in [Sample::Small(3), Sample::Many((0..200).collect())] {
        let e = env(body).with_payload(Bytes::from_static(b"payload"));
        let mut whole = BytesMut::new();
        encode_frame(&e, &mut whole, DEFAULT_MAX_FRAME).unwrap();
        let mut head = BytesMut::from(&b"kept"[..]);
        encode_frame_head(&e, &mut head, DEFAULT_MAX_FRAME).unwrap();
        assert_eq!(&head[..4], b"kept");
        assert_eq!([&head[4..], &e.payload[..]].concat(), &whole[..]);
        assert_eq!(
            encode_frame_head(&e, &mut head, 10),
            Err(WireError::FrameTooLarge { len: whole.len() as u64 - 4, max: 10 })
        );
        assert_eq!(head.len(), 4 + whole.len() - e.payload.len(), "unchanged on error");
    }
}

#[test]
fn prefixed_heads_equal_whole_encodings() {
    let sender = Id::hash("sender");
    let addr = NodeAddr::loopback(1, 4000);
    let prefix = HeaderPrefix::new(&sender, &addr).unwrap();
    for (rid, body) in
        [(0, Sample::Small(3)), (7, Sample::Text("hi".into())), (1 << 40, Sample::Many((0..200).collect()))]
    {
        let e = Envelope::new(sender, addr, rid, body).with_payload(Bytes::from_static(b"payload"));
        let mut whole = BytesMut::new();
        encode_frame(&e, &mut whole, DEFAULT_MAX_FRAME).unwrap();
        let mut head = BytesMut::from(&b"kept"[..]);
        encode_frame_head_prefixed(&prefix, rid, &e.body, e.payload.len(), &mut head, DEFAULT_MAX_FRAME).unwrap();
        assert_eq!([&head[4..], &e.payload[..]].concat(), &whole[..]);
        let refused = encode_frame_head_prefixed(&prefix, rid, &e.body, e.payload.len(), &mut head, 10);
        assert!(matches!(refused, Err(WireError::FrameTooLarge { .. })));
        assert_eq!(head.len(), 4 + whole.len() - e.payload.len(), "unchanged on error");
    }
}

#[test]
fn oversized_frames_are_refused_both_ways() {
    let mut dec = FrameDecoder::new(100);
    dec.push(&101u32.to_be_bytes());
    assert_eq!(dec.decode(), Err(WireError::FrameTooLarge { len: 101, max: 100 }));

    // A 1 GiB prefix allocates nothing.
    let mut dec = FrameDecoder::default();
    dec.push(&(1u32 << 30).to_be_bytes());
    assert!(matches!(dec.decode(), Err(WireError::FrameTooLarge { .. })));
    assert!(dec.buffer_mut().capacity() < 1 << 20);

    let e = env(Sample::Many(vec![0; 10])).with_payload(Bytes::from(vec![0u8; 200]));
    let mut out = BytesMut::from(&b"keep"[..]);
    assert!(matches!(encode_frame(&e, &mut out, 100), Err(WireError::FrameTooLarge { .. })));
    assert_eq!(&out[..], b"keep", "a failed encode leaves the buffer as it was");
}

#[test]
fn the_pending_frame_says_its_length_and_what_is_missing() {
    let mut dec = FrameDecoder::default();
    assert_eq!(dec.pending(), None, "nothing buffered");
    dec.push(&[0, 0, 4]);
    assert_eq!(dec.pending(), None, "a prefix not whole yet");
    dec.push(&[0, 1, 2]);
    assert_eq!(dec.pending(), Some((1024, 1022)));
    dec.push(&[0; 1022]);
    assert_eq!(dec.pending(), Some((1024, 0)), "whole");
    dec.push(&[0, 0, 0, 1]);
    assert_eq!(dec.pending(), Some((1024, 0)), "bytes past the frame are the next one's");
    assert_eq!(dec.decode().unwrap().map(|f| f.len()), Some(1024));
    assert_eq!(dec.pending(), Some((1, 1)), "the next frame");
}

#[test]
fn truncated_stream_is_reported_at_finish() {
    let mut buf = BytesMut::new();
    encode_frame(&env(Sample::Small(1)), &mut buf, DEFAULT_MAX_FRAME).unwrap();
    let mut dec = FrameDecoder::default();
    dec.push(&buf[..buf.len() - 1]);
    assert_eq!(dec.decode(), Ok(None));
    assert!(matches!(dec.finish(), Err(WireError::Truncated { .. })));
}

#[test]
fn wrong_version_and_malformed_headers_are_typed_errors() {
    let mut bad = env(Sample::Small(1));
    bad.version = 9;
    let mut buf = BytesMut::new();
    encode_frame(&bad, &mut buf, DEFAULT_MAX_FRAME).unwrap();
    let frame = Bytes::copy_from_slice(&buf[LEN_PREFIX..]);
    assert_eq!(
        decode_envelope::<Sample>(frame).unwrap_err(),
        WireError::WrongVersion { got: 9, expected: PROTOCOL_VERSION }
    );

    // Header cut short inside the sender id.
    let frame = Bytes::from_static(&[PROTOCOL_VERSION as u8, 0, 0, 0]);
    assert!(matches!(decode_envelope::<Sample>(frame), Err(WireError::Malformed(_))));
    // An enum variant index that does not exist.
    let mut buf = BytesMut::new();
    encode_frame(&env(Goodbye::Leaving), &mut buf, DEFAULT_MAX_FRAME).unwrap();
    let last = buf.len() - 1;
    buf[last] = 99;
    assert!(matches!(decode_envelope::<Goodbye>(buf.split_off(LEN_PREFIX).freeze()), Err(WireError::Malformed(_))));
}

proptest! {
    #[test]
    fn hello_round_trips(e in arb_envelope(arb_hello())) {
        prop_assert_eq!(rt(&e), e);
    }

    #[test]
    fn goodbye_round_trips(e in arb_envelope(arb_goodbye())) {
        prop_assert_eq!(rt(&e), e);
    }

    #[test]
    fn any_chunking_decodes_the_same_frames(
        msgs in proptest::collection::vec(arb_envelope(arb_hello()), 1..8),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..20),
        small in 0usize..200,
    ) {
        let mut stream = BytesMut::new();
        for m in &msgs {
            encode_frame(m, &mut stream, DEFAULT_MAX_FRAME).unwrap();
        }
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
        points.push(0);
        points.push(stream.len());
        points.sort_unstable();
        // Decoded, and read as the MPI transport reads: frames of up to
        // `small` bytes read in place, larger ones decoded.
        let (mut dec, mut reading) = (FrameDecoder::default(), FrameDecoder::default());
        let (mut got, mut read, mut in_place) = (Vec::new(), Vec::new(), 0);
        for w in points.windows(2) {
            dec.push(&stream[w[0]..w[1]]);
            reading.push(&stream[w[0]..w[1]]);
            while let Some(f) = dec.decode().unwrap() {
                got.push(decode_envelope::<Hello>(f).unwrap());
            }
            loop {
                let f = match reading.take_small(small, |f| Some(Bytes::copy_from_slice(f))).unwrap() {
                    Some(f) => {
                        in_place += 1;
                        f
                    }
                    None => match reading.decode().unwrap() {
                        Some(f) => {
                            prop_assert!(f.len() > small, "a small whole frame is read in place");
                            f
                        }
                        None => break,
                    },
                };
                read.push(decode_envelope::<Hello>(f).unwrap());
            }
        }
        dec.finish().unwrap();
        reading.finish().unwrap();
        prop_assert_eq!(&got, &msgs);
        prop_assert_eq!(&read, &msgs);
        let small_frames = msgs.iter().filter(|m| {
            let mut b = BytesMut::new();
            encode_frame(*m, &mut b, DEFAULT_MAX_FRAME).unwrap();
            b.len() - LEN_PREFIX <= small
        });
        prop_assert_eq!(in_place, small_frames.count());
    }

    #[test]
    fn a_frame_read_in_place_is_dropped_only_when_taken_and_whole(len in 0u32..64, have in 0usize..80, take: bool) {
        let mut stream = len.to_be_bytes().to_vec();
        stream.extend(std::iter::repeat_n(7u8, len as usize));
        stream.extend([0, 0, 0, 1, 9]);
        let mut dec = FrameDecoder::default();
        let have = have.min(stream.len());
        dec.push(&stream[..have]);
        let whole = have >= LEN_PREFIX + len as usize;
        let mut seen = None;
        let got = dec.take_small(64, |f| {
            seen = Some(f.to_vec());
            take.then_some(())
        });
        prop_assert_eq!(got, Ok(take.then_some(()).filter(|_| whole)));
        prop_assert_eq!(seen, whole.then(|| vec![7u8; len as usize]));
        let dropped = whole && take;
        prop_assert_eq!(dec.buffered(), if dropped { have - LEN_PREFIX - len as usize } else { have });
        // What follows is the next frame, whole or in part.
        if dropped && have == stream.len() {
            prop_assert_eq!(dec.take_small(64, |f| Some(f.to_vec())), Ok(Some(vec![9])));
        }
    }

    #[test]
    fn a_length_over_the_limit_is_refused_when_read_in_place_too(len in 65u32..1000) {
        let mut dec = FrameDecoder::new(64);
        dec.push(&len.to_be_bytes());
        prop_assert_eq!(
            dec.take_small(1000, |_| Some(())),
            Err(WireError::FrameTooLarge { len: u64::from(len), max: 64 })
        );
        prop_assert_eq!(dec.decode(), Err(WireError::FrameTooLarge { len: u64::from(len), max: 64 }));
    }

    #[test]
    fn frames_decode_alike_after_their_senders_prefix_and_others_fall_back(
        e in arb_envelope(arb_hello()),
        other in arb_addr(),
    ) {
        let mut buf = BytesMut::new();
        encode_frame(&e, &mut buf, DEFAULT_MAX_FRAME).unwrap();
        let frame = buf.split_off(LEN_PREFIX).freeze();
        let prefix = HeaderPrefix::of(&e).unwrap();
        let got = decode_after_prefix::<Hello>(&frame, &prefix).unwrap();
        prop_assert_eq!(got, Some((e.request_id, e.body.clone(), e.payload.clone())));
        let elsewhere = HeaderPrefix::new(&e.sender, &other).unwrap();
        let got = decode_after_prefix::<Hello>(&frame, &elsewhere).unwrap();
        prop_assert_eq!(got.is_none(), other != e.sender_addr, "another sender's frame is not taken for this one's");
        // Cut short: an error, never a panic or a body made up.
        let short = frame.slice(..frame.len() - e.payload.len() - 1);
        prop_assert!(decode_after_prefix::<Hello>(&short, &prefix).is_err());
    }

    #[test]
    fn any_bytes_after_a_senders_part_decode_alike_whole_and_after_it(
        tail in proptest::collection::vec(any::<u8>(), 0..64),
        addr in arb_addr(),
    ) {
        let mut frame = postcard::to_allocvec(&(PROTOCOL_VERSION, Id::hash("s"), addr)).unwrap();
        frame.extend(tail);
        crate::fuzzing::envelope(&frame);
    }

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        crate::fuzzing::frame_stream(&data);
        crate::fuzzing::envelope(&data);
    }
}
