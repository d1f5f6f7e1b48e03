//! The admission policies compared by the simulator, each in front of its own byte-bounded LRU.

use std::time::Duration;

use crate::admission::probation::{Budget, Mode, Placement, Segment};
use crate::admission::{Admission, DoorkeeperConfig, RotationCounts};

use super::doorkeeper::DoorkeeperModel;
use super::lru::ByteLru;
use super::prefetch::prefetch;
use super::ratio::ratio;
use super::reference::{Access, ReferenceCache, S3Fifo, Sieve, WTinyLfu};
use super::request::SimRequest;
use super::segmented::{MainEviction, SegmentedCache};
use super::weigh::Weigher;

/// What nginx keeps per key for `proxy_cache_min_uses` ("one megabyte zone can store about
/// 8 thousand keys", the `proxy_cache_path keys_zone` documentation): 128 bytes.
pub const NGINX_BYTES_PER_KEY: u64 = 128;

/// Which admission policy a cache runs: bloomgate's (admit-all, second-hit, probation) and the
/// research references ([`super::reference`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    /// Store every cacheable miss: LRU (`lru` names it too).
    #[value(alias = "lru")]
    AdmitAll,
    /// Store on the second miss within the window, remembering keys exactly.
    SecondHitExact,
    /// Store on the second miss as the doorkeeper decides ([`DoorkeeperModel`]: the proxy's
    /// filters and rotation rule).
    Bloom,
    /// Store a first miss in a probation FIFO and a second one in main, as the doorkeeper
    /// decides ([`crate::admission::probation`]).
    Probation,
    /// S3-FIFO as libCacheSim runs it ([`super::reference::S3Fifo`]).
    #[serde(rename = "s3-fifo")]
    #[value(name = "s3-fifo")]
    S3Fifo,
    /// W-TinyLFU as libCacheSim runs it ([`super::reference::WTinyLfu`]).
    #[serde(rename = "w-tinylfu")]
    #[value(name = "w-tinylfu")]
    WTinyLfu,
    /// SIEVE as libCacheSim runs it ([`super::reference::Sieve`]).
    Sieve,
}

impl PolicyKind {
    /// Every policy, in the order reports list them.
    pub const ALL: [PolicyKind; 7] = [
        PolicyKind::AdmitAll,
        PolicyKind::SecondHitExact,
        PolicyKind::Bloom,
        PolicyKind::Probation,
        PolicyKind::S3Fifo,
        PolicyKind::WTinyLfu,
        PolicyKind::Sieve,
    ];

    /// Its name in reports and in `simulate --policies`.
    pub fn as_str(&self) -> &'static str {
        match self {
            PolicyKind::AdmitAll => "admit-all",
            PolicyKind::SecondHitExact => "second-hit-exact",
            PolicyKind::Bloom => "bloom",
            PolicyKind::Probation => "probation",
            PolicyKind::S3Fifo => "s3-fifo",
            PolicyKind::WTinyLfu => "w-tinylfu",
            PolicyKind::Sieve => "sieve",
        }
    }

    /// Whether it is one of the research references rather than one of bloomgate's modes.
    pub fn is_reference(&self) -> bool {
        matches!(
            self,
            PolicyKind::S3Fifo | PolicyKind::WTinyLfu | PolicyKind::Sieve
        )
    }
}

