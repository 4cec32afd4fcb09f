//! What a data stream's TCP is asked to do and what it learnt of its path:
//! the congestion control (`--cc`), per-stream pacing (`--rate-limit`),
//! and, from `TCP_INFO`, the round trip, retransmissions and whether a
//! socket buffer held the stream back, which names the sysctl to raise.

use std::io;
use std::os::fd::RawFd;

use serde::Serialize;

use super::sys;
use crate::coord::units::{self, RateUnit};

/// `--cc`: the congestion control of the data streams.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Congestion {
    /// BBR where the kernel has it (and lets this process pick it), else
    /// the kernel's default.
    #[default]
    Auto,
    /// This one, or fail.
    Named(String),
}

/// A `--cc` that names no congestion control algorithm.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a congestion control name (auto, bbr, cubic, reno, ...)")]
pub struct NotACongestionName(pub String);

/// The algorithm `Congestion::Auto` asks for: it keeps a long path full
/// through random loss, where loss-based algorithms halve their window.
const AUTO_PICK: &str = "bbr";

impl Congestion {
    /// `auto` or an algorithm's name as the kernel spells it.
    pub fn parse(s: &str) -> Result<Congestion, NotACongestionName> {
        let ok = !s.is_empty()
            && s.len() < 16
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        match s {
            "auto" => Ok(Congestion::Auto),
            _ if ok => Ok(Congestion::Named(s.to_owned())),
            _ => Err(NotACongestionName(s.to_owned())),
        }
    }

    /// Use it on the TCP socket `fd`; the algorithm in use after.
    pub fn apply(&self, fd: RawFd) -> io::Result<Option<String>> {
        match self {
            Congestion::Auto => {
                // Without it (no module, not allowed) the default stays.
                let _ = sys::set_congestion(fd, AUTO_PICK);
            }
            Congestion::Named(name) => {
                sys::set_congestion(fd, name).map_err(|e| explain(name, e))?;
            }
        }
        Ok(sys::congestion(fd))
    }
}

fn explain(name: &str, e: io::Error) -> io::Error {
    let why = match e.raw_os_error() {
        Some(libc::ENOENT) => format!(
            "this kernel has no congestion control '{name}' (it has: {})",
            sys::available_congestion().join(" ")
        ),
        Some(libc::EPERM) => format!(
            "congestion control '{name}' is not allowed for this user: run as root or add it to \
             net.ipv4.tcp_allowed_congestion_control"
        ),
        _ => format!("congestion control '{name}': {e}"),
    };
    io::Error::new(e.kind(), why)
}

/// Pace each socket to its share of `total_bytes_per_s` when `carrying`
/// of them carry the data (the others idle, or take a lost one's frames).
pub fn pace(fds: &[RawFd], total_bytes_per_s: f64, carrying: usize) -> io::Result<()> {
    let share = (total_bytes_per_s / carrying.max(1) as f64).ceil() as u64;
    for &fd in fds {
        sys::set_max_pacing_rate(fd, share)?;
    }
    Ok(())
}

/// Make the congestion control of each socket probe for bandwidth afresh,
/// keeping its window: streams that are to carry the share of streams
/// that stopped find the freed bandwidth within a few round trips, where
/// BBR left alone raises its estimate by a quarter every eight. Setting
/// the algorithm a socket has is a no-op in the kernel, so it passes
/// through `reno` (built in, and allowed to every user), which
/// re-initialises it. Switching back is normally allowed (the socket was
/// given it, or it is the default); where it is not (a route's `congctl`,
/// privileges since dropped) the socket is left on reno, and said so.
pub fn probe_again(fds: &[RawFd]) -> io::Result<()> {
    for &fd in fds {
        let Some(name) = sys::congestion(fd) else {
            continue;
        };
        if name != "reno" && sys::set_congestion(fd, "reno").is_ok() {
            sys::set_congestion(fd, &name).map_err(|e| {
                io::Error::new(e.kind(), format!("a stream left on reno, not {name}: {e}"))
            })?;
        }
    }
    Ok(())
}

