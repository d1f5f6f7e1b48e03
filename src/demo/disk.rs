//! The demo's disk tier: the disk writes that second-hit admission avoids, and a restart that
//! comes back warm.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Instant;

use super::{ChildProxy, DemoArgs, DemoError, footprint, get, metric_sum, pct, proxy_config, row};
use crate::admission::probation::Mode;
use crate::cache::disk::{Rejection, WriteReason};
use crate::config::Config;
use crate::sim::ratio;
use crate::telemetry;
use crate::trace::{Request, SyntheticTrace};
use crate::traffic::{OriginHandle, ReplayOptions, ReplayReport, replay};

/// RAM as a share of the trace's footprint, and the disk as a multiple of RAM: a disk tier well
/// larger than memory, as on a real cache.
const RAM_SHARE: f64 = 0.02;
const DISK_PER_RAM: u64 = 10;

/// The engine's segment size, at least: large enough that a trace's disk fits the engine's 8,192
/// segments (see [`block_bytes`]).
const BLOCK_BYTES: u64 = 1 << 20;

/// The segment size for a disk of `disk_bytes`: [`BLOCK_BYTES`], or the power of two that keeps
/// the segments within the engine's limit.
fn block_bytes(disk_bytes: u64) -> u64 {
    (disk_bytes / 4096)
        .next_power_of_two()
        .clamp(BLOCK_BYTES, segments::MAX_SEGMENT_BYTES)
}

/// Objects over this are not cached by the disk proxies, so that every record fits in a block;
/// the trace's sizes (log-normal, median 8 KiB, sigma 1) pass it about once in 60,000.
const MAX_OBJECT_BYTES: u64 = 512 << 10;

/// Share of the trace replayed before the restart; the rest is replayed after it, warm and cold.
const BEFORE_RESTART: f64 = 0.75;

/// Replays a trace through a proxy with a disk tier in probation mode and through one in mode
/// off (every entry leaving RAM is written) and compares their disk writes; then stops the first
/// with SIGTERM, starts it again on its directory, and replays the rest of the trace through it
/// and through a cold start.
pub(super) async fn show(
    args: &DemoArgs,
    origin: &OriginHandle,
    demo: &Config,
    options: &dyn Fn(SocketAddr) -> ReplayOptions,
) -> Result<(), DemoError> {
    // A third of the demo's trace, of the same shape, so that its four replays take seconds.
    let trace = SyntheticTrace {
        requests: (args.requests / 3).max(1),
        objects: (args.objects / 3).max(1),
        one_hit_share: args.one_hit_share,
        ..SyntheticTrace::default()
    };
    let footprint = footprint(&trace);
    let tiers = Tiers::create(demo, footprint, trace.objects)?;
    let before = (trace.requests as f64 * BEFORE_RESTART) as usize;
    let after = trace.requests as usize - before;
    println!(
        "\ndisk tier: a trace of the same shape, {} requests over {} objects ({:.0}% requested once), footprint {}",
        trace.requests,
        trace.objects,
        trace.one_hit_share * 100.0,
        indicatif::HumanBytes(footprint)
    );
    println!(
        "RAM {} ({:.0}% of the footprint) over a disk of {}, in {} (removed at the end)",
        indicatif::HumanBytes(tiers.ram_bytes),
        RAM_SHARE * 100.0,
        indicatif::HumanBytes(tiers.disk_bytes),
        tiers.dir.display()
    );

    let mut config = tiers.config(Mode::Probation, "probation");
    let probation = ChildProxy::start(&config, "disk-probation")?;
    let write_all = ChildProxy::start(&tiers.config(Mode::Off, "off"), "disk-off")?;
    let mut columns = Vec::new();
    for child in [&probation, &write_all] {
        println!(
            "replaying the first {before} requests through bloomgate with admission.mode = \"{}\" and a disk tier",
            child.mode.as_str()
        );
        let requests = trace.iter().take(before);
        let column = replay_through(child, requests, origin, options).await?;
        columns.push((child.mode, column));
    }
    drop(write_all);
    print_writes(&columns);

    // On the same address: the cache key holds the Host header, port included.
    config.server.listen = probation.addr;
    let stopped = probation.stop().await?;
    let started = Instant::now();
    let restarted = ChildProxy::start(&config, "disk-restarted")?;
    let listening = started.elapsed();
    let ready = until_disk_open(restarted.admin).await?;
    let recovered = ready
        .lines()
        .find(|line| line.starts_with("disk:"))
        .unwrap_or("no disk line");
    println!(
        "\nrestart: SIGTERM to the probation proxy (it saves its proven RAM entries to disk), exited in {:.2}s",
        stopped.as_secs_f64()
    );
    println!(
        "started again on the same directory and address, listening {:.2}s later; once its disk tier is open, /readyz: {recovered}",
        listening.as_secs_f64()
    );
    let rest = || trace.iter().skip(before);
    println!("replaying the next {after} requests through the restarted proxy");
    let warm = replay_through(&restarted, rest(), origin, options).await?;
    let cold = ChildProxy::start(&tiers.config(Mode::Probation, "cold"), "disk-cold")?;
    println!("replaying the same {after} requests through a cold start (an empty directory)");
    let cold = replay_through(&cold, rest(), origin, options).await?;
    print_restart(after, &warm, &cold);
    Ok(())
}

