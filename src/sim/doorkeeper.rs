//! The doorkeeper as the simulator runs it: the proxy's filters and rotation rule, for one thread.
//!
//! [`crate::admission::Doorkeeper`] is built for many threads: atomic bits, a sharded set-bit
//! count read every few hundred bits, the clock read every 32 observes, and a random secret per
//! generation. A simulation needs none of that, and it needs what the proxy's doorkeeper cannot
//! give: the same answers on every run, whichever thread runs it, so that a report can be checked
//! and `--jobs` changes nothing in it. So the simulator keeps its own pair of filters:
//!
//! - **The same filters.** Each generation is a blocked Bloom filter of the size, bits per key and
//!   hashing of [`BloomFilter`] (SipHash-1-3 of the key with the generation's secret, one 512-bit
//!   block per key): with the same secret it sets exactly the bits a `BloomFilter` sets (tested
//!   below), in plain words instead of atomics.
//! - **The same rotation rule.** `current` rotates once its set bits reach the lower of the
//!   capacity and false-positive limits, computed by the same sizing model, or once it is
//!   `max_age` old in trace time; a key that triggers a rotation is inserted into the new
//!   `current` too, as the proxy's doorkeeper does. The proxy checks the bits when a shard of its
//!   count crosses a stride and the clock every 32 observes; the model checks both on every
//!   observe, so it rotates at the threshold itself rather than up to a stride later.
//! - **Secrets from a seed**: generation `g`'s secret is a hash of the run's seed and `g`.
//!
//! Keys are the 8 bytes of the request's fingerprint, as the simulator has always observed them.

use siphasher::sip::SipHasher13;

use crate::admission::{Admission, DoorkeeperConfig, RotationCounts, RotationReason};
use crate::bloom::{BloomFilter, Seed};

use super::prefetch::prefetch;

/// Bits in a block: one 64-byte cache line, as [`BloomFilter`] lays them out.
const BLOCK_BITS: u64 = 512;
const POSITION_BITS: u32 = BLOCK_BITS.trailing_zeros();
const POSITIONS_PER_WORD: u32 = u64::BITS / POSITION_BITS;
const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Block([u64; 8]);

/// One generation's filter: [`BloomFilter`]'s bits, unshared.
struct Filter {
    blocks: Vec<Block>,
    num_hashes: u32,
    hasher: SipHasher13,
    set_bits: u64,
}

/// A key's block and the hash its bit positions come from.
#[derive(Clone, Copy)]
struct Probe {
    block: usize,
    hash: u64,
}

impl Filter {
    fn new(num_blocks: u64, num_hashes: u32, seed: Seed) -> Filter {
        Filter {
            blocks: vec![Block::default(); num_blocks as usize],
            num_hashes,
            hasher: SipHasher13::new_with_key(&seed.to_bytes()),
            set_bits: 0,
        }
    }

    /// Empties the filter and keys it with `seed`, keeping its memory.
    fn reset(&mut self, seed: Seed) {
        self.blocks.fill(Block::default());
        self.hasher = SipHasher13::new_with_key(&seed.to_bytes());
        self.set_bits = 0;
    }

    #[inline]
    fn probe(&self, key: &[u8]) -> Probe {
        let hash = self.hasher.hash(key);
        // Lemire's multiply-shift, as BloomFilter maps a hash onto its blocks.
        let block = ((u128::from(hash) * self.blocks.len() as u128) >> 64) as usize;
        Probe { block, hash }
    }

    /// The key's bits in its block, as one mask per word.
    #[inline]
    fn masks(&self, probe: Probe) -> [u64; 8] {
        let mut masks = [0u64; 8];
        let mut pool = splitmix64(probe.hash);
        let mut left_in_pool = POSITIONS_PER_WORD;
        let mut round = 0u64;
        for _ in 0..self.num_hashes {
            if left_in_pool == 0 {
                round += 1;
                pool = splitmix64(probe.hash.wrapping_add(round.wrapping_mul(GOLDEN_GAMMA)));
                left_in_pool = POSITIONS_PER_WORD;
            }
            let position = pool & (BLOCK_BITS - 1);
            masks[(position / 64) as usize] |= 1 << (position % 64);
            pool >>= POSITION_BITS;
            left_in_pool -= 1;
        }
        masks
    }

    /// Inserts the key of `probe`; returns whether it was present already, and the bits it set.
    #[inline]
    fn insert(&mut self, probe: Probe) -> (bool, u32) {
        let masks = self.masks(probe);
        let block = &mut self.blocks[probe.block].0;
        let mut new_bits = 0;
        for (word, mask) in block.iter_mut().zip(masks) {
            new_bits += (mask & !*word).count_ones();
            *word |= mask;
        }
        self.set_bits += u64::from(new_bits);
        (new_bits == 0, new_bits)
    }

