//! What an admin with rsync habits expects: a cron job re-running the
//! same `send` moves nothing and says why, `--ignore-times` sends it all
//! again, a file changed behind urmove's back is sent again, and a file
//! another key holder committed under the same name, size and mtime is
//! never skipped unread.

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::faults::{free_bytes, make_run, tree_bytes};
use crate::transfer::{assert_same_tree, Daemon};
use crate::util::{json, stderr, stdout};

/// Bytes the daemon's process has read through syscalls so far (`rchar`
/// in /proc/PID/io: page cache reads count too).
fn read_chars(d: &Daemon) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{}/io", d.pid())).unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("rchar in /proc/PID/io")
}

#[test]
fn a_cron_rerun_moves_nothing_reads_nothing_and_says_why() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = make_run(src.path(), 24);
    let total = tree_bytes(&top);
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    let o = d.send(&["--json"], &args);
    let v = json(&o);
    assert_eq!(
        (v["status"].as_str(), v["bytes"].as_u64()),
        (Some("ok"), Some(total)),
        "{v}"
    );
    assert_eq!(v["files_verified"], 11, "{v}");
    let ino = |name: &str| {
        std::os::unix::fs::MetadataExt::ino(
            &std::fs::metadata(d.root.path().join("in/run").join(name)).unwrap(),
        )
    };
    let before = ino("big.dat");

    // The same command again, as cron runs it: nothing crosses, nothing is
    // read on the receiver, and the summary says what was skipped and why.
    let read_before = read_chars(&d);
    let o = d.send(&[], &args);
    assert!(o.status.success(), "{}", stderr(&o));
    let read = read_chars(&d) - read_before;
    assert!(
        read < total / 20,
        "the receiver read {read} of {total} bytes for a re-run"
    );
    let out = stdout(&o);
    assert!(
        out.contains("nothing to send: 11 files of")
            && out.contains("at the receiver: 11 files unchanged since an earlier run"),
        "{out}"
    );
    assert!(
        out.contains(
            "11 files unchanged since an earlier run (size, mtime and the receiver's stamp match)"
        ),
        "{out}"
    );
    assert!(out.contains("--ignore-times sends them again"), "{out}");
    assert_eq!(ino("big.dat"), before, "the file was replaced");
    let v = json(&d.send(&["--json"], &args));
    assert_eq!(v["bytes"], 0, "{v}");
    assert_eq!(v["bytes_skipped"], total, "{v}");
    assert_eq!(
        (v["files_unchanged"].as_u64(), v["files_verified"].as_u64()),
        (Some(11), Some(0))
    );

    // --ignore-times sends everything again; --resume is still accepted.
    let v = json(&d.send(&["--json", "-I"], &args));
    assert_eq!(
        (v["bytes"].as_u64(), v["files_verified"].as_u64()),
        (Some(total), Some(11))
    );
    let v = json(&d.send(&["--json", "--resume"], &args));
    assert_eq!(
        (v["bytes"].as_u64(), v["files_unchanged"].as_u64()),
        (Some(0), Some(11))
    );
    // --checksum reads both sides and calls them verified, not unchanged.
    let v = json(&d.send(&["--json", "--checksum"], &args));
    assert_eq!(
        (v["bytes"].as_u64(), v["files_verified"].as_u64()),
        (Some(0), Some(11))
    );
    assert_eq!(v["files_found_complete"], 11, "{v}");
    assert_same_tree(&top, &d.root.path().join("in/run"));
}

