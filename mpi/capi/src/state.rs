//! The library's state (one per process, behind a lock) and the entry helpers
//! every C function goes through: they check the library is running, run the
//! call, and hand a failure to the error handler of the call's communicator.

use std::ffi::c_int;
use std::sync::{Mutex, MutexGuard};

use p2pmp_mpi::World;

use crate::comm::Comms;
use crate::consts::{Handle, MPI_ERR_OTHER, MPI_SUCCESS};
use crate::error::{Fail, raise};
use crate::request::Requests;

/// Where the library is in its life.
#[derive(Debug)]
pub(crate) enum Phase {
    Before,
    Running(Box<Live>),
    After,
}

/// What exists between `MPI_Init` and `MPI_Finalize`.
#[derive(Debug)]
pub(crate) struct Live {
    pub(crate) world: World,
    pub(crate) reqs: Requests,
}

#[derive(Debug)]
pub(crate) struct Mpi {
    pub(crate) phase: Phase,
    /// Communicators and their error handlers (these exist before `MPI_Init`, so
    /// `MPI_ERRORS_RETURN` can be chosen for calls made too early).
    pub(crate) comms: Comms,
}

static MPI: Mutex<Mpi> = Mutex::new(Mpi { phase: Phase::Before, comms: Comms::new() });

/// The state of a running library, borrowed for one call.
#[derive(Debug)]
pub(crate) struct Ctx<'a> {
    pub(crate) world: &'a mut World,
    pub(crate) reqs: &'a mut Requests,
    pub(crate) comms: &'a mut Comms,
}

fn lock() -> MutexGuard<'static, Mpi> {
    // A panic cannot leave the lock poisoned in use: panics in `extern "C"` abort.
    MPI.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on the state in any phase; a failure goes to `comm`'s error handler
/// (the world's when `comm` is not a communicator).
pub(crate) fn entry(func: &'static str, comm: Handle, f: impl FnOnce(&mut Mpi) -> Result<(), Fail>) -> c_int {
    let mut g = lock();
    match f(&mut g) {
        Ok(()) => MPI_SUCCESS,
        Err(fail) => {
            let handler = g.comms.errhandler(comm);
            drop(g);
            raise(func, handler, fail)
        }
    }
}

/// Runs `f` on a running library (`MPI_ERR_OTHER` before `MPI_Init` and after
/// `MPI_Finalize`).
pub(crate) fn call(func: &'static str, comm: Handle, f: impl FnOnce(Ctx<'_>) -> Result<(), Fail>) -> c_int {
    entry(func, comm, |mpi| {
        let live = match &mut mpi.phase {
            Phase::Running(live) => live,
            Phase::Before => return Err(Fail::new(MPI_ERR_OTHER, "called before MPI_Init".into())),
            Phase::After => return Err(Fail::new(MPI_ERR_OTHER, "called after MPI_Finalize".into())),
        };
        let Live { world, reqs } = &mut **live;
        f(Ctx { world, reqs, comms: &mut mpi.comms })
    })
}
