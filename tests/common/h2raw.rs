//! A raw HTTP/2 cleartext client (prior knowledge, RFC 9113 section 3.3) that writes frames by
//! hand, so that a test can send what no conforming client library would: uppercase field names,
//! connection-specific fields, a missing pseudo-header, an `:authority` with a path in it.
//!
//! Field blocks are encoded as HPACK literals without indexing and without Huffman coding; of
//! the response's field block only `:status` is decoded, which is all the tests need.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;

/// The SETTINGS identifier of the initial stream flow-control window (RFC 9113 section 6.5.2).
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;

/// RST_STREAM's error code CANCEL (RFC 9113 section 7).
pub const CANCEL: u32 = 0x8;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// How the server dealt with one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum H2Outcome {
    /// A response: its status (when it could be decoded) and its whole body.
    Response { status: Option<u16>, body: Vec<u8> },
    /// The stream was reset, with this error code.
    Reset(u32),
    /// The connection was closed with GOAWAY and this error code before the stream ended.
    GoAway(u32),
    /// The connection ended (EOF or error) before the stream did.
    Closed,
    /// Nothing decisive within the wait.
    TimedOut,
}

impl H2Outcome {
    /// The stream was refused: reset, connection closed with an error, or a 4xx answer.
    pub fn is_refusal(&self) -> bool {
        match self {
            H2Outcome::Reset(_) | H2Outcome::GoAway(_) | H2Outcome::Closed => true,
            H2Outcome::Response {
                status: Some(status),
                ..
            } => (400..500).contains(status),
            _ => false,
        }
    }
}

/// One frame as read.
#[derive(Debug)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

/// A raw h2c connection.
pub struct H2Conn {
    stream: TcpStream,
    buffer: Vec<u8>,
}

impl H2Conn {
    /// Connects and sends the connection preface: the magic and an empty SETTINGS frame.
    pub async fn connect(addr: SocketAddr) -> H2Conn {
        H2Conn::connect_with_settings(addr, &[]).await
    }

    /// Like [`H2Conn::connect`], with these SETTINGS (identifier, value) in the preface, e.g.
    /// [`SETTINGS_INITIAL_WINDOW_SIZE`] at 0 for a client that takes no byte of any body.
    pub async fn connect_with_settings(addr: SocketAddr, settings: &[(u16, u32)]) -> H2Conn {
        let mut stream = TcpStream::connect(addr).await.expect("connect for h2c");
        let mut preface = PREFACE.to_vec();
        let payload: Vec<u8> = settings
            .iter()
            .flat_map(|(id, value)| id.to_be_bytes().into_iter().chain(value.to_be_bytes()))
            .collect();
        preface.extend_from_slice(&frame(SETTINGS, 0, 0, &payload));
        stream.write_all(&preface).await.expect("send h2c preface");
        H2Conn {
            stream,
            buffer: Vec::new(),
        }
    }

    /// Sends a HEADERS frame with this field block (fields in order, pseudo-fields included).
    pub async fn send_headers(
        &mut self,
        stream_id: u32,
        fields: &[(&str, &str)],
        end_stream: bool,
    ) {
        let block = encode_fields(fields);
        let flags = END_HEADERS | if end_stream { END_STREAM } else { 0 };
        let _ = self
            .stream
            .write_all(&frame(HEADERS, flags, stream_id, &block))
            .await;
    }

    pub async fn send_data(&mut self, stream_id: u32, data: &[u8], end_stream: bool) {
        let flags = if end_stream { END_STREAM } else { 0 };
        let _ = self
            .stream
            .write_all(&frame(DATA, flags, stream_id, data))
            .await;
    }

