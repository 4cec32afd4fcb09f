//! A phase's loop, one tick at a time: top the queue up, flush once the
//! writing is done, wait for completions (or, paced, for the next op's
//! time), handle each (count it, verify it, continue it when short) and
//! publish the tick's counts. The phase's state lives in a [`RunState`],
//! so each step is short and none allocates.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::coord::WorkerCounters;
use crate::datapath::error::is_retry;
use crate::datapath::{Completion, Error, Lease};
use crate::protocol::block;

use super::issuer::Issuer;
use super::ops::{BlockOp, DiskOp, OpKind, RETRIES_MAX};
use super::{DiskWorker, PhaseOutcome, PhaseSpec, TARGET_FILE};

/// How many completions to handle before pushing their replacements and
/// submitting them, rather than after the whole reaped batch.
///
/// Measured here (virtio-blk, 4 KiB random reads at QD 32): replacing the
/// whole batch at once gave 0.85 of fio's IOPS, every 4 completions 1.0. The
/// device gets new work while the rest of the batch is handled.
fn resubmit_every(qd: u32) -> usize {
    (qd as usize / 8).max(1)
}

/// A phase while it runs: what to issue, the outcome and first error so
/// far, the clock, the tick's counts, and where they are published.
struct RunState<'a> {
    spec: &'a PhaseSpec,
    is: Issuer,
    out: PhaseOutcome,
    error: Option<Error>,
    /// The tick's one clock reading, ns since the phase start.
    now_ns: u64,
    /// The last clock reading: the phase's end once it is over.
    end_ns: u64,
    batch_bytes: u64,
    batch_ops: u64,
    fsync_pushed: bool,
    resubmit_every: usize,
    start: Instant,
    counters: &'a WorkerCounters,
    stop: &'a AtomicBool,
}

impl<'a> RunState<'a> {
    fn new(
        spec: &'a PhaseSpec,
        counters: &'a WorkerCounters,
        stop: &'a AtomicBool,
        start: Instant,
    ) -> Self {
        RunState {
            spec,
            is: Issuer::new(spec),
            out: PhaseOutcome {
                seed_seen: spec.verify.and_then(|v| v.seed),
                ..PhaseOutcome::default()
            },
            error: None,
            now_ns: 0,
            end_ns: 0,
            batch_bytes: 0,
            batch_ops: 0,
            fsync_pushed: false,
            resubmit_every: resubmit_every(spec.qd),
            start,
            counters,
            stop,
        }
    }

    /// The tick's clock reading.
    fn read_clock(&mut self) {
        self.now_ns = self.start.elapsed().as_nanos() as u64;
        self.end_ns = self.now_ns;
    }

    /// A stop asked for ends the issuing; the outcome says `interrupted`.
    fn heed_stop(&mut self) {
        if self.stop.load(Ordering::Relaxed) && self.is.issuing {
            self.is.issuing = false;
            self.out.interrupted = true;
        }
    }

    /// The tick's counts into the outcome and the coordinator's counters.
    fn close_tick(&mut self) {
        self.out.bytes += self.batch_bytes;
        self.out.ops += self.batch_ops;
        self.counters.add(self.batch_bytes, self.batch_ops);
        self.batch_bytes = 0;
        self.batch_ops = 0;
        self.heed_stop();
    }

    /// The phase fails with `e`, unless it failed already; nothing more is
    /// issued.
    fn fail(&mut self, e: Error) {
        self.error.get_or_insert(e);
        self.is.issuing = false;
    }
}

