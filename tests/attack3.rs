//! The third attack review: each test reproduces one hole still open
//! after the second round, with real processes, sockets and files, and
//! asserts what the README promises instead (so it fails until the hole
//! is closed).
//!
//! - A key holder can leave a part whose unjournaled blocks hold its own
//!   bytes; a later `send --resume` of a sparse file sends holes for those
//!   blocks, the receiver writes nothing there, and the file commits with
//!   the key holder's bytes where the source has zeros.
//! - A key holder's symlink entry is not claimed like a file: it replaces
//!   a file another session already committed while that session is still
//!   running, and that session then exits 0 ("verified").
//! - What a resume holds is judged by an unkeyed 64-bit sum of per-piece
//!   terms: a key holder forges a different file with an equal digest
//!   (generalized birthday, seconds of hashing) and the victim's
//!   `send --resume` counts it as complete.

use std::io::Write;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

use urmove::protocol::frame::FrameHeader;
use urmove::protocol::manifest::{Entry, EntryKind};
use urmove::protocol::seal::frame_key;

use crate::transfer::Daemon;
use crate::util::{data_stream, hand_push, noise, output_within, stderr, stdout, urmove};

/// A bound against hangs only, never a speed check.
const HANG: Duration = Duration::from_secs(300);
const MTIME: i64 = 1_700_000_000;

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

fn entry(path: &str, kind: EntryKind, size: u64, mode: u32) -> Entry {
    Entry {
        path: path.into(),
        kind,
        size,
        data: 0,
        mode,
        mtime_s: MTIME,
        mtime_ns: 0,
        link: None,
        ..Default::default()
    }
}

fn set_mtime(p: &Path, secs: i64) {
    let f = std::fs::File::options().write(true).open(p).unwrap();
    f.set_times(
        std::fs::FileTimes::new()
            .set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs as u64)),
    )
    .unwrap();
}

fn send_cmd(d: &Daemon, extra: &[&str], args: &[&std::ffi::OsStr]) -> Command {
    let mut c = urmove();
    c.args(["send", "-p", &d.port.to_string(), "--key-file"])
        .arg(&d.key)
        .args(extra)
        .args(args);
    c
}

fn spawn(mut c: Command) -> Child {
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(child: Child) -> Output {
    let pid = child.id().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output().unwrap()));
    rx.recv_timeout(HANG).unwrap_or_else(|_| {
        let _ = Command::new("kill").args(["-9", &pid]).status();
        panic!("a client still ran after {HANG:?}")
    })
}

/// Wait until `cond` holds, at most `limit`.
fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

// ---- resume: hole frames over a part's stale bytes ---------------------

/// Blocks of the file [`key_holders_part`] leaves, and their size.
const PART_BLOCK: u64 = 64 << 10;
const PART_BLOCKS: u64 = 8;

/// A second key holder's session for `hand/NAME` (8 blocks of 64 KiB, the
/// mtime [`MTIME`]): holes for blocks 0..6, enough wire bytes to earn a
/// journal, then its own bytes for block 7 (from `seed`), and it hangs up
/// before any journal names that block. The part and its journal stay.
fn key_holders_part(d: &Daemon, name: &str, seed: u64) {
    // A directory that holds something: a small new file in an empty one
    // arrives with no name at all (an unnamed O_TMPFILE), which a hang-up
    // leaves nothing of; here its part is named and journaled.
    let hand = d.root.path().join("hand");
    std::fs::create_dir_all(&hand).unwrap();
    std::fs::write(hand.join("other"), b"held before").unwrap();
    let size = PART_BLOCK * PART_BLOCKS;
    let e = entry(name, EntryKind::File, size, 0o644);
    let (ctl, keys) = hand_push(d.port, &d.key, vec![e], 1, PART_BLOCK as u32).expect("ready");
    let key = frame_key(&keys);
    let mut data = data_stream(d.port, &keys, 0);
    for b in 0..6 {
        data.write_all(&FrameHeader::hole(&key, 0, b * PART_BLOCK).encode())
            .unwrap();
    }
    let journal = d.root.path().join(format!("hand/{name}.urmove.journal"));
    assert!(
        wait_until(Duration::from_secs(10), || journal.exists()),
        "no journal of the held holes; log: {}",
        d.log()
    );
    let evil = noise(PART_BLOCK as usize, seed);
    data.write_all(&FrameHeader::hole(&key, 0, 6 * PART_BLOCK).encode())
        .unwrap();
    data.write_all(&FrameHeader::for_payload(&key, 0, 7 * PART_BLOCK, &evil, 0).encode())
        .unwrap();
    data.write_all(&evil).unwrap();
    let part = d.root.path().join(format!("hand/{name}.urmove.part"));
    assert!(
        wait_until(Duration::from_secs(10), || std::fs::metadata(&part)
            .is_ok_and(|m| m.len() >= size)),
        "the key holder's last block never landed; log: {}",
        d.log()
    );
    drop((ctl, data));
    // Its session ends; the journaled part stays for --resume.
    std::thread::sleep(Duration::from_millis(500));
    assert!(part.exists() && journal.exists(), "the part was not kept");
}

