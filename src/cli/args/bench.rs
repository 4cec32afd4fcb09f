//! `urmove bench`: disks (`--disk`) and the network (`--net`).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::{DirectArg, ProgressArgs, ZeroCopyArg};
use crate::cli::parse;

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
    /// HOST (iperf3's role), or through ssh on [user@]HOST with no key file.
    /// No disk is touched.
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

    /// bench --net: the pre-shared key (the receiver's); without it,
    /// [user@]HOST is reached through ssh and its receiver started there.
    #[arg(long, value_name = "FILE", requires = "net")]
    pub key_file: Option<PathBuf>,

    #[command(flatten)]
    pub ssh: super::SshArgs,

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
