//! When zero-copy sends pay. A zero-copy send (`SendZc`) keeps its buffer
//! until the kernel's notification; the notification also says whether
//! the data was copied after all, which it always is on loopback and veth.
//! In [`ZeroCopy::Auto`] the sender skips zero-copy where it cannot pay (a
//! virtual device, a long round trip), and falls back to plain `Send` once
//! zero-copy has proved to be copying, since a copied `SendZc` costs more
//! than a plain send.

use std::os::fd::RawFd;

use crate::datapath::arena::BUF_ALIGN;
use crate::datapath::ring::Needed;
use crate::datapath::{sys, Arena, Ring};

/// Notifications to see before judging zero-copy in `Auto` mode.
pub(super) const ZC_PROBE_NOTIFS: u64 = 16;

/// `--zerocopy auto|on|off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZeroCopy {
    /// Zero-copy until the kernel reports it copies anyway, then plain send.
    Auto,
    On,
    Off,
}

/// A path whose round trip is longer than this gets plain sends in
/// `ZeroCopy::Auto`: a zero-copy buffer is the kernel's until the data is
/// acknowledged, so over a long path every buffer waits a round trip and
/// the sender runs dry (over 1 Gbit/s x 100 ms, 80 Mb/s instead of 830).
const ZC_RTT_MAX_US: u32 = 1000;

/// Why zero-copy sends would not pay on these connected sockets, if so:
/// a virtual device copies anyway, and a long path holds every buffer for
/// a round trip.
pub fn zero_copy_wont_pay(sockets: &[RawFd]) -> Option<&'static str> {
    for &fd in sockets {
        if !sys::socket_interface(fd).is_some_and(|(_, physical)| physical) {
            return Some(
                "the path runs over a virtual device (loopback, veth, TUN), which copies anyway",
            );
        }
        if sys::tcp_path(fd).is_some_and(|t| t.rtt_us > ZC_RTT_MAX_US) {
            return Some("the path's round trip is over 1 ms: a zero-copy buffer waits a round trip for its acknowledgement");
        }
    }
    None
}

/// Whether this kernel knows IORING_OP_SEND_ZC (probed once per sender).
pub(super) fn probe_send_zc() -> bool {
    let Ok(arena) = Arena::new(BUF_ALIGN, 1) else {
        return false;
    };
    Ring::<()>::new(1, arena, &[], &[Needed::SEND_ZC]).is_ok()
}
