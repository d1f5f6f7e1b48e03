//! The origin client: a pooled HTTP/1.1 client, plain or over TLS, with connect and first-byte
//! timeouts, and how its failures map to the status a client sees.
//!
//! Each serving thread has a pool of its own, as each nginx worker has its own upstream
//! keep-alive cache: a connection lives on the thread that opened it (its task runs on that
//! thread's runtime) and only that thread's requests use it. One shared pool would hand a
//! connection opened on one thread to a request on another, and every miss would then cross
//! threads twice (the request to the connection's task, the response back), each a futex wake.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper_rustls::{FixedServerNameResolver, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;

use crate::config::OriginConfig;
use crate::proxy::request::body::BodyError;
use crate::proxy::upstream::pool::{Pools, SendError};
use crate::proxy::upstream::{ErrorKind, Group, Server};
use crate::telemetry::{OriginOutcome, series};
use crate::tls::{self, TlsError};

/// Which wait ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    Connect,
    FirstByte,
}

impl std::fmt::Display for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Waiting::Connect => "no connection",
            Waiting::FirstByte => "no response head",
        })
    }
}

/// Why the origin gave no usable response head.
#[derive(Debug, thiserror::Error)]
pub enum OriginError {
    /// Nothing was sent: every server of the group is out of rotation.
    #[error("upstream {upstream}: every server is out of rotation")]
    NoServer { upstream: Arc<str> },
    #[error("origin {origin}: connection failed: {source}")]
    Connect {
        origin: Uri,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("origin {origin}: {waiting} within {timeout:?}")]
    Timeout {
        origin: Uri,
        waiting: Waiting,
        timeout: Duration,
    },
    #[error("origin {origin}: TLS handshake failed: {problem}")]
    Tls { origin: Uri, problem: String },
    #[error("origin {origin}: {source}")]
    Protocol { origin: Uri, source: hyper::Error },
    /// A 101 to a request that asked for no upgrade (the proxy forwards no `Upgrade`): relayed,
    /// it would tell the client its connection speaks another protocol now (RFC 9110 section
    /// 15.2.2).
    #[error("origin {origin}: 101 Switching Protocols to a request that asked for no upgrade")]
    Switched { origin: Uri },
    /// The client's request body broke its framing or stopped while it was sent: the client's
    /// fault, answered 400 and never held against the server.
    #[error("origin {origin}: {source}")]
    ClientBody { origin: Uri, source: hyper::Error },
}

impl OriginError {
    pub fn failure(&self) -> OriginFailure {
        match self {
            OriginError::NoServer { .. } => OriginFailure::Unavailable,
            OriginError::Timeout { .. } => OriginFailure::Timeout,
            OriginError::Tls { .. } => OriginFailure::Tls,
            OriginError::Connect { .. }
            | OriginError::Protocol { .. }
            | OriginError::Switched { .. } => OriginFailure::Error,
            OriginError::ClientBody { .. } => OriginFailure::ClientBody,
        }
    }

    /// How the request failed at the server; `None` when none was asked or the client failed.
    fn kind(&self) -> Option<ErrorKind> {
        match self {
            OriginError::NoServer { .. } | OriginError::ClientBody { .. } => None,
            OriginError::Connect { .. } => Some(ErrorKind::Connect),
            OriginError::Timeout { .. } => Some(ErrorKind::Timeout),
            OriginError::Tls { .. } => Some(ErrorKind::Tls),
            OriginError::Protocol { .. } | OriginError::Switched { .. } => {
                Some(ErrorKind::Protocol)
            }
        }
    }

    fn outcome(kind: ErrorKind) -> OriginOutcome {
        match kind {
            ErrorKind::Connect => OriginOutcome::ConnectError,
            ErrorKind::Timeout => OriginOutcome::Timeout,
            ErrorKind::Tls => OriginOutcome::TlsError,
            ErrorKind::Protocol => OriginOutcome::ProtocolError,
        }
    }

