//! The numbered values the messages and frames carry, each declared once
//! with the protocol it came with: request flags (`REQ_*`), frame flags
//! (`FLAG_*`, re-exported by `protocol::frame`), error codes and
//! directions.

use super::Bit;

wire_bits! { u32, REQUEST_FLAGS;
    /// Continue from what the receiver already holds.
    REQ_RESUME = 1, since 2;
    /// Compare finished files by content, not size and mtime.
    REQ_CHECKSUM = 2, since 2;
    /// Seal every data frame with AES-256-GCM.
    REQ_ENCRYPT = 4, since 2;
    /// A receiver running as root gives entries the sender's owner and
    /// group by number, not by name (`--numeric-ids`).
    REQ_NUMERIC_IDS = 8, since 6;
    /// After the transfer, remove what the receiver holds under the
    /// manifest's directories that the manifest does not list (`--delete`).
    REQ_DELETE = 16, since 6;
    /// A dry run (`--dry-run`; of a pull since protocol 12). A push's
    /// receiver says what it holds (`Have`), what it would refuse and,
    /// with `REQ_DELETE`, what it would remove, then its `Summary`; it
    /// writes nothing and no data comes.
    REQ_DRY_RUN = 32, since 6;
    /// A push that follows files still being written (`send --follow`).
    /// Its manifest may mark files growing: their size is where they
    /// stood, full blocks beyond it may come, and each ends with `FileEnd`
    /// (its final size and mtime) before its digest.
    REQ_FOLLOW = 64, since 7;
    /// With `REQ_FOLLOW`: a growing file's part is readable while it grows
    /// (its final mode), and its `user.urmove.live` attribute holds how
    /// many bytes from its start are written and checked.
    REQ_LIVE_PARTS = 128, since 7;
    /// The scanning side keeps hard links (`-H`). A push's manifest says
    /// it by itself; a pull asks the daemon's scan.
    REQ_HARD_LINKS = 256, since 9;
    /// The scanning side carries user.* extended attributes (`-X`).
    REQ_XATTRS = 512, since 9;
    /// The scanning side carries POSIX ACLs (`-A`).
    REQ_ACLS = 1024, since 9;
    /// The sending side leaves runs of zeros inside data out of its frames
    /// as it leaves holes (`--sparse`), so the receiver writes them as
    /// holes too.
    REQ_SPARSE = 2048, since 9;
    /// A pull of one shard (`pull --shard`): the client sends `Shard` after
    /// its request, the daemon answers with `ShardManifest` (the whole
    /// manifest's) and offers only the share.
    REQ_SHARD = 4096, since 10;
    /// Device nodes are carried (`-D`): a pull's daemon lists them, a
    /// receiver makes them where it may.
    REQ_DEVICES = 8192, since 12;
    /// A push of a directory's contents (a source given as `DIR/`, rsync's
    /// trailing slash): the destination stands for that directory, so with
    /// `REQ_DELETE` what it holds beyond the manifest goes too (never the
    /// receiver's root itself: refused there).
    REQ_CONTENTS = 16384, since 12;
    /// A push of one file (no directory) that may take the destination's
    /// name, as rsync and scp rename a single file: where the destination
    /// is no directory on the receiver, the file lands at the destination
    /// itself (`send obs.dat HOST:new.dat`).
    REQ_ONE_FILE = 32768, since 12;
    /// `bench --net --verify`: the data frames carry checksums the
    /// receiving side checks (protocol 12 said it in the request's path).
    REQ_VERIFY = 65536, since 13;
    /// A push whose manifest streams while the source's walk goes on: the
    /// manifest (`Manifest` parts, `ManifestEnd`) is the walk's first
    /// window, the rest comes as `Added` parts of any entry kind while the
    /// data flows (each prepared as the manifest's, what is held by its
    /// stamp named in `Have` items before that window's `Admitted`), and
    /// `AddedEnd` when the walk ended. A directory's entry always comes
    /// before anything beneath it.
    REQ_STREAM = 131072, since 14;
}

