//! Reductions over bytes with any combining function, and the typed ones of
//! the Rust API on top: `reduce`, `allreduce`, `scan`, `reduce_scatter`.
//!
//! A [`Combine`] computes `inout = in op inout` (MPI's order for user
//! functions) on whole buffers. Results keep rank order for operations that
//! do not commute: `x0 op x1 op ... op x(p-1)`.
//!
//! - `reduce`: a binomial tree; rooted at `root` (relative ranks) when the
//!   operation commutes, else at rank 0 (in rank order) and then sent to `root`.
//! - `allreduce`: through rank 0 in one step on small groups with parts up
//!   to 64 KiB (see `flat`; in rank order, so for any operation), else
//!   recursive doubling (ranks beyond the largest power of two fold into a
//!   partner first and get the result back at the end) when the operation
//!   commutes, else `reduce` to 0 and `bcast`.
//! - `scan`: a chain, each rank combining its predecessor's prefix.
//! - `reduce_scatter`: `reduce` to 0, then each rank's block sent to it.

use bytes::Bytes;

use crate::coll::mismatch;
use crate::error::Result;
use crate::pod::{self, Op, Pod};
use crate::world::World;

const TAG_REDUCE: i32 = 3;
const TAG_ALLREDUCE: i32 = 4;
const TAG_SCAN: i32 = 9;
const TAG_REDSCAT: i32 = 10;

/// `inout = in op inout`, on two buffers of the same length.
pub type Combine<'a> = dyn FnMut(&[u8], &mut [u8]) -> Result<()> + 'a;

fn same_len(a: &[u8], b: &[u8]) -> Result<()> {
    if a.len() == b.len() { Ok(()) } else { Err(mismatch("reduce", b.len(), a.len())) }
}

impl World {
    /// Combines every rank's `data` with `op` (commutative or not); the result
    /// on `root` (`None` elsewhere).
    pub fn reduce_bytes(
        &mut self,
        data: Vec<u8>,
        root: u32,
        op: &mut Combine<'_>,
        commutative: bool,
    ) -> Result<Option<Vec<u8>>> {
        self.check_root(root)?;
        let tree_root = if commutative { root } else { 0 };
        let got = self.reduce_tree(data, tree_root, op)?;
        if tree_root == root {
            return Ok(got);
        }
        let me = self.crank();
        match got {
            Some(acc) if me != root => {
                self.coll_send(Bytes::from(acc), root, TAG_REDUCE)?;
                Ok(None)
            }
            Some(acc) => Ok(Some(acc)),
            None if me == root => Ok(Some(self.coll_recv(tree_root, TAG_REDUCE)?.to_vec())),
            None => Ok(None),
        }
    }

    /// A binomial reduction to `root`; in relative rank order, so in rank
    /// order when `root` is 0.
    fn reduce_tree(&mut self, data: Vec<u8>, root: u32, op: &mut Combine<'_>) -> Result<Option<Vec<u8>>> {
        let (p, vr) = (self.csize(), self.rel(root));
        let mut acc = data;
        let mut mask = 1;
        while mask < p {
            if vr & mask == 0 {
                if vr + mask < p {
                    // acc covers [vr, vr + mask), the message the next ranks.
                    let mut hi = self.coll_recv(self.abs(vr + mask, root), TAG_REDUCE)?.to_vec();
                    same_len(&acc, &hi)?;
                    op(&acc, &mut hi)?;
                    acc = hi;
                }
            } else {
                self.coll_send(Bytes::from(acc), self.abs(vr - mask, root), TAG_REDUCE)?;
                return Ok(None);
            }
            mask <<= 1;
        }
        Ok(Some(acc))
    }

    /// Combines every rank's `data` with `op`; the result on every rank.
    pub fn allreduce_bytes(&mut self, data: Vec<u8>, op: &mut Combine<'_>, commutative: bool) -> Result<Vec<u8>> {
        if crate::flat::flat_for(self.csize(), data.len()) {
            let n = data.len();
            let down = self.flat_exchange(Bytes::from(data), TAG_ALLREDUCE, |parts| {
                // x0 op (x1 op (... op x(p-1))): rank order, for any operation.
                let mut parts = parts.into_iter().rev();
                let mut acc = parts.next().expect("one part per rank").to_vec();
                for x in parts {
                    same_len(&acc, &x)?;
                    op(&x, &mut acc)?;
                }
                Ok(Bytes::from(acc))
            })?;
            // The root answers a length mismatch with nothing.
            return if down.len() == n { Ok(down.to_vec()) } else { Err(mismatch("allreduce", down.len(), n)) };
        }
        if !commutative {
            let got = self.reduce_tree(data, 0, op)?;
            let all = self.bcast_bytes(got.map(Bytes::from).unwrap_or_default(), 0)?;
            return Ok(all.to_vec());
        }
        let (r, p) = (self.crank(), self.csize());
        let pof2 = if p.is_power_of_two() { p } else { p.next_power_of_two() / 2 };
        let rem = p - pof2;
        let mut acc = data;
        if r >= pof2 {
            // Fold into a partner, then get the result back.
            self.coll_send(Bytes::from(acc), r - pof2, TAG_ALLREDUCE)?;
            return Ok(self.coll_recv(r - pof2, TAG_ALLREDUCE)?.to_vec());
        }
        if r < rem {
            let x = self.coll_recv(r + pof2, TAG_ALLREDUCE)?;
            same_len(&acc, &x)?;
            op(&x, &mut acc)?;
        }
        let mut mask = 1;
        while mask < pof2 {
            let partner = r ^ mask;
            let x = self.coll_sendrecv(Bytes::copy_from_slice(&acc), partner, partner, TAG_ALLREDUCE)?;
            same_len(&acc, &x)?;
            op(&x, &mut acc)?;
            mask <<= 1;
        }
        if r < rem {
            self.coll_send(Bytes::copy_from_slice(&acc), r + pof2, TAG_ALLREDUCE)?;
        }
        Ok(acc)
    }

