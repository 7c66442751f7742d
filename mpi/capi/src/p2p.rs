//! Point-to-point calls: every send mode (`MPI_Send`, `_Bsend`, `_Ssend`,
//! `_Rsend` and their `I` forms), `MPI_Recv`, `MPI_Irecv`, the persistent
//! `_init` forms, `MPI_Sendrecv`, `MPI_Sendrecv_replace`, `MPI_Probe`,
//! `MPI_Iprobe`. Data moves through its datatype's layout, packed once.

use std::ffi::{c_int, c_void};

use p2pmp_mpi::{Completed, Status, World};

use crate::buf::write_out;
use crate::comm::{Comm, Peer};
use crate::consts::{Handle, MPI_ANY_TAG, MPI_ERR_ARG, MPI_ERR_TAG};
use crate::error::Fail;
use crate::request::{Kind, Pending, Persistent, finish, make_persistent};
use crate::state::{Ctx, call};
use crate::status::{MpiStatus, StatusOut};
use crate::types::{Buf, get};

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

/// A send's checked destination rank and tag; `None` for `MPI_PROC_NULL`
/// (nothing to send).
fn send_target(dest: c_int, tag: c_int, comm: &Comm) -> Result<Option<(u32, i32)>, Fail> {
    let tag = send_tag(tag)?;
    Ok(match comm.dest(dest)? {
        Peer::Rank(to) => Some((to, tag)),
        _ => None,
    })
}

/// How a send completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Once the buffer may be reused (`MPI_Send`; also `MPI_Rsend`: a ready
    /// send may be a standard one).
    Standard,
    /// At once, the message held in the attached buffer's space (`MPI_Bsend`).
    Buffered,
    /// Once a receive took the message (`MPI_Ssend`).
    Synchronous,
}

impl Mode {
    fn name(self, nonblocking: bool) -> &'static str {
        match (self, nonblocking) {
            (Mode::Standard, false) => "MPI_Send",
            (Mode::Buffered, false) => "MPI_Bsend",
            (Mode::Synchronous, false) => "MPI_Ssend",
            (Mode::Standard, true) => "MPI_Isend",
            (Mode::Buffered, true) => "MPI_Ibsend",
            (Mode::Synchronous, true) => "MPI_Issend",
        }
    }
}

/// A send buffer argument.
fn send_buf(cx: &Ctx<'_>, buf: *const c_void, count: c_int, datatype: Handle) -> Result<Buf, Fail> {
    Buf::new(buf, count, get(cx.obj, datatype)?)
}

/// Starts a send of `buf` (checked, packed now); a request of none for
/// `MPI_PROC_NULL` and buffered sends (complete at once).
///
/// # Safety
/// `buf` holds its elements, readable.
pub(crate) unsafe fn start_send(
    cx: &mut Ctx<'_>,
    mode: Mode,
    buf: &Buf,
    dest: c_int,
    tag: c_int,
    comm: &Comm,
) -> Result<Pending, Fail> {
    let send = Pending { req: None, kind: Kind::Send, comm: comm.handle };
    let Some((to, tag)) = send_target(dest, tag, comm)? else { return Ok(send) };
    let need = if mode == Mode::Buffered { Some(cx.bsend.reserve(cx.world, buf.bytes())?) } else { None };
    // SAFETY: as the caller vouched.
    let data = unsafe { buf.pack_payload() };
    let req = match mode {
        Mode::Synchronous => cx.world.issend_in(&comm.c, data, to, tag)?,
        _ => cx.world.isend_in(&comm.c, data, to, tag)?,
    };
    match need {
        Some(n) => {
            let ticket = cx.bsend.push(req, n);
            Ok(Pending { kind: Kind::Bsend { ticket }, ..send })
        }
        None => Ok(Pending { req: Some(req), ..send }),
    }
}

/// Posts a receive into `out`.
pub(crate) fn start_recv(cx: &mut Ctx<'_>, out: Buf, source: c_int, tag: c_int, comm: &Comm) -> Result<Pending, Fail> {
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
    call(mode.name(false), comm, |mut cx| {
        let c = cx.comms.get(comm)?;
        let b = send_buf(&cx, buf, count, datatype)?;
        // SAFETY (both): as the caller vouched.
        if mode == Mode::Standard {
            return unsafe { standard_send(cx.world, &b, dest, tag, &c) };
        }
        unsafe { start_send(&mut cx, mode, &b, dest, tag, &c)? }.wait(cx.world).map(|_| ())
    })
}

