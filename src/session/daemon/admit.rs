//! Admission on the daemon's listener: how many connections an address may
//! hold before it has proved it has the key, refusing the rest at once, and
//! staying calm when `accept` keeps failing (out of descriptors).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::protocol::control::{encode, ErrorCode, Message};

use super::log::{Level, Log};

/// The first retry after a failed `accept` waits this long, each further
/// one twice as long as the one before...
pub(in crate::session) const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
/// ...up to this.
pub(in crate::session) const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// A warning that can repeat fast is logged at most once per this long.
pub(in crate::session) const LOG_REPEAT_INTERVAL: Duration = Duration::from_secs(10);

const _: () = assert!(ACCEPT_BACKOFF_MIN.as_nanos() < ACCEPT_BACKOFF_MAX.as_nanos());

/// The group an address is counted in: IPv4 per address, IPv6 per /64 (a
/// single host commonly holds a whole /64), IPv4-mapped IPv6 as IPv4.
pub(in crate::session) fn address_group(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !(u64::MAX as u128))),
        },
        v4 => v4,
    }
}

/// Connections that have not authenticated yet, per address group.
#[derive(Debug, Default)]
pub(in crate::session) struct PerAddress {
    counts: Mutex<HashMap<IpAddr, usize>>,
    total: AtomicUsize,
}

impl PerAddress {
    /// Count one more connection from `ip` if its group has fewer than
    /// `max`; returns the group to [`release`](Self::release) later.
    pub(in crate::session) fn try_add(&self, ip: IpAddr, max: usize) -> Option<IpAddr> {
        let group = address_group(ip);
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let n = counts.entry(group).or_default();
        if *n >= max {
            if *n == 0 {
                counts.remove(&group);
            }
            return None;
        }
        *n += 1;
        self.total.fetch_add(1, Ordering::AcqRel);
        Some(group)
    }

    pub(in crate::session) fn release(&self, group: IpAddr) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = counts.get_mut(&group) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&group);
            }
            self.total.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Unauthenticated connections from `group` now.
    pub(in crate::session) fn held(&self, group: IpAddr) -> usize {
        let counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts.get(&group).copied().unwrap_or(0)
    }

    /// Unauthenticated connections now, over all groups.
    pub(in crate::session) fn total(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }

    #[cfg(test)]
    fn groups(&self) -> usize {
        self.counts.lock().unwrap().len()
    }
}

/// Tell a connection the daemon does not take why, in one write that never
/// waits (best effort), and close it: no thread is kept for it.
pub(in crate::session) fn refuse_now(s: TcpStream, code: ErrorCode, message: String) {
    let mut s = s;
    if s.set_nonblocking(true).is_err() {
        return;
    }
    let _ = s.write(&encode(&Message::Error { code, message }));
    let _ = s.shutdown(std::net::Shutdown::Write);
    // Whatever the peer sent already would turn our close into a reset
    // that may overtake the reason: take it first.
    let mut sink = [0u8; 512];
    let _ = s.read(&mut sink);
}

/// Waits between retries of a failing `accept`: from
/// [`ACCEPT_BACKOFF_MIN`], doubling, up to [`ACCEPT_BACKOFF_MAX`].
#[derive(Debug, Default)]
pub(in crate::session) struct Backoff {
    delay: Option<Duration>,
}

impl Backoff {
    /// Another failure: how long to wait before the next try.
    pub(in crate::session) fn failed(&mut self) -> Duration {
        let d = self
            .delay
            .map_or(ACCEPT_BACKOFF_MIN, |d| (d * 2).min(ACCEPT_BACKOFF_MAX));
        self.delay = Some(d);
        d
    }

    pub(in crate::session) fn succeeded(&mut self) {
        self.delay = None;
    }
}

/// A log line that may repeat fast (accept failing, a flood of refusals):
/// written at most once per [`LOG_REPEAT_INTERVAL`], saying how many like
/// it were left out since the last one.
#[derive(Debug, Default)]
pub(in crate::session) struct Throttled {
    last: Option<Instant>,
    suppressed: u64,
}

impl Throttled {
    /// The line to write now for `msg`, or None when it is left out.
    pub(in crate::session) fn line(&mut self, now: Instant, msg: &str) -> Option<String> {
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < LOG_REPEAT_INTERVAL)
        {
            self.suppressed += 1;
            return None;
        }
        let line = match std::mem::take(&mut self.suppressed) {
            0 => msg.to_string(),
            n => format!(
                "{msg} (and {n} more like it in the last {} s, not logged)",
                LOG_REPEAT_INTERVAL.as_secs()
            ),
        };
        self.last = Some(now);
        Some(line)
    }

    pub(in crate::session) fn log(&mut self, log: &Log, level: Level, msg: &str) {
        if let Some(line) = self.line(Instant::now(), msg) {
            log(level, &line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_counts_per_64_and_mapped_ipv4_as_ipv4() {
        let g = |s: &str| address_group(s.parse().unwrap()).to_string();
        assert_eq!(g("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::");
        assert_eq!(g("2001:db8:1:2:ffff:ffff:ffff:ffff"), "2001:db8:1:2::");
        assert_ne!(g("2001:db8:1:3::1"), g("2001:db8:1:2::1"));
        assert_eq!(g("::ffff:192.0.2.7"), "192.0.2.7");
        assert_eq!(g("192.0.2.7"), "192.0.2.7");
        assert_ne!(g("192.0.2.7"), g("192.0.2.8"));
    }

    #[test]
    fn an_address_holds_at_most_its_share_and_gets_it_back() {
        let t = PerAddress::default();
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.1".parse().unwrap();
        let held: Vec<_> = (0..3).map(|_| t.try_add(a, 3).unwrap()).collect();
        assert_eq!(t.try_add(a, 3), None, "a fourth from the same address");
        assert!(t.try_add(b, 3).is_some(), "another address is not affected");
        assert_eq!(t.total(), 4);
        for g in held {
            t.release(g);
        }
        assert!(t.try_add(a, 3).is_some(), "released slots are free again");
        assert_eq!(t.try_add(a, 0), None);
        assert_eq!(t.groups(), 2, "no entry is kept for a refusal");
    }

    #[test]
    fn the_backoff_doubles_to_its_cap_and_starts_over_after_a_success() {
        let mut b = Backoff::default();
        let waits: Vec<_> = (0..9).map(|_| b.failed()).collect();
        assert_eq!(waits[0], ACCEPT_BACKOFF_MIN);
        assert_eq!(waits[1], ACCEPT_BACKOFF_MIN * 2);
        assert!(waits.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*waits.last().unwrap(), ACCEPT_BACKOFF_MAX);
        b.succeeded();
        assert_eq!(b.failed(), ACCEPT_BACKOFF_MIN);
    }

    #[test]
    fn a_repeating_line_is_written_once_per_interval_with_the_count_left_out() {
        let mut t = Throttled::default();
        let t0 = Instant::now();
        assert_eq!(
            t.line(t0, "accept: EMFILE").as_deref(),
            Some("accept: EMFILE")
        );
        for i in 1..=1000 {
            assert_eq!(
                t.line(t0 + Duration::from_millis(i), "accept: EMFILE"),
                None
            );
        }
        let next = t.line(t0 + LOG_REPEAT_INTERVAL, "accept: EMFILE").unwrap();
        assert!(next.contains("1000 more like it"), "{next}");
        assert_eq!(
            t.line(t0 + LOG_REPEAT_INTERVAL * 2, "x").as_deref(),
            Some("x")
        );
    }
}
