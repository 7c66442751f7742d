//! The datatype calls: constructors (`MPI_Type_contiguous`, `_vector`,
//! `_hvector`, `_indexed`, `_hindexed`, `_struct`, `_create_struct`,
//! `_create_resized`), `MPI_Type_commit`, `MPI_Type_free`, the queries
//! (`_size`, `_extent`, `_lb`, `_ub`, `_get_envelope`, `MPI_Get_count`,
//! `MPI_Get_elements`), `MPI_Address` / `MPI_Get_address`, and packing
//! (`MPI_Pack`, `MPI_Unpack`, `MPI_Pack_size`).

use std::ffi::{c_int, c_long, c_void};
use std::sync::Arc;

use p2pmp_mpi::datatype::Layout;

use crate::buf::{in_array, write_out};
use crate::consts::{
    Handle, MPI_COMM_WORLD, MPI_DATATYPE_NULL, MPI_ERR_ARG, MPI_ERR_TRUNCATE, MPI_ERR_TYPE, MPI_UNDEFINED,
    STATUS_IGNORE_ADDR,
};
use crate::error::Fail;
use crate::state::{Objects, call, entry};
use crate::status::MpiStatus;
use crate::types::{Buf, Derived, Envelope, LayoutRef, count_arg, get, is_predefined, lookup};

/// `MPI_Aint`.
type Aint = c_long;

const COMBINER_CONTIGUOUS: c_int = 3;
const COMBINER_VECTOR: c_int = 4;
const COMBINER_HVECTOR: c_int = 6;
const COMBINER_INDEXED: c_int = 7;
const COMBINER_HINDEXED: c_int = 9;
const COMBINER_STRUCT: c_int = 12;
const COMBINER_RESIZED: c_int = 18;
const COMBINER_NAMED: c_int = 1;

/// Stores a new (uncommitted) type built by `make` in `*newtype`.
fn construct(
    func: &'static str,
    newtype: *mut Handle,
    envelope: Envelope,
    make: impl FnOnce(&Objects) -> Result<Layout, Fail>,
) -> c_int {
    entry(func, MPI_COMM_WORLD, |mpi| {
        if newtype.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null newtype".into()));
        }
        let layout = make(&mpi.obj)?;
        let h = mpi.obj.types.insert(Derived { layout: Arc::new(layout), committed: false, envelope })?;
        // SAFETY: non-null (checked), the caller's handle.
        unsafe { write_out(newtype, h) }
    })
}

fn env(combiner: c_int, ints: c_int, addrs: c_int, types: c_int) -> Envelope {
    Envelope { combiner, ints, addrs, types }
}

fn old(obj: &Objects, h: Handle) -> Result<LayoutRef, Fail> {
    Ok(lookup(obj, h)?.layout)
}

/// `MPI_Type_contiguous`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Type_contiguous(count: c_int, oldtype: Handle, newtype: *mut Handle) -> c_int {
    construct("MPI_Type_contiguous", newtype, env(COMBINER_CONTIGUOUS, 1, 0, 1), |o| {
        Ok(Layout::contiguous(count, &*old(o, oldtype)?)?)
    })
}

/// `MPI_Type_vector` (stride in elements of `oldtype`).
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Type_vector(
    count: c_int,
    blocklength: c_int,
    stride: c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    construct("MPI_Type_vector", newtype, env(COMBINER_VECTOR, 3, 0, 1), |o| {
        Ok(Layout::vector(count, blocklength, stride.into(), false, &*old(o, oldtype)?)?)
    })
}

/// `MPI_Type_hvector` (stride in bytes).
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Type_hvector(
    count: c_int,
    blocklength: c_int,
    stride: Aint,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    construct("MPI_Type_hvector", newtype, env(COMBINER_HVECTOR, 2, 1, 1), |o| {
        Ok(Layout::vector(count, blocklength, stride, true, &*old(o, oldtype)?)?)
    })
}

