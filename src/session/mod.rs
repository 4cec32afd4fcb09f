//! L3: transfer sessions. `recv` is the daemon side, `send` the client; both
//! speak `protocol` over a control connection plus N data streams and move
//! bytes with the net rings of `datapath`.
//!
//! Receiver paths are confined to the root with `datapath::beneath`; files
//! are written as `NAME.urmove.part` and renamed only after every block
//! arrived, verified, and was synced.

pub mod conn;
pub mod pull;
mod receive;
pub mod recv;
pub mod send;
pub mod tree;

use crate::protocol::control::ErrorCode;

/// Suffix of a file still being received.
pub const PART_SUFFIX: &str = ".urmove.part";
/// Default TCP port of `urmove recv`.
pub const DEFAULT_PORT: u16 = 7878;

/// Why a session failed, with the protocol code the peer is told.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("{0}")]
    Auth(crate::protocol::handshake::AuthError),
    #[error("the peer refused: {message} ({})", code.name())]
    Refused { code: ErrorCode, message: String },
    #[error("{message}")]
    Local { code: ErrorCode, message: String },
    #[error(transparent)]
    Data(#[from] crate::datapath::Error),
}

impl SessionError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        SessionError::Io {
            context: context.into(),
            source,
        }
    }

    pub fn local(code: ErrorCode, message: impl Into<String>) -> Self {
        SessionError::Local {
            code,
            message: message.into(),
        }
    }

    /// The code to send the peer.
    pub fn code(&self) -> ErrorCode {
        match self {
            SessionError::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC) => {
                ErrorCode::NoSpace
            }
            SessionError::Io { .. } => ErrorCode::Io,
            SessionError::Protocol(_) => ErrorCode::Malformed,
            SessionError::Auth(_) => ErrorCode::AuthFailed,
            SessionError::Refused { code, .. } | SessionError::Local { code, .. } => *code,
            SessionError::Data(crate::datapath::Error::Frame { .. }) => ErrorCode::Malformed,
            SessionError::Data(_) => ErrorCode::Io,
        }
    }

    /// Whether the fault is configuration or usage (exit 2), not the run.
    pub fn is_usage(&self) -> bool {
        matches!(self, SessionError::Auth(_))
            || matches!(
                self,
                SessionError::Refused {
                    code: ErrorCode::AuthFailed | ErrorCode::PathRefused,
                    ..
                }
            )
    }
}
