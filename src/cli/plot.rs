//! `--plot FILE.svg`: pictures of a run, drawn with plotters' SVG backend.
//!
//! Two kinds: throughput per interval over time ([`RatePlot`]: one panel
//! per phase, a line per stream or target, the aggregate on top, and the
//! `--min-rate` line when one was set), and the `bench --disk --sweep`
//! matrix ([`sweep_svg`]: one panel per test, rate over record size, a line
//! per file size). Each interval is drawn as a step over the time it
//! covered, so a run of one interval still shows a line. The observers
//! here record what the printers print, and pass everything on.

use std::path::{Path, PathBuf};

use anyhow::Context;
use plotters::backend::SVGBackend;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::bench::sweep::SweepTable;
use crate::bench::{IntervalLine, ModeResult, Observer};
use crate::coord::units::{self, RateUnit};
use crate::coord::Interval;
use crate::session::send::{NetInterval, SendObserver};

use super::render::rate_in;
use super::Failure;

/// One interval's rate over the time it covered (seconds since the start).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    pub start_s: f64,
    pub end_s: f64,
    pub rate_bytes_per_s: f64,
}

/// A named line: a stream, a target or the aggregate.
#[derive(Debug, Clone, Default)]
pub struct Series {
    pub name: String,
    pub steps: Vec<Step>,
}

/// One chart: a phase (`write`, `read`) or a whole transfer.
#[derive(Debug, Clone, Default)]
pub struct Panel {
    pub caption: String,
    /// Drawn in order; the one named [`AGGREGATE`] is drawn bold, last.
    pub series: Vec<Series>,
}

/// The name of the aggregate series.
pub const AGGREGATE: &str = "aggregate";

/// Throughput per interval over time, in one or more panels.
#[derive(Debug, Clone)]
pub struct RatePlot {
    pub title: String,
    pub unit: RateUnit,
    /// What the time axis counts from.
    pub time_axis: &'static str,
    pub panels: Vec<Panel>,
    /// The `--min-rate` gate, drawn as a dashed line on every panel.
    pub min_rate_bytes_per_s: Option<f64>,
}

const WIDTH: u32 = 1100;
const PANEL_HEIGHT: u32 = 380;
const TITLE_HEIGHT: u32 = 40;
const FONT: &str = "sans-serif";
/// Streams or targets past this many share one legend entry.
const LEGEND_SERIES_MAX: usize = 12;
/// A legend name longer than this keeps its end (paths end in what matters).
const LEGEND_NAME_CHARS_MAX: usize = 48;

/// Colours of the non-aggregate lines (a colour-blind-safe set).
const PALETTE: [RGBColor; 10] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(240, 228, 66),
    RGBColor(117, 112, 179),
    RGBColor(102, 166, 30),
    RGBColor(166, 118, 29),
];
const AGGREGATE_COLOUR: RGBColor = RGBColor(20, 20, 20);
const MIN_RATE_COLOUR: RGBColor = RGBColor(200, 0, 0);

/// The unit's name on an axis.
pub fn unit_label(u: RateUnit) -> &'static str {
    match u {
        RateUnit::Mb => "MB/s",
        RateUnit::Mib => "MiB/s",
        RateUnit::Gbit => "Gbit/s",
    }
}

/// A plotters error, in words (its error types carry the backend's).
fn drawing<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing the plot: {e}")
}

/// One legend entry: its text, colour, width and whether it is dashed.
struct LegendEntry {
    name: String,
    colour: RGBColor,
    width: u32,
    dashed: bool,
}

fn short_name(name: &str) -> String {
    let n = name.chars().count();
    if n <= LEGEND_NAME_CHARS_MAX {
        return name.to_string();
    }
    let tail: String = name.chars().skip(n - (LEGEND_NAME_CHARS_MAX - 3)).collect();
    format!("...{tail}")
}

fn legend_width(entries: &[LegendEntry]) -> u32 {
    let chars = entries
        .iter()
        .map(|e| e.name.chars().count())
        .max()
        .unwrap_or(0) as u32;
    (chars * 8 + 70).clamp(160, 460)
}

