//! The receive: frames off the data streams into registered buffers, each
//! checked against its file's block layout and checksum, written with
//! O_DIRECT straight from its buffer, and each file handed to a finalizer
//! once it is written and the sender's digest of its source is known.
//!
//! The data path runs on lanes (see `intake`): each has its own ring,
//! buffers and share of the streams, and shares the file table (`book`)
//! with the others under one lock. The session's thread is the control
//! plane ([`Control`]), whose step hears the peer (digests, skipped
//! entries, its end), journals files still arriving, takes the
//! finalizers' results, reports progress and heartbeats, and checks that
//! the sender keeps a minimum rate. One lane runs on the session's thread,
//! its tick and the control step in turn, as a session always did.

use crate::protocol::control::PieceDone;
use std::collections::VecDeque;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use crate::datapath::net::NetReceiver;
use crate::datapath::sys::{self, Waker};
use crate::protocol::control::ErrorCode;
use crate::protocol::frame::FrameKey;
use crate::protocol::manifest::Entry;

use super::book::{self, finalize_backlog_max, Book, Job, JobDone, Tally};
use super::commit::Outcome;
use super::incoming::Incoming;
use super::intake::{Intake, LaneStatus};
use super::journal::Timestamp;
use crate::session::link::conn::{Peer, PeerEvent};
use crate::session::link::lanes::{self, Lane, LaneReport, Lanes};
use crate::session::link::streams::Sealing;
use crate::session::SessionError;

/// Threads that sync and rename complete files (see `batch`).
pub(super) const FINALIZERS: usize = 4;
/// Files written through one lane's ring at once (registered slots).
const FILE_SLOTS: u32 = 64;
/// How often the sender's rate is looked at.
const PACE_EVERY: Duration = Duration::from_secs(1);
/// How long a lane waits while the finalizers are behind.
const BACKLOG_WAIT: Duration = Duration::from_millis(1);
/// How long the control thread of running lanes sleeps at most between
/// its steps (it wakes at once for the peer and the finalizers).
const CONTROL_EVERY: Duration = Duration::from_millis(50);

/// The receiving lanes of a session: each lane's plan and its receiver.
pub(crate) struct Receivers {
    pub(crate) lanes: Vec<Lane>,
    pub(crate) rxs: Vec<NetReceiver>,
}

/// The receiving lanes for `streams` streams with `buffers` buffers of
/// `payload_max` bytes in all, each lane's registered now (before any peer
/// is contacted) and started by [`Incoming::receive`] on its own thread.
pub(crate) fn prepare_receivers(
    want: Lanes,
    streams: u16,
    buffers: usize,
    payload_max: usize,
) -> Result<Receivers, SessionError> {
    lanes::prepare(want, streams, streams, buffers, |n, b| {
        NetReceiver::prepare(n, b, payload_max, FILE_SLOTS)
    })
    .map(|(lanes, rxs)| Receivers { lanes, rxs })
}

