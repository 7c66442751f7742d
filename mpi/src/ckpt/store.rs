//! Checkpoint files on disk: written atomically (a temporary file, synced, then
//! renamed over the final name, and the directory synced), read back whole and
//! checked.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use p2pmp_core::ckpt::{self, Body, Codec, Header};

use super::codec;
use crate::error::{Error, Result};

/// The file of `rank`'s checkpoint number `epoch` in `dir`.
pub(crate) fn path(dir: &Path, rank: u32, epoch: u64) -> PathBuf {
    dir.join(format!("rank-{rank}.{epoch}.ckpt"))
}

/// Writes `body` as `header` describes (its `raw_len` is filled in), atomically.
/// Returns the file's size.
pub(crate) fn write(dir: &Path, mut header: Header, body: &Body) -> Result<u64> {
    let raw = body.encode();
    header.raw_len = raw.len() as u64;
    let stored = codec::compress(header.codec, &raw)?;
    let bytes = ckpt::encode_file(&header, &stored);
    fs::create_dir_all(dir)?;
    let fin = path(dir, header.rank, header.epoch);
    let tmp = fin.with_extension("ckpt.tmp");
    let mut f = File::create(&tmp)?;
    f.write_all(&bytes)?;
    f.sync_all()?;
    fs::rename(&tmp, &fin)?;
    File::open(dir)?.sync_all()?;
    Ok(bytes.len() as u64)
}

/// Reads and checks the checkpoint at `path`; `max_raw` bounds its decoded size.
pub(crate) fn read(path: &Path, max_raw: u64) -> Result<(Header, Body)> {
    let bad = |e: ckpt::CheckpointError| Error::Checkpoint(format!("{}: {e}", path.display()));
    let mut f = File::open(path).map_err(|e| Error::Checkpoint(format!("{}: {e}", path.display())))?;
    // The header, the stored body (at most the raw size plus what a codec can
    // add to incompressible data) and no more.
    let limit = ckpt::HEADER_LEN as u64 + max_raw + max_raw / 16 + 1024;
    let mut bytes = Vec::new();
    Read::by_ref(&mut f).take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(Error::Checkpoint(format!("{}: larger than any checkpoint of this process", path.display())));
    }
    let (header, stored) = ckpt::decode_file(&bytes, max_raw).map_err(bad)?;
    let raw = codec::decompress(header.codec, stored, header.raw_len)?;
    let body = Body::decode(&Bytes::from(raw)).map_err(bad)?;
    Ok((header, body))
}

/// Every checkpoint of `rank` in `dir` older than `epoch`, removed.
pub(crate) fn drop_older(dir: &Path, rank: u32, epoch: u64) {
    let prefix = format!("rank-{rank}.");
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let older = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|n| n.strip_suffix(".ckpt"))
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|e| e < epoch);
        if older {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// The codec named by `P2PMP_CHECKPOINT_CODEC`, zstd by default.
pub(crate) fn codec_from(name: Option<&str>) -> Result<Codec> {
    match name {
        None => Ok(Codec::Zstd),
        Some(n) => Codec::from_name(n.trim())
            .ok_or_else(|| Error::Env { var: super::CODEC_VAR, problem: format!("{n:?}: want none, zstd or gzip") }),
    }
}
