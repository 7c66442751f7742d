//! The transport's shared-memory links: setting them up (as the connecting
//! and the accepting side), reading their rings, the cheap looks at them
//! while a rank polls, asking peers to ring the doorbell before a sleep, and
//! telling peers the core this rank runs on.

use std::io;
use std::os::fd::AsRawFd;
use std::time::Instant;

use p2pmp_core::local::process_key;
use p2pmp_core::mpi::MpiEngine;
use tracing::{debug, warn};

use super::conn::{Conn, Io};
use super::shm::{self, NeedsCore, Setup, ShmSetup};
use super::{ACCEPT_RETRY, Transport};
use crate::sock::Wait;

impl Transport {
    /// Who we are, for shared-memory hellos (only with shared memory on).
    fn me(&self) -> Option<shm::Me<'_>> {
        let l = self.local.as_ref()?;
        let size = self.heard_on.len() as u32;
        Some(shm::Me {
            job: &self.job,
            rank: self.rank,
            size,
            key: self.key,
            addr: self.addr,
            bell: l.bell.as_raw_fd(),
        })
    }

    /// Starts a shared-memory link to `peer` (its answer comes as an event).
    pub(super) fn connect_shm(&mut self, peer: u32) -> io::Result<usize> {
        let me = self.me().ok_or_else(|| io::Error::other("shared memory is off"))?;
        let cap = self.local.as_ref().map_or(0, |l| l.cap);
        let setup = ShmSetup::connect(&me, peer, process_key(&self.job, peer), cap)?;
        debug!(to = peer, "connecting over shared memory");
        self.add_conn(Io::ShmSetup(Box::new(setup)), Some(peer), false)
    }

    /// A shared-memory link being set up has news: established (its peer
    /// known), still waiting, or failed (ended; an attempt of ours falls back).
    pub(super) fn on_shm_setup(&mut self, engine: &mut MpiEngine, now: Instant, slot: usize) {
        let Some(mut conn) = self.conns[slot].take() else { return };
        let setup = match conn.io {
            Io::ShmSetup(s) => s,
            other => {
                conn.io = other;
                self.conns[slot] = Some(conn);
                return;
            }
        };
        let mine = setup.peer();
        // Invariant: set-ups exist only while shared memory is on.
        let me = self.me().expect("shared memory is on");
        match setup.advance(&me) {
            Ok((Setup::Pending, Some(setup))) => {
                conn.io = Io::ShmSetup(setup);
                self.conns[slot] = Some(conn);
            }
            Ok((Setup::Done(io, from), _)) => {
                conn.io = Io::Shm(io);
                conn.rank = Some(from);
                self.conns[slot] = Some(conn);
                self.shm_slots.push(slot);
                if mine.is_none() {
                    debug!(from, "accepted a shared-memory link");
                    return;
                }
                if self.attempt[from as usize] == Some(slot) {
                    self.attempt[from as usize] = None;
                }
                if self.links.handle_connected(now, from, engine) {
                    debug!(to = from, "connected over shared memory");
                    self.set_out(from, slot);
                } else {
                    self.drop_conn(slot);
                }
            }
            Ok((Setup::Pending, None)) => unreachable!("a pending set-up comes back"),
            Err(e) => {
                // The set-up (and its socket, which leaves the poll set as it
                // closes) is gone; an attempt of ours falls back.
                debug!(?mine, %e, "shared-memory link failed");
                if let Some(peer) = mine.filter(|&p| self.attempt[p as usize] == Some(slot)) {
                    self.attempt[peer as usize] = None;
                    self.links.handle_connect_failed(now, peer, e.to_string(), engine);
                }
            }
        }
    }

    /// Reads every shared-memory ring that has bytes, and queues for writing
    /// every link with bytes waiting: whether any ring had bytes. From the
    /// last link to the first: a read that closes its link takes it out of
    /// `shm_slots`, and the links after it, already seen, move down (going
    /// forwards, the next one was skipped until the next look).
    pub(super) fn service_shm(&mut self, engine: &mut MpiEngine, now: Instant) -> bool {
        let mut got = false;
        for i in (0..self.shm_slots.len()).rev() {
            let Some(&slot) = self.shm_slots.get(i) else { continue };
            let Some(c) = self.conns[slot].as_ref() else { continue };
            let (input, output) = match &c.io {
                Io::Shm(s) => (s.has_input(), !c.tx.is_empty()),
                _ => (false, false),
            };
            if output {
                self.mark_dirty(slot);
            }
            if input {
                got |= self.read_conn(engine, slot, Wait::No, now);
            }
        }
        got
    }

    /// The ring of connection `slot`, if it is a shared-memory one.
    fn ring_at(&self, slot: usize) -> Option<&shm::ShmIo> {
        match self.conns.get(slot).and_then(Option::as_ref).map(|c| &c.io) {
            Some(Io::Shm(s)) => Some(s),
            _ => None,
        }
    }

    /// Whether a rank awaited (`from`, or any shared-memory peer) may need
    /// the core this rank polls on (`core`): see `ShmIo::shares_core`. Each
    /// of those peers is told our core in turn. `NeedsCore::No` for peers
    /// over TCP.
    pub(crate) fn shares_core(&mut self, from: Option<u32>, core: u32) -> NeedsCore {
        let mut ring_shares = |slot| ring_mut(&mut self.conns, slot).map_or(NeedsCore::No, |s| s.shares_core(core));
        match from {
            Some(f) => self.heard_on.get(f as usize).copied().flatten().map_or(NeedsCore::No, ring_shares),
            // Every peer is told, so no short cut.
            None => self.shm_slots.iter().fold(NeedsCore::No, |most, &slot| ring_shares(slot).max(most)),
        }
    }

    /// Tells every shared-memory peer the core this rank runs on now (after
    /// it moved), or none (as it goes to sleep: where it wakes is the
    /// kernel's choice).
    pub(crate) fn say_core(&mut self, core: Option<u32>) {
        for &slot in &self.shm_slots {
            if let Some(s) = ring_mut(&mut self.conns, slot) {
                s.say_core(core);
            }
        }
    }

    /// Whether rank `peer`'s frames come through a shared-memory ring.
    pub(crate) fn is_ring(&self, peer: u32) -> bool {
        self.heard_on.get(peer as usize).copied().flatten().and_then(|s| self.ring_at(s)).is_some()
    }

    /// Whether a full look may find something: bytes in the ring of `from`
    /// (or of any shared-memory peer), one load each and no system call.
    /// True when that cannot be told so cheaply (a TCP peer, or none known).
    pub(crate) fn peek(&self, from: Option<u32>) -> bool {
        let ring = |slot: usize| self.ring_at(slot).map(shm::ShmIo::has_input);
        match from {
            Some(f) => self.heard_on.get(f as usize).copied().flatten().and_then(ring).unwrap_or(true),
            None => self.shm_slots.is_empty() || self.shm_slots.iter().any(|&slot| ring(slot).unwrap_or(true)),
        }
    }

    /// About to sleep: asks every shared-memory peer to ring our doorbell,
    /// and tells them this rank runs on no core. False when a ring already
    /// has bytes or room (do not sleep; nothing was asked or told).
    pub(crate) fn before_sleep(&mut self) -> bool {
        for i in 0..self.shm_slots.len() {
            let slot = self.shm_slots[i];
            let Some(c) = self.conns[slot].as_mut() else { continue };
            let waiting = !c.tx.is_empty();
            if let Io::Shm(s) = &mut c.io {
                if !s.begin_sleep(waiting) {
                    self.after_sleep_upto(i);
                    return false;
                }
            }
        }
        self.say_core(None);
        true
    }

    /// Awake again: the peers need not ring any more.
    pub(crate) fn after_sleep(&mut self) {
        self.after_sleep_upto(self.shm_slots.len());
    }

    fn after_sleep_upto(&mut self, n: usize) {
        for &slot in &self.shm_slots[..n] {
            if let Some(s) = ring_mut(&mut self.conns, slot) {
                s.end_sleep();
            }
        }
    }

    /// Accepts shared-memory links (their hellos come as events).
    pub(super) fn accept_shm(&mut self, now: Instant) {
        loop {
            let Some(l) = &self.local else { return };
            match l.listener.accept() {
                Ok((sock, _)) => {
                    #[cfg(feature = "fault-injection")]
                    if self.faults.refuse_shm {
                        drop(sock);
                        continue;
                    }
                    if let Err(e) = self.add_conn(Io::ShmSetup(Box::new(ShmSetup::accepted(sock))), None, true) {
                        warn!(%e, "cannot watch a shared-memory link");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    warn!(%e, "accept of a shared-memory link failed: tried again shortly");
                    self.accept_again = Some(now + ACCEPT_RETRY);
                    return;
                }
            }
        }
    }
}

/// The ring of connection `slot` among `conns`, if it is a shared-memory one,
/// to change (a function of the connections alone, so that a loop over
/// `shm_slots` may call it).
fn ring_mut(conns: &mut [Option<Conn>], slot: usize) -> Option<&mut shm::ShmIo> {
    match conns.get_mut(slot).and_then(Option::as_mut).map(|c| &mut c.io) {
        Some(Io::Shm(s)) => Some(s),
        _ => None,
    }
}
