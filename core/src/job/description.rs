//! The `<p2pjob>` XML job file: parsing (with quick-xml) and writing.
//!
//! A classic file is accepted unchanged:
//!
//! ```
//! use p2pmp_core::job::JobDescription;
//! let xml = "<?xml version=\"1.0\"?>\n<p2pjob>\n  <executable>ring</executable>\n  \
//!     <arguments>20000</arguments>\n  <processes>8</processes>\n  \
//!     <requirement>linux</requirement>\n  <requirement>mem_mb&gt;=4096</requirement>\n</p2pjob>\n";
//! let parsed = JobDescription::parse(xml.as_bytes()).unwrap();
//! assert_eq!(parsed.job.processes, 8);
//! assert_eq!(JobDescription::parse(parsed.job.to_xml().as_bytes()).unwrap().job, parsed.job);
//! ```
//!
//! Elements: `executable`, `processes` and at least one `requirement` are mandatory;
//! `arguments` (split on whitespace, as the classic tool did), `inputfile`,
//! `outputfile` (repeatable) are classic. Extensions, all optional: `argument` (one
//! argument verbatim, spaces kept), `checkpoint` (the interval between the job's
//! coordinated checkpoints; `0` means only on request, as when absent; empty, `yes`
//! or `true` mean [`DEFAULT_CHECKPOINT_INTERVAL`]), `restart` (`checkpoint`,
//! `scratch` or `fail`, default `fail`; `restart`, accepted before, means
//! `checkpoint`: see [`RestartPolicy`]), `timeout` (for the whole job),
//! `queuetimeout` (how long it may wait for free slots before it fails) and
//! `limit` (repeatable, `KEY=VALUE` with a key of [`JOB_LIMITS`]: the job asks to
//! run under less than the node allows), `env` (repeatable, `NAME=VALUE`: a
//! variable every rank gets; see [`check_env_name`]). Durations are a number with an optional
//! unit `ms`, `s` (default), `m` or `h`. Unknown elements are skipped with a
//! [`JobFileWarning`].
//!
//! No path may lead out of the job directory ([`check_path`]): an output file is
//! a plain name, an input file a relative path without `..`, the executable the
//! same or absolute; others are refused with their line and column.

use std::time::Duration;

use quick_xml::events::{BytesStart, Event};
use quick_xml::{Reader, escape};
use serde::{Deserialize, Serialize};

use super::requirements::{Requirement, RequirementError};

mod paths;
mod staged;
pub use paths::{MAX_NAME, PathProblem, PathUse, check_path, plain_name};
pub use staged::{StagedSource, join_path};

/// Largest job file accepted.
pub const MAX_JOB_FILE: usize = 1 << 20;
/// The name of the job file in the job directory (staged file 0).
pub const STAGED_JOB_FILE: &str = "job.xml";

/// Most processes one job may ask for.
pub const MAX_PROCESSES: u32 = 4096;
/// Most elements a job file may contain.
pub const MAX_ELEMENTS: usize = 16_384;
/// Deepest element nesting accepted.
pub const MAX_DEPTH: usize = 32;
/// Most requirements one job may carry.
pub const MAX_REQUIREMENTS: usize = 256;
/// Longest timeout or checkpoint interval accepted (a year).
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);
/// The limits a job may ask for with `<limit>KEY=VALUE</limit>` (the node's
/// own maxima still hold: a job only gets below them).
pub const JOB_LIMITS: [&str; 6] = ["cpu_s", "memory_mb", "open_files", "processes", "file_size_mb", "disk_mb"];
/// Most `<env>` variables one job may set.
pub const MAX_ENV: usize = 256;
/// Longest name of an `<env>` variable.
pub const MAX_ENV_NAME: usize = 128;
/// The prefix of the variables a node sets for a rank (who it is): no
/// `<env>` name has it, so a variable with it is the node's.
pub const NODE_ENV_PREFIX: &str = "P2PMP_";

