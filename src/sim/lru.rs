//! A byte-bounded LRU cache model over dense object ids: a queue of uses, read lazily.

use std::collections::VecDeque;

use super::prefetch::prefetch;

/// The stamp of an id that is not in the cache.
const ABSENT: u64 = u64::MAX;
/// How far ahead of its front the queue's entries are prefetched while evicting.
const EVICTION_PREFETCH: usize = 8;
/// Stale queue entries tolerated beyond one per cached object before the queue is compacted.
const COMPACT_SLACK: u64 = 1024;

#[derive(Clone, Copy)]
struct Node {
    size: u64,
    /// The queue position of this id's last use, or [`ABSENT`].
    stamp: u64,
}

const ABSENT_NODE: Node = Node {
    size: 0,
    stamp: ABSENT,
};

/// Least-recently-used eviction by bytes: inserting evicts from the cold end until the object fits.
///
/// Every use (an insert or a hit) appends the id to a queue and stamps the id with its position;
/// an entry whose id was used again since is stale, and eviction skips it. The live entries are
/// therefore in order of last use, so the front live entry is the least recently used: exactly
/// LRU. A hit writes its own node and the queue's tail, never its list neighbours, and eviction
/// reads the queue in order, so every node the model touches can be prefetched. The queue is
/// compacted when stale entries are three times the live ones (plus a slack). Every operation is O(1)
/// amortised. Ids index a `Vec`, so they should be dense (the simulator interns keys to 0, 1, 2,
/// ...).
pub struct ByteLru {
    capacity_bytes: u64,
    used_bytes: u64,
    entries: u64,
    nodes: Vec<Node>,
    /// Ids in order of use, oldest first, stale entries included.
    queue: VecDeque<u32>,
    /// The position of the queue's front entry.
    front: u64,
}

