//! One `urmove recv` daemon against crowds and hostile clients: real
//! processes and real sockets on loopback. Each stranger is refused with a
//! reason it can read, no data stream joins a session it does not belong to,
//! and after an attack the daemon's memory and threads come back down while
//! good transfers keep arriving byte for byte.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use urmove::protocol::control::{
    body_len, decode, encode, ErrorCode, Message, CONTROL_LEN_MAX, MANIFEST_PART_ENTRIES_MAX,
};
use urmove::protocol::frame::{content_terms, digest_add, FrameHeader, FRAME_PAYLOAD_MAX};
use urmove::protocol::handshake::{
    stream_proof, Auth, ClientHandshake, Hello, SessionKeys, VERSION,
};
use urmove::protocol::manifest::{Entry, EntryKind};
use urmove::protocol::seal::frame_key;

use crate::transfer::{assert_same_tree, no_part_files, Daemon};
use crate::util::{
    connect, data_stream, hand_push, handshake, json, messages, noise, output_within, push_request,
    raw, read_msg, refusal, sealed_refusal, sealed_replies, send_sealed, stderr, urmove,
    write_sealed, Control,
};

/// Upper bound for one `urmove send` here: against hangs, not a speed check.
const SEND_LIMIT: Duration = Duration::from_secs(300);

/// `urmove send` to a daemon on 127.0.0.1:`port`.
fn send_cmd(port: u16, key: &Path, extra: &[&str], source: &Path, dest: &str) -> Command {
    let mut c = urmove();
    c.args(["send", "-p", &port.to_string(), "--key-file"])
        .arg(key)
        .args(extra)
        .arg(source)
        .arg(format!("127.0.0.1:{dest}"));
    c
}

/// A real transfer through the daemon, compared byte for byte: it still
/// serves after whatever came before.
fn a_good_transfer_still_arrives(d: &mut Daemon, name: &str) {
    assert!(d.alive(), "the daemon died:\n{}", d.log());
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let f = src.path().join(name);
    let bytes = noise((1 << 20) + 333, name.len() as u64);
    std::fs::write(&f, &bytes).unwrap();
    let o = output_within(
        send_cmd(d.port, &d.key, &["--block", "256k", "-P", "2"], &f, "good/"),
        SEND_LIMIT,
    );
    assert!(o.status.success(), "{}\n{}", stderr(&o), d.log());
    assert!(
        std::fs::read(d.root.path().join("good").join(name)).unwrap() == bytes,
        "{name} arrived different"
    );
}

/// A connection a test holds: plain bytes before authentication, sealed
/// messages after it.
enum Conn {
    Plain(TcpStream),
    Sealed(Control),
}

impl Conn {
    /// The daemon's reason for closing the connection.
    fn refusal(&mut self) -> (ErrorCode, String) {
        match self {
            Conn::Plain(s) => refusal(&until_closed(s)),
            Conn::Sealed(c) => sealed_refusal(c),
        }
    }
}

/// Everything the daemon sends until it closes the connection (a reset
/// counts as closing); panics when it is still open after the read timeout.
fn until_closed(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return out,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("the daemon kept the connection open past the read timeout; got {out:?}")
            }
            Err(e) => panic!("reading from the daemon: {e}"),
        }
    }
}

fn file_entry(path: &str, size: u64) -> Entry {
    Entry {
        path: path.into(),
        kind: EntryKind::File,
        size,
        data: 0,
        mode: 0o644,
        mtime_s: 1_600_000_000,
        mtime_ns: 0,
        link: None,
        ..Default::default()
    }
}

/// A Hello as a client without our key would send it.
fn hello_bytes() -> Vec<u8> {
    encode(&Message::Hello(ClientHandshake::new([1; 32], [2; 32]).1))
}

/// A small tree per sender: a tiny file, an unaligned one, a few MiB one
/// and an empty one, each with its own random bytes.
fn small_tree(dir: &Path, i: usize) -> PathBuf {
    let top = dir.join(format!("t{i}"));
    std::fs::create_dir_all(top.join("sub")).unwrap();
    let files = [
        ("a", i * 37 + 1),
        ("b", 200_000 + 4096 * i + 3),
        ("sub/big", (2 << 20) + 1000 * i + 1),
        ("sub/empty", 0),
    ];
    for (k, (name, size)) in files.into_iter().enumerate() {
        std::fs::write(top.join(name), noise(size, (i * 10 + k) as u64 + 1)).unwrap();
    }
    top
}

