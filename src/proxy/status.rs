//! The RFC 9211 `Cache-Status` field bloomgate adds to every response.

use std::time::{Duration, Instant};

use http::{HeaderValue, Response};

use super::decision::Decision;
use crate::cache::NotStored;

/// The name bloomgate gives itself in `Cache-Status`.
pub const CACHE_NAME: &str = "bloomgate";

/// Why a request went to the origin: the `fwd` parameter of RFC 9211 section 2.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fwd {
    /// Nothing stored for the key.
    Miss,
    /// Stored, but not for this request's `Vary` field values.
    VaryMiss,
    /// Stored but stale: revalidated or refetched.
    Stale,
    /// A method the cache does not answer (POST, PUT, ...).
    Method,
    /// A request the cache does not answer although its method is cacheable: a range it will not
    /// cut from the whole object (too large, or not storable and of unknown length).
    Bypass,
    /// A request the proxy refused itself (no valid host or target).
    Request,
}

impl Fwd {
    pub fn as_str(self) -> &'static str {
        match self {
            Fwd::Miss => "miss",
            Fwd::VaryMiss => "vary-miss",
            Fwd::Stale => "stale",
            Fwd::Method => "method",
            Fwd::Bypass => "bypass",
            Fwd::Request => "request",
        }
    }
}

/// The `detail` parameter: what else is worth saying about a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detail {
    NotStored(NotStored),
    /// Stored, in the probation segment: the object's first request.
    Probation,
    /// A hit read from the disk tier (and copied back into RAM).
    Disk,
    /// A stale entry served at once while it is refreshed in the background (RFC 5861).
    StaleWhileRevalidate,
    /// A stale entry served because the origin failed (RFC 5861).
    StaleIfError,
    /// The proxy's own 502: the origin failed.
    OriginError,
    /// The proxy's own 504: the origin was too slow.
    OriginTimeout,
    /// The proxy's own 502: the origin's certificate was refused or its TLS handshake failed.
    OriginTls,
    Purge,
}

impl Detail {
    pub fn as_str(self) -> &'static str {
        match self {
            Detail::NotStored(reason) => reason.as_str(),
            Detail::Probation => "probation",
            Detail::Disk => "disk",
            Detail::StaleWhileRevalidate => "stale-while-revalidate",
            Detail::StaleIfError => "stale-if-error",
            Detail::OriginError => "origin-error",
            Detail::OriginTimeout => "origin-timeout",
            Detail::OriginTls => "origin-tls-error",
            Detail::Purge => "purge",
        }
    }
}

/// What the cache did for one response, written as one `Cache-Status` member; with the admission
/// decision and the origin's answer behind it, which the access log records and the header does not.
#[derive(Clone, Debug, Default)]
pub struct CacheStatus {
    pub hit: bool,
    pub fwd: Option<Fwd>,
    /// Status of the origin's response, when it differs from the one sent (a 304 behind a 200).
    pub fwd_status: Option<u16>,
    pub stored: bool,
    pub collapsed: bool,
    /// Seconds of freshness left (negative when stale).
    pub ttl: Option<i64>,
    pub detail: Option<Detail>,
    /// The admission decision made for this response, if one was (not for hits, passes, or
    /// requests that waited for another's fetch).
    pub decision: Option<Decision>,
    /// The origin's response head, when this request asked the origin and it answered.
    pub origin: Option<OriginHead>,
    /// The targeted field (RFC 9213) whose directives decided, if one did: shown after the
    /// detail, as `detail=probation/cdn-cache-control`.
    pub targeted: Option<http::HeaderName>,
    /// An error status (4xx or 5xx) served from the cache or stored: shown last in the detail,
    /// as `detail=cached-error`.
    pub cached_error: bool,
}

/// The origin's response head for one request: its status, and how long it took to arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OriginHead {
    pub status: u16,
    pub elapsed: Duration,
}

impl OriginHead {
    /// The head of the origin's `response` to a request sent at `asked`.
    pub fn of<B>(response: &Response<B>, asked: Instant) -> OriginHead {
        OriginHead {
            status: response.status().as_u16(),
            elapsed: asked.elapsed(),
        }
    }
}

