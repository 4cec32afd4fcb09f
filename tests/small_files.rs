//! Many small files, committed by the receiver in batches (issue 35): they
//! land identical and stamped, and a receiver killed mid-tree leaves every
//! file under its final name complete, the rest resumed by the next run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::transfer::{assert_same_tree, no_part_files, Daemon};
use crate::util::{json, noise, stderr, urmove};

/// `dirs` directories of `per` files each, of sizes from 0 to 8 KiB and
/// a few modes.
fn small_tree(dir: &Path, dirs: u64, per: u64) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let top = dir.join("small");
    for d in 0..dirs {
        let sub = top.join(format!("d{d:02}"));
        std::fs::create_dir_all(&sub).unwrap();
        for f in 0..per {
            let i = d * per + f;
            let p = sub.join(format!("f{f:03}"));
            std::fs::write(&p, noise((i * 37 % 8193) as usize, i)).unwrap();
            let mode = [0o644, 0o600, 0o640, 0o755][(i % 4) as usize];
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
    }
    top
}

/// Every regular file under `top`, as paths relative to it.
fn files_under(top: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![top.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                out.push(e.path().strip_prefix(top).unwrap().to_path_buf());
            }
        }
    }
    out
}

/// A tree of 2,000 small files lands identical (bytes, modes, mtimes),
/// every file carries the receiver's stamp, and the run again finds every
/// one unchanged and sends nothing.
#[test]
fn many_small_files_land_identical_stamped_and_a_rerun_sends_nothing() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = small_tree(src.path(), 20, 100);
    let o = d.send(&["--json"], &[top.to_str().unwrap(), "127.0.0.1:"]);
    assert!(o.status.success(), "{}\n{}", stderr(&o), d.log());
    assert_eq!(json(&o)["files_verified"], 2000);
    let got = d.root.path().join("small");
    assert_same_tree(&top, &got);
    assert!(no_part_files(&got));
    for rel in files_under(&got) {
        let f = std::fs::File::open(got.join(&rel)).unwrap();
        let stamp = urmove::datapath::sys::get_xattr(&f, c"user.urmove");
        let head = stamp.as_deref().map(|s| (s.len(), s[..2].to_vec()));
        assert_eq!(head, Some((42, b"S\x05".to_vec())), "{}", rel.display());
    }
    let v = json(&d.send(&["--json"], &[top.to_str().unwrap(), "127.0.0.1:"]));
    assert_eq!(
        (v["files_unchanged"].as_u64(), v["bytes"].as_u64()),
        (Some(2000), Some(0)),
        "{v}"
    );
}

/// The receiver killed (SIGKILL) while a tree of small files arrives: every
/// file under its final name is complete and identical to its source; the
/// run again sends what is missing (not what was committed: those are found
/// unchanged) and the tree is whole.
#[test]
fn a_receiver_killed_mid_tree_leaves_only_complete_files_under_their_names() {
    let mut d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = small_tree(src.path(), 10, 100);
    let got = d.root.path().join("small");
    // About 4 MB at 16 Mbit/s: two seconds or so, long enough to stop it
    // in the middle.
    let mut child = urmove()
        .args(["send", "-p", &d.port.to_string(), "--key-file"])
        .arg(&d.key)
        .args([
            "--rate-limit",
            "16Mbit",
            top.to_str().unwrap(),
            "127.0.0.1:",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let committed = |at: &Path| {
        if !at.exists() {
            return Vec::new();
        }
        let mut f = files_under(at);
        f.retain(|p| !p.to_string_lossy().contains(".urmove."));
        f
    };
    let mut seen = 0;
    for _ in 0..1000 {
        seen = committed(&got).len();
        if seen >= 100 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    d.kill_and_restart();
    let before = committed(&got);
    let _ = child.wait();
    assert!(
        seen >= 100 && before.len() < 1000,
        "{seen}, {}",
        before.len()
    );
    for rel in &before {
        assert_eq!(
            std::fs::read(got.join(rel)).unwrap(),
            std::fs::read(top.join(rel)).unwrap(),
            "{} is under its name but not the source's bytes",
            rel.display()
        );
    }
    let o = d.send(&["--json"], &[top.to_str().unwrap(), "127.0.0.1:"]);
    assert!(o.status.success(), "{}\n{}", stderr(&o), d.log());
    let v = json(&o);
    assert_same_tree(&top, &got);
    assert!(no_part_files(&got));
    // Found by their stamp, or (the daemon listens on another port now,
    // so its stamps name another owner) by their content: not sent again.
    let n = |k: &str| v[k].as_u64().unwrap();
    let kept = n("files_unchanged") + n("files_found_complete");
    assert!(
        kept >= before.len() as u64,
        "{} committed, {v}",
        before.len()
    );
    assert_eq!(n("files_verified") + n("files_unchanged"), 1000, "{v}");
    let held: u64 = before
        .iter()
        .map(|rel| std::fs::metadata(top.join(rel)).unwrap().len())
        .sum();
    assert!(n("bytes") <= n("bytes_total") - held, "{held} held, {v}");
}
