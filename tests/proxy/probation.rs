//! End to end: probation admission. A first-seen object is stored in the small probation segment, a
//! hit there promotes it to main when probation gives it up, an unhit one is dropped and comes back
//! straight into main; purge and invalidation reach both segments; the three `admission.mode`s and
//! their keys in `check-config`. Each test that looks at the cache's state starts its own proxy.

use crate::common;

use std::path::PathBuf;
use std::process::Command;

use common::{
    Client, ClientReply, Origin, ProxyConfig, ProxyProcess, Reply, has_member, required_metric,
};
use http::{Method, StatusCode};

const KIB: usize = 1024;

/// A storable body of `size` bytes that names its path, so that a hit shows which object it is.
fn body(path: &str, size: usize) -> String {
    format!("{path} ").repeat(size / (path.len() + 1) + 1)[..size].to_owned()
}

fn storable(body: &str) -> Reply {
    Reply::ok(body).header("cache-control", "max-age=60")
}

fn purge() -> Method {
    Method::from_bytes(b"PURGE").expect("PURGE is a valid method")
}

/// `metric{segment="..."}`.
fn in_segment(metric: &str, segment: &str) -> String {
    format!("{metric}{{segment=\"{segment}\"}}")
}

/// `bloomgate_admission_total{decision="..."}`.
fn decided(decision: &str) -> String {
    format!("bloomgate_admission_total{{decision=\"{decision}\"}}")
}

/// What the cache did with one response, as its `Cache-Status` says.
#[derive(Debug, PartialEq)]
enum Stored {
    InProbation,
    InMain,
    /// Streamed through and not stored, because it was the first request (`detail=first-hit`).
    NotOnFirstHit,
    Hit,
    /// Anything else, with the whole `Cache-Status`.
    Other(String),
}

fn stored(response: &ClientReply) -> Stored {
    let status = response.cache_status();
    let has_detail = status.split(';').any(|p| p.trim().starts_with("detail="));
    if response.is_hit() && !has_detail {
        Stored::Hit
    } else if response.is_stored() && has_member(status, "detail=probation") {
        Stored::InProbation
    } else if response.is_stored() && !has_detail {
        Stored::InMain
    } else if !response.is_stored() && has_member(status, "detail=first-hit") {
        Stored::NotOnFirstHit
    } else {
        Stored::Other(status.to_owned())
    }
}

/// GETs `path` and checks that the body is the object's.
async fn get(client: &Client, proxy: &ProxyProcess, path: &str, expected_body: &str) -> Stored {
    let response = client.get(&proxy.url(path)).await;
    assert_eq!(response.status, StatusCode::OK, "{path}");
    assert!(
        response.text() == expected_body,
        "{path}: another body ({} bytes, expected {})",
        response.body.len(),
        expected_body.len()
    );
    stored(&response)
}

/// Sizes of the proxy the promotion and drop tests run, and the traffic that fills it.
///
/// `cache.max_bytes` = 128 KiB with `probation_share` = 0.25: probation's share is 32 KiB, main's
/// 96 KiB. An entry weighs its body, its headers three times (the headers and the policy's copies)
/// and 256 bytes, so an 8 KiB object here (two short headers) weighs under 8.5 KiB: it fits
/// probation, and 16 of them (about 136 KiB) overflow the whole cache. With main holding at most
/// one such entry (well under its 96 KiB), the cache makes room from probation, oldest first; so 24
/// fillers, all first seen, make probation give up every entry stored before them, whatever else
/// the weights are.
const OBJECT: usize = 8 * KIB;
const FILLERS: usize = 24;

fn promotion_proxy(origin: &Origin) -> ProxyProcess {
    ProxyConfig::new(&origin.url())
        .mode("probation")
        .probation_share(0.25)
        .set("cache", "max_bytes", "\"128KiB\"")
        .set("cache", "max_object_bytes", "\"32KiB\"")
        .start()
}

