//! Probation admission: where a storable miss is stored, and what becomes of an entry when its
//! segment needs room. The rules of S3-FIFO (Yang et al., "FIFO queues are all you need for cache
//! eviction", SOSP 2023) with the doorkeeper as its ghost queue; no HTTP here, so the proxy's store
//! and the simulator's model apply exactly the same rules.
//!
//! The cache has two segments over one byte budget. **Probation** is a FIFO: a first-seen object
//! is stored there; a hit marks it; when probation must give up its oldest entry, a marked one moves
//! to main (a promotion, no origin fetch) and an unmarked one is dropped: it was a one-hit wonder, and
//! since its key is in the doorkeeper, a later request for it goes straight to main. **Main** is a
//! FIFO whose entries carry a use counter (0 to [`MAX_USES`]), raised by hits: the oldest entry is
//! reinserted at the back with one use less while it has any, and evicted otherwise.
//!
//! Which segment gives up an entry: main, while it holds more than its share of the budget or
//! probation is empty; probation otherwise. So probation is held to its share once main is full, and
//! until then may use what main does not (as libCacheSim's S3-FIFO does).
//!
//! Main, once full, takes an object only in place of one asked for less often (TinyLFU's rule,
//! [`displaces`], with counts from [`super::frequency::FrequencySketch`] raised on storable
//! misses, never on hits): a promotion that loses is dropped, and a seen-before miss that loses
//! goes to probation instead of main, where a hit can still earn it a place. So a scan of keys
//! seen once before does not flush main, and main is written half as much.

pub use bloomgate_admission::Mode;

use super::Admission;

/// The most uses an entry of main remembers (S3-FIFO's 2-bit counter).
pub const MAX_USES: u8 = 3;

/// A segment of the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Segment {
    Probation,
    Main,
}

impl Segment {
    pub const ALL: [Segment; 2] = [Segment::Probation, Segment::Main];

    /// Its name in metric labels and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Segment::Probation => "probation",
            Segment::Main => "main",
        }
    }

    /// Its index in per-segment arrays (`[probation, main]`).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Where a storable response goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    Store(Segment),
    /// Not stored: first seen, and the mode (or the probation segment's size) keeps it out.
    FirstHit,
    /// Not stored: larger than the segment it would go to.
    TooLarge,
}

/// What becomes of the oldest entry of a segment that must give up room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leaving {
    /// From probation to the back of main, its uses forgotten.
    Promote,
    /// Back to the back of main with this many uses.
    Reinsert(u8),
    /// Out of the cache.
    Drop,
}

/// One byte budget split into probation and main.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    total: u64,
    probation: u64,
}

