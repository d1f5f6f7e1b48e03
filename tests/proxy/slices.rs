//! End to end: large objects cached in slices (`cache.slice_above`, `cache.slice_bytes`). Each
//! slice is fetched with `Range`, admitted on its own second request, and the client's answer,
//! whole or ranged, is assembled from the slices in order; an answer never mixes two versions of
//! the object. Against the real binary and a test origin that serves ranges.

use crate::common;

use common::{Client, ClientReply, Origin, ProxyConfig, ProxyProcess, Reply, metric};
use http::{Method, StatusCode};

/// 64 KiB slices (the smallest allowed), objects above 100 KiB sliced.
const SLICE: usize = 64 << 10;

/// Five slices, the last one short.
const LENGTH: usize = 4 * SLICE + 1000;

/// `n` bytes of `version` in which every offset below 251 * 256 holds a different pair of
/// neighbours, so that a slice taken at the wrong offset never passes for the right one.
fn object(n: usize, version: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i % 251) as u8 ^ (i / 251) as u8 ^ version.wrapping_mul(85))
        .collect()
}

/// An origin's reply: these bytes, storable, with a strong ETag, ranges served.
fn ranged(body: &[u8], etag: &str) -> Reply {
    Reply::bytes(body)
        .header("cache-control", "max-age=600")
        .header("etag", etag)
        .serves_ranges()
}

struct Setup {
    origin: Origin,
    proxy: ProxyProcess,
    client: Client,
}

impl Setup {
    /// A proxy slicing objects above 100 KiB in 64 KiB slices, admitting as `mode` says.
    fn slicing(mode: &str) -> Setup {
        let origin = Origin::start();
        let mut config = ProxyConfig::new(&origin.url());
        config
            .mode(mode)
            .set("cache", "slice_above", "\"100KiB\"")
            .set("cache", "slice_bytes", "\"64KiB\"");
        Setup {
            proxy: config.start(),
            origin,
            client: Client::new(),
        }
    }

