//! End to end: faults from the origin and bad input from clients. What the client gets, what is
//! counted, and that nothing broken is ever stored.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{
    Client, Fault, Origin, ProxyConfig, RefusingPort, Reply, has_member, metric, over_segments,
    raw_exchange, raw_status, read_available,
};
use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn scrape(client: &Client, proxy: &common::ProxyProcess) -> String {
    client.get(&proxy.admin_url("/metrics")).await.text()
}

#[tokio::test]
async fn a_refusing_origin_gives_502_is_counted_and_the_proxy_keeps_serving() {
    let refusing = RefusingPort::new();
    let proxy = ProxyConfig::new(&refusing.url()).start();
    let client = Client::new();
    for attempt in 1..=3 {
        let response = client.get(&proxy.url(&format!("/refused/{attempt}"))).await;
        assert_eq!(response.status, StatusCode::BAD_GATEWAY);
        assert!(
            response.body.len() < 100,
            "a short body: {:?}",
            response.text()
        );
        assert!(
            has_member(response.cache_status(), "detail=origin-error"),
            "{}",
            response.cache_status()
        );
    }
    let scrape = scrape(&client, &proxy).await;
    assert_eq!(
        metric(
            &scrape,
            "bloomgate_origin_requests_total{outcome=\"connect_error\"}"
        ),
        3.0
    );
    // Answered with bloomgate's own 502: errors, not misses.
    assert_eq!(
        metric(&scrape, "bloomgate_requests_total{cache_status=\"error\"}"),
        3.0
    );
    assert_eq!(
        metric(&scrape, "bloomgate_requests_total{cache_status=\"miss\"}"),
        0.0
    );
    let health = client.get(&proxy.admin_url("/healthz")).await;
    assert_eq!(health.status, StatusCode::OK);
}

#[tokio::test]
async fn a_silent_origin_gives_504_after_the_first_byte_timeout() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url()).start();
    origin.set("/silent", Reply::ok("never sent").fault(Fault::Silence));
    let client = Client::new();
    let started = std::time::Instant::now();
    let response = client.get(&proxy.url("/silent")).await;
    assert_eq!(response.status, StatusCode::GATEWAY_TIMEOUT);
    assert!(
        has_member(response.cache_status(), "detail=origin-timeout"),
        "{}",
        response.cache_status()
    );
    // first_byte_timeout is 1 s; the client gives up at 10 s.
    assert!(started.elapsed() < Duration::from_secs(8));
    let scrape = scrape(&client, &proxy).await;
    assert_eq!(
        metric(
            &scrape,
            "bloomgate_origin_requests_total{outcome=\"timeout\"}"
        ),
        1.0
    );
}

/// Requests a faulty object several times: each response must fail at the client, each request
/// must reach the origin, and nothing may be written to the cache.
async fn faulty_body_is_never_stored(path: &str, fault: Fault) {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url()).start();
    let body = "0123456789abcdef".repeat(4096);
    origin.set(
        path,
        Reply::ok(&body)
            .header("cache-control", "max-age=60")
            .fault(fault),
    );
    let client = Client::new();
    for attempt in 1..=4 {
        match client.send(http::Method::GET, &proxy.url(path), &[]).await {
            Err(_) => {}
            Ok(response) => {
                assert!(
                    response.body.len() < body.len() && response.status == StatusCode::OK
                        || response.status.is_server_error(),
                    "attempt {attempt}: a broken origin body reached the client whole: {} {}",
                    response.status,
                    response.cache_status()
                );
                assert!(
                    !response.is_hit(),
                    "attempt {attempt}: {}",
                    response.cache_status()
                );
            }
        }
        assert_eq!(
            origin.count(path),
            attempt,
            "attempt {attempt} was not fetched"
        );
    }
    let scrape = scrape(&client, &proxy).await;
    assert_eq!(over_segments(&scrape, "bloomgate_cache_writes_total"), 0.0);
    assert_eq!(over_segments(&scrape, "bloomgate_cache_entries"), 0.0);

    // The proxy still serves a good object after all that.
    origin.set(
        "/good",
        Reply::ok("fine").header("cache-control", "max-age=60"),
    );
    assert_eq!(client.get(&proxy.url("/good")).await.text(), "fine");
}

#[tokio::test]
async fn a_body_reset_midway_is_aborted_and_never_stored() {
    faulty_body_is_never_stored("/fault/reset", Fault::ResetMidBody).await;
}

#[tokio::test]
async fn a_body_shorter_than_its_content_length_is_aborted_and_never_stored() {
    faulty_body_is_never_stored("/fault/short", Fault::ShortBody).await;
}

#[tokio::test]
async fn a_trickling_body_hits_the_idle_timeout_and_is_never_stored() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url()).start();
    let path = "/fault/trickle";
    origin.set(
        path,
        Reply::ok("slow body")
            .header("cache-control", "max-age=60")
            .paced(Duration::from_millis(1500)),
    );
    let client = Client::new();
    for attempt in 1..=2 {
        let result = client.send(http::Method::GET, &proxy.url(path), &[]).await;
        assert!(result.is_err(), "attempt {attempt}: {result:?}");
        assert_eq!(origin.count(path), attempt);
    }
    let scrape = scrape(&client, &proxy).await;
    assert_eq!(over_segments(&scrape, "bloomgate_cache_writes_total"), 0.0);
    assert!(
        metric(
            &scrape,
            "bloomgate_origin_requests_total{outcome=\"body_error\"}"
        ) >= 2.0
    );
}

