//! Human and machine output of `bench --disk`.

use std::io::Write;

use crate::bench::sweep::SweepRow;
use crate::bench::{IntervalLine, ModeResult, Observer};
use crate::coord::units::{self, RateUnit};

use super::progress::{Bar, Progress, Show};

/// How the report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Human,
    Json,
    JsonStream,
}

impl Format {
    /// The format `--json` / `--json-stream` ask for.
    pub fn pick(json: bool, json_stream: bool) -> Self {
        if json {
            Format::Json
        } else if json_stream {
            Format::JsonStream
        } else {
            Format::Human
        }
    }
}

/// Writes to stdout, treating a closed pipe as "stop printing", not an error.
#[derive(Debug, Default)]
pub struct Out {
    closed: bool,
}

impl Out {
    pub fn line(&mut self, s: &str) {
        if self.closed {
            return;
        }
        let mut so = std::io::stdout().lock();
        if writeln!(so, "{s}").and_then(|_| so.flush()).is_err() {
            self.closed = true;
        }
    }
}

/// A warning on stderr (a closed stderr is ignored, never a panic).
/// A note on stderr, one line.
/// (Text from the peer, such as its error messages or a skipped entry's
/// name, has its control characters written out: it cannot forge lines
/// or move the terminal's cursor.)
pub fn info(msg: &str) {
    let msg = super::service::escape_controls(msg);
    let _ = writeln!(std::io::stderr(), "urmove: {msg}");
}

pub fn warn(msg: &str) {
    let msg = super::service::escape_controls(msg);
    let _ = writeln!(std::io::stderr(), "urmove: warning: {msg}");
}

/// An error on stderr, one line.
pub fn error(msg: &str) {
    let msg = super::service::escape_controls(msg);
    let _ = writeln!(std::io::stderr(), "urmove: error: {msg}");
}

