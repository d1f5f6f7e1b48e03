//! The parts of an origin body that a client's range asks for, cut from it as it streams: the
//! client gets each byte as soon as the origin sends it, and once its parts are sent the rest of
//! the body is still read for the store and the requests waiting on the fetch.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use crate::proxy::response::range::{Partial, Piece};
use crate::proxy::response::stream::{BoxError, OriginStream};

/// Why a sliced body failed.
#[derive(Debug, thiserror::Error)]
#[error("origin body ended at byte {0}, before the range the client asked for")]
pub struct EndedEarly(u64);

/// A 206 body cut from an origin body of known length.
pub struct SlicedStream {
    /// `None` once every piece has gone: the origin body then finishes without the client.
    source: Option<OriginStream>,
    pieces: VecDeque<Piece>,
    /// The origin chunk being cut, and where its first byte lies in the representation.
    chunk: Bytes,
    chunk_start: u64,
    /// Bytes of the 206 body not yet sent.
    remaining: u64,
}

impl SlicedStream {
    pub fn new(source: OriginStream, partial: Partial) -> SlicedStream {
        SlicedStream {
            source: Some(source),
            remaining: partial.length(),
            pieces: partial.into_pieces().into(),
            chunk: Bytes::new(),
            chunk_start: 0,
        }
    }

    fn emit(&mut self, bytes: Bytes) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.remaining = self.remaining.saturating_sub(bytes.len() as u64);
        // A server that knows the length stops polling once it has sent it: the rest of the
        // origin body is handed on with the last bytes, not on a poll that may never come.
        if self.pieces.is_empty() {
            self.finish();
        }
        Poll::Ready(Some(Ok(Frame::data(bytes))))
    }

    fn finish(&mut self) {
        self.chunk = Bytes::new();
        if let Some(source) = self.source.take() {
            source.finish_unread();
        }
    }
}

impl Body for SlicedStream {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            let chunk_end = this.chunk_start + this.chunk.len() as u64;
            let range = match this.pieces.front_mut() {
                None => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Some(Piece::Framing(framing)) => {
                    let framing = std::mem::take(framing);
                    this.pieces.pop_front();
                    return this.emit(framing);
                }
                Some(Piece::Source(range)) => range,
            };
            if chunk_end > range.start {
                // Parts are in ascending order, so the chunk never starts after the part does.
                let from = range.start.max(this.chunk_start) - this.chunk_start;
                let to = range.end.min(chunk_end) - this.chunk_start;
                let part = this.chunk.slice(offset(from)..offset(to));
                range.start = range.end.min(chunk_end);
                if range.start == range.end {
                    this.pieces.pop_front();
                }
                return this.emit(part);
            }
            let Some(source) = this.source.as_mut() else {
                return Poll::Ready(Some(Err(Box::new(EndedEarly(chunk_end)))));
            };
            match ready!(Pin::new(source).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        this.chunk_start = chunk_end;
                        this.chunk = data;
                    }
                }
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                None => {
                    this.source = None;
                    return Poll::Ready(Some(Err(Box::new(EndedEarly(chunk_end)))));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pieces.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// An offset within a chunk, which is in memory and so fits a `usize`.
fn offset(within_chunk: u64) -> usize {
    usize::try_from(within_chunk).unwrap_or(usize::MAX)
}
