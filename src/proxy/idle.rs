//! Idle client connections: how long one may wait for its first request, between requests on
//! keep-alive, and for the client to take the bytes of a response, before the proxy closes it
//! (HTTP/1.1 and HTTP/2 alike).
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

/// A response body that keeps its request in progress until hyper has sent it or dropped it.
pub struct Tracked<B> {
    inner: B,
    _request: InProgress,
}

impl<B> Tracked<B> {
    pub fn new(inner: B, request: InProgress) -> Tracked<B> {
        Tracked {
            inner,
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
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A client stream whose writes give up when the client has not taken a byte for `timeout`
/// (nginx's `send_timeout`): a client that stops reading must not hold its connection, and the
/// origin connection behind it, for ever.
pub struct SendTimeout<S> {
    inner: S,
    timeout: Duration,
    /// Set while a write is waiting for the client; reset by any progress.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> SendTimeout<S> {
    pub fn new(inner: S, timeout: Duration) -> SendTimeout<S> {
        SendTimeout {
            inner,
            timeout,
            stalled: None,
        }
    }

    /// Passes a write's result through, starting the stall clock when it waits and failing it
    /// with `TimedOut` once the clock runs out.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        result: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        if result.is_ready() {
            self.stalled = None;
            return result;
        }
        let timeout = self.timeout;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        if stalled.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("client took no bytes for {timeout:?}"),
            )));
        }
        Poll::Pending
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for SendTimeout<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for SendTimeout<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, result)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, result)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let result = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, result)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
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
