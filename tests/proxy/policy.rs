//! End to end: a cache policy per route (`[routes.cache]`), from `config/examples/site-policy.toml`
//! as it ships, and the rules it does not use, against the real binary and a test origin.

use crate::common;

use std::sync::OnceLock;
use std::time::Duration;

use common::{Client, Origin, ProxyConfig, ProxyProcess, Reply, has_member};

const SITE_POLICY: &str = include_str!("../../config/examples/site-policy.toml");

/// The example's groups and routes, its one server replaced by `origin` (the listeners are the
/// test's own).
fn site_policy(origin: &Origin) -> ProxyConfig {
    let from = SITE_POLICY
        .find("[upstreams.cms]")
        .expect("the example has its group");
    let upstreams = SITE_POLICY[from..].replace("http://127.0.0.1:8081", &origin.url());
    ProxyConfig::with_upstreams(&upstreams)
}

struct Shared {
    origin: Origin,
    proxy: ProxyProcess,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let origin = Origin::start();
        let proxy = site_policy(&origin).start();
        Shared { origin, proxy }
    })
}

fn detail(cache_status: &str) -> Option<&str> {
    cache_status
        .split(';')
        .map(str::trim)
        .find_map(|part| part.strip_prefix("detail="))
}

fn ttl(cache_status: &str) -> Option<i64> {
    cache_status
        .split(';')
        .map(str::trim)
        .find_map(|part| part.strip_prefix("ttl="))
        .and_then(|ttl| ttl.parse().ok())
}

#[tokio::test]
async fn static_stores_every_200_for_an_hour_whatever_the_origin_says() {
    let s = shared();
    let path = "/static/app.css";
    s.origin.set(
        path,
        Reply::ok("body{}")
            .header("cache-control", "private, no-cache, no-store")
            .header("expires", "Thu, 01 Jan 1970 00:00:00 GMT"),
    );
    let client = Client::new();
    let first = client.get(&s.proxy.url(path)).await;
    assert!(first.is_stored(), "{}", first.cache_status());
    assert_eq!(detail(first.cache_status()), Some("policy-override"));
    let second = client.get(&s.proxy.url(path)).await;
    assert!(second.is_hit(), "{}", second.cache_status());
    assert_eq!(second.text(), "body{}");
    let left = ttl(second.cache_status()).expect("a hit has a ttl");
    assert!((3500..=3600).contains(&left), "{}", second.cache_status());
    assert_eq!(s.origin.count(path), 1);
}

#[tokio::test]
async fn static_never_hands_the_origins_cookie_to_any_client() {
    let s = shared();
    let path = "/static/logo.svg";
    s.origin.set(
        path,
        Reply::ok("<svg/>").header("set-cookie", "session=first-clients-secret"),
    );
    let client = Client::new();
    let first = client.get(&s.proxy.url(path)).await;
    assert_eq!(
        first.header("set-cookie"),
        None,
        "the response that stored it"
    );
    assert!(first.is_stored(), "{}", first.cache_status());
    let second = client.get(&s.proxy.url(path)).await;
    assert!(second.is_hit(), "{}", second.cache_status());
    assert_eq!(second.header("set-cookie"), None, "another client");
}

#[tokio::test]
async fn static_answers_a_browser_reload_from_the_cache() {
    let s = shared();
    let path = "/static/app.js";
    s.origin
        .set(path, Reply::ok("js").header("cache-control", "max-age=60"));
    let client = Client::new();
    client.get(&s.proxy.url(path)).await;
    for reload in [
        [("cache-control", "no-cache"), ("pragma", "no-cache")],
        [("cache-control", "max-age=0"), ("pragma", "no-cache")],
    ] {
        let reply = client.get_with(&s.proxy.url(path), &reload).await;
        assert!(reply.is_hit(), "{reload:?}: {}", reply.cache_status());
    }
    assert_eq!(s.origin.count(path), 1);
    let received = &s.origin.received(path)[0];
    assert_eq!(received.header("cache-control"), None);
}

