//! A world of engines joined by in-memory FIFO links, and a naive reference model
//! of MPI matching to check them against.
//!
//! The harness watches every frame it delivers: a sequenced frame whose number is
//! the next one the receiver accepts is new, and a new Eager or Rts is the arrival
//! of the sender's oldest message to that receiver not yet arrived. The model then
//! matches arrivals and posted receives the slow, obvious way (scan lists in order)
//! and the engines must agree with it on every receive, probe and cancel.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use crate::mpi::{Completion, MpiConfig, MpiEngine, MpiMsg, Payload, RequestId, Status, Transmit};

/// A small configuration that makes every mechanism fire often: small eager
/// threshold, a credit window of a few messages, multi-chunk rendezvous, eager acks.
pub(in crate::mpi) fn tight_config() -> MpiConfig {
    MpiConfig {
        eager_threshold: 128,
        eager_window: 512,
        eager_msg_overhead: 16,
        data_chunk: 100,
        ack_every_msgs: 3,
        ack_every_bytes: 300,
        ack_delay: Duration::from_millis(1),
    }
}

/// The recognisable content of message `id`: held in place for every other
/// message (if it fits), shared for the rest, so both kinds go through
/// matching, the unexpected queue and saves.
pub(in crate::mpi) fn content(id: usize, len: usize) -> Payload {
    let bytes: Vec<u8> = (0..len).map(|i| (id as u8).wrapping_mul(31).wrapping_add(i as u8)).collect();
    if id % 2 == 0 { Payload::copy_from_slice(&bytes) } else { Payload::from(bytes) }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::mpi) struct Pat {
    pub(in crate::mpi) comm: u32,
    pub(in crate::mpi) src: Option<u32>,
    pub(in crate::mpi) tag: Option<i32>,
}

#[derive(Debug, Clone, Copy)]
struct MsgRec {
    src: u32,
    dst: u32,
    comm: u32,
    tag: i32,
    len: usize,
}

impl MsgRec {
    fn matches(&self, p: &Pat) -> bool {
        p.comm == self.comm && p.src.is_none_or(|s| s == self.src) && p.tag.is_none_or(|t| t == self.tag)
    }
    fn status(&self) -> Status {
        Status { source: self.src, tag: self.tag, count: self.len }
    }
}

/// Reference matching of one rank.
#[derive(Debug, Default)]
struct ModelRank {
    posted: Vec<(RequestId, Pat)>,
    unexpected: Vec<usize>,
}

#[derive(Debug)]
pub(in crate::mpi) struct World {
    pub(in crate::mpi) engines: Vec<MpiEngine>,
    n: usize,
    now: Instant,
    /// In-flight frames, per directed link `a * n + b`.
    links: Vec<VecDeque<Transmit>>,
    /// Connection state per directed link (kept symmetric).
    up: Vec<bool>,
    /// Mirror of the receiver's next accepted sequence number, per directed link.
    next_seq: Vec<u64>,
    /// Messages sent and not yet arrived, in send order, per directed link.
    in_transit: Vec<VecDeque<usize>>,
    msgs: Vec<MsgRec>,
    delivered: Vec<u32>,
    model: Vec<ModelRank>,
    /// The model's decision: which message each receive takes.
    matched: BTreeMap<(usize, RequestId), usize>,
    recv_reqs: Vec<Vec<RequestId>>,
    done: BTreeMap<(usize, RequestId), Completion>,
    sends: Vec<(usize, RequestId)>,
    /// Synchronous sends: (rank, request) -> message.
    sync_sends: BTreeMap<(usize, RequestId), usize>,
    cancelled: Vec<(usize, RequestId)>,
    /// Directed links that lost frames from the middle of their stream and need a
    /// reconnect to recover.
    gappy: Vec<bool>,
    /// Whether any frame was ever lost that way (the receiver then sees gaps).
    lost_mid_stream: bool,
    /// Which message each send request sent, and back.
    send_ids: BTreeMap<(usize, RequestId), usize>,
    send_of: Vec<(usize, RequestId)>,
    /// The message each arrived Eager or Rts frame carried, by (link, seq).
    arrived_seq: BTreeMap<(usize, u64), usize>,
    /// Sends whose cancel was asked for, and the answer the model expects once
    /// the receiver decided.
    cancel_asked: BTreeSet<(usize, RequestId)>,
    cancel_expect: BTreeMap<(usize, RequestId), bool>,
    cancel_answers: BTreeMap<(usize, RequestId), bool>,
    /// Messages taken back: never delivered.
    cancelled_msgs: BTreeSet<usize>,
    /// Sends the application released (before its rank moved): no longer cancellable.
    released: BTreeSet<(usize, RequestId)>,
    /// Ranks that moved (their engine saved and restored in a new process).
    pub(in crate::mpi) moves: usize,
}

