//! The HTTP front's counters, for `/metrics`: requests, bytes and statuses
//! per method, and the third-party copies (active, bytes moved and written,
//! markers sent, done and failed).

use std::sync::atomic::{AtomicU64, Ordering};

/// Methods counted apart; any other counts as `OTHER`.
pub const METHODS: [&str; 11] = [
    "OPTIONS", "HEAD", "GET", "PUT", "DELETE", "MKCOL", "PROPFIND", "COPY", "MOVE", "POST", "OTHER",
];

/// One method's counters.
#[derive(Debug, Default)]
pub struct MethodStats {
    pub requests: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Answers by class: 2xx, 3xx, 4xx, 5xx.
    pub status: [AtomicU64; 4],
}

/// Third-party copies.
#[derive(Debug, Default)]
pub struct TpcStats {
    pub active: AtomicU64,
    pub pulls: AtomicU64,
    pub pushes: AtomicU64,
    /// Of them, over urmove's own protocol (the other endpoint is urmove).
    pub native: AtomicU64,
    pub succeeded: AtomicU64,
    pub failed: AtomicU64,
    /// Bytes moved and written (on disk at the destination).
    pub bytes: AtomicU64,
    pub markers: AtomicU64,
}

/// Everything the front counts.
#[derive(Debug, Default)]
pub struct HttpStats {
    pub methods: [MethodStats; METHODS.len()],
    pub tpc: TpcStats,
    /// Requests refused for their token: 401 and 403.
    pub unauthorized: AtomicU64,
    pub forbidden: AtomicU64,
}

impl HttpStats {
    /// The counters of `method`.
    pub fn method(&self, method: &str) -> &MethodStats {
        let i = METHODS
            .iter()
            .position(|m| *m == method)
            .unwrap_or(METHODS.len() - 1);
        &self.methods[i]
    }

    /// A request answered: its method, status and bytes each way.
    pub fn answered(&self, method: &str, status: u16, bytes_in: u64, bytes_out: u64) {
        let m = self.method(method);
        m.requests.fetch_add(1, Ordering::Relaxed);
        m.bytes_in.fetch_add(bytes_in, Ordering::Relaxed);
        m.bytes_out.fetch_add(bytes_out, Ordering::Relaxed);
        let class = usize::from((status / 100).clamp(2, 5) - 2);
        m.status[class].fetch_add(1, Ordering::Relaxed);
        match status {
            401 => self.unauthorized.fetch_add(1, Ordering::Relaxed),
            403 => self.forbidden.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_count_by_method_and_class() {
        let s = HttpStats::default();
        s.answered("PUT", 201, 10, 0);
        s.answered("BREW", 418, 0, 5);
        s.answered("GET", 403, 0, 0);
        assert_eq!(s.method("PUT").status[0].load(Ordering::Relaxed), 1);
        assert_eq!(s.method("OTHER").bytes_out.load(Ordering::Relaxed), 5);
        assert_eq!(s.method("OTHER").status[2].load(Ordering::Relaxed), 1);
        assert_eq!(s.forbidden.load(Ordering::Relaxed), 1);
    }
}
