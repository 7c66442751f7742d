//! Fault injection for tests (cargo feature `fault-injection`; release builds
//! of the library have none of it):
//! - `P2PMP_FAULT_DROP_EVERY=n`: every n-th frame is lost with its connection
//!   (frames queued before it are written first);
//! - `P2PMP_FAULT_MOVE=rank:n`: that rank moves to a new port after its n-th
//!   frame, as a migrated process would: it listens elsewhere, registers the
//!   new address, withdraws the old one and closes its accepted connections;
//! - `P2PMP_FAULT_SHM_REFUSE=1`: every shared-memory link offered is refused
//!   (as a bad segment would be), so peers fall back to TCP.

use std::time::Instant;

use mio::Interest;
use mio::net::TcpListener;
use p2pmp_core::local::LocalRequest;
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::mpi::MpiEngine;
use tracing::{debug, warn};

use super::{LISTENER, Transport};
use crate::error::Result;

/// What to do to the frame about to be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Inject {
    Nothing,
    /// Drop it with its connection.
    Drop,
}

/// The faults asked for in the environment, and the frames counted so far.
#[derive(Debug, Default)]
pub(super) struct Faults {
    pub(super) refuse_shm: bool,
    drop_every: Option<u64>,
    move_at: Option<u64>,
    frames: u64,
}

impl Faults {
    /// Reads the variables; says on stderr which faults are on (the tests
    /// check that they were).
    pub(super) fn from_env(rank: u32) -> Self {
        let f = Faults {
            refuse_shm: std::env::var("P2PMP_FAULT_SHM_REFUSE").is_ok_and(|v| v.trim() == "1"),
            drop_every: std::env::var("P2PMP_FAULT_DROP_EVERY").ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0),
            move_at: std::env::var("P2PMP_FAULT_MOVE").ok().and_then(|v| {
                let (r, n) = v.split_once(':')?;
                (r.trim().parse::<u32>().ok()? == rank).then(|| n.trim().parse().ok()).flatten()
            }),
            frames: 0,
        };
        if f.drop_every.is_some() || f.move_at.is_some() || f.refuse_shm {
            eprintln!("p2pmp: rank {rank}: fault injection: {f:?}");
        }
        f
    }
}

impl Transport {
    /// Counts a frame for `to` and injects what the environment asked for.
    pub(super) fn inject(&mut self, engine: &mut MpiEngine, now: Instant, to: u32) -> Inject {
        self.faults.frames += 1;
        if self.faults.move_at == Some(self.faults.frames) {
            if let Err(e) = self.move_listener(engine, now) {
                warn!(%e, "fault injection: moving to a new port failed");
            }
        }
        let Some(slot) = self.out[to as usize] else { return Inject::Nothing };
        if self.faults.drop_every.is_some_and(|n| self.faults.frames % n == 0) {
            // What was queued before goes out; this frame (and whatever the
            // kernel did not take) dies with the connection.
            debug!(to, "fault injection: dropping the connection");
            if let Some(c) = self.conns[slot].as_mut() {
                let _ = c.write_tx();
            }
            self.close_conn(engine, now, slot);
            return Inject::Drop;
        }
        Inject::Nothing
    }

    /// Listens on a new port and registers it, then closes the old listener and
    /// every accepted connection: peers find the new address through the node and
    /// reconnect, and their engines resend what we had not acknowledged. The
    /// node's answers are not waited for (they are read and dropped).
    fn move_listener(&mut self, engine: &mut MpiEngine, now: Instant) -> Result<()> {
        let mut listener = TcpListener::bind("127.0.0.1:0".parse().expect("literal address"))?;
        let addr = NodeAddr(listener.local_addr()?);
        let old = self.node.addr();
        self.node.set_addr(addr);
        self.node.request(self.keys.register(self.key, addr))?;
        self.node.request(LocalRequest::Unregister { key: self.key, addr: old })?;
        self.poll.registry().deregister(&mut self.listener)?;
        self.poll.registry().register(&mut listener, LISTENER, Interest::READABLE)?;
        self.listener = listener;
        self.addr = addr;
        for slot in 0..self.conns.len() {
            if self.conns[slot].as_ref().is_some_and(|c| c.accepted) {
                self.close_conn(engine, now, slot);
            }
        }
        debug!(rank = self.rank, from = %old, to = %addr, "moved to a new port");
        Ok(())
    }
}
