//! A stored response, and the RFC 9111 rules that decide whether a response may be stored and reused.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};
use http_cache_semantics::{CacheOptions, CachePolicy, RequestLike};

use super::{field, weight};

/// Why a response was not stored; the text is the `detail` of its `Cache-Status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotStored {
    /// The doorkeeper had not seen the object before: served, not stored.
    FirstHit,
    NoStore,
    Private,
    Authorization,
    SetCookie,
    VaryStar,
    Status,
    /// Neither a freshness lifetime nor a validator: a stored copy could never be reused.
    NoFreshness,
    TooLarge,
    /// The origin framed the body two ways (`Transfer-Encoding` and `Content-Length`): forwarded
    /// by its chunked framing, never stored (RFC 9112 section 6.3).
    AmbiguousFraming,
    /// The request asked not to use or store a cached response (`Cache-Control: no-store`).
    RequestNoStore,
}

impl NotStored {
    pub fn as_str(self) -> &'static str {
        match self {
            NotStored::FirstHit => "first-hit",
            NotStored::NoStore => "no-store",
            NotStored::Private => "private",
            NotStored::Authorization => "authorization",
            NotStored::SetCookie => "set-cookie",
            NotStored::VaryStar => "vary-star",
            NotStored::Status => "status",
            NotStored::NoFreshness => "no-freshness",
            NotStored::TooLarge => "too-large",
            NotStored::AmbiguousFraming => "ambiguous-framing",
            NotStored::RequestNoStore => "request-no-store",
        }
    }
}

/// The request as the cache policy sees it: the key has already matched, so the URI always does.
pub struct PolicyRequest<'a> {
    pub method: &'a Method,
    pub headers: &'a HeaderMap,
}

impl RequestLike for PolicyRequest<'_> {
    fn uri(&self) -> http::Uri {
        http::Uri::from_static("/")
    }
    fn is_same_uri(&self, _other: &http::Uri) -> bool {
        true
    }
    fn method(&self) -> &Method {
        self.method
    }
    fn headers(&self) -> &HeaderMap {
        self.headers
    }
}

/// The response as the cache policy sees it.
pub struct PolicyResponse<'a> {
    pub status: StatusCode,
    pub headers: &'a HeaderMap,
}

impl http_cache_semantics::ResponseLike for PolicyResponse<'_> {
    fn status(&self) -> StatusCode {
        self.status
    }
    fn headers(&self) -> &HeaderMap {
        self.headers
    }
}

pub fn policy_for(
    method: &Method,
    request_headers: &HeaderMap,
    status: StatusCode,
    response_headers: &HeaderMap,
    response_time: SystemTime,
) -> CachePolicy {
    CachePolicy::new_options(
        &PolicyRequest {
            method,
            headers: &policy_request_fields(request_headers, response_headers),
        },
        &PolicyResponse {
            status,
            headers: &policy_response_fields(response_headers),
        },
        response_time,
        CacheOptions {
            shared: true,
            ..CacheOptions::default()
        },
    )
}

/// The request fields a policy keeps: those it reads again after it is made (`Host`, which a later
/// request must match, and the fields the response varies on), owned (see `owned_headers`).
///
/// Everything else would be a copy per entry of all the first requester's headers. Nor are the first requester's credentials kept: a stored entry, and its
/// disk record, would hold them for as long as the entry lives. `storability` has already read
/// them; only a field the response varies on stays, for the policy's own `Vary` matching.
pub fn policy_request_fields(
    request_headers: &HeaderMap,
    response_headers: &HeaderMap,
) -> HeaderMap {
    let varied: Vec<HeaderName> = vary_header_names(response_headers).collect();
    owned_fields(request_headers, |name| {
        policy_reads_request_field(name, &varied)
    })
}

fn policy_reads_request_field(name: &HeaderName, varied: &[HeaderName]) -> bool {
    POLICY_REQUEST_FIELDS.contains(name) || varied.contains(name)
}

/// The response fields a policy keeps: those its freshness, age, validators and `Vary` are read
/// from, owned.
fn policy_response_fields(response_headers: &HeaderMap) -> HeaderMap {
    owned_fields(response_headers, |name| {
        POLICY_RESPONSE_FIELDS.contains(name)
    })
}

/// Request fields the policy reads after it is made (`Cache-Control` is parsed as it is made).
const POLICY_REQUEST_FIELDS: [HeaderName; 2] = [header::HOST, header::CACHE_CONTROL];

