//! Tree fidelity as `rsync -a` users expect it: names that are not UTF-8
//! carried as bytes, `--exclude`/`--include`/`--exclude-from` choosing
//! what goes, `--dry-run` showing it without writing anything.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::transfer::{assert_same_tree, Daemon};
use crate::util::{json, stderr, stdout, urmove};

fn os(b: &[u8]) -> &OsStr {
    OsStr::from_bytes(b)
}

/// A tree whose names and link target are not UTF-8 (Latin-1 and broken
/// sequences, as old instruments and Windows shares write them).
fn latin1_tree(parent: &Path) -> PathBuf {
    let top = parent.join("run");
    let dir = top.join(os(b"caf\xe9"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join(os(b"r\xe9sum\xe9.dat")),
        crate::util::noise(70_000, 1),
    )
    .unwrap();
    std::fs::write(top.join(os(b"\xff\xfe")), b"two bad bytes").unwrap();
    std::fs::write(top.join("plain.txt"), b"plain").unwrap();
    std::fs::write(top.join("caf\u{e9}.utf8"), b"utf-8 twin").unwrap();
    std::os::unix::fs::symlink(os(b"caf\xe9/r\xe9sum\xe9.dat"), top.join("link")).unwrap();
    top
}

#[test]
fn names_that_are_not_utf8_are_carried_as_bytes_on_push_and_pull() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = latin1_tree(src.path());
    let state = src.path().join("state");
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    let st = ["--json", "--state-dir", state.to_str().unwrap()];
    let v = json(&d.send(&st, &args));
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(
        (v["files_verified"].as_u64(), v["files_skipped"].as_u64()),
        (Some(4), Some(0)),
        "{v}"
    );
    assert_same_tree(&top, &d.root.path().join("in/run"));

    // Run again: the same bytes are found unchanged, nothing is re-sent.
    let v = json(&d.send(&st, &args));
    assert_eq!(
        (v["bytes"].as_u64(), v["files_unchanged"].as_u64()),
        (Some(0), Some(4)),
        "{v}"
    );

    // And back: a pull carries the same names.
    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    let o = urmove()
        .args(["pull", "-p", &d.port.to_string(), "--json", "--key-file"])
        .arg(&d.key)
        .arg("127.0.0.1:in/run")
        .arg(local.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_same_tree(&top, &local.path().join("run"));
}

/// A tree for the filters: logs, temporaries, a cache directory holding a
/// FIFO (which would be skipped, exit 23, if the directory were walked).
fn filter_tree(parent: &Path) -> PathBuf {
    let top = parent.join("run");
    std::fs::create_dir_all(top.join("raw/sub")).unwrap();
    std::fs::create_dir_all(top.join("cache")).unwrap();
    for (p, body) in [
        ("raw/a.dat", "a"),
        ("raw/sub/b.dat", "b"),
        ("raw/a.tmp", "t"),
        ("keep.log", "k"),
        ("debug.log", "d"),
        ("notes.txt", "n"),
        ("cache/blob", "c"),
    ] {
        std::fs::write(top.join(p), body).unwrap();
    }
    let fifo = std::ffi::CString::new(top.join("cache/pipe").as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path only.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    top
}

fn names_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(dir).unwrap().to_string_lossy().into_owned());
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn exclude_include_and_exclude_from_choose_what_goes_in_the_order_given() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = filter_tree(src.path());
    let list = src.path().join("excludes");
    std::fs::write(&list, "# scratch\n\n*.tmp\n/run/cache/\n").unwrap();
    let o = d.send(
        &["--json", "--include", "keep.log", "--exclude", "*.log"],
        &[
            "--exclude-from",
            list.to_str().unwrap(),
            top.to_str().unwrap(),
            "127.0.0.1:in",
        ],
    );
    let v = json(&o);
    assert_eq!(o.status.code(), Some(0), "{v} {}", stderr(&o));
    assert_eq!(v["files_excluded"], 3, "{v}");
    assert_eq!(
        v["files_skipped"], 0,
        "the excluded directory was walked: {v}"
    );
    assert_eq!(
        names_under(&d.root.path().join("in/run")),
        [
            "keep.log",
            "notes.txt",
            "raw",
            "raw/a.dat",
            "raw/sub",
            "raw/sub/b.dat"
        ]
    );
    // The order decides: an --exclude before the --include wins.
    let o = d.send(
        &["--exclude", "*.log", "--include", "keep.log"],
        &[top.to_str().unwrap(), "127.0.0.1:again"],
    );
    assert!(!d.root.path().join("again/run/keep.log").exists());
    assert!(
        stdout(&o).contains("left out 2 entries matching --exclude"),
        "{}",
        stdout(&o)
    );
    // Excluding everything is an error that says so.
    let o = d.send(
        &["--exclude", "run"],
        &[top.to_str().unwrap(), "127.0.0.1:none"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--exclude left out all 1 entry"),
        "{}",
        stderr(&o)
    );
    let o = d.send(
        &["--exclude-from", "/nonexistent"],
        &[top.to_str().unwrap(), "127.0.0.1:x"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--exclude-from /nonexistent"),
        "{}",
        stderr(&o)
    );
}

/// Every entry under `root` with what a write would change: size, mtime,
/// ctime (a chmod, chown or extended attribute moves it too).
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

#[test]
fn a_dry_run_lists_files_and_sizes_and_writes_nothing_anywhere() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = filter_tree(src.path());
    std::fs::remove_dir_all(top.join("cache")).unwrap();
    std::fs::write(top.join("raw/big.dat"), vec![7u8; 1_500_000]).unwrap();
    let args = [
        "--dry-run",
        "--exclude",
        "*.tmp",
        top.to_str().unwrap(),
        "127.0.0.1:in",
    ];
    let o = d.send(&[], &args);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("1.50 MB  run/raw/big.dat"), "{out}");
    assert!(out.contains("1 B  run/notes.txt"), "{out}");
    assert!(!out.contains("a.tmp"), "{out}");
    assert!(
        out.contains("dry run: would send 6 files, 1.50 MB (1.43 MiB) to 127.0.0.1:in, 1 entry left out by --exclude; nothing was sent or written"),
        "{out}"
    );
    assert_eq!(std::fs::read_dir(d.root.path()).unwrap().count(), 0);
    assert!(d.log().contains("a dry run into"), "{}", d.log());
    let o = d.send(&["-n", "--json"], &[top.to_str().unwrap(), "127.0.0.1:in"]);
    let v = json(&o);
    assert_eq!(
        (v["status"].as_str(), v["files"].as_u64()),
        (Some("dry-run"), Some(7)),
        "{v}"
    );
    assert_eq!(v["bytes"], 1_500_006);
    let big = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == "run/raw/big.dat")
        .cloned()
        .unwrap();
    assert_eq!(
        (&big["size"], &big["action"]),
        (&1_500_000.into(), &"send".into())
    );
    // The receiver is asked: with nothing listening, the dry run fails and
    // says why.
    let o = urmove()
        .args(["send", "-n", "-p", "9", "--key-file"])
        .arg(&d.key)
        .args([top.to_str().unwrap(), "127.0.0.1:in"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("dry run: "), "{}", stderr(&o));
}

