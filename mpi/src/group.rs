//! Groups (MPI-1 §6.3): ordered sets of processes, named by their world ranks,
//! and the set operations that build them.

use std::sync::Arc;

use crate::error::{Error, Result};

/// How two groups (or communicators) relate (`MPI_Group_compare`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Similarity {
    /// Same members in the same order (for communicators: the same context too).
    Ident,
    /// Communicators only: same members in the same order, another context.
    Congruent,
    /// Same members, another order.
    Similar,
    /// Anything else.
    Unequal,
}

/// An ordered set of processes, each named by its world rank; the position in
/// the list is the rank in the group.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Group {
    ranks: Arc<[u32]>,
}

fn invalid(what: String) -> Error {
    Error::Group(what)
}

impl Group {
    /// The group of these world ranks, in this order; they must be distinct.
    pub fn new(ranks: Vec<u32>) -> Result<Group> {
        let mut seen = ranks.clone();
        seen.sort_unstable();
        if seen.windows(2).any(|w| w[0] == w[1]) {
            return Err(invalid(format!("a process appears twice in {ranks:?}")));
        }
        Ok(Group { ranks: ranks.into() })
    }

    /// The group of world ranks `0..n`.
    pub fn first(n: u32) -> Group {
        Group { ranks: (0..n).collect::<Vec<_>>().into() }
    }

    /// The group with no process.
    pub fn empty() -> Group {
        Group { ranks: Arc::from([]) }
    }

    /// The number of processes.
    pub fn size(&self) -> u32 {
        self.ranks.len() as u32
    }

    /// The members' world ranks in group order.
    pub fn ranks(&self) -> &[u32] {
        &self.ranks
    }

    /// The world rank of group rank `r`.
    pub fn world_rank(&self, r: u32) -> Option<u32> {
        self.ranks.get(r as usize).copied()
    }

    /// The group rank of world rank `w`, if a member.
    pub fn rank_of(&self, w: u32) -> Option<u32> {
        self.ranks.iter().position(|&x| x == w).map(|i| i as u32)
    }

    fn contains(&self, w: u32) -> bool {
        self.ranks.contains(&w)
    }

    fn check_rank(&self, r: i64) -> Result<usize> {
        usize::try_from(r)
            .ok()
            .filter(|&r| r < self.ranks.len())
            .ok_or_else(|| Error::Rank(format!("rank {r} is not in a group of {}", self.size())))
    }

    /// This group's members, then `other`'s that are not in it.
    pub fn union(&self, other: &Group) -> Group {
        let mut v = self.ranks.to_vec();
        v.extend(other.ranks.iter().filter(|&&w| !self.contains(w)));
        Group { ranks: v.into() }
    }

    /// This group's members that are in `other`, in this group's order.
    pub fn intersection(&self, other: &Group) -> Group {
        Group { ranks: self.ranks.iter().copied().filter(|&w| other.contains(w)).collect::<Vec<_>>().into() }
    }

    /// This group's members that are not in `other`, in this group's order.
    pub fn difference(&self, other: &Group) -> Group {
        Group { ranks: self.ranks.iter().copied().filter(|&w| !other.contains(w)).collect::<Vec<_>>().into() }
    }

    /// The members of ranks `ranks`, in that order (distinct, all in the group).
    pub fn incl(&self, ranks: &[i32]) -> Result<Group> {
        let v = ranks.iter().map(|&r| self.check_rank(r.into()).map(|i| self.ranks[i])).collect::<Result<Vec<_>>>()?;
        Group::new(v).map_err(|_| Error::Rank(format!("ranks {ranks:?} name a process twice")))
    }

    /// The members except those of ranks `ranks` (distinct, all in the group).
    pub fn excl(&self, ranks: &[i32]) -> Result<Group> {
        let mut drop = vec![false; self.ranks.len()];
        for &r in ranks {
            let i = self.check_rank(r.into())?;
            if std::mem::replace(&mut drop[i], true) {
                return Err(Error::Rank(format!("rank {r} excluded twice")));
            }
        }
        let v = self.ranks.iter().zip(&drop).filter(|(_, d)| !**d).map(|(w, _)| *w).collect::<Vec<_>>();
        Ok(Group { ranks: v.into() })
    }

