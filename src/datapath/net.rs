//! Net rings: data-stream frames sent from registered buffers and received
//! into them, one io_uring for a set of TCP streams.
//!
//! A frame lives in one buffer: its 32-byte header sits just before
//! [`HEADROOM`] and its payload starts at `HEADROOM`, so the payload is
//! page-aligned for O_DIRECT (disk read into it, or disk write from it)
//! while header and payload go out in a single send.
//!
//! Zero-copy sends (`SendZc`) keep their buffer until the kernel's
//! notification; the notification also says whether the data was copied
//! after all, which it always is on loopback and veth. In
//! [`ZeroCopy::Auto`] the sender watches that flag and falls back to plain
//! `Send` once zero-copy has proved to be copying, since a copied `SendZc`
//! costs more than a plain send.

use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use crate::coord::StreamBytes;
use crate::protocol::frame::{
    hole_checksum, payload_checksum, FrameError, FrameHeader, FrameKey, FLAG_HOLE, FLAG_SEALED,
    FLAG_UNCHECKED, FRAME_HEADER_LEN,
};
use crate::protocol::handshake::SessionKeys;
use crate::protocol::seal::{self, FrameOpener, FrameSealer, TAG_LEN};

use super::arena::BUF_ALIGN;
use super::ring::{Needed, ZC_COPIED};
use super::{Arena, Completion, Error, Lease, Ring};

/// Where a frame's payload starts in its buffer (page-aligned for O_DIRECT).
pub const HEADROOM: usize = 4096;
const HEADER_AT: usize = HEADROOM - FRAME_HEADER_LEN;
/// Notifications to see before judging zero-copy in `Auto` mode.
const ZC_PROBE_NOTIFS: u64 = 16;

/// `--zerocopy auto|on|off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZeroCopy {
    /// Zero-copy until the kernel reports it copies anyway, then plain send.
    Auto,
    On,
    Off,
}

/// What a sender did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendStats {
    pub frames: u64,
    pub bytes: u64,
    pub zc_sends: u64,
    pub zc_notifs: u64,
    pub zc_copied: u64,
    /// Zero-copy was given up because every notification reported a copy.
    pub zc_fell_back: bool,
    /// Zero-copy was not tried (`ZeroCopy::Auto`): why.
    pub zc_skipped: Option<&'static str>,
}

impl SendStats {
    /// What several senders (a side's lanes) did, as one.
    pub fn sum(all: &[SendStats]) -> SendStats {
        let mut t = SendStats::default();
        for s in all {
            t.frames += s.frames;
            t.bytes += s.bytes;
            t.zc_sends += s.zc_sends;
            t.zc_notifs += s.zc_notifs;
            t.zc_copied += s.zc_copied;
            t.zc_fell_back |= s.zc_fell_back;
            t.zc_skipped = t.zc_skipped.or(s.zc_skipped);
        }
        t
    }
}

/// A path whose round trip is longer than this gets plain sends in
/// `ZeroCopy::Auto`: a zero-copy buffer is the kernel's until the data is
/// acknowledged, so over a long path every buffer waits a round trip and
/// the sender runs dry (over 1 Gbit/s x 100 ms, 80 Mb/s instead of 830).
const ZC_RTT_MAX_US: u32 = 1000;

/// Why zero-copy sends would not pay on these connected sockets, if so:
/// a virtual device copies anyway, and a long path holds every buffer for
/// a round trip.
pub fn zero_copy_wont_pay(sockets: &[RawFd]) -> Option<&'static str> {
    for &fd in sockets {
        if !super::sys::socket_interface(fd).is_some_and(|(_, physical)| physical) {
            return Some(
                "the path runs over a virtual device (loopback, veth, TUN), which copies anyway",
            );
        }
        if super::sys::tcp_path(fd).is_some_and(|t| t.rtt_us > ZC_RTT_MAX_US) {
            return Some("the path's round trip is over 1 ms: a zero-copy buffer waits a round trip for its acknowledgement");
        }
    }
    None
}

/// Bytes of buffer a frame with `payload_max` bytes of payload needs
/// (a sealed frame's tag included).
pub fn frame_buf_size(payload_max: usize) -> usize {
    (HEADROOM + payload_max + TAG_LEN).div_ceil(BUF_ALIGN) * BUF_ALIGN
}

/// Bytes after a frame's payload on the wire: the tag of a sealed frame.
fn trailer(h: &FrameHeader) -> u32 {
    if h.flags & FLAG_SEALED != 0 {
        TAG_LEN as u32
    } else {
        0
    }
}

/// The payload area of a frame buffer.
pub fn payload_mut(lease: &mut Lease) -> &mut [u8] {
    &mut lease.as_mut_slice()[HEADROOM..]
}

/// The payload of a received frame.
pub fn payload<'a>(lease: &'a Lease, header: &FrameHeader) -> &'a [u8] {
    &lease.as_slice()[HEADROOM..HEADROOM + header.length as usize]
}

fn stream_err(op: &'static str, stream: u32, source: io::Error) -> Error {
    Error::Stream { op, stream, source }
}

#[derive(Debug, Clone, Copy)]
struct SendTag {
    stream: u32,
    /// Bytes of this frame (header and payload) and how many are sent.
    len: u32,
    done: u32,
    /// Set for a disk read into a frame buffer: the caller's token.
    read: Option<u32>,
    /// The buffer's index, to match a zero-copy notification to its send.
    buf: u16,
}

#[derive(Debug)]
struct SendQueue {
    pending: VecDeque<(Lease, u32)>,
    /// A send of this stream is in flight (one at a time keeps frames in order).
    busy: bool,
    /// A zero-copy send came back short: the rest goes out when its
    /// notification returns the buffer.
    rest_from: Option<(u16, u32)>,
    /// False once the stream failed or stalled: nothing more goes on it.
    live: bool,
    /// When this stream last moved bytes (or last became busy).
    last_progress: Instant,
    /// The peer's TCP acknowledgements last seen (progress within a send).
    last_acked: u64,
}

