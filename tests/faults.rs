//! Faults injected into real transfers (issue 4): processes killed half
//! way and resumed, data streams cut or stalled through a proxy the test
//! controls, peers paused with SIGSTOP, a full and a read-only filesystem,
//! a source that grows while it is sent. Each ends by comparing bytes.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::transfer::{assert_same_tree, no_part_files, Daemon};
use crate::util::{json, noise, stderr, stdout, urmove};

const MIB: usize = 1 << 20;

/// A tree with one large file and ten small ones; returns its top.
pub fn make_run(dir: &Path, big_mib: usize) -> PathBuf {
    let top = dir.join("run");
    std::fs::create_dir_all(&top).unwrap();
    std::fs::write(top.join("big.dat"), noise(big_mib * MIB + 777, 11)).unwrap();
    for i in 0..10 {
        std::fs::write(top.join(format!("s{i}")), noise(100_000 + i, i as u64)).unwrap();
    }
    top
}

pub(crate) fn tree_bytes(top: &Path) -> u64 {
    std::fs::read_dir(top)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

pub fn send_child(d: &Daemon, port: u16, extra: &[&str], args: &[&str]) -> Child {
    urmove()
        .args(["send", "-p", &port.to_string(), "--key-file"])
        .arg(&d.key)
        .args(extra)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Wait until the daemon logs a `Net In` line at `pct` percent or more.
pub(crate) fn wait_for_percent(d: &Daemon, pct: f64) {
    let until = Instant::now() + Duration::from_secs(60);
    let mut seen = String::new();
    while Instant::now() < until {
        for line in d.log().lines() {
            seen += line;
            seen += "\n";
            let at = line
                .split_whitespace()
                .find_map(|w| w.strip_suffix('%').and_then(|p| p.parse::<f64>().ok()));
            if at.is_some_and(|p| p >= pct) {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the transfer never reached {pct}%:\n{seen}");
}

fn finish(child: Child) -> std::process::Output {
    child.wait_with_output().unwrap()
}

/// `send --resume` of `top` after an interruption: it completes, the tree
/// is identical, and only what the receiver lacked crossed the wire.
fn resume_and_check(d: &Daemon, top: &Path) -> serde_json::Value {
    resume_and_check_with(d, top, &[])
}

/// [`resume_and_check`] with `extra` options (as `--lanes 2`).
pub fn resume_and_check_with(d: &Daemon, top: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["--resume", "-P", "2", "--block", "1M", "--json"];
    args.extend_from_slice(extra);
    let o = d.send(&args, &[top.to_str().unwrap(), "127.0.0.1:in"]);
    assert!(o.status.success(), "{}\n{}", stderr(&o), d.log());
    let v = json(&o);
    assert_eq!(v["status"], "ok");
    assert_eq!(v["files_verified"], 11);
    let total = tree_bytes(top);
    let (sent, skipped) = (
        v["bytes"].as_u64().unwrap(),
        v["bytes_skipped"].as_u64().unwrap(),
    );
    assert_eq!(sent + skipped, total, "{v}");
    assert_same_tree(top, &d.root.path().join("in/run"));
    assert!(no_part_files(d.root.path()));
    v
}

#[test]
fn a_receiver_killed_half_way_resumes_and_sends_less_the_second_time() {
    let v = receiver_killed_then_resumed(false);
    // Killed past half of 81 MiB, with a journal at most a second behind.
    assert!(
        v["bytes_skipped"].as_u64().unwrap() >= 16 * MIB as u64,
        "{v}"
    );
}

#[test]
fn a_journal_whose_part_file_is_gone_is_not_trusted() {
    // An admin deletes the .part but not its journal: resuming must send
    // that file whole again, never fill the journaled blocks with zeros.
    let v = receiver_killed_then_resumed(true);
    assert!(v["bytes"].as_u64().unwrap() >= 80 * MIB as u64, "{v}");
}

fn receiver_killed_then_resumed(delete_part: bool) -> serde_json::Value {
    receiver_killed_then_resumed_with(delete_part, &[])
}

/// [`receiver_killed_then_resumed`], both sends with `extra` options.
pub fn receiver_killed_then_resumed_with(delete_part: bool, extra: &[&str]) -> serde_json::Value {
    let mut d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = make_run(src.path(), 80);
    let mut args = vec![
        "--rate-limit",
        "20MB",
        "-P",
        "2",
        "--block",
        "1M",
        "--timeout",
        "5s",
    ];
    args.extend_from_slice(extra);
    let first = send_child(&d, d.port, &args, &[top.to_str().unwrap(), "127.0.0.1:in"]);
    wait_for_percent(&d, 55.0);
    d.kill_and_restart();
    let o = finish(first);
    assert!(!o.status.success(), "the first send survived its receiver");
    let part = d.root.path().join("in/run/big.dat.urmove.part");
    assert!(part.exists(), "the part file is kept for resuming");
    assert!(d.root.path().join("in/run/big.dat.urmove.journal").exists());
    assert!(!d.root.path().join("in/run/big.dat").exists());
    if delete_part {
        std::fs::remove_file(&part).unwrap();
    }
    resume_and_check_with(&d, &top, extra)
}

#[test]
fn a_sender_killed_half_way_resumes_and_sends_less_the_second_time() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = make_run(src.path(), 80);
    let mut first = send_child(
        &d,
        d.port,
        &["--rate-limit", "20MB", "-P", "2", "--block", "1M"],
        &[top.to_str().unwrap(), "127.0.0.1:in"],
    );
    wait_for_percent(&d, 55.0);
    first.kill().unwrap();
    let _ = first.wait();
    assert!(!d.root.path().join("in/run/big.dat").exists());
    let v = resume_and_check(&d, &top);
    let total = tree_bytes(&top);
    assert!(v["bytes_skipped"].as_u64().unwrap() >= total / 5, "{v}");
}

#[test]
fn a_finished_transfer_run_again_is_a_no_op_and_checksum_compares_content() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = make_run(src.path(), 3);
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    let o = d.send(&["--block", "1M"], &args);
    assert!(o.status.success(), "{}", stderr(&o));
    // Again: nothing crosses, every file counts as unchanged.
    let o = d.send(&["--resume", "--block", "1M"], &args);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o) + &stderr(&o);
    assert!(text.contains("11 files unchanged"), "{text}");
    let o = d.send(&["--resume", "--json"], &args);
    let v = json(&o);
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(v["bytes"], 0, "{v}");
    assert_eq!(v["bytes_skipped"], tree_bytes(&top), "{v}");
    assert_eq!(v["files_unchanged"], 11);
    // A file changed on the receiver behind urmove's back, same size and
    // mtime: size and mtime cannot see it; --checksum can, and mends it.
    let theirs = d.root.path().join("in/run/s3");
    let mtime = std::fs::metadata(&theirs).unwrap().modified().unwrap();
    let mut bytes = std::fs::read(&theirs).unwrap();
    bytes[500] ^= 0xFF;
    std::fs::write(&theirs, &bytes).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&theirs)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let o = d.send(&["--checksum", "--json"], &args);
    let v = json(&o);
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(v["bytes"], 100_003, "only the changed file went again: {v}");
    assert_same_tree(&top, &d.root.path().join("in/run"));
}

/// What the proxy does to one of the connections it relays.
#[derive(Clone, Copy)]
pub enum Fault {
    /// Close connection `conn` (0 is the control connection) both ways
    /// once `after` bytes went from the client through it.
    Cut { conn: usize, after: u64 },
    /// Stop reading from the client on connection `conn` after `after`
    /// bytes, keeping both ends open.
    Stall { conn: usize, after: u64 },
}

/// A TCP relay on 127.0.0.1 to `target`, doing `fault` to one connection.
pub struct Proxy {
    pub port: u16,
    stop: Arc<AtomicBool>,
    /// Whether the fault happened.
    pub struck: Arc<AtomicBool>,
}

impl Proxy {
    pub fn start(target: u16, fault: Fault) -> Proxy {
        Self::start_many(target, vec![fault])
    }

    /// A relay doing each of `faults` to its connection.
    pub fn start_many(target: u16, faults: Vec<Fault>) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let struck = Arc::new(AtomicBool::new(false));
        let (stop2, struck2) = (Arc::clone(&stop), Arc::clone(&struck));
        std::thread::spawn(move || {
            for (k, c) in l.incoming().enumerate() {
                let Ok(client) = c else { return };
                if stop2.load(Ordering::Relaxed) {
                    return;
                }
                let up = TcpStream::connect(("127.0.0.1", target)).unwrap();
                let (c2, u2) = (client.try_clone().unwrap(), up.try_clone().unwrap());
                // Replies flow back untouched.
                std::thread::spawn(move || pump(u2, c2, None, &AtomicBool::new(false)));
                let fault = faults.iter().find_map(|f| match *f {
                    Fault::Cut { conn, after } if conn == k => Some((after, true)),
                    Fault::Stall { conn, after } if conn == k => Some((after, false)),
                    _ => None,
                });
                let (stop3, struck3) = (Arc::clone(&stop2), Arc::clone(&struck2));
                std::thread::spawn(move || {
                    pump(client, up, fault, &struck3);
                    // A stalled relay holds its sockets until the test ends.
                    while !stop3.load(Ordering::Relaxed) && fault.is_some_and(|f| !f.1) {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                });
            }
        });
        Proxy { port, stop, struck }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Copy `from` to `to`; with a fault, after `after` bytes either cut both
/// (true) or stop reading (false).
fn pump(mut from: TcpStream, mut to: TcpStream, fault: Option<(u64, bool)>, struck: &AtomicBool) {
    let mut buf = vec![0u8; 64 << 10];
    let mut moved = 0u64;
    loop {
        let limit = match fault {
            Some((after, _)) => ((after - moved) as usize).min(buf.len()),
            None => buf.len(),
        };
        if limit == 0 {
            let (_, cut) = fault.unwrap();
            struck.store(true, Ordering::Relaxed);
            if cut {
                let _ = from.shutdown(Shutdown::Both);
                let _ = to.shutdown(Shutdown::Both);
            }
            return;
        }
        match from.read(&mut buf[..limit]) {
            Ok(0) | Err(_) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    let _ = from.shutdown(Shutdown::Both);
                    return;
                }
                moved += n as u64;
            }
        }
    }
}

fn through_proxy(fault: Fault, extra: &[&str]) {
    let d = Daemon::start();
    let proxy = Proxy::start(d.port, fault);
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = make_run(src.path(), 48);
    let mut args = vec!["-P", "3", "--block", "1M", "--json"];
    args.extend_from_slice(extra);
    let o = finish(send_child(
        &d,
        proxy.port,
        &args,
        &[top.to_str().unwrap(), "127.0.0.1:in"],
    ));
    assert!(o.status.success(), "{}\n{}", stderr(&o), d.log());
    assert!(
        proxy.struck.load(Ordering::Relaxed),
        "the fault never happened"
    );
    let v = json(&o);
    assert_eq!(v["status"], "ok");
    assert_eq!(v["files_verified"], 11);
    assert!(v["frames_resent"].as_u64().unwrap() > 0, "{v}");
    assert!(stderr(&o).contains("data stream"), "{}", stderr(&o));
    assert_same_tree(&top, &d.root.path().join("in/run"));
    assert!(no_part_files(d.root.path()));
}

#[test]
fn a_data_stream_cut_mid_transfer_is_made_good_on_the_others() {
    // Connection 2 is the second data stream; cut it after 5 MiB.
    through_proxy(
        Fault::Cut {
            conn: 2,
            after: 5 << 20,
        },
        &[],
    );
}

#[test]
fn a_stalled_data_stream_is_given_up_and_its_frames_sent_again() {
    through_proxy(
        Fault::Stall {
            conn: 2,
            after: 5 << 20,
        },
        &["--timeout", "4s"],
    );
}

fn signal(pid: u32, sig: &str) {
    assert!(std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success());
}

#[test]
fn a_paused_receiver_fails_the_sender_within_its_timeout() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = make_run(src.path(), 80);
    let child = send_child(
        &d,
        d.port,
        &["--rate-limit", "40MB", "--timeout", "3s", "--json"],
        &[top.to_str().unwrap(), "127.0.0.1:in"],
    );
    wait_for_percent(&d, 10.0);
    signal(d.pid(), "-STOP");
    let paused = Instant::now();
    let o = finish(child);
    let waited = paused.elapsed();
    signal(d.pid(), "-CONT");
    assert!(!o.status.success());
    let v = json(&o);
    assert_ne!(v["status"], "ok");
    let err = v["error"].as_str().unwrap();
    assert!(
        err.contains("taken no data")
            || err.contains("went silent")
            || err.contains("stopped taking data"),
        "{err}"
    );
    // Bounded: the timeout and a little, never a hang (nor a chain of
    // idle streams each taking the timeout in turn).
    assert!(waited < Duration::from_secs(15), "{waited:?}");
    assert!(!d.root.path().join("in/run/big.dat").exists());
}

