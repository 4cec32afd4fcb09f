//! The sender's view of its sources: files, directory trees and symlinks
//! turned into a manifest, as `rsync -a SRC DEST/` would copy them (a
//! directory is copied as itself, under its own name; given as `DIR/`, its
//! contents are, as rsync's trailing slash says). One entry that
//! cannot be moved (a FIFO, a socket, a device node, a reserved name, a
//! directory that cannot be listed, something that vanished while walked)
//! is left out and named with its reason; the rest goes on. Names are
//! carried as bytes, UTF-8 or not ([`names`]).

use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::datapath::beneath::FileId;
use crate::protocol::control::UNLISTED;
use crate::protocol::manifest::{check_path, is_reserved, Entry, EntryKind};
use crate::protocol::names;

use super::filter::Filter;
use crate::session::link::refused::Why;

use crate::session::SessionError;
use std::time::{Duration, SystemTime};

/// An entry that was not moved, and why: `by_rule` when a rule left it
/// out (a policy, an option, a name the filesystem cannot hold), which a
/// run again cannot mend; otherwise a fault.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
    #[serde(default)]
    pub by_rule: bool,
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
    /// Each regular file's ctime when scanned: nothing may have changed it
    /// by the time its blocks are read (an mtime can be put back; a ctime
    /// cannot).
    pub ctimes: Vec<Option<(i64, u32)>>,
    /// What the scan left out.
    pub skipped: Vec<Skipped>,
    /// Entries `--exclude` left out (a directory counts once, with nothing
    /// beneath it walked).
    pub excluded: u64,
    /// Device nodes left out, as asked (no `-D`).
    pub devices_left: u64,
    /// Files with more than one name, by identity: the path of the first
    /// name met (`-H`).
    first_names: std::collections::HashMap<FileId, String>,
    /// User and group names met, by number.
    users: std::collections::HashMap<u32, String>,
    groups: std::collections::HashMap<u32, String>,
}

/// What a scan carries besides the tree itself.
#[derive(Debug, Clone, Default)]
pub struct ScanRules {
    /// `--exclude`, `--include`.
    pub filter: Filter,
    /// `-H`: a file's further names are sent as hard links to its first.
    pub hard_links: bool,
    /// `-X`: the user.* extended attributes.
    pub xattrs: bool,
    /// `-A`: POSIX ACLs (system.posix_acl_access and _default).
    pub acls: bool,
    /// `-D`: device nodes (FIFOs and sockets go always).
    pub devices: bool,
}

impl ScanRules {
    /// The `REQ_*` bits that ask a scanning daemon for these rules.
    pub fn request_flags(&self) -> u32 {
        use crate::protocol::control::{REQ_ACLS, REQ_DEVICES, REQ_HARD_LINKS, REQ_XATTRS};
        [
            (self.hard_links, REQ_HARD_LINKS),
            (self.xattrs, REQ_XATTRS),
            (self.acls, REQ_ACLS),
            (self.devices, REQ_DEVICES),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .fold(0, |f, (_, bit)| f | bit)
    }

    /// The rules a request's flags and `filter` (a pull's `--exclude`,
    /// `--include`) ask for.
    pub fn requested(flags: u32, filter: Filter) -> ScanRules {
        use crate::protocol::control::{REQ_ACLS, REQ_DEVICES, REQ_HARD_LINKS, REQ_XATTRS};
        ScanRules {
            filter,
            hard_links: flags & REQ_HARD_LINKS != 0,
            xattrs: flags & REQ_XATTRS != 0,
            acls: flags & REQ_ACLS != 0,
            devices: flags & REQ_DEVICES != 0,
        }
    }

    /// Whether extended attribute `name` is carried.
    pub fn carries(&self, name: &str) -> bool {
        use crate::protocol::manifest::{is_acl, is_carried_xattr};
        is_carried_xattr(name) && if is_acl(name) { self.acls } else { self.xattrs }
    }
}

impl Tree {
    /// Bytes this session moves of its files (a piece's span of a split
    /// file, which `block` cuts).
    pub fn file_bytes_in(&self, block: u64) -> u64 {
        self.entries
            .iter()
            .filter(|e| e.kind == EntryKind::File)
            .map(|e| e.span_len(block))
            .sum()
    }

