//! Checkpoint files: one rank's protected regions and library state at one
//! snapshot, as bytes (encoding and checked decoding only; compressing, writing
//! and reading files is the MPI library's work).
//!
//! A file is a fixed header followed by the stored body:
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `P2PCKPT\0` |
//! | 2 | format version (little-endian), [`VERSION`] |
//! | 1 | codec of the stored body ([`Codec`]) |
//! | 1 | reserved, zero |
//! | 20 | job id |
//! | 4, 4 | rank, size |
//! | 8 | epoch: the job's snapshot number, counted from 1 |
//! | 8 | length of the body once decoded (`raw_len`) |
//! | 8 | length of the stored body |
//! | 32 | SHA-256 of the stored body |
//!
//! The body, once decoded: a region count (u32), then each region as its id
//! (u32), its length (u64) and its bytes, then the library's state as a length
//! (u64) and bytes. Every count and length is checked against what is left and
//! against the bounds below before anything is allocated, so a file from disk
//! or from another node never panics the reader nor makes it allocate more than
//! the file claims and the caller allows.
//!
//! [`report`] holds what ranks tell their nodes of the checkpoints they wrote
//! and the recoveries they made.

mod report;

pub use report::{CheckpointInfo, CutInfo, MAX_RECOVERIES, RankCheckpoints, RecoveryInfo};

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::id::ID_BYTES;
use crate::job::JobId;

/// The first bytes of every checkpoint file.
pub const MAGIC: [u8; 8] = *b"P2PCKPT\0";
/// The format version written; files of other versions are refused.
pub const VERSION: u16 = 1;
/// Size of the fixed header.
pub const HEADER_LEN: usize = 8 + 2 + 1 + 1 + ID_BYTES + 4 + 4 + 8 + 8 + 8 + 32;
/// Most protected regions one checkpoint may hold.
pub const MAX_REGIONS: u32 = 65_536;
/// Largest checkpoint file the nodes carry between them (shipped to the node
/// holding the job, staged back for a restart): each is held in a daemon's
/// memory while it travels.
pub const MAX_SHIPPED_FILE: u64 = 1 << 30;

/// The name of `rank`'s checkpoint file of `epoch`, as ranks write it and
/// nodes keep it.
pub fn file_name(rank: u32, epoch: u64) -> String {
    format!("rank-{rank}.{epoch}.ckpt")
}

/// The name of the file a rank that moves alone saves its engine in, beside
/// its checkpoint (the MPI library's format; its header names the cut), and
/// the one the rank started in its place reads it from.
pub fn engine_file_name(rank: u32) -> String {
    format!("rank-{rank}.engine")
}

/// The exit status of a rank's process that saved its engine to move alone
/// (`EX_TEMPFAIL`): its node ships the engine instead of reporting an exit.
pub const MOVED_EXIT: i32 = 75;

/// Most bytes of a rank's engine file carried to the node it moves to (in
/// one message: a rank moves only at a cut, when nothing is in flight, so
/// its engine is small).
pub const MAX_ENGINE_FILE: u64 = 8 << 20;

/// The first bytes of an engine file. They name its format: `P2PE` before
/// MPI messages took their fixed form (a file of that format is refused as
/// not an engine file).
const ENGINE_MAGIC: &[u8; 4] = b"P2E2";
/// An engine file's header: the magic, the job, the cut's epoch (u64) and
/// the world's context counter (u32), little-endian; the MPI library's
/// saved engine follows.
pub const ENGINE_HEADER_LEN: usize = 4 + ID_BYTES + 8 + 4;

/// An engine file's header (see [`ENGINE_HEADER_LEN`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineHeader {
    /// The run that saved it.
    pub job: JobId,
    /// The cut it was saved at.
    pub epoch: u64,
    /// The world's next communicator context.
    pub next_ctx: u32,
}

impl EngineHeader {
    /// The header's bytes, for the saved engine to follow.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = ENGINE_MAGIC.to_vec();
        b.extend_from_slice(self.job.0.as_bytes());
        b.extend_from_slice(&self.epoch.to_le_bytes());
        b.extend_from_slice(&self.next_ctx.to_le_bytes());
        b
    }

    /// The header of engine file `bytes` and what follows it; `None` when
    /// it is not one.
    pub fn decode(bytes: &[u8]) -> Option<(EngineHeader, &[u8])> {
        let (head, rest) = (bytes.get(..ENGINE_HEADER_LEN)?, bytes.get(ENGINE_HEADER_LEN..)?);
        if !head.starts_with(ENGINE_MAGIC) {
            return None;
        }
        let job = JobId(crate::id::Id::from_bytes(head[4..4 + ID_BYTES].try_into().ok()?));
        let epoch = u64::from_le_bytes(head[4 + ID_BYTES..12 + ID_BYTES].try_into().ok()?);
        let next_ctx = u32::from_le_bytes(head[12 + ID_BYTES..].try_into().ok()?);
        Some((EngineHeader { job, epoch, next_ctx }, rest))
    }
}

