//! The manifest as the sink takes it: in parts, within the session's text
//! and entry budgets, every entry checked (paths, duplicates, links,
//! blocks) before anything is made.

use std::collections::HashSet;

use crate::protocol::control::{ErrorCode, Message};
use crate::protocol::manifest::{check_entry, Entry, EntryKind, ENTRIES_MAX};

use super::incoming::join;
use super::rules::ENTRY_COST_BYTES;
use crate::session::link::conn::recv_msg;
use crate::session::SessionError;

/// Bytes of paths and link targets one manifest may carry.
pub(super) const MANIFEST_TEXT_BYTES_MAX: u64 = 256 << 20;

/// Read manifest parts until its end, bounded in entries (by `max` and
/// the protocol's own bound) and in memory (`reserve` is asked for every
/// part's cost before it is kept, and may refuse).
pub(crate) fn recv_manifest(
    s: &mut crate::session::link::conn::Control,
    max: u32,
    reserve: &mut dyn FnMut(u64) -> Result<(), SessionError>,
) -> Result<Vec<Entry>, SessionError> {
    let max = max.min(ENTRIES_MAX);
    let mut entries: Vec<Entry> = Vec::new();
    let mut text_bytes = 0u64;
    loop {
        let part = match recv_msg(s)? {
            Message::Manifest(part) => part,
            Message::ManifestEnd => return Ok(entries),
            m => return Err(crate::session::link::conn::unexpected(s, &m)),
        };
        let text: u64 = part.iter().map(|e| e.text_len() as u64).sum();
        text_bytes += text;
        if text_bytes > MANIFEST_TEXT_BYTES_MAX {
            return Err(SessionError::local(
                ErrorCode::TooLarge,
                "manifest paths exceed 256 MiB",
            ));
        }
        if entries.len() as u64 + part.len() as u64 > u64::from(max) {
            return Err(SessionError::Limit(
                crate::session::limit::LimitRefusal::ours(
                    crate::protocol::control::Limit::Entries,
                    entries.len() as u64 + part.len() as u64,
                    u64::from(max),
                    0,
                ),
            ));
        }
        reserve(3 * text + part.len() as u64 * ENTRY_COST_BYTES)?;
        entries.extend(part);
    }
}

/// How many names each file that hard links name has in `entries` (its
/// own and the links'), by the final path of its first name under `dest`.
pub(super) fn names_of_links(
    dest: &str,
    entries: &[Entry],
) -> std::collections::HashMap<String, u64> {
    let mut names = std::collections::HashMap::new();
    for e in entries.iter().filter(|e| e.kind == EntryKind::HardLink) {
        let first = join(dest, e.link.as_deref().unwrap_or_default());
        *names.entry(first).or_insert(1) += 1;
    }
    names
}

/// Check every entry: paths, duplicates, and the session's block count.
pub(super) fn check_entries(
    entries: &[Entry],
    block: u64,
    follow: bool,
) -> Result<(), SessionError> {
    if let Some(e) = entries.iter().find(|e| e.growing && !follow) {
        return Err(SessionError::local(
            ErrorCode::BadRequest,
            format!("{}: a growing file in a session that follows none", e.path),
        ));
    }
    let blocks: u64 = entries
        .iter()
        .filter(|e| e.kind == EntryKind::File)
        .map(|e| e.size.div_ceil(block))
        .fold(0u64, u64::saturating_add);
    if blocks > crate::session::SESSION_BLOCKS_MAX {
        return Err(SessionError::local(
            ErrorCode::TooLarge,
            format!("the manifest holds {blocks} blocks, more than one session takes; use larger blocks or split it"),
        ));
    }
    let mut paths = HashSet::with_capacity(entries.len());
    let mut files = HashSet::new();
    for e in entries {
        let first = e.link.as_deref().unwrap_or_default();
        if e.kind == EntryKind::HardLink && !files.contains(first) {
            return Err(SessionError::local(
                ErrorCode::BadRequest,
                format!(
                    "{}: a hard link to {first}, which is no file listed before it",
                    e.path
                ),
            ));
        }
        if e.kind == EntryKind::File && e.piece.is_none() {
            files.insert(e.path.as_str());
        }
        if e.kind == EntryKind::HardLink && e.piece.is_some() {
            return Err(SessionError::local(
                ErrorCode::BadRequest,
                format!("{}: a hard link to a piece of a file", e.path),
            ));
        }
        if e.piece.is_some_and(|_| e.span_len(block) == 0) {
            return Err(SessionError::local(
                ErrorCode::BadRequest,
                format!(
                    "{}: a piece of a file with fewer blocks than pieces",
                    e.path
                ),
            ));
        }
        if !paths.insert(e.path.as_str()) {
            return Err(SessionError::local(
                ErrorCode::BadRequest,
                format!("{}: named twice in the manifest", e.path),
            ));
        }
        check_entry(e).map_err(|err| {
            SessionError::local(ErrorCode::PathRefused, format!("{}: {err}", e.path))
        })?;
    }
    Ok(())
}

/// Bytes covered by the set bits of `blocks` in a file of `size`.
pub(super) fn covered(blocks: &[u64], size: u64, block: u64) -> u64 {
    let n = size.div_ceil(block);
    (0..n)
        .filter(|b| blocks[(b / 64) as usize] & (1 << (b % 64)) != 0)
        .map(|b| (size - b * block).min(block))
        .sum()
}
