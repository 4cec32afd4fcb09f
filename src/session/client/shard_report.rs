//! What one shard of a sharded transfer reports (`send --shard K/N
//! --json`): its share, what of it was verified and, for a split file's
//! pieces, the receivers' receipts, which `urmove report` merges.

use crate::protocol::control::PieceDone;
use crate::protocol::manifest::{Entry, EntryKind};

use crate::session::plan::shard::{Manifest, Shard};

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
    pub skipped_by_rule: Vec<crate::session::plan::tree::Skipped>,
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
        shard: Shard,
        manifest: Manifest,
        cfg: &super::config::SendConfig,
        entries: &[Entry],
        skipped: &[crate::session::plan::tree::Skipped],
        acked: &Acked,
        started: std::time::SystemTime,
    ) -> ShardReport {
        let by_rule: std::collections::HashMap<&str, &crate::session::plan::tree::Skipped> =
            skipped
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
