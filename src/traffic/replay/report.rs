//! What a replay measured: each worker's tally, merged into the report, and the report as text.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

use hdrhistogram::Histogram;

use super::Fetched;

/// Latencies are recorded in microseconds up to this bound (an hour); longer ones saturate.
const MAX_LATENCY_US: u64 = 3_600_000_000;

/// What a replay measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReplayReport {
    pub target: String,
    /// Requests sent (successful or not).
    pub requests: u64,
    pub elapsed_secs: f64,
    pub requests_per_sec: f64,
    /// Latency of every request that got a response (any status).
    pub latency_ms: LatencySummary,
    /// Responses with a 2xx or 304 status: the base of the ratios below.
    pub responses: u64,
    pub hits: u64,
    /// Responses whose `Cache-Status` says the request went forward.
    pub misses: u64,
    /// Responses without a `Cache-Status` (for example straight from the origin).
    pub without_cache_status: u64,
    pub hit_ratio: f64,
    /// Body bytes received in successful responses.
    pub bytes: u64,
    pub hit_bytes: u64,
    pub byte_hit_ratio: f64,
    /// Misses whose response the cache stored.
    pub stored: u64,
    /// Misses by reason: the `detail`, else `stored`, else the `fwd` value.
    pub misses_by_reason: BTreeMap<String, u64>,
    pub errors: ErrorCounts,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LatencySummary {
    pub count: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

/// Requests that failed.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ErrorCounts {
    pub total: u64,
    /// Responses with a status other than 2xx or 304, by status code.
    pub by_status: BTreeMap<u16, u64>,
    /// Connection failures and bodies cut short.
    pub transport: u64,
    /// Requests that did not complete within the timeout.
    pub timeouts: u64,
    /// Keys that make no valid URL.
    pub invalid_keys: u64,
}

/// One worker's counts, merged at the end.
pub(super) struct Tally {
    pub(super) requests: u64,
    pub(super) latency_us: Histogram<u64>,
    pub(super) responses: u64,
    pub(super) hits: u64,
    pub(super) misses: u64,
    pub(super) without_cache_status: u64,
    pub(super) bytes: u64,
    pub(super) hit_bytes: u64,
    pub(super) stored: u64,
    pub(super) misses_by_reason: HashMap<String, u64>,
    pub(super) errors: ErrorCounts,
}

impl Tally {
    pub(super) fn new() -> Tally {
        Tally {
            requests: 0,
            // 3 significant digits: 0.1% resolution at every scale.
            latency_us: Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
                .expect("constant histogram bounds are valid"),
            responses: 0,
            hits: 0,
            misses: 0,
            without_cache_status: 0,
            bytes: 0,
            hit_bytes: 0,
            stored: 0,
            misses_by_reason: HashMap::new(),
            errors: ErrorCounts::default(),
        }
    }

    pub(super) fn record(&mut self, fetched: &Fetched, latency: Duration) {
        self.latency_us
            .saturating_record(latency.as_micros().try_into().unwrap_or(u64::MAX).max(1));
        if !(fetched.status.is_success() || fetched.status == http::StatusCode::NOT_MODIFIED) {
            *self
                .errors
                .by_status
                .entry(fetched.status.as_u16())
                .or_default() += 1;
            return;
        }
        self.responses += 1;
        self.bytes += fetched.body_bytes;
        match &fetched.cache_status {
            Some(status) if status.hit => {
                self.hits += 1;
                self.hit_bytes += fetched.body_bytes;
            }
            Some(status) => {
                self.misses += 1;
                self.stored += u64::from(status.stored);
                *self
                    .misses_by_reason
                    .entry(status.miss_reason().to_owned())
                    .or_default() += 1;
            }
            None => self.without_cache_status += 1,
        }
    }

