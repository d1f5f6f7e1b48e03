//! The doorkeeper: a rotating pair of Bloom filters that answers "seen before?".

mod clock;
mod snapshot;
mod upkeep;

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use crate::bloom::{BloomFilter, Key, Seed, Sizing};
use upkeep::Upkeep;

pub use clock::{Clock, ManualClock, SystemClock};
pub use snapshot::DoorkeeperSnapshotError;

/// How the doorkeeper sizes its filters and when it rotates them.
///
/// The proxy reads these from the `[admission]` table of its config file under the same names.
#[derive(Debug, Clone, PartialEq)]
pub struct DoorkeeperConfig {
    /// Distinct keys one generation holds; each filter is sized for it. At least 1.
    pub capacity: u64,
    /// False-positive rate of one filter at `capacity` keys, in (0, 1).
    pub target_fpr: f64,
    /// Rotate when `1 - (1 - fpr(current)) * (1 - fpr(previous))` reaches this; in (`target_fpr`, 1).
    pub rotate_at_fpr: f64,
    /// Rotate when `current` is this old. Above zero.
    pub max_age: Duration,
}

/// Why a [`DoorkeeperConfig`] cannot be used: the field at fault and the value it holds.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("doorkeeper {}: {}", self.field(), self.problem())]
pub enum DoorkeeperConfigError {
    /// `capacity` is 0.
    ZeroCapacity,
    /// `target_fpr` is not in (0, 1).
    TargetFpr(f64),
    /// `rotate_at_fpr` is not in (0, 1).
    RotateAtFpr(f64),
    /// `rotate_at_fpr` is not above `target_fpr`.
    RotateAtFprNotAboveTarget {
        /// The configured rotation threshold.
        rotate_at_fpr: f64,
        /// The configured per-filter target.
        target_fpr: f64,
    },
    /// `max_age` is zero.
    ZeroMaxAge,
}

impl DoorkeeperConfigError {
    /// The name of the field at fault, as in [`DoorkeeperConfig`] and the config file.
    pub fn field(&self) -> &'static str {
        match self {
            Self::ZeroCapacity => "capacity",
            Self::TargetFpr(_) => "target_fpr",
            Self::RotateAtFpr(_) | Self::RotateAtFprNotAboveTarget { .. } => "rotate_at_fpr",
            Self::ZeroMaxAge => "max_age",
        }
    }

    /// What is wrong with the field's value, without the field's name.
    pub fn problem(&self) -> String {
        match self {
            Self::ZeroCapacity => "must be at least 1, got 0".to_owned(),
            Self::TargetFpr(fpr) | Self::RotateAtFpr(fpr) => format!("{fpr:?} must be in (0, 1)"),
            Self::RotateAtFprNotAboveTarget {
                rotate_at_fpr,
                target_fpr,
            } => format!("{rotate_at_fpr:?} must be greater than target_fpr ({target_fpr:?})"),
            Self::ZeroMaxAge => "must be greater than 0, got 0s".to_owned(),
        }
    }
}

/// The shipped defaults: [`DoorkeeperConfig::with_capacity`] one million keys.
impl Default for DoorkeeperConfig {
    fn default() -> Self {
        DoorkeeperConfig::with_capacity(1_000_000)
    }
}

impl DoorkeeperConfig {
    /// The shipped defaults (`config/bloomgate.toml`: `target_fpr` 0.01, `rotate_at_fpr` 0.02,
    /// `max_age` one hour) for a doorkeeper of `capacity` keys.
    pub fn with_capacity(capacity: u64) -> Self {
        DoorkeeperConfig {
            capacity,
            target_fpr: 0.01,
            rotate_at_fpr: 0.02,
            max_age: Duration::from_secs(3600),
        }
    }

    /// Checks the ranges documented on each field; the error is the first of [`Self::problems`].
    pub fn validate(&self) -> Result<(), DoorkeeperConfigError> {
        match self.problems().into_iter().next() {
            Some(problem) => Err(problem),
            None => Ok(()),
        }
    }