/// Requests `FILLERS` new objects under `prefix` once each; each is first seen, so goes to
/// probation.
async fn fill_probation(client: &Client, origin: &Origin, proxy: &ProxyProcess, prefix: &str) {
    for i in 0..FILLERS {
        let path = format!("{prefix}/filler-{i}");
        let filler = body(&path, OBJECT);
        origin.set(&path, storable(&filler));
        assert_eq!(
            get(client, proxy, &path, &filler).await,
            Stored::InProbation,
            "{path}"
        );
    }
}

#[tokio::test]
async fn a_first_request_is_stored_in_probation_and_the_second_is_a_hit() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url()).mode("probation").start();
    let client = Client::new();
    let path = "/probation/first";
    let object = body(path, OBJECT);
    origin.set(path, storable(&object));

    let first = client.get(&proxy.url(path)).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.text(), object);
    let status = first.cache_status();
    assert!(has_member(status, "stored"), "{status}");
    assert!(has_member(status, "detail=probation"), "{status}");
    assert!(!first.is_hit(), "{status}");
    assert_eq!(origin.count(path), 1);

    let probation_writes = in_segment("bloomgate_cache_writes_total", "probation");
    let scrape = common::scrape_until(&client, &proxy, |s| {
        common::metric(s, &probation_writes) >= 1.0
    })
    .await;
    assert_eq!(required_metric(&scrape, &probation_writes), 1.0);
    assert_eq!(
        required_metric(
            &scrape,
            &in_segment("bloomgate_cache_written_bytes_total", "probation")
        ),
        OBJECT as f64
    );
    assert_eq!(
        required_metric(&scrape, &in_segment("bloomgate_cache_entries", "probation")),
        1.0
    );
    assert!(
        required_metric(&scrape, &in_segment("bloomgate_cache_bytes", "probation"))
            >= OBJECT as f64
    );
    assert_eq!(required_metric(&scrape, &decided("probation")), 1.0);
    assert_eq!(
        required_metric(&scrape, &in_segment("bloomgate_cache_writes_total", "main")),
        0.0
    );
    assert_eq!(
        required_metric(&scrape, &in_segment("bloomgate_cache_entries", "main")),
        0.0
    );

    let second = client.get(&proxy.url(path)).await;
    assert_eq!(second.text(), object);
    assert_eq!(stored(&second), Stored::Hit, "{}", second.cache_status());
    assert!(
        second
            .cache_status()
            .split(';')
            .any(|p| p.trim().starts_with("ttl=")),
        "a hit in probation is served like any hit: {}",
        second.cache_status()
    );
    assert_eq!(origin.count(path), 1, "a hit must not contact the origin");

    // A hit only marks the entry: it moves to main when probation gives it up, not before.
    let scrape = common::scrape_until(&client, &proxy, |_| true).await;
    assert_eq!(
        required_metric(&scrape, &in_segment("bloomgate_cache_entries", "probation")),
        1.0
    );
    assert_eq!(
        required_metric(&scrape, &in_segment("bloomgate_cache_writes_total", "main")),
        0.0
    );
}

