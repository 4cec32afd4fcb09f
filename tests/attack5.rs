//! Protocol negotiation (12 and 13) under attack: an on-path attacker
//! without the key, and a second key holder. Findings fail until fixed
//! (each says the safe behaviour); what held is pinned.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::Duration;

use urmove::protocol::control::{
    encode, encode_at, DaemonInfo, Direction, ErrorCode, Limit, Message, SessionRequest,
};
use urmove::protocol::handshake::{ClientHandshake, Hello, SessionKeys, VERSION};
use urmove::protocol::negotiate::{Answer, Range, OURS};
use urmove::session::link::conn::{recv_any, Control};

use crate::transfer::Daemon;
use crate::util::{
    connect, key_of, output_within, push_request, read_msg, send_sealed, stderr, urmove,
    write_sealed,
};

/// A key holder's handshake offering `range`: the sealed control
/// connection (speaking the version chosen), its keys and the answer.
fn open(port: u16, key_file: &Path, range: Range) -> (Control, SessionKeys, Answer) {
    let mut s = connect(port);
    let (mut hs, hello) = ClientHandshake::speaking(key_of(key_file), [9; 32], range);
    s.write_all(&encode(&Message::Hello(hello))).unwrap();
    let Message::Challenge(ch) = read_msg(&mut s) else {
        panic!("no challenge")
    };
    s.write_all(&encode(&Message::Auth(hs.on_challenge(&ch).unwrap())))
        .unwrap();
    let answer = hs.answer().unwrap();
    let keys = if answer.chosen >= 13 {
        hs.keys_now().unwrap()
    } else {
        let Message::Welcome(w) = read_msg(&mut s) else {
            panic!("no welcome")
        };
        hs.on_welcome(&w).unwrap()
    };
    let mut c = Control::new(s);
    c.secure(&keys, true);
    c.set_protocol(answer.chosen);
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    (c, keys, answer)
}

const V12: Range = Range { min: 12, max: 12 };

fn request(direction: Direction, streams: u16, path: &str) -> SessionRequest {
    SessionRequest {
        filter: Vec::new(),
        owner: [0; 32],
        rate_limit: 0,
        direction,
        streams,
        block_size: 1 << 20,
        flags: 0,
        path: path.into(),
        time_ms: 0,
    }
}

/// What the daemon says next on `c` (its `Error` included), or why not.
fn reply(c: &mut Control) -> Result<Message, String> {
    recv_any(c).map_err(|e| e.to_string())
}

/// A one-file tree to push.
fn small_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::create_dir(dir.path().join("t")).unwrap();
    std::fs::write(dir.path().join("t/f"), crate::util::noise(100_000, 5)).unwrap();
    dir
}

fn send_cmd(
    d: &Daemon,
    state: &Path,
    extra: &[&str],
    src: &Path,
    dest: &str,
) -> std::process::Command {
    let mut c = urmove();
    c.args(["send", "-p", &d.port.to_string(), "--key-file"])
        .arg(&d.key)
        .arg("--state-dir")
        .arg(state)
        .args(extra)
        .arg(src)
        .arg(format!("127.0.0.1:{dest}"));
    c
}

// ---- Findings ----

