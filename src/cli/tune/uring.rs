//! What io_uring needs: locked memory for a session's registered
//! buffers, the kernel's io_uring switch, and a ring that works.

use super::profile::{self, size};
use super::Check;
use crate::datapath::host;
use crate::datapath::{arena, ring, sys, Arena, Ring};

/// Locked memory a default session (buffers for 8 streams x 4 MiB blocks) registers,
/// its ring included, as the daemon checks it at start: (buffers, bytes).
fn session_memlock() -> (usize, u64) {
    let bufs = crate::session::buffer_count(
        profile::SESSION_BUFFER_STREAMS,
        profile::SESSION_BLOCK,
        4,
        4,
    );
    (
        bufs,
        crate::session::locked_bytes(bufs, profile::SESSION_BLOCK),
    )
}

pub(super) fn memlock() -> Check {
    let name = "memlock";
    let (bufs, need) = session_memlock();
    let need_kib = need.div_ceil(1024);
    let rec = format!(">= {need_kib} KiB");
    let limit = sys::memlock_limit();
    let cap = sys::has_cap_ipc_lock();
    let mut current = match limit {
        Some(b) => format!("{} KiB", b / 1024),
        None => "unlimited".into(),
    };
    if cap {
        current += " (CAP_IPC_LOCK)";
    }
    let ok = cap || limit.is_none_or(|b| b >= need);
    Check::new(
        name,
        current,
        rec,
        ok,
        format!(
            "registered buffers are locked memory: 4 streams x 4 MiB blocks take {bufs} buffers ({}); unlimited or CAP_IPC_LOCK also do; this is the shell's limit, a daemon gets its unit's LimitMEMLOCK=",
            size(need)
        ),
        "urmove: session buffers (README, Requirements)",
    )
}

pub(super) fn io_uring_disabled() -> Check {
    let name = "kernel.io_uring_disabled";
    let src = profile::SRC_KERNEL_IO_URING;
    match sys::io_uring_disabled() {
        Some(v) => {
            let root = host::is_root();
            let ok = v == 0 || (v == 1 && root);
            let why = match v {
                0 => "io_uring is open to every process".to_string(),
                1 if root => {
                    "only root and kernel.io_uring_group may create rings; this process is root, a daemon under another user is refused".into()
                }
                1 => "only root and kernel.io_uring_group may create rings; set 0, or add urmove's user to the group".into(),
                _ => "io_uring is disabled for everyone: set kernel.io_uring_disabled = 0".into(),
            };
            Check::new(name, v.to_string(), "0", ok, why, src)
        }
        None => Check::unseen(
            name,
            "0",
            "not present: kernels before 6.6 have no such switch (io_uring is on unless seccomp or a container forbids it)",
            src,
        ),
    }
}

pub(super) fn ring_probe() -> Check {
    use ring::Needed;
    let name = "io_uring.ring";
    let rec = "works";
    let needed = [
        Needed::READ_FIXED,
        Needed::WRITE_FIXED,
        Needed::SEND,
        Needed::RECV,
        Needed::FSYNC,
        Needed::ASYNC_CANCEL,
    ];
    let make = |needed: &[Needed]| {
        Arena::new(arena::BUF_ALIGN, 1).and_then(|a| Ring::<()>::new(8, a, &[], needed))
    };
    let why = "what urmove's workers do at start: set up a ring, probe READ/WRITE_FIXED, SEND, RECV, FSYNC, ASYNC_CANCEL, register a buffer";
    match make(&needed) {
        Ok(r) => {
            let zc = make(&[Needed::SEND_ZC]).is_ok();
            Check::new(
                name,
                format!("works, send_zc {}", if zc { "yes" } else { "no" }),
                rec,
                true,
                format!("{why}; features: {}", r.features().join(" ")),
                "urmove: datapath ring probe",
            )
        }
        Err(e) => Check::new(
            name,
            format!("refused: {e}"),
            rec,
            false,
            why,
            "urmove: datapath ring probe",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_session_fits_its_memlock_estimate() {
        // 36 buffers (for 8 streams) of 4 MiB frames in 2 MiB huge pages,
        // and a ring: what the daemon checks at start.
        let (bufs, bytes) = session_memlock();
        assert_eq!(bufs, 36);
        assert_eq!(bytes, crate::session::locked_bytes(36, 4 << 20));
        assert!(bytes > 145 << 20 && bytes < 148 << 20, "{bytes}");
    }
}