/// Why a name may not be set by `<env>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvNameError {
    /// Not a shell variable's name.
    #[error("{0:?} is not a variable name (letters, digits and _, at most {MAX_ENV_NAME})")]
    NotAName(String),
    /// One of the node's own.
    #[error("{0} is the node's to set (P2PMP_ variables say who a rank is)")]
    Reserved(String),
}

/// Whether `name` may be set by `<env>`: a shell variable's name (a letter
/// or `_`, then letters, digits and `_`, at most [`MAX_ENV_NAME`]), and not
/// one of the node's own `P2PMP_` variables (a rank's identity).
pub fn check_env_name(name: &str) -> Result<(), EnvNameError> {
    let b = name.as_bytes();
    let word = b.first().is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_');
    if !word || b.len() > MAX_ENV_NAME {
        return Err(EnvNameError::NotAName(name.chars().take(MAX_ENV_NAME).collect()));
    }
    if name.starts_with(NODE_ENV_PREFIX) {
        return Err(EnvNameError::Reserved(name.to_owned()));
    }
    Ok(())
}

/// The checkpoint interval `<checkpoint/>` (or `yes`, `true`) asks for.
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(60);

/// What to do when a node running a rank dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum RestartPolicy {
    /// Fail the job (the classic behaviour).
    #[default]
    Fail,
    /// Restart the lost ranks elsewhere from the job's last complete checkpoint
    /// and roll the others back to it (`checkpoint`; `restart` is read as this).
    Checkpoint,
    /// Start the whole job again from the beginning (`scratch`): for programs
    /// that never call the checkpoint API.
    Scratch,
}

impl RestartPolicy {
    /// Its name in a job file.
    pub fn name(self) -> &'static str {
        match self {
            RestartPolicy::Fail => "fail",
            RestartPolicy::Checkpoint => "checkpoint",
            RestartPolicy::Scratch => "scratch",
        }
    }
}

/// A parsed job description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobDescription {
    /// The program to run (a path relative to the submitter's directory).
    pub executable: String,
    /// Its arguments.
    pub arguments: Vec<String>,
    /// Files shipped to every node before the start.
    pub inputfiles: Vec<String>,
    /// Files brought back from every rank after exit.
    pub outputfiles: Vec<String>,
    /// Number of processes (ranks), 1 to [`MAX_PROCESSES`].
    pub processes: u32,
    /// What every chosen node must offer; never empty.
    pub requirements: Vec<Requirement>,
    /// Interval between the job's coordinated checkpoints; none: a checkpoint is
    /// taken only when asked for (`p2pjob checkpoint`, a migration).
    pub checkpoint: Option<Duration>,
    /// What to do when a node dies.
    pub restart: RestartPolicy,
    /// Wall-clock limit for the whole job.
    pub timeout: Option<Duration>,
    /// How long the job may wait for free slots (unlimited when absent, within `timeout`).
    pub queue_timeout: Option<Duration>,
    /// Limits the job asks for, each a key of [`JOB_LIMITS`] once, above 0.
    pub limits: Vec<(String, u64)>,
    /// Variables every rank gets (`NAME`, `VALUE`), each name once, at most
    /// [`MAX_ENV`] (see [`check_env_name`]).
    pub env: Vec<(String, String)>,
}

/// A description and the warnings parsing it produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedJob {
    /// The description.
    pub job: JobDescription,
    /// Things ignored on the way (unknown elements, stray text).
    pub warnings: Vec<JobFileWarning>,
}

/// Something the parser ignored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {kind}")]
pub struct JobFileWarning {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// What was ignored.
    pub kind: WarningKind,
}

/// What a warning is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WarningKind {
    /// An element this version does not know, skipped with its content.
    #[error("unknown element <{0}> ignored")]
    UnknownElement(String),
    /// Text directly inside `<p2pjob>`.
    #[error("text outside any element ignored")]
    StrayText,
}

