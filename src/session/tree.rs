//! The sender's view of its sources: files, directory trees and symlinks
//! turned into a manifest, as `cp -r SRC DEST/` would copy them (a
//! directory is copied as itself, under its own name). One entry that
//! cannot be moved (a FIFO, a socket, a device node, a reserved name, a
//! directory that cannot be listed, something that vanished while walked)
//! is left out and named with its reason; the rest goes on. Names are
//! carried as bytes, UTF-8 or not ([`names`]).

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::datapath::beneath::FileId;
use crate::protocol::control::UNLISTED;
use crate::protocol::manifest::{check_path, is_reserved, Entry, EntryKind};
use crate::protocol::names;

use super::filter::Filter;

use super::SessionError;

/// An entry that was not moved, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
}

/// The manifest and, for each regular file, where to read it.
#[derive(Debug, Default)]
pub struct Tree {
    pub entries: Vec<Entry>,
    /// Source path of each entry (files are read from here).
    pub sources: Vec<PathBuf>,
    /// What each regular file was when scanned: opening it later must find
    /// the same file.
    pub ids: Vec<Option<FileId>>,
    /// What the scan left out.
    pub skipped: Vec<Skipped>,
    /// Entries `--exclude` left out (a directory counts once, with nothing
    /// beneath it walked).
    pub excluded: u64,
}

impl Tree {
    pub fn file_bytes(&self) -> u64 {
        self.entries
            .iter()
            .filter(|e| e.kind == EntryKind::File)
            .map(|e| e.size)
            .sum()
    }

    pub fn file_count(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| e.kind == EntryKind::File)
            .count()
    }

    /// The files still to send, for placement: (entry, st_dev of its
    /// source, its size), neither empty nor complete on the receiver
    /// (`held`).
    pub(crate) fn to_send<'a>(
        &'a self,
        held: &'a super::held::Held,
    ) -> impl Iterator<Item = (usize, u64, u64)> + 'a {
        self.ids.iter().enumerate().filter_map(move |(i, id)| {
            let size = self.entries[i].size;
            let done = size == 0 || held.complete.contains_key(&(i as u32));
            id.filter(|_| !done).map(|id| (i, id.dev, size))
        })
    }

    /// What the scan left out, as the session reports skipped entries.
    pub(crate) fn skipped_refs(&self) -> Vec<super::roles::Refused> {
        self.skipped
            .iter()
            .map(|s| (UNLISTED, s.path.clone(), s.reason.clone()))
            .collect()
    }

    fn push(&mut self, e: Entry, source: PathBuf, m: &std::fs::Metadata) {
        let id = (e.kind == EntryKind::File).then(|| FileId {
            dev: m.dev(),
            ino: m.ino(),
        });
        self.entries.push(e);
        self.sources.push(source);
        self.ids.push(id);
    }

    fn skip(&mut self, path: &str, reason: impl Into<String>) {
        self.skipped.push(Skipped {
            path: names::shown(path).into_owned(),
            reason: reason.into(),
        });
    }
}

/// The kind of entry `ft` makes, or why it is not moved.
fn kind_of(ft: &std::fs::FileType) -> Result<EntryKind, &'static str> {
    if ft.is_symlink() {
        Ok(EntryKind::Symlink)
    } else if ft.is_dir() {
        Ok(EntryKind::Dir)
    } else if ft.is_file() {
        Ok(EntryKind::File)
    } else if ft.is_fifo() {
        Err("a FIFO (named pipe): not moved")
    } else if ft.is_socket() {
        Err("a socket: not moved")
    } else if ft.is_block_device() || ft.is_char_device() {
        Err("a device node: not moved")
    } else {
        Err("not a file, directory or symlink: not moved")
    }
}

/// The manifest entry for `path`, from its (not followed) metadata; a
/// symlink's target comes from `read_link`. Err: why it is not moved.
fn entry_from(
    path: &str,
    m: &std::fs::Metadata,
    read_link: impl FnOnce() -> std::io::Result<String>,
) -> Result<Entry, String> {
    let kind = kind_of(&m.file_type())?;
    let link = match kind {
        EntryKind::Symlink => Some(read_link().map_err(|e| format!("cannot read the link: {e}"))?),
        _ => None,
    };
    check_path(path).map_err(|e| e.to_string())?;
    Ok(Entry {
        path: path.to_string(),
        kind,
        size: if kind == EntryKind::File { m.len() } else { 0 },
        data: if kind == EntryKind::File {
            m.len().min(m.blocks().saturating_mul(512))
        } else {
            0
        },
        mode: m.permissions().mode() & 0o7777,
        mtime_s: m.mtime(),
        mtime_ns: m.mtime_nsec() as u32,
        link,
    })
}

fn walk(tree: &mut Tree, f: &Filter, rel: &str, source: &Path) -> Result<(), SessionError> {
    let m = match std::fs::symlink_metadata(source) {
        Ok(m) => m,
        Err(e) => {
            tree.skip(rel, format!("vanished or unreadable while scanned: {e}"));
            return Ok(());
        }
    };
    if !f.admits(rel, m.is_dir()) {
        tree.excluded += 1;
        return Ok(());
    }
    let e = entry_from(rel, &m, || {
        std::fs::read_link(source).map(|t| names::from_os(t.as_os_str()))
    });
    let e = match e {
        Ok(e) => e,
        Err(why) => {
            tree.skip(rel, why);
            return Ok(());
        }
    };
    let is_dir = e.kind == EntryKind::Dir;
    tree.push(e, source.to_path_buf(), &m);
    if is_dir {
        walk_children(tree, f, rel, source)?;
    }
    Ok(())
}

