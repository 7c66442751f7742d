//! Failures, their MPI error classes, and the two error handlers:
//! `MPI_ERRORS_ARE_FATAL` (print, then end the process with a non-zero code, which
//! fails the job) and `MPI_ERRORS_RETURN`.

use std::ffi::{c_char, c_int};
use std::io::Write;

use p2pmp_core::mpi::MpiError;

use crate::consts::{
    ERROR_CLASSES, Handle, MPI_ERR_ARG, MPI_ERR_COMM, MPI_ERR_GROUP, MPI_ERR_OTHER, MPI_ERR_RANK, MPI_ERR_TAG,
    MPI_ERR_TRUNCATE, MPI_MAX_ERROR_STRING,
};
use crate::errh::Handler;

/// A failed call: its error class, what went wrong, and the communicator whose
/// error handler takes it when that is not the call's own (a request's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fail {
    pub(crate) class: c_int,
    pub(crate) detail: String,
    pub(crate) comm: Option<Handle>,
}

impl Fail {
    pub(crate) fn new(class: c_int, detail: String) -> Fail {
        Fail { class, detail, comm: None }
    }

    /// The failure, raised on communicator `comm`.
    pub(crate) fn on(self, comm: Handle) -> Fail {
        Fail { comm: Some(comm), ..self }
    }
}

impl From<p2pmp_mpi::Error> for Fail {
    fn from(e: p2pmp_mpi::Error) -> Fail {
        use p2pmp_mpi::Error as E;
        let class = match &e {
            E::Mpi(MpiError::InvalidRank { .. }) => MPI_ERR_RANK,
            E::Mpi(MpiError::InvalidTag(_)) => MPI_ERR_TAG,
            E::Truncated { .. } => MPI_ERR_TRUNCATE,
            E::Invalid(_) => MPI_ERR_ARG,
            E::Rank(_) => MPI_ERR_RANK,
            E::Group(_) => MPI_ERR_GROUP,
            E::Comm(_) => MPI_ERR_COMM,
            _ => MPI_ERR_OTHER,
        };
        Fail::new(class, e.to_string())
    }
}

/// The name and description of an error class (`None` outside the table).
pub(crate) fn class_text(class: c_int) -> Option<(&'static str, &'static str)> {
    usize::try_from(class).ok().and_then(|i| ERROR_CLASSES.get(i)).copied()
}

/// Hands a failure of `func` on communicator `comm` to `handler`: returns the
/// class under `MPI_ERRORS_RETURN`, calls the program's handler and returns
/// the code, or under `MPI_ERRORS_ARE_FATAL` prints and ends the process.
pub(crate) fn raise(func: &str, handler: Handler, comm: Handle, fail: Fail) -> c_int {
    match handler {
        Handler::Return => fail.class,
        Handler::User(f) => {
            let (mut comm, mut code) = (comm, fail.class);
            // SAFETY: the program's handler, with the arguments MPI defines.
            unsafe { f(&raw mut comm, &raw mut code) };
            fail.class
        }
        Handler::Fatal => {
            let (name, text) = class_text(fail.class).unwrap_or(("MPI_ERR_UNKNOWN", "unknown error"));
            let rank = std::env::var(p2pmp_mpi::RANK_VAR).unwrap_or_else(|_| "?".into());
            abort_process(
                &format!(
                    "p2pmpi: rank {rank}: {func}: {name} ({text}): {}; aborting (MPI_ERRORS_ARE_FATAL)",
                    fail.detail
                ),
                fail.class,
            )
        }
    }
}

/// Prints `message` on stderr, flushes, and exits with `code` (1 when `code` would
/// read as success).
pub(crate) fn abort_process(message: &str, code: c_int) -> ! {
    let _ = writeln!(std::io::stderr(), "{message}");
    // C's exit(), which flushes the program's stdio buffers; meant, so it keeps its status.
    p2pmp_mpi::exit_on_purpose(if code & 0xff == 0 { 1 } else { code })
}

/// `MPI_Error_string`: the text of an error code (predefined codes are their
/// classes; added codes have the string the program gave them).
///
/// # Safety
/// `string` holds `MPI_MAX_ERROR_STRING` chars; `resultlen` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Error_string(errorcode: c_int, string: *mut c_char, resultlen: *mut c_int) -> c_int {
    crate::state::entry("MPI_Error_string", crate::consts::MPI_COMM_WORLD, |mpi| {
        let s = match class_text(errorcode) {
            Some((name, text)) => format!("{name}: {text}"),
            None => mpi.obj.codes.lookup(errorcode).map(|(_, s)| s.to_string()).ok_or_else(|| bad_code(errorcode))?,
        };
        // SAFETY: the caller passes MPI_MAX_ERROR_STRING writable chars (or null, refused).
        unsafe { crate::buf::write_c_string(string, MPI_MAX_ERROR_STRING, &s, resultlen) }
    })
}

fn bad_code(code: c_int) -> Fail {
    Fail::new(MPI_ERR_ARG, format!("{code} is not an error code"))
}

/// `MPI_Error_class`.
///
/// # Safety
/// `errorclass` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Error_class(errorcode: c_int, errorclass: *mut c_int) -> c_int {
    crate::state::entry("MPI_Error_class", crate::consts::MPI_COMM_WORLD, |mpi| {
        let class = match class_text(errorcode) {
            Some(_) => errorcode,
            None => mpi.obj.codes.lookup(errorcode).map(|(c, _)| c).ok_or_else(|| bad_code(errorcode))?,
        };
        // SAFETY: the caller passes a writable int or null (checked).
        unsafe { crate::buf::write_out(errorclass, class) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_errors_map_to_their_classes() {
        let rank: Fail = p2pmp_mpi::Error::Mpi(MpiError::InvalidRank { rank: 9, size: 4 }).into();
        assert_eq!(rank.class, MPI_ERR_RANK);
        assert!(rank.detail.contains('9'));
        let t: Fail = p2pmp_mpi::Error::Truncated { got: 8, want: 4 }.into();
        assert_eq!(t.class, MPI_ERR_TRUNCATE);
        assert_eq!(raise("MPI_Send", Handler::Return, 1, t), MPI_ERR_TRUNCATE);
        assert_eq!(class_text(MPI_ERR_TAG).unwrap().0, "MPI_ERR_TAG");
        assert_eq!(class_text(-1), None);
        assert_eq!(class_text(20), None);
    }
}
