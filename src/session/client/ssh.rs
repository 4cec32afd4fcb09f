//! The remote side started through the system `ssh` (`urmove send SRC
//! user@host:DEST` with no key file): ssh runs `urmove serve --stdio`
//! there, the two sides open as `protocol::ssh` says (the session key
//! goes over the ssh channel, made fresh for this run), and the session
//! then runs on urmove's own TCP streams to the port the remote opened.
//! The remote lives as long as the ssh channel: dropping [`SshRemote`]
//! closes it.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::protocol::handshake::Key;
use crate::protocol::ssh::{Greeting, Mode, Opening, Ready, GREETING_MARK, OPENING_VERSION};
use crate::session::link::relay::{self, PipeOut};
use crate::session::SessionError;

/// How the remote side is reached.
#[derive(Debug, Clone)]
pub struct SshSpec {
    /// The ssh command's words (`-e`), e.g. `["ssh", "-p", "2222"]`.
    pub rsh: Vec<String>,
    /// What runs remotely instead of `urmove` (`--remote-path`), verbatim.
    pub remote_path: String,
    /// `[user@]host` as given.
    pub host: String,
    pub mode: Mode,
}

/// A remote side started and ready: where its session listens, the home
/// its relative paths start from, and the key of this run.
pub struct SshRemote {
    child: Child,
    /// ssh's stdin: the opening, then under `--through-ssh` the relay's
    /// frames; let go (closed) to end the remote side.
    stdin: PipeOut,
    /// Under `--through-ssh`, the loopback port the relay takes the
    /// session's connections on.
    relay_port: Option<u16>,
    stderr: Option<std::thread::JoinHandle<()>>,
    pub ready: Ready,
    pub key: Key,
    /// `[user@]host` as given.
    pub login: String,
}

/// The most a login shell may print before the greeting.
const NOISE_MAX: usize = 64 << 10;
/// How long the remote gets to leave once its channel is closed.
const LEAVE_WAIT: Duration = Duration::from_secs(10);

/// The words of the ssh command that runs `what` (`serve --stdio`) with
/// `spec.remote_path`: `spec.rsh`, options that keep a user's ssh_config
/// from adding a terminal, a remote command or forwardings (scp's own),
/// the host, and fixed words for the remote: no path, option or secret
/// of the run is on any command line.
pub fn command_line(spec: &SshSpec, what: &str) -> Vec<String> {
    let mut words = spec.rsh.clone();
    words.extend(
        [
            "-x",
            "-oPermitLocalCommand=no",
            "-oClearAllForwardings=yes",
            "-oRemoteCommand=none",
            "-oRequestTTY=no",
            "-oForwardAgent=no",
            "--",
        ]
        .map(String::from),
    );
    words.push(spec.host.clone());
    words.push(format!("{} {what}", spec.remote_path));
    words
}

/// Start the remote side and open the session's way to it.
pub fn start(spec: &SshSpec) -> Result<SshRemote, SessionError> {
    let words = command_line(spec, "serve --stdio");
    let mut child = Command::new(&words[0])
        .args(&words[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| SessionError::io(format!("starting {}", words[0]), e))?;
    let said = Arc::new(Mutex::new(String::new()));
    let stderr = child
        .stderr
        .take()
        .map(|e| relay_stderr(e, host_name(&spec.host), Arc::clone(&said)));
    let stdin: PipeOut = Arc::new(Mutex::new(
        (child.stdin.take()).map(|s| Box::new(s) as Box<dyn Write + Send>),
    ));
    let mut remote = SshRemote {
        child,
        stdin,
        relay_port: None,
        stderr,
        ready: Ready {
            addr: std::net::Ipv4Addr::UNSPECIFIED.into(),
            port: 0,
            home: String::new(),
            memlock: None,
            memlock_limit: None,
        },
        key: super::connect::random()?,
        login: spec.host.clone(),
    };
    let mut out = remote.child.stdout.take().expect("stdout is piped");
    if let Err(e) = remote.open(spec, &mut out) {
        return Err(remote.failed(spec, e, &said));
    }
    if spec.mode == Mode::ThroughSsh {
        let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| Ok((l.local_addr()?.port(), l)))
            .map_err(|e| SessionError::io("listening for the relay through ssh", e))?;
        remote.relay_port = Some(listener.0);
        let pipe = Arc::clone(&remote.stdin);
        std::thread::spawn(move || relay::run(out, pipe, relay::Side::Accept(listener.1)));
    }
    Ok(remote)
}

