//! A real XRootD server from Debian (xrootd-server 5.x with its HTTP front,
//! XrdHttp, and its HTTP third-party-copy plugin, XrdHttpTPC), the peer
//! urmove's HTTPS endpoint is compared with and copies to and from
//! (issue 37). `Xrootd::start(&pki)` runs one on a free loopback port,
//! HTTPS with the [`Pki`]'s certificate, exporting a fresh root under
//! /var/tmp (writable, no authorization, adler32/md5/crc32c answered
//! through Want-Digest), reachable from loopback only (`xrd.allow`).
//! Dropped, it is killed and its root removed.
//!
//! xrootd refuses to run as root: it runs as `nobody` (`-R`), so its root
//! and its copy of the certificate and key belong to nobody; files a test
//! puts there by hand go through [`Xrootd::put_file`], which sets that too.

use std::fs;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::chown;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::pki::Pki;
use crate::util::have;

/// The user xrootd drops to (it refuses root), and its group.
const RUN_AS: (&str, u32, u32) = ("nobody", 65534, 65534);
const XROOTD: &str = "/usr/bin/xrootd";
/// The plugins the HTTP front and HTTP-TPC come from (xrootd-server-plugins).
const PLUGINS: [&str; 2] = ["libXrdHttp-5.so", "libXrdHttpTPC-5.so"];

/// One running xrootd; see the module's comment.
pub struct Xrootd {
    _tmp: tempfile::TempDir,
    /// The exported directory: `davs://localhost:PORT/a` is `root/a`.
    pub root: PathBuf,
    /// The HTTPS port on 127.0.0.1.
    pub port: u16,
    /// Its configuration and log.
    pub conf: PathBuf,
    pub log: PathBuf,
    child: Child,
}

/// Why this machine cannot run xrootd's HTTPS front, if it cannot.
pub fn missing() -> Option<&'static str> {
    if !crate::util::is_root() {
        return Some("needs root (xrootd drops to nobody)");
    }
    if !Path::new(XROOTD).exists() {
        return Some("needs /usr/bin/xrootd (xrootd-server)");
    }
    let libdir = Path::new("/usr/lib/x86_64-linux-gnu");
    if PLUGINS.iter().any(|p| !libdir.join(p).exists()) {
        return Some("needs libXrdHttp and libXrdHttpTPC (xrootd-server-plugins)");
    }
    if !Pki::available() {
        return Some("needs the openssl command");
    }
    if !have("getent")
        || !Command::new("getent")
            .args(["passwd", RUN_AS.0])
            .output()
            .is_ok_and(|o| o.status.success())
    {
        return Some("needs the user nobody");
    }
    None
}

/// A free loopback port (the kernel's pick, let go again: a start that
/// loses it to another process is retried with another).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Chown `path` and everything beneath it to xrootd's user.
pub fn give_to_xrootd(path: &Path) {
    chown(path, Some(RUN_AS.1), Some(RUN_AS.2)).unwrap();
    if path.is_dir() {
        for e in fs::read_dir(path).unwrap() {
            give_to_xrootd(&e.unwrap().path());
        }
    }
}

/// The configuration of an instance in `dir` serving `root` on `port`.
fn config(dir: &Path, root: &Path, port: u16) -> String {
    let d = dir.display();
    format!(
        "all.export / writable\n\
         oss.localroot {root}\n\
         all.adminpath {d}/adm\n\
         all.pidpath {d}/run\n\
         xrd.port any\n\
         xrd.protocol XrdHttp:{port} libXrdHttp.so\n\
         xrd.allow host localhost\n\
         xrd.tls {d}/tls/host.pem {d}/tls/host.key\n\
         xrd.tlsca certdir {d}/tls/ca\n\
         http.exthandler xrdtpc libXrdHttpTPC.so\n\
         xrootd.chksum max 4 adler32 md5 crc32c\n",
        root = root.display(),
    )
}

impl Xrootd {
    /// A running xrootd, or `None` (the reason printed) where this machine
    /// cannot run one; a start that fails where it could panics.
    pub fn start(pki: &Pki) -> Option<Xrootd> {
        if let Some(why) = missing() {
            eprintln!("xrootd harness skipped: {why}");
            return None;
        }
        let mut last = String::new();
        for _ in 0..5 {
            match Xrootd::try_start(pki, free_port()) {
                Ok(x) => return Some(x),
                Err(log) => last = log,
            }
        }
        panic!("xrootd did not start; its last log:\n{last}");
    }

