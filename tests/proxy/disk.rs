//! End to end: the disk tier below RAM. Only proven objects are written to it (hit while in RAM,
//! or stored on a second request); a RAM miss is served from it; a restart comes back warm; a
//! crash, a corrupt file or a full file system never gets a wrong byte served; purge,
//! invalidation and revalidation reach it; and it keeps to `disk.max_bytes`.
//!
//! Each test starts its own proxy on its own directory, with RAM small enough (256 KiB) that a few
//! dozen objects push entries out to disk.

use crate::common;

use std::net::SocketAddr;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bloomgate::cache::disk::{DiskTier, EngineOptions, SegmentEngine};
use bloomgate::config::Config;
use bloomgate::traffic::pattern::object_bytes;
use bloomgate::traffic::{OriginHandle, OriginOptions, start_origin};
use common::{
    Client, ClientReply, Origin, ProxyConfig, ProxyProcess, Reply, TempDir, has_member,
    required_metric,
};
use http::{Method, StatusCode};

const KIB: usize = 1024;

/// An object of the synthetic origin: `/obj/<key>?size=N` answers N bytes that depend on the key.
/// Tests on the programmable origin serve the same bytes on the same path.
#[derive(Clone, Debug)]
struct Object {
    key: String,
    size: usize,
}

impl Object {
    fn new(key: &str, size: usize) -> Object {
        Object {
            key: key.to_owned(),
            size,
        }
    }

    /// The path, which is also the cache key (the proxies here leave the Host out of it).
    fn path(&self) -> String {
        format!("/obj/{}?size={}", self.key, self.size)
    }

    fn body(&self) -> Vec<u8> {
        object_bytes(&self.key, self.size)
    }

    /// The object as the programmable origin serves it: fresh for ten minutes.
    fn reply(&self) -> Reply {
        let mut reply = Reply::ok("").header("cache-control", "max-age=600");
        reply.body = self.body();
        reply
    }
}

/// `count` objects named `<prefix>-<i>` of `size` bytes each.
fn objects(prefix: &str, count: usize, size: usize) -> Vec<Object> {
    (0..count)
        .map(|i| Object::new(&format!("{prefix}-{i}"), size))
        .collect()
}

/// `count` objects named `<prefix>-<i>`, their sizes spread over 1 KiB to 48 KiB and rarely a
/// whole number of pages, so that records end anywhere in a page.
fn objects_of_varied_sizes(prefix: &str, count: usize) -> Vec<Object> {
    (0..count)
        .map(|i| {
            let size = KIB + (i * 7919) % (47 * KIB) + 1;
            Object::new(&format!("{prefix}-{i}"), size)
        })
        .collect()
}

async fn synthetic_origin() -> OriginHandle {
    start_origin(OriginOptions::default())
        .await
        .expect("start the synthetic origin")
}

/// A proxy with 256 KiB of RAM (a quarter of it probation) over a 16 MiB disk tier in `dir`, in
/// 1 MiB blocks. The cache key leaves out the Host, which names a new port after each restart,
/// and a graceful stop has time to write RAM's proven entries to disk.
pub(super) fn tiered(origin_url: &str, dir: &Path) -> ProxyConfig {
    let mut config = ProxyConfig::new(origin_url);
    config
        .mode("probation")
        .probation_share(0.25)
        .set("server", "shutdown_grace", "\"5s\"")
        .set("cache", "max_bytes", "\"256KiB\"")
        .set("cache", "max_object_bytes", "\"64KiB\"")
        .set("cache.key", "include_host", "false")
        .set("disk", "path", &toml_string(dir))
        .set("disk", "max_bytes", "\"16MiB\"")
        .set("disk", "block_bytes", "\"1MiB\"")
        .set("disk", "write_buffer", "\"4MiB\"");
    config
}

fn toml_string(path: &Path) -> String {
    format!("{:?}", path.to_str().expect("a UTF-8 temp path"))
}

/// GETs `object` and checks that the response is a 200 with the origin's body, byte for byte.
async fn fetch(client: &Client, proxy: &ProxyProcess, object: &Object) -> ClientReply {
    fetch_from(client, proxy.addr, object).await
}

/// [`fetch`] from the proxy listening on `addr`.
async fn fetch_from(client: &Client, addr: SocketAddr, object: &Object) -> ClientReply {
    let reply = client.get(&format!("http://{addr}{}", object.path())).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", object.path());
    assert_whole(object, &reply.body);
    reply
}

/// Panics unless `body` is `object`'s body from the origin, naming the first byte that differs.
fn assert_whole(object: &Object, body: &[u8]) {
    let expected = object.body();
    if body != expected {
        let first_difference = body
            .iter()
            .zip(&expected)
            .position(|(a, b)| a != b)
            .unwrap_or(body.len().min(expected.len()));
        panic!(
            "{}: {} bytes served where the origin has {}; first difference at byte {first_difference}",
            object.path(),
            body.len(),
            expected.len()
        );
    }
}

/// Whether the response was served from the disk tier.
fn from_disk(reply: &ClientReply) -> bool {
    reply.is_hit() && has_member(reply.cache_status(), "detail=disk")
}

/// Requests each object twice; the second request is a hit in RAM, which proves the object.
async fn prove(client: &Client, proxy: &ProxyProcess, objects: &[Object]) {
    prove_with_hits(client, proxy, objects, 1).await;
}

/// Requests each object once, then `hits` more times in a row, each a hit in RAM.
async fn prove_with_hits(client: &Client, proxy: &ProxyProcess, objects: &[Object], hits: usize) {
    for object in objects {
        fetch(client, proxy, object).await;
        for _ in 0..hits {
            let again = fetch(client, proxy, object).await;
            assert!(
                again.is_hit() && !from_disk(&again),
                "{}: a repeated request is not a RAM hit: {}",
                object.path(),
                again.cache_status()
            );
        }
    }
}

/// Requests each object once and checks every body; returns how many came from disk.
async fn served_from_disk(client: &Client, proxy: &ProxyProcess, objects: &[Object]) -> usize {
    let mut from_disk_count = 0;
    for object in objects {
        if from_disk(&fetch(client, proxy, object).await) {
            from_disk_count += 1;
        }
    }
    from_disk_count
}

