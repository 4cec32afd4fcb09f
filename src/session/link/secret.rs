//! The secret a receiver keeps to itself: 32 random bytes in
//! `STATE_DIR/secret` (mode 0600, created at first start, never sent). It
//! authenticates what the receiver leaves on disk for later sessions (the
//! journals of part files and the stamps of finished files), so a journal
//! or stamp that a key holder or a local user of the root planted, copied
//! or edited is never trusted.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::protocol::handshake::{hmac, verify};

/// Bytes of the secret.
const SECRET_LEN: usize = 32;

/// The receiver's own secret.
#[derive(Clone)]
pub struct Secret {
    bytes: [u8; SECRET_LEN],
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Why the secret could not be had, with the path, the user this
/// process runs as and what to change.
fn refuse(path: &Path, why: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("{}: {why}; {}", path.display(), remedy(path)))
}

/// Make the state directory `dir` (mode 0700) if it is missing; an error
/// names it, this process's user and what to change.
pub fn make_state_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| refuse(dir, e))
}

/// The user this process runs as, by name where it has one.
fn running_as() -> (u32, String) {
    let uid = crate::datapath::sys::effective_uid();
    let name = crate::datapath::ids::user_name(uid).unwrap_or_else(|| format!("uid {uid}"));
    (uid, name)
}

/// What an admin does when `path` (the secret or its directory) is not
/// usable by this process's user.
fn remedy(path: &Path) -> String {
    let (uid, user) = running_as();
    let dir = match path.file_name().is_some_and(|n| n == "secret") {
        true => path.parent().unwrap_or(path),
        false => path,
    };
    format!(
        "urmove runs as {user} (uid {uid}) here: give {dir} and its secret to that user (chown -R {user} {dir}; the secret stays mode 0600), or point --state-dir (state_dir in the config, STATE_DIRECTORY under systemd) at a directory of its own",
        dir = dir.display()
    )
}

impl Secret {
    /// A secret that lives in memory only (tests, and sides that keep no
    /// resume state across runs).
    pub fn ephemeral() -> std::io::Result<Secret> {
        let mut bytes = [0u8; SECRET_LEN];
        crate::datapath::sys::random_bytes(&mut bytes)?;
        Ok(Secret { bytes })
    }

    /// A secret of known bytes, for tests and fuzzing (a receiver's own
    /// comes from [`load_or_create`](Self::load_or_create)).
    pub fn from_bytes(bytes: [u8; SECRET_LEN]) -> Secret {
        Secret { bytes }
    }

    /// Read `dir/secret`, or create it (and `dir`, mode 0700) with fresh
    /// random bytes. A secret file that others may read, that is not ours,
    /// or that is not a regular file of the right size is refused.
    pub fn load_or_create(dir: &Path) -> std::io::Result<Secret> {
        make_state_dir(dir)?;
        let path = dir.join("secret");
        for _ in 0..3 {
            match Self::read(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                other => return other,
            }
            match Self::create(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                other => return other,
            }
        }
        Err(refuse(&path, "appeared and vanished while being created"))
    }

    fn read(path: &Path) -> std::io::Result<Secret> {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => e,
                _ => refuse(path, e),
            })?;
        let m = f.metadata().map_err(|e| refuse(path, e))?;
        let euid = crate::datapath::sys::effective_uid();
        if !m.is_file() || m.len() != SECRET_LEN as u64 {
            return Err(refuse(path, "not a urmove secret (a 32-byte regular file)"));
        }
        if m.uid() != euid || m.mode() & 0o077 != 0 {
            return Err(refuse(
                path,
                format!(
                    "must belong to the user urmove runs as with mode 0600 (it has uid {}, mode {:o})",
                    m.uid(),
                    m.mode() & 0o7777
                ),
            ));
        }
        let mut bytes = [0u8; SECRET_LEN];
        f.read_exact(&mut bytes).map_err(|e| refuse(path, e))?;
        Ok(Secret { bytes })
    }

    /// Write a fresh secret to a temporary name and link it to `path`, so
    /// nobody ever reads it half written; `AlreadyExists` when another
    /// process made one first (that one is read instead).
    fn create(path: &Path) -> std::io::Result<Secret> {
        let s = Self::ephemeral()?;
        let mut tag = [0u8; 8];
        crate::datapath::sys::random_bytes(&mut tag)?;
        let tmp = path.with_extension(format!("tmp.{:016x}", u64::from_le_bytes(tag)));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(|e| refuse(&tmp, e))?;
        let linked = f
            .write_all(&s.bytes)
            .and_then(|()| f.sync_all())
            .and_then(|()| std::fs::hard_link(&tmp, path));
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(e),
            Err(e) => return Err(refuse(path, e)),
            Ok(()) => {}
        }
        if let Some(dir) = path.parent() {
            let _ = File::open(dir).and_then(|d| d.sync_all());
        }
        Ok(s)
    }

    /// The MAC of `parts` under this secret.
    pub fn mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        hmac(&self.bytes, parts)
    }

    /// Whether `tag` is the MAC of `parts` (constant time).
    pub fn verify(&self, parts: &[&[u8]], tag: &[u8; 32]) -> bool {
        verify(&self.bytes, parts, tag)
    }

    /// Whether `tag` is the start (16 bytes or more) of the MAC of
    /// `parts` (constant time).
    pub fn verify_truncated(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        crate::protocol::handshake::verify_truncated(&self.bytes, parts, tag)
    }
}

