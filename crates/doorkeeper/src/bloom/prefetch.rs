//! Software prefetch: asks the CPU to start loading a cache line that a later step will touch.

/// Starts loading the cache line holding `value` into every cache level. A hint only: it never
/// faults and does nothing on targets without a prefetch instruction.
///
/// The filter's own; public so that a model of it (bloomgate's single-threaded simulator, which
/// keeps the same blocks in plain words) prefetches them alike.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: SSE is part of the x86_64 baseline, and a prefetch only hints: it reads nothing
        // into the program and never faults, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
