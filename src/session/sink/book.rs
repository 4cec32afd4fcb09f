//! The file table of a receive, shared by its lanes under one lock.
//!
//! Lanes check every frame's checksum (and open sealed ones) on their own
//! thread, then take the lock for the few steps that touch the table: the
//! frame against its file's layout and the blocks already seen, the part
//! file opened, the write noted in flight, and when the write is done the
//! block marked and the file handed on. The session's control thread
//! takes the same lock for the sender's digests and drops, journals and
//! the finalizers' results. A part is never closed while a write of it is
//! in flight (from any lane), so a descriptor a lane registered stays the
//! file's until the lane sees it opened anew.

use std::collections::{HashSet, VecDeque};
use std::sync::{mpsc, Mutex, MutexGuard};
use std::time::Instant;

use crate::datapath::beneath::Root;
use crate::datapath::net::{payload, HEADROOM};
use crate::datapath::{DirectMode, Lease};
use crate::protocol::control::ErrorCode;
use crate::protocol::frame::{
    payload_checksum, zero_terms, FrameHeader, FrameKey, FLAG_SEALED, FRAME_HEADER_LEN,
};
use crate::protocol::manifest::{Entry, EntryKind};
use crate::protocol::sparse;

use super::book_follow::{grow_for, show_live};
use super::commit::{FinalJob, JournalJob, Outcome};
use super::file::{FileState, RecvFile};
use super::incoming::Incoming;
use super::rules::Rules;
use crate::session::SessionError;

/// Complete files waiting for a finalizer, at most: an eighth of the
/// descriptors the process may hold (each holds its part open until it
/// is committed), within 16..=256. The more wait, the larger the batches
/// the finalizers commit together (see `batch`): 20,000 files of 4 KiB
/// into a fresh ext4, 64 waiting at most: 4,700 files/s; 256: 5,400-6,900.
pub(in crate::session) fn finalize_backlog_max() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        let nofile = crate::datapath::sys::nofile_limit();
        (nofile / 8).clamp(16, 256) as usize
    })
}

/// Part files one session holds open at once (descriptors).
pub(super) const OPEN_PARTS_MAX: usize = 128;

/// Work for the finalizer threads.
pub(in crate::session) enum Job {
    Finish(FinalJob),
    Journal(JournalJob),
}

pub(in crate::session) enum JobDone {
    /// A file finished, or why not (with its entry).
    Finished(Result<Outcome, (u32, SessionError)>),
    Journaled(u32, Result<u64, SessionError>),
}

/// What the receive counted, handed back to the `Incoming` when it ends.
#[derive(Default)]
pub(in crate::session) struct Tally {
    pub(in crate::session) done_files: usize,
    pub(in crate::session) bytes: u64,
    /// Payload bytes whose writes completed (what the progress shows:
    /// moved and written, not only received).
    pub(in crate::session) written: u64,
    pub(in crate::session) skipped: Vec<crate::session::link::refused::Refused>,
    pub(in crate::session) rejected: Vec<u32>,
    pub(in crate::session) lost_streams: Vec<String>,
    pub(in crate::session) journal_bytes: u64,
    pub(in crate::session) summary: Option<(u64, u64, bool)>,
    /// Entries a follow added, after the manifest's.
    pub(in crate::session) added: Vec<Entry>,
    /// Directories a follow changed, and their mtimes at its end (one
    /// each: the last said).
    pub(in crate::session) dir_times: std::collections::HashMap<u32, (i64, u32)>,
    /// Bytes the files' data was counted at that did not come as payload
    /// (see `Landing::unsent`), over the files finished or dropped.
    pub(in crate::session) unsent: u64,
    /// Files this side refused while the data came (a link planted in a
    /// path, a part replaced), not told to the sender yet.
    pub(in crate::session) refused_now: Vec<crate::session::link::refused::Refused>,
    /// Every file refused so (its entry): what the sender says of it
    /// before it heard (its digest, its own skip) is no fault.
    pub(in crate::session) refused_here: HashSet<u32>,
}

