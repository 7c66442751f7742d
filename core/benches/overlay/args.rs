//! Command-line options of the overlay benchmark (a plain parser: cargo bench
//! passes its own `--bench` flag, which is accepted and ignored).

use std::fmt::Write;

pub(crate) const USAGE: &str = "\
Overlay benchmark: builds a network in the deterministic simulator, waits for it to
converge, then measures lookups.

usage: cargo bench -p p2pmp-core --bench overlay -- [options]

  --overlay chord|can      overlay to simulate (default chord)
  --dims D                 CAN's dimensions, 1 to 8 (default 2)
  --nodes N                network size (default 1000)
  --lookups L              random lookups once converged (default 10000)
  --seed S                 seed of the whole run (default 1)
  --join-rate R            joins per virtual second while building (default N/10,
                           at least 10, at most 2000)
  --sweep                  run N = 2..16, 100, 1000, 10000 (add --max-nodes 100000 for more)
  --max-nodes N            largest N of --sweep (default 10000)
  --churn                  ramp-up / steady churn / ramp-down experiment instead
  --burst K                recovery instead: a converged network of --nodes, then K
                           joins at once through random contacts; virtual time until
                           the routing state is exact again, lookups meanwhile
  --compare                --sweep of Chord and of CAN in 1, 2, 3 and 4 dimensions,
                           one table, one plot (with --plot)
  --plot FILE.png          draw mean hops against N (or the churn curve)
  --out DIR                where to write the JSON data (default <workspace>/target/bench-results)
  --quiet                  no progress lines on stderr
  -h, --help               this text

Set OVERLAY_DEBUG=1 to print the checker's report while the network converges.
";

#[derive(Debug, Clone)]
pub(crate) struct Args {
    pub(crate) overlay: String,
    pub(crate) dims: usize,
    pub(crate) burst: Option<usize>,
    pub(crate) compare: bool,
    pub(crate) nodes: usize,
    pub(crate) lookups: usize,
    pub(crate) seed: u64,
    /// Joins per virtual second; `None`: chosen from the network size.
    pub(crate) join_rate: Option<usize>,
    pub(crate) sweep: bool,
    pub(crate) max_nodes: usize,
    pub(crate) churn: bool,
    pub(crate) plot: Option<String>,
    pub(crate) out: String,
    pub(crate) quiet: bool,
}

impl Args {
    pub(crate) fn parse(argv: impl IntoIterator<Item = String>) -> Result<Option<Args>, String> {
        let mut a = Args {
            overlay: "chord".into(),
            dims: 2,
            burst: None,
            compare: false,
            nodes: 1000,
            lookups: 10_000,
            seed: 1,
            join_rate: None,
            sweep: false,
            max_nodes: 10_000,
            churn: false,
            plot: None,
            out: concat!(env!("CARGO_MANIFEST_DIR"), "/../target/bench-results").into(),
            quiet: false,
        };
        let mut it = argv.into_iter();
        while let Some(flag) = it.next() {
            let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
            match flag.as_str() {
                "-h" | "--help" => return Ok(None),
                "--bench" => {}
                "--overlay" => a.overlay = value("--overlay")?,
                "--dims" => a.dims = number(&value("--dims")?, "--dims")?,
                "--burst" => a.burst = Some(number(&value("--burst")?, "--burst")?),
                "--compare" => a.compare = true,
                "--nodes" => a.nodes = number(&value("--nodes")?, "--nodes")?,
                "--lookups" => a.lookups = number(&value("--lookups")?, "--lookups")?,
                "--seed" => a.seed = number(&value("--seed")?, "--seed")? as u64,
                "--join-rate" => a.join_rate = Some(number(&value("--join-rate")?, "--join-rate")?),
                "--max-nodes" => a.max_nodes = number(&value("--max-nodes")?, "--max-nodes")?,
                "--sweep" => a.sweep = true,
                "--churn" => a.churn = true,
                "--plot" => a.plot = Some(value("--plot")?),
                "--out" => a.out = value("--out")?,
                "--quiet" => a.quiet = true,
                other => {
                    let mut msg = format!("unknown option {other:?}\n\n");
                    let _ = write!(msg, "{USAGE}");
                    return Err(msg);
                }
            }
        }
        if a.overlay != "chord" && a.overlay != "can" {
            return Err(format!("unknown overlay {:?}: chord or can", a.overlay));
        }
        if !(1..=8).contains(&a.dims) {
            return Err(format!("--dims must be 1..=8, got {}", a.dims));
        }
        if a.burst == Some(0) {
            return Err("--burst must be at least 1".into());
        }
        if a.join_rate == Some(0) {
            return Err("--join-rate must be at least 1".into());
        }
        if a.nodes == 0 || a.nodes > 1_000_000 {
            return Err(format!("--nodes must be 1..=1000000, got {}", a.nodes));
        }
        Ok(Some(a))
    }
}

fn number(s: &str, name: &str) -> Result<usize, String> {
    s.replace('_', "").parse().map_err(|_| format!("{name} takes a whole number, got {s:?}"))
}