/// Draw the legend as a column of entries in its own strip.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[LegendEntry],
) -> anyhow::Result<()> {
    let style = (FONT, 14).into_font().color(&BLACK);
    for (i, e) in entries.iter().enumerate() {
        let y = 30 + 24 * i as i32;
        let line = ShapeStyle::from(&e.colour).stroke_width(e.width);
        if e.dashed {
            for k in 0..3 {
                area.draw(&PathElement::new(
                    vec![(10 + 12 * k, y), (18 + 12 * k, y)],
                    line,
                ))
                .map_err(drawing)?;
            }
        } else {
            area.draw(&PathElement::new(vec![(10, y), (42, y)], line))
                .map_err(drawing)?;
        }
        area.draw(&Text::new(e.name.clone(), (50, y - 8), style.clone()))
            .map_err(drawing)?;
    }
    Ok(())
}

/// The colour of series `i` of a panel (the aggregate has its own).
fn colour(name: &str, i: usize) -> (RGBColor, u32) {
    if name == AGGREGATE {
        (AGGREGATE_COLOUR, 3)
    } else {
        (PALETTE[i % PALETTE.len()], 2)
    }
}

impl RatePlot {
    /// Every series name but the aggregate's, once, in the order first
    /// seen: a name's place picks its colour in every panel.
    fn others(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for s in self.panels.iter().flat_map(|p| &p.series) {
            if s.name != AGGREGATE && !names.contains(&s.name.as_str()) {
                names.push(&s.name);
            }
        }
        names
    }

    fn has_aggregate(&self) -> bool {
        self.panels
            .iter()
            .flat_map(|p| &p.series)
            .any(|s| s.name == AGGREGATE)
    }

    /// The legend: one entry per series (or one for all when there are
    /// many), the aggregate, and the gate.
    fn legend(&self) -> Vec<LegendEntry> {
        let others = self.others();
        let mut out = Vec::new();
        if others.len() > LEGEND_SERIES_MAX {
            out.push(LegendEntry {
                name: format!("each of {} series", others.len()),
                colour: PALETTE[0],
                width: 1,
                dashed: false,
            });
        } else {
            for (i, n) in others.iter().enumerate() {
                let (colour, width) = colour(n, i);
                out.push(LegendEntry {
                    name: short_name(n),
                    colour,
                    width,
                    dashed: false,
                });
            }
        }
        if self.has_aggregate() {
            out.push(LegendEntry {
                name: AGGREGATE.into(),
                colour: AGGREGATE_COLOUR,
                width: 3,
                dashed: false,
            });
        }
        if let Some(m) = self.min_rate_bytes_per_s {
            out.push(LegendEntry {
                name: format!("min-rate {}", units::rate(m, self.unit)),
                colour: MIN_RATE_COLOUR,
                width: 2,
                dashed: true,
            });
        }
        out
    }

