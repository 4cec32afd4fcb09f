//! True per-interval rates: each interval's bytes over that interval's time.

use hdrhistogram::Histogram;

use super::counters::StreamBytes;

/// One finished interval of one series (a target or the aggregate).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Interval {
    /// End of the interval, seconds since the phase started.
    pub end_s: f64,
    /// Length of the interval in seconds (shorter than nominal for the last one).
    pub len_s: f64,
    /// Bytes completed in this interval alone.
    pub bytes: u64,
    /// `bytes / len_s`.
    pub rate_bytes_per_s: f64,
    /// Average since the start of the phase.
    pub avg_rate_bytes_per_s: f64,
    /// Lowest full-interval rate so far (this one included when it is full).
    pub min_rate_bytes_per_s: f64,
    /// Bytes completed since the start of the phase.
    pub total_bytes: u64,
    /// Whether this interval ran its full nominal length.
    pub full: bool,
}

/// Turns cumulative byte counts sampled at any times into interval lines.
#[derive(Debug)]
pub struct IntervalTracker {
    interval_ns: u64,
    next_ns: u64,
    last_ns: u64,
    last_bytes: u64,
    min_full: Option<f64>,
    /// Intervals that ran their whole nominal length.
    nominal_count: u64,
    rates: Histogram<u64>,
}

/// The minimum a summary shows beside `avg`, the run's average rate: the
/// lowest counted interval, but never above the average (time outside the
/// intervals counted, such as start-up or a short tail, was slower still),
/// and the average itself when no interval ran its nominal length.
pub fn summary_min(min_full: Option<f64>, nominal_count: u64, avg: f64) -> f64 {
    match (min_full, nominal_count) {
        (Some(m), 1..) => m.min(avg),
        _ => avg,
    }
}

impl IntervalTracker {
    pub fn new(interval_ns: u64) -> Self {
        assert!(interval_ns > 0);
        let mut rates =
            Histogram::new_with_bounds(1, 1 << 50, 3).expect("static histogram bounds are valid");
        rates.auto(false);
        IntervalTracker {
            interval_ns,
            next_ns: interval_ns,
            last_ns: 0,
            last_bytes: 0,
            min_full: None,
            nominal_count: 0,
            rates,
        }
    }

    /// Feed the cumulative byte count seen at `t_ns` after the phase start.
    /// Returns an interval when `t_ns` reached the next boundary.
    pub fn observe(&mut self, t_ns: u64, total_bytes: u64) -> Option<Interval> {
        if t_ns < self.next_ns {
            return None;
        }
        while self.next_ns <= t_ns {
            self.next_ns += self.interval_ns;
        }
        self.nominal_count += 1;
        Some(self.close(t_ns, total_bytes, true))
    }

    /// Close the phase at `t_ns`. Returns the last, partial interval if any
    /// time passed since the last boundary. It counts towards the minimum
    /// when it lasted at least half an interval (a shorter tail says little).
    pub fn finish(&mut self, t_ns: u64, total_bytes: u64) -> Option<Interval> {
        if t_ns <= self.last_ns {
            return None;
        }
        let full = t_ns - self.last_ns >= self.interval_ns / 2;
        if t_ns - self.last_ns >= self.interval_ns {
            // The run ended on (or past) a boundary no sample reached.
            self.nominal_count += 1;
        }
        Some(self.close(t_ns, total_bytes, full))
    }

    fn close(&mut self, t_ns: u64, total_bytes: u64, full: bool) -> Interval {
        let len_ns = t_ns - self.last_ns;
        let bytes = total_bytes.saturating_sub(self.last_bytes);
        let rate = bytes as f64 * 1e9 / len_ns as f64;
        if full {
            self.min_full = Some(self.min_full.map_or(rate, |m| m.min(rate)));
            let _ = self.rates.record((rate as u64).clamp(1, 1 << 50));
        }
        self.last_ns = t_ns;
        self.last_bytes = total_bytes;
        Interval {
            end_s: t_ns as f64 / 1e9,
            len_s: len_ns as f64 / 1e9,
            bytes,
            rate_bytes_per_s: rate,
            avg_rate_bytes_per_s: total_bytes as f64 * 1e9 / t_ns as f64,
            min_rate_bytes_per_s: self.min_full.unwrap_or(rate),
            total_bytes,
            full,
        }
    }

