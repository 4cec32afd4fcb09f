//! The receiving side of a transfer, shared by the daemon (push) and the
//! client (pull): every entry of a manifest prepared beneath a root that is
//! never written through a symlink (`Incoming`); resume, the data and the
//! end are in `resume`, `landing` and `finish`.
//!
//! A file lands in `NAME.urmove.part`, created when its first block comes
//! (so a session that dies early leaves no empty parts), claimed by device
//! and inode against every other session, and is committed (stamped,
//! renamed) only once the sender's digest of its source equals this side's
//! digest of what it wrote (see `commit`).

use std::collections::HashSet;
use std::fs::File;
use std::time::SystemTime;

use crate::datapath::beneath::Root;
use crate::datapath::DirectMode;
use crate::protocol::control::{ErrorCode, HaveItem};
use crate::protocol::manifest::{link_stays_beneath, Entry, EntryKind};

use super::file::{FileState, HeldFile, RecvFile};
use super::journal::{self, Journal};
use super::manifest::{check_entries, names_of_links};
use super::part::open_part;
use super::rules::{Devices, LinkPolicy, Resume, Rules};
use crate::session::link::refused::{Refused, Why};
use crate::session::plan::tree::mtime_at;
use crate::session::SessionError;

pub(super) use super::made::Made;

pub(crate) fn join(dest: &str, path: &str) -> String {
    if dest.is_empty() {
        path.to_string()
    } else {
        format!("{dest}/{path}")
    }
}

pub(crate) fn mtime_of(e: &Entry) -> SystemTime {
    mtime_at(e.mtime_s, e.mtime_ns)
}

/// The refusal of files needing `bytes` on a filesystem with `free`.
pub(super) fn no_room(bytes: u64, free: u64) -> SessionError {
    SessionError::Limit(crate::session::limit::LimitRefusal::ours(
        crate::protocol::control::Limit::Space,
        bytes,
        free,
        0,
    ))
}

/// Whether `err` says the filesystem cannot hold a name as it is: too long
/// for it (ENAMETOOLONG), characters or an encoding it refuses (EINVAL,
/// EILSEQ, as strict-UTF-8 and case-folding filesystems answer).
pub(crate) fn cannot_hold(err: &std::io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::ENAMETOOLONG | libc::EINVAL | libc::EILSEQ)
    )
}

/// The file type bits (`S_IFIFO`, ...) of a special entry's kind.
pub(super) fn special_type(kind: EntryKind) -> u32 {
    match kind {
        EntryKind::Fifo => libc::S_IFIFO,
        EntryKind::Socket => libc::S_IFSOCK,
        EntryKind::CharDevice => libc::S_IFCHR,
        EntryKind::BlockDevice => libc::S_IFBLK,
        other => unreachable!("{} is no special file", other.name()),
    }
}

/// Why an entry whose name its filesystem cannot hold is not made.
pub(super) fn unholdable(err: &std::io::Error) -> Why {
    Why::rule(format!("the filesystem here cannot hold this name: {err}"))
}

/// Where a manifest lands: at `dest` beneath `root` (empty: the root
/// itself).
pub(crate) struct Destination {
    pub(crate) root: Root,
    pub(crate) dest: String,
}

/// How a manifest's entries are prepared: its block size, O_DIRECT, the
/// receiver's rules, and whether (and how) it resumes.
pub(super) struct Preparing {
    pub(super) block: u64,
    pub(super) direct: DirectMode,
    pub(super) rules: Rules,
    pub(super) resume: Option<Resume>,
}

