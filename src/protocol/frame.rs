//! Data-stream frames: a fixed 32-byte header, then `length` payload bytes.
//!
//! ```text
//! 0      2      4           8          12         16              24             32
//! | magic| flags| file_index| length   | span     | offset        | checksum      |
//! ```
//! `span` (protocol 9) is 0 but in a sparse frame ([`FLAG_SPARSE`]): the
//! bytes of the file it covers, of which its payload carries only the
//! pieces that hold data (see `protocol::sparse`).
//! A file's digest is the sum of one term per 4 KiB piece of its content
//! (xxh3-64 of the piece, mixed with its offset): the same whatever the
//! block size, the file's index in a manifest or the frames it travelled
//! in, and cheap for holes (a zero piece hashes to a constant).
//!
//! A frame's checksum is keyed with the session ([`FrameKey`]): the sum,
//! over its pieces, of SipHash-2-4 of each piece's xxh3 and offset, bound
//! to the file index, offset and length. A payload delivered to the wrong
//! file or offset fails it like a corrupted one, and nobody on the path
//! without the session's key can compute it for bytes they altered (nor
//! mix pieces to forge a digest), short of finding second preimages of
//! xxh3 for each piece: against that, `--encrypt` seals every frame. Every
//! field is checked against limits and the manifest before the payload is
//! read or written anywhere.

use siphasher::sip::SipHasher24;
use xxhash_rust::xxh3::xxh3_64;

pub const FRAME_HEADER_LEN: usize = 32;
const FRAME_MAGIC: u16 = u16::from_le_bytes(*b"UF");
/// Largest payload of one frame.
pub const FRAME_PAYLOAD_MAX: u32 = 64 << 20;

/// The frame flags, declared with the protocol each came with in
/// `protocol::catalogue`.
pub use super::catalogue::{FLAG_END, FLAG_HOLE, FLAG_SEALED, FLAG_SPARSE, FLAG_UNCHECKED};
const FLAGS_KNOWN: u16 = super::catalogue::frame_flags_at(u16::MAX);
/// The header's layout above, as the catalogue's fingerprint reads it.
pub const FRAME_HEADER_LAYOUT: &str = "magic u16 \"UF\" @0, flags u16 @2, file_index u32 @4, \
    length u32 @8, span u32 @12, offset u64 @16, checksum u64 @24";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub flags: u16,
    pub file_index: u32,
    pub length: u32,
    /// The bytes a sparse frame covers (0 in any other frame).
    pub span: u32,
    pub offset: u64,
    pub checksum: u64,
}

/// Why a frame is refused. Each ends the session with this error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    Short {
        have: usize,
    },
    BadMagic,
    UnknownFlags {
        flags: u16,
    },
    Oversized {
        length: u32,
        limit: u32,
    },
    /// Sealed in a session without encryption, unsealed in one with it, or
    /// failing its authentication.
    Sealing {
        why: &'static str,
    },
    UnknownFile {
        file_index: u32,
        files: usize,
    },
    PastEnd {
        file_index: u32,
        end: u64,
        size: u64,
    },
    BadChecksum {
        file_index: u32,
        offset: u64,
    },
    /// A span on a frame that is not sparse, or a sparse frame whose span
    /// is no larger than its payload, too large, or a hole's.
    BadSpan {
        length: u32,
        span: u32,
    },
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Short { have } => {
                write!(f, "short frame header ({have} of {FRAME_HEADER_LEN} bytes)")
            }
            FrameError::BadMagic => write!(f, "not a frame (bad magic)"),
            FrameError::UnknownFlags { flags } => write!(f, "frame with unknown flags {flags:#x}"),
            FrameError::Oversized { length, limit } => {
                write!(f, "frame of {length} bytes (limit {limit})")
            }
            FrameError::Sealing { why } => write!(f, "sealed frame: {why}"),
            FrameError::UnknownFile { file_index, files } => {
                write!(
                    f,
                    "frame for file {file_index}, but the manifest has {files}"
                )
            }
            FrameError::PastEnd {
                file_index,
                end,
                size,
            } => {
                write!(
                    f,
                    "frame for file {file_index} ends at {end}, past its size {size}"
                )
            }
            FrameError::BadChecksum { file_index, offset } => {
                write!(
                    f,
                    "checksum mismatch in file {file_index} at offset {offset}"
                )
            }
            FrameError::BadSpan { length, span } => {
                write!(
                    f,
                    "frame of {length} bytes spanning {span}: not a sparse block"
                )
            }
        }
    }
}

