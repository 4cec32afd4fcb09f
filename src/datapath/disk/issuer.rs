//! What a phase issues next: sequential blocks through the region (again
//! from its start, as a new generation, once it is done), or random ones
//! (kept off blocks in flight when a random mix is verified); until its
//! byte or time limit, and no faster than its rate.

use std::time::Duration;

use super::ops::OpKind;
use super::{Limit, Pattern, PhaseSpec, Rng};

/// What to issue next in a phase.
pub(super) struct Issuer {
    rng: Rng,
    next_seq: u64,
    pub(super) generation: u64,
    measured_issued: u64,
    pub(super) issuing: bool,
    blocks: u64,
    pub(super) ramp_ns: u64,
    deadline_ns: Option<u64>,
    /// Keep ops of a random verified phase off blocks already in flight.
    pub(super) track_busy: bool,
    /// Bytes issued since the start, ramp included (for `rate`).
    paced: u64,
}

impl Issuer {
    pub(super) fn new(spec: &PhaseSpec) -> Self {
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
    pub(super) fn paced_wait(&self, spec: &PhaseSpec, now_ns: u64) -> Option<Duration> {
        let rate = spec.rate?;
        let due_ns = (self.paced as f64 / rate * 1e9) as u64;
        (due_ns > now_ns).then(|| Duration::from_nanos(due_ns - now_ns))
    }

    /// The next op as (kind, offset, length), or `None` when nothing may be
    /// issued now (`issuing` turns false when the phase has issued it all).
    pub(super) fn next_op(
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
