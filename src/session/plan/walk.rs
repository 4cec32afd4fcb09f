//! Several threads read a tree at once. They take jobs from one shared
//! queue: list a directory (its names sorted, cut into chunks of
//! [`CHUNK_ENTRIES`]), or stat one chunk of names and make their entries.
//! A chunk's entries go out as one [`Batch`] through the caller's `emit`,
//! under one lock, and only then are the directories among them queued to
//! be listed: a directory's own entry is always out before anything
//! beneath it. Under `-H` with [`Walk::name_links`], a file's first name
//! is the first emitted (the first-name map is kept under the same lock),
//! so its further names, emitted later, link to one already out.
//!
//! Each batch names the directory it lists ([`Batch::dir`]) and its place
//! in that listing ([`Batch::seq`]): `tree::scan` puts them back in the
//! one order a tree always gives (depth first, names sorted), whatever
//! thread read what first.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};

use crate::datapath::beneath::{FileId, Root};
use crate::protocol::manifest::{is_reserved, Entry, EntryKind};
use crate::protocol::names;
use crate::session::link::refused::Why;

use super::tree::{add_xattrs, entry_from, ScanRules, Skipped};

/// Threads a walk takes at least and at most, and a CPU: a cold walk
/// waits on the disk more than it computes (on 2 CPUs, cold, 200,000
/// files: 4 threads 1.9-2.0 s, 2 threads 2.2-2.7 s, one 2.7-5.1 s).
pub const THREADS_MIN: usize = 4;
pub const THREADS_MAX: usize = 16;
pub const THREADS_PER_CPU: usize = 2;
/// Names stat'ed as one job, and emitted as one batch.
pub const CHUNK_ENTRIES: usize = 64;

/// How a walk runs.
#[derive(Debug, Clone, Copy)]
pub struct Walk {
    /// Threads reading (1: the caller's alone, none started).
    pub threads: usize,
    /// Under `-H`, decide first names as batches go out (streaming);
    /// otherwise the receiver of the batches decides them
    /// ([`Found::linked`]).
    pub name_links: bool,
}

impl Default for Walk {
    /// [`THREADS_PER_CPU`] a CPU, within [`THREADS_MIN`]..=[`THREADS_MAX`].
    fn default() -> Walk {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Walk {
            threads: (cpus * THREADS_PER_CPU).clamp(THREADS_MIN, THREADS_MAX),
            name_links: false,
        }
    }
}

/// One entry found, with what the tree keeps beside it.
#[derive(Debug)]
pub struct Found {
    pub entry: Entry,
    /// Where it is read from.
    pub source: PathBuf,
    /// A regular file's identity when stat'ed.
    pub id: Option<FileId>,
    /// A regular file's ctime when stat'ed.
    pub ctime: Option<(i64, u32)>,
    /// Under `-H`, a regular file with more than one name: its identity,
    /// while no first name has been decided for it.
    pub linked: Option<FileId>,
    /// A directory: the [`Batch::dir`] of what it holds.
    pub below: Option<u64>,
}

impl Found {
    /// This is a further name of a file first met as `first` (`-H`).
    pub fn link_to(&mut self, first: &str) {
        let e = &mut self.entry;
        e.kind = EntryKind::HardLink;
        e.link = Some(first.to_string());
        (e.size, e.data) = (0, 0);
        (self.id, self.ctime, self.linked) = (None, None, None);
    }
}

/// Under `-H`, the first name of each file with several: `f`'s own when
/// it is the first met, else `f` becomes a link to it.
pub fn name_link(first_names: &mut HashMap<FileId, String>, f: &mut Found) {
    let Some(id) = f.linked.take() else { return };
    match first_names.get(&id) {
        Some(first) => f.link_to(&first.clone()),
        None => {
            first_names.insert(id, f.entry.path.clone());
        }
    }
}

/// Entries of one chunk of one directory's listing.
#[derive(Debug, Default)]
pub struct Batch {
    /// The directory listed: a start's index, or a [`Found::below`].
    pub dir: u64,
    /// Its place among that directory's batches.
    pub seq: u32,
    pub found: Vec<Found>,
    /// What was left out, each after as many of `found` as it says.
    pub skipped: Vec<(usize, Skipped)>,
    /// Entries `--exclude` left out.
    pub excluded: u64,
    /// Device nodes left out (no `-D`).
    pub devices_left: u64,
}

