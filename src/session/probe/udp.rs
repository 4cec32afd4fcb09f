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
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::datapath::udp::{self as wire, Counts, Tagger, Tally};
use crate::protocol::control::{Direction, ErrorCode, Message, SessionRequest, UdpCount};

use crate::session::client::config::SendConfig;
use crate::session::link::conn::{recv_msg, send_msg, Control};
use crate::session::link::lanes::{self, Lane, Lanes};
use crate::session::SessionError;

/// How long the counting side waits for the last datagrams after the
/// sending side said it ended.
pub const GRACE: Duration = Duration::from_millis(300);
/// The shortest report interval a daemon sends at.
const INTERVAL_MIN: Duration = Duration::from_millis(100);
/// The longest test a daemon runs.
const TIME_MAX: Duration = Duration::from_secs(24 * 3600);
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
struct Snapshot {
    at_s: f64,
    flows: Vec<UdpCount>,
}

/// The figures between two snapshots of `size`-byte datagrams; `last`:
/// the whole test, where what was not received of what was sent is lost.
fn figures(from: &Snapshot, to: &Snapshot, size: usize, last: bool) -> UdpFigures {
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
fn tagger(keys: &crate::protocol::handshake::SessionKeys) -> Tagger {
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
pub fn datagram_size(peer: SocketAddr, asked: Option<usize>) -> Result<usize, String> {
    let probe = wire::sending_socket(peer, asked.unwrap_or(wire::HEADER))
        .and_then(|(fd, _)| wire::payload_fits(&fd, peer.is_ipv6()))
        .map_err(|e| format!("the path to {peer}: {e}"))?;
    match asked {
        None => Ok(probe),
        Some(s) if s < wire::HEADER => Err(format!(
            "--size {s}: a datagram holds at least its {}-byte header",
            wire::HEADER
        )),
        Some(s) if s > probe => Err(format!(
            "--size {s}: the path to {peer} carries at most {probe} bytes in one datagram (its MTU less the IP and UDP headers); a larger one would go in IP fragments, lost whole with any one of them"
        )),
        Some(s) => Ok(s),
    }
}

/// The peer's control messages as a thread reads them.
type Events = Receiver<Result<Message, SessionError>>;

/// A thread that reads the peer's control messages into a channel until
/// the last one this side expects (`last`) or an error, which it passes
/// on; then it lets the connection be.
fn reader(ctl: &Control, last: fn(&Message) -> bool) -> Result<Events, SessionError> {
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

/// Flows of a side split over its lanes: each lane's flows (session
/// numbers) and their sockets.
fn split(plan: &[Lane], fds: Vec<OwnedFd>) -> Vec<Vec<(u32, OwnedFd)>> {
    let mut fds: Vec<Option<OwnedFd>> = fds.into_iter().map(Some).collect();
    plan.iter()
        .map(|l| {
            l.streams
                .iter()
                .map(|&s| (s, fds[s as usize].take().expect("a flow on one lane")))
                .collect()
        })
        .collect()
}

/// The sending side of a test: flows connected to `peer`, paced to
/// `rate` in all, sent until `until` or `stop`; each flow's datagrams
/// counted in `sent`.
pub(crate) struct Sender {
    pub(crate) plan: Vec<Lane>,
    parts: Vec<Vec<(u32, OwnedFd)>>,
    pub(crate) size: usize,
    pub(crate) run: usize,
    pub(crate) gso: bool,
    rate: Option<f64>,
    flows: usize,
}

impl Sender {
    pub(crate) fn connect(
        peer: SocketAddr,
        (flows, size, rate): (u16, usize, Option<f64>),
        lanes: Lanes,
    ) -> Result<Sender, SessionError> {
        let mut fds = Vec::new();
        let mut gso = true;
        for _ in 0..flows {
            let (fd, g) = wire::sending_socket(peer, size)
                .map_err(|e| SessionError::io(format!("a UDP flow to {peer}"), e))?;
            gso &= g;
            fds.push(fd);
        }
        let n = lanes::count(lanes, usize::from(flows), usize::from(flows));
        let plan = lanes::plan(n, usize::from(flows));
        let flow_rate = rate.map(|r| r / f64::from(flows));
        Ok(Sender {
            parts: split(&plan, fds),
            plan,
            size,
            run: wire::run_length(size, flow_rate, gso),
            gso,
            rate,
            flows: usize::from(flows),
        })
    }

    /// Send on every lane until `time` is up or `stop` (which a lane's
    /// failure sets too): each flow's datagrams counted in `sent`.
    pub(crate) fn send(
        self,
        tagger: &Tagger,
        time: Duration,
        stop: &AtomicBool,
        sent: &[AtomicU64],
    ) -> Result<f64, SessionError> {
        let epoch = Instant::now();
        let until = epoch + time;
        let (flows, size, run, rate) = (self.flows, self.size, self.run, self.rate);
        let results = lanes::run(&self.plan, self.parts, &|lane, part| {
            let share = lane.streams.len() as f64 / flows as f64;
            let plan = wire::SendPlan {
                tagger,
                size,
                run,
                rate: rate.map(|r| r * share),
                epoch,
                until,
                stop,
            };
            let (numbers, fds) = numbered(&part);
            let r = wire::send_flows(&fds, &numbers, &plan, sent);
            lanes::StopOthers(stop).on(r.map_err(SessionError::from))
        });
        // How long it sent: what its rate is offered over.
        lanes::all_ok(results).map(|_| epoch.elapsed().as_secs_f64())
    }
}

/// A lane's flow numbers and their sockets' descriptors.
fn numbered(part: &[(u32, OwnedFd)]) -> (Vec<u32>, Vec<RawFd>) {
    part.iter().map(|(n, f)| (*n, f.as_raw_fd())).unzip()
}

/// The counting side of a test: sockets bound to one port, spread over
/// lanes, each lane with its tallies of every flow.
pub(crate) struct Counter {
    plan: Vec<Lane>,
    parts: Vec<Vec<(u32, OwnedFd)>>,
    pub(crate) port: u16,
    /// Every flow's tally, one for all lanes: a copy of a datagram that
    /// another lane's socket takes (from another port) is still a copy.
    counts: Mutex<Counts>,
    size: usize,
    reads: usize,
}

impl Counter {
    /// Bind to `at` (port 0: any) for `flows` flows of `size`-byte
    /// datagrams, with `buffers` receive buffers in all.
    pub(crate) fn bind(
        at: SocketAddr,
        (flows, size): (u16, usize),
        lanes: Lanes,
        buffers: usize,
    ) -> Result<Counter, SessionError> {
        let n = lanes::count(lanes, usize::from(flows), usize::from(flows));
        let fds = wire::receiving_sockets(at, n)
            .map_err(|e| SessionError::io(format!("UDP port {}", at.port()), e))?;
        let port = wire::local_port(&fds[0]).map_err(|e| SessionError::io("UDP port", e))?;
        let plan = lanes::plan(n, n);
        let counts = Mutex::new(Counts {
            flows: vec![Tally::default(); usize::from(flows)],
            foreign: 0,
        });
        Ok(Counter {
            parts: split(&plan, fds),
            plan,
            port,
            counts,
            size,
            reads: wire::READS_PER_SOCKET.min(buffers / n).max(1),
        })
    }

    /// Tell the daemon's UDP port `to` from this counter's port that this
    /// side asked for the test's datagrams (see [`validated`]).
    fn hello(&self, to: SocketAddr, tagger: &Tagger) -> Result<(), SessionError> {
        let mut d = [0u8; wire::HEADER];
        let stamp = wire::Stamp {
            flow: HELLO_FLOW,
            seq: 0,
            sent_ns: 0,
        };
        tagger.stamp(&mut d, stamp);
        let fd = &self.parts[0][0].1;
        socket2::SockRef::from(fd)
            .send_to(&d, &to.into())
            .map(|_| ())
            .map_err(|e| SessionError::io(format!("a datagram to {to}"), e))
    }

    /// Every flow's counts now, and the foreign datagrams.
    pub(crate) fn snapshot(&self) -> (Vec<UdpCount>, u64) {
        let c = self.counts.lock().expect("counts");
        let flows = c.flows.iter().map(Tally::count).collect();
        let foreign = c.foreign;
        (flows, foreign)
    }

    /// Count on every lane until `stop`, while `meanwhile` runs here (its
    /// result returned once the lanes stopped: it sets `stop`).
    pub(crate) fn count<R>(
        &self,
        tagger: &Tagger,
        stop: &AtomicBool,
        meanwhile: impl FnOnce() -> R,
    ) -> Result<R, SessionError> {
        let epoch = Instant::now();
        let work = |_: &Lane, part: &Vec<(u32, OwnedFd)>| {
            let plan = wire::CountPlan {
                tagger,
                size: self.size,
                epoch,
                stop,
                reads: self.reads,
            };
            let (_, fds) = numbered(part);
            let r = wire::count_flows(&fds, &plan, &self.counts);
            lanes::StopOthers(stop).on(r.map_err(SessionError::from))
        };
        std::thread::scope(|scope| {
            let lanes: Vec<_> = self
                .plan
                .iter()
                .zip(&self.parts)
                .map(|(lane, part)| lanes::spawn(scope, lane, part, &work))
                .collect::<Result<_, _>>()
                .map_err(|e| SessionError::io("a counting lane", e))?;
            let r = meanwhile();
            stop.store(true, Ordering::Release);
            for l in lanes {
                l.join().expect("a counting lane panicked").0?;
            }
            Ok(r)
        })
    }
}

/// The `UdpPlan` of test `t` of `size`-byte datagrams (`port`: where the
/// daemon sends, reversed).
fn plan_msg(t: &UdpTest, size: usize, port: u16) -> Message {
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
fn address(ctl: &Control, local: bool) -> Result<SocketAddr, SessionError> {
    let t = ctl.tcp();
    let a = if local { t.local_addr() } else { t.peer_addr() };
    a.map_err(|e| SessionError::io("the control connection", e))
}

/// The counting side's last word: every flow's counts with what the
/// sending side said it `sent`, told the peer; those counts and the
/// foreign datagrams.
fn tell_done(
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

fn unexpected(what: &str) -> SessionError {
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
    let size =
        datagram_size(server, t.size).map_err(|m| SessionError::local(ErrorCode::BadRequest, m))?;
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
struct Run<'a> {
    ctl: &'a mut Control,
    tagger: Tagger,
    t: &'a UdpTest,
    size: usize,
    interrupt: &'a AtomicBool,
    on: &'a mut dyn FnMut(&UdpFigures),
    report: &'a mut UdpReport,
}

/// What a test ended with: the counts of every flow (`sent` filled in),
/// the foreign datagrams, and when the sending ended (seconds in).
type Ended = (Vec<UdpCount>, u64, f64);

impl Run<'_> {
    /// One more interval between the `last` snapshot and `now`.
    fn interval(&mut self, last: &mut Snapshot, now: Snapshot) {
        let f = figures(last, &now, self.size, false);
        (self.on)(&f);
        self.report.intervals.push(f);
        *last = now;
    }

    fn ready(&mut self, port: u16) -> Result<u16, SessionError> {
        send_msg(self.ctl, &plan_msg(self.t, self.size, port))?;
        match recv_msg(self.ctl)? {
            Message::UdpReady { port } => Ok(port),
            _ => Err(unexpected("before the UDP test was ready")),
        }
    }

    /// This side sends to the daemon's `ip`; the daemon counts.
    fn forward(&mut self, ip: IpAddr) -> Result<(Ended, Events), SessionError> {
        let port = self.ready(0)?;
        let t = self.t;
        let sender = Sender::connect(
            SocketAddr::new(ip, port),
            (t.flows, self.size, t.rate),
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
            let r = self.hear_counts(&events, start, (&sending, &stop, &sent));
            stop.store(true, Ordering::Release);
            let span = sending.join().expect("the sending lanes panicked")?;
            // The offered rate over the time it sent, not until this
            // side noticed it had ended.
            r.map(|(flows, foreign, _)| (flows, foreign, span))
        })
        .map(|ended| (ended, events))
    }

    /// The daemon's counts as they come, each an interval, until its last;
    /// the sending side's end told it when it comes.
    fn hear_counts(
        &mut self,
        events: &Events,
        start: Instant,
        (sending, stop, sent): (
            &std::thread::ScopedJoinHandle<'_, Result<f64, SessionError>>,
            &AtomicBool,
            &[AtomicU64],
        ),
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
                    _ => return Err(unexpected("during the UDP test")),
                },
            };
            for (c, n) in flows.iter_mut().zip(now_sent()) {
                c.sent = n;
            }
            if done {
                let end = ended.unwrap_or_else(|| start.elapsed().as_secs_f64());
                return Ok((flows, foreign, end));
            }
            let at_s = start.elapsed().as_secs_f64();
            self.interval(&mut last, Snapshot { at_s, flows });
        }
    }

    /// The daemon sends to this side, which counts.
    fn reverse(&mut self) -> Result<(Ended, Events), SessionError> {
        let t = self.t;
        let local = address(self.ctl, true)?;
        let buffers = 16 * lanes::count(t.lanes, usize::from(t.flows), usize::from(t.flows));
        let counter = Counter::bind(
            SocketAddr::new(local.ip(), 0),
            (t.flows, self.size),
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
            self.hear_sent(&events, start, (&counter, &hello))
        })??;
        let (flows, foreign) = tell_done(self.ctl, &counter, &sent)?;
        // The daemon sends for the test's time (its end is heard later).
        let end = end.min(t.time.as_secs_f64());
        Ok(((flows, foreign, end), events))
    }

    /// The daemon's sent counts as they come, each an interval with this
    /// side's counts, until its end (then a grace for the last
    /// datagrams): each flow's datagrams sent and when the sending ended.
    fn hear_sent(
        &mut self,
        events: &Events,
        start: Instant,
        (counter, hello): (&Counter, &dyn Fn() -> Result<(), SessionError>),
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
                _ => return Err(unexpected("during the UDP test")),
            }
        }
    }

    /// The summary and each flow's figures from what the test `ended`
    /// with, once the daemon confirms it.
    fn conclude(&mut self, (flows, foreign, end): Ended, events: &Events) {
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
            Ok(Ok(_)) => self.fail(unexpected("after the UDP test")),
            Ok(Err(e)) => self.fail(e),
            Err(_) => self.fail(unexpected("(none: the daemon said no summary)")),
        }
    }

    fn fail(&mut self, e: SessionError) {
        self.report.status = e.code().name();
        self.report.error = Some(e.to_string());
    }
}

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
struct Asked {
    flows: u16,
    size: usize,
    rate: Option<f64>,
    time: Duration,
    interval: Duration,
    port: u16,
}