impl std::error::Error for FrameError {}

/// Bytes of one digest piece. Every block size is a multiple of it, so a
/// file's digest does not depend on the block size.
pub const PIECE: usize = 4096;

/// MurmurHash3's 64-bit finalizer: every input bit moves every output bit.
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    k ^= k >> 33;
    k = k.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    k ^ (k >> 33)
}

/// The digest term of a piece whose xxh3-64 is `hash`, at `offset`.
fn piece_term(hash: u64, offset: u64) -> u64 {
    fmix64(hash ^ fmix64(offset.wrapping_add(0x9E37_79B9_7F4A_7C15)))
}

/// The digest terms of `data` at `offset` of its file (`offset` a multiple
/// of [`PIECE`]): what these bytes add to the file's digest. Offsets wrap
/// (a peer's header may name any; such a frame is refused by its file's
/// size, after its checksum).
pub fn content_terms(offset: u64, data: &[u8]) -> u64 {
    data.chunks(PIECE)
        .enumerate()
        .map(|(k, piece)| piece_term(xxh3_64(piece), offset.wrapping_add((k * PIECE) as u64)))
        .fold(0, u64::wrapping_add)
}

/// The key a session's frame checksums are made with (derived from the
/// session key: see `seal::frame_key`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FrameKey {
    pub k0: u64,
    pub k1: u64,
}

impl std::fmt::Debug for FrameKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FrameKey(..)")
    }
}

/// The keyed term of a piece whose xxh3-64 is `hash`, at `offset`.
fn keyed_term(sip: &SipHasher24, hash: u64, offset: u64) -> u64 {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&hash.to_le_bytes());
    b[8..].copy_from_slice(&offset.to_le_bytes());
    sip.hash(&b)
}

/// Both sums of `data` at `offset`, from one pass over its pieces: its
/// digest terms, and the keyed terms its frame checksum is made of.
pub fn frame_terms(key: &FrameKey, offset: u64, data: &[u8]) -> (u64, u64) {
    let sip = SipHasher24::new_with_keys(key.k0, key.k1);
    let (mut terms, mut keyed) = (0u64, 0u64);
    for (k, piece) in data.chunks(PIECE).enumerate() {
        let (h, at) = (xxh3_64(piece), offset.wrapping_add((k * PIECE) as u64));
        terms = terms.wrapping_add(piece_term(h, at));
        keyed = keyed.wrapping_add(keyed_term(&sip, h, at));
    }
    (terms, keyed)
}

/// What a hole stands for in its checksum, where a frame's keyed terms go
/// (no sum of SipHash outputs is known to hit it more than any value).
const HOLE_TERMS: u64 = u64::MAX;

/// The keyed checksum of a hole (a header-only frame) of file
/// `file_index` at `offset`: a relay cannot turn a data frame into one.
pub fn hole_checksum(key: &FrameKey, file_index: u32, offset: u64) -> u64 {
    frame_checksum(key, file_index, offset, 0, HOLE_TERMS)
}

/// The digest terms of `len` zero bytes at `offset` (a hole), without
/// hashing them: the terms of `content_terms` over zeros.
pub fn zero_terms(offset: u64, len: u64) -> u64 {
    static ZERO: [u8; PIECE] = [0; PIECE];
    let whole = xxh3_64(&ZERO);
    let pieces = len / PIECE as u64;
    let mut sum = (0..pieces)
        .map(|k| piece_term(whole, offset.wrapping_add(k * PIECE as u64)))
        .fold(0, u64::wrapping_add);
    let tail = (len % PIECE as u64) as usize;
    if tail > 0 {
        sum = sum.wrapping_add(piece_term(
            xxh3_64(&ZERO[..tail]),
            offset.wrapping_add(pieces * PIECE as u64),
        ));
    }
    sum
}

