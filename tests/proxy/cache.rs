//! End to end: what the cache stores and serves (admission, RFC 9111 rules, revalidation, RFC 5861,
//! coalescing, HEAD, Age, Cache-Status), against the real binary and a test origin.

use crate::common;

use std::sync::OnceLock;
use std::time::Duration;

use common::{Client, Origin, ProxyConfig, ProxyProcess, Reply, has_member};
use http::{Method, StatusCode};

/// One origin shared by two proxies: one admitting on the second request, one storing at once.
struct Shared {
    origin: Origin,
    admitting: ProxyProcess,
    storing: ProxyProcess,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let origin = Origin::start();
        let admitting = ProxyConfig::new(&origin.url()).admission(true).start();
        let storing = ProxyConfig::new(&origin.url()).admission(false).start();
        Shared {
            origin,
            admitting,
            storing,
        }
    })
}

fn cacheable(body: &str) -> Reply {
    Reply::ok(body).header("cache-control", "max-age=60")
}

/// Waits (at most `within`) until the origin has seen `target` `count` times.
async fn origin_count_reaches(
    origin: &Origin,
    target: &str,
    count: usize,
    within: Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if origin.count(target) >= count {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    origin.count(target) >= count
}

#[tokio::test]
async fn first_request_is_not_stored_second_is_stored_third_is_a_hit() {
    let s = shared();
    let path = "/admission/object";
    s.origin.set(path, cacheable("object body"));
    let client = Client::new();

    let first = client.get(&s.admitting.url(path)).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.text(), "object body");
    assert_eq!(
        first.cache_status(),
        "bloomgate; fwd=miss; detail=first-hit"
    );
    assert_eq!(s.origin.count(path), 1);

    let second = client.get(&s.admitting.url(path)).await;
    assert_eq!(second.text(), "object body");
    assert_eq!(second.cache_status(), "bloomgate; fwd=miss; stored");
    assert_eq!(s.origin.count(path), 2);

    let third = client.get(&s.admitting.url(path)).await;
    assert_eq!(third.text(), "object body");
    assert!(third.is_hit(), "third request: {}", third.cache_status());
    assert_eq!(s.origin.count(path), 2, "a hit must not contact the origin");
}

#[tokio::test]
async fn without_admission_the_first_response_is_stored() {
    let s = shared();
    let path = "/no-admission/object";
    s.origin.set(path, cacheable("stored at once"));
    let client = Client::new();

    let first = client.get(&s.storing.url(path)).await;
    assert_eq!(first.cache_status(), "bloomgate; fwd=miss; stored");
    let second = client.get(&s.storing.url(path)).await;
    assert!(second.is_hit(), "second request: {}", second.cache_status());
    assert_eq!(second.text(), "stored at once");
    assert_eq!(s.origin.count(path), 1);
}

#[tokio::test]
async fn a_vary_variant_is_served_only_to_matching_requests() {
    let s = shared();
    let path = "/vary/object";
    let client = Client::new();
    s.origin.set(
        path,
        cacheable("gzip variant").header("vary", "Accept-Encoding"),
    );
    let gzip = [("accept-encoding", "gzip")];
    let first = client.get_with(&s.storing.url(path), &gzip).await;
    assert_eq!(first.text(), "gzip variant");
    assert!(first.is_stored(), "{}", first.cache_status());

    s.origin.set(
        path,
        cacheable("identity variant").header("vary", "Accept-Encoding"),
    );
    let identity = client.get(&s.storing.url(path)).await;
    assert_eq!(identity.text(), "identity variant");
    assert!(!identity.is_hit(), "{}", identity.cache_status());
    assert!(
        has_member(identity.cache_status(), "fwd=vary-miss"),
        "{}",
        identity.cache_status()
    );
    assert_eq!(s.origin.count(path), 2);

    let gzip_again = client.get_with(&s.storing.url(path), &gzip).await;
    assert_eq!(gzip_again.text(), "gzip variant");
    assert!(gzip_again.is_hit(), "{}", gzip_again.cache_status());

    let br = client
        .get_with(&s.storing.url(path), &[("accept-encoding", "br")])
        .await;
    assert_eq!(br.text(), "identity variant");
    assert!(
        !br.is_hit(),
        "br must not get another variant: {}",
        br.cache_status()
    );
    assert_eq!(s.origin.count(path), 3);
}

