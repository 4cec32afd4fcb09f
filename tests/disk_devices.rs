//! `bench --disk` on loop devices and loop-mounted filesystems: 4Kn
//! alignment, the kernel's own byte counts, device refusal, read-only and
//! full filesystems.

use crate::require;
use crate::util::{can_loop, json, run, stderr, LoopDev, LoopFs};

fn p(path: &std::path::Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn a_4kn_device_gets_4096_alignment_and_refuses_smaller_blocks() {
    require!(can_loop("xfs"), "needs root, losetup and mkfs.xfs");
    let fs = LoopFs::new("xfs", 512, 4096, false).expect("loop xfs");
    let o = run(&[
        "bench",
        "--disk",
        p(fs.path()),
        "--mode",
        "write,randread",
        "--bs",
        "4k",
        "--size",
        "8M",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    let t = &v["env"]["targets"][0];
    assert_eq!(t["filesystem"], "xfs");
    assert_eq!(t["dio_offset_align_bytes"], 4096);
    assert_eq!(t["direct_io"], true);
    assert_eq!(t["device"], fs.dev.name());

    let o = run(&[
        "bench",
        "--disk",
        p(fs.path()),
        "--bs",
        "2k",
        "--size",
        "8M",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("alignment of 4096"), "{}", stderr(&o));
}

#[test]
fn reported_bytes_match_what_the_kernel_counted_on_the_device() {
    require!(can_loop("xfs"), "needs root, losetup and mkfs.xfs");
    let fs = LoopFs::new("xfs", 640, 4096, false).expect("loop xfs");
    let _ = std::process::Command::new("sync").status();
    let (r0, w0) = fs.dev.sectors();
    let o = run(&[
        "bench",
        "--disk",
        p(fs.path()),
        "--size",
        "256M",
        "--mode",
        "write,read",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (r1, w1) = fs.dev.sectors();
    let v = json(&o);
    let reported_w = v["results"][0]["bytes"].as_f64().unwrap();
    let reported_r = v["results"][1]["bytes"].as_f64().unwrap();
    let kernel_w = ((w1 - w0) * 512) as f64;
    let kernel_r = ((r1 - r0) * 512) as f64;
    assert_eq!(reported_w, (256u64 << 20) as f64);
    assert!(
        (kernel_w - reported_w).abs() / reported_w < 0.02,
        "write: urmove {reported_w} kernel {kernel_w}"
    );
    assert!(
        (kernel_r - reported_r).abs() / reported_r < 0.02,
        "read: urmove {reported_r} kernel {kernel_r}"
    );
}

#[test]
fn a_device_holding_a_filesystem_is_refused_without_destroy() {
    require!(can_loop("ext4"), "needs root, losetup and mkfs.ext4");
    let dev = LoopDev::new(64, 512).expect("loop device");
    let d = p(&dev.dev).to_string();

    // Blank: writing is fine.
    let o = run(&[
        "bench",
        "--disk",
        &d,
        "--mode",
        "write,read",
        "--size",
        "8M",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json(&o)["env"]["targets"][0]["kind"], "block device");

    let mk = std::process::Command::new("mkfs.ext4")
        .args(["-q", "-F", &d])
        .status()
        .unwrap();
    assert!(mk.success());
    let o = run(&["bench", "--disk", &d, "--mode", "write", "--size", "8M"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("holds an ext2/3/4 filesystem") && e.contains("--destroy"),
        "{e}"
    );
    // The filesystem is untouched.
    let fsck = std::process::Command::new("e2fsck")
        .args(["-n", "-f", &d])
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "{}",
        String::from_utf8_lossy(&fsck.stdout)
    );

    // Reading is harmless and allowed.
    let o = run(&["bench", "--disk", &d, "--mode", "read", "--size", "8M"]);
    assert!(o.status.success(), "{}", stderr(&o));

    // With --destroy the user takes responsibility.
    let o = run(&[
        "bench",
        "--disk",
        &d,
        "--mode",
        "write",
        "--size",
        "8M",
        "--destroy",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn a_mounted_device_is_in_use_even_with_destroy() {
    require!(can_loop("ext4"), "needs root, losetup and mkfs.ext4");
    let fs = LoopFs::new("ext4", 64, 512, false).expect("loop ext4");
    let o = run(&[
        "bench",
        "--disk",
        p(&fs.dev.dev),
        "--mode",
        "write",
        "--size",
        "8M",
        "--destroy",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("in use"), "{}", stderr(&o));
}

#[test]
fn a_read_only_target_is_a_clear_error() {
    require!(can_loop("ext4"), "needs root, losetup and mkfs.ext4");
    let fs = LoopFs::new("ext4", 64, 512, true).expect("loop ext4 ro");
    let o = run(&["bench", "--disk", p(fs.path()), "--size", "8M"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("Read-only file system") && e.contains(p(fs.path())),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
}

#[test]
fn a_full_filesystem_clamps_then_refuses() {
    require!(can_loop("ext4"), "needs root, losetup and mkfs.ext4");
    let fs = LoopFs::new("ext4", 160, 512, false).expect("loop ext4");
    // Asking for more than is free: clamped with a message, and it runs.
    let o = run(&["bench", "--disk", p(fs.path()), "--size", "1G", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("size clamped from"), "{}", stderr(&o));
    let bytes = json(&o)["results"][0]["bytes"].as_u64().unwrap();
    assert!(bytes > 0 && bytes < 160 << 20);

    // Fill it up: nothing left to test with.
    // Freed blocks of the first run's file may be released lazily: sync and
    // top up until (almost) nothing is free.
    for i in 0..3 {
        let _ = std::process::Command::new("sync")
            .arg("-f")
            .arg(fs.path())
            .status();
        let df = std::process::Command::new("stat")
            .args(["-f", "-c", "%a %S"])
            .arg(fs.path())
            .output()
            .unwrap();
        let df = String::from_utf8_lossy(&df.stdout);
        let mut it = df.split_whitespace().map(|x| x.parse::<u64>().unwrap());
        let free = it.next().unwrap() * it.next().unwrap();
        if free <= 512 << 10 {
            break;
        }
        let fill = std::process::Command::new("fallocate")
            .args(["-l", &(free - (256 << 10)).to_string()])
            .arg(fs.path().join(format!("fill{i}")))
            .status()
            .unwrap();
        assert!(fill.success());
    }
    let o = run(&["bench", "--disk", p(fs.path()), "--size", "64M"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("not enough free space"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    let left: Vec<_> = std::fs::read_dir(fs.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        !left
            .iter()
            .any(|n| n.to_string_lossy().starts_with("urmove-bench")),
        "{left:?}"
    );
}

/// A ramfs mount (no O_DIRECT at all), unmounted on drop.
struct Ramfs(tempfile::TempDir);

impl Ramfs {
    fn new() -> Option<Self> {
        let d = tempfile::tempdir_in("/var/tmp").ok()?;
        let ok = std::process::Command::new("mount")
            .args(["-t", "ramfs", "ramfs"])
            .arg(d.path())
            .status()
            .ok()?
            .success();
        ok.then_some(Ramfs(d))
    }
}

impl Drop for Ramfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.0.path())
            .status();
    }
}

#[test]
fn without_o_direct_auto_falls_back_and_required_refuses() {
    require!(crate::util::is_root(), "needs root to mount ramfs");
    let Some(fs) = Ramfs::new() else {
        eprintln!("skipped: cannot mount ramfs");
        return;
    };
    let o = run(&["bench", "--disk", p(fs.0.path()), "--size", "8M", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("O_DIRECT refused by the filesystem"),
        "{}",
        stderr(&o)
    );
    let v = json(&o);
    assert_eq!(v["env"]["targets"][0]["direct_io"], false);
    assert_eq!(v["env"]["targets"][0]["filesystem"], "ramfs");
    assert_eq!(v["env"]["fallbacks"].as_array().unwrap().len(), 1);
    assert_eq!(v["results"][1]["bytes"], 8 << 20);

    let o = run(&[
        "bench",
        "--disk",
        p(fs.0.path()),
        "--size",
        "8M",
        "--direct",
        "required",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("does not support O_DIRECT"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn without_cap_ipc_lock_the_arena_fits_memlock_or_says_what_to_raise() {
    require!(
        crate::util::is_root() && crate::util::have("setpriv") && crate::util::have("prlimit"),
        "needs root, setpriv and prlimit"
    );
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let limited = |memlock: &str, extra: &[&str]| {
        std::process::Command::new("prlimit")
            .arg(format!("--memlock={memlock}:{memlock}"))
            .args([
                "setpriv",
                "--bounding-set=-ipc_lock",
                "--inh-caps=-ipc_lock",
            ])
            .arg(env!("CARGO_BIN_EXE_urmove"))
            .args([
                "bench",
                "--disk",
                p(dir.path()),
                "--mode",
                "write",
                "--size",
                "16M",
                "--json",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    // 8 MiB of locked memory holds at most 8 buffers of 1 MiB (less the
    // ring's own accounted pages): depth 32 is lowered to fit, and it runs.
    let o = limited("8388608", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    let qd = v["env"]["queue_depth"].as_u64().unwrap();
    assert!((1..=8).contains(&qd), "queue depth {qd}");
    assert!(
        stderr(&o).contains(&format!("queue depth lowered from 32 to {qd}")),
        "{}",
        stderr(&o)
    );
    // Both phases run: the first ring's locked pages are released in time.
    for r in v["results"].as_array().unwrap() {
        assert_eq!(r["queue_depth"], qd);
        assert_eq!(r["bytes"], 16 << 20);
    }

    // Not even one buffer fits: refuse, naming the limit to raise.
    let o = limited("524288", &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("RLIMIT_MEMLOCK") && e.contains("LimitMEMLOCK="),
        "{e}"
    );
}