    /// Bytes of data (holes left out) this session moves of its files:
    /// what crosses the network.
    pub fn data_bytes_in(&self, block: u64) -> u64 {
        self.entries
            .iter()
            .filter(|e| e.kind == EntryKind::File)
            .map(|e| e.span_data(block))
            .sum()
    }

    pub fn file_bytes(&self) -> u64 {
        self.entries
            .iter()
            .filter(|e| e.kind == EntryKind::File)
            .map(|e| e.size)
            .sum()
    }

    /// Keep the entries `keep` marks (a shard's share), in their order.
    pub(crate) fn retain(&mut self, keep: &[bool]) {
        let mut k = keep.iter();
        self.entries.retain(|_| *k.next().unwrap_or(&false));
        let mut k = keep.iter();
        self.sources.retain(|_| *k.next().unwrap_or(&false));
        let mut k = keep.iter();
        self.ids.retain(|_| *k.next().unwrap_or(&false));
        let mut k = keep.iter();
        self.ctimes.retain(|_| *k.next().unwrap_or(&false));
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
            let done = size == 0 || held.settled(i as u32);
            id.filter(|_| !done).map(|id| (i, id.dev, size))
        })
    }

    /// What the scan left out, as the session reports skipped entries.
    pub(crate) fn skipped_refs(&self) -> Vec<crate::session::link::refused::Refused> {
        self.skipped
            .iter()
            .map(|s| crate::session::link::refused::Refused {
                entry: UNLISTED,
                path: s.path.clone(),
                reason: s.reason.clone(),
                rule: s.by_rule,
            })
            .collect()
    }

    /// Fill in what the metadata alone does not say: the owner's names,
    /// and under `-H` whether a file is a further name of one already met.
    fn dress(&mut self, e: &mut Entry, m: &std::fs::Metadata, rules: &ScanRules) {
        let user = self
            .users
            .entry(m.uid())
            .or_insert_with(|| known_name(crate::datapath::ids::user_name(m.uid())));
        let group = self
            .groups
            .entry(m.gid())
            .or_insert_with(|| known_name(crate::datapath::ids::group_name(m.gid())));
        e.owner = crate::protocol::manifest::Owner {
            uid: m.uid(),
            gid: m.gid(),
            user: user.clone(),
            group: group.clone(),
        };
        if !(rules.hard_links && e.kind == EntryKind::File && m.nlink() > 1) {
            return;
        }
        let id = FileId {
            dev: m.dev(),
            ino: m.ino(),
        };
        match self.first_names.get(&id) {
            Some(first) => {
                e.kind = EntryKind::HardLink;
                e.link = Some(first.clone());
                (e.size, e.data) = (0, 0);
            }
            None => {
                self.first_names.insert(id, e.path.clone());
            }
        }
    }

    /// Regular files that are further names of another (`-H`).
    pub fn hard_links(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| e.kind == EntryKind::HardLink)
            .count()
    }

    fn push(&mut self, e: Entry, source: PathBuf, m: &std::fs::Metadata) {
        let file = e.kind == EntryKind::File;
        let id = file.then(|| FileId {
            dev: m.dev(),
            ino: m.ino(),
        });
        self.ctimes
            .push(file.then(|| (m.ctime(), m.ctime_nsec() as u32)));
        self.entries.push(e);
        self.sources.push(source);
        self.ids.push(id);
    }

    /// Whether `m` is a device node `rules` leave out (no `-D`, as rsync
    /// without --devices): counted, not named.
    fn left_as_device(&mut self, m: &std::fs::Metadata, rules: &ScanRules) -> bool {
        let t = m.file_type();
        let left = (t.is_block_device() || t.is_char_device()) && !rules.devices;
        self.devices_left += u64::from(left);
        left
    }

    /// `path` is not moved for a fault (vanished, unreadable).
    fn skip(&mut self, path: &str, reason: impl Into<String>) {
        self.left_out(path, crate::session::link::refused::Why::fault(reason));
    }

    /// `path` is not moved for `why`.
    fn left_out(&mut self, path: &str, why: crate::session::link::refused::Why) {
        self.skipped.push(Skipped {
            path: names::shown(path).into_owned(),
            reason: why.text,
            by_rule: why.rule,
        });
    }
}

