//! End to end: the RFC 9111 rules a shared cache must never break, and targeted cache control
//! (RFC 9213), against the real binary and a test origin: no 304 reaches a client that asked
//! for none, directive names in any case, the three date forms, `Age`'s first member,
//! `stale-while-revalidate` in every admission mode and from disk, any final status with explicit
//! freshness stored and counted, and `CDN-Cache-Control` (or an operator's own field) deciding for
//! this cache while `Cache-Control` goes on to the client.
//!
//! Every request carries the two fields the cache-tests.fyi client sends on every request
//! (`Cache-Control: nothing-to-see-here`, `Pragma: foo`): an unknown directive changes nothing.

use crate::common;

use std::time::Duration;

use common::{Client, ClientReply, Origin, ProxyConfig, ProxyProcess, Reply, TempDir, has_member};
use http::{Method, StatusCode};

/// Header fields, as a test lists them.
type Fields = &'static [(&'static str, &'static str)];

/// What the cache-tests.fyi client adds to every request.
const NOISE: [(&str, &str); 2] = [("cache-control", "nothing-to-see-here"), ("pragma", "foo")];

async fn get(client: &Client, proxy: &ProxyProcess, path: &str) -> ClientReply {
    get_with(client, proxy, path, &[]).await
}

async fn get_with(
    client: &Client,
    proxy: &ProxyProcess,
    path: &str,
    extra: &[(&str, &str)],
) -> ClientReply {
    let mut headers: Vec<(&str, &str)> = NOISE.to_vec();
    headers.retain(|(name, _)| !extra.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)));
    headers.extend_from_slice(extra);
    client
        .send(Method::GET, &proxy.url(path), &headers)
        .await
        .unwrap_or_else(|error| panic!("GET {path}: {error}"))
}

/// One origin, and a proxy storing every storable response at once (admission off), so each rule
/// shows on the second request.
fn storing(origin: &Origin) -> ProxyProcess {
    ProxyConfig::new(&origin.url()).mode("off").start()
}

/// What the second of two requests for `path` gets, `pause` after the first, the origin
/// answering both with `reply`: whether the first stored something reusable.
async fn asked_again(
    client: &Client,
    proxy: &ProxyProcess,
    origin: &Origin,
    path: &str,
    reply: Reply,
    pause: Duration,
) -> ClientReply {
    origin.set(path, reply);
    get(client, proxy, path).await;
    tokio::time::sleep(pause).await;
    get(client, proxy, path).await
}

/// Whether the reply was served from the cache without asking the origin.
fn is_hit(reply: &ClientReply) -> bool {
    has_member(reply.cache_status(), "hit")
}

#[tokio::test]
async fn a_304_without_validators_refreshes_the_one_stored_response_for_every_trigger() {
    let origin = Origin::start();
    let proxy = storing(&origin);
    let client = Client::new();
    // What makes the cache revalidate: the response's no-cache, must-revalidate once stale, the
    // request's no-cache, and a stale entry with a strong or a weak ETag.
    let cases: [(&str, &str, &str, Fields, u64); 5] = [
        ("/304/no-cache", "max-age=600, no-cache", "\"a\"", &[], 0),
        (
            "/304/must-revalidate",
            "max-age=1, must-revalidate",
            "\"b\"",
            &[],
            1100,
        ),
        (
            "/304/request-no-cache",
            "max-age=600",
            "\"c\"",
            &[("cache-control", "no-cache")],
            0,
        ),
        ("/304/strong", "max-age=1", "\"d\"", &[], 1100),
        ("/304/weak", "max-age=1", "W/\"e\"", &[], 1100),
    ];
    for (path, cc, etag, request, wait) in cases {
        origin.set(
            path,
            Reply::ok("the stored body")
                .header("cache-control", cc)
                .header("etag", etag)
                .header("x-version", "1")
                .conditional_304(&[("x-version", "2"), ("cache-control", cc)]),
        );
        let first = get(&client, &proxy, path).await;
        assert!(first.is_stored(), "{path}: {}", first.cache_status());
        tokio::time::sleep(Duration::from_millis(wait)).await;

        let second = get_with(&client, &proxy, path, request).await;
        let status = second.cache_status();
        assert_eq!(
            second.status,
            StatusCode::OK,
            "{path}: a 304 reached the client: {status}"
        );
        assert_eq!(second.text(), "the stored body", "{path}");
        assert!(has_member(status, "fwd-status=304"), "{path}: {status}");
        assert_eq!(
            second.header("x-version"),
            Some("2"),
            "{path}: 304's field not applied"
        );
        let sent = origin.received(path);
        assert_eq!(sent.len(), 2, "{path}");
        assert!(
            sent[1].header("if-none-match") == Some(etag),
            "{path}: revalidated without the stored ETag: {:?}",
            sent[1].header("if-none-match")
        );
    }
}

