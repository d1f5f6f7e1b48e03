//! How many of the slices an answer touches the cache holds already: `Cache-Status`'s slice hits.

use crate::cache::CacheKey;
use crate::cache::slice::slice_key;
use crate::proxy::Proxy;

impl Proxy {
    /// How many of `slices` of the object at `key` are stored, `fetched` aside: a slice fetched
    /// for this request is stored by it, never a hit of it.
    pub(super) fn slice_hits(&self, key: &CacheKey, slices: &[u64], fetched: Option<u64>) -> u64 {
        let held = |index: u64| self.store.peek(&slice_key(key, index)).is_some();
        slices
            .iter()
            .filter(|&&index| fetched != Some(index) && held(index))
            .count() as u64
    }
}
