//! Concurrent cache-line-blocked Bloom filter.
//!
//! A [`BloomFilter`] answers "was this key inserted?" with no false negatives and a tunable rate
//! of false positives. It is built for a request path shared by many threads:
//!
//! - **One cache line per operation.** The bits are 512-bit blocks, one 64-byte cache line each;
//!   a key sets all of its `k` bits inside one block, so an insert or a lookup touches one line
//!   (a classic filter touches `k` lines).
//! - **`&self` everywhere.** Bits are `AtomicU64`; [`BloomFilter::insert`] reads the key's bits
//!   first and writes (`fetch_or`) only if one is clear, so repeated keys never take a line
//!   exclusive.
//! - **Sized for its real false-positive rate.** Blocking costs accuracy at equal memory; the
//!   sizing model (see [`Sizing`]) accounts for it, so the rate at `capacity` keys is at most the
//!   target, not the unblocked formula's promise.
//! - **Keyed.** Positions come from SipHash-1-3 keyed with a random secret (see [`Seed`]).
//!
//! # Examples
//! ```
//! use doorkeeper::bloom::BloomFilter;
//!
//! let filter = BloomFilter::with_capacity(1_000_000, 0.01);
//! assert!(!filter.insert(b"https://example.com/a.jpg"));
//! assert!(filter.insert(b"https://example.com/a.jpg"));
//! assert!(filter.contains(b"https://example.com/a.jpg"));
//! ```

mod counter;
mod hash;
mod math;
mod prefetch;
pub(crate) mod snapshot;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use counter::SetBitCounter;
pub(crate) use hash::Key;
use hash::{BLOCK_WORDS, KeyHasher, Probe};

use math::{BLOCK_BITS, BlockModel};

pub use hash::Seed;
pub use math::{MAX_HASHES, Sizing};
pub use prefetch::prefetch;
pub use snapshot::SnapshotError;

/// The key's bits that are clear in `block`, folded into one word: 0 if all are set.
#[inline]
fn missing_bits(block: &[AtomicU64; BLOCK_WORDS], positions: impl Iterator<Item = usize>) -> u64 {
    positions.fold(0, |missing, position| {
        missing | (!block[position / 64].load(Relaxed) & (1 << (position % 64)))
    })
}

/// One cache line of bits.
#[repr(C, align(64))]
#[derive(Default)]
struct Block([AtomicU64; BLOCK_WORDS]);

/// A concurrent Bloom filter over byte-string keys, one cache line per key.
///
/// Two threads inserting the same new key at the same moment may both be told it was absent
/// (each sets some of its bits first); neither race nor rotation ever makes a later lookup miss
/// an inserted key.
pub struct BloomFilter {
    blocks: Box<[Block]>,
    num_hashes: u32,
    capacity: u64,
    target_fpr: f64,
    seed: Seed,
    hasher: KeyHasher,
    model: BlockModel,
    set_bits: SetBitCounter,
}

/// Builds a [`BloomFilter`]; read it as a sentence:
/// `BloomFilter::builder(1_000_000, 0.01).seed(42).build()`.
#[derive(Debug, Clone)]
pub struct BloomFilterBuilder {
    capacity: u64,
    target_fpr: f64,
    seed: Option<Seed>,
    num_bits: Option<u64>,
    num_hashes: Option<u32>,
}

/// Why two filters cannot be combined.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IncompatibleFilters {
    /// The filters have different sizes.
    #[error("filters have different sizes: {left} bits and {right} bits")]
    NumBits {
        /// Bits of the left-hand filter.
        left: u64,
        /// Bits of the right-hand filter.
        right: u64,
    },
    /// The filters set different numbers of bits per key.
    #[error("filters set different numbers of bits per key: {left} and {right}")]
    NumHashes {
        /// Bits per key of the left-hand filter.
        left: u32,
        /// Bits per key of the right-hand filter.
        right: u32,
    },
    /// The filters hash with different secrets, so their bit positions do not correspond.
    #[error("filters are keyed with different seeds, so the same key sets different bits")]
    Seed,
}

