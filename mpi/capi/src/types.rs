//! Datatypes on the C side: the predefined ones, the handle table of derived
//! ones (with their envelope for `MPI_Type_get_envelope`), and [`Buf`], a
//! checked buffer argument (`buf`, `count`, `datatype`) that packs and unpacks
//! itself through the type's [`Layout`] with one copy.

use std::ffi::{c_int, c_void};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use p2pmp_mpi::Payload;
use p2pmp_mpi::datatype::{Basic, Layout, Run};

use crate::consts::{
    Handle, IN_PLACE_ADDR, MPI_ERR_ARG, MPI_ERR_BUFFER, MPI_ERR_COUNT, MPI_ERR_TRUNCATE, MPI_ERR_TYPE,
};
use crate::error::Fail;
use crate::handles::Table;
use crate::state::Objects;

/// The pair types of `MPI_MINLOC` / `MPI_MAXLOC`: a value, then an int index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)] // MPI's names: MPI_FLOAT_INT, MPI_DOUBLE_INT, ...
pub(crate) enum Pair {
    FloatInt,
    DoubleInt,
    LongInt,
    TwoInt,
    ShortInt,
    LongDoubleInt,
}

impl Pair {
    /// The value's basic type.
    pub(crate) fn value(self) -> Basic {
        match self {
            Pair::FloatInt => Basic::Float,
            Pair::DoubleInt => Basic::Double,
            Pair::LongInt => Basic::Long,
            Pair::TwoInt => Basic::Int,
            Pair::ShortInt => Basic::Short,
            Pair::LongDoubleInt => Basic::LongDouble,
        }
    }

    fn layout(self) -> Layout {
        let v = self.value();
        // The index sits where C puts the second member of { value; int }.
        let off = v.size().max(4) as i64;
        let (a, b) = (Layout::basic(v), Layout::basic(Basic::Int));
        // Invariant: a two-member struct of basic types is never too large.
        Layout::structure(&[1, 1], &[0, off], &[&a, &b]).expect("pair layout")
    }
}

/// What a predefined handle is.
#[derive(Debug, Clone, Copy)]
enum Predef {
    Basic(Basic),
    Pair(Pair),
    Lb,
    Ub,
}

/// The predefined datatypes by handle (index = handle), with their mpi.h names.
const PREDEFINED: [(&str, Predef); 25] = [
    ("MPI_CHAR", Predef::Basic(Basic::Char)),
    ("MPI_SIGNED_CHAR", Predef::Basic(Basic::SignedChar)),
    ("MPI_UNSIGNED_CHAR", Predef::Basic(Basic::UnsignedChar)),
    ("MPI_BYTE", Predef::Basic(Basic::Byte)),
    ("MPI_SHORT", Predef::Basic(Basic::Short)),
    ("MPI_UNSIGNED_SHORT", Predef::Basic(Basic::UnsignedShort)),
    ("MPI_INT", Predef::Basic(Basic::Int)),
    ("MPI_UNSIGNED", Predef::Basic(Basic::Unsigned)),
    ("MPI_LONG", Predef::Basic(Basic::Long)),
    ("MPI_UNSIGNED_LONG", Predef::Basic(Basic::UnsignedLong)),
    ("MPI_LONG_LONG", Predef::Basic(Basic::LongLong)),
    ("MPI_UNSIGNED_LONG_LONG", Predef::Basic(Basic::UnsignedLongLong)),
    ("MPI_FLOAT", Predef::Basic(Basic::Float)),
    ("MPI_DOUBLE", Predef::Basic(Basic::Double)),
    ("MPI_LONG_DOUBLE", Predef::Basic(Basic::LongDouble)),
    ("MPI_PACKED", Predef::Basic(Basic::Packed)),
    ("MPI_LB", Predef::Lb),
    ("MPI_UB", Predef::Ub),
    ("MPI_FLOAT_INT", Predef::Pair(Pair::FloatInt)),
    ("MPI_DOUBLE_INT", Predef::Pair(Pair::DoubleInt)),
    ("MPI_LONG_INT", Predef::Pair(Pair::LongInt)),
    ("MPI_2INT", Predef::Pair(Pair::TwoInt)),
    ("MPI_SHORT_INT", Predef::Pair(Pair::ShortInt)),
    ("MPI_LONG_DOUBLE_INT", Predef::Pair(Pair::LongDoubleInt)),
    ("MPI_WCHAR", Predef::Basic(Basic::WChar)),
];

