//! The Grafana dashboard, checked against the real exporter and a real Prometheus.
//!
//! A running bloomgate (the binary, in front of an origin started here, in the default admission
//! mode, probation, with a disk tier in a temporary directory) serves traffic with hits, misses,
//! first hits, stores in probation, promotions, evictions, disk writes, disk hits, revalidations,
//! purges and origin errors; its `/metrics` must name every metric the dashboard uses, and every
//! panel query must return series when Prometheus (Debian's `prometheus`, installed by `.ci/run`)
//! evaluates it over real scrapes.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bloomgate::cache::disk::{Rejection, WriteReason};
use bloomgate::listening::ListeningLine;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use tokio::net::TcpListener;

const DASHBOARD: &str = include_str!("../../grafana/dashboard.json");

/// Objects the traffic cycles over; with `cache.max_bytes` below their total the cache must evict.
const KEYS: usize = 40;

/// Objects of a round that prove themselves in RAM (two requests each), to be written to disk
/// when RAM evicts them and read back from there [`DISK_LAG`] rounds later.
const DISK_OBJECTS: usize = 4;

/// Rounds after which a round's proven objects have left RAM (256 KiB): each round brings some
/// 150 KiB of new or restored objects.
const DISK_LAG: usize = 3;

/// New objects of a round requested once: stored in probation and dropped from there unhit, so
/// the disk tier refuses them (first_hit).
const ONE_HIT_OBJECTS: usize = 8;

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let path =
            std::env::temp_dir().join(format!("bloomgate-grafana-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process killed when dropped, so a failing test leaves nothing running.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Body size of an object: 2-6 KiB, fixed per key.
fn object_size(key: &str) -> usize {
    let spread = key.bytes().fold(0usize, |acc, b| acc * 31 + b as usize) % 4096;
    2048 + spread
}

async fn origin_response(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_string();
    let response = if let Some(key) = path.strip_prefix("/obj/") {
        Response::builder()
            .header("cache-control", "public, max-age=60")
            .body(Full::new(Bytes::from(vec![b'x'; object_size(key)])))
    } else if path.starts_with("/reused/") {
        // Small enough for the probation segment (a tenth of cache.max_bytes).
        Response::builder()
            .header("cache-control", "public, max-age=60")
            .body(Full::new(Bytes::from(vec![b'r'; 1024])))
    } else if path.starts_with("/large/") {
        // Over the probation segment (a tenth of cache.max_bytes), under cache.max_object_bytes:
        // not stored on its first request (first_hit), stored in main on its second (seen_before).
        Response::builder()
            .header("cache-control", "public, max-age=60")
            .body(Full::new(Bytes::from(vec![b'l'; 30 * 1024])))
    } else if path.starts_with("/disk/") {
        // Revalidated with a 304 when a client asks for it with `Cache-Control: no-cache`.
        if request.headers().contains_key("if-none-match") {
            Response::builder()
                .status(StatusCode::NOT_MODIFIED)
                .header("etag", "\"d\"")
                .header("cache-control", "public, max-age=60")
                .body(Full::new(Bytes::new()))
        } else {
            Response::builder()
                .header("etag", "\"d\"")
                .header("cache-control", "public, max-age=60")
                .body(Full::new(Bytes::from(vec![b'd'; 10 * 1024])))
        }
    } else if path.starts_with("/big/") {
        // Above cache.max_object_bytes: admission says too_large.
        Response::builder()
            .header("cache-control", "public, max-age=60")
            .body(Full::new(Bytes::from(vec![b'b'; 80 * 1024])))
    } else if path.starts_with("/private/") {
        Response::builder()
            .header("cache-control", "no-store")
            .body(Full::new(Bytes::from_static(b"private")))
    } else if path.starts_with("/fail/") {
        Response::builder()
            .status(StatusCode::SERVICE_UNAVAILABLE)
            .body(Full::new(Bytes::from_static(b"unavailable")))
    } else {
        Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Full::new(Bytes::new()))
    };
    Ok(response.unwrap())
}

/// Starts the test origin on a free loopback port.
async fn start_origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service_fn(origin_response))
                    .await;
            });
        }
    });
    addr
}

struct Proxy {
    _process: Running,
    addr: SocketAddr,
    admin: SocketAddr,
}

