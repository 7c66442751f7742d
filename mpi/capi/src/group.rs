//! Groups: the handle table and every `MPI_Group_*` call, `MPI_Comm_group` and
//! `MPI_Comm_remote_group`.

use std::ffi::c_int;

use p2pmp_mpi::{Group, Similarity};

use crate::buf::{in_array, out_array, write_out};
use crate::consts::{
    Handle, MPI_COMM_WORLD, MPI_CONGRUENT, MPI_ERR_ARG, MPI_ERR_COMM, MPI_ERR_GROUP, MPI_GROUP_EMPTY, MPI_GROUP_NULL,
    MPI_IDENT, MPI_PROC_NULL, MPI_SIMILAR, MPI_UNDEFINED, MPI_UNEQUAL,
};
use crate::error::Fail;
use crate::handles::Table;
use crate::state::{Objects, call, entry};

pub(crate) const fn groups() -> Table<Group> {
    Table::new(MPI_GROUP_EMPTY + 1, MPI_ERR_GROUP, "group")
}

/// The group of handle `h`.
pub(crate) fn get(obj: &Objects, h: Handle) -> Result<Group, Fail> {
    match h {
        MPI_GROUP_EMPTY => Ok(Group::empty()),
        MPI_GROUP_NULL => Err(Fail::new(MPI_ERR_GROUP, "MPI_GROUP_NULL is not a group".into())),
        _ => obj.groups.get(h).cloned(),
    }
}

/// A handle for group `g` (`MPI_GROUP_EMPTY` when it is empty).
pub(crate) fn handle(obj: &mut Objects, g: Group) -> Result<Handle, Fail> {
    if g.size() == 0 { Ok(MPI_GROUP_EMPTY) } else { obj.groups.insert(g) }
}

pub(crate) fn similarity(s: Similarity) -> c_int {
    match s {
        Similarity::Ident => MPI_IDENT,
        Similarity::Congruent => MPI_CONGRUENT,
        Similarity::Similar => MPI_SIMILAR,
        Similarity::Unequal => MPI_UNEQUAL,
    }
}

/// A call that reads groups and may make one (allowed before `MPI_Init` too:
/// groups need no communication).
fn group_call(func: &'static str, f: impl FnOnce(&mut Objects) -> Result<(), Fail>) -> c_int {
    entry(func, MPI_COMM_WORLD, |mpi| f(&mut mpi.obj))
}

/// `MPI_Group_size`.
///
/// # Safety
/// `size` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Group_size(group: Handle, size: *mut c_int) -> c_int {
    // SAFETY: the caller's int, or null (refused).
    group_call("MPI_Group_size", |o| unsafe { write_out(size, get(o, group)?.size() as c_int) })
}

/// `MPI_Group_rank`: `MPI_UNDEFINED` when this process is not a member.
///
/// # Safety
/// `rank` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Group_rank(group: Handle, rank: *mut c_int) -> c_int {
    call("MPI_Group_rank", MPI_COMM_WORLD, |cx| {
        let r = get(cx.obj, group)?.rank_of(cx.world.rank()).map_or(MPI_UNDEFINED, |r| r as c_int);
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(rank, r) }
    })
}

/// `MPI_Group_translate_ranks` (`MPI_PROC_NULL` maps to itself).
///
/// # Safety
/// `ranks1` holds `n` ints; `ranks2` is writable for `n`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Group_translate_ranks(
    group1: Handle,
    n: c_int,
    ranks1: *const c_int,
    group2: Handle,
    ranks2: *mut c_int,
) -> c_int {
    group_call("MPI_Group_translate_ranks", |o| {
        let (g1, g2) = (get(o, group1)?, get(o, group2)?);
        // SAFETY: the caller's arrays of `n` ints.
        let (src, dst) = unsafe { (in_array(ranks1, n)?, out_array(ranks2, n)?) };
        for (i, &r) in src.iter().enumerate() {
            dst[i] = if r == MPI_PROC_NULL {
                MPI_PROC_NULL
            } else {
                g1.translate(&[r], &g2)?[0].map_or(MPI_UNDEFINED, |x| x as c_int)
            };
        }
        Ok(())
    })
}

/// `MPI_Group_compare`.
///
/// # Safety
/// `result` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Group_compare(group1: Handle, group2: Handle, result: *mut c_int) -> c_int {
    group_call("MPI_Group_compare", |o| {
        let s = get(o, group1)?.compare(&get(o, group2)?);
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(result, similarity(s)) }
    })
}

