//! One phase on every target at once: a pinned worker thread and ring per
//! target, and the coordinator (this thread) sampling their counters,
//! closing intervals and feeding the rate gate until all are done.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, OnceLock};
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

use crate::coord::{
    evaluate_gate, GateResult, Interval, IntervalTracker, LatencyHist, WorkerCounters,
};
use crate::datapath::disk::{DiskWorker, PhaseOutcome, PhaseSpec};
use crate::datapath::{topology, Error};

use super::disk::MinRate;
use super::target::Prepared;

/// A target's (or the aggregate's) intervals in a phase.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct IntervalSummary {
    /// The lowest rate of an interval of the whole --interval.
    pub(crate) min: Option<f64>,
    /// Intervals of the whole --interval.
    pub(crate) full: u64,
    /// The median rate of those.
    pub(crate) median: Option<f64>,
}

/// What one phase across all targets produced.
pub(crate) struct PhaseRun {
    pub(crate) outcomes: Vec<PhaseOutcome>,
    pub(crate) latencies: Vec<LatencyHist>,
    /// Per target, then the aggregate last.
    pub(crate) intervals: Vec<IntervalSummary>,
    pub(crate) elapsed_ns: u64,
    pub(crate) gate: Option<GateResult>,
    pub(crate) interrupted: bool,
    pub(crate) features: Vec<&'static str>,
}

/// Receives each closed interval: the aggregate, and per target the
/// interval it closed at the same time (`None` once that target is done).
pub(crate) type Emit<'a> = dyn FnMut(&Interval, &[Option<Interval>]) + 'a;

/// Marks a worker finished (and ready, if it never got that far) however
/// its thread ends, so the coordinator can never wait on a dead worker.
struct WorkerGuard<'a> {
    counters: &'a WorkerCounters,
    ready: Option<mpsc::Sender<()>>,
}

impl WorkerGuard<'_> {
    fn ready(&mut self) {
        if let Some(tx) = self.ready.take() {
            let _ = tx.send(());
        }
    }
}

impl Drop for WorkerGuard<'_> {
    fn drop(&mut self) {
        self.ready();
        self.counters.finish();
    }
}

type WorkerResult = Result<(PhaseOutcome, LatencyHist, Vec<&'static str>), Error>;

/// What the coordinator and the workers of one phase share: each worker's
/// counters and the core it was pinned to, and the flag that stops them.
struct Shared {
    counters: Vec<WorkerCounters>,
    cores: Vec<OnceLock<Option<usize>>>,
    stop: AtomicBool,
}

/// How the coordinator samples a phase.
struct Sampling<'a> {
    /// Not measured at first, for this long.
    ramp: Duration,
    interval: Duration,
    /// Between two samples.
    tick: Duration,
    /// Raised by SIGINT/SIGTERM: stop every worker.
    interrupt: &'a AtomicBool,
}

/// The coordinator's samples: interval trackers per target and the
/// aggregate last, and the aggregate's (time, bytes) for the gate.
struct Sampled {
    trackers: Vec<IntervalTracker>,
    samples: Vec<(u64, u64)>,
}

/// The workers spawned, the start each waits for, and why spawning
/// stopped short, if it did.
struct Spawned<'scope> {
    go: Vec<mpsc::Sender<Instant>>,
    handles: Vec<ScopedJoinHandle<'scope, WorkerResult>>,
    error: Option<Error>,
}

/// What the workers did, in target order.
struct Joined {
    outcomes: Vec<PhaseOutcome>,
    latencies: Vec<LatencyHist>,
    features: Vec<&'static str>,
}

