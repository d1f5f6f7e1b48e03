//! The origin client: a pooled HTTP/1.1 client, plain or over TLS, with connect and first-byte
//! timeouts, and how its failures map to the status a client sees.
//!
//! Each serving thread has a pool of its own, as each nginx worker has its own upstream
//! keep-alive cache: a connection lives on the thread that opened it (its task runs on that
//! thread's runtime) and only that thread's requests use it. One shared pool would hand a
//! connection opened on one thread to a request on another, and every miss would then cross
//! threads twice (the request to the connection's task, the response back), each a futex wake.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper_rustls::{FixedServerNameResolver, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use thread_local::ThreadLocal;

use super::series::{OriginOutcome, series};
use crate::config::OriginConfig;
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
    #[error("origin {origin}: connection failed: {source}")]
    Connect {
        origin: Uri,
        source: hyper_util::client::legacy::Error,
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
    Protocol {
        origin: Uri,
        source: hyper_util::client::legacy::Error,
    },
}

impl OriginError {
    pub fn failure(&self) -> OriginFailure {
        match self {
            OriginError::Timeout { .. } => OriginFailure::Timeout,
            OriginError::Tls { .. } => OriginFailure::Tls,
            OriginError::Connect { .. } | OriginError::Protocol { .. } => OriginFailure::Error,
        }
    }

