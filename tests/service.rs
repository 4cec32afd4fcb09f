//! `urmove recv` as a service: the systemd unit, the config file, readiness
//! for systemd, JSON logs, Prometheus metrics during a transfer, running
//! unprivileged under the unit's memlock limit, and the install script.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::transfer::assert_same_tree;
use crate::util::{have, is_root, json, noise, stderr, urmove};

const UNIT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tuning/systemd/urmove-recv.service"
);

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    crate::require!(have("systemd-analyze"), "needs systemd-analyze");
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(UNIT).unwrap();
    for needed in [
        "Type=notify",
        "User=urmove",
        "ProtectSystem=strict",
        "ReadWritePaths=/srv/urmove",
        "NoNewPrivileges=yes",
        "LimitMEMLOCK=",
    ] {
        assert!(unit.contains(needed), "the unit lacks {needed}");
    }
    // Verify against this build's binary (the unit names the installed one).
    let here = unit.replace("/usr/local/bin/urmove", env!("CARGO_BIN_EXE_urmove"));
    let path = dir.path().join("urmove-recv.service");
    std::fs::write(&path, here).unwrap();
    let o = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        !stderr(&o).contains("urmove-recv.service"),
        "warnings: {}",
        stderr(&o)
    );
}

/// A daemon started from a config file, its stderr lines on a channel.
struct Service {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Service {
    fn start(cmd: &mut Command) -> Service {
        let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
        let err = child.stderr.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Service {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Wait for a log line containing `what`; returns it.
    fn wait_for(&mut self, what: &str) -> String {
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            if let Ok(l) = self.lines.recv_timeout(Duration::from_millis(100)) {
                self.seen.push(l.clone());
                if l.contains(what) {
                    return l;
                }
            }
        }
        panic!("no log line with {what:?}; saw {:?}", self.seen);
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `ADDR:PORT` after `marker` in `line`, up to whitespace, `,` or `/`.
pub(crate) fn addr_after(line: &str, marker: &str) -> String {
    let rest = line
        .split(marker)
        .nth(1)
        .unwrap_or_else(|| panic!("{line}"));
    rest.split(|c: char| c.is_whitespace() || c == ',' || c == '/' || c == '"')
        .next()
        .unwrap()
        .to_string()
}

pub(crate) fn scrape(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let (head, body) = r.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("application/openmetrics-text"), "{head}");
    body.to_string()
}

/// Check `text` is OpenMetrics text as Prometheus reads it: `# HELP` /
/// `# TYPE` lines, samples `name{labels} value` of declared families, a
/// final `# EOF`. Returns (sample name with labels, value) pairs.
fn parse_metrics(text: &str) -> Vec<(String, f64)> {
    let mut families = std::collections::HashSet::new();
    let mut samples = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "{text}");
    for l in &lines[..lines.len() - 1] {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            let mut w = rest.split(' ');
            let name = w.next().unwrap();
            let kind = w.next().unwrap();
            assert!(["counter", "gauge"].contains(&kind), "{l}");
            families.insert(name.to_string());
            continue;
        }
        if l.starts_with("# HELP ") || l.starts_with("# UNIT ") {
            continue;
        }
        let (series, value) = l.rsplit_once(' ').unwrap_or_else(|| panic!("bad line {l}"));
        let name = series.split('{').next().unwrap();
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad metric name in {l}"
        );
        if let Some(labels) = series.strip_prefix(name) {
            if !labels.is_empty() {
                assert!(labels.starts_with('{') && labels.ends_with('}'), "{l}");
            }
        }
        let family = name.strip_suffix("_total").unwrap_or(name);
        assert!(
            families.contains(family),
            "sample of an undeclared family: {l}"
        );
        let v: f64 = value.parse().unwrap_or_else(|_| panic!("bad value in {l}"));
        samples.push((series.to_string(), v));
    }
    samples
}

fn value(samples: &[(String, f64)], series: &str) -> f64 {
    samples
        .iter()
        .find(|(s, _)| s == series)
        .unwrap_or_else(|| panic!("{series} missing"))
        .1
}

fn keygen(dir: &Path) -> PathBuf {
    let key = dir.join("key");
    crate::util::keygen(&key);
    key
}

