//! What the status page knows, from the daemon's answers to the requests
//! `p2pjob` makes: the nodes' `res:any` lines, every job's status, the ring as
//! the daemon sees it (Chord) or every node's zones (CAN), and what a watch of each job streams (progress, the last
//! lines of every rank's output, when it ran). [`View::docs`] writes it as the
//! JSON documents the page and the API serve.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use p2pmp_core::job::{JobId, Stream};
use p2pmp_core::machine::NodeAddr;
use p2pmp_core::node::control::{JobPhase, JobStatus, ToolReply};
use serde_json::{Value, json};

use super::ring::{self, Neighbours};
use super::zones::{self, Told};
use crate::json;

/// Lines of each rank's output kept for the page.
pub(crate) const TAIL_LINES: usize = 12;
/// Characters of one output line kept.
const LINE_CHARS: usize = 400;
/// Bytes of an unfinished line kept before it counts as a line.
const PARTIAL_BYTES: usize = 4096;

/// The JSON documents the page and the API serve. A document that did not
/// change between two of these is the same `Arc`, so a stream of events sends
/// only what changed.
#[derive(Debug, Clone)]
pub(crate) struct Docs {
    pub(crate) nodes: Arc<str>,
    pub(crate) jobs: Arc<str>,
    pub(crate) ring: Arc<str>,
    pub(crate) zones: Arc<str>,
    pub(crate) daemon: Arc<str>,
    /// Each job's document, by id (lowercase hex).
    pub(crate) job: BTreeMap<String, Arc<str>>,
}

impl Docs {
    /// `fresh`, with every document equal to one of `self` shared with it.
    fn reuse(&self, fresh: Docs) -> Docs {
        let keep = |old: &Arc<str>, new: Arc<str>| if *old == new { old.clone() } else { new };
        Docs {
            nodes: keep(&self.nodes, fresh.nodes),
            jobs: keep(&self.jobs, fresh.jobs),
            ring: keep(&self.ring, fresh.ring),
            zones: keep(&self.zones, fresh.zones),
            daemon: keep(&self.daemon, fresh.daemon),
            job: fresh.job,
        }
    }
}

/// The last lines of one rank's output, and what it wrote of the next.
#[derive(Debug, Default)]
struct Tail {
    lines: VecDeque<(Stream, String)>,
    partial: BTreeMap<Stream, Vec<u8>>,
}

impl Tail {
    fn push(&mut self, stream: Stream, data: &[u8]) {
        let buf = self.partial.entry(stream).or_default();
        buf.extend_from_slice(data);
        let mut lines = Vec::new();
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            lines.push(buf.drain(..=end).collect::<Vec<u8>>());
        }
        if buf.len() > PARTIAL_BYTES {
            lines.push(std::mem::take(buf));
        }
        for line in lines {
            let text = String::from_utf8_lossy(&line);
            let text: String = text.trim_end_matches(['\n', '\r']).chars().take(LINE_CHARS).collect();
            self.lines.push_back((stream, text));
            if self.lines.len() > TAIL_LINES {
                self.lines.pop_front();
            }
        }
    }

    fn json(&self) -> Value {
        let mut out: Vec<Value> =
            self.lines.iter().map(|(s, l)| json!({"stream": stream_name(*s), "line": l})).collect();
        for (s, rest) in &self.partial {
            if !rest.is_empty() {
                out.push(json!({"stream": stream_name(*s), "line": String::from_utf8_lossy(rest)}));
            }
        }
        Value::Array(out)
    }
}

fn stream_name(s: Stream) -> &'static str {
    if s == Stream::Stdout { "stdout" } else { "stderr" }
}

/// Whether a watch of a job is due, open, or done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Watch {
    Due,
    Open,
    Done,
}

