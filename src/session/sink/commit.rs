//! The end of a received file: committed (cut to size, stamped, given its
//! mode and mtime, synced, renamed from its part name) when the sender's
//! digest of the source equals this side's digest of what it wrote, or
//! rejected (its part removed, its final name untouched) when they differ.
//! The rename moves the file this session wrote and no other: the part
//! name must still hold its device and inode.
//!
//! Also the journals of files still arriving, written by the same threads.

use std::fs::File;
use std::time::SystemTime;

use crate::datapath::beneath::{FileId, Root};

use super::beside::Beside;
use super::file::{FileState, RecvFile};
use super::journal::{self, Identity, Journal};
use super::rules::Rules;
use super::stamp::Named;
use crate::protocol::control::PieceDone;
use crate::protocol::frame::digest_add;
use crate::protocol::manifest::{piece_span, Piece};
use crate::session::link::secret::Secret;
use crate::session::SessionError;

/// A file whose every block is written, with both digests known: what it
/// takes to commit or reject it.
pub(crate) struct FinalJob {
    index: u32,
    digest: u64,
    sender_digest: u64,
    part: File,
    part_id: FileId,
    size: u64,
    mode: u32,
    mtime: SystemTime,
    final_rel: String,
    /// The longest name its directory takes (see `Beside`).
    name_max: usize,
    secret: Secret,
    owner: Option<[u8; 32]>,
    dress: super::rules::Dress,
    /// A live part (`--live-parts`): its attribute goes before the commit.
    live: bool,
    /// Its part has no name (see `RecvFile::unnamed`): linked at its final
    /// name, untagged, with no journal.
    unnamed: bool,
    /// The owner its part was made with, when this session made it.
    made_owner: Option<(u32, u32)>,
    journal_rel: String,
    /// A piece of a split file: what it takes to journal it complete and
    /// to find whether every piece is.
    piece: Option<PieceOf>,
    /// Its storage checksums, kept with it at its commit (`Rules::sums`).
    sums: Option<crate::protocol::checksum::Sums>,
}

/// A written piece: which, the file's identity, its blocks, its
/// journal's generation and its part's tag.
struct PieceOf {
    piece: Piece,
    id: Identity,
    written: Vec<u64>,
    generation: [u8; 16],
    tag: [u8; 16],
}

impl FinalJob {
    /// Hand over `f` (its descriptor goes along); it is finishing from now.
    pub(crate) fn take(index: u32, f: &mut RecvFile, rules: &Rules) -> FinalJob {
        f.state = FileState::Finishing;
        FinalJob {
            index,
            digest: f.digest,
            sender_digest: f.sender_digest.expect("the sender's digest is known"),
            part: f.part.take().expect("a written file is open"),
            part_id: f.part_id.expect("a written file is claimed"),
            size: f.size,
            mode: f.mode,
            mtime: f.mtime,
            final_rel: f.final_rel.clone(),
            name_max: usize::from(f.name_max),
            secret: rules.secret.clone(),
            owner: rules.owner,
            dress: std::mem::take(&mut f.dress),
            live: rules.live_parts && f.prefix > 0,
            unnamed: f.unnamed,
            made_owner: f.made_owner,
            journal_rel: f.journal_rel(),
            sums: f.whole_sums(),
            piece: f.piece.map(|piece| PieceOf {
                piece,
                id: f.id,
                written: std::mem::take(&mut f.written),
                generation: f.generation,
                tag: f.part_tag,
            }),
        }
    }

    /// The entry it finishes.
    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    fn beside(&self) -> Beside<'_> {
        Beside::new(&self.final_rel, self.name_max)
    }

    fn part_rel(&self) -> String {
        self.beside().part()
    }

    /// Its part under the final name, as its stamp names it.
    fn named(&self) -> Named<'_> {
        Named {
            file: &self.part,
            rel: &self.final_rel,
        }
    }
}

/// How a file ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Under its final name: (entry, digest).
    Committed(u32, u64),
    /// Differed from the source: (entry, this side's digest).
    Rejected(u32, u64),
    /// A piece of a split file agreed and journaled complete: (entry, what
    /// its receiver tells of it).
    Piece(u32, PieceDone),
}

