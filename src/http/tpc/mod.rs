//! Third-party copy (the WLCG HTTP-TPC spec): `COPY` with `Source:` (pull:
//! this endpoint fetches the file and writes it at the request's path) or
//! with `Destination:` (push: this endpoint sends the file at the request's
//! path). `TransferHeaderX: v` is sent to the other endpoint as `X: v` (its
//! token, in `TransferHeaderAuthorization`). The answer is a
//! `text/perf-marker-stream`: a marker at least every few seconds counting
//! the bytes moved *and written* at the destination, then `success:
//! Created` or `failure: ...`. Refusals before the copy are HTTP statuses.
//!
//! The copy runs on urmove's own protocol when the other endpoint is urmove
//! (`native`), else as parallel ranged GETs (`pull`) or a PUT (`push`) over
//! the client's kept-alive TLS connections.

mod markers;
pub mod native;
mod pull;
mod push;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::auth::Op;
use super::dav::{Answer, Reply, Request};
use super::server::Conn;
use super::url::Url;

/// Streams of a copy that names none (`X-Number-Of-Streams: 0` or absent).
pub const STREAMS_DEFAULT: usize = 4;
/// Most streams one copy takes.
pub const STREAMS_MAX: usize = 64;

/// One copy as the request asks it.
pub struct Copy {
    /// The path beneath this endpoint's root (destination of a pull, source
    /// of a push).
    pub rel: String,
    /// The other endpoint's URL.
    pub remote: Url,
    pub pull: bool,
    /// Headers for the other endpoint (`TransferHeaderX: v` as `X: v`).
    pub forward: Vec<(String, String)>,
    pub streams: usize,
    /// The other endpoint's checksum must be had and agree.
    pub require_checksum: bool,
    /// Replacing a file that is there (pull) is allowed.
    pub replaces: bool,
}

/// What a running copy shows in its markers.
#[derive(Debug, Default)]
pub struct Progress {
    /// Bytes moved and written at the destination.
    pub bytes: AtomicU64,
    /// `tcp:IP:PORT` of each connection to the other endpoint.
    pub connections: Mutex<Vec<String>>,
    /// The client that asked went away: the copy stops.
    pub cancel: AtomicBool,
}

impl Progress {
    pub fn add(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
    }

    pub fn connected(&self, addr: String) {
        let mut c = self.connections.lock().unwrap_or_else(|p| p.into_inner());
        if !c.contains(&addr) {
            c.push(addr);
        }
    }
}

/// Answer a COPY.
pub fn copy(req: &mut Request, conn: &mut Conn) -> Result<Answer, Answer> {
    let mut copy = asked(req)?;
    if copy.pull {
        // Replacing is what the token allowed for what was there: a file
        // that appears meanwhile is never replaced by a create-only copy.
        copy.replaces = super::store::may_write(req, &copy.rel)?;
    } else {
        req.allow(Op::Read, &copy.rel)?;
        let file = super::dav::open_existing(req)?;
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Err(Answer::text(
                400,
                &format!("/{}: not a regular file", copy.rel),
            ));
        }
    }
    let front = req.front;
    let stats = &front.stats.tpc;
    stats.active.fetch_add(1, Ordering::Relaxed);
    let counter = if copy.pull {
        &stats.pulls
    } else {
        &stats.pushes
    };
    counter.fetch_add(1, Ordering::Relaxed);
    let progress = Arc::new(Progress::default());
    let written = markers::run(conn, &progress, &front.stats, || {
        run(front, &copy, &progress)
    });
    stats.active.fetch_sub(1, Ordering::Relaxed);
    let (bytes, ok) = written.map_err(|e| Answer::text(500, &e.to_string()))?;
    let outcome = if ok { &stats.succeeded } else { &stats.failed };
    outcome.fetch_add(1, Ordering::Relaxed);
    let mut a = Answer::new(202);
    a.body = Reply::Written(bytes);
    Ok(a)
}