#[tokio::test]
async fn an_invalid_chunked_body_is_aborted_and_never_stored() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url()).start();
    let path = "/fault/chunked";
    origin.set(
        path,
        Reply::ok("")
            .header("cache-control", "max-age=60")
            .fault(Fault::BadChunked),
    );
    let client = Client::new();
    for attempt in 1..=3 {
        if let Ok(response) = client.send(http::Method::GET, &proxy.url(path), &[]).await {
            assert!(
                response.status.is_server_error(),
                "attempt {attempt}: {} {:?}",
                response.status,
                response.text()
            );
        }
        assert_eq!(origin.count(path), attempt);
    }
    let scrape = scrape(&client, &proxy).await;
    assert_eq!(over_segments(&scrape, "bloomgate_cache_writes_total"), 0.0);
}

/// Opens a keep-alive connection and checks that it answers one request.
async fn keep_alive_request(stream: &mut TcpStream, path: &str) -> String {
    let request = format!("GET {path} HTTP/1.1\r\nHost: test.local\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    read_available(stream, Duration::from_millis(300)).await
}

#[tokio::test]
async fn bad_requests_get_400_or_431_without_disturbing_other_connections() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url())
        .set("server", "max_header_bytes", "\"8KiB\"")
        .start();
    origin.set(
        "/steady",
        Reply::ok("steady").header("cache-control", "max-age=60"),
    );
    let mut steady = TcpStream::connect(proxy.addr).await.expect("connect");
    let first = keep_alive_request(&mut steady, "/steady").await;
    assert_eq!(raw_status(&first), Some(200), "{first}");

    let wait = Duration::from_millis(500);
    let garbage = raw_exchange(proxy.addr, b"THIS IS NOT HTTP\r\n\r\n", wait).await;
    assert_eq!(raw_status(&garbage), Some(400), "garbage: {garbage:?}");

    let bad_line = raw_exchange(proxy.addr, b"GET /a b c HTTP/1.1\r\nHost: x\r\n\r\n", wait).await;
    assert_eq!(
        raw_status(&bad_line),
        Some(400),
        "bad request line: {bad_line:?}"
    );

    let no_host = raw_exchange(proxy.addr, b"GET /steady HTTP/1.1\r\n\r\n", wait).await;
    assert_eq!(raw_status(&no_host), Some(400), "no Host: {no_host:?}");

    let big = format!(
        "GET /steady HTTP/1.1\r\nHost: test.local\r\nX-Big: {}\r\n\r\n",
        "a".repeat(16 * 1024)
    );
    let oversized = raw_exchange(proxy.addr, big.as_bytes(), wait).await;
    assert_eq!(
        raw_status(&oversized),
        Some(431),
        "oversized: {oversized:?}"
    );

    let second = keep_alive_request(&mut steady, "/steady").await;
    assert_eq!(
        raw_status(&second),
        Some(200),
        "the steady connection: {second}"
    );
    assert!(second.contains("steady"));
}

#[tokio::test]
async fn smuggling_attempts_are_refused() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url()).start();
    let wait = Duration::from_millis(500);
    let attempts: [(&str, &[u8]); 3] = [
        (
            "duplicate Content-Length",
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
    ];
    for (what, request) in attempts {
        let answer = raw_exchange(proxy.addr, request, wait).await;
        assert_eq!(raw_status(&answer), Some(400), "{what}: {answer:?}");
    }
    assert_eq!(
        origin.count("/smuggle"),
        0,
        "a smuggling attempt reached the origin"
    );
}

/// An origin that answers the first request on each connection (keep-alive, no `Connection:
/// close`), then reads the next request and closes without answering: the race every keep-alive
/// client has with an origin that closes idle connections. Returns its address and a count of
/// the requests it answered.
async fn origin_closing_after_one_answer() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let answered = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&answered);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let counter = Arc::clone(&counter);
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 8192];
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buffer[..n]),
                    }
                }
                let reply =
                    b"HTTP/1.1 200 OK\r\ncache-control: no-store\r\ncontent-length: 2\r\n\r\nok";
                if stream.write_all(reply).await.is_err() {
                    return;
                }
                counter.fetch_add(1, Ordering::SeqCst);
                // The next request arrives; the origin closes instead of answering it.
                let _ = stream.read(&mut buffer).await;
            });
        }
    });
    (addr, answered)
}

/// Fails without the retry: the second GET went out on the pooled connection the origin was
/// closing, and its client got a 502.
#[tokio::test]
async fn a_get_on_a_pooled_connection_the_origin_closed_is_retried_once() {
    let (addr, answered) = origin_closing_after_one_answer().await;
    let proxy = ProxyConfig::new(&format!("http://{addr}")).start();
    let client = Client::new();
    for round in 0..5 {
        let reply = client.get(&proxy.url("/faults/closing")).await;
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "request {round}: {} ({})",
            reply.text(),
            reply.cache_status()
        );
    }
    assert_eq!(answered.load(Ordering::SeqCst), 5);
}