#[tokio::test]
async fn api_is_never_looked_up_nor_stored_whatever_the_origin_says() {
    let s = shared();
    let path = "/api/orders?id=7&utm_source=mail";
    s.origin.set(
        path,
        Reply::ok("[]").header("cache-control", "public, max-age=600"),
    );
    let client = Client::new();
    for _ in 0..3 {
        let reply = client.get(&s.proxy.url(path)).await;
        assert!(
            !reply.is_hit() && !reply.is_stored(),
            "{}",
            reply.cache_status()
        );
        assert!(
            has_member(reply.cache_status(), "fwd=bypass"),
            "{}",
            reply.cache_status()
        );
        assert_eq!(detail(reply.cache_status()), Some("bypass-route"));
    }
    assert_eq!(s.origin.count(path), 3, "forwarded as sent, every time");
}

#[tokio::test]
async fn site_bypasses_a_visitor_with_a_session_cookie() {
    let s = shared();
    let path = "/articles/1";
    s.origin.set(
        path,
        Reply::ok("article").header("cache-control", "max-age=60"),
    );
    let client = Client::new();
    let session = [("cookie", "theme=dark; session=abc")];
    // A logged-in visitor's response is not stored...
    let first = client.get_with(&s.proxy.url(path), &session).await;
    assert_eq!(detail(first.cache_status()), Some("bypass-cookie"));
    assert!(!first.is_stored());
    let anonymous = client.get(&s.proxy.url(path)).await;
    assert!(!anonymous.is_hit(), "{}", anonymous.cache_status());
    // ...and it is not served from the cache once an anonymous visitor's copy is there.
    let stored = client.get(&s.proxy.url(path)).await;
    assert!(stored.is_hit(), "{}", stored.cache_status());
    let again = client.get_with(&s.proxy.url(path), &session).await;
    assert!(!again.is_hit(), "{}", again.cache_status());
    assert_eq!(s.origin.count(path), 3);
    // A cookie whose name only starts with "session" is not the one.
    let other = client
        .get_with(&s.proxy.url(path), &[("cookie", "sessionx=1")])
        .await;
    assert!(other.is_hit(), "{}", other.cache_status());
}

#[tokio::test]
async fn site_stores_a_404_without_freshness_for_a_minute() {
    let s = shared();
    let path = "/missing/page";
    s.origin.set(path, Reply::ok("not here").status(404));
    let client = Client::new();
    let first = client.get(&s.proxy.url(path)).await;
    assert_eq!(first.status, http::StatusCode::NOT_FOUND);
    assert!(first.is_stored(), "{}", first.cache_status());
    assert_eq!(
        detail(first.cache_status()),
        Some("probation/policy-default-ttl/cached-error")
    );
    let second = client.get(&s.proxy.url(path)).await;
    assert!(second.is_hit(), "{}", second.cache_status());
    let left = ttl(second.cache_status()).expect("ttl");
    assert!((1..=60).contains(&left), "{}", second.cache_status());
    // A 200 without freshness information is not given a minute: the rule names 404 only.
    let ok = "/no/freshness";
    s.origin.set(ok, Reply::ok("plain"));
    let reply = client.get(&s.proxy.url(ok)).await;
    assert!(
        !reply.cache_status().contains("policy-default-ttl"),
        "{}",
        reply.cache_status()
    );
    let again = client.get(&s.proxy.url(ok)).await;
    assert!(!again.is_hit(), "{}", again.cache_status());
}

#[tokio::test]
async fn site_keys_on_page_and_q_only_and_never_forwards_the_rest() {
    let s = shared();
    s.origin.set(
        "/search?page=2&q=shoes",
        Reply::ok("results").header("cache-control", "max-age=60"),
    );
    let client = Client::new();
    let first = client
        .get(
            &s.proxy
                .url("/search?utm_source=mail&q=shoes&fbclid=x1&page=2"),
        )
        .await;
    assert_eq!(first.text(), "results");
    let second = client
        .get(&s.proxy.url("/search?page=2&gclid=y&q=shoes"))
        .await;
    assert!(second.is_hit(), "{}", second.cache_status());
    let received = s.origin.all_received();
    let searches: Vec<&str> = received
        .iter()
        .map(|r| r.target.as_str())
        .filter(|t| t.starts_with("/search"))
        .collect();
    assert_eq!(searches, ["/search?page=2&q=shoes"]);
    // Another page is another entry.
    s.origin.set(
        "/search?page=3&q=shoes",
        Reply::ok("more").header("cache-control", "max-age=60"),
    );
    let third = client.get(&s.proxy.url("/search?q=shoes&page=3")).await;
    assert_eq!(third.text(), "more");
}

