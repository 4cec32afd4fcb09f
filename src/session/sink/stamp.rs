//! The stamp a receiver leaves on a file it committed: the `user.urmove`
//! attribute, naming the file's digest, for whom it was committed and
//! until when its inode may have changed by the commit's own doing (its
//! settling time). A re-run skips a file whose stamp holds and whose ctime
//! is no later than that unread ("unchanged since an earlier run"), or
//! reads it and compares its digest. Nobody but the receiver can have
//! changed the file by then (it holds a write lease until the coarse clock
//! passes it: see `lease`), and any change after moves the ctime past it,
//! which nobody can put back. A stamp written without a lease names no
//! settling time: its file is always read again.
//!
//! Version 5 is 42 bytes, so that with its name it fits in the inode of
//! ext4 (256-byte inodes, the default: about 64 bytes of value) and XFS
//! (512): a received file takes no disk block more than its source. What
//! the file itself says (device, inode, size, mtime) and the name it was
//! committed under are not stored but bound by the MAC, so a stamp copied
//! to another file, or a file renamed, moved or resized, is no longer
//! trusted:
//!
//! ```text
//! 'S' 5 | digest u64 | settled_ns i64 (i64::MIN: never) | owner 8 | MAC 16
//! MAC = HMAC-SHA256(secret, "urmove stamp 5" | name | NUL | dev | ino |
//!                   size | mtime | the 26 bytes before it), first 16 bytes
//! ```
//!
//! Versions 3 and 4 (`URMS`, 94 and 126 bytes) are still read, never as
//! untouched (they named a settling window within which an edit went
//! unseen): their files are read again once and stamped anew.

use std::ffi::CStr;
use std::fs::File;

use crate::datapath::beneath::FileId;
use crate::datapath::sys;
use crate::protocol::wire::{Reader, Writer};

use super::journal::{Identity, Timestamp};
use crate::session::link::secret::Secret;

/// Where the stamp lives.
const XATTR: &CStr = c"user.urmove";

const V5_MAGIC: [u8; 2] = [b'S', 5];
const V5_LEN: usize = 42;
/// Bytes of a version-5 stamp the MAC covers (all but itself).
const V5_BODY: usize = V5_LEN - V5_MAC;
const V5_MAC: usize = 16;
/// Bytes of the owner's MAC a stamp keeps.
pub const OWNER_LEN: usize = 8;

/// Version 4 (and 3, without a time or an owner) as written before.
const LEGACY_MAGIC: [u8; 4] = *b"URMS";
const LEGACY_VERSION: u16 = 4;
const LEGACY_BEFORE_TIME: u16 = 3;
const LEGACY_MAC: usize = 32;

/// A file's stamp, when it is ours, for this very file (device and
/// inode), and the file still has the size and mtime it was stamped with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamped {
    /// The plain digest the file was committed with.
    pub digest: u64,
    /// Nothing changed the inode since its commit (its ctime is no later
    /// than the stamp allows): its bytes are the ones the digest is of.
    pub untouched: bool,
    /// For whom it was committed: the first bytes of the receiver's MAC
    /// of the client's owner token (zeros: nobody in particular).
    pub owner: [u8; OWNER_LEN],
}

/// Whether a stamp's `owner` is the session's (its full token MAC).
pub fn owned_by(owner: &[u8; OWNER_LEN], token: Option<[u8; 32]>) -> bool {
    token.is_some_and(|t| t[..OWNER_LEN] == owner[..])
}

/// A file and the name it has, or is about to get, under the root: what
/// a stamp is written on and bound to.
#[derive(Debug, Clone, Copy)]
pub struct Named<'a> {
    pub file: &'a File,
    pub rel: &'a str,
}

/// What the MAC of a stamp binds besides its bytes: the name, and what
/// the file itself says (device and inode, size, mtime).
struct Bound<'a> {
    rel: &'a str,
    id: FileId,
    size: u64,
    mtime: Timestamp,
}

impl<'a> Bound<'a> {
    /// `named` as its file is now (`m`, its metadata).
    fn of(named: Named<'a>, m: &std::fs::Metadata) -> std::io::Result<Self> {
        Ok(Bound {
            rel: named.rel,
            id: FileId::of_metadata(m),
            size: m.len(),
            mtime: Timestamp::mtime_of(m),
        })
    }

