//! What the daemon has done and is doing, for its metrics: counters the
//! sessions bump and a scrape reads, errors by kind, sessions running.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::protocol::control::ErrorCode;

use super::admit::PerAddress;
use super::registry::Count;
use crate::session::SessionError;

/// What the daemon has done and is doing, for its metrics: plain atomics
/// the sessions bump and a scrape reads.
#[derive(Debug, Default)]
pub struct DaemonStats {
    pub bytes_received: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub files_received: AtomicU64,
    pub files_sent: AtomicU64,
    pub sessions_total: AtomicU64,
    pub sessions_active: AtomicUsize,
    pub connections_open: AtomicUsize,
    /// Registered buffer memory reserved by the sessions now.
    pub buffer_bytes: AtomicU64,
    pub buffer_bytes_limit: AtomicU64,
    /// Connections refused at once because their address had
    /// `--max-unauthenticated-per-address` connections not yet authenticated.
    pub unauthenticated_refused: AtomicU64,
    /// Connections refused at once at `--max-connections`.
    pub connections_refused: AtomicU64,
    /// Connections not yet authenticated, per address group.
    pub(super) unauthenticated: PerAddress,
    /// Failed sessions and refused connections, by error code: the
    /// daemon's own errors only.
    pub(super) errors: Mutex<HashMap<&'static str, u64>>,
    /// Sessions the peer ended with its own `Error`, by the code it sent.
    pub(super) aborted_by_peer: Mutex<HashMap<&'static str, u64>>,
    /// Connections that failed before they proved they hold the key (a
    /// stranger, a scanner, a wrong key), by error code: no session's.
    pub(super) preauth_failures: Mutex<HashMap<&'static str, u64>>,
    /// Sessions running now: id -> what they moved so far.
    pub(super) sessions: Mutex<HashMap<u64, SessionStat>>,
    pub(super) next_id: AtomicU64,
}

/// One running session, as the metrics show it.
#[derive(Debug, Clone)]
pub struct SessionStat {
    pub peer: SocketAddr,
    pub direction: &'static str,
    pub bytes: u64,
    /// Rate of the last full interval (bytes/s), or the average so far.
    pub rate_bytes_per_s: f64,
    pub started: Instant,
}

/// One more of `key` in a tally of the metrics.
pub(super) fn tally(map: &Mutex<HashMap<&'static str, u64>>, key: &'static str) {
    *map.lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(key)
        .or_default() += 1;
}

/// A tally of the metrics, sorted by key.
pub(super) fn sorted(map: &Mutex<HashMap<&'static str, u64>>) -> Vec<(&'static str, u64)> {
    let mut v: Vec<_> = map
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(k, v)| (*k, *v))
        .collect();
    v.sort();
    v
}

impl DaemonStats {
    pub(super) fn error(&self, code: ErrorCode) {
        tally(&self.errors, code.name());
    }

    /// Count how a session or connection failed: the peer's own `Error`
    /// (its code is its word, not the daemon's fault) apart from the
    /// daemon's errors.
    pub(super) fn failed(&self, e: &SessionError) {
        match e {
            SessionError::Refused { code, .. } => tally(&self.aborted_by_peer, code.name()),
            e => self.error(e.code()),
        }
    }

    pub(super) fn count(&self, count: Count) -> &AtomicUsize {
        match count {
            Count::Sessions => &self.sessions_active,
            Count::Connections => &self.connections_open,
        }
    }

    /// Failed sessions and refused connections, by error code name.
    pub fn errors(&self) -> Vec<(&'static str, u64)> {
        sorted(&self.errors)
    }

    /// Sessions the peer ended with an `Error` message, by its code name.
    pub fn aborted_by_peer(&self) -> Vec<(&'static str, u64)> {
        sorted(&self.aborted_by_peer)
    }

    /// Count a connection that failed before it authenticated, by the
    /// daemon's verdict (a stranger's own `Error` is its refusal of our
    /// challenge: counted as the code it gave); its kind.
    pub(super) fn preauth_failed(&self, e: &SessionError) -> &'static str {
        let kind = match e {
            SessionError::Refused { code, .. } => code.name(),
            e => e.code().name(),
        };
        tally(&self.preauth_failures, kind);
        kind
    }

    /// Connections that failed before they authenticated, by kind.
    pub fn preauth_failures(&self) -> Vec<(&'static str, u64)> {
        sorted(&self.preauth_failures)
    }

    /// Connections open now that have not authenticated yet.
    pub fn connections_unauthenticated(&self) -> usize {
        self.unauthenticated.total()
    }

    /// The sessions running now.
    pub fn sessions(&self) -> Vec<SessionStat> {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    pub(super) fn begin(&self, peer: SocketAddr, direction: &'static str) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.sessions_total.fetch_add(1, Ordering::Relaxed);
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                id,
                SessionStat {
                    peer,
                    direction,
                    bytes: 0,
                    rate_bytes_per_s: 0.0,
                    started: Instant::now(),
                },
            );
        id
    }

    pub(super) fn update(&self, id: u64, bytes: u64, rate: Option<f64>) {
        if let Some(s) = self
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&id)
        {
            s.bytes = bytes;
            s.rate_bytes_per_s =
                rate.unwrap_or_else(|| bytes as f64 / s.started.elapsed().as_secs_f64().max(1e-3));
        }
    }

    pub(super) fn end(&self, id: u64) {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }
}
