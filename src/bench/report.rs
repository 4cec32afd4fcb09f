//! What `bench --disk` reports: the summary document (`--json`) and the
//! per-interval lines. Field names carry their units; the core fields are the
//! ones `design.md` promises scripts.

use serde::Serialize;

use crate::coord::gate::GateResult;
use crate::coord::hist::LatencyUs;

/// JSON schema version of the reports.
pub const SCHEMA: u32 = 1;

/// One mode's result on one target, or on all of them (`"aggregate"`).
#[derive(Debug, Clone, Serialize)]
pub struct ModeResult {
    pub mode: &'static str,
    pub target: String,
    pub bytes: u64,
    pub elapsed_s: f64,
    pub rate_bytes_per_s: f64,
    pub iops: f64,
    pub ops: u64,
    pub latency_us: LatencyUs,
    /// The lowest rate of an interval, never above `rate_bytes_per_s`;
    /// with no interval of the whole --interval (`intervals_full` 0), the
    /// average rate.
    pub interval_rate_min_bytes_per_s: f64,
    /// Intervals that ran the whole --interval.
    pub intervals_full: u64,
    pub interval_rate_median_bytes_per_s: Option<f64>,
    /// Bytes of the target the mode ran over (the file's region).
    pub region_bytes: u64,
    /// `bytes` over `region_bytes`: above 1 when a --time run went round
    /// the region more than once (it starts over at its end).
    pub passes: f64,
    pub block_size_bytes: u32,
    pub queue_depth: u32,
    pub short_ops: u64,
    pub retried_ops: u64,
    /// Bytes moved during --ramp, not counted in `bytes`.
    pub ramp_bytes: u64,
    /// Time of the final fdatasync (--fsync), inside `elapsed_s`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fsync_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verified_blocks: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_rate: Option<GateResult>,
}

/// One target as it was found and opened.
#[derive(Debug, Clone, Serialize)]
pub struct TargetEnv {
    pub path: String,
    pub kind: &'static str,
    pub filesystem: &'static str,
    pub device: Option<String>,
    pub direct_io: bool,
    pub dio_mem_align_bytes: u32,
    pub dio_offset_align_bytes: u32,
    pub dio_align_from: &'static str,
    pub size_bytes: u64,
    pub created: bool,
    pub kept: bool,
    pub laid_out_bytes: u64,
    pub core: Option<usize>,
    /// Seed of the data and block stamps written to this target.
    pub seed: u64,
}

/// The host and the choices made on it.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Environment {
    pub kernel: String,
    pub targets: Vec<TargetEnv>,
    pub queue_depth: u32,
    pub block_size_bytes: u32,
    pub io_uring_features: Vec<&'static str>,
    pub fallbacks: Vec<String>,
    pub seed: u64,
}

/// The whole `bench --disk` summary.
#[derive(Debug, Clone, Serialize)]
pub struct DiskReport {
    pub schema: u32,
    pub command: &'static str,
    /// `ok`, `io_error`, `verify_failed`, `min_rate_failed` or `interrupted`.
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub results: Vec<ModeResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_rate_ok: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep: Option<crate::bench::sweep::SweepTable>,
    pub env: Environment,
}

/// One interval of one series, as printed or streamed.
#[derive(Debug, Clone, Serialize)]
pub struct IntervalLine {
    pub mode: &'static str,
    pub target: String,
    /// Seconds since the measured phase started.
    pub t_s: f64,
    pub interval_s: f64,
    pub bytes: u64,
    pub rate_bytes_per_s: f64,
    pub avg_rate_bytes_per_s: f64,
    pub min_rate_bytes_per_s: f64,
    pub total_bytes: u64,
    /// Bytes the phase will move (size-based runs).
    pub expected_bytes: Option<u64>,
    pub percent: Option<f64>,
    pub eta_s: Option<f64>,
}
