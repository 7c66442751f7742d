use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use super::*;

/// A second mapping of the same memory, as the peer process gets it.
fn reopen(seg: &Segment, creator: u32, acceptor: u32) -> io::Result<Segment> {
    Segment::open(seg.fd.as_fd().try_clone_to_owned()?, creator, acceptor, seg.cap)
}

/// An unsealed (or wrongly sized) memfd with a header of our choice.
fn forged(len: usize, seal: bool, header: &[u8]) -> OwnedFd {
    // SAFETY: as in `Segment::create`.
    let fd = unsafe { libc::memfd_create(c"forged".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0);
    // SAFETY: a fresh descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ftruncate, pwrite of `header` (ours), fcntl: no other memory.
    unsafe {
        assert_eq!(libc::ftruncate(fd.as_raw_fd(), len as libc::off_t), 0);
        assert_eq!(libc::pwrite(fd.as_raw_fd(), header.as_ptr().cast(), header.len(), 0), header.len() as isize);
        if seal {
            assert_eq!(libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW), 0);
        }
    }
    fd
}

fn header(log2: u32, creator: u32, acceptor: u32) -> Vec<u8> {
    let mut h = MAGIC.to_ne_bytes().to_vec();
    h.extend(VERSION.to_ne_bytes());
    h.extend(log2.to_ne_bytes());
    h.extend(creator.to_ne_bytes());
    h.extend(acceptor.to_ne_bytes());
    h
}

#[test]
fn both_mappings_share_the_rings_each_way() {
    let a = Segment::create(4096, 3, 5).unwrap();
    let b = reopen(&a, 3, 5).unwrap();
    let (mut ap, mut ac) = a.ends(true).unwrap();
    let (mut bp, mut bc) = b.ends(false).unwrap();
    assert_eq!(ap.write(&[&b"to the acceptor"[..]]).unwrap(), 15);
    assert_eq!(bp.write(&[&b"to the creator"[..]]).unwrap(), 14);
    let (mut x, mut y) = (BytesMut::new(), BytesMut::new());
    bc.read_into(&mut x, 100).unwrap();
    ac.read_into(&mut y, 100).unwrap();
    assert_eq!((&x[..], &y[..]), (&b"to the acceptor"[..], &b"to the creator"[..]));
}

#[test]
fn a_segment_is_checked_before_it_is_trusted() {
    let seg = Segment::create(4096, 0, 1).unwrap();
    assert!(reopen(&seg, 1, 0).is_err(), "made for other ranks");
    assert!(reopen(&seg, 0, 1).is_ok());
    let good = PAGE + 2 * 4096;
    assert!(Segment::open(forged(good, false, &header(12, 0, 1)), 0, 1, 4096).is_err(), "unsealed: could shrink");
    assert!(Segment::open(forged(good, true, &header(12, 0, 1)), 0, 1, 4096).is_ok(), "a well-formed forgery is fine");
    assert!(Segment::open(forged(good, true, &header(13, 0, 1)), 0, 1, 4096).is_err(), "capacity beyond its size");
    assert!(Segment::open(forged(good, true, &header(40, 0, 1)), 0, 1, 4096).is_err(), "absurd capacity");
    assert!(Segment::open(forged(good, true, b"not a segment at all"), 0, 1, 4096).is_err(), "bad magic");
    assert!(Segment::open(forged(100, true, &header(12, 0, 1)), 0, 1, 4096).is_err(), "smaller than its header");
    let bigger = PAGE + 2 * 8192;
    assert!(Segment::open(forged(bigger, true, &header(13, 0, 1)), 0, 1, 4096).is_err(), "not this world's rings");
    assert!(Segment::open(forged(bigger, true, &header(13, 0, 1)), 0, 1, 8192).is_ok(), "this world's rings");
    assert!(Segment::create(1000, 0, 1).is_err(), "not a power of two");
}

