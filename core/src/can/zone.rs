//! The geometry of CAN: points of the d-dimensional torus and zones as boxes.
//!
//! Coordinates are `u32` per dimension, wrapping at 2^32. Every zone comes from
//! halving: the whole space splits along its longest side, the lowest dimension on
//! ties, and so does every half. From a cube that rule splits the dimensions in
//! turn (0, 1, ..., d-1, 0, ...), so a zone is a node of one implicit binary tree,
//! named by its depth and its lower corner, and its split history (parent,
//! sibling, children) follows from those two alone: no node needs a record of
//! which split made its zone. Zones never wrap; only distances and adjacency do.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::id::Id;

/// Most dimensions a CAN may have.
pub const MAX_DIMS: usize = 8;
/// Bits of one coordinate.
const COORD_BITS: u32 = 32;
/// Size of one dimension: coordinates wrap at this.
const SPAN: u64 = 1 << COORD_BITS;

/// A point of the torus.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "Vec<u32>", into = "Vec<u32>")]
pub struct Point {
    dims: u8,
    c: [u32; MAX_DIMS],
}

impl Point {
    /// The point with these coordinates, one per dimension (1 to [`MAX_DIMS`] of them).
    pub fn new(coords: &[u32]) -> Option<Point> {
        if coords.is_empty() || coords.len() > MAX_DIMS {
            return None;
        }
        let mut c = [0; MAX_DIMS];
        c[..coords.len()].copy_from_slice(coords);
        Some(Point { dims: coords.len() as u8, c })
    }

    /// Where `key` lives in `dims` dimensions: consecutive slices of its 160-bit
    /// digest, one per dimension, `min(32, 160 / dims)` bits each, left-aligned in
    /// the coordinate (so up to five dimensions take 32 bits each).
    ///
    /// # Panics
    /// If `dims` is not in 1..=[`MAX_DIMS`] (a configuration bug).
    pub fn of_key(key: Id, dims: usize) -> Point {
        assert!((1..=MAX_DIMS).contains(&dims), "CAN dimensions must be 1..=8, got {dims}");
        let bytes = key.as_bytes();
        let width = (160 / dims as u32).min(COORD_BITS);
        let bit = |i: u32| (bytes[(i / 8) as usize] >> (7 - i % 8)) & 1;
        let mut c = [0u32; MAX_DIMS];
        for (k, ck) in c.iter_mut().enumerate().take(dims) {
            let start = k as u32 * width;
            let v = (start..start + width).fold(0u64, |acc, i| acc << 1 | u64::from(bit(i)));
            *ck = (v << (COORD_BITS - width)) as u32;
        }
        Point { dims: dims as u8, c }
    }

    /// Number of dimensions.
    pub fn dims(&self) -> usize {
        usize::from(self.dims)
    }

    /// The coordinates, one per dimension.
    pub fn coords(&self) -> &[u32] {
        &self.c[..self.dims()]
    }
}

impl TryFrom<Vec<u32>> for Point {
    type Error = String;
    fn try_from(v: Vec<u32>) -> Result<Self, String> {
        Point::new(&v).ok_or_else(|| format!("a point has 1 to {MAX_DIMS} coordinates, got {}", v.len()))
    }
}

impl From<Point> for Vec<u32> {
    fn from(p: Point) -> Vec<u32> {
        p.coords().to_vec()
    }
}

impl fmt::Debug for Point {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({})", self.coords().iter().map(|c| format!("{c:#x}")).collect::<Vec<_>>().join(","))
    }
}

/// A zone: an axis-aligned box of the torus, a node of the split tree.
///
/// After `depth` splits, dimension `k` was halved `splits(k)` times, so its side
/// is 2^(32 - splits(k)) and its lower bound a multiple of that.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "ZoneWire", into = "ZoneWire")]
pub struct Zone {
    dims: u8,
    depth: u16,
    lo: [u32; MAX_DIMS],
}