/// The table of files being received and what is in hand for them.
pub(in crate::session) struct Book<'s> {
    pub(in crate::session) root: &'s Root,
    pub(super) direct: DirectMode,
    pub(super) rules: &'s Rules,
    pub(in crate::session) block: u64,
    pub(super) files: &'s mut Vec<Option<Box<RecvFile>>>,
    /// The destination, and the manifest's entries (a follow's added ones
    /// are checked against them).
    pub(super) dest: &'s str,
    pub(super) manifest: &'s [Entry],
    /// Paths of the entries, once a follow first adds one.
    pub(super) paths: Option<HashSet<String>>,
    /// A follow may add entries yet (until its sender's `AddedEnd`), or
    /// a streamed push's walk goes on.
    pub(in crate::session) adding: bool,
    /// How the manifest was resumed (a streamed push's windows are so
    /// too, by stamps only).
    pub(super) resume: Option<super::rules::Resume>,
    /// The directories the manifest's preparation made (and its windows').
    pub(super) made: &'s mut super::incoming::Made,
    /// Files let go once committed (a streamed push's).
    pub(super) settled: &'s mut super::book_stream::Settled,
    /// Bytes of block tables its growing files may still add.
    pub(super) growth_left: u64,
    pub(super) jobs: mpsc::Sender<Job>,
    /// Jobs handed to the finalizers and not yet back.
    pub(in crate::session) pending: usize,
    /// Files with blocks written since their last journal.
    pub(super) dirty: Vec<usize>,
    pub(super) last_sweep: Instant,
    /// Files still receiving or finishing.
    pub(in crate::session) remaining: usize,
    /// Parts open now, in the order they were opened (for closing idle ones).
    pub(super) open_parts: usize,
    pub(super) open_order: VecDeque<usize>,
    pub(in crate::session) tally: Tally,
}

/// The book, locked (a lane that panicked holding it left it as it was:
/// the session fails on that lane's panic anyway).
pub(in crate::session) fn lock<'a, 's>(book: &'a Mutex<Book<'s>>) -> MutexGuard<'a, Book<'s>> {
    book.lock().unwrap_or_else(|p| p.into_inner())
}

/// What to do with a frame that fits its file.
pub(in crate::session) enum Accepted {
    /// A hole: nothing to write; its digest terms.
    Hole { terms: u64 },
    /// A block that arrived before (a stream was lost and the sender sent
    /// its frames again), or of a file no longer received: dropped.
    Drop,
    /// Write the payload at the frame's offset.
    Data { terms: u64 },
}

/// A frame's checksum (or a hole's) under `key`, checked on the lane that
/// received it, before the book is locked: the payload's digest terms, or
/// `None` for a hole (whose terms depend on its file's size).
pub(in crate::session) fn verify(
    header: &mut FrameHeader,
    lease: &mut Lease,
    key: &FrameKey,
) -> Result<Option<u64>, SessionError> {
    let malformed = |m: String| SessionError::local(ErrorCode::Malformed, m);
    if header.is_hole() {
        header
            .check_hole(key)
            .map_err(|e| malformed(e.to_string()))?;
        return Ok(None);
    }
    if header.is_sparse() {
        unpack_sparse(header, lease).map_err(|why| {
            malformed(format!(
                "sparse frame for file {} at offset {}: {why}",
                header.file_index, header.offset
            ))
        })?;
        if header.flags & FLAG_SEALED != 0 {
            // Opened and authenticated (`NetReceiver::unseal`): the block's
            // checksum is made here, from the block rebuilt.
            let block = payload(lease, header);
            header.checksum = payload_checksum(key, header.file_index, header.offset, block);
        }
    }
    header
        .check_payload(key, payload(lease, header))
        .map(Some)
        .map_err(|e| malformed(e.to_string()))
}

/// Rebuild a sparse frame's block in its buffer: the payload unpacked to
/// the whole span (absent pieces zeros, so its checksum is checked as a
/// plain block's), the map kept at the start of the headroom for its
/// writes ([`sparse_map`]), the header's length now the block's.
pub(super) fn unpack_sparse(
    header: &mut FrameHeader,
    lease: &mut Lease,
) -> Result<(), &'static str> {
    let span = header.span as usize;
    let (head, room) = lease.as_mut_slice().split_at_mut(HEADROOM);
    // Room for the span and an O_DIRECT write's padding.
    if crate::datapath::direct::padded(span) > room.len() {
        return Err("its block is larger than this session's frames");
    }
    let map = sparse::unpack(room, span, header.length as usize)?;
    head[..map.bytes().len()].copy_from_slice(map.bytes());
    header.length = header.span;
    Ok(())
}

