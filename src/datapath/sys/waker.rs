//! Waiting on a descriptor: an eventfd another thread rings to wake a
//! ring ([`Waker`]), and poll(2) for readability.

use std::io;
use std::os::fd::AsRawFd;

/// An eventfd another thread rings to wake a ring waiting on it (see
/// `NetReceiver::wake_on`).
#[derive(Debug)]
pub struct Waker {
    fd: std::os::fd::OwnedFd,
}

impl Waker {
    pub fn new() -> io::Result<Waker> {
        use std::os::fd::FromRawFd;
        // SAFETY: eventfd takes no pointers; a new descriptor is ours alone.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor to us.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        Ok(Waker { fd })
    }

    pub fn raw(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }

    /// Wait until it is rung or `limit` passes, and reset it; whether it
    /// was rung.
    pub fn wait(&self, limit: std::time::Duration) -> bool {
        if !wait_readable(self.fd.as_raw_fd(), poll_ms(limit)) {
            return false;
        }
        let mut count = [0u8; 8];
        // SAFETY: read writes at most 8 bytes into `count`, which outlives
        // the call; the descriptor is non-blocking.
        unsafe {
            libc::read(self.fd.as_raw_fd(), count.as_mut_ptr().cast(), count.len());
        }
        true
    }

    /// Wake whoever waits on it (best effort: a full counter still wakes).
    pub fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: write reads 8 bytes from `one`, which outlives the call.
        unsafe {
            libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), one.len());
        }
    }
}

/// `limit` as poll(2)'s milliseconds.
pub fn poll_ms(limit: std::time::Duration) -> i32 {
    limit.as_millis().min(i32::MAX as u128) as i32
}

/// Wait up to `timeout_ms` for `fd` to become readable (a listener: a
/// connection to accept). Interruptions count as "not yet".
pub fn wait_readable(fd: std::os::fd::RawFd, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll reads and writes the one pollfd we own for the call.
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    n > 0 && p.revents & libc::POLLIN != 0
}
