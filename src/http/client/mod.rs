//! A blocking HTTP/1.1 client over TCP and rustls for the third-party copies
//! of the HTTP front (pulling from or pushing to another storage endpoint)
//! and for fetching an issuer's JWKS.
//!
//! A `Client` is cheap to clone and share between threads: it holds the TLS
//! configuration and a pool of idle kept-alive connections by (scheme, host,
//! port). A connection goes back to the pool only when its response body was
//! read to the end and the server did not say `Connection: close`. A pooled
//! connection the server closed while idle is retried once on a new one for
//! idempotent requests whose body can be sent again (or was not sent yet).
//!
//! Redirects (301, 302, 303, 307, 308) are followed up to 10 hops when the
//! body can be sent again: no body, bytes, or a reader not yet sent because
//! the server answered `Expect: 100-continue` with the redirect. 303 turns
//! into GET. **Credentials do not follow a redirect to another origin**
//! (scheme, host or port changed): `Authorization`, `Proxy-Authorization`,
//! `Cookie` and any `*Authorization` header are dropped then, unless the
//! request sets `auth_across_origins` (a caller that knows the redirect
//! target is trusted with the same token, e.g. a storage system's own
//! disk nodes). A bearer token must not reach a host it was not issued for.

mod conn;
mod ranges;
mod response;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_more;

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::ClientConfig;

use self::conn::{Conn, Pool};
pub use self::response::{is_secret, Headers, Response};
use self::response::{read_head, Head, Parts};
use super::url::{Scheme, Url};
use super::HttpError;

/// The most redirects followed for one request.
pub const REDIRECTS_MAX: usize = 10;
/// The most bytes of a redirect's body read so its connection serves again.
const REDIRECT_BODY_MAX: u64 = 64 * 1024;
/// The size of the copies of a reader body onto the connection.
const COPY_BUF_SIZE: usize = 256 * 1024;

/// Timeouts and limits of a client.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub connect_timeout: Duration,
    /// Each read and each write on a connection.
    pub io_timeout: Duration,
    /// Bodies at least this long are sent with `Expect: 100-continue`.
    pub expect_continue_min: u64,
    /// How long a `100 Continue` (or a final answer) is waited for before
    /// the body is sent anyway.
    pub continue_wait: Duration,
    pub idle_per_origin_max: usize,
    /// Idle connections older than this are not reused.
    pub idle_max: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_secs(30),
            io_timeout: Duration::from_secs(30),
            expect_continue_min: 64 * 1024,
            continue_wait: Duration::from_secs(1),
            idle_per_origin_max: 64,
            idle_max: Duration::from_secs(50),
        }
    }
}

/// A request's body.
pub enum Body<'a> {
    None,
    Bytes(&'a [u8]),
    /// Exactly `len` bytes read from `reader` (sent with Content-Length).
    Reader {
        reader: &'a mut dyn Read,
        len: u64,
    },
}

impl Body<'_> {
    fn len(&self) -> Option<u64> {
        match self {
            Body::None => None,
            Body::Bytes(b) => Some(b.len() as u64),
            Body::Reader { len, .. } => Some(*len),
        }
    }
}

/// One request: the method, URL and headers (names as the caller spells
/// them; `Host`, `Content-Length`, `Expect` and `Transfer-Encoding` are the
/// client's own and ignored if given).
pub struct Request<'a> {
    pub method: String,
    pub url: Url,
    pub headers: Vec<(String, String)>,
    pub body: Body<'a>,
    pub follow_redirects: bool,
    /// Let credentials follow a redirect to another origin (see the module).
    pub auth_across_origins: bool,
}

impl<'a> Request<'a> {
    pub fn new(method: &str, url: &Url) -> Request<'a> {
        Request {
            method: method.to_string(),
            url: url.clone(),
            headers: Vec::new(),
            body: Body::None,
            follow_redirects: true,
            auth_across_origins: false,
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn headers(mut self, headers: &[(String, String)]) -> Self {
        self.headers.extend_from_slice(headers);
        self
    }

    pub fn body(mut self, body: Body<'a>) -> Self {
        self.body = body;
        self
    }
}

/// Credentials never show.
impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("url", &self.url)
            .field("headers", &Headers(self.headers.clone()))
            .field("body_len", &self.body.len())
            .finish()
    }
}

