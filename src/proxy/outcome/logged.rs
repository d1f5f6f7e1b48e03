//! One request's access log entry: what the client asked (copied when it arrives), what it got
//! (when the response head is ready), and the body bytes sent, written as one line when the
//! response body ends or is dropped, or when the request is abandoned before it has an answer.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use hyper::body::{Body, Frame, SizeHint};

use crate::cache::slice::ContentRange;
use crate::proxy::outcome::access_log::AccessLog;
use crate::proxy::outcome::served::{OriginHead, Served};
use crate::proxy::response::stored_head::StoredHead;
use crate::trace::AccessLine;

/// nginx's status for a request whose client went away before it was answered.
const CLIENT_CLOSED_REQUEST: u16 = 499;

/// One request on its way to the access log; its line is written when it is dropped.
pub struct Entry {
    log: Arc<AccessLog>,
    arrived: Instant,
    time: SystemTime,
    peer: SocketAddr,
    method: Method,
    uri: Uri,
    version: Version,
    host: Option<HeaderValue>,
    user_agent: Option<HeaderValue>,
    referer: Option<HeaderValue>,
    range: Option<HeaderValue>,
    answer: Option<Answered>,
    /// Body bytes handed to the client's connection.
    sent: u64,
    /// The body ended whole.
    whole: bool,
}

/// What the response head said.
struct Answered {
    status: StatusCode,
    served: Served,
    origin: Option<OriginHead>,
    content_length: Option<u64>,
    /// A 206's `Content-Range` complete length: the whole object's.
    complete_length: Option<u64>,
}

impl Entry {
    /// Copies what the line names from the request as it arrives (shared buffers: no bytes are
    /// copied).
    pub fn begin<B>(
        log: &Arc<AccessLog>,
        request: &Request<B>,
        peer: SocketAddr,
        arrived: Instant,
    ) -> Box<Entry> {
        let headers = request.headers();
        Box::new(Entry {
            log: Arc::clone(log),
            arrived,
            time: SystemTime::now(),
            peer,
            method: request.method().clone(),
            uri: request.uri().clone(),
            version: request.version(),
            host: headers.get(header::HOST).cloned(),
            user_agent: headers.get(header::USER_AGENT).cloned(),
            referer: headers.get(header::REFERER).cloned(),
            range: headers.get(header::RANGE).cloned(),
            answer: None,
            sent: 0,
            whole: false,
        })
    }

    /// Records the response head the client gets, what was served with it, and the origin's
    /// head behind it.
    pub fn answered<B>(
        &mut self,
        response: &Response<B>,
        served: Served,
        origin: Option<OriginHead>,
    ) {
        let content_length = StoredHead::field(response, &header::CONTENT_LENGTH)
            .as_ref()
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse().ok());
        let complete_length = ContentRange::of(response.headers()).map(|range| range.total);
        self.answer = Some(Answered {
            status: response.status(),
            served,
            origin,
            content_length,
            complete_length,
        });
    }

    /// The target as the client sent it: HTTP/2's `:path`, HTTP/1's request-target.
    fn target(&self) -> Cow<'_, str> {
        match self.uri.path_and_query() {
            Some(target) if self.version == Version::HTTP_2 || self.uri.scheme().is_none() => {
                Cow::Borrowed(target.as_str())
            }
            _ => Cow::Owned(self.uri.to_string()),
        }
    }

    /// The object's whole length: a part's (206) `Content-Range` complete length; for a response
    /// that stands for the whole object its `Content-Length` (a HEAD's too), else the body sent
    /// when it ended whole. Not for several parts (a 206 without `Content-Range`), a 304 (no body
    /// and no length), a 416 (no byte of the object) or an error the proxy or the origin made
    /// (400, 5xx).
    fn object_size(&self, answer: &Answered) -> Option<u64> {
        let status = answer.status;
        if status == StatusCode::PARTIAL_CONTENT {
            return answer.complete_length;
        }
        let no_object = matches!(status.as_u16(), 204 | 304 | 416)
            || status.is_informational()
            || status.is_server_error()
            || answer.served == Served::Refused;
        if no_object {
            return None;
        }
        let body_is_object = self.whole && self.method != Method::HEAD;
        answer
            .content_length
            .or(body_is_object.then_some(self.sent))
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let target = self.target();
        let host = self
            .uri
            .authority()
            .map(|authority| authority.as_str().as_bytes())
            .or(self.host.as_ref().map(HeaderValue::as_bytes));
        let answer = self.answer.as_ref();
        let cache = answer.map(|answer| answer.served.log_fields());
        let origin = answer.and_then(|answer| answer.origin.as_ref());
        let line = AccessLine {
            time: self.time,
            client: self.peer.ip(),
            method: self.method.as_str(),
            target: &target,
            host,
            protocol: protocol(self.version),
            status: answer.map_or(CLIENT_CLOSED_REQUEST, |answer| answer.status.as_u16()),
            bytes_sent: self.sent,
            duration: self.arrived.elapsed(),
            cache: cache.map_or("-", |cache| cache.cache),
            fwd: cache.and_then(|cache| cache.fwd),
            detail: cache.and_then(|cache| cache.detail),
            decision: cache.and_then(|cache| cache.decision),
            origin_status: origin.map(|origin| origin.status),
            origin_time: origin.map(|origin| origin.elapsed),
            server: origin.and_then(|origin| origin.server.as_deref()),
            size: answer.and_then(|answer| self.object_size(answer)),
            range: self.range.as_ref().map(HeaderValue::as_bytes),
            user_agent: self.user_agent.as_ref().map(HeaderValue::as_bytes),
            referer: self.referer.as_ref().map(HeaderValue::as_bytes),
        };
        self.log.write(&line);
    }
}

fn protocol(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_11 => "HTTP/1.1",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "-",
    }
}

/// A response body that counts the bytes it hands to the connection and writes its request's
/// entry when it ends or is dropped (a client that goes away mid-body logs what it was sent).
/// Without an access log it only passes the body through.
pub struct Logged<B: Body> {
    inner: B,
    entry: Option<Box<Entry>>,
}

impl<B: Body> Logged<B> {
    pub fn new(inner: B, entry: Option<Box<Entry>>) -> Logged<B> {
        Logged { inner, entry }
    }
}

impl<B> Body for Logged<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Some(entry) = &mut self.entry {
            match &polled {
                Poll::Ready(Some(Ok(frame))) => {
                    entry.sent += frame.data_ref().map_or(0, |data| data.len() as u64);
                }
                Poll::Ready(None) => {
                    entry.whole = true;
                    self.entry = None;
                }
                Poll::Ready(Some(Err(_))) => self.entry = None,
                Poll::Pending => {}
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B: Body> Drop for Logged<B> {
    fn drop(&mut self) {
        // hyper stops polling a body it knows to be done (a length reached, an empty body).
        if let Some(entry) = &mut self.entry {
            entry.whole |= self.inner.is_end_stream();
        }
    }
}
