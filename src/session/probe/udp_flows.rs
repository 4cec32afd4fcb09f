//! A UDP test's flows: the sending side's connected sockets, paced to the
//! rate asked (`Sender`), and the counting side's sockets on one port,
//! their tallies shared over lanes (`Counter`).

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::datapath::udp::{self as wire, Counts, Tagger, Tally};
use crate::protocol::control::UdpCount;

use super::udp_daemon::HELLO_FLOW;
use crate::session::link::lanes::{self, Lane, Lanes};
use crate::session::SessionError;

/// Flows of a side split over its lanes: each lane's flows (session
/// numbers) and their sockets.
pub(super) fn split(plan: &[Lane], fds: Vec<OwnedFd>) -> Vec<Vec<(u32, OwnedFd)>> {
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
    pub(super) parts: Vec<Vec<(u32, OwnedFd)>>,
    pub(crate) size: usize,
    pub(crate) run: usize,
    pub(crate) gso: bool,
    pub(super) rate: Option<f64>,
    pub(super) flows: usize,
}

impl Sender {
    pub(crate) fn connect(
        peer: SocketAddr,
        flows: u16,
        size: usize,
        rate: Option<f64>,
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
pub(super) fn numbered(part: &[(u32, OwnedFd)]) -> (Vec<u32>, Vec<RawFd>) {
    part.iter().map(|(n, f)| (*n, f.as_raw_fd())).unzip()
}

/// The counting side of a test: sockets bound to one port, spread over
/// lanes, each lane with its tallies of every flow.
pub(crate) struct Counter {
    pub(super) plan: Vec<Lane>,
    pub(super) parts: Vec<Vec<(u32, OwnedFd)>>,
    pub(crate) port: u16,
    /// Every flow's tally, one for all lanes: a copy of a datagram that
    /// another lane's socket takes (from another port) is still a copy.
    pub(super) counts: Mutex<Counts>,
    pub(super) size: usize,
    pub(super) reads: usize,
}

impl Counter {
    /// Bind to `at` (port 0: any) for `flows` flows of `size`-byte
    /// datagrams, with `buffers` receive buffers in all.
    pub(crate) fn bind(
        at: SocketAddr,
        flows: u16,
        size: usize,
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
    pub(super) fn hello(&self, to: SocketAddr, tagger: &Tagger) -> Result<(), SessionError> {
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
