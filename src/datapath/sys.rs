//! Thin, checked wrappers over the system calls and sysfs files the data path
//! probes at startup: statx alignment, filesystem type, free space, block
//! device geometry, memlock and capability limits.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// Direct-I/O alignment as reported by `statx(STATX_DIOALIGN)`:
/// `(memory alignment, offset alignment)`, or `None` when the kernel or the
/// filesystem does not report it (or reports that O_DIRECT is unsupported).
pub fn statx_dio_align(file: &File) -> io::Result<Option<(u32, u32)>> {
    let mut stx = MaybeUninit::<libc::statx>::zeroed();
    let empty = c"";
    // SAFETY: `stx` is a valid, writable statx buffer for the duration of the
    // call and `empty` is a NUL-terminated string; no memory is retained.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            stx.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statx returned 0, so the buffer is initialised (it was zeroed too).
    let stx = unsafe { stx.assume_init() };
    if stx.stx_mask & libc::STATX_DIOALIGN == 0 || stx.stx_dio_offset_align == 0 {
        return Ok(None);
    }
    Ok(Some((stx.stx_dio_mem_align, stx.stx_dio_offset_align)))
}

/// The link count and ctime (ns since the epoch) of an open file as the
/// filesystem says them now, not as a cache holds them
/// (`AT_STATX_FORCE_SYNC`: a FUSE or network filesystem is asked again; a
/// local one answers as ever).
pub fn fresh_links_and_ctime(file: &File) -> io::Result<(u64, i128)> {
    let mut stx = MaybeUninit::<libc::statx>::zeroed();
    let empty = c"";
    // SAFETY: `stx` is a valid, writable statx buffer for the duration of the
    // call and `empty` is a NUL-terminated string; no memory is retained.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_STATX_FORCE_SYNC,
            libc::STATX_NLINK | libc::STATX_CTIME,
            stx.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statx returned 0, so the buffer is initialised (it was zeroed too).
    let stx = unsafe { stx.assume_init() };
    let ctime =
        i128::from(stx.stx_ctime.tv_sec) * 1_000_000_000 + i128::from(stx.stx_ctime.tv_nsec);
    Ok((u64::from(stx.stx_nlink), ctime))
}

/// The filesystem's magic number (`statfs.f_type`) and a readable name.
pub fn fs_type(file: &File) -> io::Result<(i64, &'static str)> {
    let mut st = MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: `st` is a valid, writable statfs buffer; no memory is retained.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatfs returned 0, so the buffer is initialised.
    let st = unsafe { st.assume_init() };
    let magic = st.f_type;
    let name = match magic {
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x0102_1994 => "tmpfs",
        0x8584_58F6 => "ramfs",
        0x6969 => "nfs",
        0x794C_7630 => "overlayfs",
        0x2FC1_2FC1 => "zfs",
        0x6573_5546 => "fuse",
        0x0BD0_0BD0 => "lustre",
        0x4750_4653 => "gpfs",
        0x0062_6466 | 0x6264_6576 => "devtmpfs",
        0xF2F5_2010 => "f2fs",
        _ => "unknown",
    };
    Ok((magic, name))
}

/// Bytes available to an unprivileged writer on the filesystem holding
/// `path`; `None` for filesystems that report no size at all (ramfs).
pub fn free_bytes(path: &Path) -> io::Result<Option<u64>> {
    let c = cstring(path)?;
    let mut st = MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: `c` is NUL-terminated and `st` is a valid, writable buffer.
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statvfs returned 0, so the buffer is initialised.
    Ok(available(&unsafe { st.assume_init() }))
}

/// What a filesystem's figures leave an unprivileged writer; `None` for
/// one that reports no size.
fn available(st: &libc::statvfs) -> Option<u64> {
    (st.f_blocks != 0).then(|| st.f_bavail.saturating_mul(st.f_frsize))
}

