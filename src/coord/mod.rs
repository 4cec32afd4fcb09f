//! L1 leaf: per-worker counters, interval accounting, histograms and the
//! sustained-rate gate. No I/O: the caller owns the clock and the printing.
#![forbid(unsafe_code)]

pub mod counters;
pub mod gate;
pub mod hist;
pub mod interval;
pub mod units;

pub use counters::{StreamBytes, WorkerCounters};
pub use gate::{evaluate_gate, evaluate_transfer_gate, GateResult};
pub use hist::LatencyHist;
pub use interval::{Interval, IntervalTracker, StreamRates};
