//! A test origin: a hand-written HTTP/1.1 server on 127.0.0.1:0 that answers each path with a
//! programmable reply, counts and records what it receives, and misbehaves on command.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

pub use super::refusing::RefusingPort;
use super::refusing::shareable;

/// How a reply goes wrong on the wire: the synthetic origin's faults.
pub use bloomgate::traffic::Fault;

/// What the origin answers on one path.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Waited before the response head is sent.
    pub delay: Duration,
    pub fault: Option<Fault>,
    /// Sends the body one byte per interval: whole, but slowly.
    pub paced: Option<Duration>,
    /// Answer 304 when the request's If-None-Match names this reply's ETag.
    pub answers_304: bool,
    /// Send the body chunked (two chunks) instead of with a Content-Length.
    pub chunked: bool,
    /// The body is the request's lines of this header, joined with ", " (`(none)` without one).
    pub echo: Option<String>,
    /// With `echo`: the body is the first line's value only, as Go's `Header.Get` and Node (for
    /// User-Agent and other singleton fields) read a repeated header.
    pub echo_first: bool,
    /// Sent verbatim as the whole response, whatever its framing; then the connection closes.
    pub raw: Option<Vec<u8>>,
    /// Answer a request's single `Range: bytes=first-last` (or `first-`) with a 206 of those
    /// bytes, as an origin that serves ranges itself does.
    pub serves_ranges: bool,
    /// With `serves_ranges`: the 206's `Content-Range` names a range one byte later than the
    /// bytes it sends, as a broken origin might.
    pub misnames_ranges: bool,
    /// The fields of the 304 sent, whatever its validators, to any request carrying
    /// `If-None-Match` or `If-Modified-Since` (an origin whose 304 may name nothing stored).
    pub conditional_304: Option<Vec<(String, String)>>,
}

impl Reply {
    pub fn ok(body: &str) -> Reply {
        Reply {
            status: 200,
            headers: Vec::new(),
            body: body.as_bytes().to_vec(),
            delay: Duration::ZERO,
            fault: None,
            paced: None,
            answers_304: false,
            chunked: false,
            echo: None,
            echo_first: false,
            raw: None,
            serves_ranges: false,
            misnames_ranges: false,
            conditional_304: None,
        }
    }

    /// A reply whose body is these bytes.
    pub fn bytes(body: &[u8]) -> Reply {
        let mut reply = Reply::ok("");
        reply.body = body.to_vec();
        reply
    }

    /// A reply whose body is the request's `name` lines joined with ", ", so that a test sees
    /// which value of a repeated header the origin answered for.
    pub fn echo(name: &str) -> Reply {
        let mut reply = Reply::ok("");
        reply.echo = Some(name.to_ascii_lowercase());
        reply
    }

    /// A reply whose body is the value of the request's first `name` line (`(none)` without
    /// one, `(empty)` when it is empty): an origin that reads a repeated header as Go's
    /// `Header.Get` does.
    pub fn echo_first(name: &str) -> Reply {
        let mut reply = Reply::echo(name);
        reply.echo_first = true;
        reply
    }