/// Sends frames on a set of connected TCP streams.
pub struct NetSender {
    ring: Ring<SendTag>,
    /// Finished disk reads: (token, result, buffer), for the caller.
    reads_done: VecDeque<(u32, i32, Lease)>,
    queues: Vec<SendQueue>,
    batch: Vec<Completion<SendTag>>,
    mode: ZeroCopy,
    zc_now: bool,
    stats: SendStats,
    fds: Vec<RawFd>,
    /// The session's number of each stream (a lane holds a share of them).
    ids: Vec<u32>,
    buf_count: usize,
    /// Bytes each stream handed to its socket.
    sent: Vec<u64>,
    /// Where `sent` is published for the coordinator, if anywhere.
    published: Option<StreamBytes>,
    /// Per stream, when the session seals its frames.
    sealers: Option<Vec<FrameSealer>>,
    /// Streams lost since the caller last asked, with why.
    lost: Vec<(u32, io::Error)>,
    /// Stall limit: see [`set_stall_limit`](Self::set_stall_limit).
    stall: Option<Duration>,
    last_any_progress: Instant,
    /// A stream was lost with data waiting, and the peer has acknowledged
    /// nothing since.
    lost_waiting: bool,
}

/// How long a wait inside `poll` lasts at most when stalls are watched.
fn wait_slice(limit: Duration) -> Duration {
    (limit / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

impl NetSender {
    /// `sockets` are connected TCP streams; `buf_count` buffers of
    /// `payload_max` payload bytes each bound what is in flight.
    pub fn new(
        sockets: &[RawFd],
        buf_count: usize,
        payload_max: usize,
        mode: ZeroCopy,
    ) -> Result<Self, Error> {
        Self::with_file_slots(sockets, buf_count, payload_max, mode, 0)
    }

    /// A sender that also reads sources into its frame buffers from up to
    /// `file_slots` registered files at once ([`read`](Self::read)).
    pub fn with_file_slots(
        sockets: &[RawFd],
        buf_count: usize,
        payload_max: usize,
        mode: ZeroCopy,
        file_slots: u32,
    ) -> Result<Self, Error> {
        let mut tx = Self::prepare(sockets.len(), buf_count, payload_max, mode, file_slots)?;
        tx.start(sockets)?;
        Ok(tx)
    }

    /// A sender for `streams` streams whose buffers are registered now
    /// (the locked memory is proven) and whose sockets come later, on the
    /// thread that will run it: see [`start`](Self::start).
    pub fn prepare(
        streams: usize,
        buf_count: usize,
        payload_max: usize,
        mode: ZeroCopy,
        file_slots: u32,
    ) -> Result<Self, Error> {
        let arena = Arena::new(frame_buf_size(payload_max), buf_count)?;
        let mut needed = vec![Needed::SEND, Needed::READ_FIXED, Needed::ASYNC_CANCEL];
        if mode == ZeroCopy::On {
            needed.push(Needed::SEND_ZC);
        }
        let empty = vec![-1; streams];
        let ring = Ring::disabled(buf_count as u32, arena, &empty, file_slots, &needed)?;
        let zc_supported = mode == ZeroCopy::On || probe_send_zc();
        let capacity = ring.capacity();
        Ok(NetSender {
            ring,
            reads_done: VecDeque::with_capacity(buf_count),
            queues: empty
                .iter()
                .map(|_| SendQueue {
                    pending: VecDeque::with_capacity(buf_count),
                    busy: false,
                    rest_from: None,
                    live: true,
                    last_progress: Instant::now(),
                    last_acked: 0,
                })
                .collect(),
            batch: Vec::with_capacity(capacity),
            mode,
            zc_now: mode != ZeroCopy::Off && zc_supported,
            stats: SendStats::default(),
            fds: empty.clone(),
            ids: (0..streams as u32).collect(),
            buf_count,
            sent: vec![0; streams],
            published: None,
            sealers: None,
            lost: Vec::new(),
            stall: None,
            last_any_progress: Instant::now(),
            lost_waiting: false,
        })
    }

    /// Start sending on `sockets` (one per stream), from this thread.
    pub fn start(&mut self, sockets: &[RawFd]) -> Result<(), Error> {
        assert_eq!(sockets.len(), self.fds.len(), "a socket per stream");
        self.ring.enable()?;
        for (i, &fd) in sockets.iter().enumerate() {
            self.ring
                .set_file(i as u32, fd)
                .map_err(|e| stream_err("registering a socket", self.ids[i], e))?;
        }
        self.fds = sockets.to_vec();
        if self.mode == ZeroCopy::Auto && self.zc_now {
            if let Some(why) = zero_copy_wont_pay(sockets) {
                self.zc_now = false;
                self.stats.zc_skipped = Some(why);
            }
        }
        if !self.zc_now {
            for &fd in sockets {
                // Unsent data beyond a frame waits here, free to go on any
                // stream (not TCP, as in tests: nothing to bound). Not with
                // zero-copy: a send cut short by the bound waits for its
                // buffer's notification, a round trip, on every frame.
                let _ = super::sys::set_notsent_lowat(fd, self.ring.arena().buf_size());
            }
        }
        let now = Instant::now();
        self.last_any_progress = now;
        for (q, &fd) in self.queues.iter_mut().zip(sockets) {
            q.last_progress = now;
            // What the peer acknowledged before the data (the stream's
            // hello) is no progress of the data.
            q.last_acked = super::sys::tcp_progress(fd).map_or(0, |t| t.bytes_acked);
        }
        Ok(())
    }

    /// Give the streams their numbers in the session (`ids[i]` for this
    /// sender's stream `i`; by default `0..n`), as a lane holding a share
    /// of a session's streams must before it starts (errors name them),
    /// seals or publishes counts.
    pub fn number_streams(&mut self, ids: &[u32]) {
        assert_eq!(ids.len(), self.queues.len(), "a number per stream");
        self.ids = ids.to_vec();
    }

    /// The session's number of this sender's stream `stream`.
    pub fn stream_id(&self, stream: u32) -> u32 {
        self.ids[stream as usize]
    }

    /// Seal every frame from now on (AES-256-GCM), each stream with its
    /// own key and frame counter, derived from the session's keys and the
    /// stream's number in the session.
    pub fn seal_with(&mut self, keys: &SessionKeys, direction: seal::Direction) {
        self.sealers = Some(
            self.ids
                .iter()
                .map(|&i| FrameSealer::new(keys, direction, i as u16))
                .collect(),
        );
    }

    /// Watch for stalls: a stream that has had data waiting for half of
    /// `limit` without moving a byte, while others move, is shut down and
    /// reported lost ([`take_lost`](Self::take_lost)); when no stream has
    /// moved a byte for `limit`, [`poll`](Self::poll) fails: the peer stopped
    /// reading or is gone. Waits inside `poll` become bounded.
    pub fn set_stall_limit(&mut self, limit: Duration) {
        self.stall = Some(limit);
        self.last_any_progress = Instant::now();
    }

    /// Streams that failed or stalled since the last call, with why. Their
    /// queued frames were dropped; what they carried must go again.
    pub fn take_lost(&mut self) -> Vec<(u32, io::Error)> {
        std::mem::take(&mut self.lost)
    }

    /// Frame buffers this sender registered.
    pub fn buffer_count(&self) -> usize {
        self.buf_count
    }

    /// Streams this sender was started on.
    pub fn stream_count(&self) -> usize {
        self.queues.len()
    }

    /// The stream for a new frame: of the live ones among the first
    /// `active`, one with nothing waiting or in flight, round-robin from
    /// `*next`; `None` while each of those is busy (poll, then ask again).
    /// A frame is bound to a stream only when the stream can take it, so a
    /// stream still ramping up, or recovering from a loss, carries less,
    /// and none holds a backlog of frames when the data ends. With none of
    /// those live, any live stream past `active` (a lost stream's frames
    /// go wherever a stream still takes them); with none live at all,
    /// `*next` (the frame is dropped and the caller sees the losses).
    pub fn idle_stream(&self, next: &mut u32, active: u32) -> Option<u32> {
        self.idle_where(next, active, |_| true)
            .unwrap_or(Some(*next % (self.queues.len() as u32).max(1)))
    }

    /// [`idle_stream`](Self::idle_stream) among the streams `want` names
    /// (a route's class), as if they were all; with none of them live,
    /// among all.
    pub fn idle_stream_among(
        &self,
        next: &mut u32,
        active: u32,
        want: impl Fn(u32) -> bool,
    ) -> Option<u32> {
        self.idle_where(next, active, want)
            .or_else(|()| self.idle_where(next, active, |_| true))
            .unwrap_or(Some(*next % (self.queues.len() as u32).max(1)))
    }

    /// The stream for the next frame among those `want` names: the first
    /// `active` first, then all; `Ok(None)` while one of them is live but
    /// none can take it, `Err` when none is live.
    fn idle_where(
        &self,
        next: &mut u32,
        active: u32,
        want: impl Fn(u32) -> bool,
    ) -> Result<Option<u32>, ()> {
        let all = self.queues.len() as u32;
        for n in [active.min(all), all] {
            let mut any_live = false;
            for k in 0..n {
                let s = (*next + k) % n;
                let q = &self.queues[s as usize];
                if !want(s) {
                    continue;
                }
                any_live |= q.live;
                if q.live && !q.busy && q.pending.is_empty() {
                    *next = (s + 1) % n;
                    return Ok(Some(s));
                }
            }
            if any_live {
                return Ok(None);
            }
        }
        Err(())
    }

    /// Whether `stream` still takes frames.
    pub fn is_live(&self, stream: u32) -> bool {
        self.queues[stream as usize].live
    }

    /// Bytes stream `stream` holds in its socket that the peer has not
    /// acknowledged.
    pub fn unacknowledged(&self, stream: u32) -> usize {
        super::sys::socket_outq(self.fds[stream as usize]).unwrap_or(0)
    }

    /// Bytes stream `stream` handed to its socket so far.
    pub fn stream_bytes(&self, stream: u32) -> u64 {
        self.sent[stream as usize]
    }

    /// Keep `to` current with [`stream_bytes`](Self::stream_bytes) of
    /// every stream (a store per completed send, at the stream's number in
    /// the session), for the coordinator's per-stream rates. Counts made
    /// without per-stream slots are left alone (the caller counts only the
    /// total).
    pub fn publish_stream_bytes(&mut self, to: &StreamBytes) {
        if to.stream_count() == 0 {
            return;
        }
        assert!(
            self.ids.iter().all(|&i| (i as usize) < to.stream_count()),
            "one count per stream"
        );
        for (&i, &b) in self.ids.iter().zip(&self.sent) {
            to.store(i as usize, b);
        }
        to.attach();
        self.published = Some(to.clone());
    }

    /// The stall limit set, if any.
    pub fn stall_limit(&self) -> Option<Duration> {
        self.stall
    }

    /// Streams still taking frames.
    pub fn live_count(&self) -> usize {
        self.queues.iter().filter(|q| q.live).count()
    }

    /// Give up on `stream`: shut it down (so its send in flight ends), drop
    /// its queued frames and report it lost.
    pub fn lose(&mut self, stream: u32, why: io::Error) {
        let q = &mut self.queues[stream as usize];
        if !q.live {
            return;
        }
        // Data waited on it: the stall clock goes on through its loss (its
        // frames moved to an idle stream are not a fresh start).
        self.lost_waiting |= q.busy;
        q.live = false;
        q.busy = false;
        q.rest_from = None;
        let dropped: Vec<Lease> = q.pending.drain(..).map(|(l, _)| l).collect();
        for l in dropped {
            self.ring.arena().give_back(l);
        }
        super::sys::shutdown_both(self.fds[stream as usize]);
        self.lost.push((stream, why));
    }

    /// Whether the peer's TCP acknowledged more on `stream` since the last
    /// look (a descriptor that is not TCP, as in tests, always has).
    fn peer_acked(&mut self, stream: u32) -> bool {
        let q = &mut self.queues[stream as usize];
        match super::sys::tcp_progress(self.fds[stream as usize]) {
            Some(t) if t.bytes_acked == q.last_acked => false,
            Some(t) => {
                q.last_acked = t.bytes_acked;
                true
            }
            None => true,
        }
    }

    fn check_stalls(&mut self) -> Result<(), Error> {
        let Some(limit) = self.stall else {
            return Ok(());
        };
        let now = Instant::now();
        // A send in flight may move bytes long before it completes (a large
        // frame on a slow path): the peer's TCP acknowledgements count too.
        for (s, q) in self.queues.iter_mut().enumerate() {
            if q.live && q.busy && now.duration_since(q.last_progress) > limit / 8 {
                if let Some(t) = super::sys::tcp_progress(self.fds[s]) {
                    if t.bytes_acked != q.last_acked {
                        q.last_acked = t.bytes_acked;
                        q.last_progress = now;
                        self.last_any_progress = now;
                        self.lost_waiting = false;
                    }
                }
            }
        }
        let waiting = self.queues.iter().any(|q| q.live && q.busy);
        if waiting && now.duration_since(self.last_any_progress) > limit {
            return Err(stream_err(
                "send",
                0,
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the receiver has taken no data for {} s (stopped, overloaded or gone)",
                        limit.as_secs()
                    ),
                ),
            ));
        }
        // One stream stalled while others move is given up; when none has
        // moved lately the peer as a whole is stuck, which the check above
        // reports once the whole limit has passed.
        if now.duration_since(self.last_any_progress) > limit / 2 {
            return Ok(());
        }
        for s in 0..self.queues.len() {
            let q = &self.queues[s];
            if q.live && q.busy && now.duration_since(q.last_progress) > limit / 2 {
                let secs = now.duration_since(q.last_progress).as_secs();
                self.lose(
                    s as u32,
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("stalled: no progress for {secs} s"),
                    ),
                );
            }
        }
        Ok(())
    }

    pub fn stats(&self) -> SendStats {
        self.stats
    }

    /// A free frame buffer, or `None` while all are in flight (backpressure:
    /// call [`poll`](Self::poll)).
    pub fn take_buffer(&mut self) -> Option<Lease> {
        self.ring.arena().take()
    }

    /// Return a buffer that will not be sent.
    pub fn give_back(&mut self, lease: Lease) {
        self.ring.arena().give_back(lease);
    }

    /// Register a source `fd` in a free file slot; `None` when all are taken.
    pub fn attach_file(&mut self, fd: RawFd) -> Result<Option<u32>, Error> {
        self.ring
            .attach_file(fd)
            .map_err(|e| stream_err("registering a file", 0, e))
    }

    /// Empty a file slot; no read from it may be in flight.
    pub fn detach_file(&mut self, slot: u32) {
        self.ring.detach_file(slot);
    }

    /// Read `len` bytes at `offset` of the file in `slot` into the buffer's
    /// payload area ([`HEADROOM`]) with O_DIRECT `READ_FIXED`; the buffer
    /// comes back from [`take_read`](Self::take_read) with the result.
    pub fn read(&mut self, slot: u32, offset: u64, lease: Lease, len: u32, token: u32) {
        let tag = SendTag {
            stream: 0,
            len,
            done: 0,
            read: Some(token),
            buf: lease.index(),
        };
        self.ring
            .read_fixed(slot, offset, lease, HEADROOM, len, tag);
    }

    /// A finished read: (token, bytes read or a negative errno, buffer).
    pub fn take_read(&mut self) -> Option<(u32, i32, Lease)> {
        self.reads_done.pop_front()
    }

    /// Queue the frame in `lease` (payload already at [`HEADROOM`]) on
    /// `stream`. Frames of one stream go out in the order queued.
    pub fn queue(&mut self, stream: u32, mut lease: Lease, header: &FrameHeader) {
        if !self.queues[stream as usize].live {
            // A lost stream takes nothing; the caller re-sends what it carried.
            self.ring.arena().give_back(lease);
            return;
        }
        let mut header = *header;
        let mut len = FRAME_HEADER_LEN + header.length as usize;
        if let Some(sealers) = &mut self.sealers {
            // The checksum would tell an observer about the plaintext: it
            // stays home; the receiver computes it from the opened payload.
            header.flags |= FLAG_SEALED;
            header.checksum = 0;
            len += TAG_LEN;
            assert!(
                HEADER_AT + len <= lease.capacity(),
                "frame larger than its buffer"
            );
            let wire = header.encode();
            let plen = header.length as usize;
            let buf = lease.as_mut_slice();
            let tag = sealers[stream as usize]
                .seal(&wire, &mut buf[HEADROOM..HEADROOM + plen])
                .expect("a stream cannot send 2^64 frames");
            buf[HEADROOM + plen..HEADROOM + plen + TAG_LEN].copy_from_slice(&tag);
        }
        assert!(
            HEADER_AT + len <= lease.capacity(),
            "frame larger than its buffer"
        );
        lease.as_mut_slice()[HEADER_AT..HEADROOM].copy_from_slice(&header.encode());
        self.queues[stream as usize]
            .pending
            .push_back((lease, len as u32));
        self.issue(stream);
    }

    fn issue(&mut self, stream: u32) {
        let none_busy = !self.queues.iter().any(|q| q.live && q.busy);
        let q = &mut self.queues[stream as usize];
        if q.busy || !q.live {
            return;
        }
        let Some((lease, len)) = q.pending.pop_front() else {
            return;
        };
        q.busy = true;
        let now = Instant::now();
        q.last_progress = now;
        if none_busy && !self.lost_waiting {
            // The stall clock runs while data waits, not while none does.
            self.last_any_progress = now;
        }
        self.push_send(stream, lease, len, 0);
    }

    fn push_send(&mut self, stream: u32, lease: Lease, len: u32, done: u32) {
        let tag = SendTag {
            stream,
            len,
            done,
            read: None,
            buf: lease.index(),
        };
        let at = HEADER_AT + done as usize;
        if self.zc_now {
            self.stats.zc_sends += 1;
            self.ring.send_zc(stream, lease, at, len - done, tag);
        } else {
            self.ring.send(stream, lease, at, len - done, tag);
        }
    }

    /// Whether frames (or reads) are queued or in flight.
    pub fn busy(&self) -> bool {
        self.ring.in_flight() > 0 || self.queues.iter().any(|q| q.busy || !q.pending.is_empty())
    }

    /// Submit, optionally wait for a completion, and handle what completed.
    /// A stream that fails is reported by [`take_lost`](Self::take_lost),
    /// not here; this fails when the ring does, or when no stream moves.
    pub fn poll(&mut self, wait: bool) -> Result<(), Error> {
        let want = usize::from(wait && self.ring.in_flight() > 0);
        match self.stall {
            Some(limit) => self.ring.submit_and_wait_for(want, wait_slice(limit)),
            None => self.ring.submit_and_wait(want),
        }
        .map_err(|e| stream_err("io_uring_enter", 0, e))?;
        self.ring.reap(&mut self.batch);
        let mut batch = std::mem::take(&mut self.batch);
        let mut result = Ok(());
        for c in batch.drain(..) {
            if let Err(e) = self.complete(c) {
                result = result.and(Err(e));
            }
        }
        self.batch = batch;
        result?;
        self.check_stalls()
    }

    fn complete(&mut self, c: Completion<SendTag>) -> Result<(), Error> {
        let Completion {
            result,
            lease,
            tag,
            more,
            notif,
        } = c;
        if let Some(token) = tag.read {
            let lease = lease.expect("reads carry a buffer");
            self.reads_done.push_back((token, result, lease));
            return Ok(());
        }
        let stream = tag.stream;
        if notif {
            let lease = lease.expect("a notification returns the buffer");
            self.notified(stream, lease, result, tag.len);
            return Ok(());
        }
        if !self.queues[stream as usize].live {
            // The stream was given up while this send was in flight.
            if let Some(lease) = lease {
                self.ring.arena().give_back(lease);
            }
            return Ok(());
        }
        if result < 0 {
            if super::error::is_retry(-result) {
                match lease {
                    Some(lease) => self.push_send(stream, lease, tag.len, tag.done),
                    None => self.queues[stream as usize].rest_from = Some((tag.buf, tag.done)),
                }
                return Ok(());
            }
            if let Some(lease) = lease {
                self.ring.arena().give_back(lease);
            }
            self.lose(stream, io::Error::from_raw_os_error(-result));
            return Ok(());
        }
        if result > 0 {
            self.progressed(stream, result as u64);
        }
        let done = tag.done + result as u32;
        assert!(done <= tag.len, "the kernel sent more than asked");
        if done < tag.len {
            // Short send: the rest goes out before anything else on this stream.
            match lease {
                Some(lease) => self.push_send(stream, lease, tag.len, done),
                None => self.queues[stream as usize].rest_from = Some((tag.buf, done)),
            }
            return Ok(());
        }
        self.stats.frames += 1;
        self.stats.bytes += u64::from(tag.len);
        if !more {
            if let Some(lease) = lease {
                self.ring.arena().give_back(lease);
            }
        }
        self.queues[stream as usize].busy = false;
        self.issue(stream);
        Ok(())
    }

    /// A zero-copy send's notification: the kernel is done with `lease`.
    fn notified(&mut self, stream: u32, lease: Lease, result: i32, len: u32) {
        self.stats.zc_notifs += 1;
        if result & ZC_COPIED != 0 {
            self.stats.zc_copied += 1;
        }
        if self.mode == ZeroCopy::Auto
            && self.zc_now
            && self.stats.zc_notifs >= ZC_PROBE_NOTIFS
            && self.stats.zc_copied == self.stats.zc_notifs
        {
            self.zc_now = false;
            self.stats.zc_fell_back = true;
        }
        // Resume a short send only with its own buffer: another frame
        // of this stream may have been sent since.
        let q = &mut self.queues[stream as usize];
        match q.rest_from {
            Some((index, done)) if index == lease.index() => {
                q.rest_from = None;
                self.push_send(stream, lease, len, done)
            }
            _ => self.ring.arena().give_back(lease),
        }
    }

    /// `bytes` of `stream` went out: counted, published, and the peer's
    /// progress noted.
    fn progressed(&mut self, stream: u32, bytes: u64) {
        let now = Instant::now();
        self.sent[stream as usize] += bytes;
        if let Some(p) = &self.published {
            p.store(
                self.ids[stream as usize] as usize,
                self.sent[stream as usize],
            );
        }
        self.queues[stream as usize].last_progress = now;
        // The peer as a whole moves when its TCP acknowledges: a send
        // into a fresh socket's buffer (a lost stream's frames moved to
        // an idle one) is no sign of a live receiver.
        if self.peer_acked(stream) {
            self.last_any_progress = now;
            self.lost_waiting = false;
        }
    }

    /// Send everything queued and wait for every buffer to come back.
    pub fn flush(&mut self) -> Result<(), Error> {
        while self.busy() {
            self.poll(true)?;
        }
        Ok(())
    }
}