#[test]
fn a_paused_sender_ends_the_daemon_session_within_its_timeout() {
    let mut d = Daemon::start_full(
        &[],
        "127.0.0.1",
        Path::new("/var/tmp"),
        &["--timeout", "3s"],
    );
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = make_run(src.path(), 80);
    let mut child = send_child(
        &d,
        d.port,
        &["--rate-limit", "40MB"],
        &[top.to_str().unwrap(), "127.0.0.1:in"],
    );
    wait_for_percent(&d, 10.0);
    signal(child.id(), "-STOP");
    let until = Instant::now() + Duration::from_secs(30);
    let mut log = String::new();
    while Instant::now() < until && !log.contains("no data from the sender") {
        log += &d.log();
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(log.contains("no data from the sender"), "{log}");
    let _ = child.kill();
    let _ = child.wait();
    assert!(d.alive());
    assert!(!d.root.path().join("in/run/big.dat").exists());
    // The daemon serves the next session.
    let o = d.send(&["--resume"], &[top.to_str().unwrap(), "127.0.0.1:in"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_same_tree(&top, &d.root.path().join("in/run"));
}

#[test]
fn two_sessions_for_the_same_file_are_not_interleaved() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = make_run(src.path(), 12);
    // Slow enough to outlast the daemon's wait for a busy file (3 s).
    let first = send_child(
        &d,
        d.port,
        &["--rate-limit", "2MB", "--block", "1M"],
        &[top.to_str().unwrap(), "127.0.0.1:in"],
    );
    wait_for_percent(&d, 5.0);
    let o = d.send(&["--json"], &[top.to_str().unwrap(), "127.0.0.1:in"]);
    assert!(!o.status.success(), "{}\n{}", stdout(&o), d.log());
    let v = json(&o);
    assert_eq!(v["status"], "busy", "{v}");
    let err = v["error"].as_str().unwrap_or_default().to_string();
    assert!(err.contains("another session is receiving it"), "{err}");
    let o = finish(first);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_same_tree(&top, &d.root.path().join("in/run"));
}

#[test]
fn a_source_that_grows_during_the_send_is_reported() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = make_run(src.path(), 40);
    let child = send_child(
        &d,
        d.port,
        &["--rate-limit", "20MB", "-P", "1", "--json"],
        &[top.to_str().unwrap(), "127.0.0.1:in"],
    );
    wait_for_percent(&d, 5.0);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(top.join("big.dat"))
        .unwrap();
    f.write_all(b"still being written").unwrap();
    drop(f);
    let o = finish(child);
    // One file changed: it is skipped and named, the rest arrives.
    assert_eq!(o.status.code(), Some(23), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["status"], "partial", "{v}");
    let skipped = v["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{v}");
    assert_eq!(skipped[0]["path"], "run/big.dat");
    let why = skipped[0]["reason"].as_str().unwrap();
    assert!(why.contains("changed during the send"), "{why}");
    assert_eq!(
        v["files_verified"].as_u64(),
        Some(v["files"].as_u64().unwrap() - 1)
    );
    assert!(!d.root.path().join("in/run/big.dat").exists());
    for e in std::fs::read_dir(&top).unwrap().flatten() {
        let name = e.file_name();
        if name != "big.dat" && e.file_type().unwrap().is_file() {
            let got = d.root.path().join("in/run").join(&name);
            assert_eq!(
                std::fs::read(got).unwrap(),
                std::fs::read(e.path()).unwrap()
            );
        }
    }
}

/// Bytes free on the filesystem holding `p`.
pub(crate) fn free_bytes(p: &Path) -> u64 {
    let o = std::process::Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(p)
        .output()
        .unwrap();
    stdout(&o).lines().nth(1).unwrap().trim().parse().unwrap()
}

#[test]
fn a_full_filesystem_names_the_file_finalizes_nothing_and_resume_finishes_later() {
    crate::require!(crate::util::can_loop("ext4"), "needs root and loop devices");
    let fs = crate::util::LoopFs::new("ext4", 96, 4096, false).unwrap();
    let mut d = Daemon::start_full(&[], "127.0.0.1", fs.path(), &[]);
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = make_run(src.path(), 24);
    // The tree fits when the send starts (so it is not refused before the
    // data); a quarter of the way, the disk is filled.
    let filler = fs.path().join("filler");
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    let send = send_child(
        &d,
        d.port,
        &["--block", "1M", "--json", "--rate-limit", "40MB", "-P", "2"],
        &args,
    );
    wait_for_percent(&d, 25.0);
    let fill = free_bytes(fs.path()).saturating_sub(1 << 20);
    // The transfer may take the last of it first: full either way.
    let _ = std::fs::write(&filler, vec![7u8; fill as usize]);
    let o = send.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["status"], "no_space", "{v}");
    let err = v["error"].as_str().unwrap();
    assert!(
        err.contains("in/run/") && err.contains("No space left"),
        "names the file and the cause: {err}"
    );
    assert!(!d.root.path().join("in/run/big.dat").exists());
    assert!(d.alive());
    // Space freed, the same command with --resume finishes the job.
    std::fs::remove_file(&filler).unwrap();
    let o = d.send(&["--block", "1M", "--resume", "--json"], &args);
    assert!(o.status.success(), "{}\n{}", stderr(&o), d.log());
    assert_same_tree(&top, &d.root.path().join("in/run"));
    assert!(no_part_files(d.root.path()));
    drop(d);
}

