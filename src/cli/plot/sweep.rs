//! The `bench --disk --sweep` matrix ([`sweep_svg`]): a panel per test,
//! rate over record size on log axes, a line per file size.

use plotters::backend::SVGBackend;
use plotters::coord::combinators::IntoLogRange;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::bench::sweep::SweepTable;
use crate::cli::render::rate_in;
use crate::coord::units::RateUnit;

use super::draw::{
    draw_legend, draw_markers, drawing, legend_width, unit_label, LegendEntry, Marker, Sample,
    FONT, MARKERS, PALETTE, TITLE_HEIGHT, WIDTH,
};

/// Binary size, compact, for the sweep's axis: 4K, 64K, 1M, 16M, 1G.
pub(super) fn size_label(bytes: f64) -> String {
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
pub(super) fn sweep_style(i: usize) -> (RGBColor, Marker, bool) {
    let round = i / PALETTE.len();
    (
        PALETTE[i % PALETTE.len()],
        MARKERS[round % MARKERS.len()],
        round > 0,
    )
}

/// The decades a log axis spans to hold the positive `rates`: from a
/// power of 10 below the least to one above the most (1 to 10 for none).
pub(super) fn decades(rates: impl Iterator<Item = f64>) -> (f64, f64) {
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
pub(super) fn decade_label(v: &f64) -> String {
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
