//! `bench --disk`: one worker and ring per target, phases run in order, the
//! coordinator sampling every worker's counters on the calling thread.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::coord::{Interval, LatencyHist};
use crate::datapath::disk::{Limit, Pattern, PhaseOutcome, PhaseSpec, VerifySpec};
use crate::datapath::DirectMode;
use crate::datapath::{sys, Error};

use super::phase::{run_phase, IntervalSummary, PhaseRun};
use super::report::{DiskReport, Environment, IntervalLine, ModeResult, SCHEMA};
use super::target::{
    ensure_laid_out, finish_targets, fit_buffers, names, prepare_targets, remove_created, Prepared,
};

/// A `--mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Write,
    Read,
    RandRead,
    RandWrite,
    Rw,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Write => "write",
            Mode::Read => "read",
            Mode::RandRead => "randread",
            Mode::RandWrite => "randwrite",
            Mode::Rw => "rw",
        }
    }

    fn pattern(self, read_pct: u8) -> Pattern {
        match self {
            Mode::Write => Pattern::SeqWrite,
            Mode::Read => Pattern::SeqRead,
            Mode::RandRead => Pattern::RandRead,
            Mode::RandWrite => Pattern::RandWrite,
            Mode::Rw => Pattern::Mixed { read_pct },
        }
    }
}

/// How the default size is chosen when `--size` is not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeRule {
    Given(u64),
    /// Default: `SIZE_DIRECT_DEFAULT` under O_DIRECT, at least the RAM size
    /// (given here) with buffered I/O.
    Default {
        ram_bytes: u64,
    },
}

/// `--min-rate RATE --window DURATION`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MinRate {
    pub bytes_per_s: f64,
    pub window: Duration,
}

/// Everything `bench --disk` needs, resolved from the command line.
#[derive(Debug, Clone)]
pub struct DiskBenchConfig {
    pub targets: Vec<PathBuf>,
    pub modes: Vec<Mode>,
    /// Read share of `rw`, percent.
    pub mix_read_pct: u8,
    pub bs: u32,
    pub size: SizeRule,
    pub qd: u32,
    pub time: Option<Duration>,
    pub ramp: Duration,
    pub interval: Duration,
    pub direct: DirectMode,
    pub fsync: bool,
    pub verify: bool,
    pub seed: Option<u64>,
    pub keep: bool,
    pub zeros: bool,
    pub destroy: bool,
    pub min_rate: Option<MinRate>,
    /// `--rate`: a recorder's paced writes, bytes per second per target.
    pub rate: Option<f64>,
}

/// Receives progress while a benchmark runs (the cli prints it).
pub trait Observer {
    /// A warning or a fallback, in words.
    fn notice(&mut self, message: &str);
    /// The targets are open and the buffers fitted: the queue depth the
    /// run uses (lower than asked when locked memory is short).
    fn started(&mut self, _queue_depth: u32) {}
    /// An interval closed. `per_target` is empty with one target.
    fn interval(&mut self, aggregate: &IntervalLine, per_target: &[IntervalLine]);
    /// A mode finished on every target.
    fn phase_done(&mut self, results: &[ModeResult]);
}

