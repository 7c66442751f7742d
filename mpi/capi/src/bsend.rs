//! Buffered sends (MPI-1 §3.6.1): `MPI_Buffer_attach`, `MPI_Buffer_detach`, and
//! the accounting `MPI_Bsend` / `MPI_Ibsend` / `MPI_Bsend_init` go through.
//!
//! The library copies every message it sends anyway, so a buffered send needs
//! no copy into the program's buffer; the buffer bounds what may be
//! outstanding: a buffered send takes its size plus `MPI_BSEND_OVERHEAD` of the
//! attached space until the engine has handed it on, and fails with
//! `MPI_ERR_BUFFER` when that space is not free. Detaching waits for every
//! buffered send.

use std::ffi::{c_int, c_void};

use p2pmp_mpi::{Request, World};

use crate::consts::{MPI_COMM_WORLD, MPI_ERR_BUFFER};
use crate::error::Fail;
use crate::state::call;

/// `MPI_BSEND_OVERHEAD`: what each buffered message takes beyond its data.
pub(crate) const OVERHEAD: usize = 64;

/// The attached buffer and the buffered sends in flight.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    /// (address, size) of the attached buffer.
    attached: Option<(usize, usize)>,
    /// Buffered sends in flight by ticket, with the space they take.
    out: std::collections::BTreeMap<u64, (Request, usize)>,
    next: u64,
}

impl Pool {
    /// Finishes the buffered sends that completed.
    fn reap(&mut self, w: &mut World) -> Result<(), Fail> {
        let mut finished = Vec::new();
        for (&t, (r, _)) in &self.out {
            if w.test(r)? {
                finished.push(t);
            }
        }
        for t in finished {
            if let Some((r, _)) = self.out.remove(&t) {
                w.wait(r)?;
            }
        }
        Ok(())
    }

    /// Checks that a message of `len` bytes fits the free attached space.
    pub(crate) fn reserve(&mut self, w: &mut World, len: usize) -> Result<usize, Fail> {
        self.reap(w)?;
        let need = len + OVERHEAD;
        let (_, size) = self.attached.ok_or_else(|| Fail::new(MPI_ERR_BUFFER, "no buffer attached".into()))?;
        let used: usize = self.out.values().map(|(_, n)| n).sum();
        if used + need > size {
            return Err(Fail::new(
                MPI_ERR_BUFFER,
                format!("{need} bytes do not fit the attached buffer ({} of {size} free)", size - used),
            ));
        }
        Ok(need)
    }

    /// Records buffered send `r` taking `need` bytes; its ticket.
    pub(crate) fn push(&mut self, r: Request, need: usize) -> u64 {
        self.next += 1;
        self.out.insert(self.next, (r, need));
        self.next
    }

    /// Hands buffered send `ticket` back to its request (to cancel it); `None`
    /// once it finished.
    pub(crate) fn take(&mut self, ticket: u64) -> Option<Request> {
        self.out.remove(&ticket).map(|(r, _)| r)
    }

    /// Waits for every buffered send.
    pub(crate) fn drain(&mut self, w: &mut World) -> Result<(), Fail> {
        for (_, (r, _)) in std::mem::take(&mut self.out) {
            w.wait(r)?;
        }
        Ok(())
    }
}

/// `MPI_Buffer_attach`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Buffer_attach(buffer: *mut c_void, size: c_int) -> c_int {
    call("MPI_Buffer_attach", MPI_COMM_WORLD, |cx| {
        if cx.bsend.attached.is_some() {
            return Err(Fail::new(MPI_ERR_BUFFER, "a buffer is attached already".into()));
        }
        let size = usize::try_from(size).map_err(|_| Fail::new(MPI_ERR_BUFFER, format!("negative size {size}")))?;
        cx.bsend.attached = Some((buffer as usize, size));
        Ok(())
    })
}

/// `MPI_Buffer_detach`: waits for the buffered sends, then gives back the
/// buffer's address (in `*(void **)buffer_addr`) and size.
///
/// # Safety
/// `buffer_addr` is writable for a pointer, `size` for an int.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Buffer_detach(buffer_addr: *mut c_void, size: *mut c_int) -> c_int {
    call("MPI_Buffer_detach", MPI_COMM_WORLD, |cx| {
        if buffer_addr.is_null() || size.is_null() {
            return Err(Fail::new(crate::consts::MPI_ERR_ARG, "null buffer_addr or size".into()));
        }
        cx.bsend.drain(cx.world)?;
        let (addr, n) = cx.bsend.attached.take().unwrap_or((0, 0));
        // SAFETY: non-null (checked): MPI passes a `void **` and an int.
        unsafe {
            buffer_addr.cast::<*mut c_void>().write(addr as *mut c_void);
            size.write(n as c_int);
        }
        Ok(())
    })
}