/// A blocking standard send (`World::send_in`: one that goes eagerly needs
/// no request).
///
/// # Safety
/// As [`start_send`].
unsafe fn standard_send(world: &mut World, buf: &Buf, dest: c_int, tag: c_int, comm: &Comm) -> Result<(), Fail> {
    let Some((to, tag)) = send_target(dest, tag, comm)? else { return Ok(()) };
    // SAFETY: as the caller vouched.
    let data = unsafe { buf.pack_payload() };
    Ok(world.send_in(&comm.c, data, to, tag)?)
}

macro_rules! blocking_send {
    ($(#[$doc:meta])* $name:ident, $mode:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `buf` holds `count` elements of `datatype`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: c_int,
            datatype: Handle,
            dest: c_int,
            tag: c_int,
            comm: Handle,
        ) -> c_int {
            // SAFETY: as the caller vouched.
            unsafe { send($mode, buf, count, datatype, dest, tag, comm) }
        }
    };
}

blocking_send!(
    /// `MPI_Send`.
    MPI_Send,
    Mode::Standard
);
blocking_send!(
    /// `MPI_Bsend`: returns at once; `MPI_ERR_BUFFER` when the attached buffer lacks room.
    MPI_Bsend,
    Mode::Buffered
);
blocking_send!(
    /// `MPI_Ssend`: returns once the matching receive took the message.
    MPI_Ssend,
    Mode::Synchronous
);
blocking_send!(
    /// `MPI_Rsend` (a ready send may be a standard one).
    MPI_Rsend,
    Mode::Standard
);

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
        // SAFETY: non-null, the caller's handle.
        unsafe { write_out(request, h) }
    })
}

/// A non-blocking send in `mode`.
///
/// # Safety
/// As `MPI_Isend`.
#[allow(clippy::too_many_arguments)]
unsafe fn isend(
    mode: Mode,
    buf: *const c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    post(mode.name(true), comm, request, |cx, c| {
        let b = send_buf(cx, buf, count, datatype)?;
        // SAFETY: as the caller vouched (the data is copied before this returns).
        unsafe { start_send(cx, mode, &b, dest, tag, c) }
    })
}

macro_rules! nonblocking_send {
    ($(#[$doc:meta])* $name:ident, $mode:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `buf` holds `count` elements of `datatype` (copied before this
        /// returns); `request` is writable.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: c_int,
            datatype: Handle,
            dest: c_int,
            tag: c_int,
            comm: Handle,
            request: *mut Handle,
        ) -> c_int {
            // SAFETY: as the caller vouched.
            unsafe { isend($mode, buf, count, datatype, dest, tag, comm, request) }
        }
    };
}

nonblocking_send!(
    /// `MPI_Isend`.
    MPI_Isend,
    Mode::Standard
);
nonblocking_send!(
    /// `MPI_Ibsend`: complete at once.
    MPI_Ibsend,
    Mode::Buffered
);
nonblocking_send!(
    /// `MPI_Issend`: its request completes once the matching receive took the message.
    MPI_Issend,
    Mode::Synchronous
);
nonblocking_send!(
    /// `MPI_Irsend`.
    MPI_Irsend,
    Mode::Standard
);

/// Makes a persistent send request in `mode`.
#[allow(clippy::too_many_arguments)]
fn send_init(
    func: &'static str,
    mode: Mode,
    buf: *const c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call(func, comm, |mut cx| {
        let c = cx.comms.get(comm)?;
        let b = send_buf(&cx, buf, count, datatype)?;
        send_tag(tag)?;
        c.dest(dest)?;
        make_persistent(&mut cx, Persistent::Send { mode, buf: b, dest, tag, comm: c }, request)
    })
}

