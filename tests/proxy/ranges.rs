//! End to end: range requests (RFC 9110 section 14). A stored object answers them itself (206,
//! 416, multipart, `If-Range`); a miss fetches the whole object (no `Range` upstream, counted by
//! admission like any request of it) and cuts the client's range from it as it streams; an object
//! too large to store has its ranges passed to the origin. Against the real binary, a test
//! origin and, when installed, the real `curl -r`.

use crate::common;

use std::time::{Duration, Instant, SystemTime};

use common::{
    Client, ClientReply, Origin, ProxyConfig, ProxyProcess, Reply, TempDir, has_member,
    required_metric,
};
use http::{Method, StatusCode};

/// `n` bytes in which every offset below 251 * 256 holds a different pair of neighbours, so that
/// a slice taken at the wrong offset never passes for the right one.
fn object(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8 ^ (i / 251) as u8).collect()
}

/// A storable object of these bytes: fresh for ten minutes.
fn stored(body: &[u8]) -> Reply {
    Reply::bytes(body).header("cache-control", "max-age=600")
}

/// A test origin, a proxy in front of it that stores every storable response on its first
/// request, and a client.
struct Setup {
    origin: Origin,
    proxy: ProxyProcess,
    client: Client,
}

impl Setup {
    fn storing() -> Setup {
        Setup::with(|_| {})
    }

    /// With more set in the proxy's configuration.
    fn with(configure: impl FnOnce(&mut ProxyConfig)) -> Setup {
        let origin = Origin::start();
        let mut config = ProxyConfig::new(&origin.url());
        config.mode("off");
        configure(&mut config);
        let proxy = config.start();
        Setup {
            origin,
            proxy,
            client: Client::new(),
        }
    }

    async fn get(&self, path: &str, headers: &[(&str, &str)]) -> ClientReply {
        self.client.get_with(&self.proxy.url(path), headers).await
    }

    /// Has the origin answer `path` with `reply`, fetches it whole, which stores it, and checks
    /// that the next request is a hit.
    async fn store(&self, path: &str, reply: Reply) {
        self.origin.set(path, reply);
        let first = self.get(path, &[]).await;
        assert!(first.is_stored(), "{path}: {}", first.cache_status());
        let second = self.get(path, &[]).await;
        assert!(second.is_hit(), "{path}: {}", second.cache_status());
    }
}

/// Panics unless `reply` is a 206 of `body[first..=last]`, named so in `Content-Range`.
fn assert_part(reply: &ClientReply, body: &[u8], first: usize, last: usize) {
    assert_eq!(
        reply.status,
        StatusCode::PARTIAL_CONTENT,
        "{:?} {}",
        reply.headers,
        reply.cache_status()
    );
    assert_eq!(
        reply.header("content-range"),
        Some(format!("bytes {first}-{last}/{}", body.len()).as_str())
    );
    assert_eq!(
        reply.header("content-length"),
        Some((last - first + 1).to_string().as_str())
    );
    assert!(
        reply.body[..] == body[first..=last],
        "the 206 is not bytes {first}-{last} of the object"
    );
}

/// Panics unless `reply` is the whole object, a 200.
fn assert_whole(reply: &ClientReply, body: &[u8]) {
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.cache_status());
    assert_eq!(reply.header("content-range"), None);
    assert!(reply.body[..] == body[..], "not the whole object");
}

#[tokio::test]
async fn a_range_of_a_stored_object_is_a_206_of_exactly_those_bytes() {
    let s = Setup::storing();
    let body = object(1000);
    s.store("/r/single", stored(&body)).await;

    let reply = s.get("/r/single", &[("range", "bytes=100-199")]).await;
    assert_part(&reply, &body, 100, 199);
    assert!(reply.is_hit(), "{}", reply.cache_status());
    assert!(reply.header("age").is_some(), "a hit carries Age");
    assert_eq!(reply.header("accept-ranges"), Some("bytes"));
    assert_eq!(
        s.origin.count("/r/single"),
        1,
        "a range hit must not reach the origin"
    );
    // The whole object from the cache says that ranges of it are served.
    let whole = s.get("/r/single", &[]).await;
    assert_whole(&whole, &body);
    assert_eq!(whole.header("accept-ranges"), Some("bytes"));
}

