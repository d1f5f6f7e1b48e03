//! End to end: clients that go away in the middle of a response leave nothing behind: no open
//! client or origin connections, no descriptors, and no half-stored object.

use crate::common;

use std::time::Duration;

use common::{Client, Origin, ProxyConfig, Reply, metric};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CACHEABLE: &str = "public, max-age=60";

async fn request_and_vanish(addr: std::net::SocketAddr, path: &str) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: disconnect.test\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut buffer = vec![0u8; 2048];
    // Read the head and the first bytes of the body, then drop the connection.
    let _ = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buffer)).await;
}

#[tokio::test]
async fn clients_that_disconnect_mid_response_leave_no_connections_or_descriptors_behind() {
    let origin = Origin::start();
    let big = "x".repeat(4 << 20);
    origin.set("/big", Reply::ok(&big).header("cache-control", CACHEABLE));
    let slow = "y".repeat(100);
    origin.set(
        "/slow",
        Reply::ok(&slow)
            .header("cache-control", CACHEABLE)
            .paced(Duration::from_millis(20)),
    );
    origin.set(
        "/warm",
        Reply::ok("warm").header("cache-control", CACHEABLE),
    );
    let proxy = ProxyConfig::new(&origin.url())
        .set("origin", "idle_timeout", "\"5s\"")
        .start();
    let client = Client::new();
    assert_eq!(client.get(&proxy.url("/warm")).await.text(), "warm");
    let baseline = proxy.open_fds().expect("proxy fds");

    for round in 0..20 {
        // The same paths again and again: the first is a first-hit, later ones are admitted and
        // captured for the store, so both kinds of abandoned stream are exercised.
        let path = if round % 2 == 0 { "/big" } else { "/slow" };
        request_and_vanish(proxy.addr, path).await;
    }

    let serving_threads = std::thread::available_parallelism().map_or(1, usize::from);
    let mut settled = false;
    let mut last = (f64::NAN, 0);
    for _ in 0..100 {
        let scrape = client.get(&proxy.admin_url("/metrics")).await.text();
        let open = metric(&scrape, "bloomgate_connections_open");
        let fds = proxy.open_fds().expect("proxy fds");
        last = (open, fds);
        // Each serving thread's pool may keep one idle origin connection (the requests came one at
        // a time), and the admin scrape has one.
        if open == 0.0 && fds <= baseline + serving_threads + 1 {
            settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        settled,
        "after the clients left: connections_open {}, fds {} (baseline {baseline})",
        last.0, last.1
    );

    // Nothing abandoned halfway was stored: the next complete fetch is not a hit.
    let big_reply = client.get(&proxy.url("/big")).await;
    assert!(!big_reply.is_hit(), "{}", big_reply.cache_status());
    assert_eq!(big_reply.body.len(), big.len());
}