/// First handle of derived datatypes.
const DERIVED_BASE: Handle = 64;

fn predefined() -> &'static [Layout] {
    static TABLE: OnceLock<Vec<Layout>> = OnceLock::new();
    TABLE.get_or_init(|| {
        PREDEFINED
            .iter()
            .map(|(_, p)| match *p {
                Predef::Basic(b) => Layout::basic(b),
                Predef::Pair(pair) => pair.layout(),
                Predef::Lb => Layout::lb_marker(),
                Predef::Ub => Layout::ub_marker(),
            })
            .collect()
    })
}

/// A datatype's layout as a call holds it: a predefined type's is borrowed
/// from the static table, so that a call on `MPI_BYTE` or `MPI_INT` touches
/// no reference count (two atomic operations a datatype argument, a good part
/// of the C layer's cost per call when a message takes a quarter of a
/// microsecond); a derived type's is shared with its handle's entry (which
/// `MPI_Type_free` may drop while a request still uses it).
#[derive(Debug, Clone)]
pub(crate) enum LayoutRef {
    Predefined(&'static Layout),
    Derived(Arc<Layout>),
}

impl std::ops::Deref for LayoutRef {
    type Target = Layout;

    fn deref(&self) -> &Layout {
        match self {
            LayoutRef::Predefined(l) => l,
            LayoutRef::Derived(l) => l,
        }
    }
}

/// How a derived datatype was made (`MPI_Type_get_envelope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Envelope {
    pub(crate) combiner: c_int,
    pub(crate) ints: c_int,
    pub(crate) addrs: c_int,
    pub(crate) types: c_int,
}

/// A derived datatype.
#[derive(Debug, Clone)]
pub(crate) struct Derived {
    pub(crate) layout: Arc<Layout>,
    pub(crate) committed: bool,
    pub(crate) envelope: Envelope,
}

pub(crate) const fn types() -> Table<Derived> {
    Table::new(DERIVED_BASE, MPI_ERR_TYPE, "datatype")
}

/// A datatype as a call uses it.
#[derive(Debug, Clone)]
pub(crate) struct Dt {
    pub(crate) handle: Handle,
    pub(crate) layout: LayoutRef,
    /// For predefined pair types.
    pub(crate) pair: Option<Pair>,
    pub(crate) committed: bool,
}

impl Dt {
    /// The basic type a predefined operation works on, if the type is made
    /// of one only.
    pub(crate) fn basic(&self) -> Option<Basic> {
        self.layout.homogeneous()
    }
}

/// Datatype `h`, committed or not (constructors and queries take either).
#[inline]
pub(crate) fn lookup(obj: &Objects, h: Handle) -> Result<Dt, Fail> {
    if let Some(i) = usize::try_from(h).ok().and_then(|h| h.checked_sub(1)).filter(|&i| i < PREDEFINED.len()) {
        let pair = match PREDEFINED[i].1 {
            Predef::Pair(p) => Some(p),
            _ => None,
        };
        return Ok(Dt { handle: h, layout: LayoutRef::Predefined(&predefined()[i]), pair, committed: true });
    }
    if h < DERIVED_BASE {
        return Err(Fail::new(MPI_ERR_TYPE, format!("{h} is not a datatype")));
    }
    let d = obj.types.get(h)?;
    Ok(Dt { handle: h, layout: LayoutRef::Derived(d.layout.clone()), pair: None, committed: d.committed })
}

/// Datatype `h` for communication: it must be committed.
#[inline]
pub(crate) fn get(obj: &Objects, h: Handle) -> Result<Dt, Fail> {
    let dt = lookup(obj, h)?;
    if !dt.committed {
        return Err(Fail::new(MPI_ERR_TYPE, format!("datatype {h} is not committed")));
    }
    Ok(dt)
}

/// Whether `h` is a predefined handle.
pub(crate) fn is_predefined(h: Handle) -> bool {
    (1..=PREDEFINED.len() as Handle).contains(&h)
}

