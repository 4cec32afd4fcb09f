//! The client's tests of redirects and of the parallel ranged GET.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::tests::{answer, client, read_body, Handler, Io, Seen, Server};
use super::*;

/// Answers `100 Continue` when asked, then reads the body and answers
/// 200 with its length.
fn reading(req: &Seen, io: &mut Io) -> io::Result<bool> {
    if req.headers.get("expect").is_some() {
        io.get_mut().write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        io.get_mut().flush()?;
    }
    let body = read_body(req, io)?;
    answer(io, "200 OK", "", format!("{} bytes", body.len()).as_bytes())?;
    Ok(true)
}

/// Server A redirects; server B (another origin) answers.
fn redirecting() -> (Server, Server) {
    let b = Server::start(false, Arc::new(reading));
    let b_port = b.port;
    let a = Server::start(
        false,
        Arc::new(move |req: &Seen, io: &mut Io| {
            let to = |io: &mut Io, status: &str, location: &str| {
                answer(io, status, &format!("Location: {location}\r\n"), b"moved")
            };
            let other = format!("http://127.0.0.1:{b_port}/y");
            if matches!(req.target.as_str(), "/dir/a" | "/x" | "/loop" | "/see") {
                read_body(req, io)?;
            }
            match req.target.as_str() {
                "/dir/a" => to(io, "302 Found", "b?q=1")?,
                "/x" => to(io, "307 Temporary Redirect", &other)?,
                "/loop" => to(io, "302 Found", "/loop")?,
                "/see" => to(io, "303 See Other", "/dir/b")?,
                "/put" => {
                    // Answered before the body: the connection owes it.
                    to(io, "307 Temporary Redirect", "/dir/b")?;
                    return Ok(false);
                }
                _ => return reading(req, io),
            }
            Ok(true)
        }),
    );
    (a, b)
}

fn auth() -> Vec<(String, String)> {
    vec![("Authorization".to_string(), "Bearer tok".to_string())]
}

#[test]
fn redirects_across_paths_keep_credentials_on_the_same_origin() {
    let (a, _b) = redirecting();
    let client = client(false);
    let r = client.get(&a.url(false, "/dir/a"), &auth()).unwrap();
    assert_eq!(r.url.target, "/dir/b?q=1");
    assert_eq!(r.chain.len(), 2, "{:?}", r.chain);
    assert_eq!(r.text(100).unwrap(), "0 bytes");
    let seen = a.seen();
    assert_eq!(seen[1].target, "/dir/b?q=1");
    assert_eq!(seen[1].headers.get("authorization"), Some("Bearer tok"));
    assert_eq!(
        a.conns.load(Ordering::SeqCst),
        1,
        "the redirect's connection reused"
    );
}

#[test]
fn credentials_do_not_follow_a_redirect_to_another_origin_unless_allowed() {
    let (a, b) = redirecting();
    let client = client(false);
    let r = client.get(&a.url(false, "/x"), &auth()).unwrap();
    assert_eq!((r.status, r.url.port), (200, b.port));
    r.discard(100);
    assert_eq!(b.seen()[0].headers.get("authorization"), None);
    let mut req = Request::new("GET", &a.url(false, "/x")).headers(&auth());
    req.auth_across_origins = true;
    client.request(req).unwrap().discard(100);
    assert_eq!(b.seen()[1].headers.get("authorization"), Some("Bearer tok"));
}

#[test]
fn a_put_redirected_before_its_body_follows_with_the_body_unsent() {
    let (a, _b) = redirecting();
    let client = client(false);
    let data = vec![9u8; 200_000];
    let mut reader = &data[..];
    let r = client
        .put_reader(
            &a.url(false, "/put"),
            &auth(),
            &mut reader,
            data.len() as u64,
        )
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.text(100).unwrap(), "200000 bytes");
    assert!(reader.is_empty());
    let seen = a.seen();
    assert_eq!(
        (seen[1].method.as_str(), seen[1].target.as_str()),
        ("PUT", "/dir/b")
    );
    assert_eq!(
        a.conns.load(Ordering::SeqCst),
        2,
        "the first connection owed a body"
    );
}

#[test]
fn a_303_turns_into_get_and_too_many_redirects_name_the_chain() {
    let (a, _b) = redirecting();
    let client = client(false);
    let put = Request::new("PUT", &a.url(false, "/see")).body(Body::Bytes(b"abc"));
    let r = client.request(put).unwrap();
    assert_eq!(r.text(100).unwrap(), "0 bytes");
    assert_eq!(a.seen()[1].method, "GET");
    let e = client
        .get(&a.url(false, "/loop"), &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("more than 10 redirects"), "{e}");
    assert_eq!(e.matches("/loop").count(), REDIRECTS_MAX + 1, "{e}");
    let mut req = Request::new("GET", &a.url(false, "/loop"));
    req.follow_redirects = false;
    assert_eq!(client.request(req).unwrap().status, 302);
}

/// How a ranged server misbehaves.
#[derive(Clone, Copy, PartialEq)]
enum Ranges {
    Honoured,
    Ignored,
    /// Closes halfway through ranges starting at or after this offset.
    CutFrom(u64),
    WrongRange,
}

