//! `urmove send`: push files and trees to a `urmove recv` daemon over one
//! control connection and N parallel data streams.

use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::coord::{units, Interval};
use crate::datapath::net::{SendStats, ZeroCopy};
use crate::datapath::tcp::{self, Congestion, PathReport};
use crate::datapath::{sys, DirectMode};
use crate::protocol::control::{
    Direction, ErrorCode, FilterRule, Message, SessionRequest, REQ_CHECKSUM, REQ_ENCRYPT,
    REQ_RESUME,
};
use crate::protocol::frame::FrameKey;
use crate::protocol::handshake::{stream_proof, ClientHandshake, Key, SessionKeys};
use crate::protocol::seal::Direction as SealDirection;

use crate::protocol::manifest::EntryKind;

pub(crate) use super::watch::{drive, Expect};
pub use super::watch::{AUTO_CAP, AUTO_START};
use crate::session::link::conn::{recv_msg, send_msg, Control};
use crate::session::link::lanes::{self, LaneReport, Lanes};
use crate::session::link::refused::Refused;
use crate::session::plan::held::Held;
use crate::session::plan::route;
use crate::session::plan::tree::{scan, Skipped, Tree};
use crate::session::roles::{differed, hear, offer, Before, Until};
use crate::session::source::sending::{
    open_source, prepare_senders, push_data, Acks, PushParams, Sources,
};
use crate::session::SessionError;

use crate::session::plan::held::{held_counts, held_text};
pub use crate::session::source::follow::FollowUntil;
use crate::session::source::follow::{Added, FollowCtx, Gauge};

/// `send --min-rate RATE --window DURATION`: the copy must sustain RATE
/// over every window in which that much waited to go.
#[derive(Debug, Clone, Copy)]
pub struct MinRate {
    pub bytes_per_s: f64,
    pub window: Duration,
}

/// How `send --follow` follows.
#[derive(Debug, Clone)]
pub struct Follow {
    pub idle: Duration,
    pub until: FollowUntil,
    /// `--live-parts`: a growing file can be read at the far end as it
    /// grows (its part, up to its `user.urmove.live` attribute).
    pub live_parts: bool,
}

/// Everything `send` needs, resolved from the command line.
#[derive(Debug, Clone)]
pub struct SendConfig {
    pub host: String,
    pub port: u16,
    /// Destination directory under the receiver's root.
    pub dest: String,
    pub sources: Vec<PathBuf>,
    pub streams: u16,
    pub block_size: u32,
    pub key: Key,
    pub zerocopy: ZeroCopy,
    pub direct: DirectMode,
    pub interval: Duration,
    pub sock_buf: Option<usize>,
    pub connect_timeout: Duration,
    /// Pace the data to at most this many bytes per second in total.
    pub rate_limit_bytes_per_s: Option<f64>,
    /// Continue from what the receiver holds; skip finished files (the
    /// default; `--ignore-times` turns it off).
    pub resume: bool,
    /// With `resume`: compare finished files by content.
    pub checksum: bool,
    /// Seal every data frame (AES-256-GCM).
    pub encrypt: bool,
    /// A peer silent (or a stream stalled) this long ends the session.
    pub timeout: Duration,
    /// Where this side keeps its secret for the resume state of pulls.
    pub state_dir: PathBuf,
    /// The data streams' congestion control (`--cc`).
    pub congestion: Congestion,
    /// `-P auto`: `streams` are opened, and frames go on as many of them
    /// as still raise the rate.
    pub auto_streams: bool,
    /// Threads of this side's data path (`--lanes`), each with its ring.
    pub lanes: Lanes,
    /// What of the sources goes, and what is carried besides the bytes
    /// (`--exclude`, `-H`, `-X`, `-A`).
    pub scan: crate::session::plan::tree::ScanRules,
    /// Owners by number (`--numeric-ids`).
    pub numeric_ids: bool,
    /// `--sparse`: runs of zeros inside data arrive as holes too (a pull
    /// asks the daemon for it).
    pub sparse: bool,
    /// Remove the receiver's extra entries under the manifest's
    /// directories (`--delete`).
    pub delete: bool,
    /// `--delete-excluded`: what `--exclude` leaves out is removed too.
    pub delete_excluded: bool,
    /// A source is a directory's contents (`DIR/`): the destination
    /// stands for that directory (`--delete` prunes it too).
    pub contents: bool,
    /// One file, no directory, that may take the destination's name where
    /// the receiver holds no directory there (rsync's and scp's rename): a
    /// push asks the daemon (`REQ_ONE_FILE`); a pull's client, the
    /// receiver, decides it by itself for LOCAL_DIR.
    pub one_file: bool,
    /// `--follow`: files still being written go as they grow, each ending
    /// once nobody writes it and it stayed idle for `idle`
    /// (`--follow-idle`); what appears in the directories is added until
    /// `until` (`--follow-until`).
    pub follow: Option<Follow>,
    /// `--min-rate`, `--window`: the run fails when the sustained rate fell
    /// short (the files still arrive and are verified).
    pub min_rate: Option<MinRate>,
    /// `--shard K/N`: this session moves its share of the manifest
    /// (`shard::select`), files above `split_over` bytes split into
    /// pieces over the shards.
    pub shard: Option<crate::session::plan::shard::Shard>,
    pub split_over: u64,
    /// What every shard of one transfer names alike (the receivers and
    /// where: `HOST1,HOST2:DEST`), which `urmove report` holds them to.
    pub transfer: String,
}

