//! The receiving side of a transfer, shared by the daemon (push) and the
//! client (pull): prepare every entry of a manifest beneath a root, take
//! frames off the data streams into registered buffers, check each against
//! its file's block layout and checksum, write it, and finalize each file
//! (sync, mode, mtime, rename from `.urmove.part`) once complete.

use std::collections::HashMap;
use std::fs::File;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant, SystemTime};

use crate::datapath::beneath::Root;
use crate::datapath::net::{payload, NetReceiver, RecvEvent, HEADROOM};
use crate::datapath::DirectMode;
use crate::protocol::control::{ErrorCode, HaveItem, Message};
use crate::protocol::frame::{digest_add, hole_checksum, FrameHeader};
use crate::protocol::manifest::{check_entry, Entry, EntryKind, ENTRIES_MAX};

use super::conn::recv_msg;
use super::journal::{self, Identity, Journal};
use super::{SessionError, PART_SUFFIX};

/// Bytes of paths and link targets one manifest may carry.
const MANIFEST_TEXT_BYTES_MAX: u64 = 256 << 20;
/// Threads that sync and rename complete files.
const FINALIZERS: usize = 4;
/// Complete files waiting for a finalizer, at most.
const FINALIZE_BACKLOG_MAX: usize = 64;
/// Files written through the receiving ring at once (registered slots).
const FILE_SLOTS: u32 = 64;
/// A file with new blocks gets its journal rewritten this often, at most.
const JOURNAL_INTERVAL: Duration = Duration::from_secs(1);

/// How a session continues from what the receiver holds (`--resume`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Resume {
    /// With `--checksum`: the sender's content digest of each file; a
    /// finished file counts as complete only when its content matches.
    pub(crate) digests: Option<HashMap<u32, u64>>,
}

/// Read manifest parts until its end, bounded in entries (by `max` and
/// the protocol's own bound).
pub(crate) fn recv_manifest(
    s: &mut super::conn::Control,
    max: u32,
) -> Result<Vec<Entry>, SessionError> {
    let max = max.min(ENTRIES_MAX);
    let mut entries: Vec<Entry> = Vec::new();
    let mut text_bytes = 0u64;
    loop {
        match recv_msg(s)? {
            Message::Manifest(part) => {
                text_bytes += part
                    .iter()
                    .map(|e| (e.path.len() + e.link.as_ref().map_or(0, String::len)) as u64)
                    .sum::<u64>();
                if text_bytes > MANIFEST_TEXT_BYTES_MAX {
                    return Err(SessionError::local(
                        ErrorCode::TooLarge,
                        "manifest paths exceed 256 MiB",
                    ));
                }
                if entries.len() as u64 + part.len() as u64 > u64::from(max) {
                    return Err(SessionError::local(
                        ErrorCode::TooLarge,
                        format!("the manifest has more than {max} entries, the limit here"),
                    ));
                }
                entries.extend(part);
            }
            Message::ManifestEnd => return Ok(entries),
            _ => {
                return Err(SessionError::local(
                    ErrorCode::Malformed,
                    "expected the manifest",
                ))
            }
        }
    }
}

/// One file being received.
struct RecvFile {
    /// Open while blocks arrive (opened on the first, closed when done), so
    /// a tree of 100,000 files does not hold 100,000 descriptors.
    part: Option<File>,
    part_rel: String,
    final_rel: String,
    size: u64,
    mode: u32,
    mtime: SystemTime,
    direct: bool,
    id: Identity,
    /// One bit per block: which blocks arrived (a second copy is dropped).
    seen: Vec<u64>,
    /// One bit per block: which blocks are written (what a journal names).
    written: Vec<u64>,
    /// Bytes written (or holes).
    received: u64,
    /// Digest over the written blocks.
    digest: u64,
    done: bool,
    /// Registered-file slot in the receiving ring while blocks are written.
    slot: Option<u32>,
    /// Writes in flight: (block, checksum), added to the digest when done.
    writing: Vec<(u64, u64)>,
    /// Blocks written since the last journal.
    dirty: bool,
    last_journal: Instant,
    /// A journal write is in flight: the file is finished after it.
    journaling: bool,
    finish_after_journal: bool,
}

