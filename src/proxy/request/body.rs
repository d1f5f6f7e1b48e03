//! A client request's body, whichever server read it: hyper's (HTTP/2, TLS, and HTTP/1.1 with
//! `server.http1 = "hyper"`) or the native HTTP/1.1 connection, so the phases run on either.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::sync::{mpsc, oneshot};

use crate::proxy::server::h1::chunked::ChunkError;

/// Why a client's request body could not be read to its end.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("client request body: {0}")]
    Hyper(#[from] hyper::Error),
    #[error("client request body ended after {read} bytes, before its framing said it ends")]
    Truncated { read: u64 },
    #[error("client request body: reading the socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("client request body: {0}")]
    Chunked(#[from] ChunkError),
}

/// The body of one client request, as the phases read it.
pub enum RequestBody {
    /// Read by hyper's server.
    Hyper(Incoming),
    /// Read by the native HTTP/1.1 connection, which hands it over as it arrives.
    Native(NativeBody),
}

impl From<Incoming> for RequestBody {
    fn from(body: Incoming) -> RequestBody {
        RequestBody::Hyper(body)
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.get_mut() {
            RequestBody::Hyper(body) => Pin::new(body)
                .poll_frame(cx)
                .map(|frame| frame.map(|frame| frame.map_err(BodyError::from))),
            RequestBody::Native(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Hyper(body) => body.is_end_stream(),
            RequestBody::Native(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Hyper(body) => body.size_hint(),
            RequestBody::Native(body) => body.size_hint(),
        }
    }
}

/// A request body the native connection reads off its socket only once a phase asks for it, so
/// that `Expect: 100-continue` is answered when, and only when, the body is wanted.
pub struct NativeBody {
    chunks: Option<mpsc::Receiver<Result<Bytes, BodyError>>>,
    /// Fired at the first poll: the connection then sends `100 Continue` if asked, and reads.
    want: Option<oneshot::Sender<()>>,
    /// What the framing still owes, when it announced a length.
    remaining: Option<u64>,
    read: u64,
}

/// The connection's end of a [`NativeBody`].
pub struct BodySender {
    pub chunks: mpsc::Sender<Result<Bytes, BodyError>>,
    /// Resolves when the body is first polled; fails when it is dropped unread.
    pub wanted: oneshot::Receiver<()>,
}

impl NativeBody {
    /// A body of `length` bytes (unknown for chunked framing), and the sender that feeds it.
    pub fn channel(length: Option<u64>) -> (NativeBody, BodySender) {
        // One chunk in flight: the client's bytes wait in the socket, not in the proxy.
        let (chunks, receiver) = mpsc::channel(1);
        let (want, wanted) = oneshot::channel();
        let body = NativeBody {
            chunks: Some(receiver),
            want: Some(want),
            remaining: length,
            read: 0,
        };
        (body, BodySender { chunks, wanted })
    }

    /// A request without a body.
    pub fn empty() -> NativeBody {
        NativeBody {
            chunks: None,
            want: None,
            remaining: Some(0),
            read: 0,
        }
    }
}

impl Body for NativeBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        if let Some(want) = self.want.take() {
            let _ = want.send(());
        }
        let Some(chunks) = &mut self.chunks else {
            return Poll::Ready(None);
        };
        match chunks.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(data))) => {
                let length = data.len() as u64;
                self.read += length;
                if let Some(remaining) = &mut self.remaining {
                    *remaining = remaining.saturating_sub(length);
                }
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            Poll::Ready(Some(Err(error))) => {
                self.chunks = None;
                Poll::Ready(Some(Err(error)))
            }
            Poll::Ready(None) => {
                self.chunks = None;
                match self.remaining {
                    Some(remaining) if remaining > 0 => {
                        Poll::Ready(Some(Err(BodyError::Truncated { read: self.read })))
                    }
                    _ => Poll::Ready(None),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_none() || self.remaining == Some(0)
    }

    fn size_hint(&self) -> SizeHint {
        match self.remaining {
            Some(remaining) => SizeHint::with_exact(remaining),
            None => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn a_native_body_is_wanted_only_once_polled() {
        let (body, mut sender) = NativeBody::channel(Some(5));
        assert!(sender.wanted.try_recv().is_err(), "wanted before any poll");
        let reader = tokio::spawn(async move { body.collect().await.map(|c| c.to_bytes()) });
        (&mut sender.wanted).await.expect("wanted once polled");
        sender
            .chunks
            .send(Ok(Bytes::from_static(b"hello")))
            .await
            .expect("send");
        drop(sender);
        let read = reader.await.expect("task").expect("body");
        assert_eq!(read, Bytes::from_static(b"hello"));
    }

    #[tokio::test]
    async fn a_native_body_cut_short_of_its_length_is_an_error() {
        let (body, sender) = NativeBody::channel(Some(10));
        sender
            .chunks
            .send(Ok(Bytes::from_static(b"abc")))
            .await
            .expect("send");
        drop(sender);
        let read = body.collect().await.map(|collected| collected.to_bytes());
        assert!(
            matches!(read, Err(BodyError::Truncated { read: 3 })),
            "{read:?}"
        );
    }
}
