//! Collectives on the world communicator, over their own communicator id so they
//! never match user messages. Every rank must call them in the same order.
//!
//! - `barrier`: through rank 0 in one step on small groups (see `flat`),
//!   else dissemination, ⌈log2 p⌉ rounds.
//! - `bcast`, `gather`, `scatter`: binomial trees rooted at `root`.
//! - reductions: see `reduce`.
//! - `allgather`: Bruck's algorithm, ⌈log2 p⌉ rounds for any p.
//! - `alltoall`: every block posted at once on small groups (see `flat`: one
//!   wait, not p - 1), else pairwise exchange, p - 1 rounds.

use bytes::{Bytes, BytesMut};

use crate::error::{Error, Result};
use crate::pod::{self, Pod};
use crate::world::{Completed, Payload, Request, World};

const TAG_BARRIER: i32 = 1;
const TAG_BCAST: i32 = 2;
const TAG_GATHER: i32 = 5;
const TAG_SCATTER: i32 = 6;
const TAG_ALLGATHER: i32 = 7;
const TAG_ALLTOALL: i32 = 8;

pub(crate) fn mismatch(what: &str, got: usize, want: usize) -> Error {
    Error::Invalid(format!("{what}: got {got} bytes from a peer, expected {want} (buffer sizes differ between ranks)"))
}

impl World {
    /// This process's rank among the collectives' group.
    pub(crate) fn crank(&self) -> u32 {
        self.coll.me
    }

    /// The size of the collectives' group.
    pub(crate) fn csize(&self) -> u32 {
        self.coll.group.size()
    }

    /// The world rank of the collectives' group rank `r`.
    fn cpeer(&self, r: u32) -> Result<u32> {
        self.coll.group.world_rank(r).ok_or_else(|| Error::Rank(format!("rank {r} not below {}", self.csize())))
    }

    pub(crate) fn coll_isend(&mut self, data: impl Into<Payload>, to: u32, tag: i32) -> Result<Request> {
        let to = self.cpeer(to)?;
        self.isend_on(self.coll.id, data, to, tag)
    }

    pub(crate) fn coll_irecv(&mut self, from: u32, tag: i32) -> Result<Request> {
        let from = self.cpeer(from)?;
        self.irecv_on(self.coll.id, Some(from), Some(tag))
    }

    pub(crate) fn coll_send(&mut self, data: Bytes, to: u32, tag: i32) -> Result<()> {
        let to = self.cpeer(to)?;
        self.send_on(self.coll.id, data, to, tag)
    }

    pub(crate) fn coll_recv(&mut self, from: u32, tag: i32) -> Result<Bytes> {
        Ok(self.coll_recv_payload(from, tag)?.into_bytes())
    }

    /// [`World::coll_recv`] as the message came: a small one held in place.
    fn coll_recv_payload(&mut self, from: u32, tag: i32) -> Result<Payload> {
        let from = self.cpeer(from)?;
        Ok(self.recv_on(self.coll.id, Some(from), Some(tag))?.data)
    }

    /// Sends `data` to `to` while receiving from `from`.
    pub(crate) fn coll_sendrecv(&mut self, data: Bytes, to: u32, from: u32, tag: i32) -> Result<Bytes> {
        let rr = self.coll_irecv(from, tag)?;
        let sr = self.coll_isend(data, to, tag)?;
        let got = self.wait_msg(rr)?.data.into_bytes();
        self.wait(sr)?;
        Ok(got)
    }

    /// Rank relative to `root`, and back.
    pub(crate) fn rel(&self, root: u32) -> u32 {
        (self.crank() + self.csize() - root) % self.csize()
    }

    pub(crate) fn abs(&self, vr: u32, root: u32) -> u32 {
        (vr + root) % self.csize()
    }

    pub(crate) fn check_root(&self, root: u32) -> Result<()> {
        if root < self.csize() {
            Ok(())
        } else {
            Err(Error::Invalid(format!("root {root} not below {}", self.csize())))
        }
    }

