//! Our thin safe layer over one io_uring instance.
//!
//! - Probes the opcodes a worker needs at startup and fails fast with a remedy.
//! - Owns the buffer [`Arena`] registered with it (`ReadFixed`/`WriteFixed`)
//!   and the files registered with it.
//! - Keeps an op-slot table keyed by `user_data`: a pushed op's [`Lease`] and
//!   tag live in its slot until its completion, which hands them back as a
//!   [`Completion`].
//! - `Drop` cancels what is in flight and waits for every completion before
//!   the arena can be unmapped, so the kernel never writes into freed memory.
//!
//! The slot table, the free-slot stack and the completion batch are sized at
//! startup; pushing, submitting and reaping allocate nothing.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use io_uring::{cqueue, opcode, squeue, types, IoUring, Probe};

use super::{Arena, Error, Lease};

/// Upper bound on ring entries (and so on ops in flight per ring).
pub const RING_ENTRIES_MAX: u32 = 4096;
/// `user_data` of internal cancel requests, never a slot index.
const CANCEL_USER_DATA: u64 = u64::MAX;

const _: () = assert!((RING_ENTRIES_MAX as u64) < CANCEL_USER_DATA);

/// An opcode a worker needs, with the name to print when it is missing.
#[derive(Debug, Clone, Copy)]
pub struct Needed {
    pub code: u8,
    pub name: &'static str,
}

impl Needed {
    pub const READ_FIXED: Needed = Needed {
        code: opcode::ReadFixed::CODE,
        name: "IORING_OP_READ_FIXED",
    };
    pub const WRITE_FIXED: Needed = Needed {
        code: opcode::WriteFixed::CODE,
        name: "IORING_OP_WRITE_FIXED",
    };
    pub const FSYNC: Needed = Needed {
        code: opcode::Fsync::CODE,
        name: "IORING_OP_FSYNC",
    };
    pub const RECV: Needed = Needed {
        code: opcode::Recv::CODE,
        name: "IORING_OP_RECV",
    };
    pub const SEND: Needed = Needed {
        code: opcode::Send::CODE,
        name: "IORING_OP_SEND",
    };
    pub const SEND_ZC: Needed = Needed {
        code: opcode::SendZc::CODE,
        name: "IORING_OP_SEND_ZC",
    };
    pub const ASYNC_CANCEL: Needed = Needed {
        code: opcode::AsyncCancel::CODE,
        name: "IORING_OP_ASYNC_CANCEL",
    };
}

/// A finished op: its result (bytes, or a negative errno), its buffer lease
/// (when it had one) and the caller's tag.
#[must_use = "a completion carries a lease that must go back to the arena"]
#[derive(Debug)]
pub struct Completion<T> {
    pub result: i32,
    /// The op's buffer, handed back with its last completion only.
    pub lease: Option<Lease>,
    pub tag: T,
    /// More completions of this op follow (a zero-copy send's first CQE);
    /// the op keeps its slot and buffer until the last one.
    pub more: bool,
    /// The zero-copy notification: the kernel is done with the buffer.
    /// `result & ZC_COPIED` says the data was copied after all.
    pub notif: bool,
}

/// IORING_SEND_ZC_REPORT_USAGE: ask the notification to say whether the
/// data was copied after all.
const SEND_ZC_REPORT_USAGE: u16 = 1 << 3;

/// Bit of a zero-copy notification's result: the kernel copied the data.
pub const ZC_COPIED: i32 = i32::MIN; // IORING_NOTIF_USAGE_ZC_COPIED, 1 << 31

struct Slot<T> {
    lease: Option<Lease>,
    tag: T,
}

/// One io_uring with its registered arena, registered files and op slots.
pub struct Ring<T> {
    // Field order matters: `ring` is dropped (fd closed) before `arena` is
    // unmapped, and Drop has already drained every in-flight op by then.
    ring: IoUring,
    slots: Vec<Option<Slot<T>>>,
    free_slots: Vec<u32>,
    in_flight: u32,
    sq_full_flushes: u64,
    features: Vec<&'static str>,
    /// Registered-file slots free for `attach_file`.
    free_file_slots: Vec<u32>,
    arena: Arena,
}

impl<T> Ring<T> {
    /// Set up a ring of `entries` SQEs, check it supports `needed`, register
    /// `arena`'s buffers and `files`.
    pub fn new(
        entries: u32,
        arena: Arena,
        files: &[RawFd],
        needed: &[Needed],
    ) -> Result<Self, Error> {
        Self::with_spare_files(entries, arena, files, 0, needed)
    }

