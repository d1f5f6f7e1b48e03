//! End to end: what a hostile client or a hostile origin can try through the HTTP/1.1 servers and
//! the request path, over real sockets: fields a client names as hop-by-hop that the cache would
//! still read, interim responses that carry a body's framing, a 101 nobody asked for, bodies the
//! proxy never reads or that are cut short, and HEAD pipelined between hits.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::client::{raw_exchange_bytes, read_available_bytes};
use common::wire::{WireResponse, parse_requests, parse_responses};
use common::{Client, Origin, ProxyConfig, Reply};
use http::Method;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_millis(500);

/// A storable object: chunked, so that storing it does not depend on how the body is framed.
fn stored_object(body: &str) -> Reply {
    Reply::ok(body)
        .header("cache-control", "max-age=60")
        .chunked()
}

/// The only response to a GET of `path` with the extra head `lines` (each ending in CRLF), sent
/// on a connection of its own.
async fn raw_get(addr: SocketAddr, path: &str, lines: &str) -> WireResponse {
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: attack.example\r\n{lines}Connection: close\r\n\r\n");
    let bytes = raw_exchange_bytes(addr, request.as_bytes(), WAIT).await;
    let mut responses = parse_responses(&bytes, false)
        .unwrap_or_else(|error| panic!("{error}: {:?}", String::from_utf8_lossy(&bytes)));
    assert_eq!(responses.len(), 1, "{responses:?}");
    responses.remove(0)
}

/// What a client sending `field: value` gets for `path` after an attacker sent the same field
/// and named it in `Connection` (so that the origin never saw it), asked first.
async fn after_a_connection_named_field(
    addr: SocketAddr,
    path: &str,
    field: &str,
    value: &str,
) -> WireResponse {
    let attack = format!("{field}: {value}\r\nConnection: {field}\r\n");
    let attacker = raw_get(addr, path, &attack).await;
    assert_eq!(attacker.status, 200);
    raw_get(addr, path, &format!("{field}: {value}\r\n")).await
}

/// RFC 9110 section 7.6.1: a field the client names in `Connection` never reaches the origin.
/// Were the cache to key the variant on it all the same, the origin's answer for "no such field"
/// would be stored as the answer for the client's value and served to everyone who sends it.
#[tokio::test]
async fn a_vary_field_the_client_names_in_connection_cannot_poison_its_variant() {
    let origin = Origin::start();
    let path = "/attack/vary-hop";
    origin.set(
        path,
        Reply::echo("accept-language")
            .header("vary", "accept-language")
            .header("cache-control", "max-age=60"),
    );
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    let victim = after_a_connection_named_field(proxy.addr, path, "Accept-Language", "fr").await;
    assert_eq!(
        String::from_utf8_lossy(&victim.body),
        "fr",
        "a French client got the answer made for a request without Accept-Language: {victim:?}"
    );
}

/// The same for a field the cache key names (`cache.key.headers`): the key must describe the
/// request the origin answered.
#[tokio::test]
async fn a_keyed_field_the_client_names_in_connection_cannot_poison_its_key() {
    let origin = Origin::start();
    let path = "/attack/keyed-hop";
    origin.set(
        path,
        Reply::echo("x-tenant").header("cache-control", "max-age=60"),
    );
    let proxy = ProxyConfig::new(&origin.url())
        .admission(false)
        .set("cache.key", "headers", "[\"x-tenant\"]")
        .start();
    let victim = after_a_connection_named_field(proxy.addr, path, "X-Tenant", "blue").await;
    assert_eq!(
        String::from_utf8_lossy(&victim.body),
        "blue",
        "tenant blue got the answer made for no tenant: {victim:?}"
    );
}

