//! The slices phase: a large object (above `slice_above`, the route's or `[cache]`'s) answered
//! from aligned slices. Each slice is fetched with `Range`, keyed as the object's key plus its
//! index, coalesced and admitted on its own; the answer (200, 206, 304 or 416) is assembled in
//! order as the slices arrive, and every slice in it is of the version the object was known by.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode, response};
use hyper::body::Incoming;

mod first;
mod hits;
mod known;
mod read;
mod revalidate;
mod stored;

use known::Known;
pub(crate) use known::{SlicedObject, SlicedObjects};
use read::read_slice;
use revalidate::is_fresh;

use super::Step;
use super::coalesce::{self, FlightOutcome, Role, SharedResponse};
use super::exchange::Exchange;
use super::fetch::Fetch;
use crate::cache::policy as cache_policy;
use crate::cache::slice::{
    ContentRange, Version, slice_bounds, slice_count, slice_key, slices_covering,
};
use crate::cache::{CacheKey, ResponseControl, StoredResponse, storability};
use crate::proxy::Proxy;
use crate::proxy::outcome::served::{Fwd, Served};
use crate::proxy::response::assembled::{AssembledBody, Parts};
use crate::proxy::response::headers::{ResponseFraming, content_length, not_modified};
use crate::proxy::response::range::{self, Piece, Ranges, Selection};
use crate::proxy::response::respond::{self, Answer};
use crate::proxy::upstream::origin::OriginFailure;
use crate::telemetry::{SliceEvent, series};

/// Why a slice could not be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SliceError {
    #[error("origin failed for slice {index}: {failure:?}")]
    Origin { index: u64, failure: OriginFailure },
    #[error("origin answered the range of slice {index} with the whole object")]
    NotRanged { index: u64 },
    #[error("origin answered slice {index} with status {status}")]
    Status { index: u64, status: StatusCode },
    #[error("origin answered slice {index} (bytes {expected:?}) with Content-Range {got:?}")]
    WrongRange {
        index: u64,
        expected: Range<u64>,
        got: Option<HeaderValue>,
    },
    #[error("origin answered slice {index} (bytes {expected:?}) with a body of {got} bytes")]
    WrongLength {
        index: u64,
        expected: Range<u64>,
        got: u64,
    },
    #[error("slice {index} is of another version of the object")]
    Changed {
        index: u64,
        /// The object as the changed slice describes it, when it names a version.
        now: Option<Arc<SlicedObject>>,
    },
}

/// The slice threshold and size of `exchange`'s route: its own, else `[cache]`'s; `None` when
/// nothing is sliced.
fn slicing(exchange: &Exchange) -> Option<(u64, u64)> {
    let cache = &exchange.config().cache;
    let policy = &exchange.routed.policy;
    let above = policy.slice_above.or(cache.slice_above)?;
    Some((above, policy.slice_bytes.unwrap_or(cache.slice_bytes)))
}

/// What an answer from slices sends: its head, its body as pieces of the object and framing,
/// and the body's length; or an answer with no slice in it.
enum Plan {
    Slices {
        head: response::Parts,
        pieces: Vec<Piece>,
        length: u64,
    },
    /// Boxed: a response is several times the size of the other variant.
    Answer(Box<Response<respond::ProxyBody>>),
}

/// The answer `exchange` asks of `object`: a 304 for a matching conditional, a head for HEAD, a
/// 416 for a range outside it, else the whole 200 or the 206 of its range (RFC 9110 sections
/// 13.2.2 and 14).
fn plan(exchange: &Exchange, object: &SlicedObject) -> Plan {
    let parts = &exchange.parts;
    let headers = &object.headers;
    if not_modified(&parts.headers, headers) {
        return Plan::Answer(Box::new(respond::not_modified_response(headers)));
    }
    let (mut head, ()) = Response::new(()).into_parts();
    head.headers = headers.clone();
    if exchange.is_head() {
        return Plan::Answer(Box::new(Response::from_parts(head, respond::empty())));
    }
    let total = object.total();
    let selection = match Ranges::requested(parts, StatusCode::OK, headers) {
        Some(ranges) => ranges.select(total, headers.get(header::CONTENT_TYPE)),
        None => Selection::Whole,
    };
    match selection {
        Selection::Whole => Plan::Slices {
            head,
            pieces: vec![Piece::Source(0..total)],
            length: total,
        },
        Selection::Unsatisfiable => {
            let mut response = Response::new(respond::empty());
            *response.status_mut() = StatusCode::RANGE_NOT_SATISFIABLE;
            response
                .headers_mut()
                .insert(header::CONTENT_RANGE, range::unsatisfied_range(total));
            Plan::Answer(Box::new(response))
        }
        Selection::Partial(partial) => {
            head.status = StatusCode::PARTIAL_CONTENT;
            partial.describe(&mut head.headers);
            let length = partial.length();
            Plan::Slices {
                head,
                pieces: partial.into_pieces(),
                length,
            }
        }
    }
}

