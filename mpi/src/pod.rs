//! Plain-old-data element types and reduction operations.

use bytes::Bytes;
use p2pmp_core::mpi::Payload;

/// An element type MPI buffers are made of: fixed size, any bit pattern valid,
/// and the arithmetic the reduction operations need.
pub trait Pod: bytemuck::Pod + PartialOrd + Send + Sync + 'static {
    /// `a + b` (wrapping for integers).
    fn add(a: Self, b: Self) -> Self;
    /// `a * b` (wrapping for integers).
    fn mul(a: Self, b: Self) -> Self;
    /// `a & b` of the bit patterns.
    fn bit_and(a: Self, b: Self) -> Self;
    /// `a | b` of the bit patterns.
    fn bit_or(a: Self, b: Self) -> Self;
    /// 1 when `a` and `b` are both non-zero, else 0 (C's `a && b`).
    fn logical_and(a: Self, b: Self) -> Self;
    /// 1 when `a` or `b` is non-zero, else 0 (C's `a || b`).
    fn logical_or(a: Self, b: Self) -> Self;
}

macro_rules! int_pod {
    ($($t:ty),*) => {$(
        impl Pod for $t {
            fn add(a: Self, b: Self) -> Self { a.wrapping_add(b) }
            fn mul(a: Self, b: Self) -> Self { a.wrapping_mul(b) }
            fn bit_and(a: Self, b: Self) -> Self { a & b }
            fn bit_or(a: Self, b: Self) -> Self { a | b }
            fn logical_and(a: Self, b: Self) -> Self { Self::from(a != 0 && b != 0) }
            fn logical_or(a: Self, b: Self) -> Self { Self::from(a != 0 || b != 0) }
        }
    )*};
}
int_pod!(u8, u16, u32, u64, i8, i16, i32, i64);

macro_rules! float_pod {
    ($($t:ty),*) => {$(
        impl Pod for $t {
            fn add(a: Self, b: Self) -> Self { a + b }
            fn mul(a: Self, b: Self) -> Self { a * b }
            fn bit_and(a: Self, b: Self) -> Self { Self::from_bits(a.to_bits() & b.to_bits()) }
            fn bit_or(a: Self, b: Self) -> Self { Self::from_bits(a.to_bits() | b.to_bits()) }
            fn logical_and(a: Self, b: Self) -> Self { if a != 0.0 && b != 0.0 { 1.0 } else { 0.0 } }
            fn logical_or(a: Self, b: Self) -> Self { if a != 0.0 || b != 0.0 { 1.0 } else { 0.0 } }
        }
    )*};
}
float_pod!(f32, f64);

/// A reduction operation (all are commutative and associative, floats up to rounding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    Sum,
    Prod,
    Min,
    Max,
    /// Logical and: 1 where both are non-zero, else 0.
    LogicalAnd,
    /// Logical or: 1 where either is non-zero, else 0.
    LogicalOr,
    /// Bitwise and.
    BitAnd,
    /// Bitwise or.
    BitOr,
}

impl Op {
    /// Applies the operation element-wise: `acc[i] = acc[i] op x[i]`.
    pub fn apply<T: Pod>(self, acc: &mut [T], x: &[T]) {
        debug_assert_eq!(acc.len(), x.len());
        // One loop per operation, each compiled (and vectorised) with its
        // operation inlined: through a function pointer, a 64 KiB sum made
        // 8,192 indirect calls and took a quarter of an 8-rank Allreduce.
        fn each<T: Copy>(acc: &mut [T], x: &[T], f: impl Fn(T, T) -> T) {
            for (a, &b) in acc.iter_mut().zip(x) {
                *a = f(*a, b);
            }
        }
        match self {
            Op::Sum => each(acc, x, T::add),
            Op::Prod => each(acc, x, T::mul),
            Op::Min => each(acc, x, |a, b| if b < a { b } else { a }),
            Op::Max => each(acc, x, |a, b| if b > a { b } else { a }),
            Op::LogicalAnd => each(acc, x, T::logical_and),
            Op::LogicalOr => each(acc, x, T::logical_or),
            Op::BitAnd => each(acc, x, T::bit_and),
            Op::BitOr => each(acc, x, T::bit_or),
        }
    }
}

/// The bytes of a typed slice, copied once into a shareable buffer.
pub(crate) fn to_bytes<T: Pod>(data: &[T]) -> Bytes {
    shared_bytes(bytemuck::cast_slice(data))
}

/// The bytes of a typed slice, copied once as a message's payload (see
/// [`payload_of`]).
pub(crate) fn to_payload<T: Pod>(data: &[T]) -> Payload {
    payload_of(bytemuck::cast_slice(data))
}

/// `bytes` copied once as a message's payload: held in place if they fit
/// (no allocation), else as [`shared_bytes`] makes them.
pub(crate) fn payload_of(bytes: &[u8]) -> Payload {
    if bytes.len() <= Payload::INLINE { Payload::copy_from_slice(bytes) } else { shared_bytes(bytes).into() }
}

/// A small message's most bytes: [`shared_bytes`] copies up to this many
/// into one allocation that holds its own reference count, and the transport
/// reads a frame with a payload up to this size where it lies (and copies the
/// payload after the frame's head when it queues the frame).
pub(crate) const SMALL_PAYLOAD: usize = 64;
const _: () = assert!(SMALL_PAYLOAD <= u8::MAX as usize, "the length is kept in a u8");

