//! A third-party copy between two urmove endpoints runs on urmove's own
//! protocol: parallel TCP streams, registered buffers, O_DIRECT, the
//! receiver's verification and commit rules, the session's own version
//! negotiation. Each HTTPS front says so in an `X-Urmove-Tpc` header (its
//! protocol range); the endpoint the COPY came to then asks the other,
//! with the token it was given for it, by a `POST` on the path:
//!
//! - `X-Urmove-Tpc: receive` (a push: the other endpoint is the
//!   destination): it opens a private receiver for that one file, a daemon
//!   of its own on a new port with a new key, whose root is a staging
//!   directory beside the destination, and answers `ready PORT KEY`, then
//!   `written N` lines (bytes received and checked), then `ok` once the
//!   file, verified and committed there, took its name, or `failed: ...`;
//! - `X-Urmove-Tpc: send` (a pull: the other endpoint is the source), with
//!   `X-Urmove-To: ADDR:PORT` and `X-Urmove-Key` of a private receiver this
//!   side opened: it sends the file there (`urmove send`'s engine) and
//!   answers `sending` lines, then `ok` or `failed: ...`.
//!
//! The key travels inside the TLS connection only, lives for that one
//! copy, and opens a daemon whose root holds nothing but the staging
//! directory: a key holder can write nowhere else.

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::protocol::handshake::Key;
use crate::session::daemon::{DaemonStats, Limits, RecvConfig};

use super::{remote_failed, Copy, CopyError, Progress};
use crate::http::auth::Op;
use crate::http::dav::{Answer, Reply, Request};
use crate::http::path::parent_of;
use crate::http::server::{Conn, Front};
use crate::http::wire::{self, Chunked};

/// The header each urmove front answers with, and asks with.
pub const HEADER: &str = "X-Urmove-Tpc";
/// How long a private receiver waits for its one session.
const SESSION_WAIT: Duration = Duration::from_secs(60);
/// How often progress lines go.
const LINE_EVERY: Duration = Duration::from_secs(1);
/// How often a waiting side looks whether the other is done.
const POLL: Duration = Duration::from_millis(5);

/// Files this large or larger go on urmove's own protocol between two
/// urmove endpoints; smaller ones over HTTP (a session's start, with its
/// buffers, streams and private receiver, costs about what 32 MiB take).
pub const SIZE_MIN: u64 = 32 << 20;

/// Whether the other endpoint is urmove (its OPTIONS answer says so).
pub fn probe(front: &Front, copy: &Copy) -> bool {
    let req = crate::http::client::Request::new("OPTIONS", &copy.remote).headers(&copy.forward);
    let Ok(response) = front.client.request(req) else {
        return false;
    };
    let urmove = response.headers.get(HEADER).is_some();
    response.discard(64 << 10);
    urmove
}

/// Run `copy` with the other urmove endpoint.
pub fn run(front: &Front, copy: &Copy, progress: &Progress) -> Result<(), CopyError> {
    front.stats.tpc.native.fetch_add(1, Ordering::Relaxed);
    if copy.pull {
        pull(front, copy, progress)
    } else {
        push(front, copy, progress)
    }
}

/// A pull: a private receiver here, the source asked to send into it.
fn pull(front: &Front, copy: &Copy, progress: &Progress) -> Result<(), CopyError> {
    let remote = remote_addr(copy)?;
    let here = local_ip_towards(remote)?;
    let receiver = Receiver::open(front, &copy.rel, here)?;
    progress.connected(format!("tcp:{remote}"));
    let name = copy.rel.rsplit('/').next().unwrap_or("").to_string();
    let mut headers = copy.forward.clone();
    headers.push((HEADER.into(), "send".into()));
    headers.push((
        "X-Urmove-To".into(),
        SocketAddr::new(here, receiver.port).to_string(),
    ));
    headers.push(("X-Urmove-Key".into(), hex(&receiver.key)));
    headers.push(("X-Urmove-Name".into(), name));
    headers.push(("X-Number-Of-Streams".into(), copy.streams.to_string()));
    let asked = ask(front, copy, headers);
    let outcome = std::thread::scope(|scope| {
        let talk = scope.spawn(|| asked.and_then(follow));
        while !talk.is_finished() {
            progress.bytes.store(receiver.written(), Ordering::Relaxed);
            if progress.cancel.load(Ordering::Relaxed) {
                receiver.stop.store(true, Ordering::Relaxed);
            }
            std::thread::sleep(POLL);
        }
        talk.join()
            .unwrap_or_else(|_| Err("the copy panicked".into()))
    });
    progress.bytes.store(receiver.written(), Ordering::Relaxed);
    receiver.finish(front, &copy.rel, copy.replaces, outcome)
}

