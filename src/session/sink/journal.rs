//! What a receiver remembers between sessions so a transfer can resume:
//! beside each `NAME.urmove.part` a journal `NAME.urmove.journal` lists the
//! blocks written *and synced* (the part is `fdatasync`ed before the journal
//! names them) with their digest; a finished file carries its size, mtime
//! and digest in the `user.urmove` extended attribute, so a re-run can see
//! it is already there.
//!
//! Both are authenticated with the receiver's own [`Secret`] and bound to
//! the file they speak of (device and inode): a journal or stamp that was
//! planted, copied from another file, edited or torn is ignored (the file
//! starts over), never trusted. A journal is written whole to a temporary
//! name, synced and renamed over the old one, never through a symlink.

use std::ffi::CStr;
use std::fs::File;
use std::io::{Read, Write};

use crate::datapath::beneath::{FileId, Root};
use crate::datapath::sys;
use crate::protocol::manifest::Entry;
use crate::protocol::wire::{Reader, Writer};

use crate::session::link::secret::Secret;

/// Suffix of a journal beside its part file.
pub const JOURNAL_SUFFIX: &str = ".urmove.journal";
const JOURNAL_MAGIC: [u8; 4] = *b"URMJ";
const VERSION: u16 = 4;
/// Journals of version 3 name no generation nor tag (read as all zeros).
const VERSION_BEFORE_GENERATION: u16 = 3;
const MAC_LEN: usize = 32;

/// The identity a journal or stamp is valid for: the source's size and
/// mtime as the manifest gave them, and (journals) the block size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub size: u64,
    pub mtime_s: i64,
    pub mtime_ns: u32,
    pub block: u64,
}

/// A time as an inode keeps it: seconds and nanoseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timestamp {
    pub s: i64,
    pub ns: u32,
}

impl Timestamp {
    /// A file's mtime, as `m` gives it.
    pub fn mtime_of(m: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Timestamp {
            s: m.mtime(),
            ns: m.mtime_nsec() as u32,
        }
    }

    /// Nanoseconds from the epoch.
    pub fn as_ns(self) -> i128 {
        i128::from(self.s) * 1_000_000_000 + i128::from(self.ns)
    }
}

impl Identity {
    /// The mtime it names.
    pub fn mtime(&self) -> Timestamp {
        Timestamp {
            s: self.mtime_s,
            ns: self.mtime_ns,
        }
    }

    pub fn of(e: &Entry, block: u64) -> Self {
        Identity {
            size: e.size,
            mtime_s: e.mtime_s,
            mtime_ns: e.mtime_ns,
            block,
        }
    }

    /// A file still growing (`send --follow`), `size` bytes so far: its
    /// journal names no mtime (the source's moves on as it is written).
    pub fn growing(size: u64, block: u64) -> Self {
        Identity {
            size,
            mtime_s: GROWING_MTIME,
            mtime_ns: 0,
            block,
        }
    }

    /// Whether a journal written for `self` holds for a file now known
    /// as `now`: the same identity, or (a file that was still growing) the
    /// same block size and no more blocks than `now` has. Blocks of a grown
    /// file are checked again by content before they count.
    pub fn holds_for(&self, now: &Identity) -> bool {
        self == now
            || (self.mtime_s == GROWING_MTIME
                && self.mtime_ns == 0
                && self.block == now.block
                && self.size <= now.size)
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

    fn blocks(&self) -> u64 {
        self.size.div_ceil(self.block.max(1))
    }
}

/// The mtime a growing file's identity names (none a file has).
const GROWING_MTIME: i64 = i64::MIN;

/// Verified blocks of one part file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journal {
    pub id: Identity,
    /// The part file the blocks were written to: a part that was deleted
    /// and made again, or another file, is not the one the journal means.
    pub part: FileId,
    /// Digest over the blocks marked in `blocks`.
    pub digest: u64,
    /// One bit per block.
    pub blocks: Vec<u64>,
    /// Drawn at random when a session starts the part's blocks (a piece's)
    /// from nothing, kept by a session that continues them: two journals
    /// of the same blocks and digest written by two sessions differ here
    /// (see `shard::receipt`).
    pub generation: [u8; 16],
    /// The part's own tag ([`PART_TAG_XATTR`], drawn when the part was
    /// made): a part made later on a reused inode number is not this one.
    pub tag: [u8; 16],
}

