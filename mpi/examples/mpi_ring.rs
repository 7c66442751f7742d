//! Ring: a token of `bytes` bytes goes around all ranks `loops` times; each rank
//! adds 1 to the first byte's counter. Usage: mpi_ring [loops] [bytes]
//! Prints `ring ok <loops> <seconds>` on rank 0.

fn main() -> Result<(), p2pmp_mpi::Error> {
    let mut args = std::env::args().skip(1);
    let loops: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    let bytes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10).max(8);
    let mut w = p2pmp_mpi::init()?;
    let (r, p) = (w.rank(), w.size());
    let (next, prev) = ((r + 1) % p, (r + p - 1) % p);
    w.barrier()?;
    let t0 = w.wtime();
    let mut token = vec![0u8; bytes];
    for i in 0..loops {
        if r == 0 {
            token[..8].copy_from_slice(&(i * p as u64).to_le_bytes());
            w.send(&token, next, 1)?;
            w.recv_into(&mut token, Some(prev), Some(1))?;
        } else {
            w.recv_into(&mut token, Some(prev), Some(1))?;
            let v = u64::from_le_bytes(token[..8].try_into().expect("8 bytes")) + 1;
            token[..8].copy_from_slice(&v.to_le_bytes());
            w.send(&token, next, 1)?;
        }
        let got = u64::from_le_bytes(token[..8].try_into().expect("8 bytes"));
        let want = i * p as u64 + if r == 0 { p as u64 - 1 } else { r as u64 };
        assert_eq!(got, want, "rank {r} loop {i}");
    }
    let dt = w.wtime() - t0;
    if r == 0 {
        println!("ring ok {loops} {dt:.6}");
    }
    w.finalize()
}
