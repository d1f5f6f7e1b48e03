//! Purge by tag on the request path: a stored entry looked up is checked against the purges of
//! its tags (`cache::tags`), and the admin listener's `POST /purge/tag/<tag>` records one.

use std::sync::Arc;
use std::time::SystemTime;

use http::StatusCode;

use super::Proxy;
use super::exchange::Exchange;
use crate::cache::{PurgeKind, StoredResponse};
use crate::telemetry::{PurgeLabel, series};

impl Proxy {
    /// `entry`, found for `exchange`, as purges of its tags leave it: `None` when a hard purge
    /// removed it (its key, every variant, from both tiers), a stale copy (stored in its place)
    /// after a soft purge, else itself.
    pub(super) fn unless_purged(
        &self,
        exchange: &Exchange,
        entry: Arc<StoredResponse>,
    ) -> Option<Arc<StoredResponse>> {
        let tag_field = &exchange.config().cache.tag_header;
        let Some(purge) = self.tag_purges.applying_to(&entry, tag_field) else {
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

    /// Purges every entry carrying `tag`: answers `POST /purge/tag/<tag>[?soft=1]`.
    pub(super) fn purge_tag(&self, tag: &str, query: Option<&str>) -> (StatusCode, String) {
        if tag.is_empty() || tag.contains('/') {
            return (
                StatusCode::BAD_REQUEST,
                "POST /purge/tag/<tag>, one tag; add ?soft=1 to mark stale\n".into(),
            );
        }
        let soft = query.is_some_and(|query| query.split('&').any(|pair| pair == "soft=1"));
        let kind = if soft {
            PurgeKind::Soft
        } else {
            PurgeKind::Hard
        };
        let keep = self.live().config.cache.tag_purge_keep;
        let saved = self.tag_purges.purge(&[tag], kind, SystemTime::now(), keep);
        series().purge(PurgeLabel::of_tag(kind)).increment(1);
        match saved {
            Ok(()) => (
                StatusCode::OK,
                format!("purged tag {tag} ({})\n", kind.as_str()),
            ),
            Err(error) => {
                tracing::error!(%error, "a purge by tag holds until a restart only");
                let body = format!(
                    "purged tag {tag} ({}) until a restart only: {error}\n",
                    kind.as_str()
                );
                (StatusCode::INTERNAL_SERVER_ERROR, body)
            }
        }
    }
}
