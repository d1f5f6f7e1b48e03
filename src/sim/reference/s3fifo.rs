//! S3-FIFO (Yang et al., SOSP 2023) as libCacheSim's `S3FIFO.c` runs it: a small FIFO of 10% of
//! the bytes, a main FIFO of the rest, and a ghost FIFO of 90% of the bytes remembering what the
//! small FIFO dropped.

use crate::admission::probation::Segment;

use super::super::list::IdQueues;
use super::Access;

const SMALL: usize = 0;
const MAIN: usize = 1;
/// libCacheSim's defaults (`fifo-size-ratio=0.10,ghost-size-ratio=0.90,move-to-main-threshold=2`).
const SMALL_SHARE: f64 = 0.1;
const GHOST_SHARE: f64 = 0.9;
/// Hits in the small FIFO that move an object to main when it reaches the small FIFO's end.
const MOVE_TO_MAIN: u8 = 2;
/// The most uses main's reinsertion remembers (a 2-bit counter).
const MAX_MAIN_USES: u8 = 3;

pub struct S3Fifo {
    total: u64,
    small: u64,
    main: u64,
    ghost_capacity: u64,
    queues: IdQueues<2>,
    ghost: IdQueues<1>,
    ghost_peak: u64,
    uses: Vec<u8>,
}

impl S3Fifo {
    pub fn new(total: u64) -> S3Fifo {
        // libCacheSim truncates the cache size before multiplying (`(int64_t)size * ratio`).
        let small = (total as f64 * SMALL_SHARE) as u64;
        S3Fifo {
            total,
            small,
            main: total - small,
            ghost_capacity: (total as f64 * GHOST_SHARE) as u64,
            queues: IdQueues::new(),
            ghost: IdQueues::new(),
            ghost_peak: 0,
            uses: Vec::new(),
        }
    }

    pub fn ghost_peak_entries(&self) -> u64 {
        self.ghost_peak
    }

    #[inline]
    pub fn prefetch(&self, id: u32) {
        self.queues.prefetch(id);
    }

    pub fn get(&mut self, id: u32, size: u64) -> Access {
        let index = id as usize;
        if index >= self.uses.len() {
            self.uses.resize(index + 1, 0);
        }
        let mut access = Access::default();
        if self.queues.queue_of(id).is_some() {
            self.uses[index] = self.uses[index].saturating_add(1);
            access.hit = true;
            return access;
        }
        let ghost_hit = self.ghost.remove(id).is_some();
        // libCacheSim refuses what the small FIFO cannot hold, even for main.
        if size > self.small {
            access.refused = true;
            return access;
        }
        while self.queues.bytes(SMALL) + self.queues.bytes(MAIN) + size > self.total {
            self.evict(&mut access);
        }
        if ghost_hit {
            self.queues.push_head(MAIN, id, size);
            access.stored = Some(Segment::Main);
        } else if size >= self.small {
            // libCacheSim's insert refuses an object exactly the small FIFO's size, after making room.
            access.refused = true;
            return access;
        } else {
            self.queues.push_head(SMALL, id, size);
            access.stored = Some(Segment::Probation);
        }
        self.uses[index] = 0;
        access
    }

    fn evict(&mut self, access: &mut Access) {
        if self.queues.bytes(MAIN) > self.main || self.queues.bytes(SMALL) == 0 {
            self.evict_main(access);
        } else {
            self.evict_small(access);
        }
    }

    /// Takes small FIFO entries from its end until one leaves the cache: those hit often enough
    /// move to main, the first other one goes to the ghost.
    fn evict_small(&mut self, access: &mut Access) {
        while let Some(id) = self.queues.tail(SMALL) {
            let size = self.queues.remove(id).unwrap_or(0);
            if self.uses[id as usize] >= MOVE_TO_MAIN {
                self.uses[id as usize] = 0;
                self.queues.push_head(MAIN, id, size);
                access.promotions += 1;
                access.promoted_bytes += size;
            } else {
                self.remember(id, size);
                access.evictions += 1;
                return;
            }
        }
    }

    /// Takes main entries from its end until one leaves: a used one goes round again with a use less.
    fn evict_main(&mut self, access: &mut Access) {
        while let Some(id) = self.queues.tail(MAIN) {
            let uses = self.uses[id as usize];
            if uses >= 1 {
                self.uses[id as usize] = uses.min(MAX_MAIN_USES) - 1;
                self.queues.move_to_head(MAIN, id);
            } else {
                self.queues.remove(id);
                access.evictions += 1;
                return;
            }
        }
    }

    /// Puts a dropped object in the ghost FIFO, which forgets its oldest entries to fit it.
    fn remember(&mut self, id: u32, size: u64) {
        if size > self.ghost_capacity {
            return;
        }
        while self.ghost.bytes(0) + size > self.ghost_capacity {
            match self.ghost.tail(0) {
                Some(oldest) => self.ghost.remove(oldest),
                None => break,
            };
        }
        self.ghost.push_head(0, id, size);
        self.ghost_peak = self.ghost_peak.max(self.ghost.entries(0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_object_seen_again_goes_to_main() {
        let mut cache = S3Fifo::new(1000);
        // Everything enters the small FIFO until the cache is full; the eleventh object makes room
        // by dropping the oldest, unhit, into the ghost.
        for id in 0..11 {
            assert_eq!(cache.get(id, 95).stored, Some(Segment::Probation));
        }
        assert_eq!(cache.ghost.queue_of(0), Some(0));
        assert_eq!(cache.get(0, 95).stored, Some(Segment::Main));
        assert!(cache.get(0, 95).hit);
    }

    #[test]
    fn two_hits_in_small_move_an_object_to_main() {
        let mut cache = S3Fifo::new(1000);
        for id in 0..10 {
            cache.get(id, 95);
        }
        assert!(cache.get(0, 95).hit && cache.get(0, 95).hit && cache.get(1, 95).hit);
        // Making room moves 0 (two hits) to main, and drops 1 (one hit) into the ghost.
        let access = cache.get(10, 95);
        assert_eq!(
            (access.promotions, access.promoted_bytes, access.evictions),
            (1, 95, 1)
        );
        assert_eq!(cache.queues.queue_of(0), Some(MAIN));
        assert_eq!(cache.ghost.queue_of(1), Some(0));
    }

    #[test]
    fn bytes_stay_within_the_budget() {
        let mut cache = S3Fifo::new(10_000);
        let mut step = 0u32;
        for _ in 0..50_000 {
            step = step.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            cache.get(step % 700, u64::from(step % 97 + 1) * 10);
            assert!(cache.queues.bytes(SMALL) + cache.queues.bytes(MAIN) <= 10_000);
            assert!(cache.ghost.bytes(0) <= 9_000);
        }
    }

    #[test]
    fn objects_the_small_fifo_cannot_hold_are_refused() {
        let mut cache = S3Fifo::new(1000);
        assert!(cache.get(0, 101).refused);
        assert!(cache.get(0, 100).refused);
        assert!(!cache.get(0, 100).hit);
    }
}