/// Commit `job` when the digests agree, reject it when they do not.
pub(crate) fn run(root: &Root, job: FinalJob) -> Result<Outcome, SessionError> {
    if job.digest != job.sender_digest {
        let (index, digest) = (job.index, job.digest);
        reject(root, job);
        return Ok(Outcome::Rejected(index, digest));
    }
    if job.piece.is_some() {
        return finish_piece(root, job);
    }
    finish(root, job).map(|(i, d)| Outcome::Committed(i, d))
}

/// Remove a rejected file's part (only while its name holds the file this
/// session wrote; a shared part keeps the other pieces) and its journal:
/// it never counts as complete later.
fn reject(root: &Root, job: FinalJob) {
    let rel = job.part_rel();
    let shared = job.piece.is_some();
    drop(job.part);
    if job.unnamed {
        // Never on disk by any name: gone with its last descriptor.
        return;
    }
    if !shared {
        let _ = root.unlink_file(&rel, job.part_id);
    }
    journal::remove(root, &job.journal_rel);
}

/// A piece agreed: its blocks made durable and journaled complete; then
/// the file is committed when every piece's journal says its piece is
/// complete in this very part for this identity, by whichever session
/// takes the whole file's lock: it fails while any other opening of the
/// part holds a lock on any of it (a session writing a piece, on any
/// receiver sharing the filesystem, or one committing). A session that
/// cannot take it journals its piece under its own range's lock (no
/// commit meanwhile), lets go of that and tries once more: the last to
/// let go finds every journal there. The commit's digest is the sum of
/// the pieces' (each agreed with the shard that sent it).
fn finish_piece(root: &Root, job: FinalJob) -> Result<Outcome, SessionError> {
    let ctx = |what: &str| format!("{what} {}", job.final_rel);
    let _unlock = Unlocks::of(&job.part);
    let p = job.piece.as_ref().expect("a piece");
    job.part
        .sync_data()
        .map_err(|e| SessionError::io(ctx("syncing"), e))?;
    let j = Journal {
        id: p.id,
        part: job.part_id,
        digest: job.digest,
        blocks: p.written.clone(),
        generation: p.generation,
        tag: p.tag,
    };
    let done = PieceDone {
        digest: job.digest,
        receipt: super::receipt::receipt(&job.secret, &j, p.piece),
        whole: None,
        untrusted: None,
    };
    let index = job.index;
    // Another session found every piece first: this one's is in the file
    // it committed (the very inode), and no journal is left beside it.
    if !still_the_part(root, &job)? {
        return Ok(Outcome::Piece(index, done));
    }
    if !take_whole(&job)? {
        if !still_ours(&job, &j) {
            return Ok(Outcome::Piece(index, done));
        }
        journal::store(root, &job.journal_rel, &j, &job.secret)
            .map_err(|e| SessionError::io(ctx("writing the journal of"), e))?;
        let (start, end) = piece_span(job.size, p.id.block, p.piece);
        crate::datapath::sys::unlock_range(&job.part, start, end - start)
            .map_err(|e| SessionError::io(ctx("unlocking"), e))?;
        if !take_whole(&job)? {
            return Ok(Outcome::Piece(index, done));
        }
    }
    commit_pieces(root, job, &j, done)
}

/// Whether the part still records the generation of `j` for this piece:
/// no other session wrote it since this one (it records its own first).
/// Otherwise this one's journal is not stored again over the other's.
fn still_ours(job: &FinalJob, j: &Journal) -> bool {
    let p = job.piece.as_ref().expect("a piece");
    super::pieces::piece_generation(&job.part, p.piece) == Some(j.generation)
}

/// Lets go of every lock of an opening when dropped: a lane's ring may
/// hold the opening (its registered slot) after the finish is done with
/// it, and a lock it kept would stop every other session's commit.
struct Unlocks(Option<File>);

impl Unlocks {
    fn of(part: &File) -> Unlocks {
        Unlocks(part.try_clone().ok())
    }
}

impl Drop for Unlocks {
    fn drop(&mut self) {
        if let Some(f) = &self.0 {
            let _ = crate::datapath::sys::unlock_range(f, 0, 0);
        }
    }
}

/// Lock all of `job`'s part for this opening (see [`finish_piece`]):
/// false while another opening holds a lock on any of it.
fn take_whole(job: &FinalJob) -> Result<bool, SessionError> {
    match crate::datapath::sys::lock_whole(&job.part) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(SessionError::io(format!("locking {}", job.part_rel()), e)),
    }
}

