//! What a sending lane remembers: each frame a stream carried until the
//! receiver has it (`Sent`, `Ledger`, pruned as files arrive), and the
//! receiver's acknowledgements as the lanes share them (`Acks`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use crate::protocol::frame::FRAME_HEADER_LEN;
use crate::protocol::manifest::EntryKind;

use super::window::Window;
use crate::session::plan::held::Held;
use crate::session::plan::tree::Tree;

/// What was done about lost streams.
#[derive(Debug, Default)]
pub(super) struct Repair {
    /// Streams given up, with why.
    pub(super) lost: Vec<String>,
    /// Frames sent again.
    pub(super) resent: u64,
}

/// A frame sent on a stream, remembered until its file is acknowledged so
/// it can go again if the stream is lost.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sent {
    pub(super) entry: u32,
    pub(super) offset: u64,
    pub(super) len: u32,
    pub(super) checksum: u64,
    pub(super) hole: bool,
    /// A sparse frame: its payload is its data pieces and their map.
    pub(super) sparse: bool,
    /// Payload bytes on the wire (0 for a hole).
    pub(super) wire: u32,
    /// Where the frame ends in its stream's bytes: once the receiver says
    /// it took this many, the frame arrived.
    pub(super) end: u64,
}

/// Records each stream's ledger holds from the start (40 KiB): it is
/// pruned of what arrived when full, and grows only while more than half
/// of that is still on its way.
pub(super) const LEDGER_RECORDS: usize = 1024;

/// Frames each stream carried, for re-sending when a stream is lost.
pub(super) struct Ledger<'a> {
    pub(super) sent: Vec<Vec<Sent>>,
    pub(super) prune_at: Vec<usize>,
    /// Records were dropped past the bound: this stream cannot be re-sent.
    pub(super) overflowed: Vec<bool>,
    pub(super) acked: Option<&'a Acks>,
    /// The session's number of each of this lane's streams.
    pub(super) ids: Vec<u32>,
    /// Bytes queued on each stream so far (headers, payloads, tags).
    pub(super) queued: Vec<u64>,
    /// Frames carry a tag.
    pub(super) sealed: bool,
    pub(super) total: usize,
    /// This lane's share of [`SENT_RECORDS_MAX`].
    pub(super) records_max: usize,
}

/// Which files the receiver acknowledged, shared with the reader of its
/// acknowledgements: the manifest's entries in tables of their own, those
/// added after it (a streamed push's later windows, a follow's) in a
/// [`Window`] that drops them once settled.
pub(crate) struct Acks {
    /// Acknowledged, rejected, or needing no acknowledgement.
    acked: Vec<AtomicBool>,
    /// Files acknowledged or complete before the run, for progress.
    pub(crate) files_done: Arc<AtomicU64>,
    /// The reader stopped (summary, error or silence): wait no more.
    pub(crate) ended: AtomicBool,
    /// Bytes each data stream delivered, as the receiver last said.
    pub(crate) received: Vec<AtomicU64>,
    /// Whether the receiver last said a receive waits on each stream.
    pub(crate) waiting: Vec<AtomicBool>,
    /// Entries below this the receiver has ready (a follow's `Admitted`).
    pub(crate) admitted: std::sync::atomic::AtomicU32,
    /// Files the receiver refused while the data came: not sent further.
    refused: Vec<AtomicBool>,
    /// The entries added after the manifest, not yet settled.
    window: RwLock<Window<AddedAck>>,
    /// When the receiver first acknowledged a file.
    pub(crate) first_ack: std::sync::OnceLock<std::time::Instant>,
}

/// What is known of an entry added after the manifest until it settles.
#[derive(Debug, Default)]
struct AddedAck {
    settled: AtomicBool,
    refused: AtomicBool,
    file: bool,
    /// This side's digest of it, once announced.
    ours: AtomicU64,
}

/// Why the receiver's word on an added entry does not stand.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AddedFault {
    /// It names no file added and unsettled.
    Unexpected,
    /// Its digest is not this side's.
    Differs,
}

