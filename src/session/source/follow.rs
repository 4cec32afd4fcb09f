//! `send --follow`: files still being written go while they grow. The
//! scan marks each file some process holds open for writing, or that
//! changed within `--follow-idle`, as growing; its manifest size is the
//! whole blocks it held then. While the lanes send, the follower (this
//! module, on a thread of its own) looks at every growing file whenever
//! inotify says one changed (and every [`POLL`] besides, for filesystems
//! without it): new whole blocks become pieces of the work, and a file
//! that nobody holds open for writing and that stayed idle for
//! `--follow-idle` ends: its last, shorter block is queued, the receiver
//! told its size and mtime (`FileEnd`), and its digest follows as any
//! file's. A file that shrinks, or is replaced or removed under its name,
//! ends the session with an error naming it.
//!
//! The directories sent are followed too: a file or directory that
//! appears in one is added to the session (`Added`, numbered after the
//! manifest), its data sent once the receiver has it ready (`Admitted`),
//! until `--follow-until` (a time, a duration, a marker file), or without
//! it for as long as some file is followed.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use crate::datapath::beneath::FileId;
use crate::datapath::growth::{held_for_writing, Inotify, News};
use crate::protocol::control::{ErrorCode, Message, MANIFEST_PART_ENTRIES_MAX};
use crate::protocol::manifest::{Entry, EntryKind};

use super::confirm::{Confirmer, Ended, Verdict};
use super::ledger::Acks;
use super::sending::Sources;
use super::work::{End, Work};
use crate::session::link::conn::{send_msg, Control};
use crate::session::link::refused::Refused;
use crate::session::plan::tree::{ScanRules, Tree};
use crate::session::SessionError;

/// How often the follower looks without being woken.
pub(crate) const POLL: Duration = Duration::from_millis(100);
/// How often, at most, it asks `/proc` who writes the idle files.
const WRITERS_EVERY: Duration = Duration::from_millis(250);
/// How often it lists every followed directory, woken or not.
const DIRS_EVERY: Duration = Duration::from_secs(1);
/// How often the follower tells the receiver it is there.
const BEAT_EVERY: Duration = Duration::from_secs(1);
/// Most entries a follow adds to its session (more are reported
/// skipped: a later run sends them).
pub(crate) const ADDED_MAX: usize = 65_536;

/// What the coordinator reads of a follow while it runs.
#[derive(Debug, Default)]
pub(crate) struct Gauge {
    /// Bytes the session has to send so far (whole blocks of growing
    /// files, whole files that ended): grows as files do.
    pub(crate) total: AtomicU64,
    /// Files still grow.
    pub(crate) active: AtomicBool,
}

/// When a follow stops adding what appears in its directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FollowUntil {
    /// While some file is still followed.
    Files,
    /// Until this time.
    At(SystemTime),
    /// Until this file exists.
    Marker(PathBuf),
}

pub(crate) use super::window::{Added, AddedEntry};

/// How a push follows: `--follow-idle`, `--follow-until`, what the
/// coordinator reads, the entries added, and the scan's rules for them.
pub(crate) struct FollowCtx<'a> {
    pub(crate) idle: Duration,
    pub(crate) until: &'a FollowUntil,
    pub(crate) gauge: &'a Gauge,
    pub(crate) added: &'a Added,
    pub(crate) rules: &'a ScanRules,
}

/// Mark the files of `tree` still being written as growing (see the
/// module): their size becomes the whole `block`s they hold. Returns how
/// many.
pub(crate) fn mark_growing(tree: &mut Tree, block: u64, idle: Duration) -> usize {
    let ids: HashSet<FileId> = tree.ids.iter().flatten().copied().collect();
    let writing = held_for_writing(&ids);
    let now = SystemTime::now();
    let mut n = 0;
    for (e, id) in tree.entries.iter_mut().zip(&tree.ids) {
        if e.kind != EntryKind::File {
            continue;
        }
        let mtime = crate::session::plan::tree::mtime_at(e.mtime_s, e.mtime_ns);
        let recent = now.duration_since(mtime).map_or(true, |d| d < idle);
        if recent || id.is_some_and(|id| writing.contains(&id)) {
            grow_from_whole_blocks(e, block);
            n += 1;
        }
    }
    n
}

/// `e` is a growing file of the whole `block`s it holds.
fn grow_from_whole_blocks(e: &mut Entry, block: u64) {
    e.growing = true;
    e.size = e.size / block * block;
    e.data = e.data.min(e.size);
}

