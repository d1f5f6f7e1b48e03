//! The request path: cache lookup, revalidation, coalesced fetches, admission, and the response.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::request::Parts;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use metrics::{counter, histogram};

use super::Live;
use super::Proxy;
use super::coalesce::{self, FlightOutcome, Role, SharedResponse};
use super::headers::{
    Forwarding, OriginBody, ResponseFraming, not_modified, not_modified_headers,
    settle_response_framing, strip_hop_by_hop, to_origin,
};
use super::origin::OutgoingBody;
use super::status::CacheStatus;
use super::stream::{Capture, OriginStream};
use crate::admission::Admission;
use crate::cache::{
    Authority, CacheKey, Freshness, NotStored, StoredResponse, field, owned_headers, policy_for,
    storability,
};
use crate::telemetry::{
    ADMISSION_TOTAL, CACHE_HIT_BYTES_TOTAL, REQUEST_DURATION_SECONDS, REQUESTS_TOTAL,
};

/// The body of every response the proxy sends: a stored body, or an origin body on its way.
pub type ProxyBody = http_body_util::Either<Full<Bytes>, OriginStream>;

type Answer = (Response<ProxyBody>, CacheStatus);

impl Proxy {
    /// Answers one client request; every response carries `Cache-Status`.
    pub async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
        peer: SocketAddr,
    ) -> Response<ProxyBody> {
        let started = Instant::now();
        let (mut response, status) = self.route(request, peer).await;
        response
            .headers_mut()
            .insert("cache-status", status.header_value());
        counter!(REQUESTS_TOTAL, "cache_status" => status.metric_label()).increment(1);
        histogram!(REQUEST_DURATION_SECONDS).record(started.elapsed().as_secs_f64());
        response
    }

    async fn route(self: &Arc<Self>, request: Request<Incoming>, peer: SocketAddr) -> Answer {
        let live = self.live();
        let (parts, body) = request.into_parts();
        if parts.method.as_str() == "PURGE" {
            return self.purge_from_public(&parts, peer);
        }
        let key = match CacheKey::from_request(&parts, &live.config.cache.key) {
            Ok(key) => key,
            Err(error) => {
                tracing::debug!(%error, %peer, "request refused");
                return short(
                    StatusCode::BAD_REQUEST,
                    "request has no valid host or target\n",
                    CacheStatus::forward("request"),
                );
            }
        };
        if parts.method != Method::GET && parts.method != Method::HEAD {
            return self.pass(parts, body, peer, key).await;
        }
        if parts.headers.contains_key(header::RANGE) {
            // Ranges go to the origin untouched; the cache stores only whole responses.
            return self.pass(parts, body, peer, key).await;
        }
        drop(body);
        let now = SystemTime::now();
        let variants = self.store.get(&key);
        let stored = variants
            .as_ref()
            .and_then(|v| v.select(&parts.headers))
            .cloned();
        match stored {
            Some(entry) => match entry.freshness(&Method::GET, &parts.headers, now) {
                Freshness::Fresh => serve_stored(
                    &parts,
                    &entry,
                    CacheStatus::hit(entry.ttl_seconds(now)),
                    now,
                ),
                Freshness::StaleWhileRevalidate => {
                    self.revalidate_in_background(&parts, peer, &key, &entry);
                    let status =
                        CacheStatus::hit(entry.ttl_seconds(now)).detail("stale-while-revalidate");
                    serve_stored(&parts, &entry, status, now)
                }
                Freshness::Stale => self.fetch(parts, peer, key, Some(entry), "stale").await,
            },
            None if variants.is_some() => self.fetch(parts, peer, key, None, "vary-miss").await,
            None => self.fetch(parts, peer, key, None, "miss").await,
        }
    }

    /// A miss or a stale entry: joins the fetch in flight for the key, or leads one.
    async fn fetch(
        self: &Arc<Self>,
        parts: Parts,
        peer: SocketAddr,
        key: CacheKey,
        stale: Option<Arc<StoredResponse>>,
        fwd: &'static str,
    ) -> Answer {
        let live = self.live();
        let flight = match self.flights.join(&key) {
            Role::Leader(flight) => Some(flight),
            Role::Follower(slot) => {
                // A leader whose client reads slowly must not hold its waiters for long.
                let patience =
                    live.config.origin.first_byte_timeout + live.config.origin.idle_timeout;
                let outcome = tokio::time::timeout(patience, coalesce::wait(slot))
                    .await
                    .unwrap_or(FlightOutcome::FetchAlone);
                match outcome {
                    FlightOutcome::Response(shared) if shared_matches(&shared, &parts.headers) => {
                        let mut status = CacheStatus::forward(fwd);
                        status.collapsed = true;
                        status.stored = shared.stored;
                        status.detail = shared.detail;
                        return serve_shared(&parts, &shared, status);
                    }
                    FlightOutcome::Failed(code) => {
                        if let Some(entry) = stale
                            .as_ref()
                            .filter(|e| e.usable_on_error(SystemTime::now()))
                        {
                            return serve_stale_on_error(&parts, entry, code.as_u16());
                        }
                        let mut status = CacheStatus::forward(fwd);
                        status.collapsed = true;
                        return short(code, "origin unavailable\n", status);
                    }
                    // The leader's response was not shareable: a stored copy may exist now.
                    _ => {
                        if let Some(entry) = self
                            .store
                            .get(&key)
                            .and_then(|v| v.select(&parts.headers).cloned())
                        {
                            let now = SystemTime::now();
                            if matches!(
                                entry.freshness(&Method::GET, &parts.headers, now),
                                Freshness::Fresh
                            ) {
                                return serve_stored(
                                    &parts,
                                    &entry,
                                    CacheStatus::hit(entry.ttl_seconds(now)),
                                    now,
                                );
                            }
                        }
                        None
                    }
                }
            }
        };
        self.fetch_from_origin(parts, peer, key, stale, fwd, flight)
            .await
    }

    async fn fetch_from_origin(
        self: &Arc<Self>,
        parts: Parts,
        peer: SocketAddr,
        key: CacheKey,
        stale: Option<Arc<StoredResponse>>,
        fwd: &'static str,
        flight: Option<coalesce::Flight>,
    ) -> Answer {
        let live = self.live();
        let mut headers = to_origin(
            &parts.headers,
            &self.forwarding(&live, &parts, peer),
            OriginBody::Dropped,
        );
        if let Some(entry) = &stale {
            if let Some(etag) = entry.etag() {
                headers.insert(header::IF_NONE_MATCH, etag.clone());
            }
            if let Some(modified) = entry.last_modified() {
                headers.insert(header::IF_MODIFIED_SINCE, modified.clone());
            }
        }
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut origin_request = Request::new(empty_body());
        *origin_request.method_mut() = Method::GET;
        *origin_request.uri_mut() = live.origin.uri_for(path);
        *origin_request.headers_mut() = headers;

        let response = match live.origin.send(origin_request).await {
            Ok(response) => response,
            Err(error) => {
                tracing::warn!(%error, key = %key, "origin request failed");
                let code = error.status();
                if let Some(entry) = stale
                    .as_ref()
                    .filter(|e| e.usable_on_error(SystemTime::now()))
                {
                    drop(flight);
                    return serve_stale_on_error(&parts, entry, code.as_u16());
                }
                if let Some(flight) = flight {
                    flight.finish(FlightOutcome::Failed(code));
                }
                let detail = if code == StatusCode::GATEWAY_TIMEOUT {
                    "origin-timeout"
                } else {
                    "origin-error"
                };
                let body = if code == StatusCode::GATEWAY_TIMEOUT {
                    "origin timed out\n"
                } else {
                    "origin unavailable\n"
                };
                return short(code, body, CacheStatus::forward(fwd).detail(detail));
            }
        };

        if let Some(entry) = &stale {
            if response.status() == StatusCode::NOT_MODIFIED {
                if let Some(refreshed) = self.refresh(&key, &parts, entry, response.headers()) {
                    let shared = shared_from_entry(&refreshed, true, None);
                    if let Some(flight) = flight {
                        flight.finish(FlightOutcome::Response(shared));
                    }
                    let now = SystemTime::now();
                    let mut status = CacheStatus::forward("stale");
                    status.fwd_status = Some(304);
                    status.stored = true;
                    status.ttl = Some(refreshed.ttl_seconds(now));
                    return serve_stored(&parts, &refreshed, status, now);
                }
            } else if response.status().is_server_error()
                && entry.usable_on_error(SystemTime::now())
            {
                drop(flight);
                return serve_stale_on_error(&parts, entry, response.status().as_u16());
            }
        }
        self.forward_response(parts, key, response, stale.is_some(), fwd, flight)
            .await
    }

    /// Applies a 304 from the origin to the stored entry: new headers, the same body.
    fn refresh(
        &self,
        key: &CacheKey,
        parts: &Parts,
        entry: &StoredResponse,
        not_modified: &HeaderMap,
    ) -> Option<Arc<StoredResponse>> {
        let now = SystemTime::now();
        let request_headers = owned_headers(&parts.headers);
        let request = crate::cache::PolicyRequest {
            method: &Method::GET,
            headers: &request_headers,
        };
        let response = crate::cache::PolicyResponse {
            status: StatusCode::NOT_MODIFIED,
            headers: not_modified,
        };
        match entry.policy.after_response(&request, &response, now) {
            http_cache_semantics::AfterResponse::NotModified(policy, _) => {
                let mut headers = entry.headers.clone();
                for (name, value) in &owned_headers(not_modified) {
                    if name != header::CONTENT_LENGTH
                        && name != header::TRANSFER_ENCODING
                        && name != header::CONNECTION
                    {
                        headers.insert(name.clone(), value.clone());
                    }
                }
                strip_hop_by_hop(&mut headers);
                let refreshed = StoredResponse::new(
                    policy,
                    entry.status,
                    headers,
                    entry.body.clone(),
                    &request_headers,
                    now,
                );
                Some(self.store.refresh(key.clone(), refreshed))
            }
            http_cache_semantics::AfterResponse::Modified(..) => None,
        }
    }

    /// Decides storability and admission for a fresh origin response, then streams it to the client.
    async fn forward_response(
        self: &Arc<Self>,
        parts: Parts,
        key: CacheKey,
        response: Response<Incoming>,
        revalidating: bool,
        fwd: &'static str,
        flight: Option<coalesce::Flight>,
    ) -> Answer {
        let live = self.live();
        let (mut head, incoming) = response.into_parts();
        let framing = match settle_response_framing(&mut head.headers) {
            Ok(framing) => framing,
            Err(error) => {
                tracing::warn!(%error, key = %key, "origin response refused");
                if let Some(flight) = flight {
                    flight.finish(FlightOutcome::Failed(StatusCode::BAD_GATEWAY));
                }
                return short(
                    StatusCode::BAD_GATEWAY,
                    "origin response is framed with an unknown transfer coding\n",
                    CacheStatus::forward(fwd).detail("origin-error"),
                );
            }
        };
        strip_hop_by_hop(&mut head.headers);
        // What may be stored must not pin the connections' read buffers (see `owned_headers`).
        head.headers = owned_headers(&head.headers);
        let request_headers = owned_headers(&parts.headers);
        let now = SystemTime::now();
        let policy = policy_for(
            &Method::GET,
            &request_headers,
            head.status,
            &head.headers,
            now,
        );
        let content_length = head
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let max_object = live.config.cache.max_object_bytes;
        let too_large = content_length.is_some_and(|length| length > max_object);
        let size_rule = if framing == ResponseFraming::Ambiguous {
            Err(NotStored::AmbiguousFraming)
        } else if too_large {
            Err(NotStored::TooLarge)
        } else {
            Ok(())
        };
        let decision = storability(&parts.headers, &head.headers, &policy, now).and(size_rule);

        if revalidating && decision.is_err() {
            // The origin no longer lets this object be stored: drop the stale copy too.
            self.store.purge(&key);
        }
        let mut status = CacheStatus::forward(fwd);
        let shareable = decision.is_ok();
        let store_it = match decision {
            Err(reason) => {
                let label = if reason == NotStored::TooLarge {
                    "too_large"
                } else {
                    "not_storable"
                };
                counter!(ADMISSION_TOTAL, "decision" => label).increment(1);
                status = status.not_stored(reason);
                false
            }
            // A refetch of a stored object was admitted when it was first stored.
            Ok(()) if revalidating => true,
            Ok(()) => match live
                .doorkeeper
                .as_ref()
                .map(|door| door.observe(key.as_bytes()))
            {
                Some(Admission::FirstSeen) => {
                    counter!(ADMISSION_TOTAL, "decision" => "first_hit").increment(1);
                    status = status.not_stored(NotStored::FirstHit);
                    false
                }
                Some(Admission::SeenBefore) | None => {
                    counter!(ADMISSION_TOTAL, "decision" => "admitted").increment(1);
                    true
                }
            },
        };
        status.stored = store_it;

        let capture = match (shareable, flight) {
            (true, flight) => {
                let proxy = Arc::clone(self);
                let request_headers = request_headers.clone();
                let response_status = head.status;
                let response_headers = head.headers.clone();
                let detail = status.detail;
                Some(Capture::new(
                    content_length,
                    max_object,
                    Box::new(move |body: Bytes| {
                        let now = SystemTime::now();
                        let entry = StoredResponse::new(
                            policy,
                            response_status,
                            response_headers,
                            body,
                            &request_headers,
                            now,
                        );
                        let shared = if store_it {
                            let entry = proxy.store.insert(key, entry);
                            shared_from_entry(&entry, true, None)
                        } else {
                            shared_from_entry(&entry, false, detail)
                        };
                        if let Some(flight) = flight {
                            flight.finish(FlightOutcome::Response(shared));
                        }
                    }),
                ))
            }
            (false, flight) => {
                drop(flight);
                None
            }
        };
        let idle_timeout = live.config.origin.idle_timeout;
        let (incoming, prefix, capture) = match (capture, content_length) {
            // A body of unknown length is read up to the largest object before the head goes out,
            // so that `stored` in Cache-Status is true when sent.
            (Some(capture), None) if store_it => {
                match read_prefix(incoming, idle_timeout, max_object).await {
                    Ok(Prefix::Whole(body)) => {
                        capture.complete_with(body.clone());
                        if parts.method == Method::HEAD {
                            head.headers.remove(header::TRANSFER_ENCODING);
                            return (Response::from_parts(head, empty()), status);
                        }
                        let full = http_body_util::Either::Left(Full::new(body));
                        return (Response::from_parts(head, full), status);
                    }
                    Ok(Prefix::TooLarge(incoming, prefix)) => {
                        status = CacheStatus::forward(fwd).not_stored(NotStored::TooLarge);
                        (incoming, prefix, None)
                    }
                    Err(code) => {
                        let detail = if code == StatusCode::GATEWAY_TIMEOUT {
                            "origin-timeout"
                        } else {
                            "origin-error"
                        };
                        return short(
                            code,
                            "origin response failed\n",
                            CacheStatus::forward(fwd).detail(detail),
                        );
                    }
                }
            }
            (capture, _) => (incoming, Vec::new(), capture),
        };
        let capturing = capture.is_some();
        let body = OriginStream::new(incoming, idle_timeout, capture).with_prefix(prefix);

        let answer_304 =
            head.status == StatusCode::OK && not_modified(&parts.headers, &head.headers);
        if parts.method == Method::HEAD || answer_304 {
            if capturing {
                // The client gets no body, but the store and the waiters still want it.
                tokio::spawn(async move {
                    let _ = body.collect().await;
                });
            }
            let mut response = if answer_304 {
                not_modified_response(&head.headers)
            } else {
                let mut response = Response::new(empty());
                *response.status_mut() = head.status;
                *response.headers_mut() = head.headers;
                response
            };
            response.headers_mut().remove(header::TRANSFER_ENCODING);
            return (response, status);
        }
        (
            Response::from_parts(head, http_body_util::Either::Right(body)),
            status,
        )
    }

    /// Serves a stale entry right away and refreshes it in the background, once per key.
    fn revalidate_in_background(
        self: &Arc<Self>,
        parts: &Parts,
        peer: SocketAddr,
        key: &CacheKey,
        entry: &Arc<StoredResponse>,
    ) {
        let Role::Leader(flight) = self.flights.join(key) else {
            return;
        };
        let proxy = Arc::clone(self);
        let mut background = Request::new(());
        *background.method_mut() = Method::GET;
        *background.uri_mut() = parts.uri.clone();
        *background.headers_mut() = parts.headers.clone();
        let (background, ()) = background.into_parts();
        let key = key.clone();
        let entry = Arc::clone(entry);
        tokio::spawn(async move {
            let (response, _) = proxy
                .fetch_from_origin(background, peer, key, Some(entry), "stale", Some(flight))
                .await;
            let _ = response.into_body().collect().await;
        });
    }

    /// Forwards a request the cache does not handle (other methods, ranges), streaming both ways.
    async fn pass(
        self: &Arc<Self>,
        parts: Parts,
        body: Incoming,
        peer: SocketAddr,
        key: CacheKey,
    ) -> Answer {
        let live = self.live();
        let fwd = if parts.method == Method::GET || parts.method == Method::HEAD {
            "bypass"
        } else {
            "method"
        };
        let status = CacheStatus::forward(fwd);
        let length = hyper::body::Body::size_hint(&body).exact();
        let headers = to_origin(
            &parts.headers,
            &self.forwarding(&live, &parts, peer),
            OriginBody::Forwarded(length),
        );
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let unsafe_method = !parts.method.is_safe();
        let mut origin_request = Request::new(body.boxed());
        *origin_request.method_mut() = parts.method.clone();
        *origin_request.uri_mut() = live.origin.uri_for(path);
        *origin_request.headers_mut() = headers;
        match live.origin.send(origin_request).await {
            Ok(response) => {
                // RFC 9111 section 4.4: a successful unsafe request invalidates what the cache holds.
                if unsafe_method
                    && (response.status().is_success() || response.status().is_redirection())
                {
                    self.store.purge(&key);
                }
                let (mut head, incoming) = response.into_parts();
                if let Err(error) = settle_response_framing(&mut head.headers) {
                    tracing::warn!(%error, "origin response refused");
                    return short(
                        StatusCode::BAD_GATEWAY,
                        "origin response is framed with an unknown transfer coding\n",
                        status.detail("origin-error"),
                    );
                }
                strip_hop_by_hop(&mut head.headers);
                let body = OriginStream::new(incoming, live.config.origin.idle_timeout, None);
                (
                    Response::from_parts(head, http_body_util::Either::Right(body)),
                    status,
                )
            }
            Err(error) => {
                tracing::warn!(%error, "origin request failed");
                short(
                    error.status(),
                    "origin unavailable\n",
                    status.detail("origin-error"),
                )
            }
        }
    }

    fn purge_from_public(&self, parts: &Parts, peer: SocketAddr) -> Answer {
        let live = self.live();
        let allowed = live
            .config
            .server
            .purge_allowed_networks
            .iter()
            .any(|network| network.contains(&peer.ip()));
        if !allowed {
            return short(
                StatusCode::FORBIDDEN,
                "PURGE is not allowed from this address\n",
                CacheStatus::forward("method"),
            );
        }
        let (code, text) = self.purge(parts);
        short(code, text, CacheStatus::forward("method").detail("purge"))
    }

    /// Removes the object a PURGE request names: 200 if something was stored, 404 otherwise.
    pub(super) fn purge(&self, parts: &Parts) -> (StatusCode, &'static str) {
        let live = self.live();
        match CacheKey::from_request(parts, &live.config.cache.key) {
            Err(_) => (
                StatusCode::BAD_REQUEST,
                "PURGE needs a valid Host and path\n",
            ),
            Ok(key) if self.store.purge(&key) => (StatusCode::OK, "purged\n"),
            Ok(_) => (StatusCode::NOT_FOUND, "not cached\n"),
        }
    }

    /// The forwarding fields of a request to the origin. With `preserve_host` the origin gets the
    /// validated authority the cache key was built from, so it answers for the host the entry is
    /// stored under.
    fn forwarding<'l>(&self, live: &'l Live, parts: &Parts, peer: SocketAddr) -> Forwarding<'l> {
        let origin_authority = || {
            live.origin
                .base()
                .authority()
                .and_then(|authority| HeaderValue::from_str(authority.as_str()).ok())
                .unwrap_or_else(|| HeaderValue::from_static("localhost"))
        };
        let host = match live.config.origin.preserve_host {
            true => Authority::of_request(parts)
                .ok()
                .and_then(|authority| HeaderValue::from_str(authority.as_str()).ok())
                .unwrap_or_else(origin_authority),
            false => origin_authority(),
        };
        Forwarding {
            peer,
            host,
            version: parts.version,
            trusted: &live.config.origin.trusted_forwarding_headers,
        }
    }
}

