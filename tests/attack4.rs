//! A second key holder against the follow messages (protocol 7): each
//! attack a reviewer holding the key found, kept as a test. The daemon
//! stays up and within its memory, never grows a file past a short last
//! block, never keeps directory times without bound, and adds nothing after
//! a follow's end.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use urmove::protocol::control::{Message, REQ_FOLLOW};
use urmove::protocol::frame::FrameHeader;
use urmove::protocol::handshake::SessionKeys;
use urmove::protocol::manifest::{Entry, EntryKind};
use urmove::protocol::seal::frame_key;
use urmove::session::link::conn::Control;

use crate::follow::growing;
use crate::transfer::Daemon;

/// The daemon's resident memory, MiB.
fn rss_mib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|k| k.parse::<u64>().ok());
    kib.unwrap_or(0) / 1024
}

/// A follow session of `entries` in `block`-byte blocks, its one stream
/// open (the daemon hears control messages once its streams are in).
fn follow_session(
    d: &Daemon,
    entries: Vec<Entry>,
    block: u32,
) -> (Control, SessionKeys, TcpStream) {
    let (ctl, keys) = crate::util::hand_push_with(d.port, &d.key, entries, 1, block, REQ_FOLLOW)
        .unwrap_or_else(|m| panic!("refused: {m:?}"));
    let s = crate::util::data_stream(d.port, &keys, 0);
    std::thread::sleep(Duration::from_millis(300));
    (ctl, keys, s)
}

/// The daemon's refusal on `ctl`, within `secs`.
fn refusal(ctl: &mut Control, secs: u64) -> String {
    ctl.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        match urmove::session::link::conn::recv_any(ctl) {
            Ok(Message::Error { message, .. }) => return message,
            Ok(_) => {}
            Err(urmove::session::SessionError::Io { source, .. })
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
                ) => {}
            Err(e) => return format!("closed: {e}"),
        }
    }
    panic!("no refusal in {secs} s");
}

#[test]
fn an_end_of_2_to_the_62_bytes_is_refused_and_the_daemon_lives() {
    let mut d = Daemon::start();
    let (mut ctl, _k, _s) = follow_session(&d, vec![growing("g", 0)], 65536);
    let end = Message::FileEnd {
        file_index: 0,
        size: 1 << 62,
        mtime_s: 1,
        mtime_ns: 0,
    };
    crate::util::send_sealed(&mut ctl, &end);
    let e = refusal(&mut ctl, 5);
    assert!(e.contains("more than 4 GiB past its furthest block"), "{e}");
    assert!(d.alive(), "the daemon lives");
    assert!(rss_mib(d.pid()) < 512, "{} MiB", rss_mib(d.pid()));
}

#[test]
fn frames_4_gib_apart_grow_tables_only_within_the_sessions_budget() {
    let mut d = Daemon::start();
    let (files, block) = (6u32, 4096u32);
    let entries = (0..files).map(|i| growing(&format!("g{i}"), 0)).collect();
    let (mut ctl, keys, mut s) = follow_session(&d, entries, block);
    let (data, key) = (vec![7u8; block as usize], frame_key(&keys));
    let mut buf = Vec::new();
    for k in 0..1024u64 {
        for i in 0..files {
            let h = FrameHeader::for_payload(&key, i, k << 32, &data, 0);
            buf.extend_from_slice(&h.encode());
            buf.extend_from_slice(&data);
        }
        if s.write_all(&buf).is_err() {
            break;
        }
        buf.clear();
    }
    let e = refusal(&mut ctl, 10);
    assert!(
        e.contains("grew past the 16 MiB of block tables one session keeps"),
        "{e}"
    );
    assert!(d.alive());
    assert!(rss_mib(d.pid()) < 512, "{} MiB", rss_mib(d.pid()));
}

#[test]
fn nothing_grows_past_a_short_last_block() {
    let d = Daemon::start();
    let block = 65536u32;
    let (mut ctl, keys, mut s) = follow_session(&d, vec![growing("g", 0)], block);
    let key = frame_key(&keys);
    // 100 bytes at 0 (a short last block), then a whole block after it.
    let (short, whole) = (vec![b'A'; 100], vec![b'B'; block as usize]);
    let mut buf = Vec::new();
    for (off, data) in [(0u64, &short), (u64::from(block), &whole)] {
        let h = FrameHeader::for_payload(&key, 0, off, data, 0);
        buf.extend_from_slice(&h.encode());
        buf.extend_from_slice(data);
    }
    s.write_all(&buf).unwrap();
    let e = refusal(&mut ctl, 5);
    assert!(e.contains("past its short last block"), "{e}");
    assert!(!d.root.path().join("hand/g").exists(), "never committed");
}

#[test]
fn directory_times_are_kept_once_each_and_nothing_comes_after_the_end() {
    let mut d = Daemon::start();
    let dir = Entry {
        path: "d".into(),
        kind: EntryKind::Dir,
        mode: 0o755,
        ..Entry::default()
    };
    let (mut ctl, _k, _s) = follow_session(&d, vec![dir, growing("g", 0)], 65536);
    let before = rss_mib(d.pid());
    let same: Vec<(u32, i64, u32)> = (0..65536).map(|_| (0, 1, 0)).collect();
    for _ in 0..300 {
        crate::util::send_sealed(&mut ctl, &Message::DirTimes(same.clone()));
    }
    std::thread::sleep(Duration::from_secs(1));
    let after = rss_mib(d.pid());
    assert!(
        after < before + 64,
        "{before} -> {after} MiB for 300 repeats of one directory"
    );
    crate::util::send_sealed(&mut ctl, &Message::AddedEnd);
    let late = Message::Added {
        first: 2,
        entries: vec![growing("late", 0)],
    };
    crate::util::send_sealed(&mut ctl, &late);
    let e = refusal(&mut ctl, 5);
    assert!(e.contains("adds no more"), "{e}");
    assert!(d.alive());
}
