//! The metric series every request touches: each label set a fixed list, each series a handle
//! registered once.
//!
//! `counter!(NAME, "label" => value)` looks its series up in the exporter's registry on every call
//! (hashing the name and labels): 2.2% of a 1 KiB hit's CPU (`docs/decisions.md`, metric handles).
//! A handle is an `Arc` to the series' atomic, so incrementing it is one atomic add; a label is
//! an enum whose discriminant indexes its series.

use std::sync::OnceLock;

use http::StatusCode;
use metrics::{Counter, Histogram, counter, histogram};

use crate::cache::PurgeKind;
use crate::telemetry::{
    ADMISSION_TOTAL, CACHE_HIT_BYTES_TOTAL, CACHED_ERRORS_TOTAL, ORIGIN_BYTES_TOTAL,
    ORIGIN_REQUESTS_TOTAL, PURGED_ENTRIES_TOTAL, PURGES_TOTAL, REQUEST_DURATION_SECONDS,
    REQUESTS_TOTAL, SLICE_ORIGIN_BYTES_TOTAL, SLICES_TOTAL, recorder,
};

/// How a response counts in `bloomgate_requests_total{cache_status}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Hit,
    Stale,
    Collapsed,
    Revalidated,
    Miss,
    Pass,
    Error,
}

impl Outcome {
    /// Every outcome, registered at start so every series exists.
    pub const ALL: [Outcome; 7] = [
        Outcome::Hit,
        Outcome::Stale,
        Outcome::Collapsed,
        Outcome::Revalidated,
        Outcome::Miss,
        Outcome::Pass,
        Outcome::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Hit => "hit",
            Outcome::Stale => "stale",
            Outcome::Collapsed => "collapsed",
            Outcome::Revalidated => "revalidated",
            Outcome::Miss => "miss",
            Outcome::Pass => "pass",
            Outcome::Error => "error",
        }
    }
}

/// The labels of `bloomgate_admission_total{decision}`; the dashboard uses these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecisionLabel {
    Admitted,
    Probation,
    /// Counted by the store when an entry moves from probation to main.
    Promoted,
    FirstHit,
    NotStorable,
    TooLarge,
}

impl DecisionLabel {
    /// Every label, registered at start so every series exists.
    pub const ALL: [DecisionLabel; 6] = [
        DecisionLabel::Admitted,
        DecisionLabel::Probation,
        DecisionLabel::Promoted,
        DecisionLabel::FirstHit,
        DecisionLabel::NotStorable,
        DecisionLabel::TooLarge,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DecisionLabel::Admitted => "admitted",
            DecisionLabel::Probation => "probation",
            DecisionLabel::Promoted => "promoted",
            DecisionLabel::FirstHit => "first_hit",
            DecisionLabel::NotStorable => "not_storable",
            DecisionLabel::TooLarge => "too_large",
        }
    }
}

/// The labels of `bloomgate_cached_errors_total{served}`: an error status served from the cache,
/// or stored from the origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CachedError {
    Hit,
    Stored,
}

impl CachedError {
    /// Every label, registered at start so every series exists.
    pub const ALL: [CachedError; 2] = [CachedError::Hit, CachedError::Stored];

    pub fn as_str(self) -> &'static str {
        match self {
            CachedError::Hit => "hit",
            CachedError::Stored => "stored",
        }
    }
}

/// The labels of `bloomgate_origin_requests_total{outcome}`: the class of the origin's status, or
/// how it failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OriginOutcome {
    Status2xx,
    Status3xx,
    Status4xx,
    Status5xx,
    ConnectError,
    Timeout,
    TlsError,
    ProtocolError,
    /// The body failed after its head was forwarded.
    BodyError,
}

impl OriginOutcome {
    /// Every label, registered at start so every series exists.
    pub const ALL: [OriginOutcome; 9] = [
        OriginOutcome::Status2xx,
        OriginOutcome::Status3xx,
        OriginOutcome::Status4xx,
        OriginOutcome::Status5xx,
        OriginOutcome::ConnectError,
        OriginOutcome::Timeout,
        OriginOutcome::TlsError,
        OriginOutcome::ProtocolError,
        OriginOutcome::BodyError,
    ];

