//! Raw TCP ping-pong over loopback: the physical limit, blocking (sleeps in the
//! kernel like a plain program) and busy-polling (spins on a non-blocking socket
//! like the MPI libraries), between two threads and (blocking) between two
//! processes, the shape of two MPI ranks; and (blocking or busy-polling)
//! between two processes on two hosts of a namespace cluster ([`timer_main`],
//! [`echo_main`]).

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::segment::{self, PageBuf, Segment};
use crate::{iters, median};

pub(crate) fn read_full(s: &mut TcpStream, buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

pub(crate) fn write_full(s: &mut TcpStream, buf: &[u8]) -> io::Result<()> {
    let mut put = 0;
    while put < buf.len() {
        match s.write(&buf[put..]) {
            Ok(n) => put += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Where the echoing side of a raw ping-pong runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Echo {
    /// A thread of the bench process.
    Thread,
    /// A second process (this binary again), the shape of two MPI ranks.
    Process,
}

/// Environment variable that makes this binary the echoing process:
/// `addr size count spin`.
pub(crate) const ECHO_VAR: &str = "MPI_BENCH_RAW_ECHO";

/// Connects to `addr` (trying for up to 5 s: the other side may be a process
/// still starting) and echoes `count` messages of `size` bytes.
fn echo(addr: std::net::SocketAddr, size: usize, count: usize, spin: bool) -> io::Result<()> {
    let mut s = connect(addr, spin)?;
    let mut buf = vec![0u8; size];
    for _ in 0..count {
        read_full(&mut s, &mut buf)?;
        write_full(&mut s, &buf)?;
    }
    Ok(())
}

/// Connects to `addr`, trying for up to 5 s (the other side may be a
/// process still starting): no Nagle delay, non-blocking when `spin`.
pub(crate) fn connect(addr: std::net::SocketAddr, spin: bool) -> io::Result<TcpStream> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let s = loop {
        match TcpStream::connect(addr) {
            Ok(s) => break s,
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    s.set_nodelay(true)?;
    s.set_nonblocking(spin)?;
    Ok(s)
}

/// The echoing process's main, from the [`ECHO_VAR`] arguments.
pub(crate) fn echo_main(spec: &str) -> io::Result<()> {
    let bad = || io::Error::new(io::ErrorKind::InvalidInput, format!("{ECHO_VAR}={spec}"));
    let mut it = spec.split_whitespace();
    let addr = it.next().and_then(|a| a.parse().ok()).ok_or_else(bad)?;
    let size = it.next().and_then(|a| a.parse().ok()).ok_or_else(bad)?;
    let count = it.next().and_then(|a| a.parse().ok()).ok_or_else(bad)?;
    let spin = it.next() == Some("spin");
    echo(addr, size, count, spin)
}

/// Median half round trip in µs of `size`-byte ping-pongs (5 repetitions).
pub(crate) fn pingpong(size: usize, quick: bool, spin: bool, peer: Echo) -> io::Result<f64> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    let n = iters(size, quick);
    let echoing: Box<dyn FnOnce() -> io::Result<()>> = match peer {
        Echo::Thread => {
            let t = std::thread::spawn(move || echo(addr, size, 5 * n, spin));
            Box::new(move || t.join().map_err(|_| io::Error::other("echo thread panicked"))?)
        }
        Echo::Process => {
            let spec = format!("{addr} {size} {} {}", 5 * n, if spin { "spin" } else { "block" });
            let mut child = std::process::Command::new(std::env::current_exe()?).env(ECHO_VAR, spec).spawn()?;
            Box::new(move || {
                let st = child.wait()?;
                if st.success() { Ok(()) } else { Err(io::Error::other(format!("echo process: {st}"))) }
            })
        }
    };
    let figure = measure(&l, size, n, spin)?;
    echoing()?;
    Ok(figure)
}

/// Accepts one connection on `l` and times 5 x `n` ping-pongs of `size` bytes
/// over it: the median half round trip in µs.
fn measure(l: &TcpListener, size: usize, n: usize, spin: bool) -> io::Result<f64> {
    let (mut s, _) = l.accept()?;
    s.set_nodelay(true)?;
    s.set_nonblocking(spin)?;
    let mut buf = vec![7u8; size];
    let mut samples = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..n {
            write_full(&mut s, &buf)?;
            read_full(&mut s, &mut buf)?;
        }
        samples.push(t.elapsed().as_secs_f64() * 1e6 / (2 * n) as f64);
    }
    Ok(median(samples))
}

/// Environment variable that makes this binary the timing side of a raw
/// ping-pong between two hosts: `bind-addr size count [spin]`; it prints
/// `rawpp <size> <median half round trip µs>`.
pub(crate) const CLIENT_VAR: &str = "MPI_BENCH_RAW_TIMER";

/// The timing process's main, from the [`CLIENT_VAR`] arguments.
pub(crate) fn timer_main(spec: &str) -> io::Result<()> {
    let bad = || io::Error::new(io::ErrorKind::InvalidInput, format!("{CLIENT_VAR}={spec}"));
    let mut it = spec.split_whitespace();
    let addr: std::net::SocketAddr = it.next().and_then(|a| a.parse().ok()).ok_or_else(bad)?;
    let size = it.next().and_then(|a| a.parse().ok()).ok_or_else(bad)?;
    let n = it.next().and_then(|a| a.parse().ok()).ok_or_else(bad)?;
    let spin = it.next() == Some("spin");
    let l = TcpListener::bind(addr)?;
    println!("rawpp {size} {}", measure(&l, size, n, spin)?);
    Ok(())
}

/// Environment variable that makes this binary the echoing side of a raw
/// shared-memory ping-pong: `fd size count parent` (the segment's inherited
/// fd, and the bench's pid).
pub(crate) const SHM_ECHO_VAR: &str = "MPI_BENCH_RAW_SHM";

/// Offset of the data buffers in the raw shared segment (a page of flags first).
const SHM_DATA: usize = segment::PAGE;

/// Bytes of each of the two buffers of the raw shared segment.
const SHM_BUF: usize = 4 << 20;
/// Bytes of the raw shared segment: a page of flags, then the two buffers.
const SHM_LEN: usize = SHM_DATA + 2 * SHM_BUF;

/// The two sequence flags and the two buffers of a raw shared-memory
/// ping-pong, in one mapping.
struct ShmPair(Segment);

impl ShmPair {
    fn map(fd: i32) -> io::Result<Self> {
        Segment::map(fd, SHM_LEN).map(ShmPair)
    }

    fn flag(&self, i: usize) -> &std::sync::atomic::AtomicU64 {
        assert!(i < 2);
        self.0.word(i * 64)
    }

    /// The first `size` bytes of buffer `i` (checked to lie in it).
    fn buf(&self, i: usize, size: usize) -> *mut u8 {
        assert!(i < 2 && size <= SHM_BUF);
        self.0.bytes(SHM_DATA + i * SHM_BUF, size)
    }

    /// Waits (spinning) until flag `i` reaches `v`, while `alive` says the
    /// other side runs (see [`segment::spin_until`]).
    fn wait(&self, i: usize, v: u64, alive: &mut dyn FnMut() -> io::Result<()>) -> io::Result<()> {
        segment::spin_until(self.flag(i), v, (SHM_CAP, "the raw shared-memory ping-pong"), alive)
    }
}

/// A cap on one raw shared-memory wait (a hang, not a slow machine).
const SHM_CAP: Duration = Duration::from_secs(60);

/// The echoing process of a raw shared-memory ping-pong: for each message,
/// copy it out of buffer 0 into private memory, then into buffer 1.
pub(crate) fn shm_echo_main(spec: &str) -> io::Result<()> {
    let bad = || io::Error::new(io::ErrorKind::InvalidInput, format!("{SHM_ECHO_VAR}={spec}"));
    let v: Vec<u64> = spec.split_whitespace().map(str::parse).collect::<Result<_, _>>().map_err(|_| bad())?;
    let &[fd, size, count, parent] = &v[..] else { return Err(bad()) };
    let size = usize::try_from(size).ok().filter(|&s| s <= SHM_BUF).ok_or_else(bad)?;
    // Gone with the bench, never left spinning.
    let mut alive = segment::follow_parent(parent)?;
    let m = ShmPair::map(i32::try_from(fd).map_err(|_| bad())?)?;
    let mut own = PageBuf::new(size, 0);
    for i in 1..=count {
        m.wait(0, i, &mut alive)?;
        // SAFETY: the pinger wrote `size` bytes of buffer 0 before raising flag 0
        // to `i`, and touches neither buffer until flag 1 reaches `i`.
        unsafe {
            std::ptr::copy_nonoverlapping(m.buf(0, size), own.as_mut_ptr(), size);
            std::ptr::copy_nonoverlapping(own.as_ptr(), m.buf(1, size), size);
        }
        m.flag(1).store(i, std::sync::atomic::Ordering::Release);
    }
    Ok(())
}

/// Median half round trip in µs of a raw shared-memory ping-pong of `size`
/// bytes between this process and a child (both busy-polling; each message
/// copied in by its sender and out by its receiver, as TCP copies it in and
/// out of the kernel): the physical limit of a one-host transport. Every
/// buffer starts on a page (see `segment.rs`).
pub(crate) fn shm_pingpong(size: usize, quick: bool) -> io::Result<f64> {
    if size > SHM_BUF {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{size} B: the buffers hold {SHM_BUF}")));
    }
    let n = iters(size, quick);
    let fd = segment::memfd(c"raw-shm", SHM_LEN)?;
    let m = ShmPair::map(fd.as_raw_fd())?;
    let spec = format!("{} {size} {} {}", fd.as_raw_fd(), 5 * n, std::process::id());
    let child = std::process::Command::new(std::env::current_exe()?).env(SHM_ECHO_VAR, spec).spawn()?;
    segment::beside_child(child, "the raw shared-memory echo", |alive| shm_ping(&m, size, n, alive)).map(median)
}

/// The pinging side: 5 figures of `n` round trips each.
fn shm_ping(m: &ShmPair, size: usize, n: usize, alive: &mut dyn FnMut() -> io::Result<()>) -> io::Result<Vec<f64>> {
    let own = PageBuf::new(size, 7);
    let mut back = PageBuf::new(size, 0);
    let (mut samples, mut i) = (Vec::new(), 0u64);
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..n {
            i += 1;
            // SAFETY: the echo touches buffer 0 only after flag 0 reaches `i`.
            unsafe { std::ptr::copy_nonoverlapping(own.as_ptr(), m.buf(0, size), size) };
            m.flag(0).store(i, std::sync::atomic::Ordering::Release);
            m.wait(1, i, alive)?;
            // SAFETY: buffer 1 is complete once flag 1 reaches `i`, and the
            // echo writes it again only after flag 0 passes `i`.
            unsafe { std::ptr::copy_nonoverlapping(m.buf(1, size), back.as_mut_ptr(), size) };
        }
        samples.push(t.elapsed().as_secs_f64() * 1e6 / (2 * n) as f64);
    }
    Ok(samples)
}
