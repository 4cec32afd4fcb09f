//! A receiving session's progress in the daemon's log and metrics: its
//! interval lines and its share of the daemon's counts.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::datapath::sys;

use super::log::{Level, Log};
use super::stats::DaemonStats;

/// Interval lines of one receiving session, for the daemon's log, and its
/// figures for the metrics.
pub(super) struct RecvProgress<'a> {
    pub(super) log: &'a Log,
    pub(super) stats: &'a DaemonStats,
    pub(super) id: u64,
    pub(super) peer: SocketAddr,
    pub(super) start: Instant,
    pub(super) tracker: Option<crate::coord::IntervalTracker>,
    /// Rate intervals for the metrics when no log lines are asked for.
    pub(super) metric_tracker: crate::coord::IntervalTracker,
    pub(super) last_rate: Option<f64>,
    pub(super) total: u64,
    /// Bytes `expected` counted as data that were done without a payload
    /// (see `Landing::unsent`).
    pub(super) unsent: u64,
    pub(super) expected: Option<u64>,
}

impl<'a> RecvProgress<'a> {
    pub(super) fn new(
        log: &'a Log,
        stats: &'a DaemonStats,
        peer: SocketAddr,
        interval: Option<Duration>,
        expected: Option<u64>,
    ) -> Self {
        RecvProgress {
            log,
            stats,
            id: stats.begin(
                peer,
                if expected.is_some() {
                    "receive"
                } else {
                    "bench"
                },
            ),
            peer,
            start: Instant::now(),
            tracker: interval.map(|i| crate::coord::IntervalTracker::new(i.as_nanos() as u64)),
            metric_tracker: crate::coord::IntervalTracker::new(1_000_000_000),
            last_rate: None,
            total: 0,
            unsent: 0,
            expected,
        }
    }

    pub(super) fn add(&mut self, bytes: u64) {
        use crate::coord::units::{rate, RateUnit};
        self.total += bytes;
        self.stats
            .bytes_received
            .fetch_add(bytes, Ordering::Relaxed);
        let now = self.start.elapsed().as_nanos() as u64;
        if let Some(iv) = self.metric_tracker.observe(now, self.total) {
            self.last_rate = Some(iv.rate_bytes_per_s);
        }
        self.stats.update(self.id, self.total, self.last_rate);
        let Some(t) = self.tracker.as_mut() else {
            return;
        };
        let Some(iv) = t.observe(now, self.total) else {
            return;
        };
        let (h, m, s) = sys::local_hms();
        let mut line = format!(
            "{}: {h:02}:{m:02}:{s:02}  Net In: {}  Avg: {}",
            self.peer,
            rate(iv.rate_bytes_per_s, RateUnit::Gbit),
            rate(iv.avg_rate_bytes_per_s, RateUnit::Gbit)
        );
        if let Some(total) = self.expected.filter(|&t| t > 0) {
            let done = self.total + self.unsent;
            let left = total.saturating_sub(done) as f64;
            let eta = if iv.avg_rate_bytes_per_s > 0.0 {
                left / iv.avg_rate_bytes_per_s
            } else {
                0.0
            };
            line += &format!(
                "  {:.1}%  ETA {}s",
                100.0 * done as f64 / total as f64,
                eta.ceil() as u64
            );
        }
        (self.log)(Level::Info, &line);
    }
}

impl Drop for RecvProgress<'_> {
    fn drop(&mut self) {
        self.stats.end(self.id);
    }
}
