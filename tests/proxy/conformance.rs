//! Differential conformance: odd requests sent on raw sockets through the proxy to an origin that
//! records the raw bytes it receives. For each, either the proxy refuses the request itself (4xx,
//! and the origin receives nothing), or the origin receives exactly what a conforming proxy sends:
//! one well-framed request in origin-form, one Host, no hop-by-hop fields, no client conditionals
//! on a cacheable GET, a body exactly as long as its framing says (and no framing for a body that
//! is not forwarded), `Via: 1.1 bloomgate` and an X-Forwarded-For ending in the client's address.
//!
//! Where the RFCs allow two conforming behaviours (reject, or repair and forward), both pass; the
//! unsafe one (forward as received) never does. Every case runs; the test fails once, listing
//! every case that broke a rule, so one run shows the whole picture.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::client::raw_exchange_bytes;
use common::h2raw::{H2Outcome, h2_exchange};
use common::wire::{Framing, WireRequest, parse_requests, parse_responses};
use common::{BodyReading, Client, Origin, ProxyConfig, ProxyProcess, Reply};

/// The Host every HTTP/1.1 case names.
const HOST: &str = "c.example";

/// What the proxy may do with a case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// Only a 4xx from the proxy itself conforms.
    MustRefuse,
    /// A 4xx, or a conforming forward.
    MayRefuse,
    /// Only a conforming forward.
    MustForward,
}

/// What may become of the client's body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BodyRule {
    /// Forwarded exactly (POST).
    Required,
    /// Dropped (and then not announced), or forwarded exactly (a body on GET or HEAD).
    Optional,
}

/// A case's own check of the forwarded request: the problem, if any.
type ExtraCheck = fn(&WireRequest) -> Result<(), String>;

/// One odd request and what a conforming proxy makes of it.
struct Case {
    name: &'static str,
    /// Where the rule comes from.
    rule: &'static str,
    verdict: Verdict,
    method: &'static str,
    /// The origin-form target the origin must receive.
    target: &'static str,
    /// The Host the origin must receive (the proxy runs with `preserve_host = true`).
    host: &'static str,
    /// The client's body, de-chunked.
    body: &'static [u8],
    body_rule: BodyRule,
    /// Fields the client's Connection header names: they must not be forwarded.
    connection_named: &'static [&'static str],
    /// A further check of the forwarded request.
    extra: Option<ExtraCheck>,
    /// The version of the protocol the client spoke, as Via names it ("1.1", "1.0", "2").
    protocol: &'static str,
}

impl Case {
    fn new(name: &'static str, rule: &'static str, verdict: Verdict, target: &'static str) -> Case {
        Case {
            name,
            rule,
            verdict,
            method: "GET",
            target,
            host: HOST,
            body: b"",
            body_rule: BodyRule::Optional,
            connection_named: &[],
            extra: None,
            protocol: "1.1",
        }
    }

    fn protocol(mut self, version: &'static str) -> Case {
        self.protocol = version;
        self
    }

    fn method(mut self, method: &'static str) -> Case {
        self.method = method;
        self
    }

    fn host(mut self, host: &'static str) -> Case {
        self.host = host;
        self
    }

    fn body(mut self, body: &'static [u8], rule: BodyRule) -> Case {
        self.body = body;
        self.body_rule = rule;
        self
    }

    fn connection_named(mut self, names: &'static [&'static str]) -> Case {
        self.connection_named = names;
        self
    }

    fn extra(mut self, check: ExtraCheck) -> Case {
        self.extra = Some(check);
        self
    }
}

/// Fields that describe one connection and are never forwarded (RFC 9110 section 7.6.1; RFC 9112
/// section 9.6 and 7.4 for Keep-Alive, Proxy-Connection, TE and Trailer; RFC 9110 section 11.7.2
/// for Proxy-Authorization). Transfer-Encoding is checked with the body's framing.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
];

/// Client conditionals a cache answers itself: a cacheable GET asks the origin for the whole
/// response (RFC 9111 section 4.3.2 lets a cache evaluate them; forwarding them could store a 304).
const CONDITIONALS: &[&str] = &[
    "if-none-match",
    "if-modified-since",
    "if-match",
    "if-unmodified-since",
    "if-range",
];