/// Where a walk begins.
#[derive(Debug, Clone)]
pub enum Start<S> {
    /// `source` itself, named `rel`, and beneath it when a directory.
    Itself { rel: String, source: S },
    /// What directory `source` holds, at the top of the manifest.
    Contents(S),
}

/// Where a walk reads: local paths, or beneath a root.
pub trait Place: Sync {
    type Source: Clone + Send;
    /// What is kept from the look at a source for its attributes.
    type Held;
    /// Its metadata, a final symlink not followed.
    fn look(&self, s: &Self::Source) -> std::io::Result<(std::fs::Metadata, Self::Held)>;
    fn read_link(&self, s: &Self::Source) -> std::io::Result<String>;
    /// Opened to read (for its holes), never through a final symlink.
    fn open_read(&self, s: &Self::Source) -> std::io::Result<std::fs::File>;
    fn xattrs(
        &self,
        s: &Self::Source,
        held: &Self::Held,
        keep: &dyn Fn(&str) -> bool,
        max: usize,
    ) -> std::io::Result<Vec<(String, Vec<u8>)>>;
    /// The names in directory `s`, sorted, each with its source.
    fn list(&self, s: &Self::Source) -> std::io::Result<Vec<(String, Self::Source)>>;
    /// `s` as a skipped directory at the top is named.
    fn shown(&self, s: &Self::Source) -> String;
    fn path(&self, s: &Self::Source) -> PathBuf;
}

/// Local paths, as given.
pub struct Local;

impl Place for Local {
    type Source = PathBuf;
    type Held = ();
    fn look(&self, s: &PathBuf) -> std::io::Result<(std::fs::Metadata, ())> {
        std::fs::symlink_metadata(s).map(|m| (m, ()))
    }
    fn read_link(&self, s: &PathBuf) -> std::io::Result<String> {
        std::fs::read_link(s).map(|t| names::from_os(t.as_os_str()))
    }
    fn open_read(&self, s: &PathBuf) -> std::io::Result<std::fs::File> {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(s)
    }
    fn xattrs(
        &self,
        s: &PathBuf,
        _: &(),
        keep: &dyn Fn(&str) -> bool,
        max: usize,
    ) -> std::io::Result<Vec<(String, Vec<u8>)>> {
        crate::datapath::ids::list(s, keep, max)
    }
    fn list(&self, s: &PathBuf) -> std::io::Result<Vec<(String, PathBuf)>> {
        let mut children = std::fs::read_dir(s)?.collect::<Result<Vec<_>, _>>()?;
        children.sort_by_key(|c| c.file_name());
        Ok(children
            .into_iter()
            .map(|c| (names::from_os(&c.file_name()), c.path()))
            .collect())
    }
    fn shown(&self, s: &PathBuf) -> String {
        s.display().to_string()
    }
    fn path(&self, s: &PathBuf) -> PathBuf {
        s.clone()
    }
}

/// Root-relative paths beneath a root, walked and stat'ed beneath it
/// only; urmove's own files (parts, journals) are never listed.
pub struct Beneath<'a>(pub &'a Root);

impl Place for Beneath<'_> {
    type Source = String;
    /// One descriptor for its metadata and its attributes: one inode.
    type Held = std::fs::File;
    fn look(&self, s: &String) -> std::io::Result<(std::fs::Metadata, std::fs::File)> {
        let at = self.0.open_path(s)?;
        at.metadata().map(|m| (m, at))
    }
    fn read_link(&self, s: &String) -> std::io::Result<String> {
        self.0.read_link(s)
    }
    fn open_read(&self, s: &String) -> std::io::Result<std::fs::File> {
        self.0.open_read(s)
    }
    fn xattrs(
        &self,
        _: &String,
        held: &std::fs::File,
        keep: &dyn Fn(&str) -> bool,
        max: usize,
    ) -> std::io::Result<Vec<(String, Vec<u8>)>> {
        crate::datapath::ids::list_fd(held, keep, max)
    }
    fn list(&self, s: &String) -> std::io::Result<Vec<(String, String)>> {
        let names = self.0.read_dir(s)?;
        Ok(names
            .into_iter()
            .filter(|n| !is_reserved(n))
            .map(|n| {
                let source = format!("{s}/{n}");
                (n, source)
            })
            .collect())
    }
    fn shown(&self, s: &String) -> String {
        s.clone()
    }
    fn path(&self, s: &String) -> PathBuf {
        PathBuf::from(s)
    }
}

