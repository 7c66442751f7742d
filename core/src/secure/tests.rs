use bytes::{Buf, BufMut, BytesMut};

use super::*;

fn rng(n: u8) -> SecureRng {
    SecureRng::from_seed([n; 32])
}

/// Two channels, handshaken by passing bytes back and forth in `chunk`-sized pieces.
fn pair(chunk: usize) -> (SecureChannel, SecureChannel, StaticKey, StaticKey) {
    let (mut ra, mut rb) = (rng(1), rng(2));
    let (ka, kb) = (StaticKey::generate(&mut ra), StaticKey::generate(&mut rb));
    let mut to_b = BytesMut::new();
    let mut a = SecureChannel::initiator(&ka, ra.seed(), &mut to_b);
    let mut b = SecureChannel::responder(&kb, rb.seed());
    let mut plain = BytesMut::new();
    for _ in 0..4 {
        let mut to_a = BytesMut::new();
        for c in to_b.split().chunks(chunk) {
            b.on_bytes(c, &mut plain, &mut to_a).unwrap();
        }
        for c in to_a.chunks(chunk) {
            a.on_bytes(c, &mut plain, &mut to_b).unwrap();
        }
    }
    assert!(plain.is_empty(), "no application bytes in a handshake");
    (a, b, ka, kb)
}

#[test]
fn handshake_authenticates_both_static_keys() {
    for chunk in [1, 7, 1000] {
        let (a, b, ka, kb) = pair(chunk);
        assert!(a.is_open() && b.is_open());
        assert_eq!(a.remote_key(), Some(kb.public()));
        assert_eq!(b.remote_key(), Some(ka.public()));
    }
}

#[test]
fn records_carry_bytes_encrypted_and_split_at_the_record_limit() {
    let (mut a, mut b, ..) = pair(usize::MAX);
    let marker = b"MARKER-plaintext-must-not-appear".repeat(5000);
    let mut wire = BytesMut::new();
    a.seal(&marker, &mut wire).unwrap();
    assert_eq!(wire.len(), SecureChannel::sealed_len(marker.len()));
    assert!(marker.len() > MAX_PLAIN_RECORD, "spans several records");
    assert!(!wire.windows(6).any(|w| w == b"MARKER"), "no plaintext on the wire");
    let (mut plain, mut out) = (BytesMut::new(), BytesMut::new());
    for c in wire.chunks(4093) {
        b.on_bytes(c, &mut plain, &mut out).unwrap();
    }
    assert_eq!(&plain[..], &marker[..]);
    assert!(out.is_empty());
}

#[test]
fn a_flipped_bit_breaks_the_channel_for_good() {
    let (mut a, mut b, ..) = pair(usize::MAX);
    let mut wire = BytesMut::new();
    a.seal(b"hello", &mut wire).unwrap();
    wire[5] ^= 1;
    let (mut plain, mut out) = (BytesMut::new(), BytesMut::new());
    assert_eq!(b.on_bytes(&wire, &mut plain, &mut out), Err(SecureError::BadRecord));
    assert!(plain.is_empty());
    assert_eq!(b.on_bytes(b"", &mut plain, &mut out), Err(SecureError::Broken));
}

#[test]
fn a_replayed_record_does_not_authenticate() {
    let (mut a, mut b, ..) = pair(usize::MAX);
    let mut wire = BytesMut::new();
    a.seal(b"once", &mut wire).unwrap();
    let (mut plain, mut out) = (BytesMut::new(), BytesMut::new());
    b.on_bytes(&wire, &mut plain, &mut out).unwrap();
    assert_eq!(b.on_bytes(&wire, &mut plain, &mut out), Err(SecureError::BadRecord));
}