/// What a forwarded request must look like; the problems found.
fn check_forwarded(case: &Case, request: &WireRequest) -> Vec<String> {
    let mut problems = Vec::new();
    let cacheable = matches!(case.method, "GET" | "HEAD");
    // A cache may fetch a whole GET to answer a HEAD (RFC 9110 section 9.3.2).
    let method_ok =
        request.method == case.method || (case.method == "HEAD" && request.method == "GET");
    if !method_ok {
        problems.push(format!(
            "method {:?}, expected {:?}",
            request.method, case.method
        ));
    }
    // RFC 9112 section 3.2.1 and 3.2.2: a proxy sends origin-form to an origin server; a fragment
    // is never part of a request-target.
    if request.target != case.target {
        problems.push(format!(
            "target {:?}, expected origin-form {:?}",
            request.target, case.target
        ));
    }
    // RFC 9110 section 2.5: a proxy speaks its own highest version to the next hop.
    if request.version != "HTTP/1.1" {
        problems.push(format!("version {:?}, expected HTTP/1.1", request.version));
    }
    // RFC 9112 section 3.2: exactly one Host.
    let hosts = request.all("host");
    if hosts.len() != 1 || !hosts[0].eq_ignore_ascii_case(case.host) {
        problems.push(format!(
            "Host lines {hosts:?}, expected exactly [{:?}]",
            case.host
        ));
    }
    for name in HOP_BY_HOP.iter().chain(case.connection_named) {
        if request.has(name) {
            problems.push(format!("hop-by-hop field {name}: {:?}", request.all(name)));
        }
    }
    if cacheable {
        for name in CONDITIONALS {
            if request.has(name) {
                problems.push(format!(
                    "client conditional {name} on a cacheable {}",
                    case.method
                ));
            }
        }
    }
    let body_sent = !request.body.is_empty();
    match (body_sent, case.body_rule) {
        (false, BodyRule::Required) if !case.body.is_empty() => {
            problems.push("the body was not forwarded".to_string());
        }
        (true, _) if request.body != case.body => problems.push(format!(
            "forwarded body {:?}, the client's was {:?}",
            String::from_utf8_lossy(&request.body),
            String::from_utf8_lossy(case.body)
        )),
        _ => {}
    }
    // A body that is not forwarded is not announced: no Transfer-Encoding, no Content-Length but
    // 0 (RFC 9112 section 6.3: the announced length is what follows).
    if !body_sent && cacheable && !matches!(request.framing, Framing::None | Framing::Length(0)) {
        problems.push(format!(
            "no body forwarded but the request is framed as {:?}",
            request.framing
        ));
    }
    if let Some(te) = request.combined("transfer-encoding")
        && !te.eq_ignore_ascii_case("chunked")
    {
        problems.push(format!("Transfer-Encoding {te:?} forwarded"));
    }
    // RFC 9110 section 7.6.3: a proxy adds its Via entry, naming the protocol it received the
    // request with; "1.1 bloomgate" whatever the client spoke is accepted too.
    let via = request.combined("via").unwrap_or_default();
    let last = via.rsplit(',').next().map_or("", str::trim);
    let received = last.strip_prefix("HTTP/").unwrap_or(last);
    if received != format!("{} bloomgate", case.protocol) && received != "1.1 bloomgate" {
        problems.push(format!(
            "Via {via:?} does not end with \"{} bloomgate\" (or \"1.1 bloomgate\")",
            case.protocol
        ));
    }
    let xff = request.combined("x-forwarded-for").unwrap_or_default();
    if xff.rsplit(',').next().map(str::trim) != Some("127.0.0.1") {
        problems.push(format!(
            "X-Forwarded-For {xff:?} does not end with 127.0.0.1"
        ));
    }
    if let Some(extra) = case.extra
        && let Err(problem) = extra(request)
    {
        problems.push(problem);
    }
    problems
}

/// The requests the origin received on the connections it accepted after `before`, or why they
/// are not well-framed HTTP/1.1; and whether any byte arrived at all.
fn received_since(origin: &Origin, before: usize) -> (Result<Vec<WireRequest>, String>, bool) {
    let connections = origin.raw_connections();
    let mut requests = Vec::new();
    let mut any_bytes = false;
    for raw in connections.iter().skip(before) {
        any_bytes |= !raw.is_empty();
        match parse_requests(raw) {
            Ok(parsed) => requests.extend(parsed),
            Err(error) => {
                return (
                    Err(format!(
                        "{error}\n      whole origin connection: {:?}",
                        String::from_utf8_lossy(raw)
                    )),
                    true,
                );
            }
        }
    }
    (Ok(requests), any_bytes)
}

/// How the proxy answered the client.
enum Answer {
    /// The final status (after any 1xx).
    Status(u16),
    /// Not exactly one well-formed final response.
    Broken(String),
}

