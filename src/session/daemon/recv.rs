//! `urmove recv`: the receiver daemon. Serves many sessions at once, each
//! confined to the root. A session is a control connection (handshake,
//! request, manifest, acks, summary) plus the data streams that prove they
//! belong to it; files arrive as `.urmove.part` and are renamed only when
//! every block arrived exactly once with a good checksum and was synced.

use crate::session::plan::filter::{Filter, Verdict};
use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::datapath::beneath::Root;
use crate::datapath::{sys, DirectMode};
use crate::protocol::control::{
    Direction, ErrorCode, Message, PieceDone, SessionRequest, REQ_CHECKSUM, REQ_ENCRYPT,
    REQ_RESUME, STREAMS_MAX,
};
use crate::protocol::handshake::{
    check_stream_proof, AuthError, Key, Proof, ServerHandshake, SessionId, SessionKeys,
};
use crate::protocol::manifest::check_path;

use super::admit::{refuse_now, Backoff, PerAddress, Throttled};
pub use super::log::{Level, Log};
use crate::protocol::seal::{frame_key, Direction as SealDirection};
use crate::session::link::conn::{fail, recv_msg, recv_small_by, send_msg, Control};
use crate::session::sink::landing::Pace;
use crate::session::sink::receive::{join, recv_manifest, Incoming, LinkPolicy, Resume, Rules};
use crate::session::SessionError;

/// How the daemon runs.
#[derive(Debug, Clone)]
pub struct RecvConfig {
    pub listen: SocketAddr,
    pub root: PathBuf,
    pub key: Key,
    pub direct: DirectMode,
    /// A client that says nothing for this long is dropped.
    pub handshake_timeout: Duration,
    /// How long a session waits for its data streams.
    pub stream_wait: Duration,
    /// Log an FDT-style `Net In` line per session this often (None: off).
    pub interval: Option<Duration>,
    /// A session whose peer sends nothing (or takes nothing) this long ends.
    pub timeout: Duration,
    pub limits: Limits,
    /// Refuse sessions that do not seal their frames.
    pub require_encryption: bool,
    /// Where the daemon keeps its secret (`STATE_DIR/secret`).
    pub state_dir: PathBuf,
    /// Keep setuid and setgid bits from the wire.
    pub keep_setid: bool,
    /// Make the device nodes a `send -D` brings (as root only).
    pub devices: bool,
    /// Symlinks whose target leaves the root: keep, skip or refuse.
    pub unsafe_links: LinkPolicy,
    /// Serve pulls only (the root may then be read-only).
    pub pull_only: bool,
    /// Take UDP tests (`bench --net --udp`) on the listen port's number.
    pub udp: bool,
    /// The longest UDP test taken (`udp_time_max`).
    pub udp_time_max: Duration,
    /// Congestion control of the data streams (it governs those it sends on).
    pub congestion: crate::datapath::tcp::Congestion,
    /// Remove parts and journals untouched this long (None or 0: keep them).
    pub part_max_age: Option<Duration>,
    /// Threads of each session's data path (`--lanes`), each with its ring.
    pub lanes: crate::session::link::lanes::Lanes,
}

/// What the daemon takes on at most; past each, it refuses with a reason.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Sessions at once.
    pub sessions: usize,
    /// Connections at once (sessions, their streams, handshakes).
    pub connections: usize,
    /// Connections not yet authenticated from one address (IPv4) or /64
    /// (IPv6) at once.
    pub unauthenticated_per_address: usize,
    /// Data streams per session.
    pub streams: u16,
    /// Entries per manifest.
    pub files: u32,
    /// Registered buffer memory of all sessions together.
    pub buffer_bytes: u64,
    /// Memory the manifests of all sessions together may take.
    pub manifest_bytes: u64,
    /// A sender below this many bytes per second (over `--timeout`, while
    /// the daemon waits for it) ends its session.
    pub min_rate_bytes_per_s: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            sessions: 64,
            connections: 1024,
            unauthenticated_per_address: 2 * 64 + 16,
            streams: 64,
            files: crate::protocol::manifest::ENTRIES_MAX,
            buffer_bytes: 4 << 30,
            manifest_bytes: 1 << 30,
            min_rate_bytes_per_s: crate::session::MIN_RATE_BYTES_PER_S,
        }
    }
}

/// How long a stopping daemon waits for running sessions to finish.
const STOP_DRAIN: Duration = Duration::from_secs(10);
/// After the drain, how long sessions get to tell their clients they end.
const CLOSING_GRACE: Duration = Duration::from_secs(2);

/// How long a session waits for another to release a file it also names.
const CLAIM_WAIT: Duration = Duration::from_secs(3);

/// What every session of the daemon shares.
struct Shared {
    registry: Mutex<HashMap<SessionId, Pending>>,
    stats: Arc<DaemonStats>,
    /// Files being received now (root-relative final names): a second
    /// session for the same file is refused, not interleaved.
    /// Ordered: a whole file's claim finds the claims of its pieces
    /// (`NAME\0K`) by range.
    claimed: Mutex<BTreeSet<String>>,
    /// The secret, link policy and inode claims every session receives by.
    rules: Rules,
    /// Manifest memory reserved by the sessions now.
    manifest_bytes: AtomicU64,
    /// Registered buffer memory all sessions may hold: `max_buffer_memory`,
    /// or the locked-memory limit when that is lower.
    buffer_budget: u64,
    /// The daemon stops and its drain time is over: sessions still
    /// receiving end now, telling their clients why.
    closing: AtomicBool,
    /// A UDP test runs (one at a time: they share the port).
    udp_busy: AtomicBool,
    /// Lines of connections that failed before they authenticated, by
    /// kind, each at most once per interval (outsiders cannot fill the log).
    preauth_lines: Mutex<HashMap<&'static str, Throttled>>,
}

impl Shared {
    /// A connection that failed before it proved it holds the key: counted
    /// apart from sessions' errors, its line throttled by kind.
    fn failed_before_auth(&self, peer: SocketAddr, e: &SessionError, log: &Log) {
        let kind = self.stats.preauth_failed(e);
        let mut lines = self.preauth_lines.lock().unwrap_or_else(|p| p.into_inner());
        lines
            .entry(kind)
            .or_default()
            .log(log, Level::Warn, &connection_failed(peer, e));
    }
}

/// Manifest memory a session holds, given back when it ends.
struct ManifestMemory<'a> {
    total: &'a AtomicU64,
    limit: u64,
    bytes: u64,
}

impl ManifestMemory<'_> {
    /// Take `bytes` more within the daemon's budget, or refuse.
    fn reserve(&mut self, bytes: u64) -> Result<(), SessionError> {
        let limit = self.limit;
        self.total
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n.saturating_add(bytes) <= limit).then_some(n + bytes)
            })
            .map_err(|in_use| {
                SessionError::local(
                    ErrorCode::TooLarge,
                    format!(
                        "the manifests of the sessions now running take {} MiB of the daemon's {} MiB (max_manifest_memory); this one needs {} MiB more: send it in parts or try later",
                        in_use >> 20,
                        limit >> 20,
                        (self.bytes + bytes).div_ceil(1 << 20)
                    ),
                )
            })?;
        self.bytes += bytes;
        Ok(())
    }
}

impl Drop for ManifestMemory<'_> {
    fn drop(&mut self) {
        self.total.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

impl Shared {
    fn manifest_memory(&self, limit: u64) -> ManifestMemory<'_> {
        ManifestMemory {
            total: &self.manifest_bytes,
            limit,
            bytes: 0,
        }
    }
}

/// The daemon's counts a [`Hold`] takes a unit of.
#[derive(Debug, Clone, Copy)]
enum Count {
    Sessions,
    Connections,
}

/// Takes one unit of a daemon count for as long as it lives. It owns its
/// share of the stats, so it travels with what it counts: a data stream's
/// connection stays counted until its session drops the stream.
struct Hold {
    stats: Arc<DaemonStats>,
    count: Count,
}

impl Hold {
    fn take(stats: &Arc<DaemonStats>, count: Count, max: usize) -> Option<Self> {
        stats
            .count(count)
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Hold {
                stats: Arc::clone(stats),
                count,
            })
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.stats.count(self.count).fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection's place among those not yet authenticated from its
/// address (`--max-unauthenticated-per-address`), given up once the peer
/// proved it holds the key (or left).
struct Unauthenticated {
    stats: Arc<DaemonStats>,
    group: IpAddr,
}

impl Unauthenticated {
    fn take(stats: &Arc<DaemonStats>, ip: IpAddr, max: usize) -> Option<Self> {
        stats
            .unauthenticated
            .try_add(ip, max)
            .map(|group| Unauthenticated {
                stats: Arc::clone(stats),
                group,
            })
    }
}

impl Drop for Unauthenticated {
    fn drop(&mut self) {
        self.stats.unauthenticated.release(self.group);
    }
}

/// Buffer memory reserved for a session.
struct Reserved<'a> {
    total: &'a AtomicU64,
    bytes: u64,
    /// Buffers the bytes hold.
    count: usize,
}

/// Streams a session's buffers are sized for, at most.
const BUFFER_STREAMS_MAX: u16 = 8;

/// Reserve a session's frame buffers within the daemon's `budget`: as many
/// as it wants, or what is left down to the fewest it works with.
fn reserve_buffers<'r>(
    registry: &'r Registry,
    req: &crate::protocol::control::SessionRequest,
) -> Result<Reserved<'r>, SessionError> {
    let block = req.block_size;
    let budget = registry.buffer_budget;
    // Streams share the buffers: past `BUFFER_STREAMS_MAX` (what a default
    // `-P auto` session carries data on at most... of its 16 open streams,
    // at first 4) more streams do not need more of them.
    let streams = req.streams.min(BUFFER_STREAMS_MAX);
    let want = crate::session::buffer_count(usize::from(streams), block, 4, 4);
    let mut count = 0;
    let total = &registry.stats.buffer_bytes;
    total
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            let left = budget.saturating_sub(n);
            count = (crate::session::BUFFERS_MIN..=want)
                .rev()
                .find(|&c| crate::session::locked_bytes(c, block) <= left)
                .unwrap_or(0);
            (count > 0).then(|| n + crate::session::locked_bytes(count, block))
        })
        .map_err(|in_use| {
            SessionError::local(
                ErrorCode::Busy,
                format!(
                    "the session needs at least {} MiB of buffers and {} of the daemon's {} MiB (max_buffer_memory, or its locked-memory limit) are in use; try later or use smaller blocks",
                    crate::session::locked_bytes(crate::session::BUFFERS_MIN, block).div_ceil(1 << 20),
                    in_use >> 20,
                    budget >> 20
                ),
            )
        })?;
    Ok(Reserved {
        total,
        bytes: crate::session::locked_bytes(count, block),
        count,
    })
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.total.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Files a session receives, claimed against other sessions.
struct Claims<'a> {
    set: &'a Mutex<BTreeSet<String>>,
    names: Vec<String>,
}

