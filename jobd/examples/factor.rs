//! Factoring by trial division, spread over every rank of a p2pmp-mpi job.
//! Usage: factor [N] [block]. Rank `r` of `p` tries the odd candidates with index
//! `i ≡ r (mod p)`; after every `block` candidates per rank the ranks agree (one
//! allreduce) on the smallest factor found so far and stop once there is one.
//! Rank 0 prints `N = p * q` with the time taken and writes `factors.txt`.

fn main() -> Result<(), p2pmp_mpi::Error> {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(4_611_686_039_902_224_373);
    let block: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1 << 20).max(1);
    let mut w = p2pmp_mpi::init()?;
    let (r, p) = (u64::from(w.rank()), u64::from(w.size()));
    let t0 = w.wtime();
    let limit = (n as f64).sqrt() as u64 + 1;
    let mut found = if n % 2 == 0 && n > 2 { 2 } else { u64::MAX };
    let mut i = r;
    while found == u64::MAX {
        let mut mine = u64::MAX;
        for _ in 0..block {
            let c = 3 + 2 * i;
            if c > limit {
                break;
            }
            if n % c == 0 {
                mine = c;
                break;
            }
            i += p;
        }
        let past = 3 + 2 * i > limit;
        let agreed = w.allreduce(&[mine, u64::from(past)], p2pmp_mpi::Op::Min)?;
        found = agreed[0];
        if found == u64::MAX && agreed[1] == 1 {
            // Every rank ran past the square root: n is prime.
            found = n;
        }
    }
    if r == 0 {
        let dt = w.wtime() - t0;
        let q = n / found;
        println!("{n} = {found} * {q} ({p} ranks, {dt:.3} s)");
        std::fs::write("factors.txt", format!("{found} {q}\n")).map_err(p2pmp_mpi::Error::from)?;
    }
    w.finalize()
}