impl World {
    pub(in crate::mpi) fn new(n: usize, config: MpiConfig) -> Self {
        let engines = (0..n).map(|r| MpiEngine::new(config.clone(), r as u32, n as u32).unwrap()).collect();
        World {
            engines,
            n,
            now: Instant::now(),
            links: vec![VecDeque::new(); n * n],
            up: vec![true; n * n],
            next_seq: vec![1; n * n],
            in_transit: vec![VecDeque::new(); n * n],
            msgs: Vec::new(),
            delivered: Vec::new(),
            model: (0..n).map(|_| ModelRank::default()).collect(),
            matched: BTreeMap::new(),
            recv_reqs: vec![Vec::new(); n],
            done: BTreeMap::new(),
            sends: Vec::new(),
            sync_sends: BTreeMap::new(),
            cancelled: Vec::new(),
            gappy: vec![false; n * n],
            lost_mid_stream: false,
            send_ids: BTreeMap::new(),
            send_of: Vec::new(),
            arrived_seq: BTreeMap::new(),
            cancel_asked: BTreeSet::new(),
            cancel_expect: BTreeMap::new(),
            cancel_answers: BTreeMap::new(),
            cancelled_msgs: BTreeSet::new(),
            released: BTreeSet::new(),
            moves: 0,
        }
    }

    fn link(&self, a: usize, b: usize) -> usize {
        a * self.n + b
    }

    // ----- the model

    fn model_arrive(&mut self, at: usize, id: usize) {
        let m = self.msgs[id];
        let r = &mut self.model[at];
        match r.posted.iter().position(|(_, p)| m.matches(p)) {
            Some(i) => {
                let (req, _) = r.posted.remove(i);
                self.matched.insert((at, req), id);
            }
            None => r.unexpected.push(id),
        }
    }

    fn model_post(&mut self, at: usize, req: RequestId, p: Pat) {
        let msgs = &self.msgs;
        let r = &mut self.model[at];
        match r.unexpected.iter().position(|&id| msgs[id].matches(&p)) {
            Some(i) => {
                let id = r.unexpected.remove(i);
                self.matched.insert((at, req), id);
            }
            None => r.posted.push((req, p)),
        }
    }

    // ----- operations

    /// A send; `sync`: a synchronous one, which must not complete before a
    /// receive took its message.
    pub(in crate::mpi) fn send(&mut self, from: usize, to: usize, comm: u32, tag: i32, len: usize, sync: bool) {
        let id = self.msgs.len();
        self.msgs.push(MsgRec { src: from as u32, dst: to as u32, comm, tag, len });
        self.delivered.push(0);
        if from == to {
            self.model_arrive(to, id);
        } else {
            let l = self.link(from, to);
            self.in_transit[l].push_back(id);
        }
        let e = &mut self.engines[from];
        let req = if sync {
            e.issend(comm, to as u32, tag, content(id, len))
        } else {
            e.isend(comm, to as u32, tag, content(id, len))
        };
        let req = req.unwrap();
        self.sends.push((from, req));
        self.send_ids.insert((from, req), id);
        self.send_of.push((from, req));
        if sync {
            self.sync_sends.insert((from, req), id);
        }
        self.drain();
    }

    pub(in crate::mpi) fn recv(&mut self, at: usize, p: Pat) {
        let req = self.engines[at].irecv(self.now, p.comm, p.src, p.tag).unwrap();
        self.model_post(at, req, p);
        self.recv_reqs[at].push(req);
        self.drain();
    }

    pub(in crate::mpi) fn probe(&mut self, at: usize, p: Pat) {
        let got = self.engines[at].iprobe(p.comm, p.src, p.tag).unwrap();
        let want =
            self.model[at].unexpected.iter().map(|&id| self.msgs[id]).find(|m| m.matches(&p)).map(|m| m.status());
        assert_eq!(got, want, "iprobe at rank {at} for {p:?}");
    }

    pub(in crate::mpi) fn cancel(&mut self, at: usize, nth: usize) {
        let Some(&req) = self.recv_reqs[at].get(nth % self.recv_reqs[at].len().max(1)) else { return };
        let model = self.model[at].posted.iter().position(|&(r, _)| r == req);
        let got = self.engines[at].cancel(req);
        assert_eq!(got, model.is_some(), "cancel of {req:?} at rank {at}");
        if let Some(i) = model {
            self.model[at].posted.remove(i);
            self.cancelled.push((at, req));
        }
        self.drain();
    }

