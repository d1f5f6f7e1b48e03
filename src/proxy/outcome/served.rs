//! What the cache did for one request ([`Served`]), and what is said about it, each derived here
//! once: the RFC 9211 `Cache-Status` member, the metric labels and the access log's fields.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{HeaderName, HeaderValue, Response, StatusCode};

use crate::admission::probation::Segment;
use crate::cache::NotStored;
use crate::cache::policy::PolicyRule;
use crate::proxy::outcome::decision::Decision;
use crate::proxy::upstream::origin::{AnsweredBy, OriginFailure};
use crate::telemetry::{CachedError, Outcome};

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
    /// The proxy's own 503: every server of the request's upstream group is out of rotation.
    UpstreamDown,
    /// The proxy's own 400: the client's request body was malformed or cut short as it was sent.
    ClientBody,
    Purge,
    /// A rule of the route's cache policy decided (`bypass-cookie`, `policy-override`, ...).
    Policy(PolicyRule),
    /// Answered from a large object's slices (`Cache-Status` adds how many were hits).
    Slice,
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
            Detail::UpstreamDown => "upstream-down",
            Detail::ClientBody => "client-body",
            Detail::Purge => "purge",
            Detail::Policy(rule) => rule.as_str(),
            Detail::Slice => "slice",
        }
    }

    /// The detail of a response fetched for the cache and so decided: `probation`, or why it is
    /// not stored.
    pub fn of_decision(decision: Decision) -> Option<Detail> {
        match decision {
            Decision::Probation => Some(Detail::Probation),
            other => other.not_stored().map(Detail::NotStored),
        }
    }
}

impl From<OriginFailure> for Detail {
    fn from(failure: OriginFailure) -> Detail {
        match failure {
            OriginFailure::Error => Detail::OriginError,
            OriginFailure::Timeout => Detail::OriginTimeout,
            OriginFailure::Tls => Detail::OriginTls,
            OriginFailure::Unavailable => Detail::UpstreamDown,
            OriginFailure::ClientBody => Detail::ClientBody,
        }
    }
}

/// What decided how a fetched response is stored, besides RFC 9111's defaults: a targeted field
/// (RFC 9213) whose directives replaced `Cache-Control`, or a rule of the route's policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecidedBy {
    Targeted(HeaderName),
    Policy(PolicyRule),
}

impl DecidedBy {
    pub fn as_str(&self) -> &str {
        match self {
            DecidedBy::Targeted(name) => name.as_str(),
            DecidedBy::Policy(rule) => rule.as_str(),
        }
    }
}

/// Where a hit was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    Ram,
    /// The disk tier (the entry is copied back into RAM).
    Disk,
}

/// What one request was served, and why: every request ends in one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Served {
    /// A fresh stored response, with `ttl` seconds of freshness left.
    Hit { ttl: i64, tier: Tier },
    /// A stale stored response, served at once while it is refreshed in the background
    /// (RFC 5861).
    StaleWhileRevalidate { ttl: i64 },
    /// A stale stored response, served because the origin failed (`origin_status` is the
    /// proxy's 502 or 504, or the origin's own 5xx) and `stale-if-error` allows it (RFC 5861).
    StaleIfError { ttl: i64, origin_status: u16 },
    /// A stored response the origin's 304 found still valid: refreshed, then served. `fwd` says
    /// why it was revalidated: it was stale, or the request's directives asked for it.
    Revalidated { fwd: Fwd, ttl: i64 },
    /// The origin's response to this request's fetch, stored in `segment`. `decided_by` is the
    /// targeted field (RFC 9213) or the policy rule that decided, if one did.
    Stored {
        fwd: Fwd,
        segment: Segment,
        decided_by: Option<DecidedBy>,
    },
    /// The origin's response to this request's fetch, not stored, and why.
    NotStored {
        fwd: Fwd,
        reason: NotStored,
        decided_by: Option<DecidedBy>,
    },
    /// What another request's fetch for the same key brought, which this one waited for: its
    /// response, stored or not (`detail` says why not, or `probation`), or its failure (`detail`
    /// names it).
    Collapsed {
        fwd: Fwd,
        stored: bool,
        detail: Option<Detail>,
    },
    /// Not answered by the cache: passed to the origin as it is (another method, a range the
    /// cache will not cut, `detail` saying why), or a PURGE.
    Bypass { fwd: Fwd, detail: Option<Detail> },
    /// A large object's answer assembled from the `of` slices it touches, `hits` of them found
    /// stored when its head was sent (the others fetched, each admitted on its own).
    Sliced { hits: u64, of: u64 },
    /// Answered by the proxy itself, never forwarded: a request with no valid host or target
    /// (400), or an `OPTIONS` or `TRACE` that reached it with `Max-Forwards: 0`.
    Refused,
    /// The proxy's own 502 or 504: the origin failed.
    Error { fwd: Fwd, failure: OriginFailure },
}

