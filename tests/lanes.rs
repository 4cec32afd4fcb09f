//! Lanes: each side of a session runs its data path on several threads,
//! each pinned with a ring of its own and a share of the streams. Checked
//! from outside, as an admin would: the threads and rings in /proc, the CPU
//! each thread took, and the bytes that arrived.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::transfer::Daemon;
use crate::util::{json, stderr, urmove};

/// CPU ticks (user + system) of each thread of `pid` named `urmove-lane-*`.
fn lane_ticks(pid: u32) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        let comm = comm.trim().to_string();
        if !comm.starts_with("urmove-lane-") {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // Fields after the command's closing parenthesis: utime and stime
        // are the 12th and 13th.
        let rest = stat.rsplit_once(')').map_or("", |r| r.1);
        let f: Vec<&str> = rest.split_whitespace().collect();
        let tick = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
        out.push((comm, tick(11) + tick(12)));
    }
    out.sort();
    out
}

/// io_uring instances `pid` holds open.
fn rings(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().contains("io_uring"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// The most lane threads and rings `pid` had while `child` ran, and each
/// lane's CPU ticks at the last look.
fn watch_lanes(pid: u32, child: &mut Child) -> (usize, usize, Vec<(String, u64)>) {
    let (mut threads, mut most_rings, mut ticks) = (0, 0, Vec::new());
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() && start.elapsed() < Duration::from_secs(60) {
        let now = lane_ticks(pid);
        if now.len() >= threads {
            threads = now.len();
            ticks = now;
        }
        most_rings = most_rings.max(rings(pid));
        std::thread::sleep(Duration::from_millis(50));
    }
    (threads, most_rings, ticks)
}

/// No thread did more than `most` of the lanes' CPU.
fn assert_shared(ticks: &[(String, u64)], most: f64, what: &str) {
    let all: u64 = ticks.iter().map(|t| t.1).sum();
    assert!(all > 0, "{what}: the lanes took no CPU: {ticks:?}");
    for (name, t) in ticks {
        let share = *t as f64 / all as f64;
        assert!(
            share <= most,
            "{what}: {name} did {share:.2} of the data path's CPU: {ticks:?}"
        );
    }
}

/// The JSON report's lanes: every stream on exactly one lane, and each
/// lane's share of the CPU at most `most`.
fn assert_lanes_report(v: &serde_json::Value, lanes: usize, streams: u64, most: f64) {
    let l = v["lanes"]
        .as_array()
        .unwrap_or_else(|| panic!("no lanes: {v}"));
    assert_eq!(l.len(), lanes, "{v}");
    let mut every: Vec<u64> = l
        .iter()
        .flat_map(|x| {
            x["streams"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_u64().unwrap())
        })
        .collect();
    every.sort_unstable();
    assert_eq!(every, (0..streams).collect::<Vec<_>>(), "{v}");
    let ticks: Vec<(String, u64)> = l
        .iter()
        .enumerate()
        .map(|(k, x)| {
            (
                format!("lane {k}"),
                (x["cpu_s"].as_f64().unwrap() * 1e6) as u64,
            )
        })
        .collect();
    assert_shared(&ticks, most, "this side");
}

fn bench(d: &Daemon, extra: &[&str]) -> Child {
    urmove()
        .args(d.bench_net_args("127.0.0.1"))
        .args(["--time", "2s", "--json"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn bench_net_runs_each_side_on_two_lanes_with_a_ring_each() {
    let d = Daemon::start_full(&[], "127.0.0.1", Path::new("/var/tmp"), &["--lanes", "2"]);
    // Checksums (and seals) give both sides per-byte work to share.
    for extra in [
        &["-P", "4", "--lanes", "2", "--verify"][..],
        &["-P", "4", "--lanes", "2", "--encrypt"][..],
        &["-P", "4", "--lanes", "2", "--reverse", "--verify"][..],
        &["-P", "4", "--lanes", "2", "--reverse", "--encrypt"][..],
    ] {
        let mut child = bench(&d, extra);
        let (threads, rings, ticks) = watch_lanes(d.pid(), &mut child);
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{extra:?}: {}\n{}", stderr(&o), d.log());
        let v = json(&o);
        assert_eq!(v["status"], "ok", "{extra:?}: {v}");
        assert!(v["bytes"].as_u64().unwrap() > 0);
        // The daemon: two lane threads, each with its ring.
        assert_eq!(threads, 2, "{extra:?}: the daemon's lanes: {ticks:?}");
        assert!(rings >= 2, "{extra:?}: the daemon held {rings} rings");
        assert_shared(&ticks, 0.65, "the daemon");
        // This side: two lanes carrying the four streams between them.
        assert_lanes_report(&v, 2, 4, 0.65);
    }
}

#[test]
fn more_lanes_than_cores_and_one_lane_both_work() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let many = (cores + 1).to_string();
    let d = Daemon::start_full(&[], "127.0.0.1", Path::new("/var/tmp"), &["--lanes", &many]);
    let streams = (cores + 1) as u64;
    let p = streams.to_string();
    for (lanes, extra) in [
        (cores + 1, vec!["-P", &p, "--lanes", &many, "--verify"]),
        (
            cores + 1,
            vec!["-P", &p, "--lanes", &many, "--reverse", "--verify"],
        ),
        (1, vec!["-P", "3", "--lanes", "1", "--encrypt"]),
    ] {
        let mut child = bench(&d, &extra);
        let (threads, _, _) = watch_lanes(d.pid(), &mut child);
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "{extra:?}: {}\n{}", stderr(&o), d.log());
        let v = json(&o);
        assert_eq!(v["status"], "ok", "{extra:?}: {v}");
        let n = v["lanes"].as_array().unwrap().len();
        assert_eq!(n, lanes, "{extra:?}: {v}");
        // The daemon runs as many lanes as it may (its own --lanes,
        // capped by the session's streams).
        let want = (cores + 1).min(v["streams_opened"].as_u64().unwrap() as usize);
        assert_eq!(threads, want, "{extra:?}");
    }
}

#[test]
fn lanes_take_auto_or_a_count_and_refuse_anything_else() {
    let o = urmove()
        .args([
            "bench",
            "--net",
            "127.0.0.1",
            "--lanes",
            "0",
            "--key-file",
            "/nonexistent",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("give auto or a lane count from 1 to 64"),
        "{}",
        stderr(&o)
    );
    let o = urmove()
        .args([
            "recv",
            "--root",
            "/var/tmp",
            "--key-file",
            "/nonexistent",
            "--lanes",
            "many",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("give auto or a lane count"),
        "{}",
        stderr(&o)
    );
}
