//! The receive loop: frames off the data streams into registered buffers,
//! each checked against its file's block layout and checksum, written with
//! O_DIRECT straight from its buffer, and each file handed to a finalizer
//! once it is written and the sender's digest of its source is known.
//!
//! The loop is a state machine ([`Sink`]) whose tick runs named steps:
//! poll the streams, handle what arrived, hear the peer (digests, skipped
//! entries, its end), journal files still arriving, take finished jobs,
//! and check that the sender keeps a minimum rate.

use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::datapath::beneath::Root;
use crate::datapath::net::{payload, NetReceiver, RecvEvent, HEADROOM};
use crate::datapath::{DirectMode, Lease};
use crate::protocol::control::ErrorCode;
use crate::protocol::frame::{zero_terms, FrameHeader, FrameKey, FRAME_HEADER_LEN};

use super::commit::{self, FinalJob, JournalJob, Outcome};
use super::journal::Journal;
use super::receive::{FileState, Incoming, RecvFile, Rules};
use super::SessionError;

/// Threads that sync and rename complete files.
const FINALIZERS: usize = 4;
/// Complete files waiting for a finalizer, at most.
const FINALIZE_BACKLOG_MAX: usize = 64;
/// Files written through the receiving ring at once (registered slots).
const FILE_SLOTS: u32 = 64;
/// Part files one session holds open at once (descriptors).
const OPEN_PARTS_MAX: usize = 128;
/// A file with new blocks gets its journal rewritten this often, at most.
const JOURNAL_INTERVAL: Duration = Duration::from_secs(1);
/// How often the sender's rate is looked at.
const PACE_EVERY: Duration = Duration::from_secs(1);

/// The other side's words while data flows, from its reader thread, and
/// the eventfd that thread rings so a receive loop asleep in its ring
/// wakes to hear them.
pub(crate) struct Peer {
    pub(crate) events: mpsc::Receiver<PeerEvent>,
    pub(crate) waker: std::sync::Arc<crate::datapath::sys::Waker>,
}

/// What the other side says on the control connection while data flows.
#[derive(Debug)]
pub(crate) enum PeerEvent {
    /// The sender's digest of each file it read through: (entry, digest).
    Digests(Vec<(u32, u64)>),
    /// The sender dropped an entry: (entry, why).
    Skipped(u32, String),
    /// The sender's summary (pull: the daemon is done sending).
    Summary { files: u64, bytes: u64, ok: bool },
    /// The control connection ended: cleanly (`None`) or with the peer's
    /// error or a broken connection.
    Closed(Option<SessionError>),
}

/// A receiver for `streams` streams with `count` buffers of `payload_max`
/// bytes, registered now (before any peer is contacted) and started by
/// [`Incoming::receive`] on the thread that runs it.
pub(crate) fn prepare_receiver(
    streams: usize,
    count: usize,
    payload_max: usize,
) -> Result<NetReceiver, SessionError> {
    Ok(NetReceiver::prepare(
        streams,
        count,
        payload_max,
        FILE_SLOTS,
    )?)
}

/// How long the sender may be silent, and how slow it may be.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    /// No `min_rate` worth of bytes in this long (while this side waits
    /// for them) ends the session.
    pub(crate) timeout: Duration,
    pub(crate) min_rate_bytes_per_s: u64,
}

/// What the receive loop reports as it goes.
pub(crate) trait Landing {
    /// Payload bytes of a batch of frames.
    fn progress(&mut self, bytes: u64);
    /// A file is under its final name.
    fn committed(&mut self, file_index: u32, digest: u64) -> Result<(), SessionError>;
    /// A file differed from the source and was not committed.
    fn rejected(&mut self, file_index: u32, digest: u64) -> Result<(), SessionError>;
    /// At least every second: each stream's delivered bytes and whether a
    /// receive waits on it (for heartbeats).
    fn tick(&mut self, streams: &[(u64, bool)]) -> Result<(), SessionError>;
}