    /// Returns once every rank has entered the barrier.
    pub fn barrier(&mut self) -> Result<()> {
        let (r, p) = (self.crank(), self.csize());
        if crate::flat::flat(p) {
            return self.flat_exchange(Bytes::new(), TAG_BARRIER, |_| Ok(Bytes::new())).map(drop);
        }
        let mut d = 1;
        while d < p {
            self.coll_sendrecv(Bytes::new(), (r + d) % p, (r + p - d) % p, TAG_BARRIER)?;
            d <<= 1;
        }
        Ok(())
    }

    /// Broadcasts bytes from `root`: its `data` comes back on every rank (ignored
    /// elsewhere).
    pub fn bcast_bytes(&mut self, data: Bytes, root: u32) -> Result<Bytes> {
        Ok(self.bcast_payload(data.into(), root)?.into_bytes())
    }

    /// [`World::bcast_bytes`] of a [`Payload`]: a small message, held in
    /// place, is passed on without an allocation.
    fn bcast_payload(&mut self, data: Payload, root: u32) -> Result<Payload> {
        self.check_root(root)?;
        let (p, vr) = (self.csize(), self.rel(root));
        let mut data = data;
        let mut mask = 1;
        while mask < p {
            if vr & mask != 0 {
                data = self.coll_recv_payload(self.abs(vr - mask, root), TAG_BCAST)?;
                break;
            }
            mask <<= 1;
        }
        let mut sends = Vec::new();
        mask >>= 1;
        while mask > 0 {
            if vr + mask < p {
                sends.push(self.coll_isend(data.clone(), self.abs(vr + mask, root), TAG_BCAST)?);
            }
            mask >>= 1;
        }
        self.wait_sends(sends)?;
        Ok(data)
    }

    /// Broadcasts `buf` from `root` into `buf` on every other rank (same length everywhere).
    pub fn bcast<T: Pod>(&mut self, buf: &mut [T], root: u32) -> Result<()> {
        let data = if self.crank() == root { pod::to_payload(buf) } else { Payload::new() };
        let got = self.bcast_payload(data, root)?;
        if self.crank() != root {
            pod::copy_into(buf, &got)?;
        }
        Ok(())
    }

    /// Gathers every rank's `send` (same length everywhere) on `root`, in rank order.
    pub fn gather<T: Pod>(&mut self, send: &[T], root: u32) -> Result<Option<Vec<T>>> {
        self.check_root(root)?;
        let (p, vr) = (self.csize(), self.rel(root));
        let n = std::mem::size_of_val(send);
        let mut buf = BytesMut::from(bytemuck::cast_slice::<T, u8>(send));
        let mut mask = 1;
        while mask < p {
            if vr & mask == 0 {
                let child = vr + mask;
                if child < p {
                    let x = self.coll_recv(self.abs(child, root), TAG_GATHER)?;
                    let want = mask.min(p - child) as usize * n;
                    if x.len() != want {
                        return Err(mismatch("gather", x.len(), want));
                    }
                    buf.extend_from_slice(&x);
                }
            } else {
                self.coll_send(buf.freeze(), self.abs(vr - mask, root), TAG_GATHER)?;
                return Ok(None);
            }
            mask <<= 1;
        }
        // Block i (relative rank i) belongs to rank (i + root) % p.
        let mut out = vec![0u8; buf.len()];
        for i in 0..p as usize {
            let a = self.abs(i as u32, root) as usize;
            out[a * n..(a + 1) * n].copy_from_slice(&buf[i * n..(i + 1) * n]);
        }
        pod::from_bytes(&out).map(Some)
    }

