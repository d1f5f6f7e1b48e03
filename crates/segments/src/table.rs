//! An open-addressing hash table of `u64` key hashes to `u64` values, 16 bytes a slot.
//!
//! Robin Hood linear probing (an entry far from its home slot takes the place of one nearer to
//! its own) keeps probe runs short and lets a lookup for an absent hash stop early; deletion
//! shifts the run back instead of leaving tombstones. The slot count is not a power of two: the
//! table grows by a quarter when it is 85% full, so it is between 68% and 85% full once grown,
//! which bounds its slack (16 B / 0.68 = 23.5 B per entry at worst, ~20 B on average).

/// Hash 0 marks an empty slot; callers never pass it (see `hash::KeyHasher`).
const EMPTY: u64 = 0;
/// Grow when an insert would fill more than this share (per mille) of the slots.
const MAX_LOAD_PER_MILLE: usize = 850;
const MIN_SLOTS: usize = 16;

#[derive(Clone, Copy)]
struct Slot {
    hash: u64,
    value: u64,
}

const VACANT: Slot = Slot {
    hash: EMPTY,
    value: 0,
};

/// A map of non-zero `u64` hashes to `u64` values.
#[derive(Default)]
pub(crate) struct Table {
    slots: Vec<Slot>,
    len: usize,
}

impl Table {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes the slots take (the table's whole heap size).
    pub(crate) fn slot_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
    }

    /// The slot an entry of `hash` would sit in if nothing were in the way (Lemire's
    /// multiply-shift range reduction: uses the hash's high bits, no division).
    fn home(&self, hash: u64) -> usize {
        ((u128::from(hash) * self.slots.len() as u128) >> 64) as usize
    }

    /// How far slot `at` is past the home slot of `hash`.
    fn distance(&self, hash: u64, at: usize) -> usize {
        let home = self.home(hash);
        if at >= home {
            at - home
        } else {
            at + self.slots.len() - home
        }
    }

    fn next(&self, at: usize) -> usize {
        if at + 1 == self.slots.len() {
            0
        } else {
            at + 1
        }
    }

    fn find(&self, hash: u64) -> Option<usize> {
        debug_assert_ne!(hash, EMPTY);
        if self.slots.is_empty() {
            return None;
        }
        let mut at = self.home(hash);
        let mut distance = 0;
        loop {
            let slot = self.slots[at];
            if slot.hash == hash {
                return Some(at);
            }
            if slot.hash == EMPTY || self.distance(slot.hash, at) < distance {
                return None;
            }
            at = self.next(at);
            distance += 1;
        }
    }

    pub(crate) fn get(&self, hash: u64) -> Option<u64> {
        self.find(hash).map(|at| self.slots[at].value)
    }

    pub(crate) fn get_mut(&mut self, hash: u64) -> Option<&mut u64> {
        self.find(hash).map(|at| &mut self.slots[at].value)
    }

    /// Sets the value of `hash`, returning the one it replaces.
    pub(crate) fn insert(&mut self, hash: u64, value: u64) -> Option<u64> {
        if let Some(old) = self.get_mut(hash) {
            return Some(std::mem::replace(old, value));
        }
        if (self.len + 1) * 1000 > self.slots.len() * MAX_LOAD_PER_MILLE {
            self.grow();
        }
        self.place(Slot { hash, value });
        self.len += 1;
        None
    }

    /// Puts an entry known to be absent into a table with room for it.
    fn place(&mut self, mut carried: Slot) {
        let mut at = self.home(carried.hash);
        let mut distance = 0;
        loop {
            let slot = self.slots[at];
            if slot.hash == EMPTY {
                self.slots[at] = carried;
                return;
            }
            let resident = self.distance(slot.hash, at);
            if resident < distance {
                self.slots[at] = carried;
                carried = slot;
                distance = resident;
            }
            at = self.next(at);
            distance += 1;
        }
    }

    fn grow(&mut self) {
        let slots = (self.slots.len() + self.slots.len() / 4 + 1).max(MIN_SLOTS);
        let old = std::mem::replace(&mut self.slots, Vec::with_capacity(slots));
        self.slots.resize(slots, VACANT);
        for slot in old.into_iter().filter(|slot| slot.hash != EMPTY) {
            self.place(slot);
        }
    }

    /// Removes `hash`, returning its value.
    pub(crate) fn remove(&mut self, hash: u64) -> Option<u64> {
        let mut at = self.find(hash)?;
        let value = self.slots[at].value;
        // Backward shift: pull the rest of the run one slot nearer home.
        let mut next = self.next(at);
        while self.slots[next].hash != EMPTY && self.distance(self.slots[next].hash, next) > 0 {
            self.slots[at] = self.slots[next];
            at = next;
            next = self.next(next);
        }
        self.slots[at] = VACANT;
        self.len -= 1;
        Some(value)
    }

    /// Removes every entry whose value `doomed` picks; returns how many went.
    pub(crate) fn remove_where(&mut self, mut doomed: impl FnMut(u64) -> bool) -> usize {
        let hashes: Vec<u64> = self
            .slots
            .iter()
            .filter(|slot| slot.hash != EMPTY && doomed(slot.value))
            .map(|slot| slot.hash)
            .collect();
        for hash in &hashes {
            self.remove(*hash);
        }
        hashes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A small xorshift generator, so the test needs no RNG crate and repeats exactly.
    fn hashes(seed: u64) -> impl Iterator<Item = u64> {
        let mut state = seed;
        std::iter::from_fn(move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            Some(state)
        })
    }

    #[test]
    fn agrees_with_std_hashmap_through_inserts_and_removes() {
        let mut table = Table::default();
        let mut model = HashMap::new();
        // Few distinct hashes (4096) so removes and overwrites hit present keys often.
        for (step, random) in hashes(0x9e37_79b9_7f4a_7c15).take(200_000).enumerate() {
            let hash = (random & 0xfff) << 52 | 1;
            if random % 3 == 0 {
                assert_eq!(table.remove(hash), model.remove(&hash), "step {step}");
            } else {
                assert_eq!(
                    table.insert(hash, step as u64),
                    model.insert(hash, step as u64)
                );
            }
            assert_eq!(table.len(), model.len());
        }
        for (hash, value) in &model {
            assert_eq!(table.get(*hash), Some(*value));
        }
        let removed = table.remove_where(|value| value % 2 == 0);
        model.retain(|_, value| *value % 2 != 0);
        assert_eq!(table.len(), model.len());
        assert!(removed > 0);
        for (hash, value) in &model {
            assert_eq!(table.get(*hash), Some(*value));
        }
    }

    #[test]
    fn slack_stays_under_24_bytes_per_entry_from_ten_thousand_entries_up() {
        let mut table = Table::default();
        for (n, hash) in hashes(12345).take(300_000).enumerate() {
            table.insert(hash, 0);
            if n >= 10_000 {
                let per_entry = table.slot_bytes() as f64 / table.len() as f64;
                assert!(
                    per_entry <= 23.6,
                    "{per_entry} B per entry at {} entries",
                    n + 1
                );
            }
        }
    }
}