/// Starts the bloomgate binary with a small cache, a small doorkeeper and a small disk tier in
/// `dir`, so evictions, rotations and disk writes happen within seconds, and reads its ports from
/// the line it prints.
fn start_proxy(dir: &Path, origin: SocketAddr) -> Proxy {
    let config = dir.join("bloomgate.toml");
    let disk = dir.join("disk");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\
             [admin]\nlisten = \"127.0.0.1:0\"\n\
             [origin]\nurl = \"http://{origin}\"\n\
             [cache]\nmax_bytes = \"256KiB\"\nmax_object_bytes = \"64KiB\"\n\
             [admission]\ncapacity = 30\n\
             [disk]\npath = \"{}\"\nmax_bytes = \"16MiB\"\nblock_bytes = \"1MiB\"\n\
             write_buffer = \"4MiB\"\n\
             [log]\nlevel = \"warn\"\n",
            disk.display()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_bloomgate"))
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let process = Running(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let listening: ListeningLine = line.parse().unwrap_or_else(|error| panic!("{error}"));
    Proxy {
        _process: process,
        addr: listening.addr,
        admin: listening.admin_addr,
    }
}

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn send(client: &HttpClient, method: Method, url: &str) -> (StatusCode, Bytes) {
    let request = Request::builder()
        .method(method)
        .uri(url)
        .body(Full::new(Bytes::new()))
        .unwrap();
    send_request(client, request).await
}

async fn send_request(client: &HttpClient, request: Request<Full<Bytes>>) -> (StatusCode, Bytes) {
    let response = client.request(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, body)
}

/// One round of requests: every key once in an order that changes per round (stores in probation,
/// first hits, then admissions, and evictions from the small cache), a hot key three times (hits),
/// new objects once (one-hit wonders, refused by the disk tier when probation drops them), a new
/// object twice (stored in probation, then hit there: promoted when probation gives it up during
/// the next rounds), a new object too large for probation twice (a first hit, then stored in main
/// as seen before), new objects twice each (hit in probation: proven), the proven objects of
/// [`DISK_LAG`] rounds ago again (from disk: RAM has evicted them), one of them revalidated (a 304
/// rewrites its disk record) and one purged (removed from disk), and uncacheable, oversized,
/// failing and non-GET requests.
async fn traffic_round(client: &HttpClient, proxy: SocketAddr, admin: SocketAddr, round: usize) {
    for i in 0..KEYS {
        // A stride coprime with KEYS visits every key each round.
        let key = (i * 7 + round) % KEYS;
        send(client, Method::GET, &format!("http://{proxy}/obj/{key}")).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for _ in 0..3 {
        send(client, Method::GET, &format!("http://{proxy}/obj/hot")).await;
    }
    for i in 0..ONE_HIT_OBJECTS {
        send(
            client,
            Method::GET,
            &format!("http://{proxy}/obj/once-{round}-{i}"),
        )
        .await;
    }
    for _ in 0..2 {
        send(
            client,
            Method::GET,
            &format!("http://{proxy}/reused/{round}"),
        )
        .await;
    }
    for _ in 0..2 {
        send(
            client,
            Method::GET,
            &format!("http://{proxy}/large/{round}"),
        )
        .await;
    }
    for i in 0..DISK_OBJECTS {
        for _ in 0..2 {
            send(
                client,
                Method::GET,
                &format!("http://{proxy}/disk/{round}/{i}"),
            )
            .await;
        }
    }
    if let Some(earlier) = round.checked_sub(DISK_LAG) {
        disk_round(client, proxy, admin, earlier).await;
    }
    send(client, Method::GET, &format!("http://{proxy}/big/{round}")).await;
    send(
        client,
        Method::GET,
        &format!("http://{proxy}/private/{round}"),
    )
    .await;
    send(client, Method::GET, &format!("http://{proxy}/fail/{round}")).await;
    send(client, Method::POST, &format!("http://{proxy}/obj/0")).await;
}

/// The proven objects of round `earlier`, gone from RAM: read back from disk, then one revalidated
/// in RAM (`no-cache`: the 304 rewrites the record on disk) and one purged from both tiers.
async fn disk_round(client: &HttpClient, proxy: SocketAddr, admin: SocketAddr, earlier: usize) {
    send(
        client,
        Method::GET,
        &format!("http://{proxy}/large/{earlier}"),
    )
    .await;
    for i in 0..DISK_OBJECTS {
        send(
            client,
            Method::GET,
            &format!("http://{proxy}/disk/{earlier}/{i}"),
        )
        .await;
    }
    let revalidate = Request::get(format!("http://{proxy}/disk/{earlier}/0"))
        .header("cache-control", "no-cache")
        .body(Full::new(Bytes::new()))
        .unwrap();
    send_request(client, revalidate).await;
    // The admin listener purges the key a client request to the proxy makes: its Host.
    let purge = Request::builder()
        .method("PURGE")
        .uri(format!("http://{admin}/disk/{earlier}/1"))
        .header("host", proxy.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap();
    send_request(client, purge).await;
}

/// Rounds of traffic until the task is aborted.
async fn drive_traffic(proxy: SocketAddr, admin: SocketAddr) {
    let client = client();
    for round in 0usize.. {
        traffic_round(&client, proxy, admin, round).await;
    }
}

/// Every `bloomgate_*` metric name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    text.match_indices("bloomgate_")
        .map(|(start, _)| {
            text[start..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect::<String>()
        })
        .collect()
}

/// Metric names used in `dashboard` that are neither sample names nor metric families (a
/// histogram's name without `_bucket`, `_sum`, `_count`) in the exposition `scrape`.
fn names_missing_from(scrape: &str, dashboard: &str) -> Vec<String> {
    let samples = scrape
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split(['{', ' ']).next());
    let families = scrape
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|line| line.split(' ').next());
    let exported: BTreeSet<&str> = samples.chain(families).collect();
    metric_names(dashboard)
        .into_iter()
        .filter(|name| !exported.contains(name.as_str()))
        .collect()
}

/// Every metric of the disk tier: each has a panel.
const DISK_METRICS: [&str; 19] = [
    "bloomgate_disk_bytes",
    "bloomgate_disk_max_bytes",
    "bloomgate_disk_entries",
    "bloomgate_disk_writes_total",
    "bloomgate_disk_written_bytes_total",
    "bloomgate_disk_engine_written_bytes_total",
    "bloomgate_disk_rejected_total",
    "bloomgate_disk_hits_total",
    "bloomgate_disk_cold_reads_total",
    "bloomgate_disk_renewed_segments_total",
    "bloomgate_disk_hit_bytes_total",
    "bloomgate_disk_misses_total",
    "bloomgate_disk_read_errors_total",
    "bloomgate_disk_dropped_total",
    "bloomgate_disk_removed_total",
    "bloomgate_disk_full",
    "bloomgate_disk_recovered_entries",
    "bloomgate_disk_recovery_seconds",
    "bloomgate_disk_recovering",
];

/// The disk metrics shown by reason.
const DISK_BY_REASON: [&str; 3] = [
    "bloomgate_disk_writes_total",
    "bloomgate_disk_written_bytes_total",
    "bloomgate_disk_rejected_total",
];

/// Every reason a query of `expr`'s disk metric by reason must return.
fn disk_reasons(expr: &str) -> Option<BTreeSet<&'static str>> {
    let shown = |metric: &str| expr.contains(&format!("{metric}{{"));
    if shown("bloomgate_disk_rejected_total") {
        Some(Rejection::ALL.iter().map(|why| why.as_str()).collect())
    } else if DISK_BY_REASON.iter().any(|metric| shown(metric)) {
        Some(WriteReason::ALL.iter().map(|why| why.as_str()).collect())
    } else {
        None
    }
}

