//! Derived datatypes (MPI-1 §3.12): type maps built from the basic types by
//! the constructors (contiguous, vector, hvector, indexed, hindexed, struct,
//! resized), their bounds (lb, ub, extent, true bounds, `MPI_LB` / `MPI_UB`
//! markers), their signature, and packing.
//!
//! A committed type is a [`Layout`]: the (offset, length) byte runs of one
//! element, adjacent runs merged, in type-map order. Packing `count` elements
//! copies run by run; a layout whose element is one run as long as its extent
//! is contiguous, and [`Layout::runs`] then yields a single run for all
//! `count` elements, so a send or receive of it is one copy.

use crate::error::{Error, Result};

/// The basic datatypes of C (MPI-1 §3.2.2), `MPI_PACKED` and `MPI_WCHAR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Basic {
    Char,
    SignedChar,
    UnsignedChar,
    Byte,
    Short,
    UnsignedShort,
    Int,
    Unsigned,
    Long,
    UnsignedLong,
    LongLong,
    UnsignedLongLong,
    Float,
    Double,
    LongDouble,
    Packed,
    WChar,
}

impl Basic {
    /// Bytes of one element (the C type's `sizeof` on this platform).
    pub fn size(self) -> u64 {
        use std::ffi::{c_char, c_double, c_float, c_int, c_long, c_longlong, c_short};
        (match self {
            Basic::Char | Basic::SignedChar | Basic::UnsignedChar | Basic::Byte | Basic::Packed => size_of::<c_char>(),
            Basic::Short | Basic::UnsignedShort => size_of::<c_short>(),
            Basic::Int | Basic::Unsigned | Basic::WChar => size_of::<c_int>(),
            Basic::Long | Basic::UnsignedLong => size_of::<c_long>(),
            Basic::LongLong | Basic::UnsignedLongLong => size_of::<c_longlong>(),
            Basic::Float => size_of::<c_float>(),
            Basic::Double => size_of::<c_double>(),
            Basic::LongDouble => 16,
        }) as u64
    }

    /// The C type's alignment in a struct.
    pub fn align(self) -> u64 {
        self.size().min(16)
    }
}

/// `len` bytes at `off` from an element's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub off: i64,
    pub len: u64,
}

/// A datatype's type map, as far as moving data needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// One element's data, in type-map order, adjacent runs merged.
    runs: Vec<Run>,
    /// The type signature, run-length encoded.
    sig: Vec<(Basic, u64)>,
    size: u64,
    lb: i64,
    ub: i64,
    true_lb: i64,
    true_ub: i64,
    /// Whether the bounds come from `MPI_LB` / `MPI_UB` markers (or a resize),
    /// which win over the data's own bounds in every type built from this one.
    lb_mark: bool,
    ub_mark: bool,
    /// The largest alignment of the basic types in it (struct padding).
    align: u64,
}

/// One part of a composite type: `count` copies of `ty` laid end to end (by
/// its extent) from `disp`.
#[derive(Debug, Clone, Copy)]
struct Part<'a> {
    disp: i64,
    count: u64,
    ty: &'a Layout,
}

fn too_big() -> Error {
    Error::Invalid("datatype too large".into())
}

/// Checked `a * b` of an element count and an extent or stride.
fn mul(a: u64, b: i64) -> Result<i64> {
    i64::try_from(a).ok().and_then(|a| a.checked_mul(b)).ok_or_else(too_big)
}

fn add(a: i64, b: i64) -> Result<i64> {
    a.checked_add(b).ok_or_else(too_big)
}

fn count(n: i32, what: &str) -> Result<u64> {
    u64::try_from(n).map_err(|_| Error::Invalid(format!("negative {what} {n}")))
}

/// Most runs one layout may hold (a larger type map is refused rather than
/// exhausting memory).
const MAX_RUNS: usize = 1 << 26;

impl Layout {
    /// A basic type.
    pub fn basic(b: Basic) -> Layout {
        let n = b.size();
        Layout {
            runs: vec![Run { off: 0, len: n }],
            sig: vec![(b, 1)],
            size: n,
            lb: 0,
            ub: n as i64,
            true_lb: 0,
            true_ub: n as i64,
            lb_mark: false,
            ub_mark: false,
            align: b.align(),
        }
    }

