//! `bloomgate demo`: the synthetic origin, the proxy with and without admission, a replayed
//! synthetic trace, and what admission saved, in RAM and on a disk tier, in one command on free
//! loopback ports.

mod curves;
mod disk;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, IsTerminal};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::admission::Doorkeeper;
use crate::admission::probation::{Mode, Segment};
use crate::cache::StoreCounters;
use crate::config::Config;
use crate::listening::ListeningLine;
use crate::proxy::RunningProxy;
use crate::trace::SyntheticTrace;
use crate::traffic::{OriginOptions, ReplayOptions, ReplayReport, replay, start_origin};

/// Arguments of `bloomgate demo`.
#[derive(Clone, Debug, clap::Args)]
pub struct DemoArgs {
    /// Requests in the synthetic trace.
    #[arg(long, default_value_t = 60_000)]
    pub requests: u64,
    /// Distinct objects in the synthetic trace.
    #[arg(long, default_value_t = 20_000)]
    pub objects: u64,
    /// Share of objects requested exactly once.
    #[arg(long, default_value_t = 0.6)]
    pub one_hit_share: f64,
    /// Cache size as a share of the trace's footprint (sum of distinct objects' sizes).
    #[arg(long, default_value_t = 0.10)]
    pub cache_share: f64,
    /// Concurrent replay connections.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Stop after serving this long once the replay is done (e.g. "30s"); without it, until Ctrl-C.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Where to write the picture of the trace simulated at several cache sizes (SVG; `.html`
    /// for a page with the simulator's report under it).
    #[arg(long, default_value = "bloomgate-demo-curves.svg")]
    pub plot: PathBuf,
}

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("demo: {0}")]
    Io(#[from] std::io::Error),
    #[error("demo: {0}")]
    Serve(#[from] crate::proxy::ServeError),
    #[error("demo: replay failed: {0}")]
    Replay(#[from] crate::traffic::TrafficError),
    #[error("demo: a proxy to compare with did not start: {0}")]
    Child(String),
    #[error("demo: drawing the curves: {0}")]
    Curves(#[from] crate::sim::SimError),
}

pub async fn run(args: DemoArgs) -> Result<(), DemoError> {
    let trace = SyntheticTrace {
        requests: args.requests,
        objects: args.objects,
        one_hit_share: args.one_hit_share,
        ..SyntheticTrace::default()
    };
    let footprint = footprint(&trace);
    let cache_bytes = ((footprint as f64 * args.cache_share) as u64).max(1 << 20);
    let origin = start_origin(OriginOptions::default()).await?;
    println!(
        "bloomgate demo: synthetic trace of {} requests over {} objects ({:.0}% requested once), footprint {}",
        trace.requests,
        trace.objects,
        trace.one_hit_share * 100.0,
        indicatif::HumanBytes(footprint)
    );
    println!(
        "origin  http://{} (synthetic, /obj/<key>?size=N)",
        origin.addr
    );

    let origin_url = origin
        .url()
        .parse()
        .map_err(|_| DemoError::Child(format!("bad origin url {}", origin.url())))?;
    let config = proxy_config(origin_url, cache_bytes, trace.objects);

    // The comparisons run as child processes so that their metrics do not mix with the demo's.
    let children = [Mode::SecondHit, Mode::Off]
        .map(|mode| ChildProxy::start(&with_mode(&config, mode), mode.as_str()))
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;

    let running = crate::proxy::start(config.clone()).await?;
    let progress = std::io::stderr().is_terminal();
    let options = |target: SocketAddr| ReplayOptions {
        target: format!("http://{target}"),
        concurrency: args.concurrency,
        progress,
        ..ReplayOptions::default()
    };

    let mut columns = Vec::new();
    for (mode, addr, admin) in std::iter::once((config.admission.mode, running.addr, None))
        .chain(children.iter().map(|c| (c.mode, c.addr, Some(c.admin))))
    {
        println!(
            "replaying through bloomgate with admission.mode = \"{}\" (cache {})",
            mode.as_str(),
            indicatif::HumanBytes(cache_bytes)
        );
        let origin_before = origin.stats.requests();
        let report = replay(trace.iter(), options(addr)).await?;
        let origin_requests = origin.stats.requests() - origin_before;
        let writes = match admin {
            None => Some(Writes::of(running.proxy.store().counters())),
            Some(admin) => Writes::scrape(admin).await,
        };
        columns.push(Column {
            mode,
            report,
            origin_requests,
            writes,
        });
    }
    drop(children);

    print_comparison(&columns);
    if let Some(door) = running.proxy.doorkeeper() {
        print_doorkeeper(&door);
    }
    curves::draw(&args, &trace)?;
    disk::show(&args, &origin, &config, &options).await?;
    serve(running, args.duration).await;
    origin.shutdown().await;
    Ok(())
}

/// The modes side by side: hit ratios, writes, origin requests and latency, then what the
/// demo's own mode saved against admit-all.
fn print_comparison(columns: &[Column]) {
    println!();
    row(
        "admission.mode",
        columns.iter().map(|c| c.mode.as_str().to_owned()),
    );
    let cells = |name: &str, cell: &dyn Fn(&Column) -> String| row(name, columns.iter().map(cell));
    // "?" where a child's counters could not be scraped.
    let writes = |column: &Column, show: &dyn Fn(&Writes) -> String| {
        column.writes.as_ref().map_or("?".into(), show)
    };
    cells("object hit ratio", &|c| pct(c.report.hit_ratio));
    cells("byte hit ratio", &|c| pct(c.report.byte_hit_ratio));
    cells("cache writes", &|c| writes(c, &|w| w.total.to_string()));
    cells("  of which into main", &|c| {
        writes(c, &|w| w.main.to_string())
    });
    cells("bytes written into main", &|c| {
        writes(c, &|w| indicatif::HumanBytes(w.main_bytes).to_string())
    });
    cells("origin requests", &|c| c.origin_requests.to_string());
    cells("p99 latency", &|c| ms(&c.report));
    // The demo's own proxy comes first, admit-all last.
    if let (Some(ours), Some(all)) = (columns.first(), columns.last())
        && let (Some(our_writes), Some(all_writes)) = (&ours.writes, &all.writes)
        && all_writes.main_bytes > 0
    {
        println!(
            "\n{} admission: hit ratio {:+.1} points against admit-all, {:.1}% of its bytes written into main",
            ours.mode.as_str(),
            100.0 * (ours.report.hit_ratio - all.report.hit_ratio),
            100.0 * our_writes.main_bytes as f64 / all_writes.main_bytes as f64
        );
    }
}

/// The demo proxy's doorkeeper: its generation, fill, false-positive rate and rotations.
fn print_doorkeeper(door: &Doorkeeper) {
    let stats = door.stats();
    println!(
        "doorkeeper: generation {}, current filter {:.1}% full with ~{:.0} keys, estimated false-positive rate {:.4}, rotations {} (fpr {}, capacity {}, max-age {}), {} of filters",
        stats.generation,
        stats.current.fill_ratio * 100.0,
        stats.current.estimated_items,
        stats.combined_fpr,
        stats.rotations.total(),
        stats.rotations.fpr_threshold,
        stats.rotations.capacity,
        stats.rotations.max_age,
        indicatif::HumanBytes(stats.memory_bytes as u64)
    );
}

/// Serves with the demo proxy, its URLs printed, for `duration` or until Ctrl-C.
async fn serve(running: RunningProxy, duration: Option<Duration>) {
    println!(
        "\nproxy   http://{}  (try: curl -i http://{}/obj/hello?size=100)",
        running.addr, running.addr
    );
    println!(
        "metrics http://{}/metrics  (point Prometheus here; dashboard in grafana/)",
        running.admin_addr
    );
    match duration {
        Some(duration) => {
            println!("serving for {}", humantime::format_duration(duration));
            tokio::time::sleep(duration).await;
            running.shutdown().await;
        }
        None => {
            let signals = crate::proxy::Signals::install();
            println!("serving until Ctrl-C");
            running.run_until_signal(signals).await;
        }
    }
}

/// The sum of the sizes of the trace's distinct objects.
fn footprint(trace: &SyntheticTrace) -> u64 {
    let mut sizes = HashMap::new();
    for request in trace.iter() {
        sizes.insert(request.key, request.size);
    }
    sizes.values().sum()
}

/// One line of a comparison table: its name, then a cell per proxy.
fn row(name: &str, cells: impl IntoIterator<Item = String>) {
    print!("{name:<28}");
    for cell in cells {
        print!(" {cell:>14}");
    }
    println!();
}

/// The demo proxy's configuration: the defaults on free loopback ports, in front of `origin`.
fn proxy_config(origin: http::Uri, cache_bytes: u64, objects: u64) -> Config {
    let mut config = Config::defaults();
    config.server.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.admin.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.origin.url = origin;
    config.cache.max_bytes = cache_bytes;
    config.cache.max_object_bytes = config.cache.max_object_bytes.min(cache_bytes);
    // One generation remembers about a third of the trace's objects, so the demo shows rotations.
    config.admission.doorkeeper.capacity = (objects / 3).max(1000);
    config
}

/// A comparison's configuration: the demo proxy's with another admission mode, so that the
/// proxies compared differ in admission only.
fn with_mode(config: &Config, mode: Mode) -> Config {
    let mut other = config.clone();
    other.admission.mode = mode;
    other
}

/// One proxy's results in the comparison table.
struct Column {
    mode: Mode,
    report: ReplayReport,
    origin_requests: u64,
    writes: Option<Writes>,
}

/// Cache writes as the store counts them: all, into main (promotions included), and body bytes
/// into main.
struct Writes {
    total: u64,
    main: u64,
    main_bytes: u64,
}

impl Writes {
    fn of(counters: &StoreCounters) -> Writes {
        let main = Segment::Main.index();
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Writes {
            total: counters.writes.iter().map(load).sum(),
            main: load(&counters.writes[main]),
            main_bytes: load(&counters.written_bytes[main]),
        }
    }

    /// The same counters from a child's `/metrics`.
    async fn scrape(admin: SocketAddr) -> Option<Writes> {
        let text = get(admin, "/metrics").await.ok()?;
        let main = "segment=\"main\"";
        let writes = crate::telemetry::CACHE_WRITES_TOTAL;
        let written = crate::telemetry::CACHE_WRITTEN_BYTES_TOTAL;
        Some(Writes {
            total: metric_sum(&text, writes, "")?,
            main: metric_sum(&text, writes, main)?,
            main_bytes: metric_sum(&text, written, main)?,
        })
    }
}

/// The sum of the series of `name` whose labels contain `label` (`""`: all of them).
fn metric_sum(text: &str, name: &str, label: &str) -> Option<u64> {
    let values: Vec<f64> = text
        .lines()
        .filter_map(|line| {
            let (series, value) = line.split_once(' ')?;
            let labels = series.strip_prefix(name)?;
            let named = labels.is_empty() || labels.starts_with('{');
            (named && labels.contains(label)).then(|| value.trim().parse::<f64>().ok())?
        })
        .collect();
    (!values.is_empty()).then(|| values.iter().sum::<f64>() as u64)
}

fn pct(ratio: f64) -> String {
    format!("{:.1}%", ratio * 100.0)
}

fn ms(report: &ReplayReport) -> String {
    format!("{:.2} ms", report.latency_ms.p99)
}

/// A proxy compared with the demo's, a child process of this binary with another configuration.
struct ChildProxy {
    mode: Mode,
    child: Child,
    addr: SocketAddr,
    admin: SocketAddr,
    _config: TempConfig,
}

/// How long a child may take to exit after SIGTERM: it finishes requests in flight and writes
/// its proven entries to its disk tier first, both bounded by `server.shutdown_grace`.
const STOP_PATIENCE: Duration = Duration::from_secs(30);

impl ChildProxy {
    /// Starts `bloomgate serve` on `config`, written to a file named after `label`, and returns
    /// once it listens.
    fn start(config: &Config, label: &str) -> Result<ChildProxy, DemoError> {
        let file = TempConfig::write(config, label)?;
        let mut child = Command::new(std::env::current_exe()?)
            .args(["serve", "--config"])
            .arg(&file.0)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| DemoError::Child("no stdout".into()))?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let listening = line
            .parse::<ListeningLine>()
            .map_err(|error| DemoError::Child(error.to_string()))?;
        Ok(ChildProxy {
            mode: config.admission.mode,
            child,
            addr: listening.addr,
            admin: listening.admin_addr,
            _config: file,
        })
    }

    /// Stops the child as an operator would, with SIGTERM, and returns how long it took to exit.
    async fn stop(mut self) -> Result<Duration, DemoError> {
        use rustix::process::{Pid, Signal, kill_process};
        let started = Instant::now();
        kill_process(Pid::from_child(&self.child), Signal::TERM).map_err(std::io::Error::from)?;
        while self.child.try_wait()?.is_none() {
            if started.elapsed() > STOP_PATIENCE {
                return Err(DemoError::Child(format!(
                    "still running {} after SIGTERM",
                    humantime::format_duration(STOP_PATIENCE)
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(started.elapsed())
    }
}

impl Drop for ChildProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The whole HTTP/1.1 response (status line, headers, body) to `GET path` on `admin`.
async fn get(admin: SocketAddr, path: &str) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(admin).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await?;
    Ok(text)
}

/// A config file for the child, removed when the demo ends.
struct TempConfig(PathBuf);

impl TempConfig {
    fn write(config: &Config, label: &str) -> std::io::Result<TempConfig> {
        let path = std::env::temp_dir().join(format!(
            "bloomgate-demo-{}-{label}.toml",
            std::process::id()
        ));
        std::fs::write(&path, config.to_toml())?;
        Ok(TempConfig(path))
    }
}

impl Drop for TempConfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxies_compared_differ_from_the_demo_proxy_in_admission_only() {
        let mut config = proxy_config("http://127.0.0.1:4010".parse().unwrap(), 3 << 20, 20_000);
        // Keys the demo leaves at their defaults today reach the child too.
        config.origin.idle_timeout = Duration::from_millis(1500);
        config.cache.key.drop_query_params = vec!["utm_source".to_owned()];
        assert_eq!(config.admission.mode, Mode::Probation);
        for mode in [Mode::SecondHit, Mode::Off] {
            let file = TempConfig::write(&with_mode(&config, mode), mode.as_str()).unwrap();
            let read_by_the_child = Config::load(&file.0).unwrap();
            let mut expected = config.clone();
            expected.admission.mode = mode;
            assert_eq!(read_by_the_child, expected);
        }
    }

    #[test]
    fn metric_sums_read_labelled_series_of_one_name_only() {
        let text = "# HELP x\nbloomgate_cache_writes_total{segment=\"main\"} 3\n\
                    bloomgate_cache_writes_total{segment=\"probation\"} 4\n\
                    bloomgate_cache_writes_total_other 100\n";
        let name = crate::telemetry::CACHE_WRITES_TOTAL;
        assert_eq!(metric_sum(text, name, ""), Some(7));
        assert_eq!(metric_sum(text, name, "segment=\"main\""), Some(3));
        assert_eq!(metric_sum(text, "bloomgate_nothing", ""), None);
    }
}
