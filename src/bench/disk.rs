//! `bench --disk`: one worker and ring per target, phases run in order, the
//! coordinator sampling every worker's counters on the calling thread.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

use crate::coord::{evaluate_gate, IntervalTracker, LatencyHist, WorkerCounters};
use crate::datapath::disk::{DiskWorker, Limit, Pattern, PhaseOutcome, PhaseSpec, VerifySpec};
use crate::datapath::file::{open_target, DirectMode, OpenSpec, TargetFile, TargetKind};
use crate::datapath::{sys, topology, Error};

use super::report::{DiskReport, Environment, IntervalLine, ModeResult, TargetEnv, SCHEMA};

/// Default test size when O_DIRECT is in force: the page cache cannot
/// flatter it, so it only needs to be long enough to be steady.
pub const SIZE_DIRECT_DEFAULT: u64 = 2 << 30;
/// Leave this much free on a filesystem we write a test file to (or a
/// twentieth of what is free, on small filesystems).
pub const FREE_SPACE_RESERVE: u64 = 64 << 20;

/// Locked memory left per ring for its own SQ and CQ pages, which recent
/// kernels charge to RLIMIT_MEMLOCK beside the registered buffers.
const RING_MEMLOCK_SLACK: u64 = 512 << 10;

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
}

/// Receives progress while a benchmark runs (the cli prints it).
pub trait Observer {
    /// A warning or a fallback, in words.
    fn notice(&mut self, message: &str);
    /// An interval closed. `per_target` is empty with one target.
    fn interval(&mut self, aggregate: &IntervalLine, per_target: &[IntervalLine]);
    /// A mode finished on every target.
    fn phase_done(&mut self, results: &[ModeResult]);
}

/// A target prepared for the run.
pub(crate) struct Prepared {
    pub(crate) file: TargetFile,
    /// The file did not exist before this run.
    pub(crate) created: bool,
    /// We named it (a TARGET directory): remove it at the end unless --keep.
    pub(crate) temporary: bool,
    /// Bytes each phase addresses.
    pub(crate) region: u64,
    pub(crate) laid_out: u64,
    pub(crate) core: Option<usize>,
}

/// Run `bench --disk`. `interrupt` is raised by SIGINT/SIGTERM. Errors in
/// setup come back as `Err`; failures during the run come back in the
/// report's `status` and `error`.
pub fn run_disk_bench(
    cfg: &DiskBenchConfig,
    interrupt: &AtomicBool,
    obs: &mut dyn Observer,
) -> Result<DiskReport, Error> {
    let seed = cfg.seed.unwrap_or_else(random_seed);
    let mut env = Environment {
        kernel: sys::kernel_release(),
        queue_depth: cfg.qd,
        block_size_bytes: cfg.bs,
        seed,
        ..Environment::default()
    };
    let mut targets = prepare_targets(cfg, &mut env, obs)?;
    let qd = fit_memlock(cfg, &targets, &mut env, obs)?;
    env.queue_depth = qd;

    let mut report = DiskReport {
        schema: SCHEMA,
        command: "bench --disk",
        status: "ok",
        error: None,
        results: Vec::new(),
        min_rate_ok: None,
        sweep: None,
        env,
    };
    let outcome = run_modes(cfg, qd, seed, &mut targets, interrupt, obs, &mut report);
    finish_targets(cfg, &targets, &mut report, obs);
    if let Err(e) = outcome {
        report.status = match e {
            Error::Verify { .. } => "verify_failed",
            Error::Interrupted => "interrupted",
            _ => "io_error",
        };
        report.error = Some(e.to_string());
    } else if report.min_rate_ok == Some(false) {
        report.status = "min_rate_failed";
    }
    Ok(report)
}

