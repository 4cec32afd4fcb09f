//! The book's part of a `--follow` push: entries the sender adds while
//! the data comes, directories' times, a growing file's end, its blocks
//! read by others before it is committed (`user.urmove.live`).

use crate::protocol::control::ErrorCode;
use crate::protocol::frame::FrameHeader;
use crate::protocol::manifest::{check_entry, Entry, EntryKind};

use super::book::Book;
use super::file::{FileState, RecvFile};
use super::journal::Timestamp;
use crate::session::SessionError;

impl<'s> Book<'s> {
    /// Entries a follow added, numbered from `first` (the count so far):
    /// each a growing file or a directory, with a path the manifest rules
    /// allow and no entry has; directories made, files made ready for
    /// their blocks. Returns the count of entries now.
    pub(in crate::session) fn add(
        &mut self,
        first: u32,
        entries: Vec<Entry>,
    ) -> Result<u32, SessionError> {
        let bad = |m: String| SessionError::local(ErrorCode::Malformed, m);
        if !self.adding || first as usize != self.files.len() {
            return Err(bad(format!(
                "entries added from {first}, where the session has {} and {}",
                self.files.len(),
                if self.rules.follow {
                    "adds no more"
                } else {
                    "follows none"
                }
            )));
        }
        let manifest = self.manifest;
        let paths = self
            .paths
            .get_or_insert_with(|| manifest.iter().map(|e| e.path.clone()).collect());
        for e in &entries {
            let kind_ok = (e.kind == EntryKind::File && e.growing) || e.kind == EntryKind::Dir;
            if !kind_ok {
                return Err(bad(format!(
                    "{}: added, but no growing file or directory",
                    e.path
                )));
            }
            check_entry(e).map_err(|err| bad(format!("{}: {err}", e.path)))?;
            if !paths.insert(e.path.clone()) {
                return Err(bad(format!("{}: named twice", e.path)));
            }
        }
        for e in &entries {
            let f = self.prepare_added(e)?;
            self.remaining += usize::from(f.is_some());
            self.files.push(f.map(Box::new));
        }
        self.tally.added.extend(entries);
        Ok(self.files.len() as u32)
    }

    /// An added entry made ready: a directory made, a growing file's
    /// directory made and its table (its part comes with its first block).
    pub(super) fn prepare_added(&mut self, e: &Entry) -> Result<Option<RecvFile>, SessionError> {
        let rel = super::incoming::join(self.dest, &e.path);
        let dir = match e.kind {
            EntryKind::Dir => rel.as_str(),
            _ => rel.rsplit_once('/').map_or("", |(d, _)| d),
        };
        if !dir.is_empty() {
            self.root
                .mkdir_all(dir, 0o755)
                .map_err(|err| SessionError::io(rel.clone(), err))?;
        }
        let name_max = self.root.name_max(dir);
        Ok((e.kind == EntryKind::File)
            .then(|| RecvFile::new(e, rel, name_max, self.block, self.rules)))
    }

    /// The mtimes of directories a follow changed (each a directory of the
    /// manifest or added), set when the directories are settled.
    pub(in crate::session) fn dir_times(
        &mut self,
        list: Vec<(u32, i64, u32)>,
    ) -> Result<(), SessionError> {
        for &(i, _, _) in &list {
            let i = i as usize;
            let e = match i.checked_sub(self.manifest.len()) {
                None => self.manifest.get(i),
                Some(k) => self.tally.added.get(k),
            };
            if !self.adding || e.is_none_or(|e| e.kind != EntryKind::Dir) {
                return Err(SessionError::local(
                    ErrorCode::Malformed,
                    format!("a directory time for entry {i}, which is no directory followed (or after the follow's end)"),
                ));
            }
        }
        let times = list.into_iter().map(|(i, s, ns)| (i, (s, ns)));
        self.tally.dir_times.extend(times);
        Ok(())
    }

    /// A follow may add entries, or a file of it still grows.
    pub(in crate::session) fn grows(&self) -> bool {
        let growing = |f: &RecvFile| f.growing && f.state == FileState::Receiving;
        self.adding || (self.rules.follow && self.files.iter().flatten().any(|f| growing(f)))
    }

    /// The session's manifest streams (`REQ_STREAM`).
    pub(in crate::session) fn streams(&self) -> bool {
        self.rules.stream
    }

    /// The session follows growing files (`send --follow`).
    pub(in crate::session) fn follows(&self) -> bool {
        self.rules.follow
    }