/// The inotify instance the follower is woken by, unless there is none
/// (or `URMOVE_FOLLOW_POLL` is set, as on filesystems where inotify sees
/// no remote writes: NFS, Lustre): it polls then.
fn watcher() -> Option<Inotify> {
    if std::env::var_os("URMOVE_FOLLOW_POLL").is_some() {
        return None;
    }
    Inotify::new().ok()
}

/// One growing file, as the follower knows it.
struct Followed {
    entry: usize,
    /// Where it is read, and the file opened there.
    path: PathBuf,
    file: File,
    id: FileId,
    /// Bytes queued as pieces (whole blocks, then the rest at the end).
    queued: u64,
    /// Its size and when that last changed.
    size: u64,
    changed: Instant,
}

/// A directory followed for what appears in it.
struct Dir {
    entry: usize,
    source: PathBuf,
    rel: String,
    watch: Option<i32>,
    /// Its mtime as the manifest (or `Added`) gave it.
    mtime: (i64, u32),
}

/// The follower's state: the files still growing, the directories
/// followed, and how it is woken.
pub(crate) struct Follower<'a> {
    work: &'a Work,
    ctx: &'a FollowCtx<'a>,
    acks: Option<&'a Acks>,
    ctl: Control,
    block: u64,
    files: Vec<Followed>,
    /// Added files waiting for the receiver to have them ready.
    pending: Vec<usize>,
    /// Files that ended, waiting to be read through: each checked, once it
    /// is, against what the copy read (by the `confirmer`).
    ending: HashMap<usize, (File, End)>,
    confirmer: Confirmer,
    dirs: Vec<Dir>,
    /// Every source path of the session (the manifest's and those added).
    known: HashSet<PathBuf>,
    /// No more entries are added (`--follow-until` passed).
    closed: bool,
    notify: Option<Inotify>,
    writers_asked: Option<Instant>,
    dirs_listed: Instant,
    beat: Instant,
    /// What could not be added or sent as followed: (entry, or
    /// `UNLISTED` with its path; why).
    pub(crate) skipped: Vec<Refused>,
}

impl<'a> Follower<'a> {
    /// Follow the growing files and the directories of the push's tree
    /// (`from`, whose follow is `ctx`), queueing pieces of `block`-byte
    /// blocks on `work` and telling the receiver on its control connection.
    pub(crate) fn new(
        from: &Sources<'a>,
        ctx: &'a FollowCtx<'a>,
        work: &'a Work,
        block: u64,
    ) -> Result<Self, SessionError> {
        let (tree, ctl, acks) = (from.tree, from.announce_on, from.acked);
        let mut f = Follower {
            work,
            ctx,
            acks,
            ctl: ctl.try_clone()?,
            block,
            files: Vec::new(),
            pending: Vec::new(),
            ending: HashMap::new(),
            confirmer: Confirmer::new(),
            dirs: Vec::new(),
            known: tree.sources.iter().cloned().collect(),
            closed: false,
            notify: watcher(),
            writers_asked: None,
            dirs_listed: Instant::now(),
            beat: Instant::now(),
            skipped: Vec::new(),
        };
        for (i, e) in tree.entries.iter().enumerate() {
            match e.kind {
                EntryKind::File if e.growing => {
                    let path = &tree.sources[i];
                    let file = File::open(path)
                        .map_err(|e| SessionError::io(path.display().to_string(), e))?;
                    f.follow_file(i, path, file, e.size)?;
                }
                EntryKind::Dir => f.follow_dir(i, &tree.sources[i], e),
                _ => {}
            }
        }
        ctx.gauge.active.store(true, Ordering::Release);
        Ok(f)
    }

    /// Follow growing file `entry` at `path`, `queued` bytes of it queued.
    fn follow_file(
        &mut self,
        entry: usize,
        path: &Path,
        file: File,
        queued: u64,
    ) -> Result<(), SessionError> {
        let id = FileId::of(&file).map_err(|e| SessionError::io("fstat", e))?;
        if let Some(n) = &self.notify {
            // A filesystem without inotify is polled.
            let _ = n.watch(path, false);
        }
        self.files.push(Followed {
            entry,
            path: path.to_path_buf(),
            file,
            id,
            queued,
            size: queued,
            changed: Instant::now(),
        });
        Ok(())
    }

    fn follow_dir(&mut self, entry: usize, source: &Path, e: &Entry) {
        let watch = self
            .notify
            .as_ref()
            .and_then(|n| n.watch(source, true).ok());
        self.dirs.push(Dir {
            entry,
            source: source.to_path_buf(),
            rel: e.path.clone(),
            watch,
            mtime: (e.mtime_s, e.mtime_ns),
        });
    }

