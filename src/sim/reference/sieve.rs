//! SIEVE (Zhang et al., NSDI 2024) as libCacheSim's `Sieve.c` runs it: one FIFO with a visited bit
//! per object and a hand that walks from the oldest towards the newest, clearing bits, and evicts
//! the first unvisited object it meets.

use crate::admission::probation::Segment;

use super::super::list::IdQueues;
use super::Access;

pub struct Sieve {
    capacity: u64,
    queue: IdQueues<1>,
    visited: Vec<bool>,
    /// The next object the hand looks at; `None`: the oldest.
    hand: Option<u32>,
}

impl Sieve {
    pub fn new(capacity: u64) -> Sieve {
        Sieve {
            capacity,
            queue: IdQueues::new(),
            visited: Vec::new(),
            hand: None,
        }
    }

    #[inline]
    pub fn prefetch(&self, id: u32) {
        self.queue.prefetch(id);
    }

    pub fn get(&mut self, id: u32, size: u64) -> Access {
        let index = id as usize;
        if index >= self.visited.len() {
            self.visited.resize(index + 1, false);
        }
        let mut access = Access::default();
        if self.queue.queue_of(id).is_some() {
            self.visited[index] = true;
            access.hit = true;
            return access;
        }
        if size > self.capacity {
            access.refused = true;
            return access;
        }
        while self.queue.bytes(0) + size > self.capacity {
            self.evict();
            access.evictions += 1;
        }
        self.queue.push_head(0, id, size);
        self.visited[index] = false;
        access.stored = Some(Segment::Main);
        access
    }

    fn evict(&mut self) {
        let Some(mut id) = self.hand.or_else(|| self.queue.tail(0)) else {
            unreachable!("the cache is over its budget, so it holds an object");
        };
        while self.visited[id as usize] {
            self.visited[id as usize] = false;
            id = match self.queue.newer(id).or_else(|| self.queue.tail(0)) {
                Some(next) => next,
                None => unreachable!("the object the hand left is still queued"),
            };
        }
        self.hand = self.queue.newer(id);
        self.queue.remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hand_spares_visited_objects_once() {
        let mut cache = Sieve::new(300);
        for id in 0..3 {
            cache.get(id, 100);
        }
        assert!(cache.get(0, 100).hit);
        // 0 was visited: the hand clears it and evicts 1.
        assert_eq!(cache.get(3, 100).evictions, 1);
        assert!(cache.get(0, 100).hit);
        assert!(!cache.get(1, 100).hit);
    }
}
