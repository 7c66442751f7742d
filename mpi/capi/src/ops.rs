//! Reduction operations: the predefined ones (MPI-1 §4.9.2) on the types they
//! allow, `MPI_MINLOC` / `MPI_MAXLOC` on the pair types, and the program's own
//! (`MPI_Op_create`, `MPI_Op_free`). [`combiner`] turns an operation and a
//! datatype into the byte-level combining function the collectives run.

use std::ffi::{c_int, c_void};

use p2pmp_mpi::datatype::Basic;

use crate::buf::write_out;
use crate::consts::{Handle, MPI_COMM_WORLD, MPI_ERR_ARG, MPI_ERR_OP, MPI_OP_NULL};
use crate::error::Fail;
use crate::handles::Table;
use crate::state::{Objects, entry};
use crate::types::{Dt, Pair};

/// `MPI_User_function`.
pub(crate) type UserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut Handle);

/// An operation the program made.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UserOp {
    f: UserFn,
    commute: bool,
}

/// First handle of the program's operations.
const USER_BASE: Handle = 32;

pub(crate) const fn ops() -> Table<UserOp> {
    Table::new(USER_BASE, MPI_ERR_OP, "operation")
}

/// The predefined operations, by handle (index + 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Predef {
    Max,
    Min,
    Sum,
    Prod,
    Land,
    Band,
    Lor,
    Bor,
    Lxor,
    Bxor,
    Minloc,
    Maxloc,
}

const PREDEF: [(&str, Predef); 12] = [
    ("MPI_MAX", Predef::Max),
    ("MPI_MIN", Predef::Min),
    ("MPI_SUM", Predef::Sum),
    ("MPI_PROD", Predef::Prod),
    ("MPI_LAND", Predef::Land),
    ("MPI_BAND", Predef::Band),
    ("MPI_LOR", Predef::Lor),
    ("MPI_BOR", Predef::Bor),
    ("MPI_LXOR", Predef::Lxor),
    ("MPI_BXOR", Predef::Bxor),
    ("MPI_MINLOC", Predef::Minloc),
    ("MPI_MAXLOC", Predef::Maxloc),
];

#[cfg(test)]
pub(crate) fn header_ints() -> Vec<(String, i64)> {
    PREDEF.iter().enumerate().map(|(i, (n, _))| (n.to_string(), i as i64 + 1)).collect()
}

/// An element type a predefined operation computes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Elem {
    Int(Basic),
    /// `MPI_BYTE`: bitwise operations only.
    Byte,
    Float(Basic),
    Pair(Pair),
}

fn elem(dt: &Dt) -> Option<Elem> {
    if let Some(p) = dt.pair {
        return Some(Elem::Pair(p));
    }
    Some(match dt.basic()? {
        Basic::Byte => Elem::Byte,
        Basic::Float | Basic::Double | Basic::LongDouble => Elem::Float(dt.basic()?),
        Basic::Packed => return None,
        b => Elem::Int(b),
    })
}

/// Applies `f` to every element pair: `inout[i] = f(in[i], inout[i])`, on
/// unaligned little-endian bytes.
fn zip<T: bytemuck::Pod>(a: &[u8], b: &mut [u8], f: impl Fn(T, T) -> T) {
    let n = size_of::<T>();
    for (x, y) in a.chunks_exact(n).zip(b.chunks_exact_mut(n)) {
        let v = f(bytemuck::pod_read_unaligned(x), bytemuck::pod_read_unaligned(y));
        y.copy_from_slice(bytemuck::bytes_of(&v));
    }
}

macro_rules! int_op {
    ($t:ty, $op:expr, $a:expr, $b:expr) => {{
        let l = |x: $t| x != 0;
        match $op {
            Predef::Max => zip::<$t>($a, $b, |x, y| x.max(y)),
            Predef::Min => zip::<$t>($a, $b, |x, y| x.min(y)),
            Predef::Sum => zip::<$t>($a, $b, |x, y| x.wrapping_add(y)),
            Predef::Prod => zip::<$t>($a, $b, |x, y| x.wrapping_mul(y)),
            Predef::Land => zip::<$t>($a, $b, |x, y| (l(x) && l(y)) as $t),
            Predef::Lor => zip::<$t>($a, $b, |x, y| (l(x) || l(y)) as $t),
            Predef::Lxor => zip::<$t>($a, $b, |x, y| (l(x) != l(y)) as $t),
            Predef::Band => zip::<$t>($a, $b, |x, y| x & y),
            Predef::Bor => zip::<$t>($a, $b, |x, y| x | y),
            Predef::Bxor => zip::<$t>($a, $b, |x, y| x ^ y),
            Predef::Minloc | Predef::Maxloc => unreachable!("refused by check"),
        }
    }};
}