/// Response fields `http-cache-semantics` reads (its `is_storable`, `time_to_live`, `age`,
/// `before_request` and `after_response`).
const POLICY_RESPONSE_FIELDS: [HeaderName; 10] = [
    header::AGE,
    header::CACHE_CONTROL,
    header::DATE,
    header::ETAG,
    header::EXPIRES,
    header::LAST_MODIFIED,
    header::PRAGMA,
    header::SET_COOKIE,
    header::VARY,
    header::WARNING,
];

/// Decides whether a shared cache may store this response (RFC 9111 section 3), and if not, why.
///
/// The reasons are checked in the order an operator would look for them; `http-cache-semantics`
/// has the final word on everything it knows.
pub fn storability(
    request_headers: &HeaderMap,
    response_headers: &HeaderMap,
    policy: &CachePolicy,
    now: SystemTime,
) -> Result<(), NotStored> {
    let response_cc = directives(response_headers);
    let request_cc = directives(request_headers);
    if has(&request_cc, "no-store") {
        return Err(NotStored::RequestNoStore);
    }
    if has(&response_cc, "no-store") {
        return Err(NotStored::NoStore);
    }
    if has(&response_cc, "private") {
        return Err(NotStored::Private);
    }
    if request_headers.contains_key(header::AUTHORIZATION)
        && !(has(&response_cc, "public")
            || has(&response_cc, "s-maxage")
            || has(&response_cc, "must-revalidate"))
    {
        return Err(NotStored::Authorization);
    }
    // A shared cache must not hand one client's cookie to another.
    if response_headers.contains_key(header::SET_COOKIE) {
        return Err(NotStored::SetCookie);
    }
    if vary_names(response_headers).any(|name| name == "*") {
        return Err(NotStored::VaryStar);
    }
    if !policy.is_storable() {
        return Err(NotStored::Status);
    }
    let has_validator = response_headers.contains_key(header::ETAG)
        || response_headers.contains_key(header::LAST_MODIFIED);
    if policy.time_to_live(now).is_zero()
        && !has_validator
        && stale_extensions(response_headers).is_zero()
    {
        return Err(NotStored::NoFreshness);
    }
    Ok(())
}

/// A response held in the cache: end-to-end headers, the body shared by every hit, and its policy.
#[derive(Debug)]
pub struct StoredResponse {
    pub policy: CachePolicy,
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// When the response stops being fresh.
    pub fresh_until: SystemTime,
    pub stale_while_revalidate: Duration,
    pub stale_if_error: Duration,
    /// The request fields the response's `Vary` names, lower-cased, in the order it names them.
    pub vary_names: Box<[HeaderName]>,
    /// Those fields' combined values as the stored request had them: which requests this variant
    /// answers.
    pub vary_selection: Box<[Option<HeaderValue>]>,
    /// Bytes this entry costs the store: body, headers and bookkeeping.
    pub weight: u32,
}

/// What a stored response costs in memory (see [`weight`]): its body, its headers, the policy's
/// copies of some of them, its `Vary` selection, and the structs around them.
fn weigh(
    headers: &HeaderMap,
    body: &Bytes,
    request_headers: &HeaderMap,
    varied_names: &[HeaderName],
    vary_selection: &[Option<HeaderValue>],
) -> u32 {
    let policy = weight::header_fields(
        headers
            .iter()
            .filter(|(name, _)| POLICY_RESPONSE_FIELDS.contains(name)),
    ) + weight::header_fields(
        request_headers
            .iter()
            .filter(|(name, _)| policy_reads_request_field(name, varied_names)),
    );
    let selection = vary_selection
        .iter()
        .flatten()
        .map(|value| weight::allocation(value.len()))
        .sum::<usize>()
        + weight::allocation(std::mem::size_of_val(vary_selection))
        + weight::allocation(std::mem::size_of_val(varied_names));
    let bytes = weight::allocation(body.len())
        + weight::header_fields(headers.iter())
        + policy
        + selection
        + ENTRY;
    u32::try_from(bytes).unwrap_or(u32::MAX)
}

/// What every stored response holds whatever its headers: its struct in an `Arc`, and the
/// policy's parsed `Cache-Control` directives (a small map and its strings). Measured in
/// `tests/memory`.
const ENTRY: usize = std::mem::size_of::<StoredResponse>() + 16 + 320;

/// How a stored response can answer a request now.
pub enum Freshness {
    Fresh,
    /// Stale, but within `stale-while-revalidate`: serve it and revalidate in the background.
    StaleWhileRevalidate,
    /// Must be revalidated before use.
    Stale,
}