/// Work for the finalizer threads.
enum Job {
    Finish(FinalJob),
    Journal(JournalJob),
}

enum JobDone {
    Finished(Result<Outcome, SessionError>),
    Journaled(u32, Result<u64, SessionError>),
}

/// Bytes over the last window, against the minimum rate.
struct RateWindow {
    start: Instant,
    bytes_at_start: u64,
    last_look: Instant,
}

impl Incoming {
    /// Take frames from `streams` until every file is committed, rejected or
    /// skipped (or the streams and the peer have nothing more), reporting
    /// to `out`. A stream that breaks is noted and the others go on (the
    /// sender re-sends what it carried); a sender below the minimum rate
    /// for `pace.timeout` ends the session.
    /// `rx` comes from [`prepare_receiver`], started here on `streams`;
    /// frames are checked under `key` and opened with `open` if sealed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn receive(
        &mut self,
        streams: &[TcpStream],
        mut rx: NetReceiver,
        pace: Pace,
        (key, open): (&FrameKey, &super::send::Sealing),
        peer: &Peer,
        out: &mut dyn Landing,
    ) -> Result<(), SessionError> {
        let fds: Vec<i32> = streams.iter().map(|st| st.as_raw_fd()).collect();
        rx.start(&fds)?;
        rx.wake_on(peer.waker.raw());
        rx.set_wait_limit((pace.timeout / 4).min(Duration::from_secs(1)));
        if let Some((keys, dir)) = open {
            rx.open_with(keys, *dir);
        }
        let Incoming {
            root,
            files,
            block,
            direct,
            rules,
            ..
        } = self;
        let (root, rules): (&Root, &Rules) = (root, rules);
        let (job_tx, job_rx) = mpsc::channel::<Job>();
        let job_rx = std::sync::Mutex::new(job_rx);
        let (done_tx, done_rx) = mpsc::channel::<JobDone>();
        let mut tally = Tally::default();
        let result = std::thread::scope(|scope| {
            for _ in 0..FINALIZERS {
                let (job_rx, done_tx, waker) = (&job_rx, done_tx.clone(), &*peer.waker);
                scope.spawn(move || finalizer(root, job_rx, done_tx, waker));
            }
            drop(done_tx);
            let mut sink = Sink {
                root,
                direct: *direct,
                rules,
                block: *block,
                key: *key,
                remaining: files
                    .iter()
                    .flatten()
                    .filter(|f| f.state == FileState::Receiving)
                    .count(),
                open_parts: files.iter().flatten().filter(|f| f.part.is_some()).count(),
                open_order: std::collections::VecDeque::new(),
                files,
                rx,
                jobs: job_tx,
                results: done_rx,
                pending: 0,
                dirty: Vec::new(),
                last_sweep: Instant::now(),
                peer: &peer.events,
                peer_open: true,
                peer_heard: Instant::now(),
                pace,
                window: RateWindow {
                    start: Instant::now(),
                    bytes_at_start: 0,
                    last_look: Instant::now(),
                },
                tally: &mut tally,
                out,
            };
            let r = sink.run();
            // Finish what is in hand (even after a failure: complete files
            // are complete), then stop the finalizers.
            let drained = sink.drain();
            r.and(drained)
        });
        self.absorb(tally);
        result
    }

    fn absorb(&mut self, t: Tally) {
        self.done_files += t.done_files;
        self.bytes += t.bytes;
        self.skipped.extend(t.skipped);
        self.rejected.extend(t.rejected);
        self.lost_streams.extend(t.lost_streams);
        self.journal_bytes += t.journal_bytes;
        if let Some(s) = t.summary {
            self.peer_summary = Some(s);
        }
    }
}

/// What the loop counted, handed back to the `Incoming` when it ends.
#[derive(Default)]
struct Tally {
    done_files: usize,
    bytes: u64,
    skipped: Vec<(u32, String)>,
    rejected: Vec<u32>,
    lost_streams: Vec<String>,
    journal_bytes: u64,
    summary: Option<(u64, u64, bool)>,
}

