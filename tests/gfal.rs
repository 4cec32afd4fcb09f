//! gfal2 from Debian, the client FTS3 drives storage with (issue 37):
//! [`Gfal`] runs the gfal-* commands (gfal2-util-scripts, the http plugin)
//! with the environment they need here, and the tests below drive a real
//! XRootD ([`Xrootd`]) with them, every byte compared. What gfal2 sends on
//! the wire is written down in the notes (gfal-wire.md).
//!
//! The environment: `GFAL_PYTHONBIN` (the scripts pick the first `python3`
//! on the PATH, which need not have the gfal2 binding; Debian's does),
//! `X509_CERT_DIR` (the Pki's hashed CA directory), no X509 proxy or
//! certificate, and an optional bearer token (`BEARER_TOKEN`: gfal2 uses it
//! for every host, as `Authorization: Bearer` and, in a third-party copy,
//! as `TransferHeaderAuthorization` for the passive side with
//! `Credential: none`; without one, an https TPC asks for `Credential:
//! gridsite`, which xrootd refuses).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use base64::Engine;
use md5::{Digest, Md5};

use crate::pki::Pki;
use crate::util::{have, noise, output_within};
use crate::xrootd::{adler32, Xrootd};

/// How gfal-* commands are run; see the module's comment.
pub struct Gfal {
    ca_dir: PathBuf,
    token: Option<String>,
    /// Extra `-D GROUP:KEY=VALUE` definitions given to every command.
    defs: Vec<String>,
}

/// Why this machine cannot run gfal2's tools, if it cannot.
pub fn missing() -> Option<&'static str> {
    if !have("gfal-copy") {
        return Some("needs gfal-copy (gfal2-util-scripts)");
    }
    if !Path::new("/usr/lib/x86_64-linux-gnu/gfal2-plugins/libgfal_plugin_http.so").exists() {
        return Some("needs gfal2-plugin-http");
    }
    None
}

/// The python that has the gfal2 binding (Debian's), when there is one.
fn python() -> Option<&'static str> {
    ["/usr/bin/python3"].into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import gfal2, gfal2_util"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// A command's exit code, stdout and stderr.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn of(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    pub fn ok(&self) -> bool {
        self.code == 0
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\nstdout: {}\nstderr: {}",
            self.code, self.stdout, self.stderr
        )
    }
}

impl Gfal {
    /// gfal trusting `pki`'s CA, with no token.
    pub fn new(pki: &Pki) -> Gfal {
        Gfal {
            ca_dir: pki.ca_dir.clone(),
            token: None,
            defs: Vec::new(),
        }
    }

    /// The same with a bearer token for every host.
    pub fn token(mut self, token: &str) -> Gfal {
        self.token = Some(token.to_string());
        self
    }

    /// The same with `-D def` on every command (e.g.
    /// `HTTP PLUGIN:RETRIEVE_BEARER_TOKEN=false`).
    pub fn define(mut self, def: &str) -> Gfal {
        self.defs.push(def.to_string());
        self
    }

    /// The command `tool` (e.g. "gfal-copy") with the environment set.
    pub fn command(&self, tool: &str) -> Command {
        let mut c = Command::new(tool);
        if let Some(py) = python() {
            c.env("GFAL_PYTHONBIN", py);
        }
        c.env("X509_CERT_DIR", &self.ca_dir);
        for v in [
            "X509_USER_PROXY",
            "X509_USER_CERT",
            "X509_USER_KEY",
            "BEARER_TOKEN",
        ] {
            c.env_remove(v);
        }
        if let Some(t) = &self.token {
            c.env("BEARER_TOKEN", t);
        }
        for d in &self.defs {
            c.arg("-D").arg(d);
        }
        c
    }

    /// Run `tool args` (10 minutes at most, a bound against hangs).
    pub fn run(&self, tool: &str, args: &[&str]) -> Run {
        let mut c = self.command(tool);
        c.args(args);
        Run::of(output_within(c, Duration::from_secs(600)))
    }
}

/// Skip unless gfal2 and xrootd can run here.
fn ready() -> bool {
    if let Some(why) = missing().or_else(crate::xrootd::missing) {
        eprintln!("skipped: {why}");
        return false;
    }
    true
}

