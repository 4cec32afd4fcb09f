//! One transfer sharded over several sessions (`send --shard K/N`), each
//! started by a scheduler (a Slurm array task, a Kubernetes Indexed Job
//! pod) on its own host. Every shard scans the same sources and so builds
//! the same manifest; it then keeps its share: the directories (every
//! shard makes them), whole files assigned by a stable hash of their path
//! weighted by their size, and one piece of each file larger than the
//! split threshold, so one huge file uses every host. The receivers of a
//! split file's pieces write them into one part file and commit it once
//! every piece is verified (`receive`, `commit`).

use crate::protocol::control::PieceDone;
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

impl Shard {
    /// `K/N` (0 <= K < N <= [`PIECES_MAX`]), or `auto`: the scheduler's
    /// task (`env` reads the environment).
    pub fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Shard, String> {
        if text == "auto" {
            return Shard::from_scheduler(env);
        }
        let bad = || format!("--shard {text}: expected K/N (shard K of N, 0 <= K < N) or auto");
        let (k, n) = text.split_once('/').ok_or_else(bad)?;
        let (index, count) = (k.parse().map_err(|_| bad())?, n.parse().map_err(|_| bad())?);
        Shard::new(index, count).map_err(|why| format!("--shard {text}: {why}"))
    }

    fn new(index: u32, count: u32) -> Result<Shard, String> {
        if count == 0 || count > PIECES_MAX {
            return Err(format!("the shard count must be 1 to {PIECES_MAX}"));
        }
        if index >= count {
            return Err(format!(
                "shard {index} of {count}: shards count from 0 to {}",
                count - 1
            ));
        }
        Ok(Shard { index, count })
    }

    /// Slurm's array task (`SLURM_ARRAY_TASK_ID` counted from
    /// `SLURM_ARRAY_TASK_MIN` in steps of `SLURM_ARRAY_TASK_STEP`, of
    /// `SLURM_ARRAY_TASK_COUNT`), else a Kubernetes Indexed Job's
    /// (`JOB_COMPLETION_INDEX` of `JOB_COMPLETIONS`, which the Job's spec
    /// passes on).
    fn from_scheduler(env: &dyn Fn(&str) -> Option<String>) -> Result<Shard, String> {
        let num = |name: &str| -> Result<Option<u32>, String> {
            match env(name) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| format!("--shard auto: {name}={v} is no count")),
            }
        };
        let pick = |id: &str,
                    count: &str,
                    (min, step): (u32, u32)|
         -> Result<Option<Shard>, String> {
            let (Some(i), Some(n)) = (num(id)?, num(count)?) else {
                return Ok(None);
            };
            let index = i
                .checked_sub(min)
                .filter(|k| k % step.max(1) == 0)
                .ok_or_else(|| {
                    format!("--shard auto: {id}={i} is not SLURM_ARRAY_TASK_MIN={min} and a whole number of SLURM_ARRAY_TASK_STEP={step} (an array of a list? give --shard K/N)")
                })?;
            Shard::new(index / step.max(1), n)
                .map(Some)
                .map_err(|why| format!("--shard auto ({id}, {count}): {why}"))
        };
        let (min, step) = (num("SLURM_ARRAY_TASK_MIN")?, num("SLURM_ARRAY_TASK_STEP")?);
        let slurm = (min.unwrap_or(0), step.unwrap_or(1));
        if let Some(s) = pick("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", slurm)? {
            return Ok(s);
        }
        if let Some(s) = pick("JOB_COMPLETION_INDEX", "JOB_COMPLETIONS", (0, 1))? {
            return Ok(s);
        }
        Err("--shard auto: neither SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT (a Slurm array task) nor JOB_COMPLETION_INDEX and JOB_COMPLETIONS (a Kubernetes Indexed Job) are set".into())
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

/// The receipt a receiver gives for the journal `j` of `piece`: a MAC,
/// with the receivers' secret (which every receiver sharing the root
/// holds, and no sender), of the file's identity, the piece, the part (its
/// inode and tag), the digest and the journal's generation. A session that writes the piece
/// again journals it with a generation of its own, so its receipt differs
/// even where its bytes were made to have the same (unkeyed) digest.
pub(crate) fn receipt(
    secret: &super::secret::Secret,
    j: &super::journal::Journal,
    piece: Piece,
) -> u64 {
    let mut w = crate::protocol::wire::Writer::default();
    w.u64(j.id.size)
        .i64(j.id.mtime_s)
        .u32(j.id.mtime_ns)
        .u64(j.id.block)
        .u32(piece.index)
        .u32(piece.count)
        .u64(j.part.dev)
        .u64(j.part.ino)
        .u64(j.digest)
        .bytes(&j.generation)
        .bytes(&j.tag);
    let mac = secret.mac(&[b"urmove piece receipt", &w.buf]);
    u64::from_le_bytes(mac[..8].try_into().expect("8 bytes"))
}

