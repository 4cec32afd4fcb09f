//! `urmove bench --net`: frames from memory to a `urmove recv` daemon (or,
//! `--reverse`, from it) for a time, on lanes on both sides, checked when
//! asked and discarded; iperf3's job on urmove's own data path. The
//! daemon's half is `daemon::bench`'s session, which runs the same
//! senders and receivers.

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::coord::WorkerCounters;
use crate::datapath::disk::{fill_random, scramble};
use crate::datapath::net::{payload_mut, NetReceiver, NetSender, SendStats, ZeroCopy};
use crate::protocol::control::{
    Direction, ErrorCode, Message, SessionRequest, REQ_ENCRYPT, REQ_VERIFY,
};
use crate::protocol::frame::{FrameHeader, FrameKey, FLAG_UNCHECKED};
use crate::protocol::seal::Direction as SealDirection;

use crate::session::client::send::{drive, push_params, Expect, AUTO_START};

use crate::session::client::connect::{fit, note_zero_copy, open_session, register_fitted};

use crate::session::client::report::{SendObserver, SendReport};

use crate::session::client::config::SendConfig;
use crate::session::link::conn::{recv_msg, Control};
use crate::session::link::lanes::{self, Lane, LaneReport, Lanes};
use crate::session::link::streams::fds_of;
use crate::session::sink::landing::FrameCheck;
use crate::session::source::sending::PushParams;
use crate::session::SessionError;

/// `bench --net`'s frame size unless `--bs` says otherwise. Chosen by
/// measurement, apart from `send`'s disk block: on loopback here (2 cores,
/// `-P 4`, medians of 3-4 alternating rounds against `iperf3 -P 4 -l 1M`
/// in the same run) 256 KiB frames ran at 1.14-1.19 of iperf3's rate for
/// 1.08-1.10 of its CPU per GB, 4 MiB frames at 0.96-1.03 for 1.27-1.32
/// (a side's buffers of 4 MiB frames outgrow the cache the kernel copies
/// through; 512 KiB and 1 MiB fall between).
pub const FRAME_DEFAULT: u64 = 256 << 10;

/// `bench --net`: frames from memory to a receiver for `time`, which
/// discards them (after checking each checksum when `verify`); no disk is
/// touched on either side.
pub fn run_bench_net(
    cfg: &SendConfig,
    time: Duration,
    verify: bool,
    reverse: bool,
    interrupt: &AtomicBool,
    obs: &mut dyn SendObserver,
) -> Result<SendReport, SessionError> {
    if reverse {
        return run_bench_net_reverse(cfg, time, verify, interrupt, obs);
    }
    let (cfg, fitted) = &fit(cfg, 4, 0, "--bs", obs)?;
    let carrying = if cfg.auto_streams {
        AUTO_START
    } else {
        cfg.streams
    };
    let ((plan, mut txs), buffers) = register_fitted(*fitted, obs, |n| {
        bench_senders(
            cfg.lanes,
            cfg.streams,
            carrying,
            n,
            cfg.block_size,
            cfg.zerocopy,
        )
    })?;
    let mut params = push_params(cfg, buffers);
    txs.iter_mut().for_each(fill_bench_buffers);
    let req = SessionRequest {
        filter: Vec::new(),
        owner: [0; 32],
        rate_limit: 0,
        direction: Direction::Bench,
        streams: cfg.streams,
        block_size: cfg.block_size,
        flags: cfg.flags() & REQ_ENCRYPT,
        path: String::new(),
        time_ms: 0,
    };
    let (mut ctl, streams, keys, _) = open_session(cfg, req, plan.len(), &mut |_, _| Ok(()))?;
    params.key_with(keys, cfg.encrypt.then_some(SealDirection::ClientToServer));
    let (data, mut report) = drive(
        cfg,
        Expect::test(time, true),
        &streams,
        interrupt,
        obs,
        |counters, stop| {
            let bench = BenchRun {
                params: &params,
                time,
                verify,
                counters,
                stop,
            };
            bench.send(&plan, &streams, txs)
        },
    );
    report.command = "bench --net";
    let lanes = data.map(|(stats, lanes)| {
        note_zero_copy(&mut report, &stats, obs);
        lanes
    });
    Ok(conclude(&mut ctl, report, lanes))
}