/// How a response counts in `bloomgate_requests_total{cache_status}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Hit,
    Stale,
    Collapsed,
    Revalidated,
    Miss,
    Pass,
    Error,
}

impl Outcome {
    /// Every outcome, registered at start so every series exists.
    pub const ALL: [Outcome; 7] = [
        Outcome::Hit,
        Outcome::Stale,
        Outcome::Collapsed,
        Outcome::Revalidated,
        Outcome::Miss,
        Outcome::Pass,
        Outcome::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Hit => "hit",
            Outcome::Stale => "stale",
            Outcome::Collapsed => "collapsed",
            Outcome::Revalidated => "revalidated",
            Outcome::Miss => "miss",
            Outcome::Pass => "pass",
            Outcome::Error => "error",
        }
    }
}

impl CacheStatus {
    pub fn hit(ttl: i64) -> CacheStatus {
        CacheStatus {
            hit: true,
            ttl: Some(ttl),
            ..CacheStatus::default()
        }
    }

    pub fn forward(fwd: Fwd) -> CacheStatus {
        CacheStatus {
            fwd: Some(fwd),
            ..CacheStatus::default()
        }
    }

    pub fn detail(mut self, detail: Detail) -> CacheStatus {
        self.detail = Some(detail);
        self
    }

    pub fn outcome(&self) -> Outcome {
        match (self.hit, self.fwd, self.detail) {
            (true, _, Some(Detail::StaleWhileRevalidate)) => Outcome::Stale,
            (true, _, _) => Outcome::Hit,
            (false, _, Some(Detail::StaleIfError)) => Outcome::Stale,
            _ if self.collapsed => Outcome::Collapsed,
            (false, Some(Fwd::Stale), _) if self.fwd_status == Some(304) => Outcome::Revalidated,
            (false, Some(Fwd::Stale | Fwd::Miss | Fwd::VaryMiss), _) => Outcome::Miss,
            (false, Some(Fwd::Method | Fwd::Bypass | Fwd::Request), _) => Outcome::Pass,
            (false, None, _) => Outcome::Error,
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
            value.push_str(fwd.as_str());
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
        let details = [
            self.detail.map(Detail::as_str),
            self.targeted.as_ref().map(|field| field.as_str()),
            self.cached_error.then_some("cached-error"),
        ];
        for (index, part) in details.into_iter().flatten().enumerate() {
            value.push_str(if index == 0 { "; detail=" } else { "/" });
            value.push_str(part);
        }
        HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static(CACHE_NAME))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_hit_miss_names_its_reason() {
        let status = CacheStatus::forward(Fwd::Miss).detail(Detail::NotStored(NotStored::FirstHit));
        assert_eq!(
            status.header_value(),
            "bloomgate; fwd=miss; detail=first-hit"
        );
        assert_eq!(status.outcome(), Outcome::Miss);
    }

    #[test]
    fn hit_carries_ttl() {
        assert_eq!(
            CacheStatus::hit(42).header_value(),
            "bloomgate; hit; ttl=42"
        );
    }

    #[test]
    fn a_targeted_field_and_a_cached_error_follow_the_detail() {
        let mut status = CacheStatus::forward(Fwd::Miss).detail(Detail::Probation);
        status.stored = true;
        status.targeted = Some(http::HeaderName::from_static("cdn-cache-control"));
        assert_eq!(
            status.header_value(),
            "bloomgate; fwd=miss; stored; detail=probation/cdn-cache-control"
        );
        let mut hit = CacheStatus::hit(5);
        hit.cached_error = true;
        assert_eq!(
            hit.header_value(),
            "bloomgate; hit; ttl=5; detail=cached-error"
        );
    }

    #[test]
    fn stored_miss() {
        let mut status = CacheStatus::forward(Fwd::Miss);
        status.stored = true;
        assert_eq!(status.header_value(), "bloomgate; fwd=miss; stored");
    }
}
