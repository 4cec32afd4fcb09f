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
use plotters::coord::combinators::LogCoord;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::bench::sweep::SweepTable;
use crate::bench::{IntervalLine, ModeResult, Observer};
use crate::coord::units::{self, RateUnit};
use crate::coord::Interval;
use crate::session::client::report::{NetInterval, SendObserver};

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
    /// The worst windows of a gate that failed, each shaded on its panel.
    pub worst_windows: Vec<WorstWindow>,
}

/// The worst window of a `--min-rate` gate that failed, on the panel of
/// its phase.
#[derive(Debug, Clone, PartialEq)]
pub struct WorstWindow {
    pub caption: String,
    pub start_s: f64,
    pub end_s: f64,
    pub rate_bytes_per_s: f64,
}

const WIDTH: u32 = 1100;
const PANEL_HEIGHT: u32 = 380;
const TITLE_HEIGHT: u32 = 40;
const FONT: &str = "sans-serif";
/// Streams or targets past this many share one legend entry.
const LEGEND_SERIES_MAX: usize = 12;
/// A legend name longer than this keeps its end (paths end in what matters).
const LEGEND_NAME_CHARS_MAX: usize = 48;

/// Colours of the non-aggregate lines: the colour-blind-safe set of
/// Okabe and Ito, then more, each far enough from the others to tell
/// apart; a sweep with more series than this draws them again dashed and
/// with other markers ([`sweep_style`]).
const PALETTE: [RGBColor; 16] = [
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
    RGBColor(153, 153, 153),
    RGBColor(31, 31, 140),
    RGBColor(150, 20, 70),
    RGBColor(0, 90, 60),
    RGBColor(255, 140, 210),
    RGBColor(100, 60, 20),
];
/// Markers of a sweep's points, one set of colours each.
const MARKERS: [Marker; 3] = [Marker::Circle, Marker::Square, Marker::Triangle];
const AGGREGATE_COLOUR: RGBColor = RGBColor(20, 20, 20);
const MIN_RATE_COLOUR: RGBColor = RGBColor(200, 0, 0);
/// The worst window of a failed `--min-rate` gate: its band (light) and
/// its rate (a line across the band).
const WORST_COLOUR: RGBColor = RGBColor(255, 0, 170);
const WORST_BAND_OPACITY: f64 = 0.15;

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

/// One legend entry: its text, colour and how its sample is drawn.
struct LegendEntry {
    name: String,
    colour: RGBColor,
    sample: Sample,
}

/// A legend entry's sample: a line (maybe dashed, maybe with a marker) or
/// a shaded band.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sample {
    Line {
        width: u32,
        dashed: bool,
        marker: Option<Marker>,
    },
    Band,
}

impl Sample {
    fn line(width: u32) -> Sample {
        Sample::Line {
            width,
            dashed: false,
            marker: None,
        }
    }
}

/// The shape of a point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    Circle,
    Square,
    Triangle,
}

/// `marker` at (`x`, `y`) of the legend strip, filled with `colour`.
fn draw_marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    (x, y): (i32, i32),
    marker: Marker,
    colour: RGBColor,
) -> anyhow::Result<()> {
    let style = colour.filled();
    match marker {
        Marker::Circle => area.draw(&Circle::new((x, y), 3, style)),
        Marker::Square => area.draw(&Rectangle::new([(x - 3, y - 3), (x + 3, y + 3)], style)),
        Marker::Triangle => area.draw(&TriangleMarker::new((x, y), 4, style)),
    }
    .map_err(drawing)
}

/// `marker` at each of `points` of a chart, filled with `colour`.
fn draw_markers<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, LogCoord<f64>>>,
    points: &[(f64, f64)],
    marker: Marker,
    colour: RGBColor,
) -> anyhow::Result<()> {
    let style = colour.filled();
    let at = points.iter().copied();
    match marker {
        Marker::Circle => chart.draw_series(at.map(|p| Circle::new(p, 3, style))),
        Marker::Square => chart.draw_series(
            at.map(|p| EmptyElement::at(p) + Rectangle::new([(-3, -3), (3, 3)], style)),
        ),
        Marker::Triangle => chart.draw_series(at.map(|p| TriangleMarker::new(p, 4, style))),
    }
    .map(|_| ())
    .map_err(drawing)
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
        draw_sample(area, e, y)?;
        area.draw(&Text::new(e.name.clone(), (50, y - 8), style.clone()))
            .map_err(drawing)?;
    }
    Ok(())
}

