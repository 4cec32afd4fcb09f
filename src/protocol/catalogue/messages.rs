//! Every control message, declared once: its kind byte, name, doc text,
//! the protocol it came with, who sends it, and its fields in wire order
//! with their types (`fields.rs`, `checked.rs`), which encode, decode and
//! check them. Fields added after the message carry
//! `#[since(V, default)]`.

use super::checked::{
    shard_in_range, AscendingRuns, BlockSize, DirectionWire, ErrorCodeWire, FilterRuleWire,
    HaveList, LimitWire, PieceDoneWire, ReqFlags, Streams, UdpCountWire,
};
use super::fields::{
    AfterMagic, Bool01, BoolAny, Bytes, DeletedPaths, Digests, DirTimesItems, EncryptionRequired,
    ErrorText, FilterRules, HeldEntries, List16, List32, ManifestPart, Name16, Nanos, Path,
    PullOnly, ReleaseText, SkipReason, SkipRule, StreamCount, Text16, UdpFlows, I64, U16, U32, U64,
};
use super::{def_of, EncodeError, Field, FieldDef, MessageDef, Side};
use crate::protocol::control::{DaemonInfo, SessionRequest};
use crate::protocol::handshake::{
    Auth, Challenge, Hello, Welcome, NONCE_LEN, PROOF_LEN, SESSION_ID_LEN,
};
use crate::protocol::wire::{DecodeError, Reader, Writer};

