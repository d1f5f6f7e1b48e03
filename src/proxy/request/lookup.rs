//! The lookup phase: the request's key in RAM, then on disk (a known sliced object goes to the
//! slices phase); a fresh hit is served, a stale one
//! served while it revalidates or sent to be revalidated, a miss sent to be fetched. An entry
//! found is first checked against the purges of its tags.

use std::sync::Arc;
use std::time::SystemTime;

use super::Step;
use super::exchange::Exchange;
use super::fetch::Fetch;
use crate::cache::{Freshness, PurgeKind, StoredResponse};
use crate::proxy::Proxy;
use crate::proxy::outcome::served::{Fwd, Served, Tier};
use crate::proxy::response::respond;
use crate::telemetry::{PurgeLabel, series};

impl Proxy {
    /// A fresh hit is served; a stale one is served while it revalidates, or revalidated first;
    /// a miss is fetched.
    ///
    /// The disk read is boxed (as the driver boxes every phase after this one): hyper moves each
    /// request's future into place, and a future holds room for its largest state, so without
    /// the boxes every hit would copy the miss path's several KiB of state.
    pub(super) async fn lookup(self: &Arc<Self>, exchange: Exchange) -> Step {
        let mut variants = self.store.get(&exchange.key);
        if variants.is_none()
            && let Some(object) = self.sliced_object(&exchange)
        {
            return Step::Slices(exchange, object, None);
        }
        let mut tier = Tier::Ram;
        let targeted = &exchange.config().cache.targeted_fields;
        if variants.is_none()
            && let Some(disk) = &self.disk
            && let Some(restored) =
                Box::pin(disk.load(&exchange.key, targeted, &exchange.routed.policy)).await
        {
            // A disk hit goes back into RAM (main: it has been asked for again).
            variants = self.store.restore(&exchange.key, restored);
            tier = Tier::Disk;
        }
        let now = SystemTime::now();
        let stored = variants
            .as_ref()
            .and_then(|v| v.select(&exchange.parts.headers))
            .cloned();
        let Some(entry) = stored else {
            let fwd = match variants {
                Some(_) => Fwd::VaryMiss,
                None => Fwd::Miss,
            };
            return Step::Coalesce(Fetch::new(exchange, fwd, None));
        };
        let Some(entry) = self.unless_purged(&exchange, entry) else {
            return Step::Coalesce(Fetch::new(exchange, Fwd::Miss, None));
        };
        let answer = match entry.freshness(&exchange.parts.headers, now) {
            Freshness::Fresh => {
                respond::hit(&exchange.parts, &entry, tier, exchange.stored_heads, now)
            }
            Freshness::StaleWhileRevalidate => {
                self.revalidate_in_background(&exchange, &entry);
                let ttl = entry.ttl_seconds(now);
                let served = Served::StaleWhileRevalidate { ttl };
                respond::stored(&exchange.parts, &entry, served, now)
            }
            Freshness::Stale => {
                return Step::Coalesce(Fetch::new(exchange, Fwd::Stale, Some(entry)));
            }
            Freshness::RefusedByRequest => {
                return Step::Coalesce(Fetch::new(exchange, Fwd::Request, Some(entry)));
            }
        };
        Step::Done(answer)
    }

    /// `entry`, found for `exchange`, as purges of its tags leave it: `None` when a hard purge
    /// removed it (its key, every variant, from both tiers), a stale copy (stored in its place)
    /// after a soft purge, else itself.
    pub(super) fn unless_purged(
        &self,
        exchange: &Exchange,
        entry: Arc<StoredResponse>,
    ) -> Option<Arc<StoredResponse>> {
        let tag_field = &exchange.config().cache.tag_header;
        let Some(purge) = self
            .tag_purges
            .applying_to(&entry, exchange.key.as_str(), tag_field)
        else {
            return Some(entry);
        };
        let label = PurgeLabel::of_tag(purge.kind);
        match purge.kind {
            PurgeKind::Hard => {
                self.forget(&exchange.key);
                series().purged_entry(label).increment(1);
                None
            }
            PurgeKind::Soft => match entry.stale_from(purge.at) {
                Some(stale) => {
                    series().purged_entry(label).increment(1);
                    Some(self.store.refresh(exchange.key.clone(), stale))
                }
                // Already stale at the purge: nothing to mark.
                None => Some(entry),
            },
        }
    }
}