/// A buffer argument: `count` elements of `dt` at address `addr` (element `i`
/// at `addr + i * extent`; the type's offsets may be absolute addresses when
/// `addr` is `MPI_BOTTOM`).
#[derive(Debug, Clone)]
pub(crate) struct Buf {
    addr: usize,
    pub(crate) count: u64,
    pub(crate) dt: Dt,
}

impl Buf {
    /// Checks a buffer argument: a non-negative count, not `MPI_IN_PLACE`, and
    /// no data at address 0 (a null buffer is `MPI_BOTTOM`, fine only with
    /// absolute offsets).
    pub(crate) fn new(p: *const c_void, count: c_int, dt: Dt) -> Result<Buf, Fail> {
        let count = u64::try_from(count).map_err(|_| Fail::new(MPI_ERR_COUNT, format!("negative count {count}")))?;
        if p as usize == IN_PLACE_ADDR {
            return Err(Fail::new(MPI_ERR_BUFFER, "MPI_IN_PLACE is not allowed here".into()));
        }
        let b = Buf { addr: p as usize, count, dt };
        let (lo, hi) = b.dt.layout.span(count)?;
        if lo < hi && p.is_null() && lo < 4096 {
            return Err(Fail::new(MPI_ERR_BUFFER, format!("null buffer for {} bytes", b.bytes())));
        }
        b.bytes_checked()?;
        Ok(b)
    }

    /// The same buffer with `count` elements from element `first` on.
    pub(crate) fn slice(&self, first: u64, count: u64) -> Result<Buf, Fail> {
        let off = (first as i64).checked_mul(self.dt.layout.extent()).ok_or_else(too_large)?;
        Ok(Buf { addr: self.addr.wrapping_add_signed(off as isize), count, dt: self.dt.clone() })
    }

    fn bytes_checked(&self) -> Result<usize, Fail> {
        self.count
            .checked_mul(self.dt.layout.size())
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or_else(too_large)
    }

    /// Bytes of data (packed).
    pub(crate) fn bytes(&self) -> usize {
        // Invariant: checked when the Buf was made.
        self.bytes_checked().expect("checked in Buf::new")
    }

    fn at(&self, r: Run) -> *mut u8 {
        self.addr.wrapping_add_signed(r.off as isize) as *mut u8
    }

    /// The data, packed into a new buffer (one copy).
    ///
    /// # Safety
    /// The buffer holds `count` elements of the type, readable.
    pub(crate) unsafe fn pack(&self) -> Bytes {
        if let Some(r) = self.dt.layout.single_run(self.count) {
            // One run (the usual case: a predefined type): copied straight
            // from the caller's buffer.
            // SAFETY: the run lies within the caller's buffer (see pack_into).
            return p2pmp_mpi::shared_bytes(unsafe { std::slice::from_raw_parts(self.at(r), r.len as usize) });
        }
        let mut out = Vec::with_capacity(self.bytes());
        // SAFETY: as the caller vouched.
        unsafe { self.pack_into(&mut out) };
        Bytes::from(out)
    }

    /// The data as a message's payload: held in place when it is one run of
    /// a few bytes (no allocation), else as [`Buf::pack`] gives it.
    ///
    /// # Safety
    /// As [`Buf::pack`].
    pub(crate) unsafe fn pack_payload(&self) -> Payload {
        match self.dt.layout.single_run(self.count) {
            Some(r) if r.len as usize <= Payload::INLINE => {
                // SAFETY: the run lies within the caller's buffer (see pack_into).
                let run = unsafe { std::slice::from_raw_parts(self.at(r), r.len as usize) };
                Payload::copy_from_slice(run)
            }
            // SAFETY: as the caller vouched.
            _ => unsafe { self.pack() }.into(),
        }
    }

