//! scripts/bench-files.sh (issue 35's many-files benchmark) at a smoke size,
//! and the helper whose sum decides whether a tool's copy counts.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::util::{is_root, output_within, stderr, stdout};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/bench-files.sh");
const HELPER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/bench-files-helper.c");

fn can_run() -> bool {
    is_root()
        && ["ip", "ss", "cc", "rsync", "tar", "python3"]
            .iter()
            .all(|t| crate::util::have(t))
}

/// The pipe tool the script would take, if any.
fn pipe_tool() -> Option<&'static str> {
    ["socat", "ncat", "nc.openbsd"]
        .into_iter()
        .find(|t| crate::util::have(t))
}

fn script(root: &Path, out: &Path, tools: &str, files: &str) -> Command {
    let pid = std::process::id() % 200;
    let mut c = Command::new(SCRIPT);
    c.env("FILES", files)
        .env("ROUNDS", "1")
        .env("TOOLS", tools)
        .env("ROOT", root)
        .env("OUT", out)
        .env("URMOVE", env!("CARGO_BIN_EXE_urmove"))
        .env("PORT", (18_000 + pid * 3).to_string())
        .env("NS_A", format!("urbf-a-{pid}"))
        .env("NS_B", format!("urbf-b-{pid}"))
        .env("ADDR_A", format!("10.82.{pid}.1"))
        .env("ADDR_B", format!("10.82.{pid}.2"));
    c
}

#[test]
fn bench_files_moves_a_small_tree_with_every_tool_and_prints_the_table() {
    crate::require!(
        can_run(),
        "needs root, iproute2, cc, rsync, tar and python3"
    );
    let mut tools = "urmove-lo urmove-ns rsyncd-lo rsyncd-ns rsync-local cp".to_string();
    if pipe_tool().is_some() {
        tools.push_str(" tar-lo");
    }
    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let out = work.path().join("report.md");
    let c = script(&work.path().join("root"), &out, &tools, "200");
    let o = output_within(c, Duration::from_secs(600));
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let report = std::fs::read_to_string(&out).unwrap();
    assert_eq!(report, stdout(&o), "the report is what it printed");
    assert!(report.contains("**A smoke run**"), "{report}");
    // One row per tool, each with a round that counted: its copy summed
    // equal to the source, its rate, first byte and memory measured.
    let rows: Vec<Vec<String>> = report
        .lines()
        .filter(|l| l.starts_with("| 200 |"))
        .map(|l| {
            l.replace("\\|", "/")
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect();
    let n = tools.split_whitespace().count();
    assert_eq!(rows.len(), n + 1, "{report}"); // and the ratios' row
    for r in &rows[..n] {
        let fps: f64 = r[3].parse().unwrap_or_else(|_| panic!("no files/s: {r:?}"));
        let first: f64 = r[4]
            .parse()
            .unwrap_or_else(|_| panic!("no first byte: {r:?}"));
        assert!(fps > 0.0 && first >= 0.0, "{r:?}");
        let send_mib: f64 = r[5].split(' ').next().unwrap().parse().unwrap();
        assert!(send_mib > 0.5, "{r:?}");
        assert!(!r[9].contains("not counted"), "{r:?}");
    }
    let urmove = rows.iter().find(|r| r[2] == "urmove, loopback").unwrap();
    assert!(urmove[6].ends_with("(1.00x)"), "{urmove:?}");
    let ratios = &rows[n];
    assert!(ratios[2].parse::<f64>().is_ok(), "{ratios:?}");
    // Gone at the end: the namespaces, the destination.
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let pid = std::process::id() % 200;
    assert!(
        !stdout(&list).contains(&format!("urbf-a-{pid}")),
        "namespaces left"
    );
    assert!(!work.path().join("root/dst").exists());
}

#[test]
fn bench_files_skips_a_size_the_disk_cannot_hold_and_says_what_it_needs() {
    crate::require!(
        can_run(),
        "needs root, iproute2, cc, rsync, tar and python3"
    );
    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let out = work.path().join("report.md");
    // 100 files fit, and their tree is made; then 100 and 300 are made to
    // need more than any disk has free.
    let mut c = script(&work.path().join("root"), &out, "cp", "100");
    c.env("RESERVE_MB", "0");
    let o = output_within(c, Duration::from_secs(300));
    assert!(o.status.success(), "{}", stderr(&o));
    let mut c = script(&work.path().join("root"), &out, "cp", "100 300");
    c.env("RESERVE_MB", (1u64 << 40).to_string());
    let o = output_within(c, Duration::from_secs(300));
    assert!(o.status.success(), "{}", stderr(&o));
    let report = std::fs::read_to_string(&out).unwrap();
    for n in ["100", "300"] {
        let row = report
            .lines()
            .find(|l| l.starts_with(&format!("| {n} | skipped: needs ")))
            .unwrap_or_else(|| panic!("{n} not skipped: {report}"));
        assert!(row.contains("destination") && row.contains("free"), "{row}");
    }
    // The tree the first run made is not counted again; the other is.
    let row100 = report.lines().find(|l| l.starts_with("| 100 |")).unwrap();
    let row300 = report.lines().find(|l| l.starts_with("| 300 |")).unwrap();
    assert!(
        !row100.contains("source") && row300.contains("source"),
        "{report}"
    );
}

fn sum(helper: &Path, dir: &Path) -> String {
    let o = Command::new(helper).arg("sum").arg(dir).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
}

#[test]
fn the_helpers_sum_tells_a_true_copy_from_a_changed_one() {
    crate::require!(is_root() && crate::util::have("cc"), "needs root and cc");
    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let helper = work.path().join("helper");
    let o = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&helper)
        .arg(HELPER)
        .arg("-lm")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let src = work.path().join("src");
    let o = Command::new(&helper)
        .arg("gen")
        .arg(&src)
        .args(["2500", "7", "1.0", "0"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let want = sum(&helper, &src);
    let f: Vec<&str> = want.split_whitespace().collect();
    // 2,500 files in 3 leaf directories under one (000/00..02): bytes as
    // `est` said.
    assert_eq!(&f[..3], ["2504", "2500", "4"], "{want}");
    let est = Command::new(&helper)
        .args(["est", "2500", "7", "1.0", "0"])
        .output()
        .unwrap();
    assert_eq!(stdout(&est).split_whitespace().nth(1), Some(f[3]));
    let copy = |name: &str| {
        let d = work.path().join(name);
        let o = Command::new("cp")
            .arg("-a")
            .arg(&src)
            .arg(&d)
            .output()
            .unwrap();
        assert!(o.status.success());
        d
    };
    assert_eq!(sum(&helper, &copy("same")), want);
    // One byte changed, same size and mtime.
    let d = copy("byte");
    let file = d.join("000/01/f0001000");
    let mut bytes = std::fs::read(&file).unwrap();
    let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
    assert!(!bytes.is_empty());
    bytes[0] ^= 1;
    std::fs::write(&file, &bytes).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    assert_ne!(sum(&helper, &d), want);
    // An mtime a second off; a file too many; a file missing.
    let d = copy("mtime");
    let file = d.join("000/00/f0000003");
    let t = std::fs::metadata(&file).unwrap().modified().unwrap();
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(t - Duration::from_secs(1))
        .unwrap();
    assert_ne!(sum(&helper, &d), want);
    let d = copy("extra");
    std::fs::write(d.join("000/00/.f0000003.tmp"), b"").unwrap();
    assert_ne!(sum(&helper, &d), want);
    let d = copy("missing");
    std::fs::remove_file(d.join("000/02/f0002499")).unwrap();
    assert_ne!(sum(&helper, &d), want);
}
