//! Small things that cost trust: a summary that says a size twice, a
//! minimum above its average, a header naming a depth the run did not use.
//! Each test runs the binary and reads what it printed.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::require;
use crate::transfer::Daemon;
use crate::util::{json, run, stderr, stdout};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir_in("/var/tmp").unwrap()
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A file of 3 bytes in a new directory.
fn three_bytes(dir: &Path) -> String {
    let f = dir.join("tiny");
    std::fs::write(&f, b"abc").unwrap();
    p(&f).to_string()
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}", stderr(o));
    stdout(o)
}

#[test]
fn a_size_under_1000_bytes_is_printed_once() {
    let d = Daemon::start();
    let src = tmp();
    let f = three_bytes(src.path());
    let out = ok(&d.send(&["--progress", "none"], &[&f, "127.0.0.1:a"]));
    assert!(out.starts_with("sent 1 file, 3 B in "), "{out}");
    assert!(!out.contains("(3 B)"), "{out}");
    let out = ok(&d.send(&["--dry-run"], &[&f, "127.0.0.1:b"]));
    assert!(
        out.contains("would send 1 file, 3 B to 127.0.0.1:b"),
        "{out}"
    );
    // Both units where they differ.
    let big = src.path().join("big");
    std::fs::write(&big, vec![1u8; 1_500_000]).unwrap();
    let out = ok(&d.send(&["--dry-run"], &[p(&big), "127.0.0.1:b"]));
    assert!(out.contains("1.50 MB (1.43 MiB) to"), "{out}");
}

/// Every `min interval` of a human summary, with the average before it.
fn min_interval_claims(out: &str) -> Vec<&str> {
    out.lines().filter(|l| l.contains("min interval")).collect()
}

#[test]
fn a_run_shorter_than_one_interval_names_no_minimum() {
    let d = Daemon::start();
    let src = tmp();
    let f = three_bytes(src.path());
    let quick = ["--progress", "none", "--interval", "10s"];
    let out = ok(&d.send(&quick, &[&f, "127.0.0.1:a"]));
    assert!(
        out.contains("min interval none (shorter than one --interval)"),
        "{out}"
    );
    let o = d.send(&["--json", "--interval", "10s"], &[&f, "127.0.0.1:b"]);
    let v = json(&o);
    assert_eq!(v["intervals_full"], 0, "{v}");
    assert_eq!(
        v["interval_rate_min_bits_per_s"], v["rate_bits_per_s"],
        "with no full interval the field holds the average: {v}"
    );

    let dir = tmp();
    let disk = ["bench", "--disk", p(dir.path()), "--size", "8M"];
    let out = ok(&run(&[&disk[..], &["--interval", "10s"]].concat()));
    assert_eq!(min_interval_claims(&out).len(), 2, "{out}");
    for l in min_interval_claims(&out) {
        assert!(
            l.ends_with("min interval none (shorter than one --interval)"),
            "{out}"
        );
    }
}

/// The minimum a JSON result claims is never above its average.
fn min_at_most_average(r: &Value, min: &str, avg: &str) {
    let (m, a) = (r[min].as_f64().unwrap(), r[avg].as_f64().unwrap());
    assert!(m <= a, "{min} {m} above {avg} {a}: {r}");
}

#[test]
fn the_minimum_interval_is_never_above_the_average() {
    let dir = tmp();
    let o = run(&[
        "bench",
        "--disk",
        p(dir.path()),
        "--size",
        "32M",
        "--interval",
        "1ms",
        "--json",
    ]);
    let v = json(&o);
    for r in v["results"].as_array().unwrap() {
        assert!(r["intervals_full"].as_u64().unwrap() > 0, "{r}");
        min_at_most_average(r, "interval_rate_min_bytes_per_s", "rate_bytes_per_s");
    }
    let d = Daemon::start();
    let src = tmp();
    let f = src.path().join("f");
    std::fs::write(&f, crate::util::noise(8 << 20, 3)).unwrap();
    let o = d.send(&["--json", "--interval", "1ms"], &[p(&f), "127.0.0.1:a"]);
    min_at_most_average(&json(&o), "interval_rate_min_bits_per_s", "rate_bits_per_s");
}

