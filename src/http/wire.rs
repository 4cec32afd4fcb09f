//! HTTP/1.1 on the server's side of a connection: a request's head read
//! with `httparse`, its body (by length or chunked) as a reader, and a
//! response's head and chunked body written.

use std::io::{self, BufRead, Read, Write};

use super::HttpError;

/// Longest request head taken (request line and headers).
pub const HEAD_BYTES_MAX: usize = 64 << 10;
/// Most headers one request may carry.
const HEADERS_MAX: usize = 96;

/// A request's line and headers.
#[derive(Clone)]
pub struct Head {
    pub method: String,
    /// The request target as sent (path and query, percent-encoded).
    pub target: String,
    /// Whether the client spoke HTTP/1.0 (no keep-alive by default).
    pub http10: bool,
    pub headers: Vec<(String, String)>,
}

impl std::fmt::Debug for Head {
    /// Headers that carry credentials are shown without their values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(n, v)| {
                let v = if is_secret(n) {
                    "<redacted>"
                } else {
                    v.as_str()
                };
                (n.as_str(), v)
            })
            .collect();
        f.debug_struct("Head")
            .field("method", &self.method)
            .field("target", &self.target)
            .field("headers", &shown)
            .finish()
    }
}

/// Whether a header's value is a credential (never logged or shown): the
/// client's rule, one for both sides.
pub use super::client::is_secret;

impl Head {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    }

    /// Whether the connection stays open after this request's response.
    pub fn keep_alive(&self) -> bool {
        match self.header("connection").map(str::to_ascii_lowercase) {
            Some(c) if c.contains("close") => false,
            Some(c) if c.contains("keep-alive") => true,
            _ => !self.http10,
        }
    }

    /// How the body is framed.
    pub fn body_kind(&self) -> Result<BodyKind, HttpError> {
        if let Some(te) = self.header("transfer-encoding") {
            if te.eq_ignore_ascii_case("chunked") {
                return Ok(BodyKind::Chunked);
            }
            return Err(HttpError::Malformed(format!(
                "Transfer-Encoding {te} is not taken (only chunked)"
            )));
        }
        match self.header("content-length") {
            None => Ok(BodyKind::Length(0)),
            Some(v) => v
                .parse::<u64>()
                .map(BodyKind::Length)
                .map_err(|_| HttpError::Malformed(format!("Content-Length {v:?} is not a number"))),
        }
    }
}

/// How a request's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    Length(u64),
    Chunked,
}

/// Read one request head; `Ok(None)` when the peer closed cleanly before
/// sending any byte of one.
pub fn read_head<R: BufRead>(r: &mut R) -> Result<Option<Head>, HttpError> {
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    loop {
        let n = read_line_into(r, &mut buf)?;
        if n == 0 {
            if buf.is_empty() {
                return Ok(None);
            }
            return Err(HttpError::Malformed(
                "the connection closed mid-head".into(),
            ));
        }
        // Leading empty lines before a request line are tolerated (RFC 9112 2.2).
        if buf == b"\r\n" || buf == b"\n" {
            buf.clear();
            continue;
        }
        if buf.ends_with(b"\r\n\r\n") || buf.ends_with(b"\n\n") {
            break;
        }
        if buf.len() > HEAD_BYTES_MAX {
            return Err(HttpError::Malformed(format!(
                "a request head longer than {HEAD_BYTES_MAX} bytes"
            )));
        }
    }
    parse_head(&buf).map(Some)
}

fn read_line_into<R: BufRead>(r: &mut R, buf: &mut Vec<u8>) -> Result<usize, HttpError> {
    let mut limited = r.take((HEAD_BYTES_MAX + 2 - buf.len().min(HEAD_BYTES_MAX)) as u64);
    limited
        .read_until(b'\n', buf)
        .map_err(|e| HttpError::io("reading a request", e))
}

