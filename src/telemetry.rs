//! Metric names in one place, the Prometheus exporter, and the gauges refreshed at each scrape.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::admission::DoorkeeperStats;
use crate::admission::probation::Segment;
use crate::cache::disk::{DiskStats, Rejection, WriteReason};

/// The doorkeeper's metrics, named by its crate so that the Pingora plugin exports them alike.
pub use doorkeeper::metrics::{
    ADMISSION_TOTAL, FILTER_BYTES, FILTER_CAPACITY, FILTER_ESTIMATED_FPR, FILTER_ESTIMATED_ITEMS,
    FILTER_FILL_RATIO, FILTER_GENERATION, FILTER_ROTATE_AT_FPR, FILTER_ROTATIONS_TOTAL, help,
};

pub const REQUESTS_TOTAL: &str = "bloomgate_requests_total";
pub const REQUEST_DURATION_SECONDS: &str = "bloomgate_request_duration_seconds";
pub const FILTER_SNAPSHOTS_TOTAL: &str = "bloomgate_filter_snapshots_total";
pub const FILTER_MAX_AGE_REMAINING_SECONDS: &str = "bloomgate_filter_max_age_remaining_seconds";
pub const CACHE_ENTRIES: &str = "bloomgate_cache_entries";
pub const CACHE_BYTES: &str = "bloomgate_cache_bytes";
pub const CACHE_MAX_BYTES: &str = "bloomgate_cache_max_bytes";
pub const CACHE_WRITES_TOTAL: &str = "bloomgate_cache_writes_total";
pub const CACHE_WRITTEN_BYTES_TOTAL: &str = "bloomgate_cache_written_bytes_total";
pub const CACHE_EVICTIONS_TOTAL: &str = "bloomgate_cache_evictions_total";
pub const CACHE_EXPIRATIONS_TOTAL: &str = "bloomgate_cache_expirations_total";
pub const CACHE_HIT_BYTES_TOTAL: &str = "bloomgate_cache_hit_bytes_total";
pub const CACHED_ERRORS_TOTAL: &str = "bloomgate_cached_errors_total";
pub const PURGES_TOTAL: &str = "bloomgate_purges_total";
pub const PURGED_ENTRIES_TOTAL: &str = "bloomgate_purged_entries_total";
pub const DISK_BYTES: &str = "bloomgate_disk_bytes";
pub const DISK_MAX_BYTES: &str = "bloomgate_disk_max_bytes";
pub const DISK_ENTRIES: &str = "bloomgate_disk_entries";
pub const DISK_WRITES_TOTAL: &str = "bloomgate_disk_writes_total";
pub const DISK_WRITTEN_BYTES_TOTAL: &str = "bloomgate_disk_written_bytes_total";
pub const DISK_ENGINE_WRITTEN_BYTES_TOTAL: &str = "bloomgate_disk_engine_written_bytes_total";
pub const DISK_COLD_READS_TOTAL: &str = "bloomgate_disk_cold_reads_total";
pub const DISK_RENEWED_SEGMENTS_TOTAL: &str = "bloomgate_disk_renewed_segments_total";
pub const DISK_REJECTED_TOTAL: &str = "bloomgate_disk_rejected_total";
pub const DISK_HITS_TOTAL: &str = "bloomgate_disk_hits_total";
pub const DISK_HIT_BYTES_TOTAL: &str = "bloomgate_disk_hit_bytes_total";
pub const DISK_MISSES_TOTAL: &str = "bloomgate_disk_misses_total";
pub const DISK_READ_ERRORS_TOTAL: &str = "bloomgate_disk_read_errors_total";
pub const DISK_DROPPED_TOTAL: &str = "bloomgate_disk_dropped_total";
pub const DISK_REMOVED_TOTAL: &str = "bloomgate_disk_removed_total";
pub const DISK_SKIPPED_TOTAL: &str = "bloomgate_disk_skipped_total";
pub const DISK_FULL: &str = "bloomgate_disk_full";
pub const DISK_RECOVERED_ENTRIES: &str = "bloomgate_disk_recovered_entries";
pub const DISK_RECOVERY_SECONDS: &str = "bloomgate_disk_recovery_seconds";
pub const DISK_RECOVERING: &str = "bloomgate_disk_recovering";
pub const DISK_SYNCS_TOTAL: &str = "bloomgate_disk_syncs_total";
pub const DISK_SYNC_SECONDS: &str = "bloomgate_disk_sync_seconds";
pub const ORIGIN_REQUESTS_TOTAL: &str = "bloomgate_origin_requests_total";
pub const ORIGIN_BYTES_TOTAL: &str = "bloomgate_origin_bytes_total";
pub const SLICES_TOTAL: &str = "bloomgate_slices_total";
pub const SLICE_ORIGIN_BYTES_TOTAL: &str = "bloomgate_slice_origin_bytes_total";
pub const UPSTREAM_REQUESTS_TOTAL: &str = "bloomgate_upstream_requests_total";
pub const UPSTREAM_ERRORS_TOTAL: &str = "bloomgate_upstream_errors_total";
pub const UPSTREAM_RESPONSE_SECONDS: &str = "bloomgate_upstream_response_seconds";
pub const UPSTREAM_HEALTHY: &str = "bloomgate_upstream_healthy";
pub const UPSTREAM_HEALTH_CHANGES_TOTAL: &str = "bloomgate_upstream_health_changes_total";
pub const CONNECTIONS_OPEN: &str = "bloomgate_connections_open";
pub const CONNECTIONS_REFUSED_TOTAL: &str = "bloomgate_connections_refused_total";
pub const CONNECTIONS_IDLE_CLOSED_TOTAL: &str = "bloomgate_connections_idle_closed_total";
pub const CLIENT_SEND_TIMEOUTS_TOTAL: &str = "bloomgate_client_send_timeouts_total";
pub const TLS_HANDSHAKES_TOTAL: &str = "bloomgate_tls_handshakes_total";
pub const ACCESS_LOG_LINES_TOTAL: &str = "bloomgate_access_log_lines_total";
pub const ACCESS_LOG_DROPPED_TOTAL: &str = "bloomgate_access_log_dropped_total";

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
        describe();
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