fn run_modes(
    cfg: &DiskBenchConfig,
    qd: u32,
    seed: u64,
    targets: &mut [Prepared],
    interrupt: &AtomicBool,
    obs: &mut dyn Observer,
    report: &mut DiskReport,
) -> Result<(), Error> {
    // Lay out what a read or random mode would find missing, unless a
    // sequential write comes first and writes it anyway.
    let write_first = cfg.modes.first() == Some(&Mode::Write);
    let mut verified_seed = if write_first { Some(seed) } else { cfg.seed };
    if !write_first {
        for (i, t) in targets.iter_mut().enumerate() {
            if t.file.kind == TargetKind::File && t.file.has_hole_before(t.region) {
                // With --verify every block must carry this run's seed, so
                // lay out all of it; otherwise only what is missing.
                let start = if cfg.verify
                    || sys::seek_hole(&t.file.file, 0).ok().flatten() < Some(t.file.size)
                {
                    0
                } else {
                    t.file.size / u64::from(cfg.bs) * u64::from(cfg.bs)
                };
                obs.notice(&format!(
                    "laying out {} of {} before reading it",
                    crate::coord::units::bytes_decimal(t.region - start),
                    t.file.path.display()
                ));
                let spec = PhaseSpec {
                    pattern: Pattern::SeqWrite,
                    bs: cfg.bs,
                    qd,
                    region_start: start,
                    region_end: t.region,
                    eof: t.region,
                    limit: Limit::Bytes(t.region - start),
                    ramp: Duration::ZERO,
                    zeros: cfg.zeros,
                    verify: cfg.verify.then_some(VerifySpec {
                        target: i as u32,
                        seed: Some(seed),
                    }),
                    seed,
                    fsync: true,
                };
                run_phase(
                    std::slice::from_mut(t),
                    &[spec],
                    cfg.interval,
                    interrupt,
                    None,
                    &mut |_, _| {},
                )?;
                t.laid_out = t.region - start;
                t.file.size = t.file.size.max(t.region);
                if cfg.verify {
                    verified_seed = Some(seed);
                }
            }
        }
    }
    let mut gate_ok = cfg.min_rate.map(|_| true);
    for &mode in &cfg.modes {
        let pattern = mode.pattern(cfg.mix_read_pct);
        let specs: Vec<PhaseSpec> = targets
            .iter()
            .enumerate()
            .map(|(i, t)| PhaseSpec {
                pattern,
                bs: cfg.bs,
                qd,
                region_start: 0,
                region_end: round_up(t.region, u64::from(t.file.align.offset)),
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
                    seed: verified_seed,
                }),
                seed,
                fsync: cfg.fsync,
            })
            .collect();
        let names: Vec<String> = targets
            .iter()
            .map(|t| t.file.path.display().to_string())
            .collect();
        let expected: Option<u64> = cfg
            .time
            .is_none()
            .then(|| targets.iter().map(|t| t.region).sum());
        let mut emit = |agg: &crate::coord::Interval, per: &[crate::coord::Interval]| {
            let line = |target: String, iv: &crate::coord::Interval, expected: Option<u64>| {
                interval_line(mode.name(), target, iv, expected, cfg.time)
            };
            let agg_line = line("aggregate".into(), agg, expected);
            let per_lines: Vec<IntervalLine> = if per.len() > 1 {
                per.iter()
                    .zip(&names)
                    .zip(targets_regions(&specs))
                    .map(|((iv, n), r)| line(n.clone(), iv, cfg.time.is_none().then_some(r)))
                    .collect()
            } else {
                Vec::new()
            };
            obs.interval(&agg_line, &per_lines);
        };
        let run = run_phase(
            targets,
            &specs,
            cfg.interval,
            interrupt,
            cfg.min_rate,
            &mut emit,
        )?;
        if report.env.io_uring_features.is_empty() {
            report.env.io_uring_features = run.features.clone();
        }
        let mut results = Vec::with_capacity(targets.len() + 1);
        for (i, o) in run.outcomes.iter().enumerate() {
            if pattern.writes() {
                targets[i].file.size = targets[i].file.size.max(specs[i].region_end);
            }
            if cfg.verify && o.seed_seen.is_some() {
                verified_seed = o.seed_seen;
            }
            results.push(mode_result(
                mode,
                names[i].clone(),
                o,
                &run.latencies[i],
                run.interval_min[i],
                run.interval_median[i],
                cfg,
                qd,
                None,
            ));
        }
        let agg = PhaseOutcome {
            bytes: run.outcomes.iter().map(|o| o.bytes).sum(),
            ops: run.outcomes.iter().map(|o| o.ops).sum(),
            elapsed_ns: run.elapsed_ns,
            short_ops: run.outcomes.iter().map(|o| o.short_ops).sum(),
            retried_ops: run.outcomes.iter().map(|o| o.retried_ops).sum(),
            verified_blocks: run.outcomes.iter().map(|o| o.verified_blocks).sum(),
            ..PhaseOutcome::default()
        };
        let mut lat = LatencyHist::new();
        for l in &run.latencies {
            lat.merge(l);
        }
        if let Some(g) = &run.gate {
            if !g.ok {
                gate_ok = Some(false);
            }
        }
        let agg_result = mode_result(
            mode,
            "aggregate".into(),
            &agg,
            &lat,
            run.interval_min[targets.len()],
            run.interval_median[targets.len()],
            cfg,
            qd,
            run.gate,
        );
        if targets.len() > 1 {
            results.push(agg_result);
        } else {
            // One target: its line is the aggregate; keep the path and the gate.
            let mut only = results.pop().expect("one target, one result");
            only.min_rate = agg_result.min_rate;
            results.push(only);
        }
        obs.phase_done(&results);
        report.results.extend(results);
        report.min_rate_ok = gate_ok;
        if run.interrupted {
            return Err(Error::Interrupted);
        }
    }
    Ok(())
}