    /// A response written byte for byte as given (no header added), then the connection closes:
    /// for framings no well-behaved server would send.
    pub fn raw(bytes: &[u8]) -> Reply {
        let mut reply = Reply::ok("");
        reply.raw = Some(bytes.to_vec());
        reply
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

    /// Sends the body one byte per `interval`.
    pub fn paced(mut self, interval: Duration) -> Reply {
        self.paced = Some(interval);
        self
    }

    pub fn answers_304(mut self) -> Reply {
        self.answers_304 = true;
        self
    }

    /// Answers a conditional request with a 304 of exactly these fields.
    pub fn conditional_304(mut self, fields: &[(&str, &str)]) -> Reply {
        let fields = fields.iter().map(|(n, v)| (n.to_string(), v.to_string()));
        self.conditional_304 = Some(fields.collect());
        self
    }

    pub fn serves_ranges(mut self) -> Reply {
        self.serves_ranges = true;
        self
    }

    pub fn misnames_ranges(mut self) -> Reply {
        self.misnames_ranges = true;
        self
    }

    /// This reply as the 206 answering `range` (`bytes=first-last` or `bytes=first-`), when it
    /// serves ranges and the range is one it can name.
    fn for_range(mut self, range: Option<&str>) -> Reply {
        let Some(set) = range.and_then(|r| r.strip_prefix("bytes=")) else {
            return self;
        };
        let Some((first, last)) = set.split_once('-') else {
            return self;
        };
        let length = self.body.len();
        let (Ok(first), last) = (first.parse::<usize>(), last.parse::<usize>().ok()) else {
            return self;
        };
        if self.serves_ranges && first >= length {
            // RFC 9110 section 15.5.17: no byte of the range is in the representation.
            self.body.clear();
            self.status = 416;
            self.chunked = false;
            return self.header("content-range", &format!("bytes */{length}"));
        }
        let last = last
            .unwrap_or(length.saturating_sub(1))
            .min(length.saturating_sub(1));
        if !self.serves_ranges || first > last {
            return self;
        }
        self.body = self.body[first..=last].to_vec();
        self.status = 206;
        self.chunked = false;
        let named = first + usize::from(self.misnames_ranges);
        self.header("content-range", &format!("bytes {named}-{last}/{length}"))
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

    /// Every line of `name`, joined with ", " as RFC 9110 section 5.3 combines them.
    pub fn combined(&self, name: &str) -> Option<String> {
        let values: Vec<&str> = self
            .headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect();
        (!values.is_empty()).then(|| values.join(", "))
    }
}

/// When the origin reads a request's body.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BodyReading {
    /// The whole body before answering.
    #[default]
    BeforeAnswer,
    /// Answers right after the head, then reads the body the head announced before it reads the
    /// next request on the connection, as Go's net/http and Node do: a proxy that announces a
    /// body it does not send gets its next request eaten as that body.
    AfterAnswer,
}

#[derive(Default)]
struct State {
    replies: Mutex<HashMap<String, Reply>>,
    received: Mutex<Vec<Received>>,
    /// Body bytes of the answers given, per target.
    body_bytes: Mutex<HashMap<String, u64>>,
    /// Every byte received, per connection, in the order the connections were accepted.
    raw: Mutex<Vec<Arc<Mutex<Vec<u8>>>>>,
    reading: BodyReading,
}

/// A running test origin; it stops when dropped.
pub struct Origin {
    pub addr: SocketAddr,
    state: Arc<State>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// After `stop`: the port, held with nothing listening until this origin is dropped or
    /// revived.
    held: Option<RefusingPort>,
}

impl Origin {
    /// Starts an origin on its own thread and runtime, so a proxy shared by several tests (each
    /// with its own runtime) can use it.
    pub fn start() -> Origin {
        Origin::start_reading(BodyReading::BeforeAnswer)
    }

    /// An origin that reads request bodies as `reading` says.
    pub fn start_reading(reading: BodyReading) -> Origin {
        Origin::start_on("127.0.0.1:0".parse().expect("address"), reading)
    }

    /// A fresh origin (nothing received, no reply set) on the port this stopped one held: a
    /// server that went away comes back on the address it had. The old port is let go only once
    /// the new listener holds it, so no other socket can be given it in between.
    pub fn revive(mut self) -> Origin {
        let held = self.held.take().expect("revive an origin that was stopped");
        let origin = Origin::start_on(held.addr, BodyReading::BeforeAnswer);
        drop(held);
        origin
    }

