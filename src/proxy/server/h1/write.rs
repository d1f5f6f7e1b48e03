//! A response head serialised straight into the connection's write buffer, with the framing its
//! body goes out in, by the rules hyper's server applies (its `proto/h1/role.rs`), so that the
//! two HTTP/1.1 paths answer alike.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

use http::header::{self, HeaderMap, HeaderName};
use http::{Method, StatusCode};
use hyper::body::SizeHint;

use crate::cache::FieldValue;
use crate::proxy::request::interim::InterimHead;
use crate::proxy::response::headers::strip_hop_by_hop;
use crate::proxy::response::stored_head::StoredHead;

/// What the connection knows of the request a response answers.
#[derive(Clone, Copy, Debug)]
pub struct Answering {
    pub head: bool,
    pub http10: bool,
    /// Whether the client asked to keep the connection (and the server is willing).
    pub keep_alive: bool,
}

/// How a response's body is delimited on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// Exactly this many bytes (none for HEAD, 204, 304).
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the connection closes (an HTTP/1.0 client and a body of unknown length).
    Close,
}

/// A serialised head: its framing, and whether the connection may carry another request after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    pub framing: Framing,
    pub keep_alive: bool,
}

/// A response's fields as the head writer reads them: a header map, or a hit's stored head.
pub trait HeadFields {
    fn contains(&self, name: &HeaderName) -> bool;