    async fn get(&self, path: &str, headers: &[(&str, &str)]) -> ClientReply {
        self.client.get_with(&self.proxy.url(path), headers).await
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<ClientReply, String> {
        self.client
            .send(method, &self.proxy.url(path), headers)
            .await
    }

    async fn scrape(&self) -> String {
        self.client
            .get(&self.proxy.admin_url("/metrics"))
            .await
            .text()
    }

    /// The `Range` fields the origin received for `path`, in order (`-` for none).
    fn ranges_asked(&self, path: &str) -> Vec<String> {
        self.origin
            .received(path)
            .iter()
            .map(|request| request.header("range").unwrap_or("-").to_owned())
            .collect()
    }
}

fn slice_hits(reply: &ClientReply, hits: usize, of: usize) -> bool {
    reply
        .cache_status()
        .contains(&format!("detail=slice-hits-{hits}-of-{of}"))
}

/// Panics unless `reply` is a 206 of `body[first..=last]`.
fn assert_part(reply: &ClientReply, body: &[u8], first: usize, last: usize) {
    assert_eq!(
        reply.status,
        StatusCode::PARTIAL_CONTENT,
        "{:?}",
        reply.headers
    );
    assert_eq!(
        reply.header("content-range"),
        Some(format!("bytes {first}-{last}/{}", body.len()).as_str())
    );
    assert!(
        reply.body[..] == body[first..=last],
        "the bytes of the range"
    );
}

#[tokio::test]
async fn a_large_object_is_fetched_in_aligned_slices_each_stored_on_its_second_request() {
    let setup = Setup::slicing("second-hit");
    let body = object(LENGTH, 1);
    setup.origin.set("/big", ranged(&body, "\"v1\""));

    let first = setup.get("/big", &[]).await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(first.body[..] == body[..], "the whole object, in order");
    assert_eq!(first.header("content-length"), Some("263144"));
    assert!(slice_hits(&first, 0, 5), "{}", first.cache_status());
    let slices: Vec<String> = (0..5)
        .map(|i| {
            let last = ((i + 1) * SLICE).min(LENGTH) - 1;
            format!("bytes={}-{last}", i * SLICE)
        })
        .collect();
    assert_eq!(
        setup.ranges_asked("/big"),
        slices,
        "each slice once, the first one the first contact that found it large"
    );

    let second = setup.get("/big", &[]).await;
    assert!(second.body[..] == body[..]);
    assert!(slice_hits(&second, 0, 5), "{}", second.cache_status());
    assert_eq!(
        setup.origin.count("/big"),
        10,
        "first requests of slices are not stored"
    );

    let third = setup.get("/big", &[]).await;
    assert!(third.body[..] == body[..]);
    assert!(third.is_hit(), "{}", third.cache_status());
    assert!(slice_hits(&third, 5, 5), "{}", third.cache_status());
    let ranged = setup.get("/big", &[("range", "bytes=70000-140000")]).await;
    assert_part(&ranged, &body, 70000, 140000);
    assert!(slice_hits(&ranged, 2, 2), "{}", ranged.cache_status());
    assert_eq!(setup.origin.count("/big"), 10, "every slice from the cache");

    let scrape = setup.scrape().await;
    assert_eq!(
        metric(&scrape, "bloomgate_slices_total{event=\"stored\"}"),
        5.0
    );
    assert_eq!(
        metric(&scrape, "bloomgate_slices_total{event=\"first_hit\"}"),
        5.0
    );
    assert_eq!(
        metric(&scrape, "bloomgate_slice_origin_bytes_total"),
        2.0 * LENGTH as f64
    );
    let status = setup
        .client
        .get(&setup.proxy.admin_url("/status.json"))
        .await;
    let status: serde_json::Value = serde_json::from_slice(&status.body).expect("JSON");
    assert_eq!(
        status["slices"]["stored"], 5,
        "the status page counts slices"
    );
    assert_eq!(status["slice_origin_bytes"], 2 * LENGTH);
}

#[tokio::test]
async fn only_the_slices_asked_for_again_take_space() {
    let setup = Setup::slicing("second-hit");
    let body = object(LENGTH, 1);
    setup.origin.set("/video", ranged(&body, "\"v1\""));
    // Everyone watches the start; the rest is asked for once.
    for _ in 0..2 {
        let start = setup.get("/video", &[("range", "bytes=0-999")]).await;
        assert_part(&start, &body, 0, 999);
    }
    let whole = setup.get("/video", &[]).await;
    assert!(whole.body[..] == body[..]);
    assert!(slice_hits(&whole, 1, 5), "{}", whole.cache_status());
}

#[tokio::test]
async fn an_object_changed_between_slices_is_never_answered_with_two_versions() {
    let setup = Setup::slicing("off");
    let v1 = object(LENGTH, 1);
    let v2 = object(LENGTH, 2);
    setup.origin.set("/disk.img", ranged(&v1, "\"v1\""));
    let start = setup.get("/disk.img", &[("range", "bytes=0-99")]).await;
    assert_part(&start, &v1, 0, 99);

    setup.origin.set("/disk.img", ranged(&v2, "\"v2\""));
    // Slice 0 is stored (v1): the head goes out for v1, and slice 1 comes back as v2.
    match setup.send(Method::GET, "/disk.img", &[]).await {
        Ok(reply) => panic!(
            "a whole answer of {} bytes where the object changed under it",
            reply.body.len()
        ),
        Err(error) => assert!(error.contains("body failed"), "{error}"),
    }
    // The stale slices were dropped: the next answer is the new version, whole.
    let again = setup.get("/disk.img", &[]).await;
    assert!(again.body[..] == v2[..], "the new version, whole");
    assert_eq!(again.header("etag"), Some("\"v2\""));

    // A change found on the first slice an answer needs is answered from the new version.
    setup
        .origin
        .set("/disk.img", ranged(&object(LENGTH, 3), "\"v3\""));
    let part = setup
        .get("/disk.img", &[("range", "bytes=200000-200009")])
        .await;
    let stored = setup.get("/disk.img", &[("range", "bytes=0-9")]).await;
    assert_part(&stored, &v2, 0, 9);
    assert_part(&part, &v2, 200000, 200009);
    let scrape = setup.scrape().await;
    assert!(metric(&scrape, "bloomgate_slices_total{event=\"changed\"}") >= 1.0);
}

#[tokio::test]
async fn a_change_met_on_the_first_slice_is_refetched_consistently() {
    let setup = Setup::slicing("off");
    let v1 = object(LENGTH, 1);
    let v2 = object(LENGTH, 2);
    setup.origin.set("/iso", ranged(&v1, "\"v1\""));
    let tail = setup.get("/iso", &[("range", "bytes=-10")]).await;
    assert_part(&tail, &v1, LENGTH - 10, LENGTH - 1);

    setup.origin.set("/iso", ranged(&v2, "\"v2\""));
    // Slice 0 is stored by the first contact: the first slice this answer fetches is slice 1.
    let start = setup.get("/iso", &[("range", "bytes=70000-70099")]).await;
    assert_part(&start, &v2, 70000, 70099);
    assert_eq!(start.header("etag"), Some("\"v2\""));
    let tail = setup.get("/iso", &[("range", "bytes=-10")]).await;
    assert_part(&tail, &v2, LENGTH - 10, LENGTH - 1);
}

/// `ranged`, fresh for `seconds`, answering a matching `If-None-Match` with a 304.
fn revalidating(body: &[u8], etag: &str, seconds: u64) -> Reply {
    Reply::bytes(body)
        .header("cache-control", &format!("max-age={seconds}"))
        .header("etag", etag)
        .serves_ranges()
        .answers_304()
}

/// Whether the origin's request `received` asked for a slice on condition.
fn conditional(received: &common::origin::Received) -> bool {
    received.header("if-none-match").is_some()
}

#[tokio::test]
async fn stale_slices_are_revalidated_by_one_conditional_request_not_refetched() {
    let setup = Setup::slicing("off");
    let body = object(LENGTH, 1);
    setup.origin.set("/film", revalidating(&body, "\"v1\"", 2));
    let first = setup.get("/film", &[]).await;
    assert!(first.body[..] == body[..]);
    let fetched = setup.origin.received("/film").len();
    // Stale: every slice is past its max-age.
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;

    let again = setup.get("/film", &[]).await;
    assert!(again.body[..] == body[..], "the same bytes, refreshed");
    assert!(slice_hits(&again, 5, 5), "{}", again.cache_status());
    let received = setup.origin.received("/film");
    let since: Vec<_> = received[fetched..].iter().collect();
    assert_eq!(since.len(), 1, "one request for the stale object");
    assert!(conditional(since[0]), "{:?}", since[0].headers);
    assert_eq!(since[0].header("if-none-match"), Some("\"v1\""));
    assert_eq!(since[0].header("range"), Some("bytes=0-65535"));
    let scrape = setup.scrape().await;
    assert_eq!(
        metric(&scrape, "bloomgate_slices_total{event=\"revalidated\"}"),
        5.0,
        "the 304 refreshed every slice as it was met"
    );

    // Refreshed: fresh again, asked of nobody.
    let fresh = setup
        .get("/film", &[("range", "bytes=100000-100009")])
        .await;
    assert_part(&fresh, &body, 100000, 100009);
    assert_eq!(setup.origin.received("/film").len(), fetched + 1);
}

#[tokio::test]
async fn a_stale_object_found_changed_on_revalidation_drops_its_slices() {
    let setup = Setup::slicing("off");
    let v1 = object(LENGTH, 1);
    let v2 = object(LENGTH, 2);
    setup.origin.set("/show", revalidating(&v1, "\"v1\"", 1));
    setup.get("/show", &[]).await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    setup.origin.set("/show", revalidating(&v2, "\"v2\"", 600));

    let changed = setup.get("/show", &[]).await;
    assert!(changed.body[..] == v2[..], "the new version, whole");
    assert_eq!(changed.header("etag"), Some("\"v2\""));
    let received = setup.origin.received("/show");
    assert!(received.iter().any(conditional), "asked on condition first");
    let scrape = setup.scrape().await;
    assert!(metric(&scrape, "bloomgate_slices_total{event=\"changed\"}") >= 1.0);
    assert_eq!(
        metric(&scrape, "bloomgate_slices_total{event=\"revalidated\"}"),
        0.0
    );
}

#[tokio::test]
async fn an_origin_that_ignores_range_is_streamed_whole_and_counted() {
    let setup = Setup::slicing("off");
    let body = object(LENGTH, 1);
    let whole_only = Reply::bytes(&body)
        .header("cache-control", "max-age=600")
        .header("etag", "\"v1\"");
    setup.origin.set("/plain", whole_only);
    for _ in 0..2 {
        let reply = setup.get("/plain", &[]).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert!(reply.body[..] == body[..]);
    }
    let scrape = setup.scrape().await;
    assert_eq!(
        metric(&scrape, "bloomgate_slices_total{event=\"not_ranged\"}"),
        1.0,
        "found once, then streamed as any large object"
    );
    assert_eq!(
        metric(&scrape, "bloomgate_slices_total{event=\"stored\"}"),
        0.0
    );
}

#[tokio::test]
async fn a_wrong_content_range_is_an_error_and_nothing_is_stored() {
    let setup = Setup::slicing("off");
    let body = object(LENGTH, 1);
    setup
        .origin
        .set("/broken", ranged(&body, "\"v1\"").misnames_ranges());
    let reply = setup.get("/broken", &[]).await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    let scrape = setup.scrape().await;
    assert!(metric(&scrape, "bloomgate_slices_total{event=\"wrong_range\"}") >= 1.0);
    assert_eq!(
        metric(&scrape, "bloomgate_slices_total{event=\"stored\"}"),
        0.0
    );
}

#[tokio::test]
async fn a_purge_by_key_removes_every_slice() {
    let setup = Setup::slicing("off");
    let body = object(LENGTH, 1);
    setup.origin.set("/purged", ranged(&body, "\"v1\""));
    setup.get("/purged", &[]).await;
    let hit = setup.get("/purged", &[]).await;
    assert!(slice_hits(&hit, 5, 5), "{}", hit.cache_status());
    let purge = Method::from_bytes(b"PURGE").expect("PURGE is a valid method");
    let host = setup.proxy.addr.to_string();
    let purged = setup
        .client
        .send(purge, &setup.proxy.admin_url("/purged"), &[("host", &host)])
        .await;
    let purged = match purged {
        Ok(reply) => reply,
        Err(error) => panic!("PURGE: {error}"),
    };
    assert_eq!(purged.status, StatusCode::OK, "{}", purged.text());
    let after = setup.get("/purged", &[]).await;
    assert!(after.body[..] == body[..]);
    assert!(slice_hits(&after, 0, 5), "{}", after.cache_status());
}

#[tokio::test]
async fn head_conditionals_if_range_and_multiple_ranges_follow_rfc_9110() {
    let setup = Setup::slicing("off");
    let body = object(LENGTH, 1);
    setup.origin.set("/obj", ranged(&body, "\"v1\""));
    setup.get("/obj", &[]).await;

    let head = setup.send(Method::HEAD, "/obj", &[]).await.expect("HEAD");
    assert_eq!(head.status, StatusCode::OK);
    assert_eq!(head.header("content-length"), Some("263144"));
    assert!(head.body.is_empty());

    let not_modified = setup.get("/obj", &[("if-none-match", "\"v1\"")]).await;
    assert_eq!(not_modified.status, StatusCode::NOT_MODIFIED);

    let other_version = setup
        .get("/obj", &[("range", "bytes=0-9"), ("if-range", "\"v0\"")])
        .await;
    assert_eq!(
        other_version.status,
        StatusCode::OK,
        "If-Range fails: whole"
    );
    assert!(other_version.body[..] == body[..]);
    let same_version = setup
        .get("/obj", &[("range", "bytes=0-9"), ("if-range", "\"v1\"")])
        .await;
    assert_part(&same_version, &body, 0, 9);

    let outside = setup.get("/obj", &[("range", "bytes=300000-")]).await;
    assert_eq!(outside.status, StatusCode::RANGE_NOT_SATISFIABLE);

    let two = setup
        .get("/obj", &[("range", "bytes=10-19,70000-70009")])
        .await;
    assert_eq!(two.status, StatusCode::PARTIAL_CONTENT);
    let text = two.body.clone();
    for (first, last) in [(10usize, 19usize), (70000, 70009)] {
        let named = format!("content-range: bytes {first}-{last}/{LENGTH}\r\n\r\n");
        let at = text
            .windows(named.len())
            .position(|w| w == named.as_bytes())
            .unwrap_or_else(|| panic!("part {first}-{last} missing"));
        let start = at + named.len();
        assert!(text[start..start + 10] == body[first..=last]);
    }
}

/// A number from the environment, for a run by hand at full size; `default` otherwise.
fn from_env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// Whether `body` is exactly bytes `range` of the synthetic origin's object `key`, compared
/// chunk by chunk (no second copy of a large object).
fn is_part_of(body: &[u8], key: &str, range: std::ops::Range<u64>) -> bool {
    let mut at = 0;
    for chunk in bloomgate::traffic::pattern::ObjectChunks::range(key, range.clone()) {
        if body.get(at..at + chunk.len()) != Some(&chunk[..]) {
            return false;
        }
        at += chunk.len();
    }
    at == body.len() && at as u64 == range.end - range.start
}

/// The correctness run of issue 35 at test size: an object of the synthetic origin (which serves
/// ranges as a file server does) fetched whole, then in random ranges, then whole again, through
/// 1 MiB slices under the default admission; every byte compared with the origin's. At full
/// size by hand: `BIG_OBJECT_BYTES=1073741824 BIG_OBJECT_RANGES=500 cargo test --release --test
/// proxy every_byte_of_a_big_object`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_byte_of_a_big_object_fetched_whole_and_in_random_ranges_is_the_origins() {
    let size = from_env("BIG_OBJECT_BYTES", (24 << 20) + 12_345);
    let ranges = from_env("BIG_OBJECT_RANGES", 100);
    let origin = bloomgate::traffic::start_origin(bloomgate::traffic::OriginOptions::default())
        .await
        .expect("the synthetic origin");
    let mut config = ProxyConfig::new(&origin.url());
    config
        .set("cache", "slice_above", "\"8MiB\"")
        .set("cache", "slice_bytes", "\"1MiB\"")
        .set("origin", "idle_timeout", "\"10s\"");
    let proxy = config.start();
    let client = Client::new();
    let path = format!("/obj/big?size={size}");
    let url = proxy.url(&path);