/// What an insert found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Insertion {
    /// Every bit of the key was already set.
    pub(crate) was_present: bool,
    /// The set-bit count moved past a reporting stride: time to compare it with a threshold.
    pub(crate) count_reported: bool,
}

impl Insertion {
    /// Every bit was set already; nothing written.
    pub(crate) const PRESENT: Insertion = Insertion {
        was_present: true,
        count_reported: false,
    };
}

impl BloomFilter {
    /// An empty filter for `capacity` keys at false-positive rate `target_fpr`, keyed with a
    /// random secret.
    ///
    /// # Panics
    /// Panics if `capacity` is 0 or `target_fpr` is not strictly between 0 and 1.
    ///
    /// # Examples
    /// ```
    /// use doorkeeper::bloom::BloomFilter;
    ///
    /// let filter = BloomFilter::with_capacity(10_000, 0.001);
    /// assert!(filter.num_bits() >= 10_000 * 14);
    /// ```
    pub fn with_capacity(capacity: u64, target_fpr: f64) -> Self {
        Self::builder(capacity, target_fpr).build()
    }

    /// A builder for `capacity` keys at false-positive rate `target_fpr`; set a seed for a
    /// reproducible filter, or fix its size.
    ///
    /// # Examples
    /// ```
    /// use doorkeeper::bloom::BloomFilter;
    ///
    /// let a = BloomFilter::builder(1000, 0.01).seed(42).build();
    /// let b = BloomFilter::builder(1000, 0.01).seed(42).build();
    /// a.insert(b"k");
    /// b.insert(b"k");
    /// assert_eq!(a, b);
    /// ```
    pub fn builder(capacity: u64, target_fpr: f64) -> BloomFilterBuilder {
        BloomFilterBuilder {
            capacity,
            target_fpr,
            seed: None,
            num_bits: None,
            num_hashes: None,
        }
    }

    fn from_parts(
        sizing: Sizing,
        capacity: u64,
        target_fpr: f64,
        seed: Seed,
        words: Option<&[u64]>,
    ) -> Self {
        let blocks: Box<[Block]> = match words {
            Some(words) => words
                .chunks_exact(BLOCK_WORDS)
                .map(|chunk| Block(std::array::from_fn(|i| AtomicU64::new(chunk[i]))))
                .collect(),
            None => (0..sizing.num_blocks).map(|_| Block::default()).collect(),
        };
        let set_bits = words.map_or(0, |w| w.iter().map(|x| u64::from(x.count_ones())).sum());
        Self {
            blocks,
            num_hashes: sizing.num_hashes,
            capacity,
            target_fpr,
            seed,
            hasher: KeyHasher::new(seed),
            model: BlockModel::new(sizing.num_hashes),
            set_bits: SetBitCounter::new(sizing.num_bits(), set_bits),
        }
    }

    #[inline]
    fn probe(&self, key: Key<'_>) -> Probe {
        self.hasher
            .probe(key, self.blocks.len() as u64, self.num_hashes)
    }

    /// Inserts `key`; returns true if it was (probably) present already.
    ///
    /// # Examples
    /// ```
    /// use doorkeeper::bloom::BloomFilter;
    ///
    /// let filter = BloomFilter::with_capacity(100, 0.01);
    /// assert!(!filter.insert(b"a"));
    /// assert!(filter.insert(b"a"));
    /// ```
    #[inline]
    pub fn insert(&self, key: &[u8]) -> bool {
        self.insert_reporting(Key::Bytes(key)).was_present
    }

    #[inline]
    pub(crate) fn insert_reporting(&self, key: Key<'_>) -> Insertion {
        self.insert_probe(self.probe(key))
    }

