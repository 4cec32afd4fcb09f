//! What a client session reports: its summary (`SendReport`, the JSON
//! document and what the printer reads), its intervals, and the observer
//! the printer implements.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::coord::{units, Interval};
use crate::datapath::tcp::PathReport;

use crate::protocol::manifest::EntryKind;

use crate::session::link::lanes::LaneReport;
use crate::session::link::refused::Refused;
use crate::session::plan::tree::Skipped;
use crate::session::SessionError;

/// Where a run's time went, in seconds: the scan of the sources, the
/// connection and handshake (with the receiver's placement and streams),
/// comparing what the receiver holds with the sources (both read them
/// under `--checksum`), the data until the peer's TCP had the last byte,
/// and the receiver's last commits and summary after it.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Phases {
    pub scan_s: f64,
    pub connect_s: f64,
    pub compare_s: f64,
    pub data_s: f64,
    pub commit_s: f64,
    /// A streamed push (protocol 14): when its walk ended, from the start
    /// (the data began after its first window).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub walk_s: Option<f64>,
    /// When the receiver first acknowledged a file, from the start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_commit_s: Option<f64>,
}

/// What a receiving side kept of an unfinished run: the files whose
/// verified blocks it journaled, and those blocks' bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Kept {
    pub files: u64,
    pub bytes: u64,
}

/// One interval line of a transfer.
#[derive(Debug, Clone, Copy)]
pub struct NetInterval {
    pub interval: Interval,
    /// Bytes of data the run moves in all (holes never count).
    pub total_bytes: u64,
    /// Bytes `total_bytes` counted that are done without crossing, by the
    /// interval's end (zeros `--sparse` left out): they count as done.
    pub unsent_bytes: u64,
    /// `send --follow`: how far the copy is behind the files' writers.
    pub lag: Option<Lag>,
}

/// A followed copy kept up with its writers when it was never further
/// behind than this (seconds).
pub const KEPT_UP_LAG_S: f64 = 2.0;

/// How far a followed copy is behind the writers: bytes written (in whole
/// blocks, or whole files that ended) the peer has not, and how long ago
/// the oldest of them was written.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Lag {
    pub bytes: u64,
    pub seconds: f64,
}

impl NetInterval {
    /// Bytes of the run done by the interval's end: payload, and what was
    /// counted but did not need to cross.
    pub fn done_bytes(&self) -> u64 {
        self.interval.total_bytes + self.unsent_bytes
    }
}

/// Receives progress while a transfer runs.
pub trait SendObserver {
    fn interval(&mut self, line: &NetInterval);
    /// The interval just passed to `interval`, per data stream (bytes each
    /// stream handed to its socket, frame headers included); empty when
    /// the data path does not count per stream (the receiving side).
    fn stream_intervals(&mut self, _streams: &[Interval]) {}
    /// Something went wrong but the run goes on.
    fn notice(&mut self, message: &str);
    /// Something worth knowing (what a resume found).
    fn info(&mut self, message: &str) {
        self.notice(message)
    }
    /// A detail only for who looks closer (`-v`): dropped unless asked for.
    fn detail(&mut self, _message: &str) {}
    /// Before the data flows: the count of files done so far (acknowledged,
    /// or complete before the run), kept current while the run goes, and
    /// how many the run has in all.
    fn files(&mut self, _done: Arc<AtomicU64>, _total: u64) {}
}

