//! A packet sniffer for the tests that check what goes over the wire: a raw
//! `AF_PACKET` socket on one interface, read on a thread, looking for one
//! byte string in every packet seen (both directions). Needs `CAP_NET_RAW`;
//! [`Sniffer::start`] says why when it cannot have it. The capture may run
//! inside a network namespace (a test cluster's switch).

use std::ffi::CString;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// A running capture; [`Sniffer::stop`] says whether the needle was seen.
#[derive(Debug)]
pub struct Sniffer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<Seen, String>>>,
}

/// What a capture saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Packets read.
    pub packets: u64,
    /// Packets containing the needle.
    pub matches: u64,
}

impl Sniffer {
    /// Captures on interface `ifname`, counting packets that contain `needle`;
    /// `Err` with the reason when no raw socket can be had (not root).
    pub fn start(ifname: &str, needle: Vec<u8>) -> Result<Sniffer, String> {
        Self::start_in(None, ifname, needle)
    }

    /// As [`Sniffer::start`], on an interface of the network namespace at
    /// `netns` (a `/proc/PID/ns/net` path): the capturing thread enters it.
    pub fn start_in(netns: Option<String>, ifname: &str, needle: Vec<u8>) -> Result<Sniffer, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let ifname = ifname.to_owned();
        let (ready, opened) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let fd = match netns.map_or(Ok(()), |ns| enter(&ns)).and_then(|()| raw_socket(&ifname)) {
                Ok(fd) => fd,
                Err(why) => {
                    let _ = ready.send(Err(why.clone()));
                    return Err(why);
                }
            };
            let _ = ready.send(Ok(()));
            capture(fd, &needle, &flag)
        });
        opened.recv().map_err(|_| "the sniffer thread died".to_string())??;
        Ok(Sniffer { stop, thread: Some(thread) })
    }

    /// Stops the capture and returns what it saw.
    pub fn stop(mut self) -> Result<Seen, String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().expect("joined once").join().map_err(|_| "the sniffer thread panicked".to_string())?
    }
}

impl Drop for Sniffer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Moves the calling thread into the network namespace at `path`.
fn enter(path: &str) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let ns = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
    // SAFETY: setns(2) on an open namespace file; it affects this thread only.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(format!("cannot enter {path}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

fn raw_socket(ifname: &str) -> Result<std::os::fd::OwnedFd, String> {
    use std::os::fd::FromRawFd;
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket(2) call; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto)) };
    if fd < 0 {
        return Err(format!("no raw packet socket: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: fd is a fresh descriptor we own.
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    let name = CString::new(ifname).map_err(|e| e.to_string())?;
    // SAFETY: `name` is a valid C string.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        return Err(format!("no interface {ifname}"));
    }
    // SAFETY: an all-zero sockaddr_ll is valid; the fields set make it a bind address.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = index as i32;
    let tv = libc::timeval { tv_sec: 0, tv_usec: 100_000 };
    // SAFETY: the pointers and lengths describe the local structs above.
    let ok = unsafe {
        libc::bind(fd, (&raw const sll).cast(), std::mem::size_of::<libc::sockaddr_ll>() as u32) == 0
            && libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const tv).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            ) == 0
    };
    if !ok {
        return Err(format!("cannot capture on {ifname}: {}", std::io::Error::last_os_error()));
    }
    Ok(owned)
}

fn capture(fd: std::os::fd::OwnedFd, needle: &[u8], stop: &AtomicBool) -> Result<Seen, String> {
    use std::os::fd::AsRawFd;
    let mut buf = vec![0u8; 1 << 17];
    let mut seen = Seen { packets: 0, matches: 0 };
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: recv(2) writes at most buf.len() bytes into buf.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => continue,
                _ => return Err(format!("capture failed: {e}")),
            }
        }
        seen.packets += 1;
        let packet = &buf[..n as usize];
        if !needle.is_empty() && packet.windows(needle.len()).any(|w| w == needle) {
            seen.matches += 1;
        }
    }
    Ok(seen)
}

/// The bytes the `mpi_sizes` example (p2pmp-mpi) sends as its message of
/// `len` bytes with index `seed`: what a capture looks for.
pub fn mpi_sizes_bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed).wrapping_add((i >> 12) as u8)).collect()
}
