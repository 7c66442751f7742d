//! The checkpoint calls of `p2pmp.h`: `P2P_Protect`, `P2P_Unprotect`,
//! `P2P_Recover`, `P2P_Snapshot` and the hooks `ckpt_on_preckpt`,
//! `ckpt_on_postckpt`, `ckpt_on_restart`, over `p2pmp_mpi::ckpt`.

use std::ffi::{c_int, c_void};

use crate::buf::write_out;
use crate::consts::{MPI_COMM_WORLD, MPI_ERR_ARG};
use crate::error::Fail;
use crate::state::call;

/// A region id as the Rust side takes it (C ids are `int`, at least 0).
fn region_id(id: c_int) -> Result<u32, Fail> {
    u32::try_from(id).map_err(|_| Fail::new(MPI_ERR_ARG, format!("region id {id} is negative")))
}

/// `P2P_Protect`.
///
/// # Safety
/// `ptr` is valid for reads and writes of `bytes` bytes until the region is
/// unprotected or MPI finalised.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn P2P_Protect(id: c_int, ptr: *mut c_void, bytes: usize) -> c_int {
    call("P2P_Protect", MPI_COMM_WORLD, |ctx| {
        let id = region_id(id)?;
        // SAFETY: the caller's promise, passed on.
        unsafe { ctx.world.protect(id, ptr.cast(), bytes) }.map_err(Fail::from)
    })
}

/// `P2P_Unprotect`.
#[unsafe(no_mangle)]
pub extern "C" fn P2P_Unprotect(id: c_int) -> c_int {
    call("P2P_Unprotect", MPI_COMM_WORLD, |ctx| ctx.world.unprotect(region_id(id)?).map_err(Fail::from))
}

/// `P2P_Recover`.
///
/// # Safety
/// `restarted` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn P2P_Recover(restarted: *mut c_int) -> c_int {
    call("P2P_Recover", MPI_COMM_WORLD, |ctx| {
        if restarted.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null output argument".into()));
        }
        let resumed = ctx.world.recover()?;
        // SAFETY: the caller's promise; not null.
        unsafe { write_out(restarted, c_int::from(resumed)) }
    })
}

/// `P2P_Snapshot`.
#[unsafe(no_mangle)]
pub extern "C" fn P2P_Snapshot() -> c_int {
    call("P2P_Snapshot", MPI_COMM_WORLD, |ctx| ctx.world.snapshot().map_err(Fail::from))
}

/// A C hook and its argument, as a Rust closure.
fn hook(f: Option<unsafe extern "C" fn(*mut c_void)>, arg: *mut c_void) -> Result<p2pmp_mpi::ckpt::Hook, Fail> {
    let f = f.ok_or_else(|| Fail::new(MPI_ERR_ARG, "null hook function".into()))?;
    // SAFETY: the program registered `f` to be called with `arg`.
    Ok(Box::new(move || unsafe { f(arg) }))
}

/// `ckpt_on_preckpt`: `f(arg)` before every checkpoint.
#[unsafe(no_mangle)]
pub extern "C" fn ckpt_on_preckpt(f: Option<unsafe extern "C" fn(*mut c_void)>, arg: *mut c_void) {
    call("ckpt_on_preckpt", MPI_COMM_WORLD, |ctx| {
        ctx.world.on_preckpt(hook(f, arg)?);
        Ok(())
    });
}

/// `ckpt_on_postckpt`: `f(arg)` after every checkpoint.
#[unsafe(no_mangle)]
pub extern "C" fn ckpt_on_postckpt(f: Option<unsafe extern "C" fn(*mut c_void)>, arg: *mut c_void) {
    call("ckpt_on_postckpt", MPI_COMM_WORLD, |ctx| {
        ctx.world.on_postckpt(hook(f, arg)?);
        Ok(())
    });
}

/// `ckpt_on_restart`: `f(arg)` when the process resumes from a checkpoint.
#[unsafe(no_mangle)]
pub extern "C" fn ckpt_on_restart(f: Option<unsafe extern "C" fn(*mut c_void)>, arg: *mut c_void) {
    call("ckpt_on_restart", MPI_COMM_WORLD, |ctx| {
        ctx.world.on_restart(hook(f, arg)?);
        Ok(())
    });
}
