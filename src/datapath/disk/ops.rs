//! A disk worker's ops: a block read or written (continued from where a
//! short one stopped, or pushed again after "try again"), and the
//! fdatasync that ends a writing phase; and how blocks are filled,
//! pushed and released.

use crate::datapath::Lease;
use crate::protocol::block;

use super::issuer::Issuer;
use super::{scramble, DiskWorker, PhaseSpec, TARGET_FILE};

/// Whether a block op reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OpKind {
    Read,
    Write,
}

impl OpKind {
    /// The op's name in errors.
    pub(super) fn name(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Write => "write",
        }
    }
}

/// An op of a disk worker's ring.
#[derive(Debug, Clone, Copy)]
pub(super) enum DiskOp {
    /// A block read or written.
    Block(BlockOp),
    /// The fdatasync after a phase's last write, pushed at `pushed_ns`.
    Fsync { pushed_ns: u64 },
}

/// A block read or written.
#[derive(Debug, Clone, Copy)]
pub(super) struct BlockOp {
    pub(super) kind: OpKind,
    /// Offset of the whole block.
    pub(super) offset: u64,
    /// Bytes asked for the whole block.
    pub(super) len: u32,
    /// Bytes done so far (short I/O is continued from here).
    pub(super) done: u32,
    /// Tick (ns since phase start) the op was first pushed.
    pub(super) pushed_ns: u64,
    /// Times this op was re-issued after EINTR/EAGAIN/EBUSY.
    pub(super) retries: u16,
}

/// An op that keeps failing with a "try again" errno this often is failed.
pub(super) const RETRIES_MAX: u16 = 1000;

/// A block's bytes before it is written: zeros, or the buffer's random
/// bytes made unique to this block; stamped when the phase verifies.
fn fill_block(buf: &mut [u8], spec: &PhaseSpec, offset: u64, generation: u64) {
    if spec.zeros {
        buf.fill(0);
    } else {
        scramble(buf, spec.seed, offset, generation);
    }
    if let Some(v) = spec.verify {
        block::seal(
            buf,
            &block::Stamp {
                seed: spec.seed,
                offset,
                target: v.target,
                block_len: buf.len() as u32,
                generation,
            },
        );
    }
}

impl DiskWorker {
    /// Push up to `max` new ops while fewer than `qd` are in flight and the
    /// phase has more to issue. Returns how many were pushed.
    pub(super) fn top_up(
        &mut self,
        spec: &PhaseSpec,
        is: &mut Issuer,
        now_ns: u64,
        max: u32,
    ) -> u32 {
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
            if kind == OpKind::Write {
                let buf = &mut lease.as_mut_slice()[..len as usize];
                fill_block(buf, spec, offset, is.generation);
            }
            let op = BlockOp {
                kind,
                offset,
                len,
                done: 0,
                pushed_ns: now_ns,
                retries: 0,
            };
            self.push_block(lease, op);
            pushed += 1;
        }
        pushed
    }

    /// Push what is left of block op `op` (all of it when nothing is done):
    /// its bytes from `done` on, at their place in the block.
    pub(super) fn push_block(&mut self, lease: Lease, op: BlockOp) {
        let at = op.done as usize;
        let rest = op.len - op.done;
        let offset = op.offset + u64::from(op.done);
        let tag = DiskOp::Block(op);
        match op.kind {
            OpKind::Read => self
                .ring
                .read_fixed(TARGET_FILE, offset, lease, at, rest, tag),
            OpKind::Write => self
                .ring
                .write_fixed(TARGET_FILE, offset, lease, at, rest, tag),
        }
    }

    /// A block op is over: its buffer goes back (and its block is no
    /// longer in flight).
    pub(super) fn release(&mut self, lease: Lease, offset: u64, track_busy: bool) {
        if track_busy {
            if let Some(i) = self.busy_offsets.iter().position(|&o| o == offset) {
                self.busy_offsets.swap_remove(i);
            }
        }
        self.ring.arena().give_back(lease);
    }
}
