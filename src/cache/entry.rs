//! A stored response, and the RFC 9111 rules that decide whether a response may be stored and reused.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::StatusCode;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use super::control::{Delta, RequestDirectives, ResponseControl, ResponseDirectives};
use super::disk::InFile;
use super::freshness::{
    Lifetime, has_explicit_freshness, heuristically_cacheable, http_date, understood,
};
use super::head::Head;
use super::{field, weight};
use crate::config::CachePolicy;

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
    /// The route's policy does not store this request's response (`[routes.cache.no_store]`).
    Policy(super::policy::PolicyRule),
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
            NotStored::Policy(rule) => rule.as_str(),
        }
    }
}

/// The request as the cache policy sees it: the key has already matched, so the URI always does.
/// Decides whether a shared cache may store this response (RFC 9111 section 3), and if not, why.
///
/// `control` holds the directives bloomgate obeys (a targeted field's, or `Cache-Control`'s);
/// the reasons are checked in the order an operator would look for them.
pub fn storability(
    request_headers: &HeaderMap,
    status: StatusCode,
    response_headers: &HeaderMap,
    control: &ResponseControl,
) -> Result<(), NotStored> {
    let directives = &control.directives;
    if RequestDirectives::of(request_headers).no_store {
        return Err(NotStored::RequestNoStore);
    }
    // 206 and 304 are never stored as the object; 1xx never reach here.
    if matches!(status.as_u16(), 206 | 304) || status.is_informational() {
        return Err(NotStored::Status);
    }
    // `must-understand` stands in for `no-store` when the cache knows the status code, and
    // refuses storage when it does not (section 5.2.2.3).
    if directives.must_understand {
        if !understood(status) {
            return Err(NotStored::Status);
        }
    } else if directives.no_store {
        return Err(NotStored::NoStore);
    }
    if directives.private {
        return Err(NotStored::Private);
    }
    if request_headers.contains_key(header::AUTHORIZATION)
        && !(directives.public || directives.s_maxage.is_some() || directives.must_revalidate)
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
    let stale_extension =
        directives.stale_while_revalidate.is_some() || directives.stale_if_error.is_some();
    // Any final status with explicit freshness may be stored; without it, only a heuristically
    // cacheable one, or any with `public` (section 3).
    if !(has_explicit_freshness(response_headers, control)
        || directives.public
        || stale_extension
        || heuristically_cacheable(status))
    {
        return Err(NotStored::Status);
    }
    let has_validator = response_headers.contains_key(header::ETAG)
        || response_headers.contains_key(header::LAST_MODIFIED);
    let lifetime = Lifetime::of(status, response_headers, control, SystemTime::now());
    let reusable = (lifetime.freshness() > lifetime.initial_age() && !directives.no_cache)
        || (!directives.forbids_stale() && stale_windows(directives) > Duration::ZERO);
    if !reusable && !has_validator {
        return Err(NotStored::NoFreshness);
    }
    Ok(())
}

/// The longer of the windows in which a stale copy may still be served.
fn stale_windows(directives: &ResponseDirectives) -> Duration {
    let seconds = |delta: Option<Delta>| delta.map_or(0, Delta::seconds);
    Duration::from_secs(
        seconds(directives.stale_while_revalidate).max(seconds(directives.stale_if_error)),
    )
}

/// A response held in the cache: end-to-end headers, the body shared by every hit, and what its
/// directives say about reusing it.
#[derive(Debug)]
pub struct StoredResponse {
    pub status: StatusCode,
    /// Its header fields as one block ([`Head`]); [`StoredResponse::headers`] makes a map of them.
    pub head: Head,
    pub body: Bytes,
    /// Where `body` lies in a disk segment's file, for a body read from disk through a mapping:
    /// an HTTP/1.1 connection of our own sends it from there with `sendfile`.
    pub body_file: Option<InFile>,
    /// Its freshness lifetime and age.
    pub lifetime: Lifetime,
    /// Every use needs a successful validation first (`no-cache`).
    pub always_revalidate: bool,
    /// Whether a stale copy may be served at all (RFC 9111 section 4.2.4).
    pub stale_allowed: bool,
    /// `stale-while-revalidate` and `stale-if-error`, in seconds (see [`StoredResponse::new`]).
    stale_while_revalidate: u32,
    stale_if_error: u32,
    /// Whether a targeted field (RFC 9213) gave the directives.
    pub targeted: bool,
    /// What its `Vary` selects on, if it varies: most responses do not, and pay 8 bytes for it.
    vary: Option<Box<Vary>>,
}

