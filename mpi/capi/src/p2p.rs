//! Point-to-point calls: `MPI_Send`, `MPI_Ssend`, `MPI_Recv`, `MPI_Sendrecv`,
//! `MPI_Isend`, `MPI_Irecv`, `MPI_Probe`, `MPI_Iprobe`.

use std::ffi::{c_int, c_void};

use bytes::Bytes;
use p2pmp_mpi::{Status, World};

use crate::buf::{OutBuf, in_bytes, write_out};
use crate::comm::{Comm, Peer};
use crate::consts::{Handle, MPI_ANY_TAG, MPI_ERR_ARG, MPI_ERR_TAG};
use crate::datatype::Datatype;
use crate::error::Fail;
use crate::request::{Kind, Pending};
use crate::state::{Ctx, call};
use crate::status::{MpiStatus, StatusOut};

/// A receive tag: `MPI_ANY_TAG` or non-negative.
fn recv_tag(tag: c_int) -> Result<Option<i32>, Fail> {
    match tag {
        MPI_ANY_TAG => Ok(None),
        t if t >= 0 => Ok(Some(t)),
        t => Err(Fail::new(MPI_ERR_TAG, format!("invalid receive tag {t}"))),
    }
}

fn send_tag(tag: c_int) -> Result<i32, Fail> {
    if tag >= 0 { Ok(tag) } else { Err(Fail::new(MPI_ERR_TAG, format!("invalid send tag {tag}"))) }
}

/// How a send completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Once the buffer may be reused (`MPI_Send`).
    Standard,
    /// Once a receive took the message (`MPI_Ssend`).
    Synchronous,
}

/// A send with every argument checked: the message (copied from the caller's
/// buffer) and where it goes.
#[derive(Debug)]
struct Outgoing {
    data: Bytes,
    to: Peer,
    tag: i32,
}

impl Outgoing {
    /// Checks a send's arguments and copies its message.
    ///
    /// # Safety
    /// `buf` is null or holds `count` elements of `datatype`.
    unsafe fn new(
        w: &World,
        buf: *const c_void,
        count: c_int,
        datatype: Handle,
        dest: c_int,
        tag: c_int,
        comm: &Comm,
    ) -> Result<Outgoing, Fail> {
        let len = Datatype::from_handle(datatype)?.bytes(count)?;
        // SAFETY: the caller vouches for `count` elements at `buf` (null refused when count > 0).
        let data = unsafe { in_bytes(buf, len)? };
        let tag = send_tag(tag)?;
        let to = comm.dest(dest)?;
        let _ = w;
        Ok(Outgoing { data: Bytes::copy_from_slice(data), to, tag })
    }

    /// Starts the send on `comm`; a request of none for `MPI_PROC_NULL`.
    fn start(self, w: &mut World, comm: &Comm, mode: Mode) -> Result<Pending, Fail> {
        let req = match (self.to, mode) {
            (Peer::Rank(to), Mode::Standard) => Some(w.isend_in(&comm.c, self.data, to, self.tag)?),
            (Peer::Rank(to), Mode::Synchronous) => Some(w.issend_in(&comm.c, self.data, to, self.tag)?),
            _ => None,
        };
        Ok(Pending { req, kind: Kind::Send, comm: comm.handle })
    }
}

/// Posts a receive (checks every argument first).
///
/// # Safety
/// `buf` is null or writable for `count` elements of `datatype` until completion.
unsafe fn start_recv(
    cx: &mut Ctx<'_>,
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: &Comm,
) -> Result<Pending, Fail> {
    let len = Datatype::from_handle(datatype)?.bytes(count)?;
    // SAFETY: the caller vouches for the buffer until the receive completes.
    let out = unsafe { OutBuf::new(buf, len)? };
    let tag = recv_tag(tag)?;
    let req = match comm.source(source)? {
        Peer::Null => None,
        Peer::Any => Some(cx.world.irecv_in(&comm.c, None, tag)?),
        Peer::Rank(r) => Some(cx.world.irecv_in(&comm.c, Some(r), tag)?),
    };
    Ok(Pending { req, kind: Kind::Recv { out, comm: comm.c.clone() }, comm: comm.handle })
}

/// A blocking send in `mode`.
///
/// # Safety
/// `buf` holds `count` elements of `datatype`.
unsafe fn send(
    mode: Mode,
    buf: *const c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> c_int {
    let func = if mode == Mode::Standard { "MPI_Send" } else { "MPI_Ssend" };
    call(func, comm, |cx| {
        let c = cx.comms.get(comm)?;
        // SAFETY: as the caller vouched.
        let out = unsafe { Outgoing::new(cx.world, buf, count, datatype, dest, tag, &c)? };
        out.start(cx.world, &c, mode)?.wait(cx.world).map(|_| ())
    })
}

/// `MPI_Send`.
///
/// # Safety
/// `buf` holds `count` elements of `datatype`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Send(
    buf: *const c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> c_int {
    // SAFETY: as the caller vouched.
    unsafe { send(Mode::Standard, buf, count, datatype, dest, tag, comm) }
}

/// `MPI_Ssend`: returns once the matching receive took the message.
///
/// # Safety
/// `buf` holds `count` elements of `datatype`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Ssend(
    buf: *const c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> c_int {
    // SAFETY: as the caller vouched.
    unsafe { send(Mode::Synchronous, buf, count, datatype, dest, tag, comm) }
}

/// `MPI_Recv`.
///
/// # Safety
/// `buf` is writable for `count` elements of `datatype`; `status` is
/// `MPI_STATUS_IGNORE` or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Recv(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> c_int {
    call("MPI_Recv", comm, |mut cx| {
        let c = cx.comms.get(comm)?;
        let out = StatusOut::new(status)?;
        // SAFETY: as the caller vouched; the receive completes before this returns.
        let p = unsafe { start_recv(&mut cx, buf, count, datatype, source, tag, &c)? };
        out.write(p.wait(cx.world)?);
        Ok(())
    })
}

