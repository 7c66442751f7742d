//! The little file work a daemon does for its node.
//!
//! A job's processes may plant anything in their job directory (links to the
//! daemon's files, FIFOs, directories) before the daemon writes or reads
//! there, so a file the daemon creates is always new (`O_EXCL`, after
//! unlinking the name) and no link is followed (`O_NOFOLLOW`) when it writes
//! a staged file or reads an output file back ([`open_regular`]): the names
//! come from the node as plain names directly in the job directory, which the
//! job cannot swap for a link (its parent is the daemon's). Directories the
//! daemon makes are its own (mode 0700).

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use p2pmp_core::id::Id;
use p2pmp_core::job::FileData;
use sha1::{Digest, Sha1};

/// Bytes read per step by [`read_hashed`]: hashing one step overlaps reading the next.
const READ_STEP: usize = 1 << 20;

/// Held shared while a file is open for writing, exclusively while a process is
/// being started ([`crate::procs`]). A new process gets a copy of every open
/// descriptor until it execs; had it one of a program still being written (by
/// another daemon of the same process, as in `p2pjob --local`), exec of that
/// program would fail with ETXTBSY ("text file busy") for that moment.
static WRITING: RwLock<()> = RwLock::new(());

/// While the guard lives, no process is being started.
fn writing() -> RwLockReadGuard<'static, ()> {
    WRITING.read().unwrap_or_else(PoisonError::into_inner)
}

/// While the guard lives, no file is open for writing.
pub(crate) fn no_writers() -> RwLockWriteGuard<'static, ()> {
    WRITING.write().unwrap_or_else(PoisonError::into_inner)
}

/// Makes `dir` and its parents, each new one the daemon's alone (0700).
fn make_dirs(dir: &Path) -> std::io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Opens `path` to write a new file there: the name is unlinked first (a
/// file hard-linked from the file cache is never rewritten through a job's
/// name, a planted link is removed, not followed) and created exclusively.
fn create_new(path: &Path, mode: u32) -> std::io::Result<File> {
    std::fs::remove_file(path).or_else(missing_is_fine)?;
    OpenOptions::new().write(true).create_new(true).mode(mode).custom_flags(libc::O_NOFOLLOW).open(path)
}

/// Writes `data` at `offset` of `path`, making its directory. Offset 0 starts a
/// new file ([`create_new`]); a later piece never follows a link.
pub(crate) fn write_at(path: &str, offset: u64, data: &[u8]) -> std::io::Result<()> {
    let path = Path::new(path);
    if let Some(dir) = path.parent() {
        make_dirs(dir)?;
    }
    let _writing = writing();
    let mut f = if offset == 0 {
        create_new(path, 0o644)?
    } else {
        OpenOptions::new().write(true).create(true).custom_flags(libc::O_NOFOLLOW).open(path)?
    };
    f.seek(SeekFrom::Start(offset))?;
    f.write_all(data)
}

/// Copies `from` to `to` (a new file, whole, permissions included), making
/// `to`'s directory; with `link`, a hard link where the file system allows
/// one. Neither name is followed if it is a link.
pub(crate) fn copy(from: &str, to: &str, link: bool) -> std::io::Result<()> {
    if let Some(dir) = Path::new(to).parent() {
        make_dirs(dir)?;
    }
    std::fs::remove_file(to).or_else(missing_is_fine)?;
    let mut src = open_regular(from).map_err(std::io::Error::other)?;
    if link && std::fs::hard_link(from, to).is_ok() {
        return Ok(());
    }
    let mode = src.metadata()?.mode() & 0o777;
    let _writing = writing();
    let mut dst = create_new(Path::new(to), mode)?;
    std::io::copy(&mut src, &mut dst)?;
    dst.set_permissions(std::fs::Permissions::from_mode(mode))
}

/// Opens `path` for reading only if it is a regular file and not a link to
/// one (nor a FIFO, which would block, nor a device): the error says which.
pub(crate) fn open_regular(path: &str) -> Result<File, String> {
    let f = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path).map_err(
        |e| match e.raw_os_error() {
            Some(libc::ELOOP) => "is a symbolic link (not followed: it could lead anywhere on this node)".to_owned(),
            _ => e.to_string(),
        },
    )?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    Ok(f)
}

