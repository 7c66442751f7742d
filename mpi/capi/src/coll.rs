//! Collectives on intracommunicators: `MPI_Barrier`, `MPI_Bcast`,
//! `MPI_Gather(v)`, `MPI_Scatter(v)`, `MPI_Allgather(v)`, `MPI_Alltoall(v)`,
//! `MPI_Reduce`, `MPI_Allreduce`, `MPI_Reduce_scatter`, `MPI_Scan`, with
//! `MPI_IN_PLACE` where the standard allows it. Data is packed through the
//! datatypes' layouts (send and receive types may differ, their signatures
//! must match), moved by the collectives of `p2pmp_mpi::World`, and unpacked.
//! Intercommunicators go to `intercoll` (MPI-2's meaning of the same calls).

use std::ffi::{c_int, c_void};

use bytes::Bytes;
use p2pmp_mpi::World;

use crate::buf::in_array;
use crate::comm::Comm;
use crate::consts::{Handle, IN_PLACE_ADDR, MPI_ERR_ARG};
use crate::error::Fail;
use crate::ops::combiner;
use crate::state::call;
use crate::types::{Buf, Dt, count_arg, get};

/// Runs collective `f` on `comm`: on an intracommunicator with the
/// collectives on its group; on an intercommunicator `f` gets the world as it
/// is and must take the intercommunicator's path (see `intercoll`).
fn collective(
    func: &'static str,
    comm: Handle,
    f: impl FnOnce(&mut World, &mut Ctx2<'_>, &Comm) -> Result<(), Fail>,
) -> c_int {
    call(func, comm, |cx| {
        let c = cx.comms.get(comm)?;
        let mut cx2 = Ctx2 { obj: cx.obj };
        if c.c.is_inter() {
            return f(cx.world, &mut cx2, &c);
        }
        cx.world.collectives_in(&c.c, |w| f(w, &mut cx2, &c))
    })
}

/// What a collective needs of the state besides the world.
#[derive(Debug)]
pub(crate) struct Ctx2<'a> {
    pub(crate) obj: &'a mut crate::state::Objects,
}

impl Ctx2<'_> {
    pub(crate) fn dt(&self, h: Handle) -> Result<Dt, Fail> {
        get(self.obj, h)
    }
}

pub(crate) fn in_place(p: *const c_void) -> bool {
    p as usize == IN_PLACE_ADDR
}

/// `count` elements of `dt` at `p` (the caller vouches for them).
pub(crate) fn buf(p: *const c_void, count: c_int, dt: &Dt) -> Result<Buf, Fail> {
    Buf::new(p, count, dt.clone())
}

/// The counts (or displacements) of every rank, `p` of them.
///
/// # Safety
/// `a` holds `p` ints.
pub(crate) unsafe fn per_rank<'a>(a: *const c_int, p: u32) -> Result<&'a [c_int], Fail> {
    // SAFETY: as the caller vouched.
    unsafe { in_array(a, p as c_int) }
}

/// How a buffer argument splits into one block per rank.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Spec {
    /// Block `i` holds `count` elements from element `i * count`.
    Regular(c_int),
    /// Block `i` holds `counts[i]` elements from element `displs[i]`.
    Varying(*const c_int, *const c_int),
}

/// The `n` blocks of the buffer at `p` (elements of `dt`) as `spec` says.
///
/// # Safety
/// For `Varying`, both arrays hold `n` ints.
pub(crate) unsafe fn split(p: *const c_void, dt: &Dt, spec: Spec, n: u32) -> Result<Vec<Buf>, Fail> {
    let base = buf(p, 0, dt)?;
    match spec {
        Spec::Regular(count) => {
            let k = count_arg(count, "count")? as u64;
            (0..n).map(|i| base.slice(u64::from(i) * k, k)).collect()
        }
        Spec::Varying(counts, displs) => {
            // SAFETY: as the caller vouched.
            let (c, d) = unsafe { (per_rank(counts, n)?, per_rank(displs, n)?) };
            (0..n as usize).map(|i| base.slice(d[i] as u64, count_arg(c[i], "count")? as u64)).collect()
        }
    }
}