/// RFC 9110 section 8.6: no `Content-Length` in a 1xx, and a 1xx ends at its empty line (RFC 9112
/// section 6.3 rule 1). An origin's 103 that announces a body must not reach the client so: a
/// client that believed it would read the final response's first bytes as the 103's body.
#[tokio::test]
async fn an_interim_response_never_carries_framing_to_the_client() {
    let origin = Origin::start();
    let path = "/attack/interim-length";
    origin.set(
        path,
        Reply::raw(
            b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nContent-Length: 9\r\n\r\n\
              HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello",
        ),
    );
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: attack.example\r\nConnection: close\r\n\r\n");
    let bytes = raw_exchange_bytes(proxy.addr, request.as_bytes(), WAIT).await;
    let text = String::from_utf8_lossy(&bytes).to_ascii_lowercase();
    let responses =
        parse_responses(&bytes, false).unwrap_or_else(|error| panic!("{error}: {text:?}"));
    for interim in responses.iter().filter(|r| r.status < 200) {
        assert_eq!(interim.header("content-length"), None, "{text:?}");
        assert_eq!(interim.header("transfer-encoding"), None, "{text:?}");
    }
    let last = responses.last().expect("a final response");
    assert_eq!((last.status, last.body.as_slice()), (200, &b"hello"[..]));
}

/// The proxy asks the origin for no upgrade (it strips `Upgrade`), so a 101 is a broken or
/// hostile origin: the client must not be told the protocol switched, and what the origin sends
/// after it is nobody's response.
#[tokio::test]
async fn a_101_from_the_origin_is_never_relayed_or_stored() {
    let origin = Origin::start();
    let path = "/attack/switch";
    origin.set(
        path,
        Reply::raw(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n\
              HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 8\r\n\r\nplanted!",
        ),
    );
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    for _ in 0..2 {
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: attack.example\r\nConnection: close\r\n\r\n");
        let bytes = raw_exchange_bytes(proxy.addr, request.as_bytes(), WAIT).await;
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.starts_with("HTTP/1.1 502 "), "{text:?}");
        assert!(!text.contains("planted!"), "{text:?}");
    }
    assert_eq!(origin.count(path), 2, "something of the 101 was stored");
}

