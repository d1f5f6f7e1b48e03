//! The request head: httparse tokenises it, and the framing rules of RFC 9112 are checked on top.
//!
//! It refuses everything hyper's HTTP/1 server (1.12, `proto/h1/role.rs`) refuses, and more where
//! an RFC asks for it; each rule hyper does not enforce says so on its [`ParseError`] variant
//! ([`ParseError::beyond_hyper`]).

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Method, Request, StatusCode, Uri, Version};

/// The longest request target hyper takes (`MAX_URI_LEN` in its `role.rs`); longer is 414.
pub const MAX_TARGET_LEN: usize = u16::MAX as usize - 1;

/// hyper's default cap on a request's header fields, which bloomgate does not change.
pub const DEFAULT_MAX_HEADERS: usize = 100;

/// Field slots on the stack: enough for hyper's default cap without a heap allocation.
const STACK_HEADERS: usize = 128;

/// Limits the server applies, from the `[server]` configuration: `server.max_header_bytes` (which
/// hyper's path gives as its read buffer's size) and hyper's cap of 100 header fields.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_headers: usize,
    pub max_head_bytes: usize,
}

/// How the request's body is delimited (RFC 9112 section 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    Empty,
    Length(u64),
    Chunked,
}

/// One parsed request head and what it says about the connection.
#[derive(Debug)]
pub struct RequestHead {
    /// Method, target, version and fields; a `Content-Length` beside `Transfer-Encoding` removed.
    pub request: Request<()>,
    pub framing: BodyFraming,
    /// HTTP/1.1 on unless `Connection: close`; HTTP/1.0 off unless `Connection: keep-alive`; off
    /// after a request that carried both `Transfer-Encoding` and `Content-Length`.
    pub keep_alive: bool,
    /// `Expect: 100-continue` on HTTP/1.1 (RFC 9110 10.1.1: ignored on HTTP/1.0).
    pub expect_continue: bool,
    /// An `Upgrade` request (HTTP/1.1) or a `CONNECT`: the server refuses it.
    pub upgrade: bool,
}

/// Why a request head was refused; [`ParseError::status`] is the answer to send before closing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("request head is longer than the {limit}-byte limit")]
    HeadTooLarge { limit: usize },
    #[error("request head has more than {limit} header fields")]
    TooManyHeaders { limit: usize },
    #[error("request target of {len} bytes is longer than {MAX_TARGET_LEN}")]
    TargetTooLong { len: usize },
    #[error("request method is not a token")]
    InvalidMethod,
    #[error("request target is not a valid URI")]
    InvalidTarget,
    /// Beyond hyper: RFC 9112 3.2.3 and 3.2.4 allow the authority form for `CONNECT` only and
    /// `*` for `OPTIONS` only.
    #[error("request target form is not allowed with {method}")]
    TargetForm { method: Method },
    /// Beyond hyper: RFC 9110 4.2.4, a recipient "SHOULD ... treat [userinfo's] presence as an
    /// error" in an http(s) URI, and it has no place in a cache key.
    #[error("request target has user information before its host")]
    TargetUserinfo,
    /// A well-formed `HTTP/x.y` other than 1.0 and 1.1: 505 (RFC 9112 2.3).
    #[error("request line's version is not HTTP/1.0 or HTTP/1.1")]
    Version,
    /// A request line that is not three tokens ending in `HTTP/x.y` (RFC 9112 3): 400, as hyper
    /// answers any line it cannot read.
    #[error("request line is not a method, a target and an HTTP version")]
    RequestLine,
    #[error("request head has an invalid header field name")]
    HeaderName,
    #[error("request head has an invalid header field value (a control character or bare CR)")]
    HeaderValue,
    #[error("request head has a bare CR, or bytes between the version and the line's end")]
    LineEnd,
    /// Beyond hyper: RFC 9112 2.2 lets a recipient take a bare LF as a line end; refusing it
    /// leaves no room for a front proxy that reads the line differently to smuggle a field.
    #[error("request head has a line ending in LF without CR at byte {offset}")]
    BareLf { offset: usize },
    /// Beyond hyper: RFC 9112 3.2, "MUST respond with a 400 ... that lacks a Host header field".
    #[error("HTTP/1.1 request has no Host field")]
    MissingHost,
    /// Beyond hyper: RFC 9112 3.2, "more than one Host header field line" is a 400.
    #[error("request has more than one Host field")]
    DuplicateHost,
    /// A value that is not one decimal number, a list (`5, 5`) included, as hyper refuses it.
    #[error("request's Content-Length is not one decimal number below 2^64 - 2")]
    InvalidContentLength,
    #[error("request has Content-Length fields that differ")]
    DifferingContentLengths,
    /// Beyond hyper, which ignores a Content-Length line after a Transfer-Encoding line: a
    /// malformed length beside chunked is refused whatever the order (RFC 9112 6.3 calls any
    /// such pair a likely smuggling attempt).
    #[error("request has a malformed Content-Length beside its Transfer-Encoding")]
    InvalidContentLengthBesideTransferEncoding,
    #[error("HTTP/1.0 request has a Transfer-Encoding field")]
    TransferEncodingOnHttp10,
    #[error("request's Transfer-Encoding does not end in chunked")]
    ChunkedNotFinal,
    /// Beyond hyper, which reads only the last field line's last coding: RFC 9112 6.1 forbids
    /// chunked twice, and a list with an empty or malformed member has no one meaning.
    #[error("request's Transfer-Encoding is not a list of codings ending in one chunked")]
    InvalidTransferEncoding,
    /// Beyond hyper, which accepts `gzip, chunked` and hands on the body still coded: bloomgate
    /// decodes no coding but chunked, and RFC 9112 6.1 answers an unknown one with 501.
    #[error("request's Transfer-Encoding has a coding other than chunked")]
    UnsupportedTransferCoding,
    /// Beyond hyper, which ignores any expectation but `100-continue`: RFC 9110 10.1.1 allows 417.
    #[error("request has an expectation other than 100-continue")]
    Expectation,
}