#[test]
fn a_file_changed_behind_urmoves_back_is_sent_again_on_a_rerun() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = make_run(src.path(), 2);
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    assert_eq!(json(&d.send(&["--json"], &args))["status"], "ok");
    // Past the stamp's settling time, s3 is changed in place on the
    // receiver and its mtime put back: size and mtime cannot see it.
    std::thread::sleep(Duration::from_secs(6));
    let theirs = d.root.path().join("in/run/s3");
    let mtime = std::fs::metadata(&theirs).unwrap().modified().unwrap();
    let mut bytes = std::fs::read(&theirs).unwrap();
    bytes[500] ^= 0xFF;
    std::fs::write(&theirs, &bytes).unwrap();
    let f = std::fs::File::options().write(true).open(&theirs).unwrap();
    f.set_times(std::fs::FileTimes::new().set_modified(mtime))
        .unwrap();
    let v = json(&d.send(&["--json"], &args));
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(v["files_unchanged"], 10, "{v}");
    assert_eq!(v["files_verified"], 1, "{v}");
    assert_eq!(
        v["bytes"],
        std::fs::metadata(top.join("s3")).unwrap().len(),
        "{v}"
    );
    assert_same_tree(&top, &d.root.path().join("in/run"));
}

#[test]
fn another_key_holders_file_of_the_same_name_size_and_mtime_is_never_skipped_unread() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let (mine, theirs) = (src.path().join("mine"), src.path().join("theirs"));
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    for (dir, byte) in [(&mine, b'm'), (&theirs, b't')] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("data.bin"), vec![byte; 300_000]).unwrap();
        let f = std::fs::File::options()
            .write(true)
            .open(dir.join("data.bin"))
            .unwrap();
        f.set_times(std::fs::FileTimes::new().set_modified(t))
            .unwrap();
    }
    // The other key holder is another client: its own state directory.
    let other_state = tempfile::tempdir_in("/var/tmp").unwrap();
    let file = |dir: &Path| dir.join("data.bin").to_str().unwrap().to_string();
    let o = d.send(
        &[
            "--json",
            "--state-dir",
            other_state.path().to_str().unwrap(),
        ],
        &[&file(&theirs), "127.0.0.1:shared/"],
    );
    assert_eq!(json(&o)["status"], "ok");
    let v = json(&d.send(&["--json"], &[&file(&mine), "127.0.0.1:shared/"]));
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(v["files_unchanged"], 0, "{v}");
    assert_eq!(v["files_verified"], 1, "{v}");
    let landed = std::fs::read(d.root.path().join("shared/data.bin")).unwrap();
    assert!(
        landed == vec![b'm'; 300_000],
        "the other key holder's bytes stayed"
    );
    // And now it is this client's: its re-run skips it unread.
    let v = json(&d.send(&["--json"], &[&file(&mine), "127.0.0.1:shared/"]));
    assert_eq!(
        (v["bytes"].as_u64(), v["files_unchanged"].as_u64()),
        (Some(0), Some(1))
    );
    // A third client with the same bytes: read, found complete, sent
    // nothing; then stamped for it, so its own re-run reads nothing.
    let third = tempfile::tempdir_in("/var/tmp").unwrap();
    let as_third = ["--json", "--state-dir", third.path().to_str().unwrap()];
    let v = json(&d.send(&as_third, &[&file(&mine), "127.0.0.1:shared/"]));
    assert_eq!(
        (v["bytes"].as_u64(), v["files_found_complete"].as_u64()),
        (Some(0), Some(1)),
        "{v}"
    );
    let v = json(&d.send(&as_third, &[&file(&mine), "127.0.0.1:shared/"]));
    assert_eq!(v["files_unchanged"], 1, "{v}");
}

#[test]
fn a_pull_run_again_fetches_nothing_and_says_why() {
    let d = Daemon::start();
    let top = make_run(&d.root.path().join("out"), 3);
    assert!(top.exists());
    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    let pull = |extra: &[&str]| {
        crate::util::urmove()
            .args(["pull", "-p", &d.port.to_string(), "--key-file"])
            .arg(&d.key)
            .args(extra)
            .args(["127.0.0.1:out/run", local.path().to_str().unwrap()])
            .output()
            .unwrap()
    };
    let v = json(&pull(&["--json"]));
    assert_eq!(
        (v["status"].as_str(), v["files_verified"].as_u64()),
        (Some("ok"), Some(11))
    );
    let o = pull(&[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("nothing to pull: 11 files of"), "{out}");
    assert!(
        out.contains("already here: 11 files unchanged since an earlier run"),
        "{out}"
    );
    let v = json(&pull(&["--json"]));
    assert_eq!(
        (v["bytes"].as_u64(), v["files_unchanged"].as_u64()),
        (Some(0), Some(11))
    );
    let v = json(&pull(&["--json", "--ignore-times"]));
    assert_eq!(v["bytes"].as_u64(), Some(tree_bytes(&top)), "{v}");
    assert_same_tree(&top, &local.path().join("run"));
}

/// Every name under `dir`, however deep.
fn names_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        out.push(p.display().to_string());
        if p.is_dir() && !p.is_symlink() {
            out.extend(names_under(&p));
        }
    }
    out
}