/// A manifest being received beneath a root.
pub(crate) struct Incoming {
    pub(crate) root: Root,
    pub(crate) dest: String,
    pub(crate) entries: Vec<Entry>,
    pub(crate) files: Vec<Option<Box<RecvFile>>>,
    pub(crate) block: u64,
    pub(crate) direct: DirectMode,
    pub(crate) rules: Rules,
    pub(super) resume: Option<Resume>,
    /// Files finished while preparing (empty ones): (entry, digest).
    pub(super) done_at_start: Vec<(u32, u64)>,
    /// Empty files ready to commit, committed together (`batch`).
    pub(super) empty: Vec<super::commit::FinalJob>,
    /// What the receiver holds already, for the sender (resume).
    pub(super) have: Vec<HaveItem>,
    /// Entries this side refused to create (unsafe links, names it cannot
    /// hold, a directory in the way).
    pub(super) refused: Vec<Refused>,
    /// Files complete under their final names before any data came.
    pub(super) complete_before: Vec<u32>,
    /// Those of them complete by their stamp alone (not read again).
    pub(super) unchanged: HashSet<u32>,
    /// Entries the sender dropped (or this side refused), with the reason.
    pub(crate) skipped: Vec<Refused>,
    /// Files whose content differed from the sender's digest.
    pub(crate) rejected: Vec<u32>,
    pub(crate) done_files: usize,
    pub(crate) bytes: u64,
    pub(crate) lost_streams: Vec<String>,
    /// Bytes of journals written this session.
    pub(crate) journal_bytes: u64,
    /// The sender's summary, when it sent one while data flowed (pull).
    pub(crate) peer_summary: Option<(u64, u64, bool)>,
    /// Files are placed on lanes by device ([`Incoming::place`]): the
    /// streams stay on the lanes planned, whatever core they arrive on.
    pub(crate) routed: bool,
    /// Under `-H`: how many names each linked file has in the manifest, by
    /// the final path of its first name.
    pub(super) names: std::collections::HashMap<String, u64>,
    /// The directories its preparation made (a streamed push's windows
    /// go on from there).
    pub(super) made: Made,
    /// Files let go once settled (a streamed push's: see [`Settled`]).
    pub(crate) settled: super::book_stream::Settled,
    /// Milliseconds this session may still wait for parts another session
    /// holds (see `Incoming::claim_held_part`).
    pub(super) claim_wait_ms: std::sync::atomic::AtomicU64,
}

/// Where a manifest of one file that may take its destination's name
/// (`REQ_ONE_FILE`, rsync's and scp's rename of a single file) lands: at
/// `dest` itself where nothing is there or something it replaces (a file,
/// a link to no directory), the returned destination being its parent and
/// the entry named as `dest`'s last component. A manifest of anything
/// else, or a `dest` that is a directory, lands beneath `dest` as sent;
/// so does a link to a directory, or one `root` will not follow (a
/// writing root follows none: the push is refused there, as any push
/// through a link is).
pub(crate) fn one_file_at_dest(root: &Root, dest: String, entries: &mut [Entry]) -> String {
    let [one] = entries else { return dest };
    if one.kind == EntryKind::Dir || dest.is_empty() || !takes_a_file(root, &dest) {
        return dest;
    }
    let (parent, name) = dest.rsplit_once('/').unwrap_or(("", &dest));
    one.path = name.to_string();
    parent.to_string()
}

/// Whether a file may land at `rel` itself: nothing is there, or no
/// directory (a link followed beneath the root to what it names).
pub(super) fn takes_a_file(root: &Root, rel: &str) -> bool {
    let followed = || {
        root.openat(rel, libc::O_PATH, 0)
            .and_then(|fd| File::from(fd).metadata())
            .is_ok_and(|m| !m.is_dir())
    };
    match root.symlink_metadata(rel) {
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        Ok(m) if m.file_type().is_symlink() => followed(),
        Ok(m) => !m.is_dir(),
    }
}

impl Incoming {
    /// Check every entry, then create directories and symlinks, finish
    /// empty files and find what a resume holds, before any byte arrives.
    /// Part files are made when their first block comes.
    pub(crate) fn prepare(
        Destination { root, dest }: Destination,
        entries: Vec<Entry>,
        block: u64,
        direct: DirectMode,
        rules: Rules,
        resume: Option<Resume>,
        tick: &mut dyn FnMut(),
    ) -> Result<Self, SessionError> {
        let how = Preparing {
            block,
            direct,
            rules,
            resume,
        };
        let at = Destination { root, dest };
        Incoming::prepare_from(at, entries, how, Made::default(), tick)
    }

