//! The drawing shared by both kinds of plot: sizes, fonts, colours and
//! markers, the legend strip and its samples.

use plotters::coord::combinators::LogCoord;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::coord::units::RateUnit;

pub(super) const WIDTH: u32 = 1100;

pub(super) const PANEL_HEIGHT: u32 = 380;

pub(super) const TITLE_HEIGHT: u32 = 40;

pub(super) const FONT: &str = "sans-serif";

/// Streams or targets past this many share one legend entry.
pub(super) const LEGEND_SERIES_MAX: usize = 12;

/// A legend name longer than this keeps its end (paths end in what matters).
pub(super) const LEGEND_NAME_CHARS_MAX: usize = 48;

/// Colours of the non-aggregate lines: the colour-blind-safe set of
/// Okabe and Ito, then more, each far enough from the others to tell
/// apart; a sweep with more series than this draws them again dashed and
/// with other markers ([`sweep_style`]).
pub(super) const PALETTE: [RGBColor; 16] = [
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
pub(super) const MARKERS: [Marker; 3] = [Marker::Circle, Marker::Square, Marker::Triangle];

pub(super) const AGGREGATE_COLOUR: RGBColor = RGBColor(20, 20, 20);

pub(super) const MIN_RATE_COLOUR: RGBColor = RGBColor(200, 0, 0);

/// The worst window of a failed `--min-rate` gate: its band (light) and
/// its rate (a line across the band).
pub(super) const WORST_COLOUR: RGBColor = RGBColor(255, 0, 170);

pub(super) const WORST_BAND_OPACITY: f64 = 0.15;

/// The unit's name on an axis.
pub fn unit_label(u: RateUnit) -> &'static str {
    match u {
        RateUnit::Mb => "MB/s",
        RateUnit::Mib => "MiB/s",
        RateUnit::Gbit => "Gbit/s",
    }
}

/// A plotters error, in words (its error types carry the backend's).
pub(super) fn drawing<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing the plot: {e}")
}

/// One legend entry: its text, colour and how its sample is drawn.
pub(super) struct LegendEntry {
    pub(super) name: String,
    pub(super) colour: RGBColor,
    pub(super) sample: Sample,
}

/// A legend entry's sample: a line (maybe dashed, maybe with a marker) or
/// a shaded band.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sample {
    Line {
        width: u32,
        dashed: bool,
        marker: Option<Marker>,
    },
    Band,
}

impl Sample {
    pub(super) fn line(width: u32) -> Sample {
        Sample::Line {
            width,
            dashed: false,
            marker: None,
        }
    }
}

/// The shape of a point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Marker {
    Circle,
    Square,
    Triangle,
}

/// `marker` at (`x`, `y`) of the legend strip, filled with `colour`.
fn draw_marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    x: i32,
    y: i32,
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
pub(super) fn draw_markers<DB: DrawingBackend>(
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

pub(super) fn short_name(name: &str) -> String {
    let n = name.chars().count();
    if n <= LEGEND_NAME_CHARS_MAX {
        return name.to_string();
    }
    let tail: String = name.chars().skip(n - (LEGEND_NAME_CHARS_MAX - 3)).collect();
    format!("...{tail}")
}

pub(super) fn legend_width(entries: &[LegendEntry]) -> u32 {
    let chars = entries
        .iter()
        .map(|e| e.name.chars().count())
        .max()
        .unwrap_or(0) as u32;
    (chars * 8 + 70).clamp(160, 460)
}

/// Draw the legend as a column of entries in its own strip.
pub(super) fn draw_legend<DB: DrawingBackend>(
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
        draw_marker(area, 26, y, m, e.colour)?;
    }
    Ok(())
}
