//! One file being received (`RecvFile`): its state, its part and what is
//! written, journaled and still to come; and what a resume found of it
//! before the data (`HeldFile`).

use std::fs::File;
use std::time::{Instant, SystemTime};

use crate::datapath::beneath::{FileId, Root};
use crate::protocol::frame::digest_add;
use crate::protocol::manifest::{Entry, Piece};

use super::beside::Beside;
use super::incoming::mtime_of;
use super::journal::{self, Identity, Journal};
use super::pieces::set_piece_generation;
use super::rules::{Dress, Rules};
use crate::session::link::secret::Secret;
use crate::session::SessionError;

/// Bytes of block tables (two bits a block) the files of one follow may
/// add as they grow: counted in its memory from the start (256 TiB of
/// 4 MiB blocks).
pub const FOLLOW_BITMAP_BYTES: u64 = 16 << 20;

/// The attribute of a live part (`--live-parts`): the bytes from its start
/// that are written and checked, in decimal.
pub const LIVE_XATTR: &std::ffi::CStr = c"user.urmove.live";

/// Where a file stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileState {
    /// Blocks arrive (or are yet to).
    Receiving,
    /// Complete under its final name before the session (resume); the
    /// sender checks its digest against the source.
    HeldComplete,
    /// Handed to a finalizer (commit or reject).
    Finishing,
    Done,
    /// The sender dropped it.
    Skipped,
    /// What arrived differs from the source: not committed.
    Rejected,
}

/// One file being received.
pub(crate) struct RecvFile {
    /// Open while blocks arrive (opened on the first, closed when done), so
    /// a tree of 100,000 files does not hold 100,000 descriptors.
    pub(crate) part: Option<File>,
    /// The part file this session made or continues, claimed.
    pub(crate) part_id: Option<FileId>,
    /// Its claim was let go when it was committed (see
    /// `part::release_claim`): the session's end leaves it be.
    pub(crate) released: bool,
    pub(crate) final_rel: String,
    pub(crate) size: u64,
    pub(crate) mode: u32,
    pub(crate) mtime: SystemTime,
    pub(crate) direct: bool,
    pub(crate) id: Identity,
    /// One bit per block: which blocks arrived (a second copy is dropped).
    pub(crate) seen: Vec<u64>,
    /// One bit per block: which blocks are written (what a journal names).
    pub(crate) written: Vec<u64>,
    /// Bytes written (or holes).
    pub(crate) received: u64,
    /// Digest over the written blocks.
    pub(crate) digest: u64,
    /// The sender's digest of the source, once it said.
    pub(crate) sender_digest: Option<u64>,
    pub(crate) state: FileState,
    /// How many times a part of it was opened: a lane's registered slot
    /// for it holds the descriptor of the opening it was made for.
    pub(crate) opened: u32,
    /// Writes in flight: (block, digest terms), added to the digest when done.
    pub(crate) writing: Vec<(u64, u64)>,
    /// Blocks written since the last journal, and the bytes of the frames
    /// that brought them (a journal is never larger than what came).
    pub(crate) dirty: bool,
    pub(crate) wire_since_journal: u64,
    pub(crate) last_journal: Instant,
    /// A journal write is in flight: the file is finished after it.
    pub(crate) journaling: bool,
    /// A journal of this part exists on disk (data worth keeping).
    pub(crate) journaled: bool,
    /// The part was continued from an earlier session: blocks it has not
    /// written in this one may hold old bytes (holes are punched).
    pub(crate) stale: bool,
    /// Nothing was at its name, nor any part or journal of urmove's beside
    /// it, when it was prepared (its directory held nothing then and no
    /// other entry shares its name): see `Made::fresh`.
    pub(crate) fresh: bool,
    /// Its part has no name yet (`part::create_part`): a small new file
    /// written whole into an `O_TMPFILE`, named only at its commit (its
    /// final name, linked) or when its part is closed before (its part
    /// name, see `part::name_unnamed`). Nothing of it is on disk until
    /// then, so nothing is left to resume: it is sent again.
    pub(crate) unnamed: bool,
    /// The owner (uid, gid) its part was made with, when this session made
    /// it: a dress giving it that very owner changes nothing.
    pub(crate) made_owner: Option<(u32, u32)>,
    /// Its storage checksums' pieces, block by block as they arrive, when
    /// the rules keep them (`Rules::sums`); gone (None) once a block comes
    /// that they cannot take (a hole, a sparse frame, a block sent again).
    pub(crate) sums: Option<crate::protocol::checksum::Pieces>,
    /// The final file found complete by reading it: its identity and
    /// ctime when read (only that file, unchanged, is stamped later).
    pub(crate) held_seen: Option<(FileId, (i64, i64))>,
    /// Owner and attributes to give it when committed.
    pub(crate) dress: Dress,
    /// Still being written at the sender (`send --follow`): `size` is the
    /// end of the furthest block seen, until the sender's `FileEnd`.
    pub(crate) growing: bool,
    /// Blocks from the start all written (a live part says so).
    pub(crate) prefix: u64,
    /// The piece of a split file this session brings (`send --shard`),
    /// and its bytes `[start, end)`: the part is shared with the sessions
    /// bringing the other pieces.
    pub(crate) piece: Option<Piece>,
    pub(crate) span: (u64, u64),
    /// Its journal's generation (see [`Journal::generation`]): drawn by
    /// this session once it writes any block of a piece (`own_generation`
    /// then), kept while it only continues one whole.
    pub(crate) generation: [u8; 16],
    pub(crate) own_generation: bool,
    /// A piece: the generation its journal carries as this session last
    /// left it (the one it continued, then its own). Found otherwise when
    /// it takes the piece's lock again, another session wrote the piece
    /// meanwhile (every writer journals its generation before it writes).
    pub(crate) journal_by: Option<[u8; 16]>,
    /// The tag of the part it writes ([`journal::PART_TAG_XATTR`]), which
    /// its journals name.
    pub(crate) part_tag: [u8; 16],
    /// The longest name its directory takes, which its part's and
    /// journal's names fit (see [`Beside`]).
    pub(crate) name_max: u16,
    /// Bytes of data (holes left out) it was to bring when the data began
    /// (see [`Incoming::data_missing`]), and the payload that came since.
    pub(crate) data_left: u64,
    pub(crate) payload: u64,
}

