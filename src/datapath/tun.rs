//! TUN devices, for the delay line (`urmove-delayline`) that stands in for
//! a long path between two network namespaces: IP packets in and out of a
//! file descriptor, no packet-information prefix.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `ioctl(TUNSETIFF)`: `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

/// `struct ifreq` as TUNSETIFF reads and writes it: the name, then the
/// flags (the rest of the union is padding).
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Create TUN device `name` in the network namespace `netns` (a file such
/// as `/run/netns/NAME`) and open it: reads return one IP packet each,
/// writes inject one. The device lives as long as the descriptor. Only a
/// helper thread enters the namespace, so the caller's stays as it was.
pub fn open_tun_in(netns: &std::path::Path, name: &str) -> io::Result<File> {
    let ns = File::open(netns)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", netns.display())))?;
    let name = name.to_string();
    std::thread::spawn(move || {
        // SAFETY: setns takes a descriptor we own and a flag; it changes
        // only this (short-lived) thread's network namespace.
        if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("setns: {e}")));
        }
        open_tun(&name)
    })
    .join()
    .unwrap_or_else(|_| {
        Err(io::Error::other(
            "the thread opening the TUN device panicked",
        ))
    })
}

/// Create TUN device `name` (at most 15 bytes) in this thread's network
/// namespace and open it.
pub fn open_tun(name: &str) -> io::Result<File> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(['/', ' ', '\0']) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a usable interface name (1-15 bytes)"),
        ));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .map_err(|e| io::Error::new(e.kind(), format!("/dev/net/tun: {e}")))?;
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: IFF_TUN | IFF_NO_PI,
        _pad: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which `req`
    // is laid out as (name, flags, padding to its 40 bytes) and which
    // outlives the call; the descriptor is ours.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF, &mut req as *mut IfReq) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("TUNSETIFF {name}: {e}")));
    }
    Ok(file)
}

const _: () = assert!(std::mem::size_of::<IfReq>() == 40);
