//! A ring that checkpoints: each loop a token goes around every rank, each
//! adding its rank plus one and folding the value into a checksum of its own;
//! then a safe point (`World::snapshot`: a checkpoint when the job's
//! interval, `P2PMP_CHECKPOINT_MS`, is due). The loop counter, the token and
//! the checksum are protected, so a rank that resumes from a checkpoint goes
//! on where it was. Usage: mpi_ckpt_ring [loops]. Rank 0 prints `ckpt ring
//! ok <loops>: token T, checksum C` (C sums every rank's checksum: the same
//! for every run of the same loops and ranks); a resumed rank prints
//! `resumed at loop N`.

use p2pmp_mpi::Op;

/// Checksums stay below 2^40, so the sum over ranks cannot overflow.
const MASK: u64 = (1 << 40) - 1;

fn main() -> Result<(), p2pmp_mpi::Error> {
    let loops: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let mut w = p2pmp_mpi::init()?;
    let (r, p) = (w.rank(), w.size());
    let (next, prev) = ((r + 1) % p, (r + p - 1) % p);
    // The next loop, the token, the checksum.
    let mut state = [0u64; 3];
    // SAFETY: `state` lives until finalize and is only touched between MPI calls.
    unsafe { w.protect(0, state.as_mut_ptr().cast(), std::mem::size_of_val(&state))? };
    if w.recover()? {
        println!("resumed at loop {}", state[0]);
    }
    while state[0] < loops {
        let mut token = [0u64];
        if r == 0 {
            w.send(&[state[1] + 1], next, 1)?;
            w.recv_into(&mut token, Some(prev), Some(1))?;
        } else {
            w.recv_into(&mut token, Some(prev), Some(1))?;
            w.send(&[token[0] + u64::from(r) + 1], next, 1)?;
        }
        state[1] = token[0] & MASK;
        state[2] = (state[2].wrapping_mul(31) ^ state[1].wrapping_add(state[0])) & MASK;
        state[0] += 1;
        w.snapshot()?;
    }
    let sum = w.allreduce(&[state[2]], Op::Sum)?;
    if r == 0 {
        println!("ckpt ring ok {loops}: token {}, checksum {}", state[1], sum[0]);
    }
    w.finalize()
}
