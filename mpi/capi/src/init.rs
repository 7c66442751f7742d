//! The environment: `MPI_Init`, `MPI_Init_thread`, `MPI_Query_thread`,
//! `MPI_Initialized`, `MPI_Finalize`, `MPI_Finalized`, `MPI_Abort`,
//! `MPI_Get_processor_name`, `MPI_Get_version`, `MPI_Wtime`, `MPI_Wtick`.

use std::ffi::{c_char, c_int};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use crate::buf::{write_c_string, write_out};
use crate::consts::{
    Handle, MPI_COMM_SELF, MPI_COMM_WORLD, MPI_ERR_ARG, MPI_ERR_OTHER, MPI_MAX_PROCESSOR_NAME, MPI_SUBVERSION,
    MPI_THREAD_FUNNELED, MPI_THREAD_MULTIPLE, MPI_THREAD_SINGLE, MPI_VERSION,
};
use crate::error::{Fail, abort_process};
use crate::request::Requests;
use crate::state::{self, Global, Live, Phase, call, entry};

/// The instant `MPI_Wtime` counts from (the first call of `MPI_Init` or `MPI_Wtime`).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn init(func: &'static str) -> c_int {
    entry(func, MPI_COMM_WORLD, |mpi| {
        if !matches!(mpi.phase, Phase::Before) || !state::claim() {
            return Err(Fail::new(MPI_ERR_OTHER, "MPI is already initialised (or finalised)".into()));
        }
        epoch();
        match p2pmp_mpi::init() {
            Ok(world) => {
                watch_the_exit();
                mpi.comms.init(&world);
                mpi.phase =
                    Phase::Running(Box::new(Live { world, reqs: Requests::default(), bsend: Default::default() }));
                Ok(())
            }
            Err(e) => {
                state::set_global(Global::Before);
                Err(e.into())
            }
        }
    })
}

/// From `MPI_Init` on, a process that ends with MPI still running (it
/// returned from `main` or called `exit` without `MPI_Finalize`) says so,
/// and one that would end with status 0 exits with 1 instead, so that its
/// job fails and its peers are stopped: they would wait for it until their
/// unreachable deadline (MPICH and Open MPI abort such a job too). A rank
/// moving away, `MPI_Abort` and the fatal error handler end on purpose
/// (`p2pmp_mpi::exit_on_purpose`) and keep their status.
fn watch_the_exit() {
    // A child the program forks inherits the handler; only the rank's own
    // process is the rank.
    static RANK_PID: AtomicU32 = AtomicU32::new(0);
    RANK_PID.store(std::process::id(), Ordering::Relaxed);
    fn ended(status: c_int) {
        let me = std::process::id() == RANK_PID.load(Ordering::Relaxed);
        if !me || state::global() != Global::Running || p2pmp_mpi::ending_on_purpose() {
            return;
        }
        let rank = std::env::var(p2pmp_mpi::RANK_VAR).unwrap_or_else(|_| "0".into());
        let status = if status == 0 { 1 } else { status };
        eprintln!("p2pmpi: rank {rank}: the program ended without calling MPI_Finalize: exit status {status}");
        // SAFETY: fflush(NULL) flushes every C stream; _exit ends the process
        // at once with the status (exit's other handlers are skipped).
        unsafe {
            libc::fflush(std::ptr::null_mut());
            libc::_exit(status);
        }
    }
    // glibc's on_exit(3) tells the status exit was called with; elsewhere
    // atexit(3) does not, and any end counts as 0.
    #[cfg(target_env = "gnu")]
    let registered = {
        unsafe extern "C" {
            fn on_exit(f: extern "C" fn(c_int, *mut std::ffi::c_void), arg: *mut std::ffi::c_void) -> c_int;
        }
        extern "C" fn handler(status: c_int, _: *mut std::ffi::c_void) {
            ended(status);
        }
        // SAFETY: registers a handler of static code, with no argument.
        unsafe { on_exit(handler, std::ptr::null_mut()) }
    };
    #[cfg(not(target_env = "gnu"))]
    let registered = {
        extern "C" fn handler() {
            ended(0);
        }
        // SAFETY: registers a handler of static code.
        unsafe { libc::atexit(handler) }
    };
    if registered != 0 {
        eprintln!("p2pmpi: cannot watch for an end without MPI_Finalize (on_exit failed)");
    }
}

/// `MPI_Init`. The arguments are not needed (the node passes everything in
/// the environment) and may be null.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) -> c_int {
    init("MPI_Init")
}

