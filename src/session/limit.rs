//! A limit of the daemon's that a request went past, by its numbers: the
//! daemon sends them (`LimitRefused`, protocol 13) and both sides say the
//! same sentence from them, so nobody reads the other's prose.

use crate::coord::units::{bytes_both, count};
use crate::protocol::control::{ErrorCode, Limit};

/// Which limit, what the request needed, the most the daemon takes and
/// what others hold of it now; `ours` when this side refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitRefusal {
    pub limit: Limit,
    pub asked: u64,
    pub max: u64,
    pub in_use: u64,
    pub ours: bool,
}

impl LimitRefusal {
    /// This side's refusal.
    pub fn ours(limit: Limit, asked: u64, max: u64, in_use: u64) -> LimitRefusal {
        LimitRefusal {
            limit,
            asked,
            max,
            in_use,
            ours: true,
        }
    }

    /// The error code it ends a session with.
    pub fn code(&self) -> ErrorCode {
        match self.limit {
            Limit::Streams | Limit::Entries | Limit::ManifestMemory => ErrorCode::TooLarge,
            Limit::Sessions | Limit::Connections | Limit::BufferMemory => ErrorCode::Busy,
            Limit::Space => ErrorCode::NoSpace,
        }
    }

    /// What was refused, said from the numbers alone.
    pub fn what(&self) -> String {
        let (asked, max, in_use) = (self.asked, self.max, self.in_use);
        let mib = |b: u64| b.div_ceil(1 << 20);
        match self.limit {
            Limit::Streams => format!(
                "{asked} data streams asked, this daemon takes 1 to {max} per session"
            ),
            Limit::Sessions => format!(
                "the daemon serves {max} sessions at once, its limit; try again later"
            ),
            Limit::Connections => format!(
                "{} asked, and the daemon has room for {} ({in_use} open, --max-connections {max}); try again later, or ask fewer streams (-P)",
                count(asked, "data stream"),
                count(max.saturating_sub(in_use), "more connection"),
            ),
            Limit::BufferMemory => format!(
                "the session needs at least {} MiB of buffers and {} of the daemon's {} MiB (max_buffer_memory, or its locked-memory limit) are in use; try later or use smaller blocks",
                mib(asked),
                in_use >> 20,
                max >> 20
            ),
            Limit::ManifestMemory => format!(
                "the manifests of the sessions now running take {} MiB of the daemon's {} MiB (max_manifest_memory); this one needs {} MiB more: send it in parts or try later",
                in_use >> 20,
                max >> 20,
                mib(asked)
            ),
            Limit::Entries => format!(
                "the manifest has more than {max} entries, the limit here (max_files); send the tree in parts"
            ),
            Limit::Space => format!(
                "no room: the files still to come need {} of data, the receiver's filesystem has {} free; nothing was written (free space there, or send less)",
                bytes_both(asked),
                bytes_both(max)
            ),
        }
    }
}

impl std::fmt::Display for LimitRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.ours {
            true => write!(f, "{}", self.what()),
            false => write!(
                f,
                "the peer refused: {} ({}, limit {})",
                self.what(),
                self.code().name(),
                self.limit.name()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_limit_is_said_from_its_numbers() {
        let c = LimitRefusal::ours(Limit::Connections, 16, 3, 1);
        assert_eq!(
            c.to_string(),
            "16 data streams asked, and the daemon has room for 2 more connections (1 open, --max-connections 3); try again later, or ask fewer streams (-P)"
        );
        let theirs = LimitRefusal { ours: false, ..c };
        assert!(theirs
            .to_string()
            .starts_with("the peer refused: 16 data streams"));
        assert!(theirs.to_string().ends_with("(busy, limit connections)"));
        let space = LimitRefusal::ours(Limit::Space, 3 << 30, 1 << 30, 0);
        assert_eq!(space.code(), ErrorCode::NoSpace);
        assert!(space.to_string().contains("free"), "{space}");
    }
}
