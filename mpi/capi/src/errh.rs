//! Error handlers and error classes: `MPI_Errhandler_create` (and
//! `MPI_Comm_create_errhandler`), `MPI_Errhandler_free`, `MPI_Errhandler_set` /
//! `_get`, `MPI_Comm_set_errhandler` / `_get_errhandler`,
//! `MPI_Comm_call_errhandler`, and the classes, codes and strings programs add
//! (`MPI_Add_error_class`, `MPI_Add_error_code`, `MPI_Add_error_string`).

use std::ffi::{c_char, c_int};
use std::sync::atomic::Ordering;

use crate::buf::{read_c_string, write_out};
use crate::consts::{
    Handle, MPI_COMM_WORLD, MPI_ERR_ARG, MPI_ERR_LASTCODE, MPI_ERRHANDLER_NULL, MPI_ERRORS_ARE_FATAL,
    MPI_ERRORS_RETURN, MPI_MAX_ERROR_STRING,
};
use crate::error::Fail;
use crate::handles::Table;
use crate::state::{Mpi, entry};

/// `MPI_Comm_errhandler_function` (MPI-1's `MPI_Handler_function`): called with
/// the communicator and the error code, then varargs MPI leaves unspecified.
pub(crate) type HandlerFn = unsafe extern "C" fn(*mut Handle, *mut c_int);

/// What to do with a failure.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Handler {
    Fatal,
    Return,
    /// Call the program's function, then return the code.
    User(HandlerFn),
}

pub(crate) const fn errhandlers() -> Table<HandlerFn> {
    Table::new(MPI_ERRORS_RETURN + 1, MPI_ERR_ARG, "error handler")
}

/// The handler of handle `h`.
pub(crate) fn resolve(mpi: &Mpi, h: Handle) -> Result<Handler, Fail> {
    match h {
        MPI_ERRORS_ARE_FATAL => Ok(Handler::Fatal),
        MPI_ERRORS_RETURN => Ok(Handler::Return),
        MPI_ERRHANDLER_NULL => Err(Fail::new(MPI_ERR_ARG, "MPI_ERRHANDLER_NULL is not an error handler".into())),
        _ => mpi.obj.errhandlers.get(h).map(|f| Handler::User(*f)),
    }
}

/// The error classes and codes programs added, and their strings.
#[derive(Debug, Default)]
pub(crate) struct Codes {
    /// (code, its class, its string), codes above `MPI_ERR_LASTCODE` in order.
    added: Vec<(c_int, c_int, String)>,
}

impl Codes {
    pub(crate) const fn new() -> Codes {
        Codes { added: Vec::new() }
    }

    fn add(&mut self, class: Option<c_int>) -> c_int {
        let code = MPI_ERR_LASTCODE + 1 + self.added.len() as c_int;
        self.added.push((code, class.unwrap_or(code), String::new()));
        crate::attr::LAST_USED_CODE.store(code, Ordering::Relaxed);
        code
    }

    fn find(&self, code: c_int) -> Option<&(c_int, c_int, String)> {
        usize::try_from(code - MPI_ERR_LASTCODE - 1).ok().and_then(|i| self.added.get(i))
    }

    /// The class and string of an added code.
    pub(crate) fn lookup(&self, code: c_int) -> Option<(c_int, &str)> {
        self.find(code).map(|(_, class, s)| (*class, s.as_str()))
    }

    fn is_class(&self, c: c_int) -> bool {
        (0..=MPI_ERR_LASTCODE).contains(&c) || self.find(c).is_some_and(|(code, class, _)| code == class)
    }
}

/// `MPI_Errhandler_create` (MPI-1).
///
/// # Safety
/// `function` is an error handler function; `errhandler` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Errhandler_create(function: Option<HandlerFn>, errhandler: *mut Handle) -> c_int {
    entry("MPI_Errhandler_create", MPI_COMM_WORLD, |mpi| {
        let f = function.ok_or_else(|| Fail::new(MPI_ERR_ARG, "null error handler function".into()))?;
        let h = mpi.obj.errhandlers.insert(f)?;
        // SAFETY: the caller's handle, or null (refused).
        unsafe { write_out(errhandler, h) }
    })
}

/// `MPI_Comm_create_errhandler`: [`MPI_Errhandler_create`].
///
/// # Safety
/// As `MPI_Errhandler_create`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_create_errhandler(function: Option<HandlerFn>, errhandler: *mut Handle) -> c_int {
    // SAFETY: as the caller vouched.
    unsafe { MPI_Errhandler_create(function, errhandler) }
}

