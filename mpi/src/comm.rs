//! Communicators: a context (a pair of engine communicator ids, for
//! point-to-point and collective traffic, so messages on one never match
//! receives on another) and a group of processes (two groups for an
//! intercommunicator). Ranks given to the calls here are ranks of the
//! communicator; the engine speaks world ranks.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::group::{Group, Similarity};
use crate::world::{COMM_COLL, COMM_WORLD, Message, Payload, Request, Status, World};

/// The engine ids of one communicator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CommId {
    p2p: u32,
    coll: u32,
}

impl CommId {
    /// The world communicator (the ids [`World::send`] and the collectives use).
    pub const WORLD: CommId = CommId { p2p: COMM_WORLD, coll: COMM_COLL };

    /// The communicator of context `n`: ids `2n` and `2n + 1`; `nth(0)` is the
    /// world, `nth(1)` `MPI_COMM_SELF`. Every process of a communicator gives it
    /// the same `n` (see [`World::comm_dup`]); `None` past the id space.
    pub fn nth(n: u32) -> Option<CommId> {
        let p2p = n.checked_mul(2)?;
        Some(CommId { p2p, coll: p2p.checked_add(1)? })
    }

    /// The engine id of collective traffic.
    pub(crate) fn coll(self) -> u32 {
        self.coll
    }
}

/// A communicator of this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comm {
    pub(crate) id: CommId,
    pub(crate) local: Group,
    pub(crate) rank: u32,
    pub(crate) remote: Option<Group>,
}

impl Comm {
    /// An intracommunicator of `group` on context `id`, as seen by world rank `me`.
    pub(crate) fn intra(id: CommId, group: Group, me: u32) -> Option<Comm> {
        let rank = group.rank_of(me)?;
        Some(Comm { id, local: group, rank, remote: None })
    }

    /// This process's rank (in the local group of an intercommunicator).
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of processes (of the local group of an intercommunicator).
    pub fn size(&self) -> u32 {
        self.local.size()
    }

    /// The (local) group.
    pub fn group(&self) -> &Group {
        &self.local
    }

    /// The remote group of an intercommunicator.
    pub fn remote_group(&self) -> Option<&Group> {
        self.remote.as_ref()
    }

    /// Whether this is an intercommunicator.
    pub fn is_inter(&self) -> bool {
        self.remote.is_some()
    }

    /// The engine ids.
    pub fn id(&self) -> CommId {
        self.id
    }

    /// The group point-to-point ranks name: the remote group of an
    /// intercommunicator, else the group.
    pub fn peers(&self) -> &Group {
        self.remote.as_ref().unwrap_or(&self.local)
    }

    /// The world rank of destination or source rank `r`.
    pub fn peer(&self, r: u32) -> Result<u32> {
        self.peers().world_rank(r).ok_or_else(|| {
            Error::Rank(format!("rank {r} is not in a {}communicator of {}", self.inter_word(), self.peers().size()))
        })
    }

    fn inter_word(&self) -> &'static str {
        if self.is_inter() { "remote group of an inter" } else { "" }
    }

    /// The rank in this communicator (the remote group for an
    /// intercommunicator) of the world rank a status names.
    pub fn source_rank(&self, world: u32) -> Option<u32> {
        self.peers().rank_of(world)
    }

    /// `MPI_Comm_compare`.
    pub fn compare(&self, other: &Comm) -> Similarity {
        if self.is_inter() != other.is_inter() {
            return Similarity::Unequal;
        }
        let mut s = self.local.compare(&other.local);
        if let (Some(a), Some(b)) = (&self.remote, &other.remote) {
            s = match (s, a.compare(b)) {
                (Similarity::Unequal, _) | (_, Similarity::Unequal) => Similarity::Unequal,
                (Similarity::Ident, Similarity::Ident) => Similarity::Ident,
                _ => Similarity::Similar,
            };
        }
        match s {
            Similarity::Ident if self.id != other.id => Similarity::Congruent,
            s => s,
        }
    }

    /// Refuses an intercommunicator where a call needs an intracommunicator.
    pub fn check_intra(&self, what: &str) -> Result<()> {
        if self.is_inter() { Err(Error::Comm(format!("{what} needs an intracommunicator"))) } else { Ok(()) }
    }
}

impl World {
    /// The world communicator.
    pub fn comm_world(&self) -> Comm {
        Comm { id: CommId::WORLD, local: Group::first(self.size()), rank: self.rank(), remote: None }
    }

    /// The communicator of this process alone (`MPI_COMM_SELF`).
    pub fn comm_self(&self) -> Comm {
        // Invariant: context 1 exists.
        let id = CommId::nth(1).expect("context 1");
        Comm { id, local: Group::new(vec![self.rank()]).expect("one process"), rank: 0, remote: None }
    }