/// Requests `path` three times through the storing proxy; each must reach the origin and say why
/// the response was not stored.
async fn never_stored(path: &str, reply: Reply, request_headers: &[(&str, &str)], detail: &str) {
    let s = shared();
    s.origin.set(path, reply);
    let client = Client::new();
    for attempt in 1..=3 {
        let response = client.get_with(&s.storing.url(path), request_headers).await;
        assert_eq!(response.status, StatusCode::OK);
        assert!(
            !response.is_hit(),
            "attempt {attempt}: {}",
            response.cache_status()
        );
        assert!(
            !response.is_stored(),
            "attempt {attempt}: {}",
            response.cache_status()
        );
        assert!(
            has_member(response.cache_status(), &format!("detail={detail}")),
            "attempt {attempt}: {}",
            response.cache_status()
        );
        assert_eq!(s.origin.count(path), attempt);
    }
}

#[tokio::test]
async fn no_store_is_never_stored() {
    never_stored(
        "/rules/no-store",
        Reply::ok("x").header("cache-control", "no-store, max-age=60"),
        &[],
        "no-store",
    )
    .await;
}

#[tokio::test]
async fn private_is_never_stored() {
    never_stored(
        "/rules/private",
        Reply::ok("x").header("cache-control", "private, max-age=60"),
        &[],
        "private",
    )
    .await;
}

#[tokio::test]
async fn a_response_to_authorization_is_never_stored_unless_public() {
    never_stored(
        "/rules/authorization",
        cacheable("secret"),
        &[("authorization", "Bearer alice")],
        "authorization",
    )
    .await;
    let s = shared();
    let path = "/rules/authorization";
    let client = Client::new();
    let anonymous = client.get(&s.storing.url(path)).await;
    assert!(!anonymous.is_hit(), "{}", anonymous.cache_status());

    let public = "/rules/authorization-public";
    s.origin.set(
        public,
        Reply::ok("shared").header("cache-control", "public, max-age=60"),
    );
    let auth = [("authorization", "Bearer alice")];
    let first = client.get_with(&s.storing.url(public), &auth).await;
    assert!(
        first.is_stored(),
        "public allows storing: {}",
        first.cache_status()
    );
}

#[tokio::test]
async fn set_cookie_is_never_shared() {
    never_stored(
        "/rules/set-cookie",
        cacheable("hello alice").header("set-cookie", "session=alice"),
        &[],
        "set-cookie",
    )
    .await;
}

#[tokio::test]
async fn request_no_store_is_not_stored() {
    never_stored(
        "/rules/request-no-store",
        cacheable("x"),
        &[("cache-control", "no-store")],
        "request-no-store",
    )
    .await;
}

#[tokio::test]
async fn an_expired_entry_is_fetched_again() {
    let s = shared();
    let path = "/expiry/object";
    s.origin
        .set(path, Reply::ok("v1").header("cache-control", "max-age=1"));
    let client = Client::new();
    assert!(client.get(&s.storing.url(path)).await.is_stored());
    let hit = client.get(&s.storing.url(path)).await;
    assert!(hit.is_hit(), "{}", hit.cache_status());

    tokio::time::sleep(Duration::from_millis(1600)).await;
    s.origin
        .set(path, Reply::ok("v2").header("cache-control", "max-age=60"));
    let after = client.get(&s.storing.url(path)).await;
    assert!(
        !after.is_hit(),
        "expired entry served: {}",
        after.cache_status()
    );
    assert_eq!(after.text(), "v2");
    assert_eq!(s.origin.count(path), 2);
}

#[tokio::test]
async fn a_clients_no_cache_on_a_fresh_entry_says_fwd_request() {
    let s = shared();
    let path = "/revalidate/fresh-no-cache";
    s.origin.set(
        path,
        Reply::ok("fresh body")
            .header("cache-control", "max-age=600")
            .header("etag", "\"f1\"")
            .answers_304(),
    );
    let client = Client::new();
    assert!(client.get(&s.storing.url(path)).await.is_stored());
    let forced = client
        .get_with(&s.storing.url(path), &[("cache-control", "no-cache")])
        .await;
    assert_eq!(forced.text(), "fresh body");
    assert_eq!(
        s.origin.count(path),
        2,
        "the request's no-cache went forward"
    );
    let status = forced.cache_status();
    assert!(has_member(status, "fwd=request"), "{status}");
    assert!(has_member(status, "fwd-status=304"), "{status}");
}

