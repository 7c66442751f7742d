//! Requirements a job places on a node, the resources a node advertises, and the
//! overlay names that connect the two.
//!
//! # Requirements
//! A [`Requirement`] is either a plain tag (`linux`, `x86_64`, `gpu`) or a comparison
//! `attr OP value` with `OP` one of `= != >= <= > <` (`mem_mb>=4096`, `cores>=2`,
//! `os=linux`). A comparison is numeric when both sides are numbers (`-?digits[.digits]`),
//! otherwise `=` and `!=` compare strings and the ordering operators never hold. An
//! attribute the node does not advertise satisfies no comparison, not even `!=`.
//! A plain tag holds when the node advertises it as a tag or as its `os` or `arch`,
//! so the classic requirements `linux` and `x86_64` keep working.
//!
//! Tags, and the values of the well-known attributes `os` and `arch`, match
//! case-insensitively (`Linux` is `linux`). An architecture also answers to its
//! family: `x86` is every one of `i386`, `i486`, `i586`, `i686`, `x86_64` (and
//! `amd64`), `arm` is every `arm*` and `aarch64` (also called `arm64`); so the
//! classic `<requirement>x86</requirement>` holds on an `x86_64` node, as does
//! `arch=x86`. Other attributes compare exactly.
//!
//! # Live attributes
//! Besides what a node is, its `res:any` line says what it has free right now:
//! `slots` (free process slots), `slots_total`, `load` (the one-minute load
//! average) and `mem_free_mb`, with `gen`, a number that grows with every
//! re-advertisement (a reader that sees several lines of one node keeps the
//! highest). They change, so they are never registered as narrowing names.
//!
//! # Registration naming scheme
//! A node at control address `A` with [`Resources`] `r` registers (value = the text):
//!
//! | name                | value                        | for                                   |
//! |---------------------|------------------------------|---------------------------------------|
//! | `res:any`           | `A` + ` ` + `r.to_line()`    | every node: "any node" queries, comparisons, load |
//! | `res:tag:T`         | `A`                          | each tag `T` (lower case), including `os`, `arch` and the arch's families |
//! | `res:K=V`           | `A`                          | each attribute but the live ones: `os`, `arch`, `cores`, `mem_mb`, extras |
//!
//! [`Resources::registrations`] lists them; a resource line looks like
//! `os=linux arch=x86_64 cores=2 mem_mb=24000 slots=1 slots_total=2 load=0.25
//! mem_free_mb=20000 gen=7 tags=gpu` (extra attributes appended as `K=V`). When
//! its free slots, load or free memory change the node withdraws its `res:any`
//! value and registers the new one.
//!
//! A submitter asks [`Requirement::query_name`] which name narrows each requirement:
//! a tag queries `res:tag:T`, a string equality `res:K=V`, and everything else
//! (numeric comparisons, `!=`, orderings) relies on `res:any` alone. It always queries
//! `res:any` too, for the resource lines: a node is a candidate when it appears in
//! every narrowing query's answer **and** its `res:any` line satisfies every
//! requirement (so stale or forged narrow registrations cannot place a process on an
//! unfit node).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::machine::NodeAddr;

/// The overlay name every node registers under, with its full resource line.
pub const ANY_NAME: &str = "res:any";
/// Longest requirement text accepted.
pub const MAX_REQUIREMENT_LEN: usize = 256;
/// Most tags or extra attributes a resource line may carry.
pub const MAX_RESOURCE_ITEMS: usize = 64;

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Op {
    /// `=`
    Eq,
    /// `!=`
    Ne,
    /// `>=`
    Ge,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `<`
    Lt,
}

impl Op {
    /// Every operator, two-character ones first (the order the parser tries them in).
    pub const ALL: [Op; 6] = [Op::Ne, Op::Ge, Op::Le, Op::Eq, Op::Gt, Op::Lt];