impl Drop for NetSender {
    fn drop(&mut self) {
        // Buffers waiting in queues or finished reads go back before the
        // ring (and its arena) go, so the arena can unmap its memory.
        for q in &mut self.queues {
            while let Some((lease, _)) = q.pending.pop_front() {
                self.ring.arena().give_back(lease);
            }
        }
        while let Some((_, _, lease)) = self.reads_done.pop_front() {
            self.ring.arena().give_back(lease);
        }
        self.ring.cancel_all_and_drain();
    }
}

/// Whether this kernel knows IORING_OP_SEND_ZC (probed once per sender).
fn probe_send_zc() -> bool {
    let Ok(arena) = Arena::new(BUF_ALIGN, 1) else {
        return false;
    };
    Ring::<()>::new(1, arena, &[], &[Needed::SEND_ZC]).is_ok()
}

#[derive(Debug, Clone, Copy)]
enum RecvTag {
    /// A receive on stream `stream`.
    Recv { stream: u32 },
    /// The waker's counter was read: someone wants the caller to look.
    Wake,
    /// An O_DIRECT write of a frame's payload, with the caller's token.
    Write { token: u64, len: u32 },
}

/// Where a stream's current frame stands. A header is received into the
/// stream's own header slot; a buffer is taken only for a payload, so a
/// receiver needs no buffer per stream and any number of streams shares a
/// small pool.
#[derive(Debug, Clone, Copy)]
enum Phase {
    Header {
        got: u32,
    },
    /// The header arrived; its payload waits for a buffer.
    NeedBuffer {
        header: FrameHeader,
    },
    Payload {
        header: FrameHeader,
        got: u32,
    },
}

