//! Making communicators (MPI-1 §6.4, §6.6): dup, split, create, and
//! intercommunicators (create, merge). Each is collective over the parent.
//!
//! **Contexts.** A new communicator needs a context number no member uses for
//! another communicator. Every process keeps the lowest number it has not used
//! (`World::next_ctx`); the members take the maximum of theirs (an allreduce
//! over the parent, the leaders' exchange for intercommunicators) and move
//! past it. Processes that are not members keep theirs, so two communicators
//! may share a number only when no process is in both: their messages can
//! never meet (matching is by context and sending process).

use bytes::Bytes;

use crate::comm::{Comm, CommId};
use crate::error::{Error, Result};
use crate::group::Group;
use crate::pod::{self, Op};
use crate::world::World;

/// Tags of the exchanges between two groups' leaders (on the intercommunicator's
/// collective id, apart from the collectives' own tags).
const TAG_INTER_DUP: i32 = 32;
const TAG_INTER_MERGE: i32 = 33;
const TAG_INTER_SPLIT: i32 = 34;
const TAG_INTER_CREATE: i32 = 35;

impl World {
    /// The agreed context for a new communicator of the members of
    /// intracommunicator `parent` (collective over it).
    fn agree_ctx(&mut self, parent: &Comm) -> Result<u32> {
        let mine = self.next_ctx;
        let ctx = self.collectives_in(parent, |w| w.allreduce(&[mine], Op::Max))?[0];
        self.take_ctx(ctx)
    }

    /// Marks every context up to `ctx` used.
    fn take_ctx(&mut self, ctx: u32) -> Result<u32> {
        CommId::nth(ctx).ok_or_else(|| Error::Comm("out of communicator contexts".into()))?;
        self.next_ctx = self.next_ctx.max(ctx + 1);
        Ok(ctx)
    }

    /// Runs `f` with the collectives among the local group of `comm` (of an
    /// intercommunicator too), on its collective id.
    fn local_collectives<R>(&mut self, comm: &Comm, f: impl FnOnce(&mut World) -> Result<R>) -> Result<R> {
        self.collectives_on(comm.id.coll(), comm.local.clone(), comm.rank, f)
    }

    /// The leaders (local rank 0 of each group) of intercommunicator `inter`
    /// swap `mine` for the other side's, which every local process then gets.
    fn leaders_swap(&mut self, inter: &Comm, mine: Vec<u32>, tag: i32) -> Result<Vec<u32>> {
        let remote = inter.remote.clone().ok_or_else(|| Error::Comm("not an intercommunicator".into()))?;
        let leader = remote.world_rank(0).ok_or_else(|| Error::Comm("empty remote group".into()))?;
        let id = inter.id.coll();
        let theirs = if inter.rank == 0 {
            let r = self.irecv_on(id, Some(leader), Some(tag))?;
            let s = self.isend_on(id, pod::to_bytes(&mine), leader, tag)?;
            let got = self.wait_msg(r)?.data.into_bytes();
            self.wait(s)?;
            got
        } else {
            Bytes::new()
        };
        let got = self.local_collectives(inter, |w| w.bcast_bytes(theirs, 0))?;
        pod::from_bytes(&got)
    }

    /// `MPI_Comm_dup`: the same group(s) on a fresh context.
    pub fn comm_dup(&mut self, comm: &Comm) -> Result<Comm> {
        let ctx = if comm.is_inter() {
            let mine = self.local_collectives(comm, |w| w.allreduce(&[w.next_ctx], Op::Max))?[0];
            let theirs = self.leaders_swap(comm, vec![mine], TAG_INTER_DUP)?;
            self.take_ctx(mine.max(theirs.first().copied().unwrap_or(0)))?
        } else {
            self.agree_ctx(comm)?
        };
        Ok(Comm { id: ctx_id(ctx)?, ..comm.clone() })
    }