#[test]
fn what_the_receiver_has_no_room_for_is_refused_before_any_part_file_and_holes_need_none() {
    crate::require!(crate::util::can_loop("ext4"), "needs root and loop devices");
    let fs = crate::util::LoopFs::new("ext4", 96, 4096, false).unwrap();
    let d = Daemon::start_full(&[], "127.0.0.1", fs.path(), &[]);
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = make_run(src.path(), 24);
    // Leave 12 MiB free: the 24 MiB file cannot fit.
    let fill = free_bytes(fs.path()) - (12 << 20);
    std::fs::write(fs.path().join("filler"), vec![7u8; fill as usize]).unwrap();
    let o = d.send(&["--json"], &[top.to_str().unwrap(), "127.0.0.1:in"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["status"], "no_space", "{v}");
    let err = v["error"].as_str().unwrap();
    assert!(
        err.contains("need 26.")
            && err.contains("MiB) of data")
            && err.contains("MiB) free; nothing was written"),
        "the numbers: {err}"
    );
    let left = names_under(d.root.path());
    assert!(!left.iter().any(|n| n.contains(".urmove.")), "{left:?}");
    assert!(!d.root.path().join("in/run/big.dat").exists());

    // A sparse file of 200 MiB holding 1 MiB of data fits in the 12.
    let sparse = src.path().join("sparse.img");
    let f = std::fs::File::create(&sparse).unwrap();
    f.set_len(200 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &vec![9u8; 1 << 20], 100 << 20).unwrap();
    drop(f);
    let o = d.send(&["--json"], &[sparse.to_str().unwrap(), "127.0.0.1:in"]);
    assert_eq!(json(&o)["status"], "ok", "{}", stderr(&o));
    let got = std::fs::read(d.root.path().join("in/sparse.img")).unwrap();
    assert!(
        got == std::fs::read(&sparse).unwrap(),
        "the sparse file differs"
    );

    // A pull into a place without room: refused the same way, on this side.
    let far = Daemon::start();
    let top = make_run(&far.root.path().join("out"), 24);
    assert!(top.exists());
    let local = fs.path().join("local");
    let o = crate::util::urmove()
        .args(["pull", "-p", &far.port.to_string(), "--key-file"])
        .arg(&far.key)
        .args(["--json", "127.0.0.1:out/run", local.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["status"], "no_space", "{v}");
    let left = names_under(&local);
    assert!(!left.iter().any(|n| n.contains(".urmove.")), "{left:?}");
}

#[test]
fn stamped_files_swapped_by_renaming_their_directories_are_read_and_sent_again() {
    // Two files of the same size and mtime in two directories; a local
    // user of the root swaps the directories (no file's ctime moves).
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("t");
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    for (dir, byte) in [("a", b'a'), ("b", b'b')] {
        std::fs::create_dir_all(top.join(dir)).unwrap();
        let p = top.join(dir).join("x");
        std::fs::write(&p, vec![byte; 100_000]).unwrap();
        let f = std::fs::File::options().write(true).open(&p).unwrap();
        f.set_times(std::fs::FileTimes::new().set_modified(t))
            .unwrap();
    }
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    assert_eq!(json(&d.send(&["--json"], &args))["status"], "ok");
    let got = d.root.path().join("in/t");
    std::fs::rename(got.join("a"), got.join("c")).unwrap();
    std::fs::rename(got.join("b"), got.join("a")).unwrap();
    std::fs::rename(got.join("c"), got.join("b")).unwrap();
    let v = json(&d.send(&["--json"], &args));
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(v["files_unchanged"], 0, "{v}");
    for dir in ["a", "b"] {
        let theirs = std::fs::read(got.join(dir).join("x")).unwrap();
        assert!(
            theirs == std::fs::read(top.join(dir).join("x")).unwrap(),
            "{dir}/x holds the other's bytes"
        );
    }
}

/// `pull` takes the options `send` has: `--files-from` (paths under the
/// daemon's root), `--rate-limit` (kept by the daemon, which sends),
/// `--sock-buf` (this side's receive buffer) and `--plot`.
#[test]
fn pull_has_the_options_send_has() {
    let d = Daemon::start();
    let a = make_run(&d.root.path().join("a"), 8);
    std::fs::create_dir_all(d.root.path().join("b/c")).unwrap();
    std::fs::write(d.root.path().join("b/c/one"), b"one").unwrap();
    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    let list = local.path().join("list");
    std::fs::write(&list, "# what the night's run needs\n\nb/c\n").unwrap();
    let svg = local.path().join("pull.svg");
    let into = local.path().join("got");
    let o = crate::util::urmove()
        .args(["pull", "-p", &d.port.to_string(), "--json", "--key-file"])
        .arg(&d.key)
        .args(["--rate-limit", "40Mbit", "--sock-buf", "1M", "--files-from"])
        .arg(&list)
        .arg("--plot")
        .arg(&svg)
        .arg("127.0.0.1:a/run")
        .arg(&into)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    assert_same_tree(&a, &into.join("run"));
    assert_eq!(std::fs::read(into.join("c/one")).unwrap(), b"one");
    // The daemon kept the limit (a ceiling, with room for the first
    // burst of the window): the pull's rate is at most 40 Mbit/s and a bit.
    let rate = v["rate_bits_per_s"].as_f64().unwrap();
    assert!(
        rate < 40e6 * 1.3,
        "pulled at {rate} bit/s under --rate-limit 40Mbit: {v}"
    );
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(
        picture.contains("<svg") && picture.contains("pull from"),
        "{picture:.300}"
    );
    // Bad values are refused before anything runs.
    let o = crate::util::urmove()
        .args(["pull", "--rate-limit", "0MB", "--key-file"])
        .arg(&d.key)
        .args(["127.0.0.1:a", "/var/tmp/never"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--rate-limit must be above zero"));
}

/// `bench --net --reverse --rate-limit`: the daemon sends, so it keeps
/// the limit (it used to be refused).
#[test]
fn a_reversed_bench_keeps_its_rate_limit_on_the_daemon() {
    let d = Daemon::start();
    let o = crate::util::urmove()
        .args(d.bench_net_args("127.0.0.1"))
        .args([
            "--reverse",
            "--rate-limit",
            "80Mbit",
            "--time",
            "2s",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    let rate = v["rate_bits_per_s"].as_f64().unwrap();
    assert!(
        rate > 0.0 && rate < 80e6 * 1.3,
        "reversed at {rate} bit/s under 80Mbit: {v}"
    );
}

/// Thirty 1 MB files, for runs stopped part way.
fn thirty(parent: &Path) -> std::path::PathBuf {
    let top = parent.join("t30");
    std::fs::create_dir_all(&top).unwrap();
    for i in 0..30u64 {
        std::fs::write(
            top.join(format!("f{i:02}")),
            crate::util::noise(1_000_000, i),
        )
        .unwrap();
    }
    top
}

fn committed(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| {
        d.flatten()
            .filter(|e| !e.file_name().to_string_lossy().contains(".urmove."))
            .count()
    })
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill takes no memory; the pid is our own child's.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
}

/// Ctrl-C on a send: the summary says how far it got, how many files the
/// receiver holds committed (as many as are there), and the command that
/// continues it, which then finishes the tree.
#[test]
fn an_interrupted_send_says_what_is_done_and_how_to_continue() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = thirty(src.path());
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    let child = crate::faults::send_child(&d, d.port, &["--rate-limit", "80Mbit"], &args);
    crate::faults::wait_for_percent(&d, 30.0);
    signal(child.id(), libc::SIGINT);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    let done = committed(&d.root.path().join("in/t30"));
    assert!(done > 0 && done < 30, "{done} files committed");
    assert!(
        out.contains("stopped after") && out.contains("(interrupted): sent"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "{done} of 30 files committed and verified by the receiver, {} not finished",
            30 - done
        )),
        "{done} committed: {out}"
    );
    let again = format!(
        "run the same command again: {}",
        env!("CARGO_BIN_EXE_urmove")
    );
    assert!(
        out.contains(&again) && out.contains("--rate-limit 80Mbit"),
        "{out}"
    );
    assert!(!out.contains("0 of 30 files verified"), "{out}");
    let o = d.send(&[], &args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("{done} unchanged")),
        "{}",
        stdout(&o)
    );
    assert_same_tree(&top, &d.root.path().join("in/t30"));
}

/// A receiver told to stop (SIGTERM) while a push runs gives it its drain
/// time, then ends it saying why; the client says so, not "broken pipe".
#[test]
fn a_receiver_shutting_down_says_so_to_its_client() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = thirty(src.path());
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    // 30 MB at 8 Mbit/s outlasts the daemon's 10 s drain.
    let child = crate::faults::send_child(&d, d.port, &["--rate-limit", "8Mbit"], &args);
    crate::faults::wait_for_percent(&d, 3.0);
    signal(d.pid(), libc::SIGTERM);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(out.contains("(the daemon is shutting down)"), "{out}");
    assert!(out.contains("run the same command again"), "{out}");
    assert!(
        err.contains("the daemon ended the session: the daemon is shutting down"),
        "{err}"
    );
    assert!(
        !err.contains("Broken pipe") && !err.contains("lost"),
        "{err}"
    );
}

/// The same for a pull: the daemon sending stops after its drain time and
/// says why.
#[test]
fn a_daemon_shutting_down_under_a_pull_says_so() {
    let d = Daemon::start();
    let _top = thirty(d.root.path());
    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    let child = crate::util::urmove()
        .args([
            "pull",
            "-p",
            &d.port.to_string(),
            "--rate-limit",
            "8Mbit",
            "--key-file",
        ])
        .arg(&d.key)
        .arg("127.0.0.1:t30")
        .arg(local.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    signal(d.pid(), libc::SIGTERM);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("(the daemon is shutting down)"),
        "{} STDERR {} DLOG {}",
        stdout(&o),
        stderr(&o),
        d.log()
    );
    assert!(
        stderr(&o).contains("the daemon ended the session"),
        "{}",
        stderr(&o)
    );
}

/// A tree with a sparse file: progress counts its data, not its holes, so
/// the last interval reaches the total (the data) on a push and a pull.
#[test]
fn progress_counts_data_not_holes_on_push_and_pull() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("sp");
    std::fs::create_dir_all(&top).unwrap();
    let f = std::fs::File::create(top.join("sparse")).unwrap();
    f.set_len(64 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &crate::util::noise(4 << 20, 3), 20 << 20)
        .unwrap();
    std::fs::write(top.join("dense"), crate::util::noise(3_000_000, 4)).unwrap();
    let last_interval = |o: &std::process::Output| -> serde_json::Value {
        assert!(o.status.success(), "{}", stderr(o));
        let out = stdout(o);
        let line = out
            .lines()
            .rfind(|l| l.contains("\"type\":\"interval\""))
            .unwrap_or_else(|| panic!("no interval: {out}"))
            .to_string();
        serde_json::from_str(&line).unwrap()
    };
    let stream = ["--json-stream", "--interval", "20ms", "-P", "2"];
    // The data (4 MiB of the sparse file, the dense file's 3 MB) is what
    // is expected and what crosses; the 60 MiB of holes count for nothing.
    let data = (4 << 20) + 3_000_000;
    let v = last_interval(&d.send(&stream, &[top.to_str().unwrap(), "127.0.0.1:in"]));
    assert_eq!(v["expected_bytes"].as_u64(), Some(data), "{v}");
    assert_eq!(v["total_bytes"].as_u64(), Some(data), "{v}");
    assert_eq!(v["unsent_bytes"].as_u64(), Some(0), "{v}");
    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    let o = crate::util::urmove()
        .args(["pull", "-p", &d.port.to_string(), "--key-file"])
        .arg(&d.key)
        .args(stream)
        .arg("127.0.0.1:in/sp")
        .arg(local.path())
        .output()
        .unwrap();
    let v = last_interval(&o);
    assert_eq!(v["expected_bytes"].as_u64(), Some(data), "{v}");
    assert_eq!(v["total_bytes"].as_u64(), Some(data), "{v}");
    assert_same_tree(&top, &local.path().join("sp"));
}

