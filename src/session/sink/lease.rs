//! Files a receiver commits under a write lease (see `commit::finish`):
//! from before the file is given to its owner until its stamp can tell
//! any later change, every other open of it (to write, or to read) waits,
//! so nobody but the receiver writes it between its digest and its commit.
//! A lease is let go here, on a thread of its own, once the coarse clock
//! (the one the kernel stamps an untouched inode's ctime with) has passed
//! the settling time the stamp names: whatever opens the file after that
//! changes its ctime to a later time than the stamp allows, so the next
//! run reads it.
//!
//! Holding a lease costs a descriptor for a few milliseconds after each
//! commit; an opener meanwhile (another session of this daemon, a reader)
//! waits that long.

use std::collections::BinaryHeap;
use std::fs::File;
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::datapath::sys;

/// How long after the moment a stamp is written the receiver's own last
/// changes to the inode (the stamp, the mode, the rename) must be done:
/// the stamp's settling time. A commit that takes longer leaves a stamp
/// whose file reads as touched (read again by the next run: safe).
pub(crate) const SETTLE_MARGIN: Duration = Duration::from_millis(20);

/// A leased file and when (coarse clock, ns) to let it go.
struct Held {
    until_ns: i128,
    file: File,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        self.until_ns == other.until_ns
    }
}

impl Eq for Held {}

impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Held {
    /// The earliest first (a max-heap of the reverse).
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.until_ns.cmp(&self.until_ns)
    }
}

/// The keeper's queue, started with the first lease.
fn keeper() -> &'static Mutex<mpsc::Sender<Held>> {
    static KEEPER: OnceLock<Mutex<mpsc::Sender<Held>>> = OnceLock::new();
    KEEPER.get_or_init(|| {
        // A lease break signals the holder; its default would end us.
        sys::ignore_sigio();
        let (tx, rx) = mpsc::channel::<Held>();
        std::thread::Builder::new()
            .name("urmove-leases".into())
            .spawn(move || keep(rx))
            .expect("a thread for leases");
        Mutex::new(tx)
    })
}

/// Let each lease go once its time has passed; until the queue closes.
fn keep(rx: mpsc::Receiver<Held>) {
    let mut heap: BinaryHeap<Held> = BinaryHeap::new();
    loop {
        while heap
            .peek()
            .is_some_and(|h| sys::coarse_now_ns() > h.until_ns)
        {
            let h = heap.pop().expect("peeked");
            sys::end_lease(&h.file);
        }
        let wait = heap.peek().map_or(Duration::from_secs(3600), |h| {
            let left = (h.until_ns - sys::coarse_now_ns()).max(0) as u64;
            // One tick of the coarse clock past it at least.
            Duration::from_nanos(left) + Duration::from_millis(1)
        });
        match rx.recv_timeout(wait) {
            Ok(h) => heap.push(h),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Take a write lease on `file` (the receiver's own, with no other opening
/// of it): a handle on the lease to give [`release_after`], or `None`
/// where it cannot be had (another opening, a filesystem without leases).
pub(crate) fn hold(file: &File) -> Option<File> {
    let _ = keeper();
    let dup = file.try_clone().ok()?;
    sys::take_write_lease(&dup).ok()?;
    Some(dup)
}

/// Take a read lease on `file` (opened read-only; a file this receiver
/// reads but did not write): writers wait while it is held, readers do
/// not. `None` where someone has the file open to write, or no leases.
pub(crate) fn hold_against_writers(file: &File) -> Option<File> {
    let _ = keeper();
    let dup = file.try_clone().ok()?;
    sys::take_read_lease(&dup).ok()?;
    Some(dup)
}

/// Let `lease` go once the coarse clock is past `until_ns` (ns since the
/// epoch).
pub(crate) fn release_after(lease: File, until_ns: i128) {
    let tx = keeper().lock().unwrap_or_else(|p| p.into_inner());
    if let Err(mpsc::SendError(h)) = tx.send(Held {
        until_ns,
        file: lease,
    }) {
        sys::end_lease(&h.file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;

    /// While the lease is held another open waits; once its time passed
    /// the open goes through.
    #[test]
    fn an_open_waits_until_the_lease_is_let_go() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let p = dir.path().join("f");
        let f = std::fs::File::create(&p).unwrap();
        let Some(lease) = hold(&f) else {
            eprintln!("skipped: no leases here");
            return;
        };
        let until = sys::coarse_now_ns() + 150_000_000;
        release_after(lease, until);
        let other = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&p);
        // A non-blocking open says it would wait.
        assert_eq!(
            other.err().and_then(|e| e.raw_os_error()),
            Some(libc::EWOULDBLOCK)
        );
        // A blocking one waits for the lease's time, then goes through.
        let again = std::fs::OpenOptions::new().write(true).open(&p);
        assert!(again.is_ok() && sys::coarse_now_ns() > until);
    }
}
