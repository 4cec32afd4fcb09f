//! The receiver: frames received from a set of TCP streams into registered
//! buffers. A header is received into its stream's own slot; a buffer is
//! taken only for a payload, so any number of streams share a small pool.
//! Beside it: checking and opening each frame (`frames`), writing
//! payloads to files from the buffers (`writes`), and what it tells its
//! caller about its streams (`state`).

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use crate::datapath::error::is_retry;
use crate::datapath::error::StreamSite;
use crate::datapath::net::layout::{frame_buf_size, trailer, HEADER_AT, HEADROOM};
use crate::datapath::net::stream_err;
use crate::datapath::ring::Needed;
use crate::datapath::{Arena, Completion, Error, Lease, Ring};
use crate::protocol::frame::{FrameHeader, FrameKey, FRAME_HEADER_LEN};
use crate::protocol::handshake::SessionKeys;
use crate::protocol::seal::{self, FrameOpener};

mod frames;
mod state;
mod writes;

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
        super::register_sockets(&mut self.ring, sockets, &self.ids)?;
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
        .map_err(|e| stream_err("io_uring_enter", StreamSite::ReceiverRing, e))?;
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
        if c.result < 0 && is_retry(-c.result) {
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

    /// Stream `stream` ends: its buffer (if it holds one) goes back.
    fn close(&mut self, stream: u32) {
        let s = &mut self.streams[stream as usize];
        s.open = false;
        if let Some(lease) = s.lease.take() {
            self.ring.arena().give_back(lease);
        }
    }
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
