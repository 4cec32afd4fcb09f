//! The sender's view of its sources: files, directory trees and symlinks
//! turned into a manifest, as `rsync -a SRC DEST/` would copy them (a
//! directory is copied as itself, under its own name; given as `DIR/`, its
//! contents are, as rsync's trailing slash says). One entry that
//! cannot be moved (a FIFO, a socket, a device node, a reserved name, a
//! directory that cannot be listed, something that vanished while walked)
//! is left out and named with its reason; the rest goes on. Names are
//! carried as bytes, UTF-8 or not ([`names`]). The reading is done by
//! several threads ([`walk`]); the tree comes back in one order all the
//! same: depth first, each directory's names sorted.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::datapath::beneath::FileId;
use crate::protocol::control::UNLISTED;
use crate::protocol::manifest::{check_path, Entry, EntryKind};
use crate::protocol::names;

use std::collections::HashMap;
use std::ops::ControlFlow;

use super::filter::Filter;
use super::walk::{self, Batch, Found, Start, Walk};
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

    /// Regular files that are further names of another (`-H`).
    pub fn hard_links(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| e.kind == EntryKind::HardLink)
            .count()
    }

    /// Take `f` as the next entry (its first name decided, under `-H`).
    pub fn take(&mut self, f: super::walk::Found) {
        self.entries.push(f.entry);
        self.sources.push(f.source);
        self.ids.push(f.id);
        self.ctimes.push(f.ctime);
    }
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
pub(super) fn entry_from(
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
pub(super) enum XattrsRefused {
    #[error("its extended attributes cannot be read: {0}")]
    Unreadable(std::io::Error),
    #[error("it has {0} extended attributes to carry, more than {max}", max = crate::protocol::manifest::XATTRS_MAX)]
    TooMany(usize),
}

/// The extended attributes `rules` carry, as `read` finds them (not on
/// symlinks, which Linux gives no user attributes). Err: why the entry
/// cannot be sent as asked.
pub(super) fn add_xattrs(
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
/// contents are), as `rules` say, read by several threads ([`walk`]) and
/// always in one order: depth first, each directory's names sorted. Two
/// sources whose entries would land on one path are refused.
pub fn scan(sources: &[PathBuf], rules: &ScanRules) -> Result<Tree, SessionError> {
    scan_with(sources, rules, Walk::default())
}

/// [`scan`], read as `how` says (its threads).
pub fn scan_with(sources: &[PathBuf], rules: &ScanRules, how: Walk) -> Result<Tree, SessionError> {
    let starts = starts_of(sources)?;
    let (tree, first) = gather(&walk::Local, rules, starts, how);
    let given: Vec<_> = first
        .into_iter()
        .zip(sources.iter().map(|s| s.display().to_string()))
        .collect();
    check_landing(&tree.entries, &given, "sources")?;
    Ok(tree)
}

/// Where a walk of `sources` begins: each a directory's contents (given
/// as `DIR/`), or itself under its last component's name.
pub(crate) fn starts_of(sources: &[PathBuf]) -> Result<Vec<Start<PathBuf>>, SessionError> {
    let mut starts = Vec::with_capacity(sources.len());
    for s in sources {
        let m = std::fs::symlink_metadata(s)
            .map_err(|e| SessionError::io(s.display().to_string(), e))?;
        if is_contents(s) && m.is_dir() {
            starts.push(Start::Contents(s.clone()));
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
        starts.push(Start::Itself {
            rel: name,
            source: s.clone(),
        });
    }
    Ok(starts)
}

/// The entries of one path that appeared under a followed directory
/// (`rel` under the destination, `source` here), as `rules` say: itself,
/// and beneath it when it is a directory.
pub(crate) fn scan_new(rules: &ScanRules, rel: &str, source: &Path) -> Tree {
    let start = Start::Itself {
        rel: rel.to_string(),
        source: source.to_path_buf(),
    };
    let how = Walk {
        threads: 1,
        ..Walk::default()
    };
    gather(&walk::Local, rules, vec![start], how).0
}

/// Walk `starts` in `place` and put what the threads found in the one
/// order a tree gives: each start in turn, depth first, a directory's
/// names sorted; under `-H` a file's first name is then its first in that
/// order. Also: where each start's entries begin.
pub(super) fn gather<P: walk::Place>(
    place: &P,
    rules: &ScanRules,
    starts: Vec<Start<P::Source>>,
    how: Walk,
) -> (Tree, Vec<usize>) {
    let start_count = starts.len() as u64;
    let mut tree = Tree::default();
    let mut by_dir: HashMap<u64, Vec<Batch>> = HashMap::new();
    let mut keep = |b: Batch| {
        tree.excluded += b.excluded;
        tree.devices_left += b.devices_left;
        by_dir.entry(b.dir).or_default().push(b);
        ControlFlow::Continue(())
    };
    let how = Walk {
        name_links: false,
        ..how
    };
    walk::walk(place, rules, starts, how, &mut keep);
    let mut first_names = HashMap::new();
    let mut first = Vec::with_capacity(start_count as usize);
    // Each open directory: its entries and what it left out, both in its
    // listing's order, and how many of its entries are taken.
    type Open = (
        std::vec::IntoIter<Found>,
        std::vec::IntoIter<(usize, Skipped)>,
        usize,
    );
    let mut open_dir = |dir: u64| -> Open {
        let mut batches = by_dir.remove(&dir).unwrap_or_default();
        batches.sort_by_key(|b| b.seq);
        let (mut found, mut skipped) = (Vec::new(), Vec::new());
        for b in batches {
            let at = found.len();
            skipped.extend(b.skipped.into_iter().map(|(i, s)| (at + i, s)));
            found.extend(b.found);
        }
        (found.into_iter(), skipped.into_iter(), 0)
    };
    for start in 0..start_count {
        first.push(tree.entries.len());
        let mut stack = vec![open_dir(start)];
        while let Some((found, skipped, taken)) = stack.last_mut() {
            while let Some((_, s)) = skipped.as_slice().first().filter(|(i, _)| i <= taken) {
                tree.skipped.push(s.clone());
                skipped.next();
            }
            let Some(mut f) = found.next() else {
                stack.pop();
                continue;
            };
            *taken += 1;
            walk::name_link(&mut first_names, &mut f);
            let below = f.below;
            tree.take(f);
            if let Some(dir) = below {
                stack.push(open_dir(dir));
            }
        }
    }
    (tree, first)
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
    let mut starts = Vec::with_capacity(paths.len());
    for p in paths {
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
        starts.push(match contents {
            true => Start::Contents(p.to_string()),
            false => Start::Itself {
                rel: p.rsplit('/').next().unwrap_or(p).to_string(),
                source: p.to_string(),
            },
        });
    }
    let (tree, first) = gather(&walk::Beneath(root), rules, starts, Walk::default());
    let given: Vec<_> = first
        .into_iter()
        .zip(paths.iter().map(|p| p.to_string()))
        .collect();
    check_landing(&tree.entries, &given, "paths")?;
    Ok(tree)
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