#[test]
fn a_daemon_from_its_config_file_serves_a_transfer_and_its_metrics_rise() {
    let etc = tempfile::tempdir_in("/var/tmp").unwrap();
    let root = tempfile::tempdir_in("/var/tmp").unwrap();
    let key = keygen(etc.path());
    let conf = etc.path().join("urmove.toml");
    std::fs::write(
        &conf,
        format!(
            "listen = \"127.0.0.1:0\"\nroot = \"{}\"\nkey_file = \"{}\"\n\
             metrics = \"127.0.0.1:0\"\nlog_format = \"json\"\ninterval = \"200ms\"\n",
            root.path().display(),
            key.display()
        ),
    )
    .unwrap();
    let mut d = Service::start(urmove().arg("recv").arg("--config").arg(&conf));
    let metrics = addr_after(&d.wait_for("metrics at"), "http://");
    let port = addr_after(&d.wait_for("listening on"), "127.0.0.1:");
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("run");
    std::fs::create_dir_all(&top).unwrap();
    std::fs::write(top.join("big"), noise(24 << 20, 1)).unwrap();
    std::fs::write(top.join("small"), noise(1000, 2)).unwrap();
    let before = parse_metrics(&scrape(&metrics));
    assert_eq!(value(&before, "urmove_received_bytes_total"), 0.0);
    let mut send = urmove()
        .args([
            "send",
            "-p",
            &port,
            "--rate-limit",
            "12MB",
            "--json",
            "--key-file",
        ])
        .arg(&key)
        .arg(&top)
        .arg("127.0.0.1:in")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Scrape while it runs: the byte counter rises, the session shows.
    let mut seen = Vec::new();
    let mut saw_session = false;
    let until = Instant::now() + Duration::from_secs(30);
    // (Lanes may deliver the small file first: sample until the count rose.)
    while (seen.len() < 4 || seen.last() <= seen.first())
        && Instant::now() < until
        && send.try_wait().unwrap().is_none()
    {
        std::thread::sleep(Duration::from_millis(400));
        let m = parse_metrics(&scrape(&metrics));
        let bytes = value(&m, "urmove_received_bytes_total");
        if value(&m, "urmove_sessions_active") == 1.0 {
            saw_session |= m
                .iter()
                .any(|(s, _)| s.starts_with("urmove_session_bytes{") && s.contains("receive"));
        }
        if bytes > 0.0 && bytes < (24 << 20) as f64 {
            seen.push(bytes);
        }
    }
    let o = send.wait_with_output().unwrap();
    assert!(o.status.success());
    assert_eq!(json(&o)["files_verified"], 2);
    assert!(seen.len() >= 2, "too few scrapes mid-transfer: {seen:?}");
    assert!(seen.windows(2).all(|w| w[1] >= w[0]), "{seen:?}");
    assert!(
        seen.last() > seen.first(),
        "the bytes did not rise: {seen:?}"
    );
    assert!(saw_session, "no per-session series while it ran");
    let after = parse_metrics(&scrape(&metrics));
    assert_eq!(value(&after, "urmove_received_files_total"), 2.0);
    assert_eq!(
        value(&after, "urmove_received_bytes_total"),
        ((24 << 20) + 1000) as f64
    );
    assert_eq!(value(&after, "urmove_sessions_total"), 1.0);
    assert_same_tree(&top, &root.path().join("in/run"));
    // Every log line is one JSON object with time, level and msg.
    d.wait_for("session done");
    for l in &d.seen {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        assert!(v["time"].as_str().unwrap().ends_with('Z'), "{l}");
        assert!(["info", "warning", "error"].contains(&v["level"].as_str().unwrap()));
        assert!(v["msg"].is_string());
    }
}

