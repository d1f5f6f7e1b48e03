//! What became of an origin response fetched for the cache: stored (in main or probation), kept
//! out by admission, or not storable and why. Decided by the response phase (`request/decision.rs`),
//! said by `Served`, counted by `bloomgate_admission_total{decision}`.

use crate::admission::probation::{Budget, Segment};
use crate::cache::NotStored;
use crate::telemetry::DecisionLabel;

/// What became of an origin response: the label of `bloomgate_admission_total{decision}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Stored in main: seen before, a refetch of a stored object, or admission off.
    Admitted,
    /// First seen, stored in probation.
    Probation,
    /// Storable, but first seen and kept out (mode second-hit, or larger than probation): served
    /// and shared, not stored.
    FirstHit,
    /// Not storable, for this reason.
    NotStorable(NotStored),
}

impl Decision {
    pub fn label(self) -> DecisionLabel {
        match self {
            Decision::Admitted => DecisionLabel::Admitted,
            Decision::Probation => DecisionLabel::Probation,
            Decision::FirstHit => DecisionLabel::FirstHit,
            Decision::NotStorable(NotStored::TooLarge) => DecisionLabel::TooLarge,
            Decision::NotStorable(_) => DecisionLabel::NotStorable,
        }
    }

    /// The segment the response is stored in, if it is stored.
    pub fn segment(self) -> Option<Segment> {
        match self {
            Decision::Admitted => Some(Segment::Main),
            Decision::Probation => Some(Segment::Probation),
            _ => None,
        }
    }

    /// Why the response is not stored, if it is not.
    pub fn not_stored(self) -> Option<NotStored> {
        match self {
            Decision::Admitted | Decision::Probation => None,
            Decision::FirstHit => Some(NotStored::FirstHit),
            Decision::NotStorable(reason) => Some(reason),
        }
    }

    /// The largest body this decision stores, given the largest object the cache takes.
    pub fn size_limit(self, max_object_bytes: u64, budget: Budget) -> u64 {
        match self {
            Decision::Probation => max_object_bytes.min(budget.probation()),
            _ => max_object_bytes,
        }
    }

    /// The decision for a stored-to-be response whose body turned out larger than
    /// [`Self::size_limit`]: a first copy too large for probation is a first hit.
    pub fn too_large(self) -> Decision {
        match self {
            Decision::Probation => Decision::FirstHit,
            _ => Decision::NotStorable(NotStored::TooLarge),
        }
    }
}