/// `MPI_Barrier`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Barrier(comm: Handle) -> c_int {
    collective(
        "MPI_Barrier",
        comm,
        |w, _, c| if c.c.is_inter() { Ok(w.inter_barrier(&c.c)?) } else { Ok(w.barrier()?) },
    )
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
    collective("MPI_Bcast", comm, |w, cx, c| {
        if c.c.is_inter() {
            return crate::intercoll::bcast(w, cx, c, buffer, count, datatype, root);
        }
        let b = buf(buffer, count, &cx.dt(datatype)?)?;
        let root = c.root(root)?;
        if c.rank() == root {
            // SAFETY: the caller's buffer.
            w.bcast_bytes(unsafe { b.pack() }, root)?;
        } else {
            let got = w.bcast_bytes(Bytes::new(), root)?;
            // SAFETY: the caller's buffer, written before this returns.
            unsafe { b.unpack_exact(&got)? };
        }
        Ok(())
    })
}

/// `MPI_Gather` (`MPI_IN_PLACE` as the root's `sendbuf`).
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
    collective("MPI_Gather", comm, |w, cx, c| {
        if c.c.is_inter() {
            return crate::intercoll::gather(
                w,
                cx,
                c,
                sendbuf,
                sendcount,
                sendtype,
                recvbuf,
                Spec::Regular(recvcount),
                recvtype,
                root,
            );
        }
        let root = c.root(root)?;
        let (me, p) = (c.rank(), c.size());
        let out = if me == root { Some(buf(recvbuf, recvcount * p as c_int, &cx.dt(recvtype)?)?) } else { None };
        let send = match &out {
            Some(o) if in_place(sendbuf) => o.slice(u64::from(me) * recvcount as u64, recvcount as u64)?,
            _ => buf(sendbuf, sendcount, &cx.dt(sendtype)?)?,
        };
        // SAFETY: the caller's send buffer.
        let data = unsafe { send.pack() };
        if let (Some(out), Some(all)) = (out, w.gather::<u8>(&data, root)?) {
            // SAFETY: the root's receive buffer, written before this returns.
            unsafe { out.unpack_exact(&all)? };
        }
        Ok(())
    })
}

/// `MPI_Gatherv` (`MPI_IN_PLACE` as the root's `sendbuf`).
///
/// # Safety
/// `sendbuf` holds `sendcount` elements of `sendtype`; on the root, `recvbuf`
/// holds `recvcounts[i]` elements of `recvtype` at `displs[i]` for each rank.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Gatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    collective("MPI_Gatherv", comm, |w, cx, c| {
        if c.c.is_inter() {
            return crate::intercoll::gather(
                w,
                cx,
                c,
                sendbuf,
                sendcount,
                sendtype,
                recvbuf,
                Spec::Varying(recvcounts, displs),
                recvtype,
                root,
            );
        }
        let root = c.root(root)?;
        let (me, p) = (c.rank(), c.size());
        if me != root {
            let send = buf(sendbuf, sendcount, &cx.dt(sendtype)?)?;
            // SAFETY: the caller's send buffer.
            w.gatherv_bytes(unsafe { send.pack() }, root, None)?;
            return Ok(());
        }
        // SAFETY: the root's arrays of one entry per rank.
        let blocks = unsafe { split(recvbuf, &cx.dt(recvtype)?, Spec::Varying(recvcounts, displs), p)? };
        let lens: Vec<usize> = blocks.iter().map(Buf::bytes).collect();
        let mine = if in_place(sendbuf) {
            // SAFETY: the root's receive buffer holds its own block.
            unsafe { blocks[me as usize].pack() }
        } else {
            // SAFETY: the caller's send buffer.
            unsafe { buf(sendbuf, sendcount, &cx.dt(sendtype)?)?.pack() }
        };
        let got = w.gatherv_bytes(mine, root, Some(&lens))?.unwrap_or_default();
        for (i, (b, data)) in blocks.iter().zip(got).enumerate() {
            if i as u32 != me || !in_place(sendbuf) {
                // SAFETY: the root's receive buffer, written before this returns.
                unsafe { b.unpack_exact(&data)? };
            }
        }
        Ok(())
    })
}