/// A user or group name that fits the wire, else none (the number is sent).
fn known_name(name: Option<String>) -> String {
    name.filter(|n| n.len() <= crate::protocol::manifest::OWNER_NAME_MAX)
        .unwrap_or_default()
}

/// The kind of entry `ft` makes, or why it is not moved.
fn kind_of(ft: &std::fs::FileType) -> Result<EntryKind, Why> {
    if ft.is_symlink() {
        Ok(EntryKind::Symlink)
    } else if ft.is_dir() {
        Ok(EntryKind::Dir)
    } else if ft.is_file() {
        Ok(EntryKind::File)
    } else if ft.is_fifo() {
        Ok(EntryKind::Fifo)
    } else if ft.is_socket() {
        Ok(EntryKind::Socket)
    } else if ft.is_block_device() {
        Ok(EntryKind::BlockDevice)
    } else if ft.is_char_device() {
        Ok(EntryKind::CharDevice)
    } else {
        Err(Why::rule("of a file type urmove does not know: not moved"))
    }
}

/// The manifest entry for `path`, from its (not followed) metadata; a
/// symlink's target comes from `read_link`. Err: why it is not moved.
fn entry_from(
    path: &str,
    m: &std::fs::Metadata,
    read_link: impl FnOnce() -> std::io::Result<String>,
) -> Result<Entry, Why> {
    let kind = kind_of(&m.file_type())?;
    let link = match kind {
        EntryKind::Symlink => {
            Some(read_link().map_err(|e| Why::fault(format!("cannot read the link: {e}")))?)
        }
        _ => None,
    };
    check_path(path).map_err(|e| Why::rule(e.to_string()))?;
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
        rdev: if kind.is_device() { m.rdev() } else { 0 },
        ..Default::default()
    })
}

fn walk(tree: &mut Tree, f: &ScanRules, rel: &str, source: &Path) -> Result<(), SessionError> {
    let m = match std::fs::symlink_metadata(source) {
        Ok(m) => m,
        Err(e) => {
            tree.skip(rel, format!("vanished or unreadable while scanned: {e}"));
            return Ok(());
        }
    };
    if !f.filter.admits(rel, m.is_dir()) {
        tree.excluded += 1;
        return Ok(());
    }
    if tree.left_as_device(&m, f) {
        return Ok(());
    }
    let e = entry_from(rel, &m, || {
        std::fs::read_link(source).map(|t| names::from_os(t.as_os_str()))
    });
    let mut e = match e {
        Ok(e) => e,
        Err(why) => {
            tree.left_out(rel, why);
            return Ok(());
        }
    };
    tree.dress(&mut e, &m, f);
    if e.kind == EntryKind::File && e.data < e.size {
        // Holes, or fewer blocks than the size: what its frames carry.
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(source);
        if let Ok(file) = opened {
            e.data = super::extents::data_of(&file, e.size);
        }
    }
    let read = |keep: &dyn Fn(&str) -> bool, max| crate::datapath::ids::list(source, keep, max);
    if let Err(why) = add_xattrs(&mut e, read, f) {
        tree.skip(rel, why.to_string());
        return Ok(());
    }
    let is_dir = e.kind == EntryKind::Dir;
    tree.push(e, source.to_path_buf(), &m);
    if is_dir {
        walk_children(tree, f, rel, source)?;
    }
    Ok(())
}

fn walk_children(
    tree: &mut Tree,
    f: &ScanRules,
    rel: &str,
    source: &Path,
) -> Result<(), SessionError> {
    let listed = std::fs::read_dir(source).and_then(|d| d.collect::<Result<Vec<_>, _>>());
    let mut children = match listed {
        Ok(c) => c,
        Err(e) => {
            // The top of a DIR/ source is named as given.
            let shown = source.display().to_string();
            let named = if rel.is_empty() { &shown } else { rel };
            tree.skip(named, format!("its contents cannot be listed: {e}"));
            return Ok(());
        }
    };
    children.sort_by_key(|c| c.file_name());
    for c in children {
        let name = names::from_os(&c.file_name());
        walk(tree, f, &beneath(rel, &name), &c.path())?;
    }
    Ok(())
}

/// `name` in directory `rel` of the manifest (`rel` empty: at its top).
fn beneath(rel: &str, name: &str) -> String {
    match rel {
        "" => name.to_string(),
        _ => format!("{rel}/{name}"),
    }
}