/// One job as the page knows it.
#[derive(Debug)]
struct JobView {
    status: JobStatus,
    /// Order of first sight (newest first on the page).
    seq: u64,
    /// Unix ms when the page first saw it, saw every rank running, saw it end.
    seen_ms: u64,
    running_ms: Option<u64>,
    ended_ms: Option<u64>,
    /// It was over when first seen (so its end time is unknown here).
    over_when_seen: bool,
    tails: BTreeMap<u32, Tail>,
    staging: BTreeMap<NodeAddr, (u64, u64)>,
    fetching: BTreeMap<(u32, String), (u64, u64)>,
    watch: Watch,
}

impl JobView {
    fn json(&self) -> Value {
        let mut v = json::job(&self.status);
        v["times"] = json!({"seen_ms": self.seen_ms, "running_ms": self.running_ms, "ended_ms": self.ended_ms});
        let tails: serde_json::Map<String, Value> = self.tails.iter().map(|(r, t)| (r.to_string(), t.json())).collect();
        v["tail"] = Value::Object(tails);
        let staging: Vec<Value> = self
            .staging
            .iter()
            .map(|(n, (done, total))| json!({"node": n.to_string(), "done": done, "total": total}))
            .collect();
        let fetching: Vec<Value> = self
            .fetching
            .iter()
            .map(|((rank, name), (done, total))| json!({"rank": rank, "name": name, "done": done, "total": total}))
            .collect();
        v["transfers"] = json!({"staging": staging, "fetching": fetching});
        v
    }

    /// Applies what a watch of the job reports (`now_ms`: unix ms).
    fn on_watch(&mut self, reply: ToolReply, payload: &Bytes, now_ms: u64) {
        let s = &mut self.status;
        match reply {
            ToolReply::Placed { ranks, .. } => {
                for (rank, node) in ranks {
                    if let Some(r) = s.ranks.get_mut(rank as usize) {
                        r.node = Some(node);
                    }
                }
                s.phase = JobPhase::Running;
                s.waiting = None;
            }
            ToolReply::Started { rank, node, .. } => {
                if let Some(r) = s.ranks.get_mut(rank as usize) {
                    (r.node, r.started) = (Some(node), true);
                }
                if s.ranks.iter().all(|r| r.started) && self.running_ms.is_none() {
                    self.running_ms = Some(now_ms);
                }
            }
            ToolReply::Exited { rank, code, .. } => {
                if let Some(r) = s.ranks.get_mut(rank as usize) {
                    r.exit = Some(code);
                }
            }
            ToolReply::Queued { reason, .. } => (s.phase, s.waiting) = (JobPhase::Queued, Some(reason)),
            ToolReply::Restarting { reason, .. } => {
                for r in &mut s.ranks {
                    (r.node, r.started, r.exit) = (None, false, None);
                }
                s.phase = JobPhase::Resolving;
                s.restarts.push(reason);
                self.running_ms = None;
            }
            ToolReply::Staging { node, done, total, .. } => {
                s.phase = JobPhase::Placing;
                self.staging.insert(node, (done, total));
            }
            ToolReply::Fetching { rank, name, done, total, .. } => {
                self.fetching.insert((rank, name), (done, total));
            }
            ToolReply::Output { rank, stream, .. } => self.tails.entry(rank).or_default().push(stream, payload),
            ToolReply::Finished { phase, error, .. } => {
                (s.phase, s.error, s.waiting) = (phase, error, None);
                if !self.over_when_seen && self.ended_ms.is_none() {
                    self.ended_ms = Some(now_ms);
                }
            }
            _ => {}
        }
    }
}

/// Every rank of a job not over has started.
fn all_running(s: &JobStatus) -> bool {
    !json::phase_is_over(s.phase) && s.ranks.iter().all(|r| r.started)
}

/// Everything the page shows.
#[derive(Debug)]
pub(crate) struct View {
    control: String,
    /// Why the daemon cannot be asked, while it cannot.
    pub(crate) error: Option<String>,
    nodes: Vec<String>,
    ring: Option<(NodeAddr, Neighbours)>,
    zones: Option<Told>,
    jobs: BTreeMap<JobId, JobView>,
    next_seq: u64,
    last: Option<Docs>,
}