/// Run `bench --disk`. `interrupt` is raised by SIGINT/SIGTERM. Errors in
/// setup and configuration come back as `Err` (nothing created is left
/// behind); failures during the run come back in the report's `status` and
/// `error`.
pub fn run_disk_bench(
    cfg: &DiskBenchConfig,
    interrupt: &AtomicBool,
    obs: &mut dyn Observer,
) -> Result<DiskReport, Error> {
    let seed = cfg.seed.unwrap_or_else(random_seed);
    let mut report = DiskReport {
        schema: SCHEMA,
        command: "bench --disk",
        status: "ok",
        error: None,
        results: Vec::new(),
        min_rate_ok: None,
        sweep: None,
        env: Environment {
            kernel: sys::kernel_release(),
            queue_depth: cfg.qd,
            block_size_bytes: cfg.bs,
            seed,
            ..Environment::default()
        },
    };
    let mut targets = prepare_targets(cfg, seed, &mut report.env, obs)?;
    let ram = match cfg.size {
        SizeRule::Default { ram_bytes } => ram_bytes,
        SizeRule::Given(_) => 0,
    };
    let outcome =
        fit_buffers(cfg, cfg.bs, targets.len(), ram, &mut report.env, obs).and_then(|qd| {
            report.env.queue_depth = qd;
            obs.started(qd);
            run_modes(cfg, qd, &mut targets, interrupt, obs, &mut report)
        });
    report.env.targets = finish_targets(cfg, &targets, obs);
    match outcome {
        Err(e) if e.is_usage() => {
            remove_created(&targets);
            return Err(e);
        }
        Err(e) => {
            report.status = match e {
                Error::Verify { .. } => "verify_failed",
                Error::Interrupted => "interrupted",
                _ => "io_error",
            };
            report.error = Some(e.to_string());
        }
        Ok(()) if report.min_rate_ok == Some(false) => report.status = "min_rate_failed",
        Ok(()) => {}
    }
    Ok(report)
}

fn run_modes(
    cfg: &DiskBenchConfig,
    qd: u32,
    targets: &mut [Prepared],
    interrupt: &AtomicBool,
    obs: &mut dyn Observer,
    report: &mut DiskReport,
) -> Result<(), Error> {
    let mut gate_ok = cfg.min_rate.map(|_| true);
    let names = names(targets);
    for &mode in &cfg.modes {
        let m = ModeRun { mode, cfg, qd };
        if mode != Mode::Write {
            // Reads never hit holes; random writes never scatter a new file.
            for (i, t) in targets.iter_mut().enumerate() {
                ensure_laid_out(cfg, qd, i, t, interrupt, obs)?;
            }
        }
        let specs = m.specs(targets);
        let run = m.run(targets, &specs, &names, interrupt, obs)?;
        if report.env.io_uring_features.is_empty() {
            report.env.io_uring_features = run.features.clone();
        }
        m.note_written(targets, &run);
        if run.gate.is_some_and(|g| !g.ok) {
            gate_ok = Some(false);
        }
        let results = m.results(&run, &specs, &names);
        obs.phase_done(&results);
        report.results.extend(results);
        report.min_rate_ok = gate_ok;
        if run.interrupted {
            return Err(Error::Interrupted);
        }
    }
    Ok(())
}

/// One mode of the run, on every target.
struct ModeRun<'a> {
    mode: Mode,
    cfg: &'a DiskBenchConfig,
    /// The queue depth the run uses.
    qd: u32,
}

/// One line of a mode's results: whose it is and what it did.
struct Measured<'a> {
    target: String,
    outcome: &'a PhaseOutcome,
    latency: &'a LatencyHist,
    intervals: IntervalSummary,
    region_bytes: u64,
    gate: Option<crate::coord::GateResult>,
}

