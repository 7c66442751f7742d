use bytes::BytesMut;

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
