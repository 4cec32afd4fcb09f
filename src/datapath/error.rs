//! The data path's typed errors. Each carries the op, path and offset it
//! concerns; `is_usage` separates configuration problems (exit 2) from run
//! failures (exit 1).

use std::io;
use std::path::PathBuf;

use crate::protocol::block::StampError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("io_uring is not available: {reason}. {remedy}")]
    RingUnavailable { reason: String, remedy: String },

    #[error("io_uring on this kernel does not support {op}. {remedy}")]
    OpUnsupported {
        op: &'static str,
        remedy: &'static str,
    },

    #[error("cannot register {what} with io_uring: {source}. {remedy}")]
    Register {
        what: &'static str,
        #[source]
        source: io::Error,
        remedy: String,
    },

    #[error("cannot map {bytes} bytes of I/O buffers: {source}")]
    Alloc {
        bytes: usize,
        #[source]
        source: io::Error,
    },

    #[error("{path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("{op} {path} at offset {offset}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        offset: u64,
        #[source]
        source: io::Error,
    },

    #[error(
        "{path}: {what} {value} is not a multiple of the direct I/O alignment of {align} bytes \
         (from {from}); use a multiple of {align}, or --direct off"
    )]
    Misaligned {
        path: PathBuf,
        what: &'static str,
        value: u64,
        align: u32,
        from: &'static str,
    },

    #[error(
        "{path}: the filesystem does not support O_DIRECT and --direct required was given; \
         use --direct auto to fall back to buffered I/O"
    )]
    DirectUnsupported { path: PathBuf },

    #[error("{path}: verify failed at offset {offset}: {reason}")]
    Verify {
        path: PathBuf,
        offset: u64,
        reason: StampError,
    },

    #[error("{path} holds {what}; refusing to write to it without --destroy")]
    HoldsData { path: PathBuf, what: String },

    #[error("{path} is in use (mounted, or held by another program): {source}")]
    Busy {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("{path}: not enough free space for one block ({free} bytes free)")]
    NoSpace { path: PathBuf, free: u64 },

    #[error(
        "{path} holds written data only up to {data_bytes} bytes, less than the {region_bytes} to read \
         (reading holes or past the end measures no disk); give --size {data_bytes} or less, add a \
         write mode, or use a directory target"
    )]
    ShortTarget {
        path: PathBuf,
        data_bytes: u64,
        region_bytes: u64,
    },

    #[error(
        "I/O buffers would take {bytes} bytes, more than half the RAM ({ram_bytes} bytes); \
         lower --qd or --bs"
    )]
    TooMuchMemory { bytes: u64, ram_bytes: u64 },

    #[error("the worker thread for {path} panicked (a bug; please report it)")]
    WorkerPanicked { path: PathBuf },

    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },

    #[error("{op} on {site}: {source}")]
    Stream {
        op: &'static str,
        site: StreamSite,
        #[source]
        source: io::Error,
    },

    #[error("UDP {op}: {source}")]
    Udp {
        op: &'static str,
        #[source]
        source: io::Error,
    },

    #[error("data stream {stream}: {reason}")]
    Frame {
        stream: u32,
        reason: crate::protocol::frame::FrameError,
    },

    #[error("interrupted")]
    Interrupted,
}

/// Where an operation on the data streams failed: on one stream, or on
/// the ring that carries a side's streams, where no one stream is to blame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamSite {
    /// One data stream, by its number in the session.
    Stream(u32),
    /// Every stream a sender carries at once (the peer as a whole).
    AllStreams,
    /// The sender's ring itself (submitting to it, registering in it).
    SenderRing,
    /// The receiver's ring itself.
    ReceiverRing,
}

impl std::fmt::Display for StreamSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StreamSite::Stream(stream) => write!(f, "data stream {stream}"),
            StreamSite::AllStreams => f.write_str("every data stream"),
            StreamSite::SenderRing => f.write_str("the sender's ring"),
            StreamSite::ReceiverRing => f.write_str("the receiver's ring"),
        }
    }
}

impl Error {
    /// True when the error is a configuration or usage problem (exit code 2)
    /// rather than a failure during the run (exit code 1).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            Error::Open { .. }
                | Error::Misaligned { .. }
                | Error::DirectUnsupported { .. }
                | Error::HoldsData { .. }
                | Error::Busy { .. }
                | Error::RingUnavailable { .. }
                | Error::OpUnsupported { .. }
                | Error::Register { .. }
                | Error::ShortTarget { .. }
                | Error::TooMuchMemory { .. }
                | Error::Invalid { .. }
        )
    }
}

/// Errno values that mean "try the same op again", not failure.
pub fn is_retry(errno: i32) -> bool {
    errno == libc::EINTR || errno == libc::EAGAIN || errno == libc::EBUSY
}

impl Error {
    /// The kernel refused to register buffers for want of locked memory
    /// (RLIMIT_MEMLOCK, which it counts per user, across processes).
    pub fn is_locked_memory_short(&self) -> bool {
        matches!(self, Error::Register { source, .. } if source.raw_os_error() == Some(libc::ENOMEM))
    }
}
