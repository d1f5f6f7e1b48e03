//! One plain-HTTP/1.1 client connection served natively: request heads parsed from a buffer of
//! its own, request bodies handed to the phases as they arrive, responses written in the order of
//! their requests; the header-read, idle and send timeouts, and the close at shutdown.
//!
//! A connection reads the next head only once the previous exchange is over (its response sent,
//! its request body read to the end), so pipelined requests are answered in order and a body is
//! never taken for a request.

use std::future::poll_fn;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{Method, StatusCode, Version};
use http_body_util::BodyExt;
use hyper::body::Body;
use metrics::{counter, gauge};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot, watch};
use tokio::time::Instant;

use super::chunked::{ChunkedDecoder, Decoded};
use super::parse::{self, BodyFraming, RequestHead, parse_request};
use super::write::{Answering, Framing, write_head, write_interim, write_refusal};
use crate::proxy::Proxy;
use crate::proxy::request::body::{BodyError, BodySender, NativeBody, RequestBody};
use crate::proxy::request::interim::{InterimHead, InterimSink};
use crate::proxy::server::stall::StallScope;
use crate::telemetry::{CONNECTIONS_IDLE_CLOSED_TOTAL, CONNECTIONS_OPEN};

/// The largest trailer section of a chunked request body (hyper's default for its own).
const MAX_TRAILER_BYTES: usize = 16 << 10;

/// The most pieces of an unread request body discarded after its response (each at most one
/// socket read): past it the connection closes instead.
const DRAIN_STEPS: usize = 64;

/// What a socket read asks room for: one read takes what a client usually sends at once.
const READ_CHUNK: usize = 8 << 10;

/// The limits and timeouts of a native connection, from `[server]`.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// `server.max_header_bytes`, at least 8 KiB as for hyper.
    pub max_head_bytes: usize,
    /// `server.header_read_timeout`: from accept, or from the end of an exchange, to a whole head.
    pub header_read: Duration,
    /// `server.idle_timeout`: from the end of an exchange to the next whole head, when shorter.
    pub between_requests: Duration,
    /// `server.send_timeout`: the longest a socket write may wait.
    pub send: Duration,
}

/// Serves `stream` (accepted at `accepted`) until the client closes it, a timeout ends it, a
/// request cannot be parsed or asks to close, or the proxy shuts down.
pub async fn serve(
    mut stream: TcpStream,
    peer: SocketAddr,
    accepted: Instant,
    proxy: Arc<Proxy>,
    settings: Settings,
    shutdown: watch::Receiver<bool>,
    permit: OwnedSemaphorePermit,
) {
    gauge!(CONNECTIONS_OPEN).increment(1.0);
    let (read, write) = stream.split();
    let mut connection = Connection {
        read,
        write,
        buf: BytesMut::with_capacity(READ_CHUNK),
        out: Vec::with_capacity(1024),
        peer,
        accepted,
        settings,
        shutdown,
        limits: parse::Limits {
            max_headers: parse::DEFAULT_MAX_HEADERS,
            max_head_bytes: settings.max_head_bytes,
        },
    };
    connection.run(&proxy).await;
    let _ = stream.shutdown().await;
    gauge!(CONNECTIONS_OPEN).decrement(1.0);
    drop(permit);
}

struct Connection<'s> {
    read: ReadHalf<'s>,
    write: WriteHalf<'s>,
    /// What the client sent and the server has not yet taken: a head's bytes, body bytes, and
    /// pipelined requests after them.
    buf: BytesMut,
    /// A response head being written.
    out: Vec<u8>,
    peer: SocketAddr,
    accepted: Instant,
    settings: Settings,
    shutdown: watch::Receiver<bool>,
    limits: parse::Limits,
}

/// Why the wait for a request head ended without one.
enum NoHead {
    /// The client closed, went quiet for too long, or the proxy is shutting down.
    Closed,
    /// The bytes are not a request this server takes; answered with this status.
    Refused(StatusCode),
}

