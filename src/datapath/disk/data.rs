//! The data a disk worker writes: a small fast PRNG, buffers filled with
//! incompressible bytes once, and each block made unique before it is
//! written (a stamp every 512 bytes) at a fraction of refilling it.

/// A small fast PRNG (wyrand) for offsets and data.
#[derive(Debug, Clone, Copy)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db);
        ((t >> 64) as u64) ^ (t as u64)
    }

    /// Uniform in `0..n` (n > 0), by multiply-shift.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// Bytes between two per-block stamps written by [`scramble`].
pub const SCRAMBLE_STRIDE: usize = 512;

/// Make a buffer that already holds random bytes unique to this block:
/// overwrite the first 8 bytes of every 512-byte sector with a value drawn
/// from a PRNG seeded by the run's seed, the offset and the pass. The data
/// stays incompressible and no sector repeats, at 1/64 of the cost of
/// refilling the whole block (which capped writes at a few GB/s per core).
pub fn scramble(buf: &mut [u8], seed: u64, offset: u64, generation: u64) {
    let mut rng =
        Rng::new(seed ^ offset.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ generation.rotate_left(32));
    for sector in buf.chunks_mut(SCRAMBLE_STRIDE) {
        let v = rng.next_u64().to_le_bytes();
        let n = sector.len().min(8);
        sector[..n].copy_from_slice(&v[..n]);
    }
}

/// Fill `buf` with incompressible bytes from a PRNG seeded by `seed`,
/// `offset` and `generation`.
pub fn fill_random(buf: &mut [u8], seed: u64, offset: u64, generation: u64) {
    let mut rng =
        Rng::new(seed ^ offset.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ generation.rotate_left(32));
    let mut chunks = buf.chunks_exact_mut(8);
    for chunk in &mut chunks {
        chunk.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    let tail = chunks.into_remainder();
    let last = rng.next_u64().to_le_bytes();
    let n = tail.len();
    tail.copy_from_slice(&last[..n]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_fill_differs_per_block_and_is_incompressible_looking() {
        let mut a = vec![0u8; 4096];
        let mut b = vec![0u8; 4096];
        fill_random(&mut a, 1, 0, 0);
        fill_random(&mut b, 1, 4096, 0);
        assert_ne!(a, b);
        // No 64-byte run repeats inside a block (not dedupable at small grain).
        let mut seen = std::collections::HashSet::new();
        for c in a.chunks(64) {
            assert!(seen.insert(c.to_vec()));
        }
        let mut tail = vec![0u8; 13];
        fill_random(&mut tail, 1, 0, 0);
        assert_eq!(&tail[..8], &a[..8]);
    }

    #[test]
    fn below_stays_in_range() {
        let mut r = Rng::new(7);
        let mut hits = [0u32; 10];
        for _ in 0..10_000 {
            hits[r.below(10) as usize] += 1;
        }
        assert!(hits.iter().all(|&h| h > 800 && h < 1200), "{hits:?}");
    }
}