    /// [`Incoming::prepare`], from what an earlier preparation `made`.
    pub(super) fn prepare_from(
        Destination { root, dest }: Destination,
        entries: Vec<Entry>,
        how: Preparing,
        mut made: Made,
        tick: &mut dyn FnMut(),
    ) -> Result<Self, SessionError> {
        let Preparing {
            block,
            direct,
            rules,
            resume,
        } = how;
        check_entries(&entries, block, rules.follow)?;
        if !dest.is_empty() && !rules.dry_run {
            root.mkdir_all(&dest, 0o755)
                .map_err(|e| SessionError::io(dest.clone(), e))?;
        }
        let mut inc = Incoming {
            root,
            dest: dest.clone(),
            files: Vec::with_capacity(entries.len()),
            entries: Vec::new(),
            block,
            direct,
            rules,
            resume,
            done_at_start: Vec::new(),
            empty: Vec::new(),
            have: Vec::new(),
            refused: Vec::new(),
            complete_before: Vec::new(),
            unchanged: HashSet::new(),
            skipped: Vec::new(),
            rejected: Vec::new(),
            done_files: 0,
            bytes: 0,
            lost_streams: Vec::new(),
            journal_bytes: 0,
            peer_summary: None,
            routed: false,
            names: names_of_links(&dest, &entries),
            made: Made::default(),
            settled: Default::default(),
            claim_wait_ms: (super::resume::CLAIM_WAIT.as_millis() as u64).into(),
        };
        for (i, e) in entries.iter().enumerate() {
            tick();
            let file = match inc.prepare_entry(i as u32, e, &mut made, tick) {
                Ok(file) => file,
                Err(e) => {
                    // The empty files ready are whole: committed still.
                    let _ = inc.commit_empty();
                    return Err(e);
                }
            };
            inc.files.push(file.map(Box::new));
            if inc.empty.len() >= super::batch::EMPTY_BATCH {
                inc.commit_empty()?;
            }
        }
        inc.commit_empty()?;
        inc.entries = entries;
        inc.done_files = inc.done_at_start.len();
        inc.made = made;
        Ok(inc)
    }

    pub(super) fn prepare_entry(
        &mut self,
        i: u32,
        e: &Entry,
        made: &mut Made,
        tick: &mut dyn FnMut(),
    ) -> Result<Option<RecvFile>, SessionError> {
        let rel = join(&self.dest, &e.path);
        if let Some(why) = made.beneath_unmade(&rel) {
            self.refuse_entry(i, why);
            return Ok(None);
        }
        if e.kind != EntryKind::File {
            made.note(&rel);
        }
        match e.kind {
            EntryKind::Dir if self.rules.dry_run => Ok(None),
            EntryKind::Dir => {
                if let Err(why) = self.make_dir(&rel, made)? {
                    self.refuse_entry(i, why);
                }
                Ok(None)
            }
            EntryKind::Symlink => {
                if let Err(why) = self.make_symlink(e, &rel)? {
                    self.refuse_entry(i, why);
                }
                Ok(None)
            }
            // Linked once every file is committed (`finish`).
            EntryKind::HardLink => Ok(None),
            EntryKind::File => self.prepare_file_entry(i, e, rel, made, tick),
            EntryKind::Fifo
            | EntryKind::Socket
            | EntryKind::CharDevice
            | EntryKind::BlockDevice => {
                if let Err(why) = self.make_special(e, &rel)? {
                    self.refuse_entry(i, why);
                }
                Ok(None)
            }
        }
    }