/// FINDING (availability). In protocol 13 a client connects its data
/// streams right after the Challenge and keeps them silent (no hello)
/// until `Ready`: for its whole setup they count among the daemon's
/// unauthenticated connections of its address. A second session from the
/// same address meanwhile (shards, two transfers of one host, a NAT) has
/// its streams refused at `--max-unauthenticated-per-address`; its client
/// says hello into the refused sockets, and its daemon waits the whole
/// stream wait and fails "only 4 of 8 data streams arrived". 0.1.0's
/// clients connected after `Ready`, authenticating at once. Safe: the
/// second session completes (early streams authenticate at once, or do
/// not count against the address, and a refused stream is connected
/// again).
#[test]
fn early_streams_of_one_session_do_not_starve_the_next_from_its_address() {
    let d = Daemon::start_full(
        &[],
        "127.0.0.1",
        Path::new("/var/tmp"),
        &[
            "--handshake-timeout",
            "10s",
            "--max-unauthenticated-per-address",
            "10",
        ],
    );
    // Session A, as urmove 0.2.0 opens it: request, then as many early
    // streams as the room allows while its (large) manifest is made.
    let (mut a, _keys, answer) = open(d.port, &d.key, OURS);
    assert_eq!(answer.chosen, VERSION);
    send_sealed(&mut a, &push_request(8, 1 << 20));
    // Half the room, as a client of 13 takes at most.
    let early: Vec<TcpStream> = (0..8.min(answer.room / 2))
        .map(|_| connect(d.port))
        .collect();
    assert_eq!(early.len(), 4, "room {}", answer.room);
    std::thread::sleep(Duration::from_millis(300));
    // Session B from the same host, a small push, within A's setup.
    let src = small_tree();
    let state = tempfile::tempdir_in("/var/tmp").unwrap();
    let o = output_within(
        send_cmd(&d, state.path(), &["-P", "8"], &src.path().join("t"), "b"),
        Duration::from_secs(60),
    );
    assert!(
        o.status.success(),
        "a second session of the same address failed beside a 13 client's setup: {}\n{}",
        stderr(&o),
        d.log()
    );
    drop(early);
}

/// FINDING (robustness, false alarms). A client's early data streams wait
/// for `Ready` with no hello, but the daemon gives every connection only
/// the pre-authentication window (`--handshake-timeout`, at most 5 s) to
/// say hello: any setup longer than that (a large tree's manifest, a
/// resume's comparison) has all of them timed out, each a "went silent"
/// failure logged and counted as a stranger's, and the client connects
/// them all again (a daemon that times one out just after the client
/// looked loses its hello: the session then waits for a stream that never
/// comes). Now: the client uses no early stream silent for over 2 s and
/// connects again any the daemon closed, so the session completes; the
/// daemon's log of them is left (see below).
#[test]
fn a_long_setup_completes_though_its_early_streams_time_out() {
    let d = Daemon::start_full(
        &[],
        "127.0.0.1",
        Path::new("/var/tmp"),
        &["--handshake-timeout", "400ms"],
    );
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("many");
    for i in 0..60 {
        let dir = top.join(format!("d{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        for j in 0..200 {
            std::fs::write(dir.join(format!("f{j}")), [j as u8]).unwrap();
        }
    }
    let state = tempfile::tempdir_in("/var/tmp").unwrap();
    let o = output_within(
        send_cmd(&d, state.path(), &["-P", "4"], &top, "many"),
        Duration::from_secs(120),
    );
    assert!(o.status.success(), "{}\n{}", stderr(&o), d.log());
    // Known, left (the issue note says so): the daemon still logs the
    // early streams it timed out as silent (it cannot tell them from a
    // stranger's before their hello); the client made them anew, and
    // every file arrived.
    let arrived = std::fs::read_dir(d.root.path().join("many/many"))
        .unwrap()
        .count();
    assert_eq!(arrived, 60, "{}", d.log());
}

// ---- What held ----

/// What a proxy on the path does to the Hello and to the Challenge's nonce.
type Tampering = (fn(&mut Hello), fn(&mut [u8; 32]));

/// A proxy on the path that changes the first message each way (the
/// Hello, the Challenge) and passes the rest: its port.
fn tamper(daemon: u16, hello: fn(&mut Hello), challenge: fn(&mut [u8; 32])) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            let mut d = connect(daemon);
            std::thread::spawn(move || {
                let Ok(Message::Hello(mut h)) = crate::util::try_read_msg(&mut c) else {
                    return;
                };
                hello(&mut h);
                let _ = d.write_all(&encode(&Message::Hello(h)));
                match crate::util::try_read_msg(&mut d) {
                    Ok(Message::Challenge(mut ch)) => {
                        challenge(&mut ch.server_nonce);
                        let _ = c.write_all(&encode(&Message::Challenge(ch)));
                    }
                    Ok(m) => {
                        let _ = c.write_all(&encode(&m));
                    }
                    Err(_) => return,
                }
                let (mut c2, mut d2) = (c.try_clone().unwrap(), d.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut d2, &mut c2);
                });
                let _ = std::io::copy(&mut c, &mut d);
            });
        }
    });
    port
}

