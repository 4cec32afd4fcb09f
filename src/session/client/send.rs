//! `urmove send`: scan the sources, open the session, offer the manifest
//! and hear what the receiver holds, push the data on the lanes, and
//! check every file the receiver acknowledged against its own digest.

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::coord::units;
use crate::datapath::DirectMode;
use crate::protocol::control::{ErrorCode, Message};
use crate::protocol::frame::FrameKey;
use crate::protocol::seal::Direction as SealDirection;

use crate::protocol::manifest::EntryKind;

pub(crate) use super::watch::{drive, Expect};
pub use super::watch::{AUTO_CAP, AUTO_START};
use crate::session::link::conn::{recv_msg, send_msg, Control};
use crate::session::link::lanes::{self};
use crate::session::link::refused::Refused;
use crate::session::plan::held::Held;
use crate::session::plan::route;
use crate::session::plan::tree::{scan, Tree};
use crate::session::roles::{differed, offer};
use crate::session::source::sending::{
    open_source, prepare_senders, push_data, Acks, DataStreams, PushParams, Sources,
};
use crate::session::SessionError;

use super::config::SendConfig;
use super::connect::{fit, fit_shard, note_zero_copy, open_session, register_fitted};
use super::report::{Kept, SendObserver, SendReport};
use super::shard_report::ShardReport;
use crate::session::plan::held::{held_counts, held_text, HeldCounts};
use crate::session::plan::unsendable::Unsendable;
pub use crate::session::source::follow::FollowUntil;
use crate::session::source::follow::{Added, FollowCtx, Gauge};
use crate::session::source::ledger::AddedFault;
use crate::session::source::stream::{StreamCtx, Walking};

/// Run a push. Setup failures (connection, authentication, refusal) come
/// back as `Err`; a transfer that started reports its outcome in the report.
pub fn run_send(
    cfg: &SendConfig,
    interrupt: &AtomicBool,
    obs: &mut dyn SendObserver,
) -> Result<SendReport, SessionError> {
    let began = Instant::now();
    let (mut tree, walking) = walk_sources(cfg)?;
    let scanned = began.elapsed();
    // This side's buffers are registered before the receiver hears of us.
    let (fit_cfg, buffers) = fit(cfg, 4, 4, "--block", obs)?;
    let (cfg, fitted) = &fit_shard(cfg, fit_cfg, buffers)?;
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
    let mut push = open_push(cfg, &mut tree, walking, *fitted, obs)?;
    let tree = push.tree;
    let (gauge, added) = (Gauge::default(), Added::new(tree.entries.len()));
    let stream = push
        .walking
        .take()
        .map(|w| StreamCtx::new(w, &added, &gauge));
    let (skipped, kept) = note_held(tree, &push.held, cfg.block_size, obs);
    let block = u64::from(cfg.block_size);
    let acks = Acks::new(tree, &push.held, cfg.streams, &push.refused);
    // (A streamed push's tables are set up by now.)
    let opened = began.elapsed();
    obs.files(Arc::clone(&acks.files_done), tree.file_count() as u64);
    let share = tree.data_bytes_in(block);
    let refused = push.held.refused_bytes(tree, block);
    let to_send = share.saturating_sub(skipped + refused);
    gauge.total.store(to_send, Ordering::Release);
    let follow = cfg.follow.as_ref().map(|f| FollowCtx {
        idle: f.idle,
        until: &f.until,
        gauge: &gauge,
        added: &added,
        rules: &cfg.scan,
    });
    let growing = follow.as_ref().map(|f| f.gauge);
    let expect =
        Expect::transfer(to_send, true).following(growing.or(stream.as_ref().map(|s| s.gauge)));
    let adding = Adding {
        follow: follow.as_ref(),
        stream: stream.as_ref(),
    };
    let (data, mut report, receipts) = push.transfer(cfg, expect, &acks, adding, interrupt, obs)?;
    // The entries added after the manifest were counted and checked as
    // they settled: only the names of those skipped are kept.
    report.files = tree.file_count() as u64 + added.files();
    let name = |i: u32| match tree.entries.get(i as usize) {
        Some(e) => Some((e.path.clone(), e.kind == EntryKind::File)),
        None => added.name(i),
    };
    report.bytes_skipped = skipped;
    report.set_held(kept);
    describe_tree(&mut report, tree, &push.refused);
    let walked = stream.as_ref().map(|s| note_stream(&mut report, s, began));
    // Followed files count as large as they grew.
    let grew = gauge.total.load(Ordering::Acquire).saturating_sub(to_send);
    report.bytes_total = share + grew;
    report.bytes_apparent = tree.file_bytes_in(block) + grew;
    let interrupted = interrupt.load(Ordering::Relaxed);
    let pieces = settle_push(&push, &name, data, receipts, interrupted, &mut report, obs);
    if let Some((s, m)) = whole {
        let acked = pieces.with_held(push.held.complete.keys().copied());
        let skipped = report.skipped.as_slice();
        // (A shard neither follows nor streams: its entries are the tree's.)
        let shard = ShardReport::of(s, m, cfg, &tree.entries, skipped, &acked, started);
        report.shard = Some(shard);
    }
    if !matches!(report.status, "ok" | "partial") {
        // What the receiver acknowledged before the end, apart from the
        // files it knew unchanged.
        let done = acks.files_done.load(Ordering::Relaxed);
        report.files_verified = done.saturating_sub(report.files_unchanged);
    }
    report.judge_rate();
    let setup = opened.saturating_sub(scanned);
    report.time_phases(scanned, setup, push.compare, began.elapsed());
    if let (Some(p), Some(walked)) = (report.phases.as_mut(), walked) {
        p.walk_s = walked;
        let first = acks.first_ack.get();
        p.first_commit_s = first.map(|t| t.duration_since(began).as_secs_f64());
    }
    Ok(report)
}