    /// A regular file's entry: its directory made (beneath, through no
    /// link, once per directory, so a bad path fails before any data),
    /// then what it holds already found. A name its filesystem cannot hold
    /// (its directory's or its own) is one refused entry.
    pub(super) fn prepare_file_entry(
        &mut self,
        i: u32,
        e: &Entry,
        rel: String,
        made: &mut Made,
        tick: &mut dyn FnMut(),
    ) -> Result<Option<RecvFile>, SessionError> {
        let dir = rel.rsplit_once('/').map_or("", |(d, _)| d);
        if dir != made.dir || made.name_max == 0 {
            if !dir.is_empty() && !self.rules.dry_run {
                if let Err(why) = self.make_dir(dir, made)? {
                    self.refuse_entry(i, why);
                    return Ok(None);
                }
            }
            made.dir = dir.to_string();
            made.name_max = self.root.name_max(dir);
        }
        let fresh = made.fresh(&self.root, dir, &rel);
        let mut f = RecvFile::new(e, rel, made.name_max, self.block, &self.rules);
        if fresh {
            // Nothing in its way, nothing held: no look needed.
            f.fresh = true;
            self.prepare_new_file(i, &mut f)?;
            return Ok(Some(f));
        }
        if let Some(why) = self.in_the_way(&f) {
            // Told to the sender before the data; its frames dropped.
            f.state = FileState::Skipped;
            self.refused.push(Refused::entry(i, why));
            return Ok(Some(f));
        }
        self.prepare_file(i, &mut f, tick)?;
        Ok(Some(f))
    }

    /// Make directory `rel` (and what leads to it): `Ok(Err(why))` when
    /// its filesystem cannot hold a name on the way, which is then
    /// remembered in `made` (whatever lies beneath it is refused too).
    pub(super) fn make_dir(
        &self,
        rel: &str,
        made: &mut Made,
    ) -> Result<Result<(), Why>, SessionError> {
        match self.root.mkdir_all(rel, 0o755) {
            Ok(()) => Ok(Ok(())),
            Err(err) if cannot_hold(&err) => {
                let why = Why::rule(format!("the filesystem here cannot hold the name of {rel} or of a directory above it: {err}"));
                made.unmade.insert(rel.to_string(), why.clone());
                Ok(Err(why))
            }
            Err(err) => Err(SessionError::io(rel.to_string(), err)),
        }
    }

    /// Entry `i` will not be created: told to the sender before the data
    /// (a file's frames are then dropped), one skipped entry with `why`.
    pub(super) fn refuse_entry(&mut self, i: u32, why: Why) {
        self.refused.push(Refused::entry(i, why));
    }

    /// Why `f` cannot land, when a directory stands at its name, or at a
    /// name of urmove's it writes (its part, its journal and the journal's
    /// temporary): planted by someone who can write under the root, never
    /// removed, and one such entry never fails the others.
    pub(super) fn in_the_way(&self, f: &RecvFile) -> Option<Why> {
        let found = self.root.symlink_metadata(&f.final_rel);
        if let Err(err) = found.as_ref() {
            if cannot_hold(err) {
                return Some(unholdable(err));
            }
        }
        if found.is_ok_and(|m| m.is_dir()) {
            return Some(Why::fault(
                "a directory of that name is in the way of the file",
            ));
        }
        let dir = |rel: &str| self.root.symlink_metadata(rel).is_ok_and(|m| m.is_dir());
        let journal = f.journal_rel();
        let ours = [f.part_rel(), format!("{journal}.tmp"), journal];
        let rel = ours.into_iter().find(|rel| dir(rel))?;
        Some(Why::fault(format!(
            "a directory is in the way of urmove's {rel}, which is not urmove's: remove it"
        )))
    }

