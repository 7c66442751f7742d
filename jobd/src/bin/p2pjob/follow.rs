//! Following a job: progress, rank-prefixed output, the end.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use p2pmp_core::job::{JobId, Stream};
use p2pmp_core::node::control::{JobPhase, ToolReply};
use p2pmp_jobd::Client;
use serde_json::json;

use crate::interrupt::Interrupts;
use crate::progress::Progress;

pub(crate) use p2pmp_jobd::json::phase_name;

/// How a followed job ended, with timings from when following began.
#[derive(Debug, Clone)]
pub(crate) struct End {
    pub(crate) job: Option<JobId>,
    pub(crate) phase: JobPhase,
    pub(crate) codes: Vec<i32>,
    pub(crate) error: Option<String>,
    /// Until every rank was running.
    pub(crate) all_running: Option<Duration>,
    /// Until the end.
    pub(crate) total: Duration,
    /// Output files that came back.
    pub(crate) files: Vec<(u32, String, bool)>,
    /// Everything rank 0 wrote to stdout.
    pub(crate) stdout0: String,
}

/// What to show while following.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Show {
    pub(crate) json: bool,
    /// Print output lines.
    pub(crate) output: bool,
    /// Print progress lines (placement, start, exits) on stderr.
    pub(crate) progress: bool,
}

/// The process exit code for a job's end: 0 done, 1 failed, 4 killed.
pub(crate) fn exit_code(p: JobPhase) -> i32 {
    match p {
        JobPhase::Done => 0,
        JobPhase::Killed => 4,
        _ => 1,
    }
}

/// Prints every whole line of `buf` (and, with `all`, what is left), prefixed
/// by rank: stdout to stdout, stderr to stderr; JSON lines with `show.json`.
pub(crate) fn flush_lines(buf: &mut Vec<u8>, rank: u32, stream: Stream, all: bool, show: Show) {
    while let Some(pos) =
        buf.iter().position(|b| *b == b'\n').or(if all && !buf.is_empty() { Some(buf.len()) } else { None })
    {
        let line: Vec<u8> = buf.drain(..(pos + 1).min(buf.len())).collect();
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches('\n');
        if show.json {
            let s = if stream == Stream::Stdout { "stdout" } else { "stderr" };
            println!("{}", json!({"event": "output", "rank": rank, "stream": s, "line": text}));
        } else if stream == Stream::Stdout {
            println!("[{rank}] {text}");
        } else {
            eprintln!("[{rank}] {text}");
        }
    }
}

/// When [`follow`] kills the job it follows, or leaves it.
#[derive(Debug, Clone, Default)]
pub(crate) struct StopRules {
    /// Still running after this long (`MPIEXEC_TIMEOUT` of `p2pjob run`).
    pub(crate) after: Option<Duration>,
    /// Ctrl-C and SIGTERM, counted from before the job was submitted, and
    /// what they do.
    pub(crate) interrupts: Option<(Interrupts, OnInterrupt)>,
}

impl StopRules {
    /// Never killed: an interrupt from now on leaves the job running.
    pub(crate) fn leave_on_interrupt() -> StopRules {
        StopRules { after: None, interrupts: Some((Interrupts::count(), OnInterrupt::Leave)) }
    }
}

/// What an interrupt of [`follow`] does to the job it follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnInterrupt {
    /// Kill it (`p2pjob run` against a daemon, as mpirun does); a second
    /// interrupt leaves at once.
    Kill,
    /// Leave it running, saying how to find it again (`submit --wait`,
    /// `wait`: the job was submitted to run on its own).
    Leave,
}

/// How often a follow that watches for interrupts looks at them.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// What [`follow`] does, between replies, about interrupts and its deadline
/// (by its [`StopRules`]).
struct Stopper {
    rules: StopRules,
    deadline: Option<Instant>,
    /// Whether the kill was asked for.
    killing: bool,
}

impl Stopper {
    fn new(t0: Instant, rules: StopRules) -> Stopper {
        Stopper { deadline: rules.after.map(|l| t0 + l), rules, killing: false }
    }