/// Under the whole file's lock: journal the piece, and commit the file
/// when every piece is there (see [`whole_digest`]).
fn commit_pieces(
    root: &Root,
    job: FinalJob,
    j: &Journal,
    mut done: PieceDone,
) -> Result<Outcome, SessionError> {
    let ctx = |what: &str| format!("{what} {}", job.final_rel);
    let index = job.index;
    if !still_the_part(root, &job)? || !still_ours(&job, j) {
        return Ok(Outcome::Piece(index, done));
    }
    journal::store(root, &job.journal_rel, j, &job.secret)
        .map_err(|e| SessionError::io(ctx("writing the journal of"), e))?;
    let whole = match whole_digest(root, &job)? {
        Found::Whole(whole) => whole,
        Found::Missing => return Ok(Outcome::Piece(index, done)),
        Found::Untrusted(piece) => {
            done.untrusted = Some(piece);
            return Ok(Outcome::Piece(index, done));
        }
    };
    // A committed file is no part to join, and its pieces' generations
    // were the part's.
    let count = job.piece.as_ref().expect("a piece").piece.count;
    crate::datapath::sys::remove_xattr(&job.part, super::pieces::PIECES_XATTR)
        .and_then(|()| super::pieces::clear_piece_generations(&job.part, count))
        .map_err(|e| SessionError::io(ctx("unmarking"), e))?;
    // Pieces came from several sessions, perhaps several owners: the
    // stamp names none, so a later run reads it again by content before
    // it counts as held.
    let file = FinalJob {
        digest: whole.digest,
        sender_digest: whole.digest,
        owner: None,
        ..job
    };
    // The journals go first, as a single file's (see `finish`).
    whole
        .journals
        .iter()
        .for_each(|rel| journal::remove(root, rel));
    finish(root, file)?;
    done.whole = Some((whole.digest, whole.receipts));
    Ok(Outcome::Piece(index, done))
}

/// Under the part's lock: whether the part name still holds it (`false`:
/// the final name does, another session committed it). Err: neither.
fn still_the_part(root: &Root, job: &FinalJob) -> Result<bool, SessionError> {
    let here = |rel: &str| {
        root.open_read(rel)
            .is_ok_and(|f| FileId::of(&f).ok() == Some(job.part_id))
    };
    if here(&job.part_rel()) {
        return Ok(true);
    }
    if here(&job.final_rel) {
        return Ok(false);
    }
    Err(SessionError::local(
        crate::session::ErrorCode::Io,
        format!(
            "{}: its part was replaced while its pieces came",
            job.final_rel
        ),
    ))
}

/// A split file found whole: its digest (the pieces' summed), the digest
/// of its pieces' receipts, and the pieces' journals.
struct Whole {
    digest: u64,
    receipts: u64,
    journals: Vec<String>,
}

/// What [`whole_digest`] found of a split file's pieces.
enum Found {
    Whole(Whole),
    /// Some piece is not journaled complete (yet) in this part.
    Missing,
    /// Piece K's journal is not one this receiver's secret made: it will
    /// never count here (receivers sharing a root must share one secret).
    Untrusted(u32),
}

