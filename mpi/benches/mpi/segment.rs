//! Memory the raw rows share with processes of this binary: a memfd the
//! children inherit (no close-on-exec), mapped by each side. Every access is
//! checked against the mapping's length.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::AtomicU64;

/// A fresh zero-filled memfd of `len` bytes, inherited by children.
pub(crate) fn memfd(name: &CStr, len: usize) -> io::Result<OwnedFd> {
    // SAFETY: memfd_create(2) reads the NUL-terminated name; no CLOEXEC, so
    // the children inherit it.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor, ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let size = libc::off_t::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: sets the size of our memfd (zero-filled).
    if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// A shared mapping of a whole segment.
pub(crate) struct Segment {
    base: *mut u8,
    len: usize,
}

impl Segment {
    /// Maps the first `len` bytes of `fd`.
    pub(crate) fn map(fd: i32, len: usize) -> io::Result<Self> {
        // SAFETY: a fresh shared mapping of `len` bytes of the caller's fd.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Segment { base: p.cast(), len })
    }

    /// The word at byte `offset` (8-aligned, inside the mapping).
    pub(crate) fn word(&self, offset: usize) -> &AtomicU64 {
        assert!(
            offset % 8 == 0 && offset.checked_add(8).is_some_and(|end| end <= self.len),
            "word at {offset} of {}",
            self.len
        );
        // SAFETY: inside the mapping and 8-aligned (the mapping is page-aligned).
        unsafe { &*self.base.add(offset).cast::<AtomicU64>() }
    }

    /// The `n` bytes at `offset` (inside the mapping); what they hold and who
    /// writes them is the caller's protocol.
    pub(crate) fn bytes(&self, offset: usize, n: usize) -> *mut u8 {
        assert!(offset.checked_add(n).is_some_and(|end| end <= self.len), "{n} bytes at {offset} of {}", self.len);
        // SAFETY: inside the mapping.
        unsafe { self.base.add(offset) }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}
