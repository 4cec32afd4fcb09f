//! A private test PKI for the HTTPS tests (issue 37): `Pki::new()` makes,
//! with the openssl command in a temporary directory under /var/tmp, a CA
//! and a server certificate for `localhost` and `127.0.0.1` (both in the
//! subjectAltName, usable for server and client auth), and a hashed CA
//! directory (`openssl rehash`) that gfal2/davix take as `X509_CERT_DIR`
//! and xrootd as `xrd.tlsca certdir`. Dropped, the directory goes.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::util::{have, stderr};

/// The CA, the server's certificate and key, and the hashed CA directory.
pub struct Pki {
    _tmp: tempfile::TempDir,
    /// The directory holding everything below.
    pub dir: PathBuf,
    /// The hashed CA directory: `ca.pem` and its `<hash>.0` link.
    pub ca_dir: PathBuf,
    /// The CA certificate (PEM).
    pub ca_file: PathBuf,
    /// The CA's private key (PEM), to sign more certificates.
    pub ca_key: PathBuf,
    /// The server certificate (PEM) for localhost / 127.0.0.1.
    pub cert: PathBuf,
    /// The server's private key (PEM, unencrypted, mode 0600).
    pub key: PathBuf,
}

/// Run openssl with `args` in `dir`; panic with its stderr when it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let o = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("running openssl");
    assert!(o.status.success(), "openssl {args:?}: {}", stderr(&o));
}

impl Pki {
    /// Whether this machine can make one (the openssl command).
    pub fn available() -> bool {
        have("openssl")
    }

    /// A fresh CA and server certificate; panics when openssl fails.
    pub fn new() -> Pki {
        let tmp = tempfile::tempdir_in("/var/tmp").expect("temp dir");
        let dir = tmp.path().to_path_buf();
        let ca_dir = dir.join("ca");
        fs::create_dir(&ca_dir).unwrap();
        openssl(
            &dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "3",
                "-keyout",
                "ca.key",
                "-out",
                "ca/ca.pem",
                "-subj",
                "/CN=urmove test CA",
                "-addext",
                "basicConstraints=critical,CA:true",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
        openssl(
            &dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "host.key",
                "-out",
                "host.csr",
                "-subj",
                "/CN=localhost",
            ],
        );
        fs::write(
            dir.join("host.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:false\n\
             keyUsage=digitalSignature,keyEncipherment\n\
             extendedKeyUsage=serverAuth,clientAuth\n",
        )
        .unwrap();
        openssl(
            &dir,
            &[
                "x509",
                "-req",
                "-in",
                "host.csr",
                "-CA",
                "ca/ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "3",
                "-out",
                "host.pem",
                "-extfile",
                "host.ext",
            ],
        );
        openssl(&dir, &["rehash", "ca"]);
        let pki = Pki {
            ca_file: ca_dir.join("ca.pem"),
            ca_key: dir.join("ca.key"),
            cert: dir.join("host.pem"),
            key: dir.join("host.key"),
            ca_dir,
            dir,
            _tmp: tmp,
        };
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&pki.key, fs::Permissions::from_mode(0o600)).unwrap();
        pki
    }

    /// The `<hash>.0` links in the CA directory.
    pub fn hash_links(&self) -> Vec<PathBuf> {
        let mut links: Vec<PathBuf> = fs::read_dir(&self.ca_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "0"))
            .collect();
        links.sort();
        links
    }
}

// The proof that it works: a TLS handshake against it.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Child;
use std::time::{Duration, Instant};

/// A free loopback port (the kernel's pick, let go again).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `openssl s_server` with the Pki's certificate, answering `-www`.
fn s_server(pki: &Pki, port: u16) -> Kill {
    let mut child = Command::new("openssl")
        .args(["s_server", "-www", "-accept"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("-cert")
        .arg(&pki.cert)
        .arg("-key")
        .arg(&pki.key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_server");
    let out = child.stdout.take().unwrap();
    let server = Kill(child);
    // It prints ACCEPT once it listens.
    let mut line = String::new();
    let mut r = BufReader::new(out);
    let until = Instant::now() + Duration::from_secs(20);
    while !line.contains("ACCEPT") {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0, "s_server ended");
        assert!(Instant::now() < until, "s_server never listened");
    }
    std::thread::spawn(move || std::io::copy(&mut r, &mut std::io::sink()));
    server
}

/// `openssl s_client` to `host` on `port`, verifying against `ca_dir`
/// (hashed lookups, as gfal2 and xrootd do); its stdout and status.
fn s_client(pki: &Pki, port: u16, host: &str, ca_dir: &Path) -> (bool, String) {
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["-verify_return_error", "-verify_hostname", host, "-CApath"])
        .arg(ca_dir)
        .args(["-servername", host, "-quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl s_client");
    let _ = pki;
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(b"GET / HTTP/1.0\r\n\r\n");
    drop(stdin);
    let o = crate::util::wait_output_within(child, Duration::from_secs(30)).expect("s_client hung");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

#[test]
fn a_handshake_verifies_against_the_hashed_ca_dir_and_a_stranger_does_not() {
    crate::require!(Pki::available(), "needs the openssl command");
    let pki = Pki::new();
    assert_eq!(pki.hash_links().len(), 1, "one hashed link for the CA");
    assert!(
        pki.ca_key.starts_with(&pki.dir) && pki.ca_key.exists(),
        "the CA key kept"
    );
    let port = free_port();
    let _server = s_server(&pki, port);
    let (ok, body) = s_client(&pki, port, "localhost", &pki.ca_dir);
    assert!(ok, "handshake against the hashed CA dir failed: {body}");
    assert!(body.contains("HTTP/1.0 200 ok"), "no page: {body}");
    // The same with curl, checking the IP SAN too.
    if have("curl") {
        let o = Command::new("curl")
            .args(["-sS", "--cacert"])
            .arg(&pki.ca_file)
            .arg(format!("https://127.0.0.1:{port}/"))
            .output()
            .unwrap();
        assert!(o.status.success(), "curl by IP: {}", stderr(&o));
    }
    // Another CA's directory must not verify this server.
    let other = Pki::new();
    let (ok, _) = s_client(&pki, port, "localhost", &other.ca_dir);
    assert!(!ok, "a stranger CA verified the server");
    // Nor a name the certificate does not carry.
    let (ok, _) = s_client(&pki, port, "example.org", &pki.ca_dir);
    assert!(!ok, "a wrong host name verified");
}