fn ranged_server(tls: bool, data: Arc<Vec<u8>>, how: Ranges) -> Server {
    let handler: Arc<Handler> = Arc::new(move |req: &Seen, io: &mut Io| {
        let range = req.headers.get("range").and_then(|r| {
            let (a, b) = r.strip_prefix("bytes=")?.split_once('-')?;
            Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?))
        });
        let Some((a, b)) = range.filter(|_| how != Ranges::Ignored) else {
            answer(io, "200 OK", "", &data)?;
            return Ok(true);
        };
        let b = b.min(data.len() - 1);
        let shown_a = if how == Ranges::WrongRange && a > 0 {
            a + 1
        } else {
            a
        };
        let head = format!("Content-Range: bytes {shown_a}-{b}/{}\r\n", data.len());
        if let Ranges::CutFrom(from) = how {
            if a as u64 >= from {
                let w = io.get_mut();
                write!(
                    w,
                    "HTTP/1.1 206 Partial\r\n{head}Content-Length: {}\r\n\r\n",
                    b + 1 - a
                )?;
                w.write_all(&data[a..a + (b + 1 - a) / 2])?;
                w.flush()?;
                return Ok(false);
            }
        }
        answer(io, "206 Partial Content", &head, &data[a..=b])?;
        Ok(true)
    });
    Server::start(tls, handler)
}

/// A ranged GET into memory: the bytes, and the total the sink saw.
fn fetch(
    client: &Client,
    url: &Url,
    size: usize,
    streams: usize,
) -> (Result<u64, HttpError>, Vec<u8>, u64) {
    let out = Mutex::new(vec![0u8; size]);
    let progress = AtomicU64::new(0);
    let sink = |offset: u64, piece: &[u8]| -> io::Result<()> {
        let at = offset as usize;
        out.lock().unwrap()[at..at + piece.len()].copy_from_slice(piece);
        progress.fetch_add(piece.len() as u64, Ordering::SeqCst);
        Ok(())
    };
    let r = client.get_ranges(url, size as u64, streams, 1 << 20, &auth(), &sink);
    (r, out.into_inner().unwrap(), progress.into_inner())
}

fn random(len: usize) -> Arc<Vec<u8>> {
    let mut seed = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| io::Read::read_exact(&mut f, &mut seed))
        .unwrap();
    let mut x = u64::from_le_bytes(seed) | 1;
    let mut data = Vec::with_capacity(len + 8);
    while data.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.extend_from_slice(&x.to_le_bytes());
    }
    data.truncate(len);
    Arc::new(data)
}

#[test]
fn a_ranged_get_on_several_streams_reassembles_20_mib_byte_exact() {
    let size = 20 * 1024 * 1024 + 12_345;
    let data = random(size);
    let server = ranged_server(true, data.clone(), Ranges::Honoured);
    let client = client(true);
    let (r, out, progress) = fetch(&client, &server.url(true, "/big"), size, 4);
    assert_eq!(r.unwrap(), size as u64);
    assert_eq!(progress, size as u64);
    assert!(out == *data, "the bytes differ");
    let seen = server.seen();
    assert_eq!(seen.len(), 21, "one request per MiB chunk");
    assert!(seen.iter().all(|s| s.headers.get("range").is_some()));
    let conns = server.conns.load(Ordering::SeqCst);
    // Never more connections than streams (how many of them started
    // before the chunks ran out is the scheduler's).
    assert!(
        (1..=4).contains(&conns),
        "{conns} connections for 4 streams"
    );
    assert_eq!(client.idle_count(), conns, "every stream's connection kept");
}

#[test]
fn a_server_that_ignores_ranges_is_read_on_one_stream() {
    let size = 3 * 1024 * 1024 + 7;
    let data = random(size);
    let server = ranged_server(false, data.clone(), Ranges::Ignored);
    let (r, out, progress) = fetch(&client(false), &server.url(false, "/big"), size, 4);
    assert_eq!(r.unwrap(), size as u64);
    assert_eq!(progress, size as u64);
    assert!(out == *data, "the bytes differ");
    assert_eq!(server.seen().len(), 1);
}

#[test]
fn a_ranged_get_cut_short_or_answered_amiss_fails() {
    let size = 6 * 1024 * 1024;
    let data = random(size);
    for how in [
        Ranges::CutFrom(2 << 20),
        Ranges::CutFrom(0),
        Ranges::WrongRange,
    ] {
        let server = ranged_server(false, data.clone(), how);
        let (r, _, progress) = fetch(&client(false), &server.url(false, "/big"), size, 3);
        let e = r.unwrap_err().to_string();
        assert!(progress < size as u64, "{e}");
        let expected = match how {
            Ranges::WrongRange => "Content-Range",
            _ => "short",
        };
        assert!(e.contains(expected), "{e}");
    }
}

#[test]
fn a_ranged_get_of_another_size_than_the_server_has_fails() {
    let data = random(1000);
    let server = ranged_server(false, data.clone(), Ranges::Honoured);
    let (r, _, _) = fetch(&client(false), &server.url(false, "/f"), 2000, 2);
    assert!(r.unwrap_err().to_string().contains("Content-Range"));
    let server = ranged_server(false, data, Ranges::Ignored);
    let (r, _, _) = fetch(&client(false), &server.url(false, "/f"), 2000, 2);
    assert!(r.unwrap_err().to_string().contains("1000 bytes"));
}