/// A zone on the wire: its depth and lower corner; checked when decoded.
#[derive(Serialize, Deserialize)]
struct ZoneWire {
    depth: u16,
    lo: Vec<u32>,
}

impl TryFrom<ZoneWire> for Zone {
    type Error = String;
    fn try_from(w: ZoneWire) -> Result<Self, String> {
        Zone::new(usize::from(w.depth), &w.lo).ok_or_else(|| format!("not a zone: depth {} corner {:?}", w.depth, w.lo))
    }
}

impl From<Zone> for ZoneWire {
    fn from(z: Zone) -> ZoneWire {
        ZoneWire { depth: z.depth, lo: z.lo[..z.dims()].to_vec() }
    }
}

impl Zone {
    /// The whole space of `dims` dimensions.
    ///
    /// # Panics
    /// If `dims` is not in 1..=[`MAX_DIMS`] (a configuration bug).
    pub fn root(dims: usize) -> Zone {
        assert!((1..=MAX_DIMS).contains(&dims), "CAN dimensions must be 1..=8, got {dims}");
        Zone { dims: dims as u8, depth: 0, lo: [0; MAX_DIMS] }
    }

    /// The zone at `depth` with lower corner `lo`, if that is a zone of the split
    /// tree (1 to 8 dimensions, depth at most 32 per dimension, corner aligned).
    pub fn new(depth: usize, lo: &[u32]) -> Option<Zone> {
        let dims = lo.len();
        if !(1..=MAX_DIMS).contains(&dims) || depth > dims * COORD_BITS as usize {
            return None;
        }
        let mut z = Zone { dims: dims as u8, depth: depth as u16, lo: [0; MAX_DIMS] };
        z.lo[..dims].copy_from_slice(lo);
        (0..dims).all(|k| u64::from(z.lo[k]) % z.side(k) == 0).then_some(z)
    }

    /// The zone at `depth` that contains `p`.
    pub fn containing(p: &Point, depth: usize) -> Zone {
        let mut z = Zone::root(p.dims());
        for _ in 0..depth.min(p.dims() * COORD_BITS as usize) {
            let (a, b) = z.halves().expect("depth is bounded by the finest split");
            z = if a.contains(p) { a } else { b };
        }
        z
    }

    /// Number of dimensions.
    pub fn dims(&self) -> usize {
        usize::from(self.dims)
    }

    /// Splits made from the whole space to this zone; its volume is 2^-depth of the space.
    pub fn depth(&self) -> usize {
        usize::from(self.depth)
    }

    /// The lower corner, one coordinate per dimension.
    pub fn lo(&self) -> &[u32] {
        &self.lo[..self.dims()]
    }

    /// Halvings of dimension `k` so far.
    fn splits(&self, k: usize) -> u32 {
        let (t, d) = (self.depth(), self.dims());
        if t > k { ((t - k).div_ceil(d)) as u32 } else { 0 }
    }

    /// log2 of the side along dimension `k`.
    pub fn side_bits(&self, k: usize) -> u32 {
        COORD_BITS - self.splits(k)
    }

    /// The side along dimension `k` (up to 2^32).
    pub fn side(&self, k: usize) -> u64 {
        1u64 << self.side_bits(k)
    }

    /// The interval `[lo, hi)` along dimension `k`, `hi` up to 2^32.
    pub fn interval(&self, k: usize) -> (u64, u64) {
        let lo = u64::from(self.lo[k]);
        (lo, lo + self.side(k))
    }

    /// The fraction of the space this zone covers, 2^-depth.
    pub fn volume(&self) -> f64 {
        (-(self.depth() as f64)).exp2()
    }

    /// Whether `p` (of the same dimensions) lies inside.
    pub fn contains(&self, p: &Point) -> bool {
        p.dims == self.dims && (0..self.dims()).all(|k| (u64::from(p.c[k] ^ self.lo[k])) >> self.side_bits(k) == 0)
    }

    /// Whether `other` lies inside this zone (or is it).
    pub fn covers(&self, other: &Zone) -> bool {
        other.dims == self.dims
            && other.depth >= self.depth
            && (0..self.dims()).all(|k| (u64::from(other.lo[k] ^ self.lo[k])) >> self.side_bits(k) == 0)
    }

