//! Topologies (MPI-1 §6): Cartesian (`MPI_Cart_create`, `_get`, `_rank`,
//! `_coords`, `_shift`, `_sub`, `_map`, `MPI_Cartdim_get`, `MPI_Dims_create`)
//! and graph (`MPI_Graph_create`, `_get`, `_neighbors_count`, `_neighbors`,
//! `_map`, `MPI_Graphdims_get`), and `MPI_Topo_test`. A topology is data a
//! communicator carries; ranks are never reordered.

use std::ffi::c_int;

use crate::buf::{in_array, out_array, write_out};
use crate::consts::{
    Handle, MPI_CART, MPI_COMM_NULL, MPI_ERR_ARG, MPI_ERR_DIMS, MPI_ERR_RANK, MPI_ERR_TOPOLOGY, MPI_GRAPH,
    MPI_PROC_NULL, MPI_UNDEFINED,
};
use crate::error::Fail;
use crate::state::{Ctx, call, entry};

/// The topology a communicator carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Topo {
    Cart { dims: Vec<i32>, periods: Vec<bool> },
    Graph { index: Vec<i32>, edges: Vec<i32> },
}

/// The row-major coordinates of rank `r` in a grid of `dims`.
fn coords(dims: &[i32], mut r: i32) -> Vec<i32> {
    let mut c = vec![0; dims.len()];
    for i in (0..dims.len()).rev() {
        c[i] = r % dims[i];
        r /= dims[i];
    }
    c
}

/// The rank at `c` (wrapped on periodic dimensions); `None` off the grid.
fn rank_at(dims: &[i32], periods: &[bool], c: &[i32]) -> Option<i32> {
    let mut r = 0;
    for i in 0..dims.len() {
        let mut x = c[i];
        if periods[i] {
            x = x.rem_euclid(dims[i]);
        } else if !(0..dims[i]).contains(&x) {
            return None;
        }
        r = r * dims[i] + x;
    }
    Some(r)
}

fn nodes(dims: &[i32]) -> Result<i32, Fail> {
    dims.iter().try_fold(1i32, |n, &d| {
        if d <= 0 {
            return Err(Fail::new(MPI_ERR_DIMS, format!("dimension {d}")));
        }
        n.checked_mul(d).ok_or_else(|| Fail::new(MPI_ERR_DIMS, "grid too large".into()))
    })
}

/// The new communicator of the first `n` ranks of `comm`, with topology `t`.
fn make(cx: &mut Ctx<'_>, comm: Handle, n: i32, t: Topo, out: *mut Handle) -> Result<(), Fail> {
    let c = cx.comms.get(comm)?;
    c.c.check_intra("a topology")?;
    if n > c.size() as i32 {
        return Err(Fail::new(MPI_ERR_ARG, format!("{n} nodes on a communicator of {}", c.size())));
    }
    let color = (c.rank() as i32) < n;
    let made = cx.world.comm_split(&c.c, color.then_some(0), c.rank() as i32)?;
    let h = match made {
        Some(m) => {
            let h = cx.comms.add(comm, m)?;
            cx.comms.entry_mut(h)?.topo = Some(t);
            h
        }
        None => MPI_COMM_NULL,
    };
    // SAFETY: the caller's handle, or null (refused).
    unsafe { write_out(out, h) }
}

fn topo(cx: &Ctx<'_>, comm: Handle) -> Result<Topo, Fail> {
    cx.comms.entry(comm)?.topo.clone().ok_or_else(|| Fail::new(MPI_ERR_TOPOLOGY, "no topology".into()))
}

fn cart(cx: &Ctx<'_>, comm: Handle) -> Result<(Vec<i32>, Vec<bool>), Fail> {
    match topo(cx, comm)? {
        Topo::Cart { dims, periods } => Ok((dims, periods)),
        Topo::Graph { .. } => Err(Fail::new(MPI_ERR_TOPOLOGY, "not a Cartesian topology".into())),
    }
}

