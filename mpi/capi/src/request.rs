//! Requests: the handle table, persistent requests (`MPI_Send_init` & co.,
//! `MPI_Start`, `MPI_Startall`), `MPI_Request_free`, `MPI_Cancel`,
//! `MPI_Test_cancelled`, and the completion calls (`MPI_Wait`, `_Waitall`,
//! `_Waitany`, `_Waitsome`, `MPI_Test`, `_Testall`, `_Testany`, `_Testsome`).
//!
//! A request is active (an engine request in flight, or none for
//! `MPI_PROC_NULL` and buffered sends, which are complete at once) or, for a
//! persistent one, inactive until started again. Completing a non-persistent
//! request frees its handle; a persistent one stays, inactive.

use std::ffi::c_int;

use p2pmp_mpi::{Completed, Request, World};

use crate::buf::write_out;
use crate::comm::Comm;
use crate::consts::{
    Handle, MPI_ERR_ARG, MPI_ERR_COUNT, MPI_ERR_IN_STATUS, MPI_ERR_REQUEST, MPI_REQUEST_NULL, MPI_UNDEFINED,
};
use crate::error::Fail;
use crate::handles::Table;
use crate::p2p::{Mode, start_recv, start_send};
use crate::state::{Ctx, call};
use crate::status::{MpiStatus, StatusOut};
use crate::types::Buf;

/// What completing a request means.
#[derive(Debug)]
pub(crate) enum Kind {
    Send,
    /// A buffered send, complete at once; the attached buffer's pool tracks
    /// the message by `ticket` (a cancel takes it back from there).
    Bsend {
        ticket: u64,
    },
    /// A receive into `out` on communicator `comm` (whose ranks its status names).
    Recv {
        out: Buf,
        comm: std::rc::Rc<p2pmp_mpi::Comm>,
    },
}

/// The arguments a persistent request starts with each time.
#[derive(Debug, Clone)]
pub(crate) enum Persistent {
    Send { mode: Mode, buf: Buf, dest: c_int, tag: c_int, comm: Comm },
    Recv { buf: Buf, source: c_int, tag: c_int, comm: Comm },
}

/// A request handle's state.
#[derive(Debug)]
pub(crate) struct Pending {
    /// `None` once complete (or for `MPI_PROC_NULL`, buffered sends).
    pub(crate) req: Option<Request>,
    pub(crate) kind: Kind,
    /// The communicator whose error handler takes the request's failures.
    pub(crate) comm: Handle,
}

#[derive(Debug)]
pub(crate) struct Slot {
    /// `None`: an inactive persistent request.
    active: Option<Pending>,
    persistent: Option<Persistent>,
}

impl Pending {
    /// Waits for the request, copies a received message out, builds the status;
    /// a failure is raised on the request's communicator.
    pub(crate) fn wait(self, w: &mut World) -> Result<MpiStatus, Fail> {
        let c = match self.req {
            Some(r) => Some(w.wait(r).map_err(|e| Fail::from(e).on(self.comm))?),
            None => None,
        };
        finish(self.kind, c).map_err(|f| f.on(self.comm))
    }

    fn is_done(&self, w: &mut World) -> Result<bool, Fail> {
        match &self.req {
            Some(r) => w.test(r).map_err(|e| Fail::from(e).on(self.comm)),
            None => Ok(true),
        }
    }
}

/// The status of a request of `kind` that completed as `c` (`None`: nothing
/// moved, `MPI_PROC_NULL`); copies a received message out.
pub(crate) fn finish(kind: Kind, c: Option<Completed>) -> Result<MpiStatus, Fail> {
    match (kind, c) {
        (Kind::Recv { out, comm }, Some(Completed::Received(m))) => {
            let source = comm.source_rank(m.status.source).map_or(crate::consts::MPI_ANY_SOURCE, |r| r as c_int);
            let st = MpiStatus::received(&m.status, source);
            // SAFETY: the receive buffer the caller vouched for until completion, which is now.
            match unsafe { out.unpack(&m.data) } {
                Ok(()) => Ok(st),
                Err(f) => Err(f),
            }
        }
        (_, Some(Completed::Cancelled)) => Ok(MpiStatus { cancelled: 1, ..MpiStatus::EMPTY }),
        (Kind::Recv { .. }, None) => Ok(MpiStatus::PROC_NULL),
        (Kind::Send | Kind::Bsend { .. }, _) => Ok(MpiStatus::EMPTY),
        (Kind::Recv { .. }, Some(Completed::Sent)) => {
            Err(Fail::new(crate::consts::MPI_ERR_INTERN, "a receive completed as a send".into()))
        }
    }
}

