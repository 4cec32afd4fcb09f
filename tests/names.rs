//! Every name a filesystem allows arrives, and special files arrive as
//! `rsync -a` keeps them (issue 32): names of 255 bytes (ASCII and
//! multi-byte) pushed, pulled, resumed after a kill and split over shards;
//! a name the receiving filesystem cannot hold is one skipped entry; FIFOs
//! and sockets recreated, device nodes with `-D` where the receiver may.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::faults::{send_child, wait_for_percent};
use crate::transfer::{assert_same_tree, Daemon};
use crate::util::{json, noise, stderr, stdout, urmove};

const MIB: usize = 1 << 20;

/// A 255-byte ASCII name, a 254-byte name of two-byte characters and a
/// 255-byte name of three-byte ones.
fn long_names() -> [String; 3] {
    ["x".repeat(255), "\u{e9}".repeat(127), "\u{6587}".repeat(85)]
}

/// Whether any name under `dir` is one of urmove's own (parts, journals).
fn leftovers(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else if name.contains(".urmove.") {
                out.push(name);
            }
        }
    }
    out
}

/// A tree whose every file and directory name is 254 or 255 bytes long,
/// one of them under a directory of a 255-byte name too.
fn long_tree(parent: &Path) -> PathBuf {
    let top = parent.join("long");
    let [a, b, c] = long_names();
    std::fs::create_dir_all(top.join(&a)).unwrap();
    std::fs::write(top.join(&b), noise(300_000, 1)).unwrap();
    std::fs::write(top.join(&c), noise(5, 2)).unwrap();
    std::fs::write(top.join(&a).join(&c), noise(1 << 20, 3)).unwrap();
    std::fs::write(top.join(&a).join(&b), b"").unwrap();
    top
}

#[test]
fn names_of_255_bytes_are_pushed_pulled_and_found_unchanged() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = long_tree(src.path());
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    let o = d.send(&["--json"], &args);
    assert!(o.status.success(), "{}\n{}", stderr(&o), d.log());
    let v = json(&o);
    assert_eq!(
        (v["status"].as_str(), v["files_verified"].as_u64()),
        (Some("ok"), Some(4)),
        "{v}"
    );
    let pushed = d.root.path().join("in/long");
    assert_same_tree(&top, &pushed);
    assert!(leftovers(d.root.path()).is_empty());
    // The second run finds every file as it left it.
    let v = json(&d.send(&["--json"], &args));
    assert_eq!(
        (v["files_unchanged"].as_u64(), v["bytes"].as_u64()),
        (Some(4), Some(0)),
        "{v}"
    );
    // And a pull brings them back.
    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    let o = pull(&d, &["--json"], "in/long", local.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json(&o)["files_verified"], 4);
    assert_same_tree(&top, &local.path().join("long"));
    assert!(leftovers(local.path()).is_empty());
}

fn pull_cmd(d: &Daemon, extra: &[&str], path: &str, into: &Path) -> Command {
    let mut c = urmove();
    c.args(["pull", "-p", &d.port.to_string(), "--key-file"])
        .arg(&d.key)
        .args(extra)
        .arg(format!("127.0.0.1:{path}"))
        .arg(into);
    c
}

fn pull(d: &Daemon, extra: &[&str], path: &str, into: &Path) -> std::process::Output {
    pull_cmd(d, extra, path, into).output().unwrap()
}

/// The names of urmove's own files in `dir`: each within 255 bytes and
/// of a shortened stem (`~` and 32 hex digits).
fn shortened_own_files(dir: &Path) -> Vec<String> {
    let names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".urmove."))
        .collect();
    for n in &names {
        assert!(n.len() <= 255, "{n}");
        assert!(n.contains('~'), "not a shortened stem: {n}");
    }
    names
}