impl RecvFile {
    fn mark_written(&mut self, block_no: u64, len: u64, checksum: u64) {
        if self.received == 0 {
            // The journal clock starts with the first block: a file that
            // arrives within a second never gets a journal.
            self.last_journal = Instant::now();
        }
        let (w, bit) = ((block_no / 64) as usize, 1u64 << (block_no % 64));
        self.written[w] |= bit;
        self.received += len;
        self.digest = digest_add(self.digest, checksum);
        self.dirty = true;
    }

    fn journal(&self, part_ino: u64) -> Journal {
        Journal {
            id: self.id,
            part_ino,
            digest: self.digest,
            blocks: self.written.clone(),
        }
    }
}

/// Bytes covered by the set bits of `blocks` in a file of `size`.
fn covered(blocks: &[u64], size: u64, block: u64) -> u64 {
    let n = size.div_ceil(block);
    (0..n)
        .filter(|b| blocks[(b / 64) as usize] & (1 << (b % 64)) != 0)
        .map(|b| (size - b * block).min(block))
        .sum()
}

/// The digest of `rel` when it is already complete for entry `e`: its size,
/// mtime and stamped digest match, or with `--checksum` its content matches
/// the sender's (its mode and mtime are then brought in line).
fn already_complete(
    root: &Root,
    rel: &str,
    e: &Entry,
    id: &Identity,
    sender_digest: Option<Option<u64>>,
    tick: &mut dyn FnMut(),
) -> Option<u64> {
    let meta = root.symlink_metadata(rel).ok()?;
    if !meta.is_file() || meta.len() != e.size {
        return None;
    }
    let f = root.open_file(rel, libc::O_RDONLY, 0).ok()?;
    match sender_digest {
        None => journal::stamped_digest(&f, id),
        Some(want) => {
            let got = journal::content_digest(&f, e.size, id.block, tick).ok()?;
            if Some(got) != want {
                return None;
            }
            use std::os::unix::fs::PermissionsExt;
            let _ = f.set_permissions(std::fs::Permissions::from_mode(e.mode));
            let _ = f.set_times(std::fs::FileTimes::new().set_modified(mtime_of(e)));
            Some(got)
        }
    }
}

pub(crate) fn join(dest: &str, path: &str) -> String {
    if dest.is_empty() {
        path.to_string()
    } else {
        format!("{dest}/{path}")
    }
}

fn mtime_of(e: &Entry) -> SystemTime {
    let d = Duration::new(e.mtime_s.unsigned_abs(), e.mtime_ns);
    if e.mtime_s >= 0 {
        SystemTime::UNIX_EPOCH + d
    } else {
        SystemTime::UNIX_EPOCH - d
    }
}

/// Called at least every second while data arrives, with each stream's
/// delivered bytes and whether a receive waits on it (for heartbeats).
pub(crate) type Tick<'a> = dyn FnMut(&[(u64, bool)]) -> Result<(), SessionError> + 'a;

/// A manifest being received beneath a root.
pub(crate) struct Incoming {
    root: Root,
    dest: String,
    entries: Vec<Entry>,
    files: Vec<Option<RecvFile>>,
    block: u64,
    direct: DirectMode,
    /// Files finished while preparing (empty, or every block journaled):
    /// (entry, digest), to acknowledge.
    done_at_start: Vec<(u32, u64)>,
    /// What the receiver holds already, for the sender (resume).
    have: Vec<HaveItem>,
    /// Files already complete under their final names (resume).
    complete_before: Vec<u32>,
    done_files: usize,
    bytes: u64,
    lost_streams: Vec<String>,
}

