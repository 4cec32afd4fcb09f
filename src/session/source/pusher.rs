//! One lane of a push: the state machine that reads a lane's pieces of
//! the work block by block into its frame buffers (O_DIRECT `READ_FIXED`),
//! checksums and seals each block, hands each frame to the next of its
//! streams that can take it, remembers what each stream carried until the
//! receiver has it (`ledger`), and repairs lost streams (`repair`). Its
//! reads are in `reads`; `sending` runs the lanes.
//!
//! [`Pusher`] is the state machine; each tick of its loop runs named
//! steps: issue reads, take finished reads, repair lost streams, close
//! sources read through.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::coord::WorkerCounters;
use crate::datapath::net::{NetSender, SendStats};
use crate::datapath::Lease;
use crate::protocol::control::ErrorCode;
use crate::protocol::frame::FrameHeader;

use super::ledger::{Ledger, Repair, Sent, LEDGER_RECORDS};
use super::reads::{Read, Source};
use super::repair::StallWatch;
use super::sending::{Announce, ControlAnnounce, Opener, PushParams, Sources, SENT_RECORDS_MAX};
use super::work::{Idle, Work};
use crate::session::link::lanes::Lane;
use crate::session::plan::held::Held;
use crate::session::plan::route::Route;
use crate::session::plan::tree::Tree;
use crate::session::SessionError;

/// Keeps the bytes sent under `rate * elapsed`.
pub(super) struct Pacer<'a> {
    pub(super) rate: Option<f64>,
    /// What every lane admitted so far, and since when: the limit holds
    /// for the push as a whole, however its lanes share the work.
    pub(super) work: &'a Work,
    /// The push is stopped (the daemon closing, the client interrupted):
    /// a lane waiting for its turn waits no more.
    pub(super) stop: &'a AtomicBool,
}

impl<'a> Pacer<'a> {
    pub(super) fn new(rate: Option<f64>, work: &'a Work, stop: &'a AtomicBool) -> Self {
        Pacer { rate, work, stop }
    }

    /// How long until `bytes` more may go out (None: now).
    pub(super) fn delay(&self, bytes: u64) -> Option<Duration> {
        let rate = self.rate?;
        let (sent, start) = self.work.paced();
        let due = (sent + bytes) as f64 / rate;
        let now = start.elapsed().as_secs_f64();
        (due > now).then(|| Duration::from_secs_f64(due - now))
    }

    /// Wait until `bytes` more may go out, keeping `tx` moving meanwhile
    /// (frames already admitted go out while this waits).
    pub(super) fn admit(&mut self, bytes: u64, tx: &mut NetSender) -> Result<(), SessionError> {
        while let Some(d) = self.delay(bytes) {
            stopped(self.stop, self.work)?;
            tx.poll(false)?;
            std::thread::sleep(d.min(Duration::from_millis(5)));
        }
        self.work.pace(bytes);
        Ok(())
    }
}

/// A lane stops when the push is stopped, or when another lane failed
/// (whose error, not this one, says why).
pub(super) fn stopped(stop: &AtomicBool, work: &Work) -> Result<(), SessionError> {
    if stop.load(Ordering::Relaxed) {
        return Err(SessionError::local(
            ErrorCode::Interrupted,
            "interrupted (Ctrl-C)",
        ));
    }
    if work.failed() {
        return Err(SessionError::AnotherLaneFailed);
    }
    Ok(())
}

/// What one lane did.
pub(in crate::session) struct LaneDone {
    pub(in crate::session) stats: SendStats,
    pub(in crate::session) lost: Vec<String>,
    pub(in crate::session) resent: u64,
    pub(in crate::session) skipped: Vec<(u32, String)>,
}

/// What every lane of a push shares: the work they take pieces of, the
/// counters they add to, the flag that stops the push, and the session's
/// streams (each lane sends on its share of them).
pub(super) struct LanesShare<'a> {
    pub(super) work: &'a Work,
    pub(super) counters: &'a WorkerCounters,
    pub(super) stop: &'a AtomicBool,
    /// Every stream of the session, by its number.
    pub(super) fds: &'a [i32],
}