/// The outcome of one policy over the whole trace.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PolicyReport {
    pub policy: PolicyKind,
    pub requests: u64,
    pub hits: u64,
    pub hit_ratio: f64,
    pub requested_bytes: u64,
    pub hit_bytes: u64,
    pub byte_hit_ratio: f64,
    /// Objects stored (cache writes, in either segment) and their bytes.
    pub writes: u64,
    pub written_bytes: u64,
    /// Writes into main and their bytes: every write of the single-segment policies; for
    /// `probation` the seen-before misses plus the promotions (a promotion's bytes are its
    /// weight, which `--weigh proxy` makes more than its body); for `s3-fifo` and `w-tinylfu` what
    /// enters main from their small FIFO or window, plus S3-FIFO's ghost hits.
    pub main_writes: u64,
    pub main_written_bytes: u64,
    /// Misses stored where first copies go (probation's FIFO, S3-FIFO's small FIFO, W-TinyLFU's
    /// window), and their bytes.
    pub probation_writes: u64,
    pub probation_written_bytes: u64,
    /// Objects moved from where first copies go to main.
    pub promotions: u64,
    /// Bytes fetched from the origin: every miss.
    pub origin_bytes: u64,
    pub evictions: u64,
    /// Misses not stored because admission said first seen (for `probation`: first seen and larger
    /// than the probation segment).
    pub first_hits: u64,
    /// Misses not stored because the object is larger than the whole cache (for the references,
    /// than the queue it would enter).
    pub too_large: u64,
    pub rotations: RotationCounts,
    /// Memory of the admission state, in bytes: for `bloom` both filters; for `probation` both
    /// filters and main's frequency sketch; for `second-hit-exact`
    /// the peak number of keys in the window times [`NGINX_BYTES_PER_KEY`]; 0 for `admit-all`.
    pub admission_memory_bytes: u64,
    /// Memory the simulator's own model of the admission state used (for `second-hit-exact` a
    /// 4-byte generation stamp per distinct object of the trace).
    pub simulator_admission_bytes: u64,
    /// `second-hit-exact` only: the peak number of keys in its window (both generations).
    pub window_keys_peak: u64,
}

/// Exact "seen before" over two generations of `capacity` distinct keys each, rotating like the
/// doorkeeper (when the current generation holds `capacity` keys, or after `max_age` of trace time),
/// so that its window matches the Bloom doorkeeper's and only false positives differ.
struct ExactWindow {
    capacity: u64,
    max_age_seconds: f64,
    /// Generation in which each object id was last observed; 0 = never. Generations start at 1.
    last_seen: Vec<u32>,
    generation: u32,
    generation_started: Option<f64>,
    current_keys: u64,
    /// Keys of the previous generation not observed again since (so not counted in `current_keys`).
    previous_only_keys: u64,
    peak_keys: u64,
    rotations: RotationCounts,
}

impl ExactWindow {
    fn new(capacity: u64, max_age: Duration) -> ExactWindow {
        ExactWindow {
            capacity: capacity.max(1),
            max_age_seconds: max_age.as_secs_f64(),
            last_seen: Vec::new(),
            generation: 1,
            generation_started: None,
            current_keys: 0,
            previous_only_keys: 0,
            peak_keys: 0,
            rotations: RotationCounts::default(),
        }
    }

    fn observe(&mut self, id: u32, time: f64) -> Admission {
        let started = *self.generation_started.get_or_insert(time);
        if time - started >= self.max_age_seconds {
            self.rotations.max_age += 1;
            self.rotate(time);
        }
        let index = id as usize;
        if index >= self.last_seen.len() {
            self.last_seen.resize(index + 1, 0);
        }
        let last = self.last_seen[index];
        let seen = last != 0 && last + 1 >= self.generation;
        if last != self.generation {
            if last != 0 && last + 1 == self.generation {
                self.previous_only_keys -= 1;
            }
            self.last_seen[index] = self.generation;
            self.current_keys += 1;
            self.peak_keys = self
                .peak_keys
                .max(self.current_keys + self.previous_only_keys);
            if self.current_keys >= self.capacity {
                self.rotations.capacity += 1;
                self.rotate(time);
            }
        }
        if seen {
            Admission::SeenBefore
        } else {
            Admission::FirstSeen
        }
    }

    fn rotate(&mut self, time: f64) {
        self.generation += 1;
        self.generation_started = Some(time);
        self.previous_only_keys = self.current_keys;
        self.current_keys = 0;
    }
}

enum AdmissionState {
    AdmitAll,
    Exact(ExactWindow),
    Bloom(Box<DoorkeeperModel>),
}

/// The cache model a policy runs: one byte-LRU, probation and main, or a reference policy's.
enum CacheModel {
    Lru(ByteLru),
    Segmented(SegmentedCache),
    Reference(ReferenceCache),
}

/// How the `probation` policy splits its cache (the proxy's `admission.probation_share`) and
/// evicts from main.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbationSetup {
    pub share: f64,
    pub main_eviction: MainEviction,
}

impl Default for ProbationSetup {
    fn default() -> Self {
        ProbationSetup {
            share: 0.1,
            main_eviction: MainEviction::Fifo,
        }
    }
}

/// One policy and its cache, fed every request of the trace.
pub struct PolicySim {
    cache: CacheModel,
    admission: AdmissionState,
    /// What an object weighs in a cache of bloomgate's (the references weigh bodies).
    weigher: Weigher,
    report: PolicyReport,
}