    /// Nothing more is added: the directories whose mtime moved meanwhile
    /// (files appeared) get it at the far end, as a later scan would.
    fn end_adding(&mut self) -> Result<(), SessionError> {
        let moved: Vec<(u32, i64, u32)> = self
            .dirs
            .iter()
            .filter_map(|d| {
                let m = std::fs::symlink_metadata(&d.source).ok()?;
                let now = (m.mtime(), m.mtime_nsec() as u32);
                (now != d.mtime).then_some((d.entry as u32, now.0, now.1))
            })
            .collect();
        use crate::protocol::control::LIST_PART_ITEMS_MAX;
        for part in moved.chunks(LIST_PART_ITEMS_MAX as usize) {
            send_msg(&mut self.ctl, &Message::DirTimes(part.to_vec()))?;
        }
        send_msg(&mut self.ctl, &Message::AddedEnd)
    }

    /// Follow until every file ended and nothing more is added, the
    /// session stops or a lane failed.
    pub(crate) fn run(&mut self, stop: &AtomicBool) -> Result<(), SessionError> {
        let r = self.follow(stop).and_then(|()| self.end_adding());
        // Whatever happened, lanes wait for no more pieces.
        self.ctx.gauge.active.store(false, Ordering::Release);
        self.work.stop_following();
        if r.is_err() {
            self.work.failed_flag().store(true, Ordering::Release);
        }
        r
    }

    fn follow(&mut self, stop: &AtomicBool) -> Result<(), SessionError> {
        loop {
            if stop.load(Ordering::Relaxed) || self.work.failed() {
                return Ok(());
            }
            let news = self.wait();
            if let Some(a) = self.acks {
                super::window::retire(a, self.work, self.ctx.added);
            }
            self.look()?;
            self.admit_pending()?;
            if self.adding() {
                self.list_dirs(&news)?;
            }
            self.end_idle(news.any())?;
            for (entry, digest) in self.work.take_finished() {
                let (file, end) = self.ending.remove(&entry).expect("an ended file");
                self.confirmer.push(Ended {
                    entry,
                    file,
                    end,
                    digest,
                });
            }
            for (i, verdict) in self.confirmer.done() {
                self.confirmed(i, verdict)?;
            }
            self.beat()?;
            let quiet = self.files.is_empty() && self.pending.is_empty() && self.ending.is_empty();
            let quiet = quiet && self.confirmer.idle();
            if quiet && !self.adding() {
                return Ok(());
            }
        }
    }

    /// Whether what appears is still added: until `--follow-until`, or
    /// (without it) while some file is followed. Once not, never again.
    fn adding(&mut self) -> bool {
        let open = match self.ctx.until {
            FollowUntil::Files => !self.files.is_empty() || !self.pending.is_empty(),
            FollowUntil::At(t) => SystemTime::now() < *t,
            FollowUntil::Marker(p) => std::fs::symlink_metadata(p).is_err(),
        };
        self.closed |= !open;
        !self.closed
    }

    /// A heartbeat on the control connection once a second: the receiver
    /// waits on idle files without taking the sender for gone.
    fn beat(&mut self) -> Result<(), SessionError> {
        if self.beat.elapsed() >= BEAT_EVERY {
            self.beat = Instant::now();
            send_msg(
                &mut self.ctl,
                &Message::Alive {
                    streams: Vec::new(),
                },
            )?;
        }
        Ok(())
    }

    /// Sleep until inotify says something changed, or [`POLL`].
    fn wait(&self) -> News {
        match &self.notify {
            Some(n) => n.wait(POLL),
            None => {
                std::thread::sleep(POLL);
                News::default()
            }
        }
    }

    /// Each file's size now: whole new blocks queued; a file that shrank
    /// or is no longer under its name is an error.
    fn look(&mut self) -> Result<(), SessionError> {
        self.work.retry_deferred();
        for k in 0..self.files.len() {
            let size = self.check(k)?;
            let f = &mut self.files[k];
            if size != f.size {
                (f.size, f.changed) = (size, Instant::now());
            }
            let whole = size / self.block * self.block;
            if whole > f.queued {
                self.work.grown(f.entry, f.queued, whole);
                let more = whole - f.queued;
                self.ctx.gauge.total.fetch_add(more, Ordering::AcqRel);
                f.queued = whole;
            }
        }
        Ok(())
    }