impl Budget {
    /// `total` bytes, of which probation is held to `probation_share` (in `[0, 1]`) once main is full.
    pub fn new(total: u64, probation_share: f64) -> Budget {
        let share = if probation_share.is_finite() {
            probation_share.clamp(0.0, 1.0)
        } else {
            0.0
        };
        Budget {
            total,
            probation: (total as f64 * share) as u64,
        }
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// Probation's share in bytes: also the largest object probation takes.
    pub fn probation(&self) -> u64 {
        self.probation
    }

    /// Main's share in bytes.
    pub fn main(&self) -> u64 {
        self.total - self.probation
    }

    /// Where a storable response of `size` bytes goes. `admission` is the doorkeeper's answer
    /// (`None` when the mode does not ask it); `revalidated` marks a refetch of a stored object,
    /// which was admitted when it was first stored.
    pub fn place(
        &self,
        mode: Mode,
        admission: Option<Admission>,
        revalidated: bool,
        size: u64,
    ) -> Placement {
        let first_seen = !revalidated && admission == Some(Admission::FirstSeen);
        let segment = match (mode, first_seen) {
            (Mode::Probation, true) if size > self.probation => return Placement::FirstHit,
            (Mode::Probation, true) => Segment::Probation,
            (Mode::SecondHit, true) => return Placement::FirstHit,
            _ => Segment::Main,
        };
        if size > self.total {
            Placement::TooLarge
        } else {
            Placement::Store(segment)
        }
    }

    /// Which segment gives up its oldest entry when the cache needs room, given the bytes each
    /// holds now.
    pub fn evict_from(&self, probation_bytes: u64, main_bytes: u64) -> Segment {
        if probation_bytes == 0 || main_bytes > self.main() {
            Segment::Main
        } else {
            Segment::Probation
        }
    }
}

/// What becomes of the oldest entry of `segment`, with `uses` hits recorded since it entered
/// (or was last reinserted), when the segment must give up room. `live` is false for an entry that
/// can no longer be served (expired): it is never kept.
pub fn leaving(segment: Segment, uses: u8, live: bool) -> Leaving {
    match segment {
        _ if !live || uses == 0 => Leaving::Drop,
        Segment::Probation => Leaving::Promote,
        Segment::Main => Leaving::Reinsert(uses.min(MAX_USES) - 1),
    }
}

/// TinyLFU's admission rule: whether an object counted `candidate` times takes the place of main's
/// oldest entry, counted `victim` times, when main is full.
pub fn displaces(candidate: u8, victim: u8) -> bool {
    candidate > victim
}

/// What a promotion from probation counts for [`displaces`]: its storable misses (`counted`, from
/// the sketch) and its hits while in probation (`uses`). TinyLFU counts every request; the sketch
/// sees misses only so that hits never touch it, and an entry's hits in probation are already kept
/// in its use counter.
pub fn promotion_count(counted: u8, uses: u8) -> u8 {
    counted.saturating_add(uses)
}

/// The uses after one more hit, saturating at [`MAX_USES`].
pub fn used(uses: u8) -> u8 {
    uses.saturating_add(1).min(MAX_USES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_seen_goes_to_probation_only_in_probation_mode_and_if_it_fits() {
        let budget = Budget::new(1000, 0.1);
        assert_eq!((budget.probation(), budget.main()), (100, 900));
        let first = Some(Admission::FirstSeen);
        let seen = Some(Admission::SeenBefore);
        let place = |mode, admission, size| budget.place(mode, admission, false, size);
        assert_eq!(
            place(Mode::Probation, first, 100),
            Placement::Store(Segment::Probation)
        );
        assert_eq!(place(Mode::Probation, first, 101), Placement::FirstHit);
        assert_eq!(
            place(Mode::Probation, seen, 101),
            Placement::Store(Segment::Main)
        );
        assert_eq!(place(Mode::SecondHit, first, 10), Placement::FirstHit);
        assert_eq!(
            place(Mode::SecondHit, seen, 10),
            Placement::Store(Segment::Main)
        );
        assert_eq!(
            place(Mode::Off, None, 1000),
            Placement::Store(Segment::Main)
        );
        assert_eq!(place(Mode::Off, None, 1001), Placement::TooLarge);
        assert_eq!(
            budget.place(Mode::SecondHit, first, true, 10),
            Placement::Store(Segment::Main),
            "a refetch of a stored object was admitted when it was first stored"
        );
    }

    #[test]
    fn main_gives_up_room_when_over_its_share_or_probation_is_empty() {
        let budget = Budget::new(1000, 0.1);
        assert_eq!(budget.evict_from(0, 500), Segment::Main);
        assert_eq!(budget.evict_from(50, 901), Segment::Main);
        assert_eq!(budget.evict_from(50, 900), Segment::Probation);
        assert_eq!(budget.evict_from(600, 300), Segment::Probation);
    }

    #[test]
    fn hit_entries_are_promoted_or_reinserted_and_the_others_dropped() {
        assert_eq!(leaving(Segment::Probation, 0, true), Leaving::Drop);
        assert_eq!(leaving(Segment::Probation, 2, true), Leaving::Promote);
        assert_eq!(leaving(Segment::Probation, 2, false), Leaving::Drop);
        assert_eq!(leaving(Segment::Main, 0, true), Leaving::Drop);
        assert_eq!(leaving(Segment::Main, 1, true), Leaving::Reinsert(0));
        assert_eq!(leaving(Segment::Main, 9, true), Leaving::Reinsert(2));
        assert_eq!(leaving(Segment::Main, 3, false), Leaving::Drop);
        assert_eq!(used(used(used(used(0)))), MAX_USES);
    }

    #[test]
    fn only_an_object_asked_for_more_often_displaces_mains_oldest() {
        assert!(displaces(3, 2));
        assert!(!displaces(2, 2));
        assert!(!displaces(0, 1));
    }

    #[test]
    fn a_promotions_hits_in_probation_count_beside_its_misses() {
        // Missed once and hit once: asked for more often than an oldest missed once.
        assert!(displaces(promotion_count(1, 1), 1));
        assert!(!displaces(promotion_count(1, 1), 2));
        assert_eq!(promotion_count(u8::MAX, MAX_USES), u8::MAX);
    }

    #[test]
    fn shares_out_of_range_are_clamped() {
        assert_eq!(Budget::new(1000, 2.0).probation(), 1000);
        assert_eq!(Budget::new(1000, -1.0).probation(), 0);
        assert_eq!(Budget::new(1000, f64::NAN).probation(), 0);
    }
}