    /// The bytes a version-5 stamp's MAC binds.
    fn v5(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.bytes(self.rel.as_bytes()).u8(0);
        w.u64(self.id.dev)
            .u64(self.id.ino)
            .u64(self.size)
            .i64(self.mtime.s)
            .u32(self.mtime.ns);
        w.buf
    }
}

/// Record on a finished file (`named.file`, its size and mtime already
/// final) its digest, bound to the file itself, to `named.rel` and to
/// `owner` (see
/// [`Rules::owner`](super::rules::Rules::owner)), and by when
/// (`settled`, ns since the epoch; `None`: never) its inode is done
/// changing by the receiver's doing, authenticated with `secret`.
/// Filesystems without user xattrs simply get no stamp (a later run then
/// sends the file again).
pub fn stamp(
    named: Named<'_>,
    digest: u64,
    secret: &Secret,
    owner: Option<[u8; 32]>,
    settled: Option<i128>,
) -> std::io::Result<()> {
    let mut kept = [0u8; OWNER_LEN];
    kept.copy_from_slice(&owner.unwrap_or_default()[..OWNER_LEN]);
    write_v5(named, digest, kept, secret, settled)
}

/// Stamp anew a file whose stamp `held` was read as untouched and which
/// the receiver changed since (a further name linked to it), with the
/// same digest and owner and a new settling time.
pub fn settle_again(
    named: Named<'_>,
    held: &Stamped,
    secret: &Secret,
    settled: i128,
) -> std::io::Result<()> {
    write_v5(named, held.digest, held.owner, secret, Some(settled))
}

fn write_v5(
    named: Named<'_>,
    digest: u64,
    owner: [u8; OWNER_LEN],
    secret: &Secret,
    settled: Option<i128>,
) -> std::io::Result<()> {
    let file = named.file;
    let m = file.metadata()?;
    let settled = settled.map_or(i64::MIN, |ns| ns.clamp(0, i128::from(i64::MAX)) as i64);
    let mut w = Writer::default();
    w.bytes(&V5_MAGIC).u64(digest).i64(settled);
    w.bytes(&owner);
    let bound = Bound::of(named, &m)?.v5();
    let mac = secret.mac(&[b"urmove stamp 5", &bound, &w.buf]);
    w.bytes(&mac[..V5_MAC]);
    debug_assert_eq!(w.buf.len(), V5_LEN);
    match sys::set_xattr(file, XATTR, &w.buf) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => Ok(()),
        other => other,
    }
}

/// The stamp of `named` as its file is now (its own size and mtime), if
/// it holds.
pub fn stamped_now(named: Named<'_>, secret: &Secret) -> Option<Stamped> {
    use std::os::unix::fs::MetadataExt;
    let m = named.file.metadata().ok()?;
    let id = Identity {
        size: m.len(),
        mtime_s: m.mtime(),
        mtime_ns: m.mtime_nsec() as u32,
        block: 0,
    };
    stamped(named, &id, secret)
}

/// The stamp of `named` (see [`Stamped`]), if it holds for its file under
/// its name with the size and mtime of `id`.
pub fn stamped(named: Named<'_>, id: &Identity, secret: &Secret) -> Option<Stamped> {
    use std::os::unix::fs::MetadataExt;
    let bytes = sys::get_xattr(named.file, XATTR)?;
    let m = named.file.metadata().ok()?;
    if (m.len(), Timestamp::mtime_of(&m)) != (id.size, id.mtime()) {
        return None;
    }
    let bound = Bound::of(named, &m).ok()?;
    let (digest, settled, owner) = match bytes.starts_with(&V5_MAGIC) {
        true => read_v5(&bytes, &bound.v5(), secret)?,
        false => read_legacy(&bytes, &bound, secret)?,
    };
    let ctime = Timestamp {
        s: m.ctime(),
        ns: m.ctime_nsec() as u32,
    }
    .as_ns();
    Some(Stamped {
        digest,
        untouched: ctime <= settled,
        owner,
    })
}

/// A version-5 stamp's digest, settling time and owner, if its MAC over
/// `bound` holds.
fn read_v5(bytes: &[u8], bound: &[u8], secret: &Secret) -> Option<(u64, i128, [u8; OWNER_LEN])> {
    if bytes.len() != V5_LEN {
        return None;
    }
    let (body, mac) = bytes.split_at(V5_BODY);
    if !secret.verify_truncated(&[b"urmove stamp 5", bound, body], mac) {
        return None;
    }
    let mut r = Reader::new(&body[V5_MAGIC.len()..]);
    let digest = r.u64().ok()?;
    let settled = match r.i64().ok()? {
        i64::MIN => i128::MIN,
        ns => i128::from(ns),
    };
    let owner = r.array::<OWNER_LEN>().ok()?;
    Some((digest, settled, owner))
}

