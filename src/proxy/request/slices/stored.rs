//! Where a slice is kept: read from RAM or the disk tier below it, and stored where the
//! doorkeeper places it. Over an open disk tier, RAM's room goes to first copies waiting for their
//! second request: a proven slice goes to the disk, not into RAM (a slice asked for once never
//! reaches the disk).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::StatusCode;
use http::header::HeaderMap;

use super::SliceError;
use crate::admission::probation::Segment;
use crate::cache::policy as cache_policy;
use crate::cache::{CacheKey, Proof, ResponseControl, StoredResponse, storability};
use crate::proxy::Proxy;
use crate::proxy::request::decision;
use crate::proxy::request::exchange::Exchange;
use crate::telemetry::{PurgeLabel, SliceEvent, series};

/// How long a slice proven on this request waits for room in the disk tier's write queue before
/// it stays in RAM instead: a disk slower than the requests that prove slices slows those
/// requests, as a cache writing through to its disk would, rather than filling RAM main with
/// slices that squeeze out the first copies (see `stored_slice`).
const DISK_PATIENCE: Duration = Duration::from_secs(1);

impl Proxy {
    /// The stored slice under `key`, fresh or not, from RAM or from disk (or on its way there),
    /// unless a purge of one of its tags removed it. Over an open disk tier, RAM holds a slice
    /// only as a first copy in probation: its second request hands it to the disk and takes it out
    /// of RAM, and a slice read from disk is copied back only into room RAM has idle (the first to
    /// leave it, and never promoted), so that RAM's room goes to first copies waiting for their
    /// second request (a slice asked for once never reaches the disk).
    pub(super) async fn stored_slice(
        &self,
        exchange: &Exchange,
        key: &CacheKey,
    ) -> Option<Arc<StoredResponse>> {
        let none = HeaderMap::new();
        let mut entry = None;
        if let Some(disk) = &self.disk
            && self.store.segment_of(key) == Some(Segment::Probation)
            && let Some(waiting) = self.store.peek(key)
        {
            disk.room_for(&waiting, DISK_PATIENCE).await;
        }
        if let Some(disk) = &self.disk
            && let Some(first) = self
                .store
                .take_first_copy(key, |variants| disk.has_room_for(variants))
        {
            entry = first.variants.select(&none).cloned();
            disk.offer(first);
        }
        if entry.is_none() {
            entry = self
                .store
                .get(key)
                .and_then(|variants| variants.select(&none).cloned());
        }
        if entry.is_none()
            && let Some(disk) = &self.disk
        {
            entry = disk
                .queued(key)
                .and_then(|variants| variants.select(&none).cloned());
        }
        if entry.is_none()
            && let Some(disk) = &self.disk
        {
            let targeted = &exchange.config().cache.targeted_fields;
            let read = Box::pin(disk.load(key, targeted, &exchange.routed.policy)).await;
            entry = read
                .into_iter()
                .flatten()
                .find(|response| response.vary_matches(&none))
                .map(Arc::new);
            if let Some(read) = &entry {
                self.store.keep_while_idle(key, Arc::clone(read));
            }
        }
        let entry = entry?;
        // A purge of a tag the slice carries (its origin's fields) removes it, hard or soft: a
        // slice is fetched again rather than revalidated.
        let tag_field = &exchange.config().cache.tag_header;
        if self
            .tag_purges
            .applying_to(&entry, key.as_str(), tag_field)
            .is_some()
        {
            self.store.purge(key);
            if let Some(disk) = &self.disk {
                disk.remove(key);
            }
            series().purged_entry(PurgeLabel::TagHard).increment(1);
            return None;
        }
        Some(entry)
    }

    /// A fetched slice stored where storability and the doorkeeper place it (a slice is an
    /// object: its own key, its own second request), with whether it was stored.
    pub(super) async fn admit_slice(
        &self,
        exchange: &Exchange,
        key: &CacheKey,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<(Arc<StoredResponse>, bool), SliceError> {
        let live = &exchange.live;
        let policy = &exchange.routed.policy;
        let targeted = &live.config.cache.targeted_fields;
        let control = ResponseControl::of(&headers, targeted);
        let (control, _) = cache_policy::read_control(policy, StatusCode::OK, &headers, control);
        let request_headers =
            cache_policy::storing_request_headers(policy, &exchange.parts.headers);
        // Storable as the object's 200 would be: a 206 is never stored as the object itself.
        let storable = storability(&request_headers, StatusCode::OK, &headers, &control).is_ok()
            && cache_policy::no_store(policy, &exchange.parts).is_none();
        let length = body.len() as u64;
        let entry = StoredResponse::with_control(
            StatusCode::PARTIAL_CONTENT,
            headers,
            body,
            &HeaderMap::new(),
            &control,
            SystemTime::now(),
        );
        if !storable {
            return Ok((Arc::new(entry), false));
        }
        let mode = decision::route_mode(policy, live.config.admission.mode, Some(length));
        let decided = decision::admit(
            mode,
            live.doorkeeper.as_deref(),
            self.store.budget(),
            key,
            false,
            Some(length),
        );
        let Some(segment) = decided.segment() else {
            series().slice(SliceEvent::FirstHit).increment(1);
            return Ok((Arc::new(entry), false));
        };
        series().slice(SliceEvent::Stored).increment(1);
        // Proven on arrival (seen before, or admission off): over a disk tier with room it goes
        // there, not into RAM, whose room is the first copies' (see `stored_slice`).
        let Some(disk) = self.disk.as_ref().filter(|_| segment == Segment::Main) else {
            return Ok((self.store.insert(key.clone(), entry, segment), true));
        };
        let entry = Arc::new(entry);
        let below = self
            .store
            .passed_below(key.clone(), Arc::clone(&entry), Proof::SeenBefore);
        if disk.room_for(&below.variants, DISK_PATIENCE).await {
            disk.offer(below);
            return Ok((entry, true));
        }
        // No room in the disk's write queue: into RAM, as without a disk tier.
        drop(below);
        match Arc::try_unwrap(entry) {
            Ok(entry) => Ok((self.store.insert(key.clone(), entry, segment), true)),
            Err(shared) => Ok((shared, false)),
        }
    }
}