    /// `MPI_LB`: no data, a lower-bound marker at 0.
    pub fn lb_marker() -> Layout {
        Layout { lb_mark: true, ..Layout::empty() }
    }

    /// `MPI_UB`: no data, an upper-bound marker at 0.
    pub fn ub_marker() -> Layout {
        Layout { ub_mark: true, ..Layout::empty() }
    }

    fn empty() -> Layout {
        Layout {
            runs: Vec::new(),
            sig: Vec::new(),
            size: 0,
            lb: 0,
            ub: 0,
            true_lb: 0,
            true_ub: 0,
            lb_mark: false,
            ub_mark: false,
            align: 0,
        }
    }

    /// Bytes of data in one element (`MPI_Type_size`).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// `MPI_Type_lb`.
    pub fn lb(&self) -> i64 {
        self.lb
    }

    /// `MPI_Type_ub`.
    pub fn ub(&self) -> i64 {
        self.ub
    }

    /// `MPI_Type_extent`: the distance between consecutive elements.
    pub fn extent(&self) -> i64 {
        self.ub - self.lb
    }

    /// The lowest and one past the highest byte of data (`MPI_Type_get_true_extent`).
    pub fn true_bounds(&self) -> (i64, i64) {
        (self.true_lb, self.true_ub)
    }

    /// The type signature, run-length encoded.
    pub fn signature(&self) -> &[(Basic, u64)] {
        &self.sig
    }

    /// The one basic type every element of the signature is, if so.
    pub fn homogeneous(&self) -> Option<Basic> {
        let first = self.sig.first()?.0;
        self.sig.iter().all(|&(b, _)| b == first).then_some(first)
    }

    /// One element's runs.
    pub fn element_runs(&self) -> &[Run] {
        &self.runs
    }

    /// Whether `count` elements are one run of `count * size` bytes from offset 0.
    pub fn is_contiguous(&self) -> bool {
        match self.runs.as_slice() {
            [] => true,
            [r] => r.off == 0 && r.len as i64 == self.extent(),
            _ => false,
        }
    }

