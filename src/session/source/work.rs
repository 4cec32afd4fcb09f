//! The sending side's work, shared by its lanes: the files cut into pieces
//! (whole files, or block ranges of a large one) that lanes take in turn,
//! each file's digest summed over its pieces (the digest is a sum, so the
//! pieces may be read anywhere, in any order), and the frames of a lane
//! left without streams, which the lanes still running send again.
//!
//! Lanes touch it once per piece, per file they finish and per lost lane:
//! never per frame.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock};
use std::time::Instant;

use crate::protocol::manifest::EntryKind;

use super::sending::Sent;
use super::window::Window;
use crate::session::link::lanes::Lane;
use crate::session::plan::held::Held;
use crate::session::plan::route::Route;
use crate::session::plan::tree::Tree;

/// A large file is cut into pieces of this many blocks when several lanes
/// share the work, so one huge file keeps every lane busy.
pub(crate) const PIECE_BLOCKS: u64 = 4;

/// Bytes `[start, end)` of entry `entry`: block aligned, `end` at most the
/// file's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    pub(crate) entry: usize,
    pub(crate) start: u64,
    pub(crate) end: u64,
}

#[derive(Debug, Default)]
struct FileShare {
    digest: AtomicU64,
    /// Pieces not yet read through.
    pieces_left: AtomicU32,
    /// Skipped (unreadable or changed): announced once, by whoever saw it.
    dropped: AtomicBool,
}

/// An entry added after the manifest, while it is not settled: its
/// share, and where it ends (a growing file's once it ended).
#[derive(Debug, Default)]
struct AddedShare {
    share: FileShare,
    end: Option<End>,
}

/// Where a file ends: its size and mtime (a growing file's once it ended).
#[derive(Debug, Clone, Copy)]
pub(crate) struct End {
    pub(crate) size: u64,
    pub(crate) mtime_s: i64,
    pub(crate) mtime_ns: u32,
}

/// What lanes hand each other, under one lock.
#[derive(Debug, Default)]
struct Queue {
    /// By class of the receiver's placement (one class without routing).
    pieces: Vec<VecDeque<Piece>>,
    /// Lanes not gone that serve each class: the pieces of a class none
    /// serves any more are anyone's.
    serving: Vec<usize>,
    /// Each lane's next class to take from (classes in turn, so a lane
    /// serving several keeps every device busy).
    cursor: Vec<usize>,
    /// Frames of lanes left without streams: (the stream that carried
    /// them, the frame).
    orphans: Vec<(u32, Sent)>,
    /// Lanes not gone (they can still take pieces and orphans).
    alive: usize,
    /// Lanes still working (not idle).
    busy: usize,
}

/// See the module.
#[derive(Debug)]
pub(crate) struct Work {
    queue: Mutex<Queue>,
    /// Per lane, the classes it serves (its streams' classes).
    serves: Vec<Vec<bool>>,
    /// Each entry's class.
    route: Route,
    /// The manifest's files.
    files: Vec<FileShare>,
    /// The entries added after the manifest (a follow's, a streamed
    /// push's later windows), dropped once settled: one dropped counts as
    /// skipped (nothing more of it is sent).
    added: RwLock<Window<AddedShare>>,
    /// Orphaned frames wait (read on every tick without the lock).
    orphaned: AtomicBool,
    /// A lane ever handed work back (pieces or frames): only then can
    /// pieces appear after the start.
    handed: AtomicBool,
    /// Some lane failed: the others stop.
    failed: AtomicBool,
    /// Payload bytes every lane let out under `--rate-limit`, since `start`.
    paced: AtomicU64,
    /// Where each of the manifest's files ends, or (a growing file) none
    /// until its follower says.
    ends: Mutex<Vec<Option<End>>>,
    /// Each file's ctime when scanned (none for a growing one): no
    /// change may have come to it by the end of any of its pieces.
    ctimes: Vec<Option<(i64, u32)>>,
    /// Files still grow (`send --follow`): a lane with nothing to do waits
    /// for their pieces rather than leave.
    following: AtomicBool,
    /// Pieces of growing files not all on disk yet (a writer's blocks land
    /// out of order): the follower queues them again.
    deferred: Mutex<Vec<Piece>>,
    /// Growing files read through, with their digests: the follower checks
    /// them against the file as it ended before they are announced.
    finished: Mutex<Vec<(usize, u64)>>,
    start: Instant,
    lanes: usize,
    /// Bytes of one piece (a growing file's new bytes are cut so too).
    piece_bytes: u64,
}

