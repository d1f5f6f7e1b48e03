//! The differential check of the native HTTP/1.1 request parser against hyper's server: the same
//! bytes to both, a failure on any request one accepts and the other refuses or frames differently.
//!
//! Shared by the test suite (`tests/h1`) and the cargo-fuzz target (`fuzz/fuzz_targets/h1_differential.rs`,
//! which includes this file by path).

use std::fmt;
use std::sync::{Arc, Mutex};

use bloomgate::proxy::h1::chunked::{ChunkError, ChunkedDecoder, Decoded, MAX_TRAILER_BYTES};
use bloomgate::proxy::h1::parse::{
    BodyFraming, DEFAULT_MAX_HEADERS, Limits, ParseError, RequestHead, parse_request,
};
use bytes::BytesMut;
use http::{HeaderMap, Method, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// hyper's smallest read buffer, which `accept.rs` raises to `server.max_header_bytes`: the native
/// parser gets the same limit. Inputs no longer than this reach hyper in one read, so that its
/// verdict does not depend on how the bytes were split.
pub const MAX_INPUT: usize = 8192;

const LIMITS: Limits = Limits {
    max_headers: DEFAULT_MAX_HEADERS,
    max_head_bytes: MAX_INPUT,
};

/// One request as a server saw it: its head, and its body or the failure to read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub method: Method,
    pub target: String,
    pub version: Version,
    pub headers: HeaderMap,
    /// `None` when the body could not be read to its end (malformed, or cut short).
    pub body: Option<Vec<u8>>,
}

/// What one parser made of a whole connection's bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Connection {
    pub requests: Vec<Seen>,
    /// The head after the last request was refused, and why.
    pub refused: Option<Refusal>,
    /// Why the native decoder refused the last request's chunked body.
    pub body_refused: Option<ChunkError>,
    /// Where in the input the refused head starts.
    pub refused_at: usize,
}

/// A refused head.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    Native(ParseError),
    Hyper(String),
}

/// Both parsers' readings of an input that they disagree on.
#[derive(Debug)]
pub struct Mismatch {
    pub input: Vec<u8>,
    pub native: Connection,
    pub hyper: Connection,
    pub why: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "native and hyper disagree: {}", self.why)?;
        writeln!(f, "input: {:?}", String::from_utf8_lossy(&self.input))?;
        writeln!(f, "input bytes: {:?}", self.input)?;
        writeln!(f, "native: {:?}", self.native)?;
        write!(f, "hyper:  {:?}", self.hyper)
    }
}

/// How the two readings compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agreement {
    /// The same requests, framed the same, and the same refusal (or none).
    Same,
    /// The native parser refused, by a documented rule beyond hyper's, a request hyper accepted;
    /// everything before it agreed.
    NativeStricter,
}

/// Runs inputs through hyper's server on an in-memory connection, and through the native parser.
pub struct Differential {
    runtime: tokio::runtime::Runtime,
}

impl Differential {
    pub fn new() -> Differential {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime builds");
        Differential { runtime }
    }

    /// Feeds `input` (at most [`MAX_INPUT`] bytes are used) to both parsers and compares.
    pub fn check(&self, input: &[u8]) -> Result<Agreement, Box<Mismatch>> {
        let input = &input[..input.len().min(MAX_INPUT)];
        let native = native(input);
        let hyper = self.hyper(input);
        compare(input, native, hyper)
    }

    /// The requests hyper's HTTP/1 server hands its service, which reads each body to its end.
    pub fn hyper(&self, input: &[u8]) -> Connection {
        self.runtime.block_on(async {
            let (client, server) = tokio::io::duplex(2 * MAX_INPUT);
            let (mut from_server, mut to_server) = tokio::io::split(client);
            to_server
                .write_all(input)
                .await
                .expect("the pipe holds the input");
            to_server.shutdown().await.expect("the pipe closes");

            let seen = Arc::new(Mutex::new(Vec::new()));
            let service = hyper::service::service_fn({
                let seen = Arc::clone(&seen);
                move |request: hyper::Request<Incoming>| {
                    let seen = Arc::clone(&seen);
                    async move {
                        let (parts, body) = request.into_parts();
                        let body = body
                            .collect()
                            .await
                            .ok()
                            .map(|body| body.to_bytes().to_vec());
                        seen.lock().expect("one task").push(Seen {
                            method: parts.method,
                            target: parts.uri.to_string(),
                            version: parts.version,
                            headers: parts.headers,
                            body,
                        });
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(
                            http_body_util::Empty::<bytes::Bytes>::new(),
                        ))
                    }
                }
            });
            // Half-close: the input's end must not cancel the requests hyper has yet to serve.
            let connection = hyper::server::conn::http1::Builder::new()
                .half_close(true)
                .keep_alive(true)
                .max_buf_size(MAX_INPUT)
                .serve_connection(TokioIo::new(server), service);
            let mut answers = Vec::new();
            let (served, _) = tokio::join!(connection, from_server.read_to_end(&mut answers));
            let requests = std::mem::take(&mut *seen.lock().expect("one task"));
            // A refused head is a parse error (answered 400, 414 or 431, or closed at once on an
            // HTTP/2 preface); a body cut short or malformed is the service's to see.
            let refused = match served {
                Err(error) if error.is_parse() || error.is_parse_too_large() => {
                    Some(Refusal::Hyper(error.to_string()))
                }
                _ => None,
            };
            Connection {
                requests,
                refused,
                body_refused: None,
                refused_at: 0,
            }
        })
    }
}