impl SendConfig {
    /// A configuration for `host:port` with `key` and the defaults: 4
    /// streams, 4 MiB blocks, zero-copy and O_DIRECT where they pay,
    /// 1 s intervals, no rate limit, resuming.
    pub fn to(host: String, port: u16, key: Key) -> Self {
        SendConfig {
            host,
            port,
            dest: String::new(),
            sources: Vec::new(),
            streams: 4,
            block_size: 4 << 20,
            key,
            zerocopy: ZeroCopy::Auto,
            direct: DirectMode::Auto,
            interval: Duration::from_secs(1),
            sock_buf: None,
            connect_timeout: Duration::from_secs(10),
            rate_limit_bytes_per_s: None,
            resume: true,
            checksum: false,
            encrypt: false,
            timeout: Duration::from_secs(60),
            state_dir: crate::session::link::secret::default_state_dir(),
            congestion: Congestion::Auto,
            auto_streams: false,
            lanes: Lanes::Auto,
            scan: crate::session::plan::tree::ScanRules::default(),
            numeric_ids: false,
            sparse: false,
            delete: false,
            delete_excluded: false,
            contents: false,
            one_file: false,
            follow: None,
            min_rate: None,
            shard: None,
            split_over: crate::session::plan::shard::SPLIT_OVER,
            transfer: String::new(),
        }
    }

    /// The request flags this configuration asks for.
    pub fn flags(&self) -> u32 {
        let mut f = 0;
        if self.resume || self.checksum {
            f |= REQ_RESUME;
        }
        if self.checksum {
            f |= REQ_CHECKSUM;
        }
        if self.encrypt {
            f |= REQ_ENCRYPT;
        }
        if self.numeric_ids {
            f |= crate::protocol::control::REQ_NUMERIC_IDS;
        }
        if self.delete {
            f |= crate::protocol::control::REQ_DELETE;
        }
        f |= self.scan.request_flags();
        if self.contents {
            f |= crate::protocol::control::REQ_CONTENTS;
        }
        if self.one_file {
            f |= crate::protocol::control::REQ_ONE_FILE;
        }
        if self.sparse {
            f |= crate::protocol::control::REQ_SPARSE;
        }
        if let Some(follow) = &self.follow {
            f |= crate::protocol::control::REQ_FOLLOW;
            if follow.live_parts {
                f |= crate::protocol::control::REQ_LIVE_PARTS;
            }
        }
        f
    }

    /// The request of a push by the client `owner`.
    pub(crate) fn push_request(&self, owner: [u8; 32]) -> SessionRequest {
        SessionRequest {
            owner,
            // This side sends, and paces its own streams.
            rate_limit: 0,
            direction: Direction::Push,
            streams: self.streams,
            block_size: self.block_size,
            flags: self.flags(),
            path: self.dest.clone(),
            filter: self.protect(),
        }
    }

    /// The rules a `--delete` push gives the receiver, for it to keep what
    /// they exclude (none without `--delete`, or with `--delete-excluded`).
    pub fn protect(&self) -> Vec<FilterRule> {
        match self.delete && !self.delete_excluded {
            true => self.filter_rules(),
            false => Vec::new(),
        }
    }