    /// The picture as an SVG document.
    pub fn to_svg(&self) -> anyhow::Result<String> {
        let panels = self.panels.len().max(1);
        let height = TITLE_HEIGHT + PANEL_HEIGHT * panels as u32;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
            root.fill(&WHITE).map_err(drawing)?;
            let root = root
                .titled(&self.title, (FONT, 18).into_font())
                .map_err(drawing)?;
            let legend = self.legend();
            let (charts, strip) = root.split_horizontally(WIDTH - legend_width(&legend));
            draw_legend(&strip, &legend)?;
            let areas = charts.split_evenly((panels, 1));
            let others = self.others();
            for (area, panel) in areas.iter().zip(&self.panels) {
                self.draw_panel(area, panel, &others)?;
            }
            if self.panels.is_empty() {
                self.draw_panel(&areas[0], &Panel::default(), &others)?;
            }
            root.present().map_err(drawing)?;
        }
        Ok(svg)
    }

    fn draw_panel<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        panel: &Panel,
        others: &[&str],
    ) -> anyhow::Result<()> {
        let unit = self.unit;
        let x_max = panel
            .series
            .iter()
            .flat_map(|s| &s.steps)
            .map(|s| s.end_s)
            .fold(0.0f64, f64::max);
        let y_top = panel
            .series
            .iter()
            .flat_map(|s| &s.steps)
            .map(|s| rate_in(s.rate_bytes_per_s, unit))
            .chain(self.min_rate_bytes_per_s.map(|m| rate_in(m, unit)))
            .fold(0.0f64, f64::max);
        let y_top = if y_top > 0.0 { y_top * 1.12 } else { 1.0 };
        let x_top = if x_max > 0.0 { x_max * 1.02 } else { 1.0 };
        let caption = if panel.series.is_empty() {
            format!("{} (no interval was measured)", panel.caption)
        } else {
            panel.caption.clone()
        };
        let mut chart = ChartBuilder::on(area)
            .caption(caption, (FONT, 15))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..x_top, 0.0..y_top)
            .map_err(drawing)?;
        chart
            .configure_mesh()
            .x_desc(self.time_axis)
            .y_desc(format!("throughput ({})", unit_label(unit)))
            .y_label_formatter(&axis_number)
            .label_style((FONT, 12))
            .axis_desc_style((FONT, 13))
            .max_light_lines(2)
            .light_line_style(RGBColor(238, 238, 238))
            .draw()
            .map_err(drawing)?;
        let mut order: Vec<&Series> = panel.series.iter().collect();
        // The aggregate last, on top of the others.
        order.sort_by_key(|s| s.name == AGGREGATE);
        for s in order {
            let place = others.iter().position(|n| *n == s.name).unwrap_or(0);
            let (c, width) = colour(&s.name, place);
            let points = s.steps.iter().flat_map(|st| {
                let r = rate_in(st.rate_bytes_per_s, unit);
                [(st.start_s, r), (st.end_s, r)]
            });
            chart
                .draw_series(LineSeries::new(points, c.stroke_width(width)))
                .map_err(drawing)?;
        }
        if let Some(m) = self.min_rate_bytes_per_s {
            let r = rate_in(m, unit);
            chart
                .draw_series(DashedLineSeries::new(
                    [(0.0, r), (x_top, r)],
                    10,
                    6,
                    MIN_RATE_COLOUR.stroke_width(2),
                ))
                .map_err(drawing)?;
        }
        Ok(())
    }

    /// Add an interval to series `name` of the panel captioned `caption`.
    pub fn add(&mut self, caption: &str, name: &str, iv: &Interval) {
        self.add_step(
            caption,
            name,
            Step {
                start_s: (iv.end_s - iv.len_s).max(0.0),
                end_s: iv.end_s,
                rate_bytes_per_s: iv.rate_bytes_per_s,
            },
        );
    }

    fn add_step(&mut self, caption: &str, name: &str, step: Step) {
        let panel = find_or_push(
            &mut self.panels,
            |p| p.caption == caption,
            || Panel {
                caption: caption.to_string(),
                series: Vec::new(),
            },
        );
        let series = find_or_push(
            &mut panel.series,
            |s| s.name == name,
            || Series {
                name: name.to_string(),
                steps: Vec::new(),
            },
        );
        // A sliver (the tail of a run, closed when the work ended) says
        // little and its rate is noise: it joins the step before it, bytes
        // kept, as it does not count towards the minimum interval either.
        let len = step.end_s - step.start_s;
        match series.steps.last_mut() {
            Some(prev)
                if len < (prev.end_s - prev.start_s) / 2.0 && step.start_s >= prev.end_s - 1e-9 =>
            {
                let prev_len = prev.end_s - prev.start_s;
                let bytes = prev.rate_bytes_per_s * prev_len + step.rate_bytes_per_s * len;
                prev.end_s = step.end_s;
                prev.rate_bytes_per_s = bytes / (prev_len + len);
            }
            _ => series.steps.push(step),
        }
    }

    /// How many lines the plot has, over all panels.
    pub fn series_count(&self) -> usize {
        self.panels.iter().map(|p| p.series.len()).sum()
    }
}