#[test]
fn a_read_only_filesystem_is_named_and_the_daemon_serves_on() {
    crate::require!(crate::util::can_loop("ext4"), "needs root and loop devices");
    let fs = crate::util::LoopFs::new("ext4", 64, 4096, false).unwrap();
    let mut d = Daemon::start_full(&[], "127.0.0.1", fs.path(), &[]);
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = make_run(src.path(), 2);
    let remount = |how: &str| {
        assert!(std::process::Command::new("mount")
            .args(["-o", &format!("remount,{how}")])
            .arg(fs.path())
            .status()
            .unwrap()
            .success());
    };
    remount("ro");
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    let o = d.send(&["--json"], &args);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = json(&o)["error"].as_str().unwrap().to_string();
    assert!(
        err.contains("in") && err.contains("Read-only file system"),
        "{err}"
    );
    assert!(d.alive());
    remount("rw");
    let o = d.send(&[], &args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_same_tree(&top, &d.root.path().join("in/run"));
    drop(d);
}

#[test]
fn an_io_error_under_the_receiver_names_the_file_and_the_cause() {
    crate::require!(
        crate::util::can_loop("xfs") && crate::util::have("xfs_io"),
        "needs root, loop devices and xfsprogs"
    );
    let fs = crate::util::LoopFs::new("xfs", 300, 4096, false).unwrap();
    let mut d = Daemon::start_full(&[], "127.0.0.1", fs.path(), &[]);
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = make_run(src.path(), 40);
    let child = send_child(
        &d,
        d.port,
        &["--rate-limit", "20MB", "--block", "1M", "--json"],
        &[top.to_str().unwrap(), "127.0.0.1:in"],
    );
    wait_for_percent(&d, 20.0);
    // Shut the filesystem down under the daemon: from now on every write
    // to it fails with EIO, as on a dying disk.
    assert!(std::process::Command::new("xfs_io")
        .args(["-x", "-c", "shutdown"])
        .arg(fs.path())
        .status()
        .unwrap()
        .success());
    let o = finish(child);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v = json(&o);
    let err = v["error"].as_str().unwrap();
    assert!(err.contains("Input/output error"), "{err}");
    assert!(err.contains("in/run/"), "names the file: {err}");
    assert!(d.alive(), "the daemon outlives a failed disk");
    drop(d);
}

#[test]
fn the_daemon_limits_refuse_with_a_reason_and_serve_within_them() {
    let d = Daemon::start_full(
        &[],
        "127.0.0.1",
        Path::new("/var/tmp"),
        &[
            "--max-sessions",
            "1",
            "--max-streams",
            "2",
            "--max-files",
            "12",
            "--max-buffer-memory",
            "64M",
        ],
    );
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = make_run(src.path(), 8);
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    // Each refusal is the daemon's limit as its numbers (protocol 13's
    // LimitRefused), which the client says and puts in its JSON.
    let refused = |extra: &[&str], args: &[&str], status: &str, text: &str| {
        let mut all = vec!["--json"];
        all.extend_from_slice(extra);
        let o = d.send(&all, args);
        assert!(!o.status.success());
        let v = json(&o);
        assert_eq!(v["status"], status, "{v}");
        let err = v["error"].as_str().unwrap_or_default();
        assert!(err.contains(text), "{err}");
        v
    };
    refused(&["-P", "3"], &args, "too_large", "this daemon takes 1 to 2");
    // Any stream count shares a few buffers, but even two 64 MiB frames
    // do not fit a 64 MiB budget: refused with the real limit.
    let v = refused(
        &["-P", "2", "--block", "64M"],
        &args,
        "busy",
        "of the daemon's 64 MiB",
    );
    assert_eq!(v["limit"]["name"], "buffer_memory", "{v}");
    assert_eq!(v["limit"]["max"], 64 << 20, "{v}");
    // 11 files and their directory fit; one more file does not.
    std::fs::write(top.join("extra"), b"x").unwrap();
    let v = refused(&["-P", "2"], &args, "too_large", "more than 12 entries");
    assert_eq!(
        (&v["limit"]["name"], &v["limit"]["max"]),
        (&"entries".into(), &12.into()),
        "{v}"
    );
    std::fs::remove_file(top.join("extra")).unwrap();
    // One session at a time: a second, while the first runs, is refused.
    let first = send_child(
        &d,
        d.port,
        &["-P", "1", "--block", "1M", "--rate-limit", "4MB"],
        &args,
    );
    wait_for_percent(&d, 5.0);
    let other = src.path().join("other");
    std::fs::write(&other, b"o").unwrap();
    let v = refused(
        &["-P", "1"],
        &[other.to_str().unwrap(), "127.0.0.1:elsewhere"],
        "busy",
        "sessions at once",
    );
    assert_eq!(v["limit"]["name"], "sessions", "{v}");
    assert_eq!(
        (v["limit"]["max"].as_u64(), v["limit"]["in_use"].as_u64()),
        (Some(1), Some(1)),
        "{v}"
    );
    let o = finish(first);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_same_tree(&top, &d.root.path().join("in/run"));
}

#[test]
fn a_pull_killed_half_way_resumes_and_fetches_less_the_second_time() {
    let d = Daemon::start();
    // 300 files of 1 MiB under the daemon's root: each is synced and
    // renamed as it completes, so a kill leaves some finished, some not.
    let top = d.root.path().join("out/run");
    std::fs::create_dir_all(&top).unwrap();
    for i in 0..300 {
        std::fs::write(top.join(format!("f{i:03}")), noise(MIB, i)).unwrap();
    }
    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    let pull = |extra: &[&str]| {
        let mut c = urmove();
        c.args([
            "pull",
            "-p",
            &d.port.to_string(),
            "-P",
            "1",
            "--block",
            "256k",
        ])
        .args(extra)
        .arg("--key-file")
        .arg(&d.key)
        .arg("127.0.0.1:out/run")
        .arg(local.path());
        c
    };
    let mut first = pull(&[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let done = || {
        std::fs::read_dir(local.path().join("run")).map_or(0, |r| {
            r.flatten()
                .filter(|e| !e.file_name().to_string_lossy().contains(".urmove."))
                .count()
        })
    };
    let until = Instant::now() + Duration::from_secs(60);
    while done() < 100 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
    }
    first.kill().unwrap();
    let status = first.wait().unwrap();
    assert!(
        !status.success(),
        "the first pull finished before it was killed"
    );
    let o = pull(&["--resume", "--json"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    let total = 300 * MIB as u64;
    let (got, skipped) = (
        v["bytes"].as_u64().unwrap(),
        v["bytes_skipped"].as_u64().unwrap(),
    );
    assert_eq!(got + skipped, total, "{v}");
    assert!(skipped >= 100 * MIB as u64, "{v}");
    // What the first pull finished is unchanged (its stamps say so), the
    // rest verified now.
    let (verified, unchanged) = (v["files_verified"].as_u64(), v["files_unchanged"].as_u64());
    assert_eq!(verified.unwrap() + unchanged.unwrap(), 300, "{v}");
    assert!(unchanged.unwrap() > 0, "{v}");
    assert_same_tree(&top, &local.path().join("run"));
    assert!(no_part_files(local.path()));
}

/// Ctrl-C 1.5 s into a pull: this side journals what it verified at
/// once, says what it kept, the daemon logs a client that stopped, and the
/// pull again fetches only the rest.
#[test]
fn a_pull_stopped_with_ctrl_c_keeps_what_was_verified() {
    let d = Daemon::start();
    let top = d.root.path().join("out/run");
    std::fs::create_dir_all(&top).unwrap();
    for i in 0..2 {
        std::fs::write(top.join(format!("f{i}")), noise(64 * MIB, 30 + i)).unwrap();
    }
    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    let pull = |extra: &[&str]| {
        let mut c = urmove();
        c.args([
            "pull",
            "-p",
            &d.port.to_string(),
            "-P",
            "2",
            "--block",
            "1M",
            "--json",
        ])
        .args(extra)
        .arg("--key-file")
        .arg(&d.key)
        .arg("127.0.0.1:out/run")
        .arg(local.path());
        c
    };
    let child = pull(&["--rate-limit", "40MB"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    crate::service::ctrl_c(&child);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["status"], "interrupted", "{v}");
    let kept = v["kept"]["bytes"].as_u64().unwrap_or_else(|| panic!("{v}"));
    assert!(kept > 0, "{v}");
    let until = Instant::now() + Duration::from_secs(10);
    let mut log = String::new();
    while !log.contains("pull session stopped by the client") && Instant::now() < until {
        log += &d.log();
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(log.contains("pull session stopped by the client"), "{log}");
    let o = pull(&[]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let again = json(&o);
    assert!(
        again["bytes_skipped"].as_u64().unwrap() >= kept,
        "{again} after {v}"
    );
    assert_same_tree(&top, &local.path().join("run"));
    assert!(no_part_files(local.path()));
}
