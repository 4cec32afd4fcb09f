//! Counters a worker bumps once per reap batch and the coordinator samples.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// One worker's progress. Padded to its own cache lines so two workers never
/// share one.
#[repr(align(128))]
#[derive(Debug, Default)]
pub struct WorkerCounters {
    bytes: AtomicU64,
    /// Bytes the total counted as data that did not cross (zeros left
    /// out): progress, not traffic. A source's holes count in neither.
    unsent: AtomicU64,
    ops: AtomicU64,
    done: AtomicBool,
    streams: StreamBytes,
    /// Streams new frames may go on (the first this many; 0: all), which
    /// the coordinator raises under `-P auto`.
    active: AtomicU32,
}

impl WorkerCounters {
    /// Counters that also carry the bytes of each of `stream_count` data
    /// streams (see [`StreamBytes`]).
    pub fn with_streams(stream_count: usize) -> Self {
        WorkerCounters {
            streams: StreamBytes::new(stream_count),
            ..Self::default()
        }
    }

    /// The per-stream byte counts (none unless made `with_streams`).
    pub fn streams(&self) -> &StreamBytes {
        &self.streams
    }

    /// Add a reap batch's bytes and ops (called by the single owning worker).
    pub fn add(&self, bytes: u64, ops: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.ops.fetch_add(ops, Ordering::Relaxed);
    }

    /// `bytes` the transfer's total counted as data that turned out not to
    /// cross (zeros left out with `--sparse`, a file with fewer data
    /// pieces than it was thought to hold): done without a payload.
    pub fn add_unsent(&self, bytes: u64) {
        self.unsent.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Bytes done without a payload so far (see [`add_unsent`](Self::add_unsent)).
    pub fn unsent(&self) -> u64 {
        self.unsent.load(Ordering::Relaxed)
    }

    /// Bytes and ops completed so far.
    pub fn snapshot(&self) -> (u64, u64) {
        (
            self.bytes.load(Ordering::Relaxed),
            self.ops.load(Ordering::Relaxed),
        )
    }

    /// Let new frames use the first `n` streams (0: all of them).
    pub fn set_active_streams(&self, n: u32) {
        self.active.store(n, Ordering::Relaxed);
    }

    /// Streams new frames may use, of `all`.
    pub fn active_streams(&self, all: u32) -> u32 {
        match self.active.load(Ordering::Relaxed) {
            0 => all,
            n => n.min(all),
        }
    }

    /// Mark the worker finished (its last batch is already counted).
    pub fn finish(&self) {
        self.done.store(true, Ordering::Release);
    }

    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }
}

/// Cumulative bytes per data stream: the one thread that owns the streams
/// stores each stream's total as it grows (a plain store, no allocation),
/// and the coordinator samples them. Cloning shares the counts, so a data
/// path object can hold its own handle.
#[derive(Debug, Clone, Default)]
pub struct StreamBytes(Arc<StreamBytesInner>);

#[derive(Debug, Default)]
struct StreamBytesInner {
    /// Whether a publisher attached: unpublished counts are not data.
    published: AtomicBool,
    bytes: Box<[AtomicU64]>,
}

impl StreamBytes {
    pub fn new(stream_count: usize) -> Self {
        StreamBytes(Arc::new(StreamBytesInner {
            published: AtomicBool::new(false),
            bytes: (0..stream_count).map(|_| AtomicU64::new(0)).collect(),
        }))
    }

    pub fn stream_count(&self) -> usize {
        self.0.bytes.len()
    }

    /// The publisher says it will keep the counts current.
    pub fn attach(&self) {
        self.0.published.store(true, Ordering::Release);
    }

    pub fn is_published(&self) -> bool {
        self.0.published.load(Ordering::Acquire)
    }

    /// Set stream `stream`'s total (called by the single owning thread).
    pub fn store(&self, stream: usize, total_bytes: u64) {
        self.0.bytes[stream].store(total_bytes, Ordering::Relaxed);
    }

    pub fn load(&self, stream: usize) -> u64 {
        self.0.bytes[stream].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_and_counting() {
        assert!(std::mem::align_of::<WorkerCounters>() >= 128);
        let c = WorkerCounters::default();
        c.add(4096, 1);
        c.add(8192, 2);
        assert_eq!(c.snapshot(), (12288, 3));
        assert!(!c.is_done());
        c.finish();
        assert!(c.is_done());
        assert_eq!(c.streams().stream_count(), 0);
    }

    #[test]
    fn stream_bytes_are_shared_by_clones_and_marked_published() {
        let c = WorkerCounters::with_streams(3);
        let publisher = c.streams().clone();
        assert!(!c.streams().is_published());
        publisher.attach();
        publisher.store(2, 4096);
        assert!(c.streams().is_published());
        assert_eq!(
            (0..3).map(|i| c.streams().load(i)).collect::<Vec<_>>(),
            [0, 0, 4096]
        );
    }
}