/// A hit answered without the body of an `Expect: 100-continue` request: the client may send
/// the body anyway, so the connection cannot tell where the next request starts, and the body's
/// bytes are never parsed as one.
#[tokio::test]
async fn a_body_sent_after_an_unanswered_expectation_is_never_read_as_a_request() {
    let origin = Origin::start();
    let path = "/attack/expect-hit";
    origin.set(path, stored_object("stored"));
    origin.set("/attack/smuggled", Reply::ok("smuggled"));
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    let stored = Client::new().get(&proxy.url(path)).await;
    assert!(stored.is_stored(), "{}", stored.cache_status());
    let body = b"GET /attack/smuggled HTTP/1.1\r\nHost: attack.example\r\n\r\n";
    let request = [
        format!(
            "GET {path} HTTP/1.1\r\nHost: attack.example\r\nExpect: 100-continue\r\n\
             Content-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes(),
        body.to_vec(),
    ]
    .concat();
    let bytes = raw_exchange_bytes(proxy.addr, &request, WAIT).await;
    let text = String::from_utf8_lossy(&bytes);
    assert!(!text.contains("smuggled"), "{text:?}");
    assert_eq!(origin.count("/attack/smuggled"), 0, "{text:?}");
}

/// A request body the client stops sending (it closes) while the origin waits for it: the origin
/// must never receive a complete request, as if the part sent were the whole.
#[tokio::test]
async fn a_request_body_cut_short_never_reaches_the_origin_as_complete() {
    let origin = Origin::start();
    let path = "/attack/cut";
    origin.set(path, Reply::ok("took it"));
    let proxy = ProxyConfig::new(&origin.url()).start();
    for (framing, part) in [
        ("Content-Length: 100\r\n", &b"ten bytes!"[..]),
        (
            "Transfer-Encoding: chunked\r\n",
            &b"a\r\nten bytes!\r\n"[..],
        ),
    ] {
        let mut stream = TcpStream::connect(proxy.addr).await.expect("connect");
        let head = format!("POST {path} HTTP/1.1\r\nHost: attack.example\r\n{framing}\r\n");
        stream.write_all(head.as_bytes()).await.expect("head");
        stream.write_all(part).await.expect("part");
        // Whatever comes back before the close: the origin may answer early.
        let _ = tokio::time::timeout(WAIT, stream.readable()).await;
        drop(stream);
    }
    // Time for the proxy to pass on whatever it would pass on.
    let settle = TcpStream::connect(proxy.addr).await.expect("connect");
    let mut settle = settle;
    let _ = read_available_bytes(&mut settle, WAIT).await;
    for raw in origin.raw_connections() {
        if let Ok(requests) = parse_requests(&raw) {
            assert!(
                requests.iter().all(|request| request.target != path),
                "a cut-short body reached the origin as a whole request: {:?}",
                String::from_utf8_lossy(&raw)
            );
        }
    }
}

/// Response heads in `bytes` for requests whose methods are `methods`, in order: a HEAD's answer
/// has no body, whatever its `Content-Length` says.
fn pipelined_responses(mut bytes: &[u8], methods: &[&str]) -> Vec<WireResponse> {
    let mut responses = Vec::new();
    for method in methods {
        let end = bytes
            .windows(4)
            .position(|window| window == b"\r\n\r\n")
            .unwrap_or_else(|| {
                panic!("no head for {method}: {:?}", String::from_utf8_lossy(bytes))
            })
            + 4;
        let head = parse_responses(&bytes[..end], true).expect("a well-formed head");
        let mut response = head.into_iter().next().expect("one head");
        let length: usize = match (*method, response.header("content-length")) {
            ("HEAD", _) => 0,
            (_, Some(length)) => length.parse().expect("a length"),
            (_, None) => panic!("a GET hit without a length: {response:?}"),
        };
        response.body = bytes[end..end + length].to_vec();
        bytes = &bytes[end + length..];
        responses.push(response);
    }
    assert!(
        bytes.is_empty(),
        "bytes after the last response: {:?}",
        String::from_utf8_lossy(bytes)
    );
    responses
}

/// A HEAD between two GETs of one stored object, in one write: its answer keeps the object's
/// length and sends none of its body, so the next GET's answer starts where it should.
#[tokio::test]
async fn a_head_pipelined_between_hits_leaves_the_next_answer_framed() {
    let origin = Origin::start();
    let path = "/attack/pipelined-head";
    origin.set(path, stored_object("the stored body"));
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    let stored = Client::new().get(&proxy.url(path)).await;
    assert!(stored.is_stored(), "{}", stored.cache_status());
    let methods = ["GET", "HEAD", "GET", "HEAD"];
    let mut request = Vec::new();
    for (index, method) in methods.iter().enumerate() {
        let close = if index + 1 == methods.len() {
            "Connection: close\r\n"
        } else {
            ""
        };
        request.extend_from_slice(
            format!("{method} {path} HTTP/1.1\r\nHost: attack.example\r\n{close}\r\n").as_bytes(),
        );
    }
    let bytes = raw_exchange_bytes(proxy.addr, &request, WAIT).await;
    let responses = pipelined_responses(&bytes, &methods);
    for (method, response) in methods.iter().zip(&responses) {
        assert_eq!(response.status, 200);
        // A HEAD's answer may leave its length out (RFC 9110 section 9.3.2), never misstate it.
        let length = response.header("content-length");
        assert!(
            length == Some("15") || (*method == "HEAD" && length.is_none()),
            "{method}: {length:?}"
        );
        let expected: &[u8] = if *method == "GET" {
            b"the stored body"
        } else {
            b""
        };
        assert_eq!(response.body, expected, "{method}");
    }
}

/// A request refused before its body is read (a Host that names no host): the body is discarded
/// or the connection closed, and its bytes are never parsed as the next request.
#[tokio::test]
async fn a_body_behind_a_refused_head_is_never_read_as_a_request() {
    let origin = Origin::start();
    origin.set("/attack/smuggled", Reply::ok("smuggled"));
    let proxy = ProxyConfig::new(&origin.url()).start();
    let body = b"GET /attack/smuggled HTTP/1.1\r\nHost: attack.example\r\n\r\n";
    let request = [
        format!(
            "POST /attack/refused HTTP/1.1\r\nHost: a/b\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes(),
        body.to_vec(),
    ]
    .concat();
    let bytes = raw_exchange_bytes(proxy.addr, &request, WAIT).await;
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.starts_with("HTTP/1.1 400"), "{text:?}");
    assert!(!text.contains("smuggled"), "{text:?}");
    assert_eq!(origin.count("/attack/smuggled"), 0, "{text:?}");
}

/// An origin that sends interim responses by the hundred before its answer: the client still
/// gets that answer whole and well framed, and nothing of the 1xx is stored with it.
#[tokio::test]
async fn hundreds_of_interim_responses_leave_the_answer_whole() {
    let origin = Origin::start();
    let path = "/attack/many-interim";
    let mut raw = b"HTTP/1.1 102 Processing\r\n\r\n".repeat(100);
    raw.extend(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n".repeat(200));
    raw.extend_from_slice(
        b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nConnection: close\r\n\
          Content-Length: 5\r\n\r\nhello",
    );
    origin.set(path, Reply::raw(&raw));
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    for _ in 0..2 {
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: attack.example\r\nConnection: close\r\n\r\n");
        let bytes = raw_exchange_bytes(proxy.addr, request.as_bytes(), WAIT).await;
        let responses = parse_responses(&bytes, false)
            .unwrap_or_else(|error| panic!("{error}: {:?}", String::from_utf8_lossy(&bytes)));
        let last = responses.last().expect("a final response");
        assert_eq!((last.status, last.body.as_slice()), (200, &b"hello"[..]));
        assert_eq!(last.header("link"), None);
        let interim = &responses[..responses.len() - 1];
        // 100 answers the proxy's own hop and 101 switches nothing: neither is relayed.
        assert!(
            interim.iter().all(|r| (102..200).contains(&r.status)),
            "{:?}",
            interim.iter().map(|r| r.status).collect::<Vec<_>>()
        );
    }
    assert_eq!(origin.count(path), 1, "the answer was not stored");
}

/// Origin heads that a lenient reader and a strict one would read differently (RFC 9112 section
/// 5.2 obs-fold, a bare CR, a NUL, two lengths): none reaches a client, nor the cache, as bytes
/// that a strict reader could take two ways.
#[tokio::test]
async fn malformed_origin_fields_never_reach_a_client_or_the_cache() {
    let origin = Origin::start();
    let heads: [(&str, &[u8]); 5] = [
        ("obs-fold", b"X-A: a\r\n b\r\n"),
        ("bare-cr", b"X-A: a\rContent-Length: 0\r\n"),
        ("nul", b"X-A: a\0b\r\n"),
        ("space-before-colon", b"Content-Length : 2\r\n"),
        ("two-lengths", b"Content-Length: 5\r\nContent-Length: 2\r\n"),
    ];
    for (name, fields) in heads {
        let mut raw =
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nConnection: close\r\n".to_vec();
        raw.extend_from_slice(fields);
        if !name.ends_with("lengths") {
            raw.extend_from_slice(b"Content-Length: 5\r\n");
        }
        raw.extend_from_slice(b"\r\nhello");
        origin.set(&format!("/attack/fields/{name}"), Reply::raw(&raw));
    }
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    for (name, _) in heads {
        let path = format!("/attack/fields/{name}");
        for _ in 0..2 {
            let request =
                format!("GET {path} HTTP/1.1\r\nHost: attack.example\r\nConnection: close\r\n\r\n");
            let bytes = raw_exchange_bytes(proxy.addr, request.as_bytes(), WAIT).await;
            let text = String::from_utf8_lossy(&bytes);
            let responses = parse_responses(&bytes, false)
                .unwrap_or_else(|error| panic!("{name}: {error}: {text:?}"));
            assert_eq!(responses.len(), 1, "{name}: {text:?}");
            let head_end = text.find("\r\n\r\n").unwrap_or(text.len());
            assert!(
                !text[..head_end].contains('\0')
                    && !text[..head_end].replace("\r\n", "").contains('\r'),
                "{name}: {text:?}"
            );
            if responses[0].status == 200 {
                assert_eq!(responses[0].body, b"hello", "{name}: {text:?}");
            }
        }
    }
}

/// A route that keeps its paths out of the cache, and targets that name those paths in another
/// spelling (RFC 3986 section 6.2.2: an encoded unreserved character, dot segments; and an empty
/// segment, which common origins merge): an origin that reads them as the route's paths answers
/// with a page that must not be stored, so the route must take them too (web cache deception).
#[tokio::test]
async fn another_spelling_of_a_routes_path_still_takes_the_route() {
    let origin = Origin::start();
    let proxy = ProxyConfig::with_upstreams(&format!(
        "[upstreams.o]\nservers = [\"{}\"]\n\
         [[routes]]\nname = \"account\"\npath_prefix = \"/account/\"\nupstream = \"o\"\n\
         [routes.cache]\nenabled = false\n\
         [[routes]]\nname = \"rest\"\nupstream = \"o\"\n[routes.cache]\nadmission = \"off\"\n",
        origin.url()
    ))
    .start();
    for path in [
        "/%61ccount/me",
        "/%61%63count/me",
        "/static/../account/me",
        "/./account/me",
        "/static/%2e%2e/account/me",
        "//account/me",
    ] {
        // The origin decodes and resolves the target as most servers do.
        origin.set(
            path,
            Reply::ok("alice's account page").header("cache-control", "max-age=60"),
        );
        let victim = raw_get(proxy.addr, path, "").await;
        assert_eq!(victim.status, 200, "{path}");
        let attacker = raw_get(proxy.addr, path, "").await;
        assert!(
            !attacker
                .header("cache-status")
                .is_some_and(|status| status.contains("hit")),
            "{path}: the account page was stored and served again: {attacker:?}"
        );
        assert_eq!(origin.count(path), 2, "{path}");
    }
}

/// A chunked request body that breaks its framing part way (a chunk size past 64 bits, a chunk
/// without its CRLF) while it is forwarded: the origin never gets a complete request from it, and
/// the client gets a 400, its own fault, not a 502 that blames the origin.
#[tokio::test]
async fn a_malformed_chunked_body_never_reaches_the_origin_as_complete() {
    let origin = Origin::start();
    let path = "/attack/bad-chunks";
    origin.set(path, Reply::ok("took it"));
    let proxy = ProxyConfig::new(&origin.url()).start();
    for body in [
        &b"5\r\nhello\r\nfffffffffffffffffffff\r\nx\r\n0\r\n\r\n"[..],
        &b"5\r\nhelloXX0\r\n\r\n"[..],
    ] {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: attack.example\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
        let request = [head.as_bytes(), body].concat();
        let bytes = raw_exchange_bytes(proxy.addr, &request, WAIT).await;
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            text.starts_with("HTTP/1.1 400 ") && !text.contains("took it"),
            "{:?}: {text:?}",
            String::from_utf8_lossy(body)
        );
    }
    for raw in origin.raw_connections() {
        if let Ok(requests) = parse_requests(&raw) {
            assert!(
                requests.iter().all(|request| request.target != path),
                "a malformed body reached the origin as a whole request: {:?}",
                String::from_utf8_lossy(&raw)
            );
        }
    }
}

/// RFC 9110 section 7.6.2: an `OPTIONS` or `TRACE` that reaches the proxy with `Max-Forwards: 0`
/// is answered by the proxy and never reaches the origin; with a count above zero it goes on one
/// lower. A `TRACE` reflected here leaves the client's credentials out.
#[tokio::test]
async fn max_forwards_stops_options_and_trace_at_the_proxy_and_counts_down() {
    let origin = Origin::start();
    let path = "/attack/max-forwards";
    origin.set(path, Reply::ok("from the origin"));
    let proxy = ProxyConfig::new(&origin.url()).start();
    let client = Client::new();
    let url = proxy.url(path);

    let options = client
        .send(Method::OPTIONS, &url, &[("max-forwards", "0")])
        .await
        .expect("OPTIONS");
    assert_eq!(options.status, 200);
    assert!(
        options
            .header("allow")
            .is_some_and(|allow| allow.contains("GET"))
    );
    let trace = client
        .send(
            Method::TRACE,
            &url,
            &[("max-forwards", "0"), ("cookie", "session=secret")],
        )
        .await
        .expect("TRACE");
    assert_eq!(trace.status, 200);
    assert_eq!(trace.header("content-type"), Some("message/http"));
    let reflected = String::from_utf8_lossy(&trace.body);
    assert!(
        reflected.starts_with("TRACE /attack/max-forwards"),
        "{reflected}"
    );
    assert!(!reflected.contains("secret"), "{reflected}");
    assert_eq!(
        origin.count(path),
        0,
        "a spent Max-Forwards reached the origin"
    );

    let forwarded = client
        .send(Method::OPTIONS, &url, &[("max-forwards", "2")])
        .await
        .expect("OPTIONS");
    assert_eq!(forwarded.status, 200);
    let received = origin.received(path);
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].header("max-forwards"), Some("1"));
}