/// Judges one case from what the client got and what the origin received.
fn judge(case: &Case, answer: Answer, origin: &Origin, before: usize) -> Option<String> {
    let (received, reached) = received_since(origin, before);
    // What happened, shown with --nocapture (and for a failing run).
    match &received {
        Ok(requests) if reached => println!(
            "{}: forwarded as {:?}",
            case.name,
            requests
                .iter()
                .map(|r| format!("{} {} {:?} {:?}", r.method, r.target, r.framing, r.headers))
                .collect::<Vec<_>>()
        ),
        Ok(_) => println!("{}: not forwarded", case.name),
        Err(_) => println!("{}: malformed bytes at the origin", case.name),
    }
    let mut problems = Vec::new();
    let status = match answer {
        Answer::Status(status) => {
            println!("    client got {status}");
            Some(status)
        }
        Answer::Broken(why) => {
            problems.push(format!("client side: {why}"));
            None
        }
    };
    if !reached {
        // Refused by the proxy itself.
        match status {
            // 4xx, or 501 for a method the proxy does not implement (RFC 9110 section 15.6.2).
            Some(status)
                if ((400..500).contains(&status) || status == 501)
                    && case.verdict == Verdict::MustForward =>
            {
                problems.push(format!(
                    "refused with {status}, but a conforming proxy forwards it"
                ));
            }
            Some(status) if (400..500).contains(&status) || status == 501 => {}
            Some(status) => problems.push(format!(
                "answered {status} without contacting the origin (expected a 4xx refusal or a \
                 forward)"
            )),
            None => {}
        }
    } else {
        match received {
            Err(error) => problems.push(format!("origin got malformed bytes: {error}")),
            Ok(requests) if requests.len() != 1 => problems.push(format!(
                "origin got {} requests for one: {requests:#?}",
                requests.len()
            )),
            Ok(requests) => {
                if case.verdict == Verdict::MustRefuse {
                    problems.push(format!(
                        "forwarded ({:?} {:?}); it must be refused (4xx, or 501 for a method)",
                        requests[0].method, requests[0].target
                    ));
                }
                problems.extend(check_forwarded(case, &requests[0]));
            }
        }
        if status == Some(101) {
            problems.push("the client got 101 Switching Protocols".to_string());
        }
    }
    (!problems.is_empty()).then(|| {
        format!(
            "- {} ({}): client got {status:?}\n    {}",
            case.name,
            case.rule,
            problems.join("\n    ")
        )
    })
}

/// The proxy under test, with an origin that answers before reading a body (as Go and Node do)
/// and no pooling, so each case has origin connections of its own.
fn setup() -> (Origin, ProxyProcess) {
    setup_on(None)
}

/// [`setup`] with `server.http1` set to `server`, when given.
fn setup_on(server: Option<&str>) -> (Origin, ProxyProcess) {
    let origin = Origin::start_reading(BodyReading::AfterAnswer);
    let mut config = ProxyConfig::new(&origin.url());
    if let Some(server) = server {
        config.set("server", "http1", &format!("\"{server}\""));
    }
    let proxy = config
        .admission(false)
        .set("origin", "preserve_host", "true")
        .set("origin", "pool_max_idle_per_host", "0")
        .set("origin", "first_byte_timeout", "\"1s\"")
        .set("server", "header_read_timeout", "\"1s\"")
        .start();
    (origin, proxy)
}

/// A request: the head lines (CRLF-separated, no final CRLF), `Connection: close` unless the head
/// has a Connection field, then the body as given.
fn h1(head: &str, body: &[u8]) -> Vec<u8> {
    let mut bytes = head.as_bytes().to_vec();
    if !head.to_ascii_lowercase().contains("\r\nconnection:") {
        bytes.extend_from_slice(b"\r\nConnection: close");
    }
    bytes.extend_from_slice(b"\r\n\r\n");
    bytes.extend_from_slice(body);
    bytes
}

async fn h1_answer(addr: SocketAddr, request: &[u8]) -> Answer {
    let bytes = raw_exchange_bytes(addr, request, Duration::from_millis(300)).await;
    if bytes.is_empty() {
        return Answer::Broken("no response (the connection closed or stayed silent)".to_string());
    }
    match parse_responses(&bytes, request.starts_with(b"HEAD ")) {
        Ok(responses) => {
            let finals: Vec<_> = responses
                .iter()
                .filter(|r| r.status >= 200 || r.status == 101)
                .collect();
            match finals.as_slice() {
                [one] => Answer::Status(one.status),
                many => Answer::Broken(format!(
                    "{} final responses to one request (statuses {:?}): {:?}",
                    many.len(),
                    many.iter().map(|r| r.status).collect::<Vec<_>>(),
                    String::from_utf8_lossy(&bytes)
                )),
            }
        }
        Err(error) => Answer::Broken(format!(
            "malformed response: {error}; raw {:?}",
            String::from_utf8_lossy(&bytes)
        )),
    }
}