fn graph(cx: &Ctx<'_>, comm: Handle) -> Result<(Vec<i32>, Vec<i32>), Fail> {
    match topo(cx, comm)? {
        Topo::Graph { index, edges } => Ok((index, edges)),
        Topo::Cart { .. } => Err(Fail::new(MPI_ERR_TOPOLOGY, "not a graph topology".into())),
    }
}

/// `MPI_Cart_create`.
///
/// # Safety
/// `dims` and `periods` hold `ndims` ints; `comm_cart` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Cart_create(
    comm_old: Handle,
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
    _reorder: c_int,
    comm_cart: *mut Handle,
) -> c_int {
    call("MPI_Cart_create", comm_old, |mut cx| {
        // SAFETY: the caller's arrays of `ndims` ints.
        let (d, p) = unsafe { (in_array(dims, ndims)?, in_array(periods, ndims)?) };
        let n = nodes(d)?;
        let t = Topo::Cart { dims: d.to_vec(), periods: p.iter().map(|&x| x != 0).collect() };
        make(&mut cx, comm_old, n, t, comm_cart)
    })
}

/// `MPI_Graph_create`.
///
/// # Safety
/// `index` holds `nnodes` ints, `edges` `index[nnodes - 1]`; `comm_graph` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Graph_create(
    comm_old: Handle,
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
    _reorder: c_int,
    comm_graph: *mut Handle,
) -> c_int {
    call("MPI_Graph_create", comm_old, |mut cx| {
        // SAFETY: the caller's array of `nnodes` ints.
        let ix = unsafe { in_array(index, nnodes)? };
        let ne = ix.last().copied().unwrap_or(0);
        if ix.windows(2).any(|w| w[1] < w[0]) || ix.first().is_some_and(|&x| x < 0) {
            return Err(Fail::new(MPI_ERR_ARG, "index must not decrease".into()));
        }
        // SAFETY: the caller's array of index[nnodes - 1] ints.
        let e = unsafe { in_array(edges, ne)? };
        if e.iter().any(|&x| x < 0 || x >= nnodes) {
            return Err(Fail::new(MPI_ERR_RANK, "an edge names no node".into()));
        }
        let t = Topo::Graph { index: ix.to_vec(), edges: e.to_vec() };
        make(&mut cx, comm_old, nnodes, t, comm_graph)
    })
}

/// `MPI_Topo_test`: `MPI_CART`, `MPI_GRAPH` or `MPI_UNDEFINED`.
///
/// # Safety
/// `status` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Topo_test(comm: Handle, status: *mut c_int) -> c_int {
    call("MPI_Topo_test", comm, |cx| {
        let t = match cx.comms.entry(comm)?.topo {
            Some(Topo::Cart { .. }) => MPI_CART,
            Some(Topo::Graph { .. }) => MPI_GRAPH,
            None => MPI_UNDEFINED,
        };
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(status, t) }
    })
}

/// `MPI_Cartdim_get`.
///
/// # Safety
/// `ndims` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Cartdim_get(comm: Handle, ndims: *mut c_int) -> c_int {
    call("MPI_Cartdim_get", comm, |cx| {
        let (d, _) = cart(&cx, comm)?;
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(ndims, d.len() as c_int) }
    })
}

/// `MPI_Cart_get`.
///
/// # Safety
/// The arrays hold `maxdims` ints.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Cart_get(
    comm: Handle,
    maxdims: c_int,
    dims: *mut c_int,
    periods: *mut c_int,
    coords_out: *mut c_int,
) -> c_int {
    call("MPI_Cart_get", comm, |cx| {
        let (d, p) = cart(&cx, comm)?;
        let me = coords(&d, cx.comms.get(comm)?.rank() as i32);
        let n = d.len().min(usize::try_from(maxdims).unwrap_or(0)) as c_int;
        // SAFETY: the caller's arrays of at least `n` ints.
        let (od, op, oc) = unsafe { (out_array(dims, n)?, out_array(periods, n)?, out_array(coords_out, n)?) };
        for i in 0..n as usize {
            (od[i], op[i], oc[i]) = (d[i], c_int::from(p[i]), me[i]);
        }
        Ok(())
    })
}