#[derive(Debug)]
struct RecvStream {
    lease: Option<Lease>,
    phase: Phase,
    busy: bool,
    open: bool,
}

impl Drop for NetReceiver {
    fn drop(&mut self) {
        // Half-received frames' buffers go back before the ring (and its
        // arena) go, so the arena can unmap its memory.
        for s in &mut self.streams {
            if let Some(lease) = s.lease.take() {
                self.ring.arena().give_back(lease);
            }
        }
        self.ring.cancel_all_and_drain();
    }
}

/// What a receiver hands its caller.
#[derive(Debug)]
pub enum RecvEvent {
    /// A whole frame: header decoded and within limits, payload at
    /// [`HEADROOM`] of the buffer (its checksum is the caller's to check
    /// against the manifest). Give the buffer back when done with it.
    Frame {
        stream: u32,
        header: FrameHeader,
        lease: Lease,
    },
    /// The stream ended cleanly at a frame boundary.
    Closed { stream: u32 },
    /// The stream broke (reset, or cut in the middle of a frame): what it
    /// was carrying is lost, the other streams go on.
    Lost { stream: u32, why: io::Error },
    /// A payload write from [`NetReceiver::write`] finished: `result` is
    /// the bytes written or a negative errno; the buffer comes back.
    Written {
        token: u64,
        len: u32,
        result: i32,
        lease: Lease,
    },
}

