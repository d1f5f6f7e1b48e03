//! The request path as phases, and the driver that runs them. Each phase is a function of the
//! request's state that returns the next [`Step`]; none calls back into another:
//!
//! 1. request (`mod.rs`): refuse a request that came back to this proxy (`cdn_loop.rs`), answer
//!    an `OPTIONS` or `TRACE` whose `Max-Forwards` is spent (`max_forwards.rs`), refuse what has
//!    no cache key, send other methods to the pass;
//! 2. lookup (`lookup.rs`): RAM, then disk; a fresh hit is done here;
//! 3. coalesce (`fetch.rs`): one fetch per key in flight, the others wait for its outcome;
//! 4. origin (`fetch.rs`): the fetch sent; a 304 refreshes, a failure may serve stale;
//! 5. response (`forward.rs`): storable by RFC 9111 (`decision.rs`), then admission; streamed
//!    to the client while it is captured;
//! 6. store (`store.rs`): the captured body written, and the waiting requests answered;
//! 7. slices (`slices.rs`): a large object answered from aligned slices, each fetched, coalesced
//!    and admitted on its own;
//!
//! and beside them the pass (`pass.rs`): what the cache does not answer goes to the origin and
//! streams back. Purges live in `purge.rs`. Each request loads the live configuration once, into
//! its [`Exchange`], and finishes on it.

pub(crate) mod body;
pub(crate) mod cdn_loop;
pub(crate) mod coalesce;
pub(crate) mod decision;
pub(crate) mod exchange;
pub(crate) mod fetch;
pub(crate) mod forward;
pub(crate) mod interim;
mod lookup;
mod max_forwards;
mod pass;
mod purge;
pub(crate) mod slices;
mod store;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use hyper::body::{Body, Incoming};

use crate::cache::NotStored;
use crate::proxy::outcome::logged::{Entry, Logged};
use crate::proxy::outcome::served::{Detail, Fwd, OriginHead, Served};
use crate::proxy::request::body::RequestBody;
use crate::proxy::request::exchange::{Exchange, Route};
use crate::proxy::request::fetch::Fetch;
use crate::proxy::request::interim::InterimSink;
use crate::proxy::request::slices::SlicedObject;
use crate::proxy::response::respond::{self, Answer, ProxyBody};
use crate::proxy::response::stored_head::StoredHead;
use crate::proxy::upstream::Routed;
use crate::proxy::{Live, Proxy};
use crate::telemetry::{RouteSeries, series};

/// What a phase hands on: the next phase with the state it needs, or the answer.
pub(crate) enum Step {
    /// Look the request up in RAM and on disk.
    Lookup(Exchange),
    /// A miss, or a stale entry to revalidate: join the fetch in flight for its key, or lead one.
    Coalesce(Fetch),
    /// Ask the origin (this fetch leads its flight, or fetches alone).
    Origin(Fetch),
    /// The origin's response head to a fetch: decide whether it is stored, and forward it.
    Response(Fetch, Response<Incoming>, OriginHead),
    /// A request the cache does not answer, with its body, to the origin as it is; the detail
    /// says why when a policy rule sent it.
    Pass(Exchange, RequestBody, Fwd, Option<Detail>),
    /// A GET's range the cache will not cut from a whole object (`Some` says why): the origin
    /// answers it.
    PassRange(Exchange, Option<NotStored>),
    /// A large object, answered from its slices; with one of them already fetched (its index
    /// and bytes), when the origin's answer that made the object known carried it.
    Slices(Exchange, Arc<SlicedObject>, Option<(u64, Bytes)>),
    /// The answer.
    Done(Answer),
}

/// What the server that writes a request's answer can write beyond a status and a header map.
#[derive(Debug, Default)]
pub struct Writer {
    /// Where the origin's 1xx and the route's early hints go, from a server that can send them
    /// before the answer.
    pub interim: Option<InterimSink>,
    /// The server writes a memory hit's head from its entry's stored block ([`StoredHead`]).
    /// hyper's server writes only from a map: it is given the map, with no block made first.
    pub stored_heads: bool,
}

