//! What the kernel's TCP knows of a connection (`TCP_INFO`): its path
//! (round trip, window, retransmissions, what held it back) and its
//! progress (bytes acknowledged and received).

use std::mem::MaybeUninit;

/// What a TCP connection's sender learnt of its path (`TCP_INFO`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpPath {
    /// Smoothed and least round-trip time seen, microseconds.
    pub rtt_us: u32,
    pub min_rtt_us: u32,
    /// Time with data in flight, and the shares of it held back by the
    /// peer's receive window or this side's send buffer, microseconds.
    pub busy_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
    /// Segments sent again, in all.
    pub retransmits: u32,
    /// The congestion window (segments) and segment size (bytes).
    pub cwnd: u32,
    pub mss: u32,
    /// Bytes sent and bytes sent again.
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    /// The cap on its pacing (`SO_MAX_PACING_RATE`), bytes per second;
    /// `u64::MAX` when none is set.
    pub pacing_cap_bytes_per_s: u64,
}

/// `TCP_INFO`'s path fields of a TCP socket, `None` when it is not one.
pub fn tcp_path(fd: std::os::fd::RawFd) -> Option<TcpPath> {
    let info = tcp_info(fd)?;
    Some(TcpPath {
        rtt_us: info.tcpi_rtt,
        min_rtt_us: info.tcpi_min_rtt,
        busy_us: info.tcpi_busy_time,
        rwnd_limited_us: info.tcpi_rwnd_limited,
        sndbuf_limited_us: info.tcpi_sndbuf_limited,
        retransmits: info.tcpi_total_retrans,
        cwnd: info.tcpi_snd_cwnd,
        mss: info.tcpi_snd_mss,
        bytes_sent: info.tcpi_bytes_sent,
        bytes_retrans: info.tcpi_bytes_retrans,
        pacing_cap_bytes_per_s: info.tcpi_max_pacing_rate,
    })
}

fn tcp_info(fd: std::os::fd::RawFd) -> Option<libc::tcp_info> {
    let mut info = MaybeUninit::<libc::tcp_info>::zeroed();
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `info`, which lives
    // on this stack frame for the call, and reports how many in `len`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r != 0 {
        return None;
    }
    // SAFETY: zero-initialised above, and the kernel filled what it knows
    // (an older kernel fewer fields, left zero); every field of tcp_info is
    // a plain integer, valid for any bytes.
    Some(unsafe { info.assume_init() })
}

/// What the kernel's TCP knows of a connection (`TCP_INFO`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpProgress {
    /// Still connected (ESTABLISHED, or CLOSE_WAIT: the peer only stopped
    /// sending).
    pub connected: bool,
    /// Bytes the peer's TCP acknowledged.
    pub bytes_acked: u64,
    /// Bytes this side's TCP received.
    pub bytes_received: u64,
}

/// `TCP_INFO` of a TCP socket, `None` when it is not one.
pub fn tcp_progress(fd: std::os::fd::RawFd) -> Option<TcpProgress> {
    let info = tcp_info(fd)?;
    const ESTABLISHED: u8 = 1;
    const CLOSE_WAIT: u8 = 8;
    Some(TcpProgress {
        connected: info.tcpi_state == ESTABLISHED || info.tcpi_state == CLOSE_WAIT,
        bytes_acked: info.tcpi_bytes_acked,
        bytes_received: info.tcpi_bytes_received,
    })
}
