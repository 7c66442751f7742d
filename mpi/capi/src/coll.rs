//! Collectives: `MPI_Barrier`, `MPI_Bcast`, `MPI_Reduce`, `MPI_Allreduce`,
//! `MPI_Gather`, `MPI_Scatter`, `MPI_Allgather`, `MPI_Alltoall`, over the
//! collectives of `p2pmp_mpi::World` on the communicator's own ids. On a
//! one-process communicator (`MPI_COMM_SELF`) each is a local copy.

use std::ffi::{c_int, c_void};

use bytes::Bytes;
use p2pmp_mpi::{Op, World};

use crate::buf::{OutBuf, in_bytes};
use crate::comm::Comm;
use crate::consts::{Handle, IN_PLACE_ADDR, MPI_ERR_COUNT, MPI_ERR_TRUNCATE};
use crate::datatype::{Datatype, with_elem};
use crate::error::Fail;
use crate::state::call;

/// Runs collective `f` on `comm` (an intracommunicator).
fn collective(func: &'static str, comm: Handle, f: impl FnOnce(&mut World, &Comm) -> Result<(), Fail>) -> c_int {
    call(func, comm, |cx| {
        let c = cx.comms.get(comm)?;
        cx.world.collectives_in(&c.c, |w| f(w, &c))
    })
}

/// The bytes of `count` elements of `datatype`, and of `n` such blocks.
fn blocks(count: c_int, datatype: Handle, n: u32) -> Result<(usize, usize), Fail> {
    let block = Datatype::from_handle(datatype)?.bytes(count)?;
    let all =
        block.checked_mul(n as usize).ok_or_else(|| Fail::new(MPI_ERR_COUNT, format!("count {count} too large")))?;
    Ok((block, all))
}

/// Send and receive blocks must have the same length.
fn same_block(send: usize, recv: usize) -> Result<(), Fail> {
    if send == recv {
        Ok(())
    } else {
        Err(Fail::new(MPI_ERR_TRUNCATE, format!("send block of {send} bytes, receive block of {recv} bytes")))
    }
}

/// Writes a rooted collective's result on the root (the rank with a receive buffer).
fn fill_root(out: Option<OutBuf>, got: Option<Vec<u8>>) -> Result<(), Fail> {
    match (out, got) {
        (Some(out), Some(v)) => out.fill_exact(&v),
        _ => Ok(()),
    }
}

/// `MPI_Barrier`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Barrier(comm: Handle) -> c_int {
    collective("MPI_Barrier", comm, |w, _| Ok(w.barrier()?))
}

/// `MPI_Bcast`.
///
/// # Safety
/// `buffer` holds `count` elements of `datatype` (read on the root, written elsewhere).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Bcast(
    buffer: *mut c_void,
    count: c_int,
    datatype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    collective("MPI_Bcast", comm, |w, c| {
        let len = Datatype::from_handle(datatype)?.bytes(count)?;
        let root = c.root(root)?;
        if c.rank() == root {
            // SAFETY: the caller's buffer of `len` bytes (null refused when len > 0).
            let data = Bytes::copy_from_slice(unsafe { in_bytes(buffer, len)? });
            w.bcast_bytes(data, root)?;
        } else {
            // SAFETY: the caller's buffer, written before this returns.
            let out = unsafe { OutBuf::new(buffer, len)? };
            out.fill_exact(&w.bcast_bytes(Bytes::new(), root)?)?;
        }
        Ok(())
    })
}

/// A typed copy of `data` (which may be unaligned for `T`).
fn to_vec<T: bytemuck::Pod>(data: &[u8]) -> Vec<T> {
    let mut v = vec![<T as bytemuck::Zeroable>::zeroed(); data.len() / std::mem::size_of::<T>()];
    bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(data);
    v
}

/// The input of a reduction: `sendbuf`, or `recvbuf` for `MPI_IN_PLACE` where
/// `in_place_ok`; copied, so the receive buffer may be written afterwards.
///
/// # Safety
/// The chosen buffer holds `len` bytes.
unsafe fn reduce_input(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    len: usize,
    in_place_ok: bool,
) -> Result<Vec<u8>, Fail> {
    let src = if in_place_ok && sendbuf as usize == IN_PLACE_ADDR { recvbuf.cast_const() } else { sendbuf };
    // SAFETY: the caller's buffer of `len` bytes (null and MPI_IN_PLACE refused).
    Ok(unsafe { in_bytes(src, len)? }.to_vec())
}

/// Reduces `input` (elements of `dt`) with `op` to `root` (every rank for `None`).
fn reduce(w: &mut World, input: &[u8], dt: Datatype, op: Op, root: Option<u32>) -> Result<Option<Vec<u8>>, Fail> {
    with_elem!(dt, T => {
        let v: Vec<T> = to_vec(input);
        let r = match root {
            Some(root) => w.reduce(&v, op, root)?,
            None => Some(w.allreduce(&v, op)?),
        };
        Ok(r.map(|r| bytemuck::cast_slice::<T, u8>(&r).to_vec()))
    })
}

