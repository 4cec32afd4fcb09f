//! Attacks on `urmove recv --http` (issue 37): a token holder with a narrow
//! scope, a local user who plants links and FIFOs under the root, a hostile
//! other endpoint in a third-party copy, and an unauthenticated network
//! client. Each test says what it proves; the attacks that fail are kept
//! too, as assertions of what must hold (nothing written outside, 403).

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::endpoint::curl;
use crate::http::Site;
use crate::tokens::Key;
use crate::util::{noise, urmove};

/// A token of `site`'s issuer with `scope`.
fn token(site: &Site, scope: &str) -> String {
    site.issuer.mint(&site.issuer.claims(scope), Key::Ec)
}

/// A request as a hostile plain-HTTP peer sees it.
struct Asked {
    method: String,
    headers: Vec<(String, String)>,
}

impl Asked {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `Range: bytes=a-b` as `[a, b]`.
    fn range(&self) -> Option<(u64, u64)> {
        let (a, b) = self
            .header("range")?
            .strip_prefix("bytes=")?
            .split_once('-')?;
        Some((a.parse().ok()?, b.parse().ok()?))
    }
}

type Handler = dyn Fn(&Asked, &mut TcpStream) -> bool + Send + Sync;

/// A plain-HTTP server answering each request with `handler` (which
/// writes the whole answer, and says whether the connection goes on);
/// its port.
fn hostile(handler: Arc<Handler>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let h = Arc::clone(&handler);
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut w = s;
                loop {
                    let mut lines = Vec::new();
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        lines.push(line.trim_end().to_string());
                    }
                    let method = lines[0].split(' ').next().unwrap_or("").to_string();
                    let headers = lines[1..]
                        .iter()
                        .filter_map(|l| l.split_once(':'))
                        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
                        .collect();
                    if !h(&Asked { method, headers }, &mut w) {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// A COPY to `dest` on `site` with `token` pulling from `source`: the
/// status and the marker stream.
fn copy_pull(site: &Site, token: &str, source: &str, dest: &str) -> (u16, String) {
    site.curl_as(
        token,
        &[
            "-N",
            "-X",
            "COPY",
            "-H",
            &format!("Source: {source}"),
            "-H",
            "X-Number-Of-Streams: 64",
            &site.endpoint.https(dest),
        ],
    )
}

/// A token that may only create under /incoming cannot replace a file: not
/// even one that another writer made there while its pulled copy was on
/// the way. Found: the COPY took `replaces` from `Overwrite` (absent: T)
/// rather than from the token check, so the copy landing renamed over the
/// other writer's file.
#[test]
fn a_create_only_copy_never_replaces_a_file_made_meanwhile() {
    let site = Site::new();
    let e = &site.endpoint;
    let create = token(&site, "storage.create:/incoming");
    let data = Arc::new(noise(1 << 20, 3));
    let d = Arc::clone(&data);
    let port = hostile(Arc::new(move |a: &Asked, w: &mut TcpStream| {
        let size = d.len();
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n");
        match a.method.as_str() {
            "HEAD" => w.write_all(head.as_bytes()).is_ok(),
            "GET" => {
                // Slow: the other writer's file lands meanwhile.
                std::thread::sleep(Duration::from_secs(3));
                w.write_all(head.as_bytes()).is_ok() && w.write_all(&d).is_ok()
            }
            _ => w
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                .is_ok(),
        }
    }));
    let source = format!("http://127.0.0.1:{port}/f");
    let copying = {
        let (site_token, src) = (create.clone(), source.clone());
        let pki_ca = site.pki.ca_file.clone();
        let url = e.https("incoming/x");
        std::thread::spawn(move || {
            let o = Command::new("curl")
                .args(["-sS", "-N", "--cacert"])
                .arg(&pki_ca)
                .args(["-X", "COPY", "-H", &format!("Source: {src}")])
                .args(["-H", &format!("Authorization: Bearer {site_token}")])
                .arg(url)
                .output()
                .unwrap();
            String::from_utf8_lossy(&o.stdout).into_owned()
        })
    };
    std::thread::sleep(Duration::from_millis(1000));
    // Another writer, allowed to, makes the file.
    let (code, _) = site.curl_as(
        &site.token,
        &[
            "--data-binary",
            "precious",
            "-X",
            "PUT",
            &e.https("incoming/x"),
        ],
    );
    assert_eq!(code, 201);
    let markers = copying.join().unwrap();
    let got = fs::read(e.path("incoming/x")).unwrap();
    assert!(
        got == b"precious",
        "a create-only token's copy replaced another writer's file ({} bytes now): {markers}",
        got.len()
    );
    assert!(markers.contains("failure"), "{markers}");
}

/// A source whose file changes between the ranges of a pull (no checksum
/// given) must not yield a committed file that is half the old version and
/// half the new one, which the source never held. Found: the ranged GETs
/// neither send `If-Range`/`If-Match` nor compare the ETag each answer
/// carries with the HEAD's.
#[test]
fn a_source_that_changes_between_ranges_is_never_committed_as_a_mix() {
    let site = Site::new();
    let e = &site.endpoint;
    let size = 12 << 20;
    let old = Arc::new(noise(size, 5));
    let new = Arc::new(noise(size, 6));
    let served = Arc::new(AtomicUsize::new(0));
    let (o, n, s) = (Arc::clone(&old), Arc::clone(&new), Arc::clone(&served));
    let port = hostile(Arc::new(move |a: &Asked, w: &mut TcpStream| {
        match a.method.as_str() {
            "HEAD" => w
                .write_all(
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nETag: \"v1\"\r\n\r\n")
                        .as_bytes(),
                )
                .is_ok(),
            "GET" => {
                // The first range from the old version, the rest from the new.
                let first = s.fetch_add(1, Ordering::SeqCst) == 0;
                let (etag, data) = if first { ("v1", &o) } else { ("v2", &n) };
                let (a0, b0) = a.range().unwrap_or((0, size as u64 - 1));
                let head = format!(
                    "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes {a0}-{b0}/{size}\r\nETag: \"{etag}\"\r\n\r\n",
                    b0 - a0 + 1
                );
                w.write_all(head.as_bytes()).is_ok()
                    && w.write_all(&data[a0 as usize..=b0 as usize]).is_ok()
            }
            _ => w
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                .is_ok(),
        }
    }));
    let (_, markers) = copy_pull(
        &site,
        &site.token,
        &format!("http://127.0.0.1:{port}/f"),
        "mixed",
    );
    assert!(
        served.load(Ordering::SeqCst) > 1,
        "one range only: {markers}"
    );
    if let Ok(got) = fs::read(e.path("mixed")) {
        assert!(
            got == *old || got == *new,
            "committed a mix of two versions of the source: {markers}"
        );
    } else {
        assert!(markers.contains("failure"), "{markers}");
    }
}

/// Without a token nobody learns what exists: every refusal of an
/// unauthenticated write is 401, whatever is at the path. Found: MKCOL
/// answered 405 for an existing path, PUT 409 for a directory and 412 (with
/// `Overwrite: F`) for a file, all before the token was looked at.
#[test]
fn an_unauthenticated_client_cannot_probe_what_exists() {
    let site = Site::new();
    let e = &site.endpoint;
    fs::create_dir_all(e.path("secret/dir")).unwrap();
    fs::write(e.path("secret/file"), b"x").unwrap();
    let before = e.listing();
    for (what, args) in [
        ("MKCOL an existing dir", vec!["-X", "MKCOL"]),
        ("PUT on a dir", vec!["-X", "PUT", "--data-binary", "y"]),
        (
            "PUT with Overwrite: F on a file",
            vec!["-X", "PUT", "-H", "Overwrite: F", "--data-binary", "y"],
        ),
        (
            "COPY with Overwrite: F on a file",
            vec![
                "-X",
                "COPY",
                "-H",
                "Overwrite: F",
                "-H",
                "Source: http://127.0.0.1:1/x",
            ],
        ),
    ] {
        let target = if what.contains("dir") {
            e.https("secret/dir")
        } else {
            e.https("secret/file")
        };
        let mut all = args.clone();
        all.push(&target);
        let (code, body) = curl(&site.pki, &all);
        assert_eq!(code, 401, "{what}: {body}");
    }
    assert_eq!(e.listing(), before);
}

/// Tokens never reach the log, not even one a client put in the query
/// (`?authz=`, as XRootD and dCache take them). Found: the access log wrote
/// the request target whole, query and all.
#[test]
fn a_token_in_the_query_never_reaches_the_log() {
    let site = Site::new();
    let e = &site.endpoint;
    fs::write(e.path("f"), b"data").unwrap();
    let url = format!("{}?authz=Bearer%20{}", e.https("f"), site.token);
    let (code, body) = site.curl_as(&site.token, &[&url]);
    assert_eq!((code, body.as_str()), (200, "data"));
    let (code, _) = curl(
        &site.pki,
        &[&format!("{}?access_token={}", e.https("f"), site.token)],
    );
    assert_eq!(code, 401);
    let log = e.log_with("GET /f 401");
    assert!(log.contains("GET /f"), "{log}");
    assert!(
        !log.contains(&site.token),
        "the token reached the log:\n{log}"
    );
}

/// Whether the server closed `s` (a read sees the end or a reset).
fn closed(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// A client that sends its TLS hello a byte every few seconds is cut off
/// after a bounded time (the 15 s handshake limit is meant as a whole).
/// Found: the limit is a socket read timeout, reset by every byte, so one
/// byte every 4 s holds a connection (of the 512) forever: slowloris.
#[test]
fn a_hello_sent_a_byte_at_a_time_is_not_waited_for_forever() {
    let site = Site::new();
    let mut s = TcpStream::connect(("127.0.0.1", site.endpoint.http)).unwrap();
    // A TLS handshake record of 512 bytes, then its body a byte at a time.
    s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00]).unwrap();
    let started = Instant::now();
    let mut cut = false;
    while started.elapsed() < Duration::from_secs(45) {
        if s.write_all(&[0x01]).is_err() || closed(&mut s) {
            cut = true;
            break;
        }
        std::thread::sleep(Duration::from_secs(4));
    }
    assert!(cut, "a trickling hello held its connection for 45 s");
}

