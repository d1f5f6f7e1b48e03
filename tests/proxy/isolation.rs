//! End to end: cache poisoning and isolation. Keys cannot be confused by Host tricks or an
//! absolute-form target, and hop-by-hop headers are stripped both ways.

use crate::common;

use std::time::Duration;

use common::{Client, Origin, ProxyConfig, Reply, raw_exchange, raw_status};

/// A storable object: chunked, so that storing it does not depend on how the body is framed.
fn stored_object(body: &str) -> Reply {
    Reply::ok(body)
        .header("cache-control", "max-age=60")
        .chunked()
}

#[tokio::test]
async fn objects_of_different_hosts_are_kept_apart() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    let path = "/iso/page";
    origin.set(path, stored_object("site a"));
    let client = Client::new();
    let a = client
        .get_with(&proxy.url(path), &[("host", "a.example")])
        .await;
    assert!(a.is_stored(), "{}", a.cache_status());
    let a_again = client
        .get_with(&proxy.url(path), &[("host", "A.Example")])
        .await;
    assert!(
        a_again.is_hit(),
        "host is case-insensitive: {}",
        a_again.cache_status()
    );
    let b = client
        .get_with(&proxy.url(path), &[("host", "b.example")])
        .await;
    assert!(
        !b.is_hit(),
        "b.example got a.example's object: {}",
        b.cache_status()
    );
    assert_eq!(origin.count(path), 2);
}

#[tokio::test]
async fn an_absolute_form_target_cannot_store_another_hosts_response_under_its_key() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url())
        .admission(false)
        .set("origin", "preserve_host", "true")
        .start();
    let path = "/iso/absolute";
    origin.set(path, stored_object("whatever the origin serves"));
    let attack =
        format!("GET http://victim.example{path} HTTP/1.1\r\nHost: attacker.example\r\n\r\n");
    let answer = raw_exchange(proxy.addr, attack.as_bytes(), Duration::from_millis(300)).await;
    let received = origin.received(path);
    if raw_status(&answer) == Some(200) && !received.is_empty() {
        let origin_host = received[0].header("host").unwrap_or_default().to_string();
        let client = Client::new();
        let victim = client
            .get_with(&proxy.url(path), &[("host", "victim.example")])
            .await;
        assert!(
            origin_host == "victim.example" || !victim.is_hit(),
            "the origin answered for Host {origin_host:?}, and that answer is served from the \
             cache to victim.example: {}",
            victim.cache_status()
        );
    }
}

#[tokio::test]
async fn hop_by_hop_headers_are_stripped_both_ways() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    let path = "/iso/hop";
    origin.set(
        path,
        stored_object("hop")
            .header("connection", "x-origin-hop")
            .header("x-origin-hop", "1")
            .header("keep-alive", "timeout=5")
            .header("x-end-to-end", "kept"),
    );
    let client = Client::new();
    let first = client
        .get_with(
            &proxy.url(path),
            &[
                ("connection", "x-client-hop"),
                ("x-client-hop", "1"),
                ("proxy-authorization", "Basic c2VjcmV0"),
                ("te", "trailers"),
            ],
        )
        .await;
    let received = origin.received(path);
    assert_eq!(received.len(), 1);
    for name in ["x-client-hop", "proxy-authorization", "te"] {
        assert_eq!(received[0].header(name), None, "{name} reached the origin");
    }
    let hit = client.get(&proxy.url(path)).await;
    assert!(hit.is_hit(), "{}", hit.cache_status());
    for response in [&first, &hit] {
        assert_eq!(
            response.header("x-origin-hop"),
            None,
            "x-origin-hop reached the client"
        );
        assert_eq!(response.header("keep-alive"), None);
        assert_eq!(response.header("x-end-to-end"), Some("kept"));
    }
}