    /// Asks to cancel the `nth` send (of all ranks) not asked before. To itself
    /// a rank decides at once; to another, the model decides when the request
    /// reaches the receiver (see `deliver_one`).
    pub(in crate::mpi) fn cancel_send(&mut self, nth: usize) {
        let open: Vec<(usize, RequestId)> = self
            .send_of
            .iter()
            .copied()
            .filter(|s| !self.cancel_asked.contains(s) && !self.released.contains(s))
            .collect();
        let Some(&(at, req)) = open.get(nth % open.len().max(1)) else { return };
        self.cancel_asked.insert((at, req));
        let id = self.send_ids[&(at, req)];
        if self.msgs[id].dst as usize == at {
            let taken = self.model_take_back(at, id);
            self.cancel_expect.insert((at, req), taken);
        }
        self.engines[at].cancel_send(req);
        self.drain();
    }

    /// Removes message `id` from its receiver's unexpected messages, if there.
    fn model_take_back(&mut self, at: usize, id: usize) -> bool {
        let u = &mut self.model[at].unexpected;
        match u.iter().position(|&m| m == id) {
            Some(i) => {
                u.remove(i);
                self.cancelled_msgs.insert(id);
                true
            }
            None => false,
        }
    }

    /// Delivers up to `k` frames from the `pick`th non-empty link.
    pub(in crate::mpi) fn deliver(&mut self, pick: usize, k: usize) {
        let busy: Vec<usize> = (0..self.links.len()).filter(|&l| !self.links[l].is_empty()).collect();
        if busy.is_empty() {
            return;
        }
        let l = busy[pick % busy.len()];
        for _ in 0..k {
            if !self.deliver_one(l) {
                break;
            }
        }
    }

    fn deliver_one(&mut self, l: usize) -> bool {
        let Some(t) = self.links[l].pop_front() else { return false };
        let (a, b) = (l / self.n, l % self.n);
        if let Some(h) = t.msg.hdr() {
            if h.seq == self.next_seq[l] {
                self.next_seq[l] += 1;
                if matches!(t.msg, MpiMsg::Eager { .. } | MpiMsg::Rts { .. }) {
                    let id = self.in_transit[l].pop_front().expect("an arrival was sent");
                    self.arrived_seq.insert((l, h.seq), id);
                    self.model_arrive(b, id);
                }
                if let MpiMsg::CancelReq { seq, .. } = t.msg {
                    // The request follows its message in the stream: it arrived.
                    let id = self.arrived_seq[&(l, seq)];
                    let taken = self.model_take_back(b, id);
                    let (from, req) = *self.send_ids.iter().find(|(_, m)| **m == id).expect("a sent message").0;
                    assert_eq!(from, a);
                    self.cancel_expect.insert((a, req), taken);
                }
            }
        }
        self.engines[b].handle_message(self.now, a as u32, t.msg, t.payload);
        self.drain();
        true
    }

    /// Rank `at`'s engine saved as a moving rank saves it (its completed
    /// sends released first), if it is quiet.
    pub(in crate::mpi) fn save(&mut self, at: usize) -> Option<crate::mpi::SavedEngine> {
        let mine: Vec<(usize, RequestId)> = self.send_of.iter().copied().filter(|s| s.0 == at).collect();
        if mine.iter().any(|s| {
            !self.done.contains_key(s) || (self.cancel_asked.contains(s) && !self.cancel_answers.contains_key(s))
        }) {
            return None;
        }
        for s in mine {
            self.engines[at].release(s.1);
            self.released.insert(s);
        }
        self.engines[at].save().ok()
    }

    /// Rank `at` moves to a new process, when it is quiet (no receive
    /// posted, every send completed and released, no rendezvous or cancel
    /// under way): its engine is saved, encoded, decoded and restored there;
    /// the old process's connections die with what was in flight on them,
    /// and the peers reconnect to the new one. False if it was not quiet.
    pub(in crate::mpi) fn move_rank(&mut self, at: usize) -> bool {
        let Some(saved) = self.save(at) else { return false };
        let bytes = saved.encode();
        let saved = crate::mpi::SavedEngine::decode(&bytes, bytes.len()).expect("a saved engine decodes");
        let config = self.engines[at].config().clone();
        for b in 0..self.n {
            self.break_link(at, b);
        }
        // The new process connects to every peer as it sends (see `restore`).
        self.engines[at] = MpiEngine::restore(config, at as u32, self.n as u32, saved).expect("restored");
        for b in (0..self.n).filter(|&b| b != at) {
            let (ab, ba) = (self.link(at, b), self.link(b, at));
            (self.up[ab], self.up[ba]) = (true, true);
            self.engines[b].handle_reconnected(at as u32).unwrap();
        }
        self.drain();
        self.moves += 1;
        true
    }

