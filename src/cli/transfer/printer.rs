//! What `send`, `pull` and `bench --net` show while they run: interval
//! lines or a bar (human), or a JSON object per interval, and the
//! notices and details the session reports on the way.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::coord::units::{self, RateUnit};
use crate::session::client::report::{NetInterval, SendObserver};

use crate::cli::progress::{self, Bar, Progress, Show};
use crate::cli::render::{self, Format, Out};

/// Progress and summaries of `send`, `pull` and `bench --net`: interval
/// lines or a bar (human), or JSON.
pub(crate) struct SendPrinter {
    pub(super) format: Format,
    show: Show,
    pub(super) out: Out,
    /// The bar's label: `Net Out` or `Net In`.
    pub(super) direction: &'static str,
    /// A run of fixed length (`bench --net`), in seconds: its bar counts time.
    pub(super) time_s: Option<f64>,
    /// Files done (acknowledged) so far, and in all.
    files: Option<(Arc<AtomicU64>, u64)>,
    bar: Option<Bar>,
    last: Option<NetInterval>,
    /// The details printed so far (`-v`), each at most once per run.
    details: Vec<String>,
    /// The streams asked for (for the summary of a run that never started).
    pub(crate) streams: u16,
    /// `send --shard`: named also in the summary of a run that failed
    /// before its data, so `urmove report` says which shard it was.
    pub(crate) shard: Option<crate::session::plan::shard::Shard>,
}

impl SendPrinter {
    pub(crate) fn new(format: Format, show: Show) -> Self {
        SendPrinter {
            format,
            show,
            out: Out::default(),
            direction: "Net Out",
            time_s: None,
            files: None,
            bar: None,
            last: None,
            details: Vec::new(),
            streams: 0,
            shard: None,
        }
    }

    fn human_line(&self, l: &NetInterval) -> String {
        let iv = &l.interval;
        if l.total_bytes == 0 {
            // A memory-to-memory test has no total: no percent, no ETA.
            return format!(
                "{}  {}: {}  Avg: {}  {}",
                render::wall_clock(),
                self.direction,
                units::rate(iv.rate_bytes_per_s, RateUnit::Gbit),
                units::rate(iv.avg_rate_bytes_per_s, RateUnit::Gbit),
                units::bytes_decimal(iv.total_bytes)
            );
        }
        let pct = 100.0 * l.done_bytes() as f64 / l.total_bytes as f64;
        let left = l.total_bytes.saturating_sub(l.done_bytes()) as f64;
        let eta = if iv.avg_rate_bytes_per_s > 0.0 {
            left / iv.avg_rate_bytes_per_s
        } else {
            0.0
        };
        if let Some(lag) = l.lag {
            // Following files: the total grows, so no ETA; the lag instead.
            return format!(
                "{}  {}: {}  Avg: {}  {}  lag {} {:.2}s",
                render::wall_clock(),
                self.direction,
                units::rate(iv.rate_bytes_per_s, RateUnit::Gbit),
                units::rate(iv.avg_rate_bytes_per_s, RateUnit::Gbit),
                units::bytes_decimal(l.done_bytes()),
                units::bytes_decimal(lag.bytes),
                lag.seconds
            );
        }
        format!(
            "{}  {}: {}  Avg: {}  {pct:.1}%  ETA {}s",
            render::wall_clock(),
            self.direction,
            units::rate(iv.rate_bytes_per_s, RateUnit::Gbit),
            units::rate(iv.avg_rate_bytes_per_s, RateUnit::Gbit),
            eta.ceil() as u64
        )
    }

    /// The bar's fill and text: percent, ETA, rate, average, files done of
    /// all, bytes done (of the total); what matters most comes first, as a
    /// narrow terminal cuts the end.
    fn bar_text(&self, l: &NetInterval) -> (f64, String) {
        let iv = &l.interval;
        let (fraction, eta, of) = match self.time_s {
            Some(t) => (iv.end_s / t, t - iv.end_s, String::new()),
            None if l.total_bytes == 0 => (1.0, 0.0, String::new()),
            None => {
                let left = l.total_bytes.saturating_sub(l.done_bytes()) as f64;
                let eta = if iv.avg_rate_bytes_per_s > 0.0 {
                    left / iv.avg_rate_bytes_per_s
                } else {
                    0.0
                };
                (
                    l.done_bytes() as f64 / l.total_bytes as f64,
                    eta,
                    format!(" of {}", units::bytes_decimal(l.total_bytes)),
                )
            }
        };
        let mut text = format!(
            "{:5.1}%  {}  {}  avg {}",
            100.0 * fraction.min(1.0),
            progress::eta(eta),
            units::rate(iv.rate_bytes_per_s, RateUnit::Gbit),
            units::rate(iv.avg_rate_bytes_per_s, RateUnit::Gbit),
        );
        if let Some((done, total)) = &self.files {
            text += &format!("  {}/{total} files", done.load(Ordering::Relaxed));
        }
        text += &format!("  {}{of}", units::bytes_decimal(l.done_bytes()));
        (fraction, text)
    }

    fn draw(&mut self, l: &NetInterval) {
        let (fraction, text) = self.bar_text(l);
        let direction = self.direction;
        self.bar
            .get_or_insert_with(|| Bar::new(direction))
            .show(fraction, text);
    }

    /// Leave the bar with the run's last figures (acknowledgements go on
    /// arriving after the data), before the summary.
    pub(super) fn end_bar(&mut self) {
        if let (Some(bar), Some(l)) = (&self.bar, &self.last) {
            let (fraction, text) = self.bar_text(l);
            bar.show(fraction, text);
            bar.finish();
        }
        self.bar = None;
    }

    /// A line on stderr that does not tear the bar.
    fn to_stderr(&self, f: impl FnOnce()) {
        match &self.bar {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }
}

impl SendObserver for SendPrinter {
    fn interval(&mut self, l: &NetInterval) {
        let iv = &l.interval;
        match self.format {
            Format::Human => {
                self.last = Some(*l);
                match self.show.progress {
                    Progress::Lines => {
                        let line = self.human_line(l);
                        self.out.line(&line);
                    }
                    Progress::Bar => self.draw(l),
                    Progress::Off => {}
                }
            }
            Format::JsonStream => {
                let v = serde_json::json!({
                    "type": "interval",
                    "t_s": iv.end_s,
                    "interval_s": iv.len_s,
                    "bytes": iv.bytes,
                    "rate_bits_per_s": iv.rate_bytes_per_s * 8.0,
                    "avg_rate_bits_per_s": iv.avg_rate_bytes_per_s * 8.0,
                    "total_bytes": iv.total_bytes,
                    "unsent_bytes": l.unsent_bytes,
                    "expected_bytes": l.total_bytes,
                });
                let mut v = v;
                if let Some(lag) = l.lag {
                    v["lag_bytes"] = lag.bytes.into();
                    v["lag_s"] = lag.seconds.into();
                }
                self.out.line(&v.to_string());
            }
            Format::Json => {}
        }
    }

    fn notice(&mut self, message: &str) {
        self.to_stderr(|| render::warn(message));
    }

    fn info(&mut self, message: &str) {
        if !self.show.quiet {
            self.to_stderr(|| render::info(message));
        }
    }

    fn detail(&mut self, message: &str) {
        if self.show.verbose && !self.details.iter().any(|d| d == message) {
            self.details.push(message.to_string());
            self.to_stderr(|| render::info(message));
        }
    }

    fn files(&mut self, done: Arc<AtomicU64>, total: u64) {
        self.files = Some((done, total));
    }
}
