//! What a daemon checks before it serves: its root, its state directory
//! and secret, its buffer budget, and the rules each session receives by.

use crate::session::plan::filter::{Filter, Verdict};
use std::sync::Arc;

use crate::datapath::beneath::Root;
use crate::protocol::control::{ErrorCode, SessionRequest};

use super::config::RecvConfig;
use super::log::{Level, Log};
use super::registry::BUFFER_STREAMS_MAX;
use crate::session::sink::rules::Rules;
use crate::session::SessionError;

/// Before listening: the root opens (and takes files, unless the daemon
/// serves pulls only), the secret loads from a state directory outside the
/// root. Returns the rules every session receives by.
pub(super) fn startup_checks(cfg: &RecvConfig) -> Result<Rules, SessionError> {
    let root = Root::open_for_writing(&cfg.root).map_err(|e| SessionError::io("--root", e))?;
    if !cfg.pull_only && !cfg.over_ssh {
        check_writable(&root, &cfg.root)?;
    }
    // Over ssh the one key holder is the user whose state it is.
    if !cfg.over_ssh && beneath_root(&root, &cfg.state_dir)? {
        return Err(SessionError::local(
            ErrorCode::BadRequest,
            format!(
                "--state-dir {}: is beneath the root {}, where key holders could read the secret; put it elsewhere (default /var/lib/urmove)",
                cfg.state_dir.display(),
                cfg.root.display()
            ),
        ));
    }
    let secret = crate::session::link::secret::Secret::load_or_create(&cfg.state_dir)
        .map_err(|e| SessionError::io("--state-dir", e))?;
    Ok(Rules {
        secret,
        owner: None,
        owners: crate::session::sink::rules::Owners::Own,
        ids: Arc::default(),
        dry_run: false,
        follow: false,
        stream: false,
        live_parts: false,
        sums: cfg.keep_sums,
        keep: Default::default(),
        keep_setid: cfg.keep_setid,
        unsafe_links: cfg.unsafe_links,
        devices: crate::session::sink::rules::Devices::for_this_process(
            cfg.devices,
            "the receiver does not make device nodes: its config does not allow them (devices = true, with the daemon running as root)",
        ),
        claims: Arc::default(),
        journal_budget: Arc::new(crate::session::sink::rules::JournalBudget::new(
            crate::session::sink::rules::JOURNAL_BYTES_PER_S,
        )),
    })
}

/// `rules` for a push by the client whose owner token is `token` (zeros:
/// a client without one, whose files are always read again on a re-run).
/// Owners are the sender's where this daemon runs as root; a `--delete`
/// push's rules keep what they exclude (an empty pattern is refused).
pub(super) fn owned_by(rules: &Rules, req: &SessionRequest) -> Result<Rules, SessionError> {
    let token = &req.owner;
    let owner = (*token != [0; 32]).then(|| rules.secret.mac(&[b"urmove owner", token]));
    Ok(Rules {
        owner,
        owners: crate::session::sink::rules::Owners::for_this_process(
            req.has(crate::protocol::control::REQ_NUMERIC_IDS),
        ),
        ids: Arc::default(),
        dry_run: req.has(crate::protocol::control::REQ_DRY_RUN),
        keep: filter_of(&req.filter)?,
        follow: req.has(crate::protocol::control::REQ_FOLLOW),
        stream: req.has(crate::protocol::control::REQ_STREAM),
        live_parts: req.has(crate::protocol::control::REQ_FOLLOW)
            && req.has(crate::protocol::control::REQ_LIVE_PARTS),
        ..rules.clone()
    })
}

/// The filter of a request's rules (a pull's scan, a `--delete` push's
/// keep).
pub(super) fn filter_of(
    rules: &[crate::protocol::control::FilterRule],
) -> Result<Filter, SessionError> {
    let mut filter = Filter::default();
    for r in rules {
        let verdict = match r.include {
            true => Verdict::Include,
            false => Verdict::Exclude,
        };
        filter
            .push(verdict, &r.pattern)
            .map_err(|e| SessionError::local(ErrorCode::BadRequest, format!("filter rule {e}")))?;
    }
    Ok(filter)
}

