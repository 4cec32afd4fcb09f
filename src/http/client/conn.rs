//! A connection (plain TCP or TLS over it) with its read buffer, and the
//! pool of idle kept-alive ones keyed by (scheme, host, port).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

use super::ClientOptions;
use crate::http::url::{Origin, Scheme};
use crate::http::HttpError;

/// The read buffer of a connection: a response head must fit in it.
pub(super) const BUF_SIZE: usize = 64 * 1024;

enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

/// One connection to one origin, with what was read from it but not yet
/// taken.
pub(super) struct Conn {
    stream: Stream,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    pub origin: Origin,
    /// Taken from the pool (it served a request before): a failure before
    /// any byte of the answer may be the server having closed it idle.
    pub reused: bool,
}

impl Conn {
    /// Connects to the origin (each resolved address in turn), with TLS
    /// when its scheme says so, the handshake done here so a TLS failure
    /// is said as one.
    pub fn connect(
        origin: &Origin,
        tls: Option<&Arc<ClientConfig>>,
        options: &ClientOptions,
    ) -> Result<Conn, HttpError> {
        let name = format!("{}:{}", origin.host, origin.port);
        let addrs = (origin.host.as_str(), origin.port)
            .to_socket_addrs()
            .map_err(|e| HttpError::io(format!("resolving {name}"), e))?;
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
        let mut tcp = None;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, options.connect_timeout) {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let tcp = tcp.ok_or_else(|| HttpError::io(format!("connecting to {name}"), last))?;
        let set = |r: io::Result<()>| r.map_err(|e| HttpError::io(format!("socket to {name}"), e));
        set(tcp.set_nodelay(true))?;
        set(tcp.set_read_timeout(Some(options.io_timeout)))?;
        set(tcp.set_write_timeout(Some(options.io_timeout)))?;
        let stream = match origin.scheme {
            Scheme::Http => Stream::Plain(tcp),
            Scheme::Https => Stream::Tls(Box::new(handshake(origin, tls, tcp)?)),
        };
        Ok(Conn {
            stream,
            buf: vec![0u8; BUF_SIZE].into_boxed_slice(),
            start: 0,
            end: 0,
            origin: origin.clone(),
            reused: false,
        })
    }

    fn tcp(&self) -> &TcpStream {
        match &self.stream {
            Stream::Plain(s) => s,
            Stream::Tls(s) => &s.sock,
        }
    }

    pub fn set_read_timeout(&self, timeout: Duration) -> io::Result<()> {
        self.tcp().set_read_timeout(Some(timeout))
    }

    /// What was read and not yet taken.
    pub fn buffered(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    pub fn consume(&mut self, n: usize) {
        assert!(n <= self.end - self.start);
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Reads more into the buffer (moving what is there to its front);
    /// 0 at the end of the stream or when the buffer is full.
    pub fn fill(&mut self) -> io::Result<usize> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            return Ok(0);
        }
        let n = read_stream(&mut self.stream, &mut self.buf[self.end..])?;
        self.end += n;
        Ok(n)
    }

    /// A line ending in LF (its CR LF taken off), at most `max` bytes long.
    pub fn read_line(&mut self, max: usize) -> io::Result<String> {
        loop {
            if let Some(i) = self.buffered().iter().position(|&b| b == b'\n') {
                let line = String::from_utf8_lossy(&self.buffered()[..i]);
                let line = line.trim_end_matches('\r').to_string();
                self.consume(i + 1);
                return Ok(line);
            }
            if self.buffered().len() > max {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "line too long"));
            }
            if self.fill()? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed in the middle of a line",
                ));
            }
        }
    }

    /// Whether an idle connection is still open: nothing to read and no end
    /// of stream (a server that closed it idle has sent its FIN, or a TLS
    /// alert before it).
    fn idle_and_open(&mut self) -> bool {
        if !self.buffered().is_empty() {
            return false;
        }
        if let Stream::Tls(s) = &self.stream {
            if s.conn.wants_write() {
                return false;
            }
        }
        let tcp = self.tcp();
        if tcp.set_nonblocking(true).is_err() {
            return false;
        }
        let mut byte = [0u8; 1];
        let open = matches!(tcp.peek(&mut byte), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
        tcp.set_nonblocking(false).is_ok() && open
    }
}

