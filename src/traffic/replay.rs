//! The live replay client: sends a trace's requests to a running proxy and reports what it saw.
//!
//! Each request becomes `GET <target>/obj/<key>?size=<bytes>` (or `<target>/<key>`, see
//! [`PathMode`]), with `Range: bytes=first-last` where the trace gives a range, on a pooled
//! HTTP/1.1 keep-alive client, from `concurrency` workers that take
//! requests in trace order. With a rate, request `i` is not sent before `i / rate` seconds (an
//! open schedule: latency is measured from the send, so a late schedule is not hidden). The
//! latency of a request runs from sending it to the end of its body.
//!
//! A trace's key keeps the size of its first request ([`OneSizePerKey`]), as the simulator's
//! object does, so that both count the same hits.
//!
//! Responses are classified by their `Cache-Status` (the `bloomgate` member, or the last one):
//! a hit, a miss with its reason, or no `Cache-Status` at all. Ratios count only successful
//! responses (2xx and 304); other statuses and transport failures are errors.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Uri;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

mod report;

use report::Tally;
pub use report::{ErrorCounts, LatencySummary, ReplayReport};

use super::TrafficError;
use super::cache_status::CacheStatus;
use super::object_path::{PathMode, request_path};
use crate::trace::{self, ReadOptions, SyntheticTrace, TraceError, TraceReader};

/// The cache whose `Cache-Status` member is read when there are several.
const CACHE_NAME: &str = "bloomgate";

/// Settings of a replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// Base URL of the proxy (`http://host:port`, optionally with a path prefix).
    pub target: String,
    /// Requests in flight at once. Default: 32.
    pub concurrency: usize,
    /// Requests per second over all workers; `None` sends as fast as responses come. Default: None.
    pub rate: Option<f64>,
    /// Stop after this many requests. Default: None (the whole trace).
    pub limit: Option<u64>,
    /// How a key becomes a path. Default: [`PathMode::Obj`].
    pub path_mode: PathMode,
    /// A request that has not completed (body included) in this time is an error. Default: 30 s.
    pub timeout: Duration,
    /// Show a progress bar on stderr. Default: false.
    pub progress: bool,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            target: "http://127.0.0.1:8080".to_owned(),
            concurrency: 32,
            rate: None,
            limit: None,
            path_mode: PathMode::Obj,
            timeout: Duration::from_secs(30),
            progress: false,
        }
    }
}

/// Sends `requests` to `opts.target` and reports what came back.
pub async fn replay(
    requests: impl Iterator<Item = trace::Request> + Send + 'static,
    opts: ReplayOptions,
) -> Result<ReplayReport, TrafficError> {
    let target = Target::parse(&opts.target)?;
    if opts.concurrency == 0 {
        return Err(TrafficError::Options(
            "replay: concurrency must be at least 1".to_owned(),
        ));
    }
    let pacer = match opts.rate {
        Some(rate) if !(rate.is_finite() && rate > 0.0) => {
            return Err(TrafficError::Options(format!(
                "replay: rate {rate} must be a positive number"
            )));
        }
        rate => rate.map(Pacer::new),
    };
    let limit = opts.limit.unwrap_or(u64::MAX);
    let expected = match requests.size_hint() {
        (lower, Some(upper)) if lower == upper => Some((upper as u64).min(limit)),
        _ => opts.limit,
    };

    // Reading (and decompressing) the trace is blocking work: it runs on its own thread.
    let (queue_in, queue) = mpsc::channel(opts.concurrency * 4);
    let feeder = tokio::task::spawn_blocking(move || {
        for request in requests.take(limit.try_into().unwrap_or(usize::MAX)) {
            if queue_in.blocking_send(request).is_err() {
                break;
            }
        }
    });

    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(opts.concurrency)
        .build(connector);
    let shared = Arc::new(Shared {
        target,
        path_mode: opts.path_mode,
        timeout: opts.timeout,
        client,
        queue: tokio::sync::Mutex::new(queue),
        pacer,
        completed: AtomicU64::new(0),
    });

    let progress = Progress::start(opts.progress, expected, Arc::clone(&shared));
    let started = Instant::now();
    let mut workers = JoinSet::new();
    for _ in 0..opts.concurrency {
        workers.spawn(worker(Arc::clone(&shared)));
    }
    let mut tally = Tally::new();
    while let Some(finished) = workers.join_next().await {
        tally.merge(finished.map_err(|error| TrafficError::Worker(error.to_string()))?);
    }
    let elapsed = started.elapsed();
    progress.finish();
    feeder
        .await
        .map_err(|error| TrafficError::Worker(error.to_string()))?;
    Ok(tally.report(opts.target, elapsed))
}