/// The digest of a split file's pieces' receipts, in piece order: what a
/// committed file's acknowledgement names, and `urmove report` finds
/// again from the shards' receipts.
pub fn receipts_digest(receipts: &[u64]) -> u64 {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(b"urmove receipts");
    for r in receipts {
        h.update(r.to_le_bytes());
    }
    let d: [u8; 32] = h.finalize().into();
    u64::from_le_bytes(d[..8].try_into().expect("8 bytes"))
}

/// What the receiver acknowledged of a shard's files: each verified whole
/// file (its digest equal to ours), and each verified piece as its
/// receiver told it.
#[derive(Debug, Default)]
pub(crate) struct Acked {
    verified: std::collections::HashSet<u32>,
    pieces: std::collections::HashMap<u32, PieceDone>,
    /// Held complete before the data, their content equal to the source's.
    held: std::collections::HashSet<u32>,
}

impl Acked {
    /// Whole file `i` arrived verified.
    pub(crate) fn record(&mut self, i: u32) {
        self.verified.insert(i);
    }

    /// Piece `i` arrived verified (a pull checked its digest).
    pub(crate) fn record_piece(&mut self, i: u32, done: PieceDone) {
        self.pieces.insert(i, done);
    }

    /// Entries held complete before the data.
    pub(crate) fn with_held(mut self, held: impl IntoIterator<Item = u32>) -> Acked {
        self.held.extend(held);
        self
    }

    /// The acknowledgements (entry, digest) whose digest is ours, with
    /// what the receiver told of pieces.
    pub(crate) fn from_acks(
        acks: &[(u32, u64)],
        pieces: &std::collections::HashMap<u32, PieceDone>,
        digests: &[u64],
    ) -> Acked {
        let mut a = Acked::default();
        let ours = acks
            .iter()
            .filter(|(i, d)| digests.get(*i as usize) == Some(d));
        for &(i, _) in ours {
            match pieces.get(&i) {
                Some(done) => a.record_piece(i, *done),
                None => a.record(i),
            }
        }
        a
    }
}

/// A piece of a split file, as one shard saw it.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct PieceReport {
    pub path: String,
    pub size: u64,
    pub index: u32,
    /// The piece's digest (hex) when the receiver verified it, and the
    /// receiver's receipt for its journal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<String>,
    /// The whole file's digest (hex) when this shard's session committed
    /// the file (every piece was there), and the digest of the receipts
    /// of the pieces it committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed_receipts: Option<String>,
    /// The receiver held the whole file complete, its digest equal to the
    /// source's (or unchanged since its commit).
    #[serde(default)]
    pub held: bool,
    /// The piece whose journal this shard's receiver could not trust when
    /// it found the others there (not made with its secret): the file
    /// cannot be committed there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub untrusted: Option<u32>,
}

/// One shard's part of a transfer, in its JSON report (a run that failed
/// before its data names only its index and count).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ShardReport {
    pub index: u32,
    pub count: u32,
    /// Where it sent (HOST:PORT).
    pub receiver: String,
    /// The transfer as every shard of it names it: its receivers and
    /// destination (a pull's: its sources and local directory).
    pub transfer: String,
    /// The whole transfer's manifest, as this shard built it.
    pub manifest: Manifest,
    /// What its share was chosen by: files above `split_over` bytes split
    /// into pieces of `block`-byte blocks. Shards that differ in either
    /// split the manifest otherwise (a file two shares hold, or none).
    pub split_over: u64,
    pub block: u64,
    /// Its share: whole files, and bytes (pieces' spans counted).
    pub share_files: u64,
    pub share_bytes: u64,
    /// Wall-clock start and end (seconds since the epoch).
    pub started_unix_s: f64,
    pub ended_unix_s: f64,
    /// Whole files of its share not verified (at most [`PENDING_KEPT`]
    /// named), and how many.
    pub pending: Vec<String>,
    pub pending_count: u64,
    pub pieces: Vec<PieceReport>,
    /// Whole files of its share a rule left out (a name the receiving
    /// filesystem cannot hold, a policy): not pending, since a run again
    /// cannot mend them (at most [`PENDING_KEPT`] named), and how many.
    pub skipped_by_rule: Vec<super::tree::Skipped>,
    pub skipped_by_rule_count: u64,
    /// Entries of any kind skipped for a fault (a run again may mend
    /// them): what makes its status `partial` count against the whole.
    pub skipped_faults: u64,
}