/// Receives frames from a set of connected TCP streams into registered
/// buffers, and writes their payloads from those buffers to files
/// registered in the same ring (O_DIRECT `WRITE_FIXED`).
pub struct NetReceiver {
    ring: Ring<RecvTag>,
    streams: Vec<RecvStream>,
    /// Each stream's header slot (stable addresses: receives write here).
    headers: Box<[[u8; FRAME_HEADER_LEN]]>,
    /// Where handing out buffers starts next, so no stream starves.
    grant_from: usize,
    /// An eventfd whose ringing ends a wait in `poll`, and whether its
    /// read is in flight; its counter lands in `wake_buf`.
    waker: Option<(RawFd, bool)>,
    wake_buf: Box<[u8; 8]>,
    batch: Vec<Completion<RecvTag>>,
    payload_max: usize,
    /// Bound on each wait inside `poll` (None: wait for a completion).
    wait_limit: Option<Duration>,
    /// Bytes each stream delivered.
    received: Vec<u64>,
    /// Per stream, when the session seals its frames.
    openers: Option<(Vec<FrameOpener>, FrameKey)>,
    fds: Vec<RawFd>,
    /// The session's number of each stream (a lane holds a share of them).
    ids: Vec<u32>,
    /// TCP bytes each stream received, as `tcp_bytes_received` last saw.
    tcp_seen: Vec<u64>,
}