#[tokio::test]
async fn site_keeps_rfc_protection_for_authorization() {
    let s = shared();
    let path = "/account/summary";
    s.origin.set(
        path,
        Reply::echo("authorization").header("cache-control", "max-age=60"),
    );
    let client = Client::new();
    let alice = client
        .get_with(&s.proxy.url(path), &[("authorization", "Bearer alice")])
        .await;
    assert!(!alice.is_stored(), "{}", alice.cache_status());
    let bob = client
        .get_with(&s.proxy.url(path), &[("authorization", "Bearer bob")])
        .await;
    assert!(!bob.text().contains("alice"), "{}", bob.text());
    let anonymous = client.get(&s.proxy.url(path)).await;
    assert!(!anonymous.text().contains("alice") && !anonymous.is_hit());
}

#[tokio::test]
async fn site_serves_an_entry_a_day_past_its_freshness_when_the_origin_fails() {
    let mut origin = Origin::start();
    let proxy = site_policy(&origin).start();
    let client = Client::new();
    let path = "/news";
    origin.set(
        path,
        Reply::ok("today's news").header("cache-control", "max-age=1"),
    );
    client.get(&proxy.url(path)).await;
    let stored = client.get(&proxy.url(path)).await;
    assert!(stored.is_hit(), "{}", stored.cache_status());
    tokio::time::sleep(Duration::from_millis(2100)).await;
    // The origin answers 5xx: the stale entry, not the error.
    origin.set(path, Reply::ok("down").status(503));
    let on_5xx = client.get(&proxy.url(path)).await;
    assert_eq!(
        on_5xx.status,
        http::StatusCode::OK,
        "{}",
        on_5xx.cache_status()
    );
    assert_eq!(on_5xx.text(), "today's news");
    assert_eq!(detail(on_5xx.cache_status()), Some("stale-if-error"));
    // The origin refuses connections: the same.
    origin.stop();
    let refused = client.get(&proxy.url(path)).await;
    assert_eq!(
        refused.status,
        http::StatusCode::OK,
        "{}",
        refused.cache_status()
    );
    assert_eq!(refused.text(), "today's news");
    // Without the policy's window, the client gets the failure.
    let plain = ProxyConfig::new(&origin.url()).start();
    let failed = client.get(&plain.url("/anything")).await;
    assert_eq!(failed.status, http::StatusCode::BAD_GATEWAY);
}

/// A route with the rules the example does not use.
fn rules_proxy(origin: &Origin, cache: &str) -> ProxyProcess {
    ProxyConfig::with_upstreams(&format!(
        "[upstreams.o]\nservers = [\"{}\"]\n[[routes]]\nname = \"r\"\nupstream = \"o\"\n{cache}",
        origin.url()
    ))
    .start()
}

#[tokio::test]
async fn a_no_store_condition_looks_up_but_never_stores() {
    let origin = Origin::start();
    let proxy = rules_proxy(
        &origin,
        "[routes.cache]\nadmission = \"off\"\n[routes.cache.no_store]\nheaders = [\"x-preview: 1\"]\n",
    );
    let client = Client::new();
    let path = "/page";
    origin.set(
        path,
        Reply::ok("page").header("cache-control", "max-age=60"),
    );
    let preview = client
        .get_with(&proxy.url(path), &[("x-preview", "1")])
        .await;
    assert_eq!(detail(preview.cache_status()), Some("no-store-header"));
    let normal = client.get(&proxy.url(path)).await;
    assert!(normal.is_stored(), "{}", normal.cache_status());
    let looked_up = client
        .get_with(&proxy.url(path), &[("x-preview", "1")])
        .await;
    assert!(looked_up.is_hit(), "{}", looked_up.cache_status());
}

#[tokio::test]
async fn a_maximum_lifetime_cuts_the_origins() {
    let origin = Origin::start();
    let proxy = rules_proxy(
        &origin,
        "[routes.cache]\nadmission = \"off\"\nmax_ttl = \"10s\"\n",
    );
    let client = Client::new();
    origin.set(
        "/long",
        Reply::ok("x").header("cache-control", "max-age=86400"),
    );
    let first = client.get(&proxy.url("/long")).await;
    assert_eq!(detail(first.cache_status()), Some("policy-clamp"));
    let hit = client.get(&proxy.url("/long")).await;
    let left = ttl(hit.cache_status()).expect("ttl");
    assert!((1..=10).contains(&left), "{}", hit.cache_status());
}