/// `MPI_Cart_rank`.
///
/// # Safety
/// `coords` holds one int per dimension; `rank` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Cart_rank(comm: Handle, coords_in: *const c_int, rank: *mut c_int) -> c_int {
    call("MPI_Cart_rank", comm, |cx| {
        let (d, p) = cart(&cx, comm)?;
        // SAFETY: the caller's array of one int per dimension.
        let c = unsafe { in_array(coords_in, d.len() as c_int)? };
        let r = rank_at(&d, &p, c).ok_or_else(|| Fail::new(MPI_ERR_ARG, format!("coordinates {c:?} off the grid")))?;
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(rank, r) }
    })
}

/// `MPI_Cart_coords`.
///
/// # Safety
/// `coords` holds `maxdims` ints.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Cart_coords(comm: Handle, rank: c_int, maxdims: c_int, coords_out: *mut c_int) -> c_int {
    call("MPI_Cart_coords", comm, |cx| {
        let (d, _) = cart(&cx, comm)?;
        if !(0..nodes(&d)?).contains(&rank) {
            return Err(Fail::new(MPI_ERR_RANK, format!("rank {rank} is not on the grid")));
        }
        let c = coords(&d, rank);
        // SAFETY: the caller's array of `maxdims` ints.
        let out = unsafe { out_array(coords_out, maxdims.min(d.len() as c_int))? };
        out.copy_from_slice(&c[..out.len()]);
        Ok(())
    })
}

/// `MPI_Cart_shift`: `MPI_PROC_NULL` off the edge of a non-periodic dimension.
///
/// # Safety
/// `rank_source` and `rank_dest` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Cart_shift(
    comm: Handle,
    direction: c_int,
    disp: c_int,
    rank_source: *mut c_int,
    rank_dest: *mut c_int,
) -> c_int {
    call("MPI_Cart_shift", comm, |cx| {
        let (d, p) = cart(&cx, comm)?;
        let dir = usize::try_from(direction)
            .ok()
            .filter(|&x| x < d.len())
            .ok_or_else(|| Fail::new(MPI_ERR_ARG, format!("direction {direction}")))?;
        let me = coords(&d, cx.comms.get(comm)?.rank() as i32);
        let at = |delta: i32| {
            let mut c = me.clone();
            c[dir] += delta;
            rank_at(&d, &p, &c).unwrap_or(MPI_PROC_NULL)
        };
        // SAFETY: the caller's ints, or null (refused).
        unsafe {
            write_out(rank_source, at(-disp))?;
            write_out(rank_dest, at(disp))
        }
    })
}

/// `MPI_Cart_sub`: the sub-grids keeping the dimensions `remain_dims` marks.
///
/// # Safety
/// `remain_dims` holds one int per dimension; `newcomm` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Cart_sub(comm: Handle, remain_dims: *const c_int, newcomm: *mut Handle) -> c_int {
    call("MPI_Cart_sub", comm, |cx| {
        let (d, p) = cart(&cx, comm)?;
        // SAFETY: the caller's array of one int per dimension.
        let keep = unsafe { in_array(remain_dims, d.len() as c_int)? };
        let c = cx.comms.get(comm)?;
        let me = coords(&d, c.rank() as i32);
        // The colour is the position among the dropped dimensions, the key the rank.
        let mut color = 0i64;
        for i in (0..d.len()).filter(|&i| keep[i] == 0) {
            color = color * i64::from(d[i]) + i64::from(me[i]);
        }
        let made = cx.world.comm_split(&c.c, Some(color as u32), c.rank() as i32)?;
        // Invariant: every process passes a colour, so every one gets a communicator.
        let made = made.ok_or_else(|| Fail::new(MPI_ERR_TOPOLOGY, "sub-grid lost this process".into()))?;
        let t = Topo::Cart {
            dims: (0..d.len()).filter(|&i| keep[i] != 0).map(|i| d[i]).collect(),
            periods: (0..d.len()).filter(|&i| keep[i] != 0).map(|i| p[i]).collect(),
        };
        let h = cx.comms.add(comm, made)?;
        cx.comms.entry_mut(h)?.topo = Some(t);
        // SAFETY: the caller's handle, or null (refused).
        unsafe { write_out(newcomm, h) }
    })
}

