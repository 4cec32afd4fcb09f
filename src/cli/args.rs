//! The command line, parsed and nothing more (clap derive). Resolving it
//! against the host happens in `cli::bench`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use super::parse;

#[derive(Debug, Parser)]
#[command(
    name = "urmove",
    version,
    about = "io_uring data mover for storage servers: parallel-stream transfers, network and disk benchmarks",
    long_about = "urmove moves data disk-to-disk with io_uring, O_DIRECT and registered buffers.\n\n\
                  `urmove recv` is the receiver daemon; `urmove send` pushes files and trees to it \
                  over parallel TCP streams and `urmove pull` fetches them, every block checksummed \
                  and every file acknowledged with a digest. `urmove bench --net HOST` measures the \
                  network memory to memory against a daemon (iperf3's role); `urmove bench --disk \
                  [TARGET...]` measures sustained disk throughput, IOPS and latency with \
                  per-interval rates, a sustained-rate gate and an iozone-style sweep.\n\n\
                  While they run, send, pull and bench show a progress bar on a terminal and \
                  interval lines otherwise (--progress, --quiet), then a summary; --json prints \
                  one document instead.\n\n\
                  Exit codes: 0 success (every file verified); 23 verified but for skipped \
                  entries, each named with why; 1 the run failed (I/O error, files that arrived \
                  different, rate gate not met, interrupted; what was verified is kept); 2 usage \
                  or configuration error; any other: killed by a signal (128+N) or a bug (101). \
                  The man pages' EXIT STATUS says more."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Benchmark disks (--disk: sustained, honest throughput, IOPS and
    /// latency) or the network (--net HOST: memory to memory, against recv)
    Bench(BenchArgs),
    /// Run the receiver daemon: files pushed by `urmove send` land under --root
    Recv(RecvArgs),
    /// Push files and directory trees to a `urmove recv` daemon: SOURCE... HOST:DEST
    Send(SendArgs),
    /// Fetch files and trees from a `urmove recv` daemon: HOST:PATH... LOCAL_DIR
    Pull(PullArgs),
    /// Merge the --json reports of a sharded send (send --shard) into one:
    /// bytes, files, the rate over the shards' time, the slowest, what is
    /// missing; exits 0 only when every file of the manifest is committed
    Report(ReportArgs),
    /// The main job on built-in defaults: a real loopback transfer of generated
    /// files with live progress, checked and cleaned up
    Demo(DemoArgs),
    /// Check the host's network, CPU and disk settings for a 10-100G link,
    /// say why and where each rule comes from, and --apply them (root)
    Tune(TuneArgs),
    /// Write a new pre-shared key to FILE (mode 0600; never overwrites)
    Keygen {
        /// Where to write the key.
        file: PathBuf,
    },
    /// Print a shell completion script (as `urmove completions bash >
    /// /etc/bash_completion.d/urmove`)
    Completions {
        /// The shell to complete in.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page urmove.1, or with --dir write it and one page per
    /// subcommand (urmove-send.1, ...)
    Man {
        /// Write urmove.1 and urmove-SUBCOMMAND.1 pages into DIR (created
        /// when missing) and print their paths.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// How progress shows while a run goes (`--progress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProgressArg {
    /// A bar when stdout and stderr are terminals, interval lines otherwise.
    Auto,
    /// A live bar on stderr, even when it is not a terminal.
    Bar,
    /// One line per interval on stdout.
    Lines,
    /// Nothing until the summary.
    #[value(name = "none")]
    Off,
}

/// Progress and chattiness of human output.
#[derive(Debug, Clone, Copy, Args)]
pub struct ProgressArgs {
    /// Live progress in human output: a bar (drawn on stderr), interval
    /// lines (on stdout) or none; auto draws a bar when stdout and stderr are
    /// terminals and prints lines otherwise. --json and --json-stream ignore
    /// it.
    #[arg(long, value_enum, value_name = "HOW", default_value_t = ProgressArg::Auto)]
    pub progress: ProgressArg,

    /// Print only the final summary: no progress (whatever --progress says)
    /// and no notes; warnings and errors still go to stderr. No effect with
    /// --json or --json-stream.
    #[arg(short = 'q', long)]
    pub quiet: bool,

    /// Also print details worth knowing only when looking closer, on
    /// stderr, each once: why zero-copy sends were not tried, or that they
    /// fell back to plain sends because the kernel copied them.
    #[arg(short = 'v', long, conflicts_with = "quiet")]
    pub verbose: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    Write,
    Read,
    Randread,
    Randwrite,
    Rw,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UnitsArg {
    #[value(name = "MB")]
    Mb,
    #[value(name = "MiB")]
    Mib,
    #[value(name = "Gbit")]
    Gbit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DirectArg {
    Auto,
    Required,
    Off,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
      urmove bench --disk /raid/dir                      write then read a test file (O_DIRECT, 1 MiB, QD 32)\n  \
      urmove bench --disk /mnt/d1 /mnt/d2 --time 30s     two disks in parallel, per target and aggregate\n  \
      urmove bench --disk /raid --mode randread --bs 4k  4k random read IOPS at QD 32\n  \
      urmove bench --disk /raid --mode write --time 60s --min-rate 4Gbit --window 2s\n  \
      urmove bench --disk /raid --sweep --csv sweep.csv  iozone -a style matrix\n  \
      urmove bench --disk /raid --time 60s --plot raid.svg   the rates over time, as a picture\n  \
      urmove bench --net dtn2 --key-file k --udp --rate 1Gbit --size 1460 --time 5s   UDP loss and jitter at 1 Gbit/s")]
pub struct BenchArgs {
    /// Benchmark disks. Each TARGET is a file, a directory (a test file is
    /// created in it and removed after) or a block device. Without TARGET, a
    /// test file in $TMPDIR (or /var/tmp).
    #[arg(long, required_unless_present = "net", conflicts_with = "net")]
    pub disk: bool,

    /// Benchmark the network, memory to memory, against `urmove recv` on
    /// HOST (iperf3's role; needs --key-file). No disk is touched.
    #[arg(long, value_name = "HOST")]
    pub net: Option<String>,

    /// bench --net: the receiver's port.
    #[arg(short = 'p', long, default_value_t = 7878, requires = "net")]
    pub port: u16,

    /// bench --net: parallel TCP streams, or auto: start with 8, and 16
    /// if the aggregate grows by a tenth with them (the choice is in the
    /// summary; with --reverse or --rate-limit, 8). With --udp: flows,
    /// auto meaning 1.
    #[arg(short = 'P', long, default_value = "auto", requires = "net",
          value_parser = parse::streams, value_name = "N|auto")]
    pub streams: parse::Streams,

    /// bench --net: threads of this side's data path, each pinned to a
    /// core with its own ring, buffers and share of the streams; auto: the
    /// cores this process may run on, at most one per stream.
    #[arg(long, default_value = "auto", requires = "net", value_parser = parse::lanes, value_name = "N|auto")]
    pub lanes: crate::session::link::lanes::Lanes,

    /// bench --net: the pre-shared key (the receiver's).
    #[arg(long, value_name = "FILE", requires = "net")]
    pub key_file: Option<PathBuf>,

    /// bench --net: the daemon sends and this side receives.
    #[arg(long, requires = "net")]
    pub reverse: bool,

    /// bench --net: UDP datagrams instead of TCP streams, as iperf3 -u:
    /// -P flows (default 1) of --size bytes (default: what the path
    /// carries in one datagram) paced to --rate; per interval and in all,
    /// the offered and received rates, datagrams sent, lost, out of order
    /// and the jitter. The daemon takes them with --udp.
    #[arg(long, requires = "net")]
    pub udp: bool,

    /// bench --net: seal every frame with AES-256-GCM (to measure its cost).
    #[arg(long, requires = "net")]
    pub encrypt: bool,

    /// Congestion control of the data streams (TCP_CONGESTION): auto (BBR
    /// where the kernel has it and allows it, else the kernel's default) or
    /// a name from net.ipv4.tcp_available_congestion_control.
    #[arg(long, requires = "net", value_name = "NAME", value_parser = parse::congestion, default_value = "auto")]
    pub cc: crate::datapath::tcp::Congestion,

    /// bench --net: send no faster than RATE in total, each stream paced to
    /// its share (SO_MAX_PACING_RATE); with --reverse the daemon, which
    /// sends, paces its streams so. RATE is in bits per second unless a B says bytes
    /// (4G, 4Gbit, 4Gbps, 1gbit: bits; 500MB, 450MiB: bytes; k M G T are
    /// powers of 1000); echoed in the unit given.
    #[arg(long, value_name = "RATE", value_parser = parse::rate, requires = "net")]
    pub rate_limit: Option<parse::Rate>,

    /// bench --net: zero-copy sends (auto: not over virtual devices or a
    /// round trip above 1 ms, and dropped where the kernel copies).
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ZeroCopyArg::Auto, requires = "net")]
    pub zerocopy: ZeroCopyArg,

    /// Files, directories or block devices; one worker and ring each.
    #[arg(value_name = "TARGET")]
    pub targets: Vec<PathBuf>,

    /// What to run, in order (repeatable or a comma list).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [ModeArg::Write, ModeArg::Read])]
    pub mode: Vec<ModeArg>,

    /// Read share of `--mode rw`, in percent.
    #[arg(long, value_name = "PCT", default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub mix: u8,

    /// Block size per I/O (K, M = powers of 1024; kB, MB = powers of 1000).
    /// With --sweep: the largest record size. With --net: bytes per frame
    /// [default: --disk 1M (4K when every --mode is random), --sweep 16M,
    /// --net 256K].
    #[arg(long, value_name = "SIZE", value_parser = parse::size)]
    pub bs: Option<u64>,

    /// Bytes per target and mode. Default: 2 GiB with O_DIRECT, at least the
    /// RAM size with buffered I/O, the file's size when only reading an
    /// existing file; clamped to the free space. With --sweep: the largest
    /// file size. With --net --udp: each datagram's payload bytes.
    #[arg(long, value_name = "SIZE", value_parser = parse::size)]
    pub size: Option<u64>,

    /// I/Os in flight per target [default: 32, or 1 with --sweep as iozone].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub qd: Option<u32>,

    /// Run each mode for this long instead of for --size bytes (--net: the
    /// test length, default 10s).
    #[arg(long, value_name = "DURATION", value_parser = parse::duration)]
    pub time: Option<Duration>,

    /// Run this long before measuring.
    #[arg(long, value_name = "DURATION", value_parser = parse::duration, default_value = "0s")]
    pub ramp: Duration,

    /// Print a progress line (or update the bar) every DURATION.
    #[arg(long, value_name = "DURATION", value_parser = parse::duration, default_value = "1s")]
    pub interval: Duration,

    /// Units of rates and sizes in human output.
    #[arg(long, value_enum, default_value_t = UnitsArg::Mb)]
    pub units: UnitsArg,

    /// O_DIRECT: auto (fall back to buffered where unsupported, with a
    /// warning), required, or off. `--direct` alone means required.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = DirectArg::Auto,
          num_args = 0..=1, default_missing_value = "required")]
    pub direct: DirectArg,

    /// Include the final flush in the write time (as dd conv=fdatasync).
    #[arg(long)]
    pub fsync: bool,

    /// Stamp every block (target, offset, seed, checksum) and check it on
    /// read-back. With --net: checksum every frame on both sides (off by
    /// default there, as iperf3 measures the network alone).
    #[arg(long)]
    pub verify: bool,

    /// Seed of the data (and of the stamps --verify expects).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,

    /// Leave the test file in place.
    #[arg(long)]
    pub keep: bool,

    /// With --mode write: write at RATE (as 2Gbit, 250MB),
    /// from the start of the file once, as a recorder does (with --time, a
    /// file of RATE x its length); the file is kept, so `send --follow` can
    /// copy it meanwhile, as a rehearsal of a recording and its copy. With
    /// --net --udp: offer datagrams at RATE in all [default: as fast as
    /// the sender can]. RATE is in bits per second unless a B says bytes
    /// (4G, 4Gbit, 4Gbps, 1gbit: bits; 500MB, 450MiB: bytes; k M G T are
    /// powers of 1000); echoed in the unit given.
    #[arg(long, value_name = "RATE", value_parser = parse::rate)]
    pub rate: Option<parse::Rate>,

    /// Write zeros instead of incompressible, non-dedupable data.
    #[arg(long)]
    pub zeros: bool,

    /// Allow writing over a block device that holds a filesystem or partition table.
    #[arg(long)]
    pub destroy: bool,

    /// Fail (exit 1) if any --window of the aggregate rate falls below RATE
    /// (as 4Gbit, 500MB or 450MiB). RATE is in bits per second unless a B says bytes
    /// (4G, 4Gbit, 4Gbps, 1gbit: bits; 500MB, 450MiB: bytes; k M G T are
    /// powers of 1000); echoed in the unit given.
    #[arg(long, value_name = "RATE", value_parser = parse::rate)]
    pub min_rate: Option<parse::Rate>,

    /// Window of the --min-rate gate.
    #[arg(long, value_name = "DURATION", value_parser = parse::duration, default_value = "1s")]
    pub window: Duration,

    /// Run the iozone-style matrix of record sizes x file sizes.
    #[arg(long, conflicts_with_all = ["time", "min_rate", "verify"])]
    pub sweep: bool,

    /// Write the sweep table as CSV.
    #[arg(long, value_name = "FILE", requires = "sweep")]
    pub csv: Option<PathBuf>,

    /// Draw the run as an SVG picture: throughput per interval over time,
    /// per target (--disk) or stream (--net) and in aggregate, with the
    /// --min-rate line (and, when the gate failed, its worst window
    /// shaded); with --sweep, the matrix of rates (log scale) by record
    /// and file size.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,

    /// Print one JSON document at the end, nothing else on stdout.
    #[arg(long, conflicts_with = "json_stream")]
    pub json: bool,

    /// Print one JSON object per interval, then the summary.
    #[arg(long)]
    pub json_stream: bool,

    #[command(flatten)]
    pub show: ProgressArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ZeroCopyArg {
    Auto,
    On,
    Off,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Every option may also be set in the --config file, under the option's name \
with underscores (listen, root, key_file, direct, interval, handshake_timeout, timeout, \
max_sessions, max_connections, max_unauthenticated_per_address, max_streams, max_files, \
max_buffer_memory, require_encryption, metrics, log_format, state_dir, unsafe_links, keep_setid, \
devices, pull_only, udp, udp_time_max, cc, lanes, max_manifest_memory, min_rate, part_max_age); options on the command line win, and both are held to \
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

    /// O_DIRECT for received files: auto, required, or off [default: auto].
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

    /// Memory the manifests of all sessions may take together
    /// [default: 1G].
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

/// How a transfer is protected, survives faults and picks up where it
/// stopped.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// Accepted for scripts written before every run resumed: it changes
    /// nothing (see --ignore-times).
    #[arg(long, conflicts_with = "ignore_times")]
    pub resume: bool,

    /// Send everything again: no file is skipped as already there and no
    /// part file continued. Without it every run picks up where the last
    /// stopped: files the receiver holds untouched since an earlier run
    /// committed them (size, mtime and its stamp match) are skipped, as
    /// rsync's quick check skips them, and part files continue from the
    /// blocks its journal holds.
    #[arg(short = 'I', long)]
    pub ignore_times: bool,

    /// Compare the files the receiver holds by content (both sides read
    /// them) instead of by size, mtime and stamp.
    #[arg(long, conflicts_with = "ignore_times")]
    pub checksum: bool,

    /// End the transfer when the peer takes or sends nothing for this long
    /// (a stream stalled for half of it is given up and its data re-sent).
    #[arg(long, value_name = "DURATION", value_parser = parse::duration, default_value = "60s")]
    pub timeout: Duration,

    /// Seal every data frame with AES-256-GCM (keys from the handshake).
    /// The control connection is sealed with or without it: every message
    /// after the handshake, file names and sizes included.
    #[arg(long)]
    pub encrypt: bool,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Exit codes: 0 every file of the manifest is committed, 1 something is missing (named), 2 usage.\n\nExamples:\n  \
      urmove report shard-0.json shard-1.json          two shards' `send --shard K/2 --json` reports\n  \
      urmove report --json urmove-reports/shard-*.json   a Slurm array's (dist/slurm/urmove-array.sbatch), as JSON"
)]
pub struct ReportArgs {
    /// The shards' reports (`send --shard K/N --json > FILE`).
    #[arg(value_name = "FILE", num_args = 1.., required = true)]
    pub files: Vec<PathBuf>,

