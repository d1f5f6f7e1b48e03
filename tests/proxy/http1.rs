//! End to end: the native HTTP/1.1 server (`server.http1 = "native"`) on raw sockets: pipelining,
//! a head split byte by byte, `Expect: 100-continue`, upgrades and CONNECT, chunked request
//! bodies; and the refusals and timeouts that guard against smuggling and idle clients, run on
//! both servers whatever `BLOOMGATE_TEST_HTTP1` picks for the rest of the suite.

use crate::common;

use std::time::Duration;

use bytes::Bytes;
use common::client::{closed_within, raw_exchange, read_available_bytes};
use common::wire::{parse_requests, parse_responses};
use common::{Origin, ProxyConfig, ProxyProcess, Reply};
use http_body_util::{BodyExt, Full};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Both HTTP/1.1 servers, by their `server.http1` names.
const SERVERS: [&str; 2] = ["native", "hyper"];

fn proxy_on(origin: &Origin, server: &str) -> ProxyConfig {
    let mut config = ProxyConfig::new(&origin.url());
    config.set("server", "http1", &format!("\"{server}\""));
    config
}

fn native(origin: &Origin) -> ProxyProcess {
    proxy_on(origin, "native").start()
}

/// The bodies of the requests the origin received on its connections, in order, for `target`.
fn bodies_received(origin: &Origin, target: &str) -> Vec<Vec<u8>> {
    origin
        .raw_connections()
        .iter()
        .flat_map(|raw| parse_requests(raw).expect("well-framed requests at the origin"))
        .filter(|request| request.target == target)
        .map(|request| request.body)
        .collect()
}

#[tokio::test]
async fn three_pipelined_requests_in_one_write_are_answered_in_order() {
    let origin = Origin::start();
    for n in 1..=3 {
        origin.set(&format!("/pipe/{n}"), Reply::ok(&format!("body {n}")));
    }
    let proxy = native(&origin);
    let mut stream = TcpStream::connect(proxy.addr).await.expect("connect");
    let requests = b"GET /pipe/1 HTTP/1.1\r\nHost: p.example\r\n\r\n\
                     GET /pipe/2 HTTP/1.1\r\nHost: p.example\r\n\r\n\
                     GET /pipe/3 HTTP/1.1\r\nHost: p.example\r\n\r\n";
    stream.write_all(requests).await.expect("send");
    let bytes = read_available_bytes(&mut stream, Duration::from_millis(500)).await;
    let responses = parse_responses(&bytes, false).expect("well-framed responses");
    let bodies: Vec<String> = responses
        .iter()
        .map(|response| String::from_utf8_lossy(&response.body).into_owned())
        .collect();
    assert_eq!(bodies, ["body 1", "body 2", "body 3"]);
}

#[tokio::test]
async fn a_request_sent_byte_by_byte_is_answered() {
    let origin = Origin::start();
    origin.set("/split", Reply::ok("whole"));
    let proxy = native(&origin);
    let mut stream = TcpStream::connect(proxy.addr).await.expect("connect");
    for byte in b"GET /split HTTP/1.1\r\nHost: s.example\r\nX-A: 1\r\n\r\n" {
        stream.write_all(&[*byte]).await.expect("send a byte");
        // Each byte its own segment: the server sees the head arrive in pieces.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let bytes = read_available_bytes(&mut stream, Duration::from_millis(500)).await;
    let responses = parse_responses(&bytes, false).expect("a well-framed response");
    assert!(
        matches!(responses.as_slice(), [one] if one.status == 200 && one.body == b"whole"),
        "{responses:?}"
    );
}

#[tokio::test]
async fn expect_100_continue_is_answered_before_the_body_which_reaches_the_origin() {
    let origin = Origin::start();
    origin.set("/upload", Reply::ok("stored").status(201));
    let proxy = native(&origin);
    let mut stream = TcpStream::connect(proxy.addr).await.expect("connect");
    stream
        .write_all(
            b"POST /upload HTTP/1.1\r\nHost: u.example\r\nContent-Length: 5\r\n\
              Expect: 100-continue\r\n\r\n",
        )
        .await
        .expect("send the head");
    let mut interim = vec![0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut interim))
        .await
        .expect("an interim response within 5 s")
        .expect("read");
    assert_eq!(
        String::from_utf8_lossy(&interim[..read]),
        "HTTP/1.1 100 Continue\r\n\r\n"
    );
    stream.write_all(b"hello").await.expect("send the body");
    let bytes = read_available_bytes(&mut stream, Duration::from_millis(500)).await;
    let responses = parse_responses(&bytes, false).expect("a well-framed response");
    assert!(
        matches!(responses.as_slice(), [one] if one.status == 201),
        "{responses:?}"
    );
    assert_eq!(bodies_received(&origin, "/upload"), [b"hello".to_vec()]);
}