    /// Every field outside its documented range, in field order; empty when the config is usable.
    ///
    /// `rotate_at_fpr` must exceed `target_fpr`: a generation that ended at its capacity leaves a
    /// `previous` at about `target_fpr`, and a threshold below that would rotate on every insert.
    pub fn problems(&self) -> Vec<DoorkeeperConfigError> {
        let in_unit_interval = |p: f64| p > 0.0 && p < 1.0;
        let mut problems = Vec::new();
        if self.capacity == 0 {
            problems.push(DoorkeeperConfigError::ZeroCapacity);
        }
        if !in_unit_interval(self.target_fpr) {
            problems.push(DoorkeeperConfigError::TargetFpr(self.target_fpr));
        }
        if !in_unit_interval(self.rotate_at_fpr) {
            problems.push(DoorkeeperConfigError::RotateAtFpr(self.rotate_at_fpr));
        } else if in_unit_interval(self.target_fpr) && self.rotate_at_fpr <= self.target_fpr {
            problems.push(DoorkeeperConfigError::RotateAtFprNotAboveTarget {
                rotate_at_fpr: self.rotate_at_fpr,
                target_fpr: self.target_fpr,
            });
        }
        if self.max_age.is_zero() {
            problems.push(DoorkeeperConfigError::ZeroMaxAge);
        }
        problems
    }

    /// The size and bits per key of each filter.
    pub fn sizing(&self) -> Sizing {
        Sizing::for_capacity(self.capacity, self.target_fpr)
    }
}

/// What the doorkeeper says about a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Admission {
    /// Not seen in the current or the previous generation.
    FirstSeen,
    /// Seen before (or a false positive).
    SeenBefore,
}

/// Why the doorkeeper rotated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RotationReason {
    /// The combined false-positive estimate reached `rotate_at_fpr`.
    FprThreshold,
    /// `current` reached its capacity.
    Capacity,
    /// `current` reached `max_age`.
    MaxAge,
}

impl RotationReason {
    /// Every reason, in label order.
    pub const ALL: [RotationReason; 3] = [
        RotationReason::FprThreshold,
        RotationReason::Capacity,
        RotationReason::MaxAge,
    ];

    /// The reason as a Prometheus label value.
    pub fn as_str(&self) -> &'static str {
        match self {
            RotationReason::FprThreshold => "fpr_threshold",
            RotationReason::Capacity => "capacity",
            RotationReason::MaxAge => "max_age",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Rotations since the doorkeeper started, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RotationCounts {
    /// Rotations because the combined false-positive estimate reached `rotate_at_fpr`.
    pub fpr_threshold: u64,
    /// Rotations because `current` reached its capacity.
    pub capacity: u64,
    /// Rotations because `current` reached `max_age`.
    pub max_age: u64,
}

impl RotationCounts {
    /// The count for one reason.
    pub fn get(&self, reason: RotationReason) -> u64 {
        match reason {
            RotationReason::FprThreshold => self.fpr_threshold,
            RotationReason::Capacity => self.capacity,
            RotationReason::MaxAge => self.max_age,
        }
    }

    /// All rotations.
    pub fn total(&self) -> u64 {
        self.fpr_threshold + self.capacity + self.max_age
    }
}

/// One filter's state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GenerationStats {
    /// Fraction of bits set.
    pub fill_ratio: f64,
    /// Estimated distinct keys.
    pub estimated_items: f64,
    /// Estimated false-positive rate.
    pub estimated_fpr: f64,
    /// Bits in the filter.
    pub num_bits: u64,
    /// Bytes the filter holds.
    pub memory_bytes: usize,
}

impl GenerationStats {
    fn of(filter: &BloomFilter) -> Self {
        Self {
            fill_ratio: filter.fill_ratio(),
            estimated_items: filter.estimated_len(),
            estimated_fpr: filter.estimated_fpr(),
            num_bits: filter.num_bits(),
            memory_bytes: filter.memory_bytes(),
        }
    }
}

/// The doorkeeper's state at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct DoorkeeperStats {
    /// Rotations so far; the first generation is 0.
    pub generation: u64,
    /// The filter taking inserts.
    pub current: GenerationStats,
    /// The read-only filter of the generation before, if there has been one.
    pub previous: Option<GenerationStats>,
    /// `1 - (1 - fpr(current)) * (1 - fpr(previous))`: the rate at which a new key is taken
    /// for one seen before.
    pub combined_fpr: f64,
    /// Rotations by reason.
    pub rotations: RotationCounts,
    /// Bytes held by both filters.
    pub memory_bytes: usize,
    /// Bytes of the next generation's filter, zeroed ahead of its rotation; 0 until prepared.
    pub spare_memory_bytes: usize,
    /// How long `current` has been taking inserts.
    pub current_age: Duration,
    /// The fullest a filter has been when it left `previous`, as a multiple of the set bits at
    /// which its generation was due to rotate: above 1.0, observes went on inserting after the
    /// threshold was crossed. 0 until a filter that rotated by its bits has retired.
    pub max_retired_fill: f64,
}

