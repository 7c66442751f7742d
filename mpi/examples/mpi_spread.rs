//! Where ranks that outnumber the cores run: barriers for `secs` seconds (by
//! rank 0's clock), each rank noting the core it runs on after each barrier
//! of the second half. Rank 0 prints `spread over <cores>: <core of rank 0>
//! <of rank 1> .. moved <moves home> stopped <ranks that stopped>`: each
//! rank's core the one it was seen on most; `<cores>` the fewest cores a
//! rank spread over (`WaitStats::spread_cores`: 0 if some rank did not
//! spread: pinned, `P2PMP_SPREAD=0`, the ranks fit the cores); the ranks
//! that stopped spreading because other work ran on the machine. With
//! `crowd`, every rank starts on the first core it may run on, as the
//! kernel may start them (then may run on every core again).
//! Usage: mpi_spread [secs] [crowd]

use std::collections::BTreeMap;
use std::time::Instant;

/// Barriers between two looks at rank 0's clock.
const ROUND: u32 = 50;

fn core_now() -> u64 {
    // SAFETY: sched_getcpu(3) takes no arguments; -1 on failure.
    u64::try_from(unsafe { libc::sched_getcpu() }).unwrap_or(u64::MAX)
}

/// Moves this process to the first core it may run on, then lets it run on
/// every core again.
fn crowd() {
    // SAFETY: all-zero and all-ones cpu_set_t values are sets; the calls
    // read or write at most the size given; CPU_ISSET / CPU_SET stay below
    // the set's size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of_val(&set);
        if libc::sched_getaffinity(0, size, &mut set) != 0 {
            return;
        }
        let Some(first) = (0..libc::CPU_SETSIZE as usize).find(|&c| libc::CPU_ISSET(c, &set)) else { return };
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(first, &mut one);
        libc::sched_setaffinity(0, size, &one);
        libc::sched_setaffinity(0, size, &set);
    }
}

fn main() -> Result<(), p2pmp_mpi::Error> {
    let args: Vec<String> = std::env::args().collect();
    let secs: f64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(0.5);
    if args.iter().any(|a| a == "crowd") {
        crowd();
    }
    let mut w = p2pmp_mpi::init()?;
    let start = Instant::now();
    let mut seen: BTreeMap<u64, u64> = BTreeMap::new();
    let mut half = false;
    loop {
        for _ in 0..ROUND {
            w.barrier()?;
            if half {
                *seen.entry(core_now()).or_default() += 1;
            }
        }
        let mut t = [start.elapsed().as_secs_f64()];
        w.bcast(&mut t, 0)?;
        let t = t[0];
        if t >= secs {
            break;
        }
        half = t >= secs / 2.0;
    }
    let most = seen.iter().max_by_key(|&(_, n)| *n).map_or(u64::MAX, |(&c, _)| c);
    let stats = w.wait_stats();
    let mine = [most, stats.moved_home, stats.spread_stopped, stats.spread_cores];
    if let Some(all) = w.gather(&mine, 0)? {
        let column = |i: usize| all.chunks(mine.len()).map(move |r| r[i]);
        let cores: Vec<String> = column(0).map(|c| c.to_string()).collect();
        let over = column(3).min().unwrap_or(0);
        let (moved, stopped) = (column(1).sum::<u64>(), column(2).sum::<u64>());
        println!("spread over {over}: {} moved {moved} stopped {stopped}", cores.join(" "));
    }
    w.finalize()
}