#[test]
fn bad_configs_are_refused_naming_the_line_and_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let base = format!(
        "root = \"{}\"\nkey_file = \"{}\"\n",
        dir.path().display(),
        key.display()
    );
    for (extra, line, reason) in [
        (
            "listen = \"127.0.0.1:0\"\nmax_sesions = 4\n",
            4,
            "unknown field `max_sesions`",
        ),
        ("timeout = \"a while\"\n", 3, "timeout"),
        ("max_streams = 0\n", 3, "must be 1 to 256"),
        ("log_format = \"xml\"\n", 3, "unknown variant `xml`"),
        ("lanes = 0\n", 3, "give auto or a lane count from 1 to 64"),
        ("lanes = \"all\"\n", 3, "give auto or a lane count"),
        ("listen = [1, 2\n", 4, "invalid array"),
        (
            "max_buffer_memory = 2G\n",
            3,
            "quote it: max_buffer_memory = \"2G\"",
        ),
        (
            "interval = 1.5s # often\n",
            3,
            "quote it: interval = \"1.5s\"",
        ),
    ] {
        let conf = dir.path().join("urmove.toml");
        std::fs::write(&conf, format!("{base}{extra}")).unwrap();
        let o = urmove()
            .arg("recv")
            .arg("--config")
            .arg(&conf)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{extra}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains(&format!("urmove.toml, line {line}:")), "{e}");
        assert!(e.contains(reason), "{e}");
    }
    // A missing file is named too.
    let o = urmove()
        .args(["recv", "--config", "/nonexistent/urmove.toml"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("/nonexistent/urmove.toml"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn readiness_and_stopping_are_reported_to_systemd() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let sock_path = dir.path().join("notify");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut d = Service::start(
        urmove()
            .args(["recv", "--listen", "127.0.0.1:0", "--root"])
            .arg(dir.path())
            .arg("--key-file")
            .arg(&key)
            .env("NOTIFY_SOCKET", &sock_path),
    );
    let mut buf = [0u8; 512];
    let n = sock.recv(&mut buf).unwrap();
    let ready = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready}");
    assert!(ready.contains("STATUS=listening on 127.0.0.1:"), "{ready}");
    d.wait_for("listening on");
    assert!(Command::new("kill")
        .args(["-TERM", &d.child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let n = sock.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"STOPPING=1");
    let status = d.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

#[test]
fn the_daemon_runs_unprivileged_under_the_units_memlock_limit() {
    crate::require!(
        is_root() && have("setpriv") && have("prlimit"),
        "needs root, setpriv and prlimit"
    );
    // As `nobody`, no capabilities, with the unit's LimitMEMLOCK.
    let unit = std::fs::read_to_string(UNIT).unwrap();
    let limit = unit
        .lines()
        .find_map(|l| l.strip_prefix("LimitMEMLOCK="))
        .unwrap()
        .trim()
        .to_string();
    let bytes: u64 = limit.trim_end_matches('M').parse::<u64>().unwrap() << 20;
    // Raising the limit needs CAP_SYS_RESOURCE or a hard limit above it;
    // without, the daemon must say what to raise instead of failing bare.
    let hard: u64 = std::fs::read_to_string("/proc/self/limits")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .and_then(|l| l.split_whitespace().nth(4).map(str::to_string))
        .map_or(0, |v| v.parse().unwrap_or(u64::MAX));
    let can_raise = hard >= bytes
        || std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|c| u64::from_str_radix(c.trim(), 16).ok())
            .is_some_and(|c| c & (1 << 24) != 0);
    let memlock = if can_raise { bytes } else { hard };
    let etc = tempfile::tempdir_in("/var/tmp").unwrap();
    let root = tempfile::tempdir_in("/var/tmp").unwrap();
    let key = keygen(etc.path());
    let nobody = |p: &Path| {
        assert!(Command::new("chown")
            .arg("65534:65534")
            .arg(p)
            .status()
            .unwrap()
            .success())
    };
    // The unit's StateDirectory=, made by systemd for the daemon's user.
    let state = tempfile::tempdir_in("/var/tmp").unwrap();
    nobody(state.path());
    nobody(root.path());
    nobody(&key);
    std::fs::set_permissions(
        etc.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let mut daemon = Command::new("prlimit");
    daemon
        .env("STATE_DIRECTORY", state.path())
        .arg(format!("--memlock={memlock}:{memlock}"))
        .args([
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
        ])
        .arg(env!("CARGO_BIN_EXE_urmove"))
        .args(["recv", "--listen", "127.0.0.1:0", "--root"])
        .arg(root.path())
        .arg("--key-file")
        .arg(&key);
    if !can_raise {
        // Too little locked memory for one default session: the daemon
        // refuses to start, saying what to change, instead of refusing
        // every session later.
        eprintln!("memlock hard limit {hard} < {bytes}: checking the refusal to start instead");
        let o = crate::util::output_within(daemon, Duration::from_secs(20));
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains("RLIMIT_MEMLOCK")
                && e.contains("LimitMEMLOCK=")
                && e.contains("CAP_IPC_LOCK"),
            "{e}"
        );
        return;
    }
    let mut d = Service::start(&mut daemon);
    let port = addr_after(&d.wait_for("listening on"), "127.0.0.1:");
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("run");
    std::fs::create_dir_all(&top).unwrap();
    std::fs::write(top.join("a"), noise(9 << 20, 3)).unwrap();
    let o = urmove()
        .args(["send", "-p", &port, "--key-file"])
        .arg(&key)
        .arg(&top)
        .arg("127.0.0.1:")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}\n{:?}", stderr(&o), d.seen);
    assert_same_tree(&top, &root.path().join("run"));
}

#[test]
fn the_install_script_stages_binary_unit_config_and_docs() {
    let stage = tempfile::tempdir().unwrap();
    let o = Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/install.sh"))
        .args(["--bin", env!("CARGO_BIN_EXE_urmove"), "--root", "/data/in"])
        .env("DESTDIR", stage.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let s = stage.path();
    for f in [
        "usr/local/bin/urmove",
        "etc/systemd/system/urmove-recv.service",
        "etc/urmove/urmove.toml",
        "usr/local/share/doc/urmove/README.md",
        "usr/local/share/doc/urmove/docs/service.md",
        "usr/local/share/doc/urmove/docs/internals/formats.md",
    ] {
        assert!(s.join(f).exists(), "{f} not staged");
    }
    let unit = std::fs::read_to_string(s.join("etc/systemd/system/urmove-recv.service")).unwrap();
    assert!(unit.contains("ReadWritePaths=/data/in"), "{unit}");
    let conf = std::fs::read_to_string(s.join("etc/urmove/urmove.toml")).unwrap();
    assert!(conf.contains("root = \"/data/in\""), "{conf}");
    // The staged config is one the daemon accepts (up to its paths).
    let o = urmove()
        .args(["recv", "--config"])
        .arg(s.join("etc/urmove/urmove.toml"))
        .args(["--root", "/nonexistent-root"])
        .output()
        .unwrap();
    assert!(!stderr(&o).contains("line "), "{}", stderr(&o));
}

/// `urmove recv` on loopback with its metrics, rooted in `root`: the
/// daemon, its metrics address and its port.
fn recv_with_metrics(root: &Path, key: &Path) -> (Service, String, String) {
    let mut d = Service::start(
        urmove()
            .args([
                "recv",
                "--listen",
                "127.0.0.1:0",
                "--metrics",
                "127.0.0.1:0",
            ])
            .args(["--interval", "200ms", "--root"])
            .arg(root)
            .arg("--key-file")
            .arg(key)
            .arg("--state-dir")
            .arg(key.with_file_name("state")),
    );
    let metrics = addr_after(&d.wait_for("metrics at"), "http://");
    let port = addr_after(&d.wait_for("listening on"), "127.0.0.1:");
    (d, metrics, port)
}

/// `urmove VERB -p PORT -q --key-file KEY ARGS...`, which must succeed.
fn client(verb: &str, port: &str, key: &Path, args: &[&str]) {
    let o = urmove()
        .args([verb, "-p", port, "-q", "--key-file"])
        .arg(key)
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{verb} {args:?}: {}", stderr(&o));
}

/// Scrape until `series` reads `want` (20 s at most); the last value.
fn metric_becomes(metrics: &str, series: &str, want: f64) -> f64 {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let v = value(&parse_metrics(&scrape(metrics)), series);
        if v == want || Instant::now() > until {
            return v;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn connections_open_counts_the_control_connection_and_every_data_stream_while_they_are_open() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let key = keygen(dir.path());
    let root = tempfile::tempdir_in("/var/tmp").unwrap();
    let (d, metrics, port) = recv_with_metrics(root.path(), &key);
    let top = dir.path().join("run");
    std::fs::create_dir_all(&top).unwrap();
    let total = 24 << 20;
    std::fs::write(top.join("big"), noise(total, 4)).unwrap();
    // 4 data streams at 8 MB/s: about 3 s to scrape in.
    let mut send = urmove()
        .args(["send", "-p", &port, "-P", "4", "--rate-limit", "8MB", "-q"])
        .arg("--key-file")
        .arg(&key)
        .arg(&top)
        .arg("127.0.0.1:in")
        .spawn()
        .unwrap();
    // While data flows (all streams connected, none dropped yet).
    let mut open = Vec::new();
    while send.try_wait().unwrap().is_none() {
        let m = parse_metrics(&scrape(&metrics));
        let bytes = value(&m, "urmove_received_bytes_total");
        if bytes > 0.0 && bytes < total as f64 {
            open.push(value(&m, "urmove_connections_open"));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(send.wait().unwrap().success(), "{:?}", d.seen);
    assert!(open.len() >= 3, "too few scrapes mid-transfer: {open:?}");
    assert!(
        open.iter().all(|&n| n == 5.0),
        "the control connection and 4 data streams, each scrape: {open:?}"
    );
    assert_eq!(
        metric_becomes(&metrics, "urmove_connections_open", 0.0),
        0.0,
        "connections left open after the session"
    );
    assert_same_tree(&top, &root.path().join("in/run"));
}

#[test]
fn empty_files_count_among_the_files_received_and_sent() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let key = keygen(dir.path());
    let root = tempfile::tempdir_in("/var/tmp").unwrap();
    let (_d, metrics, port) = recv_with_metrics(root.path(), &key);
    let top = dir.path().join("run");
    std::fs::create_dir_all(top.join("d/e")).unwrap();
    for empty in ["e0", "d/e1", "d/e/e2"] {
        std::fs::write(top.join(empty), b"").unwrap();
    }
    std::fs::write(top.join("d/full"), noise(5000, 5)).unwrap();
    let (src, back) = (top.to_str().unwrap(), dir.path().join("back"));
    client("send", &port, &key, &[src, "127.0.0.1:in"]);
    assert_same_tree(&top, &root.path().join("in/run"));
    let m = parse_metrics(&scrape(&metrics));
    assert_eq!(
        value(&m, "urmove_received_files_total"),
        4.0,
        "3 empty, 1 not"
    );
    assert_eq!(value(&m, "urmove_received_bytes_total"), 5000.0);
    // Pulled back, the same four are the daemon's files sent.
    client(
        "pull",
        &port,
        &key,
        &["127.0.0.1:in/run", back.to_str().unwrap()],
    );
    assert_same_tree(&top, &back.join("run"));
    let m = parse_metrics(&scrape(&metrics));
    assert_eq!(value(&m, "urmove_sent_files_total"), 4.0);
    assert_eq!(value(&m, "urmove_sent_bytes_total"), 5000.0);
}

#[test]
fn the_daemons_log_tells_pushes_from_pulls_where_they_start_and_end() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let key = keygen(dir.path());
    let root = tempfile::tempdir_in("/var/tmp").unwrap();
    let (mut d, _, port) = recv_with_metrics(root.path(), &key);
    let top = dir.path().join("run");
    std::fs::create_dir_all(&top).unwrap();
    std::fs::write(top.join("a"), noise(3000, 6)).unwrap();
    std::fs::write(top.join("b"), noise(7000, 7)).unwrap();
    let (src, back) = (top.to_str().unwrap(), dir.path().join("back"));
    client("send", &port, &key, &["-P", "2", src, "127.0.0.1:in"]);
    let start = d.wait_for(": push session started");
    assert!(start.contains(r#"into "in", 2 data streams"#), "{start}");
    let peer = start
        .split(": push")
        .next()
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string();
    let done = d.wait_for(": push session done");
    assert!(
        done.contains(&format!(
            "{peer}: push session done: 2 files, 10000 bytes received"
        )),
        "{done}"
    );
    let to = back.to_str().unwrap();
    client("pull", &port, &key, &["-P", "2", "127.0.0.1:in/run", to]);
    let start = d.wait_for(": pull session started");
    assert!(
        start.contains(r#"of ["in/run"], 2 data streams"#),
        "{start}"
    );
    let done = d.wait_for(": pull session done");
    assert!(
        done.contains(": pull session done: 2 files, 10000 bytes sent"),
        "{done}"
    );
    // One start and one end each: no session called by the other's name.
    for (what, n) in [("push session", 2), ("pull session", 2), ("session", 4)] {
        let count = d.seen.iter().filter(|l| l.contains(what)).count();
        assert_eq!(count, n, "{what}: {:#?}", d.seen);
    }
}

/// A state directory the daemon's user cannot use (a secret a root run
/// made, or no HOME and no right to /var/lib/urmove): the refusal names
/// the path, the user the daemon runs as and what to change.
#[test]
fn a_state_dir_the_daemons_user_cannot_use_is_named_with_the_remedy() {
    use crate::verified::{nobody_dirs, recv_cmd, spawn_daemon, UNPRIV_LOCK};
    crate::require!(is_root() && have("setpriv"), "needs root and setpriv");
    let nb = nobody_dirs();
    // The secret a run as root left there, root's and mode 0600.
    std::fs::write(nb.state.join("secret"), [7u8; 32]).unwrap();
    std::os::unix::fs::chown(nb.state.join("secret"), Some(0), Some(0)).unwrap();
    std::fs::set_permissions(
        nb.state.join("secret"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let cmd = recv_cmd(&UNPRIV_LOCK, &nb.root, &nb.key, &nb.state, &[]);
    let (code, log) = spawn_daemon(cmd).map(|_| ()).unwrap_err();
    assert_eq!(code, Some(2), "{log}");
    let secret = nb.state.join("secret");
    for want in [
        secret.to_str().unwrap(),
        "runs as nobody (uid 65534)",
        &format!("chown -R nobody {}", nb.state.display()),
        "--state-dir",
    ] {
        assert!(log.contains(want), "{want}: {log}");
    }
    // No state directory given, no HOME: /var/lib/urmove, not nobody's.
    let mut cmd = Command::new(UNPRIV_LOCK[0]);
    cmd.args(&UNPRIV_LOCK[1..])
        .args([
            "env",
            "-u",
            "HOME",
            "-u",
            "XDG_STATE_HOME",
            "-u",
            "STATE_DIRECTORY",
        ])
        .arg(env!("CARGO_BIN_EXE_urmove"))
        .args(["recv", "--listen", "127.0.0.1:0", "--root"])
        .arg(&nb.root)
        .arg("--key-file")
        .arg(&nb.key);
    let (code, log) = spawn_daemon(cmd).map(|_| ()).unwrap_err();
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.contains("/var/lib/urmove") && log.contains("runs as nobody"),
        "{log}"
    );
}

/// Send SIGINT (the terminal's Ctrl-C) to `child`.
pub(crate) fn ctrl_c(child: &Child) {
    let st = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

/// Ctrl-C 1.5 s into a push: the client says what the receiver kept, the
/// daemon journals what was verified at once (not at its next interval),
/// logs a client that stopped (not a failed session) and counts it apart
/// from I/O errors; the run again continues from what was kept.
#[test]
fn a_push_stopped_with_ctrl_c_keeps_what_was_verified_and_the_daemon_says_so() {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let key = keygen(dir.path());
    let root = tempfile::tempdir_in("/var/tmp").unwrap();
    let (mut d, metrics, port) = recv_with_metrics(root.path(), &key);
    let top = dir.path().join("run");
    std::fs::create_dir_all(&top).unwrap();
    for i in 0..3 {
        std::fs::write(top.join(format!("f{i}")), noise(48 << 20, i)).unwrap();
    }
    let send = |extra: &[&str]| {
        let mut c = urmove();
        c.args(["send", "-p", &port, "-P", "2", "--block", "1M", "--json"])
            .args(extra)
            .arg("--key-file")
            .arg(&key)
            .arg(&top)
            .arg("127.0.0.1:in");
        c
    };
    let child = send(&["--rate-limit", "40MB"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    ctrl_c(&child);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["status"], "interrupted", "{v}");
    let kept = v["kept"]["bytes"].as_u64().unwrap_or_else(|| panic!("{v}"));
    assert!(v["kept"]["files"].as_u64() >= Some(1) && kept > 0, "{v}");
    let line = d.wait_for("session stopped by the client");
    assert!(line.contains("Ctrl-C") && line.contains("kept"), "{line}");
    assert!(
        !d.seen.iter().any(|l| l.contains("session failed")),
        "{:?}",
        d.seen
    );
    let samples = parse_metrics(&scrape(&metrics));
    let aborted = |kind: &str| {
        let series = format!("urmove_sessions_aborted_by_peer_total{{kind=\"{kind}\"}}");
        samples
            .iter()
            .find(|(s, _)| *s == series)
            .map_or(0.0, |s| s.1)
    };
    assert_eq!((aborted("interrupted"), aborted("io_error")), (1.0, 0.0));
    // The run again sends what was not kept, and no more.
    let o = send(&[]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let again = json(&o);
    assert!(
        again["bytes_skipped"].as_u64().unwrap() >= kept,
        "{again} after {v}"
    );
    assert!(again["files_continued"].as_u64() >= Some(1), "{again}");
    assert_same_tree(&top, &root.path().join("in/run"));
}
