//! Benchmark targets: regular files and block devices, opened with O_DIRECT
//! as `--direct` asks and described (kind, size, filesystem, device, DIO
//! alignment), never writing over a device that holds data unless told
//! to. The O_DIRECT rules themselves are [`super::direct`]'s.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::direct::{self, OpenError};
pub use super::direct::{Alignment, DirectMode, ALIGN_DEFAULT};
use super::{signature, sys, Error};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    File,
    BlockDevice,
}

/// How to open a target.
#[derive(Debug, Clone, Copy)]
pub struct OpenSpec {
    pub write: bool,
    pub create: bool,
    pub direct: DirectMode,
    /// Allow writing over a block device that holds a filesystem or
    /// partition table.
    pub destroy: bool,
}

/// An open target.
#[derive(Debug)]
pub struct TargetFile {
    pub path: PathBuf,
    pub file: File,
    pub kind: TargetKind,
    /// Whether O_DIRECT is in force.
    pub direct: bool,
    pub align: Alignment,
    /// Current size (file length, or device capacity).
    pub size: u64,
    pub fs_type: &'static str,
    /// Kernel name of the device holding the file (or of the device itself).
    pub device: Option<String>,
    /// `major:minor` of that device.
    pub dev_id: (u32, u32),
    /// Fallbacks taken while opening, in words.
    pub fallbacks: Vec<String>,
}

fn open_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Open {
        path: path.to_path_buf(),
        source,
    }
}

/// Open `path` as a benchmark or transfer target.
pub fn open_target(path: &Path, spec: &OpenSpec) -> Result<TargetFile, Error> {
    let is_block = check_kind(path, spec)?;
    let mut fallbacks = Vec::new();
    let (file, direct) = open_file(path, spec, is_block)?;
    if spec.direct != DirectMode::Off && !direct {
        fallbacks.push(direct::buffered_note(path));
    }
    let meta = file.metadata().map_err(open_err(path))?;
    let dev = if is_block { meta.rdev() } else { meta.dev() };
    let dev_id = (libc::major(dev), libc::minor(dev));
    let device = sys::block_device_name(dev_id.0, dev_id.1);
    let align = direct::alignment(&file, direct, is_block, dev);
    if align.is_guess() {
        fallbacks.push(direct::guessed_note(path));
    }
    let size = if is_block {
        sys::block_device_size(&file).map_err(open_err(path))?
    } else {
        meta.len()
    };
    let fs_type = if is_block {
        "block device"
    } else {
        sys::fs_type(&file).map(|(_, n)| n).unwrap_or("unknown")
    };
    Ok(TargetFile {
        path: path.to_path_buf(),
        file,
        kind: if is_block {
            TargetKind::BlockDevice
        } else {
            TargetKind::File
        },
        direct,
        align,
        size,
        fs_type,
        device,
        dev_id,
        fallbacks,
    })
}

/// Whether `path` is a block device (else a regular file, or nothing
/// yet); anything else is refused, and so is writing over a device that
/// holds data without `destroy`.
fn check_kind(path: &Path, spec: &OpenSpec) -> Result<bool, Error> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(false);
    };
    let is_block = meta.file_type().is_block_device();
    if !is_block && !meta.is_file() {
        return Err(open_err(path)(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file or block device",
        )));
    }
    if is_block && spec.write && !spec.destroy {
        refuse_if_holds_data(path, &meta)?;
    }
    Ok(is_block)
}

/// Open `path` with O_DIRECT as the spec asks, and whether it is in
/// force; a block device opened to write is opened exclusively.
fn open_file(path: &Path, spec: &OpenSpec, is_block: bool) -> Result<(File, bool), Error> {
    let open = |direct: bool| {
        let mut o = OpenOptions::new();
        o.read(true).write(spec.write);
        if !is_block {
            o.create(spec.create && spec.write).mode(0o644);
        }
        let mut flags = libc::O_CLOEXEC;
        if direct {
            flags |= libc::O_DIRECT;
        }
        if is_block && spec.write {
            flags |= libc::O_EXCL; // EBUSY when mounted or held
        }
        o.custom_flags(flags).open(path)
    };
    direct::open(spec.direct, open).map_err(|e| match e {
        OpenError::Refused(_) => Error::DirectUnsupported {
            path: path.to_path_buf(),
        },
        OpenError::Open(e) if is_block && e.raw_os_error() == Some(libc::EBUSY) => Error::Busy {
            path: path.to_path_buf(),
            source: e,
        },
        OpenError::Open(e) | OpenError::Buffered(e) => open_err(path)(e),
    })
}

fn refuse_if_holds_data(path: &Path, meta: &std::fs::Metadata) -> Result<(), Error> {
    let rdev = meta.rdev();
    let children = sys::block_device_children(libc::major(rdev), libc::minor(rdev));
    if !children.is_empty() {
        return Err(Error::HoldsData {
            path: path.to_path_buf(),
            what: format!("partitions or holders ({})", children.join(", ")),
        });
    }
    let mut head = vec![0u8; signature::HEAD_LEN];
    let mut f = File::open(path).map_err(open_err(path))?;
    let mut got = 0;
    while got < head.len() {
        match f.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(open_err(path)(e)),
        }
    }
    if let Some(what) = signature::detect(&head[..got]) {
        return Err(Error::HoldsData {
            path: path.to_path_buf(),
            what: what.to_string(),
        });
    }
    Ok(())
}

impl TargetFile {
    /// Refuse an I/O size or offset that O_DIRECT on this target would reject.
    pub fn check_aligned(&self, what: &'static str, value: u64) -> Result<(), Error> {
        if !self.align.holds(value) {
            return Err(Error::Misaligned {
                path: self.path.clone(),
                what,
                value,
                align: self.align.offset,
                from: self.align.from,
            });
        }
        Ok(())
    }

    /// Offset of the first hole (a never-written extent), or the end of
    /// the file when there is none; `u64::MAX` for a block device.
    pub fn first_hole(&self) -> u64 {
        if self.kind == TargetKind::BlockDevice {
            return u64::MAX;
        }
        match sys::seek_hole(&self.file, 0) {
            Ok(Some(hole)) => hole.min(self.size),
            _ => self.size,
        }
    }
}
