//! UDP flows for `bench --net --udp`, on io_uring with registered buffers:
//! the sender writes runs of equal datagrams from its arena
//! (`IORING_OP_WRITE_FIXED` on a connected socket, one write a GSO run of
//! up to [`GSO_SEGMENTS_MAX`] datagrams where the kernel has
//! `UDP_SEGMENT`), paced to a rate; the receiver reads into its arena
//! (`IORING_OP_READ_FIXED`, a GRO run of datagrams a read with
//! `UDP_GRO`), checks each datagram's tag and counts it by sequence
//! number ([`Tally`]).
//!
//! Every datagram starts with a [`HEADER`]: its tag (SipHash-2-4 under
//! the session's key over the rest of the header), flow, length,
//! sequence number and send time. A datagram whose tag does not check
//! (a stranger's, another session's, a short one) is counted apart as
//! foreign, never as the flow's.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use siphasher::sip::SipHasher24;
use socket2::{Domain, Protocol, Socket, Type};

use super::ring::{Needed, Ring};
use super::{Arena, Error};
use crate::protocol::control::UdpCount;

/// Bytes of a datagram's header: tag, flow, length, sequence, send time.
pub const HEADER: usize = 32;
/// Most datagrams in one GSO write (the kernel's `UDP_MAX_SEGMENTS`).
pub const GSO_SEGMENTS_MAX: usize = 64;
/// Most payload bytes one UDP write or read carries (IPv4's limit).
pub const RUN_MAX: usize = 65_507;
/// Bytes of each receive buffer: a whole GRO run.
const READ_BUF: usize = 64 << 10;
/// Reads in flight on each receiving socket. One: reads in flight
/// together on a socket may complete in another order than they took its
/// datagrams (measured here: 84 datagrams a second counted late at
/// 1 Gbit/s with 16, none with 1), and a UDP test must count the path's
/// reordering, not its own. GRO makes a read a run of datagrams, and more
/// sockets (one a lane) more reads.
pub const READS_PER_SOCKET: usize = 1;
/// Writes in flight on each sending socket.
const WRITES_PER_SOCKET: usize = 4;
/// Receive buffer asked for on each receiving socket.
const RCVBUF: usize = 8 << 20;
/// A sender's runs are at most this long at its rate (then shorter runs:
/// a modest rate is paced datagram by datagram, not in bursts).
const RUN_TIME: Duration = Duration::from_millis(1);
/// Datagrams back a [`Tally`] tells a duplicate from a late arrival.
const WINDOW: u64 = 1 << 16;

const SOL_UDP: i32 = 17;
const UDP_SEGMENT: i32 = 103;
const UDP_GRO: i32 = 104;

/// The tag of a session's datagrams.
#[derive(Clone)]
pub struct Tagger {
    sip: SipHasher24,
}

/// What a datagram's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub flow: u32,
    pub seq: u64,
    pub sent_ns: u64,
}

impl Tagger {
    /// Tags under the session key `(k0, k1)`, apart from its frames' (the
    /// tagged bytes start with a label no frame term has).
    pub fn new(k0: u64, k1: u64) -> Tagger {
        Tagger {
            sip: SipHasher24::new_with_keys(k0, k1),
        }
    }

    fn tag(&self, rest: &[u8]) -> u64 {
        let mut b = [0u8; 8 + HEADER - 8];
        b[..8].copy_from_slice(b"urmv-udp");
        b[8..].copy_from_slice(rest);
        self.sip.hash(&b)
    }

    /// Write the header of datagram `d` (`d.len()` bytes) of flow `s`.
    pub fn stamp(&self, d: &mut [u8], s: Stamp) {
        d[8..12].copy_from_slice(&s.flow.to_le_bytes());
        let len = d.len() as u32;
        d[12..16].copy_from_slice(&len.to_le_bytes());
        d[16..24].copy_from_slice(&s.seq.to_le_bytes());
        d[24..32].copy_from_slice(&s.sent_ns.to_le_bytes());
        let tag = self.tag(&d[8..HEADER]);
        d[..8].copy_from_slice(&tag.to_le_bytes());
    }

