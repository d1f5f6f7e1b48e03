//! A server's health: out of rotation after `max_fails` failures within `fail_timeout` (passive,
//! as nginx), or after `fall` failed probes in a row until `rise` pass (active, as HAProxy). The
//! state outlives a reload that keeps the server, so it lives apart from the configuration.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Milliseconds on a monotonic clock, from the first time it was read; never 0 (0 means "not
/// out" below).
pub fn now_ms() -> u64 {
    static START: LazyLock<Instant> = LazyLock::new(Instant::now);
    START.elapsed().as_millis() as u64 + 1
}

fn ms(duration: Duration) -> u64 {
    duration.as_millis().try_into().unwrap_or(u64::MAX)
}

/// A change of a server's place in rotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Up,
    Down,
}

impl Change {
    pub const ALL: [Change; 2] = [Change::Up, Change::Down];

    pub fn as_str(self) -> &'static str {
        match self {
            Change::Up => "up",
            Change::Down => "down",
        }
    }
}

/// The health of one server (by group and URL), shared by every configuration that has it.
#[derive(Debug, Default)]
pub struct ServerState {
    /// When passive checks let the server back (`now_ms`), or 0 when they hold it out of nothing.
    out_until: AtomicU64,
    /// Failures counted since `window_start`.
    fails: AtomicU32,
    window_start: AtomicU64,
    /// Held out by its probes.
    probed_down: AtomicBool,
    /// Requests sent and awaiting their response head.
    pub outstanding: AtomicUsize,
}