/// How a receive's frames are checked: under `key`, and opened with
/// `open` when sealed.
pub(crate) struct FrameCheck {
    pub(crate) key: FrameKey,
    pub(crate) open: Sealing,
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
    /// `bytes` more the total counted as data are done without a payload
    /// (a file whose data was less than counted, its zeros left out):
    /// progress towards the total, not traffic.
    fn unsent(&mut self, bytes: u64);
    /// A file is under its final name.
    fn committed(&mut self, file_index: u32, digest: u64) -> Result<(), SessionError>;
    /// A piece of a split file is verified and journaled complete (and
    /// the whole file committed when it was the last: see [`PieceDone`]).
    fn piece(&mut self, file_index: u32, done: PieceDone) -> Result<(), SessionError> {
        self.committed(file_index, done.digest)
    }
    /// A file differed from the source and was not committed.
    fn rejected(&mut self, file_index: u32, digest: u64) -> Result<(), SessionError>;
    /// At least every second: each stream's delivered bytes and whether a
    /// receive waits on it (for heartbeats).
    fn tick(&mut self, streams: &[(u64, bool)]) -> Result<(), SessionError>;
    /// A follow or a streamed push added `entries` (paths under the
    /// destination): claim their names and count their memory, or refuse;
    /// `false`: a streamed push's window waits (what is in flight holds
    /// what it needs). Only a daemon's push adds.
    fn admit(&mut self, _entries: &[Entry]) -> Result<bool, SessionError> {
        Err(SessionError::local(
            ErrorCode::Malformed,
            "entries added to a session that follows none",
        ))
    }
    /// Every entry below `upto` is ready for its data: tell the sender.
    fn admitted(&mut self, _upto: u32) -> Result<(), SessionError> {
        Ok(())
    }
    /// Every entry below `upto` of a streamed push is settled (committed,
    /// given up, or no file) and let go: what was held for them may be too.
    fn settled(&mut self, _upto: u32) {}
    /// A streamed push's window holds these files already: tell the
    /// sender (before the window's `admitted`).
    fn held(
        &mut self,
        _items: Vec<crate::protocol::control::HaveItem>,
    ) -> Result<(), SessionError> {
        Ok(())
    }
    /// This side's user stopped the receive (a pull's Ctrl-C).
    fn stopped(&self) -> bool {
        false
    }
    /// An entry this side refused while the data came (a link planted in
    /// its path): a daemon tells the sender, which stops waiting for it.
    fn refused(&mut self, _r: &crate::session::link::refused::Refused) -> Result<(), SessionError> {
        Ok(())
    }
}

/// Bytes over the last window, against the minimum rate.
struct RateWindow {
    start: Instant,
    bytes_at_start: u64,
    last_look: Instant,
}

/// What every lane of a receive starts from: the streams (all of them),
/// the frame key and sealing, and the wait bound of its ring.
struct LaneStart<'a> {
    fds: &'a [i32],
    key: FrameKey,
    open: &'a Sealing,
    wait_limit: Duration,
}

impl LaneStart<'_> {
    /// Start `rx` on `lane`'s streams, on this thread, waking when `wake`
    /// is rung.
    fn intake<'s>(
        &self,
        lane: &Lane,
        mut rx: NetReceiver,
        wake: &Waker,
        status: &'s LaneStatus,
    ) -> Result<Intake<'s>, SessionError> {
        rx.number_streams(&lane.streams);
        rx.start(&lane.fds(self.fds))?;
        rx.wake_on(wake.raw());
        rx.set_wait_limit(self.wait_limit);
        if let Some((keys, dir)) = self.open {
            rx.open_with(keys, *dir);
        }
        Ok(Intake::new(rx, self.key, status))
    }
}

