//! `urmove tune`: every check is listed with its current and recommended
//! value, recommendations grow with the link, the disk behind a target is
//! found, and `--apply` writes a profile that parses and changes a loop
//! device's settings (restored here). No test loads sysctls into the host:
//! `--apply` runs with `--no-load` and a temporary `--sysctl-file`.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::require;
use crate::util::{have, is_root, json, run, stderr, stdout, LoopDev};

/// Every check, in the order the report lists them.
const CHECKS: [&str; 21] = [
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.core.netdev_max_backlog",
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_available_congestion_control",
    "net.core.default_qdisc",
    "net.ipv4.tcp_mtu_probing",
    "route.mtu",
    "cpu.scaling_governor",
    "nic.queues",
    "nic.irq_affinity",
    "disk.device",
    "disk.scheduler",
    "disk.read_ahead_kb",
    "disk.nr_requests",
    "disk.queue_depth",
    "memlock",
    "kernel.io_uring_disabled",
    "io_uring.ring",
];

/// The keys of the sysctl profile.
const PROFILE_KEYS: [&str; 8] = [
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.core.netdev_max_backlog",
    "net.ipv4.tcp_congestion_control",
    "net.core.default_qdisc",
    "net.ipv4.tcp_mtu_probing",
];

fn tune_json(args: &[&str]) -> Value {
    let mut all = vec!["tune", "--json"];
    all.extend_from_slice(args);
    let o = run(&all);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    json(&o)
}

fn check<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {doc}"))
}

/// The first number in a recommendation (">= 268435456") or the last of a
/// triple ("4096 131072 134217728").
fn number(s: &str) -> u64 {
    let nums: Vec<u64> = s
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    if nums.len() == 3 {
        nums[2]
    } else {
        nums[0]
    }
}

