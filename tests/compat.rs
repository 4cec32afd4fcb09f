//! Compatibility with the previous release: every release speaks the
//! previous release's protocol, as client and as daemon (docs/testing.md).
//! The previous release is built from this repository's history by
//! scripts/compat.sh (or named by URMOVE_PREVIOUS_BIN) and each scenario
//! runs both ways on loopback, each with its own daemon, port, key, state
//! directories and roots: the old client against this build's daemon, and
//! this build's client against the old daemon. The scenarios: a push killed
//! with SIGKILL mid-transfer and run again (it resumes, and every byte
//! arrives), a pull, `bench --net` both directions, the UDP test both
//! directions, and dry runs of a send and of a pull that list what would
//! move and write nothing.
//!
//! All are ignored by default (they build a release, a few minutes on a
//! small host); CI runs them with the other ignored tests, and a previous
//! release that cannot be found or built fails them, never skips them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::transfer::{assert_same_tree, make_tree, no_part_files, Daemon};
use crate::util::{json, noise, output_within, stderr, stdout, urmove_at};

/// The previous release's urmove: URMOVE_PREVIOUS_BIN, or what
/// scripts/compat.sh builds (once per test process).
fn previous_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("URMOVE_PREVIOUS_BIN") {
            let bin = PathBuf::from(bin);
            assert!(
                bin.is_file(),
                "URMOVE_PREVIOUS_BIN={} is no file",
                bin.display()
            );
            return bin;
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/compat.sh");
        // Its progress (and the build's) goes to the test's stderr.
        let o = Command::new(&script)
            .arg("--print-bin")
            .stderr(Stdio::inherit())
            .output()
            .expect("running scripts/compat.sh");
        assert!(
            o.status.success(),
            "scripts/compat.sh could not build the previous release (its reasons above); \
             the compatibility tests need it (or URMOVE_PREVIOUS_BIN)"
        );
        let bin = PathBuf::from(String::from_utf8(o.stdout).unwrap().trim());
        assert!(bin.is_file(), "scripts/compat.sh printed {}", bin.display());
        bin
    })
}

fn current_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_urmove"))
}

/// Which build plays which part.
#[derive(Clone, Copy, Debug)]
enum Way {
    OldClientNewDaemon,
    NewClientOldDaemon,
}

/// A daemon of one build on loopback and the client of the other, with
/// a state directory of its own.
struct Peers {
    way: Way,
    d: Daemon,
    client: &'static Path,
    state: tempfile::TempDir,
}

impl Peers {
    fn start(way: Way, daemon_extra: &[&str]) -> Peers {
        let (client, daemon) = match way {
            Way::OldClientNewDaemon => (previous_bin(), current_bin()),
            Way::NewClientOldDaemon => (current_bin(), previous_bin()),
        };
        Peers {
            way,
            d: Daemon::start_bin(daemon, daemon_extra),
            client,
            state: tempfile::tempdir_in("/var/tmp").unwrap(),
        }
    }

    /// `urmove send` or `pull` of the client, with the daemon's port and key
    /// and the client's state directory.
    fn transfer(&self, sub: &str) -> Command {
        let mut c = urmove_at(self.client);
        c.args([sub, "-p", &self.d.port.to_string(), "--key-file"])
            .arg(&self.d.key)
            .arg("--state-dir")
            .arg(self.state.path());
        c
    }

    /// `urmove bench --net 127.0.0.1` of the client against the daemon.
    fn bench(&self, extra: &[&str]) -> Output {
        let mut c = urmove_at(self.client);
        c.args(self.d.bench_net_args("127.0.0.1")).args(extra);
        self.run(c)
    }

    /// Run `c` to its end (at most two minutes: a bound against hangs).
    fn run(&self, c: Command) -> Output {
        output_within(c, Duration::from_secs(120))
    }

    /// What went wrong, with the daemon's log, for an assertion.
    fn why(&self, o: &Output) -> String {
        format!(
            "{:?}: exit {:?}\nstdout: {}\nstderr: {}\ndaemon: {}",
            self.way,
            o.status.code(),
            stdout(o),
            stderr(o),
            self.d.log()
        )
    }
}

/// Paths and sizes of every entry under `root`, with their mtimes and
/// ctimes to the nanosecond: equal before and after a run that writes
/// nothing.
fn snapshot(root: &Path) -> Vec<(PathBuf, u64, i64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let mut all = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let m = std::fs::symlink_metadata(&path).unwrap();
            if m.is_dir() {
                dirs.push(path.clone());
            }
            all.push((path, m.len(), m.mtime_nsec(), m.ctime(), m.ctime_nsec()));
        }
    }
    all.sort();
    all
}

