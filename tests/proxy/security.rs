//! End to end: attacks a client can mount through the proxy, each over real sockets. Request
//! smuggling into pooled origin connections, cache-key forgery through Host, Vary poisoning
//! through repeated header lines, responses framed two ways, unbounded variants, connections held
//! open by saying nothing, and forwarding headers a client should not be able to set.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::client::{closed_within, raw_exchange_bytes, read_available_bytes};
use common::h2raw::{H2Conn, H2Outcome, h2_exchange};
use common::wire::{WireResponse, parse_requests, parse_responses};
use common::{BodyReading, Client, Origin, ProxyConfig, Reply};
use http::Method;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Sends raw bytes on a new connection and parses what comes back (until the proxy closes, or
/// nothing more arrives for half a second).
async fn raw_responses(addr: SocketAddr, request: &[u8]) -> Result<Vec<WireResponse>, String> {
    raw_responses_within(addr, request, Duration::from_millis(500)).await
}

/// Like [`raw_responses`], waiting up to `wait` for each read.
async fn raw_responses_within(
    addr: SocketAddr,
    request: &[u8],
    wait: Duration,
) -> Result<Vec<WireResponse>, String> {
    let bytes = raw_exchange_bytes(addr, request, wait).await;
    if bytes.is_empty() {
        return Err("no response at all (connection closed or silent)".to_string());
    }
    parse_responses(&bytes, request.starts_with(b"HEAD "))
        .map_err(|e| format!("{e}; raw: {:?}", String::from_utf8_lossy(&bytes)))
}

/// The status of the only response to a raw request, or a description of what went wrong.
async fn raw_status(addr: SocketAddr, request: &[u8]) -> Result<u16, String> {
    let responses = raw_responses(addr, request).await?;
    match responses.as_slice() {
        [one] => Ok(one.status),
        many => Err(format!("{} responses to one request: {many:?}", many.len())),
    }
}

/// Checks every connection the origin accepted: its bytes must be a sequence of complete,
/// well-framed requests. Returns them all.
fn origin_requests_well_framed(origin: &Origin) -> Vec<common::wire::WireRequest> {
    let mut all = Vec::new();
    for (index, raw) in origin.raw_connections().iter().enumerate() {
        match parse_requests(raw) {
            Ok(requests) => all.extend(requests),
            Err(error) => panic!(
                "origin connection {index} did not carry well-framed requests: {error}\n\
                 whole connection: {:?}",
                String::from_utf8_lossy(raw)
            ),
        }
    }
    all
}

/// The request to `target` among those the origin received.
fn forwarded<'a>(
    requests: &'a [common::wire::WireRequest],
    target: &str,
) -> &'a common::wire::WireRequest {
    requests
        .iter()
        .find(|r| r.target == target)
        .unwrap_or_else(|| panic!("the origin never received {target}: {requests:#?}"))
}

const A_BODY: &[u8] = b"0123456789abcdefghijklmno";

// ---------------------------------------------------------------------------------------------
// 1. Desync of pooled origin connections.
// ---------------------------------------------------------------------------------------------

/// Today: the proxy drops the body of a cacheable GET but copies the client's
/// `Content-Length: 25` into the origin request, so the origin waits for 25 bytes that never
/// come; an origin that answers first (Go, Node) then reads the next request on the pooled
/// connection (client B's) as that body, and B gets a 502 or someone else's answer.
#[tokio::test]
async fn a_get_body_the_proxy_drops_is_not_announced_to_a_pooled_origin_connection() {
    let origin = Origin::start_reading(BodyReading::AfterAnswer);
    origin.set("/desync/a", Reply::ok("answer for /desync/a"));
    origin.set("/desync/b", Reply::ok("answer for /desync/b"));
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();

    let mut attack = b"GET /desync/a HTTP/1.1\r\nHost: d.example\r\nContent-Length: 25\r\n\
                       Connection: close\r\n\r\n"
        .to_vec();
    attack.extend_from_slice(A_BODY);
    let a = raw_status(proxy.addr, &attack).await;
    // Let the origin connection go back to the pool, so that B's request is sent on it.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let b = Client::new()
        .send(
            Method::GET,
            &proxy.url("/desync/b"),
            &[("host", "d.example")],
        )
        .await;
    tokio::time::sleep(Duration::from_millis(150)).await;

    // RFC 9112 section 6.3: the body length a request announces is what follows; a request that
    // says 25 and sends nothing takes the next 25 bytes on the connection.
    let requests = origin_requests_well_framed(&origin);
    let a_at_origin = forwarded(&requests, "/desync/a");
    assert!(
        a_at_origin.body.is_empty() || a_at_origin.body == A_BODY,
        "the origin got a body for /desync/a that is not the client's: {a_at_origin:?}"
    );
    assert_eq!(a, Ok(200), "client A's answer");
    let b = b.expect("client B gets a response");
    assert_eq!(
        (b.status.as_u16(), b.text().as_str()),
        (200, "answer for /desync/b"),
        "client B must get the answer to its own request"
    );
}

