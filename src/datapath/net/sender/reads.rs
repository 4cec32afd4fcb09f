//! The sender's disk reads: sources registered in its ring's spare file
//! slots are read with O_DIRECT `READ_FIXED` straight into frame buffers,
//! at the payload's place, and handed back to the caller by token.

use std::os::fd::RawFd;

use crate::datapath::error::StreamSite;
use crate::datapath::net::layout::HEADROOM;
use crate::datapath::net::stream_err;
use crate::datapath::{Error, Lease};

use super::{NetSender, SendOp};

impl NetSender {
    /// Register a source `fd` in a free file slot; `None` when all are taken.
    pub fn attach_file(&mut self, fd: RawFd) -> Result<Option<u32>, Error> {
        self.ring
            .attach_file(fd)
            .map_err(|e| stream_err("registering a file", StreamSite::SenderRing, e))
    }

    /// Empty a file slot; no read from it may be in flight.
    pub fn detach_file(&mut self, slot: u32) {
        self.ring.detach_file(slot);
    }

    /// Read `len` bytes at `offset` of the file in `slot` into the buffer's
    /// payload area ([`HEADROOM`]) with O_DIRECT `READ_FIXED`; the buffer
    /// comes back from [`take_read`](Self::take_read) with the result.
    pub fn read(&mut self, slot: u32, offset: u64, lease: Lease, len: u32, token: u32) {
        let tag = SendOp::Read { token };
        self.ring
            .read_fixed(slot, offset, lease, HEADROOM, len, tag);
    }

    /// A finished read: (token, bytes read or a negative errno, buffer).
    pub fn take_read(&mut self) -> Option<(u32, i32, Lease)> {
        self.reads_done.pop_front()
    }
}