/// How the stored body is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// Stored as is.
    None,
    /// Zstandard.
    Zstd,
    /// gzip (DEFLATE).
    Gzip,
}

impl Codec {
    fn to_byte(self) -> u8 {
        match self {
            Codec::None => 0,
            Codec::Zstd => 1,
            Codec::Gzip => 2,
        }
    }

    fn from_byte(b: u8) -> Result<Self, CheckpointError> {
        match b {
            0 => Ok(Codec::None),
            1 => Ok(Codec::Zstd),
            2 => Ok(Codec::Gzip),
            other => Err(CheckpointError::UnknownCodec(other)),
        }
    }

    /// Its name, as the environment and reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Zstd => "zstd",
            Codec::Gzip => "gzip",
        }
    }

    /// The codec called `name` (`none`, `zstd`, `gzip`).
    pub fn from_name(name: &str) -> Option<Self> {
        [Codec::None, Codec::Zstd, Codec::Gzip].into_iter().find(|c| c.name() == name)
    }
}

/// What a checkpoint file says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// How the body is stored.
    pub codec: Codec,
    /// The job.
    pub job: JobId,
    /// The rank whose state this is.
    pub rank: u32,
    /// The job's size when it was taken.
    pub size: u32,
    /// The snapshot number, counted from 1.
    pub epoch: u64,
    /// Length of the body once decoded.
    pub raw_len: u64,
}

/// One protected region's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// The id it was protected under.
    pub id: u32,
    /// Its contents when the checkpoint was taken.
    pub data: Bytes,
}

/// A rank's checkpoint, decoded.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Body {
    /// The protected regions, in id order.
    pub regions: Vec<Region>,
    /// The library's own state (opaque here).
    pub state: Bytes,
}

/// Why checkpoint bytes were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// Fewer bytes than a header, or than a length inside says.
    #[error("checkpoint truncated: {what} needs {needed} bytes, {left} left")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// Bytes it needs.
        needed: u64,
        /// Bytes there were.
        left: u64,
    },
    /// Not a checkpoint file.
    #[error("not a p2pmp checkpoint (bad magic)")]
    BadMagic,
    /// A version this build does not read.
    #[error("checkpoint format version {0}, this build reads {VERSION}")]
    Version(u16),
    /// A codec byte this build does not know.
    #[error("unknown checkpoint codec {0}")]
    UnknownCodec(u8),
    /// The reserved header byte is not zero (a newer writer, or damage).
    #[error("reserved header byte is {0}, not 0")]
    Reserved(u8),
    /// The stored body's digest does not match: the file is corrupt.
    #[error("checkpoint digest mismatch: the file is corrupt")]
    Digest,
    /// Bytes after the end the header declares.
    #[error("{0} stray bytes after the checkpoint")]
    Trailing(u64),
    /// The body once decoded is longer than the caller allows.
    #[error("checkpoint of {len} bytes is over the {limit}-byte limit")]
    TooLarge {
        /// What the file declares.
        len: u64,
        /// What the reader allows.
        limit: u64,
    },
    /// More regions than [`MAX_REGIONS`].
    #[error("{0} regions, at most {MAX_REGIONS} allowed")]
    TooManyRegions(u32),
    /// Two regions with one id.
    #[error("region {0} appears twice")]
    DuplicateRegion(u32),
    /// The decoded body's length is not the header's `raw_len`.
    #[error("decoded body of {got} bytes, the header says {want}")]
    RawLength {
        /// Bytes decoded.
        got: u64,
        /// Bytes declared.
        want: u64,
    },
}

/// The stored body's SHA-256.
fn digest(stored: &[u8]) -> [u8; 32] {
    Sha256::digest(stored).into()
}

