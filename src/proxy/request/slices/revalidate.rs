//! Stale slices revalidated, not refetched: the origin's 304 to one conditional request for a
//! slice stands for the whole object, refreshes that slice and is kept with the object to
//! refresh its other slices as they are met.

use std::sync::Arc;
use std::time::SystemTime;

use http::StatusCode;
use http::header::{self, HeaderMap};

use super::SliceError;
use super::known::{SlicedObject, Validated};
use crate::cache::policy as cache_policy;
use crate::cache::{CacheKey, Freshness, StoredResponse};
use crate::proxy::Proxy;
use crate::proxy::request::exchange::Exchange;
use crate::telemetry::{SliceEvent, series};

impl Proxy {
    /// A stale slice `entry` refreshed by the origin's last 304 for its object, when that leaves
    /// it fresh: stored so, in RAM and on disk. One conditional request refreshes an object's
    /// slices as they are met, not all at once.
    pub(super) fn refreshed_as_validated(
        &self,
        exchange: &Exchange,
        object: &SlicedObject,
        key: &CacheKey,
        entry: &StoredResponse,
    ) -> Option<Arc<StoredResponse>> {
        let validated = object.validated()?;
        let refreshed = self.refreshed(exchange, entry, &validated);
        is_fresh(&refreshed).then(|| self.store_refreshed(key, refreshed))
    }

    /// Slice `entry` with the fields of the origin's 304 `validated` applied as of its time.
    fn refreshed(
        &self,
        exchange: &Exchange,
        entry: &StoredResponse,
        validated: &Validated,
    ) -> StoredResponse {
        entry.refreshed(
            &validated.fields,
            &exchange.parts.headers,
            &exchange.config().cache.targeted_fields,
            &exchange.routed.policy,
            validated.at,
        )
    }

    /// Replaces the slice under `key` with its `refreshed` self, in RAM and on disk.
    fn store_refreshed(&self, key: &CacheKey, refreshed: StoredResponse) -> Arc<StoredResponse> {
        let refreshed = self.store.refresh(key.clone(), refreshed);
        if let Some(disk) = &self.disk
            && let Some(variants) = self.store.peek(key)
        {
            disk.refreshed(key, variants);
        }
        series().slice(SliceEvent::Revalidated).increment(1);
        refreshed
    }

    /// The origin's 304 to the conditional request for stale slice `entry` of `object`: it
    /// stands for the object, so it is kept with it (for its other slices) and refreshes this
    /// one. A 304 whose validators are not the object's is an error for the slice.
    pub(super) fn slice_not_modified(
        &self,
        exchange: &Exchange,
        object: &SlicedObject,
        key: &CacheKey,
        entry: &StoredResponse,
        mut fields: HeaderMap,
        index: u64,
    ) -> Result<(Arc<StoredResponse>, bool), SliceError> {
        if !entry.validated_by(&fields, true) {
            return Err(SliceError::Status {
                index,
                status: StatusCode::NOT_MODIFIED,
            });
        }
        crate::proxy::response::headers::strip_hop_by_hop(&mut fields);
        // Kept for every client: one client's cookie never is (RFC 9111 section 3).
        fields.remove(header::SET_COOKIE);
        cache_policy::prepare_response(&exchange.routed.policy, &mut fields);
        let validated = Validated {
            at: SystemTime::now(),
            fields,
        };
        let refreshed = self.refreshed(exchange, entry, &validated);
        object.validate(validated);
        Ok((self.store_refreshed(key, refreshed), true))
    }
}

/// Whether a stored slice is fresh: a slice is fetched for the object, not for one client, so no
/// request directive takes part.
pub(super) fn is_fresh(entry: &StoredResponse) -> bool {
    entry.freshness(&HeaderMap::new(), SystemTime::now()) == Freshness::Fresh
}