#[tokio::test]
async fn a_304_naming_nothing_stored_is_not_used_and_the_request_is_sent_again_whole() {
    let origin = Origin::start();
    let proxy = storing(&origin);
    let client = Client::new();
    let path = "/304/mismatch";
    origin.set(
        path,
        Reply::ok("first body")
            .header("cache-control", "max-age=600, no-cache")
            .header("etag", "\"one\""),
    );
    assert!(get(&client, &proxy, path).await.is_stored());
    origin.set(
        path,
        Reply::ok("second body")
            .header("cache-control", "max-age=600, no-cache")
            .header("etag", "\"two\"")
            .conditional_304(&[("etag", "\"other\"")]),
    );
    let reply = get(&client, &proxy, path).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.cache_status());
    assert_eq!(reply.text(), "second body");
    let sent = origin.received(path);
    assert_eq!(
        sent.len(),
        3,
        "the conditional, then the same request without the condition"
    );
    assert!(sent[1].header("if-none-match").is_some());
    assert!(sent[2].header("if-none-match").is_none());
    assert!(sent[2].header("if-modified-since").is_none());
}

#[tokio::test]
async fn a_304_to_a_request_without_a_condition_never_reaches_the_client() {
    let origin = Origin::start();
    let proxy = storing(&origin);
    let client = Client::new();
    let path = "/304/unasked";
    origin.set(path, Reply::ok("").status(304));
    let reply = get(&client, &proxy, path).await;
    assert_eq!(
        reply.status,
        StatusCode::BAD_GATEWAY,
        "{}",
        reply.cache_status()
    );
    assert!(has_member(reply.cache_status(), "detail=origin-error"));
}

#[tokio::test]
async fn cache_control_directive_names_are_case_insensitive() {
    let origin = Origin::start();
    let proxy = storing(&origin);
    let client = Client::new();
    let cases = [
        // (response Cache-Control, served from cache the second time?)
        ("MaX-AgE=3600", true),
        ("max-age=3600, No-CaChE", false),
        ("Private, max-age=3600", false),
        ("No-Store, max-age=3600", false),
        ("max-age=1, S-MaxAge=3600", true),
    ];
    for (index, (cc, cached)) in cases.into_iter().enumerate() {
        let path = format!("/case/{index}");
        let reply = Reply::ok("body").header("cache-control", cc);
        let pause = Duration::from_millis(1100);
        let second = asked_again(&client, &proxy, &origin, &path, reply, pause).await;
        assert_eq!(is_hit(&second), cached, "{cc}: {}", second.cache_status());
    }
}

#[tokio::test]
async fn expires_is_read_in_three_forms_and_any_other_is_already_expired() {
    let origin = Origin::start();
    let proxy = storing(&origin);
    let client = Client::new();
    let cases = [
        ("Thu, 18 Aug 2050 02:01:18 GMT", true),
        ("Thursday, 18-Aug-50 02:01:18 GMT", true),
        ("Thu Aug 18 02:01:18 2050", true),
        ("THU, 18 AUG 2050 02:01:18 gmt", true),
        ("Thu, 18  Aug  2050 02:01:18 GMT", false),
        ("Thu, 18 Aug 2050 02:01:18 UTC", false),
        ("Thu, 18 Aug 2050 02:01:18 +0000", false),
        ("0", false),
    ];
    for (index, (expires, cached)) in cases.into_iter().enumerate() {
        let path = format!("/expires/{index}");
        let reply = Reply::ok("body")
            .header("expires", expires)
            .header("etag", "\"e\"");
        let second = asked_again(&client, &proxy, &origin, &path, reply, Duration::ZERO).await;
        assert_eq!(
            is_hit(&second),
            cached,
            "{expires}: {}",
            second.cache_status()
        );
    }
}

#[tokio::test]
async fn the_first_member_of_age_counts() {
    let origin = Origin::start();
    let proxy = storing(&origin);
    let client = Client::new();
    let cases = [
        ("7200, 0", false),
        ("0, 7200", true),
        ("7200", false),
        ("abc", true),
    ];
    for (index, (age, cached)) in cases.into_iter().enumerate() {
        let path = format!("/age/{index}");
        let reply = Reply::ok("body")
            .header("cache-control", "max-age=3600")
            .header("age", age)
            .header("etag", "\"a\"");
        let second = asked_again(&client, &proxy, &origin, &path, reply, Duration::ZERO).await;
        assert_eq!(
            is_hit(&second),
            cached,
            "Age: {age}: {}",
            second.cache_status()
        );
    }
}