    /// Whether the request failed before a byte of it was sent: no connection, or no TLS session
    /// (an idempotent request may then go to another server).
    fn before_sending(&self) -> bool {
        match self {
            OriginError::Connect { .. } | OriginError::Tls { .. } => true,
            OriginError::Timeout { waiting, .. } => *waiting == Waiting::Connect,
            OriginError::NoServer { .. }
            | OriginError::Protocol { .. }
            | OriginError::Switched { .. }
            | OriginError::ClientBody { .. } => false,
        }
    }
}

/// How an origin failure reaches the client, written once for every place one can happen: no
/// response head, a body cut short before the head was sent, a response that cannot be forwarded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OriginFailure {
    /// 502 (RFC 9110 section 15.6.3).
    Error,
    /// 504 (RFC 9110 section 15.6.5).
    Timeout,
    /// 502: the origin's certificate was refused, or the handshake failed.
    Tls,
    /// 503 (RFC 9110 section 15.6.4): every server of the group is out of rotation.
    Unavailable,
    /// 400 (RFC 9112 sections 6.3 and 7.1): the client's request body was malformed or cut short
    /// while it was forwarded, before the origin answered.
    ClientBody,
}

impl OriginFailure {
    pub fn status(self) -> StatusCode {
        match self {
            OriginFailure::Error | OriginFailure::Tls => StatusCode::BAD_GATEWAY,
            OriginFailure::Timeout => StatusCode::GATEWAY_TIMEOUT,
            OriginFailure::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            OriginFailure::ClientBody => StatusCode::BAD_REQUEST,
        }
    }

    pub fn body(self) -> &'static str {
        match self {
            OriginFailure::Error => "origin unavailable\n",
            OriginFailure::Timeout => "origin timed out\n",
            OriginFailure::Tls => "origin TLS handshake failed\n",
            OriginFailure::Unavailable => "no origin server available\n",
            OriginFailure::ClientBody => "request body malformed or cut short\n",
        }
    }
}

/// What the proxy sends to the origin: nothing for cacheable requests, the client's body otherwise.
pub type OutgoingBody = BoxBody<Bytes, BodyError>;

pub(super) type Connector = HttpsConnector<HttpConnector>;

/// A pooled client for every server of the configuration; clones share the pools, one per thread
/// that sends and per server (see the module docs and `pool`).
#[derive(Clone)]
pub struct OriginClient {
    pools: Arc<Pools>,
    connect_timeout: Duration,
    first_byte_timeout: Duration,
}

