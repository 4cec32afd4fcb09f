//! The observers that record a run's intervals for a plot as the
//! printers print them, and pass everything on: [`DiskRecorder`] for
//! `bench --disk`, [`NetRecorder`] for a transfer.

use crate::bench::{IntervalLine, ModeResult, Observer};
use crate::coord::Interval;
use crate::session::client::report::{NetInterval, SendObserver};

use super::{RatePlot, Series, Step, AGGREGATE};

/// Records `bench --disk` intervals for a plot, then passes them on.
pub struct DiskRecorder<'a> {
    pub inner: &'a mut dyn Observer,
    pub plot: Option<&'a mut RatePlot>,
    /// With one target, its name: its line is the aggregate. `None` with
    /// several (an interval may close with none of them, at the end).
    pub single: Option<String>,
}

impl Observer for DiskRecorder<'_> {
    fn notice(&mut self, message: &str) {
        self.inner.notice(message);
    }

    fn started(&mut self, queue_depth: u32) {
        self.inner.started(queue_depth);
    }

    fn interval(&mut self, aggregate: &IntervalLine, per_target: &[IntervalLine]) {
        if let Some(plot) = self.plot.as_deref_mut() {
            let step = |l: &IntervalLine| Step {
                start_s: (l.t_s - l.interval_s).max(0.0),
                end_s: l.t_s,
                rate_bytes_per_s: l.rate_bytes_per_s,
            };
            if let Some(name) = &self.single {
                plot.add_step(aggregate.mode, name, step(aggregate));
            } else {
                for l in per_target {
                    plot.add_step(l.mode, &l.target, step(l));
                }
                plot.add_step(aggregate.mode, AGGREGATE, step(aggregate));
            }
        }
        self.inner.interval(aggregate, per_target);
    }

    fn phase_done(&mut self, results: &[ModeResult]) {
        self.inner.phase_done(results);
    }
}

/// Records a transfer's intervals (aggregate and per stream) for a plot,
/// then passes them on.
///
/// The aggregate drawn is the sum of the streams when the sender counts
/// per stream: what left through the sockets. The interval lines count
/// frames as they are queued, which in a `send` runs ahead by what the
/// buffer pool holds while the first frames wait for their socket, and
/// falls to nothing while the last ones drain; the picture shows the
/// network. Without per-stream counts (the receiving side) it draws the
/// interval lines' aggregate.
pub struct NetRecorder<'a> {
    inner: &'a mut dyn SendObserver,
    plot: Option<&'a mut RatePlot>,
    queued: Vec<Step>,
}

impl<'a> NetRecorder<'a> {
    pub fn new(inner: &'a mut dyn SendObserver, plot: Option<&'a mut RatePlot>) -> Self {
        NetRecorder {
            inner,
            plot,
            queued: Vec::new(),
        }
    }

    /// Add the aggregate to the plot, once the run is over.
    pub fn finish(self) {
        let Some(plot) = self.plot else { return };
        let streams: Vec<&Series> = plot
            .panels
            .iter()
            .flat_map(|p| &p.series)
            .filter(|s| s.name != AGGREGATE)
            .collect();
        let steps = match streams.first() {
            None => self.queued,
            Some(first) => {
                // Every stream closes its intervals at the same instants.
                let from_s = first.steps.first().map_or(0.0, |s| s.start_s);
                let mut steps: Vec<Step> = self
                    .queued
                    .iter()
                    .filter(|q| q.end_s <= from_s)
                    .copied()
                    .collect();
                steps.extend(first.steps.iter().enumerate().map(|(k, st)| {
                    Step {
                        rate_bytes_per_s: streams
                            .iter()
                            .filter_map(|s| s.steps.get(k))
                            .map(|s| s.rate_bytes_per_s)
                            .sum(),
                        ..*st
                    }
                }));
                steps
            }
        };
        for step in steps {
            plot.add_step("", AGGREGATE, step);
        }
    }
}

impl SendObserver for NetRecorder<'_> {
    fn interval(&mut self, line: &NetInterval) {
        if self.plot.is_some() {
            let iv = &line.interval;
            self.queued.push(Step {
                start_s: (iv.end_s - iv.len_s).max(0.0),
                end_s: iv.end_s,
                rate_bytes_per_s: iv.rate_bytes_per_s,
            });
        }
        self.inner.interval(line);
    }

    fn stream_intervals(&mut self, streams: &[Interval]) {
        if let Some(plot) = self.plot.as_deref_mut() {
            for (i, iv) in streams.iter().enumerate() {
                plot.add("", &format!("stream {i}"), iv);
            }
        }
        self.inner.stream_intervals(streams);
    }

    fn notice(&mut self, message: &str) {
        self.inner.notice(message);
    }

    fn info(&mut self, message: &str) {
        self.inner.info(message);
    }

    fn detail(&mut self, message: &str) {
        self.inner.detail(message);
    }

    fn files(&mut self, done: std::sync::Arc<std::sync::atomic::AtomicU64>, total: u64) {
        self.inner.files(done, total);
    }
}