/// Run one phase on every target at once and sample until all are done.
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
    let shared = Shared {
        counters: (0..n).map(|_| WorkerCounters::default()).collect(),
        cores: (0..n).map(|_| OnceLock::new()).collect(),
        stop: AtomicBool::new(false),
    };
    let sampling = Sampling {
        ramp: specs[0].ramp,
        interval,
        tick: min_rate
            .map(|m| (m.window / 20).clamp(Duration::from_millis(1), Duration::from_millis(50)))
            .unwrap_or(Duration::from_millis(50))
            .min(interval),
        interrupt,
    };
    let result = std::thread::scope(|scope| {
        let mut spawned = spawn_workers(scope, targets, specs, &shared);
        if spawned.error.is_some() {
            spawned.go.clear();
        }
        let start = Instant::now();
        for tx in &spawned.go {
            let _ = tx.send(start);
        }
        let sampled = spawned
            .error
            .is_none()
            .then(|| coordinate(&shared, start, &sampling, emit));
        let joined = join_workers(spawned, targets)?;
        let sampled = sampled.expect("sampled when no spawn failed");
        Ok(summarize(joined, sampled, min_rate, emit))
    });
    for (t, core) in targets.iter_mut().zip(shared.cores) {
        if let Some(c) = core.into_inner() {
            t.core = c;
        }
    }
    result
}

/// Spawn a worker per target and wait until each is ready (its guard says
/// so even if it fails or panics), so that all can start at one instant.
fn spawn_workers<'scope, 'env>(
    scope: &'scope Scope<'scope, 'env>,
    targets: &'env [Prepared],
    specs: &'env [PhaseSpec],
    shared: &'env Shared,
) -> Spawned<'scope> {
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let mut spawned = Spawned {
        go: Vec::with_capacity(targets.len()),
        handles: Vec::with_capacity(targets.len()),
        error: None,
    };
    for (i, (t, spec)) in targets.iter().zip(specs).enumerate() {
        let (go_tx, go_rx) = mpsc::channel::<Instant>();
        let ready = ready_tx.clone();
        let worker = std::thread::Builder::new()
            .name(format!("urmove-disk-{i}"))
            .spawn_scoped(scope, move || work(i, t, spec, shared, ready, go_rx));
        match worker {
            Ok(h) => {
                spawned.go.push(go_tx);
                spawned.handles.push(h);
            }
            Err(e) => {
                spawned.error = Some(Error::Io {
                    op: "spawn worker thread",
                    path: t.file.path.clone(),
                    offset: 0,
                    source: e,
                });
                break;
            }
        }
    }
    drop(ready_tx);
    for _ in 0..spawned.handles.len() {
        let _ = ready_rx.recv();
    }
    spawned
}

/// Worker `i`'s phase on its own thread: pinned, its ring set up, it says
/// it is `ready` and runs from the start `go` brings (none: the phase was
/// called off before it began). A worker that fails stops the others.
fn work(
    i: usize,
    t: &Prepared,
    spec: &PhaseSpec,
    shared: &Shared,
    ready: mpsc::Sender<()>,
    go: mpsc::Receiver<Instant>,
) -> WorkerResult {
    let counters = &shared.counters[i];
    let mut guard = WorkerGuard {
        counters,
        ready: Some(ready),
    };
    let _ = shared.cores[i].set(topology::pin_worker(i));
    let worker = DiskWorker::new(&t.file, spec.bs, spec.qd);
    guard.ready();
    let start = go.recv().map_err(|_| Error::Interrupted)?;
    let mut worker = worker.inspect_err(|_| shared.stop.store(true, Ordering::Relaxed))?;
    let out = worker.run(spec, counters, &shared.stop, start);
    if out.is_err() {
        // One target failed: the others stop too.
        shared.stop.store(true, Ordering::Relaxed);
    }
    let out = out?;
    debug_assert_eq!(worker.free_buffers(), spec.qd as usize);
    Ok((out, worker.latency().clone(), worker.features().to_vec()))
}

