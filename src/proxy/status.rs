//! The RFC 9211 `Cache-Status` field bloomgate adds to every response.

use http::HeaderValue;

use crate::cache::NotStored;

/// The name bloomgate gives itself in `Cache-Status`.
pub const CACHE_NAME: &str = "bloomgate";

/// What the cache did for one response, written as one `Cache-Status` member.
#[derive(Clone, Debug, Default)]
pub struct CacheStatus {
    pub hit: bool,
    /// Why the request went forward (`miss`, `stale`, `vary-miss`, `method`, `bypass`, `request`).
    pub fwd: Option<&'static str>,
    /// Status of the origin's response, when it differs from the one sent (a 304 behind a 200).
    pub fwd_status: Option<u16>,
    pub stored: bool,
    pub collapsed: bool,
    /// Seconds of freshness left (negative when stale).
    pub ttl: Option<i64>,
    pub detail: Option<&'static str>,
}

impl CacheStatus {
    pub fn hit(ttl: i64) -> CacheStatus {
        CacheStatus {
            hit: true,
            ttl: Some(ttl),
            ..CacheStatus::default()
        }
    }

    pub fn forward(fwd: &'static str) -> CacheStatus {
        CacheStatus {
            fwd: Some(fwd),
            ..CacheStatus::default()
        }
    }

    pub fn not_stored(mut self, reason: NotStored) -> CacheStatus {
        self.stored = false;
        self.detail = Some(reason.as_str());
        self
    }

    pub fn detail(mut self, detail: &'static str) -> CacheStatus {
        self.detail = Some(detail);
        self
    }

    /// The label of `bloomgate_requests_total{cache_status}` for this response.
    pub fn metric_label(&self) -> &'static str {
        match (self.hit, self.fwd) {
            (true, _) if self.detail == Some("stale-while-revalidate") => "stale",
            (true, _) => "hit",
            (false, _) if self.detail == Some("stale-if-error") => "stale",
            (false, _) if self.collapsed => "collapsed",
            (false, Some("stale")) if self.fwd_status == Some(304) => "revalidated",
            (false, Some("stale" | "miss" | "vary-miss")) => "miss",
            (false, Some("method" | "bypass" | "request")) => "pass",
            (false, _) => "error",
        }
    }

    pub fn header_value(&self) -> HeaderValue {
        let mut value = String::with_capacity(64);
        value.push_str(CACHE_NAME);
        if self.hit {
            value.push_str("; hit");
        }
        if let Some(fwd) = self.fwd {
            value.push_str("; fwd=");
            value.push_str(fwd);
        }
        if let Some(status) = self.fwd_status {
            value.push_str("; fwd-status=");
            value.push_str(&status.to_string());
        }
        if self.stored {
            value.push_str("; stored");
        }
        if self.collapsed {
            value.push_str("; collapsed");
        }
        if let Some(ttl) = self.ttl {
            value.push_str("; ttl=");
            value.push_str(&ttl.to_string());
        }
        if let Some(detail) = self.detail {
            value.push_str("; detail=");
            value.push_str(detail);
        }
        HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static(CACHE_NAME))
    }
}

/// Labels of `bloomgate_requests_total`, registered at start so every series exists.
pub const METRIC_LABELS: &[&str] = &[
    "hit",
    "stale",
    "collapsed",
    "revalidated",
    "miss",
    "pass",
    "error",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_hit_miss_names_its_reason() {
        let status = CacheStatus::forward("miss").not_stored(NotStored::FirstHit);
        assert_eq!(
            status.header_value(),
            "bloomgate; fwd=miss; detail=first-hit"
        );
        assert_eq!(status.metric_label(), "miss");
    }

    #[test]
    fn hit_carries_ttl() {
        assert_eq!(
            CacheStatus::hit(42).header_value(),
            "bloomgate; hit; ttl=42"
        );
    }

    #[test]
    fn stored_miss() {
        let mut status = CacheStatus::forward("miss");
        status.stored = true;
        assert_eq!(status.header_value(), "bloomgate; fwd=miss; stored");
    }
}