fn parse_head(buf: &[u8]) -> Result<Head, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => {
            return Err(HttpError::Malformed("an incomplete request head".into()))
        }
        Err(e) => return Err(HttpError::Malformed(format!("a request head: {e}"))),
    }
    let headers = req
        .headers
        .iter()
        .map(|h| {
            let v = String::from_utf8_lossy(h.value).into_owned();
            (h.name.to_string(), v)
        })
        .collect();
    Ok(Head {
        method: req.method.unwrap_or("").to_string(),
        target: req.path.unwrap_or("").to_string(),
        http10: req.version == Some(0),
        headers,
    })
}

/// A request body: exactly its bytes, then end of file.
pub struct Body<'a, R: BufRead> {
    inner: &'a mut R,
    state: BodyState,
}

enum BodyState {
    /// Bytes left of a body of known length.
    Left(u64),
    /// Bytes left of the current chunk (0: the next chunk's size line).
    Chunk(u64),
    Done,
}

impl<'a, R: BufRead> Body<'a, R> {
    pub fn new(inner: &'a mut R, kind: BodyKind) -> Self {
        let state = match kind {
            BodyKind::Length(0) => BodyState::Done,
            BodyKind::Length(n) => BodyState::Left(n),
            BodyKind::Chunked => BodyState::Chunk(0),
        };
        Body { inner, state }
    }

    /// Read and drop what is left, so the connection can take the next
    /// request; false when more than `max` bytes were left (close it instead).
    pub fn drain(&mut self, max: u64) -> bool {
        let mut sink = io::sink();
        match io::copy(&mut self.take(max + 1), &mut sink) {
            Ok(n) => n <= max && matches!(self.state, BodyState::Done),
            Err(_) => false,
        }
    }

    /// Whether every byte of the body was read.
    pub fn done(&self) -> bool {
        matches!(self.state, BodyState::Done)
    }

    fn next_chunk(&mut self) -> io::Result<u64> {
        let mut line = Vec::new();
        self.inner
            .by_ref()
            .take(4096)
            .read_until(b'\n', &mut line)?;
        let text = String::from_utf8_lossy(&line);
        let size = text.trim().split(';').next().unwrap_or("").trim();
        let n = u64::from_str_radix(size, 16)
            .map_err(|_| bad(format!("a chunk size line {:?}", text.trim())))?;
        if n == 0 {
            // Trailers, up to the empty line.
            loop {
                line.clear();
                let got = self
                    .inner
                    .by_ref()
                    .take(8192)
                    .read_until(b'\n', &mut line)?;
                if got == 0 || line == b"\r\n" || line == b"\n" {
                    break;
                }
            }
        }
        Ok(n)
    }

    fn end_chunk(&mut self) -> io::Result<()> {
        let mut crlf = Vec::new();
        self.inner.by_ref().take(2).read_until(b'\n', &mut crlf)?;
        if crlf != b"\r\n" && crlf != b"\n" {
            return Err(bad("a chunk not followed by CRLF".into()));
        }
        Ok(())
    }
}

fn bad(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl<R: BufRead> Read for Body<'_, R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.state {
                BodyState::Done => return Ok(0),
                BodyState::Left(left) => {
                    let want = out.len().min(left.min(usize::MAX as u64) as usize);
                    let n = self.inner.read(&mut out[..want])?;
                    if n == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!("the body ended {left} bytes short"),
                        ));
                    }
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        BodyState::Done
                    } else {
                        BodyState::Left(left)
                    };
                    return Ok(n);
                }
                BodyState::Chunk(0) => {
                    let n = self.next_chunk()?;
                    self.state = if n == 0 {
                        BodyState::Done
                    } else {
                        BodyState::Chunk(n)
                    };
                }
                BodyState::Chunk(left) => {
                    let want = out.len().min(left.min(usize::MAX as u64) as usize);
                    let n = self.inner.read(&mut out[..want])?;
                    if n == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the body ended mid-chunk",
                        ));
                    }
                    let left = left - n as u64;
                    if left == 0 {
                        self.end_chunk()?;
                    }
                    self.state = BodyState::Chunk(left);
                    return Ok(n);
                }
            }
        }
    }
}