    /// The header of datagram `d`, when its tag checks and its length is
    /// what it says.
    pub fn check(&self, d: &[u8]) -> Option<Stamp> {
        if d.len() < HEADER {
            return None;
        }
        let word = |at: usize| u64::from_le_bytes(d[at..at + 8].try_into().expect("8 bytes"));
        let half = |at: usize| u32::from_le_bytes(d[at..at + 4].try_into().expect("4 bytes"));
        if word(0) != self.tag(&d[8..HEADER]) || half(12) as usize != d.len() {
            return None;
        }
        Some(Stamp {
            flow: half(8),
            seq: word(16),
            sent_ns: word(24),
        })
    }
}

/// One flow's datagrams as they arrive: how many, which are late or
/// twice, and the jitter of their transit (RFC 3550's estimate).
#[derive(Debug, Clone)]
pub struct Tally {
    next: u64,
    received: u64,
    bytes: u64,
    late: u64,
    twice: u64,
    jitter_ns: f64,
    transit: Option<i64>,
    /// Which of the last [`WINDOW`] sequence numbers arrived.
    seen: Vec<u64>,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            next: 0,
            received: 0,
            bytes: 0,
            late: 0,
            twice: 0,
            jitter_ns: 0.0,
            transit: None,
            seen: vec![0; (WINDOW / 64) as usize],
        }
    }
}

impl Tally {
    fn bit(seq: u64) -> (usize, u64) {
        let at = seq % WINDOW;
        ((at / 64) as usize, 1 << (at % 64))
    }

    /// Datagram `seq` of `len` bytes arrived, `transit_ns` after it was
    /// sent (on two clocks: only differences count).
    pub fn add(&mut self, seq: u64, len: usize, transit_ns: i64) {
        if seq >= self.next {
            self.forget(self.next, seq);
            self.next = seq + 1;
        } else if self.next - seq > WINDOW {
            // Too late to tell from a second copy: late, never received
            // (a replay must not hide a loss).
            self.late += 1;
            return;
        } else {
            let (w, b) = Self::bit(seq);
            if self.seen[w] & b != 0 {
                self.twice += 1;
                return;
            }
            self.late += 1;
        }
        let (w, b) = Self::bit(seq);
        self.seen[w] |= b;
        self.received += 1;
        self.bytes += len as u64;
        if let Some(t) = self.transit {
            let d = (transit_ns.wrapping_sub(t)).unsigned_abs() as f64;
            self.jitter_ns += (d - self.jitter_ns) / 16.0;
        }
        self.transit = Some(transit_ns);
    }

    /// Sequence numbers `from..to` have not arrived (yet).
    fn forget(&mut self, from: u64, to: u64) {
        if to - from >= WINDOW {
            self.seen.iter_mut().for_each(|w| *w = 0);
            return;
        }
        for s in from..to {
            let (w, b) = Self::bit(s);
            self.seen[w] &= !b;
        }
    }

    /// The counts so far (`sent` is the sender's to say).
    pub fn count(&self) -> UdpCount {
        UdpCount {
            sent: 0,
            received: self.received,
            bytes: self.bytes,
            expected: self.next,
            out_of_order: self.late,
            duplicates: self.twice,
            jitter_ns: self.jitter_ns as u64,
        }
    }
}

