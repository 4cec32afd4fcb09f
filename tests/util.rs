//! Helpers shared by the integration tests: the binary, temporary
//! directories, loop-mounted filesystems, kernel I/O counters, and the
//! daemon's protocol spoken by hand.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use urmove::protocol::control::{
    body_len, decode, decode_body, encode, Direction, ErrorCode, Message, SessionRequest,
};
use urmove::protocol::handshake::{parse_key, stream_proof, ClientHandshake, Key, SessionKeys};
use urmove::protocol::manifest::Entry;
use urmove::protocol::wire::DecodeError;
pub use urmove::session::link::conn::Control;

/// Skip a test with a printed reason when the machine cannot run it.
#[macro_export]
macro_rules! require {
    ($cond:expr, $why:expr) => {
        if !$cond {
            eprintln!("skipped: {}", $why);
            return;
        }
    };
}

pub fn urmove() -> Command {
    urmove_at(Path::new(env!("CARGO_BIN_EXE_urmove")))
}

/// Another build of urmove (a previous release's, tests/compat.rs).
pub fn urmove_at(bin: &Path) -> Command {
    Command::new(bin)
}

/// Run urmove with `args`, returning its output.
pub fn run(args: &[&str]) -> Output {
    urmove().args(args).output().expect("running urmove")
}

/// `urmove keygen KEY`, which must succeed (its line kept to itself).
pub fn keygen(key: &Path) {
    keygen_with(Path::new(env!("CARGO_BIN_EXE_urmove")), key)
}

/// [`keygen`] by the urmove at `bin`.
pub fn keygen_with(bin: &Path, key: &Path) {
    let o = urmove_at(bin)
        .arg("keygen")
        .arg(key)
        .output()
        .expect("running urmove");
    assert!(o.status.success(), "keygen: {}", stderr(&o));
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Parse stdout as exactly one JSON document.
pub fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}):\n{}\nstderr: {}",
            stdout(o),
            stderr(o)
        )
    })
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|u| u.split_whitespace().next() == Some("0"))
        })
        .unwrap_or(false)
}

pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Random bytes from a simple generator (deterministic per seed).
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect()
}

static LOOP_SETUP: Mutex<()> = Mutex::new(());