fn targets_regions(specs: &[PhaseSpec]) -> impl Iterator<Item = u64> + '_ {
    specs.iter().map(|s| s.region_end - s.region_start)
}

#[allow(clippy::too_many_arguments)]
fn mode_result(
    mode: Mode,
    target: String,
    o: &PhaseOutcome,
    lat: &LatencyHist,
    interval_min: Option<f64>,
    interval_median: Option<f64>,
    cfg: &DiskBenchConfig,
    qd: u32,
    gate: Option<crate::coord::GateResult>,
) -> ModeResult {
    let secs = (o.elapsed_ns as f64 / 1e9).max(1e-9);
    let rate = o.bytes as f64 / secs;
    ModeResult {
        mode: mode.name(),
        target,
        bytes: o.bytes,
        elapsed_s: o.elapsed_ns as f64 / 1e9,
        rate_bytes_per_s: rate,
        iops: o.ops as f64 / secs,
        ops: o.ops,
        latency_us: lat.percentiles_us(),
        interval_rate_min_bytes_per_s: interval_min.unwrap_or(rate),
        interval_rate_median_bytes_per_s: interval_median,
        block_size_bytes: cfg.bs,
        queue_depth: qd,
        short_ops: o.short_ops,
        retried_ops: o.retried_ops,
        verified_blocks: cfg.verify.then_some(o.verified_blocks),
        min_rate: gate,
    }
}

