//! Many files made durable at once: their `fsync`s all in flight together
//! through one small io_uring (`IORING_OP_FSYNC`), so that a journaling
//! filesystem commits them in one group instead of one commit (and one
//! cache flush) each. Where no ring can be had (io_uring turned off), they
//! are synced one after the other, as `File::sync_all` would.
//!
//! The ring is the calling thread's own, made at its first call and kept;
//! every descriptor is borrowed until its completion is in: a call returns
//! only once every sync it pushed has completed.

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use io_uring::{opcode, types, IoUring};

/// Syncs in flight at once through one thread's ring.
const IN_FLIGHT: u32 = 64;

thread_local! {
    static RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
}

/// `fsync` every one of `fds` (data and metadata), all at once; the result
/// of each, in order.
pub fn sync_all(fds: &[BorrowedFd<'_>]) -> Vec<io::Result<()>> {
    if fds.len() <= 1 {
        return fds.iter().map(|fd| one(*fd)).collect();
    }
    RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = ring();
        }
        match slot.as_mut() {
            Some(ring) => through(ring, fds),
            None => fds.iter().map(|fd| one(*fd)).collect(),
        }
    })
}

/// A ring whose syncs all run at once: the kernel runs each on a worker
/// of its own, and by default allows a ring only four per CPU, which would
/// make waves of a batch's syncs, one journal commit each.
fn ring() -> Option<IoUring> {
    let ring = IoUring::new(IN_FLIGHT).ok()?;
    // Where it cannot be raised (an older kernel), the syncs come in waves.
    let _ = ring
        .submitter()
        .register_iowq_max_workers(&mut [IN_FLIGHT, 0]);
    Some(ring)
}

/// One `fsync`, as `File::sync_all` does it.
fn one(fd: BorrowedFd<'_>) -> io::Result<()> {
    loop {
        // SAFETY: `fd` is a descriptor borrowed for this call.
        if unsafe { libc::fsync(fd.as_raw_fd()) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Every sync of `fds` through `ring`, at most [`IN_FLIGHT`] at a time.
fn through(ring: &mut IoUring, fds: &[BorrowedFd<'_>]) -> Vec<io::Result<()>> {
    let mut results: Vec<Option<io::Result<()>>> = fds.iter().map(|_| None).collect();
    let (mut next, mut in_flight) = (0usize, 0usize);
    while next < fds.len() || in_flight > 0 {
        while next < fds.len() && in_flight < IN_FLIGHT as usize {
            let sqe = opcode::Fsync::new(types::Fd(fds[next].as_raw_fd()))
                .build()
                .user_data(next as u64);
            // SAFETY: the descriptor is borrowed until this call returns,
            // and it returns only once every pushed sync has completed.
            if unsafe { ring.submission().push(&sqe) }.is_err() {
                break;
            }
            (next, in_flight) = (next + 1, in_flight + 1);
        }
        if let Err(e) = wait(ring) {
            if in_flight == 0 {
                // Nothing of ours in flight: the rest one by one.
                fds[next..].iter().enumerate().for_each(|(k, fd)| {
                    results[next + k] = Some(one(*fd));
                });
                next = fds.len();
                continue;
            }
            // Syncs are in flight: they must complete before the
            // descriptors go back; keep waiting for them.
            let _ = e;
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        for cqe in ring.completion() {
            let i = cqe.user_data() as usize;
            let r = cqe.result();
            results[i] = Some(if r < 0 {
                Err(io::Error::from_raw_os_error(-r))
            } else {
                Ok(())
            });
            in_flight -= 1;
        }
    }
    results
        .into_iter()
        .map(|r| r.expect("every sync completed"))
        .collect()
}

/// Submit what is queued and wait for one completion at least.
fn wait(ring: &mut IoUring) -> io::Result<()> {
    loop {
        match ring.submit_and_wait(1) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// Every file's sync comes back, in order; a descriptor that cannot be
    /// synced (a socket's) says so alone.
    #[test]
    fn each_sync_has_its_own_result() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let files: Vec<std::fs::File> = (0..100)
            .map(|i| {
                let p = dir.path().join(format!("f{i}"));
                std::fs::write(&p, [i as u8; 4096]).unwrap();
                std::fs::File::open(&p).unwrap()
            })
            .collect();
        let mut fds: Vec<BorrowedFd<'_>> = files.iter().map(|f| f.as_fd()).collect();
        let (socket, _other) = std::os::unix::net::UnixStream::pair().unwrap();
        fds.insert(37, socket.as_fd());
        let results = sync_all(&fds);
        assert_eq!(results.len(), 101);
        for (i, r) in results.iter().enumerate() {
            match i {
                37 => assert_eq!(r.as_ref().unwrap_err().raw_os_error(), Some(libc::EINVAL)),
                _ => assert!(r.is_ok(), "{i}: {r:?}"),
            }
        }
    }
}