fn sh(cmd: &mut Command) -> Result<String, String> {
    let o = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !o.status.success() {
        return Err(format!("{cmd:?}: {}", String::from_utf8_lossy(&o.stderr)));
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// A loop device over a sparse image file, detached on drop.
pub struct LoopDev {
    pub dev: PathBuf,
    _dir: tempfile::TempDir,
}

impl LoopDev {
    /// `size_mib` MiB image; `sector` is the logical block size (512 or 4096).
    pub fn new(size_mib: u64, sector: u32) -> Result<Self, String> {
        let dir = tempfile::tempdir_in("/var/tmp").map_err(|e| e.to_string())?;
        let img = dir.path().join("disk.img");
        let f = std::fs::File::create(&img).map_err(|e| e.to_string())?;
        f.set_len(size_mib << 20).map_err(|e| e.to_string())?;
        drop(f);
        let _guard = LOOP_SETUP.lock().unwrap_or_else(|p| p.into_inner());
        let mut last = String::new();
        for _ in 0..5 {
            match sh(Command::new("losetup")
                .args(["--find", "--show", "--sector-size", &sector.to_string()])
                .arg(&img))
            {
                Ok(dev) => {
                    return Ok(LoopDev {
                        dev: PathBuf::from(dev),
                        _dir: dir,
                    })
                }
                Err(e) => last = e,
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        Err(last)
    }

    pub fn name(&self) -> String {
        self.dev.file_name().unwrap().to_string_lossy().into_owned()
    }

    /// (sectors read, sectors written) as the kernel counted them.
    pub fn sectors(&self) -> (u64, u64) {
        let stat =
            std::fs::read_to_string(format!("/sys/block/{}/stat", self.name())).expect("loop stat");
        let f: Vec<u64> = stat
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect();
        (f[2], f[6])
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        // Right after an umount the device can still be busy for a moment:
        // retry, so no loop device outlives its test.
        for _ in 0..20 {
            let ok = Command::new("losetup")
                .arg("-d")
                .arg(&self.dev)
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok || !self.attached() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

impl LoopDev {
    /// Whether the device still has a backing file.
    fn attached(&self) -> bool {
        Path::new("/sys/block")
            .join(self.name())
            .join("loop/backing_file")
            .exists()
    }
}

/// A filesystem on a loop device, mounted on a temporary directory.
pub struct LoopFs {
    pub mnt: tempfile::TempDir,
    pub dev: LoopDev,
}

impl LoopFs {
    /// `fs` is "xfs" or "ext4".
    pub fn new(fs: &str, size_mib: u64, sector: u32, ro: bool) -> Result<Self, String> {
        let dev = LoopDev::new(size_mib, sector)?;
        match fs {
            "xfs" => sh(Command::new("mkfs.xfs").args(["-q", "-f"]).arg(&dev.dev))?,
            _ => sh(Command::new("mkfs.ext4")
                .args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"])
                .arg(&dev.dev))?,
        };
        let mnt = tempfile::tempdir_in("/var/tmp").map_err(|e| e.to_string())?;
        let mut mount = Command::new("mount");
        if ro {
            mount.args(["-o", "ro"]);
        }
        sh(mount.arg(&dev.dev).arg(mnt.path()))?;
        Ok(LoopFs { mnt, dev })
    }

    pub fn path(&self) -> &Path {
        self.mnt.path()
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        for _ in 0..20 {
            let ok = Command::new("umount")
                .arg(self.mnt.path())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// Whether loop devices can be made here (root, losetup, mkfs).
pub fn can_loop(fs: &str) -> bool {
    is_root() && have("losetup") && have(if fs == "xfs" { "mkfs.xfs" } else { "mkfs.ext4" })
}

/// Run `cmd` with its output captured; kill it and panic when it is still
/// running after `limit` (a bound against hangs, not a speed check).
pub fn output_within(mut cmd: Command, limit: Duration) -> Output {
    use std::process::Stdio;
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning");
    wait_output_within(child, limit).unwrap_or_else(|stderr| {
        panic!(
            "{cmd:?} still running after {limit:?}; stderr: {}",
            String::from_utf8_lossy(&stderr)
        )
    })
}

/// Wait at most `limit` for `child` (its stdout and stderr piped), taking
/// its output meanwhile; one still running then is killed: `Err` with
/// what it wrote to stderr.
pub fn wait_output_within(mut child: Child, limit: Duration) -> Result<Output, Vec<u8>> {
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout piped")));
    let err = drain(Box::new(child.stderr.take().expect("stderr piped")));
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Ok(Output {
                status,
                stdout: out.join().unwrap(),
                stderr: err.join().unwrap(),
            });
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(err.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// Speaking the daemon's protocol by hand, with the library's own encoder,
// to send what a well-behaved client never would.

/// A connection to a daemon on loopback; no read waits longer than 30 s.
pub fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connecting to the daemon");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// Send `bytes` on a new connection and return everything the daemon
/// answers until it closes.
pub fn raw(port: u16, bytes: &[u8]) -> Vec<u8> {
    let mut s = connect(port);
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// Read exactly one control message (nothing past it).
pub fn try_read_msg(s: &mut TcpStream) -> std::io::Result<Message> {
    let mut prefix = [0u8; 4];
    s.read_exact(&mut prefix)?;
    let bad = |e: DecodeError| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string());
    let mut body = vec![0u8; body_len(prefix).map_err(bad)?];
    s.read_exact(&mut body)?;
    decode_body(&body).map_err(bad)
}

pub fn read_msg(s: &mut TcpStream) -> Message {
    try_read_msg(s).expect("a control message from the daemon")
}

/// The messages in `bytes`, in order; trailing bytes that are not a whole
/// message are left out.
pub fn messages(bytes: &[u8]) -> Vec<Message> {
    let mut at = 0;
    let mut out = Vec::new();
    while let Ok(Some((m, used))) = decode(&bytes[at..]) {
        at += used;
        out.push(m);
    }
    out
}

/// The daemon's reason for refusing, from the `Error` message among the
/// bytes it sent before closing.
pub fn refusal(reply: &[u8]) -> (ErrorCode, String) {
    messages(reply)
        .into_iter()
        .find_map(|m| match m {
            Message::Error { code, message } => Some((code, message)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no error message from the daemon in {reply:?}"))
}

pub fn key_of(key_file: &Path) -> Key {
    parse_key(&std::fs::read_to_string(key_file).unwrap()).unwrap()
}

/// A completed handshake: the authenticated control connection and the
/// session's keys.
pub fn handshake(port: u16, key_file: &Path) -> (Control, SessionKeys) {
    let mut ctl = connect(port);
    let (mut hs, hello) = ClientHandshake::new(key_of(key_file), [5; 32]);
    ctl.write_all(&encode(&Message::Hello(hello))).unwrap();
    let Message::Challenge(ch) = read_msg(&mut ctl) else {
        panic!("no challenge")
    };
    ctl.write_all(&encode(&Message::Auth(hs.on_challenge(&ch).unwrap())))
        .unwrap();
    let version = hs.answer().unwrap().chosen;
    // Protocol 13 has no welcome: the session id comes from the nonces.
    let keys = if version >= 13 {
        hs.keys_now().unwrap()
    } else {
        let Message::Welcome(w) = read_msg(&mut ctl) else {
            panic!("no welcome")
        };
        hs.on_welcome(&w).unwrap()
    };
    // From here on every control message is sealed, as urmove's are.
    let mut ctl = Control::new(ctl);
    ctl.secure(&keys, true);
    ctl.set_protocol(version);
    (ctl, keys)
}

/// Send `m` on a sealed control connection.
pub fn send_sealed(c: &mut Control, m: &Message) {
    urmove::session::link::conn::send_msg(c, m).unwrap();
}

/// Send bytes that are one encoded message (prefix and body, perhaps
/// malformed on purpose), sealed as a message is.
pub fn write_sealed(c: &mut Control, bytes: Vec<u8>) {
    urmove::session::link::conn::send_encoded(c, bytes).unwrap();
}

/// Every sealed message the daemon sends until it closes the connection;
/// panics if it stays open past the read timeout.
pub fn sealed_replies(c: &mut Control) -> Vec<Message> {
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut out = Vec::new();
    loop {
        match urmove::session::link::conn::recv_any(c) {
            Ok(m) => out.push(m),
            Err(urmove::session::SessionError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::TimedOut =>
            {
                panic!("the daemon kept the connection open; got {out:?}")
            }
            Err(_) => return out,
        }
    }
}

/// The daemon's reason for refusing, on a sealed control connection.
pub fn sealed_refusal(c: &mut Control) -> (ErrorCode, String) {
    let got = sealed_replies(c);
    got.iter()
        .find_map(|m| match m {
            Message::Error { code, message } => Some((*code, message.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no error message from the daemon in {got:?}"))
}

/// A push request into `hand/` under the root (the one place tests build
/// one, so a protocol change touches one line).
pub fn push_request(streams: u16, block_size: u32) -> Message {
    push_request_with(streams, block_size, 0)
}

/// A push request with request flags (`REQ_*`).
pub fn push_request_with(streams: u16, block_size: u32, flags: u32) -> Message {
    Message::Request(SessionRequest {
        filter: Vec::new(),
        owner: [0; 32],
        rate_limit: 0,
        direction: Direction::Push,
        streams,
        block_size,
        flags,
        path: "hand".into(),
        time_ms: 0,
    })
}

/// An authenticated push session up to `Ready`: handshake, request and
/// manifest; `Err` carries the daemon's reply when it is not `Ready`.
pub fn hand_push(
    port: u16,
    key_file: &Path,
    entries: Vec<Entry>,
    streams: u16,
    block_size: u32,
) -> Result<(Control, SessionKeys), Message> {
    hand_push_with(port, key_file, entries, streams, block_size, 0)
}

/// [`hand_push`] with request flags.
pub fn hand_push_with(
    port: u16,
    key_file: &Path,
    entries: Vec<Entry>,
    streams: u16,
    block_size: u32,
    flags: u32,
) -> Result<(Control, SessionKeys), Message> {
    let (mut ctl, keys) = handshake(port, key_file);
    send_sealed(&mut ctl, &push_request_with(streams, block_size, flags));
    // The daemon may refuse the request before it reads the manifest.
    let _ = urmove::session::link::conn::send_msg(&mut ctl, &Message::Manifest(entries));
    let _ = urmove::session::link::conn::send_msg(&mut ctl, &Message::ManifestEnd);
    loop {
        match urmove::session::link::conn::recv_any(&mut ctl) {
            Ok(Message::Ready) => return Ok((ctl, keys)),
            // Where the daemon writes each file (a hint for routing).
            Ok(Message::Placement { .. }) => {}
            Ok(reply) => return Err(reply),
            Err(e) => panic!("no reply from the daemon: {e}"),
        }
    }
}

/// Open data stream `index` of a session, with its proof.
pub fn data_stream(port: u16, keys: &SessionKeys, index: u16) -> TcpStream {
    let mut s = connect(port);
    s.write_all(&encode(&Message::StreamHello {
        session_id: keys.session_id,
        stream_index: index,
        proof: stream_proof(keys, index),
    }))
    .unwrap();
    s
}

/// Every `.rs` file under `dir`, with its text.
pub fn rust_sources(dir: &Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                out.push((p, text));
            }
        }
    }
    out
}
