//! The /metrics scrape after real traffic passes `promtool check metrics` and names every metric
//! the dashboard and docs/metrics.md's table promise.

use crate::common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{Client, Fault, Origin, ProxyConfig, Reply};
use http::Method;

/// The metric names the design promised from the start (the dashboard uses exactly these); renaming
/// one breaks every dashboard built on it.
const DESIGN_METRICS: &[&str] = &[
    "bloomgate_requests_total",
    "bloomgate_request_duration_seconds",
    "bloomgate_admission_total",
    "bloomgate_filter_fill_ratio",
    "bloomgate_filter_estimated_items",
    "bloomgate_filter_estimated_fpr",
    "bloomgate_filter_bytes",
    "bloomgate_filter_rotations_total",
    "bloomgate_cache_entries",
    "bloomgate_cache_bytes",
    "bloomgate_cache_writes_total",
    "bloomgate_cache_written_bytes_total",
    "bloomgate_cache_evictions_total",
    "bloomgate_origin_requests_total",
    "bloomgate_origin_bytes_total",
];

/// Hits, misses, a pass, a 404, an aborted body and a timeout, so that every kind of series has
/// samples.
async fn traffic(origin: &Origin, proxy: &common::ProxyProcess) {
    let client = Client::new();
    origin.set(
        "/m/cached",
        Reply::ok("cached").header("cache-control", "max-age=60"),
    );
    origin.set(
        "/m/chunked",
        Reply::ok("chunked body")
            .header("cache-control", "max-age=60")
            .chunked(),
    );
    origin.set(
        "/m/private",
        Reply::ok("p").header("cache-control", "private"),
    );
    origin.set("/m/missing", Reply::ok("no").status(404));
    origin.set("/m/post", Reply::ok("posted"));
    origin.set(
        "/m/reset",
        Reply::ok(&"x".repeat(10_000))
            .header("cache-control", "max-age=60")
            .fault(Fault::ResetMidBody),
    );
    origin.set("/m/silent", Reply::ok("").fault(Fault::Silence));
    for _ in 0..3 {
        client.get(&proxy.url("/m/cached")).await;
        client.get(&proxy.url("/m/chunked")).await;
    }
    client.get(&proxy.url("/m/private")).await;
    client.get(&proxy.url("/m/missing")).await;
    let _ = client.send(Method::POST, &proxy.url("/m/post"), &[]).await;
    let _ = client.send(Method::GET, &proxy.url("/m/reset"), &[]).await;
    let _ = client.send(Method::GET, &proxy.url("/m/silent"), &[]).await;
}

#[tokio::test]
async fn metrics_after_traffic_pass_promtool_and_name_every_design_metric() {
    let origin = Origin::start();
    let proxy = ProxyConfig::new(&origin.url()).start();
    traffic(&origin, &proxy).await;
    let scrape = Client::new().get(&proxy.admin_url("/metrics")).await.text();

    let missing: Vec<&str> = DESIGN_METRICS
        .iter()
        .copied()
        .filter(|name| {
            !scrape
                .lines()
                .filter(|line| !line.starts_with('#'))
                .any(|line| line.starts_with(name))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "metrics missing from the scrape: {missing:?}\n{scrape}"
    );

    let promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut promtool = match promtool {
        Ok(child) => child,
        Err(error) if std::env::var_os("CI").is_some() => {
            panic!("promtool is required under CI (Debian package `prometheus`): {error}")
        }
        Err(error) => {
            eprintln!("note: promtool not found ({error}); skipping `promtool check metrics`");
            return;
        }
    };
    promtool
        .stdin
        .take()
        .expect("promtool stdin")
        .write_all(scrape.as_bytes())
        .expect("write the scrape to promtool");
    let output = promtool.wait_with_output().expect("promtool finished");
    let complaints = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success() && complaints.trim().is_empty(),
        "promtool check metrics complained:\n{complaints}\nscrape:\n{scrape}"
    );
}
