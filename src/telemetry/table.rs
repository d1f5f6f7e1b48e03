//! Every metric bloomgate exports, defined once: name, kind, unit, help, labels and their values,
//! and when its series come to exist.
//!
//! The exporter's help text ([`super::describe`]) and the series created at zero at start
//! ([`super::register_at_start`]) are read from [`METRICS`]; the constants name a metric where it
//! is counted. Adding a metric is one entry in the table below.

use metrics::Unit;

use super::labels::{CachedError, DecisionLabel, OriginOutcome, Outcome, PurgeLabel, SliceEvent};
use crate::admission::RotationReason;
use crate::admission::probation::Segment;
use crate::cache::disk::{Rejection, WriteReason};

/// What a metric is to Prometheus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// When a metric's series come to exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registered {
    /// At zero when the proxy starts, for every value of every label, so dashboards and alerts see
    /// them before the first event.
    AtStart,
    /// Set from the sampled state at each scrape, while the part it measures is configured.
    AtScrape,
    /// By the part that owns it, when that part is built (one series per upstream server).
    ByOwner,
}

/// The values a label takes.
#[derive(Debug, Clone, Copy)]
pub enum Values {
    /// A list known when the crate is compiled.
    Listed(fn() -> Vec<&'static str>),
    /// Given at registration by the code that owns them: values known only at start or reload
    /// (upstream servers, routes), or owned by a layer above telemetry (the proxy's stall scopes).
    Given,
}

/// One label of a metric.
#[derive(Debug, Clone, Copy)]
pub struct Label {
    pub name: &'static str,
    pub values: Values,
}

/// One metric: everything the exporter and the dashboard need to know of it.
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    pub unit: Option<Unit>,
    pub help: &'static str,
    pub labels: &'static [Label],
    pub registered: Registered,
}