/// [`free_bytes`] of the filesystem holding the open file `fd`.
pub fn free_bytes_fd(fd: &impl AsRawFd) -> io::Result<Option<u64>> {
    let mut st = MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: the descriptor is open for the call and `st` is a valid,
    // writable buffer.
    let rc = unsafe { libc::fstatvfs(fd.as_raw_fd(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatvfs returned 0, so the buffer is initialised.
    Ok(available(&unsafe { st.assume_init() }))
}

/// The longest name (bytes) the filesystem of `fd` takes in a directory
/// (`statfs.f_namelen`; NAME_MAX, 255, on ext4, XFS and btrfs).
pub fn name_max_fd(fd: &impl AsRawFd) -> io::Result<usize> {
    let mut st = MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: the descriptor is open for the call and `st` is a valid,
    // writable statfs buffer; no memory is retained.
    let rc = unsafe { libc::fstatfs(fd.as_raw_fd(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatfs returned 0, so the buffer is initialised.
    let len = unsafe { st.assume_init() }.f_namelen;
    Ok(usize::try_from(len).unwrap_or(0))
}

/// The running kernel's release string, as `uname -r` prints it.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Size in bytes of the block device open as `file`.
pub fn block_device_size(file: &File) -> io::Result<u64> {
    // BLKGETSIZE64 = _IOR(0x12, 114, size_t)
    const BLKGETSIZE64: libc::Ioctl = 0x8008_1272;
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 into `size`, which outlives the call.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size as *mut u64) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size)
}

/// Logical block size of the block device open as `file`.
pub fn block_device_logical_block_size(file: &File) -> io::Result<u32> {
    let mut size: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int into `size`, which outlives the call.
    let rc = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            libc::BLKSSZGET,
            &mut size as *mut libc::c_int,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size as u32)
}

/// `/sys/dev/block/MAJOR:MINOR`, the sysfs directory of a block device.
fn sysfs_dev(major: u32, minor: u32) -> std::path::PathBuf {
    Path::new("/sys/dev/block").join(format!("{major}:{minor}"))
}

/// Kernel name of the block device `major:minor` (as `loop3` or `nvme0n1p2`).
pub fn block_device_name(major: u32, minor: u32) -> Option<String> {
    let uevent = std::fs::read_to_string(sysfs_dev(major, minor).join("uevent")).ok()?;
    uevent
        .lines()
        .find_map(|l| l.strip_prefix("DEVNAME="))
        .map(str::to_string)
}

/// Logical block size of `major:minor` from sysfs (a partition asks its disk).
pub fn sysfs_logical_block_size(major: u32, minor: u32) -> Option<u32> {
    let dev = sysfs_dev(major, minor);
    for queue in [dev.join("queue"), dev.join("../queue")] {
        if let Ok(s) = std::fs::read_to_string(queue.join("logical_block_size")) {
            if let Ok(v) = s.trim().parse() {
                return Some(v);
            }
        }
    }
    None
}

/// Partitions and holders (LVM, md, dm) that sit on `major:minor`.
pub fn block_device_children(major: u32, minor: u32) -> Vec<String> {
    let dev = sysfs_dev(major, minor);
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dev.join("holders")) {
        out.extend(
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned()),
        );
    }
    if let Ok(entries) = std::fs::read_dir(&dev) {
        out.extend(
            entries
                .flatten()
                .filter(|e| e.path().join("partition").exists())
                .map(|e| e.file_name().to_string_lossy().into_owned()),
        );
    }
    out
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

/// First data at or after `offset` (`SEEK_DATA`), `None` when only a hole follows.
pub fn seek_data(file: &File, offset: u64) -> io::Result<Option<u64>> {
    seek(file, offset, libc::SEEK_DATA)
}

/// First hole at or after `offset` (`SEEK_HOLE`); end of file counts as a hole.
pub fn seek_hole(file: &File, offset: u64) -> io::Result<Option<u64>> {
    seek(file, offset, libc::SEEK_HOLE)
}

fn seek(file: &File, offset: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
    // SAFETY: lseek only reads its integer arguments.
    let rc = unsafe { libc::lseek(file.as_raw_fd(), offset as libc::off_t, whence) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENXIO) {
            return Ok(None);
        }
        return Err(e);
    }
    Ok(Some(rc as u64))
}

/// Make `len` bytes of `file` at `offset` read as zeros without changing
/// its size: punch a hole, or (a filesystem without holes) zero the range
/// in place, or write zeros (whole 4 KiB pages, so an O_DIRECT descriptor
/// takes them; a page past the end is cut when the file is finished).
pub fn zero_range(file: &File, offset: u64, len: u64) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    for mode in [
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
    ] {
        // SAFETY: fallocate only reads its integer arguments.
        let rc = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                mode,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
            return Err(e);
        }
    }
    write_zeros(file, offset, len)
}

