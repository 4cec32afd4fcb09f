//! The daemon's half of a UDP test: one at a time, within `udp_time_max`;
//! counting what the client sends, or (reversed) sending to the client's
//! own counting socket once a datagram carrying the session's token came
//! from it (`validated`), and telling what it sent every interval.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use crate::datapath::udp::{self as wire, Tagger};
use crate::protocol::control::{Direction, ErrorCode, Message, SessionRequest, UdpCount};

use super::udp::{
    address, datagram_size, figures, reader, tagger, tell_done, unexpected, Snapshot, GRACE,
};
use super::udp_flows::{Counter, Sender};
use crate::session::link::conn::{recv_msg, send_msg, Control};
use crate::session::link::lanes::Lanes;
use crate::session::SessionError;

/// The shortest report interval a daemon sends at.
pub(super) const INTERVAL_MIN: Duration = Duration::from_millis(100);

/// The longest test a daemon runs.
pub(super) const TIME_MAX: Duration = Duration::from_secs(24 * 3600);

/// A daemon's one UDP test at a time: held while it runs.
pub(crate) struct OneAtATime<'a>(&'a AtomicBool);

impl<'a> OneAtATime<'a> {
    pub(crate) fn take(busy: &'a AtomicBool) -> Result<Self, SessionError> {
        busy.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| OneAtATime(busy))
            .map_err(|_| {
                SessionError::local(
                    ErrorCode::Busy,
                    "another UDP test is running on this daemon (one at a time, on its port); try again when it ends",
                )
            })
    }
}

impl Drop for OneAtATime<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// A UDP test as the daemon was asked for it.
pub(super) struct Asked {
    pub(super) flows: u16,
    pub(super) size: usize,
    pub(super) rate: Option<f64>,
    pub(super) time: Duration,
    pub(super) interval: Duration,
    pub(super) port: u16,
}

/// Read and check the client's plan for the session `req` asked, no
/// longer than `time_max`.
pub(super) fn asked(
    s: &mut Control,
    req: &SessionRequest,
    time_max: Duration,
) -> Result<Asked, SessionError> {
    let bad = |m: String| SessionError::local(ErrorCode::BadRequest, m);
    let (flows, size, rate, time_ms, interval_ms, port) = match recv_msg(s)? {
        Message::UdpPlan {
            flows,
            size,
            rate,
            time_ms,
            interval_ms,
            port,
        } => (flows, size, rate, time_ms, interval_ms, port),
        m => return Err(crate::session::link::conn::unexpected(s, &m)),
    };
    if flows != req.streams {
        return Err(bad(format!(
            "{flows} UDP flows planned, {} asked",
            req.streams
        )));
    }
    let size = size as usize;
    if !(wire::HEADER..=wire::RUN_MAX).contains(&size) {
        return Err(bad(format!("a datagram of {size} bytes")));
    }
    let time = Duration::from_millis(time_ms);
    if time > time_max.min(TIME_MAX) {
        return Err(SessionError::local(
            ErrorCode::TooLarge,
            format!(
                "a UDP test of {} s asked; this daemon runs them for {} s at most (udp_time_max)",
                time.as_secs_f64(),
                time_max.min(TIME_MAX).as_secs_f64()
            ),
        ));
    }
    Ok(Asked {
        flows,
        size,
        rate: (rate > 0).then_some(rate as f64),
        time,
        interval: Duration::from_millis(u64::from(interval_ms)).max(INTERVAL_MIN),
        port,
    })
}

/// What a daemon needs of its own for a UDP test.
pub(crate) struct DaemonSide<'a> {
    pub(crate) enabled: bool,
    pub(crate) busy: &'a AtomicBool,
    pub(crate) listen_port: u16,
    pub(crate) lanes: Lanes,
    /// Receive buffers the session's memory holds.
    pub(crate) buffers: usize,
    /// Longest silence of a client.
    pub(crate) timeout: Duration,
    /// The longest test taken (`udp_time_max`).
    pub(crate) time_max: Duration,
}