/// Under the whole file's lock: the file [`Whole`], when every piece is
/// journaled complete in this part for this identity. Its bytes are not read again: a journal names only
/// blocks whose bytes are the ones its digest was made of, since a session
/// makes the journal of a piece name no more than it holds before it
/// writes any of it, and a new part forgets the journals of any before it
/// (`RecvFile::write_own`, `pieces::join_part`); nobody else writes a
/// part (its user's file, mode 0600, one name).
fn whole_digest(root: &Root, job: &FinalJob) -> Result<Found, SessionError> {
    let p = job.piece.as_ref().expect("a piece");
    let mut journals = Vec::with_capacity(p.piece.count as usize);
    let mut receipts = Vec::with_capacity(p.piece.count as usize);
    let mut total = 0u64;
    for index in 0..p.piece.count {
        let piece = Piece { index, ..p.piece };
        let rel = job.beside().journal(Some(piece));
        let j = match journal::load_checked(root, &rel, &job.secret, &|id| *id == p.id) {
            Ok(j) => j,
            Err(journal::NoJournal::Absent) => return Ok(Found::Missing),
            Err(journal::NoJournal::OtherSecret) => return Ok(Found::Untrusted(index)),
        };
        let (start, end) = piece_span(job.size, p.id.block, piece);
        let blocks = start / p.id.block..end.div_ceil(p.id.block);
        let recorded = super::pieces::piece_generation(&job.part, piece);
        let current = recorded == Some(j.generation);
        if j.part != job.part_id || j.tag != p.tag || !current || !exactly(&j.blocks, blocks) {
            return Ok(Found::Missing);
        }
        receipts.push(super::receipt::receipt(&job.secret, &j, piece));
        total = digest_add(total, j.digest);
        journals.push(rel);
    }
    // Holes at its end were never written: the file is its size first.
    job.part
        .set_len(job.size)
        .map_err(|e| SessionError::io(format!("truncating {}", job.final_rel), e))?;
    Ok(Found::Whole(Whole {
        digest: total,
        receipts: super::receipt::receipts_digest(&receipts),
        journals,
    }))
}

/// Whether `bits` are set for `blocks` and no other.
fn exactly(bits: &[u64], blocks: std::ops::Range<u64>) -> bool {
    (0..bits.len() as u64 * 64).all(|b| {
        let set = bits[(b / 64) as usize] & (1 << (b % 64)) != 0;
        set == blocks.contains(&b)
    })
}

/// Commit an agreed file: cut to size, its mtime, its part's own
/// attributes gone, synced; then given to its owner and renamed to its
/// final name in an order in which nobody but this receiver can open it
/// to write before its bytes are final and its stamp can tell any later
/// change (see [`Way`]). Returns the file's index and digest. Many small
/// files commit together instead (see `batch`), through the same steps.
pub(crate) fn finish(root: &Root, job: FinalJob) -> Result<(u32, u64), SessionError> {
    let way = ready(&job).and_then(|way| before_sync(&job, way))?;
    let way = sync_part(&job, way)?;
    after_sync(root, &job, way)?;
    job.part
        .sync_all()
        .map_err(|e| SessionError::io(format!("syncing {}", job.final_rel), e))?;
    Ok((job.index, job.digest))
}

impl FinalJob {
    /// Whether the file, once dressed, lets a user other than this
    /// receiver's write it: another owner, a group or other write bit, or
    /// an ACL (whatever it grants).
    fn others_may_write(&self) -> bool {
        let me = crate::datapath::sys::effective_uid();
        self.dress.owner.is_some_and(|(uid, _)| uid != me)
            || self.mode & 0o022 != 0
            || self
                .dress
                .xattrs
                .iter()
                .any(|(name, _)| name.starts_with("system."))
    }

    /// Whether it commits with others (see `batch`): an agreed whole file
    /// (no piece of a split one) of at most `size_max` bytes.
    pub(super) fn batches(&self, size_max: u64) -> bool {
        self.digest == self.sender_digest && self.piece.is_none() && self.size <= size_max
    }

    /// Its part, open.
    pub(super) fn part(&self) -> &File {
        &self.part
    }

    /// Its final name under the root.
    pub(super) fn final_rel(&self) -> &str {
        &self.final_rel
    }

    /// The digest it commits with.
    pub(super) fn digest(&self) -> u64 {
        self.digest
    }
}

/// How an agreed file is dressed around its rename.
pub(super) enum Way {
    /// Under a write lease (or where only this receiver's user may write
    /// the file): the owner and attributes, the long sync, then the stamp,
    /// the mode and the rename, each within the stamp's settling time of
    /// the moment it is written (a lease lets go only once the clock is
    /// past it, so whatever changes the file later shows a later ctime),
    /// then a sync of what they changed.
    Settled(Option<File>),
    /// Without a lease (another opening of the part exists, or the
    /// filesystem has none) for a file others may write once dressed:
    /// synced and stamped with no settling time (the next run reads it
    /// again), renamed while still this receiver's alone (mode 0600, no
    /// ACL), and only then given its owner, attributes and mode: whoever
    /// may write it then writes a committed file. Then synced.
    Renamed,
}

