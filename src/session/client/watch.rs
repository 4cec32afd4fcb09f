//! The coordinator's side of a running transfer: it samples the data
//! thread's counters and the streams' TCP, prints interval lines of what
//! the peer received, judges the path (a warning naming the sysctl when a
//! socket buffer holds the streams back) and, under `-P auto`, opens the
//! way to more streams while the aggregate still grows.

use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::coord::{IntervalTracker, StreamRates, WorkerCounters};
use crate::datapath::sys;
use crate::datapath::tcp::PathReport;

use super::report::{Lag, NetInterval, SendObserver, SendReport};

use super::config::SendConfig;
use crate::session::source::follow::Gauge;
use crate::session::SessionError;

/// How often the coordinator looks.
const TICK: Duration = Duration::from_millis(10);

/// What a run's data will be.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expect<'a> {
    /// Bytes, when known (0: a timed test).
    total: u64,
    /// Whether this side sends them.
    sending: bool,
    /// A test's length: its rate is what the peer had by its end.
    test: Option<Duration>,
    /// `send --follow`: the total grows with the files, and the lag
    /// behind their writers is measured.
    growing: Option<&'a Gauge>,
}

impl<'a> Expect<'a> {
    /// A transfer of `total` bytes (0 when not known).
    pub(crate) fn transfer(total: u64, sending: bool) -> Expect<'a> {
        Expect {
            total,
            sending,
            test: None,
            growing: None,
        }
    }

    /// A test that moves data for `time`.
    pub(crate) fn test(time: Duration, sending: bool) -> Expect<'a> {
        Expect {
            total: 0,
            sending,
            test: Some(time),
            growing: None,
        }
    }

    /// The total grows as `gauge` says (files followed).
    pub(crate) fn following(self, gauge: Option<&'a Gauge>) -> Expect<'a> {
        Expect {
            growing: gauge,
            ..self
        }
    }
}

/// How far the copy is behind the writers of the files it follows: the
/// bytes the files hold (in whole blocks) that the peer has not, and how
/// long ago the oldest of them was written. Samples of the files' total
/// are kept only while the copy has not reached them.
#[derive(Debug, Default)]
struct LagTrack {
    /// (ns from the start, the files' total then), totals rising.
    samples: std::collections::VecDeque<(u64, u64)>,
    max: Lag,
}

impl LagTrack {
    /// The files hold `total` at `t`; the peer has `done`: the lag now.
    fn look(&mut self, t: u64, total: u64, done: u64) -> Lag {
        if self.samples.back().is_none_or(|&(_, last)| total > last) {
            self.samples.push_back((t, total));
        }
        while self.samples.front().is_some_and(|&(_, at)| at <= done) {
            self.samples.pop_front();
        }
        let lag = Lag {
            bytes: total.saturating_sub(done),
            seconds: self
                .samples
                .front()
                .map_or(0.0, |&(since, _)| t.saturating_sub(since) as f64 / 1e9),
        };
        self.max.bytes = self.max.bytes.max(lag.bytes);
        self.max.seconds = self.max.seconds.max(lag.seconds);
        lag
    }
}

/// Run `data` on its own thread while this one watches (see the module);
/// then end the data streams.
pub(crate) fn drive<T: Send>(
    cfg: &SendConfig,
    expect: Expect<'_>,
    streams: &[TcpStream],
    interrupt: &AtomicBool,
    obs: &mut dyn SendObserver,
    data: impl FnOnce(&WorkerCounters, &AtomicBool) -> Result<T, SessionError> + Send,
) -> (Result<T, SessionError>, SendReport) {
    let counters = WorkerCounters::with_streams(streams.len());
    let stop = AtomicBool::new(false);
    let mut watch = Watch::new(cfg, expect, streams);
    watch.grow.start(&counters);
    let result = std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            let r = data(&counters, &stop);
            counters.finish();
            r
        });
        while !counters.is_done() {
            std::thread::sleep(TICK.min(cfg.interval));
            if interrupt.load(Ordering::Relaxed) {
                stop.store(true, Ordering::Relaxed);
            }
            watch.tick(&counters, obs);
        }
        worker.join().expect("the data thread panicked")
    });
    if result.is_ok() {
        watch.drain(&counters, cfg.timeout, obs);
    }
    watch.path.finish(&watch.fds, obs);
    for st in streams {
        let _ = st.shutdown(Shutdown::Write);
    }
    let report = watch.finish(cfg, &counters, obs);
    (result, report)
}