    /// The operator's text.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Eq => "=",
            Op::Ne => "!=",
            Op::Ge => ">=",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Lt => "<",
        }
    }

    fn holds(self, ord: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            Op::Eq => ord == Equal,
            Op::Ne => ord != Equal,
            Op::Ge => ord != Less,
            Op::Le => ord != Greater,
            Op::Gt => ord == Greater,
            Op::Lt => ord == Less,
        }
    }
}

/// One thing a node must offer.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Requirement {
    /// A plain tag (`linux`, `x86_64`, `gpu`).
    Tag(String),
    /// `attr OP value`.
    Compare { attr: String, op: Op, value: String },
}

/// Requirement text that is neither a tag nor a comparison.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequirementError {
    /// Nothing but whitespace.
    #[error("empty requirement")]
    Empty,
    /// Longer than [`MAX_REQUIREMENT_LEN`].
    #[error("requirement of {0} bytes exceeds {MAX_REQUIREMENT_LEN}")]
    TooLong(usize),
    /// A comparison whose attribute or value is missing or malformed.
    #[error("malformed comparison {0:?} (expected attr OP value, OP one of = != >= <= > <)")]
    BadComparison(String),
    /// A tag with whitespace or an operator character in it.
    #[error("malformed tag {0:?}")]
    BadTag(String),
}

fn is_word(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| !c.is_whitespace() && !c.is_control() && !"=!<>,".contains(c))
}

fn is_attr(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
}

/// `int[.frac]` (up to three decimals) as thousandths, e.g. `0.52` -> 520.
fn parse_milli(s: &str) -> Option<u32> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty()
        || int.len() > 6
        || frac.len() > 3
        || !(int.bytes().chain(frac.bytes())).all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let frac: u32 = format!("{frac:0<3}").parse().ok()?;
    Some(int.parse::<u32>().ok()? * 1000 + frac)
}

/// A number as requirements understand it: `-?digits(.digits)?`.
pub(crate) fn as_number(s: &str) -> Option<f64> {
    let body = s.strip_prefix('-').unwrap_or(s);
    let (int, frac) = body.split_once('.').unwrap_or((body, "0"));
    let digits = |p: &str| !p.is_empty() && p.len() <= 30 && p.bytes().all(|b| b.is_ascii_digit());
    if digits(int) && digits(frac) { s.parse().ok() } else { None }
}

impl FromStr for Requirement {
    type Err = RequirementError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.is_empty() {
            return Err(RequirementError::Empty);
        }
        if s.len() > MAX_REQUIREMENT_LEN {
            return Err(RequirementError::TooLong(s.len()));
        }
        let Some(at) = s.find(['=', '!', '<', '>']) else {
            return if is_word(s) {
                Ok(Requirement::Tag(s.to_owned()))
            } else {
                Err(RequirementError::BadTag(s.into()))
            };
        };
        let rest = &s[at..];
        let bad = || RequirementError::BadComparison(s.to_owned());
        let op = Op::ALL.into_iter().find(|op| rest.starts_with(op.as_str())).ok_or_else(bad)?;
        let attr = s[..at].trim();
        let value = rest[op.as_str().len()..].trim();
        if !is_attr(attr) || !is_word(value) {
            return Err(bad());
        }
        Ok(Requirement::Compare { attr: attr.to_owned(), op, value: value.to_owned() })
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Requirement::Tag(t) => f.write_str(t),
            Requirement::Compare { attr, op, value } => write!(f, "{attr}{}{value}", op.as_str()),
        }
    }
}

impl Requirement {
    /// Whether a node with `res` satisfies this requirement.
    pub fn matches(&self, res: &Resources) -> bool {
        match self {
            Requirement::Tag(t) => res.has_tag(t),
            Requirement::Compare { attr, op, value } => {
                let Some(have) = res.attr(attr) else { return false };
                match (as_number(&have), as_number(value)) {
                    (Some(a), Some(b)) => a.partial_cmp(&b).is_some_and(|o| op.holds(o)),
                    _ => {
                        let equal = match attr.as_str() {
                            "os" => have.eq_ignore_ascii_case(value),
                            "arch" => res.arch_names().contains(&value.to_ascii_lowercase()),
                            _ => have == *value,
                        };
                        match op {
                            Op::Eq => equal,
                            Op::Ne => !equal,
                            _ => false,
                        }
                    }
                }
            }
        }
    }

