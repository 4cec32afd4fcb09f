//! `urmove recv` and `urmove send` as users run them: real processes, real
//! TCP on loopback, real files compared byte for byte with modes and mtimes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, SystemTime};

use crate::util::{json, raw, stderr, urmove};

/// A receiver daemon on 127.0.0.1 and a free port, killed on drop.
pub struct Daemon {
    child: Child,
    pub port: u16,
    pub root: tempfile::TempDir,
    pub key: PathBuf,
    _keydir: tempfile::TempDir,
    log: std::sync::mpsc::Receiver<String>,
    extra: Vec<String>,
    /// The urmove it runs (this build's, or another's: tests/compat.rs).
    bin: PathBuf,
}

/// Start `urmove recv` (the one at `bin`, under `wrapper`, if any) on
/// `ip`, port 0, and read the port it bound from its first log line.
fn spawn_recv(
    bin: &Path,
    wrapper: &[&str],
    ip: &str,
    root: &Path,
    key: &Path,
    extra: &[String],
) -> (Child, u16, std::sync::mpsc::Receiver<String>) {
    let mut cmd = match wrapper.split_first() {
        Some((w, rest)) => {
            let mut c = std::process::Command::new(w);
            c.args(rest).arg(bin);
            c
        }
        None => crate::util::urmove_at(bin),
    };
    let mut child = cmd
        .args([
            "recv",
            "--listen",
            &format!("{ip}:0"),
            "--interval",
            "100ms",
        ])
        .args(
            (!extra.iter().any(|a| a == "--handshake-timeout"))
                .then_some(["--handshake-timeout", "2s"])
                .into_iter()
                .flatten(),
        )
        .arg("--root")
        .arg(root)
        .arg("--key-file")
        .arg(key)
        // Each daemon keeps its secret beside its key, not in /var/lib.
        .args(
            (!extra.iter().any(|a| a == "--state-dir"))
                .then(|| {
                    [
                        "--state-dir".into(),
                        key.with_file_name("state").into_os_string(),
                    ]
                })
                .into_iter()
                .flatten(),
        )
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, log) = std::sync::mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = log
        .recv_timeout(Duration::from_secs(10))
        .expect("daemon started");
    let port = first
        .split(&format!("listening on {ip}:"))
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {first:?}"));
    (child, port, log)
}

/// A second daemon in front of a [`Daemon`]'s root, with its key and
/// secret (two receivers sharing one filesystem): stopped when dropped.
pub struct Twin {
    child: Child,
    pub port: u16,
    /// Its log, read so that it never blocks on a full pipe.
    log: std::sync::mpsc::Receiver<String>,
}

impl Twin {
    /// Its log lines until one holds `what` (at most 10 s), or all so far.
    pub fn log_until(&self, what: &str) -> String {
        lines_until(&self.log, what)
    }
}

/// Lines of `log` until one holds `what` (at most 10 s), or all so far.
fn lines_until(log: &std::sync::mpsc::Receiver<String>, what: &str) -> String {
    let mut lines = Vec::new();
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
        let Ok(line) = log.recv_timeout(left) else {
            break;
        };
        lines.push(line);
        if lines.last().is_some_and(|l| l.contains(what)) {
            break;
        }
    }
    lines.join("\n")
}

