//! A pull on the daemon's side: the tree scanned beneath the root (a
//! shard's share of it), the sink's placement heard, the data sent.

use std::net::TcpStream;
use std::sync::atomic::Ordering;

use crate::datapath::beneath::Root;
use crate::datapath::DirectMode;
use crate::protocol::control::{Message, REQ_CHECKSUM, REQ_ENCRYPT, REQ_RESUME};
use crate::protocol::handshake::SessionKeys;

use super::config::RecvConfig;
use super::connection::Session;
use super::push::{client_stopped, shutting_down};
use super::registry::{ManifestMemory, Registry};
use super::startup::filter_of;
use super::streams::collect_streams;
use crate::protocol::seal::{frame_key, Direction as SealDirection};
use crate::session::link::conn::{recv_msg, send_msg, Control};
use crate::session::SessionError;

/// How the daemon sends (pull, reversed bench): the client's block size,
/// zero-copy where it pays, paced as the client asked (`--rate-limit`),
/// sealed when the client asked.
pub(super) fn daemon_push_params(
    req: &crate::protocol::control::SessionRequest,
    buffers: usize,
    keys: &SessionKeys,
    cfg: &RecvConfig,
) -> crate::session::source::sending::PushParams {
    crate::session::source::sending::PushParams {
        buffers,
        block_size: req.block_size,
        zerocopy: crate::datapath::net::ZeroCopy::Auto,
        rate_limit_bytes_per_s: (req.rate_limit > 0).then_some(req.rate_limit as f64),
        timeout: cfg.timeout,
        seal: req
            .has(REQ_ENCRYPT)
            .then(|| (keys.clone(), SealDirection::ServerToClient)),
        key: frame_key(keys),
        zeros: req.has(crate::protocol::control::REQ_SPARSE),
    }
}

/// Pace the streams this daemon sends on to their share of the client's
/// `--rate-limit` (SO_MAX_PACING_RATE), so the data leaves evenly.
pub(super) fn pace_as_asked(
    req: &crate::protocol::control::SessionRequest,
    streams: &[TcpStream],
) -> Result<(), SessionError> {
    if req.rate_limit == 0 {
        return Ok(());
    }
    let fds = crate::session::link::streams::fds_of(streams);
    crate::datapath::tcp::pace(&fds, req.rate_limit as f64, streams.len())
        .map_err(|e| SessionError::io("pacing the data streams", e))
}

/// `urmove pull` on the daemon's side: walk the requested paths beneath the
/// root, send their manifest, check what the client holds (resume), then
/// send the data on the client's streams, each file's digest as it is read
/// through, and a summary.
pub(super) fn pull_session(
    s: &mut Control,
    session: &Session<'_>,
) -> Result<(u64, u64), SessionError> {
    use crate::session::roles::{hear, Until};
    use crate::session::source::sending::{open_source_beneath, push_data, DataStreams, Sources};
    let Session {
        req,
        keys,
        cfg,
        registry,
        ..
    } = *session;
    // (The memory stays counted until the session ends.)
    let OfferedPull {
        root,
        tree,
        mut held,
        _memory,
    } = offer_pull(s, session)?;
    if req.has(crate::protocol::control::REQ_DRY_RUN) {
        // The client looks at what it holds by itself: nothing is sent.
        pulled(s, registry, 0, 0)?;
        return Ok((0, 0));
    }
    let entries = tree.entries.len();
    let before = hear(s, Until::Placement { entries })?;
    held.refuse(&before.refused);
    // Ring and buffers before the streams connect (ready for their data).
    let ((plan, txs), params) = session.register(|n| {
        let params = daemon_push_params(req, n, keys, cfg);
        let sending = crate::session::source::sending::prepare_senders(
            cfg.lanes,
            req.streams,
            req.streams,
            &params,
        );
        sending.map(|sent| (sent, params))
    })?;
    let shape = crate::session::plan::route::Shape {
        entries,
        streams: req.streams,
    };
    let files = tree.to_send(&held);
    let route = crate::session::plan::route::for_source(before.placement, shape, &plan, files)?;
    let streams = collect_streams(s, session)?;
    pace_as_asked(req, &streams)?;
    let open = |i: usize| open_source_beneath(&root, &tree.sources[i], tree.ids[i], cfg.direct);
    let counters = crate::coord::WorkerCounters::default();
    let from = Sources {
        tree: &tree,
        held: &held,
        acked: None,
        open: &open,
        announce_on: s,
        route: &route,
        follow: None,
        stream: None,
    };
    // The daemon stopping (its drain time over) stops the lanes.
    let stop = &registry.closing;
    let on = DataStreams {
        plan: &plan,
        streams: &streams,
        txs,
    };
    let pushed = push_data(&params, &from, on, &counters, stop).map_err(|e| {
        match stop.load(Ordering::Acquire) {
            true => shutting_down(),
            false => client_stopped(s, e),
        }
    })?;
    for st in &streams {
        let _ = st.shutdown(std::net::Shutdown::Write);
    }
    let bytes = counters.snapshot().0;
    let files = (tree.file_count() - pushed.skipped.len()) as u64;
    pulled(s, registry, files, bytes)?;
    Ok((files, bytes))
}

