//! The origin's answer to a fetch, forwarded: whether it is stored is decided first (storability,
//! then the doorkeeper), then it is sent to the client while it is captured for the store and the
//! requests waiting on the flight.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header;
use http::{Response, StatusCode, response};
use hyper::body::{Body, Incoming};

use super::Step;
use super::store::StoreWrite;
use crate::cache::policy as cache_policy;
use crate::cache::{NotStored, ResponseControl};
use crate::proxy::Proxy;
use crate::proxy::outcome::served::{DecidedBy, OriginHead, Served};
use crate::proxy::request::decision::{self, Decision, Storable};
use crate::proxy::request::exchange::Exchange;
use crate::proxy::request::fetch::Fetch;
use crate::proxy::response::headers::{
    ResponseFraming, content_length, not_modified, record_read_length, settle_response_framing,
    strip_hop_by_hop,
};
use crate::proxy::response::range::Ranges;
use crate::proxy::response::respond::{self, Answer, ProxyBody, WholeBody};
use crate::proxy::response::stream::{Capture, OriginStream, Prefix};
use crate::proxy::upstream::origin::OriginFailure;
use crate::telemetry::series;

/// The origin's answer to a fetch, its head settled and its storage decided.
pub(super) struct Fetched {
    pub(super) fetch: Fetch,
    origin: OriginHead,
    pub(super) decision: Decision,
    /// The largest body the decision stores.
    limit: u64,
    /// The targeted field (RFC 9213) or the policy rule that decided, if one did.
    decided_by: Option<DecidedBy>,
    /// The client's range, when one applies to this response.
    ranges: Option<Ranges>,
}

impl Fetched {
    /// The answer of this fetch that sends `response`.
    fn answer(&self, response: Response<ProxyBody>) -> Answer {
        let served = Served::fetched(self.fetch.fwd, self.decision, self.decided_by.clone());
        Answer::new(response, served).answered_by(self.origin.clone())
    }

    fn idle_timeout(&self) -> Duration {
        self.fetch.exchange.config().origin.idle_timeout
    }

    /// Its route's count of origin bytes.
    fn origin_bytes(&self) -> metrics::Counter {
        self.fetch.exchange.routed.series.origin_bytes.clone()
    }
}

impl Proxy {
    /// The response phase: the route's policy applied to the head (what it ignores of the
    /// origin's, the lifetimes it sets), then whether the response is stored (storability, then
    /// admission); then it is sent to the client while it is captured for the store phase.
    ///
    /// A GET's range is cut from the whole 200 as it streams, when the whole is known to be no
    /// larger than `cache.max_object_bytes` (a body of unknown length is read up to its limit
    /// first); otherwise this fetch is given up and the origin answers the range itself.
    pub(crate) async fn forward_response(
        self: &Arc<Self>,
        fetch: Fetch,
        response: Response<Incoming>,
        origin: OriginHead,
    ) -> Step {
        let (mut head, body) = response.into_parts();
        let framing = match settle_response_framing(&mut head.headers) {
            Ok(framing) => framing,
            Err(error) => {
                tracing::warn!(%error, key = %fetch.exchange.key, "origin response refused");
                return Step::Done(fetch.fail(OriginFailure::Error).answered_by(origin));
            }
        };
        strip_hop_by_hop(&mut head.headers);
        let config = fetch.exchange.config();
        let policy = &fetch.exchange.routed.policy;
        cache_policy::prepare_response(policy, &mut head.headers);
        let control = ResponseControl::of(&head.headers, &config.cache.targeted_fields);
        let targeted = control.targeted_field().cloned().map(DecidedBy::Targeted);
        let (control, rule) =
            cache_policy::read_control(policy, head.status, &head.headers, control);
        if let Some(object) = self.slice_instead(&fetch, &head, &control, framing) {
            // The origin is asked again for the slices this request touches.
            drop(body);
            let mut fetch = fetch;
            fetch.abandon_flight();
            return Step::Slices(fetch.exchange, object, None);
        }
        let (decision, storable) = self.decide(&fetch, &head, &control, framing);
        let limit = decision.size_limit(config.cache.max_object_bytes, self.store.budget());
        // Conditionals come before the range (RFC 9110 section 13.2.2): a 304 stands for it all.
        let request = &fetch.exchange.parts;
        let ranges = Ranges::requested(request, head.status, &head.headers)
            .filter(|_| !not_modified(&request.headers, &head.headers));
        let fetched = Fetched {
            decided_by: rule.map(DecidedBy::Policy).or(targeted),
            fetch,
            origin,
            decision,
            limit,
            ranges,
        };
        match storable {
            None => self.forward_unstored(fetched, head, body),
            Some(storable) => self.forward_storable(fetched, head, body, storable).await,
        }
    }

