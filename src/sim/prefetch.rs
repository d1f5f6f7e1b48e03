//! How far ahead the simulator prefetches; the prefetch itself is the filter's.

pub(crate) use doorkeeper::bloom::prefetch;

/// How many requests ahead of the one being processed the simulator prefetches. A DRAM miss takes
/// about as long as this many requests' worth of work, so the line arrives just in time.
pub(crate) const DISTANCE: usize = 16;
