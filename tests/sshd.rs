//! A real OpenSSH `sshd` in a network namespace, for the over-ssh tests
//! (issue 36): `Sshd::start()` makes a namespace joined to this one by a
//! veth pair, starts an sshd of its own there (its own host key, port 22 on
//! the namespace's address, key authentication only) for one shared test
//! user, and writes an ssh_config whose `Host srv` reaches it with a key of
//! its own and strict host-key checking. The user's instance directory
//! holds a copy of the urmove under test. Dropped, it kills what ran in the
//! namespace and removes the namespace and its files (the user stays: other
//! instances, in this process or another, share it).
//!
//! Instances are told apart by a slot (0..SLOTS), claimed by binding an
//! abstract Unix socket named after it: held while the instance lives, let
//! go by the kernel when the process dies however it dies, and seen by
//! every process of this network namespace. A slot's leftovers from a
//! killed run are removed when the slot is next claimed.

use std::fs;
use std::io::{ErrorKind, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::util::{have, is_root, stderr, stdout};

/// The test user all instances log in as.
const USER: &str = "urssh";
const HOME: &str = "/home/urssh";
/// Held while the user is made (parallel `useradd`s race); also taken by
/// scripts/ssh-netns.sh.
const USER_LOCK: &str = "/var/tmp/urmove-sshd-user.lock";
const SSHD: &str = "/usr/sbin/sshd";
const SLOTS: u32 = 256;

/// One sshd in its own namespace; see the module's comment.
pub struct Sshd {
    slot: u32,
    /// The slot's claim (an abstract socket), let go on drop.
    _claim: UnixListener,
    ns: String,
    addr: Ipv4Addr,
    /// Root's: keys, sshd_config, ssh_config, known_hosts, the sshd log.
    conf: PathBuf,
    /// The user's: `HOME/t-SLOT`, with the urmove copy in `bin/`.
    dir: PathBuf,
    uid: u32,
    sshd: Option<Child>,
    /// Held by [`Sshd::start_alone`]'s instances for their lives.
    _alone: Option<std::sync::MutexGuard<'static, ()>>,
}

/// One urmove run at a time as the test user in this process: the kernel
/// counts the user's locked memory (RLIMIT_MEMLOCK) together, so runs of
/// other tests would change the frames a run fits (and a resumed part
/// continues only with the frames it began with).
static USER_RUNS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Why this machine cannot run an sshd in a namespace, if it cannot.
fn missing() -> Option<&'static str> {
    if !is_root() {
        return Some("needs root");
    }
    if !Path::new(SSHD).exists() {
        return Some("needs /usr/sbin/sshd (openssh-server)");
    }
    for tool in ["ip", "ssh", "ssh-keygen", "useradd", "ss"] {
        if !have(tool) {
            return Some("needs ip, ss (iproute2), ssh, ssh-keygen (openssh-client) and useradd");
        }
    }
    let list = Command::new("ip").args(["netns", "list"]).output();
    if !list.is_ok_and(|o| o.status.success()) {
        return Some("`ip netns` does not work here");
    }
    None
}

/// Run `cmd`, panicking with its stderr unless it succeeds.
fn must(mut cmd: impl std::borrow::BorrowMut<Command>) -> Output {
    let cmd = cmd.borrow_mut();
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(o.status.success(), "{cmd:?} failed: {}", stderr(&o));
    o
}

fn cmd(words: &[&str]) -> Command {
    let mut c = Command::new(words[0]);
    c.args(&words[1..]);
    c
}

