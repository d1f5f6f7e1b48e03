//! End to end: the doorkeeper's filters survive restarts. A graceful stop saves them and the next
//! start restores them; an unusable snapshot is logged and ignored; SIGKILL in the middle of the
//! periodic saves never leaves a snapshot that fails to restore.

use crate::common;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bloomgate::admission::{Doorkeeper, DoorkeeperConfig};
use common::{Client, Origin, ProxyConfig, Reply, TempDir, has_member};

fn object(body: &str) -> Reply {
    Reply::ok(body).header("cache-control", "max-age=60")
}

/// A proxy whose doorkeeper is saved to `snapshot`; the cache key leaves out the Host, which
/// names a new port after each restart. Second-hit admission, so that what the doorkeeper
/// remembers shows in whether a response is stored.
fn persisting(origin: &Origin, snapshot: &Path) -> ProxyConfig {
    let mut config = ProxyConfig::new(&origin.url());
    config.admission(true);
    config.set("cache.key", "include_host", "false").set(
        "admission",
        "snapshot_path",
        &toml_string(snapshot),
    );
    config
}

fn toml_string(path: &Path) -> String {
    format!("{:?}", path.to_str().expect("a UTF-8 temp path"))
}

fn is_first_hit(reply: &common::ClientReply) -> bool {
    has_member(reply.cache_status(), "detail=first-hit")
}

#[tokio::test]
async fn a_restarted_proxy_stores_on_the_second_request_seen_before_the_restart() {
    let origin = Origin::start();
    origin.set("/x", object("x"));
    origin.set("/y", object("y"));
    let dir = TempDir::new("persist-restart");
    let snapshot = dir.join("doorkeeper.snap");
    let config = persisting(&origin, &snapshot);

    let proxy = config.start();
    let first = Client::new().get(&proxy.url("/x")).await;
    assert!(is_first_hit(&first), "{}", first.cache_status());
    let log = proxy.terminate();
    assert!(
        snapshot.exists(),
        "no snapshot after a graceful stop; log:\n{log}"
    );

    let proxy = config.start();
    let client = Client::new();
    let second = client.get(&proxy.url("/x")).await;
    assert!(
        second.is_stored(),
        "the restarted proxy forgot /x: {}; log:\n{}",
        second.cache_status(),
        proxy.log()
    );
    let unseen = client.get(&proxy.url("/y")).await;
    assert!(is_first_hit(&unseen), "{}", unseen.cache_status());
}

#[tokio::test]
async fn periodic_snapshots_are_counted_and_survive_sigkill() {
    let origin = Origin::start();
    origin.set("/p", object("p"));
    let dir = TempDir::new("persist-periodic");
    let snapshot = dir.join("doorkeeper.snap");
    let mut config = persisting(&origin, &snapshot);
    config.set("admission", "snapshot_interval", "\"20ms\"");

    let proxy = config.start();
    let client = Client::new();
    let first = client.get(&proxy.url("/p")).await;
    assert!(is_first_hit(&first), "{}", first.cache_status());
    let saves = || async {
        let scrape = client.get(&proxy.admin_url("/metrics")).await.text();
        let ok = common::metric(&scrape, "bloomgate_filter_snapshots_total{outcome=\"ok\"}");
        let error = common::metric(
            &scrape,
            "bloomgate_filter_snapshots_total{outcome=\"error\"}",
        );
        (ok, error)
    };
    let (after_request, _) = saves().await;
    // Two more saves: at least one of them began after /p was observed.
    let mut waited = 0;
    while saves().await.0 < after_request + 2.0 {
        waited += 1;
        assert!(waited < 500, "no periodic snapshots; log:\n{}", proxy.log());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(saves().await.1, 0.0, "log:\n{}", proxy.log());
    proxy.kill();

    let proxy = config.start();
    let second = Client::new().get(&proxy.url("/p")).await;
    assert!(
        second.is_stored(),
        "a periodic snapshot lost /p: {}",
        second.cache_status()
    );
}

#[tokio::test]
async fn an_unusable_snapshot_is_logged_with_its_reason_and_the_proxy_starts_fresh() {
    let origin = Origin::start();
    origin.set("/x", object("x"));
    let dir = TempDir::new("persist-unusable");
    let snapshot = dir.join("doorkeeper.snap");
    let config = persisting(&origin, &snapshot);
    let proxy = config.start();
    let first = Client::new().get(&proxy.url("/x")).await;
    assert!(is_first_hit(&first), "{}", first.cache_status());
    proxy.terminate();
    // A good snapshot that has seen /x: any damage must make the proxy forget it.
    let good = std::fs::read(&snapshot).expect("the snapshot of a graceful stop");

    let mut corrupt = good.clone();
    let middle = corrupt.len() / 2;
    corrupt[middle] ^= 0x10;
    // The good snapshot was sized for the default capacity.
    let stale_capacity = 5_000;
    let cases: [(&str, Vec<u8>, Option<u64>, &str); 5] = [
        (
            "truncated",
            good[..good.len() - 100].to_vec(),
            None,
            "truncated",
        ),
        (
            "cut inside the header",
            good[..20].to_vec(),
            None,
            "truncated",
        ),
        ("corrupt bits", corrupt, None, "corrupt"),
        (
            "not a snapshot",
            b"hello, world".repeat(20),
            None,
            "not a bloomgate doorkeeper snapshot",
        ),
        ("stale", good.clone(), Some(stale_capacity), "config"),
    ];
    for (case, bytes, capacity, reason) in cases {
        let config = match capacity {
            Some(capacity) => config_with_capacity(&origin, &snapshot, capacity),
            None => persisting(&origin, &snapshot),
        };
        std::fs::write(&snapshot, &bytes).expect("write the damaged snapshot");
        let proxy = config.start();
        let reply = Client::new().get(&proxy.url("/x")).await;
        let log = proxy.log();
        assert!(
            is_first_hit(&reply),
            "{case}: /x was remembered from an unusable snapshot: {}",
            reply.cache_status()
        );
        let warning = log
            .lines()
            .find(|line| line.contains("WARN") && line.contains("doorkeeper.snap"))
            .unwrap_or_else(|| panic!("{case}: no warning naming the file; log:\n{log}"));
        assert!(
            warning.contains(reason) && warning.contains("starting with empty filters"),
            "{case}: the warning does not say {reason:?}: {warning}"
        );
        // Not a graceful stop: that would save over the next case's file.
        proxy.kill();
    }
}

fn config_with_capacity(origin: &Origin, snapshot: &Path, capacity: u64) -> ProxyConfig {
    let mut config = persisting(origin, snapshot);
    config.set("admission", "capacity", &capacity.to_string());
    config
}

/// Large enough that a save takes a while, so that kills land in the middle of writes.
const BIG_CAPACITY: u64 = 3_000_000;
const KILLS: usize = 20;

fn big_doorkeeper_config() -> DoorkeeperConfig {
    DoorkeeperConfig::with_capacity(BIG_CAPACITY)
}

/// A small generator for kill delays; its seed is printed so that a failure can be replayed.
struct Delays(u64);

impl Delays {
    fn next_millis(&mut self, below: u64) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % below
    }
}