/// A job file that cannot be used, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {kind}")]
#[non_exhaustive]
pub struct JobFileError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// What is wrong.
    pub kind: JobFileErrorKind,
}

/// What is wrong with a job file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JobFileErrorKind {
    /// Over [`MAX_JOB_FILE`] bytes.
    #[error("job file of {0} bytes exceeds the limit of {MAX_JOB_FILE}")]
    TooLarge(usize),
    /// Not UTF-8.
    #[error("not valid UTF-8")]
    NotUtf8,
    /// Malformed XML.
    #[error("malformed XML: {0}")]
    Xml(String),
    /// The root element is not `<p2pjob>`, or there is none.
    #[error("expected a <p2pjob> root element{}", .0.as_ref().map(|n| format!(", found <{n}>")).unwrap_or_default())]
    NotAJob(Option<String>),
    /// Content after `</p2pjob>`.
    #[error("content after </p2pjob>")]
    TrailingContent,
    /// A mandatory element is missing.
    #[error("missing <{0}>")]
    Missing(&'static str),
    /// An element that may appear once appears again.
    #[error("<{0}> given more than once")]
    Duplicate(&'static str),
    /// An element inside one that holds only text.
    #[error("unexpected element <{inner}> inside <{outer}>")]
    Nested { outer: &'static str, inner: String },
    /// An element's text is not a valid value.
    #[error("invalid <{element}>: {reason}")]
    Invalid { element: &'static str, reason: String },
    /// A requirement that is neither a tag nor a comparison.
    #[error("invalid <requirement>: {0}")]
    Requirement(RequirementError),
    /// Too many elements, too deep, or too many of one kind.
    #[error("too many {0}")]
    TooMany(&'static str),
    /// A path that would lead out of the job directory (see [`check_path`]).
    #[error("<{element}> {path:?} {problem}")]
    Path { element: &'static str, path: String, problem: PathProblem },
}

/// The known leaf elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Executable,
    Arguments,
    Argument,
    InputFile,
    OutputFile,
    Processes,
    Requirement,
    Checkpoint,
    Restart,
    Timeout,
    QueueTimeout,
    Limit,
    Env,
}

impl Field {
    const ALL: [(&'static str, Field); 13] = [
        ("executable", Field::Executable),
        ("arguments", Field::Arguments),
        ("argument", Field::Argument),
        ("inputfile", Field::InputFile),
        ("outputfile", Field::OutputFile),
        ("processes", Field::Processes),
        ("requirement", Field::Requirement),
        ("checkpoint", Field::Checkpoint),
        ("restart", Field::Restart),
        ("timeout", Field::Timeout),
        ("queuetimeout", Field::QueueTimeout),
        ("limit", Field::Limit),
        ("env", Field::Env),
    ];

    fn from_name(name: &[u8]) -> Option<Field> {
        Field::ALL.iter().find(|(n, _)| n.as_bytes() == name).map(|(_, f)| *f)
    }

    fn name(self) -> &'static str {
        Field::ALL.iter().find(|(_, f)| *f == self).map(|(n, _)| *n).unwrap_or("?")
    }
}

/// 1-based line and column (in characters) of byte `offset` in `data`.
pub fn line_column(data: &[u8], offset: usize) -> (usize, usize) {
    let prefix = &data[..offset.min(data.len())];
    let line_start = prefix.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let line = 1 + prefix.iter().filter(|&&b| b == b'\n').count();
    let column = 1 + String::from_utf8_lossy(&prefix[line_start..]).chars().count();
    (line, column)
}

/// Parses a duration: a number with an optional unit `ms`, `s` (default), `m`, `h`.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, unit_ms) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1000)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60_000)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3_600_000)
    } else {
        (s, 1000)
    };
    let num = num.trim();
    if num.is_empty() || num.len() > 12 || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ms = num.parse::<u64>().ok()?.checked_mul(unit_ms)?;
    let d = Duration::from_millis(ms);
    (d <= MAX_DURATION).then_some(d)
}

/// Writes a duration the way [`parse_duration`] reads it back exactly.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms % 1000 == 0 { format!("{}s", ms / 1000) } else { format!("{ms}ms") }
}

#[derive(Default)]
struct Builder {
    executable: Option<String>,
    arguments: Vec<String>,
    inputfiles: Vec<String>,
    outputfiles: Vec<String>,
    processes: Option<u32>,
    requirements: Vec<Requirement>,
    checkpoint: Option<Duration>,
    checkpoint_seen: bool,
    restart: Option<RestartPolicy>,
    timeout: Option<Duration>,
    queue_timeout: Option<Duration>,
    limits: Vec<(String, u64)>,
    env: Vec<(String, String)>,
}

/// The name a staged file gets in the job directory: its last path component.
pub fn staged_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

impl Builder {
    /// Files are staged by their base name into one job directory: two that
    /// share one (or one named like the job file) would overwrite each other.
    fn check_staged_name<'a>(&self, path: &str, others: impl Iterator<Item = &'a String>) -> Result<(), String> {
        let name = staged_name(path);
        if name == STAGED_JOB_FILE {
            return Err(format!("{path:?} would be staged as {name:?}, the name of the job file itself"));
        }
        match others.into_iter().find(|o| staged_name(o) == name) {
            Some(o) => Err(format!(
                "{path:?} and {o:?} would both be staged as {name:?} (files go by base name into one job directory)"
            )),
            None => Ok(()),
        }
    }

    fn set(&mut self, field: Field, text: String) -> Result<(), JobFileErrorKind> {
        let invalid = |reason: &str| JobFileErrorKind::Invalid { element: field.name(), reason: reason.into() };
        let once = |present: bool| if present { Err(JobFileErrorKind::Duplicate(field.name())) } else { Ok(()) };
        let t = text.trim();
        let path_use = match field {
            Field::Executable => Some(PathUse::Executable),
            Field::InputFile => Some(PathUse::Input),
            Field::OutputFile => Some(PathUse::Output),
            _ => None,
        };
        if let Some(used) = path_use.filter(|_| !t.is_empty()) {
            check_path(t, used).map_err(|problem| JobFileErrorKind::Path {
                element: field.name(),
                path: t.to_owned(),
                problem,
            })?;
        }
        let count = self.arguments.len() + self.inputfiles.len() + self.outputfiles.len();
        if count >= MAX_ELEMENTS {
            return Err(JobFileErrorKind::TooMany("arguments and files"));
        }
        match field {
            Field::Executable => {
                once(self.executable.is_some())?;
                if t.is_empty() {
                    return Err(invalid("empty"));
                }
                self.check_staged_name(t, self.inputfiles.iter()).map_err(|r| invalid(&r))?;
                self.executable = Some(t.to_owned());
            }
            Field::Arguments => self.arguments.extend(t.split_whitespace().map(str::to_owned)),
            Field::Argument => self.arguments.push(text),
            Field::InputFile | Field::OutputFile => {
                if t.is_empty() {
                    return Err(invalid("empty"));
                }
                if field == Field::InputFile {
                    let others = self.executable.iter().chain(&self.inputfiles);
                    self.check_staged_name(t, others).map_err(|r| invalid(&r))?;
                }
                let list = if field == Field::InputFile { &mut self.inputfiles } else { &mut self.outputfiles };
                list.push(t.to_owned());
            }
            Field::Processes => {
                once(self.processes.is_some())?;
                let n: u32 = t.parse().map_err(|_| invalid("not a whole number"))?;
                if n == 0 || n > MAX_PROCESSES {
                    return Err(invalid(&format!("{n} is outside 1..={MAX_PROCESSES}")));
                }
                self.processes = Some(n);
            }
            Field::Requirement => {
                if self.requirements.len() >= MAX_REQUIREMENTS {
                    return Err(JobFileErrorKind::TooMany("requirements"));
                }
                self.requirements.push(t.parse().map_err(JobFileErrorKind::Requirement)?);
            }
            Field::Checkpoint => {
                once(self.checkpoint_seen)?;
                let d = match t {
                    "" | "yes" | "true" => DEFAULT_CHECKPOINT_INTERVAL,
                    _ => parse_duration(t).ok_or_else(|| invalid("not a duration"))?,
                };
                self.checkpoint = Some(d).filter(|d| !d.is_zero());
                self.checkpoint_seen = true;
            }
            Field::Restart => {
                once(self.restart.is_some())?;
                self.restart = Some(match t {
                    "checkpoint" | "restart" => RestartPolicy::Checkpoint,
                    "scratch" => RestartPolicy::Scratch,
                    "fail" => RestartPolicy::Fail,
                    _ => return Err(invalid("expected checkpoint, scratch or fail")),
                });
            }
            Field::Limit => {
                let (key, value) = t.split_once('=').ok_or_else(|| invalid("expected KEY=VALUE"))?;
                let key = key.trim();
                if !JOB_LIMITS.contains(&key) {
                    return Err(invalid(&format!("{key:?} is not one of {}", JOB_LIMITS.join(", "))));
                }
                if self.limits.iter().any(|(k, _)| k == key) {
                    return Err(invalid(&format!("{key} given more than once")));
                }
                let value: u64 = value.trim().parse().map_err(|_| invalid("not a whole number"))?;
                if value == 0 {
                    return Err(invalid("a limit must be above 0"));
                }
                self.limits.push((key.to_owned(), value));
            }
            Field::Env => {
                let (name, value) = t.split_once('=').ok_or_else(|| invalid("expected NAME=VALUE"))?;
                check_env_name(name).map_err(|e| invalid(&e.to_string()))?;
                if self.env.iter().any(|(n, _)| n == name) {
                    return Err(invalid(&format!("{name} given more than once")));
                }
                if self.env.len() >= MAX_ENV {
                    return Err(JobFileErrorKind::TooMany("env variables"));
                }
                self.env.push((name.to_owned(), value.to_owned()));
            }
            Field::Timeout | Field::QueueTimeout => {
                let slot = if field == Field::Timeout { &mut self.timeout } else { &mut self.queue_timeout };
                once(slot.is_some())?;
                *slot =
                    Some(parse_duration(t).filter(|d| !d.is_zero()).ok_or_else(|| invalid("not a positive duration"))?);
            }
        }
        Ok(())
    }
}