    /// The runs of `count` consecutive elements, the first at offset 0
    /// (adjacent ones merged, so a contiguous layout gives one run).
    pub fn runs(&self, count: u64) -> impl Iterator<Item = Run> + '_ {
        let ext = self.extent();
        let contiguous = self.is_contiguous();
        let whole = (contiguous && self.size > 0 && count > 0).then(|| Run { off: 0, len: self.size * count });
        let elements = if contiguous { 0 } else { count };
        whole.into_iter().chain((0..elements).flat_map(move |i| {
            let base = ext.wrapping_mul(i as i64);
            self.runs.iter().map(move |r| Run { off: base.wrapping_add(r.off), len: r.len })
        }))
    }

    /// The one run of data `count` elements make, if they make one: all of
    /// them of a contiguous layout, or the single run of one element. `None`
    /// for no data, or for several runs (then see [`Layout::runs`]). Without
    /// building the iterator `runs` needs, for the many calls on one run.
    pub fn single_run(&self, count: u64) -> Option<Run> {
        if self.size == 0 || count == 0 {
            return None;
        }
        if self.is_contiguous() {
            return Some(Run { off: 0, len: self.size * count });
        }
        match self.runs.as_slice() {
            [r] if count == 1 => Some(*r),
            _ => None,
        }
    }

    /// The lowest and one past the highest byte `count` elements touch
    /// (relative to the buffer; `(0, 0)` when they hold no data).
    pub fn span(&self, count: u64) -> Result<(i64, i64)> {
        if count == 0 || self.size == 0 {
            return Ok((0, 0));
        }
        let last = mul(count - 1, self.extent())?;
        let lo = self.true_lb.min(add(self.true_lb, last)?);
        let hi = self.true_ub.max(add(self.true_ub, last)?);
        Ok((lo, hi))
    }

    /// Builds a composite type from its parts; `is_struct` pads the extent to
    /// the largest alignment (as a C struct is, unless an `MPI_UB` marker sets
    /// the upper bound).
    fn compose(parts: &[Part<'_>], is_struct: bool) -> Result<Layout> {
        let mut out = Layout::empty();
        let (mut lb, mut ub): (Option<i64>, Option<i64>) = (None, None);
        let (mut mlb, mut mub): (Option<i64>, Option<i64>) = (None, None);
        let (mut tlb, mut tub): (Option<i64>, Option<i64>) = (None, None);
        for p in parts.iter().filter(|p| p.count > 0) {
            let t = p.ty;
            let ext = t.extent();
            let first = p.disp;
            let last = add(p.disp, mul(p.count - 1, ext)?)?;
            let (lo, hi) = (first.min(last), first.max(last));
            if t.lb_mark {
                mlb = Some(mlb.map_or(lo + t.lb, |m| m.min(lo + t.lb)));
            }
            if t.ub_mark {
                mub = Some(mub.map_or(hi + t.ub, |m| m.max(hi + t.ub)));
            }
            lb = Some(lb.map_or(lo + t.lb, |m| m.min(lo + t.lb)));
            ub = Some(ub.map_or(hi + t.ub, |m| m.max(hi + t.ub)));
            if t.size > 0 {
                tlb = Some(tlb.map_or(lo + t.true_lb, |m| m.min(lo + t.true_lb)));
                tub = Some(tub.map_or(hi + t.true_ub, |m| m.max(hi + t.true_ub)));
            }
            out.align = out.align.max(t.align);
            out.size = p.count.checked_mul(t.size).and_then(|s| s.checked_add(out.size)).ok_or_else(too_big)?;
            for (b, n) in &t.sig {
                push_sig(&mut out.sig, *b, n.checked_mul(p.count).ok_or_else(too_big)?);
            }
            if t.runs.len().saturating_mul(p.count as usize) > MAX_RUNS {
                return Err(too_big());
            }
            for i in 0..p.count {
                let base = add(p.disp, mul(i, ext)?)?;
                for r in &t.runs {
                    push_run(&mut out.runs, Run { off: add(base, r.off)?, len: r.len });
                }
            }
            if out.runs.len() > MAX_RUNS {
                return Err(too_big());
            }
        }
        out.lb_mark = mlb.is_some();
        out.ub_mark = mub.is_some();
        out.lb = mlb.or(lb).unwrap_or(0);
        out.ub = mub.or(ub).unwrap_or(0);
        out.true_lb = tlb.unwrap_or(0);
        out.true_ub = tub.unwrap_or(0);
        if is_struct && !out.ub_mark && out.align > 1 {
            let rem = out.extent().rem_euclid(out.align as i64);
            if rem != 0 {
                out.ub += out.align as i64 - rem;
            }
        }
        Ok(out)
    }

    /// `MPI_Type_contiguous`.
    pub fn contiguous(n: i32, old: &Layout) -> Result<Layout> {
        Layout::compose(&[Part { disp: 0, count: count(n, "count")?, ty: old }], false)
    }

    /// `MPI_Type_vector` (`stride` in elements of `old`) and `MPI_Type_hvector`
    /// (`stride` in bytes, `bytes` true).
    pub fn vector(n: i32, blocklen: i32, stride: i64, bytes: bool, old: &Layout) -> Result<Layout> {
        let (n, bl) = (count(n, "count")?, count(blocklen, "block length")?);
        if n as usize > MAX_RUNS {
            return Err(too_big());
        }
        let step = if bytes { stride } else { stride.checked_mul(old.extent()).ok_or_else(too_big)? };
        let parts = (0..n).map(|i| Ok(Part { disp: mul(i, step)?, count: bl, ty: old })).collect::<Result<Vec<_>>>()?;
        Layout::compose(&parts, false)
    }

    /// `MPI_Type_indexed` (displacements in elements of `old`) and
    /// `MPI_Type_hindexed` (in bytes, `bytes` true).
    pub fn indexed(blocklens: &[i32], displs: &[i64], bytes: bool, old: &Layout) -> Result<Layout> {
        let parts = blocklens
            .iter()
            .zip(displs)
            .map(|(&bl, &d)| {
                let disp = if bytes { d } else { d.checked_mul(old.extent()).ok_or_else(too_big)? };
                Ok(Part { disp, count: count(bl, "block length")?, ty: old })
            })
            .collect::<Result<Vec<_>>>()?;
        Layout::compose(&parts, false)
    }

    /// `MPI_Type_struct` / `MPI_Type_create_struct`.
    pub fn structure(blocklens: &[i32], displs: &[i64], types: &[&Layout]) -> Result<Layout> {
        let parts = blocklens
            .iter()
            .zip(displs)
            .zip(types)
            .map(|((&bl, &disp), ty)| Ok(Part { disp, count: count(bl, "block length")?, ty }))
            .collect::<Result<Vec<_>>>()?;
        Layout::compose(&parts, true)
    }

    /// `MPI_Type_create_resized`: the same data with bounds `lb` and
    /// `lb + extent` (which later constructors keep, as markers).
    pub fn resized(old: &Layout, lb: i64, extent: i64) -> Result<Layout> {
        let ub = add(lb, extent)?;
        Ok(Layout { lb, ub, lb_mark: true, ub_mark: true, ..old.clone() })
    }

    /// The number of basic elements in `bytes` bytes of data of this type
    /// (`MPI_Get_elements`); `None` when they end inside a basic element.
    pub fn elements(&self, bytes: u64) -> Option<u64> {
        if self.size == 0 {
            return (bytes == 0).then_some(0);
        }
        let per: u64 = self.sig.iter().map(|&(_, n)| n).sum();
        let (whole, mut rem) = (bytes / self.size, bytes % self.size);
        let mut n = whole.checked_mul(per)?;
        for &(b, k) in &self.sig {
            if rem == 0 {
                break;
            }
            let take = (rem / b.size()).min(k);
            n += take;
            rem -= take * b.size();
            if take < k && rem > 0 {
                return None;
            }
        }
        (rem == 0).then_some(n)
    }
}