/// Largest output file read back: it is held in the daemon's memory while it
/// goes out, so a job cannot make the daemon take more than this per file.
pub(crate) const MAX_OUTPUT_FILE: u64 = 1 << 30;

/// Reads a job's output file back, refusing anything but a regular file
/// ([`open_regular`]) with no other hard link (a link to a file of the
/// daemon's, where the kernel lets a job make one) and at most
/// [`MAX_OUTPUT_FILE`] bytes; the error in words.
pub(crate) fn read_output(path: &str) -> Result<bytes::Bytes, String> {
    let f = open_regular(path)?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    if meta.nlink() > 1 {
        return Err("has other hard links (not read: it may be another user's file)".into());
    }
    if meta.len() > MAX_OUTPUT_FILE {
        return Err(format!("is {} bytes, over the {MAX_OUTPUT_FILE} an output file may have", meta.len()));
    }
    let mut f = f.take(MAX_OUTPUT_FILE);
    let mut data = Vec::new();
    f.read_to_end(&mut data).map_err(|e| e.to_string())?;
    Ok(bytes::Bytes::from(data))
}

/// Why `path` is not a file of exactly `len` bytes, or `None` when it is.
pub(crate) fn not_whole(path: &str, len: u64) -> Option<String> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.is_file() => Some(format!("{path}: not a regular file")),
        Ok(m) if m.len() == len => None,
        Ok(m) => Some(format!("{path}: {} of {len} bytes", m.len())),
        Err(e) => Some(format!("{path}: {e}")),
    }
}

/// Maps "not found" to success: removing what is already gone is fine.
pub(crate) fn missing_is_fine(e: std::io::Error) -> std::io::Result<()> {
    if e.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(e) }
}

/// Reads the first `len` bytes of `path` in pieces of at most `piece` bytes,
/// handing each to `f` with its offset; stops early at the file's end or an error.
pub(crate) fn read_pieces(path: &str, len: u64, piece: usize, mut f: impl FnMut(u64, bytes::Bytes)) {
    let Ok(file) = File::open(path) else { return };
    let mut r = file.take(len);
    let mut offset = 0u64;
    loop {
        let mut buf = vec![0u8; piece];
        match r.read(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Ok(0) | Err(_) => return,
            Ok(n) => {
                buf.truncate(n);
                f(offset, bytes::Bytes::from(buf));
                offset += n as u64;
            }
        }
    }
}

/// Reads a whole file to stage and its SHA-1, hashing while reading: a second
/// thread reads the file step by step while this one hashes the steps already
/// read, so the digest adds little to the read instead of a pass of its own.
pub(crate) fn read_hashed(path: &str) -> Result<FileData, String> {
    let mut f = File::open(path).map_err(|e| e.to_string())?;
    let len = usize::try_from(f.metadata().map_err(|e| e.to_string())?.len()).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; len];
    let mut hasher = Sha1::new();
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<&[u8]>(len / READ_STEP + 1);
        let steps = buf.chunks_mut(READ_STEP);
        let reader = s.spawn(move || -> std::io::Result<()> {
            for step in steps {
                f.read_exact(step)?;
                let step: &[u8] = step;
                if tx.send(step).is_err() {
                    break;
                }
            }
            // A file that grew since its length was read (a program being
            // rebuilt) would otherwise be staged cut short, with a matching digest.
            if f.read(&mut [0u8; 1])? != 0 {
                return Err(std::io::Error::other("the file changed while it was read"));
            }
            Ok(())
        });
        for step in rx {
            hasher.update(step);
        }
        reader.join().unwrap_or_else(|_| Err(std::io::Error::other("the reading thread panicked")))
    })
    .map_err(|e| e.to_string())?;
    Ok(FileData { bytes: bytes::Bytes::from(buf), digest: Id::from_bytes(hasher.finalize().into()) })
}

/// The length and SHA-1 of the file at `path`, read step by step by whoever
/// calls (`p2pjob`, as its user: what a job signature says of each file the
/// job stages).
pub(crate) fn digest_file(path: &str) -> std::io::Result<(u64, Id)> {
    let mut f = File::open(path)?;
    let (mut hasher, mut len) = (Sha1::new(), 0u64);
    let mut buf = vec![0u8; READ_STEP];
    loop {
        let n = match f.read(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => r?,
        };
        if n == 0 {
            return Ok((len, Id::from_bytes(hasher.finalize().into())));
        }
        hasher.update(&buf[..n]);
        len += n as u64;
    }
}