/// One address holding idle connections cannot lock every other client
/// out. Found: the 512 connections are one pool for everyone: 512 silent
/// TCP connections from one address (no TLS, no token) refuse every other
/// client until they time out, and trickling (above) holds them for good.
#[test]
fn idle_connections_of_one_address_do_not_lock_out_another() {
    let site = Site::new();
    let e = &site.endpoint;
    fs::write(e.path("f"), b"data").unwrap();
    let held: Vec<TcpStream> = (0..520)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", e.http)).ok())
        .collect();
    assert!(held.len() >= 512, "{}", held.len());
    std::thread::sleep(Duration::from_millis(500));
    // Another client, from another loopback address.
    let (code, body) = site.curl_as(
        &site.token,
        &[
            "--interface",
            "127.0.0.2",
            "--max-time",
            "10",
            &e.https("f"),
        ],
    );
    drop(held);
    assert_eq!((code, body.as_str()), (200, "data"), "locked out");
}

/// Links a local user plants under the root lead nowhere: not out of the
/// root, not out of the token's path. (Held.)
#[test]
fn links_planted_under_the_root_lead_nowhere() {
    let site = Site::new();
    let e = &site.endpoint;
    let pubtok = token(&site, "storage.read:/pub storage.modify:/pub");
    fs::create_dir_all(e.path("pub")).unwrap();
    fs::create_dir_all(e.path("private")).unwrap();
    fs::write(e.path("private/secret"), b"SECRET").unwrap();
    symlink("../private", e.path("pub/dir")).unwrap();
    symlink("../private/secret", e.path("pub/file")).unwrap();
    symlink("/etc/passwd", e.path("pub/passwd")).unwrap();
    symlink("/tmp", e.path("pub/tmp")).unwrap();
    fs::hard_link(e.path("private/secret"), e.path("pub/hard")).unwrap_or(());
    fs::remove_file(e.path("pub/hard")).unwrap();
    for p in ["pub/dir/secret", "pub/file", "pub/passwd"] {
        let (code, body) = site.curl_as(&pubtok, &[&e.https(p)]);
        assert!(code >= 400, "GET {p}: {code} {body}");
        assert!(!body.contains("SECRET") && !body.contains("root:"), "{p}");
        let (code, body) =
            site.curl_as(&pubtok, &["-X", "PROPFIND", "-H", "Depth: 1", &e.https(p)]);
        assert!(code >= 400, "PROPFIND {p}: {code} {body}");
    }
    for p in ["pub/dir/new", "pub/tmp/urmove-attack37", "pub/dir/secret"] {
        let (code, _) = site.curl_as(&pubtok, &["-X", "PUT", "--data-binary", "w", &e.https(p)]);
        assert!(code >= 400, "PUT {p}: {code}");
        let (code, _) = site.curl_as(&pubtok, &["-X", "MKCOL", &e.https(&format!("{p}d"))]);
        assert!(code >= 400, "MKCOL {p}d: {code}");
    }
    let (code, _) = site.curl_as(&pubtok, &["-X", "DELETE", &e.https("pub/dir/secret")]);
    assert!(code >= 400, "DELETE through a link: {code}");
    // A push of a link's target is refused too.
    let (code, _) = site.curl_as(
        &pubtok,
        &[
            "-X",
            "COPY",
            "-H",
            "Destination: http://127.0.0.1:1/x",
            &e.https("pub/file"),
        ],
    );
    assert!(code >= 400, "COPY of a link: {code}");
    assert_eq!(fs::read(e.path("private/secret")).unwrap(), b"SECRET");
    assert!(!e.path("private/new").exists() && !e.path("private/secretd").exists());
    assert!(!std::path::Path::new("/tmp/urmove-attack37").exists());
}

