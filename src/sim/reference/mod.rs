//! The research policies the simulator measures probation against: S3-FIFO, W-TinyLFU and SIEVE,
//! each a byte-bounded cache over dense object ids that follows libCacheSim's implementation (the
//! reference the papers' figures come from), so that `load/libcachesim_check.py` can hold each to
//! libCacheSim's hit ratio on the same trace.

mod s3fifo;
mod sieve;
mod wtinylfu;

pub use s3fifo::S3Fifo;
pub use sieve::Sieve;
pub use wtinylfu::WTinyLfu;

use crate::admission::probation::Segment;

/// What one request did to a reference cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Access {
    pub hit: bool,
    /// A miss stored, and where: [`Segment::Probation`] for the queue that first copies enter
    /// (S3-FIFO's small FIFO, W-TinyLFU's window), [`Segment::Main`] for the rest.
    pub stored: Option<Segment>,
    /// A miss the policy would not store (larger than the queue it would enter).
    pub refused: bool,
    /// Objects moved into main from the queue that first copies enter, and their bytes.
    pub promotions: u64,
    pub promoted_bytes: u64,
    /// Objects that left the cache.
    pub evictions: u64,
}

/// One of the reference caches.
pub enum ReferenceCache {
    S3Fifo(S3Fifo),
    WTinyLfu(WTinyLfu),
    Sieve(Sieve),
}

impl ReferenceCache {
    /// One request for `id` of `size` bytes: a hit, or a miss stored as the policy decides.
    #[inline]
    pub fn get(&mut self, id: u32, size: u64) -> Access {
        match self {
            ReferenceCache::S3Fifo(cache) => cache.get(id, size),
            ReferenceCache::WTinyLfu(cache) => cache.get(id, size),
            ReferenceCache::Sieve(cache) => cache.get(id, size),
        }
    }

    #[inline]
    pub fn prefetch(&self, id: u32) {
        match self {
            ReferenceCache::S3Fifo(cache) => cache.prefetch(id),
            ReferenceCache::WTinyLfu(cache) => cache.prefetch(id),
            ReferenceCache::Sieve(cache) => cache.prefetch(id),
        }
    }

    /// Memory of the state the policy keeps about objects it does not hold: S3-FIFO's ghost
    /// queue at its peak (a 64-bit fingerprint per entry), W-TinyLFU's frequency counters (4 bytes
    /// per object counted); 0 for SIEVE.
    pub fn admission_memory_bytes(&self) -> u64 {
        match self {
            ReferenceCache::S3Fifo(cache) => 8 * cache.ghost_peak_entries(),
            ReferenceCache::WTinyLfu(cache) => 4 * cache.counted_objects(),
            ReferenceCache::Sieve(_) => 0,
        }
    }
}
