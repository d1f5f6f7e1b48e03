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
//! - `GET /_origin/stats`: `{"requests": n, "bytes": b}`, objects requested and body bytes sent.
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
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use dashmap::DashMap;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

use super::TrafficError;
use super::fault::{Fault, FaultStream, RawEnding, RawResponse, Takeover};
use super::object_path::{OBJECT_PREFIX, decode_key};
use super::pattern::{ObjectChunks, OriginBody, stable_hash};

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

/// An object request with the parameters that shape its response.
#[derive(Debug)]
struct ObjectRequest {
    key: String,
    size: u64,
    fault: Option<Fault>,
    status: StatusCode,
    cache_control: Option<Option<String>>,
    vary: Option<HeaderName>,
    etag: Option<String>,
    /// `Surrogate-Key`: the object's tags.
    tags: Option<String>,
    delay: Option<Duration>,
}

impl ObjectRequest {
    fn plain(key: String, size: u64) -> Self {
        ObjectRequest {
            key,
            size,
            fault: None,
            status: StatusCode::OK,
            cache_control: None,
            vary: None,
            etag: None,
            tags: None,
            delay: None,
        }
    }

    /// Parses `/obj/<encoded key>?<query>`; the error names the bad part.
    fn parse(encoded_key: &str, query: &str) -> Result<Self, String> {
        let key = decode_key(encoded_key)
            .ok_or_else(|| format!("bad percent-encoding in key {encoded_key:?}"))?;
        let mut object = ObjectRequest::plain(key, 0);
        let mut size = None;
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (name, raw) = pair.split_once('=').unwrap_or((pair, ""));
            let value = decode_key(&raw.replace('+', " "))
                .ok_or_else(|| format!("bad percent-encoding in query parameter {name}={raw:?}"))?;
            let bad = || format!("bad query parameter {name}={value:?}");
            match name {
                "size" => size = Some(value.parse::<u64>().map_err(|_| bad())?),
                "fault" => object.fault = Some(Fault::parse(&value).ok_or_else(bad)?),
                "status" => {
                    object.status = value
                        .parse::<u16>()
                        .ok()
                        .and_then(|code| StatusCode::from_u16(code).ok())
                        .ok_or_else(bad)?;
                }
                "cc" => object.cache_control = Some(Some(value).filter(|cc| !cc.is_empty())),
                "vary" => {
                    object.vary = Some(HeaderName::try_from(value.as_str()).map_err(|_| bad())?)
                }
                "etag" if value.starts_with('"') || value.starts_with("W/") => {
                    object.etag = Some(value)
                }
                "etag" => object.etag = Some(format!("\"{value}\"")),
                "tag" => object.tags = Some(value),
                "delay-ms" => {
                    object.delay = Some(Duration::from_millis(value.parse().map_err(|_| bad())?));
                }
                // Other parameters (cache busters, the proxy's own) do not change the object.
                _ => {}
            }
        }
        object.size = size.ok_or_else(|| format!("missing ?size=N for key {:?}", object.key))?;
        Ok(object)
    }

    fn respond(
        &self,
        request: &Request<Incoming>,
        state: &OriginState,
        count: u64,
        takeover: &Takeover,
    ) -> Response<OriginBody> {
        // A variant is a different object: its own bytes and ETag.
        let content_key = match &self.vary {
            Some(name) => {
                let value = request
                    .headers()
                    .get(name)
                    .map_or(&b""[..], HeaderValue::as_bytes);
                format!("{}|{}", self.key, String::from_utf8_lossy(value))
            }
            None => self.key.clone(),
        };
        let etag = self.etag.clone().unwrap_or_else(|| {
            format!(
                "\"{:016x}\"",
                stable_hash(&[content_key.as_bytes(), &self.size.to_le_bytes()])
            )
        });
        let headers = self.headers(state, &etag, count);

        if self.status == StatusCode::OK
            && self.fault.is_none()
            && is_not_modified(request.headers(), &etag)
        {
            let mut response = Response::new(OriginBody::empty());
            *response.status_mut() = StatusCode::NOT_MODIFIED;
            *response.headers_mut() = headers;
            return response;
        }

        let is_head = request.method() == Method::HEAD;
        if self.status == StatusCode::OK
            && self.fault.is_none()
            && !is_head
            && let Some(range) = single_range(request.headers(), self.size, &etag)
        {
            let mut headers = headers;
            let length = range.end - range.start;
            let content_range = format!("bytes {}-{}/{}", range.start, range.end - 1, self.size);
            if let Ok(value) = HeaderValue::from_str(&content_range) {
                headers.insert(header::CONTENT_RANGE, value);
            }
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
            state.stats.bytes.fetch_add(length, Ordering::Relaxed);
            let mut response =
                Response::new(OriginBody::Object(ObjectChunks::range(&content_key, range)));
            *response.status_mut() = StatusCode::PARTIAL_CONTENT;
            *response.headers_mut() = headers;
            return response;
        }
        let chunks = ObjectChunks::new(&content_key, self.size);
        let (body, sent) = match self.fault {
            Some(fault @ (Fault::ResetMidBody | Fault::ShortBody | Fault::BadChunked)) => {
                let (raw, sent) = self.raw_response(fault, &headers, chunks, is_head);
                takeover.set(raw);
                state.stats.bytes.fetch_add(sent, Ordering::Relaxed);
                // Replaced on the wire by the raw bytes; kept well-formed so hyper writes it.
                return Response::new(OriginBody::empty());
            }
            Some(Fault::Trickle) if !is_head => {
                let first = chunks
                    .into_iter()
                    .next()
                    .map(|chunk| chunk.slice(..chunk.len().min(Fault::TRICKLE_BYTES as usize)));
                let sent = first.as_ref().map_or(0, |chunk| chunk.len() as u64);
                (OriginBody::Stall(first), sent)
            }
            _ if is_head => (OriginBody::empty(), 0),
            _ => (OriginBody::Object(chunks), self.size),
        };
        state.stats.bytes.fetch_add(sent, Ordering::Relaxed);
        let mut response = Response::new(body);
        *response.status_mut() = self.status;
        *response.headers_mut() = headers;
        response
    }

    fn headers(&self, state: &OriginState, etag: &str, count: u64) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let cache_control = match &self.cache_control {
            Some(cc) => cc.clone(),
            None => Some(format!("public, max-age={}", state.opts.max_age)),
        };
        let mut insert = |name: HeaderName, value: &str| {
            // Values that are not valid in a header (from a query parameter) are left out.
            if let Ok(value) = HeaderValue::from_str(value) {
                headers.insert(name, value);
            }
        };
        if let Some(cache_control) = cache_control {
            insert(header::CACHE_CONTROL, &cache_control);
        }
        insert(header::ETAG, etag);
        insert(header::LAST_MODIFIED, LAST_MODIFIED);
        insert(header::CONTENT_LENGTH, &self.size.to_string());
        insert(
            HeaderName::from_static("x-origin-count"),
            &count.to_string(),
        );
        if let Some(tags) = &self.tags {
            insert(HeaderName::from_static("surrogate-key"), tags);
        }
        if let Some(vary) = &self.vary {
            headers.insert(header::VARY, HeaderValue::from(vary.clone()));
        }
        headers
    }

    /// The bytes of a deliberately broken response, and how many body bytes they carry.
    fn raw_response(
        &self,
        fault: Fault,
        headers: &HeaderMap,
        mut chunks: ObjectChunks,
        is_head: bool,
    ) -> (RawResponse, u64) {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\n",
            self.status.as_str(),
            self.status.canonical_reason().unwrap_or("")
        );
        for (name, value) in headers {
            if fault == Fault::BadChunked && name == header::CONTENT_LENGTH {
                continue;
            }
            let _ = write!(
                head,
                "{name}: {}\r\n",
                String::from_utf8_lossy(value.as_bytes())
            );
        }
        if fault == Fault::BadChunked {
            head.push_str("transfer-encoding: chunked\r\n");
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        let half = if is_head { 0 } else { self.size / 2 };
        let mut sent = 0;
        match fault {
            Fault::BadChunked => {
                if let Some(chunk) = chunks.next().filter(|_| !is_head) {
                    let chunk = &chunk[..chunk.len().min(1024)];
                    bytes.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                    bytes.extend_from_slice(chunk);
                    bytes.extend_from_slice(b"\r\n");
                    sent = chunk.len() as u64;
                }
                bytes.extend_from_slice(b"zz-not-a-size\r\n");
            }
            _ => {
                for chunk in chunks {
                    let take = (half - sent).min(chunk.len() as u64);
                    bytes.extend_from_slice(&chunk[..take as usize]);
                    sent += take;
                    if sent == half {
                        break;
                    }
                }
            }
        }
        let ending = if fault == Fault::ResetMidBody {
            RawEnding::Reset
        } else {
            RawEnding::Close
        };
        (
            RawResponse {
                bytes: Bytes::from(bytes),
                ending,
            },
            sent,
        )
    }
}