/// Run `cmd` ignoring how it ends (cleanup of what may not exist).
fn quietly(words: &[&str]) {
    let _ = cmd(words)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Slot `slot`'s claim, unless another instance holds it.
fn try_claim(slot: u32) -> Option<UnixListener> {
    let name = format!("urmove-sshd-slot-{slot}");
    let addr = UnixAddr::from_abstract_name(name.as_bytes()).expect("an abstract name");
    UnixListener::bind_addr(&addr).ok()
}

/// Claim the first free slot from a start that differs between processes.
fn claim() -> (u32, UnixListener) {
    let start = std::process::id() % SLOTS;
    (0..SLOTS)
        .map(|i| (start + i) % SLOTS)
        .find_map(|slot| Some((slot, try_claim(slot)?)))
        .unwrap_or_else(|| panic!("all {SLOTS} sshd slots are taken"))
}

/// Remove what killed runs left in slots no instance holds now.
fn sweep() {
    for slot in 0..SLOTS {
        let ns = Path::new("/run/netns").join(format!("urssh-{slot}"));
        let conf = Path::new(&format!("/var/tmp/urmove-sshd-{slot}")).to_path_buf();
        if ns.exists() || conf.exists() {
            if let Some(claim) = try_claim(slot) {
                drop(Sshd::at(slot, claim));
            }
        }
    }
}

/// The test user (made once, under a file lock), its `.ssh`, and its uid.
fn ensure_user() -> u32 {
    let lock = fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(USER_LOCK)
        .expect("opening the user lock");
    use std::os::fd::AsRawFd;
    // SAFETY: flock on an fd this function owns; the lock ends when
    // `lock` is closed at the end of the function.
    let r = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(
        r,
        0,
        "flock {USER_LOCK}: {}",
        std::io::Error::last_os_error()
    );
    let known = Command::new("id").args(["-u", USER]).output().unwrap();
    if !known.status.success() {
        must(cmd(&["useradd", "-m", "-d", HOME, "-s", "/bin/bash", USER]));
    }
    // useradd leaves the password `!` (locked): with UsePAM no, sshd then
    // refuses even a key.
    must(cmd(&["usermod", "-p", "*", USER]));
    let ssh_dir = format!("{HOME}/.ssh");
    fs::create_dir_all(&ssh_dir).unwrap();
    must(cmd(&["chown", &format!("{USER}:{USER}"), HOME, &ssh_dir]));
    fs::set_permissions(&ssh_dir, fs::Permissions::from_mode(0o700)).unwrap();
    let o = must(cmd(&["id", "-u", USER]));
    stdout(&o).trim().parse().expect("a uid")
}

fn keygen(path: &Path) {
    must(
        Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "urmove-test", "-f"])
            .arg(path),
    );
}

/// `TYPE BASE64` of a public key file (its comment dropped).
fn public_key(path: &Path) -> String {
    let text = fs::read_to_string(path.with_extension("pub")).unwrap();
    let words: Vec<&str> = text.split_whitespace().take(2).collect();
    words.join(" ")
}

/// Send SIGKILL to each of `pids` (gone ones are skipped).
fn kill_all(pids: &[u32]) {
    if !pids.is_empty() {
        let mut c = Command::new("kill");
        c.arg("-KILL").args(pids.iter().map(u32::to_string));
        let _ = c.stderr(Stdio::null()).status();
    }
}

/// Whether `pid` runs (exists and is not a zombie).
fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        let state = s
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next());
        state != Some("Z")
    })
}

/// The processes in namespace `ns` (`ip netns pids`).
fn ns_pids(ns: &str) -> Vec<u32> {
    if !Path::new("/run/netns").join(ns).exists() {
        return Vec::new();
    }
    let o = Command::new("ip").args(["netns", "pids", ns]).output();
    o.map(|o| {
        stdout(&o)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    })
    .unwrap_or_default()
}

/// One process's (uid, state, command line with spaces, executable).
fn process(pid: u32) -> Option<(u32, String, String, PathBuf)> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .map(str::to_string)
    };
    let uid = field("Uid:")?.parse().ok()?;
    let state = field("State:")?;
    let raw = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let line = String::from_utf8_lossy(&raw).replace('\0', " ");
    let exe = fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
    Some((uid, state, line.trim_end().to_string(), exe))
}

