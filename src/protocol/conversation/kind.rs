//! Control messages by kind alone, as the conversation orders them.

use crate::protocol::control::{DaemonInfo, ErrorCode, HaveItem, Message, SessionRequest};
use crate::protocol::handshake::{Auth, Challenge, Hello, Welcome};

pub use crate::protocol::catalogue::{kind_of, Kind};

/// A message of kind `k` with plain fields (a `Have` names one file, a
/// `Request` is `req`): what the round-trip count and the fuzz body feed
/// the conversation.
pub fn sample(k: Kind, req: &SessionRequest) -> Message {
    use crate::protocol::control::PieceDone;
    let done = PieceDone {
        digest: 0,
        receipt: 0,
        whole: None,
        untrusted: None,
    };
    match k {
        Kind::Hello => Message::Hello(Hello {
            version: crate::protocol::handshake::VERSION,
            client_nonce: [0; crate::protocol::handshake::NONCE_LEN],
        }),
        Kind::Challenge => Message::Challenge(Challenge {
            server_nonce: [0; crate::protocol::handshake::NONCE_LEN],
            server_proof: [0; crate::protocol::handshake::PROOF_LEN],
        }),
        Kind::Auth => Message::Auth(Auth {
            client_proof: [0; crate::protocol::handshake::PROOF_LEN],
        }),
        Kind::Welcome => Message::Welcome(Welcome {
            session_id: [0; crate::protocol::handshake::SESSION_ID_LEN],
        }),
        Kind::Request => Message::Request(req.clone()),
        Kind::Manifest => Message::Manifest(Vec::new()),
        Kind::ManifestEnd => Message::ManifestEnd,
        Kind::Ready => Message::Ready,
        Kind::StreamHello => Message::StreamHello {
            session_id: [0; crate::protocol::handshake::SESSION_ID_LEN],
            stream_index: 0,
            proof: [0; crate::protocol::handshake::PROOF_LEN],
        },
        Kind::FileAck => Message::FileAck {
            file_index: 0,
            digest: 0,
        },
        Kind::Shard => Message::Shard {
            index: 0,
            count: 1,
            split_over: 0,
        },
        Kind::Kept => Message::Kept { files: 0, bytes: 0 },
        Kind::ShardManifest => Message::ShardManifest {
            files: 0,
            bytes: 0,
            digest: [0; 32],
        },
        Kind::PieceAck => Message::PieceAck {
            file_index: 0,
            done,
        },
        Kind::Error => Message::Error {
            code: ErrorCode::Internal,
            message: String::new(),
        },
        Kind::Summary => Message::Summary {
            files: 0,
            bytes: 0,
            ok: true,
        },
        k => later(k),
    }
}

/// The samples of the kinds after `Summary`.
fn later(k: Kind) -> Message {
    match k {
        Kind::Have => Message::Have(vec![HaveItem::Complete {
            file_index: 0,
            digest: 0,
        }]),
        Kind::HaveEnd => Message::HaveEnd,
        Kind::SourceDigests => Message::SourceDigests(Vec::new()),
        Kind::FileEnd => Message::FileEnd {
            file_index: 0,
            size: 0,
            mtime_s: 0,
            mtime_ns: 0,
        },
        Kind::Added => Message::Added {
            first: 0,
            entries: Vec::new(),
        },
        Kind::DirTimes => Message::DirTimes(Vec::new()),
        Kind::AddedEnd => Message::AddedEnd,
        Kind::Admitted => Message::Admitted { upto: 0 },
        Kind::FileRejected => Message::FileRejected {
            file_index: 0,
            digest: 0,
        },
        Kind::Skipped => Message::Skipped {
            file_index: 0,
            path: String::new(),
            reason: String::new(),
            rule: false,
        },
        Kind::HeldWrong => Message::HeldWrong(Vec::new()),
        Kind::HeldChecked => Message::HeldChecked,
        Kind::LeftOut => Message::LeftOut {
            excluded: 0,
            devices: 0,
        },
        Kind::StreamsRefused => Message::StreamsRefused { asked: 0, max: 0 },
        Kind::Deleted => Message::Deleted(Vec::new()),
        Kind::Alive => Message::Alive {
            streams: Vec::new(),
        },
        Kind::Placement => Message::Placement {
            streams: Vec::new(),
            entries: Vec::new(),
        },
        Kind::UdpPlan => Message::UdpPlan {
            flows: 1,
            size: 0,
            rate: 0,
            time_ms: 0,
            interval_ms: 1,
            port: 0,
        },
        Kind::UdpReady => Message::UdpReady { port: 0 },
        Kind::LimitRefused => Message::LimitRefused {
            limit: crate::protocol::control::Limit::Sessions,
            asked: 1,
            max: 1,
            in_use: 1,
        },
        Kind::VersionRefused => Message::VersionRefused {
            oldest: 14,
            newest: 15,
        },
        Kind::DaemonInfo => Message::DaemonInfo(DaemonInfo {
            release: String::new(),
            protocol_oldest: 12,
            protocol_newest: 13,
            streams_max: 1,
            sessions_max: 1,
            sessions_running: 0,
            files_max: 1,
            block_max: 4096,
            pull_only: false,
            encryption_required: false,
            root_free_bytes: 0,
        }),
        Kind::UdpCounts => Message::UdpCounts {
            done: true,
            foreign: 0,
            flows: Vec::new(),
        },
        Kind::UdpEnd => Message::UdpEnd { sent: Vec::new() },
        k => sample(
            k,
            &crate::protocol::conversation::request_of(super::Role::Push, false),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind's sample is of that kind, and the kinds are the 37
    /// variants, each once.
    #[test]
    fn samples_have_their_kind() {
        let req = crate::protocol::conversation::request_of(
            crate::protocol::conversation::Role::Push,
            false,
        );
        for &k in Kind::ALL {
            assert_eq!(kind_of(&sample(k, &req)), k);
        }
        let names: std::collections::HashSet<_> = Kind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), crate::protocol::catalogue::MESSAGES.len());
    }
}