/// RFC 8586: a request that comes back to the proxy that forwarded it (an origin, or a balancer in
/// front of one, pointing at the proxy) is refused with 508 at once, before it reaches the cache
/// (where, a miss, it would wait on the coalesced fetch that is itself) or the origin. The proxy
/// adds its own `CDN-Loop` entry after the client's; another CDN's entries, or another
/// bloomgate's, are not a loop.
#[tokio::test]
async fn a_request_that_comes_back_to_the_proxy_is_refused_as_a_loop() {
    let origin = Origin::start();
    for path in [
        "/attack/loop/first",
        "/attack/loop/back",
        "/attack/loop/other",
    ] {
        origin.set(path, Reply::ok("from the origin"));
    }
    let proxy = ProxyConfig::new(&origin.url()).start();
    let client = Client::new();

    let first = client.get(&proxy.url("/attack/loop/first")).await;
    assert_eq!(first.status, 200);
    let received = origin.received("/attack/loop/first");
    let own = received[0].combined("cdn-loop").expect("CDN-Loop sent");
    assert!(own.starts_with("bloomgate; id="), "{own}");

    // The proxy's own entry, after another CDN's, as an origin pointing back would send it.
    let back = client
        .get_with(
            &proxy.url("/attack/loop/back"),
            &[("cdn-loop", &format!("cdn.example; v=1, {own}"))],
        )
        .await;
    assert_eq!(back.status, 508, "{}", back.text());
    assert_eq!(
        origin.count("/attack/loop/back"),
        0,
        "a loop reached the origin"
    );

    // Another CDN, and another bloomgate: forwarded, with this proxy's entry after theirs.
    let others = "cdn.example; id=1, bloomgate; id=0123456789abcdeg";
    let other = client
        .get_with(&proxy.url("/attack/loop/other"), &[("cdn-loop", others)])
        .await;
    assert_eq!(other.status, 200);
    let received = origin.received("/attack/loop/other");
    assert_eq!(
        received[0].combined("cdn-loop").as_deref(),
        Some(format!("{others}, {own}").as_str())
    );
}

/// The loop itself: a proxy whose origin is its own listener answers 508 (the inner pass refuses,
/// the outer relays the refusal) instead of forwarding to itself until connections run out.
#[tokio::test]
async fn a_proxy_whose_origin_is_itself_answers_508() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let mut config = ProxyConfig::new(&format!("http://127.0.0.1:{port}"));
    config.set("server", "listen", &format!("\"127.0.0.1:{port}\""));
    let proxy = config.start();
    let client = Client::new();
    for path in ["/attack/self", "/attack/self?again"] {
        let reply = client.get(&proxy.url(path)).await;
        assert_eq!(reply.status, 508, "{}", reply.text());
    }
    let log = proxy.log();
    assert!(log.contains("request loop"), "{log}");
}