impl Proxy {
    /// Answers one client request; every response carries `Cache-Status`. With an access log,
    /// the response body writes the request's line when it ends. `writer` says what the server
    /// can send besides a head from a map.
    pub async fn handle(
        self: Arc<Self>,
        request: Request<RequestBody>,
        peer: SocketAddr,
        writer: Writer,
    ) -> Response<Logged<ProxyBody>> {
        let started = Instant::now();
        let live = self.live();
        let mut entry = live
            .access_log
            .as_ref()
            .map(|log| Entry::begin(log, &request, peer, started));
        let (first, routed) = self.accept(Arc::clone(&live), request, peer, writer);
        let Answer {
            mut response,
            served,
            origin,
        } = self.drive(first).await;
        let series = series();
        let route = match &routed {
            Some(routed) => &routed.series,
            None => RouteSeries::unrouted(),
        };
        if served.served_stored_entry() {
            let sent = response.body().size_hint().exact().unwrap_or(0);
            route.hit_bytes.increment(sent);
        }
        if let Some(cached_error) = served.cached_error(response.status()) {
            series.cached_error(cached_error).increment(1);
        }
        let cache = &live.config.cache;
        let targeted: &[_] = if cache.forward_targeted_fields {
            &[]
        } else {
            &cache.targeted_fields
        };
        let tag_fields = [&cache.tag_header, &crate::cache::tags::CACHE_TAG];
        let tags: &[_] = if cache.forward_tag_header {
            &[]
        } else {
            &tag_fields
        };
        StoredHead::remove_fields(&mut response, targeted.iter().chain(tags.iter().copied()));
        let cache_status = served.cache_status(response.status());
        StoredHead::set_cache_status(&mut response, cache_status);
        route.request(served.outcome()).increment(1);
        series.duration.record(started.elapsed().as_secs_f64());
        if let Some(entry) = &mut entry {
            entry.answered(&response, served, origin);
        }
        response.map(|body| Logged::new(body, entry))
    }

    /// Runs a request's phases, from the step the request phase gave, to its answer.
    ///
    /// Every phase after the lookup is boxed: hyper moves each request's future into place, and a
    /// future holds room for its largest state, so without the boxes every hit would copy the
    /// miss path's several KiB of state.
    async fn drive(self: &Arc<Self>, first: Step) -> Answer {
        let mut step = first;
        loop {
            step = match step {
                Step::Lookup(exchange) => self.lookup(exchange).await,
                Step::Coalesce(fetch) => Box::pin(self.coalesce(fetch)).await,
                Step::Origin(fetch) => Box::pin(self.ask_origin(fetch)).await,
                Step::Response(fetch, response, origin) => {
                    Box::pin(self.forward_response(fetch, response, origin)).await
                }
                Step::Pass(exchange, body, fwd, detail) => {
                    Box::pin(self.pass(exchange, body, fwd, detail)).await
                }
                Step::PassRange(exchange, reason) => {
                    Box::pin(self.pass_range(exchange, reason)).await
                }
                Step::Slices(exchange, object, held) => {
                    Box::pin(self.serve_slices(exchange, object, held)).await
                }
                Step::Done(answer) => return answer,
            };
        }
    }

    /// The request phase: refuse a request that came back to this proxy and what has no cache key, and send what the cache does not answer
    /// straight on. Returns the first step and the series of the route taken, if one was.
    fn accept(
        &self,
        live: Arc<Live>,
        request: Request<RequestBody>,
        peer: SocketAddr,
        writer: Writer,
    ) -> (Step, Option<Arc<Routed>>) {
        let (mut parts, body) = request.into_parts();
        if cdn_loop::came_back(&parts.headers) {
            tracing::warn!(%peer, uri = %parts.uri, "request loop: a request came back to this proxy (CDN-Loop); is the origin pointing at the proxy?");
            let refused = respond::short(
                StatusCode::LOOP_DETECTED,
                "request loop: this request already passed through this proxy (CDN-Loop)\n",
                Served::Refused,
            );
            return (Step::Done(refused), None);
        }
        if let Some(answer) = max_forwards::answer_here(&mut parts) {
            return (Step::Done(answer), None);
        }
        if parts.method.as_str() == "PURGE" {
            return (
                Step::Done(self.purge_from_public(&live, &parts, peer)),
                None,
            );
        }
        let mut exchange = match Exchange::new(parts, peer, live) {
            Ok(exchange) => exchange,
            Err(error) => {
                tracing::debug!(%error, %peer, "request refused");
                let refused = respond::short(
                    StatusCode::BAD_REQUEST,
                    "request has no valid host or target\n",
                    Served::Refused,
                );
                return (Step::Done(refused), None);
            }
        };
        exchange.interim = writer.interim;
        exchange.stored_heads = writer.stored_heads;
        let routed = Some(Arc::clone(&exchange.routed));
        let step = match exchange.route() {
            Route::Pass(fwd, rule) => Step::Pass(exchange, body, fwd, rule.map(Detail::Policy)),
            Route::Cache => {
                // A body on GET or HEAD has no meaning (RFC 9110 section 9.3.1) and is not forwarded.
                drop(body);
                Step::Lookup(exchange)
            }
        };
        (step, routed)
    }
}