/// The victim's `send --resume` of `f` into `hand`, one stream, the key
/// holder's block size.
fn resume_into_hand(d: &Daemon, f: &Path) -> Output {
    output_within(
        send_cmd(
            d,
            &["--resume", "-P", "1", "--block", "64K", "--json"],
            &[f.as_os_str(), "127.0.0.1:hand".as_ref()],
        ),
        HANG,
    )
}

/// A second key holder who knows only the size and mtime of a sparse file
/// someone will push (a fresh VM image, a preallocated output file) sends
/// the same entry itself: holes for the first blocks (enough wire bytes to
/// earn a journal), waits for the journal, then its own bytes for the last
/// block, and hangs up before any journal names that block. The part and
/// its journal stay for `--resume`. The victim's `send --resume` is offered
/// the journaled blocks (zeros on disk, equal to its holes: accepted), and
/// sends the rest of its sparse file as hole frames; the receiver writes
/// nothing for a hole, so the key holder's bytes stay in the part, the
/// digests (computed from the frames, not the disk) agree, and the file is
/// committed and reported verified with bytes the source never had.
#[test]
fn a_hole_frame_on_resume_never_leaves_a_parts_stale_bytes_in_a_verified_file() {
    let size = PART_BLOCK * PART_BLOCKS;
    let d = Daemon::start();

    key_holders_part(&d, "f", 66);

    // The victim: a sparse file of that size and mtime, all zeros.
    let src = tmp();
    let f = src.path().join("f");
    std::fs::File::create(&f).unwrap().set_len(size).unwrap();
    set_mtime(&f, MTIME);
    let o = resume_into_hand(&d, &f);
    let landed = std::fs::read(d.root.path().join("hand/f")).unwrap_or_default();
    let wrong = landed.iter().filter(|&&b| b != 0).count();
    assert!(
        !(o.status.code() == Some(0) && wrong > 0),
        "send --resume exited 0 (verified) but hand/f holds {wrong} bytes that are not the source's zeros (the key holder's block): {}",
        both(&o)
    );
    assert_eq!(wrong, 0, "hand/f differs from the source: {}", both(&o));
}

/// The same over a sparse frame (protocol 9): the victim's last block
/// holds 4 KiB of data and then zeros it does not hold, so it goes as that
/// piece and a map; the pieces left out must be cleared in the key
/// holder's part, not left holding its bytes under a "verified".
#[test]
fn a_sparse_frame_on_resume_clears_the_pieces_it_leaves_out() {
    let size = PART_BLOCK * PART_BLOCKS;
    let d = Daemon::start();
    key_holders_part(&d, "g", 67);

    // The victim: zeros it does not hold but for 4 KiB at the last block.
    let src = tmp();
    let f = src.path().join("g");
    let file = std::fs::File::create(&f).unwrap();
    file.set_len(size).unwrap();
    let island = noise(4096, 68);
    std::os::unix::fs::FileExt::write_all_at(&file, &island, 7 * PART_BLOCK).unwrap();
    drop(file);
    set_mtime(&f, MTIME);
    let o = resume_into_hand(&d, &f);
    let landed = std::fs::read(d.root.path().join("hand/g")).unwrap_or_default();
    let want = std::fs::read(&f).unwrap();
    assert!(
        !(o.status.code() == Some(0) && landed != want),
        "send --resume exited 0 (verified) but hand/g is not the source: {}",
        both(&o)
    );
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
}