/// Whether source `s` names a directory's contents rather than the
/// directory itself, as rsync reads a trailing slash: `DIR/`, `DIR/.`,
/// `.`.
pub fn is_contents(s: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let b = s.as_os_str().as_bytes();
    b.ends_with(b"/") || b.ends_with(b"/.") || b == b"."
}

/// Two sources that would land on one path of the manifest are refused,
/// naming the path and both sources as given (`given`: the first entry of
/// each source, and how it was given).
fn check_landing(
    entries: &[Entry],
    given: &[(usize, String)],
    what: &str,
) -> Result<(), SessionError> {
    let source_of = |i: usize| {
        let k = given.partition_point(|(first, _)| *first <= i);
        given[k.saturating_sub(1)].1.as_str()
    };
    let mut seen: std::collections::HashMap<&str, usize> = Default::default();
    for (i, e) in entries.iter().enumerate() {
        let Some(&first) = seen.get(e.path.as_str()) else {
            seen.insert(&e.path, i);
            continue;
        };
        return Err(SessionError::local(
            crate::protocol::control::ErrorCode::BadRequest,
            format!(
                "two {what} are named {} under the destination (from {} and {}): they would land on the same path",
                names::shown(&e.path),
                source_of(first),
                source_of(i)
            ),
        ));
    }
    Ok(())
}

/// Why an entry's extended attributes cannot go as asked.
#[derive(Debug, thiserror::Error)]
enum XattrsRefused {
    #[error("its extended attributes cannot be read: {0}")]
    Unreadable(std::io::Error),
    #[error("it has {0} extended attributes to carry, more than {max}", max = crate::protocol::manifest::XATTRS_MAX)]
    TooMany(usize),
}

/// The extended attributes `rules` carry, as `read` finds them (not on
/// symlinks, which Linux gives no user attributes). Err: why the entry
/// cannot be sent as asked.
fn add_xattrs(
    e: &mut Entry,
    read: impl Fn(&dyn Fn(&str) -> bool, usize) -> std::io::Result<Vec<(String, Vec<u8>)>>,
    rules: &ScanRules,
) -> Result<(), XattrsRefused> {
    use crate::protocol::manifest::XATTR_VALUE_MAX;
    if !(rules.xattrs || rules.acls) || e.kind == EntryKind::Symlink {
        return Ok(());
    }
    let mut attrs =
        read(&|n| rules.carries(n), XATTR_VALUE_MAX).map_err(XattrsRefused::Unreadable)?;
    if attrs.len() > crate::protocol::manifest::XATTRS_MAX {
        return Err(XattrsRefused::TooMany(attrs.len()));
    }
    attrs.sort();
    e.xattrs = attrs;
    Ok(())
}

/// Build the manifest of `sources` (files, directories, symlinks; a
/// directory is copied as itself, recursively, or given as `DIR/` its
/// contents are), as `rules` say. Two sources whose entries would land on
/// one path are refused.
pub fn scan(sources: &[PathBuf], filter: &ScanRules) -> Result<Tree, SessionError> {
    let mut tree = Tree::default();
    let mut given = Vec::with_capacity(sources.len());
    for s in sources {
        given.push((tree.entries.len(), s.display().to_string()));
        let m = std::fs::symlink_metadata(s)
            .map_err(|e| SessionError::io(s.display().to_string(), e))?;
        if is_contents(s) && m.is_dir() {
            walk_children(&mut tree, filter, "", s)?;
            continue;
        }
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
        walk(&mut tree, filter, &name, s)?;
    }
    check_landing(&tree.entries, &given, "sources")?;
    Ok(tree)
}

/// The entries of one path that appeared under a followed directory
/// (`rel` under the destination, `source` here), as `rules` say: itself,
/// and beneath it when it is a directory.
pub(crate) fn scan_new(rules: &ScanRules, rel: &str, source: &Path) -> Tree {
    let mut tree = Tree::default();
    // A local scan fails only on what it reports as skipped.
    let _ = walk(&mut tree, rules, rel, source);
    tree
}