/// The daemon's half of a UDP test on session `s`: count what the client
/// sends, or (reversed) send to it. The bytes received and a line for the
/// log saying what the test found.
pub(crate) fn daemon(
    s: &mut Control,
    req: &SessionRequest,
    keys: &crate::protocol::handshake::SessionKeys,
    d: &DaemonSide<'_>,
) -> Result<(u64, String), SessionError> {
    if !d.enabled {
        return Err(SessionError::local(
            ErrorCode::BadRequest,
            "this daemon takes no UDP tests: start it with --udp (or udp = true in its config file)",
        ));
    }
    let _one = OneAtATime::take(d.busy)?;
    // A client that stops reading fails its test within the timeout,
    // never holding the daemon's one UDP test.
    s.tcp()
        .set_write_timeout(Some(d.timeout.max(Duration::from_secs(1))))
        .map_err(|e| SessionError::io("the control connection", e))?;
    let a = asked(s, req, d.time_max)?;
    let tagger = tagger(keys);
    let done = if req.direction == Direction::UdpReverse {
        daemon_sends(s, &a, &tagger, d)
    } else {
        daemon_counts(s, &a, &tagger, d)
    };
    if done.is_err() {
        // The control reader, if it still waits, ends now (its thread
        // and descriptor with it).
        let _ = s.tcp().shutdown(std::net::Shutdown::Read);
    }
    let (flows, foreign) = done?;
    let zero = Snapshot {
        at_s: 0.0,
        flows: vec![UdpCount::default(); flows.len()],
    };
    let all = Snapshot {
        at_s: a.time.as_secs_f64(),
        flows,
    };
    let f = figures(&zero, &all, a.size, true);
    let bytes = all.flows.iter().map(|c| c.bytes).sum();
    let line = format!(
        "{} of {}-byte datagrams: {} sent, {} received, {} lost ({:.3}%), {} out of order, {} duplicates, jitter {:.3} ms, {} foreign datagrams ignored",
        crate::coord::units::count(u64::from(a.flows), "flow"), a.size, f.sent, f.received, f.lost, f.loss_percent, f.out_of_order, f.duplicates, f.jitter_ms, foreign
    );
    Ok((bytes, line))
}

