//! The disk worker: one ring, one target, one pinned thread.
//!
//! A worker runs phases (sequential or random reads, writes or a mix) at a
//! fixed queue depth against one registered O_DIRECT file with registered
//! buffers. Each tick of its loop reaps a batch of completions, handles them
//! (count, verify, re-issue short I/O), tops the queue back up and submits
//! once. One clock read per tick stamps both the batch's completions and the
//! ops pushed in that tick. The loop allocates nothing.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::coord::{LatencyHist, WorkerCounters};
use crate::protocol::block;

use super::arena::BUF_ALIGN;
use super::ring::Needed;
use super::{Arena, Completion, Error, Ring, TargetFile};

/// Largest queue depth a worker accepts.
pub const QD_MAX: u32 = 1024;
/// Largest block size a worker accepts.
pub const BS_MAX: u32 = 256 << 20;

const _: () = assert!(QD_MAX <= super::ring::RING_ENTRIES_MAX);
const _: () = assert!(BS_MAX as usize <= super::arena::BUF_SIZE_MAX);

/// The registered file index of the target in the worker's ring.
const TARGET_FILE: u32 = 0;

/// What a phase does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    SeqWrite,
    SeqRead,
    RandRead,
    RandWrite,
    /// Random offsets; each op is a read with probability `read_pct`%.
    Mixed {
        read_pct: u8,
    },
}

impl Pattern {
    pub fn writes(self) -> bool {
        !matches!(self, Pattern::SeqRead | Pattern::RandRead)
    }

    pub fn reads(self) -> bool {
        !matches!(self, Pattern::SeqWrite | Pattern::RandWrite)
    }

    fn random(self) -> bool {
        matches!(
            self,
            Pattern::RandRead | Pattern::RandWrite | Pattern::Mixed { .. }
        )
    }
}

/// When the measured part of a phase ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Bytes(u64),
    Time(Duration),
}

/// Read-back verification of stamped blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifySpec {
    /// Target tag written into (and expected in) every block.
    pub target: u32,
    /// The seed every block must carry; `None` pins the first one seen.
    pub seed: Option<u64>,
}

/// One phase of work for one worker.
#[derive(Debug, Clone, Copy)]
pub struct PhaseSpec {
    pub pattern: Pattern,
    pub bs: u32,
    pub qd: u32,
    /// First byte addressed.
    pub region_start: u64,
    /// One past the last byte addressed.
    pub region_end: u64,
    /// Current end of file: reads that reach it may come back short.
    pub eof: u64,
    pub limit: Limit,
    /// Run this long before measuring.
    pub ramp: Duration,
    /// Write zeros instead of incompressible data.
    pub zeros: bool,
    /// Stamp written blocks and check read blocks.
    pub verify: Option<VerifySpec>,
    /// Seeds the data and is stamped into verified blocks.
    pub seed: u64,
    /// fdatasync after the last write, inside the measured time.
    pub fsync: bool,
    /// Pace the ops to this many bytes per second, from the phase's start,
    /// and (sequential) write the region once, never cycling: a recorder
    /// (`bench --disk --mode write --rate`).
    pub rate: Option<f64>,
}

/// What a phase did (its latency histogram stays in the worker).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PhaseOutcome {
    /// Bytes completed in the measured part.
    pub bytes: u64,
    pub ops: u64,
    pub elapsed_ns: u64,
    /// Bytes completed during the ramp.
    pub ramp_bytes: u64,
    /// Ops that completed short and were re-issued for the rest.
    pub short_ops: u64,
    /// Ops re-issued after EINTR/EAGAIN.
    pub retried_ops: u64,
    /// Time the final fdatasync took (inside `elapsed_ns`).
    pub fsync_ns: u64,
    pub verified_blocks: u64,
    /// The seed verified blocks carried.
    pub seed_seen: Option<u64>,
    pub interrupted: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Read,
    Write,
    Fsync,
}

