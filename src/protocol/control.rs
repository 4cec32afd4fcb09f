//! Control-connection messages and their framing:
//! `u32 length | u8 kind | body`, where `length` counts kind and body and is
//! bounded by [`CONTROL_LEN_MAX`]. The first message on every connection
//! carries the magic, so a stranger speaking another protocol is refused at
//! once. Data streams open with [`Message::StreamHello`] and then carry frames.

use super::handshake::{
    Auth, Challenge, Hello, Proof, SessionId, Welcome, NONCE_LEN, PROOF_LEN, SESSION_ID_LEN,
};
use super::manifest::{decode_entry, encode_entry, Entry};
use super::wire::{DecodeError, Reader, Writer};

/// Bytes every connection starts with.
pub const MAGIC: [u8; 4] = *b"URMV";
/// Largest control message (a manifest is sent in parts under this).
pub const CONTROL_LEN_MAX: u32 = 4 << 20;
/// Most entries in one manifest part.
pub const MANIFEST_PART_ENTRIES_MAX: u32 = 4096;
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

/// Request flag: continue from what the receiver already holds.
pub const REQ_RESUME: u32 = 1;
/// Request flag: compare finished files by content, not size and mtime.
pub const REQ_CHECKSUM: u32 = 2;
/// Request flag: seal every data frame with AES-256-GCM.
pub const REQ_ENCRYPT: u32 = 4;
/// Request flag: a receiver running as root gives entries the sender's
/// owner and group by number, not by name (`--numeric-ids`).
pub const REQ_NUMERIC_IDS: u32 = 8;
/// Request flag: after the transfer, remove what the receiver holds under
/// the manifest's directories that the manifest does not list (`--delete`).
pub const REQ_DELETE: u32 = 16;
/// Request flag: a push's dry run (`--dry-run`). The receiver says what it
/// holds (`Have`), what it would refuse and, with `REQ_DELETE`, what it
/// would remove, then its `Summary`; it writes nothing and no data comes.
pub const REQ_DRY_RUN: u32 = 32;
/// Request flag (protocol 7): a push that follows files still being
/// written (`send --follow`). Its manifest may mark files growing: their
/// size is where they stood, full blocks beyond it may come, and each
/// ends with `FileEnd` (its final size and mtime) before its digest.
pub const REQ_FOLLOW: u32 = 64;
/// Request flag (protocol 7, with `REQ_FOLLOW`): a growing file's part is
/// readable while it grows (its final mode), and its `user.urmove.live`
/// attribute holds how many bytes from its start are written and checked.
pub const REQ_LIVE_PARTS: u32 = 128;
/// Request flag (protocol 9): the scanning side keeps hard links (`-H`).
/// A push's manifest says it by itself; a pull asks the daemon's scan.
pub const REQ_HARD_LINKS: u32 = 256;
/// Request flag (protocol 9): the scanning side carries user.* extended
/// attributes (`-X`).
pub const REQ_XATTRS: u32 = 512;
/// Request flag (protocol 9): the scanning side carries POSIX ACLs (`-A`).
pub const REQ_ACLS: u32 = 1024;
/// Request flag (protocol 9): the sending side leaves runs of zeros
/// inside data out of its frames as it leaves holes (`--sparse`), so the
/// receiver writes them as holes too.
pub const REQ_SPARSE: u32 = 2048;
/// Request flag (protocol 10): a pull of one shard (`pull --shard`): the
/// client sends `Shard` after its request, the daemon answers with
/// `ShardManifest` (the whole manifest's) and offers only the share.
pub const REQ_SHARD: u32 = 4096;
/// Request flag (protocol 12): device nodes are carried (`-D`): a pull's
/// daemon lists them, a receiver makes them where it may.
pub const REQ_DEVICES: u32 = 8192;
/// Request flag (protocol 12): a push of a directory's contents (a source
/// given as `DIR/`, rsync's trailing slash): the destination stands for
/// that directory, so with `REQ_DELETE` what it holds beyond the manifest
/// goes too (never the receiver's root itself: refused there).
pub const REQ_CONTENTS: u32 = 16384;
/// Request flag (protocol 12): a push of one file (no directory) that may
/// take the destination's name, as rsync and scp rename a single file:
/// where the destination is no directory on the receiver, the file lands
/// at the destination itself (`send obs.dat HOST:new.dat`).
pub const REQ_ONE_FILE: u32 = 32768;
const REQ_KNOWN: u32 = REQ_SHARD
    | REQ_DEVICES
    | REQ_CONTENTS
    | REQ_ONE_FILE
    | REQ_LIVE_PARTS
    | REQ_SPARSE
    | REQ_HARD_LINKS
    | REQ_XATTRS
    | REQ_ACLS
    | REQ_RESUME
    | REQ_CHECKSUM
    | REQ_ENCRYPT
    | REQ_NUMERIC_IDS
    | REQ_DELETE
    | REQ_DRY_RUN
    | REQ_FOLLOW;

/// Push (send to the daemon), pull (fetch from it), or a network benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Push = 0,
    Pull = 1,
    /// `bench --net`: memory to memory, nothing written.
    Bench = 2,
    /// `bench --net --reverse`: the daemon sends.
    BenchReverse = 3,
    /// `bench --net --udp` (protocol 8): datagrams to the daemon, which
    /// counts them; no data streams.
    Udp = 4,
    /// `bench --net --udp --reverse`: the daemon sends the datagrams.
    UdpReverse = 5,
}

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
}

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

/// Error codes carried by [`Message::Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    AuthFailed = 1,
    BadRequest = 2,
    PathRefused = 3,
    TooLarge = 4,
    Io = 5,
    NoSpace = 6,
    Malformed = 7,
    Busy = 8,
    Internal = 9,
    /// The receiver was told to stop (SIGTERM) before the session ended.
    ShuttingDown = 10,
    /// The client's user stopped it (Ctrl-C; protocol 12): a stop, not a
    /// fault.
    Interrupted = 11,
}

