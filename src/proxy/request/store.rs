//! The store phase: a captured body, complete, becomes a stored entry when admission placed it
//! (in probation or main), and the requests waiting on the flight get it either way.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::header::HeaderMap;
use http::{StatusCode, response};

use super::coalesce::{Flight, FlightOutcome, SharedResponse};
use super::decision::{Decision, Storable};
use super::forward::Fetched;
use crate::cache::{CacheKey, ResponseControl, StoredResponse, varied_request_fields};
use crate::proxy::Proxy;
use crate::proxy::outcome::served::Detail;
use crate::proxy::response::headers::record_read_length;

/// What the store phase needs of a fetch whose response is storable: taken from the response
/// phase when the body starts streaming, run when the origin has sent all of it (and never for a
/// body cut short).
pub(super) struct StoreWrite {
    proxy: Arc<Proxy>,
    key: CacheKey,
    /// The request fields the response varies on, as the stored entry keeps them.
    request_headers: HeaderMap,
    status: StatusCode,
    headers: HeaderMap,
    control: ResponseControl,
    decision: Decision,
    flight: Option<Flight>,
}

impl StoreWrite {
    /// The write for `fetched`'s storable response `head`; takes the flight it leads.
    pub(super) fn new(
        proxy: &Arc<Proxy>,
        fetched: &mut Fetched,
        head: &response::Parts,
        storable: Storable,
    ) -> StoreWrite {
        let exchange = &fetched.fetch.exchange;
        StoreWrite {
            proxy: Arc::clone(proxy),
            key: exchange.key.clone(),
            request_headers: varied_request_fields(&exchange.parts.headers, &head.headers),
            status: head.status,
            headers: head.headers.clone(),
            control: storable.control,
            decision: fetched.decision,
            flight: fetched.fetch.flight.take(),
        }
    }

    /// Stores the complete `body` where the decision placed it, and answers the waiting requests.
    pub(super) fn store(mut self, body: Bytes) {
        record_read_length(self.status, &mut self.headers, body.len());
        let entry = StoredResponse::with_control(
            self.status,
            self.headers,
            body,
            &self.request_headers,
            &self.control,
            SystemTime::now(),
        );
        let detail = Detail::of_decision(self.decision);
        let shared = match self.decision.segment() {
            Some(segment) => {
                let entry = self.proxy.store.insert(self.key, entry, segment);
                SharedResponse::new(entry, true, detail)
            }
            None => SharedResponse::new(Arc::new(entry), false, detail),
        };
        if let Some(flight) = self.flight {
            flight.finish(FlightOutcome::Response(shared));
        }
    }
}
