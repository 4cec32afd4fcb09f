//! A streamed push (protocol 14, `REQ_STREAM`): the walk runs on a thread
//! of its own ([`Walking`]) while the session is set up and the data
//! flows. The manifest is what the walk found within [`FIRST_WINDOW`];
//! the streamer (this module, on a thread beside the lanes) sends the rest
//! as `Added` windows (each what the walk gave within [`WINDOW`], at most
//! [`WINDOW_ENTRIES`] entries), and once the receiver has a window ready
//! (`Admitted`) queues the pieces of its files that the receiver does not
//! hold unchanged (its `Have` items come first), refused, or finished
//! already (empty ones). `AddedEnd` says the walk ended; the lanes leave
//! once every window's files are queued and sent.
//!
//! The work, the acknowledgements and the entries added keep a slot for
//! each entry added only until it is settled (acknowledged, held, refused,
//! dropped, or no file: [`super::window`]): the streamer waits for the
//! receiver while [`unsettled_max`] entries are unsettled, and the walk
//! waits for the streamer, so the sender's memory is bounded by what is in
//! flight, not by the tree.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use crate::protocol::control::{Message, MANIFEST_PART_ENTRIES_MAX, UNLISTED};
use crate::protocol::manifest::EntryKind;

use super::follow::{Added, AddedEntry, Gauge};
use super::ledger::Acks;
use super::sending::Sources;
use super::window::unsettled_max;
use super::work::{End, Work};
use crate::session::link::conn::{send_msg, Control};
use crate::session::link::refused::Refused;
use crate::session::plan::tree::{starts_of, ScanRules, Tree};
use crate::session::plan::walk::{self, Batch, Found, Local, Walk};
use crate::session::SessionError;

/// How long the first window waits for the walk.
pub(crate) const FIRST_WINDOW: Duration = Duration::from_millis(50);
/// Names the first window waits for at least (kept or left out), however long the walk
/// takes: a tree smaller than this never streams (a busy machine's walk
/// of three files may take longer than [`FIRST_WINDOW`]).
pub(crate) const FIRST_WINDOW_MIN: usize = 4096;

/// Entries the first window (the manifest, kept whole for the session)
/// takes at most, however fast the walk: the rest comes in later windows,
/// whose entries are dropped once settled.
pub(crate) const FIRST_WINDOW_MAX: usize = 65_536;

/// How long the first window waits and for how many entries at least:
/// [`FIRST_WINDOW`] and [`FIRST_WINDOW_MIN`], or with
/// `URMOVE_STREAM_FIRST_MS` set (tests) that long and none (0 streams
/// even a small tree, all of it in later windows).
pub(crate) fn first_window() -> (Duration, usize) {
    std::env::var("URMOVE_STREAM_FIRST_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map_or((FIRST_WINDOW, FIRST_WINDOW_MIN), |ms| {
            (Duration::from_millis(ms), 0)
        })
}

/// How long each later window gathers, at most.
pub(crate) const WINDOW: Duration = Duration::from_millis(50);
/// Entries in one window, at most.
pub(crate) const WINDOW_ENTRIES: usize = crate::protocol::control::STREAM_WINDOW_ENTRIES;
/// Entries sent and not yet admitted by the receiver, at most: the
/// streamer waits beyond (the receiver prepares them one window a step).
pub(crate) const UNADMITTED_MAX: usize = crate::protocol::control::STREAM_UNADMITTED_MAX;
/// Batches the walk may make ahead of the streamer (of at most
/// `walk::CHUNK_ENTRIES` entries each): beyond, it waits.
const BATCHES_AHEAD: usize = 256;
/// The shortest wait for the walk's next batch.
const WAIT_MIN: Duration = Duration::from_millis(1);
/// How often the streamer tells the receiver it is there.
const BEAT_EVERY: Duration = Duration::from_secs(1);

/// A walk running on a thread of its own, its batches handed over as
/// they come. Dropped, it stops the walk and waits for its thread.
pub(crate) struct Walking {
    rx: Option<mpsc::Receiver<Batch>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The walk ended and every batch was taken.
    pub(crate) ended: bool,
    /// When it ended.
    pub(crate) ended_at: Option<Instant>,
}

impl Walking {
    /// Walk `sources` as `rules` say, on a thread of its own.
    pub(crate) fn start(sources: &[PathBuf], rules: &ScanRules) -> Result<Walking, SessionError> {
        let starts = starts_of(sources)?;
        let rules = rules.clone();
        let (tx, rx) = mpsc::sync_channel(BATCHES_AHEAD);
        let thread = std::thread::Builder::new()
            .name("urmove-walk".into())
            .spawn(move || {
                let mut emit = |b: Batch| match tx.send(b) {
                    Ok(()) => ControlFlow::Continue(()),
                    Err(_) => ControlFlow::Break(()),
                };
                walk::walk(&Local, &rules, starts, Walk::default(), &mut emit);
            })
            .map_err(|e| SessionError::io("starting the walk", e))?;
        Ok(Walking {
            rx: Some(rx),
            thread: Some(thread),
            ended: false,
            ended_at: None,
        })
    }