impl OriginClient {
    /// A client for servers reached with `config`'s settings; when `https` (some server is), its
    /// TLS configuration (`origin.ca_file` or the system's roots) is read here, and an error
    /// names the file or key at fault.
    pub fn new(config: &OriginConfig, https: bool) -> Result<OriginClient, TlsError> {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(config.connect_timeout));
        connector.set_nodelay(true);
        connector.set_keepalive(Some(Duration::from_secs(60)));
        // The TLS layer hands https URLs to the TCP connector.
        connector.enforce_http(false);
        // Each server's scheme is its URL's, checked when the configuration was read.
        let connector = match https {
            true => {
                let builder = HttpsConnectorBuilder::new()
                    .with_tls_config(tls::origin_client_config(config.ca_file.as_deref())?)
                    .https_or_http();
                let builder = match &config.tls_server_name {
                    Some(name) => {
                        let name = rustls_pki_types::ServerName::try_from(name.clone())
                            .map_err(|_| TlsError::ServerName(name.clone()))?;
                        builder.with_server_name_resolver(FixedServerNameResolver::new(name))
                    }
                    None => builder,
                };
                builder.enable_http1().wrap_connector(connector)
            }
            // Plain HTTP: the TLS layer is never used, so it needs no roots.
            false => HttpsConnectorBuilder::new()
                .with_tls_config(tls::no_roots_client_config()?)
                .https_or_http()
                .enable_http1()
                .wrap_connector(connector),
        };
        // The serving threads are one per core (see `server`); the idle limit is split among them.
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        // Each thread's share of `origin.pool_max_idle_per_host`.
        let max_idle = config.pool_max_idle_per_host.div_ceil(threads);
        Ok(OriginClient {
            pools: Arc::new(Pools::new(connector, config.pool_idle_timeout, max_idle)),
            connect_timeout: config.connect_timeout,
            first_byte_timeout: config.first_byte_timeout,
        })
    }

    /// Sends a request to `server` and waits for the response head, within the first-byte
    /// timeout; counts it for the server and its health.
    pub async fn send(
        &self,
        server: &Server,
        request: Request<OutgoingBody>,
    ) -> Result<Response<Incoming>, OriginError> {
        let sent = Instant::now();
        let outstanding = server.begin();
        let result = self
            .response_head(server, request, self.first_byte_timeout)
            .await;
        drop(outstanding);
        let outcome = match result {
            Err(error) => Err(error),
            Ok(response) if response.status() == StatusCode::SWITCHING_PROTOCOLS => {
                Err(OriginError::Switched {
                    origin: server.url.clone(),
                })
            }
            // The server that answered goes with the response, for the access log.
            Ok(mut response) => {
                response
                    .extensions_mut()
                    .insert(AnsweredBy(Arc::clone(&server.label)));
                Ok(response)
            }
        };
        let label = match &outcome {
            Ok(response) => {
                server.answered(sent.elapsed());
                OriginOutcome::of_status(response.status())
            }
            Err(error) => match error.kind() {
                Some(kind) => {
                    server.failed(kind);
                    OriginError::outcome(kind)
                }
                // The client's body failed: nothing is held against the server.
                None => OriginOutcome::BodyError,
            },
        };
        series().origin(label).increment(1);
        outcome
    }

    /// Sends a request that is not sent twice (a method other than GET or HEAD, its body
    /// streamed): to one server of `group`, or to none when every one is out of rotation.
    pub async fn send_once(
        &self,
        group: &Group,
        key: &str,
        request: impl FnOnce(&Server) -> Request<OutgoingBody>,
    ) -> Result<Response<Incoming>, OriginError> {
        let server = Arc::clone(group.pick(key, None).ok_or_else(|| no_server(group))?);
        self.send(&server, request(&server)).await
    }

    /// Sends a request that may safely be sent twice (a GET or HEAD without a body) to a server
    /// of `group`, the one `key` picks. When the connection to it fails before a byte was sent,
    /// it goes once to another server of the group; when a pooled connection turns out closed by
    /// the server before it answered (the race every keep-alive client has with a server that
    /// closes idle connections; nginx retries the same way), it goes once more to the same server
    /// on a fresh connection.
    pub async fn send_idempotent(
        &self,
        group: &Group,
        key: &str,
        request: impl Fn(&Server) -> Request<OutgoingBody>,
    ) -> Result<Response<Incoming>, OriginError> {
        let first = Arc::clone(group.pick(key, None).ok_or_else(|| no_server(group))?);
        let error = match self.send_reusing(&first, &request).await {
            Ok(response) => return Ok(response),
            Err(error) => error,
        };
        let retry = error
            .before_sending()
            .then(|| group.pick(key, Some(&first)))
            .flatten();
        let Some(second) = retry.map(Arc::clone) else {
            return Err(error);
        };
        tracing::debug!(%error, server = %second.label, "retrying once on another server");
        self.send_reusing(&second, &request).await
    }

    async fn send_reusing(
        &self,
        server: &Server,
        request: &impl Fn(&Server) -> Request<OutgoingBody>,
    ) -> Result<Response<Incoming>, OriginError> {
        match self.send(server, request(server)).await {
            Err(OriginError::Protocol { source, .. }) if closed_before_answering(&source) => {
                tracing::debug!(server = %server.label, "pooled connection closed by the server; retrying once");
                self.send(server, request(server)).await
            }
            outcome => outcome,
        }
    }

    /// A health probe: GET `uri` (a path of `server`), the status of its answer within
    /// `timeout`. Not counted as a request, nor for passive health.
    pub async fn probe(
        &self,
        server: &Server,
        uri: Uri,
        timeout: Duration,
    ) -> Result<StatusCode, OriginError> {
        let host = uri
            .authority()
            .and_then(|authority| HeaderValue::from_str(authority.as_str()).ok());
        let mut request = Request::new(empty_body());
        *request.uri_mut() = uri;
        if let Some(host) = host {
            request.headers_mut().insert(header::HOST, host);
        }
        request.headers_mut().insert(
            header::USER_AGENT,
            HeaderValue::from_static("bloomgate-health-probe"),
        );
        let response = self.response_head(server, request, timeout).await?;
        // The body is dropped unread: the connection is not reused, which a probe can afford.
        Ok(response.status())
    }

    /// `request` sent to `server` on a pooled connection, its response head within `timeout`; a
    /// failure as the error that says what went wrong: the wait, the connection (or its TLS),
    /// the client's body, or the exchange itself.
    async fn response_head(
        &self,
        server: &Server,
        request: Request<OutgoingBody>,
        timeout: Duration,
    ) -> Result<Response<Incoming>, OriginError> {
        match tokio::time::timeout(timeout, self.pools.send(request)).await {
            Err(_) => Err(OriginError::Timeout {
                origin: server.url.clone(),
                waiting: Waiting::FirstByte,
                timeout,
            }),
            Ok(Err(SendError::Connect(source))) => Err(self.connect_failed(server, source)),
            Ok(Err(SendError::Hyper(source))) if client_body_failed(&source) => {
                Err(OriginError::ClientBody {
                    origin: server.url.clone(),
                    source,
                })
            }
            Ok(Err(SendError::Hyper(source))) => Err(OriginError::Protocol {
                origin: server.url.clone(),
                source,
            }),
            Ok(Ok(response)) => Ok(response),
        }
    }

    /// The connector reports its own timeout as a connect error whose cause is an I/O timeout; a
    /// client should see 504 for it. A refused certificate or failed handshake is told apart, so
    /// that the log and the client's 502 say what an operator must fix.
    fn connect_failed(
        &self,
        server: &Server,
        source: Box<dyn std::error::Error + Send + Sync>,
    ) -> OriginError {
        for error in causes(source.as_ref()) {
            if let Some(tls) = rustls_error(error) {
                return OriginError::Tls {
                    origin: server.url.clone(),
                    problem: tls.to_string(),
                };
            }
            if error
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
            {
                return OriginError::Timeout {
                    origin: server.url.clone(),
                    waiting: Waiting::Connect,
                    timeout: self.connect_timeout,
                };
            }
        }
        OriginError::Connect {
            origin: server.url.clone(),
            source,
        }
    }
}