    /// Lowest rate over full intervals; `None` when no interval was full.
    pub fn min_full_rate(&self) -> Option<f64> {
        self.min_full
    }

    /// Intervals that ran their whole nominal length (a last, partial one
    /// counted towards the minimum is not among them).
    pub fn nominal_count(&self) -> u64 {
        self.nominal_count
    }

    /// Median of full-interval rates, bytes per second, to the histogram's
    /// three significant digits. The histogram keeps a bucket per value
    /// range; its `value_at_quantile` is the bucket's top edge (2^33 - 1
    /// for any rate in the 4 MB below 8.59 GB/s), a bound and no
    /// measurement, so the bucket's middle is taken and rounded.
    pub fn median_full_rate(&self) -> Option<f64> {
        (!self.rates.is_empty()).then(|| {
            let v = self.rates.value_at_quantile(0.5);
            round_significant(self.rates.median_equivalent(v) as f64, 3)
        })
    }
}

/// `v` rounded to `digits` significant digits.
fn round_significant(v: f64, digits: i32) -> f64 {
    if v <= 0.0 {
        return v;
    }
    let scale = 10f64.powi(digits - 1 - v.log10().floor() as i32);
    (v * scale).round() / scale
}

/// Per-stream intervals, closed whenever the aggregate's tracker closes one:
/// the same boundaries, each stream's bytes over that time. Lighter than an
/// [`IntervalTracker`] per stream (no histogram), so hundreds of streams
/// cost little; every buffer is sized once, at the start.
#[derive(Debug)]
pub struct StreamRates {
    last_ns: u64,
    last_bytes: Vec<u64>,
    min_full: Vec<Option<f64>>,
    out: Vec<Interval>,
}

impl StreamRates {
    pub fn new(stream_count: usize) -> Self {
        StreamRates {
            last_ns: 0,
            last_bytes: vec![0; stream_count],
            min_full: vec![None; stream_count],
            out: Vec::with_capacity(stream_count),
        }
    }