// ---- a symlink entry is not claimed like a file -------------------------

/// While a sender's session runs, its files' names are claimed: a second
/// session for the same file waits, then is refused. A symlink entry
/// claims nothing, and preparing it removes whatever non-directory sits at
/// its name: a second key holder replaces a file the first session already
/// committed (here with a link to a file of its own), and the first
/// session, still sending its large file, then exits 0 with every file
/// "verified" while `run/a.txt` on the receiver is not its bytes.
#[test]
fn a_key_holders_symlink_never_replaces_a_file_of_a_session_still_running() {
    let d = Daemon::start();
    let src = tmp();
    let run = src.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    let a = noise(5000, 1);
    std::fs::write(run.join("a.txt"), &a).unwrap();
    std::fs::write(run.join("big.dat"), noise(6 << 20, 2)).unwrap();
    // The key holder's own file, pushed beforehand.
    let mine = src.path().join("mine.txt");
    std::fs::write(&mine, b"the key holder's words, not the sender's\n").unwrap();
    let o = output_within(
        send_cmd(&d, &[], &[mine.as_os_str(), "127.0.0.1:hand/".as_ref()]),
        HANG,
    );
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));

    let victim = spawn(send_cmd(
        &d,
        &[
            "--rate-limit",
            "8Mbit",
            "-P",
            "1",
            "--block",
            "1M",
            "--json",
        ],
        &[run.as_os_str(), "127.0.0.1:hand".as_ref()],
    ));
    let landed = d.root.path().join("hand/run/a.txt");
    let committed = wait_until(Duration::from_secs(20), || {
        std::fs::symlink_metadata(&landed).is_ok_and(|m| m.is_file())
    });
    let big_done = d.root.path().join("hand/run/big.dat").exists();
    // The second key holder: one symlink entry at the committed file.
    let mut link = entry("run/a.txt", EntryKind::Symlink, 0, 0o777);
    link.link = Some("../mine.txt".into());
    let hijack = hand_push(d.port, &d.key, vec![link], 1, 1 << 20);
    let o = finish(victim);
    drop(hijack);
    assert!(
        committed && !big_done,
        "timing: a.txt committed {committed}, big.dat done {big_done}"
    );
    let m = std::fs::symlink_metadata(&landed).unwrap();
    let now = if m.file_type().is_symlink() {
        std::fs::read(&landed).unwrap_or_default()
    } else if m.file_type().is_file() {
        std::fs::read(&landed).unwrap()
    } else {
        assert!(!m.file_type().is_fifo());
        Vec::new()
    };
    assert!(
        !(o.status.code() == Some(0) && (now != a || m.file_type().is_symlink())),
        "the sender exited 0 (every file verified) but hand/run/a.txt is now {} holding {:?}: {}",
        if m.file_type().is_symlink() {
            "a symlink"
        } else {
            "a file"
        },
        String::from_utf8_lossy(&now[..now.len().min(60)]),
        both(&o)
    );
}

// ---- resume: an unkeyed additive digest decides what is held ------------

