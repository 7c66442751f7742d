//! A single-producer single-consumer byte ring in memory shared with another
//! process: the bytes of one direction of a shared-memory link, used as a
//! stream (the frame codec runs over it as over a TCP socket).
//!
//! The ring's header is four cache lines: `head` (the bytes written so far)
//! and `wepoch` (its wait epoch, with the core it runs on beside it) are the
//! producer's, `tail` (the bytes consumed so far) and `repoch` (its sleep
//! epoch) the consumer's; each on a line of its own.
//! Each side writes only its own fields and keeps its own index privately: the
//! other process may write anything into the shared header, so every index
//! read from it is checked (`tail <= head <= tail + capacity`) and a bad one is
//! [`Corrupt`], never a panic or an access outside the ring. Positions grow
//! without bound; a position's byte is at `pos & (capacity - 1)`.
//!
//! A small message moves the line of `head` and those of its bytes from one
//! core to the other, and no other line. The producer reads `tail` only when
//! the room it last saw does not take what it writes (and before it sleeps
//! waiting for room), so the line of `tail` stays with the consumer, whose
//! store to it then waits for no other core. The epochs, on lines of their
//! own, change only around a sleep, so the look at the other side's epoch
//! after each transfer finds its line at hand.
//!
//! Wake-ups: a consumer about to sleep makes its epoch odd, then looks once
//! more; a producer that published bytes looks at the epoch and rings the
//! consumer's doorbell once per odd epoch. The same, the other way round, for
//! a producer waiting for room ([`Producer::begin_wait`]). Both sides order
//! their store and their load with a full fence, so at least one of them sees
//! the other (no lost wake-up).
//!
//! The producer's epoch line also says which core it runs on, if it knows
//! ([`Producer::say_core`]), for a consumer that polls to tell whether the
//! peer it waits for needs its core ([`Consumer::peer_core`]). The producer
//! says it as it waits, and says none as it goes to sleep (where it wakes is
//! the kernel's choice): it changes around a sleep and when the producer
//! moves, not with every message.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

use bytes::BytesMut;

/// Bytes copied between two publications of a position: a large write or
/// read publishes as it goes, so the other side copies the first part while
/// this side copies the next (a 1 MiB message through a 512 KiB ring went in
/// two halves, each side idle while the other copied one).
const STEP: usize = 32 << 10;

/// Room a read asks of a buffer that lacks it, at least: a buffer consumed a
/// frame at a time (advanced past each) calls `reserve` (which widens it or
/// moves it back to its start) once in this many bytes, not at every small
/// message.
const MIN_ROOM: usize = 4 << 10;

/// Bytes of ring header: four cache lines.
pub(crate) const HEADER: usize = 256;
const HEAD: usize = 0;
const TAIL: usize = 64;
const WEPOCH: usize = 128;
/// The producer's core plus one (0: not said), on the producer's line.
const CORE: usize = WEPOCH + 8;
const _: () = assert!(CORE >= WEPOCH + 4 && CORE + 4 <= REPOCH && CORE % 4 == 0);
const REPOCH: usize = 192;

/// The other process broke the ring's invariants (or its memory is not a ring).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Corrupt;

impl std::fmt::Display for Corrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the shared-memory ring is corrupt")
    }
}

/// Where one ring lives: its header and its data, `cap` bytes (a power of two).
#[derive(Debug, Clone, Copy)]
struct Mem {
    header: *mut u8,
    data: *mut u8,
    cap: usize,
}

// SAFETY: a `Mem` is a pair of pointers into a mapping that outlives every
// `Producer` and `Consumer` made from it (their owner keeps the mapping); the
// fields at those pointers are only touched through atomics or, for data
// bytes, only in the range the ring's protocol gives the side that touches them.
unsafe impl Send for Mem {}

impl Mem {
    fn atomic64(&self, off: usize) -> &AtomicU64 {
        // SAFETY: `off` is one of the 8-aligned offsets above, inside the
        // HEADER bytes at `header` (64-aligned), which stay mapped while `self` lives.
        unsafe { &*self.header.add(off).cast::<AtomicU64>() }
    }

