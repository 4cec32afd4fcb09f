//! `send --delete`: once a push is committed, the receiver removes what
//! it holds under the manifest's directories that the manifest does not
//! list, as `rsync --delete` does: only inside directories the transfer
//! carried (never beside them, never the destination's other contents),
//! through no symlink (a link is removed as itself, never followed), and
//! never urmove's own part files and journals, which belong to sessions
//! still running or to resume.

use std::collections::HashSet;

use crate::datapath::beneath::Root;
use crate::protocol::manifest::{is_reserved, Entry, EntryKind};
use crate::protocol::names;

use super::receive::join;

/// What a delete pass did: paths removed (under the destination), and
/// those it could not remove, with why.
#[derive(Debug, Default)]
pub(crate) struct Pruned {
    pub(crate) deleted: Vec<String>,
    pub(crate) failed: Vec<String>,
}

/// Remove the extras under each directory of `entries` (beneath `dest`);
/// with `dry` (`--dry-run`), only list what would go.
pub(crate) fn prune(root: &Root, dest: &str, entries: &[Entry], dry: bool) -> Pruned {
    let listed: HashSet<String> = entries.iter().map(|e| join(dest, &e.path)).collect();
    let mut out = Pruned::default();
    for e in entries.iter().filter(|e| e.kind == EntryKind::Dir) {
        let dir = join(dest, &e.path);
        // A directory that is not one here now (a link put in its place)
        // is not looked into.
        if !root.symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        let Ok(names) = root.read_dir(&dir) else {
            continue;
        };
        for name in names.iter().filter(|n| !is_reserved(n)) {
            let rel = format!("{dir}/{name}");
            if !listed.contains(&rel) {
                remove_tree(root, &rel, (dest, dry), &mut out);
            }
        }
    }
    out
}

/// Remove `rel` and, for a directory, all beneath it (urmove's own files
/// aside: a directory holding one stays); `dry`: list them only.
fn remove_tree(root: &Root, rel: &str, (dest, dry): (&str, bool), out: &mut Pruned) {
    let shown = names::shown(rel.strip_prefix(&format!("{dest}/")).unwrap_or(rel)).into_owned();
    let m = match root.symlink_metadata(rel) {
        Ok(m) => m,
        Err(e) => return out.failed.push(format!("{shown}: {e}")),
    };
    let removed = if m.is_dir() {
        match root.read_dir(rel) {
            Ok(children) => {
                for c in children.iter().filter(|n| !is_reserved(n)) {
                    remove_tree(root, &format!("{rel}/{c}"), (dest, dry), out);
                }
                match dry {
                    true => Ok(()),
                    false => root.remove_dir(rel),
                }
            }
            Err(e) => Err(e),
        }
    } else if dry {
        Ok(())
    } else {
        root.unlink(rel)
    };
    match removed {
        Ok(()) => out.deleted.push(shown),
        Err(e) => out.failed.push(format!("{shown}: {e}")),
    }
}