fn set_int(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: `value` is a live c_int and its size is passed; the kernel
    // copies it and keeps no pointer.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn get_int(fd: RawFd, level: i32, name: i32) -> io::Result<i32> {
    let mut value: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live and writable for the call; the
    // kernel writes at most `len` bytes and keeps no pointer.
    let rc =
        unsafe { libc::getsockopt(fd, level, name, (&mut value as *mut i32).cast(), &mut len) };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

fn udp_socket(at: &SocketAddr) -> io::Result<Socket> {
    Socket::new(Domain::for_address(*at), Type::DGRAM, Some(Protocol::UDP))
}

/// `count` sockets bound to `addr` sharing it (`SO_REUSEPORT`: the kernel
/// spreads flows over them by their addresses), each with GRO where the
/// kernel has it and a large receive buffer.
pub fn receiving_sockets(addr: SocketAddr, count: usize) -> io::Result<Vec<OwnedFd>> {
    let mut all = Vec::with_capacity(count);
    let mut at = addr;
    for _ in 0..count.max(1) {
        let s = udp_socket(&at)?;
        s.set_reuse_port(true)?;
        grow_receive_buffer(&s);
        let _ = set_int(s.as_raw_fd(), SOL_UDP, UDP_GRO, 1);
        s.bind(&at.into())?;
        // An ephemeral port asked for: the others share the one it got.
        at = s.local_addr()?.as_socket().unwrap_or(at);
        all.push(OwnedFd::from(s));
    }
    Ok(all)
}

fn grow_receive_buffer(s: &Socket) {
    if s.set_recv_buffer_size(RCVBUF).is_ok() && s.recv_buffer_size().is_ok_and(|b| b >= RCVBUF) {
        return;
    }
    // Past net.core.rmem_max, where this process may (CAP_NET_ADMIN).
    let _ = set_int(
        s.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_RCVBUFFORCE,
        RCVBUF as i32,
    );
}

/// The port `fd` is bound to.
pub fn local_port(fd: &OwnedFd) -> io::Result<u16> {
    let s = socket2::SockRef::from(fd);
    let a = s.local_addr()?.as_socket();
    a.map(|a| a.port())
        .ok_or_else(|| io::Error::other("not an IP socket"))
}

/// A socket connected to `peer` for datagrams of `size` bytes: with GSO
/// (`UDP_SEGMENT`) when the kernel has it (`true`).
pub fn sending_socket(peer: SocketAddr, size: usize) -> io::Result<(OwnedFd, bool)> {
    let s = udp_socket(&peer)?;
    s.connect(&peer.into())?;
    let gso = set_int(s.as_raw_fd(), SOL_UDP, UDP_SEGMENT, size as i32).is_ok();
    Ok((OwnedFd::from(s), gso))
}

/// The largest datagram payload the route of connected socket `fd`
/// carries unfragmented (its path MTU less the IP and UDP headers).
pub fn payload_fits(fd: &OwnedFd, ipv6: bool) -> io::Result<usize> {
    let (level, name, ip) = if ipv6 {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU, 40)
    } else {
        (libc::IPPROTO_IP, libc::IP_MTU, 20)
    };
    let mtu = get_int(fd.as_raw_fd(), level, name)? as usize;
    Ok(mtu.saturating_sub(ip + 8).min(RUN_MAX))
}

/// Datagrams in one write of a sender of `size`-byte datagrams at `rate`
/// bytes a second (`None`: as fast as it can), with or without GSO.
pub fn run_length(size: usize, rate: Option<f64>, gso: bool) -> usize {
    if !gso {
        return 1;
    }
    let most = (RUN_MAX / size).clamp(1, GSO_SEGMENTS_MAX);
    let paced = rate.map_or(most, |r| {
        (r * RUN_TIME.as_secs_f64() / size as f64) as usize
    });
    paced.clamp(1, most)
}

/// What a sending lane needs besides its sockets.
pub struct SendPlan<'a> {
    pub tagger: &'a Tagger,
    pub size: usize,
    /// Datagrams a write ([`run_length`]).
    pub run: usize,
    /// This lane's rate in bytes a second; `None`: as fast as it can.
    pub rate: Option<f64>,
    /// Send times count from here.
    pub epoch: Instant,
    pub until: Instant,
    pub stop: &'a AtomicBool,
}

/// Send on `fds` (the sockets of flows `flows`, session numbers) until the
/// plan's time is up or it is stopped, counting each flow's datagrams
/// sent into `sent[flow]`.
pub fn send_flows(
    fds: &[RawFd],
    flows: &[u32],
    plan: &SendPlan<'_>,
    sent: &[AtomicU64],
) -> Result<(), Error> {
    let buf = (plan.run * plan.size).next_multiple_of(4096);
    let arena = Arena::new(buf, WRITES_PER_SOCKET * fds.len())?;
    let mut ring: Ring<u32> = Ring::new(
        (WRITES_PER_SOCKET * fds.len()) as u32,
        arena,
        fds,
        &[Needed::WRITE_FIXED],
    )?;
    fill(ring.arena());
    let mut s = Sending {
        seq: vec![0; fds.len()],
        bytes: 0,
        turn: 0,
        start: Instant::now(),
        batch: Vec::with_capacity(ring.capacity()),
    };
    while Instant::now() < plan.until && !plan.stop.load(Ordering::Relaxed) {
        s.step(&mut ring, flows, plan, sent)?;
    }
    submit(&mut ring, 0)?;
    while ring.in_flight() > 0 {
        submit(&mut ring, 1)?;
        s.reap(&mut ring, flows, plan, sent)?;
    }
    Ok(())
}