macro_rules! float_op {
    ($t:ty, $op:expr, $a:expr, $b:expr) => {{
        let l = |x: $t| x != 0.0;
        let f = |b: bool| if b { 1.0 } else { 0.0 };
        match $op {
            Predef::Max => zip::<$t>($a, $b, |x, y| if x > y { x } else { y }),
            Predef::Min => zip::<$t>($a, $b, |x, y| if x < y { x } else { y }),
            Predef::Sum => zip::<$t>($a, $b, |x, y| x + y),
            Predef::Prod => zip::<$t>($a, $b, |x, y| x * y),
            Predef::Land => zip::<$t>($a, $b, |x, y| f(l(x) && l(y))),
            Predef::Lor => zip::<$t>($a, $b, |x, y| f(l(x) || l(y))),
            Predef::Lxor => zip::<$t>($a, $b, |x, y| f(l(x) != l(y))),
            _ => unreachable!("refused by check"),
        }
    }};
}

/// Whether predefined `op` applies to `e` (MPI-1 §4.9.2; like MPICH, `MPI_CHAR`
/// counts as a C integer).
fn allowed(op: Predef, e: Elem) -> bool {
    use Predef as P;
    match e {
        Elem::Int(_) => !matches!(op, P::Minloc | P::Maxloc),
        Elem::Byte => matches!(op, P::Band | P::Bor | P::Bxor),
        // Logical operations on floats too, as MPICH allows.
        Elem::Float(_) => matches!(op, P::Max | P::Min | P::Sum | P::Prod | P::Land | P::Lor | P::Lxor),
        Elem::Pair(_) => matches!(op, P::Minloc | P::Maxloc),
    }
}

/// `inout = in op inout` for a predefined operation on packed elements.
fn apply(op: Predef, e: Elem, a: &[u8], b: &mut [u8]) {
    match e {
        Elem::Int(Basic::Char | Basic::SignedChar) => int_op!(i8, op, a, b),
        Elem::Int(Basic::UnsignedChar) | Elem::Byte => int_op!(u8, op, a, b),
        Elem::Int(Basic::Short) => int_op!(i16, op, a, b),
        Elem::Int(Basic::UnsignedShort) => int_op!(u16, op, a, b),
        Elem::Int(Basic::Int | Basic::WChar) => int_op!(i32, op, a, b),
        Elem::Int(Basic::Unsigned) => int_op!(u32, op, a, b),
        Elem::Int(Basic::Long | Basic::LongLong) => int_op!(i64, op, a, b),
        Elem::Int(Basic::UnsignedLong | Basic::UnsignedLongLong) => int_op!(u64, op, a, b),
        Elem::Float(Basic::Float) => float_op!(f32, op, a, b),
        Elem::Float(Basic::Double) => float_op!(f64, op, a, b),
        Elem::Float(_) => long_double(op, a, b),
        Elem::Pair(p) => pairs(op == Predef::Minloc, p, a, b),
        Elem::Int(_) => unreachable!("no other integer types"),
    }
}

/// x87 80-bit extended floats (`long double`, 16 bytes with padding), computed
/// through f64 (exact for every value an f64 holds).
fn long_double(op: Predef, a: &[u8], b: &mut [u8]) {
    for (x, y) in a.chunks_exact(16).zip(b.chunks_exact_mut(16)) {
        let (p, q) = (f80_to_f64(x), f80_to_f64(y));
        let l = |x: f64| x != 0.0;
        let f = |b: bool| if b { 1.0 } else { 0.0 };
        let v = match op {
            Predef::Max => p.max(q),
            Predef::Min => p.min(q),
            Predef::Sum => p + q,
            Predef::Land => f(l(p) && l(q)),
            Predef::Lor => f(l(p) || l(q)),
            Predef::Lxor => f(l(p) != l(q)),
            _ => p * q,
        };
        y[..10].copy_from_slice(&f64_to_f80(v));
    }
}

fn f80_to_f64(b: &[u8]) -> f64 {
    let mant = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    let se = u16::from_le_bytes([b[8], b[9]]);
    let sign = if se & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from(se & 0x7fff);
    if exp == 0 && mant == 0 {
        return sign * 0.0;
    }
    if exp == 0x7fff {
        return if mant << 1 == 0 { sign * f64::INFINITY } else { f64::NAN };
    }
    // Two steps, so a tiny result is not flushed to zero by an underflowing power.
    let e = exp - 16383 - 63;
    sign * (mant as f64) * 2f64.powi(e / 2) * 2f64.powi(e - e / 2)
}

