//! The metric series every request touches: each label set a fixed list, each series a handle
//! registered once.
//!
//! `counter!(NAME, "label" => value)` looks its series up in the exporter's registry on every call
//! (hashing the name and labels): 2.2% of a 1 KiB hit's CPU (`docs/decisions.md`, metric handles).
//! A handle is an `Arc` to the series' atomic, so incrementing it is one atomic add; a label is
//! an enum whose discriminant indexes its series.

use std::sync::OnceLock;

use metrics::{Counter, Histogram, counter, histogram};

use super::labels::{CachedError, DecisionLabel, OriginOutcome, Outcome, PurgeLabel, SliceEvent};
use super::{
    ADMISSION_TOTAL, CACHE_HIT_BYTES_TOTAL, CACHED_ERRORS_TOTAL, DISK_SENDFILE_BYTES_TOTAL,
    ORIGIN_BYTES_TOTAL, ORIGIN_REQUESTS_TOTAL, PURGED_ENTRIES_TOTAL, PURGES_TOTAL,
    REQUEST_DURATION_SECONDS, REQUESTS_TOTAL, SLICE_ORIGIN_BYTES_TOTAL, SLICES_TOTAL, recorder,
};

/// The series of one route (the `route` label): its requests by outcome, and the body bytes it
/// served from the cache and received from the origin. Made when the route is (at start and at
/// each reload) and held by it, so a request counts with one atomic add per series.
pub struct RouteSeries {
    /// `bloomgate_requests_total{cache_status, route}`, in the order of [`Outcome::ALL`].
    requests: [Counter; Outcome::ALL.len()],
    pub hit_bytes: Counter,
    /// Counted per body chunk.
    pub origin_bytes: Counter,
}

/// The `route` of a request refused before it was routed (no valid host or target): a value no
/// route's name can take.
pub const UNROUTED: &str = "(none)";

impl RouteSeries {
    pub fn new(route: &str) -> RouteSeries {
        let _ = recorder();
        let route = route.to_owned();
        RouteSeries {
            requests: Outcome::ALL.map(|outcome| {
                counter!(REQUESTS_TOTAL, "cache_status" => outcome.as_str(), "route" => route.clone())
            }),
            hit_bytes: counter!(CACHE_HIT_BYTES_TOTAL, "route" => route.clone()),
            origin_bytes: counter!(ORIGIN_BYTES_TOTAL, "route" => route),
        }
    }

    pub fn request(&self, outcome: Outcome) -> &Counter {
        &self.requests[outcome as usize]
    }

    /// The series of requests refused before they were routed.
    pub fn unrouted() -> &'static RouteSeries {
        static UNROUTED_SERIES: OnceLock<RouteSeries> = OnceLock::new();
        UNROUTED_SERIES.get_or_init(|| RouteSeries::new(UNROUTED))
    }
}

/// The handles of the series the request path counts.
pub struct Series {
    pub duration: Histogram,
    /// `bloomgate_admission_total{decision}`, in the order of [`DecisionLabel::ALL`].
    admission: [Counter; DecisionLabel::ALL.len()],
    /// `bloomgate_origin_requests_total{outcome}`, in the order of [`OriginOutcome::ALL`].
    origin: [Counter; OriginOutcome::ALL.len()],
    /// `bloomgate_cached_errors_total{served}`, in the order of [`CachedError::ALL`].
    cached_errors: [Counter; CachedError::ALL.len()],
    /// `bloomgate_purges_total{kind}`, in the order of [`PurgeLabel::ALL`].
    purges: [Counter; PurgeLabel::ALL.len()],
    /// `bloomgate_purged_entries_total{kind}`, in the order of [`PurgeLabel::ALL`].
    purged_entries: [Counter; PurgeLabel::ALL.len()],
    /// `bloomgate_slices_total{event}`, in the order of [`SliceEvent::ALL`].
    slices: [Counter; SliceEvent::ALL.len()],
    pub slice_origin_bytes: Counter,
    /// `bloomgate_disk_sendfile_bytes_total`, counted per `sendfile`.
    pub disk_sendfile_bytes: Counter,
}

impl Series {
    pub fn admission(&self, decision: DecisionLabel) -> &Counter {
        &self.admission[decision as usize]
    }

    pub fn cached_error(&self, served: CachedError) -> &Counter {
        &self.cached_errors[served as usize]
    }

    pub fn origin(&self, outcome: OriginOutcome) -> &Counter {
        &self.origin[outcome as usize]
    }

    pub fn purge(&self, kind: PurgeLabel) -> &Counter {
        &self.purges[kind as usize]
    }

    pub fn purged_entry(&self, kind: PurgeLabel) -> &Counter {
        &self.purged_entries[kind as usize]
    }

    pub fn slice(&self, event: SliceEvent) -> &Counter {
        &self.slices[event as usize]
    }
}

/// The handles, made on first use. The recorder is installed first: a handle made before it would
/// count into nothing, for good.
pub fn series() -> &'static Series {
    static SERIES: OnceLock<Series> = OnceLock::new();
    SERIES.get_or_init(|| {
        let _ = recorder();
        Series {
            duration: histogram!(REQUEST_DURATION_SECONDS),
            admission: DecisionLabel::ALL
                .map(|decision| counter!(ADMISSION_TOTAL, "decision" => decision.as_str())),
            origin: OriginOutcome::ALL
                .map(|outcome| counter!(ORIGIN_REQUESTS_TOTAL, "outcome" => outcome.as_str())),
            cached_errors: CachedError::ALL
                .map(|served| counter!(CACHED_ERRORS_TOTAL, "served" => served.as_str())),
            purges: PurgeLabel::ALL.map(|kind| counter!(PURGES_TOTAL, "kind" => kind.as_str())),
            purged_entries: PurgeLabel::ALL
                .map(|kind| counter!(PURGED_ENTRIES_TOTAL, "kind" => kind.as_str())),
            slices: SliceEvent::ALL.map(|event| counter!(SLICES_TOTAL, "event" => event.as_str())),
            slice_origin_bytes: counter!(SLICE_ORIGIN_BYTES_TOTAL),
            disk_sendfile_bytes: counter!(DISK_SENDFILE_BYTES_TOTAL),
        }
    })
}
