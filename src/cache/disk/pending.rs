//! Writes queued for the writer thread, readable by key until the engine has them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::cache::{CacheKey, Variants};

/// The queued writes by key, each with its ticket: a later write of a key replaces the earlier
/// one here, and only the write its ticket names takes it out. Holds no more than the writer's
/// queue does (`disk.write_buffer`).
#[derive(Default)]
pub(super) struct Pending {
    writes: Mutex<HashMap<CacheKey, (u64, Variants)>>,
    next_ticket: AtomicU64,
}

impl Pending {
    /// Records a write of `variants` under `key`; returns its ticket.
    pub(super) fn add(&self, key: &CacheKey, variants: &Variants) -> u64 {
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        self.writes()
            .insert(key.clone(), (ticket, variants.clone()));
        ticket
    }

    /// The write `ticket` of `key` is over (in the engine, refused or dropped).
    pub(super) fn settled(&self, key: &CacheKey, ticket: u64) {
        let mut writes = self.writes();
        if writes.get(key).is_some_and(|(queued, _)| *queued == ticket) {
            writes.remove(key);
        }
    }

    /// Forgets any write of `key` (a purge).
    pub(super) fn remove(&self, key: &CacheKey) {
        self.writes().remove(key);
    }

    /// The variants queued under `key`, if a write of them is.
    pub(super) fn get(&self, key: &CacheKey) -> Option<Variants> {
        self.writes().get(key).map(|(_, variants)| variants.clone())
    }

    fn writes(&self) -> MutexGuard<'_, HashMap<CacheKey, (u64, Variants)>> {
        // Every step under the lock is one map operation: a panic elsewhere leaves it whole.
        self.writes.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_settled_leaves_and_a_later_write_of_the_key_stays() {
        let pending = Pending::default();
        let key = CacheKey::from_string("h/a#slice=0".into());
        let variants = crate::cache::disk::tests::variants();
        let first = pending.add(&key, &variants);
        let second = pending.add(&key, &variants);
        pending.settled(&key, first);
        assert!(
            pending.get(&key).is_some(),
            "the later write is still queued"
        );
        pending.settled(&key, second);
        assert!(pending.get(&key).is_none());
    }
}