fn f64_to_f80(v: f64) -> [u8; 10] {
    let mut out = [0u8; 10];
    let sign: u16 = if v.is_sign_negative() { 0x8000 } else { 0 };
    let (exp, mant) = if v == 0.0 {
        (0u16, 0u64)
    } else if v.is_infinite() {
        (0x7fff, 1 << 63)
    } else if v.is_nan() {
        (0x7fff, 3 << 62)
    } else {
        let bits = v.abs().to_bits();
        let (e, f) = ((bits >> 52) as i32, bits & ((1 << 52) - 1));
        if e == 0 {
            // Subnormal f64 (f * 2^-1074): normalise the mantissa.
            let lz = f.leading_zeros();
            ((15372 - lz as i32) as u16, f << lz)
        } else {
            ((e - 1023 + 16383) as u16, (1 << 63) | (f << 11))
        }
    };
    out[..8].copy_from_slice(&mant.to_le_bytes());
    out[8..].copy_from_slice(&(sign | exp).to_le_bytes());
    out
}

/// `MPI_MINLOC` / `MPI_MAXLOC` on packed (value, index) pairs: the better
/// value, the lower index on a tie.
fn pairs(min: bool, p: Pair, a: &[u8], b: &mut [u8]) {
    let vs = p.value().size() as usize;
    let value = |x: &[u8]| -> f64 {
        match p.value() {
            Basic::Float => f64::from(bytemuck::pod_read_unaligned::<f32>(x)),
            Basic::Double => bytemuck::pod_read_unaligned::<f64>(x),
            Basic::Long => bytemuck::pod_read_unaligned::<i64>(x) as f64,
            Basic::Int => f64::from(bytemuck::pod_read_unaligned::<i32>(x)),
            Basic::Short => f64::from(bytemuck::pod_read_unaligned::<i16>(x)),
            _ => f80_to_f64(x),
        }
    };
    let exact_long = p.value() == Basic::Long;
    for (x, y) in a.chunks_exact(vs + 4).zip(b.chunks_exact_mut(vs + 4)) {
        let ord = if exact_long {
            bytemuck::pod_read_unaligned::<i64>(&x[..8]).cmp(&bytemuck::pod_read_unaligned::<i64>(&y[..8]))
        } else {
            value(&x[..vs]).partial_cmp(&value(&y[..vs])).unwrap_or(std::cmp::Ordering::Equal)
        };
        let (ix, iy): (i32, i32) = (bytemuck::pod_read_unaligned(&x[vs..]), bytemuck::pod_read_unaligned(&y[vs..]));
        let take_x = match ord {
            std::cmp::Ordering::Less => min,
            std::cmp::Ordering::Greater => !min,
            std::cmp::Ordering::Equal => ix < iy,
        };
        if take_x {
            y.copy_from_slice(x);
        }
    }
}

/// A byte-level combining function and whether it commutes.
pub(crate) type Combiner = (Box<dyn FnMut(&[u8], &mut [u8]) -> p2pmp_mpi::Result<()>>, bool);

/// The combining function of operation `h` on datatype `dt`; `MPI_ERR_OP` when
/// a predefined operation does not apply to the type.
pub(crate) fn combiner(obj: &Objects, h: Handle, dt: &Dt) -> Result<Combiner, Fail> {
    if let Some(&(name, op)) = usize::try_from(h).ok().and_then(|h| h.checked_sub(1)).and_then(|i| PREDEF.get(i)) {
        let e = elem(dt)
            .filter(|&e| allowed(op, e))
            .ok_or_else(|| Fail::new(MPI_ERR_OP, format!("{name} does not apply to datatype {}", dt.handle)))?;
        return Ok((
            Box::new(move |a: &[u8], b: &mut [u8]| {
                apply(op, e, a, b);
                Ok(())
            }),
            true,
        ));
    }
    if h == MPI_OP_NULL {
        return Err(Fail::new(MPI_ERR_OP, "MPI_OP_NULL is not an operation".into()));
    }
    let user = *obj.ops.get(h)?;
    let dt = dt.clone();
    Ok((Box::new(move |a: &[u8], b: &mut [u8]| call_user(user.f, &dt, a, b)), user.commute))
}

/// Calls the program's function on `a` and `b` laid out as the datatype says
/// (aligned scratch copies of both, so the function may cast them).
fn call_user(f: UserFn, dt: &Dt, a: &[u8], b: &mut [u8]) -> p2pmp_mpi::Result<()> {
    let l = &dt.layout;
    let size = l.size() as usize;
    let count = a.len().checked_div(size).unwrap_or(0);
    let (lo, hi) = l.span(count as u64)?;
    // Scratch covering [min(lo, 0), max(hi, 0)), element 0 at `base`, 16-byte aligned.
    let (lo, hi) = (lo.min(0), hi.max(0));
    let base = usize::try_from(-lo).unwrap_or(0);
    let words = usize::try_from(hi - lo).unwrap_or(0).div_ceil(16).max(1);
    let (mut sa, mut sb) = (vec![0u128; words], vec![0u128; words]);
    let (ba, bb) = (bytemuck::cast_slice_mut::<u128, u8>(&mut sa), bytemuck::cast_slice_mut::<u128, u8>(&mut sb));
    p2pmp_mpi::datatype::unpack(l, a, ba, base, count as u64)?;
    p2pmp_mpi::datatype::unpack(l, b, bb, base, count as u64)?;
    let (mut n, mut h) = (count as c_int, dt.handle);
    // SAFETY: the program's function, on two scratch buffers holding `count`
    // elements of the datatype each from `base`.
    unsafe { f(ba.as_mut_ptr().add(base).cast(), bb.as_mut_ptr().add(base).cast(), &raw mut n, &raw mut h) };
    let mut out = Vec::with_capacity(b.len());
    p2pmp_mpi::datatype::pack(l, bb, base, count as u64, &mut out)?;
    b.copy_from_slice(&out);
    Ok(())
}

