//! Attribute caching (MPI-1 §6.7): keyvals with their copy and delete
//! callbacks, `MPI_Keyval_create`, `MPI_Keyval_free`, `MPI_Attr_put`,
//! `MPI_Attr_get`, `MPI_Attr_delete` and their MPI-2 names, and the predefined
//! attributes of `MPI_COMM_WORLD` (`MPI_TAG_UB`, `MPI_HOST`, `MPI_IO`,
//! `MPI_WTIME_IS_GLOBAL`, `MPI_APPNUM`, `MPI_LASTUSEDCODE`).

use std::ffi::{c_int, c_void};
use std::sync::atomic::AtomicI32;

use crate::buf::write_out;
use crate::consts::{
    Handle, MPI_ANY_SOURCE, MPI_APPNUM, MPI_COMM_WORLD, MPI_ERR_ARG, MPI_ERR_OTHER, MPI_HOST, MPI_IO,
    MPI_KEYVAL_INVALID, MPI_LASTUSEDCODE, MPI_PROC_NULL, MPI_SUCCESS, MPI_TAG_UB, MPI_UNIVERSE_SIZE,
    MPI_WTIME_IS_GLOBAL,
};
use crate::error::Fail;
use crate::handles::Table;
use crate::state::{Ctx, call, entry};

/// An attribute's value: the `void *` the program stored.
pub(crate) type AttrVal = usize;

/// `MPI_Copy_function` (and `MPI_Comm_copy_attr_function`).
pub(crate) type CopyFn =
    unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
/// `MPI_Delete_function` (and `MPI_Comm_delete_attr_function`).
pub(crate) type DeleteFn = unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void) -> c_int;

/// A keyval the program made.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keyval {
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    extra: usize,
}

/// First handle of program-made keyvals (the predefined ones are below).
const KEYVAL_BASE: Handle = 64;

pub(crate) const fn keyvals() -> Table<Keyval> {
    Table::new(KEYVAL_BASE, MPI_ERR_ARG, "keyval")
}

/// The tag upper bound the engine accepts (any non-negative `i32`).
static TAG_UB_VALUE: c_int = c_int::MAX;
static HOST_VALUE: c_int = MPI_PROC_NULL;
static IO_VALUE: c_int = MPI_ANY_SOURCE;
static WTIME_IS_GLOBAL_VALUE: c_int = 0;
static APPNUM_VALUE: c_int = 0;
/// The largest error code in use (`MPI_Add_error_code` raises it).
pub(crate) static LAST_USED_CODE: AtomicI32 = AtomicI32::new(crate::consts::MPI_ERR_LASTCODE);

/// The value of a predefined attribute of `comm`, if `key` is one (the
/// world's only; `None` inside means not set).
fn predefined(comm: Handle, key: c_int) -> Option<Option<AttrVal>> {
    let p = |v: &'static c_int| Some((v as *const c_int) as AttrVal);
    let v = match key {
        MPI_TAG_UB => p(&TAG_UB_VALUE),
        MPI_HOST => p(&HOST_VALUE),
        MPI_IO => p(&IO_VALUE),
        MPI_WTIME_IS_GLOBAL => p(&WTIME_IS_GLOBAL_VALUE),
        MPI_APPNUM => p(&APPNUM_VALUE),
        MPI_LASTUSEDCODE => Some(LAST_USED_CODE.as_ptr() as AttrVal),
        MPI_UNIVERSE_SIZE => None,
        _ => return None,
    };
    Some(if comm == MPI_COMM_WORLD { v } else { None })
}

fn is_predefined(key: c_int) -> bool {
    predefined(MPI_COMM_WORLD, key).is_some()
}