impl ModeRun<'_> {
    /// Each target's phase: its whole region, for the time or the bytes
    /// asked.
    fn specs(&self, targets: &[Prepared]) -> Vec<PhaseSpec> {
        let cfg = self.cfg;
        let pattern = self.mode.pattern(cfg.mix_read_pct);
        targets
            .iter()
            .enumerate()
            .map(|(i, t)| PhaseSpec {
                pattern,
                bs: cfg.bs,
                qd: self.qd,
                region_start: 0,
                region_end: t.file.align.round_up(t.region),
                eof: if pattern.writes() {
                    u64::MAX
                } else {
                    t.file.size.max(t.region)
                },
                limit: match cfg.time {
                    Some(d) => Limit::Time(d),
                    None => Limit::Bytes(t.region),
                },
                ramp: cfg.ramp,
                zeros: cfg.zeros,
                verify: cfg.verify.then_some(VerifySpec {
                    target: i as u32,
                    seed: Some(t.seed),
                }),
                seed: t.seed,
                fsync: cfg.fsync,
                rate: cfg.rate,
            })
            .collect()
    }

    /// Run the mode's phase, its intervals going to the observer.
    fn run(
        &self,
        targets: &mut [Prepared],
        specs: &[PhaseSpec],
        names: &[String],
        interrupt: &AtomicBool,
        obs: &mut dyn Observer,
    ) -> Result<PhaseRun, Error> {
        let lines = Lines {
            mode: self.mode.name(),
            names,
            specs,
            expected: self
                .cfg
                .time
                .is_none()
                .then(|| targets.iter().map(|t| t.region).sum()),
            time: self.cfg.time,
        };
        let mut emit = |agg: &Interval, per: &[Option<Interval>]| lines.emit(obs, agg, per);
        let cfg = self.cfg;
        run_phase(
            targets,
            specs,
            cfg.interval,
            interrupt,
            cfg.min_rate,
            &mut emit,
        )
    }

    /// After a mode that writes: each target's size now, and whether a
    /// verified write stamped all of its region.
    fn note_written(&self, targets: &mut [Prepared], run: &PhaseRun) {
        if !self.mode.pattern(self.cfg.mix_read_pct).writes() {
            return;
        }
        for (t, o) in targets.iter_mut().zip(&run.outcomes) {
            if let Ok(m) = t.file.file.metadata() {
                t.file.size = m.len();
            }
            if self.mode == Mode::Write && self.cfg.verify && o.bytes + o.ramp_bytes >= t.region {
                t.stamped = true;
            }
        }
    }

    /// A result per target, and the aggregate's: with one target, its
    /// line is the aggregate, keeping its path and the gate.
    fn results(&self, run: &PhaseRun, specs: &[PhaseSpec], names: &[String]) -> Vec<ModeResult> {
        let n = run.outcomes.len();
        let mut results = Vec::with_capacity(n + 1);
        for (i, o) in run.outcomes.iter().enumerate() {
            results.push(self.result(Measured {
                target: names[i].clone(),
                outcome: o,
                latency: &run.latencies[i],
                intervals: run.intervals[i],
                region_bytes: specs[i].region_end - specs[i].region_start,
                gate: None,
            }));
        }
        let mut latency = LatencyHist::new();
        for l in &run.latencies {
            latency.merge(l);
        }
        let aggregate = self.result(Measured {
            target: "aggregate".into(),
            outcome: &aggregate(&run.outcomes, run.elapsed_ns),
            latency: &latency,
            intervals: run.intervals[n],
            region_bytes: specs.iter().map(|s| s.region_end - s.region_start).sum(),
            gate: run.gate,
        });
        if n > 1 {
            results.push(aggregate);
        } else {
            let mut only = results.pop().expect("one target, one result");
            only.min_rate = aggregate.min_rate;
            results.push(only);
        }
        results
    }

    fn result(&self, m: Measured<'_>) -> ModeResult {
        let (cfg, o) = (self.cfg, m.outcome);
        let secs = (o.elapsed_ns as f64 / 1e9).max(1e-9);
        let rate = o.bytes as f64 / secs;
        ModeResult {
            mode: self.mode.name(),
            target: m.target,
            bytes: o.bytes,
            elapsed_s: o.elapsed_ns as f64 / 1e9,
            rate_bytes_per_s: rate,
            iops: o.ops as f64 / secs,
            ops: o.ops,
            latency_us: m.latency.percentiles_us(),
            interval_rate_min_bytes_per_s: crate::coord::interval::summary_min(
                m.intervals.min,
                m.intervals.full,
                rate,
            ),
            intervals_full: m.intervals.full,
            interval_rate_median_bytes_per_s: m.intervals.median,
            region_bytes: m.region_bytes,
            passes: o.bytes as f64 / m.region_bytes.max(1) as f64,
            block_size_bytes: cfg.bs,
            queue_depth: self.qd,
            short_ops: o.short_ops,
            retried_ops: o.retried_ops,
            ramp_bytes: o.ramp_bytes,
            fsync_s: (cfg.fsync && self.mode.pattern(cfg.mix_read_pct).writes())
                .then_some(o.fsync_ns as f64 / 1e9),
            verified_blocks: cfg.verify.then_some(o.verified_blocks),
            min_rate: m.gate,
        }
    }
}