/// RFC 9110 section 13.1: If-None-Match (weak comparison) wins over If-Modified-Since.
/// The one byte range a request's `Range` names within an object of `size` bytes, when it names
/// exactly one and its `If-Range`, if any, is this `etag`; `None`: the whole object is the answer.
fn single_range(headers: &HeaderMap, size: u64, etag: &str) -> Option<std::ops::Range<u64>> {
    if let Some(if_range) = headers.get(header::IF_RANGE)
        && if_range.as_bytes() != etag.as_bytes()
    {
        return None;
    }
    let set = headers
        .get(header::RANGE)?
        .to_str()
        .ok()?
        .strip_prefix("bytes=")?;
    let (first, last) = set.trim().split_once('-')?;
    let range = match (first.parse::<u64>(), last.parse::<u64>()) {
        (Ok(first), Ok(last)) if first <= last => first..(last + 1).min(size),
        (Ok(first), Err(_)) if last.is_empty() => first..size,
        (Err(_), Ok(suffix)) if first.is_empty() && suffix > 0 => size.saturating_sub(suffix)..size,
        _ => return None,
    };
    (range.start < range.end).then_some(range)
}

fn is_not_modified(headers: &HeaderMap, etag: &str) -> bool {
    if let Some(if_none_match) = headers.get(header::IF_NONE_MATCH) {
        let Ok(if_none_match) = if_none_match.to_str() else {
            return false;
        };
        let opaque = |tag: &str| tag.trim().trim_start_matches("W/").to_owned();
        return if_none_match
            .split(',')
            .any(|candidate| candidate.trim() == "*" || opaque(candidate) == opaque(etag));
    }
    let Some(since) = headers
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let last_modified = UNIX_EPOCH + Duration::from_secs(LAST_MODIFIED_UNIX);
    httpdate::parse_http_date(since).is_ok_and(|since: SystemTime| since >= last_modified)
}