/// `..`, encoded separators and dots, doubled slashes: none leaves the
/// token's path. (Held.)
#[test]
fn encoded_escapes_stay_inside_the_token_path() {
    let site = Site::new();
    let e = &site.endpoint;
    let pubtok = token(&site, "storage.read:/pub storage.create:/pub");
    fs::create_dir_all(e.path("pub")).unwrap();
    fs::create_dir_all(e.path("private")).unwrap();
    fs::write(e.path("private/secret"), b"SECRET").unwrap();
    for p in [
        "/pub/../private/secret",
        "/pub/%2e%2e/private/secret",
        "/pub/..%2fprivate%2fsecret",
        "/pub%2F..%2Fprivate%2Fsecret",
        "//private/secret",
        "/pub/.%2e/private/secret",
        "/private/secret",
        "/pub/../private/secret/",
        "/pub/%C0%AE%C0%AE/private/secret",
    ] {
        let url = format!("https://localhost:{}{p}", e.http);
        let (code, body) = site.curl_as(&pubtok, &["--path-as-is", &url]);
        assert!(
            code >= 400 && !body.contains("SECRET"),
            "GET {p}: {code} {body}"
        );
        let (code, _) = site.curl_as(
            &pubtok,
            &[
                "--path-as-is",
                "-X",
                "PUT",
                "--data-binary",
                "w",
                &format!("{url}x"),
            ],
        );
        assert!(code >= 400, "PUT {p}x: {code}");
    }
    assert_eq!(e.listing(), vec!["private", "private/secret", "pub"]);
}

