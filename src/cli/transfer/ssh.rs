//! The ssh way on the command line: whether a run takes it, the remote
//! side started (`session::client::ssh`), remote paths read as scp reads
//! them, frames fitted to the remote's locked memory, and `serve --stdio`.

use crate::cli::args::{ServeArgs, SshArgs};
use crate::cli::Failure;
use crate::protocol::ssh::Mode;
use crate::session::client::config::SendConfig;
use crate::session::client::ssh::{SshRemote, SshSpec};

/// Whether a run with `key_file` reaches its host through ssh: without a
/// key file, or with `--ssh`.
pub(super) fn wanted(key_file: Option<&std::path::Path>, ssh: &SshArgs) -> bool {
    ssh.ssh || key_file.is_none()
}

/// A `user@` names an ssh login: refused for a daemon.
pub(super) fn no_login_unless(over: bool, host: &str) -> Result<(), Failure> {
    if !over && host.contains('@') {
        return Err(Failure::Usage(anyhow::anyhow!(
            "{host}: a user@ is an ssh login, and --key-file reaches a daemon: leave out --key-file (or add --ssh) to go through ssh"
        )));
    }
    Ok(())
}

/// Start the remote side on `host` (`[user@]host`).
pub(super) fn start(ssh: &SshArgs, host: &str) -> Result<SshRemote, Failure> {
    let rsh = ssh
        .rsh
        .clone()
        .or_else(|| std::env::var("URMOVE_RSH").ok().filter(|r| !r.is_empty()))
        .unwrap_or_else(|| "ssh".into());
    let words = shlex::split(&rsh)
        .filter(|w| !w.is_empty())
        .ok_or_else(|| Failure::Usage(anyhow::anyhow!("-e {rsh}: not a command")))?;
    let spec = SshSpec {
        rsh: words,
        remote_path: ssh.remote_path.clone(),
        host: host.to_string(),
        mode: match ssh.through_ssh {
            true => Mode::ThroughSsh,
            false => Mode::Tcp,
        },
    };
    if ssh.through_ssh {
        eprintln!(
            "urmove: --through-ssh: the session's connections go inside ssh's own, whose cipher and window set the rate (often 1-3 Gb/s, one core); without it urmove's own streams go to a port the remote opens"
        );
    }
    crate::session::client::ssh::start(&spec).map_err(|e| Failure::Run(anyhow::anyhow!("{e}")))
}

/// A remote `path` as the daemon rooted at `/` takes it: relative to the
/// remote `home` (scp's way), `~` and `~/` too, absolute as given; a
/// trailing `/` kept. `~user` is refused.
pub(super) fn remote_path(home: &str, path: &str) -> Result<String, Failure> {
    let home = home.trim_matches('/');
    let under_home = |rest: &str| match (home, rest) {
        ("", rest) => rest.to_string(),
        (home, "") => home.to_string(),
        (home, rest) => format!("{home}/{rest}"),
    };
    if path == "~" {
        return Ok(under_home(""));
    }
    if let Some(rest) = path.strip_prefix("~/") {
        return Ok(under_home(rest));
    }
    if path.starts_with('~') {
        return Err(Failure::Usage(anyhow::anyhow!(
            "{path}: another user's home (~user) is not expanded: give the path"
        )));
    }
    match path.strip_prefix('/') {
        Some(abs) => Ok(abs.to_string()),
        None => Ok(under_home(path)),
    }
}

/// A daemon a run reaches without ssh, and the key file it takes.
pub(super) struct Daemon<'a> {
    pub(super) host: &'a str,
    pub(super) port: u16,
    pub(super) key_file: Option<&'a std::path::Path>,
}