/// Where a part file keeps the random tag it was made with.
pub const PART_TAG_XATTR: &CStr = c"user.urmove.tag";

/// The tag of `part` (all zeros for a part made before tags were).
pub fn part_tag(part: &File) -> [u8; 16] {
    sys::get_xattr(part, PART_TAG_XATTR)
        .and_then(|t| t.try_into().ok())
        .unwrap_or([0; 16])
}

/// How a journal lists its blocks: whichever is smaller.
const AS_BITMAP: u8 = 0;
const AS_RANGES: u8 = 1;

/// Bytes of a journal before its list of blocks.
const JOURNAL_HEAD_LEN: u64 = 4 + 2 + 28 + 24 + 32 + 1 + 8;

fn is_set(blocks: &[u64], b: u64) -> bool {
    blocks[(b / 64) as usize] & (1 << (b % 64)) != 0
}

/// Bytes a journal of `blocks` (a bit per block of `id`) takes on disk.
pub fn encoded_len(id: &Identity, blocks: &[u64]) -> u64 {
    let n = id.blocks();
    let mut runs = 0u64;
    let mut at = 0;
    while let Some(first) = next_bit(blocks, at, true, n) {
        runs += 1;
        at = next_bit(blocks, first, false, n).unwrap_or(n);
    }
    let words = blocks.len() as u64;
    JOURNAL_HEAD_LEN + (runs * 16).min(words * 8) + MAC_LEN as u64
}

/// The first block at or after `from` (below `n`) whose bit is `set`.
fn next_bit(blocks: &[u64], from: u64, set: bool, n: u64) -> Option<u64> {
    let mut w = (from / 64) as usize;
    let mut mask = !0u64 << (from % 64);
    while w < blocks.len() {
        let word = if set { blocks[w] } else { !blocks[w] } & mask;
        if word != 0 {
            let b = w as u64 * 64 + u64::from(word.trailing_zeros());
            return (b < n).then_some(b);
        }
        (w, mask) = (w + 1, !0);
    }
    None
}

impl Journal {
    /// The journal's bytes, authenticated with `secret`.
    pub fn encode(&self, secret: &Secret) -> Vec<u8> {
        let mut w = Writer::default();
        w.bytes(&JOURNAL_MAGIC).u16(VERSION);
        self.id.write(&mut w);
        w.u64(self.part.dev).u64(self.part.ino).u64(self.digest);
        w.bytes(&self.generation).bytes(&self.tag);
        let ranges = self.ranges();
        if ranges.len() * 16 < self.blocks.len() * 8 {
            w.u8(AS_RANGES).u64(ranges.len() as u64);
            for (first, count) in ranges {
                w.u64(first).u64(count);
            }
        } else {
            w.u8(AS_BITMAP).u64(self.blocks.len() as u64);
            for b in &self.blocks {
                w.u64(*b);
            }
        }
        let mac = secret.mac(&[b"urmove journal", &w.buf]);
        w.bytes(&mac);
        w.buf
    }

    /// The journal in `bytes`, if whole, made with `secret` and for `id`.
    pub fn decode(bytes: &[u8], id: &Identity, secret: &Secret) -> Option<Journal> {
        Journal::decode_for(bytes, secret, &|j| j == id)
    }