    /// Reads one frame, answering SETTINGS and PING on the way; `None` on EOF, error or timeout.
    pub async fn next_frame(&mut self, deadline: Instant) -> Option<Frame> {
        loop {
            if self.buffer.len() >= 9 {
                let length = usize::from(self.buffer[0]) << 16
                    | usize::from(self.buffer[1]) << 8
                    | usize::from(self.buffer[2]);
                if self.buffer.len() >= 9 + length {
                    let head: Vec<u8> = self.buffer.drain(..9).collect();
                    let payload: Vec<u8> = self.buffer.drain(..length).collect();
                    let frame = Frame {
                        kind: head[3],
                        flags: head[4],
                        stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]])
                            & 0x7fff_ffff,
                        payload,
                    };
                    if frame.kind == SETTINGS && frame.flags & ACK == 0 {
                        let _ = self
                            .stream
                            .write_all(&self::frame(SETTINGS, ACK, 0, &[]))
                            .await;
                    }
                    if frame.kind == PING && frame.flags & ACK == 0 {
                        let _ = self
                            .stream
                            .write_all(&self::frame(PING, ACK, 0, &frame.payload))
                            .await;
                    }
                    return Some(frame);
                }
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            let mut chunk = [0u8; 16384];
            match tokio::time::timeout(left, self.stream.read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => self.buffer.extend_from_slice(&chunk[..n]),
                _ => return None,
            }
        }
    }

    /// Whether the connection is still open after this long: reads frames (answering SETTINGS
    /// and PING) until EOF, GOAWAY or the wait passes; returns when the connection ended, if it
    /// did.
    pub async fn closed_within(&mut self, wait: Duration) -> Option<Duration> {
        let started = Instant::now();
        let deadline = started + wait;
        loop {
            match self.next_frame(deadline).await {
                Some(frame) if frame.kind == GOAWAY => return Some(started.elapsed()),
                Some(_) => continue,
                None if Instant::now() >= deadline => return None,
                None => return Some(started.elapsed()),
            }
        }
    }

    /// Reads until stream `stream_id` ends one way or another, or `wait` passes.
    pub async fn outcome(&mut self, stream_id: u32, wait: Duration) -> H2Outcome {
        let deadline = Instant::now() + wait;
        let mut status = None;
        let mut body = Vec::new();
        let mut block = Vec::new();
        loop {
            let Some(frame) = self.next_frame(deadline).await else {
                return if Instant::now() >= deadline {
                    H2Outcome::TimedOut
                } else {
                    H2Outcome::Closed
                };
            };
            match frame.kind {
                GOAWAY => {
                    let code = frame
                        .payload
                        .get(4..8)
                        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                    let last = frame.payload.get(..4).map_or(0, |b| {
                        u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff
                    });
                    // A graceful GOAWAY that still covers the stream lets it finish.
                    if code != 0 || last < stream_id {
                        return H2Outcome::GoAway(code);
                    }
                }
                RST_STREAM if frame.stream == stream_id => {
                    let code = frame
                        .payload
                        .get(..4)
                        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                    return H2Outcome::Reset(code);
                }
                HEADERS | CONTINUATION if frame.stream == stream_id => {
                    block.extend_from_slice(header_block_fragment(&frame));
                    if frame.flags & END_HEADERS != 0 {
                        if status.is_none() {
                            status = decode_status(&block);
                            // An interim 1xx response is followed by the final one.
                            if status.is_some_and(|s| s < 200) {
                                status = None;
                            }
                        }
                        block.clear();
                    }
                    if frame.kind == HEADERS && frame.flags & END_STREAM != 0 {
                        return H2Outcome::Response { status, body };
                    }
                }
                DATA if frame.stream == stream_id => {
                    body.extend_from_slice(data_payload(&frame));
                    if frame.flags & END_STREAM != 0 {
                        return H2Outcome::Response { status, body };
                    }
                }
                _ => {}
            }
        }
    }
}

