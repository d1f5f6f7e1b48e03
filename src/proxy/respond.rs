//! Responses the proxy builds itself: from a stored entry, from a coalesced fetch, a 304 for a
//! client's conditional, and its own short error answers.

use std::time::SystemTime;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::request::Parts;
use http::{Method, Response, StatusCode};
use http_body_util::Full;
use metrics::counter;

use super::coalesce::SharedResponse;
use super::headers::{not_modified, not_modified_headers};
use super::origin::OriginFailure;
use super::status::{CacheStatus, Detail, Fwd};
use super::stream::OriginStream;
use crate::cache::StoredResponse;
use crate::telemetry::CACHE_HIT_BYTES_TOTAL;

/// The body of every response the proxy sends: a stored body, or an origin body on its way.
pub type ProxyBody = http_body_util::Either<Full<Bytes>, OriginStream>;

/// A response and what the cache did for it.
pub type Answer = (Response<ProxyBody>, CacheStatus);

pub fn empty() -> ProxyBody {
    http_body_util::Either::Left(Full::new(Bytes::new()))
}

pub fn full(body: Bytes) -> ProxyBody {
    http_body_util::Either::Left(Full::new(body))
}

/// A 304 standing for a full response with these headers.
pub fn not_modified_response(full: &HeaderMap) -> Response<ProxyBody> {
    let mut response = Response::new(empty());
    *response.status_mut() = StatusCode::NOT_MODIFIED;
    *response.headers_mut() = not_modified_headers(full);
    response
}

/// A short plain-text response the proxy makes itself.
pub fn short(code: StatusCode, text: &'static str, status: CacheStatus) -> Answer {
    let mut response = Response::new(full(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    (response, status)
}

/// The proxy's own 502 or 504 for an origin that failed.
pub fn origin_failed(failure: OriginFailure, fwd: Fwd) -> Answer {
    short(
        failure.status(),
        failure.body(),
        CacheStatus::forward(fwd).detail(failure.detail()),
    )
}

/// A stored entry, with its `Age`; a 304 when the client's conditional matches it.
pub fn stored(
    parts: &Parts,
    entry: &StoredResponse,
    status: CacheStatus,
    now: SystemTime,
) -> Answer {
    let age = HeaderValue::from(entry.age(now).as_secs());
    if not_modified(&parts.headers, &entry.headers) {
        let mut response = not_modified_response(&entry.headers);
        response.headers_mut().insert(header::AGE, age);
        return (response, status);
    }
    let mut response = Response::new(if parts.method == Method::HEAD {
        empty()
    } else {
        counter!(CACHE_HIT_BYTES_TOTAL).increment(entry.body.len() as u64);
        full(entry.body.clone())
    });
    *response.status_mut() = entry.status;
    *response.headers_mut() = entry.headers.clone();
    response.headers_mut().insert(header::AGE, age);
    (response, status)
}

/// A fresh stored entry: a hit with its remaining freshness as `ttl`.
pub fn hit(parts: &Parts, entry: &StoredResponse, now: SystemTime) -> Answer {
    stored(parts, entry, CacheStatus::hit(entry.ttl_seconds(now)), now)
}

/// A stale entry served because the origin failed and `stale-if-error` allows it.
pub fn stale_on_error(parts: &Parts, entry: &StoredResponse, origin_status: u16) -> Answer {
    let now = SystemTime::now();
    let mut status = CacheStatus::forward(Fwd::Stale).detail(Detail::StaleIfError);
    status.fwd_status = Some(origin_status);
    status.ttl = Some(entry.ttl_seconds(now));
    stored(parts, entry, status, now)
}

/// The response another request fetched for the same key (coalescing).
pub fn shared(parts: &Parts, shared: &SharedResponse, status: CacheStatus) -> Answer {
    let entry = &shared.entry;
    if entry.status == StatusCode::OK && not_modified(&parts.headers, &entry.headers) {
        return (not_modified_response(&entry.headers), status);
    }
    let body = if parts.method == Method::HEAD {
        Bytes::new()
    } else {
        entry.body.clone()
    };
    let mut response = Response::new(full(body));
    *response.status_mut() = entry.status;
    *response.headers_mut() = entry.headers.clone();
    (response, status)
}