impl Incoming {
    /// Check every entry, then create directories, symlinks and `.part`
    /// files (empty files are finished at once) before any byte arrives.
    pub(crate) fn prepare(
        root: Root,
        dest: String,
        entries: Vec<Entry>,
        block: u64,
        direct: DirectMode,
        resume: Option<&Resume>,
        tick: &mut dyn FnMut(),
    ) -> Result<Self, SessionError> {
        let blocks: u64 = entries
            .iter()
            .filter(|e| e.kind == EntryKind::File)
            .map(|e| e.size.div_ceil(block))
            .fold(0u64, u64::saturating_add);
        if blocks > super::SESSION_BLOCKS_MAX {
            return Err(SessionError::local(
                ErrorCode::TooLarge,
                format!("the manifest holds {blocks} blocks, more than one session takes; use larger blocks or split it"),
            ));
        }
        let mut paths = std::collections::HashSet::with_capacity(entries.len());
        for e in &entries {
            if !paths.insert(e.path.as_str()) {
                return Err(SessionError::local(
                    ErrorCode::BadRequest,
                    format!("{}: named twice in the manifest", e.path),
                ));
            }
        }
        for e in &entries {
            check_entry(e).map_err(|err| {
                SessionError::local(ErrorCode::PathRefused, format!("{}: {err}", e.path))
            })?;
        }
        if !dest.is_empty() {
            root.mkdir_all(&dest, 0o755)
                .map_err(|e| SessionError::io(dest.clone(), e))?;
        }
        let mut files: Vec<Option<RecvFile>> = Vec::with_capacity(entries.len());
        let mut done_at_start = Vec::new();
        let mut have = Vec::new();
        let mut complete_before = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            tick();
            let rel = join(&dest, &e.path);
            match e.kind {
                EntryKind::Dir => {
                    root.mkdir_all(&rel, 0o755)
                        .map_err(|err| SessionError::io(rel.clone(), err))?;
                    files.push(None);
                }
                EntryKind::Symlink => {
                    let _ = root.unlink(&rel);
                    let target = e.link.as_deref().unwrap_or_default();
                    root.symlink(target, &rel)
                        .map_err(|err| SessionError::io(rel.clone(), err))?;
                    files.push(None);
                }
                EntryKind::File => {
                    let part_rel = format!("{rel}{PART_SUFFIX}");
                    let id = Identity::of(e, block);
                    let words = e.size.div_ceil(block).div_ceil(64) as usize;
                    let mut f = RecvFile {
                        part: None,
                        part_rel,
                        final_rel: rel,
                        size: e.size,
                        mode: e.mode,
                        mtime: mtime_of(e),
                        direct: false,
                        id,
                        seen: vec![0; words],
                        written: vec![0; words],
                        received: 0,
                        digest: 0,
                        done: false,
                        slot: None,
                        writing: Vec::new(),
                        dirty: false,
                        last_journal: Instant::now(),
                        journaling: false,
                        finish_after_journal: false,
                    };
                    if let Some(r) = resume {
                        let sender = r.digests.as_ref().map(|d| d.get(&(i as u32)).copied());
                        if let Some(digest) =
                            already_complete(&root, &f.final_rel, e, &id, sender, tick)
                        {
                            f.done = true;
                            f.digest = digest;
                            f.received = e.size;
                            have.push(HaveItem::Complete {
                                file_index: i as u32,
                                digest,
                            });
                            complete_before.push(i as u32);
                            files.push(Some(f));
                            continue;
                        }
                    }
                    let journaled = match resume {
                        Some(_) if e.size > 0 => journal::load(&root, &f.final_rel, &id),
                        _ => None,
                    };
                    // Continue the .part from its journal, or create (or
                    // empty) it now: a bad path fails before any data.
                    let opened = match journaled {
                        Some(j) => open_existing_part(&root, &f.part_rel, direct)
                            .filter(|(p, _)| j.matches(p))
                            .map(|p| (p, j)),
                        None => None,
                    };
                    match opened {
                        Some(((part, d), j)) => {
                            f.received = covered(&j.blocks, e.size, block);
                            f.seen = j.blocks.clone();
                            f.written = j.blocks.clone();
                            f.digest = j.digest;
                            f.part = Some(part);
                            f.direct = d;
                            have.push(HaveItem::Partial {
                                file_index: i as u32,
                                digest: j.digest,
                                ranges: j.ranges(),
                            });
                        }
                        None => {
                            journal::remove(&root, &f.final_rel);
                            let (part, d) = open_part(&root, &f.part_rel, direct, true)?;
                            f.direct = d;
                            f.part = (e.size == 0).then_some(part);
                        }
                    }
                    if f.received == e.size {
                        if f.part.is_none() {
                            f.part = Some(open_part(&root, &f.part_rel, direct, false)?.0);
                        }
                        let (idx, digest) = finish_file(&root, f.complete(i as u32))?;
                        done_at_start.push((idx, digest));
                    }
                    files.push(Some(f));
                }
            }
        }
        let done_files = done_at_start.len() + complete_before.len();
        Ok(Incoming {
            root,
            dest,
            entries,
            files,
            block,
            direct,
            done_at_start,
            have,
            complete_before,
            done_files,
            bytes: 0,
            lost_streams: Vec::new(),
        })
    }

    /// Files finished while preparing (empty ones, fully journaled ones):
    /// (entry, digest), to acknowledge.
    pub(crate) fn take_done_at_start(&mut self) -> Vec<(u32, u64)> {
        std::mem::take(&mut self.done_at_start)
    }

    /// What this side holds already, for the sender.
    pub(crate) fn take_have(&mut self) -> Vec<HaveItem> {
        std::mem::take(&mut self.have)
    }

    /// Files complete under their final names before any data came.
    pub(crate) fn complete_before(&self) -> &[u32] {
        &self.complete_before
    }

    /// Bytes still to come (not complete, not journaled).
    pub(crate) fn bytes_missing(&self) -> u64 {
        self.files
            .iter()
            .flatten()
            .map(|f| f.size - f.received)
            .sum()
    }

    /// Take frames from `streams` until every stream ended, calling
    /// `on_done(file_index, digest)` for each file finished, `progress`
    /// with the payload bytes of each batch, and `tick` with the bytes each
    /// stream delivered at least every second (for heartbeats). A stream that breaks is noted and the others
    /// go on (the sender re-sends what it carried); no data on any stream
    /// for `timeout` ends the session.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn receive(
        &mut self,
        streams: &[TcpStream],
        payload_max: usize,
        timeout: Duration,
        open: &super::send::Sealing,
        progress: &mut dyn FnMut(u64),
        on_done: &mut dyn FnMut(u32, u64) -> Result<(), SessionError>,
        tick: &mut Tick<'_>,
    ) -> Result<(), SessionError> {
        let fds: Vec<i32> = streams.iter().map(|st| st.as_raw_fd()).collect();
        // Buffers wait in the socket, then in the write: twice as many.
        let buf_count = super::buffer_count(streams.len(), payload_max as u32, 4, 4)?;
        let mut rx = NetReceiver::with_file_slots(&fds, buf_count, payload_max, FILE_SLOTS)?;
        rx.set_wait_limit((timeout / 4).min(Duration::from_secs(1)));
        if let Some((keys, dir)) = open {
            rx.open_with(keys, *dir);
        }
        let Incoming {
            root,
            files,
            block,
            direct,
            done_files,
            bytes,
            lost_streams,
            ..
        } = self;
        let root: &Root = root;
        // Complete files are synced and renamed by a few threads at once, so
        // many small files share journal commits instead of waiting in line;
        // the same threads write the journals of files still arriving.
        let (job_tx, job_rx) = std::sync::mpsc::channel::<Job>();
        let job_rx = std::sync::Mutex::new(job_rx);
        let (done_tx, done_rx) = std::sync::mpsc::channel::<JobDone>();
        std::thread::scope(|scope| {
            for _ in 0..FINALIZERS {
                let (job_rx, done_tx) = (&job_rx, done_tx.clone());
                scope.spawn(move || loop {
                    let job = job_rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                    match job {
                        Ok(Job::Finish(job)) => {
                            let _ = done_tx.send(JobDone::Finished(finish_file(root, job)));
                        }
                        Ok(Job::Journal(j)) => {
                            let index = j.index;
                            let _ = done_tx.send(JobDone::Journaled(index, write_journal(root, j)));
                        }
                        Err(_) => return,
                    }
                });
            }
            drop(done_tx);
            let mut pending = 0usize;
            let mut dirty: Vec<usize> = Vec::new();
            let mut last_sweep = Instant::now();
            let sender = &job_tx;
            // Handle a finished job; a file whose journal was being written
            // when it completed is finished now.
            let mut settle = |r: JobDone,
                              files: &mut [Option<RecvFile>],
                              done_files: &mut usize,
                              pending: &mut usize|
             -> Result<(), SessionError> {
                match r {
                    JobDone::Finished(r) => {
                        let (i, digest) = r?;
                        *done_files += 1;
                        on_done(i, digest)
                    }
                    JobDone::Journaled(i, r) => {
                        r?;
                        let f = files[i as usize].as_mut().expect("journals name files");
                        f.journaling = false;
                        if f.finish_after_journal {
                            f.finish_after_journal = false;
                            *pending += 1;
                            let _ = sender.send(Job::Finish(f.complete(i)));
                        }
                        Ok(())
                    }
                }
            };
            // Files not yet complete: once none is left, streams still open
            // (a stalled one the sender gave up on) need not be waited for.
            let mut remaining = files.iter().flatten().filter(|f| !f.done).count();
            let result = (|| {
                while remaining > 0 && (rx.open() || rx.in_flight() > 0) {
                    let mut events = Vec::new();
                    // Handle what arrived even when the poll failed: every
                    // event carries a buffer that must go back to the pool.
                    let polled = rx.poll(true, &mut |ev| events.push(ev));
                    let mut failure = None;
                    let mut batch_bytes = 0;
                    let mut completed = Vec::new();
                    for ev in events {
                        match ev {
                            RecvEvent::Frame { header, lease, .. } => {
                                if failure.is_some() {
                                    rx.give_back(lease);
                                    continue;
                                }
                                let index = header.file_index as usize;
                                match accept_frame(root, *direct, files, *block, &header, &lease) {
                                    Err(e) => {
                                        failure = Some(e);
                                        rx.give_back(lease);
                                    }
                                    Ok(Accepted::Duplicate) => rx.give_back(lease),
                                    Ok(Accepted::Hole) => {
                                        rx.give_back(lease);
                                        batch_bytes += u64::from(header.length);
                                        completed.push(index);
                                    }
                                    Ok(Accepted::Data { write_len }) => {
                                        batch_bytes += u64::from(header.length);
                                        let f = files[index]
                                            .as_mut()
                                            .expect("accepted frames name files");
                                        if f.slot.is_none() {
                                            let fd = f
                                                .part
                                                .as_ref()
                                                .expect("opened when accepted")
                                                .as_raw_fd();
                                            // Without a slot the write falls back to pwrite.
                                            f.slot = rx.attach_file(fd).unwrap_or(None);
                                        }
                                        let block_no = header.offset / *block;
                                        match f.slot {
                                            Some(slot) => {
                                                // O_DIRECT WRITE_FIXED straight from the receive buffer.
                                                f.writing.push((block_no, header.checksum));
                                                let token = (index as u64) << 32 | block_no;
                                                rx.write(
                                                    slot,
                                                    header.offset,
                                                    lease,
                                                    write_len,
                                                    token,
                                                );
                                            }
                                            None => {
                                                // Every slot busy (many files interleaved): write here.
                                                let part =
                                                    f.part.as_ref().expect("opened when accepted");
                                                let bytes = &lease.as_slice()
                                                    [HEADROOM..HEADROOM + write_len as usize];
                                                let written =
                                                    part.write_all_at(bytes, header.offset);
                                                rx.give_back(lease);
                                                match written {
                                                    Ok(()) => {
                                                        f.mark_written(
                                                            block_no,
                                                            u64::from(header.length),
                                                            header.checksum,
                                                        );
                                                        completed.push(index);
                                                    }
                                                    Err(e) => {
                                                        failure = Some(SessionError::io(
                                                            format!("writing {}", f.final_rel),
                                                            e,
                                                        ))
                                                    }
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                            RecvEvent::Written {
                                token,
                                len,
                                result,
                                lease,
                            } => {
                                rx.give_back(lease);
                                let index = (token >> 32) as usize;
                                let block_no = token & 0xFFFF_FFFF;
                                let f = files[index].as_mut().expect("writes name files");
                                let at = f
                                    .writing
                                    .iter()
                                    .position(|w| w.0 == block_no)
                                    .expect("a write in flight");
                                let (_, checksum) = f.writing.swap_remove(at);
                                if result < 0 || (result as u32) < len {
                                    let e = if result < 0 {
                                        std::io::Error::from_raw_os_error(-result)
                                    } else {
                                        std::io::Error::new(
                                            std::io::ErrorKind::WriteZero,
                                            "short write (no space left?)",
                                        )
                                    };
                                    failure.get_or_insert(SessionError::io(
                                        format!("writing {}", f.final_rel),
                                        e,
                                    ));
                                    continue;
                                }
                                let len = (f.size - block_no * *block).min(*block);
                                f.mark_written(block_no, len, checksum);
                                completed.push(index);
                            }
                            RecvEvent::Closed { .. } => {}
                            RecvEvent::Lost { stream, why } => {
                                lost_streams.push(format!("stream {stream}: {why}"));
                            }
                        }
                    }
                    let now = Instant::now();
                    for index in completed {
                        let f = files[index].as_mut().expect("completed entries are files");
                        if f.received == f.size && f.writing.is_empty() && !f.done {
                            remaining -= 1;
                            if let Some(slot) = f.slot.take() {
                                rx.detach_file(slot);
                            }
                            if f.journaling {
                                // Finished once its journal write is done.
                                f.done = true;
                                f.finish_after_journal = true;
                            } else {
                                pending += 1;
                                let _ = sender.send(Job::Finish(f.complete(index as u32)));
                            }
                        } else if f.dirty && !f.done && !dirty.contains(&index) {
                            dirty.push(index);
                        }
                    }
                    // Journal what is written of files still arriving, each
                    // at most every JOURNAL_INTERVAL.
                    if now.duration_since(last_sweep) >= JOURNAL_INTERVAL / 4 {
                        last_sweep = now;
                        dirty.retain(|&index| {
                            let f = files[index].as_mut().expect("dirty entries are files");
                            if f.done || !f.dirty {
                                return false;
                            }
                            if f.journaling || now.duration_since(f.last_journal) < JOURNAL_INTERVAL
                            {
                                return true;
                            }
                            let Some(part) = f.part.as_ref().and_then(|p| p.try_clone().ok())
                            else {
                                return true;
                            };
                            f.dirty = false;
                            f.journaling = true;
                            f.last_journal = now;
                            pending += 1;
                            let ino = {
                                use std::os::unix::fs::MetadataExt;
                                part.metadata().map_or(0, |m| m.ino())
                            };
                            let _ = sender.send(Job::Journal(JournalJob {
                                index: index as u32,
                                part,
                                final_rel: f.final_rel.clone(),
                                journal: f.journal(ino),
                            }));
                            false
                        });
                    }
                    // Bound the files waiting for their fsync (each holds a
                    // descriptor): wait for the finalizers when too many do.
                    while pending >= FINALIZE_BACKLOG_MAX {
                        match done_rx.recv_timeout(Duration::from_secs(1)) {
                            Ok(r) => {
                                pending -= 1;
                                settle(r, files, done_files, &mut pending)?;
                            }
                            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                                tick(&rx.stream_states())?
                            }
                            Err(_) => break,
                        }
                    }
                    *bytes += batch_bytes;
                    progress(batch_bytes);
                    polled?;
                    if let Some(e) = failure {
                        return Err(e);
                    }
                    for r in done_rx.try_iter() {
                        pending -= 1;
                        settle(r, files, done_files, &mut pending)?;
                    }
                    tick(&rx.stream_states())?;
                    if rx.open() && rx.idle_for() > timeout / 2 {
                        rx.refresh_idle();
                    }
                    if rx.open() && rx.idle_for() > timeout {
                        return Err(SessionError::io(
                            "receiving",
                            std::io::Error::new(
                                std::io::ErrorKind::TimedOut,
                                format!(
                                    "no data from the sender for {} s (stopped, overloaded or gone)",
                                    timeout.as_secs()
                                ),
                            ),
                        ));
                    }
                }
                Ok(())
            })();
            // Finish what is in hand (even after a failure: complete files
            // are complete), then stop the finalizers.
            let mut first = result.err();
            while pending > 0 {
                let Ok(r) = done_rx.recv() else { break };
                pending -= 1;
                if let Err(e) = settle(r, files, done_files, &mut pending) {
                    first.get_or_insert(e);
                }
            }
            drop(job_tx);
            match first {
                Some(e) => Err(e),
                None => Ok(()),
            }
        })
    }

    /// Check that every file is complete, then give directories their mode
    /// and mtime (adding files changed them). Returns (files, bytes).
    pub(crate) fn finish(&self) -> Result<(u64, u64), SessionError> {
        let file_count = self.files.iter().flatten().count();
        if self.done_files < file_count {
            let lost = if self.lost_streams.is_empty() {
                String::new()
            } else {
                format!(" (lost: {})", self.lost_streams.join("; "))
            };
            return Err(SessionError::local(
                ErrorCode::Io,
                format!(
                    "the data streams ended with {} of {file_count} files incomplete{lost}",
                    file_count - self.done_files
                ),
            ));
        }
        // Make the renames durable: sync every directory that gained an
        // entry (once each) before the summary says the session is done.
        let mut dirs: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        for e in &self.entries {
            let rel = join(&self.dest, &e.path);
            dirs.insert(
                rel.rsplit_once('/')
                    .map_or(".".to_string(), |(d, _)| d.to_string()),
            );
        }
        for d in &dirs {
            if let Ok(dir) = self
                .root
                .open_file(d, libc::O_RDONLY | libc::O_DIRECTORY, 0)
            {
                dir.sync_all()
                    .map_err(|e| SessionError::io(format!("syncing directory {d}"), e))?;
            }
        }
        for e in self
            .entries
            .iter()
            .rev()
            .filter(|e| e.kind == EntryKind::Dir)
        {
            let rel = join(&self.dest, &e.path);
            if let Ok(d) = self
                .root
                .open_file(&rel, libc::O_RDONLY | libc::O_DIRECTORY, 0)
            {
                use std::os::unix::fs::PermissionsExt;
                let _ = d.set_permissions(std::fs::Permissions::from_mode(e.mode));
                let _ = d.set_times(std::fs::FileTimes::new().set_modified(mtime_of(e)));
            }
        }
        Ok((file_count as u64, self.bytes))
    }

    /// Number of regular files in the manifest.
    pub(crate) fn file_count(&self) -> usize {
        self.files.iter().flatten().count()
    }

    /// Bytes the files hold in total.
    pub(crate) fn file_bytes(&self) -> u64 {
        self.files.iter().flatten().map(|f| f.size).sum()
    }
}

/// The part file `rel` as it is, when it exists.
fn open_existing_part(root: &Root, rel: &str, direct: DirectMode) -> Option<(File, bool)> {
    if direct != DirectMode::Off {
        if let Ok(f) = root.open_file(rel, libc::O_WRONLY | libc::O_DIRECT, 0) {
            return Some((f, true));
        }
        if direct == DirectMode::Required {
            return None;
        }
    }
    root.open_file(rel, libc::O_WRONLY, 0)
        .ok()
        .map(|f| (f, false))
}

fn open_part(
    root: &Root,
    rel: &str,
    direct: DirectMode,
    truncate: bool,
) -> Result<(File, bool), SessionError> {
    let flags = libc::O_WRONLY | libc::O_CREAT | if truncate { libc::O_TRUNC } else { 0 };
    if direct != DirectMode::Off {
        match root.open_file(rel, flags | libc::O_DIRECT, 0o600) {
            Ok(f) => return Ok((f, true)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && direct == DirectMode::Auto => {}
            Err(e) => return Err(SessionError::io(rel.to_string(), e)),
        }
    }
    let f = root
        .open_file(rel, flags, 0o600)
        .map_err(|e| SessionError::io(rel.to_string(), e))?;
    Ok((f, false))
}

/// What to do with a frame that fits its file.
enum Accepted {
    /// A hole: nothing to write (already counted).
    Hole,
    /// A block that arrived before (a stream was lost and the sender sent
    /// its frames again): checked and dropped.
    Duplicate,
    /// Write `write_len` bytes (the payload, padded to the O_DIRECT
    /// alignment at the tail) at the frame's offset.
    Data { write_len: u32 },
}

/// Check a frame against the file it names (block layout, duplicates,
/// checksum) and account it; the write itself is the caller's.
fn accept_frame(
    root: &Root,
    direct: DirectMode,
    files: &mut [Option<RecvFile>],
    block: u64,
    header: &FrameHeader,
    lease: &crate::datapath::Lease,
) -> Result<Accepted, SessionError> {
    let malformed = |m: String| SessionError::local(ErrorCode::Malformed, m);
    let Some(Some(f)) = files.get_mut(header.file_index as usize) else {
        return Err(malformed(format!(
            "frame for entry {}, which is not a file being received",
            header.file_index
        )));
    };
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
    let block_no = header.offset / block;
    let (word, bit) = ((block_no / 64) as usize, 1u64 << (block_no % 64));
    if !hole {
        header
            .check_payload(payload(lease, header))
            .map_err(|e| malformed(e.to_string()))?;
    }
    if f.seen[word] & bit != 0 || f.done {
        return Ok(Accepted::Duplicate);
    }
    if f.part.is_none() {
        let (part, d) = open_part(root, &f.part_rel, direct, false)?;
        f.part = Some(part);
        f.direct = d;
    }
    f.seen[word] |= bit;
    if hole {
        // Nothing to write: the hole stays a hole (the size is set at the end).
        let sum = hole_checksum(header.file_index, header.offset, expected);
        f.mark_written(block_no, expected, sum);
        return Ok(Accepted::Hole);
    }
    let len = header.length;
    // O_DIRECT writes whole aligned blocks: the tail is padded here and cut
    // back to the true size before the rename.
    let write_len = if f.direct {
        len.div_ceil(4096) * 4096
    } else {
        len
    };
    Ok(Accepted::Data { write_len })
}

/// A file whose every block arrived and verified: what it takes to make
/// it durable and visible.
pub(crate) struct FinalJob {
    index: u32,
    digest: u64,
    id: Identity,
    part: File,
    size: u64,
    mode: u32,
    mtime: SystemTime,
    part_rel: String,
    final_rel: String,
}

impl RecvFile {
    /// Hand over a complete file for finishing (its descriptor goes along).
    fn complete(&mut self, index: u32) -> FinalJob {
        self.done = true;
        FinalJob {
            index,
            digest: self.digest,
            id: self.id,
            part: self.part.take().expect("a complete file is open"),
            size: self.size,
            mode: self.mode,
            mtime: self.mtime,
            part_rel: self.part_rel.clone(),
            final_rel: self.final_rel.clone(),
        }
    }
}

/// Cut to size, set mode and mtime, sync, and rename to the final name.
/// Returns the file's index and digest.
fn finish_file(root: &Root, job: FinalJob) -> Result<(u32, u64), SessionError> {
    use std::os::unix::fs::PermissionsExt;
    let ctx = |what: &str| format!("{what} {}", job.final_rel);
    let part = &job.part;
    part.set_len(job.size)
        .map_err(|e| SessionError::io(ctx("truncating"), e))?;
    part.set_permissions(std::fs::Permissions::from_mode(job.mode))
        .map_err(|e| SessionError::io(ctx("setting the mode of"), e))?;
    part.set_times(std::fs::FileTimes::new().set_modified(job.mtime))
        .map_err(|e| SessionError::io(ctx("setting the mtime of"), e))?;
    journal::stamp(part, &job.id, job.digest);
    part.sync_all()
        .map_err(|e| SessionError::io(ctx("syncing"), e))?;
    // The journal goes first: a crash between the two leaves a part with
    // no journal (sent again), never a journal beside a finished file.
    journal::remove(root, &job.final_rel);
    root.rename(&job.part_rel, &job.final_rel)
        .map_err(|e| SessionError::io(ctx("renaming"), e))?;
    Ok((job.index, job.digest))
}

/// Work for the finalizer threads.
enum Job {
    Finish(FinalJob),
    Journal(JournalJob),
}

enum JobDone {
    Finished(Result<(u32, u64), SessionError>),
    Journaled(u32, Result<(), SessionError>),
}

/// Make the written blocks of a file still arriving durable, then name
/// them in its journal.
struct JournalJob {
    index: u32,
    part: File,
    final_rel: String,
    journal: Journal,
}

fn write_journal(root: &Root, j: JournalJob) -> Result<(), SessionError> {
    let ctx = |what: &str| format!("{what} {}", j.final_rel);
    j.part
        .sync_data()
        .map_err(|e| SessionError::io(ctx("syncing"), e))?;
    journal::store(root, &j.final_rel, &j.journal)
        .map_err(|e| SessionError::io(ctx("writing the journal of"), e))
}