    #[inline]
    fn contains(&self, probe: Probe) -> bool {
        let masks = self.masks(probe);
        let block = &self.blocks[probe.block].0;
        block
            .iter()
            .zip(masks)
            .all(|(word, mask)| word & mask == mask)
    }

    #[inline]
    fn prefetch(&self, probe: Probe) {
        prefetch(&self.blocks[probe.block]);
    }
}

/// Probes hashed by a prefetch, kept for the observe of the same key a few requests later.
#[derive(Clone, Copy, Default)]
struct Hashed {
    fingerprint: u64,
    /// The generation the probes are for, plus one (0: none).
    generation: u64,
    current: Option<Probe>,
    previous: Option<Probe>,
}

/// Slots of the table of [`Hashed`] probes, indexed by the fingerprint's low bits: several
/// times the prefetch distance, so that a prefetched key's probes are rarely displaced.
const HASHED_SLOTS: usize = 64;

/// SplitMix64's finaliser, as the filter's positions are drawn.
#[inline]
fn splitmix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The secret of generation `generation` of a run seeded with `seed`.
fn generation_seed(seed: u64, generation: u64) -> Seed {
    let high = splitmix64(seed.wrapping_add(GOLDEN_GAMMA));
    let low = splitmix64(high ^ generation.wrapping_mul(GOLDEN_GAMMA));
    Seed::from((u128::from(high) << 64) | u128::from(splitmix64(low)))
}

/// A rotating pair of filters answering "seen before?" as the proxy's doorkeeper does, on trace
/// time, reproducibly (see the module docs).
pub struct DoorkeeperModel {
    config: DoorkeeperConfig,
    /// An empty filter of the generations' size: the sizing model's thresholds, and the memory
    /// the proxy's filters take, come from it.
    shape: BloomFilter,
    seed: u64,
    generation: u64,
    current: Filter,
    previous: Option<Filter>,
    rotate_at_set_bits: u64,
    rotate_reason: RotationReason,
    /// Trace time in nanoseconds since the first observe, never going backwards (as
    /// [`super::TraceClock`] keeps it), and when `current` started.
    first_time: Option<f64>,
    now_nanos: u64,
    started_nanos: u64,
    max_age_nanos: u64,
    rotations: RotationCounts,
    hashed: Box<[Hashed; HASHED_SLOTS]>,
}

impl DoorkeeperModel {
    /// A model of a doorkeeper with `config`, its secrets drawn from `seed`.
    ///
    /// # Panics
    /// Panics if the config is invalid (check with [`DoorkeeperConfig::validate`]).
    pub fn new(config: &DoorkeeperConfig, seed: u64) -> DoorkeeperModel {
        if let Err(e) = config.validate() {
            panic!("{e}");
        }
        let sizing = config.sizing();
        let shape = BloomFilter::builder(config.capacity, config.target_fpr)
            .num_bits(sizing.num_bits())
            .num_hashes(sizing.num_hashes)
            .seed(0)
            .build();
        let current = Filter::new(
            shape.sizing().num_blocks,
            shape.num_hashes(),
            generation_seed(seed, 0),
        );
        let mut model = DoorkeeperModel {
            config: config.clone(),
            shape,
            seed,
            generation: 0,
            current,
            previous: None,
            rotate_at_set_bits: 0,
            rotate_reason: RotationReason::Capacity,
            first_time: None,
            now_nanos: 0,
            started_nanos: 0,
            max_age_nanos: u64::try_from(config.max_age.as_nanos()).unwrap_or(u64::MAX),
            rotations: RotationCounts::default(),
            hashed: Box::new([Hashed::default(); HASHED_SLOTS]),
        };
        model.set_limits();
        model
    }

    /// Records a request for the object with `fingerprint` at trace time `time` (seconds) and
    /// says whether it was seen in the current or previous generation.
    pub fn observe(&mut self, fingerprint: u64, time: f64) -> Admission {
        self.set_time(time);
        let key = fingerprint.to_le_bytes();
        let hashed = self.hashed[fingerprint as usize % HASHED_SLOTS];
        let mut memo = (hashed.fingerprint == fingerprint
            && hashed.generation == self.generation + 1)
            .then_some(hashed);
        let mut seen = false;
        let mut in_previous_already = false;
        loop {
            let generation = self.generation;
            let probe = memo
                .and_then(|m| m.current)
                .unwrap_or_else(|| self.current.probe(&key));
            let (present, new_bits) = self.current.insert(probe);
            seen |= present;
            if !present
                && !in_previous_already
                && let Some(previous) = &self.previous
            {
                let probe = memo
                    .and_then(|m| m.previous)
                    .unwrap_or_else(|| previous.probe(&key));
                seen |= previous.contains(probe);
            }
            memo = None;
            self.rotate_if_due(new_bits > 0);
            if self.generation == generation {
                break;
            }
            // As the proxy's doorkeeper does after a rotation: the key goes into the new `current`
            // too, and its own insert into what is now `previous` is no sighting.
            in_previous_already = true;
        }
        if seen {
            Admission::SeenBefore
        } else {
            Admission::FirstSeen
        }
    }

