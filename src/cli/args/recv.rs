//! `urmove recv`: the receiver daemon, its options each also a key of its
//! `--config` file.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::DirectArg;
use crate::cli::parse;

#[derive(Debug, Args)]
#[command(
    after_help = "Every option may also be set in the --config file, under the option's name \
with underscores (listen, root, key_file, direct, interval, handshake_timeout, timeout, \
max_sessions, max_connections, max_unauthenticated_per_address, max_streams, max_files, \
max_buffer_memory, require_encryption, metrics, log_format, state_dir, unsafe_links, keep_setid, \
devices, pull_only, udp, udp_time_max, cc, lanes, max_manifest_memory, min_rate, part_max_age, http, http_cert, http_key, http_ca, token_issuers); options on the command line win, and both are held to \
the same ranges."
)]
pub struct RecvArgs {
    /// Read settings from this TOML file (see below); options given on the
    /// command line override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Address to listen on: ADDR or ADDR:PORT [default: 0.0.0.0:7878].
    #[arg(long, value_name = "ADDR[:PORT]")]
    pub listen: Option<String>,

    /// Directory every received path is confined to (required here or in
    /// the config file).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// Pre-shared key (written by `urmove keygen FILE`, mode 0600; required
    /// here or in the config file).
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,

    /// O_DIRECT for received files: auto (files of 256 KiB or less through
    /// the page cache, then synced; larger ones O_DIRECT where the
    /// filesystem allows), required (every file O_DIRECT), or off
    /// [default: auto].
    #[arg(long, value_enum, value_name = "WHEN")]
    pub direct: Option<DirectArg>,

    /// Log a `Net In` line per session every DURATION (0 turns them off)
    /// [default: 5s].
    #[arg(long, value_name = "DURATION", value_parser = parse::duration)]
    pub interval: Option<Duration>,

    /// Drop a client that completes no handshake and request within this
    /// long; the unauthenticated part (to its proof of the key) gets at
    /// most 5 s of it. More than 0, at most 24h [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = parse::duration)]
    pub handshake_timeout: Option<Duration>,

    /// End a session whose peer sends (or takes) nothing for this long.
    /// More than 0, at most 24h [default: 60s].
    #[arg(long, value_name = "DURATION", value_parser = parse::duration)]
    pub timeout: Option<Duration>,

    /// Sessions served at once, 1 to 1048576; more are refused as busy
    /// [default: 64].
    #[arg(long, value_name = "N")]
    pub max_sessions: Option<u64>,

    /// Connections open at once (sessions, their data streams, handshakes),
    /// 1 to 1048576 [default: 1024].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<u64>,

    /// Connections one address (an IPv6 /64) may hold open before they
    /// authenticate, 1 to 1048576; more are refused at once. A host that
    /// starts dozens of sessions at the same instant may need more
    /// [default: twice --max-streams plus 16, so a client opening all its
    /// streams at once is never refused].
    #[arg(long, value_name = "N")]
    pub max_unauthenticated_per_address: Option<u64>,

    /// Data streams one session may open, 1 to 256 [default: 64].
    #[arg(long, value_name = "N")]
    pub max_streams: Option<u64>,

    /// Entries (files, directories, links) one session may send, 1 to
    /// 4294967295 [default: 10000000].
    #[arg(long, value_name = "N")]
    pub max_files: Option<u64>,

    /// Registered buffer memory of all sessions together [default: 4G].
    #[arg(long, value_name = "SIZE", value_parser = parse::size)]
    pub max_buffer_memory: Option<u64>,

    /// Refuse sessions whose frames are not sealed (clients must --encrypt).
    #[arg(long)]
    pub require_encryption: bool,

    /// Serve Prometheus metrics at http://ADDR:PORT/metrics.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<String>,

    /// Log lines on stderr as text (journald-friendly) or json
    /// [default: text].
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormatArg>,

    /// Keep the daemon's own state here: the secret that authenticates its
    /// resume journals and stamps (never beneath the root) [default:
    /// $STATE_DIRECTORY, /var/lib/urmove as root, else
    /// ~/.local/state/urmove].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Symlinks whose target is absolute or leaves the root: keep them as
    /// they are (the daemon never follows links when writing), skip them,
    /// or refuse the session [default: keep].
    #[arg(long, value_enum, value_name = "WHAT")]
    pub unsafe_links: Option<LinksArg>,