/// The registered memory all sessions may hold: `max_buffer_memory`,
/// within the locked-memory limit (RLIMIT_MEMLOCK counts every session's
/// buffers together, unless the daemon holds CAP_IPC_LOCK). A limit that
/// cannot hold one default session (`-P auto`: buffers for
/// `BUFFER_STREAMS_MAX` streams of 4 MiB frames) refuses to start, saying
/// what to raise.
pub(super) fn buffer_budget(cfg: &RecvConfig, log: &Log) -> Result<u64, SessionError> {
    let Some(limit) = crate::session::memlock_budget() else {
        return Ok(cfg.limits.buffer_bytes);
    };
    // Over ssh the client fits its frames to what is left of the limit.
    if cfg.over_ssh {
        return Ok(limit.min(cfg.limits.buffer_bytes));
    }
    let block = 4 << 20;
    let want = crate::session::buffer_count(usize::from(BUFFER_STREAMS_MAX), block, 4, 4);
    let need = crate::session::locked_bytes(want, block);
    if limit < need {
        let kib = need.div_ceil(1024);
        return Err(SessionError::local(
            ErrorCode::BadRequest,
            format!(
                "locked memory (RLIMIT_MEMLOCK) is {} KiB and the daemon lacks CAP_IPC_LOCK: one default session (-P auto: 4 MiB frames, {want} registered buffers shared by its streams) needs {kib} KiB. Under systemd raise LimitMEMLOCK= in the unit (shipped: LimitMEMLOCK=2304M, for max_buffer_memory = 2G) or grant AmbientCapabilities=CAP_IPC_LOCK; started by hand, run `ulimit -l {kib}` first (within the hard limit, or as root)",
                limit / 1024
            ),
        ));
    }
    if limit < cfg.limits.buffer_bytes {
        log(
            Level::Warn,
            &format!(
                "buffer memory for all sessions lowered from {} MiB (max_buffer_memory) to {} MiB, the locked-memory limit (RLIMIT_MEMLOCK); raise LimitMEMLOCK= or grant CAP_IPC_LOCK for more",
                cfg.limits.buffer_bytes >> 20,
                limit >> 20
            ),
        );
    }
    Ok(limit.min(cfg.limits.buffer_bytes))
}

/// Whether `state_dir` (made first, so no link or missing part hides
/// where it is) lies in the root or beneath it: any of its directories is
/// the root itself (device and inode; a bind mount counts too).
pub(super) fn beneath_root(root: &Root, state_dir: &std::path::Path) -> Result<bool, SessionError> {
    use std::os::unix::fs::MetadataExt;
    let io = |e| SessionError::io("--state-dir", e);
    crate::session::link::secret::make_state_dir(state_dir).map_err(io)?;
    let root_id = root.id().map_err(io)?;
    let state = std::fs::canonicalize(state_dir).map_err(io)?;
    Ok(state.ancestors().any(|dir| {
        std::fs::metadata(dir).is_ok_and(|m| (m.dev(), m.ino()) == (root_id.dev, root_id.ino))
    }))
}

/// Whether the daemon can create files in its root: a probe file (under a
/// reserved name no key holder can reach) is made and removed.
pub(super) fn check_writable(root: &Root, path: &std::path::Path) -> Result<(), SessionError> {
    let name = format!(
        ".urmove-probe-{}{}",
        std::process::id(),
        crate::session::PART_SUFFIX
    );
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
    match root.open_file(&name, flags, 0o600) {
        Ok(_) => {
            let _ = root.unlink(&name);
            Ok(())
        }
        Err(e) => Err(SessionError::local(
            ErrorCode::BadRequest,
            format!(
                "--root {}: this daemon cannot create files there ({e}); make it writable for the daemon's user, or serve pulls only (--pull-only)",
                path.display()
            ),
        )),
    }
}