impl ByteLru {
    /// An empty cache holding at most `capacity_bytes`.
    pub fn new(capacity_bytes: u64) -> ByteLru {
        ByteLru {
            capacity_bytes,
            used_bytes: 0,
            entries: 0,
            nodes: Vec::new(),
            queue: VecDeque::new(),
            front: 0,
        }
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Bytes this model itself uses (its node table and queue).
    pub fn model_bytes(&self) -> usize {
        self.nodes.capacity() * size_of::<Node>() + self.queue.capacity() * size_of::<u32>()
    }

    /// Starts loading `id`'s node into the CPU cache, for a request a few ahead.
    #[inline]
    pub fn prefetch(&self, id: u32) {
        if let Some(node) = self.nodes.get(id as usize) {
            prefetch(node);
        }
    }

    /// Whether `id` is cached; if so it becomes the most recently used.
    #[inline]
    pub fn touch(&mut self, id: u32) -> bool {
        let newest = self.front + self.queue.len() as u64;
        match self.nodes.get_mut(id as usize) {
            Some(node) if node.stamp != ABSENT => {
                if node.stamp + 1 != newest {
                    node.stamp = newest;
                    self.queue.push_back(id);
                    self.compact_if_stale();
                }
                true
            }
            _ => false,
        }
    }

    /// Stores `id` (not cached) as the most recently used, evicting the least recently used objects
    /// until it fits. Returns the number of evictions; an object larger than the whole cache is not
    /// stored and evicts nothing (`None`).
    pub fn insert(&mut self, id: u32, size: u64) -> Option<u64> {
        self.insert_evicting(id, size, |_, _| {})
    }

    /// Whether `id` is cached, without making it the most recently used.
    pub fn contains(&self, id: u32) -> bool {
        self.nodes
            .get(id as usize)
            .is_some_and(|node| node.stamp != ABSENT)
    }

    /// Takes `id` out, if cached; returns whether it was.
    pub fn remove(&mut self, id: u32) -> bool {
        match self.nodes.get_mut(id as usize) {
            Some(node) if node.stamp != ABSENT => {
                // Its queue entry turns stale: no position is ABSENT.
                node.stamp = ABSENT;
                self.used_bytes -= node.size;
                self.entries -= 1;
                true
            }
            _ => false,
        }
    }

    /// [`Self::insert`], telling `evicted` the id and size of each object it evicts.
    pub fn insert_evicting(
        &mut self,
        id: u32,
        size: u64,
        mut evicted: impl FnMut(u32, u64),
    ) -> Option<u64> {
        if size > self.capacity_bytes {
            return None;
        }
        let index = id as usize;
        if index >= self.nodes.len() {
            self.nodes.resize(index + 1, ABSENT_NODE);
        }
        debug_assert_eq!(self.nodes[index].stamp, ABSENT, "insert of a cached id");
        let mut evictions = 0;
        while self.used_bytes + size > self.capacity_bytes {
            let (victim, victim_size) = self.evict_oldest();
            evictions += 1;
            evicted(victim, victim_size);
        }
        let node = &mut self.nodes[index];
        node.size = size;
        node.stamp = self.front + self.queue.len() as u64;
        self.queue.push_back(id);
        self.used_bytes += size;
        self.entries += 1;
        self.compact_if_stale();
        Some(evictions)
    }

    /// Takes the least recently used object out, skipping stale entries; returns its id and size.
    fn evict_oldest(&mut self) -> (u32, u64) {
        loop {
            let Some(id) = self.queue.pop_front() else {
                unreachable!("bytes are in use, so a live entry is queued");
            };
            let position = self.front;
            self.front += 1;
            if let Some(&ahead) = self.queue.get(EVICTION_PREFETCH) {
                prefetch(&self.nodes[ahead as usize]);
            }
            let node = &mut self.nodes[id as usize];
            if node.stamp == position {
                node.stamp = ABSENT;
                self.used_bytes -= node.size;
                self.entries -= 1;
                return (id, node.size);
            }
        }
    }

    /// Drops the stale entries once they are three times the live ones, keeping the order.
    fn compact_if_stale(&mut self) {
        if self.queue.len() as u64 <= 4 * self.entries + COMPACT_SLACK {
            return;
        }
        let queue = self.queue.make_contiguous();
        let mut kept = 0;
        for index in 0..queue.len() {
            if let Some(&ahead) = queue.get(index + EVICTION_PREFETCH) {
                prefetch(&self.nodes[ahead as usize]);
            }
            let id = queue[index];
            let node = &mut self.nodes[id as usize];
            if node.stamp == self.front + index as u64 {
                node.stamp = self.front + kept as u64;
                queue[kept] = id;
                kept += 1;
            }
        }
        self.queue.truncate(kept);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_recently_used_is_evicted_first_by_bytes() {
        let mut lru = ByteLru::new(100);
        assert_eq!(lru.insert(0, 40), Some(0));
        assert_eq!(lru.insert(1, 40), Some(0));
        assert!(lru.touch(0));
        // 0 was used after 1, so 1 goes.
        assert_eq!(lru.insert(2, 40), Some(1));
        assert!(lru.touch(0) && lru.touch(2) && !lru.touch(1));
        assert_eq!((lru.used_bytes(), lru.entries()), (80, 2));
        // Needs both out.
        assert_eq!(lru.insert(3, 100), Some(2));
        assert!(!lru.touch(0) && !lru.touch(2) && lru.touch(3));
        assert_eq!(lru.insert(4, 101), None);
        assert!(lru.touch(3));
    }

    #[test]
    fn list_stays_consistent_under_many_operations() {
        let mut lru = ByteLru::new(1000);
        let mut reference: Vec<(u32, u64)> = Vec::new(); // most recent last
        for step in 0..5000u32 {
            let id = step.wrapping_mul(2_654_435_761) % 97;
            let size = u64::from(id % 13 + 1) * 20;
            if lru.touch(id) {
                let at = reference.iter().position(|(i, _)| *i == id).unwrap();
                let entry = reference.remove(at);
                reference.push(entry);
            } else {
                assert!(reference.iter().all(|(i, _)| *i != id));
                lru.insert(id, size);
                reference.push((id, size));
                while reference.iter().map(|(_, s)| s).sum::<u64>() > 1000 {
                    reference.remove(0);
                }
            }
            assert_eq!(
                lru.used_bytes(),
                reference.iter().map(|(_, s)| s).sum::<u64>()
            );
            assert_eq!(lru.entries(), reference.len() as u64);
        }
    }

    #[test]
    fn hits_alone_keep_the_queue_short_and_the_order_right() {
        let mut lru = ByteLru::new(100);
        for id in 0..10 {
            lru.insert(id, 10);
        }
        for step in 0..100_000u32 {
            assert!(lru.touch(step % 7));
        }
        assert!(lru.queue.len() as u64 <= 4 * 10 + COMPACT_SLACK + 1);
        // 7, 8 and 9 were not used since they were stored: they go first, oldest first.
        let mut evicted = Vec::new();
        lru.insert_evicting(10, 30, |id, _| evicted.push(id));
        assert_eq!(evicted, [7, 8, 9]);
        lru.insert_evicting(11, 10, |id, _| evicted.push(id));
        // Then the least recently touched of 0..7: the last touch was step 99,999, of id 4.
        assert_eq!(evicted[3], 5);
    }
}
