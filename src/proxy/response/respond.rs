//! Responses the proxy builds itself: from a stored entry, from a coalesced fetch, a 304 for a
//! client's conditional, the part of a whole body a range asks for, and its own short error
//! answers.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::request::Parts;
use http::{Method, Response, StatusCode, response};
use http_body_util::{Either, Full};

use crate::cache::StoredResponse;
use crate::proxy::outcome::served::{Fwd, OriginHead, Served, Tier};
use crate::proxy::response::assembled::AssembledBody;
use crate::proxy::response::headers::{not_modified, not_modified_headers};
use crate::proxy::response::range::{self, Ranges, Selection};
use crate::proxy::response::shared::SharedResponse;
use crate::proxy::response::slice::SlicedStream;
use crate::proxy::response::stored_head::StoredHead;
use crate::proxy::response::stream::OriginStream;
use crate::proxy::upstream::origin::OriginFailure;

/// The body of every response the proxy sends: a body at hand (stored, or read whole), an origin
/// body on its way, the parts of one that a range asks for, or a large object's slices.
pub type ProxyBody = Either<Full<Bytes>, Either<OriginStream, Either<SlicedStream, AssembledBody>>>;

/// A response, what the cache served with it, and the origin's response head when the origin
/// was asked and answered.
pub struct Answer {
    pub response: Response<ProxyBody>,
    pub served: Served,
    pub origin: Option<OriginHead>,
}

impl Answer {
    pub fn new(response: Response<ProxyBody>, served: Served) -> Answer {
        Answer {
            response,
            served,
            origin: None,
        }
    }

    /// This answer, for a request the origin answered with `origin`.
    pub fn answered_by(self, origin: OriginHead) -> Answer {
        Answer {
            origin: Some(origin),
            ..self
        }
    }
}

pub fn empty() -> ProxyBody {
    http_body_util::Either::Left(Full::new(Bytes::new()))
}

pub fn full(body: Bytes) -> ProxyBody {
    Either::Left(Full::new(body))
}

pub fn streamed(body: OriginStream) -> ProxyBody {
    Either::Right(Either::Left(body))
}

pub fn assembled(body: AssembledBody) -> ProxyBody {
    Either::Right(Either::Right(Either::Right(body)))
}

/// A whole 200 body, at hand or still coming from the origin.
pub enum WholeBody {
    Whole(Bytes),
    Streaming(OriginStream),
}

/// The answer to a request for `ranges` of a 200 whose body is `length` bytes: 206 with the parts
/// (cut from the body at hand, or from the origin's as it streams), 416, or the whole body
/// (RFC 9110 section 14). A body still streaming that the client will not read is read on for
/// its capture.
pub fn ranged(
    mut head: response::Parts,
    body: WholeBody,
    length: u64,
    ranges: &Ranges,
) -> Response<ProxyBody> {
    head.headers
        .insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    let selection = ranges.select(length, head.headers.get(header::CONTENT_TYPE));
    let partial = match selection {
        Selection::Partial(partial) => partial,
        Selection::Whole => {
            let body = match body {
                WholeBody::Whole(bytes) => full(bytes),
                WholeBody::Streaming(stream) => streamed(stream),
            };
            return Response::from_parts(head, body);
        }
        Selection::Unsatisfiable => {
            if let WholeBody::Streaming(stream) = body {
                stream.finish_unread();
            }
            let mut response = Response::new(empty());
            *response.status_mut() = StatusCode::RANGE_NOT_SATISFIABLE;
            response
                .headers_mut()
                .insert(header::CONTENT_RANGE, range::unsatisfied_range(length));
            return response;
        }
    };
    head.status = StatusCode::PARTIAL_CONTENT;
    partial.describe(&mut head.headers);
    let body = match body {
        WholeBody::Whole(bytes) => full(partial.cut(&bytes)),
        WholeBody::Streaming(stream) => Either::Right(Either::Right(Either::Left(
            SlicedStream::new(stream, partial),
        ))),
    };
    Response::from_parts(head, body)
}