/// A pull's data sent: counted in the daemon's stats and summed up to the
/// client.
pub(super) fn pulled(
    s: &mut Control,
    registry: &Registry,
    files: u64,
    bytes: u64,
) -> Result<(), SessionError> {
    let stats = &registry.stats;
    stats.bytes_sent.fetch_add(bytes, Ordering::Relaxed);
    stats.files_sent.fetch_add(files, Ordering::Relaxed);
    let summary = Message::Summary {
        files,
        bytes,
        ok: true,
    };
    send_msg(s, &summary)
}

/// A pull's sources as offered: the root, the tree scanned beneath it,
/// what the client holds and is right, and the memory they are counted in.
pub(super) struct OfferedPull<'r> {
    pub(super) root: Root,
    pub(super) tree: crate::session::plan::tree::Tree,
    pub(super) held: crate::session::plan::held::Held,
    pub(super) _memory: ManifestMemory<'r>,
}

/// A `pull --shard`: the client's shard, answered with the whole
/// manifest's summary; the tree keeps the share (`shard::select`).
pub(super) fn offer_share(
    s: &mut Control,
    tree: &mut crate::session::plan::tree::Tree,
    block: u64,
) -> Result<(), SessionError> {
    let (index, count, split_over) = match recv_msg(s)? {
        Message::Shard {
            index,
            count,
            split_over,
        } => (index, count, split_over),
        m => return Err(crate::session::link::conn::unexpected(s, &m)),
    };
    let (files, bytes, digest) = crate::session::plan::shard::summary(&tree.entries);
    let m = Message::ShardManifest {
        files,
        bytes,
        digest,
    };
    send_msg(s, &m)?;
    crate::session::plan::shard::select(
        tree,
        crate::session::plan::shard::Shard { index, count },
        split_over,
        block,
    );
    Ok(())
}

/// Scan the requested paths beneath the root (within the daemon's memory
/// limit), offer their manifest (`roles::offer`: when resuming, what the
/// client holds is checked against the files), and tell the client what
/// the scan left out.
pub(super) fn offer_pull<'r>(
    s: &mut Control,
    session: &Session<'r>,
) -> Result<OfferedPull<'r>, SessionError> {
    use crate::session::source::sending::open_source_beneath;
    let Session {
        req,
        keys,
        cfg,
        registry,
        ..
    } = *session;
    let root = Root::open(&cfg.root).map_err(|e| SessionError::io("root", e))?;
    let paths: Vec<&str> = req.path.split('\0').collect();
    let rules =
        crate::session::plan::tree::ScanRules::requested(req.flags, filter_of(&req.filter)?);
    let mut tree = crate::session::plan::tree::scan_beneath(&root, &paths, &rules)?;
    let mut memory = registry.manifest_memory(cfg.limits.manifest_bytes);
    memory.reserve(tree.entries.len() as u64 * crate::session::sink::rules::ENTRY_COST_BYTES)?;
    let block = u64::from(req.block_size);
    if req.has(crate::protocol::control::REQ_SHARD) {
        offer_share(s, &mut tree, block)?;
    }
    let local = |i: usize| {
        open_source_beneath(&root, &tree.sources[i], tree.ids[i], DirectMode::Off).map(|(f, _)| f)
    };
    let key = frame_key(keys);
    let resume = req.has(REQ_RESUME).then_some((&key, req.has(REQ_CHECKSUM)));
    let reserve = &mut |b| memory.reserve(b);
    let held = crate::session::roles::offer(s, &tree, block, resume, &local, reserve)?;
    if tree.excluded + tree.devices_left > 0 {
        let (excluded, devices) = (tree.excluded, tree.devices_left);
        send_msg(s, &Message::LeftOut { excluded, devices })?;
    }
    for r in tree.skipped_refs() {
        send_msg(s, &r.message())?;
    }
    Ok(OfferedPull {
        root,
        tree,
        held,
        _memory: memory,
    })
}
