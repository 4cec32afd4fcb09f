//! The WebDAV subset gfal2 and davix use on a storage endpoint: OPTIONS,
//! HEAD, GET (with a range), PUT, DELETE, MKCOL, PROPFIND (depth 0 and 1)
//! and COPY (third-party copy, in `tpc`). Every request's token is checked
//! for what it does on its path before anything is touched, and each
//! request leaves one access-log line.

use std::fs::File;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::time::Instant;

use crate::session::daemon::log::Level;

use super::auth::{Denial, Op, Who};
use super::server::{Conn, Front};
use super::wire::{self, Body, BodyKind, Head};
use super::HttpError;

/// Largest body taken by a method other than PUT (a PROPFIND's XML).
const SMALL_BODY_MAX: u64 = 64 << 10;
/// Bytes a GET reads and writes at a time.
const GET_CHUNK: usize = 1 << 20;

/// What a handler answers.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Reply,
}

/// An answer's body.
pub enum Reply {
    Empty,
    Bytes(Vec<u8>),
    /// `len` bytes of `file` from `start`.
    File {
        file: File,
        start: u64,
        len: u64,
    },
    /// Already written by the handler (a third-party copy's markers), with
    /// the bytes it wrote.
    Written(u64),
}

impl Answer {
    pub fn new(status: u16) -> Answer {
        Answer {
            status,
            headers: Vec::new(),
            body: Reply::Empty,
        }
    }

    /// A short plain-text answer (an error's reason).
    pub fn text(status: u16, text: &str) -> Answer {
        let mut a = Answer::new(status);
        a.headers
            .push(("Content-Type".into(), "text/plain; charset=utf-8".into()));
        a.body = Reply::Bytes(format!("{text}\n").into_bytes());
        a
    }

    pub fn with(mut self, name: &str, value: impl Into<String>) -> Answer {
        self.headers.push((name.to_string(), value.into()));
        self
    }
}

impl From<Denial> for Answer {
    fn from(d: Denial) -> Answer {
        let mut a = Answer::text(d.status, &d.reason);
        if let Some(c) = d.challenge {
            a.headers.push(("WWW-Authenticate".into(), c));
        }
        a
    }
}

impl From<super::path::Refused> for Answer {
    fn from(r: super::path::Refused) -> Answer {
        Answer::text(r.status, &r.reason)
    }
}

/// A request in hand: what the access log says of it.
pub struct Request<'a> {
    pub front: &'a Front,
    pub head: &'a Head,
    pub peer: SocketAddr,
    pub rel: String,
    pub who: Option<Who>,
    pub bytes_in: u64,
}

impl Request<'_> {
    /// The token's check for `op` on `rel`, remembered for the log.
    pub fn allow(&mut self, op: Op, rel: &str) -> Result<(), Answer> {
        let who = self.front.auth.check(self.head, op, rel)?;
        self.who = Some(who);
        Ok(())
    }
}

/// Answer one request; whether the connection may take another.
pub fn handle(
    front: &Front,
    conn: &mut Conn,
    head: &Head,
    peer: SocketAddr,
    started: Instant,
) -> Result<bool, HttpError> {
    let mut keep = head.keep_alive();
    let kind = match head.body_kind() {
        Ok(k) => k,
        Err(e) => {
            let a = Answer::text(400, &e.to_string());
            return finish(front, conn, head, peer, started, a, None, 0).map(|_| false);
        }
    };
    let mut req = Request {
        front,
        head,
        peer,
        rel: String::new(),
        who: None,
        bytes_in: 0,
    };
    let answer = match super::path::rel_of(&head.target) {
        Err(r) => Answer::from(r),
        Ok(rel) => {
            req.rel = rel;
            route(&mut req, conn, kind, &mut keep)
        }
    };
    // A request refused as malformed or without a good token ends its
    // connection: it may not hold one open by asking again and again.
    if matches!(answer.status, 400 | 401) {
        keep = false;
    }
    let who = req.who.clone();
    let bytes_in = req.bytes_in;
    finish(front, conn, head, peer, started, answer, who, bytes_in)?;
    Ok(keep)
}

/// The method's handler, its body read as it needs.
fn route(req: &mut Request, conn: &mut Conn, kind: BodyKind, keep: &mut bool) -> Answer {
    if req.head.method == "PUT" {
        return super::store::put(req, conn, kind, keep);
    }
    let body = match small_body(conn, kind) {
        Ok(b) => b,
        Err(a) => {
            *keep = false;
            return a;
        }
    };
    req.bytes_in = body.len() as u64;
    let result = match req.head.method.as_str() {
        "OPTIONS" => Ok(options()),
        "HEAD" => get(req, false),
        "GET" => get(req, true),
        "DELETE" => super::store::delete(req),
        "MKCOL" => super::store::mkcol(req),
        "PROPFIND" => super::propfind::propfind(req, &body),
        "COPY" => super::tpc::copy(req, conn),
        "POST" => super::tpc::native::post(req, conn),
        "MOVE" | "PROPPATCH" | "LOCK" | "UNLOCK" | "PATCH" => {
            Ok(Answer::text(405, "not supported by this endpoint").with("Allow", ALLOW))
        }
        m => Ok(Answer::text(501, &format!("{m}: not implemented"))),
    };
    result.unwrap_or_else(|a| a)
}