/// After a run, a dry run counts what the receiver holds unchanged as
/// not sent, lists what changed and, with `--delete`, what would go; the
/// receiver's tree is the same to the nanosecond after it.
#[test]
fn a_dry_run_asks_the_receiver_what_it_holds_and_would_delete() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = filter_tree(src.path());
    std::fs::remove_dir_all(top.join("cache")).unwrap();
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    let o = d.send(&[], &args);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(top.join("raw/new.dat"), vec![3u8; 5000]).unwrap();
    std::fs::write(top.join("notes.txt"), b"longer notes").unwrap();
    let dst = d.root.path().join("in/run");
    std::fs::write(dst.join("raw/extra.dat"), b"only here").unwrap();
    let before = snapshot(d.root.path());
    let o = d.send(&["-n", "--delete"], &args);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("5.00 kB  run/raw/new.dat"), "{out}");
    assert!(out.contains("12 B  run/notes.txt"), "{out}");
    assert!(out.contains("delete  run/raw/extra.dat"), "{out}");
    assert!(!out.contains("raw/a.dat"), "unchanged, not listed: {out}");
    let unchanged = 5;
    assert!(
        out.contains("dry run: would send 2 files, 5.01 kB (4.89 KiB) to 127.0.0.1:in; the receiver holds 5 files unchanged since an earlier run")
            && out.contains("; would delete 1 entry; nothing was sent or written"),
        "{out}"
    );
    assert_eq!(
        snapshot(d.root.path()),
        before,
        "the dry run changed the receiver"
    );
    let o = d.send(&["-n", "--delete", "--json"], &args);
    let v = json(&o);
    assert_eq!(
        v["deleted"],
        serde_json::json!(["run/raw/extra.dat"]),
        "{v}"
    );
    assert_eq!(v["files_unchanged"], unchanged, "{v}");
    // The real run does what the dry run said.
    let o = d.send(&["--delete", "--json"], &args);
    let v = json(&o);
    assert_eq!(
        v["deleted"],
        serde_json::json!(["run/raw/extra.dat"]),
        "{v}"
    );
    assert_eq!(v["files_verified"], 2, "{v}");
    assert_same_tree(&top, &dst);
}