    fn outcome(&self) -> OriginOutcome {
        match self {
            OriginError::Connect { .. } => OriginOutcome::ConnectError,
            OriginError::Timeout { .. } => OriginOutcome::Timeout,
            OriginError::Tls { .. } => OriginOutcome::TlsError,
            OriginError::Protocol { .. } => OriginOutcome::ProtocolError,
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
}

impl OriginFailure {
    pub fn status(self) -> StatusCode {
        match self {
            OriginFailure::Error | OriginFailure::Tls => StatusCode::BAD_GATEWAY,
            OriginFailure::Timeout => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    pub fn body(self) -> &'static str {
        match self {
            OriginFailure::Error => "origin unavailable\n",
            OriginFailure::Timeout => "origin timed out\n",
            OriginFailure::Tls => "origin TLS handshake failed\n",
        }
    }
}

/// What the proxy sends to the origin: nothing for cacheable requests, the client's body otherwise.
pub type OutgoingBody = BoxBody<Bytes, hyper::Error>;

type Connector = HttpsConnector<HttpConnector>;

/// A pooled client bound to one origin; clones share the pools.
#[derive(Clone)]
pub struct OriginClient {
    /// One client, and so one pool, per thread that sends (see the module docs).
    clients: Arc<ThreadLocal<Client<Connector, OutgoingBody>>>,
    connector: Connector,
    pool_idle_timeout: Duration,
    /// Each thread's share of `origin.pool_max_idle_per_host`.
    pool_max_idle_per_thread: usize,
    base: Uri,
    connect_timeout: Duration,
    first_byte_timeout: Duration,
}

impl OriginClient {
    /// A client for `config.url`; for `https`, its TLS configuration (`origin.ca_file` or the
    /// system's roots) is read here, and an error names the file or key at fault.
    pub fn new(config: &OriginConfig) -> Result<OriginClient, TlsError> {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(config.connect_timeout));
        connector.set_nodelay(true);
        connector.set_keepalive(Some(Duration::from_secs(60)));
        // The TLS layer hands https URLs to the TCP connector.
        connector.enforce_http(false);
        let connector = match config.url.scheme_str() {
            Some("https") => {
                let builder = HttpsConnectorBuilder::new()
                    .with_tls_config(tls::origin_client_config(config.ca_file.as_deref())?)
                    .https_only();
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
            _ => HttpsConnectorBuilder::new()
                .with_tls_config(tls::no_roots_client_config()?)
                .https_or_http()
                .enable_http1()
                .wrap_connector(connector),
        };
        // The serving threads are one per core (see `server`); the idle limit is split among them.
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        Ok(OriginClient {
            clients: Arc::new(ThreadLocal::new()),
            connector,
            pool_idle_timeout: config.pool_idle_timeout,
            pool_max_idle_per_thread: config.pool_max_idle_per_host.div_ceil(threads),
            base: config.url.clone(),
            connect_timeout: config.connect_timeout,
            first_byte_timeout: config.first_byte_timeout,
        })
    }

    /// This thread's client, made on its first request; its connections' tasks run on this
    /// thread's runtime.
    fn client(&self) -> &Client<Connector, OutgoingBody> {
        self.clients.get_or(|| {
            Client::builder(TokioExecutor::new())
                .pool_idle_timeout(self.pool_idle_timeout)
                .pool_max_idle_per_host(self.pool_max_idle_per_thread)
                .pool_timer(TokioTimer::new())
                .timer(TokioTimer::new())
                .build(self.connector.clone())
        })
    }

    pub fn base(&self) -> &Uri {
        &self.base
    }

    /// The origin's URI for a client's path and query.
    pub fn uri_for(&self, path_and_query: PathAndQuery) -> Result<Uri, http::uri::InvalidUriParts> {
        let mut parts = self.base.clone().into_parts();
        parts.path_and_query = Some(path_and_query);
        Uri::from_parts(parts)
    }

    /// Sends a request and waits for the response head, within the first-byte timeout.
    pub async fn send(
        &self,
        request: Request<OutgoingBody>,
    ) -> Result<Response<Incoming>, OriginError> {
        let result =
            tokio::time::timeout(self.first_byte_timeout, self.client().request(request)).await;
        let outcome = match result {
            Err(_) => Err(OriginError::Timeout {
                origin: self.base.clone(),
                waiting: Waiting::FirstByte,
                timeout: self.first_byte_timeout,
            }),
            Ok(Err(source)) if source.is_connect() => Err(self.connect_failed(source)),
            Ok(Err(source)) => Err(OriginError::Protocol {
                origin: self.base.clone(),
                source,
            }),
            Ok(Ok(response)) => Ok(response),
        };
        let label = match &outcome {
            Ok(response) => OriginOutcome::of_status(response.status()),
            Err(error) => error.outcome(),
        };
        series().origin(label).increment(1);
        outcome
    }

    /// Sends a request that may safely be sent twice (a cacheable fetch: GET, no body), retrying
    /// once on a fresh connection when a pooled one turned out to be closed by the origin before
    /// it answered: the race every keep-alive client has with an origin that closes idle
    /// connections (nginx retries the same way on a reused upstream connection).
    pub async fn send_idempotent(
        &self,
        request: impl Fn() -> Request<OutgoingBody>,
    ) -> Result<Response<Incoming>, OriginError> {
        match self.send(request()).await {
            Err(OriginError::Protocol { source, .. }) if closed_before_answering(&source) => {
                tracing::debug!(origin = %self.base, "pooled connection closed by the origin; retrying once");
                self.send(request()).await
            }
            outcome => outcome,
        }
    }

    /// The connector reports its own timeout as a connect error whose cause is an I/O timeout; a
    /// client should see 504 for it. A refused certificate or failed handshake is told apart, so
    /// that the log and the client's 502 say what an operator must fix.
    fn connect_failed(&self, source: hyper_util::client::legacy::Error) -> OriginError {
        let mut cause = std::error::Error::source(&source);
        while let Some(error) = cause {
            if let Some(tls) = rustls_error(error) {
                return OriginError::Tls {
                    origin: self.base.clone(),
                    problem: tls.to_string(),
                };
            }
            if error
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
            {
                return OriginError::Timeout {
                    origin: self.base.clone(),
                    waiting: Waiting::Connect,
                    timeout: self.connect_timeout,
                };
            }
            cause = error.source();
        }
        OriginError::Connect {
            origin: self.base.clone(),
            source,
        }
    }
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

/// Whether a request failed because its connection was closed before any response came back.
fn closed_before_answering(error: &hyper_util::client::legacy::Error) -> bool {
    let mut cause = std::error::Error::source(error);
    while let Some(inner) = cause {
        if let Some(hyper) = inner.downcast_ref::<hyper::Error>() {
            return hyper.is_incomplete_message() || hyper.is_canceled();
        }
        cause = inner.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use http_body_util::{BodyExt, Empty};

    use super::*;
    use crate::config::Config;

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
        let labels = errors.iter().map(OriginError::outcome).chain(statuses);
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
        let mut config = Config::defaults().origin;
        config.url = format!("http://{addr}").parse().expect("url");
        config.connect_timeout = Duration::from_millis(200);
        config.first_byte_timeout = Duration::from_secs(5);
        let client = OriginClient::new(&config).expect("a plain-HTTP client");
        let mut request = Request::new(Empty::<Bytes>::new().map_err(|n| match n {}).boxed());
        *request.uri_mut() = client.uri_for(PathAndQuery::from_static("/")).expect("uri");
        let error = client.send(request).await.expect_err("nothing accepts");
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
}
