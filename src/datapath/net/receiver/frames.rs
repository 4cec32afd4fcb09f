//! Reading a frame: its header decoded and checked against the limits and
//! the session's sealing, and a sealed frame opened in place, its checksum
//! computed from the plaintext as its flags say (a hole's, a sparse
//! block's later, none for an unchecked one).

use crate::datapath::net::layout::{HEADER_AT, HEADROOM};
use crate::datapath::{Error, Lease};
use crate::protocol::frame::{
    hole_checksum, payload_checksum, FrameError, FrameHeader, FLAG_HOLE, FLAG_SEALED,
    FLAG_UNCHECKED, FRAME_HEADER_LEN,
};
use crate::protocol::seal::TAG_LEN;

use super::NetReceiver;

impl NetReceiver {
    /// Decode stream `stream`'s header and check it against the limits and
    /// the session's sealing; a malformed one ends the stream.
    pub(super) fn check_header(&mut self, stream: u32) -> Result<FrameHeader, Error> {
        let sealed_session = self.openers.is_some();
        let header = match FrameHeader::decode(&self.headers[stream as usize]) {
            Ok(h) if h.length as usize > self.payload_max => Err(FrameError::Oversized {
                length: h.length,
                limit: self.payload_max as u32,
            }),
            Ok(h) if (h.flags & FLAG_SEALED != 0) != sealed_session => Err(FrameError::Sealing {
                why: if sealed_session {
                    "an unsealed frame in an encrypted session"
                } else {
                    "a sealed frame in a session without encryption"
                },
            }),
            other => other,
        };
        header.map_err(|reason| {
            self.close(stream);
            let stream = self.ids[stream as usize];
            Error::Frame { stream, reason }
        })
    }

    /// Open a sealed frame in place (a frame of an unsealed session is
    /// returned as it is) and give it the checksum of its plaintext.
    pub(super) fn unseal(
        &mut self,
        stream: u32,
        mut header: FrameHeader,
        lease: &mut Lease,
    ) -> Result<FrameHeader, FrameError> {
        let Some((openers, key)) = &mut self.openers else {
            return Ok(header);
        };
        let plen = header.length as usize;
        let buf = lease.as_mut_slice();
        let wire: [u8; FRAME_HEADER_LEN] = buf[HEADER_AT..HEADROOM]
            .try_into()
            .expect("a header's bytes");
        let tag: [u8; TAG_LEN] = buf[HEADROOM + plen..HEADROOM + plen + TAG_LEN]
            .try_into()
            .expect("a tag's bytes");
        openers[stream as usize]
            .open(&wire, &mut buf[HEADROOM..HEADROOM + plen], &tag)
            .map_err(|_| FrameError::Sealing {
                why: "authentication failed (tampered, replayed, reordered or another key)",
            })?;
        if header.flags & FLAG_HOLE != 0 {
            header.checksum = hole_checksum(key, header.file_index, header.offset);
        } else if header.is_sparse() {
            // Its checksum is its whole block's, made once it is unpacked
            // (`session::book::verify`); the seal has authenticated it.
        } else if header.flags & FLAG_UNCHECKED == 0 {
            header.checksum = payload_checksum(
                key,
                header.file_index,
                header.offset,
                &buf[HEADROOM..HEADROOM + plen],
            );
        }
        Ok(header)
    }
}