    /// The inclusive prefix reduction: rank `r` gets `x0 op ... op xr`.
    pub fn scan_bytes(&mut self, data: Vec<u8>, op: &mut Combine<'_>) -> Result<Vec<u8>> {
        let (r, p) = (self.crank(), self.csize());
        let mut acc = data;
        if r > 0 {
            let prefix = self.coll_recv(r - 1, TAG_SCAN)?;
            same_len(&prefix, &acc)?;
            op(&prefix, &mut acc)?;
        }
        if r + 1 < p {
            self.coll_send(Bytes::copy_from_slice(&acc), r + 1, TAG_SCAN)?;
        }
        Ok(acc)
    }

    /// Reduces every rank's `data` (blocks of `lens[i]` bytes for rank `i`, in
    /// rank order) and gives rank `i` its block of the result.
    pub fn reduce_scatter_bytes(
        &mut self,
        data: Vec<u8>,
        lens: &[usize],
        op: &mut Combine<'_>,
        commutative: bool,
    ) -> Result<Vec<u8>> {
        let p = self.csize();
        if lens.len() != p as usize || lens.iter().sum::<usize>() != data.len() {
            return Err(mismatch("reduce_scatter", data.len(), lens.iter().sum()));
        }
        let me = self.crank();
        match self.reduce_bytes(data, 0, op, commutative)? {
            Some(all) => {
                let all = Bytes::from(all);
                let mut sends = Vec::new();
                let mut off = 0;
                let mut mine = Bytes::new();
                for (i, &n) in lens.iter().enumerate() {
                    if i as u32 == me {
                        mine = all.slice(off..off + n);
                    } else {
                        sends.push(self.coll_isend(all.slice(off..off + n), i as u32, TAG_REDSCAT)?);
                    }
                    off += n;
                }
                self.wait_sends(sends)?;
                Ok(mine.to_vec())
            }
            None => Ok(self.coll_recv(0, TAG_REDSCAT)?.to_vec()),
        }
    }

    /// Combines every rank's `send` element-wise with `op`; the result on `root`
    /// (`None` elsewhere).
    pub fn reduce<T: Pod>(&mut self, send: &[T], op: Op, root: u32) -> Result<Option<Vec<T>>> {
        let got = self.reduce_bytes(bytemuck::cast_slice::<T, u8>(send).to_vec(), root, &mut typed::<T>(op), true)?;
        got.map(|v| pod::from_bytes(&v)).transpose()
    }

    /// Combines every rank's `send` element-wise with `op`; the result on every rank.
    pub fn allreduce<T: Pod>(&mut self, send: &[T], op: Op) -> Result<Vec<T>> {
        let got = self.allreduce_bytes(bytemuck::cast_slice::<T, u8>(send).to_vec(), &mut typed::<T>(op), true)?;
        pod::from_bytes(&got)
    }

    /// The inclusive prefix reduction of `send` with `op`.
    pub fn scan<T: Pod>(&mut self, send: &[T], op: Op) -> Result<Vec<T>> {
        let got = self.scan_bytes(bytemuck::cast_slice::<T, u8>(send).to_vec(), &mut typed::<T>(op))?;
        pod::from_bytes(&got)
    }
}

/// `op` on buffers of `T`, in place where the bytes are aligned for `T` (else
/// through aligned copies).
fn typed<T: Pod>(op: Op) -> impl FnMut(&[u8], &mut [u8]) -> Result<()> {
    move |a: &[u8], b: &mut [u8]| {
        let copied;
        let x: &[T] = match bytemuck::try_cast_slice(a) {
            Ok(x) => x,
            Err(_) => {
                copied = pod::from_bytes::<T>(a)?;
                &copied
            }
        };
        // Op::apply computes acc = acc op x; our operations commute, so this is
        // x op acc (MPI's order) too.
        match bytemuck::try_cast_slice_mut::<u8, T>(b) {
            Ok(acc) => op.apply(acc, x),
            Err(_) => {
                let mut acc: Vec<T> = pod::from_bytes(b)?;
                op.apply(&mut acc, x);
                b.copy_from_slice(bytemuck::cast_slice(&acc));
            }
        }
        Ok(())
    }
}