/// `MPI_Scatter` (`MPI_IN_PLACE` as the root's `recvbuf`).
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
    collective("MPI_Scatter", comm, |w, cx, c| {
        if c.c.is_inter() {
            return crate::intercoll::scatter(
                w,
                cx,
                c,
                sendbuf,
                Spec::Regular(sendcount),
                sendtype,
                recvbuf,
                recvcount,
                recvtype,
                root,
            );
        }
        let root = c.root(root)?;
        let (me, p) = (c.rank(), c.size());
        let keep = me == root && in_place(recvbuf);
        let out = if keep { None } else { Some(buf(recvbuf, recvcount, &cx.dt(recvtype)?)?) };
        let got = if me == root {
            let all = buf(sendbuf, sendcount * p as c_int, &cx.dt(sendtype)?)?;
            // SAFETY: the root's send buffer.
            w.scatter::<u8>(Some(&unsafe { all.pack() }), root)?
        } else {
            w.scatter::<u8>(None, root)?
        };
        if let Some(out) = out {
            // SAFETY: the caller's receive buffer, written before this returns.
            unsafe { out.unpack_exact(&got)? };
        }
        Ok(())
    })
}

/// `MPI_Scatterv` (`MPI_IN_PLACE` as the root's `recvbuf`).
///
/// # Safety
/// On the root `sendbuf` holds `sendcounts[i]` elements of `sendtype` at
/// `displs[i]` for each rank; `recvbuf` holds `recvcount` elements of `recvtype`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Scatterv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    displs: *const c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    collective("MPI_Scatterv", comm, |w, cx, c| {
        if c.c.is_inter() {
            return crate::intercoll::scatter(
                w,
                cx,
                c,
                sendbuf,
                Spec::Varying(sendcounts, displs),
                sendtype,
                recvbuf,
                recvcount,
                recvtype,
                root,
            );
        }
        let root = c.root(root)?;
        let (me, p) = (c.rank(), c.size());
        let keep = me == root && in_place(recvbuf);
        let out = if keep { None } else { Some(buf(recvbuf, recvcount, &cx.dt(recvtype)?)?) };
        let blocks = if me == root {
            // SAFETY: the root's arrays of one entry per rank.
            let blocks = unsafe { split(sendbuf, &cx.dt(sendtype)?, Spec::Varying(sendcounts, displs), p)? };
            let packed = blocks.iter().enumerate().map(|(i, b)| {
                // SAFETY: the root's send buffer holds every block.
                if keep && i as u32 == me { Bytes::new() } else { unsafe { b.pack() } }
            });
            Some(packed.collect())
        } else {
            None
        };
        let len = out.as_ref().map_or(0, Buf::bytes);
        let got = w.scatterv_bytes(blocks, root, len)?;
        if let Some(out) = out {
            // SAFETY: the caller's receive buffer, written before this returns.
            unsafe { out.unpack_exact(&got)? };
        }
        Ok(())
    })
}

/// `MPI_Allgather` (`MPI_IN_PLACE` as `sendbuf`).
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
    collective("MPI_Allgather", comm, |w, cx, c| {
        if c.c.is_inter() {
            return crate::intercoll::allgather(
                w,
                cx,
                c,
                sendbuf,
                sendcount,
                sendtype,
                recvbuf,
                Spec::Regular(recvcount),
                recvtype,
            );
        }
        let (me, p) = (c.rank(), c.size());
        let out = buf(recvbuf, recvcount * p as c_int, &cx.dt(recvtype)?)?;
        let send = if in_place(sendbuf) {
            out.slice(u64::from(me) * recvcount as u64, recvcount as u64)?
        } else {
            buf(sendbuf, sendcount, &cx.dt(sendtype)?)?
        };
        // SAFETY: the caller's send buffer.
        let all = w.allgather::<u8>(&unsafe { send.pack() })?;
        // SAFETY: the caller's receive buffer, written before this returns.
        unsafe { out.unpack_exact(&all) }
    })
}

