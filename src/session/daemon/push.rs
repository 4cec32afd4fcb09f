//! A push on the daemon's side: the manifest prepared under the root, the
//! names claimed, the data received through a `DaemonLanding`, deletes,
//! the summary, and what is kept when the client stops.

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::datapath::beneath::Root;
use crate::protocol::control::{
    ErrorCode, Message, PieceDone, SessionRequest, REQ_CHECKSUM, REQ_ENCRYPT, REQ_FOLLOW,
    REQ_RESUME, REQ_STREAM,
};
use crate::protocol::manifest::check_path;

use super::connection::Session;
use super::log::{Level, Log};
use super::progress::RecvProgress;
use super::registry::{Claims, ManifestMemory, Registry};
use super::startup::owned_by;
use super::stats::DaemonStats;
use super::streams::collect_streams;
use crate::protocol::seal::{frame_key, Direction as SealDirection};
use crate::session::link::conn::{send_msg, Control};
use crate::session::sink::incoming::{join, Destination, Incoming};
use crate::session::sink::landing::{FrameCheck, Pace};
use crate::session::sink::manifest::recv_manifest;
use crate::session::sink::rules::Resume;
use crate::session::{Contended, SessionError};

/// How long a session waits for another to release a file it also names.
pub(super) const CLAIM_WAIT: Duration = Duration::from_secs(3);

/// A push on the daemon's side: the manifest prepared under the root (see
/// [`prepare_push`]), the sink's part of the setup (`roles::accept`), the
/// data streams collected, then the data received and its summary sent.
pub(super) fn push_session(
    s: &mut Control,
    session: &Session<'_>,
    peer: SocketAddr,
    log: &Log,
) -> Result<(u64, u64), SessionError> {
    let (req, keys) = (session.req, session.keys);
    let (cfg, registry) = (session.cfg, session.registry);
    let mut prepared = prepare_push(s, session)?;
    let PreparedPush {
        incoming,
        claims,
        memory,
    } = &mut prepared;
    crate::session::roles::settle_held(s, incoming)?;
    // Ring and registered buffers before the streams: they are ready when
    // the first frame comes, however long the streams take to connect.
    let pool = session.register(|n| {
        crate::session::sink::landing::prepare_receivers(
            cfg.lanes,
            req.streams,
            n,
            req.block_size as usize,
        )
    })?;
    // What is refused, and each device under the root its own lanes and
    // streams: the sender is told.
    let mut beat = crate::session::link::conn::Beat::new(s)?;
    crate::session::roles::place(s, incoming, &pool.lanes, &mut || beat.tick())?;
    // Wait for the data streams, each proving it belongs here.
    let streams = collect_streams(s, session)?;
    // Receive: frames into registered buffers, checked, written, committed
    // on the sender's digest; a heartbeat while nothing else goes out.
    let mut out = DaemonLanding {
        progress: RecvProgress::new(
            log,
            &registry.stats,
            peer,
            cfg.interval,
            // A follow's files grow, a streamed push's walk goes on: no
            // percent of a total.
            (!req.has(REQ_FOLLOW | REQ_STREAM)).then(|| incoming.data_missing()),
        ),
        ctl: s.try_clone()?,
        last_beat: Instant::now(),
        stats: &registry.stats,
        closing: &registry.closing,
        follow: Follow::new(incoming, claims, memory, req, cfg.limits.files),
    };
    let check = FrameCheck {
        key: frame_key(keys),
        open: req
            .has(REQ_ENCRYPT)
            .then(|| (keys.clone(), SealDirection::ClientToServer)),
    };
    let pace = Pace {
        timeout: cfg.timeout,
        min_rate_bytes_per_s: cfg.limits.min_rate_bytes_per_s,
    };
    let (reader, peer) = crate::session::link::conn::spawn_peer_reader(s)?;
    // Should what follows unwind, the reader still ends with the session.
    let _reads_end = ReadsEnd(
        s.tcp()
            .try_clone()
            .map_err(|e| SessionError::io("control connection", e))?,
    );
    let received = incoming
        .receive(&streams, pool, pace, &check, &peer, &mut out)
        .and_then(|_lanes| incoming.finish())
        .map_err(|e| interrupted_kept(s, incoming, e));
    if let Ok(done) = &received {
        let (files, bytes) = (done.files, done.bytes);
        for r in &done.refused {
            send_msg(s, &r.message())?;
        }
        if req.has(crate::protocol::control::REQ_DELETE) {
            let whole = req.has(crate::protocol::control::REQ_CONTENTS);
            delete_extras(s, incoming, whole, log)?;
        }
        send_msg(
            s,
            &Message::Summary {
                files,
                bytes,
                ok: true,
            },
        )?;
    }
    // The reader ends when its side of the connection does (or, waiting to
    // hand on an event, when nobody takes it any more).
    let _ = s.tcp().shutdown(std::net::Shutdown::Read);
    drop(peer);
    let _ = reader.join();
    received.map(|d| (d.files, d.bytes))
}

