//! The names of urmove's own files beside a file being received: its part
//! (`NAME.urmove.part`, made under `NAME.HEX.urmove.part` first), its
//! journal (`NAME.urmove.journal`; a piece's `NAME.K.urmove.piece`) and
//! their temporaries (`.tmp`). Each is the file's *stem* and an ending of at
//! most [`ENDING_MAX`] bytes.
//!
//! The stem is the file's own name when that leaves room for every ending
//! within the longest name its directory's filesystem takes (`NAME_MAX`:
//! 255 bytes on ext4 and XFS). A longer name is shortened, as rsync
//! shortens its temporaries: its first bytes, `~` and 32 hex digits of the
//! SHA-256 of the whole name. Either way it follows from the name and the
//! filesystem alone, so a resume finds its part and journal again, and
//! every name here ends in one of the reserved suffixes, which no path from
//! the wire may have. A key holder who sends a file named as another's
//! shortened stem contends for the same part, as one sending the same name
//! does: its inode claims and digests keep each file's bytes its own.

use std::borrow::Cow;

use crate::protocol::manifest::{Piece, PIECES_MAX};
use crate::protocol::names::{byte_len, prefix_within};

use super::journal::{JOURNAL_SUFFIX, PIECE_SUFFIX};
use crate::session::PART_SUFFIX;

/// The longest ending after a stem: a new part's temporary,
/// `.{16 hex}.urmove.part` (29 bytes).
pub(crate) const ENDING_MAX: usize = 1 + 16 + PART_SUFFIX.len();

/// Bytes of a shortened stem's mark: `~` and 32 hex digits.
const MARK_LEN: usize = 1 + 32;

// A piece journal's temporary, `.{K}.urmove.piece.tmp`, fits too.
const _: () = assert!(1 + 4 + PIECE_SUFFIX.len() + 4 <= ENDING_MAX && PIECES_MAX <= 10_000);
const _: () = assert!(JOURNAL_SUFFIX.len() + 4 <= ENDING_MAX);

/// Where a received file's own files go: its path under the root and the
/// longest name its directory takes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Beside<'a> {
    pub(crate) final_rel: &'a str,
    pub(crate) name_max: usize,
}

impl<'a> Beside<'a> {
    pub(crate) fn new(final_rel: &'a str, name_max: usize) -> Self {
        Beside {
            final_rel,
            name_max,
        }
    }

    /// The file's stem: its path, or (a name too long to take an ending)
    /// its directory and its name shortened.
    pub(crate) fn stem(&self) -> Cow<'a, str> {
        let (dir, name) = match self.final_rel.rsplit_once('/') {
            Some((dir, name)) => (Some(dir), name),
            None => (None, self.final_rel),
        };
        let room = self.name_max.saturating_sub(ENDING_MAX);
        if byte_len(name) <= room {
            return Cow::Borrowed(self.final_rel);
        }
        let short = shortened(name, room);
        Cow::Owned(match dir {
            Some(dir) => format!("{dir}/{short}"),
            None => short,
        })
    }

    /// Its part file.
    pub(crate) fn part(&self) -> String {
        format!("{}{PART_SUFFIX}", self.stem())
    }

    /// Its journal, or its piece's.
    pub(crate) fn journal(&self, piece: Option<Piece>) -> String {
        match piece {
            Some(p) => format!("{}.{}{PIECE_SUFFIX}", self.stem(), p.index),
            None => format!("{}{JOURNAL_SUFFIX}", self.stem()),
        }
    }
}

/// `name` cut to `room` bytes at most: its first bytes, `~` and 32 hex
/// digits of the SHA-256 of all its bytes.
fn shortened(name: &str, room: usize) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write;
    let hash = Sha256::digest(crate::protocol::names::to_bytes(name));
    let mut out = prefix_within(name, room.saturating_sub(MARK_LEN)).to_string();
    out.push('~');
    for b in &hash[..16] {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::manifest::is_reserved;
    use crate::protocol::names::from_bytes;

    /// The longest name most filesystems take (Linux's NAME_MAX).
    const NAME_MAX: usize = 255;

    fn every_name(b: &Beside<'_>) -> Vec<String> {
        let part = b.part();
        let base = part.strip_suffix(PART_SUFFIX).unwrap();
        let journal = b.journal(None);
        let piece = b.journal(Some(Piece {
            index: PIECES_MAX - 1,
            count: PIECES_MAX,
        }));
        vec![
            format!("{base}.{:016x}{PART_SUFFIX}", u64::MAX),
            format!("{journal}.tmp"),
            format!("{piece}.tmp"),
            journal,
            piece,
            part,
        ]
    }

    fn last(rel: &str) -> &str {
        rel.rsplit('/').next().unwrap()
    }

    #[test]
    fn short_names_keep_their_own_stem() {
        let b = Beside::new("run/a.dat", NAME_MAX);
        assert_eq!(b.part(), "run/a.dat.urmove.part");
        assert_eq!(b.journal(None), "run/a.dat.urmove.journal");
        let longest = "x".repeat(NAME_MAX - ENDING_MAX);
        assert_eq!(Beside::new(&longest, NAME_MAX).stem(), longest.as_str());
    }

    #[test]
    fn every_name_beside_a_255_byte_name_fits_and_is_reserved() {
        let names = [
            "x".repeat(255),
            "\u{e9}".repeat(127),
            "\u{6587}".repeat(85),
            from_bytes(&[0xffu8; 255]),
            "y".repeat(NAME_MAX - ENDING_MAX + 1),
        ];
        for name in &names {
            for max in [NAME_MAX, 100] {
                let rel = format!("d/{name}");
                let b = Beside::new(&rel, max);
                for n in every_name(&b) {
                    assert!(n.starts_with("d/"), "{n}");
                    assert!(byte_len(last(&n)) <= max, "{} bytes: {n}", byte_len(&n));
                    assert!(is_reserved(last(&n)), "{n}");
                }
                // The same name gives the same stem (found again on resume).
                assert_eq!(b.stem(), Beside::new(&rel, max).stem());
            }
        }
    }

    #[test]
    fn long_names_alike_but_for_their_end_get_stems_of_their_own() {
        let a = format!("{}a", "x".repeat(250));
        let b = format!("{}b", "x".repeat(250));
        let (sa, sb) = (
            Beside::new(&a, NAME_MAX).stem().into_owned(),
            Beside::new(&b, NAME_MAX).stem().into_owned(),
        );
        assert_ne!(sa, sb);
        assert!(sa.starts_with("xxxx") && sa.contains('~'), "{sa}");
    }

    #[test]
    fn a_shortened_stem_never_cuts_a_character() {
        let name = "\u{6587}".repeat(85);
        let stem = Beside::new(&name, NAME_MAX).stem().into_owned();
        let (prefix, _) = stem.rsplit_once('~').unwrap();
        assert!(prefix.chars().all(|c| c == '\u{6587}'));
        assert!(!prefix.is_empty());
    }
}
