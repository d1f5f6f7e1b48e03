//! The store: moka, weighed in bytes, one entry per cache key holding its `Vary` variants.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use http::HeaderMap;
use moka::notification::RemovalCause;

use super::entry::StoredResponse;
use super::key::CacheKey;

/// The variants stored under one key (usually one; more when the origin sends `Vary`).
#[derive(Debug)]
pub struct Variants {
    list: Vec<Arc<StoredResponse>>,
    weight: u32,
    keep_for: Duration,
}

impl Variants {
    fn new(list: Vec<Arc<StoredResponse>>) -> Variants {
        let now = SystemTime::now();
        let weight = list
            .iter()
            .fold(0u32, |sum, v| sum.saturating_add(v.weight));
        let keep_for = list
            .iter()
            .map(|v| v.keep_for(now))
            .max()
            .unwrap_or_default();
        Variants {
            list,
            weight,
            keep_for,
        }
    }

    /// The variant stored for a request with these headers, if any.
    pub fn select(&self, request_headers: &HeaderMap) -> Option<&Arc<StoredResponse>> {
        self.list.iter().find(|v| v.vary_matches(request_headers))
    }
}

struct KeepFor;

impl moka::Expiry<CacheKey, Arc<Variants>> for KeepFor {
    fn expire_after_create(
        &self,
        _key: &CacheKey,
        value: &Arc<Variants>,
        _now: Instant,
    ) -> Option<Duration> {
        Some(value.keep_for)
    }

    fn expire_after_update(
        &self,
        _key: &CacheKey,
        value: &Arc<Variants>,
        _now: Instant,
        _duration_until_expiry: Option<Duration>,
    ) -> Option<Duration> {
        Some(value.keep_for)
    }
}

/// Counters the store keeps about itself, read by the metrics exporter.
#[derive(Debug, Default)]
pub struct StoreCounters {
    pub writes: AtomicU64,
    pub written_bytes: AtomicU64,
    pub evictions: AtomicU64,
    pub expirations: AtomicU64,
}

/// The in-memory cache of responses, bounded by the bytes its entries weigh.
#[derive(Clone)]
pub struct Store {
    cache: moka::sync::Cache<CacheKey, Arc<Variants>>,
    counters: Arc<StoreCounters>,
    max_bytes: u64,
}

impl Store {
    /// A store that holds at most `max_bytes` of entries (headers, bodies and bookkeeping).
    pub fn new(max_bytes: u64) -> Store {
        let counters = Arc::new(StoreCounters::default());
        let listener_counters = Arc::clone(&counters);
        // Plain LRU: the doorkeeper is the admission policy, so moka's own TinyLFU admission would
        // make "admission disabled" mean something else than storing every storable response.
        let cache = moka::sync::Cache::builder()
            .max_capacity(max_bytes)
            .eviction_policy(moka::policy::EvictionPolicy::lru())
            .weigher(|_key: &CacheKey, value: &Arc<Variants>| value.weight)
            .expire_after(KeepFor)
            .eviction_listener(move |_key, _value, cause| match cause {
                RemovalCause::Size => {
                    listener_counters.evictions.fetch_add(1, Ordering::Relaxed);
                }
                RemovalCause::Expired => {
                    listener_counters
                        .expirations
                        .fetch_add(1, Ordering::Relaxed);
                }
                RemovalCause::Explicit | RemovalCause::Replaced => {}
            })
            .build();
        Store {
            cache,
            counters,
            max_bytes,
        }
    }

    pub fn get(&self, key: &CacheKey) -> Option<Arc<Variants>> {
        self.cache.get(key)
    }

    /// Stores a response, replacing the variant that the same `Vary` selection had.
    pub fn insert(&self, key: CacheKey, response: StoredResponse) -> Arc<StoredResponse> {
        let response = Arc::new(response);
        let mut list = vec![Arc::clone(&response)];
        if let Some(existing) = self.cache.get(&key) {
            // Keep the other variants only while they vary on the same header names.
            let same_names = |v: &Arc<StoredResponse>| {
                v.vary.len() == response.vary.len()
                    && v.vary.iter().zip(&response.vary).all(|(a, b)| a.0 == b.0)
            };
            list.extend(
                existing
                    .list
                    .iter()
                    .filter(|v| same_names(v) && v.vary != response.vary)
                    .cloned(),
            );
        }
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        self.counters
            .written_bytes
            .fetch_add(response.body.len() as u64, Ordering::Relaxed);
        self.cache.insert(key, Arc::new(Variants::new(list)));
        response
    }

    /// Replaces the stored variant after a revalidation refreshed its headers, without counting a write
    /// of the body (it was not transferred again).
    pub fn refresh(&self, key: CacheKey, response: StoredResponse) -> Arc<StoredResponse> {
        let response = Arc::new(response);
        let mut list = vec![Arc::clone(&response)];
        if let Some(existing) = self.cache.get(&key) {
            list.extend(
                existing
                    .list
                    .iter()
                    .filter(|v| v.vary != response.vary)
                    .cloned(),
            );
        }
        self.cache.insert(key, Arc::new(Variants::new(list)));
        response
    }

    /// Removes every variant stored under the key; returns whether there was one.
    pub fn purge(&self, key: &CacheKey) -> bool {
        self.cache.remove(key).is_some()
    }

    /// Entries and their weight in bytes, after applying pending maintenance (for the exporter).
    pub fn usage(&self) -> (u64, u64) {
        self.cache.run_pending_tasks();
        (self.cache.entry_count(), self.cache.weighted_size())
    }

    /// The size the store was built with.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    pub fn counters(&self) -> &StoreCounters {
        &self.counters
    }
}