/// The slices `pieces` touch, in order, each once.
fn touched(pieces: &[Piece], slice_bytes: u64) -> Vec<u64> {
    let mut slices: Vec<u64> = Vec::new();
    for piece in pieces {
        if let Piece::Source(bytes) = piece {
            for index in slices_covering(bytes, slice_bytes) {
                if slices.last() != Some(&index) {
                    slices.push(index);
                }
            }
        }
    }
    slices
}

impl Proxy {
    /// The object to slice, when the origin's `head` for `fetch` is a storable 200 above the
    /// route's `slice_above` with a validator: remembered, so that its next requests go to the
    /// slices phase from the lookup.
    pub(super) fn slice_instead(
        &self,
        fetch: &Fetch,
        head: &response::Parts,
        control: &ResponseControl,
        framing: ResponseFraming,
    ) -> Option<Arc<SlicedObject>> {
        let exchange = &fetch.exchange;
        let (above, slice_bytes) = slicing(exchange)?;
        let total = content_length(&head.headers).filter(|total| *total > above)?;
        if head.status != StatusCode::OK
            || framing != ResponseFraming::Clear
            || fetch.stale.is_some()
            || self.sliced.is_whole(&exchange.key)
        {
            return None;
        }
        let policy = &exchange.routed.policy;
        let request_headers =
            cache_policy::storing_request_headers(policy, &exchange.parts.headers);
        storability(&request_headers, head.status, &head.headers, control).ok()?;
        if cache_policy::no_store(policy, &exchange.parts).is_some() {
            return None;
        }
        let object = SlicedObject::of(&head.headers, total, slice_bytes, &request_headers)?;
        let object = Arc::new(object);
        let known = Known::Sliced(Arc::clone(&object));
        self.sliced.remember(exchange.key.clone(), known);
        Some(object)
    }

    /// The sliced object `exchange` asks for, when it is one, its route still slices it so and
    /// its variant answers the request.
    pub(super) fn sliced_object(&self, exchange: &Exchange) -> Option<Arc<SlicedObject>> {
        let (_, slice_bytes) = slicing(exchange)?;
        self.sliced.sliced(&exchange.key).filter(|object| {
            object.slice_bytes == slice_bytes && object.answers(&exchange.parts.headers)
        })
    }

    /// Removes a sliced object's slices, in RAM and on disk; whether it was sliced.
    pub(crate) fn forget_slices(&self, key: &CacheKey) -> bool {
        let Some(object) = self.sliced.forget(key) else {
            return false;
        };
        for index in 0..slice_count(object.total(), object.slice_bytes) {
            let slice = slice_key(key, index);
            self.store.purge(&slice);
            if let Some(disk) = &self.disk {
                disk.remove(&slice);
            }
        }
        true
    }

    /// The slices phase: the answer `exchange` asks of `object`, its first slice had before the
    /// head is sent (so that an object changed since it was learnt is answered whole from its
    /// new version), the rest sent as they arrive; `held` is a slice already fetched. A slice of
    /// another version met later ends the body early: the client never gets bytes of two
    /// versions.
    pub(super) async fn serve_slices(
        self: &Arc<Self>,
        exchange: Exchange,
        mut object: Arc<SlicedObject>,
        mut held: Option<(u64, Bytes)>,
    ) -> Step {
        // A changed object is learnt again once; changing again at once is an error.
        let mut relearnt = false;
        loop {
            let (head, pieces, length) = match plan(&exchange, &object) {
                Plan::Answer(response) => {
                    return Step::Done(Answer::new(*response, Served::Sliced { hits: 0, of: 0 }));
                }
                Plan::Slices {
                    head,
                    pieces,
                    length,
                } => (head, pieces, length),
            };
            let slices = touched(&pieces, object.slice_bytes);
            let Some(&first) = slices.first() else {
                let response = Response::from_parts(head, respond::empty());
                return Step::Done(Answer::new(response, Served::Sliced { hits: 0, of: 0 }));
            };
            let fetched = held.as_ref().map(|(index, _)| *index);
            let hits = self.slice_hits(&exchange.key, &slices, fetched);
            let of = slices.len() as u64;
            let had = match held.take() {
                Some((index, bytes)) if index == first => Ok(bytes),
                _ => self.slice(&exchange, &object, first).await,
            };
            match had {
                Ok(bytes) => {
                    let (parts, body) = AssembledBody::channel(length);
                    let proxy = Arc::clone(self);
                    let first = (first, bytes);
                    tokio::spawn(async move {
                        proxy
                            .send_slices(&exchange, &object, pieces, first, parts)
                            .await;
                    });
                    let response = Response::from_parts(head, respond::assembled(body));
                    return Step::Done(Answer::new(response, Served::Sliced { hits, of }));
                }
                Err(SliceError::Changed {
                    now: Some(now),
                    index,
                }) if !relearnt => {
                    tracing::info!(key = %exchange.key, index, "sliced object changed; its slices dropped");
                    self.forget_slices(&exchange.key);
                    self.sliced
                        .remember(exchange.key.clone(), Known::Sliced(Arc::clone(&now)));
                    object = now;
                    relearnt = true;
                }
                Err(SliceError::NotRanged { .. }) => {
                    // Streamed whole from now on, as any large object: this request too.
                    self.forget_slices(&exchange.key);
                    self.sliced.remember(exchange.key.clone(), Known::Whole);
                    return Step::Coalesce(Fetch::new(exchange, Fwd::Miss, None));
                }
                Err(error) => {
                    tracing::warn!(%error, key = %exchange.key, "slice not served");
                    let failure = match error {
                        SliceError::Origin { failure, .. } => failure,
                        _ => {
                            self.forget_slices(&exchange.key);
                            OriginFailure::Error
                        }
                    };
                    return Step::Done(respond::origin_failed(failure, Fwd::Miss));
                }
            }
        }
    }

