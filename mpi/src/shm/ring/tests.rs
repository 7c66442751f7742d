use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use proptest::prelude::*;

use super::*;

/// A ring in this process's memory (header and data, 64-aligned).
struct Region {
    ptr: *mut u8,
    layout: Layout,
    cap: usize,
}

impl Region {
    fn new(cap: usize) -> Self {
        let layout = Layout::from_size_align(HEADER + cap, 64).unwrap();
        // SAFETY: a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        Region { ptr, layout, cap }
    }

    /// Both ends, positions starting at `start` (to put wrap-around anywhere).
    fn ends(&self, start: u64) -> (Producer, Consumer) {
        self.set(HEAD, start);
        self.set(TAIL, start);
        // SAFETY: the region outlives both ends in every test; one of each.
        unsafe {
            let data = self.ptr.add(HEADER);
            (Producer::new(self.ptr, data, self.cap).unwrap(), Consumer::new(self.ptr, data, self.cap).unwrap())
        }
    }

    /// What the other process could do: write any index.
    fn set(&self, off: usize, v: u64) {
        // SAFETY: an aligned offset inside the header.
        unsafe { (*self.ptr.add(off).cast::<AtomicU64>()).store(v, Ordering::SeqCst) };
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

fn read_all(c: &mut Consumer) -> Vec<u8> {
    let mut b = BytesMut::new();
    c.read_into(&mut b, usize::MAX).unwrap();
    b.to_vec()
}

#[test]
fn bytes_come_out_in_order_across_the_end_of_the_ring() {
    let r = Region::new(64);
    let (mut p, mut c) = r.ends(u64::from(u32::MAX) * 64 - 5);
    let msg: Vec<u8> = (0..40).collect();
    assert_eq!(p.write(&[&msg[..10], &msg[10..]]).unwrap(), 40);
    assert_eq!(c.available().unwrap(), 40);
    assert_eq!(read_all(&mut c), msg, "wrapped around the end at 5 bytes");
    assert_eq!(p.room().unwrap(), 64);
}

#[test]
fn a_full_ring_takes_what_fits_then_nothing_until_read() {
    let r = Region::new(64);
    let (mut p, mut c) = r.ends(7);
    let big = [9u8; 100];
    assert_eq!(p.write(&[&big[..]]).unwrap(), 64, "only the room is taken");
    assert_eq!(p.write(&[&b"more"[..]]).unwrap(), 0, "full");
    assert_eq!(p.room().unwrap(), 0);
    let mut b = BytesMut::new();
    assert_eq!(c.read_into(&mut b, 10).unwrap(), 10, "at most max");
    assert_eq!(p.room().unwrap(), 10);
    assert_eq!(p.write(&[&b"0123456789abc"[..]]).unwrap(), 10);
    let rest = read_all(&mut c);
    assert_eq!(rest.len(), 64);
    assert_eq!(&rest[54..], b"0123456789");
    assert_eq!(c.read_into(&mut b, 10).unwrap(), 0, "empty");
}

#[test]
fn indexes_a_peer_wrote_wrong_are_corrupt_never_a_panic() {
    let r = Region::new(64);
    let (mut p, mut c) = r.ends(1000);
    p.write(&[&b"abc"[..]]).unwrap();
    r.set(HEAD, 999); // behind the consumer
    assert_eq!(c.available(), Err(Corrupt));
    assert_eq!(c.read_into(&mut BytesMut::new(), 10), Err(Corrupt));
    r.set(HEAD, 1000 + 65); // more than the ring holds
    assert_eq!(c.available(), Err(Corrupt));
    r.set(HEAD, u64::MAX);
    assert_eq!(c.available(), Err(Corrupt));
    r.set(TAIL, 1010); // past what we wrote
    assert_eq!(p.room(), Err(Corrupt));
    // A write within the room last seen (61 bytes) does not look at the
    // consumer's position; one beyond it does.
    assert_eq!(p.write(&[&b"x"[..]]), Ok(1));
    let more = [0u8; 61];
    assert_eq!(p.write(&[&more[..]]), Err(Corrupt));
    r.set(TAIL, 0); // far behind: more unread than the ring holds
    assert_eq!(p.write(&[&more[..]]), Err(Corrupt));
    // A ring found in a bad state is refused up front.
    r.set(HEAD, 5);
    r.set(TAIL, 6);
    // SAFETY: as in `ends`.
    unsafe {
        assert!(Producer::new(r.ptr, r.ptr.add(HEADER), 64).is_err());
        assert!(Consumer::new(r.ptr, r.ptr.add(HEADER), 64).is_err());
    }
}

#[test]
fn a_sleeping_consumer_is_rung_once_per_sleep() {
    let r = Region::new(64);
    let (mut p, mut c) = r.ends(0);
    p.write(&[&b"a"[..]]).unwrap();
    assert!(!p.must_wake(), "an awake consumer needs no doorbell");
    assert!(!c.begin_sleep(), "bytes are there: do not sleep");
    read_all(&mut c);
    assert!(c.begin_sleep());
    p.write(&[&b"b"[..]]).unwrap();
    assert!(p.must_wake(), "asleep: ring");
    p.write(&[&b"c"[..]]).unwrap();
    assert!(!p.must_wake(), "rung already for this sleep");
    c.end_sleep();
    read_all(&mut c);
    assert!(c.begin_sleep());
    p.write(&[&b"d"[..]]).unwrap();
    assert!(p.must_wake(), "a new sleep, a new ring");
}

#[test]
fn the_consumer_learns_the_core_the_producer_runs_on() {
    let r = Region::new(64);
    let (mut p, c) = r.ends(0);
    assert_eq!(c.peer_core(), None, "not said yet");
    p.say_core(Some(0));
    assert_eq!(c.peer_core(), Some(0));
    p.say_core(Some(5));
    assert_eq!(c.peer_core(), Some(5), "moved");
    p.say_core(None);
    assert_eq!(c.peer_core(), None, "asleep: wherever the kernel wakes it");
    p.say_core(Some(5));
    // SAFETY: an aligned offset inside the header.
    let said = unsafe { &*r.ptr.add(CORE).cast::<AtomicU32>() };
    said.store(0, Ordering::SeqCst);
    assert_eq!(c.peer_core(), None, "what the other process wrote: nothing said");
    said.store(u32::MAX, Ordering::SeqCst);
    assert_eq!(c.peer_core(), Some(u32::MAX - 1), "any value is only a hint");
    // The core shares the producer's line with its wait epoch: neither
    // disturbs the other.
    p.write(&[&[0u8; 64][..]]).unwrap();
    assert!(p.begin_wait().unwrap(), "full: wait");
    p.say_core(Some(3));
    assert_eq!(c.peer_core(), Some(3));
    let mut c = c;
    let mut b = BytesMut::new();
    c.read_into(&mut b, 1).unwrap();
    assert!(c.must_wake(), "still waiting for room");
}

#[test]
fn a_producer_waiting_for_room_is_rung_when_some_frees() {
    let r = Region::new(64);
    let (mut p, mut c) = r.ends(0);
    p.write(&[&[0u8; 64][..]]).unwrap();
    assert!(p.begin_wait().unwrap(), "full: wait");
    let mut b = BytesMut::new();
    c.read_into(&mut b, 1).unwrap();
    assert!(c.must_wake(), "room freed for a waiting producer");
    assert!(!c.must_wake(), "once per wait");
    p.end_wait();
    c.read_into(&mut b, 1).unwrap();
    assert!(!c.must_wake(), "not waiting any more");
    assert!(!p.begin_wait().unwrap(), "room is there: do not wait");
}

/// A producer thread writes `total` bytes in writes of parts of the sizes
/// `parts`, from position `start` of a ring of `cap` bytes, while this thread
/// reads at most `read_max` at a time: every byte comes out in order, and
/// the ring ends empty.
fn stream_in_two_threads(cap: usize, start: u64, total: usize, parts: &[usize], read_max: usize) {
    let r = Region::new(cap);
    let (mut p, mut c) = r.ends(start);
    let byte = |i: usize| (i * 7 + i / 251) as u8;
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut i = 0;
            while i < total {
                let mut at = i;
                let chunks: Vec<Vec<u8>> = parts
                    .iter()
                    .map(|&len| {
                        let chunk: Vec<u8> = (at..(at + len).min(total)).map(byte).collect();
                        at += chunk.len();
                        chunk
                    })
                    .collect();
                let slices: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
                let n = p.write(&slices).unwrap();
                i += n;
                if n == 0 {
                    std::hint::spin_loop();
                }
            }
        });
        let mut got = 0;
        let mut b = BytesMut::new();
        while got < total {
            b.clear();
            let n = c.read_into(&mut b, read_max).unwrap();
            for (k, &v) in b.iter().enumerate() {
                assert_eq!(v, byte(got + k), "byte {}", got + k);
            }
            got += n;
        }
        assert_eq!(c.available().unwrap(), 0);
    });
}