    let whole = client.get(&url).await;
    assert_eq!(whole.status, StatusCode::OK);
    assert!(is_part_of(&whole.body, "big", 0..size), "the whole object");
    drop(whole);
    // splitmix64, seeded: the same ranges every run.
    let mut state: u64 = 0x35;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for _ in 0..ranges {
        let first = next() % size;
        let last = (first + next() % (3 << 20)).min(size - 1);
        let reply = client
            .get_with(&url, &[("range", &format!("bytes={first}-{last}"))])
            .await;
        assert_eq!(reply.status, StatusCode::PARTIAL_CONTENT, "{first}-{last}");
        assert!(
            is_part_of(&reply.body, "big", first..last + 1),
            "bytes {first}-{last}"
        );
    }
    let again = client.get(&url).await;
    assert!(
        is_part_of(&again.body, "big", 0..size),
        "the whole object again"
    );
    assert!(
        again.cache_status().contains("detail=slice-hits-"),
        "{}",
        again.cache_status()
    );
}

/// `bloomgate_disk_writes_total` for every reason.
fn disk_writes(scrape: &str) -> f64 {
    ["ram_hit", "seen_before", "revalidated"]
        .iter()
        .map(|reason| {
            metric(
                scrape,
                &format!("bloomgate_disk_writes_total{{reason=\"{reason}\"}}"),
            )
        })
        .sum()
}

