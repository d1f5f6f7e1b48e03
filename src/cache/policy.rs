//! A route's cache policy applied: pure functions of the policy (`config::CachePolicy`) and a
//! request or a response head, one per phase that acts on it. The rule that decided is returned
//! so that `Cache-Status` can name it.

use std::time::{Duration, SystemTime};

use http::StatusCode;
use http::header::{self, HeaderMap, HeaderValue};
use http::request::Parts;

use super::control::{Delta, ResponseControl};
use super::freshness::{Lifetime, has_explicit_freshness};
use crate::config::{CachePolicy, Conditions};

static RFC: std::sync::LazyLock<CachePolicy> = std::sync::LazyLock::new(CachePolicy::rfc);

/// The policy of a route that says nothing: RFC 9111 as the cache follows it.
pub fn rfc() -> &'static CachePolicy {
    &RFC
}

/// A policy rule that decided what the cache did: the `detail` of `Cache-Status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyRule {
    /// The route is not cached (`enabled = false`).
    BypassRoute,
    BypassCookie,
    BypassHeader,
    BypassQuery,
    BypassMethod,
    NoStoreCookie,
    NoStoreHeader,
    NoStoreQuery,
    NoStoreMethod,
    /// `override_ttl` replaced the origin's lifetime.
    Override,
    /// `default_ttl` gave a response without freshness information its lifetime.
    DefaultTtl,
    /// `min_ttl` or `max_ttl` clamped the origin's lifetime.
    Clamp,
}

impl PolicyRule {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyRule::BypassRoute => "bypass-route",
            PolicyRule::BypassCookie => "bypass-cookie",
            PolicyRule::BypassHeader => "bypass-header",
            PolicyRule::BypassQuery => "bypass-query",
            PolicyRule::BypassMethod => "bypass-method",
            PolicyRule::NoStoreCookie => "no-store-cookie",
            PolicyRule::NoStoreHeader => "no-store-header",
            PolicyRule::NoStoreQuery => "no-store-query",
            PolicyRule::NoStoreMethod => "no-store-method",
            PolicyRule::Override => "policy-override",
            PolicyRule::DefaultTtl => "policy-default-ttl",
            PolicyRule::Clamp => "policy-clamp",
        }
    }
}

/// Which kind of condition matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Matched {
    Cookie,
    Header,
    Query,
    Method,
}

/// The request phase: why a request is neither looked up nor stored, if the policy says so.
pub fn bypass(policy: &CachePolicy, parts: &Parts) -> Option<PolicyRule> {
    if !policy.enabled {
        return Some(PolicyRule::BypassRoute);
    }
    matching(&policy.bypass, parts).map(|matched| match matched {
        Matched::Cookie => PolicyRule::BypassCookie,
        Matched::Header => PolicyRule::BypassHeader,
        Matched::Query => PolicyRule::BypassQuery,
        Matched::Method => PolicyRule::BypassMethod,
    })
}

/// The response phase: why a response to this request is not stored, if the policy says so.
pub fn no_store(policy: &CachePolicy, parts: &Parts) -> Option<PolicyRule> {
    matching(&policy.no_store, parts).map(|matched| match matched {
        Matched::Cookie => PolicyRule::NoStoreCookie,
        Matched::Header => PolicyRule::NoStoreHeader,
        Matched::Query => PolicyRule::NoStoreQuery,
        Matched::Method => PolicyRule::NoStoreMethod,
    })
}

fn matching(conditions: &Conditions, parts: &Parts) -> Option<Matched> {
    if conditions.is_empty() {
        return None;
    }
    if conditions.methods.contains(&parts.method) {
        return Some(Matched::Method);
    }
    let header = conditions.headers.iter().any(|(name, wanted)| {
        let mut values = parts.headers.get_all(name).iter().peekable();
        match wanted {
            None => values.peek().is_some(),
            Some(wanted) => values.any(|value| value == wanted),
        }
    });
    if header {
        return Some(Matched::Header);
    }
    if conditions
        .cookies
        .iter()
        .any(|name| cookie(&parts.headers, name).is_some())
    {
        return Some(Matched::Cookie);
    }
    let query = parts.uri.query().unwrap_or_default();
    let in_query = query.split('&').any(|pair| {
        let name = pair.split('=').next().unwrap_or(pair);
        conditions.query_params.iter().any(|wanted| wanted == name)
    });
    in_query.then_some(Matched::Query)
}

/// The value of the first cookie called `name` in the request's `Cookie` fields (RFC 6265
/// section 5.4: `name=value` pairs separated by `; `).
pub fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h [u8]> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .flat_map(|value| value.as_bytes().split(|b| *b == b';'))
        .find_map(|pair| {
            let pair = pair.trim_ascii();
            let equals = pair.iter().position(|b| *b == b'=')?;
            (pair[..equals].trim_ascii() == name.as_bytes())
                .then(|| pair[equals + 1..].trim_ascii())
        })
}