/// The same over HTTP/2 (prior knowledge): a GET stream with `content-length: 25` and a DATA
/// frame is forwarded to the HTTP/1.1 origin with `content-length: 25` and no body.
///
/// Today: as over HTTP/1.1, the origin request announces 25 bytes that never follow, and the next
/// request on the pooled connection is eaten as that body.
#[tokio::test]
async fn an_h2_get_body_the_proxy_drops_is_not_announced_to_a_pooled_origin_connection() {
    let origin = Origin::start_reading(BodyReading::AfterAnswer);
    origin.set("/desync/h2a", Reply::ok("answer for /desync/h2a"));
    origin.set("/desync/h2b", Reply::ok("answer for /desync/h2b"));
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();

    let a = h2_exchange(
        proxy.addr,
        &[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/desync/h2a"),
            (":authority", "d.example"),
            ("content-length", "25"),
        ],
        Some(A_BODY),
        Duration::from_secs(3),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let b = Client::new()
        .send(
            Method::GET,
            &proxy.url("/desync/h2b"),
            &[("host", "d.example")],
        )
        .await;
    tokio::time::sleep(Duration::from_millis(150)).await;

    let requests = origin_requests_well_framed(&origin);
    if let Some(a_at_origin) = requests.iter().find(|r| r.target == "/desync/h2a") {
        assert!(
            a_at_origin.body.is_empty() || a_at_origin.body == A_BODY,
            "the origin got a body for /desync/h2a that is not the client's: {a_at_origin:?}"
        );
    }
    assert!(
        matches!(
            a,
            H2Outcome::Response {
                status: Some(200),
                ..
            }
        ) || a.is_refusal(),
        "the h2 client got neither its answer nor a refusal: {a:?}"
    );
    let b = b.expect("client B gets a response");
    assert_eq!(
        (b.status.as_u16(), b.text().as_str()),
        (200, "answer for /desync/h2b"),
        "client B must get the answer to its own request"
    );
}

// ---------------------------------------------------------------------------------------------
// 2. Cache-key forgery through Host.
// ---------------------------------------------------------------------------------------------

/// Today: the key is the Host value followed by the path, so `Host: victim.example/some/prefix`
/// with `/x` makes the key `victim.example/some/prefix/x`; the proxy fetches `/x`, stores the
/// answer under that key, and serves it as a hit to every client asking for
/// `http://victim.example/some/prefix/x`.
#[tokio::test]
async fn a_host_with_a_path_in_it_is_refused_and_plants_nothing() {
    let origin = Origin::start();
    let stored = |body: &str| Reply::ok(body).header("cache-control", "max-age=60");
    origin.set("/x", stored("planted by the attacker"));
    origin.set("/some/prefix/x", stored("the genuine /some/prefix/x"));
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();

    // RFC 9112 section 3.2: a Host field with an invalid value gets 400. Host is
    // uri-host [ ":" port ] (RFC 9110 section 7.2): no path.
    let attack =
        b"GET /x HTTP/1.1\r\nHost: victim.example/some/prefix\r\nConnection: close\r\n\r\n";
    let attacker = raw_status(proxy.addr, attack).await;
    let origin_contacted = origin.count("/x");
    let victim = Client::new()
        .get_with(&proxy.url("/some/prefix/x"), &[("host", "victim.example")])
        .await;
    assert_eq!(
        victim.text(),
        "the genuine /some/prefix/x",
        "the victim got the attacker's object ({})",
        victim.cache_status()
    );
    assert!(!victim.is_hit(), "{}", victim.cache_status());
    assert_eq!(attacker, Ok(400), "Host with a path must be refused");
    assert_eq!(origin_contacted, 0, "the origin was asked for /x");
}

/// Today: only a missing or empty Host and control characters (which the HTTP/1 parser rejects)
/// get 400; `?`, `#`, `@`, spaces and tabs inside, a list, two Host lines and userinfo in an
/// absolute-form target are all taken into the cache key and forwarded.
#[tokio::test]
async fn host_values_that_are_not_host_and_port_are_refused() {
    let origin = Origin::start();
    origin.set("/host/check", Reply::ok("answered"));
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    let mut failures = Vec::new();

    // RFC 9112 section 3.2: "A server MUST respond with a 400 (Bad Request) status code to any
    // HTTP/1.1 request message that lacks a Host header field and to any request message that
    // contains more than one Host header field line or a Host header field with an invalid field
    // value." RFC 9110 section 4.2.4: userinfo in an http URI is an error.
    let refused: &[(&str, &str)] = &[
        (
            "query",
            "GET /host/check HTTP/1.1\r\nHost: victim.example?x=1\r\n",
        ),
        (
            "fragment",
            "GET /host/check HTTP/1.1\r\nHost: victim.example#frag\r\n",
        ),
        (
            "userinfo",
            "GET /host/check HTTP/1.1\r\nHost: user@victim.example\r\n",
        ),
        (
            "space inside",
            "GET /host/check HTTP/1.1\r\nHost: victim .example\r\n",
        ),
        (
            "tab inside",
            "GET /host/check HTTP/1.1\r\nHost: victim\t.example\r\n",
        ),
        (
            "control",
            "GET /host/check HTTP/1.1\r\nHost: victim\x01.example\r\n",
        ),
        (
            "delete",
            "GET /host/check HTTP/1.1\r\nHost: victim.example\x7f\r\n",
        ),
        (
            "slash",
            "GET /host/check HTTP/1.1\r\nHost: victim.example/\r\n",
        ),
        (
            "list",
            "GET /host/check HTTP/1.1\r\nHost: a.example, b.example\r\n",
        ),
        (
            "two lines, different",
            "GET /host/check HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n",
        ),
        (
            "two lines, identical",
            "GET /host/check HTTP/1.1\r\nHost: a.example\r\nHost: a.example\r\n",
        ),
        ("empty", "GET /host/check HTTP/1.1\r\nHost:\r\n"),
        (
            "absolute form with userinfo",
            "GET http://user@victim.example/host/check HTTP/1.1\r\nHost: victim.example\r\n",
        ),
        (
            "absolute form with user and password",
            "GET http://user:pw@victim.example/host/check HTTP/1.1\r\nHost: victim.example\r\n",
        ),
    ];
    for (what, head) in refused {
        let before = origin.all_received().len();
        let request = format!("{head}Connection: close\r\n\r\n");
        let status = raw_status(proxy.addr, request.as_bytes()).await;
        let reached = origin.all_received().len() - before;
        if status != Ok(400) || reached != 0 {
            failures.push(format!(
                "{what}: {head:?} got {status:?}, origin received {reached} request(s); \
                 expected 400 and none"
            ));
        }
    }

    let accepted = ["Example.COM:8080", "[::1]:80", "127.0.0.1", "a.example"];
    for host in accepted {
        let before = origin.count("/host/check");
        let request =
            format!("GET /host/check HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        let status = raw_status(proxy.addr, request.as_bytes()).await;
        if status != Ok(200) || origin.count("/host/check") != before + 1 {
            failures.push(format!("valid Host {host:?} got {status:?}"));
        }
    }

    // RFC 9113 section 8.3.1: `:authority` has the authority syntax (no path, no userinfo for
    // http URIs), and without `:authority` Host names the target with the same rules; RFC 9113
    // section 8.1.1: a malformed request is treated as a stream error (or answered 400).
    let h2_attempts = [
        (
            ":authority",
            "victim.example/some/prefix",
            "h2 :authority with a path",
        ),
        (
            "host",
            "victim.example/some/prefix",
            "h2 without :authority, host with a path,",
        ),
        (
            ":authority",
            "user@victim.example",
            "h2 :authority with userinfo",
        ),
    ];
    for (field, value, what) in h2_attempts {
        let before = origin.all_received().len();
        let h2 = h2_exchange(
            proxy.addr,
            &[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/host/check"),
                (field, value),
            ],
            None,
            Duration::from_secs(2),
        )
        .await;
        let reached = origin.all_received().len() - before;
        if !h2.is_refusal() || reached != 0 {
            failures.push(format!(
                "{what} got {h2:?}, origin received {reached} request(s)"
            ));
        }
    }

    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// 3. Vary poisoning through repeated header lines.
// ---------------------------------------------------------------------------------------------

/// An attacker sends `name` on two lines; the origin answers for both values combined; then a
/// victim sends only the first value and must get the origin's answer for that value.
async fn vary_poisoning_attempt(name: &str, first: &str, second: &str) {
    let origin = Origin::start();
    let path = format!("/vary/{name}");
    origin.set(
        &path,
        Reply::echo(name)
            .header("cache-control", "max-age=60")
            .header("vary", name),
    );
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();

    let attack = format!(
        "GET {path} HTTP/1.1\r\nHost: v.example\r\n{name}: {first}\r\n{name}: {second}\r\n\
         Connection: close\r\n\r\n"
    );
    let attacker = raw_responses(proxy.addr, attack.as_bytes()).await;
    let victim = Client::new()
        .get_with(&proxy.url(&path), &[("host", "v.example"), (name, first)])
        .await;
    // RFC 9110 section 5.3: the lines of a field are one value, combined in order; RFC 9111
    // section 4.1: a stored response is selected only when that whole value matches.
    assert_eq!(
        victim.text(),
        first,
        "a client sending only `{name}: {first}` got the variant stored for `{first}, {second}` \
         ({}); the attacker got {attacker:?}",
        victim.cache_status()
    );
}

/// Today: the variant is stored under the first line's value only (`identity`), while the origin
/// answered for `identity, gzip`; a victim sending `identity` gets that answer as a hit.
#[tokio::test]
async fn repeated_accept_encoding_lines_cannot_poison_the_identity_variant() {
    vary_poisoning_attempt("accept-encoding", "identity", "gzip").await;
}

/// Today: as with Accept-Encoding, any header named in Vary can be split over two lines.
#[tokio::test]
async fn repeated_lines_of_any_vary_header_cannot_poison_a_variant() {
    vary_poisoning_attempt("x-lang", "en", "fr").await;
}

/// An origin that reads the first line of a repeated header (Go's `Header.Get`; Node for
/// User-Agent) answers a request with an empty first line as if the header were empty; the
/// variant must then be stored for what that request sent, never for the second line alone.
///
/// Today: passes (the variant is keyed by the first line, the empty one). Guards the fix that
/// combines repeated lines: joining must keep an empty first line (RFC 9110 section 5.3 combines
/// `""` and `"x"` into `", x"`, not `"x"`), or the attacker's answer for "no User-Agent" is
/// stored as the variant of the victim's User-Agent.
#[tokio::test]
async fn an_empty_first_header_line_cannot_make_a_variant_answer_for_another_value() {
    let origin = Origin::start();
    let path = "/vary/empty-first-line";
    origin.set(
        path,
        Reply::echo_first("user-agent")
            .header("cache-control", "max-age=60")
            .header("vary", "user-agent"),
    );
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    let attack = format!(
        "GET {path} HTTP/1.1\r\nHost: v.example\r\nUser-Agent: \r\n\
         User-Agent: victim-agent/1.0\r\nConnection: close\r\n\r\n"
    );
    let attacker = raw_responses(proxy.addr, attack.as_bytes()).await;
    let victim = Client::new()
        .get_with(
            &proxy.url(path),
            &[("host", "v.example"), ("user-agent", "victim-agent/1.0")],
        )
        .await;
    assert_eq!(
        victim.text(),
        "victim-agent/1.0",
        "the victim got the answer the origin gave for an empty User-Agent ({}); the attacker \
         got {attacker:?}",
        victim.cache_status()
    );
}

/// Today: a request that joins a fetch in flight gets the leader's response when the first line
/// of each Vary header matches: the same first-line comparison as for stored variants, on the
/// coalescing path, so the poisoning works even with admission on and nothing stored.
#[tokio::test]
async fn a_request_joining_a_fetch_in_flight_gets_only_a_response_for_its_own_vary_values() {
    let origin = Origin::start();
    let path = "/vary/coalesced";
    origin.set(
        path,
        Reply::echo("accept-encoding")
            .header("cache-control", "max-age=60")
            .header("vary", "accept-encoding")
            .delay(Duration::from_millis(500)),
    );
    // Admission on: the first response is not stored, so only coalescing can share it.
    let proxy = ProxyConfig::new(&origin.url()).start();
    let addr = proxy.addr;
    let attacker = tokio::spawn(async move {
        let attack = format!(
            "GET {path} HTTP/1.1\r\nHost: v.example\r\nAccept-Encoding: identity\r\n\
             Accept-Encoding: gzip\r\nConnection: close\r\n\r\n"
        );
        // Reads patiently: a client that leaves cancels the fetch its followers wait for.
        raw_responses_within(addr, attack.as_bytes(), Duration::from_secs(3)).await
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let victim = Client::new()
        .get_with(
            &proxy.url(path),
            &[("host", "v.example"), ("accept-encoding", "identity")],
        )
        .await;
    let attacker = attacker.await.expect("attacker task");
    // RFC 9111 section 4.1: a response is reused only for a request whose Vary fields match, each
    // field's lines combined (RFC 9110 section 5.3).
    assert_eq!(
        victim.text(),
        "identity",
        "a client sending only `accept-encoding: identity` got the response fetched for \
         `identity, gzip` ({}); the attacker got {attacker:?}",
        victim.cache_status()
    );
}

/// Not an attack, found while writing these tests: a storable response with an empty body framed
/// by `Content-Length: 0` is announced `Cache-Status: ...; stored` but never stored, so every
/// request for it goes to the origin (the capture completes only on a data frame or on the end of
/// a body hyper never polls). The same empty body sent chunked is stored.
///
/// Today: fails (three requests, three origin fetches, each saying `stored`).
#[tokio::test]
async fn an_empty_response_said_to_be_stored_is_served_from_the_cache() {
    let origin = Origin::start();
    origin.set(
        "/empty/length",
        Reply::ok("").header("cache-control", "max-age=60"),
    );
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    let client = Client::new();
    let first = client.get(&proxy.url("/empty/length")).await;
    let second = client.get(&proxy.url("/empty/length")).await;
    // RFC 9211 section 2.6: `stored` means the response was stored.
    assert!(
        !first.is_stored() || second.is_hit(),
        "the first response said {:?}, the second {:?}; the origin was asked {} times",
        first.cache_status(),
        second.cache_status(),
        origin.count("/empty/length")
    );
}

// ---------------------------------------------------------------------------------------------
// 4. A response framed both ways.
// ---------------------------------------------------------------------------------------------

/// Today: hyper decodes the chunked body (96 bytes) but leaves `content-length: 4` among the
/// headers; the proxy copies it to the client, whose response is cut to 4 bytes, and stores the
/// response so that later clients get it too.
#[tokio::test]
async fn a_response_with_both_content_length_and_chunked_is_never_served_as_4_bytes() {
    let origin = Origin::start();
    let body: Vec<u8> = (0..96u8).map(|i| b'a' + i % 26).collect();
    // The origin closes after it (and says so, so that no request waits on the connection).
    let mut raw = b"HTTP/1.1 200 OK\r\ncache-control: max-age=60\r\ncontent-length: 4\r\n\
                    transfer-encoding: chunked\r\nconnection: close\r\n\r\n60\r\n"
        .to_vec();
    raw.extend_from_slice(&body);
    raw.extend_from_slice(b"\r\n0\r\n\r\n");
    origin.set("/framing/both", Reply::raw(&raw));
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    let request = b"GET /framing/both HTTP/1.1\r\nHost: f.example\r\nConnection: close\r\n\r\n";

    // RFC 9112 section 6.3: Transfer-Encoding overrides Content-Length; "such a message might
    // indicate an attempt to perform request smuggling or response splitting and ought to be
    // handled as an error", and an intermediary that forwards it MUST first remove Content-Length.
    for attempt in ["first", "second"] {
        let responses = raw_responses(proxy.addr, request).await;
        let response = match responses.as_deref() {
            Ok([one]) => one.clone(),
            other => panic!("{attempt} request: not one well-framed response: {other:?}"),
        };
        let cache_status = response.header("cache-status").unwrap_or_default();
        assert!(
            response.status == 502
                || (response.status == 200
                    && response.body == body
                    && response.header("content-length") != Some("4")),
            "{attempt} request: expected a 502 or all 96 bytes without content-length: 4, got \
             {} with {} bytes, content-length {:?} ({cache_status})",
            response.status,
            response.body.len(),
            response.header("content-length"),
        );
        assert!(
            !common::has_member(cache_status, "hit"),
            "{attempt} request: the ambiguous response was stored and served: {cache_status}"
        );
    }
    assert_eq!(
        origin.count("/framing/both"),
        2,
        "each request goes to the origin"
    );
}

// ---------------------------------------------------------------------------------------------
// 5. Unbounded variants per URL.
// ---------------------------------------------------------------------------------------------

/// Today: `cache.max_variants` does not exist, so the proxy refuses to start with it; and a key
/// keeps every variant it is given (one per User-Agent), so one URL can fill the cache.
#[tokio::test]
async fn the_variants_of_one_url_are_capped() {
    let origin = Origin::start();
    origin.set(
        "/variants",
        Reply::echo("user-agent")
            .header("cache-control", "max-age=60")
            .header("vary", "User-Agent"),
    );
    let proxy = ProxyConfig::new(&origin.url())
        .admission(false)
        .set("cache", "max_variants", "8")
        .start();
    let client = Client::new();
    let url = proxy.url("/variants");
    let agent = |i: usize| format!("agent-{i:02}");
    for i in 0..50 {
        let ua = agent(i);
        let reply = client.get_with(&url, &[("user-agent", ua.as_str())]).await;
        assert_eq!(reply.text(), ua);
    }
    assert_eq!(origin.count("/variants"), 50);
    for i in 42..50 {
        let ua = agent(i);
        let reply = client.get_with(&url, &[("user-agent", ua.as_str())]).await;
        assert!(
            reply.is_hit() && reply.text() == ua,
            "{ua}, among the 8 most recent variants, is not a hit: {} {}",
            reply.cache_status(),
            reply.text()
        );
    }
    let first = client.get_with(&url, &[("user-agent", "agent-00")]).await;
    assert!(
        !first.is_hit(),
        "the oldest of 50 variants is still stored with max_variants = 8: {}",
        first.cache_status()
    );
    assert_eq!(first.text(), "agent-00");
    assert_eq!(origin.count("/variants"), 51, "agent-00 goes to the origin");
}

// ---------------------------------------------------------------------------------------------
// 6. Idle connections.
// ---------------------------------------------------------------------------------------------

/// Today: the listener first reads the start of the connection to tell HTTP/1.1 from HTTP/2, with
/// no time limit; a connection that sends nothing never reaches the header-read timeout and stays
/// open for ever.
#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_the_header_read_timeout() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url())
        .set("server", "header_read_timeout", "\"1s\"")
        .start();
    let mut silent = TcpStream::connect(proxy.addr).await.expect("connect");
    let closed = closed_within(&mut silent, Duration::from_secs(4)).await;
    assert!(
        closed.is_some(),
        "a connection that sent nothing is still open after 4 s (header_read_timeout = 1s)"
    );
}

/// Today: `server.idle_timeout` does not exist (the proxy refuses to start with it), and nothing
/// else bounds how long a keep-alive connection may sit idle between requests.
#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let origin = Origin::start();
    origin.set("/idle", Reply::ok("idle"));
    let proxy = ProxyConfig::new(&origin.url())
        .set("server", "header_read_timeout", "\"1s\"")
        .set("server", "idle_timeout", "\"2s\"")
        .start();
    let mut stream = TcpStream::connect(proxy.addr).await.expect("connect");
    stream
        .write_all(b"GET /idle HTTP/1.1\r\nHost: i.example\r\n\r\n")
        .await
        .expect("send request");
    let bytes = read_available_bytes(&mut stream, Duration::from_millis(200)).await;
    let responses = parse_responses(&bytes, false);
    assert!(
        matches!(responses.as_deref(), Ok([one]) if one.status == 200),
        "{responses:?}"
    );
    assert_eq!(
        closed_within(&mut stream, Duration::from_millis(500)).await,
        None,
        "a keep-alive connection was closed within 0.5 s of its response"
    );
    assert!(
        closed_within(&mut stream, Duration::from_millis(4500))
            .await
            .is_some(),
        "an idle keep-alive connection is still open 5 s after its response (idle_timeout = 2s)"
    );
}

/// Today: `server.idle_timeout` does not exist; and an HTTP/2 connection that sent its preface
/// and SETTINGS, then nothing, is kept open for ever (no idle or keep-alive timeout on h2).
#[tokio::test]
async fn an_idle_h2_connection_is_closed_after_the_idle_timeout() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url())
        .set("server", "header_read_timeout", "\"1s\"")
        .set("server", "idle_timeout", "\"2s\"")
        .start();
    let mut conn = H2Conn::connect(proxy.addr).await;
    assert_eq!(
        conn.closed_within(Duration::from_millis(500)).await,
        None,
        "an h2 connection was closed within 0.5 s of its preface"
    );
    assert!(
        conn.closed_within(Duration::from_millis(4500))
            .await
            .is_some(),
        "an h2 connection that sent only its preface is open after 5 s (idle_timeout = 2s)"
    );
}

/// Today: silent connections are never closed, so `max_connections` of them lock every client out
/// for good.
#[tokio::test]
async fn silent_connections_cannot_hold_every_connection_slot() {
    let origin = Origin::start();
    origin.set("/after", Reply::ok("served"));
    let proxy = ProxyConfig::new(&origin.url())
        .set("server", "header_read_timeout", "\"1s\"")
        .set("server", "max_connections", "50")
        .start();
    let mut silent = Vec::new();
    for _ in 0..50 {
        silent.push(TcpStream::connect(proxy.addr).await.expect("connect"));
    }
    let closings = silent
        .into_iter()
        .map(|mut stream| async move { closed_within(&mut stream, Duration::from_secs(4)).await });
    let closed = futures_join_all(closings).await;
    let still_open = closed.iter().filter(|c| c.is_none()).count();
    assert_eq!(
        still_open, 0,
        "{still_open} of 50 silent connections still open after 4 s (header_read_timeout = 1s)"
    );
    let after = Client::new()
        .send(Method::GET, &proxy.url("/after"), &[])
        .await;
    assert!(
        matches!(&after, Ok(reply) if reply.status == 200 && reply.text() == "served"),
        "a normal request after the silent connections: {after:?}"
    );
}

/// Awaits every future concurrently (tokio has no join_all; each runs in its own task).
async fn futures_join_all<F>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut outputs = Vec::with_capacity(handles.len());
    for handle in handles {
        outputs.push(handle.await.expect("task"));
    }
    outputs
}