/// The HTTP/1.1 client (see the module).
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    tls: Option<Arc<ClientConfig>>,
    options: ClientOptions,
    pool: Arc<Pool>,
}

/// A failed exchange, and whether it may be tried again on a new connection.
struct Failure {
    error: HttpError,
    retry: bool,
}

impl Client {
    /// A client speaking TLS with `tls` (from `tls::client_config`).
    pub fn new(tls: Arc<ClientConfig>, options: ClientOptions) -> Client {
        Client::build(Some(tls), options)
    }

    /// A client trusting the CAs given, or the system's and the grid's.
    pub fn with_cas(cas: &[PathBuf], options: ClientOptions) -> Result<Client, HttpError> {
        Ok(Client::new(super::tls::client_config(cas)?, options))
    }

    /// A client for `http://` only (an `https://` URL is an error).
    pub fn plain(options: ClientOptions) -> Client {
        Client::build(None, options)
    }

    fn build(tls: Option<Arc<ClientConfig>>, options: ClientOptions) -> Client {
        let pool = Arc::new(Pool::new(options.idle_per_origin_max, options.idle_max));
        Client {
            inner: Arc::new(Inner { tls, options, pool }),
        }
    }

    pub fn options(&self) -> &ClientOptions {
        &self.inner.options
    }

    /// Idle connections in the pool.
    pub fn idle_count(&self) -> usize {
        self.inner.pool.idle_count()
    }

    pub fn get(&self, url: &Url, headers: &[(String, String)]) -> Result<Response, HttpError> {
        self.request(Request::new("GET", url).headers(headers))
    }

    pub fn head(&self, url: &Url, headers: &[(String, String)]) -> Result<Response, HttpError> {
        self.request(Request::new("HEAD", url).headers(headers))
    }

    /// PUTs `len` bytes from `reader` (with `Expect: 100-continue` when that
    /// is at least `expect_continue_min`), following a redirect the server
    /// answers before the body is sent.
    pub fn put_reader(
        &self,
        url: &Url,
        headers: &[(String, String)],
        reader: &mut dyn Read,
        len: u64,
    ) -> Result<Response, HttpError> {
        let body = Body::Reader { reader, len };
        self.request(Request::new("PUT", url).headers(headers).body(body))
    }

    /// Sends the request, following redirects (see the module); the
    /// response is whatever status the last hop answered.
    pub fn request(&self, mut req: Request<'_>) -> Result<Response, HttpError> {
        let mut chain = vec![req.url.redacted()];
        for hop in 0..=REDIRECTS_MAX {
            let (mut response, body_sent) = self.send(&mut req)?;
            response.chain = chain.clone();
            let replayable = !matches!(req.body, Body::Reader { .. }) || !body_sent;
            let location = match response.headers.get("location") {
                Some(l) if req.follow_redirects && replayable && is_redirect(response.status) => {
                    l.to_string()
                }
                _ => return Ok(response),
            };
            if hop == REDIRECTS_MAX {
                break;
            }
            let next = req.url.join(&location)?;
            let status = response.status;
            response.discard(REDIRECT_BODY_MAX);
            if status == 303 && req.method != "HEAD" {
                req.method = "GET".into();
                req.body = Body::None;
                req.headers
                    .retain(|(n, _)| !n.eq_ignore_ascii_case("content-type"));
            }
            if next.origin() != req.url.origin() && !req.auth_across_origins {
                req.headers.retain(|(n, _)| !is_secret(n));
            }
            chain.push(next.redacted());
            req.url = next;
        }
        Err(HttpError::Malformed(format!(
            "more than {REDIRECTS_MAX} redirects: {}",
            chain.join(" -> ")
        )))
    }