/// The configuration of a run's peer and the frame size it asks for:
/// through ssh the remote side started (its endpoint, the run's key,
/// frames fitted to its locked memory), else the `daemon`.
pub(super) fn peer(
    remote: Option<&SshRemote>,
    daemon: Daemon,
    block: u32,
) -> Result<(SendConfig, u32), Failure> {
    let Daemon {
        host,
        port,
        key_file,
    } = daemon;
    if let Some(r) = remote {
        let (host, port) = r.endpoint();
        let to = SendConfig {
            login: Some(r.login.clone()),
            ..SendConfig::to(host, port, r.key)
        };
        return Ok((to, fitted_block(r, block)?));
    }
    let file = key_file.expect("a daemon's run has a key file");
    let key = crate::cli::keys::load(file).map_err(Failure::Usage)?;
    Ok((SendConfig::to(host.to_string(), port, key), block))
}

/// The frame size to ask for where the remote's locked memory is limited
/// (an ssh login has 8 MiB on many systems, and no CAP_IPC_LOCK, and the
/// remote says what the user's other runs leave of it): the largest that
/// leaves enough registered buffers, said on stderr when lowered.
fn fitted_block(remote: &SshRemote, block: u32) -> Result<u32, Failure> {
    // A receiver sizes its buffers for 8 streams at most, however many.
    let want = crate::session::buffer_count(8, block, 4, 4);
    let (left, limit) = (remote.ready.memlock, remote.ready.memlock_limit);
    let fit = |block: u32, memory: Option<u64>| {
        crate::session::fit_buffers(want, block, memory, "--block").map(|f| f.block)
    };
    // The frames the whole limit fits, the same run after run, where what
    // the user's other runs leave still fits them; else smaller.
    let alone = fit(block, limit).unwrap_or(block);
    let chosen = match fit(alone, left) {
        Ok(b) if b == alone => Ok(alone),
        _ => fit(block, left),
    };
    let chosen = chosen.map_err(|e| {
        Failure::Run(anyhow::anyhow!(
            "{}: the remote side has {} KiB of locked memory left (RLIMIT_MEMLOCK of the ssh login, less what the user's other runs hold): {e}",
            remote.login,
            left.unwrap_or(0) >> 10
        ))
    })?;
    if chosen < block {
        eprintln!(
            "urmove: the remote side has {} KiB of locked memory left (RLIMIT_MEMLOCK of the ssh login, less what the user's other runs hold): frames of {} KiB (asked for {} KiB)",
            left.unwrap_or(0) >> 10,
            chosen >> 10,
            block >> 10
        );
    }
    Ok(chosen)
}

/// A session's error, explained where the remote's port was not reached.
pub(super) fn explained(
    remote: Option<&SshRemote>,
    e: crate::session::SessionError,
) -> crate::session::SessionError {
    match remote {
        Some(r) => r.explain(e),
        None => e,
    }
}

/// The end of a run through ssh: where it failed and ssh ended under it,
/// said so; then the remote side is let go (its channel closed).
pub(super) fn after(remote: Option<SshRemote>, ran: &Result<u8, Failure>) {
    if let Some(mut r) = remote {
        if !matches!(ran, Ok(0) | Ok(23)) {
            r.say_if_gone();
        }
    }
}

/// `urmove serve --stdio`: serve the client that started this process
/// through ssh. Never exits 255 (ssh's own failure).
pub fn serve(a: ServeArgs) -> Result<u8, Failure> {
    let log = crate::session::daemon::quiet_log();
    crate::session::daemon::serve_stdio(a.bind, log)
        .map(|()| 0)
        .map_err(|e| Failure::Run(anyhow::anyhow!("urmove serve: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_paths_read_as_scp_reads_them() {
        let p = |path| remote_path("/home/u", path).unwrap();
        assert_eq!(p("in"), "home/u/in");
        assert_eq!(p(""), "home/u");
        assert_eq!(p("in/"), "home/u/in/");
        assert_eq!(p("~"), "home/u");
        assert_eq!(p("~/a/b"), "home/u/a/b");
        assert_eq!(p("/data/x"), "data/x");
        assert_eq!(p("/"), "");
        assert_eq!(remote_path("/", "in").unwrap(), "in");
        assert!(remote_path("/home/u", "~root/x").is_err());
    }
}