    /// `MPI_Comm_split`: one communicator per `color` (`None`: none for this
    /// process), ranks ordered by `key`, then by rank in `comm`. On an
    /// intercommunicator each group splits alike and the parts of one colour
    /// form an intercommunicator (none where either side has no member).
    pub fn comm_split(&mut self, comm: &Comm, color: Option<u32>, key: i32) -> Result<Option<Comm>> {
        // (has colour, colour, key, next context) of every (local) member.
        let mine = [u32::from(color.is_some()), color.unwrap_or(0), key as u32, self.next_ctx];
        let all: Vec<u32> = self.local_collectives(comm, |w| w.allgather(&mine))?;
        let mut ctx = all.chunks_exact(4).map(|m| m[3]).max().unwrap_or(0);
        let remote_all = match &comm.remote {
            Some(_) => {
                let theirs = self.leaders_swap(comm, [&all[..], &[ctx]].concat(), TAG_INTER_SPLIT)?;
                let (last, rest) = theirs.split_last().ok_or_else(|| Error::Comm("empty split message".into()))?;
                ctx = ctx.max(*last);
                Some(rest.to_vec())
            }
            None => None,
        };
        let ctx = self.take_ctx(ctx)?;
        let Some(color) = color else { return Ok(None) };
        let local = colour_group(&all, color, &comm.local)?;
        let Some(remote_all) = remote_all else { return Ok(Comm::intra(ctx_id(ctx)?, local, self.rank())) };
        // Invariant: an intercommunicator has a remote group (matched above).
        let remote = colour_group(&remote_all, color, comm.remote.as_ref().expect("intercommunicator"))?;
        if remote.size() == 0 {
            return Ok(None);
        }
        let rank = local.rank_of(self.rank()).ok_or_else(|| Error::Comm("split lost this process".into()))?;
        Ok(Some(Comm { id: ctx_id(ctx)?, local, rank, remote: Some(remote) }))
    }

    /// `MPI_Comm_create`: the communicator of `group` (a subset of `comm`'s,
    /// the same on every process); `None` on processes outside it. On an
    /// intercommunicator each side names a subset of its own group and the
    /// result joins the two subsets (none where either is empty).
    pub fn comm_create(&mut self, comm: &Comm, group: &Group) -> Result<Option<Comm>> {
        if group.ranks().iter().any(|&w| comm.local.rank_of(w).is_none()) {
            return Err(Error::Group("the group is not a subset of the communicator's (local) group".into()));
        }
        if !comm.is_inter() {
            let ctx = self.agree_ctx(comm)?;
            return Ok(Comm::intra(ctx_id(ctx)?, group.clone(), self.rank()));
        }
        let mine = self.local_collectives(comm, |w| w.allreduce(&[w.next_ctx], Op::Max))?[0];
        let theirs = self.leaders_swap(comm, [&[mine], group.ranks()].concat(), TAG_INTER_CREATE)?;
        let (&their_ctx, their_group) =
            theirs.split_first().ok_or_else(|| Error::Comm("empty create message".into()))?;
        let ctx = self.take_ctx(mine.max(their_ctx))?;
        let remote = Group::new(their_group.to_vec())?;
        let Some(rank) = group.rank_of(self.rank()).filter(|_| remote.size() > 0) else { return Ok(None) };
        Ok(Some(Comm { id: ctx_id(ctx)?, local: group.clone(), rank, remote: Some(remote) }))
    }

