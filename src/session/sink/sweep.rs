//! Part files and journals nobody came back for: a session that failed or
//! was cut off leaves its parts with data (and their journals) for
//! `--resume`; the daemon removes those older than `--part-max-age`, at
//! start and then every few hours, never through a symlink and never one a
//! running session is writing.

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, SystemTime};

use crate::datapath::beneath::{FileId, Root};
use crate::protocol::manifest::is_reserved;

use super::rules::InodeClaims;

/// How often the root is swept, at most (and at least, for short ages).
const SWEEP_EVERY_MAX: Duration = Duration::from_secs(6 * 3600);
const SWEEP_EVERY_MIN: Duration = Duration::from_secs(1);

/// How long to wait between sweeps for parts older than `age`.
pub(crate) fn interval(age: Duration) -> Duration {
    (age / 4).clamp(SWEEP_EVERY_MIN, SWEEP_EVERY_MAX)
}

/// Remove urmove's own files (parts, journals, their temporaries) beneath
/// `root` whose last change is older than `age`, except those `claims`
/// holds. Returns how many were removed.
pub(crate) fn sweep(root: &Root, age: Duration, claims: &InodeClaims) -> usize {
    let now = SystemTime::now();
    let mut removed = 0;
    let mut dirs = vec![String::new()];
    while let Some(dir) = dirs.pop() {
        let shown = if dir.is_empty() { "." } else { dir.as_str() };
        let Ok(names) = root.read_dir(shown) else {
            continue;
        };
        for name in names {
            let rel = if dir.is_empty() {
                name.clone()
            } else {
                format!("{dir}/{name}")
            };
            let Ok(m) = root.symlink_metadata(&rel) else {
                continue;
            };
            if m.is_dir() {
                dirs.push(rel);
            } else if m.is_file() && is_reserved(&name) && stale(&m, now, age) {
                let id = FileId {
                    dev: m.dev(),
                    ino: m.ino(),
                };
                let busy = claims
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .contains(&id)
                    || locked(root, &rel);
                if !busy && root.unlink_file(&rel, id).is_ok() {
                    removed += 1;
                }
            }
        }
    }
    removed
}

fn stale(m: &std::fs::Metadata, now: SystemTime, age: Duration) -> bool {
    m.modified()
        .ok()
        .and_then(|t| now.duration_since(t).ok())
        .is_some_and(|d| d > age)
}

/// A session holds a lock on it (a piece's writer, on any receiver of a
/// shared root, or its commit, which gives the part its source's old
/// mtime just before the rename): not claimed in this daemon, but in use.
fn locked(root: &Root, rel: &str) -> bool {
    root.open_read(rel)
        .is_ok_and(|f| crate::datapath::sys::lock_in_the_way(&f, 0, 0).is_ok_and(|l| l.is_some()))
}