/// Command line of `bloomgate replay`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// Trace file (CSV with a header, libCacheSim CSV, nginx combined log, bloomgate's own access
    /// log in either format; plain, gzip or zstd). A key is requested at the size of its first
    /// request throughout, as `simulate` counts it.
    /// Without it, a synthetic trace is replayed (see the synthetic options).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Base URL of the proxy, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    pub target: String,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Requests per second over all workers (default: as fast as the target answers).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Stop after this many requests.
    #[arg(long)]
    pub limit: Option<u64>,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    #[arg(
        long,
        value_enum,
        default_value_t = PathMode::Obj,
        help = "How a key becomes a path: obj = /obj/<key>?size=<bytes>, key = /<key>"
    )]
    pub path_mode: PathMode,
    /// Per-request timeout in seconds, body included.
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
    /// Skip and count lines of the trace that cannot be parsed, instead of stopping.
    #[arg(long)]
    pub skip_bad_lines: bool,
    /// Synthetic trace: number of requests.
    #[arg(long, default_value_t = SyntheticTrace::default().requests, help_heading = "Synthetic trace (without --trace)")]
    pub requests: u64,
    /// Synthetic trace: distinct objects.
    #[arg(long, default_value_t = SyntheticTrace::default().objects, help_heading = "Synthetic trace (without --trace)")]
    pub objects: u64,
    /// Synthetic trace: Zipf exponent of popularity.
    #[arg(long, default_value_t = SyntheticTrace::default().alpha, help_heading = "Synthetic trace (without --trace)")]
    pub alpha: f64,
    /// Synthetic trace: share of objects requested exactly once.
    #[arg(long, default_value_t = SyntheticTrace::default().one_hit_share, help_heading = "Synthetic trace (without --trace)")]
    pub one_hit_share: f64,
    /// Synthetic trace: seed.
    #[arg(long, default_value_t = SyntheticTrace::default().seed, help_heading = "Synthetic trace (without --trace)")]
    pub seed: u64,
}

/// Runs `bloomgate replay`: replays, then prints the report (a table, or JSON with `--json`).
pub async fn run(args: ReplayArgs) -> Result<(), TrafficError> {
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Err(TrafficError::Options(format!(
            "replay: --timeout {} must be a positive number of seconds",
            args.timeout
        )));
    }
    let opts = ReplayOptions {
        target: args.target.clone(),
        concurrency: args.concurrency,
        rate: args.rate,
        limit: args.limit,
        path_mode: args.path_mode,
        timeout: Duration::from_secs_f64(args.timeout),
        progress: !args.json && std::io::stderr().is_terminal(),
    };
    let report = match &args.trace {
        Some(path) => {
            let reader = TraceReader::open(
                path,
                ReadOptions {
                    skip_bad_lines: args.skip_bad_lines,
                },
            )?;
            if reader.sizes_synthesized() {
                eprintln!(
                    "{}: no sizes in the trace; each key gets {}",
                    path.display(),
                    trace::SYNTHESIZED_SIZE_RULE
                );
            }
            let failure = Arc::new(Mutex::new(None));
            let requests = OneSizePerKey::new(UntilError {
                reader,
                failure: Arc::clone(&failure),
            });
            let report = replay(requests, opts).await?;
            if let Some(error) = failure
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
            {
                return Err(error.into());
            }
            report
        }
        None => {
            let synthetic = SyntheticTrace {
                requests: args.requests,
                objects: args.objects,
                alpha: args.alpha,
                one_hit_share: args.one_hit_share,
                seed: args.seed,
                ..SyntheticTrace::default()
            };
            replay(synthetic.iter(), opts).await?
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{report}");
    }
    Ok(())
}