/// An axis number with as many decimals as its size needs.
fn axis_number(v: &f64) -> String {
    let a = v.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// Binary size, compact, for the sweep's axis: 4K, 64K, 1M, 16M, 1G.
fn size_label(bytes: f64) -> String {
    let b = bytes.round() as u64;
    for (unit, shift) in [("G", 30), ("M", 20), ("K", 10)] {
        if b >= 1 << shift && b.is_multiple_of(1 << shift) {
            return format!("{}{unit}", b >> shift);
        }
    }
    format!("{b}")
}

/// The sweep matrix: a panel per test, rate over record size (log2), a
/// line per file size.
pub fn sweep_svg(title: &str, table: &SweepTable, unit: RateUnit) -> anyhow::Result<String> {
    let mut files: Vec<u64> = table.rows.iter().map(|r| r.file_bytes).collect();
    files.sort_unstable();
    files.dedup();
    let log2 = |r: u32| f64::from(r).log2();
    let x_min = table
        .rows
        .iter()
        .map(|r| log2(r.record_bytes))
        .fold(f64::INFINITY, f64::min);
    let x_max = table
        .rows
        .iter()
        .map(|r| log2(r.record_bytes))
        .fold(f64::NEG_INFINITY, f64::max);
    let (x_min, x_max) = if x_min.is_finite() {
        (x_min - 0.3, x_max + 0.3)
    } else {
        (11.7, 12.3)
    };
    let legend: Vec<LegendEntry> = files
        .iter()
        .enumerate()
        .map(|(i, &f)| LegendEntry {
            name: format!("file {}", size_label(f as f64)),
            colour: PALETTE[i % PALETTE.len()],
            width: 2,
            dashed: false,
        })
        .collect();
    let cols = 3;
    let rows = table.tests.len().div_ceil(cols).max(1);
    let height = TITLE_HEIGHT + 330 * rows as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH + 200, height)).into_drawing_area();
        root.fill(&WHITE).map_err(drawing)?;
        let root = root
            .titled(title, (FONT, 18).into_font())
            .map_err(drawing)?;
        let (charts, strip) = root.split_horizontally(WIDTH + 200 - legend_width(&legend));
        draw_legend(&strip, &legend)?;
        let areas = charts.split_evenly((rows, cols));
        for (t, (test, area)) in table.tests.iter().zip(&areas).enumerate() {
            let y_top = table
                .rows
                .iter()
                .map(|r| rate_in(r.rates_bytes_per_s.get(t).copied().unwrap_or(0.0), unit))
                .fold(0.0f64, f64::max);
            let y_top = if y_top > 0.0 { y_top * 1.12 } else { 1.0 };
            let mut chart = ChartBuilder::on(area)
                .caption(*test, (FONT, 15))
                .margin(10)
                .x_label_area_size(40)
                .y_label_area_size(62)
                .build_cartesian_2d(x_min..x_max, 0.0..y_top)
                .map_err(drawing)?;
            let fmt = |x: &f64| {
                if (x - x.round()).abs() < 1e-6 {
                    size_label(x.round().exp2())
                } else {
                    String::new()
                }
            };
            chart
                .configure_mesh()
                .x_desc("record size")
                .y_desc(format!("rate ({})", unit_label(unit)))
                .x_label_formatter(&fmt)
                .y_label_formatter(&axis_number)
                .label_style((FONT, 11))
                .axis_desc_style((FONT, 12))
                .max_light_lines(2)
                .light_line_style(RGBColor(238, 238, 238))
                .draw()
                .map_err(drawing)?;
            for (i, &f) in files.iter().enumerate() {
                let points: Vec<(f64, f64)> = table
                    .rows
                    .iter()
                    .filter(|r| r.file_bytes == f)
                    .map(|r| {
                        let rate = r.rates_bytes_per_s.get(t).copied().unwrap_or(0.0);
                        (log2(r.record_bytes), rate_in(rate, unit))
                    })
                    .collect();
                let c = PALETTE[i % PALETTE.len()];
                chart
                    .draw_series(LineSeries::new(points.iter().copied(), c.stroke_width(2)))
                    .map_err(drawing)?;
                // A file size with a single record size is a point, not a line.
                chart
                    .draw_series(points.iter().map(|&p| Circle::new(p, 3, c.filled())))
                    .map_err(drawing)?;
            }
        }
        root.present().map_err(drawing)?;
    }
    Ok(svg)
}