/// Makes a group from two and stores its handle in `out`.
fn binary(
    func: &'static str,
    g1: Handle,
    g2: Handle,
    out: *mut Handle,
    op: impl FnOnce(&Group, &Group) -> Group,
) -> c_int {
    group_call(func, |o| {
        let g = op(&get(o, g1)?, &get(o, g2)?);
        let h = handle(o, g)?;
        // SAFETY: the caller's handle, or null (refused).
        unsafe { write_out(out, h) }
    })
}

/// `MPI_Group_union`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Group_union(group1: Handle, group2: Handle, newgroup: *mut Handle) -> c_int {
    binary("MPI_Group_union", group1, group2, newgroup, Group::union)
}

/// `MPI_Group_intersection`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Group_intersection(group1: Handle, group2: Handle, newgroup: *mut Handle) -> c_int {
    binary("MPI_Group_intersection", group1, group2, newgroup, Group::intersection)
}

/// `MPI_Group_difference`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Group_difference(group1: Handle, group2: Handle, newgroup: *mut Handle) -> c_int {
    binary("MPI_Group_difference", group1, group2, newgroup, Group::difference)
}

/// Makes a group from one and a list of `n` items, stores its handle in `out`.
fn listed<T: Copy>(
    func: &'static str,
    group: Handle,
    n: c_int,
    list: *const T,
    out: *mut Handle,
    op: impl FnOnce(&Group, &[T]) -> p2pmp_mpi::Result<Group>,
) -> c_int {
    group_call(func, |o| {
        let g = get(o, group)?;
        // SAFETY: the caller's array of `n` items.
        let items = unsafe { in_array(list, n)? };
        let h = handle(o, op(&g, items)?)?;
        // SAFETY: the caller's handle, or null (refused).
        unsafe { write_out(out, h) }
    })
}

/// `MPI_Group_incl`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Group_incl(group: Handle, n: c_int, ranks: *const c_int, newgroup: *mut Handle) -> c_int {
    listed("MPI_Group_incl", group, n, ranks, newgroup, Group::incl)
}

/// `MPI_Group_excl`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Group_excl(group: Handle, n: c_int, ranks: *const c_int, newgroup: *mut Handle) -> c_int {
    listed("MPI_Group_excl", group, n, ranks, newgroup, Group::excl)
}

/// `MPI_Group_range_incl`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Group_range_incl(
    group: Handle,
    n: c_int,
    ranges: *const [c_int; 3],
    newgroup: *mut Handle,
) -> c_int {
    listed("MPI_Group_range_incl", group, n, ranges, newgroup, Group::range_incl)
}

/// `MPI_Group_range_excl`.
#[unsafe(no_mangle)]
pub extern "C" fn MPI_Group_range_excl(
    group: Handle,
    n: c_int,
    ranges: *const [c_int; 3],
    newgroup: *mut Handle,
) -> c_int {
    listed("MPI_Group_range_excl", group, n, ranges, newgroup, Group::range_excl)
}

/// `MPI_Group_free`: sets `*group` to `MPI_GROUP_NULL` (`MPI_GROUP_EMPTY` may be
/// freed and stays valid).
///
/// # Safety
/// `group` is readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Group_free(group: *mut Handle) -> c_int {
    group_call("MPI_Group_free", |o| {
        if group.is_null() {
            return Err(Fail::new(MPI_ERR_ARG, "null group pointer".into()));
        }
        // SAFETY: non-null, the caller's handle.
        let h = unsafe { group.read() };
        if h != MPI_GROUP_EMPTY {
            get(o, h)?;
            o.groups.remove(h)?;
        }
        // SAFETY: non-null, the caller's handle.
        unsafe { group.write(MPI_GROUP_NULL) };
        Ok(())
    })
}

/// `MPI_Comm_group`: the (local) group of a communicator.
///
/// # Safety
/// `group` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_group(comm: Handle, group: *mut Handle) -> c_int {
    call("MPI_Comm_group", comm, |cx| {
        let g = cx.comms.get(comm)?.c.group().clone();
        let h = handle(cx.obj, g)?;
        // SAFETY: the caller's handle, or null (refused).
        unsafe { write_out(group, h) }
    })
}

/// `MPI_Comm_remote_group`: the remote group of an intercommunicator.
///
/// # Safety
/// `group` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Comm_remote_group(comm: Handle, group: *mut Handle) -> c_int {
    call("MPI_Comm_remote_group", comm, |cx| {
        let c = cx.comms.get(comm)?;
        let g =
            c.c.remote_group().cloned().ok_or_else(|| Fail::new(MPI_ERR_COMM, "not an intercommunicator".into()))?;
        let h = handle(cx.obj, g)?;
        // SAFETY: the caller's handle, or null (refused).
        unsafe { write_out(group, h) }
    })
}