/// A daemon that lets one address hold many connections before they
/// authenticate: these tests' crowds all come from 127.0.0.1, and what
/// they measure lies past the per-address limit (tests/limits.rs has it).
fn crowd_daemon(handshake_timeout: &str) -> Daemon {
    Daemon::start_full(
        &[],
        "127.0.0.1",
        Path::new("/var/tmp"),
        &[
            "--handshake-timeout",
            handshake_timeout,
            "--max-unauthenticated-per-address",
            "1024",
        ],
    )
}

#[test]
fn thirty_two_concurrent_senders_each_arrive_identical() {
    const SENDERS: usize = 32;
    // 32 senders and the daemon share two cores: a long handshake timeout,
    // as slowness is not what this test is about.
    let mut d = crowd_daemon("60s");
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let trees: Vec<PathBuf> = (0..SENDERS).map(|i| small_tree(src.path(), i)).collect();
    let start = Arc::new(Barrier::new(SENDERS));
    let runs: Vec<JoinHandle<Output>> = trees
        .iter()
        .enumerate()
        .map(|(i, top)| {
            let cmd = send_cmd(
                d.port,
                &d.key,
                &["--block", "256k", "-P", "2", "--json"],
                top,
                &format!("c{i}"),
            );
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                output_within(cmd, SEND_LIMIT)
            })
        })
        .collect();
    let outputs: Vec<Output> = runs
        .into_iter()
        .map(|r| r.join().expect("a sender hung"))
        .collect();
    for (i, o) in outputs.iter().enumerate() {
        assert!(o.status.success(), "sender {i}: {}\n{}", stderr(o), d.log());
        let v = json(o);
        assert_eq!(v["status"], "ok", "sender {i}");
        assert_eq!(v["files_verified"], 4, "sender {i}");
        assert_eq!(v["streams"], 2, "sender {i}");
    }
    for (i, top) in trees.iter().enumerate() {
        assert_same_tree(top, &d.root.path().join(format!("c{i}/t{i}")));
    }
    assert!(no_part_files(d.root.path()));
    assert!(d.alive());
}

#[test]
fn garbage_and_broken_handshakes_are_refused_with_a_reason() {
    let mut d = Daemon::start(); // 2 s handshake timeout
    let junk = noise(4096, 11);
    assert!(
        body_len(junk[..4].try_into().unwrap()).is_err(),
        "this noise starts like a real length: pick another seed"
    );
    let mut bad_magic = hello_bytes();
    bad_magic[5] ^= 0xFF; // `u32 length | u8 kind | magic`
    let bad_version = encode(&Message::Hello(Hello {
        version: VERSION.wrapping_add(0x5A5A),
        client_nonce: [3; 32],
    }));
    let too_long = format!(
        "message length {} is above the limit {CONTROL_LEN_MAX}",
        u32::MAX
    );
    let cases: Vec<(&str, Vec<u8>, ErrorCode, &str)> = vec![
        (
            "random bytes",
            junk,
            ErrorCode::Malformed,
            "is above the limit",
        ),
        (
            "a zero length",
            0u32.to_le_bytes().to_vec(),
            ErrorCode::Malformed,
            "invalid message length 0",
        ),
        (
            "length 0xFFFFFFFF",
            u32::MAX.to_le_bytes().to_vec(),
            ErrorCode::Malformed,
            &too_long,
        ),
        (
            "an unknown message kind",
            vec![1, 0, 0, 0, 200],
            ErrorCode::Malformed,
            "invalid message kind 200",
        ),
        (
            "a Hello with another magic",
            bad_magic,
            ErrorCode::Malformed,
            "invalid magic",
        ),
        (
            "a Hello of another version",
            bad_version,
            ErrorCode::AuthFailed,
            "protocol version",
        ),
        (
            "an Auth before any Hello",
            encode(&Message::Auth(Auth {
                client_proof: [4; 32],
            })),
            ErrorCode::Malformed,
            "expected a handshake or a data stream",
        ),
    ];
    for (what, bytes, code, text) in cases {
        let (got, message) = refusal(&raw(d.port, &bytes));
        assert_eq!(got, code, "{what}: {message}");
        assert!(message.contains(text), "{what}: {message:?}");
        assert!(d.alive(), "{what}: the daemon died");
    }

    // Half a Hello, then the client closes its side.
    let hello = hello_bytes();
    let mut s = connect(d.port);
    s.write_all(&hello[..hello.len() / 2]).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let (code, message) = refusal(&until_closed(&mut s));
    assert_eq!(code, ErrorCode::Io, "{message}");
    assert!(
        message.contains("the peer closed the connection"),
        "{message}"
    );
    // Half a Hello, then silence: dropped at the handshake timeout, told why.
    let mut s = connect(d.port);
    s.write_all(&hello[..hello.len() / 2]).unwrap();
    let (code, message) = refusal(&until_closed(&mut s));
    assert_eq!(code, ErrorCode::Io, "{message}");
    assert!(message.contains("the peer went silent"), "{message}");

    a_good_transfer_still_arrives(&mut d, "after-garbage");
}

