//! The raw reference of the two-host window rows: the window's 64 x 1 MiB (answered
//! by one byte, [`window_floor::rounds`] windows a repetition) between a
//! process on each of two hosts over one TCP connection, no MPI; plain, and
//! sealed with p2pmp's cipher in p2pmp's records (AES-256-GCM by ring; a
//! 2-byte length, up to `MAX_PLAIN_RECORD` bytes, the tag), as p2pmp's ranks
//! on two hosts send by default. Blocking, or busy-polling a non-blocking
//! socket.
//!
//! The sender sends one buffer again and again; sealed, each record is
//! copied out, sealed in place and written with its length and tag (as
//! p2pmp's connections seal). The receiver reads straight into 64 buffers
//! (touched before the first window), and opens each record in place there.
//! It does less than p2pmp's receiver, on purpose: no copy but the kernel's
//! (p2pmp opens records in its read buffer and copies them out into the
//! message), records that never straddle messages, no fresh buffer per
//! message, no MPI. It also writes and reads a record at a time, where
//! p2pmp's connections write many in one `sendmsg` and read 128 KiB. On
//! loopback it moved 1,940-2,060 MB/s sealed against 2,300-3,300 plain;
//! between the namespace hosts, 980-2,400 sealed from one run to the next,
//! sometimes under p2pmp's own encrypted window: a reference measured in
//! the same run, not a floor. The verdicts print it beside the two-host
//! window target (no target of its own).

use std::io::{self, IoSliceMut, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Instant;

use p2pmp_core::secure::MAX_PLAIN_RECORD;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, Tag, UnboundKey};

use crate::median;
use crate::raw::{connect, read_full, write_full};
use crate::segment::PageBuf;
use crate::window_floor::{MESSAGE, WINDOW};

/// Environment variable that makes this binary the receiving side:
/// `bind-addr windows block|spin plain|aead`.
pub(crate) const RECV_VAR: &str = "MPI_BENCH_TCP_WINDOW_RECV";
/// Environment variable that makes this binary the sending (timing) side:
/// `addr windows-a-repetition block|spin plain|aead`; it prints
/// `rawwin <median MB/s of 5 repetitions>`.
pub(crate) const SEND_VAR: &str = "MPI_BENCH_TCP_WINDOW_SEND";

/// Bytes of a record's length, and of its tag.
const LEN: usize = 2;
const TAG: usize = 16;
/// Repetitions the sender times (the receiver takes as many times its windows).
pub(crate) const REPS: u64 = 5;

/// The arguments of [`RECV_VAR`] and [`SEND_VAR`].
pub(crate) fn spec(addr: SocketAddr, windows: u64, spin: bool, aead: bool) -> String {
    format!("{addr} {windows} {} {}", if spin { "spin" } else { "block" }, if aead { "aead" } else { "plain" })
}

/// One run, as its variable says.
struct Spec {
    addr: SocketAddr,
    windows: u64,
    spin: bool,
    aead: bool,
}

impl Spec {
    fn parse(var: &str, spec: &str) -> io::Result<Spec> {
        let bad = || io::Error::new(io::ErrorKind::InvalidInput, format!("{var}={spec}"));
        let v: Vec<&str> = spec.split_whitespace().collect();
        let &[addr, windows, how, sealed] = &v[..] else { return Err(bad()) };
        let addr = addr.parse().map_err(|_| bad())?;
        let windows = windows.parse().map_err(|_| bad())?;
        let spin = [("block", false), ("spin", true)].into_iter().find(|m| m.0 == how).ok_or_else(bad)?.1;
        let aead = [("plain", false), ("aead", true)].into_iter().find(|m| m.0 == sealed).ok_or_else(bad)?.1;
        Ok(Spec { addr, windows, spin, aead })
    }
}

/// One end's cipher: one key for both directions, each with nonces of its
/// own (the first byte says whose: the sender's 1, the receiver's 0).
struct Cipher {
    key: LessSafeKey,
    /// This end's byte, and the records it sealed and opened so far.
    mine: u8,
    sealed: u64,
    opened: u64,
}

impl Cipher {
    fn new(sender: bool) -> Cipher {
        // A 32-byte key is what AES-256 takes.
        let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &[7; 32]).expect("a 32-byte key"));
        Cipher { key, mine: u8::from(sender), sealed: 0, opened: 0 }
    }

    fn nonce(whose: u8, n: u64) -> Nonce {
        let mut b = [0u8; 12];
        b[0] = whose;
        b[4..].copy_from_slice(&n.to_be_bytes());
        Nonce::assume_unique_for_key(b)
    }

    fn next_seal(&mut self) -> Nonce {
        self.sealed += 1;
        Cipher::nonce(self.mine, self.sealed - 1)
    }

    fn next_open(&mut self) -> Nonce {
        self.opened += 1;
        Cipher::nonce(1 - self.mine, self.opened - 1)
    }
}