fn describe() {
    describe_counter!(
        REQUESTS_TOTAL,
        "Client requests answered, by RFC 9211 outcome."
    );
    describe_histogram!(
        REQUEST_DURATION_SECONDS,
        Unit::Seconds,
        "Time from request to response headers."
    );
    describe_counter!(
        CACHED_ERRORS_TOTAL,
        "Responses with an error status (4xx, 5xx) the cache served (served=hit) or stored from the origin (served=stored)."
    );
    describe_counter!(
        PURGES_TOTAL,
        "Purge requests, by kind (key: PURGE of one object; tag_hard, tag_soft: purge by tag on the admin listener)."
    );
    describe_counter!(
        PURGED_ENTRIES_TOTAL,
        "Entries purged, by kind; a purge by tag counts each entry when it is next looked up."
    );
    describe_counter!(
        ADMISSION_TOTAL,
        "Cache admission decisions for responses from the origin, by decision (admitted: into main; probation: a first request into probation; promoted: from probation to main, counted when it moves)."
    );
    describe_gauge!(FILTER_FILL_RATIO, help::FILTER_FILL_RATIO);
    describe_gauge!(FILTER_ESTIMATED_ITEMS, help::FILTER_ESTIMATED_ITEMS);
    describe_gauge!(FILTER_ESTIMATED_FPR, help::FILTER_ESTIMATED_FPR);
    describe_gauge!(FILTER_ROTATE_AT_FPR, help::FILTER_ROTATE_AT_FPR);
    describe_gauge!(FILTER_CAPACITY, help::FILTER_CAPACITY);
    describe_gauge!(FILTER_BYTES, Unit::Bytes, help::FILTER_BYTES);
    describe_gauge!(FILTER_GENERATION, help::FILTER_GENERATION);
    describe_counter!(FILTER_ROTATIONS_TOTAL, help::FILTER_ROTATIONS_TOTAL);
    describe_gauge!(
        FILTER_MAX_AGE_REMAINING_SECONDS,
        Unit::Seconds,
        "Time until admission.max_age rotates the current generation; its false-positive estimate or capacity may rotate it first."
    );
    describe_counter!(
        FILTER_SNAPSHOTS_TOTAL,
        "Doorkeeper snapshots written to admission.snapshot_path, by outcome (ok, error)."
    );
    describe_gauge!(
        CACHE_ENTRIES,
        "Keys held in the cache, by segment (probation, main)."
    );
    describe_gauge!(
        CACHE_BYTES,
        Unit::Bytes,
        "Bytes held in the cache (headers, bodies, bookkeeping), by segment (probation, main)."
    );
    describe_gauge!(CACHE_MAX_BYTES, Unit::Bytes, "Configured cache size.");
    describe_counter!(
        CACHE_WRITES_TOTAL,
        "Responses written to the cache, by segment; a promotion is a write into main."
    );
    describe_counter!(
        CACHE_WRITTEN_BYTES_TOTAL,
        Unit::Bytes,
        "Body bytes written to the cache, by segment; a promotion is a write into main."
    );
    describe_counter!(CACHE_EVICTIONS_TOTAL, "Entries evicted to make room.");
    describe_counter!(
        CACHE_EXPIRATIONS_TOTAL,
        "Entries removed because they expired."
    );
    describe_counter!(
        CACHE_HIT_BYTES_TOTAL,
        Unit::Bytes,
        "Body bytes served from the cache."
    );
    describe_disk();
    describe_counter!(
        ORIGIN_REQUESTS_TOTAL,
        "Requests sent to the origin, by outcome."
    );
    describe_counter!(
        ORIGIN_BYTES_TOTAL,
        Unit::Bytes,
        "Body bytes received from the origin."
    );
    describe_counter!(
        SLICES_TOTAL,
        "Slices of large objects, by event: stored, hit, first_hit (refused by admission), and the answers that were not used (not_ranged: the origin sent the whole object; wrong_range: a Content-Range that is not the slice's; changed: another version of the object)."
    );
    describe_counter!(
        SLICE_ORIGIN_BYTES_TOTAL,
        Unit::Bytes,
        "Body bytes of slices received from the origin (also counted in bloomgate_origin_bytes_total)."
    );
    describe_counter!(
        UPSTREAM_REQUESTS_TOTAL,
        "Requests sent to each server of each upstream group (retries included; probes not)."
    );
    describe_counter!(
        UPSTREAM_ERRORS_TOTAL,
        "Requests to each server that got no response head, by kind (connect_error, timeout, tls_error, protocol_error)."
    );
    describe_histogram!(
        UPSTREAM_RESPONSE_SECONDS,
        Unit::Seconds,
        "Time from sending a request to each server to its response head."
    );
    describe_gauge!(
        UPSTREAM_HEALTHY,
        "1 while a server is in rotation, 0 while passive or active health checks hold it out."
    );
    describe_counter!(
        UPSTREAM_HEALTH_CHANGES_TOTAL,
        "Times a server left rotation (to=down) or came back (to=up)."
    );
    describe_gauge!(CONNECTIONS_OPEN, "Client connections open.");
    describe_counter!(
        CONNECTIONS_IDLE_CLOSED_TOTAL,
        "Client connections closed for waiting too long without a request."
    );
    describe_counter!(
        CLIENT_SEND_TIMEOUTS_TOTAL,
        "Clients given up on for taking no bytes of a response, by scope: an HTTP/2 stream reset (stream), or the connection closed (connection)."
    );
    describe_counter!(
        CONNECTIONS_REFUSED_TOTAL,
        "Client connections closed at accept because the connection limit was reached."
    );
    describe_counter!(
        TLS_HANDSHAKES_TOTAL,
        "TLS handshakes on the HTTPS listener, by outcome (ok, error, timeout)."
    );
    describe_counter!(
        ACCESS_LOG_LINES_TOTAL,
        "Access log lines written (handed to the file)."
    );
    describe_counter!(
        ACCESS_LOG_DROPPED_TOTAL,
        "Access log lines dropped: the writer's queue (log.access.buffer) was full, or the file could not be written."
    );
}

