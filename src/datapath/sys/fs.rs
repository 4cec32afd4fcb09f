//! What a filesystem says of an open file or a path, and the calls that
//! change a file's contents without writing them: `statx` direct-I/O
//! alignment and fresh link count and ctime, the filesystem's type, free
//! space and longest name, holes and data (`SEEK_HOLE`/`SEEK_DATA`),
//! zeroing a range, and extended attributes.

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

/// `statx` of an open file, asking for `mask` with `flags` beside
/// `AT_EMPTY_PATH`; the fields outside `stx_mask` are zero.
fn statx_of(file: &File, flags: libc::c_int, mask: libc::c_uint) -> io::Result<libc::statx> {
    let mut stx = MaybeUninit::<libc::statx>::zeroed();
    let empty = c"";
    // SAFETY: `stx` is a valid, writable statx buffer for the duration of the
    // call and `empty` is a NUL-terminated string; no memory is retained.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH | flags,
            mask,
            stx.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statx returned 0, so the buffer is initialised (it was zeroed too).
    Ok(unsafe { stx.assume_init() })
}

/// Direct-I/O alignment as reported by `statx(STATX_DIOALIGN)`:
/// `(memory alignment, offset alignment)`, or `None` when the kernel or the
/// filesystem does not report it (or reports that O_DIRECT is unsupported).
pub fn statx_dio_align(file: &File) -> io::Result<Option<(u32, u32)>> {
    let stx = statx_of(file, 0, libc::STATX_DIOALIGN)?;
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
    let mask = libc::STATX_NLINK | libc::STATX_CTIME;
    let stx = statx_of(file, libc::AT_STATX_FORCE_SYNC, mask)?;
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
    use crate::datapath::direct::{round_up, TRANSFER_ALIGN};
    use std::os::unix::fs::FileExt;
    const CHUNK: usize = 1 << 20;
    let layout =
        std::alloc::Layout::from_size_align(CHUNK, TRANSFER_ALIGN).expect("a valid layout");
    // SAFETY: the layout has a non-zero size; the pointer is checked, used
    // only as `CHUNK` zeroed bytes below and freed with the same layout.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return Err(io::Error::from(io::ErrorKind::OutOfMemory));
    }
    // SAFETY: `ptr` is a live, zeroed allocation of `CHUNK` bytes.
    let zeros = unsafe { std::slice::from_raw_parts(ptr, CHUNK) };
    let end = offset + round_up(len, TRANSFER_ALIGN as u64);
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