/// `CONST: Kind(Unit)?, "name", Registered, "help", [label = values, ...];` per metric: a
/// constant for the name, and one [`Metric`] in [`METRICS`].
macro_rules! metrics_table {
    ($(
        $(#[$meta:meta])*
        $constant:ident: $kind:ident $(($unit:ident))?, $name:expr, $registered:ident, $help:expr,
            [$($label:ident = $values:expr),* $(,)?];
    )*) => {
        $(
            $(#[$meta])*
            pub const $constant: &str = $name;
        )*

        /// Every metric, in the order `/metrics` describes them.
        pub static METRICS: &[Metric] = &[$(
            Metric {
                name: $constant,
                kind: Kind::$kind,
                unit: metrics_table!(@unit $($unit)?),
                help: $help,
                labels: &[$(Label { name: stringify!($label), values: $values }),*],
                registered: Registered::$registered,
            }
        ),*];
    };
    (@unit) => { None };
    (@unit $unit:ident) => { Some(Unit::$unit) };
}

use Values::{Given, Listed};

/// The values of an enum that lives below telemetry, each as its `as_str` gives it.
macro_rules! listed {
    ($ty:ty) => {
        Listed(|| <$ty>::ALL.iter().map(|value| value.as_str()).collect())
    };
}

// The doorkeeper's names and help, shared with the Pingora plugin's collector.
use bloomgate_admission::metrics::{self as door, help as door_help};

metrics_table! {
    REQUESTS_TOTAL: Counter, "bloomgate_requests_total", ByOwner,
        "Client requests answered, by RFC 9211 outcome and route (\"(none)\": refused before routing).",
        [cache_status = listed!(Outcome), route = Given];
    REQUEST_DURATION_SECONDS: Histogram(Seconds), "bloomgate_request_duration_seconds", AtStart,
        "Time from request to response headers.",
        [];
    CACHED_ERRORS_TOTAL: Counter, "bloomgate_cached_errors_total", AtStart,
        "Responses with an error status (4xx, 5xx) the cache served (served=hit) or stored from the origin (served=stored).",
        [served = listed!(CachedError)];
    PURGES_TOTAL: Counter, "bloomgate_purges_total", AtStart,
        "Purge requests, by kind (key: PURGE of one object; tag_hard, tag_soft: purge by tag on the admin listener).",
        [kind = listed!(PurgeLabel)];
    PURGED_ENTRIES_TOTAL: Counter, "bloomgate_purged_entries_total", AtStart,
        "Entries purged, by kind; a purge by tag counts each entry when it is next looked up.",
        [kind = listed!(PurgeLabel)];
    ADMISSION_TOTAL: Counter, door::ADMISSION_TOTAL, AtStart,
        "Cache admission decisions for responses from the origin, by decision (admitted: into main; probation: a first request into probation; promoted: from probation to main, counted when it moves).",
        [decision = listed!(DecisionLabel)];
    FILTER_FILL_RATIO: Gauge, door::FILTER_FILL_RATIO, AtScrape, door_help::FILTER_FILL_RATIO,
        [generation = Listed(|| vec!["current", "previous"])];
    FILTER_ESTIMATED_ITEMS: Gauge, door::FILTER_ESTIMATED_ITEMS, AtScrape,
        door_help::FILTER_ESTIMATED_ITEMS,
        [generation = Listed(|| vec!["current", "previous"])];
    FILTER_ESTIMATED_FPR: Gauge, door::FILTER_ESTIMATED_FPR, AtScrape,
        door_help::FILTER_ESTIMATED_FPR,
        [];
    FILTER_ROTATE_AT_FPR: Gauge, door::FILTER_ROTATE_AT_FPR, AtScrape,
        door_help::FILTER_ROTATE_AT_FPR,
        [];
    FILTER_CAPACITY: Gauge, door::FILTER_CAPACITY, AtScrape, door_help::FILTER_CAPACITY,
        [];
    FILTER_BYTES: Gauge(Bytes), door::FILTER_BYTES, AtScrape, door_help::FILTER_BYTES,
        [];
    FILTER_GENERATION: Gauge, door::FILTER_GENERATION, AtScrape, door_help::FILTER_GENERATION,
        [];
    FILTER_ROTATIONS_TOTAL: Counter, door::FILTER_ROTATIONS_TOTAL, AtScrape,
        door_help::FILTER_ROTATIONS_TOTAL,
        [reason = listed!(RotationReason)];
    FILTER_MAX_AGE_REMAINING_SECONDS: Gauge(Seconds), "bloomgate_filter_max_age_remaining_seconds", AtScrape,
        "Time until admission.max_age rotates the current generation; its false-positive estimate or capacity may rotate it first.",
        [];
    FILTER_SNAPSHOTS_TOTAL: Counter, "bloomgate_filter_snapshots_total", AtStart,
        "Doorkeeper snapshots written to admission.snapshot_path, by outcome (ok, error).",
        [outcome = Listed(|| vec!["ok", "error"])];
    CACHE_ENTRIES: Gauge, "bloomgate_cache_entries", AtScrape,
        "Keys held in the cache, by segment (probation, main).",
        [segment = listed!(Segment)];
    CACHE_BYTES: Gauge(Bytes), "bloomgate_cache_bytes", AtScrape,
        "Bytes held in the cache (headers, bodies, bookkeeping), by segment (probation, main).",
        [segment = listed!(Segment)];
    CACHE_WRITE_BACK_BYTES: Gauge(Bytes), "bloomgate_cache_write_back_bytes", AtScrape,
        "Bytes of main (counted in bloomgate_cache_bytes) held by proven slices waiting in RAM for the disk tier: the first to leave, and to be written, when room is needed.",
        [];
    CACHE_MAX_BYTES: Gauge(Bytes), "bloomgate_cache_max_bytes", AtScrape,
        "Configured cache size.",
        [];
    CACHE_WRITES_TOTAL: Counter, "bloomgate_cache_writes_total", AtScrape,
        "Responses written to the cache, by segment; a promotion is a write into main.",
        [segment = listed!(Segment)];
    CACHE_WRITTEN_BYTES_TOTAL: Counter(Bytes), "bloomgate_cache_written_bytes_total", AtScrape,
        "Body bytes written to the cache, by segment; a promotion is a write into main.",
        [segment = listed!(Segment)];
    CACHE_EVICTIONS_TOTAL: Counter, "bloomgate_cache_evictions_total", AtScrape,
        "Entries evicted to make room.",
        [];
    CACHE_EXPIRATIONS_TOTAL: Counter, "bloomgate_cache_expirations_total", AtScrape,
        "Entries removed because they expired.",
        [];
    CACHE_HIT_BYTES_TOTAL: Counter(Bytes), "bloomgate_cache_hit_bytes_total", ByOwner,
        "Body bytes served from the cache, by route.",
        [route = Given];
    DISK_BYTES: Gauge(Bytes), "bloomgate_disk_bytes", AtScrape,
        "Space the disk tier's files take on the file system (allocated blocks).",
        [];
    DISK_MAX_BYTES: Gauge(Bytes), "bloomgate_disk_max_bytes", AtScrape,
        "Configured disk.max_bytes.",
        [];
    DISK_LIVE_BYTES: Gauge(Bytes), "bloomgate_disk_live_bytes", AtScrape,
        "Bytes of the records on disk, by the disk engine's index (bloomgate_disk_bytes counts the files, which are preallocated).",
        [];
    DISK_ENTRIES: Gauge, "bloomgate_disk_entries", AtScrape,
        "Records on disk, by the disk engine's index.",
        [];
    DISK_WRITES_TOTAL: Counter, "bloomgate_disk_writes_total", AtScrape,
        "Records written to disk, by reason (ram_hit: hit while in RAM; seen_before: stored on a second request; revalidated: headers refreshed by a 304).",
        [reason = listed!(WriteReason)];
    DISK_WRITTEN_BYTES_TOTAL: Counter(Bytes), "bloomgate_disk_written_bytes_total", AtScrape,
        "Bytes handed to the disk engine to store (each record with its key), by reason.",
        [reason = listed!(WriteReason)];
    DISK_ENGINE_WRITTEN_BYTES_TOTAL: Counter(Bytes), "bloomgate_disk_engine_written_bytes_total", AtScrape,
        "Bytes the disk engine wrote to its files (records with their headers and padding, tombstones).",
        [];
    DISK_REJECTED_TOTAL: Counter, "bloomgate_disk_rejected_total", AtScrape,
        "Entries leaving RAM not written to disk, by reason (first_hit, budget, full, too_large, failed, recovering).",
        [reason = listed!(Rejection)];
    DISK_HITS_TOTAL: Counter, "bloomgate_disk_hits_total", AtScrape,
        "RAM misses answered by a record on disk.",
        [];
    DISK_COLD_READS_TOTAL: Counter, "bloomgate_disk_cold_reads_total", AtScrape,
        "Disk reads not in the page cache, finished on the blocking pool instead of the serving thread.",
        [];
    DISK_RENEWED_SEGMENTS_TOTAL: Counter, "bloomgate_disk_renewed_segments_total", AtScrape,
        "Reclaimed disk segments given a new inode because values read from them through the mapping were still held.",
        [];
    DISK_HIT_BYTES_TOTAL: Counter(Bytes), "bloomgate_disk_hit_bytes_total", AtScrape,
        "Body bytes read from disk records.",
        [];
    DISK_SENDFILE_BYTES_TOTAL: Counter(Bytes), "bloomgate_disk_sendfile_bytes_total", AtStart,
        "Body bytes of disk hits sent from their segment file with sendfile (plain HTTP/1.1 on the native server, segments read through a mapping).",
        [];
    DISK_MISSES_TOTAL: Counter, "bloomgate_disk_misses_total", AtScrape,
        "RAM misses with no record on disk.",
        [];
    DISK_READ_ERRORS_TOTAL: Counter, "bloomgate_disk_read_errors_total", AtScrape,
        "Disk reads that failed (I/O errors).",
        [];
    DISK_DROPPED_TOTAL: Counter, "bloomgate_disk_dropped_total", AtScrape,
        "Disk records dropped when read: torn, corrupt (checksum) or undecodable; never served.",
        [];
    DISK_REMOVED_TOTAL: Counter, "bloomgate_disk_removed_total", AtScrape,
        "Disk records removed by purge or invalidation.",
        [];
    DISK_SKIPPED_TOTAL: Counter, "bloomgate_disk_skipped_total", AtScrape,
        "Proven entries leaving RAM not written again: their record is still on disk.",
        [];
    DISK_FULL: Gauge, "bloomgate_disk_full", AtScrape,
        "1 while the disk tier's file system has less than a block free (writes stop).",
        [];
    DISK_RECOVERED_ENTRIES: Gauge, "bloomgate_disk_recovered_entries", AtScrape,
        "Records the disk tier found at start (0 while it recovers).",
        [];
    DISK_RECOVERY_SECONDS: Gauge(Seconds), "bloomgate_disk_recovery_seconds", AtScrape,
        "Time the disk tier took to open and recover its index at start (0 while it recovers).",
        [];
    DISK_RECOVERING: Gauge, "bloomgate_disk_recovering", AtScrape,
        "1 while the disk tier recovers its index at start (the proxy serves; disk lookups miss, nothing is written).",
        [];
    DISK_SYNCS_TOTAL: Counter, "bloomgate_disk_syncs_total", AtScrape,
        "fdatasyncs of the disk engine's files (disk.sync = \"seal\": two per sealed segment).",
        [];
    DISK_SYNC_SECONDS: Gauge(Seconds), "bloomgate_disk_sync_seconds", AtScrape,
        "Time the disk engine's writer has spent in fdatasync since the tier opened.",
        [];
    SLICES_TOTAL: Counter, "bloomgate_slices_total", AtStart,
        "Slices of large objects, by event: stored, hit, first_hit (refused by admission), and the answers that were not used (not_ranged: the origin sent the whole object; wrong_range: a Content-Range that is not the slice's; changed: another version of the object); revalidated: a stale slice refreshed by a 304 to a conditional request for its object.",
        [event = listed!(SliceEvent)];
    SLICE_ORIGIN_BYTES_TOTAL: Counter(Bytes), "bloomgate_slice_origin_bytes_total", AtStart,
        "Body bytes of slices received from the origin.",
        [];
    ORIGIN_REQUESTS_TOTAL: Counter, "bloomgate_origin_requests_total", AtStart,
        "Requests sent to the origin, by outcome.",
        [outcome = listed!(OriginOutcome)];
    ORIGIN_BYTES_TOTAL: Counter(Bytes), "bloomgate_origin_bytes_total", ByOwner,
        "Body bytes received from the origin, by route.",
        [route = Given];
    UPSTREAM_REQUESTS_TOTAL: Counter, "bloomgate_upstream_requests_total", ByOwner,
        "Requests sent to each server of each upstream group (retries included; probes not).",
        [upstream = Given, server = Given];
    UPSTREAM_ERRORS_TOTAL: Counter, "bloomgate_upstream_errors_total", ByOwner,
        "Requests to each server that got no response head, by kind (connect_error, timeout, tls_error, protocol_error).",
        [upstream = Given, server = Given, kind = Given];
    UPSTREAM_RESPONSE_SECONDS: Histogram(Seconds), "bloomgate_upstream_response_seconds", ByOwner,
        "Time from sending a request to each server to its response head.",
        [upstream = Given, server = Given];
    UPSTREAM_HEALTHY: Gauge, "bloomgate_upstream_healthy", ByOwner,
        "1 while a server is in rotation, 0 while passive or active health checks hold it out.",
        [upstream = Given, server = Given];
    UPSTREAM_HEALTH_CHANGES_TOTAL: Counter, "bloomgate_upstream_health_changes_total", ByOwner,
        "Times a server left rotation (to=down) or came back (to=up).",
        [upstream = Given, server = Given, to = Given];
    CONNECTIONS_OPEN: Gauge, "bloomgate_connections_open", AtStart,
        "Client connections open.",
        [];
    CONNECTIONS_IDLE_CLOSED_TOTAL: Counter, "bloomgate_connections_idle_closed_total", AtStart,
        "Client connections closed for waiting too long without a request.",
        [];
    CLIENT_SEND_TIMEOUTS_TOTAL: Counter, "bloomgate_client_send_timeouts_total", AtStart,
        "Clients given up on for taking no bytes of a response, by scope: an HTTP/2 stream reset (stream), or the connection closed (connection).",
        [scope = Given];
    CONNECTIONS_REFUSED_TOTAL: Counter, "bloomgate_connections_refused_total", AtStart,
        "Client connections closed at accept because the connection limit was reached.",
        [];
    TLS_HANDSHAKES_TOTAL: Counter, "bloomgate_tls_handshakes_total", AtStart,
        "TLS handshakes on the HTTPS listener, by outcome (ok, error, timeout).",
        [outcome = Listed(|| vec!["ok", "error", "timeout"])];
    ACCESS_LOG_LINES_TOTAL: Counter, "bloomgate_access_log_lines_total", AtStart,
        "Access log lines written (handed to the file).",
        [];
    ACCESS_LOG_DROPPED_TOTAL: Counter, "bloomgate_access_log_dropped_total", AtStart,
        "Access log lines dropped: the writer's queue (log.access.buffer) was full, or the file could not be written.",
        [];
}