/// One generation: the pair of filters, when `current` must rotate, and the next `current`.
struct Generation {
    number: u64,
    current: Arc<BloomFilter>,
    previous: Option<Arc<BloomFilter>>,
    /// The set bits at which `previous`'s own generation was due to rotate, if known.
    previous_limit: Option<u64>,
    /// When `current` is due to rotate by its bits. Computed on first need (by the upkeep thread,
    /// usually), not before the swap: the search takes microseconds, during which other threads
    /// would go on inserting into the full generation.
    limit: OnceLock<Limit>,
    started: Instant,
    expires: Option<Instant>,
    /// The next generation's `current`, zeroed ahead of the rotation.
    successor: OnceLock<Arc<BloomFilter>>,
}

/// Set bits of `current` at which the lower of its fpr and capacity limits is reached.
#[derive(Debug, Clone, Copy)]
struct Limit {
    set_bits: u64,
    reason: RotationReason,
}

impl Generation {
    fn new(
        number: u64,
        current: Arc<BloomFilter>,
        previous: Option<Arc<BloomFilter>>,
        previous_limit: Option<u64>,
        config: &DoorkeeperConfig,
        started: Instant,
    ) -> Self {
        Self {
            number,
            current,
            previous,
            previous_limit,
            limit: OnceLock::new(),
            started,
            expires: started.checked_add(config.max_age),
            successor: OnceLock::new(),
        }
    }

    fn limit(&self, config: &DoorkeeperConfig) -> Limit {
        *self.limit.get_or_init(|| self.compute_limit(config))
    }

    fn compute_limit(&self, config: &DoorkeeperConfig) -> Limit {
        let previous_fpr = self.previous.as_ref().map_or(0.0, |p| p.estimated_fpr());
        // The combined rate reaches rotate_at_fpr once fpr(current) reaches this.
        let current_fpr_limit = 1.0 - (1.0 - config.rotate_at_fpr) / (1.0 - previous_fpr);
        let fpr_limit = if current_fpr_limit > 0.0 {
            self.current.set_bits_at_fpr(current_fpr_limit)
        } else {
            0
        };
        let capacity_limit = self.current.set_bits_at_len(config.capacity);
        if capacity_limit <= fpr_limit {
            Limit {
                set_bits: capacity_limit,
                reason: RotationReason::Capacity,
            }
        } else {
            Limit {
                set_bits: fpr_limit,
                reason: RotationReason::FprThreshold,
            }
        }
    }

    /// The next generation's filter, zeroed now if the upkeep thread has not done it yet.
    fn successor(&self, config: &DoorkeeperConfig, sizing: Sizing) -> &Arc<BloomFilter> {
        self.successor
            .get_or_init(|| Arc::new(fresh_filter(config, sizing)))
    }

    /// Does ahead of time what a rotation away from this generation, and the first check of its
    /// threshold, would otherwise do on a request. Each value is made before it is offered, so a
    /// request thread that needs it meanwhile makes its own rather than waiting for this
    /// low-priority caller to be scheduled.
    fn prepare(&self, config: &DoorkeeperConfig, sizing: Sizing) {
        if self.limit.get().is_none() {
            let _ = self.limit.set(self.compute_limit(config));
        }
        if self.successor.get().is_none() {
            let _ = self.successor.set(Arc::new(fresh_filter(config, sizing)));
        }
    }
}