fn value_is(request: &WireRequest, name: &str, expected: &str) -> Result<(), String> {
    match request.combined(name) {
        Some(value) if value == expected => Ok(()),
        other => Err(format!(
            "{name} arrived as {other:?}, expected {expected:?}"
        )),
    }
}

/// The HTTP/1.1 table: each case and its bytes.
fn h1_cases() -> Vec<(Case, Vec<u8>)> {
    use BodyRule::{Optional, Required};
    use Verdict::{MayRefuse, MustForward, MustRefuse};
    let long_value = "a".repeat(16_000);
    let long_head =
        format!("GET /c/long-header HTTP/1.1\r\nHost: c.example\r\nX-Long: {long_value}");
    vec![
        (
            Case::new(
                "duplicate identical Content-Length on GET",
                "RFC 9112 6.3: reject, or replace by one",
                MayRefuse,
                "/c/dup-cl-get",
            )
            .body(b"hello", Optional),
            h1(
                "GET /c/dup-cl-get HTTP/1.1\r\nHost: c.example\r\nContent-Length: 5\r\n\
                Content-Length: 5",
                b"hello",
            ),
        ),
        (
            Case::new(
                "duplicate identical Content-Length on POST",
                "RFC 9112 6.3: reject, or replace by one",
                MayRefuse,
                "/c/dup-cl-post",
            )
            .method("POST")
            .body(b"hello", Required),
            h1(
                "POST /c/dup-cl-post HTTP/1.1\r\nHost: c.example\r\nContent-Length: 5\r\n\
                Content-Length: 5",
                b"hello",
            ),
        ),
        (
            Case::new(
                "Content-Length list of identical values on POST",
                "RFC 9112 6.3: reject, or replace by one",
                MayRefuse,
                "/c/cl-list-post",
            )
            .method("POST")
            .body(b"hello", Required),
            h1(
                "POST /c/cl-list-post HTTP/1.1\r\nHost: c.example\r\nContent-Length: 5, 5",
                b"hello",
            ),
        ),
        (
            Case::new(
                "conflicting Content-Length on GET",
                "RFC 9112 6.3: invalid framing, 400",
                MustRefuse,
                "/c/cl-conflict-get",
            ),
            h1(
                "GET /c/cl-conflict-get HTTP/1.1\r\nHost: c.example\r\nContent-Length: 5\r\n\
                Content-Length: 6",
                b"hello!",
            ),
        ),
        (
            Case::new(
                "conflicting Content-Length on POST",
                "RFC 9112 6.3: invalid framing, 400",
                MustRefuse,
                "/c/cl-conflict-post",
            )
            .method("POST"),
            h1(
                "POST /c/cl-conflict-post HTTP/1.1\r\nHost: c.example\r\nContent-Length: 5\r\n\
                Content-Length: 6",
                b"hello!",
            ),
        ),
        (
            Case::new(
                "invalid Content-Length on POST",
                "RFC 9112 6.3: invalid framing, 400",
                MustRefuse,
                "/c/cl-invalid",
            )
            .method("POST"),
            h1(
                "POST /c/cl-invalid HTTP/1.1\r\nHost: c.example\r\nContent-Length: +5",
                b"hello",
            ),
        ),
        (
            Case::new(
                "Content-Length and Transfer-Encoding on GET",
                "RFC 9112 6.1/6.3: reject, or chunked alone",
                MayRefuse,
                "/c/cl-te-get",
            )
            .body(b"hello", Optional),
            h1(
                "GET /c/cl-te-get HTTP/1.1\r\nHost: c.example\r\nContent-Length: 5\r\n\
                Transfer-Encoding: chunked",
                b"5\r\nhello\r\n0\r\n\r\n",
            ),
        ),
        (
            Case::new(
                "Content-Length and Transfer-Encoding on POST",
                "RFC 9112 6.1/6.3: reject, or chunked alone without Content-Length",
                MayRefuse,
                "/c/cl-te-post",
            )
            .method("POST")
            .body(b"hello", Required),
            h1(
                "POST /c/cl-te-post HTTP/1.1\r\nHost: c.example\r\nContent-Length: 3\r\n\
                Transfer-Encoding: chunked",
                b"5\r\nhello\r\n0\r\n\r\n",
            ),
        ),
        (
            Case::new(
                "chunked body on GET",
                "RFC 9112 6.3: a body not forwarded is not announced",
                MayRefuse,
                "/c/chunked-get",
            )
            .body(b"hello", Optional),
            h1(
                "GET /c/chunked-get HTTP/1.1\r\nHost: c.example\r\nTransfer-Encoding: chunked",
                b"5\r\nhello\r\n0\r\n\r\n",
            ),
        ),
        (
            Case::new(
                "chunked body with extension and trailer on POST",
                "RFC 9112 7.1",
                MustForward,
                "/c/chunked-post",
            )
            .method("POST")
            .body(b"hello", Required),
            h1(
                "POST /c/chunked-post HTTP/1.1\r\nHost: c.example\r\nTransfer-Encoding: chunked",
                b"5;ext=1\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n",
            ),
        ),
        (
            Case::new(
                "Transfer-Encoding not ending in chunked on POST",
                "RFC 9112 6.3: 400",
                MustRefuse,
                "/c/te-gzip",
            )
            .method("POST"),
            h1(
                "POST /c/te-gzip HTTP/1.1\r\nHost: c.example\r\nTransfer-Encoding: gzip",
                b"hello",
            ),
        ),
        (
            Case::new(
                "body on HEAD",
                "RFC 9112 6.3: a body not forwarded is not announced",
                MayRefuse,
                "/c/head-body",
            )
            .method("HEAD")
            .body(b"hello", Optional),
            h1(
                "HEAD /c/head-body HTTP/1.1\r\nHost: c.example\r\nContent-Length: 5",
                b"hello",
            ),
        ),
        (
            Case::new(
                "obs-fold continuation line",
                "RFC 9112 5.2: reject, or replace the fold by SP",
                MayRefuse,
                "/c/obs-fold",
            )
            .extra(|r| match r.combined("x-folded") {
                Some(v) if v.split_whitespace().collect::<Vec<_>>() == ["first", "second"] => {
                    Ok(())
                }
                other => Err(format!(
                    "x-folded arrived as {other:?}, expected \"first second\""
                )),
            }),
            h1(
                "GET /c/obs-fold HTTP/1.1\r\nHost: c.example\r\nX-Folded: first\r\n second",
                b"",
            ),
        ),
        (
            Case::new(
                "whitespace before the colon of Host",
                "RFC 9112 5.1: 400",
                MustRefuse,
                "/c/host-space",
            ),
            h1(
                "GET /c/host-space HTTP/1.1\r\nHost: c.example\r\nHost : evil.example",
                b"",
            ),
        ),
        (
            Case::new(
                "whitespace before the colon of another field",
                "RFC 9112 5.1: 400",
                MustRefuse,
                "/c/field-space",
            ),
            h1(
                "GET /c/field-space HTTP/1.1\r\nHost: c.example\r\nX-Spaced : v",
                b"",
            ),
        ),
        (
            Case::new(
                "whitespace around a value",
                "RFC 9110 5.5: OWS is not part of the value",
                MustForward,
                "/c/ows",
            )
            .extra(|r| value_is(r, "x-padded", "padded value")),
            h1(
                "GET /c/ows HTTP/1.1\r\nHost: c.example\r\nX-Padded: \t  padded value \t ",
                b"",
            ),
        ),
        (
            Case::new(
                "absolute-form target",
                "RFC 9112 3.2.1: origin-form to an origin",
                MustForward,
                "/c/absolute?q=1",
            ),
            h1(
                "GET http://c.example/c/absolute?q=1 HTTP/1.1\r\nHost: c.example",
                b"",
            ),
        ),
        (
            Case::new(
                "absolute-form target with another Host",
                "RFC 9112 3.2.2: the target's authority wins",
                MustForward,
                "/c/absolute-other",
            ),
            h1(
                "GET http://c.example/c/absolute-other HTTP/1.1\r\nHost: other.example",
                b"",
            ),
        ),
        (
            Case::new(
                "asterisk-form on GET",
                "RFC 9112 3.2.4: only for OPTIONS",
                MustRefuse,
                "*",
            ),
            h1("GET * HTTP/1.1\r\nHost: c.example", b""),
        ),
        (
            Case::new(
                "bare LF line endings",
                "RFC 9112 2.2: MAY accept a bare LF",
                MayRefuse,
                "/c/bare-lf",
            ),
            b"GET /c/bare-lf HTTP/1.1\nHost: c.example\nConnection: close\n\n".to_vec(),
        ),
        (
            Case::new(
                "NUL in a value",
                "RFC 9110 5.5: reject, or replace by SP",
                MayRefuse,
                "/c/nul",
            )
            .extra(|r| value_is(r, "x-nul", "a b")),
            h1("GET /c/nul HTTP/1.1\r\nHost: c.example\r\nX-Nul: a\0b", b""),
        ),
        (
            Case::new(
                "a 16 KB header",
                "forwarded intact, or 431",
                MayRefuse,
                "/c/long-header",
            )
            .extra(|r| match r.combined("x-long") {
                Some(v) if v.len() == 16_000 && v.bytes().all(|b| b == b'a') => Ok(()),
                other => Err(format!(
                    "x-long arrived with {} bytes",
                    other.map_or(0, |v| v.len())
                )),
            }),
            h1(&long_head, b""),
        ),
        (
            Case::new(
                "Expect: 100-continue on GET with a body",
                "RFC 9110 10.1.1: 417, or forward",
                MayRefuse,
                "/c/expect",
            )
            .body(b"hello", Optional),
            h1(
                "GET /c/expect HTTP/1.1\r\nHost: c.example\r\nExpect: 100-continue\r\n\
                Content-Length: 5",
                b"hello",
            ),
        ),
        (
            Case::new(
                "Connection naming a field",
                "RFC 9110 7.6.1",
                MustForward,
                "/c/connection-named",
            )
            .connection_named(&["x-secret"]),
            h1(
                "GET /c/connection-named HTTP/1.1\r\nHost: c.example\r\n\
                Connection: close, X-Secret\r\nX-Secret: 1",
                b"",
            ),
        ),
        (
            Case::new(
                "Upgrade: websocket on GET",
                "RFC 9110 7.8: a proxy may ignore Upgrade",
                MayRefuse,
                "/c/upgrade",
            ),
            h1(
                "GET /c/upgrade HTTP/1.1\r\nHost: c.example\r\nConnection: Upgrade\r\n\
                Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
                Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
                b"",
            ),
        ),
        (
            Case::new(
                "fragment in the target",
                "RFC 9112 3.2: no fragment in a request-target",
                MayRefuse,
                "/c/fragment",
            ),
            h1("GET /c/fragment#section HTTP/1.1\r\nHost: c.example", b""),
        ),
        (
            Case::new(
                "space inside the target",
                "RFC 9112 3: an invalid request-line, 400",
                MustRefuse,
                "/c/a",
            ),
            h1("GET /c/a b HTTP/1.1\r\nHost: c.example", b""),
        ),
        (
            Case::new(
                "hop-by-hop fields",
                "RFC 9110 7.6.1, RFC 9112 9.6",
                MustForward,
                "/c/hop-by-hop",
            ),
            h1(
                "GET /c/hop-by-hop HTTP/1.1\r\nHost: c.example\r\nKeep-Alive: timeout=5\r\n\
                Proxy-Connection: keep-alive\r\nTE: trailers\r\nTrailer: X-Checksum\r\n\
                Proxy-Authorization: Basic c2VjcmV0",
                b"",
            ),
        ),
        (
            Case::new(
                "client conditionals on a cacheable GET",
                "RFC 9111 4.3.2",
                MustForward,
                "/c/conditionals",
            ),
            h1(
                "GET /c/conditionals HTTP/1.1\r\nHost: c.example\r\nIf-None-Match: \"v1\"\r\n\
                If-Modified-Since: Sun, 01 Jan 2023 00:00:00 GMT\r\nIf-Match: \"v1\"\r\n\
                If-Unmodified-Since: Sun, 01 Jan 2023 00:00:00 GMT\r\nIf-Range: \"v1\"",
                b"",
            ),
        ),
        (
            Case::new(
                "two Host lines",
                "RFC 9112 3.2: 400",
                MustRefuse,
                "/c/two-hosts",
            ),
            h1(
                "GET /c/two-hosts HTTP/1.1\r\nHost: c.example\r\nHost: other.example",
                b"",
            ),
        ),
        (
            Case::new("no Host", "RFC 9112 3.2: 400", MustRefuse, "/c/no-host"),
            h1("GET /c/no-host HTTP/1.1", b""),
        ),
        (
            Case::new(
                "HTTP/1.0 GET with a body",
                "RFC 9112 6.3: a body not forwarded is not announced",
                MayRefuse,
                "/c/http10-body",
            )
            .body(b"hello", Optional)
            .protocol("1.0"),
            h1(
                "GET /c/http10-body HTTP/1.0\r\nHost: c.example\r\nContent-Length: 5",
                b"hello",
            ),
        ),
        (
            // A reverse proxy is the origin server as far as the client knows: it has no tunnel to
            // offer, and forwarding CONNECT asks the origin to open one (with the target rewritten
            // to the origin's own address by the HTTP client).
            Case::new(
                "CONNECT",
                "RFC 9110 9.3.6: 405 or 501 from a server that does not tunnel",
                MustRefuse,
                "victim.example:443",
            )
            .method("CONNECT"),
            h1(
                "CONNECT victim.example:443 HTTP/1.1\r\nHost: victim.example:443",
                b"",
            ),
        ),
    ]
}