    /// Calls `each` with every field, in the order they go out.
    fn for_each_field(&self, each: impl FnMut(&str, FieldValue<'_>));
}

impl HeadFields for HeaderMap {
    fn contains(&self, name: &HeaderName) -> bool {
        self.contains_key(name)
    }

    fn for_each_field(&self, mut each: impl FnMut(&str, FieldValue<'_>)) {
        for (name, value) in self {
            each(name.as_str(), FieldValue::Text(value.as_bytes()));
        }
    }
}

impl HeadFields for StoredHead {
    fn contains(&self, name: &HeaderName) -> bool {
        StoredHead::contains(self, name)
    }

    fn for_each_field(&self, each: impl FnMut(&str, FieldValue<'_>)) {
        StoredHead::for_each_field(self, each);
    }
}

/// Appends the status line and `fields` of a response with `status` to `out`, with the framing
/// of a body whose size is `size`; adds `Date` when absent and `Connection` where the
/// connection's fate needs saying.
pub fn write_head(
    out: &mut Vec<u8>,
    status: StatusCode,
    fields: &impl HeadFields,
    size: &SizeHint,
    answering: Answering,
) -> Written {
    write_status_line(out, status, answering.http10);
    let method = answering.head.then_some(&Method::HEAD);
    let can_chunk = !answering.http10 && can_have_body(method, status);
    let said = write_fields(out, status, fields, size, answering, can_chunk);
    let framing = match said.framing {
        Some(framing) => framing,
        None => write_framing(out, status, method, size, can_chunk),
    };
    let framing = if can_have_body(method, status) {
        framing
    } else {
        Framing::Length(0)
    };
    let mut keep_alive = answering.keep_alive;
    if said.close || framing == Framing::Close {
        keep_alive = false;
    }
    write_connection(out, answering.http10, keep_alive, &said);
    if !said.date {
        out.extend_from_slice(b"date: ");
        with_date(|date| out.extend_from_slice(date));
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Written {
        framing,
        keep_alive,
    }
}

/// What a response's own fields said about its framing and its connection.
struct Said {
    /// From its `Content-Length` or `Transfer-Encoding`, when one is sent.
    framing: Option<Framing>,
    /// Its `Connection` lists `keep-alive`.
    keep_alive: bool,
    /// Its `Connection` lists `close`.
    close: bool,
    /// It has a `Date`.
    date: bool,
}

fn write_status_line(out: &mut Vec<u8>, status: StatusCode, http10: bool) {
    let version: &[u8] = if http10 { b"HTTP/1.0 " } else { b"HTTP/1.1 " };
    out.extend_from_slice(version);
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    // A reason phrase is always written, as many parsers expect one.
    out.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends the response's own fields, leaving out or rewriting those that would misframe its
/// body: a `Content-Length` beside `Transfer-Encoding` or unlike the body's exact size, a
/// `Transfer-Encoding` (or `Trailer`) where chunking cannot be.
fn write_fields(
    out: &mut Vec<u8>,
    status: StatusCode,
    fields: &impl HeadFields,
    size: &SizeHint,
    answering: Answering,
    can_chunk: bool,
) -> Said {
    let mut said = Said {
        framing: None,
        keep_alive: false,
        close: false,
        date: false,
    };
    let chunked_field = can_chunk && fields.contains(&header::TRANSFER_ENCODING);
    fields.for_each_field(|name, value| {
        // The framing fields are never dates, so their bytes are borrowed.
        match name {
            "content-length" => {
                if chunked_field || !can_have_content_length(status) || said.framing.is_some() {
                    return;
                }
                let Some(announced) = content_length(&value.bytes()) else {
                    // A length we cannot read is not sent: the body's own size frames it.
                    return;
                };
                // The body's own length wins: the head never promises bytes it will not send.
                said.framing = Some(Framing::Length(size.exact().unwrap_or(announced)));
                if let Some(exact) = size.exact().filter(|exact| *exact != announced)
                    && !answering.head
                {
                    write_field(out, b"content-length", exact.to_string().as_bytes());
                    return;
                }
            }
            "transfer-encoding" => {
                if !can_chunk {
                    return;
                }
                let value = value.bytes();
                said.framing = Some(Framing::Chunked);
                out.extend_from_slice(b"transfer-encoding: ");
                out.extend_from_slice(&value);
                if !last_coding_is_chunked(&value) {
                    out.extend_from_slice(b", chunked");
                }
                out.extend_from_slice(b"\r\n");
                return;
            }
            "connection" => {
                let value = value.bytes();
                said.close |= names(&value, "close");
                said.keep_alive |= names(&value, "keep-alive");
            }
            "date" => said.date = true,
            "trailer" if !can_chunk => return,
            _ => {}
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        value.write_to(out);
        out.extend_from_slice(b"\r\n");
    });
    said
}

/// The framing of a response whose fields announced none, from its body's size, with the field
/// that announces it.
fn write_framing(
    out: &mut Vec<u8>,
    status: StatusCode,
    method: Option<&Method>,
    size: &SizeHint,
    can_chunk: bool,
) -> Framing {
    match size.exact() {
        Some(length) if can_have_content_length(status) => {
            if length > 0 || method.is_none() {
                write_field(out, b"content-length", length.to_string().as_bytes());
            }
            Framing::Length(length)
        }
        Some(_) => Framing::Length(0),
        None if can_chunk => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
            Framing::Chunked
        }
        None => Framing::Close,
    }
}

/// Says `Connection` where the response's own fields leave the connection's fate unsaid.
fn write_connection(out: &mut Vec<u8>, http10: bool, keep_alive: bool, said: &Said) {
    if http10 {
        if keep_alive && !said.keep_alive {
            write_field(out, b"connection", b"keep-alive");
        }
    } else if !keep_alive && !said.close {
        // Beside a Connection field the response has, one more line adds to the same list.
        write_field(out, b"connection", b"close");
    }
}

/// A bodiless answer the server makes itself: to a request it could not parse (`status` from the
/// parser), always closing the connection.
pub fn write_refusal(out: &mut Vec<u8>, status: StatusCode) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes());
    out.extend_from_slice(b"\r\ncontent-length: 0\r\nconnection: close\r\ndate: ");
    with_date(|date| out.extend_from_slice(date));
    out.extend_from_slice(b"\r\n\r\n");
}

/// Appends an interim response from the origin, its hop-by-hop fields and any length left out.
pub fn write_interim(out: &mut Vec<u8>, interim: &mut InterimHead) {
    strip_hop_by_hop(&mut interim.headers);
    // RFC 9110 section 8.6: never in a 1xx, which ends at its empty line; a client that took an
    // origin's length for a body would read the final response's first bytes as it.
    interim.headers.remove(header::CONTENT_LENGTH);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(interim.status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(
        interim
            .status
            .canonical_reason()
            .unwrap_or("<none>")
            .as_bytes(),
    );
    out.extend_from_slice(b"\r\n");
    for (name, value) in &interim.headers {
        write_field(out, name.as_str().as_bytes(), value.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
}

fn write_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// RFC 9110 section 6.4.1: no body after HEAD, 1xx, 204 or 304.
fn can_have_body(method: Option<&Method>, status: StatusCode) -> bool {
    method != Some(&Method::HEAD)
        && !status.is_informational()
        && !matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED)
}

/// RFC 9110 section 8.6: no Content-Length on 1xx or 204; a 304's would describe the stored
/// response, and hyper sends none, so neither does this.
fn can_have_content_length(status: StatusCode) -> bool {
    !status.is_informational()
        && !matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED)
}

fn content_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

fn last_coding_is_chunked(value: &[u8]) -> bool {
    value
        .rsplit(|b| *b == b',')
        .next()
        .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"))
}

/// Whether a `Connection` value lists `token`.
fn names(value: &[u8], token: &str) -> bool {
    value
        .split(|b| *b == b',')
        .any(|item| item.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
}

/// The `Date` value (RFC 9110 section 5.6.7), formatted once a second per thread.
fn with_date(use_it: impl FnOnce(&[u8])) {
    thread_local! {
        static DATE: RefCell<(u64, Vec<u8>)> = const { RefCell::new((u64::MAX, Vec::new())) };
    }
    let now = SystemTime::now();
    let second = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    DATE.with(|date| {
        let mut date = date.borrow_mut();
        if date.0 != second {
            date.1 = httpdate::fmt_http_date(now).into_bytes();
            date.0 = second;
        }
        use_it(&date.1);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(
        status: u16,
        fields: &[(&str, &str)],
        size: SizeHint,
        answering: Answering,
    ) -> (String, Written) {
        let mut response = http::Response::builder().status(status);
        for (name, value) in fields {
            response = response.header(*name, *value);
        }
        let (parts, ()) = response.body(()).expect("response").into_parts();
        let mut out = Vec::new();
        let written = write_head(&mut out, parts.status, &parts.headers, &size, answering);
        (String::from_utf8(out).expect("ascii"), written)
    }

    const GET11: Answering = Answering {
        head: false,
        http10: false,
        keep_alive: true,
    };

    #[test]
    fn a_body_of_known_length_is_framed_by_content_length() {
        let (text, written) = head(200, &[("x-a", "1")], SizeHint::with_exact(5), GET11);
        assert!(
            text.starts_with("HTTP/1.1 200 OK\r\nx-a: 1\r\ncontent-length: 5\r\ndate: "),
            "{text}"
        );
        assert!(text.ends_with("\r\n\r\n"));
        assert_eq!(
            written,
            Written {
                framing: Framing::Length(5),
                keep_alive: true
            }
        );
    }

    #[test]
    fn a_body_of_unknown_length_is_chunked_for_http11_and_close_delimited_for_http10() {
        let (text, written) = head(200, &[], SizeHint::default(), GET11);
        assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");
        assert_eq!(written.framing, Framing::Chunked);
        let http10 = Answering {
            http10: true,
            keep_alive: true,
            ..GET11
        };
        let (text, written) = head(200, &[], SizeHint::default(), http10);
        assert!(text.starts_with("HTTP/1.0 200 OK\r\n"), "{text}");
        assert!(!text.contains("transfer-encoding"), "{text}");
        assert_eq!(
            written,
            Written {
                framing: Framing::Close,
                keep_alive: false
            }
        );
    }

    #[test]
    fn a_head_answer_keeps_its_length_and_sends_no_body() {
        let answering = Answering {
            head: true,
            ..GET11
        };
        let (text, written) = head(
            200,
            &[("content-length", "1234")],
            SizeHint::with_exact(0),
            answering,
        );
        assert!(text.contains("content-length: 1234\r\n"), "{text}");
        assert_eq!(written.framing, Framing::Length(0));
    }

    #[test]
    fn a_304_and_a_204_carry_no_length_and_no_body() {
        for status in [204, 304] {
            let (text, written) = head(
                status,
                &[("content-length", "10")],
                SizeHint::with_exact(10),
                GET11,
            );
            assert!(!text.contains("content-length"), "{status}: {text}");
            assert_eq!(written.framing, Framing::Length(0));
        }
    }

    #[test]
    fn a_connection_the_client_closes_is_said_to_close() {
        let answering = Answering {
            keep_alive: false,
            ..GET11
        };
        let (text, written) = head(200, &[], SizeHint::with_exact(0), answering);
        assert!(text.contains("connection: close\r\n"), "{text}");
        assert!(!written.keep_alive);
    }

    #[test]
    fn an_http10_client_that_keeps_alive_is_told_so() {
        let answering = Answering {
            http10: true,
            ..GET11
        };
        let (text, written) = head(200, &[], SizeHint::with_exact(2), answering);
        assert!(text.contains("connection: keep-alive\r\n"), "{text}");
        assert!(written.keep_alive);
    }

    #[test]
    fn a_refusal_closes_the_connection() {
        let mut out = Vec::new();
        write_refusal(&mut out, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        let text = String::from_utf8(out).expect("ascii");
        assert!(text.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\nconnection: close\r\n"), "{text}");
    }
}
