//! A sending lane's reads: its sources (files opened by identity), their
//! blocks read into frame buffers through the ring (or a pread when every
//! file slot is busy), holes as header-only frames, and a file that
//! changed while it was read (size, mtime, ctime, inode) dropped.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use crate::datapath::net::payload_mut;
use crate::datapath::{sys, Lease};
use crate::protocol::frame::{
    digest_add, frame_checksum, frame_terms, zero_terms, FrameHeader, FrameKey,
};
use crate::protocol::sparse::Map;

use super::ledger::Sent;
use super::pusher::Pusher;
use super::sending::PushParams;
use super::work::{End, Piece};
use crate::session::plan::extents::{map_of, Extents};
use crate::session::plan::unsendable::Unsendable;
use crate::session::SessionError;

/// A source file being read.
pub(super) struct Source {
    pub(super) entry: usize,
    pub(super) file: File,
    pub(super) direct: bool,
    /// Where the file holds data, for a file with holes.
    pub(super) extents: Option<Extents>,
    pub(super) slot: Option<u32>,
    /// Where the file ends (size and mtime), when known as the piece
    /// began (a growing file's only once it ended).
    pub(super) file_end: Option<End>,
    /// Where this lane's piece of it ends (the size, for a whole file).
    pub(super) end: u64,
    /// Next offset to read.
    pub(super) next: u64,
    /// Reads in flight.
    pub(super) reads: u32,
    /// Block ranges (first, count) the receiver holds, sorted.
    pub(super) skip: Vec<(u64, u64)>,
    /// Dropped (unreadable or changed): reads still in flight are discarded.
    pub(super) dropped: bool,
}

impl Source {
    /// Move `next` past blocks the receiver holds already.
    pub(super) fn skip_held(&mut self, block: u64) {
        while let Some(&(first, count)) = self.skip.first() {
            let b = self.next / block;
            // At the end of the file nothing is left to skip (a held range
            // ending with a short last block would otherwise loop forever).
            if b >= first + count || self.next >= self.end {
                self.skip.remove(0);
            } else if b >= first {
                self.next = ((first + count) * block).min(self.end);
            } else {
                break;
            }
        }
    }

    pub(super) fn read_through(&self) -> bool {
        self.next >= self.end
    }
}

/// A read in flight: (entry, offset, payload bytes, index into the sources).
#[derive(Debug, Clone, Copy)]
pub(super) struct Read {
    pub(super) entry: usize,
    pub(super) offset: u64,
    pub(super) len: usize,
    pub(super) source: usize,
}

/// A block of a source file, read into a frame buffer.
#[derive(Debug, Clone, Copy)]
pub(super) struct Block {
    pub(super) entry: usize,
    pub(super) offset: u64,
    pub(super) len: usize,
}

/// The lanes of a sending side for `streams` streams (`carrying` of them
/// carry data from the start: each lane needs one), each lane's sender
/// The held block ranges (`first`, `count`) of `ranges`, sorted, that
/// reach into `piece`: found by binary search, so a resumed file read in
/// many pieces costs no more than read whole.
pub(super) fn held_within(ranges: &[(u64, u64)], block: u64, piece: &Piece) -> Vec<(u64, u64)> {
    let from = ranges.partition_point(|&(first, count)| (first + count) * block <= piece.start);
    ranges[from..]
        .iter()
        .take_while(|&&(first, _)| first * block < piece.end)
        .copied()
        .collect()
}

impl<'a> Pusher<'a> {
    /// Issue reads while buffers and tokens last.
    pub(super) fn issue_reads(&mut self) -> Result<(), SessionError> {
        while !self.free_tokens.is_empty() {
            let Some(cur) = self.current_source()? else {
                return Ok(());
            };
            let block = self.block;
            let src = &mut self.sources[cur];
            src.skip_held(block);
            if src.read_through() {
                continue;
            }
            // Paced: reads already issued go out before waiting for more.
            let n = (src.end - src.next).min(block) as usize;
            if src.file_end.is_none() && !on_disk(&src.file, src.next, n as u64) {
                // A growing file's block not all written yet: later.
                let (entry, start, end) = (src.entry, src.next, src.end);
                self.work.defer(Piece { entry, start, end });
                src.end = start;
                continue;
            }
            let moving = self.free_tokens.len() < self.reads_max || !self.ready.is_empty();
            if moving && self.pacer.delay(n as u64).is_some() {
                return Ok(());
            }
            let Some(lease) = self.tx.take_buffer() else {
                return Ok(());
            };
            let offset = src.next;
            src.next += n as u64;
            self.read_block(cur, offset, n, lease)?;
        }
        Ok(())
    }