/// Live requests by handle.
#[derive(Debug)]
pub(crate) struct Requests {
    table: Table<Slot>,
}

impl Default for Requests {
    fn default() -> Self {
        Requests { table: Table::new(MPI_REQUEST_NULL + 1, MPI_ERR_REQUEST, "request") }
    }
}

impl Requests {
    /// A new active request.
    pub(crate) fn insert(&mut self, p: Pending) -> Result<Handle, Fail> {
        self.table.insert(Slot { active: Some(p), persistent: None })
    }

    /// A new inactive persistent request.
    fn insert_persistent(&mut self, p: Persistent) -> Result<Handle, Fail> {
        self.table.insert(Slot { active: None, persistent: Some(p) })
    }

    fn slot(&self, h: Handle) -> Result<&Slot, Fail> {
        self.table.get(h)
    }

    /// The active part of request `h` (`None`: inactive persistent).
    fn active(&self, h: Handle) -> Result<Option<&Pending>, Fail> {
        Ok(self.slot(h)?.active.as_ref())
    }

    /// Takes a completed (or about to be waited for) request's active part: a
    /// non-persistent handle is freed (`*handle` set to null), a persistent
    /// one turns inactive.
    fn take(&mut self, handle: &mut Handle) -> Result<Option<Pending>, Fail> {
        let h = *handle;
        let slot = self.table.get_mut(h)?;
        let p = slot.active.take();
        if slot.persistent.is_none() {
            self.table.remove(h)?;
            *handle = MPI_REQUEST_NULL;
        }
        Ok(p)
    }
}

/// Stores a new persistent request in `*request`.
pub(crate) fn make_persistent(cx: &mut Ctx<'_>, p: Persistent, request: *mut Handle) -> Result<(), Fail> {
    let h = cx.reqs.insert_persistent(p)?;
    // SAFETY: the caller's handle, or null (refused).
    unsafe { write_out(request, h) }
}

/// The handles of an array argument.
///
/// # Safety
/// `reqs` is valid for `count` handles.
unsafe fn handles<'a>(count: c_int, reqs: *mut Handle) -> Result<&'a mut [Handle], Fail> {
    let n = usize::try_from(count).map_err(|_| Fail::new(MPI_ERR_COUNT, format!("count {count}")))?;
    if n == 0 {
        return Ok(&mut []);
    }
    if reqs.is_null() {
        return Err(Fail::new(MPI_ERR_ARG, "null request array".into()));
    }
    // SAFETY: non-null; the caller vouches for `count` handles.
    Ok(unsafe { std::slice::from_raw_parts_mut(reqs, n) })
}

/// Finishes request `*h` (which completed, or is waited for now): its status.
fn complete(cx: &mut Ctx<'_>, h: &mut Handle) -> Result<MpiStatus, Fail> {
    match cx.reqs.take(h)? {
        Some(p) => p.wait(cx.world),
        None => Ok(MpiStatus::EMPTY),
    }
}

/// `MPI_Wait` (a null or inactive request: an empty status at once).
///
/// # Safety
/// `request` is readable and writable; `status` is `MPI_STATUS_IGNORE` or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Wait(request: *mut Handle, status: *mut MpiStatus) -> c_int {
    call("MPI_Wait", crate::consts::MPI_COMM_WORLD, |mut cx| {
        let out = StatusOut::new(status)?;
        if request.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null request pointer".into()));
        }
        // SAFETY: non-null, the caller's handle.
        let mut h = unsafe { request.read() };
        let st = if h == MPI_REQUEST_NULL { Ok(MpiStatus::EMPTY) } else { complete(&mut cx, &mut h) };
        // SAFETY: non-null, the caller's handle.
        unsafe { request.write(h) };
        out.write(st?);
        Ok(())
    })
}