/// Parser state: where in the document we are.
enum Place {
    BeforeRoot,
    InRoot,
    /// Inside a known leaf element (starting at that offset), collecting its text.
    InField(Field, String, usize),
    /// Inside an unknown element, skipping until depth returns to 1.
    Skipping(usize),
    AfterRoot,
}

impl JobDescription {
    /// Parses a job file. Never panics; every error names a line and column.
    pub fn parse(data: &[u8]) -> Result<ParsedJob, JobFileError> {
        let err_at = |offset: usize, kind| {
            let (line, column) = line_column(data, offset);
            JobFileError { line, column, kind }
        };
        if data.len() > MAX_JOB_FILE {
            return Err(err_at(0, JobFileErrorKind::TooLarge(data.len())));
        }
        let text = std::str::from_utf8(data).map_err(|e| err_at(e.valid_up_to(), JobFileErrorKind::NotUtf8))?;
        let mut reader = Reader::from_str(text);
        let mut b = Builder::default();
        let mut warnings = Vec::new();
        let mut place = Place::BeforeRoot;
        let mut elements = 0usize;
        let mut root_at = 0usize;
        loop {
            let at = usize::try_from(reader.buffer_position()).unwrap_or(usize::MAX);
            let ev = match reader.read_event() {
                Ok(ev) => ev,
                Err(e) => {
                    let pos = usize::try_from(reader.error_position()).unwrap_or(usize::MAX);
                    return Err(err_at(pos, JobFileErrorKind::Xml(e.to_string())));
                }
            };
            let err = |kind| Err(err_at(at, kind));
            let warn = |kind| {
                let (line, column) = line_column(data, at);
                JobFileWarning { line, column, kind }
            };
            // An empty element is a start immediately followed by its end.
            let (start, end): (Option<&BytesStart<'_>>, bool) = match &ev {
                Event::Start(s) => (Some(s), false),
                Event::Empty(s) => (Some(s), true),
                Event::End(_) => (None, true),
                _ => (None, false),
            };
            if let Some(s) = start {
                elements += 1;
                if elements > MAX_ELEMENTS {
                    return err(JobFileErrorKind::TooMany("elements"));
                }
                let name = s.name();
                let name = name.as_ref();
                place = match place {
                    Place::BeforeRoot if name == b"p2pjob" => {
                        root_at = at;
                        Place::InRoot
                    }
                    Place::BeforeRoot => {
                        return err(JobFileErrorKind::NotAJob(Some(String::from_utf8_lossy(name).into_owned())));
                    }
                    Place::InRoot => match Field::from_name(name) {
                        Some(f) => Place::InField(f, String::new(), at),
                        None => {
                            warnings
                                .push(warn(WarningKind::UnknownElement(String::from_utf8_lossy(name).into_owned())));
                            Place::Skipping(0)
                        }
                    },
                    Place::InField(f, ..) => {
                        let inner = String::from_utf8_lossy(name).into_owned();
                        return err(JobFileErrorKind::Nested { outer: f.name(), inner });
                    }
                    Place::Skipping(d) if d + 1 >= MAX_DEPTH => {
                        return err(JobFileErrorKind::TooMany("nesting levels"));
                    }
                    Place::Skipping(d) => Place::Skipping(d + 1),
                    Place::AfterRoot => return err(JobFileErrorKind::TrailingContent),
                };
            }
            if end {
                place = match place {
                    Place::InRoot => Place::AfterRoot,
                    Place::InField(f, text, start) => {
                        b.set(f, text).map_err(|kind| err_at(start, kind))?;
                        Place::InRoot
                    }
                    Place::Skipping(0) => Place::InRoot,
                    Place::Skipping(d) => Place::Skipping(d - 1),
                    // quick-xml checks end names, so an end here is already an error.
                    p @ (Place::BeforeRoot | Place::AfterRoot) => p,
                };
                continue;
            }
            let piece = match &ev {
                Event::Text(t) => Some(t.decode().map_err(|e| err_at(at, JobFileErrorKind::Xml(e.to_string())))?),
                Event::CData(t) => Some(t.decode().map_err(|e| err_at(at, JobFileErrorKind::Xml(e.to_string())))?),
                Event::GeneralRef(r) => {
                    let bad = |what: String| err_at(at, JobFileErrorKind::Xml(what));
                    let name = r.decode().map_err(|e| bad(e.to_string()))?;
                    let resolved = match r.resolve_char_ref().map_err(|e| bad(e.to_string()))? {
                        Some(c) => c.to_string(),
                        None => escape::resolve_predefined_entity(&name)
                            .ok_or_else(|| bad(format!("unknown entity &{name};")))?
                            .to_owned(),
                    };
                    Some(resolved.into())
                }
                Event::Eof => break,
                _ => None,
            };
            if let Some(piece) = piece {
                match &mut place {
                    Place::InField(_, text, _) => text.push_str(&piece),
                    // One warning per run of stray text (entities split a run into pieces).
                    Place::InRoot
                        if !piece.trim().is_empty()
                            && warnings.last().is_none_or(|w: &JobFileWarning| w.kind != WarningKind::StrayText) =>
                    {
                        warnings.push(warn(WarningKind::StrayText));
                    }
                    Place::BeforeRoot | Place::AfterRoot if !piece.trim().is_empty() => {
                        return err(if matches!(place, Place::AfterRoot) {
                            JobFileErrorKind::TrailingContent
                        } else {
                            JobFileErrorKind::NotAJob(None)
                        });
                    }
                    _ => {}
                }
            }
        }
        let eof = data.len();
        match place {
            Place::AfterRoot => {}
            Place::BeforeRoot => return Err(err_at(eof, JobFileErrorKind::NotAJob(None))),
            _ => return Err(err_at(eof, JobFileErrorKind::Xml("unexpected end of file".into()))),
        }
        let missing = |what| err_at(root_at, JobFileErrorKind::Missing(what));
        let job = JobDescription {
            executable: b.executable.ok_or_else(|| missing("executable"))?,
            processes: b.processes.ok_or_else(|| missing("processes"))?,
            requirements: if b.requirements.is_empty() { return Err(missing("requirement")) } else { b.requirements },
            arguments: b.arguments,
            inputfiles: b.inputfiles,
            outputfiles: b.outputfiles,
            checkpoint: b.checkpoint,
            restart: b.restart.unwrap_or_default(),
            timeout: b.timeout,
            queue_timeout: b.queue_timeout,
            limits: b.limits,
            env: b.env,
        };
        Ok(ParsedJob { job, warnings })
    }