impl ErrorCode {
    fn from_u16(v: u16) -> Option<Self> {
        use ErrorCode::*;
        [
            AuthFailed,
            BadRequest,
            PathRefused,
            TooLarge,
            Io,
            NoSpace,
            Malformed,
            Busy,
            Internal,
            ShuttingDown,
            Interrupted,
        ]
        .into_iter()
        .find(|c| *c as u16 == v)
    }

    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::AuthFailed => "auth_failed",
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::PathRefused => "path_refused",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::Io => "io_error",
            ErrorCode::NoSpace => "no_space",
            ErrorCode::Malformed => "malformed",
            ErrorCode::Busy => "busy",
            ErrorCode::Internal => "internal",
            ErrorCode::ShuttingDown => "shutting_down",
            ErrorCode::Interrupted => "interrupted",
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    Hello(Hello),
    Challenge(Challenge),
    Auth(Auth),
    Welcome(Welcome),
    Request(SessionRequest),
    /// Part of the manifest; the receiver numbers entries in arrival order.
    Manifest(Vec<Entry>),
    ManifestEnd,
    /// The receiver has prepared every file and waits for the data streams.
    Ready,
    /// The first message of a data stream.
    StreamHello {
        session_id: SessionId,
        stream_index: u16,
        proof: Proof,
    },
    /// A file arrived, verified (digest over its blocks) and was renamed.
    FileAck {
        file_index: u32,
        digest: u64,
    },
    /// Protocol 10, after a `REQ_SHARD` pull's request: which shard of how
    /// many, and the bytes above which a file is split.
    Shard {
        index: u32,
        count: u32,
        split_over: u64,
    },
    /// Protocol 12, from the receiver once the sender stopped (an
    /// `Error` of code `Interrupted`): the files whose verified blocks it
    /// journaled, and those blocks' bytes, which the next run continues.
    Kept {
        files: u64,
        bytes: u64,
    },
    /// Protocol 10, the daemon's answer to `Shard`: the whole manifest's
    /// files, bytes and digest, before the share's manifest.
    ShardManifest {
        files: u64,
        bytes: u64,
        digest: [u8; 32],
    },
    /// Protocol 10: a piece of a split file arrived, verified and
    /// journaled complete (see [`PieceDone`]).
    PieceAck {
        file_index: u32,
        done: PieceDone,
    },
    Error {
        code: ErrorCode,
        message: String,
    },
    Summary {
        files: u64,
        bytes: u64,
        ok: bool,
    },
    /// Part of what the receiver holds already (resume), then `HaveEnd`.
    Have(Vec<HaveItem>),
    HaveEnd,
    /// From the sending side while the data flows: the digest of each file
    /// it has read through, (entry, digest). The receiver commits a file
    /// (stamp, rename) only when its own digest of what it wrote is equal.
    SourceDigests(Vec<(u32, u64)>),
    /// From the sending side of a `REQ_FOLLOW` push: growing file
    /// `file_index` stopped growing (its writer closed it and it stayed
    /// idle) at `size` bytes, modified at `mtime`. Its digest follows.
    FileEnd {
        file_index: u32,
        size: u64,
        mtime_s: i64,
        mtime_ns: u32,
    },
    /// From the sending side of a `REQ_FOLLOW` push: entries that appeared
    /// in a followed directory (growing files, directories), numbered on
    /// from `first` (the count so far). Their data waits for `Admitted`.
    Added {
        first: u32,
        entries: Vec<Entry>,
    },
    /// From the sending side of a `REQ_FOLLOW` push, before `AddedEnd`:
    /// directories whose mtime moved while they were followed (entry,
    /// mtime seconds, nanoseconds), as they are set at the end.
    DirTimes(Vec<(u32, i64, u32)>),
    /// From the sending side of a `REQ_FOLLOW` push: nothing more is
    /// added (`--follow-until` passed, or every file followed ended).
    AddedEnd,
    /// From the receiver: every entry below `upto` is prepared (`Added`
    /// entries claimed and made ready); frames for them may come.
    Admitted {
        upto: u32,
    },
    /// What arrived of a file differs from the sender's digest: it was not
    /// committed (its part is gone, its final name untouched).
    FileRejected {
        file_index: u32,
        digest: u64,
    },
    /// An entry that is not moved, and why. From the sending side: it
    /// could not be read (vanished, unreadable, replaced, changed while
    /// sent) and the receiver does not wait for it; `file_index` is
    /// [`UNLISTED`] for one the scan left out of the manifest (a FIFO, a
    /// socket, a device), named by `path`. From the receiver: an entry its
    /// policy will not create (an unsafe symlink). `rule` (protocol 12):
    /// left out by a rule (a policy, an option, a name the filesystem
    /// cannot hold), which running again cannot mend; otherwise a fault
    /// (vanished, unreadable, changed while sent).
    Skipped {
        file_index: u32,
        path: String,
        reason: String,
        rule: bool,
    },
    /// Part of the held files and blocks (from `Have`) whose content the
    /// sender found different from its sources: the receiver forgets them.
    HeldWrong(Vec<u32>),
    /// The sender checked everything `Have` named against its sources.
    HeldChecked,
    /// From the daemon of a pull (protocol 12), with what its scan left
    /// out, when it left out anything unnamed: entries the request's
    /// filter excluded (a directory counts once, nothing beneath it looked
    /// at) and device nodes left out without `REQ_DEVICES`.
    LeftOut {
        excluded: u64,
        devices: u64,
    },
    /// From the daemon, instead of `Error`, refusing a session that asked
    /// for more data streams than it takes (protocol 12): the count asked
    /// and the most it takes, as fields, so a client can ask again for
    /// what it takes (`-P auto`) without reading a sentence.
    StreamsRefused {
        asked: u16,
        max: u16,
    },
    /// From the receiver of a `--delete` push, before its summary: part of
    /// what it removed (paths under the destination), as rsync's
    /// "deleting" lines.
    Deleted(Vec<String>),
    /// A heartbeat from the receiver: alive, and per data stream the bytes
    /// it delivered so far and whether a receive waits on it (so the sender
    /// can tell a stream whose bytes left its socket but never arrived from
    /// a receiver that is busy writing).
    Alive {
        streams: Vec<(u64, bool)>,
    },
    /// From the receiver, once, before the data (protocol 4): where it
    /// writes each file, so the sender puts a file's frames on the streams
    /// of the receiving lane whose ring drives that file's device. Each
    /// stream's class (`streams`, by session number) and each entry's:
    /// `entries` are runs (first entry, class) in ascending order, an
    /// entry in the run that starts at or before it. Empty: no routing.
    /// A hint, never a rule: a frame on any stream is received.
    Placement {
        streams: Vec<u16>,
        entries: Vec<(u32, u16)>,
    },
    /// From the client of a UDP test, once admitted: `flows` flows of
    /// `size`-byte datagrams at `rate` bytes a second in all (0: as fast as
    /// the sender can) for `time_ms`, counts every `interval_ms`; reversed,
    /// the client's counting `port` (the daemon sends only once a tagged
    /// datagram from there reached it: see `UdpReady`).
    UdpPlan {
        flows: u16,
        size: u32,
        rate: u64,
        time_ms: u64,
        interval_ms: u32,
        port: u16,
    },
    /// From the daemon of a UDP test: ready, receiving on `port`; reversed,
    /// `port` is where it waits for the client's hello (a datagram of flow
    /// `u32::MAX` tagged under the session's key, from the client's
    /// counting port at the control connection's address) before it sends
    /// to where that came from.
    UdpReady {
        port: u16,
    },
    /// The counts of a UDP test so far, each flow's, from the side that
    /// counts them (and reversed, the sender's `sent` from the daemon), and
    /// the datagrams nobody's tag checked; `done` the last.
    UdpCounts {
        done: bool,
        foreign: u64,
        flows: Vec<UdpCount>,
    },
    /// From the sending side of a UDP test: it sent all it will, each
    /// flow's datagrams.
    UdpEnd {
        sent: Vec<u64>,
    },
}

