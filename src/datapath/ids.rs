//! Owners and extended attributes as the system has them: user and group
//! names through the C library (so NSS, LDAP and sssd answer as they do for
//! `ls -l`), `chown` on open files, and the extended attributes of a path
//! (not following a final symlink).

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Buffer for one passwd or group record.
const RECORD_BUF: usize = 16 << 10;

/// The name of user `uid`, if the system knows one.
pub fn user_name(uid: u32) -> Option<String> {
    let mut pw = std::mem::MaybeUninit::<libc::passwd>::zeroed();
    let mut buf = vec![0 as libc::c_char; RECORD_BUF];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r fills `pw` and strings in `buf` (its length
    // given), and sets `found` to `pw` or null; all outlive the call.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            pw.as_mut_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() {
        return None;
    }
    // SAFETY: `found` points to `pw`, filled by the call; its name points
    // into `buf`, NUL-terminated, still alive.
    let name = unsafe { CStr::from_ptr((*found).pw_name) };
    name.to_str().ok().map(str::to_string)
}

/// The name of group `gid`, if the system knows one.
pub fn group_name(gid: u32) -> Option<String> {
    let mut gr = std::mem::MaybeUninit::<libc::group>::zeroed();
    let mut buf = vec![0 as libc::c_char; RECORD_BUF];
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: as for getpwuid_r: `gr`, `buf` (with its length) and `found`
    // outlive the call, which writes only into them.
    let rc = unsafe {
        libc::getgrgid_r(
            gid,
            gr.as_mut_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() {
        return None;
    }
    // SAFETY: `found` points to `gr`; its name into `buf`, NUL-terminated.
    let name = unsafe { CStr::from_ptr((*found).gr_name) };
    name.to_str().ok().map(str::to_string)
}

/// The uid of user `name` here.
pub fn uid_of(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    let mut pw = std::mem::MaybeUninit::<libc::passwd>::zeroed();
    let mut buf = vec![0 as libc::c_char; RECORD_BUF];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: `c` is NUL-terminated; the call writes only into `pw`, `buf`
    // (its length given) and `found`, all alive for it.
    let rc = unsafe {
        libc::getpwnam_r(
            c.as_ptr(),
            pw.as_mut_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    // SAFETY: when not null, `found` points to the filled `pw`.
    (rc == 0 && !found.is_null()).then(|| unsafe { (*found).pw_uid })
}

/// The gid of group `name` here.
pub fn gid_of(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    let mut gr = std::mem::MaybeUninit::<libc::group>::zeroed();
    let mut buf = vec![0 as libc::c_char; RECORD_BUF];
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: as in `uid_of`, for getgrnam_r.
    let rc = unsafe {
        libc::getgrnam_r(
            c.as_ptr(),
            gr.as_mut_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    // SAFETY: when not null, `found` points to the filled `gr`.
    (rc == 0 && !found.is_null()).then(|| unsafe { (*found).gr_gid })
}

/// Give an open file (or directory) owner `uid` and group `gid`.
pub fn fchown(file: &File, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: fchown takes no memory; the descriptor is borrowed for it.
    let rc = unsafe { libc::fchown(file.as_raw_fd(), uid, gid) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Set extended attribute `name` on an open file or directory.
pub fn set(file: &File, name: &str, value: &[u8]) -> io::Result<()> {
    let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    super::sys::set_xattr(file, &c, value)
}

/// The extended attributes of `path` (a final symlink not followed) whose
/// names `keep` accepts, values up to `max` bytes (larger ones left out).
pub fn list(
    path: &Path,
    keep: impl Fn(&str) -> bool,
    max: usize,
) -> io::Result<Vec<(String, Vec<u8>)>> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    list_named(
        Named {
            path: &c,
            follow: false,
        },
        keep,
        max,
    )
}

/// The extended attributes of the file `fd` holds open (an `O_PATH`
/// descriptor will do), as `list` chooses them.
pub fn list_fd(
    fd: &impl AsRawFd,
    keep: impl Fn(&str) -> bool,
    max: usize,
) -> io::Result<Vec<(String, Vec<u8>)>> {
    // The /proc name of a descriptor, followed, is the file it holds and
    // no other: the way to reach the attributes of an O_PATH descriptor.
    let c = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    list_named(
        Named {
            path: &c,
            follow: true,
        },
        keep,
        max,
    )
}

/// A path to read attributes through, and whether its final symlink is
/// followed (`listxattr`) or not (`llistxattr`).
#[derive(Clone, Copy)]
struct Named<'a> {
    path: &'a CStr,
    follow: bool,
}

fn list_named(
    at: Named<'_>,
    keep: impl Fn(&str) -> bool,
    max: usize,
) -> io::Result<Vec<(String, Vec<u8>)>> {
    let mut names = vec![0u8; 64 << 10];
    let (p, buf, len) = (at.path.as_ptr(), names.as_mut_ptr().cast(), names.len());
    // SAFETY: (l)listxattr writes at most `len` bytes into `names`, which
    // outlives the call; `p` is NUL-terminated.
    let n = unsafe {
        match at.follow {
            true => libc::listxattr(p, buf, len),
            false => libc::llistxattr(p, buf, len),
        }
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOTSUP) => Ok(Vec::new()),
            _ => Err(e),
        };
    }
    names.truncate(n as usize);
    let mut out = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let Ok(text) = std::str::from_utf8(name) else {
            continue;
        };
        if !keep(text) {
            continue;
        }
        if let Some(v) = get(at, name, max)? {
            out.push((text.to_string(), v));
        }
    }
    Ok(out)
}

/// One attribute's value, None when it vanished or is larger than `max`.
fn get(at: Named<'_>, name: &[u8], max: usize) -> io::Result<Option<Vec<u8>>> {
    let cname = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut buf = vec![0u8; max];
    let (p, n, v, len) = (
        at.path.as_ptr(),
        cname.as_ptr(),
        buf.as_mut_ptr().cast(),
        buf.len(),
    );
    // SAFETY: (l)getxattr writes at most `len` bytes into `buf`, which
    // outlives the call; both names are NUL-terminated.
    let n = unsafe {
        match at.follow {
            true => libc::getxattr(p, n, v, len),
            false => libc::lgetxattr(p, n, v, len),
        }
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENODATA | libc::ERANGE) => Ok(None),
            _ => Err(e),
        };
    }
    buf.truncate(n as usize);
    Ok(Some(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_known_by_name_and_number_and_a_stranger_is_not() {
        assert_eq!(user_name(0).as_deref(), Some("root"));
        assert_eq!(uid_of("root"), Some(0));
        assert_eq!(gid_of(&group_name(0).unwrap()), Some(0));
        assert_eq!(uid_of("no-such-user-urmove"), None);
    }

    #[test]
    fn user_attributes_are_listed_and_others_filtered() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let p = dir.path().join("f");
        let f = File::create(&p).unwrap();
        if set(&f, "user.urmove.test", b"hello").is_err() {
            return; // this filesystem keeps no user attributes
        }
        set(&f, "user.other", b"x").unwrap();
        let got = list(&p, |n| n == "user.urmove.test", 1024).unwrap();
        assert_eq!(
            got,
            vec![("user.urmove.test".to_string(), b"hello".to_vec())]
        );
        assert!(list(&p, |_| true, 2)
            .unwrap()
            .iter()
            .all(|(n, _)| n != "user.urmove.test"));
    }
}
