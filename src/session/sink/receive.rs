//! The receiving side of a transfer, shared by the daemon (push) and the
//! client (pull): check every entry of a manifest, prepare it beneath a
//! root that is never written through a symlink, say what is held already
//! (resume), and after the data (see `landing`) give directories their
//! mode and mtime.
//!
//! A file lands in `NAME.urmove.part`, created when its first block comes
//! (so a session that dies early leaves no empty parts), claimed by device
//! and inode against every other session, and is committed (stamped,
//! renamed) only once the sender's digest of its source equals this side's
//! digest of what it wrote (see `commit`).

use std::collections::HashSet;
use std::fs::File;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::datapath::beneath::{FileId, Root};
use crate::datapath::DirectMode;
use crate::protocol::control::{ErrorCode, HaveItem, Message};
use crate::protocol::frame::{digest_add, FrameKey};
use crate::protocol::manifest::{
    check_entry, link_stays_beneath, Entry, EntryKind, Piece, ENTRIES_MAX,
};

use super::beside::Beside;
use super::journal::{self, Identity, Journal};
use crate::session::link::conn::recv_msg;
use crate::session::link::refused::{Refused, Why};
use crate::session::link::secret::Secret;
use crate::session::plan::filter::Filter;
use crate::session::plan::tree::mtime_at;
use crate::session::{SessionError, PART_SUFFIX};

/// Bytes of paths and link targets one manifest may carry.
const MANIFEST_TEXT_BYTES_MAX: u64 = 256 << 20;
/// What one manifest entry costs a receiver in memory besides its text
/// (the entry, its file's state and two copies of its name), for budgets.
pub(crate) const ENTRY_COST_BYTES: u64 = 320;

/// What a receive's end found: files and bytes committed, and the entries
/// refused while finishing (see `Incoming::finish`).
pub(crate) struct Finished {
    pub(crate) files: u64,
    pub(crate) bytes: u64,
    pub(crate) refused: Vec<Refused>,
}

/// What to do with a symlink whose target is absolute or climbs out of the
/// root (`--unsafe-links`). The receiver never follows a link when it
/// writes, so keeping them as they are (as `rsync -a` and `cp -a` do) is
/// safe for the receiver itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LinkPolicy {
    #[default]
    Keep,
    Skip,
    Refuse,
}

/// Files being written now, by what they are (device and inode), over all
/// sessions of a process: a second session never writes the same file.
pub type InodeClaims = Arc<Mutex<HashSet<FileId>>>;

/// How a receiver treats what arrives, whoever sends it.
#[derive(Debug, Clone)]
pub struct Rules {
    /// Authenticates journals and stamps.
    pub secret: Secret,
    /// Keep setuid and setgid bits from the wire (dropped otherwise).
    pub keep_setid: bool,
    pub unsafe_links: LinkPolicy,
    pub claims: InodeClaims,
    /// Journal bytes all sessions of the process may write per second.
    pub journal_budget: Arc<JournalBudget>,
    /// Whom this session commits its files for, in their stamps: on a
    /// daemon, its MAC of the client's owner token (a secret of the
    /// client's state directory, sent sealed), so a file another key
    /// holder committed under the same name, size and mtime is never
    /// skipped unread; on a pull's client, its own. `None` (a client
    /// without a state directory): every held file is read again.
    pub owner: Option<[u8; 32]>,
    /// Whether entries get the sender's owner and group.
    pub owners: Owners,
    /// The user and group names of this session's manifest looked up
    /// here, each once (a lookup may ask LDAP): each session its own.
    pub ids: Arc<IdCache>,
    /// A dry run (`--dry-run`): this session looks and writes nothing (no
    /// directory, link, part file, stamp, claim or journal change).
    pub dry_run: bool,
    /// A `--delete` push's rules: the receiver's extras they exclude are
    /// kept (rsync's default; empty: none is kept).
    pub keep: Filter,
    /// A `--follow` push: its manifest may hold growing files.
    pub follow: bool,
    /// `--live-parts`: growing files' parts readable as they grow, with
    /// their checked prefix in [`LIVE_XATTR`].
    pub live_parts: bool,
    /// Whether device nodes of the manifest are made (`-D`).
    pub devices: Devices,
}

/// Whether a receiver makes the device nodes a manifest holds (`-D`):
/// only when asked for, allowed (a daemon's config says so) and running
/// as root (mknod needs CAP_MKNOD); else each is one entry refused, why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Devices {
    Make,
    Refuse(&'static str),
}

impl Default for Devices {
    fn default() -> Self {
        Devices::Refuse("device nodes are made only when asked for (-D, --devices)")
    }
}

impl Devices {
    /// A receiver that allows device nodes when `allowed` (else refuses
    /// them, saying `not_allowed`), run by this process.
    pub fn for_this_process(allowed: bool, not_allowed: &'static str) -> Devices {
        match (allowed, crate::datapath::sys::effective_uid() == 0) {
            (false, _) => Devices::Refuse(not_allowed),
            (true, false) => Devices::Refuse(
                "the receiver does not run as root: making a device node needs CAP_MKNOD",
            ),
            (true, true) => Devices::Make,
        }
    }
}

/// Bytes of block tables (two bits a block) the files of one follow may
/// add as they grow: counted in its memory from the start (256 TiB of
/// 4 MiB blocks).
pub const FOLLOW_BITMAP_BYTES: u64 = 16 << 20;

/// The attribute of a live part (`--live-parts`): the bytes from its start
/// that are written and checked, in decimal.
pub const LIVE_XATTR: &std::ffi::CStr = c"user.urmove.live";

/// Names already looked up: (a group?, name) to its number here, if any.
#[derive(Debug, Default)]
pub struct IdCache(Mutex<std::collections::HashMap<(bool, String), Option<u32>>>);

