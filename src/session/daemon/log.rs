//! The daemon's log: lines and how much each matters.

use std::sync::Arc;

/// How much a log line matters (journald's priorities, in short).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
    Error,
}

/// Where the daemon's log lines go (stderr, under systemd the journal).
pub type Log = Arc<dyn Fn(Level, &str) + Send + Sync>;