impl Drop for Twin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    /// Another daemon on 127.0.0.1 in front of this one's root.
    pub fn twin(&self) -> Twin {
        self.twin_with(&[])
    }

    /// [`Daemon::twin`], with `more` arguments (as another `--state-dir`).
    pub fn twin_with(&self, more: &[&str]) -> Twin {
        let mut extra = self.extra.clone();
        extra.extend(more.iter().map(|a| a.to_string()));
        let (child, port, log) = self.spawn_on_root(&extra);
        Twin { child, port, log }
    }

    /// Another `recv` of this daemon's build, root and key on loopback,
    /// with `extra` arguments.
    fn spawn_on_root(&self, extra: &[String]) -> (Child, u16, std::sync::mpsc::Receiver<String>) {
        spawn_recv(
            &self.bin,
            &[],
            "127.0.0.1",
            self.root.path(),
            &self.key,
            extra,
        )
    }

    /// `bench --net HOST` against this daemon, with its port and key: the
    /// arguments, for `urmove` run here or in a namespace.
    pub fn bench_net_args(&self, host: &str) -> Vec<String> {
        let key = self.key.to_str().expect("a UTF-8 key path");
        [
            "bench",
            "--net",
            host,
            "-p",
            &self.port.to_string(),
            "--key-file",
            key,
        ]
        .map(String::from)
        .to_vec()
    }

    pub fn start() -> Daemon {
        Self::start_with(&[])
    }

    /// Start the daemon under a wrapper command (as `prlimit --nofile=...`).
    pub fn start_with(wrapper: &[&str]) -> Daemon {
        Self::start_on(wrapper, "127.0.0.1")
    }

    /// Start the daemon listening on `ip` (port chosen by the kernel).
    pub fn start_on(wrapper: &[&str], ip: &str) -> Daemon {
        Self::start_full(wrapper, ip, Path::new("/var/tmp"), &[])
    }

    /// Start the daemon on 127.0.0.1 with another `--handshake-timeout`.
    pub fn start_with_timeout(handshake_timeout: &str) -> Daemon {
        Self::start_full(
            &[],
            "127.0.0.1",
            Path::new("/var/tmp"),
            &["--handshake-timeout", handshake_timeout],
        )
    }

    /// Start the daemon with its root a new directory in `parent` and
    /// `extra` options.
    pub fn start_full(wrapper: &[&str], ip: &str, parent: &Path, extra: &[&str]) -> Daemon {
        let bin = Path::new(env!("CARGO_BIN_EXE_urmove"));
        Self::launch(bin, wrapper, ip, parent, extra)
    }

    /// Start the urmove at `bin` (another build: tests/compat.rs) as the
    /// daemon on 127.0.0.1, its root in /var/tmp, with `extra` options;
    /// its key is made by that build's `keygen`.
    pub fn start_bin(bin: &Path, extra: &[&str]) -> Daemon {
        Self::launch(bin, &[], "127.0.0.1", Path::new("/var/tmp"), extra)
    }

    fn launch(bin: &Path, wrapper: &[&str], ip: &str, parent: &Path, extra: &[&str]) -> Daemon {
        let keydir = tempfile::tempdir_in("/var/tmp").unwrap();
        let key = keydir.path().join("key");
        crate::util::keygen_with(bin, &key);
        let root = tempfile::tempdir_in(parent).unwrap();
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let (child, port, log) = spawn_recv(bin, wrapper, ip, root.path(), &key, &extra);
        Daemon {
            child,
            port,
            root,
            key,
            _keydir: keydir,
            log,
            extra,
            bin: bin.to_path_buf(),
        }
    }

    /// `kill -9` the daemon, then start it again on the same root and key
    /// (on a new port).
    pub fn kill_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let (child, port, log) = self.spawn_on_root(&self.extra);
        self.child = child;
        self.port = port;
        self.log = log;
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn send(&self, extra: &[&str], args: &[&str]) -> std::process::Output {
        urmove()
            .args(["send", "-p", &self.port.to_string(), "--key-file"])
            .arg(&self.key)
            .args(extra)
            .args(args)
            .output()
            .unwrap()
    }

    /// Log lines so far.
    pub fn log(&self) -> String {
        self.log.try_iter().collect::<Vec<_>>().join("\n")
    }

    /// Its log lines until one holds `what` (at most 10 s: the daemon may
    /// log a session's end after its client ended), or all so far.
    pub fn log_until(&self, what: &str) -> String {
        lines_until(&self.log, what)
    }

    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn set_mtime(p: &Path, secs: u64) {
    let f = std::fs::File::options()
        .write(!p.is_dir())
        .read(p.is_dir())
        .open(p)
        .unwrap();
    f.set_times(
        std::fs::FileTimes::new().set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs)),
    )
    .unwrap();
}

/// A tree with every file kind: sizes around block and page edges, an
/// empty file, an empty directory, nested directories, an inside symlink.
pub(crate) fn make_tree(dir: &Path) -> PathBuf {
    let top = dir.join("run42");
    std::fs::create_dir_all(top.join("a/b")).unwrap();
    std::fs::create_dir_all(top.join("empty")).unwrap();
    let sizes = [0usize, 1, 1000, 4096, (1 << 20) + 123, 3 << 20];
    for (i, n) in sizes.iter().enumerate() {
        let p = top.join(if i % 2 == 0 {
            format!("f{i}")
        } else {
            format!("a/b/f{i}")
        });
        std::fs::write(&p, crate::util::noise(*n, i as u64 + 100)).unwrap();
        std::fs::set_permissions(
            &p,
            std::fs::Permissions::from_mode([0o600, 0o640, 0o644, 0o755][i % 4]),
        )
        .unwrap();
        set_mtime(&p, 1_600_000_000 + i as u64);
    }
    std::os::unix::fs::symlink("a/b/f1", top.join("link")).unwrap();
    set_mtime(&top.join("a/b"), 1_500_000_000);
    set_mtime(&top.join("empty"), 1_500_000_001);
    top
}