fn file_url(p: &Path) -> String {
    format!("file://{}", p.display())
}

#[test]
fn gfal_copy_uploads_to_and_downloads_from_xrootd_with_adler32_checked() {
    if !ready() {
        return;
    }
    let pki = Pki::new();
    let Some(x) = Xrootd::start(&pki) else { return };
    let g = Gfal::new(&pki).token("test-token");
    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let data = noise(5 * 1024 * 1024 + 123, 1);
    let src = work.path().join("src.bin");
    fs::write(&src, &data).unwrap();
    let up = g.run(
        "gfal-copy",
        &["-K", "adler32", &file_url(&src), &x.url("in/up.bin")],
    );
    assert!(up.ok(), "upload: {up:?}");
    assert_eq!(
        fs::read(x.path("in/up.bin")).unwrap(),
        data,
        "uploaded bytes"
    );
    let back = work.path().join("back.bin");
    let down = g.run(
        "gfal-copy",
        &["-K", "adler32", &x.url("in/up.bin"), &file_url(&back)],
    );
    assert!(down.ok(), "download: {down:?}");
    assert_eq!(fs::read(&back).unwrap(), data, "downloaded bytes");
    // Again without -f: refused, the file untouched.
    let again = g.run("gfal-copy", &[&file_url(&back), &x.url("in/up.bin")]);
    assert_eq!(again.code, 17, "overwrite without -f: {again:?}");
    assert!(
        again.stderr.contains("exists and overwrite is not set"),
        "{again:?}"
    );
    assert_eq!(fs::read(x.path("in/up.bin")).unwrap(), data);
    // A checksum the user gives that the source does not have fails the copy.
    let bad = g.run(
        "gfal-copy",
        &[
            "-f",
            "-K",
            "adler32:00000001",
            &x.url("in/up.bin"),
            &file_url(&back),
        ],
    );
    assert_ne!(bad.code, 0, "a wrong user checksum passed: {bad:?}");
}

/// One third-party copy from `a` to `b` in `mode`, checked with adler32,
/// and the bytes compared.
fn tpc(g: &Gfal, a: &Xrootd, b: &Xrootd, mode: &str, data: &[u8]) {
    let name = format!("{mode}/copy.bin");
    let r = g.run(
        "gfal-copy",
        &[
            "--copy-mode",
            mode,
            "-K",
            "adler32",
            "-p",
            &a.url("src.bin"),
            &b.url(&name),
        ],
    );
    assert!(r.ok(), "{mode} copy: {r:?}");
    assert_eq!(
        fs::read(b.path(&name)).unwrap(),
        data,
        "{mode}: bytes at the destination"
    );
}

#[test]
fn gfal_third_party_copy_between_two_xrootds_in_pull_and_push_mode() {
    if !ready() {
        return;
    }
    let pki = Pki::new();
    let (Some(a), Some(b)) = (Xrootd::start(&pki), Xrootd::start(&pki)) else {
        return;
    };
    let data = noise(24 * 1024 * 1024 + 7, 2);
    a.put_file("src.bin", &data);
    // A (dummy) token makes gfal ask for `Credential: none`; xrootd without
    // token auth ignores the token itself.
    let g = Gfal::new(&pki).token("test-token");
    tpc(&g, &a, &b, "pull", &data);
    tpc(&g, &a, &b, "push", &data);
    // Several streams (xrootd pulls in ranged GETs).
    let r = g.run(
        "gfal-copy",
        &[
            "--copy-mode",
            "pull",
            "-n",
            "4",
            &a.url("src.bin"),
            &b.url("n4.bin"),
        ],
    );
    assert!(r.ok(), "4-stream pull: {r:?}");
    assert_eq!(fs::read(b.path("n4.bin")).unwrap(), data);
    // Without a token over https gfal asks for gridsite delegation, which
    // xrootd refuses: the pull fails and nothing is left.
    let bare = Gfal::new(&pki).define("HTTP PLUGIN:RETRIEVE_BEARER_TOKEN=false");
    let r = bare.run(
        "gfal-copy",
        &["--copy-mode", "pull", &a.url("src.bin"), &b.url("bare.bin")],
    );
    assert_ne!(r.code, 0, "a gridsite TPC passed: {r:?}");
    assert!(r.stderr.contains("3rd pull"), "{r:?}");
    assert!(!b.path("bare.bin").exists(), "a refused copy left a file");
    // A missing source: the active side reports `failure: ...` in the marker stream.
    let r = g.run(
        "gfal-copy",
        &[
            "--just-copy",
            "--copy-mode",
            "pull",
            &a.url("nope"),
            &b.url("nope"),
        ],
    );
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("Remote side failed with status code 404"),
        "{r:?}"
    );
}