/// A file the receiver holds in part: the dry run names the rest as what
/// would go, touches neither the part nor its journal, and the real run
/// then continues it.
#[test]
fn a_dry_run_counts_a_held_part_as_the_rest_to_send() {
    use std::process::Stdio;
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("rec");
    std::fs::create_dir(&top).unwrap();
    std::fs::write(top.join("big.dat"), crate::util::noise(48 << 20, 5)).unwrap();
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    let mut child = urmove()
        .args(["send", "-p", &d.port.to_string(), "--key-file"])
        .arg(&d.key)
        .args(["--rate-limit", "16MB", "-P", "2", "--block", "1M"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let journal = d.root.path().join("in/rec/big.dat.urmove.journal");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !journal.exists() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let _ = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let _ = child.wait();
    // The daemon ends the session on its own time.
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(journal.exists(), "no journal: {}", d.log());
    let before = snapshot(d.root.path());
    let o = d.send(&["-n", "--block", "1M", "--json"], &args);
    let v = json(&o);
    assert_eq!(v["files_continued"], 1, "{v}");
    let rest = v["bytes"].as_u64().unwrap();
    assert!(rest > 0 && rest < 48 << 20, "{v}");
    assert_eq!(v["entries"][1]["action"], "continue", "{v}");
    assert_eq!(
        snapshot(d.root.path()),
        before,
        "the dry run changed the receiver"
    );
    let o = d.send(&["-n", "--block", "1M"], &args);
    let out = stdout(&o);
    assert!(out.contains("(the rest: the receiver holds "), "{out}");
    assert!(out.contains("1 file in part (continued)"), "{out}");
    let o = d.send(&["--block", "1M", "--json"], &args);
    let v = json(&o);
    assert_eq!(
        (&v["status"], &v["files_continued"]),
        (&"ok".into(), &1.into()),
        "{v}"
    );
    assert!(v["bytes"].as_u64().unwrap() <= rest, "{v}");
    assert_same_tree(&top, &d.root.path().join("in/rec"));
}

fn uid_gid(p: &Path) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.uid(), m.gid())
}

fn ino_links(p: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.ino(), m.nlink())
}

/// A tree owned by others: a file by nobody:nogroup, one by a uid and gid
/// no name stands for, a directory and a symlink by nobody.
fn owned_tree(parent: &Path) -> PathBuf {
    let top = parent.join("run");
    std::fs::create_dir_all(top.join("d")).unwrap();
    std::fs::write(top.join("d/by-nobody"), b"n").unwrap();
    std::fs::write(top.join("by-number"), b"x").unwrap();
    std::os::unix::fs::symlink("by-number", top.join("link")).unwrap();
    let nobody = (65534, 65534);
    std::os::unix::fs::lchown(top.join("d/by-nobody"), Some(nobody.0), Some(nobody.1)).unwrap();
    std::os::unix::fs::lchown(top.join("by-number"), Some(43_210), Some(43_211)).unwrap();
    std::os::unix::fs::lchown(top.join("link"), Some(nobody.0), Some(nobody.1)).unwrap();
    std::os::unix::fs::lchown(top.join("d"), Some(nobody.0), Some(nobody.1)).unwrap();
    top
}