    /// `--exclude` and `--include`, in order, as a request carries them.
    pub fn filter_rules(&self) -> Vec<FilterRule> {
        let rules = self.scan.filter.rules();
        rules
            .map(|(v, p)| FilterRule {
                include: v == crate::session::plan::filter::Verdict::Include,
                pattern: p.to_owned(),
            })
            .collect()
    }
}

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
        for r in list {
            let path = match entries.get(r.entry as usize) {
                Some(e) => e.path.clone(),
                None => r.path.clone(),
            };
            let is_file = entries
                .get(r.entry as usize)
                .is_some_and(|e| e.kind == EntryKind::File);
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
        (scan, setup): (Duration, Duration),
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

fn random<const N: usize>() -> Result<[u8; N], SessionError> {
    let mut b = [0u8; N];
    sys::random_bytes(&mut b).map_err(|e| SessionError::io("random bytes", e))?;
    Ok(b)
}

fn connect(cfg: &SendConfig) -> Result<TcpStream, SessionError> {
    let what = format!("connecting to {}:{}", cfg.host, cfg.port);
    let addrs = (cfg.host.as_str(), cfg.port)
        .to_socket_addrs()
        .map_err(|e| SessionError::io(what.clone(), e))?;
    let mut last = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, cfg.connect_timeout) {
            Ok(s) => {
                s.set_nodelay(true)
                    .map_err(|e| SessionError::io(what.clone(), e))?;
                sys::set_dead_peer_timeout(s.as_raw_fd(), cfg.timeout);
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(SessionError::io(
        what,
        last.unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address")),
    ))
}

/// Connect, authenticate, ask for `req`, run `between` (sending or
/// receiving the manifest; it is given the session's frame key), wait
/// until the daemon is ready, and open the data streams, each proving it
/// belongs to the session, each from the core of the lane of `lanes` that
/// will carry it (see [`open_streams`]).
pub(crate) fn open_session(
    cfg: &SendConfig,
    req: SessionRequest,
    lanes: usize,
    between: &mut dyn FnMut(&mut Control, &FrameKey) -> Result<(), SessionError>,
) -> Result<Opened, SessionError> {
    let streams_n = req.streams;
    // Where this side receives the data, --sock-buf is its receive buffer.
    let receiving = matches!(req.direction, Direction::Pull | Direction::BenchReverse);
    let (mut ctl, keys) = begin(cfg, req)?;
    between(&mut ctl, &crate::protocol::seal::frame_key(&keys))?;
    // The receiver's refusals and placement, until it is ready.
    let before = hear(&mut ctl, Until::Ready)?;
    let streams = open_streams(cfg, &keys, streams_n, lanes)?;
    if let Some(b) = cfg.sock_buf.filter(|_| receiving) {
        streams
            .iter()
            .for_each(|st| sys::set_recv_buffer(st.as_raw_fd(), b));
    }
    if let Some(rate) = cfg.rate_limit_bytes_per_s.filter(|_| !receiving) {
        let fds: Vec<_> = streams.iter().map(|s| s.as_raw_fd()).collect();
        let carrying = if cfg.auto_streams {
            AUTO_START
        } else {
            streams_n
        };
        tcp::pace(&fds, rate, carrying.into())
            .map_err(|e| SessionError::io("pacing the data streams", e))?;
    }
    Ok((ctl, streams, keys, before))
}

/// Connect, authenticate both ways and send `req`: the control
/// connection, sealed from then on, and the session's keys.
pub(crate) fn begin(
    cfg: &SendConfig,
    req: SessionRequest,
) -> Result<(Control, SessionKeys), SessionError> {
    let mut ctl = Control::new(connect(cfg)?);
    ctl.set_read_timeout(Some(cfg.timeout.max(Duration::from_secs(1))))?;
    let (mut hs, hello) = ClientHandshake::new(cfg.key, random()?);
    send_msg(&mut ctl, &Message::Hello(hello))?;
    let Message::Challenge(ch) = recv_msg(&mut ctl)? else {
        return Err(SessionError::Protocol(
            "expected the receiver's challenge".into(),
        ));
    };
    // A receiver without our key is told so before we hang up.
    let auth = hs
        .on_challenge(&ch)
        .map_err(|e| crate::session::link::conn::fail(&mut ctl, SessionError::Auth(e)))?;
    send_msg(&mut ctl, &Message::Auth(auth))?;
    let Message::Welcome(welcome) = recv_msg(&mut ctl)? else {
        return Err(SessionError::Protocol(
            "expected the receiver's welcome".into(),
        ));
    };
    let keys = hs.on_welcome(&welcome).map_err(SessionError::Auth)?;
    // Everything after the welcome is sealed with the session's keys.
    ctl.secure(&keys, true);
    send_msg(&mut ctl, &Message::Request(req))?;
    Ok((ctl, keys))
}

/// Data streams connected at once: a round trip for four instead of one
/// each (16 streams over 100 ms took 1.6 s one after the other), and no
/// more unauthenticated connections at once than a daemon with a low
/// `--max-unauthenticated-per-address` (4) takes.
const CONNECT_AT_ONCE: usize = 4;

/// Connect data streams `0..n` in parallel, each set up (`--sock-buf`,
/// `--cc`) and proving it belongs to the session; in index order. With
/// several `lanes`, stream `i` is connected from a thread on the core its
/// lane (`i mod lanes`) will be pinned to: a receiver on this host places
/// the stream by the core its packets came in on (`SO_INCOMING_CPU`, on
/// loopback the sender's), so it lands on the receiving lane beside the
/// lane that carries it, as its data will. (From an unpinned thread the
/// placement fell either way: `bench --net -P 4` on two lanes ran at 38
/// or at 52 Gbit/s.) Over a NIC the receiver's interrupt core decides and
/// this changes nothing.
fn open_streams(
    cfg: &SendConfig,
    keys: &SessionKeys,
    n: u16,
    lanes: usize,
) -> Result<Vec<TcpStream>, SessionError> {
    let all: Vec<u16> = (0..n).collect();
    let mut streams = Vec::with_capacity(all.len());
    for group in all.chunks(CONNECT_AT_ONCE) {
        let opened: Vec<Result<TcpStream, SessionError>> = std::thread::scope(|scope| {
            let each: Vec<_> = group
                .iter()
                .map(|&i| {
                    scope.spawn(move || {
                        if lanes > 1 {
                            let _ = crate::datapath::topology::pin_worker(usize::from(i) % lanes);
                        }
                        open_stream(cfg, keys, i)
                    })
                })
                .collect();
            each.into_iter()
                .map(|h| h.join().expect("a connecting thread panicked"))
                .collect()
        });
        for st in opened {
            streams.push(st?);
        }
    }
    Ok(streams)
}

fn open_stream(cfg: &SendConfig, keys: &SessionKeys, i: u16) -> Result<TcpStream, SessionError> {
    let st = connect(cfg)?;
    if let Some(b) = cfg.sock_buf {
        set_sock_buf(&st, b);
    }
    cfg.congestion
        .apply(st.as_raw_fd())
        .map_err(|e| SessionError::io(format!("data stream {i}"), e))?;
    let mut hello = Control::new(st);
    send_msg(
        &mut hello,
        &Message::StreamHello {
            session_id: keys.session_id,
            stream_index: i,
            proof: stream_proof(keys, i),
        },
    )?;
    Ok(hello.into_tcp())
}

/// A session ready for data: the control connection, the data streams,
/// the keys, and the entries the receiver said it will not create.
pub(crate) type Opened = (Control, Vec<TcpStream>, SessionKeys, Before);

/// This side's buffers (`per_stream` a stream plus `extra`) fitted to its
/// locked-memory limit, saying what was lowered: the configuration with
/// the block size the session will ask for, and the buffer count.
pub(crate) fn fit(
    cfg: &SendConfig,
    per_stream: usize,
    extra: usize,
    block_option: &str,
    obs: &mut dyn SendObserver,
) -> Result<(SendConfig, usize), SessionError> {
    // Streams share the buffers: `-P auto` takes what its start needs.
    let streams = if cfg.auto_streams {
        AUTO_START
    } else {
        cfg.streams
    };
    let want = crate::session::buffer_count(streams as usize, cfg.block_size, per_stream, extra);
    let f = crate::session::fit_buffers(
        want,
        cfg.block_size,
        crate::session::memlock_budget(),
        block_option,
    )?;
    if let Some(note) = &f.note {
        obs.notice(note);
    }
    let cfg = SendConfig {
        block_size: f.block,
        ..cfg.clone()
    };
    Ok((cfg, f.count))
}

/// A shard splits the manifest by its blocks, as every other shard must:
/// frames the locked-memory limit made smaller than `--block` would split
/// it otherwise, so a shard refuses them (saying which `--block` fits).
pub(crate) fn fit_shard(
    asked: &SendConfig,
    (cfg, count): (SendConfig, usize),
) -> Result<(SendConfig, usize), SessionError> {
    if asked.shard.is_none() || cfg.block_size == asked.block_size {
        return Ok((cfg, count));
    }
    Err(SessionError::local(
        ErrorCode::BadRequest,
        format!(
            "--shard: this host's locked-memory limit fits only {} KiB frames, and every shard must split the transfer by the same --block ({} KiB here): give every shard --block {}K, or raise the limit (LimitMEMLOCK=, CAP_IPC_LOCK)",
            cfg.block_size >> 10,
            asked.block_size >> 10,
            cfg.block_size >> 10
        ),
    ))
}

/// Register this side's `buffers` with `make(count)`, halving the count
/// while the kernel refuses them for want of locked memory: it counts
/// RLIMIT_MEMLOCK per user, so this user's other transfers may hold part
/// of what [`fit`] counted on. The count registered comes back too.
pub(crate) fn register_fitted<T>(
    buffers: usize,
    obs: &mut dyn SendObserver,
    make: impl Fn(usize) -> Result<T, SessionError>,
) -> Result<(T, usize), SessionError> {
    let mut n = buffers;
    loop {
        match make(n) {
            Err(SessionError::Data(e))
                if e.is_locked_memory_short() && n / 2 >= crate::session::BUFFERS_MIN =>
            {
                n /= 2;
                obs.notice(&format!(
                    "locked memory is shared by this user's processes (the kernel counts RLIMIT_MEMLOCK per user) and others hold part of it: going on with {n} buffers"
                ));
            }
            other => return other.map(|t| (t, n)),
        }
    }
}

pub(crate) fn note_zero_copy(
    report: &mut SendReport,
    stats: &SendStats,
    obs: &mut dyn SendObserver,
) {
    report.zero_copy_sends = stats.zc_sends;
    report.zero_copy_copied = stats.zc_copied;
    report.zero_copy_fell_back = stats.zc_fell_back;
    report.zero_copy_skipped = stats.zc_skipped;
    if let Some(why) = stats.zc_skipped {
        obs.detail(&format!("zero-copy sends not tried: {why}"));
    }
    if stats.zc_fell_back {
        obs.detail(
            "zero-copy sends were copied by the kernel (loopback or veth): fell back to plain send",
        );
    }
}

/// Run a push. Setup failures (connection, authentication, refusal) come
/// back as `Err`; a transfer that started reports its outcome in the report.
pub fn run_send(
    cfg: &SendConfig,
    interrupt: &AtomicBool,
    obs: &mut dyn SendObserver,
) -> Result<SendReport, SessionError> {
    let began = Instant::now();
    let mut tree = scan_sources(cfg)?;
    let scanned = began.elapsed();
    // This side's buffers are registered before the receiver hears of us.
    let (cfg, fitted) = &fit_shard(cfg, fit(cfg, 4, 4, "--block", obs)?)?;
    let started = std::time::SystemTime::now();
    let whole = cfg.shard.map(|s| {
        let m = crate::session::plan::shard::manifest_of(&tree.entries);
        crate::session::plan::shard::select(
            &mut tree,
            s,
            cfg.split_over,
            u64::from(cfg.block_size),
        );
        (s, m)
    });
    mark_followed(cfg, &mut tree, obs);
    let (gauge, added) = (Gauge::default(), Added::new(tree.entries.len()));
    let mut push = open_push(cfg, &tree, *fitted, obs)?;
    let opened = began.elapsed();
    let (skipped, kept) = note_held(&tree, &push.held, cfg.block_size, obs);
    let block = u64::from(cfg.block_size);
    let room = cfg
        .follow
        .as_ref()
        .map_or(0, |_| crate::session::source::follow::ADDED_MAX);
    let acks = Acks::new(&tree, (&push.held, room), cfg.streams, &push.refused);
    obs.files(Arc::clone(&acks.files_done), tree.file_count() as u64);
    let share = tree.data_bytes_in(block);
    let refused = push.held.refused_bytes(&tree, block);
    let to_send = share.saturating_sub(skipped + refused);
    gauge.total.store(to_send, Ordering::Release);
    let follow = cfg.follow.as_ref().map(|f| FollowCtx {
        idle: f.idle,
        until: &f.until,
        gauge: &gauge,
        added: &added,
        rules: &cfg.scan,
    });
    let expect = Expect::transfer(to_send, true).following(follow.as_ref().map(|f| f.gauge));
    let (data, mut report, receipts) =
        push.transfer(cfg, expect, (&acks, follow.as_ref()), interrupt, obs)?;
    let entries = [tree.entries.as_slice(), &added.entries()].concat();
    report.files = entries.iter().filter(|e| e.kind == EntryKind::File).count() as u64;
    report.bytes_skipped = skipped;
    (
        report.files_unchanged,
        report.files_found_complete,
        report.files_continued,
    ) = kept;
    describe_tree(&mut report, &tree, &push.refused);
    // Followed files count as large as they grew.
    let grew = gauge.total.load(Ordering::Acquire).saturating_sub(to_send);
    report.bytes_total = share + grew;
    report.bytes_apparent = tree.file_bytes_in(block) + grew;
    let interrupted = interrupt.load(Ordering::Relaxed);
    let outcome = (data, receipts);
    let pieces = settle_push(&push, &entries, outcome, interrupted, &mut report, obs);
    if let Some((s, m)) = whole {
        let acked = pieces.with_held(push.held.complete.keys().copied());
        let listed = (entries.as_slice(), report.skipped.as_slice());
        let shard = super::shard_report::ShardReport::of((s, m), cfg, listed, &acked, started);
        report.shard = Some(shard);
    }
    if !matches!(report.status, "ok" | "partial") {
        // What the receiver acknowledged before the end, apart from the
        // files it knew unchanged.
        let done = acks.files_done.load(Ordering::Relaxed);
        report.files_verified = done.saturating_sub(report.files_unchanged);
    }
    report.judge_rate();
    let compare = push.compare;
    report.time_phases(
        (scanned, opened.saturating_sub(scanned)),
        compare,
        began.elapsed(),
    );
    Ok(report)
}

/// The manifest of the sources, or why there is nothing to send.
fn scan_sources(cfg: &SendConfig) -> Result<Tree, SessionError> {
    let tree = scan(&cfg.sources, &cfg.scan)?;
    if tree.entries.is_empty() && tree.excluded > 0 {
        return Err(SessionError::local(
            crate::protocol::control::ErrorCode::BadRequest,
            format!(
                "nothing to send: --exclude left out all {} of the sources",
                units::count(tree.excluded, "entry")
            ),
        ));
    }
    Ok(tree)
}

/// `--follow`: the files still being written are marked growing.
fn mark_followed(cfg: &SendConfig, tree: &mut Tree, obs: &mut dyn SendObserver) {
    let Some(f) = &cfg.follow else { return };
    let n = crate::session::source::follow::mark_growing(tree, u64::from(cfg.block_size), f.idle);
    obs.info(&format!(
        "following {} still being written (each ends once nobody writes it and it stays unchanged for {})",
        units::count(n as u64, "file"),
        units::duration_s(f.idle.as_secs_f64())
    ));
}

/// What the receiver holds, told: the bytes it needs no more, and its
/// counts (unchanged, found complete, continued).
fn note_held(
    tree: &Tree,
    held: &Held,
    block: u32,
    obs: &mut dyn SendObserver,
) -> (u64, (u64, u64, u64)) {
    let skipped = held.bytes(tree, u64::from(block));
    let kept = held_counts(
        held.complete.len(),
        held.unchanged.len(),
        held.partial.len(),
    );
    if kept != (0, 0, 0) {
        obs.info(&format!(
            "the receiver holds {}; {} to send",
            held_text(kept),
            units::bytes_decimal(tree.data_bytes_in(u64::from(block)).saturating_sub(skipped))
        ));
    }
    (skipped, kept)
}

/// What the scan and the receiver left out, and the tree's shape.
fn describe_tree(report: &mut SendReport, tree: &Tree, refused: &[Refused]) {
    report.skip(&tree.entries, &tree.skipped_refs());
    report.skip(&tree.entries, refused);
    report.files_excluded = tree.excluded;
    report.devices_left_out = tree.devices_left;
    report.hard_links = tree.hard_links() as u64;
}

/// A push set up for its data: the sources, what the receiver holds and
/// refuses, the route of each file's frames, the connections, and this
/// side's lanes with their senders.
struct Push<'t> {
    tree: &'t Tree,
    held: Held,
    refused: Vec<Refused>,
    route: route::Route,
    ctl: Control,
    streams: Vec<TcpStream>,
    params: PushParams,
    plan: Vec<lanes::Lane>,
    txs: Vec<crate::datapath::net::NetSender>,
    /// How long comparing what the receiver holds took.
    compare: Duration,
}

/// Set up a push of `tree` with `buffers` registered first (see
/// [`register_fitted`]): the session opened, the manifest offered (and,
/// resuming, what the receiver holds checked), the frames keyed and routed.
fn open_push<'t>(
    cfg: &SendConfig,
    tree: &'t Tree,
    buffers: usize,
    obs: &mut dyn SendObserver,
) -> Result<Push<'t>, SessionError> {
    let ((plan, txs), buffers) = register_fitted(buffers, obs, |n| {
        let carrying = if cfg.auto_streams {
            AUTO_START
        } else {
            cfg.streams
        };
        prepare_senders(cfg.lanes, cfg.streams, carrying, &push_params(cfg, n))
    })?;
    let at = (cfg.host.as_str(), cfg.port);
    let owner = crate::session::link::secret::owner_token(&cfg.state_dir, at).unwrap_or_else(|e| {
        obs.info(&format!(
            "no state directory ({e}): the files the receiver holds are read again to compare"
        ));
        [0; 32]
    });
    let req = cfg.push_request(owner);
    let block = u64::from(cfg.block_size);
    let local =
        |i: usize| open_source(&tree.sources[i], tree.ids[i], DirectMode::Off).map(|(f, _)| f);
    let resume = cfg.resume || cfg.checksum;
    let mut held = Held::default();
    let mut compare = Duration::ZERO;
    let (ctl, streams, keys, before) = open_session(cfg, req, plan.len(), &mut |ctl, key| {
        let key = resume.then_some((key, cfg.checksum));
        let t = Instant::now();
        held = offer(ctl, (tree, block), key, &local, &mut |_| Ok(()))?;
        compare = t.elapsed();
        Ok(())
    })?;
    held.refuse(&before.refused);
    let mut params = push_params(cfg, buffers);
    params.key_with(keys, cfg.encrypt.then_some(SealDirection::ClientToServer));
    let shape = (tree.entries.len(), cfg.streams);
    let route = route::for_source(before.placement, shape, &plan, tree.to_send(&held))?;
    Ok(Push {
        tree,
        held,
        refused: before.refused,
        route,
        ctl,
        streams,
        params,
        plan,
        txs,
        compare,
    })
}

