//! A moment as a slot keeps it: a tick of a sixteenth of a second, in 4 bytes.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

/// A moment as a slot keeps it: sixteenths of a second since the first store was made, in 4 bytes
/// where an `Instant` takes 16 (every key's slot holds one). A slot may outlive its deadline by a
/// tick, and the count saturates after 8.5 years of uptime (entries then leave only by eviction):
/// neither serves anything stale, as every use checks the entry's own freshness.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Tick(u32);

const TICKS_PER_SECOND: u32 = 16;

static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

impl Tick {
    pub(super) fn now() -> Tick {
        let ticks = EPOCH.elapsed().as_secs_f64() * f64::from(TICKS_PER_SECOND);
        Tick(ticks as u32)
    }

    /// `keep_for` after `now`, rounded up to a tick.
    pub(super) fn after(now: Tick, keep_for: Duration) -> Tick {
        let ticks = (keep_for.as_secs_f64() * f64::from(TICKS_PER_SECOND)).ceil();
        Tick(now.0.saturating_add(ticks as u32).saturating_add(1))
    }
}