/// Answers "has this key been seen in the recent window?" for many threads at once.
///
/// [`Doorkeeper::observe`] inserts a key into the `current` filter and reports whether it was in
/// `current` or `previous` already. When `current` fills up (by the combined false-positive
/// estimate or by its capacity) or grows old, the doorkeeper rotates: `previous = current`,
/// `current` = a fresh filter with a fresh random key. A key is therefore remembered for between
/// one and two generations.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use doorkeeper::{Admission, Doorkeeper, DoorkeeperConfig};
///
/// let door = Doorkeeper::builder(DoorkeeperConfig {
///     capacity: 100_000,
///     target_fpr: 0.01,
///     rotate_at_fpr: 0.02,
///     max_age: Duration::from_secs(3600),
/// })
/// .build()?;
/// assert_eq!(door.observe(b"https://example.com/a.jpg"), Admission::FirstSeen);
/// assert_eq!(door.observe(b"https://example.com/a.jpg"), Admission::SeenBefore);
/// # Ok::<(), doorkeeper::DoorkeeperConfigError>(())
/// ```
///
/// # Concurrency
///
/// Readers never lock: the pair lives in an [`ArcSwap`], and a rotation builds the next pair
/// and swaps it in with a compare-and-swap on that pointer, so exactly one thread performs a
/// given rotation and none waits for another: every thread that finds the threshold crossed
/// tries, and a rotating thread that is preempted cannot hold the others in a generation that
/// is already full. The next generation's filter is zeroed ahead of time by an upkeep thread,
/// which also frees retired filters, so a rotation costs a request no more than building the
/// small value that describes a generation.
///
/// **No lost keys.** An observe takes effect at one instant between its call and its return: the
/// last time it reads the generation number, which it does after inserting. If the number moved
/// since the pair it inserted into was loaded, it inserts again into the newer `current` and
/// reads again, so when it returns the key is in the `current` filter of the generation it last
/// read, `g`. That filter stays readable (as `current`, then `previous`) until generation `g + 2`
/// is installed. A later observe of the same key (ordered after the first by any
/// synchronisation, so the bits are visible) that takes effect in generation `g` or `g + 1`
/// therefore finds it: a key observed twice within one generation of each other is always
/// [`Admission::SeenBefore`], however many rotations run meanwhile. Two racing first observes
/// of one key may both be told [`Admission::FirstSeen`].
pub struct Doorkeeper {
    config: DoorkeeperConfig,
    sizing: Sizing,
    clock: Arc<dyn Clock>,
    generation: ArcSwap<Generation>,
    rotations: [AtomicU64; 3],
    /// `f64` bits of [`DoorkeeperStats::max_retired_fill`] (non-negative floats order as their bits).
    max_retired_fill: AtomicU64,
    upkeep: Upkeep,
}

/// Builds a [`Doorkeeper`]: [`Doorkeeper::builder`], then [`Self::build`] for empty filters or
/// [`Self::restore`] to resume from a snapshot.
pub struct DoorkeeperBuilder {
    config: DoorkeeperConfig,
    clock: Arc<dyn Clock>,
}

impl DoorkeeperBuilder {
    /// Reads time from `clock` (default: [`SystemClock`]); tests use a [`ManualClock`].
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// A doorkeeper with empty filters, or why the config is invalid (see
    /// [`DoorkeeperConfig::validate`]).
    pub fn build(self) -> Result<Doorkeeper, DoorkeeperConfigError> {
        let DoorkeeperBuilder { config, clock } = self;
        config.validate()?;
        let sizing = config.sizing();
        let first = Generation::new(
            0,
            Arc::new(fresh_filter(&config, sizing)),
            None,
            None,
            &config,
            clock.now(),
        );
        Ok(Doorkeeper::from_generation(
            config, sizing, clock, first, [0; 3],
        ))
    }

    /// A doorkeeper that resumes from [`Doorkeeper::snapshot`] bytes, or why they (or the config)
    /// cannot be used. The current generation's age restarts at zero.
    pub fn restore(self, snapshot: &[u8]) -> Result<Doorkeeper, DoorkeeperSnapshotError> {
        Doorkeeper::from_snapshot(self.config, self.clock, snapshot)
    }
}

/// Every this many observes a thread reads the clock for the max-age check (a clock read costs
/// about as much as the rest of an observe); inserts that move the set-bit count also read it.
/// Both also compare the set bits with the threshold: once a generation is full, inserts set no
/// new bits, so the count alone would never be looked at again.
const OBSERVES_PER_CLOCK_READ: u32 = 32;

thread_local! {
    static OBSERVES_UNTIL_CLOCK_READ: Cell<u32> = const { Cell::new(0) };
}

fn clock_read_due() -> bool {
    OBSERVES_UNTIL_CLOCK_READ.with(|left| {
        let due = left.get() == 0;
        left.set(if due {
            OBSERVES_PER_CLOCK_READ - 1
        } else {
            left.get() - 1
        });
        due
    })
}

impl Doorkeeper {
    /// A builder of a doorkeeper sized and rotated as `config` says, on the system clock.
    ///
    /// # Examples
    /// ```
    /// use doorkeeper::{Doorkeeper, DoorkeeperConfig};
    ///
    /// let door = Doorkeeper::builder(DoorkeeperConfig::with_capacity(10_000)).build()?;
    /// assert_eq!(door.generation(), 0);
    /// # Ok::<(), doorkeeper::DoorkeeperConfigError>(())
    /// ```
    pub fn builder(config: DoorkeeperConfig) -> DoorkeeperBuilder {
        DoorkeeperBuilder {
            config,
            clock: Arc::new(SystemClock),
        }
    }