#[tokio::test]
async fn a_one_hit_object_never_reaches_main() {
    let origin = Origin::start();
    // Probation's share is 6.4 KiB: a 4 KiB object (under 4.5 KiB with its headers) fits it, and
    // 40 of them are 2.5 times the whole cache.
    let proxy = ProxyConfig::new(&origin.url())
        .mode("probation")
        .set("cache", "max_bytes", "\"64KiB\"")
        .set("cache", "max_object_bytes", "\"16KiB\"")
        .start();
    let client = Client::new();
    let objects = 40;
    for i in 0..objects {
        let path = format!("/one-hit/{i}");
        let object = body(&path, 4 * KIB);
        origin.set(&path, storable(&object));
        assert_eq!(
            get(&client, &proxy, &path, &object).await,
            Stored::InProbation,
            "{path}"
        );
    }

    let probation_writes = in_segment("bloomgate_cache_writes_total", "probation");
    let scrape = common::scrape_until(&client, &proxy, |s| {
        common::metric(s, &probation_writes) >= objects as f64
    })
    .await;
    assert_eq!(required_metric(&scrape, &probation_writes), objects as f64);
    for metric in [
        "bloomgate_cache_writes_total",
        "bloomgate_cache_written_bytes_total",
        "bloomgate_cache_entries",
        "bloomgate_cache_bytes",
    ] {
        assert_eq!(
            required_metric(&scrape, &in_segment(metric, "main")),
            0.0,
            "{metric}: a one-hit object reached main"
        );
    }
    assert_eq!(required_metric(&scrape, &decided("promoted")), 0.0);
    let kept = required_metric(&scrape, &in_segment("bloomgate_cache_entries", "probation"));
    assert!(
        kept < objects as f64,
        "160 KiB of objects all kept in a 64 KiB cache"
    );
    assert_eq!(
        required_metric(&scrape, "bloomgate_cache_evictions_total"),
        objects as f64 - kept,
        "every object probation does not hold was dropped by an eviction"
    );
    assert!(
        required_metric(&scrape, &in_segment("bloomgate_cache_bytes", "probation"))
            <= (64 * KIB) as f64
    );
}

#[tokio::test]
async fn a_reused_object_is_promoted_to_main_and_stays_a_hit() {
    let origin = Origin::start();
    let proxy = promotion_proxy(&origin);
    let client = Client::new();
    let path = "/promoted/reused";
    let object = body(path, OBJECT);
    origin.set(path, storable(&object));
    assert_eq!(
        get(&client, &proxy, path, &object).await,
        Stored::InProbation
    );
    assert_eq!(get(&client, &proxy, path, &object).await, Stored::Hit);

    fill_probation(&client, &origin, &proxy, "/promoted").await;
    let promoted = decided("promoted");
    let scrape =
        common::scrape_until(&client, &proxy, |s| common::metric(s, &promoted) >= 1.0).await;
    assert_eq!(
        required_metric(&scrape, &promoted),
        1.0,
        "promoted: the hit object, and it alone"
    );
    assert_eq!(
        required_metric(&scrape, &in_segment("bloomgate_cache_writes_total", "main")),
        1.0,
        "a promotion counts as a main write"
    );
    assert_eq!(
        required_metric(
            &scrape,
            &in_segment("bloomgate_cache_written_bytes_total", "main")
        ),
        OBJECT as f64
    );
    assert_eq!(
        required_metric(&scrape, &in_segment("bloomgate_cache_entries", "main")),
        1.0
    );
    assert_eq!(
        required_metric(
            &scrape,
            &in_segment("bloomgate_cache_writes_total", "probation")
        ),
        (1 + FILLERS) as f64
    );
    assert!(
        required_metric(&scrape, "bloomgate_cache_evictions_total") >= 1.0,
        "the fillers after it were dropped"
    );

    assert_eq!(
        get(&client, &proxy, path, &object).await,
        Stored::Hit,
        "the promoted object is served from main"
    );
    assert_eq!(origin.count(path), 1, "a promotion must not fetch again");
}