fn write_zeros(file: &File, offset: u64, len: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    const PAGE: usize = 4096;
    const CHUNK: usize = 1 << 20;
    let layout = std::alloc::Layout::from_size_align(CHUNK, PAGE).expect("a valid layout");
    // SAFETY: the layout has a non-zero size; the pointer is checked, used
    // only as `CHUNK` zeroed bytes below and freed with the same layout.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return Err(io::Error::from(io::ErrorKind::OutOfMemory));
    }
    // SAFETY: `ptr` is a live, zeroed allocation of `CHUNK` bytes.
    let zeros = unsafe { std::slice::from_raw_parts(ptr, CHUNK) };
    let end = offset + len.div_ceil(PAGE as u64) * PAGE as u64;
    let mut at = offset;
    let mut result = Ok(());
    while at < end && result.is_ok() {
        let n = ((end - at) as usize).min(CHUNK);
        result = file.write_all_at(&zeros[..n], at);
        at += n as u64;
    }
    // SAFETY: allocated above with this layout and not freed before.
    unsafe { std::alloc::dealloc(ptr, layout) };
    result
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

/// Take a write lease on `file` (`F_SETLEASE`, `F_WRLCK`): until it is let
/// go ([`end_lease`]), every other open of the file (or truncate by
/// path) waits, so nobody but this process opens it to write. Fails
/// where another opening of it exists, or on a filesystem without leases.
pub fn take_write_lease(file: &File) -> io::Result<()> {
    // SAFETY: F_SETLEASE on a descriptor the caller owns; no memory is
    // passed.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLEASE, libc::F_WRLCK) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Let go of `file`'s lease (a ring holding the opening would keep it
/// otherwise, and every open of the file would wait the kernel's
/// lease-break time).
pub fn end_lease(file: &File) {
    // SAFETY: F_SETLEASE on a descriptor the caller owns; no memory is
    // passed.
    unsafe {
        libc::fcntl(file.as_raw_fd(), libc::F_SETLEASE, libc::F_UNLCK);
    }
}

/// The coarse real-time clock (what the kernel stamps an inode's times
/// with when nobody looked at them since), in nanoseconds since the epoch.
pub fn coarse_now_ns() -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec the call writes.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
}

/// The local wall-clock time as (hours, minutes, seconds), for interval lines.
pub fn local_hms() -> (u32, u32, u32) {
    match local_tm() {
        Ok(tm) => (tm.tm_hour as u32, tm.tm_min as u32, tm.tm_sec as u32),
        Err(now) => {
            let s = (now.max(0) as u64 % 86_400) as u32;
            (s / 3600, (s / 60) % 60, s % 60)
        }
    }
}

/// The local date and time as `YYYY-MM-DD HH:MM` (seconds since 1970
/// when the local time is unknown), for titles.
pub fn local_date_time() -> String {
    match local_tm() {
        Ok(tm) => format!(
            "{:04}-{:02}-{:02} {:02}:{:02}",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min
        ),
        Err(now) => format!("{} s since 1970 UTC", now.max(0)),
    }
}

/// The broken-down local time now, or the bare clock if that fails.
fn local_tm() -> Result<libc::tm, libc::time_t> {
    // SAFETY: time(NULL) reads the clock and writes nothing of ours.
    let now = unsafe { libc::time(std::ptr::null_mut()) };
    let mut tm = MaybeUninit::<libc::tm>::zeroed();
    // SAFETY: localtime_r writes only into `tm`, a valid buffer that outlives
    // the call; `now` is a valid time_t.
    let ok = unsafe { !libc::localtime_r(&now, tm.as_mut_ptr()).is_null() };
    if !ok {
        return Err(now);
    }
    // SAFETY: localtime_r succeeded, so `tm` is initialised (it was zeroed too).
    Ok(unsafe { tm.assume_init() })
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

/// Ask for a socket send buffer of `bytes` (FDT's `-ss`); the kernel caps it
/// at `net.core.wmem_max`.
pub fn set_send_buffer(fd: std::os::fd::RawFd, bytes: usize) {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    let _ = set_opt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &v);
}