/// `bench --net -P 3` prints a line per stream (bytes, rate, segments
/// resent from TCP_INFO, round trip), as iperf3 users read them, and the
/// JSON carries them; together they account for every byte.
#[test]
fn bench_net_prints_each_streams_line_with_its_retransmits() {
    let d = Daemon::start();
    let run = |extra: &[&str]| {
        crate::util::urmove()
            .args(d.bench_net_args("127.0.0.1"))
            .args(["-P", "3", "--time", "1s"])
            .args(extra)
            .output()
            .unwrap()
    };
    let o = run(&[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("stream "))
        .collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains(" resent") && l.contains("rtt ")),
        "{out}"
    );
    let v = json(&run(&["--json"]));
    let streams = v["path"]["streams"].as_array().expect("path.streams");
    assert_eq!(streams.len(), 3, "{v}");
    let sent: u64 = streams
        .iter()
        .map(|s| s["bytes_sent"].as_u64().unwrap())
        .sum();
    assert!(sent >= v["bytes"].as_u64().unwrap(), "{v}");
    assert!(streams.iter().all(|s| s["retransmits"].is_u64()), "{v}");
}

/// A rate is in bits unless a B says bytes: `--rate-limit 8M` (iperf3's
/// -b) and `1MB` are one limit, echoed in the unit given, and the kernel
/// paces every stream at the same share of it.
#[test]
fn rates_as_people_type_them_pace_alike() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let f = src.path().join("f.dat");
    // Enough for each of two streams to carry the megabyte after which
    // its TCP figures are reported.
    std::fs::write(&f, crate::util::noise(5 << 19, 32)).unwrap();
    let f = f.to_str().unwrap();
    for (given, echoed) in [
        ("8M", "--rate-limit 8.00 Mb/s (1.00 MB/s) in all"),
        ("1MB", "--rate-limit 1.00 MB/s (8.00 Mb/s) in all"),
    ] {
        let dest = format!("127.0.0.1:{given}");
        let o = d.send(
            &[
                "--rate-limit",
                given,
                "-P",
                "2",
                "--block",
                "256k",
                "--json",
            ],
            &[f, &dest],
        );
        assert!(o.status.success(), "{given}: {}", stderr(&o));
        assert!(stderr(&o).contains(echoed), "{given}: {}", stderr(&o));
        let v = json(&o);
        let caps: Vec<u64> = v["path"]["streams"]
            .as_array()
            .unwrap_or_else(|| panic!("{given}: no streams in {v}"))
            .iter()
            .map(|s| s["pacing_cap_bits_per_s"].as_u64().unwrap())
            .collect();
        assert_eq!(caps, [4_000_000, 4_000_000], "{given}: {v}");
    }
    // A rate's unit is said when it is not one.
    let o = d.send(&["--rate-limit", "8Mbyte"], &[f, "127.0.0.1:x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("bits: 4G, 4Gbit, 4Gbps, 1gbit; bytes: 500MB, 450MiB"),
        "{}",
        stderr(&o)
    );
}