#[tokio::test]
async fn revalidation_with_304_refreshes_the_entry_without_the_body() {
    let s = shared();
    let path = "/revalidate/object";
    s.origin.set(
        path,
        Reply::ok("original body")
            .header("cache-control", "max-age=1")
            .header("etag", "\"v1\"")
            .answers_304(),
    );
    let client = Client::new();
    assert!(client.get(&s.storing.url(path)).await.is_stored());
    tokio::time::sleep(Duration::from_millis(1600)).await;
    // Were the origin asked for the full body, it would send this one.
    s.origin.set(
        path,
        Reply::ok("changed body")
            .header("cache-control", "max-age=60")
            .header("etag", "\"v1\"")
            .answers_304(),
    );
    let revalidated = client.get(&s.storing.url(path)).await;
    let received = s.origin.received(path);
    assert_eq!(received.len(), 2);
    assert_eq!(received[1].header("if-none-match"), Some("\"v1\""));
    assert_eq!(revalidated.status, StatusCode::OK);
    assert_eq!(revalidated.text(), "original body");
    let status = revalidated.cache_status();
    assert!(has_member(status, "fwd=stale"), "{status}");
    assert!(has_member(status, "fwd-status=304"), "{status}");
    assert!(has_member(status, "stored"), "{status}");

    // The 304 carried max-age=60: the refreshed entry is fresh again.
    let hit = client.get(&s.storing.url(path)).await;
    assert!(hit.is_hit(), "{}", hit.cache_status());
    assert_eq!(hit.text(), "original body");
    assert_eq!(s.origin.count(path), 2);
}

#[tokio::test]
async fn stale_while_revalidate_serves_stale_and_refreshes_in_the_background() {
    let s = shared();
    let path = "/swr/object";
    s.origin.set(
        path,
        Reply::ok("old").header("cache-control", "max-age=1, stale-while-revalidate=30"),
    );
    let client = Client::new();
    assert!(client.get(&s.storing.url(path)).await.is_stored());
    tokio::time::sleep(Duration::from_millis(1600)).await;
    s.origin.set(
        path,
        Reply::ok("new")
            .header("cache-control", "max-age=60")
            .delay(Duration::from_millis(300)),
    );
    let stale = client.get(&s.storing.url(path)).await;
    assert_eq!(stale.text(), "old");
    let status = stale.cache_status();
    assert!(has_member(status, "hit"), "{status}");
    assert!(
        has_member(status, "detail=stale-while-revalidate"),
        "{status}"
    );

    assert!(
        origin_count_reaches(&s.origin, path, 2, Duration::from_secs(3)).await,
        "no background revalidation"
    );
    // Let the background fetch finish storing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let fresh = client.get(&s.storing.url(path)).await;
    assert_eq!(fresh.text(), "new");
    assert!(fresh.is_hit(), "{}", fresh.cache_status());
    assert_eq!(s.origin.count(path), 2);
}

#[tokio::test]
async fn stale_if_error_serves_stale_when_the_origin_fails() {
    let s = shared();
    let path = "/sie/object";
    s.origin.set(
        path,
        Reply::ok("last good").header("cache-control", "max-age=1, stale-if-error=60"),
    );
    let client = Client::new();
    assert!(client.get(&s.storing.url(path)).await.is_stored());
    tokio::time::sleep(Duration::from_millis(1600)).await;
    s.origin.set(path, Reply::ok("broken").status(503));
    let stale = client.get(&s.storing.url(path)).await;
    assert_eq!(stale.status, StatusCode::OK);
    assert_eq!(stale.text(), "last good");
    let status = stale.cache_status();
    assert!(has_member(status, "fwd=stale"), "{status}");
    assert!(has_member(status, "fwd-status=503"), "{status}");
    assert!(has_member(status, "detail=stale-if-error"), "{status}");
}