/// The token a client sends with its pushes to `host`:`port`, to have the
/// files committed for it (see
/// [`Rules::owner`](crate::session::sink::rules::Rules::owner)): a MAC of its secret in
/// `dir` (made there at first use) and of the receiver's address, so a
/// receiver learns only the token meant for itself.
pub fn owner_token(dir: &Path, host: &str, port: u16) -> std::io::Result<[u8; 32]> {
    let port = port.to_le_bytes();
    let parts: [&[u8]; 4] = [b"urmove owner token", host.as_bytes(), b"\0", &port];
    Ok(Secret::load_or_create(dir)?.mac(&parts))
}

/// Where a process keeps its state when not told: `$STATE_DIRECTORY`
/// (systemd's `StateDirectory=`), `/var/lib/urmove` for root, else
/// `$XDG_STATE_HOME/urmove` or `~/.local/state/urmove`.
pub fn default_state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("STATE_DIRECTORY").filter(|d| !d.is_empty()) {
        // systemd may list several, separated by ':'; the first is ours.
        let d = d
            .to_string_lossy()
            .split(':')
            .next()
            .unwrap_or("")
            .to_string();
        return PathBuf::from(d);
    }
    if crate::datapath::sys::effective_uid() == 0 {
        return PathBuf::from("/var/lib/urmove");
    }
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("urmove");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(h) => PathBuf::from(h).join(".local/state/urmove"),
        None => PathBuf::from("/var/lib/urmove"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_made_once_kept_private_and_refused_when_exposed() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let a = Secret::load_or_create(&state).unwrap();
        let b = Secret::load_or_create(&state).unwrap();
        assert_eq!(a.mac(&[b"x"]), b.mac(&[b"x"]), "the same secret on restart");
        let path = state.join("secret");
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!(m.mode() & 0o777, 0o600);
        assert!(a.verify(&[b"x"], &a.mac(&[b"x"])));
        assert!(!a.verify(&[b"y"], &a.mac(&[b"x"])));
        let other = Secret::ephemeral().unwrap();
        assert!(!other.verify(&[b"x"], &a.mac(&[b"x"])));
        // Readable by others: refused, with what to change.
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        let e = Secret::load_or_create(&state).unwrap_err().to_string();
        assert!(e.contains("mode 0600"), "{e}");
        // A symlink in its place: refused, not followed.
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &path).unwrap();
        assert!(Secret::load_or_create(&state).is_err());
    }

    #[test]
    fn processes_making_the_secret_at_once_all_get_the_same_one() {
        for _ in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let state = dir.path().join("state");
            let macs: Vec<[u8; 32]> = std::thread::scope(|s| {
                let runs: Vec<_> = (0..8)
                    .map(|_| s.spawn(|| Secret::load_or_create(&state).map(|k| k.mac(&[b"x"]))))
                    .collect();
                runs.into_iter()
                    .map(|r| r.join().unwrap().expect("never half written"))
                    .collect()
            });
            assert!(macs.windows(2).all(|w| w[0] == w[1]));
            let names = std::fs::read_dir(&state).unwrap().count();
            assert_eq!(names, 1, "a temporary was left");
        }
    }
}