    /// Appends the packed data to `out`.
    ///
    /// # Safety
    /// As [`Buf::pack`].
    pub(crate) unsafe fn pack_into(&self, out: &mut Vec<u8>) {
        for r in self.dt.layout.runs(self.count).filter(|r| r.len > 0) {
            // SAFETY: each run lies within the caller's buffer (it vouched for
            // `count` elements of the type).
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(self.at(r), r.len as usize) });
        }
    }

    /// Unpacks `data` into the buffer: `MPI_ERR_TRUNCATE` (after filling what
    /// fits) when it is longer.
    ///
    /// # Safety
    /// The buffer holds `count` elements of the type, writable.
    pub(crate) unsafe fn unpack(&self, data: &[u8]) -> Result<(), Fail> {
        let room = self.bytes();
        if let Some(r) = self.dt.layout.single_run(self.count) {
            // One run: one copy of what fits.
            let n = data.len().min(r.len as usize);
            // SAFETY: the run lies within the caller's writable buffer; `data`
            // is ours and does not overlap it.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.at(r), n) };
            return truncated(data.len(), room);
        }
        let mut at = 0;
        for r in self.dt.layout.runs(self.count).filter(|r| r.len > 0) {
            if at >= data.len() {
                break;
            }
            let n = (r.len as usize).min(data.len() - at);
            // SAFETY: the run lies within the caller's writable buffer; `data`
            // is ours and does not overlap it.
            unsafe { std::ptr::copy_nonoverlapping(data[at..].as_ptr(), self.at(r), n) };
            at += n;
        }
        truncated(data.len(), room)
    }

    /// Like [`Buf::unpack`], but `data` must fill the buffer exactly
    /// (collectives, where the counts of every rank must match).
    ///
    /// # Safety
    /// As [`Buf::unpack`].
    pub(crate) unsafe fn unpack_exact(&self, data: &[u8]) -> Result<(), Fail> {
        if data.len() != self.bytes() {
            return Err(Fail::new(
                MPI_ERR_TRUNCATE,
                format!("{} bytes for a buffer of {} bytes (counts differ between ranks)", data.len(), self.bytes()),
            ));
        }
        // SAFETY: as the caller vouched.
        unsafe { self.unpack(data) }
    }
}

/// `MPI_ERR_TRUNCATE` when a message of `got` bytes was longer than the
/// `room` of the buffer it went into (what fit was filled).
fn truncated(got: usize, room: usize) -> Result<(), Fail> {
    if got > room {
        return Err(Fail::new(MPI_ERR_TRUNCATE, format!("message of {got} bytes into a buffer of {room} bytes")));
    }
    Ok(())
}

fn too_large() -> Fail {
    Fail::new(MPI_ERR_COUNT, "buffer too large".into())
}

/// A checked count argument.
pub(crate) fn count_arg(n: c_int, what: &str) -> Result<usize, Fail> {
    usize::try_from(n).map_err(|_| Fail::new(MPI_ERR_ARG, format!("negative {what} {n}")))
}