/// `MPI_Type_indexed` (displacements in elements of `oldtype`).
///
/// # Safety
/// The arrays hold `count` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_indexed(
    count: c_int,
    blocklengths: *const c_int,
    displacements: *const c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    construct("MPI_Type_indexed", newtype, env(COMBINER_INDEXED, 2 * count.max(0) + 1, 0, 1), |o| {
        // SAFETY: the caller's arrays of `count` entries.
        let (bl, d) = unsafe { (in_array(blocklengths, count)?, in_array(displacements, count)?) };
        let d: Vec<i64> = d.iter().map(|&x| x.into()).collect();
        Ok(Layout::indexed(bl, &d, false, &*old(o, oldtype)?)?)
    })
}

/// `MPI_Type_hindexed` (displacements in bytes).
///
/// # Safety
/// The arrays hold `count` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_hindexed(
    count: c_int,
    blocklengths: *const c_int,
    displacements: *const Aint,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    construct("MPI_Type_hindexed", newtype, env(COMBINER_HINDEXED, count.max(0) + 1, count.max(0), 1), |o| {
        // SAFETY: the caller's arrays of `count` entries.
        let (bl, d) = unsafe { (in_array(blocklengths, count)?, in_array(displacements, count)?) };
        Ok(Layout::indexed(bl, d, true, &*old(o, oldtype)?)?)
    })
}

/// `MPI_Type_struct`.
///
/// # Safety
/// The arrays hold `count` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_struct(
    count: c_int,
    blocklengths: *const c_int,
    displacements: *const Aint,
    types: *const Handle,
    newtype: *mut Handle,
) -> c_int {
    let n = count.max(0);
    construct("MPI_Type_struct", newtype, env(COMBINER_STRUCT, n + 1, n, n), |o| {
        // SAFETY: the caller's arrays of `count` entries.
        let (bl, d, ts) =
            unsafe { (in_array(blocklengths, count)?, in_array(displacements, count)?, in_array(types, count)?) };
        let layouts = ts.iter().map(|&t| old(o, t)).collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<&Layout> = layouts.iter().map(|l| &**l).collect();
        Ok(Layout::structure(bl, d, &refs)?)
    })
}

/// `MPI_Type_create_struct`: [`MPI_Type_struct`].
///
/// # Safety
/// As `MPI_Type_struct`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_create_struct(
    count: c_int,
    blocklengths: *const c_int,
    displacements: *const Aint,
    types: *const Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: as the caller vouched.
    unsafe { MPI_Type_struct(count, blocklengths, displacements, types, newtype) }
}

/// `MPI_Type_create_resized`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Type_create_resized(oldtype: Handle, lb: Aint, extent: Aint, newtype: *mut Handle) -> c_int {
    construct("MPI_Type_create_resized", newtype, env(COMBINER_RESIZED, 0, 2, 1), |o| {
        Ok(Layout::resized(&*old(o, oldtype)?, lb, extent)?)
    })
}

/// `MPI_Type_commit` (of a committed or predefined type: nothing to do).
///
/// # Safety
/// `datatype` is readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_commit(datatype: *mut Handle) -> c_int {
    entry("MPI_Type_commit", MPI_COMM_WORLD, |mpi| {
        if datatype.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null datatype pointer".into()));
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { datatype.read() };
        lookup(&mpi.obj, h)?;
        if !is_predefined(h) {
            mpi.obj.types.get_mut(h)?.committed = true;
        }
        Ok(())
    })
}

/// `MPI_Type_free`: sets `*datatype` to `MPI_DATATYPE_NULL` (types built from
/// it, and communication in progress, keep working).
///
/// # Safety
/// `datatype` is readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Type_free(datatype: *mut Handle) -> c_int {
    entry("MPI_Type_free", MPI_COMM_WORLD, |mpi| {
        if datatype.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null datatype pointer".into()));
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { datatype.read() };
        if is_predefined(h) {
            return Err(Fail::new(MPI_ERR_TYPE, format!("predefined datatype {h} cannot be freed")));
        }
        mpi.obj.types.remove(h)?;
        // SAFETY: non-null, the caller's handle.
        unsafe { datatype.write(MPI_DATATYPE_NULL) };
        Ok(())
    })
}

/// Writes a query's answer about `datatype`.
fn query<T>(func: &'static str, datatype: Handle, out: *mut T, f: impl FnOnce(&Layout) -> T) -> c_int {
    entry(func, MPI_COMM_WORLD, |mpi| {
        let v = f(&lookup(&mpi.obj, datatype)?.layout);
        // SAFETY: the caller's out-parameter, or null (refused).
        unsafe { write_out(out, v) }
    })
}

