//! L3: transfer sessions. `recv` is the daemon side, `send` the client; both
//! speak `protocol` over a control connection plus N data streams and move
//! bytes with the net rings of `datapath`.
//!
//! Receiver paths are confined to the root with `datapath::beneath`; files
//! are written as `NAME.urmove.part` and renamed only after every block
//! arrived, verified, and was synced.

mod admit;
mod commit;
pub mod conn;
mod journal;
mod landing;
pub mod pull;
pub mod receive;
pub mod recv;
pub mod secret;
pub mod send;
mod source;
pub mod tree;

use crate::protocol::control::ErrorCode;

/// Suffix of a file still being received.
pub const PART_SUFFIX: &str = ".urmove.part";
/// A sender below this many bytes per second, while the receiver waits
/// for it over a whole `--timeout`, ends its session (a trickle is not
/// progress).
pub const MIN_RATE_BYTES_PER_S: u64 = 1000;
/// Default TCP port of `urmove recv`.
pub const DEFAULT_PORT: u16 = 7878;

/// Registered buffer memory one side of a session may pin, at most.
pub const SESSION_BUFFER_BYTES_MAX: u64 = 1 << 30;
/// Blocks one manifest may hold in total (the receiver keeps a bit per block).
pub const SESSION_BLOCKS_MAX: u64 = 1 << 30;

/// Fewest frame buffers a side of a session works with (one in the disk
/// or the socket while the other is filled): any stream count shares them.
pub const BUFFERS_MIN: usize = 2;
/// Most frame buffers one side of a session takes.
pub const BUFFERS_MAX: usize = 256;
const _: () = assert!(BUFFERS_MIN * (64 << 20) < SESSION_BUFFER_BYTES_MAX as usize);

/// How many frame buffers of `block` bytes a side with `streams` streams
/// wants: `per_stream` each plus `extra`, within
/// [`BUFFERS_MIN`]..[`BUFFERS_MAX`] and within [`SESSION_BUFFER_BYTES_MAX`].
/// Streams do not need a buffer each (a receiver takes one only for a
/// payload), so every stream count and block size fits.
pub fn buffer_count(streams: usize, block: u32, per_stream: usize, extra: usize) -> usize {
    let want = (streams * per_stream + extra).clamp(BUFFERS_MIN, BUFFERS_MAX);
    let fit = (SESSION_BUFFER_BYTES_MAX / buffer_bytes(block)) as usize;
    want.min(fit).max(BUFFERS_MIN)
}

/// Bytes one frame buffer of a `block`-byte frame takes.
pub fn buffer_bytes(block: u32) -> u64 {
    crate::datapath::net::frame_buf_size(block as usize) as u64
}

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

    /// Whether this is a connection breaking (reset, closed, lost streams),
    /// which is usually the consequence of a fault the peer can name.
    pub fn is_connection_loss(&self) -> bool {
        use std::io::ErrorKind::*;
        match self {
            SessionError::Io { source, .. } => matches!(
                source.kind(),
                ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof | NotConnected
            ),
            SessionError::Data(crate::datapath::Error::Stream { .. }) => true,
            _ => false,
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
