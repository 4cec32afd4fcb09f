//! Socket options the data streams set and read: buffer sizes, the
//! congestion control, `TCP_NOTSENT_LOWAT`, pacing, dead-peer timeouts,
//! what a socket still holds unacknowledged, and shutting it down.

use std::io;

/// Ask for a socket send buffer of `bytes` (FDT's `-ss`); the kernel caps it
/// at `net.core.wmem_max`.
pub fn set_send_buffer(fd: std::os::fd::RawFd, bytes: usize) {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    let _ = set_opt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &v);
}

/// Set a socket's receive buffer (SO_RCVBUF), which turns off the
/// kernel's autotuning of it.
pub fn set_recv_buffer(fd: std::os::fd::RawFd, bytes: usize) {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    let _ = set_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &v);
}

/// Set socket option `name` at `level` to `v` (an int, or the u64 some
/// options take).
fn set_opt<T: Copy>(
    fd: std::os::fd::RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: &T,
) -> io::Result<()> {
    // SAFETY: setsockopt reads size_of::<T>() bytes from `v`, a plain value
    // borrowed for the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn set_int_opt(fd: std::os::fd::RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) {
    let _ = set_opt(fd, level, name, &v);
}

/// Socket option `name` at `level` as a `T` (an int, or a plain array of
/// integers the kernel fills whole); `None` when the call fails or the
/// kernel wrote less.
pub(crate) fn get_opt<T: Copy + Default>(
    fd: std::os::fd::RawFd,
    level: libc::c_int,
    name: libc::c_int,
) -> Option<T> {
    let mut v = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `v`, a plain
    // value on this frame for the call, and reports how many in `len`.
    let r = unsafe { libc::getsockopt(fd, level, name, (&mut v as *mut T).cast(), &mut len) };
    (r == 0 && len as usize == std::mem::size_of::<T>()).then_some(v)
}

/// Use congestion control `name` (`TCP_CONGESTION`: "bbr", "cubic", ...)
/// on a TCP socket. Fails with ENOENT when the kernel has no such
/// algorithm and EPERM when an unprivileged process may not pick it (see
/// `net.ipv4.tcp_allowed_congestion_control`).
pub fn set_congestion(fd: std::os::fd::RawFd, name: &str) -> io::Result<()> {
    // SAFETY: setsockopt reads `name.len()` bytes from the string's buffer,
    // which outlives the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The congestion control a TCP socket uses, `None` when it is not one.
pub fn congestion(fd: std::os::fd::RawFd) -> Option<String> {
    let name: [u8; 16] = get_opt(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION)?;
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Some(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// The congestion controls this kernel has loaded or built in
/// (`net.ipv4.tcp_available_congestion_control`).
pub fn available_congestion() -> Vec<String> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .map(|s| s.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Keep at most `bytes` of not-yet-sent data in a TCP socket's buffer
/// (`TCP_NOTSENT_LOWAT`): a send completes only when the rest fits under
/// it, so data waits in the sender's queue, where it can still go on any
/// stream, instead of behind one stream's congestion window.
pub fn set_notsent_lowat(fd: std::os::fd::RawFd, bytes: usize) -> io::Result<()> {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    set_opt(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, &v)
}

/// A TCP socket's `TCP_NOTSENT_LOWAT`, `None` when it is not one.
pub fn notsent_lowat(fd: std::os::fd::RawFd) -> Option<i32> {
    get_opt(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT)
}

/// Pace a socket's sends to at most `bytes_per_s` (`SO_MAX_PACING_RATE`;
/// TCP paces itself without the fq qdisc since Linux 4.13).
pub fn set_max_pacing_rate(fd: std::os::fd::RawFd, bytes_per_s: u64) -> io::Result<()> {
    // The kernel takes a u64 since 4.20 (the low 32 bits before).
    set_opt(
        fd,
        libc::SOL_SOCKET,
        libc::SO_MAX_PACING_RATE,
        &bytes_per_s.max(1),
    )
}

/// The socket's send buffer size now (`SO_SNDBUF`: what autotuning grew
/// it to, or what was set).
pub fn send_buffer(fd: std::os::fd::RawFd) -> Option<u64> {
    get_opt::<libc::c_int>(fd, libc::SOL_SOCKET, libc::SO_SNDBUF).map(|v| v.max(0) as u64)
}

/// Make a dead peer visible within about `timeout`: TCP keepalive probes
/// after a quarter of it, and `TCP_USER_TIMEOUT` so data the peer never
/// acknowledges fails the connection instead of being retried for minutes.
pub fn set_dead_peer_timeout(fd: std::os::fd::RawFd, timeout: std::time::Duration) {
    let secs = timeout.as_secs().clamp(4, 3600) as libc::c_int;
    set_int_opt(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    set_int_opt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, (secs / 4).max(1));
    set_int_opt(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_KEEPINTVL,
        (secs / 8).max(1),
    );
    set_int_opt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 4);
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    set_int_opt(fd, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, ms);
}

/// Shut a socket down both ways: operations in flight on it end with an
/// error at once, and the peer sees the connection end.
pub fn shutdown_both(fd: std::os::fd::RawFd) {
    // SAFETY: shutdown takes no memory; a stale fd only yields EBADF.
    unsafe {
        libc::shutdown(fd, libc::SHUT_RDWR);
    }
}

/// Bytes a TCP socket holds that the peer has not acknowledged (sent or
/// not yet sent): `SIOCOUTQ`.
pub fn socket_outq(fd: std::os::fd::RawFd) -> Option<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ writes one int into `n`, which outlives the call.
    let r = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n) };
    (r == 0).then_some(n.max(0) as usize)
}
