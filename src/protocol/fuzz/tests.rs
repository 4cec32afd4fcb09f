//! The fuzz bodies replayed on the committed corpus and every past
//! finding, and the seed corpus made by the real encoders.

use std::path::{Path, PathBuf};

use super::frame::FUZZ_KEY;
use super::handshake::{op, run_handshake, CLIENT_NONCE, KEY, SESSION_ID};
use super::{conversation, conversation_seed, frame, handshake, manifest, run_conversation};
use crate::protocol::control::{self, Message};
use crate::protocol::conversation::{Role, State};
use crate::protocol::frame::{FrameHeader, FLAG_END, FLAG_UNCHECKED};
use crate::protocol::handshake::{format_key, Auth, Hello};
use crate::protocol::manifest::{decode_entry, encode_entry, Entry, EntryKind};
use crate::protocol::wire::{Reader, Writer};

type Body = fn(&[u8]);
const TARGETS: [(&str, Body); 4] = [
    ("conversation", conversation),
    ("frame", frame),
    ("handshake", handshake),
    ("manifest", manifest),
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// The files of `dir` (none if it does not exist), by name.
fn inputs(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, Vec<u8>)> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && !p.ends_with(".gitkeep"))
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    out.sort();
    out
}

/// Every committed seed and every past finding passes its body again.
#[test]
fn corpus_and_regressions_replay() {
    let mut count = 0;
    for (target, body) in TARGETS {
        for set in ["corpus", "regressions"] {
            for (path, bytes) in inputs(&fuzz_dir().join(set).join(target)) {
                let run = std::panic::catch_unwind(|| body(&bytes));
                assert!(run.is_ok(), "{} fails its fuzz body", path.display());
                count += 1;
            }
        }
    }
    assert!(count >= seeds().len(), "only {count} inputs under fuzz/");
}

/// A sparse frame as a sender makes it: a block of 5 pieces (the last
/// short) of which the second and the last came.
fn sparse_seed() -> Vec<u8> {
    use crate::protocol::sparse::{pack, Map};
    let span = 4 * 4096 + 100;
    let mut block = vec![0u8; span];
    block[4096..8192].fill(3);
    block[4 * 4096..].fill(9);
    let plain = FrameHeader::for_payload(&FUZZ_KEY, 0, 0, &block, 0);
    let mut map = Map::new(span);
    map.set(1);
    map.set(4);
    let len = pack(&mut block, &map);
    frame_seed(plain.packed(len), &[span as u64], &block[..len])
}

fn frame_seed(h: FrameHeader, sizes: &[u64], payload: &[u8]) -> Vec<u8> {
    let mut out = h.encode().to_vec();
    out.push(sizes.len() as u8);
    for s in sizes {
        out.extend_from_slice(&s.to_le_bytes());
    }
    out.extend_from_slice(payload);
    out
}

fn entry(path: &str, kind: EntryKind, size: u64, link: Option<&str>) -> Entry {
    Entry {
        path: path.into(),
        kind,
        size,
        data: 0,
        mode: if kind == EntryKind::Dir { 0o755 } else { 0o644 },
        mtime_s: 1_700_000_000,
        mtime_ns: 250_000_000,
        link: link.map(String::from),
        ..Default::default()
    }
}

fn entries_seed(entries: &[Entry]) -> Vec<u8> {
    let mut w = Writer::default();
    for e in entries {
        encode_entry(&mut w, e);
    }
    w.buf
}

fn message_seed(ops: &[u8], then: &[Message]) -> Vec<u8> {
    let mut out = ops.to_vec();
    for m in then {
        out.push(op::INJECT);
        out.extend_from_slice(&control::encode(m));
    }
    out
}

/// A seed of the corpus: `(target, name, bytes)`.
type Seed = (&'static str, &'static str, Vec<u8>);