    /// [`World::isend_bytes`] on `comm` to its rank `dest`.
    pub fn isend_in(&mut self, comm: &Comm, data: impl Into<Payload>, dest: u32, tag: i32) -> Result<Request> {
        let to = comm.peer(dest)?;
        self.isend_on(comm.id.p2p, data, to, tag)
    }

    /// [`World::send_bytes`] on `comm` to its rank `dest`.
    pub fn send_in(&mut self, comm: &Comm, data: impl Into<Payload>, dest: u32, tag: i32) -> Result<()> {
        let to = comm.peer(dest)?;
        self.send_on(comm.id.p2p, data, to, tag)
    }

    /// [`World::issend_bytes`] on `comm` to its rank `dest`.
    pub fn issend_in(&mut self, comm: &Comm, data: impl Into<Payload>, dest: u32, tag: i32) -> Result<Request> {
        let to = comm.peer(dest)?;
        self.issend_on(comm.id.p2p, data, to, tag)
    }

    /// [`World::recv_bytes`] on `comm` from its rank `source`; the status
    /// names the world rank (see [`Comm::source_rank`]).
    pub fn recv_in(&mut self, comm: &Comm, source: Option<u32>, tag: Option<i32>) -> Result<Message> {
        let from = source.map(|s| comm.peer(s)).transpose()?;
        self.recv_on(comm.id.p2p, from, tag)
    }

    /// [`World::irecv`] on `comm` from its rank `source`; the status names the
    /// world rank (see [`Comm::source_rank`]).
    pub fn irecv_in(&mut self, comm: &Comm, source: Option<u32>, tag: Option<i32>) -> Result<Request> {
        let from = source.map(|s| comm.peer(s)).transpose()?;
        self.irecv_on(comm.id.p2p, from, tag)
    }

    /// [`World::iprobe`] on `comm`.
    pub fn iprobe_in(&mut self, comm: &Comm, source: Option<u32>, tag: Option<i32>) -> Result<Option<Status>> {
        let (id, from) = (comm.id.p2p, source.map(|s| comm.peer(s)).transpose()?);
        if let Some(s) = self.engine.iprobe(id, from, tag)? {
            return Ok(Some(s));
        }
        self.progress_once(Some(Duration::ZERO))?;
        Ok(self.engine.iprobe(id, from, tag)?)
    }

    /// [`World::probe`] on `comm`.
    pub fn probe_in(&mut self, comm: &Comm, source: Option<u32>, tag: Option<i32>) -> Result<Status> {
        let (id, from) = (comm.id.p2p, source.map(|s| comm.peer(s)).transpose()?);
        // Validates the arguments once, so the loop below cannot fail on them.
        self.engine.iprobe(id, from, tag)?;
        let direct = from.filter(|&s| s != self.rank());
        self.progress_until(direct, |w| matches!(w.engine.iprobe(id, from, tag), Ok(Some(_))))?;
        Ok(self.engine.iprobe(id, from, tag)?.expect("waited for it"))
    }

    /// Runs `f` with the collectives (`barrier`, `bcast`, ...) on intracommunicator
    /// `comm` instead of the world: their ranks are `comm`'s.
    pub fn collectives_in<R, E: From<Error>>(
        &mut self,
        comm: &Comm,
        f: impl FnOnce(&mut World) -> Result<R, E>,
    ) -> Result<R, E> {
        comm.check_intra("a collective")?;
        self.collectives_on(comm.id.coll, comm.local.clone(), comm.rank, f)
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

    #[test]
    fn ranks_translate_through_the_group_that_point_to_point_names() {
        let g = Group::new(vec![4, 2, 7]).unwrap();
        let c = Comm::intra(CommId::nth(5).unwrap(), g.clone(), 7).unwrap();
        assert_eq!((c.rank(), c.size(), c.peer(1).unwrap(), c.source_rank(4)), (2, 3, 2, Some(0)));
        assert!(matches!(c.peer(3), Err(Error::Rank(_))));
        let inter = Comm { remote: Some(Group::new(vec![0, 1]).unwrap()), ..c.clone() };
        assert_eq!((inter.peer(1).unwrap(), inter.source_rank(0), inter.size()), (1, Some(0), 3));
        assert!(inter.check_intra("x").is_err());
        let dup = Comm { id: CommId::nth(6).unwrap(), ..c.clone() };
        assert_eq!(c.compare(&c.clone()), Similarity::Ident);
        assert_eq!(c.compare(&dup), Similarity::Congruent);
        assert_eq!(c.compare(&inter), Similarity::Unequal);
        let shuffled = Comm::intra(dup.id, Group::new(vec![2, 7, 4]).unwrap(), 7).unwrap();
        assert_eq!(c.compare(&shuffled), Similarity::Similar);
    }
}
