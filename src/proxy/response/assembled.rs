//! A body assembled from slices as they arrive: the slices phase sends each part of it down a
//! channel that holds one, so a client of a large object costs at most the slice being sent and
//! the one being fetched.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

use crate::proxy::response::stream::BoxError;

/// The parts of the body a task sends as it gets them; an error ends the body early, which the
/// client sees as a connection closed before the announced length.
pub type Parts = mpsc::Sender<Result<Bytes, BoxError>>;

/// The receiving end: the body of the client's response.
pub struct AssembledBody {
    parts: mpsc::Receiver<Result<Bytes, BoxError>>,
    /// Bytes announced and not yet sent.
    remaining: u64,
}

impl AssembledBody {
    /// A body of `length` bytes, and the sender its parts go down.
    pub fn channel(length: u64) -> (Parts, AssembledBody) {
        // One part waiting: the producer fetches the next slice while this one is sent.
        let (sender, parts) = mpsc::channel(1);
        let body = AssembledBody {
            parts,
            remaining: length,
        };
        (sender, body)
    }
}

/// Why an assembled body failed besides what its producer sent.
#[derive(Debug, thiserror::Error)]
pub enum Misassembled {
    #[error("the sliced body ended {0} bytes short")]
    EndedShort(u64),
    #[error("a part of the sliced body ran {0} bytes past its announced length")]
    Overran(u64),
}

impl Body for AssembledBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        match self.parts.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(part))) => {
                let sent = part.len() as u64;
                if sent > self.remaining {
                    let error: BoxError = Box::new(Misassembled::Overran(sent - self.remaining));
                    self.remaining = 0;
                    return Poll::Ready(Some(Err(error)));
                }
                self.remaining -= sent;
                Poll::Ready(Some(Ok(Frame::data(part))))
            }
            Poll::Ready(Some(Err(error))) => Poll::Ready(Some(Err(error))),
            Poll::Ready(None) => {
                let short = self.remaining;
                Poll::Ready(Some(Err(Box::new(Misassembled::EndedShort(short)))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn the_parts_sent_make_the_body_in_order() {
        let (parts, body) = AssembledBody::channel(6);
        tokio::spawn(async move {
            for part in [&b"abc"[..], b"def"] {
                let _ = parts.send(Ok(Bytes::from_static(part))).await;
            }
        });
        let collected = body.collect().await.expect("a whole body").to_bytes();
        assert_eq!(collected, "abcdef");
    }

    #[tokio::test]
    async fn a_producer_that_stops_early_fails_the_body_rather_than_ending_it() {
        let (parts, body) = AssembledBody::channel(6);
        tokio::spawn(async move {
            let _ = parts.send(Ok(Bytes::from_static(b"abc"))).await;
        });
        let Err(error) = body.collect().await else {
            panic!("a body 3 bytes short was taken whole")
        };
        assert_eq!(error.to_string(), "the sliced body ended 3 bytes short");
    }

    #[tokio::test]
    async fn a_part_past_the_announced_length_fails_the_body() {
        let (parts, body) = AssembledBody::channel(2);
        tokio::spawn(async move {
            let _ = parts.send(Ok(Bytes::from_static(b"abc"))).await;
        });
        let Err(error) = body.collect().await else {
            panic!("a part too long was taken")
        };
        assert!(error.to_string().contains("1 bytes past"), "{error}");
    }
}