/// The samples a `--min-rate` gate is judged on: every tenth of a window,
/// (time, bytes the peer has, bytes waiting to go).
struct GateSamples {
    spec: super::config::MinRate,
    samples: Vec<(u64, u64, u64)>,
}

impl GateSamples {
    fn take(&mut self, t: u64, done: u64, waiting: u64) {
        let step = self.spec.window.as_nanos() as u64 / 10;
        if self.samples.last().is_none_or(|s| t >= s.0 + step.max(1)) {
            self.samples.push((t, done, waiting));
        }
    }

    fn judge(&self) -> crate::coord::GateResult {
        let window = self.spec.window.as_nanos() as u64;
        crate::coord::evaluate_transfer_gate(&self.samples, window.max(1), self.spec.bytes_per_s)
    }
}

/// What the coordinator keeps between ticks.
struct Watch<'a> {
    /// `--min-rate`: its samples.
    gate: Option<GateSamples>,
    /// `send --follow`: the growing total, and the lag behind it.
    growing: Option<(&'a Gauge, LagTrack)>,
    /// The data streams, which the parts below read the TCP of.
    fds: Vec<RawFd>,
    start: Instant,
    total: u64,
    tracker: IntervalTracker,
    per_stream: StreamRates,
    path: PathWatch,
    delivered: Delivered,
    grow: Grow,
    /// When the peer had every byte (ns from `start`): interval lines end
    /// there, so waiting for the receiver's commit is no tail of 0 b/s.
    done_at: Option<u64>,
    /// When the peer's TCP had acknowledged every byte sent, if it did.
    drained: Option<Duration>,
    /// A test's length, and what the peer had by its end (when, bytes).
    test: Option<Duration>,
    in_test: Option<(Duration, u64)>,
}