/// `MPI_Allgatherv` (`MPI_IN_PLACE` as `sendbuf`).
///
/// # Safety
/// `sendbuf` holds `sendcount` elements of `sendtype`; `recvbuf` holds
/// `recvcounts[i]` elements of `recvtype` at `displs[i]` for each rank.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Allgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: Handle,
    comm: Handle,
) -> c_int {
    collective("MPI_Allgatherv", comm, |w, cx, c| {
        if c.c.is_inter() {
            return crate::intercoll::allgather(
                w,
                cx,
                c,
                sendbuf,
                sendcount,
                sendtype,
                recvbuf,
                Spec::Varying(recvcounts, displs),
                recvtype,
            );
        }
        let (me, p) = (c.rank(), c.size());
        // SAFETY: the caller's arrays of one entry per rank.
        let blocks = unsafe { split(recvbuf, &cx.dt(recvtype)?, Spec::Varying(recvcounts, displs), p)? };
        let lens: Vec<usize> = blocks.iter().map(Buf::bytes).collect();
        let send =
            if in_place(sendbuf) { blocks[me as usize].clone() } else { buf(sendbuf, sendcount, &cx.dt(sendtype)?)? };
        // SAFETY: the caller's send buffer.
        let got = w.allgatherv_bytes(unsafe { send.pack() }, &lens)?;
        for (b, data) in blocks.iter().zip(got) {
            // SAFETY: the caller's receive buffer, written before this returns.
            unsafe { b.unpack_exact(&data)? };
        }
        Ok(())
    })
}

/// `MPI_Alltoall` (`MPI_IN_PLACE` as `sendbuf`).
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
    collective("MPI_Alltoall", comm, |w, cx, c| {
        if c.c.is_inter() {
            return crate::intercoll::alltoall(
                w,
                cx,
                c,
                sendbuf,
                Spec::Regular(sendcount),
                sendtype,
                recvbuf,
                Spec::Regular(recvcount),
                recvtype,
            );
        }
        let p = c.size() as c_int;
        let out = buf(recvbuf, recvcount * p, &cx.dt(recvtype)?)?;
        let send = if in_place(sendbuf) { out.clone() } else { buf(sendbuf, sendcount * p, &cx.dt(sendtype)?)? };
        // SAFETY: the caller's send buffer (packed before anything is written).
        let all = w.alltoall::<u8>(&unsafe { send.pack() })?;
        // SAFETY: the caller's receive buffer, written before this returns.
        unsafe { out.unpack_exact(&all) }
    })
}

/// `MPI_Alltoallv` (`MPI_IN_PLACE` as `sendbuf`).
///
/// # Safety
/// The buffers hold the blocks the counts and displacements (one per rank) say.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Alltoallv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: Handle,
    comm: Handle,
) -> c_int {
    collective("MPI_Alltoallv", comm, |w, cx, c| {
        if c.c.is_inter() {
            return crate::intercoll::alltoall(
                w,
                cx,
                c,
                sendbuf,
                Spec::Varying(sendcounts, sdispls),
                sendtype,
                recvbuf,
                Spec::Varying(recvcounts, rdispls),
                recvtype,
            );
        }
        let p = c.size();
        // SAFETY: the caller's arrays of one entry per rank.
        let rblocks = unsafe { split(recvbuf, &cx.dt(recvtype)?, Spec::Varying(recvcounts, rdispls), p)? };
        let sblocks = if in_place(sendbuf) {
            rblocks.clone()
        } else {
            // SAFETY: the caller's arrays of one entry per rank.
            unsafe { split(sendbuf, &cx.dt(sendtype)?, Spec::Varying(sendcounts, sdispls), p)? }
        };
        // SAFETY: the caller's send buffer (packed before anything is written).
        let data: Vec<Bytes> = sblocks.iter().map(|b| unsafe { b.pack() }).collect();
        let lens: Vec<usize> = rblocks.iter().map(Buf::bytes).collect();
        let got = w.alltoallv_bytes(data, &lens)?;
        for (b, d) in rblocks.iter().zip(got) {
            // SAFETY: the caller's receive buffer, written before this returns.
            unsafe { b.unpack_exact(&d)? };
        }
        Ok(())
    })
}

