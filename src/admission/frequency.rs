//! How often keys were asked for lately: a count-min sketch of 4-bit counters that halves them all
//! as it fills (TinyLFU's frequency sketch, Einziger et al., ACM ToS 2017), shared by the proxy's
//! store and the simulator.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use siphasher::sip::SipHasher13;

/// Counters per key the sketch is sized for: four rows of a count-min sketch.
const DEPTH: u64 = 4;
/// A counter saturates here (4 bits).
pub const MAX_COUNT: u8 = 15;
/// Counts are halved after this many increments per key the cache holds, so that they follow what
/// is popular now. Caffeine halves every ten requests per key, hits included; this sketch counts
/// misses only, fewer than requests, and 30 was the best of 5, 10, 20, 30, 40 and 80 on the shared
/// traces (load/admission_table.py: probation at or above the better of S3-FIFO and W-TinyLFU in
/// 10 of 15 cells at 30, 9 at 10).
const SAMPLE_PER_KEY: u64 = 30;
/// The fewest keys the sample is sized for, so that a cache filling up does not age at every miss.
const MIN_SAMPLE_KEYS: u64 = 100;
/// The bytes of cache a key is assumed to take, to size the sketch from a byte budget.
const BYTES_PER_KEY: u64 = 4096;
const MIN_CAPACITY: u64 = 1024;
const MAX_CAPACITY: u64 = 1 << 24;
/// Each 64-bit word holds sixteen 4-bit counters.
const COUNTERS_PER_WORD: u64 = 16;
const HALF_EACH_COUNTER: u64 = 0x7777_7777_7777_7777;

/// Approximate request counts per key, at most [`MAX_COUNT`], aged by halving. Lock-free: counters
/// are raised by compare-and-swap, and a racing increment or halving may be lost, which only
/// blurs an estimate.
pub struct FrequencySketch {
    words: Box<[AtomicU64]>,
    mask: u64,
    keys: (u64, u64),
    additions: AtomicU64,
}

impl FrequencySketch {
    /// A sketch for a cache of `total_bytes`: as many keys as it holds objects of 4 KiB, between
    /// 1,024 and 16 million; `seed` keys its hash.
    pub fn for_budget(total_bytes: u64, seed: u64) -> FrequencySketch {
        let capacity = (total_bytes / BYTES_PER_KEY).clamp(MIN_CAPACITY, MAX_CAPACITY);
        FrequencySketch::new(capacity, seed)
    }

    /// A sketch sized for `capacity` keys (at least 1), its hash keyed by `seed`.
    pub fn new(capacity: u64, seed: u64) -> FrequencySketch {
        let counters = (DEPTH * capacity.max(1)).next_power_of_two();
        let words = (counters / COUNTERS_PER_WORD).max(1);
        FrequencySketch {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            mask: words * COUNTERS_PER_WORD - 1,
            keys: (seed, seed.rotate_left(32) ^ 0x6672_6571_7565_6e63),
            additions: AtomicU64::new(0),
        }
    }

    /// Bytes of counters.
    pub fn memory_bytes(&self) -> usize {
        self.words.len() * size_of::<u64>()
    }

    /// Counts one request for `item`; halves every count once the requests counted since the last
    /// halving reach thirty per key the cache holds now (`held`, taken as at least 100).
    pub fn increment(&self, item: impl Hash, held: u64) {
        for counter in self.counters(item) {
            let (word, shift) = self.locate(counter);
            // A saturated counter is left alone; otherwise add one to its nibble.
            let _ = word.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |value| {
                ((value >> shift) & 0xf < u64::from(MAX_COUNT)).then(|| value + (1 << shift))
            });
        }
        let sample = SAMPLE_PER_KEY * held.max(MIN_SAMPLE_KEYS);
        if self.additions.fetch_add(1, Ordering::Relaxed) + 1 >= sample {
            self.additions.store(0, Ordering::Relaxed);
            for word in self.words.iter() {
                let halved = (word.load(Ordering::Relaxed) >> 1) & HALF_EACH_COUNTER;
                word.store(halved, Ordering::Relaxed);
            }
        }
    }

    /// How often `item` was counted lately: the least of its counters.
    pub fn estimate(&self, item: impl Hash) -> u8 {
        self.counters(item)
            .map(|counter| {
                let (word, shift) = self.locate(counter);
                ((word.load(Ordering::Relaxed) >> shift) & 0xf) as u8
            })
            .min()
            .unwrap_or(0)
    }

    /// The item's counter in each row (double hashing of one keyed hash).
    fn counters(&self, item: impl Hash) -> impl Iterator<Item = u64> {
        let mut hasher = SipHasher13::new_with_keys(self.keys.0, self.keys.1);
        item.hash(&mut hasher);
        let hash = hasher.finish();
        let step = hash.rotate_left(32) | 1;
        let mask = self.mask;
        (0..DEPTH).map(move |row| hash.wrapping_add(row.wrapping_mul(step)) & mask)
    }

    fn locate(&self, counter: u64) -> (&AtomicU64, u32) {
        let word = &self.words[(counter / COUNTERS_PER_WORD) as usize];
        (word, 4 * (counter % COUNTERS_PER_WORD) as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_grow_with_requests_and_saturate() {
        let sketch = FrequencySketch::new(1000, 7);
        for _ in 0..3 {
            sketch.increment("a", 1000);
        }
        assert_eq!(sketch.estimate("a"), 3);
        assert_eq!(sketch.estimate("never"), 0);
        for _ in 0..40 {
            sketch.increment("b", 1000);
        }
        assert_eq!(sketch.estimate("b"), MAX_COUNT);
    }

    #[test]
    fn counts_are_halved_once_the_sample_is_full() {
        let sketch = FrequencySketch::new(1000, 7);
        for _ in 0..8 {
            sketch.increment("hot", 150);
        }
        // 4,500 increments (30 per key held) in all halve every count.
        for _ in 0..4491 {
            sketch.increment("cold", 150);
        }
        assert_eq!(sketch.estimate("hot"), 8);
        sketch.increment("cold", 150);
        assert_eq!(sketch.estimate("hot"), 4);
    }

    #[test]
    fn estimates_of_many_keys_stay_close_to_their_counts() {
        let sketch = FrequencySketch::new(10_000, 7);
        for key in 0..10_000u32 {
            for _ in 0..key % 4 {
                sketch.increment(key, 1 << 20);
            }
        }
        let over = (0..10_000u32)
            .filter(|key| sketch.estimate(key) > (key % 4) as u8)
            .count();
        assert!(over < 500, "{over} of 10,000 estimates above their counts");
        assert!((0..10_000u32).all(|key| sketch.estimate(key) >= (key % 4) as u8));
    }

    #[test]
    fn sizing_from_bytes_stays_within_bounds() {
        assert_eq!(FrequencySketch::for_budget(0, 1).memory_bytes(), 2048);
        // 1 GiB: 262,144 keys of 4 KiB, four 4-bit counters each: 2 bytes per key.
        assert_eq!(
            FrequencySketch::for_budget(1 << 30, 1).memory_bytes(),
            512 * 1024
        );
    }
}