/// The seed corpus, made by the real encoders.
fn seeds() -> Vec<Seed> {
    let mut all = frame_seeds();
    all.extend(handshake_seeds());
    all.extend(manifest_seeds());
    all.extend(conversation_seeds());
    all
}

/// Each role's way when nothing is amiss: resuming where it can, a dry
/// pull's shard, and a push in a dialect without a welcome, a ready or a
/// verdict on nothing held.
fn conversation_seeds() -> Vec<Seed> {
    let mut all: Vec<Seed> = Role::ALL
        .iter()
        .map(|&r| ("conversation", r.token(), conversation_seed(r, 1)))
        .collect();
    all.push((
        "conversation",
        "pull-dry-run-shard",
        conversation_seed(Role::PullDryRun, 3),
    ));
    all.push((
        "conversation",
        "push-pipelined",
        conversation_seed(Role::Push, 1 | 4 | 8 | 16),
    ));
    all
}

/// Frames of a file, a file's end, a hole, an unchecked and a sparse
/// block, and one past its file's end.
fn frame_seeds() -> Vec<Seed> {
    let text = b"hello urmove";
    let block: Vec<u8> = (0..64u8).collect();
    let unchecked = FrameHeader {
        flags: FLAG_UNCHECKED,
        file_index: 0,
        length: 16,
        span: 0,
        offset: 0,
        checksum: 0,
    };
    vec![
        (
            "frame",
            "file",
            frame_seed(
                FrameHeader::for_payload(&FUZZ_KEY, 0, 0, text, 0),
                &[12],
                text,
            ),
        ),
        (
            "frame",
            "end",
            frame_seed(
                FrameHeader::for_payload(&FUZZ_KEY, 1, 4096, &block, FLAG_END),
                &[8192, 4160],
                &block,
            ),
        ),
        (
            "frame",
            "hole",
            frame_seed(FrameHeader::hole(&FUZZ_KEY, 2, 8192), &[0, 0, 16384], &[]),
        ),
        ("frame", "unchecked", frame_seed(unchecked, &[16], &[7; 16])),
        ("frame", "sparse", sparse_seed()),
        (
            "frame",
            "past-end",
            frame_seed(
                FrameHeader::for_payload(&FUZZ_KEY, 0, u64::MAX - 3, b"abcdefgh", 0),
                &[u64::MAX],
                b"abcdefgh",
            ),
        ),
    ]
}

/// Honest and wrong-key handshakes, replays, a tampered and a reflected
/// proof, injected messages, and a key file.
fn handshake_seeds() -> Vec<Seed> {
    let (h, c, a, w) = (op::HELLO, op::CHALLENGE, op::AUTH, op::WELCOME);
    vec![
        ("handshake", "honest", vec![0, h, c, a, w, op::STREAM, 3, 0]),
        // A client of 0.1.0's version only: protocol 12, with a welcome.
        (
            "handshake",
            "honest-12",
            vec![2, h, c, a, w, op::STREAM, 3, 0],
        ),
        // A server of a later release only: no version in common.
        ("handshake", "no-common", vec![6 << 2, h, c, a, w]),
        // The offer tampered with on the way (its range's bits).
        (
            "handshake",
            "downgrade",
            vec![0, op::TAMPER, 0, 246, c, a, w],
        ),
        ("handshake", "wrong-key", vec![1, h, c, a, w]),
        ("handshake", "replay", vec![0, h, h, c, c, a, a, w, w]),
        ("handshake", "tamper", vec![0, h, op::TAMPER, 1, 40, c, a]),
        ("handshake", "reflect", vec![0, h, op::REFLECT, w]),
        (
            "handshake",
            "injected",
            message_seed(
                &[0],
                &[
                    Message::Hello(Hello {
                        version: 14,
                        client_nonce: CLIENT_NONCE,
                    }),
                    Message::Hello(Hello {
                        version: 12,
                        client_nonce: [9; 32],
                    }),
                    Message::Auth(Auth {
                        client_proof: [0; 32],
                    }),
                    Message::StreamHello {
                        session_id: SESSION_ID,
                        stream_index: 0,
                        proof: [0; 32],
                    },
                ],
            ),
        ),
        ("handshake", "key-file", format_key(&KEY).into_bytes()),
    ]
}