/// Copy `from` to `to` until `from` ends, then end `to`; returns what was
/// copied when `record`.
fn pipe(mut from: TcpStream, mut to: TcpStream, record: bool) -> Vec<u8> {
    from.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 256 << 10];
    while let Ok(n @ 1..) = from.read(&mut buf) {
        if record {
            seen.extend_from_slice(&buf[..n]);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    seen
}

/// A relay to the daemon for the next `conns` connections, which returns
/// what the client sent on the first (its control connection) once every
/// relayed connection ended.
fn recording_relay(daemon_port: u16, conns: usize) -> (u16, JoinHandle<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let relay = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut pipes = Vec::new();
        while pipes.len() < conns && Instant::now() < deadline {
            match listener.accept() {
                Ok((client, _)) => {
                    client.set_nonblocking(false).unwrap();
                    let daemon = TcpStream::connect(("127.0.0.1", daemon_port)).unwrap();
                    let record = pipes.is_empty();
                    let (c, dm) = (client.try_clone().unwrap(), daemon.try_clone().unwrap());
                    pipes.push((
                        std::thread::spawn(move || pipe(client, daemon, record)),
                        std::thread::spawn(move || pipe(dm, c, false)),
                    ));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(e) => panic!("relay accept: {e}"),
            }
        }
        let mut first = Vec::new();
        for (i, (up, down)) in pipes.into_iter().enumerate() {
            let seen = up.join().unwrap();
            down.join().unwrap();
            if i == 0 {
                first = seen;
            }
        }
        first
    });
    (port, relay)
}

#[test]
fn a_recorded_handshake_replayed_on_a_new_connection_fails_auth() {
    let mut d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let f = src.path().join("x");
    std::fs::write(&f, noise(300_000, 21)).unwrap();
    // A real client through a relay that records its control connection.
    let (relay_port, recording) = recording_relay(d.port, 2);
    let o = output_within(
        send_cmd(
            relay_port,
            &d.key,
            &["-P", "1", "--block", "64k"],
            &f,
            "in/",
        ),
        SEND_LIMIT,
    );
    assert!(o.status.success(), "{}\n{}", stderr(&o), d.log());
    let recorded = recording.join().unwrap();
    assert_eq!(
        std::fs::read(d.root.path().join("in/x")).unwrap(),
        std::fs::read(&f).unwrap()
    );
    // The client's bytes: Hello, Auth, then its request and manifest,
    // sealed: nothing after the handshake reads as a message.
    let mut sent: Vec<(Message, &[u8])> = Vec::new();
    let mut at = 0;
    while let Ok(Some((m, used))) = decode(&recorded[at..]) {
        sent.push((m, &recorded[at..at + used]));
        at += used;
    }
    assert!(
        sent.len() == 2
            && matches!(sent[0].0, Message::Hello(_))
            && matches!(sent[1].0, Message::Auth(_))
            && recorded.len() > at,
        "recorded {:?}",
        sent.iter().map(|(m, _)| m).collect::<Vec<_>>()
    );

    // Replayed step by step: the daemon's fresh challenge makes the
    // recorded proof worthless.
    let mut s = connect(d.port);
    s.write_all(sent[0].1).unwrap();
    assert!(matches!(read_msg(&mut s), Message::Challenge(_)));
    s.write_all(sent[1].1).unwrap();
    let reply = until_closed(&mut s);
    assert!(
        !messages(&reply)
            .iter()
            .any(|m| matches!(m, Message::Welcome(_))),
        "a replayed proof was welcomed"
    );
    let (code, message) = refusal(&reply);
    assert_eq!(code, ErrorCode::AuthFailed, "{message}");
    assert!(
        message.contains("authentication failed: the peer does not hold the same key"),
        "{message}"
    );

    // Replayed whole, request and manifest included: refused, nothing written.
    std::fs::remove_dir_all(d.root.path().join("in")).unwrap();
    let (code, message) = refusal(&raw(d.port, &recorded));
    assert_eq!(code, ErrorCode::AuthFailed, "{message}");
    assert!(!d.root.path().join("in").exists(), "a replay wrote files");
    a_good_transfer_still_arrives(&mut d, "after-replay");
}