    /// The overlay name whose values narrow the candidates for this requirement, or
    /// `None` when only filtering the `res:any` lines can decide it.
    pub fn query_name(&self) -> Option<String> {
        match self {
            Requirement::Tag(t) => Some(tag_name(t)),
            // Every node registers its os, arch and arch families as tags.
            Requirement::Compare { attr, op: Op::Eq, value } if attr == "os" || attr == "arch" => Some(tag_name(value)),
            Requirement::Compare { attr, op: Op::Eq, value }
                if as_number(value).is_none() && !LIVE_ATTRS.contains(&attr.as_str()) =>
            {
                Some(attr_name(attr, value))
            }
            Requirement::Compare { .. } => None,
        }
    }
}

/// The overlay name for tag `t` (tags are case-insensitive: always lower case).
pub fn tag_name(t: &str) -> String {
    format!("res:tag:{}", t.to_ascii_lowercase())
}

/// Attributes that change while a node runs: on the `res:any` line only.
pub const LIVE_ATTRS: [&str; 4] = ["slots", "slots_total", "load", "mem_free_mb"];

/// The names an architecture answers to: itself, its aliases and its families.
pub fn arch_names(arch: &str) -> Vec<String> {
    let arch = arch.to_ascii_lowercase();
    let mut v = vec![arch.clone()];
    let alias = match arch.as_str() {
        "x86_64" => Some("amd64"),
        "amd64" => Some("x86_64"),
        "aarch64" => Some("arm64"),
        "arm64" => Some("aarch64"),
        _ => None,
    };
    v.extend(alias.map(str::to_owned));
    let x86 = matches!(arch.as_str(), "i386" | "i486" | "i586" | "i686" | "x86_64" | "amd64" | "x86");
    let arm = arch.starts_with("arm") || arch == "aarch64";
    v.extend([(x86, "x86"), (arm, "arm")].into_iter().filter(|(yes, _)| *yes).map(|(_, f)| f.to_owned()));
    v.sort();
    v.dedup();
    v
}

/// The overlay name for attribute `k` with value `v`.
pub fn attr_name(k: &str, v: &str) -> String {
    format!("res:{k}={v}")
}

/// What a node offers.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Resources {
    /// Operating system (`linux`).
    pub os: String,
    /// CPU architecture (`x86_64`).
    pub arch: String,
    /// CPU cores.
    pub cores: u32,
    /// Memory in MiB.
    pub mem_mb: u64,
    /// Free process slots right now.
    pub slots: u32,
    /// Process slots in all (0: not said, as in lines of older nodes).
    pub slots_total: u32,
    /// One-minute load average in thousandths, when known.
    pub load_milli: Option<u32>,
    /// Free memory in MiB (MemAvailable), when known.
    pub mem_free_mb: Option<u64>,
    /// Grows with every re-advertisement of the node's line: of two lines of one
    /// node, the one with the higher `gen` is current.
    pub generation: u64,
    /// Custom tags from the node's configuration.
    pub tags: BTreeSet<String>,
    /// Custom `key=value` attributes from the node's configuration.
    pub extra: BTreeMap<String, String>,
}

/// A resource line that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResourceLineError {
    /// A token that is not `key=value`.
    #[error("token {0:?} is not key=value")]
    BadToken(String),
    /// A numeric attribute that is not a number.
    #[error("attribute {0} is not a number")]
    BadNumber(&'static str),
    /// More than [`MAX_RESOURCE_ITEMS`] tags or attributes.
    #[error("too many tags or attributes")]
    TooMany,
    /// A `res:any` value without an address.
    #[error("bad node address {0:?}")]
    BadAddr(String),
}

