//! `urmove bench --disk` as a user runs it, on real files with O_DIRECT.

use std::io::{Seek, SeekFrom, Write};

use crate::util::{json, run, stderr, stdout};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir_in("/var/tmp").unwrap()
}

fn p(path: &std::path::Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn default_write_then_read_reports_core_fields_and_cleans_up() {
    let dir = tmp();
    let o = run(&["bench", "--disk", p(dir.path()), "--size", "32M", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["schema"], 1);
    assert_eq!(v["status"], "ok");
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for (r, mode) in results.iter().zip(["write", "read"]) {
        assert_eq!(r["mode"], mode);
        assert_eq!(r["bytes"], 32 << 20);
        assert!(r["elapsed_s"].as_f64().unwrap() > 0.0);
        assert!(r["rate_bytes_per_s"].as_f64().unwrap() > 0.0);
        assert!(r["iops"].as_f64().unwrap() > 0.0);
        assert_eq!(r["ops"], 32);
        for k in ["p50", "p99", "p999", "max"] {
            assert!(r["latency_us"][k].as_f64().unwrap() > 0.0, "{k}");
        }
        assert!(r["interval_rate_min_bytes_per_s"].as_f64().unwrap() > 0.0);
    }
    let env = &v["env"];
    assert!(env["kernel"].as_str().unwrap().len() > 2);
    let t = &env["targets"][0];
    assert_eq!(t["direct_io"], true);
    assert_eq!(t["filesystem"], "ext4");
    assert_eq!(t["dio_align_from"], "statx");
    assert!(env["io_uring_features"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "registered_buffers"));
    assert!(env["io_uring_features"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "registered_files"));
    assert_eq!(env["queue_depth"], 32);
    // The test file is gone.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn json_stream_is_one_object_per_line_ending_in_the_summary() {
    let dir = tmp();
    let o = run(&[
        "bench",
        "--disk",
        p(dir.path()),
        "--mode",
        "write",
        "--size",
        "64M",
        "--time",
        "1500ms",
        "--interval",
        "200ms",
        "--json-stream",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines.len() >= 5,
        "expected several intervals, got {}",
        lines.len()
    );
    let (summary, intervals) = lines.split_last().unwrap();
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["status"], "ok");
    let mut total = 0;
    for l in intervals {
        assert_eq!(l["type"], "interval");
        assert_eq!(l["mode"], "write");
        total += l["bytes"].as_u64().unwrap();
        // Per-interval, not cumulative: rate * length == bytes.
        let rate = l["rate_bytes_per_s"].as_f64().unwrap();
        let len = l["interval_s"].as_f64().unwrap();
        let bytes = l["bytes"].as_f64().unwrap();
        assert!((rate * len - bytes).abs() <= bytes * 1e-6 + 1.0);
    }
    assert_eq!(
        total,
        summary["results"][0]["bytes"].as_u64().unwrap(),
        "intervals add up to the total"
    );
}

#[test]
fn human_output_has_interval_lines_and_a_dd_style_summary() {
    let dir = tmp();
    let o = run(&[
        "bench",
        "--disk",
        p(dir.path()),
        "--mode",
        "write",
        "--size",
        "16M",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("16777216 bytes (16.8 MB, 16.0 MiB) in"),
        "{out}"
    );
    assert!(out.contains("MB/s") || out.contains("GB/s"), "{out}");
    assert!(out.contains("latency p50"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("  write  ") && l.contains(" of ") && l.contains('%')),
        "{out}"
    );
}

#[test]
fn short_reads_at_an_unaligned_end_of_file_count_exact_bytes() {
    let dir = tmp();
    let path = dir.path().join("odd.dat");
    let len = (3 << 20) + 1000;
    std::fs::write(&path, crate::util::noise(len, 5)).unwrap();
    let o = run(&[
        "bench",
        "--disk",
        p(&path),
        "--mode",
        "read",
        "--bs",
        "1M",
        "--direct",
        "required",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["results"][0]["bytes"].as_u64().unwrap(), len as u64);
    assert_eq!(v["results"][0]["ops"], 4);
    // The user's file is read, never removed or changed.
    assert_eq!(std::fs::read(&path).unwrap(), crate::util::noise(len, 5));
}

#[test]
fn short_writes_are_continued_where_they_stopped() {
    for qd in ["1", "32"] {
        short_write_at_qd(qd);
    }
}

fn short_write_at_qd(qd: &str) {
    // RLIMIT_FSIZE of 1.5 MiB makes the second 1 MiB write come back short
    // (512 KiB); the rest is re-issued at 1.5 MiB and fails with EFBIG,
    // which must be reported at that offset, not at the block's start.
    crate::require!(
        crate::util::have("prlimit"),
        "prlimit (util-linux) not installed"
    );
    let dir = tmp();
    let path = dir.path().join("w.dat");
    let o = std::process::Command::new("prlimit")
        .arg("--fsize=1572864")
        .arg(env!("CARGO_BIN_EXE_urmove"))
        .args([
            "bench",
            "--disk",
            p(&path),
            "--mode",
            "write",
            "--size",
            "4M",
            "--bs",
            "1M",
            "--qd",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("at offset 1572864"), "qd {qd}: {err}");
    assert!(err.contains("File too large"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn verify_catches_a_corrupted_and_a_misdirected_block() {
    let dir = tmp();
    let path = dir.path().join("v.dat");
    let args = |mode: &str| {
        vec![
            "bench".to_string(),
            "--disk".into(),
            p(&path).into(),
            "--mode".into(),
            mode.into(),
            "--size".into(),
            "8M".into(),
            "--bs".into(),
            "1M".into(),
            "--verify".into(),
            "--json".into(),
        ]
    };
    let runv = |a: Vec<String>| {
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        run(&refs)
    };
    let o = runv(args("write"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(path.exists(), "a named file target is kept");

    // Untouched: every block verifies.
    let o = runv(args("read"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json(&o)["results"][0]["verified_blocks"], 8);

    // One flipped byte in block 3.
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    f.seek(SeekFrom::Start((3 << 20) + 100)).unwrap();
    f.write_all(&[0x5A]).unwrap();
    f.sync_all().unwrap();
    let o = runv(args("read"));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["status"], "verify_failed");
    let e = v["error"].as_str().unwrap();
    assert!(
        e.contains("offset 3145728") && e.contains("checksum mismatch"),
        "{e}"
    );
    assert!(stderr(&o).contains("verify failed"), "{}", stderr(&o));

    // Rewrite, then copy block 2 over block 5: a misdirected write.
    assert!(runv(args("write")).status.success());
    let data = std::fs::read(&path).unwrap();
    let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.seek(SeekFrom::Start(5 << 20)).unwrap();
    f.write_all(&data[2 << 20..3 << 20]).unwrap();
    f.sync_all().unwrap();
    let o = runv(args("read"));
    assert_eq!(o.status.code(), Some(1));
    let e = json(&o)["error"].as_str().unwrap().to_string();
    assert!(
        e.contains("offset 5242880") && e.contains("carries offset 2097152"),
        "{e}"
    );
}

#[test]
fn verify_with_random_writes_and_a_mix_passes() {
    let dir = tmp();
    let o = run(&[
        "bench",
        "--disk",
        p(dir.path()),
        "--mode",
        "randwrite,rw,read",
        "--bs",
        "64k",
        "--size",
        "8M",
        "--qd",
        "16",
        "--verify",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["results"][2]["verified_blocks"], 128);
    assert!(v["env"]["targets"][0]["laid_out_bytes"].as_u64().unwrap() == 8 << 20);
}

#[test]
fn min_rate_gate_passes_far_below_and_fails_far_above() {
    let dir = tmp();
    // Small blocks at a low depth complete often, so even a loaded shared
    // disk moves far more than 100 kB in any 500 ms.
    let base = [
        "bench",
        "--disk",
        p(dir.path()),
        "--mode",
        "write",
        "--size",
        "64M",
        "--bs",
        "64k",
        "--qd",
        "4",
        "--time",
        "2s",
        "--window",
        "500ms",
        "--json",
    ];
    let low: Vec<&str> = base
        .iter()
        .copied()
        .chain(["--min-rate", "100kB"])
        .collect();
    let o = run(&low);
    assert!(o.status.success(), "{}", stderr(&o));
    let g = &json(&o)["results"][0]["min_rate"];
    assert_eq!(g["ok"], true);
    assert_eq!(g["windows_short"], 0);
    assert!(g["windows_total"].as_u64().unwrap() > 1);

    let high: Vec<&str> = base
        .iter()
        .copied()
        .chain(["--min-rate", "1000Gbit"])
        .collect();
    let o = run(&high);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["status"], "min_rate_failed");
    assert_eq!(v["min_rate_ok"], false);
    let g = &v["results"][0]["min_rate"];
    assert_eq!(g["ok"], false);
    assert!(g["windows_short"].as_u64().unwrap() >= 1);
    assert!(g["worst_window_bytes_per_s"].as_f64().unwrap() > 0.0);
    assert!(g["worst_window_at_s"].as_f64().unwrap() >= 0.0);
}

#[test]
fn two_targets_run_in_parallel_with_an_aggregate() {
    let a = tmp();
    let b = tmp();
    let o = run(&[
        "bench",
        "--disk",
        p(a.path()),
        p(b.path()),
        "--mode",
        "write",
        "--size",
        "16M",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    let r = v["results"].as_array().unwrap();
    assert_eq!(r.len(), 3);
    assert_eq!(r[2]["target"], "aggregate");
    assert_eq!(r[2]["bytes"], 32 << 20);
    assert_eq!(r[0]["bytes"], 16 << 20);
    assert_eq!(v["env"]["targets"].as_array().unwrap().len(), 2);
}

#[test]
fn sweep_prints_a_table_and_writes_csv() {
    let dir = tmp();
    let csv = dir.path().join("s.csv");
    let o = run(&[
        "bench",
        "--disk",
        p(dir.path()),
        "--sweep",
        "--size",
        "256k",
        "--bs",
        "64k",
        "--csv",
        p(&csv),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("rewrite") && out.contains("randwrite"),
        "{out}"
    );
    let text = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows[0], "file_bytes,record_bytes,write_MB_per_s,rewrite_MB_per_s,read_MB_per_s,reread_MB_per_s,randread_MB_per_s,randwrite_MB_per_s");
    // 64k file: 4k..64k records (5); 128k: 5; 256k: 5.
    assert_eq!(rows.len(), 1 + 15);
    for r in &rows[1..] {
        let cells: Vec<f64> = r.split(',').map(|c| c.parse().unwrap()).collect();
        assert_eq!(cells.len(), 8);
        assert!(cells[2..].iter().all(|&x| x > 0.0), "{r}");
    }
    // The sweep file is gone, the CSV stays.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("s.csv")]);
}

#[test]
fn sigint_mid_run_stops_cleanly_and_removes_the_test_file() {
    let dir = tmp();
    let child = crate::util::urmove()
        .args([
            "bench",
            "--disk",
            p(dir.path()),
            "--mode",
            "write",
            "--time",
            "30s",
            "--size",
            "64M",
            "--json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let st = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["status"], "interrupted");
    assert!(v["results"][0]["bytes"].as_u64().unwrap() > 0);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "test file removed"
    );
}

#[test]
fn ramp_units_zeros_and_fsync_options_take_effect() {
    let dir = tmp();
    // Zeros with --fsync and a ramp: the measured part excludes the ramp.
    let o = run(&[
        "bench",
        "--disk",
        p(dir.path()),
        "--mode",
        "write",
        "--size",
        "64M",
        "--time",
        "1s",
        "--ramp",
        "300ms",
        "--zeros",
        "--fsync",
        "--units",
        "MiB",
        "--keep",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("iB/s") && !out.contains(" MB/s") && !out.contains(" GB/s"),
        "{out}"
    );
    assert!(stderr(&o).contains("kept "), "{}", stderr(&o));
    let kept: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(kept.len(), 1);
    let data = std::fs::read(&kept[0]).unwrap();
    assert!(data.iter().all(|&b| b == 0), "--zeros wrote non-zero bytes");

    // Default data is not zeros and does not compress: every 4 KiB block differs.
    let o = run(&[
        "bench",
        "--disk",
        p(&kept[0]),
        "--mode",
        "write",
        "--size",
        "4M",
        "--units",
        "Gbit",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("b/s"), "{}", stdout(&o));
    let data = std::fs::read(&kept[0]).unwrap();
    let mut blocks: Vec<&[u8]> = data[..4 << 20].chunks(4096).collect();
    blocks.sort();
    blocks.dedup();
    assert_eq!(blocks.len(), 1024, "4 KiB blocks repeat: dedupable data");
}

#[test]
fn a_users_short_file_is_refused_for_reading_never_overwritten() {
    let dir = tmp();
    let path = dir.path().join("mine.dat");
    std::fs::write(&path, crate::util::noise(1 << 20, 9)).unwrap();
    let o = run(&[
        "bench",
        "--disk",
        p(&path),
        "--mode",
        "read",
        "--size",
        "8M",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("holds written data only up to 1048576 bytes"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        crate::util::noise(1 << 20, 9),
        "the user's file changed"
    );
}

#[test]
fn a_time_limited_write_then_read_lays_out_the_rest() {
    // The write stops long before 256 MiB; the read must still find data
    // everywhere (not fail at the end of what was written).
    let dir = tmp();
    let o = run(&[
        "bench",
        "--disk",
        p(dir.path()),
        "--mode",
        "write,randread,read",
        "--size",
        "256M",
        "--bs",
        "64k",
        "--qd",
        "1",
        "--time",
        "100ms",
        "--verify",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    assert!(v["env"]["targets"][0]["laid_out_bytes"].as_u64().unwrap() > 0);
    assert!(v["results"][2]["verified_blocks"].as_u64().unwrap() > 0);
}

#[test]
fn verify_on_a_kept_file_adopts_its_seed_for_mixed_io() {
    let dir = tmp();
    let path = dir.path().join("kept.dat");
    let o = run(&[
        "bench",
        "--disk",
        p(&path),
        "--mode",
        "write",
        "--size",
        "8M",
        "--bs",
        "64k",
        "--verify",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&[
        "bench",
        "--disk",
        p(&path),
        "--mode",
        "rw,randwrite,read",
        "--size",
        "8M",
        "--bs",
        "64k",
        "--verify",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json(&o)["results"][2]["verified_blocks"], 128);
}
