//! A file's part (`NAME.urmove.part`): claimed by device and inode
//! against every other session, made with no name and linked once tagged,
//! joined or opened again, and what stands in its way cleared.

use std::collections::HashSet;
use std::fs::File;

use crate::datapath::beneath::{FileId, Root};
use crate::datapath::DirectMode;
use crate::protocol::control::ErrorCode;
use crate::protocol::manifest::Piece;

use super::beside::Beside;
use super::file::RecvFile;
use super::journal::{self};
use super::pieces::{forget_pieces, join_piece, lock_span, PIECES_XATTR};
use super::rules::Rules;
use crate::session::{Contended, SessionError, PART_SUFFIX};

pub(super) fn lock_claims(rules: &Rules) -> std::sync::MutexGuard<'_, HashSet<FileId>> {
    rules.claims.lock().unwrap_or_else(|p| p.into_inner())
}

/// Let go of `f`'s claim on its part, now committed whole under its final
/// name (or, rejected, gone): no session writes it as a part again, and
/// its inode's number may be given to another session's new part, whose
/// claim must not find it taken. Once only: the session's end (or a
/// later session's claim of the reused number) is not disturbed again.
pub(super) fn release_claim(rules: &Rules, f: &mut RecvFile) {
    if let (Some(id), false, None) = (f.part_id, f.released, f.piece) {
        lock_claims(rules).remove(&id);
        f.released = true;
    }
}

/// Claim the file `id` for this session; another session has it: busy.
pub(super) fn claim(rules: &Rules, rel: &str, id: FileId) -> Result<(), SessionError> {
    let mut set = lock_claims(rules);
    if !set.insert(id) {
        return Err(SessionError::Contended(Contended::Writing {
            rel: rel.to_string(),
        }));
    }
    Ok(())
}

/// Open `f`'s part file to write a block: the one this session made or
/// continues (by name, and only while the name still holds it), else a new
/// one. Never through a symlink, never an inode someone else put there.
pub(crate) fn open_part(
    root: &Root,
    direct: DirectMode,
    rules: &Rules,
    f: &mut RecvFile,
) -> Result<(), SessionError> {
    if f.part.is_some() {
        return Ok(());
    }
    let direct = write_mode(direct, f);
    match (f.part_id, f.piece) {
        (Some(id), None) => reopen_part(root, direct, f, id),
        (Some(id), Some(_)) => {
            reopen_part(root, direct, f, id)?;
            match lock_span(root, &rules.secret, f)? {
                true => Ok(()),
                false => Err(SessionError::Contended(Contended::Replaced {
                    rel: f.final_rel.clone(),
                })),
            }
        }
        (None, Some(p)) => join_piece(root, &rules.secret, direct, f, p),
        (None, None) => create_part(root, direct, rules, f),
    }
}

/// A file this large or smaller is written through the page cache
/// (`--direct auto`): its last block is then written at its true length,
/// where an O_DIRECT write pads it to a whole page and the commit cuts it
/// back, which makes the filesystem read that page from the disk again to
/// zero its tail (a read per file, synchronous). Its sync writes it.
pub(crate) const BUFFERED_FILE_MAX: u64 = 256 << 10;

/// How `f`'s part is opened: buffered where `direct` leaves the choice
/// (`auto`) and the file is small ([`BUFFERED_FILE_MAX`]).
fn write_mode(direct: DirectMode, f: &RecvFile) -> DirectMode {
    match direct {
        DirectMode::Auto if f.size <= BUFFERED_FILE_MAX => DirectMode::Off,
        other => other,
    }
}

/// Open `f`'s part to finish it ([`open_part`]); a piece whose blocks were
/// all held may find it committed already by the session that brought
/// the last piece: the very inode, under its final name (read only: the
/// finish only syncs it and takes its lock).
pub(crate) fn open_to_finish(
    root: &Root,
    direct: DirectMode,
    rules: &Rules,
    f: &mut RecvFile,
) -> Result<(), SessionError> {
    let opened = open_part(root, direct, rules, f);
    let (Err(_), Some(_), Some(id)) = (&opened, f.piece, f.part_id) else {
        return opened;
    };
    match root.open_read(&f.final_rel) {
        Ok(done) if FileId::of(&done).ok() == Some(id) => {
            f.part = Some(done);
            Ok(())
        }
        _ => opened,
    }
}