impl Resources {
    /// Whether the node carries tag `t`, case-insensitively (its `os`, `arch` and
    /// the arch's families count as tags).
    pub fn has_tag(&self, t: &str) -> bool {
        self.all_tags().contains(&t.to_ascii_lowercase())
    }

    /// The names this node's architecture answers to (see [`arch_names`]).
    pub fn arch_names(&self) -> Vec<String> {
        if self.arch.is_empty() { Vec::new() } else { arch_names(&self.arch) }
    }

    /// Every tag in lower case, `os`, `arch` and the arch's families included.
    pub fn all_tags(&self) -> BTreeSet<String> {
        let mut t: BTreeSet<String> = self.tags.iter().map(|t| t.to_ascii_lowercase()).collect();
        if !self.os.is_empty() {
            t.insert(self.os.to_ascii_lowercase());
        }
        t.extend(self.arch_names());
        t
    }

    /// The load average, when known.
    pub fn load(&self) -> Option<f64> {
        self.load_milli.map(|l| f64::from(l) / 1000.0)
    }

    /// The value of attribute `k` as text.
    pub fn attr(&self, k: &str) -> Option<String> {
        match k {
            "os" => (!self.os.is_empty()).then(|| self.os.clone()),
            "arch" => (!self.arch.is_empty()).then(|| self.arch.clone()),
            "cores" => Some(self.cores.to_string()),
            "mem_mb" => Some(self.mem_mb.to_string()),
            "slots" => Some(self.slots.to_string()),
            "slots_total" => (self.slots_total > 0).then(|| self.slots_total.to_string()),
            "load" => self.load_milli.map(|l| format!("{}.{:03}", l / 1000, l % 1000)),
            "mem_free_mb" => self.mem_free_mb.map(|m| m.to_string()),
            _ => self.extra.get(k).cloned(),
        }
    }

