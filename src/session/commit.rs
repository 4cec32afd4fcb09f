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

use super::journal::{self, Journal};
use super::receive::{FileState, RecvFile, Rules};
use super::secret::Secret;
use super::SessionError;

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
    secret: Secret,
    owner: Option<[u8; 32]>,
    dress: super::receive::Dress,
    /// A live part (`--live-parts`): its attribute goes before the commit.
    live: bool,
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
            secret: rules.secret.clone(),
            owner: rules.owner,
            dress: std::mem::take(&mut f.dress),
            live: rules.live_parts && f.prefix > 0,
        }
    }

    fn part_rel(&self) -> String {
        format!("{}{}", self.final_rel, super::PART_SUFFIX)
    }
}

/// How a file ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Under its final name: (entry, digest).
    Committed(u32, u64),
    /// Differed from the source: (entry, this side's digest).
    Rejected(u32, u64),
}

/// Commit `job` when the digests agree, reject it when they do not.
pub(crate) fn run(root: &Root, job: FinalJob) -> Result<Outcome, SessionError> {
    if job.digest != job.sender_digest {
        let (index, digest) = (job.index, job.digest);
        reject(root, job);
        return Ok(Outcome::Rejected(index, digest));
    }
    finish(root, job).map(|(i, d)| Outcome::Committed(i, d))
}

/// Remove a rejected file's part (only while its name holds the file this
/// session wrote) and its journal: it never counts as complete later.
fn reject(root: &Root, job: FinalJob) {
    let rel = job.part_rel();
    drop(job.part);
    let _ = root.unlink_file(&rel, job.part_id);
    journal::remove(root, &job.final_rel);
}

/// Cut to size, set mtime, stamp, set mode, sync, and rename to the final
/// name. Returns the file's index and digest.
pub(crate) fn finish(root: &Root, job: FinalJob) -> Result<(u32, u64), SessionError> {
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(job.digest, job.sender_digest, "only agreed files commit");
    let ctx = |what: &str| format!("{what} {}", job.final_rel);
    let part = &job.part;
    part.set_len(job.size)
        .map_err(|e| SessionError::io(ctx("truncating"), e))?;
    part.set_times(std::fs::FileTimes::new().set_modified(job.mtime))
        .map_err(|e| SessionError::io(ctx("setting the mtime of"), e))?;
    job.dress.put_on(part).map_err(|e| {
        SessionError::local(super::ErrorCode::Io, format!("{}: {e}", job.final_rel))
    })?;
    // The long sync before the stamp: what follows it (mode, a metadata
    // sync, the rename) is quick, well within the stamp's settling time.
    part.sync_all()
        .map_err(|e| SessionError::io(ctx("syncing"), e))?;
    // Before the mode: a read-only mode would forbid setting the stamp.
    // Without a stamp a later resume sends the file again: not an error.
    if job.live {
        // A committed file is whole: no reader needs its prefix.
        crate::datapath::sys::remove_xattr(part, super::receive::LIVE_XATTR)
            .map_err(|e| SessionError::io(ctx("clearing the live attribute of"), e))?;
    }
    let named = (part, job.final_rel.as_str());
    let _ = journal::stamp(named, job.digest, (&job.secret, job.owner));
    part.set_permissions(std::fs::Permissions::from_mode(job.mode))
        .map_err(|e| SessionError::io(ctx("setting the mode of"), e))?;
    part.sync_all()
        .map_err(|e| SessionError::io(ctx("syncing"), e))?;
    // The journal goes first: a crash between the two leaves a part with
    // no journal (sent again), never a journal beside a finished file.
    journal::remove(root, &job.final_rel);
    root.rename_file(&job.part_rel(), &job.final_rel, job.part_id)
        .map_err(|e| SessionError::io(ctx("renaming"), e))?;
    Ok((job.index, job.digest))
}

/// A file the sender found complete here by its content (read again: its
/// stamp was another client's, older, or touched since, or `--checksum`):
/// give it the source's mode and mtime and a stamp for this session's
/// owner, through no link, so its next run need not read it.
pub(crate) fn settle_held(root: &Root, f: &RecvFile, rules: &Rules) -> Result<(), SessionError> {
    use std::os::unix::fs::PermissionsExt;
    let file = root
        .open_file(
            &f.final_rel,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0,
        )
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
        super::receive::is_own_file(&m) && m.mode() & 0o022 == 0 && seen == f.held_seen
    });
    if !same {
        return Ok(());
    }
    let _ = file.set_times(std::fs::FileTimes::new().set_modified(f.mtime));
    let named = (&file, f.final_rel.as_str());
    let _ = journal::stamp(named, f.digest, (&rules.secret, rules.owner));
    let _ = file.set_permissions(std::fs::Permissions::from_mode(f.mode));
    Ok(())
}

/// Make the written blocks of a file still arriving durable, then name
/// them in its journal.
pub(crate) struct JournalJob {
    pub(crate) index: u32,
    pub(crate) part: File,
    pub(crate) final_rel: String,
    pub(crate) journal: Journal,
    pub(crate) secret: Secret,
}

/// Returns the journal's bytes.
pub(crate) fn write_journal(root: &Root, j: JournalJob) -> Result<u64, SessionError> {
    let ctx = |what: &str| format!("{what} {}", j.final_rel);
    j.part
        .sync_data()
        .map_err(|e| SessionError::io(ctx("syncing"), e))?;
    journal::store(root, &j.final_rel, &j.journal, &j.secret)
        .map_err(|e| SessionError::io(ctx("writing the journal of"), e))
}