/// A finalizer thread: take jobs until there are none, post each result
/// and ring the receive loop awake for it.
fn finalizer(
    root: &Root,
    jobs: &std::sync::Mutex<mpsc::Receiver<Job>>,
    done: mpsc::Sender<JobDone>,
    waker: &crate::datapath::sys::Waker,
) {
    loop {
        let job = jobs.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let r = match job {
            Ok(Job::Finish(job)) => JobDone::Finished(commit::run(root, job)),
            Ok(Job::Journal(j)) => {
                let index = j.index;
                JobDone::Journaled(index, commit::write_journal(root, j))
            }
            Err(_) => return,
        };
        if done.send(r).is_err() {
            return;
        }
        waker.wake();
    }
}

/// The receive loop's state.
struct Sink<'s> {
    root: &'s Root,
    direct: DirectMode,
    rules: &'s Rules,
    block: u64,
    /// The session's frame checksum key.
    key: FrameKey,
    files: &'s mut Vec<Option<RecvFile>>,
    rx: NetReceiver,
    jobs: mpsc::Sender<Job>,
    results: mpsc::Receiver<JobDone>,
    /// Jobs handed to the finalizers and not yet back.
    pending: usize,
    /// Files with blocks written since their last journal.
    dirty: Vec<usize>,
    last_sweep: Instant,
    /// Files still receiving or finishing.
    remaining: usize,
    /// Parts open now, in the order they were opened (for closing idle ones).
    open_parts: usize,
    open_order: std::collections::VecDeque<usize>,
    peer: &'s mpsc::Receiver<PeerEvent>,
    peer_open: bool,
    /// When the peer last said something on the control connection.
    peer_heard: Instant,
    pace: Pace,
    window: RateWindow,
    tally: &'s mut Tally,
    out: &'s mut dyn Landing,
}

