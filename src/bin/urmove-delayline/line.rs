//! What the line does to each packet, apart from moving it: drop it (at
//! random, or in bursts), hold it for the one-way delay, or hold it a
//! little longer so later packets overtake it. Pure and seeded, so the
//! unit tests can count what it does.

use std::time::{Duration, Instant};

/// A small, fast, seeded generator (xorshift64*): the line must decide
/// tens of thousands of packets a second, the same way for the same seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // Zero is xorshift's one fixed point.
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15 | 1)
    }

    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// True with probability `p` (0 never, 1 always).
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next_u64() >> 11) as f64) < p * (1u64 << 53) as f64
    }
}

/// Packet loss: independent with probability `rate` when `burst_len` is 1,
/// else a Gilbert model with the same mean loss whose losses come in runs
/// of `burst_len` packets on average (a good state that loses nothing and a
/// bad state that loses everything).
#[derive(Debug, Clone)]
pub struct Loss {
    /// Independent losses: the share; bursts: in the bad state.
    rate: f64,
    /// good -> bad, per packet.
    enter: f64,
    /// bad -> good, per packet.
    leave: f64,
    bad: bool,
}

impl Loss {
    pub fn new(rate: f64, burst_len: f64) -> Loss {
        let rate = rate.clamp(0.0, 1.0);
        let burst_len = burst_len.max(1.0);
        // Mean time in bad = burst_len; share of time in bad = rate.
        let leave = 1.0 / burst_len;
        let enter = if rate >= 1.0 {
            1.0
        } else {
            (rate * leave / (1.0 - rate)).min(1.0)
        };
        Loss {
            rate,
            enter,
            leave,
            bad: false,
        }
    }

    /// Whether the next packet is lost.
    pub fn drops(&mut self, rng: &mut Rng) -> bool {
        if self.leave >= 1.0 {
            return rng.chance(self.rate);
        }
        self.bad = if self.bad {
            !rng.chance(self.leave)
        } else {
            rng.chance(self.enter)
        };
        self.bad
    }
}

/// What one direction of the line does to its packets.
#[derive(Debug, Clone)]
pub struct Shape {
    pub delay: Duration,
    pub loss: Loss,
    /// Share of packets held `reorder_gap` longer than the rest.
    pub reorder: f64,
    pub reorder_gap: Duration,
}

/// The fate of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Drop,
    /// Deliver at this instant; `late` when held back to be overtaken.
    At {
        due: Instant,
        late: bool,
    },
}

impl Shape {
    pub fn decide(&mut self, now: Instant, rng: &mut Rng) -> Fate {
        if self.loss.drops(rng) {
            return Fate::Drop;
        }
        let late = rng.chance(self.reorder);
        let due = now
            + self.delay
            + if late {
                self.reorder_gap
            } else {
                Duration::ZERO
            };
        Fate::At { due, late }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(rate: f64, burst: f64, reorder: f64) -> Shape {
        Shape {
            delay: Duration::from_millis(50),
            loss: Loss::new(rate, burst),
            reorder,
            reorder_gap: Duration::from_millis(2),
        }
    }

    /// (share dropped, mean run of drops, share held late)
    fn run(s: &mut Shape, n: usize) -> (f64, f64, f64) {
        let (mut rng, now) = (Rng::new(7), Instant::now());
        let (mut dropped, mut runs, mut late, mut prev) = (0, 0, 0, false);
        for _ in 0..n {
            let f = s.decide(now, &mut rng);
            let d = f == Fate::Drop;
            dropped += usize::from(d);
            runs += usize::from(d && !prev);
            prev = d;
            if let Fate::At { due, late: l } = f {
                late += usize::from(l);
                let want = s.delay + if l { s.reorder_gap } else { Duration::ZERO };
                assert_eq!(due - now, want);
            }
        }
        let n = n as f64;
        (
            dropped as f64 / n,
            dropped as f64 / runs.max(1) as f64,
            late as f64 / n,
        )
    }

    #[test]
    fn random_loss_has_its_rate_and_no_bursts() {
        let (share, run_len, late) = run(&mut shape(0.015, 1.0, 0.0), 400_000);
        assert!((share - 0.015).abs() < 0.001, "{share}");
        assert!(run_len < 1.1, "{run_len}");
        assert_eq!(late, 0.0);
    }

    #[test]
    fn burst_loss_keeps_the_mean_and_comes_in_runs() {
        let (share, run_len, _) = run(&mut shape(0.01, 8.0, 0.0), 2_000_000);
        assert!((share - 0.01).abs() < 0.0015, "{share}");
        assert!((6.5..9.5).contains(&run_len), "{run_len}");
    }

    #[test]
    fn no_loss_drops_nothing_and_reorder_holds_its_share_late() {
        let (share, _, late) = run(&mut shape(0.0, 1.0, 0.05), 200_000);
        assert_eq!(share, 0.0);
        assert!((late - 0.05).abs() < 0.003, "{late}");
        let (all, _, _) = run(&mut shape(1.0, 1.0, 0.0), 1000);
        assert_eq!(all, 1.0);
    }
}