    /// Print one JSON document instead of the summary.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
      urmove send --key-file k /data/run42 dtn2:ingest      creates ingest/run42/... under the receiver's root\n  \
      urmove send --key-file k /data/run42/ dtn2:ingest/run42   run42's contents into ingest/run42 (rsync's trailing /)\n  \
      urmove send --key-file k big.dat dtn2:ingest/big-copy.dat   one file takes the name given where no directory has it\n  \
      urmove send -P 8 --key-file k big.dat dtn2:           8 streams, into the root itself\n  \
      urmove send --follow --follow-until 8h --key-file k /data/run42 dtn2:corr   files as they are written, new ones for 8 h\n  \
      urmove send --shard 1/2 --key-file k /data/run42 dtn2:ingest   this host's half (another runs --shard 0/2)")]
pub struct SendArgs {
    /// Files or directories to send, then HOST:DEST (DEST under the
    /// receiver's root, never absolute). As rsync reads them: a directory
    /// arrives as DEST/DIR, or given as DIR/ its contents arrive in DEST
    /// (DEST keeps its own mode and mtime); one file arrives as DEST itself
    /// where the receiver has no directory DEST and DEST ends in no /.
    #[arg(value_name = "SOURCE... HOST:DEST", num_args = 1.., required = true)]
    pub args: Vec<String>,

    /// Also send the paths listed in FILE, one per line (FDT's -fl); blank
    /// lines and lines starting with # are skipped.
    #[arg(long, value_name = "FILE")]
    pub files_from: Option<PathBuf>,

    /// Follow files still being written (a recorder's): send what each
    /// holds, then what is appended, in whole blocks as it lands. A file
    /// ends once no process holds it open for writing and it stayed
    /// unchanged for --follow-idle; the receiver commits it only then. A
    /// file that shrinks or is replaced meanwhile ends the run with an
    /// error naming it.
    #[arg(long, conflicts_with = "dry_run")]
    pub follow: bool,

    /// With --follow: how long a file nobody writes must stay unchanged
    /// before it ends.
    #[arg(long, value_name = "DURATION", value_parser = parse::duration, default_value = "5s", requires = "follow")]
    pub follow_idle: Duration,

    /// With --follow: a consumer at the far end may read each growing file
    /// as it grows: its NAME.urmove.part is readable as the file's mode
    /// says (writable by nobody else meanwhile) and its user.urmove.live
    /// attribute holds how many bytes from the start are written and
    /// checked. Without it, a recording appears only
    /// once complete.
    #[arg(long, requires = "follow")]
    pub live_parts: bool,

    /// Fail (exit 1) if over any --window the copy moved less than it would
    /// have at RATE (or, when less waited to go at the window's start, less
    /// than all of that: a writer's pause or the run's last bytes are not
    /// held against it); the files still arrive whole and verified.
    /// RATE is in bits per second unless a B says bytes
    /// (4G, 4Gbit, 4Gbps, 1gbit: bits; 500MB, 450MiB: bytes; k M G T are
    /// powers of 1000); echoed in the unit given.
    #[arg(long, value_name = "RATE", value_parser = parse::rate)]
    pub min_rate: Option<parse::Rate>,

    /// Window of the --min-rate gate.
    #[arg(long, value_name = "DURATION", value_parser = parse::duration, default_value = "1s", requires = "min_rate")]
    pub window: Duration,

    /// With --follow: add what appears in the directories sent until WHEN,
    /// a duration (8h), a time (2026-12-03T18:00:00Z, or with +01:00) or a
    /// marker file's appearance (a path with a /: ./END); then the run
    /// ends once every file followed has. Without it, new files are added
    /// while some file is still followed.
    #[arg(long, value_name = "WHEN", value_parser = parse::follow_until, requires = "follow")]
    pub follow_until: Option<crate::session::client::send::FollowUntil>,

    /// Send no faster than RATE in total (as 4Gbit, 500MB, 450MiB); each
    /// stream is paced to its share (SO_MAX_PACING_RATE), so the data
    /// leaves evenly instead of in bursts. RATE is in bits per second unless a B says bytes
    /// (4G, 4Gbit, 4Gbps, 1gbit: bits; 500MB, 450MiB: bytes; k M G T are
    /// powers of 1000); echoed in the unit given.
    #[arg(long, value_name = "RATE", value_parser = parse::rate)]
    pub rate_limit: Option<parse::Rate>,

    /// Receiver's port.
    #[arg(short = 'p', long, default_value_t = 7878)]
    pub port: u16,

    /// Move shard K of N of the transfer (0 <= K < N), or auto: the Slurm
    /// array task (SLURM_ARRAY_TASK_ID of SLURM_ARRAY_TASK_COUNT) or the
    /// Kubernetes Indexed Job's (JOB_COMPLETION_INDEX of JOB_COMPLETIONS).
    /// Every shard scans the same sources; each sends its whole files (by
    /// a stable hash of the path, weighted by size) and one piece of every
    /// file above --split-over. HOST may be a list, HOST1,HOST2:DEST:
    /// shard K sends to host K mod M; receivers sharing one filesystem
    /// (and one secret) commit a split file once every piece is verified.
    /// `urmove report` merges the shards' --json reports.
    #[arg(long, value_name = "K/N|auto")]
    pub shard: Option<String>,

    /// With --shard: files above SIZE are split into a piece per shard.
    #[arg(long, value_name = "SIZE", value_parser = parse::size, default_value = "256M", requires = "shard")]
    pub split_over: u64,

    /// Parallel TCP data streams, or auto: start with 8, and 16 if the
    /// aggregate grows by a tenth with them (the choice is in the summary
    /// and the JSON; with --rate-limit, 8).
    #[arg(short = 'P', long, default_value = "auto", value_parser = parse::streams, value_name = "N|auto")]
    pub streams: parse::Streams,

    /// Bytes per frame (block).
    #[arg(long, value_name = "SIZE", value_parser = parse::size, default_value = "4M")]
    pub block: u64,

    /// Threads reading and sending, each pinned to a core with its own
    /// ring, buffers and share of the streams, taking files (and pieces of
    /// large ones) in turn; auto: the cores this process may run on, at
    /// most one per stream.
    #[arg(long, default_value = "auto", value_parser = parse::lanes, value_name = "N|auto")]
    pub lanes: crate::session::link::lanes::Lanes,

    /// Socket send buffer per stream (FDT's -ss). Setting it turns off the
    /// kernel's autotuning of that buffer, which otherwise grows it to what
    /// the path needs (up to net.ipv4.tcp_wmem's maximum).
    #[arg(long, value_name = "SIZE", value_parser = parse::size)]
    pub sock_buf: Option<u64>,

    /// Congestion control of the data streams (TCP_CONGESTION): auto (BBR
    /// where the kernel has it and allows it, else the kernel's default) or
    /// a name from net.ipv4.tcp_available_congestion_control.
    #[arg(long, value_name = "NAME", value_parser = parse::congestion, default_value = "auto")]
    pub cc: crate::datapath::tcp::Congestion,

    /// Pre-shared key (the same file as the receiver's).
    #[arg(long, value_name = "FILE")]
    pub key_file: PathBuf,

    /// Keep this side's own state here: the secret behind the token the
    /// receiver stamps this client's files with, so a re-run skips them
    /// unread (and never another key holder's) [default:
    /// $XDG_STATE_HOME/urmove or ~/.local/state/urmove; /var/lib/urmove as
    /// root].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// O_DIRECT for reading sources: auto, required, or off.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = DirectArg::Auto)]
    pub direct: DirectArg,

    /// Zero-copy sends: auto (not over loopback, veth or TUN, which copy
    /// anyway, nor over a round trip above 1 ms, where each buffer waits for
    /// its acknowledgement; dropped when the kernel reports copying), on, or
    /// off.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ZeroCopyArg::Auto)]
    pub zerocopy: ZeroCopyArg,

    /// Print a progress line (or update the bar) every DURATION.
    #[arg(long, value_name = "DURATION", value_parser = parse::duration, default_value = "1s")]
    pub interval: Duration,

    /// Draw the transfer as an SVG picture: throughput per interval over
    /// time, per stream and in aggregate.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,

    /// Print one JSON document at the end, nothing else on stdout.
    #[arg(long, conflicts_with = "json_stream")]
    pub json: bool,

    /// Print one JSON object per interval, then the summary.
    #[arg(long)]
    pub json_stream: bool,

    #[command(flatten)]
    pub show: ProgressArgs,

    #[command(flatten)]
    pub resume: ResumeArgs,

    #[command(flatten)]
    pub tree: TreeArgs,
}

/// What of each entry arrives besides its bytes, mode and times, as
/// rsync's -H, -X, -A and --numeric-ids choose it. The side that scans
/// (the sender of a push, the daemon of a pull) reads what is asked for.
#[derive(Debug, Clone, Copy, Args)]
pub struct FidelityArgs {
    /// Keep hard links: a file's further names under the sources arrive as
    /// hard links to its first (rsync's -H), not as copies.
    #[arg(short = 'H', long)]
    pub hard_links: bool,

    /// Carry extended attributes in the user.* namespace (rsync's -X); the
    /// receiver sets them on each file and directory it commits.
    #[arg(short = 'X', long)]
    pub xattrs: bool,

    /// Carry POSIX ACLs (rsync's -A): system.posix_acl_access, and the
    /// default ACL of directories.
    #[arg(short = 'A', long)]
    pub acls: bool,

    /// Give entries their owner and group by number, not by name (rsync's
    /// --numeric-ids). Owners are kept only where the receiving side runs
    /// as root; otherwise its files belong to it.
    #[arg(long)]
    pub numeric_ids: bool,

    /// Also leave runs of zeros inside the data as holes on the receiver
    /// (rsync's -S, cp --sparse=always). The source's own holes always
    /// arrive as holes, with or without it.
    #[arg(short = 'S', long)]
    pub sparse: bool,

    /// Carry device nodes too (rsync's --devices; FIFOs and sockets always
    /// go, as rsync -a sends them). The receiver makes them only where it
    /// runs as root and, a daemon, when its config allows them (devices =
    /// true); otherwise each is one skipped entry, named.
    #[arg(short = 'D', long)]
    pub devices: bool,
}

/// What of the sources goes, what goes from the receiving side, and
/// whether anything happens at all, as rsync's options choose them:
/// declared once, for `send` and `pull` alike.
#[derive(Debug, Args)]
pub struct TreeArgs {
    /// Leave out entries matching PATTERN (repeatable; rsync's rules: a
    /// name pattern such as '*.tmp' matches at any depth, a leading / anchors
    /// it at the top, a trailing / matches directories only, ** crosses
    /// directories). --include and --exclude rules are tried in the order
    /// given, the first match deciding. A pull carries them to the daemon,
    /// which lists only what they let through.
    #[arg(long, value_name = "PATTERN")]
    pub exclude: Vec<String>,

    /// Move entries matching PATTERN even if a later --exclude matches them
    /// (repeatable).
    #[arg(long, value_name = "PATTERN")]
    pub include: Vec<String>,

    /// Read --exclude patterns from FILE, one per line (blank lines and
    /// lines starting with # or ; skipped; "+ PATTERN" includes).
    #[arg(long, value_name = "FILE")]
    pub exclude_from: Vec<PathBuf>,

    #[command(flatten)]
    pub keep: FidelityArgs,

    /// After the transfer, remove what the receiving side (the daemon of a
    /// send, LOCAL_DIR of a pull) holds under the directories moved that
    /// the source does not have (rsync's --delete): only inside those
    /// directories (and in DEST itself when a directory's contents, DIR/,
    /// were moved), never urmove's part files, and not what --exclude
    /// leaves out; the summary lists what was removed.
    #[arg(long)]
    pub delete: bool,

    /// --delete, and what --exclude leaves out goes from the receiving side
    /// too (rsync's --delete-excluded).
    #[arg(long)]
    pub delete_excluded: bool,

    /// Say what the run would do and do none of it: each file that would
    /// move and its bytes, what the receiving side holds already, what it
    /// would refuse and (with --delete) remove. A send asks the daemon; a
    /// pull asks the daemon for its list and looks here. Nothing is moved
    /// or written on either side.
    #[arg(short = 'n', long)]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Bytes of test files to generate and send.
    #[arg(long, value_name = "SIZE", value_parser = parse::size, default_value = "2G")]
    pub size: u64,

    /// Parallel TCP data streams.
    #[arg(short = 'P', long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub streams: u16,

    /// Leave the generated and received files in place.
    #[arg(long)]
    pub keep: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
      urmove pull --key-file k dtn2:ingest/run42 /data     creates /data/run42/... from the receiver's root\n  \
      urmove pull --key-file k dtn2:ingest/run42/ /data/run42   run42's contents into /data/run42 (rsync's trailing /)\n  \
      urmove pull --key-file k dtn2:ingest/run42/a.dat /data/a-copy.dat   one file takes the name given where no directory has it\n  \
      urmove pull -H -X -A --numeric-ids --key-file k dtn2:ingest/run42 /data   the same, as rsync -aHAX keeps it\n  \
      urmove pull --delete --exclude '*.tmp' --key-file k dtn2:ingest/run42 /data   also removes what run42 lost, keeping *.tmp\n  \
      urmove pull -n --delete --key-file k dtn2:ingest/run42 /data   what that would fetch and remove, doing nothing")]
pub struct PullArgs {
    /// HOST:PATH (PATH under the daemon's root, never absolute; one
    /// host), then LOCAL_DIR. As rsync reads them: a directory arrives as
    /// LOCAL_DIR/DIR, or given as DIR/ its contents arrive in LOCAL_DIR
    /// (which keeps its own mode and mtime); one file arrives as LOCAL_DIR
    /// itself where that is no directory and ends in no /.
    #[arg(value_name = "HOST:PATH... LOCAL_DIR", num_args = 2.., required = true)]
    pub args: Vec<String>,

    /// Also pull the paths (under the daemon's root) listed in FILE, one
    /// per line, from the host the arguments name; blank lines and lines
    /// starting with # are skipped.
    #[arg(long, value_name = "FILE")]
    pub files_from: Option<PathBuf>,

    /// Have the daemon send no faster than RATE in total (as 4Gbit,
    /// 500MB, 450MiB); it paces each of its streams to its share
    /// (SO_MAX_PACING_RATE). RATE is in bits per second unless a B says bytes
    /// (4G, 4Gbit, 4Gbps, 1gbit: bits; 500MB, 450MiB: bytes; k M G T are
    /// powers of 1000); echoed in the unit given.
    #[arg(long, value_name = "RATE", value_parser = parse::rate)]
    pub rate_limit: Option<parse::Rate>,

    /// Socket receive buffer per stream on this side. Setting it turns off
    /// the kernel's autotuning of that buffer, which otherwise grows it to
    /// what the path needs (up to net.ipv4.tcp_rmem's maximum).
    #[arg(long, value_name = "SIZE", value_parser = parse::size)]
    pub sock_buf: Option<u64>,

    /// Draw the transfer as an SVG picture: throughput per interval over
    /// time, per stream and in aggregate.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,

    /// The daemon's port.
    #[arg(short = 'p', long, default_value_t = 7878)]
    pub port: u16,

    /// Fetch shard K of N of the transfer (0 <= K < N), or auto (the
    /// Slurm array task's, or the Kubernetes Indexed Job's): the daemon
    /// offers only the share (whole files by a stable hash of the path,
    /// one piece of every file above --split-over), as send --shard. HOST
    /// may be a list (HOST1,HOST2:PATH: shard K asks host K mod M); pulls
    /// into one shared filesystem commit a split file once every piece is
    /// verified. `urmove report` merges the shards' --json reports.
    #[arg(long, value_name = "K/N|auto")]
    pub shard: Option<String>,

    /// With --shard: files above SIZE are split into a piece per shard.
    #[arg(long, value_name = "SIZE", value_parser = parse::size, default_value = "256M", requires = "shard")]
    pub split_over: u64,

    /// Parallel TCP data streams.
    #[arg(short = 'P', long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub streams: u16,

    /// Bytes per frame (block).
    #[arg(long, value_name = "SIZE", value_parser = parse::size, default_value = "4M")]
    pub block: u64,

    /// Threads receiving and writing, each pinned to a core with its own
    /// ring, buffers and share of the streams; auto: the cores this
    /// process may run on, at most one per stream.
    #[arg(long, default_value = "auto", value_parser = parse::lanes, value_name = "N|auto")]
    pub lanes: crate::session::link::lanes::Lanes,

    /// Congestion control of this side's data streams (TCP_CONGESTION:
    /// auto, bbr, cubic, ...). A pull's data comes from the daemon, whose
    /// own --cc governs it; this one shapes only the acknowledgements.
    #[arg(long, value_name = "NAME", value_parser = parse::congestion, default_value = "auto")]
    pub cc: crate::datapath::tcp::Congestion,

    /// Pre-shared key (the same file as the daemon's).
    #[arg(long, value_name = "FILE")]
    pub key_file: PathBuf,

    /// O_DIRECT for writing received files: auto, required, or off.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = DirectArg::Auto)]
    pub direct: DirectArg,

    /// Keep this side's own state here: the secret that authenticates the
    /// resume journals and stamps of what it receives [default:
    /// $XDG_STATE_HOME/urmove or ~/.local/state/urmove; /var/lib/urmove as
    /// root].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Print a progress line (or update the bar) every DURATION.
    #[arg(long, value_name = "DURATION", value_parser = parse::duration, default_value = "1s")]
    pub interval: Duration,

    /// Print one JSON document at the end, nothing else on stdout.
    #[arg(long, conflicts_with = "json_stream")]
    pub json: bool,

    /// Print one JSON object per interval, then the summary.
    #[arg(long)]
    pub json_stream: bool,

    #[command(flatten)]
    pub show: ProgressArgs,

    #[command(flatten)]
    pub resume: ResumeArgs,

    #[command(flatten)]
    pub tree: TreeArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LinkArg {
    #[value(name = "10G")]
    G10,
    #[value(name = "25G")]
    G25,
    #[value(name = "40G")]
    G40,
    #[value(name = "100G")]
    G100,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
      urmove tune                                     the host against a 10G link and 100 ms paths\n  \
      urmove tune --link 100G --peer dtn2 --target /data   the route to dtn2 and the disk behind /data\n  \
      urmove tune --link 100G --print-sysctl          the sysctl profile for 100G\n  \
      sudo urmove tune --apply --target /data         write /etc/sysctl.d/90-urmove.conf, load it, set the disk")]
pub struct TuneArgs {
    /// Speed of the data link to tune for.
    #[arg(long, value_enum, ignore_case = true, default_value_t = LinkArg::G10)]
    pub link: LinkArg,

    /// Round-trip time of the longest path to fill: socket buffers hold one
    /// bandwidth-delay product (ping the peer to measure it).
    #[arg(long, value_name = "DURATION", value_parser = parse::duration,
          default_value = super::tune::profile::RTT_DEFAULT)]
    pub rtt: Duration,

    /// Check the MTU, NIC queues and IRQs of the route to HOST [default: the default route].
    #[arg(long, value_name = "HOST")]
    pub peer: Option<String>,

    /// Check the disk behind PATH (a file, directory or block device):
    /// scheduler, read-ahead, queue depth.
    #[arg(long, value_name = "PATH")]
    pub target: Option<PathBuf>,

    /// Write the sysctl profile (never lowering a value), load it, and set
    /// the --target disk's scheduler and read-ahead. Needs root.
    #[arg(long)]
    pub apply: bool,

    /// Where --apply writes the profile [default: /etc/sysctl.d/90-urmove.conf].
    #[arg(long, value_name = "FILE", requires = "apply")]
    pub sysctl_file: Option<PathBuf>,

    /// With --apply: write the profile but leave the running kernel's
    /// sysctls alone (disk settings still apply).
    #[arg(long, requires = "apply")]
    pub no_load: bool,

    /// Print the sysctl profile for --link and --rtt and nothing else.
    #[arg(long, conflicts_with_all = ["apply", "json", "peer", "target"])]
    pub print_sysctl: bool,

    /// Print one JSON document, nothing else on stdout.
    #[arg(long)]
    pub json: bool,
}