/// What reading the start of a body of unknown length gave.
enum Prefix {
    /// The whole body, within the limit.
    Whole(Bytes),
    /// More than the limit: the chunks read so far, and the rest still to stream.
    TooLarge(Incoming, Vec<Bytes>),
}

/// Reads a body until it ends or exceeds `limit`; a failure is the status the client should get.
async fn read_prefix(
    mut incoming: Incoming,
    idle: std::time::Duration,
    limit: u64,
) -> Result<Prefix, StatusCode> {
    let mut chunks = Vec::new();
    let mut total = 0u64;
    loop {
        match tokio::time::timeout(idle, incoming.frame()).await {
            Err(_) => {
                counter!(crate::telemetry::ORIGIN_REQUESTS_TOTAL, "outcome" => "body_error")
                    .increment(1);
                return Err(StatusCode::GATEWAY_TIMEOUT);
            }
            Ok(Some(Err(error))) => {
                tracing::warn!(%error, "origin body failed before the response head was sent");
                counter!(crate::telemetry::ORIGIN_REQUESTS_TOTAL, "outcome" => "body_error")
                    .increment(1);
                return Err(StatusCode::BAD_GATEWAY);
            }
            Ok(None) => break,
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    total += data.len() as u64;
                    counter!(crate::telemetry::ORIGIN_BYTES_TOTAL).increment(data.len() as u64);
                    chunks.push(data);
                    if total > limit {
                        return Ok(Prefix::TooLarge(incoming, chunks));
                    }
                }
            }
        }
    }
    let mut body = bytes::BytesMut::with_capacity(usize::try_from(total).unwrap_or(0));
    for chunk in chunks {
        body.extend_from_slice(&chunk);
    }
    Ok(Prefix::Whole(body.freeze()))
}

