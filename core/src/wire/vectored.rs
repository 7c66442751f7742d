//! Writing a queue of byte chunks with vectored writes: the one loop the
//! adapters' send queues (sync and async shells) and the MPI library's
//! connections share. Pure: the caller's `send` touches the socket. It lives in
//! core, not in the adapters, so that an MPI program links no runtime for it
//! (from the adapters it doubled a rank binary's size and slowed its start).
//!
//! [`gather`] fills slices from the front of the queue, the caller hands them
//! to a socket, and [`consume`] drops what the socket took. [`write_queue`] is
//! that loop for a non-blocking `send`; async writers call the two parts around
//! their own `await`.

use std::collections::VecDeque;
use std::io::{self, IoSlice};

use bytes::{Buf, Bytes};

/// Fills `iov` with the front chunks of `queue`: how many it filled.
pub fn gather<'a>(queue: &'a VecDeque<Bytes>, iov: &mut [IoSlice<'a>]) -> usize {
    let mut k = 0;
    for (slot, chunk) in iov.iter_mut().zip(queue) {
        *slot = IoSlice::new(chunk);
        k += 1;
    }
    k
}

/// Drops the `n` bytes a write took from the front of `queue`.
///
/// # Panics
/// If `n` exceeds the bytes queued: a writer never reports more bytes than the
/// slices it was given.
pub fn consume(queue: &mut VecDeque<Bytes>, mut n: usize) {
    while n > 0 {
        let front = queue.front_mut().expect("a write takes no more bytes than were queued");
        if n >= front.len() {
            n -= front.len();
            queue.pop_front();
        } else {
            front.advance(n);
            n = 0;
        }
    }
}

/// Writes `queue` through `send`, up to `IOV` chunks per call, until it is
/// empty (`Ok(true)`) or `send` would block (`Ok(false)`). Interrupted calls
/// are retried; a call that takes nothing is [`io::ErrorKind::WriteZero`].
pub fn write_queue<const IOV: usize>(
    queue: &mut VecDeque<Bytes>,
    mut send: impl FnMut(&[IoSlice<'_>]) -> io::Result<usize>,
) -> io::Result<bool> {
    while !queue.is_empty() {
        let mut iov = [IoSlice::new(&[]); IOV];
        let k = gather(queue, &mut iov);
        match send(&iov[..k]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => consume(queue, n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(parts: &[&'static [u8]]) -> VecDeque<Bytes> {
        parts.iter().map(|p| Bytes::from_static(p)).collect()
    }

    #[test]
    fn consume_drops_whole_chunks_and_advances_into_the_next() {
        let mut q = queue(&[b"abc", b"de", b"fgh"]);
        consume(&mut q, 4);
        assert_eq!(q, queue(&[b"e", b"fgh"]));
        consume(&mut q, 4);
        assert!(q.is_empty());
    }

    #[test]
    fn write_queue_takes_iov_chunks_at_a_time_and_stops_when_blocked() {
        let mut q = queue(&[b"ab", b"cd", b"ef", b"gh"]);
        let (mut out, mut calls) = (Vec::new(), 0);
        let done = write_queue::<2>(&mut q, |iov| {
            calls += 1;
            match calls {
                1 => Err(io::ErrorKind::Interrupted.into()),
                2 | 3 => {
                    assert!(iov.len() <= 2);
                    // Three bytes a call, across chunk boundaries.
                    let all: Vec<u8> = iov.iter().flat_map(|s| s.iter().copied()).take(3).collect();
                    out.extend_from_slice(&all);
                    Ok(all.len())
                }
                _ => Err(io::ErrorKind::WouldBlock.into()),
            }
        })
        .unwrap();
        assert!(!done);
        assert_eq!((&out[..], &q), (&b"abcdef"[..], &queue(&[b"gh"])));
        assert!(write_queue::<2>(&mut q, |iov| Ok(iov.iter().map(|s| s.len()).sum())).unwrap());
        let err = write_queue::<2>(&mut queue(&[b"x"]), |_| Ok(0)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WriteZero);
    }
}