/// A receiver killed while a file of a 255-byte name arrives keeps its
/// part and journal under shortened names, and the run again finds them
/// and sends only what they lack.
#[test]
fn a_255_byte_name_killed_half_way_resumes_from_its_part() {
    let mut d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("run");
    std::fs::create_dir(&top).unwrap();
    let name = "\u{6587}".repeat(85);
    std::fs::write(top.join(&name), noise(60 * MIB + 333, 9)).unwrap();
    let limited = ["--rate-limit", "20MB", "-P", "2", "--block", "1M"];
    let first = send_child(
        &d,
        d.port,
        &limited,
        &[top.to_str().unwrap(), "127.0.0.1:in"],
    );
    wait_for_percent(&d, 55.0);
    d.kill_and_restart();
    let o = first.wait_with_output().unwrap();
    assert!(!o.status.success(), "the first send survived its receiver");
    let kept = shortened_own_files(&d.root.path().join("in/run"));
    assert!(kept.iter().any(|n| n.ends_with(".urmove.part")), "{kept:?}");
    assert!(
        kept.iter().any(|n| n.ends_with(".urmove.journal")),
        "{kept:?}"
    );
    let o = d.send(
        &["-P", "2", "--block", "1M", "--json"],
        &[top.to_str().unwrap(), "127.0.0.1:in"],
    );
    assert!(o.status.success(), "{}\n{}", stderr(&o), d.log());
    let v = json(&o);
    assert!(
        v["bytes_skipped"].as_u64().unwrap() >= 16 * MIB as u64,
        "{v}"
    );
    assert_eq!(v["files_continued"], 1, "{v}");
    assert_same_tree(&top, &d.root.path().join("in/run"));
    assert!(leftovers(d.root.path()).is_empty());
}

