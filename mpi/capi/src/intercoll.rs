//! The collectives on intercommunicators (MPI-2's meaning of the MPI-1 calls):
//! arguments as `coll` takes them, data through `World::inter_*`. A root is
//! `MPI_ROOT` on the root, `MPI_PROC_NULL` in the rest of its group, the root's
//! rank in the other group.
#![allow(clippy::too_many_arguments)]

use std::ffi::{c_int, c_void};

use bytes::Bytes;
use p2pmp_mpi::{InterRoot, World};

use crate::coll::{Ctx2, Spec, buf, split};
use crate::comm::Comm;
use crate::consts::{Handle, MPI_PROC_NULL, MPI_ROOT};
use crate::error::Fail;
use crate::ops::combiner;
use crate::types::Buf;

fn root_of(c: &Comm, root: c_int) -> Result<InterRoot, Fail> {
    Ok(match root {
        MPI_ROOT => InterRoot::Me,
        MPI_PROC_NULL => InterRoot::Null,
        r => {
            let n = c.c.remote_group().map_or(0, |g| g.size());
            let r = u32::try_from(r).ok().filter(|&r| r < n).ok_or_else(|| {
                Fail::new(crate::consts::MPI_ERR_ROOT, format!("root {r} is not in a remote group of {n}"))
            })?;
            InterRoot::Remote(r)
        }
    })
}

fn remote_size(c: &Comm) -> u32 {
    c.c.remote_group().map_or(0, |g| g.size())
}

pub(crate) fn bcast(
    w: &mut World,
    cx: &mut Ctx2<'_>,
    c: &Comm,
    buffer: *mut c_void,
    count: c_int,
    datatype: Handle,
    root: c_int,
) -> Result<(), Fail> {
    let b = buf(buffer, count, &cx.dt(datatype)?)?;
    let root = root_of(c, root)?;
    // SAFETY: the caller's buffer (read on the root).
    let data = if root == InterRoot::Me { unsafe { b.pack() } } else { Bytes::new() };
    let got = w.inter_bcast(&c.c, data, root)?;
    if let InterRoot::Remote(_) = root {
        // SAFETY: the caller's buffer, written before this returns.
        unsafe { b.unpack_exact(&got)? };
    }
    Ok(())
}

fn lens(blocks: &[Buf]) -> Vec<usize> {
    blocks.iter().map(Buf::bytes).collect()
}

fn unpack_blocks(got: Option<Vec<Bytes>>, blocks: &[Buf]) -> Result<(), Fail> {
    for (b, d) in blocks.iter().zip(got.unwrap_or_default()) {
        // SAFETY: the caller's receive buffer holds each block.
        unsafe { b.unpack_exact(&d)? };
    }
    Ok(())
}

/// `MPI_Gather` / `MPI_Gatherv`: the root's receive blocks as `spec` says.
pub(crate) fn gather(
    w: &mut World,
    cx: &mut Ctx2<'_>,
    c: &Comm,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    spec: Spec,
    recvtype: Handle,
    root: c_int,
) -> Result<(), Fail> {
    let root = root_of(c, root)?;
    match root {
        InterRoot::Me => {
            // SAFETY: the root's arrays (for varying blocks) of one entry per remote rank.
            let blocks = unsafe { split(recvbuf, &cx.dt(recvtype)?, spec, remote_size(c))? };
            unpack_blocks(w.inter_gatherv(&c.c, Bytes::new(), root, Some(&lens(&blocks)))?, &blocks)
        }
        InterRoot::Null => Ok(()),
        InterRoot::Remote(_) => {
            // SAFETY: the caller's send buffer.
            let data = unsafe { buf(sendbuf, sendcount, &cx.dt(sendtype)?)?.pack() };
            w.inter_gatherv(&c.c, data, root, None).map(|_| ()).map_err(Fail::from)
        }
    }
}

