//! Doubly linked queues over dense object ids, for the reference policies that move or remove
//! entries from the middle of a queue (LRU segments, SIEVE's hand, a ghost hit).

/// No id: the end of a queue, or an id in no queue.
pub(crate) const NONE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Link {
    /// Towards the head (newer).
    newer: u32,
    /// Towards the tail (older).
    older: u32,
    /// The queue holding this id, or [`NONE`].
    queue: u32,
    size: u64,
}

const UNLINKED: Link = Link {
    newer: NONE,
    older: NONE,
    queue: NONE,
    size: 0,
};

/// `N` queues sharing one node table: an id is in at most one of them. Each queue knows its head
/// (newest), tail (oldest) and bytes. Every operation is O(1).
pub(crate) struct IdQueues<const N: usize> {
    links: Vec<Link>,
    heads: [u32; N],
    tails: [u32; N],
    bytes: [u64; N],
    entries: [u64; N],
}

impl<const N: usize> IdQueues<N> {
    pub(crate) fn new() -> IdQueues<N> {
        IdQueues {
            links: Vec::new(),
            heads: [NONE; N],
            tails: [NONE; N],
            bytes: [0; N],
            entries: [0; N],
        }
    }

    /// The queue holding `id`, if any.
    #[inline]
    pub(crate) fn queue_of(&self, id: u32) -> Option<usize> {
        match self.links.get(id as usize)?.queue {
            NONE => None,
            queue => Some(queue as usize),
        }
    }

    #[inline]
    pub(crate) fn prefetch(&self, id: u32) {
        if let Some(link) = self.links.get(id as usize) {
            super::prefetch::prefetch(link);
        }
    }

    pub(crate) fn size_of(&self, id: u32) -> u64 {
        self.links[id as usize].size
    }

    pub(crate) fn bytes(&self, queue: usize) -> u64 {
        self.bytes[queue]
    }

    pub(crate) fn entries(&self, queue: usize) -> u64 {
        self.entries[queue]
    }

    /// The oldest id of `queue`.
    pub(crate) fn tail(&self, queue: usize) -> Option<u32> {
        Some(self.tails[queue]).filter(|&id| id != NONE)
    }

    /// The id next newer than `id` in its queue.
    pub(crate) fn newer(&self, id: u32) -> Option<u32> {
        Some(self.links[id as usize].newer).filter(|&id| id != NONE)
    }

    /// Puts `id` (in no queue) at the head of `queue` with `size` bytes.
    pub(crate) fn push_head(&mut self, queue: usize, id: u32, size: u64) {
        let index = id as usize;
        if index >= self.links.len() {
            self.links.resize(index + 1, UNLINKED);
        }
        debug_assert_eq!(self.links[index].queue, NONE, "push of a queued id");
        let head = self.heads[queue];
        self.links[index] = Link {
            newer: NONE,
            older: head,
            queue: queue as u32,
            size,
        };
        if head == NONE {
            self.tails[queue] = id;
        } else {
            self.links[head as usize].newer = id;
        }
        self.heads[queue] = id;
        self.bytes[queue] += size;
        self.entries[queue] += 1;
    }

    /// Takes `id` out of its queue; returns its size, or `None` if it was in none.
    pub(crate) fn remove(&mut self, id: u32) -> Option<u64> {
        let queue = self.queue_of(id)?;
        let link = self.links[id as usize];
        match link.newer {
            NONE => self.heads[queue] = link.older,
            newer => self.links[newer as usize].older = link.older,
        }
        match link.older {
            NONE => self.tails[queue] = link.newer,
            older => self.links[older as usize].newer = link.newer,
        }
        self.links[id as usize] = Link {
            size: link.size,
            ..UNLINKED
        };
        self.bytes[queue] -= link.size;
        self.entries[queue] -= 1;
        Some(link.size)
    }

    /// Moves `id` to the head of `queue`, keeping its size.
    pub(crate) fn move_to_head(&mut self, queue: usize, id: u32) {
        if let Some(size) = self.remove(id) {
            self.push_head(queue, id, size);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_keep_order_bytes_and_membership_through_moves() {
        let mut queues = IdQueues::<2>::new();
        for id in 0..5 {
            queues.push_head(0, id, u64::from(id) + 1);
        }
        assert_eq!((queues.bytes(0), queues.entries(0)), (15, 5));
        assert_eq!(queues.tail(0), Some(0));
        queues.move_to_head(1, 0);
        queues.remove(2);
        assert_eq!(queues.tail(0), Some(1));
        assert_eq!(queues.newer(1), Some(3));
        assert_eq!(queues.queue_of(0), Some(1));
        assert_eq!(queues.queue_of(2), None);
        assert_eq!((queues.bytes(0), queues.bytes(1)), (11, 1));
        assert_eq!(queues.remove(2), None);
        for id in [1, 3, 4] {
            queues.remove(id);
        }
        assert_eq!((queues.tail(0), queues.bytes(0)), (None, 0));
    }
}