    /// Whether the two zones share any point (one then covers the other).
    pub fn intersects(&self, other: &Zone) -> bool {
        self.covers(other) || other.covers(self)
    }

    /// The dimension the next split of this zone halves (its longest side, the
    /// lowest dimension on ties).
    pub fn split_dim(&self) -> usize {
        self.depth() % self.dims()
    }

    /// The two halves of this zone (lower, upper), or `None` at the finest grain.
    pub fn halves(&self) -> Option<(Zone, Zone)> {
        if self.depth() >= self.dims() * COORD_BITS as usize {
            return None;
        }
        let k = self.split_dim();
        let half = self.side_bits(k) - 1;
        let lower = Zone { depth: self.depth + 1, ..*self };
        let mut upper = lower;
        upper.lo[k] |= 1 << half;
        Some((lower, upper))
    }

    /// The zone this one was split from, `None` for the whole space.
    pub fn parent(&self) -> Option<Zone> {
        let k = (self.depth() + self.dims() - 1) % self.dims();
        let bit = self.side_bits(k);
        if self.depth == 0 || bit >= COORD_BITS {
            return None;
        }
        let mut p = Zone { depth: self.depth - 1, ..*self };
        p.lo[k] &= !(1 << bit);
        Some(p)
    }

    /// The other half of this zone's parent (its buddy): the two merge back into
    /// the parent. `None` for the whole space.
    pub fn sibling(&self) -> Option<Zone> {
        let k = (self.depth() + self.dims() - 1) % self.dims();
        let bit = self.side_bits(k);
        if self.depth == 0 || bit >= COORD_BITS {
            return None;
        }
        let mut s = *self;
        s.lo[k] ^= 1 << bit;
        Some(s)
    }

    /// `self` minus `inner` (which it must cover) as zones: the siblings along the
    /// path from `inner` up to `self`. Empty when they are equal.
    pub fn minus(&self, inner: &Zone) -> Vec<Zone> {
        let mut out = Vec::new();
        if !self.covers(inner) {
            return vec![*self];
        }
        let mut z = *inner;
        while z.depth > self.depth {
            // Below `self`, every zone has a parent and a sibling.
            out.push(z.sibling().expect("deeper than self"));
            z = z.parent().expect("deeper than self");
        }
        out
    }

    /// Whether the two zones are neighbours on the torus: their intervals overlap
    /// in all dimensions but one, where they touch (wrapping at 2^32).
    pub fn abuts(&self, other: &Zone) -> bool {
        if self.dims != other.dims {
            return false;
        }
        let mut touching = 0;
        for k in 0..self.dims() {
            let (a_lo, a_hi) = self.interval(k);
            let (b_lo, b_hi) = other.interval(k);
            if a_lo < b_hi && b_lo < a_hi {
                continue; // overlap
            }
            if a_hi % SPAN != b_lo && b_hi % SPAN != a_lo {
                return false;
            }
            touching += 1;
        }
        touching == 1
    }

    /// Squared torus distance from `p` to the nearest point of this zone (0 inside).
    pub fn dist2(&self, p: &Point) -> u128 {
        (0..self.dims().min(p.dims()))
            .map(|k| {
                let (lo, hi) = self.interval(k);
                let x = u64::from(p.c[k]);
                let d = if x >= lo && x < hi {
                    0
                } else {
                    // Up from x to lo, or down from x to hi - 1, around the torus.
                    let up = (lo + SPAN - x) % SPAN;
                    let down = (x + SPAN - (hi - 1)) % SPAN;
                    up.min(down)
                };
                u128::from(d) * u128::from(d)
            })
            .sum()
    }

