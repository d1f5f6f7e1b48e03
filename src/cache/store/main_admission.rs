//! Main's admission in the store: a candidate's count against main's oldest entry's, from the
//! frequency sketch (TinyLFU's rule, [`probation::displaces`]).

use crate::admission::frequency::FrequencySketch;
use crate::admission::probation::{self, Budget, Segment};

use super::queues::Queues;

/// What main's admission weighs for a candidate: its count, main's oldest entry's, and the room
/// main has left within its share.
#[derive(Clone, Copy)]
pub(super) struct MainAdmission {
    candidate: u8,
    /// `None`: main is empty.
    oldest: Option<u8>,
    room: u64,
}

impl MainAdmission {
    /// What main's admission weighs for `key`, as the queues stand.
    pub(super) fn of(
        frequency: &FrequencySketch,
        queues: &Queues,
        budget: Budget,
        key: &str,
    ) -> MainAdmission {
        MainAdmission {
            candidate: frequency.estimate(key),
            oldest: queues.fifo[Segment::Main.index()]
                .front()
                .map(|(oldest, _)| frequency.estimate(oldest.as_str())),
            room: budget
                .main()
                .saturating_sub(queues.usage.bytes[Segment::Main.index()]),
        }
    }

    /// Whether main takes the candidate, of `weight` bytes, with `uses` hits in probation (0 for
    /// a miss): it has room within its share, or the candidate was asked for more often than
    /// main's oldest ([`probation::promotion_count`], [`probation::displaces`]).
    pub(super) fn takes(self, uses: u8, weight: u64) -> bool {
        let count = probation::promotion_count(self.candidate, uses);
        weight <= self.room
            || self
                .oldest
                .is_none_or(|oldest| probation::displaces(count, oldest))
    }
}
