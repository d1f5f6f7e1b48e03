//! End to end: purge by tag on the admin listener. The origin names tags in `Surrogate-Key`
//! (space-separated) or `Cache-Tag` (comma-separated); one `POST /purge/tag/<tag>` purges every
//! entry carrying it, every `Vary` variant, in RAM and on disk, hard (gone) or soft (stale, so
//! `stale-while-revalidate` and `stale-if-error` still serve it), also across a restart. The tag
//! fields never reach the client.

use crate::common;

use std::time::Duration;

use common::{Client, ClientReply, Origin, ProxyConfig, ProxyProcess, Reply, TempDir, has_member};
use http::{Method, StatusCode};

/// Purges `tag` on the admin listener (`soft` marks stale), expecting a 200.
async fn purge_tag(client: &Client, proxy: &ProxyProcess, tag: &str, soft: bool) {
    let query = if soft { "?soft=1" } else { "" };
    let url = proxy.admin_url(&format!("/purge/tag/{tag}{query}"));
    let reply = client
        .send(Method::POST, &url, &[])
        .await
        .expect("POST /purge/tag");
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let kind = if soft { "soft" } else { "hard" };
    assert_eq!(reply.text(), format!("purged tag {tag} ({kind})\n"));
}

async fn scrape(client: &Client, proxy: &ProxyProcess) -> String {
    client.get(&proxy.admin_url("/metrics")).await.text()
}

fn purged(kind: &str) -> String {
    format!("bloomgate_purged_entries_total{{kind=\"{kind}\"}}")
}

fn purges(kind: &str) -> String {
    format!("bloomgate_purges_total{{kind=\"{kind}\"}}")
}

#[tokio::test]
async fn a_hard_tag_purge_removes_every_variant_and_only_entries_with_the_tag() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    let client = Client::new();
    let varied = "/tags/varied";
    origin.set(
        varied,
        Reply::echo("accept-language")
            .header("cache-control", "max-age=600")
            .header("vary", "accept-language")
            .header("surrogate-key", "product-1 all"),
    );
    let comma = "/tags/comma";
    origin.set(
        comma,
        Reply::ok("comma")
            .header("cache-control", "max-age=600")
            .header("cache-tag", "blog, product-1"),
    );
    let other = "/tags/other";
    origin.set(
        other,
        Reply::ok("other")
            .header("cache-control", "max-age=600")
            .header("surrogate-key", "product-2 all"),
    );
    let languages = [[("accept-language", "en")], [("accept-language", "fr")]];
    for _ in 0..2 {
        for language in &languages {
            let reply = client.get_with(&proxy.url(varied), language).await;
            assert_eq!(reply.text(), language[0].1);
            assert_eq!(
                reply.header("surrogate-key"),
                None,
                "tags sent to the client"
            );
        }
        for path in [comma, other] {
            let reply = client.get(&proxy.url(path)).await;
            assert_eq!(reply.header("cache-tag"), None, "tags sent to the client");
        }
    }
    for language in &languages {
        assert!(client.get_with(&proxy.url(varied), language).await.is_hit());
    }

    purge_tag(&client, &proxy, "product-1", false).await;

    for language in &languages {
        let reply = client.get_with(&proxy.url(varied), language).await;
        assert!(
            !reply.is_hit(),
            "{language:?} served after its tag was purged: {}",
            reply.cache_status()
        );
        assert_eq!(reply.text(), language[0].1);
    }
    assert_eq!(origin.count(varied), 4);
    let comma_reply = client.get(&proxy.url(comma)).await;
    assert!(!comma_reply.is_hit(), "{}", comma_reply.cache_status());
    let other_reply = client.get(&proxy.url(other)).await;
    assert!(
        other_reply.is_hit(),
        "an entry without the tag was purged: {}",
        other_reply.cache_status()
    );
    // Fetched again after the purge, so not purged by it.
    for language in &languages {
        assert!(client.get_with(&proxy.url(varied), language).await.is_hit());
    }

    let scrape = scrape(&client, &proxy).await;
    assert_eq!(common::required_metric(&scrape, &purges("tag_hard")), 1.0);
    assert_eq!(common::required_metric(&scrape, &purges("tag_soft")), 0.0);
    // The first variant looked up removes its key; the comma entry is the second.
    assert_eq!(common::required_metric(&scrape, &purged("tag_hard")), 2.0);
}