/// A stored entry (or a coalesced fetch's) as this request gets it: whole, without a body for
/// HEAD, or the part its `Range` asks for. A 200 says that ranges of it are served.
fn from_entry(parts: &Parts, entry: &StoredResponse, headers: HeaderMap) -> Response<ProxyBody> {
    let (mut head, ()) = Response::new(()).into_parts();
    head.status = entry.status;
    head.headers = headers;
    if entry.status == StatusCode::OK {
        head.headers
            .insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    }
    if parts.method == Method::HEAD {
        return Response::from_parts(head, empty());
    }
    match Ranges::requested(parts, entry.status, &head.headers) {
        Some(ranges) => {
            let length = entry.body.len() as u64;
            ranged(head, WholeBody::Whole(entry.body.clone()), length, &ranges)
        }
        None => {
            let mut response = Response::from_parts(head, full(entry.body.clone()));
            // The whole body, from a disk segment: a connection that can send it from the file
            // does (it checks that the body it would write is these very bytes).
            if let Some(file) = &entry.body_file {
                response.extensions_mut().insert(file.clone());
            }
            response
        }
    }
}

/// A 304 standing for a full response with these headers.
pub fn not_modified_response(full: &HeaderMap) -> Response<ProxyBody> {
    let mut response = Response::new(empty());
    *response.status_mut() = StatusCode::NOT_MODIFIED;
    *response.headers_mut() = not_modified_headers(full);
    response
}

/// A short plain-text response the proxy makes itself.
pub fn short(code: StatusCode, text: &'static str, served: Served) -> Answer {
    let mut response = Response::new(full(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    Answer::new(response, served)
}

/// The proxy's own 502 or 504 for an origin that failed, for a request that went forward for
/// `fwd`.
pub fn origin_failed(failure: OriginFailure, fwd: Fwd) -> Answer {
    let served = Served::Error { fwd, failure };
    short(failure.status(), failure.body(), served)
}

/// A stored entry, with its `Age`; a 304 when the client's conditional matches it, else the
/// part its `Range` asks for, if any.
pub fn stored(parts: &Parts, entry: &StoredResponse, served: Served, now: SystemTime) -> Answer {
    let age = HeaderValue::from(entry.age(now).as_secs());
    let headers = entry.headers();
    if not_modified(&parts.headers, &headers) {
        let mut response = not_modified_response(&headers);
        response.headers_mut().insert(header::AGE, age);
        return Answer::new(response, served);
    }
    let mut response = from_entry(parts, entry, headers);
    response.headers_mut().insert(header::AGE, age);
    Answer::new(response, served)
}

/// A fresh stored entry read from `tier`: a hit with its remaining freshness as `ttl`. A whole
/// 200 from memory keeps its head as the stored block ([`StoredHead`]) for a server that writes
/// one (`stored_heads`).
pub fn hit(
    parts: &Parts,
    entry: &Arc<StoredResponse>,
    tier: Tier,
    stored_heads: bool,
    now: SystemTime,
) -> Answer {
    let ttl = entry.ttl_seconds(now);
    let served = Served::Hit { ttl, tier };
    if stored_heads && tier == Tier::Ram && StoredHead::serves(parts, entry) {
        return Answer::new(StoredHead::response(parts, entry, now), served);
    }
    stored(parts, entry, served, now)
}

/// A stale entry served because the origin failed and `stale-if-error` allows it.
pub fn stale_on_error(parts: &Parts, entry: &StoredResponse, origin_status: u16) -> Answer {
    let now = SystemTime::now();
    let ttl = entry.ttl_seconds(now);
    stored(
        parts,
        entry,
        Served::StaleIfError { ttl, origin_status },
        now,
    )
}

/// The response another request fetched for the same key (coalescing).
pub fn shared(parts: &Parts, shared: &SharedResponse, served: Served) -> Answer {
    let entry = &shared.entry;
    let headers = entry.headers();
    if entry.status == StatusCode::OK && not_modified(&parts.headers, &headers) {
        return Answer::new(not_modified_response(&headers), served);
    }
    Answer::new(from_entry(parts, entry, headers), served)
}