impl NetReceiver {
    pub fn new(sockets: &[RawFd], buf_count: usize, payload_max: usize) -> Result<Self, Error> {
        Self::with_file_slots(sockets, buf_count, payload_max, 0)
    }

    /// A receiver that can also write payloads to up to `file_slots` files
    /// at once ([`attach_file`](Self::attach_file), [`write`](Self::write)).
    pub fn with_file_slots(
        sockets: &[RawFd],
        buf_count: usize,
        payload_max: usize,
        file_slots: u32,
    ) -> Result<Self, Error> {
        let mut rx = Self::prepare(sockets.len(), buf_count, payload_max, file_slots)?;
        rx.start(sockets)?;
        Ok(rx)
    }

    /// A receiver for `streams` streams whose buffers are registered now
    /// (the locked memory is proven) and whose sockets come later, on the
    /// thread that will run it: see [`start`](Self::start).
    pub fn prepare(
        streams: usize,
        buf_count: usize,
        payload_max: usize,
        file_slots: u32,
    ) -> Result<Self, Error> {
        assert!(buf_count >= 1, "a buffer at least");
        let arena = Arena::new(frame_buf_size(payload_max), buf_count)?;
        let empty = vec![-1; streams];
        // In flight at most: a header receive per stream, and every buffer
        // in a payload receive or a write.
        let ring = Ring::disabled(
            (buf_count + streams) as u32,
            arena,
            &empty,
            file_slots,
            &[Needed::RECV, Needed::WRITE_FIXED, Needed::ASYNC_CANCEL],
        )?;
        let capacity = ring.capacity();
        Ok(NetReceiver {
            ring,
            streams: empty
                .iter()
                .map(|_| RecvStream {
                    lease: None,
                    phase: Phase::Header { got: 0 },
                    busy: false,
                    open: true,
                })
                .collect(),
            headers: vec![[0u8; FRAME_HEADER_LEN]; streams].into_boxed_slice(),
            grant_from: 0,
            waker: None,
            wake_buf: Box::new([0; 8]),
            batch: Vec::with_capacity(capacity),
            payload_max,
            wait_limit: None,
            received: vec![0; streams],
            openers: None,
            ids: (0..streams as u32).collect(),
            fds: empty,
            tcp_seen: vec![0; streams],
        })
    }

    /// Start receiving from `sockets` (one per stream), on this thread.
    pub fn start(&mut self, sockets: &[RawFd]) -> Result<(), Error> {
        assert_eq!(sockets.len(), self.fds.len(), "a socket per stream");
        self.ring.enable()?;
        for (i, &fd) in sockets.iter().enumerate() {
            self.ring
                .set_file(i as u32, fd)
                .map_err(|e| stream_err("registering a socket", self.ids[i], e))?;
        }
        self.fds = sockets.to_vec();
        Ok(())
    }

    /// Make every wait inside [`poll`](Self::poll) return after at most
    /// `limit`, so the caller can watch the sender's pace.
    pub fn set_wait_limit(&mut self, limit: Duration) {
        self.wait_limit = Some(limit);
    }

    /// Expect every frame sealed (AES-256-GCM) with the session's keys;
    /// frames are opened (and their checksums computed) before the caller
    /// sees them.
    pub fn open_with(&mut self, keys: &SessionKeys, direction: seal::Direction) {
        let openers = self
            .ids
            .iter()
            .map(|&i| FrameOpener::new(keys, direction, i as u16))
            .collect();
        self.openers = Some((openers, seal::frame_key(keys)));
    }

    /// Give the streams their numbers in the session (`ids[i]` for this
    /// receiver's stream `i`; by default `0..n`), as a lane holding a share
    /// of a session's streams must before it starts (errors name them) and
    /// opens sealed frames.
    pub fn number_streams(&mut self, ids: &[u32]) {
        assert_eq!(ids.len(), self.streams.len(), "a number per stream");
        self.ids = ids.to_vec();
    }

    /// The session's number of this receiver's stream `stream`.
    pub fn stream_id(&self, stream: u32) -> u32 {
        self.ids[stream as usize]
    }

    /// Bytes each stream has delivered so far.
    pub fn stream_bytes(&self) -> &[u64] {
        &self.received
    }

    /// Per stream: bytes delivered, and whether a receive waits on it for
    /// data (false while the caller holds every buffer: backpressure).
    pub fn stream_states(&self) -> Vec<(u64, bool)> {
        self.received
            .iter()
            .zip(&self.streams)
            .map(|(b, s)| (*b, s.open && s.busy))
            .collect()
    }