#[tokio::test]
async fn suffix_and_open_ranges_run_to_the_end_of_the_object() {
    let s = Setup::storing();
    let body = object(1000);
    s.store("/r/ends", stored(&body)).await;

    for (range, first, last) in [
        ("bytes=-100", 900, 999),
        ("bytes=990-", 990, 999),
        ("bytes=0-", 0, 999),
        ("bytes=-5000", 0, 999),
        ("bytes=998-5000", 998, 999),
        ("bytes=0-0", 0, 0),
    ] {
        let reply = s.get("/r/ends", &[("range", range)]).await;
        assert_part(&reply, &body, first, last);
        assert!(reply.is_hit(), "{range}: {}", reply.cache_status());
    }
}

#[tokio::test]
async fn a_range_beyond_the_object_is_416_with_its_length() {
    let s = Setup::storing();
    let body = object(1000);
    s.store("/r/416", stored(&body)).await;

    for range in [
        "bytes=1000-",
        "bytes=5000-6000",
        "bytes=-0",
        "bytes=1000-1001, 2000-",
    ] {
        let reply = s.get("/r/416", &[("range", range)]).await;
        assert_eq!(reply.status, StatusCode::RANGE_NOT_SATISFIABLE, "{range}");
        assert_eq!(
            reply.header("content-range"),
            Some("bytes */1000"),
            "{range}"
        );
        assert!(reply.body.is_empty(), "{range}");
        assert!(reply.is_hit(), "{range}: {}", reply.cache_status());
    }
    assert_eq!(s.origin.count("/r/416"), 1);
}

#[tokio::test]
async fn an_invalid_range_or_another_unit_is_ignored() {
    let s = Setup::storing();
    let body = object(1000);
    s.store("/r/invalid", stored(&body)).await;

    for range in [
        "bytes=5-1",
        "bytes=abc",
        "items=0-1",
        "bytes 0-1",
        "bytes=0-1,x",
        "bytes=",
    ] {
        let reply = s.get("/r/invalid", &[("range", range)]).await;
        assert_whole(&reply, &body);
        assert!(reply.is_hit(), "{range}: {}", reply.cache_status());
    }
}

#[tokio::test]
async fn if_range_with_the_current_strong_etag_gets_the_range_and_any_other_the_whole() {
    let s = Setup::storing();
    let body = object(1000);
    s.store("/r/etag", stored(&body).header("etag", "\"v1\""))
        .await;
    s.store("/r/weak", stored(&body).header("etag", "W/\"v1\""))
        .await;

    let range = ("range", "bytes=10-19");
    let matching = s.get("/r/etag", &[range, ("if-range", "\"v1\"")]).await;
    assert_part(&matching, &body, 10, 19);
    for validator in ["\"v0\"", "W/\"v1\"", "\"v1\", \"v0\""] {
        let reply = s.get("/r/etag", &[range, ("if-range", validator)]).await;
        assert_whole(&reply, &body);
        assert!(reply.is_hit(), "{validator}: {}", reply.cache_status());
    }
    // A weak entity-tag never matches by the strong comparison If-Range uses.
    let weak = s.get("/r/weak", &[range, ("if-range", "W/\"v1\"")]).await;
    assert_whole(&weak, &body);
    assert_eq!(s.origin.count("/r/etag") + s.origin.count("/r/weak"), 2);
}

#[tokio::test]
async fn if_range_with_a_date_gets_the_range_only_for_the_exact_strong_last_modified() {
    let s = Setup::storing();
    let body = object(1000);
    let now = SystemTime::now();
    let modified = httpdate::fmt_http_date(now - Duration::from_secs(3600));
    let date = httpdate::fmt_http_date(now);
    s.store(
        "/r/date",
        stored(&body)
            .header("last-modified", &modified)
            .header("date", &date),
    )
    .await;
    // Modified in the second the response was sent: the date is a weak validator.
    s.store(
        "/r/same-second",
        stored(&body)
            .header("last-modified", &date)
            .header("date", &date),
    )
    .await;

    let range = ("range", "bytes=0-9");
    let exact = s.get("/r/date", &[range, ("if-range", &modified)]).await;
    assert_part(&exact, &body, 0, 9);
    let earlier = httpdate::fmt_http_date(now - Duration::from_secs(7200));
    let other = s.get("/r/date", &[range, ("if-range", &earlier)]).await;
    assert_whole(&other, &body);
    let weak = s.get("/r/same-second", &[range, ("if-range", &date)]).await;
    assert_whole(&weak, &body);
}

