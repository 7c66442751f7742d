//! The engine: inputs, application calls, outputs, and the eager path.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::time::Instant;

use super::flow::Peer;
use super::msg::{MpiMsg, SeqHdr};
use super::queues::{Held, Key, KeyHasher, Origin, Pattern, PostedQueue, Unexpected, UnexpectedQueue};
use super::rendezvous::Awaiting;
use super::{Completion, MpiConfig, MpiError, MpiStats, Payload, RequestId, Status, Transmit, TransmitRef};
use crate::time::{TimerKey, TimerTable};
use crate::wire::Envelope;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timer {
    /// Send the acknowledgements and credit that were held back.
    Ack,
}

impl TimerKey for Timer {
    const COUNT: usize = 1;
    const ALL: &'static [Timer] = &[Timer::Ack];
    fn index(self) -> usize {
        self as usize
    }
}

/// The matching, eager/rendezvous and reliability engine of one MPI process.
#[derive(Debug)]
pub struct MpiEngine {
    pub(super) config: MpiConfig,
    pub(super) rank: u32,
    pub(super) size: u32,
    /// Indexed by rank; our own entry is unused.
    pub(super) peers: Vec<Peer>,
    pub(super) posted: PostedQueue,
    pub(super) unexpected: UnexpectedQueue,
    /// Matched rendezvous receives waiting for data, by (source, Rts sequence number).
    pub(super) awaiting: BTreeMap<(u32, u64), Awaiting>,
    /// Frames to transmit, as (peer, sequence number) into that peer's unacked store.
    out: VecDeque<(u32, u64)>,
    /// Peers owed an acknowledgement now / after the ack delay.
    ack_now: VecDeque<u32>,
    ack_later: Vec<u32>,
    pub(super) completions: VecDeque<Completion>,
    timers: TimerTable<Timer>,
    pub(super) next_req: u64,
    pub(super) stats: MpiStats,
    /// Leaving (`MPI_Finalize`): acknowledgements go out without delay.
    pub(super) closing: bool,
    /// Sends not yet released by the application, with their destination and
    /// the sequence number of their Eager or Rts frame (0 to this rank): what a
    /// cancel needs to name the message.
    pub(super) sent: HashMap<RequestId, (u32, u64), BuildHasherDefault<KeyHasher>>,
    /// Send cancels waiting for the receiver's answer, by (peer, message seq).
    pub(super) cancelling: BTreeMap<(u32, u64), RequestId>,
}

impl MpiEngine {
    /// The engine of rank `rank` in a world of `size` ranks.
    pub fn new(config: MpiConfig, rank: u32, size: u32) -> Result<Self, MpiError> {
        config.validate()?;
        if rank >= size {
            return Err(MpiError::InvalidRank { rank, size });
        }
        let peers = (0..size).map(|_| Peer::new(&config)).collect();
        Ok(MpiEngine {
            config,
            rank,
            size,
            peers,
            posted: PostedQueue::default(),
            unexpected: UnexpectedQueue::default(),
            awaiting: BTreeMap::new(),
            out: VecDeque::new(),
            ack_now: VecDeque::new(),
            ack_later: Vec::new(),
            completions: VecDeque::new(),
            timers: TimerTable::default(),
            next_req: 0,
            stats: MpiStats::default(),
            closing: false,
            sent: HashMap::default(),
            cancelling: BTreeMap::new(),
        })
    }

    // ----- getters

    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The configuration.
    pub fn config(&self) -> &MpiConfig {
        &self.config
    }

    /// What was sent, resent and refused.
    pub fn stats(&self) -> &MpiStats {
        &self.stats
    }

    /// Receives posted and not yet matched.
    pub fn posted_len(&self) -> usize {
        self.posted.len()
    }