/// The daemon's side of a pull: the manifest of `paths` under `root`, each
/// copied as itself (its last component names it), or, given as `DIR/`,
/// its contents; walked and stat'ed beneath the root only. `sources` hold
/// root-relative paths. urmove's own files (parts, journals) are never
/// listed. Two paths whose entries would land on one path are refused.
pub fn scan_beneath(
    root: &crate::datapath::beneath::Root,
    paths: &[&str],
    rules: &ScanRules,
) -> Result<Tree, SessionError> {
    use crate::protocol::control::ErrorCode;
    let mut tree = Tree::default();
    let mut given = Vec::with_capacity(paths.len());
    for p in paths {
        given.push((tree.entries.len(), p.to_string()));
        let (p, contents) = match p.strip_suffix('/') {
            Some(dir) => (dir, true),
            None => (*p, false),
        };
        check_path(p)
            .map_err(|e| SessionError::local(ErrorCode::PathRefused, format!("{p}: {e}")))?;
        let m = root
            .symlink_metadata(p)
            .map_err(|e| SessionError::io(p.to_string(), e))?;
        // `DIR/` names what a link there leads to beneath the root, as a
        // trailing slash does in a local path.
        let is_dir = m.is_dir() || (contents && root.read_dir(p).is_ok());
        if contents && !is_dir {
            return Err(SessionError::local(
                ErrorCode::PathRefused,
                format!("{p}/: not a directory (leave out the / to pull it as itself)"),
            ));
        }
        let scan = BeneathScan { root, rules };
        match contents {
            true => scan.walk_children(&mut tree, "", p),
            false => {
                let name = p.rsplit('/').next().unwrap_or(p);
                scan.walk(&mut tree, name, p);
            }
        }
    }
    check_landing(&tree.entries, &given, "paths")?;
    Ok(tree)
}

/// A scan beneath a root: the root and the rules it walks by.
struct BeneathScan<'a> {
    root: &'a crate::datapath::beneath::Root,
    rules: &'a ScanRules,
}

impl BeneathScan<'_> {
    /// `source` (`rel` in the manifest) and, a directory, what it holds.
    fn walk(&self, tree: &mut Tree, rel: &str, source: &str) {
        let (root, rules) = (self.root, self.rules);
        // One descriptor for its metadata and its attributes: one inode.
        let held = root
            .open_path(source)
            .and_then(|at| at.metadata().map(|m| (at, m)));
        let (at, m) = match held {
            Ok(held) => held,
            Err(e) => return tree.skip(rel, format!("vanished or unreadable while scanned: {e}")),
        };
        if !rules.filter.admits(rel, m.is_dir()) {
            tree.excluded += 1;
            return;
        }
        if tree.left_as_device(&m, rules) {
            return;
        }
        let mut e = match entry_from(rel, &m, || root.read_link(source)) {
            Ok(e) => e,
            Err(why) => return tree.left_out(rel, why),
        };
        tree.dress(&mut e, &m, rules);
        if e.kind == EntryKind::File && e.data < e.size {
            if let Ok(file) = root.open_read(source) {
                e.data = super::extents::data_of(&file, e.size);
            }
        }
        let read = |keep: &dyn Fn(&str) -> bool, max| crate::datapath::ids::list_fd(&at, keep, max);
        if let Err(why) = add_xattrs(&mut e, read, rules).map_err(|w| w.to_string()) {
            return tree.skip(rel, why);
        }
        let kind = e.kind;
        tree.push(e, PathBuf::from(source), &m);
        if kind == EntryKind::Dir {
            self.walk_children(tree, rel, source);
        }
    }

    /// What directory `source` (`rel` in the manifest, empty at its top)
    /// holds, beneath the root.
    fn walk_children(&self, tree: &mut Tree, rel: &str, source: &str) {
        let names = match self.root.read_dir(source) {
            Ok(n) => n,
            // The top of a DIR/ path is named as asked.
            Err(e) => {
                let named = if rel.is_empty() { source } else { rel };
                return tree.skip(named, format!("its contents cannot be listed: {e}"));
            }
        };
        for name in names.iter().filter(|n| !is_reserved(n)) {
            self.walk(tree, &beneath(rel, name), &format!("{source}/{name}"));
        }
    }
}