/// Set a socket's receive buffer (SO_RCVBUF), which turns off the
/// kernel's autotuning of it.
pub fn set_recv_buffer(fd: std::os::fd::RawFd, bytes: usize) {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    let _ = set_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &v);
}

/// Set socket option `name` at `level` to `v` (an int, or the u64 some
/// options take).
fn set_opt<T: Copy>(
    fd: std::os::fd::RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: &T,
) -> io::Result<()> {
    // SAFETY: setsockopt reads size_of::<T>() bytes from `v`, a plain value
    // borrowed for the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Use congestion control `name` (`TCP_CONGESTION`: "bbr", "cubic", ...)
/// on a TCP socket. Fails with ENOENT when the kernel has no such
/// algorithm and EPERM when an unprivileged process may not pick it (see
/// `net.ipv4.tcp_allowed_congestion_control`).
pub fn set_congestion(fd: std::os::fd::RawFd, name: &str) -> io::Result<()> {
    // SAFETY: setsockopt reads `name.len()` bytes from the string's buffer,
    // which outlives the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The congestion control a TCP socket uses, `None` when it is not one.
pub fn congestion(fd: std::os::fd::RawFd) -> Option<String> {
    let name: [u8; 16] = get_opt(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION)?;
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Some(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// Socket option `name` at `level` as a `T` (an int, or a plain array of
/// integers the kernel fills whole); `None` when the call fails or the
/// kernel wrote less.
pub(crate) fn get_opt<T: Copy + Default>(
    fd: std::os::fd::RawFd,
    level: libc::c_int,
    name: libc::c_int,
) -> Option<T> {
    let mut v = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `v`, a plain
    // value on this frame for the call, and reports how many in `len`.
    let r = unsafe { libc::getsockopt(fd, level, name, (&mut v as *mut T).cast(), &mut len) };
    (r == 0 && len as usize == std::mem::size_of::<T>()).then_some(v)
}

/// Keep at most `bytes` of not-yet-sent data in a TCP socket's buffer
/// (`TCP_NOTSENT_LOWAT`): a send completes only when the rest fits under
/// it, so data waits in the sender's queue, where it can still go on any
/// stream, instead of behind one stream's congestion window.
pub fn set_notsent_lowat(fd: std::os::fd::RawFd, bytes: usize) -> io::Result<()> {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    set_opt(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, &v)
}

/// A TCP socket's `TCP_NOTSENT_LOWAT`, `None` when it is not one.
pub fn notsent_lowat(fd: std::os::fd::RawFd) -> Option<i32> {
    get_opt(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT)
}

/// Pace a socket's sends to at most `bytes_per_s` (`SO_MAX_PACING_RATE`;
/// TCP paces itself without the fq qdisc since Linux 4.13).
pub fn set_max_pacing_rate(fd: std::os::fd::RawFd, bytes_per_s: u64) -> io::Result<()> {
    // The kernel takes a u64 since 4.20 (the low 32 bits before).
    set_opt(
        fd,
        libc::SOL_SOCKET,
        libc::SO_MAX_PACING_RATE,
        &bytes_per_s.max(1),
    )
}

/// The congestion controls this kernel has loaded or built in
/// (`net.ipv4.tcp_available_congestion_control`).
pub fn available_congestion() -> Vec<String> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .map(|s| s.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The socket's send buffer size now (`SO_SNDBUF`: what autotuning grew
/// it to, or what was set).
pub fn send_buffer(fd: std::os::fd::RawFd) -> Option<u64> {
    get_opt::<libc::c_int>(fd, libc::SOL_SOCKET, libc::SO_SNDBUF).map(|v| v.max(0) as u64)
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

fn set_int_opt(fd: std::os::fd::RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) {
    let _ = set_opt(fd, level, name, &v);
}

/// Make a dead peer visible within about `timeout`: TCP keepalive probes
/// after a quarter of it, and `TCP_USER_TIMEOUT` so data the peer never
/// acknowledges fails the connection instead of being retried for minutes.
pub fn set_dead_peer_timeout(fd: std::os::fd::RawFd, timeout: std::time::Duration) {
    let secs = timeout.as_secs().clamp(4, 3600) as libc::c_int;
    set_int_opt(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    set_int_opt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, (secs / 4).max(1));
    set_int_opt(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_KEEPINTVL,
        (secs / 8).max(1),
    );
    set_int_opt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 4);
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    set_int_opt(fd, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, ms);
}

/// Shut a socket down both ways: operations in flight on it end with an
/// error at once, and the peer sees the connection end.
pub fn shutdown_both(fd: std::os::fd::RawFd) {
    // SAFETY: shutdown takes no memory; a stale fd only yields EBADF.
    unsafe {
        libc::shutdown(fd, libc::SHUT_RDWR);
    }
}

/// Set extended attribute `name` (NUL-terminated) on an open file.
pub fn set_xattr(file: &File, name: &std::ffi::CStr, value: &[u8]) -> io::Result<()> {
    // SAFETY: the kernel reads `value.len()` bytes from `value` and the
    // NUL-terminated `name`, both borrowed for the call.
    let r = unsafe {
        libc::fsetxattr(
            file.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Remove extended attribute `name` from an open file (none there: fine).
pub fn remove_xattr(file: &File, name: &std::ffi::CStr) -> io::Result<()> {
    // SAFETY: the kernel reads the NUL-terminated `name`, borrowed for the
    // call.
    let r = unsafe { libc::fremovexattr(file.as_raw_fd(), name.as_ptr()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        // Not there, or where no file has attributes: nothing to remove.
        if !matches!(e.raw_os_error(), Some(libc::ENODATA | libc::EOPNOTSUPP)) {
            return Err(e);
        }
    }
    Ok(())
}

/// Extended attribute `name` of an open file, if it has one (up to 256 bytes).
pub fn get_xattr(file: &File, name: &std::ffi::CStr) -> Option<Vec<u8>> {
    let mut buf = [0u8; 256];
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`, which
    // lives on this stack frame for the call.
    let r = unsafe {
        libc::fgetxattr(
            file.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    (r >= 0).then(|| buf[..r as usize].to_vec())
}

/// Bytes a TCP socket holds that the peer has not acknowledged (sent or
/// not yet sent): `SIOCOUTQ`.
pub fn socket_outq(fd: std::os::fd::RawFd) -> Option<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ writes one int into `n`, which outlives the call.
    let r = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n) };
    (r == 0).then_some(n.max(0) as usize)
}

/// The network interface a connected socket's local address belongs to,
/// and whether it is a physical device (one with a `device` in sysfs;
/// loopback, veth, TUN and bridges have none). `None` when unknown.
pub fn socket_interface(fd: std::os::fd::RawFd) -> Option<(String, bool)> {
    let mut addr = MaybeUninit::<libc::sockaddr_storage>::zeroed();
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes of the socket's local
    // address into `addr`, which lives on this frame for the call.
    if unsafe { libc::getsockname(fd, addr.as_mut_ptr().cast(), &mut len) } != 0 {
        return None;
    }
    // SAFETY: zero-initialised and filled by getsockname; plain integers.
    let local = unsafe { addr.assume_init() };
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list and stores its head in `list`,
    // freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut at = list;
    while !at.is_null() && found.is_none() {
        // SAFETY: `at` is a node of the list getifaddrs returned, alive
        // until freeifaddrs.
        let node = unsafe { &*at };
        // SAFETY: a non-null ifa_addr points at a sockaddr of its family.
        if !node.ifa_addr.is_null() && unsafe { same_ip(&*node.ifa_addr, &local) } {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { std::ffi::CStr::from_ptr(node.ifa_name) };
            found = Some(name.to_string_lossy().into_owned());
        }
        at = node.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    let name = found?;
    let physical = !copies_anyway(&name);
    Some((name, physical))
}

/// Whether interface `name` is one whose sends the kernel always copies:
/// loopback, TUN/TAP, and devices with no hardware and no kind of their
/// own (veth, dummy). Bonds, VLANs, macvlans and bridges name their kind
/// (`DEVTYPE`) and stand on a NIC that may not copy.
fn copies_anyway(name: &str) -> bool {
    let dir = std::path::Path::new("/sys/class/net").join(name);
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    const ARPHRD_LOOPBACK: &str = "772";
    if read("type").trim() == ARPHRD_LOOPBACK || dir.join("tun_flags").exists() {
        return true;
    }
    !dir.join("device").exists() && !read("uevent").lines().any(|l| l.starts_with("DEVTYPE="))
}

/// Whether `a` (an interface address) is the IP address of `local`.
///
/// # Safety
/// `a` must be a whole sockaddr of its family (as getifaddrs gives).
unsafe fn same_ip(a: &libc::sockaddr, local: &libc::sockaddr_storage) -> bool {
    let family = i32::from(a.sa_family);
    if family == libc::AF_INET && i32::from(local.ss_family) == libc::AF_INET6 {
        // An IPv4 peer of a socket bound to [::]: its address is v4-mapped.
        // SAFETY: the family says `local` holds a sockaddr_in6, and the
        // caller vouches that `a` is a whole sockaddr_in.
        let (x, y) = unsafe {
            (
                &*(a as *const libc::sockaddr).cast::<libc::sockaddr_in>(),
                &*(local as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>(),
            )
        };
        let m = y.sin6_addr.s6_addr;
        return m[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]
            && m[12..] == x.sin_addr.s_addr.to_ne_bytes();
    }
    if family != i32::from(local.ss_family) {
        return false;
    }
    let a = a as *const libc::sockaddr;
    let l = local as *const libc::sockaddr_storage;
    match family {
        libc::AF_INET => {
            // SAFETY: both are sockaddr_in (the family says so; the caller
            // vouches for `a`, and `local` is a whole sockaddr_storage).
            let (x, y) = unsafe {
                (
                    &*a.cast::<libc::sockaddr_in>(),
                    &*l.cast::<libc::sockaddr_in>(),
                )
            };
            x.sin_addr.s_addr == y.sin_addr.s_addr
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let (x, y) = unsafe {
                (
                    &*a.cast::<libc::sockaddr_in6>(),
                    &*l.cast::<libc::sockaddr_in6>(),
                )
            };
            x.sin6_addr.s6_addr == y.sin6_addr.s6_addr
        }
        _ => false,
    }
}

/// What a TCP connection's sender learnt of its path (`TCP_INFO`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpPath {
    /// Smoothed and least round-trip time seen, microseconds.
    pub rtt_us: u32,
    pub min_rtt_us: u32,
    /// Time with data in flight, and the shares of it held back by the
    /// peer's receive window or this side's send buffer, microseconds.
    pub busy_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
    /// Segments sent again, in all.
    pub retransmits: u32,
    /// The congestion window (segments) and segment size (bytes).
    pub cwnd: u32,
    pub mss: u32,
    /// Bytes sent and bytes sent again.
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    /// The cap on its pacing (`SO_MAX_PACING_RATE`), bytes per second;
    /// `u64::MAX` when none is set.
    pub pacing_cap_bytes_per_s: u64,
}

/// `TCP_INFO`'s path fields of a TCP socket, `None` when it is not one.
pub fn tcp_path(fd: std::os::fd::RawFd) -> Option<TcpPath> {
    let info = tcp_info(fd)?;
    Some(TcpPath {
        rtt_us: info.tcpi_rtt,
        min_rtt_us: info.tcpi_min_rtt,
        busy_us: info.tcpi_busy_time,
        rwnd_limited_us: info.tcpi_rwnd_limited,
        sndbuf_limited_us: info.tcpi_sndbuf_limited,
        retransmits: info.tcpi_total_retrans,
        cwnd: info.tcpi_snd_cwnd,
        mss: info.tcpi_snd_mss,
        bytes_sent: info.tcpi_bytes_sent,
        bytes_retrans: info.tcpi_bytes_retrans,
        pacing_cap_bytes_per_s: info.tcpi_max_pacing_rate,
    })
}

fn tcp_info(fd: std::os::fd::RawFd) -> Option<libc::tcp_info> {
    let mut info = MaybeUninit::<libc::tcp_info>::zeroed();
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `info`, which lives
    // on this stack frame for the call, and reports how many in `len`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r != 0 {
        return None;
    }
    // SAFETY: zero-initialised above, and the kernel filled what it knows
    // (an older kernel fewer fields, left zero); every field of tcp_info is
    // a plain integer, valid for any bytes.
    Some(unsafe { info.assume_init() })
}

/// What the kernel's TCP knows of a connection (`TCP_INFO`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpProgress {
    /// Still connected (ESTABLISHED, or CLOSE_WAIT: the peer only stopped
    /// sending).
    pub connected: bool,
    /// Bytes the peer's TCP acknowledged.
    pub bytes_acked: u64,
    /// Bytes this side's TCP received.
    pub bytes_received: u64,
}

/// `TCP_INFO` of a TCP socket, `None` when it is not one.
pub fn tcp_progress(fd: std::os::fd::RawFd) -> Option<TcpProgress> {
    let info = tcp_info(fd)?;
    const ESTABLISHED: u8 = 1;
    const CLOSE_WAIT: u8 = 8;
    Some(TcpProgress {
        connected: info.tcpi_state == ESTABLISHED || info.tcpi_state == CLOSE_WAIT,
        bytes_acked: info.tcpi_bytes_acked,
        bytes_received: info.tcpi_bytes_received,
    })
}

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`, owned by this
    // frame for the call.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Lock bytes `[start, start + len)` of `file` for writing (`len` 0: to
/// the end, however far), without waiting: an open file description lock
/// (`F_OFD_SETLK`), held until every descriptor of this opening closes.
/// It excludes any other opening, in this process or another, so two
/// receivers sharing a filesystem never write the same range of a part.
/// `Err(WouldBlock)` when another holds a lock over any of the range.
pub fn lock_range(file: &File, start: u64, len: u64) -> io::Result<()> {
    ofd_lock(file, libc::F_WRLCK, (start, len))
}

/// Let go of this opening's lock over `len` bytes from `start` (what it
/// holds outside them stays).
pub fn unlock_range(file: &File, start: u64, len: u64) -> io::Result<()> {
    ofd_lock(file, libc::F_UNLCK, (start, len))
}

/// Lock all of `file`, as far as it ever reaches, for this opening: as
/// [`lock_range`] (this opening's own ranges merge into it), so it fails
/// while any other opening holds a lock on any of it.
pub fn lock_whole(file: &File) -> io::Result<()> {
    lock_range(file, 0, 0)
}

/// The lock another opening holds that keeps this one from locking `len`
/// bytes of `file` from `start` for writing (`F_OFD_GETLK`): its start
/// and length (0: to the end), or `None` when nothing would.
pub fn lock_in_the_way(file: &File, start: u64, len: u64) -> io::Result<Option<(u64, u64)>> {
    let mut l = flock_of(libc::F_WRLCK, (start, len))?;
    // SAFETY: the descriptor is open for the call's length; F_OFD_GETLK
    // reads and writes only `l`, which lives across it.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut l) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((l.l_type != libc::F_UNLCK as i16).then_some((l.l_start as u64, l.l_len as u64)))
}

/// A lock of `kind` over `len` bytes from `start` (0: to the end), as
/// `fcntl` takes it.
fn flock_of(kind: libc::c_int, (start, len): (u64, u64)) -> io::Result<libc::flock> {
    let range = |v: u64| i64::try_from(v).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput));
    // SAFETY: flock is a plain C struct; all-zero is a valid value.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = kind as i16;
    l.l_whence = libc::SEEK_SET as i16;
    (l.l_start, l.l_len) = (range(start)?, range(len)?);
    Ok(l)
}

/// An open file description lock (`F_OFD_SETLK`) of `kind` over `len`
/// bytes from `start` (0: to the end, however far).
fn ofd_lock(file: &File, kind: libc::c_int, (start, len): (u64, u64)) -> io::Result<()> {
    let mut l = flock_of(kind, (start, len))?;
    // SAFETY: the descriptor is open for the call's length; `l` lives
    // across it and F_OFD_SETLK reads (and may write) only that struct.
    let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &mut l) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Err(io::Error::from(io::ErrorKind::WouldBlock)),
        _ => Err(e),
    }
}
