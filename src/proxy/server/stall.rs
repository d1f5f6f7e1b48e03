//! Clients that do not take the bytes of a response: a socket write, a whole connection or one
//! HTTP/2 stream that makes no progress for its send timeout is given up on, so that it holds
//! neither its slot nor the origin connection and the coalesced flight behind it.
//!
//! Three limits, because a stalled client shows in three places:
//! - a socket write that waits (`server.send_timeout`, [`SendTimeout`]): the client's TCP window
//!   is full;
//! - a connection that owes its client bytes and writes none (`server.send_timeout`,
//!   [`Sending::stalled`]): nothing is blocked on the socket, yet nothing is written, as when an
//!   HTTP/2 client never opens its connection window;
//! - one HTTP/2 stream whose body hyper stops taking (`server.stream_send_timeout`,
//!   [`StreamExecutor`]): hyper polls a body only once the stream has flow-control capacity
//!   (`PipeToSendStream` in hyper's `proto/h2/mod.rs`), so a client that never sends
//!   WINDOW_UPDATE for it, or sets SETTINGS_INITIAL_WINDOW_SIZE to 0, writes nothing and blocks
//!   nothing while its other streams run.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use metrics::counter;
use tokio::time::{Instant, Sleep};

use crate::telemetry::CLIENT_SEND_TIMEOUTS_TOTAL;

/// What gave up on a client, as the `scope` label of `bloomgate_client_send_timeouts_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StallScope {
    /// One HTTP/2 stream was reset; the connection and its other streams go on.
    Stream,
    /// The connection was closed.
    Connection,
}

impl StallScope {
    pub const ALL: [StallScope; 2] = [StallScope::Stream, StallScope::Connection];

    pub fn as_str(self) -> &'static str {
        match self {
            StallScope::Stream => "stream",
            StallScope::Connection => "connection",
        }
    }

    pub(crate) fn count(self) {
        counter!(CLIENT_SEND_TIMEOUTS_TOTAL, "scope" => self.as_str()).increment(1);
    }
}

/// How one connection is getting on with sending: when it last moved (a byte written to the
/// socket, or a response body polled by hyper) and how many response bodies are waiting for the
/// client to take what hyper already holds.
pub struct Sending {
    started: Instant,
    /// Nanoseconds from `started` to the last progress.
    moved_at: AtomicU64,
    owing: AtomicUsize,
    /// Set once the connection has been given up on, so that it is counted once.
    given_up: AtomicBool,
}

impl Sending {
    pub fn new() -> Arc<Sending> {
        Arc::new(Sending {
            started: Instant::now(),
            moved_at: AtomicU64::new(0),
            owing: AtomicUsize::new(0),
            given_up: AtomicBool::new(false),
        })
    }

    fn moved(&self) {
        let nanos = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.moved_at.store(nanos, Ordering::Relaxed);
    }

    fn last_moved(&self) -> Instant {
        self.started + Duration::from_nanos(self.moved_at.load(Ordering::Relaxed))
    }

    /// Counts the connection as given up on, once however many limits see it.
    fn give_up(&self) {
        if !self.given_up.swap(true, Ordering::Relaxed) {
            StallScope::Connection.count();
        }
    }

    /// Resolves (and counts) once a response body has waited for the client for `timeout` with
    /// no byte written and no body polled on the connection meanwhile.
    pub async fn stalled(&self, timeout: Duration) {
        loop {
            let now = Instant::now();
            let deadline = self.last_moved() + timeout;
            if now >= deadline {
                if self.owing.load(Ordering::Relaxed) > 0 {
                    self.give_up();
                    return;
                }
                // Nothing owed: look again a whole limit later, as a stall starts with progress.
                tokio::time::sleep(timeout).await;
            } else {
                tokio::time::sleep_until(deadline).await;
            }
        }
    }
}

/// The sending side of one response body: it tells its connection (and its HTTP/2 stream, if it
/// has one) whenever hyper polls the body, and whether hyper then holds data it has yet to send.
pub struct BodyProgress {
    sending: Arc<Sending>,
    stream: Option<Arc<StreamProgress>>,
    owing: bool,
}

impl BodyProgress {
    /// Made while hyper polls the response's future, so that on HTTP/2 it finds its stream.
    pub fn new(sending: Arc<Sending>) -> BodyProgress {
        BodyProgress {
            sending,
            stream: StreamProgress::current(),
            owing: false,
        }
    }

