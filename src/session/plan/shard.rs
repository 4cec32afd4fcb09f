//! One transfer sharded over several sessions (`send --shard K/N`), each
//! started by a scheduler (a Slurm array task, a Kubernetes Indexed Job
//! pod) on its own host. Every shard scans the same sources and so builds
//! the same manifest; it then keeps its share: the directories (every
//! shard makes them), whole files assigned by a stable hash of their path
//! weighted by their size, and one piece of each file larger than the
//! split threshold, so one huge file uses every host. The receivers of a
//! split file's pieces write them into one part file and commit it once
//! every piece is verified (`receive`, `commit`).

use crate::protocol::manifest::{Entry, EntryKind, Piece, PIECES_MAX};

use super::tree::Tree;

/// Shard `index` of `count` (`send --shard K/N`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

/// What a file that is not split weighs when shares are made: its bytes
/// and a block's worth for the work of one file (a tree of small files
/// spreads by count too).
const FILE_WEIGHT: u64 = 64 << 10;

/// Why a `--shard` names no shard.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    #[error("--shard {0}: expected K/N (shard K of N, 0 <= K < N) or auto")]
    NotKOfN(String),
    #[error("--shard {text}: {why}")]
    Given { text: String, why: OutOfRange },
    #[error("--shard auto: {name}={value} is no count")]
    NoCount { name: &'static str, value: String },
    #[error("--shard auto: {id}={i} is not SLURM_ARRAY_TASK_MIN={min} and a whole number of SLURM_ARRAY_TASK_STEP={step} (an array of a list? give --shard K/N)")]
    OffTheSteps {
        id: &'static str,
        i: u32,
        min: u32,
        step: u32,
    },
    #[error("--shard auto ({id}, {count}): {why}")]
    Scheduler {
        id: &'static str,
        count: &'static str,
        why: OutOfRange,
    },
    #[error("--shard auto: neither SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT (a Slurm array task) nor JOB_COMPLETION_INDEX and JOB_COMPLETIONS (a Kubernetes Indexed Job) are set")]
    NoScheduler,
}

/// A shard's number or count out of range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OutOfRange {
    #[error("the shard count must be 1 to {PIECES_MAX}")]
    Count,
    #[error("shard {index} of {count}: shards count from 0 to {}", count - 1)]
    Index { index: u32, count: u32 },
}

impl Shard {
    /// `K/N` (0 <= K < N <= [`PIECES_MAX`]), or `auto`: the scheduler's
    /// task (`env` reads the environment).
    pub fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Shard, ShardError> {
        if text == "auto" {
            return Shard::from_scheduler(env);
        }
        let bad = || ShardError::NotKOfN(text.to_owned());
        let (k, n) = text.split_once('/').ok_or_else(bad)?;
        let (index, count) = (k.parse().map_err(|_| bad())?, n.parse().map_err(|_| bad())?);
        Shard::new(index, count).map_err(|why| ShardError::Given {
            text: text.to_owned(),
            why,
        })
    }

    fn new(index: u32, count: u32) -> Result<Shard, OutOfRange> {
        if count == 0 || count > PIECES_MAX {
            return Err(OutOfRange::Count);
        }
        if index >= count {
            return Err(OutOfRange::Index { index, count });
        }
        Ok(Shard { index, count })
    }

    /// Slurm's array task (`SLURM_ARRAY_TASK_ID` counted from
    /// `SLURM_ARRAY_TASK_MIN` in steps of `SLURM_ARRAY_TASK_STEP`, of
    /// `SLURM_ARRAY_TASK_COUNT`), else a Kubernetes Indexed Job's
    /// (`JOB_COMPLETION_INDEX` of `JOB_COMPLETIONS`, which the Job's spec
    /// passes on).
    fn from_scheduler(env: &dyn Fn(&str) -> Option<String>) -> Result<Shard, ShardError> {
        let num = |name: &'static str| -> Result<Option<u32>, ShardError> {
            match env(name) {
                None => Ok(None),
                Some(value) => value
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| ShardError::NoCount { name, value }),
            }
        };
        let pick = |id: &'static str,
                    count: &'static str,
                    (min, step): (u32, u32)|
         -> Result<Option<Shard>, ShardError> {
            let (Some(i), Some(n)) = (num(id)?, num(count)?) else {
                return Ok(None);
            };
            let index = i
                .checked_sub(min)
                .filter(|k| k % step.max(1) == 0)
                .ok_or(ShardError::OffTheSteps { id, i, min, step })?;
            Shard::new(index / step.max(1), n)
                .map(Some)
                .map_err(|why| ShardError::Scheduler { id, count, why })
        };
        let (min, step) = (num("SLURM_ARRAY_TASK_MIN")?, num("SLURM_ARRAY_TASK_STEP")?);
        let slurm = (min.unwrap_or(0), step.unwrap_or(1));
        if let Some(s) = pick("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", slurm)? {
            return Ok(s);
        }
        if let Some(s) = pick("JOB_COMPLETION_INDEX", "JOB_COMPLETIONS", (0, 1))? {
            return Ok(s);
        }
        Err(ShardError::NoScheduler)
    }

    /// The receiver this shard sends to, of `hosts` (shard K uses K mod M).
    pub fn pick<'h, T>(&self, hosts: &'h [T]) -> &'h T {
        &hosts[self.index as usize % hosts.len()]
    }
}