fn describe_disk() {
    describe_gauge!(
        DISK_BYTES,
        Unit::Bytes,
        "Space the disk tier's files take on the file system (allocated blocks)."
    );
    describe_gauge!(DISK_MAX_BYTES, Unit::Bytes, "Configured disk.max_bytes.");
    describe_gauge!(DISK_ENTRIES, "Records on disk, by the disk engine's index.");
    describe_counter!(
        DISK_WRITES_TOTAL,
        "Records written to disk, by reason (ram_hit: hit while in RAM; seen_before: stored on a second request; revalidated: headers refreshed by a 304)."
    );
    describe_counter!(
        DISK_WRITTEN_BYTES_TOTAL,
        Unit::Bytes,
        "Bytes handed to the disk engine to store (each record with its key), by reason."
    );
    describe_counter!(
        DISK_ENGINE_WRITTEN_BYTES_TOTAL,
        Unit::Bytes,
        "Bytes the disk engine wrote to its files (records with their headers and padding, tombstones)."
    );
    describe_counter!(
        DISK_REJECTED_TOTAL,
        "Entries leaving RAM not written to disk, by reason (first_hit, budget, full, too_large, failed, recovering)."
    );
    describe_counter!(DISK_HITS_TOTAL, "RAM misses answered by a record on disk.");
    describe_counter!(
        DISK_COLD_READS_TOTAL,
        "Disk reads not in the page cache, finished on the blocking pool instead of the serving thread."
    );
    describe_counter!(
        DISK_RENEWED_SEGMENTS_TOTAL,
        "Reclaimed disk segments given a new inode because values read from them through the mapping were still held."
    );
    describe_counter!(
        DISK_HIT_BYTES_TOTAL,
        Unit::Bytes,
        "Body bytes read from disk records."
    );
    describe_counter!(DISK_MISSES_TOTAL, "RAM misses with no record on disk.");
    describe_counter!(
        DISK_READ_ERRORS_TOTAL,
        "Disk reads that failed (I/O errors)."
    );
    describe_counter!(
        DISK_DROPPED_TOTAL,
        "Disk records dropped when read: torn, corrupt (checksum) or undecodable; never served."
    );
    describe_counter!(
        DISK_REMOVED_TOTAL,
        "Disk records removed by purge or invalidation."
    );
    describe_counter!(
        DISK_SKIPPED_TOTAL,
        "Proven entries leaving RAM not written again: their record is still on disk."
    );
    describe_gauge!(
        DISK_FULL,
        "1 while the disk tier's file system has less than a block free (writes stop)."
    );
    describe_gauge!(
        DISK_RECOVERED_ENTRIES,
        "Records the disk tier found at start (0 while it recovers)."
    );
    describe_gauge!(
        DISK_RECOVERY_SECONDS,
        Unit::Seconds,
        "Time the disk tier took to open and recover its index at start (0 while it recovers)."
    );
    describe_gauge!(
        DISK_RECOVERING,
        "1 while the disk tier recovers its index at start (the proxy serves; disk lookups miss, nothing is written)."
    );
    describe_counter!(
        DISK_SYNCS_TOTAL,
        "fdatasyncs of the disk engine's files (disk.sync = \"seal\": two per sealed segment)."
    );
    describe_gauge!(
        DISK_SYNC_SECONDS,
        Unit::Seconds,
        "Time the disk engine's writer has spent in fdatasync since the tier opened."
    );
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