/// A sending stream held back by a socket buffer for at least this share
/// of the time it had data in flight gets a warning.
const LIMITED_SHARE: f64 = 0.2;
/// ... once it has been busy this long (a connection's first round trips
/// are always window-limited while autotuning grows the buffers).
const LIMITED_AFTER_US: u64 = 1_000_000;
/// A send buffer this close to `tcp_wmem`'s maximum is held by it (below,
/// the receiver is what holds the data back, as on loopback).
const AT_MAX: f64 = 0.9;
/// ... and only when the stream moved at least this share of what that
/// maximum carries per round trip: below it, something else held the
/// stream (a receiver or disk slower than the link, the CPU), as on
/// loopback, where 4 MiB carries tens of Gbit/s per stream. The kernel
/// also counts waits under `TCP_NOTSENT_LOWAT` as send-buffer limited.
const NEAR_CAPACITY: f64 = 0.5;
/// A receive window limits a path this long (on a short one a full window
/// means a busy receiver, which a larger one would not help).
const RWND_RTT_MIN_US: u32 = 5_000;

/// What the data streams' TCP learnt of the path, for the report.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PathReport {
    /// The congestion control of the streams this side sends on.
    pub congestion_control: Option<String>,
    /// Smoothed round trip of the slowest stream, and the least seen.
    pub rtt_ms: f64,
    pub min_rtt_ms: f64,
    /// Segments and bytes sent again, all streams.
    pub retransmits: u64,
    pub bytes_retransmitted: u64,
    /// Of the sending streams' busy time, the share this host's send
    /// buffer and the peer's receive window held them back (worst stream).
    pub send_buffer_limited: f64,
    pub receive_window_limited: f64,
    /// This host's `net.ipv4.tcp_wmem` maximum, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_wmem_max: Option<u64>,
    /// Each data stream's own figures, in stream order (iperf3's per-stream
    /// lines and its Retr column).
    pub streams: Vec<StreamPath>,
}

/// One data stream's TCP, as `TCP_INFO` tells it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StreamPath {
    pub stream: u32,
    /// Bytes its TCP sent (retransmissions included).
    pub bytes_sent: u64,
    pub retransmits: u64,
    pub rtt_ms: f64,
    /// The cap `--rate-limit` put on its pacing (its share of the limit,
    /// `SO_MAX_PACING_RATE`), as the kernel holds it; absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pacing_cap_bits_per_s: Option<u64>,
}

/// Every stream's own `TCP_INFO` figures.
fn per_stream(fds: &[RawFd]) -> Vec<StreamPath> {
    fds.iter()
        .enumerate()
        .filter_map(|(i, &fd)| {
            sys::tcp_path(fd).map(|p| StreamPath {
                stream: i as u32,
                bytes_sent: p.bytes_sent,
                retransmits: u64::from(p.retransmits),
                rtt_ms: f64::from(p.rtt_us) / 1e3,
                pacing_cap_bits_per_s: (p.pacing_cap_bytes_per_s != u64::MAX)
                    .then(|| p.pacing_cap_bytes_per_s.saturating_mul(8)),
            })
        })
        .collect()
}

impl PathReport {
    /// Read the `TCP_INFO` of the streams this side sends on (those that
    /// carried at least a megabyte); `None` when it sends on none.
    pub fn of(fds: &[RawFd]) -> Option<PathReport> {
        let sending: Vec<(RawFd, sys::TcpPath)> = fds
            .iter()
            .filter_map(|&fd| sys::tcp_path(fd).map(|p| (fd, p)))
            .filter(|(_, p)| p.bytes_sent >= 1 << 20)
            .collect();
        let &(first, _) = sending.first()?;
        let mut r = PathReport {
            congestion_control: sys::congestion(first),
            tcp_wmem_max: tcp_mem_max("tcp_wmem"),
            streams: per_stream(fds),
            ..PathReport::default()
        };
        let mut min_rtt = u32::MAX;
        let wmem_max = r.tcp_wmem_max.unwrap_or(u64::MAX) as f64;
        for (fd, p) in sending {
            let at_max = sys::send_buffer(fd).is_some_and(|b| b as f64 >= AT_MAX * wmem_max)
                && near_capacity(&p, wmem_max);
            let long = p.min_rtt_us >= RWND_RTT_MIN_US;
            r.rtt_ms = r.rtt_ms.max(f64::from(p.rtt_us) / 1e3);
            if p.min_rtt_us > 0 {
                min_rtt = min_rtt.min(p.min_rtt_us);
            }
            r.retransmits += u64::from(p.retransmits);
            r.bytes_retransmitted += p.bytes_retrans;
            if p.busy_us >= LIMITED_AFTER_US {
                let busy = p.busy_us as f64;
                let share = |us: u64, counts: bool| if counts { us as f64 / busy } else { 0.0 };
                r.send_buffer_limited = r
                    .send_buffer_limited
                    .max(share(p.sndbuf_limited_us, at_max));
                r.receive_window_limited =
                    r.receive_window_limited.max(share(p.rwnd_limited_us, long));
            }
        }
        if min_rtt != u32::MAX {
            r.min_rtt_ms = f64::from(min_rtt) / 1e3;
        }
        Some(r)
    }