/// What a push's data phase comes back with: the lanes' outcome, the
/// report of the run, and the receiver's acknowledgements.
type Moved = (
    Result<crate::session::source::sending::Pushed, SessionError>,
    SendReport,
    Result<Receipts, SessionError>,
);

impl Push<'_> {
    /// Move the data on the lanes while another thread reads the
    /// acknowledgements into `acked` (a receiver that finishes many files
    /// must never block on a full control socket); a failure is told to the
    /// receiver, which keeps only `.part` files.
    fn transfer(
        &mut self,
        cfg: &SendConfig,
        expect: Expect<'_>,
        (acked, follow): (&Acks, Option<&FollowCtx<'_>>),
        interrupt: &AtomicBool,
        obs: &mut dyn SendObserver,
    ) -> Result<Moved, SessionError> {
        let mut reader = self.ctl.try_clone()?;
        reader.set_read_timeout(Some(cfg.timeout.max(Duration::from_secs(1))))?;
        let announce_on = self.ctl.try_clone()?;
        let txs = std::mem::take(&mut self.txs);
        let added = follow.map(|f| f.added);
        let open = |i: usize| match self.tree.sources.get(i) {
            Some(path) => open_source(path, self.tree.ids[i], cfg.direct),
            None => match added.and_then(|a| a.source(i)) {
                Some((path, id)) => open_source(&path, id, cfg.direct),
                None => Err(format!("entry {i} is no source")),
            },
        };
        Ok(std::thread::scope(|scope| {
            let acks = scope.spawn(move || {
                let r = read_acks(&mut reader, acked);
                acked.ended.store(true, Ordering::Release);
                r
            });
            let from = Sources {
                tree: self.tree,
                held: &self.held,
                acked: Some(acked),
                open: &open,
                announce_on: &announce_on,
                route: &self.route,
                follow,
            };
            let (data, report) = drive(cfg, expect, &self.streams, interrupt, obs, |c, stop| {
                push_data(&self.params, &from, &self.plan, &self.streams, c, stop, txs)
            });
            if let Err(e) = &data {
                // (It ends the session, so the reader returns.)
                let m = Message::Error {
                    code: e.code(),
                    message: e.to_string(),
                };
                let _ = send_msg(&mut self.ctl, &m);
            }
            let acks = acks.join().unwrap_or_else(|_| {
                Err(SessionError::Protocol(
                    "the acknowledgement reader panicked".into(),
                ))
            });
            (data, report, acks)
        }))
    }
}