impl Default for Differential {
    fn default() -> Self {
        Differential::new()
    }
}

/// The requests the native parser reads from `input`, as a server loop over one buffer would:
/// head, body, next head, until the input ends, a head is refused, a body fails, the connection
/// is not kept alive, or a request asks for an upgrade (which the server refuses).
pub fn native(input: &[u8]) -> Connection {
    let mut buf = BytesMut::from(input);
    let mut requests = Vec::new();
    let mut refused = None;
    let mut body_refused = None;
    while !buf.is_empty() {
        let refused_at = input.len() - buf.len();
        let (head, len) = match parse_request(&buf, &LIMITS) {
            Ok(Some(parsed)) => parsed,
            Ok(None) => break,
            Err(error) => {
                refused = Some((Refusal::Native(error), refused_at));
                break;
            }
        };
        let _ = buf.split_to(len);
        let body = if head.upgrade {
            None
        } else {
            read_body(&head, &mut buf)
                .map_err(|error| body_refused = error)
                .ok()
        };
        let stop = body.is_none() || !head.keep_alive;
        let (parts, ()) = head.request.into_parts();
        requests.push(Seen {
            method: parts.method,
            target: parts.uri.to_string(),
            version: parts.version,
            headers: parts.headers,
            body,
        });
        if stop {
            break;
        }
    }
    let (refused, refused_at) = match refused {
        Some((refusal, at)) => (Some(refusal), at),
        None => (None, 0),
    };
    Connection {
        requests,
        refused,
        body_refused,
        refused_at,
    }
}

/// The body `head` frames at the front of `buf`, taken off it; an error if the input ends first,
/// with the decoder's reason if it is malformed.
fn read_body(head: &RequestHead, buf: &mut BytesMut) -> Result<Vec<u8>, Option<ChunkError>> {
    match head.framing {
        BodyFraming::Empty => Ok(Vec::new()),
        BodyFraming::Length(length) => {
            let length = usize::try_from(length)
                .ok()
                .filter(|&length| length <= buf.len())
                .ok_or(None)?;
            Ok(buf.split_to(length).to_vec())
        }
        BodyFraming::Chunked => {
            let mut decoder = ChunkedDecoder::new(MAX_TRAILER_BYTES);
            let mut body = Vec::new();
            loop {
                match decoder.decode(buf).map_err(Some)? {
                    Decoded::Data(data) => body.extend_from_slice(&data),
                    Decoded::NeedMore => return Err(None),
                    Decoded::Done => return Ok(body),
                }
            }
        }
    }
}

pub fn compare(
    input: &[u8],
    native: Connection,
    hyper: Connection,
) -> Result<Agreement, Box<Mismatch>> {
    let mismatch = |why: String, native: Connection, hyper: Connection| {
        Err(Box::new(Mismatch {
            input: input.to_vec(),
            native,
            hyper,
            why,
        }))
    };
    for (at, (ours, theirs)) in native.requests.iter().zip(&hyper.requests).enumerate() {
        if !same_head(ours, theirs) {
            return mismatch(format!("request {at} has a different head"), native, hyper);
        }
        if !asks_upgrade(ours) && ours.body != theirs.body {
            let last = at + 1 == native.requests.len();
            if last
                && ours.body.is_none()
                && theirs.body.is_some()
                && native
                    .body_refused
                    .as_ref()
                    .is_some_and(ChunkError::beyond_hyper)
            {
                return Ok(Agreement::NativeStricter);
            }
            return mismatch(format!("request {at} has a different body"), native, hyper);
        }
    }
    let (ours, theirs) = (native.requests.len(), hyper.requests.len());
    // The native server stops at an upgrade, which it refuses; hyper goes on when its service
    // answers without upgrading.
    if ours <= theirs && native.requests.last().is_some_and(asks_upgrade) {
        return Ok(Agreement::Same);
    }
    if ours == theirs && native.refused.is_some() == hyper.refused.is_some() {
        return Ok(Agreement::Same);
    }
    if ours < theirs
        && let Some(Refusal::Native(error)) = &native.refused
        && error.beyond_hyper()
    {
        let head = &input[native.refused_at..];
        return match breaks_rule(error, head, &hyper.requests[ours]) {
            true => Ok(Agreement::NativeStricter),
            false => mismatch(
                format!(
                    "the native parser refused ({error}) a request that does not break that rule"
                ),
                native,
                hyper,
            ),
        };
    }
    let ended = |connection: &Connection| match connection.refused {
        Some(_) => "refused the next",
        None => "stopped",
    };
    mismatch(
        format!(
            "native read {ours} requests and {}, hyper {theirs} and {}",
            ended(&native),
            ended(&hyper),
        ),
        native,
        hyper,
    )
}