mod kind {
    pub const HELLO: u8 = 1;
    pub const CHALLENGE: u8 = 2;
    pub const AUTH: u8 = 3;
    pub const WELCOME: u8 = 4;
    pub const REQUEST: u8 = 5;
    pub const MANIFEST: u8 = 6;
    pub const MANIFEST_END: u8 = 7;
    pub const STREAM_HELLO: u8 = 8;
    pub const FILE_ACK: u8 = 9;
    pub const ERROR: u8 = 10;
    pub const SUMMARY: u8 = 11;
    pub const READY: u8 = 12;
    pub const HAVE: u8 = 13;
    pub const HAVE_END: u8 = 14;
    pub const SOURCE_DIGESTS: u8 = 15;
    pub const FILE_REJECTED: u8 = 16;
    pub const ALIVE: u8 = 17;
    pub const SKIPPED: u8 = 18;
    pub const HELD_WRONG: u8 = 19;
    pub const HELD_CHECKED: u8 = 20;
    pub const PLACEMENT: u8 = 21;
    pub const DELETED: u8 = 22;
    pub const FILE_END: u8 = 23;
    pub const ADDED: u8 = 24;
    pub const ADMITTED: u8 = 25;
    pub const ADDED_END: u8 = 26;
    pub const DIR_TIMES: u8 = 27;
    pub const UDP_PLAN: u8 = 28;
    pub const UDP_READY: u8 = 29;
    pub const UDP_COUNTS: u8 = 30;
    pub const UDP_END: u8 = 31;
    pub const PIECE_ACK: u8 = 32;
    pub const SHARD: u8 = 33;
    pub const SHARD_MANIFEST: u8 = 34;
    pub const KEPT: u8 = 35;
    pub const LEFT_OUT: u8 = 36;
    pub const STREAMS_REFUSED: u8 = 37;
}

/// A part of a manifest (or of what a follow added): its count, bounded,
/// then the entries.
fn decode_manifest_part(r: &mut Reader<'_>) -> Result<Vec<Entry>, DecodeError> {
    let count = r.u32()?;
    if count > MANIFEST_PART_ENTRIES_MAX {
        return Err(DecodeError::TooLarge {
            what: "manifest part entries",
            value: u64::from(count),
            max: u64::from(MANIFEST_PART_ENTRIES_MAX),
        });
    }
    let mut entries = Vec::with_capacity(count as usize);
    for _ in 0..count {
        entries.push(decode_entry(r)?);
    }
    Ok(entries)
}