/// The files a dry run's JSON says would be sent.
fn to_send(v: &serde_json::Value) -> Vec<String> {
    let mut out: Vec<String> = v["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("no entries: {v}"))
        .iter()
        .filter(|e| e["kind"] == "file" && e["action"] == "send")
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    out.sort();
    out
}

/// Wait (at most a minute) until `ready` holds while `child` runs;
/// panics when `child` ends first.
fn while_running(child: &mut Child, what: &str, ready: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(60);
    while !ready() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended ({status}) before {what}");
        }
        assert!(Instant::now() < until, "no {what} within a minute");
        std::thread::sleep(Duration::from_millis(20));
    }
}

const BIG: usize = 96 << 20;

/// A tree of several files (make_tree's six, a link and an empty
/// directory) and one of 96 MiB, pushed at 32 MB/s and killed with SIGKILL
/// once the daemon journaled part of the big file; the same command again
/// resumes (less crosses than the whole, the part continued) and every
/// file arrives identical.
fn push_resumes_after_a_kill(way: Way) {
    let p = Peers::start(way, &[]);
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = make_tree(src.path());
    std::fs::write(top.join("big.dat"), noise(BIG, 38)).unwrap();
    let push = || {
        let mut c = p.transfer("send");
        c.args(["--json", "-P", "2", "--block", "1M", "--rate-limit", "32MB"])
            .arg(&top)
            .arg("127.0.0.1:in");
        c
    };
    let mut first = push()
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let dest = p.d.root.path().join("in/run42");
    let journal = dest.join("big.dat.urmove.journal");
    while_running(&mut first, "the daemon journaled part of big.dat", || {
        journal.exists()
    });
    std::thread::sleep(Duration::from_millis(300));
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(
        !dest.join("big.dat").exists(),
        "{way:?}: big.dat committed before the kill (nothing left to resume)"
    );
    // The daemon sees the connections reset and ends the session.
    std::thread::sleep(Duration::from_secs(2));

    let o = p.run(push());
    assert!(o.status.success(), "{}", p.why(&o));
    let v = json(&o);
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(
        v["files_continued"], 1,
        "{way:?}: the part not continued: {v}"
    );
    let (sent, total) = (
        v["bytes"].as_u64().unwrap(),
        v["bytes_total"].as_u64().unwrap(),
    );
    assert!(total >= BIG as u64, "{v}");
    assert!(
        sent < total && v["bytes_skipped"].as_u64().unwrap() > 0,
        "{way:?}: the second run sent everything again: {v}"
    );
    assert_same_tree(&top, &dest);
    assert!(no_part_files(p.d.root.path()), "{way:?}: part files left");
}

/// A tree on the daemon, pulled whole and identical.
fn pull_a_tree(way: Way) {
    let p = Peers::start(way, &[]);
    let top = make_tree(p.d.root.path());
    std::fs::write(top.join("a/mid.dat"), noise(9 << 20, 41)).unwrap();
    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    let mut c = p.transfer("pull");
    c.args(["--json", "-P", "3", "--block", "1M", "127.0.0.1:run42"])
        .arg(local.path());
    let o = p.run(c);
    assert!(o.status.success(), "{}", p.why(&o));
    let v = json(&o);
    assert_eq!(
        (&v["command"], &v["status"]),
        (&"pull".into(), &"ok".into())
    );
    assert_eq!(v["files_verified"], 7, "{v}");
    assert_same_tree(&top, &local.path().join("run42"));
    assert!(no_part_files(local.path()), "{way:?}: part files left");
}

/// `bench --net` for a second, forward and `--reverse`.
fn bench_net_both_directions(way: Way) {
    let p = Peers::start(way, &[]);
    for reverse in [false, true] {
        let mut args = vec!["-P", "2", "--time", "1s", "--json"];
        args.extend(reverse.then_some("--reverse"));
        let o = p.bench(&args);
        assert!(o.status.success(), "{args:?}: {}", p.why(&o));
        let v = json(&o);
        assert_eq!(v["status"], "ok", "{v}");
        let want = if reverse {
            "bench --net --reverse"
        } else {
            "bench --net"
        };
        assert_eq!(v["command"], want, "{v}");
        assert!(v["bytes"].as_u64().unwrap() > 0, "{way:?}: {v}");
        assert!(v["rate_bits_per_s"].as_f64().unwrap() > 0.0, "{way:?}: {v}");
    }
    assert_eq!(std::fs::read_dir(p.d.root.path()).unwrap().count(), 0);
}