    /// The class of a status the origin answered with.
    pub fn of_status(status: StatusCode) -> OriginOutcome {
        match status.as_u16() {
            200..=299 => OriginOutcome::Status2xx,
            300..=399 => OriginOutcome::Status3xx,
            400..=499 => OriginOutcome::Status4xx,
            _ => OriginOutcome::Status5xx,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            OriginOutcome::Status2xx => "2xx",
            OriginOutcome::Status3xx => "3xx",
            OriginOutcome::Status4xx => "4xx",
            OriginOutcome::Status5xx => "5xx",
            OriginOutcome::ConnectError => "connect_error",
            OriginOutcome::Timeout => "timeout",
            OriginOutcome::TlsError => "tls_error",
            OriginOutcome::ProtocolError => "protocol_error",
            OriginOutcome::BodyError => "body_error",
        }
    }
}

/// The labels of `bloomgate_purges_total{kind}` and `bloomgate_purged_entries_total{kind}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PurgeLabel {
    Key,
    TagHard,
    TagSoft,
}

impl PurgeLabel {
    /// Every label, registered at start so every series exists.
    pub const ALL: [PurgeLabel; 3] = [PurgeLabel::Key, PurgeLabel::TagHard, PurgeLabel::TagSoft];

    pub fn of_tag(kind: PurgeKind) -> PurgeLabel {
        match kind {
            PurgeKind::Hard => PurgeLabel::TagHard,
            PurgeKind::Soft => PurgeLabel::TagSoft,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PurgeLabel::Key => "key",
            PurgeLabel::TagHard => "tag_hard",
            PurgeLabel::TagSoft => "tag_soft",
        }
    }
}

/// The labels of `bloomgate_slices_total{event}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SliceEvent {
    Stored,
    Hit,
    /// Refused by admission: the slice's first request.
    FirstHit,
    /// The origin answered a slice's range with the whole object.
    NotRanged,
    /// The origin's `Content-Range` was not the slice's.
    WrongRange,
    /// The slice was of another version of the object.
    Changed,
}

impl SliceEvent {
    /// Every label, registered at start so every series exists.
    pub const ALL: [SliceEvent; 6] = [
        SliceEvent::Stored,
        SliceEvent::Hit,
        SliceEvent::FirstHit,
        SliceEvent::NotRanged,
        SliceEvent::WrongRange,
        SliceEvent::Changed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SliceEvent::Stored => "stored",
            SliceEvent::Hit => "hit",
            SliceEvent::FirstHit => "first_hit",
            SliceEvent::NotRanged => "not_ranged",
            SliceEvent::WrongRange => "wrong_range",
            SliceEvent::Changed => "changed",
        }
    }
}

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
    /// `bloomgate_slices_total{event}`, in the order of [`SliceEvent::ALL`].
    slices: [Counter; SliceEvent::ALL.len()],
    pub slice_origin_bytes: Counter,
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
            slices: SliceEvent::ALL.map(|event| counter!(SLICES_TOTAL, "event" => event.as_str())),
            slice_origin_bytes: counter!(SLICE_ORIGIN_BYTES_TOTAL),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_indexes_its_own_series() {
        for (index, outcome) in Outcome::ALL.into_iter().enumerate() {
            assert_eq!(outcome as usize, index, "{outcome:?}");
        }
        for (index, decision) in DecisionLabel::ALL.into_iter().enumerate() {
            assert_eq!(decision as usize, index, "{decision:?}");
        }
        for (index, served) in CachedError::ALL.into_iter().enumerate() {
            assert_eq!(served as usize, index, "{served:?}");
        }
        for (index, outcome) in OriginOutcome::ALL.into_iter().enumerate() {
            assert_eq!(outcome as usize, index, "{outcome:?}");
        }
        for (index, kind) in PurgeLabel::ALL.into_iter().enumerate() {
            assert_eq!(kind as usize, index, "{kind:?}");
        }
    }

    #[test]
    fn every_decision_has_its_own_label() {
        use crate::cache::NotStored;
        use crate::proxy::request::decision::Decision;
        for decision in [
            Decision::Admitted,
            Decision::Probation,
            Decision::FirstHit,
            Decision::NotStorable(NotStored::TooLarge),
            Decision::NotStorable(NotStored::NoStore),
        ] {
            assert!(
                DecisionLabel::ALL.contains(&decision.label()),
                "{decision:?}"
            );
        }
    }
}