#[test]
fn oversized_lengths_after_authentication_are_refused() {
    let mut d = Daemon::start();
    // A control message of 0xFFFFFFFF bytes where the request belongs.
    // (After the handshake every message is sealed: a bare length is
    // refused as a sealed message of that size.)
    let (mut ctl, _) = handshake(d.port, &d.key);
    ctl.tcp().write_all(&u32::MAX.to_le_bytes()).unwrap();
    let (code, message) = sealed_refusal(&mut ctl);
    assert_eq!(code, ErrorCode::Malformed, "{message}");
    let want = format!("a sealed control message of {} bytes", u32::MAX);
    assert!(message.contains(&want), "{message}");

    // Manifest parts claiming more entries than a part may hold.
    for count in [MANIFEST_PART_ENTRIES_MAX + 1, u32::MAX] {
        let (mut ctl, _) = handshake(d.port, &d.key);
        write_sealed(&mut ctl, encode(&push_request(1, 65536)));
        let mut part = encode(&Message::Manifest(Vec::new()));
        // `u32 length | u8 kind | u32 entry count | entries`.
        part[5..9].copy_from_slice(&count.to_le_bytes());
        write_sealed(&mut ctl, part);
        let (code, message) = sealed_refusal(&mut ctl);
        assert_eq!(code, ErrorCode::Malformed, "{count}: {message}");
        let want =
            format!("manifest part entries {count} is above the limit {MANIFEST_PART_ENTRIES_MAX}");
        assert!(message.contains(&want), "{message}");
    }

    // Frame headers on an authenticated data stream whose length is past
    // the session's block size, past the largest frame, and 0xFFFFFFFF.
    let block = noise(65536, 3);
    for length in [65536 + 4096, FRAME_PAYLOAD_MAX + 1, u32::MAX] {
        let (mut ctl, keys) = hand_push(d.port, &d.key, vec![file_entry("f", 1 << 20)], 1, 65536)
            .expect("the daemon is ready");
        let mut data = data_stream(d.port, &keys, 0);
        let mut header = FrameHeader::for_payload(&frame_key(&keys), 0, 0, &block, 0);
        header.length = length;
        data.write_all(&header.encode()).unwrap();
        let (code, message) = sealed_refusal(&mut ctl);
        assert_eq!(code, ErrorCode::Malformed, "{length}: {message}");
        assert!(
            message.contains(&format!("frame of {length} bytes")),
            "{message}"
        );
        assert!(!d.root.path().join("hand/f").exists());
    }
    a_good_transfer_still_arrives(&mut d, "after-oversized");
}

