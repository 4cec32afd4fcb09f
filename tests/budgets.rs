//! What a key holder cannot stretch: a trickle is not progress (data or
//! control), manifests count against a daemon-wide memory budget, a huge
//! sparse file fed a block at a time writes no more journal than it sends,
//! and what an interrupted session left is removed after `--part-max-age`.

use std::io::Write;
use std::net::Shutdown;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use urmove::protocol::control::{encode, Message};
use urmove::protocol::frame::FrameHeader;
use urmove::protocol::manifest::{Entry, EntryKind};
use urmove::protocol::seal::frame_key;

use crate::transfer::Daemon;
use crate::util::{
    data_stream, hand_push, handshake, noise, push_request, sealed_replies, send_sealed,
};

fn file(path: &str, size: u64) -> Entry {
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

/// The daemon's log until it holds `what`, or `limit` passes.
fn log_until(d: &Daemon, what: &str, limit: Duration) -> String {
    let until = Instant::now() + limit;
    let mut log = String::new();
    while Instant::now() < until && !log.contains(what) {
        log += &d.log();
        log.push('\n');
        std::thread::sleep(Duration::from_millis(50));
    }
    log
}

#[test]
fn a_sender_trickling_a_byte_a_second_is_ended_by_the_minimum_rate() {
    let mut d = Daemon::start_full(
        &[],
        "127.0.0.1",
        Path::new("/var/tmp"),
        &["--timeout", "3s"],
    );
    let (mut ctl, keys) =
        hand_push(d.port, &d.key, vec![file("f", 1 << 20)], 1, 1 << 20).expect("ready");
    let mut data = data_stream(d.port, &keys, 0);
    let payload = noise(1 << 20, 9);
    let h = FrameHeader::for_payload(&frame_key(&keys), 0, 0, &payload, 0);
    data.write_all(&h.encode()).unwrap();
    // A byte a second: every read of the daemon succeeds, and the session
    // would outlive --timeout forever if any byte were progress.
    let started = Instant::now();
    let trickle = std::thread::spawn(move || {
        for b in payload.iter().take(30) {
            if data.write_all(&[*b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    let log = log_until(&d, "minimum rate", Duration::from_secs(25));
    assert!(log.contains("below the minimum rate"), "{log}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "ended only after {:?}",
        started.elapsed()
    );
    let reply = sealed_replies(&mut ctl);
    assert!(
        reply.iter().any(|m| matches!(m, Message::Error { .. })),
        "{reply:?}"
    );
    assert!(!d.root.path().join("hand/f").exists());
    let _ = trickle.join();
    assert!(d.alive());
}

#[test]
fn a_control_message_trickled_in_is_cut_off_at_the_timeout() {
    let mut d = Daemon::start_full(
        &[],
        "127.0.0.1",
        Path::new("/var/tmp"),
        &["--timeout", "3s"],
    );
    let (mut ctl, _keys) = handshake(d.port, &d.key);
    send_sealed(&mut ctl, &push_request(1, 1 << 20));
    // A manifest part announced whole, then its bytes two a second: every
    // read succeeds, the message would take minutes.
    let entries: Vec<Entry> = (0..200).map(|i| file(&format!("f{i}"), 1)).collect();
    let bytes = encode(&Message::Manifest(entries));
    let mut tcp = ctl.tcp().try_clone().unwrap();
    let started = Instant::now();
    let slow = std::thread::spawn(move || {
        for chunk in bytes.chunks(1).take(60) {
            if tcp.write_all(chunk).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let _ = tcp.shutdown(Shutdown::Write);
    });
    let reply = sealed_replies(&mut ctl);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(12),
        "the daemon waited {took:?}: {reply:?}"
    );
    let log = log_until(&d, "went silent", Duration::from_secs(5));
    assert!(log.contains("the peer went silent"), "{log}");
    let _ = slow.join();
    assert!(d.alive());
}

#[test]
fn manifests_of_all_sessions_count_against_the_daemon_wide_budget() {
    let mut d = Daemon::start_full(
        &[],
        "127.0.0.1",
        Path::new("/var/tmp"),
        &["--max-manifest-memory", "4M"],
    );
    // 2000 entries with 100-byte names: about 2.6 MiB of the 4 each.
    let many = |prefix: &str| -> Vec<Entry> {
        (0..2000)
            .map(|i| file(&format!("{prefix}{i:099}"), 1))
            .collect()
    };
    // The first session's manifest is held while it waits for its streams.
    let first = hand_push(d.port, &d.key, many("a"), 1, 65536).expect("the first fits");
    // A second one as large does not fit beside it: refused, with the
    // limit as its numbers (protocol 13).
    let second = hand_push(d.port, &d.key, many("b"), 1, 65536);
    match second {
        Err(Message::LimitRefused {
            limit,
            asked,
            max,
            in_use,
        }) => {
            assert_eq!(limit, urmove::protocol::control::Limit::ManifestMemory);
            assert_eq!(max, 4 << 20);
            assert!(
                in_use > 2 << 20 && asked > 0 && in_use + asked > max,
                "{in_use} {asked}"
            );
        }
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("two manifests beyond the budget were both taken"),
    }
    // Once the first session ends, its memory is back.
    drop(first);
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match hand_push(d.port, &d.key, many("c"), 1, 65536) {
            Ok(_) => break,
            Err(m) if Instant::now() > until => panic!("still refused: {m:?}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
    assert!(d.alive());
}

/// Bytes the process `pid` wrote to storage (`/proc/PID/io` write_bytes).
fn written(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap()
}

#[test]
fn a_huge_sparse_file_fed_a_block_at_a_time_writes_no_more_journal_than_it_sends() {
    let mut d = Daemon::start();
    // 2^30 blocks of 4 KiB: a journal bitmap of 128 MiB if written whole.
    let size = 4096u64 << 30;
    let (_ctl, keys) = hand_push(d.port, &d.key, vec![file("huge", size)], 1, 4096).expect("ready");
    let mut data = data_stream(d.port, &keys, 0);
    let before = written(d.pid());
    let mut sent = 0u64;
    // A block every 200 ms for 5 s, far apart, so the blocks stay apart.
    for i in 0..25u64 {
        let offset = i * 40_000_000 * 4096;
        let block = noise(4096, i);
        let h = FrameHeader::for_payload(&frame_key(&keys), 0, offset, &block, 0);
        data.write_all(&[&h.encode()[..], &block].concat()).unwrap();
        sent += 4096 + 32;
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let wrote = written(d.pid()) - before;
    // The blocks themselves (each a 4 KiB write) and journals no larger
    // than the frames that came: far below one 128 MiB bitmap.
    assert!(
        wrote < 16 * sent + (4 << 20),
        "wrote {wrote} bytes for {sent} sent"
    );
    let journal = d.root.path().join("hand/huge.urmove.journal");
    if let Ok(m) = std::fs::metadata(&journal) {
        assert!(m.len() < 64 << 10, "a journal of {} bytes", m.len());
    }
    assert!(d.alive());
}

/// Set `p`'s mtime `days` back.
fn age(p: &Path, days: u64) {
    let t = SystemTime::now() - Duration::from_secs(days * 86400);
    std::fs::File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_times(std::fs::FileTimes::new().set_modified(t))
        .unwrap();
}

#[test]
fn parts_and_journals_older_than_part_max_age_are_removed_and_nothing_else() {
    // Parts older than 5 s go (swept every 1.25 s); a fresh one stays.
    let mut d = Daemon::start_full(
        &[],
        "127.0.0.1",
        Path::new("/var/tmp"),
        &["--part-max-age", "5s"],
    );
    let outside = tempfile::tempdir_in("/var/tmp").unwrap();
    let far = outside.path().join("x.urmove.part");
    std::fs::write(&far, b"not the daemon's").unwrap();
    age(&far, 30);
    let root = d.root.path();
    // A link out of the root is never followed.
    std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
    // The tree is made and aged beside the root and renamed in at once, so
    // no sweep sees it half aged.
    let staging = tempfile::tempdir_in("/var/tmp").unwrap();
    let [old_part, old_journal, old_tmp, fresh, old_data] = [
        "run/sub/a.urmove.part",
        "run/sub/a.urmove.journal",
        "run/b.urmove.journal.tmp",
        "run/sub/c.urmove.part",
        "run/sub/d.dat",
    ]
    .map(PathBuf::from);
    std::fs::create_dir_all(staging.path().join("run/sub")).unwrap();
    for p in [&old_part, &old_journal, &old_tmp, &fresh, &old_data] {
        std::fs::write(staging.path().join(p), b"x").unwrap();
    }
    for p in [&old_part, &old_journal, &old_tmp, &old_data] {
        age(&staging.path().join(p), 8);
    }
    std::fs::rename(staging.path().join("run"), root.join("run")).unwrap();
    let [old_part, old_journal, old_tmp, fresh, old_data] =
        [old_part, old_journal, old_tmp, fresh, old_data].map(|p| root.join(p));
    let made = Instant::now();
    let log = log_until(&d, "removed 3 part files", Duration::from_secs(4));
    assert!(log.contains("removed 3 part files and journals"), "{log}");
    assert!(
        made.elapsed() < Duration::from_secs(5),
        "too late to judge the fresh part"
    );
    for p in [&old_part, &old_journal, &old_tmp] {
        assert!(!p.exists(), "{} stayed", p.display());
    }
    assert!(fresh.exists(), "a fresh part was removed");
    assert!(old_data.exists(), "an old data file was removed");
    assert!(far.exists(), "followed a link out of the root");
    assert!(d.alive());
}
