//! The frame body: a data frame's header decoded, checked against a
//! manifest's file sizes and its payload, and rebuilt as an honest sender
//! would write it; a sparse frame's payload unpacked and packed again.

use crate::protocol::frame::{
    content_terms, digest_add, payload_checksum, FrameError, FrameHeader, FrameKey, FLAG_END,
    FLAG_HOLE, FLAG_SEALED, FLAG_SPARSE, FLAG_UNCHECKED, FRAME_HEADER_LEN, FRAME_PAYLOAD_MAX,
};

/// The frame checksum key every frame input is checked under, and another
/// session's.
pub(super) const FUZZ_KEY: FrameKey = FrameKey {
    k0: 0x0123_4567_89ab_cdef,
    k1: 0xfedc_ba98_7654_3210,
};

const OTHER_FRAME_KEY: FrameKey = FrameKey { k0: 1, k1: 2 };

/// Most file sizes a frame input carries after its header.
const FRAME_SIZES_MAX: usize = 4;

/// `data` is a 32-byte frame header, then one byte `n`, `n % 5` little-endian
/// u64 file sizes (the manifest the header is checked against), then the
/// payload.
///
/// Decoding agrees with the byte layout and its limits, a decoded header
/// re-encodes to the same bytes (the reserved word zeroed), the manifest
/// and payload checks agree with their definitions, and the header a sender
/// would write for this payload passes every check.
pub fn frame(data: &[u8]) {
    let decoded = FrameHeader::decode(data);
    let Some(head) = data.get(..FRAME_HEADER_LEN) else {
        assert_eq!(decoded, Err(FrameError::Short { have: data.len() }));
        return;
    };
    if head[..2] != *b"UF" {
        assert_eq!(decoded, Err(FrameError::BadMagic));
        return;
    }
    assert_eq!(decoded, expected_header(head));
    let Ok(h) = decoded else { return };

    let mut canonical = [0u8; FRAME_HEADER_LEN];
    canonical.copy_from_slice(head);
    assert_eq!(h.encode(), canonical, "re-encoded header differs");
    assert_eq!(FrameHeader::decode(&h.encode()), Ok(h));

    let (sizes, payload) = frame_sizes_and_payload(&data[FRAME_HEADER_LEN..]);
    checked_against_sizes(h, &sizes);
    checked_payload(h, payload);
    honest_headers(h, payload);
    // Blocks fold into a file digest in any order.
    let block = payload_checksum(&FUZZ_KEY, h.file_index, h.offset, payload);
    assert_eq!(
        digest_add(digest_add(0, h.checksum), block),
        digest_add(digest_add(0, block), h.checksum)
    );
    if h.is_sparse() && payload.len() >= h.length as usize {
        sparse_payload(h, &payload[..h.length as usize]);
    }
}

/// What a header with the magic (`head`) must decode to, read from its
/// byte layout and the limits: its fields, or the first rule it breaks.
fn expected_header(head: &[u8]) -> Result<FrameHeader, FrameError> {
    let le = |at: usize, n: usize| {
        head[at..at + n]
            .iter()
            .rev()
            .fold(0u64, |v, &b| v << 8 | u64::from(b))
    };
    let fields = FrameHeader {
        flags: le(2, 2) as u16,
        file_index: le(4, 4) as u32,
        length: le(8, 4) as u32,
        span: le(12, 4) as u32,
        offset: le(16, 8),
        checksum: le(24, 8),
    };
    let known = FLAG_END | FLAG_HOLE | FLAG_UNCHECKED | FLAG_SEALED | FLAG_SPARSE;
    let sparse = fields.flags & FLAG_SPARSE != 0;
    let span_ok = match sparse {
        true => {
            fields.flags & FLAG_HOLE == 0
                && fields.length < fields.span
                && fields.span <= FRAME_PAYLOAD_MAX
        }
        false => fields.span == 0,
    };
    if fields.flags & !known != 0 {
        Err(FrameError::UnknownFlags {
            flags: fields.flags,
        })
    } else if fields.length > FRAME_PAYLOAD_MAX {
        Err(FrameError::Oversized {
            length: fields.length,
            limit: FRAME_PAYLOAD_MAX,
        })
    } else if !span_ok {
        Err(FrameError::BadSpan {
            length: fields.length,
            span: fields.span,
        })
    } else {
        Ok(fields)
    }
}

