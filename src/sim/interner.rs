//! Interning key fingerprints to dense object ids, with the trace statistics that come with it.

use super::prefetch::{DISTANCE, prefetch};
use super::request::{SimRequest, TraceStats};

/// Marks a slot that holds no fingerprint (ids stay below it: a trace has fewer than 2^32 - 1
/// distinct keys, or its fingerprints would collide long before).
const EMPTY: u32 = u32::MAX;
/// Slots before the first growth.
const INITIAL_SLOTS: usize = 1 << 16;

/// One slot of the open-addressing table: a fingerprint, its id and how often it was requested,
/// 16 bytes so that four share a cache line and a lookup usually costs one miss.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct Slot {
    fingerprint: u64,
    id: u32,
    requests: u32,
}

const EMPTY_SLOT: Slot = Slot {
    fingerprint: 0,
    id: EMPTY,
    requests: 0,
};

/// Maps key fingerprints to dense object ids (0, 1, 2, ... in order of first request) and counts
/// what it sees.
///
/// An open-addressing table with linear probing, at most half full. Fingerprints are uniform
/// 64-bit hashes already, so their low bits index the table directly.
pub struct Interner {
    slots: Vec<Slot>,
    stats: TraceStats,
}

impl Default for Interner {
    fn default() -> Self {
        Interner {
            slots: vec![EMPTY_SLOT; INITIAL_SLOTS],
            stats: TraceStats::default(),
        }
    }
}

impl Interner {
    /// The id of the object with this fingerprint, recording one request of `size` bytes for it.
    #[inline]
    pub fn intern(&mut self, fingerprint: u64, size: u64) -> u32 {
        self.stats.requests += 1;
        let mask = self.slots.len() - 1;
        let mut index = fingerprint as usize & mask;
        loop {
            let slot = &mut self.slots[index];
            if slot.id == EMPTY {
                break;
            }
            if slot.fingerprint == fingerprint {
                slot.requests = slot.requests.saturating_add(1);
                return slot.id;
            }
            index = (index + 1) & mask;
        }
        let id = self.stats.distinct_objects as u32;
        self.slots[index] = Slot {
            fingerprint,
            id,
            requests: 1,
        };
        self.stats.distinct_objects += 1;
        self.stats.footprint_bytes += size;
        if self.stats.distinct_objects * 2 > self.slots.len() as u64 {
            self.grow();
        }
        id
    }

    /// Sets the `id` of every request from its fingerprint (as [`Self::intern`] does), prefetching
    /// the slots of requests a few ahead so that their cache misses overlap.
    pub fn intern_all(&mut self, requests: &mut [SimRequest]) {
        for index in 0..requests.len() {
            if let Some(ahead) = requests.get(index + DISTANCE) {
                prefetch(&self.slots[ahead.fingerprint as usize & (self.slots.len() - 1)]);
            }
            let request = &mut requests[index];
            request.id = self.intern(request.fingerprint, request.size);
        }
    }

    /// The statistics of everything interned so far.
    pub fn stats(&self) -> TraceStats {
        TraceStats {
            one_hit_objects: self.slots.iter().filter(|s| s.requests == 1).count() as u64,
            ..self.stats
        }
    }

    /// Doubles the table and reinserts every fingerprint.
    fn grow(&mut self) {
        let doubled = vec![EMPTY_SLOT; self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, doubled);
        let mask = self.slots.len() - 1;
        for slot in old.into_iter().filter(|s| s.id != EMPTY) {
            let mut index = slot.fingerprint as usize & mask;
            while self.slots[index].id != EMPTY {
                index = (index + 1) & mask;
            }
            self.slots[index] = slot;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_dense_in_order_of_first_request() {
        let mut interner = Interner::default();
        // Fingerprints that share low bits probe past each other.
        let fingerprints = [7, 7 + (1 << 40), 7, 3, 7 + (1 << 40), 9];
        let ids: Vec<u32> = fingerprints
            .iter()
            .map(|&f| interner.intern(f, 10))
            .collect();
        assert_eq!(ids, [0, 1, 0, 2, 1, 3]);
        let stats = interner.stats();
        assert_eq!(stats.requests, 6);
        assert_eq!(stats.distinct_objects, 4);
        assert_eq!(stats.footprint_bytes, 40);
        assert_eq!(stats.one_hit_objects, 2);
    }

    #[test]
    fn ids_survive_growth() {
        let mut interner = Interner::default();
        let fingerprint = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let count = 3 * INITIAL_SLOTS as u64;
        let mut requests: Vec<SimRequest> = (0..count)
            .map(|i| SimRequest {
                id: 0,
                key_bytes: 0,
                fingerprint: fingerprint(i),
                size: 1,
                time: 0.0,
            })
            .collect();
        interner.intern_all(&mut requests);
        assert!(requests.iter().enumerate().all(|(i, r)| r.id == i as u32));
        for i in (0..count).step_by(997) {
            assert_eq!(interner.intern(fingerprint(i), 1), i as u32);
        }
        assert_eq!(interner.stats().distinct_objects, count);
    }
}
