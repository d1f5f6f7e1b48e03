//! End to end: the disk tier's guarantees hold for slices of large objects. A slice asked for once
//! never reaches the disk; one asked for twice stays in RAM while first copies do not need its
//! room, and reaches the disk, once, when they do; slices written
//! before a SIGKILL are served after the restart, byte for byte; a corrupted slice record is
//! dropped, logged with its file, fetched again and never served. (A purge reaching the disk is
//! in `slices.rs`.)

use crate::common;

use std::time::Duration;

use common::{Client, ProxyConfig, ProxyProcess, TempDir, metric};
use http::StatusCode;

use bloomgate::traffic::pattern::ObjectChunks;
use bloomgate::traffic::{OriginHandle, OriginOptions, start_origin};

const SLICE: u64 = 64 << 10;
/// Sixteen slices.
const SIZE: u64 = 1 << 20;

/// A proxy whose RAM holds four of the object's sixteen 64 KiB slices, over a disk tier in `dir`:
/// slices asked for again reach the disk as RAM gives them up.
pub(crate) fn sliced_on_disk(origin: &OriginHandle, dir: &TempDir) -> ProxyConfig {
    let mut config = ProxyConfig::new(&origin.url());
    config
        .mode("probation")
        .probation_share(0.5)
        .set("cache", "max_bytes", "\"320KiB\"")
        .set("cache", "max_object_bytes", "\"128KiB\"")
        .set("cache", "slice_above", "\"128KiB\"")
        .set("cache", "slice_bytes", "\"64KiB\"")
        .set("cache.key", "include_host", "false")
        .set(
            "disk",
            "path",
            &format!("{:?}", dir.path().display().to_string()),
        )
        .set("disk", "max_bytes", "\"16MiB\"")
        .set("disk", "block_bytes", "\"1MiB\"")
        .set("disk", "write_buffer", "\"4MiB\"");
    config
}

/// Whether `body` is exactly bytes `range` of the synthetic origin's object `key`.
fn is_part_of(body: &[u8], key: &str, range: std::ops::Range<u64>) -> bool {
    let mut at = 0;
    for chunk in ObjectChunks::range(key, range.clone()) {
        if body.get(at..at + chunk.len()) != Some(&chunk[..]) {
            return false;
        }
        at += chunk.len();
    }
    at == body.len() && at as u64 == range.end - range.start
}

fn film_path(key: &str) -> String {
    format!("/obj/{key}?size={SIZE}")
}

/// Asks for the whole object twice (each slice's second request stores it in main) and waits
/// until at least ten slices' bytes reached the disk tier's files.
async fn slices_on_disk(client: &Client, proxy: &ProxyProcess, key: &str) {
    for _ in 0..2 {
        let reply = client.get(&proxy.url(&film_path(key))).await;
        assert!(is_part_of(&reply.body, key, 0..SIZE), "{key}, whole");
    }
    let wanted = (10 * SLICE) as f64;
    let scrape = common::scrape_until(client, proxy, |s| {
        metric(s, "bloomgate_disk_engine_written_bytes_total") >= wanted
    })
    .await;
    assert!(
        metric(&scrape, "bloomgate_disk_engine_written_bytes_total") >= wanted,
        "the slices asked for again did not reach the disk's files"
    );
}

