//! Shared pieces of the end-to-end tests: a programmable origin, the proxy process, clients.

pub mod client;
pub mod h2raw;
pub mod origin;
pub mod proxy;
pub mod refusing;
pub mod temp;
pub mod tls;
pub mod wire;

pub use client::{
    Client, Reply as ClientReply, has_member, raw_exchange, raw_status, read_available,
};
pub use origin::{BodyReading, Fault, Origin, RefusingPort, Reply};
pub use proxy::{ProxyConfig, ProxyProcess};
pub use temp::TempDir;

/// `POST /reload` on the proxy's admin listener: the proxy re-reads its config file.
pub async fn reload(client: &Client, proxy: &ProxyProcess) -> ClientReply {
    client
        .send(http::Method::POST, &proxy.admin_url("/reload"), &[])
        .await
        .expect("POST /reload")
}

/// A series `name{a="x",b="y"}` as its name and its labels.
fn split_series(series: &str) -> (&str, Vec<&str>) {
    match series.split_once('{') {
        Some((name, labels)) => (
            name,
            labels
                .trim_end_matches('}')
                .split(',')
                .filter(|l| !l.is_empty())
                .collect(),
        ),
        None => (series, Vec::new()),
    }
}

/// The values of the series of a Prometheus text scrape that are `series` (`name{labels}`), or
/// `name` with those labels among others (a request counter's `route`, summed over).
fn matching(scrape: &str, series: &str) -> Vec<f64> {
    let (name, wanted) = split_series(series);
    scrape
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit_once(' '))
        .filter(|(line_series, _)| {
            let (line_name, labels) = split_series(line_series);
            line_name == name && wanted.iter().all(|label| labels.contains(label))
        })
        .filter_map(|(_, value)| value.parse().ok())
        .collect()
}

/// Metric value of the series `name{labels}` in a Prometheus text scrape, summed over any other
/// labels its series have (0 when absent).
pub fn metric(scrape: &str, series: &str) -> f64 {
    matching(scrape, series).into_iter().sum()
}

/// Like [`metric`], but panics when the scrape has no series `name{labels}`, so that a series the
/// exporter stopped emitting never passes for a zero.
pub fn required_metric(scrape: &str, series: &str) -> f64 {
    let emitted = !matching(scrape, series).is_empty();
    assert!(emitted, "no series {series} in the scrape:\n{scrape}");
    metric(scrape, series)
}

/// Scrapes the proxy's `/metrics` until `ready` holds (the store and the disk writer count a
/// moment after the client has its body), for at most 20 s; returns the last scrape, which the
/// caller then checks. The bound is generous because only a failing test ever meets it, and a
/// loaded CI machine can keep a disk writer or a health probe seconds behind.
pub async fn scrape_until(
    client: &Client,
    proxy: &ProxyProcess,
    ready: impl Fn(&str) -> bool,
) -> String {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let scrape = client.get(&proxy.admin_url("/metrics")).await;
        assert_eq!(scrape.status, http::StatusCode::OK);
        let scrape = scrape.text();
        if ready(&scrape) || tokio::time::Instant::now() >= deadline {
            return scrape;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The cache metric `name` summed over its segments (`probation` and `main`): the whole cache.
pub fn over_segments(scrape: &str, name: &str) -> f64 {
    ["probation", "main"]
        .iter()
        .map(|segment| required_metric(scrape, &format!("{name}{{segment=\"{segment}\"}}")))
        .sum()
}