#[test]
fn descriptors_travel_with_the_bytes() {
    let (a, b) = UnixStream::pair().unwrap();
    let bell = doorbell().unwrap();
    let seg = Segment::create(4096, 0, 1).unwrap();
    assert_eq!(send_with_fds(a.as_raw_fd(), b"hello", &[seg.raw_fd(), bell.as_raw_fd()]).unwrap(), 5);
    let (mut buf, mut fds) = (BytesMut::new(), Vec::new());
    assert_eq!(recv_with_fds(b.as_raw_fd(), &mut buf, &mut fds).unwrap(), 5);
    assert_eq!((&buf[..], fds.len()), (&b"hello"[..], 2));
    let theirs = Segment::open(fds.remove(0), 0, 1, 4096).unwrap();
    let (mut p, _) = seg.ends(true).unwrap();
    let (_, c) = theirs.ends(false).unwrap();
    p.write(&[&b"x"[..]]).unwrap();
    assert_eq!(c.available().unwrap(), 1);
    // The doorbell received is the same eventfd.
    ring_bell(fds[0].as_raw_fd());
    let mut v = 0u64;
    // SAFETY: read(2) of 8 bytes into `v`.
    assert_eq!(unsafe { libc::read(bell.as_raw_fd(), (&raw mut v).cast(), 8) }, 8);
    assert_eq!(v, 1);
    drain_bell(bell.as_raw_fd());
    // More descriptors than allowed are refused and closed.
    let three = [bell.as_raw_fd(), bell.as_raw_fd(), bell.as_raw_fd()];
    let mut cbuf = [0u64; 8];
    let mut iov = libc::iovec { iov_base: b"x".as_ptr().cast_mut().cast(), iov_len: 1 };
    // SAFETY: as in `send_with_fds`, with room for three descriptors.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(12) as _;
        let c = libc::CMSG_FIRSTHDR(&raw const msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(12) as _;
        std::ptr::copy_nonoverlapping(three.as_ptr(), libc::CMSG_DATA(c).cast::<i32>(), 3);
        assert_eq!(libc::sendmsg(a.as_raw_fd(), &raw const msg, 0), 1);
    }
    let mut fds = Vec::new();
    assert!(recv_with_fds(b.as_raw_fd(), &mut BytesMut::new(), &mut fds).is_err());
    assert!(fds.is_empty());
}

/// The size of a page here.
fn page_size() -> usize {
    // SAFETY: sysconf(3) only reads a system setting.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).expect("a page size")
}

/// How many of the pages at `ptr` (`len` bytes) this process has mapped:
/// present in its page tables, as `/proc/self/pagemap` says (bit 63 of each
/// page's entry); `None` where that file cannot be read.
fn pages_mapped(ptr: *mut u8, len: usize) -> Option<usize> {
    use std::os::unix::fs::FileExt;
    let page = page_size();
    let map = std::fs::File::open("/proc/self/pagemap").ok()?;
    let mut entries = vec![0u8; len.div_ceil(page) * 8];
    map.read_exact_at(&mut entries, (ptr as usize / page * 8) as u64).ok()?;
    Some(entries.chunks_exact(8).filter(|e| bytemuck::pod_read_unaligned::<u64>(e) >> 63 == 1).count())
}

#[test]
fn both_sides_map_every_page_as_they_set_the_link_up() {
    let a = Segment::create(64 << 10, 0, 1).unwrap();
    let b = reopen(&a, 0, 1).unwrap();
    // A control: a mapping of the same memory made without populating has
    // none of its pages yet, so the count below tells the two apart.
    // SAFETY: a fresh shared mapping of `a`'s memfd, unmapped below.
    let plain =
        unsafe { libc::mmap(std::ptr::null_mut(), a.len, libc::PROT_READ, libc::MAP_SHARED, a.fd.as_raw_fd(), 0) };
    assert_ne!(plain, libc::MAP_FAILED);
    let unpopulated = pages_mapped(plain.cast(), a.len);
    // SAFETY: the mapping made above, not used after.
    unsafe { libc::munmap(plain, a.len) };
    let (Some(0), Some(on_a), Some(on_b)) = (unpopulated, pages_mapped(a.ptr, a.len), pages_mapped(b.ptr, b.len))
    else {
        // Where /proc/self/pagemap is missing, or shows pages nobody touched,
        // mapped pages cannot be told apart.
        eprintln!("SKIPPED: /proc/self/pagemap gave {unpopulated:?} pages for an untouched mapping");
        return;
    };
    let pages = a.len.div_ceil(page_size());
    assert_eq!(on_a, pages, "creator: no ring page is left for a message to fault in");
    assert_eq!(on_b, pages, "acceptor: no ring page is left for a message to fault in");
}