/// `MPI_Cart_map`: this rank if it is on the grid, else `MPI_UNDEFINED`.
///
/// # Safety
/// `dims` holds `ndims` ints; `newrank` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Cart_map(
    comm: Handle,
    ndims: c_int,
    dims: *const c_int,
    _periods: *const c_int,
    newrank: *mut c_int,
) -> c_int {
    call("MPI_Cart_map", comm, |cx| {
        // SAFETY: the caller's array of `ndims` ints.
        let n = nodes(unsafe { in_array(dims, ndims)? })?;
        let r = cx.comms.get(comm)?.rank() as i32;
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(newrank, if r < n { r } else { MPI_UNDEFINED }) }
    })
}

/// `MPI_Graph_map`: this rank if below `nnodes`, else `MPI_UNDEFINED`.
///
/// # Safety
/// `newrank` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Graph_map(
    comm: Handle,
    nnodes: c_int,
    _index: *const c_int,
    _edges: *const c_int,
    newrank: *mut c_int,
) -> c_int {
    call("MPI_Graph_map", comm, |cx| {
        let r = cx.comms.get(comm)?.rank() as i32;
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(newrank, if r < nnodes { r } else { MPI_UNDEFINED }) }
    })
}

/// `MPI_Graphdims_get`.
///
/// # Safety
/// `nnodes` and `nedges` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Graphdims_get(comm: Handle, nnodes: *mut c_int, nedges: *mut c_int) -> c_int {
    call("MPI_Graphdims_get", comm, |cx| {
        let (ix, e) = graph(&cx, comm)?;
        // SAFETY: the caller's ints, or null (refused).
        unsafe {
            write_out(nnodes, ix.len() as c_int)?;
            write_out(nedges, e.len() as c_int)
        }
    })
}

/// `MPI_Graph_get`.
///
/// # Safety
/// `index` holds `maxindex` ints, `edges` `maxedges`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Graph_get(
    comm: Handle,
    maxindex: c_int,
    maxedges: c_int,
    index: *mut c_int,
    edges: *mut c_int,
) -> c_int {
    call("MPI_Graph_get", comm, |cx| {
        let (ix, e) = graph(&cx, comm)?;
        // SAFETY: the caller's arrays.
        let (oi, oe) = unsafe {
            (out_array(index, maxindex.min(ix.len() as c_int))?, out_array(edges, maxedges.min(e.len() as c_int))?)
        };
        oi.copy_from_slice(&ix[..oi.len()]);
        oe.copy_from_slice(&e[..oe.len()]);
        Ok(())
    })
}

/// The neighbours of `rank` in a graph topology.
fn neighbours(ix: &[i32], e: &[i32], rank: c_int) -> Result<Vec<i32>, Fail> {
    let r = usize::try_from(rank)
        .ok()
        .filter(|&r| r < ix.len())
        .ok_or_else(|| Fail::new(MPI_ERR_RANK, format!("rank {rank} is not a node")))?;
    let start = if r == 0 { 0 } else { ix[r - 1] as usize };
    Ok(e[start..ix[r] as usize].to_vec())
}

/// `MPI_Graph_neighbors_count`.
///
/// # Safety
/// `nneighbors` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Graph_neighbors_count(comm: Handle, rank: c_int, nneighbors: *mut c_int) -> c_int {
    call("MPI_Graph_neighbors_count", comm, |cx| {
        let (ix, e) = graph(&cx, comm)?;
        let n = neighbours(&ix, &e, rank)?.len();
        // SAFETY: the caller's int, or null (refused).
        unsafe { write_out(nneighbors, n as c_int) }
    })
}