/// Stores `path` (max-age=1, stale-while-revalidate=3600) in `proxy`, asking as often as its
/// mode needs, then checks that two seconds later it is served stale at once and refreshed.
async fn served_stale_while_revalidating(
    client: &Client,
    origin: &Origin,
    proxy: &ProxyProcess,
    path: &str,
    requests_to_store: usize,
) {
    origin.set(
        path,
        Reply::ok("old")
            .header("cache-control", "max-age=1, stale-while-revalidate=3600")
            .header("etag", "\"old\""),
    );
    for _ in 0..requests_to_store {
        get(client, proxy, path).await;
    }
    tokio::time::sleep(Duration::from_millis(2100)).await;
    origin.set(
        path,
        Reply::ok("new")
            .header("cache-control", "max-age=600")
            .header("etag", "\"new\""),
    );
    let stale = get(client, proxy, path).await;
    let status = stale.cache_status();
    assert_eq!(stale.text(), "old", "{path}: {status}");
    assert!(has_member(status, "hit"), "{path}: {status}");
    assert!(
        has_member(status, "detail=stale-while-revalidate"),
        "{path}: {status}"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        let fresh = get(client, proxy, path).await;
        if fresh.text() == "new" && is_hit(&fresh) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path} never refreshed in the background"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn stale_while_revalidate_serves_at_once_in_every_admission_mode() {
    let origin = Origin::start();
    let client = Client::new();
    // Probation stores the first copy; second-hit the second; off the first, in main.
    for (mode, requests) in [("probation", 1), ("second-hit", 2), ("off", 1)] {
        let proxy = ProxyConfig::new(&origin.url()).mode(mode).start();
        let path = format!("/swr/{mode}");
        served_stale_while_revalidating(&client, &origin, &proxy, &path, requests).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_while_revalidate_serves_an_entry_restored_from_disk() {
    let origin = Origin::start();
    let client = Client::new();
    let dir = TempDir::new("swr-disk");
    let config = super::disk::tiered(&origin.url(), dir.path());
    let proxy = config.start();
    let path = "/swr/disk";
    origin.set(
        path,
        Reply::ok("old")
            .header("cache-control", "max-age=1, stale-while-revalidate=3600")
            .header("etag", "\"old\""),
    );
    // Proven (hit while in RAM), so a graceful stop writes it to disk.
    get(&client, &proxy, path).await;
    assert!(is_hit(&get(&client, &proxy, path).await));
    tokio::task::block_in_place(|| proxy.terminate());
    let proxy = config.start();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    origin.set(
        path,
        Reply::ok("new").header("cache-control", "max-age=600"),
    );
    let stale = get(&client, &proxy, path).await;
    let status = stale.cache_status();
    assert_eq!(stale.text(), "old", "{status}");
    assert!(
        has_member(status, "detail=stale-while-revalidate"),
        "{status}"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while origin.count(path) < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no background refresh"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn admin_metric(client: &Client, proxy: &ProxyProcess, series: &str) -> f64 {
    let scrape = client.get(&proxy.admin_url("/metrics")).await.text();
    common::metric(&scrape, series)
}

#[tokio::test]
async fn any_final_status_with_explicit_freshness_is_stored_and_counted_as_a_cached_error() {
    let origin = Origin::start();
    let proxy = storing(&origin);
    let client = Client::new();
    let hits = "bloomgate_cached_errors_total{served=\"hit\"}";
    let stored = "bloomgate_cached_errors_total{served=\"stored\"}";
    let (hits_before, stored_before) = (
        admin_metric(&client, &proxy, hits).await,
        admin_metric(&client, &proxy, stored).await,
    );
    let errors = [400, 404, 499, 500, 502, 503, 504, 599];
    for code in errors {
        let path = format!("/status/{code}");
        origin.set(
            &path,
            Reply::ok("error page")
                .status(code)
                .header("cache-control", "max-age=600"),
        );
        let first = get(&client, &proxy, &path).await;
        assert!(first.is_stored(), "{code}: {}", first.cache_status());
        let second = get(&client, &proxy, &path).await;
        assert_eq!(second.status.as_u16(), code);
        assert!(is_hit(&second), "{code}: {}", second.cache_status());
        assert!(
            has_member(second.cache_status(), "detail=cached-error"),
            "{code}: {}",
            second.cache_status()
        );
        assert_eq!(origin.count(&path), 1, "{code}");
    }
    // 299 is no error, and stored just the same.
    let again = |path: &'static str, reply: Reply| {
        asked_again(&client, &proxy, &origin, path, reply, Duration::ZERO)
    };
    let fine = Reply::ok("fine")
        .status(299)
        .header("cache-control", "max-age=600");
    assert!(is_hit(&again("/status/299", fine).await));
    let n = errors.len() as f64;
    assert_eq!(admin_metric(&client, &proxy, hits).await - hits_before, n);
    assert_eq!(
        admin_metric(&client, &proxy, stored).await - stored_before,
        n
    );

    // Heuristic freshness only for the codes RFC 9110 calls heuristically cacheable.
    let modified = "Thu, 01 Jan 2015 00:00:00 GMT";
    origin.set(
        "/status/heuristic-500",
        Reply::ok("x").status(500).header("last-modified", modified),
    );
    let not = get(&client, &proxy, "/status/heuristic-500").await;
    assert!(
        has_member(not.cache_status(), "detail=status"),
        "{}",
        not.cache_status()
    );
    let not_found = Reply::ok("x").status(404).header("last-modified", modified);
    assert!(is_hit(&again("/status/heuristic-404", not_found).await));

    // must-understand: stored despite no-store for a code the cache knows, never for another.
    let cc = "max-age=3600, no-store, must-understand";
    let understood = Reply::ok("x").header("cache-control", cc);
    assert!(is_hit(&again("/status/understood", understood).await));
    let unknown = Reply::ok("x").status(599).header("cache-control", cc);
    assert!(!is_hit(&again("/status/not-understood", unknown).await));
}

#[tokio::test]
async fn a_targeted_field_decides_for_this_cache_and_cache_control_goes_on_unchanged() {
    let origin = Origin::start();
    let client = Client::new();
    let mut config = ProxyConfig::new(&origin.url());
    config.mode("off").set(
        "cache",
        "targeted_fields",
        "[\"Bloomgate-Cache-Control\", \"CDN-Cache-Control\"]",
    );
    let proxy = config.start();
    // (fields, served from cache the second time?, the targeted field that decided)
    let cases: [(Fields, bool, Option<&str>); 7] = [
        (
            &[
                ("cache-control", "no-store"),
                ("cdn-cache-control", "max-age=600"),
            ],
            true,
            Some("cdn-cache-control"),
        ),
        (
            &[
                ("cache-control", "max-age=600"),
                ("cdn-cache-control", "no-store"),
            ],
            false,
            Some("cdn-cache-control"),
        ),
        (
            &[
                ("cache-control", "max-age=600"),
                ("cdn-cache-control", "private"),
            ],
            false,
            Some("cdn-cache-control"),
        ),
        (
            &[
                ("cache-control", "max-age=600"),
                ("cdn-cache-control", "no-cache"),
            ],
            false,
            Some("cdn-cache-control"),
        ),
        (
            &[
                ("cdn-cache-control", "max-age=600"),
                ("bloomgate-cache-control", "no-store"),
            ],
            false,
            Some("bloomgate-cache-control"),
        ),
        // Not a valid dictionary: ignored, Cache-Control decides.
        (
            &[
                ("cache-control", "no-store"),
                ("cdn-cache-control", "max-age=600, &&&"),
            ],
            false,
            None,
        ),
        // Expires is ignored beside a targeted field.
        (
            &[
                ("expires", "Thu, 18 Aug 2050 02:01:18 GMT"),
                ("cdn-cache-control", "max-age=0"),
            ],
            false,
            Some("cdn-cache-control"),
        ),
    ];
    for (index, (fields, cached, decided)) in cases.into_iter().enumerate() {
        let path = format!("/targeted/{index}");
        let mut reply = Reply::ok("body").header("etag", "\"t\"");
        for (name, value) in fields {
            reply = reply.header(name, value);
        }
        origin.set(&path, reply);
        let first = get(&client, &proxy, &path).await;
        let status = first.cache_status().to_string();
        if let Some(field) = decided {
            assert!(
                status.contains(&format!("/{field}"))
                    || status.contains(&format!("detail={field}")),
                "{fields:?}: {status}"
            );
        } else {
            assert!(!status.contains("cache-control"), "{fields:?}: {status}");
        }
        // What the origin said to browsers reaches the client untouched, targeted fields too.
        for (name, value) in fields {
            assert_eq!(first.header(name), Some(*value), "{fields:?}: {name}");
        }
        let second = get(&client, &proxy, &path).await;
        assert_eq!(
            is_hit(&second),
            cached,
            "{fields:?}: {}",
            second.cache_status()
        );
    }

    // Without forwarding, the listed fields stop here; others pass.
    let mut config = ProxyConfig::new(&origin.url());
    config
        .mode("off")
        .set("cache", "forward_targeted_fields", "false");
    let quiet = config.start();
    origin.set(
        "/targeted/quiet",
        Reply::ok("body")
            .header("cdn-cache-control", "max-age=600")
            .header("other-cache-control", "max-age=5"),
    );
    let reply = get(&client, &quiet, "/targeted/quiet").await;
    assert_eq!(reply.header("cdn-cache-control"), None);
    assert_eq!(reply.header("other-cache-control"), Some("max-age=5"));
    assert!(is_hit(&get(&client, &quiet, "/targeted/quiet").await));
}