    /// Recreate a symlink as it is, unless its target leaves the root and
    /// the policy says to skip or refuse it. `Ok(Err(why))`: this entry
    /// alone is not made (skipped by policy, a directory in its way, a
    /// name its filesystem cannot hold).
    pub(super) fn make_symlink(
        &mut self,
        e: &Entry,
        rel: &str,
    ) -> Result<Result<(), Why>, SessionError> {
        let target = e.link.as_deref().unwrap_or_default();
        if !link_stays_beneath(rel, target) {
            match self.rules.unsafe_links {
                LinkPolicy::Keep => {}
                LinkPolicy::Skip => {
                    return Ok(Err(Why::rule(format!(
                        "symlink to {target} leaves the receiver's root; the receiver skips such links"
                    ))))
                }
                LinkPolicy::Refuse => {
                    return Err(SessionError::local(
                        ErrorCode::PathRefused,
                        format!("{rel}: symlink to {target} leaves the receiver's root; the receiver refuses such links"),
                    ))
                }
            }
        }
        match self.root.symlink_metadata(rel) {
            Ok(m) if m.is_dir() => {
                return Ok(Err(Why::fault(
                    "a directory of that name is in the way of the symlink",
                )))
            }
            Err(err) if cannot_hold(&err) => return Ok(Err(unholdable(&err))),
            _ if self.rules.dry_run => return Ok(Ok(())),
            Ok(_) => self
                .root
                .unlink(rel)
                .map_err(|err| SessionError::io(rel.to_string(), err))?,
            Err(_) => {}
        }
        match self.root.symlink(target, rel) {
            Err(err) if cannot_hold(&err) => return Ok(Err(unholdable(&err))),
            other => other.map_err(|err| SessionError::io(rel.to_string(), err))?,
        }
        if let Some((uid, gid)) = self.rules.dress(e).owner {
            self.root
                .lchown(rel, uid, gid)
                .map_err(|err| SessionError::io(format!("giving {rel} its owner"), err))?;
        }
        self.root
            .set_link_mtime(rel, e.mtime_s, e.mtime_ns)
            .map_err(|err| SessionError::io(format!("giving {rel} its time"), err))?;
        Ok(Ok(()))
    }

    /// Make a FIFO, socket or (`-D`, allowed) device node as it is on the
    /// sending side, as `rsync -a` does: one of the same type (and device)
    /// at the name is kept, anything else but a directory replaced, never
    /// through a link; then its owner, mode and mtime. `Ok(Err(why))`:
    /// this entry alone is not made.
    pub(super) fn make_special(
        &mut self,
        e: &Entry,
        rel: &str,
    ) -> Result<Result<(), Why>, SessionError> {
        use std::os::unix::fs::MetadataExt;
        if let (true, Devices::Refuse(why)) = (e.kind.is_device(), self.rules.devices) {
            return Ok(Err(Why::rule(why)));
        }
        let io = |err| SessionError::io(rel.to_string(), err);
        let kind = special_type(e.kind);
        let found = self.root.symlink_metadata(rel);
        let same = found.as_ref().is_ok_and(|m| {
            let t = m.file_type();
            !t.is_symlink()
                && m.mode() & libc::S_IFMT == kind
                && (!e.kind.is_device() || m.rdev() == e.rdev)
        });
        match found {
            Ok(m) if m.is_dir() => {
                return Ok(Err(Why::fault(format!(
                    "a directory of that name is in the way of the {}",
                    e.kind.name()
                ))))
            }
            Err(err) if cannot_hold(&err) => return Ok(Err(unholdable(&err))),
            _ if self.rules.dry_run => return Ok(Ok(())),
            Ok(_) if !same => self.root.unlink(rel).map_err(io)?,
            _ => {}
        }
        if !same {
            match self.root.mknod(rel, kind | 0o600, e.rdev) {
                Err(err) if cannot_hold(&err) => return Ok(Err(unholdable(&err))),
                other => other.map_err(io)?,
            }
        }
        if let Some((uid, gid)) = self.rules.dress(e).owner {
            self.root.lchown(rel, uid, gid).map_err(io)?;
        }
        self.root
            .chmod_kind(rel, kind, self.rules.mode(e.mode))
            .map_err(io)?;
        self.root
            .set_link_mtime(rel, e.mtime_s, e.mtime_ns)
            .map_err(io)?;
        Ok(Ok(()))
    }

