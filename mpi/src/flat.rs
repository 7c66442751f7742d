//! Collectives of small groups in one step through a root.
//!
//! Every other rank sends its part to the collectives' rank 0 and waits for
//! the answer; rank 0 takes all the parts, in rank order, and sends the answer
//! to each. Trees and recursive doubling take ⌈log2 p⌉ steps, and at each
//! step a rank waits on a partner that must have finished the step before:
//! when ranks outnumber cores (8 ranks on 2), each of those waits is a trip
//! through the run queue of a core (a context switch of a few µs, costlier
//! than the message), so an 8-rank Allreduce took about 20 context switches.
//! Here a rank other than the root waits once, and in a loop of collectives
//! the run that picks up one answer also sends the next part, so about one
//! run of each rank per call suffices. The root handles 2(p - 1) messages,
//! which for p up to [`FLAT_MAX`] costs less than the steps saved.
//!
//! The shape depends on what every rank knows alike (the group size, and for
//! Allreduce the part's length: [`flat_for`]), so every rank picks the same.

use bytes::Bytes;

use crate::error::Result;
use crate::world::{Completed, World};

/// Largest group whose collectives go through the root in one step.
pub(crate) const FLAT_MAX: u32 = 8;

/// The root of the flat shape.
const ROOT: u32 = 0;

/// Largest part (bytes per rank) a data-carrying collective sends through
/// the root in one step. Beyond it bandwidth, not waits, sets the time: the
/// root's link would carry p - 1 parts each way where a tree's carries
/// log2 p (ranks on other hosts share nothing but that link).
pub(crate) const FLAT_MAX_BYTES: usize = 64 << 10;

/// Whether collectives on `p` ranks go through the root in one step (two
/// ranks exchange directly: one step either way, and no rank waits twice).
pub(crate) fn flat(p: u32) -> bool {
    (3..=FLAT_MAX).contains(&p)
}

/// Whether a collective on `p` ranks whose parts are `bytes` long goes
/// through the root in one step. Every rank's part has the same length (as
/// MPI requires of the calls), so every rank picks the same shape.
pub(crate) fn flat_for(p: u32, bytes: usize) -> bool {
    flat(p) && bytes <= FLAT_MAX_BYTES
}

impl World {
    /// Sends `up` to the root and returns its answer; on the root, `answer`
    /// gets every rank's part in rank order (its own first) and what it
    /// returns goes to every rank (nothing when it fails).
    pub(crate) fn flat_exchange(
        &mut self,
        up: Bytes,
        tag: i32,
        answer: impl FnOnce(Vec<Bytes>) -> Result<Bytes>,
    ) -> Result<Bytes> {
        let p = self.csize();
        if self.crank() != ROOT {
            // The receive is posted first, so the answer lands in it, not in
            // the unexpected queue.
            let rr = self.coll_irecv(ROOT, tag)?;
            let sr = self.coll_isend(up, ROOT, tag)?;
            let down = self.wait_msg(rr)?.data.into_bytes();
            self.wait(sr)?;
            return Ok(down);
        }
        let reqs = (1..p).map(|r| self.coll_irecv(r, tag)).collect::<Result<Vec<_>>>()?;
        let mut parts = Vec::with_capacity(p as usize);
        parts.push(up);
        for c in self.waitall(reqs)? {
            if let Completed::Received(m) = c {
                parts.push(m.data.into_bytes());
            }
        }
        // A failed answer (parts of different lengths) still releases the
        // others, with nothing, which they take for a mismatch.
        let down = answer(parts);
        let out = down.as_ref().map_or_else(|_| Bytes::new(), Bytes::clone);
        let sends = (1..p).map(|r| self.coll_isend(out.clone(), r, tag)).collect::<Result<Vec<_>>>()?;
        self.wait_sends(sends)?;
        down
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_groups_go_through_the_root_and_pairs_and_large_ones_do_not() {
        assert!(!flat(1) && !flat(2), "one rank has no one to wait for; two exchange directly");
        assert!((3..=8).all(flat));
        assert!(!flat(9) && !flat(64), "the root's 2(p - 1) messages would outweigh log2 p steps");
    }

    #[test]
    fn large_parts_take_the_tree_whatever_the_group() {
        assert!(flat_for(8, 8) && flat_for(8, FLAT_MAX_BYTES));
        assert!(!flat_for(8, FLAT_MAX_BYTES + 1), "1 MiB parts: the root's link would carry 7 MiB each way");
        assert!(!flat_for(2, 8) && !flat_for(9, 8));
    }
}
