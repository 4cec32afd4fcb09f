//! `bench --net --udp`: UDP flows to (or, `--reverse`, from) a daemon
//! started with `--udp`, as `iperf3 -u` and HPCBENCH test a link: the
//! sending side paces datagrams ([`crate::datapath::udp`]), the counting
//! side counts them by sequence number, and the daemon reports its side's
//! counts every interval on the control connection. The datagrams travel
//! on the listen port's number in UDP, tagged under a key of the session
//! (a stranger's are counted apart, never as the test's).
//!
//! The control exchange (protocol 8; reversed, protocol 12), after the
//! request: client `UdpPlan` → daemon `UdpReady`; reversed, the client's
//! hello datagram from its counting port to the port `UdpReady` named,
//! until the daemon's first counts (the daemon sends to no address that
//! has not shown it holds the session's key); then every interval the daemon's
//! `UdpCounts` (what it counted, or reversed what it sent); the sending
//! side's `UdpEnd` with each flow's datagrams; after a grace for the last
//! datagrams, the counting side's `UdpCounts { done }`; the daemon's
//! `Summary`.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::datapath::udp::{self as wire, Tagger};
use crate::protocol::control::{Direction, ErrorCode, Message, SessionRequest, UdpCount};

use super::udp_daemon::HELLO_EVERY;
use super::udp_flows::{Counter, Sender};
use crate::session::client::config::SendConfig;
use crate::session::link::conn::{recv_msg, send_msg, Control};
use crate::session::link::lanes::{self, Lanes};
use crate::session::SessionError;

/// How long the counting side waits for the last datagrams after the
/// sending side said it ended.
pub const GRACE: Duration = Duration::from_millis(300);

/// What a UDP session asks of the daemon's buffer memory, per flow.
pub const BUFFER_BYTES: u32 = 64 << 10;

/// What a UDP test is to do.
#[derive(Debug, Clone)]
pub struct UdpTest {
    pub flows: u16,
    /// Datagram payload bytes; `None`: what the path carries.
    pub size: Option<usize>,
    /// Bytes a second in all; `None`: as fast as the sender can.
    pub rate: Option<f64>,
    pub time: Duration,
    pub interval: Duration,
    pub reverse: bool,
    pub lanes: Lanes,
}

/// An interval's (or the whole test's) figures, as iperf3 -u and
/// HPCBENCH print them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct UdpFigures {
    pub start_s: f64,
    pub end_s: f64,
    pub offered_bits_per_s: f64,
    pub received_bits_per_s: f64,
    pub sent: u64,
    pub received: u64,
    pub lost: u64,
    pub loss_percent: f64,
    pub out_of_order: u64,
    pub duplicates: u64,
    pub jitter_ms: f64,
}

/// A UDP test's report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct UdpReport {
    pub command: &'static str,
    pub status: &'static str,
    pub error: Option<String>,
    pub flows: u16,
    pub size: usize,
    /// Datagrams this side writes at once (a GSO run; 1 without), when
    /// this side sends.
    pub datagrams_per_write: Option<usize>,
    pub gso: Option<bool>,
    pub rate_asked_bits_per_s: Option<f64>,
    pub lanes: usize,
    pub intervals: Vec<UdpFigures>,
    pub summary: UdpFigures,
    pub per_flow: Vec<UdpFigures>,
    /// Datagrams whose tag did not check (a stranger's): not counted.
    pub foreign: u64,
}

/// Every flow's counts at a moment of the test.
#[derive(Debug, Clone, Default)]
pub(super) struct Snapshot {
    pub(super) at_s: f64,
    pub(super) flows: Vec<UdpCount>,
}