    /// Every attribute, in line order.
    fn attrs(&self) -> Vec<(String, String)> {
        let mut v = Vec::new();
        for k in ["os", "arch", "cores", "mem_mb", "slots", "slots_total", "load", "mem_free_mb"] {
            if let Some(val) = self.attr(k) {
                v.push((k.to_owned(), val));
            }
        }
        v.extend(self.extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        v
    }

    /// The resource line carried in `res:any` values.
    pub fn to_line(&self) -> String {
        let mut parts: Vec<String> = self.attrs().into_iter().map(|(k, v)| format!("{k}={v}")).collect();
        if self.generation > 0 {
            parts.push(format!("gen={}", self.generation));
        }
        if !self.tags.is_empty() {
            parts.push(format!("tags={}", self.tags.iter().cloned().collect::<Vec<_>>().join(",")));
        }
        parts.join(" ")
    }

    /// Parses a resource line (peer input: never panics, bounded).
    pub fn from_line(line: &str) -> Result<Self, ResourceLineError> {
        let mut r = Resources::default();
        for tok in line.split_whitespace() {
            let (k, v) =
                tok.split_once('=').ok_or_else(|| ResourceLineError::BadToken(tok.chars().take(64).collect()))?;
            if !is_attr(k) || (k != "tags" && !is_word(v)) {
                return Err(ResourceLineError::BadToken(tok.chars().take(64).collect()));
            }
            match k {
                "os" => r.os = v.to_owned(),
                "arch" => r.arch = v.to_owned(),
                "cores" => r.cores = v.parse().map_err(|_| ResourceLineError::BadNumber("cores"))?,
                "mem_mb" => r.mem_mb = v.parse().map_err(|_| ResourceLineError::BadNumber("mem_mb"))?,
                "slots" => r.slots = v.parse().map_err(|_| ResourceLineError::BadNumber("slots"))?,
                "slots_total" => r.slots_total = v.parse().map_err(|_| ResourceLineError::BadNumber("slots_total"))?,
                "load" => r.load_milli = Some(parse_milli(v).ok_or(ResourceLineError::BadNumber("load"))?),
                "mem_free_mb" => {
                    r.mem_free_mb = Some(v.parse().map_err(|_| ResourceLineError::BadNumber("mem_free_mb"))?)
                }
                "gen" => r.generation = v.parse().map_err(|_| ResourceLineError::BadNumber("gen"))?,
                "tags" => {
                    for t in v.split(',').filter(|t| !t.is_empty()) {
                        if !is_word(t) {
                            return Err(ResourceLineError::BadToken(t.chars().take(64).collect()));
                        }
                        r.tags.insert(t.to_owned());
                    }
                }
                _ => {
                    r.extra.insert(k.to_owned(), v.to_owned());
                }
            }
            if r.tags.len() + r.extra.len() > MAX_RESOURCE_ITEMS {
                return Err(ResourceLineError::TooMany);
            }
        }
        Ok(r)
    }

    /// The `res:any` value for a node at `addr`.
    pub fn any_value(&self, addr: NodeAddr) -> String {
        format!("{addr} {}", self.to_line())
    }

    /// Splits a `res:any` value into the node's address and resources.
    pub fn parse_any_value(value: &str) -> Result<(NodeAddr, Resources), ResourceLineError> {
        let value = value.trim_start();
        let (addr, line) = value.split_once(char::is_whitespace).unwrap_or((value, ""));
        let addr = addr.parse().map_err(|_| ResourceLineError::BadAddr(addr.chars().take(64).collect()))?;
        Ok((addr, Resources::from_line(line)?))
    }

    /// Every `(name, value)` a node at `addr` registers, in a stable order (see the
    /// module docs for the scheme).
    pub fn registrations(&self, addr: NodeAddr) -> Vec<(String, String)> {
        let a = addr.to_string();
        let mut v = vec![(ANY_NAME.to_owned(), self.any_value(addr))];
        v.extend(self.all_tags().iter().map(|t| (tag_name(t), a.clone())));
        v.extend(self.attrs().into_iter().filter(|(k, _)| !LIVE_ATTRS.contains(&k.as_str())).map(|(k, val)| {
            let val = if k == "os" || k == "arch" { val.to_ascii_lowercase() } else { val };
            (attr_name(&k, &val), a.clone())
        }));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn node() -> Resources {
        Resources {
            os: "linux".into(),
            arch: "x86_64".into(),
            cores: 2,
            mem_mb: 24000,
            slots: 1,
            tags: ["gpu".to_owned()].into(),
            extra: [("site".to_owned(), "lab".to_owned())].into(),
            ..Resources::default()
        }
    }

    fn req(s: &str) -> Requirement {
        s.parse().unwrap()
    }

    #[test]
    fn parses_tags_and_comparisons() {
        assert_eq!(req(" linux "), Requirement::Tag("linux".into()));
        assert_eq!(
            req("mem_mb >= 4096"),
            Requirement::Compare { attr: "mem_mb".into(), op: Op::Ge, value: "4096".into() }
        );
        assert_eq!(req("os!=windows").to_string(), "os!=windows");
        for bad in ["", ">=4", "mem_mb>=", "a b", "x=>3", "mem mb>=3", "a==b"] {
            assert!(bad.parse::<Requirement>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn matching() {
        let n = node();
        for ok in [
            "linux",
            "x86_64",
            "gpu",
            "mem_mb>=4096",
            "cores>=2",
            "cores>1",
            "cores<3",
            "os=linux",
            "os!=win",
            "site=lab",
            "cores=2.0",
        ] {
            assert!(req(ok).matches(&n), "{ok}");
        }
        for no in ["arm", "mem_mb>=32000", "cores>2", "os=windows", "os>=linux", "missing!=x", "slots>=2"] {
            assert!(!req(no).matches(&n), "{no}");
        }
    }

    #[test]
    fn well_known_attributes_match_case_insensitively_and_x86_is_a_family() {
        let n = node();
        // The thesis's own example job file asks for these.
        for ok in ["Linux", "LINUX", "x86", "X86_64", "amd64", "os=Linux", "arch=x86", "arch=X86_64", "os!=windows"] {
            assert!(req(ok).matches(&n), "{ok}");
        }
        for no in ["arm", "i686", "arch=arm", "arch!=x86", "os=windows", "site=LAB"] {
            assert!(!req(no).matches(&n), "{no}");
        }
        let old = Resources { arch: "i686".into(), ..node() };
        assert!(req("x86").matches(&old) && !req("x86_64").matches(&old));
        let pi = Resources { arch: "aarch64".into(), ..node() };
        assert!(req("arm").matches(&pi) && req("arm64").matches(&pi) && !req("x86").matches(&pi));
        // The narrowing names are what nodes register: lower case, families included.
        let regs: BTreeSet<String> =
            n.registrations("10.0.0.1:7000".parse().unwrap()).into_iter().map(|r| r.0).collect();
        for r in ["Linux", "x86", "os=LINUX", "arch=X86", "GPU"] {
            let name = req(r).query_name().unwrap();
            assert!(regs.contains(&name), "{r} queries {name}, which no node registers: {regs:?}");
        }
    }

    #[test]
    fn live_attributes_ride_the_line_but_are_never_narrowing_names() {
        let live = Resources {
            slots: 1,
            slots_total: 4,
            load_milli: Some(1520),
            mem_free_mb: Some(2000),
            generation: 42,
            ..node()
        };
        let line = live.to_line();
        assert!(
            line.contains("slots=1 slots_total=4 load=1.520 mem_free_mb=2000") && line.contains("gen=42"),
            "{line}"
        );
        assert_eq!(Resources::from_line(&line).unwrap(), live);
        assert!(req("load<2").matches(&live) && !req("load<1.5").matches(&live));
        assert!(req("mem_free_mb>=2000").matches(&live) && req("slots_total=4").matches(&live));
        for r in ["load<2", "mem_free_mb>=1", "slots_total=4", "slots>=1"] {
            assert_eq!(req(r).query_name(), None, "{r}");
        }
        let names: Vec<String> =
            live.registrations("10.0.0.1:7000".parse().unwrap()).into_iter().map(|r| r.0).collect();
        assert!(!names.iter().any(|n| ["slots", "load", "mem_free", "gen"].iter().any(|l| n.contains(l))), "{names:?}");
        assert_eq!(parse_milli("0.5"), Some(500));
        assert_eq!(parse_milli("12"), Some(12_000));
        for bad in ["", ".5", "1.2345", "-1", "1e3", "9999999"] {
            assert_eq!(parse_milli(bad), None, "{bad}");
        }
    }

    #[test]
    fn registrations_follow_the_scheme() {
        let addr: NodeAddr = "10.0.0.1:7000".parse().unwrap();
        let regs = node().registrations(addr);
        assert_eq!(
            regs[0],
            (
                "res:any".into(),
                "10.0.0.1:7000 os=linux arch=x86_64 cores=2 mem_mb=24000 slots=1 site=lab tags=gpu".into()
            )
        );
        let names: BTreeSet<_> = regs.iter().map(|(n, _)| n.as_str()).collect();
        for n in ["res:tag:linux", "res:tag:x86_64", "res:tag:gpu", "res:os=linux", "res:cores=2", "res:site=lab"] {
            assert!(names.contains(n), "{n}");
        }
        assert!(!names.iter().any(|n| n.starts_with("res:slots")));
        assert_eq!(Resources::parse_any_value(&regs[0].1).unwrap(), (addr, node()));
        assert_eq!(req("linux").query_name().as_deref(), Some("res:tag:linux"));
        assert_eq!(req("os=linux").query_name().as_deref(), Some("res:tag:linux"));
        assert_eq!(req("site=lab").query_name().as_deref(), Some("res:site=lab"));
        let mixed = Resources { extra: [("site".to_owned(), "Lab".to_owned())].into(), ..node() };
        let regs = mixed.registrations(addr);
        assert!(regs.contains(&(req("site=Lab").query_name().unwrap(), addr.to_string())), "{regs:?}");
        assert_eq!(req("cores>=2").query_name(), None);
        assert!(Resources::parse_any_value("nonsense os=linux").is_err());
        assert!(Resources::from_line("cores=x").is_err());
    }

    fn arb_word() -> impl Strategy<Value = String> {
        "[a-z][a-z0-9_]{0,6}"
    }

    fn arb_resources() -> impl Strategy<Value = Resources> {
        (
            arb_word(),
            arb_word(),
            0u32..64,
            0u64..100_000,
            0u32..8,
            proptest::collection::btree_set(arb_word(), 0..4),
            proptest::collection::btree_map("x[a-z]{1,4}", arb_word(), 0..3),
            (0u32..64, proptest::option::of(0u32..100_000), proptest::option::of(0u64..100_000), 0u64..1 << 40),
        )
            .prop_map(
                |(os, arch, cores, mem_mb, slots, tags, extra, (slots_total, load_milli, mem_free_mb, generation))| {
                    Resources {
                        os,
                        arch,
                        cores,
                        mem_mb,
                        slots,
                        slots_total,
                        load_milli,
                        mem_free_mb,
                        generation,
                        tags,
                        extra,
                    }
                },
            )
    }

    fn arb_op() -> impl Strategy<Value = Op> {
        proptest::sample::select(Op::ALL.to_vec())
    }

    proptest! {
        #[test]
        fn requirement_text_round_trips(attr in "[a-z_]{1,8}", op in arb_op(), value in "[a-z0-9.]{1,8}", tag in arb_word()) {
            let c = Requirement::Compare { attr, op, value };
            prop_assert_eq!(c.to_string().parse::<Requirement>().unwrap(), c);
            let t = Requirement::Tag(tag);
            prop_assert_eq!(t.to_string().parse::<Requirement>().unwrap(), t);
        }

        #[test]
        fn numeric_comparison_laws(cores in 0u32..100, v in 0u32..100) {
            let n = Resources { cores, ..node() };
            let holds = |op: Op| Requirement::Compare { attr: "cores".into(), op, value: v.to_string() }.matches(&n);
            // Trichotomy, and each composite operator is the union/complement of the strict ones.
            prop_assert_eq!([holds(Op::Lt), holds(Op::Eq), holds(Op::Gt)].iter().filter(|b| **b).count(), 1);
            prop_assert_eq!(holds(Op::Ge), holds(Op::Gt) || holds(Op::Eq));
            prop_assert_eq!(holds(Op::Le), holds(Op::Lt) || holds(Op::Eq));
            prop_assert_eq!(holds(Op::Ne), !holds(Op::Eq));
            prop_assert_eq!(holds(Op::Ge), cores >= v);
        }

        #[test]
        fn resource_lines_round_trip_and_advertised_values_match(r in arb_resources()) {
            prop_assert_eq!(Resources::from_line(&r.to_line()).unwrap(), r.clone());
            for t in r.all_tags() {
                prop_assert!(Requirement::Tag(t).matches(&r));
            }
            for (k, v) in r.attrs() {
                let eq = Requirement::Compare { attr: k.clone(), op: Op::Eq, value: v.clone() };
                let ne = Requirement::Compare { attr: k, op: Op::Ne, value: v };
                prop_assert!(eq.matches(&r));
                prop_assert!(!ne.matches(&r));
            }
        }

        #[test]
        fn arbitrary_text_never_panics(s in "\\PC{0,40}") {
            let _ = s.parse::<Requirement>().map(|r| r.matches(&node()));
            let _ = Resources::parse_any_value(&s);
        }
    }
}