fn walk_children(
    tree: &mut Tree,
    f: &Filter,
    rel: &str,
    source: &Path,
) -> Result<(), SessionError> {
    let listed = std::fs::read_dir(source).and_then(|d| d.collect::<Result<Vec<_>, _>>());
    let mut children = match listed {
        Ok(c) => c,
        Err(e) => {
            tree.skip(rel, format!("its contents cannot be listed: {e}"));
            return Ok(());
        }
    };
    children.sort_by_key(|c| c.file_name());
    for c in children {
        let name = names::from_os(&c.file_name());
        walk(tree, f, &format!("{rel}/{name}"), &c.path())?;
    }
    Ok(())
}

/// Build the manifest of `sources` (files, directories, symlinks; a
/// directory is copied as itself, recursively), without what `filter`
/// excludes.
pub fn scan(sources: &[PathBuf], filter: &Filter) -> Result<Tree, SessionError> {
    let mut tree = Tree::default();
    for s in sources {
        let trimmed = s.components().as_path();
        let name = trimmed.file_name().map(names::from_os).ok_or_else(|| {
            SessionError::local(
                crate::protocol::control::ErrorCode::BadRequest,
                format!(
                    "{}: cannot name this source (give a file or directory)",
                    s.display()
                ),
            )
        })?;
        if tree.entries.iter().any(|e| e.path == name) {
            return Err(SessionError::local(
                crate::protocol::control::ErrorCode::BadRequest,
                format!(
                    "two sources are named {}: they would land on the same path",
                    names::shown(&name)
                ),
            ));
        }
        std::fs::symlink_metadata(s).map_err(|e| SessionError::io(s.display().to_string(), e))?;
        walk(&mut tree, filter, &name, s)?;
    }
    Ok(tree)
}

/// The daemon's side of a pull: the manifest of `paths` under `root`, each
/// copied as itself (its last component names it), walked and stat'ed
/// beneath the root only. `sources` hold root-relative paths. urmove's own
/// files (parts, journals) are never listed.
pub fn scan_beneath(
    root: &crate::datapath::beneath::Root,
    paths: &[&str],
) -> Result<Tree, SessionError> {
    use crate::protocol::control::ErrorCode;
    let mut tree = Tree::default();
    for p in paths {
        check_path(p)
            .map_err(|e| SessionError::local(ErrorCode::PathRefused, format!("{p}: {e}")))?;
        let name = p.rsplit('/').next().unwrap_or(p);
        if tree.entries.iter().any(|e| e.path == name) {
            return Err(SessionError::local(
                ErrorCode::BadRequest,
                format!("two paths are named {name}: they would land on the same path"),
            ));
        }
        root.symlink_metadata(p)
            .map_err(|e| SessionError::io(p.to_string(), e))?;
        walk_beneath(root, &mut tree, name, p);
    }
    Ok(tree)
}

fn walk_beneath(root: &crate::datapath::beneath::Root, tree: &mut Tree, rel: &str, source: &str) {
    let m = match root.symlink_metadata(source) {
        Ok(m) => m,
        Err(e) => return tree.skip(rel, format!("vanished or unreadable while scanned: {e}")),
    };
    let e = match entry_from(rel, &m, || root.read_link(source)) {
        Ok(e) => e,
        Err(why) => return tree.skip(rel, why),
    };
    let kind = e.kind;
    tree.push(e, PathBuf::from(source), &m);
    if kind != EntryKind::Dir {
        return;
    }
    let names = match root.read_dir(source) {
        Ok(n) => n,
        Err(e) => return tree.skip(rel, format!("its contents cannot be listed: {e}")),
    };
    for name in names.iter().filter(|n| !is_reserved(n)) {
        walk_beneath(
            root,
            tree,
            &format!("{rel}/{name}"),
            &format!("{source}/{name}"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_files_and_reserved_names_are_skipped_with_a_reason_and_the_rest_scanned() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let top = dir.path().join("top");
        std::fs::create_dir(&top).unwrap();
        std::fs::write(top.join("a"), b"a").unwrap();
        std::fs::write(top.join("x.urmove.part"), b"p").unwrap();
        let _sock = std::os::unix::net::UnixListener::bind(top.join("sock")).unwrap();
        let bad = std::ffi::OsStr::from_bytes_lossless(b"bad\xff");
        std::fs::write(top.join(bad), b"b").unwrap();
        let tree = scan(&[top], &Filter::default()).unwrap();
        let paths: Vec<&str> = tree.entries.iter().map(|e| e.path.as_str()).collect();
        let bad_name = format!("top/{}", names::from_bytes(b"bad\xff"));
        assert_eq!(paths, ["top", "top/a", &bad_name]);
        let why: Vec<(&str, &str)> = tree
            .skipped
            .iter()
            .map(|s| (s.path.as_str(), s.reason.as_str()))
            .collect();
        assert_eq!(why.len(), 2, "{why:?}");
        assert!(why
            .iter()
            .any(|(p, r)| *p == "top/sock" && r.contains("socket")));
        assert!(why
            .iter()
            .any(|(p, r)| *p == "top/x.urmove.part" && r.contains("reserved")));
    }

    trait Lossless {
        fn from_bytes_lossless(b: &[u8]) -> &std::ffi::OsStr;
    }

    impl Lossless for std::ffi::OsStr {
        fn from_bytes_lossless(b: &[u8]) -> &std::ffi::OsStr {
            std::os::unix::ffi::OsStrExt::from_bytes(b)
        }
    }
}
