//! Whether an origin response is stored, and why: RFC 9111 storability, framing and size (a pure
//! function of the request and the response head), then the doorkeeper's admission.
//!
//! "May it be stored?" and "is it stored?" are kept apart, as pingora-cache's `put.rs` keeps them:
//! a storable response that the doorkeeper turns away is still shared with the requests that waited
//! for it.

use std::time::SystemTime;

use http::header::{self, HeaderMap};
use http::{Method, response};
use http_cache_semantics::CachePolicy;

use super::headers::ResponseFraming;
use crate::admission::{Admission, Doorkeeper};
use crate::cache::{CacheKey, NotStored, policy_for, storability};

/// A response a shared cache may store.
pub struct Storable {
    pub policy: CachePolicy,
    /// The body's length when the origin announced it.
    pub content_length: Option<u64>,
}

/// Decides whether a response may be stored, from the request and the response head alone.
///
/// `request_headers` are the client's; `head` has had its framing settled
/// ([`super::headers::settle_response_framing`]).
pub fn storable(
    request_headers: &HeaderMap,
    head: &response::Parts,
    framing: ResponseFraming,
    max_object_bytes: u64,
    now: SystemTime,
) -> Result<Storable, NotStored> {
    let policy = policy_for(
        &Method::GET,
        request_headers,
        head.status,
        &head.headers,
        now,
    );
    storability(request_headers, &head.headers, &policy, now)?;
    if framing == ResponseFraming::Ambiguous {
        return Err(NotStored::AmbiguousFraming);
    }
    let content_length = head
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if content_length.is_some_and(|length| length > max_object_bytes) {
        return Err(NotStored::TooLarge);
    }
    Ok(Storable {
        policy,
        content_length,
    })
}

/// What became of an origin response: the label of `bloomgate_admission_total{decision}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Stored.
    Admitted,
    /// Storable, but the doorkeeper had not seen its key: served and shared, not stored.
    FirstHit,
    /// Not storable, for this reason.
    NotStorable(NotStored),
}

impl Decision {
    /// Every label, registered at start so every series exists; the dashboard uses these.
    pub const LABELS: [&'static str; 4] = ["admitted", "first_hit", "not_storable", "too_large"];

    pub fn label(self) -> &'static str {
        match self {
            Decision::Admitted => Decision::LABELS[0],
            Decision::FirstHit => Decision::LABELS[1],
            Decision::NotStorable(NotStored::TooLarge) => Decision::LABELS[3],
            Decision::NotStorable(_) => Decision::LABELS[2],
        }
    }

    /// Why the response is not stored, if it is not.
    pub fn not_stored(self) -> Option<NotStored> {
        match self {
            Decision::Admitted => None,
            Decision::FirstHit => Some(NotStored::FirstHit),
            Decision::NotStorable(reason) => Some(reason),
        }
    }
}

/// Asks the doorkeeper about a storable response's key (with admission off, everything storable
/// is admitted). A refetch of a stale stored object was admitted when it was first stored.
pub fn admit(doorkeeper: Option<&Doorkeeper>, key: &CacheKey, revalidating: bool) -> Decision {
    if revalidating {
        return Decision::Admitted;
    }
    match doorkeeper.map(|door| door.observe(key.as_bytes())) {
        Some(Admission::FirstSeen) => Decision::FirstHit,
        Some(Admission::SeenBefore) | None => Decision::Admitted,
    }
}

#[cfg(test)]
mod tests {
    use http::{HeaderValue, Response, StatusCode};

    use super::*;
    use crate::admission::DoorkeeperConfig;

    fn head(pairs: &[(&'static str, &'static str)]) -> response::Parts {
        let mut response = Response::new(());
        for (name, value) in pairs {
            response
                .headers_mut()
                .append(*name, HeaderValue::from_static(value));
        }
        *response.status_mut() = StatusCode::OK;
        response.into_parts().0
    }

    fn decide(
        request: &HeaderMap,
        head: &response::Parts,
        framing: ResponseFraming,
    ) -> Result<Option<u64>, NotStored> {
        storable(request, head, framing, 1000, SystemTime::now()).map(|s| s.content_length)
    }

    #[test]
    fn a_fresh_response_within_the_size_limit_is_storable() {
        let ok = head(&[("cache-control", "max-age=60"), ("content-length", "10")]);
        assert_eq!(
            decide(&HeaderMap::new(), &ok, ResponseFraming::Clear),
            Ok(Some(10))
        );
    }

    #[test]
    fn an_ambiguously_framed_response_is_never_storable() {
        let ok = head(&[("cache-control", "max-age=60")]);
        assert_eq!(
            decide(&HeaderMap::new(), &ok, ResponseFraming::Ambiguous),
            Err(NotStored::AmbiguousFraming)
        );
    }

    #[test]
    fn an_announced_length_over_the_limit_is_too_large() {
        let big = head(&[("cache-control", "max-age=60"), ("content-length", "1001")]);
        let decision = decide(&HeaderMap::new(), &big, ResponseFraming::Clear);
        assert_eq!(decision, Err(NotStored::TooLarge));
        assert_eq!(
            Decision::NotStorable(NotStored::TooLarge).label(),
            "too_large"
        );
    }

    #[test]
    fn rfc_refusals_come_before_size() {
        let private = head(&[("cache-control", "private"), ("content-length", "5000")]);
        assert_eq!(
            decide(&HeaderMap::new(), &private, ResponseFraming::Clear),
            Err(NotStored::Private)
        );
    }

    #[test]
    fn the_doorkeeper_admits_on_the_second_request_and_revalidation_always() {
        let door = Doorkeeper::new(DoorkeeperConfig {
            capacity: 1000,
            target_fpr: 0.01,
            rotate_at_fpr: 0.02,
            max_age: std::time::Duration::from_secs(3600),
        });
        let key = CacheKey::from_string("h/decision".into());
        assert_eq!(admit(Some(&door), &key, false), Decision::FirstHit);
        assert_eq!(admit(Some(&door), &key, false), Decision::Admitted);
        let other = CacheKey::from_string("h/other".into());
        assert_eq!(admit(Some(&door), &other, true), Decision::Admitted);
        assert_eq!(admit(None, &other, false), Decision::Admitted);
    }
}