    /// The next batch within `wait`, or none (then `ended` says whether
    /// the walk is over).
    pub(crate) fn next(&mut self, wait: Duration) -> Option<Batch> {
        let rx = self.rx.as_ref().filter(|_| !self.ended)?;
        match rx.recv_timeout(wait) {
            Ok(b) => Some(b),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                self.ended = true;
                self.ended_at = Some(Instant::now());
                None
            }
        }
    }

    /// What the walk gives until `until` (or [`FIRST_WINDOW_MAX`]
    /// entries) and it met `least` names (kept or left out), to its end
    /// without `until`, into `tree`.
    pub(crate) fn fill(&mut self, tree: &mut Tree, until: Option<Instant>, least: usize) {
        while !self.ended {
            let met = tree.entries.len() + tree.skipped.len();
            let met = met as u64 + tree.excluded + tree.devices_left;
            let full = tree.entries.len() >= FIRST_WINDOW_MAX;
            let wait = match until {
                Some(t) if (full || Instant::now() >= t) && met >= least as u64 => return,
                Some(t) => t.saturating_duration_since(Instant::now()).max(WAIT_MIN),
                None => Duration::from_secs(3600),
            };
            if let Some(b) = self.next(wait) {
                take_batch(tree, b);
            }
        }
    }
}

impl Drop for Walking {
    fn drop(&mut self) {
        // Its next batch finds nobody to take it: the walk stops.
        self.rx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Batch `b` into `tree`, its entries in the order the walk gave them.
fn take_batch(tree: &mut Tree, b: Batch) {
    tree.excluded += b.excluded;
    tree.devices_left += b.devices_left;
    tree.skipped.extend(b.skipped.into_iter().map(|(_, s)| s));
    for f in b.found {
        tree.take(f);
    }
}

/// How a push streams: the walk going on, the entries it added, the
/// gauge of the bytes to send (growing as windows are admitted).
pub(crate) struct StreamCtx<'a> {
    pub(crate) walking: Mutex<Walking>,
    pub(crate) added: &'a Added,
    pub(crate) gauge: &'a Gauge,
    /// Entries the later windows' walk left out (`--exclude`), and
    /// device nodes (no `-D`).
    pub(crate) excluded: AtomicU64,
    pub(crate) devices_left: AtomicU64,
}

impl<'a> StreamCtx<'a> {
    pub(crate) fn new(walking: Walking, added: &'a Added, gauge: &'a Gauge) -> Self {
        StreamCtx {
            walking: Mutex::new(walking),
            added,
            gauge,
            excluded: AtomicU64::new(0),
            devices_left: AtomicU64::new(0),
        }
    }
}

/// The streamer's state (see the module).
pub(crate) struct Streamer<'a> {
    work: &'a Work,
    ctx: &'a StreamCtx<'a>,
    acks: Option<&'a Acks>,
    ctl: Control,
    /// Added files waiting for their window to be ready: (entry, size,
    /// data bytes).
    pending: VecDeque<(usize, u64, u64)>,
    /// What the walk gave beyond the room of the last window: the next
    /// window's first.
    left: VecDeque<Found>,
    /// Entries added and not settled, at most ([`unsettled_max`]).
    bound: usize,
    beat: Instant,
    /// What the walk could not list or the session could not add.
    pub(crate) skipped: Vec<Refused>,
}

impl<'a> Streamer<'a> {
    pub(crate) fn new(
        from: &Sources<'a>,
        ctx: &'a StreamCtx<'a>,
        work: &'a Work,
    ) -> Result<Self, SessionError> {
        ctx.gauge.active.store(true, Ordering::Release);
        Ok(Streamer {
            work,
            ctx,
            acks: from.acked,
            ctl: from.announce_on.try_clone()?,
            pending: VecDeque::new(),
            left: VecDeque::new(),
            bound: unsettled_max(),
            beat: Instant::now(),
            skipped: Vec::new(),
        })
    }

    /// Stream until the walk ended and every window's files are queued,
    /// the session stops or a lane failed.
    pub(crate) fn run(&mut self, stop: &AtomicBool) -> Result<(), SessionError> {
        let r = self.stream(stop);
        self.ctx.gauge.active.store(false, Ordering::Release);
        self.work.stop_following();
        if r.is_err() {
            self.work.failed_flag().store(true, Ordering::Release);
        }
        r
    }