    /// `MPI_Intercomm_create`: joins intracommunicator `local` (whose rank
    /// `local_leader` talks for it) with another group, whose leader is rank
    /// `remote_leader` of `peer`; the leaders talk on `peer` with `tag`.
    pub fn intercomm_create(
        &mut self,
        local: &Comm,
        local_leader: u32,
        peer: &Comm,
        remote_leader: u32,
        tag: i32,
    ) -> Result<Comm> {
        local.check_intra("MPI_Intercomm_create")?;
        if local_leader >= local.size() {
            return Err(Error::Rank(format!("local leader {local_leader} not below {}", local.size())));
        }
        let mine = self.collectives_in(local, |w| w.allreduce(&[w.next_ctx], Op::Max))?[0];
        // The leader's answer: [context, remote group's world ranks...].
        let answer = if local.rank == local_leader {
            let mut msg = vec![mine];
            msg.extend_from_slice(local.local.ranks());
            let r = self.irecv_in(peer, Some(remote_leader), Some(tag))?;
            let s = self.isend_in(peer, pod::to_bytes(&msg), remote_leader, tag)?;
            let got: Vec<u32> = pod::from_bytes(&self.wait_msg(r)?.data)?;
            self.wait(s)?;
            let theirs = got.first().copied().ok_or_else(|| Error::Comm("empty leader message".into()))?;
            let mut answer = vec![mine.max(theirs)];
            answer.extend_from_slice(&got[1..]);
            pod::to_bytes(&answer)
        } else {
            Bytes::new()
        };
        let got: Vec<u32> = pod::from_bytes(&self.collectives_in(local, |w| w.bcast_bytes(answer, local_leader))?)?;
        let (&ctx, remote) = got.split_first().ok_or_else(|| Error::Comm("empty leader answer".into()))?;
        let remote = Group::new(remote.to_vec())?;
        if remote.ranks().iter().any(|&w| local.local.rank_of(w).is_some()) {
            return Err(Error::Group("the two groups of an intercommunicator overlap".into()));
        }
        let ctx = self.take_ctx(ctx)?;
        Ok(Comm { id: ctx_id(ctx)?, local: local.local.clone(), rank: local.rank, remote: Some(remote) })
    }

    /// `MPI_Intercomm_merge`: the intracommunicator of both groups; the group
    /// that passes `high` comes second (on a tie, the group whose leader has the
    /// lower world rank comes first).
    pub fn intercomm_merge(&mut self, inter: &Comm, high: bool) -> Result<Comm> {
        let remote =
            inter.remote.clone().ok_or_else(|| Error::Comm("MPI_Intercomm_merge needs an intercommunicator".into()))?;
        let mine = self.local_collectives(inter, |w| w.allreduce(&[w.next_ctx], Op::Max))?[0];
        let theirs = self.leaders_swap(inter, vec![mine, u32::from(high)], TAG_INTER_MERGE)?;
        let (&their_ctx, their_high) = theirs.split_first().ok_or_else(|| Error::Comm("empty merge message".into()))?;
        let their_high = their_high.first().is_some_and(|&h| h != 0);
        let ctx = self.take_ctx(mine.max(their_ctx))?;
        let local_first = match (high, their_high) {
            (false, true) => true,
            (true, false) => false,
            _ => inter.local.ranks().first() < remote.ranks().first(),
        };
        let ranks = if local_first {
            [inter.local.ranks(), remote.ranks()].concat()
        } else {
            [remote.ranks(), inter.local.ranks()].concat()
        };
        let comm = Comm::intra(ctx_id(ctx)?, Group::new(ranks)?, self.rank());
        comm.ok_or_else(|| Error::Comm("merge lost this process".into()))
    }
}

/// The members of `group` whose (has colour, colour, key, _) entry in `all`
/// has colour `color`, ordered by key, then by rank in `group`.
fn colour_group(all: &[u32], color: u32, group: &Group) -> Result<Group> {
    let mut members: Vec<(i32, u32)> = all
        .chunks_exact(4)
        .enumerate()
        .filter(|(_, m)| m[0] == 1 && m[1] == color)
        .map(|(r, m)| (m[2] as i32, r as u32))
        .collect();
    members.sort_unstable();
    let world = members.iter().map(|&(_, r)| group.world_rank(r)).collect::<Option<Vec<_>>>();
    Group::new(world.ok_or_else(|| Error::Comm("a split entry names no member".into()))?)
}

fn ctx_id(ctx: u32) -> Result<CommId> {
    CommId::nth(ctx).ok_or_else(|| Error::Comm("out of communicator contexts".into()))
}