/// The sources' manifest, or (a push that may stream: see
/// [`streams`]) what the walk found within its first window, with the walk
/// going on when it did not end by then.
fn walk_sources(cfg: &SendConfig) -> Result<(Tree, Option<Walking>), SessionError> {
    if !streams(cfg) {
        return scan_sources(cfg).map(|t| (t, None));
    }
    let mut walking = Walking::start(&cfg.sources, &cfg.scan)?;
    let mut tree = Tree::default();
    let (wait, least) = crate::session::source::stream::first_window();
    walking.fill(&mut tree, Some(Instant::now() + wait), least);
    if !walking.ended {
        return Ok((tree, Some(walking)));
    }
    // Over within its first window: a manifest as any.
    drop(walking);
    scan_sources(cfg).map(|t| (t, None))
}

/// Whether a push may stream its manifest (protocol 14): one source, no
/// `-H` (a file's first name must come before its links, in one window),
/// no shard (its manifest digest is the whole tree's), no `--follow`, no
/// `--checksum` (a window's held files count by their stamp alone), not
/// one file to rename (its manifest must hold it).
/// `URMOVE_NO_STREAM` set: never.
fn streams(cfg: &SendConfig) -> bool {
    cfg.sources.len() == 1
        && !cfg.one_file
        && !cfg.scan.hard_links
        && cfg.shard.is_none()
        && cfg.follow.is_none()
        && !cfg.checksum
        && std::env::var_os("URMOVE_NO_STREAM").is_none()
}

/// What a streamed push's later windows left out, in `report`; when its
/// walk ended (from `began`), if it did.
fn note_stream(report: &mut SendReport, s: &StreamCtx<'_>, began: Instant) -> Option<f64> {
    report.files_excluded += s.excluded.load(Ordering::Relaxed);
    report.devices_left_out += s.devices_left.load(Ordering::Relaxed);
    let w = s.walking.lock().unwrap_or_else(|p| p.into_inner());
    w.ended_at.map(|t| t.duration_since(began).as_secs_f64())
}