/// Today: several cases break the rules, each listed with what the origin received. The framing
/// ones are the request smuggling of proxy_security.rs: a GET or HEAD whose body the proxy drops
/// is forwarded with the client's Content-Length (duplicate, with Transfer-Encoding, with Expect),
/// so the origin waits for, or takes from the next request, bytes that never come; `GET *` is
/// forwarded; and a POST with both Content-Length and chunked goes out with the client's
/// Content-Length.
#[tokio::test]
async fn odd_http1_requests_are_refused_or_forwarded_conformingly() {
    http1_cases_on(None).await;
}

/// The same cases on the native HTTP/1.1 server, whichever server the rest of the suite runs on.
#[tokio::test]
async fn odd_http1_requests_are_refused_or_forwarded_conformingly_by_the_native_server() {
    http1_cases_on(Some("native")).await;
}

/// Returns once the origin has taken no byte for 60 ms (at most 2 s): what a case sent it has
/// all arrived, however slow a loaded machine makes the proxy and the origin's threads.
async fn settled(origin: &Origin) {
    let taken = || -> usize { origin.raw_connections().iter().map(Vec::len).sum() };
    let (mut last, mut quiet) = (taken(), 0);
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = taken();
        quiet = if now == last { quiet + 1 } else { 0 };
        last = now;
        if quiet == 3 {
            return;
        }
    }
}