    /// The group ranks that (first, last, stride) triplets name, in order.
    fn expand(&self, ranges: &[[i32; 3]]) -> Result<Vec<i32>> {
        let mut out = Vec::new();
        for &[first, last, stride] in ranges {
            if stride == 0 {
                return Err(Error::Invalid(format!("range ({first}, {last}, 0) has a zero stride")));
            }
            self.check_rank(first.into())?;
            self.check_rank(last.into())?;
            let (mut r, stride) = (i64::from(first), i64::from(stride));
            while (stride > 0 && r <= i64::from(last)) || (stride < 0 && r >= i64::from(last)) {
                out.push(r as i32);
                r += stride;
            }
        }
        Ok(out)
    }

    /// `incl` of the ranks the (first, last, stride) triplets name.
    pub fn range_incl(&self, ranges: &[[i32; 3]]) -> Result<Group> {
        self.incl(&self.expand(ranges)?)
    }

    /// `excl` of the ranks the (first, last, stride) triplets name.
    pub fn range_excl(&self, ranges: &[[i32; 3]]) -> Result<Group> {
        self.excl(&self.expand(ranges)?)
    }

    /// The rank in `other` of each of this group's ranks `ranks` (`None` when
    /// that process is not in `other`).
    pub fn translate(&self, ranks: &[i32], other: &Group) -> Result<Vec<Option<u32>>> {
        ranks.iter().map(|&r| self.check_rank(r.into()).map(|i| other.rank_of(self.ranks[i]))).collect()
    }

    /// `MPI_Group_compare`.
    pub fn compare(&self, other: &Group) -> Similarity {
        if self.ranks == other.ranks {
            return Similarity::Ident;
        }
        let (mut a, mut b) = (self.ranks.to_vec(), other.ranks.to_vec());
        a.sort_unstable();
        b.sort_unstable();
        if a == b { Similarity::Similar } else { Similarity::Unequal }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(v: &[u32]) -> Group {
        Group::new(v.to_vec()).unwrap()
    }

    #[test]
    fn set_operations_keep_the_standards_order() {
        let (a, b) = (g(&[5, 1, 3, 7]), g(&[3, 9, 5, 2]));
        assert_eq!(a.union(&b).ranks(), [5, 1, 3, 7, 9, 2]);
        assert_eq!(a.intersection(&b).ranks(), [5, 3]);
        assert_eq!(a.difference(&b).ranks(), [1, 7]);
        assert_eq!(a.incl(&[3, 0]).unwrap().ranks(), [7, 5]);
        assert_eq!(a.excl(&[1, 2]).unwrap().ranks(), [5, 7]);
        assert_eq!(a.range_incl(&[[3, 0, -2]]).unwrap().ranks(), [7, 1]);
        assert_eq!(a.range_excl(&[[0, 3, 3]]).unwrap().ranks(), [1, 3]);
        assert_eq!(a.translate(&[0, 1, 2], &b).unwrap(), [Some(2), None, Some(0)]);
        assert_eq!(a.compare(&a.clone()), Similarity::Ident);
        assert_eq!(a.compare(&g(&[1, 3, 5, 7])), Similarity::Similar);
        assert_eq!(a.compare(&b), Similarity::Unequal);
        assert_eq!(Group::empty().union(&Group::empty()).size(), 0);
        assert_eq!(Group::first(3).rank_of(2), Some(2));
    }

    #[test]
    fn bad_rank_lists_are_refused() {
        let a = Group::first(4);
        assert!(matches!(a.incl(&[0, 4]), Err(Error::Rank(_))));
        assert!(matches!(a.incl(&[1, 1]), Err(Error::Rank(_))));
        assert!(matches!(a.excl(&[-1]), Err(Error::Rank(_))));
        assert!(matches!(a.excl(&[2, 2]), Err(Error::Rank(_))));
        assert!(matches!(a.range_incl(&[[0, 3, 0]]), Err(Error::Invalid(_))));
        assert!(matches!(a.range_incl(&[[0, 1, 1], [1, 2, 1]]), Err(Error::Rank(_))));
        assert!(Group::new(vec![1, 2, 1]).is_err());
    }
}
