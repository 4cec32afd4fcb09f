//! `bench --disk --sweep`: the iozone-style matrix of record sizes by file
//! sizes, with O_DIRECT, for write, rewrite, read, reread, random read and
//! random write.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde::Serialize;

use crate::datapath::disk::{Limit, Pattern, PhaseSpec};
use crate::datapath::file::TargetKind;
use crate::datapath::{sys, Error};

use super::disk::{DiskBenchConfig, Mode, Observer, SizeRule};
use super::phase::run_phase;
use super::report::{DiskReport, Environment, SCHEMA};
use super::target::{finish_targets, fit_buffers, prepare_targets, remove_created, Prepared};

/// The tests of each cell, in iozone's order.
pub const TESTS: [&str; 6] = [
    "write",
    "rewrite",
    "read",
    "reread",
    "randread",
    "randwrite",
];

/// File and record size bounds of a sweep (iozone -a: 64 KiB..512 MiB files,
/// 4 KiB..16 MiB records, records under 64 KiB skipped above 32 MiB files).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SweepSpec {
    pub file_min: u64,
    pub file_max: u64,
    pub record_min: u32,
    pub record_max: u32,
}

impl Default for SweepSpec {
    fn default() -> Self {
        SweepSpec {
            file_min: 64 << 10,
            file_max: 512 << 20,
            record_min: 4 << 10,
            record_max: 16 << 20,
        }
    }
}

/// One cell: a file size and record size, with a rate per test.
#[derive(Debug, Clone, Serialize)]
pub struct SweepRow {
    pub file_bytes: u64,
    pub record_bytes: u32,
    /// Bytes per second, in the order of `tests`.
    pub rates_bytes_per_s: Vec<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SweepTable {
    pub tests: Vec<&'static str>,
    pub queue_depth: u32,
    pub rows: Vec<SweepRow>,
}

/// The (file size, record size) cells of a sweep, in order.
pub fn cells(spec: &SweepSpec) -> Vec<(u64, u32)> {
    let mut out = Vec::new();
    let mut file = spec.file_min.next_power_of_two();
    while file <= spec.file_max {
        let mut record = spec.record_min.next_power_of_two();
        while record <= spec.record_max && u64::from(record) <= file {
            let iozone_skips = file > (32 << 20) && record < (64 << 10);
            if !iozone_skips {
                out.push((file, record));
            }
            record *= 2;
        }
        file *= 2;
    }
    out
}

/// Run the sweep over every target at once; rates are aggregates.
pub fn run_sweep(
    cfg: &DiskBenchConfig,
    spec: &SweepSpec,
    interrupt: &AtomicBool,
    obs: &mut dyn Observer,
    on_row: &mut dyn FnMut(&SweepRow),
) -> Result<DiskReport, Error> {
    let cells = cells(spec);
    if cells.is_empty() {
        return Err(Error::Misaligned {
            path: cfg.targets.first().cloned().unwrap_or_default(),
            what: "sweep record size",
            value: u64::from(spec.record_min),
            align: spec.record_min,
            from: "the sweep bounds (no record size fits the file sizes)",
        });
    }
    let prep_cfg = DiskBenchConfig {
        size: SizeRule::Given(spec.file_max),
        modes: vec![Mode::Write],
        bs: spec.record_min.next_power_of_two(),
        ..cfg.clone()
    };
    let mut env = Environment {
        kernel: sys::kernel_release(),
        queue_depth: cfg.qd,
        block_size_bytes: prep_cfg.bs,
        seed: 0,
        ..Environment::default()
    };
    let mut targets = prepare_targets(&prep_cfg, 1, &mut env, obs)?;
    let record_max = cells
        .iter()
        .map(|&(_, r)| r)
        .max()
        .unwrap_or(spec.record_min);
    let qd = match fit_buffers(cfg, record_max, targets.len(), 0, &mut env, obs) {
        Ok(qd) => qd,
        Err(e) => {
            remove_created(&targets);
            return Err(e);
        }
    };
    env.queue_depth = qd;
    obs.started(qd);
    let mut report = DiskReport {
        schema: SCHEMA,
        command: "bench --disk --sweep",
        status: "ok",
        error: None,
        results: Vec::new(),
        min_rate_ok: None,
        sweep: None,
        env,
    };
    let mut table = SweepTable {
        tests: TESTS.to_vec(),
        queue_depth: qd,
        rows: Vec::with_capacity(cells.len()),
    };
    let sweep = Sweep { cfg, qd, interrupt };
    let outcome = sweep.cells(&cells, &mut targets, &mut table, &mut report, on_row);
    report.sweep = Some(table);
    report.env.targets = finish_targets(cfg, &targets, obs);
    match outcome {
        Err(e) if e.is_usage() => {
            remove_created(&targets);
            return Err(e);
        }
        Err(e) => {
            report.status = if matches!(e, Error::Interrupted) {
                "interrupted"
            } else {
                "io_error"
            };
            report.error = Some(e.to_string());
        }
        Ok(()) => {}
    }
    Ok(report)
}

/// A sweep under way: its settings, the queue depth it fitted, and what
/// stops it.
struct Sweep<'a> {
    cfg: &'a DiskBenchConfig,
    qd: u32,
    interrupt: &'a AtomicBool,
}