    pub(super) fn prepare_file(
        &mut self,
        i: u32,
        f: &mut RecvFile,
        tick: &mut dyn FnMut(),
    ) -> Result<(), SessionError> {
        if let Some(r) = self.resume {
            // A file still growing is never complete at the far end.
            let complete = match f.growing {
                true => None,
                false => self.held_complete(f, r, tick),
            };
            if let Some(held) = complete {
                f.state = FileState::HeldComplete;
                f.received = f.size;
                self.have.push(match held {
                    HeldFile::Unchanged(plain) => {
                        self.unchanged.insert(i);
                        f.digest = plain;
                        HaveItem::Unchanged {
                            file_index: i,
                            digest: plain,
                        }
                    }
                    HeldFile::Read(d, seen) => {
                        f.held_seen = Some(seen);
                        f.digest = d.plain;
                        HaveItem::Complete {
                            file_index: i,
                            digest: d.keyed,
                        }
                    }
                });
                return Ok(());
            }
            let continued = match f.size {
                0 => None,
                // Started over: no verdict comes on what a part holds.
                _ if r.stamps_only => None,
                _ => self.continue_part(f, &r.key, tick)?,
            };
            if let Some(keyed) = continued {
                let ranges = Journal {
                    id: f.id,
                    part: f.part_id.expect("claimed"),
                    digest: f.digest,
                    blocks: f.written.clone(),
                    generation: f.generation,
                    tag: f.part_tag,
                }
                .ranges();
                self.have.push(HaveItem::Partial {
                    file_index: i,
                    digest: keyed,
                    ranges,
                });
            }
        }
        self.prepare_new_file(i, f)
    }

    /// `f`, holding nothing yet: an empty file is finished now (with
    /// others: see `commit_empty`).
    pub(super) fn prepare_new_file(
        &mut self,
        i: u32,
        f: &mut RecvFile,
    ) -> Result<(), SessionError> {
        if f.size == 0 && !f.growing && !self.rules.dry_run {
            // Nothing to wait for: an empty file's digest is 0 on both sides.
            open_part(&self.root, self.direct, &self.rules, f)?;
            f.sender_digest = Some(0);
            self.empty
                .push(super::commit::FinalJob::take(i, f, &self.rules));
        }
        Ok(())
    }
}

#[cfg(test)]
impl Incoming {
    /// A receive of `entries` into the whole of `dir` (buffered, nothing
    /// to resume), for the tests of the rooms that work on one.
    pub(crate) fn beneath(
        dir: &std::path::Path,
        entries: Vec<Entry>,
        block: u64,
        rules: Rules,
    ) -> Self {
        let root = Root::open_for_writing(dir).unwrap();
        let dest = Destination {
            root,
            dest: String::new(),
        };
        Incoming::prepare(
            dest,
            entries,
            block,
            DirectMode::Off,
            rules,
            None,
            &mut || {},
        )
        .unwrap()
    }
}