/// A push: the destination asked for a private receiver, this side sends.
fn push(front: &Front, copy: &Copy, progress: &Progress) -> Result<(), CopyError> {
    let (_, size) = super::push::open_source(front, copy)?;
    let remote = remote_addr(copy)?;
    progress.connected(format!("tcp:{remote}"));
    let mut headers = copy.forward.clone();
    headers.push((HEADER.into(), "receive".into()));
    headers.push(("X-Number-Of-Streams".into(), copy.streams.to_string()));
    let response = ask(front, copy, headers)?;
    let mut lines = response.lines();
    let ready = lines
        .next()
        .ok_or("the destination ended its answer before it was ready")?
        .map_err(|e| e.to_string())?;
    let (port, key) = parse_ready(&ready)?;
    // The destination stages the file under its own path's name.
    let theirs = crate::http::path::rel_of(copy.remote.path()).map_err(|r| r.reason)?;
    let name = theirs.rsplit('/').next().unwrap_or("").to_string();
    std::thread::scope(|scope| {
        let talk = scope.spawn(|| follow_lines(&mut lines, Some(progress), size));
        let to = SocketAddr::new(remote.ip(), port);
        let sent = send_file(front, &copy.rel, to, key, &name, copy, &progress.cancel);
        let said = talk
            .join()
            .unwrap_or_else(|_| Err("the copy panicked".into()));
        sent.and(said)
    })
}

/// The POST to the other endpoint's path, refused unless it answers 200.
fn ask(
    front: &Front,
    copy: &Copy,
    headers: Vec<(String, String)>,
) -> Result<crate::http::client::Response, CopyError> {
    let req = crate::http::client::Request::new("POST", &copy.remote).headers(&headers);
    let response = front.client.request(req).map_err(|e| e.to_string())?;
    if response.status != 200 {
        let status = response.status;
        let text = response.text(4096).unwrap_or_default();
        return Err(remote_failed(status, text.trim()));
    }
    Ok(response)
}

/// Read the other endpoint's lines to its `ok` or `failed: ...`.
fn follow(response: crate::http::client::Response) -> Result<(), CopyError> {
    follow_lines(&mut response.lines(), None, 0)
}

fn follow_lines(
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
    progress: Option<&Progress>,
    most: u64,
) -> Result<(), CopyError> {
    for line in lines {
        let line = line.map_err(|e| format!("the other endpoint's answer broke off: {e}"))?;
        let line = line.trim();
        if line == "ok" {
            return Ok(());
        }
        if let Some(why) = line.strip_prefix("failed: ") {
            return Err(why.into());
        }
        if let (Some(n), Some(p)) = (line.strip_prefix("written "), progress) {
            if let Ok(n) = n.parse::<u64>() {
                // Never more than the file: the other side's word is not trusted.
                p.bytes.store(n.min(most), Ordering::Relaxed);
            }
        }
    }
    Err("the other endpoint's answer ended without its outcome".into())
}

fn parse_ready(line: &str) -> Result<(u16, Key), CopyError> {
    let bad = || format!("the destination said {line:?}, not `ready PORT KEY`");
    let mut words = line.split_whitespace();
    if words.next() != Some("ready") {
        return Err(bad().into());
    }
    let port = words.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
    let key = words.next().and_then(unhex).ok_or_else(bad)?;
    Ok((port, key))
}