#[test]
fn a_receiver_running_as_root_keeps_owners_by_name_or_number() {
    if !crate::util::is_root() {
        eprintln!("skipped: owners are kept only by a receiver running as root");
        return;
    }
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = owned_tree(src.path());
    for (flags, dest) in [(&[][..], "byname"), (&["--numeric-ids"][..], "bynumber")] {
        let o = d.send(
            flags,
            &[top.to_str().unwrap(), &format!("127.0.0.1:{dest}")],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let got = d.root.path().join(dest).join("run");
        for p in ["d/by-nobody", "by-number", "link", "d"] {
            assert_eq!(uid_gid(&got.join(p)), uid_gid(&top.join(p)), "{dest}/{p}");
        }
        assert_same_tree(&top, &got);
    }
}

#[test]
fn hard_links_arrive_as_links_with_h_and_as_copies_without() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("run");
    std::fs::create_dir_all(top.join("sub")).unwrap();
    std::fs::write(top.join("a"), crate::util::noise(200_000, 9)).unwrap();
    std::fs::hard_link(top.join("a"), top.join("sub/a2")).unwrap();
    std::fs::hard_link(top.join("a"), top.join("z3")).unwrap();
    std::fs::write(top.join("single"), b"one").unwrap();
    let args = |dest: &str| {
        [
            top.to_str().unwrap().to_string(),
            format!("127.0.0.1:{dest}"),
        ]
    };
    let a = args("linked");
    let v = json(&d.send(&["--json", "-H"], &[&a[0], &a[1]]));
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(
        (v["files"].as_u64(), v["hard_links"].as_u64()),
        (Some(2), Some(2)),
        "{v}"
    );
    assert_eq!(v["bytes"], 200_003, "the linked file crossed once: {v}");
    let got = d.root.path().join("linked/run");
    let (ino, links) = ino_links(&got.join("a"));
    assert_eq!(links, 3);
    assert_eq!(ino_links(&got.join("sub/a2")).0, ino);
    assert_eq!(ino_links(&got.join("z3")).0, ino);
    assert_eq!(
        std::fs::read(got.join("z3")).unwrap(),
        std::fs::read(top.join("a")).unwrap()
    );
    // Run again: still linked, still right.
    let v = json(&d.send(&["--json", "-H"], &[&a[0], &a[1]]));
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(ino_links(&got.join("z3")), (ino_links(&got.join("a")).0, 3));
    assert_eq!(
        std::fs::read(got.join("sub/a2")).unwrap(),
        std::fs::read(top.join("a")).unwrap()
    );
    // A name the manifest does not give it (someone under the root linked
    // it elsewhere) makes it no file of ours to keep: sent again, as a new
    // file, and the stranger's name keeps the old one.
    let stranger = d.root.path().join("stranger");
    std::fs::hard_link(got.join("a"), &stranger).unwrap();
    let v = json(&d.send(&["--json", "-H"], &[&a[0], &a[1]]));
    assert_eq!(
        (v["bytes"].as_u64(), v["files_unchanged"].as_u64()),
        (Some(200_000), Some(1)),
        "{v}"
    );
    assert_eq!(ino_links(&got.join("z3")), (ino_links(&got.join("a")).0, 3));
    assert_eq!(ino_links(&stranger), (ino, 1));
    // Without -H each name is a file of its own.
    let c = args("copied");
    let v = json(&d.send(&["--json"], &[&c[0], &c[1]]));
    assert_eq!(
        (v["files"].as_u64(), v["bytes"].as_u64()),
        (Some(4), Some(600_003)),
        "{v}"
    );
    assert_eq!(ino_links(&d.root.path().join("copied/run/z3")).1, 1);
}

fn xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    let o = std::process::Command::new("getfattr")
        .args(["--absolute-names", "--only-values", "-n", name])
        .arg(p)
        .output()
        .unwrap();
    o.status.success().then_some(o.stdout)
}

