//! `urmove report`: the JSON reports of a sharded transfer's shards
//! merged into one account of it: the bytes and files, the rate over the
//! union of the shards' time spans, the slowest shard, and what is
//! missing. The transfer is complete only when every shard of the same
//! manifest reported, each verified its whole share, and every split file
//! is whole: held complete by content, or every piece verified by its
//! shard and the file committed with the sum of the pieces' digests.

use std::collections::BTreeMap;

use super::shard_report::{PieceReport, ShardReport};

use crate::session::sink::receipt::receipts_digest;

/// One shard's JSON report, as `urmove report` reads it.
#[derive(Debug, Clone)]
pub struct ShardRun {
    /// The file it was read from.
    pub file: String,
    pub status: String,
    pub bytes: u64,
    pub elapsed_s: f64,
    pub error: Option<String>,
    pub shard: ShardReport,
}

/// A shard's report file that cannot be merged, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {why}")]
pub struct Unreadable {
    pub file: String,
    pub why: NoReport,
}

/// Why a file holds no shard's report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoReport {
    #[error("no JSON report in it")]
    NoJson,
    #[error("a report of no shard (send --shard K/N --json writes one)")]
    NoShard,
    /// What the JSON decoder said of its `shard` object.
    #[error("{0}")]
    BadShard(String),
}

impl ShardRun {
    /// Read a `send --shard ... --json` report (its last JSON object:
    /// the report may follow interval lines).
    pub fn parse(file: &str, text: &str) -> Result<ShardRun, Unreadable> {
        let unreadable = |why| Unreadable {
            file: file.to_owned(),
            why,
        };
        let object = |t: &str| {
            serde_json::from_str::<serde_json::Value>(t)
                .ok()
                .filter(|v| v.is_object())
        };
        let v = object(text)
            .or_else(|| text.lines().rev().find_map(|l| object(l.trim())))
            .ok_or_else(|| unreadable(NoReport::NoJson))?;
        let shard = v
            .get("shard")
            .cloned()
            .ok_or_else(|| unreadable(NoReport::NoShard))?;
        let shard: ShardReport = serde_json::from_value(shard)
            .map_err(|e| unreadable(NoReport::BadShard(e.to_string())))?;
        Ok(ShardRun {
            file: file.to_string(),
            status: v["status"].as_str().unwrap_or("unknown").to_string(),
            bytes: v["bytes"].as_u64().unwrap_or(0),
            elapsed_s: v["elapsed_s"].as_f64().unwrap_or(0.0),
            error: v["error"].as_str().map(str::to_string),
            shard,
        })
    }

    fn rate(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.elapsed_s.max(1e-9)
    }
}

/// One shard in the merged report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ShardLine {
    pub index: u32,
    pub file: String,
    pub receiver: String,
    pub status: String,
    pub bytes: u64,
    pub elapsed_s: f64,
    pub rate_bits_per_s: f64,
}

/// The whole transfer.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Merged {
    pub complete: bool,
    pub shards: u32,
    pub manifest_digest: String,
    pub files: u64,
    pub files_verified: u64,
    pub bytes_total: u64,
    /// Payload bytes that crossed the network, over all shards.
    pub bytes: u64,
    /// Seconds covered by some shard running (the union of their spans).
    pub elapsed_s: f64,
    pub rate_bits_per_s: f64,
    pub slowest: Option<ShardLine>,
    pub per_shard: Vec<ShardLine>,
    /// Shards with no report, and why the transfer is not complete.
    pub missing_shards: Vec<u32>,
    pub missing_files: Vec<String>,
    /// Files a rule left out (a name the receiving filesystem cannot
    /// hold, a receiver's policy), named with why: a run again cannot mend
    /// them, so they do not count against completeness.
    pub files_skipped_by_rule: u64,
    pub skipped_by_rule: Vec<crate::session::plan::tree::Skipped>,
    pub problems: Vec<String>,
}

/// Merge `runs` (the latest report of each shard counts).
pub fn merge(runs: Vec<ShardRun>) -> Merged {
    let mut m = Merged::default();
    // A run that failed before its data knows no manifest: said, not merged.
    let (runs, failed): (Vec<ShardRun>, Vec<ShardRun>) = runs
        .into_iter()
        .partition(|r| !r.shard.manifest.digest.is_empty());
    let Some(first) = runs.first().cloned() else {
        m.problems
            .push("no report of a shard that moved data".into());
        return m;
    };
    let (count, manifest) = (first.shard.count, &first.shard.manifest);
    (m.shards, m.manifest_digest) = (count, manifest.digest.clone());
    (m.files, m.bytes_total) = (manifest.files, manifest.bytes);
    let latest = latest_runs(&mut m, runs, &first);
    say_failed(&mut m, &failed, &latest);
    m.missing_shards = (0..count).filter(|k| !latest.contains_key(k)).collect();
    if !m.missing_shards.is_empty() {
        m.problems
            .push(format!("no report of shard {}", list(&m.missing_shards)));
    }
    account(&mut m, &latest);
    let whole_files = check_shares(&mut m, &latest);
    let split = check_pieces(&mut m, &latest, count);
    if m.missing_shards.is_empty() {
        check_cover(&mut m, &latest);
    }
    m.files_verified = whole_files + split;
    let settled = m.files_verified + m.files_skipped_by_rule;
    m.complete = m.problems.is_empty() && settled == m.files;
    if m.problems.is_empty() && !m.complete {
        m.problems.push(format!(
            "{} of {} files verified",
            m.files_verified, m.files
        ));
    }
    m
}