/// The outcome of a push in its report: what the lanes did, then every
/// file acknowledged with a digest that must match ours.
fn settle_push(
    push: &Push<'_>,
    entries: &[crate::protocol::manifest::Entry],
    (data, acks): (
        Result<crate::session::source::sending::Pushed, SessionError>,
        Result<Receipts, SessionError>,
    ),
    interrupted: bool,
    report: &mut SendReport,
    obs: &mut dyn SendObserver,
) -> super::shard_report::Acked {
    let pushed = match data {
        Ok(pushed) => pushed,
        Err(e) => {
            // The receiver's reason (no space, a failed write) is the one
            // to report: the lost streams only follow from it.
            let e = match acks {
                Err(refused @ SessionError::Refused { .. }) if e.is_connection_loss() => refused,
                Ok(Receipts { kept, .. }) => {
                    report.kept = kept;
                    e
                }
                _ => e,
            };
            report.fail(&e, interrupted);
            return super::shard_report::Acked::default();
        }
    };
    note_zero_copy(report, &pushed.stats, obs);
    for l in &pushed.lost {
        obs.notice(&format!(
            "data {l}; its frames went again on the other streams"
        ));
    }
    report.frames_resent = pushed.resent;
    report.lanes = pushed.lanes;
    let skipped: Vec<Refused> = pushed
        .skipped
        .iter()
        .map(|(i, why)| Refused::entry(*i, crate::session::link::refused::Why::fault(why.clone())))
        .collect();
    report.skip(entries, &skipped);
    report.skip(entries, &pushed.follow_skipped);
    report.close();
    let mut acked = super::shard_report::Acked::default();
    let checked = acks.and_then(|a| {
        report.skip(entries, &a.refused);
        acked = super::shard_report::Acked::from_acks(&a.acks, &a.pieces, &pushed.digests);
        check_acks(entries, &pushed.digests, &push.held, &a, report)
    });
    if let Err(e) = checked {
        report.fail(&e, false);
    }
    acked
}