/// One lane of a push: pieces and orphaned frames until none are left and
/// every file is acknowledged (or it lost its streams and handed over).
pub(super) fn push_lane(
    params: &PushParams,
    from: &Sources<'_>,
    lane: &Lane,
    shared: &LanesShare<'_>,
    tx: NetSender,
) -> Result<LaneDone, SessionError> {
    let mut announce = ControlAnnounce::new(from.announce_on)?;
    let (work, stop) = (shared.work, shared.stop);
    let mut p = Pusher::new(params, from, lane, shared, &mut announce, tx)?;
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
pub(super) struct Pusher<'a> {
    pub(super) params: &'a PushParams,
    pub(super) tree: &'a Tree,
    /// Entries past the tree are a streamed push's (whole files), not a
    /// follow's (growing).
    pub(super) streamed: bool,
    pub(super) held: &'a Held,
    pub(super) open: &'a Opener<'a>,
    pub(super) counters: &'a WorkerCounters,
    pub(super) announce: &'a mut dyn Announce,
    pub(super) work: &'a Work,
    pub(super) lane: &'a Lane,
    /// Where the receiver writes each file, and the class of each of this
    /// lane's streams on it: a frame goes on a stream of its file's class.
    pub(super) route: &'a Route,
    pub(super) classes: Vec<usize>,
    /// The session's streams in all (this lane has its share of them).
    pub(super) streams_all: u32,
    /// This lane's streams.
    pub(super) fds: Vec<i32>,
    pub(super) tx: NetSender,
    pub(super) block: u64,
    pub(super) next_stream: u32,
    /// Frames read and made, waiting for a stream to take them
    /// ([`dispatch`](Self::dispatch)).
    pub(super) ready: VecDeque<(Lease, FrameHeader, Sent)>,
    pub(super) pacer: Pacer<'a>,
    pub(super) ledger: Ledger<'a>,
    pub(super) repair: Repair,
    /// This lane's digest terms of each entry it reads, not yet added to
    /// the work's.
    pub(super) digests: HashMap<usize, u64>,
    /// The entries a follow or a streamed push adds (their names are kept
    /// for the report when they are skipped).
    pub(super) added: Option<&'a super::follow::Added>,
    pub(super) reads: Vec<Option<Read>>,
    pub(super) free_tokens: Vec<u32>,
    pub(super) reads_max: usize,
    pub(super) sources: Vec<Source>,
    /// The source being read (index into `sources`).
    pub(super) current: Option<usize>,
    pub(super) skipped: Vec<(u32, String)>,
    /// Every stream of this lane was lost and its frames went to others.
    pub(super) handed_over: bool,
    /// This lane told the work it has nothing to do ([`Work::idle`]).
    pub(super) idle: bool,
}

impl<'a> Pusher<'a> {
    pub(super) fn new(
        params: &'a PushParams,
        from: &Sources<'a>,
        lane: &'a Lane,
        shared: &LanesShare<'a>,
        announce: &'a mut dyn Announce,
        mut tx: NetSender,
    ) -> Result<Self, SessionError> {
        let (work, counters, stop, all) = (shared.work, shared.counters, shared.stop, shared.fds);
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
            streamed: from.stream.is_some(),
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
            digests: HashMap::with_capacity(2 * reads_max + 8),
            added: from
                .follow
                .map(|f| f.added)
                .or(from.stream.map(|s| s.added)),
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
    pub(super) fn check_stop(&self, stop: &AtomicBool) -> Result<(), SessionError> {
        stopped(stop, self.work)
    }

    /// Read and queue everything, then hand every frame to the sockets.
    pub(super) fn run(&mut self, stop: &AtomicBool) -> Result<(), SessionError> {
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
    pub(super) fn read_tick(&mut self, stop: &AtomicBool) -> Result<bool, SessionError> {
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
    pub(super) fn busy(&self) -> bool {
        !self.ready.is_empty() || self.tx.busy()
    }

    /// Hand ready frames, oldest first, to streams that can take them (see
    /// [`NetSender::idle_stream`]), remembering what each carries.
    pub(super) fn dispatch(&mut self) {
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
    pub(super) fn dispatch_routed(&mut self, active: u32) {
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
    pub(super) fn make_ready(&mut self, lease: Lease, h: FrameHeader, r: Sent) {
        self.ready.push_back((lease, h, r));
        self.dispatch();
    }
}

impl<'a> Pusher<'a> {
    /// Nothing to do while other lanes work: keep this lane's frames
    /// moving, its own lost streams repaired and its announcements sent.
    /// Work handed over by another lane is taken by the caller, which first
    /// counts this lane busy again ([`Work::idle`]).
    pub(super) fn wait_others(&mut self, stop: &AtomicBool) -> Result<(), SessionError> {
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
    pub(super) fn buffer(&mut self) -> Result<Lease, SessionError> {
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
    pub(super) fn linger(&mut self, stop: &AtomicBool) -> Result<(), SessionError> {
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
            watch.look(&mut self.tx, &self.fds, &self.lane.streams, acks);
            self.resend_lost()?;
            self.announce.flush()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::fd::AsRawFd;

    use crate::protocol::frame::{FrameKey, FRAME_HEADER_LEN};
    use crate::session::source::ledger::Acks;

    fn source(size: u64, skip: Vec<(u64, u64)>) -> Source {
        Source {
            entry: 0,
            file: tempfile::tempfile().unwrap(),
            direct: false,
            extents: None,
            slot: None,
            file_end: Some(crate::session::source::work::End {
                size,
                mtime_s: 0,
                mtime_ns: 0,
            }),
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

    /// A push's parameters for `block`-byte frames on 8 buffers, unsealed
    /// and unpaced.
    fn plain_params(block: u64) -> PushParams {
        PushParams {
            block_size: block as u32,
            buffers: 8,
            zerocopy: crate::datapath::net::ZeroCopy::Off,
            rate_limit_bytes_per_s: None,
            timeout: Duration::from_secs(10),
            seal: None,
            key: FrameKey { k0: 1, k1: 2 },
            zeros: false,
        }
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
        let acks = Acks::new(&tree, &held, 1, &[]);
        let open = |_: usize| {
            File::open(&path)
                .map(|f| (f, false))
                .map_err(crate::session::plan::unsendable::Unsendable::Open)
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
            stream: None,
        };
        let params = plain_params(BLOCK);
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
            let shared = LanesShare {
                work: &work,
                counters: &counters,
                stop: &stop,
                fds: &fds,
            };
            let mut p = Pusher::new(&params, &from, &lane, &shared, &mut quiet, tx).unwrap();
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