/// `MPI_Waitall`: `MPI_ERR_IN_STATUS` when some request failed (its status says how).
///
/// # Safety
/// `requests` holds `count` handles; `statuses` is `MPI_STATUSES_IGNORE` or holds `count`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Waitall(count: c_int, requests: *mut Handle, statuses: *mut MpiStatus) -> c_int {
    call("MPI_Waitall", crate::consts::MPI_COMM_WORLD, |mut cx| {
        // SAFETY: the caller's array of `count` handles (null refused).
        let hs = unsafe { handles(count, requests)? };
        let outs = (0..hs.len()).map(|i| StatusOut::nth(statuses, i)).collect::<Result<Vec<_>, _>>()?;
        for &h in hs.iter().filter(|&&h| h != MPI_REQUEST_NULL) {
            cx.reqs.slot(h)?;
        }
        // Progress on every request until all are done, then finish in order.
        let refs = live(cx.reqs, hs)?;
        cx.world.wait_all_done(&refs)?;
        let mut failed = None;
        for (i, h) in hs.iter_mut().enumerate() {
            let st = if *h == MPI_REQUEST_NULL { Ok(MpiStatus::EMPTY) } else { complete(&mut cx, h) };
            let st = st.unwrap_or_else(|f| {
                failed = failed.or(f.comm.or(Some(crate::consts::MPI_COMM_WORLD)));
                MpiStatus { error: f.class, ..MpiStatus::EMPTY }
            });
            outs[i].write(st);
        }
        if let Some(comm) = failed {
            return Err(Fail::new(MPI_ERR_IN_STATUS, "a request failed (see its status)".into()).on(comm));
        }
        Ok(())
    })
}

/// The engine requests in flight among `hs`.
fn live<'a>(reqs: &'a Requests, hs: &[Handle]) -> Result<Vec<&'a Request>, Fail> {
    let mut out = Vec::new();
    for &h in hs.iter().filter(|&&h| h != MPI_REQUEST_NULL) {
        if let Some(Pending { req: Some(r), .. }) = reqs.active(h)? {
            out.push(r);
        }
    }
    Ok(out)
}

/// The index of a completed request among `hs` (active ones only), testing
/// without waiting; `None` when none is; `Some(None)` when none is active.
fn find_done(cx: &mut Ctx<'_>, hs: &[Handle]) -> Result<Option<Option<usize>>, Fail> {
    let mut any = false;
    for (i, &h) in hs.iter().enumerate() {
        if h == MPI_REQUEST_NULL {
            continue;
        }
        if let Some(p) = cx.reqs.active(h)? {
            any = true;
            if p.is_done(cx.world)? {
                return Ok(Some(Some(i)));
            }
        }
    }
    Ok(if any { None } else { Some(None) })
}

/// `MPI_Waitany`: `*index` = `MPI_UNDEFINED` when no request is active.
///
/// # Safety
/// `requests` holds `count` handles; `index` is writable; `status` is
/// `MPI_STATUS_IGNORE` or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Waitany(
    count: c_int,
    requests: *mut Handle,
    index: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    call("MPI_Waitany", crate::consts::MPI_COMM_WORLD, |mut cx| {
        // SAFETY: the caller's array of `count` handles (null refused).
        let hs = unsafe { handles(count, requests)? };
        let out = StatusOut::new(status)?;
        if index.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null index".into()));
        }
        let found = loop {
            if let Some(found) = find_done(&mut cx, hs)? {
                break found;
            }
            let refs = live(cx.reqs, hs)?;
            cx.world.wait_any(&refs)?;
        };
        let Some(i) = found else {
            out.write(MpiStatus::EMPTY);
            // SAFETY: non-null (checked), the caller's int.
            return unsafe { write_out(index, MPI_UNDEFINED) };
        };
        // SAFETY: non-null (checked), the caller's int.
        unsafe { write_out(index, i as c_int)? };
        out.write(complete(&mut cx, &mut hs[i])?);
        Ok(())
    })
}

/// `MPI_Testany`: `*flag` true with `*index` the request that completed, or
/// with `MPI_UNDEFINED` when none is active.
///
/// # Safety
/// As `MPI_Waitany`; `flag` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Testany(
    count: c_int,
    requests: *mut Handle,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    call("MPI_Testany", crate::consts::MPI_COMM_WORLD, |mut cx| {
        // SAFETY: the caller's array of `count` handles (null refused).
        let hs = unsafe { handles(count, requests)? };
        let out = StatusOut::new(status)?;
        if index.is_null() || flag.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null index or flag".into()));
        }
        let found = find_done(&mut cx, hs)?;
        // SAFETY: non-null (checked), the caller's ints.
        unsafe {
            flag.write(c_int::from(found.is_some()));
            index.write(MPI_UNDEFINED);
        }
        match found {
            Some(Some(i)) => {
                // SAFETY: as above.
                unsafe { index.write(i as c_int) };
                out.write(complete(&mut cx, &mut hs[i])?);
            }
            Some(None) => out.write(MpiStatus::EMPTY),
            None => {}
        }
        Ok(())
    })
}