    /// File `k`'s size, when it is still the file followed and has not
    /// shrunk.
    fn check(&self, k: usize) -> Result<u64, SessionError> {
        let f = &self.files[k];
        let path = &f.path;
        let fail = |why: String| {
            SessionError::local(
                ErrorCode::Io,
                format!("{}: {why} while it was followed", path.display()),
            )
        };
        let m = f.file.metadata().map_err(|e| fail(format!("stat: {e}")))?;
        let named = std::fs::symlink_metadata(path)
            .is_ok_and(|n| (n.dev(), n.ino()) == (f.id.dev, f.id.ino));
        if !named || m.nlink() == 0 {
            return Err(fail("replaced or removed".into()));
        }
        if m.len() < f.size.max(f.queued) {
            return Err(fail(format!(
                "truncated (from {} to {} bytes)",
                f.size.max(f.queued),
                m.len()
            )));
        }
        Ok(m.len())
    }

    /// End the files idle for `--follow-idle` that nobody writes (asking
    /// `/proc` at most every [`WRITERS_EVERY`], or at once when inotify
    /// just woke the follower: a writer may have closed).
    fn end_idle(&mut self, woken: bool) -> Result<(), SessionError> {
        let idle: HashSet<FileId> = self
            .files
            .iter()
            .filter(|f| f.changed.elapsed() >= self.ctx.idle)
            .map(|f| f.id)
            .collect();
        let due = self
            .writers_asked
            .is_none_or(|t| t.elapsed() >= WRITERS_EVERY);
        if idle.is_empty() || !(due || woken) {
            return Ok(());
        }
        self.writers_asked = Some(Instant::now());
        let writing = held_for_writing(&idle);
        let mut k = 0;
        while k < self.files.len() {
            let f = &self.files[k];
            if idle.contains(&f.id) && !writing.contains(&f.id) {
                let f = self.files.swap_remove(k);
                self.end(f)?;
            } else {
                k += 1;
            }
        }
        Ok(())
    }

    /// File `f` ends where it stands: its last bytes queued, the receiver
    /// told its end, and its digest when every piece was read already.
    fn end(&mut self, f: Followed) -> Result<(), SessionError> {
        let m = f.file.metadata().map_err(|e| SessionError::io("stat", e))?;
        let end = End {
            size: m.len(),
            mtime_s: m.mtime(),
            mtime_ns: m.mtime_nsec() as u32,
        };
        if end.size != f.size {
            // It grew since the last look: look again next time.
            self.files.push(Followed {
                size: end.size,
                changed: Instant::now(),
                ..f
            });
            return Ok(());
        }
        self.work.set_end(f.entry, end);
        if end.size > f.queued {
            self.work.grown(f.entry, f.queued, end.size);
            let more = end.size - f.queued;
            self.ctx.gauge.total.fetch_add(more, Ordering::AcqRel);
        }
        let i = f.entry as u32;
        let m = Message::FileEnd {
            file_index: i,
            size: end.size,
            mtime_s: end.mtime_s,
            mtime_ns: end.mtime_ns,
        };
        send_msg(&mut self.ctl, &m)?;
        match self.work.piece_done(f.entry) {
            // Every piece was read before: the digest is this side's to say.
            Some(digest) => {
                self.confirmer.push(Ended {
                    entry: f.entry,
                    file: f.file,
                    end,
                    digest,
                });
                Ok(())
            }
            None => {
                self.ending.insert(f.entry, (f.file, end));
                Ok(())
            }
        }
    }

    /// Growing file `i` was read through as it grew and, read once more as
    /// it ended, summed the same ([`Confirmer`]): its digest is announced.
    /// Otherwise a writer changed bytes already sent (rewrote a header,
    /// wrote out of order into what was read) and the receiver drops it,
    /// never calling it verified.
    fn confirmed(&mut self, i: usize, verdict: Verdict) -> Result<(), SessionError> {
        match verdict {
            Ok(digest) => {
                if let Some(a) = self.acks {
                    a.ours(i as u32, digest);
                }
                let m = Message::SourceDigests(vec![(i as u32, digest)]);
                send_msg(&mut self.ctl, &m)
            }
            Err(why) => self.drop_file(i, why.to_string()),
        }
    }
}