#[tokio::test]
async fn without_stale_if_error_the_origin_error_is_passed_on() {
    let s = shared();
    let path = "/sie/absent";
    s.origin.set(
        path,
        Reply::ok("last good")
            .header("cache-control", "max-age=1")
            .header("etag", "\"g\""),
    );
    let client = Client::new();
    assert!(client.get(&s.storing.url(path)).await.is_stored());
    tokio::time::sleep(Duration::from_millis(1600)).await;
    s.origin.set(path, Reply::ok("broken").status(503));
    let response = client.get(&s.storing.url(path)).await;
    assert_eq!(response.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.text(), "broken");
}

#[tokio::test]
async fn stale_if_error_serves_stale_when_the_origin_is_down() {
    let mut origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    let path = "/sie/down";
    origin.set(
        path,
        Reply::ok("last good").header("cache-control", "max-age=1, stale-if-error=60"),
    );
    let client = Client::new();
    assert!(client.get(&proxy.url(path)).await.is_stored());
    tokio::time::sleep(Duration::from_millis(1600)).await;
    origin.stop();
    let stale = client.get(&proxy.url(path)).await;
    assert_eq!(stale.status, StatusCode::OK, "{}", stale.cache_status());
    assert_eq!(stale.text(), "last good");
    assert!(
        has_member(stale.cache_status(), "detail=stale-if-error"),
        "{}",
        stale.cache_status()
    );
}

#[tokio::test]
async fn a_client_conditional_request_gets_304_from_a_stored_entry() {
    let s = shared();
    let path = "/conditional/object";
    s.origin
        .set(path, cacheable("body").header("etag", "\"abc\""));
    let client = Client::new();
    assert!(client.get(&s.storing.url(path)).await.is_stored());
    let conditional = client
        .get_with(&s.storing.url(path), &[("if-none-match", "\"abc\"")])
        .await;
    assert_eq!(conditional.status, StatusCode::NOT_MODIFIED);
    assert!(conditional.body.is_empty());
    assert_eq!(conditional.header("etag"), Some("\"abc\""));
    assert!(conditional.is_hit(), "{}", conditional.cache_status());
    let other = client
        .get_with(&s.storing.url(path), &[("if-none-match", "\"other\"")])
        .await;
    assert_eq!(other.status, StatusCode::OK);
    assert_eq!(other.text(), "body");
    assert_eq!(s.origin.count(path), 1);
}

#[tokio::test]
async fn a_hundred_concurrent_misses_make_one_origin_request() {
    let s = shared();
    let path = "/coalesce/object";
    s.origin.set(
        path,
        cacheable("coalesced body").delay(Duration::from_millis(300)),
    );
    let client = Client::new();
    let requests: Vec<_> = (0..100)
        .map(|_| {
            let client = client.clone();
            let url = s.admitting.url(path);
            tokio::spawn(async move { client.get(&url).await })
        })
        .collect();
    let mut collapsed = 0;
    for request in requests {
        let response = request.await.expect("request task");
        assert_eq!(response.status, StatusCode::OK);
        assert_eq!(response.text(), "coalesced body");
        if has_member(response.cache_status(), "collapsed") {
            collapsed += 1;
        }
    }
    assert_eq!(
        s.origin.count(path),
        1,
        "concurrent misses were not coalesced"
    );
    assert!(collapsed > 0, "no response says collapsed");
}

#[tokio::test]
async fn head_gets_headers_without_a_body() {
    let s = shared();
    let path = "/head/object";
    s.origin.set(path, cacheable("twelve bytes"));
    let client = Client::new();
    let head = client
        .send(Method::HEAD, &s.storing.url(path), &[])
        .await
        .expect("HEAD");
    assert_eq!(head.status, StatusCode::OK);
    assert!(head.body.is_empty());
    assert_eq!(head.header("content-length"), Some("12"));
    assert_eq!(head.header("cache-control"), Some("max-age=60"));
    head.cache_status();

    // Let the proxy finish reading the body it fetched for the store.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let get = client.get(&s.storing.url(path)).await;
    assert_eq!(get.text(), "twelve bytes");
    let head_hit = client
        .send(Method::HEAD, &s.storing.url(path), &[])
        .await
        .expect("HEAD");
    assert!(head_hit.body.is_empty());
    assert!(head_hit.is_hit(), "{}", head_hit.cache_status());
    assert_eq!(head_hit.header("content-length"), Some("12"));
    assert_eq!(s.origin.count(path), 1);
}