/// `MPI_Type_size`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Type_size(datatype: Handle, size: *mut c_int) -> c_int {
    query("MPI_Type_size", datatype, size, |l| c_int::try_from(l.size()).unwrap_or(MPI_UNDEFINED))
}

/// `MPI_Type_extent`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Type_extent(datatype: Handle, extent: *mut Aint) -> c_int {
    query("MPI_Type_extent", datatype, extent, Layout::extent)
}

/// `MPI_Type_lb`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Type_lb(datatype: Handle, displacement: *mut Aint) -> c_int {
    query("MPI_Type_lb", datatype, displacement, Layout::lb)
}

/// `MPI_Type_ub`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Type_ub(datatype: Handle, displacement: *mut Aint) -> c_int {
    query("MPI_Type_ub", datatype, displacement, Layout::ub)
}

/// `MPI_Type_get_envelope`: predefined types are `MPI_COMBINER_NAMED`.
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
    entry("MPI_Type_get_envelope", MPI_COMM_WORLD, |mpi| {
        lookup(&mpi.obj, datatype)?;
        let e =
            if is_predefined(datatype) { env(COMBINER_NAMED, 0, 0, 0) } else { mpi.obj.types.get(datatype)?.envelope };
        // SAFETY: the caller's ints, or null (refused).
        unsafe {
            write_out(num_integers, e.ints)?;
            write_out(num_addresses, e.addrs)?;
            write_out(num_datatypes, e.types)?;
            write_out(combiner, e.combiner)
        }
    })
}

/// The byte count a status reports (a status must be given).
fn status_bytes(status: *const MpiStatus) -> Result<u64, Fail> {
    if status.is_null() || status as usize == STATUS_IGNORE_ADDR {
        return Err(Fail::new(MPI_ERR_ARG, "status is null or MPI_STATUS_IGNORE".into()));
    }
    // SAFETY: a non-null status pointer from C points to an MPI_Status (checked above).
    Ok(unsafe { &*status }.count.max(0) as u64)
}

/// `MPI_Get_count`: whole elements of `datatype` in a received message, or
/// `MPI_UNDEFINED` when the byte count is not a multiple of the type's size.
///
/// # Safety
/// `status` points to a status; `count` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Get_count(status: *const MpiStatus, datatype: Handle, count: *mut c_int) -> c_int {
    entry("MPI_Get_count", MPI_COMM_WORLD, |mpi| {
        let size = lookup(&mpi.obj, datatype)?.layout.size();
        let bytes = status_bytes(status)?;
        let n = match (bytes, size) {
            (0, _) => 0,
            (_, 0) => MPI_UNDEFINED,
            (b, s) if b % s == 0 => c_int::try_from(b / s).unwrap_or(MPI_UNDEFINED),
            _ => MPI_UNDEFINED,
        };
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(count, n) }
    })
}

/// `MPI_Get_elements`: basic elements of `datatype` in a received message
/// (`MPI_UNDEFINED` when it ends inside one).
///
/// # Safety
/// `status` points to a status; `count` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Get_elements(status: *const MpiStatus, datatype: Handle, count: *mut c_int) -> c_int {
    entry("MPI_Get_elements", MPI_COMM_WORLD, |mpi| {
        let l = lookup(&mpi.obj, datatype)?.layout;
        let n = l.elements(status_bytes(status)?).and_then(|n| c_int::try_from(n).ok()).unwrap_or(MPI_UNDEFINED);
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(count, n) }
    })
}

/// `MPI_Address`: the address as an integer.
///
/// # Safety
/// `address` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Address(location: *const c_void, address: *mut Aint) -> c_int {
    // SAFETY: the caller's out-parameter, or null (refused).
    entry("MPI_Address", MPI_COMM_WORLD, |_| unsafe { write_out(address, location as Aint) })
}

/// `MPI_Get_address`: [`MPI_Address`].
///
/// # Safety
/// As `MPI_Address`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Get_address(location: *const c_void, address: *mut Aint) -> c_int {
    // SAFETY: as the caller vouched.
    unsafe { MPI_Address(location, address) }
}

