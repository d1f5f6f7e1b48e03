//! Ranged first contact: on a route that slices, a GET for an object the cache does not know is
//! asked of the origin as the range of one slice (the first, or the one the client's own range
//! starts in), so that a large object's first answer is a slice rather than a whole body dropped
//! once its length is seen.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Response, StatusCode};
use hyper::body::Incoming;

use super::known::{Known, SlicedObject};
use super::revalidate::is_fresh;
use super::slicing;
use crate::cache::policy as cache_policy;
use crate::cache::slice::{ContentRange, slice_bounds, slice_key};
use crate::cache::{ResponseControl, storability};
use crate::proxy::Proxy;
use crate::proxy::outcome::served::{Fwd, OriginHead};
use crate::proxy::request::Step;
use crate::proxy::request::exchange::Exchange;
use crate::proxy::request::fetch::Fetch;
use crate::proxy::response::headers::{content_length, strip_hop_by_hop};
use crate::proxy::response::range::Ranges;
use crate::telemetry::{SliceEvent, series};

impl Proxy {
    /// The `Range` of the slice a first contact asks for, when `fetch` is one: a GET miss on a
    /// route that slices, for an object neither stored nor known as sliced or answered whole. The
    /// slice the client's own range starts in ([`first_index`]): its answer tells the object's
    /// length, and the client's range is then cut from the whole or from the slices it touches.
    pub(in crate::proxy::request) fn first_slice_range(
        &self,
        fetch: &Fetch,
    ) -> Option<(u64, HeaderValue)> {
        let exchange = &fetch.exchange;
        let (_, slice_bytes) = slicing(exchange)?;
        let unknown = fetch.stale.is_none()
            && fetch.fwd == Fwd::Miss
            && exchange.parts.method == Method::GET
            && !self.sliced.is_whole(&exchange.key)
            && cache_policy::no_store(&exchange.routed.policy, &exchange.parts).is_none();
        if !unknown {
            return None;
        }
        let index = first_index(exchange, slice_bytes);
        Some((index, slice_range(index, slice_bytes)?))
    }

    /// The object `exchange` asks for as its stored first slice describes it, when one is
    /// stored and fresh (in RAM, or on disk from before a restart): learnt sliced again without
    /// asking the origin.
    pub(in crate::proxy::request) async fn sliced_from_first_slice(
        &self,
        exchange: &Exchange,
    ) -> Option<Arc<SlicedObject>> {
        let (_, slice_bytes) = slicing(exchange)?;
        let entry = self
            .stored_slice(exchange, &slice_key(&exchange.key, 0))
            .await
            .filter(|entry| is_fresh(entry))?;
        let headers = entry.headers();
        let total = ContentRange::of(&headers)?.total;
        let object = SlicedObject::of(&headers, total, slice_bytes, &exchange.parts.headers)?;
        // The slice does not say which request fields it was stored for: a varying object is
        // learnt from its origin again.
        if object.varies() || !object.holds(&entry, &slice_bounds(0, slice_bytes, total)) {
            return None;
        }
        let object = Arc::new(object);
        let known = Known::Sliced(Arc::clone(&object));
        self.sliced.remember(exchange.key.clone(), known);
        Some(object)
    }

    /// The origin's answer to a first contact that asked for slice `index`, as the request goes
    /// on: a 206 of a larger object is that slice (the object is learnt sliced, the slice
    /// admitted as any slice), a 206 of the whole object is the 200 it stands for, a 200 is the
    /// whole object (above `slice_above`, its origin is counted as ignoring ranges and not asked
    /// in slices), a 416 to a slice past the end is asked again as the first slice, a 416 to the
    /// first or an unusable 206 is asked again without the range, and anything else is answered
    /// as a plain GET's would be.
    pub(in crate::proxy::request) async fn first_contact(
        &self,
        mut fetch: Fetch,
        response: Response<Incoming>,
        origin: OriginHead,
        index: u64,
    ) -> Step {
        let Some((above, slice_bytes)) = slicing(&fetch.exchange) else {
            return Step::Response(fetch, response, origin);
        };
        match response.status() {
            StatusCode::PARTIAL_CONTENT => {}
            StatusCode::OK => {
                if content_length(response.headers()).is_some_and(|total| total > above) {
                    series().slice(SliceEvent::NotRanged).increment(1);
                    let key = fetch.exchange.key.clone();
                    self.sliced.remember(key, Known::Whole);
                }
                return Step::Response(fetch, response, origin);
            }
            // The client's range starts past the object's end: its first slice tells the length
            // (and the client's range is judged against it), as for a client that asked none.
            StatusCode::RANGE_NOT_SATISFIABLE if index > 0 => {
                return Box::pin(self.ask_the_first_slice(fetch)).await;
            }
            // An empty object has no first byte; the client never asked for this range, so it
            // never sees the 416.
            StatusCode::RANGE_NOT_SATISFIABLE => return plainly(fetch).await,
            _ => return Step::Response(fetch, response, origin),
        }
        let (mut head, body) = response.into_parts();
        let asked = index * slice_bytes;
        let Some(range) = ContentRange::of(&head.headers).filter(|range| range.first == asked)
        else {
            tracing::warn!(key = %fetch.exchange.key, "first slice answered with another range");
            return plainly(fetch).await;
        };
        if range.total <= slice_bytes {
            if asked != 0 || range.bytes() != (0..range.total) {
                return plainly(fetch).await;
            }
            // The whole object: answered, and stored if admitted, as the 200 it stands for.
            head.status = StatusCode::OK;
            head.headers.remove(header::CONTENT_RANGE);
            return Step::Response(fetch, Response::from_parts(head, body), origin);
        }
        // Above one slice: sliced, even at or below `slice_above` (see docs/caching.md).
        let Some(object) = sliceable(&fetch.exchange, &head.headers, range.total, slice_bytes)
        else {
            return plainly(fetch).await;
        };
        let key = fetch.exchange.key.clone();
        self.sliced
            .remember(key.clone(), Known::Sliced(Arc::clone(&object)));
        let first = slice_key(&key, index);
        let taken = self
            .take_slice(&fetch.exchange, &object, index, &first, head, body)
            .await;
        // Its waiters find the object sliced, and the slice stored if it was admitted.
        fetch.abandon_flight();
        match taken {
            Ok((entry, _)) => {
                let held = Some((index, entry.body.clone()));
                Step::Slices(fetch.exchange, object, held)
            }
            Err(error) => {
                tracing::warn!(%error, %key, "first slice not taken");
                self.forget_slices(&key);
                plainly(fetch).await
            }
        }
    }
}