/// A small message's bytes, held inline (see [`shared_bytes`]).
struct Inline {
    len: u8,
    buf: [u8; SMALL_PAYLOAD],
}

impl AsRef<[u8]> for Inline {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }
}

/// `bytes` copied into a buffer that is cheap to share: the way to make the
/// `Bytes` of a small message that is sent more than once (a collective's,
/// to several ranks). A `Bytes` made from a `Vec` allocates its shared count
/// at its first clone (two allocations and two frees), a small one made here
/// needs one of each. A message sent once is cheaper as a [`Payload`]
/// ([`Payload::copy_from_slice`]: up to [`Payload::INLINE`] bytes without an
/// allocation).
pub fn shared_bytes(bytes: &[u8]) -> Bytes {
    if bytes.is_empty() || bytes.len() > SMALL_PAYLOAD {
        return Bytes::copy_from_slice(bytes);
    }
    let mut small = Inline { len: bytes.len() as u8, buf: [0; SMALL_PAYLOAD] };
    small.buf[..bytes.len()].copy_from_slice(bytes);
    Bytes::from_owner(small)
}

/// A typed vector from message bytes (which may be unaligned for `T`).
pub(crate) fn from_bytes<T: Pod>(data: &[u8]) -> crate::Result<Vec<T>> {
    let size = std::mem::size_of::<T>();
    if size == 0 || data.len() % size != 0 {
        return Err(crate::Error::Truncated { got: data.len(), want: data.len() / size.max(1) * size });
    }
    let n = data.len() / size;
    let mut v: Vec<T> = Vec::with_capacity(n);
    // SAFETY: the spare capacity holds `n` elements, `data.len()` bytes; the
    // copy initialises every one of them, and any bytes are a valid `T`
    // (`Pod`). No zero-fill first: a large buffer's pages are touched once.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), v.as_mut_ptr().cast::<u8>(), data.len());
        v.set_len(n);
    }
    Ok(v)
}

/// Copies message bytes into a typed buffer of exactly that size.
pub(crate) fn copy_into<T: Pod>(buf: &mut [T], data: &[u8]) -> crate::Result<()> {
    let dst: &mut [u8] = bytemuck::cast_slice_mut(buf);
    if dst.len() != data.len() {
        return Err(crate::Error::Truncated { got: data.len(), want: dst.len() });
    }
    dst.copy_from_slice(data);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_bytes_copies_any_length_and_clones_share_it() {
        for len in [0, 1, SMALL_PAYLOAD - 1, SMALL_PAYLOAD, SMALL_PAYLOAD + 1, 4096] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let b = shared_bytes(&src);
            assert_eq!(&b[..], &src[..], "{len} bytes");
            let (c, d) = (b.clone(), b.slice(len / 2..));
            drop(b);
            assert_eq!((&c[..], &d[..]), (&src[..], &src[len / 2..]), "{len} bytes, shared");
            assert_eq!(c.as_ptr(), d.as_ptr().wrapping_sub(len / 2), "{len} bytes: a slice shares the buffer");
        }
    }

    #[test]
    fn a_payload_is_held_in_place_up_to_its_limit_and_shared_beyond() {
        let inline = Payload::INLINE;
        for len in [0, 8, inline, inline + 1, SMALL_PAYLOAD, SMALL_PAYLOAD + 1, 1000] {
            let src: Vec<u8> = (0..len).map(|i| (i * 5 + 1) as u8).collect();
            let p = payload_of(&src);
            assert_eq!(&p[..], &src[..], "{len} bytes");
            // A shared payload hands out its own buffer; one held in place, a copy.
            let (a, b) = (p.clone().into_bytes(), p.clone().into_bytes());
            if len > 0 {
                assert_eq!(len > inline, a.as_ptr() == b.as_ptr(), "{len} bytes: shared or in place");
            }
        }
    }

    #[test]
    fn ops_and_conversions() {
        let mut a = vec![1i64, 5, -3];
        Op::Sum.apply(&mut a, &[2, 2, 2]);
        assert_eq!(a, [3, 7, -1]);
        Op::Max.apply(&mut a, &[4, 0, 0]);
        assert_eq!(a, [4, 7, 0]);
        Op::Min.apply(&mut a, &[5, 1, 9]);
        assert_eq!(a, [4, 1, 0]);
        Op::Prod.apply(&mut a, &[2, 3, 4]);
        assert_eq!(a, [8, 3, 0]);
        Op::BitOr.apply(&mut a, &[1, 4, 0]);
        assert_eq!(a, [9, 7, 0]);
        Op::BitAnd.apply(&mut a, &[12, 5, -1]);
        assert_eq!(a, [8, 5, 0]);
        Op::LogicalAnd.apply(&mut a, &[3, 0, 7]);
        assert_eq!(a, [1, 0, 0]);
        Op::LogicalOr.apply(&mut a, &[0, 0, -2]);
        assert_eq!(a, [1, 0, 1]);
        let mut f = vec![0.5f32, 0.0];
        Op::LogicalOr.apply(&mut f, &[0.0, 0.0]);
        assert_eq!(f, [1.0, 0.0]);
        let b = to_bytes(&[1.5f64, -2.0]);
        assert_eq!(from_bytes::<f64>(&b).unwrap(), [1.5, -2.0]);
        assert!(from_bytes::<u32>(&b[..7]).is_err());
        let mut out = [0u16; 2];
        copy_into(&mut out, &[1, 0, 2, 0]).unwrap();
        assert_eq!(out, [1, 2]);
        assert!(copy_into(&mut out, &[1]).is_err());
    }
}