    /// Sends `pieces` of `object` down `parts` in order, each slice got when it is needed; `first`
    /// is the first slice, already had. Stops when the client is gone.
    async fn send_slices(
        self: &Arc<Self>,
        exchange: &Exchange,
        object: &SlicedObject,
        pieces: Vec<Piece>,
        first: (u64, Bytes),
        parts: Parts,
    ) {
        let mut held = Some(first);
        for piece in pieces {
            let bytes = match piece {
                Piece::Framing(framing) => {
                    if parts.send(Ok(framing)).await.is_err() {
                        return;
                    }
                    continue;
                }
                Piece::Source(bytes) => bytes,
            };
            for index in slices_covering(&bytes, object.slice_bytes) {
                let slice = match held.take() {
                    Some((at, slice)) if at == index => slice,
                    _ => match self.slice(exchange, object, index).await {
                        Ok(slice) => slice,
                        Err(error) => {
                            tracing::warn!(%error, key = %exchange.key, "sliced body ended early");
                            if !matches!(error, SliceError::Origin { .. }) {
                                self.forget_slices(&exchange.key);
                            }
                            let _ = parts.send(Err(Box::new(error))).await;
                            return;
                        }
                    },
                };
                let bounds = slice_bounds(index, object.slice_bytes, object.total());
                let from = bytes.start.max(bounds.start) - bounds.start;
                let to = bytes.end.min(bounds.end) - bounds.start;
                let part = slice.slice(offset(from)..offset(to));
                // The next part of a multipart answer may start in this slice.
                held = Some((index, slice));
                if parts.send(Ok(part)).await.is_err() {
                    return;
                }
            }
        }
    }

    /// Slice `index` of `object`: stored (RAM, then disk) and of its version, else fetched, once
    /// for all the requests that want it at the same time.
    async fn slice(
        &self,
        exchange: &Exchange,
        object: &SlicedObject,
        index: u64,
    ) -> Result<Bytes, SliceError> {
        let key = slice_key(&exchange.key, index);
        let bounds = slice_bounds(index, object.slice_bytes, object.total());
        let stored = self
            .stored_slice(exchange, &key)
            .await
            .filter(|entry| object.holds(entry, &bounds));
        let stale = match stored {
            Some(entry) if is_fresh(&entry) => {
                series().slice(SliceEvent::Hit).increment(1);
                return Ok(entry.body.clone());
            }
            Some(entry) => match self.refreshed_as_validated(exchange, object, &key, &entry) {
                Some(refreshed) => {
                    series().slice(SliceEvent::Hit).increment(1);
                    return Ok(refreshed.body.clone());
                }
                None => Some(entry),
            },
            None => None,
        };
        let stale = stale.as_deref();
        let slot = match self.flights.join(&key) {
            Role::Leader(flight) => {
                let fetched = self.fetch_slice(exchange, object, index, &key, stale).await;
                match &fetched {
                    Ok((entry, stored)) => {
                        let shared = SharedResponse::new(Arc::clone(entry), *stored, None);
                        flight.finish(FlightOutcome::Response(shared));
                    }
                    Err(_) => flight.abandon(),
                }
                return fetched.map(|(entry, _)| entry.body.clone());
            }
            Role::Follower(slot) => slot,
        };
        let origin = &exchange.config().origin;
        let patience = origin.first_byte_timeout + origin.idle_timeout;
        let outcome = tokio::time::timeout(patience, coalesce::wait(slot))
            .await
            .unwrap_or(FlightOutcome::FetchAlone);
        if let FlightOutcome::Response(shared) = outcome
            && object.holds(&shared.entry, &bounds)
        {
            return Ok(shared.entry.body.clone());
        }
        let (entry, _) = self
            .fetch_slice(exchange, object, index, &key, stale)
            .await?;
        Ok(entry.body.clone())
    }

