//! The request path, phase by phase: accept the request, look it up, serve a hit or fetch from the
//! origin (once per key in flight), decide whether the response is stored, and send it on.
//!
//! Each request loads the live configuration once, into its [`Exchange`], and finishes on it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::header::{self, HeaderMap};
use http::{Request, Response, StatusCode, response};
use http_body_util::BodyExt;
use hyper::body::{Body, Incoming};

use super::coalesce::{self, Flight, FlightOutcome, Role, SharedResponse};
use super::decision::{self, Decision};
use super::exchange::{Exchange, Route};
use super::headers::{
    ResponseFraming, content_length, not_modified, settle_response_framing, strip_hop_by_hop,
};
use super::logged::{Entry, Logged};
use super::origin::{OriginError, OriginFailure};
use super::range::Ranges;
use super::respond::{self, Answer, ProxyBody, WholeBody};
use super::series::series;
use super::served::{Detail, Fwd, OriginHead, Served, Tier};
use super::stream::{Capture, OriginStream, Prefix};
use super::{Live, Proxy};
use crate::cache::{
    Freshness, NotStored, ResponseControl, StoredResponse, owned_headers, varied_request_fields,
};

impl Proxy {
    /// Answers one client request; every response carries `Cache-Status`. With an access log,
    /// the response body writes the request's line when it ends.
    pub async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
        peer: SocketAddr,
    ) -> Response<Logged<ProxyBody>> {
        let started = Instant::now();
        let live = self.live();
        let mut entry = live
            .access_log
            .as_ref()
            .map(|log| Entry::begin(log, &request, peer, started));
        let Answer {
            mut response,
            served,
            origin,
        } = self.accept(Arc::clone(&live), request, peer).await;
        let series = series();
        if let Some(cached_error) = served.cached_error(response.status()) {
            series.cached_error(cached_error).increment(1);
        }
        let cache = &live.config.cache;
        if !cache.forward_targeted_fields {
            for name in &cache.targeted_fields {
                response.headers_mut().remove(name);
            }
        }
        let cache_status = served.cache_status(response.status());
        response.headers_mut().insert("cache-status", cache_status);
        series.request(served.outcome()).increment(1);
        series.duration.record(started.elapsed().as_secs_f64());
        if let Some(entry) = &mut entry {
            entry.answered(&response, served, origin);
        }
        response.map(|body| Logged::new(body, entry))
    }

    /// Phase 1: refuse what has no cache key, and send what the cache does not answer straight on.
    async fn accept(
        self: &Arc<Self>,
        live: Arc<Live>,
        request: Request<Incoming>,
        peer: SocketAddr,
    ) -> Answer {
        let (parts, body) = request.into_parts();
        if parts.method.as_str() == "PURGE" {
            return self.purge_from_public(&live, &parts, peer);
        }
        let exchange = match Exchange::new(parts, peer, live) {
            Ok(exchange) => exchange,
            Err(error) => {
                tracing::debug!(%error, %peer, "request refused");
                return respond::short(
                    StatusCode::BAD_REQUEST,
                    "request has no valid host or target\n",
                    Served::Refused,
                );
            }
        };
        match exchange.route() {
            Route::Pass(fwd) => Box::pin(self.pass(exchange, body, fwd)).await,
            Route::Cache => {
                // A body on GET or HEAD has no meaning (RFC 9110 section 9.3.1) and is not forwarded.
                drop(body);
                self.lookup(exchange).await
            }
        }
    }

    /// Phase 2: a fresh hit is served; a stale one is served while it revalidates, or revalidated
    /// first; a miss is fetched.
    ///
    /// The fetch, the pass and the disk read are boxed: hyper moves each request's future into
    /// place, and a future holds room for its largest state, so without the boxes every hit would
    /// copy the miss path's several KiB of state.
    async fn lookup(self: &Arc<Self>, exchange: Exchange) -> Answer {
        let mut variants = self.store.get(&exchange.key);
        let mut tier = Tier::Ram;
        if variants.is_none()
            && let Some(disk) = &self.disk
            && let Some(restored) =
                Box::pin(disk.load(&exchange.key, &exchange.config().cache.targeted_fields)).await
        {
            // A disk hit goes back into RAM (main: it has been asked for again).
            variants = self.store.restore(&exchange.key, restored);
            tier = Tier::Disk;
        }
        let now = SystemTime::now();
        let stored = variants
            .as_ref()
            .and_then(|v| v.select(&exchange.parts.headers))
            .cloned();
        let Some(entry) = stored else {
            let fwd = match variants {
                Some(_) => Fwd::VaryMiss,
                None => Fwd::Miss,
            };
            return Box::pin(self.fetch(exchange, fwd, None)).await;
        };
        match entry.freshness(&exchange.parts.headers, now) {
            Freshness::Fresh => respond::hit(&exchange.parts, &entry, tier, now),
            Freshness::StaleWhileRevalidate => {
                self.revalidate_in_background(&exchange, &entry);
                let ttl = entry.ttl_seconds(now);
                let served = Served::StaleWhileRevalidate { ttl };
                respond::stored(&exchange.parts, &entry, served, now)
            }
            Freshness::Stale => Box::pin(self.fetch(exchange, Fwd::Stale, Some(entry))).await,
        }
    }

    /// Phase 3: one fetch per key in flight. The first request leads; the others wait for its
    /// response and use it when it answers them too.
    async fn fetch(
        self: &Arc<Self>,
        exchange: Exchange,
        fwd: Fwd,
        stale: Option<Arc<StoredResponse>>,
    ) -> Answer {
        let flight = match self.flights.join(&exchange.key) {
            Role::Leader(flight) => Some(flight),
            Role::Follower(slot) => {
                // A leader whose client reads slowly must not hold its waiters for long.
                let origin = &exchange.config().origin;
                let patience = origin.first_byte_timeout + origin.idle_timeout;
                let outcome = tokio::time::timeout(patience, coalesce::wait(slot))
                    .await
                    .unwrap_or(FlightOutcome::FetchAlone);
                let gave_up = matches!(outcome, FlightOutcome::FetchAlone);
                if let Some(answer) = self.follow(&exchange, fwd, stale.as_deref(), outcome) {
                    return answer;
                }
                // The leader found nothing to cut a range from (too large, not storable, or cut
                // short): the origin answers this range rather than a second whole fetch.
                if gave_up && exchange.asks_for_range() {
                    return self.pass_range(exchange, None).await;
                }
                None
            }
        };
        self.fetch_from_origin(exchange, fwd, stale, flight).await
    }

    /// A waiting request's answer from its leader's outcome, or `None` to fetch alone.
    fn follow(
        &self,
        exchange: &Exchange,
        fwd: Fwd,
        stale: Option<&StoredResponse>,
        outcome: FlightOutcome,
    ) -> Option<Answer> {
        let parts = &exchange.parts;
        match outcome {
            FlightOutcome::Response(shared) if shared.entry.vary_matches(&parts.headers) => {
                if shared.stored {
                    // A second request for the object, as a hit would be: a first copy waiting
                    // in probation has proved itself.
                    self.store.touch(&exchange.key);
                }
                let served = Served::Collapsed {
                    fwd,
                    stored: shared.stored,
                    detail: shared.detail,
                };
                Some(respond::shared(parts, &shared, served))
            }
            FlightOutcome::Failed(failure) => {
                if let Some(entry) = stale.filter(|e| e.usable_on_error(SystemTime::now())) {
                    return Some(respond::stale_on_error(
                        parts,
                        entry,
                        failure.status().as_u16(),
                    ));
                }
                let served = Served::Collapsed {
                    fwd,
                    stored: false,
                    detail: Some(failure.into()),
                };
                Some(respond::short(failure.status(), failure.body(), served))
            }
            // The leader's response was for another variant, or it gave up, or the wait ran out:
            // its fetch may have stored what this request needs.
            FlightOutcome::Response(_) | FlightOutcome::FetchAlone => {
                let entry = self
                    .store
                    .get(&exchange.key)
                    .and_then(|v| v.select(&parts.headers).cloned())?;
                let now = SystemTime::now();
                match entry.freshness(&parts.headers, now) {
                    Freshness::Fresh => Some(respond::hit(parts, &entry, Tier::Ram, now)),
                    Freshness::StaleWhileRevalidate | Freshness::Stale => None,
                }
            }
        }
    }

    /// Phase 4: the origin's answer. A 304 refreshes the stale entry; a failure serves the stale
    /// entry where `stale-if-error` allows; anything else goes on to be decided and forwarded.
    async fn fetch_from_origin(
        self: &Arc<Self>,
        exchange: Exchange,
        fwd: Fwd,
        stale: Option<Arc<StoredResponse>>,
        mut flight: Option<Flight>,
    ) -> Answer {
        let usable_stale = |now| {
            stale
                .as_ref()
                .filter(|entry: &&Arc<StoredResponse>| entry.usable_on_error(now))
        };
        let asked = Instant::now();
        let mut conditional = stale.is_some();
        let mut sent = exchange
            .live
            .origin
            .send_idempotent(|| exchange.fetch_request(stale.as_deref()))
            .await;
        if let (Ok(response), Some(entry)) = (&sent, &stale)
            && response.status() == StatusCode::NOT_MODIFIED
        {
            let origin = OriginHead::of(response, asked);
            if let Some(answer) =
                self.not_modified(&exchange, entry, response.headers(), origin, &mut flight)
            {
                return answer;
            }
            // A 304 about nothing stored must not be used for this request: ask again without
            // the condition (RFC 9111 section 4.3.4).
            tracing::debug!(key = %exchange.key, "304 matches no stored response; fetching whole");
            conditional = false;
            sent = exchange
                .live
                .origin
                .send_idempotent(|| exchange.fetch_request(None))
                .await;
        }
        let response = match sent {
            Ok(response) => response,
            Err(error) => {
                tracing::warn!(%error, key = %exchange.key, "origin request failed");
                let failure = error.failure();
                if let Some(entry) = usable_stale(SystemTime::now()) {
                    abandon(flight);
                    let code = failure.status().as_u16();
                    return respond::stale_on_error(&exchange.parts, entry, code);
                }
                if let Some(flight) = flight {
                    flight.finish(FlightOutcome::Failed(failure));
                }
                return respond::origin_failed(failure, fwd);
            }
        };
        let origin = OriginHead::of(&response, asked);
        if response.status() == StatusCode::NOT_MODIFIED && !conditional {
            // A 304 to a request without a condition stands for nothing: the client never asked
            // for one, and nothing can be stored from it.
            tracing::warn!(key = %exchange.key, "origin answered 304 to an unconditional request");
            if let Some(flight) = flight {
                flight.finish(FlightOutcome::Failed(OriginFailure::Error));
            }
            return respond::origin_failed(OriginFailure::Error, fwd).answered_by(origin);
        }
        if response.status().is_server_error()
            && let Some(entry) = usable_stale(SystemTime::now())
        {
            abandon(flight);
            let code = response.status().as_u16();
            return respond::stale_on_error(&exchange.parts, entry, code).answered_by(origin);
        }
        self.forward_response(exchange, fwd, stale.is_some(), response, origin, flight)
            .await
    }

    /// The answer from a stale entry the origin's 304 is about: the entry refreshed with the 304's
    /// fields and served, and the requests waiting on the flight answered with it. `None` when
    /// the 304 names no stored response (its validators match none).
    fn not_modified(
        &self,
        exchange: &Exchange,
        entry: &StoredResponse,
        not_modified: &HeaderMap,
        origin: OriginHead,
        flight: &mut Option<Flight>,
    ) -> Option<Answer> {
        let only_stored = self
            .store
            .peek(&exchange.key)
            .is_none_or(|variants| variants.len() <= 1);
        if !entry.validated_by(not_modified, only_stored) {
            return None;
        }
        let refreshed = self.refresh(exchange, entry, not_modified);
        if let Some(flight) = flight.take() {
            let shared = SharedResponse::new(Arc::clone(&refreshed), true, None);
            flight.finish(FlightOutcome::Response(shared));
        }
        let now = SystemTime::now();
        let served = Served::Revalidated {
            ttl: refreshed.ttl_seconds(now),
        };
        Some(respond::stored(&exchange.parts, &refreshed, served, now).answered_by(origin))
    }

    /// Applies a 304 from the origin to the stored entry: new headers, the same body, in RAM and
    /// on disk.
    fn refresh(
        &self,
        exchange: &Exchange,
        entry: &StoredResponse,
        not_modified: &HeaderMap,
    ) -> Arc<StoredResponse> {
        // Owned, as the refreshed entry keeps them (see `owned_headers`).
        let mut not_modified = owned_headers(not_modified);
        strip_hop_by_hop(&mut not_modified);
        let refreshed = entry.refreshed(
            &not_modified,
            &exchange.parts.headers,
            &exchange.config().cache.targeted_fields,
            SystemTime::now(),
        );
        let refreshed = self.store.refresh(exchange.key.clone(), refreshed);
        if let Some(disk) = &self.disk
            && let Some(variants) = self.store.peek(&exchange.key)
        {
            disk.refreshed(&exchange.key, variants);
        }
        refreshed
    }

    /// Phase 5: decides whether the response is stored (storability, then admission), then sends
    /// it to the client while capturing it for the store and the waiting requests.
    ///
    /// A GET's range is cut from the whole 200 as it streams, when the whole is known to be no
    /// larger than `cache.max_object_bytes` (a body of unknown length is read up to its limit
    /// first); otherwise this fetch is given up and the origin answers the range itself.
    async fn forward_response(
        self: &Arc<Self>,
        exchange: Exchange,
        fwd: Fwd,
        revalidating: bool,
        response: Response<Incoming>,
        origin: OriginHead,
        flight: Option<Flight>,
    ) -> Answer {
        let (mut head, incoming) = response.into_parts();
        let framing = match settle_response_framing(&mut head.headers) {
            Ok(framing) => framing,
            Err(error) => {
                tracing::warn!(%error, key = %exchange.key, "origin response refused");
                if let Some(flight) = flight {
                    flight.finish(FlightOutcome::Failed(OriginFailure::Error));
                }
                return respond::origin_failed(OriginFailure::Error, fwd).answered_by(origin);
            }
        };
        strip_hop_by_hop(&mut head.headers);
        // What may be stored must not pin the connections' read buffers (see `owned_headers`).
        head.headers = owned_headers(&head.headers);
        let config = exchange.config();
        let control = ResponseControl::of(&head.headers, &config.cache.targeted_fields);
        let (decision, storable) = self.decide(&exchange, &head, &control, framing, revalidating);
        let targeted = control.targeted_field().cloned();
        let served = Served::fetched(fwd, decision, targeted.clone());

        let max_object = config.cache.max_object_bytes;
        let limit = decision.size_limit(max_object, self.store.budget());
        let idle_timeout = config.origin.idle_timeout;
        // Conditionals come before the range (RFC 9110 section 13.2.2): a 304 stands for it all.
        let ranges = Ranges::requested(&exchange.parts, head.status, &head.headers)
            .filter(|_| !not_modified(&exchange.parts.headers, &head.headers));
        let Some(storable) = storable else {
            count(decision);
            abandon(flight);
            if let Some(ranges) = ranges {
                let Some(length) = content_length(&head.headers).filter(|n| *n <= max_object)
                else {
                    drop(incoming);
                    return self.pass_range(exchange, decision.not_stored()).await;
                };
                let body = WholeBody::Streaming(OriginStream::new(incoming, idle_timeout, None));
                let response = respond::ranged(head, body, length, &ranges);
                return Answer::new(response, served).answered_by(origin);
            }
            let body = OriginStream::new(incoming, idle_timeout, None);
            let response = self.client_response(&exchange, head, body);
            return Answer::new(response, served).answered_by(origin);
        };
        let content_length = storable.content_length;
        let capture = self.capture(&exchange, &head, storable, decision, limit, flight);
        if incoming.is_end_stream() {
            // An empty body: hyper never polls a body it knows to be empty, so complete it here.
            count(decision);
            capture.complete_with(Bytes::new());
            let body = OriginStream::new(incoming, idle_timeout, None);
            let response = self.client_response(&exchange, head, body);
            return Answer::new(response, served).answered_by(origin);
        }
        if content_length.is_none() && (decision.segment().is_some() || ranges.is_some()) {
            // A body of unknown length is read up to the segment's limit before the head goes
            // out, so that `stored` in Cache-Status is true when sent, and so that a range is
            // cut only from a whole that the cache would have read anyway.
            let body = OriginStream::new(incoming, idle_timeout, None);
            return match body.read_up_to(limit).await {
                Ok(Prefix::Whole(body)) => {
                    count(decision);
                    capture.complete_with(body.clone());
                    if let Some(ranges) = ranges {
                        let length = body.len() as u64;
                        let body = WholeBody::Whole(body);
                        let response = respond::ranged(head, body, length, &ranges);
                        return Answer::new(response, served).answered_by(origin);
                    }
                    let body = match exchange.is_head() {
                        true => {
                            head.headers.remove(header::TRANSFER_ENCODING);
                            respond::empty()
                        }
                        false => respond::full(body),
                    };
                    Answer::new(Response::from_parts(head, body), served).answered_by(origin)
                }
                Ok(Prefix::TooLarge(body)) => {
                    let decision = decision.too_large();
                    count(decision);
                    capture.abandon();
                    if ranges.is_some() {
                        drop(body);
                        return self.pass_range(exchange, decision.not_stored()).await;
                    }
                    let served = Served::fetched(fwd, decision, targeted);
                    let response = self.client_response(&exchange, head, body);
                    Answer::new(response, served).answered_by(origin)
                }
                Err(error) => respond::origin_failed(error.failure(), fwd).answered_by(origin),
            };
        }
        count(decision);
        let body = OriginStream::new(incoming, idle_timeout, Some(capture));
        if let (Some(ranges), Some(length)) = (ranges, content_length) {
            let body = WholeBody::Streaming(body);
            let response = respond::ranged(head, body, length, &ranges);
            return Answer::new(response, served).answered_by(origin);
        }
        let response = self.client_response(&exchange, head, body);
        Answer::new(response, served).answered_by(origin)
    }

    /// Whether a response is stored: storability first (a pure decision), then, for storable
    /// responses only, the doorkeeper. A revalidated entry the origin no longer lets us store is
    /// dropped.
    fn decide(
        &self,
        exchange: &Exchange,
        head: &response::Parts,
        control: &ResponseControl,
        framing: ResponseFraming,
        revalidating: bool,
    ) -> (Decision, Option<decision::Storable>) {
        let max_object = exchange.config().cache.max_object_bytes;
        let storable =
            decision::storable(&exchange.parts.headers, head, control, framing, max_object);
        if revalidating && storable.is_err() {
            self.forget(&exchange.key);
        }
        match storable {
            Err(reason) => (Decision::NotStorable(reason), None),
            Ok(storable) => {
                let live = &exchange.live;
                let admitted = decision::admit(
                    live.config.admission.mode,
                    live.doorkeeper.as_deref(),
                    self.store.budget(),
                    &exchange.key,
                    revalidating,
                    storable.content_length,
                );
                (admitted, Some(storable))
            }
        }
    }

    /// The capture of a storable body: once the origin has sent all of it, it is stored if admitted
    /// and handed to the requests waiting on the flight.
    fn capture(
        self: &Arc<Self>,
        exchange: &Exchange,
        head: &response::Parts,
        storable: decision::Storable,
        decision: Decision,
        limit: u64,
        flight: Option<Flight>,
    ) -> Capture {
        let proxy = Arc::clone(self);
        let key = exchange.key.clone();
        let request_headers = varied_request_fields(&exchange.parts.headers, &head.headers);
        let response_status = head.status;
        let response_headers = head.headers.clone();
        let detail = Detail::of_decision(decision);
        Capture::new(
            storable.content_length,
            limit,
            Box::new(move |body: Bytes| {
                let entry = StoredResponse::with_control(
                    response_status,
                    response_headers,
                    body,
                    &request_headers,
                    &storable.control,
                    SystemTime::now(),
                );
                let shared = match decision.segment() {
                    Some(segment) => {
                        let entry = proxy.store.insert(key, entry, segment);
                        SharedResponse::new(entry, true, detail)
                    }
                    None => SharedResponse::new(Arc::new(entry), false, detail),
                };
                if let Some(flight) = flight {
                    flight.finish(FlightOutcome::Response(shared));
                }
            }),
        )
    }

    /// The client's response around an origin body: no body for HEAD, a 304 when the client's
    /// conditional matches; a body still being captured is read to the end in the background.
    fn client_response(
        &self,
        exchange: &Exchange,
        head: response::Parts,
        body: OriginStream,
    ) -> Response<ProxyBody> {
        let answer_304 =
            head.status == StatusCode::OK && not_modified(&exchange.parts.headers, &head.headers);
        if !(exchange.is_head() || answer_304) {
            return Response::from_parts(head, respond::streamed(body));
        }
        // The client gets no body, but the store and the waiters may still want it.
        body.finish_unread();
        let mut response = if answer_304 {
            respond::not_modified_response(&head.headers)
        } else {
            Response::from_parts(head, respond::empty())
        };
        response.headers_mut().remove(header::TRANSFER_ENCODING);
        response
    }

    /// Serves a stale entry right away and refreshes it in the background, once per key.
    fn revalidate_in_background(
        self: &Arc<Self>,
        exchange: &Exchange,
        entry: &Arc<StoredResponse>,
    ) {
        let Role::Leader(flight) = self.flights.join(&exchange.key) else {
            return;
        };
        let proxy = Arc::clone(self);
        let exchange = exchange.detached();
        let entry = Arc::clone(entry);
        tokio::spawn(async move {
            let answer = proxy
                .fetch_from_origin(exchange, Fwd::Stale, Some(entry), Some(flight))
                .await;
            let _ = answer.response.into_body().collect().await;
        });
    }

    /// Forwards a request the cache does not answer (other methods), streaming both ways.
    async fn pass(self: &Arc<Self>, exchange: Exchange, body: Incoming, fwd: Fwd) -> Answer {
        let request = exchange.pass_request(body);
        let asked = Instant::now();
        let response = exchange.live.origin.send(request).await;
        self.passed(exchange, response, asked, fwd, None)
    }

    /// Passes a GET's range to the origin, when the cache will not cut it from the whole object:
    /// too large, not storable (`reason` says why), or given up by the fetch it waited for. The
    /// origin's answer, a 206 or 416 included, is forwarded as it is and never stored.
    async fn pass_range(self: &Arc<Self>, exchange: Exchange, reason: Option<NotStored>) -> Answer {
        let asked = Instant::now();
        let response = exchange
            .live
            .origin
            .send_idempotent(|| exchange.range_request())
            .await;
        let detail = reason.map(Detail::NotStored);
        self.passed(exchange, response, asked, Fwd::Bypass, detail)
    }

    /// The origin's answer to a passed request (asked for at `asked`), streamed to the client as
    /// it is.
    fn passed(
        &self,
        exchange: Exchange,
        response: Result<Response<Incoming>, OriginError>,
        asked: Instant,
        fwd: Fwd,
        detail: Option<Detail>,
    ) -> Answer {
        let response = match response {
            Ok(response) => response,
            Err(error) => {
                tracing::warn!(%error, "origin request failed");
                return respond::origin_failed(error.failure(), fwd);
            }
        };
        let origin = OriginHead::of(&response, asked);
        // RFC 9111 section 4.4: a successful unsafe request invalidates what the cache holds.
        let succeeded = response.status().is_success() || response.status().is_redirection();
        if !exchange.parts.method.is_safe() && succeeded {
            self.forget(&exchange.key);
        }
        let (mut head, incoming) = response.into_parts();
        if let Err(error) = settle_response_framing(&mut head.headers) {
            tracing::warn!(%error, "origin response refused");
            return respond::origin_failed(OriginFailure::Error, fwd).answered_by(origin);
        }
        strip_hop_by_hop(&mut head.headers);
        let body = OriginStream::new(incoming, exchange.config().origin.idle_timeout, None);
        let response = Response::from_parts(head, respond::streamed(body));
        Answer::new(response, Served::Bypass { fwd, detail }).answered_by(origin)
    }

    fn purge_from_public(
        &self,
        live: &Live,
        parts: &http::request::Parts,
        peer: SocketAddr,
    ) -> Answer {
        let allowed = live
            .config
            .server
            .purge_allowed_networks
            .iter()
            .any(|network| network.contains(&peer.ip()));
        if !allowed {
            return respond::short(
                StatusCode::FORBIDDEN,
                "PURGE is not allowed from this address\n",
                Served::Bypass {
                    fwd: Fwd::Method,
                    detail: None,
                },
            );
        }
        let (code, text) = self.purge_with(live, parts);
        let served = Served::Bypass {
            fwd: Fwd::Method,
            detail: Some(Detail::Purge),
        };
        respond::short(code, text, served)
    }

    /// Removes the object a PURGE request names: 200 if something was stored, 404 otherwise.
    pub(super) fn purge(&self, parts: &http::request::Parts) -> (StatusCode, &'static str) {
        self.purge_with(&self.live(), parts)
    }

    fn purge_with(&self, live: &Live, parts: &http::request::Parts) -> (StatusCode, &'static str) {
        match crate::cache::CacheKey::from_request(parts, &live.config.cache.key) {
            Err(_) => (
                StatusCode::BAD_REQUEST,
                "PURGE needs a valid Host and path\n",
            ),
            Ok(key) if self.forget(&key) => (StatusCode::OK, "purged\n"),
            Ok(_) => (StatusCode::NOT_FOUND, "not cached\n"),
        }
    }
}

impl Proxy {
    /// Removes every variant stored under `key`, in RAM and on disk; returns whether either tier
    /// held one.
    fn forget(&self, key: &crate::cache::CacheKey) -> bool {
        let in_ram = self.store.purge(key);
        // After the store's purge: a write of this key queued by an eviction before it is dropped.
        let on_disk = self.disk.as_ref().is_some_and(|disk| disk.remove(key));
        in_ram || on_disk
    }
}

/// Gives up leading a flight, if this request leads one: its waiters fetch alone.
fn abandon(flight: Option<Flight>) {
    if let Some(flight) = flight {
        flight.abandon();
    }
}

/// Counts an admission decision once it is final (a body of unknown length may turn out too
/// large for the segment it was meant for).
fn count(decision: Decision) {
    series().admission(decision.label()).increment(1);
}
