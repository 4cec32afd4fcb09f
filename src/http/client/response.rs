//! Headers, a response's head, and its body read as it comes: by
//! Content-Length, chunked, or to the close. A connection goes back to the
//! pool only once its body was read to the end and the server keeps it.

use std::fmt;
use std::io::{self, BufRead, BufReader, Read};
use std::sync::Arc;

use super::conn::{Conn, Pool, BUF_SIZE};
use crate::http::url::Url;
use crate::http::HttpError;

/// The most header lines a response may have.
const HEADERS_MAX: usize = 128;
/// The longest chunk-size or trailer line.
const LINE_MAX: usize = 8 * 1024;

/// Headers as sent or received: names keep their case, repeated headers are
/// kept in order, lookups ignore case.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Headers(pub Vec<(String, String)>);

/// Whether a header carries a credential: its value is never shown (Debug,
/// errors) and it does not follow a redirect to another origin.
pub fn is_secret(name: &str) -> bool {
    ["authorization", "proxy-authorization", "cookie"]
        .iter()
        .any(|s| name.eq_ignore_ascii_case(s))
        || name.to_ascii_lowercase().ends_with("authorization")
}

impl Headers {
    /// The first value of the header.
    pub fn get(&self, name: &str) -> Option<&str> {
        let found = self.0.iter().find(|(n, _)| n.eq_ignore_ascii_case(name));
        found.map(|(_, v)| v.as_str())
    }

    /// Every value of the header, in order.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether a comma-separated header lists the token (ignoring case).
    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.get_all(name)
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    pub fn push(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.0.push((name.into(), value.into()));
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }
}

/// Credentials show as `REDACTED`.
impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(n, v)| match is_secret(n) {
                true => format!("{n}: REDACTED"),
                false => format!("{n}: {v}"),
            }))
            .finish()
    }
}

/// A response's status line and headers.
pub(super) struct Head {
    pub status: u16,
    pub reason: String,
    pub headers: Headers,
    pub http10: bool,
}

/// Reads a response head. An end of stream before its first byte is
/// `UnexpectedEof` (a kept-alive connection the server closed).
pub(super) fn read_head(conn: &mut Conn) -> Result<Head, HttpError> {
    loop {
        let mut slots = [httparse::EMPTY_HEADER; HEADERS_MAX];
        let mut parsed = httparse::Response::new(&mut slots);
        match parsed.parse(conn.buffered()) {
            Ok(httparse::Status::Complete(n)) => {
                let head = Head {
                    status: parsed.code.unwrap_or(0),
                    reason: parsed.reason.unwrap_or("").to_string(),
                    http10: parsed.version == Some(0),
                    headers: Headers(
                        parsed
                            .headers
                            .iter()
                            .map(|h| {
                                let v = String::from_utf8_lossy(h.value).trim().to_string();
                                (h.name.to_string(), v)
                            })
                            .collect(),
                    ),
                };
                conn.consume(n);
                return Ok(head);
            }
            Ok(httparse::Status::Partial) if conn.buffered().len() < BUF_SIZE => {}
            Ok(httparse::Status::Partial) => {
                return Err(HttpError::Malformed("response head too long".into()))
            }
            Err(e) => return Err(HttpError::Malformed(format!("response head: {e}"))),
        }
        let what = match conn.buffered().len() {
            0 => "before a response",
            _ => "in a response head",
        };
        match conn.fill() {
            Ok(0) => {
                let e = io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed");
                return Err(HttpError::io(what, e));
            }
            Ok(_) => {}
            Err(e) => return Err(HttpError::io(what, e)),
        }
    }
}

/// How much body is left.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Body {
    /// Read to the end.
    Done,
    Length {
        left: u64,
    },
    /// In a chunk with `left` bytes; `crlf` when a chunk's CRLF is due.
    Chunked {
        left: u64,
        crlf: bool,
    },
    /// Until the server closes.
    Close,
    /// Cut short: every later read is an error too, never an end.
    Failed,
}

/// A response: its status, headers and body (read through `Read`).
pub struct Response {
    pub status: u16,
    pub reason: String,
    pub headers: Headers,
    /// The URL that answered (the last of the redirects).
    pub url: Url,
    /// The URLs asked, redirects in order, tokens in queries redacted.
    pub chain: Vec<String>,
    conn: Option<Conn>,
    body: Body,
    keep_alive: bool,
    pool: Arc<Pool>,
}

impl fmt::Debug for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Response")
            .field("status", &self.status)
            .field("reason", &self.reason)
            .field("headers", &self.headers)
            .field("url", &self.url)
            .finish()
    }
}

/// What a response is built from.
pub(super) struct Parts {
    pub head: Head,
    pub url: Url,
    pub conn: Conn,
    /// The request was a HEAD: no body whatever the headers say.
    pub head_request: bool,
    /// The connection must not be reused (e.g. a body declared and unsent).
    pub closing: bool,
    pub pool: Arc<Pool>,
}