/// `MPI_Sendrecv`: the receive is posted first, so exchanges in a cycle cannot deadlock.
///
/// # Safety
/// As `MPI_Send` for the send arguments and `MPI_Recv` for the receive ones.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Sendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    source: c_int,
    recvtag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> c_int {
    call("MPI_Sendrecv", comm, |mut cx| {
        let c = cx.comms.get(comm)?;
        let out = StatusOut::new(status)?;
        // Both argument sets are checked before anything starts.
        // SAFETY: as the caller vouched.
        let outgoing = unsafe { Outgoing::new(cx.world, sendbuf, sendcount, sendtype, dest, sendtag, &c)? };
        // SAFETY: as the caller vouched; both complete before this returns.
        let r = unsafe { start_recv(&mut cx, recvbuf, recvcount, recvtype, source, recvtag, &c)? };
        let s = outgoing.start(cx.world, &c, Mode::Standard)?;
        let st = r.wait(cx.world)?;
        s.wait(cx.world)?;
        out.write(st);
        Ok(())
    })
}

/// Starts a non-blocking call with `start` and stores its request in `*request`.
fn post(
    func: &'static str,
    comm: Handle,
    request: *mut Handle,
    start: impl FnOnce(&mut Ctx<'_>, &Comm) -> Result<Pending, Fail>,
) -> c_int {
    call(func, comm, |mut cx| {
        let c = cx.comms.get(comm)?;
        if request.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null request pointer".into()));
        }
        let p = start(&mut cx, &c)?;
        let h = cx.reqs.insert(p)?;
        // SAFETY: non-null (checked), the caller's handle.
        unsafe { write_out(request, h) }
    })
}

/// `MPI_Isend`.
///
/// # Safety
/// `buf` holds `count` elements of `datatype` (copied before this returns);
/// `request` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Isend(
    buf: *const c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    post("MPI_Isend", comm, request, |cx, c| {
        // SAFETY: as the caller vouched.
        unsafe { Outgoing::new(cx.world, buf, count, datatype, dest, tag, c) }?.start(cx.world, c, Mode::Standard)
    })
}

/// `MPI_Issend`: its request completes once the matching receive took the message.
///
/// # Safety
/// As `MPI_Isend`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Issend(
    buf: *const c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    post("MPI_Issend", comm, request, |cx, c| {
        // SAFETY: as the caller vouched.
        unsafe { Outgoing::new(cx.world, buf, count, datatype, dest, tag, c) }?.start(cx.world, c, Mode::Synchronous)
    })
}

/// `MPI_Irecv`.
///
/// # Safety
/// `buf` stays writable for `count` elements of `datatype` until the request
/// completes; `request` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Irecv(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: as the caller vouched.
    post("MPI_Irecv", comm, request, |cx, c| unsafe { start_recv(cx, buf, count, datatype, source, tag, c) })
}

/// The status a probe reports, in `comm`'s ranks.
fn probed(c: &Comm, s: &Status) -> MpiStatus {
    MpiStatus::received(s, c.comm_rank_of(s.source))
}

/// Probes `source`/`tag` on `c`: blocking, or `None` when nothing matches yet.
fn probe(w: &mut World, c: &Comm, source: c_int, tag: c_int, block: bool) -> Result<Option<MpiStatus>, Fail> {
    let tag = recv_tag(tag)?;
    let src = match c.source(source)? {
        Peer::Null => return Ok(Some(MpiStatus::PROC_NULL)),
        Peer::Any => None,
        Peer::Rank(r) => Some(r),
    };
    let s = if block { Some(w.probe_in(&c.c, src, tag)?) } else { w.iprobe_in(&c.c, src, tag)? };
    Ok(s.map(|s| probed(c, &s)))
}

/// `MPI_Probe`.
///
/// # Safety
/// `status` is `MPI_STATUS_IGNORE` or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Probe(source: c_int, tag: c_int, comm: Handle, status: *mut MpiStatus) -> c_int {
    call("MPI_Probe", comm, |cx| {
        let c = cx.comms.get(comm)?;
        let out = StatusOut::new(status)?;
        if let Some(st) = probe(cx.world, &c, source, tag, true)? {
            out.write(st);
        }
        Ok(())
    })
}

/// `MPI_Iprobe`.
///
/// # Safety
/// `flag` is writable; `status` is `MPI_STATUS_IGNORE` or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Iprobe(
    source: c_int,
    tag: c_int,
    comm: Handle,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    call("MPI_Iprobe", comm, |cx| {
        let c = cx.comms.get(comm)?;
        let out = StatusOut::new(status)?;
        if flag.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null flag".into()));
        }
        let got = probe(cx.world, &c, source, tag, false)?;
        if let Some(st) = got {
            out.write(st);
        }
        // SAFETY: non-null (checked), the caller's int.
        unsafe { write_out(flag, c_int::from(got.is_some())) }
    })
}