impl Drop for Incoming {
    /// A session that ends (done, failed or cut off) leaves no empty part
    /// files: parts without journaled data are removed; parts with data and
    /// their journals stay for `--resume`. Its claims end with it.
    fn drop(&mut self) {
        if self.rules.dry_run {
            // It claimed, made and changed nothing.
            return;
        }
        let mut claims = self.rules.claims.lock().unwrap_or_else(|p| p.into_inner());
        for f in self.files.iter_mut().flatten() {
            let Some(id) = f.part_id.take() else { continue };
            if !f.released {
                claims.remove(&id);
            }
            let open = matches!(f.state, FileState::Receiving | FileState::Skipped);
            // A shared part may hold the other pieces: it stays (swept
            // once nobody touched it for the sweep's age).
            if open && !f.journaled && f.piece.is_none() {
                f.part = None;
                let _ = self.root.unlink_file(&f.part_rel(), id);
                journal::remove(&self.root, &f.journal_rel());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::beneath::FileId;
    use crate::protocol::manifest::Piece;
    use crate::session::sink::pieces::{piece_generation, pieces_mark};

    fn rules() -> Rules {
        Rules::plain([9; 32], 1 << 20)
    }

    /// Piece 1 of 2 of a file of four 4 KiB blocks (blocks 2 and 3).
    fn piece_file(rules: &Rules) -> RecvFile {
        let e = Entry {
            path: "big".into(),
            kind: EntryKind::File,
            size: 4 * 4096,
            mode: 0o644,
            piece: Some(Piece { index: 1, count: 2 }),
            ..Default::default()
        };
        RecvFile::new(&e, "big".into(), 255, 4096, rules)
    }

    /// Before a session writes a piece it continued, the journal there
    /// names only the blocks that session holds, under a generation of its
    /// own: another session's journal of the whole piece (blocks it may
    /// write over) is gone. One starting from nothing leaves none.
    #[test]
    fn a_piece_writer_first_makes_the_journal_name_only_what_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::open_for_writing(dir.path()).unwrap();
        let rules = rules();
        let part = std::fs::File::create(dir.path().join("big.urmove.part")).unwrap();
        let mut f = piece_file(&rules);
        // Continued from a journal of block 2 (its copy), while another
        // session since journaled blocks 2 and 3.
        (f.part_id, f.journaled, f.digest) = (Some(FileId::of(&part).unwrap()), true, 11);
        (f.written, f.generation) = (vec![1 << 2], [1; 16]);
        f.part = Some(part.try_clone().unwrap());
        let theirs = Journal {
            id: f.id,
            part: f.part_id.unwrap(),
            digest: 22,
            blocks: vec![(1 << 2) | (1 << 3)],
            generation: [1; 16],
            tag: [0; 16],
        };
        journal::store(&root, &f.journal_rel(), &theirs, &rules.secret).unwrap();
        f.write_own(&root, &rules.secret).unwrap();
        let load = |f: &RecvFile| journal::load(&root, &f.journal_rel(), &rules.secret, &|_| true);
        let now = load(&f).expect("a journal of what it holds");
        assert_eq!((now.blocks, now.digest), (vec![1 << 2], 11));
        assert_ne!(now.generation, [1; 16]);
        assert_eq!(now.generation, f.generation);
        // The part records it (a local user cannot set it back).
        assert_eq!(
            piece_generation(&part, f.piece.unwrap()),
            Some(f.generation)
        );
        // Once per session: its own journals keep that generation.
        let drawn = f.generation;
        f.write_own(&root, &rules.secret).unwrap();
        assert_eq!(f.generation, drawn);
        // From nothing: the journal there names no block, under its own.
        let mut fresh = piece_file(&rules);
        (fresh.part_id, fresh.part) = (f.part_id, Some(part.try_clone().unwrap()));
        fresh.write_own(&root, &rules.secret).unwrap();
        let j = load(&fresh).expect("a journal of nothing");
        assert_eq!((j.blocks, j.generation), (vec![0], fresh.generation));
    }

    /// A shared part is marked for its file's name too: another file's
    /// part of the same size, mtime and split, renamed to this one's part
    /// name by someone who can write under the root, is never joined.
    #[test]
    fn a_pieces_mark_names_its_file() {
        let rules = rules();
        let x = piece_file(&rules);
        let mut y = piece_file(&rules);
        y.final_rel = "other".into();
        let p = x.piece.unwrap();
        assert_eq!(pieces_mark(&x, p), pieces_mark(&piece_file(&rules), p));
        assert_ne!(pieces_mark(&x, p), pieces_mark(&y, p));
    }

    /// A session that takes a piece's lock again (its part closed while
    /// idle, or to finish it) finds the journal with the generation it
    /// left there, or is told another session wrote the piece meanwhile.
    #[test]
    fn a_piece_taken_again_after_another_wrote_it_is_busy() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::open_for_writing(dir.path()).unwrap();
        let rules = rules();
        let part = std::fs::File::create(dir.path().join("big.urmove.part")).unwrap();
        let mut f = piece_file(&rules);
        (f.part_id, f.part) = (
            Some(FileId::of(&part).unwrap()),
            Some(part.try_clone().unwrap()),
        );
        f.write_own(&root, &rules.secret).unwrap();
        let open = |f: &mut RecvFile| {
            f.part = None;
            open_part(&root, DirectMode::Off, &rules, f)
        };
        open(&mut f).unwrap();
        // Another session writes it: its own generation first.
        let mut other = piece_file(&rules);
        (other.part_id, other.part) = (f.part_id, Some(part.try_clone().unwrap()));
        f.part = None;
        other.write_own(&root, &rules.secret).unwrap();
        let busy = |f: &mut RecvFile| {
            let e = open(f).unwrap_err();
            assert!(
                e.to_string().contains("another session wrote this piece"),
                "{e}"
            );
            assert!(f.part.is_none());
        };
        busy(&mut f);
        // Its own journal put back (by someone who can rename under the
        // root): the part still records the other's generation.
        let mine = Journal {
            id: f.id,
            part: f.part_id.unwrap(),
            digest: 0,
            blocks: vec![0],
            generation: f.generation,
            tag: [0; 16],
        };
        journal::store(&root, &f.journal_rel(), &mine, &rules.secret).unwrap();
        busy(&mut f);
    }

    /// A plain name in a directory that held nothing is fresh, once per
    /// name whatever its case; a name not plain, or too long, ends that
    /// for its directory; a directory that holds something is never.
    #[test]
    fn only_plain_names_alone_in_a_directory_that_held_nothing_are_fresh() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        for d in ["a", "b/x", "d", "e"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        let root = Root::open_for_writing(dir.path()).unwrap();
        let mut made = Made {
            name_max: 12,
            ..Default::default()
        };
        assert!(made.fresh(&root, "a", "a/f1"));
        assert!(!made.fresh(&root, "a", "a/F1"), "one name in another case");
        assert!(made.fresh(&root, "a", "a/f2"));
        assert!(!made.fresh(&root, "b", "b/y"), "b holds x");
        assert!(made.fresh(&root, "c", "c/z"), "c is not there");
        assert!(made.fresh(&root, "d", "d/f"));
        made.note("d/Sub");
        assert!(!made.fresh(&root, "d", "d/sub"), "a directory made since");
        assert!(made.fresh(&root, "d", "d/g"));
        assert!(!made.fresh(&root, "d", "d/\u{e9}t\u{e9}"), "not plain");
        assert!(!made.fresh(&root, "d", "d/h"), "d is no longer known");
        assert!(!made.fresh(&root, "e", "e/longer-than-12"));
        assert!(!made.fresh(&root, "e", "e/i"));
    }

    /// A fresh directory's files need no look; one that holds something
    /// still finds what is in the way (a directory where a file goes, a
    /// directory at urmove's part name), resuming or not.
    #[test]
    fn what_is_in_the_way_is_found_beside_fresh_directories() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        std::fs::create_dir_all(dir.path().join("full/f")).unwrap();
        std::fs::create_dir_all(dir.path().join("full/g.urmove.part")).unwrap();
        std::fs::create_dir_all(dir.path().join("empty")).unwrap();
        let file = |path: &str, size| Entry {
            path: path.into(),
            kind: EntryKind::File,
            size,
            mode: 0o644,
            ..Default::default()
        };
        for resume in [
            None,
            Some(Resume {
                checksum: false,
                key: crate::protocol::frame::FrameKey { k0: 1, k1: 2 },
                stamps_only: false,
            }),
        ] {
            let entries = vec![
                file("empty/a", 5),
                file("empty/b", 0),
                file("full/f", 5),
                file("full/g", 5),
                file("full/h", 5),
                file("new/i", 5),
            ];
            let root = Root::open_for_writing(dir.path()).unwrap();
            let dest = Destination {
                root,
                dest: String::new(),
            };
            let inc = Incoming::prepare(
                dest,
                entries,
                4096,
                DirectMode::Off,
                rules(),
                resume,
                &mut || {},
            )
            .unwrap();
            let refused: Vec<u32> = inc.refused.iter().map(|r| r.entry).collect();
            assert_eq!(refused, [2, 3], "{:?}", inc.refused);
            assert_eq!(inc.done_at_start.len(), 1);
            assert!(inc.have.is_empty());
            assert_eq!(std::fs::read(dir.path().join("empty/b")).unwrap(), b"");
            std::fs::remove_file(dir.path().join("empty/b")).unwrap();
        }
    }
}