/// The disk proxies' sizes and the directory their tiers live in, removed when dropped.
struct Tiers {
    origin: http::Uri,
    objects: u64,
    ram_bytes: u64,
    disk_bytes: u64,
    dir: PathBuf,
}

impl Tiers {
    fn create(demo: &Config, footprint: u64, objects: u64) -> std::io::Result<Tiers> {
        let ram_bytes = ((footprint as f64 * RAM_SHARE) as u64).max(1 << 20);
        let dir = std::env::temp_dir().join(format!("bloomgate-demo-{}-disk", std::process::id()));
        // Left by an earlier demo whose process had the same id and was killed.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(Tiers {
            origin: demo.origin.url.clone(),
            objects,
            ram_bytes,
            disk_bytes: ram_bytes * DISK_PER_RAM,
            dir,
        })
    }

    /// A disk proxy's configuration: the demo proxy's with this RAM, admission `mode`, and a disk
    /// tier in the subdirectory `name`.
    fn config(&self, mode: Mode, name: &str) -> Config {
        let mut config = proxy_config(self.origin.clone(), self.ram_bytes, self.objects);
        config.admission.mode = mode;
        config.cache.max_object_bytes = MAX_OBJECT_BYTES.min(self.ram_bytes);
        config.disk.path = Some(self.dir.join(name));
        config.disk.max_bytes = self.disk_bytes;
        config.disk.block_bytes = block_bytes(self.disk_bytes);
        // Eight segments' worth, but no more RAM than a large segment.
        config.disk.write_buffer = (8 * config.disk.block_bytes)
            .min(segments::MAX_SEGMENT_BYTES)
            .max(config.disk.block_bytes);
        config
    }
}

