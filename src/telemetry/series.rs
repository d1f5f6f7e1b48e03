//! The metric series every request touches: each label set a fixed list, each series a handle
//! registered once.
//!
//! `counter!(NAME, "label" => value)` looks its series up in the exporter's registry on every call
//! (hashing the name and labels): 2.2% of a 1 KiB hit's CPU (`docs/decisions.md`, metric handles).
//! A handle is an `Arc` to the series' atomic, so incrementing it is one atomic add; a label is
//! an enum whose discriminant indexes its series.

use std::sync::OnceLock;

use metrics::{Counter, Histogram, counter, histogram};

use super::labels::{CachedError, DecisionLabel, OriginOutcome, Outcome, PurgeLabel};
use super::{
    ADMISSION_TOTAL, CACHE_HIT_BYTES_TOTAL, CACHED_ERRORS_TOTAL, ORIGIN_BYTES_TOTAL,
    ORIGIN_REQUESTS_TOTAL, PURGED_ENTRIES_TOTAL, PURGES_TOTAL, REQUEST_DURATION_SECONDS,
    REQUESTS_TOTAL, recorder,
};

/// The handles of the series the request path counts.
pub struct Series {
    /// `bloomgate_requests_total{cache_status}`, in the order of [`Outcome::ALL`].
    requests: [Counter; Outcome::ALL.len()],
    pub duration: Histogram,
    pub hit_bytes: Counter,
    /// `bloomgate_admission_total{decision}`, in the order of [`DecisionLabel::ALL`].
    admission: [Counter; DecisionLabel::ALL.len()],
    /// `bloomgate_origin_requests_total{outcome}`, in the order of [`OriginOutcome::ALL`].
    origin: [Counter; OriginOutcome::ALL.len()],
    /// Counted per body chunk.
    pub origin_bytes: Counter,
    /// `bloomgate_cached_errors_total{served}`, in the order of [`CachedError::ALL`].
    cached_errors: [Counter; CachedError::ALL.len()],
    /// `bloomgate_purges_total{kind}`, in the order of [`PurgeLabel::ALL`].
    purges: [Counter; PurgeLabel::ALL.len()],
    /// `bloomgate_purged_entries_total{kind}`, in the order of [`PurgeLabel::ALL`].
    purged_entries: [Counter; PurgeLabel::ALL.len()],
}

impl Series {
    pub fn request(&self, outcome: Outcome) -> &Counter {
        &self.requests[outcome as usize]
    }

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
}

/// The handles, made on first use. The recorder is installed first: a handle made before it would
/// count into nothing, for good.
pub fn series() -> &'static Series {
    static SERIES: OnceLock<Series> = OnceLock::new();
    SERIES.get_or_init(|| {
        let _ = recorder();
        Series {
            requests: Outcome::ALL
                .map(|outcome| counter!(REQUESTS_TOTAL, "cache_status" => outcome.as_str())),
            duration: histogram!(REQUEST_DURATION_SECONDS),
            hit_bytes: counter!(CACHE_HIT_BYTES_TOTAL),
            admission: DecisionLabel::ALL
                .map(|decision| counter!(ADMISSION_TOTAL, "decision" => decision.as_str())),
            origin: OriginOutcome::ALL
                .map(|outcome| counter!(ORIGIN_REQUESTS_TOTAL, "outcome" => outcome.as_str())),
            origin_bytes: counter!(ORIGIN_BYTES_TOTAL),
            cached_errors: CachedError::ALL
                .map(|served| counter!(CACHED_ERRORS_TOTAL, "served" => served.as_str())),
            purges: PurgeLabel::ALL.map(|kind| counter!(PURGES_TOTAL, "kind" => kind.as_str())),
            purged_entries: PurgeLabel::ALL
                .map(|kind| counter!(PURGED_ENTRIES_TOTAL, "kind" => kind.as_str())),
        }
    })
}