/// Contents that differ from `orig` in its first 32 pieces (4 KiB each)
/// but have the same digest: the file digest is an unkeyed sum mod 2^64
/// of one term per piece, so finding 32 replacement pieces whose terms'
/// changes sum to zero is Wagner's generalized birthday problem (32
/// lists of a few thousand candidates: well under a second of hashing in
/// a release build).
fn forge_same_file_digest(orig: &[u8]) -> Vec<u8> {
    use std::collections::HashMap;
    use urmove::protocol::frame::content_terms;
    const PIECE: usize = 4096;
    const LISTS: usize = 32;
    const N: u32 = 3072;
    const CAP: usize = 8192;
    const BITS: u32 = 11;
    assert!(orig.len() >= LISTS * PIECE);
    let variant = |j: usize, v: u32| {
        let mut p = orig[j * PIECE..(j + 1) * PIECE].to_vec();
        p[..4].copy_from_slice(&v.to_le_bytes());
        p[4..8].copy_from_slice(b"EVIL");
        p
    };
    // Each list: (change of the digest, the variant chosen per piece).
    let mut lists: Vec<Vec<(u64, Vec<u32>)>> = (0..LISTS)
        .map(|j| {
            let at = (j * PIECE) as u64;
            let base = content_terms(at, &orig[j * PIECE..(j + 1) * PIECE]);
            (1..=N)
                .map(|v| {
                    (
                        content_terms(at, &variant(j, v)).wrapping_sub(base),
                        vec![v],
                    )
                })
                .collect()
        })
        .collect();
    let mut zeroed = 0u32;
    while lists.len() > 1 {
        zeroed = if lists.len() == 2 { 64 } else { zeroed + BITS };
        let mask = if zeroed == 64 {
            u64::MAX
        } else {
            (1u64 << zeroed) - 1
        };
        let mut next = Vec::new();
        for pair in lists.chunks(2) {
            let (a, b) = (&pair[0], &pair[1]);
            let mut by_low: HashMap<u64, Vec<usize>> = HashMap::new();
            for (k, (s, _)) in b.iter().enumerate() {
                by_low.entry(s & mask).or_default().push(k);
            }
            let mut merged = Vec::new();
            'a: for (s, picks) in a {
                if let Some(ks) = by_low.get(&(s.wrapping_neg() & mask)) {
                    for &k in ks {
                        let mut p = picks.clone();
                        p.extend_from_slice(&b[k].1);
                        merged.push((s.wrapping_add(b[k].0), p));
                        if merged.len() >= CAP {
                            break 'a;
                        }
                    }
                }
            }
            next.push(merged);
        }
        lists = next;
    }
    let (sum, picks) = lists[0]
        .first()
        .expect("a zero sum (retry with larger lists)")
        .clone();
    assert_eq!(sum, 0);
    let mut out = orig.to_vec();
    for (j, v) in picks.into_iter().enumerate() {
        out[j * PIECE..(j + 1) * PIECE].copy_from_slice(&variant(j, v));
    }
    assert_eq!(content_terms(0, &out), content_terms(0, orig));
    out
}

/// A second key holder who has a copy of a file someone will push again
/// with `--resume` (a shared data set: same size, same mtime) pushes a
/// file of its own first, under that name and with that mtime, whose 64-bit
/// digest it made equal to the original's (see above) while 32 of its
/// pieces are its own bytes. The daemon commits and stamps it (it is what
/// that key holder sent). The victim's `send --resume` is offered the file
/// as complete, compares only the unkeyed digest, agrees, and exits 0 with
/// "1 files complete" while 32 of the file's pieces on the receiver carry
/// the key holder's bytes ("EVIL" and a counter in each). With `--checksum` no stamp is needed at all, so a local
/// user who can write under the root plants the file directly.
#[test]
fn a_resume_never_counts_a_file_with_a_forged_equal_digest_as_held() {
    let d = Daemon::start();
    let src = tmp();
    let orig = noise(64 * 4096, 77);
    let forged = forge_same_file_digest(&orig);
    assert_ne!(forged, orig);
    let theirs = src.path().join("theirs");
    std::fs::create_dir_all(&theirs).unwrap();
    std::fs::write(theirs.join("data.bin"), &forged).unwrap();
    set_mtime(&theirs.join("data.bin"), MTIME);
    // The key holder is another client, with a state directory of its own.
    let state = tmp();
    let o = output_within(
        send_cmd(
            &d,
            &["--state-dir", state.path().to_str().unwrap()],
            &[
                theirs.join("data.bin").as_os_str(),
                "127.0.0.1:hand/".as_ref(),
            ],
        ),
        HANG,
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "the key holder's push: {}",
        both(&o)
    );

    let mine = src.path().join("data.bin");
    std::fs::write(&mine, &orig).unwrap();
    set_mtime(&mine, MTIME);
    let o = output_within(
        send_cmd(
            &d,
            &["--resume", "--json"],
            &[mine.as_os_str(), "127.0.0.1:hand/".as_ref()],
        ),
        HANG,
    );
    let landed = std::fs::read(d.root.path().join("hand/data.bin")).unwrap();
    let differ = landed.iter().zip(&orig).filter(|(a, b)| a != b).count();
    assert!(
        !(o.status.code() == Some(0) && landed != orig),
        "send --resume exited 0 (verified) but hand/data.bin differs from the source in {differ} bytes (the key holder's pieces): {}",
        both(&o)
    );
}