/// The map of a sparse frame of `span` bytes [`verify`] unpacked (`None`
/// for one it refused: its buffer holds no map of its own).
pub(in crate::session) fn sparse_map(span: u32, lease: &Lease) -> Option<sparse::Map> {
    let span = span as usize;
    sparse::Map::from_bytes(span, &lease.as_slice()[..sparse::map_len(span)])
}

/// Bytes of the file a verified frame brings (a sparse frame's data
/// pieces; the rest of its block is holes).
pub(in crate::session) fn data_bytes(header: &FrameHeader, lease: &Lease) -> u64 {
    match header.is_sparse() {
        true => sparse_map(header.span, lease).map_or(0, |m| m.present() as u64),
        false => u64::from(header.length),
    }
}

impl<'s> Book<'s> {
    /// The book of `incoming`'s files, each handed to the finalizers
    /// (`jobs`) once written and agreed on.
    pub(in crate::session) fn new(incoming: &'s mut Incoming, jobs: mpsc::Sender<Job>) -> Self {
        let Incoming {
            root,
            direct,
            rules,
            block,
            files,
            dest,
            entries,
            resume,
            made,
            settled,
            ..
        } = incoming;
        let rules: &Rules = rules;
        // (Links name their first file's state when the session ends.)
        settled.on = rules.stream && !entries.iter().any(|e| e.kind == EntryKind::HardLink);
        Book {
            root,
            direct: *direct,
            rules,
            block: *block,
            remaining: files
                .iter()
                .flatten()
                .filter(|f| f.state == FileState::Receiving)
                .count(),
            open_parts: files.iter().flatten().filter(|f| f.part.is_some()).count(),
            open_order: VecDeque::new(),
            files,
            dest,
            manifest: entries,
            paths: None,
            adding: rules.follow || rules.stream,
            resume: *resume,
            made,
            settled,
            growth_left: match rules.follow {
                true => super::file::FOLLOW_BITMAP_BYTES,
                false => 0,
            },
            jobs,
            pending: 0,
            dirty: Vec::new(),
            last_sweep: Instant::now(),
            tally: Tally::default(),
        }
    }

    /// Entries below which all are settled, when that moved (a streamed
    /// push's: see `Settled`).
    pub(in crate::session) fn settled_upto(&mut self) -> Option<u32> {
        self.settled.advance(self.files)
    }

    /// What the receive counted, once it is over.
    pub(in crate::session) fn into_tally(self) -> Tally {
        self.tally
    }

    pub(in crate::session) fn file(&mut self, index: usize) -> &mut RecvFile {
        self.files[index].as_mut().expect("frames name files")
    }

    /// As many files wait for the finalizers as may: lanes take no more
    /// frames until some are done (each holds a descriptor).
    pub(in crate::session) fn backlogged(&self) -> bool {
        self.pending >= finalize_backlog_max()
    }

    /// Whether file `index` is still being received (blocks may come).
    pub(in crate::session) fn receiving(&self, index: usize) -> bool {
        self.files[index]
            .as_ref()
            .is_some_and(|f| f.state == FileState::Receiving)
    }

    /// Files are written and wait only for the sender's digest.
    pub(in crate::session) fn awaits_peer(&self) -> bool {
        self.files
            .iter()
            .flatten()
            .any(|f| f.state == FileState::Receiving && f.is_written() && f.sender_digest.is_none())
    }

    /// Files written whole that still wait (for the sender's digest).
    pub(in crate::session) fn written_waiting(&self) -> usize {
        self.files
            .iter()
            .flatten()
            .filter(|f| f.state == FileState::Receiving && f.is_written())
            .count()
    }

    /// A frame whose checksum the lane found good (`data_terms`: its
    /// payload's terms, `None` for a hole): checked against the file it
    /// names (block layout, duplicates), marked seen, and its part opened
    /// when it is to be written.
    pub(in crate::session) fn accept(
        &mut self,
        header: &FrameHeader,
        data_terms: Option<u64>,
    ) -> Result<Accepted, SessionError> {
        let (block, growth) = (self.block, &mut self.growth_left);
        if self.settled.has(header.file_index as usize) {
            // Committed and let go: a block that came again.
            return Ok(Accepted::Drop);
        }
        let a = accept_frame(self.files, block, growth, header, data_terms)?;
        match self.ensure_open(header.file_index as usize, &a)? {
            true => Ok(a),
            // Refused now: its frames go nowhere.
            false => Ok(Accepted::Drop),
        }
    }

