//! A streamed push (protocol 14, `REQ_STREAM`): the manifest goes while
//! the walk goes on. The first files are committed before the walk ends;
//! a tree of every kind lands as it is when all of it comes in later
//! windows; a run again sends nothing; a tree of more entries than the
//! sender keeps unsettled at once lands whole, and resumed after a kill
//! sends only the rest.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::transfer::{assert_same_tree, make_tree, Daemon};
use crate::util::{json, stderr, urmove};

/// `urmove send --json` of `args` to `d`, with `env` set.
fn send(d: &Daemon, env: &[(&str, &str)], args: &[&str]) -> serde_json::Value {
    let o = urmove()
        .envs(env.iter().copied())
        .args(["send", "-p", &d.port.to_string(), "--json", "--key-file"])
        .arg(&d.key)
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}\n{}", stderr(&o), d.log());
    json(&o)
}

/// The files of directory `dir`, each `n` bytes of its own.
fn files(dir: &Path, count: usize, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..count {
        let bytes = crate::util::noise(n, i as u64 + 7);
        std::fs::write(dir.join(format!("f{i:03}")), bytes).unwrap();
    }
}

/// A directory of 200,000 entries listed after one of real files: the
/// walk stats every one of them (they are left out by `--exclude`, so
/// the receiver has nothing to do for them) while the first directory's
/// files are already committed. The session starts at once
/// (`URMOVE_STREAM_FIRST_MS=0`): on a busy machine the first window's
/// wait for 4,096 names could take a good part of the walk.
#[test]
fn a_slow_walk_commits_its_first_files_before_it_ends() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("t");
    files(&top.join("a"), 20, 64 << 10);
    let many = top.join("b");
    std::fs::create_dir_all(&many).unwrap();
    for i in 0..200_000 {
        std::fs::File::create(many.join(format!("e{i:06}"))).unwrap();
    }
    let v = send(
        &d,
        &[("URMOVE_STREAM_FIRST_MS", "0")],
        &["--exclude", "b/*", top.to_str().unwrap(), "127.0.0.1:s"],
    );
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(v["files"], 20, "{v}");
    assert_eq!(v["files_verified"], 20, "{v}");
    assert_eq!(v["files_excluded"], 200_000, "{v}");
    let walk = v["phases"]["walk_s"].as_f64().expect("a streamed push");
    let first = v["phases"]["first_commit_s"].as_f64().expect("a commit");
    assert!(
        first < walk,
        "first commit at {first} s, walk ended at {walk} s: {v}"
    );
    let dst = d.root.path().join("s/t");
    for i in 0..20 {
        let name = format!("a/f{i:03}");
        let got = std::fs::read(dst.join(&name)).unwrap();
        assert!(got == crate::util::noise(64 << 10, i + 7), "{name}");
    }
    assert_eq!(std::fs::read_dir(dst.join("b")).unwrap().count(), 0);
}

/// Every kind of entry, all of it in windows after an empty manifest
/// (`URMOVE_STREAM_FIRST_MS=0`), lands as it is; a run again finds every
/// file unchanged and sends no byte.
#[test]
fn a_streamed_tree_of_every_kind_lands_and_a_rerun_sends_nothing() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = make_tree(src.path());
    let now = [("URMOVE_STREAM_FIRST_MS", "0")];
    let args = [
        "-P",
        "3",
        "--block",
        "1M",
        top.to_str().unwrap(),
        "127.0.0.1:in",
    ];
    let v = send(&d, &now, &args);
    assert_eq!(v["status"], "ok", "{v}");
    assert!(v["phases"]["walk_s"].is_number(), "streamed: {v}");
    assert_eq!(v["files"], 6, "{v}");
    assert_eq!(v["files_verified"], 6, "{v}");
    let expected: u64 = [0u64, 1, 1000, 4096, (1 << 20) + 123, 3 << 20].iter().sum();
    assert_eq!(v["bytes"], expected, "{v}");
    assert_same_tree(&top, &d.root.path().join("in/run42"));
    let again = send(&d, &now, &args);
    assert_eq!(again["status"], "ok", "{again}");
    assert!(again["phases"]["walk_s"].is_number(), "streamed: {again}");
    assert_eq!(again["files_unchanged"], 6, "{again}");
    assert_eq!(again["files_verified"], 0, "{again}");
    assert_eq!(again["bytes"], 0, "{again}");
    assert_same_tree(&top, &d.root.path().join("in/run42"));
}

/// Files under `dir` the receiver committed (no part files, journals).
fn committed(dir: &Path) -> usize {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(list) = std::fs::read_dir(d) else {
            continue;
        };
        for e in list.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else if !name.contains(".urmove.") {
                n += 1;
            }
        }
    }
    n
}

/// 2,400 files in windows after an empty manifest, while the sender keeps
/// at most 150 added entries unsettled (`URMOVE_STREAM_WINDOW`): the walk
/// waits for the receiver instead of skipping any, and every file lands
/// identical. A second push, slowed down and killed with SIGKILL once
/// more files than that bound are committed, then run again, sends only
/// the rest: what the first committed is found unchanged.
#[test]
fn a_tree_larger_than_the_unsettled_bound_lands_whole_and_resumes_after_a_kill() {
    const N: usize = 2_400;
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("t");
    for k in 0..3 {
        let dir = top.join(format!("d{k}"));
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..N / 3 {
            let bytes = crate::util::noise(1000 + i % 3000, (k * N + i) as u64);
            std::fs::write(dir.join(format!("f{i:04}")), bytes).unwrap();
        }
    }
    let env = [
        ("URMOVE_STREAM_FIRST_MS", "0"),
        ("URMOVE_STREAM_WINDOW", "150"),
    ];
    let v = send(
        &d,
        &env,
        &["-P", "2", top.to_str().unwrap(), "127.0.0.1:whole"],
    );
    assert_eq!(v["status"], "ok", "{v}");
    assert!(v["phases"]["walk_s"].is_number(), "streamed: {v}");
    assert_eq!(v["files"], N, "{v}");
    assert_eq!(v["files_verified"], N, "{v}");
    assert_eq!(v["files_skipped"], 0, "{v}");
    assert_same_tree(&top, &d.root.path().join("whole/t"));

    let push = || {
        let mut c = urmove();
        c.envs(env)
            .args(["send", "-p", &d.port.to_string(), "--json", "--key-file"])
            .arg(&d.key)
            .args(["--rate-limit", "1MB"])
            .arg(&top)
            .arg("127.0.0.1:cut");
        c
    };
    let dest = d.root.path().join("cut/t");
    let mut first = push()
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(120);
    while committed(&dest) < 400 {
        assert!(
            first.try_wait().unwrap().is_none(),
            "the push ended before the kill"
        );
        assert!(Instant::now() < until, "400 files not committed in 2 min");
        std::thread::sleep(Duration::from_millis(10));
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let before = committed(&dest);
    assert!(before < N, "all committed before the kill");
    // The daemon sees the connections reset and ends the session.
    std::thread::sleep(Duration::from_secs(2));
    let v = send(&d, &env, &[top.to_str().unwrap(), "127.0.0.1:cut"]);
    assert_eq!(v["status"], "ok", "{v}");
    assert!(v["phases"]["walk_s"].is_number(), "streamed: {v}");
    let unchanged = v["files_unchanged"].as_u64().unwrap() as usize;
    let verified = v["files_verified"].as_u64().unwrap() as usize;
    assert!(unchanged >= before, "{before} committed before: {v}");
    assert_eq!(unchanged + verified, N, "{v}");
    assert!(verified > 0, "{v}");
    assert_same_tree(&top, &dest);
}