/// The figures between two snapshots of `size`-byte datagrams; `last`:
/// the whole test, where what was not received of what was sent is lost.
pub(super) fn figures(from: &Snapshot, to: &Snapshot, size: usize, last: bool) -> UdpFigures {
    let d = |f: fn(&UdpCount) -> u64| -> u64 {
        let sum = |s: &Snapshot| s.flows.iter().map(f).sum::<u64>();
        sum(to).saturating_sub(sum(from))
    };
    let dt = (to.at_s - from.at_s).max(1e-9);
    let (sent, received) = (d(|c| c.sent), d(|c| c.received));
    let expected = if last { sent } else { d(|c| c.expected) };
    let lost = expected.saturating_sub(received);
    let jitters: Vec<u64> = to
        .flows
        .iter()
        .filter(|c| c.received > 0)
        .map(|c| c.jitter_ns)
        .collect();
    let jitter = jitters.iter().sum::<u64>() as f64 / jitters.len().max(1) as f64;
    UdpFigures {
        start_s: from.at_s,
        end_s: to.at_s,
        offered_bits_per_s: (sent * size as u64 * 8) as f64 / dt,
        received_bits_per_s: d(|c| c.bytes) as f64 * 8.0 / dt,
        sent,
        received,
        lost,
        loss_percent: if expected == 0 {
            0.0
        } else {
            lost as f64 * 100.0 / expected as f64
        },
        out_of_order: d(|c| c.out_of_order),
        duplicates: d(|c| c.duplicates),
        jitter_ms: jitter / 1e6,
    }
}

/// The tags of a session's datagrams.
pub(super) fn tagger(keys: &crate::protocol::handshake::SessionKeys) -> Tagger {
    let k = crate::protocol::seal::frame_key(keys);
    Tagger::new(k.k0, k.k1)
}

/// The daemon's address as `cfg` names it.
pub fn resolve(cfg: &SendConfig) -> Result<SocketAddr, SessionError> {
    let what = format!("resolving {}", cfg.host);
    (cfg.host.as_str(), cfg.port)
        .to_socket_addrs()
        .map_err(|e| SessionError::io(what.clone(), e))?
        .next()
        .ok_or_else(|| SessionError::local(ErrorCode::BadRequest, format!("{what}: no address")))
}

/// The datagram size of a test to `peer`: `asked`, or what the path
/// carries in one datagram; an asked size the path cannot carry whole
/// (it would go in IP fragments, one lost fragment losing the datagram)
/// or below the header is refused, saying why.
pub fn datagram_size(peer: SocketAddr, asked: Option<usize>) -> Result<usize, SizeRefused> {
    let probe = wire::sending_socket(peer, asked.unwrap_or(wire::HEADER))
        .and_then(|(fd, _)| wire::payload_fits(&fd, peer.is_ipv6()))
        .map_err(|error| SizeRefused::Path { peer, error })?;
    match asked {
        None => Ok(probe),
        Some(size) if size < wire::HEADER => Err(SizeRefused::BelowHeader { size }),
        Some(size) if size > probe => Err(SizeRefused::Fragmented {
            size,
            peer,
            most: probe,
        }),
        Some(s) => Ok(s),
    }
}

/// Why a UDP test cannot send datagrams of the size asked.
#[derive(Debug, thiserror::Error)]
pub enum SizeRefused {
    /// The path's MTU could not be read.
    #[error("the path to {peer}: {error}")]
    Path {
        peer: SocketAddr,
        error: std::io::Error,
    },
    #[error(
        "--size {size}: a datagram holds at least its {}-byte header",
        wire::HEADER
    )]
    BelowHeader { size: usize },
    #[error("--size {size}: the path to {peer} carries at most {most} bytes in one datagram (its MTU less the IP and UDP headers); a larger one would go in IP fragments, lost whole with any one of them")]
    Fragmented {
        size: usize,
        peer: SocketAddr,
        most: usize,
    },
}

/// The peer's control messages as a thread reads them.
pub(super) type Events = Receiver<Result<Message, SessionError>>;

/// A thread that reads the peer's control messages into a channel until
/// the last one this side expects (`last`) or an error, which it passes
/// on; then it lets the connection be.
pub(super) fn reader(ctl: &Control, last: fn(&Message) -> bool) -> Result<Events, SessionError> {
    let mut c = ctl.try_clone()?;
    c.set_read_timeout(None)?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("urmove-udp-ctl".into())
        .spawn(move || loop {
            let m = recv_msg(&mut c);
            let end = m.as_ref().map_or(true, last);
            if tx.send(m).is_err() || end {
                return;
            }
        })
        .map_err(|e| SessionError::io("a control reader thread", e))?;
    Ok(rx)
}

