//! A file's storage checksums (adler32, crc32c, md5: see
//! `protocol::checksum`) kept with it, so a later `HEAD` or `GET` with
//! `Want-Digest` answers without reading it again.
//!
//! They live in the `user.urmove.sums` attribute, trusted only under the
//! receiver's stamp (`session::sink::stamp`): the record's MAC binds the
//! name the file was committed under, what the file itself says (device,
//! inode, size, mtime) and the digest its stamp names, and it is read only
//! while that stamp holds *untouched* (the file's ctime no later than the
//! stamp's settling time). So the record must be written before the stamp
//! (a commit: [`store`], then the stamp, under the commit's lease), or
//! under a lease with the stamp settled again after it ([`keep_after`]);
//! written any later, it moves the ctime past the settling time and makes
//! both the stamp and itself untrusted. Whatever changes the file after
//! (an edit with its mtime put back, a rename, the record copied to
//! another file, another commit of the same inode) leaves it untrusted, and
//! the file is read again ([`compute`]).
//!
//! The record is 26 bytes, 42 with md5:
//!
//! ```text
//! 'K' 1 | adler32 u32 | crc32c u32 | [md5 16] | MAC 16
//! MAC = HMAC-SHA256(secret, "urmove sums 1" | name | NUL | dev | ino |
//!                   size | mtime | stamp's digest | the bytes before it),
//!       first 16 bytes
//! ```
//!
//! A second attribute does not fit in an ext4 inode of 256 bytes beside
//! the stamp (together they need more than its 88 bytes of room): there it
//! takes a 4 KiB block per file (XFS's 512-byte inodes hold both).

use std::ffi::CStr;
use std::fs::File;
use std::io;

use super::journal::Timestamp;
use super::stamp::{self, Named};
use crate::datapath::beneath::FileId;
use crate::datapath::sys;
use crate::protocol::checksum::{Hasher, Sums};
use crate::protocol::wire::{Reader, Writer};
use crate::session::link::secret::Secret;

/// Where the record lives.
const XATTR: &CStr = c"user.urmove.sums";
const MAGIC: [u8; 2] = [b'K', 1];
const MAC_LEN: usize = 16;
/// Bytes of a record without md5.
pub const RECORD_LEN: usize = MAGIC.len() + 8 + MAC_LEN;
/// Bytes of a record with md5.
pub const RECORD_LEN_MD5: usize = RECORD_LEN + 16;
/// What the MAC starts with.
const DOMAIN: &[u8] = b"urmove sums 1";
/// Bytes read at a time by [`compute`].
const READ_BYTES: usize = 4 << 20;

/// Where sums came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// The record kept with the file.
    Kept,
    /// The file read.
    Read,
}

/// What the MAC binds besides the record's bytes: the name, the file as
/// it is now, and the digest of its stamp.
fn bound(named: Named<'_>, digest: u64) -> io::Result<Vec<u8>> {
    let m = named.file.metadata()?;
    let id = FileId::of_metadata(&m);
    let mtime = Timestamp::mtime_of(&m);
    let mut w = Writer::default();
    w.bytes(named.rel.as_bytes()).u8(0);
    w.u64(id.dev).u64(id.ino).u64(m.len());
    w.i64(mtime.s).u32(mtime.ns).u64(digest);
    Ok(w.buf)
}

/// Keep `sums` with `named.file` (its size and mtime final), bound to
/// `named.rel` and to `digest`, the one its stamp names or is about to.
/// Call it before the stamp is written (or under a lease, the stamp
/// settled again after: see the module). Filesystems without user xattrs
/// simply keep nothing.
pub fn store(named: Named<'_>, digest: u64, secret: &Secret, sums: &Sums) -> io::Result<()> {
    let mut w = Writer::default();
    w.bytes(&MAGIC).u32(sums.adler32).u32(sums.crc32c);
    if let Some(md5) = &sums.md5 {
        w.bytes(md5);
    }
    let bound = bound(named, digest)?;
    let mac = secret.mac(&[DOMAIN, &bound, &w.buf]);
    w.bytes(&mac[..MAC_LEN]);
    match sys::set_xattr(named.file, XATTR, &w.buf) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => Ok(()),
        other => other,
    }
}