/// A stamp of version 3 or 4: its digest, settling time (version 3 has
/// none: never untouched) and owner, if it holds.
fn read_legacy(
    bytes: &[u8],
    bound: &Bound<'_>,
    secret: &Secret,
) -> Option<(u64, i128, [u8; OWNER_LEN])> {
    let body_len = bytes.len().checked_sub(LEGACY_MAC)?;
    let (body, mac) = bytes.split_at(body_len);
    let mac: [u8; LEGACY_MAC] = mac.try_into().ok()?;
    let mut r = Reader::new(body);
    let version = match (r.array::<4>().ok()?, r.u16().ok()?) {
        (LEGACY_MAGIC, v @ (LEGACY_BEFORE_TIME | LEGACY_VERSION)) => v,
        _ => return None,
    };
    let stamped_id = FileId {
        dev: r.u64().ok()?,
        ino: r.u64().ok()?,
    };
    let stamped_as = (
        r.u64().ok()?,
        Timestamp {
            s: r.i64().ok()?,
            ns: r.u32().ok()?,
        },
    );
    // Neither counts as untouched (see the module).
    let (owner, mac_ok) = match version {
        LEGACY_VERSION => {
            let _at = (r.i64().ok()?, r.u32().ok()?);
            let owner: [u8; 32] = r.array().ok()?;
            let ok = secret.verify(&[b"urmove stamp", bound.rel.as_bytes(), b"\0", body], &mac);
            (owner, ok)
        }
        // Version 3 bound no name.
        _ => ([0; 32], secret.verify(&[b"urmove stamp", body], &mac)),
    };
    let settled = i128::MIN;
    let digest = r.u64().ok()?;
    r.finish().ok()?;
    let holds = mac_ok && stamped_id == bound.id && stamped_as == (bound.size, bound.mtime);
    let owner: [u8; OWNER_LEN] = owner[..OWNER_LEN].try_into().ok()?;
    holds.then_some((digest, settled, owner))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(size: u64) -> Identity {
        Identity {
            size,
            mtime_s: 1_700_000_000,
            mtime_ns: 7,
            block: 4096,
        }
    }

    #[test]
    fn a_stamp_holds_only_on_its_own_file_with_its_size_and_mtime() {
        let secret = Secret::ephemeral().unwrap();
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let (pa, pb) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&pa, b"hello").unwrap();
        std::fs::write(&pb, b"jello").unwrap();
        let t = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 7);
        let (a, b) = (File::open(&pa).unwrap(), File::open(&pb).unwrap());
        for f in [&a, &b] {
            f.set_times(std::fs::FileTimes::new().set_modified(t))
                .unwrap();
        }
        let want = identity(5);
        let owner = Some([7u8; 32]);
        // Settled a second from now: whatever changed it before then
        // would not show (the receiver holds a lease until then).
        let settled = sys::coarse_now_ns() + 1_000_000_000;
        let stamped_now = stamp(
            Named { file: &a, rel: "a" },
            99,
            &secret,
            owner,
            Some(settled),
        );
        if stamped_now.is_err() || sys::get_xattr(&a, XATTR).is_none() {
            eprintln!("skipped: no user xattrs here");
            return;
        }
        assert_eq!(sys::get_xattr(&a, XATTR).unwrap().len(), V5_LEN);
        let fresh = Stamped {
            digest: 99,
            untouched: true,
            owner: [7u8; OWNER_LEN],
        };
        assert_eq!(
            stamped(Named { file: &a, rel: "a" }, &want, &secret),
            Some(fresh)
        );
        assert!(owned_by(&fresh.owner, owner) && !owned_by(&fresh.owner, None));
        // Under another name (its directory renamed): not trusted.
        assert_eq!(stamped(Named { file: &a, rel: "b" }, &want, &secret), None);
        // Copied onto another file of the same size and mtime: not trusted.
        let copied = sys::get_xattr(&a, XATTR).unwrap();
        sys::set_xattr(&b, XATTR, &copied).unwrap();
        assert_eq!(stamped(Named { file: &b, rel: "a" }, &want, &secret), None);
        // Another secret, another identity, a flipped byte: not trusted.
        assert_eq!(
            stamped(
                Named { file: &a, rel: "a" },
                &want,
                &Secret::ephemeral().unwrap()
            ),
            None
        );
        let other = Identity {
            mtime_ns: 8,
            ..want
        };
        assert_eq!(stamped(Named { file: &a, rel: "a" }, &other, &secret), None);
        for i in 0..copied.len() {
            let mut x = copied.clone();
            x[i] ^= 1;
            sys::set_xattr(&a, XATTR, &x).unwrap();
            assert_eq!(
                stamped(Named { file: &a, rel: "a" }, &want, &secret),
                None,
                "byte {i}"
            );
        }
    }

    /// A change after the stamp's settling time, the mtime put back, makes
    /// the file touched (its ctime moved past it); a stamp with no settling
    /// time (written without a lease) never counts as untouched.
    #[test]
    fn any_change_after_the_settling_time_is_seen() {
        let secret = Secret::ephemeral().unwrap();
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let p = dir.path().join("a");
        std::fs::write(&p, b"hello").unwrap();
        let t = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 7);
        let a = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        a.set_times(std::fs::FileTimes::new().set_modified(t))
            .unwrap();
        let want = identity(5);
        // As a commit names it: a margin past the fine clock (an inode's
        // ctime may come from it) for the stamp's own change.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        let settled = now.unwrap().as_nanos() as i128 + 20_000_000;
        if stamp(
            Named { file: &a, rel: "a" },
            5,
            &secret,
            None,
            Some(settled),
        )
        .is_err()
        {
            eprintln!("skipped: no user xattrs here");
            return;
        }
        assert!(
            stamped(Named { file: &a, rel: "a" }, &want, &secret)
                .unwrap()
                .untouched
        );
        while sys::coarse_now_ns() <= settled {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        use std::os::unix::fs::FileExt;
        a.write_all_at(b"J", 0).unwrap();
        a.set_times(std::fs::FileTimes::new().set_modified(t))
            .unwrap();
        let after = stamped(Named { file: &a, rel: "a" }, &want, &secret).unwrap();
        assert!(
            !after.untouched,
            "an edit with its mtime put back went unseen"
        );
        stamp(Named { file: &a, rel: "a" }, 5, &secret, None, None).unwrap();
        assert!(
            !stamped(Named { file: &a, rel: "a" }, &want, &secret)
                .unwrap()
                .untouched
        );
    }

    /// Stamps written by version 4 and 3 are still read (never untouched;
    /// 3: no owner).
    #[test]
    fn stamps_of_earlier_versions_are_read() {
        let secret = Secret::ephemeral().unwrap();
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let p = dir.path().join("a");
        std::fs::write(&p, b"hello").unwrap();
        let t = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 7);
        let a = File::open(&p).unwrap();
        a.set_times(std::fs::FileTimes::new().set_modified(t))
            .unwrap();
        let want = identity(5);
        let id = FileId::of(&a).unwrap();
        let head = |w: &mut Writer, version: u16| {
            w.bytes(&LEGACY_MAGIC).u16(version);
            w.u64(id.dev).u64(id.ino).u64(5).i64(want.mtime_s);
            w.u32(want.mtime_ns);
        };
        let mut w = Writer::default();
        head(&mut w, LEGACY_BEFORE_TIME);
        w.u64(42);
        let mac = secret.mac(&[b"urmove stamp", &w.buf]);
        w.bytes(&mac);
        if sys::set_xattr(&a, XATTR, &w.buf).is_err() {
            eprintln!("skipped: no user xattrs here");
            return;
        }
        let old = Stamped {
            digest: 42,
            untouched: false,
            owner: [0; OWNER_LEN],
        };
        assert_eq!(
            stamped(Named { file: &a, rel: "a" }, &want, &secret),
            Some(old)
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        let mut w = Writer::default();
        head(&mut w, LEGACY_VERSION);
        w.i64(now.as_secs() as i64).u32(now.subsec_nanos());
        w.bytes(&[9u8; 32]).u64(43);
        let mac = secret.mac(&[b"urmove stamp", b"a", b"\0", &w.buf]);
        w.bytes(&mac);
        sys::set_xattr(&a, XATTR, &w.buf).unwrap();
        let v4 = Stamped {
            digest: 43,
            untouched: false,
            owner: [9; OWNER_LEN],
        };
        assert_eq!(
            stamped(Named { file: &a, rel: "a" }, &want, &secret),
            Some(v4)
        );
    }
}
