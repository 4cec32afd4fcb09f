//! The receipts a receiver gives for a split file's pieces: MACs, with
//! the receivers' secret, of each piece's journal, and their digest, which
//! a committed file's acknowledgement names and `urmove report` holds to
//! the shards' reports.

use crate::protocol::manifest::Piece;

/// The receipt a receiver gives for the journal `j` of `piece`: a MAC,
/// with the receivers' secret (which every receiver sharing the root
/// holds, and no sender), of the file's identity, the piece, the part (its
/// inode and tag), the digest and the journal's generation. A session that writes the piece
/// again journals it with a generation of its own, so its receipt differs
/// even where its bytes were made to have the same (unkeyed) digest.
pub(crate) fn receipt(
    secret: &crate::session::link::secret::Secret,
    j: &super::journal::Journal,
    piece: Piece,
) -> u64 {
    let mut w = crate::protocol::wire::Writer::default();
    w.u64(j.id.size)
        .i64(j.id.mtime_s)
        .u32(j.id.mtime_ns)
        .u64(j.id.block)
        .u32(piece.index)
        .u32(piece.count)
        .u64(j.part.dev)
        .u64(j.part.ino)
        .u64(j.digest)
        .bytes(&j.generation)
        .bytes(&j.tag);
    let mac = secret.mac(&[b"urmove piece receipt", &w.buf]);
    u64::from_le_bytes(mac[..8].try_into().expect("8 bytes"))
}

/// The digest of a split file's pieces' receipts, in piece order: what a
/// committed file's acknowledgement names, and `urmove report` finds
/// again from the shards' receipts.
pub fn receipts_digest(receipts: &[u64]) -> u64 {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(b"urmove receipts");
    for r in receipts {
        h.update(r.to_le_bytes());
    }
    let d: [u8; 32] = h.finalize().into();
    u64::from_le_bytes(d[..8].try_into().expect("8 bytes"))
}
