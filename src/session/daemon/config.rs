//! How a daemon runs: its configuration and limits (`urmove recv`'s
//! options and config file, resolved by `cli`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::datapath::DirectMode;
use crate::protocol::handshake::Key;

use crate::session::sink::rules::LinkPolicy;

/// How the daemon runs.
#[derive(Debug, Clone)]
pub struct RecvConfig {
    pub listen: SocketAddr,
    pub root: PathBuf,
    pub key: Key,
    pub direct: DirectMode,
    /// A client that says nothing for this long is dropped.
    pub handshake_timeout: Duration,
    /// How long a session waits for its data streams.
    pub stream_wait: Duration,
    /// Log an FDT-style `Net In` line per session this often (None: off).
    pub interval: Option<Duration>,
    /// A session whose peer sends nothing (or takes nothing) this long ends.
    pub timeout: Duration,
    pub limits: Limits,
    /// Refuse sessions that do not seal their frames.
    pub require_encryption: bool,
    /// Where the daemon keeps its secret (`STATE_DIR/secret`).
    pub state_dir: PathBuf,
    /// Keep setuid and setgid bits from the wire.
    pub keep_setid: bool,
    /// Make the device nodes a `send -D` brings (as root only).
    pub devices: bool,
    /// Symlinks whose target leaves the root: keep, skip or refuse.
    pub unsafe_links: LinkPolicy,
    /// Serve pulls only (the root may then be read-only).
    pub pull_only: bool,
    /// Take UDP tests (`bench --net --udp`) on the listen port's number.
    pub udp: bool,
    /// The longest UDP test taken (`udp_time_max`).
    pub udp_time_max: Duration,
    /// Congestion control of the data streams (it governs those it sends on).
    pub congestion: crate::datapath::tcp::Congestion,
    /// Remove parts and journals untouched this long (None or 0: keep them).
    pub part_max_age: Option<Duration>,
    /// Threads of each session's data path (`--lanes`), each with its ring.
    pub lanes: crate::session::link::lanes::Lanes,
    /// Serving one ssh user (`urmove serve --stdio`, started through ssh):
    /// the root is `/` and the user's own rights bound it, the state
    /// directory may lie beneath it, and a tight locked-memory limit is
    /// fitted to rather than refused.
    pub over_ssh: bool,
    /// Take connections only from there (None: from anyone).
    pub only_from: Option<OnlyFrom>,
    /// Keep each received file's storage checksums with it (see
    /// `sink::kept`): the private receiver of an HTTP third-party copy.
    pub keep_sums: bool,
}

/// Where a daemon that serves one client takes connections from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnlyFrom {
    /// This address: the ssh client's (`$SSH_CONNECTION`).
    Address(std::net::IpAddr),
    /// This process's own loopback connections (its `--through-ssh`
    /// relay), no other local user's.
    ThisProcess,
}

impl OnlyFrom {
    /// Whether the connection from `peer` accepted on `local` may be let in.
    pub fn admits(self, peer: SocketAddr, local: SocketAddr) -> bool {
        match self {
            OnlyFrom::Address(a) => peer.ip() == a,
            OnlyFrom::ThisProcess => crate::datapath::sys::connected_from_this_process(peer, local),
        }
    }
}

impl RecvConfig {
    /// A daemon of one program's own (`urmove demo`, `serve --stdio`) on
    /// `listen` over `root` with `key`, its secret in `state_dir`, and the
    /// safe defaults: O_DIRECT where it works, no UDP, no setid bits or
    /// devices, no sweep of old parts, the default limits.
    pub fn private(listen: SocketAddr, root: PathBuf, key: Key, state_dir: PathBuf) -> Self {
        RecvConfig {
            listen,
            root,
            key,
            direct: DirectMode::Auto,
            handshake_timeout: Duration::from_secs(10),
            stream_wait: Duration::from_secs(30),
            interval: None,
            timeout: Duration::from_secs(60),
            limits: Limits::default(),
            require_encryption: false,
            state_dir,
            keep_setid: false,
            devices: false,
            unsafe_links: Default::default(),
            pull_only: false,
            udp: false,
            udp_time_max: Duration::from_secs(600),
            congestion: Default::default(),
            lanes: Default::default(),
            part_max_age: None,
            over_ssh: false,
            only_from: None,
            keep_sums: false,
        }
    }
}

/// What the daemon takes on at most; past each, it refuses with a reason.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Sessions at once.
    pub sessions: usize,
    /// Connections at once (sessions, their streams, handshakes).
    pub connections: usize,
    /// Connections not yet authenticated from one address (IPv4) or /64
    /// (IPv6) at once.
    pub unauthenticated_per_address: usize,
    /// Data streams per session.
    pub streams: u16,
    /// Entries per manifest.
    pub files: u32,
    /// Registered buffer memory of all sessions together.
    pub buffer_bytes: u64,
    /// Memory the manifests of all sessions together may take.
    pub manifest_bytes: u64,
    /// A sender below this many bytes per second (over `--timeout`, while
    /// the daemon waits for it) ends its session.
    pub min_rate_bytes_per_s: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            sessions: 64,
            connections: 1024,
            unauthenticated_per_address: 2 * 64 + 16,
            streams: 64,
            files: crate::protocol::manifest::ENTRIES_MAX,
            buffer_bytes: 4 << 30,
            manifest_bytes: 2 << 30,
            min_rate_bytes_per_s: crate::session::MIN_RATE_BYTES_PER_S,
        }
    }
}