/// A legend entry's sample, at height `y` of the strip.
fn draw_sample<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    e: &LegendEntry,
    y: i32,
) -> anyhow::Result<()> {
    let (width, dashed, marker) = match e.sample {
        Sample::Band => {
            let band = e.colour.mix(WORST_BAND_OPACITY).filled();
            area.draw(&Rectangle::new([(10, y - 8), (42, y + 8)], band))
                .map_err(drawing)?;
            (2, false, None)
        }
        Sample::Line {
            width,
            dashed,
            marker,
        } => (width, dashed, marker),
    };
    let line = ShapeStyle::from(&e.colour).stroke_width(width);
    let pieces: &[(i32, i32)] = if dashed {
        &[(10, 18), (22, 30), (34, 42)]
    } else {
        &[(10, 42)]
    };
    for &(from, to) in pieces {
        area.draw(&PathElement::new(vec![(from, y), (to, y)], line))
            .map_err(drawing)?;
    }
    if let Some(m) = marker {
        draw_marker(area, (26, y), m, e.colour)?;
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
                sample: Sample::line(1),
            });
        } else {
            for (i, n) in others.iter().enumerate() {
                let (colour, width) = colour(n, i);
                out.push(LegendEntry {
                    name: short_name(n),
                    colour,
                    sample: Sample::line(width),
                });
            }
        }
        if self.has_aggregate() {
            out.push(LegendEntry {
                name: AGGREGATE.into(),
                colour: AGGREGATE_COLOUR,
                sample: Sample::line(3),
            });
        }
        if let Some(m) = self.min_rate_bytes_per_s {
            out.push(LegendEntry {
                name: format!("min-rate {}", units::rate(m, self.unit)),
                colour: MIN_RATE_COLOUR,
                sample: Sample::Line {
                    width: 2,
                    dashed: true,
                    marker: None,
                },
            });
        }
        for w in &self.worst_windows {
            out.push(LegendEntry {
                name: self.worst_name(w),
                colour: WORST_COLOUR,
                sample: Sample::Band,
            });
        }
        out
    }

    /// A worst window's legend text: its length, rate and start (and its
    /// phase, when there are several).
    fn worst_name(&self, w: &WorstWindow) -> String {
        let phase = if self.panels.len() > 1 {
            format!(" ({})", w.caption)
        } else {
            String::new()
        };
        format!(
            "worst {} window{phase}: {} at {:.2} s",
            units::duration_s(w.end_s - w.start_s),
            units::rate(w.rate_bytes_per_s, self.unit),
            w.start_s
        )
    }

    /// Mark the windows where a `--min-rate` gate of `results` failed.
    pub fn mark_short_windows(&mut self, results: &[ModeResult]) {
        for r in results {
            let Some(g) = r.min_rate.as_ref().filter(|g| !g.ok) else {
                continue;
            };
            // A run shorter than its window was checked as one window.
            let (start_s, end_s) = if g.run_shorter_than_window {
                (0.0, r.elapsed_s)
            } else {
                (g.worst_window_at_s, g.worst_window_at_s + g.window_s)
            };
            self.worst_windows.push(WorstWindow {
                caption: r.mode.to_string(),
                start_s,
                end_s,
                rate_bytes_per_s: g.worst_window_bytes_per_s,
            });
        }
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
        // Under the lines: the worst window's band.
        self.draw_worst(&mut chart, &panel.caption, (x_top, y_top))?;
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

    /// The worst windows of the panel `caption`: a band over the window's
    /// time, a line across it at its rate.
    fn draw_worst<DB: DrawingBackend>(
        &self,
        chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
        caption: &str,
        (x_top, y_top): (f64, f64),
    ) -> anyhow::Result<()> {
        for w in self.worst_windows.iter().filter(|w| w.caption == caption) {
            let (from, to) = (w.start_s.min(x_top), w.end_s.min(x_top));
            let band = WORST_COLOUR.mix(WORST_BAND_OPACITY).filled();
            let r = rate_in(w.rate_bytes_per_s, self.unit);
            chart
                .draw_series([Rectangle::new([(from, 0.0), (to, y_top)], band)])
                .map_err(drawing)?;
            let line = WORST_COLOUR.stroke_width(2);
            chart
                .draw_series(LineSeries::new([(from, r), (to, r)], line))
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

/// How series `i` of a sweep is drawn: a colour of its own while the
/// palette lasts, then the colours again, dashed, with other markers.
fn sweep_style(i: usize) -> (RGBColor, Marker, bool) {
    let round = i / PALETTE.len();
    (
        PALETTE[i % PALETTE.len()],
        MARKERS[round % MARKERS.len()],
        round > 0,
    )
}

/// The decades a log axis spans to hold the positive `rates`: from a
/// power of 10 below the least to one above the most (1 to 10 for none).
fn decades(rates: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = rates
        .filter(|r| *r > 0.0 && r.is_finite())
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), r| {
            (lo.min(r), hi.max(r))
        });
    if hi == 0.0 {
        return (1.0, 10.0);
    }
    // A little room, so no point sits on the frame.
    let lo = 10f64.powf((lo / 1.2).log10().floor());
    let hi = 10f64.powf((hi * 1.2).log10().ceil());
    (lo, hi.max(lo * 10.0))
}

/// A log axis label: powers of 10 only (1000, 10, 0.1), the rest blank.
fn decade_label(v: &f64) -> String {
    let e = v.log10();
    if (e - e.round()).abs() > 1e-6 {
        return String::new();
    }
    let decimals = (-e.round()).max(0.0) as usize;
    format!("{v:.decimals$}")
}

/// Record sizes on a log2 axis: the span of the table's, a little wider.
fn record_range(table: &SweepTable) -> std::ops::Range<f64> {
    let log2s = table.rows.iter().map(|r| f64::from(r.record_bytes).log2());
    let (lo, hi) = log2s.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    if lo.is_finite() {
        lo - 0.3..hi + 0.3
    } else {
        11.7..12.3
    }
}

/// The sweep matrix: a panel per test, rate (log10) over record size
/// (log2), a line per file size, each in its own style ([`sweep_style`]).
pub fn sweep_svg(title: &str, table: &SweepTable, unit: RateUnit) -> anyhow::Result<String> {
    let mut files: Vec<u64> = table.rows.iter().map(|r| r.file_bytes).collect();
    files.sort_unstable();
    files.dedup();
    let legend: Vec<LegendEntry> = files
        .iter()
        .enumerate()
        .map(|(i, &f)| {
            let (colour, marker, dashed) = sweep_style(i);
            LegendEntry {
                name: format!("file {}", size_label(f as f64)),
                colour,
                sample: Sample::Line {
                    width: 2,
                    dashed,
                    marker: Some(marker),
                },
            }
        })
        .collect();
    let cols = 3;
    let rows = table.tests.len().div_ceil(cols).max(1);
    let height = (TITLE_HEIGHT + 330 * rows as u32).max(60 + 24 * legend.len() as u32);
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
        for (t, area) in areas.iter().enumerate().take(table.tests.len()) {
            sweep_panel(area, table, t, &files, unit)?;
        }
        root.present().map_err(drawing)?;
    }
    Ok(svg)
}