    fn from_generation(
        config: DoorkeeperConfig,
        sizing: Sizing,
        clock: Arc<dyn Clock>,
        generation: Generation,
        rotations: [u64; 3],
    ) -> Self {
        let generation = Arc::new(generation);
        let upkeep = Upkeep::start(config.clone(), sizing);
        upkeep.prepare(Arc::clone(&generation));
        Self {
            config,
            sizing,
            clock,
            generation: ArcSwap::new(generation),
            rotations: rotations.map(AtomicU64::new),
            max_retired_fill: AtomicU64::new(0),
            upkeep,
        }
    }

    /// Records a request for `key` and says whether it was seen in the current or previous
    /// generation. May rotate the filters (see the module docs for the guarantees).
    ///
    /// Costs one keyed hash and one cache line when the key is in `current`; a key new to
    /// `current` also costs a lookup in `previous`, which hashes with its own key.
    pub fn observe(&self, key: &[u8]) -> Admission {
        self.observe_key(Key::Bytes(key))
    }

    /// [`Self::observe`] of the concatenation of `parts`, which are hashed in turn: a key made of
    /// a host and a path, or of a hash and a tenant, needs no buffer.
    ///
    /// # Examples
    /// ```
    /// use doorkeeper::{Admission, Doorkeeper, DoorkeeperConfig};
    ///
    /// let door = Doorkeeper::builder(DoorkeeperConfig::with_capacity(10_000)).build()?;
    /// assert_eq!(door.observe_parts(&[b"example.com", b"/a.jpg"]), Admission::FirstSeen);
    /// assert_eq!(door.observe(b"example.com/a.jpg"), Admission::SeenBefore);
    /// # Ok::<(), doorkeeper::DoorkeeperConfigError>(())
    /// ```
    pub fn observe_parts(&self, parts: &[&[u8]]) -> Admission {
        self.observe_key(Key::Parts(parts))
    }

    /// [`Self::observe`] of a key the caller has hashed already (as fastbloom's `insert_hash`):
    /// its bytes are not read again, and each generation keys the 64-bit `hash` with its own
    /// secret (one SipHash of 8 bytes), so rotation still gives fresh positions. The same as
    /// observing `hash.to_le_bytes()`.
    ///
    /// Two keys with one `hash` are one key here: the caller's hash must resist collisions as
    /// far as its keys can be chosen by others (a keyed hash, or a cryptographic one).
    pub fn observe_hash(&self, hash: u64) -> Admission {
        self.observe_key(Key::Hash(hash))
    }

    #[inline]
    fn observe_key(&self, key: Key<'_>) -> Admission {
        // A guard, not a clone of the Arc: cloning would bump one shared reference count from
        // every thread on every request.
        let mut generation = self.generation.load();
        let mut seen = false;
        let mut inserted_into: Option<Arc<BloomFilter>> = None;
        loop {
            // A first sighting (most calls: a key seen before is usually cached by now) reads
            // two filters, two cache lines far apart. Locate the key in both before touching
            // either, so that the second line is on its way while the first is awaited: the
            // insert's locked writes would otherwise hold the second read back until the first
            // line came. The two misses then cost about one; a key found in `current` pays for
            // the second hash, which mostly runs while its own line is awaited.
            let in_current = generation.current.locate(key);
            let in_previous = generation
                .previous
                .as_ref()
                // Our own earlier insert is no sighting.
                .filter(|p| !inserted_into.as_ref().is_some_and(|f| Arc::ptr_eq(f, p)))
                .map(|previous| (previous, previous.locate(key)));
            let insertion = generation.current.insert_probe(in_current);
            seen |= insertion.was_present;
            if !insertion.was_present
                && let Some((previous, probe)) = in_previous
            {
                seen |= previous.contains_probe(probe);
            }
            if insertion.count_reported || clock_read_due() {
                self.rotate_if_due_in(&generation);
            }
            let latest = self.generation.load();
            if latest.number == generation.number {
                break;
            }
            // The filter just inserted into may soon be out of reach: insert again into the
            // newer `current` (see "No lost keys" in the module docs).
            inserted_into = Some(Arc::clone(&generation.current));
            generation = latest;
        }
        if seen {
            Admission::SeenBefore
        } else {
            Admission::FirstSeen
        }
    }