#[cfg(test)]
mod tests {
    //! The context rule (the members agree on the maximum of their next unused
    //! context, then every member moves past it) over random sequences of
    //! communicator creation, with the participants each call of this module
    //! has: no two communicators that share a process ever share a context.

    use std::collections::BTreeSet;

    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Dup(usize),
        Split(usize, Vec<u8>),
        Create(usize, Vec<bool>),
        Inter(usize, usize),
        Merge(usize),
    }

    #[derive(Debug, Clone)]
    struct Made {
        ctx: u32,
        members: BTreeSet<usize>,
    }

    /// Every participant offers its next context; all move past the maximum.
    fn agree(next: &mut [u32], participants: &BTreeSet<usize>) -> u32 {
        let ctx = participants.iter().map(|&p| next[p]).max().unwrap_or(0);
        for &p in participants {
            next[p] = next[p].max(ctx + 1);
        }
        ctx
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        prop_oneof![
            any::<usize>().prop_map(Op::Dup),
            (any::<usize>(), prop::collection::vec(0..3u8, 8)).prop_map(|(c, v)| Op::Split(c, v)),
            (any::<usize>(), prop::collection::vec(any::<bool>(), 8)).prop_map(|(c, v)| Op::Create(c, v)),
            (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Op::Inter(a, b)),
            any::<usize>().prop_map(Op::Merge),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn communicators_sharing_a_process_never_share_a_context(
            n in 1..8usize,
            ops in prop::collection::vec(arb_op(), 1..40),
        ) {
            // The world (context 0) and each process's MPI_COMM_SELF (context 1).
            let mut next = vec![2u32; n];
            let mut comms = vec![Made { ctx: 0, members: (0..n).collect() }];
            comms.extend((0..n).map(|p| Made { ctx: 1, members: [p].into() }));
            let mut inters: Vec<usize> = Vec::new();
            for op in ops {
                let pick = |i: usize| i % comms.len();
                match op {
                    Op::Dup(c) => {
                        let m = comms[pick(c)].members.clone();
                        let ctx = agree(&mut next, &m);
                        comms.push(Made { ctx, members: m });
                    }
                    Op::Split(c, colors) => {
                        // comm_split: one allgather over the parent; every member takes part.
                        let m = comms[pick(c)].members.clone();
                        let ctx = agree(&mut next, &m);
                        for colour in 0..3u8 {
                            let part: BTreeSet<usize> = m.iter().copied().filter(|&p| colors[p] == colour).collect();
                            if !part.is_empty() {
                                comms.push(Made { ctx, members: part });
                            }
                        }
                    }
                    Op::Create(c, keep) => {
                        let m = comms[pick(c)].members.clone();
                        let ctx = agree(&mut next, &m);
                        let part: BTreeSet<usize> = m.iter().copied().filter(|&p| keep[p]).collect();
                        if !part.is_empty() {
                            comms.push(Made { ctx, members: part });
                        }
                    }
                    Op::Inter(a, b) => {
                        // Two disjoint groups: each allreduces, the leaders swap, the max wins.
                        let (ma, mb) = (&comms[pick(a)].members, &comms[pick(b)].members);
                        if ma.is_disjoint(mb) {
                            let union: BTreeSet<usize> = ma.union(mb).copied().collect();
                            let ctx = agree(&mut next, &union);
                            comms.push(Made { ctx, members: union });
                            inters.push(comms.len() - 1);
                        }
                    }
                    Op::Merge(i) => {
                        if let Some(&c) = inters.get(i % inters.len().max(1)) {
                            let m = comms[c].members.clone();
                            let ctx = agree(&mut next, &m);
                            comms.push(Made { ctx, members: m });
                        }
                    }
                }
            }
            for (i, a) in comms.iter().enumerate() {
                for b in &comms[i + 1..] {
                    prop_assert!(a.ctx != b.ctx || a.members.is_disjoint(&b.members), "{a:?} and {b:?}");
                }
            }
        }
    }
}
