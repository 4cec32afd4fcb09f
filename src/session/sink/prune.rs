//! `send --delete` and `pull --delete`: once a transfer is committed, the
//! receiving side removes what it holds under the manifest's directories
//! that the manifest does not list, as `rsync --delete` does: only inside
//! directories the transfer carried (the destination itself only when a
//! directory's contents were sent, `DIR/`; never beside them),
//! through no symlink (a link is removed as itself, never followed), and
//! never urmove's own part files and journals, which belong to sessions
//! still running or to resume.

use std::collections::HashSet;

use crate::datapath::beneath::Root;
use crate::protocol::manifest::{is_reserved, EntryKind};
use crate::protocol::names;

use super::incoming::{join, Incoming};
use crate::session::plan::filter::Filter;

/// What a delete pass did: paths removed (under the destination), and
/// those it could not remove, with why.
#[derive(Debug, Default)]
pub(crate) struct Pruned {
    pub(crate) deleted: Vec<String>,
    pub(crate) failed: Vec<String>,
}

impl Pruned {
    /// The error of a delete pass that could not remove everything, naming
    /// the first few (`whose`: whose extra entries they were).
    pub(crate) fn failure(&self, whose: &str) -> Result<(), crate::session::SessionError> {
        if self.failed.is_empty() {
            return Ok(());
        }
        let shown: Vec<&str> = self.failed.iter().take(5).map(String::as_str).collect();
        Err(crate::session::SessionError::local(
            crate::protocol::control::ErrorCode::Io,
            format!(
                "--delete could not remove {} of {whose} extra entries: {}",
                self.failed.len(),
                shown.join("; ")
            ),
        ))
    }
}

/// Remove the extras under each directory of a committed push (beneath
/// its destination) and, with `whole_dest` (the manifest is a directory's
/// contents, `DIR/`), under the destination itself; with `dry`
/// (`--dry-run`), only list what would go.
pub(crate) fn prune(incoming: &Incoming, dry: bool, whole_dest: bool) -> Pruned {
    let (root, dest) = (&incoming.root, incoming.dest.as_str());
    let entries = &incoming.entries;
    let listed: HashSet<String> = entries.iter().map(|e| join(dest, &e.path)).collect();
    let sweep = Sweep {
        root,
        under_dest: match dest {
            "" => String::new(),
            d => format!("{d}/"),
        },
        keep: &incoming.rules.keep,
        dry,
    };
    let mut out = Pruned::default();
    let dirs = entries
        .iter()
        .filter(|e| e.kind == EntryKind::Dir)
        .map(|e| join(dest, &e.path));
    for dir in whole_dest.then(|| dest.to_string()).into_iter().chain(dirs) {
        sweep.extras_in(&dir, &listed, &mut out);
    }
    out
}

/// One delete pass: where, what its rules keep, and whether it only looks.
struct Sweep<'a> {
    root: &'a Root,
    /// The destination's prefix in paths under the root (`dest/`).
    under_dest: String,
    keep: &'a Filter,
    dry: bool,
}

impl Sweep<'_> {
    /// Remove what directory `dir` (empty: the root) holds that `listed`
    /// does not name. A directory that is not one here now (a link put in
    /// its place) is not looked into.
    fn extras_in(&self, dir: &str, listed: &HashSet<String>, out: &mut Pruned) {
        let at = if dir.is_empty() { "." } else { dir };
        if !self.root.symlink_metadata(at).is_ok_and(|m| m.is_dir()) {
            return;
        }
        let Ok(names) = self.root.read_dir(at) else {
            return;
        };
        for name in names.iter().filter(|n| !is_reserved(n)) {
            let rel = join(dir, name);
            if !listed.contains(&rel) {
                self.remove_tree(&rel, out);
            }
        }
    }

    /// Remove `rel` and, for a directory, all beneath it, but what the
    /// rules exclude and urmove's own files (a directory holding one
    /// stays); `dry`: list them only. Whether `rel` is gone.
    fn remove_tree(&self, rel: &str, out: &mut Pruned) -> bool {
        let manifest_path = rel.strip_prefix(&self.under_dest).unwrap_or(rel);
        let shown = names::shown(manifest_path).into_owned();
        let m = match self.root.symlink_metadata(rel) {
            Ok(m) => m,
            Err(e) => {
                out.failed.push(format!("{shown}: {e}"));
                return false;
            }
        };
        if !self.keep.admits(manifest_path, m.is_dir()) {
            return false;
        }
        let removed = match (m.is_dir(), self.dry) {
            (true, _) => self.empty_dir(rel, out),
            (false, true) => Ok(true),
            (false, false) => self.root.unlink(rel).map(|()| true),
        };
        match removed {
            Ok(true) => out.deleted.push(shown),
            Ok(false) => return false,
            Err(e) => {
                out.failed.push(format!("{shown}: {e}"));
                return false;
            }
        }
        true
    }

    /// Empty directory `rel` and remove it; Ok(false) when something kept
    /// stays in it.
    fn empty_dir(&self, rel: &str, out: &mut Pruned) -> std::io::Result<bool> {
        let children = self.root.read_dir(rel)?;
        let mut emptied = children.iter().all(|c| !is_reserved(c));
        for c in children.iter().filter(|n| !is_reserved(n)) {
            emptied &= self.remove_tree(&format!("{rel}/{c}"), out);
        }
        match (emptied, self.dry) {
            (false, _) => Ok(false),
            (true, true) => Ok(true),
            (true, false) => self.root.remove_dir(rel).map(|()| true),
        }
    }
}