#[tokio::test]
async fn a_large_object_needs_a_second_request_where_the_route_admits_all() {
    let origin = Origin::start();
    let proxy = rules_proxy(
        &origin,
        "[routes.cache]\nadmission = \"off\"\nsecond_hit_above = \"1KiB\"\n",
    );
    let client = Client::new();
    let big = "x".repeat(4096);
    origin.set(
        "/big",
        Reply::ok(&big).header("cache-control", "max-age=60"),
    );
    origin.set(
        "/small",
        Reply::ok("s").header("cache-control", "max-age=60"),
    );
    let small = client.get(&proxy.url("/small")).await;
    assert!(small.is_stored(), "{}", small.cache_status());
    let first = client.get(&proxy.url("/big")).await;
    assert!(!first.is_stored(), "{}", first.cache_status());
    assert_eq!(detail(first.cache_status()), Some("first-hit"));
    let second = client.get(&proxy.url("/big")).await;
    assert!(second.is_stored(), "{}", second.cache_status());
}

#[tokio::test]
async fn browsers_that_accept_the_same_codings_share_a_variant() {
    let origin = Origin::start();
    let proxy = rules_proxy(
        &origin,
        "[routes.cache]\nadmission = \"off\"\n[routes.cache.key]\nnormalize_accept_encoding = true\n",
    );
    let client = Client::new();
    origin.set(
        "/page",
        Reply::echo("accept-encoding")
            .header("cache-control", "max-age=60")
            .header("vary", "Accept-Encoding"),
    );
    let chrome = client
        .get_with(
            &proxy.url("/page"),
            &[("accept-encoding", "gzip, deflate, br, zstd")],
        )
        .await;
    assert!(chrome.is_stored(), "{}", chrome.cache_status());
    let safari = client
        .get_with(
            &proxy.url("/page"),
            &[("accept-encoding", "br;q=1.0, gzip;q=0.8")],
        )
        .await;
    assert!(safari.is_hit(), "{}", safari.cache_status());
    let old = client
        .get_with(&proxy.url("/page"), &[("accept-encoding", "gzip")])
        .await;
    assert!(
        !old.is_hit(),
        "gzip only is another variant: {}",
        old.cache_status()
    );
    let sent: Vec<String> = origin
        .received("/page")
        .iter()
        .filter_map(|r| r.header("accept-encoding").map(str::to_owned))
        .collect();
    assert_eq!(sent, ["br", "gzip"]);
}

#[tokio::test]
async fn a_route_may_share_authorized_responses_by_name() {
    let origin = Origin::start();
    let proxy = rules_proxy(
        &origin,
        "[routes.cache]\nadmission = \"off\"\nshare_authorized = true\n",
    );
    let client = Client::new();
    origin.set(
        "/doc",
        Reply::ok("shared doc").header("cache-control", "max-age=60"),
    );
    let first = client
        .get_with(&proxy.url("/doc"), &[("authorization", "Bearer a")])
        .await;
    assert!(first.is_stored(), "{}", first.cache_status());
    let second = client
        .get_with(&proxy.url("/doc"), &[("authorization", "Bearer b")])
        .await;
    assert!(second.is_hit(), "{}", second.cache_status());
}

#[tokio::test]
async fn keyed_cookies_and_fields_keep_one_visitor_from_anothers_entry() {
    let origin = Origin::start();
    let proxy = rules_proxy(
        &origin,
        "[routes.cache]\nadmission = \"off\"\n[routes.cache.key]\ncookies = [\"lang\"]\nheaders = [\"x-country\"]\n",
    );
    let client = Client::new();
    origin.set(
        "/home",
        Reply::echo("cookie").header("cache-control", "max-age=60"),
    );
    let en = client
        .get_with(
            &proxy.url("/home"),
            &[("cookie", "lang=en"), ("x-country", "DE")],
        )
        .await;
    assert!(en.is_stored(), "{}", en.cache_status());
    let fr = client
        .get_with(
            &proxy.url("/home"),
            &[("cookie", "lang=fr"), ("x-country", "DE")],
        )
        .await;
    assert!(
        !fr.is_hit() && fr.text().contains("lang=fr"),
        "{}",
        fr.text()
    );
    let other_country = client
        .get_with(
            &proxy.url("/home"),
            &[("cookie", "lang=en"), ("x-country", "FR")],
        )
        .await;
    assert!(!other_country.is_hit(), "{}", other_country.cache_status());
    let same = client
        .get_with(
            &proxy.url("/home"),
            &[("cookie", "other=1; lang=en"), ("x-country", "DE")],
        )
        .await;
    assert!(
        same.is_hit() && same.text().contains("lang=en"),
        "{}",
        same.cache_status()
    );
}