/// Count the client's datagrams on the listen port's number until it says
/// it ended (and a grace), reporting every interval: every flow's counts.
pub(super) fn daemon_counts(
    s: &mut Control,
    a: &Asked,
    tagger: &Tagger,
    d: &DaemonSide<'_>,
) -> Result<(Vec<UdpCount>, u64), SessionError> {
    let at = SocketAddr::new(address(s, true)?.ip(), d.listen_port);
    let counter = Counter::bind(at, a.flows, a.size, d.lanes, d.buffers)?;
    send_msg(s, &Message::UdpReady { port: counter.port })?;
    let events = reader(s, |m| matches!(m, Message::UdpEnd { .. }))?;
    let stop = AtomicBool::new(false);
    let latest = Instant::now() + a.time + d.timeout;
    let sent = counter.count(tagger, &stop, || -> Result<Vec<u64>, SessionError> {
        let mut next = Instant::now() + a.interval;
        loop {
            let wait = next.saturating_duration_since(Instant::now());
            match events.recv_timeout(wait) {
                Err(RecvTimeoutError::Timeout) => {
                    let (flows, foreign) = counter.snapshot();
                    let done = false;
                    send_msg(
                        s,
                        &Message::UdpCounts {
                            done,
                            foreign,
                            flows,
                        },
                    )?;
                    next += a.interval;
                    if Instant::now() > latest {
                        return Err(SessionError::local(
                            ErrorCode::Io,
                            "the client never said its UDP test ended",
                        ));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(unexpected("(none: the client left)"))
                }
                Ok(m) => match m? {
                    Message::UdpEnd { sent } => {
                        std::thread::sleep(GRACE);
                        return Ok(sent);
                    }
                    m => return Err(crate::session::link::conn::unexpected(s, &m)),
                },
            }
        }
    })??;
    tell_done(s, &counter, &sent)
}

/// Send to the client's port for the test's time, telling it every
/// interval what was sent, then the end; its counts, once it sends them.
pub(super) fn daemon_sends(
    s: &mut Control,
    a: &Asked,
    tagger: &Tagger,
    d: &DaemonSide<'_>,
) -> Result<(Vec<UdpCount>, u64), SessionError> {
    // Only to the client's own address and the port it names, and only
    // once a datagram from there proved it holds the session's key.
    let asked_to = SocketAddr::new(address(s, false)?.ip(), a.port);
    datagram_size(asked_to, Some(a.size))
        .map_err(|m| SessionError::local(ErrorCode::BadRequest, m.to_string()))?;
    let door = std::net::UdpSocket::bind(SocketAddr::new(address(s, true)?.ip(), 0))
        .map_err(|e| SessionError::io("the UDP test's own port", e))?;
    let door_port = door
        .local_addr()
        .map_err(|e| SessionError::io("UDP port", e))?;
    send_msg(
        s,
        &Message::UdpReady {
            port: door_port.port(),
        },
    )?;
    let wait = d.timeout.min(HELLO_WAIT);
    let to = validated(&door, asked_to, tagger, wait)?;
    let sender = Sender::connect(to, a.flows, a.size, a.rate, d.lanes)?;
    let sent: Vec<AtomicU64> = (0..a.flows).map(|_| AtomicU64::new(0)).collect();
    let stop = AtomicBool::new(false);
    let now_sent = || {
        sent.iter()
            .map(|n| n.load(Ordering::Relaxed))
            .collect::<Vec<u64>>()
    };
    std::thread::scope(|scope| {
        let sending = scope.spawn(|| sender.send(tagger, a.time, &stop, &sent));
        let r = tell_sent(s, a.interval, &sending, &now_sent);
        stop.store(true, Ordering::Release);
        sending.join().expect("the sending lanes panicked")?;
        r
    })?;
    send_msg(s, &Message::UdpEnd { sent: now_sent() })?;
    match recv_msg(s)? {
        Message::UdpCounts {
            done: true,
            foreign,
            flows,
        } => Ok((flows, foreign)),
        m => Err(crate::session::link::conn::unexpected(s, &m)),
    }
}

/// The flow number of the datagram a reversed test's client sends first,
/// from its counting port to the daemon's (see [`validated`]).
pub(super) const HELLO_FLOW: u32 = u32::MAX;

/// How long a daemon waits for that datagram, at most.
pub(super) const HELLO_WAIT: Duration = Duration::from_secs(10);

/// How often the client sends it until the daemon answers.
pub(super) const HELLO_EVERY: Duration = Duration::from_millis(100);

/// Wait on `door` for the client's hello: a datagram from the control
/// connection's peer address tagged under the session's key, as QUIC
/// validates an address before it sends there. It is sent to where that
/// datagram came from (the port the plan named, or what a NAT between
/// made of it), never elsewhere; anything else is ignored. The address
/// to send to, or why none came.
pub(super) fn validated(
    door: &std::net::UdpSocket,
    asked_to: SocketAddr,
    tagger: &Tagger,
    wait: Duration,
) -> Result<SocketAddr, SessionError> {
    let until = Instant::now() + wait;
    let mut buf = [0u8; 2048];
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        door.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .map_err(|e| SessionError::io("the UDP test's own port", e))?;
        let Ok((n, from)) = door.recv_from(&mut buf) else {
            continue;
        };
        let hello = tagger
            .check(&buf[..n])
            .is_some_and(|st| st.flow == HELLO_FLOW);
        if hello && from.ip() == asked_to.ip() {
            return Ok(from);
        }
    }
    Err(SessionError::local(
        ErrorCode::Io,
        format!(
            "no datagram came from the client's UDP port ({asked_to}) with the session's token within {} s: the daemon sends only where the client's own socket wrote from (a firewall or NAT between drops it?)",
            wait.as_secs()
        ),
    ))
}

/// Every `interval` while `sending` runs, each flow's datagrams sent.
pub(super) fn tell_sent(
    s: &mut Control,
    interval: Duration,
    sending: &std::thread::ScopedJoinHandle<'_, Result<f64, SessionError>>,
    now_sent: &dyn Fn() -> Vec<u64>,
) -> Result<(), SessionError> {
    let mut next = Instant::now() + interval;
    while !sending.is_finished() {
        std::thread::sleep(Duration::from_millis(10));
        if Instant::now() < next {
            continue;
        }
        next += interval;
        let flows = now_sent()
            .into_iter()
            .map(|sent| UdpCount {
                sent,
                ..UdpCount::default()
            })
            .collect();
        let done = false;
        send_msg(
            s,
            &Message::UdpCounts {
                done,
                foreign: 0,
                flows,
            },
        )?;
    }
    Ok(())
}
