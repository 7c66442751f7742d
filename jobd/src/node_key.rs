//! The daemon's static key for its encrypted links (Noise, see
//! `p2pmp_core::secure`): kept in the work directory as `node-PORT.key` (the
//! private key in hex, mode 0600), created on first start and reused after, so
//! a restarted daemon keeps the key its peers pinned for its address.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::{Context, bail};
use p2pmp_core::secure::{StaticKey, key_from_hex, key_to_hex};
use tracing::info;

/// The key in `path`, made (and saved there, readable by its owner only) if
/// the file does not exist. A file that others may read is refused.
pub fn load_or_create(path: &Path) -> anyhow::Result<StaticKey> {
    match fs::read_to_string(path) {
        Ok(text) => {
            let mode = fs::metadata(path)?.permissions().mode();
            if mode & 0o077 != 0 {
                bail!("{}: the node key is readable by others (mode {:o}); chmod 600 it", path.display(), mode & 0o777);
            }
            let private =
                key_from_hex(&text).with_context(|| format!("{}: not a node key (64 hex digits)", path.display()))?;
            Ok(StaticKey::from_private(private))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = p2pmp_adapters::random_key();
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .with_context(|| format!("creating {}", path.display()))?;
            writeln!(f, "{}", key_to_hex(key.private_bytes()))?;
            info!(path = %path.display(), public = %key.public(), "made a node key");
            Ok(key)
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_made_once_private_to_its_owner_and_then_reused() {
        let dir = std::env::temp_dir().join(format!("p2pmp-node-key-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("node-1.key");
        let _ = fs::remove_file(&path);
        let made = load_or_create(&path).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(load_or_create(&path).unwrap(), made);
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(load_or_create(&path).is_err(), "a key others can read is refused");
        fs::write(&path, "not a key").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(load_or_create(&path).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
