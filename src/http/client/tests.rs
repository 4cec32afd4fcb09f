//! A tiny HTTP server on loopback (plain and TLS) and the client's tests of
//! connections: reuse, chunked bodies, 100-continue, stale connections,
//! bodies cut short, credentials kept out of Debug.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::*;

pub(super) trait Rw: Read + Write + Send {}
impl<T: Read + Write + Send> Rw for T {}

/// A request as the test server read it (the body is left to the handler).
#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub method: String,
    pub target: String,
    pub headers: Headers,
    /// The connection's number (0 for the first accepted).
    pub conn: usize,
    /// The request's number on its connection.
    pub nth: usize,
}

pub(super) type Io = BufReader<Box<dyn Rw>>;
/// Answers one request; false closes the connection.
pub(super) type Handler = dyn Fn(&Seen, &mut Io) -> io::Result<bool> + Send + Sync;

pub(super) struct Server {
    pub port: u16,
    pub conns: Arc<AtomicUsize>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    pub fn start(tls: bool, handler: Arc<Handler>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let conns = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let config = tls.then(|| {
            let pki = pki();
            crate::http::tls::server_config(&pki.cert, &pki.key).unwrap()
        });
        let (c, s) = (conns.clone(), seen.clone());
        std::thread::spawn(move || {
            for tcp in listener.incoming() {
                let Ok(tcp) = tcp else { return };
                let n = c.fetch_add(1, Ordering::SeqCst);
                let (handler, seen, config) = (handler.clone(), s.clone(), config.clone());
                std::thread::spawn(move || {
                    let stream: Box<dyn Rw> = match config {
                        Some(config) => {
                            let conn = rustls::ServerConnection::new(config).unwrap();
                            Box::new(rustls::StreamOwned::new(conn, tcp))
                        }
                        None => Box::new(tcp),
                    };
                    let _ = serve(BufReader::new(stream), n, &*handler, &seen);
                });
            }
        });
        Server { port, conns, seen }
    }