/// A varying response's request fields.
#[derive(Clone, Debug)]
struct Vary {
    /// The request fields the response's `Vary` names, lower-cased, in the order it names them.
    names: Box<[HeaderName]>,
    /// Those fields' combined values as the stored request had them: which requests this variant
    /// answers.
    selection: Box<[Option<HeaderValue>]>,
}

impl Vary {
    /// What it holds in memory: its struct, its names' slice, its values' slice and their bytes.
    fn weight(&self) -> usize {
        let values = self
            .selection
            .iter()
            .flatten()
            .map(|value| weight::allocation(value.len()))
            .sum::<usize>();
        weight::allocation(std::mem::size_of::<Vary>())
            + weight::allocation(std::mem::size_of_val(&*self.selection))
            + weight::allocation(std::mem::size_of_val(&*self.names))
            + values
    }
}

fn seconds(seconds: u32) -> Duration {
    Duration::from_secs(seconds.into())
}

/// How a stored response can answer a request now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// Fresh, or stale within what the request's `max-stale` accepts.
    Fresh,
    /// Stale, but within `stale-while-revalidate`: serve it and revalidate in the background.
    StaleWhileRevalidate,
    /// Must be revalidated before use.
    Stale,
    /// Fresh, but the request's directives (`no-cache`, `max-age`, `min-fresh`) do not accept
    /// it: revalidated before use, as the request asked (RFC 9211's `fwd=request`).
    RefusedByRequest,
}

impl StoredResponse {
    /// The entry for a response received at `response_time`, for a request with
    /// `request_headers`; `targeted` are the fields whose directives replace `Cache-Control`.
    pub fn new(
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
        request_headers: &HeaderMap,
        targeted: &[HeaderName],
        response_time: SystemTime,
    ) -> StoredResponse {
        StoredResponse::under_policy(
            status,
            headers,
            body,
            request_headers,
            targeted,
            super::policy::rfc(),
            response_time,
        )
    }

    /// [`StoredResponse::new`] for a response stored on a route whose `policy` reads its
    /// directives (what it ignores, the lifetimes it sets): as it was read when it was stored,
    /// so that a copy read back from disk or refreshed by a 304 keeps its lifetime.
    pub fn under_policy(
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
        request_headers: &HeaderMap,
        targeted: &[HeaderName],
        policy: &CachePolicy,
        response_time: SystemTime,
    ) -> StoredResponse {
        let control = ResponseControl::of(&headers, targeted);
        let (control, _) = super::policy::read_control(policy, status, &headers, control);
        StoredResponse::with_control(
            status,
            headers,
            body,
            request_headers,
            &control,
            response_time,
        )
    }

    /// [`StoredResponse::new`] for a response whose directives were already read (`control`,
    /// from these `headers`).
    pub fn with_control(
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
        request_headers: &HeaderMap,
        control: &ResponseControl,
        response_time: SystemTime,
    ) -> StoredResponse {
        let directives = &control.directives;
        let lifetime = Lifetime::of(status, &headers, control, response_time);
        let names: Box<[HeaderName]> = vary_header_names(&headers).collect();
        let vary = (!names.is_empty()).then(|| {
            // Owned: the selection lives as long as the entry (see `owned_value`).
            let selection = field::selection(request_headers, &names)
                .iter()
                .map(|value| value.as_ref().map(owned_value))
                .collect();
            Box::new(Vary { names, selection })
        });
        let window = |delta: Option<Delta>| {
            u32::try_from(delta.map_or(0, Delta::seconds)).unwrap_or(u32::MAX)
        };
        StoredResponse {
            status,
            lifetime,
            always_revalidate: directives.no_cache,
            stale_allowed: !directives.forbids_stale(),
            stale_while_revalidate: window(directives.stale_while_revalidate),
            stale_if_error: window(directives.stale_if_error),
            targeted: control.is_targeted(),
            head: Head::of(&headers),
            body,
            body_file: None,
            vary,
        }
    }

    /// Bytes this entry costs the store: body, headers, its `Vary` selection, and its struct in an
    /// `Arc` (the `Arc`'s two counts), as jemalloc rounds them ([`weight::response`]).
    pub fn weight(&self) -> u32 {
        let bytes = weight::response(self.body.len(), self.head.len())
            + self.vary.as_ref().map_or(0, |vary| vary.weight());
        u32::try_from(bytes).unwrap_or(u32::MAX)
    }

