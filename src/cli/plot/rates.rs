//! A [`RatePlot`] filled interval by interval and drawn: a panel per
//! phase, its lines, the `--min-rate` gate and the worst windows of one
//! that failed, and its legend.

use plotters::backend::SVGBackend;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::bench::ModeResult;
use crate::cli::render::rate_in;
use crate::coord::units;
use crate::coord::Interval;

use super::draw::{
    draw_legend, drawing, legend_width, short_name, unit_label, LegendEntry, Sample,
    AGGREGATE_COLOUR, FONT, LEGEND_SERIES_MAX, MIN_RATE_COLOUR, PALETTE, PANEL_HEIGHT,
    TITLE_HEIGHT, WIDTH, WORST_BAND_OPACITY, WORST_COLOUR,
};
use super::{Panel, RatePlot, Series, Step, WorstWindow, AGGREGATE};

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
    pub(super) fn legend(&self) -> Vec<LegendEntry> {
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
        self.draw_worst(&mut chart, &panel.caption, x_top, y_top)?;
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
    /// time, a line across it at its rate, clipped to the chart's top
    /// (`x_top`, `y_top`).
    fn draw_worst<DB: DrawingBackend>(
        &self,
        chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
        caption: &str,
        x_top: f64,
        y_top: f64,
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

    pub(super) fn add_step(&mut self, caption: &str, name: &str, step: Step) {
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