fn empty_body() -> OutgoingBody {
    Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed()
}

fn empty() -> ProxyBody {
    http_body_util::Either::Left(Full::new(Bytes::new()))
}

/// A 304 standing for a full response with these headers.
fn not_modified_response(full: &HeaderMap) -> Response<ProxyBody> {
    let mut response = Response::new(empty());
    *response.status_mut() = StatusCode::NOT_MODIFIED;
    *response.headers_mut() = not_modified_headers(full);
    response
}

/// A short plain-text response the proxy makes itself.
fn short(code: StatusCode, text: &'static str, status: CacheStatus) -> Answer {
    let mut response = Response::new(http_body_util::Either::Left(Full::new(Bytes::from_static(
        text.as_bytes(),
    ))));
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    (response, status)
}

fn serve_stored(
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
        http_body_util::Either::Left(Full::new(entry.body.clone()))
    });
    *response.status_mut() = entry.status;
    *response.headers_mut() = entry.headers.clone();
    response.headers_mut().insert(header::AGE, age);
    (response, status)
}

fn serve_stale_on_error(parts: &Parts, entry: &StoredResponse, origin_status: u16) -> Answer {
    let now = SystemTime::now();
    let mut status = CacheStatus::forward("stale");
    status.fwd_status = Some(origin_status);
    status.ttl = Some(entry.ttl_seconds(now));
    serve_stored(parts, entry, status.detail("stale-if-error"), now)
}

fn serve_shared(parts: &Parts, shared: &SharedResponse, status: CacheStatus) -> Answer {
    if shared.status == StatusCode::OK && not_modified(&parts.headers, &shared.headers) {
        return (not_modified_response(&shared.headers), status);
    }
    let body = if parts.method == Method::HEAD {
        Bytes::new()
    } else {
        shared.body.clone()
    };
    let mut response = Response::new(http_body_util::Either::Left(Full::new(body)));
    *response.status_mut() = shared.status;
    *response.headers_mut() = shared.headers.clone();
    (response, status)
}

fn shared_matches(shared: &SharedResponse, request: &HeaderMap) -> bool {
    *field::selection(request, &shared.vary_names) == *shared.vary_selection
}

fn shared_from_entry(
    entry: &StoredResponse,
    stored: bool,
    detail: Option<&'static str>,
) -> Arc<SharedResponse> {
    Arc::new(SharedResponse {
        status: entry.status,
        headers: entry.headers.clone(),
        body: entry.body.clone(),
        vary_names: entry.vary_names.clone(),
        vary_selection: entry.vary_selection.clone(),
        stored,
        detail,
    })
}
