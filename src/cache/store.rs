//! The store: moka, weighed in bytes, one entry per cache key holding its `Vary` variants.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use http::header::{HeaderMap, HeaderName, HeaderValue};
use moka::notification::RemovalCause;

use super::entry::StoredResponse;
use super::field;
use super::key::CacheKey;

/// The variants stored under one key (usually one; more when the origin sends `Vary`), indexed by
/// the request field values that select them, so a lookup costs the same with 1 or 1,000 variants.
#[derive(Debug)]
pub struct Variants {
    /// The fields every variant here varies on; a response that varies on others replaces them all.
    names: Box<[HeaderName]>,
    by_selection: HashMap<Selection, Arc<StoredResponse>>,
    /// Selections from oldest to newest write: the oldest goes when the cap is reached.
    order: VecDeque<Selection>,
    weight: u32,
    keep_for: Duration,
}

type Selection = Box<[Option<HeaderValue>]>;

impl Variants {
    /// The variants after writing `response`: it replaces the variant with the same selection,
    /// keeps the others while they vary on the same fields, and drops the oldest beyond `cap`.
    fn with(existing: Option<&Variants>, response: Arc<StoredResponse>, cap: usize) -> Variants {
        let names = response.vary_names.clone();
        let mut by_selection = HashMap::new();
        let mut order = VecDeque::new();
        if let Some(existing) = existing.filter(|e| e.names == names) {
            for selection in &existing.order {
                if *selection != response.vary_selection
                    && let Some(variant) = existing.by_selection.get(selection)
                {
                    order.push_back(selection.clone());
                    by_selection.insert(selection.clone(), Arc::clone(variant));
                }
            }
        }
        while order.len() >= cap.max(1) {
            if let Some(oldest) = order.pop_front() {
                by_selection.remove(&oldest);
            }
        }
        order.push_back(response.vary_selection.clone());
        by_selection.insert(response.vary_selection.clone(), response);
        let now = SystemTime::now();
        let weight = by_selection
            .values()
            .fold(0u32, |sum, v| sum.saturating_add(v.weight));
        let keep_for = by_selection
            .values()
            .map(|v| v.keep_for(now))
            .max()
            .unwrap_or_default();
        Variants {
            names,
            by_selection,
            order,
            weight,
            keep_for,
        }
    }

    /// The variant stored for a request with these headers, if any.
    pub fn select(&self, request_headers: &HeaderMap) -> Option<&Arc<StoredResponse>> {
        self.by_selection
            .get(&field::selection(request_headers, &self.names))
    }

    /// How many variants are stored.
    pub fn len(&self) -> usize {
        self.by_selection.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_selection.is_empty()
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
    max_variants: usize,
}

impl Store {
    /// A store that holds at most `max_bytes` of entries (headers, bodies and bookkeeping) and
    /// at most `max_variants` `Vary` variants per key (the oldest goes).
    pub fn new(max_bytes: u64, max_variants: usize) -> Store {
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
            max_variants,
        }
    }

    pub fn get(&self, key: &CacheKey) -> Option<Arc<Variants>> {
        self.cache.get(key)
    }

    /// Stores a response, replacing the variant that the same `Vary` selection had. One atomic
    /// upsert: two writers of different variants of one key both land.
    pub fn insert(&self, key: CacheKey, response: StoredResponse) -> Arc<StoredResponse> {
        let response = Arc::new(response);
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        self.counters
            .written_bytes
            .fetch_add(response.body.len() as u64, Ordering::Relaxed);
        self.upsert(key, &response);
        response
    }

    /// Replaces the stored variant after a revalidation refreshed its headers, without counting a write
    /// of the body (it was not transferred again).
    pub fn refresh(&self, key: CacheKey, response: StoredResponse) -> Arc<StoredResponse> {
        let response = Arc::new(response);
        self.upsert(key, &response);
        response
    }

    fn upsert(&self, key: CacheKey, response: &Arc<StoredResponse>) {
        let cap = self.max_variants;
        self.cache.entry(key).and_upsert_with(|existing| {
            let existing = existing.map(|entry| entry.into_value());
            Arc::new(Variants::with(
                existing.as_deref(),
                Arc::clone(response),
                cap,
            ))
        });
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

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http::{Method, StatusCode};

    use super::*;
    use crate::cache::policy_for;

    fn variant(user_agent: &str) -> (HeaderMap, StoredResponse) {
        let mut request = HeaderMap::new();
        request.insert(
            "user-agent",
            HeaderValue::from_str(user_agent).expect("value"),
        );
        let mut response = HeaderMap::new();
        response.insert("cache-control", HeaderValue::from_static("max-age=60"));
        response.insert("vary", HeaderValue::from_static("User-Agent"));
        let now = SystemTime::now();
        let policy = policy_for(&Method::GET, &request, StatusCode::OK, &response, now);
        let body = Bytes::from(user_agent.to_owned());
        let entry = StoredResponse::new(policy, StatusCode::OK, response, body, &request, now);
        (request, entry)
    }

    #[test]
    fn variants_per_key_are_capped_and_the_oldest_goes() {
        let store = Store::new(1 << 20, 4);
        let key = CacheKey::from_string("h/v".into());
        let mut requests = Vec::new();
        for i in 0..10 {
            let (request, entry) = variant(&format!("agent-{i}"));
            store.insert(key.clone(), entry);
            requests.push(request);
        }
        let variants = store.get(&key).expect("stored");
        assert_eq!(variants.len(), 4);
        for (i, request) in requests.iter().enumerate() {
            let found = variants.select(request).map(|v| v.body.clone());
            if i < 6 {
                assert_eq!(found, None, "agent-{i} should have been dropped");
            } else {
                assert_eq!(found, Some(Bytes::from(format!("agent-{i}"))));
            }
        }
    }

    #[test]
    fn concurrent_writers_of_different_variants_all_land() {
        let store = Store::new(64 << 20, 1000);
        let key = CacheKey::from_string("h/race".into());
        std::thread::scope(|scope| {
            for thread in 0..4 {
                let store = store.clone();
                let key = key.clone();
                scope.spawn(move || {
                    for i in 0..100 {
                        let (_, entry) = variant(&format!("agent-{thread}-{i}"));
                        store.insert(key.clone(), entry);
                    }
                });
            }
        });
        assert_eq!(store.get(&key).map(|v| v.len()), Some(400));
    }
}
