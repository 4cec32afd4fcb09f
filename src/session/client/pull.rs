//! `urmove pull`: the same transfer in the other direction. The daemon
//! walks the requested paths beneath its root and sends them; this side
//! receives them into a local directory exactly as the daemon receives a
//! push (`.urmove.part`, verified blocks, committed only when the daemon's
//! digest of the source equals this side's of what it wrote).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use crate::datapath::beneath::Root;
use crate::protocol::control::{Direction, ErrorCode, PieceDone, SessionRequest};
use crate::protocol::manifest::{check_path, Entry, EntryKind, ENTRIES_MAX};

use crate::session::sink::landing::{FrameCheck, Landing, Pace, Receivers};

use super::send::{drive, Expect};

use super::connect::open_session;

use super::report::{SendObserver, SendReport};
use super::shard_report::ShardReport;

use super::config::SendConfig;
use crate::session::link::conn::PeerEvent;
use crate::session::link::refused::Refused;
use crate::session::roles::{accept, differed};
use crate::session::sink::incoming::{Destination, Incoming};
use crate::session::sink::manifest::recv_manifest;
use crate::session::sink::rules::{Resume, Rules};
use crate::session::SessionError;

/// What the receive loop of a pull reports: progress into the run's
/// counters, files committed and rejected.
struct PullLanding<'a> {
    counters: &'a crate::coord::WorkerCounters,
    files_done: &'a AtomicU64,
    committed: u64,
    rejected: Vec<u32>,
    /// Each file verified, for a shard's report.
    acked: super::shard_report::Acked,
    /// This side's user stopped the pull (Ctrl-C).
    stop: &'a AtomicBool,
}