impl Proxy {
    /// A first contact asked again for the object's first slice.
    async fn ask_the_first_slice(&self, fetch: Fetch) -> Step {
        let range = slicing(&fetch.exchange).and_then(|(_, bytes)| slice_range(0, bytes));
        match send_again(fetch, range.as_ref()).await {
            Ok((fetch, response, origin)) => self.first_contact(fetch, response, origin, 0).await,
            Err(failed) => failed,
        }
    }
}

/// The `Range` of slice `index` of `slice_bytes`.
fn slice_range(index: u64, slice_bytes: u64) -> Option<HeaderValue> {
    let first = index * slice_bytes;
    let range = format!("bytes={first}-{}", first + slice_bytes - 1);
    HeaderValue::from_maybe_shared(Bytes::from(range)).ok()
}

/// The slice a first contact asks for: the one holding the first byte of the client's own range
/// when it asks for one `first-last` or `first-` range, else the first. A suffix or several
/// ranges start the object at its first slice, as a whole GET does.
fn first_index(exchange: &Exchange, slice_bytes: u64) -> u64 {
    let mut ranges = exchange.parts.headers.get_all(header::RANGE).iter();
    let start = match (ranges.next(), ranges.next()) {
        (Some(value), None) => Ranges::parse(value.as_bytes()).and_then(|r| r.single_start()),
        _ => None,
    };
    // A start so near the largest number that its slice's end overflows names no real object.
    start
        .filter(|start| start.checked_add(slice_bytes).is_some())
        .map_or(0, |start| start / slice_bytes)
}

/// The object a first slice's `headers` describe, when it is stored as the whole 200 would be
/// and has a validator that tells its versions apart.
fn sliceable(
    exchange: &Exchange,
    headers: &http::HeaderMap,
    total: u64,
    slice_bytes: u64,
) -> Option<Arc<SlicedObject>> {
    let mut headers = headers.clone();
    strip_hop_by_hop(&mut headers);
    let policy = &exchange.routed.policy;
    cache_policy::prepare_response(policy, &mut headers);
    let control = ResponseControl::of(&headers, &exchange.config().cache.targeted_fields);
    let (control, _) = cache_policy::read_control(policy, StatusCode::OK, &headers, control);
    let request_headers = cache_policy::storing_request_headers(policy, &exchange.parts.headers);
    storability(&request_headers, StatusCode::OK, &headers, &control).ok()?;
    SlicedObject::of(&headers, total, slice_bytes, &request_headers).map(Arc::new)
}

/// The fetch asked again of the origin without a range, its answer on to the response phase.
async fn plainly(fetch: Fetch) -> Step {
    match send_again(fetch, None).await {
        Ok((fetch, response, origin)) => Step::Response(fetch, response, origin),
        Err(failed) => failed,
    }
}

/// The fetch asked again of the origin, unconditionally, with `range` if given; a failure is the
/// answer it gets.
async fn send_again(
    fetch: Fetch,
    range: Option<&HeaderValue>,
) -> Result<(Fetch, Response<Incoming>, OriginHead), Step> {
    let asked = Instant::now();
    match fetch.send(false, range).await {
        Ok(response) => {
            let origin = OriginHead::of(&response, asked);
            Ok((fetch, response, origin))
        }
        Err(error) => {
            tracing::warn!(%error, key = %fetch.exchange.key, "origin request failed");
            Err(Step::Done(fetch.fail(error.failure())))
        }
    }
}
