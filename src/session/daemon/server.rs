//! The daemon's listener: bind, accept (backing off when out of
//! descriptors), admit each connection on a thread of its own or refuse it
//! at once, sweep old parts, and drain on stop.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::datapath::beneath::Root;
use crate::datapath::sys;
use crate::protocol::control::ErrorCode;

use super::admit::{refuse_now, Backoff, Throttled};
use super::config::RecvConfig;
use super::connection::connection;
use super::log::{Level, Log};
use super::registry::{Count, Hold, Registry, Shared, Unauthenticated};
use super::startup::{buffer_budget, startup_checks};
use super::stats::DaemonStats;
use crate::session::SessionError;

/// How long a stopping daemon waits for running sessions to finish.
pub(super) const STOP_DRAIN: Duration = Duration::from_secs(10);

/// After the drain, how long sessions get to tell their clients they end.
pub(super) const CLOSING_GRACE: Duration = Duration::from_secs(2);

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
pub(super) fn sweep_parts(
    cfg: &RecvConfig,
    age: Duration,
    claims: &crate::session::sink::rules::InodeClaims,
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
pub(super) fn listen(cfg: &RecvConfig, log: &Log) -> Result<TcpListener, SessionError> {
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
pub(super) fn drain(registry: &Registry, log: &Log) {
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
pub(super) struct Door {
    pub(super) backoff: Backoff,
    pub(super) accept_errors: Throttled,
    pub(super) unauthenticated_refusals: Throttled,
    pub(super) connection_refusals: Throttled,
    pub(super) spawn_errors: Throttled,
}

impl Door {
    /// `accept` failed (out of descriptors, most likely): wait before the
    /// next try, longer each time, instead of spinning on a listener that
    /// stays readable.
    pub(super) fn accept_failed(&mut self, e: &std::io::Error, log: &Log) {
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
    pub(super) fn admit(
        &mut self,
        s: TcpStream,
        peer: SocketAddr,
        cfg: &Arc<RecvConfig>,
        registry: &Registry,
        log: &Log,
    ) {
        let stats = &registry.stats;
        if let Some(only) = cfg.only_from {
            let local = s.local_addr().unwrap_or(cfg.listen);
            if !only.admits(peer, local) {
                stats
                    .unauthenticated_refused
                    .fetch_add(1, Ordering::Relaxed);
                self.unauthenticated_refusals.log(
                    log,
                    Level::Warn,
                    &format!(
                        "{peer}: refused: this receiver takes connections from its one client only"
                    ),
                );
                return;
            }
        }
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