impl Acks {
    /// Entries needing no acknowledgement (not files, held complete and
    /// checked, refused by the receiver) start settled.
    pub(crate) fn new(
        tree: &Tree,
        held: &Held,
        streams: u16,
        refused: &[crate::session::link::refused::Refused],
    ) -> Acks {
        let acked: Vec<AtomicBool> = tree
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let i = i as u32;
                AtomicBool::new(
                    e.kind != EntryKind::File
                        || held.complete.contains_key(&i)
                        || refused.iter().any(|r| r.entry == i),
                )
            })
            .collect();
        Acks {
            acked,
            files_done: Arc::new(AtomicU64::new(held.complete.len() as u64)),
            ended: AtomicBool::new(false),
            received: (0..streams).map(|_| AtomicU64::new(0)).collect(),
            waiting: (0..streams).map(|_| AtomicBool::new(false)).collect(),
            admitted: std::sync::atomic::AtomicU32::new(tree.entries.len() as u32),
            refused: (0..tree.entries.len())
                .map(|_| AtomicBool::new(false))
                .collect(),
            window: RwLock::new(Window::new(tree.entries.len())),
            first_ack: std::sync::OnceLock::new(),
        }
    }

    fn window(&self) -> RwLockReadGuard<'_, Window<AddedAck>> {
        self.window.read().unwrap_or_else(|p| p.into_inner())
    }

    /// `f` of added entry `entry`'s state, while it is kept.
    fn added<R>(&self, entry: u32, f: impl FnOnce(&AddedAck) -> R) -> Option<R> {
        self.window().get(entry as usize).map(f)
    }

    /// Whether `entry` was added after the manifest.
    pub(crate) fn is_added(&self, entry: u32) -> bool {
        entry as usize >= self.acked.len()
    }

    /// Entry `entry` is added after the manifest (the next one): a file
    /// waits for its acknowledgement, anything else is settled.
    pub(crate) fn add(&self, entry: u32, file: bool) {
        let mut w = self.window.write().unwrap_or_else(|p| p.into_inner());
        debug_assert_eq!(w.end(), entry as usize, "added in order");
        w.push(AddedAck {
            settled: AtomicBool::new(!file),
            file,
            ..AddedAck::default()
        });
    }

    /// Drop the added entries settled and admitted (what the receiver
    /// refuses of a window it says before admitting it: a refusal finds
    /// its entry still kept), up to the first one not: returns it (every
    /// entry below is settled).
    pub(crate) fn retire(&self) -> usize {
        let admitted = self.admitted() as usize;
        let mut w = self.window.write().unwrap_or_else(|p| p.into_inner());
        w.retire_while(admitted, |a| a.settled.load(Ordering::Acquire))
    }

    /// Added entries not settled yet (or not yet dropped).
    pub(crate) fn unsettled(&self) -> usize {
        self.window().len()
    }

    /// This side announced `digest` for added file `entry`.
    pub(crate) fn ours(&self, entry: u32, digest: u64) {
        self.added(entry, |a| a.ours.store(digest, Ordering::Release));
    }

    /// The receiver committed added file `entry` with `digest`, or (none)
    /// holds it unchanged: it is settled, when it was a file unsettled
    /// and (committed) the digest is this side's (one whose digest differs
    /// is left for the caller to settle).
    pub(crate) fn added_done(&self, entry: u32, digest: Option<u64>) -> Result<(), AddedFault> {
        let fault = self.added(entry, |a| {
            if !a.file || a.settled.load(Ordering::Acquire) {
                return Some(AddedFault::Unexpected);
            }
            if digest.is_some_and(|d| d != a.ours.load(Ordering::Acquire)) {
                // Left unsettled: the caller takes its name first.
                return Some(AddedFault::Differs);
            }
            if a.settled.swap(true, Ordering::AcqRel) {
                return Some(AddedFault::Unexpected);
            }
            self.files_done.fetch_add(1, Ordering::Relaxed);
            None
        });
        match fault {
            None => Err(AddedFault::Unexpected),
            Some(Some(f)) => Err(f),
            Some(None) => Ok(()),
        }
    }

    /// The receiver refused file `entry` while the data came: it waits for
    /// nothing more of it, and nothing more of it is sent.
    pub(crate) fn refuse(&self, entry: u32) {
        match self.refused.get(entry as usize) {
            Some(r) => r.store(true, Ordering::Release),
            None => {
                self.added(entry, |a| a.refused.store(true, Ordering::Release));
            }
        }
        self.settle(entry);
    }

    /// Whether the receiver refused file `entry`.
    pub(crate) fn is_refused(&self, entry: usize) -> bool {
        match self.refused.get(entry) {
            Some(r) => r.load(Ordering::Acquire),
            None => self
                .added(entry as u32, |a| a.refused.load(Ordering::Acquire))
                .unwrap_or(false),
        }
    }

    /// Entries below this the receiver has ready.
    pub(crate) fn admitted(&self) -> u32 {
        self.admitted.load(Ordering::Acquire)
    }

    /// Whether entry `entry` needs nothing more from this side (an added
    /// entry dropped once settled, or not added yet, does not).
    pub(crate) fn has(&self, entry: u32) -> bool {
        match self.acked.get(entry as usize) {
            Some(a) => a.load(Ordering::Relaxed),
            None => self
                .added(entry, |a| a.settled.load(Ordering::Relaxed))
                .unwrap_or(true),
        }
    }

    pub(super) fn all(&self) -> bool {
        self.acked.iter().all(|a| a.load(Ordering::Relaxed))
            && self
                .window()
                .iter()
                .all(|(_, a)| a.settled.load(Ordering::Relaxed))
    }

    pub(super) fn received_by(&self, stream: u32) -> u64 {
        self.received
            .get(stream as usize)
            .map_or(0, |a| a.load(Ordering::Relaxed))
    }

    pub(super) fn waiting_on(&self, stream: u32) -> bool {
        self.waiting
            .get(stream as usize)
            .is_some_and(|a| a.load(Ordering::Relaxed))
    }

    /// Entry `entry` was acknowledged: settled, and counted done once.
    pub(crate) fn acknowledged(&self, entry: u32) {
        let first = match self.acked.get(entry as usize) {
            Some(a) => !a.swap(true, Ordering::Relaxed),
            None => self
                .added(entry, |a| !a.settled.swap(true, Ordering::Relaxed))
                .unwrap_or(false),
        };
        if first {
            self.files_done.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Entry `entry` needs nothing more from this side.
    pub(crate) fn settle(&self, entry: u32) {
        match self.acked.get(entry as usize) {
            Some(a) => a.store(true, Ordering::Relaxed),
            None => {
                self.added(entry, |a| a.settled.store(true, Ordering::Relaxed));
            }
        }
    }
}

impl Ledger<'_> {
    pub(super) fn record(&mut self, stream: u32, mut s: Sent) {
        let st = stream as usize;
        let payload = u64::from(s.wire);
        let tag = if self.sealed {
            crate::protocol::seal::TAG_LEN as u64
        } else {
            0
        };
        self.queued[st] += FRAME_HEADER_LEN as u64 + payload + tag;
        s.end = self.queued[st];
        if self.sent[st].len() >= self.prune_at[st] {
            // Forget what arrived (the receiver said so) or whose file is
            // acknowledged.
            if let Some(acks) = self.acked {
                let arrived = acks.received_by(self.ids[st]);
                let before = self.sent[st].len();
                self.sent[st].retain(|r| r.end > arrived && !acks.has(r.entry));
                self.total -= before - self.sent[st].len();
            }
            self.prune_at[st] = (self.sent[st].len() * 2).max(LEDGER_RECORDS);
        }
        if self.total >= self.records_max {
            self.overflowed[st] = true;
            return;
        }
        self.total += 1;
        self.sent[st].push(s);
    }

    /// Whether record `r`, sent on the session's stream `id`, still has
    /// to go again.
    pub(super) fn undelivered(&self, id: u32, r: &Sent) -> bool {
        self.acked
            .is_none_or(|a| !a.has(r.entry) && r.end > a.received_by(id))
    }

    /// Every record still to go again, with the session's number of the
    /// stream that carried it (for another lane).
    pub(super) fn take_undelivered(&mut self) -> Vec<(u32, Sent)> {
        let mut out = Vec::new();
        for st in 0..self.sent.len() {
            let id = self.ids[st];
            let records = std::mem::take(&mut self.sent[st]);
            out.extend(
                records
                    .into_iter()
                    .filter(|r| self.undelivered(id, r))
                    .map(|r| (id, r)),
            );
        }
        self.total = 0;
        out
    }
}

impl Sent {
    /// Bytes of the file this frame's payload carries (the rest of its
    /// block is holes).
    pub(super) fn data_bytes(&self) -> u64 {
        match (self.hole, self.sparse) {
            (true, _) => 0,
            (false, false) => u64::from(self.len),
            (false, true) => {
                let map = crate::protocol::sparse::map_len(self.len as usize);
                u64::from(self.wire) - map as u64
            }
        }
    }
}
