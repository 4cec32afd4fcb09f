//! What a receiver remembers between sessions so a transfer can resume:
//! beside each `NAME.urmove.part` a journal `NAME.urmove.journal` lists the
//! blocks written *and synced* (the part is `fdatasync`ed before the journal
//! names them) with their digest; a finished file carries its size, mtime
//! and digest in the `user.urmove` extended attribute, so a re-run can see
//! it is already there.
//!
//! A journal is written whole to a temporary name, synced and renamed over
//! the old one, and ends with a checksum: a torn or foreign journal is
//! ignored (the file starts over), never trusted.

use std::ffi::CStr;
use std::fs::File;
use std::io::{Read, Write};

use crate::datapath::beneath::Root;
use crate::datapath::sys;
use crate::protocol::manifest::Entry;
use crate::protocol::wire::{Reader, Writer};

/// Suffix of a journal beside its part file.
pub const JOURNAL_SUFFIX: &str = ".urmove.journal";
const MAGIC: [u8; 4] = *b"URMJ";
const VERSION: u16 = 2;
const XATTR: &CStr = c"user.urmove";

/// The identity a journal or stored digest is valid for: the source's
/// size and mtime as the manifest gave them, and the block size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub size: u64,
    pub mtime_s: i64,
    pub mtime_ns: u32,
    pub block: u64,
}

impl Identity {
    pub fn of(e: &Entry, block: u64) -> Self {
        Identity {
            size: e.size,
            mtime_s: e.mtime_s,
            mtime_ns: e.mtime_ns,
            block,
        }
    }

    fn write(&self, w: &mut Writer) {
        w.u64(self.size)
            .i64(self.mtime_s)
            .u32(self.mtime_ns)
            .u64(self.block);
    }

    fn read(r: &mut Reader<'_>) -> Option<Self> {
        Some(Identity {
            size: r.u64().ok()?,
            mtime_s: r.i64().ok()?,
            mtime_ns: r.u32().ok()?,
            block: r.u64().ok()?,
        })
    }
}

/// Verified blocks of one part file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journal {
    pub id: Identity,
    /// The inode of the part file the blocks were written to: a part that
    /// was deleted and made again is not the one the journal speaks of.
    pub part_ino: u64,
    /// Digest over the blocks marked in `blocks`.
    pub digest: u64,
    /// One bit per block.
    pub blocks: Vec<u64>,
}

fn checksum(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(bytes, 0x4A52_4E4C)
}

impl Journal {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.bytes(&MAGIC).u16(VERSION);
        self.id.write(&mut w);
        w.u64(self.part_ino)
            .u64(self.digest)
            .u64(self.blocks.len() as u64);
        for b in &self.blocks {
            w.u64(*b);
        }
        let sum = checksum(&w.buf);
        w.u64(sum);
        w.buf
    }

    /// The journal in `bytes`, if whole, ours and for `id`.
    pub fn decode(bytes: &[u8], id: &Identity) -> Option<Journal> {
        let body = bytes.len().checked_sub(8)?;
        let sum = u64::from_le_bytes(bytes[body..].try_into().ok()?);
        if checksum(&bytes[..body]) != sum {
            return None;
        }
        let mut r = Reader::new(&bytes[..body]);
        if r.array::<4>().ok()? != MAGIC || r.u16().ok()? != VERSION {
            return None;
        }
        if Identity::read(&mut r)? != *id {
            return None;
        }
        let part_ino = r.u64().ok()?;
        let digest = r.u64().ok()?;
        let words = r.u64().ok()?;
        let want = id.size.div_ceil(id.block).div_ceil(64);
        if words != want || words as usize * 8 != r.remaining() {
            return None;
        }
        let blocks = (0..words).map(|_| r.u64()).collect::<Result<_, _>>().ok()?;
        Some(Journal {
            id: *id,
            part_ino,
            digest,
            blocks,
        })
    }

    /// Whether `part` is the file this journal speaks of: the same inode,
    /// and long enough to hold the last block named (a data block extends
    /// the file; only a trailing hole would not, and is then written again).
    pub fn matches(&self, part: &File) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Ok(m) = part.metadata() else {
            return false;
        };
        let n = self.id.size.div_ceil(self.id.block);
        let last = (0..n)
            .rev()
            .find(|b| self.blocks[(b / 64) as usize] & (1 << (b % 64)) != 0);
        let needed = last.map_or(0, |b| (b * self.id.block + 1).min(self.id.size));
        m.ino() == self.part_ino && m.len() >= needed
    }

    /// Runs of set bits: (first block, count).
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        let n = self.id.size.div_ceil(self.id.block);
        let mut out: Vec<(u64, u64)> = Vec::new();
        for b in 0..n {
            if self.blocks[(b / 64) as usize] & (1 << (b % 64)) != 0 {
                match out.last_mut() {
                    Some((first, count)) if *first + *count == b => *count += 1,
                    _ => out.push((b, 1)),
                }
            }
        }
        out
    }
}