    fn stream(&mut self, stop: &AtomicBool) -> Result<(), SessionError> {
        let mut told_end = false;
        loop {
            let gone = self.acks.is_some_and(|a| a.ended.load(Ordering::Acquire));
            if stop.load(Ordering::Relaxed) || self.work.failed() || gone {
                return Ok(());
            }
            let room = self.room();
            let found = match room > 0 {
                true => self.window(room),
                false => Vec::new(),
            };
            if !found.is_empty() {
                self.add(found)?;
            } else if !told_end && self.walked() {
                send_msg(&mut self.ctl, &Message::AddedEnd)?;
                told_end = true;
            } else if told_end || self.walked() || room == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
            self.admit_pending();
            self.beat()?;
            if told_end && self.pending.is_empty() {
                return Ok(());
            }
        }
    }

    /// Entries the next window may add: none while [`UNADMITTED_MAX`]
    /// wait for the receiver's `Admitted` or `bound` are not settled (the
    /// settled ones dropped first).
    fn room(&self) -> usize {
        let unsettled = match self.acks {
            Some(a) => {
                super::window::retire(a, self.work, self.ctx.added);
                a.unsettled()
            }
            None => 0,
        };
        let settling = self.bound.saturating_sub(unsettled);
        settling.min(UNADMITTED_MAX.saturating_sub(self.unadmitted()))
    }

    /// Entries sent that the receiver has not admitted yet.
    fn unadmitted(&self) -> usize {
        let sent = self.ctx.added.end();
        let ready = self.acks.map_or(u32::MAX, |a| a.admitted()) as usize;
        sent.saturating_sub(ready)
    }

    /// The walk ended and all it gave was added.
    fn walked(&self) -> bool {
        self.left.is_empty() && self.walk_ended()
    }

    fn walk_ended(&self) -> bool {
        self.ctx
            .walking
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .ended
    }

    /// What the walk gives within [`WINDOW`] (at most [`WINDOW_ENTRIES`]
    /// and `room`), what it gave beyond the last window first.
    fn window(&mut self, room: usize) -> Vec<Found> {
        let most = room.min(WINDOW_ENTRIES);
        let mut found: Vec<Found> = Vec::new();
        while found.len() < most {
            match self.left.pop_front() {
                Some(f) => found.push(f),
                None => break,
            }
        }
        let mut walking = self.ctx.walking.lock().unwrap_or_else(|p| p.into_inner());
        let until = Instant::now() + WINDOW;
        while found.len() < most && !walking.ended {
            let now = Instant::now();
            if now >= until {
                break;
            }
            let Some(b) = walking.next(until - now) else {
                continue;
            };
            self.ctx.excluded.fetch_add(b.excluded, Ordering::Relaxed);
            let devices = &self.ctx.devices_left;
            devices.fetch_add(b.devices_left, Ordering::Relaxed);
            self.skipped
                .extend(b.skipped.into_iter().map(|(_, s)| Refused {
                    entry: UNLISTED,
                    path: s.path,
                    reason: s.reason,
                    rule: s.by_rule,
                }));
            found.extend(b.found);
        }
        if found.len() > most {
            // The rest waits for room.
            self.left.extend(found.drain(most..));
        }
        found
    }

    /// `found` added to the session (numbered after what it has), its
    /// files waiting for the receiver's `Admitted`.
    fn add(&mut self, found: Vec<Found>) -> Result<(), SessionError> {
        let added = self.ctx.added;
        let first = added.end() as u32;
        let mut entries = Vec::with_capacity(found.len());
        for f in found {
            let i = added.end();
            let e = &f.entry;
            let file = e.kind == EntryKind::File;
            let end = file.then_some(End {
                size: e.size,
                mtime_s: e.mtime_s,
                mtime_ns: e.mtime_ns,
            });
            self.work.add(i, end);
            // A file is acknowledged once committed (or held, refused).
            if let Some(a) = self.acks {
                a.add(i as u32, file);
            }
            if file {
                self.pending.push_back((i, e.size, e.data));
            }
            added.push(AddedEntry {
                path: f.entry.path.clone(),
                file,
                source: f.source,
                id: f.id,
            });
            entries.push(f.entry);
        }
        let part_max = MANIFEST_PART_ENTRIES_MAX as usize;
        for (n, part) in entries.chunks(part_max).enumerate() {
            let m = Message::Added {
                first: first + (n * part_max) as u32,
                entries: part.to_vec(),
            };
            send_msg(&mut self.ctl, &m)?;
        }
        Ok(())
    }

    /// The files of windows the receiver has ready, queued unless it
    /// holds them unchanged, refused them or finished them already.
    fn admit_pending(&mut self) {
        let ready = self.acks.map_or(u32::MAX, |a| a.admitted());
        while let Some(&(i, size, data)) = self.pending.front() {
            if i as u32 >= ready {
                return;
            }
            self.pending.pop_front();
            if self.acks.is_some_and(|a| a.has(i as u32)) || size == 0 {
                continue;
            }
            self.ctx.gauge.total.fetch_add(data, Ordering::AcqRel);
            self.work.grown(i, 0, size);
        }
    }