/// Why an entry is not in the manifest.
enum Left {
    Skip(Skipped),
    Excluded,
    Device,
}

fn skipped(rel: &str, why: Why) -> Skipped {
    Skipped {
        path: names::shown(rel).into_owned(),
        reason: why.text,
        by_rule: why.rule,
    }
}

/// `source`, named `rel` in the manifest, as `rules` take it.
fn examine<P: Place>(
    place: &P,
    rules: &ScanRules,
    rel: &str,
    source: &P::Source,
) -> Result<Found, Left> {
    let fault = |text: String| Left::Skip(skipped(rel, Why::fault(text)));
    let (m, held) = place
        .look(source)
        .map_err(|e| fault(format!("vanished or unreadable while scanned: {e}")))?;
    if !rules.filter.admits(rel, m.is_dir()) {
        return Err(Left::Excluded);
    }
    let t = m.file_type();
    if (t.is_block_device() || t.is_char_device()) && !rules.devices {
        return Err(Left::Device);
    }
    let mut e = entry_from(rel, &m, || place.read_link(source))
        .map_err(|why| Left::Skip(skipped(rel, why)))?;
    (e.owner.uid, e.owner.gid) = (m.uid(), m.gid());
    let file = e.kind == EntryKind::File;
    let id = FileId {
        dev: m.dev(),
        ino: m.ino(),
    };
    let linked = (rules.hard_links && file && m.nlink() > 1).then_some(id);
    if file && e.data < e.size {
        // Holes, or fewer blocks than the size: what its frames carry.
        if let Ok(f) = place.open_read(source) {
            e.data = super::extents::data_of(&f, e.size);
        }
    }
    let read = |keep: &dyn Fn(&str) -> bool, max| place.xattrs(source, &held, keep, max);
    add_xattrs(&mut e, read, rules).map_err(|why| fault(why.to_string()))?;
    Ok(Found {
        entry: e,
        source: place.path(source),
        id: file.then_some(id),
        ctime: file.then(|| (m.ctime(), m.ctime_nsec() as u32)),
        linked,
        below: None,
    })
}

enum Job<S> {
    /// List directory `source` (`rel` in the manifest; its batches `dir`).
    List { dir: u64, rel: String, source: S },
    /// Stat these names (manifest path, source) of directory `dir`.
    Stat {
        dir: u64,
        seq: u32,
        names: Vec<(String, S)>,
    },
}

struct Queue<S> {
    jobs: Vec<Job<S>>,
    /// Jobs queued or running: the walk ends at none.
    pending: usize,
    stop: bool,
}

/// What goes out, under one lock.
struct Out<'e> {
    emit: &'e mut (dyn FnMut(Batch) -> ControlFlow<()> + Send),
    users: HashMap<u32, String>,
    groups: HashMap<u32, String>,
    first_names: Option<HashMap<FileId, String>>,
    /// `emit` broke: nothing more goes out.
    broke: bool,
}

/// A user or group name that fits the wire, else none (the number is sent).
fn known_name(name: Option<String>) -> String {
    name.filter(|n| n.len() <= crate::protocol::manifest::OWNER_NAME_MAX)
        .unwrap_or_default()
}

impl Out<'_> {
    /// The owner's names of `e`, met once each.
    fn dress(&mut self, e: &mut Entry) {
        let (uid, gid) = (e.owner.uid, e.owner.gid);
        let user = self
            .users
            .entry(uid)
            .or_insert_with(|| known_name(crate::datapath::ids::user_name(uid)));
        e.owner.user.clone_from(user);
        let group = self
            .groups
            .entry(gid)
            .or_insert_with(|| known_name(crate::datapath::ids::group_name(gid)));
        e.owner.group.clone_from(group);
    }
}

