//! One plain-HTTP/1.1 client connection served natively: request heads parsed from a buffer of
//! its own, request bodies handed to the phases as they arrive, responses written in the order of
//! their requests; the header-read, idle and send timeouts, and the close at shutdown.
//!
//! A connection reads the next head only once the previous exchange is over (its response sent,
//! its request body read to the end), so pipelined requests are answered in order and a body is
//! never taken for a request.

use std::io::IoSlice;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::{Method, Response, StatusCode, Version};
use hyper::body::Body;
use metrics::{counter, gauge};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::sync::{OwnedSemaphorePermit, watch};
use tokio::time::Instant;

use super::body::{Feed, advance, request_body};
use super::parse::{self, RequestHead, parse_request};
use super::send::{send, write_all};
use super::write::{Answering, write_head, write_interim, write_refusal};
use crate::cache::disk::InFile;
use crate::proxy::Proxy;
use crate::proxy::request::Writer;
use crate::proxy::request::body::RequestBody;
use crate::proxy::request::interim::{InterimHead, InterimReceiver, InterimSink};
use crate::proxy::response::stored_head::StoredHead;
use crate::telemetry::{CONNECTIONS_IDLE_CLOSED_TOTAL, CONNECTIONS_OPEN};

/// What a socket read asks room for: one read takes what a client usually sends at once.
pub(super) const READ_CHUNK: usize = 8 << 10;

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
    /// `server.sendfile`: a body that names its place in a file is sent from there.
    pub sendfile: bool,
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
        let (body, mut feed) = request_body(framing);
        let expect_continue = expect_continue && !http10;
        let request = request.map(|()| RequestBody::Native(body));
        // RFC 9110 section 15.2: no 1xx to an HTTP/1.0 client.
        let (sink, mut interim) = match http10 {
            true => (None, None),
            false => {
                let (sink, interim) = InterimSink::channel();
                (Some(sink), Some(interim))
            }
        };
        let writer = Writer {
            interim: sink,
            stored_heads: true,
        };
        let handling = Arc::clone(proxy).handle(request, self.peer, writer);
        let Some(response) = self
            .await_response(handling, &mut feed, &mut interim, expect_continue)
            .await
        else {
            return false;
        };
        let answering = Answering {
            head: is_head,
            http10,
            keep_alive: keep_alive && !upgrade && !*self.shutdown.borrow(),
        };
        if !self
            .answer(response, answering, &mut feed, &mut interim)
            .await
        {
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

    /// Runs the phases while the body they ask for is read off the socket (with `100 Continue`
    /// when the client expects it), the origin's interim responses sent as they come. `None` when
    /// a write to the client failed.
    async fn await_response<R>(
        &mut self,
        handling: impl Future<Output = R>,
        feed: &mut Option<Feed>,
        interim: &mut Option<InterimReceiver>,
        expect_continue: bool,
    ) -> Option<R> {
        let mut handling = pin!(handling);
        loop {
            tokio::select! {
                biased;
                response = &mut handling => return Some(response),
                Some(mut head) = next_interim(interim) => {
                    self.out.clear();
                    write_interim(&mut self.out, &mut head);
                    let out = std::mem::take(&mut self.out);
                    let sent =
                        write_all(&mut self.write, &mut [IoSlice::new(&out)], self.settings.send)
                            .await;
                    self.out = out;
                    if sent.is_err() {
                        return None;
                    }
                }
                asked = advance(feed, &mut self.read, &mut self.buf) => {
                    if asked && expect_continue {
                        let continued = b"HTTP/1.1 100 Continue\r\n\r\n";
                        let sent = write_all(
                            &mut self.write,
                            &mut [IoSlice::new(continued)],
                            self.settings.send,
                        )
                        .await;
                        if sent.is_err() {
                            return None;
                        }
                    }
                }
            }
        }
    }

    /// Sends the final response, after the interim ones already come, while the request body goes
    /// on being read. Returns whether the connection may carry another request after it.
    async fn answer<B>(
        &mut self,
        response: Response<B>,
        answering: Answering,
        feed: &mut Option<Feed>,
        interim: &mut Option<InterimReceiver>,
    ) -> bool
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Display,
    {
        let (mut parts, body) = response.into_parts();
        let file = parts
            .extensions
            .remove::<InFile>()
            .filter(|_| self.settings.sendfile);
        self.out.clear();
        // Interim responses the origin sent just before its final one, as when both came in one
        // read, go out in the same write, ahead of it.
        if let Some(interim) = interim {
            while let Some(mut head) = interim.try_recv() {
                write_interim(&mut self.out, &mut head);
            }
        }
        let size = body.size_hint();
        let written = match parts.extensions.get::<StoredHead>() {
            Some(stored) => write_head(&mut self.out, parts.status, stored, &size, answering),
            None => write_head(
                &mut self.out,
                parts.status,
                &parts.headers,
                &size,
                answering,
            ),
        };
        let head = std::mem::take(&mut self.out);
        let sent = {
            let sending = send(
                &mut self.write,
                &head,
                body,
                file,
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
        written.keep_alive
    }
}

/// The next interim response the origin sent, if the connection relays them.
async fn next_interim(interim: &mut Option<InterimReceiver>) -> Option<InterimHead> {
    match interim {
        Some(interim) => Some(interim.recv().await),
        None => std::future::pending().await,
    }
}
