//! The synthetic origin: deterministic objects of any size, counted, with faults on command.
//!
//! # Paths
//! - `GET|HEAD /obj/<key>?size=N`: N deterministic bytes for `<key>` (percent-decoded), with
//!   `Cache-Control: public, max-age=<max_age>`, a strong `ETag` derived from key and size, a fixed
//!   `Last-Modified` ([`LAST_MODIFIED`]), `Content-Length`, and `X-Origin-Count` (how many requests
//!   for this key the origin has seen, this one included). A request whose `If-None-Match` matches
//!   the ETag, or (without `If-None-Match`) whose `If-Modified-Since` is not earlier than
//!   `Last-Modified`, gets `304 Not Modified` with no body. A GET with one `Range: bytes=a-b`
//!   (or `a-`, `-n`) within the object, and no `If-Range` other than its ETag, gets a 206 of
//!   those bytes (RFC 9110 section 14), as a file server or object store answers it.
//! - Any other path (not under `/_origin/`) is an object whose key is the whole path and query,
//!   of `default_size` bytes.
//! - `GET /_origin/stats`: `{"requests": n, "bytes": b, "taken_bytes": t}`: objects requested,
//!   body bytes answered (counted when the answer starts) and body bytes the connections took
//!   (counted chunk by chunk: less than `bytes` when a client hangs up before the end).
//! - `GET /_origin/count/<key>`: the number of requests for `<key>`.
//!
//! # Query parameters of `/obj/<key>` that change the response
//! - `status=N`: answer with status N (same headers and body); conditionals apply only to 200.
//! - `cc=<url-encoded value>`: this `Cache-Control` instead of the default; `cc=` sends none.
//! - `vary=<header name>`: adds `Vary: <name>`; body and ETag become those of the key
//!   `<key>|<value of that request header>`, so each variant has its own bytes.
//! - `etag=<value>`: this ETag (quoted if given bare).
//! - `tag=<value>`: adds `Surrogate-Key: <value>` (tags for purge by tag, space-separated).
//! - `delay-ms=N`: waits N ms before answering.
//! - `fault=reset-mid-body`: head and half the body, then a TCP reset.
//! - `fault=short-body`: head with the full Content-Length and half the body, then close.
//! - `fault=bad-chunked`: `Transfer-Encoding: chunked`, one good chunk, then a chunk-size line
//!   that is not hexadecimal, then close.
//! - `fault=silence`: reads the request and never answers (the connection stays open).
//! - `fault=trickle`: head and the first 16 body bytes, then stalls forever.
//!
//! Faults are per request, also on a reused keep-alive connection (the `fault` module says how).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use dashmap::DashMap;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

mod object;

use object::ObjectRequest;
pub use object::stored_head_bytes;

use super::TrafficError;
use super::fault::{Fault, FaultStream, Takeover};
use super::object_path::{OBJECT_PREFIX, decode_key};
use super::pattern::OriginBody;

/// `Last-Modified` of every object: 2015-01-01T00:00:00Z.
pub const LAST_MODIFIED: &str = "Thu, 01 Jan 2015 00:00:00 GMT";
const LAST_MODIFIED_UNIX: u64 = 1_420_070_400;

/// Settings of the synthetic origin.
#[derive(Debug, Clone)]
pub struct OriginOptions {
    /// Where to listen; port 0 picks a free one. Default: `127.0.0.1:0`.
    pub listen: SocketAddr,
    /// `max-age` of the default `Cache-Control`, in seconds. Default: 3600.
    pub max_age: u64,
    /// Size of objects named by a path other than `/obj/<key>`. Default: 1024.
    pub default_size: u64,
}

impl Default for OriginOptions {
    fn default() -> Self {
        OriginOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            max_age: 3600,
            default_size: 1024,
        }
    }
}

/// What reached the origin.
#[derive(Debug, Default)]
pub struct OriginStats {
    requests: AtomicU64,
    bytes: AtomicU64,
    taken: Arc<AtomicU64>,
    per_key: DashMap<String, u64>,
}

impl OriginStats {
    /// Object requests received (stats endpoints excluded).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Object requests received for `key`.
    pub fn requests_for(&self, key: &str) -> u64 {
        self.per_key.get(key).map_or(0, |count| *count)
    }

    /// Body bytes the origin has sent (or started to send, for faults).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Object body bytes the connections took, chunk by chunk: as [`Self::bytes`] for answers
    /// read to their end, and only what was taken of one whose client hung up early (a proxy
    /// that drops a large 200 to fetch it in slices instead).
    pub fn taken_bytes(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }

    /// The counter of [`Self::taken_bytes`], for a body to count into.
    fn taken(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.taken)
    }

    /// Counts one request for `key`; returns the count for `key` including it.
    fn record(&self, key: &str) -> u64 {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut count = self.per_key.entry(key.to_owned()).or_insert(0);
        *count += 1;
        *count
    }
}

