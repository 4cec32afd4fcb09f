//! The shared part of a split file (`send --shard`): joined by every
//! session that writes one of its pieces, each piece's range locked, its
//! generation recorded, the whole committed under a lock by the last.

use std::fs::File;
use std::time::{Duration, Instant};

use crate::datapath::beneath::{FileId, Root};
use crate::datapath::DirectMode;
use crate::protocol::manifest::Piece;

use super::beside::Beside;
use super::file::RecvFile;
use super::journal::{self};
use super::part::{clear_name, forget_journals, is_own_file, joined, new_part};
use crate::session::link::secret::Secret;
use crate::session::{Contended, SessionError};

/// A piece's part joined ([`join_part`]) and its range locked while its
/// name still holds it (a part committed or replaced meanwhile is left
/// for the one there now). The piece starts from nothing: a journal of it
/// there speaks of bytes this session now writes over, and goes, and
/// its own journals get a generation of their own.
pub(super) fn join_piece(
    root: &Root,
    secret: &Secret,
    direct: DirectMode,
    f: &mut RecvFile,
    p: Piece,
) -> Result<(), SessionError> {
    for _ in 0..4 {
        join_part(root, direct, f, p)?;
        if lock_span(root, secret, f)? {
            return f.write_own(root, secret);
        }
        f.part_id = None;
    }
    Err(SessionError::Contended(Contended::PartChanging {
        rel: f.part_rel(),
    }))
}

