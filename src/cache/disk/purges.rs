//! Purges remembered while writes for the same keys may still be queued.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::cache::CacheKey;

/// Keys purged while writes for them may still be queued: a write queued before the purge is
/// dropped, so a purged object never comes back from a late write.
#[derive(Default)]
pub(super) struct Purges {
    sequence: AtomicU64,
    recent: Mutex<HashMap<CacheKey, (u64, Instant)>>,
}

/// How long a purge is remembered: far longer than a write waits in the queue.
const PURGE_MEMORY: Duration = Duration::from_secs(60);

/// How long after a purge reads of the key skip the disk: the engine serves records still in its
/// write queue (written before the purge) until they are flushed, which takes milliseconds.
pub(super) const PURGE_SETTLES: Duration = Duration::from_secs(5);

impl Purges {
    pub(super) fn now(&self) -> u64 {
        self.sequence.load(Ordering::Acquire)
    }

    pub(super) fn record(&self, key: &CacheKey) {
        let sequence = self.sequence.fetch_add(1, Ordering::AcqRel) + 1;
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if recent.len() >= 1024 {
            recent.retain(|_, (_, at)| now.duration_since(*at) < PURGE_MEMORY);
        }
        recent.insert(key.clone(), (sequence, now));
    }

    /// Whether `key` was purged within `within`: the engine may still hold a record written
    /// before the purge in its write queue, and serve it from there until it is flushed.
    pub(super) fn recently(&self, key: &CacheKey, within: Duration) -> bool {
        if self.now() == 0 {
            return false;
        }
        let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        recent.get(key).is_some_and(|(_, at)| at.elapsed() < within)
    }

    /// Whether `key` was purged after a write queued at `sequence`.
    pub(super) fn purged_since(&self, key: &CacheKey, sequence: u64) -> bool {
        let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        recent.get(key).is_some_and(|(at, _)| *at > sequence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_queued_before_a_purge_is_dropped_and_one_queued_after_is_not() {
        let purges = Purges::default();
        let key = CacheKey::from_string("h/a".into());
        let before = purges.now();
        purges.record(&key);
        let after = purges.now();
        assert!(purges.purged_since(&key, before));
        assert!(!purges.purged_since(&key, after));
        let other = CacheKey::from_string("h/b".into());
        assert!(!purges.purged_since(&other, before));
        assert!(purges.recently(&key, Duration::from_secs(5)));
        assert!(!purges.recently(&key, Duration::ZERO));
        assert!(!purges.recently(&other, Duration::from_secs(5)));
    }
}