/// The lanes of a bench sender (see [`lanes::prepare`]) with buffers of
/// `block` bytes.
pub(crate) fn bench_senders(
    want: Lanes,
    streams: u16,
    carrying: u16,
    buffers: usize,
    block: u32,
    zerocopy: ZeroCopy,
) -> Result<(Vec<Lane>, Vec<NetSender>), SessionError> {
    lanes::prepare(want, streams, carrying, buffers, |n, b| {
        NetSender::prepare(n, b, block as usize, zerocopy, 0)
    })
}

/// The lanes of a bench receiver, as [`bench_senders`].
pub(crate) fn bench_receivers(
    want: Lanes,
    streams: u16,
    buffers: usize,
    block: u32,
) -> Result<(Vec<Lane>, Vec<NetReceiver>), SessionError> {
    lanes::prepare(want, streams, streams, buffers, |n, b| {
        NetReceiver::prepare(n, b, block as usize, 0)
    })
}

/// `bench --net --reverse`: the daemon sends for `time` (carried in the
/// request's path as milliseconds, with `v` appended to ask for checksums)
/// and this side receives, counts and discards.
fn run_bench_net_reverse(
    cfg: &SendConfig,
    time: Duration,
    verify: bool,
    interrupt: &AtomicBool,
    obs: &mut dyn SendObserver,
) -> Result<SendReport, SessionError> {
    let (cfg, fitted) = &fit(cfg, 2, 2, "--bs", obs)?;
    let ((plan, rxs), _) = register_fitted(*fitted, obs, |n| {
        bench_receivers(cfg.lanes, cfg.streams, n, cfg.block_size)
    })?;
    let req = SessionRequest {
        filter: Vec::new(),
        owner: [0; 32],
        // The daemon sends: it paces its streams as asked.
        rate_limit: cfg.rate_limit_bytes_per_s.map_or(0, |r| r.ceil() as u64),
        direction: Direction::BenchReverse,
        streams: cfg.streams,
        block_size: cfg.block_size,
        flags: cfg.flags() & REQ_ENCRYPT | if verify { REQ_VERIFY } else { 0 },
        path: String::new(),
        time_ms: time.as_millis() as u64,
    };
    let (mut ctl, streams, keys, _) = open_session(cfg, req, plan.len(), &mut |_, _| Ok(()))?;
    let check = FrameCheck {
        key: crate::protocol::seal::frame_key(&keys),
        open: cfg.encrypt.then_some((keys, SealDirection::ServerToClient)),
    };
    let (data, mut report) = drive(
        cfg,
        Expect::test(time, false),
        &streams,
        interrupt,
        obs,
        |counters, _stop| {
            let plan = lanes::place_streams(plan.len(), &fds_of(&streams));
            let progress = |b: u64| counters.add(b, 0);
            discard_on_lanes(&plan, &streams, rxs, &check, &progress)
        },
    );
    report.command = "bench --net --reverse";
    Ok(conclude(&mut ctl, report, data.map(|(_, lanes)| lanes)))
}

/// A bench's report once its data ended: failed as the lanes did, or with
/// their reports and the peer's confirmation.
fn conclude(
    ctl: &mut Control,
    mut report: SendReport,
    lanes: Result<Vec<LaneReport>, SessionError>,
) -> SendReport {
    match lanes {
        Ok(lanes) => {
            report.lanes = lanes;
            confirm_bench(ctl, &mut report);
        }
        Err(e) => report.fail(&e, false),
    }
    report
}