struct Shared<'a, 'e, P: Place> {
    place: &'a P,
    rules: &'a ScanRules,
    queue: Mutex<Queue<P::Source>>,
    ready: Condvar,
    out: Mutex<Out<'e>>,
    next_dir: AtomicU64,
}

/// Walk `starts` (start `i`'s batches are `dir` `i`) in `place` as
/// `rules` say, handing each batch to `emit` as it is made; `emit`
/// breaking stops the walk (batches being made are dropped).
pub fn walk<P: Place>(
    place: &P,
    rules: &ScanRules,
    starts: Vec<Start<P::Source>>,
    how: Walk,
    emit: &mut (dyn FnMut(Batch) -> ControlFlow<()> + Send),
) {
    let jobs: Vec<Job<P::Source>> = starts
        .into_iter()
        .enumerate()
        .rev()
        .map(|(i, s)| match s {
            Start::Itself { rel, source } => Job::Stat {
                dir: i as u64,
                seq: 0,
                names: vec![(rel, source)],
            },
            Start::Contents(source) => Job::List {
                dir: i as u64,
                rel: String::new(),
                source,
            },
        })
        .collect();
    let shared = Shared {
        place,
        rules,
        next_dir: AtomicU64::new(jobs.len() as u64),
        queue: Mutex::new(Queue {
            pending: jobs.len(),
            jobs,
            stop: false,
        }),
        ready: Condvar::new(),
        out: Mutex::new(Out {
            emit,
            users: HashMap::new(),
            groups: HashMap::new(),
            first_names: (how.name_links && rules.hard_links).then(HashMap::new),
            broke: false,
        }),
    };
    if how.threads <= 1 {
        return shared.work();
    }
    std::thread::scope(|s| {
        for _ in 0..how.threads {
            s.spawn(|| shared.work());
        }
    });
}

impl<P: Place> Shared<'_, '_, P> {
    fn work(&self) {
        // A thread that panics stops the others: none waits for its jobs.
        let _stop = StopOnPanic(self);
        while let Some(job) = self.take() {
            match job {
                Job::List { dir, rel, source } => self.list(dir, &rel, &source),
                Job::Stat { dir, seq, names } => self.stat(dir, seq, names),
            }
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.pending -= 1;
            if q.pending == 0 {
                self.ready.notify_all();
            }
        }
    }

    /// The next job, or none when the walk is over.
    fn take(&self) -> Option<Job<P::Source>> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if q.stop {
                return None;
            }
            if let Some(job) = q.jobs.pop() {
                return Some(job);
            }
            if q.pending == 0 {
                return None;
            }
            q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Queue `jobs`, the last taken first.
    fn queue(&self, jobs: Vec<Job<P::Source>>) {
        if jobs.is_empty() {
            return;
        }
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.pending += jobs.len();
        q.jobs.extend(jobs);
        self.ready.notify_all();
    }

    fn list(&self, dir: u64, rel: &str, source: &P::Source) {
        let children = match self.place.list(source) {
            Ok(c) => c,
            Err(e) => {
                // The top of a DIR/ source is named as given.
                let named = match rel {
                    "" => self.place.shown(source),
                    _ => rel.to_string(),
                };
                let why = Why::fault(format!("its contents cannot be listed: {e}"));
                let batch = Batch {
                    dir,
                    skipped: vec![(0, skipped(&named, why))],
                    ..Default::default()
                };
                return self.emit(batch);
            }
        };
        let mut jobs = Vec::with_capacity(children.len().div_ceil(CHUNK_ENTRIES));
        let mut children = children.into_iter().peekable();
        while children.peek().is_some() {
            let names = children
                .by_ref()
                .take(CHUNK_ENTRIES)
                .map(|(name, s)| (beneath(rel, &name), s))
                .collect();
            let seq = jobs.len() as u32;
            jobs.push(Job::Stat { dir, seq, names });
        }
        jobs.reverse();
        self.queue(jobs);
    }

