//! The sender's view of its sources: files, directory trees and symlinks
//! turned into a manifest, as `cp -r SRC DEST/` would copy them (a
//! directory is copied as itself, under its own name).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::protocol::manifest::{check_path, Entry, EntryKind};

use super::SessionError;

/// The manifest and, for each regular file, where to read it.
#[derive(Debug, Default)]
pub struct Tree {
    pub entries: Vec<Entry>,
    /// Source path of each entry (files are read from here).
    pub sources: Vec<PathBuf>,
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
}

/// The manifest entry for `path`, from its (not followed) metadata; a
/// symlink's target comes from `read_link`. `source` names it in errors.
fn entry_from(
    path: &str,
    source: &str,
    m: &std::fs::Metadata,
    read_link: impl FnOnce() -> std::io::Result<String>,
) -> Result<Entry, SessionError> {
    let ft = m.file_type();
    let (kind, link) = if ft.is_symlink() {
        let t = read_link().map_err(|e| SessionError::io(source.to_string(), e))?;
        (EntryKind::Symlink, Some(t))
    } else if ft.is_dir() {
        (EntryKind::Dir, None)
    } else if ft.is_file() {
        (EntryKind::File, None)
    } else {
        return Err(SessionError::local(
            crate::protocol::control::ErrorCode::BadRequest,
            format!("{source}: not a file, directory or symlink"),
        ));
    };
    check_path(path).map_err(|e| {
        SessionError::local(
            crate::protocol::control::ErrorCode::BadRequest,
            format!("{path}: {e}"),
        )
    })?;
    Ok(Entry {
        path: path.to_string(),
        kind,
        size: if kind == EntryKind::File { m.len() } else { 0 },
        mode: m.permissions().mode() & 0o7777,
        mtime_s: m.mtime(),
        mtime_ns: m.mtime_nsec() as u32,
        link,
    })
}

fn entry(path: &str, source: &Path) -> Result<Entry, SessionError> {
    let name = source.display().to_string();
    let m = std::fs::symlink_metadata(source).map_err(|e| SessionError::io(name.clone(), e))?;
    entry_from(path, &name, &m, || {
        std::fs::read_link(source).map(|t| t.to_string_lossy().into_owned())
    })
}

fn walk(tree: &mut Tree, rel: &str, source: &Path) -> Result<(), SessionError> {
    let e = entry(rel, source)?;
    let is_dir = e.kind == EntryKind::Dir;
    tree.entries.push(e);
    tree.sources.push(source.to_path_buf());
    if is_dir {
        let mut children: Vec<_> = std::fs::read_dir(source)
            .map_err(|e| SessionError::io(source.display().to_string(), e))?
            .collect::<Result<_, _>>()
            .map_err(|e| SessionError::io(source.display().to_string(), e))?;
        children.sort_by_key(|c| c.file_name());
        for c in children {
            let name = c.file_name();
            let name = name.to_str().ok_or_else(|| {
                SessionError::local(
                    crate::protocol::control::ErrorCode::BadRequest,
                    format!("{}: file name is not UTF-8", c.path().display()),
                )
            })?;
            walk(tree, &format!("{rel}/{name}"), &c.path())?;
        }
    }
    Ok(())
}

/// Build the manifest of `sources` (files, directories, symlinks; a
/// directory is copied as itself, recursively).
pub fn scan(sources: &[PathBuf]) -> Result<Tree, SessionError> {
    let mut tree = Tree::default();
    for s in sources {
        let trimmed = s.components().as_path();
        let name = trimmed
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| {
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
                format!("two sources are named {name}: they would land on the same path"),
            ));
        }
        walk(&mut tree, name, s)?;
    }
    Ok(tree)
}

/// The daemon's side of a pull: the manifest of `paths` under `root`, each
/// copied as itself (its last component names it), walked and stat'ed
/// beneath the root only. `sources` hold root-relative paths.
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
        walk_beneath(root, &mut tree, name, p)?;
    }
    Ok(tree)
}

fn walk_beneath(
    root: &crate::datapath::beneath::Root,
    tree: &mut Tree,
    rel: &str,
    source: &str,
) -> Result<(), SessionError> {
    let m = root
        .symlink_metadata(source)
        .map_err(|e| SessionError::io(source.to_string(), e))?;
    let e = entry_from(rel, source, &m, || root.read_link(source))?;
    let kind = e.kind;
    tree.entries.push(e);
    tree.sources.push(PathBuf::from(source));
    if kind == EntryKind::Dir {
        for name in root
            .read_dir(source)
            .map_err(|e| SessionError::io(source.to_string(), e))?
        {
            walk_beneath(
                root,
                tree,
                &format!("{rel}/{name}"),
                &format!("{source}/{name}"),
            )?;
        }
    }
    Ok(())
}
