//! Purges: by key (PURGE on the public listener, or the admin listener's), by tag (the admin
//! listener's `POST /purge/tag/<tag>`), and what a successful unsafe request invalidates.

use std::net::SocketAddr;
use std::time::SystemTime;

use http::StatusCode;

use crate::cache::{CacheKey, PurgeKind, TagPurgeFileError};
use crate::proxy::outcome::served::{Detail, Fwd, Served};
use crate::proxy::response::respond::{self, Answer};
use crate::proxy::{Live, Proxy};
use crate::telemetry::{PurgeLabel, series};

impl Proxy {
    pub(super) fn purge_from_public(
        &self,
        live: &Live,
        parts: &http::request::Parts,
        peer: SocketAddr,
    ) -> Answer {
        let allowed = live
            .config
            .server
            .purge_allowed_networks
            .iter()
            .any(|network| network.contains(&peer.ip()));
        if !allowed {
            return respond::short(
                StatusCode::FORBIDDEN,
                "PURGE is not allowed from this address\n",
                Served::Bypass {
                    fwd: Fwd::Method,
                    detail: None,
                },
            );
        }
        let (code, text) = self.purge_with(live, parts);
        let served = Served::Bypass {
            fwd: Fwd::Method,
            detail: Some(Detail::Purge),
        };
        respond::short(code, text, served)
    }

    /// Removes the object a PURGE request names: 200 if something was stored, 404 otherwise.
    pub(crate) fn purge(&self, parts: &http::request::Parts) -> (StatusCode, &'static str) {
        self.purge_with(&self.live(), parts)
    }

    fn purge_with(&self, live: &Live, parts: &http::request::Parts) -> (StatusCode, &'static str) {
        match super::exchange::purge_key(live, parts) {
            Err(_) => (
                StatusCode::BAD_REQUEST,
                "PURGE needs a valid Host and path\n",
            ),
            Ok(key) => {
                let series = series();
                series.purge(PurgeLabel::Key).increment(1);
                if self.forget(&key) {
                    series.purged_entry(PurgeLabel::Key).increment(1);
                    (StatusCode::OK, "purged\n")
                } else {
                    (StatusCode::NOT_FOUND, "not cached\n")
                }
            }
        }
    }

    /// Purges every entry whose key starts with `prefix` (`<host><path prefix>`): answers
    /// `POST /purge/prefix/<host><path>[?soft=1]`. Applied as each entry is next looked up, in
    /// RAM and on disk alike, as a purge by tag is.
    pub(crate) fn purge_prefix(&self, prefix: &str, query: Option<&str>) -> (StatusCode, String) {
        let Some((host, path)) = prefix.split_once('/') else {
            return (
                StatusCode::BAD_REQUEST,
                "POST /purge/prefix/<host><path>, for example /purge/prefix/a.example/static/; \
                 add ?soft=1 to mark stale\n"
                    .into(),
            );
        };
        if host.is_empty()
            || prefix
                .bytes()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return (
                StatusCode::BAD_REQUEST,
                "a prefix names a host and a path\n".into(),
            );
        }
        let prefix = format!("{}/{path}", host.to_ascii_lowercase());
        let kind = purge_kind(query);
        let keep = self.live().config.cache.tag_purge_keep;
        let saved = self
            .tag_purges
            .purge_prefix(&prefix, kind, SystemTime::now(), keep);
        series().purge(PurgeLabel::of_tag(kind)).increment(1);
        recorded("prefix", &prefix, kind, saved)
    }

    /// Removes every variant stored under `key`, in RAM and on disk; returns whether either tier
    /// held one.
    pub(crate) fn forget(&self, key: &CacheKey) -> bool {
        let in_ram = self.store.purge(key);
        // After the store's purge: a write of this key queued by an eviction before it is dropped.
        let on_disk = self.disk.as_ref().is_some_and(|disk| disk.remove(key));
        let sliced = self.forget_slices(key);
        in_ram || on_disk || sliced
    }

    /// Purges every entry carrying `tag`: answers `POST /purge/tag/<tag>[?soft=1]`.
    pub(crate) fn purge_tag(&self, tag: &str, query: Option<&str>) -> (StatusCode, String) {
        if tag.is_empty() || tag.contains('/') {
            return (
                StatusCode::BAD_REQUEST,
                "POST /purge/tag/<tag>, one tag; add ?soft=1 to mark stale\n".into(),
            );
        }
        let kind = purge_kind(query);
        let keep = self.live().config.cache.tag_purge_keep;
        let saved = self.tag_purges.purge(&[tag], kind, SystemTime::now(), keep);
        series().purge(PurgeLabel::of_tag(kind)).increment(1);
        recorded("tag", tag, kind, saved)
    }
}

/// The answer to a purge by `what` (`tag`, `prefix`) of `name`, recorded as `saved` says: a 500
/// when its file could not be written, since it then holds until a restart only.
fn recorded(
    what: &str,
    name: &str,
    kind: PurgeKind,
    saved: Result<(), TagPurgeFileError>,
) -> (StatusCode, String) {
    match saved {
        Ok(()) => (
            StatusCode::OK,
            format!("purged {what} {name} ({})\n", kind.as_str()),
        ),
        Err(error) => {
            tracing::error!(%error, "a purge by {what} holds until a restart only");
            let body = format!(
                "purged {what} {name} ({}) until a restart only: {error}\n",
                kind.as_str()
            );
            (StatusCode::INTERNAL_SERVER_ERROR, body)
        }
    }
}

/// `?soft=1`: a soft purge; else a hard one.
fn purge_kind(query: Option<&str>) -> PurgeKind {
    let soft = query.is_some_and(|query| query.split('&').any(|pair| pair == "soft=1"));
    match soft {
        true => PurgeKind::Soft,
        false => PurgeKind::Hard,
    }
}
