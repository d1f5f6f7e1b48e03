//! Whether an origin response is stored, and why: RFC 9111 storability, framing and size (a pure
//! function of the request and the response head), then the doorkeeper's admission.
//!
//! "May it be stored?" and "is it stored?" are kept apart, as pingora-cache's `put.rs` keeps them:
//! a storable response that the doorkeeper turns away is still shared with the requests that waited
//! for it.

use http::header::HeaderMap;
use http::response;

use crate::admission::Doorkeeper;
use crate::admission::probation::{Budget, Mode, Placement, Segment};
use crate::cache::{CacheKey, NotStored, ResponseControl, storability};
use crate::config::CachePolicy;
pub use crate::proxy::outcome::decision::Decision;
use crate::proxy::response::headers::{ResponseFraming, content_length};

/// A response a shared cache may store.
pub struct Storable {
    /// The body's length when the origin announced it.
    pub content_length: Option<u64>,
    /// The response's directives, as storability read them: the stored entry's freshness.
    pub control: ResponseControl,
}

/// Decides whether a response may be stored, from the request and the response head alone.
///
/// `request_headers` are the client's; `head` has had its framing settled
/// ([`crate::proxy::response::headers::settle_response_framing`]); `control` are its directives, read with the
/// configured targeted fields.
pub fn storable(
    request_headers: &HeaderMap,
    head: &response::Parts,
    control: &ResponseControl,
    framing: ResponseFraming,
    max_object_bytes: u64,
) -> Result<Storable, NotStored> {
    storability(request_headers, head.status, &head.headers, control)?;
    if framing == ResponseFraming::Ambiguous {
        return Err(NotStored::AmbiguousFraming);
    }
    let content_length = content_length(&head.headers);
    if content_length.is_some_and(|length| length > max_object_bytes) {
        return Err(NotStored::TooLarge);
    }
    Ok(Storable {
        content_length,
        control: control.clone(),
    })
}

/// The admission mode for a storable response on a route: the route's own, or `[admission]`'s;
/// and the doorkeeper's second request for an object larger than `second_hit_above`, where the
/// mode would admit its first.
pub fn route_mode(policy: &CachePolicy, global: Mode, content_length: Option<u64>) -> Mode {
    let mode = policy.admission.unwrap_or(global);
    let large = policy
        .second_hit_above
        .is_some_and(|above| content_length.is_some_and(|length| length > above));
    match large {
        true => Mode::SecondHit,
        false => mode,
    }
}

/// Where a storable response goes under the configured mode: the doorkeeper is asked (when the
/// mode keeps one), and its answer, the response's announced length and the store's budget place
/// it. A refetch of a stale stored object was admitted when it was first stored.
pub fn admit(
    mode: Mode,
    doorkeeper: Option<&Doorkeeper>,
    budget: Budget,
    key: &CacheKey,
    revalidating: bool,
    content_length: Option<u64>,
) -> Decision {
    let admission = match (mode.uses_doorkeeper(), revalidating, doorkeeper) {
        (true, false, Some(door)) => Some(door.observe(key.as_bytes())),
        _ => None,
    };
    // A length not announced is checked against the segment's limit as the body is read.
    let size = content_length.unwrap_or(0);
    match budget.place(mode, admission, revalidating, size) {
        Placement::Store(Segment::Main) => Decision::Admitted,
        Placement::Store(Segment::Probation) => Decision::Probation,
        Placement::FirstHit => Decision::FirstHit,
        Placement::TooLarge => Decision::NotStorable(NotStored::TooLarge),
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
        let control = ResponseControl::of(&head.headers, &[]);
        storable(request, head, &control, framing, 1000).map(|s| s.content_length)
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
            Decision::NotStorable(NotStored::TooLarge).label().as_str(),
            "too_large"
        );
    }

    #[test]
    fn a_partial_response_is_never_stored_as_the_object() {
        // RFC 9111 section 3.3 and 3.4: a 206 is not the whole response; the cache stores only
        // whole ones and cuts ranges from them itself.
        let mut partial = head(&[
            ("cache-control", "max-age=60"),
            ("content-range", "bytes 0-9/100"),
            ("content-length", "10"),
        ]);
        partial.status = StatusCode::PARTIAL_CONTENT;
        assert_eq!(
            decide(&HeaderMap::new(), &partial, ResponseFraming::Clear),
            Err(NotStored::Status)
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

    fn door() -> Doorkeeper {
        Doorkeeper::builder(DoorkeeperConfig::with_capacity(1000))
            .build()
            .unwrap()
    }

    #[test]
    fn second_hit_admits_on_the_second_request_and_revalidation_always() {
        let door = door();
        let budget = Budget::new(1000, 0.1);
        let admit = |key: &CacheKey, revalidating| {
            admit(
                Mode::SecondHit,
                Some(&door),
                budget,
                key,
                revalidating,
                Some(10),
            )
        };
        let key = CacheKey::from_string("h/decision".into());
        assert_eq!(admit(&key, false), Decision::FirstHit);
        assert_eq!(admit(&key, false), Decision::Admitted);
        let other = CacheKey::from_string("h/other".into());
        assert_eq!(admit(&other, true), Decision::Admitted);
        let off = super::admit(Mode::Off, None, budget, &other, false, Some(10));
        assert_eq!(off, Decision::Admitted);
    }

    #[test]
    fn probation_takes_first_requests_that_fit_it_and_sends_second_ones_to_main() {
        let door = door();
        let budget = Budget::new(1000, 0.1);
        let admit = |key: &str, length| {
            let key = CacheKey::from_string(key.into());
            admit(Mode::Probation, Some(&door), budget, &key, false, length)
        };
        assert_eq!(admit("h/small", Some(100)), Decision::Probation);
        assert_eq!(admit("h/small", Some(100)), Decision::Admitted);
        assert_eq!(admit("h/big", Some(101)), Decision::FirstHit);
        assert_eq!(admit("h/big", Some(101)), Decision::Admitted);
        // Unknown length: probation, limited to its size as the body is read.
        let unknown = admit("h/chunked", None);
        assert_eq!(unknown, Decision::Probation);
        assert_eq!(unknown.size_limit(500, budget), 100);
        assert_eq!(unknown.too_large(), Decision::FirstHit);
        assert_eq!(Decision::Admitted.size_limit(500, budget), 500);
        assert_eq!(
            Decision::Admitted.too_large(),
            Decision::NotStorable(NotStored::TooLarge)
        );
    }
}