/// What the receiver said of the files: (entry, its digest) of each it
/// committed, and of each it rejected.
#[derive(Debug, Default)]
struct Receipts {
    acks: Vec<(u32, u64)>,
    /// Of the pieces acknowledged: what their receiver told.
    pieces: std::collections::HashMap<u32, crate::protocol::control::PieceDone>,
    rejected: Vec<(u32, u64)>,
    /// What a `--delete` push removed (at most [`DELETED_KEPT`] named).
    deleted: Vec<String>,
    deleted_count: u64,
    /// After an interrupt, what the receiver journaled for the next run.
    kept: Option<Kept>,
    /// Files the receiver refused while the data came, and why.
    refused: Vec<Refused>,
}

/// Paths of a `--delete` kept for the report; the rest are counted.
const DELETED_KEPT: usize = 100_000;

/// Read acknowledgements until the receiver's summary. Each acknowledged
/// (or rejected) entry is marked in `state` (its frames need not be kept
/// for re-sending); heartbeats only show the receiver is alive.
fn read_acks(ctl: &mut Control, state: &Acks) -> Result<Receipts, SessionError> {
    let mut got = Receipts::default();
    loop {
        match recv_msg(ctl)? {
            Message::FileAck { file_index, digest } => {
                state.acknowledged(file_index);
                got.acks.push((file_index, digest))
            }
            Message::PieceAck { file_index, done } => {
                state.acknowledged(file_index);
                got.pieces.insert(file_index, done);
                got.acks.push((file_index, done.digest))
            }
            Message::FileRejected { file_index, digest } => {
                state.settle(file_index);
                got.rejected.push((file_index, digest));
            }
            Message::Alive { streams } => {
                for ((at, w), (bytes, waiting)) in
                    state.received.iter().zip(&state.waiting).zip(streams)
                {
                    at.fetch_max(bytes, Ordering::Relaxed);
                    w.store(waiting, Ordering::Relaxed);
                }
            }
            Message::Admitted { upto } => {
                state.admitted.fetch_max(upto, Ordering::AcqRel);
            }
            Message::Deleted(paths) => {
                got.deleted_count += paths.len() as u64;
                let room = DELETED_KEPT.saturating_sub(got.deleted.len());
                got.deleted.extend(paths.into_iter().take(room));
            }
            Message::Skipped {
                file_index,
                path,
                reason,
                rule,
            } => {
                state.refuse(file_index);
                got.refused.push(Refused {
                    entry: file_index,
                    path,
                    reason,
                    rule,
                });
            }
            Message::Kept { files, bytes } => {
                got.kept = Some(Kept { files, bytes });
                return Ok(got);
            }
            Message::Summary { ok: true, .. } => return Ok(got),
            Message::Summary { .. } => {
                return Err(SessionError::local(
                    ErrorCode::Io,
                    "the receiver reports a failed session",
                ))
            }
            _ => {
                return Err(SessionError::Protocol(
                    "unexpected message after the data".into(),
                ))
            }
        }
    }
}

