//! The HTTP front's listener: TLS connections, each on a thread of its own
//! (at most [`HttpConfig::connections_max`]), requests read one after
//! another on a kept-alive connection and handed to `dav`.

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::datapath::beneath::Root;
use crate::datapath::DirectMode;
use crate::session::daemon::log::{Level, Log};
use crate::session::link::secret::Secret;

use super::stats::HttpStats;
use super::wire;
use super::HttpError;

/// How the HTTP front runs (`recv --http` and its companions).
#[derive(Debug, Clone)]
pub struct HttpConfig {
    pub listen: SocketAddr,
    /// The certificate chain (PEM, leaf first) and its key.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// CAs a third-party copy trusts in the other endpoint (empty: the
    /// system's and the grid's).
    pub cas: Vec<PathBuf>,
    /// The token issuers file (see `token`).
    pub issuers: PathBuf,
    /// The daemon's root and state directory (its secret stamps files).
    pub root: PathBuf,
    pub state_dir: PathBuf,
    pub direct: DirectMode,
    /// Most connections open at once; past it a new one gets 503.
    pub connections_max: usize,
    /// The urmove daemon's own port beside this front (third-party copies
    /// between two urmove endpoints run on it).
    pub daemon: SocketAddr,
}

/// A connection's idle time between requests before it is closed.
const IDLE: Duration = Duration::from_secs(60);
/// Time to finish a TLS handshake and a request head.
const HANDSHAKE: Duration = Duration::from_secs(15);
/// A request body left unread up to this much is drained to keep the
/// connection; more closes it.
pub const DRAIN_MAX: u64 = 1 << 20;

/// What every connection shares.
pub struct Front {
    pub config: HttpConfig,
    pub tls: Arc<rustls::ServerConfig>,
    pub root: Root,
    pub secret: Secret,
    pub log: Log,
    pub stats: Arc<HttpStats>,
    pub auth: super::auth::Auth,
    pub client: super::client::Client,
    open: AtomicUsize,
    pending: Arc<PendingByAddress>,
}

type Tls = rustls::StreamOwned<rustls::ServerConnection, super::deadline::Deadlined>;
/// A connection as the handlers see it: reads buffered, writes through.
pub type Conn = BufReader<Tls>;

impl Front {
    /// Everything the front needs, read and checked before it listens.
    pub fn new(config: HttpConfig, log: Log, stats: Arc<HttpStats>) -> Result<Front, HttpError> {
        let tls = super::tls::server_config(&config.cert, &config.key)?;
        let root = Root::open_for_writing(&config.root)
            .map_err(|e| HttpError::io(format!("opening the root {}", config.root.display()), e))?;
        let secret = Secret::load_or_create(&config.state_dir).map_err(|e| {
            HttpError::io(
                format!("the state directory {}", config.state_dir.display()),
                e,
            )
        })?;
        let client = super::client::Client::new(
            super::tls::client_config(&config.cas)?,
            super::client::ClientOptions::default(),
        );
        let auth = super::auth::Auth::load(&config.issuers, &client)?;
        Ok(Front {
            config,
            tls,
            root,
            secret,
            log,
            stats,
            auth,
            client,
            open: AtomicUsize::new(0),
            pending: Arc::default(),
        })
    }
}