/// A pull killed while a file of a 255-byte name arrives here resumes
/// from the part it left under a shortened name.
#[test]
fn a_pull_of_a_255_byte_name_killed_half_way_resumes() {
    let d = Daemon::start();
    let top = d.root.path().join("out/run");
    std::fs::create_dir_all(&top).unwrap();
    let name = "x".repeat(255);
    std::fs::write(top.join(&name), noise(60 * MIB + 1, 5)).unwrap();
    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    let limited = ["--rate-limit", "20MB", "-P", "2", "--block", "1M"];
    let mut first = pull_cmd(&d, &limited, "out/run", local.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let here = local.path().join("run");
    wait_until(Duration::from_secs(60), || {
        std::fs::read_dir(&here).is_ok_and(|r| {
            r.flatten()
                .any(|e| e.file_name().to_string_lossy().ends_with(".urmove.journal"))
        })
    });
    first.kill().unwrap();
    assert!(!first.wait().unwrap().success());
    let kept = shortened_own_files(&here);
    assert!(kept.iter().any(|n| n.ends_with(".urmove.part")), "{kept:?}");
    let o = pull(
        &d,
        &["-P", "2", "--block", "1M", "--json"],
        "out/run",
        local.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    assert!(v["bytes_skipped"].as_u64().unwrap() > 0, "{v}");
    assert_same_tree(&top, &here);
    assert!(leftovers(local.path()).is_empty());
}

fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < until, "not within {limit:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A file of a 255-byte name split over two shards into one receiver:
/// its pieces' journals fit, and the merged report calls it complete.
#[test]
fn a_255_byte_name_split_over_two_shards_is_committed_once() {
    let d = Daemon::start();
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = dir.path().join("set");
    std::fs::create_dir(&top).unwrap();
    let name = "\u{e9}".repeat(127);
    let bytes = noise(24 * MIB + 7, 21);
    std::fs::write(top.join(&name), &bytes).unwrap();
    let mut reports = Vec::new();
    for k in 0..2 {
        let o = urmove()
            .args(["send", "--shard", &format!("{k}/2"), "--json"])
            .args(["--split-over", "8M", "--block", "1M", "-P", "2"])
            .args(["-p", &d.port.to_string(), "--key-file"])
            .arg(&d.key)
            .arg(&top)
            .arg("127.0.0.1:x")
            .output()
            .unwrap();
        assert!(o.status.success(), "shard {k}: {}\n{}", stderr(&o), d.log());
        let file = dir.path().join(format!("s{k}.json"));
        std::fs::write(&file, &o.stdout).unwrap();
        reports.push(file);
    }
    let o = urmove().arg("report").args(&reports).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(std::fs::read(d.root.path().join("x/set").join(&name)).unwrap() == bytes);
    assert!(leftovers(d.root.path()).is_empty());
}

/// A FUSE filesystem whose names are at most `name_max` bytes
/// (tests/fuse/short_names.py over a directory of its own), unmounted
/// when dropped: a real filesystem that cannot hold every name ext4 can.
struct ShortNames {
    child: Child,
    pub mount: tempfile::TempDir,
    _backing: tempfile::TempDir,
}

impl ShortNames {
    /// Mounted, or why not (no FUSE, no python3-fusepy): under CI
    /// (`URMOVE_REQUIRE_FUSE`, which installs them) that fails the test.
    fn mount(name_max: usize) -> Option<ShortNames> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuse/short_names.py");
        let python = "/usr/bin/python3";
        let has = Command::new(python)
            .args(["-c", "import fusepy"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !crate::util::is_root() || !Path::new("/dev/fuse").exists() || !has {
            let why = "needs root, /dev/fuse and /usr/bin/python3 with fusepy (python3-fusepy)";
            assert!(std::env::var_os("URMOVE_REQUIRE_FUSE").is_none(), "{why}");
            eprintln!("skipped: {why}");
            return None;
        }
        let backing = tempfile::tempdir_in("/var/tmp").unwrap();
        let mount = tempfile::tempdir_in("/var/tmp").unwrap();
        let child = Command::new(python)
            .arg(script)
            .arg(backing.path())
            .arg(mount.path())
            .arg(name_max.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let fs = ShortNames {
            child,
            mount,
            _backing: backing,
        };
        let mounted = || {
            let o = Command::new("stat")
                .args(["-f", "-c", "%l"])
                .arg(fs.mount.path())
                .output();
            o.is_ok_and(|o| stdout(&o).trim() == name_max.to_string())
        };
        wait_until(Duration::from_secs(10), mounted);
        Some(fs)
    }
}

impl Drop for ShortNames {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.mount.path()).output();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A receiver on a filesystem of 100-byte names: a longer file name, and
/// a directory of one with what is beneath it, are skipped entries with
/// their reason (exit 23); a 90-byte name, whose part name would not fit,
/// arrives under a shortened part; the rest arrives.
#[test]
fn a_name_the_receiving_filesystem_cannot_hold_is_one_skipped_entry() {
    let Some(fs) = ShortNames::mount(100) else {
        return;
    };
    let d = Daemon::start_full(&[], "127.0.0.1", fs.mount.path(), &[]);
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("t");
    let (fits, long) = ("a".repeat(90), "b".repeat(120));
    std::fs::create_dir_all(top.join(&long)).unwrap();
    std::fs::write(top.join("ok"), b"ok").unwrap();
    std::fs::write(top.join(&fits), noise(70_000, 4)).unwrap();
    std::fs::write(top.join(format!("{long}.dat")), b"too long").unwrap();
    std::fs::write(top.join(&long).join("inside"), b"under a long name").unwrap();
    let o = d.send(&["--json"], &[top.to_str().unwrap(), "127.0.0.1:"]);
    assert_eq!(o.status.code(), Some(23), "{}\n{}", stderr(&o), d.log());
    let v = json(&o);
    assert_eq!(v["files_verified"], 2, "{v}");
    let skipped = v["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 3, "{v}");
    for s in skipped {
        assert!(s["reason"].as_str().unwrap().contains("cannot hold"), "{s}");
        assert_eq!(s["by_rule"], true, "{s}");
    }
    let got = d.root.path().join("t");
    assert_eq!(std::fs::read(got.join("ok")).unwrap(), b"ok");
    assert_eq!(std::fs::read(got.join(&fits)).unwrap(), noise(70_000, 4));
    assert!(leftovers(&got).is_empty(), "{:?}", leftovers(&got));
    // The daemon serves on: the same run again is the same.
    let again = d.send(&["--json"], &[top.to_str().unwrap(), "127.0.0.1:"]);
    assert_eq!(again.status.code(), Some(23), "{}", stderr(&again));
    let v = json(&again);
    assert_eq!(
        (v["bytes"].as_u64(), v["files_unchanged"].as_u64()),
        (Some(0), Some(2)),
        "{v}"
    );
}

/// A tree with a FIFO, a socket and (as root) two device nodes.
fn special_tree(parent: &Path) -> PathBuf {
    let top = parent.join("sp");
    std::fs::create_dir(&top).unwrap();
    std::fs::write(top.join("f"), b"data").unwrap();
    let node = |name: &str, mode: u32, dev: u64| {
        let path = std::ffi::CString::new(top.join(name).as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; mknod reads it only.
        let rc = unsafe { libc::mknod(path.as_ptr(), mode, dev) };
        assert_eq!(rc, 0, "{name}: {}", std::io::Error::last_os_error());
    };
    node("pipe", libc::S_IFIFO | 0o640, 0);
    drop(std::os::unix::net::UnixListener::bind(top.join("sock")).unwrap());
    if crate::util::is_root() {
        node("null", libc::S_IFCHR | 0o666, libc::makedev(1, 3));
        node("loop", libc::S_IFBLK | 0o660, libc::makedev(7, 200));
    }
    let old = std::fs::FileTimes::new()
        .set_modified(std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_500_000_000));
    std::fs::File::open(top.join("f"))
        .unwrap()
        .set_times(old)
        .unwrap();
    top
}

/// `(type, permission bits, device)` of `p`, not followed.
fn kind_of(p: &Path) -> (&'static str, u32, u64) {
    let m = std::fs::symlink_metadata(p).unwrap();
    let t = m.file_type();
    let kind = if t.is_fifo() {
        "fifo"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() {
        "char"
    } else if t.is_block_device() {
        "block"
    } else {
        "other"
    };
    (kind, m.mode() & 0o7777, m.rdev())
}

/// FIFOs and sockets arrive as rsync -a makes them, every run exits 0,
/// and device nodes go with -D to a root daemon that allows them; one
/// that does not names why, skipped by rule.
#[test]
fn fifos_and_sockets_arrive_and_devices_with_d_where_allowed() {
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = special_tree(src.path());
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    let d = Daemon::start();
    for run in 0..2 {
        let o = d.send(&["--json"], &args);
        assert!(o.status.success(), "run {run}: {}\n{}", stderr(&o), d.log());
        let got = d.root.path().join("in/sp");
        for name in ["pipe", "sock"] {
            assert_eq!(kind_of(&got.join(name)), kind_of(&top.join(name)), "{name}");
        }
        let v = json(&o);
        let devices = if crate::util::is_root() { 2 } else { 0 };
        assert_eq!(v["devices_left_out"], devices, "{v}");
    }
    if !crate::util::is_root() {
        eprintln!("skipped the device nodes: making them needs root");
        return;
    }
    // -D to a daemon that does not allow them: each named, by rule.
    let o = d.send(&["-D", "--json"], &args);
    assert_eq!(o.status.code(), Some(23), "{}", stderr(&o));
    let v = json(&o);
    for s in v["skipped"].as_array().unwrap() {
        assert!(
            s["reason"].as_str().unwrap().contains("devices = true"),
            "{s}"
        );
        assert_eq!(s["by_rule"], true);
    }
    assert!(!d.root.path().join("in/sp/null").exists());
    // One that allows them makes them.
    let allows = Daemon::start_full(&[], "127.0.0.1", Path::new("/var/tmp"), &["--devices"]);
    let o = allows.send(&["-D"], &args);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = allows.root.path().join("in/sp");
    for name in ["null", "loop", "pipe", "sock"] {
        assert_eq!(kind_of(&got.join(name)), kind_of(&top.join(name)), "{name}");
    }
    // A pull with -D as root makes them here too, and rsync finds
    // nothing to change.
    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    let o = pull(&allows, &["-D"], "in/sp", local.path());
    assert!(o.status.success(), "{}", stderr(&o));
    for name in ["null", "loop", "pipe", "sock"] {
        assert_eq!(
            kind_of(&local.path().join("sp").join(name)),
            kind_of(&top.join(name))
        );
    }
    if crate::util::have("rsync") {
        for got in [&got, &local.path().join("sp")] {
            let o = Command::new("rsync")
                .args([
                    "-aD",
                    "--dry-run",
                    "--itemize-changes",
                    "--filter=-x user.urmove",
                ])
                .arg(format!("{}/", top.display()))
                .arg(format!("{}/", got.display()))
                .output()
                .unwrap();
            assert_eq!(stdout(&o), "", "{}", got.display());
        }
    }
}

/// A receiver that does not run as root names why it makes no device
/// node (mknod needs CAP_MKNOD): skipped by rule, the rest arrives.
#[test]
fn a_receiver_not_running_as_root_names_why_it_makes_no_device() {
    use crate::verified::{key_client, nobody_dirs, recv_cmd, spawn_daemon, Killed, UNPRIV_LOCK};
    crate::require!(
        crate::util::is_root(),
        "needs root (to make the nodes and drop to nobody)"
    );
    let nb = nobody_dirs();
    let cmd = recv_cmd(&UNPRIV_LOCK, &nb.root, &nb.key, &nb.state, &["--devices"]);
    let (child, port, _log) = spawn_daemon(cmd).unwrap_or_else(|e| panic!("{e:?}"));
    let _daemon = Killed(child);
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = special_tree(src.path());
    let args = [top.to_str().unwrap(), "127.0.0.1:"];
    let o = key_client(&nb.key, "send", port, &["-D", "--json"], &args)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(23), "{}", stderr(&o));
    let v = json(&o);
    let skipped = v["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 2, "{v}");
    for s in skipped {
        assert!(s["reason"].as_str().unwrap().contains("CAP_MKNOD"), "{s}");
        assert_eq!(s["by_rule"], true, "{s}");
    }
    assert_eq!(kind_of(&nb.root.join("sp/pipe")).0, "fifo");
    assert_eq!(kind_of(&nb.root.join("sp/sock")).0, "socket");
}

/// `urmove report` calls a sharded run complete when its only skipped
/// entries were left out by rule, and names them.
#[test]
fn a_report_whose_only_skips_are_by_rule_is_complete() {
    let Some(fs) = ShortNames::mount(100) else {
        return;
    };
    let d = Daemon::start_full(&[], "127.0.0.1", fs.mount.path(), &[]);
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = dir.path().join("t");
    std::fs::create_dir(&top).unwrap();
    for i in 0..6 {
        std::fs::write(top.join(format!("f{i}")), noise(1000 + i, i as u64)).unwrap();
    }
    std::fs::write(top.join("c".repeat(150)), b"long").unwrap();
    mk_fifo(&top.join("pipe"));
    let mut reports = Vec::new();
    for k in 0..2 {
        let o = urmove()
            .args(["send", "--shard", &format!("{k}/2"), "--json"])
            .args(["-p", &d.port.to_string(), "--key-file"])
            .arg(&d.key)
            .arg(&top)
            .arg("127.0.0.1:")
            .output()
            .unwrap();
        let file = dir.path().join(format!("s{k}.json"));
        std::fs::write(&file, &o.stdout).unwrap();
        reports.push(file);
    }
    let o = urmove().arg("report").args(&reports).output().unwrap();
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(
        text.contains("skipped by rule: t/ccc") && text.contains("cannot hold"),
        "{text}"
    );
    assert!(text.contains("complete:"), "{text}");
    assert_eq!(kind_of(&d.root.path().join("t/pipe")).0, "fifo");
}

fn mk_fifo(p: &Path) {
    let path = std::ffi::CString::new(OsStr::as_bytes(p.as_os_str())).unwrap();
    // SAFETY: a NUL-terminated path; mkfifo reads it only.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o644) }, 0);
}
