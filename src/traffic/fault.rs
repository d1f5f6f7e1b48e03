//! Origin faults: misbehaviour on command, including the kinds hyper would never produce.
//!
//! A connection's stream is a [`FaultStream`]. To break HTTP on purpose (a reset, a short body,
//! broken chunked framing), the request's handler leaves a [`RawResponse`] in the connection's
//! [`Takeover`] slot; the next write hyper makes (its own response) is replaced by those raw
//! bytes, after which the connection is closed or reset and hyper sees a write error.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use std::future::Future;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Sleep;

/// How long a reset waits after its last write. A reset discards whatever the kernel has not yet
/// sent, so without this pause the peer could see the reset before the bytes that precede it.
const RESET_GRACE: Duration = Duration::from_millis(50);

/// A misbehaviour asked for with `?fault=<name>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Sends the head and half the body, then resets the connection (TCP RST).
    ResetMidBody,
    /// Sends the head with the full Content-Length and half the body, then closes (FIN).
    ShortBody,
    /// Accepts the request and never answers.
    Silence,
    /// Sends the head and the first [`Fault::TRICKLE_BYTES`] bytes of the body, then stalls
    /// forever.
    Trickle,
    /// Sends a chunked body whose second chunk-size line is not hexadecimal, then closes.
    BadChunked,
}

impl Fault {
    /// How many body bytes [`Fault::Trickle`] sends before it stalls.
    pub const TRICKLE_BYTES: u64 = 16;

    pub fn parse(name: &str) -> Option<Fault> {
        Some(match name {
            "reset-mid-body" => Fault::ResetMidBody,
            "short-body" => Fault::ShortBody,
            "silence" => Fault::Silence,
            "trickle" => Fault::Trickle,
            "bad-chunked" => Fault::BadChunked,
            _ => return None,
        })
    }
}

/// How a raw response ends its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawEnding {
    /// Close normally (FIN): the peer sees the end of the stream.
    Close,
    /// Reset (RST, SO_LINGER 0): the peer sees "connection reset".
    Reset,
}

/// Bytes to write in place of hyper's response, and how to end the connection afterwards.
#[derive(Debug)]
pub struct RawResponse {
    pub bytes: Bytes,
    pub ending: RawEnding,
}

/// The slot through which a request handler takes over its connection.
#[derive(Debug, Default)]
pub struct Takeover(Mutex<Option<RawResponse>>);

impl Takeover {
    /// Makes the connection write `response` instead of the next response hyper writes.
    pub fn set(&self, response: RawResponse) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(response);
    }

    fn take(&self) -> Option<RawResponse> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// A TCP stream whose writes a request handler can take over (see the module doc).
pub struct FaultStream {
    tcp: TcpStream,
    takeover: Arc<Takeover>,
    active: Option<RawResponse>,
    grace: Option<Pin<Box<Sleep>>>,
}

impl FaultStream {
    pub fn new(tcp: TcpStream, takeover: Arc<Takeover>) -> Self {
        FaultStream {
            tcp,
            takeover,
            active: None,
            grace: None,
        }
    }

    /// Writes the raw response, if one was asked for; then fails so that hyper drops the connection.
    fn poll_raw(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.active.is_none() {
            self.active = self.takeover.take();
        }
        let Some(raw) = self.active.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        while raw.bytes.has_remaining() {
            let written = ready!(Pin::new(&mut self.tcp).poll_write(cx, &raw.bytes))?;
            raw.bytes.advance(written);
        }
        if raw.ending == RawEnding::Reset {
            let grace = self
                .grace
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(RESET_GRACE)));
            ready!(grace.as_mut().poll(cx));
            self.tcp.set_zero_linger()?;
        }
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "origin fault: connection ended on purpose",
        )))
    }
}

impl AsyncRead for FaultStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for FaultStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_raw(cx))?;
        Pin::new(&mut this.tcp).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_raw(cx))?;
        Pin::new(&mut this.tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}