/// Nobody on the path can push a session of two 13 builds down to 12:
/// stripping the mark or lowering the offer in the Hello, or stripping the
/// mark, lowering the choice or the room in the Challenge, fails the
/// proofs; no session starts.
#[test]
fn no_downgrade_or_changed_answer_on_the_path() {
    let d = Daemon::start();
    let src = small_tree();
    let cases: [Tampering; 5] = [
        (|h| h.client_nonce[20..28].fill(0), |_| {}),
        (|h| h.client_nonce[30] = 12, |_| {}),
        (|_| {}, |n| n[16..24].fill(0)),
        (|_| {}, |n| n[24] = 12),
        (|_| {}, |n| n[30] = 200),
    ];
    for (i, (h, c)) in cases.into_iter().enumerate() {
        let port = tamper(d.port, h, c);
        let state = tempfile::tempdir_in("/var/tmp").unwrap();
        let mut cmd = urmove();
        cmd.args(["send", "-p", &port.to_string(), "--key-file"])
            .arg(&d.key)
            .arg("--state-dir")
            .arg(state.path())
            .arg(src.path().join("t"))
            .arg(format!("127.0.0.1:case{i}"));
        let o = output_within(cmd, Duration::from_secs(30));
        assert!(
            !o.status.success(),
            "case {i}: a tampered handshake went on"
        );
        assert!(stderr(&o).contains("key"), "case {i}: {}", stderr(&o));
        assert!(!d.root.path().join(format!("case{i}")).exists(), "case {i}");
    }
    assert!(!d.log().contains("session started"), "{}", d.log());
}

/// A Request encoded in the other version is refused, both ways: 13's
/// (one field longer) on a 12 session, 12's on a 13 session, and an
/// `Info` (a 13 direction) on a 12 session: no `DaemonInfo` for it.
#[test]
fn a_request_of_the_other_version_is_refused() {
    let d = Daemon::start();
    let push = Message::Request(request(Direction::Push, 1, "x"));
    let at12 = encode_at(&push, 12).unwrap();
    let at13 = encode_at(&push, 13).unwrap();
    assert_eq!(at13.len(), at12.len() + 8);
    // 13's bytes on a 12 session, 12's on a 13 session.
    for (range, bytes) in [(V12, at13.clone()), (OURS, at12)] {
        let (mut c, _, _) = open(d.port, &d.key, range);
        write_sealed(&mut c, bytes);
        match reply(&mut c) {
            Ok(Message::Error { code, .. }) => assert_eq!(code, ErrorCode::Malformed),
            other => panic!("{range:?}: {other:?}"),
        }
    }
    // Info, in 12's layout (13's without time_ms), on a 12 session.
    let info = encode_at(&Message::Request(request(Direction::Info, 0, "")), 13).unwrap();
    let mut bytes = info[..info.len() - 8].to_vec();
    let len = (bytes.len() - 4) as u32;
    bytes[..4].copy_from_slice(&len.to_le_bytes());
    let (mut c, _, a) = open(d.port, &d.key, V12);
    assert_eq!(a.chosen, 12);
    write_sealed(&mut c, bytes);
    match reply(&mut c) {
        Ok(Message::Error { code, .. }) => assert_eq!(code, ErrorCode::Malformed),
        other => panic!("an Info on a 12 session: {other:?}"),
    }
    assert!(!d.log().contains("info asked"), "{}", d.log());
}