/// Whether a recent eviction comes back from disk: requests `proven` newest first, up to the
/// first response the disk serves. Newest first, because each request can push a RAM entry to
/// disk, and read oldest first the reclaimed segments would always be just ahead of the
/// requests. All of them if need be: on a loaded machine a lagging writer refuses (budget)
/// whole runs of the latest writes.
async fn a_recent_eviction_is_served_from_disk(
    client: &Client,
    proxy: &ProxyProcess,
    proven: &[Object],
) -> bool {
    for object in proven.iter().rev() {
        if from_disk(&fetch(client, proxy, object).await) {
            return true;
        }
    }
    false
}

async fn scrape_metrics(client: &Client, proxy: &ProxyProcess) -> String {
    let reply = client.get(&proxy.admin_url("/metrics")).await;
    assert_eq!(reply.status, StatusCode::OK);
    reply.text()
}

/// `bloomgate_disk_writes_total{reason="..."}`.
fn writes(reason: &str) -> String {
    format!("bloomgate_disk_writes_total{{reason=\"{reason}\"}}")
}

/// `bloomgate_disk_rejected_total{reason="..."}`.
fn rejected(reason: &str) -> String {
    format!("bloomgate_disk_rejected_total{{reason=\"{reason}\"}}")
}

/// Disk writes for every reason.
fn all_writes(scrape: &str) -> f64 {
    ["ram_hit", "seen_before", "revalidated"]
        .iter()
        .map(|reason| required_metric(scrape, &writes(reason)))
        .sum()
}