/// Completes every completed request of `hs`, writing indices and statuses;
/// the number done, or `MPI_UNDEFINED` when none is active.
///
/// # Safety
/// `indices` holds `hs.len()` ints; `statuses` as `MPI_Waitsome` says.
unsafe fn some(
    cx: &mut Ctx<'_>,
    hs: &mut [Handle],
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> Result<c_int, Fail> {
    let mut n = 0;
    let mut any = false;
    for (i, h) in hs.iter_mut().enumerate() {
        if *h == MPI_REQUEST_NULL {
            continue;
        }
        let Some(p) = cx.reqs.active(*h)? else { continue };
        any = true;
        if p.is_done(cx.world)? {
            let st = complete(cx, h)?;
            // SAFETY: the caller's arrays hold an entry per request; n <= i.
            unsafe { indices.add(n).write(i as c_int) };
            StatusOut::nth(statuses, n)?.write(st);
            n += 1;
        }
    }
    Ok(if any { n as c_int } else { MPI_UNDEFINED })
}

/// `MPI_Waitsome`: waits until at least one active request completed.
///
/// # Safety
/// `requests` and `indices` hold `incount` entries; `outcount` is writable;
/// `statuses` is `MPI_STATUSES_IGNORE` or holds `incount`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Waitsome(
    incount: c_int,
    requests: *mut Handle,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    call("MPI_Waitsome", crate::consts::MPI_COMM_WORLD, |mut cx| {
        // SAFETY: the caller's array of `incount` handles (null refused).
        let hs = unsafe { handles(incount, requests)? };
        if outcount.is_null() || (indices.is_null() && !hs.is_empty()) {
            return Err(Fail::new(MPI_ERR_ARG, "null outcount or indices".into()));
        }
        loop {
            // SAFETY: as the caller vouched.
            let n = unsafe { some(&mut cx, hs, indices, statuses)? };
            if n != 0 {
                // SAFETY: non-null (checked), the caller's int.
                return unsafe { write_out(outcount, n) };
            }
            let refs = live(cx.reqs, hs)?;
            cx.world.wait_any(&refs)?;
        }
    })
}

/// `MPI_Testsome`.
///
/// # Safety
/// As `MPI_Waitsome`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Testsome(
    incount: c_int,
    requests: *mut Handle,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    call("MPI_Testsome", crate::consts::MPI_COMM_WORLD, |mut cx| {
        // SAFETY: the caller's array of `incount` handles (null refused).
        let hs = unsafe { handles(incount, requests)? };
        if outcount.is_null() || (indices.is_null() && !hs.is_empty()) {
            return Err(Fail::new(MPI_ERR_ARG, "null outcount or indices".into()));
        }
        // SAFETY: as the caller vouched.
        let n = unsafe { some(&mut cx, hs, indices, statuses)? };
        // SAFETY: non-null (checked), the caller's int.
        unsafe { write_out(outcount, n) }
    })
}

/// `MPI_Test`: `*flag` = 1 and the request finished when it completed.
///
/// # Safety
/// `request` and `flag` are writable; `status` is `MPI_STATUS_IGNORE` or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Test(request: *mut Handle, flag: *mut c_int, status: *mut MpiStatus) -> c_int {
    call("MPI_Test", crate::consts::MPI_COMM_WORLD, |mut cx| {
        let out = StatusOut::new(status)?;
        if request.is_null() || flag.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null request or flag".into()));
        }
        // SAFETY: non-null, the caller's handle.
        let mut h = unsafe { request.read() };
        let done = h == MPI_REQUEST_NULL || cx.reqs.active(h)?.map_or(Ok(true), |p| p.is_done(cx.world))?;
        // SAFETY: non-null (checked), the caller's int.
        unsafe { flag.write(c_int::from(done)) };
        if h == MPI_REQUEST_NULL {
            out.write(MpiStatus::EMPTY);
        } else if done {
            let st = complete(&mut cx, &mut h);
            // SAFETY: non-null, the caller's handle.
            unsafe { request.write(h) };
            out.write(st?);
        }
        Ok(())
    })
}

/// `MPI_Testall`: finishes every request only when all have completed.
///
/// # Safety
/// `requests` holds `count` handles; `flag` is writable; `statuses` is
/// `MPI_STATUSES_IGNORE` or holds `count`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Testall(
    count: c_int,
    requests: *mut Handle,
    flag: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    let rc = call("MPI_Testall", crate::consts::MPI_COMM_WORLD, |cx| {
        if flag.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null flag".into()));
        }
        // SAFETY: the caller's array of `count` handles (null refused).
        let hs = unsafe { handles(count, requests)? };
        let mut all = true;
        for &h in hs.iter().filter(|&&h| h != MPI_REQUEST_NULL) {
            if let Some(p) = cx.reqs.active(h)? {
                all &= p.is_done(cx.world)?;
            }
        }
        // SAFETY: non-null (checked), the caller's int.
        unsafe { flag.write(c_int::from(all)) };
        Ok(())
    });
    // SAFETY: `flag` was written (or the call failed, and it is not read).
    if rc != crate::consts::MPI_SUCCESS || unsafe { flag.read() } == 0 {
        return rc;
    }
    // Every request completed: finishing them cannot block.
    // SAFETY: as the caller vouched above.
    unsafe { MPI_Waitall(count, requests, statuses) }
}