    /// The bytes between positions `tail` and `head` (one of them read from
    /// the shared header), if `tail <= head <= tail + cap`.
    fn unread(&self, head: u64, tail: u64) -> Result<u64, Corrupt> {
        head.checked_sub(tail).filter(|&n| n <= self.cap as u64).ok_or(Corrupt)
    }

    fn atomic32(&self, off: usize) -> &AtomicU32 {
        // SAFETY: as in `atomic64`, for a 4-aligned offset.
        unsafe { &*self.header.add(off).cast::<AtomicU32>() }
    }

    /// Copies `src` into the ring at position `pos` (wrapping at the end).
    ///
    /// # Safety
    /// The caller owns bytes `pos..pos + src.len()` of the ring (the producer's
    /// free room), and `src.len() <= cap`.
    unsafe fn put(&self, pos: u64, src: &[u8]) {
        let at = (pos as usize) & (self.cap - 1);
        let first = src.len().min(self.cap - at);
        // SAFETY: `at + first <= cap` and the rest starts at 0 with length
        // `src.len() - first <= cap`; the caller owns those bytes; `src` is ours.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.data.add(at), first);
            // Most copies do not wrap: no second call (a small message's
            // copies are a good part of its cost).
            if first < src.len() {
                std::ptr::copy_nonoverlapping(src.as_ptr().add(first), self.data, src.len() - first);
            }
        }
    }

    /// Copies ring bytes from position `pos` into `dst` (wrapping at the end).
    ///
    /// # Safety
    /// Bytes `pos..pos + dst.len()` were published to the caller (the
    /// consumer's readable range), and `dst.len() <= cap`.
    unsafe fn get(&self, pos: u64, dst: &mut [std::mem::MaybeUninit<u8>]) {
        let at = (pos as usize) & (self.cap - 1);
        let first = dst.len().min(self.cap - at);
        // SAFETY: as in `put`, in the other direction; `dst` is ours.
        unsafe {
            std::ptr::copy_nonoverlapping(self.data.add(at), dst.as_mut_ptr().cast(), first);
            if first < dst.len() {
                std::ptr::copy_nonoverlapping(self.data, dst.as_mut_ptr().add(first).cast(), dst.len() - first);
            }
        }
    }
}

/// Makes an empty ring's header (all indexes and epochs zero).
///
/// # Safety
/// `header` points at [`HEADER`] writable bytes, 64-aligned, nobody else uses yet.
pub(crate) unsafe fn init(header: *mut u8) {
    // SAFETY: the caller's promise.
    unsafe { std::ptr::write_bytes(header, 0, HEADER) };
}

/// The writing side of a ring.
#[derive(Debug)]
pub(crate) struct Producer {
    mem: Mem,
    /// Bytes written so far (ours; the shared copy is only published).
    head: u64,
    /// The consumer's position as last read (checked), at most its own.
    tail: u64,
    /// The consumer's sleep epoch we last rang the doorbell for.
    rung: u32,
    /// Our own wait epoch (odd while waiting for room).
    wepoch: u32,
    /// The core last said, plus one (0: none yet).
    core: u32,
}

/// The reading side of a ring.
#[derive(Debug)]
pub(crate) struct Consumer {
    mem: Mem,
    /// Bytes consumed so far (ours).
    tail: u64,
    /// The producer's wait epoch we last rang its doorbell for.
    rung: u32,
    /// Our own sleep epoch (odd while asleep or about to be).
    repoch: u32,
}

/// A ring's memory and its current (head, tail), checked: the geometry (a
/// power-of-two capacity of at least 64 bytes) and `tail <= head <= tail + cap`.
fn open(header: *mut u8, data: *mut u8, cap: usize) -> Result<(Mem, u64, u64), Corrupt> {
    assert!(cap.is_power_of_two() && cap >= 64, "ring capacity {cap} must be a power of two >= 64");
    let mem = Mem { header, data, cap };
    let head = mem.atomic64(HEAD).load(Ordering::Acquire);
    let tail = mem.atomic64(TAIL).load(Ordering::Acquire);
    mem.unread(head, tail)?;
    Ok((mem, head, tail))
}