    /// Hashes `key` and starts loading its cache line, for an [`Self::insert_probe`] or
    /// [`Self::contains_probe`] a little later: a caller about to read two filters locates the
    /// key in both first, so that the two cache misses overlap instead of following each other.
    #[inline]
    pub(crate) fn locate(&self, key: Key<'_>) -> Probe {
        let probe = self.probe(key);
        prefetch::prefetch(&self.blocks[probe.block]);
        probe
    }

    /// [`Self::insert_reporting`] of a key this filter has located.
    #[inline]
    pub(crate) fn insert_probe(&self, probe: Probe) -> Insertion {
        let block = &self.blocks[probe.block].0;
        // Read first, so that a repeated key writes nothing and its line stays shared in every
        // core's cache. One test of all the bits rather than a branch per bit: each such branch
        // waits for the block's cache miss and mispredicts, throwing away the work done under it.
        if missing_bits(block, probe.positions.clone()) == 0 {
            return Insertion::PRESENT;
        }
        // Set every bit, without a branch per bit on whether it is already set (as above); the
        // words' old values say which bits this call set.
        let new_bits: u32 = probe
            .positions
            .map(|position| {
                let bit = 1 << (position % 64);
                u32::from(block[position / 64].fetch_or(bit, Relaxed) & bit == 0)
            })
            .sum();
        // Another thread may have set the missing bits meanwhile: then the key was present.
        if new_bits == 0 {
            return Insertion::PRESENT;
        }
        Insertion {
            was_present: false,
            count_reported: self.set_bits.add(new_bits),
        }
    }

    /// True if `key` was (probably) inserted; never false for an inserted key.
    #[inline]
    pub fn contains(&self, key: &[u8]) -> bool {
        self.contains_probe(self.probe(Key::Bytes(key)))
    }

    /// [`Self::contains`] of a key this filter has located.
    #[inline]
    pub(crate) fn contains_probe(&self, mut probe: Probe) -> bool {
        let block = &self.blocks[probe.block].0;
        // A branch per bit here, unlike in insert: a present key predicts them all. Folding the
        // bits as insert does made absent lookups 16% faster but present ones 4-6% slower.
        probe
            .positions
            .all(|position| block[position / 64].load(Relaxed) & (1 << (position % 64)) != 0)
    }

    /// Bits set, counted as they are set (exact when no insert is in flight).
    pub fn set_bits(&self) -> u64 {
        self.set_bits.total()
    }

    /// Fraction of bits set.
    pub fn fill_ratio(&self) -> f64 {
        self.set_bits() as f64 / self.num_bits() as f64
    }

    /// Estimated number of distinct keys inserted, from the fill ratio (Swamidass and Baldi's
    /// estimator, with the blocked layout's per-block rate; see [`Sizing`]). Infinite once every
    /// bit is set.
    pub fn estimated_len(&self) -> f64 {
        self.estimated_len_at(self.set_bits())
    }

    fn estimated_len_at(&self, set_bits: u64) -> f64 {
        let fill = set_bits as f64 / self.num_bits() as f64;
        self.model.keys_per_block(fill) * self.blocks.len() as f64
    }

    /// Estimated false-positive rate now, from the fill ratio and the per-block model (the
    /// unblocked `fill^k` underestimates it).
    pub fn estimated_fpr(&self) -> f64 {
        self.fpr_at_set_bits(self.set_bits())
    }

    /// The estimated false-positive rate of this filter's shape once `set_bits` of its bits are
    /// set: [`Self::estimated_fpr`] for a count other than its own (a model of the filter, such as
    /// a simulator's, keeps its own count).
    pub fn fpr_at_set_bits(&self, set_bits: u64) -> f64 {
        let fill = set_bits as f64 / self.num_bits() as f64;
        self.model
            .false_positive_rate(self.model.keys_per_block(fill))
    }

    /// The fewest set bits at which the estimated false-positive rate reaches `fpr`
    /// ([`Self::estimated_fpr`] is a monotone function of the set-bit count).
    pub fn set_bits_at_fpr(&self, fpr: f64) -> u64 {
        let load = self.model.max_keys_per_block(fpr);
        (self.model.fill_ratio(load) * self.num_bits() as f64).ceil() as u64
    }