    /// The source being read, opening the next file when it is read
    /// through; a file that cannot be opened is skipped.
    pub(super) fn current_source(&mut self) -> Result<Option<usize>, SessionError> {
        if let Some(c) = self.current.filter(|&c| !self.sources[c].read_through()) {
            return Ok(Some(c));
        }
        loop {
            let Some(piece) = self.work.take(self.lane.index) else {
                return Ok(None);
            };
            match (self.open)(piece.entry) {
                Ok((file, direct)) => {
                    self.add_source(piece, file, direct)?;
                    return Ok(self.current);
                }
                Err(why) => self.skip(piece.entry, why.to_string()),
            }
        }
    }

    pub(super) fn add_source(
        &mut self,
        piece: Piece,
        file: File,
        direct: bool,
    ) -> Result<(), SessionError> {
        let i = piece.entry;
        // A growing file's blocks all go as data (a hole frame past what
        // the receiver knows of it would not say how long it is).
        let sparse = !self.is_growing(i)
            && file.metadata().is_ok_and(|m| {
                use std::os::unix::fs::MetadataExt;
                m.blocks() * 512 < m.len()
            });
        // Learned once per file (its piece of it), not per block.
        let extents = sparse.then(|| Extents::of(&file, piece.start, piece.end));
        let slot = self.tx.attach_file(file.as_raw_fd())?;
        let skip = self
            .held
            .partial
            .get(&(i as u32))
            .map(|(_, r)| held_within(r, self.block, &piece))
            .unwrap_or_default();
        self.sources.push(Source {
            entry: i,
            file,
            direct,
            extents,
            slot,
            file_end: self.work.end_of(i),
            end: piece.end,
            next: piece.start,
            reads: 0,
            skip,
            dropped: false,
        });
        self.current = Some(self.sources.len() - 1);
        Ok(())
    }

    /// Whether entry `i` was followed as it grew (the manifest's growing
    /// files, and every file a follow added; none a streamed push added).
    pub(super) fn is_growing(&self, i: usize) -> bool {
        match self.tree.entries.get(i) {
            Some(e) => e.growing,
            None => !self.streamed,
        }
    }

    /// Drop entry `i`: the receiver is told and stops waiting for it (by
    /// the first lane to find out).
    pub(super) fn skip(&mut self, i: usize, why: String) {
        if !self.work.drop_file(i) {
            return;
        }
        if let Some(added) = self.added {
            added.remember(i as u32);
        }
        self.announce.skipped(i as u32, &why);
        if let Some(acks) = self.ledger.acked {
            acks.settle(i as u32);
        }
        self.skipped.push((i as u32, why));
    }

    /// Whether the receiver refused source `k`'s file while the data came:
    /// it is dropped here too (the receiver knows why; nothing to say).
    pub(super) fn refused_here(&mut self, k: usize) -> bool {
        let entry = self.sources[k].entry;
        let refused = self.ledger.acked.is_some_and(|a| a.is_refused(entry));
        if refused && !self.sources[k].dropped {
            self.sources[k].dropped = true;
            self.sources[k].next = self.sources[k].end;
            self.work.drop_file(entry);
        }
        refused
    }

    /// Drop the source at `k` (unreadable, or changed) with `why`.
    pub(super) fn drop_source(&mut self, k: usize, why: String) {
        if !self.sources[k].dropped {
            self.sources[k].dropped = true;
            self.sources[k].next = self.sources[k].end;
            let entry = self.sources[k].entry;
            self.skip(entry, why);
        }
    }

