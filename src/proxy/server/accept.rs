//! One listener's connections: each accepted within the connection limit, its TLS handshake, its
//! HTTP service, served until it ends, goes idle or stalls; and the drain at shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulConnection;
use metrics::{counter, gauge};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use crate::cache::ClientTls;
use crate::config::Http1Server;
use crate::proxy::Proxy;
use crate::proxy::outcome::logged::Logged;
use crate::proxy::request::Writer;
use crate::proxy::request::body::RequestBody;
use crate::proxy::response::respond::ProxyBody;
use crate::proxy::response::stored_head::StoredHead;
use crate::proxy::server::h1;
use crate::proxy::server::idle::{Activity, InProgress, Tracked};
use crate::proxy::server::stall::{BodyProgress, SendTimeout, Sending, StreamExecutor};
use crate::telemetry::{
    CONNECTIONS_IDLE_CLOSED_TOTAL, CONNECTIONS_OPEN, CONNECTIONS_REFUSED_TOTAL,
    TLS_HANDSHAKES_TOTAL,
};

/// hyper refuses read buffers below 8 KiB.
const MIN_HEADER_BUFFER: usize = 8192;

/// Accepts connections on one listener until shutdown, then waits for them within the grace
/// period. With an acceptor, each connection first completes its TLS handshake, in its own task
/// and within `server.header_read_timeout`, so a slow or silent handshake holds only itself.
pub(super) async fn accept_loop(
    listener: std::net::TcpListener,
    tls: Option<TlsAcceptor>,
    proxy: Arc<Proxy>,
    mut shutdown: watch::Receiver<bool>,
    limit: Arc<Semaphore>,
) {
    let listener = match TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%error, "serving thread cannot use its listener");
            return;
        }
    };
    let serving = Serving::new(proxy, tls, shutdown.clone());
    let mut connections = JoinSet::new();

    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of descriptors or similar: back off instead of spinning.
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = Arc::clone(&limit).try_acquire_owned() else {
                    counter!(CONNECTIONS_REFUSED_TOTAL).increment(1);
                    drop(stream);
                    continue;
                };
                serving.spawn(stream, peer, permit, &mut connections);
            }
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    drain(connections, serving.proxy.config().server.shutdown_grace).await;
}

/// What one listener serves its connections with, read from the configuration when it starts.
struct Serving {
    proxy: Arc<Proxy>,
    tls: Option<TlsAcceptor>,
    builder: auto::Builder<StreamExecutor>,
    idle: IdleLimits,
    shutdown: watch::Receiver<bool>,
    /// The native server's settings, when it reads this listener's HTTP/1.1 connections.
    native: Option<h1::conn::Settings>,
}

impl Serving {
    fn new(
        proxy: Arc<Proxy>,
        tls: Option<TlsAcceptor>,
        shutdown: watch::Receiver<bool>,
    ) -> Serving {
        let config = proxy.config();
        let server = &config.server;
        let mut builder = auto::Builder::new(StreamExecutor::new(server.stream_send_timeout));
        builder
            .http1()
            .timer(TokioTimer::new())
            .keep_alive(true)
            .header_read_timeout(server.header_read_timeout)
            .max_buf_size(server.max_header_bytes.max(MIN_HEADER_BUFFER));
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(256)
            .max_header_list_size(u32::try_from(server.max_header_bytes).unwrap_or(u32::MAX));
        let idle = IdleLimits {
            first_request: server.header_read_timeout,
            between_requests: server.idle_timeout,
            send: server.send_timeout,
        };
        // TLS connections stay on hyper: the native server reads plain TCP only.
        let native =
            (server.http1 == Http1Server::Native && tls.is_none()).then_some(h1::conn::Settings {
                max_head_bytes: server.max_header_bytes.max(MIN_HEADER_BUFFER),
                header_read: server.header_read_timeout,
                between_requests: server.idle_timeout,
                send: server.send_timeout,
                sendfile: server.sendfile,
            });
        Serving {
            proxy,
            tls,
            builder,
            idle,
            shutdown,
            native,
        }
    }

