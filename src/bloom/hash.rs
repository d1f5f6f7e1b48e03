//! Keyed hashing of a key to its block and its bit positions inside the block.
//!
//! One SipHash-1-3 call with a 128-bit secret gives 128 bits: the first 64 choose the block, the
//! second 64 give seven 9-bit positions; keys that need more positions draw them from further
//! SplitMix64 rounds of those bits, which keeps the positions independent (double hashing
//! `h1 + i h2` would correlate them). SipHash is a pseudo-random function of the secret: without
//! the secret, the bits a URL sets are unpredictable, so nobody can precompute URLs that look
//! "seen before" and get a one-hit object admitted on its first request, nor craft URLs that
//! pile into one block to raise the false-positive rate.

use siphasher::sip128::SipHasher13;

use super::math::BLOCK_BITS;

/// Words in one block.
pub(crate) const BLOCK_WORDS: usize = (BLOCK_BITS / 64) as usize;

const POSITION_BITS: u32 = BLOCK_BITS.trailing_zeros();
const POSITIONS_PER_WORD: u32 = u64::BITS / POSITION_BITS;

/// The 128-bit secret that keys a filter's hash.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Seed(pub(crate) [u8; 16]);

impl Seed {
    /// A fresh secret from the thread-local cryptographic generator (seeded by the OS).
    pub fn random() -> Self {
        Seed(rand::random::<u128>().to_le_bytes())
    }

    /// The secret's bytes (as stored in snapshots).
    pub fn to_bytes(self) -> [u8; 16] {
        self.0
    }
}

impl From<u128> for Seed {
    fn from(seed: u128) -> Self {
        Seed(seed.to_le_bytes())
    }
}

impl From<[u8; 16]> for Seed {
    fn from(seed: [u8; 16]) -> Self {
        Seed(seed)
    }
}

impl std::fmt::Debug for Seed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Seed(<secret>)")
    }
}

/// Where a key lives: its block and, per word of the block, the bits it sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Probe {
    pub(crate) block: usize,
    pub(crate) masks: [u64; BLOCK_WORDS],
}

#[derive(Clone)]
pub(crate) struct KeyHasher {
    sip: SipHasher13,
}

impl KeyHasher {
    pub(crate) fn new(seed: Seed) -> Self {
        Self {
            sip: SipHasher13::new_with_key(&seed.0),
        }
    }

    #[inline]
    pub(crate) fn probe(&self, key: &[u8], num_blocks: u64, num_hashes: u32) -> Probe {
        let hash = self.sip.hash(key);
        // Lemire's multiply-shift maps the hash onto 0..num_blocks without a division.
        let block = ((u128::from(hash.h1) * u128::from(num_blocks)) >> 64) as usize;
        let mut masks = [0u64; BLOCK_WORDS];
        let mut pool = hash.h2;
        let mut left = POSITIONS_PER_WORD;
        let mut round = 0u64;
        for _ in 0..num_hashes {
            if left == 0 {
                round += 1;
                pool = splitmix64(hash.h2.wrapping_add(round.wrapping_mul(GOLDEN_GAMMA)));
                left = POSITIONS_PER_WORD;
            }
            let position = (pool & (BLOCK_BITS - 1)) as usize;
            pool >>= POSITION_BITS;
            left -= 1;
            masks[position / 64] |= 1 << (position % 64);
        }
        Probe { block, masks }
    }
}

const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's finaliser (Steele, Lea and Flood 2014): a bijection with full avalanche.
#[inline]
fn splitmix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_probe_other_seed_other_probe() {
        let a = KeyHasher::new(Seed::from(1));
        let b = KeyHasher::new(Seed::from(2));
        let key = b"https://example.com/a.jpg";
        assert_eq!(a.probe(key, 1000, 7), a.probe(key, 1000, 7));
        assert_ne!(a.probe(key, 1000, 7), b.probe(key, 1000, 7));
    }

    #[test]
    fn positions_cover_the_whole_block_beyond_seven_per_key() {
        let hasher = KeyHasher::new(Seed::from(7));
        let mut seen = [0u64; BLOCK_WORDS];
        for i in 0..2000u32 {
            let probe = hasher.probe(&i.to_le_bytes(), 1, 20);
            assert!(probe.masks.iter().map(|m| m.count_ones()).sum::<u32>() <= 20);
            for (s, m) in seen.iter_mut().zip(probe.masks) {
                *s |= m;
            }
        }
        assert!(seen.iter().all(|w| *w == u64::MAX));
    }
}