    /// Whether a response is stored: storability first (a pure decision), then, for storable
    /// responses only, the doorkeeper. A revalidated entry the origin no longer lets us store is
    /// dropped.
    fn decide(
        &self,
        fetch: &Fetch,
        head: &response::Parts,
        control: &ResponseControl,
        framing: ResponseFraming,
    ) -> (Decision, Option<Storable>) {
        let exchange = &fetch.exchange;
        let revalidating = fetch.stale.is_some();
        let max_object = exchange.config().cache.max_object_bytes;
        let policy = &exchange.routed.policy;
        let request_headers =
            cache_policy::storing_request_headers(policy, &exchange.parts.headers);
        let storable = decision::storable(&request_headers, head, control, framing, max_object)
            .and_then(
                |storable| match cache_policy::no_store(policy, &exchange.parts) {
                    Some(rule) => Err(NotStored::Policy(rule)),
                    None => Ok(storable),
                },
            );
        if revalidating && storable.is_err() {
            self.forget(&exchange.key);
        }
        match storable {
            Err(reason) => (Decision::NotStorable(reason), None),
            Ok(storable) => {
                let live = &exchange.live;
                let mode = decision::route_mode(
                    policy,
                    live.config.admission.mode,
                    storable.content_length,
                );
                let admitted = decision::admit(
                    mode,
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

    /// A response that is not stored, streamed to the client; the requests waiting on the flight
    /// fetch alone. A range is cut from it when its announced length is within
    /// `cache.max_object_bytes`, and passed to the origin otherwise.
    fn forward_unstored(
        self: &Arc<Self>,
        mut fetched: Fetched,
        head: response::Parts,
        body: Incoming,
    ) -> Step {
        count(fetched.decision);
        fetched.fetch.abandon_flight();
        let max_object = fetched.fetch.exchange.config().cache.max_object_bytes;
        let length = content_length(&head.headers).filter(|n| *n <= max_object);
        if fetched.ranges.is_some() && length.is_none() {
            drop(body);
            let reason = fetched.decision.not_stored();
            return Step::PassRange(fetched.fetch.exchange, reason);
        }
        let body = OriginStream::new(body, fetched.idle_timeout(), None, fetched.origin_bytes());
        let response = match (&fetched.ranges, length) {
            (Some(ranges), Some(length)) => {
                respond::ranged(head, WholeBody::Streaming(body), length, ranges)
            }
            _ => self.client_response(&fetched.fetch.exchange, head, body),
        };
        Step::Done(fetched.answer(response))
    }

    /// A storable response, captured as it streams to the client: stored when admitted, and
    /// handed to the requests waiting on the flight.
    async fn forward_storable(
        self: &Arc<Self>,
        mut fetched: Fetched,
        head: response::Parts,
        body: Incoming,
        storable: Storable,
    ) -> Step {
        let content_length = storable.content_length;
        let capture = self.capture(&mut fetched, &head, storable);
        let idle_timeout = fetched.idle_timeout();
        if body.is_end_stream() {
            // An empty body: hyper never polls a body it knows to be empty, so complete it here.
            count(fetched.decision);
            capture.complete_with(Bytes::new());
            let body = OriginStream::new(body, idle_timeout, None, fetched.origin_bytes());
            let response = self.client_response(&fetched.fetch.exchange, head, body);
            return Step::Done(fetched.answer(response));
        }
        let stores = fetched.decision.segment().is_some();
        if content_length.is_none() && (stores || fetched.ranges.is_some()) {
            let body = OriginStream::new(body, idle_timeout, None, fetched.origin_bytes());
            return self.forward_read_first(fetched, head, body, capture).await;
        }
        count(fetched.decision);
        let body = OriginStream::new(body, idle_timeout, Some(capture), fetched.origin_bytes());
        if let (Some(ranges), Some(length)) = (&fetched.ranges, content_length) {
            let response = respond::ranged(head, WholeBody::Streaming(body), length, ranges);
            return Step::Done(fetched.answer(response));
        }
        let response = self.client_response(&fetched.fetch.exchange, head, body);
        Step::Done(fetched.answer(response))
    }

    /// A storable body of unknown length, read up to the decision's limit before the head goes
    /// out: so that `stored` in Cache-Status is true when sent, and so that a range is cut only
    /// from a whole that the cache would have read anyway. A body over the limit is not stored,
    /// and its range is passed to the origin.
    async fn forward_read_first(
        self: &Arc<Self>,
        mut fetched: Fetched,
        mut head: response::Parts,
        body: OriginStream,
        capture: Capture,
    ) -> Step {
        match body.read_up_to(fetched.limit).await {
            Ok(Prefix::Whole(body)) => {
                count(fetched.decision);
                capture.complete_with(body.clone());
                if let Some(ranges) = &fetched.ranges {
                    let length = body.len() as u64;
                    let response = respond::ranged(head, WholeBody::Whole(body), length, ranges);
                    return Step::Done(fetched.answer(response));
                }
                let body = match fetched.fetch.exchange.is_head() {
                    true => {
                        head.headers.remove(header::TRANSFER_ENCODING);
                        record_read_length(head.status, &mut head.headers, body.len());
                        respond::empty()
                    }
                    false => respond::full(body),
                };
                Step::Done(fetched.answer(Response::from_parts(head, body)))
            }
            Ok(Prefix::TooLarge(body)) => {
                fetched.decision = fetched.decision.too_large();
                count(fetched.decision);
                capture.abandon();
                if fetched.ranges.is_some() {
                    drop(body);
                    let reason = fetched.decision.not_stored();
                    return Step::PassRange(fetched.fetch.exchange, reason);
                }
                let response = self.client_response(&fetched.fetch.exchange, head, body);
                Step::Done(fetched.answer(response))
            }
            Err(error) => {
                let fwd = fetched.fetch.fwd;
                Step::Done(respond::origin_failed(error.failure(), fwd).answered_by(fetched.origin))
            }
        }
    }

    /// The capture of a storable body: once the origin has sent all of it, the store phase runs
    /// on it (see `store.rs`).
    fn capture(
        self: &Arc<Self>,
        fetched: &mut Fetched,
        head: &response::Parts,
        storable: Storable,
    ) -> Capture {
        let expected = storable.content_length;
        let write = StoreWrite::new(self, fetched, head, storable);
        Capture::new(
            expected,
            fetched.limit,
            Box::new(move |body| write.store(body)),
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
}

/// Counts an admission decision once it is final (a body of unknown length may turn out too
/// large for the segment it was meant for).
fn count(decision: Decision) {
    series().admission(decision.label()).increment(1);
}