    /// Starts loading the blocks an observe of `fingerprint` reads: `current`'s, and `previous`'s,
    /// which it reads for every key new to `current`; keeps their hashes for that observe.
    #[inline]
    pub fn prefetch(&mut self, fingerprint: u64) {
        let key = fingerprint.to_le_bytes();
        let current = self.current.probe(&key);
        self.current.prefetch(current);
        let previous = self.previous.as_ref().map(|previous| {
            let probe = previous.probe(&key);
            previous.prefetch(probe);
            probe
        });
        self.hashed[fingerprint as usize % HASHED_SLOTS] = Hashed {
            fingerprint,
            generation: self.generation + 1,
            current: Some(current),
            previous,
        };
    }

    /// Rotations so far, by reason.
    pub fn rotations(&self) -> RotationCounts {
        self.rotations
    }

    /// Bytes the proxy's doorkeeper would hold now: one filter, or two once it has rotated.
    pub fn memory_bytes(&self) -> usize {
        self.shape.memory_bytes() * if self.previous.is_some() { 2 } else { 1 }
    }

    fn set_time(&mut self, time: f64) {
        let first = *self.first_time.get_or_insert(time);
        let elapsed = (time - first).max(0.0);
        if elapsed.is_finite() {
            self.now_nanos = self.now_nanos.max((elapsed * 1e9) as u64);
        }
    }

    fn rotate_if_due(&mut self, bits_moved: bool) {
        let reason = if bits_moved && self.current.set_bits >= self.rotate_at_set_bits {
            self.rotate_reason
        } else if self.now_nanos.saturating_sub(self.started_nanos) >= self.max_age_nanos {
            RotationReason::MaxAge
        } else {
            return;
        };
        self.generation += 1;
        let seed = generation_seed(self.seed, self.generation);
        let next = match self.previous.take() {
            Some(mut filter) => {
                filter.reset(seed);
                filter
            }
            None => Filter::new(
                self.shape.sizing().num_blocks,
                self.shape.num_hashes(),
                seed,
            ),
        };
        self.previous = Some(std::mem::replace(&mut self.current, next));
        self.started_nanos = self.now_nanos;
        match reason {
            RotationReason::FprThreshold => self.rotations.fpr_threshold += 1,
            RotationReason::Capacity => self.rotations.capacity += 1,
            RotationReason::MaxAge => self.rotations.max_age += 1,
        }
        self.set_limits();
    }