/// The data streams of a pull broke: when its client was stopped (Ctrl-C)
/// it says so on the control connection as it goes, and the session ends
/// as the client's stop, not as a fault. Other errors pass.
pub(super) fn client_stopped(s: &mut Control, e: SessionError) -> SessionError {
    if !e.is_connection_loss() {
        return e;
    }
    // What the client said before it stopped (its `Error` comes back as
    // the peer's refusal).
    let until = Instant::now() + Duration::from_secs(1);
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    while Instant::now() < until {
        match crate::session::link::conn::recv_msg(s) {
            Err(SessionError::Refused {
                code: ErrorCode::Interrupted,
                ..
            }) => {
                return SessionError::Refused {
                    code: ErrorCode::Interrupted,
                    message:
                        "the client stopped it (Ctrl-C); what it verified is kept for its next run"
                            .into(),
                }
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    e
}

/// A push its client interrupted (Ctrl-C): the client is told what was
/// kept for its next run (what was verified is journaled by now), and the
/// session ends as the client's stop, saying so. Other errors pass.
pub(super) fn interrupted_kept(
    s: &mut Control,
    incoming: &Incoming,
    e: SessionError,
) -> SessionError {
    let SessionError::Refused {
        code: ErrorCode::Interrupted,
        ..
    } = e
    else {
        return e;
    };
    let (files, bytes) = incoming.kept();
    let _ = send_msg(s, &Message::Kept { files, bytes });
    SessionError::Refused {
        code: ErrorCode::Interrupted,
        message: format!(
            "the client stopped it (Ctrl-C); the verified blocks of {} ({}) are kept for its next run",
            crate::coord::units::count(files, "file"),
            crate::coord::units::bytes_decimal(bytes)
        ),
    }
}

/// Shuts the reading side of a control connection down when dropped,
/// unwinding or not: its peer reader (which waits on it with no timeout)
/// then ends, and its thread and descriptors with it.
pub(super) struct ReadsEnd(TcpStream);

impl Drop for ReadsEnd {
    fn drop(&mut self) {
        let _ = self.0.shutdown(std::net::Shutdown::Read);
    }
}

/// A push's dry run on the daemon's side: its manifest looked at under the
/// root as the push would (what is held, checked by the sender; whether it
/// fits; what would be refused; with `--delete`, what would go), told to
/// the client, then the summary. Nothing is claimed, made or changed.
pub(super) fn survey_push(
    s: &mut Control,
    session: &Session<'_>,
) -> Result<(u64, u64), SessionError> {
    let req = session.req;
    let mut prepared = prepare_push(s, session)?;
    let incoming = &mut prepared.incoming;
    crate::session::roles::settle_held(s, incoming)?;
    crate::session::roles::refuse(s, incoming)?;
    if req.has(crate::protocol::control::REQ_DELETE) {
        let whole = req.has(crate::protocol::control::REQ_CONTENTS);
        let pruned = crate::session::sink::prune::prune(incoming, true, whole);
        for part in pruned.deleted.chunks(1024) {
            send_msg(s, &Message::Deleted(part.to_vec()))?;
        }
    }
    let summary = Message::Summary {
        files: 0,
        bytes: 0,
        ok: true,
    };
    send_msg(s, &summary)?;
    Ok((0, 0))
}

/// `--delete`, once every file is committed: remove the extras under the
/// manifest's directories and tell the sender what went (failures are
/// logged, and end the session with an error naming them, the files
/// being committed already).
pub(super) fn delete_extras(
    s: &mut Control,
    incoming: &Incoming,
    whole_dest: bool,
    log: &Log,
) -> Result<(), SessionError> {
    let pruned = crate::session::sink::prune::prune(incoming, false, whole_dest);
    // What was removed changed its directories: durable, and their mtimes
    // the sender's again.
    incoming.sync_dirs()?;
    incoming.settle_dirs();
    for f in &pruned.failed {
        log(Level::Warn, &format!("--delete could not remove {f}"));
    }
    for part in pruned.deleted.chunks(1024) {
        send_msg(s, &Message::Deleted(part.to_vec()))?;
    }
    pruned.failure("the receiver's")
}

/// A push's files prepared on the daemon: their names claimed from other
/// sessions and their memory counted for as long as it runs.
pub(super) struct PreparedPush<'r> {
    pub(super) incoming: Incoming,
    pub(super) claims: Claims<'r>,
    pub(super) memory: ManifestMemory<'r>,
}

/// Take a push's manifest (within the daemon's limits), claim its names
/// under the destination, and prepare its files under the root (a
/// heartbeat while a large tree is prepared).
pub(super) fn prepare_push<'r>(
    s: &mut Control,
    session: &Session<'r>,
) -> Result<PreparedPush<'r>, SessionError> {
    let Session {
        req,
        keys,
        cfg,
        registry,
        ..
    } = *session;
    let dest = push_dest(req)?;
    let mut memory = registry.manifest_memory(cfg.limits.manifest_bytes);
    let mut entries = recv_manifest(s, cfg.limits.files, &mut |bytes| memory.reserve(bytes))?;
    let root = Root::open_for_writing(&cfg.root).map_err(|e| SessionError::io("root", e))?;
    let dest = match req.has(crate::protocol::control::REQ_ONE_FILE) {
        true => crate::session::sink::incoming::one_file_at_dest(&root, dest, &mut entries),
        false => dest,
    };
    memory.reserve(bitmap_bytes(&entries, u64::from(req.block_size)))?;
    if req.has(REQ_STREAM) {
        // The windows its sender may add before this side prepares them.
        memory.reserve(crate::session::sink::rules::stream_ahead_bytes())?;
    }
    if req.has(crate::protocol::control::REQ_FOLLOW) {
        // The block tables its files may add as they grow.
        memory.reserve(crate::session::sink::file::FOLLOW_BITMAP_BYTES)?;
    }
    let resume = req.has(REQ_RESUME).then_some(Resume {
        checksum: req.has(REQ_CHECKSUM),
        key: frame_key(keys),
        stamps_only: false,
    });
    // A dry run holds no name: it never keeps a push from one.
    let claims = match req.has(crate::protocol::control::REQ_DRY_RUN) {
        true => Claims::none(&registry.claimed),
        false => claim_names(registry, &dest, &entries)?,
    };
    let mut beat = crate::session::link::conn::Beat::new(s)?;
    let mut incoming = Incoming::prepare(
        Destination { root, dest },
        entries,
        u64::from(req.block_size),
        cfg.direct,
        owned_by(&registry.rules, req)?,
        resume,
        &mut || beat.tick(),
    )?;
    // `--delete` prunes what no entry names: a streamed push keeps them.
    incoming.settled.every_entry = req.has(crate::protocol::control::REQ_DELETE);
    Ok(PreparedPush {
        incoming,
        claims,
        memory,
    })
}

