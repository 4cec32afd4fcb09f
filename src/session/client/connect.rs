//! Opening a client session: connect, authenticate both ways, send the
//! request, open and pace the data streams; this side's buffers fitted to
//! its locked-memory limit and registered before the daemon hears of it.

use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::Duration;

use crate::datapath::net::SendStats;
use crate::datapath::sys;
use crate::datapath::tcp::{self};
use crate::protocol::control::{Direction, ErrorCode, Message, SessionRequest};
use crate::protocol::frame::FrameKey;
use crate::protocol::handshake::{stream_proof, ClientHandshake, SessionKeys};
use crate::protocol::negotiate;

use super::watch::AUTO_START;
use crate::session::link::conn::{recv_msg, send_msg, Control};
use crate::session::roles::{hear, Before, Until};
use crate::session::SessionError;

use super::config::SendConfig;
use super::report::{SendObserver, SendReport};

pub(super) fn random<const N: usize>() -> Result<[u8; N], SessionError> {
    let mut b = [0u8; N];
    sys::random_bytes(&mut b).map_err(|e| SessionError::io("random bytes", e))?;
    Ok(b)
}

pub(super) fn connect(cfg: &SendConfig) -> Result<TcpStream, SessionError> {
    let what = format!("connecting to {}:{}", cfg.host, cfg.port);
    let addrs = (cfg.host.as_str(), cfg.port)
        .to_socket_addrs()
        .map_err(|e| SessionError::io(what.clone(), e))?;
    let mut last = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, cfg.connect_timeout) {
            Ok(s) => {
                s.set_nodelay(true)
                    .map_err(|e| SessionError::io(what.clone(), e))?;
                sys::set_dead_peer_timeout(s.as_raw_fd(), cfg.timeout);
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(SessionError::io(
        what,
        last.unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address")),
    ))
}

/// Connect, authenticate, ask for `req`, run `between` (sending or
/// receiving the manifest; it is given the session's frame key), wait
/// until the daemon is ready, and open the data streams, each proving it
/// belongs to the session, each from the core of the lane of `lanes` that
/// will carry it (see [`open_streams`]). From protocol 13 the streams'
/// connections are made while `between` and the daemon's preparation run,
/// as many as the daemon's room for unauthenticated connections allows,
/// and only their hellos wait for `Ready`.
pub(crate) fn open_session(
    cfg: &SendConfig,
    req: SessionRequest,
    lanes: usize,
    between: &mut dyn FnMut(&mut Control, &FrameKey) -> Result<(), SessionError>,
) -> Result<Opened, SessionError> {
    let streams_n = req.streams;
    // Where this side receives the data, --sock-buf is its receive buffer.
    let receiving = matches!(req.direction, Direction::Pull | Direction::BenchReverse);
    let begun = handshake(cfg, req)?;
    let (mut ctl, keys) = (begun.ctl, begun.keys);
    // The control connection still counts among the unauthenticated when
    // the first streams arrive, and other sessions from this address may
    // be setting up too: half the room at most.
    let early = begun.room.map_or(0, |r| streams_n.min(r / 2));
    let t0 = std::time::Instant::now();
    let (before, streams) = std::thread::scope(|scope| {
        let connecting = scope.spawn(|| connect_early(cfg, early, lanes));
        let before = between(&mut ctl, &crate::protocol::seal::frame_key(&keys))
            .and_then(|()| hear(&mut ctl, Until::Ready));
        let early = connecting.join().expect("a connecting thread panicked");
        // Silent so long, the daemon may be timing them out as strangers
        // (its window before a hello is 5 s at most): made anew instead.
        let early = match t0.elapsed() > EARLY_IDLE_MAX {
            true => Vec::new(),
            false => early,
        };
        let before = before?;
        Ok::<_, SessionError>((before, open_streams(cfg, &keys, streams_n, lanes, early)?))
    })?;
    if let Some(b) = cfg.sock_buf.filter(|_| receiving) {
        streams
            .iter()
            .for_each(|st| sys::set_recv_buffer(st.as_raw_fd(), b));
    }
    if let Some(rate) = cfg.rate_limit_bytes_per_s.filter(|_| !receiving) {
        let fds: Vec<_> = streams.iter().map(|s| s.as_raw_fd()).collect();
        let carrying = if cfg.auto_streams {
            AUTO_START
        } else {
            streams_n
        };
        tcp::pace(&fds, rate, carrying.into())
            .map_err(|e| SessionError::io("pacing the data streams", e))?;
    }
    Ok((ctl, streams, keys, before))
}

/// How long data streams connected early may wait for `Ready` and still
/// be used (a daemon gives a connection at most 5 s to say hello).
const EARLY_IDLE_MAX: Duration = Duration::from_secs(2);

/// Connect, authenticate both ways and send `req`: the control
/// connection, sealed from then on, and the session's keys.
pub(crate) fn begin(
    cfg: &SendConfig,
    req: SessionRequest,
) -> Result<(Control, SessionKeys), SessionError> {
    handshake(cfg, req).map(|b| (b.ctl, b.keys))
}

/// The features of `req` that came with a protocol version (a daemon of
/// an older one is refused them before the request).
fn features_of(req: &SessionRequest) -> Vec<negotiate::Feature> {
    match req.direction {
        Direction::Info => vec![negotiate::INFO],
        _ => Vec::new(),
    }
}

/// A session authenticated and asked for: its control connection (sealed,
/// speaking the version agreed), its keys, and from protocol 13 the
/// daemon's room for more unauthenticated connections from this address.
pub(crate) struct Begun {
    pub(crate) ctl: Control,
    pub(crate) keys: SessionKeys,
    pub(crate) room: Option<u16>,
}

/// The handshake and the request (see [`begin`]). From protocol 13 the
/// request follows the proof at once (no `Welcome` to wait for).
pub(crate) fn handshake(cfg: &SendConfig, req: SessionRequest) -> Result<Begun, SessionError> {
    let mut ctl = Control::new(connect(cfg)?);
    ctl.set_read_timeout(Some(cfg.timeout.max(Duration::from_secs(1))))?;
    let (mut hs, hello) = ClientHandshake::new(cfg.key, random()?);
    send_msg(&mut ctl, &Message::Hello(hello))?;
    let Message::Challenge(ch) = recv_msg(&mut ctl)? else {
        return Err(SessionError::Protocol(
            "expected the receiver's challenge".into(),
        ));
    };
    // A receiver without our key is told so before we hang up.
    let auth = hs
        .on_challenge(&ch)
        .map_err(|e| crate::session::link::conn::fail(&mut ctl, SessionError::Auth(e)))?;
    let answer = hs.answer().expect("a challenge taken has its answer");
    // The version decides what follows the proof (a Welcome in 12 only).
    ctl.set_protocol(answer.chosen);
    send_msg(&mut ctl, &Message::Auth(auth))?;
    let keys = if answer.chosen >= 13 {
        hs.keys_now().map_err(SessionError::Auth)?
    } else {
        let Message::Welcome(welcome) = recv_msg(&mut ctl)? else {
            return Err(SessionError::Protocol(
                "expected the receiver's welcome".into(),
            ));
        };
        hs.on_welcome(&welcome).map_err(SessionError::Auth)?
    };
    // Everything after the handshake is sealed with the session's keys.
    ctl.secure(&keys, true);
    // What this daemon's version lacks is refused before it is asked.
    for f in features_of(&req) {
        negotiate::check(f, answer.chosen).map_err(|e| {
            crate::session::link::conn::fail(
                &mut ctl,
                SessionError::local(ErrorCode::BadRequest, format!("the client stops: {e}")),
            );
            SessionError::Lacks(e)
        })?;
    }
    send_msg(&mut ctl, &Message::Request(req.for_version(answer.chosen)))?;
    Ok(Begun {
        ctl,
        keys,
        room: (answer.chosen >= 13).then_some(answer.room),
    })
}

/// Data streams connected at once: a round trip for four instead of one
/// each (16 streams over 100 ms took 1.6 s one after the other), and no
/// more unauthenticated connections at once than a daemon with a low
/// `--max-unauthenticated-per-address` (4) takes.
pub(super) const CONNECT_AT_ONCE: usize = 4;

/// Connect data streams `0..n` in parallel, each set up (`--sock-buf`,
/// `--cc`) and proving it belongs to the session; in index order. Those
/// `early` connected already (see [`connect_early`]) only say their hello;
/// one the daemon closed meanwhile is connected again. With several
/// `lanes`, stream `i` is connected from a thread on the core its
/// lane (`i mod lanes`) will be pinned to: a receiver on this host places
/// the stream by the core its packets came in on (`SO_INCOMING_CPU`, on
/// loopback the sender's), so it lands on the receiving lane beside the
/// lane that carries it, as its data will. (From an unpinned thread the
/// placement fell either way: `bench --net -P 4` on two lanes ran at 38
/// or at 52 Gbit/s.) Over a NIC the receiver's interrupt core decides and
/// this changes nothing.
pub(super) fn open_streams(
    cfg: &SendConfig,
    keys: &SessionKeys,
    n: u16,
    lanes: usize,
    early: Vec<TcpStream>,
) -> Result<Vec<TcpStream>, SessionError> {
    let mut streams = Vec::with_capacity(usize::from(n));
    for (i, st) in (0..n).zip(early) {
        // Nothing comes on a data stream before its hello: one with
        // something to read was refused (or closed) by the daemon, and is
        // connected again.
        let st = match sys::wait_readable(st.as_raw_fd(), 0) {
            true => connect_stream(cfg, i)?,
            false => st,
        };
        streams.push(say_hello(keys, i, st)?);
    }
    let rest: Vec<u16> = (streams.len() as u16..n).collect();
    for group in rest.chunks(CONNECT_AT_ONCE) {
        let opened = connect_each(cfg, group, lanes);
        for (&i, st) in group.iter().zip(opened) {
            streams.push(say_hello(keys, i, st?)?);
        }
    }
    Ok(streams)
}

/// Connect `indexes` in parallel, each from its lane's core (see
/// [`open_streams`]), each set up but not yet said hello on.
fn connect_each(
    cfg: &SendConfig,
    indexes: &[u16],
    lanes: usize,
) -> Vec<Result<TcpStream, SessionError>> {
    std::thread::scope(|scope| {
        let each: Vec<_> = indexes
            .iter()
            .map(|&i| {
                scope.spawn(move || {
                    if lanes > 1 {
                        let _ = crate::datapath::topology::pin_worker(usize::from(i) % lanes);
                    }
                    connect_stream(cfg, i)
                })
            })
            .collect();
        each.into_iter()
            .map(|h| h.join().expect("a connecting thread panicked"))
            .collect()
    })
}

/// Data streams `0..n` connected at once while the session is set up
/// (protocol 13), those that connected, in index order up to the first
/// that did not (it and the rest are connected after `Ready`).
fn connect_early(cfg: &SendConfig, n: u16, lanes: usize) -> Vec<TcpStream> {
    let indexes: Vec<u16> = (0..n).collect();
    connect_each(cfg, &indexes, lanes)
        .into_iter()
        .map_while(Result::ok)
        .collect()
}

/// Connect data stream `i` and set it up (`--sock-buf`, `--cc`).
fn connect_stream(cfg: &SendConfig, i: u16) -> Result<TcpStream, SessionError> {
    let st = connect(cfg)?;
    if let Some(b) = cfg.sock_buf {
        set_sock_buf(&st, b);
    }
    cfg.congestion
        .apply(st.as_raw_fd())
        .map_err(|e| SessionError::io(format!("data stream {i}"), e))?;
    Ok(st)
}

/// Say data stream `i`'s hello: the session it belongs to and its proof.
fn say_hello(keys: &SessionKeys, i: u16, st: TcpStream) -> Result<TcpStream, SessionError> {
    let mut hello = Control::new(st);
    send_msg(
        &mut hello,
        &Message::StreamHello {
            session_id: keys.session_id,
            stream_index: i,
            proof: stream_proof(keys, i),
        },
    )?;
    Ok(hello.into_tcp())
}

/// A session ready for data: the control connection, the data streams,
/// the keys, and the entries the receiver said it will not create.
pub(crate) type Opened = (Control, Vec<TcpStream>, SessionKeys, Before);

/// This side's buffers (`per_stream` a stream plus `extra`) fitted to its
/// locked-memory limit, saying what was lowered: the configuration with
/// the block size the session will ask for, and the buffer count.
pub(crate) fn fit(
    cfg: &SendConfig,
    per_stream: usize,
    extra: usize,
    block_option: &str,
    obs: &mut dyn SendObserver,
) -> Result<(SendConfig, usize), SessionError> {
    // Streams share the buffers: `-P auto` takes what its start needs.
    let streams = if cfg.auto_streams {
        AUTO_START
    } else {
        cfg.streams
    };
    let want = crate::session::buffer_count(streams as usize, cfg.block_size, per_stream, extra);
    let f = crate::session::fit_buffers(
        want,
        cfg.block_size,
        crate::session::memlock_budget(),
        block_option,
    )?;
    if let Some(note) = &f.note {
        obs.notice(note);
    }
    let cfg = SendConfig {
        block_size: f.block,
        ..cfg.clone()
    };
    Ok((cfg, f.count))
}

/// A shard splits the manifest by its blocks, as every other shard must:
/// frames the locked-memory limit made smaller than `--block` would split
/// it otherwise, so a shard refuses them (saying which `--block` fits).
/// `cfg` and `count` as [`fit`] made them of `asked`.
pub(crate) fn fit_shard(
    asked: &SendConfig,
    cfg: SendConfig,
    count: usize,
) -> Result<(SendConfig, usize), SessionError> {
    if asked.shard.is_none() || cfg.block_size == asked.block_size {
        return Ok((cfg, count));
    }
    Err(SessionError::local(
        ErrorCode::BadRequest,
        format!(
            "--shard: this host's locked-memory limit fits only {} KiB frames, and every shard must split the transfer by the same --block ({} KiB here): give every shard --block {}K, or raise the limit (LimitMEMLOCK=, CAP_IPC_LOCK)",
            cfg.block_size >> 10,
            asked.block_size >> 10,
            cfg.block_size >> 10
        ),
    ))
}

/// Register this side's `buffers` with `make(count)`, halving the count
/// while the kernel refuses them for want of locked memory: it counts
/// RLIMIT_MEMLOCK per user, so this user's other transfers may hold part
/// of what [`fit`] counted on. The count registered comes back too.
pub(crate) fn register_fitted<T>(
    buffers: usize,
    obs: &mut dyn SendObserver,
    make: impl Fn(usize) -> Result<T, SessionError>,
) -> Result<(T, usize), SessionError> {
    let mut halved = |n: usize| {
        obs.notice(&format!(
            "locked memory is shared by this user's processes (the kernel counts RLIMIT_MEMLOCK per user) and others hold part of it: going on with {n} buffers"
        ))
    };
    crate::session::register_halving(buffers, &mut halved, make)
}

pub(crate) fn note_zero_copy(
    report: &mut SendReport,
    stats: &SendStats,
    obs: &mut dyn SendObserver,
) {
    report.zero_copy_sends = stats.zc_sends;
    report.zero_copy_copied = stats.zc_copied;
    report.zero_copy_fell_back = stats.zc_fell_back;
    report.zero_copy_skipped = stats.zc_skipped;
    if let Some(why) = stats.zc_skipped {
        obs.detail(&format!("zero-copy sends not tried: {why}"));
    }
    if stats.zc_fell_back {
        obs.detail(
            "zero-copy sends were copied by the kernel (loopback or veth): fell back to plain send",
        );
    }
}

pub(super) fn set_sock_buf(s: &TcpStream, bytes: usize) {
    sys::set_send_buffer(s.as_raw_fd(), bytes);
}