/// The parameters of a `Cache-Status` member (RFC 9211 section 2), in the order they are written.
#[derive(Default)]
struct Parameters {
    hit: bool,
    fwd: Option<Fwd>,
    /// Status of the origin's response, when it differs from the one sent (a 304 behind a 200).
    fwd_status: Option<u16>,
    stored: bool,
    collapsed: bool,
    /// Seconds of freshness left (negative when stale).
    ttl: Option<i64>,
    detail: Option<Detail>,
}

/// The access log's fields that say what the cache did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogFields {
    /// The `bloomgate_requests_total{cache_status}` label.
    pub cache: &'static str,
    pub fwd: Option<&'static str>,
    pub detail: Option<&'static str>,
    /// The admission decision's label, when one was made.
    pub decision: Option<&'static str>,
}

impl Served {
    /// The outcome of this request's own fetch, which the doorkeeper and storability decided.
    pub fn fetched(fwd: Fwd, decision: Decision, decided_by: Option<DecidedBy>) -> Served {
        match decision {
            Decision::Admitted => Served::Stored {
                fwd,
                segment: Segment::Main,
                decided_by,
            },
            Decision::Probation => Served::Stored {
                fwd,
                segment: Segment::Probation,
                decided_by,
            },
            Decision::FirstHit => Served::NotStored {
                fwd,
                reason: NotStored::FirstHit,
                decided_by,
            },
            Decision::NotStorable(reason) => Served::NotStored {
                fwd,
                reason,
                decided_by,
            },
        }
    }

    fn parameters(&self) -> Parameters {
        match *self {
            Served::Hit { ttl, tier } => Parameters {
                hit: true,
                ttl: Some(ttl),
                detail: (tier == Tier::Disk).then_some(Detail::Disk),
                ..Parameters::default()
            },
            Served::StaleWhileRevalidate { ttl } => Parameters {
                hit: true,
                ttl: Some(ttl),
                detail: Some(Detail::StaleWhileRevalidate),
                ..Parameters::default()
            },
            Served::StaleIfError { ttl, origin_status } => Parameters {
                fwd: Some(Fwd::Stale),
                fwd_status: Some(origin_status),
                ttl: Some(ttl),
                detail: Some(Detail::StaleIfError),
                ..Parameters::default()
            },
            Served::Revalidated { fwd, ttl } => Parameters {
                fwd: Some(fwd),
                fwd_status: Some(304),
                stored: true,
                ttl: Some(ttl),
                ..Parameters::default()
            },
            Served::Stored { fwd, segment, .. } => Parameters {
                fwd: Some(fwd),
                stored: true,
                detail: (segment == Segment::Probation).then_some(Detail::Probation),
                ..Parameters::default()
            },
            Served::NotStored { fwd, reason, .. } => Parameters {
                fwd: Some(fwd),
                detail: Some(Detail::NotStored(reason)),
                ..Parameters::default()
            },
            Served::Collapsed {
                fwd,
                stored,
                detail,
            } => Parameters {
                fwd: Some(fwd),
                stored,
                collapsed: true,
                detail,
                ..Parameters::default()
            },
            Served::Bypass { fwd, detail } => Parameters {
                fwd: Some(fwd),
                detail,
                ..Parameters::default()
            },
            Served::Sliced { hits, of } => Parameters {
                hit: hits == of,
                fwd: (hits < of).then_some(Fwd::Miss),
                detail: Some(Detail::Slice),
                ..Parameters::default()
            },
            Served::Refused => Parameters {
                fwd: Some(Fwd::Request),
                ..Parameters::default()
            },
            Served::Error { fwd, failure } => Parameters {
                fwd: Some(fwd),
                detail: Some(failure.into()),
                ..Parameters::default()
            },
        }
    }