    /// Serves one accepted connection as a task of `connections`: over TLS, once its handshake
    /// completes in that task.
    fn spawn(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        permit: OwnedSemaphorePermit,
        connections: &mut JoinSet<()>,
    ) {
        let _ = stream.set_nodelay(true);
        let activity = Activity::new();
        let sending = Sending::new();
        let secure = self.tls.is_some();
        let service = service_fn({
            let proxy = Arc::clone(&self.proxy);
            let activity = Arc::clone(&activity);
            let sending = Arc::clone(&sending);
            move |request: hyper::Request<hyper::body::Incoming>| {
                let in_progress = activity.begin();
                answer(
                    Arc::clone(&proxy),
                    request,
                    in_progress,
                    Arc::clone(&sending),
                    secure,
                    peer,
                )
            }
        });
        let idle = self.idle;
        let shutdown = self.shutdown.clone();
        if let Some(settings) = self.native {
            let proxy = Arc::clone(&self.proxy);
            let builder = self.builder.clone();
            connections.spawn(async move {
                let accepted = tokio::time::Instant::now();
                match sniff(&stream, idle.first_request).await {
                    Some(Sniffed::Http1) => {
                        h1::conn::serve(stream, peer, accepted, proxy, settings, shutdown, permit)
                            .await;
                    }
                    Some(Sniffed::Http2) => {
                        let stream = SendTimeout::new(stream, idle.send, Arc::clone(&sending));
                        let connection = builder
                            .serve_connection(TokioIo::new(stream), service)
                            .into_owned();
                        serve(connection, activity, sending, idle, shutdown, peer, permit).await;
                    }
                    None => {}
                }
            });
            return;
        }
        let stream = SendTimeout::new(stream, idle.send, Arc::clone(&sending));
        let Some(acceptor) = &self.tls else {
            let connection = self
                .builder
                .serve_connection(TokioIo::new(stream), service)
                .into_owned();
            connections.spawn(serve(
                connection, activity, sending, idle, shutdown, peer, permit,
            ));
            return;
        };
        let handshake = acceptor.accept(stream);
        let builder = self.builder.clone();
        connections.spawn(async move {
            let Some(stream) = handshake_within(idle.first_request, handshake, peer).await else {
                return;
            };
            let connection = builder
                .serve_connection(TokioIo::new(stream), service)
                .into_owned();
            serve(connection, activity, sending, idle, shutdown, peer, permit).await;
        });
    }
}

/// Answers one request a hyper connection read (over TLS when `secure`), its response body
/// tracked for the connection's idle timer and send progress.
async fn answer(
    proxy: Arc<Proxy>,
    mut request: hyper::Request<hyper::body::Incoming>,
    in_progress: InProgress,
    sending: Arc<Sending>,
    secure: bool,
    peer: SocketAddr,
) -> Result<hyper::Response<Tracked<Logged<ProxyBody>>>, Infallible> {
    if secure {
        // What the connection is, not what the request claims (its scheme).
        request.extensions_mut().insert(ClientTls);
    }
    // hyper writes a head from a map: no stored head, no 1xx before the answer.
    let mut response = proxy
        .handle(request.map(RequestBody::Hyper), peer, Writer::default())
        .await;
    // No answer to this server carries a stored head; should one, its map is made here.
    StoredHead::into_map(&mut response);
    // Made here, in the stream's task on HTTP/2, to find its stream.
    let progress = BodyProgress::new(sending);
    Ok(response.map(|body| Tracked::new(body, in_progress, progress)))
}

/// What a plain connection's first bytes say it speaks.
enum Sniffed {
    Http1,
    /// The HTTP/2 connection preface, or as much of it as has arrived: for hyper's server, which
    /// tells the two apart itself.
    Http2,
}

/// The HTTP/2 client connection preface (RFC 9113 section 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Looks at a plain connection's first bytes without taking them, within the wait for its first
/// request; `None` (counted as idle when none came in time) when the client sent nothing.
async fn sniff(stream: &TcpStream, limit: Duration) -> Option<Sniffed> {
    let mut first = [0u8; H2_PREFACE.len()];
    match tokio::time::timeout(limit, stream.peek(&mut first)).await {
        Ok(Ok(0)) | Ok(Err(_)) => None,
        Ok(Ok(read)) if H2_PREFACE.starts_with(&first[..read]) => Some(Sniffed::Http2),
        Ok(Ok(_)) => Some(Sniffed::Http1),
        Err(_) => {
            counter!(CONNECTIONS_IDLE_CLOSED_TOTAL).increment(1);
            None
        }
    }
}