/// A piece's writes go to its range of the shared part, locked for this
/// opening: another session bringing an overlapping range, or committing
/// the file (in this daemon or another on the same filesystem), makes it
/// busy. Once locked, no commit can rename the part until this opening
/// closes: `false` (the part let go) when its name no longer holds it
/// (committed or replaced before the lock).
pub(super) fn lock_span(
    root: &Root,
    secret: &Secret,
    f: &mut RecvFile,
) -> Result<bool, SessionError> {
    let (Some(_), Some(part)) = (f.piece, f.part.as_ref()) else {
        return Ok(true);
    };
    let (start, end) = f.span;
    match lock_waiting(part, start, end - start) {
        Ok(()) => {
            let named = root
                .symlink_metadata(&f.part_rel())
                .is_ok_and(|m| f.part_id == Some(FileId::of_metadata(&m)));
            if !named {
                f.part = None;
                return Ok(false);
            }
            still_its_journal(root, secret, f).map(|()| true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            f.part = None;
            Err(SessionError::Contended(Contended::Span {
                rel: f.final_rel.clone(),
                start,
                end,
            }))
        }
        Err(e) => Err(SessionError::io(format!("locking {}", f.part_rel()), e)),
    }
}

/// Under the piece's lock: the journal there still carries the generation
/// this session left it with (none expected before it held the piece).
/// Otherwise another session wrote the piece since (it journals its own
/// generation first), perhaps over blocks this one verified: busy, the
/// part let go.
pub(super) fn still_its_journal(
    root: &Root,
    secret: &Secret,
    f: &mut RecvFile,
) -> Result<(), SessionError> {
    let Some(expected) = f.journal_by else {
        return Ok(());
    };
    let now = journal::load(root, &f.journal_rel(), secret, &|id| *id == f.id);
    let (part, piece) = (f.part.as_ref(), f.piece.expect("a piece"));
    let recorded = part.and_then(|p| piece_generation(p, piece));
    if now.is_some_and(|j| j.generation == expected) && recorded == Some(expected) {
        return Ok(());
    }
    f.part = None;
    Err(SessionError::Contended(Contended::PieceRewritten {
        rel: f.final_rel.clone(),
    }))
}

/// How long a piece's opening waits for a lock on the whole file (a
/// session finishing its piece looks whether every piece is there, or
/// commits the file) to go, before it says busy.
pub(super) const WHOLE_LOCK_WAIT: Duration = Duration::from_secs(3);

/// Lock `len` bytes of `part` from `start` ([`sys::lock_range`]), waiting
/// up to [`WHOLE_LOCK_WAIT`] while what is in the way is a lock on the
/// whole file; another session's range is in the way at once.
///
/// [`sys::lock_range`]: crate::datapath::sys::lock_range
pub(super) fn lock_waiting(part: &File, start: u64, len: u64) -> std::io::Result<()> {
    use crate::datapath::sys::{lock_in_the_way, lock_range};
    let until = Instant::now() + WHOLE_LOCK_WAIT;
    loop {
        match lock_range(part, start, len) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < until => {
                if lock_in_the_way(part, start, len)?.is_some_and(|w| w != (0, 0)) {
                    return Err(e);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

/// What marks a part shared by the pieces of a split file: into how many
/// pieces, of which source (its size and mtime) in which blocks. Only such
/// a part, ours and marked for the very same, is joined: a session
/// bringing another version of the file (or another split of it) makes a
/// new part, so it never writes over blocks the others journaled.
pub(crate) const PIECES_XATTR: &std::ffi::CStr = c"user.urmove.pieces";

/// The attribute of a shared part that names the generation of the last
/// session to write piece `p` (set under the piece's lock before its first
/// write): a journal of the piece with another is not the piece's as it is
/// now, however authentic (one a local user put back beside the part).
pub(super) fn generation_xattr(p: Piece) -> std::ffi::CString {
    std::ffi::CString::new(format!("user.urmove.g.{}", p.index)).expect("no NUL")
}

/// The generation recorded on `part` for piece `p`.
pub(crate) fn piece_generation(part: &File, p: Piece) -> Option<[u8; 16]> {
    crate::datapath::sys::get_xattr(part, &generation_xattr(p))?
        .try_into()
        .ok()
}

pub(super) fn set_piece_generation(
    part: &File,
    p: Piece,
    generation: &[u8; 16],
) -> std::io::Result<()> {
    crate::datapath::sys::set_xattr(part, &generation_xattr(p), generation)
}

/// Clear a committed file's pieces' generations (the part's, not the file's).
pub(crate) fn clear_piece_generations(part: &File, count: u32) -> std::io::Result<()> {
    for index in 0..count {
        let name = generation_xattr(Piece { index, count });
        crate::datapath::sys::remove_xattr(part, &name)?;
    }
    Ok(())
}

/// The value of [`PIECES_XATTR`] for `f`'s pieces.
pub(super) fn pieces_mark(f: &RecvFile, p: Piece) -> String {
    let id = &f.id;
    let name = xxhash_rust::xxh3::xxh3_64(f.final_rel.as_bytes());
    format!(
        "{} {} {}.{:09} {} {name:016x}",
        p.count, id.size, id.mtime_s, id.mtime_ns, id.block
    )
}

/// The part of a split file: the one the sessions bringing its other
/// pieces made (ours, one name, marked for as many pieces), else a new
/// one (whatever else sat at its name is removed, as [`create_part`]
/// does). Its blocks outside this piece's are not this session's: a hole
/// in its range clears what an earlier session may have left.
pub(super) fn join_part(
    root: &Root,
    direct: DirectMode,
    f: &mut RecvFile,
    p: Piece,
) -> Result<(), SessionError> {
    let rel = f.part_rel();
    let io = |e| SessionError::io(rel.clone(), e);
    let mark = pieces_mark(f, p);
    for _ in 0..4 {
        let flags = libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK;
        match root.open_direct(&rel, flags, 0, direct) {
            Ok((part, is_direct)) => {
                let ours = part.metadata().is_ok_and(|m| is_own_file(&m))
                    && crate::datapath::sys::get_xattr(&part, PIECES_XATTR).as_deref()
                        == Some(mark.as_bytes());
                if ours {
                    f.part_tag = journal::part_tag(&part);
                    return joined(f, part, is_direct).map_err(io);
                }
                drop(part);
                forget_pieces(root, f.beside());
                clear_name(root, &rel)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // Another user's part (mode 0600): a receiver of the shared
            // root runs as another user than the one that made it.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(SessionError::io(
                    format!("{rel} (another user's: receivers sharing a root must run as one user, with one secret)"),
                    e,
                ))
            }
            // A link, a FIFO, a directory: removed (a directory refused).
            Err(_) => clear_name(root, &rel)?,
        }
        match new_part(root, direct, &rel, Some(&mark)) {
            Ok((part, is_direct, tag)) => {
                // The journals of an earlier part are of no use (and its
                // tag is not this one's).
                forget_journals(root, f.beside(), p.count);
                f.part_tag = tag;
                return joined(f, part, is_direct).map_err(io);
            }
            // Another session made it first: join that one.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io(e)),
        }
    }
    Err(SessionError::Contended(Contended::PartChanging {
        rel: rel.to_string(),
    }))
}

/// Before a shared part at `final_rel`'s part name is replaced (by a
/// whole file's part, or another version's pieces): the journals of its
/// pieces go too, as many as its mark says (they speak of that part, and
/// would be left beside the file for ever).
pub(super) fn forget_pieces(root: &Root, beside: Beside<'_>) {
    let rel = beside.part();
    let Ok(part) = root.open_read(&rel) else {
        return;
    };
    if !part.metadata().is_ok_and(|m| is_own_file(&m)) {
        return;
    }
    let count = crate::datapath::sys::get_xattr(&part, PIECES_XATTR)
        .and_then(|mark| {
            let text = String::from_utf8(mark).ok()?;
            text.split(' ').next()?.parse::<u32>().ok()
        })
        .filter(|&n| n <= crate::protocol::manifest::PIECES_MAX);
    forget_journals(root, beside, count.unwrap_or(0));
}