impl SshRemote {
    /// Greeting, opening, ready.
    fn open(&mut self, spec: &SshSpec, out: &mut ChildStdout) -> Result<(), SessionError> {
        let mut out = BufReader::new(out);
        let greeting = greeting(&mut out, &spec.host)?;
        if greeting.opening != OPENING_VERSION {
            return Err(not_started(format!(
                "{}: {} speaks the ssh opening {} (release {}), this urmove {} (release {}): install the same release on both hosts",
                spec.host, spec.remote_path, greeting.opening, greeting.release,
                OPENING_VERSION, env!("CARGO_PKG_VERSION")
            )));
        }
        let opening = Opening {
            mode: spec.mode,
            key: self.key,
        };
        let mut stdin = self.stdin.lock().unwrap_or_else(|p| p.into_inner());
        let stdin = stdin.as_mut().expect("stdin is piped");
        stdin
            .write_all(&opening.encode())
            .and_then(|()| stdin.flush())
            .map_err(|e| SessionError::io("sending the session key through ssh", e))?;
        self.ready = ready(&mut out)?;
        Ok(())
    }

    /// What to say when the opening failed: ssh's exit and what the
    /// remote said name the cause.
    fn failed(&mut self, spec: &SshSpec, e: SessionError, said: &Mutex<String>) -> SessionError {
        self.let_go();
        let status = wait_for(&mut self.child, LEAVE_WAIT);
        if let Some(h) = self.stderr.take() {
            let _ = h.join();
        }
        let said = said.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let code = status.and_then(|s| s.code());
        match why_not_started(spec, code, &said, &|| remote_version(spec)) {
            Some(why) => not_started(why),
            None => e,
        }
    }

    /// Say on stderr whether ssh ended under the run (killed, or its
    /// connection lost): the remote side ended with it.
    pub fn say_if_gone(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            eprintln!(
                "urmove: the ssh connection to {} ended during the run ({status}), and the remote side with it",
                self.login
            );
        }
    }

    /// The host's address and port of the session's connections (under
    /// `--through-ssh`, the relay's on this host's loopback).
    pub fn endpoint(&self) -> (String, u16) {
        match self.relay_port {
            Some(port) => (std::net::Ipv4Addr::LOCALHOST.to_string(), port),
            None => (self.ready.addr.to_string(), self.ready.port),
        }
    }

    /// `e` of a session through this remote, explained where it is a
    /// connection refused or timed out to the port the remote opened: a
    /// firewall there may admit only ssh.
    pub fn explain(&self, e: SessionError) -> SessionError {
        let port = format!("connecting to {}:{}", self.ready.addr, self.ready.port);
        match &e {
            SessionError::Io { context, .. } if self.relay_port.is_none() && context.starts_with(&port) => {
                not_started(format!(
                    "{}: {e}, a port urmove opened there; a firewall there may admit only ssh: --through-ssh carries the session inside the ssh connection",
                    self.login
                ))
            }
            _ => e,
        }
    }

    /// Close ssh's stdin: the remote side ends.
    fn let_go(&mut self) {
        self.stdin.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

impl Drop for SshRemote {
    /// Close the channel (the remote ends), wait for ssh, kill it past
    /// [`LEAVE_WAIT`].
    fn drop(&mut self) {
        self.let_go();
        if wait_for(&mut self.child, LEAVE_WAIT).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(h) = self.stderr.take() {
            let _ = h.join();
        }
        self.key.fill(0);
    }
}

/// ssh's exit status within `limit`, or None if it runs on.
fn wait_for(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            _ => return None,
        }
    }
}

