//! `bloomgate demo`: the synthetic origin, the proxy with and without admission, a replayed
//! synthetic trace, and what admission saved, in one command on free loopback ports.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, IsTerminal};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::config::Config;
use crate::listening::ListeningLine;
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
    #[error("demo: the admit-all proxy did not start: {0}")]
    Child(String),
}

pub async fn run(args: DemoArgs) -> Result<(), DemoError> {
    let trace = SyntheticTrace {
        requests: args.requests,
        objects: args.objects,
        one_hit_share: args.one_hit_share,
        ..SyntheticTrace::default()
    };
    let footprint: u64 = {
        let mut sizes = HashMap::new();
        for request in trace.iter() {
            sizes.insert(request.key, request.size);
        }
        sizes.values().sum()
    };
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

    // The comparison runs as a second process so that its metrics do not mix with the demo's.
    let admit_all = AdmitAllProxy::start(&admit_all_config(&config))?;

    let running = crate::proxy::start(config.clone()).await?;
    let progress = std::io::stderr().is_terminal();
    let options = |target: SocketAddr| ReplayOptions {
        target: format!("http://{target}"),
        concurrency: args.concurrency,
        progress,
        ..ReplayOptions::default()
    };

    println!(
        "\nreplaying through bloomgate with second-hit admission (cache {})",
        indicatif::HumanBytes(cache_bytes)
    );
    let origin_before = origin.stats.requests();
    let with_admission = replay(trace.iter(), options(running.addr)).await?;
    let origin_with = origin.stats.requests() - origin_before;
    let counters = running.proxy.store().counters();
    let writes_with = counters.writes.load(Ordering::Relaxed);
    let written_with = counters.written_bytes.load(Ordering::Relaxed);

    println!("replaying through bloomgate with admission off (admit-all), same cache size");
    let origin_before = origin.stats.requests();
    let without = replay(trace.iter(), options(admit_all.addr)).await?;
    let origin_without = origin.stats.requests() - origin_before;
    let (writes_without, written_without) = admit_all.cache_writes().await;
    drop(admit_all);

    println!();
    println!("{:<28} {:>14} {:>14}", "", "second-hit", "admit-all");
    row(
        "object hit ratio",
        pct(with_admission.hit_ratio),
        pct(without.hit_ratio),
    );
    row(
        "byte hit ratio",
        pct(with_admission.byte_hit_ratio),
        pct(without.byte_hit_ratio),
    );
    row(
        "cache writes",
        writes_with.to_string(),
        writes_without.map_or("?".into(), |w| w.to_string()),
    );
    row(
        "bytes written to cache",
        indicatif::HumanBytes(written_with).to_string(),
        written_without.map_or("?".into(), |w| indicatif::HumanBytes(w).to_string()),
    );
    row(
        "origin requests",
        origin_with.to_string(),
        origin_without.to_string(),
    );
    row("p99 latency", ms(&with_admission), ms(&without));
    if let Some(writes_without) = writes_without.filter(|w| *w > 0) {
        println!(
            "\nadmission avoided {:.1}% of cache writes",
            100.0 * (1.0 - writes_with as f64 / writes_without as f64)
        );
    }
    if let Some(door) = running.proxy.doorkeeper() {
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
    println!(
        "\nproxy   http://{}  (try: curl -i http://{}/obj/hello?size=100)",
        running.addr, running.addr
    );
    println!(
        "metrics http://{}/metrics  (point Prometheus here; dashboard in grafana/)",
        running.admin_addr
    );
    match args.duration {
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
    origin.shutdown().await;
    Ok(())
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

/// The baseline's configuration: the demo proxy's with admission off, so that the two proxies
/// compared differ in admission only.
fn admit_all_config(config: &Config) -> Config {
    let mut baseline = config.clone();
    baseline.admission.enabled = false;
    baseline
}

fn row(name: &str, with: String, without: String) {
    println!("{name:<28} {with:>14} {without:>14}");
}

fn pct(ratio: f64) -> String {
    format!("{:.1}%", ratio * 100.0)
}

fn ms(report: &ReplayReport) -> String {
    format!("{:.2} ms", report.latency_ms.p99)
}

/// The baseline proxy, a child process of this binary with admission off.
struct AdmitAllProxy {
    child: Child,
    addr: SocketAddr,
    admin: SocketAddr,
    _config: TempConfig,
}

impl AdmitAllProxy {
    fn start(config: &Config) -> Result<AdmitAllProxy, DemoError> {
        let file = TempConfig::write(config)?;
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
        Ok(AdmitAllProxy {
            child,
            addr: listening.addr,
            admin: listening.admin_addr,
            _config: file,
        })
    }

    /// Cache writes and body bytes written, from its own `/metrics`.
    async fn cache_writes(&self) -> (Option<u64>, Option<u64>) {
        let Ok(text) = scrape(self.admin).await else {
            return (None, None);
        };
        let value = |name: &str| {
            text.lines()
                .find(|line| line.split_whitespace().next() == Some(name))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
                .map(|v| v as u64)
        };
        (
            value(crate::telemetry::CACHE_WRITES_TOTAL),
            value(crate::telemetry::CACHE_WRITTEN_BYTES_TOTAL),
        )
    }
}

impl Drop for AdmitAllProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn scrape(admin: SocketAddr) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(admin).await?;
    stream
        .write_all(
            format!("GET /metrics HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await?;
    Ok(text)
}

/// A config file for the child, removed when the demo ends.
struct TempConfig(PathBuf);

impl TempConfig {
    fn write(config: &Config) -> std::io::Result<TempConfig> {
        let path = std::env::temp_dir().join(format!("bloomgate-demo-{}.toml", std::process::id()));
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
    fn the_admit_all_proxy_differs_from_the_demo_proxy_in_admission_only() {
        let mut config = proxy_config("http://127.0.0.1:4010".parse().unwrap(), 3 << 20, 20_000);
        // Keys the demo leaves at their defaults today reach the child too.
        config.origin.idle_timeout = Duration::from_millis(1500);
        config.cache.key.drop_query_params = vec!["utm_source".to_owned()];
        let file = TempConfig::write(&admit_all_config(&config)).unwrap();
        let read_by_the_child = Config::load(&file.0).unwrap();
        assert!(config.admission.enabled);
        let mut expected = config;
        expected.admission.enabled = false;
        assert_eq!(read_by_the_child, expected);
    }
}