impl Way {
    /// Let go of its lease at once (the commit stopped on an error).
    pub(super) fn abandon(self) {
        if let Way::Settled(Some(l)) = self {
            crate::datapath::sys::end_lease(&l);
        }
    }
}

/// An agreed file cut to size, given its mtime, rid of its part's own
/// attributes, and how it is to be dressed.
pub(super) fn ready(job: &FinalJob) -> Result<Way, SessionError> {
    assert_eq!(job.digest, job.sender_digest, "only agreed files commit");
    let ctx = |what: &str| format!("{what} {}", job.final_rel);
    let part = &job.part;
    // Cut to size where it is not (an O_DIRECT part's last page padded, or
    // holes at its end never written); one already its size is left as it
    // is (a truncate to the same size still changes and logs the inode).
    if part.metadata().map_or(true, |m| m.len() != job.size) {
        part.set_len(job.size)
            .map_err(|e| SessionError::io(ctx("truncating"), e))?;
    }
    part.set_times(mtime_now_accessed(job.mtime))
        .map_err(|e| SessionError::io(ctx("setting the mtime of"), e))?;
    if job.live {
        // A committed file is whole: no reader needs its prefix.
        crate::datapath::sys::remove_xattr(part, super::file::LIVE_XATTR)
            .map_err(|e| SessionError::io(ctx("clearing the live attribute of"), e))?;
    }
    // The part's tag is the part's, not the file's (an unnamed one has none).
    if !job.unnamed {
        crate::datapath::sys::remove_xattr(part, journal::PART_TAG_XATTR)
            .map_err(|e| SessionError::io(ctx("untagging"), e))?;
    }
    // Still this receiver's alone (mode 0600, no ACL): a write lease keeps
    // every other open out from here until its stamp's settling time.
    // Where the file dressed lets nobody but this receiver's user write
    // it, nobody else can write it meanwhile: no lease needed.
    if !job.others_may_write() {
        return Ok(Way::Settled(None));
    }
    Ok(match super::lease::hold(part) {
        Some(lease) => Way::Settled(Some(lease)),
        // No lease here (a filesystem without them).
        None => Way::Renamed,
    })
}

/// What goes before the long sync: a settled file's owner and attributes.
pub(super) fn before_sync(job: &FinalJob, way: Way) -> Result<Way, SessionError> {
    if let Way::Settled(_) = way {
        if let Err(e) = job.dress.put_on_made(&job.part, job.made_owner) {
            way.abandon();
            return Err(SessionError::local(
                crate::session::ErrorCode::Io,
                format!("{}: {e}", job.final_rel),
            ));
        }
    }
    Ok(way)
}

/// The part synced (alone), or its lease let go on an error.
fn sync_part(job: &FinalJob, way: Way) -> Result<Way, SessionError> {
    synced(job, way, job.part.sync_all())
}

/// `way` on, after the part's sync came back with `r`.
pub(super) fn synced(
    job: &FinalJob,
    way: Way,
    r: std::io::Result<()>,
) -> Result<Way, SessionError> {
    match r {
        Ok(()) => Ok(way),
        Err(e) => {
            way.abandon();
            Err(SessionError::io(format!("syncing {}", job.final_rel), e))
        }
    }
}

/// What goes between the long sync and the last: stamped, given its mode
/// and renamed (see [`Way`]); the part's sync of what they changed is
/// still to come.
pub(super) fn after_sync(root: &Root, job: &FinalJob, way: Way) -> Result<(), SessionError> {
    match way {
        Way::Settled(lease) => stamp_settled(root, job, lease),
        Way::Renamed => rename_dressed(root, job),
    }
}

/// Under a write lease (see [`Way::Settled`]), synced and dressed: the
/// stamp, the mode and the rename within the settling time.
fn stamp_settled(root: &Root, job: &FinalJob, lease: Option<File>) -> Result<(), SessionError> {
    let part = &job.part;
    let mut settled = settle_by();
    // Before the mode: a read-only mode would forbid setting the stamp.
    // Without a stamp a later resume sends the file again: not an error.
    let named = job.named();
    let (secret, owner) = (&job.secret, job.owner);
    // The checksums before the stamp: both within its settling time.
    if let Some(sums) = &job.sums {
        let _ = super::kept::store(named, job.digest, secret, sums);
    }
    let _ = super::stamp::stamp(named, job.digest, secret, owner, Some(settled));
    let renamed = set_mode(part, job.mode)
        .map_err(|e| SessionError::io(format!("setting the mode of {}", job.final_rel), e))
        .and_then(|()| rename_part(root, job));
    // A slow filesystem (FUSE, a network's) may have taken longer than the
    // settling time: stamped again, with a later one, where it may be.
    if renamed.is_ok() && changed_after(part, settled) {
        settled = settle_by();
        let _ = super::stamp::stamp(named, job.digest, secret, owner, Some(settled));
    }
    if let Some(l) = lease {
        super::lease::release_after(l, settled);
    }
    renamed
}