/// `bloomgate_disk_writes_total` for `reason`.
fn disk_writes(scrape: &str, reason: &str) -> f64 {
    metric(
        scrape,
        &format!("bloomgate_disk_writes_total{{reason=\"{reason}\"}}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_asked_for_twice_reaches_the_disk_when_first_copies_need_its_room_and_one_asked_once_never()
 {
    let origin = start_origin(OriginOptions::default())
        .await
        .expect("origin");
    let dir = TempDir::new("slices-twice");
    let client = Client::new();
    let proxy = sliced_on_disk(&origin, &dir).start();
    let scrape = |ready: fn(&str) -> bool| common::scrape_until(&client, &proxy, ready);
    let written = |s: &str| {
        ["ram_hit", "seen_before", "revalidated"]
            .iter()
            .map(|reason| disk_writes(s, reason))
            .sum::<f64>()
    };
    let once = client.get(&proxy.url(&film_path("once"))).await;
    assert!(is_part_of(&once.body, "once", 0..SIZE));
    // RAM, full of the first copies of "once", takes two more.
    let two_slices = [("range", "bytes=0-131071")];
    let twice_url = proxy.url(&film_path("twice"));
    let first = client.get_with(&twice_url, &two_slices).await;
    assert!(is_part_of(&first.body, "twice", 0..2 * SLICE));
    let after_first =
        scrape(|s| metric(s, "bloomgate_disk_rejected_total{reason=\"first_hit\"}") >= 10.0).await;
    assert!(
        metric(
            &after_first,
            "bloomgate_disk_rejected_total{reason=\"first_hit\"}"
        ) >= 10.0
    );
    assert_eq!(
        written(&after_first),
        0.0,
        "a slice asked for once was written"
    );
    let fetched = origin.stats.requests_for("twice");

    // Their second and third requests are hits in RAM, where nothing needs their room yet.
    for _ in 0..2 {
        let again = client.get_with(&twice_url, &two_slices).await;
        assert!(is_part_of(&again.body, "twice", 0..2 * SLICE));
        assert!(
            again.cache_status().contains("detail=slice-hits-2-of-2"),
            "{}",
            again.cache_status()
        );
    }
    let in_ram = scrape(|s| metric(s, "bloomgate_cache_entries{segment=\"main\"}") >= 2.0).await;
    assert_eq!(
        metric(&in_ram, "bloomgate_cache_entries{segment=\"main\"}"),
        2.0
    );
    assert_eq!(metric(&in_ram, "bloomgate_disk_hits_total"), 0.0);
    assert!(
        metric(&in_ram, "bloomgate_cache_write_back_bytes") >= (2 * SLICE) as f64,
        "the proven slices wait in the write-back queue"
    );
    assert_eq!(
        written(&in_ram),
        0.0,
        "proven slices still in RAM were written"
    );

    // First copies of another object need the room: the proven slices leave first, to the disk.
    let other = client.get(&proxy.url(&film_path("other"))).await;
    assert!(is_part_of(&other.body, "other", 0..SIZE));
    let after_other = scrape(|s| disk_writes(s, "ram_hit") >= 2.0).await;
    assert_eq!(
        (disk_writes(&after_other, "ram_hit"), written(&after_other)),
        (2.0, 2.0),
        "the two slices asked for again, and nothing else, reach the disk"
    );
    assert_eq!(
        metric(&after_other, "bloomgate_cache_write_back_bytes"),
        0.0
    );
    let from_disk = client.get_with(&twice_url, &two_slices).await;
    assert!(is_part_of(&from_disk.body, "twice", 0..2 * SLICE));
    let after_disk_hit = scrape(|s| metric(s, "bloomgate_disk_hits_total") >= 2.0).await;
    assert!(metric(&after_disk_hit, "bloomgate_disk_hits_total") >= 2.0);
    assert_eq!(
        origin.stats.requests_for("twice"),
        fetched,
        "each slice came from the origin once"
    );

    // The first copies of "once" that RAM gave up are fetched again, seen before, and each
    // pushes the one before it to the disk: every slice asked for twice is on disk or still in
    // RAM, and was written at most once.
    let again = client.get(&proxy.url(&film_path("once"))).await;
    assert!(is_part_of(&again.body, "once", 0..SIZE));
    let placed = |s: &str| written(s) + metric(s, "bloomgate_cache_entries{segment=\"main\"}");
    let all = scrape(|s| {
        let written = ["ram_hit", "seen_before"]
            .iter()
            .map(|reason| disk_writes(s, reason))
            .sum::<f64>();
        written + metric(s, "bloomgate_cache_entries{segment=\"main\"}") >= 18.0
    })
    .await;
    assert_eq!(
        placed(&all),
        18.0,
        "every slice asked for twice, on disk or in RAM, once each"
    );
    assert!(disk_writes(&all, "seen_before") >= 12.0);
}

/// Polls `/readyz` until the disk tier says what it recovered.
async fn until_recovered(client: &Client, proxy: &ProxyProcess) {
    for _ in 0..1000 {
        let ready = client.get(&proxy.admin_url("/readyz")).await;
        if ready.status == StatusCode::OK && ready.text().contains(" entries recovered in ") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the disk tier did not open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slices_written_before_a_sigkill_are_served_after_the_restart_byte_for_byte() {
    let origin = start_origin(OriginOptions::default())
        .await
        .expect("origin");
    let dir = TempDir::new("slices-sigkill");
    let config = sliced_on_disk(&origin, &dir);
    let client = Client::new();
    let proxy = config.start();
    slices_on_disk(&client, &proxy, "film").await;
    // Killed while another object's slices are being fetched and written.
    let load = {
        let (client, url) = (client.clone(), proxy.url(&film_path("other")));
        tokio::spawn(async move {
            for _ in 0..20 {
                if client.send(http::Method::GET, &url, &[]).await.is_err() {
                    return;
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    tokio::task::block_in_place(|| proxy.kill());
    load.await.expect("the load");

    let proxy = config.start();
    until_recovered(&client, &proxy).await;
    for key in ["film", "other"] {
        let whole = client.get(&proxy.url(&film_path(key))).await;
        assert_eq!(whole.status, StatusCode::OK, "{key}");
        assert!(is_part_of(&whole.body, key, 0..SIZE), "{key}: every byte");
    }
    let part = client
        .get_with(
            &proxy.url(&film_path("film")),
            &[("range", "bytes=100000-700000")],
        )
        .await;
    assert_eq!(part.status, StatusCode::PARTIAL_CONTENT);
    assert!(is_part_of(&part.body, "film", 100_000..700_001));
    let scrape = client.get(&proxy.admin_url("/metrics")).await.text();
    assert!(
        metric(&scrape, "bloomgate_disk_hits_total") >= 10.0,
        "the slices written before the kill were not served from disk after it"
    );
}

/// Flips 16 bytes in the middle of slice `index` of `key`, in every record of it in the block
/// files of `dir`; returns how many records it damaged.
fn corrupt_slice(dir: &std::path::Path, key: &str, index: u64) -> usize {
    use std::os::unix::fs::FileExt;
    // A record's key (the slice's cache key) comes right before its value, which opens with
    // bloomgate's magic; the body follows the headers.
    let mut record_key = format!("{}#slice={index}", film_path(key)).into_bytes();
    record_key.extend_from_slice(b"BGR3");
    let middle = index * SLICE + SLICE / 2;
    let window: Vec<u8> = ObjectChunks::range(key, middle..middle + 64)
        .flat_map(|chunk| chunk.to_vec())
        .collect();
    let mut damaged = 0;
    for entry in std::fs::read_dir(dir).expect("the disk tier's directory") {
        let path = entry.expect("a directory entry").path();
        let bytes = std::fs::read(&path).expect("read a block file");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open a block file");
        let mut from = 0;
        while let Some(at) = find(&bytes[from..], &record_key).map(|at| from + at) {
            let end = (at + (SLICE + 16 * 1024) as usize).min(bytes.len());
            let Some(found) = find(&bytes[at..end], &window).map(|found| at + found) else {
                from = at + record_key.len();
                continue;
            };
            let flipped: Vec<u8> = bytes[found..found + 16].iter().map(|b| b ^ 0xff).collect();
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
async fn a_corrupted_slice_record_is_dropped_logged_and_fetched_again_never_served() {
    let origin = start_origin(OriginOptions::default())
        .await
        .expect("origin");
    let dir = TempDir::new("slices-corrupt");
    let config = sliced_on_disk(&origin, &dir);
    let client = Client::new();
    let proxy = config.start();
    slices_on_disk(&client, &proxy, "film").await;
    proxy.terminate();

    // Every other slice damaged where the disk has it; the others stay intact beside them.
    let damaged: Vec<u64> = (0..16)
        .step_by(2)
        .filter(|&index| corrupt_slice(dir.path(), "film", index) >= 1)
        .collect();
    assert!(!damaged.is_empty(), "no slice record on disk to damage");

    let proxy = config.start();
    until_recovered(&client, &proxy).await;
    let whole = client.get(&proxy.url(&film_path("film"))).await;
    assert_eq!(whole.status, StatusCode::OK);
    assert!(
        is_part_of(&whole.body, "film", 0..SIZE),
        "a damaged slice's bytes were served"
    );
    let scrape = client.get(&proxy.admin_url("/metrics")).await.text();
    assert_eq!(
        metric(&scrape, "bloomgate_disk_dropped_total"),
        damaged.len() as f64,
        "damaged slices {damaged:?}"
    );
    assert!(
        metric(&scrape, "bloomgate_disk_hits_total") >= 1.0,
        "no intact slice beside the damaged ones was served from disk"
    );
    let log = proxy.log();
    let dir_name = dir.path().display().to_string();
    assert!(
        log.lines().any(|line| line.contains("WARN")
            && line.contains("disk record dropped")
            && line.contains(&dir_name)),
        "no warning naming the damaged file; log:\n{log}"
    );
}

/// While the disk tier cannot take writes (here: its index still recovering), a proven slice stays
/// under RAM's own rules, as without a disk tier: hit in probation, it is promoted into main and
/// outlives another object's first copies. Written back instead, it would be the first to leave,
/// dropped by a tier that refuses it, and fetched again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_proven_while_the_disk_cannot_take_it_stays_in_ram() {
    let origin = start_origin(OriginOptions::default())
        .await
        .expect("origin");
    let dir = TempDir::new("slices-recovering");
    let config = bloomgate::config::Config::from_toml_str(&sliced_on_disk(&origin, &dir).text())
        .expect("the test's config");
    let (tier, release) = crate::disk::tier_recovering_until_released(&config);
    let running = bloomgate::proxy::start_with_disk(config, tier)
        .await
        .expect("start");
    let client = Client::new();
    let url = |key: &str| format!("http://{}{}", running.addr, film_path(key));
    let two_slices = [("range", "bytes=0-131071")];
    for _ in 0..2 {
        let reply = client.get_with(&url("twice"), &two_slices).await;
        assert!(is_part_of(&reply.body, "twice", 0..2 * SLICE));
    }
    let fetched = origin.stats.requests_for("twice");
    let other = client.get(&url("other")).await;
    assert!(is_part_of(&other.body, "other", 0..SIZE));
    let again = client.get_with(&url("twice"), &two_slices).await;
    assert!(is_part_of(&again.body, "twice", 0..2 * SLICE));
    assert!(
        again.cache_status().contains("detail=slice-hits-2-of-2"),
        "{}",
        again.cache_status()
    );
    assert_eq!(origin.stats.requests_for("twice"), fetched);
    drop(release);
    running.shutdown().await;
}