    /// The connection between `a` and `b` breaks: in-flight frames are lost and
    /// both sides are told.
    pub(in crate::mpi) fn break_link(&mut self, a: usize, b: usize) {
        if a == b || !self.up[self.link(a, b)] {
            return;
        }
        self.drop_in_flight(a, b);
        let (ab, ba) = (self.link(a, b), self.link(b, a));
        self.up[ab] = false;
        self.up[ba] = false;
        self.engines[a].handle_disconnected(b as u32).unwrap();
        self.engines[b].handle_disconnected(a as u32).unwrap();
        self.drain();
    }

    /// A connection between `a` and `b` is (re-)established. If it was up, the old
    /// one silently died with its in-flight frames first.
    pub(in crate::mpi) fn reconnect(&mut self, a: usize, b: usize) {
        if a == b {
            return;
        }
        self.drop_in_flight(a, b);
        let (ab, ba) = (self.link(a, b), self.link(b, a));
        self.up[ab] = true;
        self.up[ba] = true;
        self.engines[a].handle_reconnected(b as u32).unwrap();
        self.engines[b].handle_reconnected(a as u32).unwrap();
        self.drain();
    }

    fn drop_in_flight(&mut self, a: usize, b: usize) {
        let (ab, ba) = (self.link(a, b), self.link(b, a));
        self.links[ab].clear();
        self.links[ba].clear();
        self.gappy[ab] = false;
        self.gappy[ba] = false;
    }

    /// The oldest `k` in-flight frames from `a` to `b` vanish but later ones still
    /// arrive, as when a driver's old connection died and it sent on a new one
    /// before reporting the reconnect. The receiver sees a gap until then.
    pub(in crate::mpi) fn lose(&mut self, a: usize, b: usize, k: usize) {
        let l = self.link(a, b);
        if a == b || self.links[l].is_empty() {
            return;
        }
        for _ in 0..k {
            self.links[l].pop_front();
        }
        self.gappy[l] = true;
        self.lost_mid_stream = true;
    }

    pub(in crate::mpi) fn tick(&mut self, ms: u64) {
        self.now += Duration::from_millis(ms);
        for e in &mut self.engines {
            e.handle_timeout(self.now);
        }
        self.drain();
    }

    /// Moves every output of every engine into the links and the completion log.
    fn drain(&mut self) {
        for a in 0..self.n {
            while let Some(t) = self.engines[a].poll_transmit() {
                let l = self.link(a, t.to as usize);
                assert!(self.up[l], "rank {a} sent {t:?} over a broken connection");
                self.links[l].push_back(t);
            }
            while let Some(c) = self.engines[a].poll_completion() {
                self.check_completion(a, c);
            }
        }
        self.check_invariants();
    }

    fn check_completion(&mut self, at: usize, c: Completion) {
        let req = c.req();
        if let Completion::CancelAnswer { cancelled, .. } = c {
            let want = self.cancel_expect.get(&(at, req)).copied();
            assert_eq!(Some(cancelled), want, "rank {at}: cancel of {req:?}");
            let prev = self.cancel_answers.insert((at, req), cancelled);
            assert!(prev.is_none(), "rank {at}: {req:?} answered twice");
            return;
        }
        if let (Completion::Send { .. }, Some(&id)) = (&c, self.send_ids.get(&(at, req))) {
            assert!(!self.cancelled_msgs.contains(&id), "rank {at}: send #{id} completed after it was taken back");
        }
        if let Completion::Recv { status, data, .. } = &c {
            let id = *self.matched.get(&(at, req)).unwrap_or_else(|| panic!("rank {at}: {req:?} completed unmatched"));
            let m = self.msgs[id];
            assert_eq!(*status, m.status(), "rank {at}: {req:?} got another message than the model's #{id}");
            assert_eq!(*data, content(id, m.len), "rank {at}: {req:?} data of message #{id}");
            assert_eq!(m.dst as usize, at);
            self.delivered[id] += 1;
            assert_eq!(self.delivered[id], 1, "message #{id} delivered twice");
        }
        if let Some(&id) = self.sync_sends.get(&(at, req)) {
            assert!(
                self.matched.values().any(|&m| m == id),
                "rank {at}: synchronous send #{id} completed before a receive took it"
            );
        }
        let prev = self.done.insert((at, req), c);
        assert!(prev.is_none(), "rank {at}: {req:?} completed twice");
    }

