//! Sparse files arrive as sparse as they left (protocol 9): islands of
//! data of every size at unaligned places, holes at the start and the end,
//! a file all hole; pushed, pulled, sealed and resumed, each identical byte
//! for byte with its allocated size (`st_blocks`) within one 4 KiB block
//! per extent of the source's. `-S` leaves zeros inside data as holes too.

use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::faults::{send_child, wait_for_percent};
use crate::transfer::{assert_same_tree, Daemon};
use crate::util::{json, noise, stderr, stdout, urmove};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// Sectors (512 bytes) of one 4 KiB block.
const BLOCK_SECTORS: u64 = 8;

/// A file of `size` bytes holding data only in `islands` (offset, bytes).
fn sparse_file(path: &Path, size: u64, islands: &[(u64, u64)]) {
    let f = std::fs::File::create(path).unwrap();
    f.set_len(size).unwrap();
    for (k, &(at, len)) in islands.iter().enumerate() {
        f.write_all_at(&noise(len as usize, 40 + k as u64), at)
            .unwrap();
    }
}

/// A file's name, size and islands (offset, bytes).
type SparseFile = (&'static str, u64, Vec<(u64, u64)>);

/// The files the issue names: islands of 4 KiB, 64 KiB, 1 MiB and 5 MiB
/// at unaligned places, holes at the start and the end, three islands in
/// 64 MiB, data at both ends, and a file all hole. Returns the tree's top
/// and each file's islands.
fn sparse_tree(parent: &Path) -> (PathBuf, Vec<(&'static str, usize)>) {
    let top = parent.join("images");
    std::fs::create_dir_all(&top).unwrap();
    let files: [SparseFile; 7] = [
        ("island-4k", 16 * MIB, vec![(5 * MIB + 1234, 4 * KIB)]),
        ("island-64k", 16 * MIB, vec![(3 * MIB + 100, 64 * KIB)]),
        ("island-1m", 24 * MIB, vec![(7 * MIB + 4097, MIB)]),
        ("island-5m", 40 * MIB, vec![(11 * MIB + 999, 5 * MIB)]),
        (
            "three-in-64m",
            64 * MIB,
            vec![
                (3 * MIB + 12_345, MIB),
                (30 * MIB, MIB),
                (60 * MIB + 777, MIB),
            ],
        ),
        (
            "data-at-both-ends",
            20 * MIB,
            vec![(0, 100_000), (20 * MIB - 70_000, 70_000)],
        ),
        ("all-hole", 16 * MIB, vec![]),
    ];
    let mut islands = Vec::new();
    for (name, size, at) in &files {
        sparse_file(&top.join(name), *size, at);
        islands.push((*name, at.len()));
    }
    (top, islands)
}

/// Every file of `got` has the bytes of `want` and, within one 4 KiB block
/// per extent, its allocation; one block more is the receiver's stamp
/// (`user.urmove`), which ext4 keeps in a block of its own.
fn assert_as_sparse(want: &Path, got: &Path, islands: &[(&str, usize)]) {
    assert_same_tree(want, got);
    for (name, extents) in islands {
        let (w, g) = (want.join(name), got.join(name));
        let (ws, gs) = (
            std::fs::metadata(&w).unwrap().blocks(),
            std::fs::metadata(&g).unwrap().blocks(),
        );
        let slack = BLOCK_SECTORS * (*extents as u64 + 1);
        assert!(
            gs <= ws + slack && gs + slack >= ws,
            "{name}: {gs} sectors allocated, the source {ws} (slack {slack})"
        );
    }
}

/// The progress of a `--json-stream` run counts data alone: every
/// interval's total is the data the summary counts (holes never count, so
/// progress never leaps over one), nothing is counted done without
/// crossing (no `-S`), and the last interval reaches the total.
fn assert_reaches_the_end(o: &std::process::Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", stderr(o));
    let out = stdout(o);
    let summary: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(summary["status"], "ok", "{summary}");
    let intervals: Vec<serde_json::Value> = out
        .lines()
        .filter(|l| l.contains("\"type\":\"interval\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let last = intervals
        .last()
        .unwrap_or_else(|| panic!("no interval: {out}"));
    let total =
        summary["bytes_total"].as_u64().unwrap() - summary["bytes_skipped"].as_u64().unwrap();
    for v in &intervals {
        assert_eq!(v["expected_bytes"].as_u64(), Some(total), "{v}");
        assert_eq!(v["unsent_bytes"], 0, "{v}");
    }
    assert_eq!(last["total_bytes"].as_u64(), Some(total), "{last}");
    assert!(
        summary["bytes_apparent"].as_u64().unwrap() > summary["bytes_total"].as_u64().unwrap(),
        "{summary}"
    );
    summary
}

fn pull(d: &Daemon, extra: &[&str], path: &str, into: &Path) -> std::process::Output {
    urmove()
        .args(["pull", "-p", &d.port.to_string(), "--key-file"])
        .arg(&d.key)
        .args(extra)
        .arg(format!("127.0.0.1:{path}"))
        .arg(into)
        .output()
        .unwrap()
}

#[test]
fn islands_and_holes_arrive_as_sparse_as_they_left_on_push_and_pull() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let (top, islands) = sparse_tree(src.path());
    let stream = ["--json-stream", "--interval", "20ms"];
    let o = d.send(&stream, &[top.to_str().unwrap(), "127.0.0.1:in"]);
    let v = assert_reaches_the_end(&o);
    // The data crossed, and no hole's zeros: 12.3 MiB of 196 MiB.
    let data: u64 = 4 * KIB + 64 * KIB + MIB + 5 * MIB + 3 * MIB + 170_000;
    let bytes = v["bytes"].as_u64().unwrap();
    assert!(bytes >= data && bytes < data + 64 * KIB, "{v}");
    assert_as_sparse(&top, &d.root.path().join("in/images"), &islands);

    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    let o = pull(&d, &stream, "in/images", local.path());
    assert_reaches_the_end(&o);
    assert_as_sparse(&top, &local.path().join("images"), &islands);

    // Sealed, both ways: the same.
    let o = d.send(
        &["--encrypt", "--json"],
        &[top.to_str().unwrap(), "127.0.0.1:sealed"],
    );
    assert_eq!(json(&o)["status"], "ok", "{}", stderr(&o));
    assert_as_sparse(&top, &d.root.path().join("sealed/images"), &islands);
    let back = tempfile::tempdir_in("/var/tmp").unwrap();
    let o = pull(&d, &["--encrypt", "--json"], "sealed/images", back.path());
    assert_eq!(json(&o)["status"], "ok", "{}", stderr(&o));
    assert_as_sparse(&top, &back.path().join("images"), &islands);
}

#[test]
fn dash_s_leaves_zeros_inside_data_as_holes_and_only_when_asked() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("z");
    std::fs::create_dir_all(&top).unwrap();
    // 16 MiB of written zeros, then 4 KiB of data and 100 bytes: all
    // allocated, nothing a hole.
    let mut bytes = vec![0u8; 16 << 20];
    bytes.extend(noise(4196, 5));
    std::fs::write(top.join("zeros.img"), &bytes).unwrap();
    let sectors = |p: &Path| std::fs::metadata(p).unwrap().blocks();
    assert!(sectors(&top.join("zeros.img")) >= 2 * 16 * 1024);

    let o = d.send(&["--json"], &[top.to_str().unwrap(), "127.0.0.1:plain"]);
    assert_eq!(json(&o)["status"], "ok", "{}", stderr(&o));
    let plain = d.root.path().join("plain/z/zeros.img");
    assert!(
        sectors(&plain) >= 2 * 16 * 1024,
        "without -S zeros are data"
    );

    let o = d.send(
        &["--json", "-S"],
        &[top.to_str().unwrap(), "127.0.0.1:holes"],
    );
    let v = json(&o);
    assert_eq!(v["status"], "ok", "{v}");
    assert!(
        v["bytes"].as_u64().unwrap() < 64 * KIB,
        "the zeros stayed home: {v}"
    );
    assert_same_tree(&top, &d.root.path().join("holes/z"));
    let holes = d.root.path().join("holes/z/zeros.img");
    assert!(sectors(&holes) <= 3 * BLOCK_SECTORS, "{}", sectors(&holes));

    // A pull asks the daemon for the same.
    let local = tempfile::tempdir_in("/var/tmp").unwrap();
    let o = pull(&d, &["--json", "-S"], "plain/z", local.path());
    assert_eq!(json(&o)["status"], "ok", "{}", stderr(&o));
    assert_same_tree(&top, &local.path().join("z"));
    assert!(sectors(&local.path().join("z/zeros.img")) <= 3 * BLOCK_SECTORS);
}

#[test]
fn a_sparse_file_killed_half_way_continues_and_stays_sparse() {
    let d = Daemon::start();
    let src = tempfile::tempdir_in("/var/tmp").unwrap();
    let top = src.path().join("img");
    std::fs::create_dir_all(&top).unwrap();
    // 1 MiB islands every 4 MiB (one unaligned): 48 MiB of data in 192.
    let islands: Vec<(u64, u64)> = (0..48)
        .map(|k| (k * 4 * MIB + if k == 7 { 4097 } else { 0 }, MIB))
        .collect();
    sparse_file(&top.join("vm.img"), 192 * MIB, &islands);
    let args = [top.to_str().unwrap(), "127.0.0.1:in"];
    let mut first = send_child(&d, d.port, &["--rate-limit", "10MB", "-P", "2"], &args);
    wait_for_percent(&d, 50.0);
    // Killed once the receiver journaled what it holds (at most once a
    // second): what a continued part needs.
    let journal = d.root.path().join("in/img/vm.img.urmove.journal");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !journal.exists() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    first.kill().unwrap();
    let _ = first.wait();
    assert!(!d.root.path().join("in/img/vm.img").exists());

    let v = json(&d.send(&["--json"], &args));
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(v["files_continued"], 1, "{v}");
    let skipped = v["bytes_skipped"].as_u64().unwrap();
    assert!(skipped > 0 && skipped <= 192 * MIB, "{v}");
    assert!(v["bytes"].as_u64().unwrap() < 48 * MIB, "{v}");
    assert_as_sparse(&top, &d.root.path().join("in/img"), &[("vm.img", 48)]);
}

/// A file entry of `size` bytes for a hand-made push.
fn file_entry(name: &str, size: u64) -> urmove::protocol::manifest::Entry {
    urmove::protocol::manifest::Entry {
        path: name.into(),
        kind: urmove::protocol::manifest::EntryKind::File,
        size,
        mode: 0o644,
        mtime_s: 1_700_000_000,
        ..Default::default()
    }
}

/// A sender's sparse frame of `block` (entry 0, at `offset`), keeping the
/// pieces `map` marks: its header and payload.
fn sparse_frame(
    key: &urmove::protocol::frame::FrameKey,
    offset: u64,
    block: &[u8],
    map: &urmove::protocol::sparse::Map,
) -> (urmove::protocol::frame::FrameHeader, Vec<u8>) {
    let plain = urmove::protocol::frame::FrameHeader::for_payload(key, 0, offset, block, 0);
    let mut payload = block.to_vec();
    let len = urmove::protocol::sparse::pack(&mut payload, map);
    payload.truncate(len);
    (plain.packed(len), payload)
}

/// A key holder's sparse frames that do not add up: a map claiming more
/// pieces than came, a span that is not the block's, a span on a frame
/// not marked sparse. Each ends its session, with nothing committed; an
/// honest one of the same block is written.
#[test]
fn sparse_frames_that_do_not_add_up_are_refused() {
    use std::io::Write;
    use urmove::protocol::frame::{FrameHeader, FLAG_SPARSE};
    use urmove::protocol::seal::frame_key;
    use urmove::protocol::sparse::Map;

    const BLOCK: usize = 64 << 10;
    const FAILED: &str = "push session failed";
    let d = Daemon::start();
    let mut block = vec![0u8; BLOCK];
    block[3 * 4096..4 * 4096].copy_from_slice(&noise(4096, 9));
    let mut map = Map::new(BLOCK);
    map.set(3);
    // (name, what is wrong with it)
    type Spoil = fn(&mut FrameHeader, &mut Vec<u8>);
    let cases: [(&str, Spoil); 4] = [
        ("more-pieces", |_, p| {
            let at = p.len() - 2;
            p[at] |= 0x01;
        }),
        ("short-span", |h, _| h.span -= 4096),
        ("not-marked", |h, _| h.flags &= !FLAG_SPARSE),
        ("honest", |_, _| {}),
    ];
    for (name, spoil) in cases {
        let e = file_entry(name, BLOCK as u64);
        let (ctl, keys) =
            crate::util::hand_push(d.port, &d.key, vec![e], 1, BLOCK as u32).expect("ready");
        let (mut h, mut payload) = sparse_frame(&frame_key(&keys), 0, &block, &map);
        spoil(&mut h, &mut payload);
        let mut data = crate::util::data_stream(d.port, &keys, 0);
        let _ = data.write_all(&h.encode());
        let _ = data.write_all(&payload);
        let part = d.root.path().join(format!("hand/{name}.urmove.part"));
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut log = String::new();
        while std::time::Instant::now() < until {
            log += &d.log();
            let written = std::fs::metadata(&part).is_ok_and(|m| m.len() > 0);
            if (name == "honest" && written) || (name != "honest" && log.contains(FAILED)) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        drop((ctl, data));
        let wrote = std::fs::read(&part).unwrap_or_default();
        match name {
            // Written as far as its last data piece (the size comes at the end).
            "honest" => assert_eq!(&wrote[..], &block[..wrote.len()], "the honest block"),
            _ => assert!(log.contains(FAILED), "{name}: {log}"),
        }
        assert!(!d.root.path().join("hand").join(name).exists(), "{name}");
    }
}

/// A key holder's good sparse frame leaves its map in a pooled buffer;
/// its next frame, sparse with a map that does not fit its span, is
/// refused as such (it once found the old map there and panicked the
/// lane, leaving the session without an answer).
#[test]
fn a_bad_sparse_map_after_a_good_one_is_refused_not_a_panic() {
    use std::io::Write;
    use urmove::protocol::frame::{FrameHeader, FLAG_SPARSE};
    use urmove::protocol::seal::frame_key;
    use urmove::protocol::sparse::Map;

    const BLOCK: usize = 64 << 10;
    let d = Daemon::start();
    let e = file_entry("p", 2 * BLOCK as u64);
    let (ctl, keys) =
        crate::util::hand_push(d.port, &d.key, vec![e], 1, BLOCK as u32).expect("ready");
    let mut data = crate::util::data_stream(d.port, &keys, 0);
    // Block 0: pieces 5, 6 and 7 (map byte 0xE0).
    let mut block = vec![0u8; BLOCK];
    block[5 * 4096..8 * 4096].copy_from_slice(&noise(3 * 4096, 1));
    let mut map = Map::new(BLOCK);
    (5..8).for_each(|k| map.set(k));
    let (h, payload) = sparse_frame(&frame_key(&keys), 0, &block, &map);
    data.write_all(&h.encode()).unwrap();
    data.write_all(&payload).unwrap();
    let part = d.root.path().join("hand/p.urmove.part");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < until && !std::fs::metadata(&part).is_ok_and(|m| m.len() > 0)
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Then a one-piece span whose one-byte map marks piece 1.
    let bad = FrameHeader {
        flags: FLAG_SPARSE,
        file_index: 0,
        length: 1,
        span: 4096,
        offset: BLOCK as u64,
        checksum: 0,
    };
    data.write_all(&bad.encode()).unwrap();
    data.write_all(&[0x02]).unwrap();
    let mut ctl = ctl;
    let replies = crate::util::sealed_replies(&mut ctl);
    drop(data);
    let error = replies.iter().find_map(|m| match m {
        urmove::protocol::control::Message::Error { message, .. } => Some(message.clone()),
        _ => None,
    });
    let log = d.log();
    assert!(!log.contains("panicked"), "{log}");
    let error = error.unwrap_or_else(|| panic!("no answer: {replies:?}\n{log}"));
    assert!(
        error.contains("marks pieces past the block's end"),
        "{error}"
    );
}

/// A growing file grows by data only: a sparse frame past its end (one of
/// no pieces is a hole by another name, 33 bytes on the wire) is refused.
#[test]
fn a_sparse_frame_never_grows_a_growing_file() {
    use std::io::Write;
    use urmove::protocol::control::{Message, REQ_FOLLOW};
    use urmove::protocol::frame::{FrameHeader, FLAG_SPARSE};
    use urmove::protocol::seal::frame_key;

    let d = Daemon::start();
    let block = 4096u32;
    let (mut ctl, keys) = crate::util::hand_push_with(
        d.port,
        &d.key,
        vec![crate::follow::growing("g", 0)],
        1,
        block,
        REQ_FOLLOW,
    )
    .expect("ready");
    let mut s = crate::util::data_stream(d.port, &keys, 0);
    let plain = FrameHeader::for_payload(&frame_key(&keys), 0, 0, &[0u8; 4096], 0);
    let h = FrameHeader {
        flags: FLAG_SPARSE,
        length: 1,
        span: block,
        ..plain
    };
    let _ = s.write_all(&h.encode()).and_then(|()| s.write_all(&[0]));
    let replies = crate::util::sealed_replies(&mut ctl);
    let error = replies.iter().find_map(|m| match m {
        Message::Error { message, .. } => Some(message.clone()),
        _ => None,
    });
    let error = error.unwrap_or_else(|| panic!("no refusal: {replies:?}"));
    assert!(error.contains("a sparse block past its end"), "{error}");
}
