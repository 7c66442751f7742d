//! Collectives on intercommunicators (MPI 3.1 §5.2.2, which MPI-1 programs
//! meet through MPI-2 semantics of the same calls): the data flows from one
//! group to the other. A rooted call names its root as [`InterRoot`]: the root
//! itself passes `MPI_ROOT`, the rest of its group `MPI_PROC_NULL`, and the
//! other group the root's rank in it.
//!
//! Messages between the groups travel on the intercommunicator's collective id
//! with tags of their own; work within a group uses the ordinary collectives
//! on that group (the same id, other tags, other peers).

use bytes::Bytes;

use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::reduce::Combine;
use crate::world::{Request, World};

const TAG_IBARRIER: i32 = 40;
const TAG_IBCAST: i32 = 41;
const TAG_IREDUCE: i32 = 42;
const TAG_IALLREDUCE: i32 = 43;
const TAG_IGATHER: i32 = 44;
const TAG_ISCATTER: i32 = 45;
const TAG_IALLGATHER: i32 = 46;
const TAG_IALLTOALL: i32 = 47;
const TAG_IREDSCAT: i32 = 48;

/// The root of a rooted intercommunicator collective, as this process sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterRoot {
    /// This process is the root (`MPI_ROOT`).
    Me,
    /// This process is in the root's group but not the root (`MPI_PROC_NULL`).
    Null,
    /// The root is this rank of the other group.
    Remote(u32),
}

fn remote(comm: &Comm) -> Result<&crate::group::Group> {
    comm.remote.as_ref().ok_or_else(|| Error::Comm("not an intercommunicator".into()))
}

impl World {
    fn inter_isend(&mut self, comm: &Comm, data: Bytes, to: u32, tag: i32) -> Result<Request> {
        let w = comm.peer(to)?;
        self.isend_on(comm.id.coll(), data, w, tag)
    }

    fn inter_irecv(&mut self, comm: &Comm, from: u32, tag: i32) -> Result<Request> {
        let w = comm.peer(from)?;
        self.irecv_on(comm.id.coll(), Some(w), Some(tag))
    }

    fn inter_recv(&mut self, comm: &Comm, from: u32, tag: i32) -> Result<Bytes> {
        let w = comm.peer(from)?;
        Ok(self.recv_on(comm.id.coll(), Some(w), Some(tag))?.data.into_bytes())
    }

    fn inter_send(&mut self, comm: &Comm, data: Bytes, to: u32, tag: i32) -> Result<()> {
        let w = comm.peer(to)?;
        self.send_on(comm.id.coll(), data, w, tag)
    }

    fn local<R>(&mut self, comm: &Comm, f: impl FnOnce(&mut World) -> Result<R>) -> Result<R> {
        self.collectives_on(comm.id.coll(), comm.local.clone(), comm.rank, f)
    }

    /// The two leaders (local rank 0) swap `data`; every process of each group
    /// gets the other group's.
    fn leaders_exchange(&mut self, comm: &Comm, data: Bytes, tag: i32) -> Result<Bytes> {
        let theirs = if comm.rank == 0 {
            let r = self.inter_irecv(comm, 0, tag)?;
            let s = self.inter_isend(comm, data, 0, tag)?;
            let got = self.wait_msg(r)?.data.into_bytes();
            self.wait(s)?;
            got
        } else {
            Bytes::new()
        };
        self.local(comm, |w| w.bcast_bytes(theirs, 0))
    }

    /// `MPI_Barrier` on an intercommunicator: returns once every process of
    /// both groups has entered.
    pub fn inter_barrier(&mut self, comm: &Comm) -> Result<()> {
        remote(comm)?;
        self.local(comm, |w| w.barrier())?;
        self.leaders_exchange(comm, Bytes::new(), TAG_IBARRIER)?;
        Ok(())
    }

    /// `MPI_Bcast`: the root's `data` reaches every process of the other group
    /// (returned there; empty in the root's group).
    pub fn inter_bcast(&mut self, comm: &Comm, data: Bytes, root: InterRoot) -> Result<Bytes> {
        remote(comm)?;
        match root {
            InterRoot::Me => {
                self.inter_send(comm, data, 0, TAG_IBCAST)?;
                Ok(Bytes::new())
            }
            InterRoot::Null => Ok(Bytes::new()),
            InterRoot::Remote(r) => {
                let got = if comm.rank == 0 { self.inter_recv(comm, r, TAG_IBCAST)? } else { Bytes::new() };
                self.local(comm, |w| w.bcast_bytes(got, 0))
            }
        }
    }

    /// `MPI_Reduce`: the other group's data, combined, on the root.
    pub fn inter_reduce(
        &mut self,
        comm: &Comm,
        data: Vec<u8>,
        root: InterRoot,
        op: &mut Combine<'_>,
        commutative: bool,
    ) -> Result<Option<Vec<u8>>> {
        remote(comm)?;
        match root {
            InterRoot::Me => Ok(Some(self.inter_recv(comm, 0, TAG_IREDUCE)?.to_vec())),
            InterRoot::Null => Ok(None),
            InterRoot::Remote(r) => {
                if let Some(acc) = self.local(comm, |w| w.reduce_bytes(data, 0, op, commutative))? {
                    self.inter_send(comm, Bytes::from(acc), r, TAG_IREDUCE)?;
                }
                Ok(None)
            }
        }
    }

    /// `MPI_Allreduce`: each group gets the other group's data, combined.
    pub fn inter_allreduce(
        &mut self,
        comm: &Comm,
        data: Vec<u8>,
        op: &mut Combine<'_>,
        commutative: bool,
    ) -> Result<Vec<u8>> {
        remote(comm)?;
        let mine = self.local(comm, |w| w.reduce_bytes(data, 0, op, commutative))?;
        let got = self.leaders_exchange(comm, mine.map(Bytes::from).unwrap_or_default(), TAG_IALLREDUCE)?;
        Ok(got.to_vec())
    }

