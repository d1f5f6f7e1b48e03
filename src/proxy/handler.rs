//! The request path, phase by phase: accept the request and look it up (here), serve a hit or
//! fetch a miss from the origin once per key in flight (`fetch.rs`), decide whether the origin's
//! response is stored and send it on (`forward.rs`). What the cache does not answer passes through
//! here to the origin.
//!
//! Each request loads the live configuration once, into its [`Exchange`], and finishes on it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use super::exchange::{Exchange, Route};
use super::headers::{settle_response_framing, strip_hop_by_hop};
use super::logged::{Entry, Logged};
use super::origin::{OriginError, OriginFailure};
use super::respond::{self, Answer, ProxyBody};
use super::series::{PurgeLabel, series};
use super::served::{Detail, Fwd, OriginHead, Served, Tier};
use super::stream::OriginStream;
use super::{Live, Proxy};
use crate::cache::{Freshness, NotStored};

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
        if !cache.forward_tag_header {
            response.headers_mut().remove(&cache.tag_header);
            response.headers_mut().remove(crate::cache::tags::CACHE_TAG);
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
        let Some(entry) = self.unless_purged(&exchange, entry) else {
            return Box::pin(self.fetch(exchange, Fwd::Miss, None)).await;
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
            Freshness::RefusedByRequest => {
                Box::pin(self.fetch(exchange, Fwd::Request, Some(entry))).await
            }
        }
    }

    /// Forwards a request the cache does not answer (other methods), streaming both ways.
    async fn pass(self: &Arc<Self>, exchange: Exchange, body: Incoming, fwd: Fwd) -> Answer {
        let asked = Instant::now();
        let response = exchange
            .live
            .origin
            .send_once(&exchange.group, exchange.key.as_str(), |server| {
                exchange.pass_request(body, server)
            })
            .await;
        self.passed(exchange, response, asked, fwd, None)
    }

    /// Passes a GET's range to the origin, when the cache will not cut it from the whole object:
    /// too large, not storable (`reason` says why), or given up by the fetch it waited for. The
    /// origin's answer, a 206 or 416 included, is forwarded as it is and never stored.
    pub(super) async fn pass_range(
        self: &Arc<Self>,
        exchange: Exchange,
        reason: Option<NotStored>,
    ) -> Answer {
        let asked = Instant::now();
        let response = exchange
            .live
            .origin
            .send_idempotent(&exchange.group, exchange.key.as_str(), |server| {
                exchange.range_request(server)
            })
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
            Ok(key) => {
                let series = series();
                series.purge(PurgeLabel::Key).increment(1);
                if self.forget(&key) {
                    series.purged_entry(PurgeLabel::Key).increment(1);
                    (StatusCode::OK, "purged\n")
                } else {
                    (StatusCode::NOT_FOUND, "not cached\n")
                }
            }
        }
    }
}

impl Proxy {
    /// Removes every variant stored under `key`, in RAM and on disk; returns whether either tier
    /// held one.
    pub(super) fn forget(&self, key: &crate::cache::CacheKey) -> bool {
        let in_ram = self.store.purge(key);
        // After the store's purge: a write of this key queued by an eviction before it is dropped.
        let on_disk = self.disk.as_ref().is_some_and(|disk| disk.remove(key));
        in_ram || on_disk
    }
}