/// Removes a directory tree; a missing one is fine.
pub(crate) fn remove_dir(path: &str) {
    if let Err(e) = std::fs::remove_dir_all(path).or_else(missing_is_fine) {
        tracing::warn!(path, %e, "cannot remove a job directory");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starting_a_file_again_leaves_a_hard_linked_copy_alone() {
        let dir = std::env::temp_dir().join(format!("p2pmp-files-test-{}", std::process::id()));
        let (cached, job) = (dir.join("cache/abc"), dir.join("job/prog"));
        let (cached, job) = (cached.to_str().unwrap(), job.to_str().unwrap());
        write_at(cached, 0, b"good program").unwrap();
        copy(cached, job, true).unwrap();
        write_at(job, 0, b"other").unwrap();
        write_at(job, 5, b" bytes").unwrap();
        assert_eq!(std::fs::read(job).unwrap(), b"other bytes");
        assert_eq!(std::fs::read(cached).unwrap(), b"good program", "the cached copy changed");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_read_for_staging_comes_with_its_digest() {
        let dir = std::env::temp_dir().join(format!("p2pmp-files-hash-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Empty, smaller than a step, exactly a step, several steps plus a tail.
        for len in [0, 1000, READ_STEP, 5 * READ_STEP + 12_345] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4096) as u8).collect();
            let path = dir.join(format!("f{len}"));
            std::fs::write(&path, &data).unwrap();
            let got = read_hashed(path.to_str().unwrap()).unwrap();
            assert_eq!(got.bytes, data);
            assert_eq!(got, FileData::new(bytes::Bytes::from(data)), "digest of {len} bytes");
        }
        assert!(read_hashed(dir.join("missing").to_str().unwrap()).is_err());
        // Hashed as the tool signs it: the same length and digest as staged.
        let big = dir.join(format!("f{}", 5 * READ_STEP + 12_345));
        let staged = read_hashed(big.to_str().unwrap()).unwrap();
        let signed = digest_file(big.to_str().unwrap()).unwrap();
        assert_eq!(signed, (staged.bytes.len() as u64, staged.digest));
        assert!(digest_file(dir.to_str().unwrap()).is_err(), "a directory is no file");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[cfg(test)]
mod escape_tests {
    use super::*;

    #[test]
    fn planted_links_are_neither_followed_nor_written_through() {
        let dir = std::env::temp_dir().join(format!("p2pmp-files-links-{}", std::process::id()));
        make_dirs(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, b"the daemon's secret").unwrap();
        let out = dir.join("out.txt");
        std::os::unix::fs::symlink(&victim, &out).unwrap();
        let err = read_output(out.to_str().unwrap()).unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
        std::fs::remove_file(&out).unwrap();
        std::fs::hard_link(&victim, &out).unwrap();
        assert!(read_output(out.to_str().unwrap()).unwrap_err().contains("hard links"));
        std::fs::remove_file(&out).unwrap();
        let fifo = std::ffi::CString::new(out.to_str().unwrap()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert_eq!(read_output(out.to_str().unwrap()).unwrap_err(), "not a regular file", "a FIFO does not block");
        std::fs::remove_file(&out).unwrap();
        std::fs::write(&out, b"result").unwrap();
        assert_eq!(read_output(out.to_str().unwrap()).unwrap(), &b"result"[..]);
        File::options().write(true).open(&out).unwrap().set_len(MAX_OUTPUT_FILE + 1).unwrap(); // sparse
        assert!(read_output(out.to_str().unwrap()).unwrap_err().contains("over the"), "held in memory whole");
        // A staged file written where a link was planted replaces the link.
        let staged = dir.join("input");
        std::os::unix::fs::symlink(&victim, &staged).unwrap();
        write_at(staged.to_str().unwrap(), 0, b"new").unwrap();
        write_at(staged.to_str().unwrap(), 3, b" data").unwrap();
        assert_eq!(std::fs::read(&staged).unwrap(), b"new data");
        copy(staged.to_str().unwrap(), out.to_str().unwrap(), false).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("copied")).unwrap();
        copy(out.to_str().unwrap(), dir.join("copied").to_str().unwrap(), false).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"the daemon's secret", "written through a link");
        assert_eq!(std::fs::read(dir.join("copied")).unwrap(), b"new data");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