impl Connection<'_> {
    async fn run(&mut self, proxy: &Arc<Proxy>) {
        let mut deadline = self.accepted + self.settings.header_read;
        loop {
            let head = match self.read_head(deadline).await {
                Ok(head) => head,
                Err(NoHead::Closed) => return,
                Err(NoHead::Refused(status)) => {
                    self.refuse(status).await;
                    return;
                }
            };
            if !self.exchange(proxy, head).await {
                return;
            }
            // hyper's header-read timer also starts as soon as its connection waits for a head,
            // and so closes a keep-alive connection quiet for that long.
            let quiet = self
                .settings
                .between_requests
                .min(self.settings.header_read);
            deadline = Instant::now() + quiet;
        }
    }

    /// Reads until the buffer holds a whole head, by `deadline`.
    async fn read_head(&mut self, deadline: Instant) -> Result<RequestHead, NoHead> {
        loop {
            match parse_request(&self.buf, &self.limits) {
                Ok(Some((head, length))) => {
                    self.buf.advance(length);
                    return Ok(head);
                }
                Ok(None) => {}
                Err(error) => {
                    tracing::debug!(peer = %self.peer, %error, "request refused");
                    return Err(NoHead::Refused(error.status()));
                }
            }
            let waiting_idle = self.buf.is_empty();
            if waiting_idle && *self.shutdown.borrow() {
                return Err(NoHead::Closed);
            }
            self.buf.reserve(READ_CHUNK);
            tokio::select! {
                read = self.read.read_buf(&mut self.buf) => match read {
                    Ok(0) | Err(_) => return Err(NoHead::Closed),
                    Ok(_) => {}
                },
                () = tokio::time::sleep_until(deadline) => {
                    if waiting_idle {
                        counter!(CONNECTIONS_IDLE_CLOSED_TOTAL).increment(1);
                    }
                    return Err(NoHead::Closed);
                }
                _ = self.shutdown.changed(), if waiting_idle => return Err(NoHead::Closed),
            }
        }
    }

    /// Answers a request the server will not pass on, and closes.
    async fn refuse(&mut self, status: StatusCode) {
        self.out.clear();
        write_refusal(&mut self.out, status);
        let head = std::mem::take(&mut self.out);
        let _ = write_all(
            &mut self.write,
            &mut [IoSlice::new(&head)],
            self.settings.send,
        )
        .await;
        self.out = head;
    }

    /// One request answered. Returns whether the connection may read another.
    async fn exchange(&mut self, proxy: &Arc<Proxy>, head: RequestHead) -> bool {
        let RequestHead {
            request,
            framing,
            keep_alive,
            expect_continue,
            upgrade,
        } = head;
        if request.method() == Method::CONNECT {
            // This proxy tunnels nothing (RFC 9110 section 9.3.6).
            self.refuse(StatusCode::METHOD_NOT_ALLOWED).await;
            return false;
        }
        let http10 = request.version() == Version::HTTP_10;
        let is_head = request.method() == Method::HEAD;
        let (body, mut feed) = match framing {
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
        };
        let expect_continue = expect_continue && !http10;
        let mut request = request.map(|()| RequestBody::Native(body));
        // RFC 9110 section 15.2: no 1xx to an HTTP/1.0 client.
        let mut interim = (!http10).then(|| {
            let (sink, interim) = InterimSink::channel();
            request.extensions_mut().insert(sink);
            interim
        });
        let handling = Arc::clone(proxy).handle(request, self.peer);
        let mut handling = pin!(handling);

        // The phases run while the body they ask for is read off the socket, and the origin's
        // interim responses go out before the final one.
        let response = loop {
            tokio::select! {
                biased;
                response = &mut handling => break response,
                Some(mut head) = next_interim(&mut interim) => {
                    self.out.clear();
                    write_interim(&mut self.out, &mut head);
                    let out = std::mem::take(&mut self.out);
                    let sent =
                        write_all(&mut self.write, &mut [IoSlice::new(&out)], self.settings.send)
                            .await;
                    self.out = out;
                    if sent.is_err() {
                        return false;
                    }
                }
                asked = advance(&mut feed, &mut self.read, &mut self.buf) => {
                    if asked && expect_continue {
                        let continued = b"HTTP/1.1 100 Continue\r\n\r\n";
                        let sent = write_all(
                            &mut self.write,
                            &mut [IoSlice::new(continued)],
                            self.settings.send,
                        )
                        .await;
                        if sent.is_err() {
                            return false;
                        }
                    }
                }
            }
        };

        let (parts, body) = response.into_parts();
        let answering = Answering {
            head: is_head,
            http10,
            keep_alive: keep_alive && !upgrade && !*self.shutdown.borrow(),
        };
        self.out.clear();
        // Interim responses the origin sent just before its final one, as when both came in one
        // read, go out in the same write, ahead of it.
        if let Some(interim) = &mut interim {
            while let Ok(mut head) = interim.try_recv() {
                write_interim(&mut self.out, &mut head);
            }
        }
        let written = write_head(&mut self.out, &parts, &body.size_hint(), answering);
        let head = std::mem::take(&mut self.out);
        let sent = {
            let sending = send(
                &mut self.write,
                &head,
                body,
                written.framing,
                self.settings.send,
            );
            let mut sending = pin!(sending);
            loop {
                let Some(active) = feed.as_mut().filter(|feed| feed.active()) else {
                    break sending.await;
                };
                // Asked for only now, the body cannot be sent `100 Continue` in the middle of
                // the response: a client that waits for one sends it after its own wait or never,
                // and the connection then closes.
                tokio::select! {
                    biased;
                    sent = &mut sending => break sent,
                    _ = active.advance(&mut self.read, &mut self.buf) => {}
                }
            }
        };
        self.out = head;
        if let Err(error) = sent {
            tracing::debug!(peer = %self.peer, %error, "response not sent whole; closing");
            return false;
        }
        if !written.keep_alive {
            return false;
        }
        match feed {
            None => true,
            // A body nobody asked for after `Expect: 100-continue` may be on its way or not: the
            // connection cannot tell where the next request starts.
            Some(feed) if !feed.is_wanted() && expect_continue => false,
            Some(mut feed) => feed.drain(&mut self.read, &mut self.buf),
        }
    }
}