/// The lines of a scrape about the disk tier, for failure messages.
fn disk_metrics(scrape: &str) -> String {
    scrape
        .lines()
        .filter(|line| line.starts_with("bloomgate_disk_"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Entries `/readyz` says the disk tier recovered at start.
async fn recovered_entries(client: &Client, proxy: &ProxyProcess) -> u64 {
    let ready = client.get(&proxy.admin_url("/readyz")).await;
    assert_eq!(ready.status, StatusCode::OK);
    let text = ready.text();
    let line = text
        .lines()
        .find(|line| line.starts_with("disk: ") && line.contains(" entries recovered in "))
        .unwrap_or_else(|| panic!("/readyz does not report the disk tier: {text:?}"));
    line.split_whitespace()
        .nth(1)
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no entry count in {line:?}"))
}

/// A disk tier on the segment engine in `config`'s `disk.path`, whose engine opens (recovers its
/// index) only once the returned sender says so or is dropped: a recovery as slow as the test
/// needs.
pub(crate) fn tier_recovering_until_released(
    config: &Config,
) -> (DiskTier, std::sync::mpsc::Sender<()>) {
    let dir = config.disk.path.clone().expect("a disk.path");
    let options = EngineOptions {
        dir: dir.clone(),
        max_bytes: config.disk.max_bytes,
        block_bytes: config.disk.block_bytes,
        write_buffer: config.disk.write_buffer,
        mmap: config.disk.mmap,
        sync_on_seal: true,
        verify_first_read_only: config.disk.verify_first_read_only,
    };
    let (release, gate) = std::sync::mpsc::channel::<()>();
    let tier = DiskTier::opening(&config.disk, dir, move || {
        let _ = gate.recv();
        let (engine, recovery) = SegmentEngine::open(&options)?;
        Ok((Arc::new(engine), recovery))
    });
    (tier, release)
}

/// `/readyz` of the proxy whose admin listener is `admin`: it must answer 200.
async fn readyz(client: &Client, admin: SocketAddr) -> String {
    let ready = client.get(&format!("http://{admin}/readyz")).await;
    assert_eq!(ready.status, StatusCode::OK, "{}", ready.text());
    ready.text()
}

/// Polls `/readyz` until the disk tier reports what it recovered.
async fn until_recovered(client: &Client, admin: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let ready = readyz(client, admin).await;
        if ready.contains(" entries recovered in ") {
            return;
        }
        assert!(Instant::now() < deadline, "/readyz: {ready:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Checks that the tier is still recovering, releases its recovery (see
/// [`tier_recovering_until_released`]) and waits until `/readyz` says it is open.
async fn release_recovery(
    client: &Client,
    admin: SocketAddr,
    release: &std::sync::mpsc::Sender<()>,
) {
    let ready = readyz(client, admin).await;
    assert!(ready.contains("disk: recovering"), "{ready:?}");
    release.send(()).expect("the tier waits for the release");
    until_recovered(client, admin).await;
}

/// Proves `objects` through a proxy on `dir` and stops it gracefully: they are all on disk.
async fn leave_on_disk(origin_url: &str, dir: &Path, objects: &[Object]) {
    let proxy = tiered(origin_url, dir).start();
    prove(&Client::new(), &proxy, objects).await;
    let log = proxy.terminate();
    assert!(!log.contains("not every entry was written"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_serves_while_its_disk_tier_recovers_and_from_disk_once_it_is_open() {
    let origin = synthetic_origin().await;
    let dir = TempDir::new("disk-recovering");
    let on_disk = objects("recovering", 20, 16 * KIB);
    leave_on_disk(&origin.url(), dir.path(), &on_disk).await;

    let config = Config::from_toml_str(&tiered(&origin.url(), dir.path()).text())
        .expect("the test's config");
    let (tier, release) = tier_recovering_until_released(&config);
    let running = bloomgate::proxy::start_with_disk(config, tier)
        .await
        .expect("start");
    let client = Client::new();
    let ready = readyz(&client, running.admin_addr).await;
    assert!(ready.contains("disk: recovering"), "{ready:?}");
    // Served while the index is not read: a miss, from the origin.
    let (early, later) = on_disk.split_at(5);
    for object in early {
        let reply = fetch_from(&client, running.addr, object).await;
        assert!(!reply.is_hit(), "{}", reply.cache_status());
        assert_eq!(
            origin.stats.requests_for(&object.key),
            2,
            "{}",
            object.path()
        );
    }
    release_recovery(&client, running.admin_addr, &release).await;
    for object in later {
        let reply = fetch_from(&client, running.addr, object).await;
        assert!(
            from_disk(&reply),
            "{} once the tier is open: {}",
            object.path(),
            reply.cache_status()
        );
        assert_eq!(
            origin.stats.requests_for(&object.key),
            1,
            "{}",
            object.path()
        );
    }
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_while_the_disk_tier_recovers_is_not_undone_by_the_recovered_index() {
    let origin = synthetic_origin().await;
    let dir = TempDir::new("disk-purge-recovering");
    let on_disk = objects("purge-recovering", 20, 16 * KIB);
    leave_on_disk(&origin.url(), dir.path(), &on_disk).await;
    let (purged, kept) = on_disk.split_at(3);

    let tiered = tiered(&origin.url(), dir.path());
    let config = Config::from_toml_str(&tiered.text()).expect("the test's config");
    let (tier, release) = tier_recovering_until_released(&config);
    let running = bloomgate::proxy::start_with_disk(config, tier)
        .await
        .expect("start");
    let client = Client::new();
    let purge = Method::from_bytes(b"PURGE").expect("PURGE is a valid method");
    for object in purged {
        let url = format!("http://{}{}", running.admin_addr, object.path());
        let reply = client.send(purge.clone(), &url, &[]).await.expect("PURGE");
        assert_eq!(reply.status, StatusCode::OK, "PURGE {}", object.path());
    }
    release_recovery(&client, running.admin_addr, &release).await;
    for object in purged {
        let reply = fetch_from(&client, running.addr, object).await;
        assert!(
            !reply.is_hit(),
            "{}: {}",
            object.path(),
            reply.cache_status()
        );
    }
    running.shutdown().await;

    // The index the next start recovers no longer has them; it has the others.
    let proxy = tiered.start();
    for object in purged {
        let reply = fetch(&client, &proxy, object).await;
        assert!(
            !reply.is_hit(),
            "{}: back from disk after a purge made while recovering: {}",
            object.path(),
            reply.cache_status()
        );
        assert_eq!(
            origin.stats.requests_for(&object.key),
            3,
            "{}",
            object.path()
        );
    }
    for object in kept {
        let reply = fetch(&client, &proxy, object).await;
        assert!(
            from_disk(&reply),
            "{}: {}",
            object.path(),
            reply.cache_status()
        );
    }
}

/// Bytes the files under `dir` take on the file system: allocated blocks, not sparse lengths.
fn allocated_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let meta = entry.metadata().ok()?;
            Some(if meta.is_dir() {
                allocated_bytes(&entry.path())
            } else {
                meta.blocks() * 512
            })
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_hit_object_is_never_written_to_disk() {
    let origin = synthetic_origin().await;
    let dir = TempDir::new("disk-first-hit");
    let proxy = tiered(&origin.url(), dir.path()).start();
    let client = Client::new();
    // 2 MiB of objects requested once each: eight times what RAM holds.
    let once = objects("once", 128, 16 * KIB);
    for object in &once {
        let reply = fetch(&client, &proxy, object).await;
        assert!(!reply.is_hit(), "{}", reply.cache_status());
    }
    let scrape = common::scrape_until(&client, &proxy, |s| {
        common::metric(s, &rejected("first_hit")) >= 100.0
    })
    .await;
    assert!(
        required_metric(&scrape, &rejected("first_hit")) >= 100.0,
        "RAM gave up most of 128 one-hit objects, each refused by the disk:\n{}",
        disk_metrics(&scrape)
    );
    assert_eq!(all_writes(&scrape), 0.0, "{}", disk_metrics(&scrape));
    assert_eq!(
        required_metric(&scrape, "bloomgate_disk_entries"),
        0.0,
        "{}",
        disk_metrics(&scrape)
    );

    let again = fetch(&client, &proxy, &once[0]).await;
    assert!(
        !again.is_hit(),
        "a one-hit object RAM gave up was served: {}",
        again.cache_status()
    );
    assert_eq!(origin.stats.requests_for(&once[0].key), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_hit_object_is_written_when_ram_evicts_it_and_served_from_disk() {
    let origin = synthetic_origin().await;
    let dir = TempDir::new("disk-second-hit");
    let proxy = tiered(&origin.url(), dir.path()).start();
    let client = Client::new();
    // 640 KiB of proven objects through 256 KiB of RAM: main gives up the oldest, first to last.
    let proven = objects("proven", 40, 16 * KIB);
    prove(&client, &proxy, &proven).await;
    let written = common::scrape_until(&client, &proxy, |s| {
        common::metric(s, &writes("ram_hit")) >= 10.0
    })
    .await;
    assert!(
        required_metric(&written, &writes("ram_hit")) >= 10.0,
        "{}",
        disk_metrics(&written)
    );
    assert_eq!(required_metric(&written, &rejected("first_hit")), 0.0);

    let first_ten = &proven[..10];
    for object in first_ten {
        let reply = fetch(&client, &proxy, object).await;
        assert!(
            from_disk(&reply),
            "{}: {}; disk metrics:\n{}",
            object.path(),
            reply.cache_status(),
            disk_metrics(&scrape_metrics(&client, &proxy).await)
        );
        assert!(
            reply.cache_status().contains("; ttl="),
            "{}",
            reply.cache_status()
        );
        assert_eq!(
            origin.stats.requests_for(&object.key),
            1,
            "{}: a disk hit went to the origin",
            object.path()
        );
    }
    let scrape = scrape_metrics(&client, &proxy).await;
    assert_eq!(required_metric(&scrape, "bloomgate_disk_hits_total"), 10.0);
    assert_eq!(
        required_metric(&scrape, "bloomgate_disk_hit_bytes_total"),
        (10 * 16 * KIB) as f64
    );

    // Copied back into RAM: the next request is a RAM hit.
    let again = fetch(&client, &proxy, &proven[9]).await;
    assert!(
        again.is_hit() && !from_disk(&again),
        "{}",
        again.cache_status()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_stored_on_its_second_request_is_written_when_ram_evicts_it() {
    let origin = synthetic_origin().await;
    let dir = TempDir::new("disk-seen-before");
    let proxy = tiered(&origin.url(), dir.path()).start();
    let client = Client::new();
    let object = Object::new("seen-before", 16 * KIB);
    fetch(&client, &proxy, &object).await;
    // More one-hit objects than RAM holds make probation give it up unhit: not written.
    for filler in &objects("seen-before-once", 24, 16 * KIB) {
        fetch(&client, &proxy, filler).await;
    }
    let second = fetch(&client, &proxy, &object).await;
    assert!(
        second.is_stored() && !second.is_hit() && !second.cache_status().contains("detail="),
        "the second request should be stored straight into main: {}",
        second.cache_status()
    );
    // Objects asked for more often than it (a miss and two hits each: main, once full, takes an
    // object only in place of one asked for less often) fill main, which gives up its oldest
    // entry first.
    let proven = objects("seen-before-proven", 32, 16 * KIB);
    prove_with_hits(&client, &proxy, &proven, 2).await;
    let scrape = common::scrape_until(&client, &proxy, |s| {
        common::metric(s, &writes("seen_before")) >= 1.0
    })
    .await;
    assert_eq!(
        required_metric(&scrape, &writes("seen_before")),
        1.0,
        "{}",
        disk_metrics(&scrape)
    );
    assert!(required_metric(&scrape, &rejected("first_hit")) >= 1.0);

    let reply = fetch(&client, &proxy, &object).await;
    assert!(from_disk(&reply), "{}", reply.cache_status());
    assert_eq!(origin.stats.requests_for(&object.key), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_proxy_serves_from_disk_and_age_keeps_counting() {
    let origin = synthetic_origin().await;
    let dir = TempDir::new("disk-restart");
    let config = tiered(&origin.url(), dir.path());
    let proxy = config.start();
    let client = Client::new();
    // Some leave RAM for disk while the proxy runs; the rest are in RAM at the stop.
    let proven = objects("restart", 40, 16 * KIB);
    prove(&client, &proxy, &proven).await;
    let once = objects("restart-once", 3, 4 * KIB);
    for object in &once {
        fetch(&client, &proxy, object).await;
    }
    let proved_at = Instant::now();
    let log = proxy.terminate();
    assert!(
        !log.contains("not every entry was written"),
        "the stop did not wait for its writes; log:\n{log}"
    );

    let proxy = config.start();
    let recovered = recovered_entries(&client, &proxy).await;
    assert!(
        recovered >= proven.len() as u64,
        "/readyz: {recovered} entries recovered, {} were proven",
        proven.len()
    );
    let scrape = scrape_metrics(&client, &proxy).await;
    assert_eq!(
        required_metric(&scrape, "bloomgate_disk_recovered_entries"),
        recovered as f64
    );
    // Age counts whole seconds: let one pass since every object left the origin.
    let wait = Duration::from_millis(1100).saturating_sub(proved_at.elapsed());
    tokio::time::sleep(wait).await;
    for object in &proven {
        let at_least = proved_at.elapsed().as_secs();
        let reply = fetch(&client, &proxy, object).await;
        assert!(
            from_disk(&reply),
            "{} after the restart: {}",
            object.path(),
            reply.cache_status()
        );
        let age: u64 = reply
            .header("age")
            .and_then(|age| age.parse().ok())
            .unwrap_or_else(|| panic!("{}: no Age on a disk hit", object.path()));
        assert!(
            age >= at_least.max(1),
            "{}: Age {age}, but the body left the origin more than {at_least} s ago",
            object.path()
        );
        assert_eq!(origin.stats.requests_for(&object.key), 1);
    }
    // A one-hit object in RAM at the stop was not worth a write.
    for object in &once {
        let reply = fetch(&client, &proxy, object).await;
        assert!(!reply.is_hit(), "{}", reply.cache_status());
    }
}

/// Proves `objects` over `lanes` connections at once until all are proved or the proxy is gone;
/// returns those it asked for. Every response that arrives whole must carry the origin's bytes;
/// one the proxy's end cuts off reaches the client as an error, and ends its lane.
async fn prove_until_gone(
    client: &Client,
    addr: SocketAddr,
    objects: &[Object],
    lanes: usize,
) -> Vec<Object> {
    let mut running = tokio::task::JoinSet::new();
    for lane in 0..lanes {
        let client = client.clone();
        let mine: Vec<Object> = objects.iter().skip(lane).step_by(lanes).cloned().collect();
        running.spawn(async move {
            let mut asked = Vec::new();
            for object in mine {
                asked.push(object.clone());
                for _ in 0..2 {
                    let url = format!("http://{addr}{}", object.path());
                    let Ok(reply) = client.send(Method::GET, &url, &[]).await else {
                        return asked;
                    };
                    assert_eq!(reply.status, StatusCode::OK, "{}", object.path());
                    assert_whole(&object, &reply.body);
                }
            }
            asked
        });
    }
    let mut asked = Vec::new();
    while let Some(lane) = running.join_next().await {
        match lane {
            Ok(lane_asked) => asked.extend(lane_asked),
            Err(error) => std::panic::resume_unwind(error.into_panic()),
        }
    }
    asked
}

/// Kills in the test below, each followed by a restart on the same directory.
const KILLS: usize = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_disk_writes_then_restart_serves_only_whole_bodies() {
    let origin = synthetic_origin().await;
    let dir = TempDir::new("disk-sigkill");
    let config = tiered(&origin.url(), dir.path());
    let client = Client::new();
    let mut requested: Vec<Object> = Vec::new();
    let (mut served_from_disk_total, mut killed_mid_load) = (0, 0);
    for round in 0..KILLS {
        let proxy = config.start();
        served_from_disk_total += served_from_disk(&client, &proxy, &requested).await;

        // Far more than the kill leaves time for: the load is still pushing entries out of RAM.
        let batch = objects_of_varied_sizes(&format!("crash-{round}"), 400);
        let load = {
            let (client, addr) = (client.clone(), proxy.addr);
            tokio::spawn(async move { prove_until_gone(&client, addr, &batch, 3).await })
        };
        // Killed once the writer is busy.
        let written_before = all_writes(&scrape_metrics(&client, &proxy).await);
        let scrape =
            common::scrape_until(&client, &proxy, |s| all_writes(s) >= written_before + 30.0).await;
        assert!(
            all_writes(&scrape) >= written_before + 30.0,
            "round {round}: the load wrote too little to disk:\n{}",
            disk_metrics(&scrape)
        );
        if !load.is_finished() {
            killed_mid_load += 1;
        }
        tokio::task::block_in_place(|| proxy.kill());
        requested.extend(load.await.expect("the load's checks"));
    }
    let proxy = config.start();
    assert!(recovered_entries(&client, &proxy).await > 0);
    served_from_disk_total += served_from_disk(&client, &proxy, &requested).await;
    println!(
        "{} objects requested over {KILLS} kills ({killed_mid_load} in the middle of the load); \
         {served_from_disk_total} responses from disk",
        requested.len()
    );
    assert!(
        killed_mid_load > 0 && served_from_disk_total > 0,
        "no kill in the middle of the load, or nothing served from disk after one: the test \
         checked nothing"
    );
}

/// Flips 16 bytes in the middle of `object`'s body, in every record of it in the block files of
/// `dir`; returns how many records it damaged.
fn corrupt_body(dir: &Path, object: &Object) -> usize {
    // The engine writes a record's key (which ends with the path) right before its value, and
    // bloomgate's value opens with its magic (see `cache::disk::record`), then the response time
    // and headers, then the body. The body alone will not do: the bodies of two objects may
    // share bytes.
    let path = object.path();
    let mut key = path.as_bytes().to_vec();
    key.extend_from_slice(b"BGR3");
    let body = object.body();
    let middle = object.size / 2;
    let window = &body[middle..middle + 64];
    let mut damaged = 0;
    for entry in std::fs::read_dir(dir).expect("the disk tier's directory") {
        let path = entry.expect("a directory entry").path();
        let bytes = std::fs::read(&path).expect("read a block file");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open a block file");
        let mut from = 0;
        while let Some(at) = find(&bytes[from..], &key).map(|at| from + at) {
            // The body comes within a few KiB of its record's key (the headers between).
            let end = (at + object.size + 16 * KIB).min(bytes.len());
            let Some(found) = find(&bytes[at..end], window).map(|found| at + found) else {
                from = at + key.len();
                continue;
            };
            let flipped: Vec<u8> = bytes[found..found + 16].iter().map(|b| b ^ 0xff).collect();
            // Only these bytes, so that the block file stays as sparse as the engine left it.
            file.write_all_at(&flipped, found as u64)
                .expect("write the damaged bytes");
            damaged += 1;
            from = found + window.len();
        }
    }
    damaged
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_record_is_dropped_logged_and_never_served() {
    let origin = synthetic_origin().await;
    let dir = TempDir::new("disk-corrupt");
    let config = tiered(&origin.url(), dir.path());
    let proxy = config.start();
    let client = Client::new();
    let proven = objects("corrupt", 30, 16 * KIB);
    prove(&client, &proxy, &proven).await;
    proxy.terminate();

    let (damaged, intact): (Vec<_>, Vec<_>) =
        proven.iter().enumerate().partition(|(i, _)| i % 2 == 0);
    for (_, object) in &damaged {
        assert!(
            corrupt_body(dir.path(), object) >= 1,
            "{}: no record of it on disk after a graceful stop",
            object.path()
        );
    }

    let proxy = config.start();
    for (_, object) in &damaged {
        let reply = fetch(&client, &proxy, object).await;
        assert!(
            !reply.is_hit(),
            "{}: a corrupt record was served: {}",
            object.path(),
            reply.cache_status()
        );
        assert_eq!(origin.stats.requests_for(&object.key), 2);
    }
    for (_, object) in &intact {
        let reply = fetch(&client, &proxy, object).await;
        assert!(
            from_disk(&reply),
            "{}: an intact record next to corrupt ones was not served: {}",
            object.path(),
            reply.cache_status()
        );
    }
    let scrape = scrape_metrics(&client, &proxy).await;
    assert_eq!(
        required_metric(&scrape, "bloomgate_disk_dropped_total"),
        damaged.len() as f64,
        "{}",
        disk_metrics(&scrape)
    );
    let log = proxy.log();
    assert!(
        log.lines()
            .any(|line| line.contains("WARN") && line.contains("disk record dropped")),
        "no warning about the dropped records; log:\n{log}"
    );
}

/// A tmpfs mounted on a new directory; unmounted, and the directory removed, when dropped.
struct Tmpfs {
    dir: TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` reads it); an error when this process may
    /// not mount (not root, or no CAP_SYS_ADMIN).
    fn mount(size: &str) -> Result<Tmpfs, String> {
        let dir = TempDir::new("disk-tmpfs");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|error| error.to_string())?;
        if !mounted.status.success() {
            return Err(String::from_utf8_lossy(&mounted.stderr).into_owned());
        }
        Ok(Tmpfs { dir })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(self.dir.path())
            .status()
            .is_ok_and(|status| status.success());
        if !unmounted {
            // Still busy (a proxy not yet gone): detach it now, freed when the last file closes.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_system_smaller_than_max_bytes_holds_the_segments_it_can_and_no_write_fails() {
    let tmpfs = match Tmpfs::mount("6m") {
        Ok(tmpfs) => tmpfs,
        Err(error) => {
            println!("skipped: cannot mount a tmpfs ({error})");
            return;
        }
    };
    let origin = synthetic_origin().await;
    let dir = tmpfs.dir.path().join("tier");
    // The tier may take 16 MiB on a file system of 6 MiB: the engine preallocates the segments
    // the file system holds and runs with those.
    let proxy = tiered(&origin.url(), &dir)
        .set("disk", "write_buffer", "\"1MiB\"")
        .start();
    let client = Client::new();
    // 20 MiB of proven objects a batch: the few segments turn over several times. On a loaded
    // machine the writer lags and refuses some writes (budget), so up to three batches go in
    // until the engine has written 12 MiB.
    let written = |s: &str| common::metric(s, "bloomgate_disk_engine_written_bytes_total");
    let mut proven = Vec::new();
    for batch in 0..3 {
        let fresh = objects(&format!("enospc{batch}"), 640, 32 * KIB);
        proven.extend(fresh.iter().cloned());
        for chunk in fresh.chunks(64) {
            prove(&client, &proxy, chunk).await;
        }
        if written(&scrape_metrics(&client, &proxy).await) >= 12.0 * 1024.0 * 1024.0 {
            break;
        }
    }
    let scrape = scrape_metrics(&client, &proxy).await;
    assert!(
        common::metric(&scrape, "bloomgate_disk_engine_written_bytes_total")
            >= 12.0 * 1024.0 * 1024.0,
        "too little written to turn the segments over:\n{}",
        disk_metrics(&scrape)
    );
    // Still a working tier: objects recently pushed out of RAM come back from disk.
    assert!(
        a_recent_eviction_is_served_from_disk(&client, &proxy, &proven).await,
        "nothing recent was served from disk:\n{}",
        disk_metrics(&scrape)
    );
    assert_eq!(required_metric(&scrape, "bloomgate_disk_full"), 0.0);
    assert!(allocated_bytes(&dir) <= 6 << 20);
    let log = tokio::task::block_in_place(|| proxy.terminate());
    assert!(
        log.lines()
            .any(|line| line.contains("WARN") && line.contains("file system full")),
        "no warning that the file system holds fewer segments than disk.max_bytes; warnings:\n{}",
        lines_with(&log, "WARN")
    );
    assert!(
        !log.contains("panicked"),
        "a thread of the proxy panicked:\n{}",
        lines_with(&log, "panicked")
    );
    assert!(
        !log.contains("No space left on device") && !log.contains("segment write failed"),
        "a write met the full file system:\n{}",
        lines_with(&log, "write")
    );
}

/// The first lines of `log` that contain `needle`, each cut to 300 characters.
fn lines_with(log: &str, needle: &str) -> String {
    log.lines()
        .filter(|line| line.contains(needle))
        .take(5)
        .map(|line| line.chars().take(300).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Sends `method` to `url` with the proxy's address as Host (PURGE needs one).
async fn send(client: &Client, proxy: &ProxyProcess, method: Method, url: &str) -> ClientReply {
    let host = proxy.addr.to_string();
    client
        .send(method.clone(), url, &[("host", &host)])
        .await
        .unwrap_or_else(|error| panic!("{method} {url}: {error}"))
}

/// GET requests the origin received for `object`.
fn origin_gets(origin: &Origin, object: &Object) -> usize {
    origin
        .received(&object.path())
        .iter()
        .filter(|request| request.method == "GET")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_and_invalidation_remove_the_disk_copy_also_across_a_restart() {
    let origin = Origin::start();
    let dir = TempDir::new("disk-purge");
    let config = tiered(&origin.url(), dir.path());
    let proxy = config.start();
    let client = Client::new();
    let purge = Method::from_bytes(b"PURGE").expect("PURGE is a valid method");
    // How each object is removed, and whether it is checked now or after a restart.
    let cases = [
        (purge.clone(), "purge-now"),
        (purge, "purge-restart"),
        (Method::DELETE, "delete-now"),
        (Method::DELETE, "delete-restart"),
        (Method::POST, "post-now"),
        (Method::POST, "post-restart"),
    ];
    let targets: Vec<Object> = cases
        .iter()
        .map(|(_, name)| Object::new(name, 12 * KIB))
        .collect();
    let fillers = objects("purge-filler", 30, 16 * KIB);
    for object in targets.iter().chain(&fillers) {
        origin.set(&object.path(), object.reply());
    }
    prove(&client, &proxy, &targets).await;
    prove(&client, &proxy, &fillers).await;
    // Main gives up its oldest entries first: the targets.
    let targets_written = targets.len() as f64;
    let scrape = common::scrape_until(&client, &proxy, |s| {
        common::metric(s, &writes("ram_hit")) >= targets_written
    })
    .await;
    assert!(
        required_metric(&scrape, &writes("ram_hit")) >= targets_written,
        "{}",
        disk_metrics(&scrape)
    );
    for object in &targets {
        let reply = fetch(&client, &proxy, object).await;
        assert!(
            from_disk(&reply),
            "{}: {}",
            object.path(),
            reply.cache_status()
        );
    }

    for ((method, _), object) in cases.iter().zip(&targets) {
        let url = if method.as_str() == "PURGE" {
            proxy.admin_url(&object.path())
        } else {
            proxy.url(&object.path())
        };
        let reply = send(&client, &proxy, method.clone(), &url).await;
        assert_eq!(reply.status, StatusCode::OK, "{method} {}", object.path());
    }
    let scrape = scrape_metrics(&client, &proxy).await;
    assert_eq!(
        required_metric(&scrape, "bloomgate_disk_removed_total"),
        targets.len() as f64,
        "{}",
        disk_metrics(&scrape)
    );
    for ((method, _), object) in cases.iter().zip(&targets).step_by(2) {
        let reply = fetch(&client, &proxy, object).await;
        assert!(
            !reply.is_hit(),
            "{}: served after {method}: {}",
            object.path(),
            reply.cache_status()
        );
        assert_eq!(origin_gets(&origin, object), 2, "{}", object.path());
    }

    proxy.terminate();
    let proxy = config.start();
    for ((method, _), object) in cases.iter().zip(&targets).skip(1).step_by(2) {
        let reply = fetch(&client, &proxy, object).await;
        assert!(
            !reply.is_hit(),
            "{}: back from disk after {method} and a restart: {}",
            object.path(),
            reply.cache_status()
        );
        assert_eq!(origin_gets(&origin, object), 2, "{}", object.path());
    }
}

/// Reads how much space the files under a directory take, every 2 ms on its own thread, and keeps
/// the largest; stops when told or dropped (a failed assertion must not leave it running).
struct SpaceSampler {
    stop: Arc<AtomicBool>,
    largest: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SpaceSampler {
    fn start(dir: &Path) -> SpaceSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let largest = Arc::new(AtomicU64::new(0));
        let thread = std::thread::spawn({
            let (stop, largest, dir) = (Arc::clone(&stop), Arc::clone(&largest), dir.to_owned());
            move || {
                while !stop.load(Ordering::Relaxed) {
                    largest.fetch_max(allocated_bytes(&dir), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        });
        SpaceSampler {
            stop,
            largest,
            thread: Some(thread),
        }
    }

    /// Stops sampling; returns the most the files took at once.
    fn stop(mut self) -> u64 {
        self.finish();
        self.largest.load(Ordering::Relaxed)
    }

    fn finish(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for SpaceSampler {
    fn drop(&mut self) {
        self.finish();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disk_keeps_to_max_bytes_under_churn() {
    let origin = synthetic_origin().await;
    let dir = TempDir::new("disk-churn");
    let max_bytes: u64 = 1 << 20;
    let mut config = tiered(&origin.url(), dir.path());
    config
        .set("disk", "max_bytes", "\"1MiB\"")
        .set("disk", "block_bytes", "\"128KiB\"")
        .set("disk", "write_buffer", "\"512KiB\"")
        // The bound, not durability: a sync per 128 KiB segment (milliseconds each on a shared
        // machine) would slow the engine below the churn this test needs.
        .set("disk", "sync", "\"none\"");
    let proxy = config.start();
    let client = Client::new();

    let sampler = SpaceSampler::start(dir.path());
    let engine_written = |s: &str| common::metric(s, "bloomgate_disk_engine_written_bytes_total");
    // About 5 MiB of proven objects a batch: five times what the disk may hold. On a loaded
    // machine the writer lags and refuses most writes (budget: 532 of 620 with three test
    // binaries on two cores), so up to eight batches go in until the engine has written three
    // times the bound.
    let mut proven = Vec::new();
    for batch in 0..8 {
        let objects = objects_of_varied_sizes(&format!("churn{batch}"), 210);
        proven.extend(objects.iter().cloned());
        for chunk in objects.chunks(30) {
            prove(&client, &proxy, chunk).await;
            let scrape = scrape_metrics(&client, &proxy).await;
            let bytes = required_metric(&scrape, "bloomgate_disk_bytes");
            assert!(
                bytes <= required_metric(&scrape, "bloomgate_disk_max_bytes"),
                "{}",
                disk_metrics(&scrape)
            );
        }
        let scrape = scrape_metrics(&client, &proxy).await;
        if engine_written(&scrape) >= 3.0 * max_bytes as f64 {
            break;
        }
    }
    let scrape = common::scrape_until(&client, &proxy, |s| {
        engine_written(s) >= 3.0 * max_bytes as f64
    })
    .await;
    let largest = sampler.stop();
    assert!(
        engine_written(&scrape) >= 3.0 * max_bytes as f64,
        "too little churn to test the bound:\n{}",
        disk_metrics(&scrape)
    );
    assert!(
        largest <= max_bytes,
        "the tier's files took {largest} bytes, more than disk.max_bytes = {max_bytes}"
    );
    assert!(
        allocated_bytes(dir.path()) <= max_bytes,
        "{}",
        disk_metrics(&scrape)
    );
    // Still a working tier after reclaiming blocks.
    assert!(
        a_recent_eviction_is_served_from_disk(&client, &proxy, &proven).await,
        "{}",
        disk_metrics(&scrape)
    );
}

/// On tmpfs the tier reads through a mapping, and the native HTTP/1.1 server sends a disk hit's
/// body from the segment file with `sendfile`: the client gets the origin's bytes, and only a
/// whole body goes that way (a range is cut from memory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_hit_sent_from_its_segment_file_is_the_origins_bytes() {
    let origin = synthetic_origin().await;
    let dir = TempDir::in_memory("disk-sendfile");
    let mut config = tiered(&origin.url(), dir.path());
    config
        .set("server", "http1", "\"native\"")
        .set("server", "sendfile", "true");
    let proxy = config.start();
    let client = Client::new();
    let sent_from_files = |s: &str| common::metric(s, "bloomgate_disk_sendfile_bytes_total");
    // 1.5 MiB of proven objects through 256 KiB of RAM: the oldest go to disk.
    let proven = objects("sendfile", 24, 64 * KIB);
    prove(&client, &proxy, &proven).await;
    let written = common::scrape_until(&client, &proxy, |s| {
        common::metric(s, &writes("ram_hit")) >= 6.0
    })
    .await;
    assert_eq!(
        sent_from_files(&written),
        0.0,
        "RAM hits of origin bodies are not in files"
    );
    // Past the writer's idle flush: records still in its RAM batch are not read from a file. A
    // loaded machine may flush later than the idle time, so wait until the engine has written
    // to its files at least the bytes the tier took.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    common::scrape_until(&client, &proxy, |s| {
        let taken = common::required_metric(s, "bloomgate_disk_written_bytes_total");
        taken > 0.0
            && common::required_metric(s, "bloomgate_disk_engine_written_bytes_total") >= taken
    })
    .await;

    let mut disk_hits = 0;
    for object in &proven[..6] {
        // `fetch` checks the body against the origin's, byte for byte.
        if from_disk(&fetch(&client, &proxy, object).await) {
            disk_hits += 1;
        }
    }
    let scrape = scrape_metrics(&client, &proxy).await;
    assert!(
        disk_hits > 0,
        "nothing came from disk:\n{}",
        disk_metrics(&scrape)
    );
    assert_eq!(
        sent_from_files(&scrape),
        (disk_hits * 64 * KIB) as f64,
        "every disk hit's body goes from its file:\n{}",
        disk_metrics(&scrape)
    );

    // A range of a body held in a file is cut from memory: the bytes asked for, none sent
    // from the file.
    let object = &proven[0];
    let reply = client
        .get_with(
            &format!("http://{}{}", proxy.addr, object.path()),
            &[("range", "bytes=1000-1999")],
        )
        .await;
    assert_eq!(reply.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(&reply.body[..], &object.body()[1000..2000]);
    let after = scrape_metrics(&client, &proxy).await;
    assert_eq!(sent_from_files(&after), sent_from_files(&scrape));
}

/// On tmpfs the tier reads through a mapping and RAM keeps the disk hits it restores as slices of
/// it: a segment reclaimed under them moves to a new file, and no body is ever served changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mapped_disk_hits_held_in_ram_stay_whole_while_their_segments_are_reclaimed() {
    let origin = synthetic_origin().await;
    let dir = TempDir::in_memory("disk-mapped");
    let mut config = tiered(&origin.url(), dir.path());
    config
        .set("cache", "max_bytes", "\"1MiB\"")
        .set("disk", "max_bytes", "\"1MiB\"")
        .set("disk", "block_bytes", "\"128KiB\"")
        .set("disk", "write_buffer", "\"512KiB\"");
    let proxy = config.start();
    let client = Client::new();
    let renewed = |s: &str| common::metric(s, "bloomgate_disk_renewed_segments_total");

    // Hot objects: proven, pushed to disk by churn, then read back from it into RAM.
    let hot = objects("hot", 12, 20_000);
    prove(&client, &proxy, &hot).await;
    let mut from_disk = 0;
    let mut scrape = String::new();
    for batch in 0..8 {
        let churn = objects_of_varied_sizes(&format!("churn{batch}"), 60);
        for chunk in churn.chunks(15) {
            prove(&client, &proxy, chunk).await;
            if from_disk == 0 {
                // Records still in the engine's RAM batch are read from there, not pinned from
                // the mapping: until the hot objects have come back from a file, give the
                // writer its idle flush (`IDLE_FLUSH`, 1 s) so that whatever churn pushed to
                // disk is in a file, however far behind a loaded machine left the writer.
                tokio::time::sleep(Duration::from_millis(1300)).await;
            }
            // Every hot body, from RAM (a slice of a segment), disk or the origin, is whole.
            from_disk += served_from_disk(&client, &proxy, &hot).await;
        }
        scrape = scrape_metrics(&client, &proxy).await;
        if renewed(&scrape) > 0.0 && from_disk > 0 && batch >= 2 {
            break;
        }
    }
    assert!(
        from_disk > 0,
        "nothing came from disk:\n{}",
        disk_metrics(&scrape)
    );
    assert!(
        renewed(&scrape) > 0.0,
        "no reclaim met a segment RAM still held bytes of:\n{}",
        disk_metrics(&scrape)
    );
    // The old files went away with the slices: only the configured segments remain, no more.
    let segments = std::fs::read_dir(dir.path())
        .expect("list the tier's directory")
        .filter(|entry| {
            entry
                .as_ref()
                .is_ok_and(|entry| entry.file_name().to_string_lossy().starts_with("segment-"))
        })
        .count();
    assert_eq!(segments, 7, "(1 MiB - 4 KiB) / 128 KiB segments");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revalidation_rewrites_the_headers_of_the_disk_copy() {
    let origin = Origin::start();
    let dir = TempDir::new("disk-revalidate");
    let mut config = tiered(&origin.url(), dir.path());
    // With admission off every stored object has proved itself ("seen_before").
    config.mode("off");
    let proxy = config.start();
    let client = Client::new();
    let object = Object::new("revalidated", 8 * KIB);
    let version = |reply: Reply, cache_control: &str, version: &str| {
        reply
            .header("cache-control", cache_control)
            .header("etag", "\"v1\"")
            .header("x-version", version)
            .answers_304()
    };
    let mut first = Reply::ok("");
    first.body = object.body();
    // stale-if-error keeps the stale entry worth keeping, so RAM hands it to disk.
    origin.set(
        &object.path(),
        version(first, "max-age=1, stale-if-error=600", "1"),
    );
    let stored = fetch(&client, &proxy, &object).await;
    let fetched_at = Instant::now();
    assert!(stored.is_stored(), "{}", stored.cache_status());
    assert_eq!(stored.header("x-version"), Some("1"));
    // Main gives up its oldest entry first: the object, then some of these.
    let fillers = objects("revalidate-filler", 30, 16 * KIB);
    for filler in &fillers {
        origin.set(&filler.path(), filler.reply());
        fetch(&client, &proxy, filler).await;
    }
    let scrape = common::scrape_until(&client, &proxy, |s| {
        common::metric(s, &writes("seen_before")) >= 1.0
    })
    .await;
    assert!(
        required_metric(&scrape, &writes("seen_before")) >= 1.0,
        "{}",
        disk_metrics(&scrape)
    );

    // The origin's 304 now says: fresh for ten minutes, version 2.
    let mut same_body = Reply::ok("");
    same_body.body = object.body();
    origin.set(&object.path(), version(same_body, "max-age=600", "2"));
    tokio::time::sleep(Duration::from_millis(1200).saturating_sub(fetched_at.elapsed())).await;
    let revalidated = fetch(&client, &proxy, &object).await;
    let status = revalidated.cache_status();
    assert!(
        has_member(status, "fwd=stale") && has_member(status, "fwd-status=304"),
        "{status}"
    );
    assert_eq!(revalidated.header("x-version"), Some("2"));
    let conditional = origin.received(&object.path());
    assert_eq!(conditional.len(), 2);
    assert_eq!(conditional[1].header("if-none-match"), Some("\"v1\""));
    let scrape = common::scrape_until(&client, &proxy, |s| {
        common::metric(s, &writes("revalidated")) >= 1.0
    })
    .await;
    assert_eq!(
        required_metric(&scrape, &writes("revalidated")),
        1.0,
        "{}",
        disk_metrics(&scrape)
    );

    proxy.terminate();
    let proxy = config.start();
    let reply = fetch(&client, &proxy, &object).await;
    assert!(
        from_disk(&reply),
        "the disk copy is not fresh after the 304: {}",
        reply.cache_status()
    );
    assert_eq!(
        reply.header("x-version"),
        Some("2"),
        "the disk copy kept the headers from before the 304"
    );
    assert_eq!(origin.received(&object.path()).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_pages_used_bar_counts_the_records_not_the_preallocated_files() {
    let origin = synthetic_origin().await;
    let dir = TempDir::new("disk-used");
    let on_disk = objects("used", 8, 4 * KIB);
    leave_on_disk(&origin.url(), dir.path(), &on_disk).await;
    let proxy = tiered(&origin.url(), dir.path()).start();
    let client = Client::new();
    let status: serde_json::Value =
        serde_json::from_slice(&client.get(&proxy.admin_url("/status.json")).await.body)
            .expect("/status.json is JSON");
    let disk = &status["disk"];
    let count = |field: &str| {
        disk[field]
            .as_u64()
            .unwrap_or_else(|| panic!("no disk.{field}: {status}"))
    };
    assert_eq!(count("entries"), 8, "{status}");
    let (live, files, max) = (count("live_bytes"), count("bytes"), count("max_bytes"));
    let bodies = 8 * 4 * KIB as u64;
    assert!(
        live > bodies && live < 2 * bodies,
        "the records' bytes, headers and keys with the bodies: {status}"
    );
    // The segments are preallocated where the file system can (a 16 MiB tier here); the bar
    // must not count them, whatever they take.
    assert!(
        files > live,
        "the files hold the records and more: {status}"
    );

    let Some(chromium) = crate::status_page::chromium() else {
        return;
    };
    let dom = crate::status_page::rendered(chromium, &proxy).await;
    let marker = "data-key=\"disk.used\">";
    let bar = &dom[dom
        .find(marker)
        .unwrap_or_else(|| panic!("no used bar: {dom}"))..];
    let width = bar
        .split_once("width: ")
        .and_then(|(_, rest)| rest.split_once('%'))
        .and_then(|(width, _)| width.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no width in {bar}"));
    let expected = 100.0 * live as f64 / max as f64;
    assert!(
        (width - expected).abs() <= 0.05 + f64::EPSILON,
        "the bar shows {width}%, the records are {expected:.2}% of disk.max_bytes"
    );
}