/// urmove's own names (parts, journals, a copy's staging directory) are
/// reached by no request, and listed by no PROPFIND. FIFOs do not hang
/// the front. (Held.)
#[test]
fn reserved_names_and_fifos_are_out_of_reach() {
    let site = Site::new();
    let e = &site.endpoint;
    fs::create_dir_all(e.path(".tpc-0123.urmove.part")).unwrap();
    fs::write(e.path(".tpc-0123.urmove.part/x"), b"STAGED").unwrap();
    fs::write(e.path("f.urmove.part"), b"PART").unwrap();
    let fifo = e.path("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    for p in [
        ".tpc-0123.urmove.part/x",
        "f.urmove.part",
        ".TPC-0123.URMOVE.PART/x",
    ] {
        for m in ["GET", "DELETE", "PROPFIND"] {
            let (code, body) = site.curl_as(&site.token, &["-X", m, &e.https(p)]);
            assert!(code >= 400 && !body.contains("STAGED"), "{m} {p}: {code}");
        }
    }
    let (code, body) = site.curl_as(
        &site.token,
        &["-X", "PROPFIND", "-H", "Depth: 1", &e.https("/")],
    );
    assert_eq!(code, 207);
    assert!(!body.contains("urmove.part"), "{body}");
    let (code, _) = site.curl_as(&site.token, &["--max-time", "10", &e.https("fifo")]);
    assert_eq!(code, 403);
    let (code, _) = site.curl_as(&site.token, &["--max-time", "10", "-I", &e.https("fifo")]);
    assert_eq!(code, 403);
    assert_eq!(
        fs::read(e.path(".tpc-0123.urmove.part/x")).unwrap(),
        b"STAGED"
    );
    assert_eq!(fs::read(e.path("f.urmove.part")).unwrap(), b"PART");
}

