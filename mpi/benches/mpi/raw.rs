//! Raw TCP ping-pong over loopback between two threads: the physical limit,
//! blocking (sleeps in the kernel like a plain program) and busy-polling (spins
//! on a non-blocking socket like the MPI libraries).

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

/// Median half round trip in µs of `size`-byte ping-pongs (5 repetitions).
pub(crate) fn pingpong(size: usize, quick: bool, spin: bool) -> io::Result<f64> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    let n = iters(size, quick);
    let echo = std::thread::spawn(move || -> io::Result<()> {
        let (mut s, _) = l.accept()?;
        s.set_nodelay(true)?;
        s.set_nonblocking(spin)?;
        let mut buf = vec![0u8; size];
        for _ in 0..5 * n {
            read_full(&mut s, &mut buf)?;
            write_full(&mut s, &buf)?;
        }
        Ok(())
    });
    let mut s = TcpStream::connect(addr)?;
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
    echo.join().map_err(|_| io::Error::other("echo thread panicked"))??;
    Ok(median(samples))
}
