//! Sparse frames (protocol 9, [`FLAG_SPARSE`](super::frame::FLAG_SPARSE)):
//! a block of which only some 4 KiB pieces hold data travels as those
//! pieces, in order, then a map with one bit per piece of the block's
//! `span` (bit `k % 8` of byte `k / 8`, 1 for a piece that came). The
//! pieces that did not come are zeros the receiver leaves unwritten, so a
//! hole that shares a block with data stays a hole. The frame's checksum
//! is the whole block's, absent pieces read as zeros: a receiver that
//! unpacks the payload checks exactly the bytes a plain frame would bring.

use super::frame::{FRAME_PAYLOAD_MAX, PIECE};

/// Most bytes of a map: one bit per piece of the largest frame.
pub const MAP_MAX: usize = (FRAME_PAYLOAD_MAX as usize / PIECE).div_ceil(8);

/// Pieces of a block of `span` bytes (the last may be short).
pub fn pieces(span: usize) -> usize {
    span.div_ceil(PIECE)
}

/// Bytes of the map of a block of `span` bytes.
pub fn map_len(span: usize) -> usize {
    pieces(span).div_ceil(8)
}

/// Which pieces of a block of `span` bytes hold data.
#[derive(Clone, PartialEq, Eq)]
pub struct Map {
    bits: [u8; MAP_MAX],
    span: usize,
}

impl std::fmt::Debug for Map {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Map({} of {} bytes present)", self.present(), self.span)
    }
}

/// A run of pieces that all came or all did not: bytes `start..end` of
/// the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub present: bool,
    pub start: usize,
    pub end: usize,
}

impl Map {
    /// A block of `span` bytes (at most a frame's) with no piece present.
    pub fn new(span: usize) -> Map {
        assert!(span <= FRAME_PAYLOAD_MAX as usize);
        Map {
            bits: [0; MAP_MAX],
            span,
        }
    }

    pub fn span(&self) -> usize {
        self.span
    }

    /// Mark piece `k` present.
    pub fn set(&mut self, k: usize) {
        debug_assert!(k < pieces(self.span));
        self.bits[k / 8] |= 1 << (k % 8);
    }

    pub fn has(&self, k: usize) -> bool {
        self.bits[k / 8] & (1 << (k % 8)) != 0
    }

    /// Bytes of piece `k`.
    fn piece_len(&self, k: usize) -> usize {
        (self.span - k * PIECE).min(PIECE)
    }

    /// Bytes of the pieces present.
    pub fn present(&self) -> usize {
        let n = pieces(self.span);
        let ones: u32 = self.bytes().iter().map(|b| b.count_ones()).sum();
        // Every piece is whole but a short last one.
        let short = match n > 0 && self.has(n - 1) {
            true => PIECE - self.piece_len(n - 1),
            false => 0,
        };
        ones as usize * PIECE - short
    }

    /// The map as it travels.
    pub fn bytes(&self) -> &[u8] {
        &self.bits[..map_len(self.span)]
    }

    /// The payload a sparse frame of this map carries: the pieces present
    /// and the map.
    pub fn packed_len(&self) -> usize {
        self.present() + map_len(self.span)
    }

    /// A map read off the wire; `None` when it marks pieces past `span`.
    pub fn from_bytes(span: usize, bytes: &[u8]) -> Option<Map> {
        let mut m = Map::new(span);
        if bytes.len() != map_len(span) {
            return None;
        }
        m.bits[..bytes.len()].copy_from_slice(bytes);
        let n = pieces(span);
        let past = (n..bytes.len() * 8).any(|k| m.has(k));
        (!past).then_some(m)
    }

    /// The block as runs of present and absent pieces, in order.
    pub fn runs(&self) -> impl Iterator<Item = Run> + '_ {
        let n = pieces(self.span);
        let mut k = 0;
        std::iter::from_fn(move || {
            if k >= n {
                return None;
            }
            let (first, present) = (k, self.has(k));
            while k < n && self.has(k) == present {
                k += 1;
            }
            Some(Run {
                present,
                start: first * PIECE,
                end: (k * PIECE).min(self.span),
            })
        })
    }
}