/// Paths a shard's report names among its files not verified.
pub const PENDING_KEPT: usize = 1000;

fn hex(d: u64) -> String {
    format!("{d:016x}")
}

fn unix_s(t: std::time::SystemTime) -> f64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl ShardReport {
    /// The shard's part: what of its share was verified (`held` complete
    /// before, or acknowledged with our digest).
    pub(crate) fn of(
        (shard, manifest): (Shard, Manifest),
        cfg: &super::send::SendConfig,
        (entries, skipped): (&[Entry], &[super::tree::Skipped]),
        acked: &Acked,
        started: std::time::SystemTime,
    ) -> ShardReport {
        let by_rule: std::collections::HashMap<&str, &super::tree::Skipped> = skipped
            .iter()
            .filter(|s| s.by_rule)
            .map(|s| (s.path.as_str(), s))
            .collect();
        let block = u64::from(cfg.block_size);
        let mut r = ShardReport {
            index: shard.index,
            count: shard.count,
            receiver: format!("{}:{}", cfg.host, cfg.port),
            transfer: cfg.transfer.clone(),
            manifest,
            split_over: cfg.split_over,
            block,
            started_unix_s: unix_s(started),
            ended_unix_s: unix_s(std::time::SystemTime::now()),
            skipped_faults: skipped.iter().filter(|s| !s.by_rule).count() as u64,
            ..ShardReport::default()
        };
        for (i, e) in entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.kind == EntryKind::File)
        {
            let i = i as u32;
            let whole = acked.held.contains(&i);
            r.share_bytes += e.span_len(block);
            match e.piece {
                Some(p) => {
                    let done = acked.pieces.get(&i);
                    let committed = done.and_then(|d| d.whole);
                    r.pieces.push(PieceReport {
                        path: e.path.clone(),
                        size: e.size,
                        index: p.index,
                        digest: done.map(|d| hex(d.digest)),
                        receipt: done.map(|d| hex(d.receipt)),
                        committed: committed.map(|w| hex(w.0)),
                        committed_receipts: committed.map(|w| hex(w.1)),
                        held: whole,
                        untrusted: done.and_then(|d| d.untrusted),
                    })
                }
                None => {
                    r.share_files += 1;
                    if whole || acked.verified.contains(&i) {
                        continue;
                    }
                    if let Some(s) = by_rule.get(e.path.as_str()) {
                        r.skipped_by_rule_count += 1;
                        if r.skipped_by_rule.len() < PENDING_KEPT {
                            r.skipped_by_rule.push((*s).clone());
                        }
                        continue;
                    }
                    r.pending_count += 1;
                    if r.pending.len() < PENDING_KEPT {
                        r.pending.push(e.path.clone());
                    }
                }
            }
        }
        r
    }
}

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
            .contains("--shard K/N"));
        let k8s = env(&[("JOB_COMPLETION_INDEX", "3"), ("JOB_COMPLETIONS", "8")]);
        assert_eq!(Shard::parse("auto", &k8s), Ok(Shard { index: 3, count: 8 }));
        let err = Shard::parse("auto", &none).unwrap_err();
        assert!(
            err.contains("SLURM_ARRAY_TASK_ID") && err.contains("JOB_COMPLETION_INDEX"),
            "{err}"
        );
        let past = env(&[("JOB_COMPLETION_INDEX", "8"), ("JOB_COMPLETIONS", "8")]);
        assert!(Shard::parse("auto", &past).is_err());
    }

    fn tree(entries: Vec<Entry>) -> Tree {
        let n = entries.len();
        let mut t = Tree::default();
        t.entries = entries;
        t.sources = vec![std::path::PathBuf::new(); n];
        t.ids = vec![None; n];
        t
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