    /// A job built on the fly (`p2pjob run -n N prog args`): any node, no files.
    pub fn run(executable: impl Into<String>, arguments: Vec<String>, processes: u32) -> Self {
        JobDescription {
            executable: executable.into(),
            arguments,
            inputfiles: Vec::new(),
            outputfiles: Vec::new(),
            processes,
            requirements: Vec::new(),
            checkpoint: None,
            restart: RestartPolicy::Fail,
            timeout: None,
            queue_timeout: None,
            limits: Vec::new(),
            env: Vec::new(),
        }
    }

    /// The job file for this description; [`JobDescription::parse`] reads it back
    /// to an equal description. Arguments go in one classic `<arguments>` when none
    /// holds whitespace, else one `<argument>` each. A description without
    /// requirements (as [`JobDescription::run`] builds) gets the catch-all
    /// requirement `cores>=1` (every node has a core), so the file stays valid.
    pub fn to_xml(&self) -> String {
        fn esc(s: &str) -> String {
            escape::escape(s).replace('\r', "&#13;")
        }
        let mut out = String::from("<?xml version=\"1.0\"?>\n<p2pjob>\n");
        let mut elem = |name: &str, text: &str| out.push_str(&format!("  <{name}>{}</{name}>\n", esc(text)));
        elem("executable", &self.executable);
        if !self.arguments.is_empty() {
            if self.arguments.iter().all(|a| !a.is_empty() && !a.contains(char::is_whitespace)) {
                elem("arguments", &self.arguments.join(" "));
            } else {
                self.arguments.iter().for_each(|a| elem("argument", a));
            }
        }
        self.inputfiles.iter().for_each(|f| elem("inputfile", f));
        self.outputfiles.iter().for_each(|f| elem("outputfile", f));
        elem("processes", &self.processes.to_string());
        if self.requirements.is_empty() {
            elem("requirement", "cores>=1");
        }
        self.requirements.iter().for_each(|r| elem("requirement", &r.to_string()));
        if let Some(c) = self.checkpoint {
            elem("checkpoint", &format_duration(c));
        }
        if self.restart != RestartPolicy::Fail {
            elem("restart", self.restart.name());
        }
        if let Some(t) = self.timeout {
            elem("timeout", &format_duration(t));
        }
        if let Some(t) = self.queue_timeout {
            elem("queuetimeout", &format_duration(t));
        }
        self.limits.iter().for_each(|(k, v)| elem("limit", &format!("{k}={v}")));
        self.env.iter().for_each(|(k, v)| elem("env", &format!("{k}={v}")));
        out.push_str("</p2pjob>\n");
        out
    }
}

#[cfg(test)]
mod tests;
