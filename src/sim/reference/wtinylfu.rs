//! W-TinyLFU (Einziger et al., "TinyLFU", ACM ToS 2017) as libCacheSim's `WTinyLFU.c` runs it: a
//! window LRU of 1% of the bytes in front of a segmented LRU main (a probationary fifth and a
//! protected rest), and a frequency count per object that decides, when main is full, whether the
//! window's oldest object takes the place of main's victim.
//!
//! libCacheSim's counting Bloom filter is sized for as many keys as main has bytes, so its counts
//! are exact in practice: here they are exact. The window does not adapt (Caffeine's climbs), there
//! is no doorkeeper (the paper's), and an object larger than the window is never stored.

use crate::admission::probation::Segment;

use super::super::list::IdQueues;
use super::Access;

const WINDOW: usize = 0;
const PROBATIONARY: usize = 1;
const PROTECTED: usize = 2;
/// libCacheSim's defaults: `window-size=0.01`, main an SLRU of `seg-size=1:4`.
const WINDOW_SHARE: f64 = 0.01;
const PROBATIONARY_SHARE: f64 = 0.2;
/// Counts are halved after this many main hits per byte of main (libCacheSim's sample size).
const SAMPLE_PER_BYTE: u64 = 32;

pub struct WTinyLfu {
    total: u64,
    window: u64,
    main: u64,
    segments: [u64; 3],
    queues: IdQueues<3>,
    counts: Vec<u32>,
    main_hits: u64,
}

impl WTinyLfu {
    pub fn new(total: u64) -> WTinyLfu {
        let window = (total as f64 * WINDOW_SHARE) as u64;
        let main = total - window;
        let probationary = (PROBATIONARY_SHARE * main as f64) as u64;
        let protected = ((1.0 - PROBATIONARY_SHARE) * main as f64) as u64;
        WTinyLfu {
            total,
            window,
            main,
            segments: [window, probationary, protected],
            queues: IdQueues::new(),
            counts: Vec::new(),
            main_hits: 0,
        }
    }

    pub fn counted_objects(&self) -> u64 {
        self.counts.len() as u64
    }

    #[inline]
    pub fn prefetch(&self, id: u32) {
        self.queues.prefetch(id);
    }

    pub fn get(&mut self, id: u32, size: u64) -> Access {
        let index = id as usize;
        if index >= self.counts.len() {
            self.counts.resize(index + 1, 0);
        }
        let mut access = Access::default();
        match self.queues.queue_of(id) {
            Some(WINDOW) => {
                self.queues.move_to_head(WINDOW, id);
                access.hit = true;
                return access;
            }
            Some(queue) => {
                if queue == PROTECTED {
                    self.queues.move_to_head(PROTECTED, id);
                } else {
                    self.queues.move_to_head(PROTECTED, id);
                    while self.queues.bytes(PROTECTED) > self.segments[PROTECTED] {
                        self.cool(&mut access);
                    }
                }
                self.count(id);
                self.main_hits += 1;
                if self.main_hits >= SAMPLE_PER_BYTE * self.main {
                    self.main_hits = 0;
                    self.counts.iter_mut().for_each(|count| *count >>= 1);
                }
                access.hit = true;
                return access;
            }
            None => {}
        }
        if size > self.total || size > self.window || size > self.segments[PROBATIONARY] {
            access.refused = true;
            return access;
        }
        while self.bytes() + size > self.total {
            self.evict(&mut access);
        }
        self.queues.push_head(WINDOW, id, size);
        self.count(id);
        access.stored = Some(Segment::Probation);
        access
    }

    fn bytes(&self) -> u64 {
        self.queues.bytes(WINDOW) + self.main_bytes()
    }

    fn main_bytes(&self) -> u64 {
        self.queues.bytes(PROBATIONARY) + self.queues.bytes(PROTECTED)
    }

    fn count(&mut self, id: u32) {
        let count = &mut self.counts[id as usize];
        *count = count.saturating_add(1);
    }

