//! The network interface a connected socket leaves by, and whether it is
//! a physical device or one whose sends the kernel copies anyway
//! (loopback, veth, TUN).

use std::mem::MaybeUninit;

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
