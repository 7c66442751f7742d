//! Moving this rank off a core it shares with the peer it waits for.
//!
//! Only a rank that may run on every online core moves: one the user or a
//! launcher pinned to some cores keeps exactly those. (So does one in a
//! container whose cpuset is narrower than the machine: it cannot be told
//! from a pinned one without reading the cgroup.) A move narrows the
//! thread's cores for an instant and then lets it run on every core again
//! (an all-ones mask, which the kernel meets with the cgroup's cpuset), so
//! that the thread keeps following the cpuset as it did before.

use tracing::warn;

/// A rank's home core, and the cores homes are counted round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Home {
    pub(super) core: u32,
    pub(super) among: u32,
}

/// Whether this rank may move off a core, and what it takes.
#[derive(Debug)]
pub(super) struct Mover {
    /// Every online core was this thread's when the world started, and no
    /// restore has failed since.
    free: bool,
    /// The cores online then.
    online: usize,
}

impl Mover {
    /// Looks at the calling thread's cores now (at the start of the world).
    pub(super) fn new() -> Mover {
        let online = online();
        Mover { free: affinity().is_some_and(|set| may_move(count(&set), online)), online }
    }

    /// Moves the calling thread off `core` to another core it may run on,
    /// then lets it run on every core again: the core it moved to. Nothing
    /// happens for a pinned thread, or one whose cores changed since it
    /// started.
    pub(super) fn step_off(&mut self, core: u32) -> Option<u32> {
        let now = self.unpinned()?;
        if !holds(&now, core) {
            return None;
        }
        let mut others = now;
        // SAFETY: `core` is below the set's size (`holds`).
        unsafe { libc::CPU_CLR(core as usize, &mut others) };
        self.narrow_for_an_instant(&others, &now)
    }

    /// The home of the rank at `place`, if it may move: the core at `place`
    /// counted round the cores this thread may run on (in order, from the
    /// first).
    pub(super) fn home(&self, place: u32) -> Option<Home> {
        let now = self.unpinned()?;
        let among = count(&now);
        let core = (0..libc::CPU_SETSIZE as u32).filter(|&c| holds(&now, c)).nth(place as usize % among)?;
        Some(Home { core, among: among as u32 })
    }

    /// Moves the calling thread to `core`, then lets it run on every core
    /// again: whether it runs on `core` now. Nothing happens for a pinned
    /// thread, or one whose cores changed since it started.
    pub(super) fn move_to(&mut self, core: u32) -> bool {
        let Some(now) = self.unpinned() else { return false };
        if !holds(&now, core) {
            return false;
        }
        self.narrow_for_an_instant(&only(core), &now) == Some(core)
    }

    /// Whether this rank may move: it could run on every online core when
    /// the world started, and still can.
    pub(super) fn may_move(&self) -> bool {
        self.unpinned().is_some()
    }

    /// The calling thread's cores, if it may move: every online core, as
    /// when it started.
    fn unpinned(&self) -> Option<libc::cpu_set_t> {
        if !self.free {
            return None;
        }
        affinity().filter(|now| may_move(count(now), self.online))
    }

    /// Lets the calling thread run on `narrow` only (the kernel moves it
    /// before the call returns), then on every core again: the core it runs
    /// on then. Should the second step fail, it keeps the cores it had
    /// (`now`) and moves no more.
    fn narrow_for_an_instant(&mut self, narrow: &libc::cpu_set_t, now: &libc::cpu_set_t) -> Option<u32> {
        let moved = set_affinity(narrow).then(current_core).flatten();
        if !set_affinity(&every_core()) {
            // At least the cores it had: else it never ran on the others again.
            let back = set_affinity(now);
            warn!(back, "cannot let this rank run on every core again: it moves no more");
            self.free = false;
        }
        moved
    }
}

/// The cores this process may use, as `std::thread::available_parallelism`
/// counts them (its affinity and its cgroup's quota) when first asked: the
/// waits and the transport judge by the same count, read once. Process-wide:
/// the first caller's affinity counts (the world's start, before any move;
/// a test that pins its thread must not be the first caller in its binary).
pub(crate) fn usable() -> u32 {
    static USABLE: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *USABLE.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()) as u32)
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

/// A set of `core` alone (none if `core` is past the largest set).
fn only(core: u32) -> libc::cpu_set_t {
    // SAFETY: an all-zero cpu_set_t is an empty set.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if (core as usize) < libc::CPU_SETSIZE as usize {
        // SAFETY: `core` is below the set's size (checked).
        unsafe { libc::CPU_SET(core as usize, &mut one) };
    }
    one
}

/// A set of every core there may be.
fn every_core() -> libc::cpu_set_t {
    // SAFETY: an all-ones cpu_set_t is a valid set (of every index).
    unsafe { std::mem::transmute([u8::MAX; std::mem::size_of::<libc::cpu_set_t>()]) }
}

/// Whether `set` holds `core`.
fn holds(set: &libc::cpu_set_t, core: u32) -> bool {
    let core = core as usize;
    // SAFETY: CPU_ISSET only reads the set, at an index below its size
    // (checked first).
    core < libc::CPU_SETSIZE as usize && unsafe { libc::CPU_ISSET(core, set) }
}