/// Which shard takes each entry of `entries` that is not split (files,
/// symlinks, FIFOs, sockets, devices), by a stable hash of its path
/// weighted by its size (`None` for directories, which every shard makes,
/// and for split files). Hard links go with their file.
fn owners(entries: &[Entry], split: &[bool], count: u32) -> Vec<Option<u32>> {
    let weight = |e: &Entry| e.size.saturating_add(FILE_WEIGHT);
    let mut whole: Vec<usize> = (0..entries.len())
        .filter(|&i| !matches!(entries[i].kind, EntryKind::Dir | EntryKind::HardLink) && !split[i])
        .collect();
    whole.sort_by_cached_key(|&i| (xxhash_rust::xxh3::xxh3_64(entries[i].path.as_bytes()), i));
    let total: u128 = whole.iter().map(|&i| u128::from(weight(&entries[i]))).sum();
    let mut out = vec![None; entries.len()];
    let mut before = 0u128;
    for &i in &whole {
        let w = u128::from(weight(&entries[i]));
        let mid = before + w / 2;
        out[i] = Some((mid * u128::from(count) / total.max(1)).min(u128::from(count) - 1) as u32);
        before += w;
    }
    let by_path: std::collections::HashMap<&str, u32> = entries
        .iter()
        .zip(&out)
        .filter_map(|(e, o)| o.map(|o| (e.path.as_str(), o)))
        .collect();
    for (e, o) in entries.iter().zip(out.iter_mut()) {
        if e.kind == EntryKind::HardLink {
            *o = e.link.as_deref().and_then(|l| by_path.get(l).copied());
        }
    }
    out
}

/// Keep `shard`'s share of `tree` (see the module): files above
/// `split_over` bytes (with at least a block per shard) become pieces.
pub fn select(tree: &mut Tree, shard: Shard, split_over: u64, block: u64) {
    let entries = &tree.entries;
    let linked: std::collections::HashSet<&str> = entries
        .iter()
        .filter(|e| e.kind == EntryKind::HardLink)
        .filter_map(|e| e.link.as_deref())
        .collect();
    let split: Vec<bool> = entries
        .iter()
        .map(|e| {
            e.kind == EntryKind::File
                && shard.count > 1
                && !e.growing
                && e.size > split_over
                && e.size.div_ceil(block) >= u64::from(shard.count)
                && !linked.contains(e.path.as_str())
        })
        .collect();
    let owner = owners(entries, &split, shard.count);
    let keep: Vec<bool> = (0..entries.len())
        .map(|i| split[i] || entries[i].kind == EntryKind::Dir || owner[i] == Some(shard.index))
        .collect();
    for (e, _) in tree.entries.iter_mut().zip(&split).filter(|(_, s)| **s) {
        e.piece = Some(Piece {
            index: shard.index,
            count: shard.count,
        });
    }
    tree.retain(&keep);
}

/// What one shard was given of the whole manifest, for `urmove report`.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    /// Files, bytes and a digest of the whole manifest (paths, sizes,
    /// mtimes): every shard of one transfer has the same.
    pub files: u64,
    pub bytes: u64,
    pub digest: String,
}