    /// Read block `offset` of source `cur` into `lease`: a hole becomes a
    /// header-only frame, a data block a ring read (or a pread when every
    /// file slot is busy).
    pub(super) fn read_block(
        &mut self,
        cur: usize,
        offset: u64,
        n: usize,
        mut lease: Lease,
    ) -> Result<(), SessionError> {
        let src = &self.sources[cur];
        let i = src.entry;
        let last = src.file_end.is_some_and(|e| offset + n as u64 == e.size);
        let hole = src
            .extents
            .as_ref()
            .is_some_and(|e| e.is_hole(offset, n as u64));
        if hole {
            if last && !self.unchanged(cur) {
                self.tx.give_back(lease);
                return Ok(());
            }
            // Wholly a hole of the source: no data of it was counted.
            self.queue_hole(i, offset, n, 0, lease);
            return Ok(());
        }
        self.pacer.admit(n as u64, &mut self.tx)?;
        let src = &mut self.sources[cur];
        let want = if src.direct {
            crate::datapath::direct::padded(n)
        } else {
            n
        };
        if let Some(slot) = src.slot {
            // O_DIRECT READ_FIXED into the frame buffer itself.
            let token = self.free_tokens.pop().expect("checked by the caller");
            self.reads[token as usize] = Some(Read {
                entry: i,
                offset,
                len: n,
                source: cur,
            });
            src.reads += 1;
            self.tx.read(slot, offset, lease, want as u32, token);
            return Ok(());
        }
        // Every slot busy: read here, into the same buffer.
        let got = read_full(&src.file, &mut payload_mut(&mut lease)[..want], offset, n);
        self.block_read(
            cur,
            Block {
                entry: i,
                offset,
                len: n,
            },
            got.map(|g| g as i64),
            lease,
        );
        Ok(())
    }

    /// Queue a hole block (no payload) of entry `i`, `n` bytes at `offset`;
    /// `expected`: the data bytes the total counted in it (zeros left out
    /// with `--sparse`).
    pub(super) fn queue_hole(
        &mut self,
        i: usize,
        offset: u64,
        n: usize,
        expected: u64,
        lease: Lease,
    ) {
        let h = FrameHeader::hole(&self.params.key, i as u32, offset);
        let d = self.digests.entry(i).or_default();
        *d = digest_add(*d, zero_terms(offset, n as u64));
        let r = Sent {
            entry: i as u32,
            offset,
            len: n as u32,
            checksum: 0,
            hole: true,
            sparse: false,
            wire: 0,
            end: 0,
        };
        self.make_ready(lease, h, r);
        self.counters.add_unsent(expected);
    }

    /// Reads that finished in the ring.
    pub(super) fn take_reads(&mut self) -> Result<(), SessionError> {
        while let Some((token, result, lease)) = self.tx.take_read() {
            let r = self.reads[token as usize].take().expect("a read in flight");
            self.free_tokens.push(token);
            self.sources[r.source].reads -= 1;
            let got = if result < 0 {
                Err(std::io::Error::from_raw_os_error(-result))
            } else {
                Ok(i64::from(result))
            };
            let b = Block {
                entry: r.entry,
                offset: r.offset,
                len: r.len,
            };
            self.block_read(r.source, b, got, lease);
        }
        Ok(())
    }