/// One connection's end, plain or sealed.
struct End {
    s: TcpStream,
    cipher: Option<Cipher>,
    /// A record being sealed.
    out: Vec<u8>,
}

impl End {
    fn new(s: TcpStream, spec: &Spec, sender: bool) -> io::Result<End> {
        s.set_nodelay(true)?;
        s.set_nonblocking(spec.spin)?;
        let cipher = spec.aead.then(|| Cipher::new(sender));
        Ok(End { s, cipher, out: Vec::with_capacity(LEN + MAX_PLAIN_RECORD + TAG) })
    }

    /// Sends `data`, record by record when sealed.
    fn send(&mut self, data: &[u8]) -> io::Result<()> {
        let Some(c) = &mut self.cipher else { return write_full(&mut self.s, data) };
        for record in data.chunks(MAX_PLAIN_RECORD) {
            self.out.clear();
            // A record holds at most MAX_PLAIN_RECORD + TAG = 65,535 bytes.
            self.out.extend_from_slice(&((record.len() + TAG) as u16).to_be_bytes());
            self.out.extend_from_slice(record);
            let n = c.next_seal();
            let tag = c
                .key
                .seal_in_place_separate_tag(n, Aad::empty(), &mut self.out[LEN..])
                .map_err(|_| io::Error::other("sealing failed"))?;
            self.out.extend_from_slice(tag.as_ref());
            write_full(&mut self.s, &self.out)?;
        }
        Ok(())
    }

    /// Receives `to.len()` bytes into `to`, opening each record in place
    /// when sealed (records as [`End::send`] cuts them: both sides know the
    /// message's length).
    fn recv(&mut self, to: &mut [u8]) -> io::Result<()> {
        let Some(c) = &mut self.cipher else { return read_full(&mut self.s, to) };
        for record in to.chunks_mut(MAX_PLAIN_RECORD) {
            let (mut len, mut tag) = ([0u8; LEN], [0u8; TAG]);
            read_parts(&mut self.s, [&mut len, record, &mut tag])?;
            if usize::from(u16::from_be_bytes(len)) != record.len() + TAG {
                return Err(io::Error::other("a record of another length"));
            }
            let n = c.next_open();
            c.key
                .open_in_place_separate_tag(n, Aad::empty(), Tag::from(tag), record, 0..)
                .map_err(|_| io::Error::other("a record that does not open"))?;
        }
        Ok(())
    }
}

/// Reads `parts` whole, one after the other, with as few reads as the
/// socket allows.
fn read_parts(s: &mut TcpStream, mut parts: [&mut [u8]; 3]) -> io::Result<()> {
    let mut at = 0;
    while at < parts.len() {
        let got = s.read_vectored(&mut parts[at..].iter_mut().map(|p| IoSliceMut::new(p)).collect::<Vec<_>>());
        let mut n = match got {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::hint::spin_loop();
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        while at < parts.len() && n >= parts[at].len() {
            n -= parts[at].len();
            at += 1;
        }
        if at < parts.len() {
            let p = std::mem::take(&mut parts[at]);
            parts[at] = &mut p[n..];
        }
    }
    Ok(())
}

/// The receiving process's main, from the [`RECV_VAR`] arguments: accepts
/// one connection and takes `windows` windows.
pub(crate) fn receiver_main(spec: &str) -> io::Result<()> {
    let spec = Spec::parse(RECV_VAR, spec)?;
    let l = TcpListener::bind(spec.addr)?;
    let (s, _) = l.accept()?;
    let mut end = End::new(s, &spec, false)?;
    let mut buffers: Vec<PageBuf> = (0..WINDOW).map(|_| PageBuf::new(MESSAGE, 1)).collect();
    for _ in 0..spec.windows {
        for b in &mut buffers {
            end.recv(b)?;
        }
        end.send(&[1])?;
    }
    Ok(())
}

/// The sending process's main, from the [`SEND_VAR`] arguments: connects
/// (see `raw::connect`) and times [`REPS`] repetitions of `windows` windows.
pub(crate) fn sender_main(spec: &str) -> io::Result<()> {
    let spec = Spec::parse(SEND_VAR, spec)?;
    let s = connect(spec.addr, spec.spin)?;
    let mut end = End::new(s, &spec, true)?;
    let data = vec![7u8; MESSAGE];
    let mut answer = [0u8; 1];
    let mut samples = Vec::new();
    for _ in 0..REPS {
        let t = Instant::now();
        for _ in 0..spec.windows {
            for _ in 0..WINDOW {
                end.send(&data)?;
            }
            end.recv(&mut answer)?;
        }
        samples.push((MESSAGE * WINDOW) as f64 * spec.windows as f64 / (t.elapsed().as_secs_f64() * 1e6));
    }
    println!("rawwin {}", median(samples));
    Ok(())
}