async fn http1_cases_on(server: Option<&str>) {
    let (origin, proxy) = setup_on(server);
    let mut failures = Vec::new();
    let cases = h1_cases();
    for (case, _) in &cases {
        origin.set(case.target, Reply::ok(&format!("origin saw {}", case.name)));
    }
    for (case, request) in &cases {
        let before = origin.connections();
        let answer = h1_answer(proxy.addr, request).await;
        // The origin reads a body after answering: let it take what follows.
        settled(&origin).await;
        failures.extend(judge(case, answer, &origin, before));
    }
    assert!(
        failures.is_empty(),
        "{} of {} HTTP/1.1 cases broke a rule:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// One HTTP/2 case: its fields in order, its body, and what a conforming proxy makes of it.
struct H2Case {
    case: Case,
    fields: Vec<(&'static str, &'static str)>,
    body: Option<&'static [u8]>,
}

fn h2_case(case: Case, extra_fields: &[(&'static str, &'static str)]) -> H2Case {
    let case = case.protocol("2");
    let mut fields = vec![
        (":method", case.method),
        (":scheme", "http"),
        (":path", case.target),
        (":authority", case.host),
    ];
    fields.extend_from_slice(extra_fields);
    H2Case {
        case,
        fields,
        body: None,
    }
}

fn h2_cases() -> Vec<H2Case> {
    use Verdict::{MayRefuse, MustForward, MustRefuse};
    let mut cases = vec![
        h2_case(
            Case::new(
                "uppercase field name",
                "RFC 9113 8.2.1: malformed",
                MustRefuse,
                "/h2/uppercase",
            ),
            &[("X-Upper", "1")],
        ),
        h2_case(
            Case::new(
                "connection field",
                "RFC 9113 8.2.2: malformed",
                MustRefuse,
                "/h2/connection",
            ),
            &[("connection", "keep-alive")],
        ),
        h2_case(
            Case::new(
                "keep-alive field",
                "RFC 9113 8.2.2: malformed",
                MustRefuse,
                "/h2/keep-alive",
            ),
            &[("keep-alive", "timeout=5")],
        ),
        h2_case(
            Case::new(
                "transfer-encoding field",
                "RFC 9113 8.2.2: malformed",
                MustRefuse,
                "/h2/transfer-encoding",
            ),
            &[("transfer-encoding", "chunked")],
        ),
        h2_case(
            Case::new(
                "upgrade field",
                "RFC 9113 8.2.2: malformed",
                MustRefuse,
                "/h2/upgrade",
            ),
            &[("upgrade", "websocket")],
        ),
        h2_case(
            Case::new(
                "te: trailers",
                "RFC 9113 8.2.2: allowed, and hop-by-hop",
                MustForward,
                "/h2/te-trailers",
            ),
            &[("te", "trailers")],
        ),
        h2_case(
            Case::new(
                "te: gzip",
                "RFC 9113 8.2.2: only trailers",
                MustRefuse,
                "/h2/te-gzip",
            ),
            &[("te", "gzip")],
        ),
        h2_case(
            Case::new(
                ":authority and a different host",
                "RFC 9113 8.3.1: refuse, or :authority wins",
                MayRefuse,
                "/h2/authority-host",
            )
            .host("a.example"),
            &[("host", "b.example")],
        ),
        h2_case(
            Case::new(
                "client conditionals on a cacheable GET",
                "RFC 9111 4.3.2",
                MustForward,
                "/h2/conditionals",
            ),
            &[
                ("if-none-match", "\"v1\""),
                ("if-modified-since", "Sun, 01 Jan 2023 00:00:00 GMT"),
            ],
        ),
    ];
    // Pseudo-header rules (RFC 9113 8.3): :path present, in origin-form, and before regular fields.
    let mut missing_path = h2_case(
        Case::new(
            "missing :path",
            "RFC 9113 8.3.1: malformed",
            MustRefuse,
            "/h2/missing-path",
        ),
        &[],
    );
    missing_path.fields.retain(|(name, _)| *name != ":path");
    cases.push(missing_path);
    let relative = h2_case(
        Case::new(
            ":path not starting with /",
            "RFC 9113 8.3.1: malformed",
            MustRefuse,
            "h2/relative",
        ),
        &[],
    );
    cases.push(relative);
    let asterisk = h2_case(
        Case::new(
            ":path * on GET",
            "RFC 9113 8.3.1: * only for OPTIONS",
            MustRefuse,
            "*",
        ),
        &[],
    );
    cases.push(asterisk);
    let mut late_pseudo = h2_case(
        Case::new(
            "pseudo-field after a regular field",
            "RFC 9113 8.3: malformed",
            MustRefuse,
            "/h2/late-pseudo",
        ),
        &[],
    );
    late_pseudo.fields.insert(2, ("x-early", "1"));
    cases.push(late_pseudo);
    let mut get_body = h2_case(
        Case::new(
            "GET with content-length and DATA",
            "RFC 9112 6.3: a body not forwarded is not announced",
            MayRefuse,
            "/h2/get-body",
        )
        .body(b"hello", BodyRule::Optional),
        &[("content-length", "5")],
    );
    get_body.body = Some(b"hello");
    cases.push(get_body);
    cases
}

/// Today: expected to pass for the refusals (the h2 crate enforces RFC 9113's field rules), but a
/// GET stream with content-length and DATA is forwarded with `content-length: 5` and no body.
#[tokio::test]
async fn odd_h2_requests_are_refused_or_forwarded_conformingly() {
    let (origin, proxy) = setup();
    let mut failures = Vec::new();
    let cases = h2_cases();
    for h2 in &cases {
        let reply = Reply::ok(&format!("origin saw {}", h2.case.name))
            .header("cache-control", "max-age=60");
        origin.set(h2.case.target, reply);
    }
    let mut authority_forwarded = false;
    for h2 in &cases {
        let before = origin.connections();
        let outcome = h2_exchange(proxy.addr, &h2.fields, h2.body, Duration::from_secs(2)).await;
        settled(&origin).await;
        let answer = match &outcome {
            H2Outcome::Response {
                status: Some(status),
                ..
            } => Answer::Status(*status),
            refused if refused.is_refusal() => Answer::Status(400),
            other => Answer::Broken(format!("{other:?}")),
        };
        if h2.case.target == "/h2/authority-host" && !matches!(answer, Answer::Status(400..=499)) {
            authority_forwarded = true;
        }
        failures.extend(judge(&h2.case, answer, &origin, before));
    }
    // :authority wins in the cache key as well as in the forwarded Host: the stored response is
    // a.example's, never b.example's.
    if authority_forwarded {
        let client = Client::new();
        let url = proxy.url("/h2/authority-host");
        let as_b = client.get_with(&url, &[("host", "b.example")]).await;
        if as_b.is_hit() {
            failures.push(format!(
                "- :authority and a different host: the response fetched for :authority a.example \
                 is a hit for Host b.example ({})",
                as_b.cache_status()
            ));
        }
        let as_a = client.get_with(&url, &[("host", "a.example")]).await;
        if !as_a.is_hit() {
            failures.push(format!(
                "- :authority and a different host: the response was not stored under a.example \
                 ({})",
                as_a.cache_status()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} HTTP/2 cases broke a rule:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