/// Compare two trees: kinds, bytes, modes, mtimes, link targets.
pub(crate) fn assert_same_tree(a: &Path, b: &Path) {
    let ma = std::fs::symlink_metadata(a).unwrap();
    let mb = std::fs::symlink_metadata(b).unwrap_or_else(|e| panic!("{}: {e}", b.display()));
    assert_eq!(ma.file_type(), mb.file_type(), "{}", b.display());
    if ma.file_type().is_symlink() {
        assert_eq!(
            std::fs::read_link(a).unwrap(),
            std::fs::read_link(b).unwrap()
        );
        return;
    }
    assert_eq!(
        ma.mode() & 0o7777,
        mb.mode() & 0o7777,
        "mode of {}",
        b.display()
    );
    assert_eq!(ma.mtime(), mb.mtime(), "mtime of {}", b.display());
    if ma.is_dir() {
        let mut names: Vec<_> = std::fs::read_dir(a)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        let mut other: Vec<_> = std::fs::read_dir(b)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        other.sort();
        assert_eq!(names, other, "entries of {}", b.display());
        for n in names {
            assert_same_tree(&a.join(&n), &b.join(&n));
        }
    } else {
        assert_eq!(
            std::fs::read(a).unwrap(),
            std::fs::read(b).unwrap(),
            "bytes of {}",
            b.display()
        );
    }
}

pub(crate) fn no_part_files(dir: &Path) -> bool {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else if [".urmove.part", ".urmove.journal", ".urmove.journal.tmp"]
                .iter()
                .any(|x| e.file_name().to_string_lossy().ends_with(x))
            {
                return false;
            }
        }
    }
    true
}

#[test]
fn a_tree_with_every_file_kind_arrives_identical() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = make_tree(src.path());
    let o = d.send(
        &["-P", "3", "--block", "1M", "--json"],
        &[top.to_str().unwrap(), "127.0.0.1:ingest/day1"],
    );
    assert!(o.status.success(), "{}\n{}", stderr(&o), d.log());
    let v = json(&o);
    assert_eq!(v["status"], "ok");
    assert_eq!(v["files"], 6);
    assert_eq!(v["files_verified"], 6);
    assert_eq!(v["streams"], 3);
    let expected: u64 = [0u64, 1, 1000, 4096, (1 << 20) + 123, 3 << 20].iter().sum();
    assert_eq!(v["bytes"], expected);
    for k in [
        "elapsed_s",
        "rate_bits_per_s",
        "interval_rate_min_bits_per_s",
    ] {
        assert!(v[k].as_f64().unwrap() > 0.0, "{k}");
    }
    assert_same_tree(&top, &d.root.path().join("ingest/day1/run42"));
    assert!(no_part_files(d.root.path()));
}

#[test]
fn one_large_file_uses_every_stream_and_human_output_has_interval_lines() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let f = src.path().join("big.dat");
    std::fs::write(&f, crate::util::noise(24 << 20, 7)).unwrap();
    // Paced so the transfer spans several intervals on both sides.
    let o = d.send(
        &[
            "-P",
            "4",
            "--block",
            "1M",
            "--interval",
            "100ms",
            "--rate-limit",
            "400Mbit",
        ],
        &[f.to_str().unwrap(), "127.0.0.1:"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = crate::util::stdout(&o);
    assert!(
        out.lines()
            .any(|l| l.contains("Net Out:") && l.contains("Avg:") && l.contains('%')),
        "{out}"
    );
    assert!(out.contains("1 of 1 file verified"), "{out}");
    std::thread::sleep(Duration::from_millis(100));
    let log = d.log();
    assert!(
        log.lines()
            .any(|l| l.contains("Net In:") && l.contains("Avg:") && l.contains('%')),
        "{log}"
    );
    assert_eq!(
        std::fs::read(d.root.path().join("big.dat")).unwrap(),
        std::fs::read(&f).unwrap()
    );
}

#[test]
fn the_wrong_key_is_refused_on_both_sides_and_the_daemon_keeps_serving() {
    let mut d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::write(src.path().join("x"), b"data").unwrap();
    let other = src.path().join("other.key");
    assert!(urmove()
        .arg("keygen")
        .arg(&other)
        .status()
        .unwrap()
        .success());
    let o = urmove()
        .args(["send", "-p", &d.port.to_string(), "--key-file"])
        .arg(&other)
        .arg(src.path().join("x"))
        .arg("127.0.0.1:in/")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("authentication failed"),
        "{}",
        stderr(&o)
    );
    // The daemon logs the refusal as its own, naming the client.
    let until = std::time::Instant::now() + Duration::from_secs(10);
    let mut log = String::new();
    while !log.contains("wrong key") && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
        log += &d.log();
    }
    let line = log
        .lines()
        .find(|l| l.contains("wrong key"))
        .unwrap_or_else(|| panic!("no refusal in the daemon's log:\n{log}"));
    assert!(
        line.contains("warning: refused a client from 127.0.0.1:")
            && line.ends_with(": wrong key (it does not hold this daemon's key)"),
        "{line}"
    );
    assert!(!log.contains("the peer refused"), "{log}");
    assert_eq!(
        std::fs::read_dir(d.root.path()).unwrap().count(),
        0,
        "nothing written"
    );
    assert!(d.alive());
    let o = d.send(
        &[],
        &[src.path().join("x").to_str().unwrap(), "127.0.0.1:in/"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(d.root.path().join("in/x")).unwrap(), b"data");
}