/// `MPI_Pack_size`: the bytes `MPI_Pack` needs for `incount` elements.
///
/// # Safety
/// `size` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Pack_size(incount: c_int, datatype: Handle, comm: Handle, size: *mut c_int) -> c_int {
    call("MPI_Pack_size", comm, |cx| {
        cx.comms.get(comm)?;
        let n = count_arg(incount, "count")? as u64;
        let bytes = lookup(cx.obj, datatype)?.layout.size().checked_mul(n).and_then(|b| c_int::try_from(b).ok());
        let bytes = bytes.ok_or_else(|| Fail::new(MPI_ERR_ARG, "packed size too large for an int".into()))?;
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(size, bytes) }
    })
}

/// `*position` as an index into a buffer of `size` bytes.
///
/// # Safety
/// `position` is readable.
unsafe fn position(position: *mut c_int, size: c_int) -> Result<(usize, usize), Fail> {
    if position.is_null() {
        return Err(Fail::new(MPI_ERR_ARG, "null position".into()));
    }
    // SAFETY: non-null, the caller's int.
    let at = unsafe { position.read() };
    let (at, size) = (count_arg(at, "position")?, count_arg(size, "buffer size")?);
    if at > size {
        return Err(Fail::new(MPI_ERR_ARG, format!("position {at} beyond the buffer's {size} bytes")));
    }
    Ok((at, size))
}

/// `MPI_Pack`: appends `incount` elements at `outbuf + *position`.
///
/// # Safety
/// `inbuf` holds the elements; `outbuf` holds `outsize` bytes; `position` is
/// readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Pack(
    inbuf: *const c_void,
    incount: c_int,
    datatype: Handle,
    outbuf: *mut c_void,
    outsize: c_int,
    position: *mut c_int,
    comm: Handle,
) -> c_int {
    call("MPI_Pack", comm, |cx| {
        cx.comms.get(comm)?;
        let src = Buf::new(inbuf, incount, get(cx.obj, datatype)?)?;
        // SAFETY: the caller's int.
        let (at, size) = unsafe { self::position(position, outsize)? };
        if src.bytes() > size - at {
            return Err(Fail::new(MPI_ERR_TRUNCATE, format!("{} bytes do not fit in {}", src.bytes(), size - at)));
        }
        let mut packed = Vec::with_capacity(src.bytes());
        // SAFETY: the caller's input buffer.
        unsafe { src.pack_into(&mut packed) };
        // SAFETY: the caller's output buffer holds `outsize` bytes; at + len <= outsize.
        unsafe {
            std::ptr::copy_nonoverlapping(packed.as_ptr(), outbuf.cast::<u8>().add(at), packed.len());
            position.write((at + packed.len()) as c_int);
        }
        Ok(())
    })
}

/// `MPI_Unpack`: reads `outcount` elements from `inbuf + *position`.
///
/// # Safety
/// `inbuf` holds `insize` bytes; `outbuf` holds the elements; `position` is
/// readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Unpack(
    inbuf: *const c_void,
    insize: c_int,
    position: *mut c_int,
    outbuf: *mut c_void,
    outcount: c_int,
    datatype: Handle,
    comm: Handle,
) -> c_int {
    call("MPI_Unpack", comm, |cx| {
        cx.comms.get(comm)?;
        let dst = Buf::new(outbuf, outcount, get(cx.obj, datatype)?)?;
        // SAFETY: the caller's int.
        let (at, size) = unsafe { self::position(position, insize)? };
        let n = dst.bytes();
        if n > size - at {
            return Err(Fail::new(MPI_ERR_TRUNCATE, format!("{n} bytes wanted, {} left", size - at)));
        }
        // SAFETY: the caller's input buffer of `insize` bytes; at + n <= insize.
        let data = unsafe { std::slice::from_raw_parts(inbuf.cast::<u8>().add(at), n) };
        // SAFETY: the caller's output buffer.
        unsafe { dst.unpack(data)? };
        // SAFETY: the caller's int.
        unsafe { position.write((at + n) as c_int) };
        Ok(())
    })
}
