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
    let mut names = vec![0u8; 64 << 10];
    // SAFETY: llistxattr writes at most `names.len()` bytes into `names`;
    // `c` is NUL-terminated; both outlive the call.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
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
        if let Some(v) = get(&c, name, max)? {
            out.push((text.to_string(), v));
        }
    }
    Ok(out)
}

/// One attribute's value, None when it vanished or is larger than `max`.
fn get(path: &CStr, name: &[u8], max: usize) -> io::Result<Option<Vec<u8>>> {
    let cname = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut buf = vec![0u8; max];
    // SAFETY: lgetxattr writes at most `buf.len()` bytes into `buf`; both
    // names are NUL-terminated; all outlive the call.
    let n = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            cname.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
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