    /// Growing file `i` ends at `size` bytes, modified at `mtime` (the
    /// sender's `FileEnd`): no block seen may lie past it, nor a full
    /// block where a shorter last one belongs. It is finished when every
    /// block is written and the digest agreed, as any file.
    pub(in crate::session) fn file_end(
        &mut self,
        i: u32,
        size: u64,
        mtime: Timestamp,
    ) -> Result<(), SessionError> {
        let block = self.block;
        let bad = |m: String| SessionError::local(ErrorCode::Malformed, m);
        let f = self
            .files
            .get_mut(i as usize)
            .and_then(Option::as_mut)
            .filter(|f| f.growing)
            .ok_or_else(|| bad(format!("an end for entry {i}, which is no growing file")))?;
        // The furthest block seen ends at `f.size` (a short last one, at
        // the file's end): the end cannot come before it.
        if size < f.size {
            return Err(bad(format!(
                "growing file {i} ends at {size} bytes, before blocks that came (to {})",
                f.size
            )));
        }
        // Its last blocks may still be on the way, never further than
        // frames of many streams lie apart.
        let most = crate::session::SESSION_BLOCKS_MAX.saturating_mul(block);
        if size > f.size.saturating_add(GROW_AHEAD_MAX) || size > most {
            return Err(bad(format!(
                "growing file {i} ends at {size} bytes, more than 4 GiB past its furthest block (at {})",
                f.size
            )));
        }
        if !f.size.is_multiple_of(block) && size != f.size {
            return Err(bad(format!(
                "growing file {i} ends at {size} bytes, past its short last block (at {})",
                f.size
            )));
        }
        f.grow_to(size, block, &mut self.growth_left)
            .map_err(|e| bad(e.to_string()))?;
        f.growing = false;
        f.id = super::journal::Identity {
            size,
            mtime_s: mtime.s,
            mtime_ns: mtime.ns,
            block,
        };
        f.mtime = crate::session::plan::tree::mtime_at(mtime.s, mtime.ns);
        // Blocks counted while it grew were whole; the last may be short.
        if f.is_written() {
            return self.try_finish(i as usize);
        }
        Ok(())
    }
}

/// A live part (`--live-parts`) says how far from its start it is written
/// and checked, each time that moves (a failed attribute write only
/// leaves the last one standing).
pub(super) fn show_live(f: &mut RecvFile, block: u64) {
    if !f.advance_prefix() {
        return;
    }
    let bytes = (f.prefix * block).min(f.size);
    if let Some(part) = &f.part {
        let text = bytes.to_string();
        let _ = crate::datapath::sys::set_xattr(part, super::file::LIVE_XATTR, text.as_bytes());
    }
}

/// How far past the furthest block seen a growing file's next frame may
/// reach: frames of many streams arrive out of order, but never further
/// apart than what is in flight (and a block of data must come for every
/// 2^16 bits of bitmap this lets a peer make).
pub(super) const GROW_AHEAD_MAX: u64 = 4 << 30;

/// A frame of a growing file beyond its size so far: the file grows to
/// the end of its block (a full block of data, never a hole, within
/// `growth` bytes of block tables left). A shorter block is the file's
/// last: nothing grows past it. Within the size, nothing changes.
pub(super) fn grow_for(
    f: &mut RecvFile,
    block: u64,
    growth: &mut u64,
    h: &FrameHeader,
) -> Result<(), GrowthRefused> {
    let end = h.offset.saturating_add(u64::from(h.length));
    if end <= f.size {
        return Ok(());
    }
    let at = (h.offset, h.file_index);
    let why = if h.is_hole() || !h.offset.is_multiple_of(block) {
        Some(PastEnd::HoleOrUnaligned)
    } else if h.is_sparse() {
        // A growing file grows by data only: its sender sends it no
        // sparse blocks (one of no pieces would be a hole by another name).
        Some(PastEnd::Sparse)
    } else if !f.size.is_multiple_of(block) {
        Some(PastEnd::PastShortLast)
    } else if h.offset > f.size.saturating_add(GROW_AHEAD_MAX) {
        Some(PastEnd::TooFarAhead)
    } else if end > crate::session::SESSION_BLOCKS_MAX.saturating_mul(block) {
        Some(PastEnd::TooManyBlocks)
    } else {
        None
    };
    match why {
        Some(why) => Err(GrowthRefused::Frame { at, why }),
        None => f.grow_to(end, block, growth),
    }
}

/// Why a growing file does not grow as a frame or its end asks.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GrowthRefused {
    #[error("frame at offset {} of growing file {}: {why}", at.0, at.1)]
    Frame { at: (u64, u32), why: PastEnd },
    #[error("the follow's files grew past the {mib} MiB of block tables one session keeps; use larger blocks")]
    TablesFull { mib: u64 },
}

/// What is wrong with a frame past a growing file's end.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PastEnd {
    #[error("a hole or unaligned block past its end")]
    HoleOrUnaligned,
    #[error("a sparse block past its end")]
    Sparse,
    #[error("past its short last block")]
    PastShortLast,
    #[error("more than 4 GiB past its furthest block")]
    TooFarAhead,
    #[error("past the most blocks a file may have")]
    TooManyBlocks,
}