/// A file, a tree of every kind, refused paths and links, and a Manifest
/// message's part.
fn manifest_seeds() -> Vec<Seed> {
    let tree = [
        entry("run42", EntryKind::Dir, 0, None),
        entry("run42/a.dat", EntryKind::File, 12345, None),
        entry("run42/l", EntryKind::Symlink, 0, Some("a.dat")),
        entry("run42/up", EntryKind::Symlink, 0, Some("../run42/a.dat")),
        entry("run42/pipe", EntryKind::Fifo, 0, None),
        Entry {
            rdev: 0x103,
            ..entry("run42/null", EntryKind::CharDevice, 0, None)
        },
    ];
    let refused = [
        entry("/etc/passwd", EntryKind::File, 1, None),
        entry("a/../b", EntryKind::File, 1, None),
        entry("l", EntryKind::Symlink, 0, Some("../x")),
        entry("a/l", EntryKind::Symlink, 0, Some("x/../../y")),
    ];
    let part = control::encode(&Message::Manifest(tree.to_vec()))[5..].to_vec();
    vec![
        (
            "manifest",
            "file",
            entries_seed(&[entry("a.dat", EntryKind::File, 4096, None)]),
        ),
        ("manifest", "tree", entries_seed(&tree)),
        ("manifest", "refused", entries_seed(&refused)),
        ("manifest", "part", part),
    ]
}

/// The committed seeds are the encoders' current output, and each
/// reaches past the first check of its target.
#[test]
fn seeds_are_committed_and_current() {
    for (target, name, bytes) in seeds() {
        let path = fuzz_dir().join("corpus").join(target).join(name);
        assert_eq!(
            std::fs::read(&path).ok().as_ref(),
            Some(&bytes),
            "{} is stale: run `cargo test --lib write_fuzz_seeds -- --ignored`",
            path.display()
        );
        match target {
            "frame" => assert!(FrameHeader::decode(&bytes).is_ok(), "{name}"),
            "conversation" => assert_eq!(run_conversation(&bytes), Some(State::Done), "{name}"),
            "manifest" => {
                let kind = control::encode(&Message::Manifest(Vec::new()))[4];
                let part = control::decode_body(&[&[kind][..], &bytes].concat());
                assert!(
                    decode_entry(&mut Reader::new(&bytes)).is_ok() || part.is_ok(),
                    "{name}"
                );
            }
            _ => assert!(run_handshake(&bytes).is_some(), "{name}"),
        }
    }
    let seed = |name: &str| seeds().into_iter().find(|s| s.1 == name).unwrap().2;
    let honest = run_handshake(&seed("honest")).unwrap();
    assert!(honest.client_keys.is_some() && honest.client_keys == honest.server_keys);
    let wrong = run_handshake(&seed("wrong-key")).unwrap();
    assert!(wrong.client_keys.is_none() && wrong.server_keys.is_none());
    // Protocol 12 (a welcome) and 13 (a derived id) both reach a session.
    let twelve = run_handshake(&seed("honest-12")).unwrap();
    assert!(twelve.client_keys.is_some() && twelve.client_keys == twelve.server_keys);
    assert_ne!(twelve.client_keys, honest.client_keys);
    for refused in ["no-common", "downgrade"] {
        let h = run_handshake(&seed(refused)).unwrap();
        assert!(h.client_keys.is_none(), "{refused}");
    }
}

/// Write the seed corpus into `fuzz/corpus/`.
#[test]
#[ignore = "writes fuzz/corpus; run by hand after changing an encoder"]
fn write_fuzz_seeds() {
    for (target, name, bytes) in seeds() {
        let dir = fuzz_dir().join("corpus").join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}