macro_rules! persistent_send {
    ($(#[$doc:meta])* $name:ident, $mode:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `buf` holds `count` elements of `datatype` whenever the request is
        /// started; `request` is writable.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: c_int,
            datatype: Handle,
            dest: c_int,
            tag: c_int,
            comm: Handle,
            request: *mut Handle,
        ) -> c_int {
            send_init(stringify!($name), $mode, buf, count, datatype, dest, tag, comm, request)
        }
    };
}

persistent_send!(
    /// `MPI_Send_init`.
    MPI_Send_init,
    Mode::Standard
);
persistent_send!(
    /// `MPI_Bsend_init`.
    MPI_Bsend_init,
    Mode::Buffered
);
persistent_send!(
    /// `MPI_Ssend_init`.
    MPI_Ssend_init,
    Mode::Synchronous
);
persistent_send!(
    /// `MPI_Rsend_init`.
    MPI_Rsend_init,
    Mode::Standard
);

/// `MPI_Recv_init`.
///
/// # Safety
/// `buf` is writable for `count` elements of `datatype` while the request is
/// active; `request` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Recv_init(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Recv_init", comm, |mut cx| {
        let c = cx.comms.get(comm)?;
        let b = Buf::new(buf, count, get(cx.obj, datatype)?)?;
        recv_tag(tag)?;
        c.source(source)?;
        make_persistent(&mut cx, Persistent::Recv { buf: b, source, tag, comm: c }, request)
    })
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
    call("MPI_Recv", comm, |cx| {
        let c = cx.comms.get(comm)?;
        let out = StatusOut::new(status)?;
        let b = Buf::new(buf, count, get(cx.obj, datatype)?)?;
        out.write(recv(cx.world, b, source, tag, &c)?);
        Ok(())
    })
}

/// A blocking receive into `out`, posted and waited for as one call
/// (`World::recv_in`: no request to keep).
fn recv(world: &mut World, out: Buf, source: c_int, tag: c_int, comm: &Comm) -> Result<MpiStatus, Fail> {
    let tag = recv_tag(tag)?;
    let got = match comm.source(source)? {
        Peer::Null => return Ok(MpiStatus::PROC_NULL),
        Peer::Any => world.recv_in(&comm.c, None, tag),
        Peer::Rank(r) => world.recv_in(&comm.c, Some(r), tag),
    };
    let m = got.map_err(|e| Fail::from(e).on(comm.handle))?;
    finish(Kind::Recv { out, comm: comm.c.clone() }, Some(Completed::Received(m))).map_err(|f| f.on(comm.handle))
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
    post("MPI_Irecv", comm, request, |cx, c| {
        let b = Buf::new(buf, count, get(cx.obj, datatype)?)?;
        start_recv(cx, b, source, tag, c)
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
        let sb = send_buf(&cx, sendbuf, sendcount, sendtype)?;
        send_tag(sendtag)?;
        c.dest(dest)?;
        let rb = Buf::new(recvbuf, recvcount, get(cx.obj, recvtype)?)?;
        let r = start_recv(&mut cx, rb, source, recvtag, &c)?;
        // SAFETY: as the caller vouched.
        let s = unsafe { start_send(&mut cx, Mode::Standard, &sb, dest, sendtag, &c)? };
        let st = r.wait(cx.world)?;
        s.wait(cx.world)?;
        out.write(st);
        Ok(())
    })
}

/// `MPI_Sendrecv_replace`: sends the buffer, then receives into it (the data
/// went out packed before the receive can write).
///
/// # Safety
/// `buf` is readable and writable for `count` elements of `datatype`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Sendrecv_replace(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> c_int {
    call("MPI_Sendrecv_replace", comm, |mut cx| {
        let c = cx.comms.get(comm)?;
        let out = StatusOut::new(status)?;
        let b = Buf::new(buf, count, get(cx.obj, datatype)?)?;
        send_tag(sendtag)?;
        c.dest(dest)?;
        // SAFETY: as the caller vouched; the data is packed before the receive is posted.
        let s = unsafe { start_send(&mut cx, Mode::Standard, &b, dest, sendtag, &c)? };
        let r = start_recv(&mut cx, b, source, recvtag, &c)?;
        let st = r.wait(cx.world)?;
        s.wait(cx.world)?;
        out.write(st);
        Ok(())
    })
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
