//! Clients for the tests: a pooled HTTP/1.1 client, and raw sockets for what no client would send.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A whole response as the client received it.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The `Cache-Status` field; panics when it is missing, since every response must carry it.
    pub fn cache_status(&self) -> &str {
        self.header("cache-status")
            .unwrap_or_else(|| panic!("response without Cache-Status: {self:?}"))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn is_hit(&self) -> bool {
        has_member(self.cache_status(), "hit")
    }

    pub fn is_stored(&self) -> bool {
        has_member(self.cache_status(), "stored")
    }

    /// The parts of a `multipart/byteranges` body, each as its `Content-Range` and bytes; panics
    /// unless the body is well formed (RFC 9110 section 14.6 and RFC 2046 section 5.1.1).
    pub fn multipart_parts(&self) -> Vec<(String, Vec<u8>)> {
        let content_type = self.header("content-type").expect("a multipart type");
        let boundary = content_type
            .strip_prefix("multipart/byteranges; boundary=")
            .unwrap_or_else(|| panic!("not multipart/byteranges: {content_type}"));
        let delimiter = format!("\r\n--{boundary}");
        let find = |haystack: &[u8], needle: &[u8]| {
            haystack
                .windows(needle.len())
                .position(|window| window == needle)
                .unwrap_or_else(|| panic!("{:?} missing", String::from_utf8_lossy(needle)))
        };
        let mut rest = self
            .body
            .strip_prefix(&delimiter.as_bytes()[2..])
            .expect("the body starts with the boundary");
        let mut parts = Vec::new();
        while !rest.starts_with(b"--") {
            rest = rest.strip_prefix(b"\r\n").expect("CRLF after the boundary");
            let head_end = find(rest, b"\r\n\r\n");
            // Field names are case-insensitive (RFC 9110 section 5.1).
            let head = String::from_utf8_lossy(&rest[..head_end]).to_lowercase();
            rest = &rest[head_end + 4..];
            let end = find(rest, delimiter.as_bytes());
            let content_range = head
                .lines()
                .find_map(|line| line.strip_prefix("content-range: "))
                .unwrap_or_else(|| panic!("a part without Content-Range: {head}"))
                .to_owned();
            parts.push((content_range, rest[..end].to_vec()));
            rest = &rest[end + delimiter.len()..];
        }
        assert_eq!(rest, b"--\r\n", "the close delimiter ends the body");
        parts
    }
}

/// Whether a `Cache-Status` value has the parameter `member` (`hit`, `stored`, `fwd=miss`,
/// `detail=first-hit`, ...).
pub fn has_member(cache_status: &str, member: &str) -> bool {
    cache_status.split(';').any(|part| part.trim() == member)
}

/// A pooled HTTP/1.1 client.
#[derive(Clone)]
pub struct Client {
    inner: HyperClient<HttpConnector, Full<Bytes>>,
}

impl Default for Client {
    fn default() -> Self {
        Client::new()
    }
}

impl Client {
    pub fn new() -> Client {
        Client {
            inner: HyperClient::builder(TokioExecutor::new()).build_http(),
        }
    }

    pub async fn get(&self, url: &str) -> Reply {
        self.send(Method::GET, url, &[]).await.expect("GET")
    }

    pub async fn get_with(&self, url: &str, headers: &[(&str, &str)]) -> Reply {
        self.send(Method::GET, url, headers).await.expect("GET")
    }

    /// Sends a request and reads the whole body; an error when the response or its body fails.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, &str)],
    ) -> Result<Reply, String> {
        let mut builder = Request::builder().method(method).uri(url);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request = builder.body(Full::new(Bytes::new())).expect("request");
        let response = tokio::time::timeout(Duration::from_secs(10), self.inner.request(request))
            .await
            .map_err(|_| "no response head within 10 s".to_string())?
            .map_err(|e| format!("request failed: {e:?}"))?;
        let (parts, body) = response.into_parts();
        let body = tokio::time::timeout(Duration::from_secs(10), body.collect())
            .await
            .map_err(|_| "body not complete within 10 s".to_string())?
            .map_err(|e| format!("body failed: {e:?}"))?
            .to_bytes();
        Ok(Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }
}

/// Writes `request` on a new connection and reads until the proxy closes it or `wait` passes
/// without new bytes; returns everything received.
pub async fn raw_exchange(addr: SocketAddr, request: &[u8], wait: Duration) -> String {
    String::from_utf8_lossy(&raw_exchange_bytes(addr, request, wait).await).into_owned()
}

/// Like [`raw_exchange`], but returns the bytes exactly as received.
pub async fn raw_exchange_bytes(addr: SocketAddr, request: &[u8], wait: Duration) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let _ = stream.write_all(request).await;
    read_available_bytes(&mut stream, wait).await
}

/// Reads until end-of-file, an error, or `wait` without new bytes.
pub async fn read_available(stream: &mut TcpStream, wait: Duration) -> String {
    String::from_utf8_lossy(&read_available_bytes(stream, wait).await).into_owned()
}

/// Reads bytes until end-of-file, an error, or `wait` without new bytes.
pub async fn read_available_bytes(stream: &mut TcpStream, wait: Duration) -> Vec<u8> {
    let mut received = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match tokio::time::timeout(wait, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => received.extend_from_slice(&chunk[..n]),
        }
    }
    received
}

/// How long until the peer closes `stream` (a read returns end-of-file or an error), reading and
/// discarding whatever it sends; `None` when it is still open after `wait`.
pub async fn closed_within(stream: &mut TcpStream, wait: Duration) -> Option<Duration> {
    let started = std::time::Instant::now();
    let mut chunk = [0u8; 8192];
    loop {
        let left = wait.checked_sub(started.elapsed())?;
        match tokio::time::timeout(left, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => continue,
            Err(_) => return None,
        }
    }
}

/// The status code of the first response in raw bytes, if any.
pub fn raw_status(raw: &str) -> Option<u16> {
    raw.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}