    fn stat(&self, dir: u64, seq: u32, names: Vec<(String, P::Source)>) {
        let mut batch = Batch {
            dir,
            seq,
            ..Default::default()
        };
        let mut lists = Vec::new();
        for (rel, source) in names {
            match examine(self.place, self.rules, &rel, &source) {
                Ok(mut f) => {
                    if f.entry.kind == EntryKind::Dir {
                        let below = self.next_dir.fetch_add(1, Ordering::Relaxed);
                        f.below = Some(below);
                        lists.push(Job::List {
                            dir: below,
                            rel,
                            source,
                        });
                    }
                    batch.found.push(f);
                }
                Err(Left::Skip(s)) => batch.skipped.push((batch.found.len(), s)),
                Err(Left::Excluded) => batch.excluded += 1,
                Err(Left::Device) => batch.devices_left += 1,
            }
        }
        self.emit(batch);
        lists.reverse();
        self.queue(lists);
    }

    /// Hand `batch` out, its owners named and (streaming `-H`) its first
    /// names decided, in the order batches go out.
    fn emit(&self, mut batch: Batch) {
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        if out.broke {
            return;
        }
        for f in &mut batch.found {
            out.dress(&mut f.entry);
            if let Some(first) = out.first_names.as_mut() {
                name_link(first, f);
            }
        }
        if (out.emit)(batch).is_break() {
            out.broke = true;
            drop(out);
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.stop = true;
            self.ready.notify_all();
        }
    }
}

/// Stops a walk when dropped by a panicking thread.
struct StopOnPanic<'s, 'a, 'e, P: Place>(&'s Shared<'a, 'e, P>);

impl<P: Place> Drop for StopOnPanic<'_, '_, '_, P> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut q = self.0.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.stop = true;
            self.0.ready.notify_all();
        }
    }
}