/// Sends one request on a new connection and returns what became of it.
pub async fn h2_exchange(
    addr: SocketAddr,
    fields: &[(&str, &str)],
    body: Option<&[u8]>,
    wait: Duration,
) -> H2Outcome {
    let mut conn = H2Conn::connect(addr).await;
    conn.send_headers(1, fields, body.is_none()).await;
    if let Some(body) = body {
        conn.send_data(1, body, true).await;
    }
    conn.outcome(1, wait).await
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = payload.len();
    let mut bytes = vec![
        (length >> 16) as u8,
        (length >> 8) as u8,
        length as u8,
        kind,
        flags,
    ];
    bytes.extend_from_slice(&stream.to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

fn header_block_fragment(frame: &Frame) -> &[u8] {
    let mut payload = frame.payload.as_slice();
    if frame.kind != HEADERS {
        return payload;
    }
    let mut pad = 0;
    if frame.flags & PADDED != 0 && !payload.is_empty() {
        pad = usize::from(payload[0]);
        payload = &payload[1..];
    }
    if frame.flags & PRIORITY != 0 && payload.len() >= 5 {
        payload = &payload[5..];
    }
    &payload[..payload.len().saturating_sub(pad)]
}

fn data_payload(frame: &Frame) -> &[u8] {
    let payload = frame.payload.as_slice();
    if frame.flags & PADDED != 0 && !payload.is_empty() {
        let pad = usize::from(payload[0]);
        return &payload[1..payload.len().saturating_sub(pad)];
    }
    payload
}

/// HPACK (RFC 7541): each field a literal without indexing with a new name, no Huffman coding.
fn encode_fields(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in fields {
        block.push(0x00);
        encode_string(&mut block, name.as_bytes());
        encode_string(&mut block, value.as_bytes());
    }
    block
}

fn encode_string(block: &mut Vec<u8>, text: &[u8]) {
    encode_integer(block, 0x00, 7, text.len());
    block.extend_from_slice(text);
}

/// An HPACK integer with an `prefix_bits`-bit prefix (RFC 7541 section 5.1).
fn encode_integer(block: &mut Vec<u8>, first_bits: u8, prefix_bits: u32, value: usize) {
    let max = (1usize << prefix_bits) - 1;
    if value < max {
        block.push(first_bits | value as u8);
        return;
    }
    block.push(first_bits | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        block.push((rest % 128 + 128) as u8);
        rest /= 128;
    }
    block.push(rest as u8);
}

fn decode_integer(block: &[u8], at: &mut usize, prefix_bits: u32) -> Option<usize> {
    let max = (1usize << prefix_bits) - 1;
    let mut value = usize::from(*block.get(*at)?) & max;
    *at += 1;
    if value < max {
        return Some(value);
    }
    let mut shift = 0;
    loop {
        let byte = *block.get(*at)?;
        *at += 1;
        value += usize::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
}

/// The `:status` of a response field block: the servers under test send it first, either as an
/// indexed static entry or as a literal with the static name `:status` (index 8).
fn decode_status(block: &[u8]) -> Option<u16> {
    let mut at = 0;
    // Dynamic table size updates (001xxxxx) may come first.
    while block.get(at).is_some_and(|b| b & 0xe0 == 0x20) {
        decode_integer(block, &mut at, 5)?;
    }
    let first = *block.get(at)?;
    if first & 0x80 != 0 {
        return match decode_integer(block, &mut at, 7)? {
            8 => Some(200),
            9 => Some(204),
            10 => Some(206),
            11 => Some(304),
            12 => Some(400),
            13 => Some(404),
            14 => Some(500),
            _ => None,
        };
    }
    let name_index = if first & 0xc0 == 0x40 {
        decode_integer(block, &mut at, 6)?
    } else {
        decode_integer(block, &mut at, 4)?
    };
    if name_index != 8 {
        return None;
    }
    let huffman = block.get(at)? & 0x80 != 0;
    let length = decode_integer(block, &mut at, 7)?;
    let value = block.get(at..at + length)?;
    let text = if huffman {
        huffman_digits(value)?
    } else {
        String::from_utf8(value.to_vec()).ok()?
    };
    text.parse().ok()
}

/// Decodes a Huffman-coded string of three digits (RFC 7541 Appendix B: '0'-'2' have 5-bit codes
/// 00000-00010, '3'-'9' have 6-bit codes 011001-011111).
fn huffman_digits(bytes: &[u8]) -> Option<String> {
    let bits: Vec<bool> = bytes
        .iter()
        .flat_map(|byte| (0..8).rev().map(move |i| byte >> i & 1 == 1))
        .collect();
    let take = |from: usize, n: usize| -> Option<u8> {
        bits.get(from..from + n)
            .map(|b| b.iter().fold(0u8, |acc, &bit| acc << 1 | u8::from(bit)))
    };
    let mut text = String::new();
    let mut at = 0;
    while text.len() < 3 {
        let five = take(at, 5)?;
        if five <= 2 {
            text.push(char::from(b'0' + five));
            at += 5;
            continue;
        }
        let six = take(at, 6)?;
        if !(25..=31).contains(&six) {
            return None;
        }
        text.push(char::from(b'0' + six - 22));
        at += 6;
    }
    Some(text)
}
