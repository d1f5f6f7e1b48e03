//! A byte-bounded LRU cache model over dense object ids: an intrusive doubly linked list in a `Vec`.

use super::prefetch::prefetch;

/// Marks an id that is not in the cache (as its `prev`), and the ends of the list.
const ABSENT: u32 = u32::MAX;
const END: u32 = u32::MAX - 1;

#[derive(Clone, Copy)]
struct Node {
    prev: u32,
    next: u32,
    size: u64,
}

const ABSENT_NODE: Node = Node {
    prev: ABSENT,
    next: END,
    size: 0,
};

/// Least-recently-used eviction by bytes: inserting evicts from the cold end until the object fits.
///
/// Every operation is O(1) (plus the evictions an insert causes). Ids index a `Vec`, so they should
/// be dense (the simulator interns keys to 0, 1, 2, ...).
pub struct ByteLru {
    capacity_bytes: u64,
    used_bytes: u64,
    entries: u64,
    nodes: Vec<Node>,
    /// Most recently used.
    head: u32,
    /// Least recently used: the next to be evicted.
    tail: u32,
}

impl ByteLru {
    /// An empty cache holding at most `capacity_bytes`.
    pub fn new(capacity_bytes: u64) -> ByteLru {
        ByteLru {
            capacity_bytes,
            used_bytes: 0,
            entries: 0,
            nodes: Vec::new(),
            head: END,
            tail: END,
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

    /// Bytes this model itself uses (its node table).
    pub fn model_bytes(&self) -> usize {
        self.nodes.capacity() * size_of::<Node>()
    }

    /// Starts loading `id`'s node into the CPU cache, for a request a few ahead.
    #[inline]
    pub fn prefetch(&self, id: u32) {
        if let Some(node) = self.nodes.get(id as usize) {
            prefetch(node);
        }
    }

    /// Starts loading the neighbours of `id` in the list, which a touch of `id` rewrites. Call it
    /// after [`Self::prefetch`] had time to bring in `id`'s own node.
    #[inline]
    pub fn prefetch_neighbours(&self, id: u32) {
        if let Some(node) = self.nodes.get(id as usize)
            && node.prev != ABSENT
        {
            for neighbour in [node.prev, node.next] {
                if let Some(neighbour) = self.nodes.get(neighbour as usize) {
                    prefetch(neighbour);
                }
            }
        }
    }

    /// Whether `id` is cached; if so it becomes the most recently used.
    pub fn touch(&mut self, id: u32) -> bool {
        match self.nodes.get(id as usize) {
            Some(node) if node.prev != ABSENT => {
                if self.head != id {
                    self.unlink(id);
                    self.push_front(id);
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
            .is_some_and(|node| node.prev != ABSENT)
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
        debug_assert_eq!(self.nodes[index].prev, ABSENT, "insert of a cached id");
        let mut evictions = 0;
        while self.used_bytes + size > self.capacity_bytes {
            let victim = self.tail;
            self.unlink(victim);
            let node = &mut self.nodes[victim as usize];
            node.prev = ABSENT;
            self.used_bytes -= node.size;
            self.entries -= 1;
            evictions += 1;
            evicted(victim, node.size);
        }
        // The next eviction rewrites the node before the new tail: start loading it now.
        if let Some(&Node { prev, .. }) = self.nodes.get(self.tail as usize)
            && let Some(before_tail) = self.nodes.get(prev as usize)
        {
            prefetch(before_tail);
        }
        self.nodes[index].size = size;
        self.push_front(id);
        self.used_bytes += size;
        self.entries += 1;
        Some(evictions)
    }

    fn unlink(&mut self, id: u32) {
        let Node { prev, next, .. } = self.nodes[id as usize];
        match prev {
            END => self.head = next,
            prev => self.nodes[prev as usize].next = next,
        }
        match next {
            END => self.tail = prev,
            next => self.nodes[next as usize].prev = prev,
        }
    }

    fn push_front(&mut self, id: u32) {
        let old_head = self.head;
        let node = &mut self.nodes[id as usize];
        node.prev = END;
        node.next = old_head;
        match old_head {
            END => self.tail = id,
            old_head => self.nodes[old_head as usize].prev = id,
        }
        self.head = id;
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
}