/// `MPI_Graph_neighbors`.
///
/// # Safety
/// `neighbors` holds `maxneighbors` ints.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Graph_neighbors(
    comm: Handle,
    rank: c_int,
    maxneighbors: c_int,
    neighbors: *mut c_int,
) -> c_int {
    call("MPI_Graph_neighbors", comm, |cx| {
        let (ix, e) = graph(&cx, comm)?;
        let n = neighbours(&ix, &e, rank)?;
        // SAFETY: the caller's array of `maxneighbors` ints.
        let out = unsafe { out_array(neighbors, maxneighbors.min(n.len() as c_int))? };
        out.copy_from_slice(&n[..out.len()]);
        Ok(())
    })
}

/// Spreads `nnodes` over the free (zero) entries of `dims` as evenly as
/// possible, larger factors first.
fn dims_create(nnodes: i32, dims: &mut [i32]) -> Result<(), Fail> {
    let fixed: i32 = dims.iter().filter(|&&d| d > 0).product();
    if dims.iter().any(|&d| d < 0) || fixed == 0 || nnodes % fixed != 0 {
        return Err(Fail::new(MPI_ERR_DIMS, format!("{nnodes} nodes do not fit dims {dims:?}")));
    }
    let free: Vec<usize> = (0..dims.len()).filter(|&i| dims[i] == 0).collect();
    if free.is_empty() {
        return if fixed == nnodes {
            Ok(())
        } else {
            Err(Fail::new(MPI_ERR_DIMS, "dims do not multiply to nnodes".into()))
        };
    }
    // Prime factors, largest first, each to the currently smallest free dimension.
    let (mut n, mut f, mut primes) = (nnodes / fixed, 2, Vec::new());
    while n > 1 {
        while n % f == 0 {
            primes.push(f);
            n /= f;
        }
        f += 1;
    }
    let mut v = vec![1i32; free.len()];
    for p in primes.into_iter().rev() {
        let i = (0..v.len()).min_by_key(|&i| v[i]).unwrap_or(0);
        v[i] *= p;
    }
    v.sort_unstable_by(|a, b| b.cmp(a));
    for (k, &i) in free.iter().enumerate() {
        dims[i] = v[k];
    }
    Ok(())
}

/// `MPI_Dims_create`.
///
/// # Safety
/// `dims` holds `ndims` ints.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) -> c_int {
    entry("MPI_Dims_create", crate::consts::MPI_COMM_WORLD, |_| {
        if nnodes < 0 {
            return Err(Fail::new(MPI_ERR_ARG, format!("nnodes {nnodes}")));
        }
        // SAFETY: the caller's array of `ndims` ints.
        let d = unsafe { out_array(dims, ndims)? };
        dims_create(nnodes, d)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_number_row_major_and_shift_with_or_without_wrapping() {
        let (d, p) = ([2, 3], [false, true]);
        assert_eq!(coords(&d, 4), [1, 1]);
        assert_eq!(rank_at(&d, &p, &[1, 1]), Some(4));
        assert_eq!(rank_at(&d, &p, &[1, 3]), Some(3), "wraps in the periodic dimension");
        assert_eq!(rank_at(&d, &p, &[2, 0]), None, "not in the other");
        let mut dims = [0, 0, 0];
        dims_create(24, &mut dims).unwrap();
        assert_eq!(dims, [4, 3, 2]);
        let mut dims = [0, 3, 0];
        dims_create(12, &mut dims).unwrap();
        assert_eq!(dims, [2, 3, 2]);
        assert!(dims_create(10, &mut [0, 3]).is_err());
        let mut one = [0, 0];
        dims_create(7, &mut one).unwrap();
        assert_eq!(one, [7, 1]);
        assert_eq!(neighbours(&[1, 3, 4], &[1, 0, 2, 1], 1).unwrap(), [0, 2]);
    }
}
