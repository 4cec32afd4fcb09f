//! What a sending lane remembers: each frame a stream carried until the
//! receiver has it (`Sent`, `Ledger`, pruned as files arrive), and the
//! receiver's acknowledgements as the lanes share them (`Acks`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::protocol::frame::FRAME_HEADER_LEN;
use crate::protocol::manifest::EntryKind;

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
/// acknowledgements.
pub(crate) struct Acks {
    /// Acknowledged, rejected, or needing no acknowledgement.
    pub(crate) acked: Vec<AtomicBool>,
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
    pub(crate) refused: Vec<AtomicBool>,
    /// When the receiver first acknowledged a file.
    pub(crate) first_ack: std::sync::OnceLock<std::time::Instant>,
}

impl Acks {
    /// Entries needing no acknowledgement (not files, held complete and
    /// checked, refused by the receiver) start settled.
    pub(crate) fn new(
        tree: &Tree,
        held: &Held,
        added: usize,
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
            // Room for what a follow adds: settled until it is added.
            .chain((0..added).map(|_| AtomicBool::new(true)))
            .collect();
        Acks {
            acked,
            files_done: Arc::new(AtomicU64::new(held.complete.len() as u64)),
            ended: AtomicBool::new(false),
            received: (0..streams).map(|_| AtomicU64::new(0)).collect(),
            waiting: (0..streams).map(|_| AtomicBool::new(false)).collect(),
            admitted: std::sync::atomic::AtomicU32::new(tree.entries.len() as u32),
            refused: (0..tree.entries.len() + added)
                .map(|_| AtomicBool::new(false))
                .collect(),
            first_ack: std::sync::OnceLock::new(),
        }
    }

    /// The receiver refused file `entry` while the data came: it waits for
    /// nothing more of it, and nothing more of it is sent.
    pub(crate) fn refuse(&self, entry: u32) {
        if let Some(r) = self.refused.get(entry as usize) {
            r.store(true, Ordering::Release);
        }
        self.settle(entry);
    }

    /// Whether the receiver refused file `entry`.
    pub(crate) fn is_refused(&self, entry: usize) -> bool {
        self.refused
            .get(entry)
            .is_some_and(|r| r.load(Ordering::Acquire))
    }

    /// Entries below this the receiver has ready.
    pub(crate) fn admitted(&self) -> u32 {
        self.admitted.load(Ordering::Acquire)
    }

    /// Entry `entry`, added by a follow, waits for its acknowledgement.
    pub(crate) fn unsettle(&self, entry: u32) {
        if let Some(a) = self.acked.get(entry as usize) {
            a.store(false, Ordering::Release);
        }
    }

    pub(super) fn has(&self, entry: u32) -> bool {
        self.acked[entry as usize].load(Ordering::Relaxed)
    }

    pub(super) fn all(&self) -> bool {
        self.acked.iter().all(|a| a.load(Ordering::Relaxed))
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
        if let Some(a) = self.acked.get(entry as usize) {
            if !a.swap(true, Ordering::Relaxed) {
                self.files_done.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Entry `entry` needs nothing more from this side.
    pub(crate) fn settle(&self, entry: u32) {
        if let Some(a) = self.acked.get(entry as usize) {
            a.store(true, Ordering::Relaxed);
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