/// The input of a reduction: `sendbuf`, or `recvbuf` for `MPI_IN_PLACE`
/// where `in_place_ok`; packed, so the receive buffer may be written afterwards.
///
/// # Safety
/// The chosen buffer holds `count` elements of `dt`.
unsafe fn reduce_input(
    sendbuf: *const c_void,
    recvbuf: *const c_void,
    count: c_int,
    dt: &Dt,
    in_place_ok: bool,
) -> Result<Vec<u8>, Fail> {
    let src = if in_place_ok && in_place(sendbuf) { recvbuf } else { sendbuf };
    let b = buf(src, count, dt)?;
    let mut out = Vec::with_capacity(b.bytes());
    // SAFETY: as the caller vouched.
    unsafe { b.pack_into(&mut out) };
    Ok(out)
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
    collective("MPI_Reduce", comm, |w, cx, c| {
        if c.c.is_inter() {
            return crate::intercoll::reduce(w, cx, c, sendbuf, recvbuf, count, datatype, op, root);
        }
        let dt = cx.dt(datatype)?;
        let (mut f, commute) = combiner(cx.obj, op, &dt)?;
        let root = c.root(root)?;
        let me_root = c.rank() == root;
        // SAFETY: the caller's buffers.
        let input = unsafe { reduce_input(sendbuf, recvbuf, count, &dt, me_root)? };
        let out = if me_root { Some(buf(recvbuf, count, &dt)?) } else { None };
        if let (Some(out), Some(r)) = (out, w.reduce_bytes(input, root, &mut f, commute)?) {
            // SAFETY: the root's receive buffer, written before this returns.
            unsafe { out.unpack_exact(&r)? };
        }
        Ok(())
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
    collective("MPI_Allreduce", comm, |w, cx, c| {
        if c.c.is_inter() {
            return crate::intercoll::allreduce(w, cx, c, sendbuf, recvbuf, count, datatype, op);
        }
        let dt = cx.dt(datatype)?;
        let (mut f, commute) = combiner(cx.obj, op, &dt)?;
        // SAFETY: the caller's buffers.
        let input = unsafe { reduce_input(sendbuf, recvbuf, count, &dt, true)? };
        let out = buf(recvbuf, count, &dt)?;
        let r = w.allreduce_bytes(input, &mut f, commute)?;
        // SAFETY: the caller's receive buffer, written before this returns.
        unsafe { out.unpack_exact(&r) }
    })
}

/// `MPI_Reduce_scatter` (`MPI_IN_PLACE` as `sendbuf`).
///
/// # Safety
/// `sendbuf` holds the sum of `recvcounts` elements of `datatype`; `recvbuf`
/// this rank's count (all of them for `MPI_IN_PLACE`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Reduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    datatype: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    collective("MPI_Reduce_scatter", comm, |w, cx, c| {
        let dt = cx.dt(datatype)?;
        let (mut f, commute) = combiner(cx.obj, op, &dt)?;
        // SAFETY: the caller's array of one entry per rank.
        let counts = unsafe { per_rank(recvcounts, c.size())? };
        let counts = counts.iter().map(|&n| count_arg(n, "receive count")).collect::<Result<Vec<_>, _>>()?;
        let total: usize = counts.iter().sum();
        let total = c_int::try_from(total).map_err(|_| Fail::new(MPI_ERR_ARG, "counts too large".into()))?;
        // SAFETY: the caller's buffers.
        let input = unsafe { reduce_input(sendbuf, recvbuf, total, &dt, true)? };
        let lens: Vec<usize> = counts.iter().map(|&n| n * dt.layout.size() as usize).collect();
        let mine = if c.c.is_inter() {
            w.inter_reduce_scatter(&c.c, input, &lens, &mut f, commute)?
        } else {
            w.reduce_scatter_bytes(input, &lens, &mut f, commute)?
        };
        let out = buf(recvbuf, counts[c.rank() as usize] as c_int, &dt)?;
        // SAFETY: the caller's receive buffer, written before this returns.
        unsafe { out.unpack_exact(&mine) }
    })
}

/// `MPI_Scan` (`MPI_IN_PLACE` as `sendbuf`).
///
/// # Safety
/// `sendbuf` and `recvbuf` hold `count` elements of `datatype`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Scan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    collective("MPI_Scan", comm, |w, cx, c| {
        c.c.check_intra("MPI_Scan")?;
        let dt = cx.dt(datatype)?;
        let (mut f, _) = combiner(cx.obj, op, &dt)?;
        // SAFETY: the caller's buffers.
        let input = unsafe { reduce_input(sendbuf, recvbuf, count, &dt, true)? };
        let out = buf(recvbuf, count, &dt)?;
        let r = w.scan_bytes(input, &mut f)?;
        // SAFETY: the caller's receive buffer, written before this returns.
        unsafe { out.unpack_exact(&r) }
    })
}
