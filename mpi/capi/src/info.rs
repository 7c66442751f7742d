//! Info objects, as far as MPI-1 programs and mtest use them: `MPI_Info_create`
//! and `MPI_Info_free` (no call of this library reads an info's keys).

use std::ffi::c_int;

use crate::buf::write_out;
use crate::consts::{Handle, MPI_COMM_WORLD, MPI_ERR_ARG, MPI_INFO_NULL};
use crate::error::Fail;
use crate::state::entry;

/// Info handles count up from 1; none holds anything.
static NEXT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(1);

/// `MPI_Info_create`.
///
/// # Safety
/// `info` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Info_create(info: *mut Handle) -> c_int {
    entry("MPI_Info_create", MPI_COMM_WORLD, |_| {
        let h = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the caller's handle, or null (refused).
        unsafe { write_out(info, h) }
    })
}

/// `MPI_Info_free`: sets `*info` to `MPI_INFO_NULL`.
///
/// # Safety
/// `info` is readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Info_free(info: *mut Handle) -> c_int {
    entry("MPI_Info_free", MPI_COMM_WORLD, |_| {
        if info.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null info pointer".into()));
        }
        // SAFETY: non-null, the caller's handle.
        if unsafe { info.read() } == MPI_INFO_NULL {
            return Err(Fail::new(MPI_ERR_ARG, "MPI_INFO_NULL cannot be freed".into()));
        }
        // SAFETY: non-null, the caller's handle.
        unsafe { info.write(MPI_INFO_NULL) };
        Ok(())
    })
}