    /// A heartbeat on the control connection once a second: the receiver
    /// waits on a slow walk without taking the sender for gone.
    fn beat(&mut self) -> Result<(), SessionError> {
        if self.beat.elapsed() >= BEAT_EVERY {
            self.beat = Instant::now();
            let m = Message::Alive {
                streams: Vec::new(),
            };
            send_msg(&mut self.ctl, &m)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::plan::held::Held;
    use crate::session::plan::route::Route;

    /// The streamer adds entries until `bound` of them are unsettled and
    /// then waits (no room, nothing skipped); as the receiver settles the
    /// first ones, their slots are dropped everywhere and exactly that
    /// much room comes back, what the walk gave beyond kept for the next
    /// window.
    #[test]
    fn the_streamer_waits_at_its_bound_and_goes_on_as_entries_settle() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let top = dir.path().join("t");
        std::fs::create_dir(&top).unwrap();
        for i in 0..300 {
            std::fs::write(top.join(format!("f{i:03}")), b"x").unwrap();
        }
        let walking = Walking::start(std::slice::from_ref(&top), &ScanRules::default()).unwrap();
        let tree = Tree::default();
        let held = Held::default();
        let (added, gauge) = (Added::new(0), Gauge::default());
        let ctx = StreamCtx::new(walking, &added, &gauge);
        let acks = Acks::new(&tree, &held, 1, &[]);
        let work = Work::new(&tree, &held, 1, 4096);
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ctl = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let _peer = l.accept().unwrap().0;
        let ctl = Control::new(ctl);
        let open = |i: usize| Err(crate::session::plan::unsendable::Unsendable::NoSource(i));
        let route = Route::none();
        let from = Sources {
            tree: &tree,
            held: &held,
            acked: Some(&acks),
            open: &open,
            announce_on: &ctl,
            route: &route,
            follow: None,
            stream: Some(&ctx),
        };
        let mut s = Streamer::new(&from, &ctx, &work).unwrap();
        s.bound = 100;
        let until = Instant::now() + Duration::from_secs(30);
        while s.room() > 0 {
            assert!(Instant::now() < until, "the walk gave too little");
            let found = s.window(s.room());
            s.add(found).unwrap();
        }
        // The directory and 99 files: the directory is settled at once,
        // but kept until the receiver admitted it (a refusal of it would
        // come first and find its name).
        assert_eq!(added.len(), 100, "added up to the bound");
        assert_eq!(s.room(), 0);
        assert!(added.name(0).is_some_and(|(_, file)| !file));
        // The receiver has every window ready: the directory is dropped.
        acks.admitted.store(u32::MAX, Ordering::Release);
        assert_eq!(s.room(), 1);
        assert_eq!(added.name(0), None);
        let found = s.window(1);
        s.add(found).unwrap();
        assert_eq!(added.len(), 101);
        assert_eq!(acks.unsettled(), 100);
        assert!(s.skipped.is_empty(), "nothing skipped: {:?}", s.skipped);
        assert!(s.window(s.room()).is_empty(), "no room, nothing taken");
        // The first 30 files are acknowledged (entries 1..=30).
        let first = (1..=30).map(|i| i as u32);
        assert!(added.source(1).is_some() && !work.is_dropped(1));
        first.clone().for_each(|i| acks.acknowledged(i));
        assert_eq!(s.room(), 30, "room for what settled");
        assert_eq!(acks.unsettled(), 70);
        for i in first {
            assert!(added.source(i as usize).is_none(), "{i}: source dropped");
            assert!(work.is_dropped(i as usize), "{i}: work dropped");
            assert!(acks.has(i), "{i}: settled");
        }
        assert!(added.source(31).is_some() && !acks.has(31));
        // A file after the 31st settled: its slot waits for the base.
        acks.acknowledged(40);
        assert_eq!(s.room(), 30);
        let found = s.window(s.room());
        assert_eq!(found.len(), 30, "exactly the room");
        s.add(found).unwrap();
        assert_eq!(added.len(), 131);
        assert_eq!(s.room(), 0, "the 40th settled, but the base waits below it");
        // The rest of the walk (170 files) still comes, none skipped.
        acks.admitted.store(u32::MAX, Ordering::Release);
        for i in 31..131 {
            acks.acknowledged(i);
        }
        while !s.walked() {
            assert!(Instant::now() < until, "the walk never ended");
            let found = s.window(s.room());
            s.add(found).unwrap();
            for i in 0..added.end() as u32 {
                acks.acknowledged(i);
            }
        }
        assert_eq!(added.len(), 301);
        assert_eq!(added.files(), 300);
        assert!(s.skipped.is_empty());
    }
}