    /// [`stream_states`](Self::stream_states) into `out` (its room reused).
    pub fn stream_states_into(&self, out: &mut Vec<(u64, bool)>) {
        out.clear();
        out.extend(
            self.received
                .iter()
                .zip(&self.streams)
                .map(|(b, s)| (*b, s.open && s.busy)),
        );
    }

    /// Bytes the kernel's TCP took in on all streams so far (what arrived,
    /// whether or not a whole frame did).
    pub fn tcp_bytes_received(&mut self) -> u64 {
        for (i, s) in self.streams.iter().enumerate() {
            if !s.open {
                continue;
            }
            if let Some(t) = super::sys::tcp_progress(self.fds[i]) {
                self.tcp_seen[i] = self.tcp_seen[i].max(t.bytes_received);
            }
        }
        self.tcp_seen.iter().sum()
    }

    /// Whether a receive waits on some open stream (this side waits for the
    /// sender).
    pub fn waiting(&self) -> bool {
        self.streams.iter().any(|s| s.open && s.busy)
    }

    /// Whether a stream's payload waits for a buffer (the caller holds them
    /// all: this side is the slow one).
    pub fn starved(&self) -> bool {
        self.streams
            .iter()
            .any(|s| s.open && matches!(s.phase, Phase::NeedBuffer { .. }))
    }

    /// Whether any stream is still open.
    pub fn open(&self) -> bool {
        self.streams.iter().any(|s| s.open)
    }

    /// Frame buffers this receiver has.
    pub fn buffer_count(&mut self) -> usize {
        self.ring.arena().buf_count()
    }

    /// Events one [`poll`](Self::poll) hands over at most: a completion
    /// each, and a frame without payload per stream twice over.
    pub fn events_max(&self) -> usize {
        self.batch.capacity() + 2 * self.streams.len()
    }

    /// Return the buffer of a frame the caller is done with.
    pub fn give_back(&mut self, lease: Lease) {
        self.ring.arena().give_back(lease);
    }

    /// Ops in flight (receives and writes; not the waker's read).
    pub fn in_flight(&self) -> u32 {
        let waking = self.waker.is_some_and(|(_, armed)| armed);
        self.ring.in_flight() - u32::from(waking)
    }

    /// End any wait in [`poll`](Self::poll) when eventfd `fd` is rung (see
    /// `sys::Waker`): another thread has news for the caller. `fd` must
    /// stay open as long as this receiver lives.
    pub fn wake_on(&mut self, fd: RawFd) {
        self.waker = Some((fd, false));
    }

    /// Register `fd` (an O_DIRECT target) in a free file slot; `None` when
    /// every slot is taken.
    pub fn attach_file(&mut self, fd: RawFd) -> Result<Option<u32>, Error> {
        self.ring
            .attach_file(fd)
            .map_err(|e| stream_err("registering a file", 0, e))
    }

    /// Empty a file slot; no write to it may be in flight.
    pub fn detach_file(&mut self, slot: u32) {
        self.ring.detach_file(slot);
    }

    /// Write `len` bytes of a received frame's payload (its buffer from
    /// [`HEADROOM`]) at `offset` of the file in `slot`, straight from the
    /// registered buffer. The buffer comes back with [`RecvEvent::Written`].
    pub fn write(&mut self, slot: u32, offset: u64, lease: Lease, len: u32, token: u64) {
        self.ring.write_fixed(
            slot,
            offset,
            lease,
            HEADROOM,
            len,
            RecvTag::Write { token, len },
        );
    }

    /// Give free buffers to streams whose payload waits for one (starting
    /// after the last stream served, so none starves); a frame without
    /// payload (a hole) is handed over at once.
    fn grant(&mut self, on_event: &mut dyn FnMut(RecvEvent)) {
        let n = self.streams.len();
        for k in 0..n {
            let i = (self.grant_from + k) % n;
            let Phase::NeedBuffer { header } = self.streams[i].phase else {
                continue;
            };
            let Some(mut lease) = self.ring.arena().take() else {
                self.grant_from = i;
                return;
            };
            lease.as_mut_slice()[HEADER_AT..HEADROOM].copy_from_slice(&self.headers[i]);
            let s = &mut self.streams[i];
            if header.length + trailer(&header) == 0 {
                s.phase = Phase::Header { got: 0 };
                on_event(RecvEvent::Frame {
                    stream: i as u32,
                    header,
                    lease,
                });
            } else {
                s.phase = Phase::Payload { header, got: 0 };
                s.lease = Some(lease);
            }
        }
        self.grant_from = (self.grant_from + 1) % n.max(1);
    }

    /// Post a receive on every open stream that has none: into its header
    /// slot, or into its payload buffer.
    fn arm(&mut self) {
        if let Some((fd, false)) = self.waker {
            self.waker = Some((fd, true));
            let at = self.wake_buf.as_mut_ptr();
            // SAFETY: `wake_buf` is a box this receiver owns and leaves
            // alone while the read is in flight; Drop drains the ring
            // before it is freed, and the caller keeps `fd` open.
            unsafe { self.ring.read_into(fd, at, 8, RecvTag::Wake) };
        }
        for i in 0..self.streams.len() {
            let s = &mut self.streams[i];
            if s.busy || !s.open {
                continue;
            }
            match s.phase {
                Phase::Header { got } => {
                    let at = self.headers[i][got as usize..].as_mut_ptr();
                    s.busy = true;
                    let tag = RecvTag::Recv { stream: i as u32 };
                    // SAFETY: the header slot is a boxed array this receiver
                    // owns and neither moves nor touches while the receive is
                    // in flight; Drop drains the ring before it is freed.
                    unsafe {
                        self.ring
                            .recv_all_into(i as u32, at, FRAME_HEADER_LEN as u32 - got, tag)
                    };
                }
                Phase::NeedBuffer { .. } => {}
                Phase::Payload { header, got } => {
                    let lease = s.lease.take().expect("a payload has its buffer");
                    let len = header.length + trailer(&header) - got;
                    s.busy = true;
                    let tag = RecvTag::Recv { stream: i as u32 };
                    self.ring
                        .recv_all(i as u32, lease, HEADROOM + got as usize, len, tag);
                }
            }
        }
    }