/// `MPI_Op_create`.
///
/// # Safety
/// `user_fn` is an `MPI_User_function`; `op` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Op_create(user_fn: Option<UserFn>, commute: c_int, op: *mut Handle) -> c_int {
    entry("MPI_Op_create", MPI_COMM_WORLD, |mpi| {
        let f = user_fn.ok_or_else(|| Fail::new(MPI_ERR_ARG, "null user function".into()))?;
        let h = mpi.obj.ops.insert(UserOp { f, commute: commute != 0 })?;
        // SAFETY: the caller's handle, or null (refused).
        unsafe { write_out(op, h) }
    })
}

/// `MPI_Op_free`: sets `*op` to `MPI_OP_NULL`; predefined operations cannot be freed.
///
/// # Safety
/// `op` is readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Op_free(op: *mut Handle) -> c_int {
    entry("MPI_Op_free", MPI_COMM_WORLD, |mpi| {
        if op.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null op pointer".into()));
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { op.read() };
        mpi.obj.ops.remove(h)?;
        // SAFETY: non-null, the caller's handle.
        unsafe { op.write(MPI_OP_NULL) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dt(h: Handle) -> Dt {
        crate::types::lookup(&Objects::new(), h).unwrap()
    }

    fn run(op: Handle, h: Handle, a: &[u8], b: &[u8]) -> Result<Vec<u8>, Fail> {
        let (mut f, _) = combiner(&Objects::new(), op, &dt(h))?;
        let mut out = b.to_vec();
        f(a, &mut out).unwrap();
        Ok(out)
    }

    #[test]
    fn predefined_operations_compute_on_the_types_they_allow() {
        let ints = |v: &[i32]| bytemuck::cast_slice::<i32, u8>(v).to_vec();
        assert_eq!(run(3, 7, &ints(&[1, -2]), &ints(&[5, 7])).unwrap(), ints(&[6, 5]));
        assert_eq!(run(9, 7, &ints(&[1, 0]), &ints(&[1, 3])).unwrap(), ints(&[0, 1]), "MPI_LXOR");
        assert_eq!(run(10, 4, &[0b1100], &[0b1010]).unwrap(), [0b0110], "MPI_BXOR on bytes");
        assert_eq!(run(2, 1, &[5u8, 200], &[3, 1]).unwrap(), [3, 200], "MPI_MIN on MPI_CHAR (signed)");
        for (op, h) in [(3, 4), (6, 13), (11, 7), (10, 14), (3, 16)] {
            assert_eq!(run(op, h, &[0; 8], &[0; 8]).unwrap_err().class, MPI_ERR_OP, "op {op} type {h}");
        }
        // MPI_MAXLOC on MPI_DOUBLE_INT (packed: 12 bytes a pair); ties take the lower index.
        let pair = |v: f64, i: i32| [v.to_le_bytes().to_vec(), i.to_le_bytes().to_vec()].concat();
        assert_eq!(run(12, 20, &pair(2.0, 7), &pair(1.0, 3)).unwrap(), pair(2.0, 7));
        assert_eq!(run(12, 20, &pair(2.0, 7), &pair(2.0, 3)).unwrap(), pair(2.0, 3));
        assert_eq!(run(11, 22, &[9, 0, 0, 0, 1, 0, 0, 0], &[4, 0, 0, 0, 2, 0, 0, 0]).unwrap()[0], 4);
    }

    #[test]
    fn long_doubles_convert_exactly_for_f64_values() {
        for v in [0.0, 1.0, -2.5, 1e300, 3.0e-310, f64::INFINITY, 12345.678] {
            let b = f64_to_f80(v);
            let mut w = [0u8; 16];
            w[..10].copy_from_slice(&b);
            assert_eq!(f80_to_f64(&w), v, "{v}");
        }
        // 1.0L as x87 stores it.
        let one = [0, 0, 0, 0, 0, 0, 0, 0x80, 0xff, 0x3f, 0, 0, 0, 0, 0, 0];
        assert_eq!(f80_to_f64(&one), 1.0);
    }
}
