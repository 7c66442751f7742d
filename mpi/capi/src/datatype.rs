//! The predefined datatypes: handle, element size, and the Rust element type a
//! reduction runs on.

use std::ffi::c_int;

use crate::consts::{Handle, MPI_ERR_ARG, MPI_ERR_TYPE, MPI_UNDEFINED};
use crate::error::Fail;
use crate::status::MpiStatus;

/// A predefined datatype; the discriminant is its `mpi.h` handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub(crate) enum Datatype {
    Char = 1,
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
}

/// Every datatype with its `mpi.h` name.
pub(crate) const DATATYPES: [(&str, Datatype); 14] = [
    ("MPI_CHAR", Datatype::Char),
    ("MPI_SIGNED_CHAR", Datatype::SignedChar),
    ("MPI_UNSIGNED_CHAR", Datatype::UnsignedChar),
    ("MPI_BYTE", Datatype::Byte),
    ("MPI_SHORT", Datatype::Short),
    ("MPI_UNSIGNED_SHORT", Datatype::UnsignedShort),
    ("MPI_INT", Datatype::Int),
    ("MPI_UNSIGNED", Datatype::Unsigned),
    ("MPI_LONG", Datatype::Long),
    ("MPI_UNSIGNED_LONG", Datatype::UnsignedLong),
    ("MPI_LONG_LONG", Datatype::LongLong),
    ("MPI_UNSIGNED_LONG_LONG", Datatype::UnsignedLongLong),
    ("MPI_FLOAT", Datatype::Float),
    ("MPI_DOUBLE", Datatype::Double),
];

/// What reductions a datatype allows (MPI-1 §4.9.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `MPI_CHAR`: text, no reductions.
    Text,
    /// C integers: every operation.
    Integer,
    /// `MPI_BYTE`: bitwise operations only.
    Byte,
    /// Floating point: arithmetic and min/max.
    Float,
}

/// Runs `$body` with `$t` bound to the element type of datatype `$dt`.
macro_rules! with_elem {
    ($dt:expr, $t:ident => $body:expr) => {{
        use std::ffi::{
            c_char, c_double, c_float, c_int, c_long, c_longlong, c_schar, c_short, c_uchar, c_uint, c_ulong,
            c_ulonglong, c_ushort,
        };
        use $crate::datatype::Datatype as D;
        match $dt {
            D::Char => {
                type $t = c_char;
                $body
            }
            D::SignedChar => {
                type $t = c_schar;
                $body
            }
            D::UnsignedChar | D::Byte => {
                type $t = c_uchar;
                $body
            }
            D::Short => {
                type $t = c_short;
                $body
            }
            D::UnsignedShort => {
                type $t = c_ushort;
                $body
            }
            D::Int => {
                type $t = c_int;
                $body
            }
            D::Unsigned => {
                type $t = c_uint;
                $body
            }
            D::Long => {
                type $t = c_long;
                $body
            }
            D::UnsignedLong => {
                type $t = c_ulong;
                $body
            }
            D::LongLong => {
                type $t = c_longlong;
                $body
            }
            D::UnsignedLongLong => {
                type $t = c_ulonglong;
                $body
            }
            D::Float => {
                type $t = c_float;
                $body
            }
            D::Double => {
                type $t = c_double;
                $body
            }
        }
    }};
}
pub(crate) use with_elem;

impl Datatype {
    /// The datatype of a handle; `MPI_ERR_TYPE` for anything else.
    pub(crate) fn from_handle(h: Handle) -> Result<Datatype, Fail> {
        // Handle h is entry h - 1 (the table is in handle order; the test below checks).
        h.checked_sub(1)
            .and_then(|i| DATATYPES.get(usize::try_from(i).ok()?))
            .map(|(_, d)| *d)
            .filter(|d| *d as Handle == h)
            .ok_or_else(|| Fail::new(MPI_ERR_TYPE, format!("datatype handle {h} is not a predefined datatype")))
    }

    /// Bytes per element.
    pub(crate) fn size(self) -> usize {
        with_elem!(self, T => std::mem::size_of::<T>())
    }

    pub(crate) fn kind(self) -> Kind {
        match self {
            Datatype::Char => Kind::Text,
            Datatype::Byte => Kind::Byte,
            Datatype::Float | Datatype::Double => Kind::Float,
            _ => Kind::Integer,
        }
    }

    /// Bytes of `count` elements: `MPI_ERR_COUNT` for a negative count or one
    /// too large to address.
    pub(crate) fn bytes(self, count: c_int) -> Result<usize, Fail> {
        let n = usize::try_from(count)
            .map_err(|_| Fail::new(crate::consts::MPI_ERR_COUNT, format!("negative count {count}")))?;
        n.checked_mul(self.size())
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(|| Fail::new(crate::consts::MPI_ERR_COUNT, format!("count {count} too large")))
    }
}

/// `MPI_Type_size`.
///
/// # Safety
/// `size` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_size(datatype: Handle, size: *mut c_int) -> c_int {
    crate::state::entry("MPI_Type_size", crate::consts::MPI_COMM_WORLD, |_| {
        let s = Datatype::from_handle(datatype)?.size();
        // SAFETY: the caller passes a writable int or null (checked).
        unsafe { crate::buf::write_out(size, s as c_int) }
    })
}