impl ServerState {
    /// Whether the server is in rotation at `now`. A passive hold that has run out ends here, and
    /// its end is reported (`Some(Change::Up)`) by the call that ended it.
    pub fn available(&self, now: u64) -> (bool, Option<Change>) {
        let until = self.out_until.load(Ordering::Relaxed);
        let probed_down = self.probed_down.load(Ordering::Relaxed);
        if until == 0 {
            return (!probed_down, None);
        }
        if now < until {
            return (false, None);
        }
        let ended = self
            .out_until
            .compare_exchange(until, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok();
        let change = (ended && !probed_down).then_some(Change::Up);
        (!probed_down, change)
    }

    /// Whether the server is in rotation at `now`, without ending a passive hold that has run out
    /// (what the health gauge shows).
    pub fn in_rotation(&self, now: u64) -> bool {
        let until = self.out_until.load(Ordering::Relaxed);
        !self.probed_down.load(Ordering::Relaxed) && (until == 0 || now >= until)
    }

    /// Counts a failed connect or timeout at `now`; `Some(Change::Down)` when it takes the server
    /// out (`max_fails` 0: never).
    pub fn failed(&self, now: u64, max_fails: u32, fail_timeout: Duration) -> Option<Change> {
        if max_fails == 0 {
            return None;
        }
        let window = ms(fail_timeout);
        let start = self.window_start.load(Ordering::Relaxed);
        if now.saturating_sub(start) > window {
            self.window_start.store(now, Ordering::Relaxed);
            self.fails.store(0, Ordering::Relaxed);
        }
        let fails = self.fails.fetch_add(1, Ordering::Relaxed) + 1;
        if fails < max_fails {
            return None;
        }
        self.fails.store(0, Ordering::Relaxed);
        let was = self
            .out_until
            .swap(now.saturating_add(window), Ordering::Relaxed);
        let was_in = was == 0 && !self.probed_down.load(Ordering::Relaxed);
        was_in.then_some(Change::Down)
    }

    /// A response head came: the failures counted so far no longer add up to an outage.
    pub fn answered(&self) {
        if self.fails.load(Ordering::Relaxed) != 0 {
            self.fails.store(0, Ordering::Relaxed);
        }
    }

    /// Sets what the probes found; the change, if the server's place in rotation changed.
    pub fn probed(&self, up: bool, now: u64) -> Option<Change> {
        let was_down = self.probed_down.swap(!up, Ordering::Relaxed);
        if was_down != up {
            return None;
        }
        let until = self.out_until.load(Ordering::Relaxed);
        let passive_out = until != 0 && now < until;
        if until != 0 && !passive_out {
            // The passive hold ran out unnoticed: this change is its end too, reported once.
            let _ = self
                .out_until
                .compare_exchange(until, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
        match (up, passive_out) {
            (_, true) => None,
            (true, false) => Some(Change::Up),
            (false, false) => Some(Change::Down),
        }
    }
}

/// Consecutive probe results, and when they cross `rise` or `fall`.
#[derive(Debug, Default)]
pub struct Streak {
    passes: u32,
    fails: u32,
}

impl Streak {
    /// Counts one probe; `Some(up)` when the streak decides the server's state.
    pub fn count(&mut self, passed: bool, rise: u32, fall: u32) -> Option<bool> {
        if passed {
            self.fails = 0;
            self.passes = self.passes.saturating_add(1);
            (self.passes >= rise).then_some(true)
        } else {
            self.passes = 0;
            self.fails = self.fails.saturating_add(1);
            (self.fails >= fall).then_some(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(10);

    #[test]
    fn max_fails_within_the_window_take_a_server_out_for_fail_timeout() {
        let state = ServerState::default();
        assert_eq!(state.failed(1_000, 2, WINDOW), None);
        assert_eq!(state.available(1_001), (true, None));
        assert_eq!(state.failed(2_000, 2, WINDOW), Some(Change::Down));
        assert_eq!(state.available(2_001), (false, None));
        assert_eq!(state.available(12_000), (true, Some(Change::Up)));
        assert_eq!(
            state.available(12_001),
            (true, None),
            "the return is reported once"
        );
    }

    #[test]
    fn failures_further_apart_than_the_window_never_add_up() {
        let state = ServerState::default();
        assert_eq!(state.failed(1_000, 2, WINDOW), None);
        assert_eq!(state.failed(12_000, 2, WINDOW), None);
        assert_eq!(state.available(12_001), (true, None));
    }

    #[test]
    fn an_answer_clears_the_failures_counted() {
        let state = ServerState::default();
        assert_eq!(state.failed(1_000, 2, WINDOW), None);
        state.answered();
        assert_eq!(state.failed(1_500, 2, WINDOW), None);
    }

    #[test]
    fn zero_max_fails_never_takes_a_server_out() {
        let state = ServerState::default();
        for now in 1..10 {
            assert_eq!(state.failed(now, 0, WINDOW), None);
        }
        assert_eq!(state.available(10), (true, None));
    }

    #[test]
    fn probes_take_a_server_out_after_fall_and_back_after_rise() {
        let (state, mut streak) = (ServerState::default(), Streak::default());
        let mut probe = |passed| {
            streak
                .count(passed, 2, 3)
                .and_then(|up| state.probed(up, 1))
        };
        assert_eq!(probe(false), None);
        assert_eq!(probe(false), None);
        assert_eq!(probe(false), Some(Change::Down));
        assert_eq!(probe(false), None);
        assert_eq!(probe(true), None);
        assert_eq!(probe(true), Some(Change::Up));
        assert_eq!(probe(true), None);
    }

    #[test]
    fn a_return_after_both_checks_held_a_server_out_is_reported_once() {
        let state = ServerState::default();
        assert_eq!(state.failed(1_000, 1, WINDOW), Some(Change::Down));
        assert!(!state.in_rotation(1_001));
        assert_eq!(state.probed(false, 2_000), None, "already out");
        assert!(
            !state.in_rotation(20_000),
            "the probes hold it out after the window"
        );
        assert_eq!(state.probed(true, 20_000), Some(Change::Up));
        assert!(state.in_rotation(20_000));
        assert_eq!(state.available(20_001), (true, None));
    }
}