#[test]
fn two_threads_stream_every_byte_in_order() {
    stream_in_two_threads(256, 123, 200_000, &[97], 61);
}

/// Two threads write and read many times the size of a publication step
/// ([`STEP`]), wrapping round the ring: every byte comes out in order.
#[test]
fn large_writes_and_reads_stream_every_byte_in_order() {
    stream_in_two_threads(
        4 * STEP,
        u64::from(u32::MAX) - 5,
        40 * STEP + 12_345,
        &[3 * STEP + 17, STEP / 3],
        2 * STEP + 101,
    );
}

/// A write of several parts, or a read of at most so many bytes.
type Op = Result<Vec<Vec<u8>>, usize>;

/// Runs `ops` on a ring of `cap` bytes from position `start` beside a model
/// queue: the bytes read are the bytes written, in order, and, looked at
/// after every `look_every` ops (a look reads the consumer's position, so
/// the writes in between go by the room last seen), the room plus what is
/// pending is the capacity.
fn fifo_holds(cap: usize, start: u64, ops: Vec<Op>, look_every: usize) -> Result<(), TestCaseError> {
    let r = Region::new(cap);
    let (mut p, mut c) = r.ends(start);
    let mut model: VecDeque<u8> = VecDeque::new();
    for (i, op) in ops.into_iter().enumerate() {
        match op {
            Ok(parts) => {
                let slices: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
                let room = cap - model.len();
                let n = p.write(&slices).unwrap();
                prop_assert_eq!(n, parts.iter().map(Vec::len).sum::<usize>().min(room));
                model.extend(parts.concat().into_iter().take(n));
            }
            Err(max) => {
                let mut b = BytesMut::new();
                let n = c.read_into(&mut b, max).unwrap();
                let want: Vec<u8> = model.drain(..max.min(model.len())).collect();
                prop_assert_eq!(n, want.len());
                prop_assert_eq!(&b[..], &want[..]);
            }
        }
        if (i + 1) % look_every == 0 {
            prop_assert_eq!(p.room().unwrap() + p.pending().unwrap(), cap);
        }
        prop_assert_eq!(c.available().unwrap(), model.len());
    }
    Ok(())
}