    /// The journal in `bytes`, if whole, made with `secret` and for an
    /// identity `accept` takes (its own, which sizes its blocks).
    pub fn decode_for(
        bytes: &[u8],
        secret: &Secret,
        accept: &dyn Fn(&Identity) -> bool,
    ) -> Option<Journal> {
        let (body, true) = signed(bytes, secret)? else {
            return None;
        };
        let mut r = Reader::new(body);
        if r.array::<4>().ok()? != JOURNAL_MAGIC {
            return None;
        }
        let version = r.u16().ok()?;
        if version != VERSION && version != VERSION_BEFORE_GENERATION {
            return None;
        }
        let id = &Identity::read(&mut r)?;
        if !accept(id) {
            return None;
        }
        let part = FileId {
            dev: r.u64().ok()?,
            ino: r.u64().ok()?,
        };
        let digest = r.u64().ok()?;
        let (generation, tag) = match version {
            VERSION => (r.array::<16>().ok()?, r.array::<16>().ok()?),
            _ => ([0; 16], [0; 16]),
        };
        let words = id.blocks().div_ceil(64) as usize;
        let blocks = match r.u8().ok()? {
            AS_BITMAP => decode_bitmap(&mut r, words, id.blocks())?,
            AS_RANGES => decode_ranges(&mut r, words, id.blocks())?,
            _ => return None,
        };
        (r.remaining() == 0).then_some(Journal {
            id: *id,
            part,
            digest,
            blocks,
            generation,
            tag,
        })
    }

    /// Whether `part` is the file this journal speaks of: the same device,
    /// inode and tag, and long enough to hold the last block named (a data
    /// block extends the file; only a trailing hole would not, and is then
    /// written again).
    pub fn matches(&self, part: &File) -> bool {
        if part_tag(part) != self.tag {
            return false;
        }
        let (Ok(m), Ok(id)) = (part.metadata(), FileId::of(part)) else {
            return false;
        };
        let last = (0..self.id.blocks())
            .rev()
            .find(|&b| is_set(&self.blocks, b));
        let needed = last.map_or(0, |b| (b * self.id.block + 1).min(self.id.size));
        id == self.part && m.len() >= needed
    }

    /// Runs of set bits: (first block, count), a word at a time.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        let n = self.id.blocks();
        let mut out = Vec::new();
        let mut at = 0;
        while let Some(first) = next_bit(&self.blocks, at, true, n) {
            let end = next_bit(&self.blocks, first, false, n).unwrap_or(n);
            out.push((first, end - first));
            at = end;
        }
        out
    }
}

fn decode_bitmap(r: &mut Reader<'_>, words: usize, blocks: u64) -> Option<Vec<u64>> {
    if r.u64().ok()? != words as u64 || r.remaining() != words * 8 {
        return None;
    }
    let bits: Vec<u64> = (0..words).map(|_| r.u64().ok()).collect::<Option<_>>()?;
    // No block past the end of the file: one journal, one meaning.
    let tail = blocks % 64;
    let stray = match bits.last() {
        Some(&last) if tail != 0 => last >> tail != 0,
        _ => false,
    };
    (!stray).then_some(bits)
}

fn decode_ranges(r: &mut Reader<'_>, words: usize, blocks: u64) -> Option<Vec<u64>> {
    let n = r.u64().ok()?;
    if n.checked_mul(16)? != r.remaining() as u64 {
        return None;
    }
    let mut bits = vec![0u64; words];
    let mut end = 0u64;
    for _ in 0..n {
        let (first, count) = (r.u64().ok()?, r.u64().ok()?);
        let last = first.checked_add(count)?;
        // Sorted, apart, within the file.
        if count == 0 || first < end || last > blocks {
            return None;
        }
        end = last;
        for b in first..last {
            bits[(b / 64) as usize] |= 1 << (b % 64);
        }
    }
    Some(bits)
}

/// Ending of a piece's journal.
pub const PIECE_SUFFIX: &str = ".urmove.piece";

/// A journal's body and whether `secret` made its MAC (`None`: too short
/// to have one).
fn signed<'b>(bytes: &'b [u8], secret: &Secret) -> Option<(&'b [u8], bool)> {
    let body = bytes.len().checked_sub(MAC_LEN)?;
    let mac: [u8; MAC_LEN] = bytes[body..].try_into().ok()?;
    let ours = secret.verify(&[b"urmove journal", &bytes[..body]], &mac);
    Some((&bytes[..body], ours))
}

