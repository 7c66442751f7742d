//! Checked views of the caller's buffers and out-parameters.

use std::ffi::{c_char, c_int, c_void};

use crate::consts::{IN_PLACE_ADDR, MPI_ERR_ARG, MPI_ERR_BUFFER, MPI_ERR_TRUNCATE};
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

/// `len` bytes at `p`; a null `p` is `MPI_ERR_BUFFER` unless `len` is 0.
///
/// # Safety
/// `p` is null or valid for reads of `len` bytes for `'a`.
pub(crate) unsafe fn in_bytes<'a>(p: *const c_void, len: usize) -> Result<&'a [u8], Fail> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Fail::new(MPI_ERR_BUFFER, format!("null buffer for {len} bytes")));
    }
    if p as usize == IN_PLACE_ADDR {
        return Err(Fail::new(MPI_ERR_BUFFER, "MPI_IN_PLACE is not allowed here".into()));
    }
    // SAFETY: non-null; the caller vouches for `len` readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// A receive buffer of `len` bytes, filled later (when a request completes).
#[derive(Debug)]
pub(crate) struct OutBuf {
    ptr: *mut u8,
    len: usize,
}

impl OutBuf {
    /// Checks a receive buffer; null is `MPI_ERR_BUFFER` unless `len` is 0.
    ///
    /// # Safety
    /// `p` is null or valid for writes of `len` bytes until the receive completes.
    pub(crate) unsafe fn new(p: *mut c_void, len: usize) -> Result<OutBuf, Fail> {
        if p.is_null() && len > 0 {
            return Err(Fail::new(MPI_ERR_BUFFER, format!("null receive buffer for {len} bytes")));
        }
        if p as usize == IN_PLACE_ADDR {
            return Err(Fail::new(MPI_ERR_BUFFER, "MPI_IN_PLACE is not a receive buffer".into()));
        }
        Ok(OutBuf { ptr: p.cast(), len })
    }

    /// Copies a message in: `MPI_ERR_TRUNCATE` (after copying what fits) when it is
    /// longer than the buffer.
    pub(crate) fn fill(&self, data: &[u8]) -> Result<(), Fail> {
        let n = data.len().min(self.len);
        if n > 0 {
            // SAFETY: `new` checked the pointer; its caller vouched for `len` writable
            // bytes until completion, which is now; n <= len.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr, n) };
        }
        if data.len() > self.len {
            return Err(Fail::new(
                MPI_ERR_TRUNCATE,
                format!("message of {} bytes into a buffer of {} bytes", data.len(), self.len),
            ));
        }
        Ok(())
    }

    /// Like [`OutBuf::fill`], but the message must fill the buffer exactly
    /// (collectives, where every rank passes matching counts).
    pub(crate) fn fill_exact(&self, data: &[u8]) -> Result<(), Fail> {
        if data.len() != self.len {
            return Err(Fail::new(
                MPI_ERR_TRUNCATE,
                format!("{} bytes for a buffer of {} bytes (counts differ between ranks)", data.len(), self.len),
            ));
        }
        self.fill(data)
    }
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
    fn buffers_are_checked_and_truncation_is_reported() {
        // SAFETY: null with zero length is never read.
        assert_eq!(unsafe { in_bytes(std::ptr::null(), 0) }.unwrap(), &[] as &[u8]);
        // SAFETY: null is refused before any read.
        assert_eq!(unsafe { in_bytes(std::ptr::null(), 4) }.unwrap_err().class, MPI_ERR_BUFFER);
        let mut dst = [0u8; 3];
        // SAFETY: dst has 3 writable bytes and outlives `out`.
        let out = unsafe { OutBuf::new(dst.as_mut_ptr().cast(), 3) }.unwrap();
        assert_eq!(out.fill(&[1, 2, 3, 4]).unwrap_err().class, MPI_ERR_TRUNCATE);
        assert_eq!(out.fill_exact(&[5, 6]).unwrap_err().class, MPI_ERR_TRUNCATE);
        out.fill(&[7, 8]).unwrap();
        assert_eq!(dst, [7, 8, 3]);
        let mut s = [1 as c_char; 4];
        let mut len = 0;
        // SAFETY: s holds 4 chars, len is a local int.
        unsafe { write_c_string(s.as_mut_ptr(), 4, "hello", &mut len) }.unwrap();
        assert_eq!((s, len), ([b'h' as c_char, b'e' as c_char, b'l' as c_char, 0], 3));
    }
}
