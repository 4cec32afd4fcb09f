//! The receiver's disk writes: target files registered in its ring's spare
//! file slots are written with O_DIRECT `WRITE_FIXED` straight from the
//! frame buffers a payload arrived in.

use std::os::fd::RawFd;

use crate::datapath::error::StreamSite;
use crate::datapath::net::layout::HEADROOM;
use crate::datapath::net::stream_err;
use crate::datapath::{Error, Lease};

use super::{NetReceiver, RecvTag};

impl NetReceiver {
    /// Register `fd` (an O_DIRECT target) in a free file slot; `None` when
    /// every slot is taken.
    pub fn attach_file(&mut self, fd: RawFd) -> Result<Option<u32>, Error> {
        self.ring
            .attach_file(fd)
            .map_err(|e| stream_err("registering a file", StreamSite::ReceiverRing, e))
    }

    /// Empty a file slot; no write to it may be in flight.
    pub fn detach_file(&mut self, slot: u32) {
        self.ring.detach_file(slot);
    }

    /// Write `len` bytes of a received frame's payload (its buffer from
    /// [`HEADROOM`]) at `offset` of the file in `slot`, straight from the
    /// registered buffer. The buffer comes back with [`RecvEvent::Written`].
    pub fn write(&mut self, slot: u32, offset: u64, lease: Lease, len: u32, token: u64) {
        self.ring.write_fixed(
            slot,
            offset,
            lease,
            HEADROOM,
            len,
            RecvTag::Write { token, len },
        );
    }
}