/// Completes a TLS handshake within `limit`, counting its outcome; `None` when it failed or did
/// not finish in time.
async fn handshake_within<T>(
    limit: Duration,
    handshake: impl Future<Output = std::io::Result<T>>,
    peer: SocketAddr,
) -> Option<T> {
    match tokio::time::timeout(limit, handshake).await {
        Ok(Ok(stream)) => {
            counter!(TLS_HANDSHAKES_TOTAL, "outcome" => "ok").increment(1);
            Some(stream)
        }
        Ok(Err(error)) => {
            counter!(TLS_HANDSHAKES_TOTAL, "outcome" => "error").increment(1);
            tracing::debug!(%peer, %error, "TLS handshake failed");
            None
        }
        Err(_) => {
            counter!(TLS_HANDSHAKES_TOTAL, "outcome" => "timeout").increment(1);
            tracing::debug!(%peer, "TLS handshake not finished in time");
            None
        }
    }
}

/// Waits for the connections to end within `grace`, then closes those still open.
async fn drain(mut connections: JoinSet<()>, grace: Duration) {
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(grace, drained).await.is_err() {
        tracing::warn!(
            ?grace,
            "connections still open after the shutdown grace period; closing them"
        );
        connections.shutdown().await;
    }
}

/// How long a connection may go without a request in progress, or without sending.
#[derive(Clone, Copy)]
struct IdleLimits {
    /// From accept to the first request (`server.header_read_timeout`).
    first_request: Duration,
    /// From the end of a response to the next request (`server.idle_timeout`).
    between_requests: Duration,
    /// Owing the client bytes and writing none (`server.send_timeout`).
    send: Duration,
}

/// Serves one connection until it ends, it goes idle, it stalls, or the proxy shuts down; these
/// close it gracefully (HTTP/1.1: at once when idle; HTTP/2: GOAWAY, then the streams in progress
/// end) and cut it off if it does not let go.
async fn serve<C>(
    connection: C,
    activity: Arc<Activity>,
    sending: Arc<Sending>,
    idle: IdleLimits,
    mut shutdown: watch::Receiver<bool>,
    peer: SocketAddr,
    permit: OwnedSemaphorePermit,
) where
    C: GracefulConnection,
    C::Error: std::fmt::Display,
{
    gauge!(CONNECTIONS_OPEN).increment(1.0);
    let mut connection = std::pin::pin!(connection);
    let went_idle = activity.idle(idle.first_request, idle.between_requests);
    let mut went_idle = std::pin::pin!(went_idle);
    let stalled = sending.stalled(idle.send);
    let mut stalled = std::pin::pin!(stalled);
    // A client that does not let go after GOAWAY or a close is cut off after this.
    let mut cut_off = std::pin::pin!(tokio::time::sleep(Duration::MAX));
    let mut closing = false;
    loop {
        // Biased: the connection first, since it is what wakes this task nearly every time (and
        // an unbiased select draws a random number on every poll to pick an order).
        tokio::select! {
            biased;
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%peer, error = %error, "connection ended with an error");
                }
                break;
            }
            () = &mut went_idle, if !closing => {
                counter!(CONNECTIONS_IDLE_CLOSED_TOTAL).increment(1);
                connection.as_mut().graceful_shutdown();
                closing = true;
                cut_off.as_mut().reset(tokio::time::Instant::now() + idle.first_request);
            }
            () = &mut stalled, if !closing => {
                tracing::debug!(%peer, timeout = ?idle.send, "client took no bytes; closing");
                connection.as_mut().graceful_shutdown();
                closing = true;
                // A client that took nothing for the limit gets as long again to take the GOAWAY.
                cut_off.as_mut().reset(tokio::time::Instant::now() + idle.send);
            }
            _ = shutdown.changed(), if !closing => {
                connection.as_mut().graceful_shutdown();
                closing = true;
            }
            () = &mut cut_off, if closing => break,
        }
    }
    gauge!(CONNECTIONS_OPEN).decrement(1.0);
    drop(permit);
}
