//! One connection from accept to its end: the first message says whether
//! it is a control connection (handshake, request, admission, the session)
//! or a data stream of a session waiting for it; failures before it
//! authenticated are counted and logged apart.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::datapath::sys;
use crate::protocol::control::{
    Direction, ErrorCode, Message, SessionRequest, REQ_ENCRYPT, STREAMS_MAX,
};
use crate::protocol::handshake::{
    check_stream_proof, AuthError, Proof, ServerHandshake, SessionId, SessionKeys,
};

use super::bench::{bench_session, bench_summary};
use super::config::RecvConfig;
use super::log::{Level, Log};
use super::progress::RecvProgress;
use super::pull::pull_session;
use super::push::{push_session, survey_push};
use super::registry::{reserve_buffers, Arrived, Count, Hold, Registry, Reserved, Unauthenticated};
use super::stats::DaemonStats;
use crate::protocol::control::Limit;
use crate::session::limit::LimitRefusal;
use crate::session::link::conn::{fail, recv_msg, recv_small_by, send_msg, Control};
use crate::session::SessionError;

/// The log line of a connection that failed before a session started:
/// a client without the key (or speaking another version) is the
/// daemon's refusal, not the peer's.
pub(super) fn connection_failed(peer: SocketAddr, e: &SessionError) -> String {
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
pub(super) const PREAUTH_WINDOW_MAX: Duration = Duration::from_secs(5);

/// A control connection that said Hello, with its deadlines: `auth_by` for
/// its proof, `request_by` for its request (--handshake-timeout from
/// connecting), and its place among the unauthenticated, given up only
/// with a good proof: one that fails keeps it until the connection closes.
pub(super) struct Opening {
    pub(super) hello: crate::protocol::handshake::Hello,
    pub(super) auth_by: Instant,
    pub(super) request_by: Instant,
    pub(super) unauthenticated: Option<Unauthenticated>,
}

pub(super) fn connection(
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
            let hello = StreamHello {
                session_id,
                index: stream_index,
                proof,
            };
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
pub(super) fn control(
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
    // Nothing to admit: the daemon says what it is, and the session ends.
    if kind == Kind::Info {
        log(Level::Info, &format!("{peer}: {}", kind.started(&req)));
        return super::info::info_session(s, cfg, registry).or_else(|e| refused(s, e));
    }
    // Its own data streams may be connected already (protocol 13 connects
    // them while the session is set up): they are not others' connections.
    let early = registry
        .stats
        .unauthenticated
        .held(super::admit::address_group(peer.ip()));
    let (_session, reserved) = match admit_session(&req, cfg, registry, early) {
        Ok(admitted) => admitted,
        Err(e) => return refused(s, e),
    };
    log(Level::Info, &format!("{peer}: {}", kind.started(&req)));
    let started = Instant::now();
    let session = Session {
        req: &req,
        buffers: reserved.count,
        keys: &keys,
        cfg,
        registry,
        log,
    };
    let run = run_session(s, &session, peer, log);
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
            log_end(log, peer, kind, &e);
        }
    }
    Ok(())
}

