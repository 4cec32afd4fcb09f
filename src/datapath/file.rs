//! Benchmark and transfer targets: regular files and block devices, opened
//! with O_DIRECT when the filesystem allows it, with their DIO alignment
//! discovered from `statx(STATX_DIOALIGN)` (fallback: the device's logical
//! block size, then 4096).

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::{signature, sys, Error};

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    File,
    BlockDevice,
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

/// Default alignment when neither statx nor the device say.
pub const ALIGN_DEFAULT: u32 = 4096;

fn open_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Open {
        path: path.to_path_buf(),
        source,
    }
}

/// Open `path` as a benchmark or transfer target.
pub fn open_target(path: &Path, spec: &OpenSpec) -> Result<TargetFile, Error> {
    let existing = std::fs::metadata(path).ok();
    let is_block = existing
        .as_ref()
        .is_some_and(|m| m.file_type().is_block_device());
    if let Some(m) = &existing {
        if !is_block && !m.is_file() {
            return Err(open_err(path)(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file or block device",
            )));
        }
    }
    if is_block && spec.write && !spec.destroy {
        refuse_if_holds_data(path, existing.as_ref().expect("checked above"))?;
    }

    let mut fallbacks = Vec::new();
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
    let want_direct = spec.direct != DirectMode::Off;
    let (file, direct) = match open(want_direct) {
        Ok(f) => (f, want_direct),
        Err(e) if want_direct && e.raw_os_error() == Some(libc::EINVAL) => {
            if spec.direct == DirectMode::Required {
                return Err(Error::DirectUnsupported {
                    path: path.to_path_buf(),
                });
            }
            fallbacks.push(format!(
                "{}: O_DIRECT refused by the filesystem, using buffered I/O",
                path.display()
            ));
            (open(false).map_err(open_err(path))?, false)
        }
        Err(e) if is_block && e.raw_os_error() == Some(libc::EBUSY) => {
            return Err(Error::Busy {
                path: path.to_path_buf(),
                source: e,
            })
        }
        Err(e) => return Err(open_err(path)(e)),
    };
    let meta = file.metadata().map_err(open_err(path))?;
    let dev = if is_block { meta.rdev() } else { meta.dev() };
    let dev_id = (libc::major(dev), libc::minor(dev));
    let device = sys::block_device_name(dev_id.0, dev_id.1);

    let dio = if direct {
        sys::statx_dio_align(&file).ok().flatten()
    } else {
        None
    };
    let align = if !direct {
        Alignment {
            mem: 1,
            offset: 1,
            from: "buffered",
        }
    } else if let Some((mem, offset)) = dio {
        Alignment {
            mem: mem.max(1),
            offset,
            from: "statx",
        }
    } else {
        let lbs = if is_block {
            sys::block_device_logical_block_size(&file).ok()
        } else {
            sys::sysfs_logical_block_size(dev_id.0, dev_id.1)
        };
        match lbs {
            Some(lbs) if lbs.is_power_of_two() => Alignment {
                mem: lbs,
                offset: lbs,
                from: "logical block size",
            },
            _ => {
                fallbacks.push(format!(
                    "{}: DIO alignment unknown (no statx STATX_DIOALIGN, no logical block size); assuming {ALIGN_DEFAULT}",
                    path.display()
                ));
                Alignment {
                    mem: ALIGN_DEFAULT,
                    offset: ALIGN_DEFAULT,
                    from: "default",
                }
            }
        }
    };
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
        if !value.is_multiple_of(u64::from(self.align.offset)) {
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