/// Encode `m` with its length prefix.
pub fn encode(m: &Message) -> Vec<u8> {
    let mut w = Writer::default();
    w.u32(0); // length, patched below
    match m {
        Message::Hello(h) => {
            w.u8(kind::HELLO)
                .bytes(&MAGIC)
                .u16(h.version)
                .bytes(&h.client_nonce);
        }
        Message::Challenge(c) => {
            w.u8(kind::CHALLENGE)
                .bytes(&c.server_nonce)
                .bytes(&c.server_proof);
        }
        Message::Auth(a) => {
            w.u8(kind::AUTH).bytes(&a.client_proof);
        }
        Message::Welcome(x) => {
            w.u8(kind::WELCOME).bytes(&x.session_id);
        }
        Message::Request(r) => {
            w.u8(kind::REQUEST)
                .u8(r.direction as u8)
                .u16(r.streams)
                .u32(r.block_size)
                .u32(r.flags)
                .name16(&r.path)
                .bytes(&r.owner)
                .u64(r.rate_limit);
            assert!(r.filter.len() <= FILTER_RULES_MAX);
            w.u16(r.filter.len() as u16);
            for rule in &r.filter {
                w.u8(u8::from(rule.include)).str16(&rule.pattern);
            }
        }
        Message::Manifest(entries) => {
            assert!(entries.len() as u32 <= MANIFEST_PART_ENTRIES_MAX);
            w.u8(kind::MANIFEST).u32(entries.len() as u32);
            for e in entries {
                encode_entry(&mut w, e);
            }
        }
        Message::ManifestEnd => {
            w.u8(kind::MANIFEST_END);
        }
        Message::Added { first, entries } => {
            assert!(entries.len() as u32 <= MANIFEST_PART_ENTRIES_MAX);
            w.u8(kind::ADDED).u32(*first).u32(entries.len() as u32);
            for e in entries {
                encode_entry(&mut w, e);
            }
        }
        Message::Admitted { upto } => {
            w.u8(kind::ADMITTED).u32(*upto);
        }
        Message::AddedEnd => {
            w.u8(kind::ADDED_END);
        }
        Message::DirTimes(items) => {
            assert!(items.len() as u32 <= LIST_PART_ITEMS_MAX);
            w.u8(kind::DIR_TIMES).u32(items.len() as u32);
            for (i, s, ns) in items {
                w.u32(*i).i64(*s).u32(*ns);
            }
        }
        Message::Ready => {
            w.u8(kind::READY);
        }
        Message::UdpPlan {
            flows,
            size,
            rate,
            time_ms,
            interval_ms,
            port,
        } => {
            w.u8(kind::UDP_PLAN).u16(*flows).u32(*size).u64(*rate);
            w.u64(*time_ms).u32(*interval_ms).u16(*port);
        }
        Message::UdpReady { port } => {
            w.u8(kind::UDP_READY).u16(*port);
        }
        Message::UdpCounts {
            done,
            foreign,
            flows,
        } => {
            assert!(flows.len() <= usize::from(STREAMS_MAX));
            w.u8(kind::UDP_COUNTS).u8(u8::from(*done)).u64(*foreign);
            w.u16(flows.len() as u16);
            for c in flows {
                w.u64(c.sent).u64(c.received).u64(c.bytes).u64(c.expected);
                w.u64(c.out_of_order).u64(c.duplicates).u64(c.jitter_ns);
            }
        }
        Message::UdpEnd { sent } => {
            assert!(sent.len() <= usize::from(STREAMS_MAX));
            w.u8(kind::UDP_END).u16(sent.len() as u16);
            for n in sent {
                w.u64(*n);
            }
        }
        Message::StreamHello {
            session_id,
            stream_index,
            proof,
        } => {
            w.u8(kind::STREAM_HELLO)
                .bytes(&MAGIC)
                .bytes(session_id)
                .u16(*stream_index)
                .bytes(proof);
        }
        Message::FileAck { file_index, digest } => {
            w.u8(kind::FILE_ACK).u32(*file_index).u64(*digest);
        }
        Message::Shard {
            index,
            count,
            split_over,
        } => {
            w.u8(kind::SHARD).u32(*index).u32(*count).u64(*split_over);
        }
        Message::ShardManifest {
            files,
            bytes,
            digest,
        } => {
            w.u8(kind::SHARD_MANIFEST)
                .u64(*files)
                .u64(*bytes)
                .bytes(digest);
        }
        Message::Kept { files, bytes } => {
            w.u8(kind::KEPT).u64(*files).u64(*bytes);
        }
        Message::PieceAck { file_index, done } => {
            // What became of the file: 0 left to the last piece, 1
            // committed (its digest, its receipts' digest), 2 not trusted
            // (the piece whose journal this receiver could not trust).
            let (state, a, b) = match (done.whole, done.untrusted) {
                (Some((digest, receipts)), _) => (1, digest, receipts),
                (None, Some(piece)) => (2, u64::from(piece), 0),
                (None, None) => (0, 0, 0),
            };
            w.u8(kind::PIECE_ACK).u32(*file_index);
            w.u64(done.digest).u64(done.receipt);
            w.u8(state).u64(a).u64(b);
        }
        Message::Error { code, message } => {
            let text: String = message.chars().take(ERROR_TEXT_MAX / 4).collect();
            w.u8(kind::ERROR).u16(*code as u16).str16(&text);
        }
        Message::Summary { files, bytes, ok } => {
            w.u8(kind::SUMMARY)
                .u64(*files)
                .u64(*bytes)
                .u8(u8::from(*ok));
        }
        Message::Have(items) => {
            assert!(items.len() as u32 <= LIST_PART_ITEMS_MAX);
            w.u8(kind::HAVE).u32(items.len() as u32);
            for it in items {
                match it {
                    HaveItem::Complete { file_index, digest } => {
                        w.u8(0).u32(*file_index).u64(*digest);
                    }
                    HaveItem::Unchanged { file_index, digest } => {
                        w.u8(2).u32(*file_index).u64(*digest);
                    }
                    HaveItem::Partial {
                        file_index,
                        digest,
                        ranges,
                    } => {
                        w.u8(1)
                            .u32(*file_index)
                            .u64(*digest)
                            .u32(ranges.len() as u32);
                        for (first, count) in ranges {
                            w.u64(*first).u64(*count);
                        }
                    }
                }
            }
        }
        Message::HaveEnd => {
            w.u8(kind::HAVE_END);
        }
        Message::SourceDigests(items) => {
            assert!(items.len() as u32 <= LIST_PART_ITEMS_MAX);
            w.u8(kind::SOURCE_DIGESTS).u32(items.len() as u32);
            for (i, d) in items {
                w.u32(*i).u64(*d);
            }
        }
        Message::FileEnd {
            file_index,
            size,
            mtime_s,
            mtime_ns,
        } => {
            w.u8(kind::FILE_END)
                .u32(*file_index)
                .u64(*size)
                .i64(*mtime_s)
                .u32(*mtime_ns);
        }
        Message::FileRejected { file_index, digest } => {
            w.u8(kind::FILE_REJECTED).u32(*file_index).u64(*digest);
        }
        Message::Skipped {
            file_index,
            path,
            reason,
            rule,
        } => {
            let text: String = reason.chars().take(ERROR_TEXT_MAX / 4).collect();
            w.u8(kind::SKIPPED)
                .u32(*file_index)
                .name16(path)
                .str16(&text)
                .u8(u8::from(*rule));
        }
        Message::HeldWrong(items) => {
            assert!(items.len() as u32 <= LIST_PART_ITEMS_MAX);
            w.u8(kind::HELD_WRONG).u32(items.len() as u32);
            for i in items {
                w.u32(*i);
            }
        }
        Message::Deleted(paths) => {
            assert!(paths.len() as u32 <= LIST_PART_ITEMS_MAX);
            w.u8(kind::DELETED).u32(paths.len() as u32);
            for p in paths {
                w.name16(p);
            }
        }
        Message::HeldChecked => {
            w.u8(kind::HELD_CHECKED);
        }
        Message::LeftOut { excluded, devices } => {
            w.u8(kind::LEFT_OUT).u64(*excluded).u64(*devices);
        }
        Message::StreamsRefused { asked, max } => {
            w.u8(kind::STREAMS_REFUSED).u16(*asked).u16(*max);
        }
        Message::Alive { streams } => {
            assert!(streams.len() <= usize::from(STREAMS_MAX));
            w.u8(kind::ALIVE).u16(streams.len() as u16);
            for (bytes, waiting) in streams {
                w.u64(*bytes).u8(u8::from(*waiting));
            }
        }
        Message::Placement { streams, entries } => {
            assert!(streams.len() <= usize::from(STREAMS_MAX));
            assert!(entries.len() as u32 <= LIST_PART_ITEMS_MAX);
            w.u8(kind::PLACEMENT).u16(streams.len() as u16);
            for c in streams {
                w.u16(*c);
            }
            w.u32(entries.len() as u32);
            for (first, c) in entries {
                w.u32(*first).u16(*c);
            }
        }
    }
    let len = (w.buf.len() - 4) as u32;
    assert!(len <= CONTROL_LEN_MAX, "control message over the limit");
    w.buf[..4].copy_from_slice(&len.to_le_bytes());
    w.buf
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

/// Decode one message body (kind and fields, without the length prefix).
pub fn decode_body(body: &[u8]) -> Result<Message, DecodeError> {
    let mut r = Reader::new(body);
    let magic = |r: &mut Reader<'_>| -> Result<(), DecodeError> {
        if r.array::<4>()? != MAGIC {
            return Err(DecodeError::Invalid {
                what: "magic",
                value: 0,
            });
        }
        Ok(())
    };
    let m = match r.u8()? {
        kind::HELLO => {
            magic(&mut r)?;
            Message::Hello(Hello {
                version: r.u16()?,
                client_nonce: r.array::<NONCE_LEN>()?,
            })
        }
        kind::CHALLENGE => Message::Challenge(Challenge {
            server_nonce: r.array::<NONCE_LEN>()?,
            server_proof: r.array::<PROOF_LEN>()?,
        }),
        kind::AUTH => Message::Auth(Auth {
            client_proof: r.array::<PROOF_LEN>()?,
        }),
        kind::WELCOME => Message::Welcome(Welcome {
            session_id: r.array::<SESSION_ID_LEN>()?,
        }),
        kind::REQUEST => {
            let direction = match r.u8()? {
                0 => Direction::Push,
                1 => Direction::Pull,
                2 => Direction::Bench,
                3 => Direction::BenchReverse,
                4 => Direction::Udp,
                5 => Direction::UdpReverse,
                d => {
                    return Err(DecodeError::Invalid {
                        what: "direction",
                        value: u64::from(d),
                    })
                }
            };
            let streams = r.u16()?;
            if streams == 0 || streams > STREAMS_MAX {
                return Err(DecodeError::TooLarge {
                    what: "stream count",
                    value: u64::from(streams),
                    max: u64::from(STREAMS_MAX),
                });
            }
            let block_size = r.u32()?;
            if block_size == 0 || block_size > super::frame::FRAME_PAYLOAD_MAX {
                return Err(DecodeError::TooLarge {
                    what: "block size",
                    value: u64::from(block_size),
                    max: u64::from(super::frame::FRAME_PAYLOAD_MAX),
                });
            }
            let flags = r.u32()?;
            if flags & !REQ_KNOWN != 0 {
                return Err(DecodeError::Invalid {
                    what: "request flags",
                    value: u64::from(flags),
                });
            }
            let path = r.name16("path", super::manifest::PATH_LEN_MAX)?;
            Message::Request(SessionRequest {
                direction,
                streams,
                block_size,
                flags,
                path,
                owner: r.array()?,
                rate_limit: r.u64()?,
                filter: filter_rules(&mut r)?,
            })
        }
        kind::MANIFEST => Message::Manifest(decode_manifest_part(&mut r)?),
        kind::MANIFEST_END => Message::ManifestEnd,
        kind::ADDED => {
            let first = r.u32()?;
            let entries = decode_manifest_part(&mut r)?;
            Message::Added { first, entries }
        }
        kind::ADMITTED => Message::Admitted { upto: r.u32()? },
        kind::ADDED_END => Message::AddedEnd,
        kind::DIR_TIMES => {
            let count = list_len(&mut r, "directory times")?;
            let mut items = Vec::with_capacity(count);
            for _ in 0..count {
                let (i, s, ns) = (r.u32()?, r.i64()?, r.u32()?);
                if ns >= 1_000_000_000 {
                    return Err(DecodeError::Invalid {
                        what: "mtime nanoseconds",
                        value: u64::from(ns),
                    });
                }
                items.push((i, s, ns));
            }
            Message::DirTimes(items)
        }
        kind::READY => Message::Ready,
        kind::UDP_PLAN => Message::UdpPlan {
            flows: r.u16()?,
            size: r.u32()?,
            rate: r.u64()?,
            time_ms: r.u64()?,
            interval_ms: r.u32()?,
            port: r.u16()?,
        },
        kind::UDP_READY => Message::UdpReady { port: r.u16()? },
        kind::UDP_COUNTS => {
            let done = r.u8()? != 0;
            let foreign = r.u64()?;
            let n = r.count16("UDP flows", usize::from(STREAMS_MAX))?;
            let mut flows = Vec::with_capacity(n);
            for _ in 0..n {
                flows.push(UdpCount {
                    sent: r.u64()?,
                    received: r.u64()?,
                    bytes: r.u64()?,
                    expected: r.u64()?,
                    out_of_order: r.u64()?,
                    duplicates: r.u64()?,
                    jitter_ns: r.u64()?,
                });
            }
            Message::UdpCounts {
                done,
                foreign,
                flows,
            }
        }
        kind::UDP_END => {
            let n = r.count16("UDP flows", usize::from(STREAMS_MAX))?;
            let mut sent = Vec::with_capacity(n);
            for _ in 0..n {
                sent.push(r.u64()?);
            }
            Message::UdpEnd { sent }
        }
        kind::STREAM_HELLO => {
            magic(&mut r)?;
            Message::StreamHello {
                session_id: r.array::<SESSION_ID_LEN>()?,
                stream_index: r.u16()?,
                proof: r.array::<PROOF_LEN>()?,
            }
        }
        kind::FILE_ACK => Message::FileAck {
            file_index: r.u32()?,
            digest: r.u64()?,
        },
        kind::SHARD => {
            let (index, count, split_over) = (r.u32()?, r.u32()?, r.u64()?);
            if count == 0 || count > super::manifest::PIECES_MAX || index >= count {
                return Err(DecodeError::Invalid {
                    what: "shard",
                    value: (u64::from(index) << 32) | u64::from(count),
                });
            }
            Message::Shard {
                index,
                count,
                split_over,
            }
        }
        kind::SHARD_MANIFEST => Message::ShardManifest {
            files: r.u64()?,
            bytes: r.u64()?,
            digest: r.array()?,
        },
        kind::KEPT => Message::Kept {
            files: r.u64()?,
            bytes: r.u64()?,
        },
        kind::PIECE_ACK => {
            let (file_index, digest, receipt) = (r.u32()?, r.u64()?, r.u64()?);
            let (state, a, b) = (r.u8()?, r.u64()?, r.u64()?);
            let (whole, untrusted) = match (state, a, b) {
                (0, 0, 0) => (None, None),
                (1, digest, receipts) => (Some((digest, receipts)), None),
                (2, piece, 0) if piece <= u64::from(u32::MAX) => (None, Some(piece as u32)),
                _ => {
                    return Err(DecodeError::Invalid {
                        what: "piece acknowledgement",
                        value: u64::from(state),
                    })
                }
            };
            Message::PieceAck {
                file_index,
                done: PieceDone {
                    digest,
                    receipt,
                    whole,
                    untrusted,
                },
            }
        }
        kind::ERROR => {
            let code = r.u16()?;
            let code = ErrorCode::from_u16(code).ok_or(DecodeError::Invalid {
                what: "error code",
                value: u64::from(code),
            })?;
            Message::Error {
                code,
                message: r.str16("error text", ERROR_TEXT_MAX)?.to_string(),
            }
        }
        kind::SUMMARY => Message::Summary {
            files: r.u64()?,
            bytes: r.u64()?,
            ok: r.u8()? != 0,
        },
        kind::HAVE => {
            let count = list_len(&mut r, "have items")?;
            let mut ranges_left = HAVE_PART_RANGES_MAX;
            let mut items = Vec::with_capacity(count);
            for _ in 0..count {
                let tag = r.u8()?;
                let file_index = r.u32()?;
                let digest = r.u64()?;
                items.push(match tag {
                    0 => HaveItem::Complete { file_index, digest },
                    2 => HaveItem::Unchanged { file_index, digest },
                    1 => {
                        let n = r.u32()?;
                        if n > ranges_left {
                            return Err(DecodeError::TooLarge {
                                what: "have ranges",
                                value: u64::from(n),
                                max: u64::from(HAVE_PART_RANGES_MAX),
                            });
                        }
                        ranges_left -= n;
                        let mut ranges = Vec::with_capacity(n as usize);
                        for _ in 0..n {
                            let (first, count) = (r.u64()?, r.u64()?);
                            if count == 0 || first.checked_add(count).is_none() {
                                return Err(DecodeError::Invalid {
                                    what: "block range",
                                    value: count,
                                });
                            }
                            ranges.push((first, count));
                        }
                        HaveItem::Partial {
                            file_index,
                            digest,
                            ranges,
                        }
                    }
                    t => {
                        return Err(DecodeError::Invalid {
                            what: "have item",
                            value: u64::from(t),
                        })
                    }
                });
            }
            Message::Have(items)
        }
        kind::HAVE_END => Message::HaveEnd,
        kind::SOURCE_DIGESTS => {
            let count = list_len(&mut r, "digests")?;
            let mut items = Vec::with_capacity(count);
            for _ in 0..count {
                items.push((r.u32()?, r.u64()?));
            }
            Message::SourceDigests(items)
        }
        kind::FILE_END => {
            let (file_index, size, mtime_s) = (r.u32()?, r.u64()?, r.i64()?);
            let mtime_ns = r.u32()?;
            if mtime_ns >= 1_000_000_000 {
                return Err(DecodeError::Invalid {
                    what: "mtime nanoseconds",
                    value: u64::from(mtime_ns),
                });
            }
            Message::FileEnd {
                file_index,
                size,
                mtime_s,
                mtime_ns,
            }
        }
        kind::FILE_REJECTED => Message::FileRejected {
            file_index: r.u32()?,
            digest: r.u64()?,
        },
        kind::SKIPPED => Message::Skipped {
            file_index: r.u32()?,
            path: r.name16("path", super::manifest::PATH_LEN_MAX)?,
            reason: r.str16("skip reason", ERROR_TEXT_MAX)?.to_string(),
            rule: match r.u8()? {
                0 => false,
                1 => true,
                v => {
                    return Err(DecodeError::Invalid {
                        what: "skip rule",
                        value: u64::from(v),
                    })
                }
            },
        },
        kind::HELD_WRONG => {
            let count = list_len(&mut r, "held entries")?;
            let items = (0..count).map(|_| r.u32()).collect::<Result<_, _>>()?;
            Message::HeldWrong(items)
        }
        kind::HELD_CHECKED => Message::HeldChecked,
        kind::LEFT_OUT => Message::LeftOut {
            excluded: r.u64()?,
            devices: r.u64()?,
        },
        kind::STREAMS_REFUSED => Message::StreamsRefused {
            asked: r.u16()?,
            max: r.u16()?,
        },
        kind::DELETED => {
            let count = list_len(&mut r, "deleted paths")?;
            let paths = (0..count)
                .map(|_| r.name16("path", super::manifest::PATH_LEN_MAX))
                .collect::<Result<_, _>>()?;
            Message::Deleted(paths)
        }
        kind::ALIVE => {
            let n = stream_count(&mut r)?;
            let streams = (0..n)
                .map(|_| Ok((r.u64()?, r.u8()? != 0)))
                .collect::<Result<_, DecodeError>>()?;
            Message::Alive { streams }
        }
        kind::PLACEMENT => decode_placement(&mut r)?,
        k => {
            return Err(DecodeError::Invalid {
                what: "message kind",
                value: u64::from(k),
            })
        }
    };
    r.finish()?;
    Ok(m)
}