/// Every pid in /proc.
fn all_pids() -> Vec<u32> {
    fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

impl Sshd {
    /// A running sshd in a namespace of its own, or `None` (the reason
    /// printed) where this machine cannot make one; a setup that fails
    /// where it could panics (and what was made is removed).
    /// [`Sshd::start`], and no other instance started so runs at once in
    /// this process (see [`USER_RUNS`]).
    pub fn start_alone() -> Option<Sshd> {
        let alone = USER_RUNS.lock().unwrap_or_else(|p| p.into_inner());
        let mut s = Sshd::start()?;
        s._alone = Some(alone);
        Some(s)
    }

    pub fn start() -> Option<Sshd> {
        if let Some(why) = missing() {
            eprintln!("sshd harness skipped: {why}");
            return None;
        }
        sweep();
        let (slot, claim) = claim();
        let mut s = Sshd::at(slot, claim);
        // A killed run's leftovers in this slot.
        s.teardown();
        s.uid = ensure_user();
        s.network();
        s.files();
        s.run_sshd();
        Some(s)
    }

    /// The instance of `slot` (nothing made yet).
    fn at(slot: u32, claim: UnixListener) -> Sshd {
        Sshd {
            slot,
            _claim: claim,
            ns: format!("urssh-{slot}"),
            addr: Ipv4Addr::new(10, 76, (slot / 64) as u8, ((slot % 64) * 4 + 2) as u8),
            conf: PathBuf::from(format!("/var/tmp/urmove-sshd-{slot}")),
            dir: PathBuf::from(format!("{HOME}/t-{slot}")),
            uid: 0,
            sshd: None,
            _alone: None,
        }
    }

    fn veth(&self) -> String {
        format!("urssh{}h", self.slot)
    }

    fn authorized_keys(&self) -> PathBuf {
        PathBuf::from(format!("{HOME}/.ssh/ak-{}", self.slot))
    }

    /// The namespace, the veth pair, a /30 between them.
    fn network(&self) {
        let [a, b, c, d] = self.addr.octets();
        let outside = format!("{}/30", Ipv4Addr::new(a, b, c, d - 1));
        let inside = format!("{}/30", self.addr);
        let (ns, veth) = (self.ns.as_str(), self.veth());
        must(cmd(&["ip", "netns", "add", ns]));
        must(
            cmd(&["ip", "link", "add", &veth, "type", "veth"])
                .args(["peer", "name", "eth0", "netns", ns]),
        );
        must(cmd(&["ip", "addr", "add", &outside, "dev", &veth]));
        must(cmd(&["ip", "link", "set", &veth, "up"]));
        must(cmd(&[
            "ip", "-n", ns, "addr", "add", &inside, "dev", "eth0",
        ]));
        must(cmd(&["ip", "-n", ns, "link", "set", "eth0", "up"]));
        must(cmd(&["ip", "-n", ns, "link", "set", "lo", "up"]));
    }

    /// Keys, configs, the user's instance directory and urmove copy.
    fn files(&self) {
        let conf = &self.conf;
        fs::create_dir_all(conf).unwrap();
        fs::set_permissions(conf, fs::Permissions::from_mode(0o700)).unwrap();
        for k in ["host_key", "client_key", "other_key"] {
            keygen(&conf.join(k));
        }
        let c = conf.display();
        let sshd_config = format!(
            "Port 22\nListenAddress {addr}\nHostKey {c}/host_key\nPidFile {c}/sshd.pid\n\
             UsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             PubkeyAuthentication yes\nPermitRootLogin no\nAuthorizedKeysFile {ak}\n\
             AllowUsers {USER}\nStrictModes yes\nLogLevel VERBOSE\nMaxStartups 64:30:128\n\
             Subsystem sftp internal-sftp\n",
            addr = self.addr,
            ak = self.authorized_keys().display(),
        );
        fs::write(conf.join("sshd_config"), sshd_config).unwrap();
        let ssh_config = format!(
            "Host srv\n  HostName {addr}\n  User {USER}\n  IdentityFile {c}/client_key\n\
             \x20 IdentitiesOnly yes\n  UserKnownHostsFile {c}/known_hosts\n\
             \x20 GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n\
             \x20 BatchMode yes\n  ConnectTimeout 10\n",
            addr = self.addr,
        );
        fs::write(conf.join("ssh_config"), ssh_config).unwrap();
        self.write_known_hosts("host_key");
        let ak = self.authorized_keys();
        fs::write(&ak, public_key(&conf.join("client_key")) + "\n").unwrap();
        fs::set_permissions(&ak, fs::Permissions::from_mode(0o600)).unwrap();
        let bin = self.dir.join("bin");
        fs::create_dir_all(&bin).unwrap();
        fs::copy(env!("CARGO_BIN_EXE_urmove"), bin.join("urmove")).expect("copying urmove");
        for p in [&self.dir, &bin, &bin.join("urmove")] {
            fs::set_permissions(p, fs::Permissions::from_mode(0o755)).unwrap();
        }
        must(cmd(&["chown", &format!("{USER}:{USER}")]).arg(&ak));
        self.chown_to_user(&self.dir);
    }

    fn write_known_hosts(&self, key: &str) {
        let line = format!("{} {}\n", self.addr, public_key(&self.conf.join(key)));
        fs::write(self.conf.join("known_hosts"), line).unwrap();
    }

    /// sshd in the namespace, in the foreground (our child); ready once it
    /// has written its pid file (it does so after it listens).
    fn run_sshd(&mut self) {
        let config = self.conf.join("sshd_config");
        fs::create_dir_all("/run/sshd").unwrap();
        must(Command::new(SSHD).arg("-t").arg("-f").arg(&config));
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns, SSHD, "-D", "-f"])
            .arg(&config)
            .arg("-E")
            .arg(self.conf.join("sshd.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("starting sshd");
        let pid = child.id();
        self.sshd = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let written = fs::read_to_string(self.conf.join("sshd.pid")).unwrap_or_default();
            if written.trim().parse::<u32>() == Ok(pid) {
                return;
            }
            let ended = self.sshd.as_mut().unwrap().try_wait().unwrap();
            if ended.is_some() || Instant::now() > deadline {
                panic!(
                    "sshd did not start ({ended:?}); its log:\n{}",
                    self.sshd_log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kill what runs in the namespace and the instance's urmove copy,
    /// remove the namespace (and with it the veth pair) and the files.
    fn teardown(&mut self) {
        let dir = self.dir.display().to_string();
        let mine = |pid: &u32| {
            process(*pid)
                .is_some_and(|(_, _, line, exe)| line.contains(&dir) || exe.starts_with(&self.dir))
        };
        let mut pids = ns_pids(&self.ns);
        pids.extend(all_pids().into_iter().filter(mine));
        kill_all(&pids);
        if let Some(mut c) = self.sshd.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while pids.iter().any(|&p| alive(p)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        quietly(&["ip", "netns", "del", &self.ns]);
        quietly(&["ip", "link", "del", &self.veth()]);
        let _ = fs::remove_dir_all(&self.dir);
        let _ = fs::remove_dir_all(&self.conf);
        let _ = fs::remove_file(self.authorized_keys());
    }

    /// The `-e` value: `ssh -F CONFIG`.
    pub fn rsh(&self) -> String {
        format!("ssh -F {}", self.conf.join("ssh_config").display())
    }

    /// The host alias in the ssh_config.
    pub fn host(&self) -> &str {
        "srv"
    }

    /// The user's copy of the urmove under test (for `--remote-path`).
    pub fn remote_urmove(&self) -> String {
        self.dir.join("bin/urmove").display().to_string()
    }

    /// The instance's directory in the user's home (owned by the user):
    /// where tests put and compare remote files. The user's home itself
    /// is shared by all instances.
    pub fn home_dir(&self) -> PathBuf {
        self.dir.clone()
    }

    /// `home_dir()` relative to the user's home (`t-SLOT`), for paths
    /// that test the remote side's home-relative names.
    pub fn home_rel(&self) -> String {
        format!("t-{}", self.slot)
    }

    pub fn user(&self) -> &str {
        USER
    }

    /// The test user's uid.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// sshd's address, in the namespace.
    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    pub fn ns(&self) -> &str {
        &self.ns
    }

    /// The listening sshd's pid.
    pub fn sshd_pid(&self) -> u32 {
        self.sshd.as_ref().map_or(0, Child::id)
    }

    /// sshd's log (LogLevel VERBOSE).
    pub fn sshd_log(&self) -> String {
        fs::read_to_string(self.conf.join("sshd.log")).unwrap_or_default()
    }

    /// `ssh -F CONFIG` with no host yet.
    pub fn ssh_cmd(&self) -> Command {
        let mut c = Command::new("ssh");
        c.arg("-F").arg(self.conf.join("ssh_config"));
        c
    }

    /// `ssh srv REMOTE_COMMAND`, its output (stdin: /dev/null).
    pub fn ssh(&self, remote: &str) -> Output {
        let mut c = self.ssh_cmd();
        c.args([self.host(), remote]).stdin(Stdio::null());
        crate::util::output_within(c, Duration::from_secs(60))
    }

    /// `ip netns exec NS ARGS...`, its output.
    pub fn exec_in_ns(&self, args: &[&str]) -> Output {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns]).args(args);
        c.output().expect("ip netns exec")
    }

    /// From now on the client's known_hosts holds another key for the
    /// address: the next ssh fails host-key checking.
    pub fn known_hosts_mismatch(&self) {
        self.write_known_hosts("other_key");
    }

    /// The namespace admits TCP port 22 only: others are answered with a
    /// reset (a refused connect, not a hang).
    pub fn firewall_only_ssh(&self) {
        let rules = "table inet urfw {\n  chain input {\n    type filter hook input priority 0; policy drop;\n    \
                     iif \"lo\" accept\n    ct state established,related accept\n    \
                     tcp dport 22 accept\n    meta l4proto tcp reject with tcp reset\n  }\n}\n";
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.ns, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running nft (apt-get install nftables)");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(rules.as_bytes())
            .unwrap();
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "nft failed: {}", stderr(&o));
    }

    /// The user's live processes of this instance: those running its
    /// urmove copy or naming its directory, and those in its namespace
    /// whose command line names urmove (zombies left out).
    pub fn remote_processes(&self) -> Vec<(u32, String)> {
        let in_ns = ns_pids(&self.ns);
        let dir = self.dir.display().to_string();
        let mut out: Vec<(u32, String)> = all_pids()
            .into_iter()
            .filter_map(|pid| {
                let (uid, state, line, exe) = process(pid)?;
                let here = line.contains(&dir)
                    || exe.starts_with(&self.dir)
                    || (in_ns.contains(&pid) && line.contains("urmove"));
                (uid == self.uid && state != "Z" && here).then_some((pid, line))
            })
            .collect();
        out.sort();
        out
    }

    /// The TCP ports listened on in the namespace, sshd's 22 left out.
    pub fn listening_ports(&self) -> Vec<u16> {
        let o = self.exec_in_ns(&["ss", "-ltnH"]);
        assert!(o.status.success(), "ss failed: {}", stderr(&o));
        let mut ports: Vec<u16> = stdout(&o)
            .lines()
            .filter_map(ss_port)
            .filter(|&p| p != 22)
            .collect();
        ports.sort_unstable();
        ports.dedup();
        ports
    }

    /// Give `path` (recursively) to the user, for trees placed remotely.
    pub fn chown_to_user(&self, path: &Path) {
        must(cmd(&["chown", "-R", &format!("{USER}:{USER}")]).arg(path));
    }
}

/// The local port of a line of `ss -ltn` output.
pub fn ss_port(line: &str) -> Option<u16> {
    line.split_whitespace()
        .nth(3)?
        .rsplit(':')
        .next()?
        .parse()
        .ok()
}

/// The first of the ports `ports()` gives, waited for up to 30 s (`what`
/// names it when none comes).
pub fn first_port_within(what: &str, ports: impl Fn() -> Vec<u16>) -> u16 {
    let until = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(&p) = ports().first() {
            return p;
        }
        assert!(std::time::Instant::now() < until, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Connect to `addr:port` from this (the outer) namespace.
fn connect(addr: Ipv4Addr, port: u16) -> std::io::Result<TcpStream> {
    TcpStream::connect_timeout(&SocketAddr::from((addr, port)), Duration::from_secs(5))
}

#[test]
fn ssh_reaches_the_test_user_and_runs_the_installed_urmove() {
    let Some(s) = Sshd::start() else { return };
    // The -e value as a client splits it into words.
    let rsh = s.rsh();
    let words: Vec<&str> = rsh.split_whitespace().collect();
    let o = cmd(&words).args([s.host(), "true"]).output().unwrap();
    assert!(
        o.status.success(),
        "{rsh} srv true: {}\n{}",
        stderr(&o),
        s.sshd_log()
    );
    assert!(
        o.status.success(),
        "ssh srv true: {}\n{}",
        stderr(&o),
        s.sshd_log()
    );
    let o = s.ssh("id -un; pwd; echo $SSH_CONNECTION");
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..2], [s.user(), HOME], "{out}");
    let conn: Vec<&str> = lines[2].split(' ').collect();
    assert_eq!(conn[2], s.addr().to_string(), "{out}");
    assert_eq!(conn[3], "22", "{out}");
    let o = s.ssh(&format!("{} --version", s.remote_urmove()));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("urmove "), "{}", stdout(&o));
    // The copy is the user's, and the instance directory too.
    let o = s.ssh(&format!(
        "test -O {} && test -O {}",
        s.remote_urmove(),
        s.home_rel()
    ));
    assert!(o.status.success(), "not the user's: {}", stderr(&o));
    assert!(s.listening_ports().is_empty(), "{:?}", s.listening_ports());
}

#[test]
fn a_changed_host_key_is_refused_as_ssh_refuses_it() {
    let Some(s) = Sshd::start() else { return };
    assert!(s.ssh("true").status.success());
    s.known_hosts_mismatch();
    let o = s.ssh("true");
    assert_eq!(o.status.code(), Some(255), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("Host key verification failed"),
        "{}",
        stderr(&o)
    );
}

/// A listener on `port` in the namespace (python3), until killed.
fn listener_in_ns(s: &Sshd, port: u16) -> Child {
    let code = format!(
        "import socket,time\ns=socket.socket()\ns.bind(('{}',{port}))\ns.listen()\ntime.sleep(120)",
        s.addr()
    );
    let child = Command::new("ip")
        .args(["netns", "exec", s.ns(), "python3", "-c", &code])
        .spawn()
        .expect("python3");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !s.listening_ports().contains(&port) {
        assert!(
            Instant::now() < deadline,
            "the listener on {port} did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

#[test]
fn the_ssh_only_firewall_refuses_other_ports_and_lets_ssh_in() {
    let Some(s) = Sshd::start() else { return };
    if !have("nft") || !have("python3") {
        eprintln!("skipped: needs nft (nftables) and python3");
        return;
    }
    let port = 8100 + (s.slot as u16 % 100) * 7;
    let mut l = listener_in_ns(&s, port);
    assert_eq!(s.listening_ports(), [port]);
    let before = connect(s.addr(), port);
    assert!(before.is_ok(), "no firewall yet: {before:?}");
    s.firewall_only_ssh();
    let after = connect(s.addr(), port);
    let _ = l.kill();
    let _ = l.wait();
    let Err(err) = after else {
        panic!("the firewall let port {port} through")
    };
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err}");
    let o = s.ssh("id -un");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), USER);
}

#[test]
fn two_instances_at_once_are_apart() {
    let (Some(a), Some(b)) = (Sshd::start(), Sshd::start()) else {
        return;
    };
    assert_ne!(a.ns(), b.ns());
    assert_ne!(a.addr(), b.addr());
    assert_ne!(a.home_dir(), b.home_dir());
    let (oa, ob) = std::thread::scope(|sc| {
        let ta = sc.spawn(|| a.ssh("hostname -I; cat /proc/self/cmdline >/dev/null"));
        let tb = sc.spawn(|| b.ssh("hostname -I"));
        (ta.join().unwrap(), tb.join().unwrap())
    });
    assert!(
        oa.status.success() && ob.status.success(),
        "{}{}",
        stderr(&oa),
        stderr(&ob)
    );
    assert_eq!(stdout(&oa).trim(), a.addr().to_string());
    assert_eq!(stdout(&ob).trim(), b.addr().to_string());
    // A remote process of one instance is that instance's only.
    let script = format!("sleep 60; : {}", a.home_dir().display());
    let mut held = a.ssh_cmd();
    held.args([a.host(), "sh", "-c", &format!("'{script}'")]);
    let mut held = held.stdin(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while a.remote_processes().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let procs = a.remote_processes();
    assert!(
        procs.iter().any(|(_, l)| l.contains("sleep 60")),
        "{procs:?}"
    );
    assert!(
        b.remote_processes().is_empty(),
        "{:?}",
        b.remote_processes()
    );
    // Killing the local ssh leaves it running remotely (it reads no stdin):
    // the harness's drop must end it.
    let _ = held.kill();
    let _ = held.wait();
    assert!(!a.remote_processes().is_empty());
}

#[test]
fn nothing_is_left_after_a_drop() {
    let Some(s) = Sshd::start() else { return };
    let script = format!("sleep 300; : {}", s.home_dir().display());
    let mut held = s.ssh_cmd();
    held.args([s.host(), "sh", "-c", &format!("'{script}'")]);
    let mut held = held.stdin(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.remote_processes().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let remote: Vec<u32> = s.remote_processes().iter().map(|p| p.0).collect();
    assert!(!remote.is_empty());
    let in_ns = ns_pids(s.ns());
    assert!(in_ns.contains(&s.sshd_pid()), "{in_ns:?}");
    let (ns, dir, conf, veth) = (s.ns.clone(), s.home_dir(), s.conf.clone(), s.veth());
    let ak = s.authorized_keys();
    drop(s);
    let _ = held.kill();
    let _ = held.wait();
    for pid in remote.iter().chain(&in_ns) {
        assert!(!alive(*pid), "{pid} still runs: {:?}", process(*pid));
    }
    assert!(!Path::new("/run/netns").join(&ns).exists(), "{ns} is left");
    let links = Command::new("ip").args(["-o", "link"]).output().unwrap();
    assert!(
        !stdout(&links).contains(&format!(" {veth}@")),
        "{veth} is left"
    );
    for p in [&dir, &conf, &ak] {
        assert!(!p.exists(), "{} is left", p.display());
    }
}
