//! Latency histograms (HDR), recorded in nanoseconds, reported in microseconds.

use hdrhistogram::Histogram;

/// Highest latency kept exactly: ten minutes. Longer values are clamped.
const LATENCY_NS_MAX: u64 = 600_000_000_000;

/// A latency histogram sized once at startup; recording never allocates.
#[derive(Debug, Clone)]
pub struct LatencyHist {
    hist: Histogram<u64>,
}

/// Percentiles in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct LatencyUs {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Default for LatencyHist {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHist {
    pub fn new() -> Self {
        let mut hist = Histogram::new_with_bounds(1, LATENCY_NS_MAX, 3)
            .expect("static histogram bounds are valid");
        hist.auto(false);
        LatencyHist { hist }
    }

    /// Forget every value, keeping the storage (no allocation).
    pub fn reset(&mut self) {
        self.hist.reset();
    }

    /// Record `count` ops that each took `ns`.
    pub fn record_n(&mut self, ns: u64, count: u64) {
        let ns = ns.clamp(1, LATENCY_NS_MAX);
        // Cannot fail: the value is clamped into the histogram's range.
        let _ = self.hist.record_n(ns, count);
    }

    pub fn merge(&mut self, other: &LatencyHist) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.hist.add(&other.hist);
    }

    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    pub fn percentiles_us(&self) -> LatencyUs {
        if self.hist.is_empty() {
            return LatencyUs::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        LatencyUs {
            p50: us(self.hist.value_at_quantile(0.50)),
            p99: us(self.hist.value_at_quantile(0.99)),
            p999: us(self.hist.value_at_quantile(0.999)),
            max: us(self.hist.max()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_merge() {
        let mut a = LatencyHist::new();
        for i in 1..=1000u64 {
            a.record_n(i * 1000, 1); // 1..1000 us
        }
        let mut b = LatencyHist::new();
        b.record_n(5_000_000, 1); // one 5 ms outlier
        a.merge(&b);
        let p = a.percentiles_us();
        assert_eq!(a.count(), 1001);
        assert!((p.p50 - 500.0).abs() < 2.0, "{p:?}");
        assert!((p.p99 - 990.0).abs() < 2.0, "{p:?}");
        assert!((p.max - 5000.0).abs() < 5.0, "{p:?}");
        assert_eq!(LatencyHist::new().percentiles_us(), LatencyUs::default());
    }

    #[test]
    fn huge_values_are_clamped_not_lost() {
        let mut h = LatencyHist::new();
        h.record_n(u64::MAX, 3);
        assert_eq!(h.count(), 3);
    }
}