/// The UDP test (a daemon started with `--udp`) for a second, forward and
/// `--reverse`: datagrams counted on the receiving side.
fn udp_test_both_directions(way: Way) {
    let p = Peers::start(way, &["--udp"]);
    for reverse in [false, true] {
        let mut args = vec![
            "--udp", "--rate", "100Mbit", "--size", "1200", "--time", "1s", "--json",
        ];
        args.extend(reverse.then_some("--reverse"));
        let o = p.bench(&args);
        assert!(o.status.success(), "{args:?}: {}", p.why(&o));
        let v = json(&o);
        let want = if reverse {
            "bench --net --udp --reverse"
        } else {
            "bench --net --udp"
        };
        assert_eq!(v["command"], want, "{v}");
        let s = &v["summary"];
        assert!(s["sent"].as_u64().unwrap() > 0, "{way:?}: {v}");
        assert!(s["received"].as_u64().unwrap() > 0, "{way:?}: {v}");
    }
}

/// After a push and a pull, the source changes (one file rewritten, one
/// new): `send -n` and `pull -n` list those two as what would move, exit
/// 0, and neither side changes.
fn dry_runs_list_what_would_move(way: Way) {
    let p = Peers::start(way, &[]);
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = make_tree(src.path());
    let send = |extra: &[&str]| {
        let mut c = p.transfer("send");
        c.args(extra).arg(&top).arg("127.0.0.1:in");
        p.run(c)
    };
    let o = send(&[]);
    assert!(o.status.success(), "{}", p.why(&o));
    std::fs::write(top.join("f2"), b"rewritten, another size").unwrap();
    std::fs::write(top.join("new.dat"), noise(70_000, 42)).unwrap();
    let want = ["run42/f2", "run42/new.dat"];
    let before = snapshot(p.d.root.path());
    for extra in [&["-n"][..], &["-n", "--json"]] {
        let o = send(extra);
        assert!(o.status.success(), "{extra:?}: {}", p.why(&o));
        if extra.contains(&"--json") {
            let v = json(&o);
            assert_eq!(v["status"], "dry-run", "{v}");
            assert_eq!(to_send(&v), want, "{way:?}: {v}");
        } else {
            let out = stdout(&o);
            assert!(want.iter().all(|w| out.contains(w)), "{way:?}: {out}");
            assert!(!out.contains("run42/f4"), "unchanged, listed: {out}");
        }
        assert_eq!(
            snapshot(p.d.root.path()),
            before,
            "{way:?}: the daemon's side changed"
        );
    }

    // The pull's side: this side holds the daemon's tree as it was.
    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    let pull = |extra: &[&str]| {
        let mut c = p.transfer("pull");
        c.args(extra).arg("127.0.0.1:in/run42").arg(local.path());
        p.run(c)
    };
    let o = pull(&[]);
    assert!(o.status.success(), "{}", p.why(&o));
    let held = p.d.root.path().join("in/run42");
    std::fs::write(held.join("f2"), b"changed on the daemon").unwrap();
    std::fs::write(held.join("new.dat"), noise(80_000, 43)).unwrap();
    let (here, there) = (snapshot(local.path()), snapshot(p.d.root.path()));
    for extra in [&["-n"][..], &["-n", "--json"]] {
        let o = pull(extra);
        assert!(o.status.success(), "{extra:?}: {}", p.why(&o));
        if extra.contains(&"--json") {
            let v = json(&o);
            assert_eq!(v["command"], "pull", "{v}");
            assert_eq!(to_send(&v), want, "{way:?}: {v}");
        } else {
            let out = stdout(&o);
            assert!(want.iter().all(|w| out.contains(w)), "{way:?}: {out}");
        }
        assert_eq!(snapshot(local.path()), here, "{way:?}: this side changed");
        assert_eq!(
            snapshot(p.d.root.path()),
            there,
            "{way:?}: the daemon's side changed"
        );
    }
}

#[test]
#[ignore = "builds the previous release (scripts/compat.sh); run with --ignored, as CI does"]
fn push_resumes_after_a_kill_old_client_new_daemon() {
    push_resumes_after_a_kill(Way::OldClientNewDaemon);
}

#[test]
#[ignore = "builds the previous release (scripts/compat.sh); run with --ignored, as CI does"]
fn push_resumes_after_a_kill_new_client_old_daemon() {
    push_resumes_after_a_kill(Way::NewClientOldDaemon);
}

#[test]
#[ignore = "builds the previous release (scripts/compat.sh); run with --ignored, as CI does"]
fn pull_old_client_new_daemon() {
    pull_a_tree(Way::OldClientNewDaemon);
}

#[test]
#[ignore = "builds the previous release (scripts/compat.sh); run with --ignored, as CI does"]
fn pull_new_client_old_daemon() {
    pull_a_tree(Way::NewClientOldDaemon);
}

