//! The ssh way attacked: a malicious or broken remote (an `-e` command
//! that plays one, no sshd needed) and strangers on the remote host
//! against `urmove serve --stdio` (tests/sshd.rs).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{stderr, urmove, wait_output_within};

/// An `-e` command that plays the remote with `body` (sh), whatever ssh's
/// words it is given; it leaves when the client closes its stdin.
fn fake_remote(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("fake-ssh");
    std::fs::write(&p, format!("#!/bin/sh\n{body}\ncat >/dev/null\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn send_through(dir: &Path, rsh: &Path) -> Command {
    let f = dir.join("f");
    std::fs::write(&f, b"data").unwrap();
    let mut c = urmove();
    c.arg("send")
        .arg("-e")
        .arg(rsh)
        .arg(&f)
        .arg("u@remote:dst")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// A remote that greets and then never says where it listens (a hung
/// serve, a stuck home directory) must not hold the client forever: the
/// login is done by then, so no password prompt can be what it waits for.
#[test]
fn a_remote_that_greets_and_never_answers_does_not_hold_the_client_forever() {
    let dir = tempfile::tempdir().unwrap();
    let rsh = fake_remote(
        dir.path(),
        "printf 'URMOVE-SERVE 1 release=0.3.0 protocol=1-99\\n'",
    );
    let child = send_through(dir.path(), &rsh).spawn().unwrap();
    let o = wait_output_within(child, Duration::from_secs(90)).unwrap_or_else(|e| {
        panic!(
            "the client still waits for the remote's ready record after 90 s; stderr: {}",
            String::from_utf8_lossy(&e)
        )
    });
    assert!(!o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("remote"), "{}", stderr(&o));
}

/// What the remote writes on stderr is relayed line by line: one endless
/// line (no newline) must not grow the client's memory without bound.
#[test]
fn an_endless_stderr_line_of_the_remote_does_not_grow_the_clients_memory() {
    let dir = tempfile::tempdir().unwrap();
    // 300 MB of one line, then silence (no greeting).
    let rsh = fake_remote(dir.path(), "head -c 300000000 /dev/zero | tr '\\0' a >&2");
    let mut child = send_through(dir.path(), &rsh).spawn().unwrap();
    let pid = child.id();
    let vm = |field: &str| -> Option<u64> {
        let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = s.lines().find(|l| l.starts_with(field))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    let mut most = 0;
    let until = Instant::now() + Duration::from_secs(40);
    while Instant::now() < until && child.try_wait().unwrap().is_none() {
        most = most.max(vm("VmHWM:").unwrap_or(0));
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        most < 100 << 10,
        "the client's resident memory reached {most} KiB on one stderr line of the remote"
    );
}

/// TCP connections from inside `ns` to `to`, from each of `sources`, as
/// many as the remote takes (at most `each` a source), held open.
fn connections_in_ns(
    ns: &str,
    sources: Vec<std::net::Ipv4Addr>,
    to: std::net::SocketAddr,
    each: usize,
) -> Vec<std::net::TcpStream> {
    let ns = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(&ns).unwrap();
        // SAFETY: setns on this thread only, with a namespace file we hold.
        let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
        let mut held = Vec::new();
        for src in sources {
            for _ in 0..each {
                let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                    .unwrap();
                sock.bind(&std::net::SocketAddr::new(src.into(), 0).into())
                    .unwrap();
                if sock.connect(&to.into()).is_err() {
                    break;
                }
                held.push(sock.into());
            }
        }
        held
    })
    .join()
    .unwrap()
}

/// Another user on the remote host (or anyone on its network) sees the
/// port serve opened (`ss -ltn`) and fills it with silent connections
/// from a few source addresses (127/8 is all theirs): the one client the
/// port was opened for must still get its session.
#[test]
fn strangers_holding_serves_port_do_not_deny_the_client_its_session() {
    let Some(s) = crate::sshd::Sshd::start_alone() else {
        return;
    };
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    // The real ssh, with the ready record held back 4 s: the stranger's
    // time to find the port (a slow link's round trips give as much).
    let rsh = fake_remote(
        dir.path(),
        &format!(
            "{} \"$@\" | {{ IFS= read -r l; printf '%s\\n' \"$l\"; sleep 4; cat; }}\nexit",
            s.rsh()
        ),
    );
    let f = dir.path().join("f");
    std::fs::write(&f, crate::util::noise(100_000, 3)).unwrap();
    let dest = format!("{}:{}/got", s.host(), s.home_rel());
    let mut c = urmove();
    c.args(["send", "--json", "-e"])
        .arg(&rsh)
        .args(["--remote-path", &s.remote_urmove()])
        .arg(&f)
        .arg(&dest)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let client = c.spawn().unwrap();
    let port = crate::sshd::first_port_within("serve never listened", || s.listening_ports());
    let sources = vec![s.addr(), [127, 0, 0, 1].into(), [127, 0, 0, 2].into()];
    let held = connections_in_ns(s.ns(), sources, (s.addr(), port).into(), 144);
    assert!(!held.is_empty(), "no connection to serve's port");
    let n = held.len();
    let o = wait_output_within(client, Duration::from_secs(120)).expect("the client hung");
    drop(held);
    assert!(
        o.status.success(),
        "{} silent strangers' connections denied the client: {}",
        n,
        stderr(&o)
    );
    assert_eq!(
        std::fs::read(s.home_dir().join("got")).unwrap(),
        std::fs::read(&f).unwrap()
    );
}

/// The threads of process `pid`.
fn threads(pid: u32) -> usize {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = s.lines().find(|l| l.starts_with("Threads:"));
    line.and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// The loopback ports process `pid` listens on.
fn loopback_ports_of(pid: u32) -> Vec<u16> {
    let o = Command::new("ss").args(["-ltnpH"]).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.contains(&format!("pid={pid},")) && l.contains("127.0.0.1:"))
        .filter_map(crate::sshd::ss_port)
        .collect()
}

/// Under `--through-ssh` the client's relay listens on this host's
/// loopback, open to every local user: each connection to it is carried
/// to the remote (two threads and a 64 KiB buffer each side, without a
/// limit). Another user's 400 held connections must not cost the client
/// hundreds of threads.
#[test]
fn strangers_on_the_clients_relay_port_cost_it_no_thread_each() {
    let Some(s) = crate::sshd::Sshd::start_alone() else {
        return;
    };
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let f = src.path().join("big");
    std::fs::write(&f, crate::util::noise(60 << 20, 7)).unwrap();
    let dest = format!("{}:{}/got", s.host(), s.home_rel());
    let mut c = urmove();
    c.args([
        "send",
        "--through-ssh",
        "--rate-limit",
        "6M",
        "-q",
        "-e",
        &s.rsh(),
    ])
    .args(["--remote-path", &s.remote_urmove()])
    .arg(&f)
    .arg(&dest)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let client = c.spawn().unwrap();
    let pid = client.id();
    let port = crate::sshd::first_port_within("no relay port", || loopback_ports_of(pid));
    std::thread::sleep(Duration::from_secs(1));
    let before = threads(pid);
    let held: Vec<_> = (0..400)
        .filter_map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).ok())
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let during = threads(pid);
    drop(held);
    let o = wait_output_within(client, Duration::from_secs(120)).expect("the client hung");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(s.home_dir().join("got")).unwrap(),
        std::fs::read(&f).unwrap()
    );
    assert!(
        during < before + 64,
        "400 strangers' connections to the relay port took the client from {before} to {during} threads"
    );
}
