//! The Prometheus exporter, and the gauges and counters set from the sampled state at each scrape.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{counter, gauge};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::admission::DoorkeeperStats;
use crate::admission::probation::Segment;
use crate::cache::disk::{DiskStats, Rejection, WriteReason};

use super::table::*;

/// Latency buckets in seconds: from a fast hit (100 µs) to the origin timeouts (30 s).
const DURATION_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// How often the exporter's histogram samples are folded into their buckets when nobody scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The process-wide Prometheus recorder, installed on first use.
///
/// `metrics` has one global recorder per process, so every proxy started in a process shares it.
///
/// The exporter keeps every histogram sample (8 bytes per request for
/// `bloomgate_request_duration_seconds`) until an upkeep folds them into buckets. A scrape runs
/// one, but a proxy nobody scrapes would grow by the request: measured, 4.3 MiB per 10 s of wrk
/// traffic without a scrape, without end. A thread of its own runs the upkeep every 5 s, as the
/// exporter's own `install()` does with its HTTP listener.
pub fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full(REQUEST_DURATION_SECONDS.to_string()),
                DURATION_BUCKETS,
            )
            .and_then(|builder| {
                builder.set_buckets_for_metric(
                    Matcher::Full(UPSTREAM_RESPONSE_SECONDS.to_string()),
                    DURATION_BUCKETS,
                )
            })
            .map(PrometheusBuilder::build_recorder)
            .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder());
        let handle = recorder.handle();
        // Fails only if another recorder was installed first; ours then simply renders nothing new.
        let _ = metrics::set_global_recorder(recorder);
        super::describe();
        let upkeep = handle.clone();
        let spawned = std::thread::Builder::new()
            .name("bloomgate-metrics-upkeep".to_owned())
            .spawn(move || {
                loop {
                    std::thread::sleep(UPKEEP_EVERY);
                    upkeep.run_upkeep();
                }
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "no metrics upkeep thread: histogram samples are folded only when scraped");
        }
        handle
    })
}

/// The doorkeeper's figures at scrape time, with the settings they are read against.
pub struct DoorkeeperState {
    pub stats: DoorkeeperStats,
    pub rotate_at_fpr: f64,
    pub capacity: u64,
    pub max_age: Duration,
}

/// The state sampled at scrape time, so the gauges cost nothing on the request path.
pub struct ScrapeState {
    pub doorkeeper: Option<DoorkeeperState>,
    /// Per segment, indexed by [`Segment::index`].
    pub cache_entries: [u64; 2],
    pub cache_bytes: [u64; 2],
    /// Bytes of main in its write-back queue.
    pub cache_write_back_bytes: u64,
    pub cache_writes: [u64; 2],
    pub cache_written_bytes: [u64; 2],
    pub cache_max_bytes: u64,
    /// Entries moved from probation to main: `bloomgate_admission_total{decision="promoted"}`.
    pub cache_promotions: u64,
    pub cache_evictions: u64,
    pub cache_expirations: u64,
    /// The disk tier, when there is one.
    pub disk: Option<DiskStats>,
}

/// Sets every gauge from the sampled state and renders the Prometheus text exposition.
pub fn render(state: &ScrapeState) -> String {
    let handle = recorder();
    if let Some(door) = &state.doorkeeper {
        let stats = &door.stats;
        gauge!(FILTER_FILL_RATIO, "generation" => "current").set(stats.current.fill_ratio);
        gauge!(FILTER_ESTIMATED_ITEMS, "generation" => "current")
            .set(stats.current.estimated_items);
        let previous = stats.previous.as_ref();
        gauge!(FILTER_FILL_RATIO, "generation" => "previous")
            .set(previous.map_or(0.0, |p| p.fill_ratio));
        gauge!(FILTER_ESTIMATED_ITEMS, "generation" => "previous")
            .set(previous.map_or(0.0, |p| p.estimated_items));
        gauge!(FILTER_ESTIMATED_FPR).set(stats.combined_fpr);
        gauge!(FILTER_ROTATE_AT_FPR).set(door.rotate_at_fpr);
        gauge!(FILTER_CAPACITY).set(door.capacity as f64);
        gauge!(FILTER_MAX_AGE_REMAINING_SECONDS)
            .set(door.max_age.saturating_sub(stats.current_age).as_secs_f64());
        gauge!(FILTER_BYTES).set(stats.memory_bytes as f64);
        gauge!(FILTER_GENERATION).set(stats.generation as f64);
        for (reason, count) in [
            ("fpr_threshold", stats.rotations.fpr_threshold),
            ("capacity", stats.rotations.capacity),
            ("max_age", stats.rotations.max_age),
        ] {
            counter!(FILTER_ROTATIONS_TOTAL, "reason" => reason).absolute(count);
        }
    }
    for segment in Segment::ALL {
        let (i, name) = (segment.index(), segment.as_str());
        gauge!(CACHE_ENTRIES, "segment" => name).set(state.cache_entries[i] as f64);
        gauge!(CACHE_BYTES, "segment" => name).set(state.cache_bytes[i] as f64);
        counter!(CACHE_WRITES_TOTAL, "segment" => name).absolute(state.cache_writes[i]);
        counter!(CACHE_WRITTEN_BYTES_TOTAL, "segment" => name)
            .absolute(state.cache_written_bytes[i]);
    }
    counter!(ADMISSION_TOTAL, "decision" => "promoted").absolute(state.cache_promotions);
    gauge!(CACHE_MAX_BYTES).set(state.cache_max_bytes as f64);
    gauge!(CACHE_WRITE_BACK_BYTES).set(state.cache_write_back_bytes as f64);
    counter!(CACHE_EVICTIONS_TOTAL).absolute(state.cache_evictions);
    counter!(CACHE_EXPIRATIONS_TOTAL).absolute(state.cache_expirations);
    if let Some(disk) = &state.disk {
        render_disk(disk);
    }
    handle.run_upkeep();
    handle.render()
}

