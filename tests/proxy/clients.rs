//! End to end: hostile and unusual clients (slowloris, connection limit), and requests the cache
//! passes through or invalidates on (unsafe methods, objects too large to store). Ranges have
//! their own file, `ranges.rs`.

use crate::common;

use std::time::Duration;

use common::h2raw::{CANCEL, H2Conn, H2Outcome, SETTINGS_INITIAL_WINDOW_SIZE};
use common::{Client, Origin, ProxyConfig, Reply};
use http::{Method, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A storable object: chunked, so that storing it does not depend on how the body is framed.
fn stored_object(body: &str) -> Reply {
    Reply::ok(body)
        .header("cache-control", "max-age=60")
        .chunked()
}

#[tokio::test]
async fn a_client_trickling_its_headers_is_disconnected() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url())
        .set("server", "header_read_timeout", "\"1s\"")
        .start();
    let mut slow = TcpStream::connect(proxy.addr).await.expect("connect");
    slow.write_all(b"GET /slowloris HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("write");
    let mut received = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        let mut chunk = [0u8; 1024];
        loop {
            match slow.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "the connection was still open 5 s after a 1 s header read timeout"
    );
    assert_eq!(origin.count("/slowloris"), 0);
}

#[tokio::test]
async fn connections_beyond_the_limit_are_refused_without_harming_served_clients() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url())
        .set("server", "max_connections", "2")
        .start();
    origin.set("/limit", Reply::ok("served"));
    let request = b"GET /limit HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut first = TcpStream::connect(proxy.addr).await.expect("connect");
    let mut second = TcpStream::connect(proxy.addr).await.expect("connect");
    for stream in [&mut first, &mut second] {
        stream.write_all(request).await.expect("write");
        let answer = common::read_available(stream, Duration::from_millis(300)).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    let mut third = TcpStream::connect(proxy.addr).await.expect("connect");
    let _ = third.write_all(request).await;
    let refused = common::read_available(&mut third, Duration::from_millis(500)).await;
    assert!(
        refused.is_empty(),
        "a third connection was served: {refused}"
    );
    first.write_all(request).await.expect("write");
    let again = common::read_available(&mut first, Duration::from_millis(300)).await;
    assert!(
        again.starts_with("HTTP/1.1 200"),
        "a served client was harmed: {again}"
    );
}

#[tokio::test]
async fn a_successful_post_invalidates_the_stored_object() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    let path = "/unsafe/object";
    origin.set(path, stored_object("before"));
    let client = Client::new();
    assert!(client.get(&proxy.url(path)).await.is_stored());
    let post = client
        .send(Method::POST, &proxy.url(path), &[])
        .await
        .expect("POST");
    assert_eq!(post.status, StatusCode::OK);
    let after = client.get(&proxy.url(path)).await;
    assert!(
        !after.is_hit(),
        "stale object after POST: {}",
        after.cache_status()
    );
    assert_eq!(origin.count(path), 3);
}

#[tokio::test]
async fn an_object_larger_than_the_largest_object_is_streamed_whole_and_not_stored() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url())
        .admission(false)
        .set("cache", "max_object_bytes", "\"1KiB\"")
        .start();
    let client = Client::new();
    let body = "y".repeat(4096);
    for (path, reply) in [
        (
            "/large/sized",
            Reply::ok(&body).header("cache-control", "max-age=60"),
        ),
        ("/large/chunked", stored_object(&body)),
    ] {
        origin.set(path, reply);
        let first = client.get(&proxy.url(path)).await;
        assert_eq!(first.body.len(), body.len(), "{path}");
        let second = client.get(&proxy.url(path)).await;
        assert_eq!(second.body.len(), body.len(), "{path}");
        assert!(!second.is_hit(), "{path}: {}", second.cache_status());
        assert_eq!(origin.count(path), 2, "{path}");
    }
}

