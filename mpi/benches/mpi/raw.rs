//! Raw TCP ping-pong over loopback: the physical limit, blocking (sleeps in the
//! kernel like a plain program) and busy-polling (spins on a non-blocking socket
//! like the MPI libraries), between two threads and (blocking) between two
//! processes, the shape of two MPI ranks; and (blocking) between two processes
//! on two hosts of a namespace cluster ([`timer_main`], [`echo_main`]).

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use crate::{iters, median};

fn read_full(s: &mut TcpStream, buf: &mut [u8]) -> io::Result<()> {
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

fn write_full(s: &mut TcpStream, buf: &[u8]) -> io::Result<()> {
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
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    let mut s = loop {
        match TcpStream::connect(addr) {
            Ok(s) => break s,
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    };
    s.set_nodelay(true)?;
    s.set_nonblocking(spin)?;
    let mut buf = vec![0u8; size];
    for _ in 0..count {
        read_full(&mut s, &mut buf)?;
        write_full(&mut s, &buf)?;
    }
    Ok(())
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
/// ping-pong between two hosts: `bind-addr size count`; it prints
/// `rawpp <size> <median half round trip µs>`.
pub(crate) const CLIENT_VAR: &str = "MPI_BENCH_RAW_TIMER";

/// The timing process's main, from the [`CLIENT_VAR`] arguments.
pub(crate) fn timer_main(spec: &str) -> io::Result<()> {
    let bad = || io::Error::new(io::ErrorKind::InvalidInput, format!("{CLIENT_VAR}={spec}"));
    let mut it = spec.split_whitespace();
    let addr: std::net::SocketAddr = it.next().and_then(|a| a.parse().ok()).ok_or_else(bad)?;
    let size = it.next().and_then(|a| a.parse().ok()).ok_or_else(bad)?;
    let n = it.next().and_then(|a| a.parse().ok()).ok_or_else(bad)?;
    let l = TcpListener::bind(addr)?;
    println!("rawpp {size} {}", measure(&l, size, n, false)?);
    Ok(())
}