    /// The fewest set bits at which [`Self::estimated_len`] reaches `len`.
    pub fn set_bits_at_len(&self, len: u64) -> u64 {
        let load = len as f64 / self.blocks.len() as f64;
        (self.model.fill_ratio(load) * self.num_bits() as f64).ceil() as u64
    }

    /// Bits in the filter (a multiple of 512).
    pub fn num_bits(&self) -> u64 {
        self.blocks.len() as u64 * BLOCK_BITS
    }

    /// Bits set per key.
    pub fn num_hashes(&self) -> u32 {
        self.num_hashes
    }

    /// Heap and inline bytes held by the filter.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + std::mem::size_of_val(&*self.blocks)
            + self.set_bits.memory_bytes()
    }

    /// The number of keys the filter was sized for.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The false-positive rate the filter was sized for at [`Self::capacity`] keys.
    pub fn target_fpr(&self) -> f64 {
        self.target_fpr
    }

    /// The filter's size and bits per key.
    pub fn sizing(&self) -> Sizing {
        Sizing {
            num_blocks: self.blocks.len() as u64,
            num_hashes: self.num_hashes,
        }
    }

    /// The secret the filter hashes with. Treat it like a key: whoever knows it can forge keys
    /// that look present.
    pub fn seed(&self) -> Seed {
        self.seed
    }

    fn words(&self) -> impl Iterator<Item = u64> + '_ {
        self.blocks
            .iter()
            .flat_map(|b| b.0.iter().map(|w| w.load(Relaxed)))
    }

    fn check_compatible(&self, other: &Self) -> Result<(), IncompatibleFilters> {
        if self.num_bits() != other.num_bits() {
            return Err(IncompatibleFilters::NumBits {
                left: self.num_bits(),
                right: other.num_bits(),
            });
        }
        if self.num_hashes != other.num_hashes {
            return Err(IncompatibleFilters::NumHashes {
                left: self.num_hashes,
                right: other.num_hashes,
            });
        }
        if self.seed != other.seed {
            return Err(IncompatibleFilters::Seed);
        }
        Ok(())
    }

    fn combine(&self, other: &Self, op: impl Fn(u64, u64) -> u64) -> Self {
        let words: Vec<u64> = self
            .words()
            .zip(other.words())
            .map(|(a, b)| op(a, b))
            .collect();
        Self::from_parts(
            self.sizing(),
            self.capacity,
            self.target_fpr,
            self.seed,
            Some(&words),
        )
    }

    /// A filter holding the keys of both: bit for bit the filter built from all their keys.
    ///
    /// # Examples
    /// ```
    /// use doorkeeper::bloom::BloomFilter;
    ///
    /// let a = BloomFilter::builder(100, 0.01).seed(1).build();
    /// let b = BloomFilter::builder(100, 0.01).seed(1).build();
    /// a.insert(b"x");
    /// b.insert(b"y");
    /// let both = a.union(&b)?;
    /// assert!(both.contains(b"x") && both.contains(b"y"));
    /// # Ok::<(), doorkeeper::bloom::IncompatibleFilters>(())
    /// ```
    pub fn union(&self, other: &Self) -> Result<Self, IncompatibleFilters> {
        self.check_compatible(other)?;
        Ok(self.combine(other, |a, b| a | b))
    }

    /// A filter of the bits both share: it contains every key inserted into both (and, more
    /// often than a filter built from those keys alone, keys that set bits in each separately).
    pub fn intersection(&self, other: &Self) -> Result<Self, IncompatibleFilters> {
        self.check_compatible(other)?;
        Ok(self.combine(other, |a, b| a & b))
    }

    /// Estimated number of distinct keys in either filter.
    pub fn estimated_union_len(&self, other: &Self) -> Result<f64, IncompatibleFilters> {
        self.check_compatible(other)?;
        let set_bits = self
            .words()
            .zip(other.words())
            .map(|(a, b)| u64::from((a | b).count_ones()))
            .sum();
        Ok(self.estimated_len_at(set_bits))
    }

    /// Estimated number of distinct keys in both filters: |A| + |B| - |A ∪ B| (Swamidass and
    /// Baldi), never below 0.
    pub fn estimated_intersection_len(&self, other: &Self) -> Result<f64, IncompatibleFilters> {
        let union = self.estimated_union_len(other)?;
        Ok((self.estimated_len() + other.estimated_len() - union).max(0.0))
    }
}