#[tokio::test]
async fn sigkill_during_snapshot_writes_always_leaves_the_previous_or_the_new_snapshot() {
    let origin = Origin::start();
    let dir = TempDir::new("persist-sigkill");
    let snapshot = dir.join("doorkeeper.snap");
    let temporary = dir.join("doorkeeper.snap.tmp");
    let mut config = config_with_capacity(&origin, &snapshot, BIG_CAPACITY);
    config.set("admission", "snapshot_interval", "\"10ms\"");
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |t| t.as_nanos() as u64);
    println!("kill delay seed {seed}");
    let mut delays = Delays(seed);

    // Keys the snapshot on disk has seen; it may only grow (no rotation at this capacity).
    let mut saved_keys: Vec<String> = Vec::new();
    let (mut killed_mid_write, mut runs_that_saved_their_key) = (0, 0);
    for run in 0..KILLS {
        let key = format!("/k{run}");
        origin.set(&key, object("k"));
        let proxy = config.start();
        let start_log = proxy.log();
        assert!(
            !start_log.contains("doorkeeper snapshot"),
            "run {run}: the snapshot left by the last kill did not restore (seed {seed}):\n{start_log}"
        );
        let reply = Client::new().get(&proxy.url(&key)).await;
        assert!(is_first_hit(&reply), "{}", reply.cache_status());
        tokio::time::sleep(Duration::from_millis(delays.next_millis(300))).await;
        proxy.kill();
        if temporary.exists() {
            killed_mid_write += 1;
        }

        let Ok(bytes) = std::fs::read(&snapshot) else {
            assert!(
                saved_keys.is_empty(),
                "run {run}: the snapshot vanished (seed {seed})"
            );
            continue;
        };
        let restored = Doorkeeper::builder(big_doorkeeper_config())
            .restore(&bytes)
            .unwrap_or_else(|e| {
                panic!("run {run}: a kill left a broken snapshot (seed {seed}): {e}")
            });
        for seen in &saved_keys {
            assert!(
                restored.contains(seen.as_bytes()),
                "run {run}: the snapshot went back to before {seen} was saved (seed {seed})"
            );
        }
        if restored.contains(key.as_bytes()) {
            runs_that_saved_their_key += 1;
            saved_keys.push(key);
        }
    }
    println!(
        "{KILLS} kills: {killed_mid_write} left a .tmp behind (killed mid-write), \
         {runs_that_saved_their_key} saved their own key first"
    );
    assert!(
        runs_that_saved_their_key > 0,
        "no run saved a snapshot: the test checked nothing"
    );

    // A last start over whatever the kills left, .tmp included, restores without a warning.
    let proxy = config.start();
    let log = proxy.log();
    assert!(!log.contains("doorkeeper snapshot"), "{log}");
    if let Some(last) = saved_keys.last() {
        let reply = Client::new().get(&proxy.url(last)).await;
        assert!(reply.is_stored(), "{}", reply.cache_status());
    }
}