/// What the native parser flags as an upgrade, which the native server refuses.
fn asks_upgrade(seen: &Seen) -> bool {
    seen.method == Method::CONNECT
        || (seen.version == Version::HTTP_11 && seen.headers.contains_key(http::header::UPGRADE))
}

/// Whether the request hyper accepted, and the native parser refused with `error` (a rule beyond
/// hyper's), shows what that rule refuses: a coarse check that the refusal is not a native bug.
fn breaks_rule(error: &ParseError, head: &[u8], accepted: &Seen) -> bool {
    let headers = &accepted.headers;
    let hosts = headers.get_all(http::header::HOST).iter().count();
    match error {
        ParseError::BareLf { offset } => {
            head.get(*offset) == Some(&b'\n')
                && (*offset == 0 || head.get(offset - 1) != Some(&b'\r'))
        }
        ParseError::MissingHost => accepted.version == Version::HTTP_11 && hosts == 0,
        ParseError::DuplicateHost => hosts > 1,
        ParseError::TargetForm { .. } => {
            accepted.target == "*"
                || !(accepted.target.starts_with('/') || accepted.target.contains("://"))
        }
        ParseError::TargetUserinfo => accepted.target.contains('@'),
        ParseError::InvalidTransferEncoding
        | ParseError::UnsupportedTransferCoding
        | ParseError::InvalidContentLengthBesideTransferEncoding => {
            headers.contains_key(http::header::TRANSFER_ENCODING)
        }
        ParseError::Expectation => headers.contains_key(http::header::EXPECT),
        _ => false,
    }
}

fn same_head(ours: &Seen, theirs: &Seen) -> bool {
    ours.method == theirs.method
        && ours.target == theirs.target
        && ours.version == theirs.version
        && ours.headers == theirs.headers
}

/// The cases that smuggle requests past parsers that disagree, each as one connection's bytes.
pub const SMUGGLING: &[&str] = &[
    // CL.TE and TE.CL.
    "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /x HTTP/1.1\r\nHost: a\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n8\r\nSMUGGLED\r\n0\r\n\r\n",
    // TE.TE: obfuscated codings.
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-encoding: x\r\n\r\n0\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\n chunked\r\n\r\n0\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nX: y\r\nTransfer-Encoding: chunked\r\n \r\n\r\n0\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \"chunked\"\r\n\r\n0\r\n\r\n",
    // Content-Length variants.
    "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\nhello",
    "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello",
    "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0005\r\n\r\nhello",
    "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551621\r\n\r\nhello",
    // Chunk sizes and extensions.
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000005\r\nhello\r\n0\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b\nc\r\nhello\r\n0\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\n0\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5 ;x\r\nhello\r\n0\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: 1\r\nContent-Length: 5\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: 1\nY: 2\r\n\r\n",
    // Line ends and bytes in the head.
    "GET / HTTP/1.1\r\nHost: a\r\nX: a\rContent-Length: 5\r\n\r\nhello",
    "GET / HTTP/1.1\nHost: a\nContent-Length: 5\n\nhello",
    "GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n",
    "GET / HTTP/1.1\r\n Host: a\r\n\r\n",
    "GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n",
    "GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "GET / HTTP/1.0\r\n\r\nGET /ignored HTTP/1.0\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET /ignored HTTP/1.1\r\nHost: a\r\n\r\n",
];

/// A seeded source of request bytes: well-formed requests, with the cases that smuggle or confuse
/// parsers mixed into one input in two, then mutated byte by byte one time in two.
pub struct Generator {
    state: u64,
    /// Whether this input takes odd choices.
    odd: bool,
}