/// `MPI_Scatter` / `MPI_Scatterv`: the root's send blocks as `spec` says.
pub(crate) fn scatter(
    w: &mut World,
    cx: &mut Ctx2<'_>,
    c: &Comm,
    sendbuf: *const c_void,
    spec: Spec,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    root: c_int,
) -> Result<(), Fail> {
    let root = root_of(c, root)?;
    let data = if root == InterRoot::Me {
        // SAFETY: the root's arrays (for varying blocks) of one entry per remote rank.
        let v = unsafe { split(sendbuf, &cx.dt(sendtype)?, spec, remote_size(c))? };
        // SAFETY: the root's send buffer holds every block.
        Some(v.iter().map(|b| unsafe { b.pack() }).collect())
    } else {
        None
    };
    let got = w.inter_scatterv(&c.c, data, root)?;
    if let InterRoot::Remote(_) = root {
        // SAFETY: the caller's receive buffer, written before this returns.
        unsafe { buf(recvbuf, recvcount, &cx.dt(recvtype)?)?.unpack_exact(&got)? };
    }
    Ok(())
}

/// `MPI_Allgather` / `MPI_Allgatherv`: the receive blocks as `spec` says.
pub(crate) fn allgather(
    w: &mut World,
    cx: &mut Ctx2<'_>,
    c: &Comm,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    spec: Spec,
    recvtype: Handle,
) -> Result<(), Fail> {
    // SAFETY: the caller's send buffer.
    let data = unsafe { buf(sendbuf, sendcount, &cx.dt(sendtype)?)?.pack() };
    // SAFETY: the caller's arrays (for varying blocks) of one entry per remote rank.
    let blocks = unsafe { split(recvbuf, &cx.dt(recvtype)?, spec, remote_size(c))? };
    unpack_blocks(Some(w.inter_allgatherv(&c.c, data)?), &blocks)
}

/// `MPI_Alltoall` / `MPI_Alltoallv`: send and receive blocks as the specs say.
pub(crate) fn alltoall(
    w: &mut World,
    cx: &mut Ctx2<'_>,
    c: &Comm,
    sendbuf: *const c_void,
    sspec: Spec,
    sendtype: Handle,
    recvbuf: *mut c_void,
    rspec: Spec,
    recvtype: Handle,
) -> Result<(), Fail> {
    let n = remote_size(c);
    // SAFETY: the caller's arrays (for varying blocks) of one entry per remote rank.
    let (sb, rb) =
        unsafe { (split(sendbuf, &cx.dt(sendtype)?, sspec, n)?, split(recvbuf, &cx.dt(recvtype)?, rspec, n)?) };
    // SAFETY: the caller's send buffer holds every block.
    let data = sb.iter().map(|b| unsafe { b.pack() }).collect();
    unpack_blocks(Some(w.inter_alltoallv(&c.c, data)?), &rb)
}

pub(crate) fn reduce(
    w: &mut World,
    cx: &mut Ctx2<'_>,
    c: &Comm,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Handle,
    op: Handle,
    root: c_int,
) -> Result<(), Fail> {
    let dt = cx.dt(datatype)?;
    let (mut f, commute) = combiner(cx.obj, op, &dt)?;
    let root = root_of(c, root)?;
    // SAFETY: the caller's send buffer (in the group without the root).
    let data =
        if let InterRoot::Remote(_) = root { unsafe { buf(sendbuf, count, &dt)?.pack() }.to_vec() } else { Vec::new() };
    if let Some(r) = w.inter_reduce(&c.c, data, root, &mut f, commute)? {
        // SAFETY: the root's receive buffer, written before this returns.
        unsafe { buf(recvbuf, count, &dt)?.unpack_exact(&r)? };
    }
    Ok(())
}

pub(crate) fn allreduce(
    w: &mut World,
    cx: &mut Ctx2<'_>,
    c: &Comm,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Handle,
    op: Handle,
) -> Result<(), Fail> {
    let dt = cx.dt(datatype)?;
    let (mut f, commute) = combiner(cx.obj, op, &dt)?;
    // SAFETY: the caller's send buffer.
    let data = unsafe { buf(sendbuf, count, &dt)?.pack() }.to_vec();
    let r = w.inter_allreduce(&c.c, data, &mut f, commute)?;
    // SAFETY: the caller's receive buffer, written before this returns.
    unsafe { buf(recvbuf, count, &dt)?.unpack_exact(&r) }
}