impl Landing for PullLanding<'_> {
    fn progress(&mut self, bytes: u64) {
        self.counters.add(bytes, 0);
    }

    fn unsent(&mut self, bytes: u64) {
        self.counters.add_unsent(bytes);
    }

    fn committed(&mut self, file_index: u32, _digest: u64) -> Result<(), SessionError> {
        self.files_done.fetch_add(1, Ordering::Relaxed);
        self.committed += 1;
        self.acked.record(file_index);
        Ok(())
    }

    fn piece(&mut self, file_index: u32, done: PieceDone) -> Result<(), SessionError> {
        self.files_done.fetch_add(1, Ordering::Relaxed);
        self.committed += 1;
        self.acked.record_piece(file_index, done);
        Ok(())
    }

    fn rejected(&mut self, file_index: u32, _digest: u64) -> Result<(), SessionError> {
        self.rejected.push(file_index);
        Ok(())
    }

    fn tick(&mut self, _streams: &[(u64, bool)]) -> Result<(), SessionError> {
        Ok(())
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Fetch `paths` (under the daemon's root) into `local`.
pub fn run_pull(
    cfg: &SendConfig,
    paths: &[String],
    local: &Path,
    interrupt: &AtomicBool,
    obs: &mut dyn SendObserver,
) -> Result<SendReport, SessionError> {
    let rules = client_rules(cfg)?;
    let started = std::time::SystemTime::now();
    let began = std::time::Instant::now();
    // This side's buffers are registered before the daemon hears of us,
    // and the request asks for the frames they fit (a memlock limit may
    // have made them smaller than --block).
    let (fit_cfg, buffers) = super::connect::fit(cfg, 4, 4, "--block", obs)?;
    let (cfg, fitted) = &super::connect::fit_shard(cfg, fit_cfg, buffers)?;
    let req = pull_request(cfg, paths)?;
    let (engine, _) = super::connect::register_fitted(*fitted, obs, |n| {
        crate::session::sink::landing::prepare_receivers(
            cfg.lanes,
            cfg.streams,
            n,
            cfg.block_size as usize,
        )
    })?;
    let mut pull = open_pull(cfg, req, local, rules, paths, &engine.lanes)?;
    // The daemon's scan, its manifest and what this side holds.
    let setup = began.elapsed();
    let total = pull.incoming.data_missing();
    let complete_before = pull.incoming.complete_before().len() as u64;
    let kept = pull.incoming.held_counts();
    if !kept.is_empty() {
        obs.info(&format!(
            "this side holds {}; {} to fetch",
            crate::session::plan::held::held_text(kept).replace("the receiver's", "its"),
            crate::coord::units::bytes_decimal(total)
        ));
    }
    let files_done = Arc::new(AtomicU64::new(complete_before));
    obs.files(Arc::clone(&files_done), pull.incoming.file_count() as u64);
    let expect = Expect::transfer(total, false);
    let (data, mut report, landed) =
        pull.receive(cfg, engine, expect, &files_done, interrupt, obs)?;
    let verified = complete_before - kept.unchanged + landed.committed;
    pull.count_into(&mut report, total, verified);
    report.set_held(kept);
    let phases = |r: &mut SendReport| {
        r.time_phases(std::time::Duration::ZERO, setup, setup, began.elapsed())
    };
    match data {
        Ok(lanes) => report.lanes = lanes,
        Err(e) => {
            // Stopped here: the daemon hears it as this side's stop; what
            // was verified is journaled by now, and kept.
            let m = crate::protocol::control::Message::Error {
                code: e.code(),
                message: e.to_string(),
            };
            let _ = crate::session::link::conn::send_msg(&mut pull.ctl, &m);
            let (files, bytes) = pull.incoming.kept();
            report.kept = Some(super::report::Kept { files, bytes });
            report.fail(&e, interrupt.load(Ordering::Relaxed));
            phases(&mut report);
            return Ok(report);
        }
    }
    let outcome = settle_pull(&landed.events, &mut pull.incoming, &landed.rejected);
    let _ = pull.ctl.tcp().shutdown(std::net::Shutdown::Both);
    // A reader waiting to hand on an event ends once nobody takes it.
    drop(landed.events);
    let _ = landed.reader.join();
    let outcome = outcome.and_then(|()| delete_extras(cfg, &pull.incoming, paths, &mut report));
    report.close();
    match outcome {
        Ok(()) => report.settle_status(),
        Err(e) => report.fail(&e, false),
    }
    if let (Some(s), Some(m)) = (cfg.shard, pull.whole.take()) {
        let held = pull.incoming.complete_before().to_vec();
        let acked = landed.acked.with_held(held);
        let (entries, skipped) = (&pull.incoming.entries, report.skipped.as_slice());
        let shard = ShardReport::of(s, m, cfg, entries, skipped, &acked, started);
        report.shard = Some(shard);
    }
    phases(&mut report);
    Ok(report)
}

/// `pull --delete`, once every file is committed: remove what this side
/// holds under the directories pulled (and in LOCAL itself when a
/// directory's contents, `DIR/`, were) that the daemon's manifest does
/// not list, keeping what the rules exclude (`--delete-excluded`: none);
/// what went is in `report`, and what could not go fails the run.
fn delete_extras(
    cfg: &SendConfig,
    incoming: &Incoming,
    paths: &[String],
    report: &mut SendReport,
) -> Result<(), SessionError> {
    if !cfg.delete {
        return Ok(());
    }
    let whole_dest = paths.iter().any(|p| p.ends_with('/'));
    let pruned = crate::session::sink::prune::prune(incoming, false, whole_dest);
    // What was removed changed its directories: durable, and their mtimes
    // the daemon's again.
    incoming.sync_dirs()?;
    incoming.settle_dirs();
    report.files_deleted = pruned.deleted.len() as u64;
    report.deleted = pruned.deleted.clone();
    pruned.failure("this side's")
}

/// The request of a pull of `paths`, each checked as a receiver checks a
/// path (a directory's contents, `DIR/`, keep their `/`), all within one
/// request.
pub(crate) fn pull_request(
    cfg: &SendConfig,
    paths: &[String],
) -> Result<SessionRequest, SessionError> {
    use crate::protocol::control::{REQ_CONTENTS, REQ_DELETE, REQ_ONE_FILE};
    for p in paths {
        let dir = p.strip_suffix('/').unwrap_or(p);
        check_path(dir)
            .map_err(|e| SessionError::local(ErrorCode::PathRefused, format!("{p}: {e}")))?;
    }
    let joined = paths.join("\0");
    if joined.len() > crate::protocol::manifest::PATH_LEN_MAX {
        return Err(SessionError::local(
            ErrorCode::TooLarge,
            "too many paths for one pull",
        ));
    }
    Ok(SessionRequest {
        // The daemon's scan lists what these let through.
        filter: cfg.filter_rules(),
        owner: [0; 32],
        rate_limit: cfg.rate_limit_bytes_per_s.map_or(0, |r| r.ceil() as u64),
        direction: Direction::Pull,
        streams: cfg.streams,
        block_size: cfg.block_size,
        // This side lands the files: what a push asks of its receiver
        // (contents, one file's name, --delete) it does itself.
        flags: cfg.flags() & !(REQ_CONTENTS | REQ_ONE_FILE | REQ_DELETE)
            | match cfg.shard {
                Some(_) => crate::protocol::control::REQ_SHARD,
                None => 0,
            },
        path: joined,
        time_ms: 0,
    })
}

/// A pull set up for its data: the files prepared under the local root,
/// the connections and keys, and the entries the daemon's scan left out.
struct Pull {
    incoming: Incoming,
    ctl: crate::session::link::conn::Control,
    streams: Vec<std::net::TcpStream>,
    keys: crate::protocol::handshake::SessionKeys,
    refused: Vec<Refused>,
    /// What the daemon's scan left out unnamed: (excluded, device nodes).
    left_out: (u64, u64),
    /// A sharded pull: the whole manifest, as the daemon told it.
    whole: Option<crate::session::plan::shard::Manifest>,
}

impl Pull {
    /// The pull's files and bytes in `report`: `total` bytes it set out to
    /// fetch, `verified` files verified in all (what was held before, see
    /// `held_counts`, the caller counts).
    fn count_into(&self, report: &mut SendReport, total: u64, verified: u64) {
        let incoming = &self.incoming;
        report.command = "pull";
        report.files = incoming.file_count() as u64;
        report.bytes_total = incoming.file_data();
        report.bytes_apparent = incoming.file_bytes();
        report.bytes_skipped = incoming.file_data().saturating_sub(total);
        report.files_verified = verified;
        report.skip(&incoming.entries, &self.refused);
        report.skip(&incoming.entries, &incoming.skipped);
        (report.files_excluded, report.devices_left_out) = self.left_out;
    }
}

/// Open a pull session for `req`: the daemon's manifest (only what was
/// asked for) prepared under `local` with `rules` (see [`local_root`]),
/// and the sink's part of the setup (see `roles::accept`) over this side's
/// `lanes`.
fn open_pull(
    cfg: &SendConfig,
    req: SessionRequest,
    local: &Path,
    rules: Rules,
    paths: &[String],
    lanes: &[crate::session::link::lanes::Lane],
) -> Result<Pull, SessionError> {
    let mut incoming = None;
    let mut whole = None;
    let (ctl, streams, keys, before) = open_session(cfg, req, lanes.len(), &mut |ctl, key| {
        if let Some(s) = cfg.shard {
            whole = Some(ask_share(ctl, s, cfg.split_over)?);
        }
        let mut entries = recv_manifest(ctl, ENTRIES_MAX, &mut |_| Ok(()))?;
        check_asked_for(&entries, paths)?;
        let resume = (cfg.resume || cfg.checksum).then_some(Resume {
            checksum: cfg.checksum,
            key: *key,
            stamps_only: false,
        });
        let (root, dest) = local_root(local, &mut entries, cfg.one_file, rules.dry_run)?;
        let (at, block) = (Destination { root, dest }, u64::from(cfg.block_size));
        let (rules, tick) = (rules.clone(), &mut || {});
        let mut prepared = Incoming::prepare(at, entries, block, cfg.direct, rules, resume, tick)?;
        accept(ctl, &mut prepared, lanes, &mut || {})?;
        incoming = Some(prepared);
        Ok(())
    })?;
    Ok(Pull {
        incoming: incoming.expect("prepared before the streams opened"),
        ctl,
        streams,
        keys,
        refused: before.refused,
        left_out: before.left_out,
        whole,
    })
}

/// A sharded pull: tell the daemon which shard, hear of the whole
/// manifest (the daemon offers only the share).
pub(crate) fn ask_share(
    ctl: &mut crate::session::link::conn::Control,
    s: crate::session::plan::shard::Shard,
    split_over: u64,
) -> Result<crate::session::plan::shard::Manifest, SessionError> {
    use crate::protocol::control::Message;
    use crate::session::link::conn::{recv_msg, send_msg};
    let m = Message::Shard {
        index: s.index,
        count: s.count,
        split_over,
    };
    send_msg(ctl, &m)?;
    match recv_msg(ctl)? {
        Message::ShardManifest {
            files,
            bytes,
            digest,
        } => Ok(crate::session::plan::shard::Manifest::told(
            files, bytes, &digest,
        )),
        m => Err(crate::session::link::conn::unexpected(ctl, &m)),
    }
}

/// What a pull's lanes leave for its end: files committed and rejected,
/// the daemon's events still to read and their reader.
struct Landed {
    committed: u64,
    rejected: Vec<u32>,
    acked: super::shard_report::Acked,
    events: mpsc::Receiver<PeerEvent>,
    reader: std::thread::JoinHandle<()>,
}

/// What a pull's data phase comes back with: the lanes' outcome, the
/// report of the run, and what was landed.
type Received = (
    Result<Vec<crate::session::link::lanes::LaneReport>, SessionError>,
    SendReport,
    Landed,
);

impl Pull {
    /// Receive the data on `engine`'s lanes while the daemon's events are
    /// read on another thread (the data thread takes them; this one the
    /// summary after), counting the files done in `files_done`.
    fn receive(
        &mut self,
        cfg: &SendConfig,
        engine: Receivers,
        expect: Expect,
        files_done: &AtomicU64,
        interrupt: &AtomicBool,
        obs: &mut dyn SendObserver,
    ) -> Result<Received, SessionError> {
        let check = FrameCheck {
            key: crate::protocol::seal::frame_key(&self.keys),
            open: cfg.encrypt.then(|| {
                let dir = crate::protocol::seal::Direction::ServerToClient;
                (self.keys.clone(), dir)
            }),
        };
        let pace = Pace {
            timeout: cfg.timeout,
            min_rate_bytes_per_s: crate::session::MIN_RATE_BYTES_PER_S,
        };
        let (reader, peer) = crate::session::link::conn::spawn_peer_reader(&self.ctl)?;
        let peer = std::sync::Mutex::new(peer);
        let mut landed = (0u64, Vec::new(), super::shard_report::Acked::default());
        let (incoming, streams) = (&mut self.incoming, &self.streams);
        let (data, report) = drive(cfg, expect, streams, interrupt, obs, |counters, stop| {
            let mut out = PullLanding {
                counters,
                files_done,
                committed: 0,
                rejected: Vec::new(),
                acked: super::shard_report::Acked::default(),
                stop,
            };
            let peer = peer.lock().unwrap_or_else(|p| p.into_inner());
            let r = incoming.receive(streams, engine, pace, &check, &peer, &mut out);
            landed = (out.committed, out.rejected, out.acked);
            r
        });
        let peer = peer.into_inner().unwrap_or_else(|p| p.into_inner());
        let landed = Landed {
            committed: landed.0,
            rejected: landed.1,
            acked: landed.2,
            events: peer.events,
            reader,
        };
        Ok((data, report, landed))
    }
}

/// The daemon's summary (it sent every file), no file rejected, and the
/// directories' modes and times.
fn settle_pull(
    rx: &mpsc::Receiver<PeerEvent>,
    incoming: &mut Incoming,
    rejected: &[u32],
) -> Result<(), SessionError> {
    let summary = match incoming.peer_summary {
        Some(s) => Some(s),
        None => wait_summary(rx),
    };
    if let Some(&first) = rejected.first() {
        let name = &incoming.entries[first as usize].path;
        return Err(differed(rejected.len(), name, "at the source", "fetch"));
    }
    match summary {
        Some((_, _, true)) => {}
        Some(_) => {
            return Err(SessionError::local(
                ErrorCode::Io,
                "the sender reports a failed session",
            ))
        }
        None => {
            return Err(SessionError::local(
                ErrorCode::Io,
                "the sender ended without its summary",
            ))
        }
    }
    incoming.finish().map(|_| ())
}

/// Where a pull lands under `local`: the root this side writes beneath
/// and the destination under it. A manifest of `one_file` (one entry, no
/// directory) that may take LOCAL's name, where LOCAL is no directory
/// (nor a link to one), lands at LOCAL itself, its parent the root (as
/// rsync and scp rename a single file); anything else lands in LOCAL, the
/// root (made if missing). A dry run makes nothing: with no LOCAL yet, its
/// root is the nearest directory that is, LOCAL the destination under it.
pub(crate) fn local_root(
    local: &Path,
    entries: &mut [Entry],
    one_file: bool,
    dry: bool,
) -> Result<(Root, String), SessionError> {
    let mut at = local.to_path_buf();
    let name = local.file_name().map(crate::protocol::names::from_os);
    if let ([one], true, Some(name)) = (entries, one_file, name) {
        if one.kind != EntryKind::Dir && !local.is_dir() {
            one.path = name;
            at = local.parent().map_or_else(PathBuf::new, Path::to_path_buf);
        }
    }
    if at.as_os_str().is_empty() {
        at = PathBuf::from(".");
    }
    let (made, dest) = match dry {
        true => nearest_dir(&at),
        false => {
            std::fs::create_dir_all(&at)
                .map_err(|e| SessionError::io(at.display().to_string(), e))?;
            (at, String::new())
        }
    };
    let root = Root::open_for_writing(&made)
        .map_err(|e| SessionError::io(made.display().to_string(), e))?;
    Ok((root, dest))
}

/// `at`, or where it is not a directory yet, its nearest ancestor that
/// is, and the rest of `at` beneath it.
fn nearest_dir(at: &Path) -> (PathBuf, String) {
    let mut base = at.to_path_buf();
    let mut rest: Vec<String> = Vec::new();
    while !base.is_dir() {
        let Some(name) = base.file_name().map(crate::protocol::names::from_os) else {
            break;
        };
        rest.push(name);
        base = base
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        if base.as_os_str().is_empty() {
            base = PathBuf::from(".");
        }
    }
    rest.reverse();
    (base, rest.join("/"))
}

/// Every entry the daemon sends must lie under what was asked for: each
/// requested path arrives as its last component (as the daemon names
/// them), and a daemon that names anything else beside it (`.bashrc`,
/// `.ssh`) is refused before a byte lands. A directory's contents
/// (`DIR/`) may hold any name: LOCAL stands for that directory.
pub(crate) fn check_asked_for(
    entries: &[crate::protocol::manifest::Entry],
    paths: &[String],
) -> Result<(), SessionError> {
    if paths.iter().any(|p| p.ends_with('/')) {
        return Ok(());
    }
    let names: Vec<&str> = paths
        .iter()
        .map(|p| p.rsplit('/').next().unwrap_or(p))
        .collect();
    let under = |path: &str| {
        names.iter().any(|n| {
            path == *n
                || path
                    .strip_prefix(n)
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    };
    match entries.iter().find(|e| !under(&e.path)) {
        None => Ok(()),
        Some(e) => Err(SessionError::local(
            ErrorCode::PathRefused,
            format!(
                "the daemon sent {}, which is not under what this pull asked for ({}): refused, nothing written",
                e.path,
                names.join(", ")
            ),
        )),
    }
}

/// The daemon's summary, once it comes (or the connection ends).
fn wait_summary(rx: &mpsc::Receiver<PeerEvent>) -> Option<(u64, u64, bool)> {
    loop {
        match rx.recv() {
            Ok(PeerEvent::Summary { files, bytes, ok }) => return Some((files, bytes, ok)),
            Ok(PeerEvent::Closed(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// How this side receives a pull: with its user's own secret (made at
/// first use in the state directory), keeping links as they are and
/// dropping setuid and setgid bits.
pub(crate) fn client_rules(cfg: &SendConfig) -> Result<Rules, SessionError> {
    let secret = crate::session::link::secret::Secret::load_or_create(&cfg.state_dir)
        .map_err(|e| SessionError::io("the state directory (--state-dir)", e))?;
    let (peer, port) = cfg.peer();
    Ok(Rules {
        // Files pulled from one daemon are not taken for another's.
        owner: Some(secret.mac(&[
            b"urmove owner: pulled from",
            peer.as_bytes(),
            b"\0",
            &port.to_le_bytes(),
        ])),
        secret,
        owners: crate::session::sink::rules::Owners::for_this_process(cfg.numeric_ids),
        ids: Arc::default(),
        dry_run: false,
        follow: false,
        stream: false,
        live_parts: false,
        sums: false,
        // What `--exclude` leaves out is kept by `--delete`, as rsync keeps
        // it (`--delete-excluded`: nothing is).
        keep: match cfg.delete_excluded {
            true => Default::default(),
            false => cfg.scan.filter.clone(),
        },
        keep_setid: false,
        devices: crate::session::sink::rules::Devices::for_this_process(
            cfg.scan.devices,
            "device nodes are made only when asked for (-D, --devices)",
        ),
        unsafe_links: crate::session::sink::rules::LinkPolicy::Keep,
        claims: Arc::default(),
        journal_budget: Arc::new(crate::session::sink::rules::JournalBudget::new(
            crate::session::sink::rules::JOURNAL_BYTES_PER_S,
        )),
    })
}