/// This process's command line as a shell would take it again: each
/// argument quoted where it needs to be.
pub fn command_line() -> String {
    std::env::args_os()
        .map(|a| shell_quoted(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `s` as one shell word.
fn shell_quoted(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:=@%+,".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The slowest interval of a run (`rate`), or why there is none to name:
/// a run shorter than one --interval has no interval of its own to be
/// slower than its average.
pub fn min_interval(intervals_full: u64, rate: &str) -> String {
    match intervals_full {
        0 => "min interval none (shorter than one --interval)".into(),
        _ => format!("min interval {rate}"),
    }
}

pub fn wall_clock() -> String {
    let (h, m, sec) = crate::datapath::sys::local_hms();
    format!("{h:02}:{m:02}:{sec:02}")
}

/// Latency in microseconds, shown as `850 us` or `27.1 ms`.
pub fn latency(us: f64) -> String {
    if us < 1000.0 {
        format!("{us:.0} us")
    } else if us < 1e6 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

/// The first line of a human `bench --disk`, printed once the queue depth
/// the run uses is known.
#[derive(Debug, Clone)]
pub struct DiskHeader {
    /// `disk` or `sweep`.
    pub what: &'static str,
    pub target_count: usize,
    pub block_size_bytes: u32,
}

impl DiskHeader {
    pub fn text(&self, queue_depth: u32) -> String {
        format!(
            "urmove bench --{}: {} target(s), {} blocks, QD {queue_depth}, io_uring with registered buffers",
            self.what,
            self.target_count,
            units::bytes_binary(u64::from(self.block_size_bytes)),
        )
    }
}

/// Prints progress as it comes.
pub struct Printer {
    pub format: Format,
    pub units: RateUnit,
    pub out: Out,
    pub show: Show,
    /// Printed when the run starts (human output, not --quiet).
    pub header: Option<DiskHeader>,
    /// The unit --min-rate was given in, to echo it in.
    pub min_rate_unit: Option<RateUnit>,
    /// The live bar of the mode running now (`--progress bar`).
    pub bar: Option<Bar>,
}

impl Printer {
    pub fn new(format: Format, units: RateUnit, show: Show) -> Self {
        Printer {
            format,
            units,
            out: Out::default(),
            show,
            header: None,
            min_rate_unit: None,
            bar: None,
        }
    }

    /// The aggregate's progress on the bar: percent, ETA, rate, average
    /// and minimum, bytes done of the total (a narrow terminal cuts the
    /// end). One bar per mode.
    fn draw(&mut self, l: &IntervalLine) {
        let u = self.units;
        let mut text = format!("{:3.0}%", l.percent.unwrap_or(0.0));
        if let Some(eta) = l.eta_s {
            text += "  ";
            text += &super::progress::eta(eta);
        }
        text += &format!(
            "  {}  avg {}  min {}  {}",
            units::rate(l.rate_bytes_per_s, u),
            units::rate(l.avg_rate_bytes_per_s, u),
            units::rate(l.min_rate_bytes_per_s, u),
            units::bytes(l.total_bytes, u)
        );
        if let Some(total) = l.expected_bytes {
            text += &format!(" of {}", units::bytes(total, u));
        }
        if self.bar.as_ref().is_some_and(|b| b.prefix() != l.mode) {
            self.end_bar();
        }
        self.bar
            .get_or_insert_with(|| Bar::new(l.mode))
            .show(l.percent.unwrap_or(0.0) / 100.0, text);
    }

    /// Leave the finished mode's bar on the screen.
    pub fn end_bar(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish();
        }
    }

    fn human_interval(&self, l: &IntervalLine, indent: bool) -> String {
        let u = self.units;
        let mut s = if indent {
            format!("          {}  {}", l.target, l.mode)
        } else {
            format!("{}  {}", wall_clock(), l.mode)
        };
        s += &format!(
            "  {}  avg {}  min {}  {}",
            units::rate(l.rate_bytes_per_s, u),
            units::rate(l.avg_rate_bytes_per_s, u),
            units::rate(l.min_rate_bytes_per_s, u),
            units::bytes(l.total_bytes, u)
        );
        if let Some(total) = l.expected_bytes {
            s += &format!(" of {}", units::bytes(total, u));
        }
        if let Some(p) = l.percent {
            s += &format!("  {p:.0}%");
        }
        if let Some(eta) = l.eta_s {
            s += &format!("  ETA {}s", eta.ceil() as u64);
        }
        s
    }

    /// The human summary of one mode's results.
    pub fn human_results(&mut self, results: &[ModeResult]) {
        let u = self.units;
        for r in results {
            let mut lines = vec![
                format!("{} {}", r.mode, r.target),
                format!(
                    "  {} in {}: {}, {:.0} IOPS ({} blocks, QD {})",
                    units::bytes_exact(r.bytes),
                    units::duration_s(r.elapsed_s),
                    units::rate(r.rate_bytes_per_s, u),
                    r.iops,
                    units::bytes_binary(u64::from(r.block_size_bytes)),
                    r.queue_depth
                ),
                format!(
                    "  latency p50 {}  p99 {}  p99.9 {}  max {}   {}",
                    latency(r.latency_us.p50),
                    latency(r.latency_us.p99),
                    latency(r.latency_us.p999),
                    latency(r.latency_us.max),
                    min_interval(
                        r.intervals_full,
                        &units::rate(r.interval_rate_min_bytes_per_s, u)
                    )
                ),
            ];
            if r.bytes > r.region_bytes {
                lines.push(format!(
                    "  cycled: {:.1} passes over the same {} of the target; --time starts over at its end, so the bytes above never took more space than that",
                    r.passes,
                    units::bytes_both(r.region_bytes),
                ));
            }
            if let Some(v) = r.verified_blocks {
                lines.push(format!("  verified {v} blocks"));
            }
            if let Some(g) = &r.min_rate {
                lines.push(format!(
                    "  min-rate {} over {} windows: {} (worst {} at {:.2} s, {} of {} windows short{})",
                    self.min_rate_text(g.min_rate_bytes_per_s),
                    units::duration_s(g.window_s),
                    if g.ok { "OK" } else { "FAILED" },
                    units::rate(g.worst_window_bytes_per_s, u),
                    g.worst_window_at_s,
                    g.windows_short,
                    g.windows_total,
                    if g.run_shorter_than_window {
                        "; the run was shorter than one window"
                    } else {
                        ""
                    }
                ));
            }
            for l in lines {
                self.out.line(&l);
            }
        }
    }

    /// The --min-rate as given (`4.00 Gb/s`), and in the units of the
    /// other rates where they differ (`4.00 Gb/s (500 MB/s)`).
    pub fn min_rate_text(&self, bytes_per_s: f64) -> String {
        let shown = units::rate(bytes_per_s, self.units);
        match self.min_rate_unit {
            Some(given) if given != self.units => {
                format!("{} ({shown})", units::rate(bytes_per_s, given))
            }
            _ => shown,
        }
    }

    /// The sweep table's header, in the chosen units.
    pub fn sweep_header(&mut self) {
        if self.format != Format::Human {
            return;
        }
        let unit = rate_unit_name(self.units);
        self.out.line(&format!(
            "{:>10} {:>8}  {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}   ({unit})",
            "file", "record", "write", "rewrite", "read", "reread", "randread", "randwrite"
        ));
    }

    pub fn sweep_row(&mut self, row: &SweepRow) {
        match self.format {
            Format::Human => {
                let mut s = format!(
                    "{:>10} {:>8}",
                    units::bytes_binary(row.file_bytes),
                    units::bytes_binary(u64::from(row.record_bytes))
                );
                for r in &row.rates_bytes_per_s {
                    s += &format!("  {:>9.1}", rate_in(*r, self.units));
                }
                self.out.line(&s);
            }
            Format::JsonStream => {
                let v = serde_json::json!({"type": "sweep_row", "row": row});
                self.out.line(&v.to_string());
            }
            Format::Json => {}
        }
    }
}

/// The name of the rate unit a sweep table is printed in.
pub fn rate_unit_name(u: RateUnit) -> &'static str {
    match u {
        RateUnit::Mb => "MB/s",
        RateUnit::Mib => "MiB/s",
        RateUnit::Gbit => "Gb/s",
    }
}

/// A rate as a plain number in the table unit.
pub fn rate_in(bytes_per_s: f64, u: RateUnit) -> f64 {
    match u {
        RateUnit::Mb => bytes_per_s / 1e6,
        RateUnit::Mib => bytes_per_s / 1048576.0,
        RateUnit::Gbit => bytes_per_s * 8.0 / 1e9,
    }
}

impl Observer for Printer {
    fn notice(&mut self, message: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| warn(message)),
            None => warn(message),
        }
    }

    fn started(&mut self, queue_depth: u32) {
        if let Some(h) = self.header.take() {
            self.out.line(&h.text(queue_depth));
        }
    }

    fn interval(&mut self, aggregate: &IntervalLine, per_target: &[IntervalLine]) {
        match self.format {
            Format::Human if self.show.progress == Progress::Bar => self.draw(aggregate),
            Format::Human if self.show.progress == Progress::Off => {}
            Format::Human => {
                let line = self.human_interval(aggregate, false);
                self.out.line(&line);
                for l in per_target {
                    let line = self.human_interval(l, true);
                    self.out.line(&line);
                }
            }
            Format::JsonStream => {
                for l in std::iter::once(aggregate).chain(per_target) {
                    let mut v = serde_json::to_value(l).expect("interval lines serialize");
                    v["type"] = "interval".into();
                    self.out.line(&v.to_string());
                }
            }
            Format::Json => {}
        }
    }

    fn phase_done(&mut self, results: &[ModeResult]) {
        self.end_bar();
        if self.format == Format::Human {
            self.human_results(results);
        }
    }
}
