//! The daemon's limits under real attack shapes: real processes, real
//! sockets on loopback (other 127.0.0.0/8 addresses as other hosts), its
//! metrics scraped over HTTP and its log read line by line.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use urmove::protocol::control::ErrorCode;
use urmove::protocol::manifest::{Entry, EntryKind};

use crate::util::{data_stream, hand_push, noise, output_within, raw, refusal, stderr, urmove};

/// A bound against hangs, not a speed check.
const SEND_LIMIT: Duration = Duration::from_secs(120);

/// `urmove recv` on 127.0.0.1, port 0, with metrics on another port 0
/// when asked; its stderr lines on a channel. Killed on drop.
struct Recv {
    child: Child,
    port: u16,
    metrics: Option<String>,
    root: tempfile::TempDir,
    key: PathBuf,
    _keydir: tempfile::TempDir,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Recv {
    fn start(extra: &[&str]) -> Recv {
        Self::start_full(&[], extra, &[], true)
    }

    fn start_full(wrapper: &[&str], extra: &[&str], env: &[(&str, &str)], metrics: bool) -> Recv {
        let keydir = tempfile::tempdir_in("/var/tmp").unwrap();
        let key = keydir.path().join("key");
        assert!(urmove().arg("keygen").arg(&key).status().unwrap().success());
        let root = tempfile::tempdir_in("/var/tmp").unwrap();
        let mut cmd = match wrapper.split_first() {
            Some((w, rest)) => {
                let mut c = Command::new(w);
                c.args(rest).arg(env!("CARGO_BIN_EXE_urmove"));
                c
            }
            None => urmove(),
        };
        cmd.args(["recv", "--listen", "127.0.0.1:0", "--root"])
            .arg(root.path())
            .arg("--key-file")
            .arg(&key)
            .args(extra)
            .env_remove("JOURNAL_STREAM")
            .envs(env.iter().copied());
        if metrics {
            cmd.args(["--metrics", "127.0.0.1:0"]);
        }
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
        let mut d = Recv {
            child,
            port: 0,
            metrics: None,
            root,
            key,
            _keydir: keydir,
            lines,
            seen: Vec::new(),
        };
        if metrics {
            d.metrics = Some(after(&d.wait_for("metrics at http://"), "http://"));
        }
        d.port = after(&d.wait_for("listening on 127.0.0.1:"), "127.0.0.1:")
            .parse()
            .unwrap();
        d
    }

    /// Wait for a log line containing `what` (20 s at most); returns it.
    fn wait_for(&mut self, what: &str) -> String {
        if let Some(l) = self.seen.iter().find(|l| l.contains(what)) {
            return l.clone();
        }
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            if let Ok(l) = self.lines.recv_timeout(Duration::from_millis(100)) {
                self.seen.push(l.clone());
                if l.contains(what) {
                    return l;
                }
            }
        }
        panic!("no log line with {what:?}; saw {:#?}", self.seen);
    }

    /// Every log line so far.
    fn log(&mut self) -> &[String] {
        self.seen.extend(self.lines.try_iter());
        &self.seen
    }

    /// The metrics text now (5 s at most).
    fn scrape(&self) -> String {
        self.scrape_within(Duration::from_secs(5))
    }

    fn scrape_within(&self, limit: Duration) -> String {
        let addr = self.metrics.as_deref().expect("started with metrics");
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(limit)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut r = String::new();
        s.read_to_string(&mut r)
            .unwrap_or_else(|e| panic!("scraping {addr}: {e}"));
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(body.ends_with("# EOF\n"), "{body}");
        body.to_string()
    }

    /// The value of one series (`name` or `name{labels}`), if it is there.
    fn metric(&self, series: &str) -> Option<f64> {
        value(&self.scrape(), series)
    }

