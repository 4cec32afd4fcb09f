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

use std::collections::HashSet;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use crate::datapath::beneath::FileId;
use crate::datapath::growth::{held_for_writing, Inotify};
use crate::protocol::control::{ErrorCode, Message};

use super::conn::{send_msg, Control};
use super::tree::Tree;
use super::work::{End, Work};
use super::SessionError;

/// How often the follower looks without being woken.
pub(crate) const POLL: Duration = Duration::from_millis(100);
/// How often the follower tells the receiver it is there.
const BEAT_EVERY: Duration = Duration::from_secs(1);
/// How often, at most, it asks `/proc` who writes the idle files.
const WRITERS_EVERY: Duration = Duration::from_millis(250);

/// What the coordinator reads of a follow while it runs.
#[derive(Debug, Default)]
pub(crate) struct Gauge {
    /// Bytes the session has to send so far (whole blocks of growing
    /// files, whole files that ended): grows as files do.
    pub(crate) total: AtomicU64,
    /// Files still grow.
    pub(crate) active: AtomicBool,
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
        if e.kind != crate::protocol::manifest::EntryKind::File {
            continue;
        }
        let mtime = super::receive::mtime_at(e.mtime_s, e.mtime_ns);
        let recent = now.duration_since(mtime).map_or(true, |d| d < idle);
        if recent || id.is_some_and(|id| writing.contains(&id)) {
            e.growing = true;
            e.size = e.size / block * block;
            e.data = e.data.min(e.size);
            n += 1;
        }
    }
    n
}

/// One growing file, as the follower knows it.
struct Followed {
    entry: usize,
    file: File,
    id: FileId,
    /// Bytes queued as pieces (whole blocks, then the rest at the end).
    queued: u64,
    /// Its size and when that last changed.
    size: u64,
    changed: Instant,
}

/// The follower's state: the files still growing and how it is woken.
pub(crate) struct Follower<'a> {
    tree: &'a Tree,
    work: &'a Work,
    gauge: &'a Gauge,
    ctl: Control,
    block: u64,
    idle: Duration,
    files: Vec<Followed>,
    notify: Option<Inotify>,
    writers_asked: Option<Instant>,
    beat: Instant,
}

impl<'a> Follower<'a> {
    /// Follow the growing files of `tree`, queueing their pieces on `work`
    /// and telling their ends on `ctl`.
    pub(crate) fn new(
        tree: &'a Tree,
        (work, gauge): (&'a Work, &'a Gauge),
        ctl: &Control,
        (block, idle): (u64, Duration),
    ) -> Result<Self, SessionError> {
        let notify = Inotify::new().ok();
        let mut files = Vec::new();
        for (i, e) in tree.entries.iter().enumerate().filter(|(_, e)| e.growing) {
            let path = &tree.sources[i];
            let file =
                File::open(path).map_err(|e| SessionError::io(path.display().to_string(), e))?;
            let id = FileId::of(&file).map_err(|e| SessionError::io("fstat", e))?;
            if let Some(n) = &notify {
                // A filesystem without inotify is polled.
                let _ = n.watch(path);
            }
            files.push(Followed {
                entry: i,
                file,
                id,
                queued: e.size,
                size: e.size,
                changed: Instant::now(),
            });
        }
        gauge.active.store(!files.is_empty(), Ordering::Release);
        Ok(Follower {
            tree,
            work,
            gauge,
            ctl: ctl.try_clone()?,
            block,
            idle,
            files,
            notify,
            writers_asked: None,
            beat: Instant::now(),
        })
    }

    /// Follow until every file ended, the session stops or a lane failed.
    pub(crate) fn run(&mut self, stop: &AtomicBool) -> Result<(), SessionError> {
        let r = self.follow(stop);
        // Whatever happened, lanes wait for no more pieces.
        self.gauge.active.store(false, Ordering::Release);
        self.work.stop_following();
        if r.is_err() {
            self.work.failed_flag().store(true, Ordering::Release);
        }
        r
    }

    fn follow(&mut self, stop: &AtomicBool) -> Result<(), SessionError> {
        while !self.files.is_empty() {
            if stop.load(Ordering::Relaxed) || self.work.failed() {
                return Ok(());
            }
            let woken = self.wait();
            self.look()?;
            self.end_idle(woken)?;
            self.beat()?;
        }
        Ok(())
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
    fn wait(&self) -> bool {
        match &self.notify {
            Some(n) => n.wait(POLL),
            None => {
                std::thread::sleep(POLL);
                false
            }
        }
    }

    /// Each file's size now: whole new blocks queued; a file that shrank
    /// or is no longer under its name is an error.
    fn look(&mut self) -> Result<(), SessionError> {
        for k in 0..self.files.len() {
            let size = self.check(k)?;
            let f = &mut self.files[k];
            if size != f.size {
                (f.size, f.changed) = (size, Instant::now());
            }
            let whole = size / self.block * self.block;
            if whole > f.queued {
                self.work.grown(f.entry, f.queued, whole);
                self.gauge
                    .total
                    .fetch_add(whole - f.queued, Ordering::AcqRel);
                f.queued = whole;
            }
        }
        Ok(())
    }

    /// File `k`'s size, when it is still the file followed and has not
    /// shrunk.
    fn check(&self, k: usize) -> Result<u64, SessionError> {
        let f = &self.files[k];
        let path = &self.tree.sources[f.entry];
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
            .filter(|f| f.changed.elapsed() >= self.idle)
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
        let end: End = (m.len(), m.mtime(), m.mtime_nsec() as u32);
        if end.0 != f.size {
            // It grew since the last look: look again next time.
            self.files.push(Followed {
                size: end.0,
                changed: Instant::now(),
                ..f
            });
            return Ok(());
        }
        self.work.set_end(f.entry, end);
        if end.0 > f.queued {
            self.work.grown(f.entry, f.queued, end.0);
            self.gauge
                .total
                .fetch_add(end.0 - f.queued, Ordering::AcqRel);
        }
        let i = f.entry as u32;
        let m = Message::FileEnd {
            file_index: i,
            size: end.0,
            mtime_s: end.1,
            mtime_ns: end.2,
        };
        send_msg(&mut self.ctl, &m)?;
        if let Some(digest) = self.work.piece_done(f.entry) {
            // Every piece was read before: the digest is this side's to say.
            super::pusher::check_unchanged(&f.file, end).map_err(|why| {
                let path = self.tree.sources[f.entry].display();
                SessionError::local(ErrorCode::Io, format!("{path}: {why}"))
            })?;
            send_msg(&mut self.ctl, &Message::SourceDigests(vec![(i, digest)]))?;
        }
        Ok(())
    }
}