/// Pack the block in `buf[..span]` as `map` says: the present pieces
/// moved to the front in order, the map after them. Returns the payload's
/// length (`map.packed_len()`); `buf` must hold it.
pub fn pack(buf: &mut [u8], map: &Map) -> usize {
    let mut to = 0;
    for k in (0..pieces(map.span)).filter(|&k| map.has(k)) {
        let (from, len) = (k * PIECE, map.piece_len(k));
        buf.copy_within(from..from + len, to);
        to += len;
    }
    let bytes = map.bytes();
    buf[to..to + bytes.len()].copy_from_slice(bytes);
    to + bytes.len()
}

/// Unpack a sparse payload of `length` bytes, at the start of `buf`, into
/// the whole block of `span` bytes, in place: every piece at its offset,
/// the absent ones zeros. Returns the map. Err: why the payload is not a
/// sparse block of that span (`buf` too small, a map marking pieces past
/// the span, pieces that do not add up to what came).
pub fn unpack(buf: &mut [u8], span: usize, length: usize) -> Result<Map, &'static str> {
    let ml = map_len(span);
    if buf.len() < span || span > FRAME_PAYLOAD_MAX as usize {
        return Err("the block is larger than a frame buffer");
    }
    if length < ml || length > span {
        return Err("the payload is shorter than its map or longer than its block");
    }
    let map = Map::from_bytes(span, &buf[length - ml..length])
        .ok_or("the map marks pieces past the block's end")?;
    if map.present() != length - ml {
        return Err("the pieces present do not add up to the payload");
    }
    // From the last piece back: a piece's place is never before where it
    // lies packed, and an absent piece's zeros land past every packed
    // piece not yet moved.
    let mut end = length - ml;
    for k in (0..pieces(span)).rev() {
        let (at, len) = (k * PIECE, map.piece_len(k));
        if map.has(k) {
            buf.copy_within(end - len..end, at);
            end -= len;
        } else {
            buf[at..at + len].fill(0);
        }
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(span: usize) -> Vec<u8> {
        (0..span).map(|i| (i % 251) as u8 + 1).collect()
    }

    /// A block with the pieces `map` leaves out zeroed, as a source whose
    /// holes read as zeros has it.
    fn as_source(span: usize, map: &Map) -> Vec<u8> {
        let mut b = block(span);
        for r in map.runs().filter(|r| !r.present) {
            b[r.start..r.end].fill(0);
        }
        b
    }

    #[test]
    fn a_packed_block_unpacks_to_itself() {
        for (span, present) in [
            (4 << 20, vec![0usize, 5, 6, 1023]),
            (1 << 20, vec![255]),
            (10_000, vec![0, 2]),
            (10_000, vec![1]),
            (4096 * 3 + 1, vec![3]),
        ] {
            let mut map = Map::new(span);
            present.iter().for_each(|&k| map.set(k));
            let want = as_source(span, &map);
            let mut buf = want.clone();
            let len = pack(&mut buf, &map);
            assert_eq!(len, map.packed_len());
            assert!(len < span, "{span} {present:?}");
            buf[len..].fill(0xEE);
            let got = unpack(&mut buf, span, len).unwrap();
            assert_eq!(got, map);
            assert_eq!(buf, want, "{span} {present:?}");
        }
    }

    #[test]
    fn runs_cover_the_block_in_order() {
        let mut map = Map::new(5 * PIECE + 10);
        [1, 2, 5].iter().for_each(|&k| map.set(k));
        let runs: Vec<_> = map.runs().map(|r| (r.present, r.start, r.end)).collect();
        assert_eq!(
            runs,
            [
                (false, 0, PIECE),
                (true, PIECE, 3 * PIECE),
                (false, 3 * PIECE, 5 * PIECE),
                (true, 5 * PIECE, 5 * PIECE + 10)
            ]
        );
        assert_eq!(map.present(), 2 * PIECE + 10);
    }

    #[test]
    fn payloads_that_do_not_add_up_are_refused() {
        let span = 8 * PIECE;
        let mut map = Map::new(span);
        map.set(3);
        let mut buf = block(span);
        let len = pack(&mut buf, &map);
        // A piece short, a piece more, a map marking past the end, a
        // block larger than the buffer.
        assert!(unpack(&mut buf.clone(), span, len - 1).is_err());
        assert!(unpack(&mut buf.clone(), span, len + 1).is_err());
        let mut past = buf.clone();
        past[len - 1] = 0xFF;
        assert!(unpack(&mut past, span - 2 * PIECE, len).is_err());
        assert!(unpack(&mut buf[..span - 1].to_vec(), span, len).is_err());
        assert!(unpack(&mut buf, span, len).is_ok());
    }
}
