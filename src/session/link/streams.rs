//! A session's data streams as its lanes take them: their descriptors,
//! and how their frames are sealed (`--encrypt`).

use std::net::TcpStream;
use std::os::fd::AsRawFd;

use crate::protocol::handshake::SessionKeys;
use crate::protocol::seal::Direction as SealDirection;

/// The keys and direction a session's frames are sealed with, if it is
/// encrypted.
pub(crate) type Sealing = Option<(SessionKeys, SealDirection)>;

/// The descriptors of `streams`.
pub(crate) fn fds_of(streams: &[TcpStream]) -> Vec<i32> {
    streams.iter().map(|s| s.as_raw_fd()).collect()
}