impl View {
    /// The view of the daemon whose control socket is `control`, knowing nothing yet.
    pub(crate) fn new(control: impl ToString) -> View {
        let control = control.to_string();
        let (ring, zones, jobs) = (None, None, BTreeMap::new());
        View { control, error: None, nodes: Vec::new(), ring, zones, jobs, next_seq: 0, last: None }
    }

    /// The answer to `Nodes`.
    pub(crate) fn set_nodes(&mut self, lines: Vec<String>) {
        self.nodes = lines;
    }

    /// The answer to `Ring`.
    pub(crate) fn set_ring(&mut self, reply: &ToolReply) {
        self.ring = Neighbours::told(reply);
        if self.ring.is_some() {
            self.zones = None;
        }
    }

    /// The answer to `Zones` (the daemon runs CAN).
    pub(crate) fn set_zones(&mut self, reply: ToolReply) {
        self.zones = Told::of(reply);
        if self.zones.is_some() {
            self.ring = None;
        }
    }

    /// The answer to `Status` of every job: jobs no longer listed are gone
    /// (their retention ended). A job whose end a watch saw stays ended even
    /// when the answer was written just before it.
    pub(crate) fn set_jobs(&mut self, jobs: Vec<JobStatus>, now_ms: u64) {
        let listed: std::collections::BTreeSet<JobId> = jobs.iter().map(|j| j.job).collect();
        self.jobs.retain(|j, _| listed.contains(j));
        for status in jobs {
            match self.jobs.get_mut(&status.job) {
                Some(v) if json::phase_is_over(v.status.phase) && !json::phase_is_over(status.phase) => {}
                Some(v) => {
                    if v.running_ms.is_none() && all_running(&status) {
                        v.running_ms = Some(now_ms);
                    }
                    v.status = status;
                }
                None => {
                    self.next_seq += 1;
                    let over = json::phase_is_over(status.phase);
                    let view = JobView {
                        seq: self.next_seq,
                        seen_ms: now_ms,
                        running_ms: all_running(&status).then_some(now_ms),
                        ended_ms: None,
                        over_when_seen: over,
                        tails: BTreeMap::new(),
                        staging: BTreeMap::new(),
                        fetching: BTreeMap::new(),
                        watch: Watch::Due,
                        status,
                    };
                    self.jobs.insert(view.status.job, view);
                }
            }
        }
    }

    /// Jobs to watch now so that at most `open` watches are open: running
    /// ones first, then the newest.
    pub(crate) fn due_watches(&self, open: usize) -> Vec<JobId> {
        let mut due: Vec<&JobView> = self.jobs.values().filter(|v| v.watch == Watch::Due).collect();
        due.sort_by_key(|v| (json::phase_is_over(v.status.phase), std::cmp::Reverse(v.seq)));
        let now_open = self.jobs.values().filter(|v| v.watch == Watch::Open).count();
        due.into_iter().take(open.saturating_sub(now_open)).map(|v| v.status.job).collect()
    }

    /// A watch of `job` is open (`Open`), ended (`Done`), or lost with the
    /// connection (`Due`: asked again on the next one).
    pub(crate) fn set_watch(&mut self, job: JobId, w: Watch) {
        if let Some(v) = self.jobs.get_mut(&job) {
            v.watch = w;
        }
    }

    /// The connection to the daemon is gone: every open watch is due again.
    pub(crate) fn watches_lost(&mut self) {
        for v in self.jobs.values_mut().filter(|v| v.watch == Watch::Open) {
            v.watch = Watch::Due;
            v.tails.clear();
        }
    }