#[tokio::test]
async fn an_unhit_object_dropped_from_probation_comes_back_into_main() {
    let origin = Origin::start();
    let proxy = promotion_proxy(&origin);
    let client = Client::new();
    let path = "/dropped/once";
    let object = body(path, OBJECT);
    origin.set(path, storable(&object));
    assert_eq!(
        get(&client, &proxy, path, &object).await,
        Stored::InProbation
    );

    fill_probation(&client, &origin, &proxy, "/dropped").await;
    let probation_writes = in_segment("bloomgate_cache_writes_total", "probation");
    let scrape = common::scrape_until(&client, &proxy, |s| {
        common::metric(s, &probation_writes) >= (1 + FILLERS) as f64
    })
    .await;
    assert!(required_metric(&scrape, "bloomgate_cache_evictions_total") >= 1.0);
    assert_eq!(required_metric(&scrape, &decided("promoted")), 0.0);
    assert_eq!(
        required_metric(&scrape, &in_segment("bloomgate_cache_writes_total", "main")),
        0.0
    );

    // Dropped, but the doorkeeper has seen it: back it comes, straight into main.
    assert_eq!(get(&client, &proxy, path, &object).await, Stored::InMain);
    assert_eq!(origin.count(path), 2);
    let main_writes = in_segment("bloomgate_cache_writes_total", "main");
    let scrape =
        common::scrape_until(&client, &proxy, |s| common::metric(s, &main_writes) >= 1.0).await;
    assert_eq!(required_metric(&scrape, &main_writes), 1.0);
    assert_eq!(required_metric(&scrape, &decided("admitted")), 1.0);
    assert_eq!(get(&client, &proxy, path, &object).await, Stored::Hit);
    assert_eq!(origin.count(path), 2);
}

/// Waits until `segment` holds `entries` entries, and checks its bytes go with them.
async fn segment_holds(client: &Client, proxy: &ProxyProcess, segment: &str, entries: f64) {
    let series = in_segment("bloomgate_cache_entries", segment);
    let scrape =
        common::scrape_until(client, proxy, |s| common::metric(s, &series) == entries).await;
    assert_eq!(required_metric(&scrape, &series), entries, "{series}");
    let bytes = required_metric(&scrape, &in_segment("bloomgate_cache_bytes", segment));
    assert_eq!(
        bytes == 0.0,
        entries == 0.0,
        "{segment}: {bytes} bytes for {entries} entries"
    );
}

/// PURGEs `path` through the admin listener, for the proxy's own host.
async fn purge_from_admin(client: &Client, proxy: &ProxyProcess, path: &str) {
    let purged = client
        .send(
            purge(),
            &proxy.admin_url(path),
            &[("host", &proxy.addr.to_string())],
        )
        .await
        .expect("PURGE");
    assert_eq!(purged.status, StatusCode::OK, "{}", purged.text());
}

#[tokio::test]
async fn purge_removes_an_entry_from_probation_and_from_main() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url()).mode("probation").start();
    let client = Client::new();
    let path = "/purge-segments/object";
    let object = body(path, 2 * KIB);
    origin.set(path, storable(&object));

    assert_eq!(
        get(&client, &proxy, path, &object).await,
        Stored::InProbation
    );
    segment_holds(&client, &proxy, "probation", 1.0).await;
    purge_from_admin(&client, &proxy, path).await;
    segment_holds(&client, &proxy, "probation", 0.0).await;

    // Purged from probation, but seen before: the next copy goes to main.
    assert_eq!(get(&client, &proxy, path, &object).await, Stored::InMain);
    assert_eq!(origin.count(path), 2);
    segment_holds(&client, &proxy, "main", 1.0).await;
    purge_from_admin(&client, &proxy, path).await;
    segment_holds(&client, &proxy, "main", 0.0).await;

    let after = get(&client, &proxy, path, &object).await;
    assert_ne!(after, Stored::Hit, "served from main after its purge");
    assert_eq!(origin.count(path), 3);
}

