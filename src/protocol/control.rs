//! Control-connection messages and their framing:
//! `u32 length | u8 kind | body`, where `length` counts kind and body and is
//! bounded by [`CONTROL_LEN_MAX`]. The first message on every connection
//! carries the magic, so a stranger speaking another protocol is refused at
//! once. Data streams open with [`Message::StreamHello`] and then carry frames.
//!
//! The messages, flags, error codes and directions are declared, one
//! definition each with the protocol version it came with, in
//! `protocol::catalogue`; this module re-exports them, holds the limits and
//! the types the messages carry, and speaks the current version.

pub use super::catalogue::{
    decode_at, decode_body_at, encode_at, kind, Direction, EncodeError, ErrorCode, Limit, Message,
    PROTOCOL_NEWEST, PROTOCOL_OLDEST,
};
pub use super::catalogue::{
    REQ_ACLS, REQ_CHECKSUM, REQ_CONTENTS, REQ_DELETE, REQ_DEVICES, REQ_DRY_RUN, REQ_ENCRYPT,
    REQ_FOLLOW, REQ_HARD_LINKS, REQ_LIVE_PARTS, REQ_NUMERIC_IDS, REQ_ONE_FILE, REQ_RESUME,
    REQ_SHARD, REQ_SPARSE, REQ_STREAM, REQ_VERIFY, REQ_XATTRS,
};
use super::handshake::VERSION;
use super::wire::DecodeError;

/// Bytes every connection starts with.
pub const MAGIC: [u8; 4] = *b"URMV";
/// Largest control message (a manifest is sent in parts under this).
pub const CONTROL_LEN_MAX: u32 = 4 << 20;
/// Most entries in one manifest part.
pub const MANIFEST_PART_ENTRIES_MAX: u32 = 4096;
/// A streamed push (protocol 14): most entries in one window of `Added`
/// parts, and most entries a sender has sent and the receiver not yet
/// admitted when it sends one. A sender past them is refused as
/// malformed: what a receiver holds decoded stays bounded.
pub const STREAM_WINDOW_ENTRIES: usize = 4096;
pub const STREAM_UNADMITTED_MAX: usize = 2 * STREAM_WINDOW_ENTRIES;
/// Longest error text.
pub const ERROR_TEXT_MAX: usize = 4096;
/// Most data streams in one session.
pub const STREAMS_MAX: u16 = 256;
/// Most items in one `Have` or `Digests` message.
pub const LIST_PART_ITEMS_MAX: u32 = 65_536;
/// Most block ranges in one `Have` message, over all its items.
pub const HAVE_PART_RANGES_MAX: u32 = 65_536;

/// `Skipped::file_index` of an entry that is not in the manifest.
pub const UNLISTED: u32 = u32::MAX;

/// What one UDP flow of `bench --net --udp` did so far (protocol 8):
/// datagrams the sending side sent, and what the counting side received of
/// them (distinct datagrams and their bytes, the highest sequence number
/// seen plus one, those that came late or twice, RFC 3550 jitter).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpCount {
    pub sent: u64,
    pub received: u64,
    pub bytes: u64,
    pub expected: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    pub jitter_ns: u64,
}

/// What a client asks for once authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRequest {
    pub direction: Direction,
    pub streams: u16,
    pub block_size: u32,
    /// `REQ_*` bits.
    pub flags: u32,
    /// Destination directory (push) or source path (pull), under the root.
    pub path: String,
    /// Who the client is across runs (a MAC of its state directory's
    /// secret; zeros when it has none): a push's files are stamped for it,
    /// and only its own are skipped unread when it runs again.
    pub owner: [u8; 32],
    /// Bytes per second the side that sends the data may send in all (0:
    /// no limit): a pull's `--rate-limit`, kept by the daemon, which
    /// paces each stream to its share.
    pub rate_limit: u64,
    /// The client's `--exclude`/`--include` rules, in order. A pull's:
    /// the daemon lists only what they let through (protocol 12). A
    /// `--delete` push's: what they exclude is kept on the receiver, as
    /// rsync keeps it (none with `--delete-excluded`). Empty otherwise.
    pub filter: Vec<FilterRule>,
    /// A reversed `bench --net`'s length in milliseconds (protocol 13; 12
    /// said it in `path`, which `SessionRequest::at` writes and reads).
    pub time_ms: u64,
}

/// What a daemon says of itself (`urmove info`, protocol 13): its
/// release, the protocols it speaks, its limits, its sessions now and the
/// free bytes under its root.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DaemonInfo {
    pub release: String,
    pub protocol_oldest: u16,
    pub protocol_newest: u16,
    pub streams_max: u16,
    pub sessions_max: u32,
    pub sessions_running: u32,
    pub files_max: u32,
    pub block_max: u32,
    pub pull_only: bool,
    pub encryption_required: bool,
    pub root_free_bytes: u64,
}

/// One `--exclude` (or `--include`) rule, as given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterRule {
    pub include: bool,
    pub pattern: String,
}

/// Rules a request may carry, and bytes in one pattern.
pub const FILTER_RULES_MAX: usize = 256;
pub const FILTER_PATTERN_MAX: usize = 1024;