pub fn journal_rel(final_rel: &str) -> String {
    format!("{final_rel}{JOURNAL_SUFFIX}")
}

/// The journal beside `final_rel`, if there is a valid one for `id`.
pub fn load(root: &Root, final_rel: &str, id: &Identity) -> Option<Journal> {
    let mut f = root
        .open_file(&journal_rel(final_rel), libc::O_RDONLY, 0)
        .ok()?;
    let mut bytes = Vec::new();
    // A journal holds a bit per block: 2^30 blocks at most is 128 MiB.
    (&mut f)
        .take((crate::session::SESSION_BLOCKS_MAX / 8) + 4096)
        .read_to_end(&mut bytes)
        .ok()?;
    Journal::decode(&bytes, id)
}

/// Replace the journal beside `final_rel` with `j`, durably.
pub fn store(root: &Root, final_rel: &str, j: &Journal) -> std::io::Result<()> {
    let rel = journal_rel(final_rel);
    let tmp = format!("{rel}.tmp");
    let mut f = root.open_file(&tmp, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, 0o600)?;
    f.write_all(&j.encode())?;
    f.sync_data()?;
    root.rename(&tmp, &rel)
}

/// Forget the journal beside `final_rel` (the part starts over or is done).
pub fn remove(root: &Root, final_rel: &str) {
    let rel = journal_rel(final_rel);
    let _ = root.unlink(&rel);
    let _ = root.unlink(&format!("{rel}.tmp"));
}

fn stamp_bytes(id: &Identity, digest: u64) -> Vec<u8> {
    let mut w = Writer::default();
    w.bytes(&MAGIC).u16(VERSION);
    id.write(&mut w);
    w.u64(digest);
    w.buf
}

/// Record on a finished file what it was made from and its digest.
/// Filesystems without user xattrs simply get no stamp (a later resume
/// then sends the file again).
pub fn stamp(file: &File, id: &Identity, digest: u64) {
    let _ = sys::set_xattr(file, XATTR, &stamp_bytes(id, digest));
}

/// The digest stamped on `file`, when the stamp is for `id` (the block size
/// aside: a re-run with other blocks still finds the file complete) and the
/// file still has that size and mtime.
pub fn stamped_digest(file: &File, id: &Identity) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let bytes = sys::get_xattr(file, XATTR)?;
    let mut r = Reader::new(&bytes);
    if r.array::<4>().ok()? != MAGIC || r.u16().ok()? != VERSION {
        return None;
    }
    let stored = Identity::read(&mut r)?;
    let digest = r.u64().ok()?;
    let m = file.metadata().ok()?;
    let same = stored.size == id.size
        && stored.mtime_s == id.mtime_s
        && stored.mtime_ns == id.mtime_ns
        && m.len() == id.size
        && m.mtime() == id.mtime_s
        && m.mtime_nsec() as u32 == id.mtime_ns;
    same.then_some(digest)
}

/// A digest of `file`'s content in `block`-sized pieces, independent of
/// holes and of the transfer (what `--checksum` compares on both sides).
pub fn content_digest(
    file: &File,
    size: u64,
    block: u64,
    tick: &mut dyn FnMut(),
) -> std::io::Result<u64> {
    use crate::protocol::frame::{digest_add, payload_checksum};
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; block.min(size.max(1)) as usize];
    let mut digest = 0u64;
    let mut offset = 0u64;
    while offset < size {
        let n = (size - offset).min(block) as usize;
        file.read_exact_at(&mut buf[..n], offset)?;
        digest = digest_add(digest, payload_checksum(0, offset, &buf[..n]));
        offset += n as u64;
        tick();
    }
    Ok(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> Identity {
        Identity {
            size: 10 * 4096 + 5,
            mtime_s: 1_700_000_000,
            mtime_ns: 7,
            block: 4096,
        }
    }

    #[test]
    fn a_journal_round_trips_and_anything_else_is_ignored() {
        let j = Journal {
            id: id(),
            part_ino: 77,
            digest: 42,
            blocks: vec![0b1011_0000_0111],
        };
        let b = j.encode();
        assert_eq!(Journal::decode(&b, &id()), Some(j.clone()));
        assert_eq!(j.ranges(), vec![(0, 3), (8, 2)]);
        // Another identity (the source changed, other blocks): ignored.
        let other = Identity {
            mtime_ns: 8,
            ..id()
        };
        assert_eq!(Journal::decode(&b, &other), None);
        let other = Identity {
            block: 8192,
            ..id()
        };
        assert_eq!(Journal::decode(&b, &other), None);
        // Torn at any length, or any byte flipped: ignored.
        for cut in 0..b.len() {
            assert_eq!(Journal::decode(&b[..cut], &id()), None);
        }
        for i in 0..b.len() {
            let mut x = b.clone();
            x[i] ^= 0x10;
            assert_eq!(Journal::decode(&x, &id()), None, "byte {i}");
        }
    }
}
