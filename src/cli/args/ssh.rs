//! How a transfer or a network test reaches a host through ssh, with no
//! daemon and no key file: `[user@]host:PATH` and the ssh command.

use clap::Args;

/// The options of the ssh way (`send`, `pull`, `bench --net`).
#[derive(Debug, Clone, Args)]
pub struct SshArgs {
    /// Start the remote side through ssh even where a key file is given
    /// (without --key-file, a HOST:PATH is reached through ssh anyway).
    #[arg(long)]
    pub ssh: bool,

    /// The ssh command, split into words as a shell would (rsync's -e),
    /// e.g. 'ssh -p 2222 -i ~/.ssh/dtn' [default: $URMOVE_RSH, else ssh].
    #[arg(short = 'e', long, value_name = "COMMAND")]
    pub rsh: Option<String>,

    /// What runs on the remote host instead of `urmove` (rsync's
    /// --rsync-path, verbatim: `sudo -n urmove` works).
    #[arg(long, value_name = "PROGRAM", default_value = "urmove")]
    pub remote_path: String,

    /// Carry the session's connections inside the ssh connection, for a
    /// host whose firewall admits only ssh: ssh's cipher and window then
    /// set the rate (about one core's worth), and the frames are not
    /// sealed again (--encrypt to have them sealed too).
    #[arg(long)]
    pub through_ssh: bool,
}

/// `serve --stdio`: the remote side of the ssh way, started by the
/// client through ssh, never by hand.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Greet and take the session key on stdin, answer on stdout.
    #[arg(long, required = true)]
    pub stdio: bool,

    /// The address to listen on [default: where the ssh connection
    /// arrived, from $SSH_CONNECTION].
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<std::net::IpAddr>,
}