/// Where `--plot` writes, checked before the run starts.
#[derive(Debug, Clone)]
pub struct PlotFile {
    path: PathBuf,
}

impl PlotFile {
    /// A usage error unless `path` ends in `.svg` and can be written:
    /// an existing regular file we may write, or a new name in an existing
    /// directory we may create files in. Nothing is left behind.
    pub(crate) fn check(path: &Path) -> Result<PlotFile, Failure> {
        let usage = |m: String| Failure::Usage(anyhow::anyhow!(m));
        let shown = path.display();
        if !path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("svg"))
        {
            return Err(usage(format!(
                "--plot {shown}: the picture is SVG, so FILE must end in .svg"
            )));
        }
        match std::fs::metadata(path) {
            Ok(m) if !m.is_file() => {
                return Err(usage(format!("--plot {shown}: not a regular file")));
            }
            Ok(_) => {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(|e| usage(format!("--plot {shown}: {e}")))?;
            }
            Err(_) => {
                let parent = match path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
                if !parent.is_dir() {
                    return Err(usage(format!(
                        "--plot {shown}: directory {} does not exist",
                        parent.display()
                    )));
                }
                let probe = parent.join(format!(".urmove-plot-{}.tmp", std::process::id()));
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&probe)
                    .map_err(|e| {
                        usage(format!(
                            "--plot {shown}: cannot create files in {}: {e}",
                            parent.display()
                        ))
                    })?;
                let _ = std::fs::remove_file(&probe);
            }
        }
        Ok(PlotFile {
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Write the document (whole, through a temporary name beside it).
    pub fn write(&self, svg: &str) -> anyhow::Result<()> {
        let mut tmp = self.path.as_os_str().to_owned();
        tmp.push(".urmove.tmp");
        let tmp = PathBuf::from(tmp);
        std::fs::write(&tmp, svg)
            .and_then(|()| std::fs::rename(&tmp, &self.path))
            .inspect_err(|_| {
                let _ = std::fs::remove_file(&tmp);
            })
            .with_context(|| format!("writing the plot {}", self.path.display()))
    }
}

/// "on HOST, YYYY-MM-DD HH:MM", for titles.
pub fn host_and_date() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let date = crate::datapath::sys::local_date_time();
    if host.is_empty() {
        date
    } else {
        format!("{host}, {date}")
    }
}

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