impl<'a> Watch<'a> {
    fn new(cfg: &SendConfig, expect: Expect<'a>, streams: &[TcpStream]) -> Watch<'a> {
        let rtt_us = streams
            .first()
            .and_then(|s| sys::tcp_path(s.as_raw_fd()))
            .map_or(0, |p| u64::from(p.rtt_us));
        let fds: Vec<RawFd> = streams.iter().map(|s| s.as_raw_fd()).collect();
        Watch {
            gate: cfg.min_rate.map(|spec| GateSamples {
                spec,
                samples: Vec::new(),
            }),
            growing: expect.growing.map(|g| (g, LagTrack::default())),
            start: Instant::now(),
            total: expect.total,
            tracker: IntervalTracker::new(cfg.interval.as_nanos() as u64),
            per_stream: StreamRates::new(streams.len()),
            path: PathWatch::default(),
            delivered: Delivered::new(&fds, expect.sending),
            grow: Grow::new(cfg, fds.len(), rtt_us),
            done_at: None,
            drained: None,
            test: expect.test,
            in_test: None,
            fds,
        }
    }

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// One look: the path once in a while, the next interval line, the
    /// stream count.
    fn tick(&mut self, counters: &WorkerCounters, obs: &mut dyn SendObserver) {
        self.path.look(&self.fds, self.start.elapsed(), obs);
        let t = self.now_ns();
        let bytes = self.delivered.of(&self.fds, counters.snapshot().0);
        self.grow.step(&self.fds, t, bytes, counters, obs);
        let at = Duration::from_nanos(t);
        if self.in_test.is_none() && self.test.is_some_and(|test| at >= test) {
            self.in_test = Some((at, bytes));
        }
        if self.done_at.is_some() {
            return;
        }
        let lag = self.follow_total(t, bytes + counters.unsent());
        let (done, total) = (bytes + counters.unsent(), self.total);
        if let Some(g) = &mut self.gate {
            g.take(t, done, total.saturating_sub(done));
        }
        let still = self
            .growing
            .as_ref()
            .is_some_and(|g| g.0.active.load(Ordering::Acquire));
        if self.total > 0 && !still && done >= self.total {
            self.done_at = Some(t);
            return;
        }
        if let Some(iv) = self.tracker.observe(t, bytes) {
            obs.interval(&NetInterval {
                interval: iv,
                total_bytes: self.total,
                unsent_bytes: counters.unsent(),
                lag,
            });
            obs.stream_intervals(self.per_stream.close(t, iv.full, counters.streams()));
        }
    }

    /// Following files: the total as they grew, and the lag behind them
    /// (`done`: what the peer has).
    fn follow_total(&mut self, t: u64, done: u64) -> Option<Lag> {
        let (gauge, track) = self.growing.as_mut()?;
        self.total = gauge.total.load(Ordering::Acquire);
        Some(track.look(t, self.total, done))
    }

    /// After the data thread: go on watching until the peer's TCP has
    /// acknowledged what was sent (the socket buffers drain), at most
    /// `limit`.
    fn drain(&mut self, counters: &WorkerCounters, limit: Duration, obs: &mut dyn SendObserver) {
        let until = Instant::now() + limit;
        let sent = counters.snapshot().0;
        while self.delivered.of(&self.fds, sent) < sent
            && Instant::now() < until
            && Delivered::flowing(&self.fds)
        {
            std::thread::sleep(TICK);
            self.tick(counters, obs);
        }
        if self.delivered.sending && self.delivered.of(&self.fds, sent) >= sent {
            self.drained = Some(self.start.elapsed());
        }
    }

    /// The last interval line (ending when the peer had every byte) and
    /// the report.
    fn finish(
        mut self,
        cfg: &SendConfig,
        counters: &WorkerCounters,
        obs: &mut dyn SendObserver,
    ) -> SendReport {
        let elapsed = self.start.elapsed();
        let (bytes, _) = counters.snapshot();
        let end = self.done_at.unwrap_or(elapsed.as_nanos() as u64);
        // What the peer took (all of it, unless the run failed).
        let delivered = self.delivered.of(&self.fds, bytes);
        // A last part-interval with no byte in it (the test's end, just
        // after a full one) says nothing, and would read as a stall.
        let last = self.tracker.finish(end, delivered);
        let lag = self.follow_total(end, delivered + counters.unsent());
        if let Some(iv) = last.filter(|iv| iv.full || iv.bytes > 0) {
            obs.interval(&NetInterval {
                interval: iv,
                total_bytes: self.total,
                unsent_bytes: counters.unsent(),
                lag,
            });
            obs.stream_intervals(self.per_stream.close(end, iv.full, counters.streams()));
        }
        let secs = elapsed.as_secs_f64().max(1e-9);
        let mut report = SendReport {
            schema: 1,
            command: "send",
            status: "ok",
            error: None,
            bytes,
            bytes_skipped: 0,
            files: 0,
            files_verified: 0,
            files_unchanged: 0,
            files_found_complete: 0,
            files_continued: 0,
            files_skipped: 0,
            files_excluded: 0,
            devices_left_out: 0,
            bytes_total: 0,
            bytes_apparent: 0,
            kept: None,
            hard_links: 0,
            files_deleted: 0,
            deleted: Vec::new(),
            skipped: Vec::new(),
            listed_files_skipped: 0,
            elapsed_s: secs,
            wall_s: secs,
            phases: None,
            rate_bits_per_s: 0.0,
            interval_rate_min_bits_per_s: 0.0,
            intervals_full: self.tracker.nominal_count(),
            interval_rate_min_measured: self.tracker.min_full_rate().map(|r| r * 8.0),
            streams: self.grow.chosen(),
            streams_opened: self.grow.open as u16,
            streams_auto: cfg.auto_streams,
            block_size_bytes: cfg.block_size,
            zero_copy_sends: 0,
            zero_copy_copied: 0,
            zero_copy_fell_back: false,
            zero_copy_skipped: None,
            frames_resent: 0,
            lanes: Vec::new(),
            path: self.path.report,
            started: Some(self.start),
            data_elapsed: self.drained,
            in_test: self.in_test,
            test_s: None,
            bytes_in_test: None,
            drain_s: None,
            shard: None,
            min_rate: self.gate.as_ref().map(GateSamples::judge),
            lag_max: self.growing.as_ref().map(|g| g.1.max),
            kept_up: self
                .growing
                .as_ref()
                .map(|g| g.1.max.seconds <= super::report::KEPT_UP_LAG_S),
        };
        report.set_rate(bytes as f64 * 8.0 / secs);
        report
    }
}

/// What the peer has received: the bytes the data thread counted, but,
/// on the side that sends, no more than the peer's TCP acknowledged (a
/// frame is counted when queued and may still sit in a socket buffer).
struct Delivered {
    /// Each stream's acknowledged bytes when the data began (its hello).
    base: Vec<u64>,
    sending: bool,
}

impl Delivered {
    fn new(fds: &[RawFd], sending: bool) -> Delivered {
        let base = fds.iter().map(|&fd| acked(fd)).collect();
        Delivered { base, sending }
    }