    /// Keep setuid and setgid bits from the wire (dropped otherwise).
    #[arg(long)]
    pub keep_setid: bool,

    /// Make the device nodes a `send -D` brings (only when the daemon runs
    /// as root; off, each is refused as one skipped entry). FIFOs and
    /// sockets are always made.
    #[arg(long)]
    pub devices: bool,

    /// Serve pulls only and refuse pushes (the root may be read-only).
    #[arg(long)]
    pub pull_only: bool,

    /// Take `bench --net --udp` tests: datagrams on the listen port's
    /// number in UDP, one test at a time (off: such tests are refused).
    #[arg(long)]
    pub udp: bool,

    /// The longest UDP test the daemon runs (a longer one is refused);
    /// at most 24h [default: 10m].
    #[arg(long, value_name = "DURATION", value_parser = parse::duration)]
    pub udp_time_max: Option<Duration>,

    /// Congestion control of the streams the daemon sends on (pulls,
    /// bench --net --reverse): auto (BBR where the kernel has it) or a
    /// name from net.ipv4.tcp_available_congestion_control [default: auto].
    #[arg(long, value_name = "NAME", value_parser = parse::congestion)]
    pub cc: Option<crate::datapath::tcp::Congestion>,

    /// Threads of a session's data path (receiving a push, sending a pull,
    /// bench sessions), each pinned to a core with its own ring, buffers
    /// and share of the streams; auto: the cores this process may run on,
    /// at most one per stream [default: auto].
    #[arg(long, value_name = "N|auto", value_parser = parse::lanes)]
    pub lanes: Option<crate::session::link::lanes::Lanes>,

    /// Memory the manifests of all sessions may take together (about 1 KiB
    /// an entry and three times its name) [default: 2G].
    #[arg(long, value_name = "SIZE", value_parser = parse::size)]
    pub max_manifest_memory: Option<u64>,

    /// A sender slower than this over a whole --timeout (while the daemon
    /// waits for its data) ends its session [default: 8kbit]. RATE is in bits per second unless a B says bytes
    /// (4G, 4Gbit, 4Gbps, 1gbit: bits; 500MB, 450MiB: bytes; k M G T are
    /// powers of 1000); echoed in the unit given.
    #[arg(long, value_name = "RATE", value_parser = parse::rate)]
    pub min_rate: Option<parse::Rate>,

    /// Remove part files and journals (what an interrupted session left for
    /// --resume) untouched for this long; 0 keeps them [default: 7d].
    #[arg(long, value_name = "DURATION", value_parser = parse::duration)]
    pub part_max_age: Option<Duration>,

    /// Also serve HTTPS WebDAV with third-party copy (what FTS3 and gfal2
    /// drive) on ADDR:PORT, over the same root; needs --http-cert,
    /// --http-key and --token-issuers (every request carries a WLCG token).
    #[arg(long, value_name = "ADDR:PORT")]
    pub http: Option<String>,

    /// The HTTPS front's certificate chain (PEM, leaf first).
    #[arg(long, value_name = "FILE")]
    pub http_cert: Option<PathBuf>,

    /// The private key of --http-cert (PEM).
    #[arg(long, value_name = "FILE")]
    pub http_key: Option<PathBuf>,

    /// CAs a third-party copy trusts in the other endpoint: a PEM file or a
    /// directory of them [default: the system's bundle and
    /// /etc/grid-security/certificates].
    #[arg(long, value_name = "PATH")]
    pub http_ca: Option<PathBuf>,

    /// The WLCG token issuers the HTTPS front trusts, their keys and the
    /// audiences it answers to (a TOML file: see docs/http.md).
    #[arg(long, value_name = "FILE")]
    pub token_issuers: Option<PathBuf>,
}

/// `--unsafe-links`: what the daemon does with symlinks leaving its root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinksArg {
    Keep,
    Skip,
    Refuse,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormatArg {
    Text,
    Json,
}
