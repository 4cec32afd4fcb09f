//! The sustained-rate gate: a sliding window over the aggregate throughput.
//!
//! Throughput is bucketed by completion time: the coordinator samples the
//! cumulative byte count at a fixed step (`window / 10` or finer) and every
//! window of `window_ns` that ends on a sample is checked against the minimum.

/// Outcome of a `--min-rate RATE --window DURATION` gate.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct GateResult {
    pub ok: bool,
    pub min_rate_bytes_per_s: f64,
    pub window_s: f64,
    /// The lowest rate over any window.
    pub worst_window_bytes_per_s: f64,
    /// When that window started, seconds after the measured phase started.
    pub worst_window_at_s: f64,
    /// How many windows fell short.
    pub windows_short: u64,
    /// How many windows were checked.
    pub windows_total: u64,
    /// True when the run was shorter than one window, so the whole run was
    /// checked as one window.
    pub run_shorter_than_window: bool,
}

impl GateResult {
    /// A gate of `window_ns` windows at `min_rate_bytes_per_s`, before any
    /// window is checked.
    fn unjudged(window_ns: u64, min_rate_bytes_per_s: f64) -> GateResult {
        GateResult {
            ok: true,
            min_rate_bytes_per_s,
            window_s: window_ns as f64 / 1e9,
            worst_window_bytes_per_s: f64::INFINITY,
            worst_window_at_s: 0.0,
            windows_short: 0,
            windows_total: 0,
            run_shorter_than_window: false,
        }
    }
}

/// Check every window of `window_ns` over `samples` of (time ns, cumulative
/// bytes), which must start at the phase start and be sorted by time.
pub fn evaluate_gate(
    samples: &[(u64, u64)],
    window_ns: u64,
    min_rate_bytes_per_s: f64,
) -> GateResult {
    assert!(window_ns > 0);
    let mut result = GateResult::unjudged(window_ns, min_rate_bytes_per_s);
    let (Some(&first), Some(&last)) = (samples.first(), samples.last()) else {
        result.worst_window_bytes_per_s = 0.0;
        result.ok = min_rate_bytes_per_s <= 0.0;
        return result;
    };
    let check = |from: (u64, u64), to: (u64, u64), result: &mut GateResult| {
        let dt = (to.0 - from.0).max(1);
        let rate = (to.1 - from.1) as f64 * 1e9 / dt as f64;
        result.windows_total += 1;
        if rate < min_rate_bytes_per_s {
            result.windows_short += 1;
        }
        if rate < result.worst_window_bytes_per_s {
            result.worst_window_bytes_per_s = rate;
            result.worst_window_at_s = (from.0 - first.0) as f64 / 1e9;
        }
    };
    if last.0 - first.0 < window_ns {
        result.run_shorter_than_window = true;
        check(first, last, &mut result);
    } else {
        let mut i = 0;
        for j in 0..samples.len() {
            if samples[j].0 - first.0 < window_ns {
                continue;
            }
            // The latest sample at least one window before sample j.
            while samples[i + 1].0 + window_ns <= samples[j].0 {
                i += 1;
            }
            check(samples[i], samples[j], &mut result);
        }
    }
    result.ok = result.windows_short == 0;
    result
}

