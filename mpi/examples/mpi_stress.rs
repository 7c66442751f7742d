//! ANY_SOURCE stress: every rank but 0 sends `msgs` messages (tags cycling through
//! 0..5) to rank 0, which takes them with ANY_SOURCE / ANY_TAG and checks that
//! each sender's messages arrive once, in order. Usage: mpi_stress [msgs]
//! Prints `stress ok <total>` on rank 0.

use p2pmp_mpi::{ANY_SOURCE, ANY_TAG};

fn main() -> Result<(), p2pmp_mpi::Error> {
    let msgs: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(2000);
    let mut w = p2pmp_mpi::init()?;
    let (r, p) = (w.rank(), w.size());
    if r == 0 {
        let mut next = vec![0u64; p as usize];
        let total = msgs * (p as u64 - 1);
        for k in 0..total {
            if k % 97 == 0 {
                let _ = w.iprobe(ANY_SOURCE, ANY_TAG)?;
            }
            let (v, st) = w.recv::<u64>(ANY_SOURCE, ANY_TAG)?;
            let src = st.source as usize;
            assert_eq!(v.len(), 1 + (v[0] % 4) as usize, "length");
            assert_eq!(v[0], next[src], "message from {src} out of order");
            assert_eq!(st.tag, (v[0] % 5) as i32, "tag");
            assert!(v[1..].iter().all(|&x| x == src as u64));
            next[src] += 1;
        }
        assert!(next[1..].iter().all(|&n| n == msgs));
        println!("stress ok {total}");
    } else {
        let mut reqs = Vec::new();
        for i in 0..msgs {
            let mut m = vec![r as u64; 1 + (i % 4) as usize];
            m[0] = i;
            reqs.push(w.isend(&m, 0, (i % 5) as i32)?);
            if reqs.len() == 64 {
                w.waitall(std::mem::take(&mut reqs))?;
            }
        }
        w.waitall(reqs)?;
    }
    w.finalize()
}
