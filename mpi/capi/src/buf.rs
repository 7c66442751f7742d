//! Checked views of the caller's buffers and out-parameters.

use std::ffi::{c_char, c_int};

use crate::consts::MPI_ERR_ARG;
use crate::error::Fail;

/// Writes `v` to an out-parameter; `MPI_ERR_ARG` for a null pointer.
///
/// # Safety
/// `p` is null or valid for a write of `T`.
pub(crate) unsafe fn write_out<T>(p: *mut T, v: T) -> Result<(), Fail> {
    if p.is_null() {
        return Err(Fail::new(MPI_ERR_ARG, "null output argument".into()));
    }
    // SAFETY: non-null, and the caller vouches it is writable.
    unsafe { p.write(v) };
    Ok(())
}

/// `n` items at `p`: `MPI_ERR_ARG` for a negative `n` or a null `p` when `n > 0`.
///
/// # Safety
/// `p` is null or valid for reads of `n` items for `'a`.
pub(crate) unsafe fn in_array<'a, T>(p: *const T, n: c_int) -> Result<&'a [T], Fail> {
    let n = usize::try_from(n).map_err(|_| Fail::new(MPI_ERR_ARG, format!("negative count {n}")))?;
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Fail::new(MPI_ERR_ARG, format!("null array of {n} items")));
    }
    // SAFETY: non-null; the caller vouches for `n` readable items.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// `n` writable items at `p` (as [`in_array`]).
///
/// # Safety
/// `p` is null or valid for writes of `n` items for `'a`, not aliased.
pub(crate) unsafe fn out_array<'a, T>(p: *mut T, n: c_int) -> Result<&'a mut [T], Fail> {
    let n = usize::try_from(n).map_err(|_| Fail::new(MPI_ERR_ARG, format!("negative count {n}")))?;
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Fail::new(MPI_ERR_ARG, format!("null array of {n} items")));
    }
    // SAFETY: non-null; the caller vouches for `n` writable items.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// The NUL-terminated string at `p` (lossily decoded).
///
/// # Safety
/// `p` is null or a NUL-terminated string.
pub(crate) unsafe fn read_c_string(p: *const c_char) -> Result<String, Fail> {
    if p.is_null() {
        return Err(Fail::new(MPI_ERR_ARG, "null string".into()));
    }
    // SAFETY: non-null; the caller vouches for the terminator.
    Ok(unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Writes `s` as a NUL-terminated string into `cap` chars at `p` (cut to fit) and
/// its length to `len`.
///
/// # Safety
/// `p` is null or valid for `cap` chars; `len` is null or writable.
pub(crate) unsafe fn write_c_string(p: *mut c_char, cap: c_int, s: &str, len: *mut c_int) -> Result<(), Fail> {
    if p.is_null() {
        return Err(Fail::new(MPI_ERR_ARG, "null string argument".into()));
    }
    let n = s.len().min(cap.max(1) as usize - 1);
    // SAFETY: non-null; the caller vouches for `cap` chars; n + 1 <= cap.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr().cast::<c_char>(), p, n);
        p.add(n).write(0);
    }
    // SAFETY: the caller's int or null (refused).
    unsafe { write_out(len, n as c_int) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_cut_to_fit_and_arrays_checked() {
        let mut s = [1 as c_char; 4];
        let mut len = 0;
        // SAFETY: s holds 4 chars, len is a local int.
        unsafe { write_c_string(s.as_mut_ptr(), 4, "hello", &mut len) }.unwrap();
        assert_eq!((s, len), ([b'h' as c_char, b'e' as c_char, b'l' as c_char, 0], 3));
        // SAFETY: null with zero length is never read; a negative count is refused first.
        unsafe {
            assert!(in_array::<c_int>(std::ptr::null(), 0).unwrap().is_empty());
            assert_eq!(in_array::<c_int>(std::ptr::null(), 2).unwrap_err().class, MPI_ERR_ARG);
            assert_eq!(in_array::<c_int>(std::ptr::null(), -1).unwrap_err().class, MPI_ERR_ARG);
        }
    }
}
