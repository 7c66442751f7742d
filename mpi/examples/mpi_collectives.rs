//! Every collective checked against a sequential computation, for several buffer
//! sizes and roots. Prints `collectives ok <checks>` on rank 0.

use p2pmp_mpi::{Op, World};

fn f(rank: u32, i: usize) -> i64 {
    (rank as i64 + 1) * 1_000_003 + i as i64 * 7 - 3
}

fn small(rank: u32, i: usize) -> i64 {
    ((rank as i64 * 31 + i as i64) % 5) - 2
}

fn check(w: &mut World, n: usize, root: u32) -> Result<u32, p2pmp_mpi::Error> {
    let (r, p) = (w.rank(), w.size());
    let mine: Vec<i64> = (0..n).map(|i| f(r, i)).collect();
    let mut checks = 0;

    let mut b: Vec<i64> = if r == root { (0..n).map(|i| f(root, i)).collect() } else { vec![0; n] };
    w.bcast(&mut b, root)?;
    assert_eq!(b, (0..n).map(|i| f(root, i)).collect::<Vec<_>>(), "bcast n={n} root={root}");
    checks += 1;

    let prods: Vec<i64> = (0..n).map(|i| small(r, i)).collect();
    for (op, data) in [(Op::Sum, &mine), (Op::Min, &mine), (Op::Max, &mine), (Op::Prod, &prods)] {
        let want: Vec<i64> = (0..n)
            .map(|i| {
                let vals = (0..p).map(|k| if op == Op::Prod { small(k, i) } else { f(k, i) });
                match op {
                    Op::Sum => vals.fold(0i64, i64::wrapping_add),
                    Op::Prod => vals.fold(1i64, i64::wrapping_mul),
                    Op::Min => vals.min().expect("p >= 1"),
                    _ => vals.max().expect("p >= 1"),
                }
            })
            .collect();
        let got = w.reduce(data, op, root)?;
        assert_eq!(got.as_ref(), (r == root).then_some(&want), "reduce {op:?} n={n} root={root}");
        let all = w.allreduce(data, op)?;
        assert_eq!(all, want, "allreduce {op:?} n={n}");
        checks += 2;
    }
    let fl: Vec<f64> = (0..n).map(|i| (r as usize * 3 + i) as f64).collect();
    let fsum = w.allreduce(&fl, Op::Sum)?;
    assert_eq!(fsum, (0..n).map(|i| (0..p).map(|k| (k as usize * 3 + i) as f64).sum::<f64>()).collect::<Vec<_>>());

    let all: Vec<i64> = (0..p).flat_map(|k| (0..n).map(move |i| f(k, i))).collect();
    let g = w.gather(&mine, root)?;
    assert_eq!(g.as_ref(), (r == root).then_some(&all), "gather n={n} root={root}");
    assert_eq!(w.allgather(&mine)?, all, "allgather n={n}");

    let blocks: Vec<i64> = (0..p).flat_map(|k| (0..n).map(move |i| f(k + 100, i))).collect();
    let s = w.scatter((r == root).then_some(&blocks[..]), root)?;
    assert_eq!(s, (0..n).map(|i| f(r + 100, i)).collect::<Vec<_>>(), "scatter n={n} root={root}");

    let a2a: Vec<u32> = (0..p).flat_map(|j| (0..n).map(move |i| r * 1_000_000 + j * 1000 + i as u32)).collect();
    let got = w.alltoall(&a2a)?;
    let want: Vec<u32> = (0..p).flat_map(|k| (0..n).map(move |i| k * 1_000_000 + r * 1000 + i as u32)).collect();
    assert_eq!(got, want, "alltoall n={n}");
    w.barrier()?;
    Ok(checks + 6)
}

fn main() -> Result<(), p2pmp_mpi::Error> {
    let mut w = p2pmp_mpi::init()?;
    let p = w.size();
    let mut checks = 0;
    for n in [0usize, 1, 7, 1000, 20_000] {
        let mut roots = vec![0, p - 1, p / 2];
        roots.dedup();
        for root in roots {
            checks += check(&mut w, n, root)?;
        }
    }
    if w.rank() == 0 {
        println!("collectives ok {checks}");
    }
    w.finalize()
}