/// Without a lease, for a file others may write (see [`Way::Renamed`]),
/// synced: stamped, renamed, then dressed.
fn rename_dressed(root: &Root, job: &FinalJob) -> Result<(), SessionError> {
    let ctx = |what: &str| format!("{what} {}", job.final_rel);
    let part = &job.part;
    let _ = super::stamp::stamp(job.named(), job.digest, &job.secret, job.owner, None);
    rename_part(root, job)?;
    job.dress.put_on_made(part, job.made_owner).map_err(|e| {
        SessionError::local(
            crate::session::ErrorCode::Io,
            format!("{}: {e}", job.final_rel),
        )
    })?;
    set_mode(part, job.mode).map_err(|e| SessionError::io(ctx("setting the mode of"), e))
}

/// Whether the file's ctime, as its filesystem says it now, is later
/// than `settled` (ns since the epoch).
fn changed_after(file: &File, settled: i128) -> bool {
    crate::datapath::sys::fresh_links_and_ctime(file).is_ok_and(|(_, ctime)| ctime > settled)
}

/// The journal goes first: a crash between the two leaves a part with no
/// journal (sent again), never a journal beside a finished file. The
/// rename moves the very part this session wrote.
///
/// An unnamed part (see `RecvFile::unnamed`) has no journal: it is linked
/// at its final name instead, which nothing held when it was prepared.
/// Should something hold it now, the file replaces it as a rename would:
/// linked at a name of its own beside it and renamed from there (only
/// while that name holds it), that name gone if the rename fails.
fn rename_part(root: &Root, job: &FinalJob) -> Result<(), SessionError> {
    let io = |e| SessionError::io(format!("renaming {}", job.final_rel), e);
    if job.unnamed {
        match root.link_unnamed(&job.part, &job.final_rel) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            other => return other.map_err(io),
        }
        let mut r = [0u8; 8];
        crate::datapath::sys::random_bytes(&mut r).map_err(io)?;
        let tmp = format!(
            "{}.{:016x}{}",
            job.beside().stem(),
            u64::from_le_bytes(r),
            crate::session::PART_SUFFIX
        );
        root.link_unnamed(&job.part, &tmp).map_err(io)?;
        let renamed = root.rename_file(&tmp, &job.final_rel, job.part_id);
        if renamed.is_err() {
            let _ = root.unlink_file(&tmp, job.part_id);
        }
        return renamed.map_err(io);
    }
    journal::remove(root, &job.journal_rel);
    root.rename_file(&job.part_rel(), &job.final_rel, job.part_id)
        .map_err(io)
}

fn set_mode(file: &File, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(std::fs::Permissions::from_mode(mode))
}

/// A committed file held still while the receiver gives it further names
/// (`-H`), which moves its ctime: under a write lease (or where nobody but
/// this receiver's user may write it) and with its stamp read untouched,
/// so that once linked it can be stamped anew. Without one of those the
/// links are made all the same and the next run reads the file.
pub(crate) struct Relink {
    file: File,
    held: super::stamp::Stamped,
    lease: Option<File>,
}

impl Relink {
    /// Hold the file at `rel` (`expect`, when known), if it can be.
    pub(crate) fn hold(
        root: &Root,
        rel: &str,
        expect: Option<FileId>,
        secret: &Secret,
    ) -> Option<Relink> {
        use std::os::unix::fs::MetadataExt;
        let file = root.open_read(rel).ok()?;
        if expect.is_some_and(|want| FileId::of(&file).ok() != Some(want)) {
            return None;
        }
        let lease = super::lease::hold(&file);
        let m = file.metadata().ok()?;
        let own = m.uid() == crate::datapath::sys::effective_uid() && m.mode() & 0o022 == 0;
        let named = Named { file: &file, rel };
        let held = super::stamp::stamped_now(named, secret).filter(|s| s.untouched);
        match held {
            Some(held) if lease.is_some() || own => Some(Relink { file, held, lease }),
            _ => {
                if let Some(l) = &lease {
                    crate::datapath::sys::end_lease(l);
                }
                None
            }
        }
    }

