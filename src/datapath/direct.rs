//! The O_DIRECT rules, in one place, for the benchmark and the transfers
//! alike: opening a file with O_DIRECT as `--direct` asks (buffered where
//! the filesystem refuses the flag in `auto`, refused in `required`), the
//! alignment direct I/O needs (statx `STATX_DIOALIGN`, else the device's
//! logical block size, else 4096), and rounding sizes to it: the region a
//! benchmark addresses, and the unaligned tail of a transfer's last block,
//! padded to a whole page for its read or write.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::Path;

use super::sys;

/// `--direct auto|required|off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectMode {
    /// O_DIRECT where the filesystem supports it, buffered with a warning elsewhere.
    Auto,
    /// O_DIRECT or refuse.
    Required,
    /// Buffered I/O through the page cache.
    Off,
}

/// Direct-I/O alignment of a target and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alignment {
    /// Required alignment of buffer addresses.
    pub mem: u32,
    /// Required alignment of file offsets and lengths.
    pub offset: u32,
    /// `statx`, `logical block size`, `default` or `buffered`.
    pub from: &'static str,
}

/// Default alignment when neither statx nor the device say.
pub const ALIGN_DEFAULT: u32 = 4096;

/// What the transfer path pads an O_DIRECT read or write to, whatever the
/// file's own alignment: a whole page, as a frame's payload starts on one
/// in its buffer (`net::HEADROOM`).
pub const TRANSFER_ALIGN: usize = 4096;

/// [`Alignment::from`] when neither statx nor the device said.
const FROM_DEFAULT: &str = "default";

/// `v` rounded up to a multiple of `align`.
pub const fn round_up(v: u64, align: u64) -> u64 {
    v.div_ceil(align) * align
}

/// `len` bytes padded to a whole [`TRANSFER_ALIGN`]: what an O_DIRECT
/// read or write of a block whose tail is unaligned moves.
pub const fn padded(len: usize) -> usize {
    len.div_ceil(TRANSFER_ALIGN) * TRANSFER_ALIGN
}

/// [`padded`] for a frame's `u32` length.
pub const fn padded_u32(len: u32) -> u32 {
    len.div_ceil(TRANSFER_ALIGN as u32) * TRANSFER_ALIGN as u32
}

impl Alignment {
    /// No alignment: buffered I/O.
    pub const BUFFERED: Alignment = Alignment {
        mem: 1,
        offset: 1,
        from: "buffered",
    };

    /// `v` rounded up to a multiple of the offset alignment.
    pub fn round_up(&self, v: u64) -> u64 {
        round_up(v, u64::from(self.offset))
    }

    /// `v` without its unaligned tail: rounded down to a multiple of the
    /// offset alignment.
    pub fn round_down(&self, v: u64) -> u64 {
        let align = u64::from(self.offset);
        v / align * align
    }

    /// Whether `v` is a multiple of the offset alignment (an offset or a
    /// length O_DIRECT takes).
    pub fn holds(&self, v: u64) -> bool {
        v.is_multiple_of(u64::from(self.offset))
    }

    /// Whether neither statx nor the device said, so [`ALIGN_DEFAULT`] is
    /// a guess.
    pub fn is_guess(&self) -> bool {
        self.from == FROM_DEFAULT
    }
}

/// The direct-I/O alignment of `file`, with O_DIRECT in force when
/// `direct` (buffered I/O needs none): from `statx(STATX_DIOALIGN)`, else
/// the logical block size of the device `file` is (`is_block`) or sits on
/// (`dev`, its device number), else [`ALIGN_DEFAULT`].
pub fn alignment(file: &File, direct: bool, is_block: bool, dev: libc::dev_t) -> Alignment {
    if !direct {
        return Alignment::BUFFERED;
    }
    if let Some((mem, offset)) = sys::statx_dio_align(file).ok().flatten() {
        return Alignment {
            mem: mem.max(1),
            offset,
            from: "statx",
        };
    }
    let lbs = if is_block {
        sys::block_device_logical_block_size(file).ok()
    } else {
        sys::sysfs_logical_block_size(libc::major(dev), libc::minor(dev))
    };
    match lbs {
        Some(lbs) if lbs.is_power_of_two() => Alignment {
            mem: lbs,
            offset: lbs,
            from: "logical block size",
        },
        _ => Alignment {
            mem: ALIGN_DEFAULT,
            offset: ALIGN_DEFAULT,
            from: FROM_DEFAULT,
        },
    }
}