    /// How the request counts in `bloomgate_requests_total{cache_status}`. A fetch or pass that
    /// failed at the origin, answered with bloomgate's own 502/504, is an `error` (a request that
    /// waited for a failed fetch stays `collapsed`).
    pub fn outcome(&self) -> Outcome {
        match self {
            Served::Hit { .. } => Outcome::Hit,
            Served::StaleWhileRevalidate { .. } | Served::StaleIfError { .. } => Outcome::Stale,
            Served::Revalidated { .. } => Outcome::Revalidated,
            Served::Stored { .. } | Served::NotStored { .. } => Outcome::Miss,
            Served::Sliced { hits, of } if hits == of => Outcome::Hit,
            Served::Sliced { .. } => Outcome::Miss,
            Served::Collapsed { .. } => Outcome::Collapsed,
            Served::Bypass { .. } | Served::Refused => Outcome::Pass,
            Served::Error { .. } => Outcome::Error,
        }
    }

    /// An error status (4xx or 5xx) served from the cache or stored for later, if a response of
    /// `status` is one: operators watch how many of their errors the cache repeats (RFC 9111 lets
    /// any final status be stored).
    pub fn cached_error(&self, status: StatusCode) -> Option<CachedError> {
        if !(status.is_client_error() || status.is_server_error()) {
            return None;
        }
        let parameters = self.parameters();
        match (parameters.hit, parameters.stored) {
            (true, _) => Some(CachedError::Hit),
            (false, true) => Some(CachedError::Stored),
            (false, false) => None,
        }
    }

    /// The admission decision made for this response, if one was (not for hits, passes, or
    /// requests that waited for another's fetch).
    pub fn decision(&self) -> Option<Decision> {
        match *self {
            Served::Stored {
                segment: Segment::Main,
                ..
            } => Some(Decision::Admitted),
            Served::Stored {
                segment: Segment::Probation,
                ..
            } => Some(Decision::Probation),
            Served::NotStored {
                reason: NotStored::FirstHit,
                ..
            } => Some(Decision::FirstHit),
            Served::NotStored { reason, .. } => Some(Decision::NotStorable(reason)),
            _ => None,
        }
    }

    /// Whether the response was made from a stored entry (its body bytes are hit bytes).
    pub fn served_stored_entry(&self) -> bool {
        matches!(
            self,
            Served::Hit { .. }
                | Served::StaleWhileRevalidate { .. }
                | Served::StaleIfError { .. }
                | Served::Revalidated { .. }
        )
    }

    /// The `Cache-Status` member of a response of `status` so served. A targeted field that
    /// decided follows the detail (`detail=probation/cdn-cache-control`), and a cached error
    /// comes last (`detail=cached-error`).
    pub fn cache_status(&self, status: StatusCode) -> HeaderValue {
        let parameters = self.parameters();
        let mut value = String::with_capacity(64);
        value.push_str(CACHE_NAME);
        if parameters.hit {
            value.push_str("; hit");
        }
        if let Some(fwd) = parameters.fwd {
            value.push_str("; fwd=");
            value.push_str(fwd.as_str());
        }
        if let Some(status) = parameters.fwd_status {
            value.push_str("; fwd-status=");
            let _ = write!(value, "{status}");
        }
        if parameters.stored {
            value.push_str("; stored");
        }
        if parameters.collapsed {
            value.push_str("; collapsed");
        }
        if let Some(ttl) = parameters.ttl {
            // Written in place: a hit's `Cache-Status` carries its ttl, and a `to_string` was one
            // allocation more per hit.
            value.push_str("; ttl=");
            let _ = write!(value, "{ttl}");
        }
        let decided_by = match self {
            Served::Stored { decided_by, .. } | Served::NotStored { decided_by, .. } => {
                decided_by.as_ref()
            }
            _ => None,
        };
        let slice_hits = match self {
            // A HEAD, a 304 or a 416 touches no slice: `detail=slice` alone.
            Served::Sliced { hits, of } if *of > 0 => Some(format!("hits-{hits}-of-{of}")),
            _ => None,
        };
        let details = [
            parameters.detail.map(Detail::as_str),
            slice_hits.as_deref(),
            decided_by.map(DecidedBy::as_str),
            self.cached_error(status).map(|_| "cached-error"),
        ];
        for (index, part) in details.into_iter().flatten().enumerate() {
            value.push_str(match (index, slice_hits.is_some()) {
                (0, _) => "; detail=",
                (1, true) => "-",
                _ => "/",
            });
            value.push_str(part);
        }
        HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static(CACHE_NAME))
    }

    /// The access log's `cache`, `fwd`, `detail` and `decision` fields.
    pub fn log_fields(&self) -> LogFields {
        let parameters = self.parameters();
        LogFields {
            cache: self.outcome().as_str(),
            fwd: parameters.fwd.map(Fwd::as_str),
            detail: parameters.detail.map(Detail::as_str),
            decision: self.decision().map(|decision| decision.label().as_str()),
        }
    }
}

