//! The sender: frames queued per stream and sent from registered buffers,
//! one send in flight per stream so its frames stay in order, zero-copy
//! where it pays. Its other jobs live beside it: reading sources into the
//! frame buffers (`reads`), choosing a stream and counting what each
//! moved (`streams`), handling completions (`complete`) and giving up
//! on streams that stall (`stall`).

use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use crate::coord::StreamBytes;
use crate::datapath::error::StreamSite;
use crate::datapath::net::layout::{frame_buf_size, HEADER_AT, HEADROOM};
use crate::datapath::net::stream_err;
use crate::datapath::net::zerocopy::{probe_send_zc, zero_copy_wont_pay, ZeroCopy};
use crate::datapath::ring::Needed;
use crate::datapath::{sys, Arena, Completion, Error, Lease, Ring};
use crate::protocol::frame::{FrameHeader, FLAG_SEALED, FRAME_HEADER_LEN};
use crate::protocol::handshake::SessionKeys;
use crate::protocol::seal::{self, FrameSealer, TAG_LEN};

mod complete;
mod reads;
mod stall;
mod streams;

use stall::wait_slice;

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

/// An op of the sender's ring.
#[derive(Debug, Clone, Copy)]
enum SendOp {
    /// A frame going out on a stream.
    Send(Sending),
    /// A disk read into a frame buffer, with the caller's token.
    Read { token: u32 },
}

/// A frame's send in flight.
#[derive(Debug, Clone, Copy)]
struct Sending {
    stream: u32,
    /// Bytes of this frame (header and payload) and how many are sent.
    len: u32,
    done: u32,
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
    ring: Ring<SendOp>,
    /// Finished disk reads: (token, result, buffer), for the caller.
    reads_done: VecDeque<(u32, i32, Lease)>,
    queues: Vec<SendQueue>,
    batch: Vec<Completion<SendOp>>,
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
        super::register_sockets(&mut self.ring, sockets, &self.ids)?;
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
                let _ = sys::set_notsent_lowat(fd, self.ring.arena().buf_size());
            }
        }
        let now = Instant::now();
        self.last_any_progress = now;
        for (q, &fd) in self.queues.iter_mut().zip(sockets) {
            q.last_progress = now;
            // What the peer acknowledged before the data (the stream's
            // hello) is no progress of the data.
            q.last_acked = sys::tcp_progress(fd).map_or(0, |t| t.bytes_acked);
        }
        Ok(())
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

    /// Frame buffers this sender registered.
    pub fn buffer_count(&self) -> usize {
        self.buf_count
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
        let tag = SendOp::Send(Sending {
            stream,
            len,
            done,
            buf: lease.index(),
        });
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
        .map_err(|e| stream_err("io_uring_enter", StreamSite::SenderRing, e))?;
        self.ring.reap(&mut self.batch);
        let mut batch = std::mem::take(&mut self.batch);
        for c in batch.drain(..) {
            self.complete(c);
        }
        self.batch = batch;
        self.check_stalls()
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