    /// A reply to the watch of `job`.
    pub(crate) fn on_watch(&mut self, job: JobId, reply: ToolReply, payload: &Bytes, now_ms: u64) {
        if let Some(v) = self.jobs.get_mut(&job) {
            v.on_watch(reply, payload, now_ms);
        }
    }

    /// The documents as of now; unchanged ones shared with the last call's.
    pub(crate) fn docs(&mut self) -> Docs {
        let me = self.ring.as_ref().map(|(a, _)| *a).or(self.zones.as_ref().map(|z| z.me));
        let kind = match (&self.ring, &self.zones) {
            (Some(_), _) => Some("chord"),
            (None, Some(_)) => Some("can"),
            (None, None) => None,
        };
        let addrs: Vec<NodeAddr> = json::parse_nodes(&self.nodes).iter().filter_map(|(a, _)| a.parse().ok()).collect();
        let mut jobs: Vec<&JobView> = self.jobs.values().collect();
        jobs.sort_by_key(|v| std::cmp::Reverse(v.seq));
        let each: Vec<(String, Value)> = jobs.iter().map(|v| (v.status.job.to_string(), v.json())).collect();
        let daemon = json!({"control": self.control, "overlay": me.map(|m| m.to_string()), "overlay_kind": kind,
            "error": self.error});
        let fresh = Docs {
            nodes: json::nodes(&self.nodes).to_string().into(),
            jobs: json!({"jobs": each.iter().map(|(_, v)| v).collect::<Vec<_>>()}).to_string().into(),
            ring: ring::doc(me, &addrs, self.ring.as_ref()).to_string().into(),
            zones: zones::doc(self.zones.as_ref()).to_string().into(),
            daemon: daemon.to_string().into(),
            job: each.into_iter().map(|(id, v)| (id, v.to_string().into())).collect(),
        };
        let docs = match &self.last {
            Some(last) => last.reuse(fresh),
            None => fresh,
        };
        self.last = Some(docs.clone());
        docs
    }
}

#[cfg(test)]
mod tests {
    use p2pmp_core::id::Id;
    use p2pmp_core::node::control::RankStatus;

    use super::*;

    fn status(job: JobId, phase: JobPhase, ranks: u32) -> JobStatus {
        let holder = NodeAddr("127.0.0.1:7400".parse().unwrap());
        let ranks = (0..ranks)
            .map(|rank| RankStatus { rank, node: None, started: false, exit: None, checkpoints: Default::default() })
            .collect();
        JobStatus {
            job,
            executable: "prog".into(),
            phase,
            ranks,
            error: None,
            holder,
            waiting: None,
            restarts: Vec::new(),
            moves: Vec::new(),
        }
    }

    #[test]
    fn a_tail_keeps_the_last_lines_and_the_unfinished_one() {
        let mut t = Tail::default();
        for i in 0..20 {
            t.push(Stream::Stdout, format!("line {i}\n").as_bytes());
        }
        t.push(Stream::Stderr, b"oops: half");
        let v = t.json();
        let lines: Vec<&str> = v.as_array().unwrap().iter().map(|l| l["line"].as_str().unwrap()).collect();
        assert_eq!(lines.len(), TAIL_LINES + 1);
        assert_eq!((lines[0], lines[TAIL_LINES - 1], lines[TAIL_LINES]), ("line 8", "line 19", "oops: half"));
        t.push(Stream::Stderr, b" a line\r\n");
        assert_eq!(t.lines.back(), Some(&(Stream::Stderr, "oops: half a line".to_owned())));
        t.push(Stream::Stdout, &vec![b'x'; PARTIAL_BYTES + 1]);
        assert_eq!(t.lines.back().map(|l| l.1.len()), Some(LINE_CHARS), "a line without end is cut and kept");
    }