#[derive(Debug, Clone, Copy)]
struct OpTag {
    kind: OpKind,
    /// Offset of the whole block.
    offset: u64,
    /// Bytes asked for the whole block.
    len: u32,
    /// Bytes done so far (short I/O is continued from here).
    done: u32,
    /// Tick (ns since phase start) the op was first pushed.
    pushed_ns: u64,
    /// Times this op was re-issued after EINTR/EAGAIN/EBUSY.
    retries: u16,
}

/// An op that keeps failing with a "try again" errno this often is failed.
const RETRIES_MAX: u16 = 1000;

/// A small fast PRNG (wyrand) for offsets and data.
#[derive(Debug, Clone, Copy)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db);
        ((t >> 64) as u64) ^ (t as u64)
    }

    /// Uniform in `0..n` (n > 0), by multiply-shift.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// Bytes between two per-block stamps written by [`scramble`].
pub const SCRAMBLE_STRIDE: usize = 512;

/// Make a buffer that already holds random bytes unique to this block:
/// overwrite the first 8 bytes of every 512-byte sector with a value drawn
/// from a PRNG seeded by the run's seed, the offset and the pass. The data
/// stays incompressible and no sector repeats, at 1/64 of the cost of
/// refilling the whole block (which capped writes at a few GB/s per core).
pub fn scramble(buf: &mut [u8], seed: u64, offset: u64, generation: u64) {
    let mut rng =
        Rng::new(seed ^ offset.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ generation.rotate_left(32));
    for sector in buf.chunks_mut(SCRAMBLE_STRIDE) {
        let v = rng.next_u64().to_le_bytes();
        let n = sector.len().min(8);
        sector[..n].copy_from_slice(&v[..n]);
    }
}