impl Incoming {
    /// Take frames from `streams` until every file is committed, rejected or
    /// skipped (or the streams and the peer have nothing more), reporting
    /// to `out`; each lane's report comes back. A stream that breaks is
    /// noted and the others go on (the sender re-sends what it carried); a
    /// sender below the minimum rate for `pace.timeout` ends the session.
    /// The lanes come from [`prepare_receivers`] and are started here on
    /// `streams` (placed by the core each stream arrives on); frames are
    /// checked as `check` says.
    pub(crate) fn receive(
        &mut self,
        streams: &[TcpStream],
        receivers: Receivers,
        pace: Pace,
        check: &FrameCheck,
        peer: &Peer,
        out: &mut dyn Landing,
    ) -> Result<Vec<LaneReport>, SessionError> {
        // Files complete before any data came (empty, or journaled whole)
        // are acknowledged first.
        for (file_index, digest) in self.take_done_at_start() {
            out.committed(file_index, digest)?;
        }
        let fds: Vec<i32> = streams.iter().map(|st| st.as_raw_fd()).collect();
        let Receivers { lanes: plan, rxs } = receivers;
        let plan = match plan.len() {
            1 => plan,
            // Placed by device: each lane keeps the streams its files'
            // frames come on.
            _ if self.routed => lanes::near_nic(&plan, &fds),
            n => lanes::place_streams(n, &fds),
        };
        let start = LaneStart {
            fds: &fds,
            key: check.key,
            open: &check.open,
            wait_limit: (pace.timeout / 4).min(Duration::from_secs(1)),
        };
        let statuses: Vec<LaneStatus> = plan.iter().map(|_| LaneStatus::new()).collect();
        let (job_tx, job_rx) = mpsc::channel::<Job>();
        let book = Book::new(self, job_tx);
        let root = book.root;
        let job_rx = Mutex::new(job_rx);
        let (done_tx, done_rx) = mpsc::channel::<JobDone>();
        let (result, tally) = std::thread::scope(|scope| {
            for _ in 0..FINALIZERS {
                let (job_rx, done_tx, waker) = (&job_rx, done_tx.clone(), &*peer.waker);
                scope.spawn(move || super::batch::finalizer(root, job_rx, done_tx, waker));
            }
            drop(done_tx);
            let book = Mutex::new(book);
            let mut ctl = Control::new(done_rx, peer, pace, out, &statuses, &plan, &fds);
            let r = match plan.len() {
                1 => ctl.run_inline(&book, one(rxs), &start),
                _ => ctl.run_lanes(&book, rxs, &start),
            };
            // Finish what is in hand (even after a failure: complete files
            // are complete), then stop the finalizers.
            let drained = ctl.drain(&book);
            let tally = book
                .into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .into_tally();
            (r.and_then(|r| drained.map(|()| r)), tally)
        });
        self.absorb(tally);
        let mut reports = result?;
        for (r, s) in reports.iter_mut().zip(&statuses) {
            r.bytes = s.bytes.load(Ordering::Relaxed);
        }
        Ok(reports)
    }

    fn absorb(&mut self, t: Tally) {
        self.done_files += t.done_files;
        self.bytes += t.bytes;
        self.skipped.extend(t.skipped);
        self.rejected.extend(t.rejected);
        self.lost_streams.extend(t.lost_streams);
        self.journal_bytes += t.journal_bytes;
        self.entries.extend(t.added);
        for (i, (s, ns)) in t.dir_times {
            let e = &mut self.entries[i as usize];
            (e.mtime_s, e.mtime_ns) = (s, ns);
        }
        if let Some(s) = t.summary {
            self.peer_summary = Some(s);
        }
    }
}

/// The receiver of a single lane.
fn one(rxs: Vec<NetReceiver>) -> NetReceiver {
    rxs.into_iter().next().expect("a lane has its receiver")
}

/// What the receiving lanes on threads of their own share: the book, the
/// stop, the control thread's waker (`ctl`), where each starts from, and
/// each one's waker and shown state (by its index).
struct LaneThreads<'a, 's> {
    book: &'a Mutex<Book<'s>>,
    stop: &'a AtomicBool,
    ctl: &'a Waker,
    start: &'a LaneStart<'a>,
    wakers: &'a [Waker],
    statuses: &'a [LaneStatus],
}

impl LaneThreads<'_, '_> {
    /// A receiving lane on a thread of its own: tick until its streams end
    /// or the session stops; a failure stops the other lanes and the
    /// control thread (rung on `ctl`).
    fn run(&self, lane: &Lane, rx: NetReceiver) -> Result<(), SessionError> {
        let (book, stop, ctl, start) = (self.book, self.stop, self.ctl, self.start);
        let (wake, status) = (&self.wakers[lane.index], &self.statuses[lane.index]);
        let others = lanes::StopOthers(stop);
        let r = others.on(start.intake(lane, rx, wake, status).and_then(|mut intake| {
            while !stop.load(Ordering::Acquire) && intake.busy() {
                if book::lock(book).backlogged() {
                    // The control thread takes the finalizers' results.
                    ctl.wake();
                    std::thread::sleep(BACKLOG_WAIT);
                    continue;
                }
                intake.tick(book, true)?;
            }
            Ok(())
        }));
        status.busy.store(false, Ordering::Release);
        ctl.wake();
        r
    }
}

