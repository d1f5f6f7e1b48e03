//! End to end: the admin listener (health, readiness, metrics, PURGE) and PURGE on the public
//! listener, refused unless the client's network is configured.

use crate::common;

use common::{Client, Origin, ProxyConfig, Reply};
use http::{Method, StatusCode};

fn purge() -> Method {
    Method::from_bytes(b"PURGE").expect("PURGE is a valid method")
}

/// A stored object: chunked, so that storing it does not depend on how the body is framed.
fn stored_object(body: &str) -> Reply {
    Reply::ok(body)
        .header("cache-control", "max-age=60")
        .chunked()
}

#[tokio::test]
async fn health_and_readiness_answer_200() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url()).start();
    let client = Client::new();
    let health = client.get(&proxy.admin_url("/healthz")).await;
    assert_eq!(health.status, StatusCode::OK);
    let ready = client.get(&proxy.admin_url("/readyz")).await;
    assert_eq!(ready.status, StatusCode::OK);
    let metrics = client.get(&proxy.admin_url("/metrics")).await;
    assert_eq!(metrics.status, StatusCode::OK);
    assert!(metrics.text().contains("bloomgate_requests_total"));
}

#[tokio::test]
async fn purge_from_the_admin_listener_removes_the_object() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    let path = "/purge/admin";
    origin.set(path, stored_object("to be purged"));
    let client = Client::new();
    let host = proxy.addr.to_string();
    assert!(client.get(&proxy.url(path)).await.is_stored());
    assert!(client.get(&proxy.url(path)).await.is_hit());

    let purged = client
        .send(purge(), &proxy.admin_url(path), &[("host", &host)])
        .await
        .expect("PURGE");
    assert_eq!(purged.status, StatusCode::OK, "{}", purged.text());
    assert_eq!(purged.text(), "purged\n");

    let after = client.get(&proxy.url(path)).await;
    assert!(
        !after.is_hit(),
        "served after purge: {}",
        after.cache_status()
    );
    assert_eq!(origin.count(path), 2);

    let other = client
        .send(
            purge(),
            &proxy.admin_url("/purge/never-stored"),
            &[("host", &host)],
        )
        .await
        .expect("PURGE");
    assert_eq!(other.status, StatusCode::NOT_FOUND);

    let scrape = client.get(&proxy.admin_url("/metrics")).await.text();
    let purges = common::required_metric(&scrape, "bloomgate_purges_total{kind=\"key\"}");
    assert_eq!(purges, 2.0, "one PURGE found its object, one did not");
    let purged = "bloomgate_purged_entries_total{kind=\"key\"}";
    assert_eq!(common::required_metric(&scrape, purged), 1.0);
}

#[tokio::test]
async fn purge_on_the_public_listener_is_refused_by_default() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    let path = "/purge/public-refused";
    origin.set(path, stored_object("kept"));
    let client = Client::new();
    assert!(client.get(&proxy.url(path)).await.is_stored());
    let refused = client
        .send(purge(), &proxy.url(path), &[])
        .await
        .expect("PURGE");
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    refused.cache_status();
    let still = client.get(&proxy.url(path)).await;
    assert!(
        still.is_hit(),
        "a refused PURGE removed the object: {}",
        still.cache_status()
    );
    assert_eq!(origin.count(path), 1, "PURGE must not reach the origin");
}

#[tokio::test]
async fn purge_on_the_public_listener_is_allowed_from_configured_networks() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url())
        .admission(false)
        .set("server", "purge_allowed_networks", "[\"127.0.0.1/32\"]")
        .start();
    let path = "/purge/public-allowed";
    origin.set(path, stored_object("purgeable"));
    let client = Client::new();
    assert!(client.get(&proxy.url(path)).await.is_stored());
    let purged = client
        .send(purge(), &proxy.url(path), &[])
        .await
        .expect("PURGE");
    assert_eq!(purged.status, StatusCode::OK);
    let after = client.get(&proxy.url(path)).await;
    assert!(!after.is_hit(), "{}", after.cache_status());
    assert_eq!(origin.count(path), 2);
}