/// Refusals the test traffic never causes: a disk of 16 MiB never fills and never falls behind
/// (budget), no record comes near a 1 MiB block (too_large), the engine does not fail, and an
/// empty tier has recovered (in milliseconds) before RAM evicts anything.
const REFUSALS_NOT_CAUSED: [Rejection; 5] = [
    Rejection::Budget,
    Rejection::Full,
    Rejection::TooLarge,
    Rejection::Failed,
    Rejection::Recovering,
];

/// Disk metrics that stay at zero here: no I/O errors, no corrupt records, a disk that never
/// fills, a tier that started empty (and recovered it at once), records the page cache still
/// holds when read, and no segment reclaimed.
const DISK_METRICS_AT_ZERO: [&str; 7] = [
    "bloomgate_disk_read_errors_total",
    "bloomgate_disk_cold_reads_total",
    "bloomgate_disk_renewed_segments_total",
    "bloomgate_disk_dropped_total",
    "bloomgate_disk_full",
    "bloomgate_disk_recovered_entries",
    "bloomgate_disk_recovering",
];

fn dashboard() -> Value {
    serde_json::from_str(DASHBOARD).expect("grafana/dashboard.json is not valid JSON")
}

/// Every panel (rows included) at any depth.
fn panels(dashboard: &Value) -> Vec<&Value> {
    fn collect<'a>(panels: &'a Value, out: &mut Vec<&'a Value>) {
        for panel in panels.as_array().into_iter().flatten() {
            out.push(panel);
            collect(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    collect(&dashboard["panels"], &mut out);
    out
}

/// (panel title, refId, expr) for every query target.
fn targets(dashboard: &Value) -> Vec<(String, String, String)> {
    panels(dashboard)
        .into_iter()
        .flat_map(|panel| {
            let title = panel["title"].as_str().unwrap_or("?").to_string();
            panel["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |target| {
                    (
                        title.clone(),
                        target["refId"].as_str().unwrap_or("?").to_string(),
                        target["expr"].as_str().unwrap_or("").to_string(),
                    )
                })
        })
        .collect()
}

/// The expression Grafana sends with "All" instances selected: `$instance` becomes its allValue.
fn as_sent_by_grafana(dashboard: &Value, expr: &str) -> String {
    let mut expr = expr.to_string();
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let (Some(name), Some(all)) = (variable["name"].as_str(), variable["allValue"].as_str())
        {
            expr = expr.replace(&format!("${name}"), all);
        }
    }
    expr
}