/// `MPI_Errhandler_free`: sets `*errhandler` to `MPI_ERRHANDLER_NULL`
/// (communicators using it keep it).
///
/// # Safety
/// `errhandler` is readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Errhandler_free(errhandler: *mut Handle) -> c_int {
    entry("MPI_Errhandler_free", MPI_COMM_WORLD, |mpi| {
        if errhandler.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null error handler pointer".into()));
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { errhandler.read() };
        resolve(mpi, h)?;
        // A handler still set on a communicator must keep working: its entry stays.
        // SAFETY: non-null, the caller's handle.
        unsafe { errhandler.write(MPI_ERRHANDLER_NULL) };
        Ok(())
    })
}

/// `MPI_Comm_set_errhandler` (also before `MPI_Init`, so calls made too early
/// can return their error).
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Comm_set_errhandler(comm: Handle, errhandler: Handle) -> c_int {
    entry("MPI_Comm_set_errhandler", comm, |mpi| {
        resolve(mpi, errhandler)?;
        mpi.comms.entry_mut(comm)?.errhandler = errhandler;
        Ok(())
    })
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
        let e = mpi.comms.entry(comm)?.errhandler;
        // SAFETY: the caller's handle, or null (refused).
        unsafe { write_out(errhandler, e) }
    })
}

/// `MPI_Errhandler_get`: the MPI-1 name of [`MPI_Comm_get_errhandler`].
///
/// # Safety
/// As `MPI_Comm_get_errhandler`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Errhandler_get(comm: Handle, errhandler: *mut Handle) -> c_int {
    // SAFETY: as the caller vouched.
    unsafe { MPI_Comm_get_errhandler(comm, errhandler) }
}

/// `MPI_Comm_call_errhandler`: hands `errorcode` to `comm`'s handler (which,
/// under `MPI_ERRORS_ARE_FATAL`, ends the process).
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Comm_call_errhandler(comm: Handle, errorcode: c_int) -> c_int {
    let rc = entry("MPI_Comm_call_errhandler", comm, |mpi| {
        mpi.comms.entry(comm)?;
        Err(Fail::new(errorcode, "raised by MPI_Comm_call_errhandler".into()))
    });
    // The handler ran (or the process ended); the call itself succeeded unless
    // the communicator was bad.
    if rc == errorcode { crate::consts::MPI_SUCCESS } else { rc }
}

/// `MPI_Add_error_class`.
///
/// # Safety
/// `errorclass` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Add_error_class(errorclass: *mut c_int) -> c_int {
    entry("MPI_Add_error_class", MPI_COMM_WORLD, |mpi| {
        let c = mpi.obj.codes.add(None);
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(errorclass, c) }
    })
}

/// `MPI_Add_error_code`: a new code of class `errorclass`.
///
/// # Safety
/// `errorcode` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Add_error_code(errorclass: c_int, errorcode: *mut c_int) -> c_int {
    entry("MPI_Add_error_code", MPI_COMM_WORLD, |mpi| {
        if !mpi.obj.codes.is_class(errorclass) {
            return Err(Fail::new(MPI_ERR_ARG, format!("{errorclass} is not an error class")));
        }
        let c = mpi.obj.codes.add(Some(errorclass));
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(errorcode, c) }
    })
}

/// `MPI_Add_error_string`: the text `MPI_Error_string` gives an added code or class.
///
/// # Safety
/// `string` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Add_error_string(errorcode: c_int, string: *const c_char) -> c_int {
    entry("MPI_Add_error_string", MPI_COMM_WORLD, |mpi| {
        // SAFETY: as the caller vouched (null refused).
        let s = unsafe { read_c_string(string)? };
        if s.len() >= MPI_MAX_ERROR_STRING as usize {
            return Err(Fail::new(MPI_ERR_ARG, "error string too long".into()));
        }
        let i = usize::try_from(errorcode - MPI_ERR_LASTCODE - 1)
            .ok()
            .filter(|&i| i < mpi.obj.codes.added.len())
            .ok_or_else(|| Fail::new(MPI_ERR_ARG, format!("{errorcode} is not an added error code")))?;
        mpi.obj.codes.added[i].2 = s;
        Ok(())
    })
}
