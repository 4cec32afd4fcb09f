//! Counters a worker bumps once per reap batch and the coordinator samples.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// One worker's progress. Padded to its own cache lines so two workers never
/// share one.
#[repr(align(128))]
#[derive(Debug, Default)]
pub struct WorkerCounters {
    bytes: AtomicU64,
    ops: AtomicU64,
    done: AtomicBool,
}

impl WorkerCounters {
    /// Add a reap batch's bytes and ops (called by the single owning worker).
    pub fn add(&self, bytes: u64, ops: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.ops.fetch_add(ops, Ordering::Relaxed);
    }

    /// Bytes and ops completed so far.
    pub fn snapshot(&self) -> (u64, u64) {
        (
            self.bytes.load(Ordering::Relaxed),
            self.ops.load(Ordering::Relaxed),
        )
    }

    /// Mark the worker finished (its last batch is already counted).
    pub fn finish(&self) {
        self.done.store(true, Ordering::Release);
    }

    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
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
    }
}
