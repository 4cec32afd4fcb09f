//! Block device geometry: size and logical block size of an open device
//! (ioctls), and from sysfs a device's kernel name, logical block size and
//! what sits on it (partitions and holders).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

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