/// A start that failed, saying why.
fn not_started(why: impl Into<String>) -> SessionError {
    SessionError::local(crate::protocol::control::ErrorCode::BadRequest, why)
}

/// `user@host` without the user.
fn host_name(host: &str) -> String {
    host.rsplit_once('@').map_or(host, |(_, h)| h).to_string()
}

/// The longest line of ssh's stderr relayed whole; the rest of a longer
/// one is left out.
const STDERR_LINE_MAX: usize = 4096;

/// ssh's stderr (and the remote's), each line printed as `host: line`
/// (at most [`STDERR_LINE_MAX`] bytes of it) and kept (the first 64 KiB)
/// for the reason of a failed start.
fn relay_stderr(
    e: std::process::ChildStderr,
    host: String,
    said: Arc<Mutex<String>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(e);
        let mut line = Vec::new();
        loop {
            line.clear();
            let Ok(n) = (&mut r)
                .take(STDERR_LINE_MAX as u64)
                .read_until(b'\n', &mut line)
            else {
                return;
            };
            if n == 0 {
                return;
            }
            if line.last() != Some(&b'\n') {
                skip_line(&mut r);
            }
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end();
            eprintln!("{host}: {text}");
            let mut s = said.lock().unwrap_or_else(|p| p.into_inner());
            if s.len() < NOISE_MAX {
                s.push_str(text);
                s.push('\n');
            }
        }
    })
}

/// Read past the rest of a line, keeping nothing of it.
fn skip_line(r: &mut impl BufRead) {
    loop {
        let Ok(buf) = r.fill_buf() else { return };
        if buf.is_empty() {
            return;
        }
        let (used, end) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        r.consume(used);
        if end {
            return;
        }
    }
}

/// The remote's greeting, past what a login shell printed first (warned
/// of once).
fn greeting(out: &mut impl BufRead, host: &str) -> Result<Greeting, SessionError> {
    let mut skipped = 0;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = out
            .take(crate::protocol::ssh::GREETING_MAX as u64)
            .read_until(b'\n', &mut line)
            .map_err(|e| SessionError::io("reading the remote's greeting", e))?;
        if n == 0 {
            return Err(not_started(format!(
                "{host}: the remote side ended before it greeted"
            )));
        }
        let text = String::from_utf8_lossy(&line);
        if let Some(g) = text
            .starts_with(GREETING_MARK)
            .then(|| Greeting::parse(&text))
        {
            return g.ok_or_else(|| {
                not_started(format!(
                    "{host}: a greeting this urmove cannot read: {text}"
                ))
            });
        }
        if skipped == 0 {
            eprintln!(
                "urmove: {host} printed before urmove started (a login script?), skipped: {}",
                text.trim_end()
            );
        }
        skipped += n;
        if skipped > NOISE_MAX {
            return Err(not_started(format!(
                "{host}: more than 64 KiB of output before urmove's greeting: is the remote shell's startup quiet?"
            )));
        }
    }
}

/// How long the remote may take to answer once the login is done and it
/// has greeted (its home on a slow filesystem, its state directory).
const READY_WAIT: Duration = Duration::from_secs(60);

/// The remote's ready record, within [`READY_WAIT`].
fn ready(out: &mut BufReader<&mut ChildStdout>) -> Result<Ready, SessionError> {
    use std::os::fd::AsRawFd;
    let until = Instant::now() + READY_WAIT;
    let mut b = Vec::new();
    let mut chunk = [0u8; 512];
    loop {
        match Ready::decode(&b) {
            Ok((r, _)) => return Ok(r),
            Err(crate::protocol::wire::DecodeError::Short { .. }) if b.len() < 16 << 10 => {}
            Err(e) => return Err(SessionError::Decode(e)),
        }
        let left = until.saturating_duration_since(Instant::now()).as_millis() as i32;
        let fd = out.get_ref().as_raw_fd();
        if out.buffer().is_empty() && !crate::datapath::sys::wait_readable(fd, left) {
            return Err(not_started(format!(
                "the remote side greeted but did not say where it listens within {} s",
                READY_WAIT.as_secs()
            )));
        }
        let n = out
            .read(&mut chunk)
            .map_err(|e| SessionError::io("reading where the remote listens", e))?;
        if n == 0 {
            return Err(not_started(
                "the remote side ended before it listened (its reason is above)",
            ));
        }
        b.extend_from_slice(&chunk[..n]);
    }
}