/// A trace reader's requests up to its first error, which is kept for the caller.
struct UntilError {
    reader: TraceReader,
    failure: Arc<Mutex<Option<TraceError>>>,
}

impl Iterator for UntilError {
    type Item = trace::Request;

    fn next(&mut self) -> Option<trace::Request> {
        match self.reader.next()? {
            Ok(request) => Some(request),
            Err(error) => {
                *self.failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(error);
                None
            }
        }
    }
}

/// Requests with each key at the size of its first request. Some traces give one key several
/// sizes (adaptsize: 4,876 changes in 66,987 requests); the simulator counts a later request as a
/// hit on the object it holds whatever its size, while `/obj/<key>?size=<bytes>` with another size
/// would be another object to the proxy, and the replay would miss where `simulate` hits.
struct OneSizePerKey<I> {
    requests: I,
    sizes: HashMap<String, u64>,
}

impl<I> OneSizePerKey<I> {
    fn new(requests: I) -> OneSizePerKey<I> {
        OneSizePerKey {
            requests,
            sizes: HashMap::new(),
        }
    }
}

impl<I: Iterator<Item = trace::Request>> Iterator for OneSizePerKey<I> {
    type Item = trace::Request;

    fn next(&mut self) -> Option<trace::Request> {
        let mut request = self.requests.next()?;
        match self.sizes.get(&request.key) {
            Some(&first) => request.size = first,
            None => {
                self.sizes.insert(request.key.clone(), request.size);
            }
        }
        Some(request)
    }
}

/// Where requests go: scheme and authority, and a path prefix.
#[derive(Debug)]
struct Target {
    origin: String,
    prefix: String,
}

impl Target {
    fn parse(target: &str) -> Result<Target, TrafficError> {
        let bad = |reason: &str| TrafficError::Target {
            target: target.to_owned(),
            reason: reason.to_owned(),
        };
        let uri: Uri = target.parse().map_err(|_| bad("not a URL"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(_) => return Err(bad("only http:// is supported")),
            None => return Err(bad("missing http://")),
        }
        let authority = uri.authority().ok_or_else(|| bad("missing host"))?;
        if uri.query().is_some() {
            return Err(bad("a query is not allowed"));
        }
        Ok(Target {
            origin: format!("http://{authority}"),
            prefix: uri.path().trim_end_matches('/').to_owned(),
        })
    }

    fn uri_for(&self, path_mode: PathMode, request: &trace::Request) -> Option<Uri> {
        let path = request_path(path_mode, &request.key, request.size);
        format!("{}{}{}", self.origin, self.prefix, path)
            .parse()
            .ok()
    }
}

/// Paces requests to a rate: request `i` waits until `i / rate` seconds after the start.
#[derive(Debug)]
struct Pacer {
    start: tokio::time::Instant,
    rate: f64,
    issued: AtomicU64,
}

impl Pacer {
    fn new(rate: f64) -> Pacer {
        Pacer {
            start: tokio::time::Instant::now(),
            rate,
            issued: AtomicU64::new(0),
        }
    }

