//! Memory the raw rows share with processes of this binary: a memfd the
//! children inherit (no close-on-exec), mapped by each side. Every access is
//! checked against the mapping's length. And what their two sides need
//! besides: waiting for a word while watching the other side, and private
//! buffers that start on a page.
//!
//! Private buffers start on a page, as the shared ones do: where a copy's
//! destination lay 1 to 31 bytes past its source's place in a page (as in a
//! buffer straight from `malloc`, 16 bytes past a page), glibc's copy on
//! this machine's AMD EPYC ran at 2,300-2,700 MB/s against 10,000-12,000
//! with the two 32 bytes or more apart or level (measured on the window's
//! floor, `window_floor.rs`).

use std::ffi::CStr;
use std::io;
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Child;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A page: where private buffers start (see [`PageBuf`]).
pub(crate) const PAGE: usize = 4096;
/// How often a spinning side looks whether the other still runs.
const CHECK_EVERY: Duration = Duration::from_millis(1);

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

/// A private buffer of `len` bytes that starts on a page (see the module docs).
pub(crate) struct PageBuf {
    space: Vec<u8>,
    start: usize,
    len: usize,
}

impl PageBuf {
    /// `len` bytes of `fill`, all touched (as a benchmark's buffers are).
    pub(crate) fn new(len: usize, fill: u8) -> Self {
        let space = vec![fill; len + PAGE];
        let start = space.as_ptr().align_offset(PAGE).min(PAGE);
        PageBuf { space, start, len }
    }
}

impl Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.space[self.start..][..self.len]
    }
}

impl DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.space[self.start..][..self.len]
    }
}

/// Spins until `word` reaches `v`. Every millisecond or so `alive` says
/// whether the other side still runs (a side that ended after raising the
/// word is no failure), and the wait fails once it took `cap` (a hang, not a
/// slow machine: `what` names the row). A short wait reads no clock.
pub(crate) fn spin_until(
    word: &AtomicU64,
    v: u64,
    (cap, what): (Duration, &str),
    alive: &mut dyn FnMut() -> io::Result<()>,
) -> io::Result<()> {
    let (mut looks, mut checks) = (0u32, None::<(Instant, Instant)>);
    while word.load(Ordering::Acquire) < v {
        std::hint::spin_loop();
        looks = looks.wrapping_add(1);
        if looks % 4096 != 0 {
            continue;
        }
        let now = Instant::now();
        // (The next check, the deadline.)
        let (next, deadline) = checks.get_or_insert((now + CHECK_EVERY, now + cap));
        if now < *next {
            continue;
        }
        *next = now + CHECK_EVERY;
        if let Err(e) = alive() {
            if word.load(Ordering::Acquire) >= v {
                return Ok(());
            }
            return Err(e);
        }
        if now > *deadline {
            return Err(io::Error::new(io::ErrorKind::TimedOut, format!("{what}: a wait took over {cap:?}")));
        }
    }
    Ok(())
}

/// For a child of the bench (`parent`: the bench's pid, passed to it):
/// killed when the bench dies (strictly, when the thread that spawned it
/// ends: the bench spawns from its main thread and waits), and an error now
/// if it already has. Then the check for [`spin_until`]: the bench is alive
/// while it is our parent.
pub(crate) fn follow_parent(parent: u64) -> io::Result<impl FnMut() -> io::Result<()>> {
    // SAFETY: prctl(2) with two integer arguments; getppid(2) takes none.
    let orphaned =
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 || libc::getppid() as u64 != parent };
    if orphaned {
        return Err(io::Error::other("the bench is gone (or cannot be followed)"));
    }
    Ok(move || {
        // SAFETY: getppid(2) takes no arguments.
        let parent_now = unsafe { libc::getppid() } as u64;
        if parent_now == parent { Ok(()) } else { Err(io::Error::other("the bench is gone")) }
    })
}

/// Runs `side`, this process's part of a raw row, beside `child` (`what`),
/// which `side` watches through the check it is given (for
/// [`spin_until`]); then waits for the child, and fails unless both
/// succeeded. When `side` fails (naming a child that failed first), the
/// child is killed and reaped.
pub(crate) fn beside_child<T>(
    mut child: Child,
    what: &str,
    side: impl FnOnce(&mut dyn FnMut() -> io::Result<()>) -> io::Result<T>,
) -> io::Result<T> {
    let mut alive = || match child.try_wait()? {
        None => Ok(()),
        Some(st) => Err(io::Error::other(format!("{what} ended: {st}"))),
    };
    match side(&mut alive) {
        Ok(v) => {
            let st = child.wait()?;
            if st.success() { Ok(v) } else { Err(io::Error::other(format!("{what}: {st}"))) }
        }
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}