#[test]
fn plaintext_frames_are_not_a_handshake() {
    let mut r = rng(3);
    let k = StaticKey::generate(&mut r);
    let mut b = SecureChannel::responder(&k, r.seed());
    let (mut plain, mut out) = (BytesMut::new(), BytesMut::new());
    let res = b.on_bytes(&[0, 0, 0, 40, 1, 0, 7, 7, 7, 7], &mut plain, &mut out);
    assert!(matches!(res, Err(SecureError::Handshake(_))), "{res:?}");
    assert!(!b.is_open() && plain.is_empty());
}

#[test]
fn keys_round_trip_through_their_private_half_and_hex() {
    let k = StaticKey::generate(&mut rng(4));
    assert_eq!(StaticKey::from_private(*k.private_bytes()), k);
    assert_eq!(PublicKey::from_hex(&k.public().to_string()), Some(k.public()));
    assert_eq!(PublicKey::from_hex("zz"), None);
    let hex: String = k.private_bytes().iter().map(|b| format!("{b:02x}")).collect();
    assert!(!format!("{k:?}").contains(&hex), "Debug hides the private key");
}

#[test]
fn bytes_sealed_during_the_handshake_ride_with_it_and_the_rest_follows() {
    let (mut ra, mut rb) = (rng(5), rng(6));
    let (ka, kb) = (StaticKey::generate(&mut ra), StaticKey::generate(&mut rb));
    let mut to_b = BytesMut::new();
    let mut a = SecureChannel::initiator(&ka, ra.seed(), &mut to_b);
    let mut b = SecureChannel::responder(&kb, rb.seed());
    let big = vec![7u8; 100_000];
    a.seal(b"hello from a", &mut BytesMut::new()).unwrap();
    a.seal(&big, &mut BytesMut::new()).unwrap();
    b.seal(b"hello from b", &mut BytesMut::new()).unwrap();
    let (mut at_a, mut at_b, mut to_a) = (BytesMut::new(), BytesMut::new(), BytesMut::new());
    b.on_bytes(&to_b.split(), &mut at_b, &mut to_a).unwrap();
    assert!(at_b.is_empty(), "the first message carries nothing");
    a.on_bytes(&to_a.split(), &mut at_a, &mut to_b).unwrap();
    assert_eq!(&at_a[..], b"hello from b", "the responder's early bytes ride its handshake message");
    assert!(a.is_open() && a.early() == 0);
    b.on_bytes(&to_b.split(), &mut at_b, &mut to_a).unwrap();
    assert!(to_a.is_empty());
    assert_eq!(&at_b[..12], b"hello from a");
    assert_eq!(&at_b[12..], &big[..]);
}

#[test]
fn a_first_message_carrying_bytes_is_refused() {
    let mut r = rng(7);
    let k = StaticKey::generate(&mut r);
    let mut b = SecureChannel::responder(&k, r.seed());
    // A first message is an ephemeral key (32 bytes); anything after it is an
    // unauthenticated payload.
    let mut msg = vec![0u8, 40];
    msg.extend_from_slice(&[9u8; 32]);
    msg.extend_from_slice(b"forged!!");
    let (mut plain, mut out) = (BytesMut::new(), BytesMut::new());
    assert!(matches!(b.on_bytes(&msg, &mut plain, &mut out), Err(SecureError::Handshake(_))));
    assert!(plain.is_empty(), "nothing unauthenticated reaches the caller");
}

#[test]
fn a_first_record_of_the_wrong_length_is_refused_at_once() {
    let mut r = rng(8);
    let k = StaticKey::generate(&mut r);
    let mut b = SecureChannel::responder(&k, r.seed());
    let (mut plain, mut out) = (BytesMut::new(), BytesMut::new());
    // "GE" announces 18,245 bytes: refused without waiting for them.
    assert!(matches!(b.on_bytes(b"GET / HTTP/1.1", &mut plain, &mut out), Err(SecureError::Handshake(_))));
}