/// A `Credential: gridsite` COPY is refused before anything (400). (Held.)
#[test]
fn a_gridsite_copy_is_refused_before_anything() {
    let site = Site::new();
    let e = &site.endpoint;
    let (code, body) = site.curl_as(
        &site.token,
        &[
            "-X",
            "COPY",
            "-H",
            "Credential: gridsite",
            "-H",
            "Source: http://127.0.0.1:1/x",
            &e.https("g"),
        ],
    );
    assert_eq!(code, 400, "{body}");
    assert!(e.listing().is_empty());
}

/// A POST `X-Urmove-Tpc: receive` as a peer urmove sends it.
fn receive_post(site: &Site, tok: &str, path: &str) -> std::process::Child {
    Command::new("curl")
        .args(["-sS", "-N", "--cacert"])
        .arg(&site.pki.ca_file)
        .args(["-X", "POST", "-H", "X-Urmove-Tpc: receive"])
        .args(["-H", &format!("Authorization: Bearer {tok}")])
        .args(["-w", "\n%{http_code}\n"])
        .arg(site.endpoint.https(path))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `urmove send` of `sources` to the private receiver at `port` with `key`.
fn send_to(dir: &std::path::Path, port: u16, key: &str, sources: &[&str], dest: &str) -> bool {
    let kf = dir.join("k");
    fs::write(&kf, format!("{key}\n")).unwrap();
    fs::set_permissions(&kf, fs::Permissions::from_mode(0o600)).unwrap();
    let o = urmove()
        .arg("send")
        .arg("--key-file")
        .arg(&kf)
        .args(["-p", &port.to_string(), "-P", "1", "--state-dir"])
        .arg(dir.join("state"))
        .args(sources)
        .arg(format!("127.0.0.1:{dest}"))
        .output()
        .unwrap();
    o.status.success()
}

/// The native receive takes only what the token may write: a read-only
/// token opens no receiver; a create token's key lands one file at its
/// one name, whatever else its holder sends into the staging directory,
/// and the key does not open a second session. (Held.)
#[test]
fn the_native_receive_lands_one_file_at_the_tokens_path_only() {
    let site = Site::new();
    let e = &site.endpoint;
    let read = token(&site, "storage.read:/");
    let create = token(&site, "storage.create:/incoming");
    for (tok, path) in [(&read, "incoming/x"), (&create, "other/x")] {
        let mut c = receive_post(&site, tok, path);
        let mut out = String::new();
        c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        c.wait().unwrap();
        assert!(out.trim_end().ends_with("403"), "{path}: {out}");
    }
    assert!(e.listing().is_empty(), "{:?}", e.listing());

    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let src = work.path().join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("x"), b"the one").unwrap();
    fs::write(src.join("y"), b"a stowaway").unwrap();
    fs::write(src.join("sub/z"), b"another").unwrap();
    let mut c = receive_post(&site, &create, "incoming/x");
    let mut lines = BufReader::new(c.stdout.take().unwrap());
    let mut ready = String::new();
    lines.read_line(&mut ready).unwrap();
    let words: Vec<&str> = ready.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"ready"), "{ready}");
    let (port, key) = (words[1].parse::<u16>().unwrap(), words[2].to_string());
    let from = format!("{}/", src.display());
    let sent = send_to(work.path(), port, &key, &[&from], ".");
    let mut rest = String::new();
    lines.read_to_string(&mut rest).unwrap();
    c.wait().unwrap();
    assert!(sent, "{rest}");
    assert!(rest.contains("\nok\n") || rest.starts_with("ok"), "{rest}");
    assert_eq!(fs::read(e.path("incoming/x")).unwrap(), b"the one");
    assert_eq!(e.listing(), vec!["incoming", "incoming/x"]);
    // The key is spent.
    let again = send_to(work.path(), port, &key, &[&from], ".");
    assert!(!again);
    assert_eq!(e.listing(), vec!["incoming", "incoming/x"]);
}