    /// Moves window objects into main, oldest first, until one is dropped: into free room while
    /// main has it, then in place of main's victim when counted more often than it.
    fn evict(&mut self, access: &mut Access) {
        while let Some(candidate) = self.queues.tail(WINDOW) {
            let size = self.queues.size_of(candidate);
            let admit = if self.main_bytes() + size <= self.main {
                true
            } else {
                match self.main_victim() {
                    Some(victim)
                        if self.counts[candidate as usize] > self.counts[victim as usize] =>
                    {
                        self.evict_main(access);
                        true
                    }
                    _ => false,
                }
            };
            self.queues.remove(candidate);
            let dropped = !admit;
            if admit {
                self.insert_main(candidate, size, access);
                access.promotions += 1;
                access.promoted_bytes += size;
            } else {
                access.evictions += 1;
            }
            self.count(candidate);
            if dropped {
                return;
            }
        }
        self.evict_main(access);
    }

    /// Main's next victim: the oldest probationary object, else the oldest protected one.
    fn main_victim(&self) -> Option<u32> {
        self.queues
            .tail(PROBATIONARY)
            .or_else(|| self.queues.tail(PROTECTED))
    }

    fn evict_main(&mut self, access: &mut Access) {
        if let Some(victim) = self.main_victim() {
            self.queues.remove(victim);
            access.evictions += 1;
        }
    }

    /// Stores an object in main: in the first segment with room for it, else in probationary after
    /// evicting from main until it fits.
    fn insert_main(&mut self, id: u32, size: u64, access: &mut Access) {
        let room = [PROBATIONARY, PROTECTED]
            .into_iter()
            .find(|&segment| self.queues.bytes(segment) + size <= self.segments[segment]);
        let segment = match room {
            Some(segment) => segment,
            None => {
                while self.main_bytes() + size > self.main {
                    self.evict_main(access);
                }
                PROBATIONARY
            }
        };
        self.queues.push_head(segment, id, size);
    }

    /// Moves protected's oldest object to the head of probationary, evicting probationary's
    /// oldest while it is over its share.
    fn cool(&mut self, access: &mut Access) {
        if let Some(oldest) = self.queues.tail(PROTECTED) {
            self.queues.move_to_head(PROBATIONARY, oldest);
        }
        while self.queues.bytes(PROBATIONARY) > self.segments[PROBATIONARY] {
            self.evict_main(access);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn main_takes_the_window_while_it_has_room_then_only_the_more_counted() {
        // Window 100 bytes; main 9,900 bytes: probationary 1,980, protected 7,920.
        let mut cache = WTinyLfu::new(10_000);
        for id in 0..100 {
            assert_eq!(cache.get(id, 100).stored, Some(Segment::Probation));
        }
        // Full: making room for 100 moves the window's oldest into main while main has room;
        // then 99, counted once, loses to main's victim, counted twice (its miss, its move).
        let access = cache.get(100, 100);
        assert_eq!(access.promotions, 99);
        assert_eq!(cache.queues.queue_of(99), None);
        assert_eq!(cache.queues.queue_of(100), Some(WINDOW));
        assert!(cache.bytes() <= 10_000);
    }

    #[test]
    fn a_hit_in_probationary_moves_an_object_to_protected() {
        let mut cache = WTinyLfu::new(10_000);
        for id in 0..101 {
            cache.get(id, 100);
        }
        let probationary = cache.queues.tail(PROBATIONARY).expect("main holds objects");
        assert!(cache.get(probationary, 100).hit);
        assert_eq!(cache.queues.queue_of(probationary), Some(PROTECTED));
    }

    #[test]
    fn bytes_stay_within_the_budget() {
        let mut cache = WTinyLfu::new(10_000);
        let mut step = 0u32;
        for _ in 0..50_000 {
            step = step.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            cache.get(step % 700, u64::from(step % 10 + 1) * 10);
            assert!(cache.bytes() <= 10_000);
            assert!(cache.queues.bytes(PROTECTED) <= cache.segments[PROTECTED]);
        }
    }

    #[test]
    fn objects_larger_than_the_window_are_refused() {
        let mut cache = WTinyLfu::new(10_000);
        assert!(cache.get(0, 101).refused);
        assert!(!cache.get(0, 100).refused);
    }
}