/// The server that answered, as a response's extension (for the access log).
#[derive(Clone, Debug)]
pub struct AnsweredBy(pub Arc<str>);

fn no_server(group: &Group) -> OriginError {
    OriginError::NoServer {
        upstream: Arc::clone(&group.name),
    }
}

fn empty_body() -> OutgoingBody {
    http_body_util::Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed()
}

/// The rustls error inside a connect error, if the TLS handshake is what failed. tokio-rustls
/// wraps it in an io::Error and hyper-rustls wraps that in another; io::Error's `source` skips
/// over what it wraps, so each layer is opened with `get_ref`.
fn rustls_error<'e>(error: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
    let mut layer = error;
    loop {
        if let Some(tls) = layer.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        let io = layer.downcast_ref::<std::io::Error>()?;
        layer = io.get_ref()?;
    }
}

/// `error` and what it wraps, outermost first.
fn causes<'e>(
    error: &'e (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'e (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(error), |cause| cause.source())
}

/// Whether the request failed because the client's body did (its framing broke, or it stopped).
fn client_body_failed(error: &hyper::Error) -> bool {
    causes(error).any(|cause| cause.is::<BodyError>())
}

/// Whether a request failed because its connection was closed before any response came back.
fn closed_before_answering(error: &hyper::Error) -> bool {
    error.is_incomplete_message() || error.is_canceled()
}

#[cfg(test)]
mod tests {
    use http::uri::PathAndQuery;

    use super::*;
    use crate::config::Config;
    use crate::proxy::upstream::Routing;

