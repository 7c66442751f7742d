//! Non-blocking requests: the handle table and `MPI_Wait`, `MPI_Waitall`,
//! `MPI_Waitany`, `MPI_Test`, `MPI_Testall`.

use std::ffi::c_int;

use p2pmp_mpi::{Completed, Request, World};

use crate::buf::{OutBuf, write_out};
use crate::consts::{
    Handle, MPI_COMM_WORLD, MPI_ERR_ARG, MPI_ERR_IN_STATUS, MPI_ERR_REQUEST, MPI_REQUEST_NULL, MPI_UNDEFINED,
};
use crate::error::Fail;
use crate::state::call;
use crate::status::{MpiStatus, StatusOut};

/// What a request handle stands for: the engine request (none for
/// `MPI_PROC_NULL`, already complete) and what to do when it completes.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) req: Option<Request>,
    pub(crate) kind: Kind,
    /// The communicator whose error handler takes the request's failures.
    pub(crate) comm: Handle,
}

#[derive(Debug)]
pub(crate) enum Kind {
    Send,
    /// A receive into `out` on communicator `comm` (whose ranks its status names).
    Recv {
        out: OutBuf,
        comm: p2pmp_mpi::Comm,
    },
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
}

/// The status of a request of `kind` that completed as `c` (`None`: a
/// `MPI_PROC_NULL` request); copies a received message out.
pub(crate) fn finish(kind: Kind, c: Option<Completed>) -> Result<MpiStatus, Fail> {
    match (kind, c) {
        (Kind::Recv { out, comm }, Some(Completed::Received(m))) => {
            let source = comm.source_rank(m.status.source).map_or(crate::consts::MPI_ANY_SOURCE, |r| r as c_int);
            out.fill(&m.data)?;
            Ok(MpiStatus::received(&m.status, source))
        }
        (Kind::Recv { .. }, None) => Ok(MpiStatus::PROC_NULL),
        (Kind::Send, _) => Ok(MpiStatus::EMPTY),
        (Kind::Recv { .. }, Some(Completed::Sent)) => {
            Err(Fail::new(crate::consts::MPI_ERR_INTERN, "a receive completed as a send".into()))
        }
    }
}

/// Live requests; handle = slot index + 1 (0 is `MPI_REQUEST_NULL`).
#[derive(Debug, Default)]
pub(crate) struct Requests {
    slots: Vec<Option<Pending>>,
    free: Vec<usize>,
}

impl Requests {
    pub(crate) fn insert(&mut self, p: Pending) -> Result<Handle, Fail> {
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(p);
                i
            }
            None => {
                self.slots.push(Some(p));
                self.slots.len() - 1
            }
        };
        Handle::try_from(i + 1).map_err(|_| Fail::new(MPI_ERR_REQUEST, "too many requests".into()))
    }

    fn slot(h: Handle) -> Result<usize, Fail> {
        usize::try_from(h).ok().and_then(|h| h.checked_sub(1)).ok_or_else(|| bad(h))
    }

    pub(crate) fn get(&self, h: Handle) -> Result<&Pending, Fail> {
        self.slots.get(Self::slot(h)?).and_then(Option::as_ref).ok_or_else(|| bad(h))
    }

    pub(crate) fn take(&mut self, h: Handle) -> Result<Pending, Fail> {
        let i = Self::slot(h)?;
        let p = self.slots.get_mut(i).and_then(Option::take).ok_or_else(|| bad(h))?;
        self.free.push(i);
        Ok(p)
    }
}

fn bad(h: Handle) -> Fail {
    Fail::new(MPI_ERR_REQUEST, format!("{h} is not an active request"))
}

/// The handles of an array argument.
///
/// # Safety
/// `reqs` is valid for `count` handles.
unsafe fn handles<'a>(count: c_int, reqs: *mut Handle) -> Result<&'a mut [Handle], Fail> {
    let n = usize::try_from(count).map_err(|_| Fail::new(crate::consts::MPI_ERR_COUNT, format!("count {count}")))?;
    if n == 0 {
        return Ok(&mut []);
    }
    if reqs.is_null() {
        return Err(Fail::new(MPI_ERR_ARG, "null request array".into()));
    }
    // SAFETY: non-null; the caller vouches for `count` handles.
    Ok(unsafe { std::slice::from_raw_parts_mut(reqs, n) })
}

/// `MPI_Wait`.
///
/// # Safety
/// `request` is readable and writable; `status` is `MPI_STATUS_IGNORE` or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Wait(request: *mut Handle, status: *mut MpiStatus) -> c_int {
    call("MPI_Wait", MPI_COMM_WORLD, |cx| {
        let out = StatusOut::new(status)?;
        if request.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null request pointer".into()));
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { request.read() };
        if h == MPI_REQUEST_NULL {
            out.write(MpiStatus::EMPTY);
            return Ok(());
        }
        let p = cx.reqs.take(h)?;
        // SAFETY: non-null, the caller's handle.
        unsafe { request.write(MPI_REQUEST_NULL) };
        out.write(p.wait(cx.world)?);
        Ok(())
    })
}

