//! End to end: interim (1xx) responses from the origin. hyper's client reads them and goes on to
//! the final response; hyper's server has no way to send one before the final response, so on it
//! the proxy drops them: the client gets the final response alone, and nothing of a 1xx is stored.
//! (The native HTTP/1.1 server relays them: `http1.rs`.)

use crate::common;

use std::time::Duration;

use common::{Client, Origin, ProxyConfig, Reply, has_member, raw_exchange, raw_status};

/// A 1xx head, then a cacheable 200 whose body is `hello`; the origin closes the connection after
/// a raw reply, and says so, so that the proxy does not pool it.
fn interim_then_ok(interim: &str, final_headers: &str) -> Reply {
    Reply::raw(
        format!(
            "{interim}\r\n\r\nHTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n{final_headers}\
             Connection: close\r\nContent-Length: 5\r\n\r\nhello"
        )
        .as_bytes(),
    )
}

#[tokio::test]
async fn early_hints_from_the_origin_are_dropped_and_never_stored_into_the_final_response() {
    let origin = Origin::start();
    let path = "/interim/early-hints";
    origin.set(
        path,
        interim_then_ok(
            "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload",
            "",
        ),
    );
    let proxy = ProxyConfig::new(&origin.url())
        .admission(false)
        .set("server", "http1", "\"hyper\"")
        .start();
    let client = Client::new();

    let first = client.get(&proxy.url(path)).await;
    assert_eq!(first.status, http::StatusCode::OK);
    assert_eq!(first.text(), "hello");
    assert!(
        has_member(first.cache_status(), "fwd=miss"),
        "{}",
        first.cache_status()
    );
    assert!(first.is_stored(), "{}", first.cache_status());
    assert_eq!(first.header("link"), None, "the 103's Link reached the 200");

    let second = client.get(&proxy.url(path)).await;
    assert!(second.is_hit(), "{}", second.cache_status());
    assert_eq!(second.text(), "hello");
    assert_eq!(
        second.header("link"),
        None,
        "the 103's Link was stored with the 200"
    );
    assert_eq!(origin.count(path), 1);

    // On the wire (another Host, so a miss fetched again), an HTTP/1.1 client sees the final
    // response first: no 1xx is passed on.
    let raw = raw_exchange(
        proxy.addr,
        format!("GET {path} HTTP/1.1\r\nHost: interim.test\r\nConnection: close\r\n\r\n")
            .as_bytes(),
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(raw_status(&raw), Some(200), "{raw}");
    assert!(!raw.contains("103"), "{raw}");
}

#[tokio::test]
async fn a_link_the_final_response_carries_itself_is_kept() {
    let origin = Origin::start();
    let path = "/interim/early-hints-and-link";
    origin.set(
        path,
        interim_then_ok(
            "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload",
            "Link: </b.js>; rel=preload\r\n",
        ),
    );
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    let client = Client::new();
    for _ in 0..2 {
        let reply = client.get(&proxy.url(path)).await;
        assert_eq!(reply.text(), "hello");
        assert_eq!(reply.header("link"), Some("</b.js>; rel=preload"));
    }
}

#[tokio::test]
async fn a_100_continue_or_102_processing_on_a_get_is_skipped_for_the_final_response() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    let client = Client::new();
    for (path, interim) in [
        ("/interim/continue", "HTTP/1.1 100 Continue"),
        ("/interim/processing", "HTTP/1.1 102 Processing"),
    ] {
        origin.set(path, interim_then_ok(interim, ""));
        let first = client.get(&proxy.url(path)).await;
        assert_eq!(first.status, http::StatusCode::OK, "{path}");
        assert_eq!(first.text(), "hello", "{path}");
        assert!(first.is_stored(), "{path}: {}", first.cache_status());
        let second = client.get(&proxy.url(path)).await;
        assert!(second.is_hit(), "{path}: {}", second.cache_status());
        assert_eq!(second.text(), "hello", "{path}");
    }
}
