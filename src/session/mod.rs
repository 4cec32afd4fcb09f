//! L3: transfer sessions. `recv` is the daemon side, `send` the client; both
//! speak `protocol` over a control connection plus N data streams and move
//! bytes with the net rings of `datapath`.
//!
//! Receiver paths are confined to the root with `datapath::beneath`; files
//! are written as `NAME.urmove.part` and renamed only after every block
//! arrived, verified, and was synced.

pub mod client;
pub mod daemon;
pub mod fuzz;
pub mod limit;
pub mod link;
pub mod plan;
pub mod probe;
mod roles;
pub mod sink;
pub mod source;

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

/// Locked memory a ring's own pages may count besides its buffers.
const RING_MEMLOCK_SLACK: u64 = 512 << 10;
/// A side fitted to a tight memlock limit keeps at least this many buffers
/// (lowering the block size for them), so disk and network still overlap.
const FIT_BUFFERS_MIN: usize = 4;
/// Smallest block a fitted side goes down to.
const FIT_BLOCK_MIN: u32 = 64 << 10;

/// Locked memory (RLIMIT_MEMLOCK) one side's `count` buffers of `block`
/// frames take once registered, its ring included.
pub fn locked_bytes(count: usize, block: u32) -> u64 {
    let each = crate::datapath::net::frame_buf_size(block as usize);
    crate::datapath::Arena::locked_bytes(each, count) + RING_MEMLOCK_SLACK
}

/// The buffers a side registers, fitted to its locked-memory limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fit {
    pub count: usize,
    pub block: u32,
    /// What was lowered and what to raise for the full set, when anything was.
    pub note: Option<String>,
}

/// Fit `want` buffers of `block` frames into `limit` bytes of locked
/// memory (`None`: unlimited, or CAP_IPC_LOCK): fewer buffers if at least
/// [`FIT_BUFFERS_MIN`] fit, else smaller blocks. `smaller` names the
/// command's own option for a smaller block. Refused when not even two
/// 64 KiB buffers fit.
pub fn fit_buffers(
    want: usize,
    block: u32,
    limit: Option<u64>,
    smaller: &str,
) -> Result<Fit, SessionError> {
    let full = Fit {
        count: want,
        block,
        note: None,
    };
    let Some(limit) = limit else { return Ok(full) };
    let fits = |b: u32| (1..=want).rev().find(|&n| locked_bytes(n, b) <= limit);
    if fits(block) == Some(want) {
        return Ok(full);
    }
    let need = locked_bytes(want, block);
    let raise = format!(
        "for all of them raise it to at least {} KiB (`ulimit -l {}`, LimitMEMLOCK= under systemd) or grant CAP_IPC_LOCK",
        need.div_ceil(1024),
        need.div_ceil(1024)
    );
    let mut b = block;
    loop {
        let n = fits(b).unwrap_or(0);
        if n >= FIT_BUFFERS_MIN.min(want) || (b <= FIT_BLOCK_MIN && n >= BUFFERS_MIN) {
            let note = format!(
                "locked memory is limited to {} KiB (RLIMIT_MEMLOCK, without CAP_IPC_LOCK): using {n} buffers of {} KiB frames (asked for {want} of {} KiB); {raise}",
                limit / 1024,
                b >> 10,
                block >> 10
            );
            return Ok(Fit {
                count: n,
                block: b,
                note: Some(note),
            });
        }
        if b <= FIT_BLOCK_MIN {
            return Err(SessionError::local(
                crate::protocol::control::ErrorCode::TooLarge,
                format!(
                    "locked memory is limited to {} KiB (RLIMIT_MEMLOCK, without CAP_IPC_LOCK): not even two buffers fit; {raise}, or use a smaller {smaller}",
                    limit / 1024
                ),
            ));
        }
        b = (b / 2).max(FIT_BLOCK_MIN) / 4096 * 4096;
    }
}

/// Register `buffers` with `make(count)`, halving the count while the
/// kernel refuses them for want of locked memory: it counts RLIMIT_MEMLOCK
/// per user, so the same user's other transfers (two runs through ssh to
/// one host, say) may hold part of what the fit counted on. `halved` is
/// told each new count; the count registered comes back too.
pub fn register_halving<T>(
    buffers: usize,
    halved: &mut dyn FnMut(usize),
    make: impl Fn(usize) -> Result<T, SessionError>,
) -> Result<(T, usize), SessionError> {
    let mut n = buffers;
    loop {
        match make(n) {
            Err(SessionError::Data(e)) if e.is_locked_memory_short() && n / 2 >= BUFFERS_MIN => {
                n /= 2;
                halved(n);
            }
            other => return other.map(|t| (t, n)),
        }
    }
}