fn interval_line(
    mode: &'static str,
    target: String,
    iv: &crate::coord::Interval,
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

/// What one phase across all targets produced.
pub(crate) struct PhaseRun {
    pub(crate) outcomes: Vec<PhaseOutcome>,
    pub(crate) latencies: Vec<LatencyHist>,
    /// Per target, then the aggregate last.
    pub(crate) interval_min: Vec<Option<f64>>,
    pub(crate) interval_median: Vec<Option<f64>>,
    pub(crate) elapsed_ns: u64,
    pub(crate) gate: Option<crate::coord::GateResult>,
    pub(crate) interrupted: bool,
    pub(crate) features: Vec<&'static str>,
}

type Emit<'a> = dyn FnMut(&crate::coord::Interval, &[crate::coord::Interval]) + 'a;

/// Run one phase on every target at once, one pinned worker thread each, and
/// sample their counters on this thread until all are done.
pub(crate) fn run_phase(
    targets: &mut [Prepared],
    specs: &[PhaseSpec],
    interval: Duration,
    interrupt: &AtomicBool,
    min_rate: Option<MinRate>,
    emit: &mut Emit<'_>,
) -> Result<PhaseRun, Error> {
    assert_eq!(targets.len(), specs.len());
    let n = targets.len();
    let counters: Vec<WorkerCounters> = (0..n).map(|_| WorkerCounters::default()).collect();
    let stop = AtomicBool::new(false);
    let ready = Barrier::new(n + 1);
    let go = Barrier::new(n + 1);
    let start_at: OnceLock<Instant> = OnceLock::new();
    let tick = min_rate
        .map(|m| (m.window / 20).clamp(Duration::from_millis(1), Duration::from_millis(50)))
        .unwrap_or(Duration::from_millis(50))
        .min(interval);
    let ramp = specs[0].ramp;

    std::thread::scope(|scope| {
        let handles: Vec<_> = targets
            .iter_mut()
            .zip(specs)
            .zip(&counters)
            .enumerate()
            .map(|(i, ((t, spec), counters))| {
                let (ready, go, stop, start_at) = (&ready, &go, &stop, &start_at);
                std::thread::Builder::new()
                    .name(format!("urmove-disk-{i}"))
                    .spawn_scoped(scope, move || {
                        t.core = topology::pin_worker(i);
                        let worker = DiskWorker::new(&t.file, spec.bs, spec.qd);
                        ready.wait();
                        go.wait();
                        let mut worker = match worker {
                            Ok(w) => w,
                            Err(e) => {
                                counters.finish();
                                return Err(e);
                            }
                        };
                        let start = *start_at.get().expect("start is set before go");
                        let out = worker.run(spec, counters, stop, start);
                        counters.finish();
                        debug_assert_eq!(worker.free_buffers(), spec.qd as usize);
                        out.map(|o| (o, worker.latency().clone(), worker.features().to_vec()))
                    })
                    .expect("spawning a worker thread")
            })
            .collect();

        ready.wait();
        let start = Instant::now();
        start_at.set(start).expect("set once");
        go.wait();

        // The coordinator: sample, print intervals, feed the gate.
        let ramp_ns = ramp.as_nanos() as u64;
        let mut trackers: Vec<IntervalTracker> = (0..=n)
            .map(|_| IntervalTracker::new(interval.as_nanos() as u64))
            .collect();
        let mut samples: Vec<(u64, u64)> = vec![(0, 0)];
        let mut per = vec![crate::coord::Interval::default(); n];
        let mut totals = vec![0u64; n];
        loop {
            let all_done = counters.iter().all(|c| c.is_done());
            if interrupt.load(Ordering::Relaxed) {
                stop.store(true, Ordering::Relaxed);
            }
            let t_ns = (start.elapsed().as_nanos() as u64).saturating_sub(ramp_ns);
            for (i, c) in counters.iter().enumerate() {
                totals[i] = c.snapshot().0;
            }
            let agg: u64 = totals.iter().sum();
            if start.elapsed() >= ramp {
                samples.push((t_ns, agg));
                if let Some(a) = trackers[n].observe(t_ns, agg) {
                    for i in 0..n {
                        per[i] = trackers[i].observe(t_ns, totals[i]).unwrap_or(per[i]);
                    }
                    emit(&a, &per);
                }
            }
            if all_done {
                break;
            }
            std::thread::sleep(tick);
        }

        let mut outcomes = Vec::with_capacity(n);
        let mut latencies = Vec::with_capacity(n);
        let mut first_error = None;
        let mut features = Vec::new();
        for h in handles {
            match h.join().expect("worker thread panicked") {
                Ok((o, l, f)) => {
                    if features.is_empty() {
                        features = f;
                    }
                    outcomes.push(o);
                    latencies.push(l);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                    outcomes.push(PhaseOutcome::default());
                    latencies.push(LatencyHist::new());
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        let elapsed_ns = outcomes
            .iter()
            .map(|o| o.elapsed_ns)
            .max()
            .unwrap_or(0)
            .max(1);
        let agg_bytes: u64 = outcomes.iter().map(|o| o.bytes).sum();
        // Close the last partial interval at the true end of the phase.
        if let Some(a) = trackers[n].finish(elapsed_ns, agg_bytes) {
            for i in 0..n {
                per[i] = trackers[i]
                    .finish(outcomes[i].elapsed_ns.max(1), outcomes[i].bytes)
                    .unwrap_or(per[i]);
            }
            emit(&a, &per);
        }
        samples.retain(|&(t, _)| t < elapsed_ns);
        samples.push((elapsed_ns, agg_bytes));
        let gate =
            min_rate.map(|m| evaluate_gate(&samples, m.window.as_nanos() as u64, m.bytes_per_s));
        Ok(PhaseRun {
            interrupted: outcomes.iter().any(|o| o.interrupted),
            interval_min: trackers.iter().map(|t| t.min_full_rate()).collect(),
            interval_median: trackers.iter().map(|t| t.median_full_rate()).collect(),
            outcomes,
            latencies,
            elapsed_ns,
            gate,
            features,
        })
    })
}

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

fn random_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    crate::datapath::disk::Rng::new(t ^ (u64::from(std::process::id()) << 32)).next_u64()
}

/// Resolve each TARGET into an open file: a directory gets a new test file,
/// a file or block device is used as it is. Sizes are chosen and clamped to
/// the free space here.
pub(crate) fn prepare_targets(
    cfg: &DiskBenchConfig,
    env: &mut Environment,
    obs: &mut dyn Observer,
) -> Result<Vec<Prepared>, Error> {
    let writes = cfg
        .modes
        .iter()
        .any(|m| !matches!(m, Mode::Read | Mode::RandRead));
    let mut out: Vec<Prepared> = Vec::with_capacity(cfg.targets.len());
    let result = (|| {
        for (i, path) in cfg.targets.iter().enumerate() {
            let p = prepare_one(cfg, writes, i, path, obs)?;
            for f in &p.file.fallbacks {
                obs.notice(f);
            }
            env.fallbacks.extend(p.file.fallbacks.iter().cloned());
            out.push(p);
        }
        Ok(())
    })();
    if let Err(e) = result {
        // Leave nothing behind that this run created.
        for t in &out {
            if t.created {
                let _ = std::fs::remove_file(&t.file.path);
            }
        }
        return Err(e);
    }
    Ok(out)
}

fn prepare_one(
    cfg: &DiskBenchConfig,
    writes: bool,
    index: usize,
    path: &Path,
    obs: &mut dyn Observer,
) -> Result<Prepared, Error> {
    let open_err = |path: &Path, source: std::io::Error| Error::Open {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path);
    let auto_named = meta.as_ref().is_ok_and(|m| m.is_dir());
    let (file_path, created) = match &meta {
        Ok(m) if m.is_dir() => (
            path.join(format!("urmove-bench-{}-{index}.dat", std::process::id())),
            true,
        ),
        Ok(_) => (path.to_path_buf(), false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            if let Err(e) = std::fs::metadata(parent) {
                return Err(open_err(parent, e));
            }
            (path.to_path_buf(), true)
        }
        Err(e) => return Err(open_err(path, std::io::Error::new(e.kind(), e.to_string()))),
    };
    let existing_len = meta
        .as_ref()
        .map(|m| if m.is_file() { m.len() } else { 0 })
        .unwrap_or(0);
    let is_block = meta.as_ref().is_ok_and(|m| {
        use std::os::unix::fs::FileTypeExt;
        m.file_type().is_block_device()
    });
    let need_write = writes
        || created
        || (!is_block && matches!(cfg.size, SizeRule::Given(s) if s > existing_len))
        || (!is_block && cfg.verify && existing_len == 0);
    let file = open_target(
        &file_path,
        &OpenSpec {
            write: need_write,
            create: created,
            direct: cfg.direct,
            destroy: cfg.destroy,
        },
    )?;
    let mut prepared = Prepared {
        region: 0,
        laid_out: 0,
        core: None,
        created,
        temporary: auto_named,
        file,
    };
    let result = size_target(cfg, writes, &mut prepared, obs);
    if let Err(e) = result {
        if created {
            let _ = std::fs::remove_file(&prepared.file.path);
        }
        return Err(e);
    }
    Ok(prepared)
}

fn size_target(
    cfg: &DiskBenchConfig,
    writes: bool,
    t: &mut Prepared,
    obs: &mut dyn Observer,
) -> Result<(), Error> {
    let f = &t.file;
    f.check_aligned("block size", u64::from(cfg.bs))?;
    let bs = u64::from(cfg.bs);
    let read_as_is = !writes && !t.created && f.kind == TargetKind::File && f.size > 0;
    let mut region = match cfg.size {
        SizeRule::Given(s) => s,
        SizeRule::Default { .. } if read_as_is => f.size,
        SizeRule::Default { ram_bytes } => {
            if f.direct {
                SIZE_DIRECT_DEFAULT
            } else {
                ram_bytes.max(SIZE_DIRECT_DEFAULT)
            }
        }
    };
    if f.kind == TargetKind::BlockDevice {
        if region > f.size {
            if matches!(cfg.size, SizeRule::Given(_)) {
                obs.notice(&format!(
                    "size clamped to {}: the size of {}",
                    crate::coord::units::bytes_decimal(f.size),
                    f.path.display()
                ));
            }
            region = f.size;
        }
    } else if !(read_as_is && region <= f.size) {
        // We will write up to `region`: keep it within the free space.
        let dir = f.path.parent().unwrap_or(Path::new("."));
        let free = sys::free_bytes(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        })
        .map_err(|e| Error::Open {
            path: dir.to_path_buf(),
            source: e,
        })?
        // A filesystem that reports no size (ramfs) cannot be clamped.
        .unwrap_or(u64::MAX / 4);
        let reserve = FREE_SPACE_RESERVE.min(free / 20);
        let avail = (free + f.size).saturating_sub(reserve);
        if region > avail {
            let clamped = avail / bs * bs;
            if clamped == 0 {
                return Err(Error::NoSpace {
                    path: f.path.clone(),
                    free,
                });
            }
            obs.notice(&format!(
                "size clamped from {} to {}: only {} free on {}",
                crate::coord::units::bytes_decimal(region),
                crate::coord::units::bytes_decimal(clamped),
                crate::coord::units::bytes_decimal(free),
                dir.display()
            ));
            region = clamped;
        }
    }
    if read_as_is && region <= f.size {
        // Reading a file as it is: the last read may end short at EOF.
    } else {
        let align = u64::from(f.align.offset);
        region = region / align * align;
        if region < bs {
            return Err(Error::Misaligned {
                path: f.path.clone(),
                what: "size",
                value: region,
                align: cfg.bs,
                from: "the block size (size must hold at least one block)",
            });
        }
        if cfg
            .modes
            .iter()
            .any(|m| matches!(m, Mode::RandRead | Mode::RandWrite | Mode::Rw))
            || cfg.verify
        {
            region = region / bs * bs;
        }
    }
    t.region = region;
    Ok(())
}

/// Registered buffers are locked memory: without CAP_IPC_LOCK they must fit
/// RLIMIT_MEMLOCK. Lower the queue depth to fit (and say so), or refuse with
/// the exact remedy.
fn fit_memlock(
    cfg: &DiskBenchConfig,
    targets: &[Prepared],
    env: &mut Environment,
    obs: &mut dyn Observer,
) -> Result<u32, Error> {
    if sys::has_cap_ipc_lock() {
        return Ok(cfg.qd);
    }
    let Some(limit) = sys::memlock_limit() else {
        return Ok(cfg.qd);
    };
    let buf = round_up(u64::from(cfg.bs), crate::datapath::arena::BUF_ALIGN as u64);
    let per_depth = buf * targets.len() as u64;
    let need = per_depth * u64::from(cfg.qd);
    // The kernel also charges each ring's own SQ/CQ pages to the same limit.
    let usable = limit.saturating_sub(RING_MEMLOCK_SLACK * targets.len() as u64);
    if need <= usable {
        return Ok(cfg.qd);
    }
    let qd = (usable / per_depth).min(u64::from(cfg.qd)) as u32;
    let remedy = crate::datapath::ring::memlock_remedy_text(need);
    if qd == 0 {
        return Err(Error::Register {
            what: "I/O buffers",
            source: std::io::Error::from_raw_os_error(libc::ENOMEM),
            remedy,
        });
    }
    let msg = format!(
        "queue depth lowered from {} to {qd}: RLIMIT_MEMLOCK is {} KiB; {remedy}",
        cfg.qd,
        limit / 1024
    );
    obs.notice(&msg);
    env.fallbacks.push(msg);
    Ok(qd)
}

fn finish_targets(
    cfg: &DiskBenchConfig,
    targets: &[Prepared],
    report: &mut DiskReport,
    obs: &mut dyn Observer,
) {
    for t in targets {
        let kept = !t.temporary || cfg.keep;
        if t.temporary {
            if cfg.keep {
                obs.notice(&format!("kept {}", t.file.path.display()));
            } else {
                let _ = std::fs::remove_file(&t.file.path);
            }
        }
        report.env.targets.push(TargetEnv {
            path: t.file.path.display().to_string(),
            kind: match t.file.kind {
                TargetKind::File => "file",
                TargetKind::BlockDevice => "block device",
            },
            filesystem: t.file.fs_type,
            device: t.file.device.clone(),
            direct_io: t.file.direct,
            dio_mem_align_bytes: t.file.align.mem,
            dio_offset_align_bytes: t.file.align.offset,
            dio_align_from: t.file.align.from,
            size_bytes: t.region,
            created: t.created,
            kept,
            laid_out_bytes: t.laid_out,
            core: t.core,
        });
    }
}
