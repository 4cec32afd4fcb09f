//! The sender's streams: their numbers in the session, which one takes the
//! next frame, and what each has handed to its socket (published for the
//! coordinator's per-stream rates).

use crate::coord::StreamBytes;
use crate::datapath::sys;

use super::NetSender;

impl NetSender {
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
        sys::socket_outq(self.fds[stream as usize]).unwrap_or(0)
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
}