/// Protocol 12's reversed bench path `<ms>[v]` read back: anything else
/// (empty, `v` alone, signs, spaces, past u64) is a bad length, and more
/// than a day is refused; the daemon stays up.
#[test]
fn a_12_reversed_bench_path_is_parsed_strictly() {
    let mut d = Daemon::start();
    let bad = [
        "",
        "v",
        "vv",
        "x",
        "-1",
        " 5",
        "5 ",
        "18446744073709551616",
        "1e3",
        "0x10",
    ];
    for path in bad {
        let (mut c, _, _) = open(d.port, &d.key, V12);
        send_sealed(
            &mut c,
            &Message::Request(request(Direction::BenchReverse, 1, path)),
        );
        match reply(&mut c) {
            Ok(Message::Error { code, message }) => {
                assert_eq!(code, ErrorCode::BadRequest, "{path:?}: {message}");
                assert!(message.contains("bad test length"), "{path:?}: {message}");
            }
            other => panic!("{path:?}: {other:?}"),
        }
    }
    let (mut c, _, _) = open(d.port, &d.key, V12);
    send_sealed(
        &mut c,
        &Message::Request(request(Direction::BenchReverse, 1, "86400001v")),
    );
    match reply(&mut c) {
        Ok(Message::Error { code, message }) => {
            assert_eq!(code, ErrorCode::TooLarge, "{message}")
        }
        other => panic!("a bench of more than a day: {other:?}"),
    }
    assert!(d.alive());
}

/// A limit is said as protocol 12 has it to a 12 peer (`StreamsRefused`,
/// never `LimitRefused`, which 0.1.0 cannot read) and as its numbers to a
/// 13 peer.
#[test]
fn a_limit_is_said_in_the_sessions_version() {
    let d = Daemon::start_full(
        &[],
        "127.0.0.1",
        Path::new("/var/tmp"),
        &["--max-streams", "4"],
    );
    let (mut c, _, _) = open(d.port, &d.key, V12);
    send_sealed(&mut c, &push_request(8, 1 << 20));
    assert_eq!(
        reply(&mut c),
        Ok(Message::StreamsRefused { asked: 8, max: 4 })
    );
    let (mut c, _, _) = open(d.port, &d.key, OURS);
    send_sealed(&mut c, &push_request(8, 1 << 20));
    assert_eq!(
        reply(&mut c),
        Ok(Message::LimitRefused {
            limit: Limit::Streams,
            asked: 8,
            max: 4,
            in_use: 0
        })
    );
}

/// FINDING (low: misleading advice). `VersionRefused` comes before any
/// proof, so anybody on the path can send it; the client believes even
/// one that contradicts itself, naming a version the client offered
/// (12-12 against 12-13), and tells the user "no protocol version in
/// common ... upgrade this urmove". It never downgrades (no session
/// runs). Safe: a refusal whose range meets the client's offer is said as
/// what it is (a broken or tampered connection), with no advice to
/// upgrade.
#[test]
fn an_injected_version_refusal_that_contradicts_itself_is_not_believed() {
    let d = Daemon::start();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let tries = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&tries);
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut b = [0u8; 64];
            let _ = c.read(&mut b);
            let _ = c.write_all(&encode(&Message::VersionRefused {
                oldest: 12,
                newest: 12,
            }));
        }
    });
    let src = small_tree();
    let state = tempfile::tempdir_in("/var/tmp").unwrap();
    let mut cmd = urmove();
    cmd.args(["send", "-p", &port.to_string(), "--key-file"])
        .arg(&d.key)
        .arg("--state-dir")
        .arg(state.path())
        .arg(src.path().join("t"))
        .arg("127.0.0.1:x");
    let o = output_within(cmd, Duration::from_secs(30));
    assert!(!o.status.success());
    assert!(!d.log().contains("session started"), "{}", d.log());
    // No second try with an older offer: nothing to push it down to.
    assert_eq!(tries.load(std::sync::atomic::Ordering::SeqCst), 1);
    let e = stderr(&o);
    assert!(
        !e.contains("upgrade") && !e.contains("no protocol version in common"),
        "a forged refusal naming a version both speak was believed: {e}"
    );
}