    /// Read what the streams have, handing each complete frame (and each
    /// clean end of stream) to `on_event`. A malformed frame or a stream
    /// cut mid-frame is an error naming the stream.
    pub fn poll(&mut self, wait: bool, on_event: &mut dyn FnMut(RecvEvent)) -> Result<(), Error> {
        self.grant(on_event);
        self.arm();
        let want = usize::from(wait && self.ring.in_flight() > 0);
        match self.wait_limit {
            Some(limit) => self.ring.submit_and_wait_for(want, limit),
            None => self.ring.submit_and_wait(want),
        }
        .map_err(|e| stream_err("io_uring_enter", 0, e))?;
        self.ring.reap(&mut self.batch);
        let mut batch = std::mem::take(&mut self.batch);
        let mut result = Ok(());
        for c in batch.drain(..) {
            if let Err(e) = self.complete(c, on_event) {
                result = result.and(Err(e));
            }
        }
        self.batch = batch;
        result
    }

    /// Open a sealed frame in place (a frame of an unsealed session is
    /// returned as it is) and give it the checksum of its plaintext.
    fn unseal(
        &mut self,
        stream: u32,
        mut header: FrameHeader,
        lease: &mut Lease,
    ) -> Result<FrameHeader, FrameError> {
        let Some((openers, key)) = &mut self.openers else {
            return Ok(header);
        };
        let plen = header.length as usize;
        let buf = lease.as_mut_slice();
        let wire: [u8; FRAME_HEADER_LEN] = buf[HEADER_AT..HEADROOM]
            .try_into()
            .expect("a header's bytes");
        let tag: [u8; TAG_LEN] = buf[HEADROOM + plen..HEADROOM + plen + TAG_LEN]
            .try_into()
            .expect("a tag's bytes");
        openers[stream as usize]
            .open(&wire, &mut buf[HEADROOM..HEADROOM + plen], &tag)
            .map_err(|_| FrameError::Sealing {
                why: "authentication failed (tampered, replayed, reordered or another key)",
            })?;
        if header.flags & FLAG_HOLE != 0 {
            header.checksum = hole_checksum(key, header.file_index, header.offset);
        } else if header.is_sparse() {
            // Its checksum is its whole block's, made once it is unpacked
            // (`session::book::verify`); the seal has authenticated it.
        } else if header.flags & FLAG_UNCHECKED == 0 {
            header.checksum = payload_checksum(
                key,
                header.file_index,
                header.offset,
                &buf[HEADROOM..HEADROOM + plen],
            );
        }
        Ok(header)
    }

    fn complete(
        &mut self,
        c: Completion<RecvTag>,
        on_event: &mut dyn FnMut(RecvEvent),
    ) -> Result<(), Error> {
        let stream = match c.tag {
            RecvTag::Recv { stream } => stream,
            RecvTag::Wake => {
                // Read again at the next poll (a failed read: not again).
                self.waker = self
                    .waker
                    .filter(|_| c.result > 0)
                    .map(|(fd, _)| (fd, false));
                return Ok(());
            }
            RecvTag::Write { token, len } => {
                on_event(RecvEvent::Written {
                    token,
                    len,
                    result: c.result,
                    lease: c.lease.expect("writes carry a buffer"),
                });
                return Ok(());
            }
        };
        let s = &mut self.streams[stream as usize];
        s.busy = false;
        // A payload receive brings its buffer back; a header receive none.
        if let Some(lease) = c.lease {
            s.lease = Some(lease);
        }
        if c.result < 0 && super::error::is_retry(-c.result) {
            return Ok(());
        }
        if c.result <= 0 {
            let ended = s.lease.is_none() && matches!(s.phase, Phase::Header { got: 0 });
            self.close(stream);
            on_event(match (c.result, ended) {
                (0, true) => RecvEvent::Closed { stream },
                (0, false) => RecvEvent::Lost {
                    stream,
                    why: io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the stream ended in the middle of a frame",
                    ),
                },
                (r, _) => RecvEvent::Lost {
                    stream,
                    why: io::Error::from_raw_os_error(-r),
                },
            });
            return Ok(());
        }
        let n = c.result as u32;
        self.received[stream as usize] += u64::from(n);
        match self.streams[stream as usize].phase {
            Phase::Header { got } if got + n < FRAME_HEADER_LEN as u32 => {
                self.streams[stream as usize].phase = Phase::Header { got: got + n };
            }
            Phase::Header { .. } => {
                let header = self.check_header(stream)?;
                self.streams[stream as usize].phase = Phase::NeedBuffer { header };
                // A buffer now, if one is free; else when one comes back.
                self.grant(on_event);
            }
            Phase::NeedBuffer { .. } => unreachable!("no receive is posted without a buffer"),
            Phase::Payload { header, got } => {
                let got = got + n;
                let s = &mut self.streams[stream as usize];
                if got < header.length + trailer(&header) {
                    s.phase = Phase::Payload { header, got };
                    return Ok(());
                }
                s.phase = Phase::Header { got: 0 };
                let mut lease = s.lease.take().expect("a payload has its buffer");
                match self.unseal(stream, header, &mut lease) {
                    Ok(header) => on_event(RecvEvent::Frame {
                        stream,
                        header,
                        lease,
                    }),
                    Err(reason) => {
                        self.ring.arena().give_back(lease);
                        self.close(stream);
                        let stream = self.ids[stream as usize];
                        return Err(Error::Frame { stream, reason });
                    }
                }
            }
        }
        Ok(())
    }

    /// Decode stream `stream`'s header and check it against the limits and
    /// the session's sealing; a malformed one ends the stream.
    fn check_header(&mut self, stream: u32) -> Result<FrameHeader, Error> {
        let sealed_session = self.openers.is_some();
        let header = match FrameHeader::decode(&self.headers[stream as usize]) {
            Ok(h) if h.length as usize > self.payload_max => Err(FrameError::Oversized {
                length: h.length,
                limit: self.payload_max as u32,
            }),
            Ok(h) if (h.flags & FLAG_SEALED != 0) != sealed_session => Err(FrameError::Sealing {
                why: if sealed_session {
                    "an unsealed frame in an encrypted session"
                } else {
                    "a sealed frame in a session without encryption"
                },
            }),
            other => other,
        };
        header.map_err(|reason| {
            self.close(stream);
            let stream = self.ids[stream as usize];
            Error::Frame { stream, reason }
        })
    }

    /// Stream `stream` ends: its buffer (if it holds one) goes back.
    fn close(&mut self, stream: u32) {
        let s = &mut self.streams[stream as usize];
        s.open = false;
        if let Some(lease) = s.lease.take() {
            self.ring.arena().give_back(lease);
        }
    }
}