    #[test]
    fn a_watched_job_runs_and_ends_and_a_late_answer_does_not_undo_its_end() {
        let job = JobId(Id::hash("j"));
        let node = NodeAddr("127.0.0.1:7401".parse().unwrap());
        let mut v = View::new("127.0.0.1:7420");
        v.set_jobs(vec![status(job, JobPhase::Resolving, 2)], 1000);
        assert_eq!(v.due_watches(8), vec![job]);
        v.set_watch(job, Watch::Open);
        assert!(v.due_watches(8).is_empty());
        v.on_watch(job, ToolReply::Staging { job, node, done: 0, total: 10 }, &Bytes::new(), 1100);
        v.on_watch(job, ToolReply::Placed { job, ranks: vec![(0, node), (1, node)] }, &Bytes::new(), 1200);
        for rank in 0..2 {
            v.on_watch(job, ToolReply::Started { job, rank, node }, &Bytes::new(), 1300);
        }
        let out = ToolReply::Output { job, rank: 1, stream: Stream::Stdout, offset: 0 };
        v.on_watch(job, out, &Bytes::from("hello\n"), 1400);
        let d: Value = serde_json::from_str(&v.docs().job[&job.to_string()]).unwrap();
        assert_eq!((d["phase"].as_str(), d["times"]["running_ms"].as_u64()), (Some("running"), Some(1300)));
        assert_eq!(d["tail"]["1"][0]["line"], "hello");
        assert_eq!(d["transfers"]["staging"][0]["total"], 10);
        let fin = ToolReply::Finished { job, phase: JobPhase::Done, codes: vec![0, 0], error: None };
        v.on_watch(job, fin, &Bytes::new(), 1500);
        v.set_jobs(vec![status(job, JobPhase::Running, 2)], 1600);
        let d: Value = serde_json::from_str(&v.docs().jobs).unwrap();
        assert_eq!(
            (d["jobs"][0]["phase"].as_str(), d["jobs"][0]["times"]["ended_ms"].as_u64()),
            (Some("done"), Some(1500))
        );
        // Gone from the answer: forgotten.
        v.set_jobs(Vec::new(), 1700);
        assert_eq!(v.docs().jobs.as_ref(), r#"{"jobs":[]}"#);
    }

    #[test]
    fn unchanged_documents_are_shared_and_jobs_over_when_seen_have_no_end_time() {
        let mut v = View::new("127.0.0.1:7420");
        let a = v.docs();
        let b = v.docs();
        assert!(Arc::ptr_eq(&a.nodes, &b.nodes) && Arc::ptr_eq(&a.jobs, &b.jobs));
        let old = JobId(Id::hash("old"));
        let new = JobId(Id::hash("new"));
        v.set_jobs(vec![status(old, JobPhase::Done, 1)], 10);
        v.set_jobs(vec![status(old, JobPhase::Done, 1), status(new, JobPhase::Queued, 1)], 20);
        assert_eq!(v.due_watches(1), vec![new], "a job still to run is watched first");
        let fin = ToolReply::Finished { job: old, phase: JobPhase::Done, codes: vec![0], error: None };
        v.on_watch(old, fin, &Bytes::new(), 30);
        let c = v.docs();
        assert!(Arc::ptr_eq(&b.nodes, &c.nodes) && !Arc::ptr_eq(&b.jobs, &c.jobs));
        let d: Value = serde_json::from_str(&c.jobs).unwrap();
        assert_eq!(d["jobs"][0]["job"], new.to_string(), "newest first");
        assert!(d["jobs"][1]["times"]["ended_ms"].is_null() && d["jobs"][1]["times"]["running_ms"].is_null());
        let mut running = status(new, JobPhase::Running, 1);
        running.ranks[0].started = true;
        v.set_jobs(vec![status(old, JobPhase::Done, 1), running], 40);
        let d: Value = serde_json::from_str(&v.docs().jobs).unwrap();
        assert_eq!(
            (d["jobs"][0]["times"]["running_ms"].as_u64(), d["jobs"][1]["times"]["running_ms"].as_u64()),
            (Some(40), None)
        );
    }
}