#[tokio::test]
async fn a_request_without_a_body_is_never_sent_100_continue() {
    let origin = Origin::start();
    origin.set("/plain", Reply::ok("plain"));
    let proxy = native(&origin);
    let answer = raw_exchange(
        proxy.addr,
        b"GET /plain HTTP/1.1\r\nHost: u.example\r\nExpect: 100-continue\r\n\r\n",
        Duration::from_millis(500),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer:?}");
}

#[tokio::test]
async fn connect_is_refused_and_an_upgrade_is_never_switched_to() {
    let origin = Origin::start();
    origin.set("/ws", Reply::ok("not a socket"));
    let proxy = native(&origin);
    let refused = raw_exchange(
        proxy.addr,
        b"CONNECT victim.example:443 HTTP/1.1\r\nHost: victim.example:443\r\n\r\n",
        Duration::from_millis(500),
    )
    .await;
    let status = common::client::raw_status(&refused);
    assert!(
        status.is_some_and(|status| (400..500).contains(&status) || status == 501),
        "{refused:?}"
    );

    let mut stream = TcpStream::connect(proxy.addr).await.expect("connect");
    stream
        .write_all(
            b"GET /ws HTTP/1.1\r\nHost: w.example\r\nConnection: Upgrade\r\n\
              Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        )
        .await
        .expect("send");
    let bytes = read_available_bytes(&mut stream, Duration::from_millis(500)).await;
    let responses = parse_responses(&bytes, false).expect("a well-framed response");
    match responses.as_slice() {
        [one] => assert_ne!(one.status, 101, "switched protocols"),
        other => panic!("expected one response: {other:?}"),
    }
    for request in origin.all_received() {
        assert_eq!(request.header("upgrade"), None, "Upgrade forwarded");
    }
    assert!(
        closed_within(&mut stream, Duration::from_secs(2))
            .await
            .is_some(),
        "the connection of an upgrade request stays open"
    );
}

#[tokio::test]
async fn a_chunked_request_body_reaches_the_origin_exactly() {
    let origin = Origin::start();
    origin.set("/chunked", Reply::ok("taken"));
    let proxy = native(&origin);
    let answer = raw_exchange(
        proxy.addr,
        b"POST /chunked HTTP/1.1\r\nHost: c.example\r\nTransfer-Encoding: chunked\r\n\r\n\
          5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n",
        Duration::from_millis(500),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer:?}");
    assert_eq!(
        bodies_received(&origin, "/chunked"),
        [b"hello world".to_vec()]
    );
}

#[tokio::test]
async fn a_request_body_ignored_by_the_cache_does_not_become_the_next_request() {
    let origin = Origin::start();
    origin.set("/first", Reply::ok("first"));
    origin.set("/second", Reply::ok("second"));
    let proxy = native(&origin);
    let mut stream = TcpStream::connect(proxy.addr).await.expect("connect");
    // The body spells a request: read as one, it would reach the origin as /smuggled.
    let body = b"GET /smuggled HTTP/1.1\r\nHost: c.example\r\n\r\n";
    let requests = [
        format!(
            "GET /first HTTP/1.1\r\nHost: c.example\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes(),
        body.to_vec(),
        b"GET /second HTTP/1.1\r\nHost: c.example\r\n\r\n".to_vec(),
    ]
    .concat();
    stream.write_all(&requests).await.expect("send");
    let bytes = read_available_bytes(&mut stream, Duration::from_millis(500)).await;
    let responses = parse_responses(&bytes, false).expect("well-framed responses");
    let bodies: Vec<String> = responses
        .iter()
        .map(|response| String::from_utf8_lossy(&response.body).into_owned())
        .collect();
    assert_eq!(bodies, ["first", "second"]);
    assert_eq!(
        origin.count("/smuggled"),
        0,
        "the body was read as a request"
    );
}

#[tokio::test]
async fn early_hints_from_the_origin_go_to_the_client_first_and_are_never_stored() {
    let origin = Origin::start();
    let path = "/interim/hints";
    origin.set(
        path,
        Reply::raw(
            b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n\
              HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nConnection: close\r\n\
              Content-Length: 5\r\n\r\nhello",
        ),
    );
    let proxy = proxy_on(&origin, "native").admission(false).start();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: hints.example\r\nConnection: close\r\n\r\n");
    let first = raw_exchange(proxy.addr, request.as_bytes(), Duration::from_millis(500)).await;
    let (interim, last) = first
        .split_once("\r\n\r\n")
        .expect("a head before the final response");
    assert!(
        interim.starts_with("HTTP/1.1 103 Early Hints\r\n")
            && interim.contains("link: </a.css>; rel=preload"),
        "{first:?}"
    );
    let finals = parse_responses(last.as_bytes(), false).expect("a well-framed final response");
    assert!(
        matches!(finals.as_slice(), [one] if one.status == 200 && one.header("link").is_none()),
        "the 103's Link reached the 200: {first:?}"
    );

    // A hit: the stored response has no Link and no 103 comes before it.
    let second = raw_exchange(proxy.addr, request.as_bytes(), Duration::from_millis(500)).await;
    let answers = parse_responses(second.as_bytes(), false).expect("a well-framed response");
    assert!(
        matches!(answers.as_slice(), [one] if one.status == 200 && one.header("link").is_none()),
        "{second:?}"
    );
    assert_eq!(origin.count(path), 1);

    // An HTTP/1.0 client is never sent a 1xx (RFC 9110 section 15.2).
    let other = "/interim/hints-http10";
    origin.set(
        other,
        Reply::raw(
            b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n\
              HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello",
        ),
    );
    let old = raw_exchange(
        proxy.addr,
        format!("GET {other} HTTP/1.0\r\nHost: hints.example\r\n\r\n").as_bytes(),
        Duration::from_millis(500),
    )
    .await;
    assert!(old.starts_with("HTTP/1.0 200 OK\r\n"), "{old:?}");
}

#[tokio::test]
async fn a_route_s_early_hints_go_out_once_before_a_miss_and_never_before_a_hit() {
    let origin = Origin::start();
    origin.set(
        "/page",
        Reply::ok("page").header("cache-control", "max-age=60"),
    );
    origin.set(
        "/api",
        Reply::ok("api").header("cache-control", "max-age=60"),
    );
    let upstreams = format!(
        "[upstreams.o]\nservers = [\"{}\"]\n\
         [[routes]]\nname = \"pages\"\npath_prefix = \"/page\"\nupstream = \"o\"\n\
         early_hints = [\"</app.css>; rel=preload; as=style\", \"<https://cdn.example>; rel=preconnect\"]\n\
         [[routes]]\nname = \"rest\"\nupstream = \"o\"\n",
        origin.url()
    );
    let mut config = ProxyConfig::with_upstreams(&upstreams);
    config.set("server", "http1", "\"native\"").admission(false);
    let proxy = config.start();
    let ask = |path: &str, version: &str| {
        format!("GET {path} {version}\r\nHost: hints.example\r\nConnection: close\r\n\r\n")
    };

    // A miss: one 103 with both links, then the final response without them.
    let miss = raw_exchange(
        proxy.addr,
        ask("/page", "HTTP/1.1").as_bytes(),
        Duration::from_millis(500),
    )
    .await;
    let (interim, last) = miss
        .split_once("\r\n\r\n")
        .expect("a head before the final response");
    assert_eq!(
        interim,
        "HTTP/1.1 103 Early Hints\r\nlink: </app.css>; rel=preload; as=style\r\n\
         link: <https://cdn.example>; rel=preconnect",
        "{miss:?}"
    );
    let finals = parse_responses(last.as_bytes(), false).expect("a well-framed final response");
    assert!(
        matches!(finals.as_slice(), [one] if one.status == 200 && one.header("link").is_none()),
        "{miss:?}"
    );

    // A hit answers at once: no hint before it.
    let hit = raw_exchange(
        proxy.addr,
        ask("/page", "HTTP/1.1").as_bytes(),
        Duration::from_millis(500),
    )
    .await;
    assert!(hit.starts_with("HTTP/1.1 200 OK\r\n"), "{hit:?}");
    assert!(hit.contains("; hit"), "{hit:?}");

    // Another route has none; an HTTP/1.0 client is sent no 1xx (RFC 9110 section 15.2).
    let other = raw_exchange(
        proxy.addr,
        ask("/api", "HTTP/1.1").as_bytes(),
        Duration::from_millis(500),
    )
    .await;
    assert!(other.starts_with("HTTP/1.1 200 OK\r\n"), "{other:?}");
    origin.set("/page2", Reply::ok("page2"));
    let old = raw_exchange(
        proxy.addr,
        ask("/page2", "HTTP/1.0").as_bytes(),
        Duration::from_millis(500),
    )
    .await;
    assert!(old.starts_with("HTTP/1.0 200 OK\r\n"), "{old:?}");
}

#[tokio::test]
async fn an_http2_client_on_the_plain_listener_is_still_served_by_hyper() {
    let origin = Origin::start();
    origin.set("/h2", Reply::ok("over h2"));
    let proxy = native(&origin);
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let response = client
        .request(
            http::Request::get(proxy.url("/h2"))
                .body(Full::new(Bytes::new()))
                .expect("request"),
        )
        .await
        .expect("an HTTP/2 response");
    assert_eq!(response.version(), http::Version::HTTP_2);
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    assert_eq!(body, Bytes::from_static(b"over h2"));
}

/// Requests whose framing two readers could disagree on: each server refuses every one of them
/// with a 4xx before anything reaches the origin.
#[tokio::test]
async fn smuggling_attempts_are_refused_by_both_servers() {
    let attempts: [(&str, &[u8]); 9] = [
        (
            "differing Content-Length fields",
            b"POST /smuggle HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\nbody",
        ),
        (
            "obs-fold",
            b"GET /smuggle HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\n\r\n",
        ),
        (
            "Content-Length with a sign",
            b"POST /smuggle HTTP/1.1\r\nHost: x\r\nContent-Length: +4\r\n\r\nbody",
        ),
        (
            "Content-Length as a list",
            b"POST /smuggle HTTP/1.1\r\nHost: x\r\nContent-Length: 4, 4\r\n\r\nbody",
        ),
        (
            "whitespace before the colon",
            b"POST /smuggle HTTP/1.1\r\nHost: x\r\nContent-Length : 4\r\n\r\nbody",
        ),
        (
            "Transfer-Encoding not ending in chunked",
            b"POST /smuggle HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
        ),
        (
            "Transfer-Encoding on HTTP/1.0",
            b"POST /smuggle HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ),
        (
            "a bare CR in a field value",
            b"GET /smuggle HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n",
        ),
        (
            "a space in a field name",
            b"GET /smuggle HTTP/1.1\r\nHost: x\r\nX A: 1\r\n\r\n",
        ),
    ];
    for server in SERVERS {
        let origin = Origin::start();
        let proxy = proxy_on(&origin, server).start();
        for (what, request) in attempts {
            let answer = raw_exchange(proxy.addr, request, Duration::from_millis(300)).await;
            let status = common::client::raw_status(&answer);
            assert!(
                status.is_some_and(|status| (400..500).contains(&status)),
                "{server}: {what}: {answer:?}"
            );
        }
        assert_eq!(
            origin.count("/smuggle"),
            0,
            "{server}: a smuggling attempt reached the origin"
        );
    }
}

#[tokio::test]
async fn a_head_over_the_limit_gets_431_from_both_servers() {
    for server in SERVERS {
        let origin = Origin::start();
        let proxy = proxy_on(&origin, server)
            .set("server", "max_header_bytes", "\"8KiB\"")
            .start();
        let request = format!(
            "GET /big HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
            "a".repeat(10 << 10)
        );
        let answer = raw_exchange(proxy.addr, request.as_bytes(), Duration::from_millis(300)).await;
        assert_eq!(
            common::client::raw_status(&answer),
            Some(431),
            "{server}: {answer:?}"
        );
        assert_eq!(origin.count("/big"), 0, "{server}");
    }
}

#[tokio::test]
async fn silent_and_idle_connections_are_closed_by_both_servers() {
    for server in SERVERS {
        let origin = Origin::start();
        origin.set("/idle", Reply::ok("idle"));
        let proxy = proxy_on(&origin, server)
            .set("server", "header_read_timeout", "\"1s\"")
            .set("server", "idle_timeout", "\"1s\"")
            .start();
        let mut silent = TcpStream::connect(proxy.addr).await.expect("connect");
        assert!(
            closed_within(&mut silent, Duration::from_secs(4))
                .await
                .is_some(),
            "{server}: a connection that sent nothing is still open after 4 s"
        );
        let mut trickling = TcpStream::connect(proxy.addr).await.expect("connect");
        trickling
            .write_all(b"GET /idle HTTP/1.1\r\n")
            .await
            .expect("send half a head");
        assert!(
            closed_within(&mut trickling, Duration::from_secs(4))
                .await
                .is_some(),
            "{server}: a connection that never finished its head is still open after 4 s"
        );
        let mut idle = TcpStream::connect(proxy.addr).await.expect("connect");
        idle.write_all(b"GET /idle HTTP/1.1\r\nHost: i.example\r\n\r\n")
            .await
            .expect("send");
        let bytes = read_available_bytes(&mut idle, Duration::from_millis(200)).await;
        assert!(
            matches!(parse_responses(&bytes, false).as_deref(), Ok([one]) if one.status == 200),
            "{server}"
        );
        assert!(
            closed_within(&mut idle, Duration::from_secs(4))
                .await
                .is_some(),
            "{server}: an idle keep-alive connection is still open 4 s after its response"
        );
    }
}

/// The hits `hits_from` asks for: two objects whole, two variants of a third, one whose tag field
/// the proxy removes; the same host for both proxies, so that the same keys are asked for.
const HITS: &[u8] = b"GET /same HTTP/1.1\r\nHost: h.example\r\n\r\n\
                      GET /varied HTTP/1.1\r\nHost: h.example\r\nAccept-Language: en\r\n\r\n\
                      GET /varied HTTP/1.1\r\nHost: h.example\r\nAccept-Language: fr\r\n\r\n\
                      GET /tagged HTTP/1.1\r\nHost: h.example\r\n\r\n";

/// The heads of the answers to `HITS` pipelined on one connection, then to a HEAD of `/same` on
/// another, from the proxy at `addr`; the first round stores the objects, the second is hits.
async fn hits_from(addr: std::net::SocketAddr) -> Vec<common::wire::WireResponse> {
    let wait = Duration::from_millis(300);
    let stored = common::client::raw_exchange_bytes(addr, HITS, wait).await;
    let stored = parse_responses(&stored, false).expect("the misses, well framed");
    assert_eq!(stored.len(), 4, "{stored:?}");
    let mut hits = parse_responses(
        &common::client::raw_exchange_bytes(addr, HITS, wait).await,
        false,
    )
    .expect("the hits, well framed");
    let head = b"HEAD /same HTTP/1.1\r\nHost: h.example\r\n\r\n";
    let head = common::client::raw_exchange_bytes(addr, head, wait).await;
    hits.extend(parse_responses(&head, true).expect("the HEAD hit, well framed"));
    hits
}

#[tokio::test]
async fn a_memory_hits_head_is_the_same_field_for_field_from_both_servers() {
    let origin = Origin::start();
    // A date to come: its Age is the origin's alone (RFC 9111 section 4.2.3), so both proxies'
    // hits carry the same one while their entries are younger than a second.
    let fields = [
        ("date", "Fri, 01 Jan 2100 00:00:00 GMT"),
        ("last-modified", "Sun, 06 Nov 1994 08:49:37 GMT"),
        ("expires", "Sunday, 06-Nov-94 08:49:37 GMT"),
        ("cache-control", "public, max-age=600"),
        ("x-a", "1"),
        ("etag", "\"v1\""),
        ("x-b", "2"),
        ("x-a", "3"),
        ("age", "5"),
        ("cache-status", "upstream; hit"),
        ("accept-ranges", "none"),
        ("keep-alive", "timeout=5"),
        ("content-type", "text/plain"),
    ];
    let with_fields = |mut reply: Reply| {
        for (name, value) in fields {
            reply = reply.header(name, value);
        }
        reply
    };
    origin.set("/same", with_fields(Reply::ok("the same body")));
    let varied = Reply::echo("accept-language").header("vary", "accept-language");
    origin.set("/varied", with_fields(varied));
    let tagged = Reply::ok("tagged").header("surrogate-key", "t1");
    origin.set("/tagged", with_fields(tagged));
    let native = proxy_on(&origin, "native").start();
    let hyper = proxy_on(&origin, "hyper").start();
    let native = hits_from(native.addr).await;
    let hyper = hits_from(hyper.addr).await;
    assert_eq!(native.len(), 5, "{native:?}");
    for (native, hyper) in native.iter().zip(&hyper) {
        assert_eq!(native.status, 200);
        assert_eq!(native.headers, hyper.headers, "native, then hyper");
        assert_eq!(native.body, hyper.body);
        let cache_status = native.header("cache-status").unwrap_or_default();
        assert!(cache_status.starts_with("bloomgate; hit"), "{cache_status}");
        assert_eq!(native.header("age"), Some("5"));
        assert_eq!(native.header("accept-ranges"), Some("bytes"));
        assert_eq!(native.header("keep-alive"), None);
        assert_eq!(native.header("surrogate-key"), None);
        assert_eq!(native.header("date"), Some("Fri, 01 Jan 2100 00:00:00 GMT"));
        assert_eq!(
            native.header("last-modified"),
            Some("Sun, 06 Nov 1994 08:49:37 GMT")
        );
    }
    let bodies: Vec<&[u8]> = native.iter().map(|hit| &hit.body[..]).collect();
    assert_eq!(
        bodies,
        [&b"the same body"[..], b"en", b"fr", b"tagged", b""],
        "every answer the one asked for, HEAD's without a body"
    );
    assert_eq!(native[4].header("content-length"), Some("13"));
}
