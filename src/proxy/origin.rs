//! The origin client: a pooled HTTP/1.1 client with connect and first-byte timeouts, and how its
//! failures map to the status a client sees.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use metrics::counter;

use crate::config::OriginConfig;
use crate::telemetry::ORIGIN_REQUESTS_TOTAL;

/// Why the origin gave no usable response head.
#[derive(Debug, thiserror::Error)]
pub enum OriginError {
    #[error("origin {origin}: connection failed: {source}")]
    Connect {
        origin: Uri,
        source: hyper_util::client::legacy::Error,
    },
    #[error("origin {origin}: no response within {timeout:?}")]
    Timeout { origin: Uri, timeout: Duration },
    #[error("origin {origin}: {source}")]
    Protocol {
        origin: Uri,
        source: hyper_util::client::legacy::Error,
    },
}

impl OriginError {
    /// 504 when the origin was too slow, 502 when it failed otherwise (RFC 9110 15.6.3, 15.6.5).
    pub fn status(&self) -> StatusCode {
        match self {
            OriginError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            OriginError::Connect { .. } | OriginError::Protocol { .. } => StatusCode::BAD_GATEWAY,
        }
    }

    fn outcome(&self) -> &'static str {
        match self {
            OriginError::Connect { .. } => "connect_error",
            OriginError::Timeout { .. } => "timeout",
            OriginError::Protocol { .. } => "protocol_error",
        }
    }
}

/// Outcome labels of `bloomgate_origin_requests_total`, registered at start so every series exists.
pub const OUTCOMES: &[&str] = &[
    "2xx",
    "3xx",
    "4xx",
    "5xx",
    "connect_error",
    "timeout",
    "protocol_error",
    "body_error",
];

/// What the proxy sends to the origin: nothing for cacheable requests, the client's body otherwise.
pub type OutgoingBody = BoxBody<Bytes, hyper::Error>;

/// A pooled client bound to one origin.
#[derive(Clone)]
pub struct OriginClient {
    client: Client<HttpConnector, OutgoingBody>,
    base: Uri,
    first_byte_timeout: Duration,
}

impl OriginClient {
    pub fn new(config: &OriginConfig) -> OriginClient {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(config.connect_timeout));
        connector.set_nodelay(true);
        connector.set_keepalive(Some(Duration::from_secs(60)));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(config.pool_idle_timeout)
            .pool_max_idle_per_host(config.pool_max_idle_per_host)
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .build(connector);
        OriginClient {
            client,
            base: config.url.clone(),
            first_byte_timeout: config.first_byte_timeout,
        }
    }

    pub fn base(&self) -> &Uri {
        &self.base
    }

    /// The origin's URI for a client's path and query.
    pub fn uri_for(&self, path_and_query: &str) -> Uri {
        let mut parts = self.base.clone().into_parts();
        parts.path_and_query = path_and_query.parse().ok();
        Uri::from_parts(parts).unwrap_or_else(|_| self.base.clone())
    }

    /// Sends a request and waits for the response head, within the first-byte timeout.
    pub async fn send(
        &self,
        request: Request<OutgoingBody>,
    ) -> Result<Response<Incoming>, OriginError> {
        let result =
            tokio::time::timeout(self.first_byte_timeout, self.client.request(request)).await;
        let outcome = match result {
            Err(_) => Err(OriginError::Timeout {
                origin: self.base.clone(),
                timeout: self.first_byte_timeout,
            }),
            Ok(Err(source)) if source.is_connect() => {
                Err(connect_or_timeout(self.base.clone(), source))
            }
            Ok(Err(source)) => Err(OriginError::Protocol {
                origin: self.base.clone(),
                source,
            }),
            Ok(Ok(response)) => Ok(response),
        };
        let label = match &outcome {
            Ok(response) => status_class(response.status()),
            Err(error) => error.outcome(),
        };
        counter!(ORIGIN_REQUESTS_TOTAL, "outcome" => label).increment(1);
        outcome
    }
}

fn connect_or_timeout(origin: Uri, source: hyper_util::client::legacy::Error) -> OriginError {
    // The connector reports its own timeout as a connect error; a client should see 504 for it.
    let timed_out = std::error::Error::source(&source)
        .map(|cause| cause.to_string().contains("timed out"))
        .unwrap_or(false);
    if timed_out {
        OriginError::Timeout {
            origin,
            timeout: Duration::ZERO,
        }
    } else {
        OriginError::Connect { origin, source }
    }
}

fn status_class(status: StatusCode) -> &'static str {
    match status.as_u16() {
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}