#[tokio::test]
async fn a_reload_applies_a_policy_and_a_bad_one_keeps_the_running_configuration() {
    let origin = Origin::start();
    let path = std::env::temp_dir().join(format!(
        "bloomgate-policy-reload-{}.toml",
        std::process::id()
    ));
    let config = site_policy(&origin);
    let proxy = config.start_with_file(&path);
    let client = Client::new();
    origin.set(
        "/api/x",
        Reply::ok("x").header("cache-control", "max-age=60"),
    );
    let bypassed = client.get(&proxy.url("/api/x")).await;
    assert_eq!(detail(bypassed.cache_status()), Some("bypass-route"));

    // The api route cached after all: applied by the reload.
    let cached = config
        .text()
        .replace("enabled = false", "admission = \"off\"");
    std::fs::write(&path, &cached).expect("write config");
    let reply = common::reload(&client, &proxy).await;
    assert_eq!(reply.status, http::StatusCode::OK, "{}", reply.text());
    let stored = client.get(&proxy.url("/api/x")).await;
    assert!(stored.is_stored(), "{}", stored.cache_status());

    // A policy of the wrong type: refused, naming its key, and the running one stays.
    let bad = cached.replace("stale_if_error = \"1d\"", "stale_if_error = 86400");
    std::fs::write(&path, bad).expect("write config");
    let reply = common::reload(&client, &proxy).await;
    assert_eq!(reply.status, http::StatusCode::BAD_REQUEST);
    assert!(
        reply.text().contains("routes[2].cache.stale_if_error"),
        "{}",
        reply.text()
    );
    let hit = client.get(&proxy.url("/api/x")).await;
    assert!(hit.is_hit(), "{}", hit.cache_status());
    let _ = std::fs::remove_file(&path);
}

/// `GET /cache/inspect` for `url`, parsed.
async fn inspect(
    client: &Client,
    proxy: &ProxyProcess,
    url: &str,
    headers: &[(&str, &str)],
) -> serde_json::Value {
    let encoded: String = url
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    let reply = client
        .get_with(
            &proxy.admin_url(&format!("/cache/inspect?url={encoded}")),
            headers,
        )
        .await;
    assert_eq!(reply.status, http::StatusCode::OK, "{}", reply.text());
    serde_json::from_slice(&reply.body).expect("inspect answers JSON")
}

