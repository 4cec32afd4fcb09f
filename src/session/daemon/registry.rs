//! What every connection thread of a daemon shares: the sessions waiting
//! for their data streams, the names being received, the rules, the
//! stats; and the holds on its limits (sessions, connections, the
//! unauthenticated per address, manifest and buffer memory, claims), each
//! given back when dropped.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use crate::protocol::handshake::{SessionId, SessionKeys};

use super::admit::Throttled;
use super::connection::connection_failed;
use super::log::{Level, Log};
use super::stats::DaemonStats;
use crate::session::sink::rules::Rules;
use crate::session::SessionError;

/// What every session of the daemon shares.
pub(super) struct Shared {
    pub(super) registry: Mutex<HashMap<SessionId, Pending>>,
    pub(super) stats: Arc<DaemonStats>,
    /// Files being received now (root-relative final names): a second
    /// session for the same file is refused, not interleaved.
    /// Ordered: a whole file's claim finds the claims of its pieces
    /// (`NAME\0K`) by range.
    pub(super) claimed: Mutex<BTreeSet<String>>,
    /// The secret, link policy and inode claims every session receives by.
    pub(super) rules: Rules,
    /// Manifest memory reserved by the sessions now.
    pub(super) manifest_bytes: AtomicU64,
    /// Registered buffer memory all sessions may hold: `max_buffer_memory`,
    /// or the locked-memory limit when that is lower.
    pub(super) buffer_budget: u64,
    /// The daemon stops and its drain time is over: sessions still
    /// receiving end now, telling their clients why.
    pub(super) closing: AtomicBool,
    /// A UDP test runs (one at a time: they share the port).
    pub(super) udp_busy: AtomicBool,
    /// Lines of connections that failed before they authenticated, by
    /// kind, each at most once per interval (outsiders cannot fill the log).
    pub(super) preauth_lines: Mutex<HashMap<&'static str, Throttled>>,
}

impl Shared {
    /// A connection that failed before it proved it holds the key: counted
    /// apart from sessions' errors, its line throttled by kind.
    pub(super) fn failed_before_auth(&self, peer: SocketAddr, e: &SessionError, log: &Log) {
        let kind = self.stats.preauth_failed(e);
        let mut lines = self.preauth_lines.lock().unwrap_or_else(|p| p.into_inner());
        lines
            .entry(kind)
            .or_default()
            .log(log, Level::Warn, &connection_failed(peer, e));
    }
}

/// Manifest memory a session holds, given back when it ends.
pub(super) struct ManifestMemory<'a> {
    pub(super) total: &'a AtomicU64,
    pub(super) limit: u64,
    pub(super) bytes: u64,
}

impl ManifestMemory<'_> {
    /// Give back `bytes` of what it holds (a streamed push's window whose
    /// entries all settled).
    pub(super) fn release(&mut self, bytes: u64) {
        let bytes = bytes.min(self.bytes);
        self.total.fetch_sub(bytes, Ordering::AcqRel);
        self.bytes -= bytes;
    }

    /// Take `bytes` more within the daemon's budget, or refuse.
    pub(super) fn reserve(&mut self, bytes: u64) -> Result<(), SessionError> {
        let limit = self.limit;
        self.total
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n.saturating_add(bytes) <= limit).then_some(n + bytes)
            })
            .map_err(|in_use| {
                SessionError::Limit(crate::session::limit::LimitRefusal::ours(
                    crate::protocol::control::Limit::ManifestMemory,
                    self.bytes + bytes,
                    limit,
                    in_use,
                ))
            })?;
        self.bytes += bytes;
        Ok(())
    }
}

impl Drop for ManifestMemory<'_> {
    fn drop(&mut self) {
        self.total.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

impl Shared {
    pub(super) fn manifest_memory(&self, limit: u64) -> ManifestMemory<'_> {
        ManifestMemory {
            total: &self.manifest_bytes,
            limit,
            bytes: 0,
        }
    }
}

/// The daemon's counts a [`Hold`] takes a unit of.
#[derive(Debug, Clone, Copy)]
pub(super) enum Count {
    Sessions,
    Connections,
}

/// Takes one unit of a daemon count for as long as it lives. It owns its
/// share of the stats, so it travels with what it counts: a data stream's
/// connection stays counted until its session drops the stream.
pub(super) struct Hold {
    pub(super) stats: Arc<DaemonStats>,
    pub(super) count: Count,
}