/// A private receiver nobody connects to goes with its asker: the POST's
/// client gone, the staging directory is removed within seconds. A token
/// that may only create cannot ask for a send (which reads). (Held.)
#[test]
fn an_abandoned_receive_is_cleaned_and_a_send_needs_read() {
    let site = Site::new();
    let e = &site.endpoint;
    let create = token(&site, "storage.create:/incoming");
    let mut c = receive_post(&site, &create, "incoming/x");
    let mut lines = BufReader::new(c.stdout.take().unwrap());
    let mut ready = String::new();
    lines.read_line(&mut ready).unwrap();
    assert!(ready.starts_with("ready "), "{ready}");
    assert!(e.listing().iter().any(|n| n.contains(".tpc-")));
    c.kill().unwrap();
    c.wait().unwrap();
    drop(lines);
    let until = Instant::now() + Duration::from_secs(10);
    while e.listing().iter().any(|n| n.contains(".tpc-")) {
        assert!(Instant::now() < until, "staging left: {:?}", e.listing());
        std::thread::sleep(Duration::from_millis(200));
    }
    fs::write(e.path("incoming/f"), b"data").unwrap();
    let (code, body) = site.curl_as(
        &create,
        &[
            "-X",
            "POST",
            "-H",
            "X-Urmove-Tpc: send",
            "-H",
            "X-Urmove-To: 127.0.0.1:1",
            "-H",
            &format!("X-Urmove-Key: {}", "ab".repeat(32)),
            "-H",
            "X-Urmove-Name: f",
            &e.https("incoming/f"),
        ],
    );
    assert_eq!(code, 403, "{body}");
}