/// What `PATH --version` says on the remote host (a second ssh login,
/// only when the first found an urmove too old to serve).
fn remote_version(spec: &SshSpec) -> String {
    let words = command_line(spec, "--version");
    let child = Command::new(&words[0])
        .args(&words[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        return "its release unknown".into();
    };
    // One line is all a version takes: no more is read.
    let mut said = Vec::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out.take(256)).read_until(b'\n', &mut said);
    }
    let _ = child.kill();
    let _ = child.wait();
    match String::from_utf8_lossy(&said).trim() {
        "" => "its release unknown".into(),
        v => v.to_string(),
    }
}

/// Why the remote side did not start, from ssh's exit code and what was
/// said on stderr; None where neither tells.
/// `version` says what the remote urmove is, asked only for an older one.
fn why_not_started(
    spec: &SshSpec,
    code: Option<i32>,
    said: &str,
    version: &dyn Fn() -> String,
) -> Option<String> {
    let (host, path) = (&spec.host, &spec.remote_path);
    if said.contains("unrecognized subcommand 'serve'") {
        return Some(format!(
            "{host}: {path} is an older urmove ({}), without the ssh way (`urmove serve`; this one is release {}): install the same release there, or give --remote-path",
            version(),
            env!("CARGO_PKG_VERSION")
        ));
    }
    match code {
        Some(127) => Some(format!(
            "{host}: {path} was not found there (exit 127): ssh runs commands with the remote's default PATH (often /usr/local/bin:/usr/bin:/bin; ~/.profile is not read): install urmove on it, or give --remote-path /path/to/urmove"
        )),
        Some(126) => Some(format!(
            "{host}: {path} is there but cannot be run (exit 126): check its mode and the mount's noexec"
        )),
        Some(255) => Some(format!(
            "ssh to {host} failed (exit 255, ssh's reason above): urmove did not start there"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SshSpec {
        SshSpec {
            rsh: vec!["ssh".into(), "-p".into(), "2222".into()],
            remote_path: "bin/urmove".into(),
            host: "u@dtn2".into(),
            mode: Mode::Tcp,
        }
    }

    #[test]
    fn the_command_line_holds_fixed_words_and_no_secret() {
        let w = command_line(&spec(), "serve --stdio");
        assert_eq!(&w[..3], ["ssh", "-p", "2222"]);
        assert!(w.contains(&"-oRequestTTY=no".to_string()));
        assert_eq!(w[w.len() - 2..], ["u@dtn2", "bin/urmove serve --stdio"]);
    }

    #[test]
    fn a_greeting_is_found_past_a_login_shells_noise() {
        let text = format!("Welcome\nlast login\n{}", Greeting::ours().line());
        let g = greeting(&mut std::io::Cursor::new(text), "h").unwrap();
        assert_eq!(g, Greeting::ours());
        let e = greeting(&mut std::io::Cursor::new("motd only\n"), "h").unwrap_err();
        assert!(e.to_string().contains("ended before it greeted"), "{e}");
    }

    #[test]
    fn a_failed_start_is_named_by_its_cause() {
        let s = spec();
        let old = || "urmove 0.1.0".to_string();
        let why = |code, said| why_not_started(&s, code, said, &old).unwrap_or_default();
        assert!(why(Some(127), "bash: urmove: command not found").contains("was not found there"));
        assert!(why(Some(255), "Host key verification failed.").contains("ssh to u@dtn2 failed"));
        assert!(
            why(Some(2), "error: unrecognized subcommand 'serve'").contains("without the ssh way")
        );
        assert!(why_not_started(&s, Some(1), "", &old).is_none());
    }
}
