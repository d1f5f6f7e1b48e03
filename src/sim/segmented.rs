//! The probation cache model over dense object ids: a probation FIFO and a main segment over one
//! byte budget, run by the same rules as the proxy's store ([`crate::admission::probation`]), with
//! the same frequency sketch ([`FrequencySketch`]) counting the stored misses.

use std::collections::VecDeque;

use crate::admission::frequency::FrequencySketch;
use crate::admission::probation::{self, Budget, Leaving, Segment};

use super::prefetch::prefetch;

/// How main picks its victim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum MainEviction {
    /// S3-FIFO's main: a FIFO whose entries are reinserted while their use counter is non-zero
    /// (what the proxy runs).
    Fifo,
    /// Least recently used, by bytes (for comparison).
    Lru,
}

const ABSENT: u8 = u8::MAX;
/// Keys the frequency sketch's hash, so that a run is reproducible.
const SKETCH_SEED: u64 = 0x5eed;
/// How far ahead of a queue's front its entries' nodes are prefetched while making room.
const EVICTION_PREFETCH: usize = 8;

#[derive(Clone, Copy)]
struct Node {
    size: u64,
    /// The ticket of the queue node that stands for this entry; older nodes for it are stale
    /// (an LRU main pushes a new node on every hit instead of moving the old one).
    ticket: u32,
    uses: u8,
    /// `ABSENT` or a [`Segment::index`].
    segment: u8,
}

const ABSENT_NODE: Node = Node {
    size: 0,
    ticket: 0,
    uses: 0,
    segment: ABSENT,
};

/// What one insert did besides storing its object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Evicted {
    /// Where the object went: probation instead of main when main would not take it.
    pub stored: Option<Segment>,
    /// Objects that left the cache.
    pub evictions: u64,
    /// Objects moved from probation to main, and their bytes.
    pub promotions: u64,
    pub promoted_bytes: u64,
}

/// A probation FIFO in front of a main segment. Every operation is O(1) amortised.
pub struct SegmentedCache {
    budget: Budget,
    main_eviction: MainEviction,
    nodes: Vec<Node>,
    queues: [VecDeque<(u32, u32)>; 2],
    bytes: [u64; 2],
    entries: [u64; 2],
    frequency: FrequencySketch,
}

impl SegmentedCache {
    pub fn new(budget: Budget, main_eviction: MainEviction) -> SegmentedCache {
        SegmentedCache {
            budget,
            main_eviction,
            nodes: Vec::new(),
            queues: [VecDeque::new(), VecDeque::new()],
            bytes: [0; 2],
            entries: [0; 2],
            frequency: FrequencySketch::for_budget(budget.total(), SKETCH_SEED),
        }
    }

    /// Bytes of the frequency sketch.
    pub fn sketch_bytes(&self) -> u64 {
        self.frequency.memory_bytes() as u64
    }

    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// Bytes held by a segment.
    pub fn bytes(&self, segment: Segment) -> u64 {
        self.bytes[segment.index()]
    }

    /// Objects held by a segment.
    pub fn entries(&self, segment: Segment) -> u64 {
        self.entries[segment.index()]
    }

    /// The segment holding `id`, if any.
    pub fn segment_of(&self, id: u32) -> Option<Segment> {
        match self.nodes.get(id as usize)?.segment {
            ABSENT => None,
            index => Some(Segment::ALL[index as usize]),
        }
    }

    #[inline]
    pub fn prefetch(&self, id: u32) {
        if let Some(node) = self.nodes.get(id as usize) {
            prefetch(node);
        }
    }

    /// Whether `id` is cached; if so the hit is recorded (a use, or for an LRU main a move to the
    /// back).
    pub fn touch(&mut self, id: u32) -> bool {
        let Some(node) = self.nodes.get_mut(id as usize) else {
            return false;
        };
        if node.segment == ABSENT {
            return false;
        }
        node.uses = probation::used(node.uses);
        if self.main_eviction == MainEviction::Lru && node.segment == Segment::Main as u8 {
            node.ticket = node.ticket.wrapping_add(1);
            self.queues[Segment::Main.index()].push_back((id, node.ticket));
        }
        true
    }

