//! What "verified" has to mean against key holders, local users of the
//! root and the path: each test attacks a real daemon with real processes,
//! sockets and files, then judges the outcome only (exit codes, JSON
//! fields, bytes on disk, which names exist), so it holds for any engine.
//!
//! The rules they pin down: a file appears under its final name only after
//! the sender's digest of the source and the receiver's digest of what it
//! wrote agree, and `send` exits 0 (or says "N of N files verified") only
//! then; 23 means some source entries were skipped, each named with a
//! reason, and all else verified; urmove's reserved names never cross the
//! wire; the daemon never follows a link when writing, never changes its
//! root, never trusts resume state it did not write, and never holds a
//! session slot for a file it cannot read.

use std::ffi::CString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::ops::{Deref, DerefMut};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use urmove::protocol::frame::{FrameHeader, FrameKey, FRAME_HEADER_LEN};

use crate::transfer::{assert_same_tree, no_part_files, Daemon};
use crate::util::{json, noise, output_within, stderr, stdout, urmove};

const MIB: usize = 1 << 20;
/// A bound against hangs only, never a speed check.
const HANG: Duration = Duration::from_secs(300);
const UNPRIV: [&str; 5] = [
    "setpriv",
    "--reuid=nobody",
    "--regid=nogroup",
    "--clear-groups",
    "--inh-caps=-all",
];
/// nobody with CAP_IPC_LOCK alone: locked memory is no limit (this host
/// cannot raise RLIMIT_MEMLOCK), file permissions are.
pub(crate) const UNPRIV_LOCK: [&str; 6] = [
    "setpriv",
    "--reuid=nobody",
    "--regid=nogroup",
    "--clear-groups",
    "--inh-caps=+ipc_lock",
    "--ambient-caps=+ipc_lock",
];

// ---- daemons and clients ---------------------------------------------

/// A daemon with its own `--state-dir` (where its secret lives), kept as
/// long as the daemon (and across `kill_and_restart`).
struct Rx {
    d: Daemon,
    state: tempfile::TempDir,
}

impl Deref for Rx {
    type Target = Daemon;
    fn deref(&self) -> &Daemon {
        &self.d
    }
}

impl DerefMut for Rx {
    fn deref_mut(&mut self) -> &mut Daemon {
        &mut self.d
    }
}

/// A daemon with its root in /var/tmp and `extra` options.
fn rx(extra: &[&str]) -> Rx {
    rx_in(Path::new("/var/tmp"), extra)
}

/// A daemon whose root is a new directory in `parent`.
fn rx_in(parent: &Path, extra: &[&str]) -> Rx {
    let state = tempfile::tempdir_in("/var/tmp").unwrap();
    let mut args = vec!["--state-dir", state.path().to_str().unwrap()];
    args.extend_from_slice(extra);
    Rx {
        d: Daemon::start_full(&[], "127.0.0.1", parent, &args),
        state,
    }
}

/// `urmove SUB -p PORT --key-file KEY EXTRA...` (send or pull).
fn client(d: &Daemon, sub: &str, port: u16, extra: &[&str], args: &[&str]) -> Command {
    let mut c = urmove();
    c.args([sub, "-p", &port.to_string(), "--key-file"])
        .arg(&d.key)
        .args(extra)
        .args(args);
    c
}

fn send(d: &Daemon, extra: &[&str], args: &[&str]) -> Output {
    output_within(client(d, "send", d.port, extra, args), HANG)
}

fn pull(d: &Daemon, extra: &[&str], args: &[&str]) -> Output {
    output_within(client(d, "pull", d.port, extra, args), HANG)
}

fn spawn(mut c: Command) -> Child {
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Wait for a spawned client (its pipes drained meanwhile), killing it if
/// it outlives [`HANG`].
fn finish(child: Child) -> Output {
    let pid = child.id().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output().unwrap()));
    rx.recv_timeout(HANG).unwrap_or_else(|_| {
        // Not reaped yet, so the pid is still this child's.
        let _ = Command::new("kill").args(["-9", &pid]).status();
        panic!("a client still ran after {HANG:?}")
    })
}

fn both(o: &Output) -> String {
    format!("stdout: {}\nstderr: {}", stdout(o), stderr(o))
}

/// Wait until the daemon logs a `Net In` line at `pct` percent or more.
fn wait_for_percent(d: &Daemon, pct: f64) {
    assert!(percent_or_exit(d, pct, None), "unreachable");
}