/// `gfal-sum URL ALG`'s checksum (the word after the URL).
fn sum(g: &Gfal, url: &str, alg: &str) -> String {
    let r = g.run("gfal-sum", &[url, alg]);
    assert!(r.ok(), "gfal-sum {alg}: {r:?}");
    r.stdout
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string()
}

#[test]
fn gfal_ls_stat_mkdir_rm_and_sum_against_xrootd() {
    if !ready() {
        return;
    }
    let pki = Pki::new();
    let Some(x) = Xrootd::start(&pki) else { return };
    let g = Gfal::new(&pki).token("test-token");
    let data = noise(1_000_003, 3);
    x.put_file("top/a.bin", &data);
    x.put_file("top/b.txt", b"hello");

    let r = g.run("gfal-mkdir", &["-p", &x.url("top/d/e/f")]);
    assert!(r.ok(), "mkdir -p: {r:?}");
    assert!(x.path("top/d/e/f").is_dir());
    let r = g.run("gfal-mkdir", &[&x.url("top/g")]);
    assert!(r.ok() && x.path("top/g").is_dir(), "mkdir: {r:?}");

    let r = g.run("gfal-ls", &[&x.url("top")]);
    assert!(r.ok(), "ls: {r:?}");
    let mut names: Vec<&str> = r.stdout.split_whitespace().collect();
    names.sort();
    assert_eq!(names, ["a.bin", "b.txt", "d", "g"], "ls: {r:?}");
    let r = g.run("gfal-ls", &["-l", &x.url("top")]);
    let line = r
        .stdout
        .lines()
        .find(|l| l.trim_end().ends_with("a.bin"))
        .unwrap_or_default()
        .to_string();
    assert!(line.contains(" 1000003 "), "ls -l size: {r:?}");

    let r = g.run("gfal-stat", &[&x.url("top/a.bin")]);
    assert!(
        r.ok() && r.stdout.contains("Size: 1000003") && r.stdout.contains("regular file"),
        "stat: {r:?}"
    );
    let r = g.run("gfal-stat", &[&x.url("top/d")]);
    assert!(r.ok() && r.stdout.contains("directory"), "stat dir: {r:?}");
    let r = g.run("gfal-stat", &[&x.url("top/none")]);
    assert_eq!(r.code, 2, "stat of nothing: {r:?}");

    assert_eq!(
        sum(&g, &x.url("top/a.bin"), "ADLER32"),
        format!("{:08x}", adler32(&data))
    );
    assert_eq!(
        sum(&g, &x.url("top/a.bin"), "MD5"),
        hex(&Md5::digest(&data))
    );
    // crc32c comes back as xrootd gives it: base64 of the 4 big-endian bytes.
    let crc = base64::engine::general_purpose::STANDARD.encode(crc32c::crc32c(&data).to_be_bytes());
    assert_eq!(sum(&g, &x.url("top/a.bin"), "CRC32C"), crc);

    let r = g.run("gfal-rm", &[&x.url("top/b.txt")]);
    assert!(r.ok() && r.stdout.contains("DELETED"), "rm: {r:?}");
    assert!(!x.path("top/b.txt").exists());
    let r = g.run("gfal-rm", &[&x.url("top/b.txt")]);
    assert_eq!(r.code, 2, "rm of nothing: {r:?}");
    assert!(r.stdout.contains("MISSING"), "{r:?}");
    let r = g.run("gfal-rm", &["-r", &x.url("top/d")]);
    assert!(r.ok() && r.stdout.contains("RMDIR"), "rm -r: {r:?}");
    assert!(!x.path("top/d").exists(), "rm -r left the tree");
    assert_eq!(
        fs::read(x.path("top/a.bin")).unwrap(),
        data,
        "a neighbour touched"
    );
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