impl PolicySim {
    /// `seed` seeds the doorkeeper's secrets (see [`DoorkeeperModel`]); `weigher` weighs objects
    /// against `cache_bytes`, unless `kind` is a research reference.
    pub fn new(
        kind: PolicyKind,
        cache_bytes: u64,
        doorkeeper: &DoorkeeperConfig,
        probation: ProbationSetup,
        seed: u64,
        weigher: Weigher,
    ) -> PolicySim {
        let admission = match kind {
            PolicyKind::AdmitAll
            | PolicyKind::S3Fifo
            | PolicyKind::WTinyLfu
            | PolicyKind::Sieve => AdmissionState::AdmitAll,
            PolicyKind::SecondHitExact => {
                AdmissionState::Exact(ExactWindow::new(doorkeeper.capacity, doorkeeper.max_age))
            }
            PolicyKind::Bloom | PolicyKind::Probation => {
                AdmissionState::Bloom(Box::new(DoorkeeperModel::new(doorkeeper, seed)))
            }
        };
        let cache = match kind {
            PolicyKind::Probation => CacheModel::Segmented(SegmentedCache::new(
                Budget::new(cache_bytes, probation.share),
                probation.main_eviction,
            )),
            PolicyKind::S3Fifo => {
                CacheModel::Reference(ReferenceCache::S3Fifo(S3Fifo::new(cache_bytes)))
            }
            PolicyKind::WTinyLfu => {
                CacheModel::Reference(ReferenceCache::WTinyLfu(WTinyLfu::new(cache_bytes)))
            }
            PolicyKind::Sieve => {
                CacheModel::Reference(ReferenceCache::Sieve(Sieve::new(cache_bytes)))
            }
            PolicyKind::AdmitAll | PolicyKind::SecondHitExact | PolicyKind::Bloom => {
                CacheModel::Lru(ByteLru::new(cache_bytes))
            }
        };
        PolicySim {
            cache,
            admission,
            weigher,
            report: PolicyReport {
                policy: kind,
                requests: 0,
                hits: 0,
                hit_ratio: 0.0,
                requested_bytes: 0,
                hit_bytes: 0,
                byte_hit_ratio: 0.0,
                writes: 0,
                written_bytes: 0,
                main_writes: 0,
                main_written_bytes: 0,
                probation_writes: 0,
                probation_written_bytes: 0,
                promotions: 0,
                origin_bytes: 0,
                evictions: 0,
                first_hits: 0,
                too_large: 0,
                rotations: RotationCounts::default(),
                admission_memory_bytes: 0,
                simulator_admission_bytes: 0,
                window_keys_peak: 0,
            },
        }
    }

    pub fn kind(&self) -> PolicyKind {
        self.report.policy
    }

    /// Starts loading the cache's state for `id`, for a request two prefetch distances ahead.
    #[inline]
    pub fn prefetch_cache(&self, id: u32) {
        match &self.cache {
            CacheModel::Lru(lru) => lru.prefetch(id),
            CacheModel::Segmented(cache) => cache.prefetch(id),
            CacheModel::Reference(cache) => cache.prefetch(id),
        }
        if let AdmissionState::Exact(window) = &self.admission
            && let Some(last) = window.last_seen.get(id as usize)
        {
            prefetch(last);
        }
    }

    /// Starts loading the doorkeeper's blocks for `id`, for a request one prefetch distance ahead
    /// whose cache state [`Self::prefetch_cache`] loaded: only if it is not cached now, since
    /// admission is asked on misses alone and hashing a key for the doorkeeper costs more than
    /// looking it up in the cache.
    #[inline]
    pub fn prefetch_admission(&mut self, id: u32, fingerprint: u64) {
        let AdmissionState::Bloom(doorkeeper) = &mut self.admission else {
            return;
        };
        let cached = match &self.cache {
            CacheModel::Lru(lru) => lru.contains(id),
            CacheModel::Segmented(cache) => cache.segment_of(id).is_some(),
            CacheModel::Reference(_) => false,
        };
        if !cached {
            doorkeeper.prefetch(fingerprint);
        }
    }

