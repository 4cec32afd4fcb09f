//! Where a source file holds data, learned once per file from
//! `SEEK_DATA`/`SEEK_HOLE`, and which 4 KiB pieces of each block its frame
//! carries: a block wholly in a hole goes as a hole frame (no payload), a
//! block that shares data and holes as a sparse frame (its data pieces and
//! a map, `protocol::sparse`), so a hole never crosses as zeros. With
//! `--sparse` (`zeros`), runs of zeros inside data are left out the same
//! way, as `cp --sparse=always` leaves them.

use std::fs::File;

use crate::datapath::sys;
use crate::protocol::frame::PIECE;
use crate::protocol::sparse::Map;

/// Most extents remembered per file; past them the rest counts as data
/// (sent as written: correct, only less sparse).
const EXTENTS_MAX: usize = 1 << 16;

/// The data extents of part of a file: sorted, disjoint byte ranges,
/// rounded out to whole pieces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Extents {
    data: Vec<(u64, u64)>,
}

impl Extents {
    /// The data of `file` between `from` and `to`. A filesystem that cannot
    /// tell holes says it is all data.
    pub(crate) fn of(file: &File, from: u64, to: u64) -> Extents {
        let mut data = Vec::new();
        let mut at = from;
        while at < to {
            if data.len() == EXTENTS_MAX {
                data.push((at, to));
                break;
            }
            let start = match sys::seek_data(file, at) {
                Ok(Some(s)) if s < to => s,
                Ok(_) => break,
                Err(_) => {
                    data.push((at, to));
                    break;
                }
            };
            let end = match sys::seek_hole(file, start) {
                Ok(Some(e)) => e.min(to),
                _ => to,
            };
            let piece = PIECE as u64;
            let (lo, hi) = (start / piece * piece, end.div_ceil(piece) * piece);
            match data.last_mut() {
                Some((_, last)) if *last >= lo => *last = (*last).max(hi),
                _ => data.push((lo, hi)),
            }
            at = end.max(start + 1);
        }
        Extents { data }
    }

    /// Bytes of data (whole pieces, as frames carry them) in
    /// `[from, to)`.
    pub(crate) fn data_bytes(&self, from: u64, to: u64) -> u64 {
        self.data
            .iter()
            .map(|&(start, end)| end.min(to).saturating_sub(start.max(from)))
            .sum()
    }

    /// The first extent ending after `offset`.
    fn after(&self, offset: u64) -> Option<(u64, u64)> {
        let i = self.data.partition_point(|&(_, end)| end <= offset);
        self.data.get(i).copied()
    }

    /// Whether `[offset, offset + len)` holds no data.
    pub(crate) fn is_hole(&self, offset: u64, len: u64) -> bool {
        self.after(offset)
            .is_none_or(|(start, _)| start >= offset + len)
    }

    /// Whether `[offset, offset + len)` is data from end to end.
    fn all_data(&self, offset: u64, len: u64) -> bool {
        self.after(offset)
            .is_some_and(|(start, end)| start <= offset && end >= offset + len)
    }
}

/// Bytes of `file` (`size` bytes long) its frames carry as data: all of
/// them unless it holds holes (fewer blocks than its size needs), then its
/// data extents in whole pieces, as the frames carry them.
pub(crate) fn data_of(file: &File, size: u64) -> u64 {
    use std::os::unix::fs::MetadataExt;
    match file.metadata() {
        Ok(m) if m.blocks() * 512 < size => Extents::of(file, 0, size).data_bytes(0, size),
        _ => size,
    }
}

/// Whether every byte of `piece` is zero.
fn is_zeros(piece: &[u8]) -> bool {
    let (words, rest) = piece.split_at(piece.len() / 8 * 8);
    words
        .chunks_exact(8)
        .all(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")) == 0)
        && rest.iter().all(|&b| b == 0)
}

/// Which pieces of the block read into `data` (at `offset` of its file)
/// its frame carries, when it should not carry them all: those outside
/// the file's holes (`extents`, for a file that has any) and, with
/// `zeros`, any that are not all zeros. A piece is left out only when its
/// bytes in `data` are zeros, so the block the receiver rebuilds is the
/// block read. `None`: a plain frame (every piece, or a map that would
/// save nothing); a map with no piece: a hole frame.
pub(crate) fn map_of(
    offset: u64,
    data: &[u8],
    extents: Option<&Extents>,
    zeros: bool,
) -> Option<Map> {
    let len = data.len() as u64;
    let in_data = |at: u64, n: u64| extents.is_none_or(|e| !e.is_hole(at, n));
    if !zeros && extents.is_none_or(|e| e.all_data(offset, len)) {
        return None;
    }
    let mut map = Map::new(data.len());
    for (k, piece) in data.chunks(PIECE).enumerate() {
        let at = offset + (k * PIECE) as u64;
        let absent = (zeros || !in_data(at, piece.len() as u64)) && is_zeros(piece);
        if !absent {
            map.set(k);
        }
    }
    let none_absent = map.present() == data.len();
    ((!none_absent && map.packed_len() < data.len()) || map.present() == 0).then_some(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn sparse_file(dir: &std::path::Path) -> File {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("s"))
            .unwrap();
        f.set_len(64 << 20).unwrap();
        // Islands: 4 KiB at 1 MiB + 100 KiB (unaligned: two pieces), 1 MiB
        // at 10 MiB.
        f.write_all_at(&[7u8; 4096], (1 << 20) + 100_000).unwrap();
        f.write_all_at(&vec![9u8; 1 << 20], 10 << 20).unwrap();
        f
    }

    #[test]
    fn a_files_extents_are_its_islands_in_whole_pieces() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let f = sparse_file(dir.path());
        let e = Extents::of(&f, 0, 64 << 20);
        if e.data == [(0, 64 << 20)] {
            eprintln!("skipped: this filesystem does not report holes");
            return;
        }
        assert!(e.is_hole(0, 1 << 20));
        assert!(!e.is_hole(1 << 20, 1 << 20));
        assert!(e.all_data(10 << 20, 1 << 20));
        assert!(!e.all_data(10 << 20, 2 << 20));
        assert!(e.is_hole(12 << 20, 52 << 20));
        // The 4 KiB island straddles two pieces: both go.
        let block = 4 << 20;
        let mut data = vec![0u8; block];
        f.read_exact_at(&mut data, 0).unwrap();
        let map = map_of(0, &data, Some(&e), false).unwrap();
        assert_eq!(map.present(), 2 * PIECE);
        // A block all hole is a hole; one all data is plain.
        let zeros = vec![0u8; block];
        assert_eq!(
            map_of(20 << 20, &zeros, Some(&e), false).unwrap().present(),
            0
        );
        let mut island = vec![0u8; 1 << 20];
        f.read_exact_at(&mut island, 10 << 20).unwrap();
        assert_eq!(map_of(10 << 20, &island, Some(&e), false), None);
    }

    #[test]
    fn zeros_inside_data_are_left_out_only_when_asked() {
        let mut data = vec![0u8; 16 * PIECE];
        data[5 * PIECE + 17] = 1;
        assert_eq!(map_of(0, &data, None, false), None);
        let map = map_of(0, &data, None, true).unwrap();
        assert_eq!(map.present(), PIECE);
        assert!(map.has(5));
        // Data in what the extents call a hole (written since they were
        // learned) still goes.
        let e = Extents::default();
        let map = map_of(0, &data, Some(&e), false).unwrap();
        assert!(map.has(5));
    }
}
