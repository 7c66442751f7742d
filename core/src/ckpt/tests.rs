use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::id::Id;

fn header(raw_len: u64) -> Header {
    Header { codec: Codec::None, job: JobId(Id::hash("job")), rank: 3, size: 8, epoch: 2, raw_len }
}

fn body() -> Body {
    Body {
        regions: vec![
            Region { id: 0, data: Bytes::from_static(b"counter") },
            Region { id: 7, data: Bytes::from(vec![0xAB; 1000]) },
        ],
        state: Bytes::from_static(b"library state"),
    }
}

fn file() -> Vec<u8> {
    let raw = body().encode();
    encode_file(&header(raw.len() as u64), &raw)
}

#[test]
fn a_file_reads_back_as_written() {
    let bytes = file();
    let (h, stored) = decode_file(&bytes, u64::MAX).unwrap();
    assert_eq!(h, header(stored.len() as u64));
    assert_eq!(Body::decode(&Bytes::copy_from_slice(stored)).unwrap(), body());
}

#[test]
fn any_flipped_bit_of_the_body_is_caught_by_the_digest() {
    let clean = file();
    for i in HEADER_LEN..clean.len() {
        let mut bad = clean.clone();
        bad[i] ^= 0x10;
        assert_eq!(decode_file(&bad, u64::MAX).unwrap_err(), CheckpointError::Digest, "byte {i}");
    }
}

#[test]
fn damaged_headers_are_named() {
    let clean = file();
    let mut bad = clean.clone();
    bad[0] = b'X';
    assert_eq!(decode_file(&bad, u64::MAX).unwrap_err(), CheckpointError::BadMagic);
    let mut bad = clean.clone();
    bad[8] = 9;
    assert_eq!(decode_file(&bad, u64::MAX).unwrap_err(), CheckpointError::Version(9));
    let mut bad = clean.clone();
    bad[10] = 7;
    assert_eq!(decode_file(&bad, u64::MAX).unwrap_err(), CheckpointError::UnknownCodec(7));
    let mut bad = clean.clone();
    bad[11] = 1;
    assert_eq!(decode_file(&bad, u64::MAX).unwrap_err(), CheckpointError::Reserved(1));
    assert!(matches!(decode_file(&clean[..clean.len() - 1], u64::MAX), Err(CheckpointError::Truncated { .. })));
    let mut long = clean.clone();
    long.push(0);
    assert_eq!(decode_file(&long, u64::MAX).unwrap_err(), CheckpointError::Trailing(1));
}

#[test]
fn a_declared_size_over_the_readers_limit_is_refused_before_anything_else() {
    let bytes = file();
    let raw = body().encode().len() as u64;
    assert_eq!(decode_file(&bytes, raw - 1).unwrap_err(), CheckpointError::TooLarge { len: raw, limit: raw - 1 });
}

#[test]
fn bodies_with_lying_lengths_or_repeated_ids_are_refused() {
    let mut twice = body();
    twice.regions[1].id = 0;
    assert_eq!(Body::decode(&Bytes::from(twice.encode())).unwrap_err(), CheckpointError::DuplicateRegion(0));
    let mut raw = body().encode();
    raw[4 + 4..4 + 12].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(Body::decode(&Bytes::from(raw)), Err(CheckpointError::Truncated { what: "region bytes", .. })));
    let mut many = Vec::from((MAX_REGIONS + 1).to_le_bytes());
    many.extend_from_slice(&[0; 8]);
    assert_eq!(Body::decode(&Bytes::from(many)).unwrap_err(), CheckpointError::TooManyRegions(MAX_REGIONS + 1));
}

proptest! {
    #[test]
    fn bodies_round_trip(
        regions in proptest::collection::btree_map(any::<u32>(), proptest::collection::vec(any::<u8>(), 0..64), 0..8),
        state in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let body = Body {
            regions: regions.into_iter().map(|(id, d)| Region { id, data: Bytes::from(d) }).collect(),
            state: Bytes::from(state),
        };
        prop_assert_eq!(Body::decode(&Bytes::from(body.encode())).unwrap(), body);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoders(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_file(&bytes, 1 << 20);
        let _ = Body::decode(&Bytes::from(bytes));
    }
}

#[test]
fn the_committed_corpus_files_are_what_they_claim() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/checkpoint_file");
    let bytes = std::fs::read(dir.join("two-regions")).unwrap();
    let (h, stored) = decode_file(&bytes, 1 << 20).unwrap();
    assert_eq!((h.rank, h.size, h.epoch), (1, 4, 3));
    assert_eq!(Body::decode(&Bytes::copy_from_slice(stored)).unwrap().regions.len(), 2);
}