impl StoredResponse {
    pub fn new(
        policy: CachePolicy,
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
        request_headers: &HeaderMap,
        now: SystemTime,
    ) -> StoredResponse {
        let fresh_until = now + policy.time_to_live(now);
        let vary_names: Box<[HeaderName]> = vary_header_names(&headers).collect();
        // Owned: the selection lives as long as the entry (see `owned_headers`).
        let vary_selection: Box<[Option<HeaderValue>]> =
            field::selection(request_headers, &vary_names)
                .iter()
                .map(|value| value.as_ref().map(owned_value))
                .collect();
        let extensions = directives(&headers);
        let weight = weigh(
            &headers,
            &body,
            request_headers,
            &vary_names,
            &vary_selection,
        );
        StoredResponse {
            stale_while_revalidate: seconds(&extensions, "stale-while-revalidate"),
            stale_if_error: seconds(&extensions, "stale-if-error"),
            policy,
            status,
            headers,
            body,
            fresh_until,
            vary_names,
            vary_selection,
            weight,
        }
    }

    /// Whether this variant was stored for a request that selected the same `Vary` field values
    /// (each field's lines joined, RFC 9111 section 4.1).
    pub fn vary_matches(&self, request_headers: &HeaderMap) -> bool {
        *field::selection(request_headers, &self.vary_names) == *self.vary_selection
    }

    pub fn freshness(
        &self,
        method: &Method,
        request_headers: &HeaderMap,
        now: SystemTime,
    ) -> Freshness {
        let simple_request = !request_headers.contains_key(header::CACHE_CONTROL)
            && !request_headers.contains_key(header::PRAGMA);
        let fresh = if simple_request {
            now < self.fresh_until
        } else {
            self.policy
                .before_request(
                    &PolicyRequest {
                        method,
                        headers: request_headers,
                    },
                    now,
                )
                .satisfies_without_revalidation()
        };
        if fresh {
            Freshness::Fresh
        } else if simple_request && self.staleness(now) < self.stale_while_revalidate {
            Freshness::StaleWhileRevalidate
        } else {
            Freshness::Stale
        }
    }

    /// How long ago the response stopped being fresh (zero while fresh).
    pub fn staleness(&self, now: SystemTime) -> Duration {
        now.duration_since(self.fresh_until).unwrap_or_default()
    }

    /// Whether `stale-if-error` allows serving this response when the origin fails now.
    pub fn usable_on_error(&self, now: SystemTime) -> bool {
        self.staleness(now) < self.stale_if_error
    }

    /// Seconds of freshness left; negative once stale (RFC 9211 `ttl`).
    pub fn ttl_seconds(&self, now: SystemTime) -> i64 {
        match self.fresh_until.duration_since(now) {
            Ok(left) => left.as_secs() as i64,
            Err(past) => -(past.duration().as_secs() as i64),
        }
    }

    pub fn age(&self, now: SystemTime) -> Duration {
        self.policy.age(now)
    }

    /// How long the store should keep the entry: freshness plus the windows in which a stale copy
    /// is still useful (served stale, or revalidated with a conditional request).
    pub fn keep_for(&self, now: SystemTime) -> Duration {
        let has_validator = self.headers.contains_key(header::ETAG)
            || self.headers.contains_key(header::LAST_MODIFIED);
        // A stale entry with validators saves the body transfer on revalidation for a while.
        let revalidation_window = if has_validator {
            Duration::from_secs(600)
        } else {
            Duration::ZERO
        };
        let stale_window = self
            .stale_while_revalidate
            .max(self.stale_if_error)
            .max(revalidation_window);
        self.fresh_until.duration_since(now).unwrap_or_default() + stale_window
    }

    pub fn etag(&self) -> Option<&HeaderValue> {
        self.headers.get(header::ETAG)
    }

    pub fn last_modified(&self) -> Option<&HeaderValue> {
        self.headers.get(header::LAST_MODIFIED)
    }
}