#[cfg(test)]
pub(crate) fn header_ints() -> Vec<(String, i64)> {
    let mut v: Vec<(String, i64)> =
        PREDEFINED.iter().enumerate().map(|(i, (n, _))| (n.to_string(), i as i64 + 1)).collect();
    let combiners = [
        "NAMED",
        "DUP",
        "CONTIGUOUS",
        "VECTOR",
        "HVECTOR_INTEGER",
        "HVECTOR",
        "INDEXED",
        "HINDEXED_INTEGER",
        "HINDEXED",
        "INDEXED_BLOCK",
        "STRUCT_INTEGER",
        "STRUCT",
        "SUBARRAY",
        "DARRAY",
        "F90_REAL",
        "F90_COMPLEX",
        "F90_INTEGER",
        "RESIZED",
        "HINDEXED_BLOCK",
    ];
    v.extend(combiners.iter().enumerate().map(|(i, n)| (format!("MPI_COMBINER_{n}"), i as i64 + 1)));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predefined_types_have_the_c_sizes_and_pairs_the_c_struct_layout() {
        let obj = crate::state::Objects::new();
        let size = |h: Handle| lookup(&obj, h).unwrap().layout.size();
        let extent = |h: Handle| lookup(&obj, h).unwrap().layout.extent();
        let sizes: Vec<u64> = (1..=14).map(size).collect();
        assert_eq!(sizes, [1, 1, 1, 1, 2, 2, 4, 4, 8, 8, 8, 8, 4, 8]);
        assert_eq!((size(19), extent(19)), (8, 8), "MPI_FLOAT_INT");
        assert_eq!((size(20), extent(20)), (12, 16), "MPI_DOUBLE_INT");
        assert_eq!((size(23), extent(23)), (6, 8), "MPI_SHORT_INT");
        assert_eq!((size(24), extent(24)), (20, 32), "MPI_LONG_DOUBLE_INT");
        assert_eq!((size(17), extent(17)), (0, 0), "MPI_LB");
        for bad in [0, -1, 26, 63, 64, 1000] {
            assert_eq!(lookup(&obj, bad).unwrap_err().class, MPI_ERR_TYPE, "{bad}");
        }
    }

    #[test]
    fn buffers_pack_and_unpack_through_the_layout_and_report_truncation() {
        let obj = crate::state::Objects::new();
        let int = lookup(&obj, 7).unwrap();
        let v = Layout::vector(2, 1, 2, false, &int.layout).unwrap();
        let dt = Dt { handle: 64, layout: LayoutRef::Derived(Arc::new(v)), pair: None, committed: true };
        let src: [i32; 4] = [1, 2, 3, 4];
        let b = Buf::new(src.as_ptr().cast(), 1, dt.clone()).unwrap();
        // SAFETY: src holds one element of the vector (ints 0 and 2).
        let packed = unsafe { b.pack() };
        assert_eq!(bytemuck::cast_slice::<u8, i32>(&packed), [1, 3]);
        let mut dst = [0i32; 4];
        let out = Buf::new(dst.as_mut_ptr().cast_const().cast(), 1, dt).unwrap();
        // SAFETY: dst holds one element of the vector.
        unsafe { out.unpack(&packed).unwrap() };
        assert_eq!(dst, [1, 0, 3, 0]);
        let long = [0u8; 12];
        // SAFETY: as above; only 8 bytes are written.
        assert_eq!(unsafe { out.unpack(&long) }.unwrap_err().class, MPI_ERR_TRUNCATE);
        assert_eq!(Buf::new(std::ptr::null(), 1, int.clone()).unwrap_err().class, MPI_ERR_BUFFER);
        assert!(Buf::new(std::ptr::null(), 0, int.clone()).is_ok());
        assert_eq!(Buf::new(src.as_ptr().cast(), -1, int).unwrap_err().class, MPI_ERR_COUNT);
    }

    #[test]
    fn contiguous_buffers_pack_and_unpack_in_one_copy_and_report_truncation_alike() {
        let obj = crate::state::Objects::new();
        let int = lookup(&obj, 7).unwrap();
        // A predefined type, and a derived one that is contiguous too.
        let two = Layout::contiguous(2, &int.layout).unwrap();
        let pair = Dt { handle: 64, layout: LayoutRef::Derived(Arc::new(two)), pair: None, committed: true };
        let src: [i32; 4] = [1, 2, 3, 4];
        for (dt, count) in [(int.clone(), 3), (pair, 1)] {
            let n = count as usize * dt.layout.size() as usize / 4;
            let b = Buf::new(src.as_ptr().cast(), count, dt.clone()).unwrap();
            // SAFETY: src holds `count` elements of the type.
            let packed = unsafe { b.pack() };
            assert_eq!(bytemuck::cast_slice::<u8, i32>(&packed), &src[..n]);
            let mut dst = [0i32; 4];
            let out = Buf::new(dst.as_mut_ptr().cast_const().cast(), count, dt.clone()).unwrap();
            // SAFETY: dst holds `count` elements; what is longer than them is refused.
            unsafe { out.unpack(&packed[..4]).unwrap() };
            assert_eq!(dst[..n], [&src[..1], &vec![0; n - 1][..]].concat()[..], "a short message fills its part");
            let long = bytemuck::cast_slice::<i32, u8>(&[9, 9, 9, 9]).to_vec();
            // SAFETY: as above; only the buffer's bytes are written.
            assert_eq!(unsafe { out.unpack(&long) }.unwrap_err().class, MPI_ERR_TRUNCATE);
            assert_eq!(dst[..n], vec![9; n][..], "what fits is filled");
            assert_eq!(dst[n..], [0; 4][n..], "nothing past the buffer");
        }
        // No data at a null address: nothing packed, nothing written.
        let none = Buf::new(std::ptr::null(), 0, int).unwrap();
        // SAFETY: no bytes are read or written.
        unsafe {
            assert!(none.pack().is_empty());
            assert_eq!(none.unpack(&[1]).unwrap_err().class, MPI_ERR_TRUNCATE);
            none.unpack(&[]).unwrap();
        }
    }
}
