//! `urmove serve --stdio`: the receiver a client starts through ssh
//! (`urmove send SRC user@host:DEST`). It greets on stdout, takes the
//! session key on stdin (`protocol::ssh`), listens on the address the ssh
//! connection arrived on, says where, and serves the client's sessions as
//! the daemon would, with the ssh user's rights and root `/`. It lives as
//! long as its stdin: when the client or its ssh is gone, so is it.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::protocol::ssh::{Greeting, Mode, Opening, Ready, OPENING_LEN};

use super::config::{Limits, OnlyFrom, RecvConfig};
use super::log::{Level, Log};
use super::stats::DaemonStats;
use crate::session::SessionError;

/// How long a session still running when stdin ends gets to finish (its
/// client closed ssh just after the summary) before the process exits.
const LAST_WORDS: Duration = Duration::from_secs(2);

/// Serve one client over ssh until its stdin ends. `bind` is the address
/// to listen on where `$SSH_CONNECTION` does not give one.
pub fn serve_stdio(bind: Option<IpAddr>, log: Log) -> Result<(), SessionError> {
    let io = |what: &'static str| move |e| SessionError::io(what, e);
    // A dead sshd or wrapper ends this process, even with stdin held open.
    if !crate::datapath::sys::die_with_parent() {
        return Ok(());
    }
    // Unbuffered: under --through-ssh both carry the relay's frames.
    let (mut stdin, mut out) = std_pipes().map_err(io("stdin and stdout"))?;
    out.write_all(Greeting::ours().line().as_bytes())
        .map_err(io("writing the greeting"))?;
    let mut b = [0u8; OPENING_LEN];
    stdin
        .read_exact(&mut b)
        .map_err(io("reading the client's opening"))?;
    let opening = Opening::decode(&b).map_err(SessionError::Decode)?;
    b.fill(0);
    let addr = match opening.mode {
        Mode::ThroughSsh => Some(IpAddr::from(std::net::Ipv4Addr::LOCALHOST)),
        Mode::Tcp => bind.or_else(ssh_server_addr),
    };
    let addr = addr.ok_or_else(|| {
        SessionError::Protocol(
            "no address to listen on: $SSH_CONNECTION is not set (not started by sshd); give --bind ADDR".into(),
        )
    })?;
    let home = home()?;
    // Connections only from the ssh client, or under --through-ssh from
    // this process's relay: strangers who see the port take no slot.
    let only_from = match opening.mode {
        Mode::ThroughSsh => Some(OnlyFrom::ThisProcess),
        Mode::Tcp => ssh_client_addr().map(OnlyFrom::Address),
    };
    let cfg = RecvConfig {
        only_from,
        ..config(SocketAddr::new(addr, 0), opening.key)
    };
    let stats = Arc::new(DaemonStats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut answered = Ok(());
    let mut pipes = Some((stdin, out));
    super::serve(cfg, &stop, log, Arc::clone(&stats), &mut |bound| {
        let Some((stdin, mut out)) = pipes.take() else {
            return;
        };
        let limit = crate::session::memlock_budget();
        let ready = Ready {
            addr: bound.ip(),
            port: bound.port(),
            home: home.to_string_lossy().into_owned(),
            // What this user's other processes (another run) have pinned
            // is not this run's: the kernel counts the limit per user.
            memlock: limit.map(|l| l.saturating_sub(crate::datapath::sys::pinned_by_this_user())),
            memlock_limit: limit,
        };
        answered = out.write_all(&ready.encode());
        let carry = (opening.mode == Mode::ThroughSsh).then_some((bound, out));
        until_stdin_ends(stdin, carry, Arc::clone(&stop), Arc::clone(&stats));
    })?;
    answered.map_err(io("answering the client"))
}

/// This process's stdin and stdout, unbuffered (duplicated descriptors).
fn std_pipes() -> std::io::Result<(std::fs::File, std::fs::File)> {
    use std::os::fd::AsFd;
    let stdin = std::io::stdin().as_fd().try_clone_to_owned()?;
    let stdout = std::io::stdout().as_fd().try_clone_to_owned()?;
    Ok((stdin.into(), stdout.into()))
}

/// The local address of the ssh connection this process was started
/// through (`$SSH_CONNECTION`'s third word): the client reached it.
fn ssh_server_addr() -> Option<IpAddr> {
    ssh_connection_word(2)
}

/// The ssh client's address (`$SSH_CONNECTION`'s first word): the
/// session's connections come from there.
fn ssh_client_addr() -> Option<IpAddr> {
    ssh_connection_word(0)
}

fn ssh_connection_word(n: usize) -> Option<IpAddr> {
    let c = std::env::var("SSH_CONNECTION").ok()?;
    c.split_whitespace().nth(n)?.parse().ok()
}

/// The directory relative paths start from, as scp's: the user's home
/// (sshd starts the command there), without links.
fn home() -> Result<PathBuf, SessionError> {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .map_or_else(std::env::current_dir, Ok)
        .and_then(std::fs::canonicalize)
        .map_err(|e| SessionError::io("the home directory", e))?;
    Ok(home)
}

/// A daemon's configuration for one ssh user's sessions: root `/`, the
/// session key, one session at a time, the daemon's safety defaults, no
/// sweeping of old parts.
fn config(listen: SocketAddr, key: crate::protocol::handshake::Key) -> RecvConfig {
    let state_dir = crate::session::link::secret::default_state_dir();
    RecvConfig {
        limits: Limits {
            sessions: 1,
            connections: 256,
            ..Limits::default()
        },
        over_ssh: true,
        ..RecvConfig::private(listen, PathBuf::from("/"), key, state_dir)
    }
}

/// A thread that ends this process when stdin ends (the client or its ssh
/// is gone): sessions stop, one still running gets [`LAST_WORDS`], then
/// the process exits. What was cut off keeps its parts and journals for
/// the next run to resume. Under `--through-ssh` (`carry`: the listener's
/// address and stdout) stdin carries the session's connections meanwhile.
fn until_stdin_ends(
    mut stdin: std::fs::File,
    carry: Option<(SocketAddr, std::fs::File)>,
    stop: Arc<AtomicBool>,
    stats: Arc<DaemonStats>,
) {
    use crate::session::link::relay;
    std::thread::spawn(move || {
        match carry {
            Some((bound, out)) => {
                let out: relay::PipeOut = Arc::new(std::sync::Mutex::new(Some(Box::new(out))));
                relay::run(stdin, out, relay::Side::Connect(bound));
            }
            None => {
                let mut sink = [0u8; 256];
                while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            }
        }
        stop.store(true, Ordering::Release);
        let until = Instant::now() + LAST_WORDS;
        while stats.sessions_active.load(Ordering::Acquire) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::process::exit(0);
    });
}

/// The log of a serve: warnings and errors on stderr, which ssh carries
/// to the client.
pub fn quiet_log() -> Log {
    Arc::new(|level, m: &str| {
        if matches!(level, Level::Warn | Level::Error) {
            let _ = writeln!(std::io::stderr(), "{m}");
        }
    })
}
