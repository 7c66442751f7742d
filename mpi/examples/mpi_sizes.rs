//! Messages from 0 B to `max` bytes (default 64 MiB) from rank 0 to rank 1 and
//! back, checked byte for byte. Usage: mpi_sizes [max]
//! Prints `sizes ok <count>` on rank 0.

use bytes::Bytes;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed).wrapping_add((i >> 12) as u8)).collect()
}

fn main() -> Result<(), p2pmp_mpi::Error> {
    let max: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(64 << 20);
    let mut w = p2pmp_mpi::init()?;
    let r = w.rank();
    let mut sizes = vec![0usize, 1, 8, 1000, (64 << 10) - 1, 64 << 10, (64 << 10) + 1, 1 << 20, (5 << 20) + 3];
    sizes.push(max);
    sizes.retain(|&s| s <= max);
    if r == 0 {
        for (k, &len) in sizes.iter().enumerate() {
            let data = Bytes::from(pattern(len, k as u8));
            let req = w.isend_bytes(data.clone(), 1, k as i32)?;
            let back = w.recv_bytes(Some(1), Some(k as i32))?;
            w.wait(req)?;
            assert_eq!(back.status.count, len);
            assert!(back.data == data, "echo of {len} bytes differs");
        }
        println!("sizes ok {}", sizes.len());
    } else if r == 1 {
        for (k, &len) in sizes.iter().enumerate() {
            let m = w.recv_bytes(Some(0), Some(k as i32))?;
            assert_eq!((m.status.source, m.status.count), (0, len));
            assert!(m.data[..] == pattern(len, k as u8)[..], "{len} bytes differ");
            w.send_bytes(m.data, 0, k as i32)?;
        }
    }
    w.finalize()
}