    /// A hole frame accepted: nothing to write (a continued part's old
    /// bytes there are cleared). Returns the file, now with a block more.
    /// Returns the entry and the hole's length.
    pub(in crate::session) fn hole(
        &mut self,
        header: &FrameHeader,
        terms: u64,
    ) -> Result<(usize, u64), SessionError> {
        let (index, block) = (header.file_index as usize, self.block);
        let f = self.file(index);
        let len = (f.size - header.offset).min(block);
        if f.stale {
            let part = f.part.as_ref().expect("opened when accepted");
            crate::datapath::sys::zero_range(part, header.offset, len)
                .map_err(|e| SessionError::io(format!("clearing {}", f.final_rel), e))?;
        }
        f.mark_written(header.offset / block, len, terms, FRAME_HEADER_LEN as u64);
        Ok((index, len))
    }

    /// A write of a lane finished (`token`: file and block; `result`: the
    /// bytes written of `len`, or a negative errno; `wire`: the payload
    /// bytes its frame brought, when not the block's).
    pub(in crate::session) fn written(
        &mut self,
        token: u64,
        len: u32,
        result: i32,
        wire: Option<u64>,
    ) -> Result<usize, SessionError> {
        let (index, block_no) = ((token >> 32) as usize, token & 0xFFFF_FFFF);
        let (block, live) = (self.block, self.rules.live_parts);
        let f = self.file(index);
        let at = f
            .writing
            .iter()
            .position(|w| w.0 == block_no)
            .expect("a write in flight");
        let (_, terms) = f.writing.swap_remove(at);
        if result < 0 || (result as u32) < len {
            let e = if result < 0 {
                std::io::Error::from_raw_os_error(-result)
            } else {
                std::io::Error::new(
                    std::io::ErrorKind::WriteZero,
                    "short write (no space left?)",
                )
            };
            return Err(SessionError::io(format!("writing {}", f.final_rel), e));
        }
        let len = (f.size - block_no * block).min(block);
        let wire = wire.unwrap_or(len);
        f.payload += wire;
        f.mark_written(block_no, len, terms, FRAME_HEADER_LEN as u64 + wire);
        if live {
            show_live(f, block);
        }
        self.tally.written += wire;
        Ok(index)
    }

    /// A file got blocks written: finish it when whole and agreed on, else
    /// remember it for its journal.
    pub(in crate::session) fn written_more(&mut self, index: usize) -> Result<(), SessionError> {
        let f = self.file(index);
        if f.state == FileState::Skipped {
            if f.writing.is_empty() {
                self.close(index);
            }
            return Ok(());
        }
        if f.state != FileState::Receiving {
            return Ok(());
        }
        if f.is_written() {
            return self.try_finish(index);
        }
        if f.dirty && !self.dirty.contains(&index) {
            self.dirty.push(index);
        }
        Ok(())
    }

    /// Close a file's part while it waits or is dropped (no write of it
    /// is in flight).
    pub(super) fn close(&mut self, index: usize) {
        let root = self.root;
        let f = self.file(index);
        let Some(part) = f.part.take() else { return };
        // Closed with no name, its bytes would be gone: named first, or
        // kept open.
        if f.unnamed
            && f.state == FileState::Receiving
            && !super::part::name_unnamed(root, f, &part)
        {
            f.part = Some(part);
            return;
        }
        // A lane's ring may hold this opening a while yet (its registered
        // slot): a piece's range is let go of now, not when that closes.
        if f.piece.is_some() {
            let (start, end) = f.span;
            let _ = crate::datapath::sys::unlock_range(&part, start, end - start);
        }
        self.open_parts -= 1;
    }

    /// The part of file `index` open for the frame just accepted (nothing
    /// for a frame that is dropped). At most [`OPEN_PARTS_MAX`] parts of a
    /// session are open at once: past that, the one idle longest is closed
    /// (and opened again, by name and inode, when its next block comes), so
    /// a sender starting many files at once holds no more descriptors.
    pub(super) fn ensure_open(&mut self, index: usize, a: &Accepted) -> Result<bool, SessionError> {
        if matches!(a, Accepted::Drop) || self.file(index).part.is_some() {
            return Ok(true);
        }
        if self.open_parts >= OPEN_PARTS_MAX {
            self.close_idle_part();
        }
        let f = self.files[index].as_mut().expect("files");
        let opened = super::part::open_part(self.root, self.direct, self.rules, f)
            .and_then(|()| f.write_own(self.root, &self.rules.secret));
        match opened {
            Err(e) if e.is_entry_fault() => {
                self.refuse_now(index, &e);
                return Ok(false);
            }
            other => other?,
        }
        self.open_parts += 1;
        self.open_order.push_back(index);
        Ok(true)
    }

