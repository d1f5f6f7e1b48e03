//! A test origin: a hand-written HTTP/1.1 server on 127.0.0.1:0 that answers each path with a
//! programmable reply, counts and records what it receives, and misbehaves on command.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// How a reply goes wrong on the wire.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// Sends the head and half the body, then resets the connection (RST).
    ResetMidBody,
    /// Sends the head and half the body (fewer bytes than Content-Length), then closes (FIN).
    ShortBody,
    /// Reads the request and never answers.
    Silence,
    /// Sends the head, then one body byte per interval.
    Trickle(Duration),
    /// Announces a chunked body and sends a chunk size that is not hexadecimal.
    InvalidChunked,
}

/// What the origin answers on one path.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Waited before the response head is sent.
    pub delay: Duration,
    pub fault: Option<Fault>,
    /// Answer 304 when the request's If-None-Match names this reply's ETag.
    pub answers_304: bool,
    /// Send the body chunked (two chunks) instead of with a Content-Length.
    pub chunked: bool,
}

impl Reply {
    pub fn ok(body: &str) -> Reply {
        Reply {
            status: 200,
            headers: Vec::new(),
            body: body.as_bytes().to_vec(),
            delay: Duration::ZERO,
            fault: None,
            answers_304: false,
            chunked: false,
        }
    }

    pub fn chunked(mut self) -> Reply {
        self.chunked = true;
        self
    }

    pub fn status(mut self, status: u16) -> Reply {
        self.status = status;
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers
            .push((name.to_ascii_lowercase(), value.to_string()));
        self
    }

    pub fn delay(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }

    pub fn fault(mut self, fault: Fault) -> Reply {
        self.fault = Some(fault);
        self
    }

    pub fn answers_304(mut self) -> Reply {
        self.answers_304 = true;
        self
    }