impl Drop for Tiers {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One disk proxy's replay and its disk tier's counters after it.
struct DiskColumn {
    report: ReplayReport,
    origin_requests: u64,
    disk: Option<DiskCounters>,
}

impl DiskColumn {
    /// Share of the responses served from a disk record.
    fn served_from_disk(&self) -> String {
        self.disk.as_ref().map_or("?".into(), |disk| {
            pct(ratio(disk.hits, self.report.responses))
        })
    }
}

/// `/readyz` of the proxy on `admin` once its disk tier is open: it serves before, from RAM alone,
/// and a warm restart is measured against an open tier.
async fn until_disk_open(admin: SocketAddr) -> Result<String, DemoError> {
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let ready = get(admin, "/readyz").await?;
        if !ready.contains("disk: recovering") {
            return Ok(ready);
        }
        if Instant::now() > deadline {
            return Err(DemoError::Child(
                "the restarted proxy's disk tier still recovers after 60 s".into(),
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

async fn replay_through(
    child: &ChildProxy,
    requests: impl Iterator<Item = Request> + Send + 'static,
    origin: &OriginHandle,
    options: &dyn Fn(SocketAddr) -> ReplayOptions,
) -> Result<DiskColumn, DemoError> {
    let origin_before = origin.stats.requests();
    let report = replay(requests, options(child.addr)).await?;
    Ok(DiskColumn {
        report,
        origin_requests: origin.stats.requests() - origin_before,
        disk: DiskCounters::scrape(child.admin).await,
    })
}

/// A disk tier's counters, from its proxy's `/metrics`.
struct DiskCounters {
    /// By [`WriteReason`], in `ALL` order.
    writes: [u64; WriteReason::ALL.len()],
    written_bytes: u64,
    engine_written_bytes: u64,
    /// By [`Rejection`], in `ALL` order.
    rejected: [u64; Rejection::ALL.len()],
    hits: u64,
    misses: u64,
    read_errors: u64,
}

impl DiskCounters {
    async fn scrape(admin: SocketAddr) -> Option<DiskCounters> {
        let text = get(admin, "/metrics").await.ok()?;
        let sum = |name: &str, label: &str| metric_sum(&text, name, label);
        let reason = |reason: &str| format!("reason=\"{reason}\"");
        let mut writes = [0; WriteReason::ALL.len()];
        for why in WriteReason::ALL {
            writes[why as usize] = sum(telemetry::DISK_WRITES_TOTAL, &reason(why.as_str()))?;
        }
        let mut rejected = [0; Rejection::ALL.len()];
        for why in Rejection::ALL {
            rejected[why as usize] = sum(telemetry::DISK_REJECTED_TOTAL, &reason(why.as_str()))?;
        }
        Some(DiskCounters {
            writes,
            written_bytes: sum(telemetry::DISK_WRITTEN_BYTES_TOTAL, "")?,
            engine_written_bytes: sum(telemetry::DISK_ENGINE_WRITTEN_BYTES_TOTAL, "")?,
            rejected,
            hits: sum(telemetry::DISK_HITS_TOTAL, "")?,
            misses: sum(telemetry::DISK_MISSES_TOTAL, "")?,
            read_errors: sum(telemetry::DISK_READ_ERRORS_TOTAL, "")?,
        })
    }

    /// Of the RAM misses looked up on disk, the share a record answered.
    fn hit_ratio(&self) -> f64 {
        ratio(self.hits, self.hits + self.misses + self.read_errors)
    }
}

fn print_writes(columns: &[(Mode, DiskColumn)]) {
    println!();
    row(
        "admission.mode, with disk",
        columns.iter().map(|(mode, _)| mode.as_str().to_owned()),
    );
    let cells = |name: &str, cell: &dyn Fn(&DiskColumn) -> String| {
        row(name, columns.iter().map(|(_, column)| cell(column)));
    };
    // "?" where a proxy's counters could not be scraped.
    let disk = |column: &DiskColumn, show: &dyn Fn(&DiskCounters) -> String| {
        column.disk.as_ref().map_or("?".into(), show)
    };
    let bytes = |n: u64| indicatif::HumanBytes(n).to_string();
    cells("object hit ratio", &|c| pct(c.report.hit_ratio));
    cells("  served from disk", &DiskColumn::served_from_disk);
    cells("disk hit ratio of RAM misses", &|c| {
        disk(c, &|d| pct(d.hit_ratio()))
    });
    cells("disk writes", &|c| {
        disk(c, &|d| d.writes.iter().sum::<u64>().to_string())
    });
    for why in [WriteReason::RamHit, WriteReason::SeenBefore] {
        cells(&format!("  as {}", why.as_str()), &|c| {
            disk(c, &|d| d.writes[why as usize].to_string())
        });
    }
    cells("disk bytes written", &|c| {
        disk(c, &|d| bytes(d.written_bytes))
    });
    cells("  by the engine", &|c| {
        disk(c, &|d| bytes(d.engine_written_bytes))
    });
    cells("writes avoided (first_hit)", &|c| {
        disk(c, &|d| d.rejected[Rejection::FirstHit as usize].to_string())
    });
    cells("writes refused otherwise", &|c| {
        disk(c, &|d| {
            let refused: u64 =
                d.rejected.iter().sum::<u64>() - d.rejected[Rejection::FirstHit as usize];
            refused.to_string()
        })
    });
    cells("origin requests", &|c| c.origin_requests.to_string());
    // Probation first, write-all last.
    if let [(ours, gated), .., (all, every)] = columns
        && let (Some(gated_disk), Some(every_disk)) = (&gated.disk, &every.disk)
        && every_disk.written_bytes > 0
    {
        println!(
            "\n{} admission on disk: hit ratio {:+.1} points against {} (every entry leaving RAM written), {:.1}% of its disk bytes written; {} entries leaving RAM never written (first_hit)",
            ours.as_str(),
            100.0 * (gated.report.hit_ratio - every.report.hit_ratio),
            all.as_str(),
            100.0 * gated_disk.written_bytes as f64 / every_disk.written_bytes as f64,
            gated_disk.rejected[Rejection::FirstHit as usize]
        );
    }
}

fn print_restart(requests: usize, warm: &DiskColumn, cold: &DiskColumn) {
    println!();
    let columns = [warm, cold];
    row(
        &format!("next {requests} requests"),
        ["restarted", "cold start"].map(str::to_owned),
    );
    let cells = |name: &str, cell: &dyn Fn(&DiskColumn) -> String| {
        row(name, columns.iter().map(|column| cell(column)));
    };
    cells("object hit ratio", &|c| pct(c.report.hit_ratio));
    cells("  served from disk", &DiskColumn::served_from_disk);
    cells("byte hit ratio", &|c| pct(c.report.byte_hit_ratio));
    cells("origin requests", &|c| c.origin_requests.to_string());
    println!(
        "\nrestart: the next {requests} requests hit {} warm against {} cold ({:+.1} points)",
        pct(warm.report.hit_ratio),
        pct(cold.report.hit_ratio),
        100.0 * (warm.report.hit_ratio - cold.report.hit_ratio)
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::TempConfig;

    #[test]
    fn the_disk_proxies_configs_pass_the_childs_checks_at_any_trace_size() {
        let demo = proxy_config("http://127.0.0.1:4010".parse().unwrap(), 3 << 20, 20_000);
        for footprint in [0, 10 << 20, 86 << 20, 100 << 30] {
            let tiers = Tiers::create(&demo, footprint, 6_666).unwrap();
            for mode in [Mode::Probation, Mode::Off] {
                let config = tiers.config(mode, "tier");
                let file = TempConfig::write(&config, "disk-test").unwrap();
                let read_by_the_child = Config::load(&file.0)
                    .unwrap_or_else(|errors| panic!("footprint {footprint}: {errors:?}"));
                assert_eq!(read_by_the_child, config);
                assert_eq!(config.disk.max_bytes, DISK_PER_RAM * config.cache.max_bytes);
            }
        }
    }
}