/// The origin's response head for one request: its status, how long it took to arrive, and the
/// server that sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginHead {
    pub status: u16,
    pub elapsed: Duration,
    pub server: Option<Arc<str>>,
}

impl OriginHead {
    /// The head of the origin's `response` to a request sent at `asked`.
    pub fn of<B>(response: &Response<B>, asked: Instant) -> OriginHead {
        OriginHead {
            status: response.status().as_u16(),
            elapsed: asked.elapsed(),
            server: response
                .extensions()
                .get::<AnsweredBy>()
                .map(|by| Arc::clone(&by.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: StatusCode = StatusCode::OK;

    #[test]
    fn first_hit_miss_names_its_reason() {
        let served = Served::NotStored {
            fwd: Fwd::Miss,
            reason: NotStored::FirstHit,
            decided_by: None,
        };
        assert_eq!(
            served.cache_status(OK),
            "bloomgate; fwd=miss; detail=first-hit"
        );
        assert_eq!(served.outcome(), Outcome::Miss);
    }

    #[test]
    fn hit_carries_ttl() {
        let hit = Served::Hit {
            ttl: 42,
            tier: Tier::Ram,
        };
        assert_eq!(hit.cache_status(OK), "bloomgate; hit; ttl=42");
    }

    #[test]
    fn a_targeted_field_and_a_cached_error_follow_the_detail() {
        let served = Served::Stored {
            fwd: Fwd::Miss,
            segment: Segment::Probation,
            decided_by: Some(DecidedBy::Targeted(HeaderName::from_static(
                "cdn-cache-control",
            ))),
        };
        assert_eq!(
            served.cache_status(OK),
            "bloomgate; fwd=miss; stored; detail=probation/cdn-cache-control"
        );
        let hit = Served::Hit {
            ttl: 5,
            tier: Tier::Ram,
        };
        assert_eq!(
            hit.cache_status(StatusCode::NOT_FOUND),
            "bloomgate; hit; ttl=5; detail=cached-error"
        );
    }

    #[test]
    fn an_answer_from_slices_says_how_many_were_hits() {
        let partly = Served::Sliced { hits: 3, of: 8 };
        assert_eq!(
            partly.cache_status(OK),
            "bloomgate; fwd=miss; detail=slice-hits-3-of-8"
        );
        assert_eq!(partly.outcome(), Outcome::Miss);
        let all = Served::Sliced { hits: 8, of: 8 };
        assert_eq!(
            all.cache_status(OK),
            "bloomgate; hit; detail=slice-hits-8-of-8"
        );
        assert_eq!(all.outcome(), Outcome::Hit);
        let head = Served::Sliced { hits: 0, of: 0 };
        assert_eq!(head.cache_status(OK), "bloomgate; hit; detail=slice");
        let error = Served::Sliced { hits: 1, of: 1 };
        assert_eq!(
            error.cache_status(StatusCode::NOT_FOUND),
            "bloomgate; hit; detail=slice-hits-1-of-1/cached-error"
        );
    }

    #[test]
    fn stored_miss() {
        let served = Served::Stored {
            fwd: Fwd::Miss,
            segment: Segment::Main,
            decided_by: None,
        };
        assert_eq!(served.cache_status(OK), "bloomgate; fwd=miss; stored");
    }

    #[test]
    fn a_fetch_keeps_its_admission_decision() {
        for decision in [
            Decision::Admitted,
            Decision::Probation,
            Decision::FirstHit,
            Decision::NotStorable(NotStored::Private),
            Decision::NotStorable(NotStored::TooLarge),
        ] {
            let served = Served::fetched(Fwd::Miss, decision, None);
            assert_eq!(served.decision(), Some(decision));
            let fields = served.log_fields();
            assert_eq!(fields.decision, Some(decision.label().as_str()));
            assert_eq!(
                fields.detail,
                Detail::of_decision(decision).map(Detail::as_str)
            );
        }
    }

    #[test]
    fn an_origin_failure_counts_as_an_error_whatever_the_request_was() {
        let failed = |fwd| Served::Error {
            fwd,
            failure: OriginFailure::Timeout,
        };
        assert_eq!(failed(Fwd::Stale).outcome(), Outcome::Error);
        assert_eq!(failed(Fwd::Miss).outcome(), Outcome::Error);
        assert_eq!(failed(Fwd::Method).outcome(), Outcome::Error);
        assert_eq!(
            failed(Fwd::Miss).cache_status(StatusCode::GATEWAY_TIMEOUT),
            "bloomgate; fwd=miss; detail=origin-timeout"
        );
    }
}