/// The `UdpPlan` of test `t` of `size`-byte datagrams (`port`: where the
/// daemon sends, reversed).
pub(super) fn plan_msg(t: &UdpTest, size: usize, port: u16) -> Message {
    Message::UdpPlan {
        flows: t.flows,
        size: size as u32,
        rate: t.rate.map_or(0, |r| r.ceil() as u64),
        time_ms: t.time.as_millis() as u64,
        interval_ms: t.interval.as_millis().clamp(1, u128::from(u32::MAX)) as u32,
        port,
    }
}

/// The control connection's address at this end (`local`) or the peer's.
pub(super) fn address(ctl: &Control, local: bool) -> Result<SocketAddr, SessionError> {
    let t = ctl.tcp();
    let a = if local { t.local_addr() } else { t.peer_addr() };
    a.map_err(|e| SessionError::io("the control connection", e))
}

/// The counting side's last word: every flow's counts with what the
/// sending side said it `sent`, told the peer; those counts and the
/// foreign datagrams.
pub(super) fn tell_done(
    ctl: &mut Control,
    counter: &Counter,
    sent: &[u64],
) -> Result<(Vec<UdpCount>, u64), SessionError> {
    let (mut flows, foreign) = counter.snapshot();
    for (c, n) in flows.iter_mut().zip(sent) {
        c.sent = *n;
    }
    let done = Message::UdpCounts {
        done: true,
        foreign,
        flows: flows.clone(),
    };
    send_msg(ctl, &done)?;
    Ok((flows, foreign))
}

pub(super) fn unexpected(what: &str) -> SessionError {
    SessionError::Protocol(format!("unexpected message {what}"))
}

/// `bench --net --udp`: run test `t` against the daemon `cfg` names,
/// calling `on` with each interval's figures; the report.
pub fn run_udp(
    cfg: &SendConfig,
    t: &UdpTest,
    interrupt: &AtomicBool,
    on: &mut dyn FnMut(&UdpFigures),
) -> Result<UdpReport, SessionError> {
    let server = resolve(cfg)?;
    let size = datagram_size(server, t.size)
        .map_err(|m| SessionError::local(ErrorCode::BadRequest, m.to_string()))?;
    let req = SessionRequest {
        direction: if t.reverse {
            Direction::UdpReverse
        } else {
            Direction::Udp
        },
        streams: t.flows,
        block_size: BUFFER_BYTES,
        flags: 0,
        path: String::new(),
        owner: [0; 32],
        rate_limit: t.rate.map_or(0, |r| r.ceil() as u64),
        filter: Vec::new(),
        time_ms: 0,
    };
    let (mut ctl, keys) = crate::session::client::connect::begin(cfg, req)?;
    let mut report = UdpReport {
        command: if t.reverse {
            "bench --net --udp --reverse"
        } else {
            "bench --net --udp"
        },
        status: "ok",
        flows: t.flows,
        size,
        rate_asked_bits_per_s: t.rate.map(|r| r * 8.0),
        ..UdpReport::default()
    };
    let mut run = Run {
        ctl: &mut ctl,
        tagger: tagger(&keys),
        t,
        size,
        interrupt,
        on,
        report: &mut report,
    };
    let (ended, events) = if t.reverse {
        run.reverse()?
    } else {
        // Where the control connection went (of the names' addresses).
        let ip = address(run.ctl, false)?.ip();
        run.forward(ip)?
    };
    run.conclude(ended, &events);
    Ok(report)
}

/// A client's test while it runs.
pub(super) struct Run<'a> {
    pub(super) ctl: &'a mut Control,
    pub(super) tagger: Tagger,
    pub(super) t: &'a UdpTest,
    pub(super) size: usize,
    pub(super) interrupt: &'a AtomicBool,
    pub(super) on: &'a mut dyn FnMut(&UdpFigures),
    pub(super) report: &'a mut UdpReport,
}

/// What a test ended with: the counts of every flow (`sent` filled in),
/// the foreign datagrams, and when the sending ended (seconds in).
pub(super) struct Ended {
    pub(super) flows: Vec<UdpCount>,
    pub(super) foreign: u64,
    pub(super) end: f64,
}