/// Each shard's latest run of the transfer `first` names; a run of
/// another transfer, or split otherwise, is a problem and left out.
fn latest_runs(m: &mut Merged, runs: Vec<ShardRun>, first: &ShardRun) -> BTreeMap<u32, ShardRun> {
    let mut latest: BTreeMap<u32, ShardRun> = BTreeMap::new();
    for r in runs {
        if let Some(why) = not_of(&r, first) {
            m.problems.push(why);
            continue;
        }
        let newer = latest
            .get(&r.shard.index)
            .is_none_or(|o| o.shard.ended_unix_s <= r.shard.ended_unix_s);
        if newer {
            latest.insert(r.shard.index, r);
        }
    }
    latest
}

/// Why `r` is not a shard of the transfer `first` is one of, if it is not.
fn not_of(r: &ShardRun, first: &ShardRun) -> Option<String> {
    let (s, f) = (&r.shard, &first.shard);
    if s.transfer != f.transfer {
        return Some(format!(
            "{}: shard {} of the transfer to {}, not this one's, to {}",
            r.file, s.index, s.transfer, f.transfer
        ));
    }
    if s.count != f.count || s.manifest.digest != f.manifest.digest {
        return Some(format!(
            "{}: shard {} of {} of another transfer (manifest {}), not this one's {} of {}",
            r.file,
            s.index,
            s.count,
            short(&s.manifest.digest),
            short(&f.manifest.digest),
            f.count
        ));
    }
    if (s.split_over, s.block) != (f.split_over, f.block) {
        return Some(format!(
            "{}: shard {} split files above {} bytes in blocks of {}, not above {} in blocks of {} as {}: every shard must use the same --split-over and --block (and fit the same frames)",
            r.file, s.index, s.split_over, s.block, f.split_over, f.block, first.file
        ));
    }
    None
}

/// A shard whose only runs failed before their data: why.
fn say_failed(m: &mut Merged, failed: &[ShardRun], latest: &BTreeMap<u32, ShardRun>) {
    for r in failed
        .iter()
        .filter(|r| !latest.contains_key(&r.shard.index))
    {
        let why = r.error.as_deref().unwrap_or("no reason given");
        m.problems.push(format!(
            "{}: shard {} failed before its data ({}: {why})",
            r.file, r.shard.index, r.status
        ));
    }
}

/// Why a file whose piece's receiver (of piece `by`) found a journal it
/// could not trust (piece `of`'s) is not committed, and what to do:
/// running the shards again cannot.
fn untrusted(by: u32, of: u32) -> String {
    format!(
        "the receiver of piece {by} found the journal of piece {of} made with another secret, and cannot commit the file: receivers sharing a root must run with one secret (the same --state-dir, or its secret file copied to each); then run the shards again"
    )
}

fn short(d: &str) -> &str {
    &d[..d.len().min(12)]
}