/// A count of streams, at most [`STREAMS_MAX`].
fn stream_count(r: &mut Reader<'_>) -> Result<u16, DecodeError> {
    let n = r.u16()?;
    if n > STREAMS_MAX {
        return Err(DecodeError::TooLarge {
            what: "stream count",
            value: u64::from(n),
            max: u64::from(STREAMS_MAX),
        });
    }
    Ok(n)
}

/// A [`Message::Placement`] after its kind: at most [`STREAMS_MAX`]
/// streams, runs in ascending entry order.
fn decode_placement(r: &mut Reader<'_>) -> Result<Message, DecodeError> {
    let n = stream_count(r)?;
    let streams = (0..n).map(|_| r.u16()).collect::<Result<_, _>>()?;
    let count = list_len(r, "placement runs")?;
    let mut entries: Vec<(u32, u16)> = Vec::with_capacity(count);
    for _ in 0..count {
        let run = (r.u32()?, r.u16()?);
        if entries.last().is_some_and(|last| last.0 >= run.0) {
            return Err(DecodeError::Invalid {
                what: "placement run (not ascending)",
                value: u64::from(run.0),
            });
        }
        entries.push(run);
    }
    Ok(Message::Placement { streams, entries })
}

/// A list's item count, within [`LIST_PART_ITEMS_MAX`] and within what
/// the rest of the message can hold (so nothing is allocated for a lie).
fn list_len(r: &mut Reader<'_>, what: &'static str) -> Result<usize, DecodeError> {
    let count = r.u32()?;
    if count > LIST_PART_ITEMS_MAX || count as usize > r.remaining() {
        return Err(DecodeError::TooLarge {
            what,
            value: u64::from(count),
            max: u64::from(LIST_PART_ITEMS_MAX),
        });
    }
    Ok(count as usize)
}