    fn start_on(addr: SocketAddr, reading: BodyReading) -> Origin {
        let state = Arc::new(State {
            reading,
            ..State::default()
        });
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
                    let socket = shareable(addr);
                    socket.listen(1024).expect("listen");
                    let listener = TcpListener::from_std(socket.into()).expect("origin listener");
                    addr_tx
                        .send(listener.local_addr().expect("origin address"))
                        .expect("send origin address");
                    tokio::select! {
                        () = accept_loop(listener, state) => {}
                        _ = stopped => {}
                    }
                });
                // Shutting the runtime down closes every connection the origin still holds, and
                // waiting for its threads means they are closed when `stop` returns: a proxy's
                // pooled connection must not outlive a stopped origin by the moment a loaded
                // machine takes to drop its tasks.
                runtime.shutdown_timeout(Duration::from_secs(5));
            }
        });
        let addr = addr_rx.recv().expect("origin started");
        Origin {
            addr,
            state,
            stop: Some(stop),
            thread: Some(thread),
            held: None,
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

    /// Body bytes of the answers given to `target` so far: what each carried, whether or not
    /// its reader took it all.
    pub fn body_bytes(&self, target: &str) -> u64 {
        let sent = self.state.body_bytes.lock().expect("body bytes");
        sent.get(target).copied().unwrap_or(0)
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

    /// Every request received, oldest first.
    pub fn all_received(&self) -> Vec<Received> {
        self.state.received.lock().expect("received").clone()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.state.raw.lock().expect("raw").len()
    }

    /// The bytes received on each connection so far, in the order the connections were accepted.
    pub fn raw_connections(&self) -> Vec<Vec<u8>> {
        self.state
            .raw
            .lock()
            .expect("raw")
            .iter()
            .map(|bytes| bytes.lock().expect("raw bytes").clone())
            .collect()
    }

    /// Stops listening and closes every connection: from now on the origin refuses connections.
    /// Its port stays held (bound, not listening) until the origin is dropped or revived, so that
    /// a test running beside this one cannot be given the port and answer in its place.
    pub fn stop(&mut self) {
        if self.held.is_none() && self.thread.is_some() {
            self.held = Some(RefusingPort::hold(self.addr));
        }
        self.shut();
    }

    fn shut(&mut self) {
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
        self.shut();
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(serve_connection(stream, Arc::clone(&state)));
    }
}

async fn serve_connection(stream: TcpStream, state: Arc<State>) {
    let raw = Arc::new(Mutex::new(Vec::new()));
    state.raw.lock().expect("raw").push(Arc::clone(&raw));
    let mut connection = Connection {
        stream,
        buffer: Vec::new(),
        raw,
    };
    loop {
        let Some((request, framing)) = connection.read_head().await else {
            return;
        };
        if state.reading == BodyReading::BeforeAnswer && !connection.read_body(framing).await {
            return;
        }
        let mut reply = state
            .replies
            .lock()
            .expect("replies")
            .get(&request.target)
            .cloned()
            .unwrap_or_else(|| Reply::ok("no reply set for this path\n").status(404));
        if let Some(name) = reply.echo.clone() {
            let values: Vec<&str> = request
                .headers
                .iter()
                .filter(|(n, _)| *n == name)
                .map(|(_, v)| v.as_str())
                .collect();
            reply.body = match values.first() {
                None => b"(none)".to_vec(),
                Some(first) if reply.echo_first && first.is_empty() => b"(empty)".to_vec(),
                Some(first) if reply.echo_first => first.as_bytes().to_vec(),
                Some(_) => values.join(", ").into_bytes(),
            };
        }
        let conditional = request.header("if-none-match").is_some()
            || request.header("if-modified-since").is_some();
        let reply = match (&reply.conditional_304, conditional) {
            (Some(fields), true) => Reply {
                status: 304,
                headers: fields.clone(),
                body: Vec::new(),
                ..reply.clone()
            },
            _ => reply.for_range(request.header("range")),
        };
        let close = request
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let head_only = request.method == "HEAD";
        let if_none_match = request.header("if-none-match").map(str::to_string);
        let target = request.target.clone();
        state.received.lock().expect("received").push(request);
        if !reply.delay.is_zero() {
            tokio::time::sleep(reply.delay).await;
        }
        let not_modified = reply.status == 304
            || (reply.answers_304
                && if_none_match.is_some()
                && if_none_match.as_deref() == reply.header_value("etag"));
        if !head_only && !not_modified && reply.raw.is_none() {
            let mut sent = state.body_bytes.lock().expect("body bytes");
            *sent.entry(target).or_default() += reply.body.len() as u64;
        }
        if let Some(bytes) = &reply.raw {
            let _ = connection.stream.write_all(bytes).await;
            let _ = connection.stream.flush().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            return;
        }
        if !answer(&mut connection.stream, &reply, head_only, not_modified).await || close {
            return;
        }
        if state.reading == BodyReading::AfterAnswer && !connection.read_body(framing).await {
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
    if matches!(reply.fault, Some(Fault::BadChunked)) {
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
    match (reply.fault, reply.paced) {
        (None, None) => stream.write_all(&reply.body).await.is_ok() && stream.flush().await.is_ok(),
        (None, Some(interval)) => {
            for byte in &reply.body {
                if stream.write_all(&[*byte]).await.is_err() || stream.flush().await.is_err() {
                    return false;
                }
                tokio::time::sleep(interval).await;
            }
            true
        }
        (Some(Fault::ResetMidBody), _) => {
            let _ = stream.write_all(&reply.body[..half]).await;
            let _ = stream.flush().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = stream.set_zero_linger();
            false
        }
        (Some(Fault::ShortBody), _) => {
            let _ = stream.write_all(&reply.body[..half]).await;
            let _ = stream.flush().await;
            let _ = stream.shutdown().await;
            false
        }
        (Some(Fault::Trickle), _) => {
            let first = reply.body.len().min(Fault::TRICKLE_BYTES as usize);
            let _ = stream.write_all(&reply.body[..first]).await;
            let _ = stream.flush().await;
            tokio::time::sleep(Duration::from_secs(3600)).await;
            false
        }
        (Some(Fault::Silence | Fault::BadChunked), _) => false,
    }
}

/// How a request head says its body is framed.
#[derive(Clone, Copy, Debug)]
enum Framing {
    Length(usize),
    Chunked,
}

/// One accepted connection: what is buffered, and the record of every byte read.
struct Connection {
    stream: TcpStream,
    buffer: Vec<u8>,
    raw: Arc<Mutex<Vec<u8>>>,
}

impl Connection {
    /// Reads more bytes into the buffer; false when the peer closed or the read failed.
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 4096];
        match self.stream.read(&mut chunk).await {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buffer.extend_from_slice(&chunk[..n]);
                self.raw
                    .lock()
                    .expect("raw bytes")
                    .extend_from_slice(&chunk[..n]);
                true
            }
        }
    }

    /// Reads one request head; `None` when the peer closed or the head is not a request.
    async fn read_head(&mut self) -> Option<(Received, Framing)> {
        let head_end = loop {
            if let Some(end) = find(&self.buffer, b"\r\n\r\n") {
                break end;
            }
            if !self.fill().await {
                return None;
            }
        };
        let head = String::from_utf8_lossy(&self.buffer[..head_end]).to_string();
        self.buffer.drain(..head_end + 4);
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
        let framing = if request
            .header("transfer-encoding")
            .is_some_and(|v| v.contains("chunked"))
        {
            Framing::Chunked
        } else {
            Framing::Length(
                request
                    .header("content-length")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            )
        };
        Some((request, framing))
    }

    /// Reads (and discards) the body the head announced; false when the peer closed first.
    async fn read_body(&mut self, framing: Framing) -> bool {
        match framing {
            Framing::Chunked => loop {
                if let Some(end) = find(&self.buffer, b"0\r\n\r\n") {
                    self.buffer.drain(..end + 5);
                    return true;
                }
                if !self.fill().await {
                    return false;
                }
            },
            Framing::Length(length) => {
                while self.buffer.len() < length {
                    if !self.fill().await {
                        return false;
                    }
                }
                self.buffer.drain(..length);
                true
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        304 => "Not Modified",
        404 => "Not Found",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