    /// A block was read into `lease` (`got` bytes, or why not): queue it,
    /// or drop its file when it could not be read whole or the file
    /// changed before its last block.
    pub(super) fn block_read(
        &mut self,
        k: usize,
        b: Block,
        got: std::io::Result<i64>,
        mut lease: Lease,
    ) {
        if self.work.is_dropped(b.entry) && !self.sources[k].dropped {
            // Another lane dropped the file (and said so).
            self.sources[k].dropped = true;
            self.sources[k].next = self.sources[k].end;
        }
        if self.refused_here(k) || self.sources[k].dropped {
            self.tx.give_back(lease);
            return;
        }
        let why = match got {
            Err(e) => Some(format!("read error: {e}")),
            Ok(g) if (g as usize) < b.len => {
                Some("changed during the send (it is shorter than when the send began)".into())
            }
            Ok(_) => None,
        };
        if let Some(why) = why {
            self.tx.give_back(lease);
            self.drop_source(k, why);
            return;
        }
        // Before a file's last block goes, the file must still be what the
        // manifest said: the receiver finishes it on that block.
        let end = self.sources[k].file_end;
        if end.is_some_and(|e| b.offset + b.len as u64 == e.size) && !self.unchanged(k) {
            self.tx.give_back(lease);
            return;
        }
        let data = &payload_mut(&mut lease)[..b.len];
        // A growing file's blocks all go as data (see `add_source`).
        let zeros = self.params.zeros && !self.is_growing(b.entry);
        let extents = self.sources[k].extents.as_ref();
        let map = map_of(b.offset, data, extents, zeros);
        // The data the total counted in this block (a source's holes it
        // never counted).
        let end = b.offset + b.len as u64;
        let expected = extents.map_or(b.len as u64, |e| {
            e.data_bytes(b.offset, end).min(b.len as u64)
        });
        if map.as_ref().is_some_and(|m| m.present() == 0) {
            // Nothing but zeros the source does not hold (or, with
            // --sparse, zeros at all): a hole.
            self.queue_hole(b.entry, b.offset, b.len, expected, lease);
            return;
        }
        let (h, r, terms) = frame_block(&self.params.key, b, map, &mut lease);
        let d = self.digests.entry(b.entry).or_default();
        *d = digest_add(*d, terms);
        self.make_ready(lease, h, r);
        self.counters.add(r.data_bytes(), 1);
        self.counters
            .add_unsent(expected.saturating_sub(r.data_bytes()));
    }

    /// Whether source `k` still has the size and mtime of the manifest;
    /// drops it (reported as changed) when not.
    pub(super) fn unchanged(&mut self, k: usize) -> bool {
        let src = &self.sources[k];
        let Some(end) = src.file_end.or_else(|| self.work.end_of(src.entry)) else {
            return true;
        };
        match check_unchanged(&src.file, end, self.work.ctime_of(src.entry)) {
            Ok(()) => true,
            Err(why) => {
                self.drop_source(k, why.to_string());
                false
            }
        }
    }

    /// Close sources that are read through with no read in flight (all of
    /// them at the `end`), announcing the digest of each that is complete
    /// and unchanged. Indexes stay stable for reads in flight and `current`.
    pub(super) fn close_sources(&mut self, end: bool) -> Result<(), SessionError> {
        let mut k = 0;
        while k < self.sources.len() {
            let f = &self.sources[k];
            let keep = f.reads > 0 || !f.read_through() || (Some(k) == self.current && !end);
            if keep {
                k += 1;
                continue;
            }
            self.piece_read(k);
            if let Some(slot) = self.sources[k].slot {
                self.tx.detach_file(slot);
            }
            self.sources.swap_remove(k);
            let moved = self.sources.len();
            if self.current == Some(k) {
                self.current = None;
            } else if self.current == Some(moved) {
                self.current = Some(k);
            }
            for r in self.reads.iter_mut().flatten() {
                if r.source == moved {
                    r.source = k;
                }
            }
        }
        Ok(())
    }

    /// Source `k`'s piece is read through: its digest terms go to the
    /// work's, and the lane that reads a file's last piece announces the
    /// file's digest, when the file is unchanged and was not dropped.
    pub(super) fn piece_read(&mut self, k: usize) {
        let i = self.sources[k].entry;
        let terms = self.digests.remove(&i).unwrap_or_default();
        if self.sources[k].dropped || self.work.is_dropped(i) {
            return;
        }
        // Every piece, read through, must find the file as it was scanned
        // (its ctime too): a change during any piece's read, whatever
        // lane read the others, is never part of a digest announced.
        if !self.is_growing(i) && !self.unchanged(k) {
            return;
        }
        self.work.add_digest(i, terms);
        if let Some(digest) = self.work.piece_done(i) {
            if self.is_growing(i) {
                // Checked against the file as it ended, by its follower.
                self.work.finish_growing(i, digest);
            } else {
                if let Some(acks) = self.ledger.acked {
                    acks.ours(i as u32, digest);
                }
                self.announce.digest(i as u32, digest);
            }
        }
    }
}