fn seconds(directives: &[(String, Option<String>)], name: &str) -> Duration {
    directives
        .iter()
        .find(|(directive, _)| directive == name)
        .and_then(|(_, value)| value.as_deref())
        .and_then(|value| value.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or_default()
}

fn stale_extensions(headers: &HeaderMap) -> Duration {
    let cc = directives(headers);
    seconds(&cc, "stale-while-revalidate").max(seconds(&cc, "stale-if-error"))
}

fn has(directives: &[(String, Option<String>)], name: &str) -> bool {
    directives.iter().any(|(directive, _)| directive == name)
}

/// A copy of the headers that owns its memory.
///
/// hyper parses header values as slices of the connection's read buffer; a stored entry keeping
/// those slices would keep the whole buffer alive (measured: ~27 KiB of memory per 8 KiB object).
/// The copy holds its values in one buffer of their own, and its entries allocated to their
/// number: a stored entry's headers cost what [`weight::header_fields`] counts.
pub fn owned_headers(headers: &HeaderMap) -> HeaderMap {
    owned_fields(headers, |_| true)
}

/// [`owned_headers`] of the fields `keep` selects.
fn owned_fields(headers: &HeaderMap, keep: impl Fn(&HeaderName) -> bool) -> HeaderMap {
    let kept = || headers.iter().filter(|(name, _)| keep(name));
    let mut buffer = Vec::with_capacity(kept().map(|(_, value)| value.len()).sum());
    for (_, value) in kept() {
        buffer.extend_from_slice(value.as_bytes());
    }
    let buffer = Bytes::from(buffer);
    let mut owned = HeaderMap::with_capacity(kept().count());
    let mut start = 0;
    for (name, value) in kept() {
        let end = start + value.len();
        let mut copy = HeaderValue::from_maybe_shared(buffer.slice(start..end))
            .unwrap_or_else(|_| owned_value(value));
        copy.set_sensitive(value.is_sensitive());
        start = end;
        let name =
            HeaderName::from_bytes(name.as_str().as_bytes()).unwrap_or_else(|_| name.clone());
        owned.append(name, copy);
    }
    // A map's entries have room to grow by a third; its clone's are allocated to their number.
    owned.clone()
}

/// A copy of one header value that owns its memory (see [`owned_headers`]).
fn owned_value(value: &HeaderValue) -> HeaderValue {
    let mut copy = HeaderValue::from_bytes(value.as_bytes()).unwrap_or_else(|_| value.clone());
    copy.set_sensitive(value.is_sensitive());
    copy
}

/// The directives of every `Cache-Control` field, lower-cased, with unquoted values.
pub fn directives(headers: &HeaderMap) -> Vec<(String, Option<String>)> {
    headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|part| {
            let part = part.trim();
            if part.is_empty() {
                return None;
            }
            let (name, value) = match part.split_once('=') {
                Some((name, value)) => (name, Some(value.trim().trim_matches('"').to_string())),
                None => (part, None),
            };
            Some((name.trim().to_ascii_lowercase(), value))
        })
        .collect()
}

fn vary_names(headers: &HeaderMap) -> impl Iterator<Item = String> + '_ {
    headers
        .get_all(header::VARY)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|name| name.trim().to_ascii_lowercase())
        .filter(|name| !name.is_empty())
}

