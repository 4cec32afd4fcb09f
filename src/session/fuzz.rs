//! The `resume` fuzz target's body (cargo-fuzz: `fuzz/fuzz_targets/resume.rs`):
//! what a receiver reads back of its own resume state, and what a sender
//! takes of what a receiver says it holds. `cargo test` replays the seeds
//! in `fuzz/corpus/resume` and every past finding in
//! `fuzz/regressions/resume`.
//!
//! The first byte picks the part:
//! - even: a journal. The next 24 bytes give its identity (size, block,
//!   mtime), the rest is its bytes. As given they must not decode (no MAC);
//!   behind a valid MAC, whatever decodes keeps every block within the
//!   file, re-encodes to a journal that decodes to itself, and is as long
//!   as `encoded_len` says.
//! - odd: a manifest of files (sizes from the next bytes), then control
//!   messages; every `Have` item the sender takes names a file of the
//!   manifest, holds blocks within it, sorted and apart, never a file both
//!   complete and in part, and never more bytes than the files have.

use crate::protocol::control::{decode, encode, Message};
use crate::protocol::manifest::{Entry, EntryKind};
use crate::protocol::wire::Reader;

use super::link::secret::Secret;
use super::plan::held::Held;
use super::plan::tree::Tree;
use super::sink::journal::{encoded_len, Identity, Journal};

/// Most blocks a fuzzed journal may have (a bit each in memory).
const FUZZ_BLOCKS_MAX: u64 = 1 << 20;
/// Most files a fuzzed manifest has.
const FUZZ_FILES_MAX: usize = 16;

pub fn resume(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        journal(rest);
    } else {
        have(rest);
    }
}

fn identity(r: &mut Reader<'_>) -> Option<Identity> {
    let block = (u64::from(r.u32().ok()? % 1024) + 1) * 4096;
    let size = r.u64().ok()? % (block * FUZZ_BLOCKS_MAX);
    Some(Identity {
        size,
        mtime_s: r.i64().ok()?,
        mtime_ns: r.u32().ok()? % 1_000_000_000,
        block,
    })
}

fn journal(data: &[u8]) {
    let mut r = Reader::new(data);
    let Some(id) = identity(&mut r) else {
        return;
    };
    let bytes = &data[data.len() - r.remaining()..];
    let secret = Secret::from_bytes([7; 32]);
    // Without the receiver's MAC, nothing is a journal.
    assert_eq!(Journal::decode(bytes, &id, &secret), None);
    // Behind a valid MAC (as if the receiver wrote it), the parser alone
    // stands between the bytes and what a resume trusts.
    let mac = secret.mac(&[b"urmove journal", bytes]);
    let signed = [bytes, &mac[..]].concat();
    let Some(j) = Journal::decode(&signed, &id, &secret) else {
        return;
    };
    let blocks = id.size.div_ceil(id.block);
    assert_eq!(j.blocks.len() as u64, blocks.div_ceil(64));
    let mut end = 0;
    for (first, count) in j.ranges() {
        assert!(
            count > 0 && first >= end && first + count <= blocks,
            "{j:?}"
        );
        end = first + count;
    }
    let again = j.encode(&secret);
    assert_eq!(Journal::decode(&again, &id, &secret), Some(j.clone()));
    assert_eq!(encoded_len(&j.id, &j.blocks), again.len() as u64);
}

