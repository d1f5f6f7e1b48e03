//! Interim (1xx) responses, the origin's and the route's own `103 Early Hints`, handed to a
//! client connection that can send them before the final response (the native HTTP/1.1 server;
//! hyper's server cannot). They go to the client alone: never into the final response, never
//! into the cache.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;

use futures_util::task::AtomicWaker;
use http::header::LINK;
use http::{HeaderMap, HeaderValue, Request, StatusCode};

/// The most interim responses waiting for the connection to write them; more are dropped.
const QUEUE: usize = 8;

/// One interim response as the origin sent it.
#[derive(Debug)]
pub struct InterimHead {
    pub status: StatusCode,
    pub headers: HeaderMap,
}

/// Where a client request's interim responses go: handed to `Proxy::handle` by a server that
/// relays them, beside the request (as an extension of it, it cost the request a map of its own:
/// three allocations more, on hits too).
///
/// Every request of a relaying connection gets one, and almost none ever carries a 1xx, so it is
/// one small allocation: a queue that allocates on its first response, and the connection's
/// waker. (A `tokio::sync::mpsc` channel allocated its first block of 32 slots, 3 KiB here, for
/// every request, hits included.)
#[derive(Clone, Debug)]
pub struct InterimSink {
    shared: Arc<Shared>,
}

/// The connection's end: the interim responses of one request, in the order they came.
#[derive(Debug)]
pub struct InterimReceiver {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<VecDeque<InterimHead>>,
    /// The connection's task, waiting for the next one.
    waker: AtomicWaker,
    /// Whether the route's early hints went out: once per request, however many origin requests
    /// it makes (a revalidation then a fetch, a sliced object's slices).
    hinted: AtomicBool,
    /// The connection is done with the request: what comes now is dropped.
    closed: AtomicBool,
}

impl Shared {
    /// Queues `head` for the connection; a full queue, or a request already answered, drops it:
    /// an interim response is advice, and the final response still comes.
    fn push(&self, head: InterimHead) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        {
            let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            if queue.len() >= QUEUE {
                return;
            }
            queue.push_back(head);
        }
        self.waker.wake();
    }

    fn pop(&self) -> Option<InterimHead> {
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front()
    }
}

impl InterimReceiver {
    /// The next interim response; waits while there is none (the final response ends the wait,
    /// in the connection's `select!`).
    pub async fn recv(&mut self) -> InterimHead {
        poll_fn(|cx| {
            if let Some(head) = self.shared.pop() {
                return Poll::Ready(head);
            }
            self.shared.waker.register(cx.waker());
            // One may have come between the look and the registration.
            match self.shared.pop() {
                Some(head) => Poll::Ready(head),
                None => Poll::Pending,
            }
        })
        .await
    }

    /// An interim response already waiting, if one is.
    pub fn try_recv(&mut self) -> Option<InterimHead> {
        self.shared.pop()
    }
}

impl Drop for InterimReceiver {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        // What a sender queued before it saw `closed` goes with the last of them.
        self.shared
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

impl InterimSink {
    /// A sink and the connection's end of it.
    pub fn channel() -> (InterimSink, InterimReceiver) {
        let shared = Arc::new(Shared::default());
        let receiver = InterimReceiver {
            shared: Arc::clone(&shared),
        };
        (InterimSink { shared }, receiver)
    }

    /// Sends the route's `103 Early Hints` (RFC 8297) with `links` as its `Link` fields, once per
    /// request: the client's browser can fetch them while the origin prepares the answer.
    pub fn early_hints(&self, links: &[HeaderValue]) {
        if links.is_empty() || self.shared.hinted.swap(true, Ordering::Relaxed) {
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
        self.shared.push(head);
    }

    /// Has hyper's client hand the 1xx responses to `request` to this sink; not `100 Continue`,
    /// which answers an expectation of this proxy's own hop, nor `101`, as nothing is upgraded.
    pub fn watch<B>(&self, request: &mut Request<B>) {
        let shared = Arc::clone(&self.shared);
        hyper::ext::on_informational(request, move |response| {
            let status = response.status();
            if status == StatusCode::CONTINUE || status == StatusCode::SWITCHING_PROTOCOLS {
                return;
            }
            let head = InterimHead {
                status,
                headers: response.headers().clone(),
            };
            shared.push(head);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(status: u16) -> InterimHead {
        InterimHead {
            status: StatusCode::from_u16(status).expect("a status"),
            headers: HeaderMap::new(),
        }
    }

    #[tokio::test]
    async fn interim_responses_reach_the_connection_in_order_and_a_full_queue_drops_the_rest() {
        let (sink, mut receiver) = InterimSink::channel();
        assert!(receiver.try_recv().is_none());
        for _ in 0..QUEUE + 3 {
            sink.shared.push(head(103));
        }
        sink.shared.push(head(102));
        let mut received = 0;
        while let Some(head) = receiver.try_recv() {
            assert_eq!(head.status, StatusCode::EARLY_HINTS);
            received += 1;
        }
        assert_eq!(received, QUEUE);
        // The route's hints go once per request, however often they are asked for.
        let link = HeaderValue::from_static("</app.css>; rel=preload");
        sink.early_hints(std::slice::from_ref(&link));
        sink.early_hints(std::slice::from_ref(&link));
        let hint = receiver.recv().await;
        assert_eq!(hint.headers.get(LINK), Some(&link));
        assert!(receiver.try_recv().is_none());
    }

    #[tokio::test]
    async fn a_waiting_connection_is_woken_by_a_response_sent_from_another_task() {
        let (sink, mut receiver) = InterimSink::channel();
        let sender = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            sink.shared.push(head(103));
            sink
        });
        let received = tokio::time::timeout(std::time::Duration::from_secs(5), receiver.recv())
            .await
            .expect("woken");
        assert_eq!(received.status, StatusCode::EARLY_HINTS);
        let sink = sender.await.expect("the sender");
        // Once the connection is done with the request, what comes is dropped, not kept.
        drop(receiver);
        sink.shared.push(head(103));
        assert!(sink.shared.pop().is_none());
    }
}