    /// Scrape until `series` reads `want` (10 s at most); returns what it
    /// read last.
    fn metric_becomes(&self, series: &str, want: f64) -> f64 {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let v = self.metric(series).unwrap_or(0.0);
            if v == want || Instant::now() > until {
                return v;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn send_cmd(&self, extra: &[&str], source: &Path, dest: &str) -> Command {
        let mut c = urmove();
        c.args(["send", "-p", &self.port.to_string(), "--key-file"])
            .arg(&self.key)
            .args(extra)
            .arg(source)
            .arg(format!("127.0.0.1:{dest}"));
        c
    }

    /// Send `bytes` as a file through the daemon and check they arrived
    /// identical.
    fn transfer_works(&self, name: &str, bytes: &[u8]) {
        let src = tempfile::tempdir_in("/var/tmp").unwrap();
        let file = src.path().join(name);
        std::fs::write(&file, bytes).unwrap();
        let o = output_within(self.send_cmd(&["-P", "2"], &file, "in"), SEND_LIMIT);
        assert!(o.status.success(), "send failed: {}", stderr(&o));
        let got = std::fs::read(self.root.path().join("in").join(name)).unwrap();
        assert!(got == bytes, "{name} arrived different");
    }
}

impl Drop for Recv {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The text after `marker` in `line`, up to whitespace, `,` or `/`.
fn after(line: &str, marker: &str) -> String {
    let rest = line
        .split(marker)
        .nth(1)
        .unwrap_or_else(|| panic!("{line}"));
    rest.split(|c: char| c.is_whitespace() || c == ',' || c == '/')
        .next()
        .unwrap()
        .to_string()
}

fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

fn file_entry(path: &str, size: u64) -> Entry {
    Entry {
        path: path.into(),
        kind: EntryKind::File,
        size,
        mode: 0o644,
        mtime_s: 1_600_000_000,
        mtime_ns: 0,
        link: None,
    }
}

#[test]
fn data_streams_count_against_max_connections_while_their_session_runs() {
    let mut d = Recv::start(&["--max-connections", "4"]);
    let (ctl, keys) = hand_push(d.port, &d.key, vec![file_entry("f", 1 << 20)], 3, 65536)
        .expect("the session is ready");
    let streams: Vec<TcpStream> = (0..3).map(|i| data_stream(d.port, &keys, i)).collect();
    // The control connection and its three streams, counted while the
    // session waits for their frames.
    let open = d.metric_becomes("urmove_connections_open", 4.0);
    assert_eq!(
        open,
        4.0,
        "connections counted with 3 streams held:\n{:#?}",
        d.log()
    );
    let (code, message) = refusal(&raw(d.port, &[]));
    assert_eq!(code, ErrorCode::Busy, "{message}");
    assert!(
        message.contains("4 connections open, its limit"),
        "{message}"
    );
    assert_eq!(d.metric("urmove_connections_open"), Some(4.0));
    assert_eq!(d.metric("urmove_sessions_active"), Some(1.0));
    // The session ends when its streams go: every place is given back.
    drop(streams);
    drop(ctl);
    assert_eq!(d.metric_becomes("urmove_connections_open", 0.0), 0.0);
    assert_eq!(d.metric_becomes("urmove_sessions_active", 0.0), 0.0);
    d.transfer_works("after", &noise(100_000, 3));
}

#[test]
fn bad_limits_are_refused_alike_from_the_command_line_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    assert!(urmove().arg("keygen").arg(&key).status().unwrap().success());
    let base = format!(
        "listen = \"127.0.0.1:0\"\nroot = \"{}\"\nkey_file = \"{}\"\n",
        dir.path().display(),
        key.display()
    );
    let conf = dir.path().join("urmove.toml");
    for (flag, key_name, bad, reason) in [
        (
            "--max-sessions",
            "max_sessions",
            "0",
            "max_sessions (--max-sessions) must be 1 to 1048576, not 0",
        ),
        (
            "--timeout",
            "timeout",
            "0",
            "timeout (--timeout) must be more than 0 s and at most 24h, not 0 s",
        ),
    ] {
        std::fs::write(&conf, &base).unwrap();
        let cli = output_within(
            {
                let mut c = urmove();
                c.arg("recv").arg("--config").arg(&conf).args([flag, bad]);
                c
            },
            Duration::from_secs(10),
        );
        assert_eq!(cli.status.code(), Some(2), "{flag} {bad}: {}", stderr(&cli));
        assert!(
            stderr(&cli).contains(&format!("error: {reason}")),
            "{}",
            stderr(&cli)
        );
        std::fs::write(&conf, format!("{base}{key_name} = {bad}\n")).unwrap();
        let file = output_within(
            {
                let mut c = urmove();
                c.arg("recv").arg("--config").arg(&conf);
                c
            },
            Duration::from_secs(10),
        );
        assert_eq!(file.status.code(), Some(2), "{key_name}: {}", stderr(&file));
        assert!(
            stderr(&file).contains(&format!("urmove.toml, line 4: {reason}")),
            "{}",
            stderr(&file)
        );
    }
}