/// Calls the delete callback of `key` for `val` on `comm`.
fn delete(cx: &Ctx<'_>, comm: Handle, key: c_int, val: AttrVal) -> Result<(), Fail> {
    let kv = *cx.obj.keyvals.get(key)?;
    if let Some(f) = kv.delete {
        // SAFETY: the program's callback with the arguments MPI defines.
        let rc = unsafe { f(comm, key, val as *mut c_void, kv.extra as *mut c_void) };
        if rc != MPI_SUCCESS {
            return Err(Fail::new(rc, format!("the delete callback of keyval {key} failed")));
        }
    }
    Ok(())
}

/// Runs the delete callbacks of every attribute of `comm` (freeing it).
pub(crate) fn delete_all(cx: &mut Ctx<'_>, comm: Handle) -> Result<(), Fail> {
    let attrs = std::mem::take(&mut cx.comms.entry_mut(comm)?.attrs);
    for (key, val) in attrs {
        delete(cx, comm, key, val)?;
    }
    Ok(())
}

/// The attributes of `from` a duplicate gets, through their copy callbacks.
pub(crate) fn copy_all(cx: &Ctx<'_>, from: Handle) -> Result<Vec<(c_int, AttrVal)>, Fail> {
    let mut out = Vec::new();
    for (&key, &val) in &cx.comms.entry(from)?.attrs {
        let kv = *cx.obj.keyvals.get(key)?;
        let Some(f) = kv.copy else { continue };
        let (mut new, mut flag): (*mut c_void, c_int) = (std::ptr::null_mut(), 0);
        // SAFETY: the program's callback with the arguments MPI defines; `new` and
        // `flag` are locals it writes.
        let rc =
            unsafe { f(from, key, kv.extra as *mut c_void, val as *mut c_void, (&raw mut new).cast(), &raw mut flag) };
        if rc != MPI_SUCCESS {
            return Err(Fail::new(rc, format!("the copy callback of keyval {key} failed")));
        }
        if flag != 0 {
            out.push((key, new as AttrVal));
        }
    }
    Ok(out)
}

/// `MPI_DUP_FN` (`MPI_COMM_DUP_FN`): copies the value itself.
///
/// # Safety
/// `out` and `flag` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn p2pmpi_dup_fn(
    _comm: Handle,
    _key: c_int,
    _extra: *mut c_void,
    val: *mut c_void,
    out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: MPI passes a `void **` and an int for the callback to write.
    unsafe {
        out.cast::<*mut c_void>().write(val);
        flag.write(1);
    }
    MPI_SUCCESS
}

/// `MPI_Keyval_create` (`MPI_Comm_create_keyval`).
///
/// # Safety
/// `keyval` is writable; the callbacks are null or functions of the right type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Keyval_create(
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    keyval: *mut c_int,
    extra: *mut c_void,
) -> c_int {
    entry("MPI_Keyval_create", MPI_COMM_WORLD, |mpi| {
        let k = mpi.obj.keyvals.insert(Keyval { copy, delete, extra: extra as usize })?;
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(keyval, k) }
    })
}

/// `MPI_Keyval_free`: sets `*keyval` to `MPI_KEYVAL_INVALID` (attributes
/// already set keep working until deleted).
///
/// # Safety
/// `keyval` is readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Keyval_free(keyval: *mut c_int) -> c_int {
    entry("MPI_Keyval_free", MPI_COMM_WORLD, |mpi| {
        if keyval.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null keyval".into()));
        }
        // SAFETY: non-null, the caller's int.
        let k = unsafe { keyval.read() };
        if is_predefined(k) {
            return Err(Fail::new(MPI_ERR_ARG, format!("keyval {k} is predefined")));
        }
        mpi.obj.keyvals.get(k)?;
        // Kept while attributes use it would need counting; the callbacks stay
        // reachable by leaving the entry (the handle is not reused).
        // SAFETY: non-null, the caller's int.
        unsafe { keyval.write(MPI_KEYVAL_INVALID) };
        Ok(())
    })
}