    /// The region just outside this zone across its face in dimension `k`, on the
    /// `upper` side: one coordinate thick there, this zone's extent elsewhere.
    /// `None` when the zone spans the whole dimension (it has no face there).
    pub fn face(&self, k: usize, upper: bool) -> Option<Region> {
        let (lo, hi) = self.interval(k);
        if hi - lo == SPAN {
            return None;
        }
        let mut r = Region { dims: self.dims, lo: [0; MAX_DIMS], hi: [0; MAX_DIMS] };
        for j in 0..self.dims() {
            (r.lo[j], r.hi[j]) = self.interval(j);
        }
        let c = if upper { hi % SPAN } else { (lo + SPAN - 1) % SPAN };
        (r.lo[k], r.hi[k]) = (c, c + 1);
        Some(r)
    }

    /// Whether this zone shares a point with `r`.
    pub fn meets(&self, r: &Region) -> bool {
        (0..self.dims()).all(|k| {
            let (lo, hi) = self.interval(k);
            lo < r.hi[k] && r.lo[k] < hi
        })
    }

    /// Whether `r` lies inside this zone.
    pub fn covers_region(&self, r: &Region) -> bool {
        (0..self.dims()).all(|k| {
            let (lo, hi) = self.interval(k);
            lo <= r.lo[k] && r.hi[k] <= hi
        })
    }
}

impl fmt::Debug for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Z{}[", self.depth)?;
        for k in 0..self.dims() {
            let (lo, hi) = self.interval(k);
            if k > 0 {
                write!(f, " x ")?;
            }
            write!(f, "{lo:#x}..{hi:#x}")?;
        }
        write!(f, "]")
    }
}

/// An axis-aligned box that need not be a zone (a face region), bounds in u64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    dims: u8,
    lo: [u64; MAX_DIMS],
    hi: [u64; MAX_DIMS],
}

impl Region {
    /// The region's lowest corner.
    pub fn corner(&self) -> Point {
        let mut c = [0u32; MAX_DIMS];
        for (k, ck) in c.iter_mut().enumerate().take(usize::from(self.dims)) {
            // Bounds of a region cut from a zone lie below 2^32.
            *ck = self.lo[k] as u32;
        }
        Point { dims: self.dims, c }
    }

    /// The two halves of the region across its widest side, `None` for one point.
    pub fn halves(&self) -> Option<(Region, Region)> {
        let k = (0..usize::from(self.dims)).max_by_key(|&k| (self.hi[k] - self.lo[k], std::cmp::Reverse(k)))?;
        let width = self.hi[k] - self.lo[k];
        if width < 2 {
            return None;
        }
        let mid = self.lo[k] + width / 2;
        let (mut a, mut b) = (*self, *self);
        a.hi[k] = mid;
        b.lo[k] = mid;
        Some((a, b))
    }

    /// A point of this region that none of `zones` covers, if any.
    pub fn uncovered_point(&self, zones: &[Zone]) -> Option<Point> {
        let meeting: Vec<Zone> = zones.iter().filter(|z| z.meets(self)).copied().collect();
        if meeting.is_empty() {
            return Some(self.corner());
        }
        if meeting.iter().any(|z| z.covers_region(self)) {
            return None;
        }
        // Some zone meets it without covering it, so it is more than one point.
        let (a, b) = self.halves()?;
        a.uncovered_point(&meeting).or_else(|| b.uncovered_point(&meeting))
    }
}

/// The total volume of `zones` as a fraction of the space, exactly: true when it
/// is one whole (for the tiling check). Zones deeper than 120 splits are summed
/// in floating point and compared with a tolerance.
pub fn volumes_sum_to_one(zones: &[Zone]) -> bool {
    let max = zones.iter().map(Zone::depth).max().unwrap_or(0);
    if max <= 120 {
        let total: u128 = zones.iter().map(|z| 1u128 << (max - z.depth())).sum();
        return total == 1u128 << max;
    }
    (zones.iter().map(Zone::volume).sum::<f64>() - 1.0).abs() < 1e-12
}

/// The volume of a set of zones as a fraction of the space.
pub(crate) fn total_volume(zones: &[Zone]) -> f64 {
    zones.iter().map(Zone::volume).sum()
}