    /// The request fields the response's `Vary` names, lower-cased, in the order it names them.
    pub fn vary_names(&self) -> &[HeaderName] {
        self.vary.as_ref().map_or(&[], |vary| &vary.names)
    }

    /// Those fields' combined values as the stored request had them: which requests this variant
    /// answers.
    pub fn vary_selection(&self) -> &[Option<HeaderValue>] {
        self.vary.as_ref().map_or(&[], |vary| &vary.selection)
    }

    /// This entry updated by a `304 Not Modified` received at `now` (RFC 9111 section 3.2): the
    /// 304's fields replace the stored ones, but for those describing the body; the same body.
    pub fn refreshed(
        &self,
        not_modified: &HeaderMap,
        request_headers: &HeaderMap,
        targeted: &[HeaderName],
        policy: &CachePolicy,
        now: SystemTime,
    ) -> StoredResponse {
        let mut headers = self.headers();
        // The stored `Age` described the first response; the 304 brings its own, or none.
        headers.remove(header::AGE);
        for name in not_modified.keys() {
            if KEPT_ON_UPDATE.contains(name) {
                continue;
            }
            headers.remove(name);
            for value in not_modified.get_all(name) {
                headers.append(name.clone(), value.clone());
            }
        }
        let mut refreshed = StoredResponse::under_policy(
            self.status,
            headers,
            self.body.clone(),
            request_headers,
            targeted,
            policy,
            now,
        );
        refreshed.body_file = self.body_file.clone();
        refreshed
    }

    /// Whether a 304 answering a conditional request made from this entry's validators is about
    /// this entry (RFC 9111 section 4.3.4): its strong `ETag` is this one's (strong comparison),
    /// else its weak one matches weakly, else its `Last-Modified` is this one's; with no validator
    /// at all, it is about this entry only when `only_stored` (the key holds no other variant).
    pub fn validated_by(&self, not_modified: &HeaderMap, only_stored: bool) -> bool {
        let text = |value: Option<&HeaderValue>| {
            value
                .and_then(|value| value.to_str().ok())
                .map(|value| value.trim().to_owned())
        };
        if let Some(tag) = text(not_modified.get(header::ETAG)) {
            let Some(stored) = text(self.etag().as_ref()) else {
                return false;
            };
            return match tag.strip_prefix("W/") {
                Some(weak) => stored.trim_start_matches("W/") == weak,
                None => !stored.starts_with("W/") && stored == tag,
            };
        }
        if let Some(modified) = not_modified.get(header::LAST_MODIFIED) {
            let stored = self.last_modified();
            return stored
                .as_ref()
                .and_then(http_date)
                .is_some_and(|stored| Some(stored) == http_date(modified));
        }
        only_stored
    }

    /// Whether this variant was stored for a request that selected the same `Vary` field values
    /// (each field's lines joined, RFC 9111 section 4.1).
    pub fn vary_matches(&self, request_headers: &HeaderMap) -> bool {
        *field::selection(request_headers, self.vary_names()) == *self.vary_selection()
    }

    /// How this entry can answer a request with `request_headers` now (RFC 9111 section 4.2,
    /// the request's directives of section 5.2.1, and RFC 5861's `stale-while-revalidate`).
    pub fn freshness(&self, request_headers: &HeaderMap, now: SystemTime) -> Freshness {
        let request = RequestDirectives::of(request_headers);
        if self.always_revalidate {
            return Freshness::Stale;
        }
        let age = self.lifetime.age(now);
        let ttl = self.lifetime.time_to_live(now);
        let delta = |delta: Delta| Duration::from_secs(delta.seconds());
        // `max-age` and `min-fresh` hold for whatever is served, stale or not.
        let acceptable = request.max_age.is_none_or(|max| age <= delta(max))
            && request.min_fresh.is_none_or(|min| ttl >= delta(min));
        if request.no_cache || !acceptable {
            return match ttl.is_zero() {
                false => Freshness::RefusedByRequest,
                true => Freshness::Stale,
            };
        }
        if !ttl.is_zero() {
            return Freshness::Fresh;
        }
        if !self.stale_allowed {
            return Freshness::Stale;
        }
        let staleness = self.lifetime.staleness(now);
        let within = |limit: Option<Delta>| limit.is_none_or(|limit| staleness <= delta(limit));
        if request.max_stale.is_some_and(within) {
            return Freshness::Fresh;
        }
        if staleness < seconds(self.stale_while_revalidate) {
            Freshness::StaleWhileRevalidate
        } else {
            Freshness::Stale
        }
    }

