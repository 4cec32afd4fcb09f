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
//! The work and the acknowledgements keep one slot an entry, sized when
//! the data starts: a streamed push adds at most [`STREAM_ROOM`] entries
//! after its first window (more are reported skipped: a later run sends
//! them).

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
/// Entries a streamed push adds after its first window, at most.
pub(crate) const STREAM_ROOM: usize = 1 << 20;
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

    /// What the walk gives until `until` and it met `least` names (kept
    /// or left out), to its end without `until`, into `tree`.
    pub(crate) fn fill(&mut self, tree: &mut Tree, until: Option<Instant>, least: usize) {
        while !self.ended {
            let met = tree.entries.len() + tree.skipped.len();
            let met = met as u64 + tree.excluded + tree.devices_left;
            let wait = match until {
                Some(t) if Instant::now() >= t && met >= least as u64 => return,
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
            let found = match self.unadmitted() < UNADMITTED_MAX {
                true => self.window(),
                false => Vec::new(),
            };
            if !found.is_empty() {
                self.add(found)?;
            } else if !told_end && self.walk_ended() {
                send_msg(&mut self.ctl, &Message::AddedEnd)?;
                told_end = true;
            } else if told_end || self.walk_ended() || self.unadmitted() >= UNADMITTED_MAX {
                std::thread::sleep(Duration::from_millis(2));
            }
            self.admit_pending();
            self.beat()?;
            if told_end && self.pending.is_empty() {
                return Ok(());
            }
        }
    }

    /// Entries sent that the receiver has not admitted yet.
    fn unadmitted(&self) -> usize {
        let sent = self.ctx.added.base + self.ctx.added.len();
        let ready = self.acks.map_or(u32::MAX, |a| a.admitted()) as usize;
        sent.saturating_sub(ready)
    }

    fn walk_ended(&self) -> bool {
        self.ctx
            .walking
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .ended
    }

    /// What the walk gives within [`WINDOW`] (at most [`WINDOW_ENTRIES`]).
    fn window(&mut self) -> Vec<Found> {
        let mut walking = self.ctx.walking.lock().unwrap_or_else(|p| p.into_inner());
        let until = Instant::now() + WINDOW;
        let mut found = Vec::new();
        while found.len() < WINDOW_ENTRIES && !walking.ended {
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
        found
    }

    /// `found` added to the session (numbered after what it has), its
    /// files waiting for the receiver's `Admitted`.
    fn add(&mut self, found: Vec<Found>) -> Result<(), SessionError> {
        let added = self.ctx.added;
        let first = (added.base + added.len()) as u32;
        let mut entries = Vec::with_capacity(found.len());
        for f in found {
            if added.len() >= STREAM_ROOM {
                self.skipped.push(Refused {
                    entry: UNLISTED,
                    path: f.entry.path,
                    reason: format!("listed past the {STREAM_ROOM} entries a streamed push adds after its first window; send again"),
                    rule: true,
                });
                continue;
            }
            let i = added.base + added.len();
            let e = &f.entry;
            if e.kind == EntryKind::File {
                let end = End {
                    size: e.size,
                    mtime_s: e.mtime_s,
                    mtime_ns: e.mtime_ns,
                };
                self.work.set_end(i, end);
                // Acknowledged once committed (or held, refused).
                if let Some(a) = self.acks {
                    a.unsettle(i as u32);
                }
                self.pending.push_back((i, e.size, e.data));
            }
            entries.push(f.entry.clone());
            added.push(AddedEntry {
                entry: f.entry,
                source: f.source,
                id: f.id,
            });
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
