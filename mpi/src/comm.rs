//! Communicators beside the world: each is a pair of engine communicator ids
//! (point-to-point and collective traffic), so messages on one never match
//! receives on another. The C ABI builds `MPI_COMM_SELF` and `MPI_Comm_dup` on it.

use std::time::Duration;

use bytes::Bytes;

use crate::error::Result;
use crate::world::{COMM_COLL, COMM_WORLD, Request, Status, World};

/// The engine ids of one communicator over the world's ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CommId {
    p2p: u32,
    coll: u32,
}

impl CommId {
    /// The world communicator (the ids [`World::send`] and the collectives use).
    pub const WORLD: CommId = CommId { p2p: COMM_WORLD, coll: COMM_COLL };

    /// The `n`-th communicator: ids `2n` and `2n + 1`; `nth(0)` is the world.
    /// Every rank that talks on a communicator must give it the same `n`;
    /// `None` past the id space.
    pub fn nth(n: u32) -> Option<CommId> {
        let p2p = n.checked_mul(2)?;
        Some(CommId { p2p, coll: p2p.checked_add(1)? })
    }
}

impl World {
    /// [`World::isend_bytes`] on `comm`.
    pub fn isend_bytes_in(&mut self, comm: CommId, data: Bytes, dest: u32, tag: i32) -> Result<Request> {
        self.isend_on(comm.p2p, data, dest, tag)
    }

    /// [`World::issend_bytes`] on `comm`.
    pub fn issend_bytes_in(&mut self, comm: CommId, data: Bytes, dest: u32, tag: i32) -> Result<Request> {
        self.issend_on(comm.p2p, data, dest, tag)
    }

    /// [`World::irecv`] on `comm`.
    pub fn irecv_in(&mut self, comm: CommId, source: Option<u32>, tag: Option<i32>) -> Result<Request> {
        self.irecv_on(comm.p2p, source, tag)
    }

    /// [`World::iprobe`] on `comm`.
    pub fn iprobe_in(&mut self, comm: CommId, source: Option<u32>, tag: Option<i32>) -> Result<Option<Status>> {
        if let Some(s) = self.engine.iprobe(comm.p2p, source, tag)? {
            return Ok(Some(s));
        }
        self.progress_once(Some(Duration::ZERO))?;
        Ok(self.engine.iprobe(comm.p2p, source, tag)?)
    }

    /// [`World::probe`] on `comm`.
    pub fn probe_in(&mut self, comm: CommId, source: Option<u32>, tag: Option<i32>) -> Result<Status> {
        let id = comm.p2p;
        // Validates the arguments once, so the loop below cannot fail on them.
        self.engine.iprobe(id, source, tag)?;
        let from = source.filter(|&s| s != self.rank());
        self.progress_until(from, |w| matches!(w.engine.iprobe(id, source, tag), Ok(Some(_))))?;
        Ok(self.engine.iprobe(id, source, tag)?.expect("waited for it"))
    }

    /// Runs `f` with the collectives (`barrier`, `bcast`, ...) on `comm` instead
    /// of the world.
    pub fn collectives_in<R>(&mut self, comm: CommId, f: impl FnOnce(&mut World) -> R) -> R {
        let saved = std::mem::replace(&mut self.coll_comm, comm.coll);
        let r = f(self);
        self.coll_comm = saved;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_distinct_communicators_never_overlap() {
        assert_eq!(CommId::nth(0), Some(CommId::WORLD));
        let mut seen = std::collections::HashSet::new();
        for n in [0, 1, 2, 3, 1000, u32::MAX / 2] {
            let c = CommId::nth(n).unwrap();
            assert!(seen.insert(c.p2p) && seen.insert(c.coll), "{n}");
        }
        assert_eq!(CommId::nth(u32::MAX / 2 + 1), None);
    }
}