/// The checksum a frame header carries: the keyed terms of its payload
/// bound, under the key again, to the file, offset and length it is for
/// (so even a frame with no pieces has a checksum only the key makes).
pub fn frame_checksum(
    key: &FrameKey,
    file_index: u32,
    offset: u64,
    length: u32,
    keyed: u64,
) -> u64 {
    let mut b = [0u8; 24];
    b[..8].copy_from_slice(&keyed.to_le_bytes());
    b[8..12].copy_from_slice(&file_index.to_le_bytes());
    b[12..20].copy_from_slice(&offset.to_le_bytes());
    b[20..].copy_from_slice(&length.to_le_bytes());
    SipHasher24::new_with_keys(key.k0, key.k1).hash(&b)
}

/// The checksum of a payload at `offset` of file `file_index` under `key`.
pub fn payload_checksum(key: &FrameKey, file_index: u32, offset: u64, payload: &[u8]) -> u64 {
    let (_, keyed) = frame_terms(key, offset, payload);
    frame_checksum(key, file_index, offset, payload.len() as u32, keyed)
}

/// Fold the terms of some blocks into a whole-file digest. The fold is a
/// sum, so blocks arriving on several streams in any order, or read in
/// pieces of any size, give the same digest on both sides.
pub fn digest_add(digest: u64, terms: u64) -> u64 {
    digest.wrapping_add(terms)
}

impl FrameHeader {
    /// A header for a hole block at `offset` of file `file_index`.
    pub fn hole(key: &FrameKey, file_index: u32, offset: u64) -> Self {
        FrameHeader {
            flags: FLAG_HOLE,
            file_index,
            length: 0,
            span: 0,
            offset,
            checksum: hole_checksum(key, file_index, offset),
        }
    }

    /// Check a hole's header against its keyed checksum.
    pub fn check_hole(&self, key: &FrameKey) -> Result<(), FrameError> {
        if self.length != 0 || self.checksum != hole_checksum(key, self.file_index, self.offset) {
            return Err(FrameError::BadChecksum {
                file_index: self.file_index,
                offset: self.offset,
            });
        }
        Ok(())
    }

    pub fn is_hole(&self) -> bool {
        self.flags & FLAG_HOLE != 0
    }

    pub fn is_sparse(&self) -> bool {
        self.flags & FLAG_SPARSE != 0
    }

    /// This plain block's header as a sparse frame whose payload (its data
    /// pieces and map, `protocol::sparse::pack`) is `length` bytes: the
    /// checksum stays the block's.
    pub fn packed(self, length: usize) -> FrameHeader {
        FrameHeader {
            flags: self.flags | FLAG_SPARSE,
            length: length as u32,
            span: self.length,
            ..self
        }
    }

    /// A header for `payload` at `offset` of file `file_index`, its
    /// checksum made with `key`.
    pub fn for_payload(
        key: &FrameKey,
        file_index: u32,
        offset: u64,
        payload: &[u8],
        flags: u16,
    ) -> Self {
        assert!(payload.len() <= FRAME_PAYLOAD_MAX as usize);
        FrameHeader {
            flags,
            file_index,
            length: payload.len() as u32,
            span: 0,
            offset,
            checksum: payload_checksum(key, file_index, offset, payload),
        }
    }

    pub fn encode(&self) -> [u8; FRAME_HEADER_LEN] {
        let mut b = [0u8; FRAME_HEADER_LEN];
        b[0..2].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
        b[2..4].copy_from_slice(&self.flags.to_le_bytes());
        b[4..8].copy_from_slice(&self.file_index.to_le_bytes());
        b[8..12].copy_from_slice(&self.length.to_le_bytes());
        b[12..16].copy_from_slice(&self.span.to_le_bytes());
        b[16..24].copy_from_slice(&self.offset.to_le_bytes());
        b[24..32].copy_from_slice(&self.checksum.to_le_bytes());
        b
    }