// ---------------------------------------------------------------------------------------------
// 7. Forwarding headers.
// ---------------------------------------------------------------------------------------------

/// Headers a client sends that an origin may trust for routing, URLs, logging or access control;
/// each with a value the proxy itself would never produce.
const CLIENT_FORWARDING: &[(&str, &str)] = &[
    ("x-forwarded-host", "evil.example"),
    ("x-forwarded-port", "4443"),
    ("x-forwarded-prefix", "/from-client"),
    ("x-forwarded-server", "evil-server"),
    ("x-host", "evil-x-host.example"),
    ("x-original-url", "/admin/from-client"),
    ("x-rewrite-url", "/admin/rewritten-by-client"),
    ("x-original-host", "evil-original.example"),
    ("x-real-ip", "203.0.113.9"),
    ("forwarded", "for=203.0.113.7;host=evil.example;proto=https"),
];

/// Sends a request carrying every client forwarding header, and two X-Forwarded-For lines.
async fn forwarding_request(proxy: &common::ProxyProcess, path: &str) -> Result<u16, String> {
    let mut request = format!(
        "GET {path} HTTP/1.1\r\nHost: f.example\r\nX-Forwarded-For: 198.51.100.1\r\n\
         X-Forwarded-For: 198.51.100.2, 198.51.100.3\r\nX-Forwarded-Proto: https\r\n"
    );
    for (name, value) in CLIENT_FORWARDING {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("Connection: close\r\n\r\n");
    raw_status(proxy.addr, request.as_bytes()).await
}

/// Today: X-Forwarded-For keeps only the first client line (`198.51.100.1, 127.0.0.1`), no
/// X-Forwarded-Proto is set (the client's `https` passes), and every other forwarding header
/// passes untouched, so a client can make the origin believe any host, port, prefix, URL or IP.
#[tokio::test]
async fn client_forwarding_headers_are_replaced_or_dropped() {
    let origin = Origin::start();
    origin.set("/forwarding", Reply::ok("ok"));
    let proxy = ProxyConfig::new(&origin.url()).start();
    let status = forwarding_request(&proxy, "/forwarding").await;
    assert_eq!(status, Ok(200));
    let received = origin.received("/forwarding");
    let request = received.first().expect("the origin got the request");
    let mut failures = Vec::new();
    let xff = request.combined("x-forwarded-for");
    if xff.as_deref() != Some("198.51.100.1, 198.51.100.2, 198.51.100.3, 127.0.0.1") {
        failures.push(format!(
            "x-forwarded-for: {xff:?}, expected every client line joined, then 127.0.0.1"
        ));
    }
    let proto = request.combined("x-forwarded-proto");
    if proto.as_deref() != Some("http") {
        failures.push(format!(
            "x-forwarded-proto: {proto:?}, expected \"http\" (the client came over http)"
        ));
    }
    for (name, value) in CLIENT_FORWARDING {
        if let Some(got) = request.combined(name).filter(|got| got.contains(value)) {
            failures.push(format!(
                "{name}: the client's value reached the origin: {got:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Fields beyond the X-Forwarded family that common frameworks and libraries read for the client
/// address or the scheme: Node's request-ip (x-client-ip first, then cf-connecting-ip,
/// fastly-client-ip, true-client-ip, x-cluster-client-ip, x-forwarded, forwarded-for), Rack
/// (x-forwarded-ssl, x-forwarded-scheme, x-url-scheme), IIS/OWA (front-end-https).
const CLIENT_ADDRESS_AND_SCHEME: &[(&str, &str)] = &[
    ("x-client-ip", "203.0.113.21"),
    ("true-client-ip", "203.0.113.22"),
    ("cf-connecting-ip", "203.0.113.23"),
    ("fastly-client-ip", "203.0.113.24"),
    ("x-cluster-client-ip", "203.0.113.25"),
    ("x-forwarded", "for=203.0.113.26"),
    ("forwarded-for", "203.0.113.27"),
    ("client-ip", "203.0.113.28"),
    ("x-forwarded-ssl", "on"),
    ("x-forwarded-scheme", "https"),
    ("x-url-scheme", "https"),
    ("front-end-https", "on"),
];

/// Today: every one of these passes untouched, so dropping X-Forwarded-Host and setting
/// X-Forwarded-For and X-Forwarded-Proto is not enough: an Express app using request-ip reads
/// the client's `X-Client-IP` before X-Forwarded-For, and Rack believes `X-Forwarded-Ssl: on`.
#[tokio::test]
async fn client_address_and_scheme_headers_that_frameworks_trust_are_dropped() {
    let origin = Origin::start();
    origin.set("/forwarding/more", Reply::ok("ok"));
    let proxy = ProxyConfig::new(&origin.url()).start();
    let mut request = "GET /forwarding/more HTTP/1.1\r\nHost: f.example\r\n".to_string();
    for (name, value) in CLIENT_ADDRESS_AND_SCHEME {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("Connection: close\r\n\r\n");
    assert_eq!(raw_status(proxy.addr, request.as_bytes()).await, Ok(200));
    let received = origin.received("/forwarding/more");
    let forwarded = received.first().expect("the origin got the request");
    let passed: Vec<String> = CLIENT_ADDRESS_AND_SCHEME
        .iter()
        .filter_map(|(name, value)| {
            forwarded
                .combined(name)
                .filter(|got| got.contains(value))
                .map(|got| format!("{name}: {got}"))
        })
        .collect();
    assert!(
        passed.is_empty(),
        "client-sent address or scheme fields reached the origin: {passed:?}"
    );
}

/// Today: `origin.trusted_forwarding_headers` does not exist, so the proxy refuses to start with
/// it.
#[tokio::test]
async fn a_trusted_forwarding_header_passes_unchanged_and_only_it() {
    let origin = Origin::start();
    origin.set("/forwarding", Reply::ok("ok"));
    let proxy = ProxyConfig::new(&origin.url())
        .set(
            "origin",
            "trusted_forwarding_headers",
            "[\"x-forwarded-host\"]",
        )
        .start();
    let status = forwarding_request(&proxy, "/forwarding").await;
    assert_eq!(status, Ok(200));
    let received = origin.received("/forwarding");
    let request = received.first().expect("the origin got the request");
    let mut failures = Vec::new();
    let trusted = request.combined("x-forwarded-host");
    if trusted.as_deref() != Some("evil.example") {
        failures.push(format!(
            "x-forwarded-host is trusted but arrived as {trusted:?}, expected \"evil.example\""
        ));
    }
    for (name, value) in &CLIENT_FORWARDING[1..] {
        if let Some(got) = request.combined(name).filter(|got| got.contains(value)) {
            failures.push(format!(
                "{name}: the client's value reached the origin: {got:?}"
            ));
        }
    }
    let proto = request.combined("x-forwarded-proto");
    if proto.as_deref() != Some("http") {
        failures.push(format!("x-forwarded-proto: {proto:?}, expected \"http\""));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