    /// Splits `send` (on `root`: `size` equal blocks in rank order; ignored
    /// elsewhere) and gives each rank its block.
    pub fn scatter<T: Pod>(&mut self, send: Option<&[T]>, root: u32) -> Result<Vec<T>> {
        self.check_root(root)?;
        let (p, vr) = (self.csize(), self.rel(root));
        let mut mask = 1;
        let (buf, n) = if vr == 0 {
            let all: &[u8] =
                bytemuck::cast_slice(send.ok_or_else(|| Error::Invalid("scatter root needs data".into()))?);
            if all.len() % p as usize != 0 {
                return Err(Error::Invalid(format!("scatter of {} bytes over {p} ranks", all.len())));
            }
            let n = all.len() / p as usize;
            let mut b = BytesMut::with_capacity(all.len());
            for i in 0..p {
                let a = self.abs(i, root) as usize;
                b.extend_from_slice(&all[a * n..(a + 1) * n]);
            }
            while mask < p {
                mask <<= 1;
            }
            (b.freeze(), n)
        } else {
            while vr & mask == 0 {
                mask <<= 1;
            }
            let b = self.coll_recv(self.abs(vr - mask, root), TAG_SCATTER)?;
            let blocks = mask.min(p - vr) as usize;
            if b.len() % blocks != 0 {
                return Err(mismatch("scatter", b.len(), b.len() / blocks * blocks));
            }
            let n = b.len() / blocks;
            (b, n)
        };
        let mut sends = Vec::new();
        mask >>= 1;
        while mask > 0 {
            let child = vr + mask;
            if child < p {
                let off = (child - vr) as usize * n;
                let len = mask.min(p - child) as usize * n;
                sends.push(self.coll_isend(buf.slice(off..off + len), self.abs(child, root), TAG_SCATTER)?);
            }
            mask >>= 1;
        }
        self.wait_sends(sends)?;
        pod::from_bytes(&buf[..n])
    }

    /// Every rank's `send` (same length everywhere) on every rank, in rank order.
    pub fn allgather<T: Pod>(&mut self, send: &[T]) -> Result<Vec<T>> {
        let (r, p) = (self.crank(), self.csize());
        let n = std::mem::size_of_val(send);
        let mut buf = BytesMut::from(bytemuck::cast_slice::<T, u8>(send));
        let mut d = 1;
        while d < p {
            let cnt = d.min(p - d) as usize;
            let out = pod::shared_bytes(&buf[..cnt * n]);
            let x = self.coll_sendrecv(out, (r + p - d) % p, (r + d) % p, TAG_ALLGATHER)?;
            if x.len() != cnt * n {
                return Err(mismatch("allgather", x.len(), cnt * n));
            }
            buf.extend_from_slice(&x);
            d <<= 1;
        }
        // Block i belongs to rank (r + i) % p.
        let mut out = vec![0u8; buf.len()];
        for i in 0..p as usize {
            let a = (r as usize + i) % p as usize;
            out[a * n..(a + 1) * n].copy_from_slice(&buf[i * n..(i + 1) * n]);
        }
        pod::from_bytes(&out)
    }

    /// `send` holds `size` equal blocks; block `j` goes to rank `j`, and the result
    /// holds the block each rank sent here, in rank order.
    pub fn alltoall<T: Pod>(&mut self, send: &[T]) -> Result<Vec<T>> {
        let (r, p) = (self.crank(), self.csize());
        let all: &[u8] = bytemuck::cast_slice(send);
        if all.len() % p as usize != 0 {
            return Err(Error::Invalid(format!("alltoall of {} bytes over {p} ranks", all.len())));
        }
        let n = all.len() / p as usize;
        let mut out = vec![0u8; all.len()];
        let me = r as usize;
        out[me * n..(me + 1) * n].copy_from_slice(&all[me * n..(me + 1) * n]);
        let block = |to: u32| pod::shared_bytes(&all[to as usize * n..(to as usize + 1) * n]);
        let mut put = |from: u32, x: &[u8]| {
            if x.len() != n {
                return Err(mismatch("alltoall", x.len(), n));
            }
            out[from as usize * n..(from as usize + 1) * n].copy_from_slice(x);
            Ok(())
        };
        // Peer s steps ahead gets its block while the one s behind sends ours.
        let (to, from) = (|s: u32| (r + s) % p, |s: u32| (r + p - s) % p);
        if crate::flat::flat(p) {
            let recvs = (1..p).map(|s| self.coll_irecv(from(s), TAG_ALLTOALL)).collect::<Result<Vec<_>>>()?;
            let sends =
                (1..p).map(|s| self.coll_isend(block(to(s)), to(s), TAG_ALLTOALL)).collect::<Result<Vec<_>>>()?;
            for (s, c) in (1..p).zip(self.waitall(recvs)?) {
                if let Completed::Received(m) = c {
                    put(from(s), &m.data)?;
                }
            }
            self.wait_sends(sends)?;
        } else {
            for s in 1..p {
                put(from(s), &self.coll_sendrecv(block(to(s)), to(s), from(s), TAG_ALLTOALL)?)?;
            }
        }
        pod::from_bytes(&out)
    }
}