/// `MPI_Waitall`: `MPI_ERR_IN_STATUS` when some request failed (its status says how).
///
/// # Safety
/// `requests` holds `count` handles; `statuses` is `MPI_STATUSES_IGNORE` or holds `count`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Waitall(count: c_int, requests: *mut Handle, statuses: *mut MpiStatus) -> c_int {
    call("MPI_Waitall", MPI_COMM_WORLD, |cx| {
        // SAFETY: the caller's array of `count` handles (null refused).
        let hs = unsafe { handles(count, requests)? };
        let outs = (0..hs.len()).map(|i| StatusOut::nth(statuses, i)).collect::<Result<Vec<_>, _>>()?;
        let taken = take_all(cx.reqs, hs)?;
        // Wait for all at once (progress on every request), then finish in order.
        let mut kinds = Vec::new();
        let mut live = Vec::new();
        for (i, p) in taken {
            let has_req = p.req.is_some();
            live.extend(p.req);
            kinds.push((i, p.kind, p.comm, has_req));
        }
        let mut done = cx.world.waitall(live)?.into_iter();
        let mut failed = None;
        for (i, kind, comm, has_req) in kinds {
            let c = if has_req { done.next() } else { None };
            let st = finish(kind, c).unwrap_or_else(|f| {
                failed = failed.or(Some(comm));
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

/// Takes every non-null handle of `hs` out of the table (after checking them all),
/// nulls it, and returns it with its index; null entries get an empty status.
fn take_all(reqs: &mut Requests, hs: &mut [Handle]) -> Result<Vec<(usize, Pending)>, Fail> {
    for &h in hs.iter().filter(|&&h| h != MPI_REQUEST_NULL) {
        reqs.get(h)?;
    }
    let mut taken = Vec::new();
    for (i, h) in hs.iter_mut().enumerate().filter(|(_, h)| **h != MPI_REQUEST_NULL) {
        taken.push((i, reqs.take(*h)?));
        *h = MPI_REQUEST_NULL;
    }
    Ok(taken)
}

/// `MPI_Waitany`: `*index` = `MPI_UNDEFINED` when every request is null.
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
    call("MPI_Waitany", MPI_COMM_WORLD, |cx| {
        // SAFETY: the caller's array of `count` handles (null refused).
        let hs = unsafe { handles(count, requests)? };
        let out = StatusOut::new(status)?;
        if index.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null index".into()));
        }
        let mut live: Vec<(usize, &Pending)> = Vec::new();
        for (i, &h) in hs.iter().enumerate().filter(|(_, h)| **h != MPI_REQUEST_NULL) {
            live.push((i, cx.reqs.get(h)?));
        }
        // A MPI_PROC_NULL request is complete already.
        let i = match live.iter().find(|(_, p)| p.req.is_none()) {
            Some(&(i, _)) => Some(i),
            None => {
                let rs: Vec<&Request> = live.iter().filter_map(|(_, p)| p.req.as_ref()).collect();
                cx.world.wait_any(&rs)?.map(|k| live[k].0)
            }
        };
        let Some(i) = i else {
            out.write(MpiStatus::EMPTY);
            // SAFETY: non-null (checked), the caller's int.
            return unsafe { write_out(index, MPI_UNDEFINED) };
        };
        let p = cx.reqs.take(hs[i])?;
        hs[i] = MPI_REQUEST_NULL;
        // SAFETY: non-null (checked), the caller's int.
        unsafe { write_out(index, i as c_int)? };
        out.write(p.wait(cx.world)?);
        Ok(())
    })
}

/// `MPI_Test`: `*flag` = 1 and the request finished when it completed.
///
/// # Safety
/// `request` and `flag` are writable; `status` is `MPI_STATUS_IGNORE` or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Test(request: *mut Handle, flag: *mut c_int, status: *mut MpiStatus) -> c_int {
    call("MPI_Test", MPI_COMM_WORLD, |cx| {
        let out = StatusOut::new(status)?;
        if request.is_null() || flag.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null request or flag".into()));
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { request.read() };
        let done = h == MPI_REQUEST_NULL || is_done(cx.world, cx.reqs.get(h)?)?;
        // SAFETY: non-null (checked), the caller's int.
        unsafe { flag.write(c_int::from(done)) };
        if h == MPI_REQUEST_NULL {
            out.write(MpiStatus::EMPTY);
        } else if done {
            let p = cx.reqs.take(h)?;
            // SAFETY: non-null, the caller's handle.
            unsafe { request.write(MPI_REQUEST_NULL) };
            out.write(p.wait(cx.world)?);
        }
        Ok(())
    })
}

fn is_done(w: &mut World, p: &Pending) -> Result<bool, Fail> {
    match &p.req {
        Some(r) => w.test(r).map_err(|e| Fail::from(e).on(p.comm)),
        None => Ok(true),
    }
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
    let rc = call("MPI_Testall", MPI_COMM_WORLD, |cx| {
        if flag.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null flag".into()));
        }
        // SAFETY: the caller's array of `count` handles (null refused).
        let hs = unsafe { handles(count, requests)? };
        let mut all = true;
        for &h in hs.iter().filter(|&&h| h != MPI_REQUEST_NULL) {
            all &= is_done(cx.world, cx.reqs.get(h)?)?;
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
