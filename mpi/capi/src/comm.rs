//! Communicators: `MPI_COMM_WORLD`, `MPI_COMM_SELF` and their duplicates, each
//! with its own engine ids (so traffic on one never matches another) and error
//! handler; rank translation between a communicator and the world.

use std::collections::BTreeMap;
use std::ffi::c_int;

use p2pmp_mpi::{CommId, World};

use crate::consts::{
    Handle, MPI_ANY_SOURCE, MPI_COMM_NULL, MPI_COMM_SELF, MPI_COMM_WORLD, MPI_ERR_ARG, MPI_ERR_COMM, MPI_ERR_INTERN,
    MPI_ERR_RANK, MPI_ERR_ROOT, MPI_ERRORS_ARE_FATAL, MPI_ERRORS_RETURN, MPI_PROC_NULL,
};
use crate::error::Fail;
use crate::state::{call, entry};

/// The engine communicator numbers of `MPI_COMM_SELF` and its duplicates start
/// here; the world and its duplicates count up from 0. Self traffic never leaves
/// the process, so only world duplicates need numbers every rank agrees on.
const SOLO_BASE: u32 = 1 << 29;

/// One communicator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Comm {
    pub(crate) handle: Handle,
    pub(crate) id: CommId,
    /// Only this process (`MPI_COMM_SELF` and its duplicates); otherwise every rank of the world.
    pub(crate) solo: bool,
    errhandler: Handle,
}

/// Where a point-to-point call goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peer {
    /// `MPI_PROC_NULL`: the call completes at once and moves nothing.
    Null,
    /// `MPI_ANY_SOURCE` (receives and probes only).
    Any,
    /// A world rank.
    Rank(u32),
}

impl Comm {
    pub(crate) fn size(&self, w: &World) -> u32 {
        if self.solo { 1 } else { w.size() }
    }

    pub(crate) fn rank(&self, w: &World) -> u32 {
        if self.solo { 0 } else { w.rank() }
    }

    /// The world rank of communicator rank `r`; `MPI_ERR_RANK` outside it.
    pub(crate) fn world_rank(&self, w: &World, r: c_int) -> Result<u32, Fail> {
        match u32::try_from(r) {
            Ok(r) if r < self.size(w) => Ok(if self.solo { w.rank() } else { r }),
            _ => Err(Fail::new(MPI_ERR_RANK, format!("rank {r} is not in a communicator of {}", self.size(w)))),
        }
    }

    /// A destination: a rank or `MPI_PROC_NULL`.
    pub(crate) fn dest(&self, w: &World, r: c_int) -> Result<Peer, Fail> {
        if r == MPI_PROC_NULL { Ok(Peer::Null) } else { self.world_rank(w, r).map(Peer::Rank) }
    }

    /// A source: a rank, `MPI_ANY_SOURCE` or `MPI_PROC_NULL`.
    pub(crate) fn source(&self, w: &World, r: c_int) -> Result<Peer, Fail> {
        if r == MPI_ANY_SOURCE { Ok(Peer::Any) } else { self.dest(w, r) }
    }

    /// The communicator rank of world rank `r` (a status's source).
    pub(crate) fn comm_rank_of(&self, r: u32) -> c_int {
        if self.solo { 0 } else { r as c_int }
    }

    /// The world rank of root `r`; `MPI_ERR_ROOT` outside the communicator.
    pub(crate) fn root(&self, w: &World, r: c_int) -> Result<u32, Fail> {
        self.world_rank(w, r).map_err(|f| Fail::new(MPI_ERR_ROOT, f.detail))
    }
}

/// Every live communicator by handle.
#[derive(Debug)]
pub(crate) struct Comms {
    world_errhandler: Handle,
    self_errhandler: Handle,
    dups: BTreeMap<Handle, Comm>,
    next_handle: Handle,
    world_dups: u32,
    solo_dups: u32,
}

