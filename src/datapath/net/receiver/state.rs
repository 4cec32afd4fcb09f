//! What the receiver tells its caller about its streams: bytes delivered
//! and taken in by TCP, who waits on whom, and its buffers.

use crate::datapath::sys;

use super::{NetReceiver, Phase};

impl NetReceiver {
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
            if let Some(t) = sys::tcp_progress(self.fds[i]) {
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
}