fn handshake(
    origin: &Origin,
    tls: Option<&Arc<ClientConfig>>,
    mut tcp: TcpStream,
) -> Result<StreamOwned<ClientConnection, TcpStream>, HttpError> {
    let config = tls.ok_or_else(|| HttpError::Tls("no TLS configuration".into()))?;
    let name = ServerName::try_from(origin.host.clone())
        .map_err(|e| HttpError::Tls(format!("{}: {e}", origin.host)))?;
    let mut conn = ClientConnection::new(config.clone(), name)
        .map_err(|e| HttpError::Tls(format!("{}: {e}", origin.host)))?;
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut tcp) {
            let what = format!("handshake with {}:{}", origin.host, origin.port);
            return Err(
                match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                    Some(tls) => HttpError::Tls(format!("{what}: {tls}")),
                    None => HttpError::io(what, e),
                },
            );
        }
    }
    Ok(StreamOwned::new(conn, tcp))
}

fn read_stream(stream: &mut Stream, out: &mut [u8]) -> io::Result<usize> {
    loop {
        let r = match stream {
            Stream::Plain(s) => s.read(out),
            Stream::Tls(s) => s.read(out),
        };
        match r {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return said_timeout(r, "no data within the read timeout"),
        }
    }
}

const WRITE_TIMEOUT: &str = "the peer took nothing within the write timeout";

/// A socket timeout is EAGAIN: said as what it is.
fn said_timeout<T>(r: io::Result<T>, why: &str) -> io::Result<T> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            Err(io::Error::new(io::ErrorKind::TimedOut, why.to_string()))
        }
        r => r,
    }
}

impl Read for Conn {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.buffered().is_empty() {
            if out.len() >= self.buf.len() {
                return read_stream(&mut self.stream, out);
            }
            if self.fill()? == 0 {
                return Ok(0);
            }
        }
        let n = out.len().min(self.buffered().len());
        out[..n].copy_from_slice(&self.buffered()[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl Write for Conn {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let r = match &mut self.stream {
            Stream::Plain(s) => s.write(data),
            Stream::Tls(s) => s.write(data),
        };
        said_timeout(r, WRITE_TIMEOUT)
    }

    fn flush(&mut self) -> io::Result<()> {
        let r = match &mut self.stream {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        };
        said_timeout(r, WRITE_TIMEOUT)
    }
}

struct Idle {
    conn: Conn,
    since: Instant,
}

/// Idle kept-alive connections by origin, the newest last.
pub(super) struct Pool {
    idle: Mutex<HashMap<Origin, Vec<Idle>>>,
    per_origin_max: usize,
    idle_max: Duration,
}

impl Pool {
    pub fn new(per_origin_max: usize, idle_max: Duration) -> Pool {
        Pool {
            idle: Mutex::new(HashMap::new()),
            per_origin_max,
            idle_max,
        }
    }

    /// The newest idle connection to the origin that is still open (those
    /// idle too long, or closed by the server, are dropped on the way).
    pub fn take(&self, origin: &Origin) -> Option<Conn> {
        loop {
            let idle = {
                let mut map = self.idle.lock().unwrap_or_else(|p| p.into_inner());
                let list = map.get_mut(origin)?;
                let idle = list.pop();
                if list.is_empty() {
                    map.remove(origin);
                }
                idle?
            };
            let mut conn = idle.conn;
            if idle.since.elapsed() < self.idle_max && conn.idle_and_open() {
                conn.reused = true;
                return Some(conn);
            }
        }
    }

    pub fn put(&self, conn: Conn) {
        let mut map = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = map.entry(conn.origin.clone()).or_default();
        if list.len() >= self.per_origin_max {
            list.remove(0);
        }
        list.push(Idle {
            conn,
            since: Instant::now(),
        });
    }

    pub fn idle_count(&self) -> usize {
        let map = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        map.values().map(Vec::len).sum()
    }
}