/// A new part at `rel`, tagged (and, a shared one, marked `mark`) before
/// it has its name (made with none and linked there, or under a name of
/// its own and renamed, where nothing is): a session that finds it there
/// finds its tag and mark. `Err(AlreadyExists)` when another came first.
pub(super) fn new_part(
    root: &Root,
    direct: DirectMode,
    rel: &str,
    mark: Option<&str>,
) -> std::io::Result<(File, bool, [u8; 16])> {
    use crate::datapath::sys::{random_bytes, set_xattr};
    let mut tag = [0u8; 16];
    random_bytes(&mut tag)?;
    let dir = rel.rsplit_once('/').map_or("", |(d, _)| d);
    if let Some((part, is_direct)) = root.open_unnamed(dir, 0o600, direct)? {
        tag_part(&part, &mut tag, mark.is_some())?;
        mark.map_or(Ok(()), |m| set_xattr(&part, PIECES_XATTR, m.as_bytes()))?;
        root.link_unnamed(&part, rel)?;
        return Ok((part, is_direct, tag));
    }
    let base = rel.strip_suffix(PART_SUFFIX).unwrap_or(rel);
    let name = u64::from_le_bytes(tag[..8].try_into().expect("8 bytes"));
    let tmp = format!("{base}.{name:016x}{PART_SUFFIX}");
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_NONBLOCK;
    let (part, is_direct) = root.open_direct(&tmp, flags, 0o600, direct)?;
    let placed = tag_part(&part, &mut tag, mark.is_some())
        .and_then(|()| mark.map_or(Ok(()), |m| set_xattr(&part, PIECES_XATTR, m.as_bytes())))
        .and_then(|()| root.rename_new(&tmp, rel));
    match placed {
        Ok(()) => Ok((part, is_direct, tag)),
        Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
            linked_part(root, direct, &tmp, rel, part, tag)
        }
        Err(e) => {
            let _ = root.unlink(&tmp);
            Err(e)
        }
    }
}

/// Where a rename cannot refuse a taken name: the tagged part at `tmp`
/// linked at `rel` (refused if taken), closed before its first name goes
/// (or FUSE and NFS would keep it under a hidden name, counting two links
/// until this session's last close), and opened again at `rel`: the very
/// part by its tag (or, untagged, its inode), or `Err(AlreadyExists)` as
/// when another came first.
pub(super) fn linked_part(
    root: &Root,
    direct: DirectMode,
    tmp: &str,
    rel: &str,
    part: File,
    tag: [u8; 16],
) -> std::io::Result<(File, bool, [u8; 16])> {
    let id = FileId::of(&part)?;
    let linked = root.link_new(tmp, rel);
    drop(part);
    let _ = root.unlink(tmp);
    linked?;
    let flags = libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK;
    let (again, is_direct) = root.open_direct(rel, flags, 0, direct)?;
    let same = match tag == [0; 16] {
        true => FileId::of(&again)? == id,
        false => crate::datapath::sys::get_xattr(&again, journal::PART_TAG_XATTR)
            .is_some_and(|t| t[..] == tag[..]),
    };
    match same {
        true => Ok((again, is_direct, tag)),
        false => Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{rel}: another part took its name"),
        )),
    }
}

/// Give `part` its tag. A whole file's part on a filesystem without user
/// attributes goes untagged (`tag` all zeros: its journal is found by its
/// own name, which its part's making clears, and no shared part is made
/// there); a shared one needs them.
pub(super) fn tag_part(part: &File, tag: &mut [u8; 16], shared: bool) -> std::io::Result<()> {
    match crate::datapath::sys::set_xattr(part, journal::PART_TAG_XATTR, tag) {
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) && !shared => {
            *tag = [0; 16];
            Ok(())
        }
        r => r,
    }
}

/// `f` writes into `part` now (a shared part's blocks are another
/// session's, or were, until this one's lock: a hole it brings is cleared).
pub(super) fn joined(f: &mut RecvFile, part: File, is_direct: bool) -> std::io::Result<()> {
    f.part_id = Some(FileId::of(&part)?);
    f.stale = true;
    f.part = Some(part);
    f.opened = f.opened.wrapping_add(1);
    f.direct = is_direct;
    Ok(())
}

