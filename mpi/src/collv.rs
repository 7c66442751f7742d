//! The collectives whose blocks differ in length between ranks: `gatherv`,
//! `scatterv`, `allgatherv`, `alltoallv`. Blocks are bytes; every rank must
//! pass the lengths the others send it (checked on arrival).
//!
//! The root of `gatherv` / `scatterv` talks to each rank directly (all
//! receives or sends posted at once); `allgatherv` passes blocks around a ring
//! (p - 1 steps); `alltoallv` exchanges pairwise (p - 1 rounds).

use bytes::Bytes;

use crate::coll::mismatch;
use crate::error::{Error, Result};
use crate::world::World;

const TAG_GATHERV: i32 = 11;
const TAG_SCATTERV: i32 = 12;
const TAG_ALLGATHERV: i32 = 13;
const TAG_ALLTOALLV: i32 = 14;

fn check_len(what: &str, got: &Bytes, want: usize) -> Result<()> {
    if got.len() == want { Ok(()) } else { Err(mismatch(what, got.len(), want)) }
}

fn per_rank<T>(what: &str, v: &[T], p: u32) -> Result<()> {
    if v.len() == p as usize {
        Ok(())
    } else {
        Err(Error::Invalid(format!("{what}: {} entries for {p} ranks", v.len())))
    }
}

impl World {
    /// Every rank's `data` on `root`, in rank order; `lens` (on the root) says
    /// how long each rank's block is.
    pub fn gatherv_bytes(&mut self, data: Bytes, root: u32, lens: Option<&[usize]>) -> Result<Option<Vec<Bytes>>> {
        self.check_root(root)?;
        let (me, p) = (self.crank(), self.csize());
        if me != root {
            self.coll_send(data, root, TAG_GATHERV)?;
            return Ok(None);
        }
        let lens = lens.ok_or_else(|| Error::Invalid("gatherv: the root needs the block lengths".into()))?;
        per_rank("gatherv", lens, p)?;
        let mut reqs = Vec::new();
        for r in (0..p).filter(|&r| r != me) {
            reqs.push(self.coll_irecv(r, TAG_GATHERV)?);
        }
        let mut got = self.waitall(reqs)?.into_iter();
        let mut out = Vec::with_capacity(p as usize);
        for r in 0..p {
            let b = if r == me {
                data.clone()
            } else {
                got.next().and_then(|c| c.message()).map(|m| m.data.into_bytes()).unwrap_or_default()
            };
            check_len("gatherv", &b, lens[r as usize])?;
            out.push(b);
        }
        Ok(Some(out))
    }

    /// Gives rank `i` block `i` of `blocks` (given on `root` only); `len` is
    /// the length this rank expects.
    pub fn scatterv_bytes(&mut self, blocks: Option<Vec<Bytes>>, root: u32, len: usize) -> Result<Bytes> {
        self.check_root(root)?;
        let (me, p) = (self.crank(), self.csize());
        if me != root {
            let b = self.coll_recv(root, TAG_SCATTERV)?;
            check_len("scatterv", &b, len)?;
            return Ok(b);
        }
        let blocks = blocks.ok_or_else(|| Error::Invalid("scatterv: the root needs the blocks".into()))?;
        per_rank("scatterv", &blocks, p)?;
        let mut sends = Vec::new();
        let mut mine = Bytes::new();
        for (r, b) in blocks.into_iter().enumerate() {
            if r as u32 == me {
                mine = b;
            } else {
                sends.push(self.coll_isend(b, r as u32, TAG_SCATTERV)?);
            }
        }
        self.wait_sends(sends)?;
        check_len("scatterv", &mine, len)?;
        Ok(mine)
    }

    /// Every rank's `data` on every rank, in rank order; `lens[i]` is rank
    /// `i`'s length.
    pub fn allgatherv_bytes(&mut self, data: Bytes, lens: &[usize]) -> Result<Vec<Bytes>> {
        let (me, p) = (self.crank(), self.csize());
        per_rank("allgatherv", lens, p)?;
        check_len("allgatherv", &data, lens[me as usize])?;
        let mut out = vec![Bytes::new(); p as usize];
        out[me as usize] = data;
        let (right, left) = ((me + 1) % p, (me + p - 1) % p);
        for s in 0..p.saturating_sub(1) {
            // Pass on the block received last (first our own), get the next.
            let send = out[((me + p - s) % p) as usize].clone();
            let from = ((me + p - s - 1) % p) as usize;
            let got = self.coll_sendrecv(send, right, left, TAG_ALLGATHERV)?;
            check_len("allgatherv", &got, lens[from])?;
            out[from] = got;
        }
        Ok(out)
    }

    /// Block `j` of `blocks` goes to rank `j`; the result holds the block each
    /// rank sent here (of length `lens[i]` from rank `i`), in rank order.
    pub fn alltoallv_bytes(&mut self, blocks: Vec<Bytes>, lens: &[usize]) -> Result<Vec<Bytes>> {
        let (me, p) = (self.crank(), self.csize());
        per_rank("alltoallv", &blocks, p)?;
        per_rank("alltoallv", lens, p)?;
        let mut out = vec![Bytes::new(); p as usize];
        out[me as usize] = blocks[me as usize].clone();
        check_len("alltoallv", &out[me as usize], lens[me as usize])?;
        for s in 1..p {
            let (to, from) = ((me + s) % p, (me + p - s) % p);
            let got = self.coll_sendrecv(blocks[to as usize].clone(), to, from, TAG_ALLTOALLV)?;
            check_len("alltoallv", &got, lens[from as usize])?;
            out[from as usize] = got;
        }
        Ok(out)
    }
}
