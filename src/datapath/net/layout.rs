//! A frame buffer's layout: the 32-byte frame header sits just before
//! [`HEADROOM`] and the payload starts at `HEADROOM`, so the payload is
//! page-aligned for O_DIRECT (a disk read into it, or a disk write from
//! it) while header and payload go out in a single send; a sealed frame's
//! tag follows its payload.

use crate::datapath::arena::BUF_ALIGN;
use crate::datapath::Lease;
use crate::protocol::frame::{FrameHeader, FLAG_SEALED, FRAME_HEADER_LEN};
use crate::protocol::seal::TAG_LEN;

/// Where a frame's payload starts in its buffer (page-aligned for O_DIRECT).
pub const HEADROOM: usize = 4096;

pub(super) const HEADER_AT: usize = HEADROOM - FRAME_HEADER_LEN;

/// Bytes of buffer a frame with `payload_max` bytes of payload needs
/// (a sealed frame's tag included).
pub fn frame_buf_size(payload_max: usize) -> usize {
    (HEADROOM + payload_max + TAG_LEN).div_ceil(BUF_ALIGN) * BUF_ALIGN
}

/// Bytes after a frame's payload on the wire: the tag of a sealed frame.
pub(super) fn trailer(h: &FrameHeader) -> u32 {
    if h.flags & FLAG_SEALED != 0 {
        TAG_LEN as u32
    } else {
        0
    }
}

/// The payload area of a frame buffer.
pub fn payload_mut(lease: &mut Lease) -> &mut [u8] {
    &mut lease.as_mut_slice()[HEADROOM..]
}

/// The payload of a received frame.
pub fn payload<'a>(lease: &'a Lease, header: &FrameHeader) -> &'a [u8] {
    &lease.as_slice()[HEADROOM..HEADROOM + header.length as usize]
}