/// The request phase: what the policy removes or rewrites in the client's request before it is
/// looked up and fetched. The client's `Cache-Control` and `Pragma` go when the route ignores
/// them (a reload is then a hit, and the origin is not asked to bypass its own caches either).
pub fn prepare_request(policy: &CachePolicy, headers: &mut HeaderMap) {
    if policy.ignore_client_cache_control {
        headers.remove(header::CACHE_CONTROL);
        headers.remove(header::PRAGMA);
    }
}

/// The codings a cache can tell apart, in the order one is chosen.
const CODINGS: [&str; 3] = ["br", "zstd", "gzip"];

/// `Accept-Encoding` reduced to the one coding of [`CODINGS`] the client accepts first in their
/// order, or `identity` (never removed: no field means any coding, RFC 9110 section 12.5.3). Only
/// codings given a non-zero weight count, and `*` stands for those not named.
pub fn normalize_accept_encoding(headers: &mut HeaderMap) {
    let mut weights: Vec<(String, bool)> = Vec::new();
    for value in headers.get_all(header::ACCEPT_ENCODING) {
        let Ok(text) = value.to_str() else { continue };
        for member in text.split(',') {
            let mut params = member.split(';');
            let coding = params
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            if coding.is_empty() {
                continue;
            }
            let accepted = params
                .filter_map(|param| param.trim().strip_prefix("q="))
                .next()
                .is_none_or(|q| q.trim().parse::<f32>().is_ok_and(|q| q > 0.0));
            weights.push((coding, accepted));
        }
    }
    let accepts = |coding: &str| match weights.iter().find(|(named, _)| named == coding) {
        Some((_, accepted)) => *accepted,
        None => weights
            .iter()
            .any(|(named, accepted)| named == "*" && *accepted),
    };
    let chosen = CODINGS
        .into_iter()
        .find(|coding| accepts(coding))
        .unwrap_or("identity");
    headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static(chosen));
}

/// The response phase, on the head of a response fetched for the cache: `Set-Cookie` removed
/// when the route ignores it (from the copy stored and the response sent alike), and the `Vary`
/// fields the route ignores taken out of `Vary`.
pub fn prepare_response(policy: &CachePolicy, headers: &mut HeaderMap) {
    if policy.ignore_origin.set_cookie {
        headers.remove(header::SET_COOKIE);
    }
    if policy.ignore_vary.is_empty() || !headers.contains_key(header::VARY) {
        return;
    }
    let kept: Vec<String> = headers
        .get_all(header::VARY)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .filter(|name| {
            !policy
                .ignore_vary
                .iter()
                .any(|ignored| name.eq_ignore_ascii_case(ignored.as_str()))
        })
        .map(str::to_owned)
        .collect();
    headers.remove(header::VARY);
    if let Ok(value) = HeaderValue::from_str(&kept.join(", "))
        && !kept.is_empty()
    {
        headers.insert(header::VARY, value);
    }
}

/// The response's directives as the route reads them: what it ignores taken out, its lifetimes
/// put in, and the stale windows it grants added. Returns the rule that set the lifetime, if one
/// did. Applied wherever a stored response's directives are read (stored, read back from disk,
/// refreshed by a 304), so they agree.
pub fn read_control(
    policy: &CachePolicy,
    status: StatusCode,
    headers: &HeaderMap,
    mut control: ResponseControl,
) -> (ResponseControl, Option<PolicyRule>) {
    let ignores = &policy.ignore_origin;
    if ignores.cache_control {
        control.directives = Default::default();
        control.source = super::control::Source::CacheControl;
    }
    let directives = &mut control.directives;
    directives.private &= !ignores.private;
    directives.no_cache &= !ignores.no_cache;
    directives.no_store &= !ignores.no_store;
    control.expires_ignored |= ignores.expires;
    let seconds = |ttl: Duration| Some(Delta::Seconds(ttl.as_secs()));
    let mut rule = None;
    if let Some(ttl) = policy.override_ttl.get(status) {
        control.directives.max_age = seconds(ttl);
        control.directives.s_maxage = None;
        control.expires_ignored = true;
        rule = Some(PolicyRule::Override);
    } else if !has_explicit_freshness(headers, &control) {
        if let Some(ttl) = policy.default_ttl.get(status) {
            control.directives.max_age = seconds(ttl);
            rule = Some(PolicyRule::DefaultTtl);
        }
    } else if policy.min_ttl.is_some() || policy.max_ttl.is_some() {
        // The origin's explicit lifetime (the response time does not change it).
        let lifetime = Lifetime::of(status, headers, &control, SystemTime::UNIX_EPOCH).freshness();
        let min = policy.min_ttl.unwrap_or(Duration::ZERO);
        let clamped = policy
            .max_ttl
            .map_or(lifetime.max(min), |max| lifetime.max(min).min(max));
        if clamped != lifetime {
            let shared = control.directives.s_maxage.is_some();
            let delta = seconds(clamped);
            match shared {
                true => control.directives.s_maxage = delta,
                false => control.directives.max_age = delta,
            }
            control.expires_ignored = true;
            rule = Some(PolicyRule::Clamp);
        }
    }
    let widen = |given: Option<Delta>, window: Option<Duration>| match window {
        Some(window) => Some(Delta::Seconds(
            given.map_or(0, Delta::seconds).max(window.as_secs()),
        )),
        None => given,
    };
    let directives = &mut control.directives;
    directives.stale_if_error = widen(directives.stale_if_error, policy.stale_if_error);
    directives.stale_while_revalidate = widen(
        directives.stale_while_revalidate,
        policy.stale_while_revalidate,
    );
    (control, rule)
}