/// Bind, then serve until `stop` is raised; `on_listening` gets the bound
/// address.
pub fn serve(
    front: Front,
    stop: &AtomicBool,
    on_listening: &mut dyn FnMut(SocketAddr),
) -> Result<(), HttpError> {
    let listener = TcpListener::bind(front.config.listen)
        .map_err(|e| HttpError::io(format!("--http {}", front.config.listen), e))?;
    let bound = listener
        .local_addr()
        .map_err(|e| HttpError::io("--http", e))?;
    on_listening(bound);
    let front = Arc::new(front);
    while !stop.load(Ordering::Relaxed) {
        if !crate::datapath::sys::wait_readable(std::os::fd::AsRawFd::as_raw_fd(&listener), 200) {
            continue;
        }
        match listener.accept() {
            Ok((s, peer)) => admit(&front, s, peer),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                (front.log)(Level::Warn, &format!("http: accepting: {e}"));
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    Ok(())
}

/// A connection on a thread of its own, or refused past the limits (all
/// connections, and those of its address without a request yet).
fn admit(front: &Arc<Front>, s: TcpStream, peer: SocketAddr) {
    let Some(pending) = front.pending.take(peer.ip()) else {
        return; // dropped at once: the address holds enough idle ones
    };
    if front.open.fetch_add(1, Ordering::AcqRel) >= front.config.connections_max {
        front.open.fetch_sub(1, Ordering::AcqRel);
        (front.log)(
            Level::Warn,
            &format!(
                "http {peer}: refused, {} connections open (max)",
                front.config.connections_max
            ),
        );
        return; // dropped: the client sees the connection close
    }
    let mine = Arc::clone(front);
    let spawned = std::thread::Builder::new()
        .name("urmove-http".into())
        .spawn(move || {
            if let Err(e) = connection(&mine, s, peer, pending) {
                if !quiet(&e) {
                    (mine.log)(Level::Info, &format!("http {peer}: {e}"));
                }
            }
            mine.open.fetch_sub(1, Ordering::AcqRel);
        });
    if let Err(e) = spawned {
        // The thread never ran (its closure, the stream with it, dropped).
        front.open.fetch_sub(1, Ordering::AcqRel);
        (front.log)(Level::Warn, &format!("http {peer}: no thread for it: {e}"));
    }
}

/// Errors of a connection not worth a log line: the peer went away.
fn quiet(e: &HttpError) -> bool {
    match e {
        HttpError::Io { source, .. } => matches!(
            source.kind(),
            std::io::ErrorKind::UnexpectedEof
                | std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::BrokenPipe
                | std::io::ErrorKind::WouldBlock
                | std::io::ErrorKind::TimedOut
        ),
        _ => false,
    }
}

/// One connection: its handshake, then request after request.
fn connection(
    front: &Front,
    s: TcpStream,
    peer: SocketAddr,
    pending: Pending,
) -> Result<(), HttpError> {
    let _ = s.set_nodelay(true);
    s.set_write_timeout(Some(IDLE))
        .map_err(|e| HttpError::io("a connection", e))?;
    let tls = rustls::ServerConnection::new(Arc::clone(&front.tls))
        .map_err(|e| HttpError::Tls(e.to_string()))?;
    let mut sock = super::deadline::Deadlined::new(s, IDLE);
    // The handshake and the first head within HANDSHAKE, each later head
    // within IDLE of the answer before it, however the bytes trickle.
    sock.set_deadline(Some(Instant::now() + HANDSHAKE));
    let mut conn: Conn = BufReader::with_capacity(256 << 10, rustls::StreamOwned::new(tls, sock));
    let mut pending = Some(pending);
    loop {
        let head = match wire::read_head(&mut conn) {
            Ok(Some(h)) => h,
            Ok(None) => return Ok(()),
            Err(HttpError::Malformed(m)) => {
                let _ = answer_plain(&mut conn, 400, &m);
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        // A whole head came: the connection no longer counts as one its
        // address holds open without having asked anything.
        pending.take();
        conn.get_mut().sock.set_deadline(None);
        let started = Instant::now();
        let keep = super::dav::handle(front, &mut conn, &head, peer, started)?;
        conn.get_mut()
            .flush()
            .map_err(|e| HttpError::io("answering", e))?;
        if !keep {
            conn.get_mut().conn.send_close_notify();
            let _ = conn.get_mut().flush();
            return Ok(());
        }
        conn.get_mut()
            .sock
            .set_deadline(Some(Instant::now() + IDLE));
    }
}

/// Connections an address holds that have not sent a whole request head
/// yet, at most [`PENDING_PER_ADDRESS`] (IPv6 counted by /64): a client
/// holding sockets open without asking anything shuts out nobody else.
#[derive(Default)]
pub struct PendingByAddress(Mutex<HashMap<IpAddr, usize>>);

/// Of one address, connections without a whole request head yet.
pub const PENDING_PER_ADDRESS: usize = 32;

/// One connection's place among its address's pending ones, given back
/// when it drops.
pub struct Pending {
    table: Arc<PendingByAddress>,
    key: IpAddr,
}

impl PendingByAddress {
    fn key(ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V4(_) => ip,
            IpAddr::V6(v6) => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        }
    }

    /// A place for a connection from `ip`, or None past the limit.
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Option<Pending> {
        let key = Self::key(ip);
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = t.entry(key).or_default();
        if *n >= PENDING_PER_ADDRESS {
            return None;
        }
        *n += 1;
        Some(Pending {
            table: Arc::clone(self),
            key,
        })
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut t = self.table.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = t.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                t.remove(&self.key);
            }
        }
    }
}

/// A short plain-text answer that closes the connection.
fn answer_plain(conn: &mut Conn, status: u16, text: &str) -> std::io::Result<()> {
    let body = format!("{text}\n");
    let headers = vec![
        (
            "Content-Type".to_string(),
            "text/plain; charset=utf-8".to_string(),
        ),
        ("Content-Length".to_string(), body.len().to_string()),
        ("Connection".to_string(), "close".to_string()),
    ];
    let w = conn.get_mut();
    wire::write_head(w, status, &headers)?;
    w.write_all(body.as_bytes())?;
    w.flush()
}
