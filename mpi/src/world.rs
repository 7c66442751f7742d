//! `World`: the communicator of all ranks, point-to-point calls and the progress
//! loop that drives the engine and the sockets.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use p2pmp_core::mpi::{Completion, MpiConfig, MpiEngine, RequestId};

pub use p2pmp_core::mpi::Status;

use crate::comm::CommId;
use crate::env::RankEnv;
use crate::error::{Error, Result};
use crate::pod::{self, Pod};
use crate::sock::Wait;
use crate::transport::{DIRECT_MAX, Transport};

/// Communicator id of point-to-point traffic on the world communicator.
pub(crate) const COMM_WORLD: u32 = 0;
/// Communicator id of collective traffic, kept apart from user messages.
pub(crate) const COMM_COLL: u32 = 1;

/// Wildcard source for receives and probes.
pub const ANY_SOURCE: Option<u32> = None;
/// Wildcard tag for receives and probes.
pub const ANY_TAG: Option<i32> = None;

/// A non-blocking send or receive in progress. Finish it with [`World::wait`].
#[derive(Debug, PartialEq, Eq, Hash)]
#[must_use = "a request must be waited for"]
pub struct Request(RequestId);

/// A received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub status: Status,
    /// The message bytes (shared, zero-copy from the socket buffer when possible).
    pub data: Bytes,
}

impl Message {
    /// The data as elements of `T`.
    pub fn to_vec<T: Pod>(&self) -> Result<Vec<T>> {
        pod::from_bytes(&self.data)
    }
}

/// How a request finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completed {
    /// A send: its buffer is free.
    Sent,
    /// A receive, with what arrived.
    Received(Message),
}

impl Completed {
    /// The message of a finished receive.
    pub fn message(self) -> Option<Message> {
        match self {
            Completed::Received(m) => Some(m),
            Completed::Sent => None,
        }
    }
}

/// How long a blocking call polls before it sleeps in the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpinPolicy {
    /// Busy-polling (non-blocking socket checks) before anything else.
    pub spin: Duration,
    /// Then this many rounds of yielding the CPU between checks.
    pub yields: u32,
}

impl SpinPolicy {
    /// Spin (at most 100 µs, adapted per wait) when every rank can have a core
    /// (counting the host's load average as busy cores); block at once when ranks
    /// outnumber cores (spinning then steals the CPU the
    /// sender needs). `P2PMP_SPIN_US` and
    /// `P2PMP_YIELDS` override.
    pub fn for_world(size: u32) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        // Other work on the host (the one-minute load average) counts as ranks.
        let load = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|l| l.parse::<f64>().ok()))
            .unwrap_or(0.0);
        let mut p = if f64::from(size) + load <= cores {
            SpinPolicy { spin: Duration::from_micros(100), yields: 0 }
        } else {
            SpinPolicy { spin: Duration::ZERO, yields: 0 }
        };
        if let Some(us) = std::env::var("P2PMP_SPIN_US").ok().and_then(|v| v.parse().ok()) {
            p.spin = Duration::from_micros(us);
        }
        if let Some(y) = std::env::var("P2PMP_YIELDS").ok().and_then(|v| v.parse().ok()) {
            p.yields = y;
        }
        p
    }
}

/// The world communicator of one rank: every MPI call goes through it.
///
/// Progress happens inside calls, on the calling thread: a blocking call polls
/// the sockets, spins briefly (only when ranks do not outnumber cores), then
/// sleeps until data arrives: in `recv` on the socket of the one rank it waits
/// for, else in `epoll`.
#[derive(Debug)]
pub struct World {
    pub(crate) engine: MpiEngine,
    pub(crate) net: Transport,
    rank: u32,
    size: u32,
    done: HashMap<RequestId, Completion>,
    spin: SpinPolicy,
    /// The current spin budget, adapted between zero and `spin.spin`: doubled when
    /// a wait ended while spinning, halved when it had to sleep anyway (on a busy
    /// host spinning only steals the CPU the sender needs).
    spin_now: Duration,
    /// The latest receive posted for one known source, and that source: waiting
    /// for it can read that peer's socket directly.
    recv_hint: Option<(RequestId, u32)>,
    finalized: bool,
    /// The engine communicator id collectives use (see `World::collectives_in`).
    pub(crate) coll_comm: u32,
}