/// A part of `len` bytes counting up from `first` (large parts without
/// generating every byte).
fn part((len, first): (usize, u8)) -> Vec<u8> {
    (0..len).map(|i| first.wrapping_add(i as u8)).collect()
}

proptest! {
    /// Any interleaving of writes (of several parts) and bounded reads, from any
    /// start position, keeps the ring a queue of bytes, whether the producer
    /// saw the consumer's position a moment ago or several reads back.
    #[test]
    fn the_ring_is_a_fifo_of_bytes(
        start in any::<u64>().prop_map(|s| s / 2),
        ops in prop::collection::vec(prop_oneof![
            prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..4).prop_map(Ok),
            (0..90usize).prop_map(Err),
        ], 1..100),
        look_every in 1..10usize,
    ) {
        fifo_holds(64, start, ops, look_every)?;
    }

    /// The same with parts and reads of up to a few publication steps
    /// ([`STEP`]) in a ring of two: room runs out inside a step and inside
    /// a part, and reads stop inside a step.
    #[test]
    fn the_ring_is_a_fifo_of_bytes_across_publication_steps(
        start in any::<u64>().prop_map(|s| s / 2),
        ops in prop::collection::vec(prop_oneof![
            prop::collection::vec((0..3 * STEP, any::<u8>()), 1..3)
                .prop_map(|ps| Ok(ps.into_iter().map(part).collect())),
            (0..3 * STEP).prop_map(Err),
        ], 1..24),
        look_every in 1..6usize,
    ) {
        fifo_holds(2 * STEP, start, ops, look_every)?;
    }
}