impl RecvFile {
    /// `e`, to land at `final_rel` in a directory taking names of at most
    /// `name_max` bytes.
    pub(crate) fn new(
        e: &Entry,
        final_rel: String,
        name_max: usize,
        block: u64,
        rules: &Rules,
    ) -> Self {
        let words = e.size.div_ceil(block).div_ceil(64) as usize;
        RecvFile {
            name_max: name_max.min(usize::from(u16::MAX)) as u16,
            data_left: e.span_data(block),
            payload: 0,
            dress: rules.dress(e),
            held_seen: None,
            part: None,
            part_id: None,
            released: false,
            final_rel,
            size: e.size,
            mode: rules.mode(e.mode),
            mtime: mtime_of(e),
            direct: false,
            id: match e.growing {
                true => Identity::growing(e.size, block),
                false => Identity::of(e, block),
            },
            growing: e.growing,
            prefix: 0,
            piece: e.piece,
            span: e.span(block),
            generation: [0; 16],
            own_generation: false,
            journal_by: None,
            part_tag: [0; 16],
            seen: vec![0; words],
            written: vec![0; words],
            received: 0,
            digest: 0,
            sender_digest: None,
            state: FileState::Receiving,
            opened: 0,
            writing: Vec::new(),
            dirty: false,
            wire_since_journal: 0,
            last_journal: Instant::now(),
            journaling: false,
            journaled: false,
            stale: false,
            fresh: false,
            unnamed: false,
            made_owner: None,
            sums: rules
                .sums
                .then(|| crate::protocol::checksum::Pieces::new(e.size)),
        }
    }

    /// A data frame's block into its checksums' pieces, when they are kept
    /// (a sparse frame, or one that overlaps another, ends them).
    pub(crate) fn take_sums(
        &mut self,
        header: &crate::protocol::frame::FrameHeader,
        lease: &crate::datapath::Lease,
    ) {
        let Some(pieces) = &mut self.sums else {
            return;
        };
        let taken = !header.is_sparse()
            && pieces
                .add(crate::protocol::checksum::Piece::of(
                    header.offset,
                    crate::datapath::net::payload(lease, header),
                ))
                .is_ok();
        if !taken {
            self.sums = None;
        }
    }

    /// Its storage checksums, once its pieces cover it whole.
    pub(crate) fn whole_sums(&self) -> Option<crate::protocol::checksum::Sums> {
        let (adler32, crc32c) = self.sums.as_ref()?.whole().ok()?;
        Some(crate::protocol::checksum::Sums {
            adler32,
            crc32c,
            md5: None,
        })
    }