/// Whether the other side's epoch at `off` says it waits and was not rung for
/// yet (then it is rung for now: `rung` remembers the epoch).
fn due(mem: &Mem, off: usize, rung: &mut u32) -> bool {
    fence(Ordering::SeqCst);
    let e = mem.atomic32(off).load(Ordering::Relaxed);
    if e & 1 == 1 && e != *rung {
        *rung = e;
        return true;
    }
    false
}

impl Producer {
    /// The producer of the ring at `header` with `cap` data bytes at `data`,
    /// taking over the positions the header holds now.
    ///
    /// # Safety
    /// `header` ([`HEADER`] bytes, 64-aligned) and `data` (`cap` bytes) stay
    /// mapped while the producer lives, and no one else in this process
    /// produces into this ring. `cap` is a power of two of at least 64.
    pub(crate) unsafe fn new(header: *mut u8, data: *mut u8, cap: usize) -> Result<Self, Corrupt> {
        let (mem, head, tail) = open(header, data, cap)?;
        let wepoch = mem.atomic32(WEPOCH).load(Ordering::Relaxed) & !1;
        Ok(Producer { mem, head, tail, rung: 0, wepoch, core: 0 })
    }

    /// Reads the consumer's position, checked against ours.
    fn load_tail(&mut self) -> Result<(), Corrupt> {
        let tail = self.mem.atomic64(TAIL).load(Ordering::Acquire);
        self.mem.unread(self.head, tail)?;
        self.tail = tail;
        Ok(())
    }

    /// Room for more bytes by the consumer's position as last read (there may
    /// be more).
    fn known_room(&self) -> usize {
        self.mem.cap - (self.head - self.tail) as usize
    }

    /// Room for more bytes now.
    pub(crate) fn room(&mut self) -> Result<usize, Corrupt> {
        self.load_tail()?;
        Ok(self.known_room())
    }

    /// Bytes written and not yet consumed.
    #[cfg(test)]
    pub(crate) fn pending(&mut self) -> Result<usize, Corrupt> {
        self.load_tail()?;
        Ok((self.head - self.tail) as usize)
    }

    /// Copies as much of `bufs`, in order, as there is room for and publishes
    /// it: the number of bytes taken (0 when full). Reads the consumer's
    /// position only when the room last seen does not take all of `bufs`.
    pub(crate) fn write<B: std::ops::Deref<Target = [u8]>>(&mut self, bufs: &[B]) -> Result<usize, Corrupt> {
        let want: usize = bufs.iter().map(|b| b.len()).sum();
        let mut room = self.known_room();
        if room < want {
            room = self.room()?;
        }
        let (mut put, mut unpublished) = (0, 0);
        for b in bufs {
            let mut b = &**b;
            while room > 0 && !b.is_empty() {
                let n = b.len().min(room).min(STEP - unpublished);
                // SAFETY: `n <= room`: bytes head..head + n are free (the
                // consumer is past them), so they are ours until we publish them.
                unsafe { self.mem.put(self.head, &b[..n]) };
                self.head += n as u64;
                (b, put, room, unpublished) = (&b[n..], put + n, room - n, unpublished + n);
                if unpublished == STEP {
                    self.mem.atomic64(HEAD).store(self.head, Ordering::Release);
                    unpublished = 0;
                }
            }
        }
        if unpublished > 0 {
            self.mem.atomic64(HEAD).store(self.head, Ordering::Release);
        }
        Ok(put)
    }

    /// After publishing: whether the consumer is asleep and not yet rung for
    /// (then ring its doorbell; asked once per sleep).
    pub(crate) fn must_wake(&mut self) -> bool {
        due(&self.mem, REPOCH, &mut self.rung)
    }

