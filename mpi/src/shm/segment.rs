//! The memory two ranks of one host share, and the descriptors that go with it:
//! a sealed memfd holding one ring per direction, eventfd doorbells, and the
//! `SCM_RIGHTS` messages that hand them over a Unix socket.
//!
//! The rank that opens the link creates the segment, seals its size (so the
//! other side can map it without fear of `SIGBUS`), and sends the descriptor
//! with its doorbell. The other rank checks everything before it trusts it:
//! the seals, the size, the header's magic, version, capacity and ranks.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use bytes::BytesMut;

use super::ring::{self, Consumer, Corrupt, Producer};

const MAGIC: u64 = u64::from_be_bytes(*b"P2PMPSHM");
const VERSION: u32 = 2;
/// The segment header's page: fields, then the two ring headers.
const PAGE: usize = 4096;
const RING0: usize = 64;
const RING1: usize = RING0 + ring::HEADER + 64;
/// Ring capacities accepted from a peer: 4 KiB to 64 MiB.
const MIN_LOG2: u32 = 12;
const MAX_LOG2: u32 = 26;

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(rc) }
}

/// A mapped segment: two rings of `cap` bytes between `creator` and `acceptor`.
#[derive(Debug)]
pub(crate) struct Segment {
    ptr: *mut u8,
    len: usize,
    cap: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping belongs to the segment alone in this process; it is
// shared with another process only through the rings' protocol.
unsafe impl Send for Segment {}

impl Segment {
    /// Creates, seals and maps a segment with rings of `cap` bytes (a power of
    /// two within the accepted range).
    pub(crate) fn create(cap: usize, creator: u32, acceptor: u32) -> io::Result<Segment> {
        let log2 = cap.trailing_zeros();
        if !cap.is_power_of_two() || !(MIN_LOG2..=MAX_LOG2).contains(&log2) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("ring capacity {cap}")));
        }
        let len = PAGE + 2 * cap;
        // SAFETY: memfd_create(2) reads the NUL-terminated name; no other memory.
        let fd =
            cvt(unsafe { libc::memfd_create(c"p2pmp-link".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) })?;
        // SAFETY: a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ftruncate(2) and fcntl(2) on our open fd; no memory passed.
        unsafe {
            cvt(libc::ftruncate(fd.as_raw_fd(), len as libc::off_t))?;
            cvt(libc::fcntl(
                fd.as_raw_fd(),
                libc::F_ADD_SEALS,
                libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
            ))?;
        }
        let seg = Segment::map(fd, len, cap)?;
        // SAFETY: the mapping is ours and fresh (zeroed by the kernel); the
        // header fields are aligned for their types at these offsets.
        unsafe {
            seg.ptr.cast::<u64>().write(MAGIC);
            seg.ptr.add(8).cast::<u32>().write(VERSION);
            seg.ptr.add(12).cast::<u32>().write(log2);
            seg.ptr.add(16).cast::<u32>().write(creator);
            seg.ptr.add(20).cast::<u32>().write(acceptor);
            ring::init(seg.ptr.add(RING0));
            ring::init(seg.ptr.add(RING1));
        }
        Ok(seg)
    }

    /// Maps a segment a peer sent, after checking its seals, size and header;
    /// it must join `creator` to `acceptor` with rings of `cap` bytes.
    pub(crate) fn open(fd: OwnedFd, creator: u32, acceptor: u32, cap: usize) -> io::Result<Segment> {
        let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, format!("shared segment refused: {why}"));
        // SAFETY: fcntl(2) on an open fd; no memory passed.
        let seals = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) })?;
        if seals & (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW) != (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW) {
            return Err(bad("its size is not sealed"));
        }
        // SAFETY: fstat(2) writes one stat into `st`, which lives across the call.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        cvt(unsafe { libc::fstat(fd.as_raw_fd(), &raw mut st) })?;
        let len = usize::try_from(st.st_size).map_err(|_| bad("negative size"))?;
        if len < PAGE {
            return Err(bad("too small"));
        }
        // The header is read, not mapped: only a segment found good is mapped
        // (and allocated whole, see `Segment::map`).
        let mut head = [0u8; 24];
        // SAFETY: pread(2) writes at most `head.len()` bytes into `head`.
        let got = unsafe { libc::pread(fd.as_raw_fd(), head.as_mut_ptr().cast(), head.len(), 0) };
        if got < 0 {
            return Err(io::Error::last_os_error());
        }
        if usize::try_from(got).ok() != Some(head.len()) {
            return Err(bad("its header is cut short"));
        }
        // The fields as `create` wrote them: native byte order, fixed offsets.
        let word = |at: usize| bytemuck::pod_read_unaligned::<u32>(&head[at..at + 4]);
        let magic = bytemuck::pod_read_unaligned::<u64>(&head[..8]);
        let (version, log2, c, a) = (word(8), word(12), word(16), word(20));
        if magic != MAGIC || version != VERSION {
            return Err(bad("not a p2pmp segment of this version"));
        }
        if !(MIN_LOG2..=MAX_LOG2).contains(&log2) || len != PAGE + (2usize << log2) {
            return Err(bad("its capacity does not match its size"));
        }
        // Mapping allocates the whole segment: only the size this world's
        // rings have (both sides work it out alike) is taken.
        if 1usize << log2 != cap {
            return Err(bad("its rings are not this world's size"));
        }
        if (c, a) != (creator, acceptor) {
            return Err(bad("made for other ranks"));
        }
        Segment::map(fd, len, cap)
    }

    /// Maps `len` bytes of `fd`, every page allocated and mapped at once
    /// (`MAP_POPULATE`, which the kernel does as far as memory allows: a page
    /// it leaves out is faulted in by its first use, as without it). A link
    /// thus holds its two rings (1 MiB with 512 KiB rings) from its set-up.
    /// Otherwise each page of a ring is allocated and zeroed by the first
    /// message that reaches it (about 2.2 us a page here) and mapped on the
    /// other side by its first look (0.5 us), so a new link's messages were
    /// slow until both rings had gone round once: an 8 B ping-pong took
    /// 0.32-0.34 us a message over its first 7,000 round trips and 0.24 after;
    /// populated, 0.23-0.24 from the start, and the link's set-up (the first
    /// barrier) took about 0.7 ms more. Populated by the creator alone, the
    /// other side's first looks still cost 0.25 us a message. What it costs a
    /// short job of many ranks: 32 ranks on 2 cores, a ring of 100 rounds,
    /// 0.25-0.34 s from start to end against 0.19-0.21.
    fn map(fd: OwnedFd, len: usize, cap: usize) -> io::Result<Segment> {
        // SAFETY: a fresh shared mapping of `len` bytes of our fd; the kernel
        // picks the address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Segment { ptr: ptr.cast(), len, cap, fd })
    }

    /// The descriptor to send to the peer.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// This side's ends: the creator produces into ring 0 and consumes ring 1,
    /// the acceptor the other way round.
    pub(crate) fn ends(&self, creator_side: bool) -> Result<(Producer, Consumer), Corrupt> {
        let (out, inb) = if creator_side { (0, 1) } else { (1, 0) };
        let header = |i: usize| if i == 0 { RING0 } else { RING1 };
        // SAFETY: both ring headers and data areas lie inside the mapping
        // (PAGE + 2 * cap bytes, checked at open), which lives as long as
        // `self`; the owner drops the ends before the segment. This side is
        // the only producer of `out` and consumer of `inb` in this process.
        unsafe {
            let p = Producer::new(self.ptr.add(header(out)), self.ptr.add(PAGE + out * self.cap), self.cap)?;
            let c = Consumer::new(self.ptr.add(header(inb)), self.ptr.add(PAGE + inb * self.cap), self.cap)?;
            Ok((p, c))
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`; nothing uses it after.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A doorbell: an eventfd a peer rings to wake this rank.
pub(crate) fn doorbell() -> io::Result<OwnedFd> {
    // SAFETY: eventfd(2) takes no memory.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Rings a doorbell (a full counter is as good as rung).
pub(crate) fn ring_bell(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: write(2) reads 8 bytes from `one`, which lives across the call.
    let _ = unsafe { libc::write(fd, (&raw const one).cast(), 8) };
}

/// Silences a rung doorbell (does nothing if it was not rung).
pub(crate) fn drain_bell(fd: RawFd) {
    let mut v: u64 = 0;
    // SAFETY: read(2) writes at most 8 bytes into `v`, which lives across the call.
    let _ = unsafe { libc::read(fd, (&raw mut v).cast(), 8) };
}

/// Most descriptors accepted in one message.
const MAX_FDS: usize = 2;

/// Sends `data` with `fds` attached (`SCM_RIGHTS`), without waiting: the bytes
/// the socket took (the descriptors go with the first byte).
pub(crate) fn send_with_fds(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    assert!(fds.len() <= MAX_FDS, "at most {MAX_FDS} descriptors");
    let mut cbuf = [0u64; 8];
    let mut iov = libc::iovec { iov_base: data.as_ptr().cast_mut().cast(), iov_len: data.len() };
    // SAFETY: an all-zero msghdr is valid; then it points at `iov` and `cbuf`,
    // which outlive the call; CMSG_* compute offsets inside `cbuf`, which has
    // room for MAX_FDS descriptors; sendmsg(2) only reads.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            let bytes = std::mem::size_of_val(fds) as libc::c_uint;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(bytes) as _;
            let c = libc::CMSG_FIRSTHDR(&raw const msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(bytes) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast::<RawFd>(), fds.len());
        }
        let n = libc::sendmsg(sock, &raw const msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL);
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }
}

/// Reads what is there into `buf` without waiting, keeping descriptors that
/// came with it in `fds` (at most [`MAX_FDS`] in all; more, or a truncated
/// set, is an error and every one received is closed). Bytes read (0: end).
pub(crate) fn recv_with_fds(sock: RawFd, buf: &mut BytesMut, fds: &mut Vec<OwnedFd>) -> io::Result<usize> {
    buf.reserve(512);
    let spare = buf.spare_capacity_mut();
    let mut iov = libc::iovec { iov_base: spare.as_mut_ptr().cast(), iov_len: spare.len() };
    let mut cbuf = [0u64; 8];
    // SAFETY: as in `send_with_fds`; recvmsg(2) writes at most `iov_len` bytes
    // into the spare capacity and at most `msg_controllen` into `cbuf`.
    let (n, msg) = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
        let n = libc::recvmsg(sock, &raw mut msg, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC);
        (n, msg)
    };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    // SAFETY: the kernel initialised the first `n` spare bytes.
    unsafe { buf.set_len(buf.len() + n) };
    // SAFETY: walking the control messages the kernel wrote into `cbuf`, within
    // `msg_controllen`; each SCM_RIGHTS payload is an array of descriptors now
    // ours, each wrapped at once so that every path closes them.
    let mut got = 0usize;
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&raw const msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let payload = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..payload / std::mem::size_of::<RawFd>() {
                    let fd = OwnedFd::from_raw_fd(data.add(i).read_unaligned());
                    got += 1;
                    if fds.len() < MAX_FDS {
                        fds.push(fd);
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&raw const msg, c);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 || got > MAX_FDS {
        fds.clear();
        return Err(io::Error::new(io::ErrorKind::InvalidData, "too many descriptors"));
    }
    Ok(n)
}

#[cfg(test)]
mod tests;