wire_bits! { u16, FRAME_FLAGS;
    /// The last frame this stream sends.
    FLAG_END = 1, since 1;
    /// A block that is a hole in the source (never written): no payload
    /// (`length` 0); the receiver writes nothing, so the hole stays a hole.
    FLAG_HOLE = 2, since 1;
    /// `bench --net` without `--verify`: the payload carries no checksum
    /// (measuring the network, as iperf3 does). Accepted only in bench
    /// sessions.
    FLAG_UNCHECKED = 4, since 1;
    /// The payload is sealed (AES-256-GCM, `protocol::seal`) and followed by
    /// its tag; the header, sent in clear, is authenticated with it and
    /// carries no checksum (the receiver computes it from the opened
    /// payload, so nothing about the plaintext shows on the wire).
    FLAG_SEALED = 8, since 2;
    /// A block of which only some 4 KiB pieces hold data: the payload is
    /// those pieces in order, then a map of which are present (one bit per
    /// piece of `span`, header bytes 12..16); the absent ones are zeros the
    /// receiver leaves unwritten. The checksum is the block's, as if every
    /// piece had come.
    FLAG_SPARSE = 16, since 9;
}

/// The bits of `table` that protocol `v` knows.
pub const fn known_at(table: &[Bit], v: u16) -> u64 {
    let mut known = 0;
    let mut i = 0;
    while i < table.len() {
        if table[i].since <= v {
            known |= table[i].value;
        }
        i += 1;
    }
    known
}

/// The request flags protocol `v` knows.
pub const fn request_flags_at(v: u16) -> u32 {
    known_at(REQUEST_FLAGS, v) as u32
}

/// The frame flags protocol `v` knows.
pub const fn frame_flags_at(v: u16) -> u16 {
    known_at(FRAME_FLAGS, v) as u16
}

wire_enum! {
    /// Error codes carried by `Message::Error`.
    pub enum ErrorCode: u16, ERROR_CODES {
        /// The handshake failed: a wrong key, or a peer of another version.
        AuthFailed = 1, "auth_failed", since 1;
        /// The request is not one the receiver takes.
        BadRequest = 2, "bad_request", since 1;
        /// A path the receiver refuses (outside its root, unsafe).
        PathRefused = 3, "path_refused", since 1;
        /// Above a limit of the receiver's.
        TooLarge = 4, "too_large", since 1;
        /// A read or write failed.
        Io = 5, "io_error", since 1;
        /// No room left on the receiver.
        NoSpace = 6, "no_space", since 1;
        /// A message or frame that breaks the protocol.
        Malformed = 7, "malformed", since 1;
        /// What the session needs is held by another.
        Busy = 8, "busy", since 1;
        /// A fault of the sender of the error.
        Internal = 9, "internal", since 1;
        /// The receiver was told to stop (SIGTERM) before the session ended.
        ShuttingDown = 10, "shutting_down", since 6;
        /// The client's user stopped it (Ctrl-C): a stop, not a fault.
        Interrupted = 11, "interrupted", since 12;
    }
}

wire_enum! {
    /// Push (send to the daemon), pull (fetch from it), or a network
    /// benchmark.
    pub enum Direction: u8, DIRECTIONS {
        /// The client sends files to the daemon.
        Push = 0, "push", since 1;
        /// The client fetches files from the daemon.
        Pull = 1, "pull", since 1;
        /// `bench --net`: memory to memory, nothing written.
        Bench = 2, "bench", since 1;
        /// `bench --net --reverse`: the daemon sends.
        BenchReverse = 3, "bench_reverse", since 1;
        /// `bench --net --udp`: datagrams to the daemon, which counts them;
        /// no data streams.
        Udp = 4, "udp", since 8;
        /// `bench --net --udp --reverse`: the daemon sends the datagrams.
        UdpReverse = 5, "udp_reverse", since 8;
        /// `urmove info`: the daemon answers `DaemonInfo` (its release, the
        /// protocols it speaks, its limits and what it holds now) and the
        /// session ends; nothing moves.
        Info = 6, "info", since 13;
    }
}

wire_enum! {
    /// A limit of the daemon's that a request went past (`LimitRefused`).
    pub enum Limit: u8, LIMITS {
        /// Data streams per session (`--max-streams`).
        Streams = 1, "streams", since 13;
        /// Sessions at once (`--max-sessions`).
        Sessions = 2, "sessions", since 13;
        /// Connections at once (`--max-connections`): what the session's
        /// streams would need beyond those open.
        Connections = 3, "connections", since 13;
        /// Frame buffer memory of all sessions, in bytes.
        BufferMemory = 4, "buffer_memory", since 13;
        /// Manifest memory of all sessions, in bytes.
        ManifestMemory = 5, "manifest_memory", since 13;
        /// Entries of one session's manifest (`--max-files`).
        Entries = 6, "entries", since 13;
        /// Free bytes on the filesystem that would hold the data.
        Space = 7, "space", since 13;
    }
}
