//! Lanes: one session's data path on several threads.
//!
//! A lane is a thread, pinned to a core, that owns one ring, its own
//! registered buffers and a share of the session's data streams, and does
//! every per-byte step of its buffers itself (fill or read, checksum,
//! seal, send; or receive, open, verify, write): no buffer crosses a
//! thread. The session's own thread (the control plane: handshake,
//! acknowledgements, the coordinator) sees lanes only through the shared
//! counters and what each lane returns.
//!
//! Each side chooses its lane count alone: `--lanes N`, or `auto`, the
//! cores this process may run on (its affinity mask), both capped by the
//! stream count and by the buffers (each lane needs its own few).

use std::time::Duration;

use crate::datapath::{sys, topology};

use crate::session::SessionError;

/// Lanes one side of a session runs at most.
pub const LANES_MAX: u16 = 64;

/// `--lanes N|auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lanes {
    /// One lane per core this process may run on.
    #[default]
    Auto,
    /// This many (1 to [`LANES_MAX`]).
    Count(u16),
}

impl std::fmt::Display for Lanes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lanes::Auto => f.write_str("auto"),
            Lanes::Count(n) => write!(f, "{n}"),
        }
    }
}

/// One lane's share of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lane {
    pub index: usize,
    /// The session's numbers of the streams this lane carries, ascending.
    pub streams: Vec<u32>,
    /// The core the lane is pinned to (`None`: it runs where the kernel
    /// puts it, as a single lane does).
    pub cpu: Option<usize>,
}

impl Lane {
    /// Of the session's first `active` streams, how many are this lane's
    /// (its first that many streams: its numbers ascend).
    pub fn active_of(&self, active: u32) -> u32 {
        self.streams.iter().filter(|&&s| s < active).count() as u32
    }

    /// This lane's streams' descriptors, out of every stream's.
    pub fn fds(&self, all: &[i32]) -> Vec<i32> {
        self.streams.iter().map(|&s| all[s as usize]).collect()
    }
}

/// What one lane did, for the report: where it ran, what it carried and
/// the CPU it took.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct LaneReport {
    pub cpu: Option<usize>,
    pub streams: Vec<u32>,
    pub cpu_s: f64,
    /// Bytes the lane carried (frames sent, or payload received).
    pub bytes: u64,
}

/// How many lanes a side runs for `streams` streams and `buffers` frame
/// buffers: `lanes` (auto: the usable cores), at most one per stream and
/// at least [`crate::session::BUFFERS_MIN`] buffers each.
pub fn count(lanes: Lanes, streams: usize, buffers: usize) -> usize {
    let want = match lanes {
        Lanes::Auto => topology::usable_cpus().len().max(1),
        Lanes::Count(n) => usize::from(n.clamp(1, LANES_MAX)),
    };
    want.min(streams.max(1))
        .min((buffers / crate::session::BUFFERS_MIN).max(1))
}

/// `count` lanes for `streams` streams, pinned round robin over `cpus`
/// (a single lane is not pinned). Lane `k` carries as many streams as
/// every `count`-th stream from `k` would be; which ones: a stream goes to
/// a lane on the core its packets arrive on (`incoming`, the receiver's
/// `SO_INCOMING_CPU`) while that lane has room, the rest in order.
pub fn place(
    count: usize,
    streams: usize,
    cpus: &[usize],
    incoming: &[Option<usize>],
) -> Vec<Lane> {
    let count = count.clamp(1, streams.max(1));
    let mut lanes: Vec<Lane> = (0..count)
        .map(|k| Lane {
            index: k,
            streams: Vec::with_capacity(streams / count + 1),
            cpu: (count > 1 && !cpus.is_empty()).then(|| cpus[k % cpus.len()]),
        })
        .collect();
    let room = |k: usize| (streams + count - 1 - k) / count;
    let mut left = Vec::new();
    for s in 0..streams {
        let near = incoming.get(s).copied().flatten().and_then(|c| {
            (0..count).find(|&k| lanes[k].cpu == Some(c) && lanes[k].streams.len() < room(k))
        });
        match near {
            Some(k) => lanes[k].streams.push(s as u32),
            None => left.push(s as u32),
        }
    }
    let mut k = 0;
    for s in left {
        while lanes[k].streams.len() >= room(k) {
            k = (k + 1) % count;
        }
        lanes[k].streams.push(s);
        k = (k + 1) % count;
    }
    for l in &mut lanes {
        l.streams.sort_unstable();
    }
    lanes
}

/// The lanes of a side that has no streams yet (their count is what
/// matters: placement by incoming core comes with [`place_streams`]).
pub fn plan(count: usize, streams: usize) -> Vec<Lane> {
    place(count, streams, &topology::usable_cpus(), &[])
}

