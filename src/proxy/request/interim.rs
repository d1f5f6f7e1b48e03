//! Interim (1xx) responses, the origin's and the route's own `103 Early Hints`, handed to a
//! client connection that can send them before the final response (the native HTTP/1.1 server;
//! hyper's server cannot). They go to the client alone: never into the final response, never
//! into the cache.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::header::LINK;
use http::{HeaderMap, HeaderValue, Request, StatusCode};
use tokio::sync::mpsc;

/// The most interim responses waiting for the connection to write them; more are dropped.
const QUEUE: usize = 8;

/// One interim response as the origin sent it.
#[derive(Debug)]
pub struct InterimHead {
    pub status: StatusCode,
    pub headers: HeaderMap,
}

/// Where a client request's interim responses go: set as an extension of the client's request by
/// a server that relays them.
#[derive(Clone, Debug)]
pub struct InterimSink {
    sender: mpsc::Sender<InterimHead>,
    /// Whether the route's early hints went out: once per request, however many origin requests
    /// it makes (a revalidation then a fetch, a sliced object's slices).
    hinted: Arc<AtomicBool>,
}

impl InterimSink {
    /// A sink and the connection's end of it.
    pub fn channel() -> (InterimSink, mpsc::Receiver<InterimHead>) {
        let (sender, receiver) = mpsc::channel(QUEUE);
        let sink = InterimSink {
            sender,
            hinted: Arc::new(AtomicBool::new(false)),
        };
        (sink, receiver)
    }

    /// Sends the route's `103 Early Hints` (RFC 8297) with `links` as its `Link` fields, once per
    /// request: the client's browser can fetch them while the origin prepares the answer.
    pub fn early_hints(&self, links: &[HeaderValue]) {
        if links.is_empty() || self.hinted.swap(true, Ordering::Relaxed) {
            return;
        }
        let mut headers = HeaderMap::with_capacity(links.len());
        for link in links {
            headers.append(LINK, link.clone());
        }
        let head = InterimHead {
            status: StatusCode::EARLY_HINTS,
            headers,
        };
        // A full queue drops the hint: it is advice, and the final response still comes.
        let _ = self.sender.try_send(head);
    }

    /// Has hyper's client hand the 1xx responses to `request` to this sink; not `100 Continue`,
    /// which answers an expectation of this proxy's own hop, nor `101`, as nothing is upgraded.
    pub fn watch<B>(&self, request: &mut Request<B>) {
        let sender = self.sender.clone();
        hyper::ext::on_informational(request, move |response| {
            let status = response.status();
            if status == StatusCode::CONTINUE || status == StatusCode::SWITCHING_PROTOCOLS {
                return;
            }
            let head = InterimHead {
                status,
                headers: response.headers().clone(),
            };
            // A full queue drops the hint: it is advice, and the final response still comes.
            let _ = sender.try_send(head);
        });
    }
}
