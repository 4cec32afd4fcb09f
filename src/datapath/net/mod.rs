//! Net rings: data-stream frames sent from registered buffers and received
//! into them, one io_uring for a set of TCP streams.
//!
//! - [`layout`]: where a frame's header, payload and tag sit in its buffer.
//! - [`zerocopy`]: when zero-copy sends pay, and the `--zerocopy` policy.
//! - [`sender`]: [`NetSender`], which also reads sources into its buffers.
//! - [`receiver`]: [`NetReceiver`], which also checks and opens frames and
//!   writes their payloads to files.
//!
//! Everything callers use is re-exported here (`net::NetSender`, ...).

use std::io;

use super::error::StreamSite;
use super::Error;

pub mod layout;
pub mod receiver;
pub mod sender;
pub mod zerocopy;

pub use layout::{frame_buf_size, payload, payload_mut, HEADROOM};
pub use receiver::{NetReceiver, RecvEvent};
pub use sender::{NetSender, SendStats};
pub use zerocopy::{zero_copy_wont_pay, ZeroCopy};

fn stream_err(op: &'static str, site: StreamSite, source: io::Error) -> Error {
    Error::Stream { op, site, source }
}

/// Enable `ring` and register `sockets` in its first file slots, one per
/// stream (`ids` their session numbers, named in an error).
fn register_sockets<T>(
    ring: &mut super::ring::Ring<T>,
    sockets: &[std::os::fd::RawFd],
    ids: &[u32],
) -> Result<(), Error> {
    assert_eq!(sockets.len(), ids.len(), "a socket per stream");
    ring.enable()?;
    for (i, &fd) in sockets.iter().enumerate() {
        ring.set_file(i as u32, fd)
            .map_err(|e| stream_err("registering a socket", StreamSite::Stream(ids[i]), e))?;
    }
    Ok(())
}