impl Comms {
    pub(crate) const fn new() -> Comms {
        Comms {
            world_errhandler: MPI_ERRORS_ARE_FATAL,
            self_errhandler: MPI_ERRORS_ARE_FATAL,
            dups: BTreeMap::new(),
            next_handle: MPI_COMM_SELF + 1,
            world_dups: 0,
            solo_dups: 0,
        }
    }

    pub(crate) fn get(&self, h: Handle) -> Result<Comm, Fail> {
        match h {
            MPI_COMM_WORLD => Ok(Comm { handle: h, id: CommId::WORLD, solo: false, errhandler: self.world_errhandler }),
            MPI_COMM_SELF => Ok(Comm { handle: h, id: solo_id(0)?, solo: true, errhandler: self.self_errhandler }),
            _ => self.dups.get(&h).copied().ok_or_else(|| {
                let what = if h == MPI_COMM_NULL { "MPI_COMM_NULL".into() } else { format!("handle {h}") };
                Fail::new(MPI_ERR_COMM, format!("{what} is not a communicator"))
            }),
        }
    }

    /// The error handler of `h`, or the world's when `h` is no communicator.
    pub(crate) fn errhandler(&self, h: Handle) -> Handle {
        self.get(h).map_or(self.world_errhandler, |c| c.errhandler)
    }

    fn set_errhandler(&mut self, h: Handle, e: Handle) -> Result<(), Fail> {
        if e != MPI_ERRORS_ARE_FATAL && e != MPI_ERRORS_RETURN {
            return Err(Fail::new(MPI_ERR_ARG, format!("{e} is not an error handler")));
        }
        match h {
            MPI_COMM_WORLD => self.world_errhandler = e,
            MPI_COMM_SELF => self.self_errhandler = e,
            _ => {
                self.get(h)?;
                if let Some(c) = self.dups.get_mut(&h) {
                    c.errhandler = e;
                }
            }
        }
        Ok(())
    }

    /// A new communicator over the same processes as `h`, with its error handler.
    fn dup(&mut self, h: Handle) -> Result<Handle, Fail> {
        let parent = self.get(h)?;
        let id = if parent.solo {
            self.solo_dups += 1;
            solo_id(self.solo_dups)?
        } else {
            // Every rank duplicates world communicators in the same order (it is a
            // collective call), so the count is the same everywhere.
            self.world_dups += 1;
            CommId::nth(self.world_dups)
                .filter(|_| self.world_dups < SOLO_BASE)
                .ok_or_else(|| Fail::new(MPI_ERR_INTERN, "out of communicator ids".into()))?
        };
        let handle = self.next_handle;
        self.next_handle = handle.checked_add(1).ok_or_else(|| Fail::new(MPI_ERR_INTERN, "out of handles".into()))?;
        self.dups.insert(handle, Comm { handle, id, ..parent });
        Ok(handle)
    }

    fn free(&mut self, h: Handle) -> Result<(), Fail> {
        if h == MPI_COMM_WORLD || h == MPI_COMM_SELF {
            return Err(Fail::new(MPI_ERR_COMM, "MPI_COMM_WORLD and MPI_COMM_SELF cannot be freed".into()));
        }
        self.get(h)?;
        self.dups.remove(&h);
        Ok(())
    }
}

fn solo_id(n: u32) -> Result<CommId, Fail> {
    n.checked_add(SOLO_BASE)
        .and_then(CommId::nth)
        .ok_or_else(|| Fail::new(MPI_ERR_INTERN, "out of communicator ids".into()))
}

/// `MPI_Comm_rank`.
///
/// # Safety
/// `rank` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_rank(comm: Handle, rank: *mut c_int) -> c_int {
    call("MPI_Comm_rank", comm, |cx| {
        let r = cx.comms.get(comm)?.rank(cx.world);
        // SAFETY: the caller's int, or null (refused).
        unsafe { crate::buf::write_out(rank, r as c_int) }
    })
}