/// Whether a request may be stored although it carries `Authorization` (RFC 9111 section 3.5
/// waived by name): the headers storability should see.
pub fn storing_request_headers<'h>(
    policy: &CachePolicy,
    headers: &'h HeaderMap,
) -> std::borrow::Cow<'h, HeaderMap> {
    if policy.share_authorized && headers.contains_key(header::AUTHORIZATION) {
        let mut shared = headers.clone();
        shared.remove(header::AUTHORIZATION);
        return std::borrow::Cow::Owned(shared);
    }
    std::borrow::Cow::Borrowed(headers)
}

#[cfg(test)]
mod tests {
    use http::Request;

    use super::*;
    use crate::config::StatusTtl;

    fn parts(uri: &str, headers: &[(&'static str, &'static str)]) -> Parts {
        let mut request = Request::builder().uri(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).expect("request").into_parts().0
    }

    fn normalized(value: &'static str) -> HeaderValue {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static(value));
        normalize_accept_encoding(&mut headers);
        headers[header::ACCEPT_ENCODING].clone()
    }

    #[test]
    fn browsers_that_accept_the_same_codings_in_other_words_share_one_value() {
        assert_eq!(normalized("gzip, deflate, br, zstd"), "br");
        assert_eq!(normalized("br;q=1.0, gzip;q=0.8, *;q=0.1"), "br");
        assert_eq!(normalized("gzip, deflate"), "gzip");
        assert_eq!(normalized("br;q=0, gzip"), "gzip");
        assert_eq!(normalized("*"), "br");
        assert_eq!(normalized("deflate"), "identity");
        assert_eq!(normalized("gzip;q=0"), "identity");
    }

    #[test]
    fn a_cookie_is_found_by_its_exact_name_only() {
        let request = parts("/", &[("cookie", "a=1; session=xyz; sessionx=2")]);
        assert_eq!(cookie(&request.headers, "session"), Some(&b"xyz"[..]));
        assert_eq!(cookie(&request.headers, "sess"), None);
        let bypass = CachePolicy {
            bypass: Conditions {
                cookies: vec!["session".into()],
                ..Conditions::default()
            },
            ..CachePolicy::rfc()
        };
        assert_eq!(
            super::bypass(&bypass, &request),
            Some(PolicyRule::BypassCookie)
        );
        let other = parts("/", &[("cookie", "sessionx=2")]);
        assert_eq!(super::bypass(&bypass, &other), None);
    }

    #[test]
    fn an_override_replaces_the_origin_lifetime_and_clamps_bound_it() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("private, no-cache, max-age=5"),
        );
        let origin = ResponseControl::of(&headers, &[]);
        let policy = CachePolicy {
            override_ttl: StatusTtl {
                by_status: vec![(StatusCode::OK, Duration::from_secs(3600))],
                any: None,
            },
            ignore_origin: crate::config::OriginIgnores {
                cache_control: true,
                ..Default::default()
            },
            ..CachePolicy::rfc()
        };
        let (control, rule) = read_control(&policy, StatusCode::OK, &headers, origin.clone());
        assert_eq!(rule, Some(PolicyRule::Override));
        assert!(!control.directives.private && !control.directives.no_cache);
        assert_eq!(control.directives.max_age, Some(Delta::Seconds(3600)));
        let (_, rule) = read_control(&policy, StatusCode::NOT_FOUND, &headers, origin.clone());
        assert_eq!(rule, None, "the override names 200 only");
        let clamp = CachePolicy {
            min_ttl: Some(Duration::from_secs(60)),
            ..CachePolicy::rfc()
        };
        let (control, rule) = read_control(&clamp, StatusCode::OK, &headers, origin);
        assert_eq!(rule, Some(PolicyRule::Clamp));
        assert_eq!(control.directives.max_age, Some(Delta::Seconds(60)));
        assert!(control.directives.private, "a clamp ignores nothing");
    }
}
