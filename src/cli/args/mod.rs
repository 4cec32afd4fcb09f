//! The command line, parsed and nothing more (clap derive): the command
//! tree, and the option groups and values several command groups share.
//! Each group's options are in a file of their own; resolving them against
//! the host happens in the files of `cli` that run each command.

mod bench;
mod recv;
mod ssh;
mod transfer;
mod tune;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use super::parse;

pub use bench::{BenchArgs, ModeArg, UnitsArg};
pub use recv::{LinksArg, LogFormatArg, RecvArgs};
pub use ssh::{ServeArgs, SshArgs};
pub use transfer::{
    FidelityArgs, PullArgs, ReportArgs, ResumeArgs, SendArgs, TransferArgs, TreeArgs,
};
pub use tune::{LinkArg, TuneArgs};

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
    /// Ask a `urmove recv` daemon what it is: its release, the protocols
    /// it speaks, its limits, its sessions now and the free bytes under its
    /// root (a daemon of protocol 13 or later)
    Info(InfoArgs),
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
    /// The remote side of `send`/`pull`/`bench --net` through ssh, which
    /// the client starts itself.
    #[command(hide = true)]
    Serve(ServeArgs),
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DirectArg {
    Auto,
    Required,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ZeroCopyArg {
    Auto,
    On,
    Off,
}

#[derive(Debug, Args)]
#[command(after_help = "Example:\n  urmove info --key-file /etc/urmove/key dtn2")]
pub struct InfoArgs {
    /// The daemon's host.
    #[arg(value_name = "HOST")]
    pub host: String,

    /// The daemon's port.
    #[arg(short = 'p', long, default_value_t = 7878)]
    pub port: u16,

    /// The pre-shared key (the daemon's).
    #[arg(long, value_name = "FILE")]
    pub key_file: PathBuf,

    /// One JSON document instead of text.
    #[arg(long)]
    pub json: bool,
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