#[tokio::test]
async fn several_ranges_are_multipart_and_abusive_sets_get_the_whole_object() {
    let s = Setup::storing();
    let body = object(1000);
    s.store(
        "/r/multi",
        stored(&body).header("content-type", "video/mp4"),
    )
    .await;

    let reply = s
        .get("/r/multi", &[("range", "bytes=0-9, 100-109, -10")])
        .await;
    assert_eq!(reply.status, StatusCode::PARTIAL_CONTENT);
    assert!(reply.is_hit(), "{}", reply.cache_status());
    assert_eq!(
        reply.header("content-range"),
        None,
        "a multipart 206 has no Content-Range"
    );
    assert_eq!(
        reply.header("content-length"),
        Some(reply.body.len().to_string().as_str())
    );
    let parts = reply.multipart_parts();
    let expected = [(0, 9), (100, 109), (990, 999)];
    assert_eq!(parts.len(), expected.len());
    for ((content_range, bytes), (first, last)) in parts.iter().zip(expected) {
        assert_eq!(content_range, &format!("bytes {first}-{last}/1000"));
        assert!(bytes[..] == body[first..=last], "part {first}-{last}");
    }
    assert!(String::from_utf8_lossy(&reply.body).contains("content-type: video/mp4\r\n"));

    // Touching ranges are one part.
    let joined = s.get("/r/multi", &[("range", "bytes=0-9,10-19")]).await;
    assert_part(&joined, &body, 0, 19);

    // The "Apache killer" shapes: overlapping, repeated, descending, or many small ranges are
    // answered with the object once, never with more bytes than it has.
    let many: Vec<String> = (0..20).map(|i| format!("{}-{}", i * 20, i * 20)).collect();
    let repeated = vec!["0-"; 50].join(",");
    for range in [
        "bytes=0-99,50-149".to_owned(),
        format!("bytes={repeated}"),
        "bytes=500-509,0-9".to_owned(),
        format!("bytes={}", many.join(",")),
    ] {
        let reply = s.get("/r/multi", &[("range", &range)]).await;
        assert_whole(&reply, &body);
        assert!(reply.is_hit(), "{range}: {}", reply.cache_status());
    }
    assert_eq!(s.origin.count("/r/multi"), 1);
}

#[tokio::test]
async fn head_ignores_the_range() {
    let s = Setup::storing();
    let body = object(1000);
    s.store("/r/head", stored(&body)).await;

    let reply = s
        .client
        .send(
            Method::HEAD,
            &s.proxy.url("/r/head"),
            &[("range", "bytes=0-9")],
        )
        .await
        .expect("HEAD");
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("content-length"), Some("1000"));
    assert_eq!(reply.header("content-range"), None);
    assert!(reply.body.is_empty());
    assert!(reply.is_hit(), "{}", reply.cache_status());
}

#[tokio::test]
async fn a_matching_if_none_match_answers_304_before_the_range_is_looked_at() {
    let s = Setup::storing();
    let body = object(1000);
    s.store("/r/304", stored(&body).header("etag", "\"v1\""))
        .await;
    s.origin
        .set("/r/304-miss", stored(&body).header("etag", "\"v1\""));

    let conditional = [("range", "bytes=0-9"), ("if-none-match", "\"v1\"")];
    let hit = s.get("/r/304", &conditional).await;
    assert_eq!(
        hit.status,
        StatusCode::NOT_MODIFIED,
        "{}",
        hit.cache_status()
    );
    let miss = s.get("/r/304-miss", &conditional).await;
    assert_eq!(
        miss.status,
        StatusCode::NOT_MODIFIED,
        "{}",
        miss.cache_status()
    );
    let changed = [("range", "bytes=0-9"), ("if-none-match", "\"v0\"")];
    let reply = s.get("/r/304", &changed).await;
    assert_part(&reply, &body, 0, 9);
}

/// Panics unless no request the origin received for `path` asked for a range.
fn assert_origin_got_whole_requests(origin: &Origin, path: &str) {
    for received in origin.received(path) {
        assert_eq!(received.method, "GET");
        assert_eq!(received.header("range"), None, "{received:?}");
        assert_eq!(received.header("if-range"), None, "{received:?}");
    }
}