    /// This entry, stale from `at` on, when it is still fresh then (a soft purge at `at`);
    /// `None` when it is stale by then anyway.
    pub fn stale_from(&self, at: SystemTime) -> Option<StoredResponse> {
        if self.lifetime.time_to_live(at).is_zero() {
            return None;
        }
        Some(StoredResponse {
            status: self.status,
            head: self.head.clone(),
            body: self.body.clone(),
            body_file: self.body_file.clone(),
            lifetime: self.lifetime.ending_at(at),
            always_revalidate: self.always_revalidate,
            stale_allowed: self.stale_allowed,
            stale_while_revalidate: self.stale_while_revalidate,
            stale_if_error: self.stale_if_error,
            targeted: self.targeted,
            vary: self.vary.clone(),
        })
    }

    /// How long ago the response stopped being fresh (zero while fresh).
    pub fn staleness(&self, now: SystemTime) -> Duration {
        self.lifetime.staleness(now)
    }

    /// Whether `stale-if-error` allows serving this response when the origin fails now.
    pub fn usable_on_error(&self, now: SystemTime) -> bool {
        self.stale_allowed && self.staleness(now) < seconds(self.stale_if_error)
    }

    /// Seconds of freshness left; negative once stale (RFC 9211 `ttl`).
    pub fn ttl_seconds(&self, now: SystemTime) -> i64 {
        let ttl = self.lifetime.time_to_live(now);
        if ttl.is_zero() {
            return -(self.staleness(now).as_secs() as i64);
        }
        ttl.as_secs() as i64
    }

    pub fn age(&self, now: SystemTime) -> Duration {
        self.lifetime.age(now)
    }

    /// How long the store should keep the entry: freshness plus the windows in which a stale copy
    /// is still useful (served stale, or revalidated with a conditional request).
    pub fn keep_for(&self, now: SystemTime) -> Duration {
        let has_validator =
            self.head.contains(&header::ETAG) || self.head.contains(&header::LAST_MODIFIED);
        // A stale entry with validators saves the body transfer on revalidation for a while.
        let revalidation_window = if has_validator {
            Duration::from_secs(600)
        } else {
            Duration::ZERO
        };
        let stale_window =
            seconds(self.stale_while_revalidate.max(self.stale_if_error)).max(revalidation_window);
        self.lifetime.time_to_live(now) + stale_window
    }

    pub fn etag(&self) -> Option<HeaderValue> {
        self.head.get(&header::ETAG)
    }

    pub fn last_modified(&self) -> Option<HeaderValue> {
        self.head.get(&header::LAST_MODIFIED)
    }

    /// Its header fields as a map, for a response made from it; values share its block.
    pub fn headers(&self) -> HeaderMap {
        self.head.to_map()
    }
}

/// Stored fields a 304 does not replace: they describe the stored body, which the 304 does not
/// carry (RFC 9111 section 3.2 names `Content-Length`; the encoding and range go with it).
const KEPT_ON_UPDATE: [HeaderName; 4] = [
    header::CONTENT_LENGTH,
    header::CONTENT_ENCODING,
    header::CONTENT_RANGE,
    header::TRANSFER_ENCODING,
];

/// The request fields a response varies on: all a stored entry needs of its request (it keeps
/// owned copies of their values, [`StoredResponse::vary_selection`]).
pub fn varied_request_fields(
    request_headers: &HeaderMap,
    response_headers: &HeaderMap,
) -> HeaderMap {
    let varied: Vec<HeaderName> = vary_header_names(response_headers).collect();
    let mut fields = HeaderMap::new();
    for (name, value) in request_headers {
        if varied.contains(name) {
            fields.append(name.clone(), value.clone());
        }
    }
    fields
}