/// Every file not skipped acknowledged once, each with the digest we
/// computed of its source: only then is it counted verified.
fn check_acks(
    entries: &[crate::protocol::manifest::Entry],
    digests: &[u64],
    held: &Held,
    got: &Receipts,
    report: &mut SendReport,
) -> Result<(), SessionError> {
    report.deleted = got.deleted.clone();
    report.files_deleted = got.deleted_count;
    let mut acked = vec![false; entries.len()];
    // Files complete before the session count as verified when their
    // digest on the receiver equalled this side's digest of the source;
    // those it knew by their stamp alone are unchanged (counted so
    // before the data).
    for &i in held.complete.keys() {
        acked[i as usize] = true;
        report.files_verified += u64::from(!held.unchanged.contains(&i));
    }
    for &(file_index, digest) in &got.acks {
        let i = file_index as usize;
        if i >= entries.len() || entries[i].kind != EntryKind::File || acked[i] {
            return Err(SessionError::Protocol(format!(
                "unexpected acknowledgement for entry {i}"
            )));
        }
        if got.pieces.contains_key(&file_index) != entries[i].piece.is_some() {
            return Err(SessionError::Protocol(format!(
                "entry {i} acknowledged as a piece when it is none, or as a whole file when it is a piece"
            )));
        }
        if digest != digests[i] {
            return Err(SessionError::local(
                ErrorCode::Io,
                format!("{}: the receiver's digest does not match", entries[i].path),
            ));
        }
        acked[i] = true;
        report.files_verified += 1;
    }
    if let Some(&(i, _)) = got.rejected.first() {
        let name = entries.get(i as usize).map_or("?", |e| e.path.as_str());
        let count = got.rejected.len();
        return Err(differed(count, name, ("on the receiver", "send")));
    }
    if report.files_verified + report.files_unchanged + report.listed_files_skipped != report.files
    {
        return Err(SessionError::local(
            ErrorCode::Io,
            format!(
                "only {} of {} files verified",
                report.files_verified, report.files
            ),
        ));
    }
    report.settle_status();
    Ok(())
}

fn set_sock_buf(s: &TcpStream, bytes: usize) {
    sys::set_send_buffer(s.as_raw_fd(), bytes);
}

/// How this side sends: `buffers` frame buffers, the configured pacing and
/// timeout.
pub(crate) fn push_params(cfg: &SendConfig, buffers: usize) -> PushParams {
    PushParams {
        block_size: cfg.block_size,
        buffers,
        zerocopy: cfg.zerocopy,
        rate_limit_bytes_per_s: cfg.rate_limit_bytes_per_s,
        timeout: cfg.timeout,
        // Both are set by `key_with` once the handshake gives the keys.
        seal: None,
        key: FrameKey { k0: 0, k1: 0 },
        zeros: cfg.sparse,
    }
}