    async fn wait_turn(&self) {
        let turn = self.issued.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep_until(self.start + Duration::from_secs_f64(turn as f64 / self.rate))
            .await;
    }
}

struct Shared {
    target: Target,
    path_mode: PathMode,
    timeout: Duration,
    client: Client<HttpConnector, Empty<Bytes>>,
    queue: tokio::sync::Mutex<mpsc::Receiver<trace::Request>>,
    pacer: Option<Pacer>,
    completed: AtomicU64,
}

async fn worker(shared: Arc<Shared>) -> Tally {
    let mut tally = Tally::new();
    loop {
        let next = shared.queue.lock().await.recv().await;
        let Some(request) = next else {
            return tally;
        };
        if let Some(pacer) = &shared.pacer {
            pacer.wait_turn().await;
        }
        tally.requests += 1;
        match shared.target.uri_for(shared.path_mode, &request) {
            Some(uri) => {
                let started = Instant::now();
                let range = request.range.map(|range| range.header_value());
                let fetching = fetch(&shared.client, uri, range);
                let outcome = tokio::time::timeout(shared.timeout, fetching).await;
                match outcome {
                    Ok(Ok(fetched)) => tally.record(&fetched, started.elapsed()),
                    Ok(Err(_)) => tally.errors.transport += 1,
                    Err(_) => tally.errors.timeouts += 1,
                }
            }
            None => tally.errors.invalid_keys += 1,
        }
        shared.completed.fetch_add(1, Ordering::Relaxed);
    }
}

/// What one response said.
struct Fetched {
    status: http::StatusCode,
    cache_status: Option<CacheStatus>,
    body_bytes: u64,
}

async fn fetch(
    client: &Client<HttpConnector, Empty<Bytes>>,
    uri: Uri,
    range: Option<String>,
) -> Result<Fetched, Box<dyn std::error::Error + Send + Sync>> {
    let mut request = http::Request::get(uri);
    if let Some(range) = range {
        request = request.header(http::header::RANGE, range);
    }
    let response = client.request(request.body(Empty::new())?).await?;
    let cache_status = CacheStatus::from_header_values(
        response
            .headers()
            .get_all("cache-status")
            .iter()
            .filter_map(|v| v.to_str().ok()),
        CACHE_NAME,
    );
    let status = response.status();
    let mut body = response.into_body();
    let mut body_bytes = 0;
    // Counted frame by frame: a large body is never held whole.
    while let Some(frame) = body.frame().await {
        if let Some(data) = frame?.data_ref() {
            body_bytes += data.len() as u64;
        }
    }
    Ok(Fetched {
        status,
        cache_status,
        body_bytes,
    })
}

/// The progress bar: on stderr, updated a few times a second from the shared counter.
struct Progress {
    bar: ProgressBar,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    fn start(show: bool, expected: Option<u64>, shared: Arc<Shared>) -> Progress {
        if !show {
            return Progress {
                bar: ProgressBar::hidden(),
                ticker: None,
            };
        }
        let bar = match expected {
            Some(total) => ProgressBar::new(total).with_style(
                ProgressStyle::with_template("{bar:40} {pos}/{len} requests, {per_sec}, eta {eta}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            ),
            None => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{spinner} {pos} requests, {per_sec}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        };
        let ticking = bar.clone();
        let ticker = tokio::spawn(async move {
            let mut interval = tokio::time::interval(Duration::from_millis(200));
            loop {
                interval.tick().await;
                ticking.set_position(shared.completed.load(Ordering::Relaxed));
            }
        });
        Progress {
            bar,
            ticker: Some(ticker),
        }
    }

    fn finish(self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(ticker) = self.ticker.take() {
            ticker.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_replayed_at_the_size_of_its_first_request() {
        let request = |key: &str, size| trace::Request {
            time: 0.0,
            key: key.to_owned(),
            size,
            range: None,
        };
        let trace = [
            request("a", 10),
            request("b", 20),
            request("a", 30),
            request("b", 5),
        ];
        let sizes: Vec<(String, u64)> = OneSizePerKey::new(trace.into_iter())
            .map(|r| (r.key, r.size))
            .collect();
        let expected =
            [("a", 10), ("b", 20), ("a", 10), ("b", 20)].map(|(key, size)| (key.to_owned(), size));
        assert_eq!(sizes, expected);
    }
}