impl ParseError {
    /// The status of the answer to a request refused with this error.
    pub fn status(&self) -> StatusCode {
        match self {
            ParseError::HeadTooLarge { .. } | ParseError::TooManyHeaders { .. } => {
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
            }
            ParseError::TargetTooLong { .. } => StatusCode::URI_TOO_LONG,
            ParseError::Version => StatusCode::HTTP_VERSION_NOT_SUPPORTED,
            ParseError::UnsupportedTransferCoding => StatusCode::NOT_IMPLEMENTED,
            ParseError::Expectation => StatusCode::EXPECTATION_FAILED,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    /// Whether this refusal is one hyper's server does not make (each such variant says why).
    pub fn beyond_hyper(&self) -> bool {
        matches!(
            self,
            ParseError::TargetForm { .. }
                | ParseError::InvalidContentLengthBesideTransferEncoding
                | ParseError::TargetUserinfo
                | ParseError::BareLf { .. }
                | ParseError::MissingHost
                | ParseError::DuplicateHost
                | ParseError::InvalidTransferEncoding
                | ParseError::UnsupportedTransferCoding
                | ParseError::Expectation
        )
    }
}

/// Parses the request head at the front of `buf`.
///
/// `Ok(None)`: the head is not complete yet; read more (unless `buf` already holds
/// `limits.max_head_bytes`, which is [`ParseError::HeadTooLarge`]). `Ok(Some((head, n)))`: the head
/// took `buf[..n]`, and its body (if any) starts at `buf[n]`. Leading empty lines are skipped
/// (RFC 9112 2.2) and counted in `n`.
pub fn parse_request(
    buf: &[u8],
    limits: &Limits,
) -> Result<Option<(RequestHead, usize)>, ParseError> {
    if limits.max_headers <= STACK_HEADERS {
        let mut fields = [httparse::EMPTY_HEADER; STACK_HEADERS];
        parse_with(buf, limits, &mut fields[..limits.max_headers])
    } else {
        let mut fields = vec![httparse::EMPTY_HEADER; limits.max_headers];
        parse_with(buf, limits, &mut fields)
    }
}

fn parse_with<'b>(
    buf: &'b [u8],
    limits: &Limits,
    fields: &mut [httparse::Header<'b>],
) -> Result<Option<(RequestHead, usize)>, ParseError> {
    let mut parsed = httparse::Request::new(fields);
    let len = match parsed.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => {
            if buf.len() >= limits.max_head_bytes {
                return Err(ParseError::HeadTooLarge {
                    limit: limits.max_head_bytes,
                });
            }
            return Ok(None);
        }
        Err(error) => {
            return Err(tokenising_error(
                error,
                buf,
                parsed.method.is_none(),
                limits,
            ));
        }
    };
    if len > limits.max_head_bytes {
        return Err(ParseError::HeadTooLarge {
            limit: limits.max_head_bytes,
        });
    }
    if let Some(offset) = bare_lf(&buf[..len]) {
        return Err(ParseError::BareLf { offset });
    }
    // httparse has filled in every part of a complete head; their absence is a refusal, not a panic.
    let (Some(method), Some(target), Some(minor)) = (parsed.method, parsed.path, parsed.version)
    else {
        return Err(ParseError::InvalidTarget);
    };
    let method = Method::from_bytes(method.as_bytes()).map_err(|_| ParseError::InvalidMethod)?;
    let version = if minor == 1 {
        Version::HTTP_11
    } else {
        Version::HTTP_10
    };
    let uri = request_target(target, &method)?;
    let fields = Fields::read(parsed.headers, version)?;
    let framing = fields.framing()?;
    let expect_continue = fields.expects_continue()? && version == Version::HTTP_11;

    let mut keep_alive = fields.keep_alive(version);
    let mut headers = fields.headers;
    if fields.transfer_encoding && fields.content_length.is_some() {
        // RFC 9112 6.3: Transfer-Encoding overrides, and the connection closes after the answer.
        headers.remove(header::CONTENT_LENGTH);
        keep_alive = false;
    }
    let upgrade = method == Method::CONNECT || (fields.upgrade && version == Version::HTTP_11);

    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = version;
    *request.headers_mut() = headers;
    let head = RequestHead {
        request,
        framing,
        keep_alive,
        expect_continue,
        upgrade,
    };
    Ok(Some((head, len)))
}

/// httparse's refusal as ours: a bad token is the method's until the method is read.
fn tokenising_error(
    error: httparse::Error,
    buf: &[u8],
    in_method: bool,
    limits: &Limits,
) -> ParseError {
    match error {
        httparse::Error::Token if in_method => ParseError::InvalidMethod,
        httparse::Error::Token => ParseError::InvalidTarget,
        httparse::Error::Version if names_another_version(buf) => ParseError::Version,
        httparse::Error::Version => ParseError::RequestLine,
        httparse::Error::HeaderName => ParseError::HeaderName,
        httparse::Error::HeaderValue => ParseError::HeaderValue,
        httparse::Error::NewLine | httparse::Error::Status => ParseError::LineEnd,
        httparse::Error::TooManyHeaders => ParseError::TooManyHeaders {
            limit: limits.max_headers,
        },
    }
}

/// Whether the request line at the front of `buf` is three tokens whose last is `HTTP/x.y`
/// (digits, the name in capitals as RFC 9112 2.3 writes it): a version we do not speak, rather
/// than a line that is not a request line at all.
fn names_another_version(buf: &[u8]) -> bool {
    let end = buf
        .iter()
        .position(|&byte| byte == b'\r' || byte == b'\n')
        .unwrap_or(buf.len());
    let mut tokens = buf[..end].split(|&byte| byte == b' ');
    let (Some(_), Some(_), Some(version), None) =
        (tokens.next(), tokens.next(), tokens.next(), tokens.next())
    else {
        return false;
    };
    matches!(version, [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
        if major.is_ascii_digit() && minor.is_ascii_digit())
}

/// The offset of the first LF in `head` that no CR precedes.
fn bare_lf(head: &[u8]) -> Option<usize> {
    head.iter()
        .enumerate()
        .find(|&(at, &byte)| byte == b'\n' && (at == 0 || head[at - 1] != b'\r'))
        .map(|(at, _)| at)
}

/// The request target as a URI, in a form its method allows (RFC 9112 3.2).
fn request_target(target: &str, method: &Method) -> Result<Uri, ParseError> {
    if target.len() > MAX_TARGET_LEN {
        return Err(ParseError::TargetTooLong { len: target.len() });
    }
    let uri = Uri::from_maybe_shared(Bytes::copy_from_slice(target.as_bytes()))
        .map_err(|_| ParseError::InvalidTarget)?;
    let asterisk = target == "*";
    let origin_form = target.starts_with('/');
    let absolute_form = uri.scheme().is_some() && uri.authority().is_some();
    let allowed = if asterisk {
        method == Method::OPTIONS
    } else {
        origin_form || absolute_form || method == Method::CONNECT
    };
    if !allowed {
        return Err(ParseError::TargetForm {
            method: method.clone(),
        });
    }
    if uri
        .authority()
        .is_some_and(|authority| authority.as_str().contains('@'))
    {
        return Err(ParseError::TargetUserinfo);
    }
    Ok(uri)
}

/// The fields of one head, and what the framing rules need to know of them.
struct Fields {
    headers: HeaderMap,
    hosts: usize,
    content_length: Option<u64>,
    /// The first Content-Length refusal, kept until it is known whether Transfer-Encoding came.
    content_length_error: Option<ParseError>,
    transfer_encoding: bool,
    /// Every coding named by every `Transfer-Encoding` line, in order.
    codings: Vec<Bytes>,
    connection_close: bool,
    connection_keep_alive: bool,
    expectations: Vec<Bytes>,
    upgrade: bool,
}

impl Fields {
    fn read(parsed: &[httparse::Header<'_>], version: Version) -> Result<Fields, ParseError> {
        let mut fields = Fields {
            headers: HeaderMap::with_capacity(parsed.len()),
            hosts: 0,
            content_length: None,
            content_length_error: None,
            transfer_encoding: false,
            codings: Vec::new(),
            connection_close: false,
            connection_keep_alive: false,
            expectations: Vec::new(),
            upgrade: false,
        };
        for field in parsed {
            let name = HeaderName::from_bytes(field.name.as_bytes())
                .map_err(|_| ParseError::HeaderName)?;
            let value =
                HeaderValue::from_bytes(field.value).map_err(|_| ParseError::HeaderValue)?;
            // A repeated Content-Length says nothing more: one line is kept, as hyper keeps it.
            let repeated = name == header::CONTENT_LENGTH && fields.content_length.is_some();
            fields.note(&name, field.value, version)?;
            if !repeated {
                fields.headers.append(name, value);
            }
        }
        if let Some(error) = fields.content_length_error.take() {
            return Err(match fields.transfer_encoding {
                true => ParseError::InvalidContentLengthBesideTransferEncoding,
                false => error,
            });
        }
        if fields.hosts > 1 {
            return Err(ParseError::DuplicateHost);
        }
        if fields.hosts == 0 && version == Version::HTTP_11 {
            return Err(ParseError::MissingHost);
        }
        Ok(fields)
    }

    fn note(
        &mut self,
        name: &HeaderName,
        value: &[u8],
        version: Version,
    ) -> Result<(), ParseError> {
        match *name {
            header::HOST => {
                // Its value is the request path's to judge (`cache::Authority`, a 400 the access
                // log records, on either server); how many there are is framing, and ours.
                self.hosts += 1;
            }
            header::CONTENT_LENGTH if self.content_length_error.is_none() => {
                match (decimal(value), self.content_length) {
                    (None, _) => self.content_length_error = Some(ParseError::InvalidContentLength),
                    (Some(length), Some(earlier)) if earlier != length => {
                        self.content_length_error = Some(ParseError::DifferingContentLengths);
                    }
                    (length, _) => self.content_length = length,
                }
            }
            header::TRANSFER_ENCODING => {
                if version == Version::HTTP_10 {
                    return Err(ParseError::TransferEncodingOnHttp10);
                }
                self.transfer_encoding = true;
                for coding in value.split(|&byte| byte == b',') {
                    self.codings
                        .push(Bytes::copy_from_slice(trim_whitespace(coding)));
                }
            }
            // hyper reads a Connection line only when it is visible ASCII (`to_str`).
            header::CONNECTION if value.is_ascii() => {
                for option in list_members(value) {
                    self.connection_close |= option.eq_ignore_ascii_case(b"close");
                    self.connection_keep_alive |= option.eq_ignore_ascii_case(b"keep-alive");
                }
            }
            header::EXPECT => {
                self.expectations
                    .extend(list_members(value).map(Bytes::copy_from_slice));
            }
            header::UPGRADE => self.upgrade = true,
            _ => {}
        }
        Ok(())
    }

    /// The body's framing, by RFC 9112 6.3: chunked if Transfer-Encoding says so, else
    /// Content-Length, else none.
    fn framing(&self) -> Result<BodyFraming, ParseError> {
        if self.transfer_encoding {
            let Some(last) = self.codings.last() else {
                return Err(ParseError::ChunkedNotFinal);
            };
            if !last.eq_ignore_ascii_case(b"chunked") {
                return Err(ParseError::ChunkedNotFinal);
            }
            let others = &self.codings[..self.codings.len() - 1];
            if others
                .iter()
                .any(|coding| coding.is_empty() || coding.eq_ignore_ascii_case(b"chunked"))
                || self.codings.iter().any(|coding| !is_token(coding))
            {
                return Err(ParseError::InvalidTransferEncoding);
            }
            if !others.is_empty() {
                return Err(ParseError::UnsupportedTransferCoding);
            }
            return Ok(BodyFraming::Chunked);
        }
        Ok(match self.content_length {
            None | Some(0) => BodyFraming::Empty,
            Some(length) => BodyFraming::Length(length),
        })
    }

    /// Whether the request expects `100 Continue`; any other expectation is refused.
    fn expects_continue(&self) -> Result<bool, ParseError> {
        if self
            .expectations
            .iter()
            .any(|expectation| !expectation.eq_ignore_ascii_case(b"100-continue"))
        {
            return Err(ParseError::Expectation);
        }
        Ok(!self.expectations.is_empty())
    }

    fn keep_alive(&self, version: Version) -> bool {
        !self.connection_close && (version == Version::HTTP_11 || self.connection_keep_alive)
    }
}

/// One decimal number with no sign, as hyper's `from_digits`; lengths hyper's body decoder cannot
/// represent (`u64::MAX - 1` and above) are refused too.
fn decimal(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    let mut number: u64 = 0;
    for &byte in value {
        if !byte.is_ascii_digit() {
            return None;
        }
        number = number
            .checked_mul(10)?
            .checked_add(u64::from(byte - b'0'))?;
    }
    (number <= u64::MAX - 2).then_some(number)
}

/// The non-empty members of a comma-separated list (RFC 9110 5.6.1), without their whitespace.
fn list_members(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&byte| byte == b',')
        .map(trim_whitespace)
        .filter(|member| !member.is_empty())
}

fn trim_whitespace(mut bytes: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = bytes {
        bytes = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = bytes {
        bytes = rest;
    }
    bytes
}

/// RFC 9110 5.6.2's token: one or more tchar.
pub(crate) fn is_token(bytes: &[u8]) -> bool {
    !bytes.is_empty() && bytes.iter().all(|&byte| is_tchar(byte))
}

pub(crate) fn is_tchar(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_headers: DEFAULT_MAX_HEADERS,
        max_head_bytes: 64 << 10,
    };

    fn parse(head: &str) -> Result<Option<(RequestHead, usize)>, ParseError> {
        parse_request(head.as_bytes(), &LIMITS)
    }

    fn head(text: &str) -> RequestHead {
        match parse(text) {
            Ok(Some((head, len))) => {
                assert_eq!(len, text.len(), "the whole of {text:?} is the head");
                head
            }
            other => panic!("{text:?} should parse, got {other:?}"),
        }
    }

    fn refused(text: &str) -> ParseError {
        match parse(text) {
            Err(error) => error,
            other => panic!("{text:?} should be refused, got {other:?}"),
        }
    }

    #[test]
    fn a_plain_get_is_parsed_with_no_body_and_keep_alive() {
        let head = head("GET /a?b=c HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n");
        assert_eq!(head.request.method(), Method::GET);
        assert_eq!(head.request.uri(), "/a?b=c");
        assert_eq!(head.request.version(), Version::HTTP_11);
        assert_eq!(head.request.headers()["host"], "example.com");
        assert_eq!(head.request.headers()["accept"], "*/*");
        assert_eq!(head.framing, BodyFraming::Empty);
        assert!(head.keep_alive);
        assert!(!head.expect_continue);
        assert!(!head.upgrade);
    }

    #[test]
    fn an_incomplete_head_asks_for_more() {
        assert!(matches!(parse("GET / HTTP/1.1\r\nHost: a\r\n"), Ok(None)));
        assert!(matches!(parse(""), Ok(None)));
    }

    #[test]
    fn the_head_length_leaves_the_body_and_the_next_request_in_the_buffer() {
        let text = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET";
        let Ok(Some((head, len))) = parse(text) else {
            panic!("parses");
        };
        assert_eq!(&text[len..], "abcGET");
        assert_eq!(head.framing, BodyFraming::Length(3));
    }

    #[test]
    fn leading_empty_lines_are_skipped_and_counted() {
        let text = "\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(head(text).request.uri(), "/");
    }

    #[test]
    fn only_http_1_0_and_1_1_are_understood() {
        for text in [
            "GET / HTTP/2.0\r\nHost: a\r\n\r\n",
            "GET / HTTP/1.2\r\nHost: a\r\n\r\n",
            "GET / HTTP/0.9\r\n\r\n",
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        ] {
            let error = refused(text);
            assert_eq!(error, ParseError::Version, "{text:?}");
            assert_eq!(error.status(), StatusCode::HTTP_VERSION_NOT_SUPPORTED);
        }
        assert_eq!(
            head("GET / HTTP/1.0\r\n\r\n").request.version(),
            Version::HTTP_10
        );
    }

    #[test]
    fn a_line_that_is_not_a_request_line_is_400_not_505() {
        for text in [
            "THIS IS NOT HTTP\r\n\r\n",
            "garbage\r\n\r\n",
            "GET /a b HTTP/1.1\r\nHost: a\r\n\r\n",
            "GET / http/1.1\r\nHost: a\r\n\r\n",
            "GET / HTTP/1.10\r\nHost: a\r\n\r\n",
        ] {
            let error = refused(text);
            assert_ne!(error, ParseError::Version, "{text:?}");
            assert_eq!(error.status(), StatusCode::BAD_REQUEST, "{text:?}");
        }
    }

    #[test]
    fn a_request_line_with_extra_spaces_is_refused() {
        assert_eq!(
            refused("GET  / HTTP/1.1\r\nHost: a\r\n\r\n"),
            ParseError::InvalidTarget
        );
        assert_eq!(
            refused("GET / HTTP/1.1 \r\nHost: a\r\n\r\n"),
            ParseError::LineEnd
        );
    }

    #[test]
    fn a_method_that_is_not_a_token_is_refused() {
        assert_eq!(
            refused("G(T / HTTP/1.1\r\nHost: a\r\n\r\n"),
            ParseError::InvalidMethod
        );
    }

    #[test]
    fn absolute_form_targets_are_taken() {
        let head = head("GET http://example.com:8080/x?y HTTP/1.1\r\nHost: other\r\n\r\n");
        assert_eq!(head.request.uri().host(), Some("example.com"));
        assert_eq!(
            head.request.uri().path_and_query().map(|p| p.as_str()),
            Some("/x?y")
        );
    }

    #[test]
    fn userinfo_in_the_target_is_refused() {
        assert_eq!(
            refused("GET http://user@example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n"),
            ParseError::TargetUserinfo
        );
    }

    #[test]
    fn authority_form_is_only_for_connect() {
        assert!(matches!(
            refused("GET example.com:80 HTTP/1.1\r\nHost: example.com\r\n\r\n"),
            ParseError::TargetForm { .. }
        ));
        let connect = head("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n");
        assert!(connect.upgrade);
    }

    #[test]
    fn asterisk_form_is_only_for_options() {
        assert!(head("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n").request.uri() == "*");
        assert!(matches!(
            refused("GET * HTTP/1.1\r\nHost: a\r\n\r\n"),
            ParseError::TargetForm { .. }
        ));
    }

    #[test]
    fn a_target_that_is_not_a_uri_is_refused() {
        assert_eq!(
            refused("GET /a<b> HTTP/1.1\r\nHost: a\r\n\r\n"),
            ParseError::InvalidTarget
        );
    }

    #[test]
    fn a_target_longer_than_hypers_limit_is_414() {
        let target = format!("/{}", "a".repeat(MAX_TARGET_LEN));
        let text = format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n");
        let limits = Limits {
            max_headers: 100,
            max_head_bytes: 1 << 20,
        };
        let error = parse_request(text.as_bytes(), &limits).expect_err("refused");
        assert_eq!(error.status(), StatusCode::URI_TOO_LONG);
    }

    #[test]
    fn http_1_1_without_host_is_refused() {
        assert_eq!(refused("GET / HTTP/1.1\r\n\r\n"), ParseError::MissingHost);
        assert_eq!(ParseError::MissingHost.status(), StatusCode::BAD_REQUEST);
        assert!(head("GET / HTTP/1.0\r\n\r\n").request.headers().is_empty());
    }

    #[test]
    fn two_host_fields_are_refused() {
        assert_eq!(
            refused("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n"),
            ParseError::DuplicateHost
        );
        assert_eq!(
            refused("GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n"),
            ParseError::DuplicateHost
        );
    }

    #[test]
    fn content_length_frames_the_body() {
        let head = head("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 42\r\n\r\n");
        assert_eq!(head.framing, BodyFraming::Length(42));
        let zero = self::head("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(zero.framing, BodyFraming::Empty);
    }

    #[test]
    fn equal_content_lengths_on_separate_lines_are_one_length() {
        let head =
            head("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n");
        assert_eq!(head.framing, BodyFraming::Length(5));
        let lengths = head.request.headers().get_all(header::CONTENT_LENGTH);
        assert_eq!(lengths.iter().count(), 1, "one line is forwarded");
    }

    #[test]
    fn a_content_length_list_is_refused_as_hyper_does() {
        assert_eq!(
            refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n"),
            ParseError::InvalidContentLength
        );
    }

    #[test]
    fn differing_content_lengths_are_refused() {
        assert_eq!(
            refused("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"),
            ParseError::DifferingContentLengths
        );
    }

    #[test]
    fn a_content_length_that_is_not_digits_is_refused() {
        for value in ["+5", "-1", "0x10", "5 5", "", "1e3", "\u{664}"] {
            let text = format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {value}\r\n\r\n");
            assert_eq!(
                refused(&text),
                ParseError::InvalidContentLength,
                "{value:?}"
            );
        }
    }

    #[test]
    fn a_content_length_that_overflows_is_refused() {
        for value in [
            "18446744073709551616",
            "99999999999999999999999",
            "18446744073709551614",
        ] {
            let text = format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {value}\r\n\r\n");
            assert_eq!(refused(&text), ParseError::InvalidContentLength, "{value}");
        }
        let largest =
            head("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551613\r\n\r\n");
        assert_eq!(largest.framing, BodyFraming::Length(u64::MAX - 2));
    }

    #[test]
    fn transfer_encoding_chunked_frames_the_body() {
        let head = head("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(head.framing, BodyFraming::Chunked);
        assert!(head.keep_alive);
        let upper = self::head("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: CHUNKED\r\n\r\n");
        assert_eq!(upper.framing, BodyFraming::Chunked);
    }

    #[test]
    fn chunked_must_be_the_final_coding() {
        for value in ["chunked, gzip", "gzip", "identity", "chunked;q=1", "", ","] {
            let text = format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: {value}\r\n\r\n");
            assert_eq!(refused(&text), ParseError::ChunkedNotFinal, "{value:?}");
        }
        assert_eq!(
            refused(
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n"
            ),
            ParseError::ChunkedNotFinal
        );
    }

    #[test]
    fn chunked_twice_is_refused() {
        assert_eq!(
            refused("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n"),
            ParseError::InvalidTransferEncoding
        );
        assert_eq!(
            refused(
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"
            ),
            ParseError::InvalidTransferEncoding
        );
        assert_eq!(
            refused("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: , chunked\r\n\r\n"),
            ParseError::InvalidTransferEncoding
        );
    }

    #[test]
    fn a_coding_before_chunked_is_not_implemented() {
        let error =
            refused("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
        assert_eq!(error, ParseError::UnsupportedTransferCoding);
        assert_eq!(error.status(), StatusCode::NOT_IMPLEMENTED);
    }

    #[test]
    fn transfer_encoding_on_http_1_0_is_refused() {
        assert_eq!(
            refused("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"),
            ParseError::TransferEncodingOnHttp10
        );
    }

    #[test]
    fn transfer_encoding_overrides_content_length_and_closes_the_connection() {
        for text in [
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
        ] {
            let head = head(text);
            assert_eq!(head.framing, BodyFraming::Chunked);
            assert!(!head.keep_alive, "{text:?}");
            assert!(head.request.headers().get(header::CONTENT_LENGTH).is_none());
        }
    }

    #[test]
    fn an_invalid_content_length_beside_transfer_encoding_is_refused() {
        for text in [
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: x\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        ] {
            assert_eq!(
                refused(text),
                ParseError::InvalidContentLengthBesideTransferEncoding,
                "{text:?}"
            );
        }
    }

    #[test]
    fn obs_fold_is_refused() {
        assert_eq!(
            refused("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n"),
            ParseError::HeaderName
        );
        assert_eq!(
            refused("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n\tc\r\n\r\n"),
            ParseError::HeaderName
        );
    }

    #[test]
    fn a_bare_cr_is_refused() {
        for text in [
            "GET / HTTP/1.1\rHost: a\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\rc\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\n\r\r\n",
            "\rGET / HTTP/1.1\r\nHost: a\r\n\r\n",
        ] {
            let error = refused(text);
            assert_eq!(error.status(), StatusCode::BAD_REQUEST, "{text:?}");
        }
    }

    #[test]
    fn a_bare_lf_is_refused() {
        for text in [
            "GET / HTTP/1.1\nHost: a\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\n\n",
            "\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
        ] {
            assert!(
                matches!(refused(text), ParseError::BareLf { .. }),
                "{text:?}"
            );
        }
    }

    #[test]
    fn control_characters_in_a_value_are_refused() {
        for byte in [0u8, 1, 0x0b, 0x1f, 0x7f] {
            let mut text = b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b".to_vec();
            text.push(byte);
            text.extend_from_slice(b"c\r\n\r\n");
            assert_eq!(
                parse_request(&text, &LIMITS).expect_err("refused"),
                ParseError::HeaderValue,
                "{byte:#x}"
            );
        }
    }

    #[test]
    fn obs_text_in_a_value_is_kept() {
        let mut text = b"GET / HTTP/1.1\r\nHost: a\r\nX-A: caf".to_vec();
        text.extend_from_slice(&[0xc3, 0xa9, 0xff]);
        text.extend_from_slice(b"\r\n\r\n");
        let Ok(Some((head, _))) = parse_request(&text, &LIMITS) else {
            panic!("parses");
        };
        assert_eq!(head.request.headers()["x-a"].as_bytes(), b"caf\xc3\xa9\xff");
    }

    #[test]
    fn whitespace_before_the_colon_is_refused() {
        assert_eq!(
            refused("GET / HTTP/1.1\r\nHost : a\r\n\r\n"),
            ParseError::HeaderName
        );
        assert_eq!(
            refused("GET / HTTP/1.1\r\nHost: a\r\nContent-Length\t: 5\r\n\r\n"),
            ParseError::HeaderName
        );
    }

    #[test]
    fn an_empty_header_name_is_refused() {
        assert_eq!(
            refused("GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n"),
            ParseError::HeaderName
        );
        assert_eq!(
            refused("GET / HTTP/1.1\r\nHost: a\r\nno colon\r\n\r\n"),
            ParseError::HeaderName
        );
    }

    #[test]
    fn more_header_fields_than_the_limit_are_431() {
        let mut text = String::from("GET / HTTP/1.1\r\nHost: a\r\n");
        for field in 0..DEFAULT_MAX_HEADERS {
            text.push_str(&format!("X-{field}: v\r\n"));
        }
        text.push_str("\r\n");
        let error = refused(&text);
        assert_eq!(error, ParseError::TooManyHeaders { limit: 100 });
        assert_eq!(error.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);

        let limits = Limits {
            max_headers: 200,
            max_head_bytes: 64 << 10,
        };
        assert!(matches!(
            parse_request(text.as_bytes(), &limits),
            Ok(Some(_))
        ));
    }

    #[test]
    fn a_head_larger_than_the_limit_is_431_complete_or_not() {
        let limits = Limits {
            max_headers: 100,
            max_head_bytes: 64,
        };
        let complete = format!(
            "GET / HTTP/1.1\r\nHost: a\r\nX-A: {}\r\n\r\n",
            "b".repeat(64)
        );
        let error = parse_request(complete.as_bytes(), &limits).expect_err("refused");
        assert_eq!(error, ParseError::HeadTooLarge { limit: 64 });
        assert_eq!(error.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        let partial = &complete.as_bytes()[..64];
        assert_eq!(
            parse_request(partial, &limits).expect_err("refused"),
            ParseError::HeadTooLarge { limit: 64 }
        );
        assert!(matches!(parse_request(&partial[..63], &limits), Ok(None)));
    }

    #[test]
    fn connection_close_ends_keep_alive() {
        assert!(!head("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").keep_alive);
        assert!(!head("GET / HTTP/1.1\r\nHost: a\r\nConnection: x-a, Close\r\n\r\n").keep_alive);
        assert!(
            !head(
                "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n"
            )
            .keep_alive
        );
    }

    #[test]
    fn http_1_0_keeps_alive_only_when_asked() {
        assert!(!head("GET / HTTP/1.0\r\n\r\n").keep_alive);
        assert!(head("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive);
        assert!(!head("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n").keep_alive);
    }

    #[test]
    fn connection_options_stay_in_the_fields_for_the_hop_by_hop_strip() {
        let head = head("GET / HTTP/1.1\r\nHost: a\r\nConnection: x-secret\r\nX-Secret: 1\r\n\r\n");
        assert!(head.keep_alive);
        assert_eq!(head.request.headers()["connection"], "x-secret");
    }

    #[test]
    fn expect_100_continue_is_noted_on_http_1_1_only() {
        let text =
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-Continue\r\n\r\n";
        assert!(head(text).expect_continue);
        let old = "POST / HTTP/1.0\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n";
        assert!(!head(old).expect_continue);
    }

    #[test]
    fn other_expectations_are_417() {
        let error = refused("GET / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n");
        assert_eq!(error, ParseError::Expectation);
        assert_eq!(error.status(), StatusCode::EXPECTATION_FAILED);
        assert_eq!(
            refused("GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue, x\r\n\r\n"),
            ParseError::Expectation
        );
    }

    #[test]
    fn an_upgrade_on_http_1_1_is_flagged() {
        assert!(
            head("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n")
                .upgrade
        );
        assert!(!head("GET / HTTP/1.0\r\nUpgrade: websocket\r\n\r\n").upgrade);
    }

    #[test]
    fn every_refusal_beyond_hyper_is_a_4xx_or_501() {
        for error in [
            ParseError::TargetUserinfo,
            ParseError::BareLf { offset: 0 },
            ParseError::MissingHost,
            ParseError::DuplicateHost,
            ParseError::InvalidTransferEncoding,
            ParseError::UnsupportedTransferCoding,
            ParseError::Expectation,
        ] {
            assert!(error.beyond_hyper());
            assert!(
                error.status().is_client_error() || error.status() == StatusCode::NOT_IMPLEMENTED
            );
        }
        assert!(!ParseError::InvalidContentLength.beyond_hyper());
    }
}
