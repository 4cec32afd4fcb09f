//! Key files: `urmove keygen FILE` writes one, `--key-file` reads one.
//! A key file holds 64 hex digits and is readable by its owner only.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::{bail, Context};

use crate::datapath::sys;
use crate::protocol::handshake::{format_key, parse_key, Key, KEY_LEN};

/// Write a new random key to `path` (mode 0600); never overwrite one.
pub fn keygen(path: &Path) -> anyhow::Result<()> {
    let mut key: Key = [0; KEY_LEN];
    sys::random_bytes(&mut key).context("reading random bytes")?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => anyhow::anyhow!(
                "key file {} exists: urmove never overwrites a key (remove it first to make a new one)",
                path.display()
            ),
            _ => anyhow::Error::new(e).context(format!("creating key file {}", path.display())),
        })?;
    f.write_all(format_key(&key).as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing key file {}", path.display()))?;
    println!(
        "urmove keygen: wrote a new 256-bit key to {} (mode 0600); copy it to the other host, kept 0600, and give both sides --key-file",
        path.display()
    );
    Ok(())
}

/// Read the key in `path`, refusing a file others can read.
pub fn load(path: &Path) -> anyhow::Result<Key> {
    let meta = std::fs::metadata(path).with_context(|| format!("key file {}", path.display()))?;
    let mode = meta.permissions().mode();
    if mode & 0o077 != 0 {
        bail!(
            "key file {} is readable by others (mode {:o}); run chmod 600 {}",
            path.display(),
            mode & 0o777,
            path.display()
        );
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("key file {}", path.display()))?;
    parse_key(&text).map_err(|e| anyhow::anyhow!("key file {}: {e}", path.display()))
}
