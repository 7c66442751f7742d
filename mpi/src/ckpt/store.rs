//! Checkpoint files on disk: written atomically (a temporary file, synced, then
//! renamed over the final name, and the directory synced), read back whole and
//! checked.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use p2pmp_core::ckpt::{self, Body, Codec, Header};

use super::codec;
use crate::error::{Error, Result};

/// The file of `rank`'s checkpoint number `epoch` in `dir`.
pub(crate) fn path(dir: &Path, rank: u32, epoch: u64) -> PathBuf {
    dir.join(ckpt::file_name(rank, epoch))
}

/// Writes `body` as `header` describes (its `raw_len` is filled in), atomically.
/// Returns the file's size.
pub(crate) fn write(dir: &Path, mut header: Header, body: &Body) -> Result<u64> {
    let raw = body.encode();
    header.raw_len = raw.len() as u64;
    let stored = codec::compress(header.codec, &raw)?;
    let bytes = ckpt::encode_file(&header, &stored);
    fs::create_dir_all(dir)?;
    write_atomic(dir, &path(dir, header.rank, header.epoch), &bytes)?;
    Ok(bytes.len() as u64)
}

/// Writes `bytes` to `fin` in `dir` atomically: a temporary file beside it,
/// synced, renamed over it, and the directory synced.
pub(crate) fn write_atomic(dir: &Path, fin: &Path, bytes: &[u8]) -> Result<()> {
    let mut tmp = fin.as_os_str().to_owned();
    tmp.push(".tmp");
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::rename(&tmp, fin)?;
    File::open(dir)?.sync_all()?;
    Ok(())
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

/// The epochs of each rank's files in `dir`.
fn epochs(dir: &Path) -> BTreeMap<u32, BTreeSet<u64>> {
    let mut found: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let parsed = name.to_str().and_then(|n| n.strip_prefix("rank-")?.strip_suffix(".ckpt")?.split_once('.'));
        if let Some((Ok(rank), Ok(epoch))) = parsed.map(|(r, e)| (r.parse::<u32>(), e.parse::<u64>())) {
            found.entry(rank).or_default().insert(epoch);
        }
    }
    found
}

/// The file `rank` resumes from when `P2PMP_RESTART` names `path`: the path
/// itself when it is a file; for a directory (the checkpoints of a job on one
/// host), this rank's file of the newest epoch every rank of `size` has.
pub(crate) fn restart_file(path: &Path, rank: u32, size: u32) -> Result<PathBuf> {
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    let found = epochs(path);
    let mut common = found.get(&0).cloned().unwrap_or_default();
    for r in 1..size {
        let theirs = found.get(&r).cloned().unwrap_or_default();
        common.retain(|e| theirs.contains(e));
    }
    match common.last() {
        Some(&epoch) => Ok(self::path(path, rank, epoch)),
        None => Err(Error::Checkpoint(format!("{}: no checkpoint epoch that all {size} ranks have", path.display()))),
    }
}

/// Every checkpoint of `rank` in `dir` older than `epoch` removed.
pub(crate) fn drop_older(dir: &Path, rank: u32, epoch: u64) {
    for old in epochs(dir).remove(&rank).unwrap_or_default().range(..epoch) {
        let _ = fs::remove_file(path(dir, rank, *old));
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
