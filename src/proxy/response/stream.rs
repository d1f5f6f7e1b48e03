//! The body of an origin response on its way to the client: an idle timeout between chunks, byte
//! counting, and an optional capture of the whole body for the store and for coalesced requests.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::proxy::upstream::origin::OriginFailure;
use metrics::Counter;

use crate::telemetry::{OriginOutcome, series};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why an origin body ended early.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("origin sent nothing for {0:?} in the middle of a body")]
    Idle(Duration),
    #[error("origin body failed: {0}")]
    Origin(#[from] hyper::Error),
}

impl BodyError {
    pub fn failure(&self) -> OriginFailure {
        match self {
            BodyError::Idle(_) => OriginFailure::Timeout,
            BodyError::Origin(_) => OriginFailure::Error,
        }
    }
}

/// What reading the start of a body of unknown length gave.
pub enum Prefix {
    /// The whole body, within the limit.
    Whole(Bytes),
    /// More than the limit: the stream, which sends what was read first.
    TooLarge(OriginStream),
}

/// Called with the complete body once the origin has sent all of it, and only then.
pub type OnComplete = Box<dyn FnOnce(Bytes) + Send>;

/// Collects a body up to a limit; dropping it unfinished discards what it holds.
pub struct Capture {
    buffer: BytesMut,
    limit: usize,
    on_complete: OnComplete,
}

impl Capture {
    /// Completes the capture with a body read elsewhere.
    pub fn complete_with(self, body: Bytes) {
        (self.on_complete)(body);
    }

    /// Gives the capture up: nothing is stored, and the requests waiting on its flight fetch alone.
    pub fn abandon(self) {
        drop(self);
    }

    pub fn new(expected: Option<u64>, limit: u64, on_complete: OnComplete) -> Capture {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let reserve = expected
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(16 * 1024)
            .min(limit);
        Capture {
            buffer: BytesMut::with_capacity(reserve),
            limit,
            on_complete,
        }
    }
}

/// A captured body in an allocation of its own size: a buffer grown for a body of unknown length
/// can be up to twice as large as the body, and the stored entry would hold all of it.
fn fitted(buffer: BytesMut) -> Bytes {
    if buffer.capacity() - buffer.len() > buffer.len() / 16 {
        Bytes::copy_from_slice(&buffer)
    } else {
        buffer.freeze()
    }
}

pub struct OriginStream {
    /// Chunks already read from `inner`, sent first.
    prefix: std::collections::VecDeque<Bytes>,
    inner: Incoming,
    idle_timeout: Duration,
    idle: Pin<Box<Sleep>>,
    capture: Option<Capture>,
    /// Where the body's bytes are counted (its route's `bloomgate_origin_bytes_total`).
    bytes: Counter,
}

impl OriginStream {
    /// The origin body `inner`, with `idle_timeout` between chunks, captured when `capture` is
    /// given, its bytes counted in `bytes`.
    pub fn new(
        inner: Incoming,
        idle_timeout: Duration,
        capture: Option<Capture>,
        bytes: Counter,
    ) -> OriginStream {
        OriginStream {
            prefix: std::collections::VecDeque::new(),
            inner,
            idle_timeout,
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
            capture,
            bytes,
        }
    }

    /// Reads the body until it ends or passes `limit` bytes: the whole body, or the stream with
    /// what was read so far put back in front. Used for a body of unknown length before the
    /// response head is sent, so that `Cache-Status` can say truthfully whether it is stored.
    pub async fn read_up_to(mut self, limit: u64) -> Result<Prefix, BodyError> {
        let mut chunks = Vec::new();
        let mut total = 0u64;
        while let Some(frame) = std::future::poll_fn(|cx| self.poll_origin(cx)).await {
            if let Ok(data) = frame?.into_data() {
                total += data.len() as u64;
                chunks.push(data);
                if total > limit {
                    self.prefix.extend(chunks);
                    return Ok(Prefix::TooLarge(self));
                }
            }
        }
        let mut body = BytesMut::with_capacity(usize::try_from(total).unwrap_or(0));
        for chunk in chunks {
            body.extend_from_slice(&chunk);
        }
        Ok(Prefix::Whole(body.freeze()))
    }

    /// Lets a body the client will not read (or not to its end) reach its capture: read to the
    /// end in the background when it is being captured, for the store and the requests waiting
    /// on the fetch; dropped otherwise.
    pub fn finish_unread(mut self) {
        if self.capture.is_some() {
            tokio::spawn(async move {
                while let Some(Ok(_)) = std::future::poll_fn(|cx| self.poll_origin(cx)).await {}
            });
        }
    }

    fn complete(&mut self) {
        if let Some(capture) = self.capture.take() {
            (capture.on_complete)(fitted(capture.buffer));
        }
    }

    fn fail(&mut self, error: BodyError) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        // Dropping the capture drops its flight: waiters fetch alone, and nothing is stored.
        self.capture = None;
        series().origin(OriginOutcome::BodyError).increment(1);
        tracing::warn!(%error, "origin body aborted");
        Poll::Ready(Some(Err(error)))
    }

    /// The next frame from the origin (or the prefix), with the idle timeout, byte counting and
    /// capture applied.
    fn poll_origin(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self;
        if let Some(chunk) = this.prefix.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let deadline = Instant::now() + this.idle_timeout;
                this.idle.as_mut().reset(deadline);
                if let Some(data) = frame.data_ref() {
                    this.bytes.increment(data.len() as u64);
                    if let Some(capture) = this.capture.as_mut() {
                        if capture.buffer.len() + data.len() > capture.limit {
                            this.capture = None;
                        } else {
                            capture.buffer.extend_from_slice(data);
                        }
                    }
                }
                // A server that knows the length stops polling once it has sent it, so the last
                // frame of a length-delimited body is where the capture completes.
                if this.inner.is_end_stream() {
                    this.complete();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => this.fail(BodyError::Origin(error)),
            Poll::Ready(None) => {
                this.complete();
                Poll::Ready(None)
            }
            Poll::Pending => {
                if this.idle.as_mut().poll(cx).is_ready() {
                    let timeout = this.idle_timeout;
                    return this.fail(BodyError::Idle(timeout));
                }
                Poll::Pending
            }
        }
    }
}

impl Body for OriginStream {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.poll_origin(cx)
            .map(|frame| frame.map(|result| result.map_err(|error| Box::new(error) as BoxError)))
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_empty() && self.inner.is_end_stream() && self.capture.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_captured_body_is_kept_in_an_allocation_of_its_size() {
        // A body of unknown length grew the buffer past it: the stored copy is a new allocation.
        let mut grown = BytesMut::with_capacity(16 * 1024);
        grown.extend_from_slice(&[7; 9000]);
        let grown_at = grown.as_ptr();
        let body = fitted(grown);
        assert_eq!(body.len(), 9000);
        assert_ne!(body.as_ptr(), grown_at, "the grown buffer was kept");
        // A body that filled its buffer keeps it, without a copy.
        let mut full = BytesMut::with_capacity(9000);
        full.extend_from_slice(&[7; 9000]);
        let full_at = full.as_ptr();
        assert_eq!(fitted(full).as_ptr(), full_at);
    }
}
