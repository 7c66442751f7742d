//! `MPI_Status` and where a call writes it.

use std::ffi::c_int;

use p2pmp_mpi::Status;

use crate::consts::{MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_ERR_ARG, MPI_PROC_NULL, MPI_SUCCESS, STATUS_IGNORE_ADDR};
use crate::error::Fail;

/// `MPI_Status` of mpi.h: three public fields, then private ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct MpiStatus {
    pub(crate) source: c_int,
    pub(crate) tag: c_int,
    pub(crate) error: c_int,
    pub(crate) cancelled: c_int,
    /// Bytes received.
    pub(crate) count: i64,
}

impl MpiStatus {
    /// The status of a wait on a null or inactive request (MPI-1 §3.7.3).
    pub(crate) const EMPTY: MpiStatus =
        MpiStatus { source: MPI_ANY_SOURCE, tag: MPI_ANY_TAG, error: MPI_SUCCESS, cancelled: 0, count: 0 };

    /// The status of a receive from `MPI_PROC_NULL`.
    pub(crate) const PROC_NULL: MpiStatus =
        MpiStatus { source: MPI_PROC_NULL, tag: MPI_ANY_TAG, error: MPI_SUCCESS, cancelled: 0, count: 0 };

    /// From an engine status, with the source already in communicator ranks.
    pub(crate) fn received(s: &Status, source: c_int) -> MpiStatus {
        MpiStatus { source, tag: s.tag, error: MPI_SUCCESS, cancelled: 0, count: s.count as i64 }
    }
}

/// Where to write a status: `None` for `MPI_STATUS_IGNORE`.
#[derive(Debug)]
pub(crate) struct StatusOut(Option<*mut MpiStatus>);

impl StatusOut {
    /// Checks a status argument: `MPI_STATUS_IGNORE` or a non-null pointer.
    pub(crate) fn new(p: *mut MpiStatus) -> Result<StatusOut, Fail> {
        if p.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "status is null (pass MPI_STATUS_IGNORE)".into()));
        }
        Ok(StatusOut((p as usize != STATUS_IGNORE_ADDR).then_some(p)))
    }

    /// Element `i` of a status array (`MPI_STATUSES_IGNORE` ignores them all).
    pub(crate) fn nth(array: *mut MpiStatus, i: usize) -> Result<StatusOut, Fail> {
        if array.is_null() || array as usize == STATUS_IGNORE_ADDR {
            return StatusOut::new(array);
        }
        // SAFETY: MPI requires a status array with one entry per request; `i` is below that count.
        Ok(StatusOut(Some(unsafe { array.add(i) })))
    }

    pub(crate) fn write(&self, s: MpiStatus) {
        if let Some(p) = self.0 {
            // SAFETY: checked non-null and not MPI_STATUS_IGNORE; MPI requires it to point to an MPI_Status.
            unsafe { p.write(s) }
        }
    }
}