/// What to tell the user when `path`'s alignment is a guess.
pub fn guessed_note(path: &Path) -> String {
    format!(
        "{}: DIO alignment unknown (no statx STATX_DIOALIGN, no logical block size); assuming {ALIGN_DEFAULT}",
        path.display()
    )
}

/// What to tell the user when the filesystem of `path` refused O_DIRECT.
pub fn buffered_note(path: &Path) -> String {
    format!(
        "{}: O_DIRECT refused by the filesystem, using buffered I/O",
        path.display()
    )
}

/// Whether `e` is a filesystem refusing O_DIRECT (EINVAL, from open or
/// from setting the flag).
pub fn refused(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL)
}

/// Why [`open`] failed.
#[derive(Debug)]
pub enum OpenError {
    /// The open failed (with O_DIRECT, unless the mode was `Off`).
    Open(io::Error),
    /// The filesystem refused O_DIRECT, which `Required` insists on.
    Refused(io::Error),
    /// The filesystem refused O_DIRECT, and the buffered open after
    /// failed.
    Buffered(io::Error),
}

impl From<OpenError> for io::Error {
    fn from(e: OpenError) -> io::Error {
        match e {
            OpenError::Open(e) | OpenError::Refused(e) | OpenError::Buffered(e) => e,
        }
    }
}

/// Open a file with O_DIRECT as `mode` asks: `open(true)` opens it with
/// the flag, `open(false)` without. Where the filesystem refuses the flag,
/// `Auto` opens it buffered and `Required` fails. Returns the file and
/// whether O_DIRECT is in force.
pub fn open(
    mode: DirectMode,
    open: impl Fn(bool) -> io::Result<File>,
) -> Result<(File, bool), OpenError> {
    let want = mode != DirectMode::Off;
    match open(want) {
        Ok(f) => Ok((f, want)),
        Err(e) if want && refused(&e) => match mode {
            DirectMode::Required => Err(OpenError::Refused(e)),
            _ => open(false).map(|f| (f, false)).map_err(OpenError::Buffered),
        },
        Err(e) => Err(OpenError::Open(e)),
    }
}

/// `f` with O_DIRECT set as `mode` asks, and whether it is in force (for a
/// file opened first, so a filesystem that refuses the flag refuses the
/// flag, not the open, which may have made the file): in `Auto`, a
/// filesystem that refuses it gets buffered I/O.
pub fn set(f: File, mode: DirectMode) -> io::Result<(File, bool)> {
    if mode == DirectMode::Off {
        return Ok((f, false));
    }
    let now = status_flags(f.as_fd())?;
    set_over(f, mode, now)
}

/// Whether `f` is open with O_DIRECT now.
pub fn is_direct(f: &File) -> io::Result<bool> {
    Ok(status_flags(f.as_fd())? & libc::O_DIRECT != 0)
}

/// The status flags of `fd` (F_GETFL).
fn status_flags(fd: BorrowedFd<'_>) -> io::Result<i32> {
    // SAFETY: F_GETFL on a borrowed, open descriptor reads its status
    // flags; no memory is passed.
    let now = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if now < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(now)
}

/// [`set`] for a file just opened with `flags` (its status flags then,
/// which need not be read again): one `fcntl` the less.
pub fn set_opened(f: File, mode: DirectMode, flags: i32) -> io::Result<(File, bool)> {
    if mode == DirectMode::Off {
        return Ok((f, false));
    }
    set_over(f, mode, flags)
}

/// `f`, whose status flags are `now`, with O_DIRECT set as `mode` asks
/// (not `Off`). F_SETFL changes only the flags it may (O_APPEND, O_ASYNC,
/// O_DIRECT, O_NOATIME, O_NONBLOCK) and ignores the others.
fn set_over(f: File, mode: DirectMode, now: i32) -> io::Result<(File, bool)> {
    // SAFETY: F_SETFL on a descriptor this function owns sets its status
    // flags; no memory is passed.
    let set = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFL, now | libc::O_DIRECT) == 0 };
    if set {
        return Ok((f, true));
    }
    let e = io::Error::last_os_error();
    if refused(&e) && mode == DirectMode::Auto {
        return Ok((f, false));
    }
    Err(e)
}