/// This process's locked-memory limit for registered buffers: `None` when
/// unlimited or exempt (CAP_IPC_LOCK).
pub fn memlock_budget() -> Option<u64> {
    use crate::datapath::sys;
    if sys::has_cap_ipc_lock() {
        return None;
    }
    sys::memlock_limit()
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
    /// Control bytes from the peer that do not decode as a message.
    #[error("protocol error: {0}")]
    Decode(crate::protocol::wire::DecodeError),
    /// A control message this side could not seal.
    #[error("protocol error: {0}")]
    Seal(crate::protocol::seal::SealError),
    /// A control message out of the order the conversation's table
    /// allows (`protocol::conversation`), sent or received.
    #[error("protocol error: {0}")]
    OutOfOrder(crate::protocol::conversation::Unexpected),
    /// A sealed control message that does not open.
    #[error("protocol error: a control message failed authentication (injected, altered, replayed or reordered)")]
    Unauthentic,
    #[error("{0}")]
    Auth(crate::protocol::handshake::AuthError),
    #[error("{}", refused_text(*code, message))]
    Refused { code: ErrorCode, message: String },
    #[error("{message}")]
    Local { code: ErrorCode, message: String },
    #[error(transparent)]
    Data(#[from] crate::datapath::Error),
    /// Another session holds what this one needs (a file, a piece, a
    /// part): busy, and a later run may go through.
    #[error("{0}")]
    Contended(Contended),
    /// A lane stopped because another lane of the transfer failed (whose
    /// error, not this one, says why).
    #[error("another lane of this transfer failed")]
    AnotherLaneFailed,
    /// More data streams asked than the daemon takes: `ours` when this
    /// side (the daemon) refuses, else the peer's refusal as it said it.
    #[error("{}", streams_refused(*asked, *max, *ours))]
    TooManyStreams { asked: u16, max: u16, ours: bool },
    /// A limit of the daemon's, by its numbers (see [`limit::LimitRefusal`]).
    #[error("{0}")]
    Limit(limit::LimitRefusal),
    /// The daemon's protocol version lacks a feature the session needs
    /// (said before the request).
    #[error("{0}")]
    Lacks(crate::protocol::negotiate::Lacks),
    /// A message this side cannot say in the session's protocol version.
    #[error("protocol error: {0}")]
    Encode(crate::protocol::control::EncodeError),
}

/// What another session holds that this one needs, by the path the peer
/// knows (`rel`, beneath the root).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Contended {
    #[error("{rel}: another session is receiving it now")]
    Receiving { rel: String },
    #[error("{rel}: another session is writing this file now")]
    Writing { rel: String },
    #[error("{rel}: another session is writing bytes {start} to {end} of this file now, or committing it")]
    Span { rel: String, start: u64, end: u64 },
    #[error("{rel}: another session wrote this piece since this one held it (its bytes here may not be the ones this one verified): run again")]
    PieceRewritten { rel: String },
    #[error(
        "{rel}: committed or replaced by another session while this one brought a piece of it"
    )]
    Replaced { rel: String },
    #[error("{rel}: the part file keeps changing under this session")]
    PartChanging { rel: String },
}

/// The text of a refusal of `asked` data streams where `max` is the most.
fn streams_refused(asked: u16, max: u16, ours: bool) -> String {
    let why = format!("{asked} data streams asked, this daemon takes 1 to {max} per session");
    match ours {
        true => why,
        false => refused_text(ErrorCode::TooLarge, &why),
    }
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
            SessionError::Protocol(_)
            | SessionError::Decode(_)
            | SessionError::Seal(_)
            | SessionError::OutOfOrder(_)
            | SessionError::Unauthentic => ErrorCode::Malformed,
            SessionError::Auth(_) => ErrorCode::AuthFailed,
            SessionError::Refused { code, .. } | SessionError::Local { code, .. } => *code,
            SessionError::Data(crate::datapath::Error::Frame { .. }) => ErrorCode::Malformed,
            SessionError::Data(_) | SessionError::AnotherLaneFailed => ErrorCode::Io,
            SessionError::TooManyStreams { .. } => ErrorCode::TooLarge,
            SessionError::Limit(l) => l.code(),
            SessionError::Encode(_) => ErrorCode::Internal,
            SessionError::Lacks(_) => ErrorCode::BadRequest,
            SessionError::Contended(_) => ErrorCode::Busy,
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

    /// Whether this error is one entry's alone: its path goes through a
    /// link or out of the root, names another file than expected, or its
    /// directory is missing, not one, refused to this user, or cannot hold
    /// its name: what someone who can write under the root may cause, so
    /// that entry is refused and the session goes on.
    pub fn is_entry_fault(&self) -> bool {
        let SessionError::Io { source, .. } = self else {
            return false;
        };
        crate::datapath::beneath::refused(source)
            || matches!(
                source.raw_os_error(),
                Some(
                    libc::ENOTDIR
                        | libc::ENOENT
                        | libc::EACCES
                        | libc::EPERM
                        | libc::ELOOP
                        | libc::ENAMETOOLONG
                        | libc::EILSEQ
                )
            )
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

/// What the peer's error says: a refusal, or (the daemon stopping under a
/// running session) the end it put to it.
fn refused_text(code: ErrorCode, message: &str) -> String {
    match code {
        ErrorCode::ShuttingDown => format!("the daemon ended the session: {message}"),
        _ => format!("the peer refused: {message} ({})", code.name()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_fit_a_tight_memlock_limit_with_fewer_or_smaller_frames() {
        let want = buffer_count(4, 4 << 20, 4, 4);
        assert_eq!(want, 20);
        // Unlimited, or enough: as asked.
        let full = fit_buffers(want, 4 << 20, None, "--block").unwrap();
        assert_eq!((full.count, full.block, full.note), (20, 4 << 20, None));
        let roomy = fit_buffers(want, 4 << 20, Some(1 << 30), "--block").unwrap();
        assert_eq!((roomy.count, roomy.note), (20, None));
        // 8 MiB, the usual non-root default: smaller frames, said so.
        let tight = fit_buffers(want, 4 << 20, Some(8 << 20), "--block").unwrap();
        assert!(tight.count >= FIT_BUFFERS_MIN, "{tight:?}");
        assert!(
            tight.block < 4 << 20 && tight.block.is_multiple_of(4096),
            "{tight:?}"
        );
        assert!(locked_bytes(tight.count, tight.block) <= 8 << 20);
        let note = tight.note.unwrap();
        assert!(
            note.contains("RLIMIT_MEMLOCK") && note.contains("CAP_IPC_LOCK"),
            "{note}"
        );
        // Nothing fits: refused, naming the command's option.
        let e = fit_buffers(want, 4 << 20, Some(1 << 20), "--bs").unwrap_err();
        assert!(e.to_string().contains("--bs"), "{e}");
    }
}