    /// Where its own files go (part, journal).
    pub(crate) fn beside(&self) -> Beside<'_> {
        Beside::new(&self.final_rel, usize::from(self.name_max))
    }

    pub(crate) fn part_rel(&self) -> String {
        self.beside().part()
    }

    /// A piece is about to be written by this session (its range locked):
    /// its journals get a generation of their own (once), so their
    /// receipts are never those of the journal it continued, which another
    /// session may have made whole meanwhile and been told of (bytes this
    /// one writes over it, even of the same unkeyed digest, are never that
    /// session's). And before its first write the journal there names no
    /// more than the blocks this session holds (none, when it starts from
    /// nothing), under that generation: whatever else it named, this
    /// session may write over, so a journal never names a block whose
    /// bytes are not the ones its digest was made of (the commit trusts it
    /// without reading it again), and a session that held the piece before
    /// finds another's generation when it takes the lock again.
    pub(crate) fn write_own(&mut self, root: &Root, secret: &Secret) -> Result<(), SessionError> {
        if self.piece.is_none() || self.own_generation {
            return Ok(());
        }
        let part = self.part_id.expect("a piece written is open");
        crate::datapath::sys::random_bytes(&mut self.generation)
            .map_err(|e| SessionError::io("drawing a journal generation", e))?;
        self.own_generation = true;
        let (open, piece) = (self.part.as_ref(), self.piece.expect("a piece"));
        set_piece_generation(open.expect("a piece written is open"), piece, &self.generation)
            .map_err(|e| {
                SessionError::io(
                    format!(
                        "{}: recording piece {}'s generation on its part (a filesystem with little room for attributes, as ext4 with about 100 a file, takes fewer shards)",
                        self.final_rel, piece.index
                    ),
                    e,
                )
            })?;
        let j = Journal {
            id: self.id,
            part,
            digest: self.digest,
            blocks: self.written.clone(),
            generation: self.generation,
            tag: self.part_tag,
        };
        let rel = self.journal_rel();
        journal::store(root, &rel, &j, secret).map_err(|e| {
            SessionError::io(format!("writing the journal of {}", self.final_rel), e)
        })?;
        self.journal_by = Some(self.generation);
        Ok(())
    }

    /// Where its journal is kept: beside the file, or (a piece) beside it
    /// under the piece's number.
    pub(crate) fn journal_rel(&self) -> String {
        self.beside().journal(self.piece)
    }

    /// Block `block_no` (`len` bytes, `terms` of digest) is written; its
    /// frame took `wire` bytes.
    pub(crate) fn mark_written(&mut self, block_no: u64, len: u64, terms: u64, wire: u64) {
        if self.received == 0 {
            // The journal clock starts with the first block: a file that
            // arrives within a second never gets a journal.
            self.last_journal = Instant::now();
        }
        let (w, bit) = ((block_no / 64) as usize, 1u64 << (block_no % 64));
        self.written[w] |= bit;
        self.received += len;
        self.wire_since_journal += wire;
        self.digest = digest_add(self.digest, terms);
        self.dirty = true;
    }

    /// Advance the blocks written from the start; whether they moved.
    pub(crate) fn advance_prefix(&mut self) -> bool {
        let before = self.prefix;
        while self
            .written
            .get((self.prefix / 64) as usize)
            .is_some_and(|w| w & (1 << (self.prefix % 64)) != 0)
        {
            self.prefix += 1;
        }
        self.prefix != before
    }

    /// Every block is written and no write is in flight (and the file
    /// grows no more).
    pub(crate) fn is_written(&self) -> bool {
        self.received == self.want() && self.writing.is_empty() && !self.growing
    }

    /// Bytes this session brings of the file (a piece's span).
    pub(crate) fn want(&self) -> u64 {
        match self.piece {
            Some(_) => self.span.1 - self.span.0,
            // (A growing file's size moves.)
            None => self.size,
        }
    }

    /// A growing file reaches `size` (a frame beyond its end came, or its
    /// end): its block bitmaps grow with it, within `budget` bytes of
    /// them (what is left of the session's, taken), or it is refused.
    pub(crate) fn grow_to(
        &mut self,
        size: u64,
        block: u64,
        budget: &mut u64,
    ) -> Result<(), super::book_follow::GrowthRefused> {
        let words = size.div_ceil(block).div_ceil(64) as usize;
        let more = words.saturating_sub(self.seen.len()) as u64 * 16;
        if more > *budget {
            return Err(super::book_follow::GrowthRefused::TablesFull {
                mib: FOLLOW_BITMAP_BYTES >> 20,
            });
        }
        *budget -= more;
        self.size = size;
        self.id.size = size;
        if words > self.seen.len() {
            self.seen.resize(words, 0);
            self.written.resize(words, 0);
        }
        Ok(())
    }
}

/// A file found complete under its final name before any data.
pub(super) enum HeldFile {
    /// Untouched since its commit (its stamp says so): its plain digest.
    Unchanged(u64),
    /// Read again now: both digests of its bytes, and the file's identity
    /// and ctime before it was read.
    Read(
        crate::session::plan::digest::HeldDigest,
        (FileId, (i64, i64)),
    ),
}
