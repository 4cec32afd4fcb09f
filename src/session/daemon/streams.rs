//! A session's data streams as the daemon collects them: each proves it
//! belongs, arrives on the session's channel, and is held against the
//! connection limit until the session drops it; the wait ends early when
//! the client leaves or a stream was turned away at the limit.

use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::datapath::sys;
use crate::protocol::control::{ErrorCode, Message};

use super::connection::Session;
use super::registry::{Arrived, Hold, Pending};
use crate::session::link::conn::{recv_msg, send_msg, Control};
use crate::session::SessionError;

/// A session's data streams, in index order. Each stays counted against
/// `--max-connections` until the session drops them.
pub(super) struct Streams {
    pub(super) streams: Vec<TcpStream>,
    pub(super) _conns: Vec<Hold>,
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
pub(super) const CONTROL_WATCH_INTERVAL: Duration = Duration::from_millis(100);

/// Register the session, say Ready, and wait for the data streams its
/// request asked for, each of which proved it belongs here when it
/// connected.
pub(super) fn collect_streams(
    s: &mut Control,
    session: &Session<'_>,
) -> Result<Streams, SessionError> {
    let Session {
        req,
        keys,
        cfg,
        registry,
        ..
    } = *session;
    let count = req.streams;
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
pub(super) struct Awaited<'a> {
    pub(super) count: u16,
    pub(super) wait: Duration,
    pub(super) refused: (&'a AtomicU64, usize),
}

/// How long a session still waits for its streams once the daemon turned
/// a connection away at its limit (which may have been one of them).
pub(super) const REFUSED_STREAM_GRACE: Duration = Duration::from_secs(1);

/// Take the data streams as they arrive until all are here or the wait
/// is up. A client that closes its control connection or gives up (its
/// `Error`) meanwhile ends the wait at once, and so does a stream turned
/// away at the connection limit (the client is told so, at once).
pub(super) fn wait_for_streams(
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

pub(super) fn limit_refused(missing: usize, max: usize) -> SessionError {
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
pub(super) fn watch_control(s: &mut Control, deadline: Instant) -> Result<(), SessionError> {
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