/// `MPI_Attr_put` (`MPI_Comm_set_attr`): a value already there is deleted first.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Attr_put(comm: Handle, keyval: c_int, val: *mut c_void) -> c_int {
    call("MPI_Attr_put", comm, |mut cx| {
        if is_predefined(keyval) {
            return Err(Fail::new(MPI_ERR_ARG, format!("keyval {keyval} is predefined and read-only")));
        }
        cx.obj.keyvals.get(keyval)?;
        if let Some(old) = cx.comms.entry(comm)?.attrs.get(&keyval).copied() {
            delete(&cx, comm, keyval, old)?;
        }
        cx.comms.entry_mut(comm)?.attrs.insert(keyval, val as AttrVal);
        let _ = &mut cx;
        Ok(())
    })
}

/// `MPI_Attr_get` (`MPI_Comm_get_attr`): `*flag` says whether it is set.
///
/// # Safety
/// `val` is writable for a `void *`; `flag` for an int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Attr_get(comm: Handle, keyval: c_int, val: *mut c_void, flag: *mut c_int) -> c_int {
    call("MPI_Attr_get", comm, |cx| {
        let got = match predefined(comm, keyval) {
            Some(v) => v,
            None => {
                cx.obj.keyvals.get(keyval)?;
                cx.comms.entry(comm)?.attrs.get(&keyval).copied()
            }
        };
        if val.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null attribute_val".into()));
        }
        if let Some(v) = got {
            // SAFETY: MPI passes a `void **` for the value.
            unsafe { val.cast::<*mut c_void>().write(v as *mut c_void) };
        }
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(flag, c_int::from(got.is_some())) }
    })
}

/// `MPI_Attr_delete` (`MPI_Comm_delete_attr`).
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Attr_delete(comm: Handle, keyval: c_int) -> c_int {
    call("MPI_Attr_delete", comm, |cx| {
        if is_predefined(keyval) {
            return Err(Fail::new(MPI_ERR_ARG, format!("keyval {keyval} is predefined")));
        }
        cx.obj.keyvals.get(keyval)?;
        let old = cx.comms.entry(comm)?.attrs.get(&keyval).copied();
        let old = old.ok_or_else(|| Fail::new(MPI_ERR_OTHER, format!("no attribute for keyval {keyval}")))?;
        delete(&cx, comm, keyval, old)?;
        cx.comms.entry_mut(comm)?.attrs.remove(&keyval);
        Ok(())
    })
}

/// `MPI_Comm_create_keyval`: [`MPI_Keyval_create`].
///
/// # Safety
/// As `MPI_Keyval_create`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_create_keyval(
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    keyval: *mut c_int,
    extra: *mut c_void,
) -> c_int {
    // SAFETY: as the caller vouched.
    unsafe { MPI_Keyval_create(copy, delete, keyval, extra) }
}

/// `MPI_Comm_free_keyval`: [`MPI_Keyval_free`].
///
/// # Safety
/// As `MPI_Keyval_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_free_keyval(keyval: *mut c_int) -> c_int {
    // SAFETY: as the caller vouched.
    unsafe { MPI_Keyval_free(keyval) }
}

/// `MPI_Comm_set_attr`: [`MPI_Attr_put`].
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Comm_set_attr(comm: Handle, keyval: c_int, val: *mut c_void) -> c_int {
    MPI_Attr_put(comm, keyval, val)
}

/// `MPI_Comm_get_attr`: [`MPI_Attr_get`].
///
/// # Safety
/// As `MPI_Attr_get`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_get_attr(comm: Handle, keyval: c_int, val: *mut c_void, flag: *mut c_int) -> c_int {
    // SAFETY: as the caller vouched.
    unsafe { MPI_Attr_get(comm, keyval, val, flag) }
}

/// `MPI_Comm_delete_attr`: [`MPI_Attr_delete`].
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Comm_delete_attr(comm: Handle, keyval: c_int) -> c_int {
    MPI_Attr_delete(comm, keyval)
}