/// The manifest of the sources, or why there is nothing to send.
pub(super) fn scan_sources(cfg: &SendConfig) -> Result<Tree, SessionError> {
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
pub(super) fn mark_followed(cfg: &SendConfig, tree: &mut Tree, obs: &mut dyn SendObserver) {
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
pub(super) fn note_held(
    tree: &Tree,
    held: &Held,
    block: u32,
    obs: &mut dyn SendObserver,
) -> (u64, HeldCounts) {
    let skipped = held.bytes(tree, u64::from(block));
    let kept = held_counts(
        held.complete.len(),
        held.unchanged.len(),
        held.partial.len(),
    );
    if !kept.is_empty() {
        obs.info(&format!(
            "the receiver holds {}; {} to send",
            held_text(kept),
            units::bytes_decimal(tree.data_bytes_in(u64::from(block)).saturating_sub(skipped))
        ));
    }
    (skipped, kept)
}

/// What the scan and the receiver left out, and the tree's shape.
pub(super) fn describe_tree(report: &mut SendReport, tree: &Tree, refused: &[Refused]) {
    report.skip(&tree.entries, &tree.skipped_refs());
    report.skip(&tree.entries, refused);
    report.files_excluded = tree.excluded;
    report.devices_left_out = tree.devices_left;
    report.hard_links = tree.hard_links() as u64;
}

/// A push set up for its data: the sources, what the receiver holds and
/// refuses, the route of each file's frames, the connections, and this
/// side's lanes with their senders.
pub(super) struct Push<'t> {
    pub(super) tree: &'t Tree,
    /// A streamed push (protocol 14): its walk, still going.
    pub(super) walking: Option<Walking>,
    pub(super) held: Held,
    pub(super) refused: Vec<Refused>,
    pub(super) route: route::Route,
    pub(super) ctl: Control,
    pub(super) streams: Vec<TcpStream>,
    pub(super) params: PushParams,
    pub(super) plan: Vec<lanes::Lane>,
    pub(super) txs: Vec<crate::datapath::net::NetSender>,
    /// How long comparing what the receiver holds took.
    pub(super) compare: Duration,
}

/// Set up a push of `tree` with `buffers` registered first (see
/// [`register_fitted`]): the session opened, the manifest offered (and,
/// resuming, what the receiver holds checked), the frames keyed and routed.
pub(super) fn open_push<'t>(
    cfg: &SendConfig,
    tree: &'t mut Tree,
    mut walking: Option<Walking>,
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
    let owner =
        crate::session::link::secret::owner_token(&cfg.state_dir, &cfg.peer().0, cfg.peer().1)
            .unwrap_or_else(|e| {
                obs.info(&format!(
                "no state directory ({e}): the files the receiver holds are read again to compare"
            ));
                [0; 32]
            });
    let mut req = cfg.push_request(owner);
    if walking.is_some() {
        req.flags |= crate::protocol::control::REQ_STREAM;
    }
    let block = u64::from(cfg.block_size);
    let resume = cfg.resume || cfg.checksum;
    let mut held = Held::default();
    let mut compare = Duration::ZERO;
    let (ctl, streams, keys, before) = open_session(cfg, req, plan.len(), &mut |ctl, key| {
        // A peer of 13 takes the manifest whole: the walk ends first.
        if let Some(mut w) = walking.take_if(|_| ctl.protocol() < 14) {
            w.fill(tree, None, 0);
        }
        let tree: &Tree = tree;
        let local =
            |i: usize| open_source(&tree.sources[i], tree.ids[i], DirectMode::Off).map(|(f, _)| f);
        let key = resume.then_some((key, cfg.checksum));
        let t = Instant::now();
        held = offer(ctl, tree, block, key, &local, &mut |_| Ok(()))?;
        compare = t.elapsed();
        Ok(())
    })?;
    let tree: &'t Tree = tree;
    held.refuse(&before.refused);
    let mut params = push_params(cfg, buffers);
    params.key_with(keys, cfg.encrypt.then_some(SealDirection::ClientToServer));
    let shape = route::Shape {
        entries: tree.entries.len(),
        streams: cfg.streams,
    };
    let route = route::for_source(before.placement, shape, &plan, tree.to_send(&held))?;
    Ok(Push {
        tree,
        walking,
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

/// What a push adds after its manifest: a follow's entries, or a
/// streamed push's later windows.
pub(super) struct Adding<'f> {
    pub(super) follow: Option<&'f FollowCtx<'f>>,
    pub(super) stream: Option<&'f StreamCtx<'f>>,
}

/// What a push's data phase comes back with: the lanes' outcome, the
/// report of the run, and the receiver's acknowledgements.
pub(super) type Moved = (
    Result<crate::session::source::sending::Pushed, SessionError>,
    SendReport,
    Result<Receipts, SessionError>,
);

impl Push<'_> {
    /// Move the data on the lanes while another thread reads the
    /// acknowledgements into `acked` (a receiver that finishes many files
    /// must never block on a full control socket); a failure is told to the
    /// receiver, which keeps only `.part` files.
    pub(super) fn transfer(
        &mut self,
        cfg: &SendConfig,
        expect: Expect<'_>,
        acked: &Acks,
        adding: Adding<'_>,
        interrupt: &AtomicBool,
        obs: &mut dyn SendObserver,
    ) -> Result<Moved, SessionError> {
        let mut reader = self.ctl.try_clone()?;
        reader.set_read_timeout(Some(cfg.timeout.max(Duration::from_secs(1))))?;
        let announce_on = self.ctl.try_clone()?;
        let txs = std::mem::take(&mut self.txs);
        let Adding { follow, stream } = adding;
        let added = follow.map(|f| f.added).or(stream.map(|s| s.added));
        let open = |i: usize| match self.tree.sources.get(i) {
            Some(path) => open_source(path, self.tree.ids[i], cfg.direct),
            None => match added.and_then(|a| a.source(i)) {
                Some((path, id)) => open_source(&path, id, cfg.direct),
                None => Err(Unsendable::NoSource(i)),
            },
        };
        Ok(std::thread::scope(|scope| {
            let acks = scope.spawn(move || {
                let r = read_acks(&mut reader, acked, added);
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
                stream,
            };
            let (data, report) = drive(cfg, expect, &self.streams, interrupt, obs, |c, stop| {
                let on = DataStreams {
                    plan: &self.plan,
                    streams: &self.streams,
                    txs,
                };
                push_data(&self.params, &from, on, c, stop)
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
pub(super) fn settle_push(
    push: &Push<'_>,
    name: &dyn Fn(u32) -> Option<(String, bool)>,
    data: Result<crate::session::source::sending::Pushed, SessionError>,
    acks: Result<Receipts, SessionError>,
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
                Err(refused @ (SessionError::Refused { .. } | SessionError::Limit(_)))
                    if e.is_connection_loss() =>
                {
                    refused
                }
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
    report.skip_named(name, &skipped);
    report.skip_named(name, &pushed.follow_skipped);
    report.close();
    let mut acked = super::shard_report::Acked::default();
    let checked = acks.and_then(|a| {
        report.skip_named(name, &a.refused);
        acked = super::shard_report::Acked::from_acks(&a.acks, &a.pieces, &pushed.digests);
        check_acks(
            &push.tree.entries,
            name,
            &pushed.digests,
            &push.held,
            &a,
            report,
        )
    });
    if let Err(e) = checked {
        report.fail(&e, false);
    }
    acked
}

/// What the receiver said of the files: (entry, its digest) of each it
/// committed, and of each it rejected.
#[derive(Debug, Default)]
pub(super) struct Receipts {
    pub(super) acks: Vec<(u32, u64)>,
    /// Of the pieces acknowledged: what their receiver told.
    pub(super) pieces: std::collections::HashMap<u32, crate::protocol::control::PieceDone>,
    pub(super) rejected: Vec<(u32, u64)>,
    /// What a `--delete` push removed (at most [`DELETED_KEPT`] named).
    pub(super) deleted: Vec<String>,
    pub(super) deleted_count: u64,
    /// After an interrupt, what the receiver journaled for the next run.
    pub(super) kept: Option<Kept>,
    /// Files the receiver refused while the data came, and why.
    pub(super) refused: Vec<Refused>,
    /// A streamed push's files held unchanged (entry, plain digest).
    pub(super) unchanged: Vec<(u32, u64)>,
    /// Files added after the manifest committed with this side's digest,
    /// and held unchanged (checked as they came: see [`Added`]).
    pub(super) added_verified: u64,
    pub(super) added_unchanged: u64,
    /// The first word of the receiver's on an added entry that did not
    /// stand.
    pub(super) added_fault: Option<AddedFaultAt>,
}

/// A word of the receiver's on an added entry that did not stand: the
/// entry, its name when known, and how.
#[derive(Debug)]
pub(super) struct AddedFaultAt {
    entry: u32,
    name: Option<String>,
    fault: AddedFault,
}

impl AddedFaultAt {
    fn error(&self) -> SessionError {
        let i = self.entry;
        match (&self.fault, &self.name) {
            (AddedFault::Differs, Some(path)) => SessionError::local(
                ErrorCode::Io,
                format!("{path}: the receiver's digest does not match"),
            ),
            _ => SessionError::Protocol(format!(
                "unexpected acknowledgement for entry {i} (no file added and unsettled, or a piece)"
            )),
        }
    }
}

impl Receipts {
    /// A window's files the receiver holds unchanged by their stamp.
    fn held_unchanged(
        &mut self,
        state: &Acks,
        added: Option<&Added>,
        items: Vec<crate::protocol::control::HaveItem>,
    ) -> Result<(), SessionError> {
        for it in items {
            let crate::protocol::control::HaveItem::Unchanged { file_index, digest } = it else {
                return Err(SessionError::Protocol(
                    "a window's held file named other than unchanged".into(),
                ));
            };
            if state.is_added(file_index) {
                self.added_done(state, added, file_index, None);
                continue;
            }
            state.acknowledged(file_index);
            self.unchanged.push((file_index, digest));
        }
        Ok(())
    }

    /// The receiver committed (`digest`) or holds unchanged (none) added
    /// file `i`: counted when it stands, else its fault kept.
    fn added_done(&mut self, state: &Acks, added: Option<&Added>, i: u32, digest: Option<u64>) {
        let fault = match state.added_done(i, digest) {
            Ok(()) => {
                match digest {
                    Some(_) => self.added_verified += 1,
                    None => self.added_unchanged += 1,
                }
                return;
            }
            Err(f) => f,
        };
        // (Settled only now: its name is still there.)
        let name = added.and_then(|a| a.name(i)).map(|(p, _)| p);
        state.settle(i);
        self.added_fault.get_or_insert(AddedFaultAt {
            entry: i,
            name,
            fault,
        });
    }
}

/// Paths of a `--delete` kept for the report; the rest are counted.
pub(super) const DELETED_KEPT: usize = 100_000;

/// Read acknowledgements until the receiver's summary. Each acknowledged
/// (or rejected) entry is marked in `state` (its frames need not be kept
/// for re-sending); heartbeats only show the receiver is alive.
pub(super) fn read_acks(
    ctl: &mut Control,
    state: &Acks,
    added: Option<&Added>,
) -> Result<Receipts, SessionError> {
    let mut got = Receipts::default();
    loop {
        match recv_msg(ctl)? {
            Message::FileAck { file_index, digest } => {
                state.first_ack.get_or_init(Instant::now);
                if state.is_added(file_index) {
                    got.added_done(state, added, file_index, Some(digest));
                    continue;
                }
                state.acknowledged(file_index);
                got.acks.push((file_index, digest))
            }
            Message::PieceAck { file_index, .. } if state.is_added(file_index) => {
                // An added file is never a piece.
                state.settle(file_index);
                got.added_fault.get_or_insert(AddedFaultAt {
                    entry: file_index,
                    name: None,
                    fault: AddedFault::Unexpected,
                });
            }
            Message::PieceAck { file_index, done } => {
                state.acknowledged(file_index);
                got.pieces.insert(file_index, done);
                got.acks.push((file_index, done.digest))
            }
            Message::FileRejected { file_index, digest } => {
                if let Some(a) = added {
                    a.remember(file_index);
                }
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
            // A streamed push's window: files held unchanged by their
            // stamp (said before the window's `Admitted`).
            Message::Have(items) => got.held_unchanged(state, added, items)?,
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
                if let Some(a) = added {
                    a.remember(file_index);
                }
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
            m => return Err(crate::session::link::conn::unexpected(ctl, &m)),
        }
    }
}

/// Every file not skipped acknowledged once, each with the digest we
/// computed of its source: only then is it counted verified.
pub(super) fn check_acks(
    entries: &[crate::protocol::manifest::Entry],
    name: &dyn Fn(u32) -> Option<(String, bool)>,
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
    for &(file_index, _) in &got.unchanged {
        let i = file_index as usize;
        if i >= entries.len() || entries[i].kind != EntryKind::File || acked[i] {
            return Err(SessionError::Protocol(format!(
                "entry {i} named held unchanged, which is no file of a window or was named before"
            )));
        }
        acked[i] = true;
        report.files_unchanged += 1;
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
    if let Some(f) = &got.added_fault {
        return Err(f.error());
    }
    report.files_verified += got.added_verified;
    report.files_unchanged += got.added_unchanged;
    if let Some(&(i, _)) = got.rejected.first() {
        let name = name(i).map_or_else(|| "?".to_string(), |(p, _)| p);
        let count = got.rejected.len();
        return Err(differed(count, &name, "on the receiver", "send"));
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