    /// Acts on the interrupts and the deadline so far, for `job` once its id
    /// is known (asks its kill, or leaves the process); how long the next
    /// read may wait for a reply before this should look again.
    fn look(
        &mut self,
        job: Option<JobId>,
        bar: &mut Progress,
        client: &mut Client,
    ) -> anyhow::Result<Option<Duration>> {
        let (interrupts, on_interrupt) = match &self.rules.interrupts {
            Some((i, on)) => (i.seen(), Some(*on)),
            None => (0, None),
        };
        let timed_out = self.deadline.is_some_and(|d| Instant::now() >= d);
        if let (Some(job), Some(OnInterrupt::Leave), true) = (job, on_interrupt, interrupts > 0) {
            bar.finish();
            eprintln!(
                "p2pjob: interrupted; job {job} keeps running (`p2pjob wait {job}` follows it again, `p2pjob kill \
                 {job}` stops it)"
            );
            std::process::exit(130);
        }
        let kill_asked = timed_out || (on_interrupt == Some(OnInterrupt::Kill) && interrupts > 0);
        // The kill first: two interrupts at once still stop the job.
        if let (Some(job), false, true) = (job, self.killing, kill_asked) {
            self.killing = true;
            let said = match timed_out {
                true => format!(
                    "job {job} timed out after {} s (MPIEXEC_TIMEOUT); killing it",
                    self.rules.after.map_or(0, |l| l.as_secs())
                ),
                false => format!("interrupted: killing job {job} (interrupt again to stop waiting)"),
            };
            bar.above(|| eprintln!("p2pjob: {said}"));
            client.send(p2pmp_core::node::control::ToolRequest::Kill { job })?;
        }
        if interrupts > 1 {
            bar.finish();
            let job = job.map_or("the job".to_owned(), |j| format!("job {j}"));
            let asked = if self.killing { ", which was asked to stop" } else { "" };
            eprintln!("p2pjob: interrupted again; leaving {job}{asked}");
            std::process::exit(130);
        }
        // Until the kill is asked for, wake in time to ask it.
        let look = on_interrupt.map(|_| LOOK_EVERY);
        // (Past it with no job id yet, the next reply brings the id.)
        let until =
            self.deadline.filter(|_| !self.killing && !timed_out).map(|d| d.saturating_duration_since(Instant::now()));
        let wait = match (look, until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(wait.map(|w| w.max(Duration::from_millis(1))))
    }
}

/// Reads the replies to request `id` until the job is over, killing it as
/// `rules` say (once its id is known: `job`, or from the first reply) and
/// following it to its end.
pub(crate) fn follow(
    client: &mut Client,
    id: u64,
    job: Option<JobId>,
    size: Option<u32>,
    show: Show,
    rules: StopRules,
) -> anyhow::Result<End> {
    let t0 = Instant::now();
    let mut end = End {
        job,
        phase: JobPhase::Running,
        codes: Vec::new(),
        error: None,
        all_running: None,
        total: Duration::ZERO,
        files: Vec::new(),
        stdout0: String::new(),
    };
    let mut lines: BTreeMap<(u32, Stream), Vec<u8>> = BTreeMap::new();
    let mut size = size;
    let mut started = 0u32;
    let mut exited = 0u32;
    let mut bar = Progress::new(show.progress && !show.json);
    if let Some(j) = job {
        bar.job(j);
    }
    // A line for people, above the live line.
    let note = |bar: &Progress, text: String| {
        if show.progress && !show.json {
            bar.above(|| eprintln!("{text}"));
        }
    };
    let mut stopper = Stopper::new(t0, rules);
    loop {
        let wait = stopper.look(end.job, &mut bar, client)?;
        let (rid, reply, payload) = match client.next(wait) {
            Ok(r) => r,
            Err(e) if wait.is_some() && timed_out_reading(&e) => continue,
            Err(e) => return Err(e),
        };
        if rid != id {
            continue;
        }
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        let event = |v: serde_json::Value| {
            if show.json && show.progress {
                println!("{v}");
            }
        };
        if let (None, Some(job)) = (end.job, about(&reply)) {
            end.job = Some(job);
            bar.job(job);
            // Its id from the start: to follow, checkpoint or kill it meanwhile.
            note(&bar, format!("job {job} submitted"));
            event(json!({"event": "submitted", "job": job.to_string(), "ms": ms}));
        }
        match reply {
            ToolReply::Error { message } => {
                bar.finish();
                anyhow::bail!("{message}");
            }
            ToolReply::Placed { ranks, .. } => {
                size = Some(ranks.len() as u32);
                bar.ranks(started, exited, size);
                let mut per: BTreeMap<String, Vec<u32>> = BTreeMap::new();
                for (r, n) in &ranks {
                    per.entry(n.to_string()).or_default().push(*r);
                }
                for (n, rs) in per {
                    note(&bar, format!("  placed rank(s) {rs:?} on {n}"));
                }
            }
            ToolReply::Started { rank, node, .. } => {
                started += 1;
                bar.ranks(started, exited, size);
                event(json!({"event": "started", "rank": rank, "node": node.to_string(), "ms": ms}));
                if size.is_some_and(|s| started >= s) && end.all_running.is_none() {
                    end.all_running = Some(t0.elapsed());
                    note(&bar, format!("  all {started} rank(s) running after {ms:.0} ms"));
                }
            }
            ToolReply::Output { rank, stream, .. } => {
                if rank == 0 && stream == Stream::Stdout {
                    end.stdout0.push_str(&String::from_utf8_lossy(&payload));
                }
                if show.output {
                    let buf = lines.entry((rank, stream)).or_default();
                    buf.extend_from_slice(&payload);
                    bar.above(|| flush_lines(buf, rank, stream, false, show));
                }
            }
            ToolReply::OutputFile { rank, path, ok, .. } => {
                note(
                    &bar,
                    format!("  rank {rank}: output file {path} {}", if ok { "back, digest ok" } else { "CORRUPT" }),
                );
                end.files.push((rank, path, ok));
            }
            ToolReply::Queued { reason, .. } => {
                event(json!({"event": "queued", "reason": reason, "ms": ms}));
                note(&bar, format!("  queued: {reason}"));
                bar.queued(&reason);
            }
            ToolReply::Restarting { attempt, reason, .. } => {
                (started, exited) = (0, 0);
                bar.ranks(started, exited, size);
                event(json!({"event": "restarting", "attempt": attempt, "reason": reason, "ms": ms}));
                let max = p2pmp_core::job::MAX_RESTARTS;
                note(&bar, format!("  restarting {reason} (restart {attempt} of at most {max})"));
            }
            ToolReply::Staging { node, done, total, .. } => {
                event(json!({"event": "staging", "node": node.to_string(), "done": done, "total": total, "ms": ms}));
                bar.staging(node, done, total);
            }
            ToolReply::Fetching { rank, name, done, total, .. } => {
                event(json!({"event": "fetching", "rank": rank, "name": name, "done": done, "total": total, "ms": ms}));
                bar.fetching(rank, name, done, total);
            }
            ToolReply::Exited { rank, code, .. } => {
                exited += 1;
                bar.ranks(started, exited, size);
                event(json!({"event": "exited", "rank": rank, "code": code, "ms": ms}));
                if code != 0 {
                    note(&bar, format!("  rank {rank} {}", p2pmp_core::job::describe_exit(code)));
                }
            }
            ToolReply::Finished { job, phase, codes, error } => {
                end.job = Some(job);
                bar.finish();
                for ((rank, stream), buf) in lines.iter_mut() {
                    if show.output {
                        flush_lines(buf, *rank, *stream, true, show);
                    }
                }
                end.phase = phase;
                end.codes = codes;
                end.error = error;
                end.total = t0.elapsed();
                let _ = std::io::stdout().flush();
                return Ok(end);
            }
            _ => {}
        }
    }
}

/// Whether reading failed only because its time ran out.
fn timed_out_reading(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|e| matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
}

/// The job a progress reply is about.
fn about(reply: &ToolReply) -> Option<JobId> {
    match reply {
        ToolReply::Submitted { job, .. }
        | ToolReply::Placed { job, .. }
        | ToolReply::Started { job, .. }
        | ToolReply::Output { job, .. }
        | ToolReply::OutputFile { job, .. }
        | ToolReply::Exited { job, .. }
        | ToolReply::Queued { job, .. }
        | ToolReply::Staging { job, .. }
        | ToolReply::Fetching { job, .. }
        | ToolReply::Restarting { job, .. } => Some(*job),
        _ => None,
    }
}