/// What a lane with nothing to do finds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Idle {
    /// Pieces or orphaned frames wait: it works on.
    Work,
    /// Other lanes still work (and may lose their streams): it waits.
    Wait,
    /// Every lane is idle and nothing is left: the push is done.
    Done,
}

impl Work {
    /// The files of `tree` still to send (not held complete, not empty),
    /// for `lanes` lanes reading `block`-byte blocks, without routing.
    #[cfg(test)]
    pub(crate) fn new(tree: &Tree, held: &Held, lanes: usize, block: u64) -> Work {
        let plan = crate::session::link::lanes::place(lanes.max(1), lanes.max(1), &[], &[]);
        Work::routed(tree, held, &plan, &Route::none(), block, false)
    }

    /// The files of `tree` still to send (not held complete, not empty),
    /// for the lanes of `plan` reading `block`-byte blocks: whole files for
    /// one lane and one class, pieces of at most [`PIECE_BLOCKS`] blocks
    /// otherwise, each in the queue of its class on `route`. Each digest
    /// starts from what the receiver holds. A push that follows files or
    /// streams may add entries after the manifest's ([`add`](Self::add);
    /// `following`: lanes wait for the follower or streamer to say it is
    /// done).
    pub(crate) fn routed(
        tree: &Tree,
        held: &Held,
        plan: &[Lane],
        route: &Route,
        block: u64,
        following: bool,
    ) -> Work {
        let lanes = plan.len().max(1);
        let files: Vec<FileShare> = (0..tree.entries.len())
            .map(|_| FileShare::default())
            .collect();
        for (&i, (digest, _)) in &held.partial {
            files[i as usize].digest.store(*digest, Ordering::Relaxed);
        }
        let piece = if lanes > 1 || route.is_routed() {
            PIECE_BLOCKS * block
        } else {
            u64::MAX
        };
        let classes = route.classes();
        let mut pieces = vec![VecDeque::new(); classes];
        for (i, e) in tree.entries.iter().enumerate() {
            if e.growing {
                // Held open by its follower until it ends.
                files[i].pieces_left.store(1, Ordering::Relaxed);
            }
            if e.kind != EntryKind::File || e.size == 0 || held.settled(i as u32) {
                continue;
            }
            let queue = &mut pieces[route.of_entry(i)];
            // A shard's piece of a split file: its span alone.
            let (mut start, stop) = e.span(block);
            let mut n = 0;
            while start < stop {
                let end = start.saturating_add(piece).min(stop);
                queue.push_back(Piece {
                    entry: i,
                    start,
                    end,
                });
                start = end;
                n += 1;
            }
            files[i].pieces_left.fetch_add(n, Ordering::Relaxed);
        }
        let serves: Vec<Vec<bool>> = plan.iter().map(|l| route.served_by(l)).collect();
        let serving = (0..classes)
            .map(|c| serves.iter().filter(|s| s[c]).count())
            .collect();
        Work {
            queue: Mutex::new(Queue {
                pieces,
                serving,
                cursor: vec![0; lanes],
                orphans: Vec::new(),
                alive: lanes,
                busy: lanes,
            }),
            serves,
            route: route.clone(),
            files,
            added: RwLock::new(Window::new(tree.entries.len())),
            orphaned: AtomicBool::new(false),
            handed: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            paced: AtomicU64::new(0),
            ends: Mutex::new(
                tree.entries
                    .iter()
                    .map(|e| {
                        (!e.growing).then_some(End {
                            size: e.size,
                            mtime_s: e.mtime_s,
                            mtime_ns: e.mtime_ns,
                        })
                    })
                    .collect(),
            ),
            ctimes: tree
                .entries
                .iter()
                .zip(&tree.ctimes)
                .map(|(e, c)| c.filter(|_| !e.growing))
                .collect(),
            following: AtomicBool::new(following),
            deferred: Mutex::default(),
            finished: Mutex::default(),
            piece_bytes: piece,
            start: Instant::now(),
            lanes,
        }
    }

