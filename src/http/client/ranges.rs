//! A parallel ranged GET: streams each taking the next chunk of a file
//! with `Range: bytes=a-b` on their own kept-alive connections, handing
//! each piece to a sink at its offset as it arrives.

use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;

use super::{is_secret, Client, Request, Response};
use crate::http::url::Url;
use crate::http::HttpError;

/// The most bytes handed to the sink at once.
const PIECE_SIZE: usize = 1024 * 1024;
/// The most streams of one ranged GET.
pub const STREAMS_MAX: usize = 256;

/// What every stream of one ranged GET shares.
struct Job<'a> {
    client: &'a Client,
    url: Url,
    headers: Vec<(String, String)>,
    size: u64,
    chunk: u64,
    /// The first range's entity tag: every other range must carry the
    /// same (when it names one), or the file changed while copied.
    etag: Option<String>,
    next: AtomicU64,
    failed: AtomicBool,
    sink: &'a (dyn Fn(u64, &[u8]) -> io::Result<()> + Sync),
}

impl Client {
    /// GETs the `size` bytes of `url` over up to `streams` connections,
    /// each asking for the next `chunk` bytes in turn, and hands every piece
    /// to `sink(offset, bytes)` in order within its chunk (chunks arrive in
    /// any order across streams). A server answering the first range with
    /// 200 and the whole file is read on one stream instead. Each range's
    /// answer must be 206 with the `Content-Range` asked for; a body cut
    /// short is an error, never a short success. Returns the bytes given
    /// to the sink (`size` on success). The first request follows
    /// redirects; the other chunks go straight to where it ended (with
    /// credentials only if that is the same origin), following any further
    /// redirect by the same rules.
    pub fn get_ranges(
        &self,
        url: &Url,
        size: u64,
        streams: usize,
        chunk: u64,
        headers: &[(String, String)],
        sink: &(dyn Fn(u64, &[u8]) -> io::Result<()> + Sync),
    ) -> Result<u64, HttpError> {
        if size == 0 {
            let mut response = self.get(url, headers)?.error_for_status()?;
            return deliver(&mut response, 0, 0, sink).map(|()| 0);
        }
        let chunk = chunk.max(1);
        let first_len = chunk.min(size);
        let range = format!("bytes=0-{}", first_len - 1);
        let req = Request::new("GET", url)
            .headers(headers)
            .header("Range", &range);
        let mut first = self.request(req)?;
        if first.status == 200 {
            if let Some(len) = first.headers.get("content-length") {
                if len != size.to_string() {
                    return Err(HttpError::Malformed(format!(
                        "{}: {len} bytes where {size} were expected",
                        first.url.redacted()
                    )));
                }
            }
            deliver(&mut first, 0, size, sink)?;
            return Ok(size);
        }
        check_range(&first, 0, first_len, size)?;
        let mut headers = headers.to_vec();
        if first.url.origin() != url.origin() {
            headers.retain(|(n, _)| !is_secret(n));
        }
        let job = Job {
            client: self,
            url: first.url.clone(),
            headers,
            size,
            chunk,
            etag: first.headers.get("etag").map(str::to_string),
            next: AtomicU64::new(first_len),
            failed: AtomicBool::new(false),
            sink,
        };
        let chunks = size.div_ceil(chunk);
        let streams = streams.clamp(1, STREAMS_MAX).min(chunks as usize);
        thread::scope(|scope| {
            let others: Vec<_> = (1..streams).map(|_| scope.spawn(|| job.run())).collect();
            let mine = job.fail_on_err(deliver(&mut first, 0, first_len, sink));
            let mut result = mine.and_then(|()| job.run());
            for other in others {
                let theirs = other.join().unwrap_or_else(|_| {
                    Err(HttpError::Malformed("a ranged GET stream panicked".into()))
                });
                if result.is_ok() {
                    result = theirs;
                }
            }
            result.map(|()| size)
        })
    }
}

