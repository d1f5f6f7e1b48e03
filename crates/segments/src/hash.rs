//! Key hashing: SipHash-1-3 under a random 128-bit key kept in `engine.meta`, so the hashes in
//! the segment summaries stay valid across restarts and outsiders cannot aim keys at one shard.

use std::hash::Hasher;

use siphasher::sip::SipHasher13;

/// Hashes keys to the non-zero `u64`s the index and the records carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyHasher {
    key: [u64; 2],
    /// All ones, except in tests that cut hashes short to make them collide.
    mask: u64,
}

impl KeyHasher {
    pub(crate) fn new(key: [u64; 2]) -> KeyHasher {
        KeyHasher {
            key,
            mask: u64::MAX,
        }
    }

    /// This hasher with its hashes cut to `mask`'s bits.
    pub(crate) fn masked(self, mask: u64) -> KeyHasher {
        KeyHasher { mask, ..self }
    }

    pub(crate) fn key(&self) -> [u64; 2] {
        self.key
    }

    /// The hash of `key`; never 0 (the index's empty-slot mark), 0 becomes 1.
    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        let mut hasher = SipHasher13::new_with_keys(self.key[0], self.key[1]);
        hasher.write(key);
        (hasher.finish() & self.mask).max(1)
    }
}