/// Longest a side of [`sleeping_ping_pong`] waits for its doorbell: only a
/// lost wake-up (or a machine stalled for that long) reaches it. A liveness
/// bound, not a speed one.
const LOST: i32 = 10_000;

/// Blocks until `bell` rings (at most [`LOST`] ms); false if it never did.
fn sleep_on(bell: RawFd) -> bool {
    let mut p = libc::pollfd { fd: bell, events: libc::POLLIN, revents: 0 };
    loop {
        // SAFETY: poll(2) on one pollfd that lives across the call.
        match unsafe { libc::poll(&raw mut p, 1, LOST) } {
            1 => {
                crate::shm::segment::drain_bell(bell);
                return true;
            }
            0 => return false,
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => panic!("poll: {}", std::io::Error::last_os_error()),
        }
    }
}

/// One side of a ping-pong over two rings in which every wait sleeps as the
/// transport's does: look, (sometimes) spin a little, `begin_sleep`, block on
/// our doorbell, `end_sleep`, look again; and every write rings the peer's
/// doorbell when `must_wake` says it sleeps. `first` sends first. Panics on a
/// lost wake-up instead of hanging.
fn sleeping_ping_pong(out: &mut Producer, inb: &mut Consumer, bells: (&OwnedFdPair, bool), rounds: u32) {
    let (pair, first) = bells;
    let (mine, peer) =
        if first { (pair.0.as_raw_fd(), pair.1.as_raw_fd()) } else { (pair.1.as_raw_fd(), pair.0.as_raw_fd()) };
    let mut b = BytesMut::new();
    let mut x = 0x2545_f491u32;
    for i in 0..rounds {
        let send = |out: &mut Producer| {
            assert_eq!(out.write(&[&i.to_le_bytes()[..]]).unwrap(), 4);
            if out.must_wake() {
                crate::shm::segment::ring_bell(peer);
            }
        };
        if first {
            send(out);
        }
        loop {
            b.clear();
            if inb.read_into(&mut b, 4).unwrap() == 4 {
                assert_eq!(u32::from_le_bytes(b[..4].try_into().unwrap()), i);
                break;
            }
            // A few spins or none, so the peer's write lands anywhere in
            // our way to sleep.
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            for _ in 0..x % 64 {
                std::hint::spin_loop();
            }
            if inb.begin_sleep() {
                // Not rung within LOST: the peer wrote without ringing (or
                // sleeps itself, waiting for what we never got).
                assert!(sleep_on(mine), "round {i}: a lost wake-up");
                inb.end_sleep();
            }
        }
        if !first {
            send(out);
        }
    }
}

type OwnedFdPair = (OwnedFd, OwnedFd);

/// Many short ping-pongs between two threads that both sleep on doorbells at
/// every wait: the sleep/wake race (a write landing between a consumer's last
/// look and its sleep) is hit thousands of times, and a producer that skipped
/// the doorbell wrongly leaves a side asleep for good.
#[test]
fn sleeping_ping_pongs_never_lose_a_wake_up() {
    let (a, b) = (Region::new(64), Region::new(64));
    let (mut a_out, mut a_in) = a.ends(0);
    let (mut b_out, mut b_in) = b.ends(0);
    let bells: OwnedFdPair = (crate::shm::segment::doorbell().unwrap(), crate::shm::segment::doorbell().unwrap());
    let rounds = 20_000;
    std::thread::scope(|s| {
        let bells = &bells;
        // Thread one sends on ring a and reads ring b; thread two the other way.
        s.spawn(move || sleeping_ping_pong(&mut a_out, &mut b_in, (bells, true), rounds));
        s.spawn(move || sleeping_ping_pong(&mut b_out, &mut a_in, (bells, false), rounds));
    });
}