/// The outcome of a transfer.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SendReport {
    pub schema: u32,
    pub command: &'static str,
    /// `ok` or an error code.
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Payload bytes that crossed the network.
    pub bytes: u64,
    pub bytes_skipped: u64,
    /// Bytes of data of every file the manifest lists (what a whole run
    /// moves or finds held; holes never count).
    pub bytes_total: u64,
    /// The same files' bytes as their sizes say (holes counted): above
    /// `bytes_total` where they hold holes.
    pub bytes_apparent: u64,
    pub files: u64,
    /// Files whose bytes the receiver's digest of what it holds matched
    /// with this side's digest of the source, in this run.
    pub files_verified: u64,
    /// Files the receiver held complete and untouched since an earlier run
    /// committed them (its stamp names their size and mtime): skipped
    /// without reading either side, as rsync's quick check; counted apart
    /// from the verified ones (`--checksum` compares them by content).
    pub files_unchanged: u64,
    /// Files the receiver held complete and read again to show it (they
    /// are among the verified ones).
    pub files_found_complete: u64,
    /// Part files continued from the blocks the receiver held.
    pub files_continued: u64,
    /// Entries that could not be moved (and why); the rest was verified.
    pub files_skipped: u64,
    pub skipped: Vec<Skipped>,
    /// Entries `--exclude` left out (an excluded directory counts once).
    pub files_excluded: u64,
    /// Device nodes left out without `-D` (as rsync without --devices).
    pub devices_left_out: u64,
    /// Further names sent as hard links (`-H`).
    pub hard_links: u64,
    /// What `--delete` removed on the receiver (paths under DEST; an
    /// extra directory counts with everything in it).
    pub files_deleted: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deleted: Vec<String>,
    /// Regular files of the manifest among them (the rest was never listed).
    #[serde(skip)]
    pub(crate) listed_files_skipped: u64,
    pub elapsed_s: f64,
    /// The whole run by the wall clock (scan, setup, data, commits), and
    /// its parts (transfers; a benchmark's is its test).
    pub wall_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phases: Option<Phases>,
    pub rate_bits_per_s: f64,
    /// The lowest rate of an interval, never above `rate_bits_per_s`; with
    /// no interval of the whole --interval (`intervals_full` 0), the
    /// average rate.
    pub interval_rate_min_bits_per_s: f64,
    /// Intervals that ran the whole --interval.
    pub intervals_full: u64,
    /// The slowest interval as measured, before [`SendReport::set_rate`]
    /// holds it to the average.
    #[serde(skip)]
    pub(crate) interval_rate_min_measured: Option<f64>,
    /// Streams that carried the data (the count `-P auto` chose), and
    /// those opened.
    pub streams: u16,
    pub streams_opened: u16,
    pub streams_auto: bool,
    pub block_size_bytes: u32,
    pub zero_copy_sends: u64,
    pub zero_copy_copied: u64,
    pub zero_copy_fell_back: bool,
    /// Why zero-copy was not tried (`--zerocopy auto`), if it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zero_copy_skipped: Option<&'static str>,
    /// Frames sent again because their stream was lost.
    pub frames_resent: u64,
    /// This side's lanes (threads of the data path, each with its ring):
    /// the core each ran on, its streams and its CPU seconds.
    pub lanes: Vec<LaneReport>,
    /// What the sending streams' TCP learnt of the path (absent when this
    /// side only received).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathReport>,
    /// `--min-rate`: the gate over the run's windows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_rate: Option<crate::coord::GateResult>,
    /// `send --follow`: the largest lag behind the writers over the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag_max: Option<Lag>,
    /// `send --follow`: whether the copy kept up with the writers (its
    /// lag never above [`KEPT_UP_LAG_S`] seconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_up: Option<bool>,
    /// When the data started, to close the run when the peer confirmed it.
    #[serde(skip)]
    pub started: Option<Instant>,
    /// From the first byte to the last the peer's TCP acknowledged, when
    /// this side sent and every byte was: a benchmark's time, as iperf3's
    /// receiver counts it (not the summary's round trip after it).
    #[serde(skip)]
    pub data_elapsed: Option<Duration>,
    /// A test's end (from when its streams were ready, as iperf3's
    /// clock) and the bytes the peer had by then: acknowledged by its TCP,
    /// or received by this side.
    #[serde(skip)]
    pub in_test: Option<(Duration, u64)>,
    /// A test's length and what the peer had by its end, as iperf3
    /// counts (its rate is `rate_bits_per_s`), and how long after it the
    /// peer had every byte (the last round trips and retransmissions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_in_test: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain_s: Option<f64>,
    /// A run that stopped before its end: what the receiving side
    /// journaled for the next run to continue (absent when it did not
    /// say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<Kept>,
    /// `send --shard`: this shard's part of the whole transfer, which
    /// `urmove report` merges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<super::shard_report::ShardReport>,
}

impl SendReport {
    /// What the receiver held before the data.
    pub fn held(&self) -> crate::session::plan::held::HeldCounts {
        crate::session::plan::held::HeldCounts {
            unchanged: self.files_unchanged,
            found: self.files_found_complete,
            continued: self.files_continued,
        }
    }

    pub(crate) fn set_held(&mut self, held: crate::session::plan::held::HeldCounts) {
        self.files_unchanged = held.unchanged;
        self.files_found_complete = held.found;
        self.files_continued = held.continued;
    }

    /// Record why the run failed (`interrupted` when the user stopped it).
    pub(crate) fn fail(&mut self, e: &SessionError, interrupted: bool) {
        self.status = if interrupted {
            "interrupted"
        } else {
            e.code().name()
        };
        self.error = Some(e.to_string());
    }