    /// Like [`new`](Self::new), with `spare` empty registered-file slots
    /// after `files`, to fill later with [`set_file`](Self::set_file).
    pub fn with_spare_files(
        entries: u32,
        arena: Arena,
        files: &[RawFd],
        spare: u32,
        needed: &[Needed],
    ) -> Result<Self, Error> {
        let mut ring = Self::disabled(entries, arena, files, spare, needed)?;
        ring.enable()?;
        Ok(ring)
    }

    /// Set up a ring as [`with_spare_files`](Self::with_spare_files) does,
    /// its buffers registered (so locked memory is proven now), but not yet
    /// taking submissions: it may move to another thread, which then calls
    /// [`enable`](Self::enable) and becomes its only submitter.
    pub fn disabled(
        entries: u32,
        arena: Arena,
        files: &[RawFd],
        spare: u32,
        needed: &[Needed],
    ) -> Result<Self, Error> {
        let first_spare = files.len() as u32;
        let mut all: Vec<RawFd> = files.to_vec();
        all.resize(files.len() + spare as usize, -1);
        let files = &all[..];
        let entries = entries.clamp(1, RING_ENTRIES_MAX).next_power_of_two();
        let mut features = Vec::new();
        let ring = match IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_r_disabled()
            .setup_cqsize(entries * 2)
            .build(entries)
        {
            Ok(r) => {
                features.push("single_issuer");
                features.push("defer_taskrun");
                r
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => IoUring::builder()
                .setup_r_disabled()
                .setup_cqsize(entries * 2)
                .build(entries)
                .map_err(ring_unavailable)?,
            Err(e) => return Err(ring_unavailable(e)),
        };
        let mut probe = Probe::new();
        ring.submitter()
            .register_probe(&mut probe)
            .map_err(|e| Error::RingUnavailable {
                reason: format!("probing opcodes failed: {e}"),
                remedy: "io_uring needs Linux 5.6 or newer".into(),
            })?;
        for need in needed {
            if !probe.is_supported(need.code) {
                return Err(Error::OpUnsupported {
                    op: need.name,
                    remedy: "upgrade to Linux 5.19 or newer",
                });
            }
        }
        let iovecs = arena.iovecs();
        // SAFETY: the iovecs describe the arena's mapping, which this Ring
        // owns and unmaps only after the ring fd is closed (field order) and
        // every op using it has completed (Drop drains).
        unsafe { ring.submitter().register_buffers(&iovecs) }.map_err(|e| Error::Register {
            what: "I/O buffers",
            remedy: memlock_remedy(&e, arena.bytes()),
            source: e,
        })?;
        features.push("registered_buffers");
        if !files.is_empty() {
            ring.submitter()
                .register_files(files)
                .map_err(|e| Error::Register {
                    what: "files",
                    source: e,
                    remedy: "check RLIMIT_NOFILE".into(),
                })?;
            features.push("registered_files");
        }
        if ring.params().is_feature_nodrop() {
            features.push("nodrop");
        }
        let slot_count = entries as usize * 2;
        let mut slots = Vec::with_capacity(slot_count);
        slots.resize_with(slot_count, || None);
        let free_slots = (0..slot_count as u32).rev().collect();
        Ok(Ring {
            ring,
            slots,
            free_slots,
            in_flight: 0,
            sq_full_flushes: 0,
            features,
            free_file_slots: (first_spare..first_spare + spare).rev().collect(),
            arena,
        })
    }

    /// The io_uring features this ring uses, for the report.
    pub fn features(&self) -> &[&'static str] {
        &self.features
    }

    pub fn arena(&mut self) -> &mut Arena {
        &mut self.arena
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Times a full SQ forced an early submit.
    pub fn sq_full_flushes(&self) -> u64 {
        self.sq_full_flushes
    }

    /// Ops this ring can hold in flight.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Start taking submissions, with this thread as the only submitter.
    pub fn enable(&mut self) -> Result<(), Error> {
        self.ring
            .submitter()
            .register_enable_rings()
            .map_err(|e| Error::RingUnavailable {
                reason: format!("enabling the ring failed: {e}"),
                remedy: "io_uring needs Linux 5.10 or newer".into(),
            })
    }

    /// Put `fd` in registered-file slot `slot` (one of the first files,
    /// registered empty as -1).
    pub fn set_file(&mut self, slot: u32, fd: RawFd) -> io::Result<()> {
        self.ring
            .submitter()
            .register_files_update(slot, &[fd])
            .map(|_| ())
    }

    /// Register `fd` in a free spare file slot; `None` when all are taken.
    pub fn attach_file(&mut self, fd: RawFd) -> io::Result<Option<u32>> {
        let Some(slot) = self.free_file_slots.pop() else {
            return Ok(None);
        };
        if let Err(e) = self.ring.submitter().register_files_update(slot, &[fd]) {
            self.free_file_slots.push(slot);
            return Err(e);
        }
        Ok(Some(slot))
    }

    /// Empty a slot from `attach_file`; no op of this ring may still use it.
    pub fn detach_file(&mut self, slot: u32) {
        debug_assert!(!self.free_file_slots.contains(&slot), "slot detached twice");
        let _ = self.ring.submitter().register_files_update(slot, &[-1]);
        self.free_file_slots.push(slot);
    }

    /// Read `len` bytes at `offset` of registered file `file` into the
    /// lease's buffer starting at `buf_at`.
    pub fn read_fixed(
        &mut self,
        file: u32,
        offset: u64,
        lease: Lease,
        buf_at: usize,
        len: u32,
        tag: T,
    ) {
        assert!(
            buf_at + len as usize <= lease.capacity(),
            "read past the end of its buffer"
        );
        // SAFETY (of the pointer): the lease moves into the op's slot below and
        // comes back only with the completion, so the buffer stays valid and
        // untouched by user code while the kernel writes into it.
        let ptr = lease.as_ptr().wrapping_add(buf_at);
        let sqe = opcode::ReadFixed::new(types::Fixed(file), ptr, len, lease.index())
            .offset(offset)
            .build();
        self.push(sqe, Some(lease), tag);
    }

    /// Write `len` bytes of the lease's buffer starting at `buf_at` to
    /// `offset` of registered file `file`.
    pub fn write_fixed(
        &mut self,
        file: u32,
        offset: u64,
        lease: Lease,
        buf_at: usize,
        len: u32,
        tag: T,
    ) {
        assert!(
            buf_at + len as usize <= lease.capacity(),
            "write past the end of its buffer"
        );
        let ptr = lease.as_ptr().wrapping_add(buf_at);
        let sqe = opcode::WriteFixed::new(types::Fixed(file), ptr, len, lease.index())
            .offset(offset)
            .build();
        self.push(sqe, Some(lease), tag);
    }

    /// Send `len` bytes of the lease's buffer from `buf_at` on registered
    /// socket `file`, zero-copy from the registered buffer. Two completions
    /// follow: the send's result (`more`), then the notification (`notif`)
    /// that hands the buffer back.
    pub fn send_zc(&mut self, file: u32, lease: Lease, buf_at: usize, len: u32, tag: T) {
        assert!(
            buf_at + len as usize <= lease.capacity(),
            "send past the end of its buffer"
        );
        let ptr = lease.as_ptr().wrapping_add(buf_at);
        let sqe = opcode::SendZc::new(types::Fixed(file), ptr, len)
            .buf_index(Some(lease.index()))
            .flags(libc::MSG_WAITALL | libc::MSG_NOSIGNAL)
            .zc_flags(SEND_ZC_REPORT_USAGE)
            .build();
        self.push(sqe, Some(lease), tag);
    }

    /// Send `len` bytes of the lease's buffer from `buf_at` on registered
    /// socket `file` (copied into the socket; one completion).
    pub fn send(&mut self, file: u32, lease: Lease, buf_at: usize, len: u32, tag: T) {
        assert!(
            buf_at + len as usize <= lease.capacity(),
            "send past the end of its buffer"
        );
        let ptr = lease.as_ptr().wrapping_add(buf_at);
        let sqe = opcode::Send::new(types::Fixed(file), ptr, len)
            .flags(libc::MSG_WAITALL | libc::MSG_NOSIGNAL)
            .build();
        self.push(sqe, Some(lease), tag);
    }

    /// Receive exactly `len` bytes (MSG_WAITALL: the kernel keeps reading
    /// until all arrived, the peer closed, or an error) from registered
    /// socket `file` into the lease's buffer at `buf_at`.
    pub fn recv_all(&mut self, file: u32, lease: Lease, buf_at: usize, len: u32, tag: T) {
        assert!(
            buf_at + len as usize <= lease.capacity(),
            "receive past the end of its buffer"
        );
        let ptr = lease.as_ptr().wrapping_add(buf_at);
        let sqe = opcode::Recv::new(types::Fixed(file), ptr, len)
            .flags(libc::MSG_WAITALL)
            .build();
        self.push(sqe, Some(lease), tag);
    }

    /// Receive exactly `len` bytes (MSG_WAITALL) from registered socket
    /// `file` into memory the caller owns at `ptr` (a frame header, before
    /// any buffer is given to its payload).
    ///
    /// # Safety
    /// `ptr..ptr + len` must stay valid, and be neither read nor written by
    /// anyone else, until this op's completion is reaped or the ring is
    /// drained (its Drop, or [`cancel_all_and_drain`](Self::cancel_all_and_drain)).
    pub unsafe fn recv_all_into(&mut self, file: u32, ptr: *mut u8, len: u32, tag: T) {
        let sqe = opcode::Recv::new(types::Fixed(file), ptr, len)
            .flags(libc::MSG_WAITALL)
            .build();
        self.push(sqe, None, tag);
    }

    /// Read exactly `len` bytes from the (unregistered) descriptor `fd` into
    /// memory the caller owns at `ptr` (an eventfd's counter).
    ///
    /// # Safety
    /// As [`recv_all_into`](Self::recv_all_into): `ptr..ptr + len` stays
    /// valid and untouched until the completion is reaped or the ring is
    /// drained, and `fd` stays open as long.
    pub unsafe fn read_into(&mut self, fd: RawFd, ptr: *mut u8, len: u32, tag: T) {
        let sqe = opcode::Read::new(types::Fd(fd), ptr, len).build();
        self.push(sqe, None, tag);
    }

    /// fdatasync registered file `file`.
    pub fn fdatasync(&mut self, file: u32, tag: T) {
        let sqe = opcode::Fsync::new(types::Fixed(file))
            .flags(types::FsyncFlags::DATASYNC)
            .build();
        self.push(sqe, None, tag);
    }

    /// Whether another op fits in the slot table.
    pub fn has_room(&self) -> bool {
        !self.free_slots.is_empty()
    }

    fn push(&mut self, sqe: squeue::Entry, lease: Option<Lease>, tag: T) {
        let slot = self
            .free_slots
            .pop()
            .expect("op pushed with no free slot: callers bound ops in flight by has_room()");
        self.slots[slot as usize] = Some(Slot { lease, tag });
        let sqe = sqe.user_data(u64::from(slot));
        loop {
            // SAFETY: every pointer in the SQE points into a lease now owned
            // by `self.slots[slot]`, which is released only when this op's
            // CQE is reaped (or in Drop, after draining).
            let pushed = unsafe { self.ring.submission().push(&sqe) };
            if pushed.is_ok() {
                break;
            }
            self.sq_full_flushes += 1;
            // A submit failure leaves the SQE queued; the op keeps its slot.
            let _ = self.submit_and_wait(0);
        }
        self.in_flight += 1;
    }

    /// Submit what is queued and wait for at least `want` completions.
    /// Interruptions and a busy CQ are retried, not reported.
    pub fn submit_and_wait(&mut self, want: usize) -> io::Result<usize> {
        loop {
            match self.ring.submitter().submit_and_wait(want) {
                Ok(n) => return Ok(n),
                Err(e) if e.raw_os_error().is_some_and(super::error::is_retry) => {
                    // EBUSY: the CQ is full; the caller reaps, then comes back.
                    if e.raw_os_error() == Some(libc::EBUSY) {
                        return Ok(0);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// As [`submit_and_wait`](Self::submit_and_wait), but wait at most
    /// `timeout` (then return with whatever completed, perhaps nothing).
    pub fn submit_and_wait_for(&mut self, want: usize, timeout: Duration) -> io::Result<usize> {
        if want == 0 {
            return self.submit_and_wait(0);
        }
        let ts = types::Timespec::new()
            .sec(timeout.as_secs())
            .nsec(timeout.subsec_nanos());
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(want, &args) {
            Ok(n) => Ok(n),
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => Ok(0),
            Err(e) if e.raw_os_error().is_some_and(super::error::is_retry) => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Move every ready completion into `batch` (which must have room for
    /// `capacity()` entries so this never allocates).
    pub fn reap(&mut self, batch: &mut Vec<Completion<T>>)
    where
        T: Clone,
    {
        let cq = self.ring.completion();
        for cqe in cq {
            let user_data = cqe.user_data();
            if user_data == CANCEL_USER_DATA {
                continue;
            }
            let flags = cqe.flags();
            if cqueue::more(flags) {
                // Not the op's last completion: it keeps its slot and buffer.
                let slot = self.slots[user_data as usize]
                    .as_ref()
                    .expect("completion for an empty slot");
                batch.push(Completion {
                    result: cqe.result(),
                    lease: None,
                    tag: slot.tag.clone(),
                    more: true,
                    notif: false,
                });
                continue;
            }
            let slot = self.slots[user_data as usize]
                .take()
                .expect("completion for an empty slot");
            self.free_slots.push(user_data as u32);
            self.in_flight -= 1;
            batch.push(Completion {
                result: cqe.result(),
                lease: slot.lease,
                tag: slot.tag,
                more: false,
                notif: cqueue::notif(flags),
            });
        }
    }

    /// Cancel every op in flight and wait until each has completed, returning
    /// their leases to the arena. Safe to call at any time.
    pub fn cancel_all_and_drain(&mut self) {
        if self.in_flight == 0 {
            return;
        }
        let cancel = opcode::AsyncCancel2::new(types::CancelBuilder::any())
            .build()
            .user_data(CANCEL_USER_DATA);
        loop {
            // SAFETY: a cancel request carries no user memory.
            if unsafe { self.ring.submission().push(&cancel) }.is_ok() {
                break;
            }
            let _ = self.submit_and_wait(0);
        }
        while self.in_flight > 0 {
            if self.submit_and_wait(1).is_err() {
                // Waiting failed for a reason other than EINTR: spin through
                // the CQ anyway; ops in flight must finish before we return.
                std::thread::yield_now();
            }
            let cq = self.ring.completion();
            for cqe in cq {
                let user_data = cqe.user_data();
                if user_data == CANCEL_USER_DATA || cqueue::more(cqe.flags()) {
                    // A zero-copy send's first CQE: its buffer is released
                    // only by the notification that follows.
                    continue;
                }
                if let Some(slot) = self.slots[user_data as usize].take() {
                    self.free_slots.push(user_data as u32);
                    self.in_flight -= 1;
                    if let Some(lease) = slot.lease {
                        self.arena.give_back(lease);
                    }
                }
            }
        }
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        self.cancel_all_and_drain();
        // Nothing is in flight: unpin the buffers now, so their locked-memory
        // charge is gone before the next ring registers (the kernel would
        // otherwise release it later, from a worker, after the fd closes).
        let _ = self.ring.submitter().unregister_buffers();
        // And drop the ring's references to registered files now, not in the
        // kernel's asynchronous teardown after the fd closes: a script that
        // unmounts right after urmove exits must not find the fs busy.
        let _ = self.ring.submitter().unregister_files();
    }
}

fn ring_unavailable(e: io::Error) -> Error {
    let disabled = super::sys::io_uring_disabled().unwrap_or(0);
    let remedy = match (e.raw_os_error(), disabled) {
        (_, 2) => "io_uring is disabled by sysctl kernel.io_uring_disabled=2; set it to 0".into(),
        (Some(libc::EPERM), 1) => {
            "kernel.io_uring_disabled=1 allows only root or the io_uring_group; run as root or set it to 0"
                .into()
        }
        (Some(libc::ENOSYS), _) => "this kernel was built without io_uring; urmove needs Linux 5.19+".into(),
        (Some(libc::ENOMEM), _) => "raise the memlock limit (ulimit -l, LimitMEMLOCK= in the unit)".into(),
        _ => "check that io_uring is allowed here (seccomp, containers) and the kernel is 5.19+".into(),
    };
    Error::RingUnavailable {
        reason: e.to_string(),
        remedy,
    }
}

fn memlock_remedy(e: &io::Error, bytes: usize) -> String {
    if e.raw_os_error() == Some(libc::ENOMEM) || e.raw_os_error() == Some(libc::EPERM) {
        memlock_remedy_text(bytes as u64)
    } else {
        "check the kernel log".into()
    }
}

/// What to raise so `bytes` of registered buffers fit.
pub fn memlock_remedy_text(bytes: u64) -> String {
    let need_kib = bytes.div_ceil(1024) + 1024;
    format!(
        "registered buffers ({} MiB) are locked memory: raise RLIMIT_MEMLOCK to at least {need_kib} KiB \
         (`ulimit -l {need_kib}`, or LimitMEMLOCK= in the systemd unit) or grant CAP_IPC_LOCK; \
         the kernel counts it per user, so this user's other io_uring processes share it",
        bytes >> 20
    )
}