    /// Decode a header and check it against the limits (not yet the manifest).
    pub fn decode(b: &[u8]) -> Result<Self, FrameError> {
        if b.len() < FRAME_HEADER_LEN {
            return Err(FrameError::Short { have: b.len() });
        }
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if u16_at(0) != FRAME_MAGIC {
            return Err(FrameError::BadMagic);
        }
        let h = FrameHeader {
            flags: u16_at(2),
            file_index: u32_at(4),
            length: u32_at(8),
            span: u32_at(12),
            offset: u64_at(16),
            checksum: u64_at(24),
        };
        if h.flags & !FLAGS_KNOWN != 0 {
            return Err(FrameError::UnknownFlags { flags: h.flags });
        }
        if h.length > FRAME_PAYLOAD_MAX {
            return Err(FrameError::Oversized {
                length: h.length,
                limit: FRAME_PAYLOAD_MAX,
            });
        }
        let span_ok = match h.is_sparse() {
            true => !h.is_hole() && h.length < h.span && h.span <= FRAME_PAYLOAD_MAX,
            false => h.span == 0,
        };
        if !span_ok {
            return Err(FrameError::BadSpan {
                length: h.length,
                span: h.span,
            });
        }
        Ok(h)
    }

    /// Check the header against the manifest's file sizes, before reading
    /// its payload anywhere.
    pub fn check_against(&self, sizes: &[u64]) -> Result<(), FrameError> {
        let Some(&size) = sizes.get(self.file_index as usize) else {
            return Err(FrameError::UnknownFile {
                file_index: self.file_index,
                files: sizes.len(),
            });
        };
        match self.offset.checked_add(u64::from(self.length)) {
            Some(end) if end <= size => {}
            end => {
                return Err(FrameError::PastEnd {
                    file_index: self.file_index,
                    end: end.unwrap_or(u64::MAX),
                    size,
                })
            }
        }
        Ok(())
    }