/// Sets the stop of running lanes and rings each awake when dropped.
struct StopLanes<'a>(&'a AtomicBool, &'a [Waker]);

impl Drop for StopLanes<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
        self.1.iter().for_each(Waker::wake);
    }
}

/// A receiving lane's result once it ended; a lane that panicked is an
/// error of the session, not of the process.
fn joined<R>(
    h: std::thread::ScopedJoinHandle<'_, (Result<R, SessionError>, LaneReport)>,
) -> Result<(Result<R, SessionError>, LaneReport), SessionError> {
    h.join().map_err(|_| {
        SessionError::local(
            crate::protocol::control::ErrorCode::Internal,
            "a receiving lane failed (it panicked)",
        )
    })
}

/// The control plane of a receive: the peer, the finalizers, progress,
/// heartbeats and pace, over the lanes' shown state.
struct Control<'s> {
    results: mpsc::Receiver<JobDone>,
    peer: &'s Peer,
    peer_open: bool,
    /// When the peer last said something on the control connection.
    peer_heard: Instant,
    pace: Pace,
    window: RateWindow,
    out: &'s mut dyn Landing,
    lanes: &'s [LaneStatus],
    plan: &'s [Lane],
    /// Every stream's descriptor, TCP bytes each took in so far, and
    /// (reused) each one's state for heartbeats, by session number.
    fds: &'s [i32],
    tcp_seen: Vec<u64>,
    states: Vec<(u64, bool)>,
    /// Payload bytes reported to `out` so far.
    reported: u64,
    reported_unsent: u64,
    /// A streamed push's windows (and the end of them) not prepared yet,
    /// while too many entries are in flight (`Book::window_waits`).
    waiting: VecDeque<PeerEvent>,
    /// When a window refused for now (see `Landing::admit`) is tried again.
    retry_at: Instant,
}

/// How long a streamed push's window refused for now waits to be tried
/// again.
const WINDOW_RETRY: Duration = Duration::from_millis(20);

impl<'s> Control<'s> {
    fn new(
        results: mpsc::Receiver<JobDone>,
        peer: &'s Peer,
        pace: Pace,
        out: &'s mut dyn Landing,
        lanes: &'s [LaneStatus],
        plan: &'s [Lane],
        fds: &'s [i32],
    ) -> Self {
        let now = Instant::now();
        Control {
            results,
            peer,
            peer_open: true,
            peer_heard: now,
            pace,
            window: RateWindow {
                start: now,
                bytes_at_start: 0,
                last_look: now,
            },
            out,
            lanes,
            plan,
            fds,
            tcp_seen: vec![0; fds.len()],
            states: vec![(0, false); fds.len()],
            reported: 0,
            reported_unsent: 0,
            waiting: VecDeque::new(),
            retry_at: now,
        }
    }

    /// One lane (the plan's one) on this thread: its tick and the control
    /// step in turn.
    fn run_inline(
        &mut self,
        book: &Mutex<Book>,
        rx: NetReceiver,
        start: &LaneStart,
    ) -> Result<Vec<LaneReport>, SessionError> {
        let lane = &self.plan[0];
        let cpu_at = sys::thread_cpu_time();
        let mut intake = start.intake(lane, rx, &self.peer.waker, &self.lanes[0])?;
        while self.going(book, intake.busy()) {
            if intake.busy() {
                intake.tick(book, true)?;
            } else {
                // Nothing on the streams: wait for the peer instead.
                self.wait_peer(book, Duration::from_millis(200))?;
            }
            self.step(book)?;
        }
        Ok(vec![LaneReport {
            cpu: None,
            streams: lane.streams.clone(),
            cpu_s: (sys::thread_cpu_time() - cpu_at).as_secs_f64(),
            bytes: 0,
        }])
    }

