//! The few socket calls std and mio do not offer: a read into a buffer's spare
//! capacity that blocks or not per call, a vectored write that never blocks, and
//! the blocking mode and receive timeout that make the blocking read bounded.
//!
//! Data sockets stay in blocking mode with a receive timeout: every read and
//! write of the poll loop passes `MSG_DONTWAIT`, and a rank waiting for one peer
//! reads that peer's socket directly, sleeping in `recv` (one system call per
//! message, as a plain blocking program) instead of in `epoll_wait` then `read`.

use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::time::Duration;

use bytes::BytesMut;

/// Least spare room offered to each read (the decoder reserves a whole frame's
/// room once it has seen the frame's length).
const READ_ROOM: usize = 64 << 10;

/// How a read waits for its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// `EWOULDBLOCK` at once when nothing is there.
    No,
    /// Sleeps until bytes arrive, the peer closes, or the receive timeout passes
    /// (then `EWOULDBLOCK`).
    Block,
}

/// Reads once into the spare capacity of `buf` (at least [`READ_ROOM`] of it),
/// without initialising it first: (bytes read, room offered).
pub(crate) fn recv_spare(sock: &impl AsRawFd, buf: &mut BytesMut, wait: Wait) -> io::Result<(usize, usize)> {
    buf.reserve(READ_ROOM);
    let spare = buf.spare_capacity_mut();
    let room = spare.len();
    let flags = match wait {
        Wait::No => libc::MSG_DONTWAIT,
        Wait::Block => 0,
    };
    // SAFETY: recv(2) writes at most `spare.len()` bytes into the spare capacity,
    // which `spare` borrows exclusively; the fd is the caller's open socket.
    let n = unsafe { libc::recv(sock.as_raw_fd(), spare.as_mut_ptr().cast(), room, flags) };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    // SAFETY: the kernel initialised the first `n` spare bytes.
    unsafe { buf.set_len(buf.len() + n) };
    Ok((n, room))
}

/// Writes `bufs` with one `sendmsg`, without waiting and without `SIGPIPE`:
/// the bytes the socket took.
pub(crate) fn send_vectored(sock: &impl AsRawFd, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: an all-zero msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // IoSlice is ABI-compatible with iovec on Unix; sendmsg only reads through it.
    msg.msg_iov = bufs.as_ptr().cast_mut().cast();
    msg.msg_iovlen = bufs.len() as _;
    // SAFETY: `msg` points at `bufs`, which outlive the call; the fd is open.
    let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &raw const msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Waits up to `timeout` until `fd` is ready for `events` (`poll(2)` flags):
/// whether it is (a signal counts as not yet).
pub(crate) fn wait_fd(fd: std::os::fd::RawFd, events: libc::c_short, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd { fd, events, revents: 0 };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: poll(2) reads and writes the one pollfd `p` points at, which lives across the call.
    match unsafe { libc::poll(&raw mut p, 1, ms) } {
        n if n > 0 => Ok(true),
        0 => Ok(false),
        _ => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted { Ok(false) } else { Err(e) }
        }
    }
}

/// Puts `sock` in blocking mode (reads that must not block pass `MSG_DONTWAIT`)
/// with reads bounded by `timeout`.
pub(crate) fn blocking_with_timeout(sock: &impl AsRawFd, timeout: Duration) -> io::Result<()> {
    let fd = sock.as_raw_fd();
    // SAFETY: fcntl(2) on an open fd; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: libc::suseconds_t::from(timeout.subsec_micros() as i32),
    };
    // SAFETY: setsockopt(2) reads `size_of::<timeval>()` bytes from `&tv`, which lives
    // across the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const tv).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Most seconds Linux takes for `TCP_KEEPIDLE` and `TCP_KEEPINTVL`.
const MAX_KEEPALIVE_S: u64 = 32_767;