impl Sweep<'_> {
    /// Every cell in order, a row each into `table` (and to `on_row`).
    fn cells(
        &self,
        cells: &[(u64, u32)],
        targets: &mut [Prepared],
        table: &mut SweepTable,
        report: &mut DiskReport,
        on_row: &mut dyn FnMut(&SweepRow),
    ) -> Result<(), Error> {
        for &(file_bytes, record) in cells {
            for t in targets.iter() {
                t.file
                    .check_aligned("sweep record size", u64::from(record))?;
            }
            let file_bytes =
                file_bytes.min(targets.iter().map(|t| t.region).min().unwrap_or(file_bytes));
            let mut rates = Vec::with_capacity(TESTS.len());
            for test in TESTS {
                rates.push(self.test(test, file_bytes, record, targets, report)?);
            }
            let row = SweepRow {
                file_bytes,
                record_bytes: record,
                rates_bytes_per_s: rates,
            };
            on_row(&row);
            table.rows.push(row);
        }
        Ok(())
    }

    /// One test of a cell (`file_bytes` in records of `record` bytes) on
    /// every target at once: its aggregate rate, bytes per second. A write
    /// starts from empty files.
    fn test(
        &self,
        test: &str,
        file_bytes: u64,
        record: u32,
        targets: &mut [Prepared],
        report: &mut DiskReport,
    ) -> Result<f64, Error> {
        if test == "write" {
            truncate(targets)?;
        }
        let pattern = match test {
            "write" | "rewrite" => Pattern::SeqWrite,
            "read" | "reread" => Pattern::SeqRead,
            "randread" => Pattern::RandRead,
            _ => Pattern::RandWrite,
        };
        let spec = PhaseSpec {
            pattern,
            bs: record,
            qd: self.qd,
            region_start: 0,
            region_end: file_bytes,
            eof: file_bytes,
            limit: Limit::Bytes(file_bytes),
            ramp: Duration::ZERO,
            zeros: self.cfg.zeros,
            verify: None,
            seed: 1,
            fsync: self.cfg.fsync,
            rate: None,
        };
        let specs = vec![spec; targets.len()];
        let run = run_phase(
            targets,
            &specs,
            self.cfg.interval,
            self.interrupt,
            None,
            &mut |_, _| {},
        )?;
        if report.env.io_uring_features.is_empty() {
            report.env.io_uring_features = run.features.clone();
        }
        if run.interrupted {
            return Err(Error::Interrupted);
        }
        let bytes: u64 = run.outcomes.iter().map(|o| o.bytes).sum();
        Ok(bytes as f64 * 1e9 / run.elapsed_ns as f64)
    }
}

/// Empty every target that is a file.
fn truncate(targets: &mut [Prepared]) -> Result<(), Error> {
    for t in targets.iter_mut() {
        if t.file.kind == TargetKind::File {
            t.file.file.set_len(0).map_err(|e| Error::Io {
                op: "truncate",
                path: t.file.path.clone(),
                offset: 0,
                source: e,
            })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iozone_shaped_cells() {
        let c = cells(&SweepSpec::default());
        assert_eq!(c.first(), Some(&(64 << 10, 4 << 10)));
        assert_eq!(c.last(), Some(&(512 << 20, 16 << 20)));
        assert!(c.iter().all(|&(f, r)| u64::from(r) <= f));
        assert!(
            !c.contains(&(64 << 20, 4 << 10)),
            "small records skipped on big files"
        );
        assert!(c.contains(&(32 << 20, 4 << 10)));
        let small = cells(&SweepSpec {
            file_min: 64 << 10,
            file_max: 256 << 10,
            record_min: 4 << 10,
            record_max: 64 << 10,
        });
        assert_eq!(small.len(), 5 + 5 + 5);
    }
}