/// A hostile source that says it is urmove gets a private receiver's key
/// (it is the one that sends); what it sends there instead of one file (a
/// link to /etc/passwd at the name, a stowaway beside it) never becomes
/// visible, and the COPY fails. (Held.)
#[test]
fn a_hostile_native_source_lands_nothing_but_one_regular_file() {
    let site = Site::new();
    let e = &site.endpoint;
    let work = Arc::new(tempfile::tempdir_in("/var/tmp").unwrap());
    let evil = work.path().join("evil");
    fs::create_dir_all(&evil).unwrap();
    symlink("/etc/passwd", evil.join("x")).unwrap();
    fs::write(evil.join("y"), b"stowaway").unwrap();
    let w = Arc::clone(&work);
    let delivered = Arc::new(AtomicUsize::new(0));
    let d = Arc::clone(&delivered);
    let port = hostile(Arc::new(move |a: &Asked, s: &mut TcpStream| {
        let answer = match (a.method.as_str(), a.header("x-urmove-tpc")) {
            ("OPTIONS", _) => {
                "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Urmove-Tpc: 1 protocol=1-99\r\n\r\n"
                    .to_string()
            }
            // Big enough for urmove's own protocol (32 MiB or more).
            ("HEAD", _) => {
                "HTTP/1.1 200 OK\r\nContent-Length: 67108864\r\nX-Urmove-Tpc: 1 protocol=1-99\r\n\r\n"
                    .to_string()
            }
            ("POST", Some("send")) => {
                let to = a.header("x-urmove-to").unwrap_or("");
                let (_, port) = to.rsplit_once(':').unwrap_or(("", "0"));
                let from = format!("{}/", w.path().join("evil").display());
                let key = a.header("x-urmove-key").unwrap_or("").to_string();
                let sent = send_to(w.path(), port.parse().unwrap_or(0), &key, &[&from], ".");
                d.fetch_add(usize::from(sent), Ordering::SeqCst);
                let body = "sending\nok\n";
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
            }
            _ => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_string(),
        };
        s.write_all(answer.as_bytes()).is_ok()
    }));
    let (code, markers) = copy_pull(
        &site,
        &site.token,
        &format!("http://127.0.0.1:{port}/f"),
        "in/x",
    );
    assert_eq!(code, 202, "{markers}");
    assert_eq!(
        delivered.load(Ordering::SeqCst),
        1,
        "the hostile send: {markers}"
    );
    assert!(
        markers.contains("failure: what arrived is not a regular file"),
        "{markers}"
    );
    let listing = e.listing();
    assert!(
        listing.iter().all(|n| n == "in"),
        "visible after a hostile native source: {listing:?}"
    );
}

/// A PUT cut off mid-body leaves nothing visible, and no part beside it.
/// (Held.)
#[test]
fn an_interrupted_put_leaves_nothing() {
    let site = Site::new();
    let e = &site.endpoint;
    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let part = work.path().join("part");
    fs::write(&part, noise(1 << 20, 9)).unwrap();
    let pf = part.to_str().unwrap();
    for length in ["10000000", "1048577"] {
        let (code, _) = site.curl_as(
            &site.token,
            &[
                "--max-time",
                "2",
                "-X",
                "PUT",
                "-H",
                &format!("Content-Length: {length}"),
                "--data-binary",
                &format!("@{pf}"),
                &e.https("d/cut"),
            ],
        );
        assert_ne!(code / 100, 2, "{length}");
    }
    std::thread::sleep(Duration::from_millis(500));
    let files: Vec<String> = e.listing().into_iter().filter(|n| n != "d").collect();
    assert!(files.is_empty(), "{files:?}");
}

/// What a token says of its holder reaches the access log escaped: a
/// subject with a line break cannot forge a log line. (Held: the access
/// log gets the subject raw, but the daemon's log escapes control
/// characters.)
#[test]
fn a_token_subject_cannot_forge_a_log_line() {
    let site = Site::new();
    let e = &site.endpoint;
    fs::write(e.path("f"), b"data").unwrap();
    let mut claims = site.issuer.claims("storage.read:/");
    claims["sub"] = "eve\nhttp 10.9.8.7:1 DELETE /everything 204 forged".into();
    let forger = site.issuer.mint(&claims, Key::Ec);
    let (code, _) = site.curl_as(&forger, &[&e.https("f")]);
    assert_eq!(code, 200);
    let log = e.log_with("GET /f 200");
    assert!(log.contains("GET /f 200"), "{log}");
    assert!(
        !log.lines().any(|l| l.starts_with("http 10.9.8.7")
            || l.contains("] http 10.9.8.7")
            || l.trim_start().starts_with("http 10.9.8.7")),
        "a forged line:\n{log}"
    );
}