#[tokio::test]
async fn an_unsafe_method_invalidates_an_entry_in_probation_and_in_main() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url()).mode("probation").start();
    let client = Client::new();
    let path = "/invalidate-segments/object";
    let object = body(path, 2 * KIB);
    origin.set(path, storable(&object));

    assert_eq!(
        get(&client, &proxy, path, &object).await,
        Stored::InProbation
    );
    let post = client
        .send(Method::POST, &proxy.url(path), &[])
        .await
        .expect("POST");
    assert_eq!(post.status, StatusCode::OK);
    segment_holds(&client, &proxy, "probation", 0.0).await;

    assert_eq!(get(&client, &proxy, path, &object).await, Stored::InMain);
    assert_eq!(origin.count(path), 3);
    segment_holds(&client, &proxy, "main", 1.0).await;
    let delete = client
        .send(Method::DELETE, &proxy.url(path), &[])
        .await
        .expect("DELETE");
    assert_eq!(delete.status, StatusCode::OK);
    segment_holds(&client, &proxy, "main", 0.0).await;

    let after = get(&client, &proxy, path, &object).await;
    assert_ne!(after, Stored::Hit, "served from main after a DELETE");
    assert_eq!(origin.count(path), 5);
}

#[tokio::test]
async fn an_object_larger_than_probation_is_stored_only_on_its_second_request() {
    let origin = Origin::start();
    // Probation's share is 6.4 KiB of the 64 KiB: a 16 KiB object is over it, but under the
    // largest object (32 KiB), so main takes it.
    let proxy = ProxyConfig::new(&origin.url())
        .mode("probation")
        .set("cache", "max_bytes", "\"64KiB\"")
        .set("cache", "max_object_bytes", "\"32KiB\"")
        .start();
    let client = Client::new();
    let path = "/over-probation/large";
    let large = body(path, 16 * KIB);
    origin.set(path, storable(&large));

    assert_eq!(
        get(&client, &proxy, path, &large).await,
        Stored::NotOnFirstHit
    );
    assert_eq!(get(&client, &proxy, path, &large).await, Stored::InMain);
    assert_eq!(get(&client, &proxy, path, &large).await, Stored::Hit);
    assert_eq!(origin.count(path), 2);

    let small_path = "/over-probation/small";
    let small = body(small_path, 2 * KIB);
    origin.set(small_path, storable(&small));
    assert_eq!(
        get(&client, &proxy, small_path, &small).await,
        Stored::InProbation,
        "an object that fits probation goes there on its first request"
    );

    let probation_writes = in_segment("bloomgate_cache_writes_total", "probation");
    let scrape = common::scrape_until(&client, &proxy, |s| {
        common::metric(s, &probation_writes) >= 1.0
    })
    .await;
    assert_eq!(required_metric(&scrape, &decided("first_hit")), 1.0);
    assert_eq!(required_metric(&scrape, &decided("admitted")), 1.0);
    assert_eq!(required_metric(&scrape, &decided("probation")), 1.0);
    assert_eq!(required_metric(&scrape, &probation_writes), 1.0);
    assert_eq!(
        required_metric(&scrape, &in_segment("bloomgate_cache_writes_total", "main")),
        1.0
    );
}

/// One configuration of `[admission]` and what it does with the same three requests.
struct ModeCase {
    name: &'static str,
    /// `[admission]` keys and their TOML values.
    keys: &'static [(&'static str, &'static str)],
    /// What each response's `Cache-Status` says.
    stored: [Stored; 3],
    /// Requests the origin has seen after each.
    origin_counts: [usize; 3],
}