/// A push's destination under the root, checked; `REQ_CONTENTS` with
/// `REQ_DELETE` would prune the destination itself, refused for the root
/// (everything other clients sent there would go).
pub(super) fn push_dest(req: &SessionRequest) -> Result<String, SessionError> {
    use crate::protocol::control::{REQ_CONTENTS, REQ_DELETE};
    let dest = match req.path.as_str() {
        "" | "." => String::new(),
        p => {
            check_path(p)
                .map_err(|e| SessionError::local(ErrorCode::PathRefused, format!("{p}: {e}")))?;
            p.to_string()
        }
    };
    if dest.is_empty() && req.has(REQ_CONTENTS) && req.has(REQ_DELETE) {
        return Err(SessionError::local(
            ErrorCode::BadRequest,
            "--delete of a directory's contents (DIR/) into the root itself would remove everything else under the root: give a destination beneath it",
        ));
    }
    Ok(dest)
}

/// What the receive loop of a push reports: `Net In` lines and metrics,
/// an acknowledgement per file committed (or its rejection), heartbeats.
pub(super) struct DaemonLanding<'a, 'r> {
    pub(super) progress: RecvProgress<'a>,
    pub(super) ctl: Control,
    pub(super) last_beat: Instant,
    pub(super) stats: &'a DaemonStats,
    pub(super) closing: &'a AtomicBool,
    pub(super) follow: Follow<'a, 'r>,
}