    /// File `index` cannot land (`e`, its entry's fault alone): it is
    /// skipped from now on, its frames dropped, the sender told, and the
    /// session goes on.
    pub(super) fn refuse_now(&mut self, index: usize, e: &SessionError) {
        let f = self.file(index);
        if matches!(f.state, FileState::Receiving | FileState::Finishing) {
            let receiving = f.state == FileState::Receiving;
            f.state = FileState::Skipped;
            let unsent = f.data_left.saturating_sub(f.payload);
            self.remaining -= usize::from(receiving);
            self.tally.unsent += unsent;
        }
        let r = crate::session::link::refused::Refused::entry(
            index as u32,
            crate::session::link::refused::Why::fault(format!(
                "refused here while it arrived: {e}"
            )),
        );
        self.tally.skipped.push(r.clone());
        self.tally.refused_now.push(r);
        self.tally.refused_here.insert(index as u32);
    }

    /// Close the open part idle longest (no write or journal in flight).
    /// A small file written whole into a part with no name waits only for
    /// its digest, and closing it would name it: such parts are closed
    /// only when no other can be (the budget stays [`OPEN_PARTS_MAX`]).
    pub(super) fn close_idle_part(&mut self) {
        for spare_unnamed in [true, false] {
            for _ in 0..self.open_order.len() {
                let Some(i) = self.open_order.pop_front() else {
                    return;
                };
                let Some(f) = self.files[i].as_ref().filter(|f| f.part.is_some()) else {
                    continue;
                };
                let spared = spare_unnamed && f.unnamed && f.is_written();
                if f.writing.is_empty()
                    && !f.journaling
                    && f.state == FileState::Receiving
                    && !spared
                {
                    self.close(i);
                    return;
                }
                self.open_order.push_back(i);
            }
        }
    }

    /// Hand a written file to a finalizer once the sender's digest is known
    /// and no journal write of it is in flight.
    pub(super) fn try_finish(&mut self, index: usize) -> Result<(), SessionError> {
        let f = self.files[index].as_mut().expect("files");
        if f.state != FileState::Receiving
            || !f.is_written()
            || f.sender_digest.is_none()
            || f.journaling
        {
            return Ok(());
        }
        // A file whose blocks were all held, or holes, may have no part open.
        if f.part.is_none() {
            match super::part::open_to_finish(self.root, self.direct, self.rules, f) {
                Err(e) if e.is_entry_fault() => {
                    self.refuse_now(index, &e);
                    return Ok(());
                }
                other => other?,
            }
            self.open_parts += 1;
        }
        // Its room for writes in flight is done with (a tree holds many).
        f.writing = Vec::new();
        self.tally.unsent += f.data_left.saturating_sub(f.payload);
        let job = FinalJob::take(index as u32, f, self.rules);
        self.open_parts -= 1;
        self.pending += 1;
        let _ = self.jobs.send(Job::Finish(job));
        Ok(())
    }

    /// The sender's digest of entry `i`: once per file being received.
    pub(in crate::session) fn sender_digest(
        &mut self,
        i: u32,
        digest: u64,
    ) -> Result<(), SessionError> {
        if self.tally.refused_here.contains(&i) {
            return Ok(());
        }
        let f = self
            .files
            .get_mut(i as usize)
            .and_then(Option::as_mut)
            .filter(|f| f.state == FileState::Receiving && f.sender_digest.is_none())
            .ok_or_else(|| {
                SessionError::local(
                    ErrorCode::Malformed,
                    format!("a digest for entry {i}, which is no file being received (or twice)"),
                )
            })?;
        f.sender_digest = Some(digest);
        self.try_finish(i as usize)
    }
}

impl<'s> Book<'s> {
    /// The sender dropped entry `i`: stop waiting for it. Its part stays
    /// only if it holds journaled data (see `Incoming`'s drop).
    pub(in crate::session) fn skipped(
        &mut self,
        r: crate::session::link::refused::Refused,
    ) -> Result<(), SessionError> {
        let i = r.entry;
        if self.tally.refused_here.contains(&i) {
            return Ok(());
        }
        let Some(f) = self
            .files
            .get_mut(i as usize)
            .and_then(Option::as_mut)
            .filter(|f| f.state == FileState::Receiving)
        else {
            return Err(SessionError::local(
                ErrorCode::Malformed,
                format!("entry {i} skipped, which is no file being received"),
            ));
        };
        f.state = FileState::Skipped;
        let idle = f.writing.is_empty();
        self.tally.unsent += f.data_left.saturating_sub(f.payload);
        self.remaining -= 1;
        self.tally.skipped.push(r);
        if idle {
            self.close(i as usize);
        }
        Ok(())
    }
}