    /// One request: a hit refreshes the object; a miss goes to the origin and, if admission
    /// agrees (consulted only on misses, as the proxy does) and it fits, is stored at its weight.
    #[inline]
    pub fn request(&mut self, request: SimRequest) {
        let SimRequest {
            id,
            key_bytes,
            fingerprint,
            size,
            time,
        } = request;
        let report = &mut self.report;
        report.requests += 1;
        report.requested_bytes += size;
        let hit = match &mut self.cache {
            CacheModel::Lru(lru) => lru.touch(id),
            CacheModel::Segmented(cache) => cache.touch(id),
            CacheModel::Reference(cache) => {
                report.accessed(cache.get(id, size), size);
                return;
            }
        };
        if hit {
            report.hits += 1;
            report.hit_bytes += size;
            return;
        }
        report.origin_bytes += size;
        let admission = match &mut self.admission {
            AdmissionState::AdmitAll => Admission::SeenBefore,
            AdmissionState::Exact(window) => window.observe(id, time),
            AdmissionState::Bloom(doorkeeper) => doorkeeper.observe(fingerprint, time),
        };
        let weight = self.weigher.weight(size, key_bytes);
        match &mut self.cache {
            CacheModel::Lru(lru) => {
                if admission == Admission::FirstSeen {
                    report.first_hits += 1;
                    return;
                }
                match lru.insert(id, weight) {
                    Some(evictions) => {
                        report.evictions += evictions;
                        report.wrote(Segment::Main, size);
                    }
                    None => report.too_large += 1,
                }
            }
            CacheModel::Segmented(cache) => {
                match cache
                    .budget()
                    .place(Mode::Probation, Some(admission), false, weight)
                {
                    Placement::Store(segment) => {
                        let evicted = cache.insert(id, weight, segment);
                        report.evictions += evicted.evictions;
                        report.promotions += evicted.promotions;
                        report.main_writes += evicted.promotions;
                        report.main_written_bytes += evicted.promoted_bytes;
                        report.wrote(evicted.stored.unwrap_or(segment), size);
                    }
                    Placement::FirstHit => report.first_hits += 1,
                    Placement::TooLarge => report.too_large += 1,
                }
            }
            CacheModel::Reference(_) => unreachable!("a reference policy answered above"),
        }
    }

    /// The report, with ratios and admission memory filled in.
    pub fn finish(mut self) -> PolicyReport {
        let report = &mut self.report;
        report.hit_ratio = ratio(report.hits, report.requests);
        report.byte_hit_ratio = ratio(report.hit_bytes, report.requested_bytes);
        if let CacheModel::Reference(cache) = &self.cache {
            report.admission_memory_bytes = cache.admission_memory_bytes();
        }
        match &mut self.admission {
            AdmissionState::AdmitAll => {}
            AdmissionState::Exact(window) => {
                report.rotations = window.rotations;
                report.window_keys_peak = window.peak_keys;
                report.admission_memory_bytes = window.peak_keys * NGINX_BYTES_PER_KEY;
                report.simulator_admission_bytes = (window.last_seen.capacity() * 4) as u64;
            }
            AdmissionState::Bloom(doorkeeper) => {
                report.rotations = doorkeeper.rotations();
                let sketch = match &self.cache {
                    CacheModel::Segmented(cache) => cache.sketch_bytes(),
                    _ => 0,
                };
                report.admission_memory_bytes = doorkeeper.memory_bytes() as u64 + sketch;
                report.simulator_admission_bytes = report.admission_memory_bytes;
            }
        }
        self.report
    }
}

impl PolicyReport {
    /// Counts one request to a reference policy's cache, of `size` bytes.
    fn accessed(&mut self, access: Access, size: u64) {
        if access.hit {
            self.hits += 1;
            self.hit_bytes += size;
            return;
        }
        self.origin_bytes += size;
        self.evictions += access.evictions;
        self.promotions += access.promotions;
        self.main_writes += access.promotions;
        self.main_written_bytes += access.promoted_bytes;
        if access.refused {
            self.too_large += 1;
        }
        if let Some(segment) = access.stored {
            self.wrote(segment, size);
        }
    }

    /// Counts an object of `size` bytes stored from the origin into `segment`.
    fn wrote(&mut self, segment: Segment, size: u64) {
        self.writes += 1;
        self.written_bytes += size;
        match segment {
            Segment::Main => {
                self.main_writes += 1;
                self.main_written_bytes += size;
            }
            Segment::Probation => {
                self.probation_writes += 1;
                self.probation_written_bytes += size;
            }
        }
    }
}