impl BloomFilterBuilder {
    /// Hashes with this secret instead of a random one (reproducible filters, tests).
    pub fn seed(mut self, seed: impl Into<Seed>) -> Self {
        self.seed = Some(seed.into());
        self
    }

    /// Uses `num_bits` bits (rounded up to whole 512-bit blocks) instead of sizing for the
    /// target; bits per key are then chosen for the lowest false-positive rate at capacity.
    pub fn num_bits(mut self, num_bits: u64) -> Self {
        self.num_bits = Some(num_bits);
        self
    }

    /// Sets this many bits per key instead of the model's choice.
    ///
    /// # Panics
    /// [`Self::build`] panics if `num_hashes` is outside `1..=MAX_HASHES`.
    pub fn num_hashes(mut self, num_hashes: u32) -> Self {
        self.num_hashes = Some(num_hashes);
        self
    }

    /// The size and bits per key the filter will have.
    pub fn sizing(&self) -> Sizing {
        match (self.num_bits, self.num_hashes) {
            (Some(bits), Some(num_hashes)) => Sizing {
                num_blocks: bits.div_ceil(BLOCK_BITS).max(1),
                num_hashes,
            },
            (Some(bits), None) => Sizing::for_bits(self.capacity, bits),
            (None, num_hashes) => {
                let sizing = Sizing::for_capacity(self.capacity, self.target_fpr);
                Sizing {
                    num_hashes: num_hashes.unwrap_or(sizing.num_hashes),
                    ..sizing
                }
            }
        }
    }

    /// Builds the empty filter.
    ///
    /// # Panics
    /// Panics if the capacity is 0, the target rate is not strictly between 0 and 1, the bit
    /// count is 0 or the bits per key are outside `1..=MAX_HASHES`.
    pub fn build(self) -> BloomFilter {
        assert!(self.capacity > 0, "bloom filter capacity must be above 0");
        assert!(
            self.target_fpr > 0.0 && self.target_fpr < 1.0,
            "bloom filter target_fpr = {} must be in (0, 1)",
            self.target_fpr
        );
        assert!(
            self.num_bits != Some(0),
            "bloom filter num_bits must be above 0"
        );
        let sizing = self.sizing();
        assert!(
            (1..=MAX_HASHES).contains(&sizing.num_hashes),
            "bloom filter num_hashes = {} must be in 1..={MAX_HASHES}",
            sizing.num_hashes
        );
        BloomFilter::from_parts(
            sizing,
            self.capacity,
            self.target_fpr,
            self.seed.unwrap_or_else(Seed::random),
            None,
        )
    }
}

impl Clone for BloomFilter {
    fn clone(&self) -> Self {
        let words: Vec<u64> = self.words().collect();
        Self::from_parts(
            self.sizing(),
            self.capacity,
            self.target_fpr,
            self.seed,
            Some(&words),
        )
    }
}

/// Equal when keyed alike and holding the same bits.
impl PartialEq for BloomFilter {
    fn eq(&self, other: &Self) -> bool {
        self.check_compatible(other).is_ok() && self.words().eq(other.words())
    }
}

impl Eq for BloomFilter {}

impl std::fmt::Debug for BloomFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BloomFilter")
            .field("num_bits", &self.num_bits())
            .field("num_hashes", &self.num_hashes)
            .field("capacity", &self.capacity)
            .field("target_fpr", &self.target_fpr)
            .field("set_bits", &self.set_bits())
            .finish_non_exhaustive()
    }
}