#[test]
fn a_data_stream_cannot_join_another_session_and_the_session_completes() {
    let mut d = Daemon::start();
    let content = noise(100_000, 31);
    // A live session of two streams: stream 0 joins, stream 1 is awaited.
    let (mut ctl, keys) = hand_push(
        d.port,
        &d.key,
        vec![file_entry("f", content.len() as u64)],
        2,
        65536,
    )
    .expect("the daemon is ready");
    let mut first = data_stream(d.port, &keys, 0);
    // Another session's keys, as a second authenticated client holds them.
    let (_other_ctl, other) = handshake(d.port, &d.key);
    let mixed = SessionKeys {
        session_id: keys.session_id,
        session_key: other.session_key,
    };
    let forged: [(&str, u16, [u8; 32]); 4] = [
        (
            "a proof made with another session's key",
            1,
            stream_proof(&mixed, 1),
        ),
        ("another session's own proof", 1, stream_proof(&other, 1)),
        (
            "a stream index past the session's count",
            2,
            stream_proof(&keys, 2),
        ),
        (
            "stream index 65535",
            u16::MAX,
            stream_proof(&keys, u16::MAX),
        ),
    ];
    for (what, stream_index, proof) in forged {
        let hello = encode(&Message::StreamHello {
            session_id: keys.session_id,
            stream_index,
            proof,
        });
        let (code, message) = refusal(&raw(d.port, &hello));
        assert_eq!(code, ErrorCode::AuthFailed, "{what}: {message}");
        assert!(
            message.contains("does not belong to a session"),
            "{what}: {message}"
        );
    }
    // The real stream 1 still joins, and the session completes untouched.
    let mut second = data_stream(d.port, &keys, 1);
    let (a, b) = content.split_at(65536);
    let (h0, h1) = (
        FrameHeader::for_payload(&frame_key(&keys), 0, 0, a, 0),
        FrameHeader::for_payload(&frame_key(&keys), 0, 65536, b, 0),
    );
    first.write_all(&[&h0.encode()[..], a].concat()).unwrap();
    second.write_all(&[&h1.encode()[..], b].concat()).unwrap();
    first.shutdown(Shutdown::Write).unwrap();
    second.shutdown(Shutdown::Write).unwrap();
    // The file is committed once the sender's digest of its source agrees.
    let digest = digest_add(content_terms(0, a), content_terms(65536, b));
    assert_eq!(
        digest,
        content_terms(0, &content),
        "digests are block-size free"
    );
    send_sealed(&mut ctl, &Message::SourceDigests(vec![(0, digest)]));
    let reply = sealed_replies(&mut ctl);
    assert_eq!(
        reply,
        vec![
            Message::FileAck {
                file_index: 0,
                digest,
            },
            Message::Summary {
                files: 1,
                bytes: content.len() as u64,
                ok: true,
            },
        ],
        "{}",
        d.log()
    );
    assert!(std::fs::read(d.root.path().join("hand/f")).unwrap() == content);
    assert!(d.alive());
}

/// A key holder whose digest of the source differs from what its frames
/// carried (a frame altered on the path and its checksum recomputed looks
/// the same to the receiver): the file is never committed, its part is
/// gone, and the session says so.
#[test]
fn a_file_whose_source_digest_differs_is_rejected_and_never_committed() {
    let mut d = Daemon::start();
    let content = noise(100_000, 32);
    let (mut ctl, keys) = hand_push(
        d.port,
        &d.key,
        vec![file_entry("f", content.len() as u64)],
        1,
        131072,
    )
    .expect("the daemon is ready");
    let mut data = data_stream(d.port, &keys, 0);
    let h = FrameHeader::for_payload(&frame_key(&keys), 0, 0, &content, 0);
    data.write_all(&[&h.encode()[..], &content].concat())
        .unwrap();
    data.shutdown(Shutdown::Write).unwrap();
    let ours = content_terms(0, &content);
    send_sealed(&mut ctl, &Message::SourceDigests(vec![(0, ours ^ 1)]));
    let reply = sealed_replies(&mut ctl);
    assert!(
        reply.contains(&Message::FileRejected {
            file_index: 0,
            digest: ours
        }),
        "{reply:?}"
    );
    assert!(
        !reply.iter().any(|m| matches!(m, Message::FileAck { .. })),
        "{reply:?}"
    );
    let refusal = reply.iter().find_map(|m| match m {
        Message::Error { message, .. } => Some(message.clone()),
        _ => None,
    });
    assert!(
        refusal
            .as_deref()
            .is_some_and(|m| m.contains("not committed")),
        "{reply:?}"
    );
    assert!(!d.root.path().join("hand/f").exists());
    assert!(no_part_files(d.root.path()), "the rejected part is gone");
    assert!(d.alive());
}