    /// Records a poll of the body; `handed_data` when the poll gave hyper data to send.
    pub fn polled(&mut self, handed_data: bool) {
        self.sending.moved();
        if handed_data != self.owing {
            self.owing = handed_data;
            if handed_data {
                self.sending.owing.fetch_add(1, Ordering::Relaxed);
            } else {
                self.sending.owing.fetch_sub(1, Ordering::Relaxed);
            }
        }
        if let Some(stream) = &self.stream {
            stream.polls.fetch_add(1, Ordering::Relaxed);
            stream.owing.store(handed_data, Ordering::Relaxed);
        }
    }
}

impl Drop for BodyProgress {
    fn drop(&mut self) {
        if self.owing {
            self.sending.owing.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// What the task of one HTTP/2 stream knows of its response body.
#[derive(Default)]
struct StreamProgress {
    polls: AtomicU64,
    owing: AtomicBool,
}

thread_local! {
    /// The stream whose task this thread is polling, if any.
    static POLLING: std::cell::RefCell<Option<Arc<StreamProgress>>> =
        const { std::cell::RefCell::new(None) };
}

impl StreamProgress {
    fn current() -> Option<Arc<StreamProgress>> {
        POLLING.with(|polling| polling.borrow().clone())
    }
}

/// Puts back the stream that was being polled before, even if the poll panics.
struct Polling(Option<Arc<StreamProgress>>);

impl Polling {
    fn enter(stream: &Arc<StreamProgress>) -> Polling {
        Polling(POLLING.with(|polling| polling.replace(Some(Arc::clone(stream)))))
    }
}

impl Drop for Polling {
    fn drop(&mut self) {
        let previous = self.0.take();
        POLLING.with(|polling| *polling.borrow_mut() = previous);
    }
}

/// hyper's executor for HTTP/2 streams: it spawns each stream's task (hyper's `H2Stream`: the
/// service future, then the body piped into the stream) on tokio, and drops the task of a stream
/// whose body has held data for the client for `timeout` without hyper polling it again.
///
/// hyper has no call to reset one stream from outside, but dropping the task drops the last
/// handles to the stream, and h2 then resets it with `RST_STREAM(CANCEL)` (`maybe_cancel` in h2's
/// `proto/streams/streams.rs`): only that stream ends, and its response body with it (so the
/// origin connection behind a miss is released), while the connection and its other streams go on.
#[derive(Clone, Copy)]
pub struct StreamExecutor {
    timeout: Duration,
}

impl StreamExecutor {
    pub fn new(timeout: Duration) -> StreamExecutor {
        StreamExecutor { timeout }
    }
}

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, task: F) {
        tokio::spawn(StreamTask {
            task: Box::pin(task),
            progress: Arc::default(),
            timeout: self.timeout,
            seen_polls: 0,
            stalled: None,
        });
    }
}

/// One HTTP/2 stream's task, with the clock that gives up on it.
struct StreamTask<F> {
    task: Pin<Box<F>>,
    progress: Arc<StreamProgress>,
    timeout: Duration,
    seen_polls: u64,
    /// Runs while the body holds data for the client; restarted by each poll of the body.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<F: Future<Output = ()>> Future for StreamTask<F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let polled = {
            let _polling = Polling::enter(&this.progress);
            this.task.as_mut().poll(cx)
        };
        if polled.is_ready() {
            return Poll::Ready(());
        }
        if !this.progress.owing.load(Ordering::Relaxed) {
            this.stalled = None;
            return Poll::Pending;
        }
        let polls = this.progress.polls.load(Ordering::Relaxed);
        let deadline = Instant::now() + this.timeout;
        let stalled = this
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if polls != this.seen_polls {
            this.seen_polls = polls;
            stalled.as_mut().reset(deadline);
        }
        if stalled.as_mut().poll(cx).is_ready() {
            StallScope::Stream.count();
            tracing::debug!(timeout = ?this.timeout, "HTTP/2 stream took no bytes; reset");
            // Returning drops the stream's task, and with it the stream: h2 resets it.
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

/// A client stream whose writes give up when the client has not taken a byte for `timeout`
/// (nginx's `send_timeout`): a client that stops reading must not hold its connection, and the
/// origin connection behind it, for ever. Each byte written counts as progress of the connection.
pub struct SendTimeout<S> {
    inner: S,
    timeout: Duration,
    sending: Arc<Sending>,
    /// Set while a write is waiting for the client; reset by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> SendTimeout<S> {
    pub fn new(inner: S, timeout: Duration, sending: Arc<Sending>) -> SendTimeout<S> {
        SendTimeout {
            inner,
            timeout,
            sending,
            stalled: None,
        }
    }

    /// Bytes written are the connection's progress; a flush with nothing to write is not.
    fn wrote(&self, result: &Poll<std::io::Result<usize>>) {
        if matches!(result, Poll::Ready(Ok(n)) if *n > 0) {
            self.sending.moved();
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
            self.sending.give_up();
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
        self.wrote(&result);
        self.watch(cx, result)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.wrote(&result);
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
    use hyper::rt::Executor;

    #[tokio::test(start_paused = true)]
    async fn a_connection_owing_bytes_without_progress_stalls_after_the_timeout() {
        let sending = Sending::new();
        let mut body = BodyProgress::new(Arc::clone(&sending));
        body.polled(true);
        let started = Instant::now();
        sending.stalled(Duration::from_secs(10)).await;
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_owing_nothing_never_stalls() {
        let sending = Sending::new();
        let mut body = BodyProgress::new(Arc::clone(&sending));
        body.polled(true);
        // hyper took the data and waits for the next chunk: the origin is slow, not the client.
        body.polled(false);
        let stalled = tokio::time::timeout(
            Duration::from_secs(100),
            sending.stalled(Duration::from_secs(10)),
        );
        assert!(stalled.await.is_err(), "stalled while owing nothing");
    }

    #[tokio::test(start_paused = true)]
    async fn each_poll_of_a_body_restarts_the_connection_clock() {
        let sending = Sending::new();
        let mut body = BodyProgress::new(Arc::clone(&sending));
        let started = Instant::now();
        let watcher = tokio::spawn({
            let sending = Arc::clone(&sending);
            async move { sending.stalled(Duration::from_secs(10)).await }
        });
        for _ in 0..5 {
            body.polled(true);
            tokio::time::sleep(Duration::from_secs(6)).await;
        }
        assert!(!watcher.is_finished(), "stalled although the body moved");
        watcher.await.expect("watcher");
        assert_eq!(started.elapsed(), Duration::from_secs(34));
    }

    /// A stream task as hyper's `H2Stream` is for the executor: its body is made and polled
    /// inside the task's poll. It hands out data `polls` times, a second apart, then waits for
    /// flow-control capacity that never comes; `ended` is sent when the task is dropped.
    fn stream_task(
        sending: Arc<Sending>,
        polls: u32,
        ended: tokio::sync::oneshot::Sender<Instant>,
    ) -> impl Future<Output = ()> + Send + 'static {
        struct OnDrop(Option<tokio::sync::oneshot::Sender<Instant>>);
        impl Drop for OnDrop {
            fn drop(&mut self) {
                if let Some(ended) = self.0.take() {
                    let _ = ended.send(Instant::now());
                }
            }
        }
        async move {
            let _on_drop = OnDrop(Some(ended));
            let mut body = BodyProgress::new(sending);
            for _ in 0..polls {
                body.polled(true);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            body.polled(true);
            std::future::pending::<()>().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_whose_body_is_not_taken_is_dropped_after_the_timeout() {
        let (ended, ended_at) = tokio::sync::oneshot::channel();
        let started = Instant::now();
        StreamExecutor::new(Duration::from_secs(10)).execute(stream_task(Sending::new(), 3, ended));
        let ended_at = ended_at
            .await
            .expect("the stalled stream's task was dropped");
        // Three polls a second apart, then ten seconds without one.
        assert_eq!(ended_at - started, Duration::from_secs(13));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_owing_nothing_is_never_dropped() {
        let (ended, mut ended_at) = tokio::sync::oneshot::channel::<()>();
        let idle_stream = async move {
            let _ended = ended;
            let mut body = BodyProgress::new(Sending::new());
            // Waiting for the origin's next chunk, not for the client.
            body.polled(false);
            std::future::pending::<()>().await;
        };
        StreamExecutor::new(Duration::from_secs(10)).execute(idle_stream);
        tokio::time::sleep(Duration::from_secs(100)).await;
        assert!(
            ended_at.try_recv().is_err(),
            "a stream waiting for its origin was dropped"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_outside_a_stream_task_has_no_stream() {
        assert!(BodyProgress::new(Sending::new()).stream.is_none());
    }
}