impl SessionRequest {
    pub fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    /// The request as protocol `v` carries it. Before 13 a reversed
    /// bench's length and `REQ_VERIFY` travel in `path` as `<ms>[v]`.
    pub fn for_version(mut self, v: u16) -> SessionRequest {
        if v < 13 {
            if self.direction == Direction::BenchReverse {
                let verify = if self.has(REQ_VERIFY) { "v" } else { "" };
                self.path = format!("{}{verify}", self.time_ms);
            }
            self.time_ms = 0;
            self.flags &= !REQ_VERIFY;
        }
        if v < 14 {
            // A peer of 13 takes the manifest whole.
            self.flags &= !REQ_STREAM;
        }
        self
    }

    /// A request received in protocol `v`, in this build's terms (what
    /// [`SessionRequest::for_version`] wrote, read back): nothing a peer
    /// says is read from a sentence past this point.
    pub fn from_version(mut self, v: u16) -> Result<SessionRequest, BadBenchLength> {
        if v < 13 && self.direction == Direction::BenchReverse {
            let verify = self.path.ends_with('v');
            self.time_ms = self
                .path
                .trim_end_matches('v')
                .parse()
                .map_err(|_| BadBenchLength)?;
            if verify {
                self.flags |= REQ_VERIFY;
            }
            self.path.clear();
        }
        Ok(self)
    }
}

/// A protocol 12 reversed bench whose path is not `<ms>[v]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("bench --reverse: bad test length")]
pub struct BadBenchLength;

/// What the receiving side already holds of one file, told to the sender
/// when a session resumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HaveItem {
    /// The file is complete under its final name, its content read again
    /// now (its stamp matched but the file was touched since, or
    /// `--checksum`); `digest` is keyed with the session, for the sender
    /// to compare with its source's.
    Complete { file_index: u32, digest: u64 },
    /// The file is complete under its final name and untouched since it
    /// was committed (its authenticated stamp names this size and mtime,
    /// and its ctime is no later than the stamp): not read again, as
    /// rsync's quick check. `digest` is the plain digest it was committed
    /// with. The sender skips it without reading its source, and never
    /// calls it verified.
    Unchanged { file_index: u32, digest: u64 },
    /// These blocks (first block, count) are written and verified; their
    /// digest is `digest`. A file's ranges may span several items.
    Partial {
        file_index: u32,
        digest: u64,
        ranges: Vec<(u64, u64)>,
    },
}

impl HaveItem {
    pub fn file_index(&self) -> u32 {
        match self {
            HaveItem::Complete { file_index, .. }
            | HaveItem::Unchanged { file_index, .. }
            | HaveItem::Partial { file_index, .. } => *file_index,
        }
    }
}

/// A piece of a split file verified and journaled complete, as its
/// receiver acknowledges it (protocol 10; `untrusted`, 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PieceDone {
    /// Its digest over its blocks, agreed with its sender.
    pub digest: u64,
    /// The receiver's receipt for this very journal of it, made with the
    /// receivers' secret: a piece written again by another session, even
    /// with bytes of the same digest, gets another (`session::shard`).
    pub receipt: u64,
    /// When this session found every piece there and committed the file:
    /// its digest, and the digest of its pieces' receipts.
    pub whole: Option<(u64, u64)>,
    /// When this session could not commit the file because the journal of
    /// piece K there is not one its secret made (protocol 11): another
    /// receiver's, run with another secret, or no journal of urmove's.
    pub untrusted: Option<u32>,
}

/// Encode `m` with its length prefix, as the current protocol
/// ([`VERSION`]) has it. Panics on a message over a limit, which no
/// caller builds.
pub fn encode(m: &Message) -> Vec<u8> {
    encode_at(m, VERSION).unwrap_or_else(|e| panic!("control message: {e}"))
}

/// The body length announced by a message's 4-byte prefix, checked
/// against the limit before anything is allocated for it.
pub fn body_len(prefix: [u8; 4]) -> Result<usize, DecodeError> {
    let len = u32::from_le_bytes(prefix);
    if len == 0 {
        return Err(DecodeError::Invalid {
            what: "message length",
            value: 0,
        });
    }
    if len > CONTROL_LEN_MAX {
        return Err(DecodeError::TooLarge {
            what: "message length",
            value: u64::from(len),
            max: u64::from(CONTROL_LEN_MAX),
        });
    }
    Ok(len as usize)
}

/// Decode one message body (kind and fields, without the length prefix)
/// as the current protocol ([`VERSION`]) has it.
pub fn decode_body(body: &[u8]) -> Result<Message, DecodeError> {
    decode_body_at(body, VERSION)
}

/// Decode one whole message (prefix and body) from the start of `buf`.
/// `Ok(None)` means more bytes are needed.
pub fn decode(buf: &[u8]) -> Result<Option<(Message, usize)>, DecodeError> {
    let Some(prefix) = buf.get(..4) else {
        return Ok(None);
    };
    let len = body_len(prefix.try_into().expect("4 bytes"))?;
    let Some(body) = buf.get(4..4 + len) else {
        return Ok(None);
    };
    Ok(Some((decode_body_at(body, VERSION)?, 4 + len)))
}
