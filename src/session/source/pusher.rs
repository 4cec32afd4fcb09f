//! One lane of a push: the state machine that reads a lane's pieces of
//! the work block by block into its frame buffers (O_DIRECT `READ_FIXED`),
//! checksums and seals each block, hands each frame to the next of its
//! streams that can take it, remembers what each stream carried until the
//! receiver has it, and repairs lost streams (its own frames, or those
//! another lane handed over). `source` runs the lanes.
//!
//! [`Pusher`] is the state machine; each tick of its loop runs named
//! steps: issue reads, take finished reads, repair lost streams, close
//! sources read through.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::coord::WorkerCounters;
use crate::datapath::net::{payload_mut, NetSender, SendStats};
use crate::datapath::{sys, Lease};
use crate::protocol::control::ErrorCode;
use crate::protocol::frame::{
    digest_add, frame_checksum, frame_terms, zero_terms, FrameHeader, FrameKey, FRAME_HEADER_LEN,
};
use crate::protocol::manifest::EntryKind;
use crate::protocol::sparse::Map;

use super::sending::{Announce, ControlAnnounce, Opener, PushParams, Sources, SENT_RECORDS_MAX};
use super::work::{End, Idle, Piece, Work};
use crate::session::link::lanes::Lane;
use crate::session::plan::extents::{map_of, Extents};
use crate::session::plan::held::Held;
use crate::session::plan::route::Route;
use crate::session::plan::tree::Tree;
use crate::session::SessionError;

/// Keeps the bytes sent under `rate * elapsed`.
struct Pacer<'a> {
    rate: Option<f64>,
    /// What every lane admitted so far, and since when: the limit holds
    /// for the push as a whole, however its lanes share the work.
    work: &'a Work,
    /// The push is stopped (the daemon closing, the client interrupted):
    /// a lane waiting for its turn waits no more.
    stop: &'a AtomicBool,
}

impl<'a> Pacer<'a> {
    fn new(rate: Option<f64>, work: &'a Work, stop: &'a AtomicBool) -> Self {
        Pacer { rate, work, stop }
    }

    /// How long until `bytes` more may go out (None: now).
    fn delay(&self, bytes: u64) -> Option<Duration> {
        let rate = self.rate?;
        let (sent, start) = self.work.paced();
        let due = (sent + bytes) as f64 / rate;
        let now = start.elapsed().as_secs_f64();
        (due > now).then(|| Duration::from_secs_f64(due - now))
    }

    /// Wait until `bytes` more may go out, keeping `tx` moving meanwhile
    /// (frames already admitted go out while this waits).
    fn admit(&mut self, bytes: u64, tx: &mut NetSender) -> Result<(), SessionError> {
        while let Some(d) = self.delay(bytes) {
            stopped(self.stop, self.work)?;
            tx.poll(false)?;
            std::thread::sleep(d.min(Duration::from_millis(5)));
        }
        self.work.pace(bytes);
        Ok(())
    }
}

/// What was done about lost streams.
#[derive(Debug, Default)]
struct Repair {
    /// Streams given up, with why.
    lost: Vec<String>,
    /// Frames sent again.
    resent: u64,
}

/// A frame sent on a stream, remembered until its file is acknowledged so
/// it can go again if the stream is lost.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sent {
    entry: u32,
    offset: u64,
    len: u32,
    checksum: u64,
    hole: bool,
    /// A sparse frame: its payload is its data pieces and their map.
    sparse: bool,
    /// Payload bytes on the wire (0 for a hole).
    wire: u32,
    /// Where the frame ends in its stream's bytes: once the receiver says
    /// it took this many, the frame arrived.
    end: u64,
}

/// Records each stream's ledger holds from the start (40 KiB): it is
/// pruned of what arrived when full, and grows only while more than half
/// of that is still on its way.
const LEDGER_RECORDS: usize = 1024;

/// Frames each stream carried, for re-sending when a stream is lost.
struct Ledger<'a> {
    sent: Vec<Vec<Sent>>,
    prune_at: Vec<usize>,
    /// Records were dropped past the bound: this stream cannot be re-sent.
    overflowed: Vec<bool>,
    acked: Option<&'a Acks>,
    /// The session's number of each of this lane's streams.
    ids: Vec<u32>,
    /// Bytes queued on each stream so far (headers, payloads, tags).
    queued: Vec<u64>,
    /// Frames carry a tag.
    sealed: bool,
    total: usize,
    /// This lane's share of [`SENT_RECORDS_MAX`].
    records_max: usize,
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
}