/// A new part file, made with `O_EXCL`: whatever sat at its name (a stale
/// part, a planted file, a hardlink, a FIFO, a link) is removed first and
/// never written through. Claimed by device and inode.
pub(super) fn create_part(
    root: &Root,
    direct: DirectMode,
    rules: &Rules,
    f: &mut RecvFile,
) -> Result<(), SessionError> {
    if may_go_unnamed(rules, f) && create_unnamed(root, direct, rules, f)? {
        return Ok(());
    }
    let rel = f.part_rel();
    let io = |e| SessionError::io(rel.clone(), e);
    let mut tries = 0;
    let (part, is_direct, tag) = loop {
        match new_part(root, direct, &rel, None) {
            Ok(p) => break p,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 3 => {
                tries += 1;
                forget_pieces(root, f.beside());
                clear_name(root, &rel)?;
            }
            Err(e) => return Err(io(e)),
        }
    };
    let made = part.metadata().map_err(io)?;
    let id = FileId::of_metadata(&made);
    claim(rules, &rel, id)?;
    f.made_owner = Some(owner_of(&made));
    if rules.live_parts && f.growing {
        // Readable as the file will be, but writable by this user alone
        // while it is received (and its setid bits never).
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::Permissions::from_mode(f.mode & 0o755);
        part.set_permissions(mode).map_err(io)?;
    }
    f.part_id = Some(id);
    f.part_tag = tag;
    journal::remove(root, &f.journal_rel());
    f.part = Some(part);
    f.opened = f.opened.wrapping_add(1);
    f.direct = is_direct;
    Ok(())
}

/// Whether `f` may be written into a part with no name (see
/// [`RecvFile::unnamed`]): a small whole file (no piece, not growing, no
/// live part to show), new in a place where nothing of its name was.
fn may_go_unnamed(rules: &Rules, f: &RecvFile) -> bool {
    f.fresh
        && f.piece.is_none()
        && !f.growing
        && !rules.live_parts
        && f.size <= super::batch::BATCH_FILE_MAX
}

/// A new part for `f` with no name (`O_TMPFILE`), untagged (no journal
/// names it), claimed by device and inode; false where the filesystem
/// makes no such files (a named one is made instead). Nothing was beside
/// it when prepared: no journal to clear.
fn create_unnamed(
    root: &Root,
    direct: DirectMode,
    rules: &Rules,
    f: &mut RecvFile,
) -> Result<bool, SessionError> {
    let io = |e| SessionError::io(f.final_rel.clone(), e);
    let dir = f.final_rel.rsplit_once('/').map_or("", |(d, _)| d);
    let Some((part, is_direct)) = root.open_unnamed(dir, 0o600, direct).map_err(io)? else {
        return Ok(false);
    };
    let made = part.metadata().map_err(io)?;
    let id = FileId::of_metadata(&made);
    claim(rules, &f.final_rel, id)?;
    f.part_id = Some(id);
    f.part_tag = [0; 16];
    f.unnamed = true;
    f.made_owner = Some(owner_of(&made));
    f.part = Some(part);
    f.opened = f.opened.wrapping_add(1);
    f.direct = is_direct;
    Ok(true)
}