    /// Note entries skipped by either side: (entry, path when the entry
    /// is not in the manifest, why).
    pub(crate) fn skip(&mut self, entries: &[crate::protocol::manifest::Entry], list: &[Refused]) {
        let name = |i: u32| {
            let e = entries.get(i as usize)?;
            Some((e.path.clone(), e.kind == EntryKind::File))
        };
        self.skip_named(&name, list);
    }

    /// [`skip`](Self::skip), each entry's name and whether it is a file
    /// told by `name` (none: the entry is unlisted, named by its path).
    pub(crate) fn skip_named(
        &mut self,
        name: &dyn Fn(u32) -> Option<(String, bool)>,
        list: &[Refused],
    ) {
        for r in list {
            let (path, is_file) = name(r.entry).unwrap_or_else(|| (r.path.clone(), false));
            self.listed_files_skipped += u64::from(is_file);
            self.files_skipped += 1;
            self.skipped.push(Skipped {
                path,
                reason: r.reason.clone(),
                by_rule: r.rule,
            });
        }
    }

    /// A run that verified everything it could but skipped some entries
    /// (files or not) is `partial`.
    pub(crate) fn settle_status(&mut self) {
        if self.status == "ok" && !self.skipped.is_empty() {
            self.status = "partial";
        }
    }

    /// A run whose data all arrived fails still when its sustained rate
    /// fell below `--min-rate`.
    pub(crate) fn judge_rate(&mut self) {
        let Some(g) = self.min_rate.filter(|g| !g.ok) else {
            return;
        };
        if matches!(self.status, "ok" | "partial") {
            self.status = "too_slow";
            self.error = Some(format!(
                "the sustained rate fell below --min-rate {}: {} of {} windows of {} short, the worst {} at {:.2} s (what arrived is verified)",
                units::rate(g.min_rate_bytes_per_s, units::RateUnit::Gbit),
                g.windows_short,
                g.windows_total,
                units::duration_s(g.window_s),
                units::rate(g.worst_window_bytes_per_s, units::RateUnit::Gbit),
                g.worst_window_at_s
            ));
        }
    }

    /// A test's rate, as iperf3 counts it: the bytes the peer had by the
    /// test's end over its length (the last round trips after it, and the
    /// retransmissions of the last segments, are the drain, reported
    /// apart). Without a test's end (it was cut short) the rate stays the
    /// whole run's.
    pub(crate) fn rate_over_test(&mut self) {
        let Some((at, bytes)) = self.in_test else {
            return;
        };
        let secs = at.as_secs_f64().max(1e-9);
        self.test_s = Some(secs);
        self.bytes_in_test = Some(bytes);
        self.drain_s = Some((self.elapsed_s - secs).max(0.0));
        self.set_rate(bytes as f64 * 8.0 / secs);
    }

    /// The run's average rate, and with it the minimum shown beside it
    /// (never above it; the average when no interval ran its length).
    pub(crate) fn set_rate(&mut self, rate_bits_per_s: f64) {
        self.rate_bits_per_s = rate_bits_per_s;
        self.interval_rate_min_bits_per_s = crate::coord::interval::summary_min(
            self.interval_rate_min_measured,
            self.intervals_full,
            rate_bits_per_s,
        );
    }

    /// The run's wall time (`wall`, from before its scan), split: the scan
    /// and the setup up to the data (`setup`, of which `compare` compared
    /// what the receiver holds), then the data (until the peer's TCP had
    /// its last byte) and the commits after it.
    pub(crate) fn time_phases(
        &mut self,
        scan: Duration,
        setup: Duration,
        compare: Duration,
        wall: Duration,
    ) {
        let data = self
            .data_elapsed
            .map_or(self.elapsed_s, |d| d.as_secs_f64());
        let data = data.min(self.elapsed_s);
        self.wall_s = wall.as_secs_f64();
        self.phases = Some(Phases {
            scan_s: scan.as_secs_f64(),
            connect_s: setup.saturating_sub(compare).as_secs_f64(),
            compare_s: compare.as_secs_f64(),
            data_s: data,
            commit_s: (self.elapsed_s - data).max(0.0),
            walk_s: None,
            first_commit_s: None,
        });
    }

    /// End the run now: the time (and so the rate) covers the data and the
    /// peer's confirmation of it (digests, fsyncs, renames), not only the
    /// bytes leaving this host.
    pub fn close(&mut self) {
        if let Some(t) = self.started {
            let secs = t.elapsed().as_secs_f64().max(1e-9);
            self.elapsed_s = secs;
            self.set_rate(self.bytes as f64 * 8.0 / secs);
        }
    }
}