#[tokio::test]
async fn a_hit_carries_a_sensible_age() {
    let s = shared();
    let path = "/age/object";
    s.origin.set(path, cacheable("aged"));
    let client = Client::new();
    let first = client.get(&s.storing.url(path)).await;
    assert!(first.is_stored());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let hit = client.get(&s.storing.url(path)).await;
    assert!(hit.is_hit());
    let age: u64 = hit
        .header("age")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("hit without a numeric Age: {:?}", hit.headers));
    assert!((1..=5).contains(&age), "Age {age} after about one second");
    let status = hit.cache_status();
    let ttl: i64 = status
        .split(';')
        .find_map(|p| p.trim().strip_prefix("ttl="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("hit without ttl: {status}"));
    assert!(
        (50..=59).contains(&ttl),
        "ttl {ttl} with max-age=60 after one second"
    );
}

#[tokio::test]
async fn age_from_the_origin_counts_towards_the_age_of_a_hit() {
    let s = shared();
    let path = "/age/from-origin";
    s.origin
        .set(path, cacheable("aged upstream").header("age", "30"));
    let client = Client::new();
    assert!(client.get(&s.storing.url(path)).await.is_stored());
    let hit = client.get(&s.storing.url(path)).await;
    assert!(hit.is_hit(), "{}", hit.cache_status());
    let age: u64 = hit.header("age").and_then(|v| v.parse().ok()).expect("Age");
    assert!((30..=35).contains(&age), "Age {age}, origin said 30");
}

#[tokio::test]
async fn every_response_carries_cache_status() {
    let s = shared();
    let client = Client::new();
    s.origin
        .set("/status/missing", Reply::ok("gone").status(404));
    s.origin.set("/status/post", Reply::ok("posted"));
    let not_found = client.get(&s.storing.url("/status/missing")).await;
    assert_eq!(not_found.status, StatusCode::NOT_FOUND);
    assert!(not_found.cache_status().starts_with("bloomgate;"));
    let post = client
        .send(Method::POST, &s.storing.url("/status/post"), &[])
        .await
        .expect("POST");
    assert_eq!(post.text(), "posted");
    assert_eq!(post.cache_status(), "bloomgate; fwd=method");
    let unknown = client.get(&s.storing.url("/status/never-set")).await;
    assert!(unknown.cache_status().starts_with("bloomgate;"));
}

#[tokio::test]
async fn a_chunked_response_is_stored_whole() {
    let s = shared();
    let path = "/chunked/object";
    s.origin
        .set(path, cacheable("first half, second half").chunked());
    let client = Client::new();
    let first = client.get(&s.storing.url(path)).await;
    assert_eq!(first.text(), "first half, second half");
    let hit = client.get(&s.storing.url(path)).await;
    assert!(hit.is_hit(), "{}", hit.cache_status());
    assert_eq!(hit.text(), "first half, second half");
    assert_eq!(s.origin.count(path), 1);
}

#[tokio::test]
async fn a_revalidation_answered_with_a_new_body_replaces_the_entry() {
    let s = shared();
    let path = "/revalidate/replaced";
    s.origin.set(
        path,
        Reply::ok("version one")
            .header("cache-control", "max-age=1")
            .header("etag", "\"one\"")
            .answers_304(),
    );
    let client = Client::new();
    assert!(client.get(&s.storing.url(path)).await.is_stored());
    tokio::time::sleep(Duration::from_millis(1600)).await;
    s.origin.set(
        path,
        Reply::ok("version two, longer")
            .header("cache-control", "max-age=60")
            .header("etag", "\"two\"")
            .answers_304(),
    );
    let replaced = client.get(&s.storing.url(path)).await;
    assert_eq!(replaced.status, StatusCode::OK);
    assert_eq!(replaced.text(), "version two, longer");
    assert_eq!(replaced.header("etag"), Some("\"two\""));
    let hit = client.get(&s.storing.url(path)).await;
    assert!(hit.is_hit(), "{}", hit.cache_status());
    assert_eq!(hit.text(), "version two, longer");
    assert_eq!(hit.header("etag"), Some("\"two\""));
    assert_eq!(hit.header("content-length"), Some("19"));
    assert_eq!(s.origin.count(path), 2);
}