/// The time `s` seconds and `ns` nanoseconds from the epoch.
pub(crate) fn mtime_at(s: i64, ns: u32) -> SystemTime {
    let d = Duration::new(s.unsigned_abs(), ns);
    if s >= 0 {
        SystemTime::UNIX_EPOCH + d
    } else {
        SystemTime::UNIX_EPOCH - d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_files_are_scanned_and_reserved_names_skipped_by_rule() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let top = dir.path().join("top");
        std::fs::create_dir(&top).unwrap();
        std::fs::write(top.join("a"), b"a").unwrap();
        std::fs::write(top.join("x.urmove.part"), b"p").unwrap();
        let _sock = std::os::unix::net::UnixListener::bind(top.join("sock")).unwrap();
        let bad = std::ffi::OsStr::from_bytes_lossless(b"bad\xff");
        std::fs::write(top.join(bad), b"b").unwrap();
        let tree = scan(&[top], &ScanRules::default()).unwrap();
        let found: Vec<(&str, EntryKind)> = tree
            .entries
            .iter()
            .map(|e| (e.path.as_str(), e.kind))
            .collect();
        let bad_name = format!("top/{}", names::from_bytes(b"bad\xff"));
        assert_eq!(
            found,
            [
                ("top", EntryKind::Dir),
                ("top/a", EntryKind::File),
                (bad_name.as_str(), EntryKind::File),
                ("top/sock", EntryKind::Socket),
            ]
        );
        assert_eq!(tree.skipped.len(), 1, "{:?}", tree.skipped);
        let s = &tree.skipped[0];
        assert_eq!(s.path, "top/x.urmove.part");
        assert!(s.reason.contains("reserved") && s.by_rule, "{s:?}");
    }

    /// Device nodes go with `-D` only; without it they are counted, not
    /// named (as rsync without --devices).
    #[test]
    fn device_nodes_are_scanned_with_devices_and_counted_without() {
        if crate::datapath::sys::effective_uid() != 0 {
            eprintln!("skipped: making a device node needs root");
            return;
        }
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let top = dir.path().join("top");
        std::fs::create_dir(&top).unwrap();
        let root = crate::datapath::beneath::Root::open_for_writing(&top).unwrap();
        root.mknod("null", libc::S_IFCHR | 0o644, libc::makedev(1, 3))
            .unwrap();
        let without = scan(std::slice::from_ref(&top), &ScanRules::default()).unwrap();
        assert_eq!((without.entries.len(), without.devices_left), (1, 1));
        assert!(without.skipped.is_empty());
        let rules = ScanRules {
            devices: true,
            ..Default::default()
        };
        let with = scan(&[top], &rules).unwrap();
        let dev = &with.entries[1];
        assert_eq!(
            (dev.kind, dev.rdev),
            (EntryKind::CharDevice, libc::makedev(1, 3))
        );
        assert_eq!(with.devices_left, 0);
    }

    /// `DIR/` is DIR's contents, `DIR` itself; two sources landing on one
    /// path are refused, naming both as given.
    #[test]
    fn a_trailing_slash_scans_the_contents_and_collisions_are_refused() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        for top in ["top", "other"] {
            std::fs::create_dir_all(dir.path().join(top).join("sub")).unwrap();
            std::fs::write(dir.path().join(top).join("sub/b"), b"b").unwrap();
        }
        std::fs::write(dir.path().join("top/a"), b"a").unwrap();
        let paths = |sources: &[PathBuf]| -> Vec<String> {
            let tree = scan(sources, &ScanRules::default()).unwrap();
            tree.entries.into_iter().map(|e| e.path).collect()
        };
        let top = dir.path().join("top");
        let slash = PathBuf::from(format!("{}/", top.display()));
        assert_eq!(paths(std::slice::from_ref(&slash)), ["a", "sub", "sub/b"]);
        assert_eq!(paths(&[top.join(".")]), ["a", "sub", "sub/b"]);
        assert_eq!(paths(&[top]), ["top", "top/a", "top/sub", "top/sub/b"]);
        assert!(is_contents(Path::new(".")) && !is_contents(Path::new("a.")));
        let other = PathBuf::from(format!("{}/", dir.path().join("other").display()));
        let e = scan(&[slash.clone(), other.clone()], &ScanRules::default()).unwrap_err();
        let want = format!(
            "two sources are named sub under the destination (from {} and {})",
            slash.display(),
            other.display()
        );
        assert!(e.to_string().contains(&want), "{e}");
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