/// The cores in `set`.
fn count(set: &libc::cpu_set_t) -> usize {
    // SAFETY: CPU_COUNT only reads the set.
    unsafe { libc::CPU_COUNT(set) as usize }
}

/// Whether a thread that may run on `allowed` cores, of `online`, may move:
/// it has somewhere to go, and nobody narrowed its cores.
fn may_move(allowed: usize, online: usize) -> bool {
    allowed >= 2 && allowed >= online
}

/// The cores online, as the kernel lists them (`sysconf` may count only the
/// caller's own cores); `usize::MAX` (no thread may move) if unknown.
fn online() -> usize {
    let list = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    count_list(&list).unwrap_or(usize::MAX)
}

/// The cores in a kernel CPU list such as `0-3,8,10-11`.
fn count_list(list: &str) -> Option<usize> {
    let mut n = 0usize;
    for part in list.trim().split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let (lo, hi): (usize, usize) = (lo.parse().ok()?, hi.parse().ok()?);
        n = n.checked_add(hi.checked_sub(lo)?.checked_add(1)?)?;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cores(set: &libc::cpu_set_t) -> Vec<usize> {
        // SAFETY: CPU_ISSET reads the set at indexes below its size.
        (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, set) }).collect()
    }

    /// Runs `f` on a thread of its own (affinity is per thread: the test
    /// harness keeps its cores), unless this thread may not change its cores.
    fn on_own_thread(f: impl FnOnce() + Send + 'static) {
        std::thread::spawn(move || {
            if !set_affinity(&affinity().unwrap()) {
                eprintln!("skipped: this thread may not set its cores");
                return;
            }
            f()
        })
        .join()
        .unwrap();
    }

    #[test]
    fn only_a_thread_with_every_online_core_moves() {
        assert!(may_move(2, 2));
        assert!(may_move(64, 64));
        assert!(!may_move(1, 1), "nowhere to go");
        assert!(!may_move(2, 4), "pinned to two of four");
        assert!(!may_move(3, 64), "pinned, or a container's cpuset");
        assert!(!may_move(2, usize::MAX), "the online cores unknown");
    }

    #[test]
    fn kernel_cpu_lists_are_counted() {
        assert_eq!(count_list("0-1\n"), Some(2));
        assert_eq!(count_list("0"), Some(1));
        assert_eq!(count_list("0-3,8,10-11"), Some(7));
        assert_eq!(count_list(""), None);
        assert_eq!(count_list("3-1"), None);
        assert_eq!(count_list("x"), None);
        assert_eq!(count_list("0-18446744073709551615"), None);
    }

    #[test]
    fn a_rank_steps_off_its_core_and_may_run_on_every_core_again() {
        on_own_thread(|| {
            let before = affinity().unwrap();
            let mut m = Mover::new();
            if !m.free {
                eprintln!("skipped: this thread may not run on every online core ({:?})", cores(&before));
                return;
            }
            let core = current_core().unwrap();
            let to = m.step_off(core).expect("moved");
            assert_ne!(to, core, "on another core");
            assert!(cores(&before).contains(&(to as usize)), "one it may run on");
            assert_eq!(cores(&affinity().unwrap()), cores(&before), "every core, again");
        });
    }

    #[test]
    fn a_rank_moves_to_the_core_at_its_place_and_may_run_on_every_core_again() {
        on_own_thread(|| {
            let before = affinity().unwrap();
            let mut m = Mover::new();
            if !m.free {
                eprintln!("skipped: this thread may not run on every online core ({:?})", cores(&before));
                return;
            }
            let mine = cores(&before);
            let n = mine.len() as u32;
            assert_eq!(m.home(0), Some(Home { core: mine[0] as u32, among: n }));
            assert_eq!(m.home(n + 1), Some(Home { core: mine[1] as u32, among: n }), "counted round the cores");
            for place in [1, 0] {
                let to = m.home(place).unwrap().core;
                // Where it runs once it may run on every core again is the kernel's.
                assert!(m.move_to(to), "moved to {to}");
                assert_eq!(cores(&affinity().unwrap()), mine, "every core, again");
            }
            assert!(!m.move_to(libc::CPU_SETSIZE as u32), "no such core");
        });
    }

    #[test]
    fn a_pinned_rank_stays_where_it_is() {
        on_own_thread(|| {
            let core = current_core().unwrap();
            assert!(set_affinity(&only(core)));
            let mut m = Mover::new();
            assert!(!m.may_move());
            assert_eq!(m.step_off(core), None);
            assert_eq!((m.home(1), m.move_to(core)), (None, false), "no home for a pinned rank");
            assert_eq!(cores(&affinity().unwrap()), vec![core as usize], "still pinned");
            assert_eq!(current_core(), Some(core));
        });
    }

    #[test]
    fn a_rank_pinned_after_it_started_stays_too() {
        on_own_thread(|| {
            let mut m = Mover::new();
            if !m.free {
                eprintln!("skipped: this thread may not run on every online core");
                return;
            }
            let core = current_core().unwrap();
            // Pinned (by a launcher, say) once the world had started.
            assert!(set_affinity(&only(core)));
            assert!(!m.may_move());
            assert_eq!(m.step_off(core), None);
            assert_eq!(cores(&affinity().unwrap()), vec![core as usize], "its pinning kept");
        });
    }
}