#[test]
fn escaping_destinations_and_symlinks_are_refused_without_writing_outside() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::write(src.path().join("x"), b"data").unwrap();
    let x = src.path().join("x");
    // The daemon refuses a path that climbs out; an absolute one is
    // refused before connecting, saying what to give instead.
    for (dest, why) in [
        ("127.0.0.1:../escape", "path_refused"),
        (
            "127.0.0.1:/etc/urmove-test",
            "give 127.0.0.1:etc/urmove-test",
        ),
        ("127.0.0.1:a/../../b", "path_refused"),
    ] {
        let o = d.send(&[], &[x.to_str().unwrap(), dest]);
        assert_eq!(o.status.code(), Some(2), "{dest}: {}", stderr(&o));
        assert!(stderr(&o).contains(why), "{dest}: {}", stderr(&o));
    }
    assert!(!Path::new("/etc/urmove-test").exists());
    assert!(!d.root.path().parent().unwrap().join("escape").exists());
    // A tree holding a symlink that climbs out of the root: links are
    // data, recreated as they are (the daemon never follows one when it
    // writes), and nothing outside the root is touched.
    let top = src.path().join("t");
    std::fs::create_dir(&top).unwrap();
    std::os::unix::fs::symlink("../../../etc/passwd", top.join("evil")).unwrap();
    let o = d.send(&[], &[top.to_str().unwrap(), "127.0.0.1:in"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = std::fs::read_link(d.root.path().join("in/t/evil")).unwrap();
    assert_eq!(got, Path::new("../../../etc/passwd"));
    // Writing through it is refused: a push to `in/t/evil` as DEST.
    let o = d.send(&[], &[x.to_str().unwrap(), "127.0.0.1:in/t/evil"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("symlink"), "{}", stderr(&o));
    assert!(!Path::new("/etc/x").exists());
}

#[test]
fn strangers_garbage_and_silence_are_refused_and_the_daemon_stays_up() {
    use urmove::protocol::control::{decode, encode, ErrorCode, Message};
    let mut d = Daemon::start();
    let refused = |reply: &[u8]| match decode(reply) {
        Ok(Some((Message::Error { code, .. }, _))) => code,
        other => panic!("expected an error message, got {other:?}"),
    };
    // A data stream for a session that does not exist.
    let hello = encode(&Message::StreamHello {
        session_id: [9; 16],
        stream_index: 0,
        proof: [1; 32],
    });
    assert_eq!(refused(&raw(d.port, &hello)), ErrorCode::AuthFailed);
    // Garbage, and an oversized length prefix.
    assert_eq!(
        refused(&raw(d.port, b"GET / HTTP/1.1\r\n\r\n")),
        ErrorCode::Malformed
    );
    assert_eq!(
        refused(&raw(d.port, &u32::MAX.to_le_bytes())),
        ErrorCode::Malformed
    );
    // Silence: dropped after the handshake timeout (2 s here).
    let mut s = TcpStream::connect(("127.0.0.1", d.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    assert!(d.alive());
    // And a real transfer still works.
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::write(src.path().join("ok"), b"fine").unwrap();
    let o = d.send(
        &[],
        &[src.path().join("ok").to_str().unwrap(), "127.0.0.1:"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn a_killed_sender_leaves_only_part_files_and_the_daemon_serves_the_next() {
    let mut d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let f = src.path().join("big.dat");
    std::fs::write(&f, crate::util::noise(64 << 20, 3)).unwrap();
    let mut child: Child = urmove()
        .args([
            "send",
            "-p",
            &d.port.to_string(),
            "--block",
            "64k",
            "-P",
            "1",
            "--key-file",
        ])
        .arg(&d.key)
        .arg(&f)
        .arg("127.0.0.1:in/")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until data is flowing, then kill -9.
    let part = d.root.path().join("in/big.dat.urmove.part");
    for _ in 0..200 {
        if std::fs::metadata(&part).is_ok_and(|m| m.len() > 0) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !d.root.path().join("in/big.dat").exists(),
        "a partial file was presented as complete"
    );
    // A part stays only with a journal of what it holds (for --resume); one
    // whose data was never journaled is removed, never left empty.
    let journal = d.root.path().join("in/big.dat.urmove.journal");
    assert!(
        !part.exists() || journal.exists(),
        "a part without its journal stayed"
    );
    assert!(d.alive());
    let o = d.send(&[], &[f.to_str().unwrap(), "127.0.0.1:in/"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(d.root.path().join("in/big.dat")).unwrap(),
        std::fs::read(&f).unwrap()
    );
}

#[test]
fn thousands_of_small_files_need_no_descriptor_each() {
    // The daemon may hold 256 descriptors; the tree has 3,000 files.
    crate::require!(
        crate::util::have("prlimit"),
        "prlimit (util-linux) not installed"
    );
    let d = Daemon::start_with(&["prlimit", "--nofile=256:256"]);
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("many");
    for i in 0..3000u64 {
        let dir = top.join(format!("d{}", i / 500));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(format!("f{i}")),
            crate::util::noise((i % 5000) as usize, i),
        )
        .unwrap();
    }
    let o = d.send(
        &["-P", "4", "--json"],
        &[top.to_str().unwrap(), "127.0.0.1:"],
    );
    assert!(o.status.success(), "{}\n{}", stderr(&o), d.log());
    assert_eq!(json(&o)["files_verified"], 3000);
    assert_same_tree(&top, &d.root.path().join("many"));
}

#[test]
fn sigterm_stops_the_daemon_cleanly() {
    let mut d = Daemon::start();
    let st = std::process::Command::new("kill")
        .args(["-TERM", &d.child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let status = d.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    std::thread::sleep(Duration::from_millis(100));
    assert!(d.log().contains("stopping"), "{}", d.log());
}

#[test]
fn holes_in_sparse_files_stay_holes() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let f = src.path().join("sparse.img");
    {
        use std::os::unix::fs::FileExt;
        let file = std::fs::File::create(&f).unwrap();
        file.set_len(16 << 20).unwrap();
        file.write_all_at(&crate::util::noise(1 << 20, 5), 5 << 20)
            .unwrap();
        file.write_all_at(b"tail", (16 << 20) - 4).unwrap();
    }
    let o = d.send(
        &["--block", "1M", "--json"],
        &[f.to_str().unwrap(), "127.0.0.1:"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let got = d.root.path().join("sparse.img");
    assert_eq!(std::fs::read(&got).unwrap(), std::fs::read(&f).unwrap());
    let m = std::fs::metadata(&got).unwrap();
    assert_eq!(m.len(), 16 << 20);
    assert!(
        m.blocks() * 512 <= 3 << 20,
        "holes were filled: {} bytes allocated",
        m.blocks() * 512
    );
    // Only the data crossed the network.
    assert!(json(&o)["bytes"].as_u64().unwrap() <= 2 << 20);
}

#[test]
fn the_demo_transfers_checks_and_cleans_up() {
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let o = urmove()
        .args(["demo", "--size", "48M", "-P", "2"])
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = crate::util::stdout(&o);
    assert!(out.contains("Net Out:") || out.contains("sent "), "{out}");
    assert!(out.contains("files verified by the receiver"), "{out}");
    assert!(
        out.contains("compared byte for byte with their sources: identical"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "the demo left files behind"
    );
}

/// Two network namespaces joined by a veth pair: the project's own test
/// hosts, removed on drop.
pub(crate) struct NetnsPair {
    pub(crate) a: String,
    pub(crate) b: String,
    pub(crate) addr_b: String,
}

impl NetnsPair {
    pub(crate) fn new() -> Option<NetnsPair> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tag = format!("{}-{n}", std::process::id() % 100_000);
        let (a, b) = (format!("urt-a-{tag}"), format!("urt-b-{tag}"));
        let subnet = 10 + (std::process::id() % 200) as u8;
        let (addr_a, addr_b) = (
            format!("10.231.{subnet}.{}", 1 + 4 * n),
            format!("10.231.{subnet}.{}", 2 + 4 * n),
        );
        let (va, vb) = (format!("ua{tag}"), format!("ub{tag}"));
        let ip = |args: &[&str]| {
            std::process::Command::new("ip")
                .args(args)
                .status()
                .is_ok_and(|s| s.success())
        };
        let pair = NetnsPair {
            a: a.clone(),
            b: b.clone(),
            addr_b: addr_b.clone(),
        };
        let ok = ip(&["netns", "add", &a])
            && ip(&["netns", "add", &b])
            && ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb])
            && ip(&["link", "set", &va, "netns", &a])
            && ip(&["link", "set", &vb, "netns", &b])
            && ip(&["-n", &a, "addr", "add", &format!("{addr_a}/30"), "dev", &va])
            && ip(&["-n", &b, "addr", "add", &format!("{addr_b}/30"), "dev", &vb])
            && ip(&["-n", &a, "link", "set", &va, "up"])
            && ip(&["-n", &b, "link", "set", &vb, "up"])
            && ip(&["-n", &a, "link", "set", "lo", "up"])
            && ip(&["-n", &b, "link", "set", "lo", "up"]);
        ok.then_some(pair)
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", ns])
                .status();
        }
    }
}

#[test]
fn a_tree_crosses_between_two_network_namespaces() {
    crate::require!(
        crate::util::is_root() && crate::util::have("ip"),
        "needs root and iproute2"
    );
    let Some(ns) = NetnsPair::new() else {
        eprintln!("skipped: cannot create network namespaces here");
        return;
    };
    let d = Daemon::start_on(&["ip", "netns", "exec", &ns.b], &ns.addr_b);
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = make_tree(src.path());
    let o = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.a])
        .arg(env!("CARGO_BIN_EXE_urmove"))
        .args([
            "send",
            "-p",
            &d.port.to_string(),
            "-P",
            "2",
            "--block",
            "1M",
            "--json",
            "--key-file",
        ])
        .arg(&d.key)
        .arg(&top)
        .arg(format!("{}:veth", ns.addr_b))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}\n{}", stderr(&o), d.log());
    assert_eq!(json(&o)["files_verified"], 6);
    assert_same_tree(&top, &d.root.path().join("veth/run42"));
}

#[test]
fn bench_net_moves_memory_to_memory_and_the_receiver_counts_it() {
    let d = Daemon::start();
    let bench = |extra: &[&str]| {
        urmove()
            .args([
                "bench",
                "--net",
                "127.0.0.1",
                "-p",
                &d.port.to_string(),
                "-P",
                "2",
                "--time",
                "1s",
                "--key-file",
            ])
            .arg(&d.key)
            .args(extra)
            .output()
            .unwrap()
    };
    for extra in [
        &["--json"][..],
        &["--json", "--verify"][..],
        &["--json", "--reverse"][..],
        &["--json", "--reverse", "--verify"][..],
    ] {
        let o = bench(extra);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        let v = json(&o);
        assert_eq!(v["status"], "ok");
        let reverse = extra.contains(&"--reverse");
        assert_eq!(
            v["command"],
            if reverse {
                "bench --net --reverse"
            } else {
                "bench --net"
            }
        );
        assert_eq!(v["streams"], 2);
        assert!(v["bytes"].as_u64().unwrap() > 0);
        let rate = v["rate_bits_per_s"].as_f64().unwrap();
        assert!(rate > 0.0);
        // The slowest interval may be empty on a loaded 2-core machine,
        // never faster than the average by more than rounding.
        let min = v["interval_rate_min_bits_per_s"].as_f64().unwrap();
        assert!((0.0..=rate * 1.5).contains(&min), "{v}");
    }
    // Human output: interval lines without a percent (no total), then the summary.
    let o = bench(&["--interval", "250ms"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = crate::util::stdout(&o);
    assert!(
        out.lines().filter(|l| l.contains("Net Out:")).count() >= 2,
        "{out}"
    );
    assert!(out.contains("the receiver counted every byte"), "{out}");
    // Nothing was written on the receiving side.
    assert_eq!(std::fs::read_dir(d.root.path()).unwrap().count(), 0);
}

/// An authenticated push session driven by hand with a chosen stream
/// count and block size, to send crafted frames; `Err` carries the
/// daemon's reply when it is not `Ready`.
fn hand_session_with(
    d: &Daemon,
    entries: Vec<urmove::protocol::manifest::Entry>,
    streams: u16,
    block_size: u32,
) -> Result<(crate::util::Control, TcpStream), urmove::protocol::control::Message> {
    let (ctl, keys) = crate::util::hand_push(d.port, &d.key, entries, streams, block_size)?;
    Ok((ctl, crate::util::data_stream(d.port, &keys, 0)))
}

#[test]
fn every_malformed_frame_class_ends_its_session_with_a_clear_error() {
    use urmove::protocol::control::{ErrorCode, Message};
    use urmove::protocol::frame::{FrameHeader, FrameKey};
    use urmove::protocol::manifest::{Entry, EntryKind};
    use urmove::protocol::seal::frame_key;
    let mut d = Daemon::start();
    let entry = Entry {
        path: "f".into(),
        kind: EntryKind::File,
        size: 100_000,
        data: 0,
        mode: 0o644,
        mtime_s: 1_600_000_000,
        mtime_ns: 0,
        link: None,
        ..Default::default()
    };
    let block = crate::util::noise(65536, 1);
    // Each case is made under its session's frame key.
    type Case<'a> = (&'a str, Box<dyn Fn(&FrameKey) -> Vec<u8> + 'a>);
    let framed = |h: FrameHeader| [h.encode().to_vec(), block.clone()].concat();
    let cases: Vec<Case> = vec![
        (
            "short",
            Box::new(|k| FrameHeader::for_payload(k, 0, 0, &block, 0).encode()[..20].to_vec()),
        ),
        (
            "oversized",
            Box::new(|k| {
                let mut h = FrameHeader::for_payload(k, 0, 0, &block, 0);
                h.length = 1 << 30;
                h.encode().to_vec()
            }),
        ),
        (
            "unknown file index",
            Box::new(|k| framed(FrameHeader::for_payload(k, 7, 0, &block, 0))),
        ),
        (
            "offset past the end",
            Box::new(|k| framed(FrameHeader::for_payload(k, 0, 98_304, &block, 0))),
        ),
        (
            "bad checksum",
            Box::new(|k| {
                let mut h = FrameHeader::for_payload(k, 0, 0, &block, 0);
                h.checksum ^= 1;
                framed(h)
            }),
        ),
        (
            "another session's checksum",
            Box::new(|_| {
                framed(FrameHeader::for_payload(
                    &FrameKey { k0: 3, k1: 4 },
                    0,
                    0,
                    &block,
                    0,
                ))
            }),
        ),
        (
            "a data frame passed off as a hole",
            Box::new(|_| {
                FrameHeader::hole(&FrameKey { k0: 3, k1: 4 }, 0, 0)
                    .encode()
                    .to_vec()
            }),
        ),
    ];
    for (what, make) in cases {
        let (mut ctl, keys) = crate::util::hand_push(d.port, &d.key, vec![entry.clone()], 1, 65536)
            .expect("the daemon is ready");
        let mut data = crate::util::data_stream(d.port, &keys, 0);
        data.write_all(&make(&frame_key(&keys))).unwrap();
        drop(data);
        let reply = crate::util::sealed_replies(&mut ctl);
        let mut got = None;
        for m in &reply {
            if let Message::Error { code, message } = m {
                got = Some((*code, message.clone()));
            }
        }
        let (code, message) =
            got.unwrap_or_else(|| panic!("{what}: no error message, got {reply:?}"));
        assert!(
            matches!(code, ErrorCode::Malformed | ErrorCode::Io),
            "{what}: {code:?} {message}"
        );
        assert!(!message.is_empty(), "{what}");
        assert!(
            !d.root.path().join("hand/f").exists(),
            "{what}: a file was presented as complete"
        );
        assert!(d.alive(), "{what}: the daemon died");
    }
    // And the daemon still serves a good session.
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::write(src.path().join("ok"), b"fine").unwrap();
    let o = d.send(
        &[],
        &[src.path().join("ok").to_str().unwrap(), "127.0.0.1:"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn files_from_sends_the_listed_paths_and_rate_limit_paces() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let a = src.path().join("a.dat");
    let b = src.path().join("dir");
    std::fs::write(&a, crate::util::noise(3 << 20, 1)).unwrap();
    std::fs::create_dir(&b).unwrap();
    std::fs::write(b.join("c.dat"), crate::util::noise(2 << 20, 2)).unwrap();
    let list = src.path().join("list.txt");
    std::fs::write(
        &list,
        format!("# the run\n{}\n\n{}\n", a.display(), b.display()),
    )
    .unwrap();
    // 40 Mbit/s is far below what loopback does: the limit must show.
    let o = d.send(
        &[
            "--files-from",
            list.to_str().unwrap(),
            "--rate-limit",
            "40Mbit",
            "--block",
            "256k",
            "--json",
        ],
        &["127.0.0.1:listed"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["files_verified"], 2);
    let rate = v["rate_bits_per_s"].as_f64().unwrap();
    assert!(rate <= 40e6 * 1.1, "rate {rate} above the limit");
    assert_eq!(
        std::fs::read(d.root.path().join("listed/a.dat")).unwrap(),
        std::fs::read(&a).unwrap()
    );
    assert_eq!(
        std::fs::read(d.root.path().join("listed/dir/c.dat")).unwrap(),
        std::fs::read(b.join("c.dat")).unwrap()
    );

    // Two sources with one name would collide: refused before connecting.
    let other = src.path().join("x");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("a.dat"), b"other").unwrap();
    let o = d.send(
        &[],
        &[
            a.to_str().unwrap(),
            other.join("a.dat").to_str().unwrap(),
            "127.0.0.1:",
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("two sources are named a.dat"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn pull_fetches_a_tree_identical_and_never_reads_outside_the_root() {
    let d = Daemon::start();
    let top = make_tree(d.root.path());
    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    let dest = local.path().join("got");
    let pull = |extra: &[&str], paths: &[&str], to: &Path| {
        urmove()
            .args(["pull", "-p", &d.port.to_string(), "--key-file"])
            .arg(&d.key)
            .args(extra)
            .args(paths)
            .arg(to)
            .output()
            .unwrap()
    };
    let o = pull(
        &["-P", "3", "--block", "1M", "--json"],
        &["127.0.0.1:run42"],
        &dest,
    );
    assert!(o.status.success(), "{}\n{}", stderr(&o), d.log());
    let v = json(&o);
    assert_eq!(v["command"], "pull");
    assert_eq!(v["status"], "ok");
    assert_eq!(v["files_verified"], 6);
    assert_same_tree(&top, &dest.join("run42"));
    assert!(no_part_files(&dest));

    // Out of the root: refused by path rules, or by openat2 for a symlink
    // inside the root that points out of it.
    let outside = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::write(outside.path().join("secret"), b"no").unwrap();
    std::os::unix::fs::symlink(outside.path(), d.root.path().join("evil")).unwrap();
    for path in [
        "127.0.0.1:../etc",
        "127.0.0.1:/etc",
        "127.0.0.1:evil/secret",
    ] {
        let to = local.path().join("refused");
        let o = pull(&[], &[path], &to);
        assert_ne!(o.status.code(), Some(0), "{path}: {}", stderr(&o));
        assert!(
            !to.join("secret").exists() && !to.join("etc").exists(),
            "{path}"
        );
        let e = stderr(&o);
        assert!(e.contains("refused") || e.contains("path"), "{path}: {e}");
    }
}

#[test]
fn requests_past_the_limits_are_refused_before_any_allocation() {
    use urmove::protocol::control::{ErrorCode, Message};
    use urmove::protocol::manifest::{Entry, EntryKind};
    let mut d = Daemon::start();
    let file = |size: u64| Entry {
        path: "f".into(),
        kind: EntryKind::File,
        size,
        data: 0,
        mode: 0o644,
        mtime_s: 0,
        mtime_ns: 0,
        link: None,
        ..Default::default()
    };
    let code = |r: Result<(crate::util::Control, TcpStream), Message>| match r {
        Err(Message::Error { code, .. }) => code,
        // A limit, as its numbers (protocol 13), ends it with its code.
        Err(Message::LimitRefused {
            limit,
            asked,
            max,
            in_use,
        }) => urmove::session::limit::LimitRefusal {
            limit,
            asked,
            max,
            in_use,
            ours: false,
        }
        .code(),
        other => panic!("expected a refusal, got {:?}", other.map(|_| "ready")),
    };
    // A block size the O_DIRECT path cannot use.
    assert_eq!(
        code(hand_session_with(&d, vec![file(10)], 1, 1000)),
        ErrorCode::BadRequest
    );
    // An exabyte file in 4 KiB blocks: the block map alone would not fit.
    assert_eq!(
        code(hand_session_with(&d, vec![file(1 << 60)], 1, 4096)),
        ErrorCode::TooLarge
    );
    // 256 streams: more than this daemon's --max-streams (64), refused
    // with the count asked and the most it takes, as fields (protocol 13's
    // LimitRefused; 12 had StreamsRefused).
    match hand_session_with(&d, vec![file(10)], 256, 64 << 20) {
        Err(Message::LimitRefused {
            limit: urmove::protocol::control::Limit::Streams,
            asked,
            max,
            ..
        }) => assert_eq!((asked, max), (256, 64)),
        other => panic!("expected a refusal, got {:?}", other.map(|_| "ready")),
    }
    assert!(d.alive());
    assert!(!d.root.path().join("hand/f").exists());
}

#[test]
fn a_symlink_cannot_climb_out_through_a_linked_parent() {
    use urmove::protocol::control::Message;
    use urmove::protocol::manifest::{Entry, EntryKind};
    let mut d = Daemon::start();
    let link = |path: &str, target: &str| Entry {
        path: path.into(),
        kind: EntryKind::Symlink,
        size: 0,
        data: 0,
        mode: 0o777,
        mtime_s: 0,
        mtime_ns: 0,
        link: Some(target.into()),
        ..Default::default()
    };
    // x -> . makes x/ the root itself; x/l -> .. would then name the
    // root's parent although it looks one level deep.
    let r = hand_session_with(&d, vec![link("x", "."), link("x/l", "..")], 1, 65536);
    assert!(
        matches!(r, Err(Message::Error { .. })),
        "accepted a climbing link"
    );
    assert!(std::fs::symlink_metadata(d.root.path().join("hand/x/l")).is_err());
    assert!(std::fs::symlink_metadata(d.root.path().join("hand/l")).is_err());
    // `..` after a name is kept as the text it is, and nothing writes
    // through it.
    let r = hand_session_with(&d, vec![link("s", "."), link("d", "../s/..")], 1, 65536);
    assert!(r.is_ok(), "refused ../s/..");
    let got = std::fs::read_link(d.root.path().join("hand/d")).unwrap();
    assert_eq!(got, Path::new("../s/.."));
    let file = |path: &str| Entry {
        path: path.into(),
        kind: EntryKind::File,
        size: 1,
        data: 0,
        mode: 0o644,
        mtime_s: 0,
        mtime_ns: 0,
        link: None,
        ..Default::default()
    };
    let r = hand_session_with(&d, vec![file("d/f")], 1, 65536);
    assert!(matches!(r, Err(Message::Error { .. })), "wrote through d");
    assert!(!d.root.path().parent().unwrap().join("f").exists());
    assert!(d.alive());
}
