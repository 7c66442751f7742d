//! The library's state and the entry helpers every C function goes through:
//! they check the library is running, run the call, and hand a failure to the
//! error handler of the call's communicator.
//!
//! The state belongs to the thread that calls `MPI_Init`: the library provides
//! `MPI_THREAD_FUNNELED` at most, so only that thread makes MPI calls, and its
//! state needs no lock (two atomic read-modify-writes per call were a quarter
//! of what the C layer added to a send and a receive). A call from another
//! thread is refused with `MPI_ERR_OTHER`, never undefined behaviour; it goes
//! to that thread's own error handler (`MPI_ERRORS_ARE_FATAL` unless that
//! thread chose another), since handlers live with the state. Where the
//! library is in its life is also kept in one atomic, for `MPI_Initialized` and
//! `MPI_Finalized`, which any thread may call.

use std::cell::RefCell;
use std::ffi::c_int;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU8, Ordering};

use p2pmp_mpi::World;

use p2pmp_mpi::Group;

use crate::attr::Keyval;
use crate::comm::Comms;
use crate::consts::{Handle, MPI_ERR_OTHER, MPI_SUCCESS};
use crate::errh::{Codes, HandlerFn};
use crate::error::{Fail, raise};
use crate::handles::Table;
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
    pub(crate) bsend: crate::bsend::Pool,
}

#[derive(Debug)]
pub(crate) struct Mpi {
    pub(crate) phase: Phase,
    /// Communicators and their error handlers (these exist before `MPI_Init`, so
    /// `MPI_ERRORS_RETURN` can be chosen for calls made too early).
    pub(crate) comms: Comms,
    pub(crate) obj: Objects,
}

/// The objects programs make that need no communication.
#[derive(Debug)]
pub(crate) struct Objects {
    pub(crate) groups: Table<Group>,
    pub(crate) types: Table<crate::types::Derived>,
    pub(crate) ops: Table<crate::ops::UserOp>,
    pub(crate) keyvals: Table<Keyval>,
    pub(crate) errhandlers: Table<HandlerFn>,
    pub(crate) codes: Codes,
}

impl Objects {
    pub(crate) const fn new() -> Objects {
        Objects {
            groups: crate::group::groups(),
            types: crate::types::types(),
            ops: crate::ops::ops(),
            keyvals: crate::attr::keyvals(),
            errhandlers: crate::errh::errhandlers(),
            codes: Codes::new(),
        }
    }
}

thread_local! {
    /// Never dropped (like a static): a program that exits without
    /// `MPI_Finalize` must not run the world's teardown from `exit`.
    static MPI: ManuallyDrop<RefCell<Mpi>> = const {
        ManuallyDrop::new(RefCell::new(Mpi { phase: Phase::Before, comms: Comms::new(), obj: Objects::new() }))
    };
}

/// The process-wide phase, as seen from every thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Global {
    Before = 0,
    Running = 1,
    After = 2,
}

static GLOBAL: AtomicU8 = AtomicU8::new(Global::Before as u8);

/// The process-wide phase.
pub(crate) fn global() -> Global {
    match GLOBAL.load(Ordering::Acquire) {
        0 => Global::Before,
        1 => Global::Running,
        _ => Global::After,
    }
}

/// Claims the library for the calling thread (`MPI_Init`); false when some
/// thread already initialised it.
pub(crate) fn claim() -> bool {
    GLOBAL.compare_exchange(Global::Before as u8, Global::Running as u8, Ordering::AcqRel, Ordering::Acquire).is_ok()
}

/// Sets the process-wide phase (the owning thread, on finalising, or giving
/// back its claim when `MPI_Init` failed).
pub(crate) fn set_global(g: Global) {
    GLOBAL.store(g as u8, Ordering::Release);
}

/// The state of a running library, borrowed for one call.
#[derive(Debug)]
pub(crate) struct Ctx<'a> {
    pub(crate) world: &'a mut World,
    pub(crate) reqs: &'a mut Requests,
    pub(crate) bsend: &'a mut crate::bsend::Pool,
    pub(crate) comms: &'a mut Comms,
    pub(crate) obj: &'a mut Objects,
}

/// Runs `f` on the calling thread's state in any phase; a failure goes to the
/// error handler of its own communicator if it names one, else of `comm` (the
/// world's when that is not a communicator).
pub(crate) fn entry(func: &'static str, comm: Handle, f: impl FnOnce(&mut Mpi) -> Result<(), Fail>) -> c_int {
    // The borrow ends before a handler runs (it may be the program's own, which
    // may call MPI). A call made while the state is borrowed (from a callback of
    // the program that the library runs: a user operation, an attribute
    // callback) is refused rather than aliasing the state.
    let failed = MPI.with(|m| {
        let Ok(mut mpi) = m.try_borrow_mut() else {
            return Some((
                crate::errh::Handler::Return,
                comm,
                Fail::new(MPI_ERR_OTHER, "called from a callback".into()),
            ));
        };
        f(&mut mpi).err().map(|fail| {
            let on = fail.comm.unwrap_or(comm);
            let on = if mpi.comms.entry(on).is_ok() { on } else { crate::consts::MPI_COMM_WORLD };
            let h = crate::errh::resolve(&mpi, mpi.comms.errhandler(on)).unwrap_or(crate::errh::Handler::Fatal);
            (h, on, fail)
        })
    });
    match failed {
        None => MPI_SUCCESS,
        Some((handler, on, fail)) => raise(func, handler, on, fail),
    }
}

/// Runs `f` on a running library (`MPI_ERR_OTHER` before `MPI_Init`, after
/// `MPI_Finalize`, and on a thread other than the one that called `MPI_Init`).
pub(crate) fn call(func: &'static str, comm: Handle, f: impl FnOnce(Ctx<'_>) -> Result<(), Fail>) -> c_int {
    entry(func, comm, |mpi| {
        let Mpi { phase, comms, obj } = mpi;
        let live = match phase {
            Phase::Running(live) => live,
            Phase::Before if global() != Global::Before => {
                return Err(Fail::new(
                    MPI_ERR_OTHER,
                    "called from a thread other than the one that called MPI_Init (MPI_THREAD_FUNNELED)".into(),
                ));
            }
            Phase::Before => return Err(Fail::new(MPI_ERR_OTHER, "called before MPI_Init".into())),
            Phase::After => return Err(Fail::new(MPI_ERR_OTHER, "called after MPI_Finalize".into())),
        };
        let Live { world, reqs, bsend } = &mut **live;
        f(Ctx { world, reqs, bsend, comms, obj })
    })
}
