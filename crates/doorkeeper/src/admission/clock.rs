//! Time for the doorkeeper's max-age rotation, injectable so tests need no sleeping.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// A source of monotonic time.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The process's monotonic clock ([`Instant::now`]); the default.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to, for tests.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use doorkeeper::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let start = clock.now();
/// clock.advance(Duration::from_secs(60));
/// assert_eq!(clock.now() - start, Duration::from_secs(60));
/// ```
#[derive(Debug)]
pub struct ManualClock {
    start: Instant,
    elapsed_nanos: AtomicU64,
}

impl ManualClock {
    /// A clock standing at the moment of its creation.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            elapsed_nanos: AtomicU64::new(0),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.elapsed_nanos.fetch_add(nanos, Relaxed);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.start + Duration::from_nanos(self.elapsed_nanos.load(Relaxed))
    }
}