    /// Stores `id` (not cached) in `segment`, making room first, and counts the miss. The caller
    /// checked that it fits (with [`Budget::place`]). A miss for main goes to probation instead
    /// when main is full and its oldest entry was asked for at least as often.
    pub fn insert(&mut self, id: u32, size: u64, segment: Segment) -> Evicted {
        debug_assert!(size <= self.budget.total());
        self.frequency
            .increment(id, self.entries[0] + self.entries[1]);
        let segment = if segment == Segment::Main
            && size <= self.budget.probation()
            && !self.main_takes(id, size)
        {
            Segment::Probation
        } else {
            segment
        };
        let index = id as usize;
        if index >= self.nodes.len() {
            self.nodes.resize(index + 1, ABSENT_NODE);
        }
        debug_assert_eq!(self.nodes[index].segment, ABSENT, "insert of a cached id");
        let mut evicted = Evicted {
            stored: Some(segment),
            ..Evicted::default()
        };
        while self.bytes[0] + self.bytes[1] + size > self.budget.total() {
            self.make_room(&mut evicted);
        }
        let node = &mut self.nodes[index];
        node.size = size;
        node.uses = 0;
        node.ticket = node.ticket.wrapping_add(1);
        self.push(id, segment);
        evicted
    }

    /// Takes the oldest entry of the segment the budget names and promotes, reinserts or drops it.
    fn make_room(&mut self, evicted: &mut Evicted) {
        let from = self.budget.evict_from(self.bytes[0], self.bytes[1]);
        let Some((id, ticket)) = self.queues[from.index()].pop_front() else {
            unreachable!("the cache is over its budget, so the segment named holds bytes");
        };
        // The queue says which nodes the next evictions read: start loading one a few ahead.
        if let Some(&(ahead, _)) = self.queues[from.index()].get(EVICTION_PREFETCH) {
            prefetch(&self.nodes[ahead as usize]);
        }
        let node = self.nodes[id as usize];
        if node.ticket != ticket || node.segment != from as u8 {
            return; // a stale node of an LRU main
        }
        self.bytes[from.index()] -= node.size;
        self.entries[from.index()] -= 1;
        let uses = match self.main_eviction {
            // An LRU main keeps order by moving entries on hits, not by counting uses.
            MainEviction::Lru if from == Segment::Main => 0,
            _ => node.uses,
        };
        let leaving = match probation::leaving(from, uses, true) {
            Leaving::Promote if !self.main_takes_promotion(id, node.size, uses) => Leaving::Drop,
            leaving => leaving,
        };
        match leaving {
            Leaving::Promote => {
                evicted.promotions += 1;
                evicted.promoted_bytes += node.size;
                self.nodes[id as usize].uses = 0;
                self.push(id, Segment::Main);
            }
            Leaving::Reinsert(uses) => {
                self.nodes[id as usize].uses = uses;
                self.push(id, Segment::Main);
            }
            Leaving::Drop => {
                self.nodes[id as usize].segment = ABSENT;
                evicted.evictions += 1;
            }
        }
    }

    /// Whether main takes `id` of `size` bytes: it has room within its share, or `id` was asked
    /// for more often than main's oldest entry ([`probation::displaces`]).
    fn main_takes(&self, id: u32, size: u64) -> bool {
        self.main_admits(size, self.frequency.estimate(id))
    }

    /// [`Self::main_takes`] for a promotion from probation with `uses` hits there
    /// ([`probation::promotion_count`]).
    fn main_takes_promotion(&self, id: u32, size: u64, uses: u8) -> bool {
        let count = probation::promotion_count(self.frequency.estimate(id), uses);
        self.main_admits(size, count)
    }

    /// Whether main takes an object of `size` bytes counted `count` times.
    fn main_admits(&self, size: u64, count: u8) -> bool {
        if self.bytes[Segment::Main.index()] + size <= self.budget.main() {
            return true;
        }
        let oldest = self.queues[Segment::Main.index()]
            .iter()
            .find(|&&(id, ticket)| {
                let node = &self.nodes[id as usize];
                node.ticket == ticket && node.segment == Segment::Main as u8
            });
        oldest
            .is_none_or(|&(oldest, _)| probation::displaces(count, self.frequency.estimate(oldest)))
    }