    /// The set bits at which `current` rotates, as the proxy's doorkeeper computes them.
    fn set_limits(&mut self) {
        let previous_fpr = self
            .previous
            .as_ref()
            .map_or(0.0, |p| self.shape.fpr_at_set_bits(p.set_bits));
        // The combined rate reaches rotate_at_fpr once fpr(current) reaches this.
        let current_fpr_limit = 1.0 - (1.0 - self.config.rotate_at_fpr) / (1.0 - previous_fpr);
        let fpr_limit = if current_fpr_limit > 0.0 {
            self.shape.set_bits_at_fpr(current_fpr_limit)
        } else {
            0
        };
        let capacity_limit = self.shape.set_bits_at_len(self.config.capacity);
        (self.rotate_at_set_bits, self.rotate_reason) = if capacity_limit <= fpr_limit {
            (capacity_limit, RotationReason::Capacity)
        } else {
            (fpr_limit, RotationReason::FprThreshold)
        };
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::admission::{Doorkeeper, ManualClock};

    fn config(capacity: u64) -> DoorkeeperConfig {
        DoorkeeperConfig::with_capacity(capacity)
    }

    fn key(i: u64) -> u64 {
        splitmix64(i.wrapping_add(GOLDEN_GAMMA))
    }

    #[test]
    fn a_generation_sets_exactly_the_bits_a_bloom_filter_with_its_secret_sets() {
        for (capacity, fpr) in [(1000, 0.01), (50_000, 0.001), (3, 0.2)] {
            let sizing = DoorkeeperConfig {
                target_fpr: fpr,
                ..config(capacity)
            }
            .sizing();
            let seed = generation_seed(7, 3);
            let bloom = BloomFilter::builder(capacity, fpr)
                .num_bits(sizing.num_bits())
                .num_hashes(sizing.num_hashes)
                .seed(seed)
                .build();
            let mut model = Filter::new(bloom.sizing().num_blocks, bloom.num_hashes(), seed);
            // Three capacities of keys, each distinct one twice, fill past the target.
            for i in 0..3 * capacity {
                let key = key(i / 2).to_le_bytes();
                let probe = model.probe(&key);
                assert_eq!(
                    model.contains(probe),
                    bloom.contains(&key),
                    "{capacity} {i}"
                );
                assert_eq!(model.insert(probe).0, bloom.insert(&key), "{capacity} {i}");
                assert_eq!(model.set_bits, bloom.set_bits());
            }
            assert!(model.set_bits > 0);
        }
    }

    #[test]
    fn rotates_as_often_and_for_the_same_reasons_as_the_proxys_doorkeeper() {
        for (capacity, rotate_at_fpr) in [(10_000, 0.02), (10_000, 0.011), (1000, 0.5)] {
            let config = DoorkeeperConfig {
                rotate_at_fpr,
                ..config(capacity)
            };
            let real = Doorkeeper::builder(config.clone())
                .clock(Arc::new(ManualClock::new()))
                .build()
                .unwrap();
            let mut model = DoorkeeperModel::new(&config, 1);
            let mut seen = [0u64; 2];
            for i in 0..20 * capacity {
                // Every key comes back once, 100 keys later.
                let key = key(if i % 2 == 0 { i } else { i.saturating_sub(201) });
                seen[0] += u64::from(real.observe(&key.to_le_bytes()) == Admission::SeenBefore);
                seen[1] += u64::from(model.observe(key, 0.0) == Admission::SeenBefore);
            }
            let (real, model) = (real.stats().rotations, model.rotations());
            assert!(real.total() >= 9, "{real:?}");
            // The proxy's doorkeeper notices its threshold up to a stride of bits late.
            assert!(
                real.total().abs_diff(model.total()) <= 1,
                "{real:?} {model:?}"
            );
            assert_eq!(
                (real.capacity > 0, real.fpr_threshold > 0),
                (model.capacity > 0, model.fpr_threshold > 0)
            );
            // Every returning key is seen (no false negatives); at most 3% of the new ones are
            // false positives (the combined rate stays under 2%).
            for count in seen {
                let returning = 10 * capacity;
                assert!(
                    (returning..returning + returning * 3 / 100).contains(&count),
                    "{count}"
                );
            }
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_answers_and_another_seed_other_false_positives() {
        let answers = |seed| {
            let mut model = DoorkeeperModel::new(&config(1000), seed);
            (0..20_000u64)
                .map(|i| model.observe(key(i % 15_000), i as f64) == Admission::SeenBefore)
                .collect::<Vec<_>>()
        };
        assert_eq!(answers(1), answers(1));
        assert_ne!(answers(1), answers(2));
    }

    #[test]
    fn prefetching_keys_ahead_changes_no_answer() {
        let keys: Vec<u64> = (0..30_000u64).map(|i| key(i * 7 % 9_000)).collect();
        let mut plain = DoorkeeperModel::new(&config(1000), 3);
        let mut prefetching = DoorkeeperModel::new(&config(1000), 3);
        for (index, &fingerprint) in keys.iter().enumerate() {
            // Some keys prefetched, some not, some displaced by a colliding slot.
            if let Some(&ahead) = keys.get(index + 16 + index % 3) {
                prefetching.prefetch(ahead);
            }
            assert_eq!(
                plain.observe(fingerprint, index as f64),
                prefetching.observe(fingerprint, index as f64),
                "{index}"
            );
        }
        assert!(plain.rotations().total() > 5);
        assert_eq!(plain.rotations(), prefetching.rotations());
    }

    #[test]
    fn max_age_rotates_on_trace_time_and_the_key_that_rotates_stays_seen() {
        let mut model = DoorkeeperModel::new(&config(1000), 1);
        assert_eq!(model.observe(key(1), 100.0), Admission::FirstSeen);
        assert_eq!(model.observe(key(2), 3699.0), Admission::FirstSeen);
        // An hour after the first observe: key 2 rotates the filters and goes into both.
        assert_eq!(model.observe(key(2), 3700.0), Admission::SeenBefore);
        assert_eq!(model.rotations().max_age, 1);
        assert_eq!(model.observe(key(3), 7300.0), Admission::FirstSeen);
        assert_eq!(model.rotations().max_age, 2);
        assert_eq!(model.observe(key(2), 7301.0), Admission::SeenBefore);
        assert_eq!(model.observe(key(1), 7302.0), Admission::FirstSeen);
        // Time never goes backwards.
        assert_eq!(model.observe(key(4), 0.0), Admission::FirstSeen);
        assert_eq!(model.rotations().total(), 2);
    }
}