    #[test]
    fn every_outcome_label_the_client_produces_is_registered() {
        let origin: Uri = "http://origin.internal".parse().expect("uri");
        let errors = [
            OriginError::Timeout {
                origin: origin.clone(),
                waiting: Waiting::Connect,
                timeout: Duration::from_secs(1),
            },
            OriginError::Tls {
                origin,
                problem: "refused".to_owned(),
            },
        ];
        let statuses = [200, 301, 404, 503]
            .map(|code| OriginOutcome::of_status(StatusCode::from_u16(code).expect("status")));
        let labels = errors
            .iter()
            .filter_map(OriginError::kind)
            .chain(ErrorKind::ALL)
            .map(OriginError::outcome)
            .chain(statuses);
        for label in labels.chain([OriginOutcome::BodyError]) {
            assert!(OriginOutcome::ALL.contains(&label), "{label:?}");
        }
    }

    /// A listener whose accept queue is full: the kernel drops new SYNs, so a connect to it waits
    /// until the connector's timeout.
    fn full_listener() -> (
        socket2::Socket,
        Vec<std::net::TcpStream>,
        std::net::SocketAddr,
    ) {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        let any: std::net::SocketAddr = "127.0.0.1:0".parse().expect("address");
        socket.bind(&any.into()).expect("bind");
        socket.listen(0).expect("listen");
        let addr = socket
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .expect("address");
        let fillers = (0..4)
            .filter_map(|_| {
                std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)).ok()
            })
            .collect();
        (socket, fillers, addr)
    }

    #[tokio::test]
    async fn a_connect_timeout_is_a_504_that_names_its_real_duration() {
        let (_listener, _fillers, addr) = full_listener();
        let mut config = Config::defaults();
        config.origin.connect_timeout = Duration::from_millis(200);
        config.origin.first_byte_timeout = Duration::from_secs(5);
        let (client, routing) = client_for(config, addr);
        let server = &routing.route("site.example", "/").servers[0];
        let error = client
            .send(server, get(server, "/"))
            .await
            .expect_err("nothing accepts");
        assert!(
            matches!(
                error,
                OriginError::Timeout {
                    waiting: Waiting::Connect,
                    timeout,
                    ..
                } if timeout == Duration::from_millis(200)
            ),
            "{error}"
        );
        assert!(error.to_string().contains("200ms"), "{error}");
        assert_eq!(error.failure().status(), StatusCode::GATEWAY_TIMEOUT);
    }

    /// An origin that answers every request on a connection `ok` (`/big`: 1 MiB of `o`), and
    /// counts the connections it accepted and those the proxy closed.
    async fn counting_origin() -> (
        std::net::SocketAddr,
        Arc<std::sync::atomic::AtomicUsize>,
        Arc<std::sync::atomic::AtomicUsize>,
    ) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let connections = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let (counted, closing) = (Arc::clone(&connections), Arc::clone(&closed));
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let closing = Arc::clone(&closing);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 1024];
                    while let Ok(n) = stream.read(&mut chunk).await {
                        if n == 0 {
                            closing.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let big = buf.starts_with(b"GET /big ");
                            buf.drain(..end + 4);
                            let body = match big {
                                true => vec![b'o'; 1 << 20],
                                false => b"ok".to_vec(),
                            };
                            let head = format!(
                                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
                                body.len()
                            );
                            if stream
                                .write_all(&[head.as_bytes(), &body].concat())
                                .await
                                .is_err()
                            {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (addr, connections, closed)
    }

    /// A client and the routing for an origin at `addr`, with `config`'s other settings.
    fn client_for(mut config: Config, addr: std::net::SocketAddr) -> (OriginClient, Routing) {
        config.origin.url = format!("http://{addr}").parse().expect("url");
        let client = OriginClient::new(&config.origin, false).expect("a plain-HTTP client");
        (client, Routing::new(&config, None))
    }

    /// A GET of `path` for `server`.
    fn get(server: &Server, path: &'static str) -> Request<OutgoingBody> {
        let mut request = Request::new(empty_body());
        *request.uri_mut() = server
            .uri_for(PathAndQuery::from_static(path))
            .expect("uri");
        request
            .headers_mut()
            .insert(header::HOST, HeaderValue::from_static("site.example"));
        request
    }

    /// A response's body, read whole.
    async fn read(response: Response<Incoming>) -> Bytes {
        let body = response.into_body().collect().await.expect("body");
        body.to_bytes()
    }

    /// The body of a GET of `path` from `server`, read whole.
    async fn fetch(client: &OriginClient, server: &Server, path: &'static str) -> Bytes {
        let response = client
            .send(server, get(server, path))
            .await
            .expect("a response");
        read(response).await
    }

    /// `count` once it reaches `at_least`, or after 5 s.
    async fn until(count: &std::sync::atomic::AtomicUsize, at_least: usize) -> usize {
        use std::sync::atomic::Ordering;
        let deadline = Instant::now() + Duration::from_secs(5);
        while count.load(Ordering::SeqCst) < at_least && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        count.load(Ordering::SeqCst)
    }

    #[tokio::test]
    async fn a_connection_is_lent_again_once_its_response_is_read_and_never_while_it_comes() {
        use std::sync::atomic::Ordering;
        let (addr, connections, _) = counting_origin().await;
        let (client, routing) = client_for(Config::defaults(), addr);
        let server = &routing.route("site.example", "/").servers[0];
        for _ in 0..3 {
            assert_eq!(fetch(&client, server, "/").await, "ok");
            // The connection's task takes its turn to be ready for the next request.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            connections.load(Ordering::SeqCst),
            1,
            "one connection, reused"
        );
        // A response whose body is still on its way holds its connection: the next request
        // gets another, and both go back to the pool. (A body hyper has read whole, as the 2
        // bytes above, frees its connection before it is consumed.)
        let held = client
            .send(server, get(server, "/big"))
            .await
            .expect("a response");
        let other = client
            .send(server, get(server, "/"))
            .await
            .expect("a response");
        assert_eq!(connections.load(Ordering::SeqCst), 2);
        assert_eq!(read(other).await, "ok");
        assert_eq!(read(held).await.len(), 1 << 20);
        tokio::time::sleep(Duration::from_millis(20)).await;
        for _ in 0..4 {
            assert_eq!(fetch(&client, server, "/").await, "ok");
        }
        assert_eq!(connections.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_idle_connection_is_closed_after_the_pool_idle_timeout() {
        use std::sync::atomic::Ordering;
        let (addr, connections, closed) = counting_origin().await;
        let mut config = Config::defaults();
        config.origin.pool_idle_timeout = Duration::from_millis(200);
        let (client, routing) = client_for(config, addr);
        let server = &routing.route("site.example", "/").servers[0];
        assert_eq!(fetch(&client, server, "/").await, "ok");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(closed.load(Ordering::SeqCst), 0, "kept while idle for less");
        // Swept within two timeouts, with no request to look at the pool.
        assert_eq!(until(&closed, 1).await, 1, "closed once idle too long");
        assert_eq!(connections.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn idle_connections_beyond_the_limit_are_closed_and_the_rest_reused() {
        use std::sync::atomic::Ordering;
        let (addr, connections, closed) = counting_origin().await;
        let mut config = Config::defaults();
        // One idle connection per thread, whatever the machine's cores.
        config.origin.pool_max_idle_per_host = 1;
        let (client, routing) = client_for(config, addr);
        let server = &routing.route("site.example", "/").servers[0];
        // Three responses on their way at once: three connections.
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(
                client
                    .send(server, get(server, "/big"))
                    .await
                    .expect("a response"),
            );
        }
        assert_eq!(connections.load(Ordering::SeqCst), 3);
        for response in held {
            assert_eq!(read(response).await.len(), 1 << 20);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        // The next request finds them idle: one is kept and lent, the two beyond the limit close.
        assert_eq!(fetch(&client, server, "/").await, "ok");
        assert_eq!(until(&closed, 2).await, 2);
        assert_eq!(
            connections.load(Ordering::SeqCst),
            3,
            "one of the three reused"
        );
    }
}
