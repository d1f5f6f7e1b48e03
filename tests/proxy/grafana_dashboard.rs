//! The Grafana dashboard, checked against the real exporter and a real Prometheus.
//!
//! A running bloomgate (the binary, in front of an origin started here, in the default admission
//! mode, probation) serves traffic with hits, misses, first hits, stores in probation, promotions,
//! evictions and origin errors; its `/metrics` must name every metric the dashboard uses, and every
//! panel query must return series when Prometheus (Debian's `prometheus`, installed by `.ci/run`)
//! evaluates it over real scrapes.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
        // not stored on its first request (first_hit).
        Response::builder()
            .header("cache-control", "public, max-age=60")
            .body(Full::new(Bytes::from(vec![b'l'; 10 * 1024])))
    } else if path.starts_with("/big/") {
        // Above cache.max_object_bytes: admission says too_large.
        Response::builder()
            .header("cache-control", "public, max-age=60")
            .body(Full::new(Bytes::from(vec![b'b'; 40 * 1024])))
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

/// Starts the bloomgate binary with a small cache and a small doorkeeper, so evictions and
/// rotations happen within seconds, and reads its ports from the line it prints.
fn start_proxy(dir: &Path, origin: SocketAddr) -> Proxy {
    let config = dir.join("bloomgate.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\
             [admin]\nlisten = \"127.0.0.1:0\"\n\
             [origin]\nurl = \"http://{origin}\"\n\
             [cache]\nmax_bytes = \"64KiB\"\nmax_object_bytes = \"16KiB\"\n\
             [admission]\ncapacity = 30\n\
             [log]\nlevel = \"warn\"\n"
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
    let response = client.request(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, body)
}

/// One round of requests: every key once in an order that changes per round (stores in probation,
/// first hits, then admissions, and evictions from the small cache), a hot key three times (hits), a
/// new object twice (stored in probation, then hit there: promoted when probation gives it up during
/// the next rounds), a new object too large for probation (a first hit), and uncacheable,
/// oversized, failing and non-GET requests.
async fn traffic_round(client: &HttpClient, proxy: SocketAddr, round: usize) {
    for i in 0..KEYS {
        // A stride coprime with KEYS visits every key each round.
        let key = (i * 7 + round) % KEYS;
        send(client, Method::GET, &format!("http://{proxy}/obj/{key}")).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for _ in 0..3 {
        send(client, Method::GET, &format!("http://{proxy}/obj/hot")).await;
    }
    for _ in 0..2 {
        send(
            client,
            Method::GET,
            &format!("http://{proxy}/reused/{round}"),
        )
        .await;
    }
    send(
        client,
        Method::GET,
        &format!("http://{proxy}/large/{round}"),
    )
    .await;
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

/// Rounds of traffic until the task is aborted.
async fn drive_traffic(proxy: SocketAddr) {
    let client = client();
    for round in 0usize.. {
        traffic_round(&client, proxy, round).await;
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
        traffic_round(&client, proxy.addr, round).await;
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

fn has_command(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
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
    let traffic = tokio::spawn(drive_traffic(proxy.addr));

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
    let prometheus: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let _prometheus_process = Running(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.0.join("data").display()
            ))
            .arg(format!("--web.listen-address={prometheus}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    let client = client();
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