    pub(super) fn merge(&mut self, other: Tally) {
        self.requests += other.requests;
        // Same bounds on both sides: adding cannot fail.
        let _ = self.latency_us.add(&other.latency_us);
        self.responses += other.responses;
        self.hits += other.hits;
        self.misses += other.misses;
        self.without_cache_status += other.without_cache_status;
        self.bytes += other.bytes;
        self.hit_bytes += other.hit_bytes;
        self.stored += other.stored;
        for (reason, count) in other.misses_by_reason {
            *self.misses_by_reason.entry(reason).or_default() += count;
        }
        for (status, count) in other.errors.by_status {
            *self.errors.by_status.entry(status).or_default() += count;
        }
        self.errors.transport += other.errors.transport;
        self.errors.timeouts += other.errors.timeouts;
        self.errors.invalid_keys += other.errors.invalid_keys;
    }

    pub(super) fn report(self, target: String, elapsed: Duration) -> ReplayReport {
        let ratio = |part: u64, whole: u64| {
            if whole == 0 {
                0.0
            } else {
                part as f64 / whole as f64
            }
        };
        let ms = |us: u64| us as f64 / 1000.0;
        let latency = &self.latency_us;
        let mut errors = self.errors;
        errors.total = errors.by_status.values().sum::<u64>()
            + errors.transport
            + errors.timeouts
            + errors.invalid_keys;
        ReplayReport {
            target,
            requests: self.requests,
            elapsed_secs: elapsed.as_secs_f64(),
            requests_per_sec: self.requests as f64 / elapsed.as_secs_f64().max(1e-9),
            latency_ms: LatencySummary {
                count: latency.len(),
                p50: ms(latency.value_at_quantile(0.50)),
                p90: ms(latency.value_at_quantile(0.90)),
                p99: ms(latency.value_at_quantile(0.99)),
                max: ms(latency.max()),
                mean: latency.mean() / 1000.0,
            },
            responses: self.responses,
            hits: self.hits,
            misses: self.misses,
            without_cache_status: self.without_cache_status,
            hit_ratio: ratio(self.hits, self.responses),
            bytes: self.bytes,
            hit_bytes: self.hit_bytes,
            byte_hit_ratio: ratio(self.hit_bytes, self.bytes),
            stored: self.stored,
            misses_by_reason: self.misses_by_reason.into_iter().collect(),
            errors,
        }
    }
}

impl fmt::Display for ReplayReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let percent = |ratio: f64| format!("{:.2}%", ratio * 100.0);
        writeln!(
            f,
            "replay of {} requests against {}",
            self.requests, self.target
        )?;
        writeln!(
            f,
            "  {:<22} {:.1} s, {:.0} requests/s",
            "duration", self.elapsed_secs, self.requests_per_sec
        )?;
        let l = &self.latency_ms;
        writeln!(
            f,
            "  {:<22} p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({} samples)",
            "latency", l.p50, l.p90, l.p99, l.max, l.count
        )?;
        writeln!(
            f,
            "  {:<22} {} of {} responses",
            "hit ratio",
            percent(self.hit_ratio),
            self.responses
        )?;
        writeln!(
            f,
            "  {:<22} {} of {} bytes",
            "byte hit ratio",
            percent(self.byte_hit_ratio),
            self.bytes
        )?;
        writeln!(
            f,
            "  {:<22} {} ({} stored)",
            "misses", self.misses, self.stored
        )?;
        for (reason, count) in &self.misses_by_reason {
            writeln!(f, "    {:<20} {}", reason, count)?;
        }
        if self.without_cache_status > 0 {
            writeln!(
                f,
                "  {:<22} {}",
                "no Cache-Status", self.without_cache_status
            )?;
        }
        let e = &self.errors;
        writeln!(f, "  {:<22} {}", "errors", e.total)?;
        for (status, count) in &e.by_status {
            writeln!(f, "    {:<20} {}", format!("status {status}"), count)?;
        }
        for (kind, count) in [
            ("transport", e.transport),
            ("timeout", e.timeouts),
            ("invalid key", e.invalid_keys),
        ] {
            if count > 0 {
                writeln!(f, "    {:<20} {}", kind, count)?;
            }
        }
        Ok(())
    }
}