/// The manifest check agrees with its definition: the frame's bytes end
/// within its file's size, and its file is one of `sizes`.
fn checked_against_sizes(h: FrameHeader, sizes: &[u64]) {
    let end = u128::from(h.offset) + u128::from(h.length);
    let size = sizes.get(h.file_index as usize).copied();
    match h.check_against(sizes) {
        Ok(()) => assert!(
            size.is_some_and(|s| end <= u128::from(s)),
            "{h:?} {sizes:?}"
        ),
        Err(FrameError::UnknownFile { file_index, files }) => {
            assert!(size.is_none());
            assert_eq!((file_index, files), (h.file_index, sizes.len()));
        }
        Err(FrameError::PastEnd {
            file_index,
            end: end_seen,
            size: size_seen,
        }) => {
            assert!(size.is_some_and(|s| end > u128::from(s)), "{h:?} {sizes:?}");
            assert_eq!((file_index, Some(size_seen)), (h.file_index, size));
            assert_eq!(u128::from(end_seen), end.min(u128::from(u64::MAX)));
        }
        Err(e) => panic!("check_against gave {e:?}"),
    }
}

/// The payload check agrees with its definition: the payload is whole
/// and has the header's checksum.
fn checked_payload(h: FrameHeader, payload: &[u8]) {
    let intact = payload.len() == h.length as usize
        && payload_checksum(&FUZZ_KEY, h.file_index, h.offset, payload) == h.checksum;
    match h.check_payload(&FUZZ_KEY, payload) {
        Ok(terms) => {
            assert!(intact);
            assert_eq!(terms, content_terms(h.offset, payload));
        }
        Err(FrameError::BadChecksum { file_index, offset }) => {
            assert!(!intact);
            assert_eq!((file_index, offset), (h.file_index, h.offset));
        }
        Err(e) => panic!("check_payload gave {e:?}"),
    }
}

/// The headers an honest sender writes for this payload, and for a hole
/// at this place, pass every check, and only under their session's key.
fn honest_headers(h: FrameHeader, payload: &[u8]) {
    if payload.len() <= FRAME_PAYLOAD_MAX as usize {
        let file_index = h.file_index % FRAME_SIZES_MAX as u32;
        let flags = h.flags & !FLAG_SPARSE;
        let honest = FrameHeader::for_payload(&FUZZ_KEY, file_index, h.offset, payload, flags);
        assert_eq!(FrameHeader::decode(&honest.encode()), Ok(honest));
        assert_eq!(
            honest.check_payload(&FUZZ_KEY, payload),
            Ok(content_terms(h.offset, payload))
        );
        // Under another session's key the same header is refused.
        assert!(honest.check_payload(&OTHER_FRAME_KEY, payload).is_err());
        if let Some(end) = h.offset.checked_add(payload.len() as u64) {
            assert_eq!(honest.check_against(&[end; FRAME_SIZES_MAX]), Ok(()));
        }
    }
    let hole = FrameHeader::hole(&FUZZ_KEY, h.file_index, h.offset);
    assert!(hole.is_hole());
    assert_eq!(FrameHeader::decode(&hole.encode()), Ok(hole));
    assert_eq!(hole.check_hole(&FUZZ_KEY), Ok(()));
    assert!(hole.check_hole(&OTHER_FRAME_KEY).is_err());
}

/// A sparse frame's payload unpacks only when its map and pieces add up;
/// then the block holds the pieces at their places and zeros between, and
/// packing it again gives back the payload that came.
fn sparse_payload(h: FrameHeader, payload: &[u8]) {
    use crate::protocol::sparse::{pack, unpack};
    let span = h.span as usize;
    // What a receiver's buffer holds: the block (small ones only here).
    if span > 1 << 20 {
        return;
    }
    let mut buf = vec![0xA5u8; span.div_ceil(4096) * 4096];
    buf[..payload.len()].copy_from_slice(payload);
    let Ok(map) = unpack(&mut buf, span, payload.len()) else {
        return;
    };
    for r in map.runs().filter(|r| !r.present) {
        assert!(buf[r.start..r.end].iter().all(|&b| b == 0), "{r:?}");
    }
    let mut again = buf.clone();
    let len = pack(&mut again, &map);
    assert_eq!(&again[..len], payload);
}

fn frame_sizes_and_payload(rest: &[u8]) -> (Vec<u64>, &[u8]) {
    let Some((&n, mut rest)) = rest.split_first() else {
        return (Vec::new(), rest);
    };
    let mut sizes = Vec::with_capacity(FRAME_SIZES_MAX);
    for _ in 0..usize::from(n) % (FRAME_SIZES_MAX + 1) {
        let Some((size, tail)) = rest.split_first_chunk::<8>() else {
            break;
        };
        sizes.push(u64::from_le_bytes(*size));
        rest = tail;
    }
    (sizes, rest)
}
