//! Which cores a worker may run on, and which core it runs on.

use std::os::fd::RawFd;

/// Pin the calling thread to the `worker_index`-th usable core (round robin).
/// Returns the core id, or `None` when pinning is not possible here (the
/// worker then runs unpinned, which is correct, only slower).
pub fn pin_worker(worker_index: usize) -> Option<usize> {
    let cores = usable_cpus();
    if cores.is_empty() {
        return None;
    }
    let core = cores[worker_index % cores.len()];
    pin_to(core).then_some(core)
}

/// The cores this process may run on (its affinity mask, as `taskset` or a
/// cgroup's cpuset sets it), in ascending order; empty when unknown.
pub fn usable_cpus() -> Vec<usize> {
    let mut ids: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect();
    ids.sort_unstable();
    ids
}

/// Pin the calling thread to core `cpu`; false when the kernel refused
/// (the core is outside the affinity mask, or gone).
pub fn pin_to(cpu: usize) -> bool {
    core_affinity::set_for_current(core_affinity::CoreId { id: cpu })
}

/// The core that last handled a socket's incoming packets
/// (`SO_INCOMING_CPU`: the NIC queue's interrupt core, or on loopback the
/// sender's core); `None` before any arrived or when the kernel does not say.
pub fn incoming_cpu(fd: RawFd) -> Option<usize> {
    let cpu: libc::c_int = super::sys::get_opt(fd, libc::SOL_SOCKET, libc::SO_INCOMING_CPU)?;
    usize::try_from(cpu).ok()
}

/// The core the calling thread runs on now.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments and only returns a number.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok()
}

/// Whether `ip` is an address of this host (loopback, or one a socket can
/// bind to here): a peer there shares this host's cores.
pub fn is_this_host(ip: std::net::IpAddr) -> bool {
    ip.is_loopback() || std::net::UdpSocket::bind((ip, 0)).is_ok()
}