#[tokio::test]
async fn cache_status_does_not_claim_a_too_large_object_was_stored() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url())
        .admission(false)
        .set("cache", "max_object_bytes", "\"1KiB\"")
        .start();
    let client = Client::new();
    let path = "/large/status";
    origin.set(path, stored_object(&"z".repeat(4096)));
    let response = client.get(&proxy.url(path)).await;
    assert!(!response.is_stored(), "{}", response.cache_status());
}

/// Fails without `server.send_timeout`: a client that requests a large response and never reads it
/// held its connection (and the origin connection feeding it) for as long as it stayed.
#[tokio::test]
async fn a_client_that_stops_reading_is_disconnected_after_the_send_timeout() {
    let origin = Origin::start();
    let path = "/clients/unread";
    origin.set(
        path,
        Reply {
            body: vec![b'x'; 32 << 20],
            ..Reply::ok("")
        }
        .header("cache-control", "no-store"),
    );
    let proxy = ProxyConfig::new(&origin.url())
        .set("server", "send_timeout", "\"1s\"")
        .set("origin", "idle_timeout", "\"30s\"")
        .start();
    let mut stalled = TcpStream::connect(proxy.addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: clients.test\r\n\r\n");
    stalled
        .write_all(request.as_bytes())
        .await
        .expect("send request");
    let client = Client::new();
    let open = || async {
        let scrape = client.get(&proxy.admin_url("/metrics")).await.text();
        common::metric(&scrape, "bloomgate_connections_open")
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(open().await, 1.0, "the reading-nothing client is connected");
    let mut closed = false;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if open().await == 0.0 {
            closed = true;
            break;
        }
    }
    assert!(
        closed,
        "a client that read nothing was still connected 6 s later (send_timeout 1 s)"
    );
    drop(stalled);
}

/// A body well past the 65,535 bytes an HTTP/2 client gets without opening its window.
const LARGE: usize = 4 << 20;

/// An HTTP/2 connection whose client takes no byte of any response body (its streams' windows
/// are 0), with one GET sent on stream 1.
async fn h2_get_without_window(addr: std::net::SocketAddr, path: &str) -> H2Conn {
    let mut conn = H2Conn::connect_with_settings(addr, &[(SETTINGS_INITIAL_WINDOW_SIZE, 0)]).await;
    conn.send_headers(
        1,
        &[
            (":method", "GET"),
            (":scheme", "http"),
            (":authority", "stall.test"),
            (":path", path),
        ],
        true,
    )
    .await;
    conn
}

async fn send_timeouts(client: &Client, proxy: &common::ProxyProcess, scope: &str) -> f64 {
    let scrape = client.get(&proxy.admin_url("/metrics")).await.text();
    common::required_metric(
        &scrape,
        &format!("bloomgate_client_send_timeouts_total{{scope=\"{scope}\"}}"),
    )
}

/// Fails without `server.stream_send_timeout`: hyper polls a body only when its stream has
/// flow-control capacity, so an h2 client that never opened its window wrote nothing and blocked
/// nothing, and held the stream, the miss's origin connection and the hit's body for ever.
#[tokio::test]
async fn an_h2_stream_the_client_never_opens_is_reset_after_the_stream_send_timeout() {
    let origin = Origin::start();
    let body = vec![b'h'; LARGE];
    origin.set(
        "/stall/hit",
        Reply::bytes(&body).header("cache-control", "max-age=60"),
    );
    origin.set(
        "/stall/miss",
        Reply::bytes(&body).header("cache-control", "no-store"),
    );
    origin.set("/stall/other", Reply::ok("served"));
    let proxy = ProxyConfig::new(&origin.url())
        .admission(false)
        .set("cache", "max_object_bytes", "\"8MiB\"")
        .set("server", "stream_send_timeout", "\"1s\"")
        .set("server", "send_timeout", "\"30s\"")
        .set("origin", "idle_timeout", "\"30s\"")
        .start();
    let client = Client::new();
    assert!(client.get(&proxy.url("/stall/hit")).await.is_stored());
    let before = send_timeouts(&client, &proxy, "stream").await;

    let started = std::time::Instant::now();
    let mut hit = h2_get_without_window(proxy.addr, "/stall/hit").await;
    let mut miss = h2_get_without_window(proxy.addr, "/stall/miss").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let stalled_fds = proxy.open_fds().expect("proxy fds");
    let other = client.get(&proxy.url("/stall/other")).await;
    assert_eq!(
        (other.status, other.text().as_str()),
        (StatusCode::OK, "served"),
        "another client was not served during the stall"
    );
    let (hit_outcome, miss_outcome) = tokio::join!(
        hit.outcome(1, Duration::from_secs(6)),
        miss.outcome(1, Duration::from_secs(6))
    );
    let waited = started.elapsed();
    assert_eq!(hit_outcome, H2Outcome::Reset(CANCEL), "the stalled hit");
    assert_eq!(miss_outcome, H2Outcome::Reset(CANCEL), "the stalled miss");
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(4),
        "reset after {waited:?} with stream_send_timeout 1 s"
    );
    // Only the streams: the connections stay open for other requests.
    assert_eq!(hit.closed_within(Duration::from_millis(300)).await, None);
    // The miss's origin connection was released with its stream (the connections to the
    // proxy are still open, and nothing else came or went).
    let mut released = false;
    for _ in 0..20 {
        if proxy.open_fds().expect("proxy fds") < stalled_fds {
            released = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        released,
        "the stalled miss still held its origin connection"
    );
    assert!(send_timeouts(&client, &proxy, "stream").await >= before + 2.0);
}

/// Fails without the connection clock of `server.send_timeout`: an h2 connection that owes its
/// client a body it never takes writes nothing and blocks no write, so the socket-write timeout
/// never fired and the connection stayed open for ever.
#[tokio::test]
async fn an_h2_connection_that_takes_no_byte_is_closed_after_the_send_timeout() {
    let origin = Origin::start();
    origin.set(
        "/stall/conn",
        Reply::bytes(&vec![b'c'; LARGE]).header("cache-control", "no-store"),
    );
    origin.set("/stall/conn-other", Reply::ok("served"));
    let proxy = ProxyConfig::new(&origin.url())
        .set("server", "send_timeout", "\"1s\"")
        .set("server", "stream_send_timeout", "\"30s\"")
        .set("origin", "idle_timeout", "\"30s\"")
        .start();
    let client = Client::new();
    let before = send_timeouts(&client, &proxy, "connection").await;
    let mut stalled = h2_get_without_window(proxy.addr, "/stall/conn").await;
    let other = client.get(&proxy.url("/stall/conn-other")).await;
    assert_eq!(other.text(), "served", "another client was not served");
    let closed = stalled.closed_within(Duration::from_secs(6)).await;
    let closed = closed.expect("the connection was still open 6 s after a 1 s send_timeout");
    assert!(
        closed >= Duration::from_millis(800),
        "closed after {closed:?}"
    );
    assert!(send_timeouts(&client, &proxy, "connection").await >= before + 1.0);
}

#[test]
fn a_second_proxy_on_the_same_address_is_refused_instead_of_sharing_it() {
    let origin = Origin::start();
    let first = ProxyConfig::new(&origin.url()).start();
    let dir = common::TempDir::new("second-proxy");
    let config = dir.join("bloomgate.toml");
    let text = ProxyConfig::new(&origin.url())
        .set("server", "listen", &format!("\"{}\"", first.addr))
        .text();
    std::fs::write(&config, text).expect("write config");
    let mut second = std::process::Command::new(env!("CARGO_BIN_EXE_bloomgate"))
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run bloomgate");
    // A second proxy that starts serves until stopped: give it a moment, then stop it and fail.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = second.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = second.kill();
            let _ = second.wait();
            panic!("a second proxy started and shares {}", first.addr);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().expect("stderr"), &mut stderr)
        .expect("read stderr");
    assert!(
        stderr.contains(&format!("cannot listen on {}", first.addr)),
        "{stderr}"
    );
}
