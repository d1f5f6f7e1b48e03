//! The pass phase: a request the cache does not answer (another method, or a range it will not
//! cut) goes to the origin, and its answer streams back as it is, never stored.

use std::time::Instant;

use http::Response;
use hyper::body::Incoming;

use super::Step;
use super::body::RequestBody;
use super::exchange::Exchange;
use crate::cache::NotStored;
use crate::proxy::Proxy;
use crate::proxy::outcome::served::{Detail, Fwd, OriginHead, Served};
use crate::proxy::response::headers::{settle_response_framing, strip_hop_by_hop};
use crate::proxy::response::respond::{self, Answer};
use crate::proxy::response::stream::OriginStream;
use crate::proxy::upstream::origin::{OriginError, OriginFailure};

impl Proxy {
    /// Forwards a request the cache does not answer (other methods), streaming both ways.
    pub(super) async fn pass(
        &self,
        exchange: Exchange,
        body: RequestBody,
        fwd: Fwd,
        detail: Option<Detail>,
    ) -> Step {
        let asked = Instant::now();
        let response = exchange
            .live
            .origin
            .send_once(&exchange.routed.group, exchange.key.as_str(), |server| {
                exchange.pass_request(body, server)
            })
            .await;
        Step::Done(self.passed(exchange, response, asked, fwd, detail))
    }

    /// Passes a GET's range to the origin, when the cache will not cut it from the whole object:
    /// too large, not storable (`reason` says why), or given up by the fetch it waited for. The
    /// origin's answer, a 206 or 416 included, is forwarded as it is and never stored.
    pub(super) async fn pass_range(&self, exchange: Exchange, reason: Option<NotStored>) -> Step {
        let asked = Instant::now();
        let response = exchange
            .live
            .origin
            .send_idempotent(&exchange.routed.group, exchange.key.as_str(), |server| {
                exchange.range_request(server)
            })
            .await;
        let detail = reason.map(Detail::NotStored);
        Step::Done(self.passed(exchange, response, asked, Fwd::Bypass, detail))
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
        let idle_timeout = exchange.config().origin.idle_timeout;
        let bytes = exchange.routed.series.origin_bytes.clone();
        let body = OriginStream::new(incoming, idle_timeout, None, bytes);
        let response = Response::from_parts(head, respond::streamed(body));
        Answer::new(response, Served::Bypass { fwd, detail }).answered_by(origin)
    }
}