/// A field of `/proc/PID/status`, as a number (`VmRSS` in kB, `Threads`).
fn proc_status(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Kinds of hostile connection, all held open at once against one daemon.
#[derive(Debug, Clone, Copy)]
enum Attack {
    Silent,
    Garbage,
    HalfHelloThenClose,
    HalfHelloThenSilence,
    LengthMax,
    /// The largest length, 1 MiB of body, then close: the daemon held a
    /// buffer for it.
    LargeBodyThenClose,
    WrongKey,
    StrangersStream,
    ManifestPartPastMax,
    FramePastMax,
}

/// The mix against one daemon. `LargeBodyThenClose` is left out: what it
/// costs is `strangers_length_prefixes_pin_no_memory`'s subject.
const ATTACKS: [Attack; 9] = [
    Attack::Silent,
    Attack::Garbage,
    Attack::HalfHelloThenClose,
    Attack::HalfHelloThenSilence,
    Attack::LengthMax,
    Attack::WrongKey,
    Attack::StrangersStream,
    Attack::ManifestPartPastMax,
    Attack::FramePastMax,
];

/// Open one hostile connection and leave it open; returns it with the code
/// and text the daemon must refuse it with (on that connection).
fn open_attack(kind: Attack, port: u16, key: &Path, n: u64) -> (Conn, ErrorCode, &'static str) {
    let hello = hello_bytes();
    let half = &hello[..hello.len() / 2];
    match kind {
        Attack::Silent => (
            Conn::Plain(connect(port)),
            ErrorCode::Io,
            "the peer went silent",
        ),
        Attack::Garbage => {
            let mut s = connect(port);
            s.write_all(&noise(4096, 11)).unwrap();
            (Conn::Plain(s), ErrorCode::Malformed, "is above the limit")
        }
        Attack::HalfHelloThenClose => {
            let mut s = connect(port);
            s.write_all(half).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
            (
                Conn::Plain(s),
                ErrorCode::Io,
                "the peer closed the connection",
            )
        }
        Attack::HalfHelloThenSilence => {
            let mut s = connect(port);
            s.write_all(half).unwrap();
            (Conn::Plain(s), ErrorCode::Io, "the peer went silent")
        }
        Attack::LengthMax => {
            let mut s = connect(port);
            s.write_all(&u32::MAX.to_le_bytes()).unwrap();
            (Conn::Plain(s), ErrorCode::Malformed, "is above the limit")
        }
        Attack::LargeBodyThenClose => {
            let mut s = connect(port);
            s.write_all(&CONTROL_LEN_MAX.to_le_bytes()).unwrap();
            s.write_all(&noise(1 << 20, n)).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
            (
                Conn::Plain(s),
                ErrorCode::Io,
                "the peer closed the connection",
            )
        }
        Attack::WrongKey => {
            let mut s = connect(port);
            s.write_all(&hello).unwrap();
            assert!(matches!(read_msg(&mut s), Message::Challenge(_)));
            let auth = Auth {
                client_proof: noise(32, n).try_into().unwrap(),
            };
            s.write_all(&encode(&Message::Auth(auth))).unwrap();
            (
                Conn::Plain(s),
                ErrorCode::AuthFailed,
                "authentication failed",
            )
        }
        Attack::StrangersStream => {
            let mut s = connect(port);
            s.write_all(&encode(&Message::StreamHello {
                session_id: noise(16, n).try_into().unwrap(),
                stream_index: 0,
                proof: noise(32, n + 1).try_into().unwrap(),
            }))
            .unwrap();
            (
                Conn::Plain(s),
                ErrorCode::AuthFailed,
                "does not belong to a session",
            )
        }
        Attack::ManifestPartPastMax => {
            let (mut s, _) = handshake(port, key);
            write_sealed(&mut s, encode(&push_request(1, 65536)));
            let mut part = encode(&Message::Manifest(Vec::new()));
            part[5..9].copy_from_slice(&u32::MAX.to_le_bytes());
            write_sealed(&mut s, part);
            (
                Conn::Sealed(s),
                ErrorCode::Malformed,
                "manifest part entries",
            )
        }
        Attack::FramePastMax => {
            let entry = file_entry("f", 1 << 20);
            let (ctl, keys) = hand_push(port, key, vec![entry], 1, 65536).expect("ready");
            let mut data = data_stream(port, &keys, 0);
            let mut header = FrameHeader::for_payload(&frame_key(&keys), 0, 0, &[7; 4096], 0);
            header.length = u32::MAX;
            data.write_all(&header.encode()).unwrap();
            (
                Conn::Sealed(ctl),
                ErrorCode::Malformed,
                "frame of 4294967295 bytes",
            )
        }
    }
}

#[test]
fn hundreds_of_hostile_connections_leave_memory_and_threads_bounded() {
    const EACH: u64 = 30;
    let mut d = crowd_daemon("1s");
    let pid = d.pid();
    // Warm up (a session's ring, buffers and finalizer threads), then settle.
    a_good_transfer_still_arrives(&mut d, "warm-up");
    std::thread::sleep(Duration::from_millis(500));
    let threads_before = proc_status(pid, "Threads");
    let rss_before = proc_status(pid, "VmRSS");

    // A good transfer runs through the attack.
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let good = src.path().join("during");
    let good_bytes = noise(6 << 20, 41);
    std::fs::write(&good, &good_bytes).unwrap();
    let sender = {
        let cmd = send_cmd(
            d.port,
            &d.key,
            &["--block", "256k", "-P", "2", "--rate-limit", "50Mbit"],
            &good,
            "good",
        );
        std::thread::spawn(move || output_within(cmd, SEND_LIMIT))
    };
    // Every kind from its own thread: open them all, then read each refusal.
    let attackers: Vec<JoinHandle<()>> = ATTACKS
        .into_iter()
        .map(|kind| {
            let (port, key) = (d.port, d.key.clone());
            std::thread::spawn(move || {
                let open: Vec<_> = (0..EACH)
                    .map(|n| open_attack(kind, port, &key, n))
                    .collect();
                for (mut s, code, text) in open {
                    let (got, message) = s.refusal();
                    assert_eq!(got, code, "{kind:?}: {message}");
                    assert!(message.contains(text), "{kind:?}: {message}");
                }
            })
        })
        .collect();
    let mut threads_peak = 0;
    let mut rss_peak = 0;
    while !attackers.iter().all(JoinHandle::is_finished) {
        threads_peak = threads_peak.max(proc_status(pid, "Threads"));
        rss_peak = rss_peak.max(proc_status(pid, "VmRSS"));
        std::thread::sleep(Duration::from_millis(20));
    }
    for a in attackers {
        a.join().expect("an attack was not refused as expected");
    }
    let o = sender.join().expect("the good sender hung");
    assert!(o.status.success(), "{}\n{}", stderr(&o), d.log());
    assert!(std::fs::read(d.root.path().join("good/during")).unwrap() == good_bytes);
    assert!(d.alive(), "the daemon died:\n{}", d.log());

    // Every connection is gone: the daemon's threads come back down...
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut threads_after = proc_status(pid, "Threads");
    while threads_after > threads_before + 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        threads_after = proc_status(pid, "Threads");
    }
    let rss_after = proc_status(pid, "VmRSS");
    eprintln!(
        "daemon under {} hostile connections: threads {threads_before} -> peak {threads_peak} -> {threads_after}, \
         VmRSS {rss_before} -> peak {rss_peak} -> {rss_after} kB",
        EACH * ATTACKS.len() as u64
    );
    assert!(
        threads_after <= threads_before + 2,
        "{threads_after} threads 30 s after the attack, {threads_before} before"
    );
    // ...and so does its memory, within a generous bound.
    assert!(
        rss_after < rss_before + (64 << 10),
        "VmRSS grew from {rss_before} kB to {rss_after} kB"
    );
    a_good_transfer_still_arrives(&mut d, "after-the-attack");
}