    fn check_invariants(&self) {
        for (r, e) in self.engines.iter().enumerate() {
            let window = e.config().eager_window;
            assert!(e.unexpected_charged() <= e.unexpected_bound(), "rank {r}: unexpected buffer over its bound");
            let sum: u64 = (0..self.n as u32).map(|p| e.buffered_from(p)).sum();
            assert_eq!(sum, e.unexpected_charged(), "rank {r}: per-peer accounting");
            for p in 0..self.n as u32 {
                assert!(e.buffered_from(p) <= window, "rank {r}: peer {p} over its credit window");
            }
            assert_eq!(e.stats().bad_input, 0, "rank {r}: refused input from a correct peer");
            if !self.lost_mid_stream {
                assert_eq!(e.stats().future_seq, 0, "rank {r}: a gap in a FIFO stream");
            }
            assert_eq!(e.posted_len(), self.model[r].posted.len(), "rank {r}: posted receives");
            assert_eq!(e.unexpected_len(), self.model[r].unexpected.len(), "rank {r}: unexpected messages");
        }
    }

    /// Delivers everything and fires timers until nothing moves.
    pub(in crate::mpi) fn quiesce(&mut self) {
        for _ in 0..100_000 {
            if let Some(l) = (0..self.links.len()).find(|&l| !self.links[l].is_empty()) {
                self.deliver_one(l);
                continue;
            }
            match self.engines.iter().filter_map(MpiEngine::poll_timeout).max() {
                Some(t) => {
                    self.now = self.now.max(t);
                    self.tick(0);
                }
                None => return,
            }
        }
        panic!("the world did not settle");
    }

    /// Heals every connection, receives every message still unmatched, settles,
    /// and checks that everything was delivered exactly once and cleaned up.
    pub(in crate::mpi) fn finish(&mut self) {
        for a in 0..self.n {
            for b in a + 1..self.n {
                let (ab, ba) = (self.link(a, b), self.link(b, a));
                if !self.up[ab] || self.gappy[ab] || self.gappy[ba] {
                    self.reconnect(a, b);
                }
            }
        }
        self.quiesce();
        for at in 0..self.n {
            for id in self.model[at].unexpected.clone() {
                let m = self.msgs[id];
                self.recv(at, Pat { comm: m.comm, src: Some(m.src), tag: Some(m.tag) });
            }
        }
        self.quiesce();
        for (id, &d) in self.delivered.iter().enumerate() {
            let want = u32::from(!self.cancelled_msgs.contains(&id));
            assert_eq!(d, want, "message #{id} {:?} delivered {d} times", self.msgs[id]);
        }
        for s in &self.cancel_asked {
            assert!(self.cancel_answers.contains_key(s), "cancel of {s:?} never answered");
        }
        for (&(at, req), id) in &self.matched {
            assert!(self.done.contains_key(&(at, req)), "rank {at}: {req:?} matched #{id} but never completed");
        }
        for s in &self.sends {
            let taken_back = self.cancel_answers.get(s) == Some(&true);
            let sent = matches!(self.done.get(s), Some(Completion::Send { .. }));
            assert!(sent || taken_back, "send {s:?} neither completed nor cancelled");
        }
        for c in &self.cancelled {
            assert!(matches!(self.done.get(c), Some(Completion::Cancelled { .. })), "cancel {c:?} not reported");
        }
        // Finalize: every rank closes, and every one may then leave (nothing owed).
        for e in &mut self.engines {
            e.start_closing(self.now);
        }
        self.drain();
        self.quiesce();
        for (r, e) in self.engines.iter().enumerate() {
            assert!(e.may_leave(self.now), "rank {r} may not leave after everything settled");
            assert_eq!(e.unexpected_len(), 0, "rank {r}");
            assert_eq!(e.unexpected_charged(), 0, "rank {r}");
            assert_eq!(e.rendezvous_in_progress(), 0, "rank {r}");
            for p in 0..self.n as u32 {
                assert_eq!(e.unacked_len(p), 0, "rank {r}: frames to {p} never acknowledged");
            }
        }
    }
}
