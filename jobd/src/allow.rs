//! Whose jobs this daemon runs, and who may act on the jobs it holds: the
//! policy from `--allow`, `allow = [...]`, `--allow-file`, `--allow-any` and
//! `--admin`, and the thread that re-reads the allow-file when it changes.
//!
//! With no allow-list, a daemon bound to loopback allows only the key of the
//! user who started it (made if none exists); one bound to any other address
//! refuses to start (`Config::check`) unless an allow-list or `--allow-any` is
//! given. The daemon user's own key is always an admin (its status page
//! watches jobs with it).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use p2pmp_adapters::Remote;
use p2pmp_core::auth::{Allow, Policy, PublicKey};
use p2pmp_core::node::{DaemonNode, NodeCommand};
use tracing::{info, warn};

use crate::config::Config;

/// How often the allow-file's modification time is looked at.
pub const ALLOW_FILE_POLL: Duration = Duration::from_secs(2);

/// Most keys an allow-file may list.
const MAX_ALLOW_KEYS: usize = 100_000;

/// Keys in their text form, each checked strictly; `what` names them in errors.
pub fn parse_keys<'a>(keys: impl IntoIterator<Item = &'a String>, what: &str) -> anyhow::Result<Vec<PublicKey>> {
    keys.into_iter().map(|k| k.parse().with_context(|| format!("{what} {k:?}"))).collect()
}

/// An allow-file's text: one key a line; blank lines and `#` comments (whole
/// lines or after a key) are skipped. Errors name the line.
pub fn parse_allow_file(text: &str) -> anyhow::Result<Vec<PublicKey>> {
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let key = line.split('#').next().unwrap_or_default().trim();
        if key.is_empty() {
            continue;
        }
        if keys.len() == MAX_ALLOW_KEYS {
            bail!("more than {MAX_ALLOW_KEYS} keys");
        }
        keys.push(key.parse::<PublicKey>().with_context(|| format!("line {}", i + 1))?);
    }
    Ok(keys)
}

pub(crate) fn read_allow_file(path: &Path) -> anyhow::Result<Vec<PublicKey>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading allow-file {}", path.display()))?;
    parse_allow_file(&text).with_context(|| format!("in allow-file {}", path.display()))
}

/// The policy `cfg` asks for (see the module docs).
pub fn policy(cfg: &Config) -> anyhow::Result<Policy> {
    let own = crate::keys::own_public_key().context("the daemon user's key")?;
    let mut admins: BTreeSet<PublicKey> = parse_keys(&cfg.admin, "admin key")?.into_iter().collect();
    admins.insert(own);
    let mut keys: BTreeSet<PublicKey> = parse_keys(&cfg.allow, "allowed key")?.into_iter().collect();
    if let Some(f) = &cfg.allow_file {
        keys.extend(read_allow_file(f)?);
    }
    let listed = !cfg.allow.is_empty() || cfg.allow_file.is_some();
    let allow = if cfg.allow_any {
        warn!(
            "--allow-any: this node runs jobs for ANY key that can reach {}: any program, as this daemon's user",
            cfg.listen
        );
        eprintln!("jobd: WARNING: --allow-any: any key that reaches {} may run any program here", cfg.listen);
        Allow::AnyKey
    } else if listed {
        Allow::Keys(keys)
    } else {
        // `Config::check` refuses a node off loopback with no allow-list.
        info!(key = %own, "no allow-list: this loopback node runs jobs of its own user's key only");
        Allow::Keys([own].into())
    };
    Ok(Policy { allow, admins })
}

/// Re-reads `path` whenever its modification time changes and posts the new
/// allow-list (plus `fixed`, the keys given otherwise) to the node. A file
/// that no longer parses keeps the last list (and says so). Ends when the
/// node does.
pub fn watch(path: PathBuf, fixed: Vec<PublicKey>, remote: Remote<DaemonNode>) -> std::io::Result<()> {
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let mut last: Option<SystemTime> = mtime(&path);
    std::thread::Builder::new().name("jobd-allow-file".into()).spawn(move || {
        loop {
            std::thread::sleep(ALLOW_FILE_POLL);
            let now = mtime(&path);
            if now == last {
                continue;
            }
            last = now;
            match read_allow_file(&path) {
                Ok(keys) => {
                    info!(file = %path.display(), keys = keys.len(), "allow-file changed: new allow-list");
                    let allow = Allow::Keys(keys.into_iter().chain(fixed.iter().copied()).collect());
                    if remote.post(NodeCommand::SetAllow { allow }).is_err() {
                        return;
                    }
                }
                Err(e) => warn!("allow-file changed but is not taken (the last list stays): {e:#}"),
            }
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use p2pmp_core::auth::SecretKey;

    #[test]
    fn an_allow_file_has_one_key_a_line_and_comments() {
        let (a, b) = (SecretKey::from_seed([1; 32]).public(), SecretKey::from_seed([2; 32]).public());
        let text = format!("# team\n{a}\n\n  {b}   # bob\n");
        assert_eq!(parse_allow_file(&text).unwrap(), vec![a, b]);
        let err = parse_allow_file(&format!("{a}\ned25519:zz\n")).unwrap_err();
        assert!(format!("{err:#}").contains("line 2"), "{err:#}");
    }
}
