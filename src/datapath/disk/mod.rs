//! The disk worker: one ring, one target, one pinned thread.
//!
//! A worker runs phases (sequential or random reads, writes or a mix) at a
//! fixed queue depth against one registered O_DIRECT file with registered
//! buffers. Each tick of its loop reaps a batch of completions, handles them
//! (count, verify, re-issue short I/O), tops the queue back up and submits
//! once. One clock read per tick stamps both the batch's completions and the
//! ops pushed in that tick. The loop allocates nothing.
//!
//! Here: what a phase is and what it did, and the worker. Beside it: the
//! data it writes (`data`: the PRNG, scrambled and random blocks), what
//! to issue next (`issuer`), its ops (`ops`: pushing, continuing and
//! releasing them) and the phase's loop (`run`: its ticks and the
//! handling of each completion).

use std::path::PathBuf;
use std::time::Duration;

use crate::coord::LatencyHist;

use super::arena::BUF_ALIGN;
use super::ring::Needed;
use super::{Arena, Completion, Error, Ring, TargetFile};

mod data;
mod issuer;
mod ops;
mod run;

pub use data::{fill_random, scramble, Rng, SCRAMBLE_STRIDE};
use ops::DiskOp;

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
    ring: Ring<DiskOp>,
    path: PathBuf,
    batch: Vec<Completion<DiskOp>>,
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
}