#[test]
fn silent_clients_are_dropped_after_the_handshake_timeout() {
    let mut d = crowd_daemon("1s");
    let started = Instant::now();
    // Twenty that say nothing, and one that authenticates and then says nothing.
    let mut silent: Vec<Conn> = (0..20).map(|_| Conn::Plain(connect(d.port))).collect();
    silent.push(Conn::Sealed(handshake(d.port, &d.key).0));
    for s in &mut silent {
        // Reading fails the test if a connection outlives its 30 s read timeout.
        let (code, message) = s.refusal();
        assert_eq!(code, ErrorCode::Io, "{message}");
        assert!(message.contains("the peer went silent"), "{message}");
    }
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(500),
        "dropped after {waited:?}, before the 1 s timeout"
    );
    a_good_transfer_still_arrives(&mut d, "after-silence");
}

#[test]
fn a_trickling_client_is_dropped_after_the_handshake_timeout() {
    let mut d = Daemon::start_with_timeout("1s");
    // A Hello announced at the largest length, then a byte every 300 ms:
    // every read succeeds within the timeout, but no handshake completes.
    let mut s = connect(d.port);
    s.write_all(&CONTROL_LEN_MAX.to_le_bytes()).unwrap();
    s.set_nonblocking(true).unwrap();
    let started = Instant::now();
    let mut closed = false;
    while started.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(300));
        if s.write_all(&[1]).is_err() {
            closed = true;
            break;
        }
        let mut buf = [0u8; 256];
        match s.read(&mut buf) {
            Ok(_) => {
                closed = true;
                break;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => {
                closed = true;
                break;
            }
        }
    }
    assert!(
        closed,
        "a client trickling a byte every 300 ms kept its unauthenticated connection \
         for 15 s against a 1 s handshake timeout"
    );
    a_good_transfer_still_arrives(&mut d, "after-trickle");
}