/// Records are snow's transport messages: a channel talks to a bare snow peer
/// both ways, so sealing in place kept the wire format.
#[test]
fn records_are_the_transport_messages_snow_makes_and_reads() {
    let (mut ra, mut rb) = (rng(9), rng(10));
    let (ka, kb) = (StaticKey::generate(&mut ra), StaticKey::generate(&mut rb));
    let hs = snow::Builder::with_resolver(NOISE_PARAMS.parse().unwrap(), resolver(rb.seed()))
        .local_private_key(kb.private_bytes())
        .unwrap()
        .build_responder()
        .unwrap();
    let (mut to_b, mut to_a, mut plain) = (BytesMut::new(), BytesMut::new(), BytesMut::new());
    let mut a = SecureChannel::initiator(&ka, ra.seed(), &mut to_b);
    let mut hs = hs;
    let mut msg = [0u8; MAX_RECORD];
    hs.read_message(&to_b[2..], &mut msg).unwrap();
    let n = hs.write_message(&[], &mut msg).unwrap();
    to_a.put_u16(n as u16);
    to_a.extend_from_slice(&msg[..n]);
    to_b.clear();
    a.on_bytes(&to_a, &mut plain, &mut to_b).unwrap();
    assert!(a.is_open());
    hs.read_message(&to_b[2..], &mut msg).unwrap();
    let mut b = hs.into_transport_mode().unwrap();
    let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
    for data in [&b"first"[..], &big[..], b"last"] {
        let mut wire = BytesMut::new();
        a.seal(data, &mut wire).unwrap();
        let mut got = Vec::new();
        while !wire.is_empty() {
            let len = usize::from(wire.get_u16());
            let n = b.read_message(&wire[..len], &mut msg).unwrap();
            got.extend_from_slice(&msg[..n]);
            wire.advance(len);
        }
        assert_eq!(got, data, "snow reads what the channel sealed");
        let mut wire = BytesMut::new();
        for chunk in data.chunks(MAX_PLAIN_RECORD) {
            let n = b.write_message(chunk, &mut msg).unwrap();
            wire.put_u16(n as u16);
            wire.extend_from_slice(&msg[..n]);
        }
        let mut plain = BytesMut::new();
        a.on_bytes(&wire, &mut plain, &mut BytesMut::new()).unwrap();
        assert_eq!(&plain[..], data, "the channel reads what snow sealed");
    }
}

#[test]
fn sealing_parts_is_sealing_them_joined_and_reads_go_straight_into_the_buffer() {
    let (mut a1, mut b, ..) = pair(usize::MAX);
    let (mut a2, ..) = pair(usize::MAX);
    let big = vec![3u8; 150_000];
    let parts: [&[u8]; 4] = [b"head", &big, b"", b"tail"];
    let (mut w1, mut w2) = (BytesMut::new(), BytesMut::new());
    a1.seal_vectored(&parts, &mut w1).unwrap();
    a2.seal(&parts.concat(), &mut w2).unwrap();
    assert_eq!(w1, w2, "the same records");
    a1.seal_vectored(&[b"", b""], &mut w1).unwrap();
    assert_eq!(w1, w2, "no bytes, no record");
    let (mut plain, mut out) = (BytesMut::new(), BytesMut::new());
    for c in w1.chunks(5000) {
        b.read_buffer().extend_from_slice(c);
        b.on_read(&mut plain, &mut out).unwrap();
    }
    assert_eq!(&plain[..], &parts.concat()[..]);
    assert_eq!(b.buffered(), 0);
}

