//! Compressing a checkpoint body, and decompressing one with its size bounded.

use std::io::Read;

use p2pmp_core::ckpt::Codec;

use crate::error::{Error, Result};

/// The zstd level written: zstd's default, fast and within a few percent of
/// its better levels on the arrays programs protect.
const ZSTD_LEVEL: i32 = 3;

/// `raw` compressed with `codec`.
pub fn compress(codec: Codec, raw: &[u8]) -> Result<Vec<u8>> {
    match codec {
        Codec::None => Ok(raw.to_vec()),
        Codec::Zstd => Ok(zstd::bulk::compress(raw, ZSTD_LEVEL)?),
        Codec::Gzip => {
            let mut out = Vec::with_capacity(raw.len() / 2);
            let mut enc = flate2::read::GzEncoder::new(raw, flate2::Compression::fast());
            enc.read_to_end(&mut out)?;
            Ok(out)
        }
    }
}

/// `stored` decompressed: exactly `raw_len` bytes, or an error (never more
/// than `raw_len` bytes are produced, whatever the input claims).
pub fn decompress(codec: Codec, stored: &[u8], raw_len: u64) -> Result<Vec<u8>> {
    let want = usize::try_from(raw_len).map_err(|_| corrupt("declared length does not fit memory"))?;
    let out = match codec {
        Codec::None => stored.to_vec(),
        Codec::Zstd => zstd::bulk::decompress(stored, want).map_err(|e| corrupt(&e.to_string()))?,
        Codec::Gzip => {
            let mut out = Vec::with_capacity(want);
            // One byte past the limit tells a body that is too long.
            flate2::read::GzDecoder::new(stored)
                .take(raw_len + 1)
                .read_to_end(&mut out)
                .map_err(|e| corrupt(&e.to_string()))?;
            out
        }
    };
    if out.len() != want {
        return Err(corrupt(&format!("decoded {} bytes, the header says {want}", out.len())));
    }
    Ok(out)
}

fn corrupt(why: &str) -> Error {
    Error::Checkpoint(format!("corrupt checkpoint body: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_codec_round_trips_and_refuses_a_wrong_length() {
        let raw: Vec<u8> = (0..100_000u32).flat_map(|i| (i / 7).to_le_bytes()).collect();
        for codec in [Codec::None, Codec::Zstd, Codec::Gzip] {
            let stored = compress(codec, &raw).unwrap();
            if codec != Codec::None {
                assert!(stored.len() < raw.len() / 4, "{} shrinks a regular array", codec.name());
            }
            assert_eq!(decompress(codec, &stored, raw.len() as u64).unwrap(), raw);
            assert!(decompress(codec, &stored, raw.len() as u64 - 1).is_err(), "{}: too long", codec.name());
            assert!(decompress(codec, &stored, raw.len() as u64 + 1).is_err(), "{}: too short", codec.name());
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for codec in [Codec::Zstd, Codec::Gzip] {
            assert!(decompress(codec, b"not compressed at all", 1 << 20).is_err());
        }
    }
}