/// Makes a silent peer an error within about `timeout`, whatever this rank is
/// doing: the kernel probes an idle connection (keepalive) and gives up on
/// data the peer does not acknowledge (`TCP_USER_TIMEOUT`). A paused or cut-off
/// host sends no reset; without this a rank waiting on it would wait forever.
pub(crate) fn fail_silent_peers_after(sock: &impl AsRawFd, timeout: Duration) -> io::Result<()> {
    // Linux takes at most 32,767 s between probes: a longer timeout (a day,
    // or "never" spelled as a huge number) probes that often, and gives up
    // after the user timeout alone.
    let secs = |d: Duration| libc::c_int::try_from(d.as_secs().clamp(1, MAX_KEEPALIVE_S)).unwrap_or(1);
    let ms = libc::c_int::try_from(timeout.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
    let probes = 5;
    let options = [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, secs(timeout / 2)),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, secs(timeout / 2 / probes)),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, probes as libc::c_int),
        (libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, ms),
    ];
    for (level, name, value) in options {
        // SAFETY: setsockopt(2) reads one c_int from `&value`, which lives across the call.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                level,
                name,
                (&raw const value).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `TCP_RTO_MIN_US` (Linux 6.15 and later): the least retransmission timeout.
const TCP_RTO_MIN_US: libc::c_int = 45;
/// The least retransmission timeout asked for. Linux's default of 200 ms is
/// tuned for the wide area; between hosts of a LAN a lost segment of a
/// ping-pong (nothing behind it to trigger a fast retransmit) would stall a
/// message a thousand times its round trip. The timeout stays above the
/// measured round trip plus its variance, so slow links keep theirs.
const RTO_MIN: Duration = Duration::from_millis(5);

/// Retransmits lost segments sooner ([`RTO_MIN`]) where the kernel allows it;
/// elsewhere (older kernels) this does nothing.
pub(crate) fn quick_retransmit(sock: &impl AsRawFd) {
    let us = RTO_MIN.as_micros() as libc::c_int;
    // SAFETY: setsockopt(2) reads one c_int from `&us`, which lives across the call.
    let _ = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            TCP_RTO_MIN_US,
            (&raw const us).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::time::Instant;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn silent_peer_options_are_set_as_asked() {
        let (a, _b) = pair();
        fail_silent_peers_after(&a, Duration::from_secs(10)).unwrap();
        let get = |level, name| {
            let mut v: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: getsockopt(2) writes at most `len` bytes into `v`.
            let rc = unsafe { libc::getsockopt(a.as_raw_fd(), level, name, (&raw mut v).cast(), &raw mut len) };
            assert_eq!(rc, 0);
            v
        };
        assert_eq!(get(libc::SOL_SOCKET, libc::SO_KEEPALIVE), 1);
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE), 5);
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL), 1);
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT), 10_000);
    }

    /// A failure timeout beyond what keepalive takes (here 30 days) still
    /// sets the options: every link failed with EINVAL before.
    #[test]
    fn a_failure_timeout_of_days_is_taken() {
        let (a, _b) = pair();
        fail_silent_peers_after(&a, Duration::from_secs(30 * 86_400)).unwrap();
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt(2) writes at most `len` bytes into `v`.
        let rc = unsafe {
            libc::getsockopt(a.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, (&raw mut v).cast(), &raw mut len)
        };
        assert_eq!((rc, v), (0, 32_767));
    }

    #[test]
    fn non_blocking_read_of_a_blocking_socket_returns_would_block() {
        let (_a, b) = pair();
        blocking_with_timeout(&b, Duration::from_secs(5)).unwrap();
        let mut buf = BytesMut::new();
        let t = Instant::now();
        let e = recv_spare(&b, &mut buf, Wait::No).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(t.elapsed() < Duration::from_secs(1), "must not wait for the timeout");
        assert!(buf.is_empty());
    }

    #[test]
    fn vectored_send_of_a_blocking_socket_never_waits() {
        let (a, mut b) = pair();
        blocking_with_timeout(&a, Duration::from_secs(5)).unwrap();
        let part = vec![1u8; 1 << 20];
        let (mut sent, t) = (0, Instant::now());
        loop {
            match send_vectored(&a, &[IoSlice::new(b"hd"), IoSlice::new(&part)]) {
                Ok(n) => sent += n,
                Err(e) => {
                    assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
                    break;
                }
            }
            assert!(sent < 1 << 30, "the socket buffer must fill");
        }
        assert!(t.elapsed() < Duration::from_secs(2), "a full buffer answers at once");
        let mut first = [0u8; 3];
        std::io::Read::read_exact(&mut b, &mut first).unwrap();
        assert_eq!(first, [b'h', b'd', 1]);
    }

    #[test]
    fn blocking_read_returns_data_then_times_out() {
        let (mut a, b) = pair();
        blocking_with_timeout(&b, Duration::from_millis(30)).unwrap();
        a.write_all(b"hello").unwrap();
        let mut buf = BytesMut::new();
        let (n, room) = recv_spare(&b, &mut buf, Wait::Block).unwrap();
        assert_eq!((n, &buf[..]), (5, &b"hello"[..]));
        assert!(room >= READ_ROOM);
        let t = Instant::now();
        let e = recv_spare(&b, &mut buf, Wait::Block).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(t.elapsed() >= Duration::from_millis(20), "waited for the timeout");
        drop(a);
        assert_eq!(recv_spare(&b, &mut buf, Wait::Block).unwrap().0, 0, "end of stream");
        assert_eq!(&buf[..], b"hello");
    }
}