impl IdCache {
    fn find(&self, group: bool, name: &str) -> Option<u32> {
        use crate::datapath::ids;
        let mut known = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *known.entry((group, name.to_string())).or_insert_with(|| {
            if group {
                ids::gid_of(name)
            } else {
                ids::uid_of(name)
            }
        })
    }
}

/// Whose files a receiver makes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Owners {
    /// Its own (it does not run as root, or was told not to).
    #[default]
    Own,
    /// The sender's, found here by their names (by number when a name is
    /// unknown here or was not sent), as rsync run as root does.
    ByName,
    /// The sender's, by number (`--numeric-ids`).
    ByNumber,
}

impl Owners {
    /// What a receiver running as this process gives, `numeric` asked.
    pub fn for_this_process(numeric: bool) -> Owners {
        match (crate::datapath::sys::effective_uid() == 0, numeric) {
            (false, _) => Owners::Own,
            (true, false) => Owners::ByName,
            (true, true) => Owners::ByNumber,
        }
    }
}

/// What a receiver gives an entry besides its bytes, mode and mtime: its
/// owner and group (when [`Owners`] says so) and the extended attributes
/// it may carry ([`crate::protocol::manifest::is_carried_xattr`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Dress {
    pub(crate) owner: Option<(u32, u32)>,
    pub(crate) xattrs: Vec<(String, Vec<u8>)>,
}

impl Dress {
    /// Give an open file or directory its dress: the owner first (a chown
    /// drops setuid bits, and the mode is set after), then the attributes.
    pub(crate) fn put_on(&self, file: &File) -> Result<(), String> {
        use crate::datapath::ids;
        if let Some((uid, gid)) = self.owner {
            ids::fchown(file, uid, gid).map_err(|e| format!("giving it owner {uid}:{gid}: {e}"))?;
        }
        for (name, value) in &self.xattrs {
            ids::set(file, name, value)
                .map_err(|e| format!("setting its extended attribute {name}: {e}"))?;
        }
        Ok(())
    }
}

/// A token bucket of journal bytes per second, shared by every session of
/// a process: journals are written only as fast as the budget refills (a
/// journal that waits is written later, or its file finishes first).
#[derive(Debug)]
pub struct JournalBudget {
    rate_bytes_per_s: u64,
    state: Mutex<(u64, Instant)>,
}

impl JournalBudget {
    pub fn new(rate_bytes_per_s: u64) -> Self {
        JournalBudget {
            rate_bytes_per_s,
            state: Mutex::new((rate_bytes_per_s, Instant::now())),
        }
    }

    /// Take `bytes` now if the bucket holds them (or is full, for a journal
    /// larger than a second's worth).
    pub fn take(&self, bytes: u64) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, at) = *s;
        let refill = (at.elapsed().as_secs_f64() * self.rate_bytes_per_s as f64) as u64;
        let tokens = tokens.saturating_add(refill).min(self.rate_bytes_per_s);
        let full = tokens == self.rate_bytes_per_s;
        if tokens >= bytes || full {
            *s = (tokens.saturating_sub(bytes), Instant::now());
            return true;
        }
        *s = (tokens, Instant::now());
        false
    }
}

/// Journal bytes per second all sessions may write together, by default.
pub const JOURNAL_BYTES_PER_S: u64 = 64 << 20;

impl Rules {
    /// A session's rules with nothing asked for: `secret`, and a journal
    /// budget of `journal_bytes` a second.
    #[cfg(test)]
    pub(crate) fn plain(secret: [u8; 32], journal_bytes: u64) -> Rules {
        Rules {
            owner: None,
            owners: Default::default(),
            ids: Default::default(),
            dry_run: false,
            follow: false,
            live_parts: false,
            devices: Devices::default(),
            keep: Default::default(),
            secret: Secret::from_bytes(secret),
            keep_setid: false,
            unsafe_links: Default::default(),
            claims: Default::default(),
            journal_budget: Arc::new(JournalBudget::new(journal_bytes)),
        }
    }

    /// What entry `e` is given besides its bytes.
    pub(crate) fn dress(&self, e: &Entry) -> Dress {
        let o = &e.owner;
        let by_name = |name: &str, group: bool, n: u32| {
            (!name.is_empty())
                .then(|| self.ids.find(group, name))
                .flatten()
                .unwrap_or(n)
        };
        let owner = match self.owners {
            Owners::Own => None,
            Owners::ByNumber => Some((o.uid, o.gid)),
            Owners::ByName => Some((
                by_name(&o.user, false, o.uid),
                by_name(&o.group, true, o.gid),
            )),
        };
        let xattrs = e
            .xattrs
            .iter()
            .filter(|(n, _)| crate::protocol::manifest::is_carried_xattr(n))
            .filter(|(n, _)| n != "system.posix_acl_default" || e.kind == EntryKind::Dir)
            .cloned()
            .collect();
        Dress { owner, xattrs }
    }

    /// The permission bits to give an entry of `mode`.
    pub(crate) fn mode(&self, mode: u32) -> u32 {
        if self.keep_setid {
            mode & 0o7777
        } else {
            mode & 0o1777
        }
    }
}