    /// The plan's lanes on threads of their own (`rxs`, their receivers),
    /// this thread the control plane until the receive ends (or a lane
    /// fails); then the lanes stop.
    fn run_lanes(
        &mut self,
        book: &Mutex<Book>,
        rxs: Vec<NetReceiver>,
        start: &LaneStart,
    ) -> Result<Vec<LaneReport>, SessionError> {
        let plan = self.plan;
        let stop = AtomicBool::new(false);
        let wakers = plan
            .iter()
            .map(|_| Waker::new())
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| SessionError::io("an eventfd for a lane", e))?;
        let threads = LaneThreads {
            book,
            stop: &stop,
            ctl: &self.peer.waker,
            start,
            wakers: &wakers,
            statuses: self.lanes,
        };
        let work = |lane: &Lane, rx: NetReceiver| threads.run(lane, rx);
        std::thread::scope(|scope| {
            // However this thread leaves the scope (an error, a panic), the
            // lanes stop first: the scope waits for them.
            let stopper = StopLanes(&stop, &wakers);
            let mut handles = Vec::with_capacity(plan.len());
            for (lane, rx) in plan.iter().zip(rxs) {
                let h = lanes::spawn(scope, lane, rx, &work)
                    .map_err(|e| SessionError::io("starting a receiving lane", e));
                handles.push(h);
            }
            // A lane that did not start fails the receive below.
            let r = match handles.iter().any(Result::is_err) {
                true => Ok(()),
                false => self.watch(book, &stop),
            };
            drop(stopper);
            let done = handles
                .into_iter()
                .map(|h| h.and_then(joined))
                .collect::<Result<Vec<_>, _>>();
            r?;
            lanes::all_ok(done?).map(|(_, reports)| reports)
        })
    }

    /// The control steps while lanes run, until the receive ends or a lane
    /// stops it.
    fn watch(&mut self, book: &Mutex<Book>, stop: &AtomicBool) -> Result<(), SessionError> {
        while !stop.load(Ordering::Acquire) && self.going(book, self.lanes_busy()) {
            if self.lanes_busy() {
                self.peer.waker.wait(CONTROL_EVERY);
            } else {
                self.wait_peer(book, Duration::from_millis(200))?;
            }
            self.step(book)?;
        }
        Ok(())
    }

    /// Files remain, and the streams (`busy`) or the peer may bring them;
    /// or a follow's files still grow, or it may add more.
    fn going(&self, book: &Mutex<Book>, busy: bool) -> bool {
        let b = book::lock(book);
        let remain = b.remaining > 0 && (busy || (self.peer_open && b.awaits_peer()));
        remain || (self.peer_open && b.grows())
    }

    fn lanes_busy(&self) -> bool {
        self.lanes.iter().any(|l| l.busy.load(Ordering::Acquire))
    }

    fn step(&mut self, book: &Mutex<Book>) -> Result<(), SessionError> {
        if self.out.stopped() {
            return Err(SessionError::local(
                ErrorCode::Interrupted,
                "interrupted (Ctrl-C)",
            ));
        }
        self.hear_peer(book)?;
        book::lock(book).sweep_journals();
        self.bound_backlog(book)?;
        self.take_results(book)?;
        self.report_refused(book)?;
        self.report_progress(book);
        self.tick()?;
        self.check_pace(book)
    }

    /// Entries refused since the last step, to `out`.
    fn report_refused(&mut self, book: &Mutex<Book>) -> Result<(), SessionError> {
        let refused = std::mem::take(&mut book::lock(book).tally.refused_now);
        refused.iter().try_for_each(|r| self.out.refused(r))
    }

    /// The lanes' new bytes (received and written), and what was settled
    /// without a payload, to `out`.
    fn report_progress(&mut self, book: &Mutex<Book>) {
        let received: u64 = self
            .lanes
            .iter()
            .map(|l| l.bytes.load(Ordering::Relaxed))
            .sum();
        let (written, unsent) = {
            let b = book::lock(book);
            (b.tally.written, b.tally.unsent)
        };
        // What is both received and written: a write counts whole blocks
        // (a sparse frame's holes too), the lanes count data bytes.
        let total = received.min(written);
        if total > self.reported {
            self.out.progress(total - self.reported);
            self.reported = total;
        }
        if unsent > self.reported_unsent {
            self.out.unsent(unsent - self.reported_unsent);
            self.reported_unsent = unsent;
        }
    }

    /// Every stream's state, by its session number, to `out`.
    fn tick(&mut self) -> Result<(), SessionError> {
        for (lane, status) in self.plan.iter().zip(self.lanes) {
            let states = status.states.lock().unwrap_or_else(|p| p.into_inner());
            for (&id, &st) in lane.streams.iter().zip(states.iter()) {
                self.states[id as usize] = st;
            }
        }
        self.out.tick(&self.states)
    }

    /// Wait up to `limit` for the peer to say something, and handle it.
    fn wait_peer(&mut self, book: &Mutex<Book>, limit: Duration) -> Result<(), SessionError> {
        if !self.peer_open {
            std::thread::sleep(limit.min(Duration::from_millis(20)));
            return Ok(());
        }
        match self.peer.events.recv_timeout(limit) {
            Ok(ev) => self.on_peer(book, ev),
            Err(mpsc::RecvTimeoutError::Timeout) => Ok(()),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                self.peer_open = false;
                Ok(())
            }
        }
    }

    /// Handle everything the peer said since the last step.
    fn hear_peer(&mut self, book: &Mutex<Book>) -> Result<(), SessionError> {
        let due = Instant::now() >= self.retry_at;
        if !self.waiting.is_empty() && due && !book::lock(book).window_waits() {
            // A window prepared is a step's work (below).
            let ev = self.waiting.pop_front().expect("one waits");
            self.on_peer(book, ev)?;
            if matches!(self.waiting.front(), Some(PeerEvent::AddedEnd)) {
                let end = self.waiting.pop_front().expect("the end waits");
                self.on_peer(book, end)?;
            }
            return Ok(());
        }
        while self.peer_open {
            match self.peer.events.try_recv() {
                // Later than a window that waits, or one that must wait.
                Ok(ev @ (PeerEvent::Added(..) | PeerEvent::AddedEnd))
                    if !self.waiting.is_empty() || book::lock(book).window_waits() =>
                {
                    self.waiting.push_back(ev);
                    self.bound_waiting()?;
                }
                // A window prepared is a step's work: the finalizers'
                // results and the progress are taken before the next.
                Ok(ev @ PeerEvent::Added(..)) => return self.on_peer(book, ev),
                Ok(ev) => self.on_peer(book, ev)?,
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => self.peer_open = false,
            }
        }
        Ok(())
    }

    /// A sender never has more than [`UNADMITTED_MAX`] entries sent and not
    /// admitted when it sends a window (of at most [`WINDOW_ENTRIES`]):
    /// one with more is refused (protocol 14), so what waits here stays
    /// bounded.
    fn bound_waiting(&self) -> Result<(), SessionError> {
        use crate::protocol::control::{
            STREAM_UNADMITTED_MAX as UNADMITTED_MAX, STREAM_WINDOW_ENTRIES as WINDOW_ENTRIES,
        };
        let waiting: usize = (self.waiting.iter())
            .map(|ev| match ev {
                PeerEvent::Added(_, entries) => entries.len(),
                _ => 0,
            })
            .sum();
        let most = UNADMITTED_MAX + WINDOW_ENTRIES;
        if waiting > most {
            let m = format!(
                "the sender added {waiting} entries this side has not admitted (at most {most})"
            );
            return Err(SessionError::local(ErrorCode::Malformed, m));
        }
        Ok(())
    }

    fn on_peer(&mut self, book: &Mutex<Book>, ev: PeerEvent) -> Result<(), SessionError> {
        self.peer_heard = Instant::now();
        match ev {
            PeerEvent::Digests(list) => {
                let mut b = book::lock(book);
                for (i, digest) in list {
                    b.sender_digest(i, digest)?;
                }
            }
            PeerEvent::Skipped(r) => book::lock(book).skipped(r)?,
            PeerEvent::FileEnd(i, size, (s, ns)) => {
                book::lock(book).file_end(i, size, Timestamp { s, ns })?
            }
            PeerEvent::Alive => {}
            PeerEvent::AddedEnd => book::lock(book).adding = false,
            PeerEvent::DirTimes(list) => book::lock(book).dir_times(list)?,
            PeerEvent::Added(first, entries) if book::lock(book).streams() => {
                if !self.out.admit(&entries)? {
                    // It waits for what is in flight to settle.
                    self.waiting.push_front(PeerEvent::Added(first, entries));
                    self.retry_at = Instant::now() + WINDOW_RETRY;
                    return Ok(());
                }
                let w = book::lock(book).add_window(first, entries)?;
                for (i, digest) in w.done {
                    self.out.committed(i, digest)?;
                }
                w.refused.iter().try_for_each(|r| self.out.refused(r))?;
                if !w.have.is_empty() {
                    self.out.held(w.have)?;
                }
                self.out.admitted(w.upto)?;
                if let Some(upto) = book::lock(book).settled_upto() {
                    self.out.settled(upto);
                }
                // The time it took is this side's, not the sender's.
                (self.window.start, self.window.bytes_at_start) =
                    (Instant::now(), self.tcp_bytes());
            }
            PeerEvent::Added(first, entries) => {
                if !self.out.admit(&entries)? {
                    let m = "a follow's entries cannot wait to be admitted";
                    return Err(SessionError::Protocol(m.into()));
                }
                let upto = book::lock(book).add(first, entries)?;
                self.out.admitted(upto)?;
            }
            PeerEvent::Summary { files, bytes, ok } => {
                book::lock(book).tally.summary = Some((files, bytes, ok));
            }
            PeerEvent::Closed(None) => self.peer_open = false,
            PeerEvent::Closed(Some(e)) => {
                self.peer_open = false;
                return Err(e);
            }
        }
        Ok(())
    }

    /// Bound the files waiting for their fsync (each holds a descriptor):
    /// wait for the finalizers when too many do.
    fn bound_backlog(&mut self, book: &Mutex<Book>) -> Result<(), SessionError> {
        while book::lock(book).pending >= finalize_backlog_max() {
            match self.results.recv_timeout(Duration::from_secs(1)) {
                Ok(r) => self.settle(book, r)?,
                Err(mpsc::RecvTimeoutError::Timeout) => self.tick()?,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        Ok(())
    }

    fn take_results(&mut self, book: &Mutex<Book>) -> Result<(), SessionError> {
        while let Ok(r) = self.results.try_recv() {
            self.settle(book, r)?;
        }
        Ok(())
    }

    /// A finalizer's job came back: the book updated, then the peer told
    /// (outside the lock: telling may block on the connection).
    fn settle(&mut self, book: &Mutex<Book>, r: JobDone) -> Result<(), SessionError> {
        let (outcome, settled) = {
            let mut b = book::lock(book);
            let outcome = b.settle(r)?;
            (outcome, b.settled_upto())
        };
        if let Some(upto) = settled {
            self.out.settled(upto);
        }
        match outcome {
            Some(Outcome::Committed(i, digest)) => self.out.committed(i, digest),
            Some(Outcome::Rejected(i, digest)) => self.out.rejected(i, digest),
            Some(Outcome::Piece(i, done)) => self.out.piece(i, done),
            None => Ok(()),
        }
    }

    /// TCP bytes all streams took in so far.
    fn tcp_bytes(&mut self) -> u64 {
        for (seen, &fd) in self.tcp_seen.iter_mut().zip(self.fds) {
            if let Some(t) = sys::tcp_progress(fd) {
                *seen = (*seen).max(t.bytes_received);
            }
        }
        self.tcp_seen.iter().sum()
    }

    /// While this side waits on the sender, it must deliver at least the
    /// minimum rate over every `pace.timeout`; a trickle (or silence) ends
    /// the session. Time when this side holds every buffer (its disk is
    /// the slow one) does not count against the sender.
    fn check_pace(&mut self, book: &Mutex<Book>) -> Result<(), SessionError> {
        let now = Instant::now();
        if now.duration_since(self.window.last_look) < PACE_EVERY {
            return Ok(());
        }
        self.window.last_look = now;
        let (pending, awaits) = {
            let b = book::lock(book);
            (b.pending, self.peer_open && b.awaits_peer())
        };
        if !self.lanes_busy() && awaits {
            return self.check_confirmations(book, now);
        }
        let bytes = self.tcp_bytes();
        // A follow's files may be idle for long, a streamed push's walk
        // slow: its sender's heartbeats say it is there.
        let follow = {
            let b = book::lock(book);
            b.follows() || b.adding
        };
        if follow && now.duration_since(self.peer_heard) < self.pace.timeout {
            (self.window.start, self.window.bytes_at_start) = (now, bytes);
            return Ok(());
        }
        let shown = |f: fn(&LaneStatus) -> bool| self.lanes.iter().any(f);
        let waiting = shown(|l| l.waiting.load(Ordering::Relaxed));
        let starved = shown(|l| l.starved.load(Ordering::Relaxed));
        // This side is the slow one (its buffers all in writes, its
        // finalizers behind): the sender is not to blame.
        if !waiting || starved || pending >= finalize_backlog_max() {
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
            return Err(too_slow(got, span, self.pace.min_rate_bytes_per_s));
        }
        (self.window.start, self.window.bytes_at_start) = (now, bytes);
        Ok(())
    }

    /// Every block arrived and the sender owes only digests: it must send
    /// them within `pace.timeout`.
    fn check_confirmations(&self, book: &Mutex<Book>, now: Instant) -> Result<(), SessionError> {
        let quiet = now.duration_since(self.peer_heard);
        if quiet < self.pace.timeout {
            return Ok(());
        }
        let waiting = book::lock(book).written_waiting();
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

    /// Journal what is verified and not journaled yet (the receive may
    /// end before its files: the sender stopped or went), then wait for
    /// every job in hand, keeping the first error.
    fn drain(&mut self, book: &Mutex<Book>) -> Result<(), SessionError> {
        // The lanes are done: what they took in since the last step.
        self.report_progress(book);
        book::lock(book).journal_all_now();
        let mut first = Ok(());
        while book::lock(book).pending > 0 {
            let Ok(r) = self.results.recv() else { break };
            if let Err(e) = self.settle(book, r) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first.and_then(|()| self.report_refused(book))
    }
}

/// The error of a sender below the minimum rate: `got` bytes in `span`.
fn too_slow(got: u64, span: Duration, min_rate: u64) -> SessionError {
    let why = if got == 0 {
        format!(
            "no data from the sender for {} s (stopped, overloaded or gone)",
            span.as_secs()
        )
    } else {
        format!(
            "only {got} bytes from the sender in {} s, below the minimum rate of {min_rate} bytes/s (--min-rate): a trickle is not progress",
            span.as_secs()
        )
    };
    SessionError::io(
        "receiving",
        std::io::Error::new(std::io::ErrorKind::TimedOut, why),
    )
}