/// A running origin; dropping it stops the origin as well.
#[derive(Debug)]
pub struct OriginHandle {
    pub addr: SocketAddr,
    pub stats: Arc<OriginStats>,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl OriginHandle {
    /// The base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, drops every open connection, and waits until that is done.
    pub async fn shutdown(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        let _ = (&mut self.task).await;
    }
}

/// Starts the origin on its own task in the current tokio runtime.
pub async fn start_origin(opts: OriginOptions) -> std::io::Result<OriginHandle> {
    let listener = TcpListener::bind(opts.listen).await?;
    let addr = listener.local_addr()?;
    let stats = Arc::new(OriginStats::default());
    let state = Arc::new(OriginState {
        opts,
        stats: Arc::clone(&stats),
    });
    let (shutdown, stop) = oneshot::channel();
    let task = tokio::spawn(accept_loop(listener, state, stop));
    Ok(OriginHandle {
        addr,
        stats,
        shutdown: Some(shutdown),
        task,
    })
}

/// Command line of `bloomgate origin`.
#[derive(Debug, Clone, clap::Args)]
pub struct OriginArgs {
    /// Address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub listen: SocketAddr,
    /// max-age of every object's Cache-Control, in seconds.
    #[arg(long, default_value_t = 3600)]
    pub max_age: u64,
    #[arg(
        long,
        default_value_t = 1024,
        value_parser = crate::config::parse_size,
        help = "Size of objects named by a path other than /obj/<key>?size=N (bytes, or with a unit as in the config file: 64KiB)"
    )]
    pub default_size: u64,
}

/// Runs `bloomgate origin` until Ctrl-C or SIGTERM.
pub async fn run(args: OriginArgs) -> Result<(), TrafficError> {
    let opts = OriginOptions {
        listen: args.listen,
        max_age: args.max_age,
        default_size: args.default_size,
    };
    let origin = start_origin(opts)
        .await
        .map_err(|source| TrafficError::Listen {
            addr: args.listen,
            source,
        })?;
    println!("origin listening on {}", origin.url());
    super::wait_for_stop_signal().await?;
    let stats = Arc::clone(&origin.stats);
    origin.shutdown().await;
    println!(
        "origin served {} requests, {} body bytes",
        stats.requests(),
        stats.bytes()
    );
    Ok(())
}

struct OriginState {
    opts: OriginOptions,
    stats: Arc<OriginStats>,
}

async fn accept_loop(
    listener: TcpListener,
    state: Arc<OriginState>,
    mut stop: oneshot::Receiver<()>,
) {
    // Dropping the set at the end aborts the connections still open (stalled, silent, idle).
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    connections.spawn(serve_connection(tcp, Arc::clone(&state)));
                }
                Err(error) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(%error, "origin: accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_connection(tcp: TcpStream, state: Arc<OriginState>) {
    let _ = tcp.set_nodelay(true);
    let takeover = Arc::new(Takeover::default());
    let io = TokioIo::new(FaultStream::new(tcp, Arc::clone(&takeover)));
    let service =
        service_fn(move |request| respond(request, Arc::clone(&state), Arc::clone(&takeover)));
    let served = http1::Builder::new()
        .timer(TokioTimer::new())
        // A caching proxy keeps idle pooled connections; do not close them under it.
        .header_read_timeout(None)
        .keep_alive(true)
        .serve_connection(io, service)
        .await;
    if let Err(error) = served {
        tracing::debug!(%error, "origin: connection ended with an error");
    }
}

async fn respond(
    request: Request<Incoming>,
    state: Arc<OriginState>,
    takeover: Arc<Takeover>,
) -> Result<Response<OriginBody>, Infallible> {
    let path = request.uri().path();
    if let Some(endpoint) = path.strip_prefix("/_origin/") {
        return Ok(stats_endpoint(endpoint, &state.stats));
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return Ok(plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "origin: only GET and HEAD\n",
        ));
    }
    let object = match path.strip_prefix(OBJECT_PREFIX) {
        Some(encoded) => ObjectRequest::parse(encoded, request.uri().query().unwrap_or("")),
        None => Ok(ObjectRequest::plain(
            request
                .uri()
                .path_and_query()
                .map_or(path, |pq| pq.as_str())
                .to_owned(),
            state.opts.default_size,
        )),
    };
    let object = match object {
        Ok(object) => object,
        Err(message) => {
            return Ok(plain(
                StatusCode::BAD_REQUEST,
                format!("origin: {message}\n"),
            ));
        }
    };
    let count = state.stats.record(&object.key);
    if let Some(delay) = object.delay {
        tokio::time::sleep(delay).await;
    }
    if object.fault == Some(Fault::Silence) {
        return std::future::pending().await;
    }
    Ok(object.respond(&request, &state, count, &takeover))
}

fn stats_endpoint(endpoint: &str, stats: &OriginStats) -> Response<OriginBody> {
    if endpoint == "stats" {
        let json = serde_json::json!({
            "requests": stats.requests(),
            "bytes": stats.bytes(),
            "taken_bytes": stats.taken_bytes(),
        });
        let mut response = plain(StatusCode::OK, format!("{json}\n"));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return response;
    }
    if let Some(encoded) = endpoint.strip_prefix("count/") {
        return match decode_key(encoded) {
            Some(key) => plain(StatusCode::OK, format!("{}\n", stats.requests_for(&key))),
            None => plain(
                StatusCode::BAD_REQUEST,
                format!("origin: bad percent-encoding in key {encoded:?}\n"),
            ),
        };
    }
    plain(
        StatusCode::NOT_FOUND,
        "origin: unknown endpoint; try /_origin/stats or /_origin/count/<key>\n",
    )
}

fn plain(status: StatusCode, text: impl Into<Bytes>) -> Response<OriginBody> {
    let mut response = Response::new(OriginBody::text(text));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