impl<'a> Claims<'a> {
    /// Claims of no name.
    fn none(set: &'a Mutex<BTreeSet<String>>) -> Self {
        Claims {
            set,
            names: Vec::new(),
        }
    }
}

impl Drop for Claims<'_> {
    fn drop(&mut self) {
        let mut set = self.set.lock().unwrap_or_else(|p| p.into_inner());
        for n in &self.names {
            set.remove(n);
        }
    }
}

/// Interval lines of one receiving session, for the daemon's log, and its
/// figures for the metrics.
struct RecvProgress<'a> {
    log: &'a Log,
    stats: &'a DaemonStats,
    id: u64,
    peer: SocketAddr,
    start: Instant,
    tracker: Option<crate::coord::IntervalTracker>,
    /// Rate intervals for the metrics when no log lines are asked for.
    metric_tracker: crate::coord::IntervalTracker,
    last_rate: Option<f64>,
    total: u64,
    /// Bytes `expected` counted as data that were done without a payload
    /// (see `Landing::unsent`).
    unsent: u64,
    expected: Option<u64>,
}

impl<'a> RecvProgress<'a> {
    fn new(
        log: &'a Log,
        stats: &'a DaemonStats,
        peer: SocketAddr,
        interval: Option<Duration>,
        expected: Option<u64>,
    ) -> Self {
        RecvProgress {
            log,
            stats,
            id: stats.begin(
                peer,
                if expected.is_some() {
                    "receive"
                } else {
                    "bench"
                },
            ),
            peer,
            start: Instant::now(),
            tracker: interval.map(|i| crate::coord::IntervalTracker::new(i.as_nanos() as u64)),
            metric_tracker: crate::coord::IntervalTracker::new(1_000_000_000),
            last_rate: None,
            total: 0,
            unsent: 0,
            expected,
        }
    }

    fn add(&mut self, bytes: u64) {
        use crate::coord::units::{rate, RateUnit};
        self.total += bytes;
        self.stats
            .bytes_received
            .fetch_add(bytes, Ordering::Relaxed);
        let now = self.start.elapsed().as_nanos() as u64;
        if let Some(iv) = self.metric_tracker.observe(now, self.total) {
            self.last_rate = Some(iv.rate_bytes_per_s);
        }
        self.stats.update(self.id, self.total, self.last_rate);
        let Some(t) = self.tracker.as_mut() else {
            return;
        };
        let Some(iv) = t.observe(now, self.total) else {
            return;
        };
        let (h, m, s) = sys::local_hms();
        let mut line = format!(
            "{}: {h:02}:{m:02}:{s:02}  Net In: {}  Avg: {}",
            self.peer,
            rate(iv.rate_bytes_per_s, RateUnit::Gbit),
            rate(iv.avg_rate_bytes_per_s, RateUnit::Gbit)
        );
        if let Some(total) = self.expected.filter(|&t| t > 0) {
            let done = self.total + self.unsent;
            let left = total.saturating_sub(done) as f64;
            let eta = if iv.avg_rate_bytes_per_s > 0.0 {
                left / iv.avg_rate_bytes_per_s
            } else {
                0.0
            };
            line += &format!(
                "  {:.1}%  ETA {}s",
                100.0 * done as f64 / total as f64,
                eta.ceil() as u64
            );
        }
        (self.log)(Level::Info, &line);
    }
}

impl Drop for RecvProgress<'_> {
    fn drop(&mut self) {
        self.stats.end(self.id);
    }
}

/// What the daemon has done and is doing, for its metrics: plain atomics
/// the sessions bump and a scrape reads.
#[derive(Debug, Default)]
pub struct DaemonStats {
    pub bytes_received: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub files_received: AtomicU64,
    pub files_sent: AtomicU64,
    pub sessions_total: AtomicU64,
    pub sessions_active: AtomicUsize,
    pub connections_open: AtomicUsize,
    /// Registered buffer memory reserved by the sessions now.
    pub buffer_bytes: AtomicU64,
    pub buffer_bytes_limit: AtomicU64,
    /// Connections refused at once because their address had
    /// `--max-unauthenticated-per-address` connections not yet authenticated.
    pub unauthenticated_refused: AtomicU64,
    /// Connections refused at once at `--max-connections`.
    pub connections_refused: AtomicU64,
    /// Connections not yet authenticated, per address group.
    unauthenticated: PerAddress,
    /// Failed sessions and refused connections, by error code: the
    /// daemon's own errors only.
    errors: Mutex<HashMap<&'static str, u64>>,
    /// Sessions the peer ended with its own `Error`, by the code it sent.
    aborted_by_peer: Mutex<HashMap<&'static str, u64>>,
    /// Connections that failed before they proved they hold the key (a
    /// stranger, a scanner, a wrong key), by error code: no session's.
    preauth_failures: Mutex<HashMap<&'static str, u64>>,
    /// Sessions running now: id -> what they moved so far.
    sessions: Mutex<HashMap<u64, SessionStat>>,
    next_id: AtomicU64,
}

/// One running session, as the metrics show it.
#[derive(Debug, Clone)]
pub struct SessionStat {
    pub peer: SocketAddr,
    pub direction: &'static str,
    pub bytes: u64,
    /// Rate of the last full interval (bytes/s), or the average so far.
    pub rate_bytes_per_s: f64,
    pub started: Instant,
}

/// One more of `key` in a tally of the metrics.
fn tally(map: &Mutex<HashMap<&'static str, u64>>, key: &'static str) {
    *map.lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(key)
        .or_default() += 1;
}

/// A tally of the metrics, sorted by key.
fn sorted(map: &Mutex<HashMap<&'static str, u64>>) -> Vec<(&'static str, u64)> {
    let mut v: Vec<_> = map
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(k, v)| (*k, *v))
        .collect();
    v.sort();
    v
}

impl DaemonStats {
    fn error(&self, code: ErrorCode) {
        tally(&self.errors, code.name());
    }

    /// Count how a session or connection failed: the peer's own `Error`
    /// (its code is its word, not the daemon's fault) apart from the
    /// daemon's errors.
    fn failed(&self, e: &SessionError) {
        match e {
            SessionError::Refused { code, .. } => tally(&self.aborted_by_peer, code.name()),
            e => self.error(e.code()),
        }
    }

    fn count(&self, count: Count) -> &AtomicUsize {
        match count {
            Count::Sessions => &self.sessions_active,
            Count::Connections => &self.connections_open,
        }
    }

    /// Failed sessions and refused connections, by error code name.
    pub fn errors(&self) -> Vec<(&'static str, u64)> {
        sorted(&self.errors)
    }

    /// Sessions the peer ended with an `Error` message, by its code name.
    pub fn aborted_by_peer(&self) -> Vec<(&'static str, u64)> {
        sorted(&self.aborted_by_peer)
    }

    /// Count a connection that failed before it authenticated, by the
    /// daemon's verdict (a stranger's own `Error` is its refusal of our
    /// challenge: counted as the code it gave); its kind.
    fn preauth_failed(&self, e: &SessionError) -> &'static str {
        let kind = match e {
            SessionError::Refused { code, .. } => code.name(),
            e => e.code().name(),
        };
        tally(&self.preauth_failures, kind);
        kind
    }

    /// Connections that failed before they authenticated, by kind.
    pub fn preauth_failures(&self) -> Vec<(&'static str, u64)> {
        sorted(&self.preauth_failures)
    }

    /// Connections open now that have not authenticated yet.
    pub fn connections_unauthenticated(&self) -> usize {
        self.unauthenticated.total()
    }

    /// The sessions running now.
    pub fn sessions(&self) -> Vec<SessionStat> {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    fn begin(&self, peer: SocketAddr, direction: &'static str) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.sessions_total.fetch_add(1, Ordering::Relaxed);
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                id,
                SessionStat {
                    peer,
                    direction,
                    bytes: 0,
                    rate_bytes_per_s: 0.0,
                    started: Instant::now(),
                },
            );
        id
    }

    fn update(&self, id: u64, bytes: u64, rate: Option<f64>) {
        if let Some(s) = self
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&id)
        {
            s.bytes = bytes;
            s.rate_bytes_per_s =
                rate.unwrap_or_else(|| bytes as f64 / s.started.elapsed().as_secs_f64().max(1e-3));
        }
    }

    fn end(&self, id: u64) {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }
}

struct Pending {
    keys: SessionKeys,
    streams: u16,
    tx: mpsc::Sender<Arrived>,
}

/// A data stream that proved it belongs to a session, on its way there
/// with its place in the connection count.
struct Arrived {
    index: u16,
    stream: TcpStream,
    conn: Hold,
}

/// A session's data streams, in index order. Each stays counted against
/// `--max-connections` until the session drops them.
struct Streams {
    streams: Vec<TcpStream>,
    _conns: Vec<Hold>,
}

impl std::ops::Deref for Streams {
    type Target = [TcpStream];

    fn deref(&self) -> &[TcpStream] {
        &self.streams
    }
}

impl<'a> IntoIterator for &'a Streams {
    type Item = &'a TcpStream;
    type IntoIter = std::slice::Iter<'a, TcpStream>;

    fn into_iter(self) -> Self::IntoIter {
        self.streams.iter()
    }
}

/// How often a session waiting for its data streams looks at its control
/// connection.
const CONTROL_WATCH_INTERVAL: Duration = Duration::from_millis(100);

type Registry = Arc<Shared>;