/// Starts MPI for this process from the environment its node gave it
/// (`P2PMP_JOB`, `P2PMP_RANK`, `P2PMP_SIZE`, `P2PMP_NODE`, `P2PMP_HOST`).
pub fn init() -> Result<World> {
    World::start(RankEnv::from_env()?, MpiConfig::default())
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl World {
    /// Starts MPI with an explicit environment and engine configuration.
    pub fn start(env: RankEnv, config: MpiConfig) -> Result<World> {
        epoch();
        let engine = MpiEngine::new(config, env.rank, env.size)?;
        let net = Transport::start(env.job, env.rank, env.size, env.node, env.host, env.failure_timeout)?;
        Ok(World {
            engine,
            net,
            rank: env.rank,
            size: env.size,
            done: HashMap::new(),
            spin: SpinPolicy::for_world(env.size),
            spin_now: SpinPolicy::for_world(env.size).spin,
            recv_hint: None,
            finalized: false,
            coll_comm: COMM_COLL,
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The host name.
    pub fn processor_name(&self) -> String {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .or_else(|_| std::fs::read_to_string("/etc/hostname"))
            .map(|s| s.trim().to_string())
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "localhost".into())
    }

    /// Seconds since an arbitrary instant fixed at start-up.
    pub fn wtime(&self) -> f64 {
        epoch().elapsed().as_secs_f64()
    }

    /// The spin-then-block policy of blocking calls.
    pub fn set_spin_policy(&mut self, p: SpinPolicy) {
        self.spin = p;
        self.spin_now = p.spin;
    }

    // ----- point to point

    /// Starts sending `data` to `dest` with `tag` (the bytes are copied once).
    pub fn isend<T: Pod>(&mut self, data: &[T], dest: u32, tag: i32) -> Result<Request> {
        self.isend_bytes(pod::to_bytes(data), dest, tag)
    }

    /// Starts sending shared bytes (no copy).
    pub fn isend_bytes(&mut self, data: Bytes, dest: u32, tag: i32) -> Result<Request> {
        self.isend_on(COMM_WORLD, data, dest, tag)
    }

    pub(crate) fn isend_on(&mut self, comm: u32, data: Bytes, dest: u32, tag: i32) -> Result<Request> {
        let req = self.engine.isend(comm, dest, tag, data)?;
        self.after_call()?;
        Ok(Request(req))
    }

    /// Starts a synchronous send: it completes only once a receive took the
    /// message (`MPI_Issend`; a message of any size goes by rendezvous).
    pub fn issend_bytes(&mut self, data: Bytes, dest: u32, tag: i32) -> Result<Request> {
        self.issend_on(COMM_WORLD, data, dest, tag)
    }

    pub(crate) fn issend_on(&mut self, comm: u32, data: Bytes, dest: u32, tag: i32) -> Result<Request> {
        let req = self.engine.issend(comm, dest, tag, data)?;
        self.after_call()?;
        Ok(Request(req))
    }

    /// Sends `data` to `dest` and returns once a receive took it (`MPI_Ssend`).
    pub fn ssend<T: Pod>(&mut self, data: &[T], dest: u32, tag: i32) -> Result<()> {
        let r = self.issend_bytes(pod::to_bytes(data), dest, tag)?;
        self.wait(r).map(|_| ())
    }

    /// Posts a receive from `source` (or [`ANY_SOURCE`]) with `tag` (or [`ANY_TAG`]).
    pub fn irecv(&mut self, source: Option<u32>, tag: Option<i32>) -> Result<Request> {
        self.irecv_on(COMM_WORLD, source, tag)
    }

    pub(crate) fn irecv_on(&mut self, comm: u32, source: Option<u32>, tag: Option<i32>) -> Result<Request> {
        let req = self.engine.irecv(Instant::now(), comm, source, tag)?;
        // With two ranks, any source is the other one.
        let from = source.or_else(|| (self.size == 2).then(|| 1 - self.rank)).filter(|&s| s != self.rank);
        self.recv_hint = from.map(|s| (req, s));
        self.after_call()?;
        Ok(Request(req))
    }

    /// Sends `data` to `dest` and returns once the buffer may be reused.
    pub fn send<T: Pod>(&mut self, data: &[T], dest: u32, tag: i32) -> Result<()> {
        let r = self.isend(data, dest, tag)?;
        self.wait(r).map(|_| ())
    }

    /// Sends shared bytes and returns once they were handed on.
    pub fn send_bytes(&mut self, data: Bytes, dest: u32, tag: i32) -> Result<()> {
        let r = self.isend_bytes(data, dest, tag)?;
        self.wait(r).map(|_| ())
    }

    /// Receives one message as bytes.
    pub fn recv_bytes(&mut self, source: Option<u32>, tag: Option<i32>) -> Result<Message> {
        let r = self.irecv(source, tag)?;
        self.wait_msg(r)
    }

    /// Receives one message as a vector of `T`.
    pub fn recv<T: Pod>(&mut self, source: Option<u32>, tag: Option<i32>) -> Result<(Vec<T>, Status)> {
        let m = self.recv_bytes(source, tag)?;
        Ok((m.to_vec()?, m.status))
    }

    /// Receives one message into `buf`, which must be exactly its size.
    pub fn recv_into<T: Pod>(&mut self, buf: &mut [T], source: Option<u32>, tag: Option<i32>) -> Result<Status> {
        let m = self.recv_bytes(source, tag)?;
        pod::copy_into(buf, &m.data)?;
        Ok(m.status)
    }

    /// Waits for `req` to finish.
    pub fn wait(&mut self, req: Request) -> Result<Completed> {
        let id = req.0;
        let from = self.recv_hint.filter(|h| h.0 == id).map(|h| h.1);
        self.progress_until(from, |w| w.done.contains_key(&id))?;
        let c = self.done.remove(&id).expect("present: waited for it");
        Ok(match c {
            Completion::Recv { status, data, .. } => Completed::Received(Message { status, data }),
            _ => Completed::Sent,
        })
    }

    /// Waits for a receive and returns its message.
    pub(crate) fn wait_msg(&mut self, req: Request) -> Result<Message> {
        match self.wait(req)? {
            Completed::Received(m) => Ok(m),
            Completed::Sent => Err(Error::Invalid("waited for a send as if it were a receive".into())),
        }
    }

    /// Waits for every request, results in the same order.
    pub fn waitall(&mut self, reqs: Vec<Request>) -> Result<Vec<Completed>> {
        let ids: Vec<RequestId> = reqs.iter().map(|r| r.0).collect();
        self.progress_until(None, |w| ids.iter().all(|id| w.done.contains_key(id)))?;
        reqs.into_iter().map(|r| self.wait(r)).collect()
    }

    /// Waits until one of `reqs` has finished and returns its index (the lowest
    /// finished one); finish it with [`World::wait`]. `None` for an empty list.
    pub fn wait_any(&mut self, reqs: &[&Request]) -> Result<Option<usize>> {
        if reqs.is_empty() {
            return Ok(None);
        }
        let first = |w: &World| reqs.iter().position(|r| w.done.contains_key(&r.0));
        self.progress_until(None, |w| first(w).is_some())?;
        Ok(first(self))
    }

    /// Whether `req` has finished (then [`World::wait`] returns at once). Makes
    /// progress without blocking.
    pub fn test(&mut self, req: &Request) -> Result<bool> {
        if !self.done.contains_key(&req.0) {
            self.progress_once(Some(Duration::ZERO))?;
        }
        Ok(self.done.contains_key(&req.0))
    }

    /// The status of a message a receive with these arguments would take now.
    pub fn iprobe(&mut self, source: Option<u32>, tag: Option<i32>) -> Result<Option<Status>> {
        self.iprobe_in(CommId::WORLD, source, tag)
    }

    /// Waits until a matching message is there and returns its status.
    pub fn probe(&mut self, source: Option<u32>, tag: Option<i32>) -> Result<Status> {
        self.probe_in(CommId::WORLD, source, tag)
    }

    /// Ends MPI: waits until every rank got here, hands everything to the peers,
    /// and withdraws the registration.
    pub fn finalize(mut self) -> Result<()> {
        self.barrier()?;
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        if self.finalized {
            return Ok(());
        }
        self.finalized = true;
        // Everything written and acknowledged, except by peers that look gone (a
        // broken link is reopened meanwhile), within reason.
        let deadline = Instant::now() + Duration::from_secs(10);
        self.net.closing = true;
        let settled = |w: &World| {
            w.net.tx_empty() && (0..w.size).all(|r| r == w.rank || w.engine.unacked_len(r) == 0 || w.net.unreachable(r))
        };
        while !settled(self) && Instant::now() < deadline {
            self.progress_once(Some(Duration::from_millis(1)))?;
        }
        self.net.unregister();
        Ok(())
    }

    // ----- progress

    /// Drains the engine into the sockets and its completions into `done`.
    fn after_call(&mut self) -> Result<()> {
        let now = Instant::now();
        self.net.pump(&mut self.engine, now)?;
        while let Some(c) = self.engine.poll_completion() {
            self.done.insert(c.req(), c);
        }
        Ok(())
    }

    /// One round: wait up to `timeout` for sockets, fire timers, reconnect, drain.
    pub(crate) fn progress_once(&mut self, timeout: Option<Duration>) -> Result<bool> {
        let got = self.net.poll_io(&mut self.engine, timeout)?;
        self.after_io()?;
        Ok(got)
    }

    /// After socket input: fires due timers, reconnects, drains the engine.
    fn after_io(&mut self) -> Result<()> {
        let now = Instant::now();
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
        }
        self.net.retry_due(&mut self.engine, now)?;
        self.after_call()
    }

    /// One round reading only rank `from`'s socket (see [`Transport::read_direct`]);
    /// `None` when that cannot be done now.
    fn progress_direct(&mut self, from: u32, wait: Wait) -> Result<Option<bool>> {
        let got = self.net.read_direct(&mut self.engine, from, wait)?;
        if got.is_some() {
            self.after_io()?;
        }
        Ok(got)
    }

    /// Makes progress until `done(self)`: busy-polls for `spin`, then polls and
    /// yields, then sleeps in the kernel until the next socket event or deadline.
    /// `from`: the one rank whose bytes can finish the wait, if known; its socket
    /// is then read directly, spinning and sleeping in `recv` itself.
    pub(crate) fn progress_until(&mut self, from: Option<u32>, mut done: impl FnMut(&World) -> bool) -> Result<()> {
        if done(self) {
            return Ok(());
        }
        let mut slept = false;
        loop {
            // Poll hot, then politely, then sleep; after any wake-up, hot again.
            // Without a spin or yield budget, sleep at once: a blocking read or
            // poll returns at once when something is ready.
            if self.spin.spin.is_zero() && self.spin.yields == 0 {
                self.sleep_once(from)?;
                if done(self) {
                    return Ok(());
                }
                continue;
            }
            let start = Instant::now();
            let mut rounds = 0u32;
            loop {
                let got = match from {
                    Some(f) => match self.progress_direct(f, Wait::No)? {
                        Some(got) => got,
                        None => self.progress_once(Some(Duration::ZERO))?,
                    },
                    None => self.progress_once(Some(Duration::ZERO))?,
                };
                if done(self) {
                    if !slept && rounds == 0 {
                        let grown = (self.spin_now * 2).max(Duration::from_micros(1));
                        self.spin_now = grown.min(self.spin.spin);
                    }
                    return Ok(());
                }
                if got {
                    continue;
                }
                if start.elapsed() < self.spin_now {
                    std::hint::spin_loop();
                    continue;
                }
                if rounds < self.spin.yields {
                    rounds += 1;
                    std::thread::yield_now();
                    continue;
                }
                break;
            }
            if !slept {
                slept = true;
                self.spin_now /= 2;
            }
            self.sleep_once(from)?;
            if done(self) {
                return Ok(());
            }
        }
    }

    /// Sleeps in the kernel until a socket event or the next deadline, then
    /// handles what happened. With `from` known, no deadline within
    /// [`DIRECT_MAX`] and nothing left to write, it sleeps in `recv` on that
    /// rank's socket (one system call) rather than in `epoll_wait`.
    fn sleep_once(&mut self, from: Option<u32>) -> Result<()> {
        let now = Instant::now();
        let deadline = [self.engine.poll_timeout(), self.net.next_retry(&self.engine)].into_iter().flatten().min();
        if let Some(f) = from.filter(|_| deadline.is_none_or(|d| d >= now + DIRECT_MAX)) {
            if self.progress_direct(f, Wait::Block)?.is_some() {
                return Ok(());
            }
        }
        let timeout = deadline.map_or(Duration::from_secs(1), |d| d.saturating_duration_since(now));
        self.progress_once(Some(timeout.min(Duration::from_secs(1))))?;
        Ok(())
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // Without finalize: still hand queued bytes to the kernel.
        let _ = self.shutdown();
    }
}