/// `MPI_Request_free`: an active request goes on (a send still delivers) and
/// is forgotten; `*request` becomes `MPI_REQUEST_NULL`.
///
/// # Safety
/// `request` is readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Request_free(request: *mut Handle) -> c_int {
    call("MPI_Request_free", crate::consts::MPI_COMM_WORLD, |cx| {
        if request.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null request pointer".into()));
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { request.read() };
        let slot = cx.reqs.table.remove(h)?;
        if let Some(Pending { req: Some(r), .. }) = slot.active {
            cx.world.forget(r);
        }
        // SAFETY: non-null, the caller's handle.
        unsafe { request.write(MPI_REQUEST_NULL) };
        Ok(())
    })
}

/// `MPI_Cancel`: a receive not yet matched completes as cancelled; a send
/// (already on its way) completes normally.
///
/// # Safety
/// `request` is readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Cancel(request: *mut Handle) -> c_int {
    call("MPI_Cancel", crate::consts::MPI_COMM_WORLD, |cx| {
        if request.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null request pointer".into()));
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { request.read() };
        if let Some(p) = cx.reqs.table.get_mut(h)?.active.as_mut() {
            if let (None, Kind::Bsend { ticket }) = (&p.req, &p.kind) {
                // The buffered message goes back to its request, to be taken back.
                p.req = cx.bsend.take(*ticket);
            }
            if let Some(r) = &p.req {
                cx.world.cancel(r)?;
            }
        }
        Ok(())
    })
}

/// `MPI_Test_cancelled`.
///
/// # Safety
/// `status` points to a status; `flag` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Test_cancelled(status: *const MpiStatus, flag: *mut c_int) -> c_int {
    crate::state::entry("MPI_Test_cancelled", crate::consts::MPI_COMM_WORLD, |_| {
        if status.is_null() || status as usize == crate::consts::STATUS_IGNORE_ADDR {
            return Err(Fail::new(MPI_ERR_ARG, "status is null or MPI_STATUS_IGNORE".into()));
        }
        // SAFETY: a status from C (checked non-null).
        let c = unsafe { &*status }.cancelled;
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(flag, c_int::from(c != 0)) }
    })
}

/// Starts persistent request `h` (it must be inactive).
fn start(cx: &mut Ctx<'_>, h: Handle) -> Result<(), Fail> {
    let slot = cx.reqs.slot(h)?;
    let p =
        slot.persistent.clone().ok_or_else(|| Fail::new(MPI_ERR_REQUEST, format!("request {h} is not persistent")))?;
    if slot.active.is_some() {
        return Err(Fail::new(MPI_ERR_REQUEST, format!("request {h} is already active")));
    }
    let pending = match p {
        // SAFETY: the buffers the caller vouched for when making the request.
        Persistent::Send { mode, buf, dest, tag, comm } => unsafe { start_send(cx, mode, &buf, dest, tag, &comm)? },
        Persistent::Recv { buf, source, tag, comm } => start_recv(cx, buf, source, tag, &comm)?,
    };
    cx.reqs.table.get_mut(h)?.active = Some(pending);
    Ok(())
}

/// `MPI_Start`.
///
/// # Safety
/// `request` is readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Start(request: *mut Handle) -> c_int {
    call("MPI_Start", crate::consts::MPI_COMM_WORLD, |mut cx| {
        if request.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null request pointer".into()));
        }
        // SAFETY: non-null, the caller's handle.
        start(&mut cx, unsafe { request.read() })
    })
}

/// `MPI_Startall`.
///
/// # Safety
/// `requests` holds `count` handles.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Startall(count: c_int, requests: *mut Handle) -> c_int {
    call("MPI_Startall", crate::consts::MPI_COMM_WORLD, |mut cx| {
        // SAFETY: the caller's array of `count` handles (null refused).
        let hs = unsafe { handles(count, requests)? };
        for &h in hs.iter() {
            start(&mut cx, h)?;
        }
        Ok(())
    })
}