fn remote_addr(copy: &Copy) -> Result<SocketAddr, CopyError> {
    copy.remote
        .authority()
        .to_socket_addrs()
        .map_err(|e| format!("{}: {e}", copy.remote.redacted()))?
        .next()
        .ok_or_else(|| format!("{}: no address", copy.remote.redacted()).into())
}

/// The address this host reaches `remote` from (no packet sent).
fn local_ip_towards(remote: SocketAddr) -> Result<std::net::IpAddr, CopyError> {
    let any: SocketAddr = if remote.is_ipv4() {
        "0.0.0.0:0".parse().expect("an address")
    } else {
        "[::]:0".parse().expect("an address")
    };
    let s = std::net::UdpSocket::bind(any).map_err(|e| e.to_string())?;
    s.connect(remote).map_err(|e| e.to_string())?;
    Ok(s.local_addr().map_err(|e| e.to_string())?.ip())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Key> {
    let mut key = [0u8; 32];
    if text.len() != 64 {
        return None;
    }
    for (i, k) in key.iter_mut().enumerate() {
        *k = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(key)
}

/// Send the file at `rel` (beneath the root) to the private receiver at
/// `to` as `name`, with urmove's engine.
fn send_file(
    front: &Front,
    rel: &str,
    to: SocketAddr,
    key: Key,
    name: &str,
    copy: &Copy,
    cancel: &AtomicBool,
) -> Result<(), CopyError> {
    // The file's directory is opened beneath the root (no link followed)
    // and named through its descriptor: nobody who writes under the root
    // can swap a directory of the path for a link meanwhile.
    let parent = parent_of(rel);
    let dir: OwnedFd = front
        .root
        .openat(
            if parent.is_empty() { "." } else { parent },
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        )
        .map_err(|e| format!("/{parent}: {e}"))?;
    let file_name = rel.rsplit('/').next().unwrap_or("");
    let source = PathBuf::from(format!("/proc/self/fd/{}/{file_name}", dir.as_raw_fd()));
    let cfg = crate::session::client::config::SendConfig {
        dest: name.to_string(),
        sources: vec![source],
        streams: copy.streams.clamp(1, 64) as u16,
        one_file: true,
        state_dir: front.config.state_dir.clone(),
        direct: front.config.direct,
        ..crate::session::client::config::SendConfig::to(to.ip().to_string(), to.port(), key)
    };
    let mut quiet = Quiet;
    let report = crate::session::client::send::run_send(&cfg, cancel, &mut quiet)
        .map_err(|e| e.to_string())?;
    drop(dir);
    if report.status != "ok" {
        return Err(report
            .error
            .unwrap_or_else(|| report.status.to_string())
            .into());
    }
    Ok(())
}

/// A send's observer that keeps its lines to itself.
struct Quiet;

impl crate::session::client::report::SendObserver for Quiet {
    fn interval(&mut self, _line: &crate::session::client::report::NetInterval) {}
    fn notice(&mut self, _message: &str) {}
}

/// A private receiver for one file: a daemon of its own on a new port,
/// with a new key, whose root is a staging directory beside the file.
pub struct Receiver {
    staging: String,
    /// The staging directory, held open: the daemon's root is named
    /// through it.
    _dir: OwnedFd,
    pub port: u16,
    pub key: Key,
    pub stop: Arc<AtomicBool>,
    stats: Arc<DaemonStats>,
    thread: Option<std::thread::JoinHandle<()>>,
    opened: Instant,
}

impl Receiver {
    /// The staging directory made beside `rel`, and its daemon listening
    /// on `ip`.
    pub fn open(front: &Front, rel: &str, ip: std::net::IpAddr) -> Result<Receiver, CopyError> {
        let root = &front.root;
        let parent = parent_of(rel);
        root.mkdir_all(parent, 0o755)
            .map_err(|e| format!("/{parent}: {e}"))?;
        let mut r = [0u8; 8];
        crate::datapath::sys::random_bytes(&mut r).map_err(|e| e.to_string())?;
        let name = format!(
            ".tpc-{:016x}{}",
            u64::from_le_bytes(r),
            crate::session::PART_SUFFIX
        );
        let staging = if parent.is_empty() {
            name
        } else {
            format!("{parent}/{name}")
        };
        root.mkdir_all(&staging, 0o700)
            .map_err(|e| format!("{staging}: {e}"))?;
        let dir = root
            .openat(&staging, libc::O_PATH | libc::O_DIRECTORY, 0)
            .map_err(|e| format!("{staging}: {e}"))?;
        let mut key = [0u8; 32];
        crate::datapath::sys::random_bytes(&mut key).map_err(|e| e.to_string())?;
        let cfg = RecvConfig {
            limits: Limits {
                sessions: 1,
                connections: 80,
                ..Limits::default()
            },
            direct: front.config.direct,
            keep_sums: true,
            ..RecvConfig::private(
                SocketAddr::new(ip, 0),
                PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())),
                key,
                front.config.state_dir.clone(),
            )
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(DaemonStats::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = {
            let (stop, stats, log) = (
                Arc::clone(&stop),
                Arc::clone(&stats),
                Arc::clone(&front.log),
            );
            std::thread::Builder::new()
                .name("urmove-tpc-recv".into())
                .spawn(move || {
                    let served =
                        crate::session::daemon::serve(cfg, &stop, log.clone(), stats, &mut |a| {
                            let _ = tx.send(Ok(a.port()));
                        });
                    if let Err(e) = served {
                        let _ = tx.send(Err(e.to_string()));
                    }
                })
                .map_err(|e| e.to_string())?
        };
        let port = rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| "the copy's receiver did not start".to_string())??;
        Ok(Receiver {
            staging,
            _dir: dir,
            port,
            key,
            stop,
            stats,
            thread: Some(thread),
            opened: Instant::now(),
        })
    }

    /// Bytes received and checked so far.
    pub fn written(&self) -> u64 {
        let running: u64 = self.stats.sessions().iter().map(|s| s.bytes).sum();
        running.max(self.stats.bytes_received.load(Ordering::Relaxed))
    }

    /// Whether its one session came and went, or never came in time.
    pub fn ended(&self) -> bool {
        let total = self.stats.sessions_total.load(Ordering::Acquire);
        let active = self.stats.sessions_active.load(Ordering::Acquire);
        (total > 0 && active == 0) || (total == 0 && self.opened.elapsed() > SESSION_WAIT)
    }

    /// The daemon stopped; when the copy succeeded, the file it committed
    /// named at `rel`; the staging directory gone either way.
    pub fn finish(
        mut self,
        front: &Front,
        rel: &str,
        replaces: bool,
        outcome: Result<(), CopyError>,
    ) -> Result<(), CopyError> {
        self.stop.store(true, Ordering::Relaxed);
        // A daemon whose one session ended writes nothing more: it stops
        // by itself (within its accept loop's wait). One that may still
        // be writing is waited for, so that its staging goes whole.
        let idle = self.stats.sessions_active.load(Ordering::Acquire) == 0;
        if let Some(t) = self.thread.take().filter(|_| !idle) {
            let _ = t.join();
        }
        let name = rel.rsplit('/').next().unwrap_or("");
        let staged = format!("{}/{name}", self.staging);
        let named = outcome.and_then(|()| self.take_name(front, &staged, rel, replaces));
        remove_tree(&front.root, &self.staging);
        named
    }

    fn take_name(
        &self,
        front: &Front,
        staged: &str,
        rel: &str,
        replaces: bool,
    ) -> Result<(), CopyError> {
        let root = &front.root;
        let meta = root
            .symlink_metadata(staged)
            .map_err(|_| "the copy ended without the file arriving".to_string())?;
        if !meta.is_file() {
            return Err("what arrived is not a regular file".into());
        }
        if self.stats.files_received.load(Ordering::Relaxed) == 0 {
            return Err("the receiver committed no file".into());
        }
        // Its checksums, computed by the receiver as the blocks came, and
        // its stamp go over to the name it takes.
        let file = root
            .open_read(staged)
            .map_err(|e| format!("{staged}: {e}"))?;
        let digest = rekey(front, &file, staged.rsplit('/').next().unwrap_or(""), rel);
        let renamed = if replaces {
            let id = crate::datapath::beneath::FileId::of_metadata(&meta);
            root.rename_file(staged, rel, id)
        } else {
            root.rename_new(staged, rel)
        };
        renamed.map_err(|e| format!("/{rel}: naming the file: {e}"))?;
        if let Some(digest) = digest {
            crate::http::sums::named(front, &file, rel, digest);
        }
        Ok(())
    }
}

/// The checksums kept with `file` under its name `old` in the private
/// receiver's root, kept again (and the file stamped) under `new`, the
/// name it is about to take beneath the front's root; its digest.
fn rekey(front: &Front, file: &std::fs::File, old: &str, new: &str) -> Option<u64> {
    use crate::session::sink::stamp::{stamped_now, Named};
    let named = Named { file, rel: old };
    let held = stamped_now(named, &front.secret).filter(|h| h.untouched)?;
    let sums = crate::http::kept::load(named, &front.secret)?;
    crate::http::sums::keep(front, file, new, held.digest, &sums);
    Some(held.digest)
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Remove `rel` and what is beneath it (nothing followed).
fn remove_tree(root: &crate::datapath::beneath::Root, rel: &str) {
    if let Ok(names) = root.read_dir(rel) {
        for n in names {
            let child = format!("{rel}/{n}");
            match root.symlink_metadata(&child) {
                Ok(m) if m.is_dir() => remove_tree(root, &child),
                _ => {
                    let _ = root.unlink(&child);
                }
            }
        }
    }
    let _ = root.remove_dir(rel);
}

/// Answer a POST: a peer urmove's request for a private receiver or a send
/// (see the module); any other POST (a macaroon request) is refused.
pub fn post(req: &mut Request, conn: &mut Conn) -> Result<Answer, Answer> {
    match req.head.header(HEADER) {
        Some("receive") => receive(req, conn),
        Some("send") => send(req, conn),
        _ => Err(Answer::text(
            405,
            "POST is not served here (no macaroons: give a bearer token)",
        )
        .with("Allow", crate::http::dav::ALLOW)),
    }
}

/// Open a private receiver for the path and report it to its end.
fn receive(req: &mut Request, conn: &mut Conn) -> Result<Answer, Answer> {
    let rel = req.rel.clone();
    let replaces = crate::http::store::may_write(req, &rel)?;
    let local = conn
        .get_ref()
        .sock
        .local_addr()
        .map_err(|e| Answer::text(500, &e.to_string()))?;
    let receiver = Receiver::open(req.front, &rel, local.ip())
        .map_err(|e| Answer::text(500, &e.to_string()))?;
    let front = req.front;
    let written = stream_lines(
        conn,
        &format!("ready {} {}\n", receiver.port, hex(&receiver.key)),
        |say| {
            while !receiver.ended() {
                if say(&format!("written {}\n", receiver.written())).is_err() {
                    receiver.stop.store(true, Ordering::Relaxed);
                    break;
                }
                wait_ended(&receiver, LINE_EVERY);
            }
            let last = receiver.written();
            let _ = say(&format!("written {last}\n"));
            receiver.finish(front, &rel, replaces, Ok(()))
        },
    );
    written.map_err(|e| Answer::text(500, &e.to_string()))
}

fn wait_ended(receiver: &Receiver, most: Duration) {
    let until = Instant::now() + most;
    while Instant::now() < until && !receiver.ended() {
        std::thread::sleep(POLL);
    }
}

/// Send the path's file to the private receiver the request names.
fn send(req: &mut Request, conn: &mut Conn) -> Result<Answer, Answer> {
    let rel = req.rel.clone();
    req.allow(Op::Read, &rel)?;
    let file = crate::http::dav::open_existing(req)?;
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Err(Answer::text(400, &format!("/{rel}: not a regular file")));
    }
    let h = req.head;
    let bad = |what: &str| Answer::text(400, &format!("{HEADER}: send needs {what}"));
    let to: SocketAddr = h
        .header("x-urmove-to")
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| bad("X-Urmove-To: ADDR:PORT"))?;
    let key = h
        .header("x-urmove-key")
        .and_then(unhex)
        .ok_or_else(|| bad("X-Urmove-Key"))?;
    let name = h.header("x-urmove-name").unwrap_or("").to_string();
    if name.is_empty() || name.contains('/') {
        return Err(bad("X-Urmove-Name: one name"));
    }
    let streams = h
        .header("x-number-of-streams")
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(super::STREAMS_DEFAULT);
    let copy = Copy {
        rel: rel.clone(),
        remote: crate::http::url::Url::parse(&format!("https://{to}/"))
            .map_err(|e| Answer::text(400, &e.to_string()))?,
        pull: false,
        forward: Vec::new(),
        streams: streams.clamp(1, super::STREAMS_MAX),
        require_checksum: false,
        replaces: true,
    };
    let front = req.front;
    let cancel = AtomicBool::new(false);
    let written = stream_lines(conn, "sending\n", |say| {
        std::thread::scope(|scope| {
            let sending = scope.spawn(|| send_file(front, &rel, to, key, &name, &copy, &cancel));
            let mut next = Instant::now() + LINE_EVERY;
            while !sending.is_finished() {
                if Instant::now() >= next {
                    if say("sending\n").is_err() {
                        // The asking endpoint went away: so does the send.
                        cancel.store(true, Ordering::Relaxed);
                    }
                    next = Instant::now() + LINE_EVERY;
                }
                std::thread::sleep(POLL);
            }
            sending
                .join()
                .unwrap_or_else(|_| Err("the send panicked".into()))
        })
    });
    written.map_err(|e| Answer::text(500, &e.to_string()))
}