/// `name` in directory `rel` of the manifest (`rel` empty: at its top).
pub(super) fn beneath(rel: &str, name: &str) -> String {
    match rel {
        "" => name.to_string(),
        _ => format!("{rel}/{name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::plan::{filter, tree};
    use std::path::Path;

    /// Local paths, but a directory named `locked` cannot be listed and
    /// anything named `gone` vanished before it was stat'ed.
    struct Faulty;

    impl Place for Faulty {
        type Source = PathBuf;
        type Held = ();
        fn look(&self, s: &PathBuf) -> std::io::Result<(std::fs::Metadata, ())> {
            match s.ends_with("gone") {
                true => Err(std::io::Error::from_raw_os_error(libc::ENOENT)),
                false => Local.look(s),
            }
        }
        fn read_link(&self, s: &PathBuf) -> std::io::Result<String> {
            Local.read_link(s)
        }
        fn open_read(&self, s: &PathBuf) -> std::io::Result<std::fs::File> {
            Local.open_read(s)
        }
        fn xattrs(
            &self,
            s: &PathBuf,
            _: &(),
            keep: &dyn Fn(&str) -> bool,
            max: usize,
        ) -> std::io::Result<Vec<(String, Vec<u8>)>> {
            Local.xattrs(s, &(), keep, max)
        }
        fn list(&self, s: &PathBuf) -> std::io::Result<Vec<(String, PathBuf)>> {
            match s.ends_with("locked") {
                true => Err(std::io::Error::from_raw_os_error(libc::EACCES)),
                false => Local.list(s),
            }
        }
        fn shown(&self, s: &PathBuf) -> String {
            Local.shown(s)
        }
        fn path(&self, s: &PathBuf) -> PathBuf {
            Local.path(s)
        }
    }

    /// A tree of `dirs` directories of `files` files each, nested three
    /// deep, with names that sort differently as whole paths (`a.x` comes
    /// before `a/...` as a path, after `a` as a name).
    fn make_tree(top: &Path, dirs: usize, files: usize) {
        for d in 0..dirs {
            let dir = top.join(format!("d{}/s{}/t{d}", d % 3, d % 5));
            std::fs::create_dir_all(&dir).unwrap();
            for f in 0..files {
                std::fs::write(dir.join(format!("f{f}")), [d as u8, f as u8]).unwrap();
            }
            std::fs::write(top.join(format!("d{}.x", d % 3)), b"x").unwrap();
        }
    }

    /// Every batch in the order it went out.
    fn stream<P: Place>(place: &P, rules: &ScanRules, start: Start<P::Source>) -> Vec<Batch> {
        let mut out = Vec::new();
        let how = Walk {
            threads: 4,
            name_links: true,
        };
        walk(place, rules, vec![start], how, &mut |b| {
            out.push(b);
            ControlFlow::Continue(())
        });
        out
    }

    fn paths(t: &tree::Tree) -> Vec<&str> {
        t.entries.iter().map(|e| e.path.as_str()).collect()
    }

    #[test]
    fn a_directory_goes_out_before_anything_beneath_it_and_every_entry_once() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let top = dir.path().join("top");
        make_tree(&top, 40, 150);
        let start = Start::Itself {
            rel: "top".to_string(),
            source: top.clone(),
        };
        let batches = stream(&Local, &ScanRules::default(), start);
        let mut out: Vec<String> = Vec::new();
        for b in &batches {
            assert!(b.found.len() <= CHUNK_ENTRIES);
            for f in &b.found {
                let parent = f.entry.path.rsplit_once('/').map(|(p, _)| p);
                if let Some(p) = parent {
                    assert!(out.iter().any(|o| o == p), "{} before {p}", f.entry.path);
                }
                out.push(f.entry.path.clone());
            }
        }
        let tree = tree::scan(&[top], &ScanRules::default()).unwrap();
        let mut whole: Vec<String> = paths(&tree).iter().map(|p| p.to_string()).collect();
        // 1 + 3 + 3*5 (at most) + 40 directories, 40*150 + 3 files.
        assert_eq!(tree.file_count(), 40 * 150 + 3);
        whole.sort();
        out.sort();
        assert_eq!(out, whole);
    }

    /// The tree's order is depth first, names sorted: what one thread
    /// reading it alone gives, every time.
    #[test]
    fn a_whole_tree_comes_back_in_one_order_however_many_threads_read_it() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let top = dir.path().join("top");
        make_tree(&top, 30, 100);
        let first = tree::scan(std::slice::from_ref(&top), &ScanRules::default()).unwrap();
        let p = paths(&first);
        let d0 = p.iter().position(|p| *p == "top/d0").unwrap();
        let d0x = p.iter().position(|p| *p == "top/d0.x").unwrap();
        // Everything beneath d0 between it and d0.x.
        assert!(p[d0 + 1..d0x].iter().all(|p| p.starts_with("top/d0/")));
        assert_eq!(p[d0 + 1..d0x].len(), 5 + 10 + 10 * 100);
        // Depth first, names sorted, by a walk of our own.
        fn dfs(at: &Path, rel: &str, out: &mut Vec<String>) {
            out.push(rel.to_string());
            if !at.is_dir() {
                return;
            }
            let mut names: Vec<_> = std::fs::read_dir(at)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            names.sort();
            for n in names {
                let name = n.to_str().unwrap();
                dfs(&at.join(name), &format!("{rel}/{name}"), out);
            }
        }
        let mut want = Vec::new();
        dfs(&top, "top", &mut want);
        assert_eq!(p, want);
        for _ in 0..5 {
            let again = tree::scan(std::slice::from_ref(&top), &ScanRules::default()).unwrap();
            assert_eq!(first.entries, again.entries);
            assert_eq!(first.sources, again.sources);
            assert_eq!(first.ids, again.ids);
        }
    }

    /// Under `-H` a file's first name goes out before its further names,
    /// streamed or gathered; gathered, the first is the first in the
    /// tree's order.
    #[test]
    fn a_files_first_name_comes_before_its_further_names() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let top = dir.path().join("top");
        make_tree(&top, 12, 70);
        for d in 0..12 {
            let at = top.join(format!("d{}/s{}/t{d}", d % 3, d % 5));
            std::fs::hard_link(top.join("d0/s0/t0/f1"), at.join("link")).unwrap();
        }
        std::fs::hard_link(top.join("d0/s0/t0/f1"), top.join("a-first")).unwrap();
        let rules = ScanRules {
            hard_links: true,
            ..Default::default()
        };
        let start = Start::Itself {
            rel: "top".to_string(),
            source: top.clone(),
        };
        let mut out: Vec<&Found> = Vec::new();
        let batches = stream(&Local, &rules, start);
        for f in batches.iter().flat_map(|b| &b.found) {
            if f.entry.kind == EntryKind::HardLink {
                let first = f.entry.link.as_deref().unwrap();
                let met = out.iter().find(|o| o.entry.path == first).unwrap();
                assert_eq!(met.entry.kind, EntryKind::File);
                assert!(f.id.is_none() && f.ctime.is_none() && f.entry.size == 0);
            }
            out.push(f);
        }
        let links = out
            .iter()
            .filter(|f| f.entry.kind == EntryKind::HardLink)
            .count();
        assert_eq!(links, 13);
        let tree = tree::scan(&[top], &rules).unwrap();
        assert_eq!(tree.hard_links(), 13);
        let first = tree
            .entries
            .iter()
            .find(|e| e.path == "top/a-first")
            .unwrap();
        assert_eq!((first.kind, first.size), (EntryKind::File, 2));
        let f1 = tree
            .entries
            .iter()
            .find(|e| e.path == "top/d0/s0/t0/f1")
            .unwrap();
        assert_eq!(f1.link.as_deref(), Some("top/a-first"));
    }

    /// A directory that cannot be listed is sent (empty) and named once;
    /// an entry that vanished is named; both where the tree's order puts
    /// them, among excluded entries counted.
    #[test]
    fn faults_and_exclusions_are_told_in_the_trees_order() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let top = dir.path().join("top");
        for d in ["a/locked/x", "b/gone", "c"] {
            std::fs::create_dir_all(top.join(d)).unwrap();
        }
        for f in [
            "a/1",
            "a/locked/2",
            "b/gone/3",
            "b/4",
            "c/5.tmp",
            "c/6",
            "a/gone",
        ] {
            std::fs::write(top.join(f), b"f").unwrap();
        }
        let mut filter = filter::Filter::default();
        filter.push(filter::Verdict::Exclude, "*.tmp").unwrap();
        let rules = ScanRules {
            filter,
            ..Default::default()
        };
        let start = Start::Contents(top.clone());
        let (tree, first) = tree::gather(&Faulty, &rules, vec![start], Walk::default());
        assert_eq!(first, [0]);
        assert_eq!(
            paths(&tree),
            ["a", "a/1", "a/locked", "b", "b/4", "c", "c/6"]
        );
        assert_eq!(tree.excluded, 1);
        let skipped: Vec<(&str, &str)> = tree
            .skipped
            .iter()
            .map(|s| (s.path.as_str(), s.reason.as_str()))
            .collect();
        let gone = "vanished or unreadable while scanned: No such file or directory (os error 2)";
        let locked = "its contents cannot be listed: Permission denied (os error 13)";
        assert_eq!(
            skipped,
            [("a/gone", gone), ("a/locked", locked), ("b/gone", gone)]
        );
        assert!(tree.skipped.iter().all(|s| !s.by_rule));
    }

    /// A batch taken badly (a panic) ends the walk with that panic, every
    /// thread stopped, none left waiting; a batch refused ends it quietly.
    #[test]
    fn a_walk_ends_when_its_batches_are_refused_or_panic() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let top = dir.path().join("top");
        make_tree(&top, 20, 100);
        let how = Walk {
            threads: 4,
            name_links: false,
        };
        let start = || Start::Contents(top.clone());
        let walked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            walk(
                &Local,
                &ScanRules::default(),
                vec![start()],
                how,
                &mut |_| panic!("taken badly"),
            )
        }));
        assert!(walked.is_err());
        let mut taken = 0;
        walk(
            &Local,
            &ScanRules::default(),
            vec![start()],
            how,
            &mut |_| {
                taken += 1;
                ControlFlow::Break(())
            },
        );
        assert_eq!(taken, 1);
    }
}