impl Acks {
    /// Entries needing no acknowledgement (not files, held complete and
    /// checked, refused by the receiver) start settled.
    pub(crate) fn new(
        tree: &Tree,
        (held, added): (&Held, usize),
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

    fn has(&self, entry: u32) -> bool {
        self.acked[entry as usize].load(Ordering::Relaxed)
    }

    fn all(&self) -> bool {
        self.acked.iter().all(|a| a.load(Ordering::Relaxed))
    }

    fn received_by(&self, stream: u32) -> u64 {
        self.received
            .get(stream as usize)
            .map_or(0, |a| a.load(Ordering::Relaxed))
    }

    fn waiting_on(&self, stream: u32) -> bool {
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
    fn record(&mut self, stream: u32, mut s: Sent) {
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
    fn undelivered(&self, id: u32, r: &Sent) -> bool {
        self.acked
            .is_none_or(|a| !a.has(r.entry) && r.end > a.received_by(id))
    }

    /// Every record still to go again, with the session's number of the
    /// stream that carried it (for another lane).
    fn take_undelivered(&mut self) -> Vec<(u32, Sent)> {
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

/// A source file being read.
struct Source {
    entry: usize,
    file: File,
    direct: bool,
    /// Where the file holds data, for a file with holes.
    extents: Option<Extents>,
    slot: Option<u32>,
    /// Where the file ends (size and mtime), when known as the piece
    /// began (a growing file's only once it ended).
    file_end: Option<End>,
    /// Where this lane's piece of it ends (the size, for a whole file).
    end: u64,
    /// Next offset to read.
    next: u64,
    /// Reads in flight.
    reads: u32,
    /// Block ranges (first, count) the receiver holds, sorted.
    skip: Vec<(u64, u64)>,
    /// Dropped (unreadable or changed): reads still in flight are discarded.
    dropped: bool,
}

impl Source {
    /// Move `next` past blocks the receiver holds already.
    fn skip_held(&mut self, block: u64) {
        while let Some(&(first, count)) = self.skip.first() {
            let b = self.next / block;
            // At the end of the file nothing is left to skip (a held range
            // ending with a short last block would otherwise loop forever).
            if b >= first + count || self.next >= self.end {
                self.skip.remove(0);
            } else if b >= first {
                self.next = ((first + count) * block).min(self.end);
            } else {
                break;
            }
        }
    }

    fn read_through(&self) -> bool {
        self.next >= self.end
    }
}

/// A read in flight: (entry, offset, payload bytes, index into the sources).
#[derive(Debug, Clone, Copy)]
struct Read {
    entry: usize,
    offset: u64,
    len: usize,
    source: usize,
}

/// A block of a source file, read into a frame buffer.
#[derive(Debug, Clone, Copy)]
struct Block {
    entry: usize,
    offset: u64,
    len: usize,
}

/// The lanes of a sending side for `streams` streams (`carrying` of them
/// carry data from the start: each lane needs one), each lane's sender
/// The held block ranges (`first`, `count`) of `ranges`, sorted, that
/// reach into `piece`: found by binary search, so a resumed file read in
/// many pieces costs no more than read whole.
fn held_within(ranges: &[(u64, u64)], block: u64, piece: &Piece) -> Vec<(u64, u64)> {
    let from = ranges.partition_point(|&(first, count)| (first + count) * block <= piece.start);
    ranges[from..]
        .iter()
        .take_while(|&&(first, _)| first * block < piece.end)
        .copied()
        .collect()
}

/// A lane stops when the push is stopped, or when another lane failed
/// (whose error, not this one, says why: [`ANOTHER_LANE_FAILED`]).
fn stopped(stop: &AtomicBool, work: &Work) -> Result<(), SessionError> {
    if stop.load(Ordering::Relaxed) {
        return Err(SessionError::local(
            ErrorCode::Interrupted,
            "interrupted (Ctrl-C)",
        ));
    }
    if work.failed() {
        return Err(SessionError::local(ErrorCode::Io, ANOTHER_LANE_FAILED));
    }
    Ok(())
}

/// Why a lane stopped when another failed.
pub(in crate::session) const ANOTHER_LANE_FAILED: &str = "another lane of this transfer failed";

/// What one lane did.
pub(in crate::session) struct LaneDone {
    pub(in crate::session) stats: SendStats,
    pub(in crate::session) lost: Vec<String>,
    pub(in crate::session) resent: u64,
    pub(in crate::session) skipped: Vec<(u32, String)>,
}

/// One lane of a push: pieces and orphaned frames until none are left and
/// every file is acknowledged (or it lost its streams and handed over).
pub(in crate::session) fn push_lane(
    params: &PushParams,
    from: &Sources<'_>,
    (lane, fds): (&Lane, &[i32]),
    work: &Work,
    counters: &WorkerCounters,
    stop: &AtomicBool,
    tx: NetSender,
) -> Result<LaneDone, SessionError> {
    let mut announce = ControlAnnounce::new(from.announce_on)?;
    let shared = (work, counters, stop);
    let mut p = Pusher::new(params, from, (lane, fds), shared, &mut announce, tx)?;
    // A lane counted idle takes no pieces and no orphans: it must first be
    // counted busy again (`Idle::Work`), or a lane could leave while work
    // it might have to take back is still under way.
    loop {
        if !p.idle {
            p.run(stop)?;
        }
        p.linger(stop)?;
        if p.handed_over {
            break;
        }
        match work.idle(lane.index, &mut p.idle) {
            Idle::Work => {}
            Idle::Done if !p.busy() => {
                work.leave(lane.index);
                break;
            }
            // Others work on, or this lane still sends frames of its own
            // (a stream it lost while idle).
            Idle::Wait | Idle::Done => p.wait_others(stop)?,
        }
    }
    Ok(LaneDone {
        stats: p.tx.stats(),
        lost: p.repair.lost,
        resent: p.repair.resent,
        skipped: p.skipped,
    })
}

/// The push's state (one lane's).
struct Pusher<'a> {
    params: &'a PushParams,
    tree: &'a Tree,
    held: &'a Held,
    open: &'a Opener<'a>,
    counters: &'a WorkerCounters,
    announce: &'a mut dyn Announce,
    work: &'a Work,
    lane: &'a Lane,
    /// Where the receiver writes each file, and the class of each of this
    /// lane's streams on it: a frame goes on a stream of its file's class.
    route: &'a Route,
    classes: Vec<usize>,
    /// The session's streams in all (this lane has its share of them).
    streams_all: u32,
    /// This lane's streams.
    fds: Vec<i32>,
    tx: NetSender,
    block: u64,
    next_stream: u32,
    /// Frames read and made, waiting for a stream to take them
    /// ([`dispatch`](Self::dispatch)).
    ready: VecDeque<(Lease, FrameHeader, Sent)>,
    pacer: Pacer<'a>,
    ledger: Ledger<'a>,
    repair: Repair,
    /// This lane's digest terms of each entry, not yet added to the work's.
    digests: Vec<u64>,
    reads: Vec<Option<Read>>,
    free_tokens: Vec<u32>,
    reads_max: usize,
    sources: Vec<Source>,
    /// The source being read (index into `sources`).
    current: Option<usize>,
    skipped: Vec<(u32, String)>,
    /// Every stream of this lane was lost and its frames went to others.
    handed_over: bool,
    /// This lane told the work it has nothing to do ([`Work::idle`]).
    idle: bool,
}

impl<'a> Pusher<'a> {
    fn new(
        params: &'a PushParams,
        from: &Sources<'a>,
        (lane, all): (&'a Lane, &[i32]),
        (work, counters, stop): (&'a Work, &'a WorkerCounters, &'a AtomicBool),
        announce: &'a mut dyn Announce,
        mut tx: NetSender,
    ) -> Result<Self, SessionError> {
        let fds = lane.fds(all);
        let bufs = tx.buffer_count();
        tx.number_streams(&lane.streams);
        tx.start(&fds)?;
        tx.set_stall_limit(params.timeout);
        tx.publish_stream_bytes(counters.streams());
        if let Some((keys, dir)) = &params.seal {
            tx.seal_with(keys, *dir);
        }
        let reads_max = (bufs / 2).max(1);
        let n = fds.len();
        Ok(Pusher {
            params,
            tree: from.tree,
            held: from.held,
            open: from.open,
            counters,
            announce,
            work,
            lane,
            route: from.route,
            classes: lane
                .streams
                .iter()
                .map(|&s| from.route.of_stream(s))
                .collect(),
            streams_all: all.len() as u32,
            tx,
            block: u64::from(params.block_size),
            next_stream: 0,
            ready: VecDeque::with_capacity(bufs),
            pacer: Pacer::new(params.rate_limit_bytes_per_s, work, stop),
            ledger: Ledger {
                sent: (0..n).map(|_| Vec::with_capacity(LEDGER_RECORDS)).collect(),
                prune_at: vec![LEDGER_RECORDS; n],
                overflowed: vec![false; n],
                acked: from.acked,
                ids: lane.streams.clone(),
                queued: vec![0; n],
                sealed: params.seal.is_some(),
                total: 0,
                records_max: SENT_RECORDS_MAX / work.lanes(),
            },
            repair: Repair::default(),
            digests: vec![0u64; work.slots()],
            reads: vec![None; reads_max],
            free_tokens: (0..reads_max as u32).rev().collect(),
            reads_max,
            sources: Vec::new(),
            current: None,
            skipped: Vec::new(),
            handed_over: false,
            idle: false,
            fds,
        })
    }

    /// Stop when asked, or when another lane failed.
    fn check_stop(&self, stop: &AtomicBool) -> Result<(), SessionError> {
        stopped(stop, self.work)
    }

    /// Read and queue everything, then hand every frame to the sockets.
    fn run(&mut self, stop: &AtomicBool) -> Result<(), SessionError> {
        while self.read_tick(stop)? {}
        if self.handed_over {
            return Ok(());
        }
        self.close_sources(true)?;
        self.announce.flush()?;
        while self.busy() && !self.handed_over {
            self.check_stop(stop)?;
            self.tx.poll(true)?;
            self.resend_lost()?;
            self.dispatch();
            self.announce.flush()?;
        }
        Ok(())
    }

    /// One tick while pieces are read: reads issued, the sender polled,
    /// finished reads made frames, lost streams repaired, frames handed to
    /// streams, sources read through closed, announcements sent. False
    /// once every piece is read and no read is in flight, or the lane
    /// handed its work over.
    fn read_tick(&mut self, stop: &AtomicBool) -> Result<bool, SessionError> {
        self.check_stop(stop)?;
        if self.handed_over {
            return Ok(false);
        }
        self.issue_reads()?;
        let in_flight = self.reads_max - self.free_tokens.len();
        // The issue step opens the next file before it asks for a buffer,
        // so an exhausted current file here means none is left.
        let current_done = self.current.is_none_or(|c| self.sources[c].read_through());
        if in_flight == 0 && current_done {
            return Ok(false);
        }
        self.tx.poll(true)?;
        self.take_reads()?;
        self.resend_lost()?;
        self.dispatch();
        self.close_sources(false)?;
        self.announce.flush()?;
        Ok(true)
    }

    /// Frames wait here or in the sender.
    fn busy(&self) -> bool {
        !self.ready.is_empty() || self.tx.busy()
    }

    /// Hand ready frames, oldest first, to streams that can take them (see
    /// [`NetSender::idle_stream`]), remembering what each carries.
    fn dispatch(&mut self) {
        let active = self.counters.active_streams(self.streams_all);
        let active = self.lane.active_of(active);
        if self.route.is_routed() {
            return self.dispatch_routed(active);
        }
        while !self.ready.is_empty() {
            let Some(st) = self.tx.idle_stream(&mut self.next_stream, active) else {
                return;
            };
            let (lease, h, r) = self.ready.pop_front().expect("not empty");
            self.ledger.record(st, r);
            self.tx.queue(st, lease, &h);
        }
    }

    /// [`dispatch`](Self::dispatch) on a route: each ready frame, oldest
    /// first, on a stream of its file's class that can take it (on any
    /// stream when its class has none live here); a frame whose class's
    /// streams are all busy waits, and those after it go on.
    fn dispatch_routed(&mut self, active: u32) {
        let mut i = 0;
        while i < self.ready.len() {
            let class = self.route.of_entry(self.ready[i].2.entry as usize);
            let classes = &self.classes;
            let stream = self
                .tx
                .idle_stream_among(&mut self.next_stream, active, |s| {
                    classes[s as usize] == class
                });
            let Some(st) = stream else {
                i += 1;
                continue;
            };
            let (lease, h, r) = self.ready.remove(i).expect("a frame at i");
            self.ledger.record(st, r);
            self.tx.queue(st, lease, &h);
        }
    }

    /// A frame made: it goes on the next stream that can take it.
    fn make_ready(&mut self, lease: Lease, h: FrameHeader, r: Sent) {
        self.ready.push_back((lease, h, r));
        self.dispatch();
    }

    /// Issue reads while buffers and tokens last.
    fn issue_reads(&mut self) -> Result<(), SessionError> {
        while !self.free_tokens.is_empty() {
            let Some(cur) = self.current_source()? else {
                return Ok(());
            };
            let block = self.block;
            let src = &mut self.sources[cur];
            src.skip_held(block);
            if src.read_through() {
                continue;
            }
            // Paced: reads already issued go out before waiting for more.
            let n = (src.end - src.next).min(block) as usize;
            if src.file_end.is_none() && !on_disk(&src.file, src.next, n as u64) {
                // A growing file's block not all written yet: later.
                let (entry, start, end) = (src.entry, src.next, src.end);
                self.work.defer(Piece { entry, start, end });
                src.end = start;
                continue;
            }
            let moving = self.free_tokens.len() < self.reads_max || !self.ready.is_empty();
            if moving && self.pacer.delay(n as u64).is_some() {
                return Ok(());
            }
            let Some(lease) = self.tx.take_buffer() else {
                return Ok(());
            };
            let offset = src.next;
            src.next += n as u64;
            self.read_block(cur, offset, n, lease)?;
        }
        Ok(())
    }

    /// The source being read, opening the next file when it is read
    /// through; a file that cannot be opened is skipped.
    fn current_source(&mut self) -> Result<Option<usize>, SessionError> {
        if let Some(c) = self.current.filter(|&c| !self.sources[c].read_through()) {
            return Ok(Some(c));
        }
        loop {
            let Some(piece) = self.work.take(self.lane.index) else {
                return Ok(None);
            };
            match (self.open)(piece.entry) {
                Ok((file, direct)) => {
                    self.add_source(piece, file, direct)?;
                    return Ok(self.current);
                }
                Err(why) => self.skip(piece.entry, why),
            }
        }
    }

    fn add_source(&mut self, piece: Piece, file: File, direct: bool) -> Result<(), SessionError> {
        let i = piece.entry;
        // A growing file's blocks all go as data (a hole frame past what
        // the receiver knows of it would not say how long it is).
        let sparse = !self.is_growing(i)
            && file.metadata().is_ok_and(|m| {
                use std::os::unix::fs::MetadataExt;
                m.blocks() * 512 < m.len()
            });
        // Learned once per file (its piece of it), not per block.
        let extents = sparse.then(|| Extents::of(&file, piece.start, piece.end));
        let slot = self.tx.attach_file(file.as_raw_fd())?;
        let skip = self
            .held
            .partial
            .get(&(i as u32))
            .map(|(_, r)| held_within(r, self.block, &piece))
            .unwrap_or_default();
        self.sources.push(Source {
            entry: i,
            file,
            direct,
            extents,
            slot,
            file_end: self.work.end_of(i),
            end: piece.end,
            next: piece.start,
            reads: 0,
            skip,
            dropped: false,
        });
        self.current = Some(self.sources.len() - 1);
        Ok(())
    }

    /// Whether entry `i` was followed as it grew (the manifest's growing
    /// files, and every file a follow added).
    fn is_growing(&self, i: usize) -> bool {
        self.tree.entries.get(i).is_none_or(|e| e.growing)
    }

    /// Drop entry `i`: the receiver is told and stops waiting for it (by
    /// the first lane to find out).
    fn skip(&mut self, i: usize, why: String) {
        if !self.work.drop_file(i) {
            return;
        }
        self.announce.skipped(i as u32, &why);
        if let Some(acks) = self.ledger.acked {
            acks.settle(i as u32);
        }
        self.skipped.push((i as u32, why));
    }

    /// Whether the receiver refused source `k`'s file while the data came:
    /// it is dropped here too (the receiver knows why; nothing to say).
    fn refused_here(&mut self, k: usize) -> bool {
        let entry = self.sources[k].entry;
        let refused = self.ledger.acked.is_some_and(|a| a.is_refused(entry));
        if refused && !self.sources[k].dropped {
            self.sources[k].dropped = true;
            self.sources[k].next = self.sources[k].end;
            self.work.drop_file(entry);
        }
        refused
    }

    /// Drop the source at `k` (unreadable, or changed) with `why`.
    fn drop_source(&mut self, k: usize, why: String) {
        if !self.sources[k].dropped {
            self.sources[k].dropped = true;
            self.sources[k].next = self.sources[k].end;
            let entry = self.sources[k].entry;
            self.skip(entry, why);
        }
    }

    /// Read block `offset` of source `cur` into `lease`: a hole becomes a
    /// header-only frame, a data block a ring read (or a pread when every
    /// file slot is busy).
    fn read_block(
        &mut self,
        cur: usize,
        offset: u64,
        n: usize,
        mut lease: Lease,
    ) -> Result<(), SessionError> {
        let src = &self.sources[cur];
        let i = src.entry;
        let last = src.file_end.is_some_and(|e| offset + n as u64 == e.0);
        let hole = src
            .extents
            .as_ref()
            .is_some_and(|e| e.is_hole(offset, n as u64));
        if hole {
            if last && !self.unchanged(cur) {
                self.tx.give_back(lease);
                return Ok(());
            }
            // Wholly a hole of the source: no data of it was counted.
            self.queue_hole(i, (offset, n), 0, lease);
            return Ok(());
        }
        self.pacer.admit(n as u64, &mut self.tx)?;
        let src = &mut self.sources[cur];
        let want = if src.direct {
            crate::datapath::direct::padded(n)
        } else {
            n
        };
        if let Some(slot) = src.slot {
            // O_DIRECT READ_FIXED into the frame buffer itself.
            let token = self.free_tokens.pop().expect("checked by the caller");
            self.reads[token as usize] = Some(Read {
                entry: i,
                offset,
                len: n,
                source: cur,
            });
            src.reads += 1;
            self.tx.read(slot, offset, lease, want as u32, token);
            return Ok(());
        }
        // Every slot busy: read here, into the same buffer.
        let got = read_full(&src.file, &mut payload_mut(&mut lease)[..want], offset, n);
        self.block_read(
            cur,
            Block {
                entry: i,
                offset,
                len: n,
            },
            got.map(|g| g as i64),
            lease,
        );
        Ok(())
    }

    /// Queue a hole block (no payload) of entry `i`; `expected`: the data
    /// bytes the total counted in it (zeros left out with `--sparse`).
    fn queue_hole(&mut self, i: usize, (offset, n): (u64, usize), expected: u64, lease: Lease) {
        let h = FrameHeader::hole(&self.params.key, i as u32, offset);
        self.digests[i] = digest_add(self.digests[i], zero_terms(offset, n as u64));
        let r = Sent {
            entry: i as u32,
            offset,
            len: n as u32,
            checksum: 0,
            hole: true,
            sparse: false,
            wire: 0,
            end: 0,
        };
        self.make_ready(lease, h, r);
        self.counters.add_unsent(expected);
    }

    /// Reads that finished in the ring.
    fn take_reads(&mut self) -> Result<(), SessionError> {
        while let Some((token, result, lease)) = self.tx.take_read() {
            let r = self.reads[token as usize].take().expect("a read in flight");
            self.free_tokens.push(token);
            self.sources[r.source].reads -= 1;
            let got = if result < 0 {
                Err(std::io::Error::from_raw_os_error(-result))
            } else {
                Ok(i64::from(result))
            };
            let b = Block {
                entry: r.entry,
                offset: r.offset,
                len: r.len,
            };
            self.block_read(r.source, b, got, lease);
        }
        Ok(())
    }

    /// A block was read into `lease` (`got` bytes, or why not): queue it,
    /// or drop its file when it could not be read whole or the file
    /// changed before its last block.
    fn block_read(&mut self, k: usize, b: Block, got: std::io::Result<i64>, mut lease: Lease) {
        if self.work.is_dropped(b.entry) && !self.sources[k].dropped {
            // Another lane dropped the file (and said so).
            self.sources[k].dropped = true;
            self.sources[k].next = self.sources[k].end;
        }
        if self.refused_here(k) || self.sources[k].dropped {
            self.tx.give_back(lease);
            return;
        }
        let why = match got {
            Err(e) => Some(format!("read error: {e}")),
            Ok(g) if (g as usize) < b.len => {
                Some("changed during the send (it is shorter than when the send began)".into())
            }
            Ok(_) => None,
        };
        if let Some(why) = why {
            self.tx.give_back(lease);
            self.drop_source(k, why);
            return;
        }
        // Before a file's last block goes, the file must still be what the
        // manifest said: the receiver finishes it on that block.
        let end = self.sources[k].file_end;
        if end.is_some_and(|e| b.offset + b.len as u64 == e.0) && !self.unchanged(k) {
            self.tx.give_back(lease);
            return;
        }
        let data = &payload_mut(&mut lease)[..b.len];
        // A growing file's blocks all go as data (see `add_source`).
        let zeros = self.params.zeros && !self.is_growing(b.entry);
        let extents = self.sources[k].extents.as_ref();
        let map = map_of(b.offset, data, extents, zeros);
        // The data the total counted in this block (a source's holes it
        // never counted).
        let end = b.offset + b.len as u64;
        let expected = extents.map_or(b.len as u64, |e| {
            e.data_bytes(b.offset, end).min(b.len as u64)
        });
        if map.as_ref().is_some_and(|m| m.present() == 0) {
            // Nothing but zeros the source does not hold (or, with
            // --sparse, zeros at all): a hole.
            self.queue_hole(b.entry, (b.offset, b.len), expected, lease);
            return;
        }
        let (h, r, terms) = frame_block(&self.params.key, (b, map), &mut lease);
        self.digests[b.entry] = digest_add(self.digests[b.entry], terms);
        self.make_ready(lease, h, r);
        self.counters.add(r.data_bytes(), 1);
        self.counters
            .add_unsent(expected.saturating_sub(r.data_bytes()));
    }

    /// Whether source `k` still has the size and mtime of the manifest;
    /// drops it (reported as changed) when not.
    fn unchanged(&mut self, k: usize) -> bool {
        let src = &self.sources[k];
        let Some(end) = src.file_end.or_else(|| self.work.end_of(src.entry)) else {
            return true;
        };
        match check_unchanged(&src.file, end, self.work.ctime_of(src.entry)) {
            Ok(()) => true,
            Err(why) => {
                self.drop_source(k, why);
                false
            }
        }
    }

    /// Close sources that are read through with no read in flight (all of
    /// them at the `end`), announcing the digest of each that is complete
    /// and unchanged. Indexes stay stable for reads in flight and `current`.
    fn close_sources(&mut self, end: bool) -> Result<(), SessionError> {
        let mut k = 0;
        while k < self.sources.len() {
            let f = &self.sources[k];
            let keep = f.reads > 0 || !f.read_through() || (Some(k) == self.current && !end);
            if keep {
                k += 1;
                continue;
            }
            self.piece_read(k);
            if let Some(slot) = self.sources[k].slot {
                self.tx.detach_file(slot);
            }
            self.sources.swap_remove(k);
            let moved = self.sources.len();
            if self.current == Some(k) {
                self.current = None;
            } else if self.current == Some(moved) {
                self.current = Some(k);
            }
            for r in self.reads.iter_mut().flatten() {
                if r.source == moved {
                    r.source = k;
                }
            }
        }
        Ok(())
    }

    /// Source `k`'s piece is read through: its digest terms go to the
    /// work's, and the lane that reads a file's last piece announces the
    /// file's digest, when the file is unchanged and was not dropped.
    fn piece_read(&mut self, k: usize) {
        let i = self.sources[k].entry;
        let terms = std::mem::take(&mut self.digests[i]);
        if self.sources[k].dropped || self.work.is_dropped(i) {
            return;
        }
        // Every piece, read through, must find the file as it was scanned
        // (its ctime too): a change during any piece's read, whatever
        // lane read the others, is never part of a digest announced.
        if !self.is_growing(i) && !self.unchanged(k) {
            return;
        }
        self.work.add_digest(i, terms);
        if let Some(digest) = self.work.piece_done(i) {
            if self.is_growing(i) {
                // Checked against the file as it ended, by its follower.
                self.work.finish_growing(i, digest);
            } else {
                self.announce.digest(i as u32, digest);
            }
        }
    }

    /// Send again, on the streams left, every frame a lost stream carried
    /// of files not yet acknowledged. The data is read again and must still
    /// have the checksum it had, or its file is skipped (the receiver drops
    /// blocks it already holds). A lane left without streams hands its
    /// frames to the other lanes; frames other lanes handed over go here.
    fn resend_lost(&mut self) -> Result<(), SessionError> {
        self.repair_streams()?;
        if self.handed_over || self.idle {
            return Ok(());
        }
        let orphans = self.work.take_orphans();
        self.resend(orphans)
    }

    /// This lane's lost streams: their frames go again on its others, or
    /// (none left) to the other lanes.
    fn repair_streams(&mut self) -> Result<(), SessionError> {
        self.check_receiver()?;
        loop {
            let lost = self.tx.take_lost();
            if lost.is_empty() {
                break;
            }
            for (s, why) in lost {
                let id = self.tx.stream_id(s);
                // A stream that carried nothing still wanted (the receiver
                // had every file it holds, or closed it once a file it was
                // bringing was dropped) is no loss to report.
                if self.carried_wanted(s) {
                    self.repair.lost.push(format!("stream {id}: {why}"));
                }
                if self.ledger.acked.is_some_and(Acks::all) {
                    // The receiver has every file: it may close streams early.
                    continue;
                }
                if self.tx.live_count() == 0 {
                    return self.hand_over(id, why);
                }
                if self.ledger.overflowed[s as usize] {
                    return Err(SessionError::io(
                        format!("stream {id} was lost with more frames than can be sent again"),
                        why,
                    ));
                }
                self.resend_stream(s)?;
            }
        }
        Ok(())
    }

    /// Every stream of this lane is lost: finish the reads in flight, give
    /// the unread rest of each piece back to the work and every frame still
    /// owed to the other lanes. With no other lane left (or frames
    /// forgotten past the ledger's bound), the push fails.
    fn hand_over(&mut self, last: u32, why: std::io::Error) -> Result<(), SessionError> {
        // What is read lands in frames the lost streams drop, but recorded.
        while self.free_tokens.len() < self.reads_max {
            self.tx.poll(true)?;
            self.take_reads()?;
            self.dispatch();
        }
        self.dispatch();
        for src in &mut self.sources {
            if !src.dropped && src.next < src.end {
                let rest = Piece {
                    entry: src.entry,
                    start: src.next,
                    end: src.end,
                };
                self.work.split_off(rest);
                src.end = src.next;
            }
        }
        self.close_sources(true)?;
        let frames = self.ledger.take_undelivered();
        if self.ledger.overflowed.iter().any(|&o| o)
            || !self.work.hand_over(self.lane.index, frames, self.idle)
        {
            return Err(SessionError::io(
                format!(
                    "every data stream was lost: the receiver stopped taking data or closed them (last, stream {last})"
                ),
                why,
            ));
        }
        self.handed_over = true;
        Ok(())
    }

    /// A receiver that stopped talking (the reader of its messages gave up:
    /// it heard nothing for `--timeout`, while a live one beats every half
    /// second) with files unacknowledged ends the push. Its kernel may
    /// still acknowledge bytes into socket buffers nobody reads, which no
    /// TCP-level clock can tell from progress.
    fn check_receiver(&self) -> Result<(), SessionError> {
        match self.ledger.acked {
            Some(acks) if acks.ended.load(Ordering::Acquire) && !acks.all() => {
                Err(SessionError::io(
                    "the receiver",
                    // A connection loss: a refusal the reader got instead
                    // is the reason reported.
                    std::io::Error::new(
                        std::io::ErrorKind::ConnectionAborted,
                        format!(
                            "it went silent (nothing for {} s: stopped, overloaded or gone)",
                            self.params.timeout.as_secs()
                        ),
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// Whether stream `s` carried frames not delivered of files the
    /// receiver still wants (not dropped, not acknowledged).
    fn carried_wanted(&self, s: u32) -> bool {
        let id = self.tx.stream_id(s);
        let acked = |entry: u32| {
            self.ledger
                .acked
                .and_then(|a| a.acked.get(entry as usize))
                .is_some_and(|a| a.load(Ordering::Relaxed))
        };
        self.ledger.sent[s as usize].iter().any(|r| {
            self.ledger.undelivered(id, r)
                && !self.work.is_dropped(r.entry as usize)
                && !acked(r.entry)
        })
    }

    fn resend_stream(&mut self, s: u32) -> Result<(), SessionError> {
        let records = std::mem::take(&mut self.ledger.sent[s as usize]);
        self.ledger.total -= records.len();
        let id = self.tx.stream_id(s);
        self.resend(records.into_iter().map(|r| (id, r)).collect())
    }

    /// Send `records` again (each with the session's number of the stream
    /// that carried it): those not delivered, of files not skipped.
    fn resend(&mut self, records: Vec<(u32, Sent)>) -> Result<(), SessionError> {
        let mut files: HashMap<u32, Option<(File, bool)>> = HashMap::new();
        for (id, r) in records {
            if !self.ledger.undelivered(id, &r) || self.work.is_dropped(r.entry as usize) {
                continue;
            }
            let mut lease = self.buffer()?;
            let h = if r.hole {
                Some(FrameHeader::hole(&self.params.key, r.entry, r.offset))
            } else {
                let open = self.open;
                let src = files
                    .entry(r.entry)
                    .or_insert_with(|| open(r.entry as usize).ok());
                let keys = (&self.params.key, self.params.zeros);
                src.as_ref()
                    .and_then(|(file, direct)| reread((file, *direct), &r, keys, &mut lease))
            };
            let Some(h) = h else {
                self.tx.give_back(lease);
                files.insert(r.entry, None);
                let why = "changed or vanished before its lost frames could be sent again";
                self.skip(r.entry as usize, why.into());
                continue;
            };
            let r = Sent {
                wire: h.length,
                ..r
            };
            self.counters.add(r.data_bytes(), 1);
            self.make_ready(lease, h, r);
            self.repair.resent += 1;
        }
        Ok(())
    }

    /// Nothing to do while other lanes work: keep this lane's frames
    /// moving, its own lost streams repaired and its announcements sent.
    /// Work handed over by another lane is taken by the caller, which first
    /// counts this lane busy again ([`Work::idle`]).
    fn wait_others(&mut self, stop: &AtomicBool) -> Result<(), SessionError> {
        self.check_stop(stop)?;
        if self.busy() {
            self.tx.poll(true)?;
            self.dispatch();
        } else {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.repair_streams()?;
        self.announce.flush()
    }

    /// A free buffer, waiting for one (frames ready meanwhile go out).
    fn buffer(&mut self) -> Result<Lease, SessionError> {
        loop {
            if let Some(l) = self.tx.take_buffer() {
                return Ok(l);
            }
            self.dispatch();
            self.tx.poll(true)?;
        }
    }

    /// Everything is in the sockets. Keep the streams until every file is
    /// acknowledged, and give up a stream that (a) its kernel says is no
    /// longer connected, (b) holds bytes that stopped leaving its socket
    /// while other streams' bytes still leave theirs, or (c) had every
    /// byte acknowledged by the peer's TCP yet delivered to a receiver
    /// waiting for it never arrived (a middlebox or path holding them). A
    /// receiver that is only slow (its disk pauses) trips none of these.
    fn linger(&mut self, stop: &AtomicBool) -> Result<(), SessionError> {
        let Some(acks) = self.ledger.acked else {
            return Ok(());
        };
        let mut watch = StallWatch::new(self.fds.len(), self.params.timeout / 2);
        while !acks.all() && !acks.ended.load(Ordering::Acquire) {
            self.check_stop(stop)?;
            if self.handed_over || self.work.has_more_now(self.lane.index) {
                // Pieces or frames another lane could not send: run again.
                return Ok(());
            }
            if self.busy() {
                self.tx.poll(true)?;
                self.dispatch();
            } else {
                std::thread::sleep(Duration::from_millis(20));
            }
            watch.look(&mut self.tx, (&self.fds, &self.lane.streams), acks);
            self.resend_lost()?;
            self.announce.flush()?;
        }
        Ok(())
    }
}

/// Per stream: when its unacknowledged bytes and its delivered bytes last
/// moved, to tell a stalled stream from a slow receiver.
struct StallWatch {
    half: Duration,
    outq: Vec<(usize, Instant)>,
    arrived: Vec<(u64, Instant)>,
    outq_moved: Instant,
}

impl StallWatch {
    fn new(n: usize, half: Duration) -> Self {
        let start = Instant::now();
        StallWatch {
            half,
            outq: vec![(0, start); n],
            arrived: vec![(0, start); n],
            outq_moved: start,
        }
    }

    fn look(&mut self, tx: &mut NetSender, (fds, ids): (&[i32], &[u32]), acks: &Acks) {
        let now = Instant::now();
        let mut stuck = Vec::new();
        for st in 0..fds.len() as u32 {
            if !tx.is_live(st) {
                continue;
            }
            if sys::tcp_progress(fds[st as usize]).is_some_and(|t| !t.connected) {
                tx.lose(
                    st,
                    lost(
                        "the connection closed".into(),
                        std::io::ErrorKind::ConnectionReset,
                    ),
                );
                continue;
            }
            let q = tx.unacknowledged(st);
            let (last, since) = &mut self.outq[st as usize];
            if q < *last {
                self.outq_moved = now;
            }
            if q == 0 || q != *last {
                (*last, *since) = (q, now);
            } else if now.duration_since(*since) > self.half {
                stuck.push((st, q));
            }
            let id = ids[st as usize];
            let got = acks.received_by(id);
            let (last, since) = &mut self.arrived[st as usize];
            if got >= tx.stream_bytes(st) || got != *last || q != 0 || !acks.waiting_on(id) {
                (*last, *since) = (got, now);
            } else if now.duration_since(*since) > self.half {
                let behind = tx.stream_bytes(st) - got;
                let why = format!(
                    "stalled: {behind} bytes the peer's TCP took never reached the receiver in {} s",
                    self.half.as_secs()
                );
                tx.lose(st, lost(why, std::io::ErrorKind::TimedOut));
            }
        }
        if now.duration_since(self.outq_moved) < self.half {
            for (st, q) in stuck {
                let why = format!(
                    "stalled: {q} bytes unacknowledged for {} s while other streams moved",
                    self.half.as_secs()
                );
                tx.lose(st, lost(why, std::io::ErrorKind::TimedOut));
            }
        }
    }
}

fn lost(why: String, kind: std::io::ErrorKind) -> std::io::Error {
    std::io::Error::new(kind, why)
}

/// Read record `r`'s block again into `lease`; its header, when the data
/// still has the checksum it had (a sparse block packed again: its holes
/// found anew, with `zeros` its zeros too).
fn reread(
    (file, direct): (&File, bool),
    r: &Sent,
    (key, zeros): (&FrameKey, bool),
    lease: &mut Lease,
) -> Option<FrameHeader> {
    let n = r.len as usize;
    let want = if direct {
        crate::datapath::direct::padded(n)
    } else {
        n
    };
    let got = read_full(file, &mut payload_mut(lease)[..want], r.offset, n).ok()?;
    if got < n {
        return None;
    }
    let extents = r
        .sparse
        .then(|| Extents::of(file, r.offset, r.offset + n as u64));
    let data = &payload_mut(lease)[..n];
    let map = match r.sparse {
        true => map_of(r.offset, data, extents.as_ref(), zeros).filter(|m| m.present() > 0),
        false => None,
    };
    let b = Block {
        entry: r.entry as usize,
        offset: r.offset,
        len: n,
    };
    let (h, again, _) = frame_block(key, (b, map), lease);
    (h.checksum == r.checksum && again.sparse == r.sparse).then_some(h)
}

impl Sent {
    /// Bytes of the file this frame's payload carries (the rest of its
    /// block is holes).
    fn data_bytes(&self) -> u64 {
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

/// Checksum a block read into `lease`; with a `map`, pack it as a sparse
/// frame (only the pieces the map keeps, then the map). Returns its frame
/// header, with a checksum made with `key` over the whole block, the
/// record that lets it go again should its stream be lost, and the
/// block's digest terms (for its file's digest).
fn frame_block(
    key: &FrameKey,
    (b, map): (Block, Option<Map>),
    lease: &mut Lease,
) -> (FrameHeader, Sent, u64) {
    let (terms, keyed) = frame_terms(key, b.offset, &payload_mut(lease)[..b.len]);
    let plain = FrameHeader {
        flags: 0,
        file_index: b.entry as u32,
        length: b.len as u32,
        span: 0,
        offset: b.offset,
        checksum: frame_checksum(key, b.entry as u32, b.offset, b.len as u32, keyed),
    };
    let h = match &map {
        Some(m) => plain.packed(crate::protocol::sparse::pack(payload_mut(lease), m)),
        None => plain,
    };
    let r = Sent {
        entry: b.entry as u32,
        offset: b.offset,
        len: b.len as u32,
        checksum: h.checksum,
        hole: false,
        sparse: map.is_some(),
        wire: h.length,
        end: 0,
    };
    (h, r, terms)
}

/// A source read through must still have the size and mtime the manifest
/// announced, and the ctime it was scanned with (`ctime`, where known): a
/// file still being written, or rewritten in place with its mtime put
/// back, is reported, not sent half-old.
pub(in crate::session) fn check_unchanged(
    file: &File,
    (size, mtime_s, mtime_ns): End,
    ctime: Option<(i64, u32)>,
) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata().map_err(|err| format!("stat: {err}"))?;
    if m.len() != size {
        return Err(format!(
            "changed during the send (size {size} -> {}); send it again when it is complete",
            m.len()
        ));
    }
    if m.mtime() != mtime_s || m.mtime_nsec() as u32 != mtime_ns {
        return Err("changed during the send (modified); send it again when it is complete".into());
    }
    if ctime.is_some_and(|c| c != (m.ctime(), m.ctime_nsec() as u32)) {
        return Err(
            "changed during the send (its ctime moved: written or changed, its mtime put back); send it again"
                .into(),
        );
    }
    Ok(())
}

/// Whether `[offset, offset + len)` of `file` is all data on disk (no
/// hole: a growing file's blocks a writer has not landed yet are holes).
fn on_disk(file: &File, offset: u64, len: u64) -> bool {
    match sys::seek_hole(file, offset) {
        Ok(Some(hole)) => hole >= offset + len,
        Ok(None) => false,
        // No SEEK_HOLE here: the size says it.
        Err(_) => file.metadata().is_ok_and(|m| m.len() >= offset + len),
    }
}

/// Read at least `n` bytes at `offset` into `buf` (up to its length);
/// returns how many arrived (fewer than `n` only at end of file).
fn read_full(file: &File, buf: &mut [u8], offset: u64, n: usize) -> std::io::Result<usize> {
    let mut got = 0;
    while got < n {
        let r = file.read_at(&mut buf[got..], offset + got as u64)?;
        if r == 0 {
            break;
        }
        got += r;
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(size: u64, skip: Vec<(u64, u64)>) -> Source {
        Source {
            entry: 0,
            file: tempfile::tempfile().unwrap(),
            direct: false,
            extents: None,
            slot: None,
            file_end: Some((size, 0, 0)),
            end: size,
            next: 0,
            reads: 0,
            skip,
            dropped: false,
        }
    }

    /// A lane waiting for its turn under --rate-limit stops when the push
    /// is stopped (a daemon's closing must reach its client within the
    /// grace it gives), not when its turn comes.
    #[test]
    fn a_paced_lane_stops_waiting_when_the_push_is_stopped() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![1u8; 4096]).unwrap();
        let tree =
            crate::session::plan::tree::scan(std::slice::from_ref(&path), &Default::default())
                .unwrap();
        let held = Held::default();
        let work = Work::new(&tree, &held, 1, 4096);
        let stop = AtomicBool::new(false);
        // One byte a second: ten bytes are ten seconds away.
        let mut pacer = Pacer::new(Some(1.0), &work, &stop);
        let mut tx =
            NetSender::prepare(1, 2, 4096, crate::datapath::net::ZeroCopy::Off, 2).unwrap();
        let (out, _sink) = pair();
        tx.start(&[out.as_raw_fd()]).unwrap();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(200));
                stop.store(true, Ordering::Relaxed);
            });
            let start = std::time::Instant::now();
            let e = pacer.admit(10, &mut tx).unwrap_err();
            assert!(e.to_string().contains("interrupted"), "{e}");
            assert!(start.elapsed() < Duration::from_secs(5));
        });
    }

    #[test]
    fn a_piece_of_a_file_skips_held_blocks_and_ends_at_its_end() {
        let block = 4096;
        // Blocks 4..8 of a 10-block file; the receiver holds 3..5.
        let mut s = source(10 * block, vec![(3, 2)]);
        (s.next, s.end) = (4 * block, 8 * block);
        s.skip_held(block);
        assert_eq!(s.next, 5 * block, "block 4 is held");
        assert!(!s.read_through());
        s.next = 8 * block;
        assert!(s.read_through(), "the piece ends before the file");
        // A held range past the piece's end stops at it.
        let mut s = source(10 * block, vec![(6, 4)]);
        (s.next, s.end) = (6 * block, 8 * block);
        s.skip_held(block);
        assert_eq!(s.next, 8 * block);
        assert!(s.read_through());
    }

    #[test]
    fn held_blocks_are_skipped_up_to_a_short_last_block() {
        let block = 4096;
        let mut s = source(10 * block + 5, vec![(0, 2), (4, 1), (9, 2)]);
        s.skip_held(block);
        assert_eq!(s.next, 2 * block, "the first two blocks are held");
        s.next = 4 * block;
        s.skip_held(block);
        assert_eq!(s.next, 5 * block);
        // The last range ends with the short last block: the file is done
        // (this once looped forever), on a thread so a regression fails.
        s.next = 9 * block;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            s.skip_held(block);
            let _ = tx.send((s.next, s.end, s.skip.len()));
        });
        let (next, size, left) = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("skip_held returns");
        assert_eq!((next, left), (size, 0));
    }

    struct Quiet;

    impl Announce for Quiet {
        fn digest(&mut self, _: u32, _: u64) {}
        fn skipped(&mut self, _: u32, _: &str) {}
        fn flush(&mut self) -> Result<(), SessionError> {
            Ok(())
        }
    }

    /// A connected loopback pair.
    fn pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (a, l.accept().unwrap().0)
    }

    #[test]
    fn a_lanes_read_tick_allocates_nothing_while_a_file_streams_out() {
        use crate::datapath::alloc_count::allocations_during;
        use std::io::Read;
        const BLOCK: u64 = 64 << 10;
        // 2,048 frames: the ledger is pruned (at 1,024 records) in the
        // middle, as the receiver says what it took.
        const SIZE: u64 = 128 << 20;
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join("big");
        let data: Vec<u8> = (0..SIZE).map(|i| (i / BLOCK) as u8 ^ 0x5a).collect();
        std::fs::write(&path, &data).unwrap();
        let tree =
            crate::session::plan::tree::scan(std::slice::from_ref(&path), &Default::default())
                .unwrap();
        let held = Held::default();
        let acks = Acks::new(&tree, (&held, 0), 1, &[]);
        let open = |_: usize| {
            File::open(&path)
                .map(|f| (f, false))
                .map_err(|e| e.to_string())
        };
        let (ctl, _ctl_peer) = pair();
        let ctl = crate::session::link::conn::Control::new(ctl);
        let route = Route::none();
        let from = Sources {
            tree: &tree,
            held: &held,
            acked: Some(&acks),
            open: &open,
            announce_on: &ctl,
            route: &route,
            follow: None,
        };
        let params = PushParams {
            block_size: BLOCK as u32,
            buffers: 8,
            zerocopy: crate::datapath::net::ZeroCopy::Off,
            rate_limit_bytes_per_s: None,
            timeout: Duration::from_secs(10),
            seal: None,
            key: FrameKey { k0: 1, k1: 2 },
            zeros: false,
        };
        let (out, mut sink) = pair();
        // A failure below must not leave the receiver waiting for ever.
        sink.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let lane = Lane {
            index: 0,
            streams: vec![0],
            cpu: None,
        };
        let work = Work::new(&tree, &held, 1, BLOCK);
        let counters = WorkerCounters::default();
        let stop = AtomicBool::new(false);
        let tx = NetSender::prepare(1, 8, BLOCK as usize, params.zerocopy, 8).unwrap();
        std::thread::scope(|scope| {
            // The receiver: takes every byte and says how many (as its
            // heartbeats do), which lets the ledger forget what arrived.
            let acks = &acks;
            let taken = scope.spawn(move || {
                let mut buf = vec![0u8; 1 << 20];
                let mut got = 0u64;
                while let Ok(n @ 1..) = sink.read(&mut buf) {
                    got += n as u64;
                    acks.received[0].store(got, Ordering::Relaxed);
                }
                got
            });
            let mut quiet = Quiet;
            let fds = [out.as_raw_fd()];
            let mut p = Pusher::new(
                &params,
                &from,
                (&lane, &fds),
                (&work, &counters, &stop),
                &mut quiet,
                tx,
            )
            .unwrap();
            let sent = |p: &Pusher| p.tx.stats().bytes;
            while sent(&p) < SIZE / 4 {
                assert!(p.read_tick(&stop).unwrap());
            }
            let ((), allocs) = allocations_during(|| {
                while sent(&p) < SIZE * 3 / 4 {
                    assert!(p.read_tick(&stop).unwrap());
                }
            });
            assert_eq!(
                allocs, 0,
                "a read tick allocated while the file streamed out"
            );
            p.run(&stop).unwrap();
            // Records of frames the receiver took were forgotten on the way.
            let frames = (SIZE / BLOCK) as usize;
            assert!(p.ledger.total < frames, "the ledger was never pruned");
            drop(p);
            out.shutdown(std::net::Shutdown::Write).unwrap();
            let frames = SIZE / BLOCK;
            assert_eq!(
                taken.join().unwrap(),
                SIZE + frames * FRAME_HEADER_LEN as u64
            );
        });
    }
}