/// `key = value` lines of a sysctl.d text; panics on any other line.
fn parse_profile(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (k, v) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("not key = value: {l:?}"));
            let (k, v) = (k.trim(), v.trim());
            assert!(
                !k.is_empty() && !k.contains(' ') && !v.is_empty(),
                "bad line {l:?}"
            );
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn proc_sys(key: &str) -> String {
    let p = Path::new("/proc/sys").join(key.replace('.', "/"));
    std::fs::read_to_string(p)
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn json_lists_every_check_with_current_and_recommended() {
    let doc = tune_json(&[]);
    assert_eq!(doc["schema"], 1);
    assert_eq!(doc["link"], "10G");
    let names: Vec<&str> = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, CHECKS);
    for c in doc["checks"].as_array().unwrap() {
        for field in ["recommended", "why", "source"] {
            assert!(
                c[field].as_str().is_some_and(|s| !s.is_empty()),
                "{field} of {c}"
            );
        }
        // Unreadable means null with a reason, and nothing judged.
        assert!(c["current"].is_string() || c["current"].is_null(), "{c}");
        if c["current"].is_null() {
            assert!(c["ok"].is_null(), "{c}");
        }
    }
    // The sysctls are always readable, and reported as the kernel has them.
    for key in CHECKS.iter().filter(|k| k.starts_with("net.")) {
        assert_eq!(check(&doc, key)["current"], proc_sys(key), "{key}");
    }
    // Without --target the disk checks say what is missing.
    let d = check(&doc, "disk.scheduler");
    assert!(d["current"].is_null());
    assert!(d["why"].as_str().unwrap().contains("--target"), "{d}");
    // The human table names every check too.
    let o = run(&["tune"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    for name in CHECKS {
        assert!(
            text.lines().any(|l| l.starts_with(name)),
            "{name} missing from:\n{text}"
        );
    }
}

#[test]
fn recommendations_grow_with_link_speed() {
    let keys = [
        "net.core.rmem_max",
        "net.core.wmem_max",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
        "net.core.netdev_max_backlog",
    ];
    let mut last: Option<Vec<u64>> = None;
    let mut first: Option<Vec<u64>> = None;
    for link in ["10G", "25G", "40G", "100G"] {
        let doc = tune_json(&["--link", link]);
        assert_eq!(doc["link"], link);
        let rec: Vec<u64> = keys
            .iter()
            .map(|k| number(check(&doc, k)["recommended"].as_str().unwrap()))
            .collect();
        // The printed profile says the same.
        let o = run(&["tune", "--link", link, "--print-sysctl"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let profile = parse_profile(&stdout(&o));
        for (k, r) in keys.iter().zip(&rec) {
            let (_, v) = profile.iter().find(|(pk, _)| pk == k).unwrap();
            assert_eq!(number(v), *r, "{link} {k}");
        }
        if let Some(prev) = &last {
            for ((k, p), r) in keys.iter().zip(prev).zip(&rec) {
                assert!(r >= p, "{k} shrinks at {link}: {p} -> {r}");
            }
        }
        first.get_or_insert_with(|| rec.clone());
        last = Some(rec);
    }
    let (first, last) = (first.unwrap(), last.unwrap());
    for ((k, a), b) in keys.iter().zip(&first).zip(&last) {
        assert!(b > a, "{k}: 100G ({b}) not above 10G ({a})");
    }
    // A longer path needs bigger buffers too.
    let near = tune_json(&["--rtt", "20ms"]);
    let far = tune_json(&["--rtt", "200ms"]);
    let rmem = |d: &Value| {
        number(
            check(d, "net.ipv4.tcp_rmem")["recommended"]
                .as_str()
                .unwrap(),
        )
    };
    assert!(rmem(&far) > rmem(&near));
}

#[test]
fn the_repository_profile_is_the_10g_profile() {
    let o = run(&["tune", "--print-sysctl"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let repo = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tuning/sysctl.d/90-urmove.conf"),
    )
    .unwrap();
    assert_eq!(
        repo,
        stdout(&o),
        "regenerate: urmove tune --print-sysctl > tuning/sysctl.d/90-urmove.conf"
    );
    let kv = parse_profile(&repo);
    let keys: Vec<&str> = kv.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, PROFILE_KEYS);
    for k in keys {
        assert!(
            Path::new("/proc/sys").join(k.replace('.', "/")).exists(),
            "{k} is not a sysctl here"
        );
    }
    for source in ["fasterdata.es.net", "ESnet", "kernel docs"] {
        assert!(repo.contains(source), "the profile does not cite {source}");
    }
}

#[test]
fn target_on_the_root_filesystem_finds_its_disk() {
    let doc = tune_json(&["--target", "/"]);
    let dev = check(&doc, "disk.device");
    require!(
        dev["current"].is_string(),
        format!("/ is not on a block device here: {}", dev["why"])
    );
    let name = dev["current"]
        .as_str()
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    let queue = Path::new("/sys/block").join(&name).join("queue");
    let sched = std::fs::read_to_string(queue.join("scheduler")).unwrap();
    let active = check(&doc, "disk.scheduler")["current"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        sched.contains(&format!("[{active}]")),
        "{active} vs {sched}"
    );
    let ra = std::fs::read_to_string(queue.join("read_ahead_kb")).unwrap();
    assert_eq!(check(&doc, "disk.read_ahead_kb")["current"], ra.trim());
    assert!(check(&doc, "disk.nr_requests")["current"].is_string());
}

fn queue_attr(dev: &LoopDev, attr: &str) -> String {
    std::fs::read_to_string(
        Path::new("/sys/block")
            .join(dev.name())
            .join("queue")
            .join(attr),
    )
    .unwrap()
    .trim()
    .to_string()
}

fn set_queue_attr(dev: &LoopDev, attr: &str, value: &str) {
    std::fs::write(
        Path::new("/sys/block")
            .join(dev.name())
            .join("queue")
            .join(attr),
        value,
    )
    .unwrap();
}

fn active_scheduler(line: &str) -> String {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
        .unwrap_or(line)
        .to_string()
}

#[test]
fn target_on_a_loop_device_finds_scheduler_and_read_ahead() {
    require!(is_root() && have("losetup"), "needs root and losetup");
    let dev = LoopDev::new(64, 512).expect("loop device");
    let doc = tune_json(&["--target", dev.dev.to_str().unwrap()]);
    let found = check(&doc, "disk.device")["current"].as_str().unwrap();
    assert!(found.starts_with(&dev.name()), "{found}");
    assert_eq!(
        check(&doc, "disk.scheduler")["current"],
        active_scheduler(&queue_attr(&dev, "scheduler"))
    );
    assert_eq!(
        check(&doc, "disk.read_ahead_kb")["current"],
        queue_attr(&dev, "read_ahead_kb")
    );
    assert_eq!(
        check(&doc, "disk.nr_requests")["current"],
        queue_attr(&dev, "nr_requests")
    );
    // A loop device has no SCSI queue depth: said, not omitted.
    let qd = check(&doc, "disk.queue_depth");
    assert!(qd["current"].is_null() && qd["why"].as_str().unwrap().contains("queue_depth"));
}

#[test]
fn apply_writes_a_profile_and_sets_the_loop_device() {
    require!(is_root() && have("losetup"), "needs root and losetup");
    let dev = LoopDev::new(64, 512).expect("loop device");
    let dev_path = dev.dev.to_str().unwrap();
    let before: Vec<String> = PROFILE_KEYS.iter().map(|k| proc_sys(k)).collect();
    let old_sched = active_scheduler(&queue_attr(&dev, "scheduler"));
    let old_ra = queue_attr(&dev, "read_ahead_kb");

    // Start the device away from the recommendation so --apply must act.
    let doc = tune_json(&["--target", dev_path]);
    let want_sched = check(&doc, "disk.scheduler")["recommended"]
        .as_str()
        .unwrap()
        .to_string();
    let offered = queue_attr(&dev, "scheduler");
    let other = offered
        .split_whitespace()
        .map(|w| w.trim_matches(|c| c == '[' || c == ']'))
        .find(|s| *s != want_sched)
        .expect("a second scheduler")
        .to_string();
    set_queue_attr(&dev, "scheduler", &other);
    set_queue_attr(&dev, "read_ahead_kb", "128");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sysctl.d/90-urmove.conf");
    let o = run(&[
        "tune",
        "--json",
        "--apply",
        "--no-load",
        "--sysctl-file",
        file.to_str().unwrap(),
        "--target",
        dev_path,
    ]);
    let now_sched = active_scheduler(&queue_attr(&dev, "scheduler"));
    let now_ra = queue_attr(&dev, "read_ahead_kb");
    // Restore before asserting, so a failure leaves nothing changed.
    set_queue_attr(&dev, "scheduler", &old_sched);
    set_queue_attr(&dev, "read_ahead_kb", &old_ra);
    assert_eq!(active_scheduler(&queue_attr(&dev, "scheduler")), old_sched);
    assert_eq!(queue_attr(&dev, "read_ahead_kb"), old_ra);

    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc = json(&o);
    assert_eq!(now_sched, want_sched);
    assert_eq!(now_ra, "4096");
    let changes = doc["applied"]["changes"].as_array().unwrap();
    let disk_change = |attr: &str| {
        changes
            .iter()
            .find(|c| {
                c["name"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("disk.{attr}"))
            })
            .unwrap_or_else(|| panic!("no disk.{attr} change in {changes:?}"))
    };
    assert_eq!(disk_change("scheduler")["old"], other);
    assert_eq!(disk_change("scheduler")["new"], want_sched);
    assert_eq!(disk_change("read_ahead_kb")["old"], "128");
    assert_eq!(disk_change("read_ahead_kb")["changed"], true);
    assert_eq!(doc["applied"]["loaded"], false);

    // The profile parses, holds every key, and never lowers the host.
    let text = std::fs::read_to_string(&file).unwrap();
    let kv = parse_profile(&text);
    let keys: Vec<&str> = kv.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, PROFILE_KEYS);
    for ((k, v), old) in kv.iter().zip(&before) {
        if k.ends_with("_max") || k.ends_with("mem") || k.ends_with("backlog") {
            assert!(number(v) >= number(old), "{k}: {v} below the host's {old}");
        }
    }
    // --no-load left the running kernel alone.
    let after: Vec<String> = PROFILE_KEYS.iter().map(|k| proc_sys(k)).collect();
    assert_eq!(before, after);
}

/// `--apply` loads the profile by writing /proc/sys. Run inside a private
/// network namespace, the per-namespace TCP settings change there and the
/// host's stay as they were; the host-wide ones (rmem_max, backlog, qdisc)
/// are read-only or absent in a child namespace, so their writes fail and
/// are reported as failures.
#[test]
fn apply_loads_the_profile_in_a_private_network_namespace() {
    require!(
        is_root() && have("unshare"),
        "needs root and unshare (util-linux)"
    );
    let probe = Command::new("unshare").args(["--net", "true"]).status();
    require!(
        probe.is_ok_and(|s| s.success()),
        "cannot create a network namespace here"
    );
    let before: Vec<String> = PROFILE_KEYS.iter().map(|k| proc_sys(k)).collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("90-urmove.conf");
    let bin = env!("CARGO_BIN_EXE_urmove");
    // Apply, then report from inside the same namespace.
    let o = Command::new("unshare")
        .args(["--net", "sh", "-c"])
        .arg(r#""$0" tune --json --apply --sysctl-file "$1" >"$1.apply.json"; "$0" tune --json"#)
        .arg(bin)
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let inside = json(&o);
    let applied: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("90-urmove.conf.apply.json")).unwrap(),
    )
    .unwrap();
    assert!(file.exists());
    assert_eq!(applied["applied"]["loaded"], true);
    let tcp_max = number(
        &parse_profile(&std::fs::read_to_string(&file).unwrap())
            .into_iter()
            .find(|(k, _)| k == "net.ipv4.tcp_rmem")
            .unwrap()
            .1,
    );
    // The namespace now has the profile's TCP settings...
    let cur = |k: &str| check(&inside, k)["current"].as_str().unwrap().to_string();
    assert_eq!(number(&cur("net.ipv4.tcp_rmem")), tcp_max);
    assert_eq!(number(&cur("net.ipv4.tcp_wmem")), tcp_max);
    assert_ne!(cur("net.ipv4.tcp_mtu_probing"), "0");
    // ...every change that did not happen says why...
    for c in applied["applied"]["changes"].as_array().unwrap() {
        assert!(
            c["changed"] == true || c["error"].is_string(),
            "neither changed nor failed: {c}"
        );
    }
    // ...and the host's own values are untouched.
    let after: Vec<String> = PROFILE_KEYS.iter().map(|k| proc_sys(k)).collect();
    assert_eq!(before, after);
}

#[test]
fn apply_without_root_is_refused() {
    require!(
        is_root() && have("setpriv"),
        "needs root (to drop to nobody) and setpriv"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("90-urmove.conf");
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_urmove"))
        .args(["tune", "--apply", "--no-load", "--sysctl-file"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("needs root"), "{}", stderr(&o));
    assert!(!file.exists());
}

#[test]
fn bad_arguments_are_usage_errors() {
    for args in [
        &["tune", "--link", "1G"][..],
        &["tune", "--link", "10"],
        &["tune", "--link", "fast"],
        &["tune", "--rtt", "0s"],
        &["tune", "--rtt", "1 week"],
        &["tune", "--target", "/no/such/path"],
        &["tune", "--sysctl-file", "/tmp/x.conf"],
        &["tune", "--print-sysctl", "--apply"],
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    }
    // Link names are not case-sensitive.
    assert_eq!(tune_json(&["--link", "100g"])["link"], "100G");
}