/// Join the workers in order: the first error (a spawn's, a worker's, or
/// a panic) fails the phase; else what each did.
fn join_workers(spawned: Spawned<'_>, targets: &[Prepared]) -> Result<Joined, Error> {
    let mut joined = Joined {
        outcomes: Vec::with_capacity(targets.len()),
        latencies: Vec::with_capacity(targets.len()),
        features: Vec::new(),
    };
    let mut first_error = spawned.error;
    for (i, h) in spawned.handles.into_iter().enumerate() {
        match h.join() {
            Ok(Ok((o, l, f))) => {
                if joined.features.is_empty() {
                    joined.features = f;
                }
                joined.outcomes.push(o);
                joined.latencies.push(l);
            }
            Ok(Err(e)) => {
                // A worker that saw no start was called off: not the cause.
                if !matches!(e, Error::Interrupted) || first_error.is_none() {
                    first_error.get_or_insert(e);
                }
            }
            Err(_) => {
                first_error.get_or_insert(Error::WorkerPanicked {
                    path: targets[i].file.path.clone(),
                });
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(joined),
    }
}

/// Close the last partial intervals at the phase's true end, judge the
/// rate gate on the samples, and sum the phase up.
fn summarize(
    joined: Joined,
    sampled: Sampled,
    min_rate: Option<MinRate>,
    emit: &mut Emit<'_>,
) -> PhaseRun {
    let Sampled {
        mut trackers,
        mut samples,
    } = sampled;
    let outcomes = joined.outcomes;
    let n = outcomes.len();
    let elapsed_ns = outcomes
        .iter()
        .map(|o| o.elapsed_ns)
        .max()
        .unwrap_or(0)
        .max(1);
    let agg_bytes: u64 = outcomes.iter().map(|o| o.bytes).sum();
    // Close the last partial interval at the true end of the phase.
    if let Some(a) = trackers[n].finish(elapsed_ns, agg_bytes) {
        let per: Vec<Option<Interval>> = (0..n)
            .map(|i| trackers[i].finish(outcomes[i].elapsed_ns.max(1), outcomes[i].bytes))
            .collect();
        emit(&a, &per);
    }
    samples.retain(|&(t, _)| t < elapsed_ns);
    samples.push((elapsed_ns, agg_bytes));
    let gate = min_rate.map(|m| evaluate_gate(&samples, m.window.as_nanos() as u64, m.bytes_per_s));
    PhaseRun {
        interrupted: outcomes.iter().any(|o| o.interrupted),
        intervals: trackers
            .iter()
            .map(|t| IntervalSummary {
                min: t.min_full_rate(),
                full: t.nominal_count(),
                median: t.median_full_rate(),
            })
            .collect(),
        outcomes,
        latencies: joined.latencies,
        elapsed_ns,
        gate,
        features: joined.features,
    }
}

/// The coordinator loop: sample every worker's counters each tick, close
/// intervals per target and in aggregate, and keep the gate's samples.
/// A target's intervals stop when its worker is done.
fn coordinate(
    shared: &Shared,
    start: Instant,
    sampling: &Sampling<'_>,
    emit: &mut Emit<'_>,
) -> Sampled {
    let counters = &shared.counters;
    let n = counters.len();
    let ramp_ns = sampling.ramp.as_nanos() as u64;
    let mut trackers: Vec<IntervalTracker> = (0..=n)
        .map(|_| IntervalTracker::new(sampling.interval.as_nanos() as u64))
        .collect();
    let mut samples: Vec<(u64, u64)> = vec![(0, 0)];
    let mut per: Vec<Option<Interval>> = vec![None; n];
    loop {
        // Read "done" before the totals: a done worker's total is final, and
        // its last partial interval is closed at its own end after the join.
        let done: Vec<bool> = counters.iter().map(|c| c.is_done()).collect();
        let all_done = done.iter().all(|&d| d);
        if sampling.interrupt.load(Ordering::Relaxed) {
            shared.stop.store(true, Ordering::Relaxed);
        }
        let elapsed = start.elapsed();
        let t_ns = (elapsed.as_nanos() as u64).saturating_sub(ramp_ns);
        let totals: Vec<u64> = counters.iter().map(|c| c.snapshot().0).collect();
        let agg: u64 = totals.iter().sum();
        if elapsed >= sampling.ramp {
            samples.push((t_ns, agg));
            if let Some(a) = trackers[n].observe(t_ns, agg) {
                for i in 0..n {
                    per[i] = if done[i] {
                        None
                    } else {
                        trackers[i].observe(t_ns, totals[i])
                    };
                }
                emit(&a, &per);
            }
        }
        if all_done {
            return Sampled { trackers, samples };
        }
        std::thread::sleep(sampling.tick);
    }
}