/// The lanes for connected `streams` of a receiver: pinned near their
/// NIC first, each stream placed by the core its packets arrive on; as
/// many streams per lane as [`plan`] gave.
pub fn place_streams(count: usize, fds: &[i32]) -> Vec<Lane> {
    let incoming: Vec<Option<usize>> = fds.iter().map(|&fd| topology::incoming_cpu(fd)).collect();
    let cpus = fds
        .first()
        .map_or_else(topology::usable_cpus, |&fd| topology::cpus_near(fd));
    place(count, fds.len(), &cpus, &incoming)
}

/// A sender's lanes, now that its streams are connected: pinned to the
/// cores near the NIC they run over first (its interrupt cores, else its
/// NUMA node's), then the rest; the streams stay as planned.
pub fn near_nic(plan: &[Lane], fds: &[i32]) -> Vec<Lane> {
    let mut lanes = plan.to_vec();
    if lanes.len() < 2 {
        return lanes;
    }
    let cpus = fds
        .first()
        .map_or_else(topology::usable_cpus, |&fd| topology::cpus_near(fd));
    if !cpus.is_empty() {
        for l in &mut lanes {
            l.cpu = Some(cpus[l.index % cpus.len()]);
        }
    }
    lanes
}

/// The lanes of a side that has no streams yet, for `streams` streams
/// (`carrying` of them carry data from the start: each lane needs one) and
/// `buffers` frame buffers, and each lane's data path made now by
/// `make(its stream count, its buffers)` (registering its buffers before
/// any peer is contacted).
pub fn prepare<T>(
    want: Lanes,
    streams: u16,
    carrying: u16,
    buffers: usize,
    make: impl Fn(usize, usize) -> Result<T, crate::datapath::Error>,
) -> Result<(Vec<Lane>, Vec<T>), SessionError> {
    let n = count(want, usize::from(carrying), buffers);
    let lanes = plan(n, usize::from(streams));
    let made = lanes
        .iter()
        .zip(split_buffers(buffers, n))
        .map(|(lane, b)| make(lane.streams.len(), b))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((lanes, made))
}

/// `total` buffers shared by `lanes` lanes, as evenly as they go.
pub fn split_buffers(total: usize, lanes: usize) -> Vec<usize> {
    let lanes = lanes.max(1);
    (0..lanes)
        .map(|k| total / lanes + usize::from(k < total % lanes))
        .collect()
}

/// Run `work` for every lane, each on its own thread pinned to its core,
/// with its part (`parts[k]` for lane `k`), and wait for all: the results
/// in lane order, each with the lane's report. A single lane runs on the
/// calling thread, as a session always did.
pub fn run<T: Send, R: Send>(
    lanes: &[Lane],
    parts: Vec<T>,
    work: &(dyn Fn(&Lane, T) -> R + Sync),
) -> Vec<(R, LaneReport)> {
    assert_eq!(lanes.len(), parts.len(), "a part per lane");
    if lanes.len() == 1 {
        let start = sys::thread_cpu_time();
        let part = parts.into_iter().next().expect("a part");
        let (r, mut report) = on_lane(&lanes[0], part, work);
        report.cpu_s -= start.as_secs_f64();
        return vec![(r, report)];
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = lanes
            .iter()
            .zip(parts)
            .map(|(lane, part)| spawn(scope, lane, part, work).expect("spawning a lane thread"))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a lane panicked"))
            .collect()
    })
}

/// Start `work` for `lane` with its part on a thread of its own in
/// `scope` (named `urmove-lane-K`, pinned to the lane's core), for a
/// caller that does more while its lanes run.
pub fn spawn<'scope, T: Send + 'scope, R: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    lane: &'scope Lane,
    part: T,
    work: &'scope (dyn Fn(&Lane, T) -> R + Sync),
) -> std::io::Result<std::thread::ScopedJoinHandle<'scope, (R, LaneReport)>> {
    std::thread::Builder::new()
        .name(format!("urmove-lane-{}", lane.index))
        .spawn_scoped(scope, move || on_lane(lane, part, work))
}

/// `work` on this thread for `lane`, pinned to its core if it has one;
/// the report's CPU time is this thread's so far.
fn on_lane<T, R>(lane: &Lane, part: T, work: &(dyn Fn(&Lane, T) -> R + Sync)) -> (R, LaneReport) {
    let pinned = lane.cpu.filter(|&c| topology::pin_to(c));
    let r = work(lane, part);
    let report = LaneReport {
        cpu: pinned,
        streams: lane.streams.clone(),
        cpu_s: sys::thread_cpu_time().as_secs_f64(),
        bytes: 0,
    };
    (r, report)
}