/// The gate of a transfer (`send --min-rate`): windows over `samples` of
/// (time ns, cumulative bytes, bytes waiting to go then). A window falls
/// short when it moved less than it would have at the minimum rate, which
/// is a window's worth or, when less waited at its start, all that waited
/// (a writer's pause, or the run's last bytes, cannot fail it: the link
/// had nothing more to carry). Windows with nothing waiting are not judged.
/// The worst window is the one furthest short of what it owed.
pub fn evaluate_transfer_gate(
    samples: &[(u64, u64, u64)],
    window_ns: u64,
    min_rate_bytes_per_s: f64,
) -> GateResult {
    assert!(window_ns > 0);
    let need = min_rate_bytes_per_s * window_ns as f64 / 1e9;
    let mut result = GateResult::unjudged(window_ns, min_rate_bytes_per_s);
    let first = samples.first().map_or(0, |s| s.0);
    let mut worst = f64::INFINITY;
    let mut j = 0;
    for (i, &(t0, b0, waiting)) in samples.iter().enumerate() {
        j = j.max(i);
        while j < samples.len() && samples[j].0 < t0 + window_ns {
            j += 1;
        }
        let Some(&(t1, b1, _)) = samples.get(j) else {
            break;
        };
        if waiting == 0 {
            continue;
        }
        let owed = need.min(waiting as f64);
        let moved = (b1 - b0) as f64;
        result.windows_total += 1;
        if moved < owed {
            result.windows_short += 1;
        }
        if moved / owed < worst {
            worst = moved / owed;
            result.worst_window_bytes_per_s = moved * 1e9 / (t1 - t0).max(1) as f64;
            result.worst_window_at_s = (t0 - first) as f64 / 1e9;
        }
    }
    if result.windows_total == 0 {
        result.worst_window_bytes_per_s = 0.0;
        result.run_shorter_than_window = true;
    }
    result.ok = result.windows_short == 0;
    result
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_transfer_is_judged_only_where_data_waited() {
        use super::evaluate_transfer_gate;
        let s = 1_000_000_000u64;
        // 100 MB/s for 3 s through 300 MB the writer had written, then a
        // writer's pause (nothing waits, nothing moves), then 10 MB/s with
        // data waiting.
        let mut samples = Vec::new();
        for k in 0..=30u64 {
            samples.push((k * s / 10, k * 10_000_000, 300_000_000 - k * 10_000_000));
        }
        for k in 31..=60u64 {
            samples.push((k * s / 10, 300_000_000, 0));
        }
        let g = evaluate_transfer_gate(&samples, s, 50e6);
        assert!(g.ok, "the pause is not judged: {g:?}");
        assert!(g.windows_total >= 20, "{g:?}");
        for k in 61..=90u64 {
            samples.push((k * s / 10, 300_000_000 + (k - 60) * 1_000_000, 500_000_000));
        }
        let g = evaluate_transfer_gate(&samples, s, 50e6);
        assert!(!g.ok, "{g:?}");
        assert!((g.worst_window_bytes_per_s - 10e6).abs() < 1e6, "{g:?}");
        assert!(g.worst_window_at_s >= 6.0, "{g:?}");
    }

    use super::*;

    const MS: u64 = 1_000_000;

    fn steady(rate_per_ms: u64, until_ms: u64, dip: Option<(u64, u64)>) -> Vec<(u64, u64)> {
        let mut out = vec![(0, 0)];
        let mut bytes = 0;
        for t in (10..=until_ms).step_by(10) {
            let slow = dip.is_some_and(|(a, b)| t > a && t <= b);
            bytes += if slow { 0 } else { rate_per_ms * 10 };
            out.push((t * MS, bytes));
        }
        out
    }

    #[test]
    fn steady_run_passes() {
        let s = steady(1000, 3000, None); // 1e6 bytes/s
        let g = evaluate_gate(&s, 500 * MS, 900_000.0);
        assert!(g.ok);
        assert_eq!(g.windows_short, 0);
        assert!((g.worst_window_bytes_per_s - 1e6).abs() < 1.0);
        assert_eq!(g.windows_total, 251);
    }

    #[test]
    fn a_stall_is_found_and_located() {
        // Nothing completes between 1.5 s and 1.8 s.
        let s = steady(1000, 3000, Some((1500, 1800)));
        let g = evaluate_gate(&s, 500 * MS, 900_000.0);
        assert!(!g.ok);
        assert!(g.windows_short > 0);
        // Worst window holds the whole stall: 200 ms of data in 500 ms.
        assert!(
            (g.worst_window_bytes_per_s - 400_000.0).abs() < 1.0,
            "{g:?}"
        );
        assert!(
            g.worst_window_at_s >= 1.29 && g.worst_window_at_s <= 1.51,
            "{g:?}"
        );
    }

    #[test]
    fn short_run_is_one_window() {
        let s = steady(1000, 200, None);
        let g = evaluate_gate(&s, 2000 * MS, 2e6);
        assert!(g.run_shorter_than_window);
        assert_eq!(g.windows_total, 1);
        assert!(!g.ok);
        let g = evaluate_gate(&[], 2000 * MS, 1.0);
        assert!(!g.ok);
    }
}