/// A request's filter rules: a count, then each rule's verdict (0
/// exclude, 1 include) and pattern.
fn filter_rules(r: &mut Reader<'_>) -> Result<Vec<FilterRule>, DecodeError> {
    let count = r.count16("filter rules", FILTER_RULES_MAX)?;
    let mut rules = Vec::with_capacity(count);
    for _ in 0..count {
        let include = match r.u8()? {
            v @ 0..=1 => v == 1,
            v => {
                return Err(DecodeError::Invalid {
                    what: "filter rule verdict",
                    value: u64::from(v),
                })
            }
        };
        let pattern = r.str16("filter pattern", FILTER_PATTERN_MAX)?.to_owned();
        rules.push(FilterRule { include, pattern });
    }
    Ok(rules)
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
    Ok(Some((decode_body(body)?, 4 + len)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::manifest::EntryKind;

    fn samples() -> Vec<Message> {
        vec![
            Message::Hello(Hello {
                version: 1,
                client_nonce: [1; 32],
            }),
            Message::Challenge(Challenge {
                server_nonce: [2; 32],
                server_proof: [3; 32],
            }),
            Message::Auth(Auth {
                client_proof: [4; 32],
            }),
            Message::Welcome(Welcome {
                session_id: [5; 16],
            }),
            Message::Request(SessionRequest {
                filter: vec![
                    FilterRule {
                        include: true,
                        pattern: "keep.tmp".into(),
                    },
                    FilterRule {
                        include: false,
                        pattern: "*.tmp".into(),
                    },
                ],
                owner: [3; 32],
                rate_limit: 0,
                direction: Direction::Push,
                streams: 4,
                block_size: 4 << 20,
                flags: REQ_RESUME | REQ_CHECKSUM,
                path: "ingest".into(),
            }),
            Message::Manifest(vec![Entry {
                path: "run42/a.dat".into(),
                kind: EntryKind::File,
                size: 123,
                data: 0,
                mode: 0o640,
                mtime_s: 1_700_000_000,
                mtime_ns: 5,
                link: None,
                ..Default::default()
            }]),
            Message::ManifestEnd,
            Message::Ready,
            Message::StreamHello {
                session_id: [6; 16],
                stream_index: 3,
                proof: [7; 32],
            },
            Message::FileAck {
                file_index: 9,
                digest: 0xdead_beef,
            },
            Message::PieceAck {
                file_index: 9,
                done: PieceDone {
                    digest: 7,
                    receipt: 5,
                    whole: Some((0, 3)),
                    untrusted: None,
                },
            },
            Message::PieceAck {
                file_index: 2,
                done: PieceDone {
                    digest: 7,
                    receipt: 1 << 63,
                    whole: None,
                    untrusted: None,
                },
            },
            Message::PieceAck {
                file_index: 4,
                done: PieceDone {
                    digest: 3,
                    receipt: 2,
                    whole: None,
                    untrusted: Some(u32::MAX),
                },
            },
            Message::Shard {
                index: 3,
                count: 4,
                split_over: 1 << 28,
            },
            Message::ShardManifest {
                files: 2001,
                bytes: 5 << 30,
                digest: [9; 32],
            },
            Message::Kept {
                files: 3,
                bytes: 7 << 20,
            },
            Message::Error {
                code: ErrorCode::PathRefused,
                message: "absolute path".into(),
            },
            Message::Summary {
                files: 3,
                bytes: 1 << 30,
                ok: true,
            },
            Message::Have(vec![
                HaveItem::Complete {
                    file_index: 1,
                    digest: 7,
                },
                HaveItem::Partial {
                    file_index: 2,
                    digest: 8,
                    ranges: vec![(0, 3), (9, 1)],
                },
                HaveItem::Unchanged {
                    file_index: 3,
                    digest: 9,
                },
            ]),
            Message::HaveEnd,
            Message::SourceDigests(vec![(1, 2), (3, 4)]),
            Message::FileEnd {
                file_index: 2,
                size: 5 << 30,
                mtime_s: 1_700_000_000,
                mtime_ns: 5,
            },
            Message::Added {
                first: 3,
                entries: vec![Entry {
                    path: "rec/scan2.vdif".into(),
                    growing: true,
                    ..Entry::default()
                }],
            },
            Message::Admitted { upto: 4 },
            Message::DirTimes(vec![(0, 1_700_000_000, 9)]),
            Message::AddedEnd,
            Message::UdpPlan {
                flows: 2,
                size: 1472,
                rate: 125_000_000,
                time_ms: 10_000,
                interval_ms: 1000,
                port: 7878,
            },
            Message::UdpReady { port: 7878 },
            Message::UdpCounts {
                done: true,
                foreign: 3,
                flows: vec![UdpCount {
                    sent: 9,
                    received: 8,
                    bytes: 8 * 1472,
                    expected: 9,
                    out_of_order: 1,
                    duplicates: 0,
                    jitter_ns: 4000,
                }],
            },
            Message::UdpEnd { sent: vec![9, 10] },
            Message::FileRejected {
                file_index: 4,
                digest: 5,
            },
            Message::Skipped {
                file_index: 6,
                path: String::new(),
                reason: "vanished since the scan".into(),
                rule: false,
            },
            Message::Skipped {
                file_index: UNLISTED,
                path: "run/dev".into(),
                reason: "a device node, not sent without -D".into(),
                rule: true,
            },
            Message::HeldWrong(vec![1, 7]),
            Message::HeldChecked,
            Message::LeftOut {
                excluded: 3,
                devices: 1,
            },
            Message::StreamsRefused { asked: 64, max: 16 },
            Message::Alive {
                streams: vec![(1, true), (2, false)],
            },
            Message::Placement {
                streams: vec![0, 1, 0, 1],
                entries: vec![(0, 1), (5, 0)],
            },
            Message::Placement {
                streams: vec![],
                entries: vec![],
            },
        ]
    }

    /// `samples()` as release 0.1.0 (protocol 12) encodes them, one hex
    /// line each, written by the encoder before the catalogue.
    const GOLDEN_V12: &str = include_str!("catalogue/golden/v12.hex");

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn golden_bytes_of_protocol_12_decode_to_the_samples_and_back() {
        let lines: Vec<&str> = GOLDEN_V12.lines().collect();
        assert_eq!(lines.len(), samples().len(), "one line per sample");
        for (line, m) in lines.into_iter().zip(samples()) {
            let bytes: Vec<u8> = (0..line.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&line[i..i + 2], 16).unwrap())
                .collect();
            assert_eq!(decode(&bytes), Ok(Some((m.clone(), bytes.len()))), "{line}");
            assert_eq!(hex(&encode(&m)), line, "{m:?}");
        }
    }

    #[test]
    fn every_message_round_trips_and_streams_split_anywhere() {
        let mut all = Vec::new();
        for m in samples() {
            let b = encode(&m);
            assert_eq!(decode(&b), Ok(Some((m.clone(), b.len()))));
            all.extend_from_slice(&b);
        }
        // A byte stream cut at any point decodes to "need more", never an error.
        for cut in 0..all.len() {
            let mut at = 0;
            while let Some((_, used)) = decode(&all[at..cut]).unwrap() {
                at += used;
            }
        }
    }

    #[test]
    fn a_placement_out_of_order_or_too_wide_is_refused() {
        let mut w = Writer::default();
        w.u8(kind::PLACEMENT).u16(1).u16(0).u32(2);
        w.u32(5).u16(0).u32(5).u16(1);
        assert!(matches!(
            decode_body(&w.buf),
            Err(DecodeError::Invalid { .. })
        ));
        let mut w = Writer::default();
        w.u8(kind::PLACEMENT).u16(STREAMS_MAX + 1);
        assert!(matches!(
            decode_body(&w.buf),
            Err(DecodeError::TooLarge { .. })
        ));
    }

    #[test]
    fn a_piece_acknowledgement_says_one_thing_of_its_file() {
        let ack = |state: u8, a: u64, b: u64| {
            let mut w = Writer::default();
            w.u8(kind::PIECE_ACK).u32(1).u64(2).u64(3);
            w.u8(state).u64(a).u64(b);
            decode_body(&w.buf)
        };
        let untrusted = |m: Message| match m {
            Message::PieceAck { done, .. } => (done.whole, done.untrusted),
            other => panic!("{other:?}"),
        };
        assert_eq!(untrusted(ack(0, 0, 0).unwrap()), (None, None));
        assert_eq!(untrusted(ack(1, 0, 0).unwrap()), (Some((0, 0)), None));
        assert_eq!(untrusted(ack(2, 7, 0).unwrap()), (None, Some(7)));
        // Left to the last with a digest, a piece past u32 or with a
        // receipts digest, a state past 2: refused.
        for (state, a, b) in [(0, 1, 0), (0, 0, 1), (2, 1 << 32, 0), (2, 1, 1), (3, 0, 0)] {
            assert!(
                matches!(ack(state, a, b), Err(DecodeError::Invalid { .. })),
                "{state} {a} {b}"
            );
        }
    }

    #[test]
    fn malformed_messages_are_refused() {
        // Oversized length: refused before any allocation.
        assert!(matches!(
            body_len((CONTROL_LEN_MAX + 1).to_le_bytes()),
            Err(DecodeError::TooLarge { .. })
        ));
        assert!(body_len(0u32.to_le_bytes()).is_err());
        // Unknown kind.
        assert!(matches!(
            decode_body(&[200]),
            Err(DecodeError::Invalid { .. })
        ));
        // A stranger's protocol: wrong magic.
        let mut b = encode(&samples()[0]);
        b[5] = b'X';
        assert!(decode(&b).is_err());
        // Trailing garbage inside a message.
        let mut b = encode(&Message::ManifestEnd);
        b.push(0);
        b[..4].copy_from_slice(&2u32.to_le_bytes());
        assert!(matches!(decode(&b), Err(DecodeError::Trailing { .. })));
        // Zero or too many streams, zero block size.
        for (streams, bs) in [(0u16, 1u32), (STREAMS_MAX + 1, 1), (1, 0)] {
            let b = encode(&Message::Request(SessionRequest {
                filter: Vec::new(),
                owner: [0; 32],
                rate_limit: 0,
                direction: Direction::Pull,
                streams,
                block_size: bs,
                flags: 0,
                path: "x".into(),
            }));
            assert!(decode(&b).is_err());
        }
        // A verdict that is neither, too many rules, too long a pattern.
        let Message::Request(good) = &samples()[4] else {
            panic!("sample 4 is the request")
        };
        let mut b = encode(&Message::Request(good.clone()));
        let verdict = b.len() - (1 + 2 + 5);
        assert_eq!(b[verdict], 0, "the second rule's verdict");
        b[verdict] = 2;
        assert!(
            matches!(decode(&b), Err(DecodeError::Invalid { .. })),
            "{:?}",
            decode(&b)
        );
        let mut many = good.clone();
        many.filter = vec![good.filter[0].clone(); FILTER_RULES_MAX];
        assert!(decode(&encode(&Message::Request(many.clone()))).is_ok());
        let mut b = encode(&Message::Request(many));
        let count = b.len() - FILTER_RULES_MAX * (1 + 2 + 8) - 2;
        b[count..count + 2].copy_from_slice(&(FILTER_RULES_MAX as u16 + 1).to_le_bytes());
        assert!(matches!(decode(&b), Err(DecodeError::TooLarge { .. })));
        let mut long = good.clone();
        long.filter[0].pattern = "x".repeat(FILTER_PATTERN_MAX + 1);
        assert!(decode(&encode(&Message::Request(long))).is_err());
        // Truncated bodies at every length.
        for m in samples() {
            let b = encode(&m);
            for cut in 1..b.len() - 4 {
                assert!(decode_body(&b[4..4 + cut]).is_err(), "{m:?} cut at {cut}");
            }
        }
    }
}
