//! Keyed hashing of a key to its block and its bit positions inside the block.
//!
//! One SipHash-1-3 call keyed with a 128-bit secret gives 64 bits `h`. Its high bits choose the
//! block (multiply-shift); the positions come 9 bits at a time from SplitMix64 rounds of `h`, a
//! bijective mixer with full avalanche, so every bit of `h` moves every position and the positions
//! are independent of each other (double hashing `h1 + i h2` would correlate them) and of the
//! block. With 2^64 hash values and at most a few hundred keys per block, reusing one 64-bit hash
//! for both costs nothing measurable; the 128-bit SipHash variant costs a third more time.
//!
//! SipHash is a pseudo-random function of the secret: without the secret, the bits a URL sets are
//! unpredictable, so nobody can precompute URLs that look "seen before" and get a one-hit object
//! admitted on its first request, nor craft URLs that pile into one block to raise the
//! false-positive rate.

use std::hash::Hasher as _;

use siphasher::sip::SipHasher13;

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

/// Where a key lives: its block and the positions of its bits inside the block.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    pub(crate) block: usize,
    pub(crate) positions: Positions,
}

/// A key's bit positions in its block (0..512), drawn 9 bits at a time from the hash.
#[derive(Debug, Clone)]
pub(crate) struct Positions {
    seed: u64,
    pool: u64,
    left_in_pool: u32,
    round: u64,
    remaining: u32,
}

impl Iterator for Positions {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        if self.left_in_pool == 0 {
            self.round += 1;
            self.pool = splitmix64(
                self.seed
                    .wrapping_add(self.round.wrapping_mul(GOLDEN_GAMMA)),
            );
            self.left_in_pool = POSITIONS_PER_WORD;
        }
        let position = (self.pool & (BLOCK_BITS - 1)) as usize;
        self.pool >>= POSITION_BITS;
        self.left_in_pool -= 1;
        Some(position)
    }
}

/// A key as a filter takes it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Key<'a> {
    /// Bytes, hashed whole.
    Bytes(&'a [u8]),
    /// Bytes in parts, hashed as their concatenation (SipHash's stream takes the parts in turn).
    Parts(&'a [&'a [u8]]),
    /// The caller's 64-bit hash of its key, keyed with the secret as its 8 little-endian bytes.
    Hash(u64),
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
    pub(crate) fn probe(&self, key: Key<'_>, num_blocks: u64, num_hashes: u32) -> Probe {
        let hash = match key {
            Key::Bytes(bytes) => self.sip.hash(bytes),
            Key::Parts(parts) => {
                let mut sip = self.sip;
                for part in parts {
                    sip.write(part);
                }
                sip.finish()
            }
            Key::Hash(hash) => self.sip.hash(&hash.to_le_bytes()),
        };
        // Lemire's multiply-shift maps the hash onto 0..num_blocks without a division.
        let block = ((u128::from(hash) * u128::from(num_blocks)) >> 64) as usize;
        let pool = splitmix64(hash);
        let positions = Positions {
            seed: hash,
            pool,
            left_in_pool: POSITIONS_PER_WORD,
            round: 0,
            remaining: num_hashes,
        };
        Probe { block, positions }
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
        let bits = |h: &KeyHasher| {
            let probe = h.probe(Key::Bytes(key), 1000, 7);
            (probe.block, probe.positions.collect::<Vec<_>>())
        };
        assert_eq!(bits(&a), bits(&a));
        assert_ne!(bits(&a), bits(&b));
    }

    #[test]
    fn positions_cover_the_whole_block_beyond_seven_per_key() {
        let hasher = KeyHasher::new(Seed::from(7));
        let mut seen = [false; BLOCK_BITS as usize];
        for i in 0..2000u32 {
            let probe = hasher.probe(Key::Bytes(&i.to_le_bytes()), 1, 20);
            assert_eq!(probe.block, 0);
            let positions: Vec<usize> = probe.positions.collect();
            assert_eq!(positions.len(), 20);
            for position in positions {
                seen[position] = true;
            }
        }
        assert!(seen.iter().all(|s| *s));
    }

    #[test]
    fn a_key_in_parts_sets_the_bits_of_its_concatenation() {
        let hasher = KeyHasher::new(Seed::from(3));
        let bits = |key: Key<'_>| {
            let probe = hasher.probe(key, 1000, 7);
            (probe.block, probe.positions.collect::<Vec<_>>())
        };
        let whole = b"0123456789abcdef/tenant-with-a-long-name";
        // Splits on and off SipHash's 8-byte words, with empty parts among them.
        for split in [0, 1, 3, 8, 11, 16, 17, whole.len()] {
            let (head, tail) = whole.split_at(split);
            let parts: [&[u8]; 4] = [head, b"", tail, b""];
            assert_eq!(
                bits(Key::Parts(&parts)),
                bits(Key::Bytes(whole)),
                "split at {split}"
            );
        }
        assert_ne!(bits(Key::Parts(&[b"ab", b"c"])), bits(Key::Bytes(b"abd")));
    }

    #[test]
    fn a_hash_sets_the_bits_of_its_little_endian_bytes() {
        let hasher = KeyHasher::new(Seed::from(4));
        let bits = |key: Key<'_>| {
            let probe = hasher.probe(key, 1000, 7);
            (probe.block, probe.positions.collect::<Vec<_>>())
        };
        let hash = 0x0123_4567_89ab_cdef_u64;
        assert_eq!(bits(Key::Hash(hash)), bits(Key::Bytes(&hash.to_le_bytes())));
        assert_ne!(bits(Key::Hash(hash)), bits(Key::Hash(hash + 1)));
    }
}
