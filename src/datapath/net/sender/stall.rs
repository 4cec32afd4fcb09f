//! Stalls: a stream that has had data waiting for half the limit without
//! moving a byte, while others move, is shut down and reported lost; when
//! no stream has moved a byte for the whole limit, the peer stopped
//! reading or is gone. The peer's TCP acknowledgements count as progress.

use std::io;
use std::time::{Duration, Instant};

use crate::datapath::error::StreamSite;
use crate::datapath::net::stream_err;
use crate::datapath::{sys, Error, Lease};

use super::NetSender;

/// How long a wait inside `poll` lasts at most when stalls are watched.
pub(super) fn wait_slice(limit: Duration) -> Duration {
    (limit / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

impl NetSender {
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
        sys::shutdown_both(self.fds[stream as usize]);
        self.lost.push((stream, why));
    }

    /// Whether the peer's TCP acknowledged more on `stream` since the last
    /// look (a descriptor that is not TCP, as in tests, always has).
    pub(super) fn peer_acked(&mut self, stream: u32) -> bool {
        let q = &mut self.queues[stream as usize];
        match sys::tcp_progress(self.fds[stream as usize]) {
            Some(t) if t.bytes_acked == q.last_acked => false,
            Some(t) => {
                q.last_acked = t.bytes_acked;
                true
            }
            None => true,
        }
    }

    pub(super) fn check_stalls(&mut self) -> Result<(), Error> {
        let Some(limit) = self.stall else {
            return Ok(());
        };
        let now = Instant::now();
        // A send in flight may move bytes long before it completes (a large
        // frame on a slow path): the peer's TCP acknowledgements count too.
        for (s, q) in self.queues.iter_mut().enumerate() {
            if q.live && q.busy && now.duration_since(q.last_progress) > limit / 8 {
                if let Some(t) = sys::tcp_progress(self.fds[s]) {
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
                StreamSite::AllStreams,
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
}