#[test]
fn extended_attributes_and_acls_travel_on_request_and_security_ones_never() {
    if !crate::util::have("setfattr") || !crate::util::have("setfacl") {
        eprintln!("skipped: needs setfattr and setfacl (the attr and acl packages)");
        return;
    }
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("run");
    std::fs::create_dir_all(top.join("dir")).unwrap();
    std::fs::write(top.join("f"), b"data").unwrap();
    let sh = |args: &[&str]| {
        let o = std::process::Command::new(args[0])
            .args(&args[1..])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    let f = top.join("f");
    let dir = top.join("dir");
    sh(&[
        "setfattr",
        "-n",
        "user.instrument",
        "-v",
        "ALMA-B6",
        f.to_str().unwrap(),
    ]);
    sh(&[
        "setfattr",
        "-n",
        "user.run",
        "-v",
        "42",
        dir.to_str().unwrap(),
    ]);
    sh(&[
        "setfattr",
        "-n",
        "security.capability",
        "-v",
        "0sAQAAAgAgAAAAAAAAAAAAAAAAAAA=",
        f.to_str().unwrap(),
    ]);
    sh(&["setfacl", "-m", "u:nobody:r", f.to_str().unwrap()]);
    sh(&["setfacl", "-d", "-m", "u:nobody:rx", dir.to_str().unwrap()]);
    let o = d.send(&["-X", "-A"], &[top.to_str().unwrap(), "127.0.0.1:xa"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = d.root.path().join("xa/run");
    assert_eq!(
        xattr(&got.join("f"), "user.instrument").as_deref(),
        Some(&b"ALMA-B6"[..])
    );
    assert_eq!(
        xattr(&got.join("dir"), "user.run").as_deref(),
        Some(&b"42"[..])
    );
    assert_eq!(
        xattr(&got.join("f"), "security.capability"),
        None,
        "file capabilities must never travel"
    );
    for (p, acl) in [
        ("f", "system.posix_acl_access"),
        ("dir", "system.posix_acl_default"),
    ] {
        assert_eq!(
            xattr(&got.join(p), acl),
            xattr(&top.join(p), acl),
            "{p} {acl}"
        );
        assert!(xattr(&got.join(p), acl).is_some(), "{p} {acl}");
    }
    // Without -X and -A none of them go.
    let o = d.send(&[], &[top.to_str().unwrap(), "127.0.0.1:plain"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let plain = d.root.path().join("plain/run");
    assert_eq!(xattr(&plain.join("f"), "user.instrument"), None);
    assert_eq!(xattr(&plain.join("f"), "system.posix_acl_access"), None);
}

#[test]
fn delete_removes_only_the_receivers_extras_inside_the_directories_sent() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("run");
    std::fs::create_dir_all(top.join("keep")).unwrap();
    std::fs::write(top.join("keep/a"), b"a").unwrap();
    std::fs::write(top.join("b"), b"b").unwrap();
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    assert!(d.send(&[], &args).status.success());
    let got = d.root.path().join("in/run");
    // Extras: a file, a directory tree, a symlink to something outside
    // (removed as itself, never followed), a part file of another session
    // (never touched), and a neighbour of the tree (not under it).
    let outside = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::write(outside.path().join("precious"), b"p").unwrap();
    std::fs::write(got.join("old.dat"), b"o").unwrap();
    std::fs::create_dir_all(got.join("keep/stale/deep")).unwrap();
    std::fs::write(got.join("keep/stale/deep/x"), b"x").unwrap();
    std::os::unix::fs::symlink(outside.path(), got.join("to-outside")).unwrap();
    std::fs::write(got.join("c.urmove.part"), b"someone else's").unwrap();
    std::fs::write(d.root.path().join("in/neighbour"), b"n").unwrap();

    // Without --delete nothing goes.
    assert!(d.send(&[], &args).status.success());
    assert!(got.join("old.dat").exists());
    let o = d.send(&["--delete"], &args);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("deleted old.dat") || out.contains("deleted run/old.dat"),
        "{out}"
    );
    assert!(out.contains("--delete removed 5 entries"), "{out}");
    assert_eq!(names_under(&got), ["b", "c.urmove.part", "keep", "keep/a"],);
    assert!(outside.path().join("precious").exists());
    assert!(d.root.path().join("in/neighbour").exists());
    assert_same_tree(&top.join("keep"), &got.join("keep"));
    let v = json(&d.send(&["--delete", "--json"], &args));
    assert_eq!(v["files_deleted"], 0, "{v}");
}

#[test]
fn delete_keeps_what_the_exclude_rules_leave_out_unless_delete_excluded() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("run");
    std::fs::create_dir_all(top.join("gone")).unwrap();
    std::fs::write(top.join("a.dat"), b"a").unwrap();
    std::fs::write(top.join("log.tmp"), b"sent once").unwrap();
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    assert!(d.send(&[], &args).status.success());
    let got = d.root.path().join("in/run");
    // The receiver's own: a scratch tree and a temporary file the rules
    // exclude, a directory of the tree holding one of each.
    std::fs::create_dir_all(got.join("scratch/deep")).unwrap();
    std::fs::write(got.join("scratch/deep/s"), b"s").unwrap();
    std::fs::write(got.join("own.tmp"), b"o").unwrap();
    std::fs::create_dir_all(got.join("extra")).unwrap();
    std::fs::write(got.join("extra/w"), b"w").unwrap();
    std::fs::write(got.join("extra/z.tmp"), b"z").unwrap();
    std::fs::write(got.join("old.dat"), b"x").unwrap();
    let rules = ["--exclude", "*.tmp", "--exclude", "scratch/"];

    let dry = stdout(&d.send(&[&["-n", "--delete"][..], &rules].concat(), &args));
    for kept in [
        "own.tmp",
        "log.tmp",
        "scratch",
        "extra/z.tmp",
        "  run/extra\n",
    ] {
        assert!(!dry.contains(kept), "{kept}: {dry}");
    }
    assert!(
        dry.contains("delete  run/extra/w") && dry.contains("delete  run/old.dat"),
        "{dry}"
    );
    let o = d.send(&[&["--delete"][..], &rules].concat(), &args);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("--delete removed 2 entries"), "{out}");
    assert_eq!(
        names_under(&got),
        [
            "a.dat",
            "extra",
            "extra/z.tmp",
            "gone",
            "log.tmp",
            "own.tmp",
            "scratch",
            "scratch/deep",
            "scratch/deep/s"
        ]
    );

    let o = d.send(&[&["--delete-excluded"][..], &rules].concat(), &args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("--delete removed 7 entries"),
        "{}",
        stdout(&o)
    );
    assert_eq!(names_under(&got), ["a.dat", "gone"]);
}

/// A tree with all that `rsync -aHAX --numeric-ids` keeps: owners by name
/// and by bare number (on a file, a directory and a symlink), a file with
/// three names, user attributes, an access and a default ACL, a mode that
/// is not the umask's, a name that is not UTF-8, names of 255 bytes (a
/// directory, files of one-, two- and three-byte characters), a FIFO, a
/// sparse file, an empty file, relative and absolute symlinks.
fn rsync_tree(parent: &Path) -> PathBuf {
    let top = parent.join("run");
    std::fs::create_dir_all(top.join("dir")).unwrap();
    std::fs::create_dir_all(top.join("sub")).unwrap();
    let long = top.join("d".repeat(255));
    std::fs::create_dir_all(&long).unwrap();
    std::fs::write(long.join("x".repeat(255)), crate::util::noise(70_000, 5)).unwrap();
    std::fs::write(top.join("\u{e9}".repeat(127)), b"e-acute").unwrap();
    std::fs::write(top.join("\u{6587}".repeat(85)), b"wen").unwrap();
    let fifo =
        std::ffi::CString::new(top.join("pipe").into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; mkfifo reads it only.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o620) }, 0);
    let sparse = std::fs::File::create(top.join("sparse")).unwrap();
    sparse.set_len(64 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&sparse, b"middle", 32 << 20).unwrap();
    std::fs::write(top.join("a"), crate::util::noise(300_000, 4)).unwrap();
    std::fs::hard_link(top.join("a"), top.join("sub/a2")).unwrap();
    std::fs::hard_link(top.join("a"), top.join("z3")).unwrap();
    std::fs::write(top.join(os(b"caf\xe9")), b"latin-1").unwrap();
    std::fs::write(top.join("empty"), b"").unwrap();
    std::fs::write(top.join("f"), b"data").unwrap();
    std::fs::write(top.join("sub/by-nobody"), b"n").unwrap();
    std::fs::write(top.join("by-number"), b"x").unwrap();
    std::os::unix::fs::symlink("a", top.join("link")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/abs", top.join("abslink")).unwrap();
    let nobody = (Some(65534), Some(65534));
    for p in ["sub", "sub/by-nobody", "link"] {
        std::os::unix::fs::lchown(top.join(p), nobody.0, nobody.1).unwrap();
    }
    std::os::unix::fs::lchown(top.join("by-number"), Some(43_210), Some(43_211)).unwrap();
    let sh = |args: &[&str]| {
        let o = std::process::Command::new(args[0])
            .args(&args[1..])
            .current_dir(&top)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    };
    sh(&["setfattr", "-n", "user.instrument", "-v", "ALMA-B6", "f"]);
    sh(&["setfattr", "-n", "user.run", "-v", "42", "dir"]);
    sh(&["setfacl", "-m", "u:nobody:r", "f"]);
    sh(&["setfacl", "-d", "-m", "u:nobody:rx", "dir"]);
    sh(&["chmod", "750", "dir"]);
    sh(&["chmod", "604", "by-number"]);
    top
}