/// A lane's stop on the others: its work sets the flag when it fails,
/// and this guard when it panics, so the other lanes stop instead of
/// running on (or waiting) for nothing.
pub struct StopOthers<'a>(pub &'a std::sync::atomic::AtomicBool);

impl StopOthers<'_> {
    /// Pass `r` on; a failure stops the other lanes.
    pub fn on<T, E>(&self, r: Result<T, E>) -> Result<T, E> {
        if r.is_err() {
            self.0.store(true, std::sync::atomic::Ordering::Release);
        }
        r
    }
}

impl Drop for StopOthers<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, std::sync::atomic::Ordering::Release);
        }
    }
}

/// The first lane's error, if any, else every lane's result.
pub fn all_ok<R>(
    results: Vec<(Result<R, SessionError>, LaneReport)>,
) -> Result<(Vec<R>, Vec<LaneReport>), SessionError> {
    let mut ok = Vec::with_capacity(results.len());
    let mut reports = Vec::with_capacity(results.len());
    for (r, rep) in results {
        ok.push(r?);
        reports.push(rep);
    }
    Ok((ok, reports))
}

/// How often a watcher of running lanes looks.
pub const WATCH_EVERY: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_dealt_evenly_and_lanes_pinned_round_robin() {
        let lanes = place(2, 5, &[0, 1], &[]);
        assert_eq!(lanes[0].streams, vec![0, 2, 4]);
        assert_eq!(lanes[1].streams, vec![1, 3]);
        assert_eq!((lanes[0].cpu, lanes[1].cpu), (Some(0), Some(1)));
        // More lanes than cores share them; one lane is not pinned.
        let lanes = place(3, 3, &[4, 6], &[]);
        let cpus: Vec<_> = lanes.iter().map(|l| l.cpu).collect();
        assert_eq!(cpus, vec![Some(4), Some(6), Some(4)]);
        assert_eq!(place(1, 4, &[0, 1], &[])[0].cpu, None);
        // No more lanes than streams.
        assert_eq!(place(8, 2, &[0, 1], &[]).len(), 2);
    }

    #[test]
    fn a_stream_goes_to_the_lane_on_its_incoming_core_while_it_has_room() {
        // Streams 0..4 all arrive on core 1: lane 1 (on core 1) takes the
        // first two, lane 0 the rest; the shares stay two and two.
        let lanes = place(2, 4, &[0, 1], &[Some(1), Some(1), Some(1), Some(1)]);
        assert_eq!(lanes[1].streams, vec![0, 1]);
        assert_eq!(lanes[0].streams, vec![2, 3]);
        let lanes = place(2, 4, &[0, 1], &[Some(1), Some(0), None, Some(0)]);
        assert_eq!(lanes[0].streams, vec![1, 3]);
        assert_eq!(lanes[1].streams, vec![0, 2]);
        let mut every: Vec<u32> = lanes.iter().flat_map(|l| l.streams.clone()).collect();
        every.sort_unstable();
        assert_eq!(every, vec![0, 1, 2, 3]);
    }

    #[test]
    fn the_count_is_capped_by_streams_and_buffers() {
        assert_eq!(count(Lanes::Count(4), 2, 64), 2);
        assert_eq!(count(Lanes::Count(4), 8, 5), 2);
        assert_eq!(count(Lanes::Count(0), 8, 64), 1);
        assert!(count(Lanes::Auto, 64, 256) >= 1);
        assert_eq!(split_buffers(7, 3), vec![3, 2, 2]);
        assert_eq!(
            Lane {
                index: 0,
                streams: vec![1, 3, 5],
                cpu: None
            }
            .active_of(4),
            2
        );
    }

    #[test]
    fn this_hosts_own_addresses_are_told_from_others() {
        assert!(topology::is_this_host("127.0.0.1".parse().unwrap()));
        assert!(topology::is_this_host("::1".parse().unwrap()));
        // TEST-NET-1 is nobody's address: no socket binds to it here.
        assert!(!topology::is_this_host("192.0.2.1".parse().unwrap()));
    }

    #[test]
    fn lanes_run_on_their_own_threads_pinned_to_their_cores() {
        let cpus = topology::usable_cpus();
        if cpus.is_empty() {
            eprintln!("skipped: this host does not say which cores this process may use");
            return;
        }
        let lanes = place(2, 2, &cpus, &[]);
        let me = std::thread::current().id();
        let out = run(&lanes, vec![0u32, 1], &|lane, part| {
            let other = std::thread::current().id() != me;
            (lane.index as u32 == part, other, topology::current_cpu())
        });
        for ((ok, other, cpu), report) in out {
            assert!(
                ok && other,
                "each lane gets its part, on a thread of its own"
            );
            assert_eq!(cpu, report.cpu, "it runs on the core it was pinned to");
        }
    }
}