/// A session that did not end as it should, in the log: a client's stop
/// (Ctrl-C) said as that, anything else as a failure.
pub(super) fn log_end(log: &Log, peer: SocketAddr, kind: Kind, e: &SessionError) {
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
pub(super) enum Kind {
    /// The client sends files to the daemon.
    Push,
    /// The client fetches files from the daemon.
    Pull,
    /// `bench --net`: frames only, no files.
    Bench,
    /// `bench --net --udp`: datagrams, no data streams.
    Udp,
    /// `urmove info`: the daemon says what it is; nothing moves.
    Info,
}

impl Kind {
    pub(super) fn of(req: &SessionRequest) -> Kind {
        match req.direction {
            Direction::Pull => Kind::Pull,
            Direction::Bench | Direction::BenchReverse => Kind::Bench,
            Direction::Udp | Direction::UdpReverse => Kind::Udp,
            Direction::Push => Kind::Push,
            Direction::Info => Kind::Info,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Push => "push",
            Kind::Pull => "pull",
            Kind::Bench => "bench",
            Kind::Udp => "UDP test",
            Kind::Info => "info",
        }
    }

    /// Which way the bytes of its end line went.
    pub(super) fn moved(self) -> &'static str {
        match self {
            Kind::Push => "received",
            Kind::Pull => "sent",
            Kind::Bench | Kind::Udp | Kind::Info => "moved",
        }
    }

    /// Its start line: what, where (the peer's words, escaped by the
    /// log), on how many data streams.
    pub(super) fn started(self, req: &SessionRequest) -> String {
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
            Kind::Info => "info asked".into(),
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

/// A data stream's hello: the session it joins, its index among the
/// session's streams, and its proof of the session's keys.
pub(super) struct StreamHello {
    pub(super) session_id: SessionId,
    pub(super) index: u16,
    pub(super) proof: Proof,
}

/// Hand a data stream that proves it belongs to a waiting session over to
/// it, with its place in the connection count; refuse any other.
pub(super) fn data_stream(
    mut s: Control,
    hello: StreamHello,
    conn: Hold,
    unauthenticated: Unauthenticated,
    registry: &Registry,
) -> Result<(), SessionError> {
    let StreamHello {
        session_id,
        index,
        proof,
    } = hello;
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

pub(super) fn random<const N: usize>() -> Result<[u8; N], SessionError> {
    let mut b = [0u8; N];
    sys::random_bytes(&mut b).map_err(|e| SessionError::io("random bytes", e))?;
    Ok(b)
}

/// The handshake after a Hello: challenge, the peer's proof by `auth_by`
/// (its place among the unauthenticated ends with a good one), welcome,
/// then its request by `request_by`; the session's own timeout applies
/// after it.
pub(super) fn authenticate(
    s: &mut Control,
    opening: &mut Opening,
    cfg: &RecvConfig,
) -> Result<(SessionKeys, SessionRequest), SessionError> {
    let mut hs = ServerHandshake::new(cfg.key, random()?, room(opening, cfg));
    let challenge = hs.on_hello(&opening.hello).map_err(SessionError::Auth)?;
    // The version decides what follows the proof (a Welcome in 12 only).
    s.set_protocol(hs.version());
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
        let got = crate::protocol::catalogue::def_of(auth.kind()).map_or("?", |d| d.name);
        return Err(SessionError::local(
            ErrorCode::Malformed,
            format!("expected the handshake's proof, not {got}"),
        ));
    };
    let (welcome, keys) = hs.on_auth(&auth, random()?).map_err(SessionError::Auth)?;
    opening.unauthenticated = None;
    // Protocol 12 tells the session id; 13 derived it from the nonces, and
    // the client's request follows its proof without waiting.
    if let Some(welcome) = welcome {
        send_msg(s, &Message::Welcome(welcome))?;
    }
    // Everything after the handshake is sealed with the session's keys.
    s.secure(&keys, false);
    let left = opening.request_by.saturating_duration_since(Instant::now());
    s.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
    let Message::Request(req) = recv_msg(s)? else {
        return Err(SessionError::local(
            ErrorCode::Malformed,
            "expected a session request",
        ));
    };
    let req = req
        .from_version(s.protocol())
        .map_err(|e| SessionError::local(ErrorCode::BadRequest, e.to_string()))?;
    s.set_read_timeout(Some(cfg.timeout.max(Duration::from_secs(1))))?;
    Ok((keys, req))
}

/// How many more connections from the client's address the daemon takes
/// before they authenticate (this one counted): a client of protocol 13
/// connects no more data streams than that while its session is set up.
fn room(opening: &Opening, cfg: &RecvConfig) -> u16 {
    let held = opening
        .unauthenticated
        .as_ref()
        .map_or(0, |u| u.stats.unauthenticated.held(u.group));
    let room = cfg.limits.unauthenticated_per_address.saturating_sub(held);
    u16::try_from(room).unwrap_or(u16::MAX)
}

/// Admit an authenticated client's request: within the daemon's stream,
/// encryption and block rules, a place among its sessions and buffers
/// reserved for it (both held while the session runs).
pub(super) fn admit_session<'r>(
    req: &SessionRequest,
    cfg: &RecvConfig,
    registry: &'r Registry,
    early: usize,
) -> Result<(Hold, Reserved<'r>), SessionError> {
    if req.streams == 0 || req.streams > STREAMS_MAX.min(cfg.limits.streams) {
        return Err(SessionError::TooManyStreams {
            asked: req.streams,
            max: cfg.limits.streams.min(STREAMS_MAX),
            ours: true,
        });
    }
    if cfg.require_encryption && !req.has(REQ_ENCRYPT) {
        return Err(SessionError::local(
            ErrorCode::BadRequest,
            "this daemon requires encrypted sessions: send with --encrypt",
        ));
    }
    let session =
        Hold::take(&registry.stats, Count::Sessions, cfg.limits.sessions).ok_or_else(|| {
            let running = registry.stats.sessions_active.load(Ordering::Acquire);
            SessionError::Limit(LimitRefusal::ours(
                Limit::Sessions,
                1,
                cfg.limits.sessions as u64,
                running as u64,
            ))
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
    streams_fit(req, cfg, &registry.stats, early)?;
    // As many buffers as it wants, or as many as are left, down to the
    // fewest it works with.
    Ok((session, reserve_buffers(registry, req)?))
}

/// A session's data streams fit under `--max-connections` beside the
/// connections open now (its own control connection among them), or it
/// is refused at once: its streams would be refused as they came.
pub(super) fn streams_fit(
    req: &SessionRequest,
    cfg: &RecvConfig,
    stats: &DaemonStats,
    early: usize,
) -> Result<(), SessionError> {
    if Kind::of(req) == Kind::Udp {
        return Ok(());
    }
    // Unauthenticated connections from the client's address, up to its
    // stream count, may be its own early streams: not counted.
    let (open, max) = (
        stats
            .connections_open
            .load(Ordering::Acquire)
            .saturating_sub(early.min(usize::from(req.streams))),
        cfg.limits.connections,
    );
    let room = max.saturating_sub(open);
    if usize::from(req.streams) <= room {
        return Ok(());
    }
    Err(SessionError::Limit(LimitRefusal::ours(
        Limit::Connections,
        u64::from(req.streams),
        max as u64,
        open.min(max) as u64,
    )))
}

/// A session the daemon admitted, as its kinds run it: what the client
/// asked, the frame buffers reserved for it, the session's keys, and the
/// daemon's config and registry.
#[derive(Clone, Copy)]
pub(super) struct Session<'a> {
    pub(super) req: &'a SessionRequest,
    pub(super) buffers: usize,
    pub(super) keys: &'a SessionKeys,
    pub(super) cfg: &'a RecvConfig,
    pub(super) registry: &'a Registry,
    pub(super) log: &'a Log,
}

impl Session<'_> {
    /// Register the session's buffers with `make(count)`: fewer, halved
    /// and logged, while the same user's other processes hold part of the
    /// locked memory (a non-root daemon, or `serve` through ssh).
    pub(super) fn register<T>(
        &self,
        make: impl Fn(usize) -> Result<T, SessionError>,
    ) -> Result<T, SessionError> {
        let mut halved = |n: usize| {
            (self.log)(
                Level::Warn,
                &format!(
                    "locked memory is shared by this user's processes (the kernel counts RLIMIT_MEMLOCK per user) and others hold part of it: the session goes on with {n} buffers"
                ),
            )
        };
        crate::session::register_halving(self.buffers, &mut halved, make).map(|(t, _)| t)
    }
}

/// Run an admitted session (from `peer`, logged to `log`) on its control
/// connection `s`: a bench, a pull or a push.
pub(super) fn run_session(
    s: &mut Control,
    session: &Session<'_>,
    peer: SocketAddr,
    log: &Log,
) -> Result<(u64, u64), SessionError> {
    let Session {
        req,
        buffers,
        keys,
        cfg,
        registry,
        ..
    } = *session;
    match Kind::of(req) {
        Kind::Bench => {
            let mut progress = RecvProgress::new(log, &registry.stats, peer, cfg.interval, None);
            bench_session(s, session, &mut progress)
        }
        Kind::Pull => {
            let id = registry.stats.begin(peer, "send");
            let r = pull_session(s, session);
            registry.stats.end(id);
            r
        }
        Kind::Push if req.has(crate::protocol::control::REQ_DRY_RUN) => survey_push(s, session),
        Kind::Push => push_session(s, session, peer, log),
        // Answered before any admission (`control`).
        Kind::Info => super::info::info_session(s, cfg, registry).map(|()| (0, 0)),
        Kind::Udp => {
            let side = crate::session::probe::udp_daemon::DaemonSide {
                enabled: cfg.udp,
                busy: &registry.udp_busy,
                listen_port: cfg.listen.port(),
                lanes: cfg.lanes,
                buffers,
                timeout: cfg.timeout,
                time_max: cfg.udp_time_max,
            };
            let (bytes, line) = crate::session::probe::udp_daemon::daemon(s, req, keys, &side)?;
            log(Level::Info, &format!("{peer}: UDP test: {line}"));
            bench_summary(s, bytes)?;
            Ok((0, bytes))
        }
    }
}