/// A copy of one header value that owns its memory: a value parsed by hyper is a slice of the
/// connection's read buffer, which a stored copy would keep alive (measured: ~27 KiB of memory
/// per 8 KiB object).
fn owned_value(value: &HeaderValue) -> HeaderValue {
    HeaderValue::from_bytes(value.as_bytes()).unwrap_or_else(|_| value.clone())
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
pub fn vary_header_names(headers: &HeaderMap) -> impl Iterator<Item = HeaderName> + '_ {
    vary_names(headers).filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::field::lines as headers;

    fn entry(response: HeaderMap, request: &HeaderMap, now: SystemTime) -> StoredResponse {
        StoredResponse::new(StatusCode::OK, response, Bytes::new(), request, &[], now)
    }

    #[test]
    fn an_entry_keeps_no_request_field_but_those_it_varies_on() {
        let request = headers(&[
            ("authorization", "Bearer secret-token"),
            ("cookie", "session=secret-cookie"),
            ("accept-encoding", "gzip"),
        ]);
        let response = headers(&[("cache-control", "public, max-age=60"), ("vary", "Cookie")]);
        let stored = entry(response, &request, SystemTime::now());
        let kept = format!("{:?}", stored.vary_selection());
        assert!(kept.contains("secret-cookie"), "{kept}");
        assert!(
            !kept.contains("secret-token") && !kept.contains("gzip"),
            "{kept}"
        );
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
        let stored = entry(response, &request, SystemTime::now());
        drop(request);
        assert!(
            buffer.is_unique(),
            "the stored entry still holds a slice of the read buffer"
        );
        assert!(stored.vary_matches(&headers(&[("accept-encoding", "gzip, br")])));
    }

    fn classify(request: &HeaderMap, response: &HeaderMap) -> Result<(), NotStored> {
        classify_status(StatusCode::OK, request, response)
    }

    fn classify_status(
        status: StatusCode,
        request: &HeaderMap,
        response: &HeaderMap,
    ) -> Result<(), NotStored> {
        let control = ResponseControl::of(response, &[]);
        storability(request, status, response, &control)
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
            classify(&none, &headers(&[("cache-control", "No-Store")])),
            Err(NotStored::NoStore)
        );
        assert_eq!(
            classify(&none, &headers(&[("cache-control", "Private, max-age=60")])),
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
    fn any_final_status_with_explicit_freshness_is_storable_and_heuristics_are_limited() {
        let none = HeaderMap::new();
        let fresh = headers(&[("cache-control", "max-age=60")]);
        let modified = headers(&[("last-modified", "Thu, 01 Jan 2015 00:00:00 GMT")]);
        for code in [299, 400, 404, 499, 500, 502, 503, 504, 599] {
            let status = StatusCode::from_u16(code).expect("status");
            assert_eq!(classify_status(status, &none, &fresh), Ok(()), "{code}");
        }
        for code in [206, 304] {
            let status = StatusCode::from_u16(code).expect("status");
            assert_eq!(
                classify_status(status, &none, &fresh),
                Err(NotStored::Status)
            );
        }
        let ok = classify_status(StatusCode::OK, &none, &modified);
        assert_eq!(ok, Ok(()), "heuristically cacheable");
        let error = classify_status(StatusCode::from_u16(599).expect("status"), &none, &modified);
        assert_eq!(error, Err(NotStored::Status), "not heuristically cacheable");
    }

    #[test]
    fn must_understand_stores_only_understood_codes_and_overrides_no_store() {
        let none = HeaderMap::new();
        let response = headers(&[("cache-control", "max-age=3600, no-store, must-understand")]);
        assert_eq!(classify_status(StatusCode::OK, &none, &response), Ok(()));
        let unknown = StatusCode::from_u16(599).expect("status");
        let refused = classify_status(unknown, &none, &response);
        assert_eq!(refused, Err(NotStored::Status));
    }

    #[test]
    fn vary_selects_request_headers() {
        let request = headers(&[("accept-encoding", "gzip")]);
        let response = headers(&[("cache-control", "max-age=60"), ("vary", "Accept-Encoding")]);
        let stored = entry(response, &request, SystemTime::now());
        assert!(stored.vary_matches(&request));
        assert!(!stored.vary_matches(&headers(&[("accept-encoding", "br")])));
        assert!(!stored.vary_matches(&HeaderMap::new()));
    }

    #[test]
    fn stale_windows_come_from_cache_control() {
        let now = SystemTime::now();
        let response = headers(&[(
            "cache-control",
            "max-age=10, stale-while-revalidate=30, stale-if-error=300",
        )]);
        let stored = entry(response, &HeaderMap::new(), now);
        let later = now + Duration::from_secs(20);
        let plain = HeaderMap::new();
        assert_eq!(stored.freshness(&plain, now), Freshness::Fresh);
        assert_eq!(
            stored.freshness(&plain, later),
            Freshness::StaleWhileRevalidate
        );
        // An unknown request directive changes nothing; `no-cache` and `max-age` do.
        let unknown = headers(&[("cache-control", "nothing-to-see-here"), ("pragma", "foo")]);
        assert_eq!(
            stored.freshness(&unknown, later),
            Freshness::StaleWhileRevalidate
        );
        let no_cache = headers(&[("cache-control", "no-cache")]);
        assert_eq!(stored.freshness(&no_cache, later), Freshness::Stale);
        let young = headers(&[("cache-control", "max-age=5")]);
        assert_eq!(stored.freshness(&young, later), Freshness::Stale);
        let max_stale = headers(&[("cache-control", "max-stale=15")]);
        assert_eq!(stored.freshness(&max_stale, later), Freshness::Fresh);
        assert!(stored.usable_on_error(later));
        assert!(!stored.usable_on_error(now + Duration::from_secs(400)));
        assert_eq!(stored.ttl_seconds(later), -10);
    }

    #[test]
    fn no_cache_and_must_revalidate_forbid_every_stale_use() {
        let now = SystemTime::now();
        let later = now + Duration::from_secs(20);
        let plain = HeaderMap::new();
        for cc in [
            "max-age=10, No-CaChE, stale-while-revalidate=30",
            "max-age=10, must-revalidate, stale-while-revalidate=30, stale-if-error=30",
        ] {
            let stored = entry(
                HeaderMap::from_iter([(header::CACHE_CONTROL, HeaderValue::from_static(cc))]),
                &plain,
                now,
            );
            assert_eq!(stored.freshness(&plain, later), Freshness::Stale, "{cc}");
            assert!(!stored.usable_on_error(later), "{cc}");
        }
        let no_cache = entry(
            headers(&[("cache-control", "max-age=60, no-cache")]),
            &plain,
            now,
        );
        assert_eq!(no_cache.freshness(&plain, now), Freshness::Stale);
    }

    #[test]
    fn a_fresh_entry_the_request_will_not_take_is_refused_by_the_request_not_stale() {
        let now = SystemTime::now();
        let later = now + Duration::from_secs(20);
        let stored = entry(
            headers(&[("cache-control", "max-age=10")]),
            &HeaderMap::new(),
            now,
        );
        for cc in ["no-cache", "max-age=0", "min-fresh=30"] {
            let request = headers(&[("cache-control", cc)]);
            let aged = now + Duration::from_secs(1);
            assert_eq!(
                stored.freshness(&request, aged),
                Freshness::RefusedByRequest,
                "{cc}"
            );
            assert_eq!(stored.freshness(&request, later), Freshness::Stale, "{cc}");
        }
    }

    #[test]
    fn a_304_updates_only_the_entry_its_validators_name() {
        let now = SystemTime::now();
        let stored = entry(
            headers(&[("cache-control", "max-age=1"), ("etag", "\"a\"")]),
            &HeaderMap::new(),
            now,
        );
        assert!(stored.validated_by(&headers(&[("etag", "\"a\"")]), false));
        assert!(stored.validated_by(&headers(&[("etag", "W/\"a\"")]), false));
        assert!(!stored.validated_by(&headers(&[("etag", "\"b\"")]), true));
        assert!(stored.validated_by(&HeaderMap::new(), true));
        assert!(!stored.validated_by(&HeaderMap::new(), false));
        let weak = entry(
            headers(&[("cache-control", "max-age=1"), ("etag", "W/\"a\"")]),
            &HeaderMap::new(),
            now,
        );
        assert!(!weak.validated_by(&headers(&[("etag", "\"a\"")]), true));

        let refreshed = stored.refreshed(
            &headers(&[("cache-control", "max-age=100"), ("x-new", "1")]),
            &HeaderMap::new(),
            &[],
            crate::cache::policy::rfc(),
            now,
        );
        assert_eq!(refreshed.ttl_seconds(now), 100);
        assert_eq!(
            refreshed.headers().get("x-new").map(|v| v.as_bytes()),
            Some(&b"1"[..])
        );
        assert_eq!(refreshed.etag(), stored.etag());
    }
}