impl Generator {
    pub fn new(seed: u64) -> Generator {
        Generator {
            state: seed ^ 0x9e37_79b9_7f4a_7c15,
            odd: false,
        }
    }

    /// splitmix64.
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }

    fn pick<'a>(&mut self, choices: &[&'a str]) -> &'a str {
        choices[self.below(choices.len())]
    }

    /// One of `usual`, or in an odd input one time in `one_in` one of `odd`.
    fn pick_or_odd<'a>(&mut self, usual: &[&'a str], odd: &[&'a str], one_in: usize) -> &'a str {
        if self.odd && self.chance(one_in) {
            self.pick(odd)
        } else {
            self.pick(usual)
        }
    }

    /// One connection's bytes: one to three requests.
    pub fn input(&mut self) -> Vec<u8> {
        self.odd = self.chance(2);
        let mut input = Vec::new();
        for _ in 0..1 + self.below(3) {
            self.request(&mut input);
        }
        if self.chance(2) {
            for _ in 0..1 + self.below(3) {
                self.mutate(&mut input);
            }
        }
        input.truncate(MAX_INPUT);
        input
    }

    fn line_end(&mut self) -> &'static str {
        self.pick_or_odd(&["\r\n"], &["\n", "\r", "\r\r\n", " \r\n", "\n\r"], 30)
    }

    fn request(&mut self, out: &mut Vec<u8>) {
        if self.odd && self.chance(20) {
            out.extend_from_slice(self.pick(&["\r\n", "\n", "\r\n\r\n"]).as_bytes());
        }
        let method = self.pick_or_odd(
            &[
                "GET", "GET", "GET", "POST", "POST", "PUT", "HEAD", "DELETE", "PATCH",
            ],
            &["OPTIONS", "CONNECT", "get", "G(T", "M-SEARCH", ""],
            8,
        );
        let target = self.pick_or_odd(
            &[
                "/",
                "/a",
                "/a?b=c",
                "/a%20b",
                "/x/y.css",
                "http://example.com/x",
                "https://example.com:8443/y?z",
            ],
            &[
                "/%zz",
                "//x",
                "/a#frag",
                "http://user@example.com/",
                "example.com:443",
                "*",
                "/a<b>",
                "/caf\u{e9}",
                "x",
                "http://",
                "/a b",
            ],
            8,
        );
        let version = self.pick_or_odd(
            &["HTTP/1.1", "HTTP/1.1", "HTTP/1.1", "HTTP/1.0"],
            &[
                "HTTP/1.2",
                "HTTP/2.0",
                "http/1.1",
                "HTTP/1.1 ",
                "HTTP/0.9",
                "HTTP/11",
            ],
            12,
        );
        let space = self.pick_or_odd(&[" "], &["  ", "\t"], 30);
        out.extend_from_slice(format!("{method}{space}{target} {version}").as_bytes());
        out.extend_from_slice(self.line_end().as_bytes());

        if !(self.odd && self.chance(10)) {
            let host = self.pick_or_odd(
                &["example.com", "a", "a:8080", "[::1]:80"],
                &["", "a b", "u@a", "a:port"],
                8,
            );
            out.extend_from_slice(format!("Host: {host}").as_bytes());
            out.extend_from_slice(self.line_end().as_bytes());
        }
        let mut framing = None;
        for _ in 0..self.below(5) {
            let (field, frames) = self.field();
            if frames.is_some() {
                framing = frames;
            }
            out.extend_from_slice(&field);
            out.extend_from_slice(self.line_end().as_bytes());
        }
        out.extend_from_slice(self.line_end().as_bytes());
        match framing {
            Some(Framing::Length(length)) => {
                let length = if self.odd && self.chance(8) {
                    self.below(length + 3)
                } else {
                    length
                };
                out.extend(std::iter::repeat_n(b'x', length));
            }
            Some(Framing::Chunked) => self.chunked_body(out),
            None => {}
        }
    }

    fn field(&mut self) -> (Vec<u8>, Option<Framing>) {
        let length = self.below(20);
        let (name, value, framing) = match self.below(12) {
            0 => (
                "Host",
                self.pick(&["example.com", "a", "b"]).to_owned(),
                None,
            ),
            1..=3 => (
                "Content-Length",
                match self.pick_or_odd(&["n"], &["n, n", "+n", "big", "n ", "0x5", "-n", ""], 4) {
                    "n, n" => format!("{length}, {length}"),
                    "+n" => format!("+{length}"),
                    "-n" => format!("-{length}"),
                    "big" => "18446744073709551616".to_owned(),
                    "n " => format!("{length} "),
                    "n" => length.to_string(),
                    odd => odd.to_owned(),
                },
                Some(Framing::Length(length)),
            ),
            4..=6 => (
                "Transfer-Encoding",
                self.pick_or_odd(
                    &["chunked", "Chunked"],
                    &[
                        "gzip, chunked",
                        "chunked, gzip",
                        "chunked, chunked",
                        ", chunked",
                        "chunked,",
                        "identity",
                        "chunked;q=1",
                        "\tchunked",
                        "",
                    ],
                    4,
                )
                .to_owned(),
                Some(Framing::Chunked),
            ),
            7 => (
                "Connection",
                self.pick_or_odd(
                    &["close", "keep-alive", "x-a, close"],
                    &["Upgrade", "keep-alive, close", "clos\u{e9}"],
                    4,
                )
                .to_owned(),
                None,
            ),
            8 => (
                "Expect",
                self.pick_or_odd(
                    &["100-continue", "100-Continue"],
                    &["200-ok", "100-continue, x", ""],
                    4,
                )
                .to_owned(),
                None,
            ),
            9 if self.odd => ("Upgrade", "websocket".to_owned(), None),
            10 if self.odd => {
                let odd = self.pick(&[
                    " X-A: b",
                    "X-A : b",
                    ": b",
                    "X-A:b\r\n c",
                    "X-A: b\0c",
                    "X-A: caf\u{e9}",
                    "X-A: \x7f",
                    "X A: b",
                    "X-A:",
                    "X-A: b\tc",
                ]);
                return (odd.as_bytes().to_vec(), None);
            }
            _ => ("X-Field", "value".to_owned(), None),
        };
        let separator = self.pick_or_odd(&[": ", ":"], &[":\t", ":  ", " :"], 10);
        (format!("{name}{separator}{value}").into_bytes(), framing)
    }

    fn chunked_body(&mut self, out: &mut Vec<u8>) {
        for _ in 0..self.below(4) {
            let size = 1 + self.below(12);
            let size_text = match self.pick_or_odd(
                &["x", "x", "X", "0x", "x;ext=1"],
                &["x ", "x;a=\"b c\"", "big", "-x", "0xx", "x;\0"],
                3,
            ) {
                "x" => format!("{size:x}"),
                "X" => format!("{size:X}"),
                "0x" => format!("000{size:x}"),
                "x;ext=1" => format!("{size:x};ext=1"),
                "x " => format!("{size:x} "),
                "x;a=\"b c\"" => format!("{size:x};a=\"b c\""),
                "big" => "10000000000000000".to_owned(),
                "-x" => format!("-{size:x}"),
                "0xx" => format!("0x{size:x}"),
                _ => format!("{size:x};\0"),
            };
            out.extend_from_slice(size_text.as_bytes());
            out.extend_from_slice(self.line_end().as_bytes());
            let data = if self.odd && self.chance(8) {
                size + 1
            } else {
                size
            };
            out.extend(std::iter::repeat_n(b'y', data));
            out.extend_from_slice(self.line_end().as_bytes());
        }
        out.extend_from_slice(self.pick_or_odd(&["0"], &["00", "0;x", "0 "], 4).as_bytes());
        out.extend_from_slice(self.line_end().as_bytes());
        for _ in 0..self.below(3) {
            let trailer = self.pick_or_odd(
                &["X-Sum: 1", "X-Sum:"],
                &[" X: 1", "X : 1", ": 1", "X: a\0"],
                4,
            );
            out.extend_from_slice(trailer.as_bytes());
            out.extend_from_slice(self.line_end().as_bytes());
        }
        out.extend_from_slice(self.line_end().as_bytes());
    }

    /// One byte-level change: a flip, an insertion of a byte parsers care about, a deletion or a
    /// duplicated slice.
    pub fn mutate(&mut self, input: &mut Vec<u8>) {
        const INTERESTING: &[u8] = b"\r\n \t:;,0\x00\x7f\x80\xff\"@/?#";
        if input.is_empty() {
            input.push(INTERESTING[self.below(INTERESTING.len())]);
            return;
        }
        let at = self.below(input.len());
        match self.below(5) {
            0 => input[at] ^= 1 << self.below(8),
            1 => input.insert(at, INTERESTING[self.below(INTERESTING.len())]),
            2 => {
                input.remove(at);
            }
            3 => input[at] = INTERESTING[self.below(INTERESTING.len())],
            _ => {
                let end = (at + 1 + self.below(16)).min(input.len());
                let slice = input[at..end].to_vec();
                let to = self.below(input.len());
                input.splice(to..to, slice);
            }
        }
    }
}

enum Framing {
    Length(usize),
    Chunked,
}
