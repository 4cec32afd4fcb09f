//! `bench --net` on the daemon's side: frames taken and dropped, or sent
//! back (`--reverse`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::protocol::control::{Direction, ErrorCode, Message, REQ_ENCRYPT};

use super::connection::Session;
use super::progress::RecvProgress;
use super::pull::{daemon_push_params, pace_as_asked};
use super::streams::collect_streams;
use crate::protocol::seal::{frame_key, Direction as SealDirection};
use crate::session::link::conn::{send_msg, Control};
use crate::session::SessionError;

/// `bench --net` on the daemon's side: take frames on every stream, check
/// each checksum (unless unchecked), count and discard them; or, reversed,
/// send for the requested time. No disk is touched.
pub(super) fn bench_session(
    s: &mut Control,
    session: &Session<'_>,
    progress: &mut RecvProgress<'_>,
) -> Result<(u64, u64), SessionError> {
    let req = session.req;
    let reverse = req.direction == Direction::BenchReverse;
    let (time, verify) = if reverse {
        if req.time_ms > 24 * 3600 * 1000 {
            return Err(SessionError::local(
                ErrorCode::TooLarge,
                "bench --reverse: test longer than a day",
            ));
        }
        (
            Duration::from_millis(req.time_ms),
            req.has(crate::protocol::control::REQ_VERIFY),
        )
    } else {
        (Duration::ZERO, false)
    };
    let bytes = if reverse {
        bench_send_back(s, session, time, verify)?
    } else {
        bench_take(s, session, progress)?
    };
    bench_summary(s, bytes)?;
    Ok((0, bytes))
}

/// A test's end on the daemon: the bytes it moved, and no files.
pub(super) fn bench_summary(s: &mut Control, bytes: u64) -> Result<(), SessionError> {
    let ok = true;
    send_msg(
        s,
        &Message::Summary {
            files: 0,
            bytes,
            ok,
        },
    )
}

/// A reversed `bench --net` on the daemon: send on lanes for `time` (each
/// frame checksummed when `verify`); the bytes sent.
pub(super) fn bench_send_back(
    s: &mut Control,
    session: &Session<'_>,
    time: Duration,
    verify: bool,
) -> Result<u64, SessionError> {
    use crate::session::probe::bench_net::{bench_senders, fill_bench_buffers, BenchRun};
    let Session {
        req,
        buffers,
        keys,
        cfg,
        ..
    } = *session;
    // Rings and buffers before the streams connect (ready for their data).
    let params = daemon_push_params(req, buffers, keys, cfg);
    let (plan, mut txs) = session.register(|n| {
        bench_senders(
            cfg.lanes,
            req.streams,
            req.streams,
            n,
            req.block_size,
            params.zerocopy,
        )
    })?;
    txs.iter_mut().for_each(fill_bench_buffers);
    let streams = collect_streams(s, session)?;
    pace_as_asked(req, &streams)?;
    let counters = crate::coord::WorkerCounters::default();
    let stop = AtomicBool::new(false);
    let bench = BenchRun {
        params: &params,
        time,
        verify,
        counters: &counters,
        stop: &stop,
    };
    bench.send(&plan, &streams, txs)?;
    for st in &streams {
        let _ = st.shutdown(std::net::Shutdown::Write);
    }
    Ok(counters.snapshot().0)
}

/// `bench --net` on the daemon: take frames on lanes, check each (unless
/// unchecked), count them in the session's log and metrics and discard
/// them, until the streams end; the bytes taken.
pub(super) fn bench_take(
    s: &mut Control,
    session: &Session<'_>,
    progress: &mut RecvProgress<'_>,
) -> Result<u64, SessionError> {
    use crate::session::probe::bench_net::{bench_receivers, discard_on_lanes};
    use crate::session::sink::landing::FrameCheck;
    let Session { req, keys, cfg, .. } = *session;
    // Rings and buffers before the streams connect (ready for their data).
    let (plan, rxs) =
        session.register(|n| bench_receivers(cfg.lanes, req.streams, n, req.block_size))?;
    let streams = collect_streams(s, session)?;
    let check = FrameCheck {
        key: frame_key(keys),
        open: req
            .has(REQ_ENCRYPT)
            .then(|| (keys.clone(), SealDirection::ClientToServer)),
    };
    let plan = crate::session::link::lanes::place_streams(
        plan.len(),
        &crate::session::link::streams::fds_of(&streams),
    );
    let counted = AtomicU64::new(0);
    let count = |b: u64| {
        counted.fetch_add(b, Ordering::Relaxed);
    };
    let mut logged = 0;
    let taken = std::thread::scope(|scope| {
        let lanes = scope.spawn(|| discard_on_lanes(&plan, &streams, rxs, &check, &count));
        while !lanes.is_finished() {
            std::thread::sleep(crate::session::link::lanes::WATCH_EVERY);
            let now = counted.load(Ordering::Relaxed);
            progress.add(now - logged);
            logged = now;
        }
        let r = lanes.join().expect("the lanes' thread panicked");
        progress.add(counted.load(Ordering::Relaxed) - logged);
        r
    })?;
    Ok(taken.0)
}