/// `MPI_Comm_size`.
///
/// # Safety
/// `size` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_size(comm: Handle, size: *mut c_int) -> c_int {
    call("MPI_Comm_size", comm, |cx| {
        let s = cx.comms.get(comm)?.size(cx.world);
        // SAFETY: the caller's int, or null (refused).
        unsafe { crate::buf::write_out(size, s as c_int) }
    })
}

/// `MPI_Comm_dup`: collective over `comm`'s processes.
///
/// # Safety
/// `newcomm` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_dup(comm: Handle, newcomm: *mut Handle) -> c_int {
    call("MPI_Comm_dup", comm, |cx| {
        if newcomm.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "newcomm is null".into()));
        }
        let h = cx.comms.dup(comm)?;
        // SAFETY: the caller's handle, non-null (checked).
        unsafe { crate::buf::write_out(newcomm, h) }
    })
}

/// `MPI_Comm_free`: sets `*comm` to `MPI_COMM_NULL`.
///
/// # Safety
/// `comm` is readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_free(comm: *mut Handle) -> c_int {
    // SAFETY: the caller's handle, or null (read as MPI_COMM_NULL, refused below).
    let h = if comm.is_null() { MPI_COMM_NULL } else { unsafe { comm.read() } };
    call("MPI_Comm_free", h, |cx| {
        cx.comms.free(h)?;
        // SAFETY: non-null: `free` refused MPI_COMM_NULL.
        unsafe { crate::buf::write_out(comm, MPI_COMM_NULL) }
    })
}

/// `MPI_Comm_set_errhandler` (also allowed before `MPI_Init`, so calls made too
/// early can return their error).
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Comm_set_errhandler(comm: Handle, errhandler: Handle) -> c_int {
    entry("MPI_Comm_set_errhandler", comm, |mpi| mpi.comms.set_errhandler(comm, errhandler))
}

/// `MPI_Errhandler_set`: the MPI-1 name of [`MPI_Comm_set_errhandler`].
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Errhandler_set(comm: Handle, errhandler: Handle) -> c_int {
    MPI_Comm_set_errhandler(comm, errhandler)
}

/// `MPI_Comm_get_errhandler`.
///
/// # Safety
/// `errhandler` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_get_errhandler(comm: Handle, errhandler: *mut Handle) -> c_int {
    entry("MPI_Comm_get_errhandler", comm, |mpi| {
        let e = mpi.comms.get(comm)?.errhandler;
        // SAFETY: the caller's handle, or null (refused).
        unsafe { crate::buf::write_out(errhandler, e) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_get_fresh_ids_and_inherit_the_error_handler() {
        let mut c = Comms::new();
        c.set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN).unwrap();
        let a = c.dup(MPI_COMM_WORLD).unwrap();
        let b = c.dup(a).unwrap();
        let s = c.dup(MPI_COMM_SELF).unwrap();
        let ids: Vec<CommId> = [MPI_COMM_WORLD, MPI_COMM_SELF, a, b, s].iter().map(|&h| c.get(h).unwrap().id).collect();
        for (i, x) in ids.iter().enumerate() {
            assert!(!ids[i + 1..].contains(x), "{ids:?}");
        }
        assert_eq!(c.errhandler(b), MPI_ERRORS_RETURN);
        assert_eq!(c.errhandler(s), MPI_ERRORS_ARE_FATAL);
        assert!(c.get(s).unwrap().solo && !c.get(b).unwrap().solo);
        c.free(a).unwrap();
        assert_eq!(c.get(a).unwrap_err().class, MPI_ERR_COMM);
        assert_eq!(c.free(a).unwrap_err().class, MPI_ERR_COMM);
        assert_eq!(c.free(MPI_COMM_WORLD).unwrap_err().class, MPI_ERR_COMM);
        assert_eq!(c.set_errhandler(b, 7).unwrap_err().class, MPI_ERR_ARG);
        // An unknown communicator's failure goes to the world's handler.
        assert_eq!(c.errhandler(12345), MPI_ERRORS_RETURN);
    }
}