/// `bench --disk` with `memlock` bytes of locked memory and no
/// CAP_IPC_LOCK.
fn bench_with_little_memlock(dir: &Path, memlock: &str, extra: &[&str]) -> Output {
    std::process::Command::new("prlimit")
        .arg(format!("--memlock={memlock}:{memlock}"))
        .args([
            "setpriv",
            "--bounding-set=-ipc_lock",
            "--inh-caps=-ipc_lock",
        ])
        .arg(env!("CARGO_BIN_EXE_urmove"))
        .args(["bench", "--disk", p(dir)])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn the_disk_header_names_the_queue_depth_the_run_used() {
    require!(
        crate::util::is_root() && crate::util::have("setpriv") && crate::util::have("prlimit"),
        "needs root, setpriv and prlimit"
    );
    // Depth 32 of the block size does not fit: it is lowered.
    for (memlock, extra) in [
        ("8388608", &["--mode", "write", "--size", "8M"][..]),
        (
            "4194304",
            &["--sweep", "--qd", "32", "--bs", "256K", "--size", "256K"],
        ),
    ] {
        let dir = tmp();
        let o = bench_with_little_memlock(dir.path(), memlock, extra);
        let (out, err) = (ok(&o), stderr(&o));
        let lowered = err
            .split("queue depth lowered from 32 to ")
            .nth(1)
            .and_then(|t| t.split(':').next())
            .unwrap_or_else(|| panic!("{extra:?}: not lowered: {err}"));
        let header = out.lines().next().unwrap();
        assert!(header.starts_with("urmove bench --"), "{out}");
        assert!(
            header.contains(&format!(", QD {lowered}, ")),
            "{extra:?}: {header} (lowered to {lowered})"
        );
    }
}

#[test]
fn a_block_above_the_frame_limit_is_refused_for_the_limit() {
    let src = tmp();
    let f = three_bytes(src.path());
    for (block, says) in [
        (
            "100M",
            "--block 104857600 (100 MiB) is above the largest frame, 67108864 (64.0 MiB)",
        ),
        (
            "100000K",
            "--block 102400000 (97.7 MiB) is above the largest frame",
        ),
        (
            "1000",
            "--block 1000 must be a multiple of 4096 (4 KiB), at most 67108864",
        ),
    ] {
        let o = run(&[
            "send",
            "--key-file",
            "/nonexistent",
            "--block",
            block,
            &f,
            "127.0.0.1:x",
        ]);
        assert_eq!(o.status.code(), Some(2), "{block}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{block}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    }
}

#[test]
fn min_rate_is_echoed_in_the_unit_given_and_its_failure_stands_alone() {
    let dir = tmp();
    let bench = |extra: &[&str]| {
        let args = [
            &["bench", "--disk", p(dir.path()), "--size", "8M"][..],
            extra,
        ]
        .concat();
        run(&args)
    };
    // Met (1 kbit/s): echoed in bits, and in the other rates' unit beside.
    let out = ok(&bench(&["--min-rate", "4kbit"]));
    assert!(
        out.contains("min-rate 4.00 kb/s (500 B/s) over 1.0 s windows: OK"),
        "{out}"
    );
    let out = ok(&bench(&["--min-rate", "4kbit", "--units", "Gbit"]));
    assert!(out.contains("min-rate 4.00 kb/s over"), "{out}");
    let out = ok(&bench(&["--min-rate", "1MiB/s"]));
    assert!(
        out.contains("min-rate 1.00 MiB/s (1.05 MB/s) over"),
        "{out}"
    );

    // Not met: the error says by how much on its own, under --json too.
    for extra in [&["--json"][..], &[]] {
        let o = bench(&[&["--min-rate", "100Tbit"][..], extra].concat());
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let err = stderr(&o);
        let line = err
            .lines()
            .find(|l| l.contains("fell below --min-rate"))
            .unwrap_or_else(|| panic!("{extra:?}: {err}"));
        assert!(!line.contains("above"), "{extra:?}: {line}");
        assert!(
            line.contains("--min-rate 100 Tb/s (12.5 TB/s): in write the worst 1.0 s window was "),
            "{extra:?}: {line}"
        );
        assert!(line.contains("; in read the worst"), "{extra:?}: {line}");
    }
}

#[test]
fn a_timed_disk_run_says_it_cycled_over_the_file() {
    let dir = tmp();
    let args = [
        "bench",
        "--disk",
        p(dir.path()),
        "--size",
        "2M",
        "--mode",
        "write",
    ];
    let timed = [&args[..], &["--time", "1s"]].concat();
    let out = ok(&run(&timed));
    let line = out
        .lines()
        .find(|l| l.starts_with("  cycled: "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.contains(
            " passes over the same 2.10 MB (2.00 MiB) of the target; --time starts over at its end"
        ),
        "{line}"
    );
    let v = json(&run(&[&timed[..], &["--json"]].concat()));
    let r = &v["results"][0];
    assert_eq!(r["region_bytes"], 2 << 20, "{r}");
    let passes = r["passes"].as_f64().unwrap();
    let bytes = r["bytes"].as_f64().unwrap();
    assert!(passes > 1.0, "{r}");
    assert!((passes * f64::from(2 << 20) - bytes).abs() < 1.0, "{r}");
    // A run of --size bytes makes one pass and says nothing of cycling.
    let out = ok(&run(&args));
    assert!(!out.contains("cycled"), "{out}");
}

#[test]
fn encrypt_help_says_the_control_connection_is_sealed() {
    for cmd in ["send", "pull"] {
        let h = ok(&run(&[cmd, "--help"]));
        let text = option_text(&h, "--encrypt").unwrap_or_else(|| panic!("{h}"));
        assert!(!text.contains("in clear"), "{cmd}: {text}");
        assert!(
            text.contains("The control connection is sealed with or without it"),
            "{cmd}: {text}"
        );
    }
}

/// The text of option `flag` in a `--help`, to the next option.
fn option_text<'a>(help: &'a str, flag: &str) -> Option<&'a str> {
    let at = help
        .find(&format!("\n      {flag} "))
        .or_else(|| help.find(&format!("\n      {flag}\n")))?;
    let rest = &help[at + 1..];
    let end = rest[1..].find("\n      --").map_or(rest.len(), |e| e + 1);
    Some(&rest[..end])
}

/// `--NAME` of `recv --help` and its `[default: X]`, where it has one.
fn recv_default(help: &str, key: &str) -> Option<String> {
    let text = option_text(help, &format!("--{}", key.replace('_', "-")))?;
    let d = text.split("[default: ").nth(1)?.split(']').next()?;
    Some(d.to_string())
}

#[test]
fn the_shipped_config_holds_the_defaults_or_says_why_not() {
    let help = ok(&run(&["recv", "--help"]));
    let conf =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tuning/urmove.toml"))
            .unwrap();
    let mut comment = String::new();
    let mut compared = 0;
    for line in conf.lines() {
        if let Some(c) = line.strip_prefix('#') {
            comment += c;
            continue;
        }
        let Some((key, value)) = line.split_once(" = ") else {
            comment.clear();
            continue;
        };
        let value = value.trim_matches('"');
        if let Some(d) = recv_default(&help, key).filter(|d| !d.contains(' ')) {
            compared += 1;
            assert!(
                d == value || comment.contains("the default"),
                "{key} = {value} in tuning/urmove.toml, [default: {d}] in recv --help, and no comment says why"
            );
        }
        comment.clear();
    }
    assert!(compared > 10, "{compared} keys compared");
    assert_eq!(recv_default(&help, "interval").as_deref(), Some("5s"));
}

#[test]
fn bench_help_gives_the_block_size_default_of_each_mode() {
    let h = ok(&run(&["bench", "--help"]));
    let bs = option_text(&h, "--bs").unwrap_or_else(|| panic!("{h}"));
    assert!(
        bs.contains(
            "[default: --disk 1M (4K when every --mode is random), --sweep 16M, --net 256K]"
        ),
        "{bs}"
    );
    // What each mode really uses.
    let dir = tmp();
    let disk = |extra: &[&str]| {
        let args = [
            &["bench", "--disk", p(dir.path()), "--size", "1M", "--json"][..],
            extra,
        ]
        .concat();
        json(&run(&args))["env"]["block_size_bytes"].clone()
    };
    assert_eq!(disk(&[]), 1 << 20);
    assert_eq!(disk(&["--mode", "randread,randwrite"]), 4096);
}

#[test]
fn zero_copy_details_are_for_verbose_runs_and_said_once() {
    let d = Daemon::start();
    let src = tmp();
    let f = three_bytes(src.path());
    let zc = "zero-copy sends";
    // Loopback: auto does not try zero-copy, and says why only under -v.
    let o = d.send(&["--progress", "none"], &[&f, "127.0.0.1:a"]);
    ok(&o);
    assert!(!stderr(&o).contains(zc), "{}", stderr(&o));
    let o = d.send(&["--progress", "none", "-v"], &[&f, "127.0.0.1:b"]);
    ok(&o);
    assert_eq!(
        stderr(&o)
            .matches("zero-copy sends not tried: the path runs over a virtual device")
            .count(),
        1,
        "{}",
        stderr(&o)
    );
    // bench --net (it may grow its streams) says it once as well.
    let mut args = d.bench_net_args("127.0.0.1");
    args.extend(["--time", "1s", "--progress", "none", "-v"].map(String::from));
    let o = crate::util::urmove().args(&args).output().unwrap();
    ok(&o);
    assert_eq!(stderr(&o).matches(zc).count(), 1, "{}", stderr(&o));
}

/// The numbers of a sysctl value such as `4096 65536 134217728`.
fn numbers(s: &str) -> Vec<u64> {
    s.split_whitespace().map(|n| n.parse().unwrap()).collect()
}

#[test]
fn tune_recommends_what_print_sysctl_prints_in_aligned_columns() {
    let profile = ok(&run(&["tune", "--print-sysctl"]));
    let v = json(&run(&["tune", "--json"]));
    for key in ["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"] {
        let printed = profile
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("{profile}"));
        let c = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == key)
            .unwrap_or_else(|| panic!("{v}"));
        let Some(cur) = c["current"].as_str() else {
            continue;
        };
        // The profile's values, raised to the host's where it has more.
        let want: Vec<u64> = numbers(printed)
            .iter()
            .zip(numbers(cur))
            .map(|(p, h)| h.max(*p))
            .collect();
        assert_eq!(
            numbers(c["recommended"].as_str().unwrap()),
            want,
            "{key}: {c}"
        );
    }
    let out = ok(&run(&["tune"]));
    assert!(!out.contains("design.md"), "{out}");
    let header = out.lines().find(|l| l.starts_with("CHECK ")).unwrap();
    let ok_at = header.find("  OK").unwrap() + 2;
    for row in out.lines().skip_while(|l| !l.starts_with("CHECK ")).skip(1) {
        if row.is_empty() {
            break;
        }
        if row.starts_with("    ") {
            continue;
        }
        let cell = row.get(ok_at..).unwrap_or("");
        assert!(
            ["ok", "NO", "?"].contains(&cell),
            "OK column misaligned at {ok_at}: {row}\n{out}"
        );
    }
}