/// The disk tier's rules hold for slices: a slice asked for once is never written; a slice asked
/// for again is written when RAM evicts it and served from disk; a purge of the object removes
/// its slices from disk too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slices_reach_the_disk_only_when_asked_for_again_and_a_purge_removes_them_there() {
    let origin = bloomgate::traffic::start_origin(bloomgate::traffic::OriginOptions::default())
        .await
        .expect("the synthetic origin");
    let dir = common::TempDir::new("slices-disk");
    // RAM holds four of the object's sixteen 64 KiB slices; probation two.
    let config = crate::slices_disk::sliced_on_disk(&origin, &dir);
    let proxy = config.start();
    let client = Client::new();
    let size: u64 = 1 << 20;
    let path = format!("/obj/film?size={size}");
    let url = proxy.url(&path);
    let scrape = |ready: fn(&str) -> bool| common::scrape_until(&client, &proxy, ready);

    let first = client.get(&url).await;
    assert!(is_part_of(&first.body, "film", 0..size));
    let after_first =
        scrape(|s| metric(s, "bloomgate_disk_rejected_total{reason=\"first_hit\"}") >= 10.0).await;
    assert_eq!(
        disk_writes(&after_first),
        0.0,
        "first requests of slices are never written"
    );

    let second = client.get(&url).await;
    assert!(is_part_of(&second.body, "film", 0..size));
    let after_second = scrape(|s| disk_writes(s) >= 10.0).await;
    assert!(
        disk_writes(&after_second) >= 10.0,
        "slices asked for again reach the disk"
    );

    let third = client.get(&url).await;
    assert!(is_part_of(&third.body, "film", 0..size));
    let after_third = scrape(|s| metric(s, "bloomgate_disk_hits_total") >= 1.0).await;
    assert!(
        metric(&after_third, "bloomgate_disk_hits_total") >= 1.0,
        "slices read back from disk"
    );

    let purge = Method::from_bytes(b"PURGE").expect("PURGE is a valid method");
    let purged = client.send(purge, &proxy.admin_url(&path), &[]).await;
    assert_eq!(purged.map(|reply| reply.status), Ok(StatusCode::OK));
    let removed = scrape(|s| metric(s, "bloomgate_disk_removed_total") >= 10.0).await;
    assert!(
        metric(&removed, "bloomgate_disk_removed_total") >= 10.0,
        "the purge reached the disk"
    );
    let disk_hits = metric(&removed, "bloomgate_disk_hits_total");
    let after = client.get(&url).await;
    assert!(is_part_of(&after.body, "film", 0..size));
    assert!(slice_hits(&after, 0, 16), "{}", after.cache_status());
    let last = scrape(|_| true).await;
    assert_eq!(
        metric(&last, "bloomgate_disk_hits_total"),
        disk_hits,
        "no slice from disk after the purge"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_for_a_slice_share_one_origin_fetch() {
    let setup = Setup::slicing("off");
    let body = object(LENGTH, 1);
    // Slow enough that the clients' requests for each slice meet in flight.
    let slow = ranged(&body, "\"v1\"").delay(std::time::Duration::from_millis(200));
    setup.origin.set("/popular", slow);
    let clients: Vec<_> = (0..4).map(|_| setup.get("/popular", &[])).collect();
    for reply in futures_util::future::join_all(clients).await {
        assert!(reply.body[..] == body[..]);
    }
    let asked = setup.ranges_asked("/popular");
    for index in 0..5 {
        let last = ((index + 1) * SLICE).min(LENGTH) - 1;
        let range = format!("bytes={}-{last}", index * SLICE);
        let times = asked.iter().filter(|asked| **asked == range).count();
        assert_eq!(times, 1, "slice {index} fetched {times} times: {asked:?}");
    }
}

#[tokio::test]
async fn a_purge_of_a_tag_removes_the_slices_that_carry_it() {
    let setup = Setup::slicing("off");
    let body = object(LENGTH, 1);
    setup.origin.set(
        "/tagged",
        ranged(&body, "\"v1\"").header("surrogate-key", "films"),
    );
    setup.get("/tagged", &[]).await;
    let hit = setup.get("/tagged", &[]).await;
    assert!(slice_hits(&hit, 5, 5), "{}", hit.cache_status());
    let url = setup.proxy.admin_url("/purge/tag/films");
    let reply = setup
        .client
        .send(Method::POST, &url, &[])
        .await
        .expect("POST /purge/tag");
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let before = setup.origin.count("/tagged");
    let after = setup.get("/tagged", &[]).await;
    assert!(after.body[..] == body[..]);
    assert_eq!(
        setup.origin.count("/tagged"),
        before + 5,
        "every slice fetched again"
    );
}

#[tokio::test]
async fn a_route_slices_its_large_objects_and_another_route_stores_them_whole() {
    let origin = Origin::start();
    let upstreams = format!(
        "[upstreams.o]\nservers = [\"{}\"]\n\n\
         [[routes]]\nname = \"video\"\npath_prefix = \"/video/\"\nupstream = \"o\"\n\
         [routes.cache]\nslice_above = \"100KiB\"\nslice_bytes = \"64KiB\"\n\n\
         [[routes]]\nname = \"rest\"\nupstream = \"o\"\n",
        origin.url()
    );
    let mut config = ProxyConfig::with_upstreams(&upstreams);
    config.mode("off");
    let proxy = config.start();
    let client = Client::new();
    let body = object(LENGTH, 1);
    for path in ["/video/a", "/files/a"] {
        origin.set(path, ranged(&body, "\"v1\""));
    }
    let video = client.get(&proxy.url("/video/a")).await;
    assert!(video.body[..] == body[..]);
    assert!(slice_hits(&video, 0, 5), "{}", video.cache_status());
    let file = client.get(&proxy.url("/files/a")).await;
    assert!(file.body[..] == body[..]);
    assert!(file.is_stored(), "{}", file.cache_status());
    assert!(!file.cache_status().contains("slice"));
}

/// The range of slice 0 a first contact asks for.
const FIRST_SLICE: &str = "bytes=0-65535";

#[tokio::test]
async fn the_first_request_for_a_large_object_asks_for_its_first_slice_and_no_whole_body() {
    let setup = Setup::slicing("second-hit");
    let body = object(LENGTH, 1);
    setup.origin.set("/first", ranged(&body, "\"v1\""));

    let first = setup.get("/first", &[]).await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(first.body[..] == body[..], "the whole object, in order");
    assert!(slice_hits(&first, 0, 5), "{}", first.cache_status());
    let asked = setup.ranges_asked("/first");
    assert_eq!(asked.first().map(String::as_str), Some(FIRST_SLICE));
    assert!(!asked.contains(&"-".to_owned()), "a whole GET: {asked:?}");
    assert_eq!(
        setup.origin.body_bytes("/first"),
        LENGTH as u64,
        "each byte sent once: slice 0 is not asked again"
    );
}

#[tokio::test]
async fn a_first_range_in_the_middle_of_an_unknown_object_asks_for_the_slice_it_starts_in() {
    let setup = Setup::slicing("second-hit");
    let body = object(LENGTH, 1);
    setup.origin.set("/middle", ranged(&body, "\"v1\""));
    let (first, last) = (2 * SLICE + 100, 2 * SLICE + 299);

    let part = setup
        .get("/middle", &[("range", &format!("bytes={first}-{last}"))])
        .await;
    assert_part(&part, &body, first, last);
    assert_eq!(
        setup.ranges_asked("/middle"),
        vec![format!("bytes={}-{}", 2 * SLICE, 3 * SLICE - 1)],
        "only the slice the range starts in, not the first"
    );

    // A range past the end of an unknown object: the first slice tells the length, and the
    // client gets its 416 from the cache, never a whole body fetched for it.
    setup
        .origin
        .set("/short", ranged(&object(LENGTH, 2), "\"v2\""));
    let beyond = setup
        .get("/short", &[("range", &format!("bytes={}-", 40 * SLICE))])
        .await;
    assert_eq!(beyond.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(
        setup.ranges_asked("/short"),
        vec![
            format!("bytes={}-{}", 40 * SLICE, 41 * SLICE - 1),
            FIRST_SLICE.to_owned()
        ]
    );
}

#[tokio::test]
async fn a_small_object_on_a_slicing_route_is_stored_whole_from_its_first_slice() {
    let setup = Setup::slicing("off");
    let body = object(1000, 1);
    setup.origin.set("/small", ranged(&body, "\"s1\""));

    let first = setup.get("/small", &[]).await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(first.body[..] == body[..]);
    assert_eq!(first.header("content-length"), Some("1000"));
    assert_eq!(
        first.header("content-range"),
        None,
        "the cache's range leaked"
    );
    assert!(first.is_stored(), "{}", first.cache_status());
    assert!(!first.cache_status().contains("slice"));
    assert_eq!(setup.ranges_asked("/small"), vec![FIRST_SLICE.to_owned()]);

    let second = setup.get("/small", &[]).await;
    assert_eq!(second.status, StatusCode::OK);
    assert!(second.is_hit(), "{}", second.cache_status());
    assert!(second.body[..] == body[..]);
    assert_eq!(second.header("content-range"), None);
    let part = setup.get("/small", &[("range", "bytes=10-19")]).await;
    assert_part(&part, &body, 10, 19);
    assert!(part.is_hit(), "{}", part.cache_status());
    assert_eq!(
        setup.origin.count("/small"),
        1,
        "asked once, for its first slice"
    );
}

#[tokio::test]
async fn a_clients_range_of_an_unknown_small_object_is_cut_from_the_whole_it_stores() {
    let setup = Setup::slicing("off");
    let body = object(1000, 1);
    setup.origin.set("/small-part", ranged(&body, "\"s1\""));

    let part = setup
        .get("/small-part", &[("range", "bytes=100-199")])
        .await;
    assert_part(&part, &body, 100, 199);
    assert_eq!(
        setup.ranges_asked("/small-part"),
        vec![FIRST_SLICE.to_owned()]
    );
    let whole = setup.get("/small-part", &[]).await;
    assert!(whole.is_hit(), "{}", whole.cache_status());
    assert_eq!(whole.status, StatusCode::OK);
    assert!(whole.body[..] == body[..]);
}

#[tokio::test]
async fn an_origin_that_ignores_the_first_contacts_range_is_answered_whole_and_counted() {
    let setup = Setup::slicing("off");
    let large = object(LENGTH, 1);
    let small = object(1000, 2);
    for (path, body) in [("/whole-large", &large), ("/whole-small", &small)] {
        let whole_only = Reply::bytes(body)
            .header("cache-control", "max-age=600")
            .header("etag", "\"w\"");
        setup.origin.set(path, whole_only);
    }
    for _ in 0..2 {
        let reply = setup.get("/whole-large", &[]).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert!(reply.body[..] == large[..]);
        assert!(!reply.cache_status().contains("slice"));
    }
    // Within max_object_bytes, the whole 200 is stored as any object (admission "off").
    assert_eq!(
        setup.ranges_asked("/whole-large"),
        vec![FIRST_SLICE.to_owned()],
        "answered whole once, then from the whole stored"
    );

    let first = setup.get("/whole-small", &[]).await;
    assert!(first.body[..] == small[..]);
    assert!(first.is_stored(), "{}", first.cache_status());
    let second = setup.get("/whole-small", &[]).await;
    assert!(second.is_hit(), "{}", second.cache_status());
    let scrape = setup.scrape().await;
    assert_eq!(
        metric(&scrape, "bloomgate_slices_total{event=\"not_ranged\"}"),
        1.0,
        "the large one counted, the small one not"
    );
}

#[tokio::test]
async fn a_mid_size_object_between_one_slice_and_slice_above_is_sliced_from_its_first_contact() {
    let setup = Setup::slicing("off");
    // Above one 64 KiB slice, at most the 100 KiB of slice_above: two slices.
    let length = SLICE + 16 * 1024;
    let body = object(length, 1);
    setup.origin.set("/mid", ranged(&body, "\"m1\""));

    let first = setup.get("/mid", &[]).await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(first.body[..] == body[..]);
    assert_eq!(
        first.header("content-length"),
        Some(length.to_string().as_str())
    );
    assert_eq!(first.header("content-range"), None);
    assert!(slice_hits(&first, 0, 2), "{}", first.cache_status());
    let second_slice = format!("bytes={SLICE}-{}", length - 1);
    assert_eq!(
        setup.ranges_asked("/mid"),
        vec![FIRST_SLICE.to_owned(), second_slice]
    );
    let second = setup.get("/mid", &[]).await;
    assert!(second.body[..] == body[..]);
    assert!(slice_hits(&second, 2, 2), "{}", second.cache_status());
    assert_eq!(setup.origin.body_bytes("/mid"), length as u64);
}

#[tokio::test]
async fn an_empty_object_answered_416_to_the_first_contact_is_fetched_plainly() {
    let setup = Setup::slicing("off");
    setup.origin.set("/empty", ranged(b"", "\"e\""));

    let reply = setup.get("/empty", &[]).await;
    assert_eq!(reply.status, StatusCode::OK, "the cache's 416 leaked");
    assert!(reply.body.is_empty());
    assert_eq!(reply.header("content-length"), Some("0"));
    assert_eq!(
        setup.ranges_asked("/empty"),
        vec![FIRST_SLICE.to_owned(), "-".to_owned()]
    );
    let again = setup.get("/empty", &[]).await;
    assert_eq!(again.status, StatusCode::OK);
    assert!(again.is_hit(), "{}", again.cache_status());
}

#[tokio::test]
async fn a_missing_object_on_a_slicing_route_is_answered_as_a_plain_get() {
    let setup = Setup::slicing("off");
    let reply = setup.get("/nowhere", &[]).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.header("content-range"), None);
    assert_eq!(setup.ranges_asked("/nowhere"), vec![FIRST_SLICE.to_owned()]);
}
