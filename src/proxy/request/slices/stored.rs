//! Where a slice is kept: read from RAM or the disk tier below it, and stored where the
//! doorkeeper places it. Over an open disk tier, RAM's room goes first to first copies waiting for
//! their second request: a proven slice stays in RAM only in the room they do not need, and is
//! written to the disk when it leaves (a slice asked for once never reaches the disk, and one
//! asked for only while it is in RAM never does either).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::StatusCode;
use http::header::HeaderMap;

use super::SliceError;
use crate::admission::probation::Segment;
use crate::cache::policy as cache_policy;
use crate::cache::{CacheKey, ResponseControl, StoredResponse, storability};
use crate::proxy::Proxy;
use crate::proxy::request::decision;
use crate::proxy::request::exchange::Exchange;
use crate::telemetry::{PurgeLabel, SliceEvent, series};

/// How long a slice about to enter a full RAM waits for room in the disk tier's write queue for
/// the proven slice it will push out: a disk slower than the requests slows those requests, as a
/// cache writing through to its disk would, rather than losing proven slices it cannot write.
const DISK_PATIENCE: Duration = Duration::from_secs(1);

impl Proxy {
    /// The stored slice under `key`, fresh or not, from RAM or from disk (or on its way there),
    /// unless a purge of one of its tags removed it. Over an open disk tier, a first copy's second
    /// request moves it to main's write-back queue (it stays in RAM, the first to leave, for the
    /// disk, when first copies need the room: `Store::write_back_first_copy`), and a slice read
    /// from disk is copied back only into room RAM has idle (the first to leave it, and never
    /// promoted), so that RAM's room goes to first copies waiting for their second request.
    pub(super) async fn stored_slice(
        &self,
        exchange: &Exchange,
        key: &CacheKey,
    ) -> Option<Arc<StoredResponse>> {
        let none = HeaderMap::new();
        // A tier that cannot take the write (failed, or still opening) leaves the slice to RAM's
        // own rules, as without a disk tier: written back, it would only be dropped first.
        if self.disk.as_ref().is_some_and(|disk| disk.takes_writes())
            && self.store.segment_of(key) == Some(Segment::Probation)
        {
            self.store.write_back_first_copy(key);
        }
        let mut entry = self
            .store
            .get(key)
            .and_then(|variants| variants.select(&none).cloned());
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
        let Some(disk) = self.disk.as_ref().filter(|disk| disk.takes_writes()) else {
            return Ok((self.store.insert(key.clone(), entry, segment), true));
        };
        // Whatever this slice pushes out of a full RAM goes to the disk: wait for room for it
        // (a slice pushes out about its own size).
        disk.room_for(entry.body.len() as u64, DISK_PATIENCE).await;
        // Proven on arrival (seen before, or admission off): in RAM only until first copies need
        // the room, as a first copy proven in RAM (see `stored_slice`).
        let stored = match segment {
            Segment::Main => self.store.insert_written_back(key.clone(), entry),
            Segment::Probation => self.store.insert(key.clone(), entry, segment),
        };
        Ok((stored, true))
    }
}