fn push_run(runs: &mut Vec<Run>, r: Run) {
    if r.len == 0 {
        return;
    }
    if let Some(last) = runs.last_mut() {
        if last.off.checked_add(last.len as i64) == Some(r.off) {
            last.len += r.len;
            return;
        }
    }
    runs.push(r);
}

fn push_sig(sig: &mut Vec<(Basic, u64)>, b: Basic, n: u64) {
    if n == 0 {
        return;
    }
    match sig.last_mut() {
        Some((last, k)) if *last == b => *k += n,
        _ => sig.push((b, n)),
    }
}

/// Packs `count` elements of `layout` at `buf[base..]` (offsets are relative
/// to `base`) into `out`; refuses offsets outside `buf`.
pub fn pack(layout: &Layout, buf: &[u8], base: usize, count: u64, out: &mut Vec<u8>) -> Result<()> {
    for r in layout.runs(count) {
        let s = slice_range(buf.len(), base, r)?;
        out.extend_from_slice(&buf[s]);
    }
    Ok(())
}

/// Unpacks `data` (packed elements of `layout`) into `buf[base..]`: as many
/// runs as `data` fills, for at most `count` elements; returns the bytes used.
pub fn unpack(layout: &Layout, data: &[u8], buf: &mut [u8], base: usize, count: u64) -> Result<usize> {
    let mut at = 0;
    for r in layout.runs(count) {
        if at >= data.len() {
            break;
        }
        let n = (r.len as usize).min(data.len() - at);
        let s = slice_range(buf.len(), base, Run { off: r.off, len: n as u64 })?;
        buf[s].copy_from_slice(&data[at..at + n]);
        at += n;
    }
    Ok(at)
}

fn slice_range(len: usize, base: usize, r: Run) -> Result<std::ops::Range<usize>> {
    let start = i64::try_from(base).ok().and_then(|b| b.checked_add(r.off)).and_then(|s| usize::try_from(s).ok());
    let range = start.and_then(|s| Some(s..s.checked_add(usize::try_from(r.len).ok()?)?));
    range
        .filter(|x| x.end <= len)
        .ok_or_else(|| Error::Invalid(format!("datatype reaches outside the buffer ({r:?} from {base} in {len})")))
}

#[cfg(test)]
mod tests;
