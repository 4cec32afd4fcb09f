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
    // No receiver is needed: nothing listens on this port.
    let o = urmove()
        .args(["send", "-n", "--json", "-p", "9", "--key-file"])
        .arg(&d.key)
        .args([top.to_str().unwrap(), "127.0.0.1:in"])
        .output()
        .unwrap();
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
        .cloned();
    assert_eq!(big.map(|e| e["size"].clone()), Some(1_500_000.into()));
}