impl Job<'_> {
    /// Takes chunks until none is left or another stream failed.
    fn run(&self) -> Result<(), HttpError> {
        while !self.failed.load(Ordering::Relaxed) {
            let offset = self.next.fetch_add(self.chunk, Ordering::Relaxed);
            if offset >= self.size {
                return Ok(());
            }
            let len = self.chunk.min(self.size - offset);
            let got = self.one(offset, len);
            self.fail_on_err(got)?;
        }
        Ok(())
    }

    fn one(&self, offset: u64, len: u64) -> Result<(), HttpError> {
        let range = format!("bytes={offset}-{}", offset + len - 1);
        let req = Request::new("GET", &self.url)
            .headers(&self.headers)
            .header("Range", &range);
        let mut response = self.client.request(req)?;
        check_range(&response, offset, len, self.size)?;
        if let (Some(first), Some(this)) = (&self.etag, response.headers.get("etag")) {
            if first != this {
                return Err(HttpError::Malformed(format!(
                    "{}: the file changed while copied (ETag {first} then {this})",
                    response.url.redacted()
                )));
            }
        }
        deliver(&mut response, offset, len, self.sink)
    }

    fn fail_on_err(&self, r: Result<(), HttpError>) -> Result<(), HttpError> {
        if r.is_err() {
            self.failed.store(true, Ordering::Relaxed);
        }
        r
    }
}

/// A 206 whose Content-Range is the range asked for, of a file of `size`.
fn check_range(response: &Response, offset: u64, len: u64, size: u64) -> Result<(), HttpError> {
    let where_ = response.url.redacted();
    if response.status != 206 {
        return match response.status {
            200 => Err(HttpError::Malformed(format!(
                "{where_}: answered 200 to a range after 206 to the first"
            ))),
            _ => Err(response.status_error()),
        };
    }
    let end = offset + len - 1;
    let content_range = response.headers.get("content-range").unwrap_or("");
    let parsed = content_range
        .strip_prefix("bytes ")
        .and_then(|r| r.trim().split_once('/'))
        .and_then(|(span, total)| {
            let (a, b) = span.split_once('-')?;
            let total = match total {
                "*" => None,
                t => Some(t.parse::<u64>().ok()?),
            };
            Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?, total))
        });
    match parsed {
        Some((a, b, total)) if a == offset && b == end && total.is_none_or(|t| t == size) => Ok(()),
        _ => Err(HttpError::Malformed(format!(
            "{where_}: Content-Range {content_range:?} where bytes {offset}-{end}/{size} was asked"
        ))),
    }
}

/// Reads exactly `len` bytes of body, handing them to the sink in pieces
/// from `offset`, and checks the body ends there.
fn deliver(
    response: &mut Response,
    offset: u64,
    len: u64,
    sink: &(dyn Fn(u64, &[u8]) -> io::Result<()> + Sync),
) -> Result<(), HttpError> {
    let where_ = response.url.redacted();
    let io_err = |e| HttpError::io(format!("GET {where_} at {offset}"), e);
    let mut buf = vec![
        0u8;
        PIECE_SIZE
            .min(usize::try_from(len).unwrap_or(PIECE_SIZE))
            .max(1)
    ];
    let mut done = 0u64;
    while done < len {
        let want = buf
            .len()
            .min(usize::try_from(len - done).unwrap_or(usize::MAX));
        let mut filled = 0;
        while filled < want {
            match response.read(&mut buf[filled..want]) {
                Ok(0) => {
                    return Err(io_err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("body ended {} bytes short", len - done - filled as u64),
                    )))
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(e)),
            }
        }
        sink(offset + done, &buf[..filled])
            .map_err(|e| HttpError::io("the ranged GET's sink", e))?;
        done += filled as u64;
    }
    match response.read(&mut buf[..1]) {
        Ok(0) => Ok(()),
        Ok(_) => Err(HttpError::Malformed(format!(
            "{where_}: more than the {len} bytes asked for"
        ))),
        Err(e) => Err(io_err(e)),
    }
}
