//! Moving this rank off a core it shares with the peer it waits for.

/// Moves the calling thread off `core` to another core it may run on, then
/// gives it back every core it had (the scheduler may move it again as it
/// likes): the core it moved to. Nothing happens when `core` is the only core
/// the thread may use (a rank the user pinned stays where it is).
pub(super) fn step_off(core: u32) -> Option<u32> {
    let allowed = affinity()?;
    let core = core as usize;
    // SAFETY: CPU_ISSET and CPU_COUNT only read the set; CPU_ISSET is given
    // an index below the set's size (checked first).
    let alone = core >= libc::CPU_SETSIZE as usize
        || unsafe { !libc::CPU_ISSET(core, &allowed) || libc::CPU_COUNT(&allowed) < 2 };
    if alone {
        return None;
    }
    let mut others = allowed;
    // SAFETY: `core` is below the set's size (checked above).
    unsafe { libc::CPU_CLR(core, &mut others) };
    // The kernel moves the calling thread before it returns.
    let moved = set_affinity(&others).then(current_core).flatten();
    set_affinity(&allowed);
    moved
}

/// The core the calling thread runs on now.
pub(super) fn current_core() -> Option<u32> {
    // SAFETY: sched_getcpu(3) takes no arguments; -1 on failure.
    u32::try_from(unsafe { libc::sched_getcpu() }).ok()
}

/// The cores the calling thread may run on.
fn affinity() -> Option<libc::cpu_set_t> {
    // SAFETY: an all-zero cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getaffinity(2) writes at most the given size into `set`.
    let ok = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } == 0;
    ok.then_some(set)
}

/// Lets the calling thread run on `set` only: whether that was done.
fn set_affinity(set: &libc::cpu_set_t) -> bool {
    // SAFETY: sched_setaffinity(2) reads the given size of `set`.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(set), set) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cores(set: &libc::cpu_set_t) -> Vec<usize> {
        // SAFETY: CPU_ISSET reads the set at indexes below its size.
        (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, set) }).collect()
    }

    #[test]
    fn a_rank_steps_off_its_core_and_keeps_every_core_it_had() {
        // Affinity is per thread: the test's own, so the harness keeps its cores.
        std::thread::spawn(|| {
            let before = affinity().unwrap();
            if cores(&before).len() < 2 {
                eprintln!("skipped: this thread may run on one core only");
                return;
            }
            let core = current_core().unwrap();
            let to = step_off(core).expect("moved");
            assert_ne!(to, core, "on another core");
            assert!(cores(&before).contains(&(to as usize)), "one it may run on");
            assert_eq!(cores(&affinity().unwrap()), cores(&before), "every core it had, back");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_pinned_rank_stays_where_it_is() {
        std::thread::spawn(|| {
            let core = current_core().unwrap();
            // SAFETY: an all-zero cpu_set_t is an empty set; `core` is below its size.
            let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            unsafe { libc::CPU_SET(core as usize, &mut one) };
            assert!(set_affinity(&one));
            assert_eq!(step_off(core), None);
            assert_eq!(cores(&affinity().unwrap()), vec![core as usize], "still pinned");
            assert_eq!(current_core(), Some(core));
        })
        .join()
        .unwrap();
    }
}