    /// What to raise, when a socket buffer held the streams back: the
    /// sysctl, what its maximum holds per stream at this round trip, and
    /// what one gigabit per second per stream would need.
    pub fn warning(&self) -> Option<String> {
        let rtt_s = (self.min_rtt_ms.max(self.rtt_ms * 0.5) / 1e3).max(1e-4);
        let per_gbit = units::bytes_binary((1e9 / 8.0 * rtt_s * 2.0) as u64);
        let tune = format!(
            "`urmove tune --rtt {:.0}ms` prints the profile",
            rtt_s * 1e3
        );
        if self.send_buffer_limited >= LIMITED_SHARE {
            let holds = self.tcp_wmem_max.map_or(String::new(), |m| {
                format!(
                    " (its maximum, {}, holds about {} per stream at {:.0} ms)",
                    units::bytes_binary(m),
                    units::rate(m as f64 / rtt_s, RateUnit::Gbit),
                    rtt_s * 1e3
                )
            });
            return Some(format!(
                "this host's send buffers held the data streams back {:.0}% of the time: raise \
                 net.ipv4.tcp_wmem{holds}; 1 Gbit/s per stream at this round trip needs {per_gbit}, \
                 or use more streams (-P); {tune}",
                self.send_buffer_limited * 100.0
            ));
        }
        if self.receive_window_limited >= LIMITED_SHARE {
            return Some(format!(
                "the receiver's window held the data streams back {:.0}% of the time: a receiver \
                 that reads slowly (a busy disk), or net.ipv4.tcp_rmem on the receiving host too \
                 small for this path (1 Gbit/s per stream at {:.0} ms needs {per_gbit}; more \
                 streams, -P, need less each); {tune} there",
                self.receive_window_limited * 100.0,
                rtt_s * 1e3
            ));
        }
        None
    }
}

/// Whether a stream moved (while busy) at least `NEAR_CAPACITY` of what a
/// send buffer of `buffer` bytes carries in the path's round trip: the
/// least one seen, when known. A round trip swollen by a queue (a slow
/// receiver's full socket, a bottleneck's buffer) measures the queue, not
/// a path a bigger buffer would fill: on loopback a receiver on one busy
/// thread made it 15 ms, and the warning named tcp_wmem for what the
/// receiver held back.
fn near_capacity(p: &sys::TcpPath, buffer: f64) -> bool {
    let rtt_us = if p.min_rtt_us > 0 {
        p.min_rtt_us
    } else {
        p.rtt_us
    };
    if p.busy_us == 0 || rtt_us == 0 {
        return false;
    }
    let moved = p.bytes_sent as f64 / (p.busy_us as f64 / 1e6);
    let carries = buffer / (f64::from(rtt_us) / 1e6);
    moved >= NEAR_CAPACITY * carries
}