    /// `MPI_Reduce_scatter`: each group gets the other group's data, combined
    /// and split over its own ranks (`lens[i]` bytes to local rank `i`).
    pub fn inter_reduce_scatter(
        &mut self,
        comm: &Comm,
        data: Vec<u8>,
        lens: &[usize],
        op: &mut Combine<'_>,
        commutative: bool,
    ) -> Result<Vec<u8>> {
        remote(comm)?;
        let mine = self.local(comm, |w| w.reduce_bytes(data, 0, op, commutative))?;
        let theirs = if comm.rank == 0 {
            let r = self.inter_irecv(comm, 0, TAG_IREDSCAT)?;
            let s = self.inter_isend(comm, mine.map(Bytes::from).unwrap_or_default(), 0, TAG_IREDSCAT)?;
            let got = self.wait_msg(r)?.data.into_bytes();
            self.wait(s)?;
            let mut blocks = Vec::with_capacity(lens.len());
            let mut off = 0;
            for &n in lens {
                let end = (off + n).min(got.len());
                blocks.push(got.slice(off.min(end)..end));
                off += n;
            }
            Some(blocks)
        } else {
            None
        };
        let me = lens.get(comm.rank as usize).copied().unwrap_or(0);
        Ok(self.local(comm, |w| w.scatterv_bytes(theirs, 0, me))?.to_vec())
    }

    /// `MPI_Gather(v)`: every process of the other group sends the root its
    /// block; the root gets them in rank order, `lens[i]` bytes from rank `i`.
    pub fn inter_gatherv(
        &mut self,
        comm: &Comm,
        data: Bytes,
        root: InterRoot,
        lens: Option<&[usize]>,
    ) -> Result<Option<Vec<Bytes>>> {
        let n = remote(comm)?.size();
        match root {
            InterRoot::Me => {
                let lens = lens.ok_or_else(|| Error::Invalid("gather: the root needs the block lengths".into()))?;
                let reqs = (0..n).map(|r| self.inter_irecv(comm, r, TAG_IGATHER)).collect::<Result<Vec<_>>>()?;
                let got: Vec<Bytes> = self
                    .waitall(reqs)?
                    .into_iter()
                    .map(|c| c.message().map(|m| m.data.into_bytes()).unwrap_or_default())
                    .collect();
                for (i, b) in got.iter().enumerate() {
                    if lens.get(i) != Some(&b.len()) {
                        return Err(crate::coll::mismatch("gather", b.len(), lens.get(i).copied().unwrap_or(0)));
                    }
                }
                Ok(Some(got))
            }
            InterRoot::Null => Ok(None),
            InterRoot::Remote(r) => {
                self.inter_send(comm, data, r, TAG_IGATHER)?;
                Ok(None)
            }
        }
    }

    /// `MPI_Scatter(v)`: the root sends block `i` to rank `i` of the other group.
    pub fn inter_scatterv(&mut self, comm: &Comm, blocks: Option<Vec<Bytes>>, root: InterRoot) -> Result<Bytes> {
        let n = remote(comm)?.size();
        match root {
            InterRoot::Me => {
                let blocks = blocks.ok_or_else(|| Error::Invalid("scatter: the root needs the blocks".into()))?;
                if blocks.len() != n as usize {
                    return Err(Error::Invalid(format!("scatter: {} blocks for {n} ranks", blocks.len())));
                }
                let sends = blocks
                    .into_iter()
                    .enumerate()
                    .map(|(i, b)| self.inter_isend(comm, b, i as u32, TAG_ISCATTER))
                    .collect::<Result<Vec<_>>>()?;
                self.wait_sends(sends)?;
                Ok(Bytes::new())
            }
            InterRoot::Null => Ok(Bytes::new()),
            InterRoot::Remote(r) => self.inter_recv(comm, r, TAG_ISCATTER),
        }
    }

    /// `MPI_Allgather(v)`: every process gets every block of the other group,
    /// in rank order.
    pub fn inter_allgatherv(&mut self, comm: &Comm, data: Bytes) -> Result<Vec<Bytes>> {
        let n = remote(comm)?.size();
        let blocks = vec![data; n as usize];
        self.inter_exchange(comm, blocks, TAG_IALLGATHER)
    }

    /// `MPI_Alltoall(v)`: block `j` goes to rank `j` of the other group; the
    /// result holds the block each of its ranks sent here.
    pub fn inter_alltoallv(&mut self, comm: &Comm, blocks: Vec<Bytes>) -> Result<Vec<Bytes>> {
        self.inter_exchange(comm, blocks, TAG_IALLTOALL)
    }

    fn inter_exchange(&mut self, comm: &Comm, blocks: Vec<Bytes>, tag: i32) -> Result<Vec<Bytes>> {
        let n = remote(comm)?.size();
        if blocks.len() != n as usize {
            return Err(Error::Invalid(format!("{} blocks for a remote group of {n}", blocks.len())));
        }
        let recvs = (0..n).map(|r| self.inter_irecv(comm, r, tag)).collect::<Result<Vec<_>>>()?;
        let sends = blocks
            .into_iter()
            .enumerate()
            .map(|(i, b)| self.inter_isend(comm, b, i as u32, tag))
            .collect::<Result<Vec<_>>>()?;
        let got = self
            .waitall(recvs)?
            .into_iter()
            .map(|c| c.message().map(|m| m.data.into_bytes()).unwrap_or_default())
            .collect();
        self.wait_sends(sends)?;
        Ok(got)
    }
}