#[tokio::test]
async fn inspect_says_where_an_entry_is_how_fresh_and_which_route_decided() {
    let s = shared();
    let client = Client::new();
    s.origin.set(
        "/static/inspected.css",
        Reply::ok("css").header("surrogate-key", "theme css"),
    );
    s.origin.set(
        "/inspected/page?page=1",
        Reply::ok("p").header("cache-control", "max-age=300"),
    );
    client.get(&s.proxy.url("/static/inspected.css")).await;
    client
        .get(&s.proxy.url("/inspected/page?page=1&utm_source=x"))
        .await;

    let css = inspect(
        &client,
        &s.proxy,
        &s.proxy.url("/static/inspected.css"),
        &[],
    )
    .await;
    assert_eq!(css["stored"], true, "{css}");
    assert_eq!(css["where"], "ram-main", "{css}");
    assert_eq!(css["route"], "static", "{css}");
    assert_eq!(css["policy"]["admission"], "off", "{css}");
    let ttl = css["ttl"].as_i64().expect("ttl");
    assert!((3500..=3600).contains(&ttl), "{css}");
    assert_eq!(
        css["variants"][0]["tags"],
        serde_json::json!(["theme", "css"]),
        "{css}"
    );

    // The URL as a client would ask for it: the key drops what the route's key drops.
    let page = inspect(
        &client,
        &s.proxy,
        &s.proxy.url("/inspected/page?fbclid=1&page=1"),
        &[],
    )
    .await;
    assert_eq!(page["stored"], true, "{page}");
    assert_eq!(page["where"], "ram-probation", "{page}");
    assert_eq!(page["route"], "site", "{page}");
    assert_eq!(page["doorkeeper_seen"], true, "{page}");

    let api = inspect(&client, &s.proxy, &s.proxy.url("/api/anything"), &[]).await;
    assert_eq!(api["stored"], false, "{api}");
    assert_eq!(api["bypassed_by"], "bypass-route", "{api}");
    let never = inspect(&client, &s.proxy, &s.proxy.url("/never/asked"), &[]).await;
    assert_eq!(never["stored"], false, "{never}");
    assert_eq!(never["doorkeeper_seen"], false, "{never}");
    let bad = client
        .get(&s.proxy.admin_url("/cache/inspect?url=%zz"))
        .await;
    assert_eq!(bad.status, http::StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_purge_by_prefix_reaches_every_entry_under_it_and_no_other() {
    let origin = Origin::start();
    let proxy = rules_proxy(&origin, "[routes.cache]\nadmission = \"off\"\n");
    let client = Client::new();
    for path in ["/shop/a", "/shop/b?x=1", "/shopping", "/blog/1"] {
        origin.set(path, Reply::ok(path).header("cache-control", "max-age=600"));
        client.get(&proxy.url(path)).await;
        assert!(client.get(&proxy.url(path)).await.is_hit());
    }
    let host = proxy.addr.to_string();
    let purge = client
        .send(
            http::Method::POST,
            &proxy.admin_url(&format!("/purge/prefix/{host}/shop/")),
            &[],
        )
        .await
        .expect("purge");
    assert_eq!(purge.status, http::StatusCode::OK, "{}", purge.text());
    for path in ["/shop/a", "/shop/b?x=1"] {
        let reply = client.get(&proxy.url(path)).await;
        assert!(!reply.is_hit(), "{path}: {}", reply.cache_status());
    }
    for path in ["/shopping", "/blog/1"] {
        let reply = client.get(&proxy.url(path)).await;
        assert!(reply.is_hit(), "{path}: {}", reply.cache_status());
    }
    // Soft: still there, stale (revalidated before use).
    let soft = client
        .send(
            http::Method::POST,
            &proxy.admin_url(&format!("/purge/prefix/{host}/blog/?soft=1")),
            &[],
        )
        .await
        .expect("purge");
    assert!(soft.text().contains("(soft)"), "{}", soft.text());
    let reply = client.get(&proxy.url("/blog/1")).await;
    assert!(
        has_member(reply.cache_status(), "fwd=stale"),
        "{}",
        reply.cache_status()
    );
}

#[tokio::test]
async fn each_route_counts_its_own_requests_and_hit_ratio() {
    let origin = Origin::start();
    let proxy = site_policy(&origin).start();
    let client = Client::new();
    origin.set("/static/r.css", Reply::ok("r"));
    origin.set("/api/r", Reply::ok("r"));
    for _ in 0..3 {
        client.get(&proxy.url("/static/r.css")).await;
        client.get(&proxy.url("/api/r")).await;
    }
    let scrape = common::scrape_until(&client, &proxy, |scrape| {
        common::metric(scrape, "bloomgate_requests_total{route=\"api\"}") >= 3.0
    })
    .await;
    let series = |labels: &str| {
        common::required_metric(&scrape, &format!("bloomgate_requests_total{{{labels}}}"))
    };
    assert_eq!(series("cache_status=\"hit\",route=\"static\""), 2.0);
    assert_eq!(series("cache_status=\"pass\",route=\"api\""), 3.0);
    assert_eq!(series("cache_status=\"hit\",route=\"site\""), 0.0);
    assert!(
        common::required_metric(&scrape, "bloomgate_cache_hit_bytes_total{route=\"static\"}")
            >= 2.0
    );
    assert!(common::required_metric(&scrape, "bloomgate_origin_bytes_total{route=\"api\"}") >= 3.0);
    let status = client.get(&proxy.admin_url("/status.json")).await;
    let status: serde_json::Value = serde_json::from_slice(&status.body).expect("JSON");
    let routes = status["routes"].as_array().expect("routes");
    let names: Vec<&str> = routes.iter().filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(names, ["static", "api", "site"]);
    assert_eq!(routes[0]["requests"], 3);
    let ratio = routes[0]["hit_ratio"].as_f64().expect("a ratio");
    assert!((ratio - 2.0 / 3.0).abs() < 1e-9, "{ratio}");
    assert_eq!(routes[1]["cached"], false);
}
