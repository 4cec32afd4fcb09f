//! A real `urmove recv --http` for the HTTPS tests (issue 37): the daemon
//! and its HTTPS front on kernel-chosen loopback ports, over a temporary
//! root, with the test PKI's certificate and a token issuers file; its log
//! kept for the assertions; killed and its files removed on drop. Also the
//! `curl` the tests speak plain HTTP requests with.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::pki::Pki;
use crate::util::{keygen, urmove};

/// A running `urmove recv --http`.
pub struct Endpoint {
    child: Child,
    dir: tempfile::TempDir,
    /// The root every path is beneath.
    pub root: PathBuf,
    /// The daemon's port and the HTTPS front's.
    pub daemon: u16,
    pub http: u16,
    log: PathBuf,
}

impl Endpoint {
    /// Started with the PKI's certificate, trusting its CA, and the token
    /// issuers in `issuers`.
    pub fn start(pki: &Pki, issuers: &Path) -> Endpoint {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let root = dir.path().join("root");
        fs::create_dir(&root).unwrap();
        let key = dir.path().join("key");
        keygen(&key);
        let log = dir.path().join("log");
        let child = urmove()
            .args(["recv", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
            .arg("--root")
            .arg(&root)
            .arg("--key-file")
            .arg(&key)
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .arg("--http-cert")
            .arg(&pki.cert)
            .arg("--http-key")
            .arg(&pki.key)
            .arg("--http-ca")
            .arg(&pki.ca_file)
            .arg("--token-issuers")
            .arg(issuers)
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting urmove recv --http");
        let mut e = Endpoint {
            child,
            dir,
            root,
            daemon: 0,
            http: 0,
            log,
        };
        e.daemon = e.port_after("listening on ");
        e.http = e.port_after("third-party copy) on ");
        e
    }

    /// The port in the first log line holding `marker` (10 s at most).
    fn port_after(&mut self, marker: &str) -> u16 {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let text = self.log_text();
            if let Some(rest) = text.lines().find_map(|l| l.split(marker).nth(1)) {
                let addr = rest.split([',', ' ']).next().unwrap();
                return addr.rsplit(':').next().unwrap().parse().unwrap();
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("urmove recv --http exited ({status}):\n{text}");
            }
            assert!(Instant::now() < until, "no `{marker}` in the log:\n{text}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The log once it holds `needle` (an access-log line is written
    /// after its answer went: 5 s at most), else as it is.
    pub fn log_with(&self, needle: &str) -> String {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            let text = self.log_text();
            if text.contains(needle) || Instant::now() > until {
                return text;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `davs://localhost:PORT/path` (gfal's spelling).
    pub fn davs(&self, path: &str) -> String {
        format!(
            "davs://localhost:{}/{}",
            self.http,
            path.trim_start_matches('/')
        )
    }

    /// `https://localhost:PORT/path`.
    pub fn https(&self, path: &str) -> String {
        format!(
            "https://localhost:{}/{}",
            self.http,
            path.trim_start_matches('/')
        )
    }

    /// Where `path` is on disk.
    pub fn path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// Every name beneath the root, sorted (what a refusal must leave as it was).
    pub fn listing(&self) -> Vec<String> {
        let mut out = Vec::new();
        walk(&self.root, "", &mut out);
        out.sort();
        out
    }

    /// The process, to kill it mid-copy.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

fn walk(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = format!("{prefix}{}", e.file_name().to_string_lossy());
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            walk(&e.path(), &format!("{name}/"), out);
        }
        out.push(name);
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `curl` trusting the PKI's CA: `-sS`, the status on the last line.
pub fn curl(pki: &Pki, args: &[&str]) -> (u16, String) {
    let o: Output = Command::new("curl")
        .arg("-sS")
        .arg("--cacert")
        .arg(&pki.ca_file)
        .args(["--max-time", "300", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("running curl");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}
