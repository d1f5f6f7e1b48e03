//! The weigher: what a stored entry costs in memory, counted as the allocations it holds.
//!
//! The store spends its byte budget in these bytes, so that a cache of `max_bytes` holds about
//! `max_bytes` of memory whatever the size of its objects (`tests/memory` measures an entry's
//! allocations against its weight).

use std::mem::size_of;

use super::entry::StoredResponse;
use super::key::CacheKey;
use super::store::SLOT;

/// jemalloc's options, compiled into the binary (`src/main.rs`) and assumed by [`allocation`]:
/// freed pages go back to the system within 200 ms, from a background thread, instead of ten
/// seconds: the cache frees bodies as fast as misses arrive, and with 1 MiB objects at 60/s a
/// one-second decay peaked at 100 MiB where 200 ms peaked at 87 MiB (64 MiB cache). One arena
/// instead of four per core, as bodies are freed by whichever thread evicts them
/// (docs/decisions.md, jemalloc). And no cache-oblivious page: by default jemalloc gives every
/// allocation past 14 KiB a page more, to start it at a random cache line; a cache of bodies of
/// 8-64 KiB paid 4 KiB on each, and gains nothing from the spread (its bodies are copied to
/// sockets, not walked in parallel).
pub const JEMALLOC_CONF: &std::ffi::CStr =
    c"background_thread:true,dirty_decay_ms:200,muzzy_decay_ms:0,narenas:1,cache_oblivious:false";

/// Bytes an allocation of `size` bytes takes from jemalloc (the binary's allocator): its size
/// class. Small classes step by 16 bytes up to 128, then four to a doubling up to 14 KiB (at most
/// 25% above the request); larger allocations take the pages they touch ([`JEMALLOC_CONF`] turns
/// off the page more that jemalloc would add to each).
pub fn allocation(size: usize) -> usize {
    match size {
        0 => 0,
        1..=8 => 8,
        9..=128 => size.next_multiple_of(16),
        129..=SMALL_MAX => {
            // Four classes from 2^k to 2^(k+1), in steps of 2^(k-2).
            let k = usize::BITS - 1 - (size - 1).leading_zeros();
            size.next_multiple_of(1 << (k - 2))
        }
        _ => size.max(LARGE_MIN).next_multiple_of(PAGE),
    }
}

/// jemalloc's largest small class, its smallest large one, and its page.
const SMALL_MAX: usize = 14 * 1024;
const LARGE_MIN: usize = 16 * 1024;
const PAGE: usize = 4096;

/// What a buffer shared by reference counting costs beyond its bytes (`bytes`' `Shared`).
pub const SHARED: usize = 32;

/// Bytes a key holding one response that does not vary costs the store: a body of `body` bytes,
/// a head block ([`super::Head`]) of `head` bytes and a cache key of `key` bytes. What
/// [`super::Store`] spends of its budget on such an entry, and what `bloomgate simulate --weigh
/// proxy` weighs an object at.
pub fn entry(body: usize, head: usize, key: usize) -> u64 {
    u64::try_from(response(body, head) + key_bookkeeping(key, 1)).unwrap_or(u64::MAX)
}

/// Bytes a stored response costs beside its `Vary` selection: its body, its head block, and its
/// struct in an `Arc` (the `Arc`'s two counts).
pub(super) fn response(body: usize, head: usize) -> usize {
    allocation(body) + allocation(head) + allocation(size_of::<StoredResponse>() + 16)
}

/// What a key of `key` bytes costs the store beside its variants (whose own cost
/// [`super::Variants`] counts): the key; its slot in the index (with the variants' handle), whose
/// tables run between half and seven eighths full; and a queue node for each of its `variants`
/// written and a stale one (nodes of replaced entries wait until they outnumber the live ones),
/// in queues up to half empty after they grow. Measured in `tests/memory`.
pub(super) fn key_bookkeeping(key: usize, variants: usize) -> usize {
    let slot = 2 * SLOT;
    let queue = 2 * size_of::<(CacheKey, u64)>() * (variants + 1);
    slot + queue + allocation(key + 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_jemallocs_classes() {
        assert_eq!(allocation(0), 0);
        assert_eq!(allocation(1), 8);
        assert_eq!(allocation(24), 32);
        assert_eq!(allocation(129), 160);
        assert_eq!(allocation(257), 320);
        assert_eq!(allocation(8192), 8192);
        assert_eq!(allocation(8193), 10240);
        assert_eq!(allocation(14336), 14336);
        assert_eq!(allocation(14337), 16384);
        assert_eq!(allocation((1 << 20) + 1), (1 << 20) + 4096);
    }

    #[test]
    fn an_entry_weighs_its_body_head_and_key_as_jemalloc_rounds_them() {
        let small = entry(100, 70, 40);
        assert_eq!(entry(100, 70, 41), small, "the same size classes");
        assert_eq!(entry(112, 80, 48), small, "still the same size classes");
        assert_eq!(entry(113, 70, 40), small + 16, "the body's next class");
        assert!(
            entry(0, 0, 0) > 0,
            "a key and its slot cost something even when empty"
        );
    }
}