    /// The links made: stamp it anew (same digest and owner) and let go.
    pub(crate) fn settle(self, rel: &str, secret: &Secret) {
        let settled = settle_by();
        let named = Named {
            file: &self.file,
            rel,
        };
        let _ = super::stamp::settle_again(named, &self.held, secret, settled);
        if let Some(l) = self.lease {
            super::lease::release_after(l, settled);
        }
    }
}

/// The settling time of a stamp written now (ns since the epoch): by then
/// the receiver's own last changes to the inode are done.
fn settle_by() -> i128 {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    (now + super::lease::SETTLE_MARGIN).as_nanos() as i128
}

/// Times that give a file `mtime` (and its access time now, as rsync
/// does): both are set at once, since FUSE filesystems of the older
/// protocol (libfuse 2) drop a change of the mtime alone.
pub(crate) fn mtime_now_accessed(mtime: SystemTime) -> std::fs::FileTimes {
    std::fs::FileTimes::new()
        .set_accessed(SystemTime::now())
        .set_modified(mtime)
}

/// A file the sender found complete here by its content (read again: its
/// stamp was another client's, older, or touched since, or `--checksum`):
/// give it the source's mode and mtime and a stamp for this session's
/// owner, through no link, so its next run need not read it.
pub(crate) fn settle_held(root: &Root, f: &RecvFile, rules: &Rules) -> Result<(), SessionError> {
    use std::os::unix::fs::PermissionsExt;
    let file = root
        .open_read(&f.final_rel)
        .map_err(|e| SessionError::io(f.final_rel.clone(), e))?;
    // One name only: never a mode or a stamp through a hardlink. And only
    // the very file that was read, unchanged since (same inode and
    // ctime), ours and writable by nobody else, so nothing renamed into
    // place or written meanwhile is stamped as what was read.
    let same = file.metadata().is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt;
        let seen = FileId::of(&file)
            .ok()
            .map(|id| (id, (m.ctime(), m.ctime_nsec())));
        super::part::is_own_file(&m) && m.mode() & 0o022 == 0 && seen == f.held_seen
    });
    if !same {
        return Ok(());
    }
    // Nobody but this receiver's user may write it (see above): its
    // own last changes are done by the settling time.
    let _ = file.set_times(mtime_now_accessed(f.mtime));
    let settled = settle_by();
    let named = Named {
        file: &file,
        rel: &f.final_rel,
    };
    let _ = super::stamp::stamp(named, f.digest, &rules.secret, rules.owner, Some(settled));
    let _ = file.set_permissions(std::fs::Permissions::from_mode(f.mode));
    Ok(())
}

/// Make the written blocks of a file still arriving durable, then name
/// them in its journal.
pub(crate) struct JournalJob {
    pub(crate) index: u32,
    pub(crate) part: File,
    pub(crate) final_rel: String,
    pub(crate) journal_rel: String,
    pub(crate) journal: Journal,
    pub(crate) secret: Secret,
}

/// Returns the journal's bytes.
///
/// A part with no name (an unnamed one, see `RecvFile::unnamed`, or one
/// unlinked since) gets none: no run could find it again by a journal.
pub(crate) fn write_journal(root: &Root, j: JournalJob) -> Result<u64, SessionError> {
    let ctx = |what: &str| format!("{what} {}", j.final_rel);
    let links = crate::datapath::sys::fresh_links_and_ctime(&j.part)
        .map_err(|e| SessionError::io(ctx("looking at"), e))?
        .0;
    if links == 0 {
        return Ok(0);
    }
    j.part
        .sync_data()
        .map_err(|e| SessionError::io(ctx("syncing"), e))?;
    journal::store(root, &j.journal_rel, &j.journal, &j.secret)
        .map_err(|e| SessionError::io(ctx("writing the journal of"), e))
}