/// What a push that follows files needs to take entries it adds: the
/// session's claims on names and its manifest memory.
pub(super) struct Follow<'a, 'r> {
    pub(super) dest: String,
    pub(super) claims: &'a mut Claims<'r>,
    pub(super) memory: &'a mut ManifestMemory<'r>,
    pub(super) block: u64,
    /// Entries it may add still (`max_files` less the manifest's).
    pub(super) entries_left: u64,
    /// A streamed push's windows admitted and not yet settled, oldest
    /// first: (entries up to, manifest memory, names claimed, entries),
    /// given back once every entry below settled (see `Landing::settled`):
    /// `max_files` and the memory then bound what is in flight.
    pub(super) windows: std::collections::VecDeque<(u32, u64, usize, u64)>,
    /// Entries so far (the manifest's and every window's admitted).
    pub(super) upto: u32,
    /// A streamed push: its windows wait for room (see `admit`).
    pub(super) streamed: bool,
}

impl<'a, 'r> Follow<'a, 'r> {
    /// What `incoming`'s session (`req`) holds: a streamed push's manifest
    /// is its first window (given back as its files settle, as the next).
    pub(super) fn new(
        incoming: &Incoming,
        claims: &'a mut Claims<'r>,
        memory: &'a mut ManifestMemory<'r>,
        req: &SessionRequest,
        max_files: u32,
    ) -> Self {
        let count = incoming.entries.len();
        let streamed = req.has(REQ_STREAM);
        let first = (count as u32, memory.bytes, claims.names.len(), count as u64);
        Follow {
            dest: incoming.dest.clone(),
            block: u64::from(req.block_size),
            entries_left: u64::from(max_files).saturating_sub(count as u64),
            windows: streamed.then_some(first).into_iter().collect(),
            upto: count as u32,
            streamed,
            claims,
            memory,
        }
    }