fn udp_error(op: &'static str, source: io::Error) -> Error {
    Error::Udp { op, source }
}

/// Submit the writes queued, waiting for `want` to complete.
fn submit(ring: &mut Ring<u32>, want: usize) -> Result<(), Error> {
    ring.submit_and_wait(want)
        .map(|_| ())
        .map_err(|e| udp_error("send", e))
}

/// Random bytes in every buffer, once: the datagrams' payloads.
fn fill(arena: &mut Arena) {
    let mut all = Vec::new();
    while let Some(mut l) = arena.take() {
        let at = (all.len() * l.capacity()) as u64;
        super::disk::fill_random(l.as_mut_slice(), 0x0DD, at, 0);
        all.push(l);
    }
    all.into_iter().for_each(|l| arena.give_back(l));
}

/// A sending lane's state.
struct Sending {
    seq: Vec<u64>,
    bytes: u64,
    turn: usize,
    start: Instant,
    batch: Vec<super::Completion<u32>>,
}

impl Sending {
    /// One write when the pace allows it, else a short wait.
    fn step(
        &mut self,
        ring: &mut Ring<u32>,
        flows: &[u32],
        plan: &SendPlan<'_>,
        sent: &[AtomicU64],
    ) -> Result<(), Error> {
        if let Some(wait) = self.ahead(plan) {
            submit(ring, 0)?;
            self.reap(ring, flows, plan, sent)?;
            std::thread::sleep(wait.min(RUN_TIME));
            return Ok(());
        }
        let mut lease = loop {
            if let Some(l) = ring.arena().take() {
                break l;
            }
            submit(ring, 1)?;
            self.reap(ring, flows, plan, sent)?;
        };
        let k = self.turn % flows.len();
        self.turn += 1;
        let now = plan.epoch.elapsed().as_nanos() as u64;
        let data = lease.as_mut_slice();
        for j in 0..plan.run {
            let d = &mut data[j * plan.size..(j + 1) * plan.size];
            let seq = self.seq[k] + j as u64;
            let (flow, sent_ns) = (flows[k], now);
            plan.tagger.stamp(d, Stamp { flow, seq, sent_ns });
        }
        self.seq[k] += plan.run as u64;
        self.bytes += (plan.run * plan.size) as u64;
        let len = (plan.run * plan.size) as u32;
        ring.write_fixed(k as u32, 0, lease, 0, len, k as u32);
        submit(ring, 0)?;
        self.reap(ring, flows, plan, sent)
    }

    /// How long until the pace allows the next write, if it does not now.
    fn ahead(&self, plan: &SendPlan<'_>) -> Option<Duration> {
        let rate = plan.rate?;
        let due = self.bytes as f64 / rate;
        let now = self.start.elapsed().as_secs_f64();
        (due > now).then(|| Duration::from_secs_f64(due - now))
    }

    /// Count the writes done; datagrams the kernel refused (nobody at the
    /// far port yet, no buffer) count as sent (and so lost), any other
    /// error ends the lane.
    fn reap(
        &mut self,
        ring: &mut Ring<u32>,
        flows: &[u32],
        plan: &SendPlan<'_>,
        sent: &[AtomicU64],
    ) -> Result<(), Error> {
        ring.reap(&mut self.batch);
        for c in self.batch.drain(..) {
            if let Some(l) = c.lease {
                ring.arena().give_back(l);
            }
            let k = c.tag as usize;
            let refused = [libc::ECONNREFUSED, libc::ENOBUFS, libc::EAGAIN];
            match c.result {
                n if n >= 0 => {
                    let n = n as u64 / plan.size as u64;
                    sent[flows[k] as usize].fetch_add(n, Ordering::Relaxed);
                }
                // Offered, never sent: sent and lost, as the sequence
                // numbers the receiver sees say.
                e if refused.contains(&-e) => {
                    sent[flows[k] as usize].fetch_add(plan.run as u64, Ordering::Relaxed);
                }
                e => return Err(udp_error("send", io::Error::from_raw_os_error(-e))),
            }
        }
        Ok(())
    }
}