/// What `rsync -aHAX --numeric-ids --dry-run --itemize-changes` would
/// change to make `got` match `want`: one line per entry, none when they
/// match. The receiver's own stamp (`user.urmove`, see the README) is left
/// out of the comparison.
fn rsync_changes(want: &Path, got: &Path) -> String {
    rsync_changes_with(&["-aHAX", "--numeric-ids"], want, got)
}

/// What `rsync FLAGS --dry-run --itemize-changes` would change to make
/// `got` match `want`, the receiver's stamp left out; empty when equal.
pub fn rsync_changes_with(flags: &[&str], want: &Path, got: &Path) -> String {
    let o = std::process::Command::new("rsync")
        .args(flags)
        .args(["--dry-run", "--itemize-changes"])
        .arg("--filter=-x user.urmove")
        .arg(format!("{}/", want.display()))
        .arg(format!("{}/", got.display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "rsync: {}", stderr(&o));
    stdout(&o)
}

#[test]
fn a_pushed_and_a_pulled_tree_leave_rsync_nothing_to_change() {
    let tools = ["rsync", "setfattr", "setfacl"];
    if !crate::util::is_root() || !tools.iter().all(|t| crate::util::have(t)) {
        eprintln!("skipped: needs root (owners) and {tools:?}");
        return;
    }
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = rsync_tree(src.path());
    let keep = ["-H", "-X", "-A", "--numeric-ids", "--json"];
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    let v = json(&d.send(&keep, &args));
    assert_eq!(v["status"], "ok", "{v}");
    let pushed = d.root.path().join("in/run");
    assert_eq!(rsync_changes(&top, &pushed), "", "after the push");

    // The cron job's second run finds every file as it left it, the
    // file with three names too, and leaves the tree as rsync wants it.
    let v = json(&d.send(&keep, &args));
    assert_eq!(
        (v["bytes"].as_u64(), v["files_unchanged"].as_u64()),
        (Some(0), v["files"].as_u64()),
        "{v}"
    );
    assert_eq!(rsync_changes(&top, &pushed), "", "after the re-run");

    // A pull with the same flags brings the same tree back.
    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    let pull = |flags: &[&str], into: &Path| {
        let o = urmove()
            .args(["pull", "-p", &d.port.to_string(), "--key-file"])
            .arg(&d.key)
            .args(flags)
            .arg("127.0.0.1:in/run")
            .arg(into)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    };
    pull(&keep[..4], local.path());
    assert_eq!(
        rsync_changes(&top, &local.path().join("run")),
        "",
        "after the pull"
    );

    // Without them, rsync sees what was left behind: the comparison can fail.
    let bare = tempfile::tempdir_in("/var/tmp").unwrap();
    pull(&[], bare.path());
    let changes = rsync_changes(&top, &bare.path().join("run"));
    for line in [".f.......ax f", ".d.......ax dir/", "hf          z3 => a"] {
        assert!(changes.lines().any(|l| l == line), "{line}: {changes}");
    }
}

/// `pull` takes what `send` takes to choose what goes: `--exclude` rules
/// go to the daemon, whose listing leaves those entries out (counted);
/// `--dry-run` says what would come and go and changes nothing here;
/// `--delete` removes this side's extras under the directories pulled,
/// never what `--exclude` leaves out (unless `--delete-excluded`) nor
/// anything beside them; `DIR/` prunes LOCAL itself.
#[test]
fn pull_excludes_deletes_and_dry_runs_as_send_does() {
    let d = Daemon::start();
    let top = filter_tree(d.root.path());
    std::fs::remove_dir_all(top.join("cache")).unwrap();
    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    let pull = |extra: &[&str], paths: &[&str], into: &Path| {
        urmove()
            .args(["pull", "-p", &d.port.to_string(), "--key-file"])
            .arg(&d.key)
            .args(extra)
            .args(paths)
            .arg(into)
            .output()
            .unwrap()
    };
    let ex = ["--exclude", "*.tmp", "--exclude", "/run/debug.log"];
    let o = pull(
        &[&ex[..], &["--json"]].concat(),
        &["127.0.0.1:run"],
        local.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(
        (v["files_verified"].as_u64(), v["files_excluded"].as_u64()),
        (Some(4), Some(2)),
        "{v}"
    );
    let got = local.path().join("run");
    assert!(got.join("raw/sub/b.dat").is_file() && got.join("notes.txt").is_file());
    assert!(!got.join("raw/a.tmp").exists() && !got.join("debug.log").exists());
    let o = pull(&ex, &["127.0.0.1:run"], local.path());
    assert!(
        stdout(&o).contains("left out 2 entries matching --exclude"),
        "{}",
        stdout(&o)
    );

    // Extras here: one under run (goes), one --exclude keeps, one beside.
    std::fs::write(got.join("raw/extra.dat"), b"only here").unwrap();
    std::fs::write(got.join("old.tmp"), b"excluded here").unwrap();
    std::fs::write(local.path().join("beside.dat"), b"not pulled").unwrap();
    std::fs::write(top.join("notes.txt"), b"longer notes").unwrap();
    let before = snapshot(local.path());
    let dry = [&ex[..], &["-n", "--delete"]].concat();
    let o = pull(&dry, &["127.0.0.1:run"], local.path());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("12 B  run/notes.txt"), "{out}");
    assert!(
        out.contains("delete  run/raw/extra.dat") && !out.contains("old.tmp"),
        "{out}"
    );
    let want = format!(
        "dry run: would pull 1 file, 12 B from 127.0.0.1:run into {}, 2 entries left out by --exclude; this side holds 3 files unchanged",
        local.path().display()
    );
    assert!(
        out.contains(&want) && out.contains("; would delete 1 entry; nothing was sent or written"),
        "{out}"
    );
    assert_eq!(
        snapshot(local.path()),
        before,
        "the dry run changed this side"
    );
    let log = d.log_until("a dry run of");
    assert!(log.contains("a dry run of"), "{log}");
    let v = json(&pull(
        &[&dry[..], &["--json"]].concat(),
        &["127.0.0.1:run"],
        local.path(),
    ));
    assert_eq!(
        (v["command"].as_str(), v["files"].as_u64()),
        (Some("pull"), Some(1)),
        "{v}"
    );
    assert_eq!(
        v["deleted"],
        serde_json::json!(["run/raw/extra.dat"]),
        "{v}"
    );
    assert_eq!(
        snapshot(local.path()),
        before,
        "the dry run changed this side"
    );

    // The real run does what the dry run said.
    let v = json(&pull(
        &[&ex[..], &["--delete", "--json"]].concat(),
        &["127.0.0.1:run"],
        local.path(),
    ));
    assert_eq!(
        v["deleted"],
        serde_json::json!(["run/raw/extra.dat"]),
        "{v}"
    );
    assert_eq!(
        (v["files_verified"].as_u64(), v["files_deleted"].as_u64()),
        (Some(1), Some(1)),
        "{v}"
    );
    assert_eq!(
        std::fs::read(got.join("notes.txt")).unwrap(),
        b"longer notes"
    );
    assert!(got.join("old.tmp").is_file() && local.path().join("beside.dat").is_file());
    let v = json(&pull(
        &[&ex[..], &["--delete-excluded", "--json"]].concat(),
        &["127.0.0.1:run"],
        local.path(),
    ));
    assert_eq!(v["deleted"], serde_json::json!(["run/old.tmp"]), "{v}");
    assert!(local.path().join("beside.dat").is_file());

    // A directory's contents: LOCAL stands for it, and is pruned too.
    let into = local.path().join("c");
    let o = pull(&[], &["127.0.0.1:run/"], &into);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(into.join("top-extra"), b"x").unwrap();
    let v = json(&pull(&["--delete", "--json"], &["127.0.0.1:run/"], &into));
    assert_eq!(v["deleted"], serde_json::json!(["top-extra"]), "{v}");
    assert_eq!(names_under(&into), names_under(&top));

    // Usage: --delete with --shard is refused (exit 2); a dry run with
    // nothing listening fails, saying it was one (exit 1).
    let o = pull(
        &["--delete", "--shard", "0/2"],
        &["127.0.0.1:run"],
        local.path(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = urmove()
        .args(["pull", "-n", "-p", "9", "--key-file"])
        .arg(&d.key)
        .args(["127.0.0.1:run"])
        .arg(local.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("dry run: "), "{}", stderr(&o));
}