    /// Count `entries`' memory and claim their names (at once: one of them
    /// another session receives now refuses the lot, or for a streamed
    /// push, `false`: the window waits, as when the files in flight hold
    /// `max_files` or the daemon's manifest memory; what is in flight
    /// settles and gives them back).
    pub(super) fn admit(
        &mut self,
        entries: &[crate::protocol::manifest::Entry],
    ) -> Result<bool, SessionError> {
        let count = entries.len() as u64;
        let Some(left) = self.entries_left.checked_sub(count) else {
            return match self.streamed && !self.windows.is_empty() {
                true => Ok(false),
                false => Err(SessionError::local(
                    ErrorCode::TooLarge,
                    "entries added past what one session takes (max_files)",
                )),
            };
        };
        let text: u64 = entries.iter().map(|e| e.text_len() as u64).sum();
        let cost = entries.len() as u64 * crate::session::sink::rules::ENTRY_COST_BYTES + text;
        let cost = cost.saturating_add(bitmap_bytes(entries, self.block));
        match self.memory.reserve(cost) {
            Err(SessionError::Limit(_)) if self.streamed && cost <= self.memory.limit => {
                return Ok(false)
            }
            r => r?,
        }
        let names: Vec<String> = entries
            .iter()
            .filter(|e| e.kind != crate::protocol::manifest::EntryKind::Dir)
            .map(|e| join(&self.dest, &e.path))
            .collect();
        let mut set = self.claims.set.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(busy) = names.iter().find(|n| set.contains(*n)) {
            drop(set);
            self.memory.release(cost);
            return match self.streamed {
                true => Ok(false),
                false => Err(SessionError::Contended(Contended::Receiving {
                    rel: busy.clone(),
                })),
            };
        }
        set.extend(names.iter().cloned());
        drop(set);
        self.entries_left = left;
        self.upto += entries.len() as u32;
        if self.streamed {
            // Given back once settled (a follow's stay to its end).
            let window = (self.upto, cost, names.len(), count);
            self.windows.push_back(window);
        }
        self.claims.names.extend(names);
        Ok(true)
    }

    /// Every entry below `upto` settled: the windows wholly below it (a
    /// streamed push's manifest first) give back their memory, their
    /// entries and their names, which come in the same order.
    pub(super) fn settled(&mut self, upto: u32) {
        let mut names = 0;
        while let Some(&(_, bytes, n, count)) = self.windows.front().filter(|w| w.0 <= upto) {
            self.windows.pop_front();
            self.memory.release(bytes);
            self.entries_left += count;
            names += n;
        }
        self.claims.release_first(names);
    }
}

impl crate::session::sink::landing::Landing for DaemonLanding<'_, '_> {
    fn admit(
        &mut self,
        entries: &[crate::protocol::manifest::Entry],
    ) -> Result<bool, SessionError> {
        self.follow.admit(entries)
    }

    fn admitted(&mut self, upto: u32) -> Result<(), SessionError> {
        send_msg(&mut self.ctl, &Message::Admitted { upto })
    }

    fn settled(&mut self, upto: u32) {
        self.follow.settled(upto);
    }

    fn held(&mut self, items: Vec<crate::protocol::control::HaveItem>) -> Result<(), SessionError> {
        crate::session::plan::held::Held::send_items(&mut self.ctl, items).map(|_| ())
    }

    fn progress(&mut self, bytes: u64) {
        self.progress.add(bytes);
    }

    fn unsent(&mut self, bytes: u64) {
        self.progress.unsent += bytes;
    }

    fn committed(&mut self, file_index: u32, digest: u64) -> Result<(), SessionError> {
        self.stats.files_received.fetch_add(1, Ordering::Relaxed);
        send_msg(&mut self.ctl, &Message::FileAck { file_index, digest })
    }

    fn rejected(&mut self, file_index: u32, digest: u64) -> Result<(), SessionError> {
        send_msg(&mut self.ctl, &Message::FileRejected { file_index, digest })
    }

    fn refused(&mut self, r: &crate::session::link::refused::Refused) -> Result<(), SessionError> {
        send_msg(&mut self.ctl, &r.message())
    }