/// How a session continues from what the receiver holds (`--resume`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resume {
    /// `--checksum`: a finished file is judged by its content (read again
    /// here), not by its stamp.
    pub(crate) checksum: bool,
    /// The session's frame key: what is held is told to the sender by its
    /// digest keyed with it (`crate::session::plan::digest::HeldDigest`).
    pub(crate) key: FrameKey,
}

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
            _ => {
                return Err(SessionError::local(
                    ErrorCode::Malformed,
                    "expected the manifest",
                ))
            }
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
            return Err(SessionError::local(
                ErrorCode::TooLarge,
                format!("the manifest has more than {max} entries, the limit here"),
            ));
        }
        reserve(3 * text + part.len() as u64 * ENTRY_COST_BYTES)?;
        entries.extend(part);
    }
}

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
        (final_rel, name_max): (String, usize),
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
        }
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
    ) -> Result<(), String> {
        let words = size.div_ceil(block).div_ceil(64) as usize;
        let more = words.saturating_sub(self.seen.len()) as u64 * 16;
        if more > *budget {
            return Err(format!(
                "the follow's files grew past the {} MiB of block tables one session keeps; use larger blocks",
                FOLLOW_BITMAP_BYTES >> 20
            ));
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

/// How many names each file that hard links name has in `entries` (its
/// own and the links'), by the final path of its first name under `dest`.
fn names_of_links(dest: &str, entries: &[Entry]) -> std::collections::HashMap<String, u64> {
    let mut names = std::collections::HashMap::new();
    for e in entries.iter().filter(|e| e.kind == EntryKind::HardLink) {
        let first = join(dest, e.link.as_deref().unwrap_or_default());
        *names.entry(first).or_insert(1) += 1;
    }
    names
}

/// The refusal of files needing `bytes` on a filesystem with `free`.
fn no_room(dir: &str, bytes: u64, free: u64) -> SessionError {
    use crate::coord::units::bytes_both;
    SessionError::local(
        ErrorCode::NoSpace,
        format!(
            "no room: the files still to come under {dir} need {} of data, its filesystem has {} free; nothing was written (free space there, or send less)",
            bytes_both(bytes),
            bytes_both(free)
        ),
    )
}

/// The directories a manifest's preparation made: the last a file went
/// into (and the longest name its filesystem takes), and those it could
/// not make, with why.
#[derive(Debug, Default)]
struct Made {
    dir: String,
    name_max: usize,
    unmade: std::collections::HashMap<String, Why>,
}

impl Made {
    /// Why `rel` cannot be made: a directory above it could not be.
    fn beneath_unmade(&self, rel: &str) -> Option<Why> {
        if self.unmade.is_empty() {
            return None;
        }
        let mut at = rel;
        while let Some((dir, _)) = at.rsplit_once('/') {
            if let Some(why) = self.unmade.get(dir) {
                return Some(why.clone());
            }
            at = dir;
        }
        None
    }
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
fn special_type(kind: EntryKind) -> u32 {
    match kind {
        EntryKind::Fifo => libc::S_IFIFO,
        EntryKind::Socket => libc::S_IFSOCK,
        EntryKind::CharDevice => libc::S_IFCHR,
        EntryKind::BlockDevice => libc::S_IFBLK,
        other => unreachable!("{} is no special file", other.name()),
    }
}

/// Why an entry whose name its filesystem cannot hold is not made.
fn unholdable(err: &std::io::Error) -> Why {
    Why::rule(format!("the filesystem here cannot hold this name: {err}"))
}

/// A file found complete under its final name before any data.
enum HeldFile {
    /// Untouched since its commit (its stamp says so): its plain digest.
    Unchanged(u64),
    /// Read again now: both digests of its bytes, and the file's identity
    /// and ctime before it was read.
    Read(
        crate::session::plan::digest::HeldDigest,
        (FileId, (i64, i64)),
    ),
}

/// A manifest being received beneath a root.
pub(crate) struct Incoming {
    pub(crate) root: Root,
    pub(crate) dest: String,
    pub(crate) entries: Vec<Entry>,
    pub(crate) files: Vec<Option<RecvFile>>,
    pub(crate) block: u64,
    pub(crate) direct: DirectMode,
    pub(crate) rules: Rules,
    resume: Option<Resume>,
    /// Files finished while preparing (empty ones): (entry, digest).
    done_at_start: Vec<(u32, u64)>,
    /// What the receiver holds already, for the sender (resume).
    have: Vec<HaveItem>,
    /// Entries this side refused to create (unsafe links, names it cannot
    /// hold, a directory in the way).
    refused: Vec<Refused>,
    /// Files complete under their final names before any data came.
    complete_before: Vec<u32>,
    /// Those of them complete by their stamp alone (not read again).
    unchanged: HashSet<u32>,
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
    names: std::collections::HashMap<String, u64>,
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
fn takes_a_file(root: &Root, rel: &str) -> bool {
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
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn prepare(
        root: Root,
        dest: String,
        entries: Vec<Entry>,
        block: u64,
        direct: DirectMode,
        rules: Rules,
        resume: Option<Resume>,
        tick: &mut dyn FnMut(),
    ) -> Result<Self, SessionError> {
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
        };
        let mut made = Made::default();
        for (i, e) in entries.iter().enumerate() {
            tick();
            let file = inc.prepare_entry(i as u32, e, &mut made, tick)?;
            inc.files.push(file);
        }
        inc.entries = entries;
        inc.done_files = inc.done_at_start.len();
        Ok(inc)
    }

    fn prepare_entry(
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
    fn prepare_file_entry(
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
        let mut f = RecvFile::new(e, (rel, made.name_max), self.block, &self.rules);
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
    fn make_dir(&self, rel: &str, made: &mut Made) -> Result<Result<(), Why>, SessionError> {
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
    fn refuse_entry(&mut self, i: u32, why: Why) {
        self.refused.push(Refused::entry(i, why));
    }

    /// Why `f` cannot land, when a directory stands at its name, or at a
    /// name of urmove's it writes (its part, its journal and the journal's
    /// temporary): planted by someone who can write under the root, never
    /// removed, and one such entry never fails the others.
    fn in_the_way(&self, f: &RecvFile) -> Option<Why> {
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
    fn make_symlink(&mut self, e: &Entry, rel: &str) -> Result<Result<(), Why>, SessionError> {
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
            .set_link_mtime(rel, (e.mtime_s, e.mtime_ns))
            .map_err(|err| SessionError::io(format!("giving {rel} its time"), err))?;
        Ok(Ok(()))
    }

    /// Make a FIFO, socket or (`-D`, allowed) device node as it is on the
    /// sending side, as `rsync -a` does: one of the same type (and device)
    /// at the name is kept, anything else but a directory replaced, never
    /// through a link; then its owner, mode and mtime. `Ok(Err(why))`:
    /// this entry alone is not made.
    fn make_special(&mut self, e: &Entry, rel: &str) -> Result<Result<(), Why>, SessionError> {
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
            .set_link_mtime(rel, (e.mtime_s, e.mtime_ns))
            .map_err(io)?;
        Ok(Ok(()))
    }

    fn prepare_file(
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
        if f.size == 0 && !f.growing && !self.rules.dry_run {
            // Nothing to wait for: an empty file's digest is 0 on both sides.
            open_part(&self.root, self.direct, &self.rules, f)?;
            f.sender_digest = Some(0);
            let job = super::commit::FinalJob::take(i, f, &self.rules);
            let (idx, digest) = super::commit::finish(&self.root, job)?;
            f.state = FileState::Done;
            self.done_at_start.push((idx, digest));
        }
        Ok(())
    }

    /// `f`'s final file when it is complete already: unchanged when its
    /// stamp (ours, on this very file, for this size and mtime) says
    /// nothing touched it since its commit for this session's owner;
    /// otherwise read again now, and
    /// complete when its bytes have the stamped digest, or with
    /// `--checksum` for any file of the right size.
    fn held_complete(&self, f: &RecvFile, r: Resume, tick: &mut dyn FnMut()) -> Option<HeldFile> {
        use std::os::unix::fs::MetadataExt;
        let file = self.root.open_read(&f.final_rel).ok()?;
        let m = file.metadata().ok()?;
        if !m.is_file() || m.len() != f.size {
            return None;
        }
        let ours = super::stamp::stamped((&file, &f.final_rel), &f.id, &self.rules.secret);
        // One name only, or (`-H`) the names the manifest gives it on a
        // file our stamp proves we committed here: any other name is
        // someone else's, and no file of ours to keep.
        let names = self.names.get(&f.final_rel).copied().unwrap_or(1);
        // A FUSE filesystem may still count a name just removed.
        let nlink = match m.nlink() {
            1 => 1,
            _ => crate::datapath::sys::fresh_links_and_ctime(&file).ok()?.0,
        };
        if nlink != 1 && (ours.is_none() || nlink != names) {
            return None;
        }
        let stamp = match r.checksum {
            true => None,
            false => Some(ours?),
        };
        let seen = (FileId::of(&file).ok()?, (m.ctime(), m.ctime_nsec()));
        let ours = |s: &super::stamp::Stamped| super::stamp::owned_by(&s.owner, self.rules.owner);
        // Untouched, and as the manifest would make it (a mode or owner
        // changed within the stamp's settling time shows here).
        let dressed = m.mode() & 0o7777 == f.mode
            && f.dress
                .owner
                .is_none_or(|(u, g)| (m.uid(), m.gid()) == (u, g));
        if let Some(s) = stamp.filter(|s| s.untouched && ours(s) && dressed) {
            return Some(HeldFile::Unchanged(s.digest));
        }
        let on_disk =
            crate::session::plan::digest::content_digests(&file, f.size, &r.key, tick).ok()?;
        stamp
            .is_none_or(|s| s.digest == on_disk.plain)
            .then_some(HeldFile::Read(on_disk, seen))
    }

    /// Continue `f`'s part file from its journal, when both are ours and
    /// agree, and the blocks the journal names, read again now, have the
    /// digest it recorded; claims the part and returns the blocks' digest
    /// keyed with `key`. Otherwise (`None`) the file starts over.
    fn continue_part(
        &self,
        f: &mut RecvFile,
        key: &FrameKey,
        tick: &mut dyn FnMut(),
    ) -> Result<Option<u64>, SessionError> {
        let now = f.id;
        let accept = |j: &Identity| j.holds_for(&now);
        let Some(mut j) = journal::load(&self.root, &f.journal_rel(), &self.rules.secret, &accept)
        else {
            return Ok(None);
        };
        // A journal of the file while it grew names fewer blocks.
        j.blocks.resize(f.seen.len(), 0);
        j.id = f.id;
        let rel = f.part_rel();
        let Ok(part) = self.root.open_read(&rel) else {
            return Ok(None);
        };
        // The very part the journal names (inode and tag), ours alone (one
        // name, our user), and marked for these very pieces, or for none.
        let own = part.metadata().is_ok_and(|m| is_own_file(&m));
        let mark = crate::datapath::sys::get_xattr(&part, PIECES_XATTR);
        let want = f.piece.map(|p| pieces_mark(f, p).into_bytes());
        if !own || !j.matches(&part) || mark != want {
            return Ok(None);
        }
        // A piece's journal is the one its last writer left only with the
        // generation that writer recorded on the part.
        if f.piece
            .is_some_and(|p| piece_generation(&part, p) != Some(j.generation))
        {
            return Ok(None);
        }
        let ranges = j.ranges();
        let on_disk = crate::session::plan::digest::part_digests(
            &part, f.size, self.block, &ranges, key, tick,
        )
        .ok();
        let Some(on_disk) = on_disk.filter(|d| d.plain == j.digest) else {
            return Ok(None);
        };
        // A piece's part is shared: its range is locked when opened.
        if !self.rules.dry_run && f.piece.is_none() {
            claim(&self.rules, &rel, j.part)?;
        }
        // Opened again (for writing) when its next block comes.
        f.part_id = Some(j.part);
        f.received = covered(&j.blocks, f.size, self.block);
        f.seen = j.blocks.clone();
        f.written = j.blocks;
        f.digest = j.digest;
        f.generation = j.generation;
        f.journal_by = f.piece.map(|_| j.generation);
        f.part_tag = j.tag;
        f.journaled = true;
        // Blocks the journal does not name may hold bytes of an earlier
        // session: a hole frame for one must clear it, not skip it.
        f.stale = true;
        Ok(Some(on_disk.keyed))
    }

    /// Files finished while preparing (empty ones): (entry, digest).
    pub(crate) fn take_done_at_start(&mut self) -> Vec<(u32, u64)> {
        std::mem::take(&mut self.done_at_start)
    }

    /// What this side holds already, for the sender.
    pub(crate) fn take_have(&mut self) -> Vec<HaveItem> {
        std::mem::take(&mut self.have)
    }

    /// Whether the session continues from what this side holds.
    pub(crate) fn resuming(&self) -> bool {
        self.resume.is_some()
    }

    /// Entries this side refused to create.
    pub(crate) fn take_refused(&mut self) -> Vec<Refused> {
        let refused = std::mem::take(&mut self.refused);
        self.skipped.extend(refused.iter().cloned());
        refused
    }

    /// The sender's verdict on what `Have` named: held files and blocks in
    /// `wrong` differ from the sources and are forgotten (sent again); the
    /// rest counts as held (complete files are done).
    pub(crate) fn apply_verdict(&mut self, wrong: &HashSet<u32>) -> Result<(), SessionError> {
        for i in 0..self.files.len() {
            let Some(f) = self.files[i].as_mut() else {
                continue;
            };
            let is_wrong = wrong.contains(&(i as u32));
            match f.state {
                FileState::HeldComplete if is_wrong => {
                    f.state = FileState::Receiving;
                    (f.received, f.digest) = (0, 0);
                }
                FileState::HeldComplete => {
                    f.state = FileState::Done;
                    self.complete_before.push(i as u32);
                    self.done_files += 1;
                    // Read and found right: stamped for this owner, so the
                    // next run need not read it.
                    if !self.unchanged.contains(&(i as u32)) && !self.rules.dry_run {
                        super::commit::settle_held(&self.root, f, &self.rules)?;
                    }
                }
                FileState::Receiving if is_wrong => {
                    // Start over: the part goes (by inode), a new one comes.
                    // A shared part keeps the other pieces, and this one's
                    // journal is replaced under its lock when it is joined
                    // again (`write_own`).
                    if let Some(id) = f.part_id.take().filter(|_| !self.rules.dry_run) {
                        if f.piece.is_none() {
                            let _ = self.root.unlink_file(&f.part_rel(), id);
                            lock_claims(&self.rules).remove(&id);
                            journal::remove(&self.root, &f.journal_rel());
                        }
                    }
                    f.seen.fill(0);
                    f.written.fill(0);
                    (f.received, f.digest, f.journaled, f.stale) = (0, 0, false, false);
                    (f.journal_by, f.own_generation) = (None, false);
                }
                _ => {}
            }
        }
        self.unchanged.retain(|i| !wrong.contains(i));
        Ok(())
    }

    /// Refuse, before any part file exists, files the filesystems under
    /// them cannot hold: per filesystem, the data bytes still to come (each
    /// file's data bytes as the sender counted them, holes needing none,
    /// less what is held of it) against what it has free for this user.
    pub(crate) fn check_space(&self) -> Result<(), SessionError> {
        use std::collections::HashMap;
        use std::os::unix::fs::MetadataExt;
        // st_dev -> (a directory on it, bytes still to come there).
        let mut need: HashMap<u64, (&str, u64)> = HashMap::new();
        // A file's directory -> (its device, the directory standing).
        let mut dev_of: HashMap<&str, (u64, &str)> = HashMap::new();
        for (i, f) in self.files.iter().enumerate() {
            let Some(f) = f.as_ref().filter(|f| f.state == FileState::Receiving) else {
                continue;
            };
            let dir = f.final_rel.rsplit_once('/').map_or("", |(d, _)| d);
            let (dev, dir) = *dev_of.entry(dir).or_insert_with(|| {
                let dir = self.standing(dir);
                let rel = if dir.is_empty() { "." } else { dir };
                (self.root.symlink_metadata(rel).map_or(0, |m| m.dev()), dir)
            });
            // A piece needs its share of the file's data.
            let share =
                u128::from(self.entries[i].data) * u128::from(f.want()) / u128::from(f.size.max(1));
            let data = (share as u64).min(f.want() - f.received.min(f.want()));
            let at = need.entry(dev).or_insert((dir, 0));
            at.1 = at.1.saturating_add(data);
        }
        for (dir, bytes) in need.into_values() {
            let rel = if dir.is_empty() { "." } else { dir };
            let fd = self
                .root
                .openat(rel, libc::O_RDONLY | libc::O_DIRECTORY, 0)
                .map_err(|e| SessionError::io(rel.to_string(), e))?;
            let free = crate::datapath::sys::free_bytes_fd(&fd)
                .map_err(|e| SessionError::io(rel.to_string(), e))?;
            match free {
                Some(free) if free < bytes => return Err(no_room(rel, bytes, free)),
                _ => {}
            }
        }
        Ok(())
    }

    /// `dir`, or its nearest ancestor that exists (a dry run made none).
    fn standing<'d>(&self, mut dir: &'d str) -> &'d str {
        while !dir.is_empty() && self.root.symlink_metadata(dir).is_err() {
            dir = dir.rsplit_once('/').map_or("", |(d, _)| d);
        }
        dir
    }

    /// The placement, for the sender, of the files still to receive over
    /// `lanes`: the devices their directories sit on, each driven by its
    /// own lanes (see `route`). Once routed, [`receive`](Self::receive)
    /// keeps the streams on the lanes planned. `tick` beats while it
    /// looks.
    pub(crate) fn place(
        &mut self,
        lanes: &[crate::session::link::lanes::Lane],
        tick: &mut dyn FnMut(),
    ) -> Message {
        let entries = &self.entries;
        let dirs = self.files.iter().enumerate().filter_map(|(i, f)| {
            let f = f.as_ref().filter(|f| f.state == FileState::Receiving)?;
            let dir = f.final_rel.rsplit_once('/').map_or("", |(d, _)| d);
            Some((i, dir, entries[i].size))
        });
        let route = crate::session::plan::route::plan_for(
            &self.root,
            lanes,
            self.entries.len(),
            dirs,
            tick,
        );
        // Routed only when the sender is told (a route too long for one
        // message is not sent).
        let message = route.message();
        self.routed = matches!(&message, Message::Placement { streams, .. } if !streams.is_empty());
        message
    }

    /// Files complete under their final names before any data came.
    pub(crate) fn complete_before(&self) -> &[u32] {
        &self.complete_before
    }

    /// What this side held before any data: (unchanged by their stamp,
    /// found complete by content, part files continued). Before any data
    /// only.
    pub(crate) fn held_counts(&self) -> (u64, u64, u64) {
        let continued = self
            .files
            .iter()
            .flatten()
            .filter(|f| f.state == FileState::Receiving && f.received > 0)
            .count();
        crate::session::plan::held::held_counts(
            self.complete_before.len(),
            self.unchanged.len(),
            continued,
        )
    }

    /// What a run would do with entry `i`, from what this side holds of
    /// it before any data (a pull's dry run): held unchanged (by its
    /// stamp) or complete (read and found right), a part of which `bytes`
    /// are still to come, refused, or all of it to come.
    pub(crate) fn plan_of(&self, i: usize) -> (crate::session::plan::held::Action, u64) {
        use crate::session::plan::held::Action;
        let Some(f) = self.files.get(i).and_then(Option::as_ref) else {
            return (Action::Send, 0);
        };
        match f.state {
            FileState::Done if self.unchanged.contains(&(i as u32)) => (Action::Unchanged, 0),
            FileState::Done => (Action::Complete, 0),
            FileState::Skipped => (Action::Refused, 0),
            _ if f.received > 0 => (Action::Continue, f.want() - f.received.min(f.want())),
            _ => (Action::Send, f.want()),
        }
    }

    /// Bytes of data still to come (holes left out; not complete, not
    /// journaled): each file's data less its held share, noted on it as
    /// what its payload is measured against when it is done.
    pub(crate) fn data_missing(&mut self) -> u64 {
        let mut sum = 0;
        for f in self.files.iter_mut().flatten() {
            if f.state != FileState::Receiving {
                continue;
            }
            let want = f.want();
            let left = u128::from(f.data_left) * u128::from(want - f.received.min(want));
            f.data_left = (left / u128::from(want.max(1))) as u64;
            sum += f.data_left;
        }
        sum
    }

    /// Bytes of data (holes left out) the files hold in all.
    pub(crate) fn file_data(&self) -> u64 {
        (0..self.files.len())
            .filter(|&i| self.files[i].is_some())
            .map(|i| self.entries[i].span_data(self.block))
            .sum()
    }

    /// Files not finished whose verified blocks are journaled (kept for
    /// the next run), and the bytes of those blocks.
    pub(crate) fn kept(&self) -> (u64, u64) {
        self.files
            .iter()
            .flatten()
            .filter(|f| f.state == FileState::Receiving && f.journaled && !f.dirty)
            .fold((0, 0), |(n, bytes), f| (n + 1, bytes + f.received))
    }

    /// Number of regular files in the manifest.
    pub(crate) fn file_count(&self) -> usize {
        self.files.iter().flatten().count()
    }

    /// Bytes the files hold in total.
    pub(crate) fn file_bytes(&self) -> u64 {
        self.files.iter().flatten().map(RecvFile::want).sum()
    }

    /// Check that every file is committed (or skipped), then give
    /// directories their mode and mtime (adding files changed them), never
    /// through a link and never to the root itself. Returns (files, bytes)
    /// and the entries refused here while finishing (a further name whose
    /// path another hand changed), which are skipped, not the session's end.
    pub(crate) fn finish(&mut self) -> Result<Finished, SessionError> {
        let file_count = self.file_count();
        if !self.rejected.is_empty() {
            let names: Vec<&str> = self
                .rejected
                .iter()
                .take(5)
                .map(|&i| self.entries[i as usize].path.as_str())
                .collect();
            return Err(SessionError::local(
                ErrorCode::Io,
                format!(
                    "{} files differ from the sender's digest and were not committed: {}",
                    self.rejected.len(),
                    names.join(", ")
                ),
            ));
        }
        let skipped = self
            .files
            .iter()
            .flatten()
            .filter(|f| f.state == FileState::Skipped)
            .count();
        if self.done_files + skipped < file_count {
            let lost = if self.lost_streams.is_empty() {
                String::new()
            } else {
                format!(" (lost: {})", self.lost_streams.join("; "))
            };
            return Err(SessionError::local(
                ErrorCode::Io,
                format!(
                    "the data streams ended with {} of {file_count} files incomplete{lost}",
                    file_count - self.done_files - skipped
                ),
            ));
        }
        let refused = self.make_hard_links()?;
        self.skipped.extend(refused.iter().cloned());
        self.sync_dirs()?;
        self.settle_dirs();
        Ok(Finished {
            files: self.done_files as u64,
            bytes: self.bytes,
            refused,
        })
    }

    /// Give committed files their further names (`-H`): each link names
    /// the file this session committed or found held at its first name,
    /// checked by identity, through no symlink, and the file is stamped
    /// anew after (see `commit::Relink`). A first name the sender skipped
    /// gets no links. A name that cannot be made for its own entry's fault
    /// (a link planted in its path) is refused alone.
    fn make_hard_links(&self) -> Result<Vec<Refused>, SessionError> {
        let by_path: std::collections::HashMap<&str, usize> = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.path.as_str(), i))
            .collect();
        let mut further: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
        for (i, e) in self.entries.iter().enumerate() {
            let first = e.link.as_deref().unwrap_or_default();
            if let (EntryKind::HardLink, Some(&at)) = (e.kind, by_path.get(first)) {
                further.entry(at).or_default().push(i);
            }
        }
        let mut refused = Vec::new();
        for (first, links) in further {
            let Some(f) = self.files[first].as_ref() else {
                continue;
            };
            let expect = match f.state {
                FileState::Done => f.part_id.or(f.held_seen.map(|(id, _)| id)),
                FileState::HeldComplete => f.held_seen.map(|(id, _)| id),
                _ => continue,
            };
            let linked = |&i: &usize| {
                let rel = join(&self.dest, &self.entries[i].path);
                let there = self.root.symlink_metadata(&rel).ok();
                there.is_some_and(|m| Some(FileId::of_metadata(&m)) == expect)
            };
            if expect.is_some() && links.iter().all(linked) {
                continue;
            }
            let secret = &self.rules.secret;
            let held = super::commit::Relink::hold(&self.root, &f.final_rel, expect, secret);
            for i in links {
                self.link_one(i, (&f.final_rel, expect), &mut refused)?;
            }
            if let Some(h) = held {
                h.settle(&f.final_rel, secret);
            }
        }
        Ok(refused)
    }

    /// Entry `i`'s name made a further name of `first` (`expect`), or, for
    /// its own entry's fault, refused.
    fn link_one(
        &self,
        i: usize,
        (first, expect): (&str, Option<FileId>),
        refused: &mut Vec<Refused>,
    ) -> Result<(), SessionError> {
        let rel = join(&self.dest, &self.entries[i].path);
        let linked = self
            .root
            .hard_link(first, &rel, expect)
            .map_err(|err| SessionError::io(format!("linking {rel} to {first}"), err));
        match linked {
            Err(err) if err.is_entry_fault() => {
                refused.push(Refused::entry(
                    i as u32,
                    Why::fault(format!("refused here: {err}")),
                ));
                Ok(())
            }
            other => other.map(|_| ()),
        }
    }

    /// Make the renames durable: sync every directory that gained an entry
    /// (once each) before the summary says the session is done.
    pub(crate) fn sync_dirs(&self) -> Result<(), SessionError> {
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
        Ok(())
    }

    /// Directories' mode and mtime, deepest first, through no symlink and
    /// never on the root itself (whatever a planted link made it look like).
    pub(crate) fn settle_dirs(&self) {
        use std::os::unix::fs::PermissionsExt;
        let root_id = self.root.id().ok();
        for e in self
            .entries
            .iter()
            .rev()
            .filter(|e| e.kind == EntryKind::Dir)
        {
            let rel = join(&self.dest, &e.path);
            let Ok(d) = self.root.open_file(
                &rel,
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                0,
            ) else {
                continue;
            };
            if root_id.is_none() || FileId::of(&d).ok() == root_id {
                continue;
            }
            let _ = self.rules.dress(e).put_on(&d);
            let _ = d.set_permissions(std::fs::Permissions::from_mode(self.rules.mode(e.mode)));
            let _ = d.set_times(super::commit::mtime_now_accessed(mtime_of(e)));
        }
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
            claims.remove(&id);
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

fn lock_claims(rules: &Rules) -> std::sync::MutexGuard<'_, HashSet<FileId>> {
    rules.claims.lock().unwrap_or_else(|p| p.into_inner())
}

/// Claim the file `id` for this session; another session has it: busy.
fn claim(rules: &Rules, rel: &str, id: FileId) -> Result<(), SessionError> {
    let mut set = lock_claims(rules);
    if !set.insert(id) {
        return Err(SessionError::local(
            ErrorCode::Busy,
            format!("{rel}: another session is writing this file now"),
        ));
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
    match (f.part_id, f.piece) {
        (Some(id), None) => reopen_part(root, direct, f, id),
        (Some(id), Some(_)) => {
            reopen_part(root, direct, f, id)?;
            match lock_span((root, &rules.secret), f)? {
                true => Ok(()),
                false => Err(SessionError::local(
                    ErrorCode::Busy,
                    format!(
                        "{}: committed or replaced by another session while this one brought a piece of it",
                        f.final_rel
                    ),
                )),
            }
        }
        (None, Some(p)) => join_piece((root, &rules.secret), direct, f, p),
        (None, None) => create_part(root, direct, rules, f),
    }
}

/// A piece's part joined ([`join_part`]) and its range locked while its
/// name still holds it (a part committed or replaced meanwhile is left
/// for the one there now). The piece starts from nothing: a journal of it
/// there speaks of bytes this session now writes over, and goes, and
/// its own journals get a generation of their own.
fn join_piece(
    (root, secret): (&Root, &Secret),
    direct: DirectMode,
    f: &mut RecvFile,
    p: Piece,
) -> Result<(), SessionError> {
    for _ in 0..4 {
        join_part(root, direct, f, p)?;
        if lock_span((root, secret), f)? {
            return f.write_own(root, secret);
        }
        f.part_id = None;
    }
    Err(SessionError::local(
        ErrorCode::Busy,
        format!(
            "{}: the part file keeps changing under this session",
            f.part_rel()
        ),
    ))
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

/// A piece's writes go to its range of the shared part, locked for this
/// opening: another session bringing an overlapping range, or committing
/// the file (in this daemon or another on the same filesystem), makes it
/// busy. Once locked, no commit can rename the part until this opening
/// closes: `false` (the part let go) when its name no longer holds it
/// (committed or replaced before the lock).
fn lock_span((root, secret): (&Root, &Secret), f: &mut RecvFile) -> Result<bool, SessionError> {
    let (Some(_), Some(part)) = (f.piece, f.part.as_ref()) else {
        return Ok(true);
    };
    let (start, end) = f.span;
    match lock_waiting(part, (start, end - start)) {
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
            Err(SessionError::local(
                ErrorCode::Busy,
                format!(
                    "{}: another session is writing bytes {start} to {end} of this file now, or committing it",
                    f.final_rel
                ),
            ))
        }
        Err(e) => Err(SessionError::io(format!("locking {}", f.part_rel()), e)),
    }
}

/// Under the piece's lock: the journal there still carries the generation
/// this session left it with (none expected before it held the piece).
/// Otherwise another session wrote the piece since (it journals its own
/// generation first), perhaps over blocks this one verified: busy, the
/// part let go.
fn still_its_journal(root: &Root, secret: &Secret, f: &mut RecvFile) -> Result<(), SessionError> {
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
    Err(SessionError::local(
        ErrorCode::Busy,
        format!(
            "{}: another session wrote this piece since this one held it (its bytes here may not be the ones this one verified): run again",
            f.final_rel
        ),
    ))
}

/// How long a piece's opening waits for a lock on the whole file (a
/// session finishing its piece looks whether every piece is there, or
/// commits the file) to go, before it says busy.
const WHOLE_LOCK_WAIT: Duration = Duration::from_secs(3);

/// Lock `len` bytes of `part` from `start` ([`sys::lock_range`]), waiting
/// up to [`WHOLE_LOCK_WAIT`] while what is in the way is a lock on the
/// whole file; another session's range is in the way at once.
///
/// [`sys::lock_range`]: crate::datapath::sys::lock_range
fn lock_waiting(part: &File, (start, len): (u64, u64)) -> std::io::Result<()> {
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
fn generation_xattr(p: Piece) -> std::ffi::CString {
    std::ffi::CString::new(format!("user.urmove.g.{}", p.index)).expect("no NUL")
}

/// The generation recorded on `part` for piece `p`.
pub(crate) fn piece_generation(part: &File, p: Piece) -> Option<[u8; 16]> {
    crate::datapath::sys::get_xattr(part, &generation_xattr(p))?
        .try_into()
        .ok()
}

fn set_piece_generation(part: &File, p: Piece, generation: &[u8; 16]) -> std::io::Result<()> {
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
fn pieces_mark(f: &RecvFile, p: Piece) -> String {
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
fn join_part(
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
        match new_part(root, direct, (&rel, Some(&mark))) {
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
    Err(SessionError::local(
        ErrorCode::Busy,
        format!("{rel}: the part file keeps changing under this session"),
    ))
}

/// A new part at `rel`, tagged (and, a shared one, marked `mark`) before
/// it has its name (made with none and linked there, or under a name of
/// its own and renamed, where nothing is): a session that finds it there
/// finds its tag and mark. `Err(AlreadyExists)` when another came first.
fn new_part(
    root: &Root,
    direct: DirectMode,
    (rel, mark): (&str, Option<&str>),
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
            linked_part(root, direct, (&tmp, rel), (part, tag))
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
fn linked_part(
    root: &Root,
    direct: DirectMode,
    (tmp, rel): (&str, &str),
    (part, tag): (File, [u8; 16]),
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
fn tag_part(part: &File, tag: &mut [u8; 16], shared: bool) -> std::io::Result<()> {
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
fn joined(f: &mut RecvFile, part: File, is_direct: bool) -> std::io::Result<()> {
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
fn create_part(
    root: &Root,
    direct: DirectMode,
    rules: &Rules,
    f: &mut RecvFile,
) -> Result<(), SessionError> {
    let rel = f.part_rel();
    let io = |e| SessionError::io(rel.clone(), e);
    let mut tries = 0;
    let (part, is_direct, tag) = loop {
        match new_part(root, direct, (&rel, None)) {
            Ok(p) => break p,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 3 => {
                tries += 1;
                forget_pieces(root, f.beside());
                clear_name(root, &rel)?;
            }
            Err(e) => return Err(io(e)),
        }
    };
    let id = FileId::of(&part).map_err(io)?;
    claim(rules, &rel, id)?;
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

/// Before a shared part at `final_rel`'s part name is replaced (by a
/// whole file's part, or another version's pieces): the journals of its
/// pieces go too, as many as its mark says (they speak of that part, and
/// would be left beside the file for ever).
fn forget_pieces(root: &Root, beside: Beside<'_>) {
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

/// Remove the journals of a file's `count` pieces.
fn forget_journals(root: &Root, beside: Beside<'_>, count: u32) {
    for index in 0..count {
        let piece = Piece { index, count };
        journal::remove(root, &beside.journal(Some(piece)));
    }
}

/// Remove what is not a directory at `rel` (its name only: a hardlink's
/// other names and a link's target are untouched).
fn clear_name(root: &Root, rel: &str) -> Result<(), SessionError> {
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
fn reopen_part(
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

/// Check every entry: paths, duplicates, and the session's block count.
fn check_entries(entries: &[Entry], block: u64, follow: bool) -> Result<(), SessionError> {
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
fn covered(blocks: &[u64], size: u64, block: u64) -> u64 {
    let n = size.div_ceil(block);
    (0..n)
        .filter(|b| blocks[(b / 64) as usize] & (1 << (b % 64)) != 0)
        .map(|b| (size - b * block).min(block))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        RecvFile::new(&e, ("big".into(), 255), 4096, rules)
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
}
