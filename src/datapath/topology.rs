//! Which core a worker runs on.

/// Pin the calling thread to the `worker_index`-th usable core (round robin).
/// Returns the core id, or `None` when pinning is not possible here (the
/// worker then runs unpinned, which is correct, only slower).
pub fn pin_worker(worker_index: usize) -> Option<usize> {
    let cores = core_affinity::get_core_ids()?;
    if cores.is_empty() {
        return None;
    }
    let core = cores[worker_index % cores.len()];
    core_affinity::set_for_current(core).then_some(core.id)
}