/// Why [`load_checked`] found no journal to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoJournal {
    /// None there, or none of this identity, or not whole.
    Absent,
    /// A journal made with another secret: another receiver's, run with a
    /// secret of its own, or a stranger's made to look like one (only
    /// said, never trusted).
    OtherSecret,
}

/// The journal at `rel` (see [`journal_of`]), if ours and for an
/// identity `accept` takes.
pub fn load(
    root: &Root,
    rel: &str,
    secret: &Secret,
    accept: &dyn Fn(&Identity) -> bool,
) -> Option<Journal> {
    load_checked(root, rel, secret, accept).ok()
}

/// [`load`], saying why there is none (read once).
pub fn load_checked(
    root: &Root,
    rel: &str,
    secret: &Secret,
    accept: &dyn Fn(&Identity) -> bool,
) -> Result<Journal, NoJournal> {
    let (bytes, own) = read_journal(root, rel).ok_or(NoJournal::Absent)?;
    if let Some(j) = Journal::decode_for(&bytes, secret, accept) {
        return Ok(j);
    }
    // Only a file a receiver of this user could have written (one name,
    // mode 0600) speaks of another secret: one a local user planted is
    // no journal, and no reason to move the secret.
    match signed(&bytes, secret) {
        Some((body, false)) if own && body.starts_with(&JOURNAL_MAGIC) => {
            Err(NoJournal::OtherSecret)
        }
        _ => Err(NoJournal::Absent),
    }
}

/// The bytes of the regular file at `rel`, as much as a journal can hold,
/// and whether it is as this user's receivers write journals.
fn read_journal(root: &Root, rel: &str) -> Option<(Vec<u8>, bool)> {
    use std::os::unix::fs::PermissionsExt;
    let mut f = root.open_read(rel).ok()?;
    let m = f.metadata().ok()?;
    if !m.is_file() {
        return None;
    }
    let own = super::part::is_own_file(&m) && m.permissions().mode() & 0o077 == 0;
    let mut bytes = Vec::new();
    // A journal holds at most a bit per block: 2^30 blocks is 128 MiB.
    (&mut f)
        .take((crate::session::SESSION_BLOCKS_MAX / 8) + 4096)
        .read_to_end(&mut bytes)
        .ok()?;
    Some((bytes, own))
}

/// Replace the journal at `rel` with `j`, durably; returns the bytes
/// written.
pub fn store(root: &Root, rel: &str, j: &Journal, secret: &Secret) -> std::io::Result<u64> {
    let tmp = format!("{rel}.tmp");
    let bytes = j.encode(secret);
    // A new file every time: whatever sits at the temporary's name (a
    // planted hardlink, a link) loses its name and is never written.
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
    let mut f = loop {
        match root.open_file(&tmp, flags, 0o600) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => root.unlink(&tmp)?,
            other => break other?,
        }
    };
    f.write_all(&bytes)?;
    f.sync_data()?;
    root.rename(&tmp, rel)?;
    Ok(bytes.len() as u64)
}