fn have(data: &[u8]) {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let mut r = Reader::new(rest);
    let block = 4096u64;
    let mut tree = Tree::default();
    for i in 0..(n as usize % FUZZ_FILES_MAX) {
        let Ok(size) = r.u32() else { return };
        tree.entries.push(Entry {
            path: format!("f{i}"),
            kind: if size % 7 == 0 {
                EntryKind::Dir
            } else {
                EntryKind::File
            },
            size: if size % 7 == 0 { 0 } else { u64::from(size) },
            data: 0,
            mode: 0o644,
            mtime_s: 0,
            mtime_ns: 0,
            link: None,
            ..Default::default()
        });
        tree.sources.push(format!("f{i}").into());
        tree.ids.push(None);
    }
    let mut bytes = &rest[rest.len() - r.remaining()..];
    let mut held = Held::default();
    while let Ok(Some((m, used))) = decode(bytes) {
        bytes = &bytes[used..];
        // What decodes re-encodes to the same message.
        if !matches!(m, Message::Error { .. }) {
            let b = encode(&m);
            assert_eq!(decode(&b), Ok(Some((m.clone(), b.len()))));
        }
        let Message::Have(items) = m else { continue };
        for it in items {
            // A refused item ends the session: nothing of it is used.
            if held.add(it, &tree.entries, block).is_err() {
                return;
            }
        }
    }
    if held.settle().is_err() {
        return;
    }
    for (&i, (_, ranges)) in &held.partial {
        let e = &tree.entries[i as usize];
        assert_eq!(e.kind, EntryKind::File);
        assert!(
            !held.complete.contains_key(&i),
            "entry {i} complete and in part"
        );
        let blocks = e.size.div_ceil(block);
        let mut end = 0;
        for &(first, count) in ranges {
            assert!(
                first >= end && first + count <= blocks,
                "{ranges:?} of {blocks}"
            );
            end = first + count;
        }
    }
    for &i in held.complete.keys() {
        assert_eq!(tree.entries[i as usize].kind, EntryKind::File);
    }
    assert!(held.bytes(&tree, block) <= tree.file_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::control::{HaveItem, UNLISTED};
    use std::path::{Path, PathBuf};

    fn dir(set: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz")
            .join(set)
            .join("resume")
    }

    fn journal_seed(id: &Identity, j: &Journal) -> Vec<u8> {
        let mut out = vec![0u8];
        out.extend_from_slice(&((id.block / 4096 - 1) as u32).to_le_bytes());
        out.extend_from_slice(&id.size.to_le_bytes());
        out.extend_from_slice(&id.mtime_s.to_le_bytes());
        out.extend_from_slice(&id.mtime_ns.to_le_bytes());
        let body = j.encode(&Secret::from_bytes([7; 32]));
        out.extend_from_slice(&body[..body.len() - 32]);
        out
    }

    /// The seeds, made by the real encoders: (name, bytes).
    fn seeds() -> Vec<(&'static str, Vec<u8>)> {
        let id = Identity {
            size: 300 * 4096 + 5,
            mtime_s: 1_700_000_000,
            mtime_ns: 5,
            block: 4096,
        };
        let part = crate::datapath::beneath::FileId { dev: 1, ino: 2 };
        let mut sparse = vec![0u64; 5];
        sparse[0] = 0b111;
        sparse[4] = 1 << 3;
        let dense: Vec<u64> = (0..5)
            .map(|w| {
                if w == 4 {
                    0x1FFF
                } else {
                    0x5555_5555_5555_5555
                }
            })
            .collect();
        let j = |blocks: Vec<u64>| Journal {
            id,
            part,
            digest: 99,
            blocks,
            generation: [5; 16],
            tag: [6; 16],
        };
        let mut have = vec![1u8, 3];
        for size in [3 * 4096u32 + 1, 14, 8192] {
            have.extend_from_slice(&size.to_le_bytes());
        }
        have.extend_from_slice(&encode(&Message::Have(vec![
            HaveItem::Complete {
                file_index: 1,
                digest: 4,
            },
            HaveItem::Unchanged {
                file_index: 2,
                digest: 6,
            },
            HaveItem::Partial {
                file_index: 0,
                digest: 5,
                ranges: vec![(0, 2), (3, 1)],
            },
        ])));
        for m in [
            Message::HeldWrong(vec![0, 2]),
            Message::HeldChecked,
            Message::SourceDigests(vec![(0, 7)]),
            Message::FileRejected {
                file_index: 2,
                digest: 8,
            },
            Message::Skipped {
                file_index: UNLISTED,
                path: "d/dev".into(),
                reason: "a device node".into(),
                rule: true,
            },
        ] {
            have.extend_from_slice(&encode(&m));
        }
        vec![
            ("journal-ranges", journal_seed(&id, &j(sparse))),
            ("journal-bitmap", journal_seed(&id, &j(dense))),
            ("have", have),
        ]
    }

    /// Run once after a format change: `cargo test --lib write_resume_seeds -- --ignored`.
    #[test]
    #[ignore]
    fn write_resume_seeds() {
        std::fs::create_dir_all(dir("corpus")).unwrap();
        for (name, bytes) in seeds() {
            std::fs::write(dir("corpus").join(name), bytes).unwrap();
        }
    }

    #[test]
    fn seeds_are_current_and_every_input_replays() {
        for (name, bytes) in seeds() {
            let path = dir("corpus").join(name);
            assert_eq!(
                std::fs::read(&path).ok().as_ref(),
                Some(&bytes),
                "{} is stale: run `cargo test --lib write_resume_seeds -- --ignored`",
                path.display()
            );
        }
        for set in ["corpus", "regressions"] {
            let Ok(entries) = std::fs::read_dir(dir(set)) else {
                continue;
            };
            for p in entries.map(|e| e.unwrap().path()).filter(|p| p.is_file()) {
                let bytes = std::fs::read(&p).unwrap();
                let run = std::panic::catch_unwind(|| resume(&bytes));
                assert!(run.is_ok(), "{} fails its fuzz body", p.display());
            }
        }
    }

    #[test]
    fn the_journal_seeds_decode_behind_the_mac() {
        for (name, bytes) in seeds().into_iter().filter(|s| s.0.starts_with("journal")) {
            let mut r = Reader::new(&bytes[1..]);
            let id = identity(&mut r).unwrap();
            let body = &bytes[bytes.len() - r.remaining()..];
            let secret = Secret::from_bytes([7; 32]);
            let mac = secret.mac(&[b"urmove journal", body]);
            let signed = [body, &mac[..]].concat();
            assert!(Journal::decode(&signed, &id, &secret).is_some(), "{name}");
        }
    }
}