/// The `Vary` names that parse as field names: those a request's fields can be matched against.
fn vary_header_names(headers: &HeaderMap) -> impl Iterator<Item = HeaderName> + '_ {
    vary_names(headers).filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_keeps_no_credentials_unless_the_response_varies_on_them() {
        let mut request = HeaderMap::new();
        request.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer secret-token"),
        );
        request.insert(
            header::COOKIE,
            HeaderValue::from_static("session=secret-cookie"),
        );
        request.insert(header::ACCEPT, HeaderValue::from_static("text/html"));
        let mut response = HeaderMap::new();
        response.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=60"),
        );
        let now = SystemTime::now();
        let policy = policy_for(&Method::GET, &request, StatusCode::OK, &response, now);
        let kept = serde_json::to_string(&policy).expect("serialises");
        assert!(
            !kept.contains("secret-token") && !kept.contains("secret-cookie"),
            "{kept}"
        );
        assert!(
            !kept.contains("text/html"),
            "nor fields the policy never reads: {kept}"
        );

        response.insert(header::VARY, HeaderValue::from_static("Cookie"));
        let policy = policy_for(&Method::GET, &request, StatusCode::OK, &response, now);
        let kept = serde_json::to_string(&policy).expect("serialises");
        assert!(
            kept.contains("secret-cookie"),
            "a varied-on field stays: {kept}"
        );
        assert!(!kept.contains("secret-token"), "{kept}");
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn a_stored_entry_keeps_no_slice_of_the_buffers_its_headers_were_read_from() {
        // hyper's header values are slices of the connection's read buffer; an entry that kept
        // one would keep the whole buffer (kilobytes per entry) alive as long as it is cached.
        let buffer = Bytes::from(b"gzip, br\r\nUser-Agent: x\r\nmax-age=60".repeat(256));
        let slice = |range: std::ops::Range<usize>| {
            HeaderValue::from_maybe_shared(buffer.slice(range)).expect("a valid value")
        };
        let mut request = HeaderMap::new();
        request.insert(header::ACCEPT_ENCODING, slice(0..8));
        request.insert(header::USER_AGENT, slice(22..23));
        let mut response = HeaderMap::new();
        response.insert(header::CACHE_CONTROL, slice(25..35));
        response.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
        let now = SystemTime::now();
        let policy = policy_for(&Method::GET, &request, StatusCode::OK, &response, now);
        let entry = StoredResponse::new(
            policy,
            StatusCode::OK,
            owned_headers(&response),
            Bytes::from_static(b"body"),
            &request,
            now,
        );
        drop((request, response));
        assert!(
            buffer.is_unique(),
            "the stored entry still holds a slice of the read buffer"
        );
        assert!(entry.vary_matches(&headers(&[("accept-encoding", "gzip, br")])));
    }

    fn classify(request: &HeaderMap, response: &HeaderMap) -> Result<(), NotStored> {
        let now = SystemTime::now();
        let policy = policy_for(&Method::GET, request, StatusCode::OK, response, now);
        storability(request, response, &policy, now)
    }

    #[test]
    fn public_max_age_is_storable() {
        assert_eq!(
            classify(
                &HeaderMap::new(),
                &headers(&[("cache-control", "public, max-age=60")])
            ),
            Ok(())
        );
    }

    #[test]
    fn each_refusal_names_its_reason() {
        let none = HeaderMap::new();
        assert_eq!(
            classify(&none, &headers(&[("cache-control", "no-store")])),
            Err(NotStored::NoStore)
        );
        assert_eq!(
            classify(&none, &headers(&[("cache-control", "private, max-age=60")])),
            Err(NotStored::Private)
        );
        assert_eq!(
            classify(
                &headers(&[("authorization", "Bearer x")]),
                &headers(&[("cache-control", "max-age=60")])
            ),
            Err(NotStored::Authorization)
        );
        assert_eq!(
            classify(
                &headers(&[("authorization", "Bearer x")]),
                &headers(&[("cache-control", "public, max-age=60")])
            ),
            Ok(())
        );
        assert_eq!(
            classify(
                &none,
                &headers(&[("cache-control", "max-age=60"), ("set-cookie", "a=b")])
            ),
            Err(NotStored::SetCookie)
        );
        assert_eq!(
            classify(
                &none,
                &headers(&[("cache-control", "max-age=60"), ("vary", "*")])
            ),
            Err(NotStored::VaryStar)
        );
        assert_eq!(
            classify(&none, &headers(&[("content-type", "text/plain")])),
            Err(NotStored::NoFreshness)
        );
        assert_eq!(
            classify(
                &headers(&[("cache-control", "no-store")]),
                &headers(&[("cache-control", "max-age=60")])
            ),
            Err(NotStored::RequestNoStore)
        );
    }

    #[test]
    fn vary_selects_request_headers() {
        let now = SystemTime::now();
        let request = headers(&[("accept-encoding", "gzip")]);
        let response = headers(&[("cache-control", "max-age=60"), ("vary", "Accept-Encoding")]);
        let policy = policy_for(&Method::GET, &request, StatusCode::OK, &response, now);
        let entry = StoredResponse::new(
            policy,
            StatusCode::OK,
            response,
            Bytes::new(),
            &request,
            now,
        );
        assert!(entry.vary_matches(&request));
        assert!(!entry.vary_matches(&headers(&[("accept-encoding", "br")])));
        assert!(!entry.vary_matches(&HeaderMap::new()));
    }

    #[test]
    fn stale_windows_come_from_cache_control() {
        let now = SystemTime::now();
        let response = headers(&[(
            "cache-control",
            "max-age=10, stale-while-revalidate=30, stale-if-error=300",
        )]);
        let policy = policy_for(
            &Method::GET,
            &HeaderMap::new(),
            StatusCode::OK,
            &response,
            now,
        );
        let entry = StoredResponse::new(
            policy,
            StatusCode::OK,
            response,
            Bytes::new(),
            &HeaderMap::new(),
            now,
        );
        let later = now + Duration::from_secs(20);
        assert!(matches!(
            entry.freshness(&Method::GET, &HeaderMap::new(), now),
            Freshness::Fresh
        ));
        assert!(matches!(
            entry.freshness(&Method::GET, &HeaderMap::new(), later),
            Freshness::StaleWhileRevalidate
        ));
        assert!(entry.usable_on_error(later));
        assert!(!entry.usable_on_error(now + Duration::from_secs(400)));
        assert_eq!(entry.ttl_seconds(later), -10);
    }
}
