//! The receiver's stamp on what it commits (issues 32 and 33): it costs no
//! disk block (it fits in the inode of ext4 and XFS made with defaults).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::transfer::Daemon;
use crate::util::{can_loop, json, noise, stderr, LoopFs};

/// Files of sizes around block edges, none with attributes of its own.
fn plain_files(top: &Path) -> Vec<String> {
    std::fs::create_dir_all(top.join("d")).unwrap();
    let sizes = [0usize, 1, 100, 4095, 4096, 4097, 65_536, 300_001, 1 << 20];
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let name = if i % 2 == 0 {
                format!("f{i}")
            } else {
                format!("d/f{i}")
            };
            std::fs::write(top.join(&name), noise(n, i as u64)).unwrap();
            name
        })
        .collect()
}

/// What each file takes on disk (`st_blocks`), received and at its source.
fn blocks_of(names: &[String], src: &Path, got: &Path) -> Vec<(String, u64, u64)> {
    names
        .iter()
        .map(|n| {
            let b = |p: &Path| std::fs::metadata(p.join(n)).unwrap().blocks();
            (n.clone(), b(src), b(got))
        })
        .collect()
}

/// On ext4 and XFS made with defaults, every received file (stamped, so a
/// re-run skips it) takes the blocks its source takes: the stamp lives in
/// the inode. Pushed, and pulled back.
#[test]
fn a_received_file_takes_no_more_blocks_than_its_source() {
    for fs in ["ext4", "xfs"] {
        if !can_loop(fs) {
            eprintln!("skipped {fs}: needs root, losetup and mkfs");
            continue;
        }
        let fs_dir = LoopFs::new(fs, 1024, 512, false).unwrap();
        let src = fs_dir.path().join("src");
        let names = plain_files(&src.join("t"));
        let d = Daemon::start_full(&[], "127.0.0.1", fs_dir.path(), &[]);
        let o = d.send(
            &["--json"],
            &[src.join("t").to_str().unwrap(), "127.0.0.1:"],
        );
        assert!(o.status.success(), "{fs}: {}", stderr(&o));
        let got = d.root.path().join("t");
        for (n, want, have) in blocks_of(&names, &src.join("t"), &got) {
            assert_eq!(
                have, want,
                "{fs}: {n} takes {have} blocks, its source {want}"
            );
        }
        // They are stamped: the run again finds them unchanged.
        let v = json(&d.send(
            &["--json"],
            &[src.join("t").to_str().unwrap(), "127.0.0.1:"],
        ));
        assert_eq!(
            v["files_unchanged"].as_u64(),
            Some(names.len() as u64),
            "{fs}: {v}"
        );
        // Pulled back onto the same filesystem: the same.
        let back = fs_dir.path().join("back");
        let o = crate::util::urmove()
            .args(["pull", "-p", &d.port.to_string(), "--key-file"])
            .arg(&d.key)
            .arg("127.0.0.1:t")
            .arg(&back)
            .output()
            .unwrap();
        assert!(o.status.success(), "{fs}: {}", stderr(&o));
        for (n, want, have) in blocks_of(&names, &src.join("t"), &back.join("t")) {
            assert_eq!(
                have, want,
                "{fs} pull: {n} takes {have} blocks, its source {want}"
            );
        }
    }
}
