//! The process and its limits: the kernel release, RLIMIT_MEMLOCK and
//! RLIMIT_NOFILE, the effective user and CAP_IPC_LOCK,
//! `kernel.io_uring_disabled`, signals ignored so a failed write or a
//! broken lease never kills us, and the kernel's random bytes.

use std::io;
use std::mem::MaybeUninit;

/// The running kernel's release string, as `uname -r` prints it.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// The soft RLIMIT_MEMLOCK in bytes (`None` when unlimited).
pub fn memlock_limit() -> Option<u64> {
    let mut rl = MaybeUninit::<libc::rlimit>::zeroed();
    // SAFETY: `rl` is a valid, writable rlimit buffer.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, rl.as_mut_ptr()) };
    if rc != 0 {
        return Some(0);
    }
    // SAFETY: getrlimit returned 0, so the buffer is initialised.
    let rl = unsafe { rl.assume_init() };
    (rl.rlim_cur != libc::RLIM_INFINITY).then_some(rl.rlim_cur)
}

/// The effective user id of this process.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid takes no arguments and always succeeds.
    unsafe { libc::geteuid() }
}

/// Whether this process holds CAP_IPC_LOCK, which exempts registered buffers
/// from RLIMIT_MEMLOCK.
pub fn has_cap_ipc_lock() -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

/// `kernel.io_uring_disabled` (0 enabled, 1 root or group only, 2 disabled).
pub fn io_uring_disabled() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// Ignore SIGXFSZ so a write past RLIMIT_FSIZE fails with EFBIG instead of
/// killing the process.
pub fn ignore_sigxfsz() {
    // SAFETY: setting a signal's disposition to SIG_IGN installs no handler
    // code and touches no memory of ours.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// Ignore SIGIO: the kernel sends it to a lease holder whose lease another
/// open breaks (see [`take_write_lease`]), and its default would end the
/// process. The opener waits until the lease is let go either way.
pub fn ignore_sigio() {
    // SAFETY: setting a signal's disposition to SIG_IGN installs no handler
    // code and touches no memory of ours.
    unsafe {
        libc::signal(libc::SIGIO, libc::SIG_IGN);
    }
}

/// Raise the soft RLIMIT_NOFILE to the hard limit (a daemon serving many
/// sessions and streams needs descriptors; the default soft limit is 1024).
pub fn raise_nofile_limit() {
    let mut rl = MaybeUninit::<libc::rlimit>::zeroed();
    // SAFETY: `rl` is a valid, writable rlimit buffer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, rl.as_mut_ptr()) } != 0 {
        return;
    }
    // SAFETY: getrlimit returned 0, so the buffer is initialised.
    let mut rl = unsafe { rl.assume_init() };
    if rl.rlim_cur < rl.rlim_max {
        rl.rlim_cur = rl.rlim_max;
        // SAFETY: setrlimit reads the struct we own.
        unsafe {
            libc::setrlimit(libc::RLIMIT_NOFILE, &rl);
        }
    }
}

/// The soft RLIMIT_NOFILE: descriptors this process may hold (1024 where
/// it cannot be read).
pub fn nofile_limit() -> u64 {
    let mut rl = MaybeUninit::<libc::rlimit>::zeroed();
    // SAFETY: `rl` is a valid, writable rlimit buffer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, rl.as_mut_ptr()) } != 0 {
        return 1024;
    }
    // SAFETY: getrlimit returned 0, so the buffer is initialised.
    unsafe { rl.assume_init() }.rlim_cur
}

/// Fill `buf` with random bytes from the kernel (getrandom(2)), for nonces,
/// session ids and keys.
pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        // SAFETY: the kernel writes at most `buf.len() - at` bytes into our
        // own live buffer starting at `at`.
        let n = unsafe { libc::getrandom(buf[at..].as_mut_ptr().cast(), buf.len() - at, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        at += n as usize;
    }
    Ok(())
}