    /// Messages (eager or rendezvous requests) waiting for a receive.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected.len()
    }

    /// Messages waiting for a receive on communicators other than `comm` (a
    /// collective's own communicator, whose traffic its calls consume).
    pub fn unexpected_besides(&self, comm: u32) -> usize {
        self.unexpected.len_besides(comm)
    }

    /// Credit held by peers' eager messages in the unexpected queue (payload bytes
    /// plus the per-message overhead). Never above [`MpiEngine::unexpected_bound`].
    /// Messages to self are not counted: the application holds their memory.
    pub fn unexpected_charged(&self) -> u64 {
        self.unexpected.charged()
    }

    /// The most [`MpiEngine::unexpected_charged`] can reach.
    pub fn unexpected_bound(&self) -> u64 {
        self.config.eager_window * u64::from(self.size - 1)
    }

    /// Credit held by `peer`'s eager messages in the unexpected queue (at most
    /// `eager_window`).
    pub fn buffered_from(&self, peer: u32) -> u64 {
        self.peers.get(peer as usize).map_or(0, |p| p.buffered)
    }

    /// Frames sent to `peer` and not yet acknowledged.
    pub fn unacked_len(&self, peer: u32) -> usize {
        self.peers.get(peer as usize).map_or(0, |p| p.unacked.len())
    }

    /// Whether a rendezvous transfer is in progress with a peer other than
    /// `peer` (a send waiting for its Cts, a receive waiting for its data).
    pub fn rendezvous_with_others(&self, peer: u32) -> bool {
        self.awaiting.keys().any(|&(src, _)| src != peer)
            || self.peers.iter().enumerate().any(|(q, p)| q as u32 != peer && !p.rdv_out.is_empty())
    }

    /// Rendezvous transfers in progress (sends waiting for Cts, receives waiting
    /// for data).
    pub fn rendezvous_in_progress(&self) -> usize {
        self.awaiting.len() + self.peers.iter().map(|p| p.rdv_out.len()).sum::<usize>()
    }

    // ----- application calls

    /// Starts sending `data` to rank `dest` on communicator `comm` with `tag`.
    ///
    /// An eager send completes at once; a rendezvous send once the receiver
    /// cleared it and the data was queued for transmission.
    pub fn isend(&mut self, comm: u32, dest: u32, tag: i32, data: impl Into<Payload>) -> Result<RequestId, MpiError> {
        self.check_send(dest, tag)?;
        let data = data.into();
        let req = self.new_req();
        if dest == self.rank {
            // To self: matched locally, never on the wire, no credit.
            let key = Key { comm, src: dest, tag };
            self.sent.insert(req, (dest, 0));
            self.arrive_eager(key, data, 0, Origin::Local { send: req });
            self.completions.push_back(Completion::Send { req });
            return Ok(req);
        }
        match self.push_eager(comm, dest, tag, data) {
            Ok(seq) => {
                self.sent.insert(req, (dest, seq));
                self.completions.push_back(Completion::Send { req });
            }
            Err(data) => {
                if data.len() <= self.config.eager_threshold {
                    self.stats.credit_fallbacks += 1;
                }
                self.start_rendezvous(req, dest, comm, tag, data);
            }
        }
        Ok(req)
    }

    /// A blocking standard send's short way: when `data` can go eagerly to
    /// another rank now (within the threshold and the credit), it is queued
    /// as [`MpiEngine::isend`] would, but without a request, as none would be
    /// waited for or cancelled; `Ok(Err(data))` gives it back otherwise
    /// (then [`MpiEngine::isend`] it and wait).
    pub fn send_now(
        &mut self,
        comm: u32,
        dest: u32,
        tag: i32,
        data: impl Into<Payload>,
    ) -> Result<Result<(), Payload>, MpiError> {
        self.check_send(dest, tag)?;
        let data = data.into();
        if dest == self.rank {
            return Ok(Err(data));
        }
        Ok(self.push_eager(comm, dest, tag, data).map(drop))
    }

    /// Queues `data` as an eager message to `dest` (another rank) if it is
    /// small enough and the peer's credit takes it: its sequence number.
    /// Otherwise gives it back.
    fn push_eager(&mut self, comm: u32, dest: u32, tag: i32, data: Payload) -> Result<u64, Payload> {
        let charge = self.config.charge(data.len());
        let peer = &mut self.peers[dest as usize];
        if data.len() > self.config.eager_threshold || charge > peer.credit_left() {
            return Err(data);
        }
        peer.charged += charge;
        self.stats.eager_sent += 1;
        self.push_frame(dest, MpiMsg::Eager { hdr: SeqHdr::default(), comm, tag }, data);
        // Invariant: push_frame just gave the Eager the stream's latest number.
        Ok(self.peers[dest as usize].next_seq - 1)
    }

    /// Starts a synchronous send (`MPI_Ssend`): it completes only once a receive
    /// took the message. To another rank it always goes by rendezvous (the Cts
    /// says the receive matched); to itself it waits in the unexpected queue
    /// until a receive takes it.
    pub fn issend(&mut self, comm: u32, dest: u32, tag: i32, data: impl Into<Payload>) -> Result<RequestId, MpiError> {
        self.check_send(dest, tag)?;
        let data = data.into();
        let req = self.new_req();
        let key = Key { comm, src: dest, tag };
        if dest != self.rank {
            self.start_rendezvous(req, dest, comm, tag, data);
        } else if let Some(recv) = self.posted.take_match(&key) {
            let status = Status { source: dest, tag, count: data.len() };
            self.completions.push_back(Completion::Recv { req: recv, status, data });
            self.completions.push_back(Completion::Send { req });
        } else {
            self.sent.insert(req, (dest, 0));
            let origin = Origin::Local { send: req };
            self.unexpected.push(Unexpected { key, held: Held::SelfSync { data, send: req }, origin });
        }
        Ok(req)
    }

    /// Posts a receive on `comm` from `source` ([`super::ANY_SOURCE`] = `None`) with
    /// `tag` ([`super::ANY_TAG`] = `None`). It takes the earliest-arrived matching
    /// message, or waits for the next one.
    pub fn irecv(
        &mut self,
        now: Instant,
        comm: u32,
        source: Option<u32>,
        tag: Option<i32>,
    ) -> Result<RequestId, MpiError> {
        let pat = self.pattern(comm, source, tag)?;
        let req = self.new_req();
        match self.unexpected.take(&pat) {
            Some(u) => self.consume(now, req, u),
            None => self.posted.post(pat, req),
        }
        Ok(req)
    }

    /// The status of the earliest-arrived message [`MpiEngine::irecv`] with the same
    /// arguments would take now, without taking it.
    pub fn iprobe(&self, comm: u32, source: Option<u32>, tag: Option<i32>) -> Result<Option<Status>, MpiError> {
        let pat = self.pattern(comm, source, tag)?;
        Ok(self.unexpected.peek(&pat).map(Unexpected::status))
    }

    /// Cancels a receive that has not matched yet: true, and a
    /// [`Completion::Cancelled`] follows. False for anything else (a matched or
    /// finished receive, a send, an unknown id); that request completes normally.
    pub fn cancel(&mut self, req: RequestId) -> bool {
        let done = self.posted.cancel(req);
        if done {
            self.completions.push_back(Completion::Cancelled { req });
        }
        done
    }

    // ----- inputs

    /// A frame from rank `from` arrived. Bad input is dropped and counted in
    /// [`MpiEngine::stats`].
    pub fn handle_message(&mut self, now: Instant, from: u32, msg: MpiMsg, payload: impl Into<Payload>) {
        self.handle_frame(now, from, msg, payload.into());
    }

    /// [`MpiEngine::handle_message`], once for every kind of payload.
    fn handle_frame(&mut self, now: Instant, from: u32, msg: MpiMsg, payload: Payload) {
        if from >= self.size || from == self.rank || (!payload.is_empty() && !msg.carries_payload()) {
            self.stats.bad_input += 1;
            return;
        }
        let p = from as usize;
        self.peers[p].heard = true;
        let hdr = match msg {
            MpiMsg::Ack { ack, credit } => {
                if !self.peers[p].on_ack(ack, credit) {
                    self.stats.bad_input += 1;
                }
                return;
            }
            // Invariant: every other variant is sequenced.
            _ => *msg.hdr().expect("sequenced message"),
        };
        if !self.peers[p].on_ack(hdr.ack, hdr.credit) {
            self.stats.bad_input += 1;
        }
        let peer = &mut self.peers[p];
        if hdr.seq < peer.recv_next {
            // A resend of something we have: the peer may have missed our ack.
            self.stats.duplicates += 1;
            peer.ack_sent = peer.ack_sent.min(hdr.seq.saturating_sub(1));
            self.schedule_ack(now, from);
            return;
        }
        if hdr.seq > peer.recv_next {
            self.stats.future_seq += 1;
            return;
        }
        peer.recv_next += 1;
        peer.since_ack_msgs += 1;
        peer.since_ack_bytes += payload.len() as u64;
        match msg {
            MpiMsg::Eager { hdr, comm, tag } => self.on_eager(from, comm, tag, payload, hdr.seq),
            MpiMsg::Rts { hdr, comm, tag, len } => self.on_rts(from, comm, tag, hdr.seq, len),
            MpiMsg::Cts { rts_seq, .. } => self.on_cts(from, rts_seq),
            MpiMsg::Data { rts_seq, offset, .. } => self.on_data(from, rts_seq, offset, payload),
            MpiMsg::CancelReq { seq, .. } => self.on_cancel_req(now, from, seq),
            MpiMsg::CancelAns { seq, cancelled, .. } => self.on_cancel_ans(from, seq, cancelled),
            MpiMsg::Ack { .. } => unreachable!("handled above"),
        }
        self.schedule_ack(now, from);
    }

    /// [`MpiEngine::handle_message`] for a decoded envelope from rank `from` (the
    /// driver maps the connection or the envelope's sender to the rank).
    pub fn handle_envelope(&mut self, now: Instant, from: u32, env: Envelope<MpiMsg>) {
        self.handle_message(now, from, env.body, env.payload);
    }

    /// The connection to `peer` broke. Frames for it wait until
    /// [`MpiEngine::handle_reconnected`].
    pub fn handle_disconnected(&mut self, peer: u32) -> Result<(), MpiError> {
        self.check_peer(peer)?;
        let p = &mut self.peers[peer as usize];
        p.up = false;
        // Acknowledgements and credit we told the peer may have died unwritten with
        // the connection: owe them again, so that the link is wanted back.
        p.ack_sent = 0;
        p.announced = 0;
        self.out.retain(|&(q, _)| q != peer);
        Ok(())
    }

    /// Whether the engine needs a connection to `peer`: frames it has not
    /// acknowledged, or an acknowledgement or credit it may lack. A driver whose
    /// connection broke reconnects while this holds (an ack-only link matters too:
    /// without our acks and credit the peer's sends stall).
    pub fn wants_link(&self, peer: u32) -> bool {
        self.peers.get(peer as usize).is_some_and(|p| !p.unacked.is_empty() || p.needs_ack())
    }

    /// A connection to `peer` is (re-)established: tells the peer our state and
    /// resends every frame it has not acknowledged, oldest first. Harmless when
    /// nothing was lost.
    pub fn handle_reconnected(&mut self, peer: u32) -> Result<(), MpiError> {
        self.check_peer(peer)?;
        self.out.retain(|&(q, _)| q != peer);
        let p = &mut self.peers[peer as usize];
        p.up = true;
        p.unreachable_since = None;
        // Whatever we told the peer may have been lost with the connection.
        p.ack_sent = 0;
        p.announced = 0;
        let before = self.out.len();
        self.out.extend(p.unacked_seqs().map(|s| (peer, s)));
        self.stats.resent += (self.out.len() - before) as u64;
        if !p.in_ack_now {
            p.in_ack_now = true;
            self.ack_now.push_back(peer);
        }
        Ok(())
    }

    /// Time passed: sends the acknowledgements that were held back. Spurious calls
    /// are harmless.
    pub fn handle_timeout(&mut self, now: Instant) {
        for t in self.timers.take_expired(now) {
            match t {
                Timer::Ack => {
                    for &q in &self.ack_later {
                        let p = &mut self.peers[q as usize];
                        p.in_ack_later = false;
                        if p.needs_ack() && !p.in_ack_now {
                            p.in_ack_now = true;
                            self.ack_now.push_back(q);
                        }
                    }
                    self.ack_later.clear();
                }
            }
        }
    }

    // ----- outputs

    /// The next frame to send. Sequenced frames carry the latest acknowledgement and
    /// credit; stand-alone [`MpiMsg::Ack`]s follow when nothing carried them.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.poll_transmit_ref().map(|t| t.to_transmit())
    }

    /// [`MpiEngine::poll_transmit`] with the payload borrowed from the
    /// engine's own copy of the frame (kept until acknowledged, for resending):
    /// a driver that writes the frame at once needs no copy of a payload held
    /// in place nor a reference of its own to a shared one, whose count is
    /// atomic (an increment to take one, a decrement to drop it, for every
    /// message).
    #[must_use]
    #[inline]
    pub fn poll_transmit_ref(&mut self) -> Option<TransmitRef<'_>> {
        // The look for none inline: a driver asks after every call and
        // every read and most often finds none (the whole function's
        // prologue cost a small message some 60 instructions).
        if self.out.is_empty() && self.ack_now.is_empty() {
            return None;
        }
        self.next_transmit_ref()
    }

    /// [`MpiEngine::poll_transmit_ref`] with something queued.
    #[inline(never)]
    fn next_transmit_ref(&mut self) -> Option<TransmitRef<'_>> {
        /// The payload of a stand-alone acknowledgement.
        static NONE: Payload = Payload::new();
        while let Some((to, seq)) = self.out.pop_front() {
            if let Some(i) = self.peers[to as usize].index_of(seq) {
                self.ack_carried(to);
                let (msg, payload) = self.peers[to as usize].frame(i);
                return Some(TransmitRef { to, msg, payload });
            }
        }
        while let Some(to) = self.ack_now.pop_front() {
            let p = &mut self.peers[to as usize];
            p.in_ack_now = false;
            if p.up && p.needs_ack() {
                let h = p.stamp();
                self.stats.acks_sent += 1;
                self.ack_carried(to);
                return Some(TransmitRef { to, msg: MpiMsg::Ack { ack: h.ack, credit: h.credit }, payload: &NONE });
            }
        }
        None
    }

    /// A frame to `to` carries our latest acknowledgement and credit: no delayed
    /// one is owed any more, and the ack timer stops when none is (a driver then
    /// has no deadline to wake up for).
    fn ack_carried(&mut self, to: u32) {
        let p = &mut self.peers[to as usize];
        if p.in_ack_later {
            p.in_ack_later = false;
            self.ack_later.retain(|&q| q != to);
            if self.ack_later.is_empty() {
                self.timers.clear(Timer::Ack);
            }
        }
    }

    /// The next finished request.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// When [`MpiEngine::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    // ----- internals

    fn new_req(&mut self) -> RequestId {
        self.next_req += 1;
        RequestId(self.next_req)
    }

    fn check_rank(&self, rank: u32) -> Result<(), MpiError> {
        if rank < self.size { Ok(()) } else { Err(MpiError::InvalidRank { rank, size: self.size }) }
    }

    fn check_send(&self, dest: u32, tag: i32) -> Result<(), MpiError> {
        self.check_rank(dest)?;
        if tag < 0 { Err(MpiError::InvalidTag(tag)) } else { Ok(()) }
    }

    fn check_peer(&self, peer: u32) -> Result<(), MpiError> {
        self.check_rank(peer)?;
        if peer == self.rank { Err(MpiError::InvalidRank { rank: peer, size: self.size }) } else { Ok(()) }
    }

    fn pattern(&self, comm: u32, src: Option<u32>, tag: Option<i32>) -> Result<Pattern, MpiError> {
        if let Some(s) = src {
            self.check_rank(s)?;
        }
        if let Some(t) = tag.filter(|&t| t < 0) {
            return Err(MpiError::InvalidTag(t));
        }
        Ok(Pattern { comm, src, tag })
    }

    /// Appends a sequenced frame to our stream to `to` and queues it if connected.
    pub(super) fn push_frame(&mut self, to: u32, msg: MpiMsg, payload: Payload) {
        let p = &mut self.peers[to as usize];
        let seq = p.push(msg, payload);
        if p.up {
            self.out.push_back((to, seq));
        }
    }

    /// Queues an acknowledgement to `to` if it lacks one: at once if enough is
    /// pending, else when the ack timer fires (unless a frame carries it first).
    pub(super) fn schedule_ack(&mut self, now: Instant, to: u32) {
        let p = &mut self.peers[to as usize];
        if !p.needs_ack() {
            return;
        }
        if self.closing || p.ack_urgent(&self.config) {
            if !p.in_ack_now {
                p.in_ack_now = true;
                self.ack_now.push_back(to);
            }
        } else if !p.in_ack_later {
            p.in_ack_later = true;
            self.ack_later.push(to);
            if self.timers.get(Timer::Ack).is_none() {
                self.timers.set(Timer::Ack, now + self.config.ack_delay);
            }
        }
    }

    /// Gives `charge` of eager credit back to `src` (not to ourselves).
    /// `None` for `now`: the caller schedules the acknowledgement that
    /// announces it (as `handle_frame` does after every frame).
    pub(super) fn return_credit(&mut self, now: Option<Instant>, src: u32, charge: u64) {
        if src == self.rank || charge == 0 {
            return;
        }
        self.peers[src as usize].granted += charge;
        if let Some(now) = now {
            self.schedule_ack(now, src);
        }
    }

    fn on_eager(&mut self, from: u32, comm: u32, tag: i32, data: Payload, seq: u64) {
        let charge = self.config.charge(data.len());
        self.arrive_eager(Key { comm, src: from, tag }, data, charge, Origin::Peer { seq });
    }

    /// A message arrived (in stream order): the earliest-posted matching receive
    /// takes it, or it waits in the unexpected queue.
    /// Credit a matching receive returns is announced by the `schedule_ack`
    /// that `handle_frame` makes after every frame (none is owed for a
    /// message to ourselves).
    fn arrive_eager(&mut self, key: Key, data: Payload, charge: u64, origin: Origin) {
        if let Some(req) = self.posted.take_match(&key) {
            self.return_credit(None, key.src, charge);
            let status = Status { source: key.src, tag: key.tag, count: data.len() };
            self.completions.push_back(Completion::Recv { req, status, data });
            return;
        }
        if key.src != self.rank {
            let p = &mut self.peers[key.src as usize];
            if p.buffered + charge > self.config.eager_window {
                // The peer overran the credit we granted.
                self.stats.bad_input += 1;
                return;
            }
            p.buffered += charge;
        }
        self.unexpected.push(Unexpected { key, held: Held::Eager { data, charge }, origin });
    }

    /// A receive `req` took unexpected message `u`.
    fn consume(&mut self, now: Instant, req: RequestId, u: Unexpected) {
        let status = u.status();
        match u.held {
            Held::Eager { data, charge } => {
                if u.key.src != self.rank {
                    self.peers[u.key.src as usize].buffered -= charge;
                }
                self.return_credit(Some(now), u.key.src, charge);
                self.completions.push_back(Completion::Recv { req, status, data });
            }
            Held::Rts { rts_seq, len } => self.clear_to_send(req, u.key, rts_seq, len),
            Held::SelfSync { data, send } => {
                self.completions.push_back(Completion::Recv { req, status, data });
                self.completions.push_back(Completion::Send { req: send });
            }
        }
    }
}