impl Run<'_> {
    /// One more interval between the `last` snapshot and `now`.
    pub(super) fn interval(&mut self, last: &mut Snapshot, now: Snapshot) {
        let f = figures(last, &now, self.size, false);
        (self.on)(&f);
        self.report.intervals.push(f);
        *last = now;
    }

    pub(super) fn ready(&mut self, port: u16) -> Result<u16, SessionError> {
        send_msg(self.ctl, &plan_msg(self.t, self.size, port))?;
        match recv_msg(self.ctl)? {
            Message::UdpReady { port } => Ok(port),
            m => Err(crate::session::link::conn::unexpected(self.ctl, &m)),
        }
    }

    /// This side sends to the daemon's `ip`; the daemon counts.
    pub(super) fn forward(&mut self, ip: IpAddr) -> Result<(Ended, Events), SessionError> {
        let port = self.ready(0)?;
        let t = self.t;
        let sender = Sender::connect(
            SocketAddr::new(ip, port),
            t.flows,
            self.size,
            t.rate,
            t.lanes,
        )?;
        (self.report.gso, self.report.datagrams_per_write) = (Some(sender.gso), Some(sender.run));
        self.report.lanes = sender.plan.len();
        let sent: Vec<AtomicU64> = (0..t.flows).map(|_| AtomicU64::new(0)).collect();
        let stop = AtomicBool::new(false);
        let events = reader(self.ctl, |m| matches!(m, Message::Summary { .. }))?;
        let start = Instant::now();
        let tagger = self.tagger.clone();
        std::thread::scope(|s| {
            let sending = s.spawn(|| sender.send(&tagger, t.time, &stop, &sent));
            let r = self.hear_counts(&events, start, &sending, &stop, &sent);
            stop.store(true, Ordering::Release);
            let span = sending.join().expect("the sending lanes panicked")?;
            // The offered rate over the time it sent, not until this
            // side noticed it had ended.
            r.map(|ended| Ended { end: span, ..ended })
        })
        .map(|ended| (ended, events))
    }

    /// The daemon's counts as they come, each an interval, until its last;
    /// the sending side's end told it when it comes.
    pub(super) fn hear_counts(
        &mut self,
        events: &Events,
        start: Instant,
        sending: &std::thread::ScopedJoinHandle<'_, Result<f64, SessionError>>,
        stop: &AtomicBool,
        sent: &[AtomicU64],
    ) -> Result<Ended, SessionError> {
        let mut last = Snapshot::default();
        let mut ended: Option<f64> = None;
        let now_sent = || {
            sent.iter()
                .map(|n| n.load(Ordering::Relaxed))
                .collect::<Vec<_>>()
        };
        loop {
            if self.interrupt.load(Ordering::Relaxed) {
                stop.store(true, Ordering::Release);
            }
            if sending.is_finished() && ended.is_none() {
                ended = Some(start.elapsed().as_secs_f64());
                send_msg(self.ctl, &Message::UdpEnd { sent: now_sent() })?;
            }
            let (done, foreign, mut flows) = match events.recv_timeout(Duration::from_millis(50)) {
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(unexpected("(none: the daemon left)"))
                }
                Ok(m) => match m? {
                    Message::UdpCounts {
                        done,
                        foreign,
                        flows,
                    } => (done, foreign, flows),
                    m => return Err(crate::session::link::conn::unexpected(self.ctl, &m)),
                },
            };
            for (c, n) in flows.iter_mut().zip(now_sent()) {
                c.sent = n;
            }
            if done {
                let end = ended.unwrap_or_else(|| start.elapsed().as_secs_f64());
                return Ok(Ended {
                    flows,
                    foreign,
                    end,
                });
            }
            let at_s = start.elapsed().as_secs_f64();
            self.interval(&mut last, Snapshot { at_s, flows });
        }
    }

    /// The daemon sends to this side, which counts.
    pub(super) fn reverse(&mut self) -> Result<(Ended, Events), SessionError> {
        let t = self.t;
        let local = address(self.ctl, true)?;
        let buffers = 16 * lanes::count(t.lanes, usize::from(t.flows), usize::from(t.flows));
        let counter = Counter::bind(
            SocketAddr::new(local.ip(), 0),
            t.flows,
            self.size,
            t.lanes,
            buffers,
        )?;
        self.report.lanes = counter.plan.len();
        let door = SocketAddr::new(address(self.ctl, false)?.ip(), self.ready(counter.port)?);
        let events = reader(self.ctl, |m| matches!(m, Message::Summary { .. }))?;
        let stop = AtomicBool::new(false);
        let start = Instant::now();
        let tagger = self.tagger.clone();
        let hello = || counter.hello(door, &tagger);
        let (sent, end) = counter.count(&tagger, &stop, || {
            self.hear_sent(&events, start, &counter, &hello)
        })??;
        let (flows, foreign) = tell_done(self.ctl, &counter, &sent)?;
        // The daemon sends for the test's time (its end is heard later).
        let end = end.min(t.time.as_secs_f64());
        Ok((
            Ended {
                flows,
                foreign,
                end,
            },
            events,
        ))
    }

    /// The daemon's sent counts as they come, each an interval with this
    /// side's counts, until its end (then a grace for the last
    /// datagrams): each flow's datagrams sent and when the sending ended.
    pub(super) fn hear_sent(
        &mut self,
        events: &Events,
        start: Instant,
        counter: &Counter,
        hello: &dyn Fn() -> Result<(), SessionError>,
    ) -> Result<(Vec<u64>, f64), SessionError> {
        let mut last = Snapshot::default();
        // The daemon sends once it heard from this side's port; until its
        // first word, said again now and then (a datagram may be lost).
        let mut heard = false;
        let mut said = Instant::now();
        hello()?;
        loop {
            if self.interrupt.load(Ordering::Relaxed) {
                return Err(SessionError::local(ErrorCode::Io, "interrupted"));
            }
            if !heard && said.elapsed() >= HELLO_EVERY {
                hello()?;
                said = Instant::now();
            }
            let m = match events.recv_timeout(Duration::from_millis(20)) {
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(unexpected("(none: the daemon left)"))
                }
                Ok(m) => m?,
            };
            heard = true;
            match m {
                Message::UdpCounts { flows: sent, .. } => {
                    let (mut flows, _) = counter.snapshot();
                    for (c, s) in flows.iter_mut().zip(&sent) {
                        c.sent = s.sent;
                    }
                    let at_s = start.elapsed().as_secs_f64();
                    self.interval(&mut last, Snapshot { at_s, flows });
                }
                Message::UdpEnd { sent } => {
                    let end = start.elapsed().as_secs_f64();
                    std::thread::sleep(GRACE);
                    return Ok((sent, end));
                }
                m => return Err(crate::session::link::conn::unexpected(self.ctl, &m)),
            }
        }
    }

    /// The summary and each flow's figures from what the test `ended`
    /// with, once the daemon confirms it.
    pub(super) fn conclude(&mut self, ended: Ended, events: &Events) {
        let Ended {
            flows,
            foreign,
            end,
        } = ended;
        let zero = Snapshot {
            at_s: 0.0,
            flows: vec![UdpCount::default(); flows.len()],
        };
        let size = self.size;
        let all = Snapshot {
            at_s: end,
            flows: flows.clone(),
        };
        self.report.summary = figures(&zero, &all, size, true);
        self.report.per_flow = flows
            .iter()
            .map(|c| {
                let one = |f: Vec<UdpCount>| Snapshot {
                    at_s: end,
                    flows: f,
                };
                let mut from = one(vec![UdpCount::default()]);
                from.at_s = 0.0;
                figures(&from, &one(vec![*c]), size, true)
            })
            .collect();
        self.report.foreign = foreign;
        match events.recv_timeout(Duration::from_secs(30)) {
            Ok(Ok(Message::Summary { ok: true, .. })) => {}
            Ok(Ok(m)) => {
                let e = crate::session::link::conn::unexpected(self.ctl, &m);
                self.fail(e)
            }
            Ok(Err(e)) => self.fail(e),
            Err(_) => self.fail(unexpected("(none: the daemon said no summary)")),
        }
    }

    pub(super) fn fail(&mut self, e: SessionError) {
        self.report.status = e.code().name();
        self.report.error = Some(e.to_string());
    }
}
