//! The floor of the one-host window row: the window's 64 x 1 MiB from this
//! process to a child through a ring in shared memory, no MPI. The sender
//! copies each message from its one buffer into the ring (8 slots of 64 KiB:
//! 512 KiB, as p2pmp's ring between two ranks); the receiver copies each slot
//! out into its own buffer of 64 (as the MPI windows receive into 64
//! buffers), then answers the window. Both spin, as two ranks on 2 cores do.
//! The sender's one buffer stays in cache, as p2pmp's does (its Rust window
//! sends one `Bytes`); the C program run for MPICH and Open MPI sends from
//! 64 buffers, so beside those rows this floor is a little optimistic.
//!
//! The ping-pong rows' raw figure moves one 1 MiB buffer that stays in
//! cache; a window's 64 MiB of receive buffers do not fit this machine's
//! caches, so this row says what a transport can reach with that pattern
//! here. The verdicts print it beside the window target (no target of its
//! own).
//!
//! The receive buffers start on a page, as the slots do (see `segment.rs`:
//! with them straight from `malloc`, this row ran at 2,300-2,700 MB/s against
//! 10,000-12,000). The sender's buffer comes from `malloc`, 16 bytes past a
//! page as p2pmp's is: a slot then lies 4,080 bytes past it in a page, which
//! copies fast.

use std::io;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::median;
use crate::segment::{self, PageBuf, Segment, spin_until};

/// A cap on one wait (a hang), and the row's name in the error.
const CAP: (Duration, &str) = (Duration::from_secs(60), "the raw window");

/// Environment variable that makes this binary the receiving process:
/// `fd windows parent` (the segment's inherited fd, and the bench's pid).
pub(crate) const VAR: &str = "MPI_BENCH_RAW_WINDOW";

/// The window's messages, and their bytes (the rank program's window too).
pub(crate) const WINDOW: usize = 64;
pub(crate) const MESSAGE: usize = 1 << 20;
const SLOT: usize = 64 << 10;
const SLOTS: u64 = 8;
const SLOTS_PER_MESSAGE: usize = MESSAGE / SLOT;
/// Offsets of the words: slots filled (the sender's), slots emptied,
/// windows answered and ready (the receiver's), each on a cache line of its
/// own.
const FILLED: usize = 0;
const EMPTIED: usize = 64;
const ANSWERED: usize = 128;
const READY: usize = 192;
/// Offset of the slots (a page of words first), and the segment's length.
const RING: usize = segment::PAGE;
const LEN: usize = RING + SLOTS as usize * SLOT;

fn slot(seg: &Segment, n: u64) -> *mut u8 {
    seg.bytes(RING + (n % SLOTS) as usize * SLOT, SLOT)
}

/// The receiving process (`VAR` set): takes `windows` windows.
pub(crate) fn receiver_main(spec: &str) -> io::Result<()> {
    let bad = || io::Error::new(io::ErrorKind::InvalidInput, format!("{VAR}={spec}"));
    let v: Vec<u64> = spec.split_whitespace().map(str::parse).collect::<Result<_, _>>().map_err(|_| bad())?;
    let &[fd, windows, parent] = &v[..] else { return Err(bad()) };
    // Gone with the bench, never left spinning.
    let mut alive = segment::follow_parent(parent)?;
    let seg = Segment::map(i32::try_from(fd).map_err(|_| bad())?, LEN)?;
    let mut buffers = PageBuf::new(WINDOW * MESSAGE, 1);
    seg.word(READY).store(1, Ordering::Release);
    let mut emptied = 0u64;
    for w in 1..=windows {
        for m in 0..WINDOW {
            for s in 0..SLOTS_PER_MESSAGE {
                spin_until(seg.word(FILLED), emptied + 1, CAP, &mut alive)?;
                let to = &mut buffers[m * MESSAGE + s * SLOT..][..SLOT];
                // SAFETY: the sender filled this slot before raising FILLED
                // past it, and refills it only once EMPTIED passes it.
                unsafe { std::ptr::copy_nonoverlapping(slot(&seg, emptied), to.as_mut_ptr(), SLOT) };
                emptied += 1;
                seg.word(EMPTIED).store(emptied, Ordering::Release);
            }
        }
        seg.word(ANSWERED).store(w, Ordering::Release);
    }
    std::hint::black_box(&buffers);
    Ok(())
}

/// Windows a repetition, here and in the rank program's window.
pub(crate) fn rounds(quick: bool) -> u64 {
    if quick { 2 } else { 10 }
}

/// The median bandwidth in MB/s of 5 repetitions of `rounds` windows.
pub(crate) fn window(rounds: u64) -> io::Result<f64> {
    let fd = segment::memfd(c"raw-window", LEN)?;
    let seg = Segment::map(fd.as_raw_fd(), LEN)?;
    let spec = format!("{} {} {}", fd.as_raw_fd(), 5 * rounds, std::process::id());
    let child = Command::new(std::env::current_exe()?).env(VAR, spec).spawn()?;
    segment::beside_child(child, "the raw window's receiver", |alive| send(&seg, rounds, alive)).map(median)
}

/// The sending side: one figure per repetition, once the receiver is ready.
fn send(seg: &Segment, rounds: u64, alive: &mut dyn FnMut() -> io::Result<()>) -> io::Result<Vec<f64>> {
    let data = vec![7u8; MESSAGE];
    spin_until(seg.word(READY), 1, CAP, alive)?;
    let (mut filled, mut answered, mut samples) = (0u64, 0u64, Vec::new());
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..rounds {
            for _ in 0..WINDOW {
                for s in 0..SLOTS_PER_MESSAGE {
                    spin_until(seg.word(EMPTIED), (filled + 1).saturating_sub(SLOTS), CAP, alive)?;
                    let from = &data[s * SLOT..][..SLOT];
                    // SAFETY: the receiver emptied this slot (EMPTIED passed
                    // it) and reads it only once FILLED passes it.
                    unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), slot(seg, filled), SLOT) };
                    filled += 1;
                    seg.word(FILLED).store(filled, Ordering::Release);
                }
            }
            answered += 1;
            spin_until(seg.word(ANSWERED), answered, CAP, alive)?;
        }
        samples.push((MESSAGE * WINDOW) as f64 * rounds as f64 / (t.elapsed().as_secs_f64() * 1e6));
    }
    Ok(samples)
}