impl DiskWorker {
    /// Run one phase. `start` is the common start of all workers' phase;
    /// `counters` get the measured bytes once per tick; `stop` ends the phase
    /// early (the outcome says `interrupted`).
    pub fn run(
        &mut self,
        spec: &PhaseSpec,
        counters: &WorkerCounters,
        stop: &AtomicBool,
        start: Instant,
    ) -> Result<PhaseOutcome, Error> {
        assert!(spec.qd <= self.qd, "phase queue depth above the worker's");
        assert!(
            spec.bs as usize <= self.buf_size,
            "phase block size above the worker's buffers"
        );
        assert!(spec.region_end > spec.region_start, "empty region");
        self.latency.reset();
        self.busy_offsets.clear();
        let mut st = RunState::new(spec, counters, stop, start);
        while self.tick(&mut st) {}
        st.out.elapsed_ns = st.end_ns.saturating_sub(st.is.ramp_ns);
        match st.error {
            Some(e) => Err(e),
            None => Ok(st.out),
        }
    }

    /// One tick of the phase; false once it is over.
    fn tick(&mut self, st: &mut RunState) -> bool {
        self.top_up(st.spec, &mut st.is, st.now_ns, u32::MAX);
        self.fsync_when_written(st);
        if self.ring.in_flight() == 0 {
            return self.wait_for_pace(st);
        }
        if !self.submit_and_wait(st) {
            return false;
        }
        self.handle_batch(st);
        st.close_tick();
        true
    }

    /// Done writing: flush inside the measured time when the phase asks.
    fn fsync_when_written(&mut self, st: &mut RunState) {
        let written = !st.is.issuing
            && self.ring.in_flight() == 0
            && st.error.is_none()
            && !st.out.interrupted;
        if written && st.spec.fsync && st.spec.pattern.writes() && !st.fsync_pushed {
            st.fsync_pushed = true;
            let tag = DiskOp::Fsync {
                pushed_ns: st.now_ns,
            };
            self.ring.fdatasync(TARGET_FILE, tag);
        }
    }

    /// Nothing in flight: a paced phase with more to issue sleeps toward
    /// its next op's time (true); any other is over (false).
    fn wait_for_pace(&mut self, st: &mut RunState) -> bool {
        let wait = st.is.paced_wait(st.spec, st.now_ns);
        let Some(wait) = wait.filter(|_| st.is.issuing) else {
            return false;
        };
        std::thread::sleep(wait.min(Duration::from_millis(20)));
        st.read_clock();
        st.heed_stop();
        true
    }

    /// Submit and wait for a completion; a failed wait ends the phase
    /// with its error, once what is in flight is drained.
    fn submit_and_wait(&mut self, st: &mut RunState) -> bool {
        if let Err(e) = self.ring.submit_and_wait(1) {
            st.error
                .get_or_insert(self.io_error("io_uring_enter", 0, e));
            self.ring.cancel_all_and_drain();
            return false;
        }
        st.read_clock();
        true
    }

    /// Handle the reaped completions, replacing finished ops a few at a
    /// time, not all after the batch: the device gets new work while the
    /// rest is handled.
    fn handle_batch(&mut self, st: &mut RunState) {
        self.ring.reap(&mut self.batch);
        let mut batch = std::mem::take(&mut self.batch);
        let every = st.resubmit_every;
        for (i, c) in batch.drain(..).enumerate() {
            self.complete(c, st);
            if (i + 1) % every == 0
                && st.is.issuing
                && self.top_up(st.spec, &mut st.is, st.now_ns, every as u32) > 0
            {
                // A failed submit leaves the SQEs queued for the next one.
                let _ = self.ring.submit_and_wait(0);
            }
        }
        self.batch = batch;
    }

    /// Handle one completion: count it, verify it, or continue it when short.
    fn complete(&mut self, c: Completion<DiskOp>, st: &mut RunState) {
        let Completion {
            result, lease, tag, ..
        } = c;
        match tag {
            DiskOp::Fsync { pushed_ns } => self.synced(result, pushed_ns, st),
            DiskOp::Block(op) => {
                let lease = lease.expect("read and write ops carry a buffer");
                self.block_done(op, result, lease, st);
            }
        }
    }

    /// The fdatasync finished: its time is the phase's flush time.
    fn synced(&mut self, result: i32, pushed_ns: u64, st: &mut RunState) {
        st.out.fsync_ns = st.now_ns.saturating_sub(pushed_ns);
        if result < 0 {
            let e = io::Error::from_raw_os_error(-result);
            st.error.get_or_insert(self.io_error("fdatasync", 0, e));
        }
    }