fn list(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

/// Bytes, the rate over the union of the shards' spans, each shard's line
/// and the slowest.
fn account(m: &mut Merged, latest: &BTreeMap<u32, ShardRun>) {
    let mut spans: Vec<(f64, f64)> = latest
        .values()
        .map(|r| {
            (
                r.shard.started_unix_s,
                r.shard.ended_unix_s.max(r.shard.started_unix_s),
            )
        })
        .collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut covered = 0.0;
    let mut reach = f64::MIN;
    for (a, b) in spans {
        let from = a.max(reach);
        if b > from {
            covered += b - from;
        }
        reach = reach.max(b);
    }
    m.bytes = latest.values().map(|r| r.bytes).sum();
    m.elapsed_s = covered;
    m.rate_bits_per_s = m.bytes as f64 * 8.0 / covered.max(1e-9);
    m.per_shard = latest
        .values()
        .map(|r| ShardLine {
            index: r.shard.index,
            file: r.file.clone(),
            receiver: r.shard.receiver.clone(),
            status: r.status.clone(),
            bytes: r.bytes,
            elapsed_s: r.elapsed_s,
            rate_bits_per_s: r.rate(),
        })
        .collect();
    m.slowest = m
        .per_shard
        .iter()
        .max_by(|a, b| a.elapsed_s.total_cmp(&b.elapsed_s))
        .cloned();
}

/// Whole files: each shard's share verified. Returns the files verified.
fn check_shares(m: &mut Merged, latest: &BTreeMap<u32, ShardRun>) -> u64 {
    let mut verified = 0;
    for r in latest.values() {
        let s = &r.shard;
        // Entries skipped by rule alone make a run `partial`, not short.
        let by_rule_only = r.status == "partial" && s.skipped_faults == 0;
        if r.status != "ok" && !by_rule_only {
            m.problems.push(format!(
                "shard {} ended {} ({})",
                r.shard.index, r.status, r.file
            ));
        }
        m.files_skipped_by_rule += s.skipped_by_rule_count;
        m.skipped_by_rule.extend(s.skipped_by_rule.iter().cloned());
        let unverified = s.pending_count + s.skipped_by_rule_count;
        verified += s.share_files - unverified.min(s.share_files);
        m.missing_files.extend(s.pending.iter().cloned());
        if s.pending_count > s.pending.len() as u64 {
            m.problems.push(format!(
                "shard {}: {} more files not verified",
                s.index,
                s.pending_count - s.pending.len() as u64
            ));
        }
    }
    verified
}

/// Every shard reported: their whole files and the files they split must
/// be the manifest's files, each once (shares chosen alike never overlap
/// and leave nothing out; a count that differs says they were not).
fn check_cover(m: &mut Merged, latest: &BTreeMap<u32, ShardRun>) {
    let whole: u64 = latest.values().map(|r| r.shard.share_files).sum();
    let split: std::collections::BTreeSet<&str> = latest
        .values()
        .flat_map(|r| r.shard.pieces.iter().map(|p| p.path.as_str()))
        .collect();
    let covered = whole + split.len() as u64;
    if covered != m.files {
        m.problems.push(format!(
            "the shares hold {whole} whole files and {} split ones, not the manifest's {}: the shards did not divide it alike",
            split.len(),
            m.files
        ));
    }
}

/// Split files: whole when held complete by some shard, or when every
/// piece was verified and one session committed the file with the sum of
/// their digests. Returns the files whole.
fn check_pieces(m: &mut Merged, latest: &BTreeMap<u32, ShardRun>, count: u32) -> u64 {
    let mut files: BTreeMap<&str, Vec<&PieceReport>> = BTreeMap::new();
    for r in latest.values() {
        for p in &r.shard.pieces {
            files.entry(p.path.as_str()).or_default().push(p);
        }
    }
    let mut whole = 0;
    for (path, pieces) in files {
        match piece_verdict(&pieces, count) {
            Ok(()) => whole += 1,
            Err(why) => {
                m.missing_files.push(path.to_string());
                m.problems.push(format!("{path}: {why}"));
            }
        }
    }
    whole
}

/// Why a split file's pieces do not make it whole.
#[derive(Debug, thiserror::Error)]
enum NotWhole {
    #[error("committed with digest {committed}, not the sum of its verified pieces ({want}): some piece's bytes are not the ones its shard sent")]
    OtherDigest { committed: String, want: String },
    #[error("committed with pieces other than the ones its shards verified (a session wrote a piece again after its shard's; run that shard again)")]
    OtherPieces,
    #[error("{}", untrusted(*by, *of))]
    Untrusted { by: u32, of: u32 },
    #[error("piece {} not verified", list(.0))]
    Unverified(Vec<u32>),
    #[error("every piece verified, but no shard's receiver committed the file (another session held it then): run the shards of its pieces again, the last to finish commits it")]
    Uncommitted,
}

fn piece_verdict(pieces: &[&PieceReport], count: u32) -> Result<(), NotWhole> {
    let hex = |d: &str| u64::from_str_radix(d, 16).unwrap_or(0);
    let mut sum = 0u64;
    let mut receipts = Vec::with_capacity(count as usize);
    let mut unverified = Vec::new();
    for k in 0..count {
        let verified = pieces
            .iter()
            .find(|p| p.index == k)
            .and_then(|p| Some((p.digest.as_deref()?, p.receipt.as_deref()?)));
        match verified {
            Some((d, r)) => {
                sum = sum.wrapping_add(hex(d));
                receipts.push(hex(r));
            }
            None => unverified.push(k),
        }
    }
    let want = format!("{sum:016x}");
    let want_receipts = format!("{:016x}", receipts_digest(&receipts));
    let committed: Vec<(&str, Option<&str>)> = pieces
        .iter()
        .filter_map(|p| Some((p.committed.as_deref()?, p.committed_receipts.as_deref())))
        .collect();
    // A commit of other bytes than the shards sent outweighs any claim
    // that the file is held.
    if unverified.is_empty() && committed.iter().any(|(d, _)| *d != want) {
        let digests: Vec<&str> = committed.iter().map(|(d, _)| *d).collect();
        return Err(NotWhole::OtherDigest {
            committed: digests.join(", "),
            want,
        });
    }
    // The same digest, and pieces another session journaled after the
    // shards' own (its bytes made to sum alike): other receipts.
    if unverified.is_empty() && committed.iter().any(|(_, r)| *r != Some(&want_receipts)) {
        return Err(NotWhole::OtherPieces);
    }
    if pieces.iter().any(|p| p.held) {
        return Ok(());
    }
    if committed.is_empty() {
        if let Some((by, of)) = pieces.iter().find_map(|p| Some((p.index, p.untrusted?))) {
            return Err(NotWhole::Untrusted { by, of });
        }
    }
    if !unverified.is_empty() {
        return Err(NotWhole::Unverified(unverified));
    }
    match committed.is_empty() {
        true => Err(NotWhole::Uncommitted),
        false => Ok(()),
    }
}