    fn push(&mut self, id: u32, segment: Segment) {
        let node = &mut self.nodes[id as usize];
        node.segment = segment as u8;
        self.bytes[segment.index()] += node.size;
        self.entries[segment.index()] += 1;
        self.queues[segment.index()].push_back((id, node.ticket));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache() -> SegmentedCache {
        SegmentedCache::new(Budget::new(1000, 0.1), MainEviction::Fifo)
    }

    #[test]
    fn an_unhit_probation_entry_is_dropped_and_a_hit_one_promoted() {
        let mut cache = cache();
        cache.insert(0, 500, Segment::Main);
        cache.insert(1, 60, Segment::Probation);
        cache.insert(2, 40, Segment::Probation);
        assert!(cache.touch(2));
        // Main is under its share, so probation gives up room: 1 (unhit) goes, then 2 is
        // promoted, which frees nothing, and with probation empty main gives up 0.
        let evicted = cache.insert(3, 500, Segment::Probation);
        assert_eq!(
            evicted,
            Evicted {
                stored: Some(Segment::Probation),
                evictions: 2,
                promotions: 1,
                promoted_bytes: 40
            }
        );
        assert_eq!(cache.segment_of(0), None);
        assert_eq!(cache.segment_of(1), None);
        assert_eq!(cache.segment_of(2), Some(Segment::Main));
        assert_eq!(cache.segment_of(3), Some(Segment::Probation));
    }

    #[test]
    fn a_full_main_takes_only_what_was_asked_for_more_often_than_its_oldest() {
        let mut cache = cache();
        for id in 0..10 {
            // Each asked for twice (missed twice) before main took it.
            cache.frequency.increment(id, 10);
            cache.insert(id, 90, Segment::Main);
        }
        // Main holds its share (900 bytes). 11 is asked for twice too (a miss, then a hit in
        // probation), as often as main's oldest (0): when probation gives up room, 11 is dropped
        // rather than promoted.
        cache.insert(11, 60, Segment::Probation);
        assert!(cache.touch(11));
        let evicted = cache.insert(12, 60, Segment::Probation);
        assert_eq!((evicted.promotions, evicted.evictions), (0, 1));
        assert_eq!(cache.segment_of(11), None);
        // Asked for three times (a miss and two hits), 13 is promoted in place of main's oldest.
        cache.insert(13, 30, Segment::Probation);
        assert!(cache.touch(13));
        assert!(cache.touch(13));
        // Making room for 14 drops 12 (unhit), then promotes 13, then main gives up its oldest.
        let evicted = cache.insert(14, 100, Segment::Probation);
        assert_eq!((evicted.promotions, evicted.evictions), (1, 2));
        assert_eq!(cache.segment_of(13), Some(Segment::Main));
    }

    #[test]
    fn a_seen_before_miss_that_a_full_main_would_not_take_waits_in_probation() {
        let mut cache = cache();
        for id in 0..10 {
            cache.insert(id, 90, Segment::Main);
        }
        let evicted = cache.insert(10, 50, Segment::Main);
        assert_eq!(evicted.stored, Some(Segment::Probation));
        assert_eq!(cache.segment_of(10), Some(Segment::Probation));
        cache.frequency.increment(11, 10);
        assert_eq!(
            cache.insert(11, 50, Segment::Main).stored,
            Some(Segment::Main)
        );
    }

    #[test]
    fn main_reinserts_used_entries_and_evicts_the_others() {
        let mut cache = cache();
        for id in 0..9 {
            cache.insert(id, 100, Segment::Main);
        }
        assert!(cache.touch(0));
        // Asked for more often than main's entries, 9 and 10 are taken by main, which is full
        // and probation empty, so main gives up room: 0 has a use and goes round again.
        cache.frequency.increment(9, 10);
        cache.insert(9, 100, Segment::Main);
        cache.frequency.increment(10, 10);
        let evicted = cache.insert(10, 100, Segment::Main);
        assert_eq!(evicted.stored, Some(Segment::Main));
        assert_eq!(evicted.evictions, 1);
        assert_eq!(cache.segment_of(0), Some(Segment::Main), "reinserted");
        assert_eq!(cache.segment_of(1), None, "the oldest unused entry");
    }

    #[test]
    fn bytes_stay_within_the_budget_and_add_up() {
        let mut cache = cache();
        let mut step = 0u32;
        for round in 0..20_000u32 {
            step = step.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let id = step % 500;
            let size = u64::from(step % 97 + 1);
            if !cache.touch(id) {
                let segment = if round % 3 == 0 {
                    Segment::Main
                } else {
                    Segment::Probation
                };
                cache.insert(id, size, segment);
            }
            let total = cache.bytes(Segment::Probation) + cache.bytes(Segment::Main);
            assert!(total <= 1000, "over budget: {total}");
        }
        let mut by_segment = [0u64; 2];
        for id in 0..500 {
            if let Some(segment) = cache.segment_of(id) {
                by_segment[segment.index()] += cache.nodes[id as usize].size;
            }
        }
        assert_eq!(
            by_segment,
            [cache.bytes(Segment::Probation), cache.bytes(Segment::Main)]
        );
    }
}
