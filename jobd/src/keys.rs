//! Key files: an Ed25519 secret key on disk, made by `p2pjob keygen` (or on
//! first use), read by `p2pjob` to sign its requests and by `jobd` to know its
//! owner. Signing and checking are pure and live in [`p2pmp_core::auth`].
//!
//! A key file is one line, `ed25519-secret:` and the 32-byte seed as 64
//! lowercase hex digits, then a second line with the public key in its text
//! form (for people; it is checked against the seed). The file is made with
//! mode 0600 in a directory made with mode 0700. The default is
//! `~/.config/p2pmp/key`; `$P2PJOB_KEY` or `--key FILE` name another.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use p2pmp_core::auth::{PublicKey, SecretKey};

/// The prefix of a key file's secret line.
const SECRET_PREFIX: &str = "ed25519-secret:";

/// The environment variable naming the key file.
pub const KEY_ENV: &str = "P2PJOB_KEY";

/// `~/.config/p2pmp/key` (`$XDG_CONFIG_HOME/p2pmp/key` when set).
pub fn default_path() -> PathBuf {
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from("/etc"));
    config.join("p2pmp").join("key")
}

/// The key file to use: `flag` (`--key`), else `$P2PJOB_KEY`, else the default.
pub fn chosen_path(flag: Option<&Path>) -> PathBuf {
    flag.map(Path::to_path_buf)
        .or_else(|| std::env::var_os(KEY_ENV).filter(|v| !v.is_empty()).map(PathBuf::from))
        .unwrap_or_else(default_path)
}

/// Reads a key file.
pub fn load(path: &Path) -> anyhow::Result<SecretKey> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading key file {}", path.display()))?;
    parse(&text).with_context(|| format!("in key file {}", path.display()))
}

/// A key file's text (see the module docs), parsed strictly.
pub fn parse(text: &str) -> anyhow::Result<SecretKey> {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    let Some(hex) = first.strip_prefix(SECRET_PREFIX) else { bail!("the first line starts with `{SECRET_PREFIX}`") };
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        bail!("the secret is 64 lowercase hex digits");
    }
    let mut seed = [0u8; 32];
    for (i, b) in seed.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)?;
    }
    let key = SecretKey::from_seed(seed);
    if let Some(public) = lines.next().filter(|l| !l.is_empty()) {
        let said: PublicKey = public.parse()?;
        if said != key.public() {
            bail!("the public key line does not belong to the secret");
        }
    }
    Ok(key)
}

/// A key file's text for `key`.
fn text(key: &SecretKey) -> String {
    use std::fmt::Write as _;
    let mut t = String::from(SECRET_PREFIX);
    for b in key.seed() {
        let _ = write!(t, "{b:02x}");
    }
    let _ = writeln!(t, "\n{}", key.public());
    t
}

/// Makes a new key at `path` (mode 0600, its directory made with mode 0700);
/// an existing file is kept unless `force`.
pub fn generate(path: &Path, force: bool) -> anyhow::Result<SecretKey> {
    let key = fresh()?;
    make_dir(path)?;
    if force {
        // Written aside and renamed over, so a reader never sees half a key.
        let tmp = aside(path);
        write_new(&tmp, &key)?;
        std::fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))?;
    } else {
        write_new(path, &key).map_err(|e| match e.downcast_ref::<std::io::Error>() {
            Some(io) if io.kind() == std::io::ErrorKind::AlreadyExists => {
                anyhow::anyhow!("{} exists; keep it, or replace it with --force", path.display())
            }
            _ => e,
        })?;
    }
    Ok(key)
}

/// The key at `path`, made first if there is none (`true` when it was made).
/// Several processes doing this at once end with the same key: a new key is
/// written aside and linked into place only if the name is still free.
pub fn load_or_create(path: &Path) -> anyhow::Result<(SecretKey, bool)> {
    match std::fs::metadata(path) {
        Ok(_) => return Ok((load(path)?, false)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading key file {}", path.display())),
    }
    make_dir(path)?;
    let key = fresh()?;
    let tmp = aside(path);
    write_new(&tmp, &key)?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok((key, true)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok((load(path)?, false)),
        Err(e) => Err(e).with_context(|| format!("creating key file {}", path.display())),
    }
}

/// The public key of the user running this process (its default key, made
/// if none exists yet, saying so on stderr).
pub fn own_public_key() -> anyhow::Result<PublicKey> {
    let path = chosen_path(None);
    let (key, made) = load_or_create(&path)?;
    if made {
        eprintln!("p2pmp: created a new key in {} ({})", path.display(), key.public());
    }
    Ok(key.public())
}

fn fresh() -> anyhow::Result<SecretKey> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| anyhow::anyhow!("no randomness from the OS: {e}"))?;
    Ok(SecretKey::from_seed(seed))
}

fn aside(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp-{}", std::process::id()));
    path.with_file_name(name)
}

fn make_dir(path: &Path) -> anyhow::Result<()> {
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating {}", dir.display())),
        None => Ok(()),
    }
}

fn write_new(path: &Path, key: &SecretKey) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(text(key).as_bytes())?;
    f.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_round_trips_and_is_private() {
        let dir = std::env::temp_dir().join(format!("p2pmp-keys-{}", std::process::id()));
        let path = dir.join("sub").join("key");
        let k = generate(&path, false).unwrap();
        assert_eq!(load(&path).unwrap().public(), k.public());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(generate(&path, false).unwrap_err().to_string().contains("--force"));
        let k2 = generate(&path, true).unwrap();
        assert_ne!(k2.public(), k.public());
        assert_eq!(load_or_create(&path).unwrap().0.public(), k2.public());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_tampered_key_file_is_refused() {
        let k = SecretKey::from_seed([3; 32]);
        let other = SecretKey::from_seed([4; 32]).public();
        let t = text(&k);
        assert!(parse(&t).is_ok());
        let first = t.lines().next().unwrap();
        assert!(parse(&format!("{first}\n{other}\n")).is_err());
        assert!(parse(&t.replace("ed25519-secret:", "ed25519:")).is_err());
        assert!(parse(&t[..40]).is_err());
    }
}
