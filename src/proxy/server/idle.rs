//! Idle client connections: how long one may wait for its first request, and between requests on
//! keep-alive, before the proxy closes it (HTTP/1.1 and HTTP/2 alike). Clients that stop taking a
//! response are `stall.rs`'s.
//!
//! hyper's own header-read timeout starts only at a request's first byte, and HTTP/2 has none, so a
//! client that connects and stays silent would otherwise hold a `server.max_connections` slot for as
//! long as it likes.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::watch;

use crate::proxy::server::stall::BodyProgress;

/// The requests in progress on one connection.
pub struct Activity {
    in_progress: watch::Sender<usize>,
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            in_progress: watch::Sender::new(0),
        })
    }

    /// Marks a request as started; it ends when the guard is dropped (with its response body).
    pub fn begin(self: &Arc<Self>) -> InProgress {
        self.in_progress.send_modify(|n| *n += 1);
        InProgress(Arc::clone(self))
    }

    /// Resolves once the connection has had no request in progress for `first` since it was
    /// accepted (before any request), or for `between` since its last response was sent.
    pub async fn idle(&self, first: Duration, between: Duration) {
        let mut in_progress = self.in_progress.subscribe();
        let mut limit = first;
        loop {
            if *in_progress.borrow_and_update() == 0 {
                tokio::select! {
                    () = tokio::time::sleep(limit) => return,
                    changed = in_progress.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                }
            }
            // A request started: wait for the connection to go quiet again.
            if in_progress.wait_for(|n| *n == 0).await.is_err() {
                return;
            }
            limit = between;
        }
    }
}

/// One request in progress; dropping it ends the request.
pub struct InProgress(Arc<Activity>);

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.in_progress.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A response body that keeps its request in progress until hyper has sent it or dropped it, and
/// tells the stall clocks when hyper takes from it.
pub struct Tracked<B> {
    inner: B,
    progress: BodyProgress,
    _request: InProgress,
}

impl<B> Tracked<B> {
    pub fn new(inner: B, request: InProgress, progress: BodyProgress) -> Tracked<B> {
        Tracked {
            inner,
            progress,
            _request: request,
        }
    }
}

impl<B> Body for Tracked<B>
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
        let handed_data = matches!(&polled, Poll::Ready(Some(Ok(frame))) if frame
            .data_ref()
            .is_some_and(|data| !data.is_empty()));
        self.progress.polled(handed_data);
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_connection_without_requests_is_idle_after_the_first_limit() {
        let activity = Activity::new();
        let started = tokio::time::Instant::now();
        activity
            .idle(Duration::from_secs(10), Duration::from_secs(60))
            .await;
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_in_progress_is_never_idle_and_the_second_limit_follows_it() {
        let activity = Activity::new();
        let request = activity.begin();
        let watcher = tokio::spawn({
            let activity = Arc::clone(&activity);
            async move {
                activity
                    .idle(Duration::from_secs(10), Duration::from_secs(60))
                    .await;
                tokio::time::Instant::now()
            }
        });
        tokio::time::sleep(Duration::from_secs(100)).await;
        assert!(!watcher.is_finished(), "closed with a request in progress");
        let ended = tokio::time::Instant::now();
        drop(request);
        let closed = watcher.await.expect("watcher");
        assert_eq!(closed - ended, Duration::from_secs(60));
    }
}