    /// About to sleep waiting for room: tells the consumer to ring us once it
    /// frees some. False when room appeared meanwhile (then do not sleep).
    pub(crate) fn begin_wait(&mut self) -> Result<bool, Corrupt> {
        self.wepoch = self.wepoch.wrapping_add(1) | 1;
        self.mem.atomic32(WEPOCH).store(self.wepoch, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.room()? > 0 {
            self.end_wait();
            return Ok(false);
        }
        Ok(true)
    }

    /// Tells the consumer that this side runs on `core` now, or on no core
    /// it knows (a store only when that changed).
    pub(crate) fn say_core(&mut self, core: Option<u32>) {
        let said = core.map_or(0, |c| c.wrapping_add(1));
        if said != self.core {
            self.core = said;
            self.mem.atomic32(CORE).store(said, Ordering::Relaxed);
        }
    }

    /// Awake again (or never slept).
    pub(crate) fn end_wait(&mut self) {
        if self.wepoch & 1 == 1 {
            self.wepoch = self.wepoch.wrapping_add(1);
            self.mem.atomic32(WEPOCH).store(self.wepoch, Ordering::Relaxed);
        }
    }
}

impl Consumer {
    /// The consumer of the ring at `header`, taking over the position the
    /// header holds now.
    ///
    /// # Safety
    /// As for [`Producer::new`], with "consumes" for "produces".
    pub(crate) unsafe fn new(header: *mut u8, data: *mut u8, cap: usize) -> Result<Self, Corrupt> {
        let (mem, _, tail) = open(header, data, cap)?;
        Ok(Consumer { mem, tail, rung: 0, repoch: mem.atomic32(REPOCH).load(Ordering::Relaxed) & !1 })
    }

    /// Bytes published and not yet consumed, checked.
    pub(crate) fn available(&self) -> Result<usize, Corrupt> {
        let head = self.mem.atomic64(HEAD).load(Ordering::Acquire);
        Ok(self.mem.unread(head, self.tail)? as usize)
    }

    /// The core the producer last said it runs on, if it said one. Only a
    /// hint: any value may come from the other process.
    pub(crate) fn peer_core(&self) -> Option<u32> {
        self.mem.atomic32(CORE).load(Ordering::Relaxed).checked_sub(1)
    }

    /// Whether bytes may be waiting: one load, no check (then call
    /// [`Consumer::read_into`], which checks).
    pub(crate) fn has_data(&self) -> bool {
        self.mem.atomic64(HEAD).load(Ordering::Relaxed) != self.tail
    }

    /// Copies what is there, at most `max` bytes, to the end of `buf` and frees
    /// it: the number of bytes (0 when empty).
    pub(crate) fn read_into(&mut self, buf: &mut BytesMut, max: usize) -> Result<usize, Corrupt> {
        let n = self.available()?.min(max);
        if n == 0 {
            return Ok(0);
        }
        if buf.capacity() - buf.len() < n {
            buf.reserve(n.max(MIN_ROOM));
        }
        let mut done = 0;
        while done < n {
            let k = (n - done).min(STEP);
            let spare = &mut buf.spare_capacity_mut()[..k];
            // SAFETY: bytes tail..tail + k were published to us (checked
            // above, `done + k <= n`) and `k <= cap`; `spare` has room for them.
            unsafe { self.mem.get(self.tail, spare) };
            // SAFETY: the copy initialised the first `k` spare bytes.
            unsafe { buf.set_len(buf.len() + k) };
            self.tail += k as u64;
            self.mem.atomic64(TAIL).store(self.tail, Ordering::Release);
            done += k;
        }
        Ok(n)
    }

    /// After consuming: whether the producer waits for room and was not yet
    /// rung for (then ring its doorbell).
    pub(crate) fn must_wake(&mut self) -> bool {
        due(&self.mem, WEPOCH, &mut self.rung)
    }

    /// About to sleep: tells the producer to ring us at its next bytes. False
    /// when bytes arrived meanwhile (then do not sleep).
    pub(crate) fn begin_sleep(&mut self) -> bool {
        self.repoch = self.repoch.wrapping_add(1) | 1;
        self.mem.atomic32(REPOCH).store(self.repoch, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.has_data() {
            self.end_sleep();
            return false;
        }
        true
    }

    /// Awake again (or never slept).
    pub(crate) fn end_sleep(&mut self) {
        if self.repoch & 1 == 1 {
            self.repoch = self.repoch.wrapping_add(1);
            self.mem.atomic32(REPOCH).store(self.repoch, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests;