fn render_disk(disk: &DiskStats) {
    gauge!(DISK_BYTES).set(disk.bytes as f64);
    gauge!(DISK_MAX_BYTES).set(disk.max_bytes as f64);
    gauge!(DISK_ENTRIES).set(disk.entries as f64);
    gauge!(DISK_LIVE_BYTES).set(disk.live_bytes as f64);
    for reason in WriteReason::ALL {
        let (i, name) = (reason as usize, reason.as_str());
        counter!(DISK_WRITES_TOTAL, "reason" => name).absolute(disk.writes[i]);
        counter!(DISK_WRITTEN_BYTES_TOTAL, "reason" => name).absolute(disk.written_bytes[i]);
    }
    for why in Rejection::ALL {
        counter!(DISK_REJECTED_TOTAL, "reason" => why.as_str())
            .absolute(disk.rejected[why as usize]);
    }
    counter!(DISK_ENGINE_WRITTEN_BYTES_TOTAL).absolute(disk.engine_written_bytes);
    counter!(DISK_HITS_TOTAL).absolute(disk.hits);
    counter!(DISK_COLD_READS_TOTAL).absolute(disk.cold_reads);
    counter!(DISK_RENEWED_SEGMENTS_TOTAL).absolute(disk.renewed_segments);
    counter!(DISK_HIT_BYTES_TOTAL).absolute(disk.hit_bytes);
    counter!(DISK_MISSES_TOTAL).absolute(disk.misses);
    counter!(DISK_READ_ERRORS_TOTAL).absolute(disk.read_errors);
    counter!(DISK_DROPPED_TOTAL).absolute(disk.dropped);
    counter!(DISK_REMOVED_TOTAL).absolute(disk.removed);
    counter!(DISK_SKIPPED_TOTAL).absolute(disk.skipped);
    gauge!(DISK_FULL).set(if disk.full { 1.0 } else { 0.0 });
    gauge!(DISK_RECOVERED_ENTRIES).set(disk.recovered_entries as f64);
    gauge!(DISK_RECOVERY_SECONDS).set(disk.recovery_seconds);
    gauge!(DISK_RECOVERING).set(if disk.recovering { 1.0 } else { 0.0 });
    counter!(DISK_SYNCS_TOTAL).absolute(disk.syncs);
    gauge!(DISK_SYNC_SECONDS).set(disk.sync_seconds);
}

#[cfg(test)]
mod tests {
    /// Names of this process's threads (Linux truncates them to 15 bytes).
    fn thread_names() -> Vec<String> {
        std::fs::read_dir("/proc/self/task")
            .map(|tasks| {
                tasks
                    .filter_map(|task| task.ok())
                    .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
                    .map(|name| name.trim().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn the_recorder_runs_its_own_upkeep_so_unscraped_samples_do_not_pile_up() {
        let _ = super::recorder();
        // A new thread names itself once it runs (the kernel's comm), so look for a while.
        let is_upkeep = |name: &String| {
            "bloomgate-metrics-upkeep".starts_with(name.as_str())
                && name.starts_with("bloomgate-metr")
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut names = thread_names();
        while !names.iter().any(is_upkeep) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            names = thread_names();
        }
        assert!(
            names.iter().any(is_upkeep),
            "no upkeep thread among {names:?}"
        );
    }
}