messages! {
    /// The client's first message: the magic, its protocol version and its
    /// nonce.
    1 Hello(Hello) { since 1, from Client } {
        version: AfterMagic<U16>,
        client_nonce: Bytes<NONCE_LEN>,
    }
    /// The daemon's nonce and its proof of the key over both nonces.
    2 Challenge(Challenge) { since 1, from Daemon } {
        server_nonce: Bytes<NONCE_LEN>,
        server_proof: Bytes<PROOF_LEN>,
    }
    /// The client's proof of the key.
    3 Auth(Auth) { since 1, from Client } {
        client_proof: Bytes<PROOF_LEN>,
    }
    /// The daemon took the proof: the session's id, which data streams
    /// name.
    4 Welcome(Welcome) { since 1, from Daemon } {
        session_id: Bytes<SESSION_ID_LEN>,
    }
    /// What the client asks for once authenticated.
    5 Request(SessionRequest) { since 1, from Client } {
        direction: DirectionWire,
        streams: Streams,
        block_size: BlockSize,
        flags: ReqFlags,
        path: Name16<Path>,
        #[since(5, [0; 32])]
        owner: Bytes<32>,
        #[since(6, 0)]
        rate_limit: U64,
        #[since(12, Vec::new())]
        filter: List16<FilterRuleWire, FilterRules>,
        #[since(13, 0)]
        time_ms: U64,
    }
    /// Part of the manifest; the receiver numbers entries in arrival order.
    6 Manifest(entries: ManifestPart) { since 1, from Source }
    /// The manifest is complete.
    7 ManifestEnd { since 1, from Source }
    /// The first message of a data stream.
    8 StreamHello { since 1, from Client } {
        session_id: AfterMagic<Bytes<SESSION_ID_LEN>>,
        stream_index: U16,
        proof: Bytes<PROOF_LEN>,
    }
    /// A file arrived, verified (digest over its blocks) and was renamed.
    9 FileAck { since 1, from Sink } {
        file_index: U32,
        digest: U64,
    }
    /// A refusal or a failure, which ends the session.
    10 Error { since 1, from Either } {
        code: ErrorCodeWire,
        message: Text16<ErrorText>,
    }
    /// The session's end: files and bytes moved, and whether all went well.
    11 Summary { since 1, from Daemon } {
        files: U64,
        bytes: U64,
        ok: BoolAny,
    }
    /// The receiver has prepared every file and waits for the data streams.
    12 Ready { since 1, from Daemon }
    /// Part of what the receiver holds already (resume), then `HaveEnd`.
    13 Have(items: HaveList) { since 2, from Sink }
    /// The receiver named all it holds.
    14 HaveEnd { since 2, from Sink }
    /// From the sending side while the data flows: the digest of each file
    /// it has read through, (entry, digest). The receiver commits a file
    /// (stamp, rename) only when its own digest of what it wrote is equal.
    15 SourceDigests(items: List32<(U32, U64), Digests>) { since 3, from Source }
    /// What arrived of a file differs from the sender's digest: it was not
    /// committed (its part is gone, its final name untouched).
    16 FileRejected { since 3, from Sink } {
        file_index: U32,
        digest: U64,
    }
    /// A heartbeat from the receiver: alive, and per data stream the bytes
    /// it delivered so far and whether a receive waits on it (so the sender
    /// can tell a stream whose bytes left its socket but never arrived from
    /// a receiver that is busy writing).
    17 Alive { since 2, from Sink } {
        streams: List16<(U64, BoolAny), StreamCount>,
    }
    /// An entry that is not moved, and why. From the sending side: it
    /// could not be read (vanished, unreadable, replaced, changed while
    /// sent) and the receiver does not wait for it; `file_index` is
    /// `UNLISTED` for one the scan left out of the manifest (a FIFO, a
    /// socket, a device), named by `path`. From the receiver: an entry its
    /// policy will not create (an unsafe symlink). `rule` (protocol 12):
    /// left out by a rule (a policy, an option, a name the filesystem
    /// cannot hold), which running again cannot mend; otherwise a fault
    /// (vanished, unreadable, changed while sent).
    18 Skipped { since 3, from Either } {
        file_index: U32,
        path: Name16<Path>,
        reason: Text16<SkipReason>,
        #[since(12, false)]
        rule: Bool01<SkipRule>,
    }
    /// Part of the held files and blocks (from `Have`) whose content the
    /// sender found different from its sources: the receiver forgets them.
    19 HeldWrong(items: List32<U32, HeldEntries>) { since 3, from Source }
    /// The sender checked everything `Have` named against its sources.
    20 HeldChecked { since 3, from Source }
    /// From the receiver, once, before the data (protocol 4): where it
    /// writes each file, so the sender puts a file's frames on the streams
    /// of the receiving lane whose ring drives that file's device. Each
    /// stream's class (`streams`, by session number) and each entry's:
    /// `entries` are runs (first entry, class) in ascending order, an
    /// entry in the run that starts at or before it. Empty: no routing.
    /// A hint, never a rule: a frame on any stream is received.
    21 Placement { since 4, from Sink } {
        streams: List16<U16, StreamCount>,
        entries: AscendingRuns,
    }
    /// From the receiver of a `--delete` push, before its summary: part of
    /// what it removed (paths under the destination), as rsync's
    /// "deleting" lines.
    22 Deleted(paths: List32<Name16<Path>, DeletedPaths>) { since 6, from Sink }
    /// From the sending side of a `REQ_FOLLOW` push: growing file
    /// `file_index` stopped growing (its writer closed it and it stayed
    /// idle) at `size` bytes, modified at `mtime`. Its digest follows.
    23 FileEnd { since 7, from Source } {
        file_index: U32,
        size: U64,
        mtime_s: I64,
        mtime_ns: Nanos,
    }
    /// From the sending side of a `REQ_FOLLOW` push: entries that appeared
    /// in a followed directory (growing files, directories), numbered on
    /// from `first` (the count so far). Their data waits for `Admitted`.
    24 Added { since 7, from Source } {
        first: U32,
        entries: ManifestPart,
    }
    /// From the receiver: every entry below `upto` is prepared (`Added`
    /// entries claimed and made ready); frames for them may come.
    25 Admitted { since 7, from Sink } {
        upto: U32,
    }
    /// From the sending side of a `REQ_FOLLOW` push: nothing more is
    /// added (`--follow-until` passed, or every file followed ended).
    26 AddedEnd { since 7, from Source }
    /// From the sending side of a `REQ_FOLLOW` push, before `AddedEnd`:
    /// directories whose mtime moved while they were followed (entry,
    /// mtime seconds, nanoseconds), as they are set at the end.
    27 DirTimes(items: List32<(U32, I64, Nanos), DirTimesItems>) { since 7, from Source }
    /// From the client of a UDP test, once admitted: `flows` flows of
    /// `size`-byte datagrams at `rate` bytes a second in all (0: as fast as
    /// the sender can) for `time_ms`, counts every `interval_ms`; reversed,
    /// the client's counting `port` (the daemon sends only once a tagged
    /// datagram from there reached it: see `UdpReady`).
    28 UdpPlan { since 8, from Client } {
        flows: U16,
        size: U32,
        rate: U64,
        time_ms: U64,
        interval_ms: U32,
        port: U16,
    }
    /// From the daemon of a UDP test: ready, receiving on `port`; reversed,
    /// `port` is where it waits for the client's hello (a datagram of flow
    /// `u32::MAX` tagged under the session's key, from the client's
    /// counting port at the control connection's address) before it sends
    /// to where that came from.
    29 UdpReady { since 8, from Daemon } {
        port: U16,
    }
    /// The counts of a UDP test so far, each flow's, from the side that
    /// counts them (and reversed, the sender's `sent` from the daemon), and
    /// the datagrams nobody's tag checked; `done` the last.
    30 UdpCounts { since 8, from Either } {
        done: BoolAny,
        foreign: U64,
        flows: List16<UdpCountWire, UdpFlows>,
    }
    /// From the sending side of a UDP test: it sent all it will, each
    /// flow's datagrams.
    31 UdpEnd { since 8, from Either } {
        sent: List16<U64, UdpFlows>,
    }
    /// A piece of a split file arrived, verified and journaled complete
    /// (see `PieceDone`; its state since protocol 11).
    32 PieceAck { since 10, from Sink } {
        file_index: U32,
        done: PieceDoneWire,
    }
    /// After a `REQ_SHARD` pull's request: which shard of how many, and
    /// the bytes above which a file is split.
    33 Shard { since 10, from Client, check shard_in_range } {
        index: U32,
        count: U32,
        split_over: U64,
    }
    /// The daemon's answer to `Shard`: the whole manifest's files, bytes
    /// and digest, before the share's manifest.
    34 ShardManifest { since 10, from Daemon } {
        files: U64,
        bytes: U64,
        digest: Bytes<32>,
    }
    /// From the receiver once the sender stopped (an `Error` of code
    /// `Interrupted`): the files whose verified blocks it journaled, and
    /// those blocks' bytes, which the next run continues.
    35 Kept { since 12, from Sink } {
        files: U64,
        bytes: U64,
    }
    /// From the daemon of a pull, with what its scan left out, when it left
    /// out anything unnamed: entries the request's filter excluded (a
    /// directory counts once, nothing beneath it looked at) and device
    /// nodes left out without `REQ_DEVICES`.
    36 LeftOut { since 12, from Daemon } {
        excluded: U64,
        devices: U64,
    }
    /// From the daemon, instead of `Error`, refusing a session that asked
    /// for more data streams than it takes: the count asked and the most it
    /// takes, as fields, so a client can ask again for what it takes (`-P
    /// auto`) without reading a sentence.
    37 StreamsRefused { since 12, from Daemon } {
        asked: U16,
        max: U16,
    }
    /// From the daemon, instead of `Error`, refusing a request past one of
    /// its limits: which, what the request needed, the most the daemon
    /// takes and what others hold of it now. Both sides say it from these
    /// numbers; nobody reads a sentence.
    38 LimitRefused { since 13, from Daemon } {
        limit: LimitWire,
        asked: U64,
        max: U64,
        in_use: U64,
    }
    /// The daemon's answer to an `Info` request: its release, the
    /// protocols it speaks, its limits, its sessions now and the free
    /// bytes under its root.
    39 DaemonInfo(DaemonInfo) { since 13, from Daemon } {
        release: Text16<ReleaseText>,
        protocol_oldest: U16,
        protocol_newest: U16,
        streams_max: U16,
        sessions_max: U32,
        sessions_running: U32,
        files_max: U32,
        block_max: U32,
        pull_only: Bool01<PullOnly>,
        encryption_required: Bool01<EncryptionRequired>,
        root_free_bytes: U64,
    }
    /// The daemon's answer to a Hello whose offer (in its nonce) shares no
    /// version with it: the versions it speaks. Only a client of protocol
    /// 13 or later offers, so only such a client gets it.
    40 VersionRefused { since 13, from Daemon } {
        oldest: U16,
        newest: U16,
    }
}