/// Wait until the daemon logs `pct` percent or more (true), or until
/// `client` exits first (false).
fn percent_or_exit(d: &Daemon, pct: f64, mut client: Option<&mut Child>) -> bool {
    let until = Instant::now() + Duration::from_secs(120);
    let mut seen = String::new();
    while Instant::now() < until {
        if let Some(c) = client.as_mut() {
            if c.try_wait().unwrap().is_some() {
                return false;
            }
        }
        for line in d.log().lines() {
            seen += line;
            seen += "\n";
            let at = line
                .split_whitespace()
                .find_map(|w| w.strip_suffix('%').and_then(|p| p.parse::<f64>().ok()));
            if at.is_some_and(|p| p >= pct) {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the transfer never reached {pct}%:\n{seen}");
}

/// A JSON number field, absent counting as 0.
fn n(v: &serde_json::Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

/// The run failed and counted fewer than `files` files as verified.
fn assert_not_verified(o: &Output, files: u64) {
    assert_ne!(o.status.code(), Some(0), "{}", both(o));
    let v = json(o);
    assert_ne!(v["status"], "ok", "{v}");
    assert!(n(&v, "files_verified") < files, "{v}");
}

/// Exit 23 with JSON status "partial": the skipped paths with their
/// reasons (every reason non-empty, `files_skipped` their count).
fn partial_skips(o: &Output) -> Vec<(String, String)> {
    assert_eq!(o.status.code(), Some(23), "{}", both(o));
    let v = json(o);
    assert_eq!(v["status"], "partial", "{v}");
    let skipped: Vec<(String, String)> = v["skipped"]
        .as_array()
        .unwrap_or_else(|| panic!("no skipped list: {v}"))
        .iter()
        .map(|s| {
            (
                s["path"].as_str().unwrap_or_default().to_string(),
                s["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert!(skipped.iter().all(|(_, r)| !r.is_empty()), "{v}");
    assert_eq!(n(&v, "files_skipped"), skipped.len() as u64, "{v}");
    skipped
}

fn named(skipped: &[(String, String)], name: &str) -> bool {
    skipped.iter().any(|(p, _)| p.ends_with(name))
}

// ---- files -----------------------------------------------------------

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir_in("/var/tmp").unwrap()
}

fn set_mtime(p: &Path, secs: u64) {
    std::fs::File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap();
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode_of(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn mkfifo(p: &Path) {
    let st = Command::new("mkfifo").arg(p).status().unwrap();
    assert!(st.success(), "mkfifo {p:?}");
}

fn chown_nobody(p: &Path) {
    let st = Command::new("chown")
        .args(["-R", "nobody:nogroup"])
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success());
}

/// `top/big.dat` of `big` bytes and ten small files; returns `top`.
fn make_run(dir: &Path, big: usize) -> PathBuf {
    let top = dir.join("run");
    std::fs::create_dir_all(&top).unwrap();
    std::fs::write(top.join("big.dat"), noise(big, 11)).unwrap();
    for i in 0..10 {
        std::fs::write(top.join(format!("s{i}")), noise(10_000 + i, i as u64)).unwrap();
    }
    top
}

/// A small tree: a file of three 1 MiB blocks and a tail, small files.
fn small_tree(dir: &Path) -> PathBuf {
    let top = dir.join("t");
    std::fs::create_dir_all(top.join("sub")).unwrap();
    std::fs::write(top.join("multi.dat"), noise(3 * MIB + 777, 1)).unwrap();
    std::fs::write(top.join("one"), noise(1, 2)).unwrap();
    std::fs::write(top.join("empty"), b"").unwrap();
    std::fs::write(top.join("sub/page"), noise(4096, 3)).unwrap();
    std::fs::write(top.join("sub/odd"), noise(12_345, 4)).unwrap();
    top
}

/// `.urmove.part` files of no bytes beneath `dir`.
fn empty_parts(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else if e.file_name().to_string_lossy().ends_with(".urmove.part") && m.len() == 0 {
                out.push(e.path());
            }
        }
    }
    out
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn get_xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let (p, name) = (cpath(p), CString::new(name).unwrap());
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid C strings and a buffer of the length given.
    let n = unsafe {
        libc::getxattr(
            p.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    (n >= 0).then(|| {
        buf.truncate(n as usize);
        buf
    })
}

fn set_xattr(p: &Path, name: &str, value: &[u8]) {
    let (p, name) = (cpath(p), CString::new(name).unwrap());
    // SAFETY: valid C strings and a value of the length given.
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(r, 0, "setxattr: {}", std::io::Error::last_os_error());
}

// ---- a relay between a client and the daemon ---------------------------

#[derive(Clone, Copy, PartialEq)]
enum RelayMode {
    /// On data streams, flip a byte in the payload of the first frame of
    /// `len` bytes and give it a header whose checksum fits the new bytes.
    AlterOneFrame { len: u32 },
    /// Hold every data stream (not connecting it on) from its first byte
    /// (its hello, said once the daemon is ready: a client of protocol 13
    /// connects its streams earlier, while the session is set up) until
    /// released.
    HoldData,
}

/// A TCP relay on 127.0.0.1 in front of a daemon. Connection 0 is the
/// control connection and passes untouched; later ones are data streams.
struct Relay {
    port: u16,
    /// An altered frame went on, or a data stream arrived (held).
    struck: Arc<AtomicBool>,
    release: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Relay {
    fn start(target: u16, mode: RelayMode) -> Relay {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let (struck, release, stop) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (struck2, release2, stop2) = (struck.clone(), release.clone(), stop.clone());
        std::thread::spawn(move || {
            for (k, c) in l.incoming().enumerate() {
                let Ok(client) = c else { return };
                if stop2.load(Ordering::Relaxed) {
                    return;
                }
                let (struck, release) = (struck2.clone(), release2.clone());
                std::thread::spawn(move || {
                    if k > 0 && mode == RelayMode::HoldData {
                        client
                            .set_read_timeout(Some(Duration::from_secs(120)))
                            .unwrap();
                        let _ = client.peek(&mut [0u8; 1]);
                        struck.store(true, Ordering::Relaxed);
                        let until = Instant::now() + Duration::from_secs(120);
                        while !release.load(Ordering::Relaxed) && Instant::now() < until {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    }
                    let Ok(up) = TcpStream::connect(("127.0.0.1", target)) else {
                        return;
                    };
                    let (c2, u2) = (client.try_clone().unwrap(), up.try_clone().unwrap());
                    std::thread::spawn(move || copy(u2, c2));
                    match mode {
                        RelayMode::AlterOneFrame { len } if k > 0 => {
                            copy_altering(client, up, len, &struck)
                        }
                        _ => copy(client, up),
                    }
                });
            }
        });
        Relay {
            port,
            struck,
            release,
            stop,
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.release.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
}

/// Relay a data stream frame by frame: its StreamHello, then 32-byte
/// headers each followed by `length` payload bytes; the first frame of
/// `len` bytes goes on with one byte flipped and a checksum to match.
fn copy_altering(mut from: TcpStream, mut to: TcpStream, len: u32, struck: &AtomicBool) {
    let mut hello = Vec::new();
    let mut byte = [0u8; 1];
    // Byte by byte, so the first whole message is exactly the hello.
    while crate::util::messages(&hello).is_empty() {
        if hello.len() > 4096 || from.read_exact(&mut byte).is_err() {
            let _ = to.shutdown(Shutdown::Write);
            return;
        }
        hello.push(byte[0]);
    }
    if to.write_all(&hello).is_err() {
        return;
    }
    let mut head = [0u8; FRAME_HEADER_LEN];
    while from.read_exact(&mut head).is_ok() {
        let Ok(h) = FrameHeader::decode(&head) else {
            let _ = to.write_all(&head);
            return copy(from, to);
        };
        let mut payload = vec![0u8; h.length as usize];
        if from.read_exact(&mut payload).is_err() {
            break;
        }
        let mut out = head;
        if h.length == len && !h.is_hole() && !struck.swap(true, Ordering::Relaxed) {
            payload[len as usize / 2] ^= 0x5A;
            // No key on the path: a checksum under a guessed one.
            let guess = FrameKey { k0: 1, k1: 1 };
            out = FrameHeader::for_payload(&guess, h.file_index, h.offset, &payload, h.flags)
                .encode();
        }
        if to.write_all(&out).is_err() || to.write_all(&payload).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// Spawn a daemon command and wait for its "listening on" line: the port
/// and its log, or its exit code and everything it printed. (The caller
/// owns, kills and reaps a daemon that listens.)
#[allow(clippy::type_complexity, clippy::zombie_processes)]
pub(crate) fn spawn_daemon(
    mut cmd: Command,
) -> Result<(Child, u16, std::sync::mpsc::Receiver<String>), (Option<i32>, String)> {
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    let (tx, log) = std::sync::mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let until = Instant::now() + Duration::from_secs(30);
    let mut seen = String::new();
    while Instant::now() < until {
        match log.recv_timeout(Duration::from_millis(50)) {
            Ok(line) => {
                if let Some(port) = line
                    .split("listening on 127.0.0.1:")
                    .nth(1)
                    .and_then(|r| r.split(',').next())
                    .and_then(|p| p.parse().ok())
                {
                    return Ok((child, port, log));
                }
                seen += &line;
                seen += "\n";
            }
            Err(_) => {
                if let Some(st) = child.try_wait().unwrap() {
                    std::thread::sleep(Duration::from_millis(100));
                    seen.extend(log.try_iter().map(|l| l + "\n"));
                    return Err((st.code(), seen));
                }
            }
        }
    }
    let _ = child.kill();
    panic!("the daemon neither listened nor exited: {seen}");
}

/// `urmove recv` on 127.0.0.1 under `wrapper`.
pub(crate) fn recv_cmd(
    wrapper: &[&str],
    root: &Path,
    key: &Path,
    state: &Path,
    extra: &[&str],
) -> Command {
    let mut c = Command::new(wrapper[0]);
    c.args(&wrapper[1..])
        .arg(env!("CARGO_BIN_EXE_urmove"))
        .args(["recv", "--listen", "127.0.0.1:0", "--interval", "100ms"])
        .arg("--root")
        .arg(root)
        .arg("--key-file")
        .arg(key)
        .arg("--state-dir")
        .arg(state)
        .args(extra);
    c
}

pub(crate) struct Killed(pub(crate) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// ---- 1. documented stream counts --------------------------------------

const STREAM_COUNTS: [&str; 5] = ["1", "7", "8", "16", "64"];

#[test]
fn send_works_with_every_documented_stream_count_and_block_size() {
    let d = rx(&["--max-streams", "64"]);
    let src = tmp();
    let top = small_tree(src.path());
    let mut runs: Vec<(String, Vec<&str>)> = STREAM_COUNTS
        .iter()
        .map(|p| (format!("p{p}"), vec!["-P", *p, "--block", "1M"]))
        .collect();
    runs.push(("p64-4m".into(), vec!["-P", "64"]));
    runs.push(("p16-64m".into(), vec!["-P", "16", "--block", "64M"]));
    for (dest, opts) in &runs {
        let mut extra = opts.clone();
        extra.push("--json");
        let o = send(
            &d,
            &extra,
            &[top.to_str().unwrap(), &format!("127.0.0.1:{dest}")],
        );
        assert_eq!(o.status.code(), Some(0), "{opts:?}: {}", both(&o));
        let v = json(&o);
        assert_eq!(v["status"], "ok", "{opts:?}: {v}");
        assert_eq!(n(&v, "files_verified"), 5, "{opts:?}: {v}");
        assert_eq!(v["streams"].to_string(), opts[1], "{opts:?}: {v}");
        assert_same_tree(&top, &d.root.path().join(dest).join("t"));
    }
    assert!(no_part_files(d.root.path()));
}

#[test]
fn pull_works_with_every_documented_stream_count() {
    let d = rx(&["--max-streams", "64"]);
    let top = small_tree(d.root.path());
    let local = tmp();
    let mut runs: Vec<Vec<&str>> = STREAM_COUNTS
        .iter()
        .map(|p| vec!["-P", *p, "--block", "1M"])
        .collect();
    runs.push(vec!["-P", "64"]);
    for (i, opts) in runs.iter().enumerate() {
        let to = local.path().join(format!("run{i}"));
        let mut extra = opts.clone();
        extra.push("--json");
        let o = pull(&d, &extra, &["127.0.0.1:t", to.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{opts:?}: {}", both(&o));
        let v = json(&o);
        assert_eq!(v["status"], "ok", "{opts:?}: {v}");
        assert_eq!(v["streams"].to_string(), opts[1], "{opts:?}: {v}");
        assert_same_tree(&top, &to.join("t"));
        assert!(no_part_files(&to));
    }
}

#[test]
fn bench_net_works_with_every_documented_stream_count() {
    let d = rx(&["--max-streams", "64"]);
    for p in STREAM_COUNTS {
        let mut c = urmove();
        c.args(["bench", "--net", "127.0.0.1", "-p", &d.port.to_string()])
            .args(["-P", p, "--time", "1s", "--json", "--key-file"])
            .arg(&d.key);
        let o = output_within(c, HANG);
        assert_eq!(o.status.code(), Some(0), "-P {p}: {}", both(&o));
        let v = json(&o);
        assert_eq!(v["status"], "ok", "-P {p}: {v}");
        assert_eq!(v["streams"].to_string(), p, "{v}");
    }
}

// ---- 2. a frame altered on the path -----------------------------------

#[test]
fn a_frame_altered_on_the_path_with_a_matching_checksum_is_never_committed() {
    let d = rx(&[]);
    let src = tmp();
    let top = small_tree(src.path());
    // Only multi.dat has whole 1 MiB blocks: the altered frame is one of its.
    let relay = Relay::start(d.port, RelayMode::AlterOneFrame { len: MIB as u32 });
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    let o = output_within(
        client(
            &d,
            "send",
            relay.port,
            &["-P", "2", "--block", "1M", "--json"],
            &args,
        ),
        HANG,
    );
    assert!(relay.struck.load(Ordering::Relaxed), "no frame was altered");
    assert_not_verified(&o, 5);
    let fin = d.root.path().join("in/t/multi.dat");
    assert!(
        std::fs::symlink_metadata(&fin).is_err(),
        "the altered file was committed under its final name: {}",
        both(&o)
    );
    // A direct retry mends it, never "verified" with the wrong bytes.
    let o = send(
        &d,
        &["--resume", "-P", "2", "--block", "1M", "--json"],
        &args,
    );
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    // The altered file verified now; the others unchanged since the first run.
    let v = json(&o);
    assert!(n(&v, "files_verified") >= 1, "{v}");
    assert_eq!(n(&v, "files_verified") + n(&v, "files_unchanged"), 5, "{v}");
    assert_same_tree(&top, &d.root.path().join("in/t"));
}

// ---- 3. a second key holder against a victim's transfer ----------------

#[test]
fn a_second_key_holder_cannot_reach_a_victims_part_file() {
    let d = rx(&[]);
    let src = tmp();
    let victim = src.path().join("big.dat");
    std::fs::write(&victim, noise(48 * MIB + 5, 21)).unwrap();
    let evil_dir = src.path().join("evil");
    std::fs::create_dir(&evil_dir).unwrap();
    let evil = evil_dir.join("big.dat.urmove.part");
    std::fs::write(&evil, vec![b'A'; 3 * MIB]).unwrap();

    let slow = ["--rate-limit", "8MB", "-P", "2", "--block", "1M"];
    let v = spawn(client(
        &d,
        "send",
        d.port,
        &slow,
        &[victim.to_str().unwrap(), "127.0.0.1:in/"],
    ));
    wait_for_percent(&d, 5.0);
    let attack = send(&d, &["--json"], &[evil.to_str().unwrap(), "127.0.0.1:in/"]);
    let o = finish(v);
    let got = std::fs::read(d.root.path().join("in/big.dat")).ok();
    let same = got.as_deref() == Some(&std::fs::read(&victim).unwrap()[..]);
    assert!(
        same || o.status.code() != Some(0),
        "the victim's exit 0 is a lie"
    );
    assert!(same, "the victim's file: {}", both(&o));
    assert_eq!(o.status.code(), Some(0), "the victim: {}", both(&o));
    assert_not_verified(&attack, 1);
    for left in [
        "in/big.dat.urmove.part",
        "in/big.dat.urmove.part.urmove.part",
    ] {
        assert!(
            std::fs::symlink_metadata(d.root.path().join(left)).is_err(),
            "{left} is left"
        );
    }
}

#[test]
fn a_second_key_holder_cannot_write_a_victims_file_through_a_symlinked_destination() {
    let d = rx(&[]);
    let src = tmp();
    // The attacker's link, sent first: alias -> victimdir (in the root).
    let link_dir = src.path().join("l");
    std::fs::create_dir(&link_dir).unwrap();
    std::os::unix::fs::symlink("victimdir", link_dir.join("alias")).unwrap();
    let o = send(
        &d,
        &[],
        &[link_dir.join("alias").to_str().unwrap(), "127.0.0.1:"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));

    let vdir = src.path().join("victimdir");
    std::fs::create_dir(&vdir).unwrap();
    let victim = vdir.join("big.dat");
    std::fs::write(&victim, noise(48 * MIB + 5, 22)).unwrap();
    let evil_dir = src.path().join("evil");
    std::fs::create_dir(&evil_dir).unwrap();
    let evil = evil_dir.join("big.dat");
    std::fs::write(&evil, vec![b'E'; 4 * MIB]).unwrap();

    let v = spawn(client(
        &d,
        "send",
        d.port,
        &["--rate-limit", "8MB", "-P", "2", "--block", "1M"],
        &[vdir.to_str().unwrap(), "127.0.0.1:"],
    ));
    wait_for_percent(&d, 5.0);
    let o = send(
        &d,
        &["--json"],
        &[evil.to_str().unwrap(), "127.0.0.1:alias"],
    );
    let fin = d.root.path().join("victimdir/big.dat");
    if o.status.success() {
        // Accepted: then it must have landed anywhere but the victim's file.
        assert_ne!(
            std::fs::read(&fin).ok(),
            Some(std::fs::read(&evil).unwrap()),
            "the attacker wrote the victim's file through the link"
        );
    }
    let o = finish(v);
    let same = std::fs::read(&fin).ok() == Some(std::fs::read(&victim).unwrap());
    assert!(
        same || o.status.code() != Some(0),
        "the victim's exit 0 is a lie"
    );
    assert!(same, "the victim's file: {}", both(&o));
    assert_eq!(o.status.code(), Some(0), "the victim: {}", both(&o));
}

// ---- 4. links planted at part names -----------------------------------

#[test]
fn a_symlink_planted_at_a_part_name_is_never_written_through() {
    let parent = tmp();
    let d = rx_in(parent.path(), &[]);
    let outside = parent.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("victim"), b"VICTIM outside the root").unwrap();
    std::fs::write(d.root.path().join("third"), b"THIRD inside the root").unwrap();
    let dest = d.root.path().join("dest");
    std::fs::create_dir(&dest).unwrap();
    std::os::unix::fs::symlink("../../outside/victim", dest.join("f.urmove.part")).unwrap();
    std::os::unix::fs::symlink("../third", dest.join("g.urmove.part")).unwrap();
    let src = tmp();
    for (name, seed) in [("g", 41), ("f", 42)] {
        let p = src.path().join(name);
        std::fs::write(&p, noise(100_000, seed)).unwrap();
        let o = send(&d, &["--json"], &[p.to_str().unwrap(), "127.0.0.1:dest"]);
        assert_eq!(
            std::fs::read(outside.join("victim")).unwrap(),
            b"VICTIM outside the root",
            "{name}: written through a link out of the root"
        );
        assert_eq!(
            std::fs::read(d.root.path().join("third")).unwrap(),
            b"THIRD inside the root",
            "{name}: written through a link to another file"
        );
        assert_eq!(o.status.code(), Some(0), "{name}: {}", both(&o));
        let got = dest.join(name);
        assert!(std::fs::symlink_metadata(&got).unwrap().is_file(), "{name}");
        assert_eq!(std::fs::read(&got).unwrap(), std::fs::read(&p).unwrap());
    }
}

// ---- 5. forged resume state -------------------------------------------

#[test]
fn a_journal_claiming_blocks_its_part_does_not_hold_never_verifies_wrong_bytes() {
    let mut d = rx(&[]);
    let secret = d.state.path().join("secret");
    let m = std::fs::metadata(&secret).expect("the daemon's secret in its --state-dir");
    assert_eq!(m.mode() & 0o077, 0, "the secret is readable by others");
    let src = tmp();
    let top = make_run(src.path(), 80 * MIB + 777);
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    let first = spawn(client(
        &d,
        "send",
        d.port,
        &[
            "--rate-limit",
            "20MB",
            "-P",
            "2",
            "--block",
            "1M",
            "--timeout",
            "5s",
        ],
        &args,
    ));
    wait_for_percent(&d, 55.0);
    d.kill_and_restart();
    assert!(!finish(first).status.success());
    // The genuine journal stays; the blocks it names are zeroed in place
    // (same inode, same length), as a torn or tampered part would be.
    let part = d.root.path().join("in/run/big.dat.urmove.part");
    let len = std::fs::metadata(&part)
        .expect("a part file to resume")
        .len();
    let f = std::fs::File::options().write(true).open(&part).unwrap();
    f.set_len(0).unwrap();
    f.set_len(len).unwrap();
    drop(f);
    let fin = d.root.path().join("in/run/big.dat");
    let want = std::fs::read(top.join("big.dat")).unwrap();
    let o = send(
        &d,
        &["--resume", "-P", "2", "--block", "1M", "--json"],
        &args,
    );
    if o.status.code() == Some(0) {
        assert_eq!(n(&json(&o), "files_verified"), 11);
        assert!(
            std::fs::read(&fin).unwrap() == want,
            "exit 0 with zeroed blocks"
        );
    } else {
        assert_not_verified(&o, 11);
        if let Ok(got) = std::fs::read(&fin) {
            assert!(got == want, "a failed file was committed");
        }
        // A plain send afterwards still delivers it.
        let o = send(&d, &["--json"], &args);
        assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    }
    assert_same_tree(&top, &d.root.path().join("in/run"));
}

#[test]
fn a_stamp_copied_onto_a_planted_file_does_not_make_it_complete() {
    let d = rx(&[]);
    let src = tmp();
    let top = src.path().join("t");
    std::fs::create_dir(&top).unwrap();
    for (name, seed) in [("A", 51), ("B", 52)] {
        std::fs::write(top.join(name), noise(2 * MIB + 5, seed)).unwrap();
        set_mtime(&top.join(name), 1_600_000_000);
    }
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    let o = send(&d, &["--block", "1M"], &args);
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    let got = d.root.path().join("in/t");
    let Some(stamp) = get_xattr(&got.join("A"), "user.urmove") else {
        eprintln!("skipped: no user.urmove stamp here (no user xattrs?)");
        return;
    };
    // A new file of garbage at B's name, same size and mtime, A's stamp.
    std::fs::remove_file(got.join("B")).unwrap();
    std::fs::write(got.join("B"), noise(2 * MIB + 5, 99)).unwrap();
    set_mtime(&got.join("B"), 1_600_000_000);
    set_xattr(&got.join("B"), "user.urmove", &stamp);
    let o = send(&d, &["--resume", "--block", "1M", "--json"], &args);
    let same = std::fs::read(got.join("B")).unwrap() == std::fs::read(top.join("B")).unwrap();
    if !same {
        // Never counted verified while garbage...
        assert_not_verified(&o, 2);
    }
    // ...and not left so: a resume mends it.
    assert!(same, "B is still garbage: {}", both(&o));
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    assert_same_tree(&top, &got);
}

#[test]
fn reserved_names_never_cross_the_wire() {
    let d = rx(&[]);
    let src = tmp();
    let journal = src.path().join("x.urmove.journal");
    std::fs::write(&journal, b"not a journal").unwrap();
    let dir = src.path().join("d.urmove.part");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("z"), b"inside").unwrap();
    for (p, name) in [(&journal, "x.urmove.journal"), (&dir, "d.urmove.part")] {
        let o = send(&d, &["--json"], &[p.to_str().unwrap(), "127.0.0.1:in"]);
        assert_not_verified(&o, 1);
        assert!(stderr(&o).contains(name), "names {name}: {}", both(&o));
        assert!(
            std::fs::symlink_metadata(d.root.path().join("in").join(name)).is_err(),
            "{name} was written"
        );
    }
    // Pull: never listed when walking, refused when named.
    let pd = d.root.path().join("pd");
    std::fs::create_dir(&pd).unwrap();
    std::fs::write(pd.join("a"), noise(5000, 1)).unwrap();
    for r in ["a.urmove.part", "a.urmove.journal", "a.urmove.journal.tmp"] {
        std::fs::write(pd.join(r), b"reserved").unwrap();
    }
    let local = tmp();
    let o = pull(
        &d,
        &["--json"],
        &["127.0.0.1:pd", local.path().to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    assert_eq!(names(&local.path().join("pd")), ["a"]);
    assert_eq!(
        std::fs::read(local.path().join("pd/a")).unwrap(),
        std::fs::read(pd.join("a")).unwrap()
    );
    let other = tmp();
    let o = pull(
        &d,
        &["--json"],
        &["127.0.0.1:pd/a.urmove.part", other.path().to_str().unwrap()],
    );
    assert_not_verified(&o, 1);
    assert!(names(other.path()).is_empty(), "{:?}", names(other.path()));
}

// ---- 6. harm to the root ----------------------------------------------

#[test]
fn a_key_holder_cannot_change_the_root_through_a_link_and_setid_bits_are_dropped() {
    let d = rx(&[]);
    let root_mode = mode_of(d.root.path());
    let src = tmp();
    let l = src.path().join("l");
    std::fs::create_dir(&l).unwrap();
    std::os::unix::fs::symlink(".", l.join("link")).unwrap();
    let _ = send(&d, &[], &[l.join("link").to_str().unwrap(), "127.0.0.1:"]);
    for mode in [0o000, 0o1777] {
        let h = src.path().join(format!("m{mode:o}"));
        std::fs::create_dir_all(h.join("link")).unwrap();
        chmod(&h.join("link"), mode);
        let _ = send(&d, &[], &[h.join("link").to_str().unwrap(), "127.0.0.1:"]);
        let now = mode_of(d.root.path());
        chmod(d.root.path(), root_mode);
        assert_eq!(
            now, root_mode,
            "a directory of mode {mode:o} changed the root's mode"
        );
    }
    let f = src.path().join("after");
    std::fs::write(&f, noise(70_000, 6)).unwrap();
    let o = send(&d, &[], &[f.to_str().unwrap(), "127.0.0.1:later/"]);
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    assert_eq!(
        std::fs::read(d.root.path().join("later/after")).unwrap(),
        std::fs::read(&f).unwrap()
    );

    // setuid and setgid from the wire are dropped, unless --keep-setid.
    let s = src.path().join("suid");
    std::fs::write(&s, b"#!/bin/sh\n").unwrap();
    chmod(&s, 0o6755);
    let o = send(&d, &[], &[s.to_str().unwrap(), "127.0.0.1:bits/"]);
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    assert_eq!(mode_of(&d.root.path().join("bits/suid")), 0o755);
    let k = rx(&["--keep-setid"]);
    let o = send(&k, &[], &[s.to_str().unwrap(), "127.0.0.1:bits/"]);
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    assert_eq!(mode_of(&k.root.path().join("bits/suid")), 0o6755);
}

// ---- 7. a FIFO swapped in during a pull --------------------------------

#[test]
fn a_fifo_swapped_in_during_a_pull_never_holds_a_session() {
    let d = rx(&["--max-sessions", "4"]);
    let others: Vec<String> = (0..50).map(|i| format!("o{i:02}")).collect();
    // The daemon's log is not shared: the runs take what they need.
    let (port, root, key) = (d.port, d.root.path().to_path_buf(), d.key.clone());
    let outcomes = std::thread::scope(|s| {
        let runs: Vec<_> = (0..4)
            .map(|i| {
                let (root, key, others) = (&root, &key, &others);
                s.spawn(move || {
                    let tree = root.join(format!("p{i}"));
                    let dir = tree.join("d");
                    std::fs::create_dir_all(&dir).unwrap();
                    std::fs::write(dir.join("f"), noise(200_000, i)).unwrap();
                    for (k, o) in others.iter().enumerate() {
                        std::fs::write(dir.join(o), noise(20_000 + k, k as u64)).unwrap();
                    }
                    // Data streams wait in the relay: the daemon has listed
                    // d/f as a regular file and opened nothing yet.
                    let relay = Relay::start(port, RelayMode::HoldData);
                    let local = tmp();
                    let c = key_client(
                        key,
                        "pull",
                        relay.port,
                        &["-P", "1", "--timeout", "20s", "--json"],
                        &[&format!("127.0.0.1:p{i}/d"), local.path().to_str().unwrap()],
                    );
                    let child = spawn(c);
                    let until = Instant::now() + Duration::from_secs(60);
                    while !relay.struck.load(Ordering::Relaxed) && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    std::fs::remove_file(dir.join("f")).unwrap();
                    if i % 2 == 0 {
                        mkfifo(&tree.join("fifo"));
                        std::os::unix::fs::symlink("../fifo", dir.join("f")).unwrap();
                    } else {
                        mkfifo(&dir.join("f"));
                    }
                    relay.release.store(true, Ordering::Relaxed);
                    let o = finish(child);
                    let code = o.status.code();
                    assert!(code == Some(23) || code == Some(1), "run {i}: {}", both(&o));
                    assert!(both(&o).contains("d/f"), "run {i} names d/f: {}", both(&o));
                    for o in others {
                        assert_eq!(
                            std::fs::read(local.path().join("d").join(o)).ok(),
                            std::fs::read(dir.join(o)).ok(),
                            "run {i}: {o}"
                        );
                    }
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join()).collect::<Vec<_>>()
    });
    // Every slot is free again: a fifth session (of at most 4) is served.
    std::fs::write(d.root.path().join("plain"), b"after the fifos").unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let local = tmp();
        let o = pull(
            &d,
            &["--json"],
            &["127.0.0.1:plain", local.path().to_str().unwrap()],
        );
        if o.status.success() {
            assert_eq!(
                std::fs::read(local.path().join("plain")).unwrap(),
                b"after the fifos"
            );
            break;
        }
        assert!(
            Instant::now() < until,
            "the daemon's slots are held: {}",
            both(&o)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Then each run's own verdict (its message is printed above).
    for r in outcomes {
        if let Err(panic) = r {
            std::panic::resume_unwind(panic);
        }
    }
}

// ---- 8. one bad entry never sinks a tree --------------------------------

#[test]
fn special_unreadable_and_vanished_entries_are_skipped_and_the_rest_verified() {
    crate::require!(crate::util::is_root(), "needs root (mknod, setpriv)");
    let d = rx(&[]);
    let src = tmp();
    chmod(src.path(), 0o755);
    let top = src.path().join("tree");
    std::fs::create_dir(&top).unwrap();
    std::fs::write(top.join("a_big"), noise(24 * MIB + 3, 81)).unwrap();
    let good = ["a_big", "b_small", "c_empty", "sub/d_deep"];
    std::fs::create_dir(top.join("sub")).unwrap();
    std::fs::write(top.join("b_small"), noise(5000, 82)).unwrap();
    std::fs::write(top.join("c_empty"), b"").unwrap();
    std::fs::write(top.join("sub/d_deep"), noise(70_000, 83)).unwrap();
    mkfifo(&top.join("fifo"));
    let _sock = std::os::unix::net::UnixListener::bind(top.join("sock")).unwrap();
    let st = Command::new("mknod")
        .arg(top.join("null"))
        .args(["c", "1", "3"])
        .status()
        .unwrap();
    assert!(st.success(), "mknod");
    std::fs::write(top.join("secret"), b"root only").unwrap();
    chmod(&top.join("secret"), 0o600);
    std::fs::write(top.join("z_gone"), noise(3000, 84)).unwrap();
    // The sender runs as nobody (the tree stays root's) with its own key
    // copy, and CAP_IPC_LOCK so its buffers are not what this tests.
    let keydir = tmp();
    chmod(keydir.path(), 0o755);
    let key = keydir.path().join("key");
    std::fs::copy(&d.key, &key).unwrap();
    chown_nobody(&key);
    let mut c = Command::new(UNPRIV_LOCK[0]);
    c.args(&UNPRIV_LOCK[1..])
        .arg(env!("CARGO_BIN_EXE_urmove"))
        .args(["send", "-p", &d.port.to_string(), "--key-file"])
        .arg(&key)
        .args(["-P", "1", "--block", "1M", "--rate-limit", "8MB", "--json"])
        .arg(&top)
        .arg("127.0.0.1:in");
    let mut child = spawn(c);
    // While a_big crosses, z_gone (listed already) disappears.
    if percent_or_exit(&d, 5.0, Some(&mut child)) {
        std::fs::remove_file(top.join("z_gone")).unwrap();
    }
    let o = finish(child);
    let skipped = partial_skips(&o);
    assert!(named(&skipped, "secret"), "secret not among {skipped:?}");
    for special in ["fifo", "sock", "null"] {
        assert!(!named(&skipped, special), "{special} among {skipped:?}");
    }
    let got = d.root.path().join("in/tree");
    // A FIFO and a socket arrive as rsync -a makes them; a device node
    // waits for -D, counted apart.
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(got.join("fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
    assert!(std::fs::symlink_metadata(got.join("sock"))
        .unwrap()
        .file_type()
        .is_socket());
    assert!(!got.join("null").exists());
    assert_eq!(json(&o)["devices_left_out"], 1);
    // Gone before it was read: skipped; read before it went: delivered.
    if !named(&skipped, "z_gone") {
        assert_eq!(std::fs::read(got.join("z_gone")).unwrap(), noise(3000, 84));
    }
    let v = json(&o);
    assert!(n(&v, "files_verified") >= good.len() as u64, "{v}");
    for g in good {
        assert_eq!(
            std::fs::read(got.join(g)).unwrap(),
            std::fs::read(top.join(g)).unwrap(),
            "{g}"
        );
    }
    assert!(no_part_files(d.root.path()));
}

// ---- 9. symlinks are data ---------------------------------------------

#[test]
fn symlinks_are_recreated_as_they_are_skipped_or_refused_as_configured() {
    let src = tmp();
    let s = src.path().join("s");
    std::fs::create_dir(&s).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", s.join("abs_link")).unwrap();
    std::os::unix::fs::symlink("../../x", s.join("up_link")).unwrap();
    std::fs::write(s.join("ok"), noise(9000, 91)).unwrap();
    let srcs = ["abs_link", "up_link", "ok"].map(|n| s.join(n).to_str().unwrap().to_string());
    let args = |dest: &str| {
        let mut a: Vec<String> = srcs.to_vec();
        a.push(format!("127.0.0.1:{dest}"));
        a
    };
    let lone = s.join("up_link");
    let readlink = |p: &Path| std::fs::read_link(p).ok();
    for mode in [None, Some("skip"), Some("refuse")] {
        let parent = tmp();
        std::fs::write(parent.path().join("x"), b"outside").unwrap();
        let d = match mode {
            None => rx_in(parent.path(), &[]),
            Some(m) => rx_in(parent.path(), &["--unsafe-links", m]),
        };
        let a = args("in");
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let o = send(&d, &["--json"], &a);
        let got = d.root.path().join("in");
        match mode {
            None => {
                assert_eq!(o.status.code(), Some(0), "keep: {}", both(&o));
                assert_eq!(readlink(&got.join("abs_link")), Some("/etc/passwd".into()));
                assert_eq!(readlink(&got.join("up_link")), Some("../../x".into()));
                assert_eq!(std::fs::read(got.join("ok")).unwrap(), noise(9000, 91));
            }
            Some("skip") => {
                let skipped = partial_skips(&o);
                assert!(named(&skipped, "abs_link") && named(&skipped, "up_link"));
                assert!(readlink(&got.join("abs_link")).is_none());
                assert!(readlink(&got.join("up_link")).is_none());
                assert_eq!(std::fs::read(got.join("ok")).unwrap(), noise(9000, 91));
            }
            _ => {
                assert!(!o.status.success(), "refuse: {}", both(&o));
                assert_ne!(o.status.code(), Some(23), "refuse: {}", both(&o));
                let e = both(&o);
                assert!(e.contains("abs_link") || e.contains("up_link"), "{e}");
                assert!(names(&got).is_empty(), "{:?}", names(&got));
            }
        }
        // Nothing beside the root was touched.
        assert_eq!(std::fs::read(parent.path().join("x")).unwrap(), b"outside");
        assert_eq!(names(parent.path()).len(), 2, "{:?}", names(parent.path()));
        // ../../x from a/b/c stays inside the root: kept in every mode.
        let o = send(&d, &[], &[lone.to_str().unwrap(), "127.0.0.1:a/b/c/"]);
        assert_eq!(o.status.code(), Some(0), "{mode:?}: {}", both(&o));
        assert_eq!(
            readlink(&d.root.path().join("a/b/c/up_link")),
            Some("../../x".into()),
            "{mode:?}"
        );
    }
}

// ---- 10. no litter --------------------------------------------------------

#[test]
fn an_interrupted_send_leaves_no_empty_part_files_and_resumes() {
    let d = rx(&[]);
    let src = tmp();
    let top = src.path().join("many");
    std::fs::create_dir(&top).unwrap();
    std::fs::write(top.join("aaa_big.dat"), noise(64 * MIB + 9, 101)).unwrap();
    for i in 0..2000u64 {
        let dir = top.join(format!("d{}", i / 250));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(format!("f{i}")),
            noise(1000 + (i % 3000) as usize, i),
        )
        .unwrap();
    }
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    let child = spawn(client(
        &d,
        "send",
        d.port,
        &["--rate-limit", "16MB", "-P", "2", "--block", "1M"],
        &args,
    ));
    wait_for_percent(&d, 2.0);
    let st = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let o = finish(child);
    assert!(!o.status.success(), "{}", both(&o));
    // The daemon ends the session on its own time: give it a moment.
    let until = Instant::now() + Duration::from_secs(10);
    let mut empty = empty_parts(d.root.path());
    while !empty.is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(200));
        empty = empty_parts(d.root.path());
    }
    assert!(
        empty.is_empty(),
        "{} empty part files, as {:?}",
        empty.len(),
        empty.first()
    );
    let o = send(
        &d,
        &["--resume", "-P", "2", "--block", "1M", "--json"],
        &args,
    );
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    assert_same_tree(&top, &d.root.path().join("in/many"));
    assert!(no_part_files(d.root.path()));
}

// ---- 11. unprivileged daemons and clients ----------------------------------

/// A key, a root and a state directory owned by nobody.
pub(crate) struct NobodyDirs {
    _base: tempfile::TempDir,
    pub(crate) key: PathBuf,
    pub(crate) root: PathBuf,
    pub(crate) state: PathBuf,
}

pub(crate) fn nobody_dirs() -> NobodyDirs {
    let base = tmp();
    chmod(base.path(), 0o755);
    let (key, root, state) = (
        base.path().join("key"),
        base.path().join("root"),
        base.path().join("state"),
    );
    crate::util::keygen(&key);
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(&state).unwrap();
    chown_nobody(base.path());
    NobodyDirs {
        _base: base,
        key,
        root,
        state,
    }
}

pub(crate) fn key_client(
    key: &Path,
    sub: &str,
    port: u16,
    extra: &[&str],
    args: &[&str],
) -> Command {
    let mut c = urmove();
    c.args([sub, "-p", &port.to_string(), "--key-file"])
        .arg(key)
        .args(extra)
        .args(args);
    c
}

/// Two receivers of one root that run as two users (nobody, daemon): the
/// second cannot write into the split file's part the first made (its
/// user's, mode 0600), and its shard is told why, not only "permission
/// denied": receivers sharing a root run as one user.
#[test]
fn a_receiver_of_another_user_on_a_shared_root_says_they_must_be_one() {
    crate::require!(crate::util::is_root(), "needs root (setpriv)");
    let nb = nobody_dirs();
    chmod(&nb.root, 0o777);
    let second = tmp();
    let (key2, state2) = (second.path().join("key"), second.path().join("state"));
    std::fs::copy(&nb.key, &key2).unwrap();
    std::fs::create_dir(&state2).unwrap();
    chmod(second.path(), 0o755);
    let st = Command::new("chown")
        .args(["-R", "daemon:daemon"])
        .arg(second.path())
        .status()
        .unwrap();
    assert!(st.success());
    let as_daemon = UNPRIV_LOCK.map(|a| match a {
        "--reuid=nobody" => "--reuid=daemon",
        "--regid=nogroup" => "--regid=daemon",
        a => a,
    });
    let start = |wrapper: &[&str], key: &Path, state: &Path| {
        let cmd = recv_cmd(wrapper, &nb.root, key, state, &[]);
        let (child, port, log) = spawn_daemon(cmd).unwrap_or_else(|e| panic!("{e:?}"));
        (Killed(child), port, log)
    };
    let (_a, port_a, _la) = start(&UNPRIV_LOCK, &nb.key, &nb.state);
    let (_b, port_b, _lb) = start(&as_daemon, &key2, &state2);
    let src = tmp();
    std::fs::write(src.path().join("big"), noise(4 * MIB, 131)).unwrap();
    let shard = |k: u32, port: u16| {
        let opts = [
            "--shard",
            &format!("{k}/2"),
            "--split-over",
            "1M",
            "--block",
            "1M",
        ];
        output_within(
            key_client(
                &nb.key,
                "send",
                port,
                &opts,
                &[src.path().join("big").to_str().unwrap(), "127.0.0.1:in"],
            ),
            HANG,
        )
    };
    let a = shard(0, port_a);
    assert_eq!(a.status.code(), Some(0), "{}", both(&a));
    let b = shard(1, port_b);
    assert_ne!(b.status.code(), Some(0), "{}", both(&b));
    assert!(
        stderr(&b).contains("receivers sharing a root must run as one user"),
        "{}",
        both(&b)
    );
    assert!(!nb.root.join("in/big").exists());
}

#[test]
fn an_unprivileged_daemon_under_the_default_memlock_limit_serves_or_refuses_to_start() {
    crate::require!(crate::util::is_root(), "needs root (setpriv)");
    let nb = nobody_dirs();
    let mut wrapper = UNPRIV.to_vec();
    wrapper.extend(["prlimit", "--memlock=8388608:8388608"]);
    let cmd = recv_cmd(&wrapper, &nb.root, &nb.key, &nb.state, &[]);
    let (child, port, _log) = match spawn_daemon(cmd) {
        Ok(up) => up,
        Err((code, text)) => {
            assert_ne!(code, Some(0), "{text}");
            assert!(
                text.contains("LimitMEMLOCK=") && text.contains("CAP_IPC_LOCK"),
                "refused to start without the remedy: {text}"
            );
            return;
        }
    };
    let _daemon = Killed(child);
    let src = tmp();
    let top = src.path().join("t");
    std::fs::create_dir(&top).unwrap();
    std::fs::write(top.join("big.dat"), noise(16 * MIB + 5, 111)).unwrap();
    std::fs::write(top.join("small"), noise(777, 112)).unwrap();
    let o = output_within(
        key_client(
            &nb.key,
            "send",
            port,
            &["--json"],
            &[top.to_str().unwrap(), "127.0.0.1:in"],
        ),
        HANG,
    );
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    assert_same_tree(&top, &nb.root.join("in/t"));
}

/// Two holders of the key send at once, with the default streams, to a
/// daemon running as nobody with CAP_IPC_LOCK (as the shipped unit runs
/// it) whose buffer budget holds one default session: both trees arrive
/// whole, each where its sender put it.
#[test]
fn an_unprivileged_daemon_serves_two_key_holders_at_once() {
    crate::require!(crate::util::is_root(), "needs root (setpriv)");
    let nb = nobody_dirs();
    let extra = ["--max-buffer-memory", "160M"];
    let cmd = recv_cmd(&UNPRIV_LOCK, &nb.root, &nb.key, &nb.state, &extra);
    let (child, port, log) = spawn_daemon(cmd).unwrap_or_else(|e| panic!("{e:?}"));
    let _daemon = Killed(child);
    let src = tmp();
    let trees: Vec<PathBuf> = (0..2u64)
        .map(|k| {
            let top = src.path().join(format!("t{k}"));
            std::fs::create_dir(&top).unwrap();
            std::fs::write(top.join("big.dat"), noise(24 * MIB + 3, 140 + k)).unwrap();
            std::fs::write(top.join("small"), noise(999, 150 + k)).unwrap();
            top
        })
        .collect();
    // Paced, so the two sessions overlap.
    let senders: Vec<_> = trees
        .iter()
        .enumerate()
        .map(|(k, top)| {
            let c = key_client(
                &nb.key,
                "send",
                port,
                &["--json", "--rate-limit", "200Mbit"],
                &[top.to_str().unwrap(), &format!("127.0.0.1:in{k}")],
            );
            std::thread::spawn(move || output_within(c, HANG))
        })
        .collect();
    let outs: Vec<Output> = senders.into_iter().map(|h| h.join().unwrap()).collect();
    let daemon: Vec<String> = log.try_iter().collect();
    for (k, o) in outs.iter().enumerate() {
        assert_eq!(
            o.status.code(),
            Some(0),
            "sender {k}: {}\n{daemon:?}",
            both(o)
        );
    }
    for (k, top) in trees.iter().enumerate() {
        assert_same_tree(top, &nb.root.join(format!("in{k}/t{k}")));
    }
    assert!(no_part_files(&nb.root));
}

#[test]
fn an_unprivileged_sender_and_puller_fit_their_buffers_to_the_memlock_limit() {
    crate::require!(crate::util::is_root(), "needs root (setpriv)");
    let d = rx(&[]);
    let nb = nobody_dirs();
    std::fs::copy(&d.key, &nb.key).unwrap();
    let top = nb.root.join("t");
    std::fs::create_dir(&top).unwrap();
    std::fs::write(top.join("big.dat"), noise(16 * MIB + 5, 121)).unwrap();
    std::fs::write(top.join("small"), noise(777, 122)).unwrap();
    chown_nobody(&nb.root);
    chown_nobody(&nb.key);
    let mut c = Command::new(UNPRIV[0]);
    c.args(&UNPRIV[1..])
        .args(["prlimit", "--memlock=8388608:8388608"])
        .arg(env!("CARGO_BIN_EXE_urmove"))
        .args(["send", "-p", &d.port.to_string(), "--json", "--key-file"])
        .arg(&nb.key)
        .arg(&top)
        .arg("127.0.0.1:in");
    let o = output_within(c, HANG);
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    let e = stderr(&o).to_lowercase();
    assert!(e.contains("memlock") || e.contains("locked memory"), "{e}");
    assert_same_tree(&top, &d.root.path().join("in/t"));

    // And back: a pull under the same limit asks the daemon for the frames
    // its buffers fit (it once asked for --block's 4 MiB and refused them).
    let back = nb.root.join("back");
    std::fs::create_dir(&back).unwrap();
    chown_nobody(&back);
    let mut c = Command::new(UNPRIV[0]);
    c.args(&UNPRIV[1..])
        .args(["prlimit", "--memlock=8388608:8388608"])
        .arg(env!("CARGO_BIN_EXE_urmove"))
        .args(["pull", "-p", &d.port.to_string(), "--json", "--key-file"])
        .arg(&nb.key)
        .arg("--state-dir")
        .arg(&nb.state)
        .arg("127.0.0.1:in/t")
        .arg(&back);
    let o = output_within(c, HANG);
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    assert_same_tree(&top, &back.join("t"));
}

/// The kernel counts RLIMIT_MEMLOCK per user: a second unprivileged
/// sender started while the first holds its buffers finds less than its
/// limit says, and goes on with fewer buffers instead of failing.
#[test]
fn two_unprivileged_senders_share_the_users_locked_memory() {
    crate::require!(crate::util::is_root(), "needs root (setpriv)");
    let d = rx(&[]);
    let nb = nobody_dirs();
    std::fs::copy(&d.key, &nb.key).unwrap();
    let tops: Vec<PathBuf> = (0..2u64)
        .map(|k| {
            let top = nb.root.join(format!("u{k}"));
            std::fs::create_dir(&top).unwrap();
            std::fs::write(top.join("big.dat"), noise(16 * MIB + 9, 160 + k)).unwrap();
            top
        })
        .collect();
    chown_nobody(&nb.root);
    chown_nobody(&nb.key);
    // Paced, so the first still holds its buffers when the second starts.
    let senders: Vec<_> = tops
        .iter()
        .enumerate()
        .map(|(k, top)| {
            let mut c = Command::new(UNPRIV[0]);
            c.args(&UNPRIV[1..])
                .args(["prlimit", "--memlock=8388608:8388608"])
                .arg(env!("CARGO_BIN_EXE_urmove"))
                .args(["send", "-p", &d.port.to_string(), "--rate-limit", "100Mbit"])
                .arg("--key-file")
                .arg(&nb.key)
                .arg(top)
                .arg(format!("127.0.0.1:in{k}"));
            let h = std::thread::spawn(move || output_within(c, HANG));
            std::thread::sleep(Duration::from_millis(300));
            h
        })
        .collect();
    for (k, h) in senders.into_iter().enumerate() {
        let o = h.join().unwrap();
        assert_eq!(o.status.code(), Some(0), "sender {k}: {}", both(&o));
    }
    for (k, top) in tops.iter().enumerate() {
        assert_same_tree(top, &d.root.path().join(format!("in{k}/u{k}")));
    }
}

#[test]
fn a_daemon_that_cannot_write_its_root_refuses_to_start_unless_pull_only() {
    crate::require!(crate::util::is_root(), "needs root (setpriv)");
    let nb = nobody_dirs();
    // The root is root's and read-only to nobody.
    let st = Command::new("chown")
        .args(["root:root"])
        .arg(&nb.root)
        .status()
        .unwrap();
    assert!(st.success());
    chmod(&nb.root, 0o755);
    std::fs::write(nb.root.join("served"), noise(300_000, 131)).unwrap();
    let wrapper = UNPRIV_LOCK;
    match spawn_daemon(recv_cmd(&wrapper, &nb.root, &nb.key, &nb.state, &[])) {
        Ok((child, ..)) => {
            drop(Killed(child));
            panic!("the daemon started on a root it cannot write");
        }
        Err((code, text)) => {
            assert_eq!(code, Some(2), "{text}");
            assert!(text.contains(nb.root.to_str().unwrap()), "{text}");
            assert!(text.to_lowercase().contains("writ"), "says why: {text}");
        }
    }
    let cmd = recv_cmd(&wrapper, &nb.root, &nb.key, &nb.state, &["--pull-only"]);
    let (child, port, _log) = spawn_daemon(cmd).unwrap_or_else(|(c, t)| panic!("{c:?}: {t}"));
    let _daemon = Killed(child);
    let local = tmp();
    let o = output_within(
        key_client(
            &nb.key,
            "pull",
            port,
            &["--json"],
            &["127.0.0.1:served", local.path().to_str().unwrap()],
        ),
        HANG,
    );
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    assert_eq!(
        std::fs::read(local.path().join("served")).unwrap(),
        std::fs::read(nb.root.join("served")).unwrap()
    );
    // Pushes are refused.
    let f = local.path().join("served");
    let o = output_within(
        key_client(
            &nb.key,
            "send",
            port,
            &["--json"],
            &[f.to_str().unwrap(), "127.0.0.1:in"],
        ),
        HANG,
    );
    assert_not_verified(&o, 1);
}