/// The copy itself, by whichever way the other endpoint takes: a file of
/// [`native::SIZE_MIN`] bytes or more with another urmove on urmove's own
/// protocol (its session's start costs more than a small file's GET),
/// anything else over HTTP on the client's kept-alive connections.
fn run(front: &super::server::Front, copy: &Copy, progress: &Progress) -> Result<(), CopyError> {
    if copy.pull {
        let source = pull::look(front, copy, progress)?;
        if source.urmove && source.size >= native::SIZE_MIN {
            return native::run(front, copy, progress);
        }
        return pull::run(front, copy, progress, &source);
    }
    let (file, size) = push::open_source(front, copy)?;
    if size >= native::SIZE_MIN && native::probe(front, copy) {
        return native::run(front, copy, progress);
    }
    push::run(front, copy, progress, &file, size)
}

/// The copy a COPY request asks for, or why it is refused.
fn asked(req: &Request) -> Result<Copy, Answer> {
    let h = req.head;
    let (remote, pull) = match (h.header("source"), h.header("destination")) {
        (Some(s), None) => (s, true),
        (None, Some(d)) => (d, false),
        (Some(_), Some(_)) => {
            return Err(Answer::text(400, "COPY with both Source and Destination"))
        }
        (None, None) => {
            return Err(Answer::text(
                400,
                "COPY needs a Source (pull) or a Destination (push): a copy within this endpoint is not served",
            ))
        }
    };
    if let Some(c) = h.header("credential") {
        if !c.eq_ignore_ascii_case("none") {
            return Err(Answer::text(
                400,
                &format!("COPY requested an unsupported Credential type {c:?}: give the other endpoint's token in TransferHeaderAuthorization (Credential: none)"),
            ));
        }
    }
    let remote = Url::parse(remote).map_err(|e| Answer::text(400, &format!("{remote}: {e}")))?;
    let streams = match h.header("x-number-of-streams").map(str::parse::<usize>) {
        None | Some(Ok(0)) => STREAMS_DEFAULT,
        Some(Ok(n)) => n.min(STREAMS_MAX),
        Some(Err(_)) => return Err(Answer::text(400, "X-Number-Of-Streams is not a number")),
    };
    let require_checksum = h
        .header("requirechecksumverification")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    Ok(Copy {
        rel: req.rel.clone(),
        remote,
        pull,
        forward: forwarded(h),
        streams,
        require_checksum,
        replaces: h
            .header("overwrite")
            .is_none_or(|o| !o.eq_ignore_ascii_case("F")),
    })
}

/// `TransferHeaderX: v` as `X: v`.
fn forwarded(h: &super::wire::Head) -> Vec<(String, String)> {
    const PREFIX: &str = "transferheader";
    h.headers
        .iter()
        .filter(|(n, _)| n.len() > PREFIX.len() && n[..PREFIX.len()].eq_ignore_ascii_case(PREFIX))
        .map(|(n, v)| (n[PREFIX.len()..].to_string(), v.clone()))
        // The urmove-to-urmove way's own headers are this side's to set.
        .filter(|(n, _)| !n.to_ascii_lowercase().starts_with("x-urmove"))
        .collect()
}

/// Why a copy failed, as its `failure:` line says it.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The other endpoint answered with an error status.
    #[error("Remote side failed with status code {status}; error message: \"{text}\"")]
    Remote { status: u16, text: String },
    #[error(transparent)]
    Http(#[from] super::HttpError),
    /// Anything else, said for the client and the log.
    #[error("{0}")]
    Failed(String),
}

impl From<String> for CopyError {
    fn from(s: String) -> CopyError {
        CopyError::Failed(s)
    }
}

impl From<&str> for CopyError {
    fn from(s: &str) -> CopyError {
        CopyError::Failed(s.to_string())
    }
}

/// A failure the other endpoint answered with (its text cut short, no
/// control characters).
pub fn remote_failed(status: u16, body: &str) -> CopyError {
    let text: String = body.chars().filter(|c| !c.is_control()).take(300).collect();
    CopyError::Remote { status, text }
}