impl Response {
    pub(super) fn new(parts: Parts) -> Result<Response, HttpError> {
        let Parts { head, .. } = &parts;
        let h = &head.headers;
        let no_body = parts.head_request || matches!(head.status, 100..=199 | 204 | 304);
        let chunked = h
            .get_all("transfer-encoding")
            .flat_map(|v| v.split(','))
            .last()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("chunked"));
        let body = if no_body {
            Body::Done
        } else if chunked {
            Body::Chunked {
                left: 0,
                crlf: false,
            }
        } else if let Some(len) = h.get("content-length") {
            if h.get_all("content-length").any(|l| l != len) {
                return Err(HttpError::Malformed("Content-Lengths that differ".into()));
            }
            let left = len.parse::<u64>().map_err(|_| {
                HttpError::Malformed(format!("Content-Length {len:?} is not a number"))
            })?;
            Body::Length { left }
        } else {
            Body::Close
        };
        let keep_alive = !parts.closing
            && body != Body::Close
            && !h.has_token("connection", "close")
            && (!head.http10 || h.has_token("connection", "keep-alive"));
        let mut response = Response {
            status: parts.head.status,
            reason: parts.head.reason,
            headers: parts.head.headers,
            chain: vec![parts.url.redacted()],
            url: parts.url,
            conn: Some(parts.conn),
            body,
            keep_alive,
            pool: parts.pool,
        };
        if response.body == Body::Done || response.body == (Body::Length { left: 0 }) {
            response.finish();
        }
        Ok(response)
    }

    /// The error for a status outside 2xx, naming the URLs asked.
    pub fn error_for_status(self) -> Result<Response, HttpError> {
        if (200..300).contains(&self.status) {
            return Ok(self);
        }
        Err(self.status_error())
    }

    pub fn status_error(&self) -> HttpError {
        HttpError::Status {
            url: self.chain.join(" -> "),
            status: self.status,
            reason: self.reason.clone(),
        }
    }

    /// The whole body as text, refused above `max` bytes.
    pub fn text(mut self, max: u64) -> Result<String, HttpError> {
        let mut body = Vec::new();
        (&mut self)
            .take(max + 1)
            .read_to_end(&mut body)
            .map_err(|e| HttpError::io(format!("reading {}", self.url.redacted()), e))?;
        if body.len() as u64 > max {
            return Err(HttpError::Malformed(format!(
                "{}: body over {max} bytes",
                self.url.redacted()
            )));
        }
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    /// Reads a body of at most `max` bytes to its end so the connection
    /// can serve again; a longer one closes the connection instead.
    pub fn discard(mut self, max: u64) {
        let mut sink = io::sink();
        let _ = io::copy(&mut (&mut self).take(max), &mut sink);
    }

    /// The longest wait for each read of the body from now on (a marker
    /// stream's markers may come further apart than the client's
    /// `io_timeout`).
    pub fn set_read_timeout(&self, timeout: std::time::Duration) -> io::Result<()> {
        match &self.conn {
            Some(conn) => conn.set_read_timeout(timeout),
            None => Ok(()),
        }
    }

    /// The body line by line as it comes (a `text/perf-marker-stream`):
    /// each line without its line end.
    pub fn lines(self) -> io::Lines<BufReader<Response>> {
        BufReader::with_capacity(4096, self).lines()
    }

    /// The body is all read: the connection goes back to the pool when the
    /// server keeps it.
    fn finish(&mut self) {
        self.body = Body::Done;
        if let Some(conn) = self.conn.take() {
            if self.keep_alive && conn.buffered().is_empty() {
                self.pool.put(conn);
            }
        }
    }

    fn read_chunked(&mut self, out: &mut [u8], left: u64, crlf: bool) -> io::Result<usize> {
        let conn = self
            .conn
            .as_mut()
            .expect("a body being read has its connection");
        let mut left = left;
        if left == 0 {
            if crlf && !conn.read_line(LINE_MAX)?.is_empty() {
                return Err(bad_data("no CRLF after a chunk"));
            }
            let line = conn.read_line(LINE_MAX)?;
            let size = line.split(';').next().unwrap_or("").trim();
            left = u64::from_str_radix(size, 16)
                .map_err(|_| bad_data(&format!("chunk size {size:?}")))?;
            if left == 0 {
                while !conn.read_line(LINE_MAX)?.is_empty() {}
                self.finish();
                return Ok(0);
            }
        }
        let want = out.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = conn.read(&mut out[..want])?;
        if n == 0 {
            return Err(eof("a chunk"));
        }
        left -= n as u64;
        self.body = Body::Chunked { left, crlf: true };
        Ok(n)
    }
}

fn bad_data(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("chunked body: {what}"))
}

fn eof(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("connection closed in the middle of {what}"),
    )
}

/// A read that fails leaves the body failed and the connection closed: a
/// cut body never reads as a shorter whole one.
impl Read for Response {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        let r = self.read_body(out);
        if r.is_err() {
            self.conn = None;
            self.body = Body::Failed;
        }
        r
    }
}

impl Response {
    fn read_body(&mut self, out: &mut [u8]) -> io::Result<usize> {
        match self.body {
            Body::Done => Ok(0),
            Body::Failed => Err(eof("the body")),
            Body::Length { left } => {
                let want = out.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                let conn = self
                    .conn
                    .as_mut()
                    .expect("a body being read has its connection");
                let n = conn.read(&mut out[..want])?;
                if n == 0 {
                    return Err(eof(&format!("the body, {left} bytes short")));
                }
                self.body = Body::Length {
                    left: left - n as u64,
                };
                if left == n as u64 {
                    self.finish();
                }
                Ok(n)
            }
            Body::Chunked { left, crlf } => self.read_chunked(out, left, crlf),
            Body::Close => {
                let conn = self
                    .conn
                    .as_mut()
                    .expect("a body being read has its connection");
                let n = conn.read(out)?;
                if n == 0 {
                    self.body = Body::Done;
                    self.conn = None;
                }
                Ok(n)
            }
        }
    }
}