/// The element of `v` that `is`, or a new one from `make` at its end.
fn find_or_push<T>(v: &mut Vec<T>, is: impl Fn(&T) -> bool, make: impl FnOnce() -> T) -> &mut T {
    match v.iter().position(is) {
        Some(i) => &mut v[i],
        None => {
            v.push(make());
            v.last_mut().expect("just pushed")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::sweep::SweepRow;

    /// Whether the document has a `<text>` of exactly `t`.
    fn has_text(svg: &str, t: &str) -> bool {
        svg.contains(&format!(">\n{t}\n</text>"))
    }

    fn iv(end_s: f64, len_s: f64, rate: f64) -> Interval {
        Interval {
            end_s,
            len_s,
            rate_bytes_per_s: rate,
            ..Interval::default()
        }
    }

    #[test]
    fn a_rate_plot_has_a_line_and_a_legend_entry_per_series() {
        let mut p = RatePlot {
            title: "urmove send to a&b <test>".into(),
            unit: RateUnit::Gbit,
            time_axis: "time (s)",
            panels: Vec::new(),
            min_rate_bytes_per_s: Some(1e8),
        };
        for s in 0..2 {
            p.add("", &format!("stream {s}"), &iv(1.0, 1.0, 5e8));
            p.add("", &format!("stream {s}"), &iv(1.5, 0.5, 4e8));
        }
        p.add("", AGGREGATE, &iv(1.0, 1.0, 1e9));
        assert_eq!(p.series_count(), 3);
        let svg = p.to_svg().unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(svg.contains("a&amp;b &lt;test&gt;"), "the title is escaped");
        for name in ["stream 0", "stream 1", AGGREGATE, "min-rate 800 Mb/s"] {
            assert!(has_text(&svg, name), "legend entry {name}");
        }
        assert!(svg.contains("throughput (Gbit/s)"));
    }

    #[test]
    fn a_short_tail_joins_the_step_before_it_with_its_bytes() {
        let mut p = RatePlot {
            title: "t".into(),
            unit: RateUnit::Mb,
            time_axis: "s",
            panels: Vec::new(),
            min_rate_bytes_per_s: None,
        };
        p.add("", AGGREGATE, &iv(1.0, 1.0, 100.0));
        p.add("", AGGREGATE, &iv(1.5, 0.5, 300.0));
        p.add("", AGGREGATE, &iv(1.6, 0.1, 1000.0));
        let steps = &p.panels[0].series[0].steps;
        assert_eq!(steps.len(), 2, "{steps:?}");
        assert_eq!(steps[1].start_s, 1.0);
        assert!((steps[1].end_s - 1.6).abs() < 1e-9);
        // 150 + 100 bytes over 0.6 s.
        assert!((steps[1].rate_bytes_per_s - 250.0 / 0.6).abs() < 1e-9);
    }

    #[test]
    fn many_series_share_one_legend_entry_and_long_names_keep_their_end() {
        let mut p = RatePlot {
            title: "t".into(),
            unit: RateUnit::Mb,
            time_axis: "s",
            panels: Vec::new(),
            min_rate_bytes_per_s: None,
        };
        for s in 0..20 {
            p.add("write", &format!("stream {s}"), &iv(1.0, 1.0, 1e6));
        }
        let names: Vec<String> = p.legend().into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["each of 20 series"]);
        let long = format!("/{}/target", "x".repeat(80));
        let s = short_name(&long);
        assert!(s.starts_with("...") && s.ends_with("/target"));
        assert_eq!(s.chars().count(), LEGEND_NAME_CHARS_MAX);
    }

    #[test]
    fn an_empty_plot_still_draws() {
        let p = RatePlot {
            title: "t".into(),
            unit: RateUnit::Mb,
            time_axis: "s",
            panels: Vec::new(),
            min_rate_bytes_per_s: None,
        };
        assert!(p.to_svg().unwrap().contains("no interval was measured"));
    }

    #[test]
    fn the_sweep_has_a_panel_per_test_and_a_legend_entry_per_file_size() {
        let rows = [(1u64 << 20, 4096u32), (1 << 20, 65536), (4 << 20, 4096)]
            .iter()
            .map(|&(f, r)| SweepRow {
                file_bytes: f,
                record_bytes: r,
                rates_bytes_per_s: vec![1e8; 6],
            })
            .collect();
        let table = SweepTable {
            tests: crate::bench::sweep::TESTS.to_vec(),
            queue_depth: 1,
            rows,
        };
        let svg = sweep_svg("sweep", &table, RateUnit::Mib).unwrap();
        for t in crate::bench::sweep::TESTS {
            assert!(has_text(&svg, t), "panel {t}");
        }
        assert!(has_text(&svg, "file 1M") && has_text(&svg, "file 4M"));
        assert!(has_text(&svg, "64K"), "record sizes label the axis");
    }

    #[test]
    fn sizes_are_labelled_compactly() {
        assert_eq!(size_label(4096.0), "4K");
        assert_eq!(size_label((16u64 << 20) as f64), "16M");
        assert_eq!(size_label(1000.0), "1000");
    }
}