    fn piece(&mut self, file_index: u32, done: PieceDone) -> Result<(), SessionError> {
        self.stats.files_received.fetch_add(1, Ordering::Relaxed);
        if let Some(k) = done.untrusted {
            let p = &self.progress;
            (p.log)(
                Level::Warn,
                &format!(
                    "{}: entry {file_index}: the journal of piece {k} here was made with another secret: this daemon cannot commit the file (receivers sharing a root must run with one secret, --state-dir)",
                    p.peer
                ),
            );
        }
        send_msg(&mut self.ctl, &Message::PieceAck { file_index, done })
    }

    fn tick(&mut self, streams: &[(u64, bool)]) -> Result<(), SessionError> {
        if self.closing.load(Ordering::Acquire) {
            return Err(shutting_down());
        }
        if self.last_beat.elapsed() >= Duration::from_millis(500) {
            self.last_beat = Instant::now();
            let streams = streams.to_vec();
            send_msg(&mut self.ctl, &Message::Alive { streams })?;
        }
        Ok(())
    }
}

/// Why a session ends when the daemon stops under it: told to its client.
pub(super) fn shutting_down() -> SessionError {
    SessionError::local(
        ErrorCode::ShuttingDown,
        "the daemon is shutting down (it was told to stop); the files committed stay, and the parts journaled are kept for the next run",
    )
}

/// Registered memory of a manifest's per-block bitmaps (two bits a block).
pub(super) fn bitmap_bytes(entries: &[crate::protocol::manifest::Entry], block: u64) -> u64 {
    entries
        .iter()
        .filter(|e| e.kind == crate::protocol::manifest::EntryKind::File)
        .map(|e| e.size.div_ceil(block).div_ceil(64) * 16)
        .fold(0, u64::saturating_add)
}

/// One session per file at a time: claim every file and symlink of the
/// manifest by its final name (a session that just lost its sender may still be winding
/// down: give it a few seconds before refusing). A piece of a split file
/// is claimed by its name and number (`NAME\0K`: the sessions bringing the
/// other pieces share the file), never while the whole name is claimed,
/// and a whole file never while a piece of it is. (Across daemons a
/// piece's part is never a whole file's, `pieces::join_part`: one of
/// them fails, and neither commits the other's bytes.)
pub(super) fn claim_names<'r>(
    registry: &'r Registry,
    dest: &str,
    entries: &[crate::protocol::manifest::Entry],
) -> Result<Claims<'r>, SessionError> {
    let names: Vec<String> = entries
        .iter()
        // Files and symlinks: a name another session holds is never
        // replaced by either while it runs. Directories are shared (two
        // sessions may fill one) and never replace anything.
        .filter(|e| e.kind != crate::protocol::manifest::EntryKind::Dir)
        .map(|e| match e.piece {
            Some(p) => format!("{}\0{}", join(dest, &e.path), p.index),
            None => join(dest, &e.path),
        })
        .collect();
    let taken = |set: &BTreeSet<String>, n: &String| {
        let pieces = || {
            let (from, to) = (format!("{n}\0"), format!("{n}\u{1}"));
            set.range(from..to).next().is_some()
        };
        match n.split_once('\0') {
            Some((whole, _)) => set.contains(n) || set.contains(whole),
            None => set.contains(n) || pieces(),
        }
    };
    let claim_until = Instant::now() + CLAIM_WAIT;
    loop {
        let mut set = registry.claimed.lock().unwrap_or_else(|p| p.into_inner());
        match names.iter().find(|n| taken(&set, n)) {
            None => {
                set.extend(names.iter().cloned());
                return Ok(Claims {
                    set: &registry.claimed,
                    names,
                });
            }
            Some(busy) if Instant::now() >= claim_until => {
                let busy = busy.split('\0').next().unwrap_or_default();
                return Err(SessionError::Contended(Contended::Receiving {
                    rel: busy.to_string(),
                }));
            }
            Some(_) => {
                drop(set);
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}