/// What a counting lane needs besides its sockets.
pub struct CountPlan<'a> {
    pub tagger: &'a Tagger,
    pub size: usize,
    /// Receive times count from here.
    pub epoch: Instant,
    pub stop: &'a AtomicBool,
    /// Reads in flight on each socket.
    pub reads: usize,
}

/// Every flow's [`Tally`] on one counting lane, and the datagrams that
/// were nobody's.
#[derive(Debug, Default)]
pub struct Counts {
    pub flows: Vec<Tally>,
    pub foreign: u64,
}

/// Read datagrams on `fds` until stopped, each counted into `counts`
/// (`counts.flows` has a tally for every flow of the session).
pub fn count_flows(
    fds: &[RawFd],
    plan: &CountPlan<'_>,
    counts: &Mutex<Counts>,
) -> Result<(), Error> {
    let n = plan.reads * fds.len();
    let arena = Arena::new(READ_BUF, n)?;
    let mut ring: Ring<u32> = Ring::new(n as u32, arena, fds, &[Needed::READ_FIXED])?;
    for k in 0..fds.len() {
        for _ in 0..plan.reads {
            let l = ring.arena().take().expect("a buffer for each read");
            ring.read_fixed(k as u32, 0, l, 0, READ_BUF as u32, k as u32);
        }
    }
    let mut batch = Vec::with_capacity(ring.capacity());
    while !plan.stop.load(Ordering::Relaxed) {
        ring.submit_and_wait_for(1, Duration::from_millis(20))
            .map_err(|e| udp_error("receive", e))?;
        ring.reap(&mut batch);
        let at = plan.epoch.elapsed().as_nanos() as i64;
        let mut c = counts.lock().expect("counts");
        for done in batch.drain(..) {
            let l = done.lease.expect("a read's buffer");
            match done.result {
                n if n >= 0 => tally_run(&l.as_slice()[..n as usize], at, plan, &mut c),
                e if -e == libc::EINTR || -e == libc::EAGAIN => {}
                e => {
                    ring.arena().give_back(l);
                    return Err(udp_error("receive", io::Error::from_raw_os_error(-e)));
                }
            }
            ring.read_fixed(done.tag, 0, l, 0, READ_BUF as u32, done.tag);
        }
    }
    ring.cancel_all_and_drain();
    Ok(())
}

