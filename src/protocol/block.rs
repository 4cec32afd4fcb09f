//! The block stamp: a 64-byte header at the start of every verified block.
//!
//! `bench --disk --verify` writes each block as `stamp || payload`. The stamp
//! names the target, the block's own offset, the run's seed, a generation and a
//! checksum over the whole block, so a read-back catches:
//! - torn or corrupted blocks (checksum mismatch),
//! - misdirected writes (the stamp names another offset or target),
//! - lost writes (a stale block from another run carries another seed).

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// Bytes taken by the stamp at the start of a block.
pub const STAMP_LEN: usize = 64;
const MAGIC: u64 = u64::from_le_bytes(*b"URMVBLK1");
const CHECKSUM_AT: usize = 56;

/// What a block says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub seed: u64,
    pub offset: u64,
    pub target: u32,
    pub block_len: u32,
    pub generation: u64,
}

/// Why a block failed its check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StampError {
    /// The block is shorter than a stamp or than the length it claims.
    Short { len: usize },
    /// No stamp at all: never written by a verifying run, or overwritten.
    NoMagic,
    /// The checksum over the block does not match: torn or corrupted.
    Checksum { stored: u64, computed: u64 },
    /// A valid block, but written for another offset.
    Misdirected { found_offset: u64 },
    /// A valid block, but written for another target.
    WrongTarget { found_target: u32 },
    /// A valid block from another run (seed), i.e. a lost write.
    WrongSeed { found_seed: u64 },
    /// A valid block of another length.
    WrongLength { found_len: u32 },
}

impl std::fmt::Display for StampError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StampError::Short { len } => write!(f, "short block ({len} bytes)"),
            StampError::NoMagic => write!(f, "no block stamp (never written by a --verify run)"),
            StampError::Checksum { stored, computed } => write!(
                f,
                "checksum mismatch (stored {stored:016x}, computed {computed:016x}): torn or corrupted block"
            ),
            StampError::Misdirected { found_offset } => {
                write!(f, "block carries offset {found_offset}: misdirected write")
            }
            StampError::WrongTarget { found_target } => {
                write!(f, "block carries target {found_target}: misdirected write")
            }
            StampError::WrongSeed { found_seed } => write!(
                f,
                "block carries seed {found_seed:016x} of another run: lost or stale write"
            ),
            StampError::WrongLength { found_len } => {
                write!(f, "block was written with block size {found_len}")
            }
        }
    }
}

impl std::error::Error for StampError {}

fn checksum(block: &[u8]) -> u64 {
    let payload = xxh3_64(&block[STAMP_LEN..]);
    xxh3_64_with_seed(&block[..CHECKSUM_AT], payload)
}

fn u64_at(block: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&block[at..at + 8]);
    u64::from_le_bytes(b)
}

fn u32_at(block: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&block[at..at + 4]);
    u32::from_le_bytes(b)
}

/// Write `stamp` into the first bytes of `block` and seal it with a checksum
/// over the whole block. Call after the payload is filled.
pub fn seal(block: &mut [u8], stamp: &Stamp) {
    assert!(block.len() >= STAMP_LEN, "block shorter than its stamp");
    assert_eq!(block.len() as u64, u64::from(stamp.block_len));
    block[0..8].copy_from_slice(&MAGIC.to_le_bytes());
    block[8..16].copy_from_slice(&stamp.seed.to_le_bytes());
    block[16..24].copy_from_slice(&stamp.offset.to_le_bytes());
    block[24..28].copy_from_slice(&stamp.target.to_le_bytes());
    block[28..32].copy_from_slice(&stamp.block_len.to_le_bytes());
    block[32..40].copy_from_slice(&stamp.generation.to_le_bytes());
    block[40..CHECKSUM_AT].fill(0);
    let sum = checksum(block);
    block[CHECKSUM_AT..STAMP_LEN].copy_from_slice(&sum.to_le_bytes());
}

/// Read the stamp of `block` and check its checksum, without expectations.
pub fn open(block: &[u8]) -> Result<Stamp, StampError> {
    if block.len() < STAMP_LEN {
        return Err(StampError::Short { len: block.len() });
    }
    if u64_at(block, 0) != MAGIC {
        return Err(StampError::NoMagic);
    }
    let stamp = Stamp {
        seed: u64_at(block, 8),
        offset: u64_at(block, 16),
        target: u32_at(block, 24),
        block_len: u32_at(block, 28),
        generation: u64_at(block, 32),
    };
    if u64::from(stamp.block_len) != block.len() as u64 {
        if (stamp.block_len as usize) > block.len() {
            return Err(StampError::Short { len: block.len() });
        }
        return Err(StampError::WrongLength {
            found_len: stamp.block_len,
        });
    }
    let stored = u64_at(block, CHECKSUM_AT);
    let computed = checksum(block);
    if stored != computed {
        return Err(StampError::Checksum { stored, computed });
    }
    Ok(stamp)
}

/// Check `block`, read from `offset` of `target`. When `seed` is `None` the
/// block's own seed is accepted and returned so the caller can pin it.
pub fn check(
    block: &[u8],
    target: u32,
    offset: u64,
    seed: Option<u64>,
) -> Result<Stamp, StampError> {
    let stamp = open(block)?;
    if stamp.offset != offset {
        return Err(StampError::Misdirected {
            found_offset: stamp.offset,
        });
    }
    if stamp.target != target {
        return Err(StampError::WrongTarget {
            found_target: stamp.target,
        });
    }
    if let Some(seed) = seed {
        if stamp.seed != seed {
            return Err(StampError::WrongSeed {
                found_seed: stamp.seed,
            });
        }
    }
    Ok(stamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(len: usize, offset: u64) -> Vec<u8> {
        let mut b: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        seal(
            &mut b,
            &Stamp {
                seed: 42,
                offset,
                target: 1,
                block_len: len as u32,
                generation: 0,
            },
        );
        b
    }

    #[test]
    fn round_trip() {
        let b = block(4096, 8192);
        let s = check(&b, 1, 8192, Some(42)).unwrap();
        assert_eq!(s.offset, 8192);
        assert_eq!(s.seed, 42);
        assert_eq!(check(&b, 1, 8192, None).unwrap().seed, 42);
    }

    #[test]
    fn one_flipped_bit_anywhere_is_caught() {
        let b = block(4096, 0);
        for at in [0usize, 9, 17, 25, 33, 57, 64, 100, 4095] {
            let mut c = b.clone();
            c[at] ^= 0x10;
            assert!(check(&c, 1, 0, Some(42)).is_err(), "flip at {at} missed");
        }
    }

    #[test]
    fn misdirected_wrong_target_and_stale_are_named() {
        let b = block(4096, 4096);
        assert_eq!(
            check(&b, 1, 0, None),
            Err(StampError::Misdirected { found_offset: 4096 })
        );
        assert_eq!(
            check(&b, 2, 4096, None),
            Err(StampError::WrongTarget { found_target: 1 })
        );
        assert_eq!(
            check(&b, 1, 4096, Some(7)),
            Err(StampError::WrongSeed { found_seed: 42 })
        );
    }

    #[test]
    fn zeros_and_short_blocks() {
        assert_eq!(open(&[0u8; 4096]), Err(StampError::NoMagic));
        assert_eq!(open(&[0u8; 10]), Err(StampError::Short { len: 10 }));
        let b = block(4096, 0);
        assert_eq!(open(&b[..2048]), Err(StampError::Short { len: 2048 }));
    }
}