impl<'s> Book<'s> {
    /// A finalizer's job came back: what to tell the peer, if anything.
    pub(in crate::session) fn settle(
        &mut self,
        r: JobDone,
    ) -> Result<Option<Outcome>, SessionError> {
        self.pending -= 1;
        match r {
            JobDone::Finished(r) => {
                self.remaining -= 1;
                let outcome = match r {
                    Err((i, e)) if e.is_entry_fault() => {
                        self.refuse_now(i as usize, &e);
                        return Ok(None);
                    }
                    r => r.map_err(|(_, e)| e)?,
                };
                let (i, state) = match outcome {
                    Outcome::Committed(i, _) | Outcome::Piece(i, _) => (i, FileState::Done),
                    Outcome::Rejected(i, _) => (i, FileState::Rejected),
                };
                let rules = self.rules;
                let f = self.file(i as usize);
                f.state = state;
                super::part::release_claim(rules, f);
                match state {
                    FileState::Done => {
                        self.tally.done_files += 1;
                        self.settled.let_go(self.files, i as usize);
                    }
                    _ => self.tally.rejected.push(i),
                }
                Ok(Some(outcome))
            }
            JobDone::Journaled(i, r) => {
                let f = self.file(i as usize);
                f.journaling = false;
                match r {
                    Err(e) if e.is_entry_fault() => {
                        self.refuse_now(i as usize, &e);
                        return Ok(None);
                    }
                    r => self.tally.journal_bytes += r?,
                }
                self.file(i as usize).journaled = true;
                self.try_finish(i as usize).map(|()| None)
            }
        }
    }
}

/// Check a frame against the file it names (block layout, duplicates) and
/// mark it seen; its checksum is checked already (`data_terms`, `None` for
/// a hole). The write itself is the caller's.
pub(super) fn accept_frame(
    files: &mut [Option<Box<RecvFile>>],
    block: u64,
    growth: &mut u64,
    header: &FrameHeader,
    data_terms: Option<u64>,
) -> Result<Accepted, SessionError> {
    let malformed = |m: String| SessionError::local(ErrorCode::Malformed, m);
    let Some(Some(f)) = files.get_mut(header.file_index as usize) else {
        return Err(malformed(format!(
            "frame for entry {}, which is not a file being received",
            header.file_index
        )));
    };
    if f.growing {
        grow_for(f, block, growth, header).map_err(|e| malformed(e.to_string()))?;
    }
    FrameHeader {
        file_index: 0,
        ..*header
    }
    .check_against(&[f.size])
    .map_err(|e| malformed(format!("file {}: {e}", header.file_index)))?;
    if header.offset >= f.size {
        return Err(malformed(format!(
            "frame at offset {} is past the end of file {}",
            header.offset, header.file_index
        )));
    }
    let expected = (f.size - header.offset).min(block);
    let hole = header.is_hole();
    let covered = if hole && header.length == 0 {
        expected
    } else {
        u64::from(header.length)
    };
    if !header.offset.is_multiple_of(block) || covered != expected || (hole && header.length != 0) {
        return Err(malformed(format!(
            "frame at offset {} of file {} does not fit its block layout",
            header.offset, header.file_index
        )));
    }
    if f.piece.is_some() && (header.offset < f.span.0 || header.offset >= f.span.1) {
        return Err(malformed(format!(
            "frame at offset {} of file {} is outside the piece this session brings",
            header.offset, header.file_index
        )));
    }
    let block_no = header.offset / block;
    let (word, bit) = ((block_no / 64) as usize, 1u64 << (block_no % 64));
    if f.seen[word] & bit != 0 || f.state != FileState::Receiving {
        return Ok(Accepted::Drop);
    }
    f.seen[word] |= bit;
    Ok(match data_terms {
        // Nothing to write: the hole stays a hole (the size is set at the end).
        None => Accepted::Hole {
            terms: zero_terms(header.offset, expected),
        },
        Some(terms) => Accepted::Data { terms },
    })
}
