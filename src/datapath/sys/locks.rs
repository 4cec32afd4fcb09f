//! Who else may open or write a file: write leases (`F_SETLEASE`) and
//! open file description byte-range locks (`F_OFD_SETLK`).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

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

/// Take a read lease on `file` (`F_SETLEASE`, `F_RDLCK`; `file` opened
/// read-only): until it is let go, an open of the file to write (or a
/// truncate) waits; opens to read go on. Fails where an opening of it to
/// write exists, or on a filesystem without leases.
pub fn take_read_lease(file: &File) -> io::Result<()> {
    // SAFETY: F_SETLEASE on a descriptor the caller owns; no memory is
    // passed.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLEASE, libc::F_RDLCK) };
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

/// Lock bytes `[start, start + len)` of `file` for writing (`len` 0: to
/// the end, however far), without waiting: an open file description lock
/// (`F_OFD_SETLK`), held until every descriptor of this opening closes.
/// It excludes any other opening, in this process or another, so two
/// receivers sharing a filesystem never write the same range of a part.
/// `Err(WouldBlock)` when another holds a lock over any of the range.
pub fn lock_range(file: &File, start: u64, len: u64) -> io::Result<()> {
    ofd_lock(file, libc::F_WRLCK, start, len)
}

/// Let go of this opening's lock over `len` bytes from `start` (what it
/// holds outside them stays).
pub fn unlock_range(file: &File, start: u64, len: u64) -> io::Result<()> {
    ofd_lock(file, libc::F_UNLCK, start, len)
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
    let mut l = flock_of(libc::F_WRLCK, start, len)?;
    // SAFETY: the descriptor is open for the call's length; F_OFD_GETLK
    // reads and writes only `l`, which lives across it.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut l) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((l.l_type != libc::F_UNLCK as i16).then_some((l.l_start as u64, l.l_len as u64)))
}

/// A lock of `kind` over `len` bytes from `start` (0: to the end), as
/// `fcntl` takes it.
fn flock_of(kind: libc::c_int, start: u64, len: u64) -> io::Result<libc::flock> {
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
fn ofd_lock(file: &File, kind: libc::c_int, start: u64, len: u64) -> io::Result<()> {
    let mut l = flock_of(kind, start, len)?;
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
