//! Digests of bytes held on disk, as the frames that carry them would
//! sum them: what a resume's claims and a source's confirmation are
//! judged by.

use std::fs::File;

use crate::protocol::frame::{digest_add, frame_terms, FrameKey};

/// Bytes read at a time.
const HASH_CHUNK: usize = 4 << 20;

/// Both digests of bytes held on disk: the plain one (the sum frames and
/// journals add up, which anyone can compute and so collide) and the one
/// keyed with the session (the sum of the frame checksums' keyed terms),
/// which a resume's claims are judged by: nobody can make other bytes
/// match it before the session that checks it has begun.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldDigest {
    pub plain: u64,
    pub keyed: u64,
}

/// Both digests of `file`'s content (holes read as zeros), the same as
/// those of the frames it would travel in, whatever their size.
pub fn content_digests(
    file: &File,
    size: u64,
    key: &FrameKey,
    tick: &mut dyn FnMut(),
) -> std::io::Result<HeldDigest> {
    ranges_digests(file, size, size.max(1), &[(0, 1)], key, tick)
}

/// Both digests of the blocks `ranges` (first block, count) of `file`, in
/// blocks of `block` bytes: a source's, every byte read.
pub fn ranges_digests(
    file: &File,
    size: u64,
    block: u64,
    ranges: &[(u64, u64)],
    key: &FrameKey,
    tick: &mut dyn FnMut(),
) -> std::io::Result<HeldDigest> {
    use std::os::unix::fs::FileExt;
    let read = |buf: &mut [u8], at: u64| file.read_exact_at(buf, at);
    digests_of(read, size, block, ranges, key, tick)
}

/// [`ranges_digests`] of a part file: what lies past its end reads as
/// zeros (see [`read_or_zeros`]).
pub fn part_digests(
    part: &File,
    size: u64,
    block: u64,
    ranges: &[(u64, u64)],
    key: &FrameKey,
    tick: &mut dyn FnMut(),
) -> std::io::Result<HeldDigest> {
    let read = |buf: &mut [u8], at: u64| read_or_zeros(part, buf, at);
    digests_of(read, size, block, ranges, key, tick)
}

/// Both digests of `ranges`, their bytes got by `read`.
fn digests_of(
    read: impl Fn(&mut [u8], u64) -> std::io::Result<()>,
    size: u64,
    block: u64,
    ranges: &[(u64, u64)],
    key: &FrameKey,
    tick: &mut dyn FnMut(),
) -> std::io::Result<HeldDigest> {
    let mut buf = vec![0u8; HASH_CHUNK.min(size.max(1) as usize)];
    let mut d = HeldDigest { plain: 0, keyed: 0 };
    for &(first, count) in ranges {
        let start = first.saturating_mul(block).min(size);
        let end = first.saturating_add(count).saturating_mul(block).min(size);
        let mut offset = start;
        while offset < end {
            let n = (end - offset).min(buf.len() as u64) as usize;
            read(&mut buf[..n], offset)?;
            let (plain, keyed) = frame_terms(key, offset, &buf[..n]);
            d.plain = digest_add(d.plain, plain);
            d.keyed = digest_add(d.keyed, keyed);
            offset += n as u64;
            tick();
        }
    }
    Ok(d)
}

/// Fill `buf` from `file` at `offset`; what lies past the file's end
/// reads as zeros. A part grows only as its blocks are written and is cut
/// to its size at the commit: a journaled block whose last pieces were
/// holes (a sparse or hole frame) ends past the part's end, and those
/// bytes are the zeros the commit gives it.
fn read_or_zeros(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf[got..].fill(0);
    Ok(())
}

/// The plain digest of `file`'s first `size` bytes, as a followed file's
/// end is confirmed: `stop` set ends the read early (`Interrupted`).
pub fn plain_digest(
    file: &File,
    size: u64,
    stop: &std::sync::atomic::AtomicBool,
) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::Ordering;
    let mut buf = vec![0u8; HASH_CHUNK.min(size.max(1) as usize)];
    let (mut offset, mut d) = (0, 0);
    while offset < size {
        if stop.load(Ordering::Relaxed) {
            return Err(std::io::ErrorKind::Interrupted.into());
        }
        let n = (size - offset).min(buf.len() as u64) as usize;
        file.read_exact_at(&mut buf[..n], offset)?;
        d = digest_add(d, crate::protocol::frame::content_terms(offset, &buf[..n]));
        offset += n as u64;
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_digests_match_the_frames_digest_in_any_block_size() {
        use crate::protocol::frame::content_terms;
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..3 * 8192 + 77).map(|i| (i % 253) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let f = File::open(&p).unwrap();
        let size = data.len() as u64;
        let key = FrameKey { k0: 3, k1: 9 };
        let whole = content_digests(&f, size, &key, &mut || {}).unwrap();
        assert_eq!(whole.plain, content_terms(0, &data));
        assert_eq!(whole.keyed, frame_terms(&key, 0, &data).1);
        let parts = ranges_digests(&f, size, 8192, &[(0, 1), (1, 3)], &key, &mut || {}).unwrap();
        assert_eq!(parts, whole);
        let first = ranges_digests(&f, size, 8192, &[(0, 1)], &key, &mut || {}).unwrap();
        assert_eq!(first.plain, content_terms(0, &data[..8192]));
        // Another session's key gives another keyed digest of the same bytes.
        let other = content_digests(&f, size, &FrameKey { k0: 3, k1: 8 }, &mut || {}).unwrap();
        assert_eq!(other.plain, whole.plain);
        assert_ne!(other.keyed, whole.keyed);
        let go = std::sync::atomic::AtomicBool::new(false);
        assert_eq!(plain_digest(&f, size, &go).unwrap(), whole.plain);
        go.store(true, std::sync::atomic::Ordering::Relaxed);
        let stopped = plain_digest(&f, size, &go).unwrap_err();
        assert_eq!(stopped.kind(), std::io::ErrorKind::Interrupted);
    }

    /// A part whose last journaled block ended in holes is shorter than
    /// the block: those bytes are the zeros its commit gives it. A source
    /// as short is read short (an error), never taken as zeros.
    #[test]
    fn a_part_reads_zeros_past_its_end_and_a_source_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("part");
        let mut block = vec![0u8; 8192];
        block[..4096].fill(7);
        std::fs::write(&p, &block[..4096]).unwrap();
        let f = File::open(&p).unwrap();
        let key = FrameKey { k0: 1, k1: 2 };
        let d = part_digests(&f, 8192, 8192, &[(0, 1)], &key, &mut || {}).unwrap();
        assert_eq!(d.plain, crate::protocol::frame::content_terms(0, &block));
        assert_eq!(d.keyed, frame_terms(&key, 0, &block).1);
        let short = ranges_digests(&f, 8192, 8192, &[(0, 1)], &key, &mut || {});
        assert_eq!(short.unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