#[tokio::test]
async fn each_mode_stores_as_documented() {
    use Stored::{Hit, InMain, InProbation, NotOnFirstHit};
    let cases = [
        ModeCase {
            name: "probation",
            keys: &[("mode", "\"probation\"")],
            stored: [InProbation, Hit, Hit],
            origin_counts: [1, 1, 1],
        },
        ModeCase {
            name: "second-hit",
            keys: &[("mode", "\"second-hit\"")],
            stored: [NotOnFirstHit, InMain, Hit],
            origin_counts: [1, 2, 2],
        },
        ModeCase {
            name: "off",
            keys: &[("mode", "\"off\"")],
            stored: [InMain, Hit, Hit],
            origin_counts: [1, 1, 1],
        },
        ModeCase {
            name: "default",
            keys: &[],
            stored: [InProbation, Hit, Hit],
            origin_counts: [1, 1, 1],
        },
        ModeCase {
            name: "enabled-true",
            keys: &[("enabled", "true")],
            stored: [NotOnFirstHit, InMain, Hit],
            origin_counts: [1, 2, 2],
        },
        ModeCase {
            name: "enabled-false",
            keys: &[("enabled", "false")],
            stored: [InMain, Hit, Hit],
            origin_counts: [1, 1, 1],
        },
    ];
    let origin = Origin::start();
    let client = Client::new();
    for case in cases {
        let mut config = ProxyConfig::new(&origin.url());
        for (key, value) in case.keys {
            config.set("admission", key, value);
        }
        let proxy = config.start();
        let path = format!("/modes/{}", case.name);
        let object = body(&path, 2 * KIB);
        origin.set(&path, storable(&object));
        let mut said = Vec::new();
        let mut origin_counts = Vec::new();
        for _ in 0..3 {
            said.push(get(&client, &proxy, &path, &object).await);
            origin_counts.push(origin.count(&path));
        }
        assert_eq!(said, case.stored, "{}: three requests", case.name);
        assert_eq!(
            origin_counts, case.origin_counts,
            "{}: origin requests after each request",
            case.name
        );
    }
}

/// Writes `text` to a config file of its own and runs `bloomgate check-config` on it.
fn check_config(name: &str, text: &str) -> (bool, String) {
    let dir: PathBuf = std::env::temp_dir().join(format!(
        "bloomgate-probation-config-{}-{name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    let path = dir.join("bloomgate.toml");
    std::fs::write(&path, text).expect("write config");
    let output = Command::new(env!("CARGO_BIN_EXE_bloomgate"))
        .arg("check-config")
        .arg(&path)
        .output()
        .expect("run bloomgate check-config");
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.success(), stderr)
}

#[test]
fn check_config_rejects_an_unknown_mode_naming_the_key() {
    let (ok, stderr) = check_config("mode", "[admission]\nmode = \"sometimes\"\n");
    assert!(!ok, "accepted; stderr:\n{stderr}");
    assert!(stderr.contains("admission.mode"), "{stderr}");
    assert!(stderr.contains("sometimes"), "{stderr}");
}

#[test]
fn check_config_rejects_a_probation_share_outside_zero_to_one() {
    for (name, share) in [
        ("share-high", "1.5"),
        ("share-zero", "0.0"),
        ("share-one", "1.0"),
    ] {
        let (ok, stderr) = check_config(name, &format!("[admission]\nprobation_share = {share}\n"));
        assert!(!ok, "probation_share = {share} accepted; stderr:\n{stderr}");
        assert!(
            stderr.contains("admission.probation_share"),
            "probation_share = {share}: {stderr}"
        );
    }
    let (_, stderr) = check_config("share-shown", "[admission]\nprobation_share = 1.5\n");
    assert!(
        stderr.contains("1.5"),
        "the bad value is not shown: {stderr}"
    );
}

#[test]
fn check_config_rejects_enabled_together_with_mode() {
    let (ok, stderr) = check_config(
        "both",
        "[admission]\nenabled = true\nmode = \"probation\"\n",
    );
    assert!(!ok, "accepted; stderr:\n{stderr}");
    assert!(stderr.contains("admission.enabled"), "{stderr}");
    assert!(stderr.contains("admission.mode"), "{stderr}");
}

#[test]
fn check_config_accepts_enabled_alone_and_the_new_keys() {
    for (name, text) in [
        ("enabled-false", "[admission]\nenabled = false\n"),
        ("enabled-true", "[admission]\nenabled = true\n"),
        (
            "mode-and-share",
            "[admission]\nmode = \"second-hit\"\nprobation_share = 0.25\n",
        ),
        ("mode-off", "[admission]\nmode = \"off\"\n"),
    ] {
        let (ok, stderr) = check_config(name, text);
        assert!(ok, "{name} refused:\n{stderr}");
    }
}