    /// `counted`, held to what the peer acknowledged.
    fn of(&self, fds: &[RawFd], counted: u64) -> u64 {
        if !self.sending {
            return counted;
        }
        let acked: u64 = fds
            .iter()
            .zip(&self.base)
            .map(|(&fd, &base)| acked(fd).saturating_sub(base))
            .sum();
        counted.min(acked)
    }

    /// Whether every stream is still connected (a closed one never
    /// acknowledges the rest).
    fn flowing(fds: &[RawFd]) -> bool {
        fds.iter()
            .all(|&fd| sys::tcp_progress(fd).is_some_and(|p| p.connected))
    }
}

/// Bytes the peer's TCP acknowledged on `fd`.
fn acked(fd: RawFd) -> u64 {
    sys::tcp_progress(fd).map_or(0, |p| p.bytes_acked)
}

/// Watches the data streams' TCP: warns once (a few seconds in, or at the
/// end) when a socket buffer holds them back, and keeps the last reading.
#[derive(Default)]
struct PathWatch {
    looked: bool,
    warned: bool,
    report: Option<PathReport>,
}

/// When a running transfer's streams are first judged.
const PATH_LOOK_AFTER: Duration = Duration::from_secs(5);

impl PathWatch {
    /// Judge the streams once, `PATH_LOOK_AFTER` into the transfer.
    fn look(&mut self, fds: &[RawFd], elapsed: Duration, obs: &mut dyn SendObserver) {
        if !self.looked && elapsed >= PATH_LOOK_AFTER {
            self.looked = true;
            self.judge(fds, obs);
        }
    }

    /// The last reading, for the report (and a warning not given yet).
    fn finish(&mut self, fds: &[RawFd], obs: &mut dyn SendObserver) {
        self.judge(fds, obs);
    }

    fn judge(&mut self, fds: &[RawFd], obs: &mut dyn SendObserver) {
        self.report = PathReport::of(fds);
        if let Some(w) = self.report.as_ref().and_then(PathReport::warning) {
            if !self.warned {
                obs.notice(&w);
            }
            self.warned = true;
        }
    }
}

/// `-P auto`: frames start on the first `AUTO_START` of the open streams
/// (on a path of `AUTO_ALL_RTT` or more, on all of them: there the
/// streams' slow starts are what a transfer waits for, and twice the
/// streams fill the path a round trip sooner);
/// every step, while the delivered rate (over the step's second half, past
/// the new streams' ramp) grew by `GROW_GAIN` over the step before, twice
/// as many take frames, up to all that are open; a step that did not pay
/// goes back to the count before it.
struct Grow {
    auto: bool,
    /// `--rate-limit`: each stream is paced to its share of it among those
    /// carrying data.
    rate_limit: Option<f64>,
    open: u32,
    active: u32,
    step_ns: u64,
    /// Where this step's measured half began: (ns, bytes), once reached.
    mark: Option<(u64, u64)>,
    step_end: u64,
    /// The best rate so far (bytes per ns) and the count that gave it.
    best: (f64, u32),
    done: bool,
    /// Streams stopped carrying data: once what they hold is delivered, the
    /// streams left probe for their share again
    /// ([`probe_again`](crate::datapath::tcp::probe_again)).
    reprobe: bool,
    /// A long path: every open stream carries from the start (said once).
    all_at_once: bool,
}

/// Streams `-P auto` starts with.
pub const AUTO_START: u16 = 8;
/// Streams `-P auto` opens (and may grow to).
pub const AUTO_CAP: u16 = 16;
/// A round trip from which `-P auto` starts on every open stream.
pub const AUTO_ALL_RTT: Duration = Duration::from_millis(20);
/// Growth that justifies the next step.
const GROW_GAIN: f64 = 1.1;
/// A step lasts this long at least, and `GROW_STEP_RTTS` round trips (a
/// stream idle until now starts again from a small window).
const GROW_STEP_MIN: Duration = Duration::from_secs(3);
const GROW_STEP_RTTS: u64 = 30;

impl Grow {
    fn new(cfg: &SendConfig, streams: usize, rtt_us: u64) -> Grow {
        let open = streams as u32;
        let long = u128::from(rtt_us) * 1000 >= AUTO_ALL_RTT.as_nanos();
        let auto = cfg.auto_streams && open > u32::from(AUTO_START);
        let step = (GROW_STEP_MIN.as_nanos() as u64).max(rtt_us * 1000 * GROW_STEP_RTTS);
        Grow {
            auto,
            rate_limit: cfg.rate_limit_bytes_per_s,
            open,
            active: if auto && !long {
                u32::from(AUTO_START)
            } else {
                open
            },
            step_ns: step,
            mark: None,
            step_end: step,
            best: (0.0, u32::from(AUTO_START)),
            done: !auto,
            reprobe: false,
            all_at_once: auto && long,
        }
    }