    /// `f` of entry `entry`'s share: the manifest's, or an added one's
    /// while it is kept (none once settled and dropped).
    fn share<R>(&self, entry: usize, f: impl FnOnce(&FileShare) -> R) -> Option<R> {
        if let Some(s) = self.files.get(entry) {
            return Some(f(s));
        }
        let added = self.added.read().unwrap_or_else(|p| p.into_inner());
        added.get(entry).map(|a| f(&a.share))
    }

    /// Entry `entry` is added after the manifest (the next one): a file
    /// ending at `end` (a growing one: none until it ends), or anything
    /// else (`None`, never read).
    pub(crate) fn add(&self, entry: usize, end: Option<End>) {
        let mut added = self.added.write().unwrap_or_else(|p| p.into_inner());
        debug_assert_eq!(added.end(), entry, "added in order");
        added.push(AddedShare {
            share: FileShare::default(),
            end,
        });
    }

    /// The added entries below `upto` are settled: their shares are
    /// dropped (their pieces still queued are passed over).
    pub(crate) fn retire(&self, upto: usize) {
        let mut added = self.added.write().unwrap_or_else(|p| p.into_inner());
        if upto > added.base() {
            added.retire(upto);
        }
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `lane` takes pieces of `class`: it serves it, or no lane
    /// left does.
    fn takes(&self, q: &Queue, lane: usize, class: usize) -> bool {
        self.serves[lane][class] || q.serving[class] == 0
    }

    /// Whether pieces `lane` may take wait in `q` (dropped files' aside).
    fn pieces_for(&self, q: &Queue, lane: usize) -> bool {
        (0..q.pieces.len()).any(|c| {
            self.takes(q, lane, c) && q.pieces[c].iter().any(|p| !self.is_dropped(p.entry))
        })
    }

    /// The next piece `lane` reads: from the classes it takes, in turn
    /// (pieces of skipped files are passed over).
    pub(crate) fn take(&self, lane: usize) -> Option<Piece> {
        let mut q = self.queue();
        let classes = q.pieces.len();
        for k in 0..classes {
            let c = (q.cursor[lane] + k) % classes;
            if !self.takes(&q, lane, c) {
                continue;
            }
            while let Some(p) = q.pieces[c].pop_front() {
                if !self.is_dropped(p.entry) {
                    q.cursor[lane] = (c + 1) % classes;
                    return Some(p);
                }
            }
        }
        None
    }

    /// Lane `lane` serves no class any more (it is gone).
    fn unserve(&self, q: &mut Queue, lane: usize) {
        for (c, &s) in self.serves[lane].iter().enumerate() {
            if s {
                q.serving[c] -= 1;
                self.serves_gone(c, q);
            }
        }
    }

    /// A class nobody serves any more: its pieces are anyone's now, and
    /// lanes waiting must look again.
    fn serves_gone(&self, class: usize, q: &Queue) {
        if q.serving[class] == 0 && !q.pieces[class].is_empty() {
            self.handed.store(true, Ordering::Release);
        }
    }

    /// The unread rest of a piece a lane cannot finish becomes a piece of
    /// its own, first in line.
    pub(crate) fn split_off(&self, rest: Piece) {
        self.share(rest.entry, |f| f.pieces_left.fetch_add(1, Ordering::AcqRel));
        self.queue().pieces[self.route.of_entry(rest.entry)].push_front(rest);
        self.handed.store(true, Ordering::Release);
    }

    /// Bytes `[start, end)` of growing file `entry` are on disk: pieces to
    /// read (pieces of at most the work's piece size).
    pub(crate) fn grown(&self, entry: usize, mut start: u64, end: u64) {
        let mut q = self.queue();
        let class = self.route.of_entry(entry);
        while start < end {
            let stop = start.saturating_add(self.piece_bytes).min(end);
            self.share(entry, |f| f.pieces_left.fetch_add(1, Ordering::AcqRel));
            q.pieces[class].push_back(Piece {
                entry,
                start,
                end: stop,
            });
            start = stop;
        }
        self.handed.store(true, Ordering::Release);
    }

    /// Added file `entry` is held open by its follower until it ends.
    pub(crate) fn hold(&self, entry: usize) {
        self.share(entry, |f| f.pieces_left.fetch_add(1, Ordering::AcqRel));
    }

    /// Growing file `entry` ends (`end`: its size and mtime): pieces
    /// taken from now on check its last block against it. Its follower
    /// lets go of it with [`piece_done`](Self::piece_done).
    pub(crate) fn set_end(&self, entry: usize, end: End) {
        if entry < self.files.len() {
            self.ends.lock().unwrap_or_else(|p| p.into_inner())[entry] = Some(end);
            return;
        }
        let mut added = self.added.write().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = added.get_mut(entry) {
            a.end = Some(end);
        }
    }

    /// Where `entry` ends, when known (a growing file's: once it ended).
    pub(crate) fn end_of(&self, entry: usize) -> Option<End> {
        if entry < self.files.len() {
            return self.ends.lock().unwrap_or_else(|p| p.into_inner())[entry];
        }
        let added = self.added.read().unwrap_or_else(|p| p.into_inner());
        added.get(entry).and_then(|a| a.end)
    }

    /// `entry`'s ctime when it was scanned (none for a growing file, or
    /// one a follow added).
    pub(crate) fn ctime_of(&self, entry: usize) -> Option<(i64, u32)> {
        self.ctimes.get(entry).copied().flatten()
    }

    /// The rest of a growing file's piece is not on disk yet: the follower
    /// queues it again later ([`retry_deferred`](Self::retry_deferred)).
    pub(crate) fn defer(&self, rest: Piece) {
        self.share(rest.entry, |f| f.pieces_left.fetch_add(1, Ordering::AcqRel));
        self.deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(rest);
    }

    /// Deferred pieces back in the queue.
    pub(crate) fn retry_deferred(&self) {
        let pieces = std::mem::take(&mut *self.deferred.lock().unwrap_or_else(|p| p.into_inner()));
        if pieces.is_empty() {
            return;
        }
        let mut q = self.queue();
        for p in pieces {
            q.pieces[self.route.of_entry(p.entry)].push_back(p);
        }
        self.handed.store(true, Ordering::Release);
    }

    /// A lane read growing file `entry` through (`digest`): the follower
    /// checks and announces it.
    pub(crate) fn finish_growing(&self, entry: usize, digest: u64) {
        let mut f = self.finished.lock().unwrap_or_else(|p| p.into_inner());
        f.push((entry, digest));
    }

    /// Growing files read through since the last look.
    pub(crate) fn take_finished(&self) -> Vec<(usize, u64)> {
        std::mem::take(&mut *self.finished.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// No file grows any more: lanes with nothing left leave.
    pub(crate) fn stop_following(&self) {
        self.following.store(false, Ordering::Release);
    }

    /// Add a lane's digest terms for entry `entry`.
    pub(crate) fn add_digest(&self, entry: usize, terms: u64) {
        self.share(entry, |f| f.digest.fetch_add(terms, Ordering::AcqRel));
    }

    /// A piece of `entry` is read through (its terms added): the file's
    /// digest when it was the last.
    pub(crate) fn piece_done(&self, entry: usize) -> Option<u64> {
        self.share(entry, |f| {
            (f.pieces_left.fetch_sub(1, Ordering::AcqRel) == 1)
                .then(|| f.digest.load(Ordering::Acquire))
        })
        .flatten()
    }

    /// Skip entry `entry`: true for the first to say so (who announces
    /// it); an added entry settled and dropped is nobody's to announce.
    pub(crate) fn drop_file(&self, entry: usize) -> bool {
        self.share(entry, |f| !f.dropped.swap(true, Ordering::AcqRel))
            .unwrap_or(false)
    }

    /// Whether entry `entry` is skipped, or (added) settled and dropped.
    pub(crate) fn is_dropped(&self, entry: usize) -> bool {
        self.share(entry, |f| f.dropped.load(Ordering::Acquire))
            .unwrap_or(true)
    }

    /// Each of the manifest's entries' digest (meaningful for files read
    /// through; an added file's is announced as it is read through).
    pub(crate) fn digests(&self) -> Vec<u64> {
        self.files
            .iter()
            .map(|f| f.digest.load(Ordering::Acquire))
            .collect()
    }

    /// Whether pieces `lane` may take or orphaned frames wait.
    pub(crate) fn has_more(&self, lane: usize) -> bool {
        let q = self.queue();
        self.pieces_for(&q, lane) || !q.orphans.is_empty()
    }

    /// Whether orphaned frames or pieces `lane` may take wait (without the
    /// lock until a lane handed work back or left a class unserved: pieces
    /// appear after the start only then).
    pub(crate) fn has_more_now(&self, lane: usize) -> bool {
        self.handed.load(Ordering::Acquire) && self.has_more(lane)
    }

    /// Frames a lane left without streams still owes, for the others;
    /// false (and nothing handed over) when no other lane is left to take
    /// them. The lane (`idle`: it said so before) is gone either way.
    pub(crate) fn hand_over(&self, lane: usize, frames: Vec<(u32, Sent)>, idle: bool) -> bool {
        let mut q = self.queue();
        q.alive -= 1;
        self.unserve(&mut q, lane);
        if !idle {
            q.busy -= 1;
        }
        if q.alive == 0 {
            return false;
        }
        q.orphans.extend(frames);
        self.orphaned.store(true, Ordering::Release);
        self.handed.store(true, Ordering::Release);
        true
    }

    /// Orphaned frames to send again (none, without taking the lock, on
    /// the ticks of a push no lane of which lost its streams).
    pub(crate) fn take_orphans(&self) -> Vec<(u32, Sent)> {
        if !self.orphaned.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut q = self.queue();
        self.orphaned.store(false, Ordering::Release);
        std::mem::take(&mut q.orphans)
    }

    /// A lane has nothing to do (`*idle` says whether it said so before):
    /// work on when pieces or orphans wait, wait while other lanes work
    /// (one may yet lose its streams and hand its frames over), done when
    /// none does.
    pub(crate) fn idle(&self, lane: usize, idle: &mut bool) -> Idle {
        let mut q = self.queue();
        let more = self.pieces_for(&q, lane) || !q.orphans.is_empty();
        if more {
            if *idle {
                q.busy += 1;
                *idle = false;
            }
            return Idle::Work;
        }
        if !*idle {
            q.busy -= 1;
            *idle = true;
        }
        // Pieces of a class another lane serves may wait still (handed
        // back by a lane that lost its streams): that lane takes them, and
        // this one stays to take what it might hand over in turn.
        let left = |q: &Queue| {
            q.pieces
                .iter()
                .any(|c| c.iter().any(|p| !self.is_dropped(p.entry)))
        };
        let following = self.following.load(Ordering::Acquire);
        if q.busy == 0 && !left(&q) && !following {
            Idle::Done
        } else {
            Idle::Wait
        }
    }

    /// Bytes let out under the rate limit so far, and since when.
    pub(crate) fn paced(&self) -> (u64, Instant) {
        (self.paced.load(Ordering::Acquire), self.start)
    }

    /// A lane lets `bytes` more out.
    pub(crate) fn pace(&self, bytes: u64) {
        self.paced.fetch_add(bytes, Ordering::AcqRel);
    }

    /// A lane done with the work leaves: it takes nothing handed over.
    pub(crate) fn leave(&self, lane: usize) {
        let mut q = self.queue();
        q.alive -= 1;
        self.unserve(&mut q, lane);
    }

    /// Lanes sharing the work.
    pub(crate) fn lanes(&self) -> usize {
        self.lanes
    }

    /// Set when a lane fails or panics (`lanes::StopOthers`): every lane
    /// stops.
    pub(crate) fn failed_flag(&self) -> &AtomicBool {
        &self.failed
    }

    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::manifest::Entry;
    use crate::session::plan::route::Placement;

    fn tree(sizes: &[u64]) -> Tree {
        let mut t = Tree::default();
        for (i, &size) in sizes.iter().enumerate() {
            t.entries.push(Entry {
                path: format!("f{i}"),
                kind: EntryKind::File,
                size,
                data: 0,
                mode: 0o644,
                mtime_s: 0,
                mtime_ns: 0,
                link: None,
                ..Default::default()
            });
        }
        t
    }

    #[test]
    fn one_lane_takes_whole_files_and_several_share_a_large_one_in_pieces() {
        let block = 1 << 20;
        let t = tree(&[100 << 20, 0, 5]);
        let w = Work::new(&t, &Held::default(), 1, block);
        assert_eq!(
            w.take(0),
            Some(Piece {
                entry: 0,
                start: 0,
                end: 100 << 20
            })
        );
        assert_eq!(
            w.take(0),
            Some(Piece {
                entry: 2,
                start: 0,
                end: 5
            })
        );
        assert_eq!(w.take(0), None);
        let w = Work::new(&t, &Held::default(), 2, block);
        let mut pieces = Vec::new();
        while let Some(p) = w.take(0) {
            pieces.push(p);
        }
        // 100 blocks in pieces of 4, then the small file.
        assert_eq!(pieces.len(), 25 + 1);
        assert!(pieces.windows(2).take(24).all(|p| p[0].end == p[1].start));
        assert_eq!(pieces[24].end, 100 << 20);
        assert!(pieces.iter().all(|p| p.start % block == 0));
    }

    #[test]
    fn the_digest_is_the_sum_of_the_pieces_and_comes_with_the_last() {
        let t = tree(&[12 << 20]);
        let mut held = Held::default();
        held.partial.insert(0, (7, vec![]));
        let w = Work::new(&t, &held, 2, 1 << 20);
        let (a, b, c) = (w.take(0).unwrap(), w.take(0).unwrap(), w.take(0).unwrap());
        assert!(w.take(0).is_none());
        w.add_digest(a.entry, 10);
        assert_eq!(w.piece_done(a.entry), None);
        // A lane cuts its piece short: the rest is a piece of its own.
        w.split_off(Piece {
            start: b.start + (1 << 20),
            ..b
        });
        w.add_digest(c.entry, 100);
        assert_eq!(w.piece_done(c.entry), None);
        assert_eq!(w.piece_done(b.entry), None);
        let rest = w.take(0).unwrap();
        w.add_digest(rest.entry, 1000);
        assert_eq!(w.piece_done(rest.entry), Some(1117));
    }

    #[test]
    fn frames_are_handed_over_only_to_a_lane_still_running() {
        let t = tree(&[1]);
        let w = Work::new(&t, &Held::default(), 2, 4096);
        assert!(w.drop_file(0) && !w.drop_file(0), "announced once");
        assert!(
            w.take(0).is_none(),
            "a dropped file's pieces are passed over"
        );
        let frame = Sent::default();
        // Lane 0 runs out of work while lane 1 still sends: it waits.
        let mut idle0 = false;
        assert_eq!(w.idle(0, &mut idle0), Idle::Wait);
        // Lane 1 loses its streams: lane 0 takes its frames.
        assert!(
            w.hand_over(1, vec![(1, frame)], false),
            "one lane is still there"
        );
        assert_eq!(
            w.idle(0, &mut idle0),
            Idle::Work,
            "it must send the frames first"
        );
        assert_eq!(w.take_orphans().len(), 1);
        assert_eq!(w.idle(0, &mut idle0), Idle::Done);
        let w = Work::new(&t, &Held::default(), 1, 4096);
        assert!(
            !w.hand_over(0, vec![(0, frame)], false),
            "nobody is left to send them"
        );
        // A lane that lost its streams while idle is not counted twice.
        let w = Work::new(&t, &Held::default(), 2, 4096);
        assert!(w.take(0).is_some());
        let (mut idle0, mut idle1) = (false, false);
        assert_eq!(w.idle(0, &mut idle0), Idle::Wait);
        assert_eq!(w.idle(1, &mut idle1), Idle::Done);
        assert!(w.hand_over(1, vec![], true));
        assert_eq!(w.idle(0, &mut idle0), Idle::Done);
    }

    #[test]
    fn a_lane_takes_handed_over_work_only_counted_busy_and_none_leaves_under_it() {
        // Three lanes of a pull (no acknowledgements hold a lane back).
        let t = tree(&[1 << 20]);
        let w = Work::new(&t, &Held::default(), 3, 4096);
        while w.take(0).is_some() {}
        let (mut a, mut c) = (false, false);
        assert_eq!(w.idle(0, &mut a), Idle::Wait, "lane A read its share");
        assert_eq!(w.idle(2, &mut c), Idle::Wait, "lane C read its share");
        // Lane B loses its streams; A takes its frames, counted busy first.
        assert!(w.hand_over(1, vec![(1, Sent::default())], false));
        assert_eq!(w.idle(0, &mut a), Idle::Work);
        assert_eq!(w.take_orphans().len(), 1);
        // C may not leave while A sends them: A could lose its streams too.
        assert_eq!(w.idle(2, &mut c), Idle::Wait);
        // A does: C is still there to take them.
        assert!(w.hand_over(0, vec![(2, Sent::default())], a));
        assert_eq!(w.idle(2, &mut c), Idle::Work);
        assert_eq!(w.take_orphans().len(), 1);
        assert_eq!(w.idle(2, &mut c), Idle::Done);
        w.leave(2);
        // Two lanes: Y is done and gone; X, idle, loses its last stream
        // while its own frames still go: nobody is left to take them.
        let w = Work::new(&t, &Held::default(), 2, 4096);
        while w.take(0).is_some() {}
        let (mut x, mut y) = (false, false);
        assert_eq!(w.idle(0, &mut x), Idle::Wait);
        assert_eq!(w.idle(1, &mut y), Idle::Done);
        w.leave(1);
        assert!(!w.hand_over(0, vec![(0, Sent::default())], x));
    }

    #[test]
    fn a_lane_takes_only_its_devices_pieces_until_their_lanes_are_gone() {
        use crate::protocol::control::Message;
        // Entries 0 and 2 on class 0, 1 and 3 on class 1; streams 0, 2 of
        // class 0, 1 and 3 of class 1 (the receiver's two lanes).
        let t = tree(&[8 << 20, 8 << 20, 4 << 20, 4 << 20]);
        let m = Message::Placement {
            streams: vec![0, 1, 0, 1],
            entries: vec![(0, 0), (1, 1), (2, 0), (3, 1)],
        };
        let Message::Placement { streams, entries } = m else {
            unreachable!()
        };
        let route = Route::from_placement(Placement::new(streams, entries), 4, 4).unwrap();
        let block = 1 << 20;
        // One lane on every stream: pieces of both classes in turn.
        let one = crate::session::link::lanes::place(1, 4, &[], &[]);
        let w = Work::routed(&t, &Held::default(), &one, &route, block, false);
        let classes: Vec<usize> = std::iter::from_fn(|| w.take(0))
            .map(|p| route.of_entry(p.entry))
            .collect();
        assert_eq!(&classes[..4], &[0, 1, 0, 1], "{classes:?}");
        assert_eq!(classes.len(), 6, "pieces of 4 blocks: 2 + 2 + 1 + 1");
        // Two lanes, each on one class's streams.
        let two = crate::session::link::lanes::place(2, 4, &[], &[]);
        let w = Work::routed(&t, &Held::default(), &two, &route, block, false);
        let mut taken = Vec::new();
        while let Some(p) = w.take(0) {
            taken.push(p.entry);
        }
        assert_eq!(taken, vec![0, 0, 2], "lane 0 takes class 0 only");
        let mut idle0 = false;
        assert_eq!(w.idle(0, &mut idle0), Idle::Wait, "class 1 is lane 1's");
        assert!(!w.has_more(0));
        // Lane 1 loses its streams: its class is anyone's now.
        assert!(w.hand_over(1, vec![], false));
        assert!(w.has_more_now(0));
        assert_eq!(w.idle(0, &mut idle0), Idle::Work);
        let rest: Vec<usize> = std::iter::from_fn(|| w.take(0)).map(|p| p.entry).collect();
        assert_eq!(rest, vec![1, 1, 3]);
        // Three lanes: 0 and 2 on class 0, 1 on class 1. Lane 0 loses its
        // streams mid-piece and hands the rest back while the others are
        // idle: lane 1 may not leave, lane 2 must take it and could lose
        // its streams too.
        let three = crate::session::link::lanes::place(3, 3, &[], &[]);
        let route =
            Route::from_placement(Placement::new(vec![0, 1, 0], vec![(0, 0), (1, 1)]), 4, 3)
                .unwrap();
        let w = Work::routed(&t, &Held::default(), &three, &route, block, false);
        let first = w.take(0).unwrap();
        while w.take(2).is_some() {}
        while w.take(1).is_some() {}
        let (mut i1, mut i2) = (false, false);
        assert_eq!(w.idle(1, &mut i1), Idle::Wait);
        assert_eq!(w.idle(2, &mut i2), Idle::Wait);
        w.split_off(Piece {
            start: first.start + block,
            ..first
        });
        assert!(w.hand_over(0, vec![], false));
        assert_eq!(w.idle(1, &mut i1), Idle::Wait, "lane 2 serves class 0");
        assert_eq!(w.idle(2, &mut i2), Idle::Work);
    }
}