    /// True if `key` is in the current or previous generation; inserts nothing (for tools).
    pub fn contains(&self, key: &[u8]) -> bool {
        let generation = self.generation.load();
        generation.current.contains(key)
            || generation
                .previous
                .as_ref()
                .is_some_and(|p| p.contains(key))
    }

    /// Checks every rotation trigger now and rotates if one is due; returns the reason if this
    /// call rotated. `observe` checks on its own; call this from a timer so that an idle
    /// doorkeeper still rotates at `max_age`.
    pub fn rotate_if_due(&self) -> Option<RotationReason> {
        let generation = self.generation.load_full();
        self.rotate_if_due_in(&generation)
    }

    fn rotate_if_due_in(&self, generation: &Arc<Generation>) -> Option<RotationReason> {
        let limit = generation.limit(&self.config);
        let reason = if generation.current.set_bits() >= limit.set_bits {
            limit.reason
        } else if generation.expires.is_some_and(|e| self.clock.now() >= e) {
            RotationReason::MaxAge
        } else {
            return None;
        };
        self.rotate(generation, reason).then_some(reason)
    }

    /// Rotates away from generation `from`, unless another thread already has.
    fn rotate(&self, from: &Arc<Generation>, reason: RotationReason) -> bool {
        let next = Arc::new(Generation::new(
            from.number.wrapping_add(1),
            Arc::clone(from.successor(&self.config, self.sizing)),
            Some(Arc::clone(&from.current)),
            from.limit.get().map(|limit| limit.set_bits),
            &self.config,
            self.clock.now(),
        ));
        let installed = Arc::clone(&next);
        let replaced = self.generation.compare_and_swap(from, next);
        if !std::ptr::eq(&**replaced, &**from) {
            return false;
        }
        drop(replaced);
        self.rotations[reason.index()].fetch_add(1, Ordering::Relaxed);
        self.upkeep.prepare(installed);
        if let Some(retired) = &from.previous {
            if let Some(limit) = from.previous_limit.filter(|l| *l > 0) {
                let fill = retired.set_bits() as f64 / limit as f64;
                self.max_retired_fill
                    .fetch_max(fill.to_bits(), Ordering::Relaxed);
            }
            self.upkeep.retire(Arc::clone(retired));
        }
        true
    }

    /// The current generation number (rotations so far).
    pub fn generation(&self) -> u64 {
        self.generation.load().number
    }

    /// Fill, estimates and rotation counts. Cheap enough for every scrape, not for every request.
    pub fn stats(&self) -> DoorkeeperStats {
        let generation = self.generation.load_full();
        let current = GenerationStats::of(&generation.current);
        let previous = generation.previous.as_deref().map(GenerationStats::of);
        let previous_fpr = previous.map_or(0.0, |p| p.estimated_fpr);
        let spare_memory_bytes = generation
            .successor
            .get()
            .map_or(0, |spare| spare.memory_bytes());
        DoorkeeperStats {
            generation: generation.number,
            current,
            previous,
            combined_fpr: 1.0 - (1.0 - current.estimated_fpr) * (1.0 - previous_fpr),
            rotations: self.rotation_counts(),
            memory_bytes: current.memory_bytes + previous.map_or(0, |p| p.memory_bytes),
            spare_memory_bytes,
            current_age: self
                .clock
                .now()
                .saturating_duration_since(generation.started),
            max_retired_fill: f64::from_bits(self.max_retired_fill.load(Ordering::Relaxed)),
        }
    }

    fn rotation_counts(&self) -> RotationCounts {
        let [fpr_threshold, capacity, max_age] =
            self.rotations.each_ref().map(|c| c.load(Ordering::Relaxed));
        RotationCounts {
            fpr_threshold,
            capacity,
            max_age,
        }
    }

    /// The configuration the doorkeeper runs with.
    pub fn config(&self) -> DoorkeeperConfig {
        self.config.clone()
    }
}

impl std::fmt::Debug for Doorkeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Doorkeeper")
            .field("config", &self.config)
            .field("generation", &self.generation())
            .finish_non_exhaustive()
    }
}

fn fresh_filter(config: &DoorkeeperConfig, sizing: Sizing) -> BloomFilter {
    BloomFilter::builder(config.capacity, config.target_fpr)
        .num_bits(sizing.num_bits())
        .num_hashes(sizing.num_hashes)
        .seed(Seed::random())
        .build()
}
