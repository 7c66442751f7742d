//! Every pair of ranks at once: each rank sends to every other before it
//! receives anything, so both ranks of a pair open a connection at the same
//! time, then `rounds` exchanges with each peer in turn check that every
//! message arrives in order. Prints `exchange ok <rounds> links <open>` from
//! each rank, `open` being its connections to peers at the end (one per peer
//! once the pairs that opened two have settled on one). Usage: mpi_exchange [rounds]

fn main() -> Result<(), p2pmp_mpi::Error> {
    let rounds: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let mut w = p2pmp_mpi::init()?;
    let (r, p) = (w.rank(), w.size());
    let peers: Vec<u32> = (0..p).filter(|&q| q != r).collect();
    for i in 0..rounds {
        let sends = peers.iter().map(|&q| w.isend(&[i, u64::from(r)], q, 0)).collect::<Result<Vec<_>, _>>()?;
        for &q in &peers {
            let (v, _) = w.recv::<u64>(Some(q), Some(0))?;
            assert_eq!(v, [i, u64::from(q)], "round {i} from {q}");
        }
        w.waitall(sends)?;
    }
    w.barrier()?;
    println!("exchange ok {rounds} links {}", w.wait_stats().links_open);
    w.finalize()
}
