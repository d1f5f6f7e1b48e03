//! Handles of the metric series every request touches, registered once.
//!
//! `counter!(NAME, "label" => value)` looks its series up in the exporter's registry on every call
//! (hashing the name and labels): 2.2% of a 1 KiB hit's CPU (`docs/decisions.md`, metric handles).
//! A handle is an `Arc` to the series' atomic, so incrementing it is one atomic add.

use std::sync::OnceLock;

use metrics::{Counter, Histogram, counter, histogram};

use super::decision::Decision;
use super::origin::OUTCOMES;
use super::status::Outcome;
use crate::telemetry::{
    ADMISSION_TOTAL, CACHE_HIT_BYTES_TOTAL, CACHED_ERRORS_TOTAL, ORIGIN_BYTES_TOTAL,
    ORIGIN_REQUESTS_TOTAL, REQUEST_DURATION_SECONDS, REQUESTS_TOTAL, recorder,
};

pub struct Series {
    /// `bloomgate_requests_total{cache_status}`, in the order of [`Outcome::ALL`].
    requests: [Counter; Outcome::ALL.len()],
    pub duration: Histogram,
    pub hit_bytes: Counter,
    /// `bloomgate_admission_total{decision}`, in the order of [`Decision::LABELS`].
    admission: [Counter; Decision::LABELS.len()],
    /// `bloomgate_origin_requests_total{outcome}`, in the order of [`OUTCOMES`].
    origin: [Counter; OUTCOMES.len()],
    /// Counted per body chunk.
    pub origin_bytes: Counter,
    /// `bloomgate_cached_errors_total{served}`, in the order of [`CACHED_ERRORS`].
    cached_errors: [Counter; CACHED_ERRORS.len()],
}

/// The labels of `bloomgate_cached_errors_total{served}`: an error status served from the cache,
/// or stored from the origin.
pub const CACHED_ERRORS: [&str; 2] = ["hit", "stored"];

impl Series {
    pub fn request(&self, outcome: Outcome) -> &Counter {
        &self.requests[outcome as usize]
    }

    pub fn admission(&self, decision: Decision) -> &Counter {
        &self.admission[index_of(&Decision::LABELS, decision.label())]
    }

    pub fn cached_error(&self, served: &str) -> &Counter {
        &self.cached_errors[index_of(&CACHED_ERRORS, served)]
    }

    pub fn origin(&self, outcome: &str) -> &Counter {
        &self.origin[index_of(&OUTCOMES, outcome)]
    }
}

/// Where `label` is in `labels`. Every label passed here is one of them (the unit tests here and in
/// `origin.rs` check the labels the code produces); a debug build stops on one that is not,
/// rather than counting it under the first series.
fn index_of(labels: &[&str], label: &str) -> usize {
    let index = labels.iter().position(|known| *known == label);
    debug_assert!(index.is_some(), "{label:?} is not one of {labels:?}");
    index.unwrap_or(0)
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
            admission: Decision::LABELS.map(|label| counter!(ADMISSION_TOTAL, "decision" => label)),
            origin: std::array::from_fn(
                |i| counter!(ORIGIN_REQUESTS_TOTAL, "outcome" => OUTCOMES[i]),
            ),
            origin_bytes: counter!(ORIGIN_BYTES_TOTAL),
            cached_errors: CACHED_ERRORS
                .map(|served| counter!(CACHED_ERRORS_TOTAL, "served" => served)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_index_their_own_series() {
        for (index, outcome) in Outcome::ALL.into_iter().enumerate() {
            assert_eq!(outcome as usize, index, "{outcome:?}");
        }
    }

    #[test]
    fn every_label_finds_its_own_series() {
        for labels in [&OUTCOMES[..], &Decision::LABELS[..], &CACHED_ERRORS[..]] {
            for (index, label) in labels.iter().enumerate() {
                assert_eq!(index_of(labels, label), index, "{label}");
            }
        }
    }

    #[test]
    fn every_decision_has_its_own_label() {
        use crate::cache::NotStored;
        for decision in [
            Decision::Admitted,
            Decision::Probation,
            Decision::FirstHit,
            Decision::NotStorable(NotStored::TooLarge),
            Decision::NotStorable(NotStored::NoStore),
        ] {
            assert!(Decision::LABELS.contains(&decision.label()), "{decision:?}");
        }
    }
}
