//! One phase on every target at once: a pinned worker thread and ring per
//! target, and the coordinator (this thread) sampling their counters,
//! closing intervals and feeding the rate gate until all are done.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::coord::{
    evaluate_gate, GateResult, Interval, IntervalTracker, LatencyHist, WorkerCounters,
};
use crate::datapath::disk::{DiskWorker, PhaseOutcome, PhaseSpec};
use crate::datapath::{topology, Error};

use super::disk::MinRate;
use super::target::Prepared;

/// What one phase across all targets produced.
pub(crate) struct PhaseRun {
    pub(crate) outcomes: Vec<PhaseOutcome>,
    pub(crate) latencies: Vec<LatencyHist>,
    /// Per target, then the aggregate last.
    pub(crate) interval_min: Vec<Option<f64>>,
    /// Intervals of the whole --interval, as `interval_min`.
    pub(crate) intervals_full: Vec<u64>,
    pub(crate) interval_median: Vec<Option<f64>>,
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
    let counters: Vec<WorkerCounters> = (0..n).map(|_| WorkerCounters::default()).collect();
    let cores: Vec<std::sync::OnceLock<Option<usize>>> =
        (0..n).map(|_| Default::default()).collect();
    let stop = AtomicBool::new(false);
    let tick = min_rate
        .map(|m| (m.window / 20).clamp(Duration::from_millis(1), Duration::from_millis(50)))
        .unwrap_or(Duration::from_millis(50))
        .min(interval);
    let ramp = specs[0].ramp;

    let result = std::thread::scope(|scope| {
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        let mut go = Vec::with_capacity(n);
        let mut handles = Vec::with_capacity(n);
        let mut spawn_error = None;
        for (i, ((t, spec), counters)) in targets.iter().zip(specs).zip(&counters).enumerate() {
            let (go_tx, go_rx) = mpsc::channel::<Instant>();
            let (stop, ready_tx, core) = (&stop, ready_tx.clone(), &cores[i]);
            let spawned = std::thread::Builder::new()
                .name(format!("urmove-disk-{i}"))
                .spawn_scoped(scope, move || -> WorkerResult {
                    let mut guard = WorkerGuard {
                        counters,
                        ready: Some(ready_tx),
                    };
                    let _ = core.set(topology::pin_worker(i));
                    let worker = DiskWorker::new(&t.file, spec.bs, spec.qd);
                    guard.ready();
                    // No start means the phase was called off before it began.
                    let start = go_rx.recv().map_err(|_| Error::Interrupted)?;
                    let mut worker = worker.inspect_err(|_| stop.store(true, Ordering::Relaxed))?;
                    let out = worker.run(spec, counters, stop, start);
                    if out.is_err() {
                        // One target failed: the others stop too.
                        stop.store(true, Ordering::Relaxed);
                    }
                    let out = out?;
                    debug_assert_eq!(worker.free_buffers(), spec.qd as usize);
                    Ok((out, worker.latency().clone(), worker.features().to_vec()))
                });
            match spawned {
                Ok(h) => {
                    go.push(go_tx);
                    handles.push(h);
                }
                Err(e) => {
                    spawn_error = Some(Error::Io {
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
        // Every spawned worker reports ready (its guard does, even if it
        // fails or panics), then all start at one instant.
        for _ in 0..handles.len() {
            let _ = ready_rx.recv();
        }
        if spawn_error.is_some() {
            go.clear();
        }
        let start = Instant::now();
        for tx in &go {
            let _ = tx.send(start);
        }

        let sampled = if spawn_error.is_none() {
            Some(coordinate(
                &counters, start, ramp, interval, tick, interrupt, &stop, emit,
            ))
        } else {
            None
        };

        let mut outcomes = Vec::with_capacity(n);
        let mut latencies = Vec::with_capacity(n);
        let mut first_error = spawn_error;
        let mut features = Vec::new();
        for (i, h) in handles.into_iter().enumerate() {
            match h.join() {
                Ok(Ok((o, l, f))) => {
                    if features.is_empty() {
                        features = f;
                    }
                    outcomes.push(o);
                    latencies.push(l);
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
        if let Some(e) = first_error {
            return Err(e);
        }
        let (mut trackers, mut samples) = sampled.expect("sampled when no spawn failed");
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
        let gate =
            min_rate.map(|m| evaluate_gate(&samples, m.window.as_nanos() as u64, m.bytes_per_s));
        Ok(PhaseRun {
            interrupted: outcomes.iter().any(|o| o.interrupted),
            interval_min: trackers.iter().map(|t| t.min_full_rate()).collect(),
            intervals_full: trackers.iter().map(|t| t.nominal_count()).collect(),
            interval_median: trackers.iter().map(|t| t.median_full_rate()).collect(),
            outcomes,
            latencies,
            elapsed_ns,
            gate,
            features,
        })
    });
    for (t, core) in targets.iter_mut().zip(cores) {
        if let Some(c) = core.into_inner() {
            t.core = c;
        }
    }
    result
}

/// The coordinator loop: sample every worker's counters each tick, close
/// intervals per target and in aggregate, and keep the gate's samples.
/// A target's intervals stop when its worker is done.
#[allow(clippy::too_many_arguments)]
fn coordinate(
    counters: &[WorkerCounters],
    start: Instant,
    ramp: Duration,
    interval: Duration,
    tick: Duration,
    interrupt: &AtomicBool,
    stop: &AtomicBool,
    emit: &mut Emit<'_>,
) -> (Vec<IntervalTracker>, Vec<(u64, u64)>) {
    let n = counters.len();
    let ramp_ns = ramp.as_nanos() as u64;
    let mut trackers: Vec<IntervalTracker> = (0..=n)
        .map(|_| IntervalTracker::new(interval.as_nanos() as u64))
        .collect();
    let mut samples: Vec<(u64, u64)> = vec![(0, 0)];
    let mut per: Vec<Option<Interval>> = vec![None; n];
    loop {
        // Read "done" before the totals: a done worker's total is final, and
        // its last partial interval is closed at its own end after the join.
        let done: Vec<bool> = counters.iter().map(|c| c.is_done()).collect();
        let all_done = done.iter().all(|&d| d);
        if interrupt.load(Ordering::Relaxed) {
            stop.store(true, Ordering::Relaxed);
        }
        let elapsed = start.elapsed();
        let t_ns = (elapsed.as_nanos() as u64).saturating_sub(ramp_ns);
        let totals: Vec<u64> = counters.iter().map(|c| c.snapshot().0).collect();
        let agg: u64 = totals.iter().sum();
        if elapsed >= ramp {
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
            return (trackers, samples);
        }
        std::thread::sleep(tick);
    }
}