/// The methods this front takes.
pub const ALLOW: &str = "OPTIONS, HEAD, GET, PUT, DELETE, MKCOL, PROPFIND, COPY";

fn options() -> Answer {
    Answer::new(200)
        .with("Allow", ALLOW)
        .with("DAV", "1")
        .with("Accept-Ranges", "bytes")
        .with("Content-Length", "0")
        .with(super::tpc::native::HEADER, super::tpc::native::offered())
}

/// A body of a method other than PUT, read whole (small, or refused).
fn small_body(conn: &mut Conn, kind: BodyKind) -> Result<Vec<u8>, Answer> {
    if let BodyKind::Length(n) = kind {
        if n > SMALL_BODY_MAX {
            return Err(Answer::text(413, "a request body this large is not taken"));
        }
    }
    let mut out = Vec::new();
    let mut body = Body::new(conn, kind);
    match body.by_ref().take(SMALL_BODY_MAX + 1).read_to_end(&mut out) {
        Ok(n) if n as u64 <= SMALL_BODY_MAX && body.done() => Ok(out),
        Ok(_) => Err(Answer::text(413, "a request body this large is not taken")),
        Err(e) => Err(Answer::text(400, &format!("reading the body: {e}"))),
    }
}

/// HEAD or GET of a file (a range of it with `Range: bytes=...`).
fn get(req: &mut Request, with_body: bool) -> Result<Answer, Answer> {
    let op = if with_body { Op::Read } else { Op::Stat };
    req.allow(op, &req.rel.clone())?;
    let file = open_existing(req)?;
    let meta = file
        .metadata()
        .map_err(|e| Answer::text(500, &format!("{}: {e}", req.rel)))?;
    if meta.is_dir() {
        return Ok(Answer::new(200)
            .with("Content-Length", "0")
            .with("Content-Type", "httpd/unix-directory"));
    }
    if !meta.is_file() {
        return Err(Answer::text(
            403,
            &format!("/{}: not a regular file", req.rel),
        ));
    }
    let size = meta.len();
    let mut a = Answer::new(200)
        .with("Accept-Ranges", "bytes")
        .with(super::tpc::native::HEADER, super::tpc::native::offered())
        .with("Last-Modified", http_date(meta.mtime()))
        .with("ETag", etag(&meta));
    a.headers
        .extend(super::sums::digest_headers(req, &file, req.head));
    let (status, start, len) = match req.head.header("range").map(|r| parse_range(r, size)) {
        None | Some(Range::Ignored) => (200, 0, size),
        Some(Range::Bytes(s, e)) => (206, s, e - s),
        Some(Range::Unsatisfiable) => {
            return Err(Answer::text(416, "range not satisfiable")
                .with("Content-Range", format!("bytes */{size}")))
        }
    };
    a.status = status;
    if status == 206 {
        a.headers.push((
            "Content-Range".into(),
            format!("bytes {start}-{}/{size}", start + len - 1),
        ));
    }
    a.headers
        .push(("Content-Type".into(), "application/octet-stream".into()));
    a.headers.push(("Content-Length".into(), len.to_string()));
    if with_body {
        a.body = Reply::File { file, start, len };
    }
    Ok(a)
}

/// What the request's path names, opened to read (no link followed).
pub fn open_existing(req: &Request) -> Result<File, Answer> {
    let rel = if req.rel.is_empty() {
        "."
    } else {
        req.rel.as_str()
    };
    req.front
        .root
        .open_read(rel)
        .map_err(|e| not_found_or(&req.rel, &e))
}

/// 404 for a missing path, else 403 or 500 with the reason.
pub fn not_found_or(rel: &str, e: &std::io::Error) -> Answer {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => {
            Answer::text(404, &format!("/{rel}: not found"))
        }
        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::ELOOP) | Some(libc::EXDEV) => {
            Answer::text(403, &format!("/{rel}: {e}"))
        }
        _ => Answer::text(500, &format!("/{rel}: {e}")),
    }
}

/// A byte range asked for, against a file of `size` bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Range {
    /// `[start, end)`.
    Bytes(u64, u64),
    /// Not one range this front serves (several, or not bytes): the whole file.
    Ignored,
    Unsatisfiable,
}

