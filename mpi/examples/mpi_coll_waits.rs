//! How many times a collective makes a rank wait: `calls` Allreduces, Barriers
//! and Alltoalls, after a warm-up that sets up every link, each rank printing
//! `waits <op> <rank> <waits> <calls>` (waits not over at once, from
//! `World::wait_stats`). A rank waits once for each step of a collective
//! whose input was not there yet, which on ranks sharing cores costs a trip
//! through the run queue. Usage: mpi_coll_waits [calls]

use p2pmp_mpi::{Op, World};

/// One collective call, checking its result.
type Call<'a> = &'a dyn Fn(&mut World) -> Result<(), p2pmp_mpi::Error>;

fn waits(w: &World) -> u64 {
    w.wait_stats().waits
}

fn main() -> Result<(), p2pmp_mpi::Error> {
    let calls: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(200);
    let mut w = p2pmp_mpi::init()?;
    let (r, p) = (w.rank(), w.size());
    let blocks = vec![r as u8; 8 * p as usize];
    w.barrier()?;
    drop(w.allreduce(&[1.0f64], Op::Sum)?);
    drop(w.alltoall(&blocks)?);
    w.barrier()?;
    let ops: [(&str, Call<'_>); 3] = [
        ("allreduce", &|w| {
            let got = w.allreduce(&[f64::from(w.rank())], Op::Sum)?;
            assert_eq!(got[0], f64::from(p * (p - 1) / 2));
            Ok(())
        }),
        ("barrier", &|w| w.barrier()),
        ("alltoall", &|w| {
            let got = w.alltoall(&vec![w.rank() as u8; 8 * w.size() as usize])?;
            assert!(got.chunks(8).enumerate().all(|(k, b)| b.iter().all(|&x| x as usize == k)));
            Ok(())
        }),
    ];
    for (name, op) in ops {
        let before = waits(&w);
        for _ in 0..calls {
            op(&mut w)?;
        }
        println!("waits {name} {r} {} {calls}", waits(&w) - before);
    }
    w.finalize()
}
