//! A request body read off a native connection: delimited by its length or chunked, handed to
//! the phases' channel as they ask for it, and what the response did not need discarded after it.

use std::pin::pin;

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncReadExt;
use tokio::net::tcp::ReadHalf;
use tokio::sync::{mpsc, oneshot};

use super::chunked::{ChunkedDecoder, Decoded};
use super::conn::READ_CHUNK;
use super::parse::BodyFraming;
use crate::proxy::request::body::{BodyError, BodySender, NativeBody};

/// The largest trailer section of a chunked request body (hyper's default for its own).
const MAX_TRAILER_BYTES: usize = 16 << 10;

/// The most pieces of an unread request body discarded after its response (each at most one
/// socket read): past it the connection closes instead.
const DRAIN_STEPS: usize = 64;

/// The body the phases read for a request framed by `framing`, and the connection's side of it
/// (`None` when it has no bytes to read).
pub(super) fn request_body(framing: BodyFraming) -> (NativeBody, Option<Feed>) {
    match framing {
        BodyFraming::Empty | BodyFraming::Length(0) => (NativeBody::empty(), None),
        BodyFraming::Length(length) => {
            let (body, sender) = NativeBody::channel(Some(length));
            (body, Some(Feed::new(sender, Reader::Length(length))))
        }
        BodyFraming::Chunked => {
            let (body, sender) = NativeBody::channel(None);
            let decoder = ChunkedDecoder::new(MAX_TRAILER_BYTES);
            (body, Some(Feed::new(sender, Reader::Chunked(decoder))))
        }
    }
}

/// Progress with the request body, if it has one still to read (see [`Feed::advance`]).
pub(super) async fn advance(
    feed: &mut Option<Feed>,
    read: &mut ReadHalf<'_>,
    buf: &mut BytesMut,
) -> bool {
    match feed {
        Some(feed) if feed.active() => feed.advance(read, buf).await,
        _ => std::future::pending().await,
    }
}

/// How a request body is delimited, and how much of it is still to come.
enum Reader {
    Length(u64),
    Chunked(ChunkedDecoder),
}

/// What a reader took from the front of the buffer.
enum Taken {
    Data(Bytes),
    NeedMore,
    Done,
}

impl Reader {
    fn take(&mut self, buf: &mut BytesMut) -> Result<Taken, BodyError> {
        match self {
            Reader::Length(0) => Ok(Taken::Done),
            Reader::Length(_) if buf.is_empty() => Ok(Taken::NeedMore),
            Reader::Length(remaining) => {
                let length = usize::try_from(*remaining)
                    .unwrap_or(usize::MAX)
                    .min(buf.len());
                *remaining -= length as u64;
                Ok(Taken::Data(buf.split_to(length).freeze()))
            }
            Reader::Chunked(decoder) => match decoder.decode(buf) {
                Ok(Decoded::Data(data)) => Ok(Taken::Data(data)),
                Ok(Decoded::NeedMore) => Ok(Taken::NeedMore),
                Ok(Decoded::Done) => Ok(Taken::Done),
                Err(error) => Err(BodyError::Chunked(error)),
            },
        }
    }
}

/// Where a request body stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FeedState {
    /// No phase has asked for it yet.
    Unasked,
    /// Asked for (or dropped unread after the head went out): read as the phase takes it.
    Reading,
    /// Read to its end: the connection may read the next head.
    Done,
    /// Cut short or malformed: the connection closes after the response.
    Failed,
}

/// The connection's side of one request body: reads it off the socket into the phase's channel.
pub(super) struct Feed {
    reader: Reader,
    /// `None` once the phases dropped the body: what is left is read and discarded.
    chunks: Option<mpsc::Sender<Result<Bytes, BodyError>>>,
    wanted: Option<oneshot::Receiver<()>>,
    state: FeedState,
}

impl Feed {
    fn new(sender: BodySender, reader: Reader) -> Feed {
        Feed {
            reader,
            chunks: Some(sender.chunks),
            wanted: Some(sender.wanted),
            state: FeedState::Unasked,
        }
    }

    pub(super) fn active(&self) -> bool {
        matches!(self.state, FeedState::Unasked | FeedState::Reading)
    }

    pub(super) fn is_wanted(&self) -> bool {
        self.state != FeedState::Unasked
    }

    /// Makes progress with the body: resolves with true the moment the phases first ask for it
    /// (the caller then sends `100 Continue` if the client expects it).
    pub(super) async fn advance(&mut self, read: &mut ReadHalf<'_>, buf: &mut BytesMut) -> bool {
        match self.state {
            FeedState::Unasked => self.wanted().await,
            FeedState::Reading => {
                self.step(read, buf).await;
                false
            }
            FeedState::Done | FeedState::Failed => std::future::pending().await,
        }
    }

    /// Resolves when the phases first poll the body (true) or drop it unread (false).
    async fn wanted(&mut self) -> bool {
        let Some(wanted) = self
            .wanted
            .as_mut()
            .filter(|_| self.state == FeedState::Unasked)
        else {
            return std::future::pending().await;
        };
        let asked = wanted.await.is_ok();
        self.wanted = None;
        if asked {
            self.state = FeedState::Reading;
        } else {
            // Dropped unread: discarded, if it must be read at all, once the response is out.
            self.chunks = None;
        }
        asked
    }

    /// One piece of the body handed on (or discarded), or its end or failure recorded. Cancel
    /// safe: bytes leave the buffer only with a place to put them.
    async fn step(&mut self, read: &mut ReadHalf<'_>, buf: &mut BytesMut) {
        if self.state != FeedState::Reading {
            return std::future::pending().await;
        }
        // An owned permit: the feed's state changes while it is held.
        let permit = match self.chunks.clone() {
            Some(chunks) => chunks.reserve_owned().await.ok(),
            None => None,
        };
        loop {
            match self.reader.take(buf) {
                Ok(Taken::Data(data)) => {
                    if let Some(permit) = permit {
                        permit.send(Ok(data));
                    }
                    return;
                }
                Ok(Taken::Done) => {
                    drop(permit);
                    self.finish(FeedState::Done);
                    return;
                }
                Ok(Taken::NeedMore) => {}
                Err(error) => {
                    if let Some(permit) = permit {
                        permit.send(Err(error));
                    }
                    self.finish(FeedState::Failed);
                    return;
                }
            }
            buf.reserve(READ_CHUNK);
            let failure = match read.read_buf(buf).await {
                Ok(0) => BodyError::Truncated { read: 0 },
                Ok(_) => continue,
                Err(error) => BodyError::Io(error),
            };
            if let Some(permit) = permit {
                permit.send(Err(failure));
            }
            self.finish(FeedState::Failed);
            return;
        }
    }

    fn finish(&mut self, state: FeedState) {
        self.state = state;
        self.chunks = None;
    }

    /// Discards what is left of a body the response did not need, as far as the client has
    /// already sent it (as hyper does); whether the connection may then read another head.
    pub(super) fn drain(&mut self, read: &mut ReadHalf<'_>, buf: &mut BytesMut) -> bool {
        self.chunks = None;
        if self.state == FeedState::Unasked {
            self.state = FeedState::Reading;
        }
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        // A bound on the work one drain may do: a body still streaming in closes the connection.
        let mut steps = DRAIN_STEPS;
        while self.state == FeedState::Reading {
            steps -= 1;
            if steps == 0 {
                return false;
            }
            let step = pin!(self.step(read, buf));
            if step.poll(&mut context).is_pending() {
                return false;
            }
        }
        self.state == FeedState::Done
    }
}