/// Ask the kernel to send this process `SIGKILL` when the thread that
/// started it ends (`PR_SET_PDEATHSIG`), then check that parent is still
/// there: false when it is gone already (`urmove serve`, whose sshd or
/// ssh wrapper may die without closing its stdin).
pub fn die_with_parent() -> bool {
    // SAFETY: getppid has no arguments and cannot fail.
    let parent = unsafe { libc::getppid() };
    // SAFETY: PR_SET_PDEATHSIG takes a signal number; the other arguments
    // are unused and passed as 0.
    let set = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } == 0;
    // SAFETY: as above.
    set && unsafe { libc::getppid() } == parent
}

/// Bytes this user's processes have pinned (the sum of `VmPin` of every
/// process with this real uid that `/proc` shows): registered buffers
/// count there, and against RLIMIT_MEMLOCK, which the kernel keeps per
/// user. What another run of the same user holds is not this run's.
pub fn pinned_by_this_user() -> u64 {
    let me = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| status_field(&s, "Uid:"));
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .filter(|s| me.is_some() && status_field(s, "Uid:") == me)
        .filter_map(|s| status_field(&s, "VmPin:"))
        .map(|kib| kib * 1024)
        .sum()
}

/// The first number of a `/proc/PID/status` line that starts with `name`.
fn status_field(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Whether the loopback TCP connection from `peer` to `local` (an accepted
/// one) was made by this process: the connecting socket, found by its
/// ports in `/proc/net/tcp` (or `tcp6`), is one of this process's
/// descriptors. A relay on loopback takes its own connections so and no
/// other local user's.
pub fn connected_from_this_process(
    peer: std::net::SocketAddr,
    local: std::net::SocketAddr,
) -> bool {
    let table = match peer {
        std::net::SocketAddr::V4(_) => "/proc/net/tcp",
        std::net::SocketAddr::V6(_) => "/proc/net/tcp6",
    };
    let Ok(text) = std::fs::read_to_string(table) else {
        return false;
    };
    let (from, to) = (proc_net_addr(peer), proc_net_addr(local));
    let inode = text.lines().skip(1).find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        let ours = w.get(1) == Some(&from.as_str()) && w.get(2) == Some(&to.as_str());
        ours.then(|| w.get(9).map(|i| i.to_string()))?
    });
    let Some(inode) = inode.filter(|i| i != "0") else {
        return false;
    };
    let want = format!("socket:[{inode}]");
    std::fs::read_dir("/proc/self/fd").is_ok_and(|d| {
        d.flatten()
            .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == want.as_str()))
    })
}

/// An address as `/proc/net/tcp` writes it: the address's 32-bit words in
/// host order, then the port, in upper-case hex.
fn proc_net_addr(a: std::net::SocketAddr) -> String {
    let octets: Vec<u8> = match a.ip() {
        std::net::IpAddr::V4(ip) => ip.octets().to_vec(),
        std::net::IpAddr::V6(ip) => ip.octets().to_vec(),
    };
    let words: String = octets
        .chunks(4)
        .map(|c| format!("{:08X}", u32::from_ne_bytes([c[0], c[1], c[2], c[3]])))
        .collect();
    format!("{words}:{:04X}", a.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A loopback connection this process made is its own; one another
    /// process made to the same listener is not.
    #[test]
    fn a_connection_is_known_for_this_process_or_another() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let local = l.local_addr().unwrap();
        let _mine = std::net::TcpStream::connect(local).unwrap();
        let (_, peer) = l.accept().unwrap();
        assert!(connected_from_this_process(peer, local));
        let script = format!("exec 3<>/dev/tcp/127.0.0.1/{}; sleep 2", local.port());
        let mut other = std::process::Command::new("bash")
            .args(["-c", &script])
            .spawn()
            .unwrap();
        let (_, peer) = l.accept().unwrap();
        assert!(!connected_from_this_process(peer, local));
        let _ = other.kill();
        let _ = other.wait();
    }

    #[test]
    fn proc_files_are_read_as_the_kernel_writes_them() {
        assert_eq!(
            proc_net_addr("127.0.0.1:80".parse().unwrap()),
            format!("{:08X}:0050", u32::from_ne_bytes([127, 0, 0, 1]))
        );
        assert_eq!(
            status_field("Name:\tx\nVmPin:\t  1848 kB\n", "VmPin:"),
            Some(1848)
        );
        assert_eq!(status_field("Name:\tx\n", "VmPin:"), None);
    }
}