    /// Check the received payload against the header's checksum made with
    /// `key`; returns the payload's digest terms (what it adds to its
    /// file's digest).
    pub fn check_payload(&self, key: &FrameKey, payload: &[u8]) -> Result<u64, FrameError> {
        let (terms, keyed) = frame_terms(key, self.offset, payload);
        if payload.len() != self.length as usize
            || frame_checksum(key, self.file_index, self.offset, self.length, keyed)
                != self.checksum
        {
            return Err(FrameError::BadChecksum {
                file_index: self.file_index,
                offset: self.offset,
            });
        }
        Ok(terms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: FrameKey = FrameKey { k0: 7, k1: 11 };

    fn frame(file: u32, offset: u64, payload: &[u8]) -> [u8; FRAME_HEADER_LEN] {
        FrameHeader::for_payload(&KEY, file, offset, payload, 0).encode()
    }

    #[test]
    fn round_trip() {
        let payload = vec![5u8; 4096];
        let h = FrameHeader::decode(&frame(2, 8192, &payload)).unwrap();
        assert_eq!((h.file_index, h.offset, h.length), (2, 8192, 4096));
        assert!(h.check_against(&[0, 0, 12288]).is_ok());
        assert!(h.check_payload(&KEY, &payload).is_ok());
    }

    #[test]
    fn every_malformed_class_is_refused() {
        let payload = vec![5u8; 4096];
        let good = frame(1, 0, &payload);
        // Short.
        assert_eq!(
            FrameHeader::decode(&good[..31]),
            Err(FrameError::Short { have: 31 })
        );
        // Not a frame.
        let mut b = good;
        b[0] = b'X';
        assert_eq!(FrameHeader::decode(&b), Err(FrameError::BadMagic));
        // Unknown flags.
        let mut b = good;
        b[2] = 0x80;
        assert!(matches!(
            FrameHeader::decode(&b),
            Err(FrameError::UnknownFlags { .. })
        ));
        // Oversized.
        let mut b = good;
        b[8..12].copy_from_slice(&(FRAME_PAYLOAD_MAX + 1).to_le_bytes());
        assert!(matches!(
            FrameHeader::decode(&b),
            Err(FrameError::Oversized { .. })
        ));
        // Unknown file index.
        let h = FrameHeader::decode(&frame(7, 0, &payload)).unwrap();
        assert!(matches!(
            h.check_against(&[4096]),
            Err(FrameError::UnknownFile { .. })
        ));
        // Offset past the end, including an overflowing one.
        let h = FrameHeader::decode(&frame(0, 4096, &payload)).unwrap();
        assert!(matches!(
            h.check_against(&[4096]),
            Err(FrameError::PastEnd { .. })
        ));
        let h = FrameHeader::decode(&frame(0, u64::MAX - 10, &payload)).unwrap();
        assert!(matches!(
            h.check_against(&[u64::MAX]),
            Err(FrameError::PastEnd { .. })
        ));
        // Bad checksum: flipped payload, or a payload for another offset.
        let h = FrameHeader::decode(&good).unwrap();
        let mut p = payload.clone();
        p[100] ^= 1;
        assert!(matches!(
            h.check_payload(&KEY, &p),
            Err(FrameError::BadChecksum { .. })
        ));
        let moved = FrameHeader { offset: 4096, ..h };
        assert!(moved.check_payload(&KEY, &payload).is_err());
        let other_file = FrameHeader { file_index: 2, ..h };
        assert!(other_file.check_payload(&KEY, &payload).is_err());
    }

    #[test]
    fn digests_do_not_depend_on_block_size_index_or_holes() {
        let data: Vec<u8> = (0..5 * PIECE + 123).map(|i| (i * 7 % 251) as u8).collect();
        let whole = content_terms(0, &data);
        // Read in blocks of one or three pieces: the same digest.
        for block in [PIECE, 3 * PIECE] {
            let d = data.chunks(block).enumerate().fold(0, |d, (k, c)| {
                digest_add(d, content_terms((k * block) as u64, c))
            });
            assert_eq!(d, whole, "block {block}");
        }
        // A hole's terms are those of its zeros, for whole and short pieces.
        for len in [0, 1, PIECE - 1, PIECE, 2 * PIECE + 5] {
            let zeros = vec![0u8; len];
            assert_eq!(zero_terms(8192, len as u64), content_terms(8192, &zeros));
        }
        // The frame checksum binds the file index; the terms do not.
        let h1 = FrameHeader::for_payload(&KEY, 1, 0, &data, 0);
        let h2 = FrameHeader::for_payload(&KEY, 2, 0, &data, 0);
        assert_ne!(h1.checksum, h2.checksum);
        assert_eq!(h1.check_payload(&KEY, &data), Ok(whole));
        assert_eq!(h2.check_payload(&KEY, &data), Ok(whole));
        // Swapping two pieces changes the digest.
        let mut swapped = data.clone();
        let (a, b) = swapped.split_at_mut(PIECE);
        a.swap_with_slice(&mut b[..PIECE]);
        assert_ne!(content_terms(0, &swapped), whole);
    }

    #[test]
    fn digest_is_order_independent() {
        let a = content_terms(0, b"aaaa");
        let b = content_terms(4, b"bbbb");
        assert_eq!(
            digest_add(digest_add(0, a), b),
            digest_add(digest_add(0, b), a)
        );
        assert_ne!(digest_add(0, a), digest_add(0, b));
    }

    #[test]
    fn checksums_need_the_session_key() {
        let data: Vec<u8> = (0..3 * PIECE).map(|i| (i * 13 % 251) as u8).collect();
        let other = FrameKey { k0: 7, k1: 12 };
        let h = FrameHeader::for_payload(&KEY, 0, 0, &data, 0);
        assert!(h.check_payload(&KEY, &data).is_ok());
        assert!(h.check_payload(&other, &data).is_err());
        // The keyed sum is not the digest terms: knowing what a piece adds
        // to a digest does not tell what it adds to a checksum.
        let (terms, keyed) = frame_terms(&KEY, 0, &data);
        assert_eq!(terms, content_terms(0, &data));
        assert_ne!(keyed, terms);
        // Swapping pieces (same multiset of piece hashes, other offsets) or
        // turning the frame into a hole fails the check.
        let mut swapped = data.clone();
        let (a, b) = swapped.split_at_mut(PIECE);
        a.swap_with_slice(&mut b[..PIECE]);
        assert!(h.check_payload(&KEY, &swapped).is_err());
        let as_hole = FrameHeader {
            flags: FLAG_HOLE,
            length: 0,
            ..h
        };
        assert!(as_hole.check_hole(&KEY).is_err());
        let hole = FrameHeader::hole(&KEY, 0, 0);
        assert_eq!(hole.check_hole(&KEY), Ok(()));
        assert!(hole.check_hole(&other).is_err());
        assert!(FrameHeader {
            offset: 4096,
            ..hole
        }
        .check_hole(&KEY)
        .is_err());
    }
}