/// What all targets did in a phase, as one.
fn aggregate(outcomes: &[PhaseOutcome], elapsed_ns: u64) -> PhaseOutcome {
    PhaseOutcome {
        bytes: outcomes.iter().map(|o| o.bytes).sum(),
        ops: outcomes.iter().map(|o| o.ops).sum(),
        elapsed_ns,
        ramp_bytes: outcomes.iter().map(|o| o.ramp_bytes).sum(),
        short_ops: outcomes.iter().map(|o| o.short_ops).sum(),
        retried_ops: outcomes.iter().map(|o| o.retried_ops).sum(),
        verified_blocks: outcomes.iter().map(|o| o.verified_blocks).sum(),
        fsync_ns: outcomes.iter().map(|o| o.fsync_ns).max().unwrap_or(0),
        ..PhaseOutcome::default()
    }
}

/// A mode's interval lines for the observer: the aggregate's, and with
/// several targets each one's.
struct Lines<'a> {
    mode: &'static str,
    names: &'a [String],
    specs: &'a [PhaseSpec],
    /// Bytes the mode moves in all, when it is not timed.
    expected: Option<u64>,
    time: Option<Duration>,
}

impl Lines<'_> {
    fn emit(&self, obs: &mut dyn Observer, agg: &Interval, per: &[Option<Interval>]) {
        let agg_line = interval_line(self.mode, "aggregate".into(), agg, self.expected, self.time);
        let per_lines: Vec<IntervalLine> = if self.names.len() > 1 {
            per.iter()
                .zip(self.names)
                .zip(self.specs)
                .filter_map(|((iv, n), s)| {
                    let expected = self.time.is_none().then_some(s.region_end - s.region_start);
                    iv.as_ref()
                        .map(|iv| interval_line(self.mode, n.clone(), iv, expected, self.time))
                })
                .collect()
        } else {
            Vec::new()
        };
        obs.interval(&agg_line, &per_lines);
    }
}

fn interval_line(
    mode: &'static str,
    target: String,
    iv: &Interval,
    expected: Option<u64>,
    time: Option<Duration>,
) -> IntervalLine {
    let (percent, eta_s) = match (expected, time) {
        (Some(total), _) if total > 0 => {
            let left = total.saturating_sub(iv.total_bytes) as f64;
            let eta = (iv.avg_rate_bytes_per_s > 0.0).then(|| left / iv.avg_rate_bytes_per_s);
            (Some(100.0 * iv.total_bytes as f64 / total as f64), eta)
        }
        (_, Some(d)) => {
            let d = d.as_secs_f64();
            (
                Some((100.0 * iv.end_s / d).min(100.0)),
                Some((d - iv.end_s).max(0.0)),
            )
        }
        _ => (None, None),
    };
    IntervalLine {
        mode,
        target,
        t_s: iv.end_s,
        interval_s: iv.len_s,
        bytes: iv.bytes,
        rate_bytes_per_s: iv.rate_bytes_per_s,
        avg_rate_bytes_per_s: iv.avg_rate_bytes_per_s,
        min_rate_bytes_per_s: iv.min_rate_bytes_per_s,
        total_bytes: iv.total_bytes,
        expected_bytes: expected,
        percent,
        eta_s,
    }
}

fn random_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    crate::datapath::disk::Rng::new(t ^ (u64::from(std::process::id()) << 32)).next_u64()
}