    /// One request on one connection (a pooled one, or a new one when the
    /// pooled one turns out closed), and whether the body was sent.
    fn send(&self, req: &mut Request<'_>) -> Result<(Response, bool), HttpError> {
        let origin = req.url.origin();
        let inner = &self.inner;
        if origin.scheme == Scheme::Https && inner.tls.is_none() {
            return Err(HttpError::Tls(format!(
                "{}: no TLS configuration",
                origin.host
            )));
        }
        // A pooled connection's response may have had its read timeout
        // changed (`Response::set_read_timeout`).
        let pooled = inner
            .pool
            .take(&origin)
            .filter(|c| c.set_read_timeout(inner.options.io_timeout).is_ok());
        if let Some(conn) = pooled {
            match self.exchange(conn, req) {
                Ok(r) => return Ok(r),
                Err(f) if f.retry && idempotent(&req.method) => {}
                Err(f) => return Err(f.error),
            }
        }
        let conn = Conn::connect(&origin, inner.tls.as_ref(), &inner.options)?;
        self.exchange(conn, req).map_err(|f| f.error)
    }

    fn exchange(&self, mut conn: Conn, req: &mut Request<'_>) -> Result<(Response, bool), Failure> {
        let options = &self.inner.options;
        let reused = conn.reused;
        // A pooled connection the server closed fails on the first write
        // or with an end of stream before any byte of the answer.
        let stale = |error: HttpError, body_sent: bool| {
            let retry = reused && !body_sent && closed_early(&error);
            Failure { error, retry }
        };
        let body_len = req.body.len();
        let expect = body_len.is_some_and(|n| n >= options.expect_continue_min);
        let head = request_head(req, expect);
        let mut small = head.into_bytes();
        if let (Body::Bytes(b), false) = (&req.body, expect) {
            small.extend_from_slice(b);
        }
        let request = format!("{} {}", req.method, req.url.redacted());
        write_all(&mut conn, &small)
            .map_err(|e| stale(HttpError::io(format!("sending {request}"), e), false))?;
        let sent = send_rest(&mut conn, req, expect, options)
            .map_err(|(e, body_sent)| stale(e, body_sent))?;
        let (head, closing) = match sent.early {
            Some(head) => (head, true),
            None => {
                let replayable = !matches!(req.body, Body::Reader { .. });
                let head = read_final(&mut conn);
                (
                    head.map_err(|e| stale(e, sent.body_sent && !replayable))?,
                    false,
                )
            }
        };
        let body_sent = sent.body_sent;
        let parts = Parts {
            head,
            url: req.url.clone(),
            conn,
            head_request: req.method.eq_ignore_ascii_case("HEAD"),
            closing,
            pool: self.inner.pool.clone(),
        };
        let response = Response::new(parts).map_err(|error| Failure {
            error,
            retry: false,
        })?;
        Ok((response, body_sent))
    }
}

/// What became of a request's body once its head was sent.
struct Sent {
    /// A final answer the server gave before or while the body went: the
    /// connection is left owing (part of) a body and is not kept.
    early: Option<Head>,
    body_sent: bool,
}

/// Sends the body of a request whose head went: after a 100 Continue (or
/// `continue_wait` without an answer) when `expect`, unless a final answer
/// came first. A Bytes body without `expect` went with the head. An error
/// says whether the body (or part of it) was sent.
fn send_rest(
    conn: &mut Conn,
    req: &mut Request<'_>,
    expect: bool,
    options: &ClientOptions,
) -> Result<Sent, (HttpError, bool)> {
    let failed = |e, req: &Request<'_>| {
        let what = format!("sending the body of {} {}", req.method, req.url.redacted());
        (HttpError::io(what, e), true)
    };
    if !expect {
        if let Body::Reader { .. } = req.body {
            if let Err(e) = send_body(conn, &mut req.body) {
                return Err(failed(e, req));
            }
        }
        let early = None;
        return Ok(Sent {
            early,
            body_sent: true,
        });
    }
    match wait_continue(conn, options) {
        Ok(None) => {}
        Ok(Some(head)) if head.status == 100 => {}
        // A final answer before the body: the server will not read it.
        Ok(Some(head)) => {
            let early = Some(head);
            return Ok(Sent {
                early,
                body_sent: false,
            });
        }
        Err(e) => return Err((e, false)),
    }
    if let Err(e) = send_body(conn, &mut req.body) {
        // A server refusing in the middle of a body may have said why
        // before closing: that answer is the one to give.
        return match read_final(conn) {
            Ok(head) => Ok(Sent {
                early: Some(head),
                body_sent: true,
            }),
            Err(_) => Err(failed(e, req)),
        };
    }
    Ok(Sent {
        early: None,
        body_sent: true,
    })
}