/// The sums kept with `named`, if its stamp holds untouched and the
/// record is ours, for this file under this name and this stamp.
pub fn load(named: Named<'_>, secret: &Secret) -> Option<Sums> {
    let held = stamp::stamped_now(named, secret).filter(|s| s.untouched)?;
    let bytes = sys::get_xattr(named.file, XATTR)?;
    if bytes.len() != RECORD_LEN && bytes.len() != RECORD_LEN_MD5 {
        return None;
    }
    let (body, mac) = bytes.split_at(bytes.len() - MAC_LEN);
    let bound = bound(named, held.digest).ok()?;
    if !body.starts_with(&MAGIC) || !secret.verify_truncated(&[DOMAIN, &bound, body], mac) {
        return None;
    }
    let mut r = Reader::new(&body[MAGIC.len()..]);
    let (adler32, crc32c) = (r.u32().ok()?, r.u32().ok()?);
    let md5 = match r.remaining() {
        0 => None,
        _ => Some(r.array::<16>().ok()?),
    };
    r.finish().ok()?;
    Some(Sums {
        adler32,
        crc32c,
        md5,
    })
}

/// The sums of `file` by reading it from its start to its end (md5 too
/// if `with_md5`): with O_DIRECT where its filesystem takes it, so a
/// large file read for its sums does not push others out of the page
/// cache; through the cache elsewhere, and for an unaligned tail that
/// grew after its end was read.
pub fn compute(file: &File, with_md5: bool) -> io::Result<Sums> {
    use std::os::unix::fs::FileExt;
    let mut h = Hasher::new(with_md5);
    // A small file takes a buffer of its own size, not READ_BYTES.
    let len = file.metadata().map_or(READ_BYTES as u64, |m| m.len());
    let want = (len.max(1) as usize)
        .next_multiple_of(DIRECT_ALIGN)
        .min(READ_BYTES);
    let mut store = vec![0u8; want + DIRECT_ALIGN];
    let at = store.as_ptr().align_offset(DIRECT_ALIGN);
    let mut direct = (at < DIRECT_ALIGN).then(|| direct_reopen(file)).flatten();
    let buf = &mut store[at.min(DIRECT_ALIGN)..][..want];
    loop {
        let via_direct = direct.is_some() && h.len().is_multiple_of(DIRECT_ALIGN as u64);
        let from = match &direct {
            Some(d) if via_direct => d,
            _ => file,
        };
        let n = match from.read_at(buf, h.len()) {
            Ok(0) => return Ok(h.finish()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if via_direct && e.raw_os_error() == Some(libc::EINVAL) => {
                direct = None;
                continue;
            }
            Err(e) => return Err(e),
        };
        h.update(&buf[..n]);
    }
}

/// What [`compute`] aligns its O_DIRECT reads to (buffer and offsets).
const DIRECT_ALIGN: usize = crate::datapath::direct::TRANSFER_ALIGN;

/// `file` opened anew to read with O_DIRECT (through its `/proc/self/fd`
/// link: the same inode), if its filesystem takes the flag with an
/// alignment [`DIRECT_ALIGN`] meets.
fn direct_reopen(file: &File) -> Option<File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .ok()?;
    let m = f.metadata().ok()?;
    let align = crate::datapath::direct::alignment(&f, true, false, m.dev());
    let fits = |a: u32| a > 0 && DIRECT_ALIGN.is_multiple_of(a as usize);
    (fits(align.mem) && fits(align.offset)).then_some(f)
}

/// The sums of `named`: kept, when a trusted record has them all (md5
/// too if `need_md5`), else read from the file (the caller decides
/// whether to keep them: [`keep_after`]).
pub fn sums(named: Named<'_>, secret: &Secret, need_md5: bool) -> io::Result<(Sums, Found)> {
    match load(named, secret) {
        Some(s) if s.md5.is_some() || !need_md5 => Ok((s, Found::Kept)),
        _ => Ok((compute(named.file, need_md5)?, Found::Read)),
    }
}

/// Keep `sums` (read from it just now) with a committed file whose stamp
/// holds untouched, under a write lease: the record, then the stamp
/// settled again, so the file still counts as untouched. Whether they
/// were kept: not where no lease can be had (another opening of the
/// file: a reader, a writer) or the stamp does not hold untouched.
pub fn keep_after(named: Named<'_>, secret: &Secret, sums: &Sums) -> bool {
    use super::lease;
    let Some(held_lease) = lease::hold(named.file) else {
        return false;
    };
    let held = stamp::stamped_now(named, secret).filter(|s| s.untouched);
    let Some(held) = held else {
        sys::end_lease(&held_lease);
        return false;
    };
    let settled = settle_by();
    let kept = store(named, held.digest, secret, sums).is_ok()
        && stamp::settle_again(named, &held, secret, settled).is_ok();
    lease::release_after(held_lease, settled);
    kept && load(named, secret).as_ref() == Some(sums)
}

/// The settling time of a stamp written now (as a commit's).
fn settle_by() -> i128 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (now + super::lease::SETTLE_MARGIN).as_nanos() as i128
}

#[cfg(test)]
mod tests;