#[test]
#[ignore = "builds the previous release (scripts/compat.sh); run with --ignored, as CI does"]
fn bench_net_old_client_new_daemon() {
    bench_net_both_directions(Way::OldClientNewDaemon);
}

#[test]
#[ignore = "builds the previous release (scripts/compat.sh); run with --ignored, as CI does"]
fn bench_net_new_client_old_daemon() {
    bench_net_both_directions(Way::NewClientOldDaemon);
}

#[test]
#[ignore = "builds the previous release (scripts/compat.sh); run with --ignored, as CI does"]
fn udp_test_old_client_new_daemon() {
    udp_test_both_directions(Way::OldClientNewDaemon);
}

#[test]
#[ignore = "builds the previous release (scripts/compat.sh); run with --ignored, as CI does"]
fn udp_test_new_client_old_daemon() {
    udp_test_both_directions(Way::NewClientOldDaemon);
}

#[test]
#[ignore = "builds the previous release (scripts/compat.sh); run with --ignored, as CI does"]
fn dry_runs_old_client_new_daemon() {
    dry_runs_list_what_would_move(Way::OldClientNewDaemon);
}

#[test]
#[ignore = "builds the previous release (scripts/compat.sh); run with --ignored, as CI does"]
fn dry_runs_new_client_old_daemon() {
    dry_runs_list_what_would_move(Way::NewClientOldDaemon);
}

/// A feature only protocol 13 has (`urmove info`), asked of a 0.1.0
/// daemon: refused before any request, by name, with both releases and
/// what to upgrade; usage error (exit 2). The old daemon saw no request.
#[test]
#[ignore = "builds the previous release (scripts/compat.sh); run with --ignored, as CI does"]
fn a_new_only_feature_asked_of_the_old_daemon_is_refused_by_name() {
    let p = Peers::start(Way::NewClientOldDaemon, &[]);
    let mut c = urmove_at(p.client);
    c.args([
        "info",
        "127.0.0.1",
        "-p",
        &p.d.port.to_string(),
        "--key-file",
    ])
    .arg(&p.d.key);
    let o = p.run(c);
    assert_eq!(o.status.code(), Some(2), "{}", p.why(&o));
    let want = "the receiver runs urmove 0.1.0 (protocol 12), which cannot report its release, protocols and limits (urmove info): upgrade it to urmove 0.2.0 (protocol 13) or later";
    assert!(stderr(&o).contains(want), "{}", p.why(&o));
    assert!(!p.d.log().contains("session started"), "{}", p.why(&o));
    // The same client asks this build's daemon and is answered.
    let d = Daemon::start_bin(current_bin(), &["--max-streams", "5"]);
    let mut c = urmove_at(current_bin());
    c.args([
        "info",
        "127.0.0.1",
        "-p",
        &d.port.to_string(),
        "--json",
        "--key-file",
    ])
    .arg(&d.key);
    let o = p.run(c);
    assert!(o.status.success(), "{}", p.why(&o));
    let v = json(&o);
    assert_eq!(v["release"], env!("CARGO_PKG_VERSION"), "{v}");
    assert_eq!(
        (v["protocol_oldest"].as_u64(), v["protocol_newest"].as_u64()),
        (Some(12), Some(14)),
        "{v}"
    );
    assert_eq!(v["protocol_spoken"], 14, "{v}");
    assert_eq!(v["streams_max"], 5, "{v}");
}

/// A limit refused across releases reaches each client in the words it
/// reads: the old daemon's `StreamsRefused` lets this build's `-P 8` ask
/// again for what it takes, and this build's daemon tells an old client
/// its limit as protocol 12 says it (no `LimitRefused`, which 0.1.0 does
/// not know).
#[test]
#[ignore = "builds the previous release (scripts/compat.sh); run with --ignored, as CI does"]
fn a_limit_reaches_either_release_in_its_own_words() {
    for way in [Way::NewClientOldDaemon, Way::OldClientNewDaemon] {
        let p = Peers::start(way, &["--max-streams", "2"]);
        let src = tempfile::tempdir_in("/var/tmp").unwrap();
        let top = make_tree(src.path());
        let mut c = p.transfer("send");
        c.args(["-P", "8"]).arg(&top).arg("127.0.0.1:in");
        let o = p.run(c);
        assert!(!o.status.success(), "{}", p.why(&o));
        assert!(
            stderr(&o).contains("8 data streams asked, this daemon takes 1 to 2 per session"),
            "{}",
            p.why(&o)
        );
        // -P auto asks again with what the daemon takes.
        let mut c = p.transfer("send");
        c.arg(&top).arg("127.0.0.1:in");
        let o = p.run(c);
        assert!(o.status.success(), "{way:?}: {}", p.why(&o));
        assert_same_tree(&top, &p.d.root.path().join("in/run42"));
    }
}