    /// Slice `index` of `object` from the origin, checked to be that slice of that version, and
    /// stored where the doorkeeper places it: with whether it was stored. With the `stale` slice
    /// stored, the request is conditional on the object's validator, and a 304 refreshes it.
    async fn fetch_slice(
        &self,
        exchange: &Exchange,
        object: &SlicedObject,
        index: u64,
        key: &CacheKey,
        stale: Option<&StoredResponse>,
    ) -> Result<(Arc<StoredResponse>, bool), SliceError> {
        let bounds = slice_bounds(index, object.slice_bytes, object.total());
        let range = HeaderValue::from_maybe_shared(Bytes::from(format!(
            "bytes={}-{}",
            bounds.start,
            bounds.end - 1
        )))
        .ok();
        let condition = stale.map(|_| object.condition());
        let live = &exchange.live;
        // Keyed by the object: every slice of it goes to the same server of the group.
        let sent = live
            .origin
            .send_idempotent(&exchange.routed.group, exchange.key.as_str(), |server| {
                let mut request = exchange.fetch_request(None, server);
                if let Some(range) = &range {
                    request.headers_mut().insert(header::RANGE, range.clone());
                }
                if let Some((name, value)) = &condition {
                    request.headers_mut().insert(name.clone(), value.clone());
                }
                request
            })
            .await
            .map_err(|error| SliceError::Origin {
                index,
                failure: error.failure(),
            })?;
        let (head, body) = sent.into_parts();
        match (head.status, stale) {
            (StatusCode::PARTIAL_CONTENT, _) => {}
            (StatusCode::NOT_MODIFIED, Some(entry)) => {
                return self.slice_not_modified(exchange, object, key, entry, head.headers, index);
            }
            (StatusCode::OK, _) => {
                series().slice(SliceEvent::NotRanged).increment(1);
                return Err(SliceError::NotRanged { index });
            }
            (status, _) => return Err(SliceError::Status { index, status }),
        }
        self.take_slice(exchange, object, index, key, head, body)
            .await
    }

    /// Slice `index` of `object` from the origin's 206 (`head` and `body`), checked to be that
    /// slice of that version, and stored where the doorkeeper places it: with whether it was.
    async fn take_slice(
        &self,
        exchange: &Exchange,
        object: &SlicedObject,
        index: u64,
        key: &CacheKey,
        mut head: response::Parts,
        body: Incoming,
    ) -> Result<(Arc<StoredResponse>, bool), SliceError> {
        let bounds = slice_bounds(index, object.slice_bytes, object.total());
        crate::proxy::response::headers::strip_hop_by_hop(&mut head.headers);
        let policy = &exchange.routed.policy;
        cache_policy::prepare_response(policy, &mut head.headers);
        let wrong_range = |headers: &HeaderMap| {
            series().slice(SliceEvent::WrongRange).increment(1);
            SliceError::WrongRange {
                index,
                expected: bounds.clone(),
                got: headers.get(header::CONTENT_RANGE).cloned(),
            }
        };
        let Some(content_range) = ContentRange::of(&head.headers) else {
            return Err(wrong_range(&head.headers));
        };
        if Version::of(&head.headers, content_range.total).as_ref() != Some(&object.version) {
            series().slice(SliceEvent::Changed).increment(1);
            let now = SlicedObject::of(
                &head.headers,
                content_range.total,
                object.slice_bytes,
                &exchange.parts.headers,
            );
            return Err(SliceError::Changed {
                index,
                now: now.map(Arc::new),
            });
        }
        if content_range.bytes() != bounds {
            return Err(wrong_range(&head.headers));
        }
        let body = read_slice(exchange, body, index, bounds).await?;
        series().slice_origin_bytes.increment(body.len() as u64);
        self.admit_slice(exchange, key, head.headers, body).await
    }
}

/// An offset within a slice, which is in memory and so fits a `usize`.
fn offset(within_slice: u64) -> usize {
    usize::try_from(within_slice).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multipart_answer_touches_each_slice_once_in_order() {
        let pieces = [
            Piece::Framing(Bytes::from_static(b"--b\r\n")),
            Piece::Source(10..20),
            Piece::Framing(Bytes::from_static(b"--b\r\n")),
            Piece::Source(30..2100),
        ];
        assert_eq!(touched(&pieces, 1024), vec![0, 1, 2]);
    }
}