/// Read and check the client's plan for the session `req` asked, no
/// longer than `time_max`.
fn asked(s: &mut Control, req: &SessionRequest, time_max: Duration) -> Result<Asked, SessionError> {
    let bad = |m: String| SessionError::local(ErrorCode::BadRequest, m);
    let Message::UdpPlan {
        flows,
        size,
        rate,
        time_ms,
        interval_ms,
        port,
    } = recv_msg(s)?
    else {
        return Err(unexpected("instead of a UDP test's plan"));
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
fn daemon_counts(
    s: &mut Control,
    a: &Asked,
    tagger: &Tagger,
    d: &DaemonSide<'_>,
) -> Result<(Vec<UdpCount>, u64), SessionError> {
    let at = SocketAddr::new(address(s, true)?.ip(), d.listen_port);
    let counter = Counter::bind(at, (a.flows, a.size), d.lanes, d.buffers)?;
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
                    _ => return Err(unexpected("during the UDP test")),
                },
            }
        }
    })??;
    tell_done(s, &counter, &sent)
}

/// Send to the client's port for the test's time, telling it every
/// interval what was sent, then the end; its counts, once it sends them.
fn daemon_sends(
    s: &mut Control,
    a: &Asked,
    tagger: &Tagger,
    d: &DaemonSide<'_>,
) -> Result<(Vec<UdpCount>, u64), SessionError> {
    // Only to the client's own address and the port it names, and only
    // once a datagram from there proved it holds the session's key.
    let asked_to = SocketAddr::new(address(s, false)?.ip(), a.port);
    datagram_size(asked_to, Some(a.size))
        .map_err(|m| SessionError::local(ErrorCode::BadRequest, m))?;
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
    let sender = Sender::connect(to, (a.flows, a.size, a.rate), d.lanes)?;
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
        _ => Err(unexpected("instead of the client's counts")),
    }
}

/// The flow number of the datagram a reversed test's client sends first,
/// from its counting port to the daemon's (see [`validated`]).
const HELLO_FLOW: u32 = u32::MAX;
/// How long a daemon waits for that datagram, at most.
const HELLO_WAIT: Duration = Duration::from_secs(10);
/// How often the client sends it until the daemon answers.
const HELLO_EVERY: Duration = Duration::from_millis(100);

/// Wait on `door` for the client's hello: a datagram from the control
/// connection's peer address tagged under the session's key, as QUIC
/// validates an address before it sends there. It is sent to where that
/// datagram came from (the port the plan named, or what a NAT between
/// made of it), never elsewhere; anything else is ignored. The address
/// to send to, or why none came.
fn validated(
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
fn tell_sent(
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
