//! `--plot FILE.svg`: pictures of a run, drawn with plotters' SVG backend.
//!
//! Two kinds: throughput per interval over time ([`RatePlot`]: one panel
//! per phase, a line per stream or target, the aggregate on top, and the
//! `--min-rate` line when one was set), and the `bench --disk --sweep`
//! matrix ([`sweep_svg`]: one panel per test, rate over record size, a line
//! per file size). Each interval is drawn as a step over the time it
//! covered, so a run of one interval still shows a line. The observers
//! here record what the printers print, and pass everything on.
//!
//! The data model is here; the drawing both kinds share is in [`draw`],
//! a rate plot's filling and drawing in [`rates`], the sweep's in
//! [`sweep`], where `--plot` writes in [`file`] and the observers that
//! record a run in [`record`].

mod draw;
mod file;
mod rates;
mod record;
mod sweep;
#[cfg(test)]
mod tests;

use crate::coord::units::RateUnit;

pub use draw::unit_label;
pub use file::{host_and_date, PlotFile};
pub use record::{DiskRecorder, NetRecorder};
pub use sweep::sweep_svg;

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