/// The `Noise_XX_25519_AESGCM_SHA256` vector of the Noise test vectors
/// (cacophony): fixed keys and ephemerals, a prologue, and each message's
/// payload and ciphertext. Its handshake through snow with our resolver (ring's
/// AES-256-GCM for snow), then its transport messages sealed by the records'
/// cipher with the keys of the split, must give the vector's bytes: both
/// ciphers follow the spec (the key, the big-endian counter nonce).
#[test]
fn the_noise_test_vector_for_xx_aesgcm_is_reproduced() {
    let hex = |s: &str| -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    };
    let prologue = hex("4a6f686e2047616c74");
    let init_static = hex("e61ef9919cde45dd5f82166404bd08e38bceb5dfdfded0a34c8df7ed542214d1");
    let init_ephemeral = hex("893e28b9dc6ca8d611ab664754b8ceb7bac5117349a4439a6b0569da977c464a");
    let resp_static = hex("4a3acbfdb163dec651dfa3194dece676d437029c62a408b4c5ea9114246e4893");
    let resp_ephemeral = hex("bbdb4cdbd309f1a1f2e1456967fe288cadd6f712d65dc7b7793d5e63da6b375b");
    let messages = [
        (
            "4c756477696720766f6e204d69736573",
            "ca35def5ae56cec33dc2036731ab14896bc4c75dbb07a61f879f8e3afa4c79444c756477696720766f6e204d69736573",
        ),
        (
            "4d757272617920526f746862617264",
            "95ebc60d2b1fa672c1f46a8aa265ef51bfe38e7ccb39ec5be34069f144808843757117acceb05bd7a45733bc22015c97a9d0cbaf41b80446d5988ff5127235d76b79eade70f473d6a4ef521fdcbeda5340d01e028ba793fc059f2724a83af05f12dda0448a7621a926b379a92477fd",
        ),
        (
            "462e20412e20486179656b",
            "c90f1cf77eba4e50edb038991565e36c9758943a989229b6051244dc4fbecb6946744b401af2ee1a5881b65fbb87fd07cb6a328ececc9ce6ce84c399dc332d4fd521fa4bb7f467ce909395",
        ),
        ("4361726c204d656e676572", "bc3fa77f6aca3e8466d7dc6bea10013e88a6a29add5132b461806c"),
        ("4a65616e2d426170746973746520536179", "250b01074cdfe0df2ecf8ccbf1737b15a2ddb5b52fd9a396604e9c793cee3b3bb9"),
        (
            "457567656e2042f6686d20766f6e2042617765726b",
            "449d4d433b3cdc3d02bf6fc881774b9df54366ebcffb9689bb13f14709822cd7ef42bcdb4d",
        ),
    ];
    fn build<'a>(key: &'a [u8], eph: &'a [u8], prologue: &'a [u8]) -> snow::Builder<'a> {
        snow::Builder::with_resolver(NOISE_PARAMS.parse().unwrap(), resolver([0; 32]))
            .local_private_key(key)
            .unwrap()
            .prologue(prologue)
            .unwrap()
            .fixed_ephemeral_key_for_testing_only(eph)
    }
    let mut init = build(&init_static, &init_ephemeral, &prologue).build_initiator().unwrap();
    let mut resp = build(&resp_static, &resp_ephemeral, &prologue).build_responder().unwrap();
    let mut buf = [0u8; 1024];
    let mut read = [0u8; 1024];
    for (i, (payload, want)) in messages[..3].iter().enumerate() {
        let (from, to) = if i % 2 == 0 { (&mut init, &mut resp) } else { (&mut resp, &mut init) };
        let n = from.write_message(&hex(payload), &mut buf).unwrap();
        assert_eq!(&buf[..n], &hex(want)[..], "handshake message {i}");
        let m = to.read_message(&buf[..n], &mut read).unwrap();
        assert_eq!(&read[..m], &hex(payload)[..], "handshake message {i} read back");
    }
    // Split: the first key seals what the initiator sends, the second the responder's.
    let (k1, k2) = init.dangerously_get_raw_split();
    let (mut from_init, mut from_resp) = (aesgcm::RecordCipher::new(&k1), aesgcm::RecordCipher::new(&k2));
    for (i, (payload, want)) in messages.iter().enumerate().skip(3) {
        let sender = if i % 2 == 0 { &mut from_init } else { &mut from_resp };
        let mut sealed = hex(payload);
        let tag = sender.seal(&mut sealed);
        sealed.extend_from_slice(tag.as_ref());
        assert_eq!(sealed, hex(want), "transport message {i}");
    }
}
