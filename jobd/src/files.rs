//! The little file work a daemon does for its node.

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

/// Writes `data` at `offset` of `path`, making its directory. Offset 0 starts a
/// new file: the old name is unlinked first rather than truncated, so a file
/// hard-linked from the file cache is never rewritten through the job's name.
pub(crate) fn write_at(path: &str, offset: u64, data: &[u8]) -> std::io::Result<()> {
    let path = Path::new(path);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if offset == 0 {
        std::fs::remove_file(path).or_else(missing_is_fine)?;
    }
    let mut f = OpenOptions::new().write(true).create(true).truncate(offset == 0).open(path)?;
    f.seek(SeekFrom::Start(offset))?;
    f.write_all(data)
}

/// Copies `from` to `to` (whole, permissions included), making `to`'s directory;
/// with `link`, a hard link where the file system allows one.
pub(crate) fn copy(from: &str, to: &str, link: bool) -> std::io::Result<()> {
    if let Some(dir) = Path::new(to).parent() {
        std::fs::create_dir_all(dir)?;
    }
    if link && std::fs::hard_link(from, to).is_ok() {
        return Ok(());
    }
    std::fs::copy(from, to).map(|_| ())
}

/// Maps "not found" to success: removing what is already gone is fine.
pub(crate) fn missing_is_fine(e: std::io::Error) -> std::io::Result<()> {
    if e.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(e) }
}

/// Reads a whole file, the error in words.
pub(crate) fn read(path: &str) -> Result<bytes::Bytes, String> {
    std::fs::read(path).map(bytes::Bytes::from).map_err(|e| e.to_string())
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
}