/// The next interim response the origin sent, if the connection relays them.
async fn next_interim(interim: &mut Option<mpsc::Receiver<InterimHead>>) -> Option<InterimHead> {
    match interim {
        Some(interim) => interim.recv().await,
        None => std::future::pending().await,
    }
}

/// Progress with the request body, if it has one still to read (see [`Feed::advance`]).
async fn advance(feed: &mut Option<Feed>, read: &mut ReadHalf<'_>, buf: &mut BytesMut) -> bool {
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
struct Feed {
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

    fn active(&self) -> bool {
        matches!(self.state, FeedState::Unasked | FeedState::Reading)
    }

    fn is_wanted(&self) -> bool {
        self.state != FeedState::Unasked
    }

    /// Makes progress with the body: resolves with true the moment the phases first ask for it
    /// (the caller then sends `100 Continue` if the client expects it).
    async fn advance(&mut self, read: &mut ReadHalf<'_>, buf: &mut BytesMut) -> bool {
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
    fn drain(&mut self, read: &mut ReadHalf<'_>, buf: &mut BytesMut) -> bool {
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

/// Writes a response: its head with the first body bytes in one vectored write when they are
/// ready at once, then the rest of the body in `framing`. An error leaves the connection unusable.
async fn send<B>(
    write: &mut WriteHalf<'_>,
    head: &[u8],
    mut body: B,
    framing: Framing,
    timeout: Duration,
) -> std::io::Result<()>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let mut head = Some(head);
    let mut remaining = match framing {
        Framing::Length(0) => {
            // HEAD, 204, 304 or an empty body: the body is never polled.
            return write_all(
                write,
                &mut [IoSlice::new(head.unwrap_or_default())],
                timeout,
            )
            .await;
        }
        Framing::Length(length) => Some(length),
        Framing::Chunked | Framing::Close => None,
    };
    loop {
        let frame = match head {
            Some(pending) => {
                // A hit's body is ready now and goes out with its head; a miss's head goes first.
                let polled = poll_fn(|cx| Poll::Ready(Pin::new(&mut body).poll_frame(cx))).await;
                match polled {
                    Poll::Ready(frame) => frame,
                    Poll::Pending => {
                        write_all(write, &mut [IoSlice::new(pending)], timeout).await?;
                        head = None;
                        body.frame().await
                    }
                }
            }
            None => body.frame().await,
        };
        let head_slice = head.take().unwrap_or_default();
        let data = match frame {
            None => {
                if remaining.is_some_and(|left| left > 0) {
                    write_all(write, &mut [IoSlice::new(head_slice)], timeout).await?;
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "response body ended before its announced length",
                    ));
                }
                let last: &[u8] = match framing {
                    Framing::Chunked => b"0\r\n\r\n",
                    _ => b"",
                };
                return write_all(
                    write,
                    &mut [IoSlice::new(head_slice), IoSlice::new(last)],
                    timeout,
                )
                .await;
            }
            Some(Err(error)) => {
                write_all(write, &mut [IoSlice::new(head_slice)], timeout).await?;
                return Err(std::io::Error::other(format!(
                    "response body failed: {error}"
                )));
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                // Trailers are not sent: nothing in the proxy's responses announces them.
                Err(_) => {
                    write_all(write, &mut [IoSlice::new(head_slice)], timeout).await?;
                    continue;
                }
            },
        };
        if data.is_empty() {
            write_all(write, &mut [IoSlice::new(head_slice)], timeout).await?;
            continue;
        }
        let data = match &mut remaining {
            Some(left) => {
                // Never more than the head announced: the excess would be read as a response.
                let take = usize::try_from(*left).unwrap_or(usize::MAX).min(data.len());
                *left -= take as u64;
                data.slice(..take)
            }
            None => data,
        };
        match framing {
            Framing::Chunked => {
                let size = format!("{:x}\r\n", data.len());
                let mut slices = [
                    IoSlice::new(head_slice),
                    IoSlice::new(size.as_bytes()),
                    IoSlice::new(&data),
                    IoSlice::new(b"\r\n"),
                ];
                write_all(write, &mut slices, timeout).await?;
            }
            Framing::Length(_) | Framing::Close => {
                write_all(
                    write,
                    &mut [IoSlice::new(head_slice), IoSlice::new(&data)],
                    timeout,
                )
                .await?;
            }
        }
        if remaining == Some(0) {
            return Ok(());
        }
    }
}

/// Writes every slice, each socket write within `timeout` (`server.send_timeout`): a client that
/// takes no byte for that long is given up on.
async fn write_all(
    write: &mut WriteHalf<'_>,
    mut slices: &mut [IoSlice<'_>],
    timeout: Duration,
) -> std::io::Result<()> {
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        let written = match tokio::time::timeout(timeout, write.write_vectored(slices)).await {
            Ok(Ok(0)) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(Ok(written)) => written,
            Ok(Err(error)) => return Err(error),
            Err(_) => {
                StallScope::Connection.count();
                return Err(std::io::ErrorKind::TimedOut.into());
            }
        };
        IoSlice::advance_slices(&mut slices, written);
    }
    Ok(())
}