/// The no-verdict rule of protocol 13 follows what was named, on both
/// sides of a pull whose client is the sink: a `Have` part naming a
/// partial file with no ranges still named an item (a verdict follows, the
/// session goes on); an empty `Have` part named nothing (no verdict: the
/// daemon waits for the placement and answers it with `Ready`).
#[test]
fn the_verdict_follows_items_named_not_ranges() {
    use urmove::protocol::control::{HaveItem, REQ_RESUME};
    let d = Daemon::start();
    std::fs::create_dir(d.root.path().join("p")).unwrap();
    std::fs::write(d.root.path().join("p/f"), crate::util::noise(3 << 20, 2)).unwrap();
    let pull = |have: Vec<HaveItem>| {
        let (mut c, _, a) = open(d.port, &d.key, OURS);
        assert_eq!(a.chosen, VERSION);
        let mut req = request(Direction::Pull, 1, "p");
        req.flags = REQ_RESUME;
        send_sealed(&mut c, &Message::Request(req));
        let mut entries = Vec::new();
        loop {
            match reply(&mut c) {
                Ok(Message::Manifest(part)) => entries.extend(part),
                Ok(Message::ManifestEnd) => break,
                Ok(Message::Alive { .. } | Message::LeftOut { .. }) => {}
                other => panic!("{other:?}"),
            }
        }
        let file = entries.iter().position(|e| e.path.ends_with('f')).unwrap() as u32;
        let have: Vec<HaveItem> = have
            .into_iter()
            .map(|it| match it {
                HaveItem::Partial { digest, ranges, .. } => HaveItem::Partial {
                    file_index: file,
                    digest,
                    ranges,
                },
                other => other,
            })
            .collect();
        send_sealed(&mut c, &Message::Have(have));
        send_sealed(&mut c, &Message::HaveEnd);
        (c, entries.len())
    };
    // A partial file with no ranges: an item named, so a verdict.
    let (mut c, _) = pull(vec![HaveItem::Partial {
        file_index: 0,
        digest: 7,
        ranges: Vec::new(),
    }]);
    loop {
        match reply(&mut c) {
            Ok(Message::HeldChecked) => break,
            Ok(Message::HeldWrong(_) | Message::Alive { .. }) => {}
            other => panic!("no verdict after an item named: {other:?}"),
        }
    }
    // Nothing named: no verdict; the placement is answered with Ready.
    let (mut c, n) = pull(Vec::new());
    send_sealed(
        &mut c,
        &Message::Placement {
            streams: Vec::new(),
            entries: Vec::new(),
        },
    );
    loop {
        match reply(&mut c) {
            Ok(Message::Ready) => break,
            Ok(Message::Alive { .. }) => {}
            other => panic!("after nothing named ({n} entries): {other:?}"),
        }
    }
}

