//! `urmove tune`: the link and paths to tune the host for.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::cli::parse;

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
          default_value = crate::cli::tune::profile::RTT_DEFAULT)]
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