#[test]
fn dashboard_is_a_grafana_model_with_a_query_in_every_panel() {
    let dashboard = dashboard();
    assert_eq!(dashboard["uid"], "bloomgate");
    assert!(dashboard["schemaVersion"].as_u64().unwrap() >= 36);
    let mut ids = BTreeSet::new();
    for panel in panels(&dashboard) {
        let title = panel["title"].as_str().unwrap();
        assert!(
            ids.insert(panel["id"].as_u64().unwrap()),
            "duplicate panel id in {title}"
        );
        for key in ["h", "w", "x", "y"] {
            assert!(panel["gridPos"][key].is_u64(), "{title}: gridPos.{key}");
        }
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "{title}: data source must be the dashboard's variable"
        );
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}: no query");
        for target in targets {
            assert!(
                target["expr"].as_str().is_some_and(|e| !e.is_empty()),
                "{title}: empty expr"
            );
        }
    }
    let names = metric_names(DASHBOARD);
    for required in [
        "bloomgate_admission_total",
        "bloomgate_filter_fill_ratio",
        "bloomgate_filter_estimated_items",
        "bloomgate_filter_estimated_fpr",
        "bloomgate_filter_rotations_total",
        "bloomgate_cache_entries",
        "bloomgate_cache_bytes",
        "bloomgate_cache_writes_total",
        "bloomgate_cache_written_bytes_total",
        "bloomgate_cache_evictions_total",
        "bloomgate_origin_requests_total",
        "bloomgate_origin_bytes_total",
        "bloomgate_request_duration_seconds_bucket",
    ] {
        assert!(names.contains(required), "no panel shows {required}");
    }
    for required in DISK_METRICS {
        assert!(names.contains(required), "no panel shows {required}");
    }
    let exprs: Vec<String> = targets(&dashboard)
        .into_iter()
        .map(|(_, _, expr)| expr)
        .collect();
    for per_segment in [
        "bloomgate_cache_entries",
        "bloomgate_cache_bytes",
        "bloomgate_cache_writes_total",
        "bloomgate_cache_written_bytes_total",
    ] {
        assert!(
            exprs
                .iter()
                .any(|e| e.contains("by (segment)") && e.contains(&format!("{per_segment}{{"))),
            "no panel shows {per_segment} by segment"
        );
    }
    for per_reason in DISK_BY_REASON {
        assert!(
            exprs
                .iter()
                .any(|e| e.contains("by (reason)") && e.contains(&format!("{per_reason}{{"))),
            "no panel shows {per_reason} by reason"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_names_only_metrics_the_exporter_emits() {
    let dir = TempDir::new("names");
    let origin = start_origin().await;
    let proxy = start_proxy(&dir.0, origin);
    let client = client();
    // Some series appear only with their first event (a hit's bytes): scrape after each round
    // until every name is there, and fail with the last scrape if some never are.
    let mut scrape = String::new();
    for round in 0..10 {
        traffic_round(&client, proxy.addr, proxy.admin, round).await;
        let (status, body) = send(
            &client,
            Method::GET,
            &format!("http://{}/metrics", proxy.admin),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        scrape = String::from_utf8(body.to_vec()).unwrap();
        if names_missing_from(&scrape, DASHBOARD).is_empty() {
            break;
        }
    }

    // The check itself must be able to fail.
    assert_eq!(
        names_missing_from(&scrape, "rate(bloomgate_no_such_metric_total[1m])"),
        ["bloomgate_no_such_metric_total"]
    );
    let missing = names_missing_from(&scrape, DASHBOARD);
    assert!(
        missing.is_empty(),
        "dashboard names metrics the exporter does not emit: {missing:?}\nscrape:\n{scrape}"
    );
}

/// Percent-encodes everything but unreserved characters (RFC 3986), for a query string value.
fn url_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Runs an instant query through Prometheus's HTTP API and returns its parsed answer.
async fn query(client: &HttpClient, prometheus: SocketAddr, expr: &str) -> Value {
    let url = format!(
        "http://{prometheus}/api/v1/query?query={}",
        url_encode(expr)
    );
    let (_, body) = send(client, Method::GET, &url).await;
    serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{expr}: Prometheus answered {body:?}: {e}"))
}

/// The first sample's value of an instant-vector answer, if any.
fn first_value(answer: &Value) -> Option<f64> {
    answer["data"]["result"][0]["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
}

/// Polls `expr` until its first value reaches `at_least`, or panics after `deadline`.
async fn wait_for(
    client: &HttpClient,
    prometheus: SocketAddr,
    expr: &str,
    at_least: f64,
    deadline: Instant,
) {
    loop {
        // Prometheus may not be listening yet: a refused connection is a reason to wait.
        let url = format!(
            "http://{prometheus}/api/v1/query?query={}",
            url_encode(expr)
        );
        let request = Request::get(&url).body(Full::new(Bytes::new())).unwrap();
        if let Ok(response) = client.request(request).await
            && let Ok(body) = response.into_body().collect().await
            && let Ok(answer) = serde_json::from_slice::<Value>(&body.to_bytes())
            && first_value(&answer).is_some_and(|v| v >= at_least)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never answered {expr} >= {at_least}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What is wrong with a disk query's answer: a query by reason must return every reason, and
/// every series the traffic feeds must be above zero.
fn disk_failure(expr: &str, result: &[Value]) -> Option<String> {
    if !expr.contains("bloomgate_disk_") {
        return None;
    }
    if expr.contains("by (reason)")
        && let Some(expected) = disk_reasons(expr)
    {
        let reasons: BTreeSet<&str> = result
            .iter()
            .filter_map(|series| series["metric"]["reason"].as_str())
            .collect();
        if reasons != expected {
            return Some(format!("reasons {reasons:?}, expected {expected:?}"));
        }
    }
    let fed = metric_names(expr)
        .into_iter()
        .any(|name| !DISK_METRICS_AT_ZERO.contains(&name.as_str()));
    if !fed {
        return None;
    }
    let not_caused = REFUSALS_NOT_CAUSED.map(Rejection::as_str);
    let idle = result.iter().find(|series| {
        let caused = series["metric"]["reason"]
            .as_str()
            .is_none_or(|reason| !not_caused.contains(&reason));
        let value = series["value"][1]
            .as_str()
            .and_then(|v| v.parse::<f64>().ok());
        caused && value.is_none_or(|value| value <= 0.0)
    })?;
    Some(format!("no data from the traffic in {idle}"))
}

fn has_command(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Starts Prometheus on a free port and waits until it answers `/-/ready`. The port is found free
/// and let go, so a test running beside this one can be given it before Prometheus binds it:
/// Prometheus then exits, and starts again on another port.
async fn start_prometheus(
    client: &HttpClient,
    config: &Path,
    data: &Path,
) -> (Running, SocketAddr) {
    for _ in 0..5 {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut process = Running(
            Command::new("prometheus")
                .arg(format!("--config.file={}", config.display()))
                .arg(format!("--storage.tsdb.path={}", data.display()))
                .arg(format!("--web.listen-address={addr}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline && process.0.try_wait().unwrap().is_none() {
            let request = Request::get(format!("http://{addr}/-/ready"))
                .body(Full::new(Bytes::new()))
                .unwrap();
            if let Ok(response) = client.request(request).await
                && response.status() == StatusCode::OK
                && let Ok(body) = response.into_body().collect().await
                && String::from_utf8_lossy(&body.to_bytes()).contains("Prometheus")
            {
                return (process, addr);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    panic!("Prometheus did not start in 5 tries");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_panel_query_returns_series_in_prometheus() {
    if !has_command("prometheus") {
        assert!(
            std::env::var_os("CI").is_none(),
            "prometheus is not installed (CI installs Debian's `prometheus` in .ci/run)"
        );
        eprintln!(
            "note: prometheus is not installed; skipping the Prometheus evaluation of the dashboard"
        );
        return;
    }
    if has_command("promtool") {
        let config = concat!(env!("CARGO_MANIFEST_DIR"), "/grafana/prometheus.yml");
        let check = Command::new("promtool")
            .args(["check", "config", config])
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "promtool rejects grafana/prometheus.yml: {}",
            String::from_utf8_lossy(&check.stdout)
        );
    }

    let dir = TempDir::new("prometheus");
    let origin = start_origin().await;
    let proxy = start_proxy(&dir.0, origin);
    let traffic = tokio::spawn(drive_traffic(proxy.addr, proxy.admin));

    let config = dir.0.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: bloomgate\n    static_configs:\n      - targets: [\"{}\"]\n",
            proxy.admin
        ),
    )
    .unwrap();
    let client = client();
    let (_prometheus_process, prometheus) =
        start_prometheus(&client, &config, &dir.0.join("data")).await;
    let deadline = Instant::now() + Duration::from_secs(40);
    wait_for(&client, prometheus, "up{job=\"bloomgate\"}", 1.0, deadline).await;
    // Rates over [1m] need two samples; three leave a margin for a late scrape.
    wait_for(
        &client,
        prometheus,
        "count_over_time(bloomgate_cache_entries[1m])",
        3.0,
        deadline,
    )
    .await;

    // Every admission decision the panels are about has happened, promotions included.
    for decision in ["probation", "admitted", "first_hit", "promoted"] {
        wait_for(
            &client,
            prometheus,
            &format!("sum(bloomgate_admission_total{{decision=\"{decision}\"}})"),
            1.0,
            deadline,
        )
        .await;
    }
    // So has every disk event the traffic makes: writes for each reason, refusals of unproven
    // entries, hits and removals, each seen by two scrapes at least (a rate needs an increase).
    let disk_events = [
        "bloomgate_disk_writes_total{reason=\"ram_hit\"}",
        "bloomgate_disk_writes_total{reason=\"seen_before\"}",
        "bloomgate_disk_writes_total{reason=\"revalidated\"}",
        "bloomgate_disk_rejected_total{reason=\"first_hit\"}",
        "bloomgate_disk_hits_total",
        "bloomgate_disk_removed_total",
    ];
    for event in disk_events {
        wait_for(
            &client,
            prometheus,
            &format!("sum(increase({event}[1m]))"),
            1.0,
            deadline,
        )
        .await;
    }

    let dashboard = dashboard();
    let mut failures = Vec::new();
    for (title, ref_id, expr) in targets(&dashboard) {
        let sent = as_sent_by_grafana(&dashboard, &expr);
        if sent.contains('$') {
            failures.push(format!("{title} {ref_id}: unresolved variable in {sent}"));
            continue;
        }
        let answer = query(&client, prometheus, &sent).await;
        if answer["status"] != "success" {
            failures.push(format!("{title} {ref_id}: {sent}\n  error: {answer}"));
            continue;
        }
        let result = answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if result.is_empty() {
            failures.push(format!("{title} {ref_id}: no series for {sent}"));
        }
        if sent.contains("by (segment)") {
            let segments: BTreeSet<&str> = result
                .iter()
                .filter_map(|series| series["metric"]["segment"].as_str())
                .collect();
            if segments != BTreeSet::from(["main", "probation"]) {
                failures.push(format!(
                    "{title} {ref_id}: segments {segments:?} for {sent}"
                ));
            }
        }
        for series in &result {
            let value = series["value"][1].as_str().unwrap_or("missing");
            if value.parse::<f64>().map_or(true, f64::is_nan) {
                failures.push(format!(
                    "{title} {ref_id}: value {value} in {series} for {sent}"
                ));
            }
        }
        if let Some(failure) = disk_failure(&sent, &result) {
            failures.push(format!("{title} {ref_id}: {failure} for {sent}"));
        }
    }

    // The "Instance" variable's own query: label_values(bloomgate_requests_total, instance).
    let url = format!(
        "http://{prometheus}/api/v1/label/instance/values?match[]={}",
        url_encode("bloomgate_requests_total")
    );
    let (_, body) = send(&client, Method::GET, &url).await;
    let instances: Value = serde_json::from_slice(&body).unwrap();
    if instances["data"] != serde_json::json!([proxy.admin.to_string()]) {
        failures.push(format!("instance variable: {instances}"));
    }

    traffic.abort();
    assert!(
        failures.is_empty(),
        "{} dashboard queries failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
