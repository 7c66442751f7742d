//! The communicator calls: `MPI_Comm_rank`, `MPI_Comm_size`, `MPI_Comm_dup`,
//! `MPI_Comm_split`, `MPI_Comm_create`, `MPI_Comm_free`, `MPI_Comm_compare`,
//! `MPI_Comm_test_inter`, `MPI_Comm_remote_size`, `MPI_Intercomm_create`,
//! `MPI_Intercomm_merge`, `MPI_Comm_set_name`, `MPI_Comm_get_name`.

use std::ffi::{c_char, c_int};

use crate::attr;
use crate::buf::{read_c_string, write_c_string, write_out};
use crate::consts::{Handle, MPI_COMM_NULL, MPI_ERR_ARG, MPI_ERR_COMM, MPI_MAX_OBJECT_NAME, MPI_UNDEFINED};
use crate::error::Fail;
use crate::group;
use crate::state::{Ctx, call};

/// Stores communicator `c` (made from `parent`, or none for this process) in
/// `*out`.
fn store(cx: &mut Ctx<'_>, parent: Handle, c: Option<p2pmp_mpi::Comm>, out: *mut Handle) -> Result<Handle, Fail> {
    let h = match c {
        Some(c) => cx.comms.add(parent, c)?,
        None => MPI_COMM_NULL,
    };
    // SAFETY: the caller's handle (checked non-null by `out_ok` first).
    unsafe { write_out(out, h)? };
    Ok(h)
}

fn out_ok(out: *mut Handle) -> Result<(), Fail> {
    if out.is_null() { Err(Fail::new(MPI_ERR_ARG, "null output communicator".into())) } else { Ok(()) }
}

/// `MPI_Comm_rank` (in the local group of an intercommunicator).
///
/// # Safety
/// `rank` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_rank(comm: Handle, rank: *mut c_int) -> c_int {
    call("MPI_Comm_rank", comm, |cx| {
        let r = cx.comms.get(comm)?.rank();
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(rank, r as c_int) }
    })
}

/// `MPI_Comm_size` (of the local group of an intercommunicator).
///
/// # Safety
/// `size` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_size(comm: Handle, size: *mut c_int) -> c_int {
    call("MPI_Comm_size", comm, |cx| {
        let s = cx.comms.get(comm)?.size();
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(size, s as c_int) }
    })
}

/// `MPI_Comm_remote_size`.
///
/// # Safety
/// `size` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_remote_size(comm: Handle, size: *mut c_int) -> c_int {
    call("MPI_Comm_remote_size", comm, |cx| {
        let c = cx.comms.get(comm)?;
        let g = c.c.remote_group().ok_or_else(|| Fail::new(MPI_ERR_COMM, "not an intercommunicator".into()))?;
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(size, g.size() as c_int) }
    })
}

/// `MPI_Comm_test_inter`.
///
/// # Safety
/// `flag` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_test_inter(comm: Handle, flag: *mut c_int) -> c_int {
    call("MPI_Comm_test_inter", comm, |cx| {
        let inter = cx.comms.get(comm)?.c.is_inter();
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(flag, c_int::from(inter)) }
    })
}

/// `MPI_Comm_compare`.
///
/// # Safety
/// `result` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_compare(comm1: Handle, comm2: Handle, result: *mut c_int) -> c_int {
    call("MPI_Comm_compare", comm1, |cx| {
        let (a, b) = (cx.comms.get(comm1)?, cx.comms.get(comm2)?);
        let s = if comm1 == comm2 { p2pmp_mpi::Similarity::Ident } else { a.c.compare(&b.c) };
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(result, group::similarity(s)) }
    })
}

/// `MPI_Comm_dup`: the same group(s) on a fresh context, with the attributes
/// their copy callbacks keep, the error handler and the topology.
///
/// # Safety
/// `newcomm` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_dup(comm: Handle, newcomm: *mut Handle) -> c_int {
    call("MPI_Comm_dup", comm, |mut cx| {
        out_ok(newcomm)?;
        let c = cx.comms.get(comm)?;
        let attrs = attr::copy_all(&cx, comm)?;
        let dup = cx.world.comm_dup(&c.c)?;
        let h = store(&mut cx, comm, Some(dup), newcomm)?;
        let topo = cx.comms.entry(comm)?.topo.clone();
        let e = cx.comms.entry_mut(h)?;
        e.attrs.extend(attrs);
        e.topo = topo;
        Ok(())
    })
}

/// `MPI_Comm_split` (`MPI_UNDEFINED` colour: `MPI_COMM_NULL`).
///
/// # Safety
/// `newcomm` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_split(comm: Handle, color: c_int, key: c_int, newcomm: *mut Handle) -> c_int {
    call("MPI_Comm_split", comm, |mut cx| {
        out_ok(newcomm)?;
        let c = cx.comms.get(comm)?;
        let color = match color {
            MPI_UNDEFINED => None,
            c if c >= 0 => Some(c as u32),
            c => return Err(Fail::new(MPI_ERR_ARG, format!("colour {c} is negative"))),
        };
        let made = cx.world.comm_split(&c.c, color, key)?;
        store(&mut cx, comm, made, newcomm).map(|_| ())
    })
}