/// The reason phrase of a status this front answers with.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        207 => "Multi-Status",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        423 => "Locked",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        507 => "Insufficient Storage",
        _ => "",
    }
}

/// Write a response head: the status line, `headers`, then the end.
pub fn write_head<W: Write>(
    w: &mut W,
    status: u16,
    headers: &[(String, String)],
) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    for (n, v) in headers {
        // A value is ours or a checked echo; a line break would split it.
        let v: String = v.chars().filter(|c| *c != '\r' && *c != '\n').collect();
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    w.write_all(head.as_bytes())
}

/// A chunked response body: each write a chunk, `finish` the last.
pub struct Chunked<'a, W: Write> {
    inner: &'a mut W,
}

impl<'a, W: Write> Chunked<'a, W> {
    pub fn new(inner: &'a mut W) -> Self {
        Chunked { inner }
    }

    /// The last (empty) chunk.
    pub fn finish(self) -> io::Result<()> {
        self.inner.write_all(b"0\r\n\r\n")?;
        self.inner.flush()
    }
}

impl<W: Write> Write for Chunked<'_, W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        self.inner
            .write_all(format!("{:x}\r\n", data.len()).as_bytes())?;
        self.inner.write_all(data)?;
        self.inner.write_all(b"\r\n")?;
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Head {
        read_head(&mut io::BufReader::new(text.as_bytes()))
            .unwrap()
            .unwrap()
    }

    #[test]
    fn a_head_reads_with_its_headers_and_body_framing() {
        let h = head("PUT /a/b%20c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nAuthorization: Bearer SECRETTOKEN\r\n\r\nhello");
        assert_eq!(h.method, "PUT");
        assert_eq!(h.target, "/a/b%20c");
        assert_eq!(h.body_kind().unwrap(), BodyKind::Length(5));
        assert!(h.keep_alive());
        assert!(!format!("{h:?}").contains("SECRETTOKEN"));
    }

    #[test]
    fn a_chunked_body_reads_back_whole_with_trailers() {
        let text = "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: y\r\n\r\nNEXT";
        let mut r = io::BufReader::new(text.as_bytes());
        let mut out = String::new();
        Body::new(&mut r, BodyKind::Chunked)
            .read_to_string(&mut out)
            .unwrap();
        assert_eq!(out, "hello world");
        let mut rest = String::new();
        r.read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "NEXT");
    }

    #[test]
    fn a_short_body_is_an_error_never_a_short_success() {
        let mut r = io::BufReader::new("abc".as_bytes());
        let mut out = Vec::new();
        let e = Body::new(&mut r, BodyKind::Length(10))
            .read_to_end(&mut out)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let mut r = io::BufReader::new("a\r\nxyz".as_bytes());
        assert!(Body::new(&mut r, BodyKind::Chunked)
            .read_to_end(&mut out)
            .is_err());
    }

    #[test]
    fn bad_heads_are_refused() {
        for text in ["GET\r\n\r\n", "GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n"] {
            let h = read_head(&mut io::BufReader::new(text.as_bytes()));
            assert!(
                h.is_err() || h.unwrap().unwrap().body_kind().is_err(),
                "{text}"
            );
        }
        let long = format!(
            "GET / HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(HEAD_BYTES_MAX)
        );
        assert!(read_head(&mut io::BufReader::new(long.as_bytes())).is_err());
        assert!(read_head(&mut io::BufReader::new(&b""[..]))
            .unwrap()
            .is_none());
    }

    #[test]
    fn a_written_head_cannot_be_split_by_a_value() {
        let mut out = Vec::new();
        let hs = vec![("X".to_string(), "a\r\nInjected: 1".to_string())];
        write_head(&mut out, 200, &hs).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, "HTTP/1.1 200 OK\r\nX: aInjected: 1\r\n\r\n");
    }
}
