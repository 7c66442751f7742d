//! The secure channel's decoders (handshake messages and records) over
//! arbitrary bytes. The first byte picks what receives them: a responder
//! waiting for a first handshake message, an initiator waiting for the second,
//! or an open channel (after a real handshake) waiting for records; the second
//! byte picks the chunk size. Checks: nothing panics; no more plaintext comes out
//! than bytes went in; a failure is final; and on an open channel, bytes sealed
//! by the peer come out exactly.

use bytes::BytesMut;

use crate::secure::{SecureChannel, SecureError, SecureRng, StaticKey};

/// See the module docs.
pub fn secure_channel(data: &[u8]) {
    let (mode, chunk, input) = match data {
        [m, c, rest @ ..] => (*m % 3, usize::from(*c).max(1), rest),
        _ => (0, 1, data),
    };
    let mut rng = SecureRng::from_seed([mode; 32]);
    let (ka, kb) = (StaticKey::generate(&mut rng), StaticKey::generate(&mut rng));
    let mut to_b = BytesMut::new();
    let mut ch = match mode {
        0 => SecureChannel::responder(&kb, rng.seed()),
        1 => SecureChannel::initiator(&ka, rng.seed(), &mut to_b),
        _ => {
            let mut a = SecureChannel::initiator(&ka, rng.seed(), &mut to_b);
            let mut b = SecureChannel::responder(&kb, rng.seed());
            let (mut plain, mut to_a) = (BytesMut::new(), BytesMut::new());
            b.on_bytes(&to_b.split(), &mut plain, &mut to_a).expect("message 1");
            a.on_bytes(&to_a, &mut plain, &mut to_b).expect("message 2");
            b.on_bytes(&to_b.split(), &mut plain, &mut to_a).expect("message 3");
            assert!(a.is_open() && b.is_open() && plain.is_empty());
            // What the honest peer seals arrives intact.
            let mut sealed = BytesMut::new();
            a.seal(input, &mut sealed).expect("open");
            b.on_bytes(&sealed, &mut plain, &mut to_a).expect("honest records");
            assert_eq!(&plain[..], input, "sealed bytes came out changed");
            b
        }
    };
    let (mut plain, mut out) = (BytesMut::new(), BytesMut::new());
    for piece in input.chunks(chunk) {
        match ch.on_bytes(piece, &mut plain, &mut out) {
            Ok(_) => assert!(plain.len() <= input.len(), "more plaintext than input"),
            Err(_) => {
                assert_eq!(ch.on_bytes(b"", &mut plain, &mut out), Err(SecureError::Broken), "failure is final");
                return;
            }
        }
    }
}
