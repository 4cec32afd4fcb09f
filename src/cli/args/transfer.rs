//! `urmove send` and `urmove pull`, the option groups they share, and
//! `urmove report`, which merges a sharded transfer's reports.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Arg, Args};

use super::{DirectArg, ProgressArgs, ZeroCopyArg};
use crate::cli::parse;

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
      urmove send --key-file k /data/run42 dtn2:ingest      creates ingest/run42/... under the receiver's root\n  \
      urmove send --key-file k /data/run42/ dtn2:ingest/run42   run42's contents into ingest/run42 (rsync's trailing /)\n  \
      urmove send --key-file k big.dat dtn2:ingest/big-copy.dat   one file takes the name given where no directory has it\n  \
      urmove send -P 8 --key-file k big.dat dtn2:           8 streams, into the root itself\n  \
      urmove send --follow --follow-until 8h --key-file k /data/run42 dtn2:corr   files as they are written, new ones for 8 h\n  \
      urmove send --shard 1/2 --key-file k /data/run42 dtn2:ingest   this host's half (another runs --shard 0/2)\n  \
      urmove send -aHAX /data/run42 alice@dtn2:ingest   through ssh (no key file): into ~alice/ingest/run42 on dtn2\n  \
      urmove send --through-ssh /data/run42 dtn2:/data/in   inside the ssh connection, for a host that admits only ssh")]
#[command(mut_args(send_words))]
pub struct SendArgs {
    /// Files or directories to send, then HOST:DEST (DEST under the
    /// receiver's root, never absolute; through ssh, [user@]HOST:DEST
    /// relative to the remote home or absolute, as scp's). As rsync reads them: a directory
    /// arrives as DEST/DIR, or given as DIR/ its contents arrive in DEST
    /// (DEST keeps its own mode and mtime); one file arrives as DEST itself
    /// where the receiver has no directory DEST and DEST ends in no /.
    #[arg(value_name = "SOURCE... HOST:DEST", num_args = 1.., required = true)]
    pub args: Vec<String>,

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

    /// Parallel TCP data streams, or auto: start with 8, and 16 if the
    /// aggregate grows by a tenth with them; over a round trip of 20 ms or
    /// more, 16 from the start (the choice is in the summary and the JSON;
    /// with --rate-limit, 8).
    #[arg(short = 'P', long, default_value = "auto", value_parser = parse::streams, value_name = "N|auto")]
    pub streams: parse::Streams,

    /// Zero-copy sends: auto (not over loopback, veth or TUN, which copy
    /// anyway, nor over a round trip above 1 ms, where each buffer waits for
    /// its acknowledgement; dropped when the kernel reports copying), on, or
    /// off.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = ZeroCopyArg::Auto)]
    pub zerocopy: ZeroCopyArg,

    #[command(flatten)]
    pub transfer: TransferArgs,
}

/// `send`'s help for the options it shares with `pull` and says of its
/// own side (each as clap shows a one-paragraph doc comment: no final
/// period).
const SEND_WORDS: &[Words] = &[
    Words {
        id: "files_from",
        help: "Also send the paths listed in FILE, one per line (FDT's -fl); blank \
               lines and lines starting with # are skipped",
    },
    Words {
        id: "rate_limit",
        help: "Send no faster than RATE in total (as 4Gbit, 500MB, 450MiB); each \
               stream is paced to its share (SO_MAX_PACING_RATE), so the data \
               leaves evenly instead of in bursts. RATE is in bits per second \
               unless a B says bytes (4G, 4Gbit, 4Gbps, 1gbit: bits; 500MB, \
               450MiB: bytes; k M G T are powers of 1000); echoed in the unit given",
    },
    Words {
        id: "port",
        help: "Receiver's port",
    },
    Words {
        id: "shard",
        help: "Move shard K of N of the transfer (0 <= K < N), or auto: the Slurm \
               array task (SLURM_ARRAY_TASK_ID of SLURM_ARRAY_TASK_COUNT) or the \
               Kubernetes Indexed Job's (JOB_COMPLETION_INDEX of JOB_COMPLETIONS). \
               Every shard scans the same sources; each sends its whole files (by \
               a stable hash of the path, weighted by size) and one piece of every \
               file above --split-over. HOST may be a list, HOST1,HOST2:DEST: \
               shard K sends to host K mod M; receivers sharing one filesystem \
               (and one secret) commit a split file once every piece is verified. \
               `urmove report` merges the shards' --json reports",
    },
    Words {
        id: "lanes",
        help: "Threads reading and sending, each pinned to a core with its own \
               ring, buffers and share of the streams, taking files (and pieces of \
               large ones) in turn; auto: the cores this process may run on, at \
               most one per stream",
    },
    Words {
        id: "sock_buf",
        help: "Socket send buffer per stream (FDT's -ss). Setting it turns off the \
               kernel's autotuning of that buffer, which otherwise grows it to what \
               the path needs (up to net.ipv4.tcp_wmem's maximum)",
    },
    Words {
        id: "cc",
        help: "Congestion control of the data streams (TCP_CONGESTION): auto (BBR \
               where the kernel has it and allows it, else the kernel's default) or \
               a name from net.ipv4.tcp_available_congestion_control",
    },
    Words {
        id: "key_file",
        help: "Pre-shared key (the same file as the receiver's daemon); without it, \
               [user@]HOST:DEST is reached through ssh (see --ssh)",
    },
    Words {
        id: "state_dir",
        help: "Keep this side's own state here: the secret behind the token the \
               receiver stamps this client's files with, so a re-run skips them \
               unread (and never another key holder's) [default: \
               $XDG_STATE_HOME/urmove or ~/.local/state/urmove; /var/lib/urmove as \
               root]",
    },
    Words {
        id: "direct",
        help: "O_DIRECT for reading sources: auto, required, or off",
    },
];

fn send_words(arg: Arg) -> Arg {
    worded(arg, SEND_WORDS)
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
      urmove pull --key-file k dtn2:ingest/run42 /data     creates /data/run42/... from the receiver's root\n  \
      urmove pull --key-file k dtn2:ingest/run42/ /data/run42   run42's contents into /data/run42 (rsync's trailing /)\n  \
      urmove pull --key-file k dtn2:ingest/run42/a.dat /data/a-copy.dat   one file takes the name given where no directory has it\n  \
      urmove pull -H -X -A --numeric-ids --key-file k dtn2:ingest/run42 /data   the same, as rsync -aHAX keeps it\n  \
      urmove pull --delete --exclude '*.tmp' --key-file k dtn2:ingest/run42 /data   also removes what run42 lost, keeping *.tmp\n  \
      urmove pull -n --delete --key-file k dtn2:ingest/run42 /data   what that would fetch and remove, doing nothing\n  \
      urmove pull alice@dtn2:ingest/run42 /data            through ssh (no key file), relative to alice's home there")]
#[command(mut_args(pull_words))]
pub struct PullArgs {
    /// HOST:PATH (PATH under the daemon's root, never absolute; through
    /// ssh, [user@]HOST:PATH relative to the remote home or absolute; one
    /// host), then LOCAL_DIR. As rsync reads them: a directory arrives as
    /// LOCAL_DIR/DIR, or given as DIR/ its contents arrive in LOCAL_DIR
    /// (which keeps its own mode and mtime); one file arrives as LOCAL_DIR
    /// itself where that is no directory and ends in no /.
    #[arg(value_name = "HOST:PATH... LOCAL_DIR", num_args = 2.., required = true)]
    pub args: Vec<String>,

    /// Parallel TCP data streams.
    #[arg(short = 'P', long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub streams: u16,

    #[command(flatten)]
    pub transfer: TransferArgs,
}

/// `pull`'s help for the options it shares with `send` and says of its
/// own side (as [`SEND_WORDS`]).
const PULL_WORDS: &[Words] = &[
    Words {
        id: "files_from",
        help: "Also pull the paths (under the daemon's root) listed in FILE, one \
               per line, from the host the arguments name; blank lines and lines \
               starting with # are skipped",
    },
    Words {
        id: "rate_limit",
        help: "Have the daemon send no faster than RATE in total (as 4Gbit, \
               500MB, 450MiB); it paces each of its streams to its share \
               (SO_MAX_PACING_RATE). RATE is in bits per second unless a B says \
               bytes (4G, 4Gbit, 4Gbps, 1gbit: bits; 500MB, 450MiB: bytes; k M G T \
               are powers of 1000); echoed in the unit given",
    },
    Words {
        id: "port",
        help: "The daemon's port",
    },
    Words {
        id: "shard",
        help: "Fetch shard K of N of the transfer (0 <= K < N), or auto (the \
               Slurm array task's, or the Kubernetes Indexed Job's): the daemon \
               offers only the share (whole files by a stable hash of the path, \
               one piece of every file above --split-over), as send --shard. HOST \
               may be a list (HOST1,HOST2:PATH: shard K asks host K mod M); pulls \
               into one shared filesystem commit a split file once every piece is \
               verified. `urmove report` merges the shards' --json reports",
    },
    Words {
        id: "lanes",
        help: "Threads receiving and writing, each pinned to a core with its own \
               ring, buffers and share of the streams; auto: the cores this \
               process may run on, at most one per stream",
    },
    Words {
        id: "sock_buf",
        help: "Socket receive buffer per stream on this side. Setting it turns off \
               the kernel's autotuning of that buffer, which otherwise grows it to \
               what the path needs (up to net.ipv4.tcp_rmem's maximum)",
    },
    Words {
        id: "cc",
        help: "Congestion control of this side's data streams (TCP_CONGESTION: \
               auto, bbr, cubic, ...). A pull's data comes from the daemon, whose \
               own --cc governs it; this one shapes only the acknowledgements",
    },
    Words {
        id: "key_file",
        help: "Pre-shared key (the same file as the daemon's); without it, \
               [user@]HOST:PATH is reached through ssh (see --ssh)",
    },
    Words {
        id: "state_dir",
        help: "Keep this side's own state here: the secret that authenticates the \
               resume journals and stamps of what it receives [default: \
               $XDG_STATE_HOME/urmove or ~/.local/state/urmove; /var/lib/urmove as \
               root]",
    },
    Words {
        id: "direct",
        help: "O_DIRECT for writing received files: auto, required, or off",
    },
];

fn pull_words(arg: Arg) -> Arg {
    worded(arg, PULL_WORDS)
}

/// One option's help as one command says it: `id` is the field's name.
struct Words {
    id: &'static str,
    help: &'static str,
}

/// `arg` with its help from `words`, when they name it.
fn worded(arg: Arg, words: &[Words]) -> Arg {
    match words.iter().find(|w| arg.get_id().as_str() == w.id) {
        Some(w) => arg.help(w.help),
        None => arg,
    }
}

/// What `send` and `pull` share, declared once: what else to move and
/// which share of it, the peer and the key, the data path's shape, the
/// report, and the groups below. Where the two commands say an option of
/// their own side (the receiver's port, the daemon's), the help is theirs:
/// [`SEND_WORDS`] and [`PULL_WORDS`]; those fields carry plain comments.
#[derive(Debug, Args)]
pub struct TransferArgs {
    // More paths to move, listed in FILE.
    #[arg(long, value_name = "FILE")]
    pub files_from: Option<PathBuf>,

    // The most the data may move at, in all, paced per stream.
    #[arg(long, value_name = "RATE", value_parser = parse::rate)]
    pub rate_limit: Option<parse::Rate>,

    // The daemon's port.
    #[arg(short = 'p', long, default_value_t = 7878)]
    pub port: u16,

    // K/N: this run's share of the transfer.
    #[arg(long, value_name = "K/N|auto")]
    pub shard: Option<String>,

    /// With --shard: files above SIZE are split into a piece per shard.
    #[arg(long, value_name = "SIZE", value_parser = parse::size, default_value = "256M", requires = "shard")]
    pub split_over: u64,

    /// Bytes per frame (block).
    #[arg(long, value_name = "SIZE", value_parser = parse::size, default_value = "4M")]
    pub block: u64,

    // Threads of this side's data path, a ring each.
    #[arg(long, default_value = "auto", value_parser = parse::lanes, value_name = "N|auto")]
    pub lanes: crate::session::link::lanes::Lanes,

    // This side's socket buffer per stream.
    #[arg(long, value_name = "SIZE", value_parser = parse::size)]
    pub sock_buf: Option<u64>,

    // Congestion control of this side's data streams.
    #[arg(long, value_name = "NAME", value_parser = parse::congestion, default_value = "auto")]
    pub cc: crate::datapath::tcp::Congestion,

    // The pre-shared key (the daemon's).
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,

    #[command(flatten)]
    pub ssh: super::SshArgs,

    // Where this side keeps its secret.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    // O_DIRECT for this side's files.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = DirectArg::Auto)]
    pub direct: DirectArg,

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

    /// Through ssh, where frames are sealed by default: leave the data
    /// frames unsealed (a network trusted end to end). The control
    /// connection stays sealed.
    #[arg(long, conflicts_with = "encrypt")]
    pub no_encrypt: bool,
}

/// What of each entry arrives besides its bytes, mode and times, as
/// rsync's -H, -X, -A and --numeric-ids choose it. The side that scans
/// (the sender of a push, the daemon of a pull) reads what is asked for.
#[derive(Debug, Clone, Copy, Args)]
pub struct FidelityArgs {
    /// Accepted for rsync's habit (-aHAX): what -a keeps (the tree,
    /// symlinks, modes, times, FIFOs and sockets, and owners where the
    /// receiving side runs as root) is kept with or without it.
    #[arg(short = 'a', long)]
    pub archive: bool,

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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every option of `send` and `pull` has help, and every option named
    /// in [`SEND_WORDS`] and [`PULL_WORDS`] is one they share.
    #[test]
    fn each_shared_option_has_each_commands_words() {
        let cli = crate::cli::Cli::command();
        let shared = TransferArgs::augment_args(clap::Command::new("t"));
        for (name, words) in [("send", SEND_WORDS), ("pull", PULL_WORDS)] {
            let cmd = cli.find_subcommand(name).expect("a subcommand");
            for arg in cmd.get_arguments() {
                assert!(
                    arg.get_help().is_some(),
                    "{name} --{} has no help",
                    arg.get_id()
                );
            }
            for w in words {
                assert!(
                    shared.get_arguments().any(|a| a.get_id() == w.id),
                    "{name}: {}",
                    w.id
                );
            }
        }
    }
}
