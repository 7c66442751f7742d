//! `World`: the communicator of all ranks, point-to-point calls and the progress
//! loop that drives the engine and the sockets.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use p2pmp_core::mpi::{Completion, MpiConfig, MpiEngine, RequestId};

pub use p2pmp_core::mpi::{Payload, Status};

use crate::ckpt::Checkpointer;
use crate::done::Done;
use crate::env::{JOB_VAR, NODE_VAR, RANK_VAR, RankEnv, SIZE_VAR, to_hex};
use crate::error::{Error, Result};
use crate::group::Group;
use crate::local_node::{self, LocalNode};
use crate::pod::{self, Pod};
use crate::progress::{SpinPolicy, WaitStats, Waits};
use crate::reqmap::{ReqMap, ReqSet};
use crate::transport::Transport;

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
    /// The message bytes: held in place (up to [`Payload::INLINE`] bytes,
    /// copied in), a copy of their own (a small message up to 64 bytes, or
    /// one put together from chunks), or shared with the buffer they were
    /// read into (or with the sender's, to this rank itself).
    /// [`Payload::into_bytes`] gives them as `Bytes`.
    pub data: Payload,
}

impl Message {
    /// The data as elements of `T`.
    pub fn to_vec<T: Pod>(&self) -> Result<Vec<T>> {
        pod::from_bytes(&self.data)
    }
}

/// The message of a finished receive.
fn received(c: Completed) -> Result<Message> {
    match c {
        Completed::Received(m) => Ok(m),
        _ => Err(Error::Invalid("waited for a send (or a cancelled receive) as if it were a receive".into())),
    }
}

/// How a request finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completed {
    /// A send: its buffer is free.
    Sent,
    /// A receive, with what arrived.
    Received(Message),
    /// A receive [`World::cancel`] took back before it matched.
    Cancelled,
}

impl Completed {
    /// The message of a finished receive.
    pub fn message(self) -> Option<Message> {
        match self {
            Completed::Received(m) => Some(m),
            Completed::Sent | Completed::Cancelled => None,
        }
    }
}

/// The world communicator of one rank: every MPI call goes through it.
///
/// Progress happens inside calls, on the calling thread: a blocking call polls,
/// yields or sleeps as the machine is at that moment (see `progress`).
#[derive(Debug)]
pub struct World {
    pub(crate) engine: MpiEngine,
    pub(crate) net: Transport,
    rank: u32,
    size: u32,
    pub(crate) done: Done,
    /// Requests nobody will wait for ([`World::forget`]): dropped on completion.
    pub(crate) forgotten: ReqSet,
    /// Sends being cancelled: the receiver's answer once it came.
    pub(crate) cancels: ReqMap<Option<bool>>,
    /// How waits poll, yield and sleep, and what they learned.
    pub(crate) waits: Waits,
    /// The latest receive posted for one known source, and that source: waiting
    /// for it can read that peer's socket directly.
    recv_hint: Option<(RequestId, u32)>,
    finalized: bool,
    /// Where the collectives run (see [`World::collectives_in`]).
    pub(crate) coll: CollCtx,
    /// The lowest context number this process has not used (see
    /// [`World::comm_dup`]); 0 and 1 are the world's and `MPI_COMM_SELF`'s.
    pub(crate) next_ctx: u32,
    /// Protected regions, hooks and the snapshot schedule (see [`crate::ckpt`]).
    pub(crate) ckpt: Checkpointer,
    /// The node of a process started alone (see [`init`]): last, so that it
    /// stops after the rest has said goodbye to it.
    own_node: Option<LocalNode>,
}

/// The communicator the collectives run on: its engine id for collective
/// traffic, its group, and this process's rank in it.
#[derive(Debug, Clone)]
pub(crate) struct CollCtx {
    pub(crate) id: u32,
    pub(crate) group: Group,
    pub(crate) me: u32,
}

/// Starts MPI for this process from the environment its node gave it
/// (`P2PMP_JOB`, `P2PMP_RANK`, `P2PMP_SIZE`, `P2PMP_NODE`, `P2PMP_HOST`).
///
/// A process started alone, with none of the variables a node or
/// `p2pmp-launch` sets (`P2PMP_JOB`, `P2PMP_RANK`, `P2PMP_SIZE`,
/// `P2PMP_NODE`), is a world of one rank with a node of its own, as MPI's
/// singleton `MPI_Init` is (see [`crate::local_node`]).
pub fn init() -> Result<World> {
    if RankEnv::none_set(|k| std::env::var_os(k).is_some()) {
        return World::alone(MpiConfig::default());
    }
    World::start(RankEnv::from_env()?, MpiConfig::default())
}