    fn start(&self, counters: &WorkerCounters) {
        if self.auto {
            counters.set_active_streams(self.active);
        }
    }

    /// Streams in use at the end.
    fn chosen(&self) -> u16 {
        self.active as u16
    }

    /// At `t`, with `bytes` delivered: mark the middle of a step, judge it
    /// at its end.
    fn step(
        &mut self,
        fds: &[RawFd],
        t: u64,
        bytes: u64,
        counters: &WorkerCounters,
        obs: &mut dyn SendObserver,
    ) {
        self.reprobe_once_drained(fds, obs);
        if std::mem::take(&mut self.all_at_once) {
            self.done = true;
            obs.info(&format!(
                "-P auto: {} streams carry the data ({} open: a round trip of {} ms or more, where the streams' slow starts are what the transfer waits for)",
                self.active,
                self.open,
                AUTO_ALL_RTT.as_millis()
            ));
        }
        if self.done {
            return;
        }
        let Some((t0, b0)) = self.mark else {
            if t >= self.step_end - self.step_ns / 2 {
                self.mark = Some((t, bytes));
            }
            return;
        };
        if t < self.step_end {
            return;
        }
        let rate = bytes.saturating_sub(b0) as f64 / (t - t0).max(1) as f64;
        self.judge(fds, rate, counters, obs);
        self.step_end = t + self.step_ns;
        self.mark = None;
    }

    /// The streams taken back have delivered what they held: those left
    /// probe once more, now that the whole share is theirs.
    fn reprobe_once_drained(&mut self, fds: &[RawFd], obs: &mut dyn SendObserver) {
        if !self.reprobe {
            return;
        }
        let (left, stopped) = fds.split_at(self.active as usize);
        if stopped
            .iter()
            .all(|&fd| sys::socket_outq(fd).unwrap_or(0) == 0)
        {
            self.reprobe = false;
            if let Err(e) = crate::datapath::tcp::probe_again(left) {
                obs.notice(&format!("-P auto: restarting the streams' probing: {e}"));
            }
        }
    }

    fn judge(
        &mut self,
        fds: &[RawFd],
        rate: f64,
        counters: &WorkerCounters,
        obs: &mut dyn SendObserver,
    ) {
        if rate <= 0.0 {
            // Nothing moved (a paused receiver): nothing to judge by.
            return;
        }
        let (best, with) = self.best;
        if rate > best * GROW_GAIN && self.active < self.open {
            self.best = (rate, self.active);
            self.active = (self.active * 2).min(self.open);
        } else {
            if rate <= best * GROW_GAIN && with < self.active {
                self.active = with;
                // The streams left take the others' share: they probe for
                // it now, and again once the others are drained.
                let probed = crate::datapath::tcp::probe_again(&fds[..with as usize]);
                if let Err(e) = &probed {
                    obs.notice(&format!("-P auto: restarting the streams' probing: {e}"));
                }
                self.reprobe = probed.is_ok();
            }
            self.done = true;
            obs.info(&format!(
                "-P auto: {} streams carry the data ({} open)",
                self.active, self.open
            ));
        }
        counters.set_active_streams(self.active);
        if let Some(rate) = self.rate_limit {
            if let Err(e) = crate::datapath::tcp::pace(fds, rate, self.active as usize) {
                obs.notice(&format!("pacing the data streams: {e}"));
            }
        }
    }
}