fn is_redirect(status: u16) -> bool {
    matches!(status, 301 | 302 | 303 | 307 | 308)
}

fn idempotent(method: &str) -> bool {
    ["GET", "HEAD", "OPTIONS", "PROPFIND", "PUT", "DELETE"]
        .iter()
        .any(|m| method.eq_ignore_ascii_case(m))
}

/// Whether an error is a connection closed or reset before any answer.
fn closed_early(error: &HttpError) -> bool {
    use io::ErrorKind::*;
    match error {
        HttpError::Io { context, source } => {
            matches!(
                source.kind(),
                UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe
            ) && !context.contains("in a response head")
        }
        _ => false,
    }
}

fn request_head(req: &Request<'_>, expect: bool) -> String {
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\n",
        req.method,
        req.url.target,
        req.url.authority()
    );
    let own = ["host", "content-length", "expect", "transfer-encoding"];
    let mut agent = false;
    for (name, value) in &req.headers {
        if own.iter().any(|o| name.eq_ignore_ascii_case(o)) {
            continue;
        }
        agent |= name.eq_ignore_ascii_case("user-agent");
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !agent {
        head.push_str(concat!(
            "User-Agent: urmove/",
            env!("CARGO_PKG_VERSION"),
            "\r\n"
        ));
    }
    match req.body.len() {
        Some(len) => head.push_str(&format!("Content-Length: {len}\r\n")),
        None if req.method.eq_ignore_ascii_case("PUT") => head.push_str("Content-Length: 0\r\n"),
        None => {}
    }
    if expect {
        head.push_str("Expect: 100-continue\r\n");
    }
    head.push_str("\r\n");
    head
}

fn write_all(conn: &mut Conn, data: &[u8]) -> io::Result<()> {
    conn.write_all(data)?;
    conn.flush()
}

/// Waits up to `continue_wait` for the first byte of an answer; then reads
/// the head (a 100, or a final answer sent before the body).
fn wait_continue(conn: &mut Conn, options: &ClientOptions) -> Result<Option<Head>, HttpError> {
    let set = |conn: &Conn, t| {
        conn.set_read_timeout(t)
            .map_err(|e| HttpError::io("setting a socket timeout", e))
    };
    set(conn, options.continue_wait)?;
    let got = if conn.buffered().is_empty() {
        conn.fill()
    } else {
        Ok(1)
    };
    set(conn, options.io_timeout)?;
    match got {
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(HttpError::io("waiting for 100 Continue", e)),
        Ok(0) => Err(HttpError::io(
            "before a response",
            io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed"),
        )),
        Ok(_) => read_head(conn).map(Some),
    }
}

/// The final answer: heads of 1xx informational answers are passed over.
fn read_final(conn: &mut Conn) -> Result<Head, HttpError> {
    loop {
        let head = read_head(conn)?;
        if !(100..200).contains(&head.status) || head.status == 101 {
            return Ok(head);
        }
    }
}

/// Sends the body: exactly its length, a reader ending early is an error.
fn send_body(conn: &mut Conn, body: &mut Body<'_>) -> io::Result<()> {
    match body {
        Body::None => Ok(()),
        Body::Bytes(b) => write_all(conn, b),
        Body::Reader { reader, len } => {
            let mut buf = vec![0u8; COPY_BUF_SIZE];
            let mut left = *len;
            while left > 0 {
                let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                let n = match reader.read(&mut buf[..want]) {
                    Ok(0) => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!("the body's reader ended {left} bytes short"),
                        ))
                    }
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                conn.write_all(&buf[..n])?;
                left -= n as u64;
            }
            conn.flush()
        }
    }
}