/// FINDING (low: terminal injection). `urmove info` prints the daemon's
/// `release` text as it came: a key holder's daemon (or the host it runs
/// on) writes escape sequences and line breaks into the user's terminal,
/// and forges lines of the report ("encryption required  yes" below a
/// real "no"). Every other text from a peer is shown with its control
/// characters escaped. Safe: no control character of the daemon's reaches
/// the terminal.
#[test]
fn info_shows_no_control_character_of_the_daemons() {
    use urmove::protocol::handshake::ServerHandshake;
    let keydir = tempfile::tempdir_in("/var/tmp").unwrap();
    let key_file = keydir.path().join("key");
    crate::util::keygen(&key_file);
    let key = key_of(&key_file);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let Message::Hello(hello) = read_msg(&mut s) else {
            return;
        };
        let mut hs = ServerHandshake::new(key, [4; 32], 8);
        let ch = hs.on_hello(&hello).unwrap();
        s.write_all(&encode(&Message::Challenge(ch))).unwrap();
        let Message::Auth(auth) = read_msg(&mut s) else {
            return;
        };
        let (_, keys) = hs.on_auth(&auth, [1; 16]).unwrap();
        let mut c = Control::new(s);
        c.secure(&keys, false);
        c.set_protocol(13);
        let _ = recv_any(&mut c);
        let info = Message::DaemonInfo(DaemonInfo {
            release: "A".repeat(16),
            protocol_oldest: 12,
            protocol_newest: 13,
            streams_max: 64,
            sessions_max: 8,
            sessions_running: 0,
            files_max: 1000,
            block_max: 1 << 20,
            pull_only: false,
            encryption_required: false,
            root_free_bytes: 1 << 30,
        });
        // Our encoder cuts the text to 16 characters; a daemon of its own
        // writes the 64 bytes the decoder takes.
        let bytes = encode_at(&info, 13).unwrap();
        let at = bytes.windows(16).position(|w| w == [b'A'; 16]).unwrap();
        let forged = b"0.2.0\x1b[2J\x1b]0;owned\x07\nencryption required  yes";
        let mut out = bytes[..at - 2].to_vec();
        out.extend_from_slice(&(forged.len() as u16).to_le_bytes());
        out.extend_from_slice(forged);
        out.extend_from_slice(&bytes[at + 16..]);
        let len = (out.len() - 4) as u32;
        out[..4].copy_from_slice(&len.to_le_bytes());
        write_sealed(&mut c, out);
        std::thread::sleep(Duration::from_millis(500));
    });
    let mut cmd = urmove();
    cmd.args(["info", "127.0.0.1", "-p", &port.to_string(), "--key-file"])
        .arg(&key_file);
    let o = output_within(cmd, Duration::from_secs(30));
    assert!(o.status.success(), "{}", stderr(&o));
    let out = crate::util::stdout(&o);
    assert!(
        !out.contains('\x1b') && !out.contains('\x07'),
        "the daemon's escape sequences reached the terminal: {out:?}"
    );
    // The forged newline is shown escaped, inside the release's line.
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with("encryption required"))
            .count(),
        1,
        "a line of the report forged by the daemon: {out:?}"
    );
}

/// FINDING (availability, a race of urmove's own client). Admission checks
/// that a session's streams fit under `--max-connections` beside the
/// connections open now, and in protocol 13 those include the session's
/// own early data streams (connected right after the Challenge): they are
/// counted twice. A 13 client whose early streams are accepted before its
/// request is read is refused "8 data streams asked, and the daemon has
/// room for 6 more connections" on an idle daemon where 1 + 8 fit (urmove
/// send -P 8 against --max-connections 12 failed 2 runs of 12). Here the
/// key holder connects its early streams just before its request, which
/// the Challenge allows. Safe: connections of this address not yet
/// authenticated (or not yet any session's) are not counted against the
/// request, so a session that fits is admitted.
#[test]
fn a_sessions_own_early_streams_do_not_count_against_its_admission() {
    let d = Daemon::start_full(
        &[],
        "127.0.0.1",
        Path::new("/var/tmp"),
        &["--max-connections", "10"],
    );
    let (mut c, _keys, answer) = open(d.port, &d.key, OURS);
    assert_eq!(answer.chosen, VERSION);
    let early: Vec<TcpStream> = (0..8.min(answer.room - 1))
        .map(|_| connect(d.port))
        .collect();
    assert_eq!(early.len(), 8);
    std::thread::sleep(Duration::from_millis(200));
    send_sealed(&mut c, &push_request(8, 1 << 20));
    send_sealed(&mut c, &Message::ManifestEnd);
    match reply(&mut c) {
        Ok(Message::LimitRefused { limit, asked, max, in_use }) => panic!(
            "refused its own streams: {limit:?} asked {asked}, max {max}, in use {in_use} (1 + 8 of 10 fit)"
        ),
        Ok(_) => {}
        Err(e) => panic!("{e}"),
    }
    drop(early);
}