/// Count a read's datagrams (a GRO run: equal datagrams of `size`
/// bytes, the last perhaps shorter), received at `at`.
fn tally_run(run: &[u8], at: i64, plan: &CountPlan<'_>, c: &mut Counts) {
    for d in run.chunks(plan.size) {
        match plan.tagger.check(d) {
            Some(s) if (s.flow as usize) < c.flows.len() && d.len() == plan.size => {
                let transit = at.wrapping_sub(s.sent_ns as i64);
                c.flows[s.flow as usize].add(s.seq, d.len(), transit);
            }
            _ => c.foreign += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_checks_under_its_key_only() {
        let t = Tagger::new(1, 2);
        let mut d = vec![7u8; 1400];
        let s = Stamp {
            flow: 3,
            seq: 99,
            sent_ns: 12345,
        };
        t.stamp(&mut d, s);
        assert_eq!(t.check(&d), Some(s));
        assert_eq!(Tagger::new(1, 3).check(&d), None, "another key");
        assert_eq!(t.check(&d[..1399]), None, "a short datagram");
        let mut bent = d.clone();
        bent[16] ^= 1;
        assert_eq!(t.check(&bent), None, "a changed sequence number");
    }

    #[test]
    fn a_tally_counts_loss_reordering_and_duplicates() {
        let mut t = Tally::default();
        for seq in [0, 1, 3, 2, 2, 6, 5] {
            t.add(seq, 100, 1000);
        }
        let c = t.count();
        // 0..=6 expected; 4 missing; 2 twice; 2 and 5 late.
        assert_eq!(
            (
                c.expected,
                c.received,
                c.duplicates,
                c.out_of_order,
                c.bytes
            ),
            (7, 6, 1, 2, 600)
        );
        assert_eq!(c.jitter_ns, 0, "constant transit");
        // A jump past the window forgets what it knew.
        t.add(6 + 2 * WINDOW, 100, 1000);
        t.add(6 + WINDOW + 10, 100, 1000);
        assert_eq!(t.count().duplicates, 1);
        // A copy from before the window is late, never received again.
        let before = t.count().received;
        t.add(3, 100, 1000);
        assert_eq!((t.count().received, t.count().out_of_order), (before, 4));
    }

    #[test]
    fn jitter_follows_rfc_3550() {
        let mut t = Tally::default();
        t.add(0, 10, 1000);
        t.add(1, 10, 2600);
        // |D| = 1600: J = 1600 / 16.
        assert_eq!(t.count().jitter_ns, 100);
    }

    #[test]
    fn runs_fill_a_millisecond_at_the_rate_within_the_kernels_bounds() {
        assert_eq!(run_length(1472, None, true), 44);
        assert_eq!(run_length(1000, None, true), 64);
        assert_eq!(run_length(1472, None, false), 1);
        // 100 Mbit/s: 12.5 kB a millisecond, 8 datagrams of 1472 bytes.
        assert_eq!(run_length(1472, Some(12.5e6), true), 8);
        assert_eq!(run_length(1472, Some(1e3), true), 1);
    }

    #[test]
    fn datagrams_cross_loopback_through_the_rings_and_a_strangers_are_apart() {
        let stop = AtomicBool::new(false);
        let rx = receiving_sockets("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        let port = local_port(&rx[0]).unwrap();
        let peer: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let tagger = Tagger::new(5, 6);
        let size = 1400;
        let counts = Mutex::new(Counts {
            flows: vec![Tally::default(); 2],
            foreign: 0,
        });
        let epoch = Instant::now();
        let txs: Vec<(OwnedFd, bool)> = (0..2)
            .map(|_| sending_socket(peer, size).unwrap())
            .collect();
        let sent: Vec<AtomicU64> = (0..2).map(|_| AtomicU64::new(0)).collect();
        let fds: Vec<RawFd> = rx.iter().map(|f| f.as_raw_fd()).collect();
        let counting = CountPlan {
            tagger: &tagger,
            size,
            epoch,
            stop: &stop,
            reads: READS_PER_SOCKET,
        };
        std::thread::scope(|s| {
            let counting = s.spawn(|| count_flows(&fds, &counting, &counts));
            std::thread::sleep(Duration::from_millis(50));
            let stranger = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            for _ in 0..10 {
                stranger.send_to(&[0u8; 1400], peer).unwrap();
            }
            let gso = txs[0].1;
            let plan = SendPlan {
                tagger: &tagger,
                size,
                run: run_length(size, Some(20e6), gso),
                rate: Some(20e6),
                epoch,
                until: Instant::now() + Duration::from_millis(300),
                stop: &AtomicBool::new(false),
            };
            let fds: Vec<RawFd> = txs.iter().map(|(f, _)| f.as_raw_fd()).collect();
            send_flows(&fds, &[0, 1], &plan, &sent).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            stop.store(true, Ordering::Relaxed);
            counting.join().unwrap().unwrap();
        });
        let c = counts.into_inner().unwrap();
        assert_eq!(c.foreign, 10);
        for (k, t) in c.flows.iter().enumerate() {
            let n = sent[k].load(Ordering::Relaxed);
            // 20 MB/s for 0.3 s over two flows: about 2,100 each.
            assert!(n > 1000, "flow {k} sent {n}");
            let got = t.count();
            assert_eq!(
                (got.received, got.expected, got.duplicates),
                (n, n, 0),
                "flow {k}"
            );
        }
    }
}