#[test]
fn strangers_length_prefixes_pin_no_memory() {
    let mut d = crowd_daemon("1s");
    let pid = d.pid();
    // A daemon that has served a while: a transfer, and strangers that sent
    // large bodies and left, so its allocator holds freed memory.
    a_good_transfer_still_arrives(&mut d, "warm-up");
    for _ in 0..2 {
        let open: Vec<_> = (0..20)
            .map(|n| open_attack(Attack::LargeBodyThenClose, d.port, &d.key, n))
            .collect();
        for (mut s, _, _) in open {
            if let Conn::Plain(s) = &mut s {
                let _ = until_closed(s);
            }
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let rss_before = proc_status(pid, "VmRSS");
    // A flood of strangers for 3 s, each sending 4 bytes (the largest length
    // a message may announce) and nothing else; the daemon drops each after
    // its 1 s timeout, so about a hundred are connected at any time.
    let mut conns = Vec::new();
    let mut rss_peak = rss_before;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        for _ in 0..10 {
            let mut s = connect(d.port);
            s.write_all(&CONTROL_LEN_MAX.to_le_bytes()).unwrap();
            conns.push(s);
        }
        rss_peak = rss_peak.max(proc_status(pid, "VmRSS"));
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "{} strangers, 4 bytes each: VmRSS {rss_before} -> peak {rss_peak} kB",
        conns.len()
    );
    drop(conns);
    assert!(
        rss_peak < rss_before + (64 << 10),
        "strangers that sent 4 bytes each took the daemon's VmRSS from {rss_before} kB \
         to {rss_peak} kB"
    );
    a_good_transfer_still_arrives(&mut d, "after-the-strangers");
}

#[test]
fn control_messages_after_the_handshake_must_be_sealed_with_the_sessions_keys() {
    let mut d = Daemon::start();
    // A plain request where a sealed one belongs (what an attacker on the
    // path, who holds no key, could inject).
    let (mut ctl, _) = handshake(d.port, &d.key);
    ctl.tcp()
        .write_all(&encode(&push_request(1, 65536)))
        .unwrap();
    let (code, message) = sealed_refusal(&mut ctl);
    assert_eq!(code, ErrorCode::Malformed, "{message}");
    assert!(message.contains("failed authentication"), "{message}");
    // A request sealed under another session's keys.
    let (mut ctl, _) = handshake(d.port, &d.key);
    let (_other_ctl, other) = handshake(d.port, &d.key);
    let forger = Control::new(ctl.tcp().try_clone().unwrap());
    forger.secure(&other, true);
    let mut forger = forger;
    write_sealed(&mut forger, encode(&push_request(1, 65536)));
    let (code, message) = sealed_refusal(&mut ctl);
    assert_eq!(code, ErrorCode::Malformed, "{message}");
    assert!(message.contains("failed authentication"), "{message}");
    assert!(!d.root.path().join("hand").exists());
    a_good_transfer_still_arrives(&mut d, "after-forgery");
}