/// The maximum (third value) of `net.ipv4.NAME` in this network namespace.
fn tcp_mem_max(name: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}"))
        .ok()?
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};

    /// BBR's pacing gain from `TCP_CC_INFO` (256 = 1.0; STARTUP's 2.89 is 739).
    fn bbr_pacing_gain(fd: RawFd) -> Option<u32> {
        let info: [u32; 5] = sys::get_opt(fd, libc::IPPROTO_TCP, libc::TCP_CC_INFO)?;
        Some(info[3])
    }

    const BBR_STARTUP_GAIN: u32 = 739;

    #[test]
    fn probing_again_restarts_the_algorithm_and_keeps_it() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let mut b = l.accept().unwrap().0;
        let fd = a.as_raw_fd();
        sys::set_congestion(fd, "cubic").unwrap();
        probe_again(&[fd]).unwrap();
        assert_eq!(sys::congestion(fd).as_deref(), Some("cubic"));
        if !sys::available_congestion().iter().any(|c| c == "bbr") {
            eprintln!("skipped the BBR half: this kernel has no bbr");
            return;
        }
        sys::set_congestion(fd, "bbr").unwrap();
        let reader = std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 20];
            while b.read(&mut buf).is_ok_and(|n| n > 0) {}
        });
        // Data until BBR has found the bandwidth and left STARTUP.
        let chunk = vec![7u8; 1 << 20];
        let until = Instant::now() + Duration::from_secs(10);
        while matches!(bbr_pacing_gain(fd), Some(0 | BBR_STARTUP_GAIN)) {
            assert!(Instant::now() < until, "BBR never left STARTUP");
            a.write_all(&chunk).unwrap();
        }
        let before = bbr_pacing_gain(fd);
        assert!(before.is_some_and(|g| g > 0), "{before:?}");
        probe_again(&[fd]).unwrap();
        assert_eq!(sys::congestion(fd).as_deref(), Some("bbr"));
        // Re-initialised: no gain until the next acknowledgement sets
        // STARTUP's.
        let after = bbr_pacing_gain(fd);
        assert!(
            matches!(after, Some(0 | BBR_STARTUP_GAIN)),
            "BBR was not restarted: gain {before:?} then {after:?}"
        );
        drop(a);
        reader.join().unwrap();
    }

    #[test]
    fn names_parse_and_nonsense_is_refused() {
        assert_eq!(Congestion::parse("auto"), Ok(Congestion::Auto));
        assert_eq!(
            Congestion::parse("cubic"),
            Ok(Congestion::Named("cubic".into()))
        );
        for bad in ["", "bbr;rm", "a-very-long-name-indeed", "bb r"] {
            assert!(Congestion::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_full_send_buffer_holds_a_stream_back_only_near_what_it_carries() {
        let stream = |mbit_per_s: f64, rtt_ms: u32| sys::TcpPath {
            rtt_us: rtt_ms * 1000,
            busy_us: 10_000_000,
            bytes_sent: (mbit_per_s * 1e6 / 8.0 * 10.0) as u64,
            ..sys::TcpPath::default()
        };
        // 256 KiB at 50 ms carries 42 Mb/s: a stream at 40 is held by it.
        assert!(near_capacity(&stream(40.0, 50), 262_144.0));
        // 4 MiB at 2 ms carries 17 Gb/s: a stream at 1.25 Gb/s (a disk
        // behind the receiver, on loopback) is held by something else.
        assert!(!near_capacity(&stream(1250.0, 2), 4_194_304.0));
        assert!(!near_capacity(&sys::TcpPath::default(), 4_194_304.0));
        // A loopback stream behind a slow receiver: 15 ms smoothed, its
        // path 50 us; 2.4 Gb/s is far from what 4 MiB carries in 50 us.
        let queued = sys::TcpPath {
            min_rtt_us: 50,
            ..stream(2400.0, 15)
        };
        assert!(!near_capacity(&queued, 4_194_304.0));
        // A long path: its least round trip is the path's.
        let long = sys::TcpPath {
            min_rtt_us: 48_000,
            ..stream(40.0, 50)
        };
        assert!(near_capacity(&long, 262_144.0));
    }

    #[test]
    fn a_buffer_limited_path_names_its_sysctl() {
        let send = PathReport {
            rtt_ms: 100.0,
            min_rtt_ms: 100.0,
            send_buffer_limited: 0.6,
            tcp_wmem_max: Some(4 << 20),
            ..PathReport::default()
        };
        let w = send.warning().unwrap();
        assert!(w.contains("net.ipv4.tcp_wmem") && w.contains("60%"), "{w}");
        assert!(w.contains("336 Mb/s") && w.contains("100 ms"), "{w}");
        assert!(w.contains("urmove tune --rtt 100ms"), "{w}");
        let recv = PathReport {
            receive_window_limited: 0.3,
            ..send.clone()
        };
        let recv = PathReport {
            send_buffer_limited: 0.0,
            ..recv
        };
        assert!(recv
            .warning()
            .unwrap()
            .contains("net.ipv4.tcp_rmem on the receiving host"));
        let fine = PathReport {
            send_buffer_limited: 0.1,
            ..send
        };
        assert_eq!(fine.warning(), None);
    }
}