impl Follower<'_> {
    /// The directories to list now: those inotify named, or all of them
    /// every [`DIRS_EVERY`] (and when its queue overflowed, or without
    /// inotify).
    fn dirs_to_list(&mut self, news: &News) -> Vec<usize> {
        let all =
            news.overflowed || self.notify.is_none() || self.dirs_listed.elapsed() >= DIRS_EVERY;
        if all {
            self.dirs_listed = Instant::now();
            return (0..self.dirs.len()).collect();
        }
        let by_watch: HashMap<i32, usize> = self
            .dirs
            .iter()
            .enumerate()
            .filter_map(|(k, d)| d.watch.map(|w| (w, k)))
            .collect();
        news.watches
            .iter()
            .filter_map(|w| by_watch.get(w).copied())
            .collect()
    }

    /// List the directories that may hold something new, and add what
    /// appeared.
    fn list_dirs(&mut self, news: &News) -> Result<(), SessionError> {
        for k in self.dirs_to_list(news) {
            let Ok(children) = std::fs::read_dir(&self.dirs[k].source) else {
                continue;
            };
            let mut new: Vec<PathBuf> = children
                .flatten()
                .map(|c| c.path())
                .filter(|p| !self.known.contains(p))
                .collect();
            new.sort();
            for path in new {
                let name = crate::protocol::names::from_os(path.file_name().unwrap_or_default());
                let rel = format!("{}/{name}", self.dirs[k].rel);
                self.appeared(&rel, &path)?;
            }
        }
        Ok(())
    }

    /// `source` appeared (as `rel`): its entries added to the session.
    fn appeared(&mut self, rel: &str, source: &Path) -> Result<(), SessionError> {
        let found = crate::session::plan::tree::scan_new(self.ctx.rules, rel, source);
        self.skipped.extend(found.skipped_refs());
        let mut batch = Vec::new();
        let first = (self.ctx.added.base + self.ctx.added.len()) as u32;
        for (k, mut e) in found.entries.into_iter().enumerate() {
            let path = found.sources[k].clone();
            self.known.insert(path.clone());
            let Some(i) = self.room(&e) else { continue };
            let file = e.kind != EntryKind::Dir;
            // Its slots: acknowledged once committed (a file).
            self.work.add(i, None);
            if let Some(a) = self.acks {
                a.add(i as u32, file);
            }
            match e.kind {
                EntryKind::Dir => self.follow_dir(i, &path, &e),
                _ => {
                    grow_from_whole_blocks(&mut e, self.block);
                    // Held open until it ends.
                    self.work.hold(i);
                    self.pending.push(i);
                }
            }
            self.ctx.added.push(AddedEntry {
                path: e.path.clone(),
                file,
                source: path,
                id: found.ids[k],
            });
            batch.push(e);
        }
        for (n, part) in batch.chunks(MANIFEST_PART_ENTRIES_MAX as usize).enumerate() {
            let at = first + (n * MANIFEST_PART_ENTRIES_MAX as usize) as u32;
            let m = Message::Added {
                first: at,
                entries: part.to_vec(),
            };
            send_msg(&mut self.ctl, &m)?;
        }
        Ok(())
    }

    /// The index entry `e` takes when it is added, or none (reported
    /// skipped): only files and directories are added, at most
    /// [`ADDED_MAX`] of them.
    fn room(&mut self, e: &Entry) -> Option<usize> {
        let why = match e.kind {
            EntryKind::File | EntryKind::Dir if self.ctx.added.len() < ADDED_MAX => {
                return Some(self.ctx.added.base + self.ctx.added.len())
            }
            EntryKind::File | EntryKind::Dir => {
                format!("appeared while followed, past the {ADDED_MAX} entries a follow adds; send it again")
            }
            _ => "appeared while followed: only files and directories are added".to_string(),
        };
        self.skipped.push(Refused {
            entry: crate::protocol::control::UNLISTED,
            path: e.path.clone(),
            reason: why,
            rule: true,
        });
        None
    }

    /// Added files the receiver has ready are followed from now on.
    fn admit_pending(&mut self) -> Result<(), SessionError> {
        let ready = self.acks.map_or(u32::MAX, |a| a.admitted());
        let (now, later): (Vec<usize>, Vec<usize>) =
            self.pending.iter().partition(|&&i| (i as u32) < ready);
        self.pending = later;
        for i in now {
            let (path, id) = self.ctx.added.source(i).expect("added");
            let opened = File::open(&path).map_err(|e| e.to_string()).and_then(|f| {
                let same = FileId::of(&f).ok() == id;
                same.then_some(f)
                    .ok_or_else(|| "replaced since it appeared".to_string())
            });
            match opened {
                Ok(file) => self.follow_file(i, &path, file, 0)?,
                Err(why) => self.drop_file(i, why)?,
            }
        }
        Ok(())
    }

    /// File `i` cannot be sent as followed: the receiver stops waiting
    /// (its part is kept only with journaled data), the run reports why.
    fn drop_file(&mut self, i: usize, why: String) -> Result<(), SessionError> {
        self.work.drop_file(i);
        self.ctx.added.remember(i as u32);
        if let Some(a) = self.acks {
            a.settle(i as u32);
        }
        let r = Refused::entry(i as u32, crate::session::link::refused::Why::fault(why));
        send_msg(&mut self.ctl, &r.message())?;
        self.skipped.push(r);
        Ok(())
    }
}