/// A 200 answer of lines: `first`, what `work` says, then `ok` or
/// `failed: ...` from its outcome.
fn stream_lines(
    conn: &mut Conn,
    first: &str,
    work: impl FnOnce(&mut dyn FnMut(&str) -> std::io::Result<()>) -> Result<(), CopyError>,
) -> std::io::Result<Answer> {
    let headers = vec![
        ("Content-Type".to_string(), "text/plain".to_string()),
        ("Transfer-Encoding".to_string(), "chunked".to_string()),
    ];
    let w = conn.get_mut();
    wire::write_head(w, 200, &headers)?;
    let mut out = Chunked::new(w);
    let mut written = 0u64;
    let mut say = |line: &str| -> std::io::Result<()> {
        out.write_all(line.as_bytes())?;
        out.flush()?;
        written += line.len() as u64;
        Ok(())
    };
    say(first)?;
    let outcome = work(&mut say);
    let last = match outcome {
        Ok(()) => "ok\n".to_string(),
        Err(e) => format!("failed: {}\n", e.to_string().replace(['\n', '\r'], " ")),
    };
    say(&last)?;
    out.finish()?;
    let mut a = Answer::new(200);
    a.body = Reply::Written(written);
    Ok(a)
}

/// What this front's `X-Urmove-Tpc` header says: the tpc way's version
/// and the session protocols it speaks.
pub fn offered() -> String {
    use crate::protocol::negotiate::{PROTOCOL_MAX, PROTOCOL_MIN};
    format!("1 protocol={PROTOCOL_MIN}-{PROTOCOL_MAX}")
}