/// Give `f`'s unnamed part (open as `part`) its part name, as a part made
/// named has (untagged: its journal is found by that name), so that it
/// may be closed and opened again by name; whatever sat there goes, as
/// [`create_part`] clears it. False when it could not be named: it must
/// stay open (closed, its bytes would be gone).
pub(crate) fn name_unnamed(root: &Root, f: &mut RecvFile, part: &File) -> bool {
    let rel = f.part_rel();
    for _ in 0..3 {
        match root.link_unnamed(part, &rel) {
            Ok(()) => {
                f.unnamed = false;
                journal::remove(root, &f.journal_rel());
                return true;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                forget_pieces(root, f.beside());
                if clear_name(root, &rel).is_err() {
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
    false
}

/// The owner (uid, gid) `m` names.
fn owner_of(m: &std::fs::Metadata) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    (m.uid(), m.gid())
}

/// Remove the journals of a file's `count` pieces.
pub(super) fn forget_journals(root: &Root, beside: Beside<'_>, count: u32) {
    for index in 0..count {
        let piece = Piece { index, count };
        journal::remove(root, &beside.journal(Some(piece)));
    }
}

/// Remove what is not a directory at `rel` (its name only: a hardlink's
/// other names and a link's target are untouched).
pub(super) fn clear_name(root: &Root, rel: &str) -> Result<(), SessionError> {
    match root.symlink_metadata(rel) {
        Ok(m) if m.is_dir() => Err(SessionError::local(
            ErrorCode::PathRefused,
            format!("{rel}: a directory is in the way of the part file"),
        )),
        Ok(_) => root
            .unlink(rel)
            .map_err(|e| SessionError::io(rel.to_string(), e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(SessionError::io(rel.to_string(), e)),
    }
}

/// Open again the part this session made (closed while it waited), only
/// while its name still holds that very file.
pub(super) fn reopen_part(
    root: &Root,
    direct: DirectMode,
    f: &mut RecvFile,
    id: FileId,
) -> Result<(), SessionError> {
    let rel = f.part_rel();
    let flags = libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK;
    let (part, is_direct) = root
        .open_direct(&rel, flags, 0, direct)
        .map_err(|e| SessionError::io(rel.clone(), e))?;
    if FileId::of(&part).ok() != Some(id) || !part.metadata().is_ok_and(|m| m.is_file()) {
        return Err(SessionError::local(
            ErrorCode::Io,
            format!("{rel}: replaced by another file since this session made it"),
        ));
    }
    f.part = Some(part);
    f.opened = f.opened.wrapping_add(1);
    f.direct = is_direct;
    Ok(())
}

/// Whether `m` is a file this process may trust as its own: a regular
/// file with one name, owned by its user (a hardlink's other name, or a
/// file a local user made, is not).
pub(crate) fn is_own_file(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    m.is_file() && m.nlink() == 1 && m.uid() == crate::datapath::sys::effective_uid()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::manifest::{Entry, EntryKind};

    /// The part of a new file of `size` bytes at `rel`, opened as `direct`
    /// asks (claimed in a session of its own): whether it was opened
    /// O_DIRECT.
    fn opened_direct(root: &Root, rel: &str, size: u64, direct: DirectMode) -> bool {
        let e = Entry {
            path: rel.into(),
            kind: EntryKind::File,
            size,
            mode: 0o644,
            ..Default::default()
        };
        let rules = Rules::plain([5; 32], 1 << 20);
        let mut f = RecvFile::new(&e, rel.into(), 255, 4096, &rules);
        f.fresh = true;
        open_part(root, direct, &rules, &mut f).unwrap();
        let flags = crate::datapath::direct::is_direct(f.part.as_ref().unwrap());
        assert_eq!(flags.unwrap(), f.direct, "{rel}: as noted");
        f.direct
    }

    /// Under `--direct auto` a small file is written through the page cache
    /// (its last block at its true length: no page read back to cut it), a
    /// larger one O_DIRECT; `required` writes every file O_DIRECT.
    #[test]
    fn small_files_are_written_buffered_unless_direct_is_required() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let root = Root::open_for_writing(dir.path()).unwrap();
        let (auto, required) = (DirectMode::Auto, DirectMode::Required);
        assert!(!opened_direct(&root, "a", 5000, auto));
        assert!(!opened_direct(&root, "b", BUFFERED_FILE_MAX, auto));
        assert!(opened_direct(&root, "c", BUFFERED_FILE_MAX + 1, auto));
        assert!(opened_direct(&root, "d", 5000, required));
    }

    /// A committed part's claim goes at once, and once only: the inode's
    /// number, reused by another session's new part, is then that
    /// session's to claim, and this session's end does not take it back.
    #[test]
    fn a_committed_parts_claim_is_let_go_once() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let root = Root::open_for_writing(dir.path()).unwrap();
        let rules = Rules::plain([5; 32], 1 << 20);
        let e = Entry {
            path: "a".into(),
            kind: EntryKind::File,
            size: 10,
            mode: 0o644,
            ..Default::default()
        };
        let mut f = RecvFile::new(&e, "a".into(), 255, 4096, &rules);
        f.fresh = true;
        open_part(&root, DirectMode::Off, &rules, &mut f).unwrap();
        let id = f.part_id.unwrap();
        assert!(lock_claims(&rules).contains(&id), "claimed when made");
        release_claim(&rules, &mut f);
        assert!(!lock_claims(&rules).contains(&id), "let go when committed");
        claim(&rules, "another session's", id).unwrap();
        release_claim(&rules, &mut f);
        assert!(lock_claims(&rules).contains(&id), "the other's claim stays");
    }
}