/// One test's panel of the sweep: a line per file size over the record
/// sizes, on a log rate axis.
fn sweep_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    table: &SweepTable,
    t: usize,
    files: &[u64],
    unit: RateUnit,
) -> anyhow::Result<()> {
    let rate = |r: &crate::bench::sweep::SweepRow| {
        rate_in(r.rates_bytes_per_s.get(t).copied().unwrap_or(0.0), unit)
    };
    let (lo, hi) = decades(table.rows.iter().map(rate));
    let mut chart = ChartBuilder::on(area)
        .caption(table.tests[t], (FONT, 15))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(62)
        .build_cartesian_2d(record_range(table), (lo..hi).log_scale())
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
        .y_desc(format!("rate ({}, log scale)", unit_label(unit)))
        .x_label_formatter(&fmt)
        .y_label_formatter(&decade_label)
        .label_style((FONT, 11))
        .axis_desc_style((FONT, 12))
        .max_light_lines(2)
        .light_line_style(RGBColor(238, 238, 238))
        .draw()
        .map_err(drawing)?;
    for (i, &f) in files.iter().enumerate() {
        // No rate (a cell not run) has no place on a log axis.
        let points: Vec<(f64, f64)> = table
            .rows
            .iter()
            .filter(|r| r.file_bytes == f && rate(r) > 0.0)
            .map(|r| (f64::from(r.record_bytes).log2(), rate(r)))
            .collect();
        let (c, marker, dashed) = sweep_style(i);
        let style = c.stroke_width(2);
        if dashed {
            chart.draw_series(DashedLineSeries::new(points.iter().copied(), 8, 5, style))
        } else {
            chart.draw_series(LineSeries::new(points.iter().copied(), style))
        }
        .map_err(drawing)?;
        // A file size with a single record size is a point, not a line.
        draw_markers(&mut chart, &points, marker, c)?;
    }
    Ok(())
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
            worst_windows: Vec::new(),
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
            worst_windows: Vec::new(),
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
            worst_windows: Vec::new(),
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
            worst_windows: Vec::new(),
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
    fn a_log_axis_spans_whole_decades_and_labels_only_their_powers() {
        assert_eq!(decades([0.0, 3.0, 450.0].into_iter()), (1.0, 1000.0));
        assert_eq!(decades([0.5].into_iter()), (0.1, 1.0));
        assert_eq!(decades(std::iter::empty()), (1.0, 10.0));
        assert_eq!(decade_label(&1000.0), "1000");
        assert_eq!(decade_label(&0.01), "0.01");
        assert_eq!(decade_label(&2000.0), "");
    }

    #[test]
    fn sweep_series_past_the_palette_are_dashed_with_other_markers() {
        let styles: Vec<_> = (0..2 * PALETTE.len()).map(sweep_style).collect();
        for (i, a) in styles.iter().enumerate() {
            assert!(!styles[..i].contains(a), "series {i} is drawn like another");
        }
        assert_eq!(styles[0], (PALETTE[0], Marker::Circle, false));
        assert_eq!(styles[PALETTE.len()], (PALETTE[0], Marker::Square, true));
    }

    #[test]
    fn only_a_failed_gate_marks_its_worst_window() {
        use crate::coord::gate::GateResult;
        let mut p = RatePlot {
            title: "t".into(),
            unit: RateUnit::Mb,
            time_axis: "s",
            panels: Vec::new(),
            min_rate_bytes_per_s: Some(2e6),
            worst_windows: Vec::new(),
        };
        p.add("write", AGGREGATE, &iv(1.0, 1.0, 1e6));
        let gate = |ok| GateResult {
            ok,
            min_rate_bytes_per_s: 2e6,
            window_s: 0.5,
            worst_window_bytes_per_s: 1e6,
            worst_window_at_s: 0.25,
            windows_short: u64::from(!ok),
            windows_total: 10,
            run_shorter_than_window: false,
        };
        let result = |ok| ModeResult {
            mode: "write",
            target: AGGREGATE.into(),
            bytes: 0,
            elapsed_s: 1.0,
            rate_bytes_per_s: 0.0,
            iops: 0.0,
            ops: 0,
            latency_us: Default::default(),
            interval_rate_min_bytes_per_s: 0.0,
            intervals_full: 0,
            interval_rate_median_bytes_per_s: None,
            region_bytes: 0,
            passes: 0.0,
            block_size_bytes: 4096,
            queue_depth: 1,
            short_ops: 0,
            retried_ops: 0,
            ramp_bytes: 0,
            fsync_s: None,
            verified_blocks: None,
            min_rate: Some(gate(ok)),
        };
        p.mark_short_windows(&[result(true)]);
        assert!(p.worst_windows.is_empty());
        p.mark_short_windows(&[result(false)]);
        let names: Vec<String> = p.legend().into_iter().map(|e| e.name).collect();
        assert_eq!(
            names.last().map(String::as_str),
            Some("worst 500 ms window: 1.00 MB/s at 0.25 s")
        );
        assert!(has_text(
            &p.to_svg().unwrap(),
            "worst 500 ms window: 1.00 MB/s at 0.25 s"
        ));
    }

    #[test]
    fn sizes_are_labelled_compactly() {
        assert_eq!(size_label(4096.0), "4K");
        assert_eq!(size_label((16u64 << 20) as f64), "16M");
        assert_eq!(size_label(1000.0), "1000");
    }
}