impl Manifest {
    /// The manifest a pull's daemon told of (see [`summary`]).
    pub fn told(files: u64, bytes: u64, digest: &[u8; 32]) -> Manifest {
        Manifest {
            files,
            bytes,
            digest: digest.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }
}

/// A manifest's files, bytes of data (holes left out) and digest (paths,
/// kinds, sizes, mtimes), as every shard computes it before it keeps its
/// share.
pub fn summary(entries: &[Entry]) -> (u64, u64, [u8; 32]) {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for e in entries {
        h.update((e.kind as u8).to_le_bytes());
        h.update((e.path.len() as u64).to_le_bytes());
        h.update(e.path.as_bytes());
        h.update(e.size.to_le_bytes());
        h.update(e.mtime_s.to_le_bytes());
        h.update(e.mtime_ns.to_le_bytes());
    }
    // The bytes that cross: data, holes left out.
    let files = entries.iter().filter(|e| e.kind == EntryKind::File);
    let data = files.clone().map(|e| e.data.min(e.size)).sum();
    (files.count() as u64, data, h.finalize().into())
}

/// [`summary`] as a shard's report keeps it.
pub fn manifest_of(entries: &[Entry]) -> Manifest {
    let (files, bytes, digest) = summary(entries);
    Manifest::told(files, bytes, &digest)
}

/// Files above this many bytes are split over the shards by default
/// (`--split-over`).
pub const SPLIT_OVER: u64 = 256 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, size: u64) -> Entry {
        Entry {
            path: path.into(),
            kind: EntryKind::File,
            size,
            ..Entry::default()
        }
    }

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn shards_are_parsed_from_the_flag_slurm_or_kubernetes() {
        let none = env(&[]);
        assert_eq!(Shard::parse("2/4", &none), Ok(Shard { index: 2, count: 4 }));
        for bad in ["4/4", "1/0", "x/2", "3", "-1/2", "1/5000"] {
            assert!(Shard::parse(bad, &none).is_err(), "{bad}");
        }
        let slurm = env(&[
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_MIN", "4"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
            ("JOB_COMPLETION_INDEX", "3"),
            ("JOB_COMPLETIONS", "8"),
        ]);
        assert_eq!(
            Shard::parse("auto", &slurm),
            Ok(Shard { index: 1, count: 4 })
        );
        // --array=0-6:2: tasks 0, 2, 4 and 6 are shards 0 to 3 of 4.
        let stepped = env(&[
            ("SLURM_ARRAY_TASK_ID", "6"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_STEP", "2"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ]);
        assert_eq!(
            Shard::parse("auto", &stepped),
            Ok(Shard { index: 3, count: 4 })
        );
        let off_step = env(&[
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_STEP", "2"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ]);
        assert!(Shard::parse("auto", &off_step)
            .unwrap_err()
            .to_string()
            .contains("--shard K/N"));
        let k8s = env(&[("JOB_COMPLETION_INDEX", "3"), ("JOB_COMPLETIONS", "8")]);
        assert_eq!(Shard::parse("auto", &k8s), Ok(Shard { index: 3, count: 8 }));
        let err = Shard::parse("auto", &none).unwrap_err().to_string();
        assert!(
            err.contains("SLURM_ARRAY_TASK_ID") && err.contains("JOB_COMPLETION_INDEX"),
            "{err}"
        );
        let past = env(&[("JOB_COMPLETION_INDEX", "8"), ("JOB_COMPLETIONS", "8")]);
        assert!(Shard::parse("auto", &past).is_err());
    }

    fn tree(entries: Vec<Entry>) -> Tree {
        let n = entries.len();
        Tree {
            entries,
            sources: vec![std::path::PathBuf::new(); n],
            ids: vec![None; n],
            ..Default::default()
        }
    }

    /// Every file in exactly one shard, split files in all, shares near
    /// even by bytes, and the same split whatever the order of shards.
    #[test]
    fn shares_cover_every_file_once_and_split_the_large_ones() {
        let mut entries = vec![Entry {
            path: "d".into(),
            kind: EntryKind::Dir,
            ..Entry::default()
        }];
        entries.push(file("d/huge", 1 << 30));
        entries.extend((0..2000).map(|i| file(&format!("d/f{i}"), 1000 + i * 37)));
        let count = 4;
        let mut seen = std::collections::HashMap::new();
        let mut bytes = vec![0u64; count as usize];
        for index in 0..count {
            let mut t = tree(entries.clone());
            select(&mut t, Shard { index, count }, 256 << 20, 1 << 20);
            assert_eq!(
                t.entries[0].kind,
                EntryKind::Dir,
                "every shard makes the directories"
            );
            for e in &t.entries {
                match (&e.piece, e.kind) {
                    (Some(p), _) => assert_eq!(*p, Piece { index, count }),
                    (None, EntryKind::File) => {
                        assert!(
                            seen.insert(e.path.clone(), index).is_none(),
                            "{} twice",
                            e.path
                        );
                        bytes[index as usize] += e.size + FILE_WEIGHT;
                    }
                    _ => {}
                }
            }
            assert_eq!(t.entries.iter().filter(|e| e.piece.is_some()).count(), 1);
            assert_eq!(t.sources.len(), t.entries.len());
        }
        assert_eq!(seen.len(), 2000, "every small file in one shard");
        let (lo, hi) = (bytes.iter().min().unwrap(), bytes.iter().max().unwrap());
        assert!(
            *hi < lo + lo / 10 + (1 << 20),
            "shares by weight: {bytes:?}"
        );
        // The pieces tile the file.
        let spans: Vec<_> = (0..count)
            .map(|index| {
                crate::protocol::manifest::piece_span(1 << 30, 1 << 20, Piece { index, count })
            })
            .collect();
        assert_eq!(spans[0].0, 0);
        assert_eq!(spans[3].1, 1 << 30);
        assert!(spans.windows(2).all(|w| w[0].1 == w[1].0));
    }

    #[test]
    fn a_hard_link_goes_with_its_file_and_its_file_is_never_split() {
        let mut entries = vec![file("big", 1 << 30)];
        entries.push(Entry {
            path: "other".into(),
            kind: EntryKind::HardLink,
            link: Some("big".into()),
            ..Entry::default()
        });
        let mut holders = 0;
        for index in 0..2 {
            let mut t = tree(entries.clone());
            select(&mut t, Shard { index, count: 2 }, 1 << 20, 1 << 20);
            assert!(t.entries.iter().all(|e| e.piece.is_none()));
            match t.entries.len() {
                0 => {}
                2 => holders += 1,
                n => panic!("the link apart from its file: {n} entries"),
            }
        }
        assert_eq!(holders, 1);
    }
}
