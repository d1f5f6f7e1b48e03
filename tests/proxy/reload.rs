//! End to end: live configuration reload by SIGHUP and by the admin endpoint. A valid change
//! applies without dropping connections; an invalid file is rejected and the old config keeps running.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use common::{Client, Origin, ProxyConfig, Reply, has_member, reload};
use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn config_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "bloomgate-reload-{}-{name}.toml",
        std::process::id()
    ))
}

fn object(body: &str) -> Reply {
    Reply::ok(body).header("cache-control", "max-age=60")
}

/// One request on an open keep-alive connection; returns the status line and headers.
async fn exchange(stream: &mut TcpStream, path: &str) -> String {
    let request = format!("GET {path} HTTP/1.1\r\nHost: reload.test\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("write request");
    let mut buffer = vec![0u8; 16 * 1024];
    let mut text = String::new();
    while !text.contains("\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(3), stream.read(&mut buffer))
            .await
            .expect("response in time")
            .expect("read response");
        assert!(n > 0, "connection closed; got {text:?}");
        text.push_str(&String::from_utf8_lossy(&buffer[..n]));
    }
    text
}

#[tokio::test]
async fn sighup_switches_the_origin_without_dropping_a_keep_alive_connection() {
    let first = Origin::start();
    let second = Origin::start();
    first.set("/a", object("from first"));
    second.set("/b", object("from second"));
    let path = config_path("sighup");
    let proxy = ProxyConfig::new(&first.url()).start_with_file(&path);
    let mut stream = TcpStream::connect(proxy.addr).await.expect("connect");
    let before = exchange(&mut stream, "/a").await;
    assert!(before.starts_with("HTTP/1.1 200"), "{before}");

    let changed = ProxyConfig::new(&second.url());
    std::fs::write(&path, changed.text()).expect("rewrite config");
    let pid = proxy.pid().expect("find the proxy's pid");
    let status = std::process::Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    // The reload runs on the signal task; give it a moment.
    let mut switched = false;
    for _ in 0..50 {
        let reply = exchange(&mut stream, "/b").await;
        if reply.starts_with("HTTP/1.1 200") && second.count("/b") > 0 {
            switched = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        switched,
        "requests did not reach the new origin; log:\n{}",
        proxy.log()
    );
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn an_invalid_file_is_rejected_with_its_errors_and_the_old_config_keeps_running() {
    let origin = Origin::start();
    origin.set("/still", object("old config"));
    let path = config_path("invalid");
    let proxy = ProxyConfig::new(&origin.url()).start_with_file(&path);
    let client = Client::new();

    std::fs::write(&path, "[cache]\nmax_bytes = \"lots\"\n[server]\nlisn = 1\n")
        .expect("write bad config");
    let reply = reload(&client, &proxy).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    let text = reply.text();
    assert!(text.contains("cache.max_bytes"), "{text}");
    assert!(text.contains("server.lisn"), "{text}");

    let served = client.get(&proxy.url("/still")).await;
    assert_eq!(served.status, StatusCode::OK);
    assert_eq!(served.text(), "old config");
    assert!(
        proxy.log().contains("running configuration is unchanged"),
        "{}",
        proxy.log()
    );
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn new_admission_thresholds_keep_what_the_doorkeeper_has_seen() {
    let origin = Origin::start();
    origin.set("/seen", object("seen once"));
    let path = config_path("thresholds");
    let proxy = ProxyConfig::new(&origin.url())
        .admission(true)
        .start_with_file(&path);
    let client = Client::new();

    let first = client.get(&proxy.url("/seen")).await;
    assert!(
        has_member(first.cache_status(), "detail=first-hit"),
        "{}",
        first.cache_status()
    );

    let mut changed = ProxyConfig::new(&origin.url());
    changed
        .admission(true)
        .set("admission", "rotate_at_fpr", "0.05")
        .set("admission", "max_age", "\"2h\"");
    std::fs::write(&path, changed.text()).expect("rewrite config");
    let reply = reload(&client, &proxy).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert!(reply.text().contains("admission"), "{}", reply.text());

    let second = client.get(&proxy.url("/seen")).await;
    assert!(
        second.is_stored(),
        "the doorkeeper forgot the first request: {}",
        second.cache_status()
    );
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn a_change_that_needs_a_restart_is_reported_and_not_applied() {
    let origin = Origin::start();
    let path = config_path("restart");
    let proxy = ProxyConfig::new(&origin.url()).start_with_file(&path);
    let client = Client::new();
    let mut changed = ProxyConfig::new(&origin.url());
    changed.set("cache", "max_bytes", "\"64MiB\"");
    std::fs::write(&path, changed.text()).expect("rewrite config");
    let reply = reload(&client, &proxy).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.text().contains("cache.max_bytes"), "{}", reply.text());
    let metrics = client.get(&proxy.admin_url("/metrics")).await.text();
    assert_eq!(
        common::metric(&metrics, "bloomgate_cache_max_bytes"),
        512.0 * 1024.0 * 1024.0
    );
    let _ = std::fs::remove_file(&path);
}

/// Fails before requests carried their configuration: the origin's answer was judged against the
/// `cache.max_object_bytes` of a reload that happened while it was on its way.
#[tokio::test]
async fn a_request_in_flight_finishes_on_the_configuration_it_started_with() {
    let origin = Origin::start();
    let body = "x".repeat(20_000);
    origin.set(
        "/in-flight",
        object(&body).delay(Duration::from_millis(1500)),
    );
    origin.set("/after", object(&body));
    let path = config_path("in-flight");
    let settings = |config: &mut ProxyConfig| {
        config
            .admission(false)
            .set("origin", "first_byte_timeout", "\"5s\"");
    };
    let mut before = ProxyConfig::new(&origin.url());
    settings(&mut before);
    let proxy = before.start_with_file(&path);
    let client = Client::new();

    let url = proxy.url("/in-flight");
    let in_flight = tokio::spawn(async move { Client::new().get(&url).await });
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut smaller = ProxyConfig::new(&origin.url());
    settings(&mut smaller);
    smaller.set("cache", "max_object_bytes", "\"10KiB\"");
    std::fs::write(&path, smaller.text()).expect("rewrite config");
    let reply = reload(&client, &proxy).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());

    let answered = in_flight.await.expect("request task");
    assert_eq!(answered.body.len(), body.len());
    assert!(
        answered.is_stored(),
        "a request that started under a 8MiB object limit was judged by the new 10KiB one: {}",
        answered.cache_status()
    );
    let after = client.get(&proxy.url("/after")).await;
    assert!(
        has_member(after.cache_status(), "detail=too-large"),
        "a request after the reload must use the new limit: {}",
        after.cache_status()
    );
    let _ = std::fs::remove_file(&path);
}

#[tokio::test]
async fn each_reload_reply_compares_the_file_with_the_running_configuration() {
    let origin = Origin::start();
    origin.set("/r", object("served"));
    let path = config_path("running");
    let started = ProxyConfig::new(&origin.url());
    let proxy = started.start_with_file(&path);
    let client = Client::new();
    let reload_with = async |config: &ProxyConfig| -> String {
        std::fs::write(&path, config.text()).expect("rewrite config");
        let reply = reload(&client, &proxy).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        reply.text()
    };
    let mut moved = ProxyConfig::new(&origin.url());
    moved.set("server", "listen", "\"127.0.0.1:1\"");
    assert_eq!(
        reload_with(&moved).await,
        "reloaded; applied: []; need a restart: [\"server.listen\"]\n"
    );
    // Another key changes: the proxy still listens where it started, and says so.
    moved.set("cache", "targeted_fields", "[]");
    assert_eq!(
        reload_with(&moved).await,
        "reloaded; applied: [\"cache.targeted_fields\"]; need a restart: [\"server.listen\"]\n"
    );
    assert_eq!(client.get(&proxy.url("/r")).await.text(), "served");
    // The file as it was at start: nothing waits for a restart any more.
    assert_eq!(
        reload_with(&started).await,
        "reloaded; applied: [\"cache.targeted_fields\"]; need a restart: []\n"
    );
    assert_eq!(
        reload_with(&started).await,
        "reloaded; applied: []; need a restart: []\n"
    );
    let _ = std::fs::remove_file(&path);
}