/// Asks the C allocator to keep freed memory for reuse: message buffers of
/// 64 KiB to a few MiB come and go all the time, and memory given back to the
/// kernel (unmapped, or trimmed off the heap) is faulted in again, page by
/// page, at the next one (a fifth of a 64 KiB Allreduce's time on 8 ranks).
/// Left alone when the user tunes the allocator (`GLIBC_TUNABLES`,
/// `MALLOC_*_`).
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let tuned = std::env::vars_os().any(|(k, _)| {
            let k = k.to_string_lossy();
            k == "GLIBC_TUNABLES" || (k.starts_with("MALLOC_") && k.ends_with('_'))
        });
        if !tuned {
            // SAFETY: mallopt(3) only sets allocator parameters; 32 MiB is
            // glibc's largest mmap threshold on 64-bit, and a trim threshold of
            // 1 GiB keeps up to that much free heap.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
                libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
            }
        }
    }
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl World {
    /// Starts MPI with an explicit environment and engine configuration.
    pub fn start(env: RankEnv, config: MpiConfig) -> Result<World> {
        epoch();
        keep_freed_memory();
        let mut ckpt = Checkpointer::from_lookup(&env.job, |k| std::env::var(k).ok())?;
        ckpt.move_at = crate::ckpt::fault_move_cuts(env.rank);
        // A process taking a moved rank's place goes on with its engine.
        let (engine, next_ctx) = match crate::ckpt::resumed(&mut ckpt, &config, env.rank, env.size)? {
            Some(resumed) => resumed,
            None => (MpiEngine::new(config, env.rank, env.size)?, 2),
        };
        let net = Transport::start(&env)?;
        Ok(World {
            engine,
            net,
            rank: env.rank,
            size: env.size,
            done: Done::default(),
            forgotten: ReqSet::default(),
            cancels: ReqMap::default(),
            waits: Waits::new(env.size),
            recv_hint: None,
            finalized: false,
            coll: CollCtx { id: COMM_COLL, group: Group::first(env.size), me: env.rank },
            next_ctx,
            ckpt,
            own_node: None,
        })
    }

    /// A world of one rank with a node of its own, for a process started
    /// alone (see [`init`]); the optional variables (`P2PMP_HOST`, ...) count.
    fn alone(config: MpiConfig) -> Result<World> {
        let (node, control) = local_node::start("127.0.0.1:0", Vec::new())
            .map_err(|e| Error::Node(format!("a process started alone runs a node of its own: {e:#}")))?;
        let env = RankEnv::from_lookup(|k| match k {
            JOB_VAR => Some(to_hex(&local_node::fresh_job_id())),
            RANK_VAR => Some("0".into()),
            SIZE_VAR => Some("1".into()),
            NODE_VAR => Some(control.to_string()),
            other => std::env::var(other).ok(),
        })?;
        let mut w = World::start(env, config)?;
        w.own_node = Some(node);
        Ok(w)
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

    /// Replaces the adaptive waits with a fixed spin-then-block policy.
    pub fn set_spin_policy(&mut self, p: SpinPolicy) {
        self.waits.set_fixed(p);
    }

    /// What this rank's waits came to so far: polled, yielded, slept, and
    /// the doorbells it rang for its shared-memory peers.
    pub fn wait_stats(&self) -> WaitStats {
        WaitStats { bells_rung: self.net.bells_rung(), links_open: self.net.links_open(), ..self.waits.stats }
    }

    // ----- point to point

    /// Starts sending `data` to `dest` with `tag` (the bytes are copied once).
    pub fn isend<T: Pod>(&mut self, data: &[T], dest: u32, tag: i32) -> Result<Request> {
        self.isend_on(COMM_WORLD, pod::to_payload(data), dest, tag)
    }

    /// Starts sending shared bytes (no copy), or a received message's
    /// [`Payload`].
    pub fn isend_bytes(&mut self, data: impl Into<Payload>, dest: u32, tag: i32) -> Result<Request> {
        self.isend_on(COMM_WORLD, data, dest, tag)
    }

    pub(crate) fn isend_on(&mut self, comm: u32, data: impl Into<Payload>, dest: u32, tag: i32) -> Result<Request> {
        let req = self.engine.isend(comm, dest, tag, data)?;
        self.after_call()?;
        Ok(Request(req))
    }

    /// Starts a synchronous send: it completes only once a receive took the
    /// message (`MPI_Issend`; a message of any size goes by rendezvous).
    pub fn issend_bytes(&mut self, data: impl Into<Payload>, dest: u32, tag: i32) -> Result<Request> {
        self.issend_on(COMM_WORLD, data, dest, tag)
    }

    pub(crate) fn issend_on(&mut self, comm: u32, data: impl Into<Payload>, dest: u32, tag: i32) -> Result<Request> {
        let req = self.engine.issend(comm, dest, tag, data)?;
        self.after_call()?;
        Ok(Request(req))
    }

    /// Sends `data` to `dest` and returns once a receive took it (`MPI_Ssend`).
    pub fn ssend<T: Pod>(&mut self, data: &[T], dest: u32, tag: i32) -> Result<()> {
        let r = self.issend_on(COMM_WORLD, pod::to_payload(data), dest, tag)?;
        self.wait(r).map(|_| ())
    }

    /// Posts a receive from `source` (or [`ANY_SOURCE`]) with `tag` (or [`ANY_TAG`]).
    pub fn irecv(&mut self, source: Option<u32>, tag: Option<i32>) -> Result<Request> {
        self.irecv_on(COMM_WORLD, source, tag)
    }

    pub(crate) fn irecv_on(&mut self, comm: u32, source: Option<u32>, tag: Option<i32>) -> Result<Request> {
        self.irecv_at(comm, source, tag, Instant::now())
    }

    /// [`World::irecv_on`] at `now`, a clock read just before.
    fn irecv_at(&mut self, comm: u32, source: Option<u32>, tag: Option<i32>, now: Instant) -> Result<Request> {
        let req = self.engine.irecv(now, comm, source, tag)?;
        // With two ranks, any source is the other one.
        let from = source.or_else(|| (self.size == 2).then(|| 1 - self.rank)).filter(|&s| s != self.rank);
        self.recv_hint = from.map(|s| (req, s));
        self.after_call_at(now)?;
        Ok(Request(req))
    }

    /// Sends `data` to `dest` and returns once the buffer may be reused.
    pub fn send<T: Pod>(&mut self, data: &[T], dest: u32, tag: i32) -> Result<()> {
        self.send_on(COMM_WORLD, pod::to_payload(data), dest, tag)
    }

    /// Sends shared bytes (or a received message's [`Payload`]) and returns
    /// once they were handed on.
    pub fn send_bytes(&mut self, data: impl Into<Payload>, dest: u32, tag: i32) -> Result<()> {
        self.send_on(COMM_WORLD, data, dest, tag)
    }

    /// A blocking send: a message that goes eagerly needs no request.
    pub(crate) fn send_on(&mut self, comm: u32, data: impl Into<Payload>, dest: u32, tag: i32) -> Result<()> {
        match self.engine.send_now(comm, dest, tag, data)? {
            Ok(()) => self.after_call(),
            Err(data) => {
                let r = self.isend_on(comm, data, dest, tag)?;
                self.wait(r).map(drop)
            }
        }
    }

    /// Receives one message as bytes.
    pub fn recv_bytes(&mut self, source: Option<u32>, tag: Option<i32>) -> Result<Message> {
        self.recv_on(COMM_WORLD, source, tag)
    }

    /// A blocking receive on `comm`: posts it and waits, by one clock read
    /// for both (on a virtual machine a read costs tens of nanoseconds, a
    /// good part of a small message's way). What posting it wrote (a frame
    /// it let go, an acknowledgement) counts as the wait's progress.
    pub(crate) fn recv_on(&mut self, comm: u32, source: Option<u32>, tag: Option<i32>) -> Result<Message> {
        let began = (Instant::now(), self.net.written());
        let r = self.irecv_at(comm, source, tag, began.0)?;
        received(self.wait_since(r, Some(began))?)
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

    /// Whether request `id` has finished: its completion is here, or a cancel
    /// of it was answered (taken back; else the send's completion is needed too).
    fn finished(&self, id: RequestId) -> bool {
        match self.cancels.get(&id) {
            Some(None) => false,
            Some(Some(true)) => true,
            _ => self.done.contains_key(&id),
        }
    }

    /// Waits for `req` to finish.
    pub fn wait(&mut self, req: Request) -> Result<Completed> {
        self.wait_since(req, None)
    }

    /// [`World::wait`], for a wait that began at `began` if known (see
    /// [`World::progress_until_since`]: the call that posted `req` just before).
    fn wait_since(&mut self, req: Request, began: Option<(Instant, u64)>) -> Result<Completed> {
        let id = req.0;
        let from = self.recv_hint.filter(|h| h.0 == id).map(|h| h.1);
        self.progress_until_since(from, began, |w| w.finished(id))?;
        self.engine.release(id);
        if self.cancels.remove(&id) == Some(Some(true)) {
            self.done.remove(&id);
            return Ok(Completed::Cancelled);
        }
        let c = self.done.remove(&id).expect("present: waited for it");
        Ok(match c {
            Completion::Recv { status, data, .. } => Completed::Received(Message { status, data }),
            Completion::Cancelled { .. } => Completed::Cancelled,
            Completion::Send { .. } | Completion::CancelAnswer { .. } => Completed::Sent,
        })
    }

    /// Waits for a receive and returns its message.
    pub(crate) fn wait_msg(&mut self, req: Request) -> Result<Message> {
        received(self.wait(req)?)
    }

    /// Waits for every request, results in the same order.
    pub fn waitall(&mut self, reqs: Vec<Request>) -> Result<Vec<Completed>> {
        self.until_all_finished(&reqs)?;
        reqs.into_iter().map(|r| self.wait(r)).collect()
    }

    /// Waits for every one of a collective's sends: [`World::waitall`]
    /// without a vector of results to make and drop.
    pub(crate) fn wait_sends(&mut self, reqs: Vec<Request>) -> Result<()> {
        self.until_all_finished(&reqs)?;
        for r in reqs {
            self.wait(r)?;
        }
        Ok(())
    }

    /// Waits until every one of `reqs` has finished (finish each with [`World::wait`]).
    pub fn wait_all_done(&mut self, reqs: &[&Request]) -> Result<()> {
        self.until_all_finished(reqs)
    }

    /// Makes progress until every one of `reqs` has finished.
    fn until_all_finished<R: std::borrow::Borrow<Request>>(&mut self, reqs: &[R]) -> Result<()> {
        self.progress_until(None, |w| reqs.iter().all(|r| w.finished(r.borrow().0)))
    }

    /// Waits until one of `reqs` has finished and returns its index (the lowest
    /// finished one); finish it with [`World::wait`]. `None` for an empty list.
    pub fn wait_any(&mut self, reqs: &[&Request]) -> Result<Option<usize>> {
        if reqs.is_empty() {
            return Ok(None);
        }
        let first = |w: &World| reqs.iter().position(|r| w.finished(r.0));
        self.progress_until(None, |w| first(w).is_some())?;
        Ok(first(self))
    }

    /// Whether `req` has finished (then [`World::wait`] returns at once). Makes
    /// progress without blocking.
    pub fn test(&mut self, req: &Request) -> Result<bool> {
        if !self.finished(req.0) {
            self.progress_once(Some(Duration::ZERO))?;
        }
        Ok(self.finished(req.0))
    }

    /// Cancels `req` (MPI_Cancel): a receive not matched yet completes as
    /// [`Completed::Cancelled`] at once (true); a send is taken back if no
    /// receive took its message yet, which its receiver decides ([`World::wait`]
    /// then says which happened); false for anything but a receive cancelled now.
    pub fn cancel(&mut self, req: &Request) -> Result<bool> {
        let now = self.engine.cancel(req.0);
        if !now && !self.cancels.contains_key(&req.0) && !self.forgotten.contains(&req.0) {
            let recv_done =
                matches!(self.done.get(&req.0), Some(Completion::Recv { .. } | Completion::Cancelled { .. }));
            if !recv_done {
                self.cancels.insert(req.0, None);
                self.engine.cancel_send(req.0);
            }
        }
        self.after_call()?;
        Ok(now)
    }

    /// Gives up waiting for `req`: it goes on (a send's data still reaches its
    /// receiver) and its completion is dropped.
    pub fn forget(&mut self, req: Request) {
        self.engine.release(req.0);
        self.cancels.remove(&req.0);
        if self.done.remove(&req.0).is_none() {
            self.forgotten.insert(req.0);
        }
    }

    /// The status of a message a receive with these arguments would take now.
    pub fn iprobe(&mut self, source: Option<u32>, tag: Option<i32>) -> Result<Option<Status>> {
        let world = self.comm_world();
        self.iprobe_in(&world, source, tag)
    }

    /// Waits until a matching message is there and returns its status.
    pub fn probe(&mut self, source: Option<u32>, tag: Option<i32>) -> Result<Status> {
        let world = self.comm_world();
        self.probe_in(&world, source, tag)
    }

    /// Runs `f` with the collectives on engine id `id` among `group`, where this
    /// process has rank `me`.
    pub(crate) fn collectives_on<R, E>(
        &mut self,
        id: u32,
        group: Group,
        me: u32,
        f: impl FnOnce(&mut World) -> Result<R, E>,
    ) -> Result<R, E> {
        let saved = std::mem::replace(&mut self.coll, CollCtx { id, group, me });
        let r = f(self);
        self.coll = saved;
        r
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
        // Everything written, acknowledged and acknowledged back, except to peers
        // the engine knows are gone (a broken link is reopened meanwhile), within
        // reason.
        let now = Instant::now();
        let deadline = now + Duration::from_secs(10);
        self.net.start_closing(now);
        self.engine.start_closing(now);
        self.after_call()?;
        while !(self.net.tx_empty() && self.engine.may_leave(Instant::now())) && Instant::now() < deadline {
            self.progress_once(Some(Duration::from_millis(1)))?;
        }
        self.net.unregister();
        Ok(())
    }
}

impl Drop for World {
    fn drop(&mut self) {
        // Without finalize: still hand queued bytes to the kernel.
        let _ = self.shutdown();
    }
}