/// `MPI_Reduce` (`MPI_IN_PLACE` as the root's `sendbuf`).
///
/// # Safety
/// `sendbuf` holds `count` elements of `datatype`; on the root, `recvbuf` too.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Handle,
    op: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    collective("MPI_Reduce", comm, |w, c| {
        let dt = Datatype::from_handle(datatype)?;
        let op = crate::op::for_datatype(op, dt)?;
        let len = dt.bytes(count)?;
        let root = c.root(root)?;
        let me_root = c.rank() == root;
        // SAFETY: the caller's buffers of `len` bytes.
        let input = unsafe { reduce_input(sendbuf, recvbuf, len, me_root)? };
        // SAFETY: the root's receive buffer, written before this returns.
        let out = if me_root { Some(unsafe { OutBuf::new(recvbuf, len)? }) } else { None };
        let result = reduce(w, &input, dt, op, Some(root))?;
        fill_root(out, result)
    })
}

/// `MPI_Allreduce` (`MPI_IN_PLACE` as `sendbuf`).
///
/// # Safety
/// `sendbuf` and `recvbuf` hold `count` elements of `datatype`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Allreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    collective("MPI_Allreduce", comm, |w, _| {
        let dt = Datatype::from_handle(datatype)?;
        let op = crate::op::for_datatype(op, dt)?;
        let len = dt.bytes(count)?;
        // SAFETY: the caller's buffers of `len` bytes.
        let input = unsafe { reduce_input(sendbuf, recvbuf, len, true)? };
        // SAFETY: the caller's receive buffer, written before this returns.
        let out = unsafe { OutBuf::new(recvbuf, len)? };
        let result = reduce(w, &input, dt, op, None)?.unwrap_or_default();
        out.fill_exact(&result)
    })
}

/// `MPI_Gather`.
///
/// # Safety
/// `sendbuf` holds `sendcount` elements of `sendtype`; on the root, `recvbuf`
/// holds size × `recvcount` elements of `recvtype`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Gather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    collective("MPI_Gather", comm, |w, c| {
        let (sblock, _) = blocks(sendcount, sendtype, 1)?;
        let root = c.root(root)?;
        let me_root = c.rank() == root;
        // SAFETY: the caller's buffer.
        let send = unsafe { in_bytes(sendbuf, sblock)? };
        let out = if me_root {
            let (rblock, all) = blocks(recvcount, recvtype, c.size())?;
            same_block(sblock, rblock)?;
            // SAFETY: the root's receive buffer, written before this returns.
            Some(unsafe { OutBuf::new(recvbuf, all)? })
        } else {
            None
        };
        let got = w.gather::<u8>(send, root)?;
        fill_root(out, got)
    })
}

/// `MPI_Scatter`.
///
/// # Safety
/// On the root `sendbuf` holds size × `sendcount` elements of `sendtype`;
/// `recvbuf` holds `recvcount` elements of `recvtype`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Scatter(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    collective("MPI_Scatter", comm, |w, c| {
        let (rblock, _) = blocks(recvcount, recvtype, 1)?;
        let root = c.root(root)?;
        // SAFETY: the caller's receive buffer, written before this returns.
        let out = unsafe { OutBuf::new(recvbuf, rblock)? };
        let got = if c.rank() == root {
            let (sblock, all) = blocks(sendcount, sendtype, c.size())?;
            same_block(sblock, rblock)?;
            // SAFETY: the root's send buffer.
            let send = unsafe { in_bytes(sendbuf, all)? };
            w.scatter::<u8>(Some(send), root)?
        } else {
            w.scatter::<u8>(None, root)?
        };
        out.fill_exact(&got)
    })
}

/// A gather to every rank (`all_to_all`: block `j` of each rank's send buffer
/// goes to rank `j`), filling `recvbuf` with size blocks.
///
/// # Safety
/// The buffers hold what `MPI_Allgather` / `MPI_Alltoall` say.
#[allow(clippy::too_many_arguments)]
unsafe fn exchange(
    func: &'static str,
    all_to_all: bool,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    comm: Handle,
) -> c_int {
    collective(func, comm, |w, c| {
        let p = c.size();
        let (sblock, sall) = blocks(sendcount, sendtype, p)?;
        let (rblock, rall) = blocks(recvcount, recvtype, p)?;
        same_block(sblock, rblock)?;
        // SAFETY: the caller's buffers, of the sizes the MPI call defines.
        let send = unsafe { in_bytes(sendbuf, if all_to_all { sall } else { sblock })? };
        // SAFETY: as above; written before this returns.
        let out = unsafe { OutBuf::new(recvbuf, rall)? };
        let got = if all_to_all { w.alltoall::<u8>(send)? } else { w.allgather::<u8>(send)? };
        out.fill_exact(&got)
    })
}

/// `MPI_Allgather`.
///
/// # Safety
/// `sendbuf` holds `sendcount` elements of `sendtype`; `recvbuf` holds size ×
/// `recvcount` elements of `recvtype`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Allgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    comm: Handle,
) -> c_int {
    // SAFETY: as the caller vouched.
    unsafe { exchange("MPI_Allgather", false, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm) }
}

/// `MPI_Alltoall`.
///
/// # Safety
/// `sendbuf` holds size × `sendcount` elements of `sendtype`; `recvbuf` holds
/// size × `recvcount` elements of `recvtype`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Alltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    comm: Handle,
) -> c_int {
    // SAFETY: as the caller vouched.
    unsafe { exchange("MPI_Alltoall", true, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm) }
}
