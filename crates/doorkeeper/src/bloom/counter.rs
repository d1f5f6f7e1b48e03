//! Sharded count of set bits: each thread adds to its own cache line.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// One counter per cache line pair (adjacent-line prefetch pulls lines in twos).
#[repr(align(128))]
#[derive(Default)]
struct Shard(AtomicU64);

/// Counts set bits without a shared hot counter. `total` is exact when no insert is in flight.
pub(crate) struct SetBitCounter {
    shards: Box<[Shard]>,
    stride_shift: u32,
}

static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD_INDEX: Cell<Option<usize>> = const { Cell::new(None) };
}

#[inline]
fn thread_index() -> usize {
    THREAD_INDEX.with(|index| match index.get() {
        Some(i) => i,
        None => {
            let i = NEXT_THREAD.fetch_add(1, Relaxed);
            index.set(Some(i));
            i
        }
    })
}

impl SetBitCounter {
    /// A counter for a filter of `num_bits` bits, starting at `initial`.
    pub(crate) fn new(num_bits: u64, initial: u64) -> Self {
        // Twice the cores, so that threads given consecutive indices rarely share a shard.
        let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
        let num_shards = (2 * cores).next_power_of_two().clamp(4, 64);
        let shards: Box<[Shard]> = (0..num_shards).map(|_| Shard::default()).collect();
        shards[0].0.store(initial, Relaxed);
        // A shard reports every `stride` bits so a reader can sum the shards now and then; the
        // total may run ahead of the last report by at most num_shards * stride bits, which we
        // keep within 1/256 of the filter (and at most 1024 per shard).
        let stride = (num_bits / (256 * num_shards as u64)).clamp(1, 1024);
        let stride_shift = u64::BITS - 1 - stride.leading_zeros();
        Self {
            shards,
            stride_shift,
        }
    }

    /// Adds `bits`; true when this shard crossed a multiple of its stride.
    #[inline]
    pub(crate) fn add(&self, bits: u32) -> bool {
        let shard = &self.shards[thread_index() & (self.shards.len() - 1)];
        let before = shard.0.fetch_add(u64::from(bits), Relaxed);
        (before >> self.stride_shift) != ((before + u64::from(bits)) >> self.stride_shift)
    }

    pub(crate) fn total(&self) -> u64 {
        self.shards.iter().map(|s| s.0.load(Relaxed)).sum()
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.shards)
    }
}