fn stats_endpoint(endpoint: &str, stats: &OriginStats) -> Response<OriginBody> {
    if endpoint == "stats" {
        let json = serde_json::json!({ "requests": stats.requests(), "bytes": stats.bytes() });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_range_is_served_and_anything_else_is_the_whole_object() {
        let ranged = |range: &str, if_range: Option<&str>| {
            let mut headers = HeaderMap::new();
            headers.insert(header::RANGE, HeaderValue::from_str(range).unwrap());
            if let Some(tag) = if_range {
                headers.insert(header::IF_RANGE, HeaderValue::from_str(tag).unwrap());
            }
            single_range(&headers, 1000, "\"e\"")
        };
        assert_eq!(ranged("bytes=0-99", None), Some(0..100));
        assert_eq!(ranged("bytes=900-2000", None), Some(900..1000));
        assert_eq!(ranged("bytes=990-", None), Some(990..1000));
        assert_eq!(ranged("bytes=-10", None), Some(990..1000));
        assert_eq!(ranged("bytes=0-9", Some("\"e\"")), Some(0..10));
        assert_eq!(ranged("bytes=0-9", Some("\"other\"")), None);
        assert_eq!(ranged("bytes=0-9,20-29", None), None);
        assert_eq!(ranged("bytes=1000-", None), None);
    }

    #[test]
    fn a_range_of_an_object_is_those_bytes_of_it() {
        let whole = crate::traffic::pattern::object_bytes("k", 300_000);
        for range in [0..10u64, 65_530..65_560, 131_072..300_000, 299_999..300_000] {
            let part: Vec<u8> = ObjectChunks::range("k", range.clone())
                .flat_map(|chunk| chunk.to_vec())
                .collect();
            assert!(
                part[..] == whole[range.start as usize..range.end as usize],
                "{range:?}"
            );
        }
    }

    #[test]
    fn the_last_modified_constants_agree() {
        let parsed = httpdate::parse_http_date(LAST_MODIFIED).unwrap();
        assert_eq!(parsed, UNIX_EPOCH + Duration::from_secs(LAST_MODIFIED_UNIX));
    }

    #[test]
    fn query_parameters_are_parsed_and_bad_ones_named() {
        let object = ObjectRequest::parse(
            "a%20b",
            "size=5&cc=private%2C+max-age%3D1&etag=v1&status=503&tag=a+b",
        )
        .unwrap();
        assert_eq!(object.tags.as_deref(), Some("a b"));
        assert_eq!(object.key, "a b");
        assert_eq!(object.size, 5);
        assert_eq!(
            object.cache_control,
            Some(Some("private, max-age=1".to_owned()))
        );
        assert_eq!(object.etag.as_deref(), Some("\"v1\""));
        assert_eq!(object.status, StatusCode::SERVICE_UNAVAILABLE);
        let error = ObjectRequest::parse("k", "size=5&fault=explode").unwrap_err();
        assert!(error.contains("fault=\"explode\""), "{error}");
        let error = ObjectRequest::parse("k", "").unwrap_err();
        assert!(error.contains("size"), "{error}");
    }
}