/// Forget the journal at `rel` (the part starts over or is done).
pub fn remove(root: &Root, rel: &str) {
    let _ = root.unlink(rel);
    let _ = root.unlink(&format!("{rel}.tmp"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> Identity {
        Identity {
            size: 200 * 4096 + 5,
            mtime_s: 1_700_000_000,
            mtime_ns: 7,
            block: 4096,
        }
    }

    fn journal(blocks: Vec<u64>) -> Journal {
        Journal {
            id: id(),
            part: FileId { dev: 3, ino: 77 },
            digest: 42,
            blocks,
            generation: [7; 16],
            tag: [8; 16],
        }
    }

    /// A journal made with another secret is told apart from none: what a
    /// receiver of a shared root run with a secret of its own finds.
    #[test]
    fn a_journal_of_another_secret_is_said_to_be_one() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let root = Root::open_for_writing(dir.path()).unwrap();
        let (ours, theirs) = (Secret::ephemeral().unwrap(), Secret::ephemeral().unwrap());
        let any = |_: &Identity| true;
        let j = journal(vec![0b111, 0, 0, 0]);
        store(&root, "x.journal", &j, &theirs).unwrap();
        assert_eq!(load_checked(&root, "x.journal", &theirs, &any), Ok(j));
        assert_eq!(
            load_checked(&root, "x.journal", &ours, &any),
            Err(NoJournal::OtherSecret)
        );
        std::fs::write(dir.path().join("junk"), [7u8; 100]).unwrap();
        // The other secret's journal as a local user could plant it: one
        // another name holds too, or readable by others, is none.
        let planted = dir.path().join("planted");
        std::fs::copy(dir.path().join("x.journal"), &planted).unwrap();
        std::fs::hard_link(&planted, dir.path().join("planted-too")).unwrap();
        let open = dir.path().join("open");
        std::fs::copy(dir.path().join("x.journal"), &open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
        for rel in ["junk", "none", "planted", "open"] {
            assert_eq!(
                load_checked(&root, rel, &ours, &any),
                Err(NoJournal::Absent)
            );
        }
    }

    /// A journal an earlier version wrote (version 3, no generation) is
    /// read, its generation all zeros.
    #[test]
    fn a_journal_of_version_3_reads_with_no_generation() {
        let secret = Secret::ephemeral().unwrap();
        let j = journal(vec![0b111, 0, 0, 0]);
        let mut w = Writer::default();
        w.bytes(&JOURNAL_MAGIC).u16(VERSION_BEFORE_GENERATION);
        j.id.write(&mut w);
        w.u64(j.part.dev).u64(j.part.ino).u64(j.digest);
        w.u8(AS_BITMAP).u64(j.blocks.len() as u64);
        for b in &j.blocks {
            w.u64(*b);
        }
        let mac = secret.mac(&[b"urmove journal", &w.buf]);
        w.bytes(&mac);
        let old = Journal::decode(&w.buf, &id(), &secret).unwrap();
        assert_eq!((old.generation, old.tag), ([0; 16], [0; 16]));
        assert_eq!(old.blocks, j.blocks);
        assert_ne!(old, j);
    }

    #[test]
    fn a_journal_round_trips_and_anything_else_is_ignored() {
        let secret = Secret::ephemeral().unwrap();
        let mut bits = vec![0u64; 4];
        bits[0] = 0b1011_0000_0111;
        let sparse = journal(bits);
        let dense = journal(vec![0x5555_5555_5555_5555, 1, 0, 0]);
        for j in [sparse, dense] {
            let b = j.encode(&secret);
            assert_eq!(encoded_len(&j.id, &j.blocks), b.len() as u64, "{j:?}");
            assert_eq!(Journal::decode(&b, &id(), &secret), Some(j.clone()));
            // Another identity (the source changed, other blocks): ignored.
            let other = Identity {
                mtime_ns: 8,
                ..id()
            };
            assert_eq!(Journal::decode(&b, &other, &secret), None);
            // Another secret (planted, or another daemon's): ignored.
            let stranger = Secret::ephemeral().unwrap();
            assert_eq!(Journal::decode(&b, &id(), &stranger), None);
            // Torn at any length, or any byte flipped: ignored.
            for cut in 0..b.len() {
                assert_eq!(Journal::decode(&b[..cut], &id(), &secret), None);
            }
            for i in 0..b.len() {
                let mut x = b.clone();
                x[i] ^= 0x10;
                assert_eq!(Journal::decode(&x, &id(), &secret), None, "byte {i}");
            }
        }
        assert_eq!(
            journal(vec![0b1011_0000_0111, 0, 0, 0]).ranges(),
            vec![(0, 3), (8, 2), (11, 1)]
        );
    }
}