/// `MPI_Init_thread`: provides `MPI_THREAD_SINGLE` or `MPI_THREAD_FUNNELED` (the
/// most this library supports, also when more is asked for).
///
/// # Safety
/// `provided` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Init_thread(
    _argc: *mut c_int,
    _argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    let checked = entry("MPI_Init_thread", MPI_COMM_WORLD, |_| {
        if !(MPI_THREAD_SINGLE..=MPI_THREAD_MULTIPLE).contains(&required) {
            return Err(Fail::new(MPI_ERR_ARG, format!("{required} is not a thread level")));
        }
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(provided, required.min(MPI_THREAD_FUNNELED)) }
    });
    if checked != crate::consts::MPI_SUCCESS {
        return checked;
    }
    init("MPI_Init_thread")
}

/// `MPI_Query_thread`.
///
/// # Safety
/// `provided` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Query_thread(provided: *mut c_int) -> c_int {
    // SAFETY: the caller's int, or null (refused).
    call("MPI_Query_thread", MPI_COMM_WORLD, |_| unsafe { write_out(provided, MPI_THREAD_FUNNELED) })
}

/// `MPI_Initialized`: whether `MPI_Init` was called (also after `MPI_Finalize`).
///
/// # Safety
/// `flag` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Initialized(flag: *mut c_int) -> c_int {
    entry("MPI_Initialized", MPI_COMM_WORLD, |_| {
        let f = c_int::from(state::global() != Global::Before);
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(flag, f) }
    })
}

/// `MPI_Finalized`.
///
/// # Safety
/// `flag` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Finalized(flag: *mut c_int) -> c_int {
    entry("MPI_Finalized", MPI_COMM_WORLD, |_| {
        let f = c_int::from(state::global() == Global::After);
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(flag, f) }
    })
}

/// `MPI_Finalize`: waits for every rank, delivers what is queued, unregisters.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Finalize() -> c_int {
    entry("MPI_Finalize", MPI_COMM_WORLD, |mpi| match std::mem::replace(&mut mpi.phase, Phase::After) {
        Phase::Running(live) => {
            state::set_global(Global::After);
            Ok(live.world.finalize()?)
        }
        other => {
            let what = match other {
                Phase::Before if state::global() != Global::Before => "on a thread other than MPI_Init's",
                Phase::Before => "before MPI_Init",
                _ => "twice",
            };
            mpi.phase = other;
            Err(Fail::new(MPI_ERR_OTHER, format!("MPI_Finalize called {what}")))
        }
    })
}

/// `MPI_Abort`: ends this process with `errorcode` (1 if it would read as
/// success), which fails the job.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Abort(comm: Handle, errorcode: c_int) -> c_int {
    let rank = std::env::var(p2pmp_mpi::RANK_VAR).unwrap_or_else(|_| "?".into());
    let comm = match comm {
        MPI_COMM_WORLD => "MPI_COMM_WORLD".to_owned(),
        MPI_COMM_SELF => "MPI_COMM_SELF".to_owned(),
        other => format!("communicator {other}"),
    };
    abort_process(&format!("p2pmpi: rank {rank}: MPI_Abort({comm}, error code {errorcode})"), errorcode)
}

/// `MPI_Get_processor_name`: the host name.
///
/// # Safety
/// `name` holds `MPI_MAX_PROCESSOR_NAME` chars; `resultlen` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Get_processor_name(name: *mut c_char, resultlen: *mut c_int) -> c_int {
    call("MPI_Get_processor_name", MPI_COMM_WORLD, |cx| {
        let host = cx.world.processor_name();
        // SAFETY: the caller's MPI_MAX_PROCESSOR_NAME chars and int (null refused).
        unsafe { write_c_string(name, MPI_MAX_PROCESSOR_NAME, &host, resultlen) }
    })
}

/// `MPI_Get_version`: the standard these calls follow (MPI-1.3).
///
/// # Safety
/// `version` and `subversion` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Get_version(version: *mut c_int, subversion: *mut c_int) -> c_int {
    entry("MPI_Get_version", MPI_COMM_WORLD, |_| {
        // SAFETY: the caller's ints, or null (refused).
        unsafe {
            write_out(version, MPI_VERSION)?;
            write_out(subversion, MPI_SUBVERSION)
        }
    })
}

/// `MPI_Wtime`: seconds since an instant fixed in `MPI_Init`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Wtime() -> f64 {
    epoch().elapsed().as_secs_f64()
}

/// `MPI_Pcontrol`: profiling control; this library has no profiling levels,
/// so it does nothing. (Declared variadic in mpi.h; the extra arguments are
/// never read, and on the C ABIs this library targets a caller of a variadic
/// function passes the first argument as to a plain one.)
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Pcontrol(_level: c_int) -> c_int {
    crate::consts::MPI_SUCCESS
}

/// `MPI_Wtick`: the resolution of `MPI_Wtime` (the monotonic clock's, 1 ns).
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Wtick() -> f64 {
    1e-9
}
