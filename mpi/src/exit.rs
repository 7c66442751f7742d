//! Ending the process on purpose while MPI runs: a rank that moves away
//! (`ckpt`), an `MPI_Abort` or fatal error of the C ABI. The C ABI fails a
//! program that ends with MPI running (it would leave its peers waiting);
//! these exits keep their status.

use std::sync::atomic::{AtomicBool, Ordering};

static ON_PURPOSE: AtomicBool = AtomicBool::new(false);

/// Ends the process with `code` (C's `exit`: its stdio is flushed), marked
/// as meant.
pub fn exit_on_purpose(code: i32) -> ! {
    ON_PURPOSE.store(true, Ordering::Release);
    std::process::exit(code)
}

/// Whether the process is ending through [`exit_on_purpose`].
pub fn ending_on_purpose() -> bool {
    ON_PURPOSE.load(Ordering::Acquire)
}