    /// One attempt on `port`: `Err` with its log when it does not come up.
    fn try_start(pki: &Pki, port: u16) -> Result<Xrootd, String> {
        let tmp = tempfile::tempdir_in("/var/tmp").expect("temp dir");
        let dir = tmp.path().to_path_buf();
        let root = dir.join("root");
        for sub in ["root", "adm", "run", "tls", "tls/ca"] {
            fs::create_dir_all(dir.join(sub)).unwrap();
        }
        fs::copy(&pki.cert, dir.join("tls/host.pem")).unwrap();
        fs::copy(&pki.key, dir.join("tls/host.key")).unwrap();
        for link in pki.hash_links() {
            let name = link.file_name().unwrap();
            fs::copy(&pki.ca_file, dir.join("tls/ca").join(name)).unwrap();
        }
        let conf = dir.join("xrootd.cfg");
        fs::write(&conf, config(&dir, &root, port)).unwrap();
        give_to_xrootd(&dir);
        let log = dir.join("xrootd.log");
        let child = Command::new(XROOTD)
            .args(["-R", RUN_AS.0, "-c"])
            .arg(&conf)
            .arg("-l")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning xrootd");
        let mut x = Xrootd {
            _tmp: tmp,
            root,
            port,
            conf,
            log,
            child,
        };
        match x.wait_ready() {
            Ok(()) => Ok(x),
            Err(why) => Err(format!("{why}\n{}", x.log_text())),
        }
    }

    /// Wait (30 s at most) until the log says it is up and the port answers.
    fn wait_ready(&mut self) -> Result<(), String> {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Err(format!("xrootd exited: {status}"));
            }
            let up = self.log_text().lines().any(|l| {
                l.starts_with("------ xrootd") && l.ends_with("initialization completed.")
            });
            if up && TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            if Instant::now() > until {
                return Err("xrootd not up after 30 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Its log so far (xrootd may add a date suffix when it rotates: the
    /// newest file whose name starts with the log's).
    pub fn log_text(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// `davs://localhost:PORT/<path>` (the scheme gfal2 and FTS use).
    pub fn url(&self, path: &str) -> String {
        format!(
            "davs://localhost:{}/{}",
            self.port,
            path.trim_start_matches('/')
        )
    }

    /// `https://localhost:PORT/<path>` (for curl and COPY headers).
    pub fn https_url(&self, path: &str) -> String {
        format!(
            "https://localhost:{}/{}",
            self.port,
            path.trim_start_matches('/')
        )
    }

    /// The file under the root that `path` names.
    pub fn path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// Put `bytes` at `path` under the root (parents made), owned by
    /// xrootd's user so that it may replace or delete it.
    pub fn put_file(&self, path: &str, bytes: &[u8]) -> PathBuf {
        let p = self.path(path);
        let parent = p.parent().unwrap().to_path_buf();
        fs::create_dir_all(&parent).unwrap();
        fs::write(&p, bytes).unwrap();
        let mut d = p.clone();
        while d.starts_with(&self.root) {
            chown(&d, Some(RUN_AS.1), Some(RUN_AS.2)).unwrap();
            if !d.pop() {
                break;
            }
        }
        p
    }

    /// The pid of the server (for tests that watch or stop it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Xrootd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// The harness itself, checked with curl (independent of gfal2).

/// curl with the Pki's CA; its status, stdout and the response headers.
fn curl(pki: &Pki, args: &[&str]) -> (bool, Vec<u8>, String) {
    let o = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "60",
            "-D",
            "-",
            "-o",
            "/dev/stderr",
            "--cacert",
        ])
        .arg(&pki.ca_file)
        .args(args)
        .output()
        .expect("curl");
    (
        o.status.success(),
        o.stderr,
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

#[test]
fn xrootd_serves_https_put_get_and_want_digest_and_is_gone_after_drop() {
    crate::require!(have("curl"), "needs curl");
    let pki = Pki::new();
    let Some(x) = Xrootd::start(&pki) else { return };
    let data = crate::util::noise(300_000, 37);
    let conf = fs::read_to_string(&x.conf).unwrap();
    assert!(conf.contains(&format!("XrdHttp:{}", x.port)), "{conf}");
    let local = x.root.parent().unwrap().join("upload.bin");
    fs::write(&local, &data).unwrap();
    let (ok, _, head) = curl(
        &pki,
        &["-T", local.to_str().unwrap(), &x.https_url("d/up.bin")],
    );
    assert!(
        ok && (head.contains(" 201") || head.contains(" 200")),
        "PUT: {head}"
    );
    assert_eq!(
        fs::read(x.path("d/up.bin")).unwrap(),
        data,
        "PUT bytes on disk"
    );
    let (ok, body, head) = curl(&pki, &[&x.https_url("d/up.bin")]);
    assert!(ok && head.contains(" 200"), "GET: {head}");
    assert_eq!(body, data, "GET bytes");
    let (ok, _, head) = curl(
        &pki,
        &["-I", "-H", "Want-Digest: adler32", &x.https_url("d/up.bin")],
    );
    let want = format!("adler32={:08x}", adler32(&data));
    assert!(ok && head.contains(&want), "Digest: want {want} in {head}");
    // A stranger CA is refused by curl (the server really speaks our TLS).
    let other = Pki::new();
    let o = Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(&other.ca_file)
        .arg(x.https_url("d/up.bin"))
        .output()
        .unwrap();
    assert!(!o.status.success(), "a stranger CA was accepted");
    let (root, port, pid) = (x.root.clone(), x.port, x.pid());
    drop(x);
    assert!(!root.exists(), "root left behind");
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "port still served"
    );
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "xrootd still running"
    );
}

/// adler32 of `data` (RFC 1950), as XRootD and WLCG give it.
pub fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in data.chunks(5552) {
        for &c in chunk {
            a += u32::from(c);
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    (b << 16) | a
}