/// Receive bench frames on every stream, each lane on its share with its
/// own receiver (`rxs[k]` for lane `k`), until all end (see
/// [`discard_frames`]); the bytes in all and each lane's report.
pub(crate) fn discard_on_lanes(
    plan: &[Lane],
    streams: &[TcpStream],
    rxs: Vec<NetReceiver>,
    check: &FrameCheck,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(u64, Vec<LaneReport>), SessionError> {
    let fds = fds_of(streams);
    let failed = AtomicBool::new(false);
    let results = lanes::run(plan, rxs, &|lane, rx| {
        let others = lanes::StopOthers(&failed);
        let fds = lane.fds(&fds);
        others.on(discard_frames(lane, &failed, &fds, rx, check, progress))
    });
    let (bytes, mut reports) = lanes::all_ok(results)?;
    for (r, &b) in reports.iter_mut().zip(&bytes) {
        r.bytes = b;
    }
    Ok((bytes.iter().sum(), reports))
}

/// Receive bench frames on a lane's streams (`fds`) until all end or
/// another lane `failed`: check each as `check` says (a checksum under its
/// key, unless the frame says it carries none), count and discard.
fn discard_frames(
    lane: &Lane,
    failed: &AtomicBool,
    fds: &[i32],
    mut rx: NetReceiver,
    check: &FrameCheck,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<u64, SessionError> {
    let (key, open) = (&check.key, &check.open);
    use crate::datapath::net::{payload, RecvEvent};
    rx.number_streams(&lane.streams);
    rx.start(fds)?;
    if let Some((keys, dir)) = open {
        rx.open_with(keys, *dir);
    }
    let mut bytes = 0u64;
    let mut frames = Vec::with_capacity(fds.len());
    // A wait ends within this, so a lane notices another's failure.
    rx.set_wait_limit(Duration::from_millis(100));
    while rx.open() && !failed.load(Ordering::Acquire) {
        let mut failure = None;
        let polled = rx.poll(true, &mut |ev| match ev {
            RecvEvent::Frame { header, lease, .. } => frames.push((header, lease)),
            RecvEvent::Lost { stream, why } => {
                failure = Some((stream, why));
            }
            _ => {}
        });
        let mut failure = failure.map(|(stream, why)| {
            SessionError::io(format!("data stream {}", rx.stream_id(stream)), why)
        });
        let mut batch = 0u64;
        for (header, lease) in frames.drain(..) {
            if header.flags & FLAG_UNCHECKED == 0 {
                if let Err(e) = header.check_payload(key, payload(&lease, &header)) {
                    failure.get_or_insert(SessionError::local(ErrorCode::Malformed, e.to_string()));
                }
            }
            batch += u64::from(header.length);
            rx.give_back(lease);
        }
        polled?;
        bytes += batch;
        progress(batch);
        if let Some(e) = failure {
            return Err(e);
        }
    }
    Ok(bytes)
}

/// End a benchmark: the peer's summary must count the bytes this side
/// counted (sent or received); the run's time ends with it, and its rate
/// is what the peer had by the test's end.
fn confirm_bench(ctl: &mut Control, report: &mut SendReport) {
    let confirmed = recv_msg(ctl);
    report.close();
    if let Some(d) = report.data_elapsed {
        report.elapsed_s = d.as_secs_f64().max(1e-9);
        report.set_rate(report.bytes as f64 * 8.0 / report.elapsed_s);
    }
    report.rate_over_test();
    match confirmed {
        Ok(Message::Summary {
            bytes, ok: true, ..
        }) if bytes == report.bytes => {}
        Ok(Message::Summary { bytes, .. }) => {
            report.status = ErrorCode::Io.name();
            report.error = Some(format!(
                "the peer counted {bytes} bytes, this side {}",
                report.bytes
            ));
        }
        Ok(_) => {
            report.status = ErrorCode::Malformed.name();
            report.error = Some("unexpected message after the data".into());
        }
        Err(e) => {
            report.fail(&e, false);
        }
    }
}

/// Whether `sent` bytes since `start` are ahead of `--rate-limit`.
fn ahead_of(limit: Option<f64>, sent: u64, start: Instant) -> bool {
    limit.is_some_and(|r| sent as f64 > r * start.elapsed().as_secs_f64())
}

/// Random bytes in every buffer of a bench sender, once, before its clock
/// starts; each frame then scrambles a word per 512 bytes so no two frames
/// are alike.
pub(crate) fn fill_bench_buffers(tx: &mut NetSender) {
    let mut all = Vec::new();
    while let Some(mut l) = tx.take_buffer() {
        let at = all.len() as u64;
        fill_random(payload_mut(&mut l), 0xBE4C, at, 0);
        all.push(l);
    }
    for l in all {
        tx.give_back(l);
    }
}

/// A timed send of bench frames: how, for how long, and what it counts.
pub(crate) struct BenchRun<'a> {
    pub(crate) params: &'a PushParams,
    pub(crate) time: Duration,
    pub(crate) verify: bool,
    pub(crate) counters: &'a WorkerCounters,
    pub(crate) stop: &'a AtomicBool,
}

impl BenchRun<'_> {
    /// Send on every lane (`txs[k]` its sender, its buffers made by
    /// [`fill_bench_buffers`]) until the time is up; what the senders did,
    /// added up, and each lane's report.
    pub(crate) fn send(
        &self,
        plan: &[Lane],
        streams: &[TcpStream],
        txs: Vec<NetSender>,
    ) -> Result<(SendStats, Vec<LaneReport>), SessionError> {
        let fds = fds_of(streams);
        let share = plan.len() as f64;
        let plan = lanes::near_nic(plan, &fds);
        let failed = AtomicBool::new(false);
        let results = lanes::run(&plan, txs, &|lane, tx| {
            let others = lanes::StopOthers(&failed);
            others.on(self.lane(lane, &failed, &fds, share, tx))
        });
        let (stats, mut reports) = lanes::all_ok(results)?;
        for (r, s) in reports.iter_mut().zip(&stats) {
            r.bytes = s.bytes;
        }
        Ok((SendStats::sum(&stats), reports))
    }

    /// One lane: frames of incompressible data on its streams that take
    /// them, within its `1/share` of any rate limit.
    fn lane(
        &self,
        lane: &Lane,
        failed: &AtomicBool,
        all: &[i32],
        share: f64,
        mut tx: NetSender,
    ) -> Result<SendStats, SessionError> {
        let (cfg, counters) = (self.params, self.counters);
        tx.number_streams(&lane.streams);
        tx.start(&lane.fds(all))?;
        tx.publish_stream_bytes(counters.streams());
        if let Some((keys, dir)) = &cfg.seal {
            tx.seal_with(keys, *dir);
        }
        let limit = cfg.rate_limit_bytes_per_s.map(|r| r / share);
        let n = cfg.block_size as usize;
        let start = Instant::now();
        // Lanes' offsets differ, so no two frames of a run are alike.
        let mut offset = (lane.index as u64) << 48;
        let mut sent = 0u64;
        let mut next_stream = 0u32;
        while start.elapsed() < self.time
            && !self.stop.load(Ordering::Relaxed)
            && !failed.load(Ordering::Acquire)
        {
            let active = lane.active_of(counters.active_streams(all.len() as u32));
            if active == 0 || ahead_of(limit, sent, start) {
                // No stream of this lane may carry frames now (-P auto), or
                // no more queued than the limit allows: the run ends on time.
                tx.poll(false)?;
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            let mut lease = loop {
                match tx.take_buffer() {
                    Some(l) => break l,
                    None => tx.poll(true)?,
                }
            };
            let p = &mut payload_mut(&mut lease)[..n];
            scramble(p, 0xBE4C, offset, 0);
            let h = bench_header(&cfg.key, self.verify, offset, p);
            let to = loop {
                match tx.idle_stream(&mut next_stream, active) {
                    Some(s) => break s,
                    None => tx.poll(true)?,
                }
            };
            tx.queue(to, lease, &h);
            counters.add(n as u64, 1);
            tx.poll(false)?;
            if let Some((stream, why)) = tx.take_lost().pop() {
                let id = tx.stream_id(stream);
                return Err(SessionError::io(format!("data stream {id}"), why));
            }
            offset += n as u64;
            sent += n as u64;
        }
        tx.flush()?;
        Ok(tx.stats())
    }
}

/// A bench frame's header: checksummed when `verify`, else marked unchecked.
fn bench_header(key: &FrameKey, verify: bool, offset: u64, p: &[u8]) -> FrameHeader {
    if verify {
        return FrameHeader::for_payload(key, 0, offset, p, 0);
    }
    FrameHeader {
        flags: FLAG_UNCHECKED,
        file_index: 0,
        length: p.len() as u32,
        span: 0,
        offset,
        checksum: 0,
    }
}