/// `MPI_Type_get_envelope`: predefined datatypes are `MPI_COMBINER_NAMED`.
///
/// # Safety
/// The four out-parameters are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_get_envelope(
    datatype: Handle,
    num_integers: *mut c_int,
    num_addresses: *mut c_int,
    num_datatypes: *mut c_int,
    combiner: *mut c_int,
) -> c_int {
    crate::state::entry("MPI_Type_get_envelope", crate::consts::MPI_COMM_WORLD, |_| {
        Datatype::from_handle(datatype)?;
        // SAFETY: the caller's ints, or null (refused).
        unsafe {
            crate::buf::write_out(num_integers, 0)?;
            crate::buf::write_out(num_addresses, 0)?;
            crate::buf::write_out(num_datatypes, 0)?;
            crate::buf::write_out(combiner, 1)
        }
    })
}

/// `MPI_Get_count`: whole elements of `datatype` in a received message, or
/// `MPI_UNDEFINED` when the byte count is not a multiple of the element size.
///
/// # Safety
/// `status` and `count` are null or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Get_count(status: *const MpiStatus, datatype: Handle, count: *mut c_int) -> c_int {
    crate::state::entry("MPI_Get_count", crate::consts::MPI_COMM_WORLD, |_| {
        let dt = Datatype::from_handle(datatype)?;
        if status.is_null() || status as usize == crate::consts::STATUS_IGNORE_ADDR {
            return Err(Fail::new(MPI_ERR_ARG, "status is null or MPI_STATUS_IGNORE".into()));
        }
        // SAFETY: a non-null status pointer from C points to an MPI_Status (checked above).
        let st = unsafe { &*status };
        let bytes = st.count.max(0) as u64;
        let size = dt.size() as u64;
        let n = if bytes % size == 0 { c_int::try_from(bytes / size).unwrap_or(MPI_UNDEFINED) } else { MPI_UNDEFINED };
        // SAFETY: the caller passes a writable int or null (checked).
        unsafe { crate::buf::write_out(count, n) }
    })
}

/// The header's datatype handles and combiner numbers.
#[cfg(test)]
pub(crate) fn header_ints() -> Vec<(String, i64)> {
    let mut v: Vec<(String, i64)> = DATATYPES.iter().map(|(n, d)| (n.to_string(), *d as i64)).collect();
    let more = [
        ("MPI_LONG_DOUBLE", 15),
        ("MPI_PACKED", 16),
        ("MPI_LB", 17),
        ("MPI_UB", 18),
        ("MPI_FLOAT_INT", 19),
        ("MPI_DOUBLE_INT", 20),
        ("MPI_LONG_INT", 21),
        ("MPI_2INT", 22),
        ("MPI_SHORT_INT", 23),
        ("MPI_LONG_DOUBLE_INT", 24),
        ("MPI_WCHAR", 25),
        ("MPI_COMBINER_NAMED", 1),
        ("MPI_COMBINER_DUP", 2),
        ("MPI_COMBINER_CONTIGUOUS", 3),
        ("MPI_COMBINER_VECTOR", 4),
        ("MPI_COMBINER_HVECTOR_INTEGER", 5),
        ("MPI_COMBINER_HVECTOR", 6),
        ("MPI_COMBINER_INDEXED", 7),
        ("MPI_COMBINER_HINDEXED_INTEGER", 8),
        ("MPI_COMBINER_HINDEXED", 9),
        ("MPI_COMBINER_INDEXED_BLOCK", 10),
        ("MPI_COMBINER_STRUCT_INTEGER", 11),
        ("MPI_COMBINER_STRUCT", 12),
        ("MPI_COMBINER_SUBARRAY", 13),
        ("MPI_COMBINER_DARRAY", 14),
        ("MPI_COMBINER_F90_REAL", 15),
        ("MPI_COMBINER_F90_COMPLEX", 16),
        ("MPI_COMBINER_F90_INTEGER", 17),
        ("MPI_COMBINER_RESIZED", 18),
        ("MPI_COMBINER_HINDEXED_BLOCK", 19),
    ];
    v.extend(more.iter().map(|&(n, x)| (n.to_string(), x)));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_c_types_and_bad_handles_are_refused() {
        let sizes: Vec<usize> = DATATYPES.iter().map(|(_, d)| d.size()).collect();
        assert_eq!(sizes, [1, 1, 1, 1, 2, 2, 4, 4, 8, 8, 8, 8, 4, 8]);
        for (_, d) in DATATYPES {
            assert_eq!(Datatype::from_handle(d as Handle).unwrap(), d);
        }
        for bad in [0, -1, 15, 1000] {
            assert_eq!(Datatype::from_handle(bad).unwrap_err().class, MPI_ERR_TYPE);
        }
        assert_eq!(Datatype::Int.bytes(3).unwrap(), 12);
        assert_eq!(Datatype::Int.bytes(-1).unwrap_err().class, crate::consts::MPI_ERR_COUNT);
    }
}