/// `MPI_Comm_create`: the communicator of `group` (`MPI_COMM_NULL` outside it).
///
/// # Safety
/// `newcomm` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_create(comm: Handle, group: Handle, newcomm: *mut Handle) -> c_int {
    call("MPI_Comm_create", comm, |mut cx| {
        out_ok(newcomm)?;
        let c = cx.comms.get(comm)?;
        let g = group::get(cx.obj, group)?;
        let made = cx.world.comm_create(&c.c, &g)?;
        store(&mut cx, comm, made, newcomm).map(|_| ())
    })
}

/// `MPI_Intercomm_create`.
///
/// # Safety
/// `newintercomm` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Intercomm_create(
    local_comm: Handle,
    local_leader: c_int,
    peer_comm: Handle,
    remote_leader: c_int,
    tag: c_int,
    newintercomm: *mut Handle,
) -> c_int {
    call("MPI_Intercomm_create", local_comm, |mut cx| {
        out_ok(newintercomm)?;
        let local = cx.comms.get(local_comm)?;
        let rank = |r: c_int, what: &str| {
            u32::try_from(r).map_err(|_| Fail::new(crate::consts::MPI_ERR_RANK, format!("{what} {r}")))
        };
        let ll = rank(local_leader, "local leader")?;
        // Only the leader talks on the peer communicator (others may pass anything).
        let (peer, rl) = if local.rank() == ll {
            (Some(cx.comms.get(peer_comm)?), rank(remote_leader, "remote leader")?)
        } else {
            (None, 0)
        };
        let peer = peer.map_or_else(|| local.c.clone(), |p| p.c);
        if tag < 0 {
            return Err(Fail::new(crate::consts::MPI_ERR_TAG, format!("tag {tag}")));
        }
        let made = cx.world.intercomm_create(&local.c, ll, &peer, rl, tag)?;
        store(&mut cx, local_comm, Some(made), newintercomm).map(|_| ())
    })
}

/// `MPI_Intercomm_merge`.
///
/// # Safety
/// `newintracomm` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Intercomm_merge(intercomm: Handle, high: c_int, newintracomm: *mut Handle) -> c_int {
    call("MPI_Intercomm_merge", intercomm, |mut cx| {
        out_ok(newintracomm)?;
        let c = cx.comms.get(intercomm)?;
        let made = cx.world.intercomm_merge(&c.c, high != 0)?;
        store(&mut cx, intercomm, Some(made), newintracomm).map(|_| ())
    })
}

/// `MPI_Comm_free`: runs the attributes' delete callbacks, sets `*comm` to
/// `MPI_COMM_NULL`.
///
/// # Safety
/// `comm` is readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_free(comm: *mut Handle) -> c_int {
    // SAFETY: the caller's handle, or null (read as MPI_COMM_NULL, refused below).
    let h = if comm.is_null() { MPI_COMM_NULL } else { unsafe { comm.read() } };
    call("MPI_Comm_free", h, |mut cx| {
        cx.comms.get(h)?;
        if h == crate::consts::MPI_COMM_WORLD || h == crate::consts::MPI_COMM_SELF {
            return Err(Fail::new(MPI_ERR_COMM, "MPI_COMM_WORLD and MPI_COMM_SELF cannot be freed".into()));
        }
        attr::delete_all(&mut cx, h)?;
        cx.comms.remove(h)?;
        // SAFETY: non-null: MPI_COMM_NULL was refused above.
        unsafe { write_out(comm, MPI_COMM_NULL) }
    })
}

/// `MPI_Comm_set_name`.
///
/// # Safety
/// `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_set_name(comm: Handle, name: *const c_char) -> c_int {
    call("MPI_Comm_set_name", comm, |cx| {
        // SAFETY: as the caller vouched (null refused).
        let s = unsafe { read_c_string(name)? };
        let n = (MPI_MAX_OBJECT_NAME - 1) as usize;
        cx.comms.entry_mut(comm)?.name = s.chars().take(n).collect();
        Ok(())
    })
}

/// `MPI_Comm_get_name` (empty when never set, except for the predefined ones).
///
/// # Safety
/// `name` holds `MPI_MAX_OBJECT_NAME` chars; `resultlen` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_get_name(comm: Handle, name: *mut c_char, resultlen: *mut c_int) -> c_int {
    call("MPI_Comm_get_name", comm, |cx| {
        let s = cx.comms.entry(comm)?.name.clone();
        // SAFETY: the caller's MPI_MAX_OBJECT_NAME chars and int (null refused).
        unsafe { write_c_string(name, MPI_MAX_OBJECT_NAME, &s, resultlen) }
    })
}
