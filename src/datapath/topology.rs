//! Which cores a worker may run on, which are near the NIC a socket runs
//! over, and which core it runs on.

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

/// The cores this process may run on, those near the NIC that connected
/// socket `fd` runs over first (see [`near_first`]).
pub fn cpus_near(fd: RawFd) -> Vec<usize> {
    let usable = usable_cpus();
    let Some((dev, true)) = super::sys::socket_interface(fd) else {
        return usable;
    };
    let irq: Vec<usize> = super::host::irqs(&dev)
        .iter()
        .flat_map(|i| i.cpus.iter().map(|&c| c as usize))
        .collect();
    let node: Vec<usize> = super::host::numa_node(&dev)
        .and_then(super::host::node_cpus)
        .unwrap_or_default()
        .into_iter()
        .map(|c| c as usize)
        .collect();
    near_first(&irq, &node, &usable)
}

/// `usable` cores ordered for a NIC: those its interrupts go to (`irq`)
/// first, else those of its NUMA node (`node`), then the rest. Lanes
/// pinned in this order sit where the NIC's packets are handled, and
/// more lanes than such cores still get a core each.
pub fn near_first(irq: &[usize], node: &[usize], usable: &[usize]) -> Vec<usize> {
    let near: Vec<usize> = [irq, node]
        .into_iter()
        .map(|set| {
            usable
                .iter()
                .copied()
                .filter(|c| set.contains(c))
                .collect::<Vec<_>>()
        })
        .find(|v| !v.is_empty())
        .unwrap_or_default();
    let rest = usable.iter().copied().filter(|c| !near.contains(c));
    near.iter().copied().chain(rest).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_go_near_the_nic_first_and_then_to_every_other_core() {
        let usable = [0, 1, 2, 3, 4, 5];
        // Interrupts on cores 4 and 2 (and 9, which this process may not use).
        assert_eq!(
            near_first(&[4, 2, 9], &[0, 1, 2], &usable),
            vec![2, 4, 0, 1, 3, 5]
        );
        // No interrupt seen: the NIC's NUMA node.
        assert_eq!(near_first(&[], &[3, 4], &usable), vec![3, 4, 0, 1, 2, 5]);
        // Nothing known: every core as it is.
        assert_eq!(near_first(&[], &[], &usable), usable.to_vec());
    }

    #[test]
    fn a_loopback_socket_has_no_nic_and_keeps_every_core() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        use std::os::fd::AsRawFd;
        assert_eq!(cpus_near(c.as_raw_fd()), usable_cpus());
    }
}