/// Fill `buf` with incompressible bytes from a PRNG seeded by `seed`,
/// `offset` and `generation`.
pub fn fill_random(buf: &mut [u8], seed: u64, offset: u64, generation: u64) {
    let mut rng =
        Rng::new(seed ^ offset.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ generation.rotate_left(32));
    let mut chunks = buf.chunks_exact_mut(8);
    for chunk in &mut chunks {
        chunk.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    let tail = chunks.into_remainder();
    let last = rng.next_u64().to_le_bytes();
    let n = tail.len();
    tail.copy_from_slice(&last[..n]);
}

impl OpTag {
    fn fsync(now_ns: u64) -> Self {
        OpTag {
            kind: OpKind::Fsync,
            offset: 0,
            len: 0,
            done: 0,
            pushed_ns: now_ns,
            retries: 0,
        }
    }
}

/// How many completions to handle before pushing their replacements and
/// submitting them, rather than after the whole reaped batch.
///
/// Measured here (virtio-blk, 4 KiB random reads at QD 32): replacing the
/// whole batch at once gave 0.85 of fio's IOPS, every 4 completions 1.0. The
/// device gets new work while the rest of the batch is handled.
fn resubmit_every(qd: u32) -> usize {
    (qd as usize / 8).max(1)
}

/// What to issue next in a phase.
struct Issuer {
    rng: Rng,
    next_seq: u64,
    generation: u64,
    measured_issued: u64,
    issuing: bool,
    blocks: u64,
    ramp_ns: u64,
    deadline_ns: Option<u64>,
    /// Keep ops of a random verified phase off blocks already in flight.
    track_busy: bool,
    /// Bytes issued since the start, ramp included (for `rate`).
    paced: u64,
}

impl Issuer {
    fn new(spec: &PhaseSpec) -> Self {
        let ramp_ns = spec.ramp.as_nanos() as u64;
        Issuer {
            rng: Rng::new(spec.seed ^ 0x5EED),
            next_seq: spec.region_start,
            generation: 0,
            measured_issued: 0,
            issuing: true,
            blocks: ((spec.region_end - spec.region_start) / u64::from(spec.bs)).max(1),
            ramp_ns,
            deadline_ns: match spec.limit {
                Limit::Time(t) => Some(ramp_ns + t.as_nanos() as u64),
                Limit::Bytes(_) => None,
            },
            track_busy: spec.verify.is_some() && spec.pattern.random(),
            paced: 0,
        }
    }

    /// Under a rate: how long until the next op may go (none now).
    fn paced_wait(&self, spec: &PhaseSpec, now_ns: u64) -> Option<Duration> {
        let rate = spec.rate?;
        let due_ns = (self.paced as f64 / rate * 1e9) as u64;
        (due_ns > now_ns).then(|| Duration::from_nanos(due_ns - now_ns))
    }

    /// The next op as (kind, offset, length), or `None` when nothing may be
    /// issued now (`issuing` turns false when the phase has issued it all).
    fn next_op(
        &mut self,
        spec: &PhaseSpec,
        now_ns: u64,
        busy: &[u64],
    ) -> Option<(OpKind, u64, u32)> {
        let in_ramp = now_ns < self.ramp_ns;
        let limit_reached = match (spec.limit, self.deadline_ns) {
            (_, Some(deadline)) => now_ns >= deadline,
            (Limit::Bytes(limit), None) => !in_ramp && self.measured_issued >= limit,
            (Limit::Time(_), None) => false,
        };
        if limit_reached {
            self.issuing = false;
            return None;
        }
        if self.paced_wait(spec, now_ns).is_some() {
            return None;
        }
        let bs = u64::from(spec.bs);
        if spec.rate.is_some() && self.next_seq >= spec.region_end {
            // A recorder writes its file once.
            self.issuing = false;
            return None;
        }
        let (kind, offset, len) = if spec.pattern.random() {
            let write = match spec.pattern {
                Pattern::RandWrite => true,
                Pattern::Mixed { read_pct } => self.rng.below(100) >= u64::from(read_pct),
                _ => false,
            };
            let mut offset = spec.region_start + self.rng.below(self.blocks) * bs;
            if self.track_busy {
                // Re-draw a few times; if the block is still in flight, wait
                // for a completion instead (tiny regions).
                let mut tries = 0;
                while busy.contains(&offset) && tries < 8 {
                    offset = spec.region_start + self.rng.below(self.blocks) * bs;
                    tries += 1;
                }
                if busy.contains(&offset) {
                    return None;
                }
            }
            let kind = if write { OpKind::Write } else { OpKind::Read };
            (kind, offset, spec.bs)
        } else {
            if self.next_seq >= spec.region_end {
                self.next_seq = spec.region_start;
                self.generation += 1;
            }
            let offset = self.next_seq;
            let len = (spec.region_end - offset).min(bs) as u32;
            self.next_seq += u64::from(len);
            let kind = if spec.pattern.writes() {
                OpKind::Write
            } else {
                OpKind::Read
            };
            (kind, offset, len)
        };
        if !in_ramp {
            self.measured_issued += u64::from(len);
        }
        self.paced += u64::from(len);
        Some((kind, offset, len))
    }
}

/// Outcome and error of a phase while it runs.
struct RunState {
    out: PhaseOutcome,
    error: Option<Error>,
    /// The tick's one clock reading, ns since the phase start.
    now_ns: u64,
    batch_bytes: u64,
    batch_ops: u64,
}

/// Check that io_uring on this host does what a worker needs with `target`
/// (opcodes, buffer and file registration), with one small buffer, so a
/// run fails at setup with a remedy rather than mid-way.
pub fn probe(target: &TargetFile) -> Result<(), Error> {
    use std::os::fd::AsRawFd;
    let arena = Arena::new(BUF_ALIGN, 1)?;
    let ring: Ring<()> = Ring::new(1, arena, &[target.file.as_raw_fd()], &NEEDED)?;
    drop(ring);
    Ok(())
}

/// Opcodes a disk worker uses.
const NEEDED: [Needed; 4] = [
    Needed::READ_FIXED,
    Needed::WRITE_FIXED,
    Needed::FSYNC,
    Needed::ASYNC_CANCEL,
];

/// One target's ring, buffers and latency histogram.
pub struct DiskWorker {
    ring: Ring<OpTag>,
    path: PathBuf,
    batch: Vec<Completion<OpTag>>,
    /// Offsets of ops in flight, kept only when verifying random mixes so a
    /// read never races a write of the same block.
    busy_offsets: Vec<u64>,
    latency: LatencyHist,
    buf_size: usize,
    qd: u32,
}

impl DiskWorker {
    /// Set up a ring with `qd` registered buffers of `bs` bytes for `target`.
    pub fn new(target: &TargetFile, bs: u32, qd: u32) -> Result<Self, Error> {
        use std::os::fd::AsRawFd;
        assert!(qd > 0 && qd <= QD_MAX, "queue depth {qd} out of range");
        assert!(bs > 0 && bs <= BS_MAX, "block size {bs} out of range");
        assert!(
            target.align.mem as usize <= BUF_ALIGN,
            "memory alignment {} above the arena's {BUF_ALIGN}",
            target.align.mem
        );
        let buf_size = (bs as usize).div_ceil(BUF_ALIGN) * BUF_ALIGN;
        let arena = Arena::new(buf_size, qd as usize)?;
        let ring = Ring::new(qd, arena, &[target.file.as_raw_fd()], &NEEDED)?;
        let capacity = ring.capacity();
        let mut ring = ring;
        // Random bytes in every buffer once; writes then only scramble them.
        let mut leases = Vec::with_capacity(qd as usize);
        while let Some(mut lease) = ring.arena().take() {
            let index = u64::from(lease.index());
            fill_random(lease.as_mut_slice(), 0x0B5E_55ED ^ index, index, 0);
            leases.push(lease);
        }
        for lease in leases {
            ring.arena().give_back(lease);
        }
        Ok(DiskWorker {
            ring,
            path: target.path.clone(),
            batch: Vec::with_capacity(capacity),
            busy_offsets: Vec::with_capacity(capacity),
            latency: LatencyHist::new(),
            buf_size,
            qd,
        })
    }

    /// The io_uring features in use.
    pub fn features(&self) -> &[&'static str] {
        self.ring.features()
    }

    /// Latencies of the last phase's measured ops.
    pub fn latency(&self) -> &LatencyHist {
        &self.latency
    }

    /// Buffers free in the arena (all of them between phases).
    pub fn free_buffers(&mut self) -> usize {
        self.ring.arena().free_count()
    }

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
        let mut is = Issuer::new(spec);
        let mut st = RunState {
            out: PhaseOutcome {
                seed_seen: spec.verify.and_then(|v| v.seed),
                ..PhaseOutcome::default()
            },
            error: None,
            now_ns: 0,
            batch_bytes: 0,
            batch_ops: 0,
        };
        let resubmit_every = resubmit_every(spec.qd);
        let mut end_ns = 0u64;
        let mut fsync_pushed = false;
        loop {
            self.top_up(spec, &mut is, st.now_ns, u32::MAX);

            // Done writing: flush inside the measured time when asked.
            if !is.issuing
                && self.ring.in_flight() == 0
                && st.error.is_none()
                && !st.out.interrupted
                && spec.fsync
                && spec.pattern.writes()
                && !fsync_pushed
            {
                fsync_pushed = true;
                self.ring.fdatasync(TARGET_FILE, OpTag::fsync(st.now_ns));
            }
            if self.ring.in_flight() == 0 {
                // Paced and nothing in flight: wait for the next op's time.
                match is.paced_wait(spec, st.now_ns).filter(|_| is.issuing) {
                    Some(wait) => {
                        std::thread::sleep(wait.min(Duration::from_millis(20)));
                        st.now_ns = start.elapsed().as_nanos() as u64;
                        end_ns = st.now_ns;
                        if stop.load(Ordering::Relaxed) {
                            is.issuing = false;
                            st.out.interrupted = true;
                        }
                        continue;
                    }
                    None => break,
                }
            }

            if let Err(e) = self.ring.submit_and_wait(1) {
                st.error.get_or_insert(Error::Io {
                    op: "io_uring_enter",
                    path: self.path.clone(),
                    offset: 0,
                    source: e,
                });
                self.ring.cancel_all_and_drain();
                break;
            }
            st.now_ns = start.elapsed().as_nanos() as u64;
            end_ns = st.now_ns;
            self.ring.reap(&mut self.batch);
            let mut batch = std::mem::take(&mut self.batch);
            for (i, c) in batch.drain(..).enumerate() {
                self.complete(c, spec, &mut is, &mut st);
                // Replace finished ops a few at a time, not all after the
                // batch: the device gets new work while we handle the rest.
                if (i + 1) % resubmit_every == 0
                    && is.issuing
                    && self.top_up(spec, &mut is, st.now_ns, resubmit_every as u32) > 0
                {
                    // A failed submit leaves the SQEs queued for the next one.
                    let _ = self.ring.submit_and_wait(0);
                }
            }
            self.batch = batch;
            st.out.bytes += st.batch_bytes;
            st.out.ops += st.batch_ops;
            counters.add(st.batch_bytes, st.batch_ops);
            st.batch_bytes = 0;
            st.batch_ops = 0;
            if stop.load(Ordering::Relaxed) && is.issuing {
                is.issuing = false;
                st.out.interrupted = true;
            }
        }
        st.out.elapsed_ns = end_ns.saturating_sub(is.ramp_ns);
        match st.error {
            Some(e) => Err(e),
            None => Ok(st.out),
        }
    }

    /// Push up to `max` new ops while fewer than `qd` are in flight and the
    /// phase has more to issue. Returns how many were pushed.
    fn top_up(&mut self, spec: &PhaseSpec, is: &mut Issuer, now_ns: u64, max: u32) -> u32 {
        let mut pushed = 0;
        while is.issuing && pushed < max && self.ring.in_flight() < spec.qd {
            // Completions not yet handled in this batch still hold their
            // buffers: an empty arena means wait, not fail.
            let Some(mut lease) = self.ring.arena().take() else {
                break;
            };
            let Some((kind, offset, len)) = is.next_op(spec, now_ns, &self.busy_offsets) else {
                self.ring.arena().give_back(lease);
                break;
            };
            if is.track_busy {
                self.busy_offsets.push(offset);
            }
            let tag = OpTag {
                kind,
                offset,
                len,
                done: 0,
                pushed_ns: now_ns,
                retries: 0,
            };
            if kind == OpKind::Write {
                let buf = &mut lease.as_mut_slice()[..len as usize];
                if spec.zeros {
                    buf.fill(0);
                } else {
                    scramble(buf, spec.seed, offset, is.generation);
                }
                if let Some(v) = spec.verify {
                    block::seal(
                        buf,
                        &block::Stamp {
                            seed: spec.seed,
                            offset,
                            target: v.target,
                            block_len: len,
                            generation: is.generation,
                        },
                    );
                }
                self.ring
                    .write_fixed(TARGET_FILE, offset, lease, 0, len, tag);
            } else {
                self.ring
                    .read_fixed(TARGET_FILE, offset, lease, 0, len, tag);
            }
            pushed += 1;
        }
        pushed
    }

    /// Handle one completion: count it, verify it, or continue it when short.
    fn complete(
        &mut self,
        c: Completion<OpTag>,
        spec: &PhaseSpec,
        is: &mut Issuer,
        st: &mut RunState,
    ) {
        let Completion {
            result,
            lease,
            mut tag,
            ..
        } = c;
        if tag.kind == OpKind::Fsync {
            st.out.fsync_ns = st.now_ns.saturating_sub(tag.pushed_ns);
            if result < 0 {
                st.error.get_or_insert(Error::Io {
                    op: "fdatasync",
                    path: self.path.clone(),
                    offset: 0,
                    source: std::io::Error::from_raw_os_error(-result),
                });
            }
            return;
        }
        let mut lease = lease.expect("read and write ops carry a buffer");
        let op = if tag.kind == OpKind::Write {
            "write"
        } else {
            "read"
        };
        let track_busy = is.track_busy;
        if result < 0 {
            if super::error::is_retry(-result) && st.error.is_none() && tag.retries < RETRIES_MAX {
                st.out.retried_ops += 1;
                tag.retries += 1;
                self.push_rest(lease, tag);
            } else {
                st.error.get_or_insert(Error::Io {
                    op,
                    path: self.path.clone(),
                    offset: tag.offset + u64::from(tag.done),
                    source: std::io::Error::from_raw_os_error(-result),
                });
                is.issuing = false;
                self.release(lease, tag.offset, track_busy);
            }
            return;
        }
        let n = result as u32;
        assert!(
            n <= tag.len - tag.done,
            "kernel reported more bytes than asked"
        );
        tag.done += n;
        let at_eof = tag.kind == OpKind::Read && tag.offset + u64::from(tag.done) >= spec.eof;
        if tag.done < tag.len && !at_eof {
            if n == 0 {
                st.error.get_or_insert(Error::Io {
                    op,
                    path: self.path.clone(),
                    offset: tag.offset + u64::from(tag.done),
                    source: std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        if tag.kind == OpKind::Read {
                            "file ended early (truncated while in use?)"
                        } else {
                            "the device accepted no bytes"
                        },
                    ),
                });
                is.issuing = false;
                self.release(lease, tag.offset, track_busy);
                return;
            }
            // Short read or write: continue from where it stopped.
            st.out.short_ops += 1;
            if st.error.is_none() {
                self.push_rest(lease, tag);
            } else {
                self.release(lease, tag.offset, track_busy);
            }
            return;
        }
        if tag.kind == OpKind::Read && tag.done > 0 {
            if let Some(v) = spec.verify {
                let data = &lease.as_mut_slice()[..tag.done as usize];
                match block::check(data, v.target, tag.offset, st.out.seed_seen) {
                    Ok(stamp) => {
                        st.out.seed_seen = Some(stamp.seed);
                        st.out.verified_blocks += 1;
                    }
                    Err(reason) => {
                        st.error.get_or_insert(Error::Verify {
                            path: self.path.clone(),
                            offset: tag.offset,
                            reason,
                        });
                        is.issuing = false;
                    }
                }
            }
        }
        if st.now_ns >= is.ramp_ns && tag.pushed_ns >= is.ramp_ns {
            st.batch_bytes += u64::from(tag.done);
            st.batch_ops += 1;
            self.latency.record_n(st.now_ns - tag.pushed_ns, 1);
        } else {
            st.out.ramp_bytes += u64::from(tag.done);
        }
        self.release(lease, tag.offset, track_busy);
    }

    fn push_rest(&mut self, lease: super::Lease, tag: OpTag) {
        let at = tag.done as usize;
        let rest = tag.len - tag.done;
        let offset = tag.offset + u64::from(tag.done);
        match tag.kind {
            OpKind::Read => self
                .ring
                .read_fixed(TARGET_FILE, offset, lease, at, rest, tag),
            OpKind::Write => self
                .ring
                .write_fixed(TARGET_FILE, offset, lease, at, rest, tag),
            OpKind::Fsync => unreachable!("fsync carries no buffer"),
        }
    }

    fn release(&mut self, lease: super::Lease, offset: u64, track_busy: bool) {
        if track_busy {
            if let Some(i) = self.busy_offsets.iter().position(|&o| o == offset) {
                self.busy_offsets.swap_remove(i);
            }
        }
        self.ring.arena().give_back(lease);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_fill_differs_per_block_and_is_incompressible_looking() {
        let mut a = vec![0u8; 4096];
        let mut b = vec![0u8; 4096];
        fill_random(&mut a, 1, 0, 0);
        fill_random(&mut b, 1, 4096, 0);
        assert_ne!(a, b);
        // No 64-byte run repeats inside a block (not dedupable at small grain).
        let mut seen = std::collections::HashSet::new();
        for c in a.chunks(64) {
            assert!(seen.insert(c.to_vec()));
        }
        let mut tail = vec![0u8; 13];
        fill_random(&mut tail, 1, 0, 0);
        assert_eq!(&tail[..8], &a[..8]);
    }

    #[test]
    fn below_stays_in_range() {
        let mut r = Rng::new(7);
        let mut hits = [0u32; 10];
        for _ in 0..10_000 {
            hits[r.below(10) as usize] += 1;
        }
        assert!(hits.iter().all(|&h| h > 800 && h < 1200), "{hits:?}");
    }
}