/// The whole file: `header` (its `raw_len` as given) and the stored body as the
/// header's codec left it.
pub fn encode_file(header: &Header, stored: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + stored.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.push(header.codec.to_byte());
    out.push(0);
    out.extend_from_slice(header.job.0.as_bytes());
    out.extend_from_slice(&header.rank.to_le_bytes());
    out.extend_from_slice(&header.size.to_le_bytes());
    out.extend_from_slice(&header.epoch.to_le_bytes());
    out.extend_from_slice(&header.raw_len.to_le_bytes());
    out.extend_from_slice(&(stored.len() as u64).to_le_bytes());
    out.extend_from_slice(&digest(stored));
    out.extend_from_slice(stored);
    out
}

/// Reads fields front to back, each checked against what is left.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, what: &'static str, n: u64) -> Result<&'a [u8], CheckpointError> {
        let left = self.rest.len() as u64;
        if n > left {
            return Err(CheckpointError::Truncated { what, needed: n, left });
        }
        let (head, rest) = self.rest.split_at(n as usize);
        self.rest = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], CheckpointError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(what, N as u64)?);
        Ok(a)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, CheckpointError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, CheckpointError> {
        self.array(what).map(u64::from_le_bytes)
    }
}

/// The header and stored body of a whole file, its magic, version, length and
/// digest checked. `max_raw` bounds the decoded body the header may declare
/// (what the reader is prepared to allocate).
pub fn decode_file(bytes: &[u8], max_raw: u64) -> Result<(Header, &[u8]), CheckpointError> {
    let mut r = Reader { rest: bytes };
    if r.array::<8>("magic")? != MAGIC {
        return Err(CheckpointError::BadMagic);
    }
    let version = u16::from_le_bytes(r.array("version")?);
    if version != VERSION {
        return Err(CheckpointError::Version(version));
    }
    let [codec, reserved] = r.array("codec")?;
    let codec = Codec::from_byte(codec)?;
    if reserved != 0 {
        return Err(CheckpointError::Reserved(reserved));
    }
    let job = JobId(crate::id::Id::from_bytes(r.array("job id")?));
    let rank = r.u32("rank")?;
    let size = r.u32("size")?;
    let epoch = r.u64("epoch")?;
    let raw_len = r.u64("raw length")?;
    if raw_len > max_raw {
        return Err(CheckpointError::TooLarge { len: raw_len, limit: max_raw });
    }
    let stored_len = r.u64("stored length")?;
    let want = r.array::<32>("digest")?;
    let stored = r.take("stored body", stored_len)?;
    if !r.rest.is_empty() {
        return Err(CheckpointError::Trailing(r.rest.len() as u64));
    }
    if digest(stored) != want {
        return Err(CheckpointError::Digest);
    }
    Ok((Header { codec, job, rank, size, epoch, raw_len }, stored))
}

impl Body {
    /// Its encoding (before compression).
    pub fn encode(&self) -> Vec<u8> {
        let len = 4 + 8 + self.state.len() + self.regions.iter().map(|r| 12 + r.data.len()).sum::<usize>();
        let mut out = Vec::with_capacity(len);
        out.extend_from_slice(&(self.regions.len() as u32).to_le_bytes());
        for region in &self.regions {
            out.extend_from_slice(&region.id.to_le_bytes());
            out.extend_from_slice(&(region.data.len() as u64).to_le_bytes());
            out.extend_from_slice(&region.data);
        }
        out.extend_from_slice(&(self.state.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.state);
        out
    }

    /// The body encoded in `bytes` (already decompressed), every count and
    /// length checked; the regions share `bytes`' buffer.
    pub fn decode(bytes: &Bytes) -> Result<Self, CheckpointError> {
        let mut r = Reader { rest: bytes };
        let slice = |sub: &[u8]| bytes.slice_ref(sub);
        let count = r.u32("region count")?;
        if count > MAX_REGIONS {
            return Err(CheckpointError::TooManyRegions(count));
        }
        let mut regions: Vec<Region> = Vec::new();
        for _ in 0..count {
            let id = r.u32("region id")?;
            let len = r.u64("region length")?;
            let data = slice(r.take("region bytes", len)?);
            regions.push(Region { id, data });
        }
        regions.sort_by_key(|x| x.id);
        if let Some(twice) = regions.windows(2).find(|w| w[0].id == w[1].id) {
            return Err(CheckpointError::DuplicateRegion(twice[0].id));
        }
        let len = r.u64("state length")?;
        let state = slice(r.take("state bytes", len)?);
        if !r.rest.is_empty() {
            return Err(CheckpointError::Trailing(r.rest.len() as u64));
        }
        Ok(Body { regions, state })
    }
}

#[cfg(test)]
mod tests;