    /// A block op completed with `result` bytes (or a negative errno).
    fn block_done(&mut self, mut op: BlockOp, result: i32, lease: Lease, st: &mut RunState) {
        if result < 0 {
            self.block_failed(op, -result, lease, st);
            return;
        }
        let n = result as u32;
        assert!(
            n <= op.len - op.done,
            "kernel reported more bytes than asked"
        );
        op.done += n;
        let at_eof = op.kind == OpKind::Read && op.offset + u64::from(op.done) >= st.spec.eof;
        if op.done < op.len && !at_eof {
            self.block_short(op, n, lease, st);
            return;
        }
        if op.kind == OpKind::Read && op.done > 0 {
            self.verify(&op, &lease, st);
        }
        self.count(&op, st);
        self.release(lease, op.offset, st.is.track_busy);
    }

    /// A block op failed with `errno`: "try again" goes again (a bounded
    /// number of times, while the phase has no error); anything else is
    /// the phase's error.
    fn block_failed(&mut self, mut op: BlockOp, errno: i32, lease: Lease, st: &mut RunState) {
        if is_retry(errno) && st.error.is_none() && op.retries < RETRIES_MAX {
            st.out.retried_ops += 1;
            op.retries += 1;
            self.push_block(lease, op);
            return;
        }
        let at = op.offset + u64::from(op.done);
        let e = io::Error::from_raw_os_error(errno);
        st.fail(self.io_error(op.kind.name(), at, e));
        self.release(lease, op.offset, st.is.track_busy);
    }

    /// A block op came back short after moving `n` bytes: continued from
    /// where it stopped, unless it moved none (the file ended, or the
    /// device took nothing: the phase's error) or the phase failed.
    fn block_short(&mut self, op: BlockOp, n: u32, lease: Lease, st: &mut RunState) {
        if n == 0 {
            let why = match op.kind {
                OpKind::Read => "file ended early (truncated while in use?)",
                OpKind::Write => "the device accepted no bytes",
            };
            let at = op.offset + u64::from(op.done);
            let e = io::Error::new(io::ErrorKind::UnexpectedEof, why);
            st.fail(self.io_error(op.kind.name(), at, e));
            self.release(lease, op.offset, st.is.track_busy);
            return;
        }
        // Short read or write: continue from where it stopped.
        st.out.short_ops += 1;
        if st.error.is_none() {
            self.push_block(lease, op);
        } else {
            self.release(lease, op.offset, st.is.track_busy);
        }
    }

    /// Check a read block's stamp, when the phase verifies.
    fn verify(&mut self, op: &BlockOp, lease: &Lease, st: &mut RunState) {
        let Some(v) = st.spec.verify else {
            return;
        };
        let data = &lease.as_slice()[..op.done as usize];
        match block::check(data, v.target, op.offset, st.out.seed_seen) {
            Ok(stamp) => {
                st.out.seed_seen = Some(stamp.seed);
                st.out.verified_blocks += 1;
            }
            Err(reason) => st.fail(Error::Verify {
                path: self.path.clone(),
                offset: op.offset,
                reason,
            }),
        }
    }

    /// A finished block counts in the measured part (with its latency),
    /// or in the ramp.
    fn count(&mut self, op: &BlockOp, st: &mut RunState) {
        if st.now_ns >= st.is.ramp_ns && op.pushed_ns >= st.is.ramp_ns {
            st.batch_bytes += u64::from(op.done);
            st.batch_ops += 1;
            self.latency.record_n(st.now_ns - op.pushed_ns, 1);
        } else {
            st.out.ramp_bytes += u64::from(op.done);
        }
    }

    fn io_error(&self, op: &'static str, offset: u64, source: io::Error) -> Error {
        Error::Io {
            op,
            path: self.path.clone(),
            offset,
            source,
        }
    }
}