impl Sink<'_> {
    fn run(&mut self) -> Result<(), SessionError> {
        while self.remaining > 0 && (self.streams_busy() || self.awaits_peer()) {
            self.step()?;
        }
        Ok(())
    }

    fn streams_busy(&self) -> bool {
        self.rx.open() || self.rx.in_flight() > 0
    }

    /// Files are written and wait only for the sender's digest.
    fn awaits_peer(&self) -> bool {
        self.peer_open
            && self.files.iter().flatten().any(|f| {
                f.state == FileState::Receiving && f.is_written() && f.sender_digest.is_none()
            })
    }

    fn step(&mut self) -> Result<(), SessionError> {
        let completed = if self.streams_busy() {
            self.take_frames()?
        } else {
            // Nothing on the streams: wait for the peer instead.
            self.wait_peer(Duration::from_millis(200))?;
            Vec::new()
        };
        for index in completed {
            self.written_more(index)?;
        }
        self.hear_peer()?;
        self.sweep_journals();
        self.bound_backlog()?;
        self.take_results()?;
        self.out.tick(&self.rx.stream_states())?;
        self.check_pace()
    }

    /// Poll the streams once and handle every event; returns the files
    /// that got blocks written.
    fn take_frames(&mut self) -> Result<Vec<usize>, SessionError> {
        let mut events = Vec::new();
        // Handle what arrived even when the poll failed: every event
        // carries a buffer that must go back to the pool.
        let polled = self.rx.poll(true, &mut |ev| events.push(ev));
        let mut failure = None;
        let mut completed = Vec::new();
        let mut batch_bytes = 0;
        for ev in events {
            match ev {
                RecvEvent::Frame { header, lease, .. } if failure.is_none() => {
                    batch_bytes += u64::from(header.length);
                    match self.frame(&header, lease) {
                        Ok(Some(i)) => completed.push(i),
                        Ok(None) => {}
                        Err(e) => failure = Some(e),
                    }
                }
                RecvEvent::Frame { lease, .. } => self.rx.give_back(lease),
                RecvEvent::Written {
                    token,
                    len,
                    result,
                    lease,
                } => {
                    self.rx.give_back(lease);
                    match self.written(token, len, result) {
                        Ok(Some(i)) => completed.push(i),
                        Ok(None) => {}
                        Err(e) => {
                            failure.get_or_insert(e);
                        }
                    }
                }
                RecvEvent::Closed { .. } => {}
                RecvEvent::Lost { stream, why } => {
                    self.tally
                        .lost_streams
                        .push(format!("stream {stream}: {why}"));
                }
            }
        }
        self.tally.bytes += batch_bytes;
        self.out.progress(batch_bytes);
        polled?;
        match failure {
            Some(e) => Err(e),
            None => Ok(completed),
        }
    }

    /// One frame: checked, then written (or a hole, or a block held
    /// already). Returns the file when a block of it is now written.
    fn frame(&mut self, header: &FrameHeader, lease: Lease) -> Result<Option<usize>, SessionError> {
        let index = header.file_index as usize;
        let accepted = accept_frame(self.files, (self.block, &self.key), header, &lease)
            .and_then(|a| self.ensure_open(index, &a).map(|()| a));
        match accepted {
            Err(e) => {
                self.rx.give_back(lease);
                Err(e)
            }
            Ok(Accepted::Drop) => {
                self.rx.give_back(lease);
                Ok(None)
            }
            Ok(Accepted::Hole { terms }) => {
                self.rx.give_back(lease);
                let block = self.block;
                let f = self.file(index);
                let len = (f.size - header.offset).min(block);
                if f.stale {
                    // A continued part may hold old bytes here: clear them.
                    let part = f.part.as_ref().expect("opened when accepted");
                    crate::datapath::sys::zero_range(part, header.offset, len)
                        .map_err(|e| SessionError::io(format!("clearing {}", f.final_rel), e))?;
                }
                f.mark_written(header.offset / block, len, terms, FRAME_HEADER_LEN as u64);
                Ok(Some(index))
            }
            Ok(Accepted::Data { terms }) => {
                // O_DIRECT writes whole aligned blocks: the tail is padded
                // here and cut back to the true size before the rename.
                let len = header.length;
                let write_len = match self.file(index).direct {
                    true => len.div_ceil(4096) * 4096,
                    false => len,
                };
                self.write(index, header, lease, write_len, terms)
            }
        }
    }

    fn file(&mut self, index: usize) -> &mut RecvFile {
        self.files[index].as_mut().expect("frames name files")
    }

    /// Write an accepted frame's payload: O_DIRECT WRITE_FIXED straight from
    /// the receive buffer, or (every slot busy) a pwrite from it here.
    fn write(
        &mut self,
        index: usize,
        header: &FrameHeader,
        lease: Lease,
        write_len: u32,
        terms: u64,
    ) -> Result<Option<usize>, SessionError> {
        let block = self.block;
        let f = self.files[index].as_mut().expect("frames name files");
        let fd = f.part.as_ref().expect("opened when accepted").as_raw_fd();
        if f.slot.is_none() {
            f.slot = self.rx.attach_file(fd).unwrap_or(None);
        }
        let block_no = header.offset / block;
        if let Some(slot) = f.slot {
            f.writing.push((block_no, terms));
            let token = (index as u64) << 32 | block_no;
            self.rx.write(slot, header.offset, lease, write_len, token);
            return Ok(None);
        }
        let part = f.part.as_ref().expect("opened when accepted");
        let bytes = &lease.as_slice()[HEADROOM..HEADROOM + write_len as usize];
        let written = part.write_all_at(bytes, header.offset);
        self.rx.give_back(lease);
        written.map_err(|e| SessionError::io(format!("writing {}", f.final_rel), e))?;
        let wire = FRAME_HEADER_LEN as u64 + u64::from(header.length);
        f.mark_written(block_no, u64::from(header.length), terms, wire);
        Ok(Some(index))
    }

    /// A write from the ring finished.
    fn written(
        &mut self,
        token: u64,
        len: u32,
        result: i32,
    ) -> Result<Option<usize>, SessionError> {
        let (index, block_no) = ((token >> 32) as usize, token & 0xFFFF_FFFF);
        let block = self.block;
        let f = self.file(index);
        let at = f
            .writing
            .iter()
            .position(|w| w.0 == block_no)
            .expect("a write in flight");
        let (_, terms) = f.writing.swap_remove(at);
        if result < 0 || (result as u32) < len {
            let e = if result < 0 {
                std::io::Error::from_raw_os_error(-result)
            } else {
                std::io::Error::new(
                    std::io::ErrorKind::WriteZero,
                    "short write (no space left?)",
                )
            };
            return Err(SessionError::io(format!("writing {}", f.final_rel), e));
        }
        let len = (f.size - block_no * block).min(block);
        f.mark_written(block_no, len, terms, FRAME_HEADER_LEN as u64 + len);
        Ok(Some(index))
    }

    /// A file got blocks written: finish it when whole and agreed on, else
    /// remember it for its journal.
    fn written_more(&mut self, index: usize) -> Result<(), SessionError> {
        let f = self.file(index);
        if f.state == FileState::Skipped {
            if f.writing.is_empty() {
                self.close(index);
            }
            return Ok(());
        }
        if f.state != FileState::Receiving {
            return Ok(());
        }
        if f.is_written() {
            return self.try_finish(index);
        }
        if f.dirty && !self.dirty.contains(&index) {
            self.dirty.push(index);
        }
        Ok(())
    }

    /// Close a file's part (its slot and descriptor) while it waits or is
    /// dropped.
    fn close(&mut self, index: usize) {
        let f = self.files[index].as_mut().expect("files");
        if let Some(slot) = f.slot.take() {
            self.rx.detach_file(slot);
        }
        if f.part.take().is_some() {
            self.open_parts -= 1;
        }
    }

    /// The part of file `index` open for the frame just accepted (nothing
    /// for a frame that is dropped). At most [`OPEN_PARTS_MAX`] parts of a
    /// session are open at once: past that, the one idle longest is closed
    /// (and opened again, by name and inode, when its next block comes), so
    /// a sender starting many files at once holds no more descriptors.
    fn ensure_open(&mut self, index: usize, a: &Accepted) -> Result<(), SessionError> {
        if matches!(a, Accepted::Drop) || self.file(index).part.is_some() {
            return Ok(());
        }
        if self.open_parts >= OPEN_PARTS_MAX {
            self.close_idle_part();
        }
        let f = self.files[index].as_mut().expect("files");
        super::receive::open_part(self.root, self.direct, self.rules, f)?;
        self.open_parts += 1;
        self.open_order.push_back(index);
        Ok(())
    }

    /// Close the open part idle longest (no write or journal in flight).
    fn close_idle_part(&mut self) {
        for _ in 0..self.open_order.len() {
            let Some(i) = self.open_order.pop_front() else {
                return;
            };
            let Some(f) = self.files[i].as_ref().filter(|f| f.part.is_some()) else {
                continue;
            };
            if f.writing.is_empty() && !f.journaling && f.state == FileState::Receiving {
                self.close(i);
                return;
            }
            self.open_order.push_back(i);
        }
    }

    /// Hand a written file to a finalizer once the sender's digest is known
    /// and no journal write of it is in flight.
    fn try_finish(&mut self, index: usize) -> Result<(), SessionError> {
        let f = self.files[index].as_mut().expect("files");
        if f.state != FileState::Receiving
            || !f.is_written()
            || f.sender_digest.is_none()
            || f.journaling
        {
            return Ok(());
        }
        if let Some(slot) = f.slot.take() {
            self.rx.detach_file(slot);
        }
        // A file whose blocks were all held, or holes, may have no part open.
        if f.part.is_none() {
            super::receive::open_part(self.root, self.direct, self.rules, f)?;
            self.open_parts += 1;
        }
        let job = FinalJob::take(index as u32, f, self.rules);
        self.open_parts -= 1;
        self.pending += 1;
        let _ = self.jobs.send(Job::Finish(job));
        Ok(())
    }

    /// Wait up to `limit` for the peer to say something, and handle it.
    fn wait_peer(&mut self, limit: Duration) -> Result<(), SessionError> {
        if !self.peer_open {
            std::thread::sleep(limit.min(Duration::from_millis(20)));
            return Ok(());
        }
        match self.peer.recv_timeout(limit) {
            Ok(ev) => self.on_peer(ev),
            Err(mpsc::RecvTimeoutError::Timeout) => Ok(()),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                self.peer_open = false;
                Ok(())
            }
        }
    }

    /// Handle everything the peer said since the last tick.
    fn hear_peer(&mut self) -> Result<(), SessionError> {
        while self.peer_open {
            match self.peer.try_recv() {
                Ok(ev) => self.on_peer(ev)?,
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => self.peer_open = false,
            }
        }
        Ok(())
    }

    fn on_peer(&mut self, ev: PeerEvent) -> Result<(), SessionError> {
        self.peer_heard = Instant::now();
        match ev {
            PeerEvent::Digests(list) => {
                for (i, digest) in list {
                    self.sender_digest(i, digest)?;
                }
            }
            PeerEvent::Skipped(i, why) => self.skipped(i, why)?,
            PeerEvent::Summary { files, bytes, ok } => {
                self.tally.summary = Some((files, bytes, ok));
            }
            PeerEvent::Closed(None) => self.peer_open = false,
            PeerEvent::Closed(Some(e)) => {
                self.peer_open = false;
                return Err(e);
            }
        }
        Ok(())
    }

    /// The sender's digest of entry `i`: once per file being received.
    fn sender_digest(&mut self, i: u32, digest: u64) -> Result<(), SessionError> {
        let f = self
            .files
            .get_mut(i as usize)
            .and_then(Option::as_mut)
            .filter(|f| f.state == FileState::Receiving && f.sender_digest.is_none())
            .ok_or_else(|| {
                SessionError::local(
                    ErrorCode::Malformed,
                    format!("a digest for entry {i}, which is no file being received (or twice)"),
                )
            })?;
        f.sender_digest = Some(digest);
        self.try_finish(i as usize)
    }

    /// The sender dropped entry `i`: stop waiting for it. Its part stays
    /// only if it holds journaled data (see `Incoming`'s drop).
    fn skipped(&mut self, i: u32, why: String) -> Result<(), SessionError> {
        let Some(f) = self
            .files
            .get_mut(i as usize)
            .and_then(Option::as_mut)
            .filter(|f| f.state == FileState::Receiving)
        else {
            return Err(SessionError::local(
                ErrorCode::Malformed,
                format!("entry {i} skipped, which is no file being received"),
            ));
        };
        f.state = FileState::Skipped;
        let idle = f.writing.is_empty();
        self.remaining -= 1;
        self.tally.skipped.push((i, why));
        if idle {
            self.close(i as usize);
        }
        Ok(())
    }

    /// Journal what is written of files still arriving, each at most every
    /// [`JOURNAL_INTERVAL`], and only once the blocks written since the last
    /// journal cover at least as many bytes as a journal takes (so journal
    /// writes never outgrow the data: a huge sparse file fed a block at a
    /// time is not a journal amplifier).
    fn sweep_journals(&mut self) {
        let now = Instant::now();
        if now.duration_since(self.last_sweep) < JOURNAL_INTERVAL / 4 {
            return;
        }
        self.last_sweep = now;
        let mut dirty = std::mem::take(&mut self.dirty);
        dirty.retain(|&index| {
            let f = self.files[index].as_mut().expect("dirty entries are files");
            if f.state != FileState::Receiving || !f.dirty {
                return false;
            }
            if f.journaling || now.duration_since(f.last_journal) < JOURNAL_INTERVAL {
                return true;
            }
            // Never more journal than what came for the file, and within
            // the process's journal budget: a huge sparse file fed a block
            // at a time is no journal amplifier.
            let len = super::journal::encoded_len(&f.id, &f.written);
            if f.wire_since_journal < len || !self.rules.journal_budget.take(len) {
                return true;
            }
            let Some(part) = f.part.as_ref().and_then(|p| p.try_clone().ok()) else {
                return true;
            };
            let j = Journal {
                id: f.id,
                part: f.part_id.expect("written files are claimed"),
                digest: f.digest,
                blocks: f.written.clone(),
            };
            (f.dirty, f.journaling, f.last_journal, f.wire_since_journal) = (false, true, now, 0);
            self.pending += 1;
            let _ = self.jobs.send(Job::Journal(JournalJob {
                index: index as u32,
                part,
                final_rel: f.final_rel.clone(),
                journal: j,
                secret: self.rules.secret.clone(),
            }));
            false
        });
        self.dirty.extend(dirty);
    }

    /// Bound the files waiting for their fsync (each holds a descriptor):
    /// wait for the finalizers when too many do.
    fn bound_backlog(&mut self) -> Result<(), SessionError> {
        while self.pending >= FINALIZE_BACKLOG_MAX {
            match self.results.recv_timeout(Duration::from_secs(1)) {
                Ok(r) => self.settle(r)?,
                Err(mpsc::RecvTimeoutError::Timeout) => self.out.tick(&self.rx.stream_states())?,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        Ok(())
    }

    fn take_results(&mut self) -> Result<(), SessionError> {
        while let Ok(r) = self.results.try_recv() {
            self.settle(r)?;
        }
        Ok(())
    }

    /// A finalizer's job came back.
    fn settle(&mut self, r: JobDone) -> Result<(), SessionError> {
        self.pending -= 1;
        match r {
            JobDone::Finished(r) => {
                self.remaining -= 1;
                match r? {
                    Outcome::Committed(i, digest) => {
                        self.file(i as usize).state = FileState::Done;
                        self.tally.done_files += 1;
                        self.out.committed(i, digest)
                    }
                    Outcome::Rejected(i, digest) => {
                        self.file(i as usize).state = FileState::Rejected;
                        self.tally.rejected.push(i);
                        self.out.rejected(i, digest)
                    }
                }
            }
            JobDone::Journaled(i, r) => {
                self.tally.journal_bytes += r?;
                let f = self.file(i as usize);
                (f.journaling, f.journaled) = (false, true);
                self.try_finish(i as usize)
            }
        }
    }

    /// While this side waits on the sender, it must deliver at least the
    /// minimum rate over every `pace.timeout`; a trickle (or silence) ends
    /// the session. Time when this side holds every buffer (its disk is
    /// the slow one) does not count against the sender.
    fn check_pace(&mut self) -> Result<(), SessionError> {
        let now = Instant::now();
        if now.duration_since(self.window.last_look) < PACE_EVERY {
            return Ok(());
        }
        self.window.last_look = now;
        if !self.streams_busy() && self.awaits_peer() {
            return self.check_confirmations(now);
        }
        let bytes = self.rx.tcp_bytes_received();
        // This side is the slow one (its buffers all in writes, its
        // finalizers behind): the sender is not to blame.
        if !self.rx.waiting() || self.rx.starved() || self.pending >= FINALIZE_BACKLOG_MAX {
            (self.window.start, self.window.bytes_at_start) = (now, bytes);
            return Ok(());
        }
        let span = now.duration_since(self.window.start);
        if span < self.pace.timeout {
            return Ok(());
        }
        let got = bytes.saturating_sub(self.window.bytes_at_start);
        let want = (self.pace.min_rate_bytes_per_s as f64 * span.as_secs_f64()) as u64;
        if got < want.max(1) {
            return Err(SessionError::io(
                "receiving",
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    if got == 0 {
                        format!(
                            "no data from the sender for {} s (stopped, overloaded or gone)",
                            span.as_secs()
                        )
                    } else {
                        format!(
                            "only {got} bytes from the sender in {} s, below the minimum rate of {} bytes/s (--min-rate): a trickle is not progress",
                            span.as_secs(),
                            self.pace.min_rate_bytes_per_s
                        )
                    },
                ),
            ));
        }
        (self.window.start, self.window.bytes_at_start) = (now, bytes);
        Ok(())
    }

    /// Every block arrived and the sender owes only digests: it must send
    /// them within `pace.timeout`.
    fn check_confirmations(&self, now: Instant) -> Result<(), SessionError> {
        let quiet = now.duration_since(self.peer_heard);
        if quiet < self.pace.timeout {
            return Ok(());
        }
        let waiting = self
            .files
            .iter()
            .flatten()
            .filter(|f| f.state == FileState::Receiving && f.is_written())
            .count();
        Err(SessionError::io(
            "receiving",
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the sender sent no digest for {waiting} files that arrived whole in {} s (stopped, overloaded or gone)",
                    quiet.as_secs()
                ),
            ),
        ))
    }

    /// Wait for every job in hand, keeping the first error.
    fn drain(&mut self) -> Result<(), SessionError> {
        let mut first = Ok(());
        while self.pending > 0 {
            let Ok(r) = self.results.recv() else { break };
            if let Err(e) = self.settle(r) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}

/// What to do with a frame that fits its file.
enum Accepted {
    /// A hole: nothing to write; its digest terms.
    Hole { terms: u64 },
    /// A block that arrived before (a stream was lost and the sender sent
    /// its frames again), or of a file no longer received: dropped.
    Drop,
    /// Write the payload at the frame's offset.
    Data { terms: u64 },
}

/// Check a frame against the file it names (block layout, duplicates,
/// checksum) and account it; the write itself is the caller's.
fn accept_frame(
    files: &mut [Option<RecvFile>],
    (block, key): (u64, &FrameKey),
    header: &FrameHeader,
    lease: &Lease,
) -> Result<Accepted, SessionError> {
    let malformed = |m: String| SessionError::local(ErrorCode::Malformed, m);
    let Some(Some(f)) = files.get_mut(header.file_index as usize) else {
        return Err(malformed(format!(
            "frame for entry {}, which is not a file being received",
            header.file_index
        )));
    };
    FrameHeader {
        file_index: 0,
        ..*header
    }
    .check_against(&[f.size])
    .map_err(|e| malformed(format!("file {}: {e}", header.file_index)))?;
    if header.offset >= f.size {
        return Err(malformed(format!(
            "frame at offset {} is past the end of file {}",
            header.offset, header.file_index
        )));
    }
    let expected = (f.size - header.offset).min(block);
    let hole = header.is_hole();
    let covered = if hole && header.length == 0 {
        expected
    } else {
        u64::from(header.length)
    };
    if !header.offset.is_multiple_of(block) || covered != expected || (hole && header.length != 0) {
        return Err(malformed(format!(
            "frame at offset {} of file {} does not fit its block layout",
            header.offset, header.file_index
        )));
    }
    let block_no = header.offset / block;
    let (word, bit) = ((block_no / 64) as usize, 1u64 << (block_no % 64));
    let terms = if hole {
        header
            .check_hole(key)
            .map_err(|e| malformed(e.to_string()))?;
        zero_terms(header.offset, expected)
    } else {
        header
            .check_payload(key, payload(lease, header))
            .map_err(|e| malformed(e.to_string()))?
    };
    if f.seen[word] & bit != 0 || f.state != FileState::Receiving {
        return Ok(Accepted::Drop);
    }
    f.seen[word] |= bit;
    if hole {
        // Nothing to write: the hole stays a hole (the size is set at the end).
        return Ok(Accepted::Hole { terms });
    }
    Ok(Accepted::Data { terms })
}