    fn header_value(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One request as the origin received it; header names are lower-cased.
#[derive(Clone, Debug)]
pub struct Received {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct State {
    replies: Mutex<HashMap<String, Reply>>,
    received: Mutex<Vec<Received>>,
}

/// A running test origin; it stops when dropped.
pub struct Origin {
    pub addr: SocketAddr,
    state: Arc<State>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Origin {
    /// Starts an origin on its own thread and runtime, so a proxy shared by several tests (each
    /// with its own runtime) can use it.
    pub fn start() -> Origin {
        let state = Arc::new(State::default());
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::spawn({
            let state = Arc::clone(&state);
            move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("origin runtime");
                runtime.block_on(async move {
                    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind origin");
                    addr_tx
                        .send(listener.local_addr().expect("origin address"))
                        .expect("send origin address");
                    tokio::select! {
                        () = accept_loop(listener, state) => {}
                        _ = stopped => {}
                    }
                });
                // Dropping the runtime closes every connection the origin still holds.
                runtime.shutdown_background();
            }
        });
        let addr = addr_rx.recv().expect("origin started");
        Origin {
            addr,
            state,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sets what `target` (path and query) answers from now on.
    pub fn set(&self, target: &str, reply: Reply) {
        self.state
            .replies
            .lock()
            .expect("replies")
            .insert(target.to_string(), reply);
    }

    /// Requests received for `target` so far.
    pub fn count(&self, target: &str) -> usize {
        self.received(target).len()
    }

    /// The requests received for `target`, oldest first.
    pub fn received(&self, target: &str) -> Vec<Received> {
        self.state
            .received
            .lock()
            .expect("received")
            .iter()
            .filter(|r| r.target == target)
            .cloned()
            .collect()
    }

    /// Stops listening and closes every connection: from now on the origin refuses connections.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An address on loopback where nothing listens.
pub fn refusing_addr() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address")
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(serve_connection(stream, Arc::clone(&state)));
    }
}

async fn serve_connection(mut stream: TcpStream, state: Arc<State>) {
    let mut buffer = Vec::new();
    loop {
        let Some(request) = read_request(&mut stream, &mut buffer).await else {
            return;
        };
        let reply = state
            .replies
            .lock()
            .expect("replies")
            .get(&request.target)
            .cloned()
            .unwrap_or_else(|| Reply::ok("no reply set for this path\n").status(404));
        let close = request
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let head_only = request.method == "HEAD";
        let if_none_match = request.header("if-none-match").map(str::to_string);
        state.received.lock().expect("received").push(request);
        if !reply.delay.is_zero() {
            tokio::time::sleep(reply.delay).await;
        }
        let not_modified = reply.answers_304
            && if_none_match.is_some()
            && if_none_match.as_deref() == reply.header_value("etag");
        if !answer(&mut stream, &reply, head_only, not_modified).await || close {
            return;
        }
    }
}

/// Writes one reply; returns whether the connection can carry another request.
async fn answer(
    stream: &mut TcpStream,
    reply: &Reply,
    head_only: bool,
    not_modified: bool,
) -> bool {
    if matches!(reply.fault, Some(Fault::Silence)) {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        return false;
    }
    let status = if not_modified { 304 } else { reply.status };
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if matches!(reply.fault, Some(Fault::InvalidChunked)) {
        head.push_str("transfer-encoding: chunked\r\n\r\n");
        let _ = stream.write_all(head.as_bytes()).await;
        let _ = stream.write_all(b"5\r\nhello\r\nzz\r\nnot hex\r\n").await;
        let _ = stream.flush().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        return false;
    }
    if reply.chunked && !not_modified && !head_only {
        let half = reply.body.len() / 2;
        head.push_str("transfer-encoding: chunked\r\n\r\n");
        let mut wire = head.into_bytes();
        for part in [&reply.body[..half], &reply.body[half..]] {
            if !part.is_empty() {
                wire.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                wire.extend_from_slice(part);
                wire.extend_from_slice(b"\r\n");
            }
        }
        wire.extend_from_slice(b"0\r\n\r\n");
        return stream.write_all(&wire).await.is_ok() && stream.flush().await.is_ok();
    }
    if !not_modified {
        head.push_str(&format!("content-length: {}\r\n", reply.body.len()));
    }
    head.push_str("\r\n");
    if stream.write_all(head.as_bytes()).await.is_err() {
        return false;
    }
    if not_modified || head_only || status == 204 {
        return stream.flush().await.is_ok();
    }
    let half = reply.body.len() / 2;
    match reply.fault {
        None => stream.write_all(&reply.body).await.is_ok() && stream.flush().await.is_ok(),
        Some(Fault::ResetMidBody) => {
            let _ = stream.write_all(&reply.body[..half]).await;
            let _ = stream.flush().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = stream.set_zero_linger();
            false
        }
        Some(Fault::ShortBody) => {
            let _ = stream.write_all(&reply.body[..half]).await;
            let _ = stream.flush().await;
            let _ = stream.shutdown().await;
            false
        }
        Some(Fault::Trickle(interval)) => {
            for byte in &reply.body {
                if stream.write_all(&[*byte]).await.is_err() || stream.flush().await.is_err() {
                    return false;
                }
                tokio::time::sleep(interval).await;
            }
            true
        }
        Some(Fault::Silence | Fault::InvalidChunked) => false,
    }
}

/// Reads one request head (and a Content-Length body); `None` when the peer closed.
async fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<Received> {
    let head_end = loop {
        if let Some(end) = find(buffer, b"\r\n\r\n") {
            break end;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_string();
    buffer.drain(..head_end + 4);
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_string();
    let target = request_line.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
        .collect();
    let request = Received {
        method,
        target,
        headers,
    };
    let length: usize = request
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if request
        .header("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"))
    {
        loop {
            if let Some(end) = find(buffer, b"0\r\n\r\n") {
                buffer.drain(..end + 5);
                break;
            }
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buffer.extend_from_slice(&chunk[..n]);
        }
    } else {
        while buffer.len() < length {
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buffer.extend_from_slice(&chunk[..n]);
        }
        buffer.drain(..length);
    }
    Some(request)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        304 => "Not Modified",
        404 => "Not Found",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