    pub fn url(&self, tls: bool, path: &str) -> Url {
        let scheme = if tls { "https" } else { "http" };
        Url::parse(&format!("{scheme}://127.0.0.1:{}{path}", self.port)).unwrap()
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(mut io: Io, conn: usize, handler: &Handler, seen: &Mutex<Vec<Seen>>) -> io::Result<()> {
    for nth in 0.. {
        let mut line = String::new();
        if io.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut words = line.split_whitespace();
        let method = words.next().unwrap_or("").to_string();
        let target = words.next().unwrap_or("").to_string();
        let mut headers = Headers::default();
        loop {
            let mut h = String::new();
            io.read_line(&mut h)?;
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (n, v) = h.split_once(':').unwrap();
            headers.push(n.trim(), v.trim());
        }
        let req = Seen {
            method,
            target,
            headers,
            conn,
            nth,
        };
        seen.lock().unwrap().push(req.clone());
        if !handler(&req, &mut io)? {
            return Ok(());
        }
    }
    Ok(())
}

/// Reads a request's Content-Length body.
pub(super) fn read_body(req: &Seen, io: &mut Io) -> io::Result<Vec<u8>> {
    let len: usize = req
        .headers
        .get("content-length")
        .map_or(0, |l| l.parse().unwrap());
    let mut body = vec![0u8; len];
    io.read_exact(&mut body)?;
    Ok(body)
}

pub(super) fn answer(io: &mut Io, status: &str, headers: &str, body: &[u8]) -> io::Result<()> {
    let w = io.get_mut();
    write!(
        w,
        "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\n\r\n",
        body.len()
    )?;
    w.write_all(body)?;
    w.flush()
}

pub(super) struct Pki {
    _dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A CA and a certificate for 127.0.0.1 and localhost it signed, made
/// once with the openssl CLI.
pub(super) fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        std::fs::write(
            p("ext.cnf"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n",
        )
        .unwrap();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        let runs: [Vec<&str>; 3] = [
            [
                &["req", "-x509"][..],
                &ec,
                &["-keyout", "ca.key", "-out", "ca.pem"],
            ]
            .concat(),
            [
                &["req"][..],
                &ec,
                &["-keyout", "key.pem", "-out", "leaf.csr"],
            ]
            .concat(),
            vec![
                "x509",
                "-req",
                "-in",
                "leaf.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "cert.pem",
                "-extfile",
                "ext.cnf",
            ],
        ];
        for (i, args) in runs.iter().enumerate() {
            let subj = if i == 0 {
                "/CN=test-ca"
            } else {
                "/CN=localhost"
            };
            let mut cmd = std::process::Command::new("openssl");
            cmd.args(args).current_dir(dir.path()).arg("-days").arg("2");
            if i < 2 {
                cmd.args(["-subj", subj]);
            }
            let out = cmd
                .output()
                .expect("the openssl CLI (apt-get install openssl)");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Pki {
            ca: p("ca.pem"),
            cert: p("cert.pem"),
            key: p("key.pem"),
            _dir: dir,
        }
    })
}

pub(super) fn client(tls: bool) -> Client {
    let options = ClientOptions {
        io_timeout: Duration::from_secs(10),
        ..ClientOptions::default()
    };
    match tls {
        true => Client::with_cas(&[pki().ca.clone()], options).unwrap(),
        false => Client::plain(options),
    }
}

/// Waits (up to 10 s) for a condition another thread makes true.
pub(super) fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn hello() -> Arc<Handler> {
    Arc::new(|req, io| {
        read_body(req, io)?;
        let body = format!("hello {}", req.target);
        if req.method == "HEAD" {
            write!(
                io.get_mut(),
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )?;
            return Ok(true);
        }
        answer(io, "200 OK", "", body.as_bytes())?;
        Ok(true)
    })
}

#[test]
fn a_client_is_shared_between_threads_and_a_response_moves_between_them() {
    fn shared<T: Clone + Send + Sync + 'static>() {}
    fn sent<T: Send + 'static>() {}
    shared::<Client>();
    sent::<Response>();
}

#[test]
fn several_requests_share_one_kept_alive_connection_plain_and_tls() {
    for tls in [false, true] {
        let server = Server::start(tls, hello());
        let client = client(tls);
        for i in 0..4 {
            let url = server.url(tls, &format!("/f{i}"));
            let text = client.get(&url, &[]).unwrap().text(1000).unwrap();
            assert_eq!(text, format!("hello /f{i}"));
            assert_eq!(client.idle_count(), 1, "tls {tls}");
        }
        // A clone shares the pool.
        let other = client.clone();
        let r = other.head(&server.url(tls, "/h"), &[]).unwrap();
        assert_eq!(
            (r.status, r.headers.get("CONTENT-length")),
            (200, Some("8"))
        );
        assert_eq!(server.conns.load(Ordering::SeqCst), 1, "tls {tls}");
        let seen = server.seen();
        assert_eq!(seen.len(), 5);
        assert_eq!(seen[4].method, "HEAD");
        assert!(seen.iter().all(|s| s.conn == 0));
        assert_eq!(
            seen[0].headers.get("host"),
            Some(&*format!("127.0.0.1:{}", server.port))
        );
    }
}

#[test]
fn a_connection_close_or_an_unread_body_is_not_pooled() {
    let server = Server::start(
        false,
        Arc::new(|req, io| {
            let close = req.target == "/close";
            let h = if close { "Connection: close\r\n" } else { "" };
            answer(io, "200 OK", h, &[7u8; 100_000])?;
            Ok(!close)
        }),
    );
    let client = client(false);
    let r = client.get(&server.url(false, "/close"), &[]).unwrap();
    assert_eq!(r.text(200_000).unwrap().len(), 100_000);
    assert_eq!(client.idle_count(), 0);
    let mut r = client.get(&server.url(false, "/keep"), &[]).unwrap();
    let mut part = [0u8; 10];
    r.read_exact(&mut part).unwrap();
    drop(r);
    assert_eq!(client.idle_count(), 0);
    client
        .get(&server.url(false, "/keep"), &[])
        .unwrap()
        .text(200_000)
        .unwrap();
    assert_eq!(client.idle_count(), 1);
    assert_eq!(server.conns.load(Ordering::SeqCst), 3);
}

#[test]
fn chunked_bodies_decode_with_extensions_and_trailers() {
    let server = Server::start(
        true,
        Arc::new(|_req, io| {
            let w = io.get_mut();
            w.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")?;
            w.write_all(b"5;ext=1\r\nhello\r\n1\r\n \r\n")?;
            w.write_all(b"A\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n")?;
            w.flush()?;
            Ok(true)
        }),
    );
    let client = client(true);
    for _ in 0..2 {
        let text = client
            .get(&server.url(true, "/c"), &[])
            .unwrap()
            .text(100)
            .unwrap();
        assert_eq!(text, "hello 0123456789");
    }
    assert_eq!(server.conns.load(Ordering::SeqCst), 1);
}

#[test]
fn a_perf_marker_stream_reads_line_by_line_as_it_comes() {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = Mutex::new(rx);
    let server = Server::start(
        false,
        Arc::new(move |_req, io| {
            let w = io.get_mut();
            w.write_all(b"HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n")?;
            let marker = "Perf Marker\n Stripe Bytes Transferred: 10\nEnd\n";
            write!(w, "{:x}\r\n{marker}\r\n", marker.len())?;
            w.flush()?;
            // The rest only once the client has read the first marker.
            rx.lock().unwrap().recv().unwrap();
            let end = "success: Created\n";
            write!(w, "{:x}\r\n{end}\r\n0\r\n\r\n", end.len())?;
            w.flush()?;
            Ok(true)
        }),
    );
    let client = client(false);
    let r = client
        .request(Request::new("COPY", &server.url(false, "/x")))
        .unwrap();
    assert_eq!(r.status, 202);
    let mut lines = r.lines();
    assert_eq!(lines.next().unwrap().unwrap(), "Perf Marker");
    assert_eq!(
        lines.next().unwrap().unwrap(),
        " Stripe Bytes Transferred: 10"
    );
    assert_eq!(lines.next().unwrap().unwrap(), "End");
    tx.send(()).unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "success: Created");
    assert!(lines.next().is_none());
}

/// A server that answers 100 Continue and reads the body, or refuses
/// with 403 before it; what it received after the head is recorded.
fn expecting_server(tls: bool, refuse: bool) -> (Server, Arc<Mutex<Option<Vec<u8>>>>) {
    let got = Arc::new(Mutex::new(None));
    let g = got.clone();
    let server = Server::start(
        tls,
        Arc::new(move |req, io| {
            assert_eq!(req.headers.get("expect"), Some("100-continue"));
            if refuse {
                answer(io, "403 Forbidden", "", b"no")?;
                let mut rest = Vec::new();
                let _ = io.read_to_end(&mut rest);
                *g.lock().unwrap() = Some(rest);
                return Ok(false);
            }
            io.get_mut().write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
            io.get_mut().flush()?;
            let body = read_body(req, io)?;
            answer(io, "201 Created", "", b"")?;
            *g.lock().unwrap() = Some(body);
            Ok(true)
        }),
    );
    (server, got)
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn a_large_put_waits_for_100_continue_then_sends_its_body() {
    for tls in [false, true] {
        let (server, got) = expecting_server(tls, false);
        let client = client(tls);
        let data = pattern(300_000, 5);
        let r = client
            .put_reader(
                &server.url(tls, "/up"),
                &[],
                &mut &data[..],
                data.len() as u64,
            )
            .unwrap();
        assert_eq!(r.status, 201);
        assert_eq!(got.lock().unwrap().as_deref(), Some(&data[..]));
    }
}

#[test]
fn a_final_answer_to_100_continue_ends_the_request_without_the_body() {
    for tls in [false, true] {
        let (server, got) = expecting_server(tls, true);
        let client = client(tls);
        let data = pattern(300_000, 6);
        let mut reader = &data[..];
        let r = client
            .put_reader(&server.url(tls, "/up"), &[], &mut reader, data.len() as u64)
            .unwrap();
        assert_eq!(r.status, 403);
        assert_eq!(reader.len(), data.len(), "the reader was not read");
        assert_eq!(r.text(100).unwrap(), "no");
        assert_eq!(
            client.idle_count(),
            0,
            "a connection owing a body is not kept"
        );
        wait_for("the server to see the close", || {
            got.lock().unwrap().is_some()
        });
        assert_eq!(
            got.lock().unwrap().as_deref(),
            Some(&[][..]),
            "no body byte sent"
        );
    }
}

#[test]
fn a_server_silent_on_100_continue_gets_the_body_after_the_wait() {
    let got = Arc::new(Mutex::new(None));
    let g = got.clone();
    let server = Server::start(
        false,
        Arc::new(move |req, io| {
            let body = read_body(req, io)?;
            answer(io, "201 Created", "", b"")?;
            *g.lock().unwrap() = Some(body);
            Ok(true)
        }),
    );
    let options = ClientOptions {
        continue_wait: Duration::from_millis(200),
        ..ClientOptions::default()
    };
    let client = Client::plain(options);
    let data = pattern(100_000, 7);
    let r = client
        .put_reader(
            &server.url(false, "/up"),
            &[],
            &mut &data[..],
            data.len() as u64,
        )
        .unwrap();
    assert_eq!(r.status, 201);
    assert_eq!(got.lock().unwrap().as_deref(), Some(&data[..]));
}

#[test]
fn a_pooled_connection_the_server_closed_is_retried_once_when_idempotent() {
    for tls in [false, true] {
        stale_retried(tls);
    }
}

fn stale_retried(tls: bool) {
    // The server answers the first request of a connection, then reads the
    // next one and closes without a word: a keep-alive race lost.
    let server = Server::start(
        tls,
        Arc::new(|req, io| {
            read_body(req, io)?;
            if req.nth > 0 {
                return Ok(false);
            }
            answer(io, "200 OK", "", b"ok")?;
            Ok(true)
        }),
    );
    let client = client(tls);
    let url = server.url(tls, "/r");
    assert_eq!(client.get(&url, &[]).unwrap().text(10).unwrap(), "ok");
    assert_eq!(client.get(&url, &[]).unwrap().text(10).unwrap(), "ok");
    assert_eq!(server.conns.load(Ordering::SeqCst), 2);
    let put = Request::new("PUT", &url).body(Body::Bytes(b"abc"));
    assert_eq!(client.request(put).unwrap().text(10).unwrap(), "ok");
    assert_eq!(server.conns.load(Ordering::SeqCst), 3);
    // Not idempotent: the failure is the caller's to see.
    let post = Request::new("POST", &url).body(Body::Bytes(b"abc"));
    let e = client.request(post).unwrap_err().to_string();
    assert!(e.contains("before a response"), "tls {tls}: {e}");
    assert_eq!(server.conns.load(Ordering::SeqCst), 3);
}

#[test]
fn a_body_without_length_is_read_to_the_close_and_not_pooled() {
    let server = Server::start(
        false,
        Arc::new(|_req, io| {
            io.get_mut()
                .write_all(b"HTTP/1.1 200 OK\r\n\r\nuntil the end")?;
            Ok(false)
        }),
    );
    let client = client(false);
    let text = client
        .get(&server.url(false, "/"), &[])
        .unwrap()
        .text(100)
        .unwrap();
    assert_eq!(text, "until the end");
    assert_eq!(client.idle_count(), 0);
}

/// A server that sends half a body and closes.
fn cutting_server(tls: bool, chunked: bool) -> Server {
    Server::start(
        tls,
        Arc::new(move |_req, io| {
            let w = io.get_mut();
            if chunked {
                w.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")?;
                w.write_all(b"3e8\r\n")?;
            } else {
                w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")?;
            }
            w.write_all(&[1u8; 500])?;
            w.flush()?;
            Ok(false)
        }),
    )
}

#[test]
fn a_body_cut_short_is_an_error_never_a_short_success() {
    for (tls, chunked) in [(false, false), (false, true), (true, false), (true, true)] {
        let server = cutting_server(tls, chunked);
        let client = client(tls);
        let mut r = client.get(&server.url(tls, "/cut"), &[]).unwrap();
        let mut body = Vec::new();
        let e = r.read_to_end(&mut body).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
        assert_eq!(body.len(), 500);
        // And it stays an error.
        assert!(r.read(&mut [0u8; 10]).is_err());
        assert_eq!(client.idle_count(), 0);
    }
}

#[test]
fn credentials_never_show_in_debug_or_errors() {
    let secret = "Bearer eyJ-very-secret";
    let server = Server::start(
        false,
        Arc::new(|_req, io| {
            answer(io, "401 Unauthorized", "WWW-Authenticate: Bearer\r\n", b"")?;
            Ok(true)
        }),
    );
    let client = client(false);
    let url = server.url(false, "/p?authz=tok-in-query");
    let headers = vec![
        ("Authorization".to_string(), secret.to_string()),
        (
            "TransferHeaderAuthorization".to_string(),
            secret.to_string(),
        ),
        ("X-Other".to_string(), "visible".to_string()),
    ];
    let req = Request::new("GET", &url).headers(&headers);
    let shown = format!("{req:?} {:?}", Headers(headers.clone()));
    assert!(
        shown.contains("visible") && shown.contains("REDACTED"),
        "{shown}"
    );
    let r = client.request(req).unwrap();
    assert_eq!(server.seen()[0].headers.get("authorization"), Some(secret));
    let e = r.error_for_status().unwrap_err();
    let shown = format!("{shown} {e} {e:?}");
    assert!(shown.contains("401"), "{shown}");
    assert!(
        !shown.contains("very-secret") && !shown.contains("tok-in-query"),
        "{shown}"
    );
}

#[test]
fn a_server_that_never_answers_times_out() {
    let server = Server::start(
        false,
        Arc::new(|_req, io| {
            // Holds the connection without a word until the client leaves.
            let _ = io.read_to_end(&mut Vec::new());
            Ok(false)
        }),
    );
    let client = Client::plain(ClientOptions {
        io_timeout: Duration::from_millis(300),
        ..ClientOptions::default()
    });
    let e = client.get(&server.url(false, "/"), &[]).unwrap_err();
    match e {
        HttpError::Io { source, .. } => assert_eq!(source.kind(), io::ErrorKind::TimedOut),
        e => panic!("{e}"),
    }
}