/// Read record `r`'s block again into `lease`; its header, when the data
/// still has the checksum it had (a sparse block packed again: its holes
/// found anew, with `params.zeros` its zeros too), checksummed with
/// `params.key`; `direct`: `file` was opened with O_DIRECT.
pub(super) fn reread(
    file: &File,
    direct: bool,
    r: &Sent,
    params: &PushParams,
    lease: &mut Lease,
) -> Option<FrameHeader> {
    let n = r.len as usize;
    let want = if direct {
        crate::datapath::direct::padded(n)
    } else {
        n
    };
    let got = read_full(file, &mut payload_mut(lease)[..want], r.offset, n).ok()?;
    if got < n {
        return None;
    }
    let extents = r
        .sparse
        .then(|| Extents::of(file, r.offset, r.offset + n as u64));
    let data = &payload_mut(lease)[..n];
    let map = match r.sparse {
        true => map_of(r.offset, data, extents.as_ref(), params.zeros).filter(|m| m.present() > 0),
        false => None,
    };
    let b = Block {
        entry: r.entry as usize,
        offset: r.offset,
        len: n,
    };
    let (h, again, _) = frame_block(&params.key, b, map, lease);
    (h.checksum == r.checksum && again.sparse == r.sparse).then_some(h)
}

/// Checksum a block read into `lease`; with a `map`, pack it as a sparse
/// frame (only the pieces the map keeps, then the map). Returns its frame
/// header, with a checksum made with `key` over the whole block, the
/// record that lets it go again should its stream be lost, and the
/// block's digest terms (for its file's digest).
pub(super) fn frame_block(
    key: &FrameKey,
    b: Block,
    map: Option<Map>,
    lease: &mut Lease,
) -> (FrameHeader, Sent, u64) {
    let (terms, keyed) = frame_terms(key, b.offset, &payload_mut(lease)[..b.len]);
    let plain = FrameHeader {
        flags: 0,
        file_index: b.entry as u32,
        length: b.len as u32,
        span: 0,
        offset: b.offset,
        checksum: frame_checksum(key, b.entry as u32, b.offset, b.len as u32, keyed),
    };
    let h = match &map {
        Some(m) => plain.packed(crate::protocol::sparse::pack(payload_mut(lease), m)),
        None => plain,
    };
    let r = Sent {
        entry: b.entry as u32,
        offset: b.offset,
        len: b.len as u32,
        checksum: h.checksum,
        hole: false,
        sparse: map.is_some(),
        wire: h.length,
        end: 0,
    };
    (h, r, terms)
}

/// A source read through must still have the size and mtime the manifest
/// announced, and the ctime it was scanned with (`ctime`, where known): a
/// file still being written, or rewritten in place with its mtime put
/// back, is reported, not sent half-old.
pub(in crate::session) fn check_unchanged(
    file: &File,
    end: End,
    ctime: Option<(i64, u32)>,
) -> Result<(), Unsendable> {
    let End {
        size,
        mtime_s,
        mtime_ns,
    } = end;
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata().map_err(Unsendable::Stat)?;
    if m.len() != size {
        return Err(Unsendable::Resized {
            was: size,
            now: m.len(),
        });
    }
    if m.mtime() != mtime_s || m.mtime_nsec() as u32 != mtime_ns {
        return Err(Unsendable::Modified);
    }
    if ctime.is_some_and(|c| c != (m.ctime(), m.ctime_nsec() as u32)) {
        return Err(Unsendable::Touched);
    }
    Ok(())
}

/// Whether `[offset, offset + len)` of `file` is all data on disk (no
/// hole: a growing file's blocks a writer has not landed yet are holes).
pub(super) fn on_disk(file: &File, offset: u64, len: u64) -> bool {
    match sys::seek_hole(file, offset) {
        Ok(Some(hole)) => hole >= offset + len,
        Ok(None) => false,
        // No SEEK_HOLE here: the size says it.
        Err(_) => file.metadata().is_ok_and(|m| m.len() >= offset + len),
    }
}

/// Read at least `n` bytes at `offset` into `buf` (up to its length);
/// returns how many arrived (fewer than `n` only at end of file).
pub(super) fn read_full(
    file: &File,
    buf: &mut [u8],
    offset: u64,
    n: usize,
) -> std::io::Result<usize> {
    let mut got = 0;
    while got < n {
        let r = file.read_at(&mut buf[got..], offset + got as u64)?;
        if r == 0 {
            break;
        }
        got += r;
    }
    Ok(got)
}
