//! What `p2pjob` draws on a terminal while it follows a job: a live line (the
//! job, its state, ranks running and exited, time since following began; the
//! reason while it is queued) and, while files move, bars of bytes, rate and
//! time left for the files staged to the nodes and the output files coming
//! back. Output and progress lines print above them. Off a terminal or with
//! `--json` nothing is drawn and lines print as they come.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use p2pmp_core::job::JobId;
use p2pmp_core::machine::NodeAddr;

/// Bytes done and in all, per transfer, summed into one bar.
#[derive(Debug)]
struct Transfer<K> {
    bar: Option<ProgressBar>,
    parts: BTreeMap<K, (u64, u64)>,
    label: &'static str,
}

impl<K: Ord> Transfer<K> {
    fn new(label: &'static str) -> Self {
        Transfer { bar: None, parts: BTreeMap::new(), label }
    }

    fn update(&mut self, multi: &MultiProgress, key: K, done: u64, total: u64) {
        self.parts.insert(key, (done.min(total), total));
        let (done, total) = self.parts.values().fold((0, 0), |(d, t), (pd, pt)| (d + pd, t + pt));
        if total == 0 {
            return;
        }
        let bar = self.bar.get_or_insert_with(|| {
            let style = ProgressStyle::with_template(
                "  {prefix:<8} [{bar:30}] {bytes:>10}/{total_bytes:<10} {bytes_per_sec:>12}  {eta} left",
            )
            .expect("a valid template")
            .progress_chars("=> ");
            multi.add(ProgressBar::new(total).with_style(style).with_prefix(self.label))
        });
        bar.set_length(total);
        bar.set_position(done);
        if done >= total {
            bar.finish_and_clear();
            self.bar = None;
            self.parts.clear();
        }
    }
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Progress {
    /// `None` when nothing is drawn.
    multi: Option<MultiProgress>,
    line: ProgressBar,
    job: Option<JobId>,
    state: String,
    staging: Transfer<NodeAddr>,
    fetching: Transfer<(u32, String)>,
}

impl Progress {
    /// Draws on stderr when `enabled` and stderr is a terminal.
    pub(crate) fn new(enabled: bool) -> Self {
        let multi = (enabled && std::io::stderr().is_terminal())
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        let line = match &multi {
            Some(m) => {
                let style = ProgressStyle::with_template("{spinner} {prefix} {msg}  [{elapsed}]")
                    .expect("a valid template")
                    .tick_chars("|/-\\ ");
                let line = m.add(ProgressBar::new_spinner().with_style(style));
                line.enable_steady_tick(Duration::from_millis(250));
                line
            }
            None => ProgressBar::hidden(),
        };
        Progress {
            multi,
            line,
            job: None,
            state: "submitting".into(),
            staging: Transfer::new("staging"),
            fetching: Transfer::new("outputs"),
        }
    }

    /// Runs `f` (which prints) with the bars out of its way.
    pub(crate) fn above<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.multi {
            Some(m) => m.suspend(f),
            None => f(),
        }
    }

    fn redraw(&self) {
        let job = self.job.map(|j| format!("job {j}")).unwrap_or_else(|| "job".into());
        self.line.set_prefix(job);
        self.line.set_message(self.state.clone());
    }

    /// The job's id is known.
    pub(crate) fn job(&mut self, job: JobId) {
        self.job = Some(job);
        self.redraw();
    }

    /// The job waits for slots, for `reason`.
    pub(crate) fn queued(&mut self, reason: &str) {
        self.state = format!("queued: {reason}");
        self.redraw();
    }

    /// Ranks started and exited so far, of `size`.
    pub(crate) fn ranks(&mut self, started: u32, exited: u32, size: Option<u32>) {
        let n = size.map_or_else(|| "?".to_owned(), |s| s.to_string());
        let running = started.saturating_sub(exited);
        self.state = format!("running: {running} of {n} rank(s) running, {exited} exited");
        self.redraw();
    }

    /// Staging to `node`: `done` of `total` bytes.
    pub(crate) fn staging(&mut self, node: NodeAddr, done: u64, total: u64) {
        if let Some(m) = &self.multi {
            self.staging.update(m, node, done, total);
        }
        if self.state == "submitting" {
            self.state = "placing: staging files".into();
            self.redraw();
        }
    }

    /// Output file `name` of `rank` coming back: `done` of `total` bytes.
    pub(crate) fn fetching(&mut self, rank: u32, name: String, done: u64, total: u64) {
        if let Some(m) = &self.multi {
            self.fetching.update(m, (rank, name), done, total);
        }
    }

    /// The job is over: everything drawn goes.
    pub(crate) fn finish(&self) {
        for bar in [Some(&self.line), self.staging.bar.as_ref(), self.fetching.bar.as_ref()].into_iter().flatten() {
            bar.finish_and_clear();
        }
    }
}