#[tokio::test]
async fn a_range_miss_fetches_the_whole_object_and_counts_as_a_request_of_it() {
    let s = Setup::with(|config| {
        config.mode("second-hit");
    });
    let body = object(5000);
    s.origin
        .set("/r/admission", stored(&body).header("etag", "\"v1\""));
    let ranged = [("range", "bytes=1000-1999"), ("if-range", "\"v1\"")];

    let first = s.get("/r/admission", &ranged).await;
    assert_part(&first, &body, 1000, 1999);
    assert_eq!(
        first.cache_status(),
        "bloomgate; fwd=miss; detail=first-hit"
    );
    let second = s.get("/r/admission", &ranged).await;
    assert_part(&second, &body, 1000, 1999);
    assert_eq!(second.cache_status(), "bloomgate; fwd=miss; stored");
    assert_eq!(s.origin.count("/r/admission"), 2);
    assert_origin_got_whole_requests(&s.origin, "/r/admission");

    // Stored once the origin has sent all of it, after the client had its part.
    let deadline = Instant::now() + Duration::from_secs(5);
    let third = loop {
        let reply = s.get("/r/admission", &[("range", "bytes=-10")]).await;
        if reply.is_hit() || Instant::now() > deadline {
            break reply;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(third.is_hit(), "{}", third.cache_status());
    assert_part(&third, &body, 4990, 4999);
    assert_eq!(s.origin.count("/r/admission"), 2);
}

#[tokio::test]
async fn suffix_multipart_and_unsatisfiable_ranges_are_cut_from_a_miss_too() {
    let s = Setup::with(|config| {
        config.mode("second-hit");
    });
    let body = object(3000);
    for path in ["/r/miss-suffix", "/r/miss-multi", "/r/miss-416"] {
        s.origin.set(path, stored(&body));
    }
    s.origin.set("/r/miss-chunked", stored(&body).chunked());

    let suffix = s.get("/r/miss-suffix", &[("range", "bytes=-300")]).await;
    assert_part(&suffix, &body, 2700, 2999);
    let multi = s
        .get("/r/miss-multi", &[("range", "bytes=5-9,2000-2009")])
        .await;
    assert_eq!(multi.status, StatusCode::PARTIAL_CONTENT);
    let parts = multi.multipart_parts();
    assert_eq!(parts.len(), 2);
    assert!(parts[0].1[..] == body[5..=9] && parts[1].1[..] == body[2000..=2009]);
    let beyond = s.get("/r/miss-416", &[("range", "bytes=3000-")]).await;
    assert_eq!(beyond.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(beyond.header("content-range"), Some("bytes */3000"));
    // A body of unknown length is read whole (it is within the limit) and the range cut from it.
    let chunked = s.get("/r/miss-chunked", &[("range", "bytes=-300")]).await;
    assert_part(&chunked, &body, 2700, 2999);
    for reply in [&suffix, &multi, &beyond, &chunked] {
        assert_eq!(
            reply.cache_status(),
            "bloomgate; fwd=miss; detail=first-hit"
        );
    }
    for path in [
        "/r/miss-suffix",
        "/r/miss-multi",
        "/r/miss-416",
        "/r/miss-chunked",
    ] {
        assert_eq!(s.origin.count(path), 1, "{path}");
        assert_origin_got_whole_requests(&s.origin, path);
    }
}

#[tokio::test]
async fn a_range_at_the_start_of_a_miss_arrives_before_the_rest_of_the_object() {
    let s = Setup::storing();
    let body = object(300);
    // One byte every 10 ms: the whole object takes 3 s to arrive.
    s.origin
        .set("/r/trickle", stored(&body).paced(Duration::from_millis(10)));

    let started = Instant::now();
    let reply = s.get("/r/trickle", &[("range", "bytes=0-9")]).await;
    let took = started.elapsed();
    assert_part(&reply, &body, 0, 9);
    assert!(
        took < Duration::from_millis(1500),
        "the first 10 bytes took {took:?}: the proxy waited for the whole object"
    );
    assert_eq!(reply.cache_status(), "bloomgate; fwd=miss; stored");

    // The rest is still read for the store (a request now would wait on that fetch), which then
    // answers every range.
    let scrape = common::scrape_until(&s.client, &s.proxy, |scrape| {
        common::over_segments(scrape, "bloomgate_cache_writes_total") >= 1.0
    })
    .await;
    assert_eq!(
        common::over_segments(&scrape, "bloomgate_cache_writes_total"),
        1.0
    );
    let later = s.get("/r/trickle", &[("range", "bytes=290-")]).await;
    assert!(later.is_hit(), "{}", later.cache_status());
    assert_part(&later, &body, 290, 299);
    assert_eq!(s.origin.count("/r/trickle"), 1);
}

#[tokio::test]
async fn concurrent_ranges_of_one_uncached_object_share_one_fetch() {
    let s = Setup::storing();
    let body = object(64 * 1024);
    s.origin.set(
        "/r/concurrent",
        stored(&body).delay(Duration::from_millis(500)),
    );
    let ranges = [
        (0, 99),
        (1000, 1999),
        (60_000, 65_535),
        (12_345, 12_345),
        (30_000, 40_000),
        (65_000, 65_535),
    ];
    let mut requests = tokio::task::JoinSet::new();
    for (first, last) in ranges {
        let client = Client::new();
        let url = s.proxy.url("/r/concurrent");
        requests.spawn(async move {
            let range = format!("bytes={first}-{last}");
            let reply = client.get_with(&url, &[("range", &range)]).await;
            (first, last, reply)
        });
    }
    let mut collapsed = 0;
    while let Some(done) = requests.join_next().await {
        let (first, last, reply) = done.expect("request task");
        assert_part(&reply, &body, first, last);
        if has_member(reply.cache_status(), "collapsed") {
            collapsed += 1;
        }
    }
    assert_eq!(
        s.origin.count("/r/concurrent"),
        1,
        "one origin fetch for all"
    );
    assert_origin_got_whole_requests(&s.origin, "/r/concurrent");
    assert_eq!(
        collapsed,
        ranges.len() - 1,
        "every request but the leader waited for it"
    );
}

#[tokio::test]
async fn a_range_of_an_object_larger_than_the_largest_stored_is_passed_to_the_origin() {
    let s = Setup::with(|config| {
        config.set("cache", "max_object_bytes", "\"1KiB\"");
    });
    let body = object(4096);
    s.origin.set("/r/large", stored(&body).serves_ranges());
    s.origin
        .set("/r/large-chunked", stored(&body).serves_ranges().chunked());

    for path in ["/r/large", "/r/large-chunked"] {
        let reply = s.get(path, &[("range", "bytes=100-199")]).await;
        assert_part(&reply, &body, 100, 199);
        assert_eq!(
            reply.cache_status(),
            "bloomgate; fwd=bypass; detail=too-large",
            "{path}"
        );
        // The fetch of the whole object, given up at its head (or its first KiB), then the range.
        let received = s.origin.received(path);
        assert_eq!(received.len(), 2, "{path}: {received:?}");
        assert_eq!(received[0].header("range"), None);
        assert_eq!(received[1].header("range"), Some("bytes=100-199"));
    }
}

#[tokio::test]
async fn concurrent_ranges_of_a_too_large_object_are_passed_after_one_whole_fetch() {
    let s = Setup::with(|config| {
        config.set("cache", "max_object_bytes", "\"1KiB\"");
    });
    let body = object(4096);
    s.origin.set(
        "/r/large-concurrent",
        stored(&body)
            .serves_ranges()
            .delay(Duration::from_millis(500)),
    );
    let mut requests = tokio::task::JoinSet::new();
    for first in [0, 1000, 2000, 3000] {
        let client = Client::new();
        let url = s.proxy.url("/r/large-concurrent");
        requests.spawn(async move {
            let range = format!("bytes={first}-{}", first + 99);
            (first, client.get_with(&url, &[("range", &range)]).await)
        });
    }
    while let Some(done) = requests.join_next().await {
        let (first, reply) = done.expect("request task");
        assert_part(&reply, &body, first, first + 99);
        assert!(
            has_member(reply.cache_status(), "fwd=bypass"),
            "{}",
            reply.cache_status()
        );
    }
    // The leader's whole fetch, given up at its head; then each range once, the waiters' without
    // a whole fetch of their own.
    let received = s.origin.received("/r/large-concurrent");
    let whole = received
        .iter()
        .filter(|r| r.header("range").is_none())
        .count();
    assert_eq!((whole, received.len()), (1, 5), "{received:?}");
}

#[tokio::test]
async fn a_range_of_a_response_that_is_not_stored_is_cut_from_it_or_passed() {
    let s = Setup::storing();
    let body = object(2000);
    let private = |reply: Reply| reply.header("cache-control", "private").serves_ranges();
    s.origin.set("/r/private", private(Reply::bytes(&body)));
    s.origin
        .set("/r/private-chunked", private(Reply::bytes(&body).chunked()));

    // Its length is known and within what the cache would read: cut from the one fetch.
    let known = s.get("/r/private", &[("range", "bytes=10-19")]).await;
    assert_part(&known, &body, 10, 19);
    assert_eq!(known.cache_status(), "bloomgate; fwd=miss; detail=private");
    assert_eq!(s.origin.count("/r/private"), 1);
    assert_origin_got_whole_requests(&s.origin, "/r/private");

    // Of unknown length: the origin answers the range.
    let unknown = s
        .get("/r/private-chunked", &[("range", "bytes=10-19")])
        .await;
    assert_part(&unknown, &body, 10, 19);
    assert_eq!(
        unknown.cache_status(),
        "bloomgate; fwd=bypass; detail=private"
    );
    let received = s.origin.received("/r/private-chunked");
    assert_eq!(received.len(), 2);
    assert_eq!(received[1].header("range"), Some("bytes=10-19"));
}

#[tokio::test]
async fn a_206_from_the_origin_is_forwarded_as_it_is_and_never_stored() {
    let s = Setup::storing();
    // An origin that answers 206 whatever it is asked.
    s.origin.set(
        "/r/origin-206",
        Reply::ok("0123456789")
            .status(206)
            .header("content-range", "bytes 0-9/100")
            .header("cache-control", "max-age=600"),
    );
    for _ in 0..2 {
        let reply = s.get("/r/origin-206", &[("range", "bytes=0-9")]).await;
        assert_eq!(reply.status, StatusCode::PARTIAL_CONTENT);
        assert_eq!(reply.header("content-range"), Some("bytes 0-9/100"));
        assert_eq!(reply.text(), "0123456789");
        assert_eq!(reply.cache_status(), "bloomgate; fwd=miss; detail=status");
    }
    let plain = s.get("/r/origin-206", &[]).await;
    assert!(!plain.is_hit(), "{}", plain.cache_status());
    assert_eq!(s.origin.count("/r/origin-206"), 3);
}

#[tokio::test]
async fn hit_bytes_count_the_bytes_of_the_part_sent() {
    let s = Setup::storing();
    let body = object(1000);
    s.origin.set("/r/bytes", stored(&body));
    let first = s.get("/r/bytes", &[]).await;
    assert!(first.is_stored(), "{}", first.cache_status());

    let hit_bytes = |scrape: &str| required_metric(scrape, "bloomgate_cache_hit_bytes_total");
    let part = s.get("/r/bytes", &[("range", "bytes=100-199")]).await;
    assert_part(&part, &body, 100, 199);
    let unsatisfiable = s.get("/r/bytes", &[("range", "bytes=1000-")]).await;
    assert_eq!(unsatisfiable.status, StatusCode::RANGE_NOT_SATISFIABLE);
    let scrape = s.client.get(&s.proxy.admin_url("/metrics")).await.text();
    assert_eq!(hit_bytes(&scrape), 100.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_of_an_object_on_the_disk_tier_is_cut_from_the_disk_copy() {
    let origin = Origin::start();
    let dir = TempDir::new("ranges-disk");
    let mut config = ProxyConfig::new(&origin.url());
    config
        .mode("probation")
        .set("server", "shutdown_grace", "\"5s\"")
        .set("cache.key", "include_host", "false")
        .set(
            "disk",
            "path",
            &format!("{:?}", dir.path().to_str().expect("utf-8")),
        )
        .set("disk", "max_bytes", "\"16MiB\"")
        .set("disk", "block_bytes", "\"1MiB\"")
        .set("disk", "write_buffer", "\"4MiB\"")
        .set("cache", "max_object_bytes", "\"64KiB\"");
    let body = object(20_000);
    origin.set("/r/disk", stored(&body));
    let proxy = config.start();
    let client = Client::new();
    // The second request is a hit in probation, which proves the object: the stop writes it.
    for proof in ["stored", "hit"] {
        let reply = client.get(&proxy.url("/r/disk")).await;
        assert!(
            has_member(reply.cache_status(), proof),
            "{}",
            reply.cache_status()
        );
    }
    let log = proxy.terminate();
    assert!(!log.contains("not every entry was written"), "{log}");

    let proxy = config.start();
    let reply = client
        .get_with(&proxy.url("/r/disk"), &[("range", "bytes=15000-15999")])
        .await;
    assert_part(&reply, &body, 15000, 15999);
    assert!(
        reply.is_hit() && has_member(reply.cache_status(), "detail=disk"),
        "{}",
        reply.cache_status()
    );
    assert_eq!(origin.count("/r/disk"), 1);
}

fn curl_installed() -> bool {
    match std::process::Command::new("curl").arg("--version").output() {
        Ok(output) => output.status.success(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => false,
        Err(error) => panic!("running curl: {error}"),
    }
}

/// `curl -r range url`: the response head (lower-cased) and body.
fn curl_range(url: &str, range: &str) -> (String, Vec<u8>) {
    let output = std::process::Command::new("curl")
        .args(["-s", "-S", "-i", "--http1.1", "-r", range, url])
        .output()
        .expect("run curl");
    assert!(
        output.status.success(),
        "curl -r {range} failed: {output:?}"
    );
    let response = output.stdout;
    let head_end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&response[..head_end]).to_lowercase();
    (head, response[head_end + 4..].to_vec())
}

/// Panics unless curl's response is a 206 of `body[first..=last]`.
fn assert_curl_part(head: &str, bytes: &[u8], body: &[u8], first: usize, last: usize) {
    assert!(head.starts_with("http/1.1 206"), "{head}");
    let content_range = format!("content-range: bytes {first}-{last}/{}", body.len());
    assert!(head.contains(&content_range), "{head}");
    assert!(
        bytes == &body[first..=last],
        "curl did not get bytes {first}-{last}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_r_gets_its_range_on_a_miss_on_a_hit_and_several_at_once() {
    if !curl_installed() {
        eprintln!("curl is not installed: the curl -r test is skipped");
        return;
    }
    let s = Setup::storing();
    let body = object(10_000);
    s.origin.set(
        "/r/curl",
        stored(&body).header("content-type", "application/octet-stream"),
    );
    let url = s.proxy.url("/r/curl");
    let (head, bytes) = curl_blocking(&url, "2000-2999").await;
    assert_curl_part(&head, &bytes, &body, 2000, 2999);
    assert!(
        head.contains("cache-status: bloomgate; fwd=miss; stored"),
        "{head}"
    );
    // The object is stored once the origin has sent all of it, just after the part went out.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (head, bytes) = curl_blocking(&url, "-500").await;
    assert_curl_part(&head, &bytes, &body, 9500, 9999);
    assert!(head.contains("cache-status: bloomgate; hit"), "{head}");
    assert_eq!(s.origin.count("/r/curl"), 1);

    // A download manager's parallel segments of an object not yet cached: one origin fetch.
    let body = object(100_000);
    s.origin.set(
        "/r/curl-segments",
        stored(&body).delay(Duration::from_millis(500)),
    );
    let url = s.proxy.url("/r/curl-segments");
    let segments: Vec<(usize, usize)> = (0..4).map(|i| (i * 25_000, i * 25_000 + 24_999)).collect();
    let mut curls = tokio::task::JoinSet::new();
    for (first, last) in segments.clone() {
        let url = url.clone();
        curls.spawn(async move {
            (
                first,
                last,
                curl_blocking(&url, &format!("{first}-{last}")).await,
            )
        });
    }
    let mut assembled = vec![0u8; body.len()];
    while let Some(done) = curls.join_next().await {
        let (first, last, (head, bytes)) = done.expect("curl task");
        assert_curl_part(&head, &bytes, &body, first, last);
        assembled[first..=last].copy_from_slice(&bytes);
    }
    assert!(assembled == body, "the segments do not make up the object");
    assert_eq!(s.origin.count("/r/curl-segments"), 1);
}

/// [`curl_range`] off the runtime's threads.
async fn curl_blocking(url: &str, range: &str) -> (String, Vec<u8>) {
    let (url, range) = (url.to_owned(), range.to_owned());
    tokio::task::spawn_blocking(move || curl_range(&url, &range))
        .await
        .expect("curl task")
}