#[tokio::test]
async fn a_soft_tag_purge_serves_stale_while_it_revalidates_and_on_error() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url()).admission(false).start();
    let client = Client::new();
    let revalidating = "/tags/soft-swr";
    origin.set(
        revalidating,
        Reply::ok("swr")
            .header("cache-control", "max-age=600, stale-while-revalidate=60")
            .header("surrogate-key", "news"),
    );
    let on_error = "/tags/soft-sie";
    origin.set(
        on_error,
        Reply::ok("sie")
            .header("cache-control", "max-age=600, stale-if-error=60")
            .header("surrogate-key", "news"),
    );
    for path in [revalidating, on_error] {
        client.get(&proxy.url(path)).await;
        assert!(client.get(&proxy.url(path)).await.is_hit());
    }

    purge_tag(&client, &proxy, "news", true).await;
    origin.set(on_error, Reply::ok("down").status(503));

    let stale = client.get(&proxy.url(revalidating)).await;
    assert!(
        has_member(stale.cache_status(), "detail=stale-while-revalidate"),
        "{}",
        stale.cache_status()
    );
    assert_eq!(stale.text(), "swr");
    // The background refetch stores a fresh copy, which the purge does not touch.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while origin.count(revalidating) < 2 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(origin.count(revalidating), 2);
    let refetched = |reply: &ClientReply| {
        reply.is_hit() && !has_member(reply.cache_status(), "detail=stale-while-revalidate")
    };
    let mut refreshed = client.get(&proxy.url(revalidating)).await;
    while !refetched(&refreshed) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
        refreshed = client.get(&proxy.url(revalidating)).await;
    }
    assert!(refetched(&refreshed), "{}", refreshed.cache_status());

    let on_error_reply = client.get(&proxy.url(on_error)).await;
    assert_eq!(on_error_reply.status, StatusCode::OK);
    assert_eq!(on_error_reply.text(), "sie");
    assert!(
        has_member(on_error_reply.cache_status(), "detail=stale-if-error"),
        "{}",
        on_error_reply.cache_status()
    );

    let scrape = scrape(&client, &proxy).await;
    assert_eq!(common::required_metric(&scrape, &purges("tag_soft")), 1.0);
    assert_eq!(common::required_metric(&scrape, &purged("tag_soft")), 2.0);
}

const KIB: usize = 1024;

/// A tagged object of `size` bytes, fresh for ten minutes.
fn tagged(path: &str, tags: &str, size: usize) -> Reply {
    let mut reply = Reply::ok("")
        .header("cache-control", "max-age=600, stale-while-revalidate=600")
        .header("surrogate-key", tags);
    reply.body = path.bytes().cycle().take(size).collect();
    reply
}

fn from_disk(reply: &ClientReply) -> bool {
    reply.is_hit() && has_member(reply.cache_status(), "detail=disk")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tag_purges_reach_entries_on_disk_and_hold_across_a_restart() {
    let origin = Origin::start();
    let dir = TempDir::new("tags-disk");
    let config = super::disk::tiered(&origin.url(), dir.path());
    let proxy = config.start();
    let client = Client::new();
    let targets = [
        ("/tags/disk-hard-now", "hard-now"),
        ("/tags/disk-soft-now", "soft-now"),
        ("/tags/disk-hard-restart", "hard-restart"),
        ("/tags/disk-soft-restart", "soft-restart"),
        ("/tags/disk-kept", "kept"),
    ];
    let fillers: Vec<String> = (0..30).map(|i| format!("/tags/filler-{i}")).collect();
    for (path, tag) in targets {
        origin.set(path, tagged(path, tag, 12 * KIB));
    }
    for path in &fillers {
        origin.set(path, tagged(path, "filler", 16 * KIB));
    }
    // Hit while in RAM, so that RAM writes them to disk when it evicts them, oldest first.
    let paths = targets.iter().map(|(path, _)| *path);
    for path in paths.chain(fillers.iter().map(String::as_str)) {
        client.get(&proxy.url(path)).await;
        assert!(client.get(&proxy.url(path)).await.is_hit(), "{path}");
    }
    let written = targets.len() as f64;
    let ram_hit = "bloomgate_disk_writes_total{reason=\"ram_hit\"}";
    let scrape =
        common::scrape_until(&client, &proxy, |s| common::metric(s, ram_hit) >= written).await;
    assert!(common::metric(&scrape, ram_hit) >= written, "{scrape}");

    purge_tag(&client, &proxy, "hard-now", false).await;
    purge_tag(&client, &proxy, "soft-now", true).await;
    purge_tag(&client, &proxy, "hard-restart", false).await;
    purge_tag(&client, &proxy, "soft-restart", true).await;

    let hard = client.get(&proxy.url(targets[0].0)).await;
    assert!(
        !hard.is_hit(),
        "hard-purged, from disk: {}",
        hard.cache_status()
    );
    let soft = client.get(&proxy.url(targets[1].0)).await;
    assert!(
        has_member(soft.cache_status(), "detail=stale-while-revalidate"),
        "soft-purged, from disk: {}",
        soft.cache_status()
    );
    let kept = client.get(&proxy.url(targets[4].0)).await;
    assert!(from_disk(&kept), "untouched: {}", kept.cache_status());

    proxy.terminate();
    let proxy = config.start();
    let hard = client.get(&proxy.url(targets[2].0)).await;
    assert!(
        !hard.is_hit(),
        "hard-purged, after a restart: {}",
        hard.cache_status()
    );
    let soft = client.get(&proxy.url(targets[3].0)).await;
    assert!(
        has_member(soft.cache_status(), "detail=stale-while-revalidate"),
        "soft-purged, after a restart: {}",
        soft.cache_status()
    );
    assert_eq!(origin.count(targets[2].0), 2);
}