/// Bind, then serve until `stop` is raised. `on_listening` gets the bound
/// address (useful with port 0).
pub fn serve(
    cfg: RecvConfig,
    stop: &AtomicBool,
    log: Log,
    stats: Arc<DaemonStats>,
    on_listening: &mut dyn FnMut(SocketAddr),
) -> Result<(), SessionError> {
    let rules = startup_checks(&cfg)?;
    let buffer_budget = buffer_budget(&cfg, &log)?;
    let listener = listen(&cfg, &log)?;
    let bound = listener
        .local_addr()
        .map_err(|e| SessionError::io("listening", e))?;
    on_listening(bound);
    // Port 0 asked: UDP tests use the port it got.
    let cfg = Arc::new(RecvConfig {
        listen: bound,
        ..cfg
    });
    stats
        .buffer_bytes_limit
        .store(buffer_budget, Ordering::Relaxed);
    let registry: Registry = Arc::new(Shared {
        registry: Mutex::default(),
        stats,
        claimed: Mutex::default(),
        rules,
        manifest_bytes: AtomicU64::new(0),
        buffer_budget,
        closing: AtomicBool::new(false),
        udp_busy: AtomicBool::new(false),
        preauth_lines: Mutex::default(),
    });
    std::thread::scope(|scope| {
        if let Some(age) = cfg.part_max_age.filter(|a| !a.is_zero()) {
            let (cfg, registry, log) = (&cfg, &registry, &log);
            scope.spawn(move || sweep_parts(cfg, age, &registry.rules.claims, stop, log));
        }
        let mut door = Door::default();
        while !stop.load(Ordering::Relaxed) {
            // Wake at once for a connection, and every 200 ms to see `stop`.
            if !sys::wait_readable(std::os::fd::AsRawFd::as_raw_fd(&listener), 200) {
                continue;
            }
            match listener.accept() {
                Ok((s, peer)) => {
                    door.backoff.succeeded();
                    door.admit(s, peer, &cfg, &registry, &log);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => door.accept_failed(&e, &log),
            }
        }
    });
    drain(&registry, &log);
    Ok(())
}

/// Remove part files and journals older than `age` beneath the root, at
/// start and then every few hours, until `stop`.
fn sweep_parts(
    cfg: &RecvConfig,
    age: Duration,
    claims: &crate::session::sink::receive::InodeClaims,
    stop: &AtomicBool,
    log: &Log,
) {
    let Ok(root) = Root::open_for_writing(&cfg.root) else {
        return;
    };
    while !stop.load(Ordering::Relaxed) {
        let removed = crate::session::sink::sweep::sweep(&root, age, claims);
        if removed > 0 {
            log(
                Level::Info,
                &format!(
                    "removed {removed} part files and journals untouched for more than {} (part_max_age)",
                    crate::coord::units::duration_s(age.as_secs_f64())
                ),
            );
        }
        let until = Instant::now() + crate::session::sink::sweep::interval(age);
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Raise the descriptor limit, bind and log the address.
fn listen(cfg: &RecvConfig, log: &Log) -> Result<TcpListener, SessionError> {
    sys::raise_nofile_limit();
    let listener = TcpListener::bind(cfg.listen)
        .map_err(|e| SessionError::io(format!("listening on {}", cfg.listen), e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| SessionError::io("listening", e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| SessionError::io("listening", e))?;
    // Accepted connections inherit the listener's congestion control.
    let cc = cfg
        .congestion
        .apply(std::os::fd::AsRawFd::as_raw_fd(&listener))
        .map_err(|e| SessionError::io("congestion control (--cc, cc)", e))?
        .unwrap_or_default();
    log(
        Level::Info,
        &format!(
            "listening on {addr}, root {}, congestion control {cc}",
            cfg.root.display()
        ),
    );
    Ok(listener)
}

/// Let running sessions finish for a while; what is cut off keeps its
/// .urmove.part files and journals for --resume.
fn drain(registry: &Registry, log: &Log) {
    let active = || registry.stats.sessions_active.load(Ordering::Acquire);
    log(
        Level::Info,
        &format!(
            "stopping: no new sessions; {} running get {} to finish",
            active(),
            crate::coord::units::duration_s(STOP_DRAIN.as_secs_f64())
        ),
    );
    let wait = |limit: Duration| {
        let until = Instant::now() + limit;
        while active() > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait(STOP_DRAIN);
    // Those left are told, each by its own session, that the receiver is
    // going down, and given a moment to say it.
    registry.closing.store(true, Ordering::Release);
    wait(CLOSING_GRACE);
    let left = active();
    if left > 0 {
        log(
            Level::Warn,
            &format!(
                "stopping with {left} sessions unfinished: their .urmove.part files and journals stay for --resume"
            ),
        );
    }
}

/// The accept loop's state: how long to wait after a failed accept, and
/// the warnings that could repeat thousands of times a second, each logged
/// at most once per interval.
#[derive(Default)]
struct Door {
    backoff: Backoff,
    accept_errors: Throttled,
    unauthenticated_refusals: Throttled,
    connection_refusals: Throttled,
    spawn_errors: Throttled,
}

impl Door {
    /// `accept` failed (out of descriptors, most likely): wait before the
    /// next try, longer each time, instead of spinning on a listener that
    /// stays readable.
    fn accept_failed(&mut self, e: &std::io::Error, log: &Log) {
        let wait = self.backoff.failed();
        let hint = match e.raw_os_error() {
            Some(libc::EMFILE) | Some(libc::ENFILE) => {
                "; connections wait in the backlog until descriptors are free (raise LimitNOFILE=)"
            }
            _ => "",
        };
        self.accept_errors
            .log(log, Level::Error, &format!("accept: {e}{hint}"));
        std::thread::sleep(wait);
    }

    /// Take a new connection on a thread of its own, or refuse it at once
    /// when its address already has its share of unauthenticated
    /// connections or the daemon is at its connection limit.
    fn admit(
        &mut self,
        s: TcpStream,
        peer: SocketAddr,
        cfg: &Arc<RecvConfig>,
        registry: &Registry,
        log: &Log,
    ) {
        let stats = &registry.stats;
        let max = cfg.limits.unauthenticated_per_address;
        let Some(unauthenticated) = Unauthenticated::take(stats, peer.ip(), max) else {
            // Counted apart (unauthenticated_refused), no session's error.
            stats
                .unauthenticated_refused
                .fetch_add(1, Ordering::Relaxed);
            refuse_now(
                s,
                ErrorCode::Busy,
                format!("{max} connections from your address have not authenticated yet, the daemon's limit; finish or close them first"),
            );
            self.unauthenticated_refusals.log(
                log,
                Level::Warn,
                &format!("{peer}: refused: {max} connections from its address are not authenticated yet (--max-unauthenticated-per-address)"),
            );
            return;
        };
        let Some(conn) = Hold::take(stats, Count::Connections, cfg.limits.connections) else {
            stats.error(ErrorCode::Busy);
            stats.connections_refused.fetch_add(1, Ordering::AcqRel);
            refuse_now(
                s,
                ErrorCode::Busy,
                format!(
                    "the daemon has {} connections open, its limit; try again later",
                    cfg.limits.connections
                ),
            );
            self.connection_refusals.log(
                log,
                Level::Warn,
                &format!("{peer}: refused: connection limit reached"),
            );
            return;
        };
        let (cfg, registry, thread_log) = (Arc::clone(cfg), Arc::clone(registry), Arc::clone(log));
        let spawned = std::thread::Builder::new()
            .name("urmove-conn".into())
            .spawn(move || {
                if let Err(e) =
                    connection(s, peer, conn, unauthenticated, &cfg, &registry, &thread_log)
                {
                    registry.failed_before_auth(peer, &e, &thread_log);
                }
            });
        // Without a thread the connection (and its holds) is dropped.
        if let Err(e) = spawned {
            self.spawn_errors.log(
                log,
                Level::Error,
                &format!("{peer}: dropped: no thread for it: {e}"),
            );
        }
    }
}

/// The log line of a connection that failed before a session started:
/// a client without the key (or speaking another version) is the
/// daemon's refusal, not the peer's.
fn connection_failed(peer: SocketAddr, e: &SessionError) -> String {
    match e {
        SessionError::Auth(AuthError::BadProof) => {
            format!("refused a client from {peer}: wrong key (it does not hold this daemon's key)")
        }
        SessionError::Auth(e) => format!("refused a client from {peer}: {e}"),
        e => format!("{peer}: {e}"),
    }
}

/// How long an unauthenticated peer may take from connecting to proving it
/// holds the key (Hello to Auth, or a data stream's hello), at most; a
/// shorter --handshake-timeout wins. Those are two round trips of a few
/// hundred bytes, well under a second even across an ocean, so a peer has
/// time to spare while a stranger's connection is short-lived.
const PREAUTH_WINDOW_MAX: Duration = Duration::from_secs(5);

/// A control connection that said Hello, with its deadlines: `auth_by` for
/// its proof, `request_by` for its request (--handshake-timeout from
/// connecting), and its place among the unauthenticated, given up only
/// with a good proof: one that fails keeps it until the connection closes.
struct Opening {
    hello: crate::protocol::handshake::Hello,
    auth_by: Instant,
    request_by: Instant,
    unauthenticated: Option<Unauthenticated>,
}

/// Before listening: the root opens (and takes files, unless the daemon
/// serves pulls only), the secret loads from a state directory outside the
/// root. Returns the rules every session receives by.
fn startup_checks(cfg: &RecvConfig) -> Result<Rules, SessionError> {
    let root = Root::open_for_writing(&cfg.root).map_err(|e| SessionError::io("--root", e))?;
    if !cfg.pull_only {
        check_writable(&root, &cfg.root)?;
    }
    if beneath_root(&root, &cfg.state_dir)? {
        return Err(SessionError::local(
            ErrorCode::BadRequest,
            format!(
                "--state-dir {}: is beneath the root {}, where key holders could read the secret; put it elsewhere (default /var/lib/urmove)",
                cfg.state_dir.display(),
                cfg.root.display()
            ),
        ));
    }
    let secret = crate::session::link::secret::Secret::load_or_create(&cfg.state_dir)
        .map_err(|e| SessionError::io("--state-dir", e))?;
    Ok(Rules {
        secret,
        owner: None,
        owners: crate::session::sink::receive::Owners::Own,
        ids: Arc::default(),
        dry_run: false,
        follow: false,
        live_parts: false,
        keep: Default::default(),
        keep_setid: cfg.keep_setid,
        unsafe_links: cfg.unsafe_links,
        devices: crate::session::sink::receive::Devices::for_this_process(
            cfg.devices,
            "the receiver does not make device nodes: its config does not allow them (devices = true, with the daemon running as root)",
        ),
        claims: Arc::default(),
        journal_budget: Arc::new(crate::session::sink::receive::JournalBudget::new(
            crate::session::sink::receive::JOURNAL_BYTES_PER_S,
        )),
    })
}

/// `rules` for a push by the client whose owner token is `token` (zeros:
/// a client without one, whose files are always read again on a re-run).
/// Owners are the sender's where this daemon runs as root; a `--delete`
/// push's rules keep what they exclude (an empty pattern is refused).
fn owned_by(rules: &Rules, req: &SessionRequest) -> Result<Rules, SessionError> {
    let token = &req.owner;
    let owner = (*token != [0; 32]).then(|| rules.secret.mac(&[b"urmove owner", token]));
    Ok(Rules {
        owner,
        owners: crate::session::sink::receive::Owners::for_this_process(
            req.has(crate::protocol::control::REQ_NUMERIC_IDS),
        ),
        ids: Arc::default(),
        dry_run: req.has(crate::protocol::control::REQ_DRY_RUN),
        keep: filter_of(&req.filter)?,
        follow: req.has(crate::protocol::control::REQ_FOLLOW),
        live_parts: req.has(crate::protocol::control::REQ_FOLLOW)
            && req.has(crate::protocol::control::REQ_LIVE_PARTS),
        ..rules.clone()
    })
}

/// The filter of a request's rules (a pull's scan, a `--delete` push's
/// keep).
fn filter_of(rules: &[crate::protocol::control::FilterRule]) -> Result<Filter, SessionError> {
    let mut filter = Filter::default();
    for r in rules {
        let verdict = match r.include {
            true => Verdict::Include,
            false => Verdict::Exclude,
        };
        filter
            .push(verdict, &r.pattern)
            .map_err(|e| SessionError::local(ErrorCode::BadRequest, format!("filter rule {e}")))?;
    }
    Ok(filter)
}

/// The registered memory all sessions may hold: `max_buffer_memory`,
/// within the locked-memory limit (RLIMIT_MEMLOCK counts every session's
/// buffers together, unless the daemon holds CAP_IPC_LOCK). A limit that
/// cannot hold one default session (`-P auto`: buffers for
/// `BUFFER_STREAMS_MAX` streams of 4 MiB frames) refuses to start, saying
/// what to raise.
fn buffer_budget(cfg: &RecvConfig, log: &Log) -> Result<u64, SessionError> {
    let Some(limit) = crate::session::memlock_budget() else {
        return Ok(cfg.limits.buffer_bytes);
    };
    let block = 4 << 20;
    let want = crate::session::buffer_count(usize::from(BUFFER_STREAMS_MAX), block, 4, 4);
    let need = crate::session::locked_bytes(want, block);
    if limit < need {
        let kib = need.div_ceil(1024);
        return Err(SessionError::local(
            ErrorCode::BadRequest,
            format!(
                "locked memory (RLIMIT_MEMLOCK) is {} KiB and the daemon lacks CAP_IPC_LOCK: one default session (-P auto: 4 MiB frames, {want} registered buffers shared by its streams) needs {kib} KiB. Under systemd raise LimitMEMLOCK= in the unit (shipped: LimitMEMLOCK=2304M, for max_buffer_memory = 2G) or grant AmbientCapabilities=CAP_IPC_LOCK; started by hand, run `ulimit -l {kib}` first (within the hard limit, or as root)",
                limit / 1024
            ),
        ));
    }
    if limit < cfg.limits.buffer_bytes {
        log(
            Level::Warn,
            &format!(
                "buffer memory for all sessions lowered from {} MiB (max_buffer_memory) to {} MiB, the locked-memory limit (RLIMIT_MEMLOCK); raise LimitMEMLOCK= or grant CAP_IPC_LOCK for more",
                cfg.limits.buffer_bytes >> 20,
                limit >> 20
            ),
        );
    }
    Ok(limit.min(cfg.limits.buffer_bytes))
}

/// Whether `state_dir` (made first, so no link or missing part hides
/// where it is) lies in the root or beneath it: any of its directories is
/// the root itself (device and inode; a bind mount counts too).
fn beneath_root(root: &Root, state_dir: &std::path::Path) -> Result<bool, SessionError> {
    use std::os::unix::fs::MetadataExt;
    let io = |e| SessionError::io("--state-dir", e);
    crate::session::link::secret::make_state_dir(state_dir).map_err(io)?;
    let root_id = root.id().map_err(io)?;
    let state = std::fs::canonicalize(state_dir).map_err(io)?;
    Ok(state.ancestors().any(|dir| {
        std::fs::metadata(dir).is_ok_and(|m| (m.dev(), m.ino()) == (root_id.dev, root_id.ino))
    }))
}

/// Whether the daemon can create files in its root: a probe file (under a
/// reserved name no key holder can reach) is made and removed.
fn check_writable(root: &Root, path: &std::path::Path) -> Result<(), SessionError> {
    let name = format!(
        ".urmove-probe-{}{}",
        std::process::id(),
        crate::session::PART_SUFFIX
    );
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
    match root.open_file(&name, flags, 0o600) {
        Ok(_) => {
            let _ = root.unlink(&name);
            Ok(())
        }
        Err(e) => Err(SessionError::local(
            ErrorCode::BadRequest,
            format!(
                "--root {}: this daemon cannot create files there ({e}); make it writable for the daemon's user, or serve pulls only (--pull-only)",
                path.display()
            ),
        )),
    }
}

fn connection(
    s: TcpStream,
    peer: SocketAddr,
    conn: Hold,
    unauthenticated: Unauthenticated,
    cfg: &RecvConfig,
    registry: &Registry,
    log: &Log,
) -> Result<(), SessionError> {
    s.set_nonblocking(false)
        .map_err(|e| SessionError::io("socket", e))?;
    s.set_nodelay(true)
        .map_err(|e| SessionError::io("socket", e))?;
    let mut s = Control::new(s);
    // Until it has authenticated, a peer gets small messages and one short
    // deadline for all of them, however slowly its bytes trickle in.
    let accepted = Instant::now();
    let auth_by = accepted + cfg.handshake_timeout.min(PREAUTH_WINDOW_MAX);
    let first = recv_small_by(&mut s, auth_by).map_err(|e| fail(&mut s, e))?;
    match first {
        Message::Hello(hello) => {
            let opening = Opening {
                hello,
                auth_by,
                request_by: accepted + cfg.handshake_timeout,
                unauthenticated: Some(unauthenticated),
            };
            let done = control(&mut s, opening, cfg, registry, peer, log);
            drop(conn);
            done
        }
        Message::StreamHello {
            session_id,
            stream_index,
            proof,
        } => {
            let hello = (session_id, stream_index, proof);
            data_stream(s, hello, conn, unauthenticated, registry)
        }
        _ => Err(fail(
            &mut s,
            SessionError::local(
                ErrorCode::Malformed,
                "expected a handshake or a data stream",
            ),
        )),
    }
}

/// Serve a control connection's session and log how it went: once it is
/// admitted, its start, then its end or failure (counted here), each line
/// naming what it is (push, pull, bench), and a request it refused. Errors
/// before the peer authenticated are returned for the caller to count and
/// log apart.
fn control(
    s: &mut Control,
    mut opening: Opening,
    cfg: &RecvConfig,
    registry: &Registry,
    peer: SocketAddr,
    log: &Log,
) -> Result<(), SessionError> {
    // A key holder's failed request: logged and counted here.
    let refused = |s: &mut Control, e: SessionError| {
        let e = fail(s, e);
        registry.stats.failed(&e);
        log(Level::Warn, &connection_failed(peer, &e));
        Ok(())
    };
    let (keys, req) = match authenticate(s, &mut opening, cfg) {
        Ok(authenticated) => authenticated,
        Err(e) if opening.unauthenticated.is_some() => return Err(fail(s, e)),
        // It proved it holds the key.
        Err(e) => return refused(s, e),
    };
    let kind = Kind::of(&req);
    let (_session, reserved) = match admit_session(&req, cfg, registry) {
        Ok(admitted) => admitted,
        Err(e) => return refused(s, e),
    };
    log(Level::Info, &format!("{peer}: {}", kind.started(&req)));
    let started = Instant::now();
    let run = run_session(s, &req, reserved.count, &keys, cfg, registry, peer, log);
    match run {
        Ok((files, bytes)) => {
            let secs = started.elapsed().as_secs_f64();
            log(
                Level::Info,
                &format!(
                    "{peer}: {} session done: {files} files, {bytes} bytes {} in {secs:.2} s ({:.3} Gb/s)",
                    kind.name(),
                    kind.moved(),
                    bytes as f64 * 8.0 / secs.max(1e-9) / 1e9
                ),
            );
        }
        Err(e) => {
            let e = fail(s, e);
            registry.stats.failed(&e);
            log_end(log, (peer, kind), &e);
        }
    }
    Ok(())
}

/// A session that did not end as it should, in the log: a client's stop
/// (Ctrl-C) said as that, anything else as a failure.
fn log_end(log: &Log, (peer, kind): (SocketAddr, Kind), e: &SessionError) {
    match e {
        SessionError::Refused {
            code: ErrorCode::Interrupted,
            message,
        } => log(
            Level::Info,
            &format!(
                "{peer}: {} session stopped by the client: {message}",
                kind.name()
            ),
        ),
        e => log(
            Level::Warn,
            &format!("{peer}: {} session failed: {e}", kind.name()),
        ),
    }
}

/// What a session does, as its log lines name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The client sends files to the daemon.
    Push,
    /// The client fetches files from the daemon.
    Pull,
    /// `bench --net`: frames only, no files.
    Bench,
    /// `bench --net --udp`: datagrams, no data streams.
    Udp,
}

impl Kind {
    fn of(req: &SessionRequest) -> Kind {
        match req.direction {
            Direction::Pull => Kind::Pull,
            Direction::Bench | Direction::BenchReverse => Kind::Bench,
            Direction::Udp | Direction::UdpReverse => Kind::Udp,
            Direction::Push => Kind::Push,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Push => "push",
            Kind::Pull => "pull",
            Kind::Bench => "bench",
            Kind::Udp => "UDP test",
        }
    }

    /// Which way the bytes of its end line went.
    fn moved(self) -> &'static str {
        match self {
            Kind::Push => "received",
            Kind::Pull => "sent",
            Kind::Bench | Kind::Udp => "moved",
        }
    }

    /// Its start line: what, where (the peer's words, escaped by the
    /// log), on how many data streams.
    fn started(self, req: &SessionRequest) -> String {
        let streams = req.streams;
        match self {
            Kind::Push if req.has(crate::protocol::control::REQ_DRY_RUN) => format!(
                "push session started: a dry run into {:?} (it looks, writes nothing, takes no data)",
                req.path
            ),
            Kind::Push => format!(
                "push session started: into {:?}, {streams} data streams",
                req.path
            ),
            Kind::Pull if req.has(crate::protocol::control::REQ_DRY_RUN) => format!(
                "pull session started: a dry run of {:?} (it lists, sends no data)",
                req.path.split('\0').collect::<Vec<_>>()
            ),
            Kind::Pull => format!(
                "pull session started: of {:?}, {streams} data streams",
                req.path.split('\0').collect::<Vec<_>>()
            ),
            Kind::Bench => format!("bench session started: {streams} data streams"),
            Kind::Udp => format!(
                "UDP test started: {} {}",
                crate::coord::units::count(u64::from(streams), "flow"),
                if req.direction == Direction::UdpReverse {
                    "to the client"
                } else {
                    "from the client"
                }
            ),
        }
    }
}

/// A data stream's hello: session id, stream index and proof.
type StreamHello = (SessionId, u16, Proof);

/// Hand a data stream that proves it belongs to a waiting session over to
/// it, with its place in the connection count; refuse any other.
fn data_stream(
    mut s: Control,
    (session_id, index, proof): StreamHello,
    conn: Hold,
    unauthenticated: Unauthenticated,
    registry: &Registry,
) -> Result<(), SessionError> {
    let reg = registry.registry.lock().unwrap_or_else(|p| p.into_inner());
    let pending = reg
        .get(&session_id)
        .filter(|p| index < p.streams && check_stream_proof(&p.keys, index, &proof));
    match pending {
        Some(p) => {
            drop(unauthenticated);
            let _ = p.tx.send(Arrived {
                index,
                stream: s.into_tcp(),
                conn,
            });
            Ok(())
        }
        None => {
            drop(reg);
            Err(fail(
                &mut s,
                SessionError::local(
                    ErrorCode::AuthFailed,
                    "data stream refused: it does not belong to a session",
                ),
            ))
        }
    }
}

fn random<const N: usize>() -> Result<[u8; N], SessionError> {
    let mut b = [0u8; N];
    sys::random_bytes(&mut b).map_err(|e| SessionError::io("random bytes", e))?;
    Ok(b)
}

/// The handshake after a Hello: challenge, the peer's proof by `auth_by`
/// (its place among the unauthenticated ends with a good one), welcome,
/// then its request by `request_by`; the session's own timeout applies
/// after it.
fn authenticate(
    s: &mut Control,
    opening: &mut Opening,
    cfg: &RecvConfig,
) -> Result<(SessionKeys, SessionRequest), SessionError> {
    let mut hs = ServerHandshake::new(cfg.key, random()?);
    let challenge = hs.on_hello(&opening.hello).map_err(SessionError::Auth)?;
    send_msg(s, &Message::Challenge(challenge))?;
    let auth = match recv_small_by(s, opening.auth_by)? {
        // The client found the challenge's proof is not of its key: it
        // holds another one, which the daemon refuses as its own verdict.
        Message::Error {
            code: ErrorCode::AuthFailed,
            ..
        } => return Err(SessionError::Auth(AuthError::BadProof)),
        Message::Error { code, message } => return Err(SessionError::Refused { code, message }),
        m => m,
    };
    let Message::Auth(auth) = auth else {
        return Err(SessionError::local(
            ErrorCode::Malformed,
            "expected the handshake's proof",
        ));
    };
    let (welcome, keys) = hs.on_auth(&auth, random()?).map_err(SessionError::Auth)?;
    opening.unauthenticated = None;
    send_msg(s, &Message::Welcome(welcome))?;
    // Everything after the welcome is sealed with the session's keys.
    s.secure(&keys, false);
    let left = opening.request_by.saturating_duration_since(Instant::now());
    s.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
    let Message::Request(req) = recv_msg(s)? else {
        return Err(SessionError::local(
            ErrorCode::Malformed,
            "expected a session request",
        ));
    };
    s.set_read_timeout(Some(cfg.timeout.max(Duration::from_secs(1))))?;
    Ok((keys, req))
}

/// Admit an authenticated client's request: within the daemon's stream,
/// encryption and block rules, a place among its sessions and buffers
/// reserved for it (both held while the session runs).
fn admit_session<'r>(
    req: &SessionRequest,
    cfg: &RecvConfig,
    registry: &'r Registry,
) -> Result<(Hold, Reserved<'r>), SessionError> {
    if req.streams == 0 || req.streams > STREAMS_MAX.min(cfg.limits.streams) {
        return Err(SessionError::local(
            ErrorCode::TooLarge,
            format!(
                "{} data streams asked, this daemon takes 1 to {} per session",
                req.streams,
                cfg.limits.streams.min(STREAMS_MAX)
            ),
        ));
    }
    if cfg.require_encryption && !req.has(REQ_ENCRYPT) {
        return Err(SessionError::local(
            ErrorCode::BadRequest,
            "this daemon requires encrypted sessions: send with --encrypt",
        ));
    }
    let session =
        Hold::take(&registry.stats, Count::Sessions, cfg.limits.sessions).ok_or_else(|| {
            SessionError::local(
                ErrorCode::Busy,
                format!(
                    "the daemon serves {} sessions at once, its limit; try again later",
                    cfg.limits.sessions
                ),
            )
        })?;
    if req.block_size < 4096 || !req.block_size.is_multiple_of(4096) {
        return Err(SessionError::local(
            ErrorCode::BadRequest,
            format!("block size {} is not a multiple of 4096", req.block_size),
        ));
    }
    if cfg.pull_only && Kind::of(req) == Kind::Push {
        return Err(SessionError::local(
            ErrorCode::BadRequest,
            "this daemon serves pulls only (pull_only): it takes no pushes",
        ));
    }
    streams_fit(req, cfg, &registry.stats)?;
    // As many buffers as it wants, or as many as are left, down to the
    // fewest it works with.
    Ok((session, reserve_buffers(registry, req)?))
}

/// A session's data streams fit under `--max-connections` beside the
/// connections open now (its own control connection among them), or it
/// is refused at once: its streams would be refused as they came.
fn streams_fit(
    req: &SessionRequest,
    cfg: &RecvConfig,
    stats: &DaemonStats,
) -> Result<(), SessionError> {
    if Kind::of(req) == Kind::Udp {
        return Ok(());
    }
    let (open, max) = (
        stats.connections_open.load(Ordering::Acquire),
        cfg.limits.connections,
    );
    let room = max.saturating_sub(open);
    if usize::from(req.streams) <= room {
        return Ok(());
    }
    Err(SessionError::local(
        ErrorCode::Busy,
        format!(
            "{} asked, and the daemon has room for {} ({open} open, --max-connections {max}); try again later, or ask fewer streams (-P)",
            crate::coord::units::count(u64::from(req.streams), "data stream"),
            crate::coord::units::count(room as u64, "more connection"),
        ),
    ))
}

/// Run an admitted session with its `buffers`: a bench, a pull or a push.
#[allow(clippy::too_many_arguments)]
fn run_session(
    s: &mut Control,
    req: &SessionRequest,
    buffers: usize,
    keys: &SessionKeys,
    cfg: &RecvConfig,
    registry: &Registry,
    peer: SocketAddr,
    log: &Log,
) -> Result<(u64, u64), SessionError> {
    match Kind::of(req) {
        Kind::Bench => {
            let mut progress = RecvProgress::new(log, &registry.stats, peer, cfg.interval, None);
            bench_session(s, req, buffers, keys, cfg, registry, &mut progress)
        }
        Kind::Pull => {
            let id = registry.stats.begin(peer, "send");
            let r = pull_session(s, req, buffers, keys, cfg, registry);
            registry.stats.end(id);
            r
        }
        Kind::Push if req.has(crate::protocol::control::REQ_DRY_RUN) => {
            survey_push(s, req, keys, cfg, registry)
        }
        Kind::Push => push_session(s, req, buffers, keys, cfg, registry, peer, log),
        Kind::Udp => {
            let side = crate::session::probe::udp::DaemonSide {
                enabled: cfg.udp,
                busy: &registry.udp_busy,
                listen_port: cfg.listen.port(),
                lanes: cfg.lanes,
                buffers,
                timeout: cfg.timeout,
                time_max: cfg.udp_time_max,
            };
            let (bytes, line) = crate::session::probe::udp::daemon(s, req, keys, &side)?;
            log(Level::Info, &format!("{peer}: UDP test: {line}"));
            bench_summary(s, bytes)?;
            Ok((0, bytes))
        }
    }
}

/// A push on the daemon's side: the manifest prepared under the root (see
/// [`prepare_push`]), the sink's part of the setup (`roles::accept`), the
/// data streams collected, then the data received and its summary sent.
#[allow(clippy::too_many_arguments)]
fn push_session(
    s: &mut Control,
    req: &crate::protocol::control::SessionRequest,
    buffers: usize,
    keys: &SessionKeys,
    cfg: &RecvConfig,
    registry: &Registry,
    peer: SocketAddr,
    log: &Log,
) -> Result<(u64, u64), SessionError> {
    let mut prepared = prepare_push(s, req, keys, cfg, registry)?;
    let PreparedPush {
        incoming,
        claims,
        memory,
    } = &mut prepared;
    crate::session::roles::settle_held(s, incoming)?;
    // Ring and registered buffers before the streams: they are ready when
    // the first frame comes, however long the streams take to connect.
    let pool = crate::session::sink::landing::prepare_receivers(
        cfg.lanes,
        req.streams,
        buffers,
        req.block_size as usize,
    )?;
    // What is refused, and each device under the root its own lanes and
    // streams: the sender is told.
    let mut beat = crate::session::link::conn::Beat::new(s)?;
    crate::session::roles::place(s, incoming, &pool.0, &mut || beat.tick())?;
    // Wait for the data streams, each proving it belongs here.
    let streams = collect_streams(s, registry, keys, req.streams, cfg)?;
    // Receive: frames into registered buffers, checked, written, committed
    // on the sender's digest; a heartbeat while nothing else goes out.
    let mut out = DaemonLanding {
        progress: RecvProgress::new(
            log,
            &registry.stats,
            peer,
            cfg.interval,
            // A follow's files grow: no percent of a total.
            (!req.has(crate::protocol::control::REQ_FOLLOW)).then(|| incoming.data_missing()),
        ),
        ctl: s.try_clone()?,
        last_beat: Instant::now(),
        stats: &registry.stats,
        closing: &registry.closing,
        follow: Follow {
            dest: incoming.dest.clone(),
            claims,
            memory,
            block: u64::from(req.block_size),
            entries_left: u64::from(cfg.limits.files).saturating_sub(incoming.entries.len() as u64),
        },
    };
    let open = req
        .has(REQ_ENCRYPT)
        .then(|| (keys.clone(), SealDirection::ClientToServer));
    let pace = Pace {
        timeout: cfg.timeout,
        min_rate_bytes_per_s: cfg.limits.min_rate_bytes_per_s,
    };
    let (reader, peer) = crate::session::link::conn::spawn_peer_reader(s)?;
    // Should what follows unwind, the reader still ends with the session.
    let _reads_end = ReadsEnd(
        s.tcp()
            .try_clone()
            .map_err(|e| SessionError::io("control connection", e))?,
    );
    let key = frame_key(keys);
    let received = incoming
        .receive(&streams, pool, pace, (&key, &open), &peer, &mut out)
        .and_then(|_lanes| incoming.finish())
        .map_err(|e| interrupted_kept(s, incoming, e));
    if let Ok(done) = &received {
        let (files, bytes) = (done.files, done.bytes);
        for r in &done.refused {
            send_msg(s, &r.message())?;
        }
        if req.has(crate::protocol::control::REQ_DELETE) {
            let whole = req.has(crate::protocol::control::REQ_CONTENTS);
            delete_extras(s, (incoming, whole), log)?;
        }
        send_msg(
            s,
            &Message::Summary {
                files,
                bytes,
                ok: true,
            },
        )?;
    }
    // The reader ends when its side of the connection does (or, waiting to
    // hand on an event, when nobody takes it any more).
    let _ = s.tcp().shutdown(std::net::Shutdown::Read);
    drop(peer);
    let _ = reader.join();
    received.map(|d| (d.files, d.bytes))
}

/// The data streams of a pull broke: when its client was stopped (Ctrl-C)
/// it says so on the control connection as it goes, and the session ends
/// as the client's stop, not as a fault. Other errors pass.
fn client_stopped(s: &mut Control, e: SessionError) -> SessionError {
    if !e.is_connection_loss() {
        return e;
    }
    // What the client said before it stopped (its `Error` comes back as
    // the peer's refusal).
    let until = Instant::now() + Duration::from_secs(1);
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    while Instant::now() < until {
        match crate::session::link::conn::recv_msg(s) {
            Err(SessionError::Refused {
                code: ErrorCode::Interrupted,
                ..
            }) => {
                return SessionError::Refused {
                    code: ErrorCode::Interrupted,
                    message:
                        "the client stopped it (Ctrl-C); what it verified is kept for its next run"
                            .into(),
                }
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    e
}

/// A push its client interrupted (Ctrl-C): the client is told what was
/// kept for its next run (what was verified is journaled by now), and the
/// session ends as the client's stop, saying so. Other errors pass.
fn interrupted_kept(s: &mut Control, incoming: &Incoming, e: SessionError) -> SessionError {
    let SessionError::Refused {
        code: ErrorCode::Interrupted,
        ..
    } = e
    else {
        return e;
    };
    let (files, bytes) = incoming.kept();
    let _ = send_msg(s, &Message::Kept { files, bytes });
    SessionError::Refused {
        code: ErrorCode::Interrupted,
        message: format!(
            "the client stopped it (Ctrl-C); the verified blocks of {} ({}) are kept for its next run",
            crate::coord::units::count(files, "file"),
            crate::coord::units::bytes_decimal(bytes)
        ),
    }
}

/// Shuts the reading side of a control connection down when dropped,
/// unwinding or not: its peer reader (which waits on it with no timeout)
/// then ends, and its thread and descriptors with it.
struct ReadsEnd(TcpStream);

impl Drop for ReadsEnd {
    fn drop(&mut self) {
        let _ = self.0.shutdown(std::net::Shutdown::Read);
    }
}

/// A push's dry run on the daemon's side: its manifest looked at under the
/// root as the push would (what is held, checked by the sender; whether it
/// fits; what would be refused; with `--delete`, what would go), told to
/// the client, then the summary. Nothing is claimed, made or changed.
fn survey_push(
    s: &mut Control,
    req: &SessionRequest,
    keys: &SessionKeys,
    cfg: &RecvConfig,
    registry: &Registry,
) -> Result<(u64, u64), SessionError> {
    let mut prepared = prepare_push(s, req, keys, cfg, registry)?;
    let incoming = &mut prepared.incoming;
    crate::session::roles::settle_held(s, incoming)?;
    crate::session::roles::refuse(s, incoming)?;
    if req.has(crate::protocol::control::REQ_DELETE) {
        let whole = req.has(crate::protocol::control::REQ_CONTENTS);
        let pruned = crate::session::sink::prune::prune(incoming, true, whole);
        for part in pruned.deleted.chunks(1024) {
            send_msg(s, &Message::Deleted(part.to_vec()))?;
        }
    }
    let summary = Message::Summary {
        files: 0,
        bytes: 0,
        ok: true,
    };
    send_msg(s, &summary)?;
    Ok((0, 0))
}

/// `--delete`, once every file is committed: remove the extras under the
/// manifest's directories and tell the sender what went (failures are
/// logged, and end the session with an error naming them, the files
/// being committed already).
fn delete_extras(
    s: &mut Control,
    (incoming, whole_dest): (&Incoming, bool),
    log: &Log,
) -> Result<(), SessionError> {
    let pruned = crate::session::sink::prune::prune(incoming, false, whole_dest);
    // What was removed changed its directories: durable, and their mtimes
    // the sender's again.
    incoming.sync_dirs()?;
    incoming.settle_dirs();
    for f in &pruned.failed {
        log(Level::Warn, &format!("--delete could not remove {f}"));
    }
    for part in pruned.deleted.chunks(1024) {
        send_msg(s, &Message::Deleted(part.to_vec()))?;
    }
    pruned.failure("the receiver's")
}

/// A push's files prepared on the daemon: their names claimed from other
/// sessions and their memory counted for as long as it runs.
struct PreparedPush<'r> {
    incoming: Incoming,
    claims: Claims<'r>,
    memory: ManifestMemory<'r>,
}

/// Take a push's manifest (within the daemon's limits), claim its names
/// under the destination, and prepare its files under the root (a
/// heartbeat while a large tree is prepared).
fn prepare_push<'r>(
    s: &mut Control,
    req: &crate::protocol::control::SessionRequest,
    keys: &SessionKeys,
    cfg: &RecvConfig,
    registry: &'r Registry,
) -> Result<PreparedPush<'r>, SessionError> {
    let dest = push_dest(req)?;
    let mut memory = registry.manifest_memory(cfg.limits.manifest_bytes);
    let mut entries = recv_manifest(s, cfg.limits.files, &mut |bytes| memory.reserve(bytes))?;
    let root = Root::open_for_writing(&cfg.root).map_err(|e| SessionError::io("root", e))?;
    let dest = match req.has(crate::protocol::control::REQ_ONE_FILE) {
        true => crate::session::sink::receive::one_file_at_dest(&root, dest, &mut entries),
        false => dest,
    };
    memory.reserve(bitmap_bytes(&entries, u64::from(req.block_size)))?;
    if req.has(crate::protocol::control::REQ_FOLLOW) {
        // The block tables its files may add as they grow.
        memory.reserve(crate::session::sink::receive::FOLLOW_BITMAP_BYTES)?;
    }
    let resume = req.has(REQ_RESUME).then_some(Resume {
        checksum: req.has(REQ_CHECKSUM),
        key: frame_key(keys),
    });
    // A dry run holds no name: it never keeps a push from one.
    let claims = match req.has(crate::protocol::control::REQ_DRY_RUN) {
        true => Claims::none(&registry.claimed),
        false => claim_names(registry, &dest, &entries)?,
    };
    let mut beat = crate::session::link::conn::Beat::new(s)?;
    let incoming = Incoming::prepare(
        root,
        dest,
        entries,
        u64::from(req.block_size),
        cfg.direct,
        owned_by(&registry.rules, req)?,
        resume,
        &mut || beat.tick(),
    )?;
    Ok(PreparedPush {
        incoming,
        claims,
        memory,
    })
}

/// A push's destination under the root, checked; `REQ_CONTENTS` with
/// `REQ_DELETE` would prune the destination itself, refused for the root
/// (everything other clients sent there would go).
fn push_dest(req: &SessionRequest) -> Result<String, SessionError> {
    use crate::protocol::control::{REQ_CONTENTS, REQ_DELETE};
    let dest = match req.path.as_str() {
        "" | "." => String::new(),
        p => {
            check_path(p)
                .map_err(|e| SessionError::local(ErrorCode::PathRefused, format!("{p}: {e}")))?;
            p.to_string()
        }
    };
    if dest.is_empty() && req.has(REQ_CONTENTS) && req.has(REQ_DELETE) {
        return Err(SessionError::local(
            ErrorCode::BadRequest,
            "--delete of a directory's contents (DIR/) into the root itself would remove everything else under the root: give a destination beneath it",
        ));
    }
    Ok(dest)
}

/// What the receive loop of a push reports: `Net In` lines and metrics,
/// an acknowledgement per file committed (or its rejection), heartbeats.
struct DaemonLanding<'a, 'r> {
    progress: RecvProgress<'a>,
    ctl: Control,
    last_beat: Instant,
    stats: &'a DaemonStats,
    closing: &'a AtomicBool,
    follow: Follow<'a, 'r>,
}

/// What a push that follows files needs to take entries it adds: the
/// session's claims on names and its manifest memory.
struct Follow<'a, 'r> {
    dest: String,
    claims: &'a mut Claims<'r>,
    memory: &'a mut ManifestMemory<'r>,
    block: u64,
    /// Entries it may add still (`max_files` less the manifest's).
    entries_left: u64,
}

impl Follow<'_, '_> {
    /// Count `entries`' memory and claim their names (at once: one of them
    /// another session receives now refuses the lot).
    fn admit(&mut self, entries: &[crate::protocol::manifest::Entry]) -> Result<(), SessionError> {
        self.entries_left = self
            .entries_left
            .checked_sub(entries.len() as u64)
            .ok_or_else(|| {
                SessionError::local(
                    ErrorCode::TooLarge,
                    "the follow added more entries than one session takes (max_files)",
                )
            })?;
        let text: u64 = entries.iter().map(|e| e.text_len() as u64).sum();
        let cost = entries.len() as u64 * crate::session::sink::receive::ENTRY_COST_BYTES + text;
        self.memory
            .reserve(cost.saturating_add(bitmap_bytes(entries, self.block)))?;
        let names: Vec<String> = entries
            .iter()
            .filter(|e| e.kind != crate::protocol::manifest::EntryKind::Dir)
            .map(|e| join(&self.dest, &e.path))
            .collect();
        let mut set = self.claims.set.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(busy) = names.iter().find(|n| set.contains(*n)) {
            return Err(SessionError::local(
                ErrorCode::Busy,
                format!("{busy}: another session is receiving it now"),
            ));
        }
        set.extend(names.iter().cloned());
        drop(set);
        self.claims.names.extend(names);
        Ok(())
    }
}

impl crate::session::sink::landing::Landing for DaemonLanding<'_, '_> {
    fn admit(&mut self, entries: &[crate::protocol::manifest::Entry]) -> Result<(), SessionError> {
        self.follow.admit(entries)
    }

    fn admitted(&mut self, upto: u32) -> Result<(), SessionError> {
        send_msg(&mut self.ctl, &Message::Admitted { upto })
    }

    fn progress(&mut self, bytes: u64) {
        self.progress.add(bytes);
    }

    fn unsent(&mut self, bytes: u64) {
        self.progress.unsent += bytes;
    }

    fn committed(&mut self, file_index: u32, digest: u64) -> Result<(), SessionError> {
        self.stats.files_received.fetch_add(1, Ordering::Relaxed);
        send_msg(&mut self.ctl, &Message::FileAck { file_index, digest })
    }

    fn rejected(&mut self, file_index: u32, digest: u64) -> Result<(), SessionError> {
        send_msg(&mut self.ctl, &Message::FileRejected { file_index, digest })
    }

    fn refused(&mut self, r: &crate::session::link::refused::Refused) -> Result<(), SessionError> {
        send_msg(&mut self.ctl, &r.message())
    }

    fn piece(&mut self, file_index: u32, done: PieceDone) -> Result<(), SessionError> {
        self.stats.files_received.fetch_add(1, Ordering::Relaxed);
        if let Some(k) = done.untrusted {
            let p = &self.progress;
            (p.log)(
                Level::Warn,
                &format!(
                    "{}: entry {file_index}: the journal of piece {k} here was made with another secret: this daemon cannot commit the file (receivers sharing a root must run with one secret, --state-dir)",
                    p.peer
                ),
            );
        }
        send_msg(&mut self.ctl, &Message::PieceAck { file_index, done })
    }

    fn tick(&mut self, streams: &[(u64, bool)]) -> Result<(), SessionError> {
        if self.closing.load(Ordering::Acquire) {
            return Err(shutting_down());
        }
        if self.last_beat.elapsed() >= Duration::from_millis(500) {
            self.last_beat = Instant::now();
            let streams = streams.to_vec();
            send_msg(&mut self.ctl, &Message::Alive { streams })?;
        }
        Ok(())
    }
}

/// Why a session ends when the daemon stops under it: told to its client.
fn shutting_down() -> SessionError {
    SessionError::local(
        ErrorCode::ShuttingDown,
        "the daemon is shutting down (it was told to stop); the files committed stay, and the parts journaled are kept for the next run",
    )
}

/// Registered memory of a manifest's per-block bitmaps (two bits a block).
fn bitmap_bytes(entries: &[crate::protocol::manifest::Entry], block: u64) -> u64 {
    entries
        .iter()
        .filter(|e| e.kind == crate::protocol::manifest::EntryKind::File)
        .map(|e| e.size.div_ceil(block).div_ceil(64) * 16)
        .fold(0, u64::saturating_add)
}

/// One session per file at a time: claim every file and symlink of the
/// manifest by its final name (a session that just lost its sender may still be winding
/// down: give it a few seconds before refusing). A piece of a split file
/// is claimed by its name and number (`NAME\0K`: the sessions bringing the
/// other pieces share the file), never while the whole name is claimed,
/// and a whole file never while a piece of it is. (Across daemons a
/// piece's part is never a whole file's, `receive::join_part`: one of
/// them fails, and neither commits the other's bytes.)
fn claim_names<'r>(
    registry: &'r Registry,
    dest: &str,
    entries: &[crate::protocol::manifest::Entry],
) -> Result<Claims<'r>, SessionError> {
    let names: Vec<String> = entries
        .iter()
        // Files and symlinks: a name another session holds is never
        // replaced by either while it runs. Directories are shared (two
        // sessions may fill one) and never replace anything.
        .filter(|e| e.kind != crate::protocol::manifest::EntryKind::Dir)
        .map(|e| match e.piece {
            Some(p) => format!("{}\0{}", join(dest, &e.path), p.index),
            None => join(dest, &e.path),
        })
        .collect();
    let taken = |set: &BTreeSet<String>, n: &String| {
        let pieces = || {
            let (from, to) = (format!("{n}\0"), format!("{n}\u{1}"));
            set.range(from..to).next().is_some()
        };
        match n.split_once('\0') {
            Some((whole, _)) => set.contains(n) || set.contains(whole),
            None => set.contains(n) || pieces(),
        }
    };
    let claim_until = Instant::now() + CLAIM_WAIT;
    loop {
        let mut set = registry.claimed.lock().unwrap_or_else(|p| p.into_inner());
        match names.iter().find(|n| taken(&set, n)) {
            None => {
                set.extend(names.iter().cloned());
                return Ok(Claims {
                    set: &registry.claimed,
                    names,
                });
            }
            Some(busy) if Instant::now() >= claim_until => {
                let busy = busy.split('\0').next().unwrap_or_default();
                return Err(SessionError::local(
                    ErrorCode::Busy,
                    format!("{busy}: another session is receiving it now"),
                ));
            }
            Some(_) => {
                drop(set);
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Register the session, say Ready, and wait for its data streams, each of
/// which proved it belongs here when it connected.
fn collect_streams(
    s: &mut Control,
    registry: &Registry,
    keys: &SessionKeys,
    count: u16,
    cfg: &RecvConfig,
) -> Result<Streams, SessionError> {
    let (tx, rx) = mpsc::channel();
    registry
        .registry
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(
            keys.session_id,
            Pending {
                keys: keys.clone(),
                streams: count,
                tx,
            },
        );
    let watch = Awaited {
        count,
        wait: cfg.stream_wait,
        refused: (&registry.stats.connections_refused, cfg.limits.connections),
    };
    let waited = send_msg(s, &Message::Ready).and_then(|()| wait_for_streams(s, &rx, watch));
    registry
        .registry
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&keys.session_id);
    let streams = waited?;
    for st in &streams {
        sys::set_dead_peer_timeout(std::os::fd::AsRawFd::as_raw_fd(st), cfg.timeout);
    }
    Ok(streams)
}

/// What a session awaits: `count` data streams within `wait`, while the
/// daemon's count of connections `refused` at its limit says whether some
/// of them may have been turned away.
struct Awaited<'a> {
    count: u16,
    wait: Duration,
    refused: (&'a AtomicU64, usize),
}

/// How long a session still waits for its streams once the daemon turned
/// a connection away at its limit (which may have been one of them).
const REFUSED_STREAM_GRACE: Duration = Duration::from_secs(1);

/// Take the data streams as they arrive until all are here or the wait
/// is up. A client that closes its control connection or gives up (its
/// `Error`) meanwhile ends the wait at once, and so does a stream turned
/// away at the connection limit (the client is told so, at once).
fn wait_for_streams(
    s: &mut Control,
    rx: &mpsc::Receiver<Arrived>,
    w: Awaited<'_>,
) -> Result<Streams, SessionError> {
    let mut slots: Vec<Option<Arrived>> = (0..w.count).map(|_| None).collect();
    let deadline = Instant::now() + w.wait;
    let refused_before = w.refused.0.load(Ordering::Acquire);
    let mut turned_away: Option<Instant> = None;
    let mut arrived = 0;
    while arrived < slots.len() {
        watch_control(s, deadline)?;
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        if w.refused.0.load(Ordering::Acquire) != refused_before {
            let since = *turned_away.get_or_insert_with(Instant::now);
            if since.elapsed() >= REFUSED_STREAM_GRACE {
                return Err(limit_refused(slots.len() - arrived, w.refused.1));
            }
        }
        match rx.recv_timeout(left.min(CONTROL_WATCH_INTERVAL)) {
            Ok(a) if slots[a.index as usize].is_none() => {
                let i = a.index as usize;
                slots[i] = Some(a);
                arrived += 1;
            }
            Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    if arrived < slots.len() {
        return Err(SessionError::local(
            ErrorCode::BadRequest,
            format!("only {arrived} of {} data streams arrived", slots.len()),
        ));
    }
    let (streams, _conns) = slots
        .into_iter()
        .flatten()
        .map(|a| (a.stream, a.conn))
        .unzip();
    Ok(Streams { streams, _conns })
}

fn limit_refused(missing: usize, max: usize) -> SessionError {
    SessionError::local(
        ErrorCode::Busy,
        format!(
            "{missing} of this session's data streams were turned away at the daemon's connection limit (--max-connections {max}); try again later, or ask fewer streams (-P)"
        ),
    )
}

/// Whether the client still waits on its control connection while its
/// data streams are awaited: Ok when it said nothing (or a heartbeat); an
/// error when it closed the connection or sent its `Error`.
fn watch_control(s: &mut Control, deadline: Instant) -> Result<(), SessionError> {
    let what = "waiting for the data streams";
    if !sys::wait_readable(std::os::fd::AsRawFd::as_raw_fd(s.tcp()), 0) {
        return Ok(());
    }
    match s.tcp().peek(&mut [0u8; 1]) {
        Ok(0) => {
            return Err(SessionError::io(
                what,
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the client closed its control connection",
                ),
            ))
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Ok(()),
        Err(e) => return Err(SessionError::io(what, e)),
    }
    // A message: read it whole, within the wait.
    let timeout = s.tcp().read_timeout().ok().flatten();
    let left = deadline.saturating_duration_since(Instant::now());
    s.set_read_timeout(Some(left.max(Duration::from_secs(1))))?;
    let m = recv_msg(s);
    s.set_read_timeout(timeout)?;
    match m? {
        Message::Alive { .. } => {}
        // The client already moved on (its first digests): kept for the
        // session, which reads it once the streams are here.
        m => s.unread(m),
    }
    Ok(())
}

/// How the daemon sends (pull, reversed bench): the client's block size,
/// zero-copy where it pays, paced as the client asked (`--rate-limit`),
/// sealed when the client asked.
fn daemon_push_params(
    req: &crate::protocol::control::SessionRequest,
    buffers: usize,
    keys: &SessionKeys,
    cfg: &RecvConfig,
) -> crate::session::source::sending::PushParams {
    crate::session::source::sending::PushParams {
        buffers,
        block_size: req.block_size,
        zerocopy: crate::datapath::net::ZeroCopy::Auto,
        rate_limit_bytes_per_s: (req.rate_limit > 0).then_some(req.rate_limit as f64),
        timeout: cfg.timeout,
        seal: req
            .has(REQ_ENCRYPT)
            .then(|| (keys.clone(), SealDirection::ServerToClient)),
        key: frame_key(keys),
        zeros: req.has(crate::protocol::control::REQ_SPARSE),
    }
}

/// Pace the streams this daemon sends on to their share of the client's
/// `--rate-limit` (SO_MAX_PACING_RATE), so the data leaves evenly.
fn pace_as_asked(
    req: &crate::protocol::control::SessionRequest,
    streams: &[TcpStream],
) -> Result<(), SessionError> {
    if req.rate_limit == 0 {
        return Ok(());
    }
    let fds = crate::session::link::streams::fds_of(streams);
    crate::datapath::tcp::pace(&fds, req.rate_limit as f64, streams.len())
        .map_err(|e| SessionError::io("pacing the data streams", e))
}

/// `urmove pull` on the daemon's side: walk the requested paths beneath the
/// root, send their manifest, check what the client holds (resume), then
/// send the data on the client's streams, each file's digest as it is read
/// through, and a summary.
fn pull_session(
    s: &mut Control,
    req: &crate::protocol::control::SessionRequest,
    buffers: usize,
    keys: &SessionKeys,
    cfg: &RecvConfig,
    registry: &Registry,
) -> Result<(u64, u64), SessionError> {
    use crate::session::roles::{hear, Until};
    use crate::session::source::sending::{open_source_beneath, push_data, Sources};
    // (The memory stays counted until the session ends.)
    let OfferedPull {
        root,
        tree,
        mut held,
        _memory,
    } = offer_pull(s, req, keys, cfg, registry)?;
    if req.has(crate::protocol::control::REQ_DRY_RUN) {
        // The client looks at what it holds by itself: nothing is sent.
        pulled(s, registry, 0, 0)?;
        return Ok((0, 0));
    }
    let entries = tree.entries.len();
    let before = hear(s, Until::Placement { entries })?;
    held.refuse(&before.refused);
    let params = daemon_push_params(req, buffers, keys, cfg);
    // Ring and buffers before the streams connect (ready for their data).
    let (plan, txs) = crate::session::source::sending::prepare_senders(
        cfg.lanes,
        req.streams,
        req.streams,
        &params,
    )?;
    let shape = (entries, req.streams);
    let files = tree.to_send(&held);
    let route = crate::session::plan::route::for_source(before.placement, shape, &plan, files)?;
    let streams = collect_streams(s, registry, keys, req.streams, cfg)?;
    pace_as_asked(req, &streams)?;
    let open = |i: usize| open_source_beneath(&root, &tree.sources[i], tree.ids[i], cfg.direct);
    let counters = crate::coord::WorkerCounters::default();
    let from = Sources {
        tree: &tree,
        held: &held,
        acked: None,
        open: &open,
        announce_on: s,
        route: &route,
        follow: None,
    };
    // The daemon stopping (its drain time over) stops the lanes.
    let stop = &registry.closing;
    let pushed =
        push_data(&params, &from, &plan, &streams, &counters, stop, txs).map_err(|e| match stop
            .load(Ordering::Acquire)
        {
            true => shutting_down(),
            false => client_stopped(s, e),
        })?;
    for st in &streams {
        let _ = st.shutdown(std::net::Shutdown::Write);
    }
    let bytes = counters.snapshot().0;
    let files = (tree.file_count() - pushed.skipped.len()) as u64;
    pulled(s, registry, files, bytes)?;
    Ok((files, bytes))
}

/// A pull's data sent: counted in the daemon's stats and summed up to the
/// client.
fn pulled(
    s: &mut Control,
    registry: &Registry,
    files: u64,
    bytes: u64,
) -> Result<(), SessionError> {
    let stats = &registry.stats;
    stats.bytes_sent.fetch_add(bytes, Ordering::Relaxed);
    stats.files_sent.fetch_add(files, Ordering::Relaxed);
    let summary = Message::Summary {
        files,
        bytes,
        ok: true,
    };
    send_msg(s, &summary)
}

/// A pull's sources as offered: the root, the tree scanned beneath it,
/// what the client holds and is right, and the memory they are counted in.
struct OfferedPull<'r> {
    root: Root,
    tree: crate::session::plan::tree::Tree,
    held: crate::session::plan::held::Held,
    _memory: ManifestMemory<'r>,
}

/// A `pull --shard`: the client's shard, answered with the whole
/// manifest's summary; the tree keeps the share (`shard::select`).
fn offer_share(
    s: &mut Control,
    tree: &mut crate::session::plan::tree::Tree,
    block: u64,
) -> Result<(), SessionError> {
    let (index, count, split_over) = match recv_msg(s)? {
        Message::Shard {
            index,
            count,
            split_over,
        } => (index, count, split_over),
        _ => {
            return Err(SessionError::Protocol(
                "expected the shard of a sharded pull".into(),
            ))
        }
    };
    let (files, bytes, digest) = crate::session::plan::shard::summary(&tree.entries);
    let m = Message::ShardManifest {
        files,
        bytes,
        digest,
    };
    send_msg(s, &m)?;
    crate::session::plan::shard::select(
        tree,
        crate::session::plan::shard::Shard { index, count },
        split_over,
        block,
    );
    Ok(())
}

/// Scan the requested paths beneath the root (within the daemon's memory
/// limit), offer their manifest (`roles::offer`: when resuming, what the
/// client holds is checked against the files), and tell the client what
/// the scan left out.
fn offer_pull<'r>(
    s: &mut Control,
    req: &crate::protocol::control::SessionRequest,
    keys: &SessionKeys,
    cfg: &RecvConfig,
    registry: &'r Registry,
) -> Result<OfferedPull<'r>, SessionError> {
    use crate::session::source::sending::open_source_beneath;
    let root = Root::open(&cfg.root).map_err(|e| SessionError::io("root", e))?;
    let paths: Vec<&str> = req.path.split('\0').collect();
    let rules =
        crate::session::plan::tree::ScanRules::requested(req.flags, filter_of(&req.filter)?);
    let mut tree = crate::session::plan::tree::scan_beneath(&root, &paths, &rules)?;
    let mut memory = registry.manifest_memory(cfg.limits.manifest_bytes);
    memory.reserve(tree.entries.len() as u64 * crate::session::sink::receive::ENTRY_COST_BYTES)?;
    let block = u64::from(req.block_size);
    if req.has(crate::protocol::control::REQ_SHARD) {
        offer_share(s, &mut tree, block)?;
    }
    let local = |i: usize| {
        open_source_beneath(&root, &tree.sources[i], tree.ids[i], DirectMode::Off).map(|(f, _)| f)
    };
    let key = frame_key(keys);
    let resume = req.has(REQ_RESUME).then_some((&key, req.has(REQ_CHECKSUM)));
    let reserve = &mut |b| memory.reserve(b);
    let held = crate::session::roles::offer(s, (&tree, block), resume, &local, reserve)?;
    if tree.excluded + tree.devices_left > 0 {
        let (excluded, devices) = (tree.excluded, tree.devices_left);
        send_msg(s, &Message::LeftOut { excluded, devices })?;
    }
    for r in tree.skipped_refs() {
        send_msg(s, &r.message())?;
    }
    Ok(OfferedPull {
        root,
        tree,
        held,
        _memory: memory,
    })
}

/// `bench --net` on the daemon's side: take frames on every stream, check
/// each checksum (unless unchecked), count and discard them; or, reversed,
/// send for the requested time. No disk is touched.
fn bench_session(
    s: &mut Control,
    req: &crate::protocol::control::SessionRequest,
    buffers: usize,
    keys: &SessionKeys,
    cfg: &RecvConfig,
    registry: &Registry,
    progress: &mut RecvProgress<'_>,
) -> Result<(u64, u64), SessionError> {
    let reverse = req.direction == Direction::BenchReverse;
    // Reversed, the path carries the test length in ms (and `v` for checksums).
    let (time, verify) = if reverse {
        let verify = req.path.ends_with('v');
        let ms: u64 = req.path.trim_end_matches('v').parse().map_err(|_| {
            SessionError::local(ErrorCode::BadRequest, "bench --reverse: bad test length")
        })?;
        if ms > 24 * 3600 * 1000 {
            return Err(SessionError::local(
                ErrorCode::TooLarge,
                "bench --reverse: test longer than a day",
            ));
        }
        (Duration::from_millis(ms), verify)
    } else {
        (Duration::ZERO, false)
    };
    let bytes = if reverse {
        bench_send_back(s, req, buffers, keys, cfg, registry, (time, verify))?
    } else {
        bench_take(s, req, buffers, keys, cfg, registry, progress)?
    };
    bench_summary(s, bytes)?;
    Ok((0, bytes))
}

/// A test's end on the daemon: the bytes it moved, and no files.
fn bench_summary(s: &mut Control, bytes: u64) -> Result<(), SessionError> {
    let ok = true;
    send_msg(
        s,
        &Message::Summary {
            files: 0,
            bytes,
            ok,
        },
    )
}

/// A reversed `bench --net` on the daemon: send on lanes for `time` (each
/// frame checksummed when `verify`); the bytes sent.
fn bench_send_back(
    s: &mut Control,
    req: &crate::protocol::control::SessionRequest,
    buffers: usize,
    keys: &SessionKeys,
    cfg: &RecvConfig,
    registry: &Registry,
    (time, verify): (Duration, bool),
) -> Result<u64, SessionError> {
    use crate::session::probe::bench_net::{bench_senders, fill_bench_buffers, BenchRun};
    // Rings and buffers before the streams connect (ready for their data).
    let params = daemon_push_params(req, buffers, keys, cfg);
    let both = (req.streams, req.streams);
    let (plan, mut txs) = bench_senders(cfg.lanes, both, buffers, req.block_size, params.zerocopy)?;
    txs.iter_mut().for_each(fill_bench_buffers);
    let streams = collect_streams(s, registry, keys, req.streams, cfg)?;
    pace_as_asked(req, &streams)?;
    let counters = crate::coord::WorkerCounters::default();
    let stop = AtomicBool::new(false);
    let bench = BenchRun {
        params: &params,
        time,
        verify,
        counters: &counters,
        stop: &stop,
    };
    bench.send(&plan, &streams, txs)?;
    for st in &streams {
        let _ = st.shutdown(std::net::Shutdown::Write);
    }
    Ok(counters.snapshot().0)
}

/// `bench --net` on the daemon: take frames on lanes, check each (unless
/// unchecked), count them in the session's log and metrics and discard
/// them, until the streams end; the bytes taken.
fn bench_take(
    s: &mut Control,
    req: &crate::protocol::control::SessionRequest,
    buffers: usize,
    keys: &SessionKeys,
    cfg: &RecvConfig,
    registry: &Registry,
    progress: &mut RecvProgress<'_>,
) -> Result<u64, SessionError> {
    use crate::session::probe::bench_net::{bench_receivers, discard_on_lanes};
    // Rings and buffers before the streams connect (ready for their data).
    let (plan, rxs) = bench_receivers(cfg.lanes, req.streams, buffers, req.block_size)?;
    let streams = collect_streams(s, registry, keys, req.streams, cfg)?;
    let open = req
        .has(REQ_ENCRYPT)
        .then(|| (keys.clone(), SealDirection::ClientToServer));
    let key = frame_key(keys);
    let plan = crate::session::link::lanes::place_streams(
        plan.len(),
        &crate::session::link::streams::fds_of(&streams),
    );
    let counted = AtomicU64::new(0);
    let count = |b: u64| {
        counted.fetch_add(b, Ordering::Relaxed);
    };
    let mut logged = 0;
    let taken = std::thread::scope(|scope| {
        let lanes = scope.spawn(|| discard_on_lanes(&plan, &streams, rxs, (&key, &open), &count));
        while !lanes.is_finished() {
            std::thread::sleep(crate::session::link::lanes::WATCH_EVERY);
            let now = counted.load(Ordering::Relaxed);
            progress.add(now - logged);
            logged = now;
        }
        let r = lanes.join().expect("the lanes' thread panicked");
        progress.add(counted.load(Ordering::Relaxed) - logged);
        r
    })?;
    Ok(taken.0)
}