    /// Close an interval at `t_ns` (`full` as the aggregate's was) from the
    /// streams' totals. Empty when no publisher keeps `totals` current.
    pub fn close(&mut self, t_ns: u64, full: bool, totals: &StreamBytes) -> &[Interval] {
        self.out.clear();
        if t_ns <= self.last_ns {
            return &self.out;
        }
        if !totals.is_published() {
            // Nothing counted yet: the first published interval starts here.
            self.last_ns = t_ns;
            return &self.out;
        }
        let len_ns = t_ns - self.last_ns;
        for (i, last) in self.last_bytes.iter_mut().enumerate() {
            let total = if i < totals.stream_count() {
                totals.load(i)
            } else {
                *last
            };
            let bytes = total.saturating_sub(*last);
            let rate = bytes as f64 * 1e9 / len_ns as f64;
            let min = &mut self.min_full[i];
            if full {
                *min = Some(min.map_or(rate, |m| m.min(rate)));
            }
            *last = total;
            self.out.push(Interval {
                end_s: t_ns as f64 / 1e9,
                len_s: len_ns as f64 / 1e9,
                bytes,
                rate_bytes_per_s: rate,
                avg_rate_bytes_per_s: total as f64 * 1e9 / t_ns as f64,
                min_rate_bytes_per_s: min.unwrap_or(rate),
                total_bytes: total,
                full,
            });
        }
        self.last_ns = t_ns;
        &self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn rates_are_per_interval_not_cumulative() {
        let mut t = IntervalTracker::new(S);
        assert!(t.observe(S / 2, 50).is_none());
        let a = t.observe(S, 100).unwrap();
        assert_eq!(a.bytes, 100);
        assert!((a.rate_bytes_per_s - 100.0).abs() < 1e-9);
        // A slow second interval: 10 bytes.
        let b = t.observe(2 * S, 110).unwrap();
        assert!((b.rate_bytes_per_s - 10.0).abs() < 1e-9);
        assert!((b.avg_rate_bytes_per_s - 55.0).abs() < 1e-9);
        assert!((b.min_rate_bytes_per_s - 10.0).abs() < 1e-9);
        // A partial last interval does not lower the minimum.
        let c = t.finish(2 * S + S / 10, 111).unwrap();
        assert!(!c.full);
        assert!((c.rate_bytes_per_s - 10.0).abs() < 1e-6);
        assert_eq!(t.min_full_rate(), Some(10.0));
    }

    #[test]
    fn the_median_is_a_rate_not_a_bucket_bound() {
        // 8.588 GB/s falls in the bucket whose top is 2^33 - 1.
        let mut t = IntervalTracker::new(S);
        for i in 1..=3 {
            assert!(t.observe(i * S, i * 8_588_000_000).is_some());
        }
        // The histogram's own answer is that bucket's top edge.
        assert_eq!(t.rates.value_at_quantile(0.5), (1 << 33) - 1);
        let m = t.median_full_rate().unwrap();
        assert_eq!(m, 8.59e9);
        // Far above it (1 PB/s) and far below (1 kB/s), still the rate.
        let mut t = IntervalTracker::new(S);
        assert!(t.observe(S, 1_000_000_000_000_000).is_some());
        assert_eq!(t.median_full_rate(), Some(1e15));
        let mut t = IntervalTracker::new(S);
        assert!(t.observe(S, 1234).is_some());
        assert_eq!(t.median_full_rate(), Some(1230.0));
    }

    #[test]
    fn late_samples_skip_boundaries_without_inventing_intervals() {
        let mut t = IntervalTracker::new(S);
        let a = t.observe(3 * S + 1, 300).unwrap();
        assert_eq!(a.bytes, 300);
        assert!(t.observe(3 * S + 2, 301).is_none());
        assert!(t.observe(4 * S, 400).is_some());
    }

    #[test]
    fn no_full_interval_means_no_minimum() {
        let mut t = IntervalTracker::new(S);
        assert!(t.finish(S / 4, 10).is_some());
        assert_eq!(
            t.min_full_rate(),
            None,
            "a quarter interval is too short to count"
        );
        assert!(t.finish(S / 4, 10).is_none());
        // Half an interval or more counts.
        let mut t = IntervalTracker::new(S);
        assert!(t.finish(S / 2, 10).is_some());
        assert_eq!(t.min_full_rate(), Some(20.0));
        assert_eq!(t.nominal_count(), 0);
        // No interval of its nominal length: the summary shows the average.
        assert_eq!(summary_min(t.min_full_rate(), t.nominal_count(), 5.0), 5.0);
    }

    #[test]
    fn the_summary_minimum_is_never_above_the_average() {
        let mut t = IntervalTracker::new(S);
        assert!(t.observe(S, 100).is_some());
        assert!(t.finish(S + S / 2, 150).is_some());
        assert_eq!(t.nominal_count(), 1);
        assert_eq!(t.min_full_rate(), Some(100.0));
        // Start-up outside the intervals brought the average to 60.
        assert_eq!(
            summary_min(t.min_full_rate(), t.nominal_count(), 60.0),
            60.0
        );
        assert_eq!(
            summary_min(t.min_full_rate(), t.nominal_count(), 120.0),
            100.0
        );
    }

    #[test]
    fn stream_rates_follow_the_aggregate_boundaries() {
        let totals = StreamBytes::new(2);
        let mut r = StreamRates::new(2);
        assert!(
            r.close(S, true, &totals).is_empty(),
            "nothing published, no series"
        );
        totals.attach();
        totals.store(0, 300);
        totals.store(1, 100);
        let a = r.close(2 * S, true, &totals).to_vec();
        assert_eq!(a.len(), 2);
        // Over the second alone: the first closed before anything counted.
        assert!((a[0].rate_bytes_per_s - 300.0).abs() < 1e-9);
        assert!((a[0].avg_rate_bytes_per_s - 150.0).abs() < 1e-9);
        assert!((a[1].rate_bytes_per_s - 100.0).abs() < 1e-9);
        totals.store(0, 310);
        let b = r.close(3 * S, false, &totals).to_vec();
        assert_eq!(b[0].bytes, 10);
        assert_eq!(b[1].bytes, 0);
        assert!(!b[0].full);
        // A partial interval does not lower the minimum.
        assert!((b[0].min_rate_bytes_per_s - 300.0).abs() < 1e-9);
    }
}