impl Hold {
    pub(super) fn take(stats: &Arc<DaemonStats>, count: Count, max: usize) -> Option<Self> {
        stats
            .count(count)
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Hold {
                stats: Arc::clone(stats),
                count,
            })
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.stats.count(self.count).fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection's place among those not yet authenticated from its
/// address (`--max-unauthenticated-per-address`), given up once the peer
/// proved it holds the key (or left).
pub(super) struct Unauthenticated {
    pub(super) stats: Arc<DaemonStats>,
    pub(super) group: IpAddr,
}

impl Unauthenticated {
    pub(super) fn take(stats: &Arc<DaemonStats>, ip: IpAddr, max: usize) -> Option<Self> {
        stats
            .unauthenticated
            .try_add(ip, max)
            .map(|group| Unauthenticated {
                stats: Arc::clone(stats),
                group,
            })
    }
}

impl Drop for Unauthenticated {
    fn drop(&mut self) {
        self.stats.unauthenticated.release(self.group);
    }
}

/// Buffer memory reserved for a session.
pub(super) struct Reserved<'a> {
    pub(super) total: &'a AtomicU64,
    pub(super) bytes: u64,
    /// Buffers the bytes hold.
    pub(super) count: usize,
}

/// Streams a session's buffers are sized for, at most.
pub(super) const BUFFER_STREAMS_MAX: u16 = 8;

/// Reserve a session's frame buffers within the daemon's `budget`: as many
/// as it wants, or what is left down to the fewest it works with.
pub(super) fn reserve_buffers<'r>(
    registry: &'r Registry,
    req: &crate::protocol::control::SessionRequest,
) -> Result<Reserved<'r>, SessionError> {
    let block = req.block_size;
    let budget = registry.buffer_budget;
    // Streams share the buffers: past `BUFFER_STREAMS_MAX` (what a default
    // `-P auto` session carries data on at most... of its 16 open streams,
    // at first 4) more streams do not need more of them.
    let streams = req.streams.min(BUFFER_STREAMS_MAX);
    let want = crate::session::buffer_count(usize::from(streams), block, 4, 4);
    let mut count = 0;
    let total = &registry.stats.buffer_bytes;
    total
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            let left = budget.saturating_sub(n);
            count = (crate::session::BUFFERS_MIN..=want)
                .rev()
                .find(|&c| crate::session::locked_bytes(c, block) <= left)
                .unwrap_or(0);
            (count > 0).then(|| n + crate::session::locked_bytes(count, block))
        })
        .map_err(|in_use| {
            SessionError::Limit(crate::session::limit::LimitRefusal::ours(
                crate::protocol::control::Limit::BufferMemory,
                crate::session::locked_bytes(crate::session::BUFFERS_MIN, block),
                budget,
                in_use,
            ))
        })?;
    Ok(Reserved {
        total,
        bytes: crate::session::locked_bytes(count, block),
        count,
    })
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.total.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Files a session receives, claimed against other sessions.
pub(super) struct Claims<'a> {
    pub(super) set: &'a Mutex<BTreeSet<String>>,
    pub(super) names: Vec<String>,
}

impl<'a> Claims<'a> {
    /// Let go of the first `n` names claimed (a streamed push's windows
    /// whose files are all committed or given up).
    pub(super) fn release_first(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        let n = n.min(self.names.len());
        let mut set = self.set.lock().unwrap_or_else(|p| p.into_inner());
        for name in self.names.drain(..n) {
            set.remove(&name);
        }
    }

    /// Claims of no name.
    pub(super) fn none(set: &'a Mutex<BTreeSet<String>>) -> Self {
        Claims {
            set,
            names: Vec::new(),
        }
    }
}

impl Drop for Claims<'_> {
    fn drop(&mut self) {
        let mut set = self.set.lock().unwrap_or_else(|p| p.into_inner());
        for n in &self.names {
            set.remove(n);
        }
    }
}

pub(super) struct Pending {
    pub(super) keys: SessionKeys,
    pub(super) streams: u16,
    pub(super) tx: mpsc::Sender<Arrived>,
}

/// A data stream that proved it belongs to a session, on its way there
/// with its place in the connection count.
pub(super) struct Arrived {
    pub(super) index: u16,
    pub(super) stream: TcpStream,
    pub(super) conn: Hold,
}

pub(super) type Registry = Arc<Shared>;
