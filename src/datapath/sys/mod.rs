//! Thin, checked wrappers over the system calls, `/proc` and sysfs files the
//! data path uses: what a filesystem and a block device say (statx
//! alignment, type, free space, geometry), file locks and leases, the
//! process's limits and clocks, socket options and `TCP_INFO`, the
//! interface a socket leaves by, and an eventfd waker. One file per
//! concept; everything is re-exported here, so callers say `sys::NAME`.

mod blockdev;
mod clock;
mod fs;
mod iface;
mod locks;
mod process;
mod socket;
mod tcp_info;
mod waker;

pub use blockdev::{
    block_device_children, block_device_logical_block_size, block_device_name, block_device_size,
    sysfs_logical_block_size,
};
pub use clock::{coarse_now_ns, local_date_time, local_hms, thread_cpu_time};
pub use fs::{
    free_bytes, free_bytes_fd, fresh_links_and_ctime, fs_type, get_xattr, name_max_fd,
    remove_xattr, seek_data, seek_hole, set_xattr, statx_dio_align, zero_range,
};
pub use iface::socket_interface;
pub use locks::{
    end_lease, lock_in_the_way, lock_range, lock_whole, take_read_lease, take_write_lease,
    unlock_range,
};
pub use process::{
    connected_from_this_process, die_with_parent, effective_uid, has_cap_ipc_lock, ignore_sigio,
    ignore_sigxfsz, io_uring_disabled, kernel_release, memlock_limit, nofile_limit,
    pinned_by_this_user, raise_nofile_limit, random_bytes,
};
pub(crate) use socket::get_opt;
pub use socket::{
    available_congestion, congestion, notsent_lowat, send_buffer, set_congestion,
    set_dead_peer_timeout, set_max_pacing_rate, set_notsent_lowat, set_recv_buffer,
    set_send_buffer, shutdown_both, socket_outq,
};
pub use tcp_info::{tcp_path, tcp_progress, TcpPath, TcpProgress};
pub use waker::{poll_ms, wait_readable, Waker};