/// `Range: bytes=a-b`, `bytes=a-` or `bytes=-n` (one range).
pub fn parse_range(value: &str, size: u64) -> Range {
    let Some(spec) = value.trim().strip_prefix("bytes=") else {
        return Range::Ignored;
    };
    if spec.contains(',') {
        return Range::Ignored;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return Range::Ignored;
    };
    let (a, b) = (a.trim(), b.trim());
    let parsed = match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(s), Ok(e)) if s <= e => Some((s, e.saturating_add(1).min(size))),
        (Ok(s), Err(_)) if b.is_empty() => Some((s, size)),
        (Err(_), Ok(n)) if a.is_empty() && n > 0 => Some((size.saturating_sub(n), size)),
        _ => return Range::Ignored,
    };
    match parsed {
        Some((s, e)) if s < size && s < e => Range::Bytes(s, e),
        _ => Range::Unsatisfiable,
    }
}

/// An entity tag from what changes with the file.
pub fn etag(meta: &std::fs::Metadata) -> String {
    format!(
        "\"{:x}-{:x}-{:x}\"",
        meta.ino(),
        meta.len(),
        meta.mtime() * 1_000_000_000 + meta.mtime_nsec()
    )
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
pub fn http_date(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {d:02} {} {y} {:02}:{:02}:{:02} GMT",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[(m - 1) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Write the answer and the access-log line.
#[allow(clippy::too_many_arguments)]
fn finish(
    front: &Front,
    conn: &mut Conn,
    head: &Head,
    peer: SocketAddr,
    started: Instant,
    answer: Answer,
    who: Option<Who>,
    bytes_in: u64,
) -> Result<(), HttpError> {
    let status = answer.status;
    let bytes_out = write_answer(conn, head, answer)?;
    front
        .stats
        .answered(&head.method, status, bytes_in, bytes_out);
    let who = who.map_or_else(String::new, |w| {
        format!(
            " sub={} token={} scope={}",
            super::token::printable(&w.subject),
            w.token_id,
            super::token::printable(&w.scope)
        )
    });
    (front.log)(
        Level::Info,
        &format!(
            "http {peer} {} {} {status} in={bytes_in} out={bytes_out} {:.3}s{who}",
            head.method,
            // The path only: a query may carry a token (`?authz=`).
            super::path::path_of(&head.target),
            started.elapsed().as_secs_f64()
        ),
    );
    Ok(())
}

/// The answer on the wire; the body bytes written.
fn write_answer(conn: &mut Conn, head: &Head, mut a: Answer) -> Result<u64, HttpError> {
    let io = |e| HttpError::io("answering", e);
    let w = conn.get_mut();
    let body_len = match &a.body {
        Reply::Empty => Some(0),
        Reply::Bytes(b) => Some(b.len() as u64),
        Reply::File { len, .. } => Some(*len),
        Reply::Written(n) => return Ok(*n),
    };
    if !a
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-length"))
    {
        if let Some(n) = body_len {
            a.headers.push(("Content-Length".into(), n.to_string()));
        }
    }
    a.headers.push((
        "Server".into(),
        format!("urmove/{}", env!("CARGO_PKG_VERSION")),
    ));
    wire::write_head(w, a.status, &a.headers).map_err(io)?;
    if head.method == "HEAD" {
        return Ok(0);
    }
    match a.body {
        Reply::Bytes(b) => w.write_all(&b).map_err(io).map(|()| b.len() as u64),
        Reply::File { file, start, len } => send_file(w, &file, start, len),
        _ => Ok(0),
    }
}

/// `len` bytes of `file` from `start` onto the connection.
fn send_file(w: &mut impl Write, file: &File, start: u64, len: u64) -> Result<u64, HttpError> {
    let mut buf = vec![0u8; GET_CHUNK.min(len.max(1) as usize)];
    let mut at = start;
    let end = start + len;
    while at < end {
        let want = buf.len().min((end - at) as usize);
        let n = file
            .read_at(&mut buf[..want], at)
            .map_err(|e| HttpError::io("reading a file to send", e))?;
        if n == 0 {
            // The file shrank under the GET: the connection must end short
            // rather than pretend the body whole.
            return Err(HttpError::io(
                "sending a file",
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the file shrank while sent",
                ),
            ));
        }
        w.write_all(&buf[..n])
            .map_err(|e| HttpError::io("sending a file", e))?;
        at += n as u64;
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_as_rfc_9110_says() {
        assert_eq!(parse_range("bytes=0-9", 100), Range::Bytes(0, 10));
        assert_eq!(parse_range("bytes=90-", 100), Range::Bytes(90, 100));
        assert_eq!(parse_range("bytes=-10", 100), Range::Bytes(90, 100));
        assert_eq!(parse_range("bytes=-1000", 100), Range::Bytes(0, 100));
        assert_eq!(parse_range("bytes=50-1000", 100), Range::Bytes(50, 100));
        assert_eq!(parse_range("bytes=100-", 100), Range::Unsatisfiable);
        assert_eq!(parse_range("bytes=0-1,5-6", 100), Range::Ignored);
        assert_eq!(parse_range("items=0-1", 100), Range::Ignored);
        assert_eq!(parse_range("bytes=9-1", 100), Range::Ignored);
        assert_eq!(parse_range("bytes=0-0", 0), Range::Unsatisfiable);
    }

    #[test]
    fn dates_are_imf_fixdates() {
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
    }
}
